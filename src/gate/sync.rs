//! The Argo CD sync a gate belongs to: the Application that manages it (read as Argo CD reads
//! its tracking), the sync attempt that is applying it and when that attempt began, and whether
//! Argo CD deletes and recreates the gate in every sync (a hook). [`super::timeout`] dates the
//! gate's wait from these.

use super::crd::WaveGate;
use crate::app_status::App;
use crate::resource::{CheckKind, Target};
use crate::views::{INSTANCE_LABEL, ObjectId, TRACKING_ID, TrackingMethod, app_of_id};
use k8s_openapi::jiff::Timestamp;

/// The Argo CD Application that manages `gate`, as `(namespace, name)`, read the way Argo CD
/// reads it under `method` (argo-cd `util/argo/resource_tracking.go` `GetAppName`): the
/// tracking annotation `argocd.argoproj.io/tracking-id`
/// (`<app>:<group>/<kind>:<namespace>/<name>`, the default since 3.0), kept only when the rest
/// of the id names this gate (`controller/state.go` `isSelfReferencedObj`: an id copied from
/// another object does not make it managed); or, under label tracking only, the instance label
/// `app.kubernetes.io/instance`. Under annotation tracking the label decides nothing: Helm
/// charts set it on everything they render, so it could pick another Application, and with it
/// the wrong sync clock for the gate's timeout. An app name `<ns>_<name>` names an Application
/// outside Argo CD's own namespace ("apps in any namespace").
pub(crate) fn managing_application(
    gate: &WaveGate,
    argocd_namespace: &str,
    method: TrackingMethod,
) -> Option<(String, String)> {
    let meta = &gate.metadata;
    let app = match method {
        TrackingMethod::Label => meta.labels.as_ref()?.get(INSTANCE_LABEL)?.as_str(),
        TrackingMethod::Annotation | TrackingMethod::AnnotationAndLabel => {
            let this = ObjectId {
                group: "wavegate.dev",
                kind: "WaveGate",
                namespace: meta.namespace.as_deref().unwrap_or(""),
                name: meta.name.as_deref().unwrap_or(""),
            };
            app_of_id(meta.annotations.as_ref()?.get(TRACKING_ID)?, this)?
        }
    };
    let (ns, name) = match app.split_once('_') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (argocd_namespace.to_string(), app.to_string()),
    };
    (Target::new(CheckKind::APPLICATION, &ns, &name).is_ok()).then_some((ns, name))
}

/// Whether `app`'s `status.resources` lists the gate `namespace/name`: Argo CD's own record
/// that the Application manages it (it lists every object its manifests render, created or not
/// yet, from the comparison before a sync: argo-cd `controller/state.go` `CompareAppState`).
pub(crate) fn lists_gate(app: &App, namespace: &str, name: &str) -> bool {
    app.lists().resources.iter().any(|r| {
        r.group.as_deref() == Some("wavegate.dev")
            && r.kind.as_deref() == Some("WaveGate")
            && r.namespace.as_deref() == Some(namespace)
            && r.name.as_deref() == Some(name)
    })
}

/// One attempt of an Argo CD sync operation. Argo CD's automatic retry
/// (controller/appcontroller.go, `processRequestedAppOperation`) does not start a new
/// operation: a failed attempt puts the same operation back to `Running` with `finishedAt` set
/// and `retryCount` incremented, and when the backoff has passed it clears `finishedAt` and runs
/// again, keeping `startedAt`. So an attempt is identified by the Application's UID, the
/// operation's `startedAt` and its `retryCount`, and only the first attempt is dated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncAttempt {
    /// `uid@startedAt#retryCount`: a retry, a new operation or a recreated Application under
    /// the same name is another attempt.
    pub id: String,
    pub operation_started: Timestamp,
    pub retry_count: i64,
    /// `Running` with `finishedAt` set: the last attempt failed and Argo CD waits out the
    /// retry's backoff; no attempt is running, so nothing waits on the gate.
    pub between_attempts: bool,
}

/// The Application's sync attempt, if an operation is `Running`.
pub(crate) fn sync_attempt(app: &serde_json::Value) -> Option<SyncAttempt> {
    let op = &app["status"]["operationState"];
    if op["phase"].as_str() != Some("Running") {
        return None;
    }
    let operation_started: Timestamp = op["startedAt"].as_str()?.parse().ok()?;
    let retry_count = op["retryCount"].as_i64().unwrap_or(0);
    let uid = app["metadata"]["uid"].as_str().unwrap_or("");
    Some(SyncAttempt {
        id: format!("{uid}@{operation_started}#{retry_count}"),
        operation_started,
        retry_count,
        between_attempts: op["finishedAt"].as_str().is_some_and(|f| !f.is_empty()),
    })
}

/// When `attempt` began, for the gate's timeout. The first attempt began when the operation
/// did. Argo CD records no time for a retry, so a retry began when wavegate first saw it
/// running (`first_seen`): never earlier than it really began, so every attempt gets at least
/// its full timeout (a wavegate restart during a retry only lengthens the wait). Between
/// attempts, and for a retry not seen before, it begins `now`.
pub(crate) fn attempt_started(
    attempt: &SyncAttempt,
    first_seen: Option<Timestamp>,
    now: Timestamp,
) -> Timestamp {
    if attempt.retry_count <= 0 {
        return attempt.operation_started;
    }
    if attempt.between_attempts {
        return now;
    }
    first_seen.unwrap_or(now).max(attempt.operation_started)
}

/// The sync attempt of a gate's managing Application that was last seen running, and when it
/// was first seen: what dates a retry (see [`attempt_started`]). One per gate, in memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct AttemptClock(Option<(String, Timestamp)>);

impl AttemptClock {
    /// When the Application's current sync attempt began; `None` when no operation runs.
    pub(crate) fn started(&mut self, app: &serde_json::Value, now: Timestamp) -> Option<Timestamp> {
        let attempt = sync_attempt(app)?;
        let first_seen = if attempt.between_attempts {
            None
        } else {
            match &self.0 {
                Some((id, at)) if *id == attempt.id => Some(*at),
                _ => {
                    self.0 = Some((attempt.id.clone(), now));
                    Some(now)
                }
            }
        };
        Some(attempt_started(&attempt, first_seen, now))
    }
}

/// Whether Argo CD deletes the gate before it creates it again in the next sync: a sync hook
/// (`argocd.argoproj.io/hook`, not only `Skip`) whose effective deletion policy includes
/// `BeforeHookCreation`. The policies are the union of `argocd.argoproj.io/hook-delete-policy`
/// and `helm.sh/hook-delete-policy` (`before-hook-creation`), and `BeforeHookCreation` when
/// both are absent (gitops-engine `pkg/sync/hook/delete_policy.go`, `DeletePolicies`).
/// `HookSucceeded` alone is not enough: Argo CD deletes such hooks only when the whole
/// operation succeeds (gitops-engine `pkg/sync/sync_context.go`), so a gate that turned Healthy
/// in a sync that later failed or was terminated is still there, Healthy, for the next one.
///
/// Such a gate's verdict needs no expiry: no later sync can read it, and while this sync runs
/// it is the current verdict. So it carries no `validUntil` and a settled one is never
/// rewritten.
pub(crate) fn recreated_per_sync(gate: &WaveGate) -> bool {
    let annotations = gate.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let list = |k: &str| -> Vec<String> {
        get(k)
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()
    };
    let hooks = list("argocd.argoproj.io/hook");
    if hooks.is_empty() || hooks.iter().all(|h| h == "Skip") {
        return false;
    }
    let argocd = list("argocd.argoproj.io/hook-delete-policy");
    let helm = list("helm.sh/hook-delete-policy");
    if argocd.is_empty() && helm.is_empty() {
        return true;
    }
    argocd.iter().any(|p| p == "BeforeHookCreation")
        || helm.iter().any(|p| p == "before-hook-creation")
}
