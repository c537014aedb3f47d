//! App-of-apps on the real control plane: a child Application that looks Healthy before it has
//! synced the new revision (argo-cd #4577) holds the parent's wave, and the waves view — by
//! path and through Argo CD's proxy-extension header — names the blocking wave.

use crate::cluster;

use cluster::{Wavegate, apply, eventually};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn app(ns: &str, name: &str, revision: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"project": "default",
                    "source": {"repoURL": "https://git.example.com/platform.git",
                               "path": name, "targetRevision": revision},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}}})
}

/// Argo CD writes an Application's status with a plain patch (its CRD has no status
/// subresource).
async fn set_status(client: &kube::Client, ns: &str, name: &str, status: Value) {
    let ar = cluster::api_resource("argoproj.io", "v1alpha1", "Application", "applications");
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
}

fn synced_against(ns: &str, name: &str, revision: &str) -> Value {
    json!({"health": {"status": "Healthy"},
           "sync": {"status": "Synced", "revision": "4f2a9c1",
                    "comparedTo": {"source": {"repoURL": "https://git.example.com/platform.git",
                                              "path": name, "targetRevision": revision},
                                   "destination": {"server": "https://kubernetes.default.svc",
                                                   "namespace": ns}}},
           "operationState": {"phase": "Succeeded"}})
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn child_healthy_before_syncing_new_revision_blocks_the_parents_wave() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "waves").await;
    apply(&client, app(&ns, "forgejo", "v2")).await;
    // Argo CD still reports the comparison against v1: Healthy, Synced — and stale.
    set_status(
        &client,
        &ns,
        "forgejo",
        synced_against(&ns, "forgejo", "v1"),
    )
    .await;
    apply(&client, app(&ns, "platform", "main")).await;
    let mut parent = synced_against(&ns, "platform", "main");
    parent["resources"] = json!([
        {"group": "argoproj.io", "version": "v1alpha1", "kind": "Application",
         "namespace": ns, "name": "forgejo", "status": "Synced", "syncWave": 1,
         "health": {"status": "Healthy"}},
        {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": ns,
         "name": "next-app-settings", "status": "Synced", "syncWave": 2}
    ]);
    set_status(&client, &ns, "platform", parent).await;

    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    let v = wg
        .health("applications.argoproj.io", &ns, "forgejo", "")
        .await;
    assert_eq!(v["status"], "Progressing", "{v}");
    assert!(v["message"].as_str().unwrap().contains("v2"), "{v}");

    let (code, waves) = wg
        .get(&format!("/api/v1/applications/{ns}/platform/waves"))
        .await;
    assert_eq!(code, 200, "{waves}");
    assert_eq!(waves["blockingWave"], 1, "{waves}");
    assert_eq!(waves["waves"][0]["resources"][0]["judgedBy"], "wavegate");
    assert!(
        waves["message"].as_str().unwrap().contains("forgejo"),
        "{waves}"
    );
    // ConfigMaps are off --generic-kinds (and the shipped RBAC): not read. Argo CD has no health
    // check for the kind and records it Synced, which is what Argo CD's own wave waits for.
    let config_map = &waves["waves"][1]["resources"][0];
    assert_eq!(config_map["status"], "Healthy", "{waves}");
    assert_eq!(config_map["judgedBy"], "argocd", "{waves}");

    // Argo CD compares against v2 and syncs it: the child is truly Healthy, wave 1 passes.
    set_status(
        &client,
        &ns,
        "forgejo",
        synced_against(&ns, "forgejo", "v2"),
    )
    .await;
    eventually(Duration::from_secs(10), "wave 1 passes", || async {
        let resp = reqwest::Client::new()
            .get(format!("{}/api/v1/waves", wg.url))
            .header("Argocd-Application-Name", format!("{ns}:platform"))
            .header("Argocd-Project-Name", "default")
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let w: Value = resp.json().await.map_err(|e| e.to_string())?;
        // Wave 2's ConfigMap is Synced, which is all Argo CD waits for: nothing blocks.
        if w["blockingWave"].is_null() && w["waves"][0]["status"] == "Healthy" {
            Ok(())
        } else {
            Err(w.to_string())
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn cluster_scoped_resource_in_a_wave_is_judged_not_missing() {
    // Argo CD lists cluster-scoped resources with namespace "": a Namespace the app creates in
    // wave -1 must be looked up cluster-wide, not inside a namespace called "".
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "waves-cluster").await;
    apply(&client, app(&ns, "platform", "main")).await;
    let mut parent = synced_against(&ns, "platform", "main");
    parent["resources"] = json!([
        {"group": "", "version": "v1", "kind": "Namespace", "namespace": "",
         "name": ns, "status": "Synced", "syncWave": -1}
    ]);
    set_status(&client, &ns, "platform", parent).await;

    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    let (code, waves) = wg
        .get(&format!("/api/v1/applications/{ns}/platform/waves"))
        .await;
    assert_eq!(code, 200, "{waves}");
    let judged = &waves["waves"][0]["resources"][0];
    assert_eq!(judged["name"], ns.as_str(), "{waves}");
    assert_ne!(judged["status"], "Missing", "{waves}");
}

/// An Application whose manifests list a bare Pod, a ConfigMap and a Secret: the waves view
/// reads no whole object of them (a pod is judged from the compact pod view the cache keeps
/// anyway; ConfigMaps and Secrets are off the default --generic-kinds and follow the sync status
/// Argo CD recorded), and never says Healthy about what it did not see.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn waves_view_reads_no_kind_the_policy_refuses() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "waves-policy").await;
    apply(&client, app(&ns, "platform", "main")).await;
    let mut parent = synced_against(&ns, "platform", "main");
    parent["resources"] = json!([
        {"group": "", "version": "v1", "kind": "Pod", "namespace": ns, "name": "debug",
         "status": "Synced", "syncWave": 0},
        {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": ns, "name": "settings",
         "status": "Synced", "syncWave": 0},
        {"group": "", "version": "v1", "kind": "Secret", "namespace": ns, "name": "creds",
         "status": "OutOfSync", "syncWave": 1}
    ]);
    set_status(&client, &ns, "platform", parent).await;

    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    let (code, waves) = wg
        .get(&format!("/api/v1/applications/{ns}/platform/waves"))
        .await;
    assert_eq!(code, 200, "{waves}");
    let find = |name: &str| -> Value {
        waves["waves"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| w["resources"].as_array().unwrap().clone())
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {waves}"))
    };
    // The bare Pod, from the compact pod view: it does not exist.
    let debug = find("debug");
    assert_eq!(debug["status"], "Missing", "{debug}");
    assert_eq!(debug["judgedBy"], "wavegate", "{debug}");
    // ConfigMaps and Secrets have no health check in Argo CD: its sync status stands, unread.
    assert_eq!(find("settings")["status"], "Healthy", "{waves}");
    assert_eq!(find("creds")["status"], "Progressing", "{waves}");
    for name in ["settings", "creds"] {
        assert_eq!(find(name)["judgedBy"], "argocd", "{waves}");
    }
    // Nothing else was read: no watch of ConfigMaps or Secrets was started for it, and pods
    // are only ever watched as compact views (`cache::no_whole_object_watch_of_a_kind_with_a_compact_view`).
    let metrics = wg.metrics.encode();
    for kind in ["configmaps", "secrets"] {
        let watched = metrics.lines().any(|l| {
            (l.starts_with("wavegate_watch_restarts") || l.starts_with("wavegate_cached_objects"))
                && l.contains(kind)
        });
        assert!(!watched, "a watch on {kind}:\n{metrics}");
    }
}

/// A bare Pod that Argo CD applied (field manager `argocd-controller`) is judged as Argo CD
/// judges pods, from the compact view: Progressing until Ready, then Healthy — and the timeline
/// dates its wave from Argo CD's managedFields time instead of "apply time unknown".
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_bare_pod_in_the_waves_is_judged_from_the_pod_view_and_dated() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "waves-pod").await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "migrate", "namespace": ns,
                     "annotations": {"argocd.argoproj.io/tracking-id": format!("{ns}_platform:/Pod:{ns}/migrate")}},
        "spec": {"nodeName": "wavegate-node",
                 "containers": [{"name": "main", "image": "example.invalid/app:1"}]}});
    let ar = cluster::api_resource("", "v1", "Pod", "pods");
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
        .patch(
            "migrate",
            &PatchParams::apply("argocd-controller").force(),
            &Patch::Apply(&pod),
        )
        .await
        .unwrap();
    apply(&client, app(&ns, "platform", "main")).await;
    let mut parent = synced_against(&ns, "platform", "main");
    parent["resources"] = json!([
        {"group": "", "version": "v1", "kind": "Pod", "namespace": ns, "name": "migrate",
         "status": "Synced", "syncWave": 0}
    ]);
    parent["operationState"] = json!({
        "phase": "Running", "startedAt": "2020-01-01T00:00:00Z", "message": "waiting",
        "syncResult": {"revision": "main", "resources": [
            {"group": "", "version": "v1", "kind": "Pod", "namespace": ns, "name": "migrate",
             "status": "Synced", "syncPhase": "Sync"}]}});
    set_status(&client, &ns, "platform", parent).await;

    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    let path = format!("/api/v1/applications/{ns}/platform/waves");
    let (code, waves) = wg.get(&path).await;
    assert_eq!(code, 200, "{waves}");
    let judged = &waves["waves"][0]["resources"][0];
    assert_eq!(judged["status"], "Progressing", "{waves}");
    assert_eq!(judged["judgedBy"], "wavegate", "{waves}");
    let wave = &waves["timeline"]["waves"][0];
    assert_eq!(wave["applied"], "applied", "{wave}");
    assert!(wave["appliedAt"].is_string(), "{wave}");

    cluster::set_pod_ready(&client, &ns, "migrate", "10.244.9.9", true).await;
    eventually(Duration::from_secs(10), "the bare Pod Healthy", || async {
        let (_, waves) = wg.get(&path).await;
        let judged = waves["waves"][0]["resources"][0].clone();
        if judged["status"] == "Healthy" {
            Ok(())
        } else {
            Err(judged.to_string())
        }
    })
    .await;
}

/// The waves view is kept between polls until what it read changes: once wavegate's own cache
/// shows a Deployment the view judged paused, and then gone, the very next poll of the view
/// says so too. (`api::kept`'s property test covers the rule; this covers its wiring: the
/// watch's events move the epoch the kept view was stamped with.)
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_kept_waves_view_shows_the_next_change_of_what_it_judged() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "waves-kept").await;
    apply(
        &client,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "api", "namespace": ns},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "api"}},
                        "template": {"metadata": {"labels": {"app": "api"}},
                                     "spec": {"containers": [{"name": "api", "image": "example.invalid/api:1"}]}}}}),
    )
    .await;
    apply(&client, app(&ns, "platform", "main")).await;
    let mut parent = synced_against(&ns, "platform", "main");
    parent["resources"] = json!([
        {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": ns, "name": "api",
         "status": "Synced", "syncWave": 0}
    ]);
    set_status(&client, &ns, "platform", parent).await;

    // Only this namespace: what other tests do elsewhere moves no epoch this view rests on, so
    // nothing but the changes below can make it judged again.
    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns]).await;
    let path = format!("/api/v1/applications/{ns}/platform/waves");
    let judged = |waves: &Value| waves["waves"][0]["resources"][0]["status"].clone();
    // Whatever it is judged before the change (kube-controller-manager may not have reported
    // its rollout yet), it is not Suspended: the pause below is what makes it so.
    let (code, first) = wg.get(&path).await;
    assert_eq!(code, 200, "{first}");
    assert_ne!(judged(&first), "Suspended", "{first}");
    let (_, again) = wg.get(&path).await;
    assert_ne!(judged(&again), "Suspended", "{again}");

    let ar = cluster::api_resource("apps", "v1", "Deployment", "deployments");
    let deployments = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar);
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    seen_by_wavegate(&wg, &ns, "Suspended").await;
    let (code, waves) = wg.get(&path).await;
    assert_eq!(code, 200, "{waves}");
    assert_eq!(
        judged(&waves),
        "Suspended",
        "the view answered from before the pause: {waves}"
    );

    deployments
        .delete("api", &Default::default())
        .await
        .unwrap();
    seen_by_wavegate(&wg, &ns, "Missing").await;
    let (code, waves) = wg.get(&path).await;
    assert_eq!(code, 200, "{waves}");
    assert_eq!(
        judged(&waves),
        "Missing",
        "the view answered from before the deletion: {waves}"
    );
}

/// Until wavegate's watch has applied the change: its verdict on the Deployment alone (read
/// from the same cache the view reads) says `status`.
async fn seen_by_wavegate(wg: &Wavegate, ns: &str, status: &str) {
    eventually(Duration::from_secs(10), status, || async {
        let v = wg.health("deployments.apps", ns, "api", "").await;
        if v["status"] == status {
            Ok(())
        } else {
            Err(v.to_string())
        }
    })
    .await;
}
