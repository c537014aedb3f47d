//! Notices (`wavegate serve --notices`): while Argo CD's sync of an Application waits for a
//! WaveGate, wavegate writes Argo CD's notice annotations on that Application, so its web UI
//! shows why the wave waits (a banner on the application page, an icon in the list and tile
//! views) with no UI extension installed. Argo CD 3.5 reads them (argo-cd
//! `docs/user-guide/application-notice.md`, `ui/src/app/applications/components/application-notice/notice.ts`);
//! earlier releases ignore the keys.
//!
//! When a sync is held: Argo CD says so itself. While an operation runs
//! (`status.operationState.phase: Running`), gitops-engine records every task of the current
//! wave whose health it still waits for with `hookPhase: Running` in
//! `status.operationState.syncResult.resources` (`sync_context.go`, `setResourceResult`;
//! argo-cd `controller/sync.go` copies them there at each step). A WaveGate among them holds
//! the sync. The notice is removed once none does: the wave advanced, the sync ended (the phase
//! left Running), or the Application is being deleted.
//!
//! Ownership: wavegate writes `content`, `severity` and `url` only, with `wavegate.dev/notice`
//! holding a digest of every `notice.argocd.argoproj.io/*` annotation as it wrote them. The
//! notice is wavegate's only while that digest still matches: a notice someone else set, or
//! changed after wavegate wrote it (even a `permanent` added), is theirs, and wavegate neither
//! overwrites nor removes it (only its own stale digest goes).
//!
//! Writes: JSON merge patches of those four annotations (field manager `wavegate`), each
//! preconditioned on the resourceVersion it was decided on, at most one per Application per
//! `--notice-interval`, and none when the notice on the Application is already the one wanted:
//! a settled system sends none.

use crate::app_status::App;
use crate::cache::{APPLICATIONS, CacheError, Change};
use crate::deps::{Dep, DepIndex};
use crate::evaluate::Evaluator;
use crate::gate::crd::WaveGate;
use crate::health::HealthStatus;
use crate::json::At;
use crate::leader::{Fence, Fenced};
use crate::locks::lock;
use crate::metrics::{Metrics, refused_precondition};
use crate::queue::{self, Action, QueueConfig, Reconcile};
use crate::written::{self, FIELD_MANAGER};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;

/// Argo CD's notice annotations (argo-cd 3.5 `application-notice/notice.ts`).
pub const PREFIX: &str = "notice.argocd.argoproj.io/";
pub const CONTENT: &str = "notice.argocd.argoproj.io/content";
pub const SEVERITY: &str = "notice.argocd.argoproj.io/severity";
pub const URL: &str = "notice.argocd.argoproj.io/url";
/// wavegate's mark of ownership: the digest of the notice annotations as wavegate wrote them.
pub const OWNER: &str = "wavegate.dev/notice";
/// Every annotation wavegate writes on an Application in this mode (the admission policy in
/// deploy/ lists exactly these).
pub const WRITTEN: [&str; 4] = [CONTENT, SEVERITY, URL, OWNER];

/// Argo CD truncates the content at 500 characters; wavegate writes no more than that.
const MAX_CONTENT: usize = 500;

/// The default of `--notice-interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
pub(crate) enum NoticeError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("notice write failed: {0}")]
    Write(#[from] kube::Error),
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

/// A notice's severity as Argo CD reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// The notice wavegate wants on an Application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub content: String,
    pub severity: Severity,
    pub url: Option<String>,
}

/// A WaveGate Argo CD's running sync waits for, with what wavegate knows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBy {
    pub namespace: String,
    pub name: String,
    /// Its sync wave as the Application records it (Argo CD's default: 0).
    pub wave: i64,
    /// The gate's verdict for its current generation, if wavegate has one.
    pub health: Option<(HealthStatus, String)>,
}

/// The WaveGates (namespace, name) Argo CD's running sync of `app` waits for; empty when no
/// sync runs or when the Application is being deleted.
pub(crate) fn holding_gates(app: &App) -> Vec<(String, String)> {
    if app.str_at("/metadata/deletionTimestamp").is_some()
        || app.str_at("/status/operationState/phase") != Some("Running")
    {
        return Vec::new();
    }
    let app_ns = app.str_at("/metadata/namespace").unwrap_or_default();
    (app.lists().results.iter())
        .filter(|r| {
            r.group.as_deref() == Some("wavegate.dev")
                && r.kind.as_deref() == Some("WaveGate")
                && r.hook_phase.as_deref() == Some("Running")
        })
        .filter_map(|r| {
            let name = r.name.as_deref()?.to_string();
            // A namespaced resource without a namespace goes to the destination's; the gate
            // lookup below only needs a name to say "not found" when that differs.
            let ns = (r.namespace.as_deref())
                .or_else(|| app.str_at("/spec/destination/namespace"))
                .unwrap_or(app_ns)
                .to_string();
            Some((ns, name))
        })
        .collect()
}

/// The sync wave `app` records for a gate (`status.resources[].syncWave`), else 0.
pub(crate) fn wave_of(app: &App, namespace: &str, name: &str) -> i64 {
    (app.lists().resources.iter())
        .find(|r| {
            r.group.as_deref() == Some("wavegate.dev")
                && r.kind.as_deref() == Some("WaveGate")
                && r.name.as_deref() == Some(name)
                && r.namespace.as_deref().unwrap_or(namespace) == namespace
        })
        .map_or(0, |r| r.sync_wave)
}

/// The gate's verdict for its current generation (a status about an older spec says nothing
/// about this sync).
pub fn current_verdict(gate: &WaveGate) -> Option<(HealthStatus, String)> {
    let status = gate.status.as_ref()?;
    if status.observed_generation != gate.metadata.generation {
        return None;
    }
    let health = status.health.as_ref()?;
    Some((health.status, health.message.clone()))
}

/// The notice for an Application whose sync waits for `held` (`None` when no gate holds it):
/// the gate of the
/// lowest wave (a Degraded one first), its verdict, how many more gates hold the wave, and a
/// link to wavegate's waves view of the Application when `public_url` is set.
pub fn notice_for(
    (app_ns, app): (&str, &str),
    held: &[HeldBy],
    public_url: Option<&str>,
) -> Option<Notice> {
    // A gate wavegate already judged Healthy is released: Argo CD marks it done at its next
    // look, and the notice must not say "holds" of it meanwhile.
    let held: Vec<&HeldBy> = held
        .iter()
        .filter(|g| !matches!(g.health, Some((HealthStatus::Healthy, _))))
        .collect();
    let first = held.iter().min_by_key(|g| {
        let degraded = matches!(g.health, Some((HealthStatus::Degraded, _)));
        (g.wave, !degraded, g.namespace.clone(), g.name.clone())
    })?;
    let degraded = held
        .iter()
        .any(|g| matches!(g.health, Some((HealthStatus::Degraded, _))));
    let why = match &first.health {
        Some((status, message)) if message.is_empty() => status.as_str().to_string(),
        Some((status, message)) => format!("{}: {message}", status.as_str()),
        None => "not judged by wavegate yet".to_string(),
    };
    let others = held.len() - 1;
    let more = match others {
        0 => String::new(),
        1 => " (and 1 more WaveGate)".to_string(),
        n => format!(" (and {n} more WaveGates)"),
    };
    let content = format!(
        "wavegate holds sync wave {}: WaveGate {}/{} is {why}{more}",
        first.wave, first.namespace, first.name
    );
    Some(Notice {
        content: truncate(&content, MAX_CONTENT),
        severity: if degraded {
            Severity::Critical
        } else {
            Severity::Warning
        },
        url: public_url.map(|base| waves_url(base, app_ns, app)),
    })
}

/// wavegate's waves view of one Application under `base` (`--public-url`).
fn waves_url(base: &str, ns: &str, app: &str) -> String {
    format!(
        "{}/api/v1/applications/{ns}/{app}/waves",
        base.trim_end_matches('/')
    )
}

/// `text` cut to at most `max` characters, the last one an ellipsis when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The digest that marks a set of notice annotations as wavegate's: FNV-1a (64 bit) of every
/// `notice.argocd.argoproj.io/*` key and value, in key order.
fn digest(annotations: &BTreeMap<String, String>) -> String {
    let mut text = String::new();
    for (k, v) in annotations.range(PREFIX.to_string()..) {
        if !k.starts_with(PREFIX) {
            break;
        }
        text.push_str(k);
        text.push('=');
        text.push_str(v);
        text.push('\n');
    }
    format!("{:016x}", crate::gate::stamp::fnv1a(text.as_bytes()))
}

/// Whose the notice on an Application is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// No notice annotation at all.
    Nobody,
    /// wavegate's: its digest matches the notice annotations as they are.
    Wavegate,
    /// Someone else's: notice annotations that wavegate's digest does not describe.
    Someone,
}

pub fn owner(annotations: &BTreeMap<String, String>) -> Owner {
    let any = annotations.keys().any(|k| k.starts_with(PREFIX));
    match (any, annotations.get(OWNER)) {
        (false, _) => Owner::Nobody,
        (true, Some(mark)) if *mark == digest(annotations) => Owner::Wavegate,
        (true, _) => Owner::Someone,
    }
}

/// The annotations wavegate wants for `notice` (with its ownership digest).
fn annotations_for(notice: &Notice) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([
        (CONTENT.to_string(), notice.content.clone()),
        (SEVERITY.to_string(), notice.severity.as_str().to_string()),
    ]);
    if let Some(url) = &notice.url {
        out.insert(URL.to_string(), url.clone());
    }
    let mark = digest(&out);
    out.insert(OWNER.to_string(), mark);
    out
}

/// The merge patch of `metadata.annotations` that turns `current` into what `wanted` asks for,
/// or `None` when nothing is to be written: the notice is already the one wanted, or it is
/// someone else's (only wavegate's stale digest is then removed).
pub fn plan(
    current: &BTreeMap<String, String>,
    wanted: Option<&Notice>,
) -> Option<Map<String, Value>> {
    let target = match (owner(current), wanted) {
        (Owner::Someone, _) => {
            // Never theirs to change: at most our own mark goes, once.
            return current
                .contains_key(OWNER)
                .then(|| Map::from_iter([(OWNER.to_string(), Value::Null)]));
        }
        (_, Some(notice)) => annotations_for(notice),
        (_, None) => BTreeMap::new(),
    };
    let mut patch = Map::new();
    for key in WRITTEN {
        match (current.get(key), target.get(key)) {
            (Some(c), Some(w)) if c == w => {}
            (_, Some(w)) => {
                patch.insert(key.into(), Value::String(w.clone()));
            }
            (Some(_), None) => {
                patch.insert(key.into(), Value::Null);
            }
            (None, None) => {}
        }
    }
    (!patch.is_empty()).then_some(patch)
}

/// `current` with a merge patch of its annotations applied.
pub fn apply(
    current: &BTreeMap<String, String>,
    patch: &Map<String, Value>,
) -> BTreeMap<String, String> {
    let mut out = current.clone();
    for (k, v) in patch {
        match v.as_str() {
            Some(s) => out.insert(k.clone(), s.to_string()),
            None => out.remove(k),
        };
    }
    out
}

/// How long a write must wait so that writes to one Application stay `interval` apart.
pub fn wait_before(last: Option<Instant>, now: Instant, interval: Duration) -> Option<Duration> {
    let next = last? + interval;
    (next > now).then(|| next - now)
}

/// How notices are written (`wavegate serve` flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// wavegate's address as a browser reaches it (`--public-url`); the notice links to the
    /// Application's waves view there. `None`: no link.
    pub public_url: Option<String>,
    /// At most one write per Application this often (`--notice-interval`).
    pub interval: Duration,
    /// Every Application is looked at again this often without any change.
    pub resync: Duration,
    /// Asked before every write (see [`crate::leader::Fence`]).
    pub fence: Fence,
}

/// Application namespace and name.
type Key = (String, String);

struct Notices {
    settings: Settings,
    evaluator: Arc<Evaluator>,
    metrics: Arc<Metrics>,
    /// Which gates each Application's notice was read from: their changes wake it.
    index: Mutex<DepIndex<Key>>,
    /// The notice annotations last written per Application, until the cache shows them.
    written: Mutex<HashMap<Key, written::Memory<BTreeMap<String, String>>>>,
    /// When each Application was last written.
    last_write: Mutex<HashMap<Key, Instant>>,
}

/// Run notices over the Applications and WaveGates of `evaluator`'s cache (Argo CD's cluster)
/// until its change feed closes. Each patch increments [`Metrics::notice_writes`].
pub async fn run(evaluator: Arc<Evaluator>, metrics: Arc<Metrics>, settings: Settings) {
    // One cluster-wide watch of Applications, part of readiness: without it a read of "every
    // Application" would go to a per-namespace watch, and notices are what --notices is for.
    evaluator.cache().require(APPLICATIONS);
    let changes = evaluator.cache().subscribe();
    let config = QueueConfig::new("notices", settings.resync);
    let notices = Arc::new(Notices {
        settings,
        evaluator,
        metrics: metrics.clone(),
        index: Mutex::default(),
        written: Mutex::default(),
        last_write: Mutex::default(),
    });
    tracing::info!(
        "notices started (Argo CD notice annotations on Applications held by a WaveGate)"
    );
    queue::run(notices, changes, config, metrics).await;
}

impl Reconcile<Key> for Notices {
    type Error = NoticeError;

    fn affected(&self, change: &Change) -> Vec<Key> {
        if change.kind == APPLICATIONS {
            return vec![(change.namespace.clone(), change.name.clone())];
        }
        lock(&self.index).affected(change)
    }

    async fn all(&self) -> Vec<Key> {
        match self.evaluator.cache().objects(&APPLICATIONS, None).await {
            Ok(apps) => apps
                .iter()
                .filter_map(|a| {
                    Some((
                        a.str_at("/metadata/namespace")?.to_string(),
                        a.str_at("/metadata/name")?.to_string(),
                    ))
                })
                .collect(),
            Err(CacheError::NotInstalled(_)) => Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "notices cannot list Applications");
                Vec::new()
            }
        }
    }

    async fn reconcile(&self, key: Key) -> Result<Action, NoticeError> {
        self.notice(&key).await
    }
}

impl Notices {
    async fn notice(&self, key: &Key) -> Result<Action, NoticeError> {
        let (ns, name) = key;
        let cache = self.evaluator.cache();
        let Some(app) = cache.application(ns, name).await? else {
            self.forget(key);
            return Ok(Action::await_change());
        };
        let rv = app.str_at("/metadata/resourceVersion").map(str::to_string);
        let current = {
            let cached = annotations_of(&app);
            match lock(&self.written).get(key) {
                Some(w) if w.lags(&rv) => w.value.clone(),
                _ => cached,
            }
        };
        let gates = holding_gates(&app);
        lock(&self.index).set(
            key.clone(),
            gates
                .iter()
                .map(|(g_ns, g)| Dep::object(crate::gate::kind(), g_ns, g))
                .collect(),
        );
        let mut held = Vec::with_capacity(gates.len());
        for (g_ns, g) in gates {
            // A gate that cannot be read here (another cluster's, or a watch still listing)
            // still holds the sync; the notice then says it is not judged yet.
            let health = match cache
                .object_as::<WaveGate>(&crate::gate::kind(), &g_ns, &g)
                .await
            {
                Ok(Some(Ok(gate))) => current_verdict(&gate),
                _ => None,
            };
            let wave = wave_of(&app, &g_ns, &g);
            held.push(HeldBy {
                namespace: g_ns,
                name: g,
                wave,
                health,
            });
        }
        let wanted = notice_for((ns, name), &held, self.settings.public_url.as_deref());
        let Some(patch) = plan(&current, wanted.as_ref()) else {
            return Ok(Action::await_change());
        };
        let now = Instant::now();
        let last = lock(&self.last_write).get(key).copied();
        if let Some(wait) = wait_before(last, now, self.settings.interval) {
            return Ok(Action::requeue(wait));
        }
        let precondition = written::precondition(lock(&self.written).get(key), &rv);
        let after = apply(&current, &patch);
        match self.write(key, precondition, patch).await {
            Ok(produced) => {
                lock(&self.last_write).insert(key.clone(), now);
                let mut memory = lock(&self.written);
                let next = written::Memory::after(memory.get(key), &rv, None, produced, after);
                memory.insert(key.clone(), next);
                Ok(Action::await_change())
            }
            // Argo CD writes a syncing Application often: decide again on the version it wrote.
            Err(NoticeError::Write(e)) if refused_precondition(&e) => {
                Ok(Action::requeue(Duration::from_secs(1)))
            }
            Err(e) => Err(e),
        }
    }

    async fn write(
        &self,
        (ns, name): &Key,
        resource_version: Option<String>,
        annotations: Map<String, Value>,
    ) -> Result<Option<String>, NoticeError> {
        let ar = self.evaluator.cache().discover(&APPLICATIONS).await?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.evaluator.cache().client().clone(), ns, &ar);
        let mut metadata = json!({ "annotations": annotations });
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.settings.fence.admit().await?;
        let written = api
            .patch(
                name,
                &params,
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await
            .inspect_err(|e| self.metrics.record_write_failure("notice", e))?;
        self.metrics.notice_writes.inc();
        tracing::info!(application = %format!("{ns}/{name}"), "notice written");
        Ok(written.metadata.resource_version)
    }

    fn forget(&self, key: &Key) {
        lock(&self.index).remove(key);
        lock(&self.written).remove(key);
        lock(&self.last_write).remove(key);
    }
}

fn annotations_of(object: &Value) -> BTreeMap<String, String> {
    object
        .object_at("/metadata/annotations")
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
