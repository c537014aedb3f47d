//! The two field reports, replayed on the real local control plane (kube-apiserver, etcd and
//! kube-controller-manager's EndpointSlice controller), asked through wavegate's HTTP API.

use crate::cluster;
use crate::crdb_standin;

use cluster::{Wavegate, apply, eventually, patch_status, pod, set_pod_ready};
use crdb_standin::{CrdbStandin, NodeState};
use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use wavegate::evaluate::EvalConfig;

fn status(v: &Value) -> &str {
    v["status"].as_str().unwrap_or("<none>")
}

fn message(v: &Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

/// Seed 001: `Service forgejo` selects `app=forgejo`, the chart labelled its pod `app=gitea`.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn selector_matching_no_pods_is_not_healthy_until_fixed_and_endpoints_publish() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "seed001-svc").await;
    pod(
        &client,
        &ns,
        "forgejo-0",
        // As the chart labels it (tests/scenarios/seed-001-forgejo.yaml): the release name
        // `forgejo` under app.kubernetes.io/instance is what makes it a near match.
        json!({"app": "gitea", "app.kubernetes.io/name": "gitea",
               "app.kubernetes.io/instance": "forgejo"}),
    )
    .await;
    set_pod_ready(&client, &ns, "forgejo-0", "10.244.1.7", true).await;
    let service = |selector: &str| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"selector": {"app": selector}, "ports": [{"port": 3000}]}})
    };
    apply(&client, service("forgejo")).await;
    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;

    let v = wg.health("services", &ns, "forgejo", "").await;
    assert_ne!(status(&v), "Healthy", "{v}");
    assert!(message(&v).contains("app=forgejo"), "{v}");
    assert!(
        message(&v).contains("forgejo-0") && message(&v).contains("gitea"),
        "the message must name the pod that was probably meant: {v}"
    );

    // Fix the selector; kube-controller-manager publishes the EndpointSlice shortly after.
    apply(&client, service("gitea")).await;
    let started = Instant::now();
    let healthy = eventually(Duration::from_secs(20), "Service turns Healthy", || async {
        let v = wg.health("services", &ns, "forgejo", "").await;
        if status(&v) == "Healthy" {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    assert!(message(&healthy).contains("1 ready endpoint"), "{healthy}");
    eprintln!("selector fixed → Healthy in {:?}", started.elapsed());

    // The pod stops being Ready: the endpoint goes not-ready and so does the verdict.
    set_pod_ready(&client, &ns, "forgejo-0", "10.244.1.7", false).await;
    eventually(
        Duration::from_secs(20),
        "Service leaves Healthy",
        || async {
            let v = wg.health("services", &ns, "forgejo", "").await;
            if status(&v) == "Progressing" {
                Ok(())
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
}

/// A headless join Service with `minReady=0` is ready as soon as it exists (seed 000's race).
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn join_service_exists_only_check() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "seed000-join").await;
    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    let v = wg
        .health("services", &ns, "cockroachdb-join", "?minReady=0")
        .await;
    assert_eq!(status(&v), "Missing", "{v}");
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "cockroachdb-join", "namespace": ns},
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                        "selector": {"crdb.cockroachlabs.com/cluster": "cockroachdb"},
                        "ports": [{"port": 26258}]}}),
    )
    .await;
    eventually(Duration::from_secs(10), "join Service exists", || async {
        let v = wg
            .health("services", &ns, "cockroachdb-join", "?minReady=0")
            .await;
        if status(&v) == "Healthy" {
            Ok(())
        } else {
            Err(v.to_string())
        }
    })
    .await;
}

/// Seed 001: Forgejo started before CNPG had created its database.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn cnpg_database_is_healthy_only_when_applied_at_current_generation() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "seed001-db").await;
    let db_ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Database", "databases");
    let database = |owner: &str| {
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"name": "forgejo", "owner": owner, "cluster": {"name": "pg"}}})
    };
    apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg", "namespace": ns},
               "spec": {"instances": 1}}),
    )
    .await;
    // Its primary runs (CNPG's instance manager there is what applies a Database).
    let clusters = cluster::api_resource("postgresql.cnpg.io", "v1", "Cluster", "clusters");
    patch_status(
        &client,
        &clusters,
        &ns,
        "pg",
        json!({"readyInstances": 1, "currentPrimary": "pg-1", "targetPrimary": "pg-1"}),
    )
    .await;
    let created = apply(&client, database("forgejo")).await;
    let generation = created.metadata.generation.unwrap();
    let config = EvalConfig {
        verdict_ttl: Duration::from_millis(1),
        cnpg_grace: Duration::from_secs(2),
        ..EvalConfig::default()
    };
    let wg = Wavegate::start(client.clone(), config).await;
    let ask = || wg.health("databases.postgresql.cnpg.io", &ns, "forgejo", "");

    let v = ask().await;
    assert_eq!(status(&v), "Progressing", "no status yet: {v}");

    // Applied, but for an older generation: the spec changed since.
    let updated = apply(&client, database("gitea")).await;
    assert!(updated.metadata.generation.unwrap() > generation);
    patch_status(
        &client,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": generation}),
    )
    .await;
    let v = eventually(Duration::from_secs(10), "stale status seen", || async {
        let v = ask().await;
        if message(&v).contains("generation") {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    assert_eq!(status(&v), "Progressing", "{v}");

    let current = updated.metadata.generation.unwrap();
    patch_status(
        &client,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": current}),
    )
    .await;
    eventually(Duration::from_secs(10), "Database Healthy", || async {
        let v = ask().await;
        if status(&v) == "Healthy" {
            Ok(())
        } else {
            Err(v.to_string())
        }
    })
    .await;

    // CNPG failed to apply: Progressing first (it retries), Degraded after the grace.
    patch_status(
        &client,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": false, "observedGeneration": current,
               "message": "role \"gitea\" does not exist"}),
    )
    .await;
    let v = eventually(Duration::from_secs(10), "failure seen", || async {
        let v = ask().await;
        if message(&v).contains("does not exist") {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    assert_eq!(
        status(&v),
        "Progressing",
        "a fresh failure must not fail the sync: {v}"
    );
    let v = eventually(Duration::from_secs(10), "Degraded after grace", || async {
        let v = ask().await;
        if status(&v) == "Degraded" {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    assert!(message(&v).contains("role \"gitea\" does not exist"), "{v}");
}

const ID_A: &str = "15152a17-fcc9-4a51-8c04-af0ec0126551";
const ID_B: &str = "2c4d3ec6-47f5-4161-97ff-ef4b12f595f0";

/// Seed 000: two pods that each bootstrapped alone, then joined; and a pod that never answers.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn cockroachdb_split_is_degraded_joined_is_healthy_hung_pod_is_not() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "seed000-crdb").await;
    // An insecure cluster: /_admin/v1/cluster answers without a login. (Credentials go only
    // over verified TLS to pods the CrdbCluster controls: tests/offline/probe.rs.)

    // Pod IPs are loopback addresses where stand-ins answer; 127.0.0.21/22 are this test's own.
    let a = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, 21), 0).await;
    let b = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, 22), a.port()).await;
    a.set(NodeState::ready(1, 1, ID_A));
    b.set(NodeState::ready(1, 1, ID_B));

    apply(
        &client,
        json!({"apiVersion": "crdb.cockroachlabs.com/v1beta1", "kind": "CrdbCluster",
               "metadata": {"name": "cockroachdb", "namespace": ns},
               "spec": {"regions": [{"code": "local", "nodes": 2, "namespace": ns}],
                        "template": {"spec": {"httpPort": a.port()}}}}),
    )
    .await;
    for (pod_name, ip) in [
        ("cockroachdb-0", "127.0.0.21"),
        ("cockroachdb-1", "127.0.0.22"),
    ] {
        pod(
            &client,
            &ns,
            pod_name,
            json!({"crdb.cockroachlabs.com/cluster": "cockroachdb"}),
        )
        .await;
        set_pod_ready(&client, &ns, pod_name, ip, true).await;
    }
    let probe_timeout = Duration::from_millis(700);
    let config = EvalConfig {
        verdict_ttl: Duration::from_millis(1),
        probe_ttl: Duration::from_millis(1),
        probe_timeout,
        ..EvalConfig::default()
    };
    let wg = Wavegate::start(client.clone(), config).await;
    let ask = || {
        wg.health(
            "crdbclusters.crdb.cockroachlabs.com",
            &ns,
            "cockroachdb",
            "",
        )
    };

    let v = eventually(Duration::from_secs(10), "split detected", || async {
        let v = ask().await;
        if status(&v) == "Degraded" {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    assert!(
        message(&v).contains(ID_A) && message(&v).contains(ID_B),
        "{v}"
    );

    // Probe results are cached briefly, so each transition is awaited rather than expected on
    // the very next ask.
    a.set(NodeState::waiting_for_init());
    b.set(NodeState::waiting_for_init());
    let v = eventually(Duration::from_secs(10), "waiting for init", || async {
        let v = ask().await;
        if status(&v) != "Degraded" {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    assert_eq!(status(&v), "Progressing", "{v}");
    assert!(
        message(&v).contains("waiting for cluster initialization"),
        "{v}"
    );

    a.set(NodeState::ready(1, 2, ID_A));
    b.set(NodeState::ready(2, 2, ID_A));
    eventually(
        Duration::from_secs(10),
        "joined cluster Healthy",
        || async {
            let v = ask().await;
            if status(&v) == "Healthy" {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;

    b.set(NodeState::hanging());
    // Wait out the probe cache, then time one ask that has to probe the hung pod.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let v = ask().await;
    let took = started.elapsed();
    assert_ne!(status(&v), "Healthy", "{v}");
    assert!(
        took < probe_timeout + Duration::from_millis(500),
        "a hung pod held the ask for {took:?} (probe timeout {probe_timeout:?})"
    );
}
