//! Argo CD's proxy extension authorizes a request for one Application and forwards any subpath
//! (argo-cd server/extension/extension.go). On the real control plane: a user allowed to see
//! Application `platform` gets its resources, its gate and its child application through the
//! proxy — and a 403 with the reason for everything else wavegate can read, by path or in lists.
//! What its Git repository lists (`status.resources`) does not widen that: an object counts as
//! platform's only while its own tracking says so, and a child Application only in platform's
//! project.

#[path = "support/cluster.rs"]
mod cluster;

use cluster::{Wavegate, apply};
use serde_json::{Value, json};
use std::process::Command;
use wavegate::evaluate::EvalConfig;

/// The WaveGate CRD, as `deploy/` installs it (idempotent).
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
        let out = Command::new("kubectl")
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e} (kubectl must be on PATH)"));
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `object`, tracked by Argo CD as Application `ns/app`'s (an app outside Argo CD's namespace
/// is `<ns>_<name>` in the tracking id, argo-cd `Application.InstanceName`).
fn tracked(mut object: Value, app: &str) -> Value {
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let kind = object["kind"].as_str().unwrap().to_string();
    let group = object["apiVersion"]
        .as_str()
        .unwrap()
        .rsplit_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    object["metadata"]["annotations"] = json!({
        "argocd.argoproj.io/tracking-id": format!("{ns}_{app}:{group}/{kind}:{ns}/{name}")
    });
    object
}

fn app(ns: &str, name: &str, resources: Value) -> Value {
    app_in(ns, name, "default", resources)
}

fn app_in(ns: &str, name: &str, project: &str, resources: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"project": project,
                    "source": {"repoURL": "https://git.example.com/platform.git",
                               "path": name, "targetRevision": "main"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}},
           "status": {"resources": resources}})
}

fn service(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}})
}

fn gate(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"checks": [{"name": "web", "service": {"name": "web"}}]}})
}

fn deployment(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "example.invalid/x:1"}]}}}})
}

/// GET through "Argo CD's proxy": with the headers argocd-server sets after authorizing.
async fn proxied(wg: &Wavegate, path: &str, app: &str, project: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{}{path}", wg.url))
        .header("Argocd-Application-Name", app)
        .header("Argocd-Project-Name", project)
        .header("Argocd-Namespace", "argocd")
        .header("Argocd-Username", "alice")
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn names(list: &Value) -> Vec<String> {
    let mut n: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn proxy_user_of_one_application_sees_only_what_belongs_to_it() {
    let client = cluster::client().await;
    install_wavegate_crd();
    let ns = cluster::namespace(&client, "scope").await;
    for obj in [
        tracked(service(&ns, "web"), "platform"),
        tracked(service(&ns, "billing"), "other"),
        tracked(gate(&ns, "ready"), "platform"),
        tracked(gate(&ns, "other-gate"), "other"),
        tracked(gate(&ns, "listed-gate"), "other"),
        tracked(deployment(&ns, "api"), "platform"),
        tracked(deployment(&ns, "payroll"), "other"),
        // Listed by platform's Git, never applied by it: no tracking at all.
        deployment(&ns, "untracked"),
    ] {
        apply(&client, obj).await;
    }
    let r = |group: &str, kind: &str, name: &str| json!({"group": group, "version": "v1", "kind": kind, "namespace": ns, "name": name});
    apply(
        &client,
        app(
            &ns,
            "platform",
            json!([
                r("", "Service", "web"),
                r("wavegate.dev", "WaveGate", "ready"),
                r("apps", "Deployment", "api"),
                r("argoproj.io", "Application", "child"),
                // What platform's Git may list but does not own: another app's objects,
                // an Application of another project, an object nobody tracks.
                r("", "Service", "billing"),
                r("wavegate.dev", "WaveGate", "listed-gate"),
                r("apps", "Deployment", "untracked"),
                r("argoproj.io", "Application", "finance"),
                r("argoproj.io", "Application", "other")
            ]),
        ),
    )
    .await;
    apply(&client, tracked(app(&ns, "child", json!([])), "platform")).await;
    // Tracked as platform's (its Git created it), but in a project the user may not see.
    apply(
        &client,
        tracked(app_in(&ns, "finance", "finance", json!([])), "platform"),
    )
    .await;
    apply(
        &client,
        tracked(
            app(&ns, "other", json!([r("", "Service", "billing")])),
            "other",
        ),
    )
    .await;
    let wg = Wavegate::start_in(client, EvalConfig::default(), &[&ns]).await;
    let me = format!("{ns}:platform");

    // What belongs to platform: served.
    for path in [
        format!("/api/v1/health/services/{ns}/web"),
        format!("/api/v1/health/deployments.apps/{ns}/api"),
        format!("/api/v1/health/applications.argoproj.io/{ns}/child"),
        format!("/api/v1/gates/{ns}/ready"),
        format!("/api/v1/applications/{ns}/platform/waves"),
        format!("/api/v1/applications/{ns}/child/waves"),
        "/api/v1/waves".to_string(),
    ] {
        let (code, body) = proxied(&wg, &path, &me, "default").await;
        assert_eq!(code, 200, "{path}: {body}");
    }

    // What does not: refused, naming the application Argo CD authorized.
    for path in [
        format!("/api/v1/health/services/{ns}/billing"),
        format!("/api/v1/health/deployments.apps/{ns}/payroll"),
        format!("/api/v1/health/applications.argoproj.io/{ns}/other"),
        "/api/v1/health/services/kube-system/kube-dns".to_string(),
        format!("/api/v1/gates/{ns}/other-gate"),
        format!("/api/v1/gates/{ns}/other-gate/wait?timeout=1s"),
        format!("/api/v1/applications/{ns}/other/waves"),
        // Listed in platform's status.resources, but not platform's.
        format!("/api/v1/gates/{ns}/listed-gate"),
        format!("/api/v1/health/deployments.apps/{ns}/untracked"),
        format!("/api/v1/health/applications.argoproj.io/{ns}/finance"),
        format!("/api/v1/applications/{ns}/finance/waves"),
    ] {
        let (code, body) = proxied(&wg, &path, &me, "default").await;
        assert_eq!(code, 403, "{path}: {body}");
        let msg = body["error"].as_str().unwrap_or_default();
        assert!(
            msg.contains(&format!("Application {ns}/platform only")),
            "{path}: {msg}"
        );
    }

    // Lists hold only platform's share.
    let (code, body) = proxied(&wg, "/api/v1/gates", &me, "default").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(names(&body["gates"]), ["ready"]);
    let (code, body) = proxied(&wg, "/api/v1/applications", &me, "default").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(names(&body["applications"]), ["child", "platform"]);

    // Nothing outside the scoped API through the proxy: not the metrics (every gate and
    // cluster name), not the probes, not the dashboard.
    for path in ["/metrics", "/readyz", "/healthz", "/"] {
        let (code, body) = proxied(&wg, path, &me, "default").await;
        assert_eq!(code, 403, "{path}: {body}");
    }

    // A project header that is not the application's, or an application that does not exist.
    let (code, body) = proxied(&wg, "/api/v1/waves", &me, "admin-project").await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = proxied(&wg, "/api/v1/gates", &format!("{ns}:nope"), "default").await;
    assert_eq!(code, 403, "{body}");

    // Direct calls (token-guarded in the shipped deploy) are not scoped.
    let (code, body) = wg.get("/api/v1/gates").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        names(&body["gates"]),
        ["listed-gate", "other-gate", "ready"]
    );
}
