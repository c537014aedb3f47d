//! The watch-backed cache: the only place wavegate reads the cluster.
//!
//! One kube-rs reflector per kind (and per namespace when scoped), started the first time a check
//! needs that kind, so wavegate never lists or watches what nobody asks about. Stores hold only
//! what the checks read: pods, Services and EndpointSlices as compact views ([`crate::views`])
//! in stores of wavegate's own ([`crate::store_index`]), every other object (kube-rs' reflector
//! store of JSON objects) without its managed fields and last-applied annotation, and, for a
//! kind read as a type (WaveGates), parsed once when its watch event arrives.
//!
//! This module is the facade the rest of wavegate reads through; each concern behind it has a
//! module of its own: `watches` (the watch table: one entry per watch, saying which store it
//! feeds and where it stands), `reflect` (the watch task), `objects` (the store of a dynamic
//! kind), `strip` (what whole objects lose), `discovery`, `access` (the
//! SelfSubjectAccessReview before a watch starts), `heartbeat` and `marks` (moved around every
//! store write and phase change, so a verdict can be kept until what it read changes).
//!
//! A read succeeds only from a watch whose latest list has completed and which has not failed
//! since. A watch is in one of three phases:
//! - **listing**: its first list has not completed; a read waits `--sync-wait` for it, then is
//!   an error (never an empty list, which would let a check conclude "no pods");
//! - **synced**: reads are served from the store;
//! - **relisting after an error**: any watch error (410 Gone after a compaction, a restarted or
//!   unreachable API server, a 403 after RBAC changed) ends that watch, and a fresh list starts
//!   after a backoff. kube-rs' reflector keeps the pre-outage objects in the store until the new
//!   list completes (`Event::InitDone`), so until then reads are an error ("relisting after …")
//!   instead of old objects served as if fresh. Recovery is proven by that completed list, not
//!   by a timer: kube-rs would otherwise resume a broken watch from its last resourceVersion
//!   silently, and a quiet kind would never show that it had recovered.
//!
//! Silence is not health either: a paused API server, or a wavegate that was itself frozen,
//! produces no watch error. A heartbeat on the API server's `/readyz` relists every watch when it
//! fails or answers again after a silence, and a store is read only while a heartbeat or its own
//! latest list vouches for it (see [`WatchLimits::heartbeat`]).
//!
//! Readiness (`/readyz`) covers only the watches the process itself requires
//! ([`Cache::require`]: `serve` requires WaveGates). Watches started for a caller's read are
//! on demand: checked with a SelfSubjectAccessReview first (a kind RBAC forbids is a clear error,
//! not a watch that never syncs), bounded in number, and stopped when nobody has read them for a
//! while.

mod access;
mod bounds;
mod discovery;
#[cfg(test)]
pub(crate) mod fed;
mod heartbeat;
mod marks;
mod objects;
mod reflect;
mod sink;
mod strip;
#[cfg(test)]
mod tests;
mod watches;

pub(crate) use marks::{Dep, Look as MarkLook, Marks, Stamp as MarkStamp};
pub(crate) use strip::ARGOCD_MANAGER;

use crate::app_status::App;
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::resource::GroupResource;
use crate::store_index::{Bucket, StoreIndex, StoreWriter};
use crate::views::{Interner, PodView, ServiceView, SliceView};
use access::AccessExpiry;
use discovery::Catalog;
use heartbeat::heartbeat;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use kube::{Client, Resource as KubeResource};
pub(crate) use objects::Decoded;
use objects::Objects;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sink::Sink;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::broadcast;
use watches::{Feed, Phase, Views, WatchTable, Watched, evict_idle, label_of};

/// Changes buffered for a slow subscriber before it lags (and then re-reconciles everything, see
/// `queue::run`): a Deployment rollout of a few hundred pods fits.
const CHANGE_FEED_CAPACITY: usize = 4096;

/// Unscoped (no `--namespaces`), reads of one namespace start a watch of that namespace only,
/// until this many namespaces of one kind are watched; then one cluster-wide watch costs the
/// API server and wavegate less than more namespaced ones would.
const NAMESPACES_PER_KIND: usize = 8;

/// Argo CD's Applications, read with their resource lists ([`Cache::application`]).
pub(crate) const APPLICATIONS: GroupResource = GroupResource::fixed("argoproj.io", "applications");

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub(crate) enum CacheError {
    #[error("namespace {0} is not watched by this wavegate (see --namespaces)")]
    NamespaceNotWatched(String),
    #[error("CRD {0} is not installed in the cluster")]
    NotInstalled(String),
    #[error("the cache of {0} has not synced yet")]
    NotSynced(String),
    /// A watch that never listed, and whose list failed: unlike [`CacheError::NotSynced`], not
    /// merely a list on its way (a verdict written before is not kept over it, see
    /// `gate::decide`).
    #[error("the cache of {what} has not synced yet: its list failed: {error}")]
    ListFailing { what: String, error: String },
    /// Between a watch error and the completed relist that follows it: the store still holds
    /// what was listed before the error.
    #[error("the cache of {what} is relisting after {error}")]
    Relisting { what: String, error: String },
    #[error(
        "wavegate's ServiceAccount may not list and watch {what} (RBAC); grant get, list and watch on it, or do not check this kind"
    )]
    Forbidden { what: String },
    #[error(
        "wavegate already keeps {max} watches for on-demand reads (--max-watches), so it does not start one on {what}; one is stopped after --watch-idle without reads"
    )]
    TooManyWatches { what: String, max: usize },
    #[error("cannot review wavegate's access to {what}: {error}")]
    AccessReview { what: String, error: String },
    #[error("discovery of {what} failed: {error}")]
    Discovery { what: String, error: String },
    /// Pods, Services and EndpointSlices are kept only as compact views (`views`): a
    /// full-object watch of them would hold every pod's environment and cost what the views
    /// were made to save.
    #[error("{0} are read only through wavegate's compact views, never as whole objects")]
    CompactOnly(String),
    /// Refused by the installer's policy (`--generic-kinds`).
    #[error("{0}")]
    NotAllowed(String),
}

impl CacheError {
    /// What was asked for is out of this cache's reach however long one waits on it: a kind
    /// the API server does not serve, a namespace outside `--namespaces`. Every other error
    /// is about a watch (not synced, relisting, refused, bounded) or discovery failing: it
    /// may pass.
    pub(crate) fn out_of_reach(&self) -> bool {
        matches!(
            self,
            CacheError::NotInstalled(_) | CacheError::NamespaceNotWatched(_)
        )
    }
}

/// An object changed somewhere wavegate watches. The gate controller re-evaluates gates that
/// reference it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub kind: GroupResource,
    pub namespace: String,
    pub name: String,
}

/// Bounds on the watches started for callers' reads (never on the ones the process requires).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchLimits {
    /// An on-demand watch nobody has read for this long is stopped (its store dropped).
    pub idle: Duration,
    /// At most this many on-demand watches at once; a read that needs one more is refused.
    pub max_on_demand: usize,
    /// How often the API server is asked whether it still answers, and how long it has to
    /// answer. A watch on a paused or wedged API server (SIGSTOP, a brown-out) sees no error at
    /// all: kube-rs gives up on an idle stream only after the watch timeout (290 s), then waits
    /// for the new watch request without a deadline. A missed heartbeat turns every watch to
    /// relisting, so reads stop being served as fresh within twice this.
    pub heartbeat: Duration,
    /// At most this many objects in all of this cache's watches together (`None`: no bound).
    /// Set for remote clusters, whose API servers may be less trusted than the home one: a
    /// watch whose objects would pass it is stopped and emptied, its reads say why (Unknown /
    /// Progressing, never Healthy), and it is retried after [`OVER_BOUND_RETRY`].
    pub max_objects: Option<usize>,
    /// At most about this many bytes in all of this cache's watches together (`None`: no
    /// bound), each object weighed by the text it keeps (`bounds`); an object whose labels or
    /// annotations pass Kubernetes' own limits is not held at all. Set for remote clusters with
    /// `max_objects`, and enforced as it is: a few objects with huge labels, sent page by page,
    /// would fill memory far below any object bound.
    pub max_bytes: Option<usize>,
}

/// What all watches of one cache hold together (see `WatchLimits::max_objects`, `max_bytes`).
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) objects: AtomicUsize,
    /// Counted only by bounded watches.
    pub(crate) bytes: AtomicUsize,
}

impl Default for WatchLimits {
    fn default() -> Self {
        WatchLimits {
            idle: Duration::from_secs(600),
            max_on_demand: 64,
            heartbeat: Duration::from_secs(5),
            max_objects: None,
            max_bytes: None,
        }
    }
}

pub struct Cache {
    client: Client,
    /// `None`: watch cluster-wide. `Some`: one watch per listed namespace, nothing else.
    namespaces: Option<BTreeSet<String>>,
    sync_wait: Duration,
    limits: WatchLimits,
    watches: WatchTable,
    /// The cluster's discovery document (`discovery`).
    catalog: Catalog,
    /// (group, plural, namespace or "") → may wavegate list and watch it.
    access: moka::future::Cache<(String, String, String), bool>,
    /// Resources (`wavegates.wavegate.dev`) whose watches readiness covers,
    /// with why it could not be started last time, if it could not.
    required: Mutex<BTreeMap<String, Option<CacheError>>>,
    held: Arc<Held>,
    /// When the API server last answered the heartbeat.
    heard: Mutex<Instant>,
    /// How many silences the heartbeat has found (see [`Cache::silences`]).
    silences: AtomicU64,
    /// When the heartbeat last counted one: only lists begun after it vouch for the stores in
    /// the heartbeat's stead (see [`Cache::vouched`]).
    silenced_at: Mutex<Option<Instant>>,
    changes: broadcast::Sender<Change>,
    /// Moved on by every change any read could see: an event applied to any store, a watch
    /// listed, failing, relisting, stopped or evicted (see [`Cache::epoch`]).
    epoch: Arc<AtomicU64>,
    /// Per object, per (kind, namespace) and for the watches' phases: what a verdict is kept
    /// by until what it read changes (see `marks`).
    marks: Arc<Marks>,
    metrics: Arc<Metrics>,
    /// Kinds whose watches the test feeds (`fed`).
    #[cfg(test)]
    fed: fed::Fed,
}

/// A dropped cache stops its watches: their tasks hold no reference to it, so without this a
/// destination cluster removed at runtime (`clusters`) would go on being watched.
impl Drop for Cache {
    fn drop(&mut self) {
        self.watches.stop_all();
    }
}

impl Cache {
    /// `sync_wait` bounds how long a first read waits for a new watch to list its objects.
    pub fn new(
        client: Client,
        namespaces: Option<BTreeSet<String>>,
        sync_wait: Duration,
        metrics: Arc<Metrics>,
    ) -> Arc<Cache> {
        Self::with_limits(
            client,
            namespaces,
            sync_wait,
            WatchLimits::default(),
            metrics,
        )
    }

    pub(crate) fn with_limits(
        client: Client,
        namespaces: Option<BTreeSet<String>>,
        sync_wait: Duration,
        limits: WatchLimits,
        metrics: Arc<Metrics>,
    ) -> Arc<Cache> {
        let (changes, _) = broadcast::channel(CHANGE_FEED_CAPACITY);
        let cache = Arc::new(Cache {
            client,
            namespaces,
            sync_wait,
            limits,
            watches: WatchTable::default(),
            catalog: Catalog::default(),
            access: moka::future::Cache::builder()
                .expire_after(AccessExpiry)
                .max_capacity(1024)
                .build(),
            required: Mutex::default(),
            held: Arc::default(),
            heard: Mutex::new(Instant::now()),
            silences: AtomicU64::new(0),
            silenced_at: Mutex::new(None),
            changes,
            epoch: Arc::default(),
            marks: Arc::default(),
            metrics,
            #[cfg(test)]
            fed: Default::default(),
        });
        tokio::spawn(evict_idle(Arc::downgrade(&cache)));
        tokio::spawn(heartbeat(Arc::downgrade(&cache)));
        cache
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// A number that moves whenever anything a read of this cache answers may have changed:
    /// equal epochs mean every read would answer the same (as far as the stores go; reads
    /// refused for silence are [`Cache::vouched`]'s). What is derived from reads may be kept
    /// while the epoch stays.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The marks of change of every read of this cache (see `marks`): a verdict whose reads'
    /// marks hold may be kept, while [`Cache::vouched`] says the stores are served at all.
    pub(crate) fn marks(&self) -> &Marks {
        &self.marks
    }

    /// Whether reads are served at all: a heartbeat vouched for the stores lately (see
    /// `silence`), or every watch listed since as lately. Unvouched, a read may be refused
    /// without any epoch having moved.
    ///
    /// The lists count as much as a heartbeat: they are consistent reads (kube-rs'
    /// `ListSemantic::MostRecent`), and every watch was turned to relisting when the heartbeat
    /// first failed. After an etcd restart the API server serves lists again before its own
    /// `/readyz` passes (and a heartbeat that asked it in the meantime may wait out its 5 s
    /// timeout): reads were served from the new lists while the gate controller's writes,
    /// guarded by this, waited for the heartbeat. Under the full suite's load the faults e2e
    /// saw a gate stay Healthy 8.5 s after its pod turned NotReady, with wavegate's verdict
    /// right all along. A process frozen past the heartbeat's window has no such list, unless
    /// every watch relisted after the thaw.
    pub(crate) fn vouched(&self) -> bool {
        if self.silence(None).is_none() {
            return true;
        }
        let since = *lock(&self.silenced_at);
        self.watches
            .all_listed_within(2 * self.limits.heartbeat, since)
    }

    /// How many times the heartbeat has found the API server silent, or answering again after
    /// a silence (this process frozen, the API server away), and relisted the watches. What
    /// was decided from reads made before a silence must not be acted on after it, even where
    /// the reads were vouched for when made: a status judged, then frozen for a minute, then
    /// written, would be a minute old and nobody's write would stand in its way.
    pub(crate) fn silences(&self) -> u64 {
        self.silences.load(Ordering::Acquire)
    }

    /// A silence as the heartbeat counts one, without waiting for it.
    #[cfg(test)]
    pub(crate) fn silence_for_test(&self) {
        self.count_silence();
    }

    /// Count a silence: what was judged before it is not acted on after it, and only lists
    /// begun after it vouch for the stores in the heartbeat's stead.
    pub(super) fn count_silence(&self) {
        *lock(&self.silenced_at) = Some(Instant::now());
        self.silences.fetch_add(1, Ordering::AcqRel);
    }

    /// What a freeze of this process (SIGSTOP) for `frozen` leaves behind: the heartbeat last
    /// answered before it, and every watch listed just after that answer.
    #[cfg(test)]
    pub(crate) fn freeze_for_test(&self, frozen: Duration) {
        let thawed = Instant::now();
        *lock(&self.heard) = thawed - frozen - Duration::from_millis(10);
        self.watches.listed_at_for_test(thawed - frozen);
    }

    /// Whether what was decided from reads made after [`Cache::silences`] answered `silences`
    /// may still be acted on: no silence came since, and the stores are vouched for now.
    pub(crate) fn heard_throughout(&self, silences: u64) -> bool {
        self.silences() == silences && self.vouched()
    }

    /// How long an on-demand watch may go unread before it is stopped: what is derived from
    /// reads must be read again before then, or its watches stop following the cluster.
    pub(crate) fn watch_idle(&self) -> Duration {
        self.limits.idle
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Make readiness cover the watches of `plural.group` (in every watched namespace), and
    /// start them now, retrying until they start (a CRD installed later, an API server that
    /// is not up yet). They are never bounded or evicted.
    pub fn require(self: &Arc<Self>, kind: GroupResource) {
        let what = kind.to_string();
        // A required kind is read cluster-wide, no longer through namespaced watches: which
        // watch serves its reads changes, and nothing read before may be kept across it.
        self.marks.phase_begins();
        lock(&self.required).insert(what.clone(), None);
        self.marks.phase_ends();
        let cache = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut backoff = watcher::DefaultBackoff::default();
            loop {
                let Some(c) = cache.upgrade() else { return };
                let error = match c.objects(&kind, None).await {
                    Ok(_)
                    | Err(
                        CacheError::NotSynced(_)
                        | CacheError::ListFailing { .. }
                        | CacheError::Relisting { .. },
                    ) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start a required watch; retrying");
                        Some(e)
                    }
                };
                let started = error.is_none();
                lock(&c.required).insert(what.clone(), error);
                if started {
                    return;
                }
                drop(c);
                tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(30))).await;
            }
        });
    }

    /// Ready when every required watch has listed and is not relisting (`/readyz`): the
    /// number of such watches, or the reasons it is not ready. Watches started for callers'
    /// reads never count, so no caller can make wavegate NotReady.
    pub(crate) fn readiness(&self) -> Result<usize, Vec<String>> {
        let required = lock(&self.required).clone();
        let scopes: Vec<Option<String>> = match &self.namespaces {
            None => vec![None],
            Some(list) => list.iter().cloned().map(Some).collect(),
        };
        let phases = self.watches.required_phases();
        let mut problems = Vec::new();
        let mut synced = 0;
        for (what, not_started) in &required {
            for scope in &scopes {
                let label = label_of(what, scope);
                match phases.get(&(what.clone(), scope.clone())).cloned() {
                    // Nothing to watch yet (the WaveGate CRD is installed by a later wave, or
                    // not at all where only the HTTP API is used): nothing stale to serve.
                    None if matches!(not_started, Some(CacheError::NotInstalled(_))) => {}
                    None => problems.push(match not_started {
                        Some(e) => format!("{label}: not watched yet: {e}"),
                        None => format!("{label}: not watched yet"),
                    }),
                    Some((Phase::Listing, _)) => problems.push(format!("{label}: not synced yet")),
                    Some((Phase::Relisting(e), _)) => {
                        problems.push(format!("{label}: relisting after {e}"))
                    }
                    // Synced, but nothing has vouched for the store lately: reads are refused,
                    // so readiness says so too.
                    Some((Phase::Synced, listed_at)) => match self.silence(listed_at) {
                        None => synced += 1,
                        Some(silence) => problems.push(format!("{label}: {silence}")),
                    },
                }
            }
        }
        if problems.is_empty() {
            Ok(synced)
        } else {
            Err(problems)
        }
    }

    /// How many watches run, and how many objects the required ones (WaveGates) hold: what
    /// judging this cluster costs, which weighs it on `serve --shards`' ring.
    pub(crate) fn load(&self) -> (usize, usize) {
        self.watches.load()
    }

    /// Pods of one namespace, in name order (a check that names the first few pods must not
    /// reword an unchanged verdict).
    pub(crate) async fn pods(&self, namespace: &str) -> Result<Vec<Arc<PodView>>, CacheError> {
        let w = self
            .typed_watch::<Pod, _>(GroupResource::PODS, namespace, PodView::project, None)
            .await?;
        self.read(&w).await?;
        Ok(w.reader.in_namespace(namespace))
    }

    /// One pod's view (`None` when it does not exist).
    pub(crate) async fn pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<PodView>>, CacheError> {
        let w = self
            .typed_watch::<Pod, _>(GroupResource::PODS, namespace, PodView::project, None)
            .await?;
        self.read(&w).await?;
        Ok(w.reader.get(namespace, name))
    }

    pub(crate) async fn service(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<ServiceView>>, CacheError> {
        let w = self
            .typed_watch::<Service, _>(
                GroupResource::SERVICES,
                namespace,
                ServiceView::project,
                None,
            )
            .await?;
        self.read(&w).await?;
        Ok(w.reader.get(namespace, name))
    }

    /// EndpointSlices of one Service: those labelled `kubernetes.io/service-name=<name>`
    /// (discovery.k8s.io/v1 `LabelServiceName`), which is how the EndpointSlice controller and
    /// kube-proxy associate slices with a Service.
    pub(crate) async fn endpoint_slices(
        &self,
        namespace: &str,
        service: &str,
    ) -> Result<Vec<Arc<SliceView>>, CacheError> {
        let w = self
            .typed_watch::<EndpointSlice, _>(
                GroupResource::ENDPOINT_SLICES,
                namespace,
                SliceView::project,
                Some(|s| s.service.as_ref()),
            )
            .await?;
        self.read(&w).await?;
        Ok(w.reader.in_bucket(namespace, service))
    }

    /// One object of any kind, as JSON (`None` when it does not exist).
    pub(crate) async fn object(
        &self,
        kind: &GroupResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Value>>, CacheError> {
        let w = self.dynamic_watch(kind, namespace).await?;
        self.read(&w).await?;
        Ok(w.reader.get(namespace, name))
    }

    /// One object of a kind read as a type of the caller's (`None` when it does not exist):
    /// parsed once, when its watch event arrived, and a parse error kept as the object's own.
    pub(crate) async fn object_as<T: DeserializeOwned + Send + Sync + 'static>(
        &self,
        kind: &GroupResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Decoded<T>>, CacheError> {
        let w = self.dynamic_watch(kind, namespace).await?;
        self.read(&w).await?;
        Ok(w.reader.get_as(namespace, name))
    }

    /// All objects of a kind in one namespace, or in every watched namespace when `namespace`
    /// is `None`.
    pub(crate) async fn objects(
        &self,
        kind: &GroupResource,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<Value>>, CacheError> {
        let mut out = Vec::new();
        for (scope, w) in self.dynamic_watches(kind, namespace).await? {
            out.extend(w.reader.all(scope.as_deref()));
        }
        Ok(out)
    }

    /// [`Cache::objects`], read as a type of the caller's.
    pub(crate) async fn objects_as<T: DeserializeOwned + Send + Sync + 'static>(
        &self,
        kind: &GroupResource,
        namespace: Option<&str>,
    ) -> Result<Vec<Decoded<T>>, CacheError> {
        let mut out = Vec::new();
        for (scope, w) in self.dynamic_watches(kind, namespace).await? {
            out.extend(w.reader.all_as(scope.as_deref()));
        }
        Ok(out)
    }

    /// One Argo CD Application (`None` when it does not exist): its JSON and its resource lists
    /// ([`App`]), of one version.
    pub(crate) async fn application(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<App>, CacheError> {
        let w = self.dynamic_watch(&APPLICATIONS, namespace).await?;
        self.read(&w).await?;
        Ok(w.reader
            .get_with_lists(namespace, name)
            .map(|(json, lists)| App::kept(json, lists)))
    }

    /// Every Application in `namespace`, or in every watched namespace when `None`, as
    /// [`Cache::application`] reads one.
    pub(crate) async fn applications(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<App>, CacheError> {
        let mut out = Vec::new();
        for (scope, w) in self.dynamic_watches(&APPLICATIONS, namespace).await? {
            out.extend(
                (w.reader.all_with_lists(scope.as_deref()).into_iter())
                    .map(|(json, lists)| App::kept(json, lists)),
            );
        }
        Ok(out)
    }

    /// The namespace and name of every object [`Cache::objects`] would return.
    pub(crate) async fn names(
        &self,
        kind: &GroupResource,
        namespace: Option<&str>,
    ) -> Result<Vec<(String, String)>, CacheError> {
        let mut out = Vec::new();
        for (scope, w) in self.dynamic_watches(kind, namespace).await? {
            out.extend(w.reader.names(scope.as_deref()));
        }
        Ok(out)
    }

    /// The watches of a dynamic kind that hold its objects in `namespace`, or in every watched
    /// namespace when `None`, each once readable, with the namespace its objects are taken from
    /// (a cluster-wide watch read for one namespace).
    async fn dynamic_watches(
        &self,
        kind: &GroupResource,
        namespace: Option<&str>,
    ) -> Result<Vec<(Option<String>, Watched<Objects>)>, CacheError> {
        let scopes: Vec<Option<String>> = match (namespace, &self.namespaces) {
            (Some(ns), _) => vec![Some(ns.to_string())],
            (None, Some(list)) => list.iter().cloned().map(Some).collect(),
            (None, None) => vec![None],
        };
        let mut out = Vec::new();
        for scope in scopes {
            let w = self
                .dynamic_watch(kind, scope.as_deref().unwrap_or(""))
                .await?;
            self.read(&w).await?;
            out.push((scope, w));
        }
        Ok(out)
    }

    /// Which watch of `what` (feeding `R`) a namespace's reads go to. Scoped (`--namespaces`): the
    /// namespace's own, and none outside the list. Unscoped: the cluster-wide one when the
    /// process requires the kind everywhere or one runs already; otherwise the namespace's
    /// own, so that a read about one namespace does not make wavegate hold (and the API server
    /// send) every namespace's objects of the kind — up to [`NAMESPACES_PER_KIND`] namespaces.
    fn scope_in<R: Feed>(&self, what: &str, namespace: &str) -> Result<Option<String>, CacheError> {
        match &self.namespaces {
            Some(list) if list.contains(namespace) => Ok(Some(namespace.to_string())),
            Some(_) => Err(CacheError::NamespaceNotWatched(namespace.to_string())),
            None => {
                if lock(&self.required).contains_key(what) {
                    return Ok(None);
                }
                Ok(self
                    .watches
                    .unscoped::<R>(what, namespace, NAMESPACES_PER_KIND))
            }
        }
    }

    /// How long a first read waits for a new watch to list (`--sync-wait`): what a view that
    /// reads many kinds at once gives all of its reads together.
    pub(crate) fn sync_wait(&self) -> Duration {
        self.sync_wait
    }

    async fn read<R>(&self, w: &Watched<R>) -> Result<(), CacheError> {
        w.health.touch();
        let listed = w.health.listed.notified();
        if w.health.phase() == Phase::Listing {
            let _ = tokio::time::timeout(self.sync_wait, listed).await;
        }
        match w.health.phase() {
            Phase::Synced => match self.silence(w.health.listed_at()) {
                None => Ok(()),
                Some(error) => Err(CacheError::Relisting {
                    what: w.label.clone(),
                    error,
                }),
            },
            Phase::Listing => Err(match w.health.list_failed() {
                Some(error) => CacheError::ListFailing {
                    what: w.label.clone(),
                    error,
                },
                None => CacheError::NotSynced(w.label.clone()),
            }),
            Phase::Relisting(error) => Err(CacheError::Relisting {
                what: w.label.clone(),
                error,
            }),
        }
    }

    /// The watch of a typed kind, kept as views `V` projected from each `K` it delivers.
    async fn typed_watch<K, V>(
        &self,
        kind: GroupResource,
        namespace: &str,
        project: fn(&K, &mut Interner) -> V,
        bucket: Option<Bucket<V>>,
    ) -> Result<Watched<Views<V>>, CacheError>
    where
        K: KubeResource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Debug
            + Send
            + Sync
            + serde::de::DeserializeOwned
            + 'static,
        V: crate::views::View,
        Views<V>: Feed,
    {
        let what = kind.to_string();
        let scope = self.scope_in::<Views<V>>(&what, namespace)?;
        if let Some(w) = self.watches.get(&what, &scope) {
            return Ok(w);
        }
        // Boxed, here and in `dynamic_watch`: starting a watch (discovery, an access review)
        // is a state machine of kilobytes, which every read's future would otherwise carry
        // and move although the watch runs already — per resource of a view.
        Box::pin(self.authorize(&kind, &scope)).await?;
        let api: Api<K> = match &scope {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let store = StoreIndex::new(bucket);
        let writer = StoreWriter::new(store.clone(), project);
        self.start(kind, scope, api, store, writer)
    }

    async fn dynamic_watch(
        &self,
        kind: &GroupResource,
        namespace: &str,
    ) -> Result<Watched<Objects>, CacheError> {
        let what = kind.to_string();
        // Whole pods carry environment values and slices are only ever read compactly; a view
        // that names one must not start a cluster-wide watch of them. Whole Services stay
        // readable: annotation mode patches the Service itself and needs its annotations and
        // resourceVersion, and a Service's spec holds nothing a pod's env would.
        if [GroupResource::PODS, GroupResource::ENDPOINT_SLICES].contains(kind) {
            return Err(CacheError::CompactOnly(what));
        }
        let scope = if namespace.is_empty() {
            None
        } else {
            self.scope_in::<Objects>(&what, namespace)?
        };
        if let Some(w) = self.watches.get(&what, &scope) {
            return Ok(w);
        }
        let ar = Box::pin(self.discover(kind)).await?;
        Box::pin(self.authorize(kind, &scope)).await?;
        let api: Api<DynamicObject> = match &scope {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let (objects, sink) = Objects::new(ar, strip::for_kind(kind), strip::lists_taken_for(kind));
        self.start(kind.clone(), scope, api, objects, sink)
    }

    /// Start the watch of `kind` in `scope` unless another read just did: required ones
    /// (readiness covers them) unbounded, on-demand ones within `max_on_demand`.
    fn start<R, K, S>(
        &self,
        kind: GroupResource,
        scope: Option<String>,
        api: Api<K>,
        reader: R,
        sink: S,
    ) -> Result<Watched<R>, CacheError>
    where
        R: Feed,
        K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
        S: Sink<K>,
    {
        let what = kind.to_string();
        let required = lock(&self.required).contains_key(&what);
        self.watches.get_or_start(
            &what,
            scope,
            reader,
            required,
            self.limits.max_on_demand,
            |label| self.spawn(api, sink, kind, label, required),
        )
    }
}
