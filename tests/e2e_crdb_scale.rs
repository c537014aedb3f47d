//! Issue 11 item 4 on the local control plane: a 100-node CrdbCluster (stand-ins on
//! 127.0.91.1–100) costs one probe round per pod per probe TTL however many ask, and never more
//! than `probe::MAX_CONCURRENT_ROUNDS` rounds at once. Counts, not times: how long it takes is
//! benches/coalescing.rs's job (`scripts/bench.sh`, docs/benchmarks.md).

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/counting_standin.rs"]
mod counting_standin;

use cluster::{Wavegate, apply, pod, set_pod_ready};
use counting_standin::Fleet;
use serde_json::json;
use std::time::Duration;
use wavegate::evaluate::EvalConfig;
use wavegate::probe::MAX_CONCURRENT_ROUNDS;

const PODS: usize = 100;
const CONCURRENT_ASKS: usize = 50;
const LATER_ASKS: usize = 10;

#[tokio::test]
async fn a_hundred_node_cluster_is_probed_once_per_pod_with_bounded_concurrency() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "issue11-crdb100").await;
    // Each /health answer takes 20 ms, so rounds overlap and an unbounded prober would have
    // all 100 in flight at once.
    let fleet = Fleet::start([127, 0, 91], PODS, 0, Duration::from_millis(20)).await;

    apply(
        &client,
        json!({"apiVersion": "crdb.cockroachlabs.com/v1beta1", "kind": "CrdbCluster",
               "metadata": {"name": "crdb", "namespace": ns},
               "spec": {"regions": [{"code": "local", "nodes": PODS, "cloudProvider": "k3d",
                                      "namespace": ns}],
                        "template": {"spec": {"httpPort": fleet.port}}}}),
    )
    .await;
    for i in 1..=PODS {
        let name = format!("crdb-{i}");
        pod(
            &client,
            &ns,
            &name,
            json!({"crdb.cockroachlabs.com/cluster": "crdb"}),
        )
        .await;
        set_pod_ready(&client, &ns, &name, &format!("127.0.91.{i}"), true).await;
    }

    // Everything exists before wavegate starts: its first list sees all 100 pods.
    let config = EvalConfig {
        probe_ttl: Duration::from_secs(120),
        ..EvalConfig::default()
    };
    let wg = Wavegate::start_in(client.clone(), config, &[&ns]).await;
    let resource = "crdbclusters.crdb.cockroachlabs.com";

    let verdicts = futures::future::join_all(
        (0..CONCURRENT_ASKS).map(|_| wg.health(resource, &ns, "crdb", "")),
    )
    .await;
    for v in &verdicts {
        assert_eq!(v["status"], "Healthy", "{v}");
    }
    // Later asks, each after the 50 ms verdict TTL: evaluated again, probes from the cache.
    for _ in 0..LATER_ASKS {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let v = wg.health(resource, &ns, "crdb", "").await;
        assert_eq!(v["status"], "Healthy", "{v}");
    }

    let rounds = fleet.rounds();
    let requests = fleet.requests();
    let off: Vec<String> = (0..PODS)
        .filter(|&i| rounds[i] != 1 || requests[i] != 3)
        .map(|i| {
            format!(
                "127.0.91.{}: {} rounds, {} requests",
                i + 1,
                rounds[i],
                requests[i]
            )
        })
        .collect();
    assert!(
        off.is_empty(),
        "{} asks: every pod should see exactly one probe round (3 requests); not so for {} pod(s):\n  {}",
        CONCURRENT_ASKS + LATER_ASKS,
        off.len(),
        off.join("\n  ")
    );
    let peak = fleet.peak_rounds_in_flight();
    assert!(
        peak <= MAX_CONCURRENT_ROUNDS,
        "{peak} probe rounds were in flight at once (bound {MAX_CONCURRENT_ROUNDS})"
    );
    // The 20 ms answers made rounds overlap: the bound, not luck, kept the peak down.
    assert!(peak > 1, "rounds never overlapped: the test proves nothing");
}
