//! Conformance: every bundled health script of Argo CD 3.4.7, 3.5.1 and 3.6.1, run by
//! wavegate's engine on Argo CD's own test objects, must give Argo CD's own expected status and
//! message (`resource_customizations/<group>/<Kind>/health_test.yaml`, the cases argo-cd's
//! `util/lua/health_test.go` `TestLuaHealthScript` runs).
//!
//! Nothing of Argo CD is copied here: the module is located with `go mod download -json` (the
//! Go module cache, or the module proxy) and read at test time. A missing `go` or module fails
//! the test; it is never skipped.

use crate::lint::go_module;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use wavegate::argocd_lua::{ArgoHealth, Bundled, Engine, Limits, Scripts};

const RELEASES: &[&str] = &["v3.4.7", "v3.5.1", "v3.6.1"];

/// Cases that cannot pass, with the reason: `(release or "*", "<group>/<Kind>/<inputPath>")`.
/// A case listed here that passes fails the test too, so the list stays true.
const KNOWN: &[(&str, &str, &str)] = &[];

struct HealthTest {
    tests: Vec<Case>,
}

struct Case {
    input_path: String,
    health_status: Expected,
}

struct Expected {
    status: String,
    message: String,
}

/// A field as Go's `encoding/json` finds it (through `sigs.k8s.io/yaml`): an exact match, else
/// a case-insensitive one (some files say `inputpath`).
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let o = v.as_object()?;
    o.get(name).or_else(|| {
        o.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}

impl HealthTest {
    fn from_yaml(v: &Value) -> HealthTest {
        let cases = field(v, "tests")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        HealthTest {
            tests: cases
                .iter()
                .map(|c| {
                    let h = field(c, "healthStatus");
                    Case {
                        input_path: text(field(c, "inputPath")),
                        health_status: Expected {
                            status: text(h.and_then(|h| field(h, "status"))),
                            message: text(h.and_then(|h| field(h, "message"))),
                        },
                    }
                })
                .collect(),
        }
    }
}

struct Tally {
    passed: usize,
    total: usize,
    failures: Vec<String>,
    known_passing: Vec<String>,
}

fn conformance(release: &str) -> Tally {
    let module = go_module(&format!("github.com/argoproj/argo-cd/v3@{release}"));
    let dir = module.join("resource_customizations");
    let bundled = Bundled::load(&dir).unwrap_or_else(|e| panic!("{release}: {e}"));
    assert!(
        bundled.len() > 100,
        "{release}: only {} scripts",
        bundled.len()
    );
    let scripts = Scripts {
        custom: Default::default(),
        bundled: Arc::new(bundled),
    };
    // Argo CD's own bound: one second per run; the instruction bound stays wavegate's.
    let engine = Engine::new(Limits::default());
    let mut tally = Tally {
        passed: 0,
        total: 0,
        failures: Vec::new(),
        known_passing: Vec::new(),
    };
    for (kind_dir, tests) in health_tests(&dir) {
        let rel = kind_dir.strip_prefix(&dir).unwrap().display().to_string();
        for case in tests.tests {
            let id = format!("{rel}/{}", case.input_path);
            tally.total += 1;
            let got = run_case(&engine, &scripts, &kind_dir.join(&case.input_path));
            let want = (case.health_status.status, case.health_status.message);
            let known = KNOWN
                .iter()
                .find(|(r, c, _)| (*r == "*" || *r == release) && *c == id);
            if got == want {
                tally.passed += 1;
                if known.is_some() {
                    tally.known_passing.push(id);
                }
            } else if known.is_none() {
                tally
                    .failures
                    .push(format!("{id}: wavegate {got:?}, Argo CD expects {want:?}"));
            }
        }
    }
    tally
}

/// Argo CD's `GetHealthScript` picks the script by the object's own group and kind (wildcard
/// folders included), then `ExecuteHealthLua` runs it; an error is `Unknown` with its text.
fn run_case(engine: &Engine, scripts: &Scripts, input: &Path) -> (String, String) {
    let text =
        std::fs::read_to_string(input).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    // `sigs.k8s.io/yaml.Unmarshal` reads the first document of a file that holds several.
    let first = serde_yaml::Deserializer::from_str(&text)
        .next()
        .unwrap_or_else(|| panic!("{}: no YAML document", input.display()));
    let object = Value::deserialize(first).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = object["kind"].as_str().unwrap_or_default();
    let Some(script) = scripts.lookup(group, kind) else {
        return ("<no script>".into(), format!("{group}/{kind}"));
    };
    let result = engine.run(&script.source, script.libraries, &object);
    let h = ArgoHealth::of(&result);
    (h.status, h.message)
}

fn health_tests(dir: &Path) -> Vec<(std::path::PathBuf, HealthTest)> {
    let mut out = Vec::new();
    let mut groups: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    groups.sort();
    for g in groups.into_iter().filter(|g| g.is_dir()) {
        let mut kinds: Vec<_> = std::fs::read_dir(&g)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        kinds.sort();
        for k in kinds {
            let file = k.join("health_test.yaml");
            if !file.is_file() || !k.join("health.lua").is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let tests: Value =
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            out.push((k, HealthTest::from_yaml(&tests)));
        }
    }
    out
}

#[test]
fn bundled_health_scripts_give_argo_cds_own_expected_results() {
    let mut problems = Vec::new();
    for release in RELEASES {
        let t = conformance(release);
        eprintln!(
            "Argo CD {release}: {} of {} health_test.yaml cases pass ({} listed as known differences)",
            t.passed,
            t.total,
            t.total - t.passed - t.failures.len()
        );
        for f in &t.failures {
            problems.push(format!("{release} {f}"));
        }
        for k in &t.known_passing {
            problems.push(format!(
                "{release} {k}: listed in KNOWN but passes; remove it"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} differences:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The incident: a freshly created CNPG `Cluster` has no status, which kstatus calls Current,
/// so a gate on it passed. Argo CD's bundled script (3.5.1, 3.6.1) never calls it Healthy: with
/// no status at all it fails on `obj.status.phaseReason` (Argo CD shows Unknown with that
/// error, and so does wavegate); with a status but no conditions yet it is Progressing; only
/// "Cluster in healthy state" is Healthy.
#[test]
fn a_cnpg_cluster_without_status_is_never_healthy_until_argo_cds_script_says_so() {
    let module = go_module("github.com/argoproj/argo-cd/v3@v3.5.1");
    let bundled = Bundled::load(&module.join("resource_customizations")).unwrap();
    let scripts = Scripts {
        custom: Default::default(),
        bundled: Arc::new(bundled),
    };
    let script = scripts.lookup("postgresql.cnpg.io", "Cluster").unwrap();
    assert_eq!(script.judged_by(), "argocd-lua:postgresql.cnpg.io/Cluster");
    let engine = Engine::default();
    let run =
        |cluster: &Value| ArgoHealth::of(&engine.run(&script.source, script.libraries, cluster));
    let mut cluster: Value = serde_json::json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": "forgejo", "namespace": "ddb", "generation": 1},
        "spec": {"instances": 1}
    });
    let fresh = run(&cluster);
    assert_eq!(fresh.status, "Unknown", "{fresh:?}");
    assert!(fresh.message.contains("attempt to index"), "{fresh:?}");
    cluster["status"] = serde_json::json!({"phase": "Setting up primary", "phaseReason": "Creating primary instance forgejo-1"});
    let starting = run(&cluster);
    assert_eq!(
        (starting.status.as_str(), starting.message.as_str()),
        ("Progressing", "Creating primary instance forgejo-1")
    );
    cluster["status"] = serde_json::json!({
        "phase": "Cluster in healthy state", "instances": 1, "readyInstances": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterIsReady",
                        "message": "Cluster is Ready"}]
    });
    let ready = run(&cluster);
    assert_eq!(ready.status, "Healthy", "{ready:?}");
}
