//! The gate controller: judges every WaveGate when it or anything its checks read changes (and
//! on a periodic resync), and writes `status` through the status subresource with server-side
//! apply (field manager `wavegate`), only when the computed status differs from the stored one.
//!
//! WaveGates are read from the same watch cache as everything else (one cluster-wide watch, or
//! one per namespace with `--namespaces`), so the controller adds one watch to the API server.

use super::asks::{ask_under, invalid_check};
use super::crd::{WaveGate, WaveGateStatus};
use super::decide::{Inputs, Rules, SyncClock, decide, health_of};
use super::stamp;
use super::sync;
use crate::ask::{Ask, Check};
use crate::cache::{APPLICATIONS, CacheError, Change};
use crate::deps::{Dep, DepIndex};
use crate::evaluate::{Evaluator, Judgement, reads};
use crate::events;
use crate::leader::{Fence, Fenced};
use crate::locks::lock;
use crate::metrics::{Metrics, refused_precondition};
use crate::policy::CheckPolicy;
use crate::queue::{self, Action, QueueConfig, Reconcile};
use crate::views::TrackingMethod;
use crate::written::{self, DEFAULT_STATUS_VALIDITY, FIELD_MANAGER};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub(crate) enum GateError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("cannot read the WaveGate: {0}")]
    Decode(#[from] Arc<serde_json::Error>),
    #[error("status write failed: {0}")]
    Write(#[from] kube::Error),
    #[error(transparent)]
    Fenced(#[from] Fenced),
    #[error(
        "not written: the verdict was judged before a silence of the API server or of wavegate \
         itself (frozen); judging again"
    )]
    Silenced,
}

/// Namespace and name.
type GateKey = (String, String);

/// The resourceVersions one write produced: the status write's, and the stamp's if one followed.
struct Versions {
    status: Option<String>,
    stamp: Option<String>,
}

struct Gates {
    context: Context,
    index: Mutex<DepIndex<GateKey>>,
    /// The status last written per gate, with the resourceVersions the cache may still show
    /// before our write: until the watch delivers it, the cache holds the old status, and
    /// comparing with that would write the same status twice.
    written: Mutex<HashMap<GateKey, written::Memory<WaveGateStatus>>>,
    /// Per gate, the sync attempt of its managing Application last seen running and when it
    /// was first seen (Argo CD dates only an operation's first attempt, see
    /// [`sync::attempt_started`]). Keyed by attempt id, which carries the Application's UID.
    attempts: Mutex<HashMap<GateKey, sync::AttemptClock>>,
    missing_crd_logged: AtomicBool,
    settings: Settings,
    events: events::Publisher,
}

/// What one cluster's gate controller reads, writes and reports with (controller-rs's
/// `Context`); `clusters::Cluster` builds it for each cluster.
pub struct Context {
    /// The gates' cluster, as the `cluster` label of `wavegate_gate_health` names it.
    pub cluster: String,
    /// The gates' cluster's client: status writes and Events go there.
    pub client: kube::Client,
    /// Judges the gates' checks in their cluster, over the cache the WaveGates are read from.
    pub evaluator: Arc<Evaluator>,
    /// Where Argo CD's Applications are read: the cluster Argo CD runs in, whatever cluster it
    /// deploys to (argo-cd `util/argo` reads them from its own namespace,
    /// `controller/appcontroller.go` lists them there). The Application that manages a gate and
    /// the Applications that `application:` checks name are read there, and their changes there
    /// wake these gates. At home, the same evaluator as `evaluator`.
    pub applications: Arc<Evaluator>,
    pub metrics: Arc<Metrics>,
    /// Whether an Application deploys to the gates' cluster (its `spec.destination`, as Argo
    /// CD resolves it). The Application a gate's tracking id names counts for the gate only
    /// if it does: an Application listing a gate of the same namespace and name in another
    /// cluster says nothing about this one (see `sync::lists_gate`).
    pub deploys_here: DeploysHere,
}

/// See [`Context::deploys_here`].
pub type DeploysHere = Arc<dyn Fn(&serde_json::Value) -> bool + Send + Sync>;

/// How the controllers run, from `wavegate serve` flags (the same for every cluster).
#[derive(Clone)]
pub struct Settings {
    /// Every gate is judged again this often without any change.
    pub resync: Duration,
    /// Where Argo CD's own Applications live (tracking ids without a namespace name them).
    pub argocd_namespace: String,
    /// How long a written verdict counts (`health.validUntil`); `None`: forever.
    pub status_validity: Option<Duration>,
    /// What a gate's checks may read (`--gate-cross-namespace`, `--generic-kinds`).
    pub policy: Arc<CheckPolicy>,
    /// argocd-cm's `application.resourceTrackingMethod` (`--tracking-method`): which mark on a
    /// gate names the Application whose sync clock its timeout runs on.
    pub tracking_method: TrackingMethod,
    /// Asked before every write: with `--leader-elect`, whether this replica still holds the
    /// Lease (a frozen ex-leader's late write is not sent, see [`crate::leader`]).
    pub fence: Fence,
}

impl Settings {
    /// The defaults of `wavegate serve`, with the strict default policy.
    pub fn new(resync: Duration) -> Settings {
        Settings {
            resync,
            argocd_namespace: DEFAULT_ARGOCD_NAMESPACE.into(),
            status_validity: Some(DEFAULT_STATUS_VALIDITY),
            policy: Arc::default(),
            tracking_method: TrackingMethod::default(),
            fence: Fence::default(),
        }
    }
}

/// Argo CD's namespace in a default install.
pub(crate) const DEFAULT_ARGOCD_NAMESPACE: &str = "argocd";

/// Run one cluster's gate controller until its cache's change feed closes. Status writes are
/// counted in [`Metrics::gate_status_writes`].
pub async fn run(context: Context, settings: Settings) {
    let resync = settings.resync;
    let own = context.evaluator.cache().subscribe();
    let changes = if Arc::ptr_eq(&context.evaluator, &context.applications) {
        own.into()
    } else {
        let applications = context.applications.cache().subscribe();
        queue::Feed::with_other(own, applications, |c| c.kind == APPLICATIONS)
    };
    let metrics = context.metrics.clone();
    let gates = Arc::new(Gates {
        events: events::Publisher::new(context.client.clone(), metrics.clone()),
        context,
        index: Mutex::default(),
        written: Mutex::default(),
        attempts: Mutex::default(),
        missing_crd_logged: AtomicBool::new(false),
        settings,
    });
    tracing::info!(cluster = %gates.context.cluster, resync = %humantime::format_duration(resync),
        "gate controller started");
    queue::run(gates, changes, QueueConfig::new("gates", resync), metrics).await;
}

impl Reconcile<GateKey> for Gates {
    type Error = GateError;

    fn affected(&self, change: &Change) -> Vec<GateKey> {
        if change.kind == super::kind() {
            return vec![(change.namespace.clone(), change.name.clone())];
        }
        lock(&self.index).affected(change)
    }

    async fn all(&self) -> Vec<GateKey> {
        match self
            .context
            .evaluator
            .cache()
            .names(&super::kind(), None)
            .await
        {
            Ok(names) => {
                self.missing_crd_logged.store(false, Ordering::Relaxed);
                names
            }
            Err(e) => {
                if !self.missing_crd_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "cannot list WaveGates; retrying at each resync");
                }
                Vec::new()
            }
        }
    }

    async fn reconcile(&self, key: GateKey) -> Result<Action, GateError> {
        self.judge(&key).await
    }
}

impl Gates {
    async fn judge(&self, key: &GateKey) -> Result<Action, GateError> {
        let (ns, name) = key;
        let heard = self.silences();
        let cache = self.context.evaluator.cache();
        let Some(gate) = cache
            .object_as::<WaveGate>(&super::kind(), ns, name)
            .await?
        else {
            self.forget(key);
            return Ok(Action::await_change());
        };
        let gate = gate?;
        let asks: Vec<(String, Result<Ask, _>)> = gate
            .spec
            .checks
            .iter()
            .map(|c| (c.name.clone(), ask_under(c, ns, &self.settings.policy)))
            .collect();
        let managed_by = sync::managing_application(
            &gate,
            &self.settings.argocd_namespace,
            self.settings.tracking_method,
        );
        // Register what the gate reads before reading it: a change that lands while the
        // checks are being judged then wakes the gate again instead of waiting for the resync.
        let mut deps: Vec<_> = asks
            .iter()
            .filter_map(|(_, a)| a.as_ref().ok())
            .flat_map(reads)
            .collect();
        if let Some((app_ns, app)) = &managed_by {
            deps.push(Dep::object(APPLICATIONS, app_ns, app));
        }
        lock(&self.index).set(key.clone(), deps);
        let judged: Vec<_> = futures::future::join_all(asks.iter().map(|(n, ask)| async move {
            let j = match ask {
                Ok(ask) => self.evaluator_for(ask).judge_fresh(ask).await,
                Err(e) => Judgement {
                    verdict: invalid_check(e),
                    blind: None,
                    cold: false,
                    judged_selector: None,
                    judged_state: None,
                    valid_until: None,
                },
            };
            (n.clone(), j)
        }))
        .await;
        let blind: HashMap<String, String> = judged
            .iter()
            .filter_map(|(n, j)| j.blind.clone().map(|why| (n.clone(), why)))
            .collect();
        let mut cold: Vec<String> = judged
            .iter()
            .filter(|(_, j)| j.cold)
            .map(|(n, _)| format!("check {n}"))
            .collect();
        let verdicts: Vec<_> = judged.into_iter().map(|(n, j)| (n, j.verdict)).collect();
        // When the Application that manages the gate cannot be read (not watched, not synced,
        // relisting, forbidden), wavegate cannot tell when this sync attempt started: measuring
        // the timeout from the gate's history could fail a new sync for an old one's wait, so
        // the timeout is not applied until it can tell (Degraded needs evidence).
        // An Application that the tracking id or instance label names but that is not there
        // is the same: Argo CD may keep Applications where wavegate does not look (another
        // `--argocd-namespace`, OpenShift GitOps' `openshift-gitops`), so "not found" is no
        // proof that nothing is syncing the gate.
        let applications = self.context.applications.cache();
        let now = k8s_openapi::jiff::Timestamp::now();
        // The Application counts only where Argo CD itself lists the gate among its resources:
        // the tracking id is the gate author's to write, and a tenant could otherwise name
        // another project's Application and learn from the gate's status whether it exists and
        // when it syncs. One that is not there and one that does not list the gate read alike.
        let sync = match &managed_by {
            Some((app_ns, app)) => match applications.application(app_ns, app).await {
                Ok(Some(found))
                    if sync::lists_gate(&found, ns, name)
                        && (self.context.deploys_here)(&found) =>
                {
                    SyncClock::Read(self.attempt_started(key, &found, now))
                }
                Ok(_) => SyncClock::Blind(format!(
                    "cannot tell when the sync started: no Application {app_ns}/{app} (which the \
                     gate's tracking id or instance label names) that deploys to this cluster and \
                     lists this gate among its resources was found"
                )),
                Err(e) => {
                    if matches!(e, CacheError::NotSynced(_)) {
                        cold.push(format!("Application {app_ns}/{app}"));
                    }
                    SyncClock::Blind(format!(
                        "cannot tell when the sync of Application {app_ns}/{app} started: {e}"
                    ))
                }
            },
            None => SyncClock::Unmanaged,
        };
        let rv = gate.resource_version();
        let probing = asks.iter().any(|(_, a)| {
            matches!(
                a,
                Ok(Ask {
                    check: Check::CrdbCluster(_),
                    ..
                })
            )
        });
        let stored = self.current_status(key, &rv, gate.status.as_ref());
        // What the write goes over, for the stamp: what Argo CD saw last.
        let before = stored.clone();
        let inputs = Inputs {
            gate: &gate,
            verdicts,
            blind,
            cold,
            stored,
            sync,
            probing,
        };
        let rules = Rules {
            status_validity: self.settings.status_validity,
            probe_recheck: self.context.evaluator.probe_recheck(),
        };
        let decision = decide(inputs, &rules, now);
        if let Some(why) = &decision.ignored_timeout {
            tracing::warn!(gate = %format!("{ns}/{name}"), "{why}; ignoring it");
        }
        if let Some(why) = &decision.held {
            tracing::debug!(gate = %format!("{ns}/{name}"), "{why}");
        }
        self.context.metrics.set_gate_health(
            &self.context.cluster,
            ns,
            name,
            Some(decision.health()),
        );
        if decision.write {
            // The write is conditional on the version the status was computed from (or the one
            // our own last write produced, while the cache has not caught up with it): a status
            // computed before this replica froze or lost its lease, or before Argo CD changed
            // the spec, is refused (409) rather than written over what another writer or a new
            // generation put there; the retry judges again on the current object.
            let precondition = self.precondition(key, &rv);
            let versions = self
                .write(
                    &gate,
                    &decision.status,
                    precondition,
                    before.as_ref(),
                    now,
                    heard,
                )
                .await?;
            // With a stamp, the status write's version is one the cache passes through.
            let (passed, produced) = match versions.stamp {
                Some(stamp) => (versions.status, Some(stamp)),
                None => (None, versions.status),
            };
            {
                let mut memory = lock(&self.written);
                let after =
                    written::Memory::after(memory.get(key), &rv, passed, produced, decision.status);
                memory.insert(key.clone(), after);
            }
            if let Some(t) = decision.event {
                let regarding = gate.object_ref(&());
                self.events.publish(t, events::JUDGE_GATE, regarding);
            }
        }
        Ok(decision
            .requeue
            .map_or_else(Action::await_change, Action::requeue))
    }

    /// Who judges `ask`: Argo CD's cluster for an Application (where Argo CD keeps them), the
    /// gate's own cluster for everything else.
    fn evaluator_for(&self, ask: &Ask) -> &Arc<Evaluator> {
        match &ask.check {
            Check::Application(()) => &self.context.applications,
            _ => &self.context.evaluator,
        }
    }

    /// When the managing Application's current sync attempt began, remembering when a retry
    /// was first seen running; `None` when no operation runs.
    fn attempt_started(
        &self,
        key: &GateKey,
        app: &serde_json::Value,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Option<k8s_openapi::jiff::Timestamp> {
        lock(&self.attempts)
            .entry(key.clone())
            .or_default()
            .started(app, now)
    }

    /// The status to compare with: what we wrote, while the cache has not caught up with it.
    fn current_status(
        &self,
        key: &GateKey,
        rv: &Option<String>,
        cached: Option<&WaveGateStatus>,
    ) -> Option<WaveGateStatus> {
        match lock(&self.written).get(key) {
            Some(w) if w.lags(rv) => Some(w.value.clone()),
            _ => cached.cloned(),
        }
    }

    /// The resourceVersion a write must find: what our last write produced while the cache
    /// still shows a version from before it, else the cached one.
    fn precondition(&self, key: &GateKey, rv: &Option<String>) -> Option<String> {
        written::precondition(lock(&self.written).get(key), rv)
    }

    /// The caches' silence counts (see [`crate::cache::Cache::silences`]): the gate's own
    /// cluster's and Argo CD's.
    fn silences(&self) -> (u64, u64) {
        (
            self.context.evaluator.cache().silences(),
            self.context.applications.cache().silences(),
        )
    }

    /// Writes `status` over `resource_version` (where the gate held `before`), then the stamp
    /// if Argo CD needs one to look again; the versions they produced. Not when a silence came
    /// after `heard` was taken, before judging: the verdict may rest on reads from before a
    /// freeze, and the precondition stops it only where someone else wrote meanwhile.
    async fn write(
        &self,
        gate: &WaveGate,
        status: &WaveGateStatus,
        resource_version: Option<String>,
        before: Option<&WaveGateStatus>,
        now: k8s_openapi::jiff::Timestamp,
        heard: (u64, u64),
    ) -> Result<Versions, GateError> {
        let api: Api<WaveGate> = Api::namespaced(
            self.context.client.clone(),
            &gate.namespace().unwrap_or_default(),
        );
        let mut body = serde_json::json!({
            "apiVersion": WaveGate::api_version(&()),
            "kind": WaveGate::kind(&()),
            "status": status,
        });
        if let Some(rv) = resource_version {
            // Server-side apply honours metadata.resourceVersion as a precondition.
            body["metadata"] = serde_json::json!({ "resourceVersion": rv });
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.settings.fence.admit().await?;
        let (own, argocd) = heard;
        if !(self.context.evaluator.cache().heard_throughout(own)
            && self.context.applications.cache().heard_throughout(argocd))
        {
            return Err(GateError::Silenced);
        }
        let written = api
            .patch_status(&gate.name_any(), &params, &Patch::Apply(&body))
            .await
            .inspect_err(|e| self.context.metrics.record_write_failure("gate", e))?;
        self.context.metrics.gate_status_writes.inc();
        let cluster = crate::metrics::ClusterLabel {
            cluster: self.context.cluster.clone(),
        };
        self.context
            .metrics
            .cluster_gate_status_writes
            .get_or_create(&cluster)
            .inc();
        tracing::info!(
            cluster = %self.context.cluster,
            gate = %format!("{}/{}", gate.namespace().unwrap_or_default(), gate.name_any()),
            health = %health_of(status),
            message = %status.health.as_ref().map_or("", |h| h.message.as_str()),
            "gate status written"
        );
        let version = written.resource_version().unwrap_or_default();
        let want = stamp::next(
            written
                .annotations()
                .get(stamp::ANNOTATION)
                .map(String::as_str),
            before,
            written.metadata.generation,
            status,
            &version,
            now.as_second(),
        );
        let stamp = match want {
            Some(want) => self.stamp(&api, &written, want).await,
            None => None,
        };
        Ok(Versions {
            status: written.resource_version(),
            stamp,
        })
    }

    /// Marks the written status in the gate's metadata with `want`, where Argo CD notices it
    /// (see [`stamp`]); the resourceVersion the mark produced. Best effort: the status is
    /// written either way, and without the mark Argo CD shows it at its next periodic refresh.
    /// `gate` is the gate as the status write left it (the stamp to change is the server's, not
    /// the cache's, which may be behind a stamp written a moment ago).
    ///
    /// The mark is conditional on the version the status write produced, so the versions this
    /// writer remembers stay contiguous (status, then mark) and its next write is never
    /// preconditioned on a version its own mark moved past. If anyone wrote in between, the
    /// mark is not made: their write usually makes Argo CD look again itself (metadata, spec).
    async fn stamp(&self, api: &Api<WaveGate>, gate: &WaveGate, want: String) -> Option<String> {
        let body = serde_json::json!({ "metadata": {
            "resourceVersion": gate.resource_version(),
            "annotations": { stamp::ANNOTATION: want },
        } });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        if let Err(e) = self.settings.fence.admit().await {
            tracing::warn!(error = %e, "gate stamp not written");
            return None;
        }
        match api
            .patch(&gate.name_any(), &params, &Patch::Merge(&body))
            .await
        {
            Ok(marked) => {
                self.context.metrics.gate_stamp_writes.inc();
                marked.resource_version()
            }
            Err(e) if refused_precondition(&e) => {
                self.context.metrics.record_write_failure("gate-stamp", &e);
                // Not wavegate's failure (not a write error, which pages): someone wrote between
                // the status and the mark. Most such writes make Argo CD look again anyway; one
                // its update filter ignores (another status writer) leaves the new message to
                // Argo CD's periodic refresh, so say so where an operator looks.
                tracing::warn!(
                    gate = %format!("{}/{}", gate.namespace().unwrap_or_default(), gate.name_any()),
                    "the gate changed between its status write and the mark ({}); not marked: \
                     Argo CD may show the new message only at its next periodic refresh",
                    stamp::ANNOTATION
                );
                None
            }
            Err(e) => {
                self.context.metrics.record_write_failure("gate-stamp", &e);
                tracing::warn!(
                    gate = %format!("{}/{}", gate.namespace().unwrap_or_default(), gate.name_any()),
                    error = %e,
                    "cannot mark the gate's new status where Argo CD notices it ({}); Argo CD \
                     shows the new message at its next periodic refresh",
                    stamp::ANNOTATION
                );
                None
            }
        }
    }

    fn forget(&self, key: &GateKey) {
        self.context
            .metrics
            .set_gate_health(&self.context.cluster, &key.0, &key.1, None);
        lock(&self.index).remove(key);
        lock(&self.written).remove(key);
        lock(&self.attempts).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::evaluate::EvalConfig;
    use crate::gate::crd::WaveGateSpec;
    use crate::health::Verdict;
    use kube::api::ObjectMeta;

    /// A gate controller whose API server refuses every write with `code` (the cache's API
    /// server never answers; nothing here reads it).
    fn refusing(code: u16) -> (Gates, Arc<Metrics>) {
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| async move {
            let status = serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                "reason": "Conflict",
                "message": "Operation cannot be fulfilled on wavegates.wavegate.dev \"g\": the object has been modified",
            });
            let body = serde_json::to_vec(&status).unwrap_or_default();
            http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(body))
        });
        let client = kube::Client::new(svc, "default");
        let metrics = Arc::new(Metrics::default());
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let cache = Cache::new(
            kube::Client::try_from(config).unwrap(),
            None,
            Duration::from_millis(50),
            metrics.clone(),
        );
        let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
        let gates = Gates {
            events: events::Publisher::new(client.clone(), metrics.clone()),
            context: Context {
                cluster: "in-cluster".into(),
                client,
                evaluator: evaluator.clone(),
                applications: evaluator,
                metrics: metrics.clone(),
                deploys_here: Arc::new(|_| true),
            },
            index: Mutex::default(),
            written: Mutex::default(),
            attempts: Mutex::default(),
            missing_crd_logged: AtomicBool::new(false),
            settings: Settings::new(Duration::from_secs(15)),
        };
        (gates, metrics)
    }

    fn gate() -> WaveGate {
        let mut g = WaveGate::new(
            "g",
            WaveGateSpec {
                timeout: None,
                checks: Vec::new(),
            },
        );
        g.metadata = ObjectMeta {
            namespace: Some("ddb".into()),
            generation: Some(1),
            resource_version: Some("5".into()),
            ..g.metadata
        };
        g
    }

    fn status(g: &WaveGate) -> WaveGateStatus {
        let now = k8s_openapi::jiff::Timestamp::now();
        let health = Verdict::progressing("waiting");
        crate::gate::status::next_status(g, None, Vec::new(), health, None, now, None)
    }

    #[tokio::test]
    async fn a_write_refused_by_its_precondition_is_no_write_error() {
        // Argo CD changed the gate while it was judged: the status is judged again (contract),
        // an expected outcome that must not page as wavegate failing to write.
        let (gates, metrics) = refusing(409);
        let g = gate();
        let now = k8s_openapi::jiff::Timestamp::now();
        let written = gates
            .write(
                &g,
                &status(&g),
                Some("5".into()),
                None,
                now,
                gates.silences(),
            )
            .await;
        assert!(
            written.is_err(),
            "the refusal is still a failed reconcile, retried"
        );
        let text = metrics.encode();
        assert!(
            text.contains(r#"wavegate_write_errors_total{writer="gate"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"wavegate_write_conflicts_total{writer="gate"} 1"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_verdict_judged_before_a_silence_is_not_written() {
        // Judged, then frozen (or the API server went away and came back), then about to be
        // sent: nobody else wrote the gate meanwhile, so its precondition would let it through.
        let (gates, metrics) = refusing(409);
        let g = gate();
        let now = k8s_openapi::jiff::Timestamp::now();
        let heard = gates.silences();
        gates.context.evaluator.cache().silence_for_test();
        let written = gates
            .write(&g, &status(&g), Some("5".into()), None, now, heard)
            .await;
        assert!(
            matches!(written, Err(GateError::Silenced)),
            "{:?}",
            written.err()
        );
        let text = metrics.encode();
        assert!(
            !text.contains(r#"wavegate_write_conflicts_total{writer="gate"} 1"#),
            "the write reached the API server: {text}"
        );
    }

    #[tokio::test]
    async fn a_write_refused_otherwise_is_a_write_error() {
        let (gates, metrics) = refusing(403);
        let g = gate();
        let now = k8s_openapi::jiff::Timestamp::now();
        let written = gates
            .write(
                &g,
                &status(&g),
                Some("5".into()),
                None,
                now,
                gates.silences(),
            )
            .await;
        assert!(written.is_err());
        let text = metrics.encode();
        assert!(
            text.contains(r#"wavegate_write_errors_total{writer="gate"} 1"#),
            "{text}"
        );
    }
}
