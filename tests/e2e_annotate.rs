//! Annotation mode on the real control plane: an opted-in Service gets wavegate's verdict in
//! its annotations, they follow the truth, and they go away with the opt-in.

#[path = "support/cluster.rs"]
mod cluster;

use cluster::{Wavegate, apply, eventually, pod, set_pod_ready};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use serde_json::json;
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

#[tokio::test]
async fn opted_in_service_carries_the_verdict_and_loses_it_with_the_opt_in() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "annotate").await;
    pod(&client, &ns, "web-0", json!({"app": "web"})).await;
    let service = |annotations: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": ns, "annotations": annotations},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    };
    apply(&client, service(json!({"wavegate.dev/annotate": "true"}))).await;
    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns]).await;
    tokio::spawn(wavegate::annotate::run(
        wg.evaluator.clone(),
        wg.metrics.clone(),
        Duration::from_secs(1),
    ));
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let annotation = |s: &Service, k: &str| {
        s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k).cloned())
    };
    let s = eventually(
        Duration::from_secs(15),
        "Progressing annotation",
        || async {
            let s = services.get("web").await.map_err(|e| e.to_string())?;
            match annotation(&s, "wavegate.dev/health-status").as_deref() {
                Some("Progressing") => Ok(s),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        annotation(&s, "wavegate.dev/health-message")
            .unwrap_or_default()
            .contains(&format!("{ns}/web")),
        "{:?}",
        s.metadata.annotations
    );
    // What Argo CD's script checks the verdict against: the selector it was judged with, and
    // how long wavegate stands by it.
    assert_eq!(
        annotation(&s, "wavegate.dev/judged-selector").as_deref(),
        Some("app=web"),
        "{:?}",
        s.metadata.annotations
    );
    let until: i64 = annotation(&s, "wavegate.dev/valid-until")
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("no valid-until: {:?}", s.metadata.annotations));
    assert!(
        until > k8s_openapi::jiff::Timestamp::now().as_second(),
        "{until}"
    );

    set_pod_ready(&client, &ns, "web-0", "10.244.3.4", true).await;
    eventually(Duration::from_secs(15), "Healthy annotation", || async {
        let s = services.get("web").await.map_err(|e| e.to_string())?;
        match annotation(&s, "wavegate.dev/health-status").as_deref() {
            Some("Healthy") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // The opt-in goes away (the field manager that set it drops it): so do the verdicts.
    apply(&client, service(json!({}))).await;
    eventually(Duration::from_secs(15), "annotations removed", || async {
        let s = services.get("web").await.map_err(|e| e.to_string())?;
        let left: Vec<String> = s
            .metadata
            .annotations
            .unwrap_or_default()
            .into_keys()
            .filter(|k| k.starts_with("wavegate.dev/"))
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
}
