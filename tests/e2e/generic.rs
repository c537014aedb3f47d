//! The generic rule on the real control plane: a Deployment judged with no
//! expressions — as a gate's bare `resource` check and the waves view judge it — follows Argo
//! CD's Deployment rule, read through the API server and wavegate's watch cache. The local
//! control plane runs no deployment controller (and no kubelet), so the test writes the
//! Deployment's status as the deployment controller does, step by step.

use crate::cluster;

use cluster::{Wavegate, apply, eventually, patch_status};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

async fn wait_for(wg: &Wavegate, ns: &str, want: &str) -> Value {
    eventually(Duration::from_secs(10), want, || async {
        let v = wg.health("deployments.apps", ns, "forgejo", "").await;
        if v["status"] == want {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn deployment_past_its_progress_deadline_with_no_available_replica_is_not_healthy() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "generic").await;
    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    let created = apply(
        &client,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "forgejo", "namespace": ns},
            "spec": {
                "replicas": 1,
                "progressDeadlineSeconds": 600,
                "selector": {"matchLabels": {"app": "forgejo"}},
                "template": {
                    "metadata": {"labels": {"app": "forgejo"}},
                    "spec": {"containers": [{"name": "main", "image": "example.invalid/forgejo:12"}]}
                }
            }
        }),
    )
    .await;
    let generation = created.metadata.generation.unwrap();
    let deployments = cluster::api_resource("apps", "v1", "Deployment", "deployments");

    // Just created, no status yet: Healthy on the previous main.
    let v = wait_for(&wg, &ns, "Progressing").await;
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("not reported a status"),
        "{v}"
    );

    // The controller observed it, the pod never became available, the deadline passed.
    patch_status(
        &client,
        &deployments,
        &ns,
        "forgejo",
        json!({
            "observedGeneration": generation, "replicas": 1, "updatedReplicas": 1,
            "unavailableReplicas": 1,
            "conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                 "message": "Deployment does not have minimum availability."},
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                 "message": "ReplicaSet \"forgejo-6b8d4c9f7\" has timed out progressing."}
            ]
        }),
    )
    .await;
    let v = wait_for(&wg, &ns, "Degraded").await;
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("exceeded its progress deadline"),
        "{v}"
    );

    // The pod turned available after all; the controller records the rollout complete.
    patch_status(
        &client,
        &deployments,
        &ns,
        "forgejo",
        json!({
            "observedGeneration": generation, "replicas": 1, "updatedReplicas": 1,
            "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": null,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
            ]
        }),
    )
    .await;
    wait_for(&wg, &ns, "Healthy").await;
}
