//! Argo CD's health scripts on the real control plane: a health script added to argocd-cm
//! changes wavegate's verdict for that kind within seconds, with no restart, through the real
//! watch on that one ConfigMap; removing it gives the kind back to kstatus.

use crate::cluster;

use cluster::{Wavegate, apply, eventually};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use wavegate::argocd_lua::{Bundled, LuaHealth, argocd_cm};
use wavegate::evaluate::EvalConfig;

async fn wait_for(wg: &Wavegate, ns: &str, want: &str) -> Value {
    eventually(Duration::from_secs(10), want, || async {
        let v = wg
            .health("clusters.postgresql.cnpg.io", ns, "forgejo", "")
            .await;
        if v["status"] == want {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await
}

const HELD: &str = r#"
hs = {}
if obj.metadata.labels ~= nil and obj.metadata.labels["ready"] == "yes" then
  hs.status = "Healthy"
  hs.message = "labelled ready"
else
  hs.status = "Progressing"
  hs.message = "argocd-cm script holds it until it is labelled ready=yes"
end
return hs
"#;

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_health_script_added_to_argocd_cm_changes_the_verdict_without_a_restart() {
    let client = cluster::client().await;
    // The test's own namespace stands for Argo CD's: its argocd-cm is the one followed.
    let ns = cluster::namespace(&client, "argocd-lua").await;
    let lua = Arc::new(LuaHealth::new(Bundled::default()));
    let config = EvalConfig {
        argocd_lua: Some(lua.clone()),
        ..EvalConfig::default()
    };
    let following = tokio::spawn(argocd_cm::follow(client.clone(), ns.clone(), lua));
    let wg = Wavegate::start(client.clone(), config).await;
    apply(
        &client,
        json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "forgejo", "namespace": ns},
            "spec": {"instances": 1}
        }),
    )
    .await;
    // A CNPG Cluster: a kind the default --generic-kinds allows and no check of wavegate's own
    // judges. No script (and no bundled folder here): kstatus, which has nothing against it.
    wait_for(&wg, &ns, "Healthy").await;

    let cm = |script: Option<&str>| {
        let mut data = serde_json::Map::new();
        if let Some(s) = script {
            data.insert(
                "resource.customizations.health.postgresql.cnpg.io_Cluster".into(),
                Value::String(s.into()),
            );
        }
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "argocd-cm", "namespace": ns},
            "data": data
        })
    };
    apply(&client, cm(Some(HELD))).await;
    let v = wait_for(&wg, &ns, "Progressing").await;
    assert!(
        v["message"].as_str().unwrap().contains("holds it until"),
        "{v}"
    );
    // Argo CD's own verdict, as the script returned it.
    assert_eq!(v["argoStatus"]["status"], "Progressing", "{v}");
    assert_eq!(
        v["argoStatus"]["message"],
        "argocd-cm script holds it until it is labelled ready=yes"
    );

    apply(
        &client,
        json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "forgejo", "namespace": ns, "labels": {"ready": "yes"}},
            "spec": {"instances": 1}
        }),
    )
    .await;
    let v = wait_for(&wg, &ns, "Healthy").await;
    assert!(
        v["message"].as_str().unwrap().contains("labelled ready"),
        "{v}"
    );

    // A script's Degraded is Argo CD's word; wavegate's consequence waits for the grace
    // (90 s by default): Progressing, with Argo CD's Degraded beside it. Its message echoes
    // the spec's instances count (a number, kept) and a label value (redacted). The label
    // changes first, and wavegate is seen judging the new one (held again), so the Degraded
    // script can only run on an object whose label is the long secret-looking value: "yes" is
    // shorter than what the no-echo rule redacts.
    apply(
        &client,
        json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "forgejo", "namespace": ns,
                         "labels": {"ready": "secret-label-value"}},
            "spec": {"instances": 1}
        }),
    )
    .await;
    let v = wait_for(&wg, &ns, "Progressing").await;
    assert!(
        v["message"].as_str().unwrap().contains("holds it until"),
        "{v}"
    );
    apply(
        &client,
        cm(Some(
            "return {status = 'Degraded', message = 'Failing over ' .. \
             obj.metadata.labels['ready'] .. ' behind ' .. obj.metadata.name}",
        )),
    )
    .await;
    let v = eventually(Duration::from_secs(10), "Argo CD's Degraded", || async {
        let v = wg
            .health("clusters.postgresql.cnpg.io", &ns, "forgejo", "")
            .await;
        if v["argoStatus"]["status"] == "Degraded" {
            Ok(v)
        } else {
            Err(v.to_string())
        }
    })
    .await;
    assert_eq!(v["status"], "Progressing", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("Degraded if it persists"),
        "{v}"
    );
    let said = v["argoStatus"]["message"].as_str().unwrap();
    assert_eq!(said, "Failing over <redacted> behind forgejo", "{v}");
    assert!(!v.to_string().contains("secret-label-value"), "{v}");

    // A script that never ends is stopped by its bound: Unknown, never Healthy; /healthz
    // answers while such scripts run.
    apply(&client, cm(Some("while true do end"))).await;
    let v = wait_for(&wg, &ns, "Unknown").await;
    assert!(
        v["message"].as_str().unwrap().contains("instructions"),
        "{v}"
    );
    assert_eq!(v["argoStatus"]["status"], "Unknown", "{v}");
    let asks: Vec<_> = (0..4)
        .map(|_| {
            let url = format!(
                "{}/api/v1/health/clusters.postgresql.cnpg.io/{ns}/forgejo",
                wg.url
            );
            tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status()) })
        })
        .collect();
    for _ in 0..5 {
        let asked = std::time::Instant::now();
        let (code, _) = wg.get("/healthz").await;
        assert_eq!(code, 200);
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{:?}",
            asked.elapsed()
        );
    }
    for ask in asks {
        ask.await.unwrap().unwrap();
    }

    // The key removed: kstatus again.
    apply(&client, cm(None)).await;
    let v = wait_for(&wg, &ns, "Healthy").await;
    assert!(!v["message"].as_str().unwrap().contains("labelled"), "{v}");
    following.abort();
}
