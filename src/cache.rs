//! The watch-backed cache: the only place wavegate reads the cluster.
//!
//! One kube-rs reflector per kind (and per namespace when scoped), started the first time a check
//! needs that kind, so wavegate never lists or watches what nobody asks about. Stores hold only
//! what the checks read: pods, Services and EndpointSlices as compact views ([`crate::views`])
//! in stores of wavegate's own ([`crate::store_index`]), every other object (kube-rs' reflector
//! store of JSON objects) without its managed fields and last-applied annotation.
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

use crate::locks::lock;
use crate::metrics::{Metrics, ResourceLabel};
use crate::resource::Kind;
use crate::store_index::{Bucket, StoreIndex, StoreWriter};
use crate::views::{Interner, PodView, ServiceView, SliceView};
use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource as KubeResource, ResourceExt};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::{Notify, broadcast};
use tokio::task::AbortHandle;

/// How long positive and negative discovery answers are kept. A CRD installed later is picked
/// up within the negative TTL.
const DISCOVERY_TTL: Duration = Duration::from_secs(300);
const DISCOVERY_MISS_TTL: Duration = Duration::from_secs(10);

/// How long an access review's answer is kept. A grant an administrator adds is picked up
/// within the denial TTL; a grant revoked while a watch runs shows at once as a failing watch.
const ACCESS_TTL: Duration = Duration::from_secs(300);
const ACCESS_DENIED_TTL: Duration = Duration::from_secs(30);

/// Between a watch error and the next list: doubling from the first to the last delay. Short,
/// unlike kube-rs' default (up to 30 s): every second of backoff is a second in which nothing
/// that depends on the watch can be judged, and wavegate has only a handful of watches.
const RELIST_FIRST_DELAY: Duration = Duration::from_millis(500);
const RELIST_LAST_DELAY: Duration = Duration::from_secs(5);

/// How often the heartbeat asks again while the API server does not answer, so that its return
/// is noticed (and the watches relisted) within this.
const HEARTBEAT_RETRY: Duration = Duration::from_secs(1);

/// Changes buffered for a slow subscriber before it lags (and then re-reconciles everything, see
/// `queue::run`): a Deployment rollout of a few hundred pods fits.
const CHANGE_FEED_CAPACITY: usize = 4096;

/// How long a watch stopped at the object bound waits before listing again: each try makes the
/// API server send (and wavegate parse) up to the bound again.
const OVER_BOUND_RETRY: Duration = Duration::from_secs(60);

/// Unscoped (no `--namespaces`), reads of one namespace start a watch of that namespace only,
/// until this many namespaces of one kind are watched; then one cluster-wide watch costs the
/// API server and wavegate less than more namespaced ones would.
const NAMESPACES_PER_KIND: usize = 8;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub(crate) enum CacheError {
    #[error("namespace {0} is not watched by this wavegate (see --namespaces)")]
    NamespaceNotWatched(String),
    #[error("CRD {0} is not installed in the cluster")]
    NotInstalled(String),
    #[error("the cache of {0} has not synced yet")]
    NotSynced(String),
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

/// An object changed somewhere wavegate watches. The gate controller re-evaluates gates that
/// reference it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub kind: Kind,
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
}

impl Default for WatchLimits {
    fn default() -> Self {
        WatchLimits {
            idle: Duration::from_secs(600),
            max_on_demand: 64,
            heartbeat: Duration::from_secs(5),
            max_objects: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Listing,
    Synced,
    Relisting(String),
}

/// Where one watch stands, and when it was last read.
struct WatchHealth {
    phase: Mutex<Phase>,
    listed: Notify,
    /// When the latest list completed: proof, as good as a heartbeat, that the store was fresh.
    listed_at: Mutex<Option<Instant>>,
    /// Wakes the watch's task to drop its stream and relist (a heartbeat's word).
    relist_now: Notify,
    last_read: Mutex<Instant>,
}

impl WatchHealth {
    fn new() -> Self {
        WatchHealth {
            phase: Mutex::new(Phase::Listing),
            listed: Notify::new(),
            listed_at: Mutex::new(None),
            relist_now: Notify::new(),
            last_read: Mutex::new(Instant::now()),
        }
    }

    fn phase(&self) -> Phase {
        lock(&self.phase).clone()
    }

    /// A watch error: a synced watch is relisting from now on; one that never listed is still
    /// listing.
    fn failed(&self, error: String) {
        let mut phase = lock(&self.phase);
        if *phase != Phase::Listing {
            *phase = Phase::Relisting(error);
        }
    }

    /// Stopped for a reason that outlasts a list (the object bound): reads give it, even
    /// before the first list completed.
    fn stopped(&self, error: String) {
        *lock(&self.phase) = Phase::Relisting(error);
        self.listed.notify_waiters();
    }

    fn listed(&self) {
        *lock(&self.listed_at) = Some(Instant::now());
        *lock(&self.phase) = Phase::Synced;
        self.listed.notify_waiters();
    }

    fn listed_at(&self) -> Option<Instant> {
        *lock(&self.listed_at)
    }

    fn touch(&self) {
        *lock(&self.last_read) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_read).elapsed()
    }
}

/// One watch, read through `R`: the views of a typed kind ([`StoreIndex`]), or the reflector
/// store of a dynamic one ([`Objects`]).
#[derive(Clone)]
struct Watch<R> {
    reader: R,
    health: Arc<WatchHealth>,
    /// `pods in shop`, `wavegates.wavegate.dev`: what messages call this watch.
    label: String,
    /// Required by the process: counts for readiness, never bounded or evicted.
    required: bool,
    task: AbortHandle,
}

/// The objects of a dynamic kind, as JSON, and the resource they are.
#[derive(Clone)]
struct Objects {
    store: Store<DynamicObject>,
    resource: ApiResource,
}

/// Watches of one type by (resource, namespace scope).
type WatchKey = (String, Option<String>);
type WatchSet<R> = Mutex<HashMap<WatchKey, Watch<R>>>;
type Views<V> = Arc<StoreIndex<V>>;

pub struct Cache {
    client: Client,
    /// `None`: watch cluster-wide. `Some`: one watch per listed namespace, nothing else.
    namespaces: Option<BTreeSet<String>>,
    sync_wait: Duration,
    limits: WatchLimits,
    pods: WatchSet<Views<PodView>>,
    services: WatchSet<Views<ServiceView>>,
    slices: WatchSet<Views<SliceView>>,
    dynamic: WatchSet<Objects>,
    discovered: moka::future::Cache<(String, Served), Result<ApiResource, CacheError>>,
    /// (group, plural, namespace or "") → may wavegate list and watch it.
    access: moka::future::Cache<(String, String, String), bool>,
    /// Resources (`wavegates.wavegate.dev`) whose watches readiness covers,
    /// with why it could not be started last time, if it could not.
    required: Mutex<BTreeMap<String, Option<CacheError>>>,
    on_demand: AtomicUsize,
    /// Objects held by all watches (see `WatchLimits::max_objects`).
    held: Arc<AtomicUsize>,
    /// When the API server last answered the heartbeat.
    heard: Mutex<Instant>,
    changes: broadcast::Sender<Change>,
    metrics: Arc<Metrics>,
}

/// A dropped cache stops its watches: their tasks hold no reference to it, so without this a
/// destination cluster removed at runtime (`clusters`) would go on being watched.
impl Drop for Cache {
    fn drop(&mut self) {
        fn stop<R>(set: &WatchSet<R>) {
            for w in lock(set).values() {
                w.task.abort();
            }
        }
        stop(&self.pods);
        stop(&self.services);
        stop(&self.slices);
        stop(&self.dynamic);
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
            pods: Mutex::default(),
            services: Mutex::default(),
            slices: Mutex::default(),
            dynamic: Mutex::default(),
            discovered: moka::future::Cache::builder()
                .expire_after(DiscoveryExpiry)
                .max_capacity(512)
                .build(),
            access: moka::future::Cache::builder()
                .expire_after(AccessExpiry)
                .max_capacity(1024)
                .build(),
            required: Mutex::default(),
            on_demand: AtomicUsize::new(0),
            held: Arc::default(),
            heard: Mutex::new(Instant::now()),
            changes,
            metrics,
        });
        tokio::spawn(evict_idle(Arc::downgrade(&cache)));
        tokio::spawn(heartbeat(Arc::downgrade(&cache)));
        cache
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Make readiness cover the watches of `plural.group` (in every watched namespace), and
    /// start them now, retrying until they start (a CRD installed later, an API server that
    /// is not up yet). They are never bounded or evicted.
    pub fn require(self: &Arc<Self>, kind: Kind) {
        let what = kind.to_string();
        lock(&self.required).insert(what.clone(), None);
        let cache = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut backoff = watcher::DefaultBackoff::default();
            loop {
                let Some(c) = cache.upgrade() else { return };
                let error = match c.objects(&kind, None).await {
                    Ok(_) | Err(CacheError::NotSynced(_) | CacheError::Relisting { .. }) => None,
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
        let mut problems = Vec::new();
        let mut synced = 0;
        for (what, not_started) in &required {
            for scope in &scopes {
                let key = (what.clone(), scope.clone());
                let label = label_of(what, scope);
                match self.phase_of(&key) {
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

    /// The phase of one watch and when its latest list completed.
    fn phase_of(&self, key: &WatchKey) -> Option<(Phase, Option<Instant>)> {
        fn get<R>(set: &WatchSet<R>, key: &WatchKey) -> Option<(Phase, Option<Instant>)> {
            lock(set)
                .get(key)
                .map(|w| (w.health.phase(), w.health.listed_at()))
        }
        get(&self.dynamic, key)
            .or_else(|| get(&self.pods, key))
            .or_else(|| get(&self.services, key))
            .or_else(|| get(&self.slices, key))
    }

    /// Pods of one namespace, in name order (a check that names the first few pods must not
    /// reword an unchanged verdict).
    pub(crate) async fn pods(&self, namespace: &str) -> Result<Vec<Arc<PodView>>, CacheError> {
        let w = self
            .typed_watch::<Pod, _>(&self.pods, Kind::PODS, namespace, PodView::project, None)
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
            .typed_watch::<Pod, _>(&self.pods, Kind::PODS, namespace, PodView::project, None)
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
                &self.services,
                Kind::SERVICES,
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
                &self.slices,
                Kind::ENDPOINT_SLICES,
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
        kind: &Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, CacheError> {
        let w = self.dynamic_watch(kind, namespace).await?;
        self.read(&w).await?;
        // A cluster-scoped object (Argo CD lists it with namespace "") has no namespace in its
        // reference; `within("")` would name one that nothing lives in.
        let key = ObjectRef::new_with(name, w.reader.resource.clone());
        let key = if namespace.is_empty() {
            key
        } else {
            key.within(namespace)
        };
        Ok(w.reader.store.get(&key).map(|o| to_json(&o)))
    }

    /// All objects of a kind in one namespace, or in every watched namespace when `namespace`
    /// is `None`.
    pub(crate) async fn objects(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, CacheError> {
        let scopes: Vec<Option<String>> = match (namespace, &self.namespaces) {
            (Some(ns), _) => vec![Some(ns.to_string())],
            (None, Some(list)) => list.iter().cloned().map(Some).collect(),
            (None, None) => vec![None],
        };
        let mut out = Vec::new();
        for scope in scopes {
            let ns = scope.as_deref().unwrap_or("");
            let w = self.dynamic_watch(kind, ns).await?;
            self.read(&w).await?;
            out.extend(
                w.reader
                    .store
                    .state()
                    .iter()
                    .filter(|o| scope.is_none() || o.metadata.namespace == scope)
                    .map(|o| to_json(o)),
            );
        }
        Ok(out)
    }

    /// Which watch of `what` (in `set`) a namespace's reads go to. Scoped (`--namespaces`): the
    /// namespace's own, and none outside the list. Unscoped: the cluster-wide one when the
    /// process requires the kind everywhere or one runs already; otherwise the namespace's
    /// own, so that a read about one namespace does not make wavegate hold (and the API server
    /// send) every namespace's objects of the kind — up to [`NAMESPACES_PER_KIND`] namespaces.
    fn scope_in<R>(
        &self,
        set: &WatchSet<R>,
        what: &str,
        namespace: &str,
    ) -> Result<Option<String>, CacheError> {
        match &self.namespaces {
            Some(list) if list.contains(namespace) => Ok(Some(namespace.to_string())),
            Some(_) => Err(CacheError::NamespaceNotWatched(namespace.to_string())),
            None => {
                if lock(&self.required).contains_key(what) {
                    return Ok(None);
                }
                let watches = lock(set);
                let own = (what.to_string(), Some(namespace.to_string()));
                if watches.contains_key(&(what.to_string(), None)) {
                    return Ok(None);
                }
                if watches.contains_key(&own) {
                    return Ok(own.1);
                }
                let scoped = watches
                    .keys()
                    .filter(|(w, s)| w == what && s.is_some())
                    .count();
                Ok((scoped < NAMESPACES_PER_KIND).then_some(own.1).flatten())
            }
        }
    }

    /// How long a first read waits for a new watch to list (`--sync-wait`): what a view that
    /// reads many kinds at once gives all of its reads together.
    pub(crate) fn sync_wait(&self) -> Duration {
        self.sync_wait
    }

    async fn read<R>(&self, w: &Watch<R>) -> Result<(), CacheError> {
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
            Phase::Listing => Err(CacheError::NotSynced(w.label.clone())),
            Phase::Relisting(error) => Err(CacheError::Relisting {
                what: w.label.clone(),
                error,
            }),
        }
    }

    /// The watch of a typed kind, kept as views `V` projected from each `K` it delivers.
    async fn typed_watch<K, V>(
        &self,
        set: &WatchSet<Views<V>>,
        kind: Kind,
        namespace: &str,
        project: fn(&K, &mut Interner) -> V,
        bucket: Option<Bucket<V>>,
    ) -> Result<Watch<Views<V>>, CacheError>
    where
        K: KubeResource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Debug
            + Send
            + Sync
            + serde::de::DeserializeOwned
            + 'static,
        V: crate::views::View,
    {
        let scope = self.scope_in(set, &kind.to_string(), namespace)?;
        let key = (kind.to_string(), scope.clone());
        if let Some(w) = lock(set).get(&key) {
            return Ok(w.clone());
        }
        self.authorize(&kind, &scope).await?;
        let api: Api<K> = match &scope {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let store = StoreIndex::new(bucket);
        let writer = StoreWriter::new(store.clone(), project);
        self.start(set, kind, key, api, store, writer)
    }

    async fn dynamic_watch(
        &self,
        kind: &Kind,
        namespace: &str,
    ) -> Result<Watch<Objects>, CacheError> {
        let what = kind.to_string();
        // Whole pods carry environment values and slices are only ever read compactly; a view
        // that names one must not start a cluster-wide watch of them. Whole Services stay
        // readable: annotation mode patches the Service itself and needs its annotations and
        // resourceVersion, and a Service's spec holds nothing a pod's env would.
        if [Kind::PODS, Kind::ENDPOINT_SLICES].contains(kind) {
            return Err(CacheError::CompactOnly(what));
        }
        let scope = if namespace.is_empty() {
            None
        } else {
            self.scope_in(&self.dynamic, &what, namespace)?
        };
        let key = (what.clone(), scope.clone());
        if let Some(w) = lock(&self.dynamic).get(&key) {
            return Ok(w.clone());
        }
        let ar = self.discover(kind).await?;
        self.authorize(kind, &scope).await?;
        let api: Api<DynamicObject> = match &scope {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let strip = if *kind == Kind::fixed("argoproj.io", "applications") {
            strip_application
        } else if *kind == Kind::fixed("postgresql.cnpg.io", "databases") {
            strip_database
        } else {
            strip_meta
        };
        let writer = reflector::store::Writer::new(ar.clone());
        let objects = Objects {
            store: writer.as_reader(),
            resource: ar.clone(),
        };
        let sink = DynamicSink {
            writer,
            resource: ar,
            strip,
        };
        self.start(&self.dynamic, kind.clone(), key, api, objects, sink)
    }

    /// Whether wavegate may list and watch `plural.group` in `scope`, from a cached
    /// SelfSubjectAccessReview (authorization.k8s.io/v1; every authenticated user may create
    /// one, through the default `system:basic-user` ClusterRole). Asked before a watch starts:
    /// a watch RBAC forbids would only retry its 403 forever and never sync.
    async fn authorize(&self, kind: &Kind, scope: &Option<String>) -> Result<(), CacheError> {
        let what = label_of(&kind.to_string(), scope);
        let (group, plural) = (kind.group.as_ref(), kind.plural.as_ref());
        let key = (
            group.to_string(),
            plural.to_string(),
            scope.clone().unwrap_or_default(),
        );
        let client = self.client.clone();
        let allowed = self
            .access
            .try_get_with(key, async move {
                let (list, watch) = futures::future::try_join(
                    access_review(&client, "list", group, plural, scope),
                    access_review(&client, "watch", group, plural, scope),
                )
                .await?;
                Ok::<_, kube::Error>(list && watch)
            })
            .await
            .map_err(|e| CacheError::AccessReview {
                what: what.clone(),
                error: e.to_string(),
            })?;
        if allowed {
            Ok(())
        } else {
            Err(CacheError::Forbidden { what })
        }
    }

    /// Start the watch for `key` unless another read just did; an on-demand watch takes one
    /// of the `max_on_demand` places or is refused.
    fn start<R, K, S>(
        &self,
        set: &WatchSet<R>,
        kind: Kind,
        key: WatchKey,
        api: Api<K>,
        reader: R,
        sink: S,
    ) -> Result<Watch<R>, CacheError>
    where
        R: Clone,
        K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
        S: Sink<K>,
    {
        let mut guard = lock(set);
        if let Some(w) = guard.get(&key) {
            return Ok(w.clone());
        }
        let label = label_of(&key.0, &key.1);
        let required = lock(&self.required).contains_key(&key.0);
        if !required {
            let max = self.limits.max_on_demand;
            self.on_demand
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .map_err(|_| CacheError::TooManyWatches {
                    what: label.clone(),
                    max,
                })?;
        }
        let w = self.spawn(api, reader, sink, kind, label, required);
        guard.insert(key, w.clone());
        Ok(w)
    }

    /// Why a store cannot be vouched for, if neither a heartbeat nor its own latest list
    /// reached the API server lately. That happens when the API server is unreachable, and
    /// also when wavegate itself was frozen (SIGSTOP, a stalled node): then a store may have
    /// missed changes, and even the first request served after thawing must not read it.
    fn silence(&self, listed_at: Option<Instant>) -> Option<String> {
        let heard = *lock(&self.heard);
        let last = listed_at.map_or(heard, |l| l.max(heard));
        let silent = last.elapsed();
        (silent > 2 * self.limits.heartbeat).then(|| {
            format!(
                "wavegate has not heard from the API server for {}",
                humantime::format_duration(Duration::from_secs(silent.as_secs()))
            )
        })
    }

    /// The watches listed before `listed_before` (all with `None`) relist: none of them may
    /// serve reads until its new list completes.
    fn relist(&self, reason: &str, listed_before: Option<Instant>) {
        fn tell<R>(set: &WatchSet<R>, reason: &str, before: Option<Instant>) {
            for w in lock(set).values() {
                let stale = match (before, w.health.listed_at()) {
                    (Some(t), Some(listed)) => listed <= t,
                    _ => true,
                };
                if stale {
                    w.health.failed(reason.to_string());
                    w.health.relist_now.notify_one();
                }
            }
        }
        tell(&self.pods, reason, listed_before);
        tell(&self.services, reason, listed_before);
        tell(&self.slices, reason, listed_before);
        tell(&self.dynamic, reason, listed_before);
    }

    /// Stop on-demand watches nobody has read for `limits.idle`.
    fn evict_idle(&self) {
        fn sweep<R>(set: &WatchSet<R>, idle: Duration, on_demand: &AtomicUsize) {
            lock(set).retain(|_, w| {
                if w.required || w.health.idle_for() < idle {
                    return true;
                }
                tracing::info!(watch = %w.label, idle = %humantime::format_duration(idle), "stopping idle watch");
                w.task.abort();
                on_demand.fetch_sub(1, Ordering::AcqRel);
                false
            });
        }
        let idle = self.limits.idle;
        sweep(&self.pods, idle, &self.on_demand);
        sweep(&self.services, idle, &self.on_demand);
        sweep(&self.slices, idle, &self.on_demand);
        sweep(&self.dynamic, idle, &self.on_demand);
    }

    /// The plural under which the API server serves `kind` in `group` (for resources named by
    /// kind, as Argo CD lists them in an Application's status).
    pub(crate) async fn plural_of(&self, group: &str, kind: &str) -> Result<String, CacheError> {
        let what = format!("kind {kind} in group {group:?}");
        let found = self
            .served(group, Served::Kind(kind.to_string()), what)
            .await?;
        Ok(found.plural)
    }

    /// Whether the API server serves `kind` at all.
    pub(crate) async fn resolve(&self, kind: &Kind) -> Result<(), CacheError> {
        self.discover(kind).await.map(|_| ())
    }

    /// Resolve `kind` to the served version.
    pub(crate) async fn discover(&self, kind: &Kind) -> Result<ApiResource, CacheError> {
        let plural = Served::Plural(kind.plural.to_string());
        self.served(&kind.group, plural, kind.to_string()).await
    }

    /// Discovery of one resource of `group`, by plural or by kind, coalescing concurrent
    /// look-ups and keeping answers for the discovery TTLs.
    async fn served(
        &self,
        group: &str,
        by: Served,
        what: String,
    ) -> Result<ApiResource, CacheError> {
        let client = self.client.clone();
        let g = group.to_string();
        self.discovered
            .get_with((g.clone(), by.clone()), async move {
                match kube::discovery::group(&client, &g).await {
                    Ok(api_group) => match &by {
                        Served::Kind(k) => api_group.recommended_kind(k).map(|(ar, _)| ar),
                        Served::Plural(p) => api_group
                            .recommended_resources()
                            .into_iter()
                            .map(|(ar, _)| ar)
                            .find(|ar| &ar.plural == p),
                    }
                    .ok_or(CacheError::NotInstalled(what)),
                    Err(kube::Error::Discovery(_)) => Err(CacheError::NotInstalled(what)),
                    Err(e) => Err(CacheError::Discovery {
                        what,
                        error: e.to_string(),
                    }),
                }
            })
            .await
    }

    fn spawn<R, K, S>(
        &self,
        api: Api<K>,
        reader: R,
        sink: S,
        kind: Kind,
        label: String,
        required: bool,
    ) -> Watch<R>
    where
        K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
        S: Sink<K>,
    {
        let health = Arc::new(WatchHealth::new());
        tracing::info!(watch = %label, required, "starting watch");
        let run = Reflect {
            api,
            sink,
            counted: 0,
            health: health.clone(),
            label: label.clone(),
            kind,
            changes: self.changes.clone(),
            metrics: self.metrics.clone(),
            listed: Vec::new(),
            held: self.held.clone(),
            // What `serve` cannot do without (WaveGates) is never bounded: the bound keeps a
            // remote cluster's on-demand reads from filling memory, not its gate writer blind.
            max_objects: if required {
                None
            } else {
                self.limits.max_objects
            },
        };
        let task = tokio::spawn(run.run()).abort_handle();
        Watch {
            reader,
            health,
            label,
            required,
            task,
        }
    }
}

/// Where a watch's events go.
trait Sink<K>: Send + 'static {
    /// Apply one event, as kube-rs' reflector writer does (a list replaces the stored objects
    /// when it completes); at the end of a list, the (namespace, name) of objects it removed.
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<(String, String)>;

    /// How many objects are stored.
    fn len(&self) -> usize;
}

impl<K: ResourceExt + Send + 'static, V: crate::views::View> Sink<K> for StoreWriter<K, V> {
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<(String, String)> {
        StoreWriter::apply(self, &event)
    }

    fn len(&self) -> usize {
        self.store().len()
    }
}

/// A dynamic kind's reflector store, fed objects without what no check reads.
struct DynamicSink {
    writer: reflector::store::Writer<DynamicObject>,
    resource: ApiResource,
    strip: fn(&mut DynamicObject),
}

impl Sink<DynamicObject> for DynamicSink {
    fn apply(&mut self, event: watcher::Event<DynamicObject>) -> Vec<(String, String)> {
        let event = event.modify(self.strip);
        let before =
            matches!(event, watcher::Event::InitDone).then(|| self.writer.as_reader().state());
        self.writer.apply_watcher_event(&event);
        let now = self.writer.as_reader();
        before
            .unwrap_or_default()
            .iter()
            .filter(|o| {
                now.get(&ObjectRef::from_obj_with(o.as_ref(), self.resource.clone()))
                    .is_none()
            })
            .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
            .collect()
    }

    fn len(&self) -> usize {
        self.writer.as_reader().len()
    }
}

/// One watch's task: a kube-rs watcher feeding the store, replaced by a fresh one (a full
/// list) after any error.
struct Reflect<K: KubeResource + Clone + 'static, S> {
    api: Api<K>,
    sink: S,
    /// What this watch adds to `wavegate_cached_objects`.
    counted: i64,
    health: Arc<WatchHealth>,
    label: String,
    kind: Kind,
    changes: broadcast::Sender<Change>,
    metrics: Arc<Metrics>,
    /// Objects a list in progress delivered, announced when it completes: until then reads of
    /// this watch are refused, so whoever reacted at once would read nothing, judge "relisting"
    /// and wait for its retry backoff or the resync to hear of the object again.
    listed: Vec<(String, String)>,
    /// Objects held by every watch of this cache, and the bound on them.
    held: Arc<AtomicUsize>,
    max_objects: Option<usize>,
}

/// A stopped watch (evicted, or its cache dropped) holds nothing any more.
impl<K: KubeResource + Clone + 'static, S> Drop for Reflect<K, S> {
    fn drop(&mut self) {
        self.metrics
            .cached_objects
            .get_or_create(&ResourceLabel::new(&self.kind.to_string()))
            .dec_by(self.counted);
        self.held
            .fetch_sub(self.counted.max(0) as usize, Ordering::AcqRel);
    }
}

impl<K, S> Reflect<K, S>
where
    K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
    S: Sink<K>,
{
    async fn run(mut self) {
        let mut backoff = RELIST_FIRST_DELAY;
        loop {
            // The list is a consistent read (no resourceVersion): since KEP-2340 (consistent
            // reads from cache, GA) the API server serves it from its watch cache once that has
            // caught up with etcd, so a relist after an outage never starts from objects older
            // than the outage, as a resourceVersion=0 list could on a lagging API server.
            let stream = watcher(self.api.clone(), watcher::Config::default());
            let mut stream = std::pin::pin!(stream);
            // A heartbeat's word ends the watch at once and restarts it without a backoff:
            // either the API server went silent (the list will wait or fail on its own) or it
            // answers again after a silence, and the sooner the relist, the shorter the time
            // nothing can be judged.
            let (error, told, over) = loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    () = self.health.relist_now.notified() => match self.health.phase() {
                        Phase::Relisting(reason) => break (reason, true, false),
                        _ => continue,
                    },
                };
                match event {
                    Some(Ok(event)) => {
                        if matches!(event, watcher::Event::InitDone) {
                            backoff = RELIST_FIRST_DELAY;
                        }
                        if let Err(why) = self.apply(event) {
                            break (why, false, true);
                        }
                    }
                    Some(Err(e)) => break (e.to_string(), false, false),
                    None => break ("the watch stream ended".to_string(), false, false),
                }
            };
            tracing::warn!(watch = %self.label, error = %error, "watch failed; relisting");
            self.metrics
                .watch_errors
                .get_or_create(&ResourceLabel::new(&self.kind.to_string()))
                .inc();
            if over {
                // Stopped before emptied: no reader may see an empty store as a synced one
                // ("no pods match" would be a verdict on nothing).
                self.health.stopped(error);
                self.empty();
                tokio::time::sleep(OVER_BOUND_RETRY).await;
                backoff = RELIST_FIRST_DELAY;
                continue;
            }
            self.health.failed(error);
            if told {
                backoff = RELIST_FIRST_DELAY;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => backoff = (backoff * 2).min(RELIST_LAST_DELAY),
                // The API server answers again: no reason to sit out the rest of the backoff.
                () = self.health.relist_now.notified() => backoff = RELIST_FIRST_DELAY,
            }
        }
    }

    /// Apply one event; `Err` with the reason when the objects held would pass the bound.
    fn apply(&mut self, event: watcher::Event<K>) -> Result<(), String> {
        if let (Some(max), watcher::Event::InitApply(_) | watcher::Event::Apply(_)) =
            (self.max_objects, &event)
        {
            // A list replaces this watch's store when it completes: while it runs, count what
            // it delivered instead of what the store still holds, or every relist of a cluster
            // over half the bound would stop it. A watch event may update an object already
            // held; counting it as one more errs on the side of the bound.
            let others = self
                .held
                .load(Ordering::Acquire)
                .saturating_sub(self.counted.max(0) as usize);
            let held = match &event {
                watcher::Event::InitApply(_) => others + self.listed.len() + 1,
                _ => others + self.counted.max(0) as usize + 1,
            };
            if held > max {
                return Err(format!(
                    "this cluster's watches would hold more than {max} objects \
                     (--max-cluster-objects), so wavegate stopped the watch of {} and retries \
                     it every {}",
                    self.label,
                    humantime::format_duration(OVER_BOUND_RETRY)
                ));
            }
        }
        let touched = match &event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                Some((o.namespace().unwrap_or_default(), o.name_any()))
            }
            watcher::Event::InitApply(o) => {
                self.listed
                    .push((o.namespace().unwrap_or_default(), o.name_any()));
                None
            }
            watcher::Event::Init => {
                self.listed.clear();
                None
            }
            watcher::Event::InitDone => None,
        };
        let (init, done) = (
            matches!(event, watcher::Event::Init),
            matches!(event, watcher::Event::InitDone),
        );
        // Stored first, told after: whoever reacts to the change reads the new state.
        let gone = self.sink.apply(event);
        self.count();
        if let Some((namespace, name)) = touched {
            self.changed(namespace, name);
        }
        if init {
            let label = ResourceLabel::new(&self.kind.to_string());
            self.metrics.watch_restarts.get_or_create(&label).inc();
            // At 0 from the first list, so deploy/monitoring's "watches failing" rate() has
            // a series before the first error.
            let _ = self.metrics.watch_errors.get_or_create(&label);
        }
        if done {
            // Readable from here on: what the list delivered, and the objects deleted while
            // the watch was away (they vanish with the relist and get no event of their own),
            // are announced now, so what depends on them is judged at once on the new state.
            self.health.listed();
            let listed = std::mem::take(&mut self.listed);
            for (namespace, name) in listed.into_iter().chain(gone) {
                self.changed(namespace, name);
            }
            tracing::info!(watch = %self.label, "watch synced");
        }
        Ok(())
    }

    /// Drop every object this watch holds (an empty list replaces them), after it hit the
    /// bound: a watch that cannot be read whole holds nothing.
    fn empty(&mut self) {
        self.listed.clear();
        let _ = self.sink.apply(watcher::Event::Init);
        let _ = self.sink.apply(watcher::Event::InitDone);
        self.count();
        let label = ResourceLabel::new(&self.kind.to_string());
        self.metrics.objects_over_bound.get_or_create(&label).inc();
        tracing::warn!(watch = %self.label, "stopped at --max-cluster-objects; retrying later");
    }

    /// Follow the store's size in `wavegate_cached_objects` (several watches of one kind, one
    /// per namespace when scoped, add up).
    fn count(&mut self) {
        let now = self.sink.len() as i64;
        if now != self.counted {
            self.metrics
                .cached_objects
                .get_or_create(&ResourceLabel::new(&self.kind.to_string()))
                .inc_by(now - self.counted);
            if now > self.counted {
                self.held
                    .fetch_add((now - self.counted) as usize, Ordering::AcqRel);
            } else {
                self.held
                    .fetch_sub((self.counted - now) as usize, Ordering::AcqRel);
            }
            self.counted = now;
        }
    }

    fn changed(&self, namespace: String, name: String) {
        let _ = self.changes.send(Change {
            kind: self.kind.clone(),
            namespace,
            name,
        });
    }
}

/// Stop idle on-demand watches, as long as the cache exists.
async fn evict_idle(cache: Weak<Cache>) {
    let every = match cache.upgrade() {
        Some(c) => (c.limits.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(60)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        match cache.upgrade() {
            Some(c) => c.evict_idle(),
            None => return,
        }
    }
}

/// Turn every watch to relisting when the API server stops answering (see
/// [`WatchLimits::heartbeat`]), or answers again after a silence (wavegate was frozen, or the
/// API server was away): what the stores missed meanwhile is only known after a new list.
async fn heartbeat(cache: Weak<Cache>) {
    let mut answering = true;
    loop {
        let Some((client, every)) = cache
            .upgrade()
            .map(|c| (c.client.clone(), c.limits.heartbeat))
        else {
            return;
        };
        let pause = if answering {
            every
        } else {
            every.min(HEARTBEAT_RETRY)
        };
        tokio::time::sleep(pause).await;
        let answer = tokio::time::timeout(every, api_server_ready(&client)).await;
        let Some(c) = cache.upgrade() else { return };
        let error = match answer {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!(
                "the API server is not ready: {}",
                failed_checks(&e)
            )),
            Err(_) => Some(format!(
                "the API server did not answer within {}",
                humantime::format_duration(every)
            )),
        };
        tracing::debug!(error = ?error, answering, "heartbeat");
        match error {
            Some(e) => {
                if answering {
                    tracing::warn!(error = %e, "API server unreachable; relisting every watch");
                    c.relist(&e, None);
                }
                answering = false;
            }
            None => {
                let heard = *lock(&c.heard);
                if let Some(silence) = c.silence(None) {
                    tracing::warn!(%silence, "API server answers again; relisting the watches that have not since");
                    c.relist(&silence, Some(heard));
                }
                *lock(&c.heard) = Instant::now();
                answering = true;
            }
        }
    }
}

/// The API server's own `/readyz` (readable by anyone through the default
/// `system:public-info-viewer` ClusterRole). Unlike `/version` it fails while the API server
/// cannot reach etcd: its watch cache then stops following etcd and catches up only later, so
/// what wavegate's watches deliver afterwards may lag, until a fresh consistent list.
async fn api_server_ready(client: &Client) -> Result<(), kube::Error> {
    let request = axum::http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(request).await.map(|_| ())
}

/// The failing checks of a `/readyz` answer (`[-]etcd failed: reason withheld`), not its
/// whole verbose body.
fn failed_checks(e: &kube::Error) -> String {
    let text = e.to_string();
    let failed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("[-]"))
        .collect();
    if failed.is_empty() {
        text
    } else {
        failed.join("; ")
    }
}

async fn access_review(
    client: &Client,
    verb: &str,
    group: &str,
    plural: &str,
    scope: &Option<String>,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_string()),
                resource: Some(plural.to_string()),
                verb: Some(verb.to_string()),
                namespace: scope.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// How a discovery look-up names the resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Served {
    Plural(String),
    Kind(String),
}

fn label_of(what: &str, scope: &Option<String>) -> String {
    match scope {
        Some(ns) => format!("{what} in {ns}"),
        None => what.to_string(),
    }
}

/// The one managedFields entry the cache keeps.
pub(crate) use crate::views::ARGOCD_MANAGER;

/// Drop what no check reads: managed fields and the last-applied annotation are often larger
/// than the rest of the object together. Argo CD's own managedFields entry stays, without its
/// field set: its `time` is when Argo CD last changed the object (the waves timeline, see
/// `timeline`).
fn strip_meta<K: KubeResource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = meta
        .managed_fields
        .take()
        .map(|entries| {
            entries
                .into_iter()
                .filter(|f| f.manager.as_deref() == Some(ARGOCD_MANAGER))
                .map(|f| ManagedFieldsEntry {
                    fields_v1: None,
                    ..f
                })
                .collect::<Vec<_>>()
        })
        .filter(|kept| !kept.is_empty());
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A CNPG Database keeps, besides, when its status was last written (the newest entry of the
/// `status` subresource, without its field set): a status older than its Cluster is about a
/// Cluster that is gone (`checks::cnpg`).
fn strip_database(o: &mut DynamicObject) {
    let written = o
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .max_by_key(|f| f.time.as_ref().map(|t| t.0))
        .map(|f| ManagedFieldsEntry {
            fields_v1: None,
            ..f.clone()
        });
    strip_meta(o);
    if let Some(written) = written {
        o.metadata
            .managed_fields
            .get_or_insert_with(Vec::new)
            .push(written);
    }
}

/// An Argo CD Application also loses its sync history (up to ten past syncs, each with its
/// full source), and the per-resource results of its last sync keep only which resource and
/// how it went: the Application check reads the operation's phase and message and the
/// comparison, the waves view `status.resources`, the timeline which resources the sync reached.
fn strip_application(o: &mut DynamicObject) {
    strip_meta(o);
    if let Some(status) = o.data.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("history");
        if let Some(results) = status
            .get_mut("operationState")
            .and_then(|s| s.pointer_mut("/syncResult/resources"))
            .and_then(Value::as_array_mut)
        {
            for r in results.iter_mut().filter_map(Value::as_object_mut) {
                r.retain(|k, _| {
                    matches!(
                        k.as_str(),
                        "group" | "kind" | "namespace" | "name" | "status" | "hookType"
                    )
                });
            }
        }
    }
}

fn to_json(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

struct DiscoveryExpiry;

impl moka::Expiry<(String, Served), Result<ApiResource, CacheError>> for DiscoveryExpiry {
    fn expire_after_create(
        &self,
        _key: &(String, Served),
        value: &Result<ApiResource, CacheError>,
        _now: Instant,
    ) -> Option<Duration> {
        Some(if value.is_ok() {
            DISCOVERY_TTL
        } else {
            DISCOVERY_MISS_TTL
        })
    }
}

struct AccessExpiry;

impl moka::Expiry<(String, String, String), bool> for AccessExpiry {
    fn expire_after_create(
        &self,
        _key: &(String, String, String),
        allowed: &bool,
        _now: Instant,
    ) -> Option<Duration> {
        Some(if *allowed {
            ACCESS_TTL
        } else {
            ACCESS_DENIED_TTL
        })
    }
}

#[cfg(test)]
mod tests {
    //! The cache against a scripted API server on loopback: each list and each watch answers as
    //! the test says, when the test says, so the moments between a watch error and the end of
    //! the relist that follows it can be read from deterministically.

    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::extract::{Query, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use serde_json::json;
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::oneshot;

    const NS: &str = "shop";

    /// How one watch request is answered.
    enum WatchReply {
        /// An `ERROR` event with this code (410: the resourceVersion was compacted away), sent
        /// when the receiver fires, then the end of the stream.
        ErrorWhen(u16, oneshot::Receiver<()>),
        /// Nothing, ever: a quiet kind.
        Quiet,
    }

    struct ListReply {
        /// How many pods the list holds: web-0, web-1, ….
        pods: usize,
        ready: bool,
        resource_version: &'static str,
        /// The list answers only once this fires (a relist in progress).
        hold: Option<oneshot::Receiver<()>>,
    }

    #[derive(Default)]
    struct Script {
        lists: Mutex<VecDeque<ListReply>>,
        watches: Mutex<VecDeque<WatchReply>>,
        lists_started: AtomicUsize,
        /// Resources the access review denies.
        denied: Mutex<BTreeSet<String>>,
        /// A paused API server (SIGSTOP): requests hang until it resumes.
        paused: tokio::sync::watch::Sender<bool>,
    }

    impl Script {
        async fn unless_paused(&self) {
            let _ = self.paused.subscribe().wait_for(|paused| !paused).await;
        }
    }

    async fn readyz(State(s): State<Arc<Script>>) -> Response {
        s.unless_paused().await;
        "ok".into_response()
    }

    fn pod_list(pods: usize, ready: bool, rv: &str) -> Value {
        let status = if ready { "True" } else { "False" };
        let items: Vec<Value> = (0..pods)
            .map(|i| {
                json!({"metadata": {"name": format!("web-{i}"), "namespace": NS,
                                    "resourceVersion": rv, "labels": {"app": "web"}},
                       "status": {"phase": "Running", "podIP": format!("10.0.0.{}", i + 1),
                                  "conditions": [{"type": "Ready", "status": status}]}})
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": rv},
               "items": items})
    }

    async fn pods(
        State(s): State<Arc<Script>>,
        Query(q): Query<HashMap<String, String>>,
    ) -> Response {
        if q.get("watch").map(String::as_str) == Some("true") {
            let reply = s
                .watches
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(WatchReply::Quiet);
            let body = match reply {
                WatchReply::Quiet => {
                    Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>())
                }
                WatchReply::ErrorWhen(code, fire) => {
                    Body::from_stream(futures::stream::once(async move {
                        let _ = fire.await;
                        let event = json!({"type": "ERROR", "object": {
                        "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                        "reason": if code == 410 { "Expired" } else { "InternalError" },
                        "message": if code == 410 { "too old resource version: 1 (7)" } else { "etcdserver: leader changed" }}});
                        Ok::<_, std::io::Error>(format!("{event}\n").into_bytes())
                    }))
                }
            };
            return (StatusCode::OK, body).into_response();
        }
        s.unless_paused().await;
        if s.denied.lock().unwrap().contains("pods") {
            let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                "reason": "Forbidden", "code": 403, "message": "pods is forbidden"});
            return (StatusCode::FORBIDDEN, axum::Json(status)).into_response();
        }
        s.lists_started.fetch_add(1, Ordering::SeqCst);
        // Each scripted list once, then the last one again for every later relist.
        let reply = {
            let mut lists = s.lists.lock().unwrap();
            let reply = lists.pop_front().expect("a scripted list");
            if lists.is_empty() {
                lists.push_back(ListReply {
                    pods: reply.pods,
                    ready: reply.ready,
                    resource_version: reply.resource_version,
                    hold: None,
                });
            }
            reply
        };
        if let Some(hold) = reply.hold {
            let _ = hold.await;
        }
        axum::Json(pod_list(reply.pods, reply.ready, reply.resource_version)).into_response()
    }

    async fn access_review(
        State(s): State<Arc<Script>>,
        axum::Json(mut review): axum::Json<Value>,
    ) -> Response {
        let resource = review["spec"]["resourceAttributes"]["resource"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let allowed = !s.denied.lock().unwrap().contains(&resource);
        review["status"] = json!({"allowed": allowed});
        axum::Json(review).into_response()
    }

    async fn fake_api(script: Arc<Script>) -> Client {
        let app = Router::new()
            .route(&format!("/api/v1/namespaces/{NS}/pods"), get(pods))
            .route("/readyz", get(readyz))
            .route(
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                post(access_review),
            )
            .with_state(script);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let config = kube::Config::new(url.parse().unwrap());
        Client::try_from(config).unwrap()
    }

    fn cache(client: Client) -> Arc<Cache> {
        cache_with(client, WatchLimits::default())
    }

    fn cache_with(client: Client, limits: WatchLimits) -> Arc<Cache> {
        Cache::with_limits(
            client,
            Some(BTreeSet::from([NS.to_string()])),
            Duration::from_secs(2),
            limits,
            Arc::new(Metrics::default()),
        )
    }

    fn ready_of(pods: &[Arc<PodView>]) -> Vec<bool> {
        pods.iter()
            .map(|p| p.ready.as_ref().is_some_and(|c| &*c.status == "True"))
            .collect()
    }

    async fn until<F: FnMut() -> bool>(what: &str, mut f: F) {
        let start = Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{what}: not within 10s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn reads_during_a_relist_after_410_gone_are_not_served_as_fresh() {
        let script = Arc::new(Script::default());
        let (gone, gone_rx) = oneshot::channel();
        let (relisted, relisted_rx) = oneshot::channel();
        script.lists.lock().unwrap().extend([
            ListReply {
                pods: 1,
                ready: true,
                resource_version: "1",
                hold: None,
            },
            ListReply {
                pods: 1,
                ready: false,
                resource_version: "7",
                hold: Some(relisted_rx),
            },
        ]);
        script
            .watches
            .lock()
            .unwrap()
            .push_back(WatchReply::ErrorWhen(410, gone_rx));
        let cache = cache(fake_api(script.clone()).await);

        let before = cache.pods(NS).await.expect("the first list is served");
        assert_eq!(ready_of(&before), [true]);

        // The pod turned NotReady while the watch was away; the relist that will say so is
        // still on its way, and the store still holds the pod as it was before the outage.
        gone.send(()).unwrap();
        until("the relist starts", || {
            script.lists_started.load(Ordering::SeqCst) == 2
        })
        .await;
        match cache.pods(NS).await {
            Err(CacheError::Relisting { what, error }) => {
                assert_eq!(what, "pods in shop");
                assert!(error.contains("too old resource version"), "{error}");
            }
            other => panic!(
                "a read between the watch error and the completed relist must fail, got {:?}",
                other.map(|p| ready_of(&p))
            ),
        }

        relisted.send(()).unwrap();
        let start = Instant::now();
        loop {
            match cache.pods(NS).await {
                Ok(p) => {
                    assert_eq!(
                        ready_of(&p),
                        [false],
                        "after the relist the store is the truth"
                    );
                    break;
                }
                Err(e) => assert!(start.elapsed() < Duration::from_secs(10), "still {e}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_pod_deleted_while_the_watch_was_away_is_gone_after_the_relist_and_told() {
        let script = Arc::new(Script::default());
        let (gone, gone_rx) = oneshot::channel();
        script.lists.lock().unwrap().extend([
            ListReply {
                pods: 2,
                ready: true,
                resource_version: "1",
                hold: None,
            },
            ListReply {
                pods: 1,
                ready: true,
                resource_version: "7",
                hold: None,
            },
        ]);
        script
            .watches
            .lock()
            .unwrap()
            .push_back(WatchReply::ErrorWhen(410, gone_rx));
        let cache = cache(fake_api(script.clone()).await);
        let mut changes = cache.subscribe();
        let names =
            |pods: &[Arc<PodView>]| pods.iter().map(|p| p.name.to_string()).collect::<Vec<_>>();
        let before = cache.pods(NS).await.expect("the first list is served");
        assert_eq!(names(&before), ["web-0", "web-1"]);
        while changes.try_recv().is_ok() {}

        // web-1 was deleted while the watch was away: no DELETED event will ever say so, only
        // the relist's absence of it.
        gone.send(()).unwrap();
        let start = Instant::now();
        loop {
            if let Ok(p) = cache.pods(NS).await
                && names(&p) == ["web-0"]
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "web-1 is still served"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut told = Vec::new();
        while let Ok(c) = changes.try_recv() {
            told.push((c.kind, c.namespace, c.name));
        }
        assert!(
            told.contains(&(Kind::PODS, NS.to_string(), "web-1".to_string())),
            "dependants of the deleted pod must be woken: {told:?}"
        );
    }

    #[tokio::test]
    async fn a_watch_that_recovered_is_read_without_waiting_for_a_timer() {
        let script = Arc::new(Script::default());
        let (fail, fail_rx) = oneshot::channel();
        script.lists.lock().unwrap().push_back(ListReply {
            pods: 1,
            ready: true,
            resource_version: "1",
            hold: None,
        });
        script
            .watches
            .lock()
            .unwrap()
            .push_back(WatchReply::ErrorWhen(500, fail_rx));
        let cache = cache(fake_api(script.clone()).await);
        cache.pods(NS).await.expect("the first list is served");

        // A brown-out: one error, then a working (quiet) watch again. What the watch proves
        // afterwards decides, not how long ago the error was.
        fail.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let start = Instant::now();
        loop {
            match cache.pods(NS).await {
                Ok(p) => {
                    assert_eq!(ready_of(&p), [true]);
                    break;
                }
                Err(e) => assert!(
                    start.elapsed() < Duration::from_secs(8),
                    "the watch recovered but reads still fail: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_forbidden_kind_is_refused_at_once_and_does_not_wedge_readiness() {
        let script = Arc::new(Script::default());
        script.denied.lock().unwrap().insert("pods".into());
        script.lists.lock().unwrap().push_back(ListReply {
            pods: 1,
            ready: true,
            resource_version: "1",
            hold: None,
        });
        let cache = cache(fake_api(script.clone()).await);

        let start = Instant::now();
        let read = cache.pods(NS).await;
        assert_eq!(
            read.map(|p| p.len()),
            Err(CacheError::Forbidden {
                what: "pods in shop".into()
            })
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "a forbidden kind is answered at once, not after --sync-wait"
        );
        assert_eq!(
            script.lists_started.load(Ordering::SeqCst),
            0,
            "no watch is started on a kind RBAC forbids"
        );
        assert!(
            cache.readiness().is_ok(),
            "a caller's forbidden read must not make wavegate NotReady: {:?}",
            cache.readiness()
        );
    }

    fn one_pod(script: &Script) {
        script.lists.lock().unwrap().push_back(ListReply {
            pods: 1,
            ready: true,
            resource_version: "1",
            hold: None,
        });
    }

    #[tokio::test]
    async fn a_paused_api_server_turns_reads_to_relisting_until_it_answers_again() {
        let script = Arc::new(Script::default());
        one_pod(&script);
        let limits = WatchLimits {
            heartbeat: Duration::from_millis(200),
            ..WatchLimits::default()
        };
        let cache = cache_with(fake_api(script.clone()).await, limits);
        cache.pods(NS).await.expect("the first list is served");

        // SIGSTOP: the open watch just goes quiet, no error reaches kube-rs.
        script.paused.send_replace(true);
        let start = Instant::now();
        loop {
            match cache.pods(NS).await {
                Err(CacheError::Relisting { error, .. }) => {
                    assert!(
                        error.contains("did not answer") || error.contains("not heard from"),
                        "{error}"
                    );
                    break;
                }
                other => assert!(
                    start.elapsed() < Duration::from_secs(3),
                    "reads from a paused API server's watch still served: {:?}",
                    other.map(|p| p.len())
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        script.paused.send_replace(false);
        let start = Instant::now();
        while let Err(e) = cache.pods(NS).await {
            assert!(start.elapsed() < Duration::from_secs(5), "still {e}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn on_demand_watches_are_bounded_and_the_refusal_says_why() {
        let script = Arc::new(Script::default());
        one_pod(&script);
        let limits = WatchLimits {
            max_on_demand: 1,
            ..WatchLimits::default()
        };
        let cache = cache_with(fake_api(script.clone()).await, limits);
        cache.pods(NS).await.expect("the first watch fits");
        let refused = cache.service(NS, "web").await;
        assert_eq!(
            refused,
            Err(CacheError::TooManyWatches {
                what: "services in shop".into(),
                max: 1
            })
        );
        assert!(refused.unwrap_err().to_string().contains("--max-watches"));
    }

    #[tokio::test]
    async fn idle_on_demand_watches_are_stopped_and_their_place_freed() {
        let script = Arc::new(Script::default());
        one_pod(&script);
        let limits = WatchLimits {
            idle: Duration::from_millis(200),
            max_on_demand: 1,
            ..WatchLimits::default()
        };
        let cache = cache_with(fake_api(script.clone()).await, limits);
        cache.pods(NS).await.expect("the first watch fits");
        assert_eq!(cache.on_demand.load(Ordering::SeqCst), 1);
        let cached = || {
            cache
                .metrics
                .cached_objects
                .get_or_create(&ResourceLabel::new("pods"))
                .get()
        };
        assert_eq!(cached(), 1, "wavegate_cached_objects counts the listed pod");
        until("the idle watch is stopped", || {
            cache.on_demand.load(Ordering::SeqCst) == 0 && lock(&cache.pods).is_empty()
        })
        .await;
        until("a stopped watch counts nothing", || cached() == 0).await;
        // Read again: a new watch, listed afresh.
        cache.pods(NS).await.expect("a new watch after eviction");
        assert_eq!(script.lists_started.load(Ordering::SeqCst), 2);
    }

    /// A view (the waves view, the timeline) that names a bare Pod must not start a
    /// cluster-wide watch of whole pods (environment values included): refused before any
    /// request, whatever the caller.
    #[tokio::test]
    async fn no_whole_object_watch_of_a_kind_with_a_compact_view() {
        let script = Arc::new(Script::default());
        one_pod(&script);
        let cache = cache(fake_api(script.clone()).await);
        for kind in [Kind::PODS, Kind::ENDPOINT_SLICES] {
            let err = cache.object(&kind, NS, "web-0").await.unwrap_err();
            assert!(matches!(err, CacheError::CompactOnly(_)), "{err}");
            let err = cache.objects(&kind, None).await.unwrap_err();
            assert!(matches!(err, CacheError::CompactOnly(_)), "{err}");
        }
        assert_eq!(script.lists_started.load(Ordering::SeqCst), 0);
    }

    /// Without --namespaces, a read about one namespace watches that namespace, not the
    /// cluster: the stand-in API server serves pods of `shop` only, so a cluster-wide watch
    /// would never list. Past 8 namespaces of one kind, one cluster-wide watch takes over.
    #[tokio::test]
    async fn on_demand_watches_cover_only_the_namespace_asked_for() {
        let script = Arc::new(Script::default());
        one_pod(&script);
        let cache = Cache::with_limits(
            fake_api(script.clone()).await,
            None,
            Duration::from_millis(500),
            WatchLimits::default(),
            Arc::new(Metrics::default()),
        );
        let pods = cache.pods(NS).await.expect("a watch of shop alone");
        assert_eq!(pods.len(), 1);
        let scopes = |c: &Cache| -> Vec<Option<String>> {
            lock(&c.pods).keys().map(|(_, s)| s.clone()).collect()
        };
        assert_eq!(scopes(&cache), [Some(NS.to_string())]);
        for i in 1..NAMESPACES_PER_KIND {
            let _ = cache.pods(&format!("team-{i}")).await;
        }
        assert!(
            scopes(&cache).iter().all(Option::is_some),
            "{:?}",
            scopes(&cache)
        );
        let _ = cache.pods("one-too-many").await;
        assert!(scopes(&cache).contains(&None), "{:?}", scopes(&cache));
    }

    /// A remote cluster that lists more objects than `max_objects` is not held: the watch is
    /// emptied, and reads say why (so a verdict is Unknown/Progressing, never Healthy).
    #[tokio::test]
    async fn a_cluster_over_its_object_bound_is_not_held_and_says_why() {
        let script = Arc::new(Script::default());
        script.lists.lock().unwrap().push_back(ListReply {
            pods: 5,
            ready: true,
            resource_version: "1",
            hold: None,
        });
        let metrics = Arc::new(Metrics::default());
        let limits = WatchLimits {
            max_objects: Some(3),
            ..WatchLimits::default()
        };
        let cache = Cache::with_limits(
            fake_api(script.clone()).await,
            Some(BTreeSet::from([NS.to_string()])),
            Duration::from_secs(2),
            limits,
            metrics.clone(),
        );
        let err = cache.pods(NS).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("more than 3 objects (--max-cluster-objects)"),
            "{err}"
        );
        assert_eq!(cache.held.load(Ordering::SeqCst), 0, "nothing held");
        let text = metrics.encode();
        assert!(
            text.lines()
                .any(|l| l.starts_with("wavegate_objects_over_bound_total") && l.ends_with(" 1")),
            "{text}"
        );
        // Within the bound, the same cluster is read as usual.
        let script = Arc::new(Script::default());
        one_pod(&script);
        let cache = Cache::with_limits(
            fake_api(script).await,
            Some(BTreeSet::from([NS.to_string()])),
            Duration::from_secs(2),
            limits,
            Arc::new(Metrics::default()),
        );
        assert_eq!(cache.pods(NS).await.expect("within the bound").len(), 1);
        assert_eq!(cache.held.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn readiness_covers_only_required_watches() {
        let script = Arc::new(Script::default());
        one_pod(&script);
        let cache = cache(fake_api(script.clone()).await);
        cache.require(Kind::PODS);
        match cache.readiness() {
            Err(problems) => assert!(
                problems.len() == 1 && problems[0].starts_with("pods in shop: not watched yet"),
                "{problems:?}"
            ),
            Ok(n) => panic!("ready with {n} watches before the required one started"),
        }
        cache.pods(NS).await.expect("listed");
        assert_eq!(cache.readiness(), Ok(1));
        assert_eq!(
            cache.on_demand.load(Ordering::SeqCst),
            0,
            "a required watch takes no on-demand place"
        );
    }

    #[test]
    fn an_application_keeps_what_checks_read_and_loses_its_history() {
        let mut app: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd",
                         "managedFields": [
                             {"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-01T02:00:00Z",
                              "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
                             {"manager": "argocd-controller", "operation": "Apply", "time": "2026-12-01T03:00:00Z",
                              "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                         "wavegate.dev/annotate": "true"}},
            "spec": {"source": {"repoURL": "https://example.invalid/repo"}},
            "status": {"history": [{"id": 1}],
                       "resources": [{"kind": "Service", "name": "web"}],
                       "sync": {"status": "Synced"},
                       "operationState": {"phase": "Succeeded",
                                          "syncResult": {"revision": "abc", "resources": [
                                              {"group": "", "version": "v1", "kind": "Service", "namespace": "shop", "name": "web",
                                               "status": "Synced", "message": "service/web configured", "syncPhase": "Sync",
                                               "images": ["registry.example/web:1"]}]}}}
        }))
        .unwrap();
        strip_application(&mut app);
        let v = serde_json::to_value(&app).unwrap();
        // Argo CD's entry stays for the timeline, without its field set.
        assert_eq!(
            v["metadata"]["managedFields"],
            json!([{"manager": "argocd-controller", "operation": "Apply",
                    "time": "2026-12-01T03:00:00Z", "fieldsType": "FieldsV1"}])
        );
        assert_eq!(
            v["metadata"]["annotations"],
            json!({"wavegate.dev/annotate": "true"})
        );
        assert!(v["status"].get("history").is_none());
        assert_eq!(
            v["status"]["operationState"],
            json!({"phase": "Succeeded", "syncResult": {"revision": "abc", "resources": [
                {"group": "", "kind": "Service", "namespace": "shop", "name": "web", "status": "Synced"}]}})
        );
        assert_eq!(v["status"]["resources"][0]["name"], "web");
        assert_eq!(v["status"]["sync"]["status"], "Synced");
    }
}
