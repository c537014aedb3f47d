//! `wavegate lint` on a live Application, on the real control plane: seed 001's Forgejo, whose
//! Deployment uses database forgejo of the CNPG Cluster pg and sits in the same sync wave as the
//! Database, behind a Service that selects `app=forgejo` while the pod template says `app=gitea`.
//! The waves view must say both, beside the waves they hold — and must read no Secret or
//! ConfigMap to do it.

use crate::cluster;

use cluster::{Wavegate, apply, eventually};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn application(ns: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": "platform", "namespace": ns},
           "spec": {"project": "default",
                    "source": {"repoURL": "https://git.example.com/platform.git",
                               "path": "apps/forgejo", "targetRevision": "main"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}}})
}

/// What Argo CD records of the Application's resources, Forgejo in `forgejo_wave`.
fn listed(ns: &str, forgejo_wave: i64, gate: bool) -> Value {
    let r = |group: &str, version: &str, kind: &str, name: &str, wave: i64| {
        json!({"group": group, "version": version, "kind": kind, "namespace": ns, "name": name,
               "status": "Synced", "syncWave": wave})
    };
    let mut resources = vec![
        r("", "v1", "Secret", "forgejo-admin", 0),
        r("", "v1", "Service", "forgejo", 1),
        r("postgresql.cnpg.io", "v1", "Cluster", "pg", 3),
        r("postgresql.cnpg.io", "v1", "Database", "forgejo", 3),
        r("apps", "v1", "Deployment", "forgejo", forgejo_wave),
    ];
    if gate {
        resources.push(r(
            "wavegate.dev",
            "v1alpha1",
            "WaveGate",
            "databases-created",
            4,
        ));
    }
    json!({"health": {"status": "Progressing"},
           "sync": {"status": "Synced", "revision": "4f2a9c1",
                    "comparedTo": {"source": {"repoURL": "https://git.example.com/platform.git",
                                              "path": "apps/forgejo", "targetRevision": "main"},
                                   "destination": {"server": "https://kubernetes.default.svc",
                                                   "namespace": ns}}},
           "resources": resources})
}

async fn set_status(client: &kube::Client, ns: &str, status: Value) {
    let ar = cluster::api_resource("argoproj.io", "v1alpha1", "Application", "applications");
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .patch(
            "platform",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
}

fn findings(waves: &Value) -> Vec<Value> {
    waves["lint"]["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no lint findings in {waves}"))
        .clone()
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn forgejo_in_the_wave_of_its_database_is_shown_beside_the_wave() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "waves-lint").await;
    apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg", "namespace": ns},
               "spec": {"instances": 1, "storage": {"size": "1Gi"}}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"name": "forgejo", "owner": "forgejo", "cluster": {"name": "pg"}}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"selector": {"app": "forgejo"}, "ports": [{"port": 3000}]}}),
    )
    .await;
    // As the chart renders it; no controller runs here, so it starts no pods.
    apply(
        &client,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"replicas": 0,
                        "selector": {"matchLabels": {"app": "gitea"}},
                        "template": {"metadata": {"labels": {"app": "gitea",
                                                             "app.kubernetes.io/name": "gitea"}},
                                     "spec": {"containers": [{"name": "forgejo",
                                        "image": "codeberg.org/forgejo/forgejo:11",
                                        "env": [
                                          {"name": "FORGEJO__database__HOST",
                                           "value": format!("pg-rw.{ns}.svc.cluster.local:5432")},
                                          {"name": "FORGEJO__database__NAME", "value": "forgejo"},
                                          {"name": "ADMIN_PASSWORD", "valueFrom": {"secretKeyRef":
                                            {"name": "forgejo-admin", "key": "password"}}}]}]}}}}),
    )
    .await;
    apply(&client, application(&ns)).await;
    set_status(&client, &ns, listed(&ns, 3, false)).await;

    let wg = Wavegate::start(client.clone(), EvalConfig::default()).await;
    let (code, waves) = wg
        .get(&format!("/api/v1/applications/{ns}/platform/waves"))
        .await;
    assert_eq!(code, 200, "{waves}");
    let found = findings(&waves);
    let same_wave = found
        .iter()
        .find(|f| f["rule"] == "same-wave")
        .unwrap_or_else(|| panic!("no same-wave finding in {waves}"));
    assert_eq!(same_wave["wave"], 3, "{same_wave}");
    let message = same_wave["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "Deployment {ns}/forgejo (wave 3) uses database forgejo of Cluster pg"
        )) && message.contains(&format!("Database {ns}/forgejo is applied in wave 3")),
        "{message}"
    );
    assert!(
        same_wave["fix"]
            .as_str()
            .unwrap()
            .contains("kind: WaveGate"),
        "{same_wave}"
    );
    let selector = found
        .iter()
        .find(|f| f["rule"] == "selector-matches-nothing")
        .unwrap_or_else(|| panic!("no selector finding in {waves}"));
    assert_eq!(selector["wave"], 1, "{selector}");
    assert!(
        selector["message"]
            .as_str()
            .unwrap()
            .contains("app.kubernetes.io/name=gitea"),
        "{selector}"
    );
    // The Secret is seen by name only, and the view says so.
    let note = waves["lint"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("forgejo-admin"), "{waves}");

    // Read under the waves view's policy: no watch of ConfigMaps or Secrets. (Pods are watched
    // by the waves view's own Service check, in the compact pod view; the cache never watches
    // them whole: src/cache/tests.rs `no_whole_object_watch_of_a_kind_with_a_compact_view`.)
    let metrics = wg.metrics.encode();
    for kind in ["configmaps", "secrets"] {
        let watched = metrics.lines().any(|l| {
            (l.starts_with("wavegate_watch_restarts") || l.starts_with("wavegate_cached_objects"))
                && l.contains(kind)
        });
        assert!(!watched, "a watch on {kind}:\n{metrics}");
    }

    // The documented fix: a WaveGate on the Database in wave 4, Forgejo in wave 5.
    apply(
        &client,
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": "databases-created", "namespace": ns},
               "spec": {"checks": [{"name": "forgejo-db", "cnpgDatabase": {"name": "forgejo"}}]}}),
    )
    .await;
    set_status(&client, &ns, listed(&ns, 5, true)).await;
    eventually(
        Duration::from_secs(10),
        "the database findings go",
        || async {
            let (_, waves) = wg
                .get(&format!("/api/v1/applications/{ns}/platform/waves"))
                .await;
            let rules: Vec<Value> = findings(&waves).iter().map(|f| f["rule"].clone()).collect();
            if rules == [json!("selector-matches-nothing")] {
                Ok(())
            } else {
                Err(waves.to_string())
            }
        },
    )
    .await;
}
