//! Kubernetes Events on a real control plane: each gate transition (and each annotation-mode
//! verdict change) is one Event on the object, with the verdict's message, sent with the
//! installed ServiceAccount's RBAC; `kubectl describe` lists them; a settled system, renewing
//! its verdicts' validity and then restarted, sends none.
//!
//! On a control plane of the test's own: any other wavegate judging the shared one's gates (a
//! developer's `wavegate serve`, another worktree's test run) would write some transitions
//! itself, and this test's wavegate would rightly send no Event for them.

use crate::cluster;
use crate::private_control_plane;

use cluster::{Wavegate, apply, eventually, pod, set_pod_ready};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use private_control_plane::PrivateControlPlane;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use wavegate::clusters::Cluster;
use wavegate::evaluate::EvalConfig;
use wavegate::gate::controller::Settings;

/// How often every gate is judged again, and how long a written verdict counts: short, so the
/// settled window below holds many resyncs and several validity renewals (status writes that
/// are not transitions).
const RESYNC: Duration = Duration::from_secs(1);
const VALIDITY: Duration = Duration::from_secs(4);
/// The settled window: twelve resyncs, six renewals.
const SETTLED: Duration = Duration::from_secs(12);

fn gates_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn gate(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// (reason, type, note) of the Events about `kind` `name`, oldest first.
async fn events_about(client: &kube::Client, ns: &str, kind: &str, name: &str) -> Vec<Event> {
    let mut events: Vec<Event> = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .collect();
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    events
}

/// (reason, type) of each Event; a failed comparison prints the Events in full.
fn summary(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e.reason.clone().unwrap_or_default(),
                e.type_.clone().unwrap_or_default(),
            )
        })
        .collect()
}

async fn health_of(client: &kube::Client, ns: &str, name: &str) -> Value {
    let g = gates_api(client, ns).get(name).await.unwrap();
    serde_json::to_value(g).unwrap()["status"]["health"].clone()
}

async fn gate_becomes(client: &kube::Client, ns: &str, name: &str, want: &str) -> Value {
    eventually(
        Duration::from_secs(30),
        &format!("{name} {want}"),
        || async {
            let h = health_of(client, ns, name).await;
            if h["status"] == want {
                Ok(h)
            } else {
                Err(h.to_string())
            }
        },
    )
    .await
}

/// The gate controller and annotation mode, as `wavegate serve --annotate` runs them.
fn run_writers(wg: &Wavegate) -> [tokio::task::JoinHandle<()>; 2] {
    let home = Cluster::home(wg.evaluator.clone());
    [
        tokio::spawn(home.gate_controller(
            &home,
            wg.metrics.clone(),
            Settings {
                status_validity: Some(VALIDITY),
                ..Settings::new(RESYNC)
            },
        )),
        tokio::spawn(wavegate::annotate::run_with(
            wg.evaluator.clone(),
            wg.metrics.clone(),
            RESYNC,
            Some(VALIDITY),
            wavegate::leader::Fence::default(),
        )),
    ]
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn transitions_are_events_and_a_settled_system_sends_none_even_after_a_restart() {
    let cp = PrivateControlPlane::up("events");
    let admin = cp.admin().await;
    // As installed with annotation mode: deploy/overlays/annotate's RBAC (and its admission
    // policy), wavegate with its ServiceAccount's token, so the Events rule is proven enough.
    let overlay = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/overlays/annotate");
    // The base reads argocd-cm in Argo CD's namespace, which an install has.
    cp.kubectl(&["create", "namespace", "argocd"]);
    cp.kubectl(&["apply", "--server-side", "-k", overlay.to_str().unwrap()]);
    cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/wavegates.wavegate.dev",
    ]);
    let token = cp.kubectl(&[
        "-n",
        "wavegate",
        "create",
        "token",
        "wavegate",
        "--duration=1h",
    ]);
    let sa = cp
        .client(&cp.kubeconfig_with_token("wavegate", token.trim()))
        .await;
    let ns = cluster::namespace(&admin, "events").await;
    // RBAC is read through an informer: wait until the API server applies the new bindings, so
    // that the first transitions' Events are not refused (Events are sent once, best effort).
    eventually(
        Duration::from_secs(15),
        "RBAC for wavegate's Events",
        || async {
            let sa_user = "system:serviceaccount:wavegate:wavegate";
            let out = std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&cp.kubeconfig)
                .args([
                    "auth",
                    "can-i",
                    "create",
                    "events.events.k8s.io",
                    "-n",
                    &ns,
                    "--as",
                    sa_user,
                ])
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if said == "yes" { Ok(()) } else { Err(said) }
        },
    )
    .await;
    pod(&admin, &ns, "web-0", json!({"app": "web"})).await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": ns},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await;
    // Annotation mode's object: a Service that opts in.
    pod(&admin, &ns, "api-0", json!({"app": "api"})).await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "api", "namespace": ns,
                            "annotations": {"wavegate.dev/annotate": "true"}},
               "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let wg = Wavegate::start_in(sa.clone(), EvalConfig::default(), &[&ns]).await;
    let first = run_writers(&wg);
    apply(
        &admin,
        gate(
            &ns,
            "web-up",
            json!({"checks": [{"name": "web", "service": {"name": "web"}}]}),
        ),
    )
    .await;
    // A Service nobody creates: the gate's timeout fires.
    apply(
        &admin,
        gate(
            &ns,
            "db-up",
            json!({"timeout": "3s", "checks": [{"name": "db", "service": {"name": "db"}}]}),
        ),
    )
    .await;

    gate_becomes(&admin, &ns, "web-up", "Progressing").await;
    annotated(&admin, &ns, "Progressing").await;
    set_pod_ready(&admin, &ns, "web-0", "10.244.21.1", true).await;
    set_pod_ready(&admin, &ns, "api-0", "10.244.21.2", true).await;
    let healthy = gate_becomes(&admin, &ns, "web-up", "Healthy").await;
    let timed_out = gate_becomes(&admin, &ns, "db-up", "Degraded").await;
    let annotations = annotated(&admin, &ns, "Healthy").await;

    let web = two_events(&admin, &ns, "WaveGate", "web-up").await;
    assert_eq!(
        summary(&web),
        [
            ("Progressing".into(), "Normal".into()),
            ("Healthy".into(), "Normal".into())
        ],
        "{web:#?}"
    );
    let last = web.last().unwrap();
    assert_eq!(
        last.note.as_deref(),
        healthy["message"].as_str(),
        "{last:?}"
    );
    assert_eq!(last.reporting_controller.as_deref(), Some("wavegate"));
    assert_eq!(last.action.as_deref(), Some("JudgeGate"));
    let gate_uid = gates_api(&admin, &ns)
        .get("web-up")
        .await
        .unwrap()
        .metadata
        .uid;
    assert_eq!(last.regarding.as_ref().unwrap().uid, gate_uid, "{last:?}");

    let db = two_events(&admin, &ns, "WaveGate", "db-up").await;
    assert_eq!(
        summary(&db),
        [
            ("Progressing".into(), "Normal".into()),
            ("TimedOut".into(), "Warning".into())
        ],
        "{db:#?}"
    );
    let note = db.last().unwrap().note.clone().unwrap_or_default();
    assert_eq!(Some(note.as_str()), timed_out["message"].as_str());
    assert!(note.starts_with("timed out after 3s"), "{note}");

    let api = two_events(&admin, &ns, "Service", "api").await;
    assert_eq!(
        summary(&api),
        [
            ("Progressing".into(), "Normal".into()),
            ("Healthy".into(), "Normal".into())
        ],
        "{api:#?}"
    );
    let last = api.last().unwrap();
    assert_eq!(
        last.note.as_ref(),
        annotations.get("wavegate.dev/health-message")
    );
    assert_eq!(last.action.as_deref(), Some("Annotate"));
    let r = last.regarding.as_ref().unwrap();
    assert_eq!(
        (r.api_version.as_deref(), r.kind.as_deref()),
        (Some("v1"), Some("Service"))
    );

    // `kubectl describe` lists them, as the person on call sees them.
    let described = cp.kubectl(&["-n", &ns, "describe", "wavegate", "web-up"]);
    let out =
        std::env::var("TEST_OUTPUT").unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(format!("{out}/kubectl-describe-wavegate.txt"), &described);
    let events_section = described
        .split("\nEvents:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{described}"));
    for reason in ["Progressing", "Healthy"] {
        assert!(
            events_section
                .lines()
                .any(|l| l.contains("Normal") && l.contains(reason) && l.contains("wavegate")),
            "{reason} not listed:\n{described}"
        );
    }

    // Settled: resyncs judge everything every second and renew validUntil / valid-until every
    // 2 s — writes, but no transition, so no Event.
    let count = || async {
        let all: Vec<Event> = Api::<Event>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        all.into_iter()
            .filter(|e| e.reporting_controller.as_deref() == Some("wavegate"))
            .count()
    };
    let before = count().await;
    assert_eq!(before, 6, "two per gate and two on the Service");
    let writes =
        |wg: &Wavegate| wg.metrics.gate_status_writes.get() + wg.metrics.annotation_writes.get();
    let writes_before = writes(&wg);
    tokio::time::sleep(SETTLED).await;
    let renewals = writes(&wg) - writes_before;
    assert!(
        renewals >= 6,
        "the window must hold validity renewals; saw {renewals} writes"
    );
    assert_eq!(
        count().await,
        before,
        "a settled system sent Events over {SETTLED:?}"
    );

    // Restarted: a new cache, controller and annotator, with nothing in memory. They compare
    // with what is stored on the objects, so still no Event.
    for task in first {
        task.abort();
    }
    let wg2 = Wavegate::start_in(sa, EvalConfig::default(), &[&ns]).await;
    let second = run_writers(&wg2);
    eventually(
        Duration::from_secs(15),
        "the restarted controller judged both gates",
        || async {
            let text = wg2.metrics.encode();
            let judged = ["web-up\",status=\"Healthy\"", "db-up\",status=\"Degraded\""]
                .iter()
                .all(|g| text.contains(g));
            if judged { Ok(()) } else { Err(text) }
        },
    )
    .await;
    let writes_before = writes(&wg2);
    tokio::time::sleep(3 * VALIDITY).await;
    for task in second {
        task.abort();
    }
    assert!(
        writes(&wg2) > writes_before,
        "the restarted writers renewed nothing"
    );
    // Every write went through, also past deploy/overlays/annotate's admission policy (loaded
    // long before the renewals above).
    for m in [&wg.metrics, &wg2.metrics] {
        let text = m.encode();
        for writer in ["gate", "annotate"] {
            let zero = format!("wavegate_write_errors_total{{writer=\"{writer}\"}} 0\n");
            assert!(text.contains(&zero), "{writer} writes failed: {text}");
        }
    }
    assert_eq!(
        count().await,
        before,
        "a restart sent Events for unchanged objects"
    );
}

async fn two_events(client: &kube::Client, ns: &str, kind: &str, name: &str) -> Vec<Event> {
    eventually(
        Duration::from_secs(10),
        &format!("two Events on {kind} {name}"),
        || async {
            let e = events_about(client, ns, kind, name).await;
            if e.len() >= 2 {
                Ok(e)
            } else {
                Err(format!("{:?}", summary(&e)))
            }
        },
    )
    .await
}

async fn annotated(client: &kube::Client, ns: &str, want: &str) -> BTreeMap<String, String> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    eventually(
        Duration::from_secs(15),
        &format!("Service api {want}"),
        || async {
            let s = services.get("api").await.map_err(|e| e.to_string())?;
            let a = s.metadata.annotations.clone().unwrap_or_default();
            match a.get("wavegate.dev/health-status").map(String::as_str) {
                Some(got) if got == want => Ok(a),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}
