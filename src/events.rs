//! Kubernetes Events for verdict transitions, where the person on call looks: `kubectl describe`
//! and Argo CD's "Events" tab list the Events whose `regarding` is the object.
//!
//! One Event per real transition of what wavegate wrote: the old status is the one stored on the
//! object (a WaveGate's `status.health.status`, an annotated object's
//! `wavegate.dev/health-status`), never wavegate's memory, so a settled system emits none, also
//! after a wavegate restart, and renewing `validUntil` (same status) is not a transition. The
//! Event is recorded after the write that records the transition succeeded: a write that fails
//! is retried, and its Event with it, so an Event never announces a status nobody can read.
//! Events are sent by a task of their own, in order, never holding up the writes
//! ([`Publisher`]).

use crate::health::HealthStatus;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;
use tokio::sync::mpsc;

/// `reportingController` of every Event (`kubectl describe` shows it under "From").
pub const REPORTER: &str = "wavegate";
/// The Event's `action` for a WaveGate's status write.
pub const JUDGE_GATE: &str = "JudgeGate";
/// The Event's `action` for an annotation-mode write.
pub const ANNOTATE: &str = "Annotate";
/// events.k8s.io/v1 rejects a `note` longer than 1 kB (k8s.io/kubernetes
/// pkg/apis/core/validation/events.go, `NoteLengthLimit`).
const NOTE_LIMIT: usize = 1024;

/// The Event one transition deserves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// CamelCase, what the object became: `Healthy`, `Progressing`, `Degraded`, `TimedOut`, ….
    pub reason: &'static str,
    pub warning: bool,
    /// The verdict's message, cut to what the Events API accepts.
    pub note: String,
}

/// The Event, if any, for a status going from `old` (what the object carried, `None` before
/// wavegate's first verdict) to `new` with `message`. `timed_out`: the new verdict is the
/// gate's timeout firing, not a check's own Degraded.
pub fn transition(
    old: Option<HealthStatus>,
    new: HealthStatus,
    message: &str,
    timed_out: bool,
) -> Option<Transition> {
    if old == Some(new) {
        return None;
    }
    let reason = match new {
        HealthStatus::Degraded if timed_out => "TimedOut",
        s => s.as_str(),
    };
    // Warning where a person has something to look at: a definite failure, or a verdict
    // wavegate cannot give.
    let warning = matches!(new, HealthStatus::Degraded | HealthStatus::Unknown);
    Some(Transition {
        reason,
        warning,
        note: bounded(message),
    })
}

/// The status an annotation (or any stored string) names; anything else counts as none.
pub fn parse_status(stored: Option<&str>) -> Option<HealthStatus> {
    let stored = stored?;
    HealthStatus::ALL.into_iter().find(|s| s.as_str() == stored)
}

fn bounded(message: &str) -> String {
    if message.len() <= NOTE_LIMIT {
        return message.to_string();
    }
    const MORE: &str = " …";
    let mut end = NOTE_LIMIT - MORE.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MORE}", &message[..end])
}

/// A reference to an object read from the cache as JSON (which carries no apiVersion/kind, so
/// the caller names them).
pub fn reference(object: &Value, api_version: &str, kind: &str) -> ObjectReference {
    let meta = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    ObjectReference {
        api_version: Some(api_version.to_string()),
        kind: Some(kind.to_string()),
        namespace: meta("namespace"),
        name: meta("name"),
        uid: meta("uid"),
        resource_version: meta("resourceVersion"),
        ..ObjectReference::default()
    }
}

/// Transitions waiting for the sender. Recording one never waits for the API server: a slow or
/// throttled Events API (Events often live in an etcd of their own, and priority and fairness
/// may queue them) must not hold a reconcile, and with it the status writes of other objects —
/// a change that moves 1,000 gates would otherwise wait for 1,000 Events in turn. Beyond this
/// many waiting, new ones are dropped and logged: an Event is a courtesy, the status is the
/// verdict.
const BACKLOG: usize = 1024;

/// Sends transitions through kube-rs's event recorder, one at a time and in the order they
/// were recorded (so an object's Events never overtake each other), from a task of its own.
/// Events still waiting when wavegate stops are not sent.
#[derive(Clone)]
pub struct Publisher {
    queue: mpsc::Sender<Pending>,
}

struct Pending {
    transition: Transition,
    action: &'static str,
    regarding: ObjectReference,
}

/// How long sending one Event may take before it is given up (best effort, like its errors),
/// so one stuck request does not hold every Event behind it.
const PUBLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

impl Publisher {
    /// `reportingInstance` is the host name: the pod's name when wavegate runs in a pod. The
    /// sender runs until every clone of the publisher is dropped.
    pub fn new(client: kube::Client) -> Publisher {
        let (queue, waiting) = mpsc::channel(BACKLOG);
        tokio::spawn(send_all(client, Reporter::from(REPORTER), waiting));
        Publisher { queue }
    }

    /// Best effort: an Event that cannot be sent is logged, and the verdict stands.
    pub fn publish(
        &self,
        transition: Transition,
        action: &'static str,
        regarding: ObjectReference,
    ) {
        let pending = Pending {
            transition,
            action,
            regarding,
        };
        if let Err(e) = self.queue.try_send(pending) {
            let (why, p) = match e {
                mpsc::error::TrySendError::Full(p) => ("more than 1024 Events waiting", p),
                mpsc::error::TrySendError::Closed(p) => ("the sender has stopped", p),
            };
            not_sent(&p, &why);
        }
    }
}

async fn send_all(client: kube::Client, reporter: Reporter, mut waiting: mpsc::Receiver<Pending>) {
    while let Some(p) = waiting.recv().await {
        // A recorder per Event: kube-rs's recorder folds Events with the same reason on the
        // same object within 6 minutes into one series and keeps the first note, which would
        // show a second Degraded with the first one's message. Transitions are already
        // deduplicated (at most one per status write), so each gets its own Event with its
        // own message.
        let recorder = Recorder::new(client.clone(), reporter.clone());
        let event = Event {
            type_: if p.transition.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: p.transition.reason.to_string(),
            note: Some(p.transition.note.clone()),
            action: p.action.to_string(),
            secondary: None,
        };
        let sent = tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&event, &p.regarding))
            .await
            .unwrap_or_else(|_| {
                Err(kube::Error::Service(
                    format!("no answer within {PUBLISH_TIMEOUT:?}").into(),
                ))
            });
        if let Err(e) = sent {
            not_sent(&p, &e);
        }
    }
}

fn not_sent(p: &Pending, error: &dyn std::fmt::Display) {
    let r = &p.regarding;
    tracing::warn!(
        object = %format!(
            "{} {}/{}",
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default()
        ),
        reason = p.transition.reason,
        error = %error,
        "event not sent"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use HealthStatus::*;

    #[test]
    fn settled_status_emits_nothing_whatever_the_message() {
        // A renewal of validUntil, or a Progressing gate whose message names another pod.
        for s in HealthStatus::ALL {
            assert_eq!(transition(Some(s), s, "anything new", false), None);
        }
    }

    #[test]
    fn progressing_to_healthy_is_a_normal_healthy_event_with_the_verdict_message() {
        let t = transition(Some(Progressing), Healthy, "all 2 checks healthy", false).unwrap();
        assert_eq!(t.reason, "Healthy");
        assert!(!t.warning);
        assert_eq!(t.note, "all 2 checks healthy");
    }

    #[test]
    fn degraded_is_a_warning() {
        let t = transition(Some(Progressing), Degraded, "two cluster IDs", false).unwrap();
        assert_eq!((t.reason, t.warning), ("Degraded", true));
        let t = transition(Some(Healthy), Degraded, "two cluster IDs", false).unwrap();
        assert_eq!((t.reason, t.warning), ("Degraded", true));
    }

    #[test]
    fn a_timeout_firing_is_timed_out_not_degraded() {
        let t = transition(Some(Progressing), Degraded, "timed out after 10m", true).unwrap();
        assert_eq!((t.reason, t.warning), ("TimedOut", true));
        // Past the timeout and staying Degraded: no second Event.
        assert_eq!(
            transition(Some(Degraded), Degraded, "timed out", true),
            None
        );
    }

    #[test]
    fn first_verdict_and_regression_are_transitions() {
        let t = transition(None, Progressing, "waiting", false).unwrap();
        assert_eq!((t.reason, t.warning), ("Progressing", false));
        let t = transition(Some(Healthy), Progressing, "lost an endpoint", false).unwrap();
        assert_eq!(t.reason, "Progressing");
        let t = transition(Some(Progressing), Unknown, "cannot tell", false).unwrap();
        assert_eq!((t.reason, t.warning), ("Unknown", true));
    }

    #[test]
    fn stored_annotation_reads_back_as_its_status() {
        assert_eq!(parse_status(Some("Healthy")), Some(Healthy));
        assert_eq!(parse_status(Some("healthy")), None);
        assert_eq!(parse_status(None), None);
        // An annotation someone else mangled is no status: the next verdict is a transition.
        assert!(transition(parse_status(Some("Fine")), Healthy, "", false).is_some());
    }

    #[test]
    fn long_messages_fit_the_events_api() {
        let long = "é".repeat(2000);
        let note = transition(None, Degraded, &long, false).unwrap().note;
        assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
        assert!(note.ends_with(" …"));
        let short = "x".repeat(NOTE_LIMIT);
        assert_eq!(
            transition(None, Degraded, &short, false).unwrap().note,
            short
        );
    }

    #[test]
    fn reference_names_the_cached_object() {
        let obj = serde_json::json!({"metadata": {"name": "web", "namespace": "cicd",
                                                  "uid": "u-1", "resourceVersion": "7"}});
        let r = reference(&obj, "v1", "Service");
        assert_eq!(r.kind.as_deref(), Some("Service"));
        assert_eq!(r.namespace.as_deref(), Some("cicd"));
        assert_eq!(r.uid.as_deref(), Some("u-1"));
    }
}

#[cfg(test)]
mod sender_tests {
    use super::*;
    use HealthStatus::*;
    use axum::Router;
    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{StatusCode, Uri};
    use std::sync::{Arc, Mutex};
    use tokio::sync::Semaphore;

    /// An Events API that answers only when the test lets it: what it received, in order.
    struct SlowApi {
        received: Mutex<Vec<String>>,
        answers: Semaphore,
    }

    async fn create(State(api): State<Arc<SlowApi>>, uri: Uri, body: Bytes) -> (StatusCode, Bytes) {
        let event: Value = serde_json::from_slice(&body).unwrap_or_default();
        api.received.lock().unwrap().push(format!(
            "{} {}",
            uri.path(),
            event["note"].as_str().unwrap_or_default()
        ));
        api.answers.acquire().await.unwrap().forget();
        (StatusCode::CREATED, body)
    }

    async fn slow_api() -> (Arc<SlowApi>, kube::Client) {
        let api = Arc::new(SlowApi {
            received: Mutex::default(),
            answers: Semaphore::new(0),
        });
        let app = Router::new().fallback(create).with_state(api.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        (api, client)
    }

    fn gate(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("wavegate.dev/v1alpha1".into()),
            kind: Some("WaveGate".into()),
            namespace: Some("apps".into()),
            name: Some(name.into()),
            ..ObjectReference::default()
        }
    }

    async fn until(what: &str, f: impl Fn() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{what} did not happen within 5 s");
    }

    #[tokio::test]
    async fn recording_never_waits_for_the_api_and_events_arrive_in_order() {
        let (api, client) = slow_api().await;
        let publisher = Publisher::new(client);
        let notes = [
            "db Progressing",
            "db Healthy",
            "web Degraded",
            "db Degraded",
        ];
        for (i, note) in notes.iter().enumerate() {
            let t = transition(Some(Progressing), Degraded, note, false).unwrap();
            // Returns although the API has answered nothing yet (it would hang otherwise).
            publisher.publish(t, JUDGE_GATE, gate(if i == 2 { "web" } else { "db" }));
        }
        until("the first Event reaching the API", || {
            api.received.lock().unwrap().len() == 1
        })
        .await;
        // One at a time: the second is not sent while the first is unanswered.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(api.received.lock().unwrap().len(), 1);
        api.answers.add_permits(notes.len());
        until("every Event reaching the API", || {
            api.received.lock().unwrap().len() == notes.len()
        })
        .await;
        let received = api.received.lock().unwrap().clone();
        let expected: Vec<String> = notes
            .iter()
            .map(|n| format!("/apis/events.k8s.io/v1/namespaces/apps/events {n}"))
            .collect();
        assert_eq!(received, expected);
    }

    #[tokio::test]
    async fn a_full_backlog_drops_new_events_instead_of_waiting() {
        let (api, client) = slow_api().await;
        let publisher = Publisher::new(client);
        for i in 0..BACKLOG + 10 {
            let t = transition(Some(Progressing), Healthy, &format!("n{i}"), false).unwrap();
            publisher.publish(t, JUDGE_GATE, gate("db"));
        }
        until("the first Event reaching the API", || {
            !api.received.lock().unwrap().is_empty()
        })
        .await;
        api.answers.add_permits(2 * BACKLOG);
        // The one in flight plus a full backlog; the rest were dropped.
        until("the backlog draining", || {
            api.received.lock().unwrap().len() >= BACKLOG
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let received = api.received.lock().unwrap().len();
        assert!(
            (BACKLOG..=BACKLOG + 1).contains(&received),
            "{received} Events sent of {} recorded with a backlog of {BACKLOG}",
            BACKLOG + 10
        );
    }
}
