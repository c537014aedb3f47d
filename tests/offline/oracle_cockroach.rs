//! The CockroachDB judge against an independent reference of the rules in docs/contracts.md.
//! The oracle below is written from the contract, not from the check,
//! and shares no code with it:
//!
//! - Healthy needs: at least one expected pod; exactly the expected pods exist, none
//!   terminating, every one probed; each is ready (Kubernetes and CockroachDB agree) and sees
//!   exactly the expected number of live nodes; at most one cluster ID among them.
//! - Degraded right away needs two cluster IDs among the probed pods; the slower Degraded
//!   (a persistent finding, Degraded after the grace period) needs every pod present, ready
//!   and answering, and inconsistent evidence: two pods claiming one node ID, or someone
//!   seeing fewer live nodes than expected while the pods disagree about the count or are
//!   more than the count. Pods that agree on too few nodes are waiting (Progressing).
//!
//! Random plans (what the cache showed) and probes (what the pods said) — node IDs, live
//! counts, cluster IDs, readiness, probe failures — are judged and checked after every state.
//! `PROPTEST_CASES` sets how many states each property explores (default 2,000 here).

use crate::proptest_config;

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use wavegate::checks::cockroach::{
    self, Plan, PodProbe, PodText, ProbeTarget, Readiness, UnprobedPod,
};
use wavegate::health::{Finding, HealthStatus};

const IDS: [&str; 3] = [
    "15152a17-fcc9-4a51-8c04-af0ec0126551",
    "2c4d3ec6-47f5-4161-97ff-ef4b12f595f0",
    "8a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a2b",
];

/// One pod as the cache and the prober saw it.
#[derive(Debug, Clone)]
enum Seen {
    /// Has an IP and was probed (or the probe is missing when `probe` is `None`).
    Target {
        k8s_ready: bool,
        probe: Option<Answer>,
    },
    /// Exists but could not be probed (no IP yet, failed).
    Unprobed,
    /// Being deleted.
    Terminating,
}

#[derive(Debug, Clone)]
struct Answer {
    /// 0 ready, 1 declined, 2 not ready (own reason), 3 unreachable.
    readiness: u8,
    node_id: Option<i64>,
    live: Option<i64>,
    cluster: Option<usize>,
}

fn answer() -> impl Strategy<Value = Answer> {
    (
        prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
        prop::option::weighted(0.9, 1i64..5),
        prop::option::weighted(0.9, 0i64..7),
        prop::option::weighted(
            0.7,
            prop_oneof![8 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize)],
        ),
    )
        .prop_map(|(readiness, node_id, live, cluster)| Answer {
            readiness,
            node_id,
            live,
            cluster,
        })
}

fn seen() -> impl Strategy<Value = Seen> {
    prop_oneof![
        8 => (prop::bool::weighted(0.9), prop::option::weighted(0.95, answer()))
            .prop_map(|(k8s_ready, probe)| Seen::Target { k8s_ready, probe }),
        1 => Just(Seen::Unprobed),
        1 => Just(Seen::Terminating),
    ]
}

/// A state: expected counts and the pods.
fn state() -> impl Strategy<Value = (u32, u32, Vec<Seen>)> {
    (1u32..6).prop_flat_map(|nodes| (Just(nodes), 0..=nodes, prop::collection::vec(seen(), 0..7)))
}

fn build(expected_nodes: u32, expected_pods: u32, pods: &[Seen]) -> (Plan, Vec<PodProbe>) {
    let mut plan = Plan {
        expected_nodes,
        expected_pods,
        targets: Vec::new(),
        unprobed: Vec::new(),
        terminating: Vec::new(),
        not_ready_in_kubernetes: BTreeMap::new(),
    };
    let mut probes = Vec::new();
    for (i, seen) in pods.iter().enumerate() {
        let pod = format!("cockroachdb-{i}");
        match seen {
            Seen::Target { k8s_ready, probe } => {
                plan.targets.push(ProbeTarget {
                    pod: pod.clone(),
                    uid: format!("uid-{i}"),
                    ip: format!("10.0.0.{i}"),
                    port: 8080,
                    controlled_by_cluster: true,
                });
                if !k8s_ready {
                    plan.not_ready_in_kubernetes
                        .insert(pod.clone(), "Pod condition Ready=False".into());
                }
                if let Some(a) = probe {
                    let readiness = match a.readiness {
                        0 => Readiness::Ready,
                        1 => Readiness::Declined(PodText::new("node is draining")),
                        2 => Readiness::NotReady("HTTP 503 without a reason".into()),
                        _ => Readiness::Unreachable("connection failed".into()),
                    };
                    probes.push(PodProbe {
                        node_id: a.node_id,
                        live_nodes: a.live,
                        cluster_id: a.cluster.map(|c| IDS[c].to_string()),
                        ..PodProbe::bare(pod, readiness)
                    });
                }
            }
            Seen::Unprobed => plan.unprobed.push(UnprobedPod {
                pod,
                reason: "no pod IP yet".into(),
            }),
            Seen::Terminating => plan.terminating.push(pod),
        }
    }
    (plan, probes)
}

/// The contract's Healthy, from the raw state.
fn oracle_ready(expected_nodes: u32, expected_pods: u32, pods: &[Seen]) -> bool {
    if expected_pods == 0 || pods.len() != expected_pods as usize {
        return false;
    }
    let mut ids = BTreeSet::new();
    for seen in pods {
        let Seen::Target {
            k8s_ready: true,
            probe: Some(a),
        } = seen
        else {
            return false;
        };
        if a.readiness != 0 || a.live != Some(i64::from(expected_nodes)) {
            return false;
        }
        if let Some(c) = a.cluster {
            ids.insert(c);
        }
    }
    ids.len() <= 1
}

/// The contract's proof of a split: two cluster IDs among the probed pods.
fn oracle_two_cluster_ids(pods: &[Seen]) -> bool {
    let ids: BTreeSet<usize> = pods
        .iter()
        .filter_map(|s| match s {
            Seen::Target { probe: Some(a), .. } => a.cluster,
            _ => None,
        })
        .collect();
    ids.len() >= 2
}

/// The contract's persistent finding: everyone there, ready and answering, someone sees too
/// few live nodes or two pods claim one node, and the evidence is inconsistent: two pods claim
/// one node, the pods disagree about the live count, or there are more pods than the live
/// nodes they all see. Pods that agree on a count at least as large as their number are one
/// cluster waiting for its other nodes (a multi-region cluster brought up region by region).
fn oracle_persistent_evidence(expected_nodes: u32, expected_pods: u32, pods: &[Seen]) -> bool {
    if expected_pods == 0 || pods.len() != expected_pods as usize {
        return false;
    }
    let mut short = false;
    let mut node_ids = BTreeSet::new();
    let mut counts = BTreeSet::new();
    let mut shared = false;
    for seen in pods {
        let Seen::Target {
            k8s_ready: true,
            probe: Some(a),
        } = seen
        else {
            return false;
        };
        let Some(live) = a.live else { return false };
        if a.readiness != 0 || live > i64::from(expected_nodes) {
            return false;
        }
        short |= live < i64::from(expected_nodes);
        counts.insert(live);
        if let Some(id) = a.node_id {
            shared |= !node_ids.insert(id);
        }
    }
    let disagree = counts.len() > 1;
    let fewer_than_pods = counts.iter().any(|c| *c < pods.len() as i64);
    shared || (short && (disagree || fewer_than_pods))
}

/// Everyone there, ready and answering, agreeing on one live count below the expected one and
/// at least their own number, no node claimed twice: waiting, never a failure.
fn oracle_waiting_for_other_nodes(expected_nodes: u32, expected_pods: u32, pods: &[Seen]) -> bool {
    if expected_pods == 0 || pods.len() != expected_pods as usize {
        return false;
    }
    let mut counts = BTreeSet::new();
    let mut node_ids = BTreeSet::new();
    for seen in pods {
        let Seen::Target {
            k8s_ready: true,
            probe: Some(a),
        } = seen
        else {
            return false;
        };
        let Some(live) = a.live else { return false };
        if a.readiness != 0 {
            return false;
        }
        counts.insert(live);
        if let Some(id) = a.node_id
            && !node_ids.insert(id)
        {
            return false;
        }
    }
    counts.len() == 1
        && counts
            .first()
            .is_some_and(|c| *c < i64::from(expected_nodes) && *c >= pods.len() as i64)
}

proptest! {
    #![proptest_config(proptest_config::config(2000))]
    #[test]
    fn judge_is_never_healthy_or_degraded_without_the_oracles_evidence(
        (expected_nodes, expected_pods, pods) in state()
    ) {
        let (plan, probes) = build(expected_nodes, expected_pods, &pods);
        let finding = cockroach::judge("prod", "cockroachdb", &plan, &probes);
        match &finding {
            Finding::Settled(v) if v.status == HealthStatus::Healthy => {
                prop_assert!(
                    oracle_ready(expected_nodes, expected_pods, &pods),
                    "false Healthy: {}\n{:?}", v.message, pods
                );
            }
            Finding::Settled(v) if v.status == HealthStatus::Degraded => {
                prop_assert!(
                    oracle_two_cluster_ids(&pods),
                    "Degraded without two cluster IDs: {}\n{:?}", v.message, pods
                );
            }
            Finding::Persistent { message } => {
                prop_assert!(
                    oracle_persistent_evidence(expected_nodes, expected_pods, &pods),
                    "persistent finding without evidence: {message}\n{pods:?}"
                );
            }
            Finding::Settled(_) => {}
        }
        // A partial rollout whose pods agree is never a failure, not even after the grace.
        if oracle_waiting_for_other_nodes(expected_nodes, expected_pods, &pods)
            && !oracle_two_cluster_ids(&pods)
        {
            prop_assert!(
                matches!(&finding, Finding::Settled(v) if v.status == HealthStatus::Progressing),
                "agreeing pods of a partial rollout judged {finding:?}\n{pods:?}"
            );
        }
        // And the check does not miss what the oracle proves: a split is never Healthy or
        // merely waiting.
        if oracle_two_cluster_ids(&pods) {
            prop_assert!(
                matches!(&finding, Finding::Settled(v) if v.status == HealthStatus::Degraded),
                "two cluster IDs not Degraded: {finding:?}"
            );
        }
    }
}

/// A CrdbCluster spec and what the pods report, through `plan` and `judge` together: the
/// expected counts come from the spec (a local region expecting no node must not give
/// "Healthy: all 0 pods ready").
#[derive(Debug, Clone)]
struct Spec {
    /// `nodes` per region (`None`: the field is absent).
    regions: Vec<Option<u32>>,
    /// Index of `status.region` in `regions`; out of range: an unknown code; `None`: absent.
    local: Option<usize>,
    expected_nodes: Option<u32>,
    pods: usize,
    /// Live nodes every pod reports.
    live: i64,
    /// `spec.mode` (`None`: absent, the operator's default `MutableOnly`).
    mode: Option<&'static str>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(prop::option::weighted(0.9, 0u32..4), 1..4),
        prop::option::of(0usize..4),
        prop::option::weighted(0.3, 0u32..7),
        0usize..6,
        0i64..10,
        prop::option::of(prop::sample::select(vec![
            "MutableOnly",
            "CreateOnly",
            "Disabled",
        ])),
    )
        .prop_map(|(regions, local, expected_nodes, pods, live, mode)| Spec {
            regions,
            local,
            expected_nodes,
            pods,
            live,
            mode,
        })
}

/// The contract's expectation: every region's nodes join one cluster and each member sees
/// them all; only the local region's nodes run here (all of them when there is one region or
/// the local one is unknown); `expectedNodes` overrides the cluster-wide count.
fn oracle_expected(s: &Spec) -> (i64, i64) {
    let total: i64 = s.regions.iter().map(|n| i64::from(n.unwrap_or(0))).sum();
    let local = match s.local {
        Some(i) if s.regions.len() > 1 && i < s.regions.len() => {
            Some(i64::from(s.regions[i].unwrap_or(0)))
        }
        _ => None,
    };
    match (s.expected_nodes.map(i64::from), local) {
        (Some(e), Some(l)) => (e, l.min(e)),
        (Some(e), None) => (e, e),
        (None, Some(l)) => (total, l),
        (None, None) => (total, total),
    }
}

fn spec_cluster(s: &Spec) -> serde_json::Value {
    let regions: Vec<serde_json::Value> = s
        .regions
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut r = serde_json::json!({"code": format!("r{i}")});
            if let Some(n) = n {
                r["nodes"] = (*n).into();
            }
            r
        })
        .collect();
    let mut cluster = serde_json::json!({
        "apiVersion": "crdb.cockroachlabs.com/v1beta1", "kind": "CrdbCluster",
        "metadata": {"name": "cockroachdb", "namespace": "prod", "uid": "u-1"},
        "spec": {"regions": regions},
    });
    if let Some(i) = s.local {
        cluster["status"] = serde_json::json!({"region": format!("r{i}")});
    }
    if let Some(mode) = s.mode {
        cluster["spec"]["mode"] = mode.into();
    }
    cluster
}

/// `plan` and `judge` over a spec whose pods all answer, as one cluster, that they see `live`.
fn judge_spec(s: &Spec) -> Finding {
    let params = cockroach::Params {
        expected_nodes: s.expected_nodes,
        ..cockroach::Params::default()
    };
    match cockroach::plan(
        "prod",
        "cockroachdb",
        Some(&spec_cluster(s)),
        &spec_pods(s),
        &params,
    ) {
        Err(finding) => finding,
        Ok(plan) => {
            let probes: Vec<PodProbe> = plan
                .targets
                .iter()
                .enumerate()
                .map(|(i, t)| PodProbe {
                    node_id: Some(i as i64 + 1),
                    live_nodes: Some(s.live),
                    cluster_id: Some(IDS[0].to_string()),
                    ..PodProbe::bare(t.pod.clone(), Readiness::Ready)
                })
                .collect();
            cockroach::judge("prod", "cockroachdb", &plan, &probes)
        }
    }
}

/// The pods as the cache keeps them (views of the Pod objects).
fn spec_pods(s: &Spec) -> Vec<std::sync::Arc<wavegate::views::PodView>> {
    (0..s.pods)
        .map(|i| {
            let pod = serde_json::json!({
                "metadata": {"name": format!("cockroachdb-{i}"), "namespace": "prod",
                             "labels": {"crdb.cockroachlabs.com/cluster": "cockroachdb"}},
                "status": {"phase": "Running", "podIP": format!("10.0.0.{i}"),
                           "conditions": [{"type": "Ready", "status": "True"}]},
            });
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).unwrap();
            std::sync::Arc::new((&pod).into())
        })
        .collect()
}

proptest! {
    #![proptest_config(proptest_config::config(2000))]
    #[test]
    fn what_the_spec_expects_is_what_healthy_needs(s in spec()) {
        let finding = judge_spec(&s);
        let (nodes, local) = oracle_expected(&s);
        // The operator reconciles the CrdbNodes unless the spec turns that off.
        let reconciled = s.mode != Some("Disabled");
        if let Finding::Settled(v) = &finding
            && v.status == HealthStatus::Healthy
        {
            prop_assert!(
                reconciled && nodes >= 1 && local >= 1 && s.pods as i64 == local
                    && s.live == nodes,
                "false Healthy: {}\n{s:?}", v.message
            );
        }
        if !reconciled {
            prop_assert!(
                matches!(&finding, Finding::Settled(v) if v.status == HealthStatus::Suspended),
                "a cluster the operator does not reconcile is not Suspended: {finding:?}"
            );
        }
        prop_assert!(
            !matches!(&finding, Finding::Settled(v) if v.status == HealthStatus::Degraded),
            "Degraded with one cluster ID: {finding:?}"
        );
    }
}

/// The incident: an 8-node cluster over three regions brought up one region at a time. The
/// three pods of this region all agree on the nodes live so far (3, then 6, then 8) for far
/// longer than the grace; the old judge called that a probable split and failed the sync.
/// Every step is judged through `plan` and `judge`, with the grace bookkeeping the evaluator
/// keeps (one failure identity, Degraded once it lasted the grace).
#[test]
fn multi_region_cluster_brought_up_region_by_region_is_never_a_split() {
    let s = Spec {
        regions: vec![Some(3), Some(3), Some(2)],
        local: Some(0),
        expected_nodes: None,
        pods: 3,
        live: 0,
        mode: None,
    };
    let plan = cockroach::plan(
        "prod",
        "cockroachdb",
        Some(&spec_cluster(&s)),
        &spec_pods(&s),
        &cockroach::Params::default(),
    )
    .expect("a plan for the local region");
    assert_eq!((plan.expected_nodes, plan.expected_pods), (8, 3));
    let grace = std::time::Duration::from_secs(60);
    let mut failing_for = std::time::Duration::ZERO;
    // Ten minutes per region, judged every 30 s.
    for (live, steps, want) in [
        (3, 20, HealthStatus::Progressing),
        (6, 20, HealthStatus::Progressing),
        (8, 1, HealthStatus::Healthy),
    ] {
        for _ in 0..steps {
            let probes: Vec<PodProbe> = plan
                .targets
                .iter()
                .enumerate()
                .map(|(i, t)| PodProbe {
                    node_id: Some(i as i64 + 1),
                    live_nodes: Some(live),
                    cluster_id: None,
                    ..PodProbe::bare(t.pod.clone(), Readiness::Ready)
                })
                .collect();
            let finding = cockroach::judge("prod", "cockroachdb", &plan, &probes);
            failing_for = match finding {
                Finding::Persistent { .. } => failing_for + std::time::Duration::from_secs(30),
                Finding::Settled(_) => std::time::Duration::ZERO,
            };
            let v = finding.resolve(failing_for, grace);
            assert_eq!(v.status, want, "{live} of 8 live: {v}");
        }
    }
}

/// A cluster moved from the older operator to the current one (helm-charts
/// docs/migration/operator/manual_migration.md): while the older operator still runs it, the
/// object reads `spec.mode: Disabled`; Helm's adoption sets `MutableOnly`; a rollback sets
/// `Disabled` again. The same two healthy pods throughout: Healthy only while the operator
/// reconciles the cluster, and never Degraded for the choice.
#[test]
fn cluster_handed_between_operators_is_healthy_only_while_the_operator_reconciles_it() {
    let mut s = Spec {
        regions: vec![Some(2)],
        local: Some(0),
        expected_nodes: None,
        pods: 2,
        live: 2,
        mode: Some("Disabled"),
    };
    for (mode, want) in [
        (Some("Disabled"), HealthStatus::Suspended),
        (Some("MutableOnly"), HealthStatus::Healthy),
        (Some("Disabled"), HealthStatus::Suspended),
        (None, HealthStatus::Healthy),
        (Some("CreateOnly"), HealthStatus::Healthy),
    ] {
        s.mode = mode;
        let v = judge_spec(&s).resolve(
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(60),
        );
        assert_eq!(v.status, want, "mode {mode:?}: {v}");
    }
}
