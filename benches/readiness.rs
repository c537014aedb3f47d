//! Time from "the last condition became true" to wavegate saying Healthy, read the two ways
//! Argo CD reads it: the HTTP verdict (hook Jobs, the dashboard, the UI extension) and a
//! WaveGate's `status.health` as stored in the API server (what Argo CD's Lua health check sees).
//!
//! Two scenarios, each `--rounds` times (default 30):
//! - `service`: the only pod behind a Service turns not Ready, then Ready again. This includes
//!   kube-controller-manager publishing the EndpointSlice (≈50 ms on the local control plane).
//! - `database`: a CNPG Database's status is cleared, then set to `applied: true` at the current
//!   generation, as the operator does after `CREATE DATABASE`. No other controller in the path.
//!
//! Each round: make the condition false, wait until both the verdict and the gate have left
//! Healthy, wait a random 0–60 ms (so that t0 falls at a random point of the verdict cache's TTL
//! rather than always just after a fresh verdict), take t0 just before sending the patch that
//! makes it true, then concurrently poll the verdict every 5 ms and follow the gate through a
//! watch; each side's time is when it was first seen Healthy. Polling granularity (≤ 5 ms) and
//! the verdict TTL (the server's setting) are part of what is measured, as they are part of what
//! a client sees.
//!
//! Usage: `cargo bench --bench readiness -- --wavegate http://127.0.0.1:PORT [--rounds 30]`
//! against a `wavegate serve` that watches the whole cluster and runs the gate controller.
//! Prints one `BENCH readiness.<scenario>.<http|gate> …` line per measurement.

#[path = "../tests/support/cluster.rs"]
mod cluster;
mod support;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};
use support::{Served, Summary, report};
use tokio::sync::watch;

const POLL: Duration = Duration::from_millis(5);
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
const GATE: &str = "bench-gate";
/// Longer than the default verdict TTL (50 ms), so t0 lands anywhere in it.
const MAX_PHASE_MS: u64 = 60;

/// A random duration below `MAX_PHASE_MS`, from the standard library's per-process random keys.
fn random_phase() -> Duration {
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_millis(r % MAX_PHASE_MS)
}

/// What flips between false and true, and the verdict that reflects it.
#[derive(Clone, Copy)]
enum Scenario {
    Service,
    Database,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Service => "service",
            Scenario::Database => "database",
        }
    }

    /// `(resource, name)` of the verdict, and the WaveGate check entry for it.
    fn target(self) -> (&'static str, &'static str, Value) {
        match self {
            Scenario::Service => (
                "services",
                "app",
                json!({"name": "app", "service": {"name": "app", "minReady": 1}}),
            ),
            Scenario::Database => (
                "databases.postgresql.cnpg.io",
                "app",
                json!({"name": "app", "cnpgDatabase": {"name": "app"}}),
            ),
        }
    }

    /// Create the objects; the Database's generation, which its status must echo.
    async fn create(self, client: &Client, ns: &str) -> i64 {
        match self {
            Scenario::Service => {
                cluster::pod(client, ns, "app-0", json!({"app": "bench"})).await;
                cluster::apply(
                    client,
                    json!({"apiVersion": "v1", "kind": "Service",
                           "metadata": {"name": "app", "namespace": ns},
                           "spec": {"selector": {"app": "bench"}, "ports": [{"port": 80}]}}),
                )
                .await;
                0
            }
            Scenario::Database => {
                let mut generation = 0;
                for (kind, spec) in [
                    (
                        "Cluster",
                        json!({"instances": 1, "storage": {"size": "1Gi"}}),
                    ),
                    (
                        "Database",
                        json!({"name": "app", "owner": "app", "cluster": {"name": "pg"}}),
                    ),
                ] {
                    let name = if kind == "Cluster" { "pg" } else { "app" };
                    let created = cluster::apply(
                        client,
                        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": kind,
                               "metadata": {"name": name, "namespace": ns}, "spec": spec}),
                    )
                    .await;
                    generation = created.metadata.generation.unwrap_or(1);
                }
                // CNPG's instance manager records the primary it started (a Cluster that never
                // had one cannot have applied the Database).
                let ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Cluster", "clusters");
                let primary = json!({"instances": 1, "readyInstances": 1,
                    "currentPrimary": "pg-1", "targetPrimary": "pg-1"});
                cluster::patch_status(client, &ar, ns, "pg", primary).await;
                generation
            }
        }
    }

    /// Make the condition true (`true`) or false, as the kubelet or the operator would: one
    /// request, so that t0 is taken right before the change reaches the API server.
    async fn set(self, client: &Client, ns: &str, generation: i64, ready: bool) {
        match self {
            // Only kube-controller-manager reads the pod IP, to publish the endpoint; nothing
            // ever connects to it.
            Scenario::Service => {
                cluster::set_pod_ready(client, ns, "app-0", "10.244.99.10", ready).await
            }
            Scenario::Database => {
                let ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Database", "databases");
                let status = if ready {
                    json!({"applied": true, "observedGeneration": generation})
                } else {
                    json!({"applied": null, "observedGeneration": null})
                };
                cluster::patch_status(client, &ar, ns, "app", status).await;
            }
        }
    }
}

/// The gate's `status.health.status` as the API server's watch delivers it ("" before the
/// controller has written one for the current generation).
fn follow_gate(client: &Client, ns: &str) -> watch::Receiver<String> {
    let ar = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let (tx, rx) = watch::channel(String::new());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={GATE}"));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, cfg));
        while let Some(event) = events.next().await {
            let (Ok(watcher::Event::Apply(g)) | Ok(watcher::Event::InitApply(g))) = event else {
                continue;
            };
            let g = serde_json::to_value(&g).unwrap_or_default();
            let current = g["status"]["observedGeneration"] == g["metadata"]["generation"];
            let status = match g["status"]["health"]["status"].as_str() {
                Some(s) if current => s.to_string(),
                _ => String::new(),
            };
            tx.send_if_modified(|old| {
                let changed = *old != status;
                *old = status;
                changed
            });
        }
    });
    rx
}

async fn gate_until(
    rx: &mut watch::Receiver<String>,
    done: impl Fn(&str) -> bool,
) -> Option<Instant> {
    let seen = tokio::time::timeout(STEP_TIMEOUT, rx.wait_for(|s| done(s))).await;
    matches!(seen, Ok(Ok(_))).then(Instant::now)
}

async fn run(client: &Client, served: &Served, scenario: Scenario, rounds: usize) {
    let name = scenario.name();
    let ns = cluster::namespace(client, &format!("wgbench-ready-{name}")).await;
    let (resource, object, check) = scenario.target();
    let target = (resource, ns.as_str(), object);
    let generation = scenario.create(client, &ns).await;
    scenario.set(client, &ns, generation, true).await;
    let mut gate = follow_gate(client, &ns);
    let gate_crd = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    let gate_applied = kube::discovery::pinned_kind(
        client,
        &kube::core::GroupVersionKind::gvk(&gate_crd.group, &gate_crd.version, &gate_crd.kind),
    )
    .await
    .is_ok();
    if gate_applied {
        cluster::apply(
            client,
            json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
                   "metadata": {"name": GATE, "namespace": ns},
                   "spec": {"checks": [check]}}),
        )
        .await;
    }

    let healthy = |s: &str| s == "Healthy";
    let not_healthy = |s: &str| !s.is_empty() && s != "Healthy";
    if served
        .until(target, POLL, STEP_TIMEOUT * 3, healthy)
        .await
        .is_none()
    {
        report(
            &format!("readiness.{name}.http"),
            &[
                ("status", "failed".into()),
                ("reason", "never Healthy at setup".into()),
            ],
        );
        support::drop_namespace(client, &ns).await;
        return;
    }
    let mut gate_on = gate_applied && gate_until(&mut gate, healthy).await.is_some();
    let writes_before = support::metric_sum(
        &served.metrics().await,
        "wavegate_gate_status_writes_total",
        "",
    );

    let (mut http_times, mut gate_times) = (Vec::new(), Vec::new());
    let mut failures = 0;
    for _ in 0..rounds {
        scenario.set(client, &ns, generation, false).await;
        let left = served
            .until(target, POLL, STEP_TIMEOUT, |s| !healthy(s))
            .await;
        if gate_on && gate_until(&mut gate, not_healthy).await.is_none() {
            gate_on = false;
        }
        if left.is_none() {
            failures += 1;
            continue;
        }
        tokio::time::sleep(random_phase()).await;
        let t0 = Instant::now();
        scenario.set(client, &ns, generation, true).await;
        let (http, gated) =
            tokio::join!(served.until(target, POLL, STEP_TIMEOUT, healthy), async {
                if gate_on {
                    gate_until(&mut gate, healthy).await
                } else {
                    None
                }
            });
        match http {
            Some(t1) => http_times.push(t1 - t0),
            None => failures += 1,
        }
        match gated {
            Some(t1) => gate_times.push(t1 - t0),
            None => gate_on = false,
        }
    }
    let writes = support::metric_sum(
        &served.metrics().await,
        "wavegate_gate_status_writes_total",
        "",
    ) - writes_before;

    let mut fields = Summary::of(&http_times)
        .map(|s| s.fields())
        .unwrap_or_default();
    fields.push(("failures", failures.to_string()));
    report(&format!("readiness.{name}.http"), &fields);
    match Summary::of(&gate_times) {
        Some(s) if gate_times.len() == http_times.len() => {
            let mut fields = s.fields();
            // Two transitions per round are two status writes by this wavegate; fewer means
            // another gate controller on the same cluster wrote some of them first.
            fields.push(("status_writes", format!("{writes:.0}")));
            report(&format!("readiness.{name}.gate"), &fields);
        }
        _ => report(
            &format!("readiness.{name}.gate"),
            &[
                ("status", "unavailable".into()),
                (
                    "reason",
                    if gate_applied {
                        "the WaveGate status did not follow (is the gate controller running?)"
                    } else {
                        "WaveGate CRD not installed"
                    }
                    .into(),
                ),
            ],
        ),
    }
    support::drop_namespace(client, &ns).await;
}

#[tokio::main]
async fn main() {
    let served = Served::new(&support::required("--wavegate"));
    let rounds = support::arg_or("--rounds", 30usize);
    let client = cluster::client().await;
    for scenario in [Scenario::Service, Scenario::Database] {
        run(&client, &served, scenario, rounds).await;
    }
}
