//! How findings are printed: for people (text), for scripts (JSON), and for code-scanning
//! annotations on pull requests (SARIF 2.1.0, OASIS `sarif-schema-2.1.0.json`).

use super::Report;
use super::printable::{json_escaped, printable, printable_lines};
use super::rules::{Finding, Rule};
use serde_json::{Value, json};

/// People: one block per finding, `file:line: level[rule]: message`, then why, fix and the
/// other objects involved. Manifest text is [`printable`]: one line, no control sequences.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    for f in &report.findings {
        let Some(first) = f.locations.first() else {
            continue;
        };
        let silenced = f
            .suppressed
            .as_ref()
            .map(|r| format!(" (silenced: {})", printable(r)))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}:{}: {}[{}]: {}{silenced}\n",
            printable(&first.file),
            first.line,
            f.level,
            f.rule,
            printable(&f.message)
        ));
        if f.suppressed.is_some() {
            continue;
        }
        for l in f.locations.iter().skip(1) {
            out.push_str(&format!(
                "  {}:{}: {}\n",
                printable(&l.file),
                l.line,
                printable(&l.object)
            ));
        }
        out.push_str(&format!("  why: {}\n", printable(&f.why)));
        let fix = printable_lines(&f.fix);
        let mut lines = fix.lines();
        if let Some(head) = lines.next() {
            out.push_str(&format!("  fix: {head}\n"));
        }
        for line in lines {
            out.push_str(&format!("       {line}\n"));
        }
    }
    let active = report.active().count();
    let silenced = report.findings.len() - active;
    out.push_str(&format!(
        "{active} finding{} in {} object{}{}\n",
        if active == 1 { "" } else { "s" },
        report.objects,
        if report.objects == 1 { "" } else { "s" },
        if silenced > 0 {
            format!(" ({silenced} silenced)")
        } else {
            String::new()
        }
    ));
    out
}

/// The order Argo CD applies `objects` in (`sync_order`): one line per object and phase,
/// `PHASE WAVE KIND NAMESPACE/NAME` (`-` for no namespace), moment by moment. Within one moment
/// the lines follow gitops-engine's kind order, but Argo CD applies all of a moment at once.
pub fn order(objects: &[super::Object], destination: &str) -> String {
    let mut out = String::new();
    for t in super::sync_order::sync_tasks(objects, destination) {
        let o = &objects[t.object];
        let ns = o.ns(destination);
        out.push_str(&format!(
            "{} {} {} {}/{}\n",
            t.at.phase,
            t.at.wave,
            printable(&o.group_kind()),
            printable(if ns.is_empty() { "-" } else { ns }),
            printable(&o.name)
        ));
    }
    out
}

/// Scripts: the report as it is, every string JSON-escaped (control characters included).
pub fn json(report: &Report) -> String {
    json_escaped(
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
    )
}

/// SARIF 2.1.0: one run, wavegate's rules as the driver's rules, one result per finding with
/// the first object as its location and the others as related locations; silenced findings
/// carry an in-source suppression with the annotation's reason.
pub fn sarif(report: &Report) -> String {
    let rules: Vec<Value> = Rule::ALL
        .iter()
        .map(|r| {
            json!({
                "id": r.id(),
                "name": r.id(),
                "shortDescription": {"text": r.summary()},
                "fullDescription": {"text": r.summary()},
                "defaultConfiguration": {"level": r.level()},
            })
        })
        .collect();
    let results: Vec<Value> = report.findings.iter().map(result).collect();
    let doc = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "wavegate",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    json_escaped(
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
    )
}

fn location(file: &str, line: usize, object: &str, id: Option<usize>) -> Value {
    let mut l = json!({
        "physicalLocation": {
            "artifactLocation": {"uri": uri(file)},
            "region": {"startLine": line.max(1)},
        },
        "message": {"text": printable(object)},
    });
    if let Some(id) = id {
        l["id"] = json!(id);
    }
    l
}

/// A path as a relative URI reference (RFC 3986 §4.2; SARIF §3.10 `artifactLocation.uri`,
/// resolved by code scanning against the repository root). Every byte but the unreserved
/// characters and `/` is percent-encoded, so no file name becomes a scheme (`https:` is
/// `https%3A`) or a query; an absolute path is made relative to the working directory when it
/// is under it, else its leading `/`s are dropped, so none becomes an absolute or network-path
/// reference (`/etc/passwd`, `//host/x`).
fn uri(file: &str) -> String {
    let path = std::path::Path::new(file);
    let cwd = std::env::current_dir().ok();
    let relative = match cwd.as_deref().and_then(|d| path.strip_prefix(d).ok()) {
        Some(inside) if path.is_absolute() => inside.to_string_lossy().into_owned(),
        _ => file.trim_start_matches('/').to_string(),
    };
    let relative = if cfg!(windows) {
        relative.replace('\\', "/")
    } else {
        relative
    };
    let mut out = String::with_capacity(relative.len());
    for b in relative.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn result(f: &Finding) -> Value {
    let rule_index = Rule::ALL.iter().position(|r| *r == f.rule).unwrap_or(0);
    let locations: Vec<Value> = f
        .locations
        .iter()
        .take(1)
        .map(|l| location(&l.file, l.line, &l.object, None))
        .collect();
    let related: Vec<Value> = f
        .locations
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, l)| location(&l.file, l.line, &l.object, Some(i)))
        .collect();
    let mut r = json!({
        "ruleId": f.rule.id(),
        "ruleIndex": rule_index,
        "level": f.level,
        "message": {"text": format!(
            "{}\nWhy: {}\nFix: {}",
            printable(&f.message),
            printable(&f.why),
            printable_lines(&f.fix)
        )},
        "locations": locations,
    });
    if !related.is_empty() {
        r["relatedLocations"] = json!(related);
    }
    if let Some(reason) = &f.suppressed {
        r["suppressions"] = json!([{"kind": "inSource", "justification": printable(reason)}]);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::{Options, Source, lint_sources};

    /// A line break, then a GitHub Actions workflow command; a terminal clearing the screen;
    /// a carriage return; the one-byte CSI; a right-to-left override.
    const HOSTILE: &str = "x\n::error file=README.md,line=1::forged\u{1b}[2J\r\u{9b}31m\u{202e}";

    /// What a person, a terminal or a CI runner would take for a line of its own, or for a
    /// control sequence.
    fn assert_harmless(format: &str, out: &str) {
        for c in out.chars() {
            assert!(
                c == '\n' || !(c.is_control() || ('\u{2028}'..='\u{202e}').contains(&c)),
                "{format}: raw {c:?} in {out}"
            );
        }
        for line in out.lines() {
            assert!(!line.trim_start().starts_with("::"), "{format}: {line:?}");
        }
    }

    /// Every string in a JSON document.
    fn strings(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            Value::Object(m) => m.iter().for_each(|(k, v)| {
                out.push(k.clone());
                strings(v, out)
            }),
            _ => {}
        }
    }

    /// A YAML double-quoted scalar holding `s` exactly.
    fn quoted(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' | '\\' => out.extend(['\\', c]),
                c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
                c => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            }
        }
        out.push('"');
        out
    }

    fn hostile_report() -> Report {
        // Hostile text where a manifest can put it: the file name, an env var's name, a
        // silencing reason.
        let manifest = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n  annotations:\n    wavegate.dev/lint-ignore: {reason}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          env:\n            - name: {env}\n              valueFrom: {{secretKeyRef: {{name: db, key: p}}}}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  annotations: {{argocd.argoproj.io/sync-wave: \"1\"}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: other\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          env:\n            - name: {env}\n              valueFrom: {{secretKeyRef: {{name: db, key: p}}}}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {{app: {selector}}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers: [{{name: web}}]\n",
            // A reason is one line (several are separated by line breaks).
            // A selector's label value reaches the fix, which spans several lines.
            selector = quoted(HOSTILE),
            reason = quoted(&format!("later-wave: {}", HOSTILE.replace('\n', " "))),
            env = quoted(HOSTILE),
        );
        let sources = [Source::Text {
            name: format!("manifests/{HOSTILE}.yaml"),
            text: manifest,
        }];
        let report = lint_sources(&sources, &Options::default()).unwrap();
        let rules: Vec<Rule> = report.findings.iter().map(|f| f.rule).collect();
        assert!(rules.contains(&Rule::SelectorMatchesNothing), "{report:#?}");
        assert!(rules.contains(&Rule::LaterWave), "{report:#?}");
        report
    }

    #[test]
    fn hostile_names_and_paths_cannot_write_the_log_in_text_or_sarif() {
        let report = hostile_report();
        assert_harmless("text", &text(&report));
        let sarif: Value = serde_json::from_str(&sarif(&report)).unwrap();
        let mut all = Vec::new();
        strings(&sarif, &mut all);
        for s in &all {
            assert_harmless("sarif", s);
        }
        // JSON keeps the data exactly, escaped as JSON.
        let json_text = json(&report);
        assert_harmless("json", &json_text);
        let back: Value = serde_json::from_str(&json_text).unwrap();
        let mut all = Vec::new();
        strings(&back, &mut all);
        assert!(all.iter().any(|s| s.contains(HOSTILE)), "{json_text}");
    }

    #[test]
    fn hostile_names_cannot_write_the_log_in_the_order() {
        let mut objects = Vec::new();
        crate::lint::manifest::parse(
            "m.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ns}\n",
            true,
            &mut objects,
        )
        .unwrap();
        // Built by hand: the manifest reader refuses such names.
        objects[0].name = HOSTILE.to_string();
        objects[0].namespace = Some(HOSTILE.to_string());
        objects[0].kind = HOSTILE.to_string();
        let out = order(&objects, "");
        assert_harmless("order", &out);
        assert_eq!(out.lines().count(), 1, "{out}");
    }

    #[test]
    fn sarif_uris_are_relative_references_whatever_the_path() {
        for path in [
            "https://evil.example/x.yaml",
            "javascript:alert(1).yaml",
            "/etc/passwd",
            "//evil.example/share/x.yaml",
            "C:\\Windows\\x.yaml",
            "a b/%41#?<>[]{}|^`\"'.yaml",
            "caf\u{e9}/\n\u{1b}.yaml",
        ] {
            let u = uri(path);
            let scheme = u.split_once(':').is_some_and(|(s, _)| !s.contains('/'));
            assert!(!scheme, "{path:?} -> {u:?} has a scheme");
            assert!(!u.starts_with('/'), "{path:?} -> {u:?} is not relative");
            assert!(
                u.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._~/%".contains(c)),
                "{path:?} -> {u:?}"
            );
        }
        assert_eq!(uri("manifests/app one.yaml"), "manifests/app%20one.yaml");
    }
}
