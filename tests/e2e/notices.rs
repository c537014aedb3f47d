//! Notices on the real control plane: while an Application's running sync waits for a WaveGate,
//! wavegate writes Argo CD's notice annotations on it, once; they go when the sync ends; and a
//! notice someone else set is never touched. Argo CD is played by patching the Application's
//! status as its controller records a sync waiting on a task (`operationState.syncResult`).

use crate::cluster;

use cluster::{Wavegate, apply, eventually};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use wavegate::evaluate::EvalConfig;
use wavegate::notice::{CONTENT, OWNER, SEVERITY, URL};

fn applications(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// An Application whose sync (phase `phase`) waits for WaveGate `gate` of wave 5, with
/// `annotations`.
fn application(ns: &str, name: &str, gate: &str, phase: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://git.example.com/ddb.git", "path": "ddb", "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}},
        "status": {
            "resources": [{"group": "wavegate.dev", "version": "v1alpha1", "kind": "WaveGate",
                           "namespace": ns, "name": gate, "syncWave": 5}],
            "operationState": {
                "phase": phase, "message": format!("waiting for healthy state of wavegate.dev/WaveGate/{gate}"),
                "startedAt": "2026-12-03T10:00:00Z",
                "operation": {"sync": {"revision": "abc"}},
                "syncResult": {"revision": "abc", "resources": [
                    {"group": "wavegate.dev", "version": "v1alpha1", "kind": "WaveGate", "namespace": ns,
                     "name": gate, "status": "Synced", "message": "wavegate.dev/db-ready created",
                     "hookPhase": "Running", "syncPhase": "Sync"}]}}}
    })
}

fn annotations(app: &DynamicObject) -> BTreeMap<String, String> {
    app.metadata.annotations.clone().unwrap_or_default()
}

fn notice_keys(app: &DynamicObject) -> BTreeMap<String, String> {
    annotations(app)
        .into_iter()
        .filter(|(k, _)| k.starts_with("notice.argocd.argoproj.io/") || k == OWNER)
        .collect()
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_held_sync_shows_a_notice_until_it_ends_and_another_notice_is_left_alone() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "notices").await;
    // A gate that holds: its Service selects no pod.
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"selector": {"app": "forgejo"}, "ports": [{"port": 3000}]}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": "db-ready", "namespace": ns},
               "spec": {"checks": [{"name": "forgejo-http", "service": {"name": "forgejo"}}]}}),
    )
    .await;
    let theirs = json!({(CONTENT): "Scheduled DB maintenance on 2026-06-01 02:00 UTC",
                        (SEVERITY): "info", "team": "payments"});
    apply(
        &client,
        application(
            &ns,
            "ddb",
            "db-ready",
            "Running",
            json!({"team": "payments"}),
        ),
    )
    .await;
    apply(
        &client,
        application(&ns, "maintained", "db-ready", "Running", theirs.clone()),
    )
    .await;

    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns])
        .await
        .with_gates(Duration::from_secs(1));
    tokio::spawn(wavegate::notice::run(
        wg.evaluator.clone(),
        wg.metrics.clone(),
        wavegate::notice::Settings {
            public_url: Some("https://wavegate.example.com".into()),
            interval: Duration::from_secs(1),
            resync: Duration::from_secs(1),
            fence: wavegate::leader::Fence::default(),
        },
    ));

    let apps = applications(&client, &ns);
    let app = eventually(Duration::from_secs(30), "the notice on ddb", || async {
        let a = apps.get("ddb").await.map_err(|e| e.to_string())?;
        match annotations(&a).get(CONTENT) {
            Some(c) if c.contains("is Progressing") => Ok(a),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let got = annotations(&app);
    assert!(
        got[CONTENT].starts_with(&format!(
            "wavegate holds sync wave 5: WaveGate {ns}/db-ready is Progressing: "
        )),
        "{got:?}"
    );
    assert_eq!(got.get(SEVERITY).map(String::as_str), Some("warning"));
    assert_eq!(
        got.get(URL).cloned(),
        Some(format!(
            "https://wavegate.example.com/api/v1/applications/{ns}/ddb/waves"
        ))
    );
    assert!(got.contains_key(OWNER), "{got:?}");
    assert_eq!(got.get("team").map(String::as_str), Some("payments"));

    // A settled system sends no writes: the gate keeps its verdict, several resyncs pass.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = wg.metrics.notice_writes.get();
    let before = notice_keys(&apps.get("ddb").await.unwrap());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        wg.metrics.notice_writes.get(),
        settled,
        "writes while nothing changed"
    );
    assert_eq!(notice_keys(&apps.get("ddb").await.unwrap()), before);

    // Someone else's notice: never overwritten.
    let other = apps.get("maintained").await.unwrap();
    assert_eq!(
        annotations(&other).get(CONTENT).map(String::as_str),
        theirs[CONTENT].as_str()
    );
    assert!(!annotations(&other).contains_key(OWNER));

    // The sync ends (Argo CD records the phase): the notice goes, theirs stays.
    for name in ["ddb", "maintained"] {
        apps.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"operationState": {"phase": "Succeeded"}}})),
        )
        .await
        .unwrap();
    }
    eventually(
        Duration::from_secs(30),
        "the notice removed from ddb",
        || async {
            let a = apps.get("ddb").await.map_err(|e| e.to_string())?;
            let left = notice_keys(&a);
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;
    let other = apps.get("maintained").await.unwrap();
    assert_eq!(
        annotations(&other).get(CONTENT).map(String::as_str),
        theirs[CONTENT].as_str(),
        "someone else's notice was removed"
    );
    let ended = wg.metrics.notice_writes.get();
    assert_eq!(ended, settled + 1, "one write to remove the notice");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        wg.metrics.notice_writes.get(),
        ended,
        "writes after the sync ended"
    );
}
