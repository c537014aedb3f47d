//! Argo CD's proxy extension authorizes a request for one Application and forwards any subpath
//! (argo-cd server/extension/extension.go). On the real control plane: a user allowed to see
//! Application `platform` gets its resources, its gate and its child application through the
//! proxy — and a 403 with the reason for everything else wavegate can read, by path or in lists.

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

fn app(ns: &str, name: &str, resources: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"project": "default",
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
        service(&ns, "web"),
        service(&ns, "billing"),
        gate(&ns, "ready"),
        gate(&ns, "other-gate"),
        deployment(&ns, "api"),
        deployment(&ns, "payroll"),
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
                r("argoproj.io", "Application", "child")
            ]),
        ),
    )
    .await;
    apply(&client, app(&ns, "child", json!([]))).await;
    apply(
        &client,
        app(&ns, "other", json!([r("", "Service", "billing")])),
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

    // A project header that is not the application's, or an application that does not exist.
    let (code, body) = proxied(&wg, "/api/v1/waves", &me, "admin-project").await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = proxied(&wg, "/api/v1/gates", &format!("{ns}:nope"), "default").await;
    assert_eq!(code, 403, "{body}");

    // Direct calls (token-guarded in the shipped deploy) are not scoped.
    let (code, body) = wg.get("/api/v1/gates").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(names(&body["gates"]), ["other-gate", "ready"]);
}
