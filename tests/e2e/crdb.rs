//! On the real local control plane: CockroachDB credentials go only to pods
//! the CrdbCluster controls (here through its StatefulSet, as with the older
//! cockroach-operator), over TLS verified against the cluster's Service name — never to pods a
//! caller's selector picked, even when those serve a valid node certificate.
//!
//! The shared control plane runs no StatefulSet controller, so the test creates the
//! StatefulSet's pods as that controller would (controller reference to the StatefulSet's
//! UID, which the API server and the garbage collector hold to the real object).

use crate::cluster;
use crate::crdb_standin;

use cluster::{Wavegate, apply, eventually, pod, set_pod_ready};
use crdb_standin::{Cert, CrdbStandin, NodeState};
use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::time::Duration;
use wavegate::evaluate::EvalConfig;
use wavegate::probe::{Credentials, Scheme, TlsSettings};

const ID_A: &str = "15152a17-fcc9-4a51-8c04-af0ec0126551";
const ID_B: &str = "2c4d3ec6-47f5-4161-97ff-ef4b12f595f0";
const USER: &str = "wavegate-probe";
const PASSWORD: &str = "e2e-s3cret";

fn status(v: &Value) -> &str {
    v["status"].as_str().unwrap_or("<none>")
}

fn message(v: &Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn credentials_reach_only_the_crdbclusters_own_pods_over_verified_tls() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "issue9-crdb").await;

    // Pod IPs are loopback addresses where stand-ins answer; 127.0.0.51-53 are this test's.
    // All three serve a valid node certificate: identity alone is not membership.
    let a = CrdbStandin::start_tls(Ipv4Addr::new(127, 0, 0, 51), 0, Cert::Node).await;
    let b = CrdbStandin::start_tls(Ipv4Addr::new(127, 0, 0, 52), a.port(), Cert::Node).await;
    let mine = CrdbStandin::start_tls(Ipv4Addr::new(127, 0, 0, 53), a.port(), Cert::Node).await;
    a.set(NodeState::ready(1, 2, ID_A).with_login(USER, PASSWORD));
    b.set(NodeState::ready(2, 2, ID_A).with_login(USER, PASSWORD));
    mine.set(NodeState::ready(3, 2, ID_B).with_login(USER, PASSWORD));

    let crdb = apply(
        &client,
        json!({"apiVersion": "crdb.cockroachlabs.com/v1alpha1", "kind": "CrdbCluster",
               "metadata": {"name": "roach", "namespace": ns},
               "spec": {"nodes": 2, "httpPort": a.port(), "tlsEnabled": true}}),
    )
    .await;
    let uid = crdb.metadata.uid.expect("CrdbCluster uid");
    // The operator's StatefulSet: controlled by the CrdbCluster; its pods are created by
    // kube-controller-manager, controlled by the StatefulSet.
    let labels = json!({"app.kubernetes.io/name": "cockroachdb",
                        "app.kubernetes.io/instance": "roach",
                        "app.kubernetes.io/component": "database"});
    let sts = apply(
        &client,
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "roach", "namespace": ns, "ownerReferences": [{
                   "apiVersion": "crdb.cockroachlabs.com/v1alpha1", "kind": "CrdbCluster",
                   "name": "roach", "uid": uid, "controller": true}]},
               "spec": {"replicas": 2, "serviceName": "roach",
                        "podManagementPolicy": "Parallel",
                        "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"nodeName": "wavegate-node", "containers": [
                                         {"name": "db", "image": "example.invalid/cockroach:1"}]}}}}),
    )
    .await;
    let sts_uid = sts.metadata.uid.expect("StatefulSet uid");
    for (name, ip) in [("roach-0", "127.0.0.51"), ("roach-1", "127.0.0.52")] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": ns, "labels": labels,
                                "ownerReferences": [{"apiVersion": "apps/v1",
                                    "kind": "StatefulSet", "name": "roach", "uid": sts_uid,
                                    "controller": true, "blockOwnerDeletion": true}]},
                   "spec": {"nodeName": "wavegate-node", "containers": [
                       {"name": "db", "image": "example.invalid/cockroach:1"}]}}),
        )
        .await;
        set_pod_ready(&client, &ns, name, ip, true).await;
    }
    // A pod anyone with create on pods could make.
    pod(&client, &ns, "mine-0", json!({"app": "mine"})).await;
    set_pod_ready(&client, &ns, "mine-0", "127.0.0.53", true).await;

    let config = EvalConfig {
        verdict_ttl: Duration::from_millis(1),
        probe_ttl: Duration::from_millis(1),
        probe_timeout: Duration::from_millis(1500),
        crdb_scheme: Scheme::Https,
        crdb_tls: TlsSettings {
            ca_pem: Some(crdb_standin::cluster_ca_pem()),
            // The test certificates name prod/cockroachdb's Service, whatever this test's
            // namespace and cluster are called.
            server_name: Some("cockroachdb-public.prod.svc.cluster.local".into()),
            ..TlsSettings::default()
        },
        crdb_credentials: Some(Credentials {
            username: USER.into(),
            password: PASSWORD.into(),
        }),
        ..EvalConfig::default()
    };
    let wg = Wavegate::start(client.clone(), config.clone()).await;
    let resource = "crdbclusters.crdb.cockroachlabs.com";

    // The cluster's own pods: the cluster ID is readable only after a login, so seeing it in
    // a Healthy verdict proves the credentials reached them (and only over verified TLS: the
    // stand-ins speak nothing else).
    let v = eventually(
        Duration::from_secs(20),
        "Healthy with cluster ID",
        || async {
            let v = wg.health(resource, &ns, "roach", "").await;
            if status(&v) == "Healthy" && message(&v).contains(ID_A) {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert!(a.logins() >= 1 && b.logins() >= 1, "{v}");
    assert_eq!(a.open_sessions() + b.open_sessions(), 0);

    // A caller's selector: the pod is probed (unauthenticated), never logged in to.
    let selected = wg
        .health(resource, &ns, "roach", "?selector=app=mine&expectedNodes=2")
        .await;
    assert_ne!(status(&selected), "Healthy", "{selected}");
    // Without the CrdbCluster, a selector is nothing at all.
    let ghost = wg
        .health(resource, &ns, "ghost", "?selector=app=mine&expectedNodes=1")
        .await;
    assert_eq!(status(&ghost), "Missing", "{ghost}");
    assert_eq!(
        mine.login_attempts(),
        0,
        "the credentials reached a selected pod"
    );

    // Expecting nothing proves nothing: refused as bad input, not judged.
    let (code, body) = wg
        .get(&format!(
            "/api/v1/health/{resource}/{ns}/roach?expectedNodes=0"
        ))
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("expectedNodes"), "{body}");

    for v in [&v, &selected, &ghost] {
        let text = v.to_string();
        assert!(!text.contains(PASSWORD) && !text.contains(USER), "{text}");
    }

    // --crdb-credentials-for names another cluster: roach's own pods, certificates and all,
    // are probed without the credentials (a CA shared across tenants proves no membership).
    let before = a.logins() + b.logins();
    let config = EvalConfig {
        crdb_credentials_for: Some([(ns.clone(), "payments".to_string())].into()),
        ..config
    };
    let narrowed = Wavegate::start(client.clone(), config).await;
    let v = narrowed.health(resource, &ns, "roach", "").await;
    assert!(!message(&v).contains(ID_A), "{v}");
    assert_eq!(a.logins() + b.logins(), before, "{v}");
}
