//! Seed 000 end to end over real HTTP: stand-in CockroachDB pods on loopback addresses, probed
//! by `wavegate::probe` and judged by `checks::cockroach`.

#[path = "support/crdb_standin.rs"]
mod crdb_standin;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crdb_standin::{CrdbStandin, NodeState};
use wavegate::checks::cockroach::{self, Params, Plan};
use wavegate::health::{Finding, HealthStatus, Verdict};
use wavegate::probe::{self, Credentials, TlsSettings};

const ID_A: &str = "15152a17-fcc9-4a51-8c04-af0ec0126551";
const ID_B: &str = "2c4d3ec6-47f5-4161-97ff-ef4b12f595f0";
const TIMEOUT: Duration = Duration::from_millis(800);

/// Two pods of CrdbCluster prod/cockroachdb whose pod IPs are the stand-ins' addresses.
struct Seed {
    first: CrdbStandin,
    second: CrdbStandin,
}

impl Seed {
    /// Both stand-ins listen on the same port (as pods do), on two loopback IPs.
    async fn start(first: u8, second: u8) -> Seed {
        let first = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, first), 0).await;
        let second = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, second), first.port()).await;
        Seed { first, second }
    }

    fn pods(&self) -> Vec<Arc<Pod>> {
        [
            ("cockroachdb-fgrbw", &self.first),
            ("cockroachdb-nbm5k", &self.second),
        ]
        .into_iter()
        .map(|(name, standin)| {
            let pod = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": "prod",
                    "labels": {"crdb.cockroachlabs.com/cluster": "cockroachdb"},
                },
                "status": {
                    "phase": "Running",
                    "podIP": standin.addr().ip().to_string(),
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            });
            Arc::new(serde_json::from_value(pod).expect("pod"))
        })
        .collect()
    }

    fn plan(&self) -> Plan {
        let cluster = json!({
            "apiVersion": "crdb.cockroachlabs.com/v1beta1",
            "kind": "CrdbCluster",
            "metadata": {"name": "cockroachdb", "namespace": "prod"},
            "spec": {"regions": [{"code": "fsn1", "nodes": 2}]},
        });
        let params = Params {
            http_port: Some(self.first.port()),
            ..Params::default()
        };
        cockroach::plan("prod", "cockroachdb", Some(&cluster), &self.pods(), &params).expect("plan")
    }

    async fn judge(&self, credentials: Option<&Credentials>) -> Finding {
        let plan = self.plan();
        let client = probe::client(&TlsSettings::default()).expect("client");
        let probes = futures::future::join_all(
            plan.targets
                .iter()
                .map(|t| probe::probe_pod(&client, t, credentials, TIMEOUT)),
        )
        .await;
        cockroach::judge("prod", "cockroachdb", &plan, &probes)
    }
}

fn settled(finding: Finding) -> Verdict {
    match finding {
        Finding::Settled(v) => v,
        Finding::Persistent { message } => panic!("expected a settled verdict: {message}"),
    }
}

fn credentials() -> Credentials {
    Credentials {
        username: "wavegate".into(),
        password: "s3cret-for-tests".into(),
    }
}

#[tokio::test]
async fn two_one_node_clusters_with_different_ids_is_degraded() {
    let seed = Seed::start(2, 3).await;
    seed.first.set(NodeState::ready(1, 1, ID_A));
    seed.second.set(NodeState::ready(1, 1, ID_B));

    let v = settled(seed.judge(None).await);
    assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
    assert!(
        v.message
            .starts_with("prod/cockroachdb: split cluster — 2 cluster IDs among 2 pods")
    );
    assert!(v.message.contains(ID_A) && v.message.contains(ID_B));

    // The same split in a secure cluster probed without credentials: the IDs stay unknown,
    // so it is only a probable split until the caller's grace period runs out.
    seed.first
        .set(NodeState::ready(1, 1, ID_A).with_login("root", "x"));
    seed.second
        .set(NodeState::ready(1, 1, ID_B).with_login("root", "x"));
    match seed.judge(None).await {
        Finding::Persistent { message } => {
            assert!(message.contains("probable split cluster"), "{message}");
            assert!(!message.contains(ID_A));
        }
        other => panic!("expected Persistent, got {other:?}"),
    }
}

#[tokio::test]
async fn pod_waiting_for_cluster_initialization_is_progressing() {
    let seed = Seed::start(4, 5).await;
    seed.first.set(NodeState::ready(1, 1, ID_A));
    seed.second.set(NodeState::waiting_for_init());

    let v = settled(seed.judge(None).await);
    assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    assert!(
        v.message
            .contains("cockroachdb-nbm5k not ready: node is waiting for cluster initialization")
    );
}

#[tokio::test]
async fn joined_secure_cluster_is_healthy_and_probes_log_out() {
    let seed = Seed::start(6, 7).await;
    let c = credentials();
    seed.first
        .set(NodeState::ready(1, 2, ID_A).with_login(&c.username, &c.password));
    seed.second
        .set(NodeState::ready(2, 2, ID_A).with_login(&c.username, &c.password));

    let v = settled(seed.judge(Some(&c)).await);
    assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
    assert_eq!(
        v.message,
        format!("prod/cockroachdb: all 2 pods ready, each sees 2 live nodes, cluster ID {ID_A}")
    );
    assert_eq!(seed.first.logins(), 1);
    assert_eq!(seed.first.open_sessions(), 0);
    assert_eq!(seed.second.open_sessions(), 0);

    // Split again. Probed with a wrong password the IDs stay unknown; the note names the
    // rejected login, never the password.
    seed.second
        .set(NodeState::ready(1, 1, ID_B).with_login(&c.username, &c.password));
    seed.first
        .set(NodeState::ready(1, 1, ID_A).with_login(&c.username, &c.password));
    let wrong = Credentials {
        password: "not-it".into(),
        ..credentials()
    };
    match seed.judge(Some(&wrong)).await {
        Finding::Persistent { message } => {
            assert!(
                message.contains("login as wavegate rejected (HTTP 401)"),
                "{message}"
            );
            assert!(!message.contains("not-it"));
        }
        other => panic!("expected Persistent, got {other:?}"),
    }
    // With the right password the split is proven.
    let v = settled(seed.judge(Some(&c)).await);
    assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
    assert!(!v.message.contains(&c.password));
}

#[tokio::test]
async fn hanging_pod_is_not_healthy_and_does_not_hold_the_caller() {
    let seed = Seed::start(8, 9).await;
    seed.first.set(NodeState::ready(1, 2, ID_A));
    seed.second.set(NodeState::hanging());

    let started = Instant::now();
    let v = settled(seed.judge(None).await);
    let took = started.elapsed();
    assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    assert!(
        v.message
            .contains("cockroachdb-nbm5k unreachable: no answer within 800ms")
    );
    assert!(took < TIMEOUT + Duration::from_millis(700), "took {took:?}");
}
