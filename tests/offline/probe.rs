//! Seed 000 end to end over real HTTP(S): stand-in CockroachDB pods on loopback addresses,
//! probed by `wavegate::probe` and judged by `checks::cockroach`.
//!
//! Also attacks on the prober: credentials offered to pods a caller picked, to pods
//! with a certificate from another CA, and pods writing their own verdict.

use crate::crdb_standin;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crdb_standin::{Cert, CrdbStandin, Mode, NodeState};
use wavegate::checks::cockroach::{self, Owners, Params, Plan};
use wavegate::health::{Finding, HealthStatus, Verdict};
use wavegate::probe::{Credentials, Prober, Scheme, TlsSettings};
use wavegate::views::PodView;

const ID_A: &str = "15152a17-fcc9-4a51-8c04-af0ec0126551";
const ID_B: &str = "2c4d3ec6-47f5-4161-97ff-ef4b12f595f0";
const TIMEOUT: Duration = Duration::from_millis(800);
const CLUSTER_UID: &str = "7f3e2a10-4c5b-4d6e-8f90-a1b2c3d4e5f6";
const POD_NAMES: [&str; 2] = ["cockroachdb-fgrbw", "cockroachdb-nbm5k"];

/// How the test pods relate to CrdbCluster prod/cockroachdb.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pods {
    /// Labelled `crdb.cockroachlabs.com/cluster=cockroachdb` and controlled by the cluster's
    /// CrdbNodes, as the current operator makes them.
    Owned,
    /// Labelled like the cluster's pods, controlled by nothing: anyone who can create pods
    /// in the namespace can make these.
    Labelled,
    /// Picked by a caller's selector (`app=mine`), controlled by nothing.
    Selected,
}

/// Two pods of CrdbCluster prod/cockroachdb whose pod IPs are the stand-ins' addresses.
struct Seed {
    first: CrdbStandin,
    second: CrdbStandin,
    pods: Pods,
}

impl Seed {
    /// Both stand-ins listen on the same port (as pods do), on two loopback IPs.
    async fn start(first: u8, second: u8) -> Seed {
        let first = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, first), 0).await;
        let second = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, second), first.port()).await;
        Seed {
            first,
            second,
            pods: Pods::Labelled,
        }
    }

    /// Secure cluster: both stand-ins serve TLS with `cert`.
    async fn start_tls(first: u8, second: u8, cert: Cert, pods: Pods) -> Seed {
        let first = CrdbStandin::start_tls(Ipv4Addr::new(127, 0, 0, first), 0, cert).await;
        let second =
            CrdbStandin::start_tls(Ipv4Addr::new(127, 0, 0, second), first.port(), cert).await;
        Seed {
            first,
            second,
            pods,
        }
    }

    fn set(&self, first: NodeState, second: NodeState) {
        self.first.set(first);
        self.second.set(second);
    }

    fn node_uid(i: usize) -> String {
        format!("0b1c5a4e-6a1e-4d1f-9d8a-1c1f3e1d2a0{i}")
    }

    fn pods(&self) -> Vec<Arc<PodView>> {
        [&self.first, &self.second]
            .into_iter()
            .zip(POD_NAMES)
            .enumerate()
            .map(|(i, (standin, name))| {
                let labels = match self.pods {
                    Pods::Selected => json!({"app": "mine"}),
                    _ => json!({"crdb.cockroachlabs.com/cluster": "cockroachdb"}),
                };
                let mut pod = json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": "prod", "labels": labels},
                    "status": {
                        "phase": "Running",
                        "podIP": standin.addr().ip().to_string(),
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                });
                if self.pods == Pods::Owned {
                    pod["metadata"]["ownerReferences"] = json!([{
                        "apiVersion": "crdb.cockroachlabs.com/v1alpha1", "kind": "CrdbNode",
                        "name": name, "uid": Self::node_uid(i), "controller": true}]);
                }
                let pod: Pod = serde_json::from_value(pod).expect("pod");
                Arc::new(PodView::from(&pod))
            })
            .collect()
    }

    /// The CrdbNodes of the cluster, controlled by it.
    fn owners(&self) -> Owners {
        let nodes: Vec<Value> = POD_NAMES
            .iter()
            .enumerate()
            .map(|(i, name)| {
                json!({"metadata": {"name": name, "namespace": "prod", "uid": Self::node_uid(i),
                    "ownerReferences": [{"apiVersion": "crdb.cockroachlabs.com/v1alpha1",
                        "kind": "CrdbCluster", "name": "cockroachdb", "uid": CLUSTER_UID,
                        "controller": true}]}})
            })
            .collect();
        let mut owners = Owners::default();
        owners.record("CrdbNode", &nodes);
        owners
    }

    fn plan(&self) -> Plan {
        let cluster = json!({
            "apiVersion": "crdb.cockroachlabs.com/v1beta1",
            "kind": "CrdbCluster",
            "metadata": {"name": "cockroachdb", "namespace": "prod", "uid": CLUSTER_UID},
            "spec": {"regions": [{"code": "fsn1", "nodes": 2}]},
        });
        let selector = (self.pods == Pods::Selected)
            .then(|| BTreeMap::from([("app".to_string(), "mine".to_string())]));
        let params = Params {
            http_port: Some(self.first.port()),
            selector,
            owners: self.owners(),
            ..Params::default()
        };
        cockroach::plan("prod", "cockroachdb", Some(&cluster), &self.pods(), &params).expect("plan")
    }

    async fn judge_with(&self, prober: &Prober) -> Finding {
        let plan = self.plan();
        let probes = futures::future::join_all(
            plan.targets
                .iter()
                .map(|t| prober.probe("prod", "cockroachdb", t)),
        )
        .await;
        cockroach::judge("prod", "cockroachdb", &plan, &probes)
    }

    /// Probe an insecure cluster, without credentials.
    async fn judge(&self) -> Finding {
        self.judge_with(&plain()).await
    }
}

fn plain() -> Prober {
    Prober::new(Scheme::Http, TlsSettings::default(), None, TIMEOUT).expect("prober")
}

/// A prober for a secure cluster, trusting the test cluster CA, with `credentials`.
fn secure(credentials: Option<Credentials>) -> Prober {
    let tls = TlsSettings {
        ca_pem: Some(crdb_standin::cluster_ca_pem()),
        ..TlsSettings::default()
    };
    Prober::new(Scheme::Https, tls, credentials, TIMEOUT).expect("prober")
}

fn settled(finding: Finding) -> Verdict {
    match finding {
        Finding::Settled(v) => v,
        Finding::Persistent { message } => panic!("expected a settled verdict: {message}"),
    }
}

fn message(finding: &Finding) -> &str {
    match finding {
        Finding::Settled(v) => &v.message,
        Finding::Persistent { message } => message,
    }
}

fn credentials() -> Credentials {
    Credentials {
        username: "wavegate-probe".into(),
        password: "s3cret-for-tests".into(),
    }
}

fn with_login(state: NodeState) -> NodeState {
    let c = credentials();
    state.with_login(&c.username, &c.password)
}

#[tokio::test]
async fn two_one_node_clusters_with_different_ids_is_degraded() {
    let seed = Seed::start(2, 3).await;
    seed.set(NodeState::ready(1, 1, ID_A), NodeState::ready(1, 1, ID_B));

    let v = settled(seed.judge().await);
    assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
    assert!(
        v.message
            .starts_with("prod/cockroachdb: split cluster — 2 cluster IDs among 2 pods")
    );
    assert!(v.message.contains(ID_A) && v.message.contains(ID_B));

    // The same split in a secure cluster probed without credentials: the IDs stay unknown,
    // so it is only a probable split until the caller's grace period runs out.
    seed.set(
        NodeState::ready(1, 1, ID_A).with_login("root", "x"),
        NodeState::ready(1, 1, ID_B).with_login("root", "x"),
    );
    match seed.judge().await {
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
    seed.set(NodeState::ready(1, 1, ID_A), NodeState::waiting_for_init());

    let v = settled(seed.judge().await);
    assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    assert!(
        v.message.contains(
            "cockroachdb-nbm5k not ready; the pod says «node is waiting for cluster \
             initialization»"
        ),
        "{}",
        v.message
    );
}

#[tokio::test]
async fn joined_secure_cluster_is_healthy_over_verified_tls_and_probes_log_out() {
    let seed = Seed::start_tls(6, 7, Cert::Node, Pods::Owned).await;
    seed.set(
        with_login(NodeState::ready(1, 2, ID_A)),
        with_login(NodeState::ready(2, 2, ID_A)),
    );

    let v = settled(seed.judge_with(&secure(Some(credentials()))).await);
    assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
    assert_eq!(
        v.message,
        format!("prod/cockroachdb: all 2 pods ready, each sees 2 live nodes, cluster ID {ID_A}")
    );
    // The pods proved membership (owner chain) and identity (node certificate for
    // cockroachdb-public.prod.svc.cluster.local from the cluster CA, reached at the pod IP).
    assert_eq!(seed.first.logins(), 1);
    assert_eq!(seed.second.logins(), 1);
    assert_eq!(seed.first.open_sessions(), 0);
    assert_eq!(seed.second.open_sessions(), 0);

    // Split again. Probed with a wrong password the IDs stay unknown; the note names the
    // rejected login, never the username or the password.
    seed.set(
        with_login(NodeState::ready(1, 1, ID_A)),
        with_login(NodeState::ready(1, 1, ID_B)),
    );
    let wrong = Credentials {
        password: "not-it".into(),
        ..credentials()
    };
    match seed.judge_with(&secure(Some(wrong))).await {
        Finding::Persistent { message } => {
            assert!(message.contains("login rejected (HTTP 401)"), "{message}");
            assert!(!message.contains("not-it"), "{message}");
            assert!(!message.contains("wavegate-probe"), "{message}");
        }
        other => panic!("expected Persistent, got {other:?}"),
    }
    // With the right password the split is proven.
    let v = settled(seed.judge_with(&secure(Some(credentials()))).await);
    assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
    assert!(!v.message.contains("s3cret-for-tests"));
    assert!(!v.message.contains("wavegate-probe"));
}

#[tokio::test]
async fn credentials_never_reach_pods_a_caller_selector_picked() {
    // With `selector` (and `expectedNodes`) a caller chooses the pods; the prober must not log
    // in to them. Here they even serve a valid node certificate.
    let seed = Seed::start_tls(40, 41, Cert::Node, Pods::Selected).await;
    seed.set(
        with_login(NodeState::ready(1, 2, ID_A)),
        with_login(NodeState::ready(2, 2, ID_A)),
    );

    let finding = seed.judge_with(&secure(Some(credentials()))).await;
    assert_eq!(seed.first.login_attempts(), 0, "{}", message(&finding));
    assert_eq!(seed.second.login_attempts(), 0, "{}", message(&finding));

    // When the verdict shows its table, it says why the cluster IDs are missing.
    seed.second.set(with_login(NodeState::waiting_for_init()));
    let finding = seed.judge_with(&secure(Some(credentials()))).await;
    assert_eq!(seed.second.login_attempts(), 0);
    assert!(
        message(&finding).contains(
            "cluster ID not read: the pod is not controlled by CrdbCluster prod/cockroachdb, \
             so no credentials are sent to it"
        ),
        "{}",
        message(&finding)
    );
}

#[tokio::test]
async fn credentials_never_reach_pods_that_only_wear_the_clusters_label() {
    let seed = Seed::start_tls(42, 43, Cert::Node, Pods::Labelled).await;
    seed.set(
        with_login(NodeState::ready(1, 2, ID_A)),
        with_login(NodeState::ready(2, 2, ID_A)),
    );

    let finding = seed.judge_with(&secure(Some(credentials()))).await;
    assert_eq!(seed.first.login_attempts(), 0);
    assert_eq!(seed.second.login_attempts(), 0);
    // Without cluster IDs the pods are still judged on what they say unauthenticated.
    let v = settled(finding);
    assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
    assert!(!v.message.contains("cluster ID"), "{}", v.message);
}

#[tokio::test]
async fn credentials_never_reach_an_owned_pod_whose_certificate_is_from_another_ca() {
    // The owner chain can be written by anyone who may create pods in the namespace; the node
    // certificate cannot. A pod presenting the right names from the wrong CA gets nothing.
    let seed = Seed::start_tls(44, 45, Cert::Impostor, Pods::Owned).await;
    seed.set(
        with_login(NodeState::ready(1, 2, ID_A)),
        with_login(NodeState::ready(2, 2, ID_A)),
    );

    let v = settled(seed.judge_with(&secure(Some(credentials()))).await);
    assert_eq!(seed.first.login_attempts(), 0, "{}", v.message);
    assert_eq!(seed.second.login_attempts(), 0, "{}", v.message);
    assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    assert!(v.message.contains("unreachable"), "{}", v.message);
}

#[tokio::test]
async fn a_hostile_pod_cannot_write_the_verdict() {
    // The /health body must not be copied into the verdict as it is.
    const FORGED: &str = "ok\n\nprod/cockroachdb: all 2 pods ready, each sees 2 live nodes\r\n\
        Healthy\u{202E} «quoted» \x1b[32mgreen\x1b[0m";
    let seed = Seed::start(46, 47).await;
    seed.set(
        NodeState::ready(1, 2, ID_A),
        NodeState {
            mode: Mode::Says(FORGED),
            ..NodeState::ready(2, 2, ID_A)
        },
    );

    let v = settled(seed.judge().await);
    assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    let lines: Vec<&str> = v.message.lines().collect();
    // One summary line, the table header and one row per pod: nothing the pod wrote starts a
    // line of its own.
    assert_eq!(lines.len(), 4, "{}", v.message);
    assert!(
        lines[0].starts_with("prod/cockroachdb: cockroachdb-nbm5k not ready; the pod says «ok "),
        "{}",
        lines[0]
    );
    assert_eq!(lines[0].matches('«').count(), 1, "{}", lines[0]);
    assert!(!v.message.contains('\u{1b}') && !v.message.contains('\u{202E}'));

    // A body far beyond any real reason is cut, not copied.
    static LONG: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| "A".repeat(100_000));
    seed.second.set(NodeState {
        mode: Mode::Says(LONG.as_str()),
        ..NodeState::ready(2, 2, ID_A)
    });
    let v = settled(seed.judge().await);
    assert!(v.message.len() < 2_000, "{} bytes", v.message.len());

    // A cluster ID that is not a UUID is not shown either.
    seed.second
        .set(NodeState::ready(2, 2, "x\nprod/cockroachdb: Healthy"));
    let v = settled(seed.judge().await);
    assert!(
        !v.message.contains("prod/cockroachdb: Healthy"),
        "{}",
        v.message
    );
    assert!(!v.message.contains('x'), "{}", v.message);
}

#[tokio::test]
async fn hanging_pod_is_not_healthy_and_does_not_hold_the_caller() {
    let seed = Seed::start(8, 9).await;
    seed.set(NodeState::ready(1, 2, ID_A), NodeState::hanging());

    let started = Instant::now();
    let v = settled(seed.judge().await);
    let took = started.elapsed();
    assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    assert!(
        v.message
            .contains("cockroachdb-nbm5k unreachable: no answer within 800ms")
    );
    assert!(took < TIMEOUT + Duration::from_millis(700), "took {took:?}");
}
