//! Request coalescing: `--asks` (default 1,000) concurrent asks for one CockroachDB cluster that
//! wavegate has never judged (cold verdict and probe caches) should cost one probe round per pod.
//!
//! The cluster is a v1beta1 CrdbCluster with `--pods` (default 2) pods whose IPs are loopback
//! addresses 127.0.88.N, where this bench serves CockroachDB's three HTTP endpoints and counts
//! every request it receives. Run it against a `wavegate serve --probe-ttl` longer than the
//! bench, so that every request counted belongs to the burst.
//!
//! Usage: `cargo bench --bench coalescing -- --wavegate http://127.0.0.1:PORT [--asks 1000]
//! [--pods 2] [--label coalescing]`
//! Prints `BENCH coalescing …` with the requests each stand-in received (all paths, and
//! `/health` alone, which is one per probe round; for more than 8 pods as min–max), the most
//! rounds in flight at once, the evaluations wavegate ran (verdict cache misses), the verdicts
//! the asks got and the wall time of the burst (a cold verification of the whole cluster).

#[path = "../tests/support/cluster.rs"]
mod cluster;
#[path = "../tests/support/counting_standin.rs"]
mod counting_standin;
mod support;

use counting_standin::Fleet;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Served, metric_sum, report};
use tokio::sync::Barrier;

/// Per-pod counts: the list for a few pods, `min–max` for many.
fn per_pod(counts: &[u64]) -> String {
    if counts.len() <= 8 {
        return counts
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
    }
    let (lo, hi) = (counts.iter().min(), counts.iter().max());
    format!("{}–{}", lo.unwrap_or(&0), hi.unwrap_or(&0))
}

#[tokio::main]
async fn main() {
    let served = Served::new(&support::required("--wavegate"));
    let asks = support::arg_or("--asks", 1000usize);
    let pods = support::arg_or("--pods", 2usize);
    let label = support::arg_or("--label", "coalescing".to_string());
    let client = cluster::client().await;

    // Port 8080, CockroachDB's default HTTP port: the CrdbCluster names none.
    let fleet = Fleet::start([127, 0, 88], pods, 8080, Duration::ZERO).await;
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

    report(
        &label,
        &[
            ("asks", asks.to_string()),
            ("pods", pods.to_string()),
            ("requests_per_pod", per_pod(&fleet.requests())),
            ("rounds_per_pod", per_pod(&fleet.rounds())),
            (
                "peak_rounds_in_flight",
                fleet.peak_rounds_in_flight().to_string(),
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
