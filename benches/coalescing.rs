//! Request coalescing: `--asks` (default 1,000) concurrent asks for one CockroachDB cluster that
//! wavegate has never judged (cold verdict and probe caches) should cost one probe round per pod.
//!
//! The cluster is a v1beta1 CrdbCluster with `--pods` (default 2) pods whose IPs are loopback
//! addresses 127.0.88.N, where this bench serves CockroachDB's three HTTP endpoints and counts
//! every request it receives. Run it against a `wavegate serve --probe-ttl` longer than the
//! bench, so that every request counted belongs to the burst.
//!
//! Usage: `cargo bench --bench coalescing -- --wavegate http://127.0.0.1:PORT [--asks 1000]`
//! Prints `BENCH coalescing …` with the requests each stand-in received (all paths, and
//! `/health` alone, which is one per probe round), the evaluations wavegate ran (verdict cache
//! misses) and the verdicts the asks got.

#[path = "../tests/support/cluster.rs"]
mod cluster;
mod support;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::{Served, metric_sum, report};
use tokio::sync::Barrier;

const CLUSTER_ID: &str = "6f2f4c4e-5c1b-4a4e-9d0e-000000000bec";

/// Requests a stand-in node received: all of them, and `/health` (one per probe round).
#[derive(Default)]
struct Counted {
    all: AtomicU64,
    health: AtomicU64,
}

/// A ready node of a `live`-node cluster, as few lines as CockroachDB's shapes allow. The
/// tests' stand-in (`tests/support/crdb_standin.rs`) has no request counter, hence this one.
async fn standin(ip: Ipv4Addr, node_id: usize, live: usize) -> Arc<Counted> {
    let counted = Arc::new(Counted::default());
    let vars = format!(
        "# TYPE node_id gauge\n\
         node_id{{advertise_addr=\"{ip}:26258\",http_addr=\"{ip}:8080\",sql_addr=\"{ip}:26257\"}} {node_id}\n\
         # TYPE liveness_livenodes gauge\n\
         liveness_livenodes {live}\n"
    );
    let app = Router::new()
        .route(
            "/health",
            get(|State(c): State<Arc<Counted>>| async move {
                c.health.fetch_add(1, Ordering::Relaxed);
                axum::Json(json!({}))
            }),
        )
        .route("/_status/vars", get(move || async move { vars }))
        .route(
            "/_admin/v1/cluster",
            get(|| async { axum::Json(json!({"clusterId": CLUSTER_ID})) }),
        )
        .layer(axum::middleware::from_fn_with_state(
            counted.clone(),
            |State(c): State<Arc<Counted>>,
             req: axum::extract::Request,
             next: axum::middleware::Next| async move {
                c.all.fetch_add(1, Ordering::Relaxed);
                next.run(req).await
            },
        ))
        .with_state(counted.clone());
    let listener = tokio::net::TcpListener::bind((ip, 8080))
        .await
        .unwrap_or_else(|e| panic!("stand-in cannot bind {ip}:8080: {e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    counted
}

#[tokio::main]
async fn main() {
    let served = Served::new(&support::required("--wavegate"));
    let asks = support::arg_or("--asks", 1000usize);
    let pods = support::arg_or("--pods", 2usize);
    let client = cluster::client().await;

    let mut counters = Vec::new();
    for i in 1..=pods {
        counters.push(standin(Ipv4Addr::new(127, 0, 88, i as u8), i, pods).await);
    }
    let ns = cluster::namespace(&client, "wgbench-coalesce").await;
    cluster::apply(
        &client,
        json!({"apiVersion": "crdb.cockroachlabs.com/v1beta1", "kind": "CrdbCluster",
               "metadata": {"name": "crdb", "namespace": ns},
               "spec": {"regions": [{"code": "local", "nodes": pods, "cloudProvider": "k3d",
                                      "namespace": ns}]}}),
    )
    .await;
    for i in 1..=pods {
        let pod = format!("crdb-{i}");
        cluster::pod(
            &client,
            &ns,
            &pod,
            json!({"crdb.cockroachlabs.com/cluster": "crdb"}),
        )
        .await;
        cluster::set_pod_ready(&client, &ns, &pod, &format!("127.0.88.{i}"), true).await;
    }
    // wavegate's pod and CrdbCluster watches are already running (the script warmed them up);
    // a watch event takes milliseconds, so after this every pod is in its cache. Asking to
    // find out would fill the very caches this bench needs cold.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let before = served.metrics().await;
    let barrier = Arc::new(Barrier::new(asks));
    let started = Instant::now();
    let burst: Vec<_> = (0..asks)
        .map(|_| {
            let (served, barrier, ns) = (served.clone(), barrier.clone(), ns.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                served
                    .status("crdbclusters.crdb.cockroachlabs.com", &ns, "crdb")
                    .await
            })
        })
        .collect();
    let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
    for ask in burst {
        *verdicts.entry(ask.await.unwrap_or_default()).or_default() += 1;
    }
    let wall = started.elapsed();
    let after = served.metrics().await;
    let delta = |name: &str, label: &str| {
        metric_sum(&after, name, label) - metric_sum(&before, name, label)
    };

    let per_pod = |f: fn(&Counted) -> u64| {
        counters
            .iter()
            .map(|c| f(c).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    report(
        "coalescing",
        &[
            ("asks", asks.to_string()),
            ("pods", pods.to_string()),
            (
                "requests_per_pod",
                per_pod(|c| c.all.load(Ordering::Relaxed)),
            ),
            (
                "rounds_per_pod",
                per_pod(|c| c.health.load(Ordering::Relaxed)),
            ),
            (
                "evaluations",
                format!(
                    "{:.0}",
                    delta("wavegate_verdict_cache_total", "outcome=\"miss\"")
                ),
            ),
            (
                "probes",
                format!("{:.0}", delta("wavegate_probe_duration_seconds_count", "")),
            ),
            (
                "verdicts",
                verdicts
                    .iter()
                    .map(|(s, n)| format!("{s}:{n}"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("wall_ms", support::ms(wall)),
        ],
    );
    support::drop_namespace(&client, &ns).await;
}
