//! The wave timeline on the real control plane: applied times are the API server's
//! managedFields stamps for Argo CD's field manager, a gate's healthy time is its Ready
//! transition, and nothing else gets a time.

use crate::cluster;

use cluster::{Wavegate, eventually};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

/// Server-side apply as `manager` (Argo CD applies as `argocd-controller`).
async fn apply_as(client: &kube::Client, manager: &str, obj: Value) -> DynamicObject {
    let (group, version) = match obj["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let gvk = kube::api::GroupVersionKind::gvk(&group, &version, obj["kind"].as_str().unwrap());
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap();
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {ns}/{name} as {manager}: {e}"))
}

/// The `time` of `manager`'s managedFields entry, as the API server recorded it.
fn stamp(obj: &DynamicObject, manager: &str) -> String {
    let entries = obj.metadata.managed_fields.as_ref().unwrap();
    let entry = entries
        .iter()
        .find(|f| f.manager.as_deref() == Some(manager))
        .unwrap();
    serde_json::to_value(entry.time.as_ref().unwrap())
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

fn result(group: &str, kind: &str, ns: &str, name: &str) -> Value {
    json!({"group": group, "version": "v1", "kind": kind, "namespace": ns, "name": name,
           "status": "Synced", "message": "serverside-applied", "syncPhase": "Sync"})
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn timeline_times_come_from_argocds_managed_fields_and_the_gates_ready_transition() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "timeline").await;
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}})
    };
    // Wave 0 was last changed by Argo CD before this sync started: unchanged by it.
    apply_as(&client, "argocd-controller", cm("settings")).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // metav1.Time has whole seconds: start the sync in the next second.
    let started = k8s_openapi::jiff::Timestamp::now().as_second() + 1;
    let started_at = k8s_openapi::jiff::Timestamp::from_second(started)
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let svc = apply_as(
        &client,
        "argocd-controller",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": ns},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await;
    // In the same wave, an object someone else applied: no time for it.
    apply_as(&client, "wavegate-test", cm("manual")).await;
    let gate = apply_as(
        &client,
        "argocd-controller",
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": "web-exists", "namespace": ns},
               "spec": {"checks": [{"name": "web", "service": {"name": "web", "minReady": 0}}]}}),
    )
    .await;

    cluster::apply(
        &client,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": "platform", "namespace": ns},
               "spec": {"project": "default",
                        "source": {"repoURL": "https://git.example.com/platform.git", "path": "p"},
                        "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}}}),
    )
    .await;
    // Argo CD's recorded health, which the waves view uses for kinds it does not read
    // (ConfigMaps are off --generic-kinds); the Service and the gate are judged by wavegate.
    let listed = |kind: &str, group: &str, name: &str, wave: i64| {
        json!({"group": group, "version": "v1", "kind": kind, "namespace": ns, "name": name,
               "status": "Synced", "syncWave": wave, "health": {"status": "Healthy"}})
    };
    let ar = cluster::api_resource("argoproj.io", "v1alpha1", "Application", "applications");
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
        .patch(
            "platform",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "resources": [
                    listed("ConfigMap", "", "settings", 0),
                    listed("Service", "", "web", 1),
                    listed("ConfigMap", "", "manual", 1),
                    listed("WaveGate", "wavegate.dev", "web-exists", 2),
                    listed("ConfigMap", "", "later", 3)],
                "operationState": {
                    "phase": "Running", "startedAt": started_at,
                    "message": "waiting for healthy state of wavegate.dev/WaveGate/web-exists",
                    "syncResult": {"revision": "abc123", "resources": [
                        result("", "ConfigMap", &ns, "settings"),
                        result("", "Service", &ns, "web"),
                        result("", "ConfigMap", &ns, "manual"),
                        result("wavegate.dev", "WaveGate", &ns, "web-exists"),
                        // A hook is not a wave's resource, even with a resource's name.
                        {"kind": "ConfigMap", "namespace": ns, "name": "later",
                         "hookType": "PreSync", "hookPhase": "Succeeded"}]}}}})),
        )
        .await
        .unwrap();

    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns])
        .await
        .with_gates(Duration::from_secs(30));
    let path = format!("/api/v1/applications/{ns}/platform/waves");
    let gates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates"),
    );
    // The gate turns Ready (the Service exists); its transition is the wave's healthy time.
    let t = eventually(Duration::from_secs(15), "wave 2 healthy", || async {
        let (code, w) = wg.get(&path).await;
        let t = w["timeline"].clone();
        if code == 200 && t["waves"][2]["healthy"] == "healthy" {
            Ok(t)
        } else {
            Err(w.to_string())
        }
    })
    .await;
    let live_gate = gates.get("web-exists").await.unwrap();
    let ready_at = live_gate.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["lastTransitionTime"]
        .clone();

    assert_eq!(t["sync"]["phase"], "Running", "{t}");
    assert_eq!(t["sync"]["startedAt"], started_at.as_str(), "{t}");
    assert_eq!(t["sync"]["revision"], "abc123", "{t}");
    let waves: Vec<(i64, &str)> = t["waves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["wave"].as_i64().unwrap(), w["applied"].as_str().unwrap()))
        .collect();
    assert_eq!(
        waves,
        [
            // A ConfigMap: off --generic-kinds, so not read, and its apply time unknown.
            (0, "unknown"),
            (1, "applied"),
            (2, "applied"),
            (3, "pending")
        ],
        "{t}"
    );
    assert_eq!(
        t["waves"][1]["appliedAt"],
        stamp(&svc, "argocd-controller").as_str(),
        "{t}"
    );
    assert_eq!(
        t["waves"][2]["appliedAt"],
        stamp(&gate, "argocd-controller").as_str(),
        "{t}"
    );
    let manual = &t["waves"][1]["resources"][1];
    assert_eq!(manual["name"], "manual", "{t}");
    assert_eq!(manual["applied"], "unknown", "{t}");
    assert!(
        t["waves"][1]["appliedNote"].is_string(),
        "the wave still has its Argo CD time: {t}"
    );
    assert_eq!(t["waves"][2]["healthyAt"], ready_at, "{t}");
    // The Service selects no pod: wave 1 blocks, with its reason, and has no healthy time.
    assert_eq!(t["blockingWave"], 1, "{t}");
    assert_eq!(t["waves"][1]["blocking"], true, "{t}");
    assert_eq!(t["waves"][1]["healthyAt"], Value::Null, "{t}");
    assert!(
        t["waves"][1]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("Service {ns}/web")),
        "{t}"
    );
    // The ConfigMap in wave 0 is healthy now, but nothing recorded when it became so.
    assert_eq!(t["waves"][0]["healthy"], "timeUnknown", "{t}");
    assert_eq!(t["waves"][0]["healthyAt"], Value::Null, "{t}");

    // The applications list stays as it was: no timeline there.
    let (code, list) = wg.get("/api/v1/applications").await;
    assert_eq!(code, 200, "{list}");
    let ours = list["applications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["namespace"] == ns.as_str())
        .cloned()
        .unwrap();
    assert!(ours.get("timeline").is_none(), "{ours}");
}
