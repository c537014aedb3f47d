//! A tenant who may create a WaveGate in their namespace must not read other
//! namespaces (or Secrets) through it. On the real control plane, with the gate controller: a
//! gate whose check names another namespace, or a generic check on a kind off the allow-list,
//! gets that check Degraded with the reason in its status — and reveals nothing of the target.

use crate::cluster;

use cluster::{Wavegate, apply, eventually};
use serde_json::json;
use std::process::Command;
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn install_wavegate_crd() {
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/crd/wavegate.dev_wavegates.yaml"
    );
    for args in [
        vec!["apply", "--server-side", "--force-conflicts", "-f", crd],
        vec![
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/wavegates.wavegate.dev",
        ],
    ] {
        let out = Command::new("kubectl").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn tenant_gate_cannot_read_another_namespace_or_a_secret() {
    let client = cluster::client().await;
    install_wavegate_crd();
    let tenant = cluster::namespace(&client, "tenant").await;
    let victim = cluster::namespace(&client, "victim").await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "payments", "namespace": victim},
               "spec": {"selector": {"app": "payments", "tier": "internal-secret-label"},
                        "ports": [{"port": 80}]}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
        "metadata": {"name": "peek", "namespace": tenant},
        "spec": {"checks": [
            {"name": "other-ns", "service": {"name": "payments", "namespace": victim}},
            {"name": "secret", "resource": {"resource": "secrets", "name": "db",
                                            "degraded": "$.data.password"}}
        ]}}),
    )
    .await;
    let wg = Wavegate::start_in(client, EvalConfig::default(), &[&tenant, &victim])
        .await
        .with_gates(Duration::from_secs(5));
    let path = format!("/api/v1/gates/{tenant}/peek");
    let gate = eventually(Duration::from_secs(20), "the gate to be judged", || async {
        let (code, body) = wg.get(&path).await;
        match (code, body["health"]["status"].as_str()) {
            (200, Some("Degraded")) => Ok(body),
            _ => Err(format!("{code}: {body}")),
        }
    })
    .await;
    let check = |name: &str| {
        gate["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let other = check("other-ns");
    assert_eq!(other["status"], "Degraded", "{gate}");
    let msg = other["message"].as_str().unwrap();
    assert!(msg.contains("--gate-cross-namespace"), "{msg}");
    assert!(
        !msg.contains("internal-secret-label"),
        "nothing of the target leaks: {msg}"
    );
    let secret = check("secret");
    assert_eq!(secret["status"], "Degraded", "{gate}");
    assert!(
        secret["message"]
            .as_str()
            .unwrap()
            .contains("--generic-kinds"),
        "{secret}"
    );
}

/// A tenant writes the tracking id on their own gate, so they may name any Application in it.
/// If that made the Application the gate's (its sync clock, its "not found"), the gate's status
/// would tell whether another project's Application exists and when it syncs. Only an
/// Application that lists the gate among its resources counts: one that exists and does not,
/// and one that does not exist, leave the two gates' statuses alike.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_tenant_gate_cannot_learn_whether_another_projects_application_exists() {
    let client = cluster::client().await;
    install_wavegate_crd();
    let tenant = cluster::namespace(&client, "tenant-probe").await;
    let finance = cluster::namespace(&client, "finance").await;
    // Another project's Application, syncing since an hour ago.
    let started = k8s_openapi::jiff::Timestamp::now() - std::time::Duration::from_secs(3600);
    apply(
        &client,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": "billing", "namespace": finance},
               "spec": {"project": "finance", "destination": {"name": "in-cluster", "namespace": finance},
                        "source": {"repoURL": "https://git.example.com/finance.git", "path": "."}},
               "status": {"operationState": {"phase": "Running", "startedAt": started.to_string()}}}),
    )
    .await;
    let gate = |name: &str, app: &str| {
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": name, "namespace": tenant, "annotations": {
                   "argocd.argoproj.io/tracking-id":
                       format!("{finance}_{app}:wavegate.dev/WaveGate:{tenant}/{name}")}},
               "spec": {"timeout": "2s", "checks": [
                   {"name": "db", "service": {"name": "never"}}]}})
    };
    apply(&client, gate("exists", "billing")).await;
    apply(&client, gate("missing", "nothing")).await;
    let wg = Wavegate::start_in(client, EvalConfig::default(), &[&tenant, &finance])
        .await
        .with_gates(Duration::from_secs(2));
    // Past the timeout: a gate whose sync clock were read would be Degraded by now.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let health = |name: &'static str| {
        let wg = &wg;
        let tenant = &tenant;
        async move {
            eventually(Duration::from_secs(20), "the gate to be judged", || async {
                let (code, body) = wg.get(&format!("/api/v1/gates/{tenant}/{name}")).await;
                match (code, body["health"]["status"].as_str()) {
                    (200, Some(_)) => Ok(body["health"].clone()),
                    _ => Err(format!("{code}: {body}")),
                }
            })
            .await
        }
    };
    let exists = health("exists").await;
    let missing = health("missing").await;
    assert_eq!(exists["status"], "Progressing", "{exists}");
    let anonymous = |h: &serde_json::Value| {
        h["message"]
            .as_str()
            .unwrap_or_default()
            .replace("billing", "APP")
            .replace("nothing", "APP")
    };
    assert_eq!(
        (exists["status"].clone(), anonymous(&exists)),
        (missing["status"].clone(), anonymous(&missing)),
        "the two gates differ only by the name they gave"
    );
}
