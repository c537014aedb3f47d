//! The HTTP contract: readiness follows the caches, bad input is a clear 4xx, a broken watch is
//! never Healthy, and the token guards the API.

use crate::cluster;

use cluster::{Wavegate, apply};
use serde_json::json;
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

/// A client for an API server that is not there: its watches can never sync.
fn unreachable_client() -> kube::Client {
    let mut config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    config.connect_timeout = Some(Duration::from_millis(200));
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn unsynced_cache_is_not_ready_and_never_healthy() {
    let wg = Wavegate::start_with(
        unreachable_client(),
        EvalConfig::default(),
        Duration::from_millis(300),
        None,
    )
    .await;
    let v = wg.health("services", "cicd", "forgejo", "").await;
    assert_ne!(v["status"], "Healthy", "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("services"),
        "the message must say which cache: {v}"
    );
    let (code, body) = wg.get("/readyz").await;
    assert_eq!(code, 503, "{body}");
    let (code, _) = wg.get("/healthz").await;
    assert_eq!(code, 200);
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn readyz_turns_ready_once_caches_sync() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "api-ready").await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": ns},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let wg = Wavegate::start(client, EvalConfig::default()).await;
    let v = wg.health("services", &ns, "web", "").await;
    assert_eq!(v["status"], "Progressing", "{v}");
    // The required WaveGate watch lists every gate in the cluster; on a loaded machine that
    // may take a moment longer than the Service watch this ask started.
    cluster::eventually(Duration::from_secs(10), "/readyz 200", || async {
        let (code, body) = wg.get("/readyz").await;
        if code == 200 {
            Ok(())
        } else {
            Err(format!("{code}: {body}"))
        }
    })
    .await;
    let (_, metrics) = wg.get("/metrics").await;
    let text = metrics.as_str().unwrap();
    assert!(text.contains("wavegate_asks_total"), "{text}");
    assert!(text.contains("wavegate_watch_restarts_total"), "{text}");
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn bad_input_is_a_clear_4xx() {
    let client = cluster::client().await;
    let wg = Wavegate::start(client, EvalConfig::default()).await;
    for (path, want, says) in [
        ("/api/v1/health/services/Bad_NS/forgejo", 400, "namespace"),
        ("/api/v1/health/services/cicd/-forgejo", 400, "object name"),
        (
            "/api/v1/health/services/cicd/forgejo?minReady=many",
            400,
            "minReady",
        ),
        (
            "/api/v1/health/services/cicd/forgejo?minready=1",
            400,
            "minready",
        ),
        (
            "/api/v1/health/services/cicd/forgejo?expectedNodes=2",
            400,
            "expectedNodes",
        ),
        (
            "/api/v1/health/deployments.apps/cicd/x?healthy=%24.status%5B",
            400,
            "healthy",
        ),
        (
            "/api/v1/health/crdbclusters.crdb.cockroachlabs.com/prod/c?selector=a",
            400,
            "selector",
        ),
        // Off the generic allow-list: refused before any discovery request.
        (
            "/api/v1/health/widgets.nowhere.example/cicd/x",
            403,
            "widgets.nowhere.example",
        ),
        ("/api/v1/health/..%2F..%2Fetc/cicd/x", 404, "resource"),
        ("/api/v1/nothing-here", 404, "endpoint"),
        ("/api/v1/applications/argocd/Bad/waves", 400, "object name"),
        ("/api/v1/waves", 400, "Argocd-Application-Name"),
    ] {
        let (code, body) = wg.get(path).await;
        assert_eq!(code, want, "{path}: {body}");
        let msg = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: no JSON error: {body}"));
        assert!(
            msg.contains(says),
            "{path}: {msg:?} should mention {says:?}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn generic_kind_is_judged_by_kstatus_and_jsonpath() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "api-generic").await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "namespace": ns},
               "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    // Argo CD's own rule for PVCs (gitops-engine health_pvc.go): Pending is Progressing.
    let v = wg.health("persistentvolumeclaims", &ns, "data", "").await;
    assert_eq!(v["status"], "Progressing", "{v}");
    let pvc = cluster::api_resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims");
    cluster::patch_status(&client, &pvc, &ns, "data", json!({"phase": "Bound"})).await;
    cluster::eventually(std::time::Duration::from_secs(5), "Bound PVC", || async {
        let v = wg.health("persistentvolumeclaims", &ns, "data", "").await;
        if v["status"] == "Healthy" {
            Ok(())
        } else {
            Err(v.to_string())
        }
    })
    .await;
    let v = wg
        .health(
            "persistentvolumeclaims",
            &ns,
            "data",
            "?healthy=%24.spec%5B%3F%40.volumeMode%20%3D%3D%20%27Block%27%5D",
        )
        .await;
    assert_eq!(
        v["status"], "Progressing",
        "healthy expression does not hold: {v}"
    );
    let v = wg.health("persistentvolumeclaims", &ns, "absent", "").await;
    assert_eq!(v["status"], "Missing", "{v}");
}

/// `?degraded=$.data…` on a ConfigMap (or `$.spec.containers[*].env` on a pod) would quote any
/// field of any readable object. Such kinds are off the generic allow-list.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn generic_check_on_configmaps_secrets_or_pods_is_refused() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "api-kinds").await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "settings", "namespace": ns},
               "data": {"password": "hunter2"}}),
    )
    .await;
    let wg = Wavegate::start(client, EvalConfig::default()).await;
    for path in [
        format!("/api/v1/health/configmaps/{ns}/settings?degraded=%24.data.password"),
        format!("/api/v1/health/secrets/{ns}/settings"),
        "/api/v1/health/pods/kube-system/etcd?degraded=%24.spec.containers%5B*%5D.env".into(),
    ] {
        let (code, body) = wg.get(&path).await;
        assert_eq!(code, 403, "{path}: {body}");
        let msg = body["error"].as_str().unwrap();
        assert!(msg.contains("--generic-kinds"), "{path}: {msg}");
        assert!(!msg.contains("hunter2"), "{path}: {msg}");
    }
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn token_guards_the_api_but_not_the_probes() {
    let client = cluster::client().await;
    let wg = Wavegate::start_with(
        client,
        EvalConfig::default(),
        Duration::from_secs(5),
        Some("t0ken"),
    )
    .await;
    let (code, body) = wg.get("/api/v1/health/services/default/kubernetes").await;
    assert_eq!(code, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("token"));
    let (code, _) = wg.get("/healthz").await;
    assert_eq!(code, 200);
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/health/services/default/kubernetes",
            wg.url
        ))
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}
