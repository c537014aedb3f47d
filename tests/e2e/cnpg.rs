//! On the real local control plane: an applied CNPG Database whose Cluster is being deleted,
//! then gone, then recreated under the same name, is not Healthy until the new Cluster applies
//! it — asked through wavegate's HTTP API.

use crate::cluster;

use cluster::{Wavegate, apply, eventually, patch_status};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn status(v: &Value) -> &str {
    v["status"].as_str().unwrap_or("<none>")
}

fn message(v: &Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn applied_database_is_not_healthy_while_its_cluster_is_deleted_or_gone() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "issue8-cnpg").await;
    let cluster_ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Cluster", "clusters");
    let db_ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Database", "databases");

    // A finalizer holds the Cluster in "being deleted", as CNPG's own resources can.
    apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg", "namespace": ns,
                            "finalizers": ["wavegate.dev/test-hold"]},
               "spec": {"instances": 1}}),
    )
    .await;
    patch_status(
        &client,
        &cluster_ar,
        &ns,
        "pg",
        json!({"instances": 1, "readyInstances": 1, "currentPrimary": "pg-1", "targetPrimary": "pg-1",
               "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterIsReady",
                               "message": "Cluster is Ready",
                               "lastTransitionTime": "2025-12-19T16:29:41Z"}]}),
    )
    .await;
    let db = apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"name": "forgejo", "owner": "app", "cluster": {"name": "pg"}}}),
    )
    .await;
    patch_status(
        &client,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": db.metadata.generation.unwrap()}),
    )
    .await;

    let config = EvalConfig {
        verdict_ttl: Duration::from_millis(1),
        ..EvalConfig::default()
    };
    let wg = Wavegate::start(client.clone(), config).await;
    let ask = || wg.health("databases.postgresql.cnpg.io", &ns, "forgejo", "");
    let becomes = |want: &'static str, says: &'static str| {
        let ask = &ask;
        async move {
            eventually(Duration::from_secs(10), says, || async {
                let v = ask().await;
                if status(&v) == want && message(&v).contains(says) {
                    Ok(v)
                } else {
                    Err(v.to_string())
                }
            })
            .await
        }
    };
    becomes("Healthy", "exists on Cluster").await;

    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &cluster_ar);
    clusters
        .delete("pg", &DeleteParams::default())
        .await
        .expect("delete Cluster");
    let v = becomes("Progressing", "is being deleted").await;
    assert!(message(&v).contains(&format!("Cluster {ns}/pg")), "{v}");

    clusters
        .patch(
            "pg",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the Cluster");
    let v = becomes("Progressing", "does not exist").await;
    assert!(
        message(&v).contains("status.applied is about a Cluster that is gone"),
        "{v}"
    );

    // Recreated under the same name before CNPG's operator saw it gone (nothing rewrote the
    // Database's status), and its primary already runs: CNPG never applies a Database whose
    // generation it has observed, so no database exists on this Cluster. The API server dated
    // the status write; the new Cluster is younger (timestamps are whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg", "namespace": ns},
               "spec": {"instances": 1}}),
    )
    .await;
    patch_status(
        &client,
        &cluster_ar,
        &ns,
        "pg",
        json!({"instances": 1, "readyInstances": 1, "currentPrimary": "pg-1", "targetPrimary": "pg-1",
               "phase": "Cluster in healthy state",
               "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterIsReady",
                               "message": "Cluster is Ready",
                               "lastTransitionTime": "2025-12-19T16:29:41Z"}]}),
    )
    .await;
    // (Until the watch shows the primary, the rule before this one says the same of a
    // Cluster that never had one: wait for the status write's date to be the reason.)
    let v = becomes("Progressing", "before Cluster").await;
    assert!(
        message(&v).contains("an older Cluster of the same name"),
        "{v}"
    );
    assert!(message(&v).contains("change the Database's spec"), "{v}");

    // Once the new Cluster's primary applies it (a status written now), it is Healthy again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    patch_status(
        &client,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": true, "message": "applied by pg-1"}),
    )
    .await;
    becomes("Healthy", "exists on Cluster").await;
}

/// CNPG 1.30 in a distributed topology: the Cluster that applied a Database is demoted to a
/// replica of another cluster. Before its instance manager rewrites the Database's status, the
/// Cluster's spec already says so; after, CNPG reports `applied` unset, "waiting for the cluster
/// to become primary". Neither is Healthy; a promotion and CNPG's new apply are.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn database_on_a_demoted_cluster_is_not_healthy_until_promoted_and_applied_again() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "cnpg-demoted").await;
    let cluster_ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Cluster", "clusters");
    let db_ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Database", "databases");
    apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg", "namespace": ns},
               "spec": {"instances": 1}}),
    )
    .await;
    patch_status(
        &client,
        &cluster_ar,
        &ns,
        "pg",
        json!({"instances": 1, "readyInstances": 1, "currentPrimary": "pg-1", "targetPrimary": "pg-1",
               "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterIsReady",
                               "message": "Cluster is Ready",
                               "lastTransitionTime": "2025-12-19T16:29:41Z"}]}),
    )
    .await;
    let db = apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"name": "forgejo", "owner": "app", "cluster": {"name": "pg"}}}),
    )
    .await;
    let generation = db.metadata.generation.unwrap();
    patch_status(
        &client,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": generation}),
    )
    .await;

    let config = EvalConfig {
        verdict_ttl: Duration::from_millis(1),
        ..EvalConfig::default()
    };
    let wg = Wavegate::start(client.clone(), config).await;
    let ask = || wg.health("databases.postgresql.cnpg.io", &ns, "forgejo", "");
    let becomes = |want: &'static str, says: &'static str| {
        let ask = &ask;
        async move {
            eventually(Duration::from_secs(10), says, || async {
                let v = ask().await;
                if status(&v) == want && message(&v).contains(says) {
                    Ok(v)
                } else {
                    Err(v.to_string())
                }
            })
            .await
        }
    };
    becomes("Healthy", "exists on Cluster").await;

    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &cluster_ar);
    let replica = |primary: &str| json!({"spec": {"replica": {"self": "pg", "primary": primary, "source": "pg-eu"}}});
    clusters
        .patch(
            "pg",
            &PatchParams::default(),
            &Patch::Merge(replica("pg-eu")),
        )
        .await
        .expect("demote the Cluster");
    becomes(
        "Progressing",
        "CNPG's applied: true is from before it saw the Cluster as a replica",
    )
    .await;

    // The demoted primary's instance manager withdraws the verdict; observedGeneration stays.
    let databases: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &db_ar);
    databases
        .patch_status(
            "forgejo",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"applied": null,
                "message": "waiting for the cluster to become primary"}})),
        )
        .await
        .expect("CNPG's report of the demotion");
    let v = becomes("Progressing", "waiting for the cluster to become primary").await;
    assert!(message(&v).contains("is a replica cluster"), "{v}");

    clusters
        .patch("pg", &PatchParams::default(), &Patch::Merge(replica("pg")))
        .await
        .expect("promote the Cluster");
    becomes("Progressing", "CNPG has not applied the database yet").await;
    patch_status(
        &client,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": true, "message": null, "observedGeneration": generation}),
    )
    .await;
    becomes("Healthy", "exists on Cluster").await;
}
