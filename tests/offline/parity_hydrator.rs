//! Random Application states with `spec.sourceHydrator` through the Rust check and the shipped
//! `argoproj.io/Application/health.lua`: the statuses Argo CD acts on must agree (Rust's
//! Missing/Unknown count as Progressing, as in parity.rs, whose random states cover
//! `source` and `sources`; this module adds the hydrator shape).
//!
//! The Lua runs in the argocd-cm sandbox of `argocd/lua-harness` (`luahealth --batch`, built
//! with `go build`; Go is required).

use crate::proptest_config;

use proptest::prelude::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use wavegate::checks::application;
use wavegate::health::HealthStatus;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

struct Lua {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn lua_process() -> &'static Mutex<Lua> {
    static LUA: OnceLock<Mutex<Lua>> = OnceLock::new();
    LUA.get_or_init(|| {
        let harness = Path::new(ROOT).join("argocd/lua-harness");
        let binary = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("luahealth-truth4");
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

/// The shipped Application script judging `app`: its status.
fn lua(app: &Value) -> String {
    let script =
        format!("{ROOT}/argocd/resource_customizations/argoproj.io/Application/health.lua");
    let mut lua = lua_process().lock().unwrap_or_else(|e| e.into_inner());
    writeln!(lua.stdin, "{}", json!({"script": script, "object": app})).unwrap();
    lua.stdin.flush().unwrap();
    let mut line = String::new();
    lua.stdout.read_line(&mut line).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    if let Some(error) = answer.get("error") {
        panic!("health.lua failed on {app}: {error}");
    }
    answer["status"].as_str().unwrap_or_default().to_string()
}

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &[T]) -> proptest::sample::Select<T> {
    proptest::sample::select(items.to_vec())
}

/// A `sourceHydrator` from a small domain, so equal and unequal ones come up often.
fn hydrator() -> impl Strategy<Value = Value> {
    (
        pick(&[
            "https://git.example.com/dry.git",
            "https://git.example.com/other.git",
        ]),
        pick(&["v1", "v2"]),
        pick(&["environments/prod", "environments/dev"]),
        prop::option::of(pick(&["", "https://git.example.com/hydrated.git"])),
        prop::option::of(pick(&["environments/prod-next"])),
    )
        .prop_map(|(repo, revision, branch, sync_repo, hydrate_to)| {
            let mut h = json!({
                "drySource": {"repoURL": repo, "targetRevision": revision, "path": "apps/forgejo"},
                "syncSource": {"targetBranch": branch, "path": "forgejo"},
            });
            if let Some(r) = sync_repo {
                h["syncSource"]["repoURL"] = r.into();
            }
            if let Some(b) = hydrate_to {
                h["hydrateTo"] = json!({"targetBranch": b});
            }
            h
        })
}

/// What Argo CD records in `comparedTo.source` and `syncResult.source` for `h`, or another
/// source (an older spec's).
fn recorded(h: &Value, same: bool) -> Value {
    let sync_repo = h["syncSource"]["repoURL"]
        .as_str()
        .filter(|r| !r.is_empty());
    let repo = sync_repo
        .or(h["drySource"]["repoURL"].as_str())
        .unwrap_or("");
    let branch = if same {
        h["syncSource"]["targetBranch"].clone()
    } else {
        json!("environments/staging")
    };
    json!({"repoURL": repo, "path": "forgejo", "targetRevision": branch})
}

fn app() -> impl Strategy<Value = Value> {
    (
        hydrator(),
        hydrator(),
        any::<bool>(),
        prop::option::of((pick(&["Hydrated", "Hydrating", "Failed"]), any::<bool>())),
        // Healthy and Synced most often, so settled states come up in every run.
        pick(&[
            "Healthy",
            "Healthy",
            "Healthy",
            "Healthy",
            "Progressing",
            "Degraded",
            "Suspended",
            "Missing",
            "Unknown",
        ]),
        pick(&["Synced", "Synced", "Synced", "OutOfSync", "Unknown"]),
        prop::option::of((
            pick(&["Succeeded", "Failed", "Error", "Running"]),
            any::<bool>(),
        )),
        any::<bool>(),
    )
        .prop_map(
            |(spec_h, other_h, compared_same, run, health, sync, op, result_same)| {
                let mut app = json!({
                    "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                    "metadata": {"name": "child", "namespace": "argocd", "generation": 3},
                    "spec": {"project": "default", "sourceHydrator": spec_h,
                        "destination": {"name": "in-cluster", "namespace": "cicd"}},
                    "status": {
                        "sync": {"status": sync, "revision": "abc",
                            "comparedTo": {"source": recorded(&spec_h, compared_same),
                                "destination": {"name": "in-cluster", "namespace": "cicd"}}},
                        "health": {"status": health},
                    },
                });
                if let Some((phase, same_config)) = run {
                    let config = if same_config { &spec_h } else { &other_h };
                    app["status"]["sourceHydrator"] = json!({"currentOperation": {
                        "phase": phase, "message": "", "sourceHydrator": config}});
                }
                if let Some((phase, with_result)) = op {
                    app["status"]["operationState"] = json!({"phase": phase, "message": "m"});
                    if with_result {
                        app["status"]["operationState"]["syncResult"] = json!({
                            "revision": "abc", "source": recorded(&spec_h, result_same)});
                    }
                }
                app
            },
        )
}

/// `v` without its empty-string fields: Argo CD compares the hydrator's Go structs, where an
/// empty `repoURL` and none are the same value (`omitempty` drops it from what it records).
fn without_empty(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| v.as_str() != Some(""))
                .map(|(k, v)| (k.clone(), without_empty(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(proptest_config::config(400))]

    #[test]
    fn random_hydrator_applications_have_the_same_status_in_rust_and_lua(app in app()) {
        let rust = application::check("argocd", "child", Some(&app)).status;
        let rust = match rust {
            HealthStatus::Missing | HealthStatus::Unknown => HealthStatus::Progressing,
            s => s,
        };
        let lua = lua(&app);
        prop_assert_eq!(rust.as_str(), lua.as_str(), "{}", app);
        // Healthy exactly when Argo CD compared the hydrator's sync source, the hydrator (if it
        // recorded a run) hydrated this spec's config, and the child is Healthy, Synced and
        // not syncing or failed.
        let h = &app["spec"]["sourceHydrator"];
        let s = &app["status"];
        let run = &s["sourceHydrator"]["currentOperation"];
        let settled = s["sync"]["comparedTo"]["source"]["targetRevision"] == h["syncSource"]["targetBranch"]
            && (run.is_null()
                || (run["phase"] == "Hydrated" && without_empty(&run["sourceHydrator"]) == without_empty(h)))
            && s["health"]["status"] == "Healthy"
            && s["sync"]["status"] == "Synced"
            && (s["operationState"].is_null() || s["operationState"]["phase"] == "Succeeded");
        prop_assert_eq!(lua == "Healthy", settled, "{}", app);
    }
}
