//! The CNPG Database check against an independent reference of docs/contracts.md. Written from the contract and CNPG's reconciler, sharing no code with the
//! check:
//!
//! - Healthy needs: the Database exists and is not being deleted; its Cluster exists and is
//!   not being deleted and has had a primary (`currentPrimary` set: a Cluster that never had
//!   one did not apply anything, so `applied: true` is about an older Cluster of its name);
//!   the Cluster is not a replica cluster (`spec.replica`: read-only, CNPG applies nothing
//!   there); `status.applied` is true and `status.observedGeneration` equals `metadata.generation`;
//!   with `requireClusterReady`, the Cluster's `Ready` condition is True.
//! - Degraded (only ever as a persistent finding, after the grace period) needs CNPG's own
//!   failure, `status.applied: false`, on a Database and Cluster that both exist and are not
//!   being deleted, the Cluster not a replica, and a primary that could have applied it (`currentPrimary` set, equal to
//!   `targetPrimary`, an instance ready); with one, that failure is always persistent.
//!
//! Random generations, observed generations, applied/message, deletion and Cluster states;
//! checked after every state. `PROPTEST_CASES` sets how many (default 2,000 here).

use crate::proptest_config;

use proptest::prelude::*;
use serde_json::{Value, json};
use wavegate::checks::cnpg;
use wavegate::health::{Finding, HealthStatus};

#[derive(Debug, Clone)]
struct Db {
    generation: Option<i64>,
    deleting: bool,
    has_cluster_ref: bool,
    ensure_absent: bool,
    /// `None`: no status at all.
    status: Option<Status>,
}

#[derive(Debug, Clone)]
struct Status {
    applied: Option<bool>,
    observed: Option<i64>,
    message: Option<String>,
}

#[derive(Debug, Clone)]
struct Cluster {
    ready: Option<bool>,
    deleting: bool,
    /// 0: no `currentPrimary` (bootstrapping, or recreated under the same name); 1: a primary
    /// that could act (`currentPrimary == targetPrimary`); 2: a switchover pending.
    primary: u8,
    ready_instances: i64,
    /// A replica cluster (`spec.replica` naming another primary): read-only, CNPG applies no
    /// Database there, and what it applied before a demotion is the primary cluster's now.
    replica: bool,
}

fn db() -> impl Strategy<Value = Db> {
    let status = (
        prop::option::of(any::<bool>()),
        prop::option::of(0i64..6),
        prop::option::of(prop_oneof![
            Just(String::new()),
            Just("The orphan database object is not reconciled".to_string()),
            Just("waiting for the cluster to become primary".to_string()),
            "[ -~]{0,30}",
        ]),
    )
        .prop_map(|(applied, observed, message)| Status {
            applied,
            observed,
            message,
        });
    (
        prop::option::weighted(0.97, 1i64..6),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.97),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.85, status),
    )
        .prop_map(
            |(generation, deleting, has_cluster_ref, ensure_absent, status)| Db {
                generation,
                deleting,
                has_cluster_ref,
                ensure_absent,
                status,
            },
        )
}

fn cluster() -> impl Strategy<Value = Option<Cluster>> {
    prop::option::weighted(
        0.85,
        (
            prop::option::of(any::<bool>()),
            prop::bool::weighted(0.15),
            prop_oneof![1 => Just(0u8), 3 => Just(1u8), 1 => Just(2u8)],
            0i64..3,
            prop::bool::weighted(0.2),
        )
            .prop_map(
                |(ready, deleting, primary, ready_instances, replica)| Cluster {
                    ready,
                    deleting,
                    primary,
                    ready_instances,
                    replica,
                },
            ),
    )
}

fn db_json(d: &Db) -> Value {
    let mut v = json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
        "metadata": {"name": "forgejo", "namespace": "ddb"},
        "spec": {"name": "forgejo", "owner": "app",
                 "ensure": if d.ensure_absent { "absent" } else { "present" }},
    });
    if let Some(g) = d.generation {
        v["metadata"]["generation"] = g.into();
    }
    if d.deleting {
        v["metadata"]["deletionTimestamp"] = "2025-12-19T17:00:00Z".into();
    }
    if d.has_cluster_ref {
        v["spec"]["cluster"] = json!({"name": "ddb-cluster"});
    }
    if let Some(s) = &d.status {
        let mut status = json!({});
        if let Some(a) = s.applied {
            status["applied"] = a.into();
        }
        if let Some(o) = s.observed {
            status["observedGeneration"] = o.into();
        }
        if let Some(m) = &s.message {
            status["message"] = m.clone().into();
        }
        v["status"] = status;
    }
    v
}

fn cluster_json(c: &Cluster) -> Value {
    let mut v = json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": "ddb-cluster", "namespace": "ddb", "generation": 1},
        "spec": {"instances": 3},
        "status": {"instances": 3, "readyInstances": c.ready_instances},
    });
    match c.primary {
        1 => {
            v["status"]["currentPrimary"] = "ddb-cluster-1".into();
            v["status"]["targetPrimary"] = "ddb-cluster-1".into();
        }
        2 => {
            v["status"]["currentPrimary"] = "ddb-cluster-1".into();
            v["status"]["targetPrimary"] = "ddb-cluster-2".into();
        }
        _ => {}
    }
    if let Some(ready) = c.ready {
        v["status"]["conditions"] = json!([{"type": "Ready",
            "status": if ready { "True" } else { "False" }}]);
    }
    if c.deleting {
        v["metadata"]["deletionTimestamp"] = "2025-12-19T17:00:00Z".into();
    }
    if c.replica {
        v["spec"]["replica"] = json!({"primary": "ddb-eu", "source": "ddb-eu"});
    }
    v
}

fn usable_cluster(c: Option<&Cluster>) -> bool {
    c.is_some_and(|c| !c.deleting && !c.replica)
}

fn oracle_healthy(d: &Db, c: Option<&Cluster>, require_ready: bool) -> bool {
    let Some(s) = &d.status else { return false };
    !d.deleting
        && d.has_cluster_ref
        && usable_cluster(c)
        && c.is_some_and(|c| c.primary != 0)
        && s.applied == Some(true)
        && d.generation.is_some()
        && s.observed == d.generation
        && (!require_ready || c.is_some_and(|c| c.ready == Some(true)))
}

/// CNPG's failure with a primary that could have applied the Database: only the instance
/// manager of `currentPrimary` reconciles it, and not during a switchover.
fn oracle_failed(d: &Db, c: Option<&Cluster>) -> bool {
    !d.deleting
        && d.has_cluster_ref
        && usable_cluster(c)
        && c.is_some_and(|c| c.primary == 1 && c.ready_instances >= 1)
        && d.status.as_ref().is_some_and(|s| s.applied == Some(false))
}

proptest! {
    #![proptest_config(proptest_config::config(2000))]
    #[test]
    fn database_check_is_never_healthy_or_degraded_without_the_oracles_evidence(
        d in db(),
        c in cluster(),
        require_ready in any::<bool>(),
    ) {
        let params = cnpg::Params { require_cluster_ready: require_ready };
        let c_json = c.as_ref().map(cluster_json);
        let finding = cnpg::check("ddb", "forgejo", Some(&db_json(&d)), c_json.as_ref(), &params);
        match &finding {
            Finding::Settled(v) => {
                prop_assert_ne!(v.status, HealthStatus::Degraded, "settled Degraded: {}", v.message);
                if v.status == HealthStatus::Healthy {
                    prop_assert!(
                        oracle_healthy(&d, c.as_ref(), require_ready),
                        "false Healthy: {}\n{:?}\n{:?}", v.message, d, c
                    );
                }
            }
            Finding::Persistent { message } => {
                prop_assert!(
                    oracle_failed(&d, c.as_ref()),
                    "persistent failure without CNPG's applied=false: {message}\n{d:?}\n{c:?}"
                );
            }
        }
        // A definite failure the primary had its chance at is not waited on forever; and
        // with a generation to judge, it is a persistent finding.
        if oracle_failed(&d, c.as_ref()) && d.generation.is_some() {
            prop_assert!(
                matches!(&finding, Finding::Persistent { .. }),
                "CNPG's failure with an acting primary not persistent: {finding:?}\n{d:?}\n{c:?}"
            );
        }
        // What the oracle calls healthy, the check does too (no needless waiting).
        if oracle_healthy(&d, c.as_ref(), require_ready) {
            prop_assert!(
                matches!(&finding, Finding::Settled(v) if v.status == HealthStatus::Healthy),
                "not Healthy: {finding:?}"
            );
        }
    }
}
