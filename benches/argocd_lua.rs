//! Argo CD's health scripts in wavegate (`src/argocd_lua`), measured offline:
//! 1. the cost per judged object of the generic rule with the release's bundled script against
//!    the same rule without it (Argo CD's built-in Go rules, else kstatus), on every input of
//!    Argo CD's own `health_test.yaml` cases (the objects its script authors judge);
//! 2. the engine's memory with every bundled script compiled (RSS of this process before and
//!    after, and the sources' and bytecode's sizes).
//!
//! The scripts come from the Go module cache (`go mod download -json
//! github.com/argoproj/argo-cd/v3@<release>`; the release pinned in hack/argocd/go.mod unless
//! `--release vX.Y.Z`). One thread, no cluster. Each object is judged `--runs` times (default
//! 20) each way, interleaved; the medians per object are summed over all objects.
//!
//! Usage: `cargo bench --bench argocd_lua -- [--release v3.5.1] [--runs 20]`
//! Prints `BENCH argocd_lua.cost …` and `BENCH argocd_lua.memory …`.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::report;
use wavegate::argocd_lua::{Bundled, Engine, Libraries, LuaHealth, group_kind};
use wavegate::checks::judge_generic;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn module(release: &str) -> PathBuf {
    let out = Command::new("go")
        .args([
            "mod",
            "download",
            "-json",
            &format!("github.com/argoproj/argo-cd/v3@{release}"),
        ])
        .env(
            "GOTOOLCHAIN",
            std::env::var("WAVEGATE_GOTOOLCHAIN").unwrap_or_else(|_| "auto".into()),
        )
        .current_dir(std::env::temp_dir())
        .output()
        .expect("go is required");
    let v: Value = serde_json::from_slice(&out.stdout).expect("go mod download -json");
    PathBuf::from(v["Dir"].as_str().expect("Dir"))
}

fn pinned() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let gomod = std::fs::read_to_string(root.join("hack/argocd/go.mod")).unwrap();
    gomod
        .lines()
        .find_map(|l| l.trim().strip_prefix("github.com/argoproj/argo-cd/v3 "))
        .and_then(|v| v.split_whitespace().next())
        .expect("argo-cd in hack/argocd/go.mod")
        .to_string()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The plural wavegate would name a kind by (`Kind` lower-cased plus `s`; only the built-in
/// rules look at it, and none of the bundled kinds is one of theirs).
fn resource(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("").to_lowercase();
    let group = object["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit_once('/'))
        .map_or("", |(g, _)| g);
    if group.is_empty() {
        format!("{kind}s")
    } else {
        format!("{kind}s.{group}")
    }
}

/// Every `testdata/*.yaml` input of the bundled scripts.
fn inputs(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n == "testdata")
                && p.extension().is_some_and(|x| x == "yaml")
                && let Ok(text) = std::fs::read_to_string(&p)
                && let Ok(v) = serde_yaml::from_str::<Value>(&text)
                && v.get("kind").is_some()
            {
                out.push(v);
            }
        }
    }
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let release = arg("--release").unwrap_or_else(pinned);
    let runs: usize = arg("--runs").map_or(20, |r| r.parse().expect("a number"));
    let dir = module(&release).join("resource_customizations");

    let before = rss_kib();
    let bundled = Bundled::load(&dir).unwrap();
    let scripts = bundled.len();
    let source_bytes: usize = bundled.scripts().map(|(_, s)| s.len()).sum();
    let sources: Vec<_> = bundled.scripts().map(|(_, s)| s.clone()).collect();
    let lua = LuaHealth::new(bundled);
    let loaded = rss_kib();
    // Every script compiled (each run once on an empty object: the compile cache keeps its
    // bytecode whatever the run gives), as a wavegate that has judged every bundled kind.
    let engine = Engine::default();
    let empty = serde_json::json!({});
    for source in &sources {
        let _ = engine.run(source, Libraries::Open, &empty);
    }
    let all_compiled = rss_kib();

    let objects = inputs(&dir);
    let judged: Vec<&Value> = objects
        .iter()
        .filter(|o| group_kind(o).is_some_and(|(g, k)| lua.script_for(&g, &k).is_some()))
        .collect();
    // First pass: each script compiles once (the cache by content), as in a running wavegate.
    for o in &judged {
        judge_generic(&resource(o), o, Some(&lua));
    }

    let (mut with_lua, mut without) = (Duration::ZERO, Duration::ZERO);
    let mut worst = (Duration::ZERO, String::new());
    for o in &judged {
        let r = resource(o);
        let (mut a, mut b) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        for _ in 0..runs {
            let t = Instant::now();
            std::hint::black_box(judge_generic(&r, o, Some(&lua)));
            a.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(judge_generic(&r, o, None));
            b.push(t.elapsed());
        }
        let (a, b) = (median(a), median(b));
        if a > worst.0 {
            worst = (a, r.clone());
        }
        with_lua += a;
        without += b;
    }
    let n = judged.len().max(1) as u32;
    let us = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e6);
    report(
        "argocd_lua.cost",
        &[
            ("release", release.clone()),
            ("objects", judged.len().to_string()),
            ("runs", runs.to_string()),
            ("lua_us_per_object", us(with_lua / n)),
            ("kstatus_us_per_object", us(without / n)),
            (
                "ratio",
                format!(
                    "{:.0}",
                    with_lua.as_secs_f64() / without.as_secs_f64().max(1e-12)
                ),
            ),
            ("slowest_lua_us", us(worst.0)),
            ("slowest_kind", worst.1),
        ],
    );
    report(
        "argocd_lua.memory",
        &[
            ("release", release),
            ("scripts", scripts.to_string()),
            ("compiled", engine.compiled_scripts().to_string()),
            ("source_kib", (source_bytes / 1024).to_string()),
            ("rss_sources_kib", loaded.saturating_sub(before).to_string()),
            (
                "rss_all_compiled_kib",
                all_compiled.saturating_sub(before).to_string(),
            ),
        ],
    );
}
