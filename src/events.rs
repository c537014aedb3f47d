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
//! ([`Publisher`]); one the API server refuses for a reason that may pass (429, 5xx, 403, no
//! answer) is retried with a bounded backoff, a bounded number of times, with a bounded number
//! held ([`RetryPolicy`]), each outcome counted in `wavegate_events_total{outcome}`.

use crate::health::HealthStatus;
use crate::json::At;
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

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
            .str_at(&format!("/metadata/{field}"))
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
/// many waiting, new ones are dropped and counted: an Event is a courtesy, the status is the
/// verdict.
const BACKLOG: usize = 1024;

/// How a refused Event is tried again: after `first`, doubling up to `last`, at most `attempts`
/// times more, with at most `backlog` Events held for a retry (beyond it a newly refused one is
/// given up). The default spans about two minutes: an API server restart, a priority-and-fairness
/// 429 burst or RBAC that is still being applied (the API server reads bindings through an
/// informer) all pass within it; an Events API that refuses for longer is down, and a later
/// transition says more than a stale one would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub last: Duration,
    pub attempts: u32,
    pub backlog: usize,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            first: Duration::from_secs(1),
            last: Duration::from_secs(30),
            attempts: 6,
            backlog: 256,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `n` (1-based).
    fn delay(&self, n: u32) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX));
        doubled.min(self.last)
    }
}

/// Sends transitions through kube-rs's event recorder, one at a time and in the order they
/// were recorded (so an object's Events never overtake each other, retries included), from a
/// task of its own. Events still waiting when wavegate stops are not sent.
#[derive(Clone)]
pub struct Publisher {
    queue: mpsc::Sender<Pending>,
    metrics: Arc<Metrics>,
}

struct Pending {
    transition: Transition,
    action: &'static str,
    regarding: ObjectReference,
}

impl Pending {
    /// The object the Event is about: Events of one object keep their order.
    fn object(&self) -> (Option<&str>, Option<&str>, Option<&str>) {
        let r = &self.regarding;
        (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref())
    }
}

/// A refused Event waiting for its next attempt.
struct Held {
    pending: Pending,
    retries: u32,
    due: Instant,
}

/// How long sending one Event may take before it is given up (best effort, like its errors),
/// so one stuck request does not hold every Event behind it.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(3);

impl Publisher {
    /// `reportingInstance` is the host name: the pod's name when wavegate runs in a pod. The
    /// sender runs until every clone of the publisher is dropped.
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> Publisher {
        Self::with_retry(client, metrics, RetryPolicy::default())
    }

    pub fn with_retry(
        client: kube::Client,
        metrics: Arc<Metrics>,
        retry: RetryPolicy,
    ) -> Publisher {
        let (queue, waiting) = mpsc::channel(BACKLOG);
        let sender = Sender {
            client,
            reporter: Reporter::from(REPORTER),
            retry,
            metrics: metrics.clone(),
            held: VecDeque::new(),
        };
        tokio::spawn(sender.run(waiting));
        Publisher { queue, metrics }
    }

    /// Best effort: an Event that cannot be sent (after its retries) is logged and counted,
    /// and the verdict stands.
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
            given_up(&self.metrics, &p, &why);
        }
    }
}

/// What became of one attempt to send an Event.
enum Sent {
    Yes,
    /// Refused for a reason that may pass (429, 5xx, 403 while RBAC is applied, no answer).
    Refused(String),
    /// Refused for a reason that will not pass (the Event itself is invalid).
    Rejected(String),
}

struct Sender {
    client: kube::Client,
    reporter: Reporter,
    retry: RetryPolicy,
    metrics: Arc<Metrics>,
    /// Refused Events, oldest first, with later Events of the same objects behind them.
    held: VecDeque<Held>,
}

impl Sender {
    async fn run(mut self, mut waiting: mpsc::Receiver<Pending>) {
        loop {
            let due = self.next_due();
            let next = tokio::select! {
                p = waiting.recv() => match p {
                    Some(p) => Some(p),
                    None => return,
                },
                () = sleep_until_or_forever(due) => None,
            };
            match next {
                // Behind an earlier Event of the same object that waits for its retry.
                Some(p) if self.holds(&p) => self.hold(p, 0, Instant::now()),
                Some(p) => self.attempt(p, 0).await,
                None => self.retry_due().await,
            }
        }
    }

    fn holds(&self, p: &Pending) -> bool {
        self.held.iter().any(|h| h.pending.object() == p.object())
    }

    /// When the first held Event that may go next (the oldest of its object) is due.
    fn next_due(&self) -> Option<Instant> {
        self.eligible().map(|i| self.held[i].due).min()
    }

    /// Indexes of held Events that are the oldest held of their object.
    fn eligible(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.held.len()).filter(|&i| {
            let object = self.held[i].pending.object();
            !self
                .held
                .iter()
                .take(i)
                .any(|h| h.pending.object() == object)
        })
    }

    async fn retry_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .eligible()
            .filter(|&i| self.held[i].due <= now)
            .collect();
        // Removed from the back first so the earlier indexes stay valid; sent oldest first.
        let mut taken: Vec<Held> = due
            .into_iter()
            .rev()
            .filter_map(|i| self.held.remove(i))
            .collect();
        taken.reverse();
        for h in taken {
            self.attempt(h.pending, h.retries).await;
        }
    }

    /// Send `p`; refused, hold it for retry number `retries + 1` if the policy allows.
    async fn attempt(&mut self, p: Pending, retries: u32) {
        match self.send(&p).await {
            Sent::Yes => self.metrics.record_event("sent"),
            Sent::Rejected(why) => given_up(&self.metrics, &p, &why),
            Sent::Refused(why) if retries >= self.retry.attempts => given_up(
                &self.metrics,
                &p,
                &format!("{why}; given up after {} attempts", retries + 1),
            ),
            Sent::Refused(why) => {
                let retry = retries + 1;
                let due = Instant::now() + self.retry.delay(retry);
                tracing::debug!(reason = p.transition.reason, error = %why, retry, "event refused; will retry");
                // Requeued at its place in its object's order: before its object's later
                // Events, which were held behind it.
                let at = self
                    .held
                    .iter()
                    .position(|h| h.pending.object() == p.object())
                    .unwrap_or(self.held.len());
                if self.insert(at, p, retry, due, &why) {
                    self.metrics.record_event("retried");
                }
            }
        }
    }

    fn hold(&mut self, p: Pending, retries: u32, due: Instant) {
        let at = self.held.len();
        self.insert(
            at,
            p,
            retries,
            due,
            "an earlier Event of the object waits for a retry",
        );
    }

    /// Hold `p` at `at`, unless the backlog is full (then it is given up): whether it is held.
    fn insert(&mut self, at: usize, p: Pending, retries: u32, due: Instant, why: &str) -> bool {
        if self.held.len() >= self.retry.backlog {
            given_up(
                &self.metrics,
                &p,
                &format!(
                    "{why}; {} Events already wait for a retry",
                    self.retry.backlog
                ),
            );
            return false;
        }
        self.held.insert(
            at,
            Held {
                pending: p,
                retries,
                due,
            },
        );
        true
    }

    async fn send(&self, p: &Pending) -> Sent {
        // A recorder per Event: kube-rs's recorder folds Events with the same reason on the
        // same object within 6 minutes into one series and keeps the first note, which would
        // show a second Degraded with the first one's message. Transitions are already
        // deduplicated (at most one per status write), so each gets its own Event with its
        // own message.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
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
        match tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&event, &p.regarding)).await {
            Ok(Ok(())) => Sent::Yes,
            Ok(Err(e)) if may_pass(&e) => Sent::Refused(e.to_string()),
            Ok(Err(e)) => Sent::Rejected(e.to_string()),
            Err(_) => Sent::Refused(format!("no answer within {PUBLISH_TIMEOUT:?}")),
        }
    }
}

async fn sleep_until_or_forever(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Whether a refusal may pass: the API server overloaded or restarting (429, 5xx, no answer),
/// or RBAC not applied yet (403). kube's client retries 429, 503 and 504 briefly by itself
/// (kube-client `client::retry::RetryPolicy`); this is what is left when that gave up. Anything else about the Event itself (400, 404 for a
/// namespace being deleted, 409, 422) would be refused again.
fn may_pass(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => matches!(status.code, 403 | 408 | 429) || status.code >= 500,
        _ => true,
    }
}

fn given_up(metrics: &Metrics, p: &Pending, error: &dyn std::fmt::Display) {
    metrics.record_event("dropped");
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
    use std::sync::Mutex;
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
        let publisher = Publisher::new(client, Arc::new(Metrics::default()));
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
        let publisher = Publisher::new(client, Arc::new(Metrics::default()));
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

    /// An Events API that refuses each Event the first `refusals` times it sees its note, with
    /// `status`, then accepts it: every attempt, in order.
    struct RefusingApi {
        attempts: Mutex<Vec<(String, u16)>>,
        refusals: usize,
        status: StatusCode,
    }

    async fn refuse(State(api): State<Arc<RefusingApi>>, body: Bytes) -> (StatusCode, Bytes) {
        let event: Value = serde_json::from_slice(&body).unwrap_or_default();
        let note = event["note"].as_str().unwrap_or_default().to_string();
        let mut attempts = api.attempts.lock().unwrap();
        let seen = attempts.iter().filter(|(n, _)| *n == note).count();
        let status = if seen < api.refusals {
            api.status
        } else {
            StatusCode::CREATED
        };
        attempts.push((note, status.as_u16()));
        let answer = if status == StatusCode::CREATED {
            body
        } else {
            // A metav1.Status, as the API server answers a refusal.
            Bytes::from(
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "message": "refused", "reason": "Refused",
                                   "code": status.as_u16()})
                .to_string(),
            )
        };
        (status, answer)
    }

    async fn refusing_api(refusals: usize, status: StatusCode) -> (Arc<RefusingApi>, kube::Client) {
        let api = Arc::new(RefusingApi {
            attempts: Mutex::default(),
            refusals,
            status,
        });
        let app = Router::new().fallback(refuse).with_state(api.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        (api, client)
    }

    fn quick() -> RetryPolicy {
        RetryPolicy {
            first: Duration::from_millis(20),
            last: Duration::from_millis(80),
            attempts: 4,
            backlog: 8,
        }
    }

    fn attempts(api: &RefusingApi) -> Vec<(String, u16)> {
        api.attempts.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn a_refused_event_is_retried_until_the_api_takes_it_and_counted() {
        // Forbidden: wavegate's RBAC for Events not applied yet (the API server reads bindings
        // through an informer). kube's client itself retries only 429, 503 and 504.
        let (api, client) = refusing_api(2, StatusCode::FORBIDDEN).await;
        let metrics = Arc::new(Metrics::default());
        let publisher = Publisher::with_retry(client, metrics.clone(), quick());
        let t = transition(Some(Progressing), Healthy, "db Healthy", false).unwrap();
        publisher.publish(t, JUDGE_GATE, gate("db"));
        // The API server records its 201 before the client has counted it: wait for both.
        until("the Event accepted and counted", || {
            attempts(&api).iter().any(|(_, s)| *s == 201) && metrics.events_with("sent") == 1
        })
        .await;
        let statuses: Vec<u16> = attempts(&api).iter().map(|(_, s)| *s).collect();
        assert_eq!(statuses, [403, 403, 201]);
        assert_eq!(
            (
                metrics.events_with("sent"),
                metrics.events_with("retried"),
                metrics.events_with("dropped")
            ),
            (1, 2, 0)
        );
        let text = metrics.encode();
        assert!(
            text.contains(r#"wavegate_events_total{outcome="retried"} 2"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_api_that_keeps_refusing_is_tried_a_bounded_number_of_times() {
        let (api, client) = refusing_api(usize::MAX, StatusCode::INTERNAL_SERVER_ERROR).await;
        let metrics = Arc::new(Metrics::default());
        let policy = quick();
        let publisher = Publisher::with_retry(client, metrics.clone(), policy);
        let t = transition(None, Degraded, "db Degraded", false).unwrap();
        publisher.publish(t, JUDGE_GATE, gate("db"));
        until("the Event given up", || metrics.events_with("dropped") == 1).await;
        // Given up after the first attempt and `attempts` retries; nothing after that.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(attempts(&api).len(), 1 + policy.attempts as usize);
        assert_eq!(metrics.events_with("retried"), u64::from(policy.attempts));
        assert_eq!(metrics.events_with("sent"), 0);
    }

    #[tokio::test]
    async fn an_invalid_event_is_not_retried() {
        let (api, client) = refusing_api(usize::MAX, StatusCode::UNPROCESSABLE_ENTITY).await;
        let metrics = Arc::new(Metrics::default());
        let publisher = Publisher::with_retry(client, metrics.clone(), quick());
        let t = transition(None, Degraded, "db Degraded", false).unwrap();
        publisher.publish(t, JUDGE_GATE, gate("db"));
        until("the Event given up", || metrics.events_with("dropped") == 1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(attempts(&api).len(), 1);
        assert_eq!(metrics.events_with("retried"), 0);
    }

    #[tokio::test]
    async fn a_retried_event_keeps_its_place_before_later_events_of_its_object() {
        // Every Event is refused once: db's second Event must not overtake its first, which
        // waits for a retry; web's Event does not wait for db's.
        let (api, client) = refusing_api(1, StatusCode::INTERNAL_SERVER_ERROR).await;
        let metrics = Arc::new(Metrics::default());
        let publisher = Publisher::with_retry(client, metrics.clone(), quick());
        for (name, note) in [("db", "db first"), ("db", "db second"), ("web", "web only")] {
            let t = transition(None, Progressing, note, false).unwrap();
            publisher.publish(t, JUDGE_GATE, gate(name));
        }
        until("every Event accepted", || metrics.events_with("sent") == 3).await;
        let accepted: Vec<String> = attempts(&api)
            .into_iter()
            .filter(|(_, s)| *s == 201)
            .map(|(n, _)| n)
            .collect();
        let at = |n: &str| accepted.iter().position(|a| a == n).unwrap();
        assert!(at("db first") < at("db second"), "{accepted:?}");
        // db second was held behind db first without being tried: refused once when it was.
        assert_eq!(metrics.events_with("dropped"), 0);
    }

    #[tokio::test]
    async fn the_retry_backlog_is_bounded() {
        let (api, client) = refusing_api(usize::MAX, StatusCode::FORBIDDEN).await;
        let metrics = Arc::new(Metrics::default());
        let policy = RetryPolicy {
            first: Duration::from_secs(60),
            last: Duration::from_secs(60),
            ..quick()
        };
        let publisher = Publisher::with_retry(client, metrics.clone(), policy);
        for i in 0..policy.backlog + 5 {
            let t = transition(None, Progressing, &format!("n{i}"), false).unwrap();
            publisher.publish(t, JUDGE_GATE, gate(&format!("g{i}")));
        }
        until("every Event tried once", || {
            attempts(&api).len() == policy.backlog + 5
        })
        .await;
        until("the overflow given up", || {
            metrics.events_with("dropped") == 5
        })
        .await;
        assert_eq!(metrics.events_with("retried") as usize, policy.backlog);
    }

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let p = RetryPolicy::default();
        let d: Vec<u64> = (1..=7).map(|n| p.delay(n).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(p.delay(200), p.last);
    }
}
