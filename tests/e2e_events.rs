//! Kubernetes Events on the real control plane: each gate transition (and each annotation-mode
//! verdict change) is one Event on the object, with the verdict's message, sent with the
//! installed ServiceAccount's RBAC; `kubectl describe` lists them; a settled system, renewing
//! its verdicts' validity and then restarted, sends none.

#[path = "support/cluster.rs"]
mod cluster;

use cluster::{
    Wavegate, apply, eventually, installed_wavegate_client, kubectl, pod, set_pod_ready,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;
use wavegate::gate::controller::{self, Settings};

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

fn run_controller(wg: &Wavegate) -> tokio::task::JoinHandle<()> {
    tokio::spawn(controller::run_with(
        wg.evaluator.clone(),
        wg.metrics.clone(),
        Settings {
            status_validity: Some(VALIDITY),
            ..Settings::new(RESYNC)
        },
    ))
}

#[tokio::test]
async fn gate_transitions_are_events_and_a_settled_system_sends_none_even_after_a_restart() {
    let admin = cluster::client().await;
    // wavegate as installed: deploy/base's ServiceAccount, so its Events rule is proven enough.
    let sa = installed_wavegate_client().await;
    let ns = cluster::namespace(&admin, "events").await;
    pod(&admin, &ns, "web-0", json!({"app": "web"})).await;
    cluster::service(&admin, &ns, "web", "web").await;
    let wg = Wavegate::start_in(sa.clone(), EvalConfig::default(), &[&ns]).await;
    let first = run_controller(&wg);
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
    set_pod_ready(&admin, &ns, "web-0", "10.244.21.1", true).await;
    let healthy = gate_becomes(&admin, &ns, "web-up", "Healthy").await;
    let timed_out = gate_becomes(&admin, &ns, "db-up", "Degraded").await;

    let web = eventually(Duration::from_secs(10), "web-up's two Events", || async {
        let e = events_about(&admin, &ns, "WaveGate", "web-up").await;
        if e.len() >= 2 {
            Ok(e)
        } else {
            Err(format!("{:?}", summary(&e)))
        }
    })
    .await;
    assert_eq!(
        summary(&web),
        [
            ("Progressing".into(), "Normal".into()),
            ("Healthy".into(), "Normal".into())
        ],
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

    let db = eventually(Duration::from_secs(10), "db-up's two Events", || async {
        let e = events_about(&admin, &ns, "WaveGate", "db-up").await;
        if e.len() >= 2 {
            Ok(e)
        } else {
            Err(format!("{:?}", summary(&e)))
        }
    })
    .await;
    assert_eq!(
        summary(&db),
        [
            ("Progressing".into(), "Normal".into()),
            ("TimedOut".into(), "Warning".into())
        ],
    );
    let note = db.last().unwrap().note.clone().unwrap_or_default();
    assert_eq!(Some(note.as_str()), timed_out["message"].as_str());
    assert!(note.starts_with("timed out after 3s"), "{note}");

    // `kubectl describe` lists them, as the person on call sees them.
    let described = kubectl(&["-n", &ns, "describe", "wavegate", "web-up"]);
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

    // Settled: resyncs judge both gates every second and renew validUntil every 2 s — status
    // writes, but no transition, so no Event.
    let count = || async {
        events_about(&admin, &ns, "WaveGate", "web-up").await.len()
            + events_about(&admin, &ns, "WaveGate", "db-up").await.len()
    };
    let before = count().await;
    let writes_before = wg.metrics.gate_status_writes.get();
    tokio::time::sleep(SETTLED).await;
    let renewals = wg.metrics.gate_status_writes.get() - writes_before;
    assert!(
        renewals >= 4,
        "the window must hold validity renewals; saw {renewals} writes"
    );
    assert_eq!(
        count().await,
        before,
        "a settled system sent Events over {SETTLED:?}"
    );

    // Restarted: a new cache and controller, with nothing in memory. It compares with the
    // status stored on the gates, so still no Event.
    first.abort();
    let wg2 = Wavegate::start_in(sa, EvalConfig::default(), &[&ns]).await;
    let second = run_controller(&wg2);
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
    tokio::time::sleep(4 * RESYNC).await;
    second.abort();
    assert_eq!(
        count().await,
        before,
        "a restart sent Events for unchanged gates"
    );
}

#[tokio::test]
async fn annotation_mode_verdict_changes_are_events_on_the_annotated_object() {
    let admin = cluster::client().await;
    let ns = cluster::namespace(&admin, "events-annotate").await;
    pod(&admin, &ns, "api-0", json!({"app": "api"})).await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "api", "namespace": ns,
                            "annotations": {"wavegate.dev/annotate": "true"}},
               "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let wg = Wavegate::start_in(admin.clone(), EvalConfig::default(), &[&ns]).await;
    let annotator = tokio::spawn(wavegate::annotate::run_with(
        wg.evaluator.clone(),
        wg.metrics.clone(),
        RESYNC,
        Some(VALIDITY),
    ));
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let annotated = |want: &'static str| {
        let services = services.clone();
        async move {
            eventually(Duration::from_secs(15), want, || async {
                let s = services.get("api").await.map_err(|e| e.to_string())?;
                let a = s.metadata.annotations.clone().unwrap_or_default();
                match a.get("wavegate.dev/health-status").map(String::as_str) {
                    Some(got) if got == want => Ok(a),
                    other => Err(format!("{other:?}")),
                }
            })
            .await
        }
    };
    annotated("Progressing").await;
    set_pod_ready(&admin, &ns, "api-0", "10.244.21.9", true).await;
    let a = annotated("Healthy").await;

    let events = eventually(
        Duration::from_secs(10),
        "two Events on the Service",
        || async {
            let e = events_about(&admin, &ns, "Service", "api").await;
            if e.len() >= 2 {
                Ok(e)
            } else {
                Err(format!("{:?}", summary(&e)))
            }
        },
    )
    .await;
    assert_eq!(
        summary(&events),
        [
            ("Progressing".into(), "Normal".into()),
            ("Healthy".into(), "Normal".into())
        ],
    );
    let last = events.last().unwrap();
    assert_eq!(last.note.as_ref(), a.get("wavegate.dev/health-message"));
    assert_eq!(last.action.as_deref(), Some("Annotate"));
    let r = last.regarding.as_ref().unwrap();
    assert_eq!(
        (r.api_version.as_deref(), r.kind.as_deref()),
        (Some("v1"), Some("Service"))
    );

    // Settled, with valid-until renewed every 2 s: annotation writes, no Event.
    let writes_before = wg.metrics.annotation_writes.get();
    tokio::time::sleep(SETTLED).await;
    annotator.abort();
    assert!(
        wg.metrics.annotation_writes.get() > writes_before,
        "no renewal in the window"
    );
    assert_eq!(
        events_about(&admin, &ns, "Service", "api").await.len(),
        events.len()
    );
}
