//! Annotation mode's `patch` right, narrowed by the shipped ValidatingAdmissionPolicy
//! (deploy/components/annotate/admission-policy.yaml), on the real API server: wavegate's
//! ServiceAccount, with exactly the shipped RBAC, may write its own `wavegate.dev/health-*`
//! annotations and nothing else — not a Service's selector, not another annotation, not an
//! Argo CD Application's source or operation.

use crate::cluster;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use std::time::Duration;

const POLICY: &str = "deploy/components/annotate/admission-policy.yaml";
const CLUSTER_ROLE: &str = "deploy/components/annotate/clusterrole.yaml";
const BINDING: &str = "deploy/components/annotate/clusterrolebinding.yaml";

fn documents(rel: &str) -> Vec<Value> {
    let path = format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Server-side apply of a cluster-scoped object, as `kubectl apply --server-side` would.
async fn apply_cluster_scoped(client: &kube::Client, obj: &Value) {
    let (group, version) = match obj["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, obj["kind"].as_str().unwrap());
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .patch(
            name,
            &PatchParams::apply("wavegate-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", obj["kind"]));
}

/// wavegate's ServiceAccount (`wavegate/wavegate`, as deploy/base names it) and a client that
/// authenticates as it with a short-lived token.
async fn wavegate_sa_client(admin: &kube::Client) -> kube::Client {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "wavegate"}})).unwrap();
    let _ = Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "wavegate", "namespace": "wavegate"}}))
            .unwrap();
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), "wavegate");
    let _ = accounts.create(&PostParams::default(), &sa).await;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("wavegate", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .and_then(|s| s.token)
        .expect("a token for wavegate's ServiceAccount");
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    kube::Client::try_from(config).unwrap()
}

async fn merge_patch(
    client: &kube::Client,
    ar: &kube::discovery::ApiResource,
    ns: &str,
    name: &str,
    patch: Value,
) -> Result<(), String> {
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn annotate_service_account_may_write_only_its_own_annotations() {
    let admin = cluster::client().await;
    for file in [POLICY, CLUSTER_ROLE, BINDING] {
        for obj in documents(file) {
            apply_cluster_scoped(&admin, &obj).await;
        }
    }
    let ns = cluster::namespace(&admin, "vap").await;
    cluster::apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "forgejo", "namespace": ns,
                            "annotations": {"wavegate.dev/annotate": "true", "team": "cicd"}},
               "spec": {"selector": {"app": "forgejo"}, "ports": [{"port": 80}]}}),
    )
    .await;
    cluster::apply(
        &admin,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": "child", "namespace": ns},
               "spec": {"project": "default",
                        "source": {"repoURL": "https://git.example.com/platform.git",
                                   "path": "child", "targetRevision": "main"},
                        "destination": {"server": "https://kubernetes.default.svc",
                                        "namespace": ns}}}),
    )
    .await;
    let wavegate = wavegate_sa_client(&admin).await;
    let services = cluster::api_resource("", "v1", "Service", "services");
    let apps = cluster::api_resource("argoproj.io", "v1alpha1", "Application", "applications");

    // The policy is enforced once the API server's admission plugin has loaded it (seconds).
    // Each attempt asks for a different selector: a patch that changes nothing passes any
    // policy, so repeating an attempt that went through would prove nothing.
    let attempt = std::sync::atomic::AtomicUsize::new(0);
    let started = std::time::Instant::now();
    cluster::eventually(
        Duration::from_secs(60),
        "the policy to deny wavegate's selector patch",
        || async {
            let n = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let hijack = json!({"spec": {"selector": {"app": format!("attacker-{n}")}}});
            match merge_patch(&wavegate, &services, &ns, "forgejo", hijack).await {
                Err(e) if e.contains("wavegate-annotations-only") => Ok(()),
                Err(e) => Err(e),
                // Before the policy is in force the patch goes through; it must not stay so.
                Ok(()) => Err("the selector patch was allowed".to_string()),
            }
        },
    )
    .await;
    eprintln!("policy enforced after {:?}", started.elapsed());

    // Its own annotations: allowed.
    merge_patch(
        &wavegate,
        &services,
        &ns,
        "forgejo",
        json!({"metadata": {"annotations": {
            "wavegate.dev/health-status": "Progressing",
            "wavegate.dev/health-message": "0 ready endpoints",
            "wavegate.dev/observed-generation": "1"}}}),
    )
    .await
    .expect("wavegate may write its own annotations");
    // ... and their removal.
    merge_patch(
        &wavegate,
        &services,
        &ns,
        "forgejo",
        json!({"metadata": {"annotations": {"wavegate.dev/health-message": null}}}),
    )
    .await
    .expect("wavegate may remove its own annotations");

    // Anything else: denied, each with the policy's message.
    for (what, patch) in [
        (
            "another annotation",
            json!({"metadata": {"annotations": {"team": "attacker"}}}),
        ),
        (
            "the opt-in",
            json!({"metadata": {"annotations": {"wavegate.dev/annotate": null}}}),
        ),
        (
            "a label",
            json!({"metadata": {"labels": {"app": "attacker"}}}),
        ),
        ("the type", json!({"spec": {"type": "NodePort"}})),
    ] {
        let err = merge_patch(&wavegate, &services, &ns, "forgejo", patch)
            .await
            .expect_err(what);
        assert!(err.contains("wavegate-annotations-only"), "{what}: {err}");
    }
    for (what, patch) in [
        (
            "the source",
            json!({"spec": {"source": {"repoURL": "https://attacker.example/x.git"}}}),
        ),
        (
            "an operation",
            json!({"operation": {"sync": {"revision": "evil"}}}),
        ),
        (
            "the status",
            json!({"status": {"health": {"status": "Healthy"}}}),
        ),
    ] {
        let err = merge_patch(&wavegate, &apps, &ns, "child", patch)
            .await
            .expect_err(what);
        // The notices test, running beside this one on the same control plane, installs the
        // notices policy, which refuses these on Applications too; either refusal is the rule.
        assert!(
            err.contains("wavegate-annotations-only") || err.contains("wavegate-notices-only"),
            "{what}: {err}"
        );
    }
    merge_patch(
        &wavegate,
        &apps,
        &ns,
        "child",
        json!({"metadata": {"annotations": {"wavegate.dev/health-status": "Healthy"}}}),
    )
    .await
    .expect("wavegate may annotate an Application");

    // The admin (not wavegate) is unaffected.
    merge_patch(
        &admin,
        &services,
        &ns,
        "forgejo",
        json!({"metadata": {"labels": {"tier": "web"}}}),
    )
    .await
    .expect("other users are not constrained");
}

const GATE_POLICY: &str = "deploy/base/admission-policy.yaml";
const BASE_ROLE: &str = "deploy/base/clusterrole.yaml";
const BASE_BINDING: &str = "deploy/base/clusterrolebinding.yaml";

/// The gate controller's `patch` on WaveGates, narrowed by the base's policy: wavegate's
/// ServiceAccount, with exactly the base RBAC, may set and change the verdict stamp
/// (src/gate/stamp.rs) and nothing else of a WaveGate — not its checks, not another annotation,
/// not a label — while its status writes (the status subresource) are not affected. The same
/// holds for wavegate under another account bound to the base ClusterRole, and not for anyone
/// who may patch WaveGates without that role.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn gate_controller_may_change_only_the_verdict_stamp_of_a_wavegate() {
    let admin = cluster::client().await;
    for file in [GATE_POLICY, BASE_ROLE, BASE_BINDING] {
        for obj in documents(file) {
            apply_cluster_scoped(&admin, &obj).await;
        }
    }
    let ns = cluster::namespace(&admin, "vap-gate").await;
    cluster::apply(
        &admin,
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": "serving", "namespace": ns,
                            "annotations": {"argocd.argoproj.io/sync-wave": "4"}},
               "spec": {"checks": [{"name": "http",
                                    "service": {"name": "forgejo", "minReady": 1}}]}}),
    )
    .await;
    let wavegate = wavegate_sa_client(&admin).await;
    let gates = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    let stamp = wavegate::gate::stamp::ANNOTATION;

    let attempt = std::sync::atomic::AtomicUsize::new(0);
    cluster::eventually(
        Duration::from_secs(60),
        "the policy to deny wavegate's change of a gate's checks",
        || async {
            let n = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let release = json!({"spec": {"checks": [{"name": format!("gone-{n}"),
                                                      "service": {"name": "x"}}]}});
            match merge_patch(&wavegate, &gates, &ns, "serving", release).await {
                Err(e) if e.contains("wavegate-gate-verdict-only") => Ok(()),
                Err(e) => Err(e),
                Ok(()) => Err("the checks patch was allowed".to_string()),
            }
        },
    )
    .await;

    // The stamp: set, and changed.
    for value in [
        "1/Progressing/0000000000000001",
        "1/Healthy/0000000000000002",
    ] {
        merge_patch(
            &wavegate,
            &gates,
            &ns,
            "serving",
            json!({"metadata": {"annotations": {stamp: value}}}),
        )
        .await
        .unwrap_or_else(|e| panic!("wavegate may write its stamp {value}: {e}"));
    }
    // Its status, through the status subresource (server-side apply, as the controller does).
    Api::<DynamicObject>::namespaced_with(wavegate.clone(), &ns, &gates)
        .patch_status(
            "serving",
            &PatchParams::apply("wavegate").force(),
            &Patch::Apply(
                json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
                                 "status": {"observedGeneration": 1,
                                            "health": {"status": "Progressing", "message": "m"}}}),
            ),
        )
        .await
        .expect("the status subresource is not narrowed by the policy");

    for (what, patch) in [
        (
            "another annotation",
            json!({"metadata": {"annotations": {"argocd.argoproj.io/sync-wave": "9"}}}),
        ),
        (
            "a new annotation",
            json!({"metadata": {"annotations": {"wavegate.dev/health-status": "Healthy"}}}),
        ),
        ("a label", json!({"metadata": {"labels": {"team": "x"}}})),
        (
            "a finalizer",
            json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        ),
        ("the timeout", json!({"spec": {"timeout": "1s"}})),
    ] {
        let err = merge_patch(&wavegate, &gates, &ns, "serving", patch)
            .await
            .expect_err(what);
        assert!(err.contains("wavegate-gate-verdict-only"), "{what}: {err}");
    }
    // The admin (Argo CD, a user) is unaffected.
    merge_patch(
        &admin,
        &gates,
        &ns,
        "serving",
        json!({"spec": {"timeout": "10m"}}),
    )
    .await
    .expect("other users are not constrained");

    // wavegate under another account: a remote cluster's client certificate (user
    // `wavegate-remote`) bound to the same ClusterRole is narrowed the same way: the policy
    // recognises the role's mark, not an account name.
    bind_cluster_role(
        &admin,
        "vap-test-wavegate-remote",
        "wavegate",
        "wavegate-remote",
    )
    .await;
    let remote = client_as("wavegate-remote").await;
    cluster::eventually(
        Duration::from_secs(30),
        "the RBAC cache to know wavegate-remote",
        || async {
            merge_patch(
                &remote,
                &gates,
                &ns,
                "serving",
                json!({"metadata": {"annotations": {stamp: "1/Healthy/0000000000000003"}}}),
            )
            .await
        },
    )
    .await;
    // (Eventually: an earlier run may have left a policy of another content, which the API
    // server reloads in the background.)
    let attempt = std::sync::atomic::AtomicUsize::new(0);
    cluster::eventually(
        Duration::from_secs(30),
        "the policy to deny wavegate under another account a change of a gate's checks",
        || async {
            let n = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let rewrite = json!({"spec": {"checks": [{"name": format!("remote-{n}"),
                                                      "service": {"name": "x"}}]}});
            match merge_patch(&remote, &gates, &ns, "serving", rewrite).await {
                Err(e) if e.contains("wavegate-gate-verdict-only") => Ok(()),
                Err(e) => Err(e),
                Ok(()) => Err("the checks patch was allowed".to_string()),
            }
        },
    )
    .await;

    // Someone else who may patch WaveGates (but not update them), without wavegate's mark, is
    // not wavegate and is not narrowed.
    apply_cluster_scoped(
        &admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "vap-test-gate-editor"},
                "rules": [{"apiGroups": ["wavegate.dev"], "resources": ["wavegates"],
                           "verbs": ["get", "patch"]}]}),
    )
    .await;
    bind_cluster_role(
        &admin,
        "vap-test-gate-editor",
        "vap-test-gate-editor",
        "gate-editor",
    )
    .await;
    let editor = client_as("gate-editor").await;
    cluster::eventually(
        Duration::from_secs(30),
        "a gate editor without the mark to change a gate's timeout",
        || async {
            merge_patch(
                &editor,
                &gates,
                &ns,
                "serving",
                json!({"spec": {"timeout": "20m"}}),
            )
            .await
        },
    )
    .await;
}

/// Binds `role` to the user `user` cluster-wide.
async fn bind_cluster_role(admin: &kube::Client, name: &str, role: &str, user: &str) {
    apply_cluster_scoped(
        admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": user}]}),
    )
    .await;
}

/// A client that acts as `user` (the admin impersonating it: the API server authorizes and
/// admits the request as that user, as it would one with that user's client certificate).
async fn client_as(user: &str) -> kube::Client {
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    kube::Client::try_from(config).unwrap()
}

const NOTICES_POLICY: &str = "deploy/components/notices/admission-policy.yaml";
const NOTICES_ROLE: &str = "deploy/components/notices/role.yaml";

/// Notices' `patch` on Applications, narrowed by its policy: wavegate's ServiceAccount, with the
/// shipped Role (here in the test's namespace instead of `argocd`), may write exactly the notice
/// keys src/notice.rs writes — not a notice's `permanent`, not another annotation, not the
/// source, an operation or the status.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn notices_may_write_only_the_notice_keys_of_an_application() {
    let admin = cluster::client().await;
    for obj in documents(NOTICES_POLICY) {
        apply_cluster_scoped(&admin, &obj).await;
    }
    let ns = cluster::namespace(&admin, "vap-notice").await;
    for mut obj in documents(NOTICES_ROLE) {
        obj["metadata"]["namespace"] = json!(ns);
        cluster::apply(&admin, obj).await;
    }
    cluster::apply(
        &admin,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": "shop", "namespace": ns, "annotations": {"team": "shop"}},
               "spec": {"project": "default",
                        "source": {"repoURL": "https://git.example.com/shop.git",
                                   "path": "shop", "targetRevision": "main"},
                        "destination": {"server": "https://kubernetes.default.svc",
                                        "namespace": ns}}}),
    )
    .await;
    let wavegate = wavegate_sa_client(&admin).await;
    let apps = cluster::api_resource("argoproj.io", "v1alpha1", "Application", "applications");
    let notice: serde_json::Map<String, Value> = wavegate::notice::WRITTEN
        .iter()
        .map(|k| (k.to_string(), json!("x")))
        .collect();
    // The Role and the policy take a moment to reach the authorizer and the admission chain.
    let mut last = String::new();
    for _ in 0..50 {
        match merge_patch(
            &wavegate,
            &apps,
            &ns,
            "shop",
            json!({"metadata": {"annotations": notice}}),
        )
        .await
        {
            Ok(()) => {
                last.clear();
                break;
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(last.is_empty(), "wavegate may write its notice: {last}");
    let removal: serde_json::Map<String, Value> = wavegate::notice::WRITTEN
        .iter()
        .map(|k| (k.to_string(), Value::Null))
        .collect();
    merge_patch(
        &wavegate,
        &apps,
        &ns,
        "shop",
        json!({"metadata": {"annotations": removal}}),
    )
    .await
    .expect("wavegate may remove its notice");
    // The policy reaches the admission chain on its own time, apart from the Role: until a
    // forbidden change is refused, an admitted one says nothing. A dry run is admitted like the
    // real patch and changes nothing.
    cluster::eventually(Duration::from_secs(30), "the notices policy is in force", || async {
        let permanent = json!({"metadata": {"annotations": {"notice.argocd.argoproj.io/permanent": "true"}}});
        match Api::<DynamicObject>::namespaced_with(wavegate.clone(), &ns, &apps)
            .patch(
                "shop",
                &PatchParams {
                    dry_run: true,
                    ..PatchParams::default()
                },
                &Patch::Merge(permanent),
            )
            .await
        {
            // Either of wavegate's policies: the annotation mode's (another test installs it)
            // covers Applications too, and may be the one to refuse first.
            Err(e)
                if ["wavegate-notices-only", "wavegate-annotations-only"]
                    .iter()
                    .any(|p| e.to_string().contains(p)) =>
            {
                Ok(())
            }
            Err(e) => Err(e.to_string()),
            Ok(_) => Err("a permanent notice admitted".to_string()),
        }
    })
    .await;
    for (what, patch) in [
        (
            "a permanent notice",
            json!({"metadata": {"annotations": {"notice.argocd.argoproj.io/permanent": "true"}}}),
        ),
        (
            "another annotation",
            json!({"metadata": {"annotations": {"team": "attacker"}}}),
        ),
        (
            "the source",
            json!({"spec": {"source": {"repoURL": "https://attacker.example/x.git"}}}),
        ),
        (
            "an operation",
            json!({"operation": {"sync": {"revision": "evil"}}}),
        ),
        (
            "the status",
            json!({"status": {"health": {"status": "Healthy"}}}),
        ),
    ] {
        let err = merge_patch(&wavegate, &apps, &ns, "shop", patch)
            .await
            .expect_err(what);
        assert!(
            err.contains("wavegate-notices-only") || err.contains("wavegate-annotations-only"),
            "{what}: {err}"
        );
    }
}
