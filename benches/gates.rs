//! Many gates (issue 11 item 3): `--gates` (default 1,000) WaveGates in one namespace that all
//! depend on one shared Service, judged by the gate controller as `wavegate serve` runs it
//! (in-process here, default resync and status validity). The gates are Argo CD sync hooks
//! (the recommended pattern: recreated every sync, so they carry no expiry and are never renewed).
//!
//! Measured, on the local control plane:
//! - a settled system: writes (status and verdict stamp) in a `--settle` window (default 60 s) after every gate has
//!   its verdict;
//! - the shared pod turning not Ready, then Ready again: for each gate, the time from the pod's
//!   status change to the gate's new status arriving on a watch (p50/p95/max), and the status
//!   writes the change caused (one per gate is the floor);
//! - the floor: the controller stopped, the same 1,000 status writes made directly, 32 at a
//!   time, and seen on the same watch — what the API server alone takes.
//!
//! Usage: `cargo bench --bench gates -- [--gates 1000] [--settle 60]`
//! Prints `BENCH gates_settled …`, `BENCH gates_change …` and `BENCH gates_floor …` lines for scripts/bench.sh.

#[path = "../tests/support/cluster.rs"]
mod cluster;
mod support;

use cluster::{Wavegate, pod, set_pod_ready};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Summary, report};
use wavegate::clusters::Cluster;
use wavegate::evaluate::EvalConfig;
use wavegate::gate::controller::Settings;
use wavegate::written::FIELD_MANAGER;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// When each gate was last seen with each status, from a watch on the namespace's gates.
type Seen = Arc<Mutex<HashMap<String, (String, Instant)>>>;

fn watch_gates(client: &kube::Client, ns: &str) -> Seen {
    let ar = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let seen: Seen = Arc::default();
    let out = seen.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Some(Ok(g)) = stream.next().await {
            let v = serde_json::to_value(&g).unwrap_or_default();
            let status = v
                .pointer("/status/health/status")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
            let mut s = out.lock().unwrap();
            if s.get(&name).map(|(st, _)| st) != Some(&status) {
                s.insert(name, (status, Instant::now()));
            }
        }
    });
    seen
}

/// Wait until every gate shows `want`; the time each got there, after `since`.
async fn all_become(seen: &Seen, gates: usize, want: &str, since: Instant) -> Vec<Duration> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done: Vec<Duration> = seen
            .lock()
            .unwrap()
            .values()
            .filter(|(s, at)| s == want && *at >= since)
            .map(|(_, at)| at.duration_since(since))
            .collect();
        if done.len() == gates {
            return done;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {gates} gates became {want}",
            done.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() {
    let gates = arg("--gates", 1000) as usize;
    let settle = Duration::from_secs(arg("--settle", 60));
    let admin = cluster::client().await;
    let ns = cluster::namespace(&admin, "wgbench-gates").await;
    pod(&admin, &ns, "shared", json!({"app": "shared"})).await;
    set_pod_ready(&admin, &ns, "shared", "10.244.200.1", true).await;
    cluster::service(&admin, &ns, "shared", "shared").await;
    let ar = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &ar);
    let created = Instant::now();
    for i in 0..gates {
        let name = format!("gate-{i:04}");
        let gate = json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"argocd.argoproj.io/hook": "Sync"}},
            "spec": {"checks": [{"name": "shared", "service": {"name": "shared"}}]}});
        api.patch(&name, &PatchParams::apply("wgbench"), &Patch::Apply(&gate))
            .await
            .expect("create gate");
    }
    eprintln!("{gates} gates created in {:?}", created.elapsed());

    let seen = watch_gates(&admin, &ns);
    let wg = Wavegate::start_in(admin.clone(), EvalConfig::default(), &[&ns]).await;
    let started = Instant::now();
    let home = Cluster::home(wg.evaluator.clone());
    let controller = tokio::spawn(home.gate_controller(
        &home,
        wg.metrics.clone(),
        Settings::new(Duration::from_secs(15)),
    ));
    let first = all_become(&seen, gates, "Healthy", started).await;
    let first = Summary::of(&first).unwrap();
    // Every write to the API server: the status, and the verdict stamp where Argo CD needs one
    // to look again (src/gate/stamp.rs).
    let writes = || wg.metrics.gate_status_writes.get() + wg.metrics.gate_stamp_writes.get();
    let stamps = || wg.metrics.gate_stamp_writes.get();
    let after_first = writes();
    let first_stamps = stamps();

    // Settled: nothing changes for a while.
    tokio::time::sleep(settle).await;
    let settled_writes = writes() - after_first;
    let per_minute = settled_writes as f64 * 60.0 / settle.as_secs_f64();
    report(
        "gates_settled",
        &[
            ("gates", gates.to_string()),
            ("first_verdict_all_ms", support::ms(first.max)),
            ("first_stamps", first_stamps.to_string()),
            ("window_s", settle.as_secs().to_string()),
            ("writes", settled_writes.to_string()),
            ("writes_per_min", format!("{per_minute:.1}")),
        ],
    );

    for (ready, want) in [(false, "Progressing"), (true, "Healthy")] {
        let (before, stamps_before) = (writes(), stamps());
        let changed = Instant::now();
        set_pod_ready(&admin, &ns, "shared", "10.244.200.1", ready).await;
        let took = all_become(&seen, gates, want, changed).await;
        // Let stragglers (a second write for the same change) show before counting.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let s = Summary::of(&took).unwrap();
        let mut fields = vec![
            ("gates", gates.to_string()),
            ("to", want.to_string()),
            ("writes", (writes() - before).to_string()),
            ("stamps", (stamps() - stamps_before).to_string()),
        ];
        fields.extend(s.fields());
        report("gates_change", &fields);
    }

    // The floor: the same 1,000 status writes made directly, as fast as the API server takes
    // them (the controller stopped, 32 at a time, each seen on the same watch). What wavegate
    // adds is the difference to its own numbers above.
    controller.abort();
    let statuses: Vec<(String, Value)> = api
        .list(&Default::default())
        .await
        .expect("list gates")
        .items
        .into_iter()
        .map(|g| {
            let v = serde_json::to_value(&g).unwrap();
            (g.metadata.name.unwrap(), v["status"].clone())
        })
        .collect();
    let changed = Instant::now();
    futures::stream::iter(statuses)
        .for_each_concurrent(32, |(name, mut status)| {
            let api = api.clone();
            async move {
                status["health"]["status"] = json!("Degraded");
                status["health"]["message"] = json!("written directly (floor)");
                let body = json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
                                  "status": status});
                api.patch_status(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await
                .expect("status write");
            }
        })
        .await;
    let took = all_become(&seen, gates, "Degraded", changed).await;
    let s = Summary::of(&took).unwrap();
    let mut fields = vec![("gates", gates.to_string()), ("concurrency", "32".into())];
    fields.extend(s.fields());
    report("gates_floor", &fields);
}
