//! One truth in two languages (DESIGN.md): where a rule exists both in Rust and in a Lua health
//! script shipped for Argo CD, the same objects go through both and the statuses must agree.
//!
//! The Lua runs in the argocd-cm sandbox rebuilt by `argocd/lua-harness` (gopher-lua, the VM Argo
//! CD embeds; no `string`/`math`), through its `luahealth --batch` command, built once per run
//! with `go build`. Go is required: a missing toolchain fails the test, it does not skip it.
//!
//! "Agree" means the status Argo CD ends up acting on. The shipped scripts turn Missing and
//! Unknown into Progressing (an object that exists is never Missing, and Argo CD leaves a child
//! Application's Missing/Unknown out of its parent's health, argo-cd #6708), so a Rust Missing or
//! Unknown is compared as Progressing ([`argo_view`]). Messages may differ.
//!
//! Covered: Application (every fixture, plus random states), CNPG Database (every fixture), the
//! annotation-mode contract for Service, Database, CrdbCluster and Application (whatever verdict
//! Rust writes, the Lua reads back), and WaveGate (the status the gate controller writes).

use crate::proptest_config;

use proptest::prelude::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use wavegate::checks::{application, cnpg};
use wavegate::health::{HealthStatus, Verdict};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn script(kind_dir: &str) -> String {
    format!("{ROOT}/argocd/resource_customizations/{kind_dir}/health.lua")
}

/// One `luahealth --batch` process shared by every test in this binary.
struct Lua {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn lua_process() -> &'static Mutex<Lua> {
    static LUA: OnceLock<Mutex<Lua>> = OnceLock::new();
    LUA.get_or_init(|| {
        let harness = Path::new(ROOT).join("argocd/lua-harness");
        let binary = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("luahealth");
        let built = Command::new("go")
            .args(["build", "-o"])
            .arg(&binary)
            .arg("./cmd/luahealth")
            .current_dir(&harness)
            .status()
            .expect("running `go build` for the Lua harness (Go is required for this test)");
        assert!(built.success(), "go build ./cmd/luahealth failed");
        let mut child = Command::new(&binary)
            .arg("--batch")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting luahealth --batch");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Mutex::new(Lua {
            _child: child,
            stdin,
            stdout,
        })
    })
}

/// The shipped script `kind_dir` judging `object` in Argo CD's sandbox: (status, message).
fn lua(kind_dir: &str, object: &Value) -> (String, String) {
    let mut lua = lua_process().lock().unwrap_or_else(|e| e.into_inner());
    let request = json!({"script": script(kind_dir), "object": object});
    writeln!(lua.stdin, "{request}").unwrap();
    lua.stdin.flush().unwrap();
    let mut line = String::new();
    lua.stdout.read_line(&mut line).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    if let Some(error) = answer.get("error") {
        panic!("{kind_dir}/health.lua failed on {object}: {error}");
    }
    let text = |k: &str| answer[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("message"))
}

/// A Rust status as Argo CD acts on it through the shipped scripts.
fn argo_view(status: HealthStatus) -> &'static str {
    match status {
        HealthStatus::Missing | HealthStatus::Unknown => "Progressing",
        other => other.as_str(),
    }
}

fn yaml_files(dir: &str) -> Vec<(String, Value)> {
    let dir = Path::new(ROOT).join(dir);
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let value =
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), value)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The object without wavegate's annotation-mode opt-in, so the native rule is compared.
/// (Annotation mode has its own parity test below.)
fn without_opt_in(mut object: Value) -> Value {
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove("wavegate.dev/annotate");
    }
    object
}

fn name_of(object: &Value) -> (String, String) {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (text("/metadata/namespace"), text("/metadata/name"))
}

fn application_disagreement(app: &Value) -> Option<String> {
    let (namespace, name) = name_of(app);
    let rust = application::check(&namespace, &name, Some(app));
    let (status, message) = lua("argoproj.io/Application", app);
    (argo_view(rust.status) != status).then(|| {
        format!(
            "Rust {} ({}) but Lua {status} ({message})",
            rust.status, rust.message
        )
    })
}

#[test]
fn every_application_fixture_has_the_same_status_in_rust_and_lua() {
    let fixtures: Vec<(String, Value)> = yaml_files("tests/fixtures/application")
        .into_iter()
        .chain(yaml_files(
            "argocd/resource_customizations/argoproj.io/Application/testdata",
        ))
        .collect();
    assert!(fixtures.len() >= 30, "only {} fixtures", fixtures.len());
    let failures: Vec<String> = fixtures
        .into_iter()
        .filter_map(|(path, app)| {
            application_disagreement(&without_opt_in(app)).map(|d| format!("{path}: {d}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A Ready CNPG Cluster: the Lua cannot see the Cluster, so the Rust side gets one that does
/// not hold the Database back.
fn ready_cluster() -> Value {
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": "ddb", "generation": 1},
        "spec": {"instances": 1},
        "status": {"readyInstances": 1, "currentPrimary": "pg-1", "targetPrimary": "pg-1",
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

#[test]
fn every_database_fixture_has_the_same_status_in_rust_and_lua() {
    let fixtures: Vec<(String, Value)> = yaml_files("tests/fixtures/cnpg")
        .into_iter()
        .chain(yaml_files(
            "argocd/resource_customizations/postgresql.cnpg.io/Database/testdata",
        ))
        .filter(|(_, o)| o["kind"] == "Database")
        .collect();
    assert!(fixtures.len() >= 12, "only {} fixtures", fixtures.len());
    let failures: Vec<String> = fixtures
        .into_iter()
        .filter_map(|(path, db)| {
            let db = without_opt_in(db);
            let (namespace, name) = name_of(&db);
            // The Lua has no memory between evaluations, so it cannot run a grace period: a
            // failure Rust turns Degraded only after it has persisted is compared at its first
            // observation (Progressing), which is all the Lua ever says about it.
            let rust = cnpg::check(
                &namespace,
                &name,
                Some(&db),
                Some(&ready_cluster()),
                &cnpg::Params::default(),
            )
            .resolve(Duration::ZERO, Duration::from_secs(60));
            let (status, message) = lua("postgresql.cnpg.io/Database", &db);
            (argo_view(rust.status) != status).then(|| {
                format!(
                    "{path}: Rust {} ({}) but Lua {status} ({message})",
                    rust.status, rust.message
                )
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Annotation mode: whatever verdict Rust writes (src/annotate.rs), the kind's script reads back
/// the same status while it is fresh — judged at the current generation, for the current
/// selector (Services), before its valid-until — and Progressing otherwise.
#[test]
fn annotation_verdicts_read_back_the_same_in_lua_for_every_kind_and_status() {
    use wavegate::annotate::{
        JUDGED_SELECTOR, OPT_IN, VALID_UNTIL, judged_selector, wanted_annotations,
    };
    let kinds = [
        ("Service", "v1", None),
        (
            "postgresql.cnpg.io/Database",
            "postgresql.cnpg.io/v1",
            Some(4),
        ),
        (
            "crdb.cockroachlabs.com/CrdbCluster",
            "crdb.cockroachlabs.com/v1alpha1",
            Some(2),
        ),
        ("argoproj.io/Application", "argoproj.io/v1alpha1", Some(7)),
    ];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut compared = 0;
    for (dir, api_version, generation) in kinds {
        let kind = dir.rsplit('/').next().unwrap();
        for status in HealthStatus::ALL {
            let verdict = Verdict::new(status, format!("{kind} ns/x: wavegate says {status}"));
            let mut object = json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {"name": "x", "namespace": "ns"},
                "spec": {},
            });
            if let Some(g) = generation {
                object["metadata"]["generation"] = g.into();
            }
            if kind == "Service" {
                object["spec"]["selector"] =
                    json!({"app": "forgejo", "app.kubernetes.io/instance": "forgejo"});
            }
            // What annotate.rs writes for this verdict: judged at `judged`, valid until `until`.
            let annotated = |judged: Option<i64>, until: i64| {
                let mut annotations = serde_json::Map::new();
                annotations.insert(OPT_IN.into(), "true".into());
                for (k, v) in wanted_annotations(&verdict, judged) {
                    annotations.insert(k, v.into());
                }
                if let Some(selector) = (kind == "Service")
                    .then(|| judged_selector(&object))
                    .flatten()
                {
                    annotations.insert(JUDGED_SELECTOR.into(), selector.into());
                }
                annotations.insert(VALID_UNTIL.into(), until.to_string().into());
                let mut o = object.clone();
                o["metadata"]["annotations"] = Value::Object(annotations);
                o
            };
            let mut cases = vec![
                ("fresh", annotated(generation, now + 600), argo_view(status)),
                ("expired", annotated(generation, now - 600), "Progressing"),
            ];
            if let Some(g) = generation {
                cases.push((
                    "older generation",
                    annotated(Some(g - 1), now + 600),
                    "Progressing",
                ));
            }
            if kind == "Service" {
                let mut moved = annotated(generation, now + 600);
                moved["spec"]["selector"]["app"] = "gitea".into();
                cases.push(("other selector", moved, "Progressing"));
            }
            for (case, object, want) in cases {
                let (got, message) = lua(dir, &object);
                assert_eq!(
                    got, want,
                    "{dir}, {case}: Rust wrote {status}; Lua said {got} ({message})"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 6 * (3 + 3 + 3 + 3));
}

/// The status the gate controller writes for each gate verdict is the one Argo CD reads from the
/// WaveGate script, unchanged, once the generation is current and until its validUntil; before
/// and after that, Progressing.
#[test]
fn wavegate_status_written_by_rust_reads_back_the_same_in_lua() {
    use wavegate::gate::crd::WaveGate;
    use wavegate::gate::status::next_status;
    let gate: WaveGate = serde_yaml::from_str(
        "apiVersion: wavegate.dev/v1alpha1\nkind: WaveGate\nmetadata: {name: g, namespace: ddb, generation: 3}\nspec:\n  checks:\n    - name: db\n      cnpgDatabase: {name: forgejo}\n",
    )
    .unwrap();
    let now = k8s_openapi::jiff::Timestamp::now();
    let validity = Some(Duration::from_secs(600));
    for status in HealthStatus::ALL {
        let verdict = Verdict::new(status, format!("db: ddb/forgejo: {status}"));
        let write = |now| {
            let written = next_status(
                &gate,
                None,
                vec![("db".into(), verdict.clone())],
                verdict.clone(),
                None,
                now,
                validity,
            );
            let mut object = serde_json::to_value(&gate).unwrap();
            object["status"] = serde_json::to_value(&written).unwrap();
            object
        };
        let mut object = write(now);
        let (got, message) = lua("wavegate.dev/WaveGate", &object);
        assert_eq!(got, status.as_str(), "{message}");

        object["metadata"]["generation"] = 4.into();
        let (got, message) = lua("wavegate.dev/WaveGate", &object);
        assert_eq!(got, "Progressing", "stale generation: {message}");

        // Written an hour ago and never confirmed since (wavegate stopped): expired.
        let hour_ago = now - std::time::Duration::from_secs(3600);
        let (got, message) = lua("wavegate.dev/WaveGate", &write(hour_ago));
        assert_eq!(got, "Progressing", "expired verdict: {message}");
    }
}

/// The WaveGate script's testdata shows what wavegate writes; its `status.health` must be what
/// the gate controller computes (`gate_health`) from the fixture's own `status.checks`, so the
/// messages Argo CD is shown in those tests cannot drift from the Rust code. Fixtures
/// without a health or with a status wavegate never writes exist to test the script's guards
/// and are listed, not skipped silently.
#[test]
fn wavegate_testdata_health_is_what_the_gate_controller_computes() {
    use wavegate::gate::timeout::{gate_health, parse_timeout};
    let guards = [
        "no-health.yaml",
        "no-status.yaml",
        "unrecognised-status.yaml",
    ];
    let mut checked = 0;
    for (path, gate) in yaml_files("argocd/resource_customizations/wavegate.dev/WaveGate/testdata")
    {
        if guards.iter().any(|g| path.ends_with(g)) {
            continue;
        }
        let written: Verdict = serde_json::from_value(gate["status"]["health"].clone())
            .unwrap_or_else(|e| panic!("{path}: status.health: {e}"));
        let checks: Vec<(String, Verdict)> = gate["status"]["checks"]
            .as_array()
            .unwrap_or_else(|| panic!("{path}: no status.checks to compute the health from"))
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_string(),
                    serde_json::from_value(c.clone()).unwrap(),
                )
            })
            .collect();
        let spelled = gate["spec"]["timeout"].as_str();
        let timeout = spelled.map(|t| (t, parse_timeout(t).unwrap()));
        // A fixture that shows a timed-out gate has waited its full timeout.
        let waited = match timeout {
            Some((_, limit)) if written.message.starts_with("timed out") => limit,
            _ => Duration::ZERO,
        };
        // No check in these fixtures is blind (unjudgeable because of wavegate's own state).
        let blind = std::collections::HashMap::new();
        let computed = gate_health(&checks, &blind, timeout, waited);
        assert_eq!(
            computed, written,
            "{path}: status.health is not what wavegate computes from status.checks"
        );
        checked += 1;
    }
    assert_eq!(checked, 8);
}

// ---- Random Application states -------------------------------------------------------------

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &[T]) -> proptest::sample::Select<T> {
    proptest::sample::select(items.to_vec())
}

/// A source block with the fields Argo CD compares, each from a small domain so that equal and
/// unequal values, empty and absent blocks all come up often.
fn source() -> impl Strategy<Value = Value> {
    (
        pick(&[
            "https://git.example.com/a.git",
            "https://charts.example.com",
        ]),
        pick(&["", "apps/forgejo"]),
        pick(&["", "v1", "v2", "HEAD"]),
        prop::option::of(pick(&[
            json!({}),
            json!({"values": ""}),
            json!({"valuesObject": {"replicas": 2}}),
            json!({"valuesObject": {"replicas": 3}}),
            json!({"parameters": [{"name": "image.tag", "value": "9"}]}),
            json!({"valueFiles": ["values.yaml"]}),
            json!({"valueFiles": ["values.yaml", "prod.yaml"]}),
            json!({"parameters": []}),
        ])),
        prop::option::of(pick(&[
            json!({}),
            json!({"images": ["forgejo:9.0.0"]}),
            json!({"images": ["forgejo:9.0.1"]}),
        ])),
        prop::option::of(pick(&[
            json!({"recurse": false}),
            json!({"recurse": true}),
            json!({"exclude": "*.test.yaml"}),
        ])),
        prop::option::of(pick(&[
            json!({"name": "envsubst"}),
            json!({"name": "envsubst", "env": [{"name": "D", "value": "a"}]}),
        ])),
    )
        .prop_map(
            |(repo, path, revision, helm, kustomize, directory, plugin)| {
                let mut s = json!({"repoURL": repo, "path": path, "targetRevision": revision});
                for (key, block) in [
                    ("helm", helm),
                    ("kustomize", kustomize),
                    ("directory", directory),
                    ("plugin", plugin),
                ] {
                    if let Some(block) = block {
                        s[key] = block;
                    }
                }
                s
            },
        )
}

fn destination() -> impl Strategy<Value = Value> {
    pick(&[
        json!({"server": "https://kubernetes.default.svc", "namespace": "cicd"}),
        json!({"server": "https://kubernetes.default.svc", "namespace": "forge"}),
        json!({"name": "in-cluster", "namespace": "cicd"}),
    ])
}

/// spec sources: `Err(source)` for single-source, `Ok(sources)` for multi-source.
fn sources() -> impl Strategy<Value = Result<Vec<Value>, Value>> {
    prop_oneof![
        source().prop_map(Err),
        prop::collection::vec(source(), 1..3).prop_map(Ok),
    ]
}

/// What the last comparison saw, relative to what the spec wants now: the same, the same with
/// empty blocks added (still equal for Argo CD), one field changed, or an unrelated draw.
fn drifted(wanted: Value, fresh: Value, same: bool, mutation: u8) -> Value {
    if same {
        return wanted;
    }
    let change = |mut source: Value| -> Value {
        match mutation {
            0 => source["helm"] = json!({"parameters": [], "values": ""}),
            1 => source["kustomize"] = json!({}),
            2 => source["targetRevision"] = "v9".into(),
            3 => source["helm"] = json!({"valuesObject": {"replicas": 5}}),
            4 => source["directory"] = json!({"recurse": true}),
            _ => return fresh.clone(),
        }
        source
    };
    match wanted {
        Value::Array(mut sources) if mutation == 5 && sources.len() > 1 => {
            sources.pop();
            Value::Array(sources)
        }
        Value::Array(mut sources) => {
            let first = sources.remove(0);
            sources.insert(0, change(first));
            Value::Array(sources)
        }
        single => change(single),
    }
}

#[derive(Debug, Clone)]
struct AppState {
    app: Value,
}

fn application_state() -> impl Strategy<Value = AppState> {
    (
        (
            sources(),
            (sources(), 0u8..7),
            prop::bool::weighted(0.6),
            destination(),
            destination(),
            prop::bool::weighted(0.8),
            prop::option::of(pick(&[
                json!([]),
                json!([{"kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]),
            ])),
            prop::bool::weighted(0.8),
        ),
        (
            // Repeated entries weight the draw towards the states near Healthy, where the two
            // implementations could disagree on the one verdict that moves a wave.
            pick(&["Synced", "Synced", "Synced", "OutOfSync", "Unknown", ""]),
            pick(&[
                "Healthy",
                "Healthy",
                "Healthy",
                "Progressing",
                "Degraded",
                "Suspended",
                "Missing",
                "Unknown",
                "",
            ]),
            pick(&[
                "",
                "",
                "Succeeded",
                "Succeeded",
                "Running",
                "Terminating",
                "Failed",
                "Error",
            ]),
            pick(&[
                "none",
                "current",
                "current",
                "older-revision",
                "older-source",
            ]),
            prop::bool::weighted(0.1),
            pick(&["aaaa", "bbbb"]),
            pick(&[
                "present",
                "present",
                "present",
                "present",
                "no-status",
                "deleting",
            ]),
        ),
    )
        .prop_map(
            |(
                (
                    spec_src,
                    (fresh_src, mutation),
                    same_src,
                    dest,
                    fresh_dest,
                    same_dest,
                    ignore,
                    same_ignore,
                ),
                (sync, health, phase, result, pending, revision, shape),
            )| {
                let compared_src = drifted(
                    match &spec_src {
                        Ok(v) => Value::Array(v.clone()),
                        Err(v) => v.clone(),
                    },
                    match &fresh_src {
                        Ok(v) => Value::Array(v.clone()),
                        Err(v) => v.clone(),
                    },
                    same_src,
                    mutation,
                );
                let multi = spec_src.is_ok();
                let (source_key, revision_key) = if multi {
                    ("sources", "revisions")
                } else {
                    ("source", "revision")
                };
                let wanted_src = match &spec_src {
                    Ok(v) => Value::Array(v.clone()),
                    Err(v) => v.clone(),
                };
                let revision_value = if multi {
                    json!([revision])
                } else {
                    json!(revision)
                };
                let mut spec = json!({"project": "default", "destination": dest.clone()});
                spec[source_key] = wanted_src.clone();
                if let Some(ignore) = &ignore {
                    spec["ignoreDifferences"] = ignore.clone();
                }
                let mut compared =
                    json!({"destination": if same_dest { dest } else { fresh_dest }});
                // A comparedTo that recorded the other shape (single vs multi) is stale too.
                let compared_key = if compared_src.is_array() {
                    "sources"
                } else {
                    "source"
                };
                compared[compared_key] = compared_src;
                if same_ignore && let Some(ignore) = &ignore {
                    compared["ignoreDifferences"] = ignore.clone();
                }
                let mut status = json!({});
                if !sync.is_empty() {
                    status["sync"] = json!({"status": sync, "comparedTo": compared});
                    status["sync"][revision_key] = revision_value.clone();
                }
                if !health.is_empty() {
                    status["health"] =
                        json!({"status": health, "message": format!("child {health}")});
                }
                if !phase.is_empty() {
                    let mut op = json!({"phase": phase, "message": format!("sync {phase}")});
                    match result {
                        "current" => {
                            op["syncResult"] = json!({});
                            op["syncResult"][revision_key] = revision_value.clone();
                            op["syncResult"][source_key] = wanted_src.clone();
                        }
                        "older-revision" => {
                            op["syncResult"] = json!({});
                            op["syncResult"][revision_key] = if multi {
                                json!(["0000"])
                            } else {
                                json!("0000")
                            };
                            op["syncResult"][source_key] = wanted_src.clone();
                        }
                        "older-source" => {
                            op["syncResult"] = json!({});
                            op["syncResult"][revision_key] = revision_value.clone();
                            op["syncResult"][source_key] = if multi {
                                json!([{"repoURL": "https://old.example.com"}])
                            } else {
                                json!({"repoURL": "https://old.example.com"})
                            };
                        }
                        _ => {}
                    }
                    status["operationState"] = op;
                }
                let mut app = json!({
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "Application",
                    "metadata": {"name": "child", "namespace": "argocd", "generation": 3},
                    "spec": spec,
                });
                match shape {
                    "no-status" => {}
                    "deleting" => {
                        app["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z".into();
                        app["status"] = status;
                    }
                    _ => app["status"] = status,
                }
                if pending {
                    app["operation"] = json!({"sync": {"revision": revision}});
                }
                AppState { app }
            },
        )
}

proptest! {
    // Each case is one round trip to the Lua process (well under a millisecond); the default
    // stays small for CI, PROPTEST_CASES raises it.
    #![proptest_config(proptest_config::config(2000))]

    #[test]
    fn random_application_states_have_the_same_status_in_rust_and_lua(state in application_state()) {
        let disagreement = application_disagreement(&state.app);
        prop_assert!(disagreement.is_none(), "{}\n{}", disagreement.unwrap_or_default(),
            serde_json::to_string_pretty(&state.app).unwrap());
    }

    /// Annotation mode: the verdict wavegate writes with the state it judged reads back as
    /// written (the script renders the same judged state), and a verdict judged on another
    /// state of the same generation is not believed.
    #[test]
    fn application_verdicts_in_annotation_mode_are_believed_only_for_the_state_they_judged(
        state in application_state(),
        other in application_state(),
    ) {
        let rust = application::check("argocd", "child", Some(&state.app));
        let fresh = application_annotated(&state.app, &rust, &state.app);
        let (status, message) = lua("argoproj.io/Application", &fresh);
        prop_assert_eq!(status.as_str(), argo_view(rust.status),
            "Rust {} ({}) but Lua {} ({})", rust.status, rust.message, status, message);
        let judged_elsewhere = application::check("argocd", "child", Some(&other.app));
        let stale = application_annotated(&state.app, &judged_elsewhere, &other.app);
        let (status, message) = lua("argoproj.io/Application", &stale);
        // An Application being deleted is Progressing whatever was judged: the script applies
        // that native rule before it trusts an annotation.
        let deleting = state.app.pointer("/metadata/deletionTimestamp").is_some();
        if deleting || application::judged_state(&other.app) != application::judged_state(&state.app) {
            prop_assert_eq!(status.as_str(), "Progressing", "{}", message);
        } else {
            prop_assert_eq!(status.as_str(), argo_view(judged_elsewhere.status), "{}", message);
        }
    }
}

/// `app` carrying the annotations annotation mode writes for `verdict`, judged on `judged`
/// (whose generation is `app`'s: the generation check is not what is tested here).
fn application_annotated(app: &Value, verdict: &Verdict, judged: &Value) -> Value {
    use wavegate::annotate::{JUDGED_STATE, OPT_IN, VALID_UNTIL, wanted_annotations};
    let mut app = app.clone();
    app["metadata"]["generation"] = 7.into();
    let mut annotations = serde_json::Map::new();
    annotations.insert(OPT_IN.into(), "true".into());
    for (k, v) in wanted_annotations(verdict, Some(7)) {
        annotations.insert(k, v.into());
    }
    annotations.insert(
        JUDGED_STATE.into(),
        application::judged_state(judged).into(),
    );
    annotations.insert(VALID_UNTIL.into(), "4102444800".into());
    app["metadata"]["annotations"] = Value::Object(annotations);
    app
}

// ---- CNPG lifecycles, whole sequences ------------------------------------------------------
//
// What happens to a Database over time: CNPG applies it or fails, the spec changes, the
// Cluster is deleted (CNPG then writes `applied: false`, "cluster resource has been deleted,
// skipping reconciliation", `observedGeneration: 0`), recreated under the same name (a new
// UID, bootstrapping with no primary), gets its primary, and time passes. At every step Rust
// judges with the evaluator's grace memory (one failure identity: Database UID, generation and
// the Cluster's UID), annotation mode writes the verdict, and the Lua reads it back: the fresh
// annotation as Rust meant it, and the previous step's annotation (what Argo CD may read
// before wavegate rewrites) never as a Degraded about a status the Database no longer shows.

#[derive(Debug, Clone, Copy)]
enum CnpgEvent {
    Applied,
    Failed,
    SpecChanged,
    ClusterDeleted,
    ClusterRecreated,
    /// Deleted and recreated under the same name before CNPG's operator reconciled the
    /// deletion: nothing rewrites the Database's status, `applied: true` included.
    ClusterReplacedUnnoticed,
    PrimaryReady,
    /// The Cluster becomes a replica of another cluster (distributed topology): its spec
    /// names another primary (cloudnative-pg api/v1/cluster_funcs.go `IsReplica`).
    Demoted,
    /// CNPG 1.30's instance manager on the demoted primary sees it: `applied` cleared with
    /// "waiting for the cluster to become primary", `observedGeneration` kept
    /// (internal/management/controller/common.go `handleReplicaRoleTransition`).
    DemotionReported,
    Promoted,
    Wait,
}

fn cnpg_event() -> impl Strategy<Value = CnpgEvent> {
    prop_oneof![
        2 => Just(CnpgEvent::Applied),
        3 => Just(CnpgEvent::Failed),
        1 => Just(CnpgEvent::SpecChanged),
        1 => Just(CnpgEvent::ClusterDeleted),
        1 => Just(CnpgEvent::ClusterRecreated),
        1 => Just(CnpgEvent::ClusterReplacedUnnoticed),
        2 => Just(CnpgEvent::PrimaryReady),
        1 => Just(CnpgEvent::Demoted),
        2 => Just(CnpgEvent::DemotionReported),
        1 => Just(CnpgEvent::Promoted),
        3 => Just(CnpgEvent::Wait),
    ]
}

struct CnpgWorld {
    db: Value,
    cluster: Option<Value>,
    clusters_made: u32,
    now: Duration,
    /// The failure identity being timed and since when (the evaluator's `failing_since`).
    failing: Option<(String, Duration)>,
    /// The Database's status was written for a Cluster that is gone and nothing has rewritten
    /// it: only the Cluster shows that, and the Lua cannot see the Cluster.
    status_outlived_cluster: bool,
    /// The Cluster is a replica and the Database still shows the status its primary days
    /// left: only the Cluster shows that, too.
    demotion_unreported: bool,
}

impl CnpgWorld {
    fn new() -> CnpgWorld {
        let mut w = CnpgWorld {
            db: json!({
                "apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
                "metadata": {"name": "forgejo", "namespace": "ddb", "uid": "db-1", "generation": 1},
                "spec": {"name": "forgejo", "owner": "forgejo", "cluster": {"name": "pg"}},
            }),
            cluster: None,
            clusters_made: 0,
            now: Duration::ZERO,
            failing: None,
            status_outlived_cluster: false,
            demotion_unreported: false,
        };
        w.recreate_cluster();
        w.primary_ready();
        w
    }

    fn generation(&self) -> i64 {
        self.db["metadata"]["generation"].as_i64().unwrap()
    }

    fn recreate_cluster(&mut self) {
        self.clusters_made += 1;
        self.cluster = Some(json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "pg", "namespace": "ddb", "uid": format!("pg-{}", self.clusters_made)},
            "spec": {"instances": 1},
            "status": {"readyInstances": 0, "phase": "Setting up primary",
                       "conditions": [{"type": "Ready", "status": "False"}]},
        }));
    }

    fn primary_ready(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c["status"] = json!({"readyInstances": 1, "currentPrimary": "pg-1",
                "targetPrimary": "pg-1", "phase": "Cluster in healthy state",
                "conditions": [{"type": "Ready", "status": "True"}]});
        }
    }

    /// CNPG's Database reconciler returns at once when `observedGeneration` equals the
    /// generation (internal/management/controller/database_controller.go, "If everything is
    /// reconciled, we're done here"), unless (1.30) `applied` is not true on a Cluster that is
    /// not a replica: a promotion re-evaluates what a demotion withdrew.
    fn reconciles(&self) -> bool {
        self.db["status"]["observedGeneration"].as_i64() != Some(self.generation())
            || self.db["status"]["applied"].as_bool() != Some(true)
    }

    fn replica(&self) -> bool {
        self.cluster
            .as_ref()
            .is_some_and(|c| c["spec"]["replica"].is_object())
    }

    fn primary_runs(&self) -> bool {
        self.cluster
            .as_ref()
            .is_some_and(|c| c["status"]["currentPrimary"].is_string())
    }

    fn apply(&mut self, event: CnpgEvent) {
        let g = self.generation();
        match event {
            // Only a running primary reconciles a Database.
            // (and, like CNPG's Database reconciler, only while observedGeneration lags).
            CnpgEvent::Applied if self.primary_runs() && self.reconciles() && !self.replica() => {
                self.db["status"] = json!({"applied": true, "observedGeneration": g});
                self.status_outlived_cluster = false;
            }
            CnpgEvent::Failed if self.primary_runs() && self.reconciles() && !self.replica() => {
                let observed = self.db["status"]["observedGeneration"].clone();
                self.db["status"] = json!({"applied": false, "observedGeneration": observed,
                    "message": "role \"forgejo\" does not exist"});
                self.status_outlived_cluster = false;
            }
            CnpgEvent::SpecChanged => self.db["metadata"]["generation"] = (g + 1).into(),
            CnpgEvent::ClusterDeleted if self.cluster.is_some() => {
                self.cluster = None;
                self.db["status"] = json!({"applied": false, "observedGeneration": 0,
                    "message": "cluster resource has been deleted, skipping reconciliation"});
            }
            CnpgEvent::ClusterRecreated if self.cluster.is_none() => self.recreate_cluster(),
            CnpgEvent::ClusterReplacedUnnoticed if self.cluster.is_some() => {
                self.recreate_cluster();
                self.status_outlived_cluster = !self.db["status"].is_null();
            }
            CnpgEvent::PrimaryReady => self.primary_ready(),
            CnpgEvent::Demoted if self.cluster.is_some() && !self.replica() => {
                if let Some(c) = self.cluster.as_mut() {
                    c["spec"]["replica"] =
                        json!({"self": "pg", "primary": "pg-eu", "source": "pg-eu"});
                }
                self.demotion_unreported = !self.db["status"]["applied"].is_null();
            }
            // Only the demoted primary's instance manager writes it, and only over a status
            // that says something.
            CnpgEvent::DemotionReported
                if self.replica()
                    && self.primary_runs()
                    && !self.db["status"]["applied"].is_null() =>
            {
                let observed = self.db["status"]["observedGeneration"].clone();
                self.db["status"] = json!({"observedGeneration": observed,
                    "message": "waiting for the cluster to become primary"});
                self.demotion_unreported = false;
            }
            CnpgEvent::Promoted if self.replica() => {
                if let Some(c) = self.cluster.as_mut() {
                    c["spec"].as_object_mut().map(|spec| spec.remove("replica"));
                }
                self.demotion_unreported = false;
            }
            _ => {}
        }
        self.now += Duration::from_secs(40);
    }

    /// Rust's verdict now, with the evaluator's grace bookkeeping.
    fn judge(&mut self) -> Verdict {
        let finding = cnpg::check(
            "ddb",
            "forgejo",
            Some(&self.db),
            self.cluster.as_ref(),
            &cnpg::Params::default(),
        );
        let identity = format!(
            "{}@{}",
            self.generation(),
            self.cluster
                .as_ref()
                .map_or("", |c| c["metadata"]["uid"].as_str().unwrap())
        );
        let lasted = match &finding {
            wavegate::health::Finding::Persistent { .. } => match &self.failing {
                Some((id, since)) if *id == identity => self.now - *since,
                _ => {
                    self.failing = Some((identity, self.now));
                    Duration::ZERO
                }
            },
            wavegate::health::Finding::Settled(_) => {
                self.failing = None;
                Duration::ZERO
            }
        };
        finding.resolve(lasted, Duration::from_secs(90))
    }

    /// The Database carrying the annotations written for `verdict` judged on `judged_db`.
    fn annotated(&self, verdict: &Verdict, judged_db: &Value) -> Value {
        use wavegate::annotate::{JUDGED_STATE, OPT_IN, VALID_UNTIL, wanted_annotations};
        let mut annotations = serde_json::Map::new();
        annotations.insert(OPT_IN.into(), "true".into());
        let generation = judged_db["metadata"]["generation"].as_i64();
        for (k, v) in wanted_annotations(verdict, generation) {
            annotations.insert(k, v.into());
        }
        annotations.insert(JUDGED_STATE.into(), cnpg::judged_status(judged_db).into());
        annotations.insert(VALID_UNTIL.into(), "4102444800".into());
        let mut db = self.db.clone();
        db["metadata"]["annotations"] = Value::Object(annotations);
        db
    }
}

proptest! {
    #![proptest_config(proptest_config::config(300))]

    #[test]
    fn cnpg_lifecycles_read_the_same_in_rust_and_lua_at_every_step(
        events in prop::collection::vec(cnpg_event(), 1..14)
    ) {
        let mut world = CnpgWorld::new();
        let mut previous: Option<(Verdict, Value)> = None;
        for (step, event) in events.iter().enumerate() {
            world.apply(*event);
            let rust = world.judge();
            let at = format!("step {step} ({event:?}) of {events:?}");
            // The native rule (no opt-in) never fails a sync, and is never Healthy where Rust
            // is not, except where only the Cluster shows it: a status that outlived its
            // Cluster (deleted and recreated before CNPG noticed), which a script that sees one
            // object cannot tell; annotation mode (below) or a gate can.
            let (native, message) = lua("postgresql.cnpg.io/Database", &world.db);
            prop_assert!(native != "Degraded", "{at}: native Lua Degraded: {message}");
            prop_assert!(
                native != "Healthy" || rust.status == HealthStatus::Healthy
                    || world.status_outlived_cluster || world.demotion_unreported,
                "{}: native Lua Healthy ({}) but Rust {}", at, message, rust
            );
            // Annotation mode, freshly written.
            let fresh = world.annotated(&rust, &world.db);
            let (status, message) = lua("postgresql.cnpg.io/Database", &fresh);
            prop_assert_eq!(
                status.as_str(), argo_view(rust.status),
                "{}: Rust {} ({}) but Lua {} ({})", at, rust.status, rust.message, status, message
            );
            // The previous step's annotation on today's object: a Degraded is believed only
            // while the Database shows the status it was judged on.
            if let Some((verdict, judged_db)) = &previous {
                let stale = world.annotated(verdict, judged_db);
                let (status, message) = lua("postgresql.cnpg.io/Database", &stale);
                if status == "Degraded" {
                    prop_assert_eq!(
                        cnpg::judged_status(judged_db), cnpg::judged_status(&world.db),
                        "{}: stale Degraded believed on another status: {}", at, message
                    );
                }
            }
            previous = Some((rust, world.db.clone()));
        }
    }
}

/// CNPG 1.30 and a distributed topology: a Database applied on its Cluster's primary, the
/// Cluster demoted to a replica (read-only; the database is now the other cluster's), then
/// promoted back. It is Healthy only while the Cluster is primary and CNPG vouches for it.
#[test]
fn cnpg_database_on_a_demoted_cluster_waits_for_the_promotion() {
    let mut world = CnpgWorld::new();
    world.apply(CnpgEvent::Applied);
    assert_eq!(world.judge().status, HealthStatus::Healthy);
    // The spec says replica before the instance manager rewrites the status: CNPG's stale
    // `applied: true` is not believed.
    world.apply(CnpgEvent::Demoted);
    let v = world.judge();
    assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    assert!(v.message.contains("is a replica cluster"), "{v}");
    world.apply(CnpgEvent::DemotionReported);
    assert!(world.db["status"]["applied"].is_null());
    for _ in 0..6 {
        // Four minutes a replica: Progressing throughout, never a failure; Rust and Lua agree.
        let v = world.judge();
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message
                .contains("waiting for the cluster to become primary"),
            "{v}"
        );
        let (native, message) = lua("postgresql.cnpg.io/Database", &world.db);
        assert_eq!(native, "Progressing", "{message}");
        let (status, message) = lua(
            "postgresql.cnpg.io/Database",
            &world.annotated(&v, &world.db),
        );
        assert_eq!(status, "Progressing", "{message}");
        world.apply(CnpgEvent::Applied);
        world.apply(CnpgEvent::Wait);
    }
    world.apply(CnpgEvent::Promoted);
    assert_eq!(world.judge().status, HealthStatus::Progressing);
    world.apply(CnpgEvent::Applied);
    assert_eq!(world.judge().status, HealthStatus::Healthy);
}

/// The incident: a Database applied on a Cluster that is deleted and recreated under the same
/// name. CNPG's `applied: false` from the deletion stays while the new Cluster bootstraps; a
/// judge that counted that as a failure turned Degraded after the grace and failed the sync.
#[test]
fn cnpg_cluster_recreated_under_the_same_name_is_never_degraded_while_it_bootstraps() {
    let mut world = CnpgWorld::new();
    world.apply(CnpgEvent::Applied);
    assert_eq!(world.judge().status, HealthStatus::Healthy);
    world.apply(CnpgEvent::ClusterDeleted);
    assert_eq!(world.judge().status, HealthStatus::Progressing);
    world.apply(CnpgEvent::ClusterRecreated);
    for _ in 0..6 {
        // Four minutes of bootstrapping, far past the 90 s grace.
        let v = world.judge();
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        let (status, message) = lua(
            "postgresql.cnpg.io/Database",
            &world.annotated(&v, &world.db),
        );
        assert_eq!(status, "Progressing", "{message}");
        world.apply(CnpgEvent::Wait);
    }
    // The new primary runs and CNPG (an older release that kept observedGeneration) never
    // reconciles again: now the primary had its chance, and the failure is the user's to fix.
    world.apply(CnpgEvent::PrimaryReady);
    assert_eq!(world.judge().status, HealthStatus::Progressing);
    world.apply(CnpgEvent::Wait);
    world.apply(CnpgEvent::Wait);
    world.apply(CnpgEvent::Wait);
    assert_eq!(world.judge().status, HealthStatus::Degraded);
}

/// The incident: a Cluster deleted and recreated under the same name before CNPG's operator
/// reconciled the deletion. Nothing rewrote the Database's `applied: true`, and the new
/// Cluster, bootstrapping, has no database: a judge that believed the status released the
/// next wave onto a Cluster without it.
#[test]
fn cnpg_stale_applied_true_on_a_recreated_cluster_is_not_healthy_while_it_bootstraps() {
    let mut world = CnpgWorld::new();
    world.apply(CnpgEvent::Applied);
    assert_eq!(world.judge().status, HealthStatus::Healthy);
    world.apply(CnpgEvent::ClusterReplacedUnnoticed);
    assert_eq!(world.db["status"]["applied"], true, "status untouched");
    for _ in 0..4 {
        let v = world.judge();
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.contains("Cluster ddb/pg has never had a primary"),
            "{v}"
        );
        // Annotation mode carries it to Argo CD: the fresh annotation reads Progressing.
        let (status, message) = lua(
            "postgresql.cnpg.io/Database",
            &world.annotated(&v, &world.db),
        );
        assert_eq!(status, "Progressing", "{message}");
        world.apply(CnpgEvent::Wait);
    }
}

// ---- Service annotation mode, whole sequences ----------------------------------------------
//
// The Service's own spec and status change under a verdict annotation mode wrote (Argo CD
// applies a new selector, makes it a LoadBalancer, publishes not-ready addresses, deletes it;
// the cloud controller gives or takes the load balancer's address). At every step the fresh
// annotation reads as Rust meant it, and the previous step's annotation on today's Service
// never reads Healthy where Rust, judging today's Service, does not.

#[derive(Debug, Clone, Copy)]
enum ServiceEvent {
    SelectOther,
    SelectWeb,
    LoadBalancer,
    ClusterIp,
    IngressGiven,
    IngressTaken,
    PublishNotReady(bool),
    Delete,
}

fn service_event() -> impl Strategy<Value = ServiceEvent> {
    prop_oneof![
        Just(ServiceEvent::SelectOther),
        Just(ServiceEvent::SelectWeb),
        Just(ServiceEvent::LoadBalancer),
        Just(ServiceEvent::ClusterIp),
        Just(ServiceEvent::IngressGiven),
        Just(ServiceEvent::IngressTaken),
        any::<bool>().prop_map(ServiceEvent::PublishNotReady),
        Just(ServiceEvent::Delete),
    ]
}

fn service_rust(service: &Value) -> Verdict {
    use std::sync::Arc;
    use wavegate::checks::service;
    use wavegate::views::{PodView, ServiceView, SliceView};
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(service.clone()).unwrap();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "pod-1", "labels": {"app": "web"}},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-x", "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true},
                       "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-0", "uid": "pod-1"}}]
    }))
    .unwrap();
    let view = ServiceView::from(&svc);
    let pods = vec![Arc::new(PodView::from(&pod))];
    let slices = vec![Arc::new(SliceView::from(&slice))];
    service::check(
        "shop",
        "web",
        Some(&view),
        &pods,
        &slices,
        &service::Params::default(),
    )
    .resolve(Duration::ZERO, Duration::from_secs(60))
}

/// `service` carrying the annotations written for `verdict`, judged on `judged`.
fn service_annotated(service: &Value, verdict: &Verdict, judged: &Value) -> Value {
    use wavegate::annotate::{
        JUDGED_SELECTOR, JUDGED_STATE, OPT_IN, VALID_UNTIL, judged_selector, wanted_annotations,
    };
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(judged.clone()).unwrap();
    let mut annotations = serde_json::Map::new();
    annotations.insert(OPT_IN.into(), "true".into());
    for (k, v) in wanted_annotations(verdict, None) {
        annotations.insert(k, v.into());
    }
    annotations.insert(
        JUDGED_SELECTOR.into(),
        judged_selector(judged).unwrap_or_default().into(),
    );
    annotations.insert(
        JUDGED_STATE.into(),
        wavegate::checks::service::judged_spec(&(&svc).into()).into(),
    );
    annotations.insert(VALID_UNTIL.into(), "4102444800".into());
    let mut out = service.clone();
    out["metadata"]["annotations"] = Value::Object(annotations);
    out
}

proptest! {
    #![proptest_config(proptest_config::config(200))]

    #[test]
    fn service_spec_changes_never_let_an_old_annotation_read_healthy(
        events in prop::collection::vec(service_event(), 1..10)
    ) {
        let mut service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop", "uid": "svc-1"},
            "spec": {"type": "ClusterIP", "selector": {"app": "web"}, "ports": [{"port": 80}]},
        });
        let mut previous: Option<(Verdict, Value)> = None;
        for (step, event) in events.iter().enumerate() {
            match event {
                ServiceEvent::SelectOther => service["spec"]["selector"] = json!({"app": "db"}),
                ServiceEvent::SelectWeb => service["spec"]["selector"] = json!({"app": "web"}),
                ServiceEvent::LoadBalancer => service["spec"]["type"] = "LoadBalancer".into(),
                ServiceEvent::ClusterIp => service["spec"]["type"] = "ClusterIP".into(),
                ServiceEvent::IngressGiven => {
                    service["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}});
                }
                ServiceEvent::IngressTaken => service["status"] = json!({"loadBalancer": {}}),
                ServiceEvent::PublishNotReady(on) => {
                    service["spec"]["publishNotReadyAddresses"] = (*on).into();
                }
                ServiceEvent::Delete => {
                    service["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z".into();
                    service["metadata"]["finalizers"] = json!(["example.com/hold"]);
                }
            }
            let rust = service_rust(&service);
            let at = format!("step {step} ({event:?}) of {events:?}");
            let fresh = service_annotated(&service, &rust, &service);
            let (status, message) = lua("Service", &fresh);
            prop_assert_eq!(
                status.as_str(), argo_view(rust.status),
                "{}: Rust {} ({}) but Lua {} ({})", at, rust.status, rust.message, status, message
            );
            if let Some((verdict, judged)) = &previous {
                let (status, message) = lua("Service", &service_annotated(&service, verdict, judged));
                prop_assert!(
                    status != "Healthy" || rust.status == HealthStatus::Healthy,
                    "{}: the previous step's {} read Healthy ({}) but Rust now says {}",
                    at, verdict.status, message, rust
                );
            }
            previous = Some((rust, service.clone()));
        }
    }
}
