//! How findings are printed: for people (text), for scripts (JSON), and for code-scanning
//! annotations on pull requests (SARIF 2.1.0, OASIS `sarif-schema-2.1.0.json`).

use super::Report;
use super::rules::{Finding, Rule};
use serde_json::{Value, json};

/// People: one block per finding, `file:line: level[rule]: message`, then why, fix and the
/// other objects involved.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    for f in &report.findings {
        let Some(first) = f.locations.first() else {
            continue;
        };
        let silenced = f
            .suppressed
            .as_ref()
            .map(|r| format!(" (silenced: {r})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}:{}: {}[{}]: {}{silenced}\n",
            first.file, first.line, f.level, f.rule, f.message
        ));
        if f.suppressed.is_some() {
            continue;
        }
        for l in f.locations.iter().skip(1) {
            out.push_str(&format!("  {}:{}: {}\n", l.file, l.line, l.object));
        }
        out.push_str(&format!("  why: {}\n", f.why));
        let mut lines = f.fix.lines();
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
            o.group_kind(),
            if ns.is_empty() { "-" } else { ns },
            o.name
        ));
    }
    out
}

pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
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
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn location(file: &str, line: usize, object: &str, id: Option<usize>) -> Value {
    let mut l = json!({
        "physicalLocation": {
            "artifactLocation": {"uri": uri(file)},
            "region": {"startLine": line.max(1)},
        },
        "message": {"text": object},
    });
    if let Some(id) = id {
        l["id"] = json!(id);
    }
    l
}

/// A relative path as a URI reference (SARIF §3.10): forward slashes, spaces and `%` escaped.
fn uri(file: &str) -> String {
    let path = file.replace('\\', "/");
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            ' ' => out.push_str("%20"),
            '%' => out.push_str("%25"),
            '#' => out.push_str("%23"),
            '?' => out.push_str("%3F"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            c => out.push(c),
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
        "message": {"text": format!("{}\nWhy: {}\nFix: {}", f.message, f.why, f.fix)},
        "locations": locations,
    });
    if !related.is_empty() {
        r["relatedLocations"] = json!(related);
    }
    if let Some(reason) = &f.suppressed {
        r["suppressions"] = json!([{"kind": "inSource", "justification": reason}]);
    }
    r
}
