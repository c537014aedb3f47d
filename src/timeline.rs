//! The last sync of an Application as a timeline: for each wave, when Argo CD applied it and when
//! it became truly healthy, and which wave holds the rollout and why.
//!
//! Only recorded times are used; a time nobody recorded is `null` with a note saying why, never
//! estimated. The sources:
//!
//! - **The sync**: `status.operationState` (`OperationState` in argo-cd
//!   pkg/apis/application/v1alpha1/types.go): `phase`, `startedAt`, `finishedAt`, `message`
//!   (while it runs, e.g. "waiting for healthy state of wavegate.dev/WaveGate/forgejo-ready") and
//!   `syncResult.resources[]`. Argo CD persists the operation state after each sync iteration
//!   (controller/appcontroller.go `processRequestedAppOperation` → `setOperationState`), so a
//!   resource is listed there once its wave has been applied.
//! - **Applied**: `ResourceResult` carries no time (group, version, kind, namespace, name, status,
//!   message, hookType, hookPhase, syncPhase, images). The time comes from the live object: Argo
//!   CD applies every resource with the field manager `argocd-controller` (argo-cd
//!   common/common.go `ArgoCDSSAManager`, passed by controller/sync.go
//!   `WithServerSideApplyManager` and used by gitops-engine pkg/utils/kube/resource_ops.go
//!   `newApplyOptionsCommon` for client-side apply too; k8s.io/kubectl pkg/cmd/apply/apply.go
//!   sends it on the create and the patch alike, `WithFieldManager(o.FieldManager)`), and the
//!   API server stamps that manager's `managedFields[].time` whenever its request changes the
//!   object (k8s.io/apimachinery pkg/util/managedfields/internal/managedfieldsupdater.go: `Update`
//!   only when the operation took fields, `Apply` only when the object changed). A stamp inside
//!   the sync window is when
//!   this sync applied the object; an older one means the sync's apply changed nothing
//!   ("unchanged"). Both clocks (the API server's, Argo CD's `startedAt`) have one-second
//!   resolution (`metav1.Time`).
//! - **Truly healthy**: a WaveGate records when it became Ready (`status.conditions[Ready]`
//!   `lastTransitionTime`, written by wavegate's controller, see `gate::crd`). wavegate keeps no
//!   history for other objects (a Service's verdict is computed on request), so their healthy time
//!   is unknown and said to be; a wave's healthy time is known only when every resource in it has
//!   one.

use crate::app_status::{App, ResourceResult, text};
use crate::cache::{ARGOCD_MANAGER, Cache, CacheError};
use crate::hashing::FastMap;
use crate::health::HealthStatus;
use crate::json::At;
use crate::policy::CheckPolicy;
use crate::resource::{GroupResource, ResourceRef};
use crate::waves::{JudgedBy, JudgedResource, Wave, Waves};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// An Application's resources by sync wave, each judged truthfully, with the timeline of the
/// last sync: what the per-application waves endpoints answer (the fields of the waves view plus
/// `timeline`, so older clients read it unchanged).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Waves")]
pub(crate) struct WavesWithTimeline<R = JudgedResource, T = ResourceTimes> {
    #[serde(flatten)]
    pub waves: Waves<R>,
    pub timeline: Timeline<T>,
}

impl WavesWithTimeline {
    pub(crate) fn new(waves: Waves, timeline: Timeline) -> Self {
        WavesWithTimeline { waves, timeline }
    }
}

/// What wavegate read from one live object for the timeline.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Live {
    /// The `time` of Argo CD's managedFields entry: when Argo CD last changed the object.
    pub argocd_changed_at: Option<Timestamp>,
    /// When the object became truly healthy, where that is recorded (WaveGates).
    pub healthy_since: Option<Timestamp>,
    /// Why the object's metadata could not be read, if it could not.
    pub unread: Option<String>,
}

/// The last sync per wave, from recorded times only (docs/contracts.md, "Wave timeline"):
/// applied = the live object's managedFields time of Argo CD's field manager `argocd-controller`
/// within the sync; healthy = a WaveGate's Ready transition. Times are RFC 3339 with one-second
/// resolution; an unrecorded time is null and the note says why.
#[derive(Debug, Clone, Serialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WaveTimeline")]
pub(crate) struct Timeline<T = ResourceTimes> {
    /// The sync `status.operationState` describes; `None` when Argo CD recorded none.
    pub sync: Option<SyncWindow>,
    /// When wavegate built this timeline: the right edge of a sync still running.
    #[schemars(extend("format" = "date-time"))]
    pub now: String,
    pub waves: Vec<WaveTimes<T>>,
    /// The first wave that is not truly healthy (the waves view's `blockingWave`).
    pub blocking_wave: Option<i64>,
    pub blocking_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SyncWindow {
    /// `Running`, `Succeeded`, `Failed`, `Error` or `Terminating` (gitops-engine OperationPhase).
    pub phase: String,
    #[schemars(extend("format" = "date-time"))]
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Argo CD's own message, e.g. what it is waiting for.
    pub message: String,
}

/// Whether and when a wave (or resource) was applied by the last sync.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Applied")]
pub(crate) enum ApplyState {
    /// Argo CD's apply failed (`ResourceResult.status` `SyncFailed`); first, so a wave with any
    /// failure shows it (its `appliedAt` still dates the resources that were applied).
    Failed,
    /// Changed by this sync at `at`.
    Applied,
    /// Not in the sync's results yet while it runs: Argo CD has not reached this wave.
    Pending,
    /// In the sync's results, but no time can be read (see the note).
    Unknown,
    /// In the sync's results, but Argo CD's apply changed nothing.
    Unchanged,
    /// Not applied by the sync: absent from the results of a sync that has ended, or pruned
    /// (`Pruned`, `PruneSkipped`).
    NotInSync,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum HealthState {
    /// Truly healthy since `at`.
    Healthy,
    /// Truly healthy now, with no recorded time.
    TimeUnknown,
    /// Not truly healthy now.
    NotHealthy,
}

#[derive(Debug, Clone, Serialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WaveTimes")]
pub(crate) struct WaveTimes<T = ResourceTimes> {
    pub wave: i64,
    pub status: HealthStatus,
    pub applied: ApplyState,
    #[schemars(extend("format" = "date-time"))]
    pub applied_at: Option<String>,
    pub applied_note: String,
    pub healthy: HealthState,
    #[schemars(extend("format" = "date-time"))]
    pub healthy_at: Option<String>,
    pub healthy_note: String,
    pub blocking: bool,
    /// For the blocking wave: what is not truly healthy in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub resources: Vec<T>,
}

#[derive(Debug, Clone, Serialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceTimes {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub status: HealthStatus,
    /// Argo CD's `ResourceResult.status` in the last sync (`Synced`, `SyncFailed`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_result: Option<String>,
    pub applied: ApplyState,
    #[schemars(extend("format" = "date-time"))]
    pub applied_at: Option<String>,
    #[schemars(extend("format" = "date-time"))]
    pub healthy_at: Option<String>,
}

/// RFC 3339 in whole seconds, as `metav1.Time` writes it.
pub(crate) fn rfc3339(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

fn time_at(v: &Value, pointer: &str) -> Option<Timestamp> {
    v.str_at(pointer)?.parse().ok()
}

/// When Argo CD last changed this object: the latest `time` of its `argocd-controller`
/// managedFields entries (one per operation, Apply and Update).
pub(crate) fn argocd_changed_at(object: &Value) -> Option<Timestamp> {
    object
        .array_at("/metadata/managedFields")?
        .iter()
        .filter(|f| f.get("manager").and_then(Value::as_str) == Some(ARGOCD_MANAGER))
        .filter_map(|f| time_at(f, "/time"))
        .max()
}

/// When a WaveGate last turned Ready=True, if it is Ready now.
pub(crate) fn gate_ready_since(gate: &Value) -> Option<Timestamp> {
    gate.array_at("/status/conditions")?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        .and_then(|c| time_at(c, "/lastTransitionTime"))
}

/// Group, kind, namespace, name: how a sync result names its resource.
type ResultKey<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The non-hook `syncResult.resources[]` entries by the resource they are about, so that each
/// resource of the view finds its result in constant time (an Application of 2,000 resources
/// would otherwise scan 2,000 results 2,000 times). The first entry for a resource wins, as a
/// scan in order would find it.
fn sync_results(results: &[ResourceResult]) -> FastMap<ResultKey<'_>, &ResourceResult> {
    let mut out = FastMap::with_capacity_and_hasher(results.len(), Default::default());
    for x in results.iter().filter(|x| text(&x.hook_type).is_empty()) {
        let key = (
            text(&x.group),
            text(&x.kind),
            text(&x.namespace),
            text(&x.name),
        );
        out.entry(key).or_insert(x);
    }
    out
}

fn sync_window(app: &Value) -> Option<(SyncWindow, Timestamp, Option<Timestamp>)> {
    let op = app.pointer("/status/operationState")?;
    let started = time_at(op, "/startedAt")?;
    let finished = time_at(op, "/finishedAt");
    let s = |p: &str| op.str_at(p).map(str::to_string);
    Some((
        SyncWindow {
            phase: s("/phase").unwrap_or_default(),
            started_at: rfc3339(started),
            finished_at: finished.map(rfc3339),
            revision: s("/syncResult/revision").filter(|r| !r.is_empty()),
            message: s("/message").unwrap_or_default(),
        },
        started,
        finished,
    ))
}

/// The last sync as `status.operationState` records it: its window and its results.
pub(crate) struct LastSync<'a> {
    window: Option<(SyncWindow, Timestamp, Option<Timestamp>)>,
    results: FastMap<ResultKey<'a>, &'a ResourceResult>,
    running: bool,
}

impl<'a> LastSync<'a> {
    pub(crate) fn of(app: &'a App) -> LastSync<'a> {
        let window = sync_window(app);
        let results = sync_results(&app.lists().results);
        let running = window.as_ref().is_some_and(|(w, ..)| w.phase == "Running");
        LastSync {
            window,
            results,
            running,
        }
    }

    /// What a resource's times depend on of the sync as a whole: whether there is one, when
    /// it started, whether it runs.
    pub(crate) fn window_key(&self) -> Option<(Timestamp, bool)> {
        self.window
            .as_ref()
            .map(|(_, started, _)| (*started, self.running))
    }

    /// `r`'s result in the sync, if any, with its status, if it has one.
    pub(crate) fn result_of(&self, r: &ResourceRef) -> Option<Option<&'a str>> {
        let key = (
            r.group.as_str(),
            r.kind.as_str(),
            r.namespace.as_str(),
            r.name.as_str(),
        );
        let x = self.results.get(&key)?;
        Some(x.status.as_deref())
    }
}

/// One resource's times in the last sync, and what its wave's notes say of it.
#[derive(Debug, Clone)]
pub(crate) struct Timed {
    pub times: ResourceTimes,
    /// Why its applied time is unknown, when it is.
    note: Option<String>,
    /// `<Kind> <name>`: how a wave's notes name it.
    label: String,
}

/// The times of `j` in `sync`, from what was read of its live object (`facts`).
pub(crate) fn time_one(sync: &LastSync<'_>, j: &JudgedResource, facts: &Live) -> Timed {
    let r = &j.resource;
    let label = format!("{} {}", r.kind, r.name);
    let result = sync.result_of(r);
    let mut note = None;
    let (applied, applied_at) = match (&sync.window, result) {
        (None, _) => (ApplyState::Unknown, None),
        (Some(_), None) if sync.running => (ApplyState::Pending, None),
        (Some(_), None) => (ApplyState::NotInSync, None),
        // gitops-engine pkg/sync/common/types.go ResultCode.
        (Some(_), Some(Some("SyncFailed"))) => (ApplyState::Failed, None),
        (Some(_), Some(Some("Pruned" | "PruneSkipped"))) => (ApplyState::NotInSync, None),
        (Some((_, started, _)), Some(_)) => match facts.argocd_changed_at {
            Some(t) if t >= *started => (ApplyState::Applied, Some(t)),
            Some(_) => (ApplyState::Unchanged, None),
            None => {
                note = Some(match &facts.unread {
                    Some(why) => format!("{label}: {why}"),
                    None => format!("{label} has no managedFields entry of {ARGOCD_MANAGER}"),
                });
                (ApplyState::Unknown, None)
            }
        },
    };
    let healthy_at = if j.status == HealthStatus::Healthy {
        facts.healthy_since
    } else {
        None
    };
    Timed {
        times: ResourceTimes {
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            status: j.status,
            sync_result: result.flatten().map(str::to_string),
            applied,
            applied_at: applied_at.map(rfc3339),
            healthy_at: healthy_at.map(rfc3339),
        },
        note,
        label,
    }
}

/// One wave of the timeline, from its resources as judged and timed (each with what it
/// serialises as, `T`), in the order the waves view lists them.
fn wave_times<T>(
    sync: &LastSync<'_>,
    wave: i64,
    status: HealthStatus,
    blocking: bool,
    members: Vec<(&JudgedResource, &Timed, T)>,
) -> WaveTimes<T> {
    let mut notes: Vec<&str> = Vec::new();
    let mut failed: Vec<&str> = Vec::new();
    let mut untimed_healthy: Vec<&str> = Vec::new();
    for (j, t, _) in &members {
        notes.extend(t.note.as_deref());
        if t.times.applied == ApplyState::Failed {
            failed.push(&t.label);
        }
        if j.status == HealthStatus::Healthy && t.times.healthy_at.is_none() {
            untimed_healthy.push(&t.label);
        }
    }
    // A wave counts as applied when Argo CD changed any of it in this sync (it applies a
    // wave's resources together); otherwise the most informative state of its resources.
    let first_applied = members
        .iter()
        .filter_map(|(_, t, _)| t.times.applied_at.as_ref())
        .min()
        .cloned();
    let applied = members
        .iter()
        .map(|(_, t, _)| t.times.applied)
        .min()
        .unwrap_or(ApplyState::Unknown);
    let applied_note = match (&sync.window, applied) {
        (None, _) => "Argo CD has recorded no sync operation".to_string(),
        (_, ApplyState::Failed) => format!(
            "Argo CD's apply failed (SyncFailed) for {}",
            failed.join(", ")
        ),
        (_, ApplyState::Applied) => {
            format!("Argo CD ({ARGOCD_MANAGER}) changed it at this time (managedFields)")
        }
        (_, ApplyState::Pending) => "not applied yet: the sync has not reached this wave".into(),
        (_, ApplyState::Unknown) => notes.join("; "),
        (_, ApplyState::Unchanged) => {
            "applied by the sync without changes (no new managedFields time)".into()
        }
        (_, ApplyState::NotInSync) => "not applied by the last sync".into(),
    };
    let (healthy, healthy_at, healthy_note) = if status != HealthStatus::Healthy {
        (HealthState::NotHealthy, None, format!("{status}"))
    } else if untimed_healthy.is_empty() {
        let at = members
            .iter()
            .filter_map(|(_, t, _)| t.times.healthy_at.as_ref())
            .max()
            .cloned();
        (
            HealthState::Healthy,
            at,
            "WaveGate Ready condition lastTransitionTime".into(),
        )
    } else {
        (
            HealthState::TimeUnknown,
            None,
            format!(
                "truly healthy now; wavegate records no transition time for {}",
                untimed_healthy.join(", ")
            ),
        )
    };
    let reason = blocking.then(|| {
        members
            .iter()
            .map(|(j, ..)| j)
            .filter(|r| r.status != HealthStatus::Healthy)
            .map(|r| {
                format!(
                    "{} {}/{} is {}: {}",
                    r.resource.kind, r.resource.namespace, r.resource.name, r.status, r.message
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    });
    WaveTimes {
        wave,
        status,
        applied,
        applied_at: first_applied,
        applied_note,
        healthy,
        healthy_at,
        healthy_note,
        blocking,
        reason,
        resources: members.into_iter().map(|(.., t)| t).collect(),
    }
}

/// The timeline of `waves`, whose rows `R` each hold a resource judged and timed (`row`
/// says where, and what the row serialises as in the timeline), at `now`.
pub(crate) fn assemble_by<'r, R: 'r, T>(
    sync: &LastSync<'_>,
    (waves, blocking_wave): (&'r [Wave<R>], Option<i64>),
    row: impl Fn(&'r R) -> (&'r JudgedResource, &'r Timed, T),
    now: Timestamp,
) -> Timeline<T> {
    let out: Vec<WaveTimes<T>> = waves
        .iter()
        .map(|wave| {
            let blocking = blocking_wave == Some(wave.wave);
            let members = wave.resources.iter().map(&row).collect();
            wave_times(sync, wave.wave, wave.status, blocking, members)
        })
        .collect();
    let blocking_reason = out.iter().find_map(|w| w.reason.clone());
    Timeline {
        sync: sync.window.as_ref().map(|(w, ..)| w.clone()),
        now: rfc3339(now),
        waves: out,
        blocking_wave,
        blocking_reason,
    }
}

/// Build the timeline from the Application, its judged waves and what was read from each live
/// object (`live`), at `now`. Pure: the clock and the cluster are inputs.
pub(crate) fn build(
    app: &App,
    waves: &Waves,
    live: impl Fn(&ResourceRef) -> Live,
    now: Timestamp,
) -> Timeline {
    let sync = LastSync::of(app);
    let timed: Vec<Vec<Timed>> = waves
        .waves
        .iter()
        .map(|w| {
            (w.resources.iter())
                .map(|j| time_one(&sync, j, &live(&j.resource)))
                .collect()
        })
        .collect();
    // Each wave's rows beside their times, found by position.
    let rows: Vec<Wave<(&JudgedResource, &Timed)>> = (waves.waves.iter().zip(&timed))
        .map(|(w, t)| Wave {
            wave: w.wave,
            status: w.status,
            resources: w.resources.iter().zip(t).collect(),
        })
        .collect();
    let rows = (rows.as_slice(), waves.blocking_wave);
    assemble_by(&sync, rows, |&(j, t)| (j, t, t.times.clone()), now)
}

/// The timeline of `app`'s last sync, with its live objects read from the cache.
pub(crate) async fn of(
    cache: &Cache,
    policy: &CheckPolicy,
    app: &App,
    waves: &Waves,
    now: Timestamp,
) -> Timeline {
    let live: HashMap<ResourceRef, Live> = gather(cache, policy, waves).await.into_iter().collect();
    let find = |r: &ResourceRef| live.get(r).cloned().unwrap_or_default();
    build(app, waves, find, now)
}

/// Live objects read at once for one timeline. Reads are of the watch cache (memory), except
/// the first read of a kind whose watch is still listing, which waits for that list: reads of
/// one kind share that wait, reads of several kinds overlap theirs.
pub(crate) const READS_AT_ONCE: usize = 32;

/// Read, for each resource of the view, what the timeline needs from its live object. Only
/// objects wavegate already read to judge them are looked up again (same watches, no new kinds):
/// a resource judged by Argo CD's recorded health stays unread. All reads together wait at most
/// `--sync-wait` for watches that are still listing — never that wait once per resource.
pub(crate) async fn gather(
    cache: &Cache,
    policy: &CheckPolicy,
    waves: &Waves,
) -> Vec<(ResourceRef, Live)> {
    let judged: Vec<&JudgedResource> = waves.waves.iter().flat_map(|w| &w.resources).collect();
    let read = read_each(cache, policy, &judged).await;
    (judged.iter().zip(read))
        .map(|(j, (live, _))| (j.resource.clone(), live))
        .collect()
}

/// [`gather`] for each of `judged`, and whether what was read may be kept as long as the
/// object's mark holds (`false`: a read that failed or waited too long, which may pass with
/// time alone).
pub(crate) async fn read_each(
    cache: &Cache,
    policy: &CheckPolicy,
    judged: &[&JudgedResource],
) -> Vec<(Live, bool)> {
    let deadline = tokio::time::Instant::now() + cache.sync_wait();
    let reads: Vec<_> = judged
        .iter()
        .map(|j| {
            let read = matches!(
                j.judged_by,
                JudgedBy::Wavegate | JudgedBy::Kstatus | JudgedBy::ArgocdLua(_)
            )
            .then(|| read(cache, policy, &j.resource));
            let unread = match j.judged_by {
                JudgedBy::OutOfScope => "not read: the application lists it but does not manage it",
                _ => "wavegate does not watch this kind (Argo CD's health was used)",
            };
            // Boxed, like the judgements (waves::view_in): moved as pointers, not as state.
            Box::pin(live_of(&j.resource, read, unread, deadline))
        })
        .collect();
    futures::stream::iter(reads)
        .buffered(READS_AT_ONCE)
        .collect()
        .await
}

/// What one read found, given up at `deadline`; `None`: not read (judged by Argo CD). And
/// whether it is what the object says (see [`read_each`]).
async fn live_of<Fut>(
    r: &ResourceRef,
    read: Option<Fut>,
    unread: &str,
    deadline: tokio::time::Instant,
) -> (Live, bool)
where
    Fut: std::future::Future<Output = Result<Option<Arc<Value>>, CacheError>>,
{
    let mut sound = true;
    let live = match read {
        None => Live {
            unread: Some(unread.into()),
            ..Live::default()
        },
        Some(read) => match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(Some(object))) => Live {
                argocd_changed_at: argocd_changed_at(&object),
                healthy_since: (r.group == "wavegate.dev" && r.kind == "WaveGate")
                    .then(|| gate_ready_since(&object))
                    .flatten(),
                unread: None,
            },
            Ok(Ok(None)) => Live {
                unread: Some("does not exist".into()),
                ..Live::default()
            },
            Ok(Err(e)) => {
                sound = false;
                Live {
                    unread: Some(e.to_string()),
                    ..Live::default()
                }
            }
            Err(_) => {
                sound = false;
                Live {
                    unread: Some("not read within --sync-wait (its watch is still listing)".into()),
                    ..Live::default()
                }
            }
        },
    };
    (live, sound)
}

/// The metadata the timeline reads, from a compact view's record of Argo CD's latest change.
fn changed_at_only(at: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Value {
    let entries: Vec<Value> = at
        .iter()
        .map(|t| serde_json::json!({"manager": ARGOCD_MANAGER, "time": t}))
        .collect();
    serde_json::json!({ "metadata": { "managedFields": entries } })
}

async fn read(
    cache: &Cache,
    policy: &CheckPolicy,
    r: &ResourceRef,
) -> Result<Option<Arc<Value>>, CacheError> {
    if r.group.is_empty() && r.kind == "Service" {
        // The cache keeps of a Service only Argo CD's latest change, which is all read here.
        let svc = cache.service(&r.namespace, &r.name).await?;
        return Ok(svc.map(|s| Arc::new(changed_at_only(s.argocd_changed_at.as_ref()))));
    }
    if r.group.is_empty() && r.kind == "Pod" {
        // Likewise a bare Pod that Argo CD applied: its compact view keeps that time.
        let pod = cache.pod(&r.namespace, &r.name).await?;
        return Ok(pod.map(|p| {
            Arc::new(changed_at_only(
                p.argocd.as_ref().and_then(|a| a.changed_at.as_ref()),
            ))
        }));
    }
    let plural = cache.plural_of(&r.group, &r.kind).await?;
    // Only kinds the waves view may judge (see `waves::judge_kind`).
    let generic = crate::resource::CheckKind::Generic {
        group: r.group.clone(),
        plural: plural.clone(),
    };
    if crate::resource::CheckKind::dedicated(&r.group, &r.kind).is_none() {
        policy
            .allows_kind(&generic)
            .map_err(|e| CacheError::NotAllowed(e.to_string()))?;
    }
    cache
        .object(
            &GroupResource::new(&r.group, &plural),
            &r.namespace,
            &r.name,
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Verdict;
    use crate::waves::{JudgedResource, assemble};
    use serde_json::json;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn judged(group: &str, kind: &str, name: &str, status: HealthStatus) -> JudgedResource {
        let resource = ResourceRef {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: "cicd".into(),
            name: name.into(),
        };
        let message = if status == HealthStatus::Healthy {
            ""
        } else {
            "selector app=forgejo matches no pods; did you mean app=gitea"
        };
        JudgedResource::new(resource, Verdict::new(status, message), JudgedBy::Wavegate)
    }

    /// Every field name of `v` as a path (`waves[].resources[].judgedBy`).
    fn field_names(v: &Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let path = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    field_names(v, &path, out);
                    out.insert(path);
                }
            }
            Value::Array(items) => {
                for v in items {
                    field_names(v, &format!("{at}[]"), out);
                }
            }
            _ => {}
        }
    }

    /// The names the dashboard, the UI extension and API clients read, every optional one
    /// present: a struct's serde attributes may change (one `rename_all` instead of a rename per
    /// field), the names on the wire may not.
    #[test]
    fn the_waves_view_keeps_its_wire_names() {
        let mut view = waves(HealthStatus::Progressing);
        view.lint = Some(crate::live_lint::LiveLint {
            findings: vec![crate::live_lint::LiveFinding {
                rule: crate::lint::rules::Rule::NotAwaited,
                level: "error",
                wave: Some(1),
                message: "m".into(),
                why: "w".into(),
                fix: "f".into(),
                objects: vec![crate::live_lint::LiveObject {
                    object: "Service cicd/forgejo".into(),
                    wave: Some(1),
                }],
            }],
            note: Some("n".into()),
            skipped: Some("lint skipped: busy".into()),
            passing: false,
        });
        let argo = crate::argocd_lua::ArgoHealth {
            status: "Degraded".into(),
            message: "m".into(),
        };
        view.health.argo_status = Some(argo.clone());
        view.waves[0].resources[0].argo_status = Some(argo);
        let mut timeline = build(&mid_sync(), &view, live, t("2026-12-01T03:02:00Z"));
        let sync = timeline.sync.as_mut().unwrap();
        sync.finished_at = Some("2026-12-01T03:03:00Z".into());
        let answer = WavesWithTimeline::new(view, timeline);
        let mut names = std::collections::BTreeSet::new();
        field_names(&serde_json::to_value(&answer).unwrap(), "", &mut names);
        let wanted = [
            "namespace",
            "name",
            "health",
            "health.status",
            "health.message",
            "health.argoStatus",
            "health.argoStatus.status",
            "health.argoStatus.message",
            "blockingWave",
            "message",
            "waves",
            "waves[].wave",
            "waves[].status",
            "waves[].resources",
            "waves[].resources[].group",
            "waves[].resources[].version",
            "waves[].resources[].kind",
            "waves[].resources[].namespace",
            "waves[].resources[].name",
            "waves[].resources[].status",
            "waves[].resources[].message",
            "waves[].resources[].judgedBy",
            "waves[].resources[].argoStatus",
            "waves[].resources[].argoStatus.status",
            "waves[].resources[].argoStatus.message",
            "lint",
            "lint.findings",
            "lint.findings[].rule",
            "lint.findings[].level",
            "lint.findings[].wave",
            "lint.findings[].message",
            "lint.findings[].why",
            "lint.findings[].fix",
            "lint.findings[].objects",
            "lint.findings[].objects[].object",
            "lint.findings[].objects[].wave",
            "lint.note",
            "lint.skipped",
            "timeline",
            "timeline.sync",
            "timeline.sync.phase",
            "timeline.sync.startedAt",
            "timeline.sync.finishedAt",
            "timeline.sync.revision",
            "timeline.sync.message",
            "timeline.now",
            "timeline.blockingWave",
            "timeline.blockingReason",
            "timeline.waves",
            "timeline.waves[].wave",
            "timeline.waves[].status",
            "timeline.waves[].applied",
            "timeline.waves[].appliedAt",
            "timeline.waves[].appliedNote",
            "timeline.waves[].healthy",
            "timeline.waves[].healthyAt",
            "timeline.waves[].healthyNote",
            "timeline.waves[].blocking",
            "timeline.waves[].reason",
            "timeline.waves[].resources",
            "timeline.waves[].resources[].kind",
            "timeline.waves[].resources[].namespace",
            "timeline.waves[].resources[].name",
            "timeline.waves[].resources[].status",
            "timeline.waves[].resources[].syncResult",
            "timeline.waves[].resources[].applied",
            "timeline.waves[].resources[].appliedAt",
            "timeline.waves[].resources[].healthyAt",
        ];
        let wanted: std::collections::BTreeSet<String> =
            wanted.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            names.difference(&wanted).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "names the view sends that it did not"
        );
        assert_eq!(
            wanted.difference(&names).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "names the view no longer sends"
        );
    }

    fn result(group: &str, kind: &str, name: &str) -> Value {
        json!({"group": group, "version": "v1", "kind": kind, "namespace": "cicd", "name": name,
               "status": "Synced", "message": format!("{kind} {name} created"), "syncPhase": "Sync"})
    }

    /// [`super::build`] of an Application's whole JSON, as the tests edit it.
    fn build(
        app: &Value,
        waves: &Waves,
        live: impl Fn(&ResourceRef) -> Live,
        now: Timestamp,
    ) -> Timeline {
        super::build(&App::of(app.clone()), waves, live, now)
    }

    /// Argo CD mid-sync: waves 0 and 1 applied, waiting on the gate in wave 2, wave 3 not reached.
    fn mid_sync() -> Value {
        json!({"metadata": {"namespace": "argocd", "name": "platform"},
        "status": {"operationState": {
            "phase": "Running",
            "message": "waiting for healthy state of wavegate.dev/WaveGate/forgejo-ready",
            "startedAt": "2026-12-01T03:00:00Z",
            "syncResult": {"revision": "4f2a9c1", "resources": [
                result("", "ConfigMap", "settings"),
                result("", "Service", "forgejo"),
                result("wavegate.dev", "WaveGate", "forgejo-ready"),
                {"kind": "Job", "name": "forgejo-ready", "namespace": "cicd", "hookType": "PreSync", "hookPhase": "Succeeded"}
            ]}}}})
    }

    fn waves(service: HealthStatus) -> Waves {
        assemble(
            "argocd",
            "platform",
            Verdict::progressing("sync running"),
            vec![
                (
                    3,
                    judged(
                        "postgresql.cnpg.io",
                        "Database",
                        "forgejo",
                        HealthStatus::Missing,
                    ),
                ),
                (
                    0,
                    judged("", "ConfigMap", "settings", HealthStatus::Healthy),
                ),
                (1, judged("", "Service", "forgejo", service)),
                (
                    2,
                    judged("wavegate.dev", "WaveGate", "forgejo-ready", service),
                ),
            ],
        )
    }

    fn live(r: &ResourceRef) -> Live {
        let at = |s: &str| Some(t(s));
        match r.name.as_str() {
            // Unchanged by this sync: Argo CD last changed it yesterday.
            "settings" => Live {
                argocd_changed_at: at("2026-11-30T10:00:00Z"),
                ..Live::default()
            },
            "forgejo" if r.kind == "Service" => Live {
                argocd_changed_at: at("2026-12-01T03:00:02Z"),
                ..Live::default()
            },
            "forgejo-ready" => Live {
                argocd_changed_at: at("2026-12-01T03:00:05Z"),
                healthy_since: at("2026-12-01T03:01:30Z"),
                unread: None,
            },
            _ => Live {
                unread: Some("does not exist".into()),
                ..Live::default()
            },
        }
    }

    #[test]
    fn mid_sync_waves_are_in_order_with_applied_times_from_argocd_managed_fields() {
        let now = t("2026-12-01T03:02:00Z");
        let tl = build(&mid_sync(), &waves(HealthStatus::Progressing), live, now);
        let sync = tl.sync.as_ref().unwrap();
        assert_eq!(sync.phase, "Running");
        assert_eq!(sync.started_at, "2026-12-01T03:00:00Z");
        assert_eq!(sync.revision.as_deref(), Some("4f2a9c1"));
        assert_eq!(tl.now, "2026-12-01T03:02:00Z");
        assert_eq!(
            tl.waves.iter().map(|w| w.wave).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        let applied: Vec<_> = tl
            .waves
            .iter()
            .map(|w| (w.applied, w.applied_at.as_deref()))
            .collect();
        assert_eq!(
            applied,
            [
                (ApplyState::Unchanged, None),
                (ApplyState::Applied, Some("2026-12-01T03:00:02Z")),
                (ApplyState::Applied, Some("2026-12-01T03:00:05Z")),
                (ApplyState::Pending, None),
            ]
        );
        // The hook Job with the gate's name is not taken for the gate's result.
        assert_eq!(
            tl.waves[2].resources[0].sync_result.as_deref(),
            Some("Synced")
        );
    }

    #[test]
    fn blocking_wave_carries_its_reason_and_no_healthy_time() {
        let tl = build(
            &mid_sync(),
            &waves(HealthStatus::Progressing),
            live,
            t("2026-12-01T03:02:00Z"),
        );
        assert_eq!(tl.blocking_wave, Some(1));
        let w1 = &tl.waves[1];
        assert!(w1.blocking);
        assert_eq!(w1.healthy, HealthState::NotHealthy);
        assert_eq!(w1.healthy_at, None);
        let reason = w1.reason.as_deref().unwrap();
        assert!(reason.contains("Service cicd/forgejo is Progressing: selector app=forgejo"));
        assert_eq!(tl.blocking_reason.as_deref(), Some(reason));
        assert!(tl.waves.iter().filter(|w| w.blocking).count() == 1);
        // A WaveGate that is not Healthy now has no healthy time, whatever its condition said.
        assert_eq!(tl.waves[2].healthy_at, None);
    }

    #[test]
    fn a_gate_wave_is_healthy_at_its_ready_transition_and_other_kinds_have_no_invented_time() {
        let tl = build(
            &mid_sync(),
            &waves(HealthStatus::Healthy),
            live,
            t("2026-12-01T03:02:00Z"),
        );
        assert_eq!(tl.blocking_wave, Some(3));
        assert_eq!(tl.waves[2].healthy, HealthState::Healthy);
        assert_eq!(
            tl.waves[2].healthy_at.as_deref(),
            Some("2026-12-01T03:01:30Z")
        );
        // The Service is truly healthy, but wavegate recorded no time for it.
        assert_eq!(tl.waves[1].healthy, HealthState::TimeUnknown);
        assert_eq!(tl.waves[1].healthy_at, None);
        assert!(tl.waves[1].healthy_note.contains("Service forgejo"));
    }

    #[test]
    fn without_an_operation_state_nothing_is_timed() {
        let app = json!({"status": {}});
        let tl = build(
            &app,
            &waves(HealthStatus::Healthy),
            live,
            t("2026-12-01T03:02:00Z"),
        );
        assert_eq!(tl.sync, None);
        assert!(
            tl.waves
                .iter()
                .all(|w| w.applied == ApplyState::Unknown && w.applied_at.is_none())
        );
        assert!(tl.waves[0].applied_note.contains("no sync operation"));
    }

    #[test]
    fn after_the_sync_ended_an_unreached_wave_is_not_pending_and_unread_objects_say_why() {
        let mut app = mid_sync();
        app["status"]["operationState"]["phase"] = json!("Failed");
        app["status"]["operationState"]["finishedAt"] = json!("2026-12-01T03:05:00Z");
        app["status"]["operationState"]["syncResult"]["resources"]
            .as_array_mut()
            .unwrap()
            .push(result("postgresql.cnpg.io", "Database", "forgejo"));
        let tl = build(
            &app,
            &waves(HealthStatus::Healthy),
            live,
            t("2026-12-01T03:06:00Z"),
        );
        assert_eq!(
            tl.sync.as_ref().unwrap().finished_at.as_deref(),
            Some("2026-12-01T03:05:00Z")
        );
        assert_eq!(tl.waves[3].applied, ApplyState::Unknown);
        assert!(
            tl.waves[3]
                .applied_note
                .contains("Database forgejo: does not exist")
        );

        app["status"]["operationState"]["syncResult"]["resources"]
            .as_array_mut()
            .unwrap()
            .pop();
        let tl = build(
            &app,
            &waves(HealthStatus::Healthy),
            live,
            t("2026-12-01T03:06:00Z"),
        );
        assert_eq!(tl.waves[3].applied, ApplyState::NotInSync);
    }

    #[test]
    fn a_failed_apply_marks_its_wave_and_pruned_resources_are_not_applied() {
        let mut app = mid_sync();
        let results = app["status"]["operationState"]["syncResult"]["resources"]
            .as_array_mut()
            .unwrap();
        results[1]["status"] = json!("SyncFailed");
        results.push(result("postgresql.cnpg.io", "Database", "forgejo"));
        results.last_mut().unwrap()["status"] = json!("PruneSkipped");
        let tl = build(
            &app,
            &waves(HealthStatus::Progressing),
            live,
            t("2026-12-01T03:02:00Z"),
        );
        assert_eq!(tl.waves[1].applied, ApplyState::Failed);
        assert!(
            tl.waves[1]
                .applied_note
                .contains("SyncFailed) for Service forgejo")
        );
        assert_eq!(
            tl.waves[1].resources[0].sync_result.as_deref(),
            Some("SyncFailed")
        );
        assert_eq!(tl.waves[3].applied, ApplyState::NotInSync);
    }

    #[test]
    fn argocd_time_is_read_from_its_own_field_manager_only() {
        let obj = json!({"metadata": {"managedFields": [
            {"manager": "kubectl-patch", "operation": "Update", "time": "2026-12-01T04:00:00Z"},
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-12-01T03:00:02Z"},
            {"manager": "argocd-controller", "operation": "Update", "time": "2026-12-01T03:00:01Z"},
            {"manager": "argocd-controller", "operation": "Update"}
        ]}});
        assert_eq!(argocd_changed_at(&obj), Some(t("2026-12-01T03:00:02Z")));
        assert_eq!(argocd_changed_at(&json!({"metadata": {}})), None);
    }

    #[test]
    fn a_gate_is_ready_since_its_condition_turned_true_only() {
        let gate = |status: &str| {
            json!({"status": {"conditions": [
                {"type": "Ready", "status": status, "lastTransitionTime": "2026-12-01T03:01:30Z"}]}})
        };
        assert_eq!(
            gate_ready_since(&gate("True")),
            Some(t("2026-12-01T03:01:30Z"))
        );
        assert_eq!(gate_ready_since(&gate("False")), None);
        assert_eq!(gate_ready_since(&json!({})), None);
    }

    fn many_waves(n: usize) -> Waves {
        let judged = (0..n)
            .map(|i| {
                let kind = if i % 2 == 0 { "ConfigMap" } else { "Service" };
                let mut j = judged("", kind, &format!("r-{i:04}"), HealthStatus::Healthy);
                j.judged_by = JudgedBy::Kstatus;
                ((i % 20) as i64, j)
            })
            .collect();
        assemble("argocd", "big", Verdict::healthy("ok"), judged)
    }

    #[tokio::test(start_paused = true)]
    async fn reads_that_each_wait_for_a_listing_watch_wait_once_together_not_in_turn() {
        // 200 resources whose reads each wait the whole --sync-wait (5 s) for a watch that
        // never lists: in turn, 1,000 s; together, the one wait.
        let waves = many_waves(200);
        let sync_wait = std::time::Duration::from_secs(5);
        let started = tokio::time::Instant::now();
        // What `gather` does, with a read that waits for a watch that never lists.
        let reads: Vec<_> = waves
            .waves
            .iter()
            .flat_map(|w| &w.resources)
            .map(|j| {
                let read = async {
                    tokio::time::sleep(sync_wait * 2).await;
                    Ok(None)
                };
                let live = live_of(&j.resource, Some(read), "", started + sync_wait);
                async move { (&j.resource, live.await) }
            })
            .collect();
        let live: Vec<_> = futures::stream::iter(reads)
            .buffered(READS_AT_ONCE)
            .collect()
            .await;
        assert!(
            started.elapsed() <= sync_wait + std::time::Duration::from_millis(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(live.len(), 200);
        assert!(live.iter().all(|(_, (l, sound))| {
            !sound
                && l.unread
                    .as_deref()
                    .is_some_and(|u| u.contains("not read within --sync-wait"))
        }));
        // In the view's order, each with its own answer.
        let names: Vec<&str> = live.iter().map(|(r, _)| r.name.as_str()).collect();
        let expected: Vec<&str> = waves
            .waves
            .iter()
            .flat_map(|w| &w.resources)
            .map(|j| j.resource.name.as_str())
            .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn two_thousand_resources_find_their_sync_results_and_live_objects() {
        let n = 2000;
        let waves = many_waves(n);
        let results: Vec<Value> = (0..n)
            .map(|i| {
                let kind = if i % 2 == 0 { "ConfigMap" } else { "Service" };
                result("", kind, &format!("r-{i:04}"))
            })
            .collect();
        let mut app = mid_sync();
        app["status"]["operationState"]["syncResult"]["resources"] = Value::from(results);
        let live = |_: &ResourceRef| Live {
            argocd_changed_at: Some(t("2026-12-01T03:00:02Z")),
            ..Live::default()
        };
        let tl = build(&app, &waves, live, t("2026-12-01T03:02:00Z"));
        assert_eq!(tl.waves.len(), 20);
        assert!(tl.waves.iter().all(|w| w.applied == ApplyState::Applied));
        assert_eq!(
            tl.waves
                .iter()
                .flat_map(|w| &w.resources)
                .filter(|r| r.sync_result.as_deref() == Some("Synced"))
                .count(),
            n
        );
    }
}
