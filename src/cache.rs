//! The watch-backed cache: the only place wavegate reads the cluster.
//!
//! One kube-rs reflector per kind (and per namespace when scoped), started the first time a check
//! needs that kind, so wavegate never lists or watches what nobody asks about. Stores hold only
//! what the checks read: pods are stripped to metadata, node, phase, IPs and conditions.
//!
//! Each watch tracks whether it has synced and whether it is failing; a read from a watch that is
//! not synced or is failing is an error, never an empty list — an empty list would let a check
//! conclude "no pods" or "no endpoints" from data that simply has not arrived.

use crate::metrics::{Metrics, ResourceLabel};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource as KubeResource, ResourceExt};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::{Notify, broadcast};

/// How long a watch that reported an error counts as failing when nothing has arrived since.
/// kube-rs' default backoff retries well within this, so a watch that is still broken keeps
/// refreshing the error; a watch that recovered on an idle kind ages out of it.
const FAILING_WINDOW: Duration = Duration::from_secs(60);

/// How long positive and negative discovery answers are kept. A CRD installed later is picked
/// up within the negative TTL.
const DISCOVERY_TTL: Duration = Duration::from_secs(300);
const DISCOVERY_MISS_TTL: Duration = Duration::from_secs(10);

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CacheError {
    #[error("namespace {0} is not watched by this wavegate (see --namespaces)")]
    NamespaceNotWatched(String),
    #[error("CRD {0} is not installed in the cluster")]
    NotInstalled(String),
    #[error("the cache of {0} has not synced yet")]
    NotSynced(String),
    #[error("the watch on {what} is failing: {error}")]
    WatchFailing { what: String, error: String },
    #[error("discovery of {what} failed: {error}")]
    Discovery { what: String, error: String },
}

/// An object changed somewhere wavegate watches. The gate controller re-evaluates gates that
/// reference it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// kubectl-style resource: `pods`, `services`, `databases.postgresql.cnpg.io`, …
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

/// Sync and error state of one watch.
#[derive(Default)]
struct WatchHealth {
    synced: AtomicBool,
    synced_notify: Notify,
    last_error: Mutex<Option<(Instant, String)>>,
}

impl WatchHealth {
    fn failing(&self) -> Option<String> {
        let guard = self.last_error.lock().ok()?;
        guard
            .as_ref()
            .filter(|(at, _)| at.elapsed() < FAILING_WINDOW)
            .map(|(_, e)| e.clone())
    }

    fn clear_error(&self) {
        if let Ok(mut g) = self.last_error.lock() {
            *g = None;
        }
    }

    fn set_error(&self, e: String) {
        if let Ok(mut g) = self.last_error.lock() {
            *g = Some((Instant::now(), e));
        }
    }
}

struct Watch<K: KubeResource + 'static>
where
    K::DynamicType: Hash + Eq,
{
    store: Store<K>,
    dyntype: K::DynamicType,
    health: Arc<WatchHealth>,
    what: String,
}

impl<K: KubeResource + 'static> Clone for Watch<K>
where
    K::DynamicType: Hash + Eq + Clone,
{
    fn clone(&self) -> Self {
        Watch {
            store: self.store.clone(),
            dyntype: self.dyntype.clone(),
            health: self.health.clone(),
            what: self.what.clone(),
        }
    }
}

type WatchSet<K> = Mutex<HashMap<(String, Option<String>), Watch<K>>>;

pub struct Cache {
    client: Client,
    /// `None`: watch cluster-wide. `Some`: one watch per listed namespace, nothing else.
    namespaces: Option<BTreeSet<String>>,
    sync_wait: Duration,
    pods: WatchSet<Pod>,
    services: WatchSet<Service>,
    slices: WatchSet<EndpointSlice>,
    dynamic: WatchSet<DynamicObject>,
    discovered: moka::future::Cache<(String, String), Result<ApiResource, CacheError>>,
    all_health: Mutex<Vec<(String, Arc<WatchHealth>)>>,
    changes: broadcast::Sender<Change>,
    metrics: Arc<Metrics>,
}

impl Cache {
    /// `sync_wait` bounds how long a first read waits for a new watch to list its objects.
    pub fn new(
        client: Client,
        namespaces: Option<BTreeSet<String>>,
        sync_wait: Duration,
        metrics: Arc<Metrics>,
    ) -> Arc<Cache> {
        let (changes, _) = broadcast::channel(4096);
        Arc::new(Cache {
            client,
            namespaces,
            sync_wait,
            pods: Mutex::default(),
            services: Mutex::default(),
            slices: Mutex::default(),
            dynamic: Mutex::default(),
            discovered: moka::future::Cache::builder()
                .expire_after(DiscoveryExpiry)
                .max_capacity(512)
                .build(),
            all_health: Mutex::default(),
            changes,
            metrics,
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// True when every watch started so far has synced and none is failing (`/readyz`).
    /// The reasons it is not ready, otherwise.
    pub fn readiness(&self) -> Result<usize, Vec<String>> {
        let all = match self.all_health.lock() {
            Ok(g) => g.clone(),
            Err(_) => return Err(vec!["cache state poisoned".into()]),
        };
        let problems: Vec<String> = all
            .iter()
            .filter_map(|(what, h)| {
                if !h.synced.load(Ordering::Acquire) {
                    Some(format!("{what}: not synced"))
                } else {
                    h.failing().map(|e| format!("{what}: {e}"))
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(all.len())
        } else {
            Err(problems)
        }
    }

    /// Pods of one namespace, stripped to what checks read.
    pub async fn pods(&self, namespace: &str) -> Result<Vec<Arc<Pod>>, CacheError> {
        let w = self.typed_watch(&self.pods, "pods", namespace, strip_pod)?;
        self.read(&w).await?;
        // The store has no namespace index; filtering in place at least copies (and
        // reference-counts) only this namespace's pods, not the whole cluster's.
        Ok(w.store
            .state_filter(|p| p.metadata.namespace.as_deref() == Some(namespace)))
    }

    pub async fn service(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Service>>, CacheError> {
        let w = self.typed_watch(&self.services, "services", namespace, strip_meta)?;
        self.read(&w).await?;
        Ok(w.store.get(&ObjectRef::new(name).within(namespace)))
    }

    /// EndpointSlices of one Service: those labelled `kubernetes.io/service-name=<name>`
    /// (discovery.k8s.io/v1 `LabelServiceName`), which is how the EndpointSlice controller and
    /// kube-proxy associate slices with a Service.
    pub async fn endpoint_slices(
        &self,
        namespace: &str,
        service: &str,
    ) -> Result<Vec<Arc<EndpointSlice>>, CacheError> {
        let w = self.typed_watch(&self.slices, "endpointslices", namespace, strip_meta)?;
        self.read(&w).await?;
        Ok(w.store.state_filter(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.labels()
                    .get("kubernetes.io/service-name")
                    .map(String::as_str)
                    == Some(service)
        }))
    }

    /// One object of any kind, as JSON (`None` when it does not exist).
    pub async fn object(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, CacheError> {
        let w = self.dynamic_watch(group, plural, namespace).await?;
        self.read(&w).await?;
        let key = ObjectRef::new_with(name, w.dyntype.clone()).within(namespace);
        Ok(w.store.get(&key).map(|o| to_json(&o)))
    }

    /// All objects of a kind in one namespace, or in every watched namespace when `namespace`
    /// is `None`.
    pub async fn objects(
        &self,
        group: &str,
        plural: &str,
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
            let w = self.dynamic_watch(group, plural, ns).await?;
            self.read(&w).await?;
            out.extend(
                w.store
                    .state()
                    .iter()
                    .filter(|o| scope.is_none() || o.metadata.namespace == scope)
                    .map(|o| to_json(o)),
            );
        }
        Ok(out)
    }

    /// Which watch a namespace's reads go to: the cluster-wide one, or the namespace's own when
    /// scoped. An empty namespace means "all" and is only valid unscoped.
    fn scope(&self, namespace: &str) -> Result<Option<String>, CacheError> {
        match &self.namespaces {
            None => Ok(None),
            Some(list) if list.contains(namespace) => Ok(Some(namespace.to_string())),
            Some(_) => Err(CacheError::NamespaceNotWatched(namespace.to_string())),
        }
    }

    async fn read<K>(&self, w: &Watch<K>) -> Result<(), CacheError>
    where
        K: KubeResource + Clone + 'static,
        K::DynamicType: Hash + Eq + Clone,
    {
        if !w.health.synced.load(Ordering::Acquire) {
            let notified = w.health.synced_notify.notified();
            if !w.health.synced.load(Ordering::Acquire) {
                let _ = tokio::time::timeout(self.sync_wait, notified).await;
            }
            if !w.health.synced.load(Ordering::Acquire) {
                return Err(CacheError::NotSynced(w.what.clone()));
            }
        }
        if let Some(error) = w.health.failing() {
            return Err(CacheError::WatchFailing {
                what: w.what.clone(),
                error,
            });
        }
        Ok(())
    }

    fn typed_watch<K>(
        &self,
        set: &WatchSet<K>,
        what: &str,
        namespace: &str,
        strip: fn(&mut K),
    ) -> Result<Watch<K>, CacheError>
    where
        K: KubeResource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Debug
            + Send
            + Sync
            + serde::de::DeserializeOwned
            + 'static,
    {
        let scope = self.scope(namespace)?;
        let mut guard = set
            .lock()
            .map_err(|_| CacheError::NotSynced(what.to_string()))?;
        let key = (what.to_string(), scope.clone());
        if let Some(w) = guard.get(&key) {
            return Ok(w.clone());
        }
        let api: Api<K> = match &scope {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let w = self.spawn(api, (), what, scope, strip);
        guard.insert(key, w.clone());
        Ok(w)
    }

    async fn dynamic_watch(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
    ) -> Result<Watch<DynamicObject>, CacheError> {
        let what = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        let scope = if namespace.is_empty() {
            None
        } else {
            self.scope(namespace)?
        };
        let key = (what.clone(), scope.clone());
        if let Some(w) = self.dynamic.lock().ok().and_then(|g| g.get(&key).cloned()) {
            return Ok(w);
        }
        let ar = self.discover(group, plural).await?;
        let mut guard = self
            .dynamic
            .lock()
            .map_err(|_| CacheError::NotSynced(what.clone()))?;
        if let Some(w) = guard.get(&key) {
            return Ok(w.clone());
        }
        let api: Api<DynamicObject> = match &scope {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let w = self.spawn(api, ar, &what, scope, strip_meta);
        guard.insert(key, w.clone());
        Ok(w)
    }

    /// The plural under which the API server serves `kind` in `group` (for resources named by
    /// kind, as Argo CD lists them in an Application's status).
    pub async fn plural_of(&self, group: &str, kind: &str) -> Result<String, CacheError> {
        let client = self.client.clone();
        let (g, k) = (group.to_string(), kind.to_string());
        let found = self
            .discovered
            .get_with((g.clone(), format!("Kind:{k}")), async move {
                let what = format!("kind {k} in group {g:?}");
                match kube::discovery::group(&client, &g).await {
                    Ok(api_group) => api_group
                        .recommended_kind(&k)
                        .map(|(ar, _)| ar)
                        .ok_or(CacheError::NotInstalled(what)),
                    Err(kube::Error::Discovery(_)) => Err(CacheError::NotInstalled(what)),
                    Err(e) => Err(CacheError::Discovery {
                        what,
                        error: e.to_string(),
                    }),
                }
            })
            .await?;
        Ok(found.plural)
    }

    /// Whether the API server serves `plural.group` at all.
    pub async fn resolve(&self, group: &str, plural: &str) -> Result<(), CacheError> {
        self.discover(group, plural).await.map(|_| ())
    }

    /// Resolve `plural.group` to the served version, coalescing concurrent look-ups.
    pub async fn discover(&self, group: &str, plural: &str) -> Result<ApiResource, CacheError> {
        let client = self.client.clone();
        let (g, p) = (group.to_string(), plural.to_string());
        self.discovered
            .get_with((g.clone(), p.clone()), async move {
                let what = if g.is_empty() {
                    p.clone()
                } else {
                    format!("{p}.{g}")
                };
                match kube::discovery::group(&client, &g).await {
                    Ok(api_group) => api_group
                        .recommended_resources()
                        .into_iter()
                        .map(|(ar, _)| ar)
                        .find(|ar| ar.plural == p)
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

    fn spawn<K>(
        &self,
        api: Api<K>,
        dyntype: K::DynamicType,
        what: &str,
        scope: Option<String>,
        strip: fn(&mut K),
    ) -> Watch<K>
    where
        K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
        K::DynamicType: Hash + Eq + Clone + Send + Sync,
    {
        let writer = reflector::store::Writer::new(dyntype.clone());
        let store = writer.as_reader();
        let health = Arc::new(WatchHealth::default());
        let label = match &scope {
            Some(ns) => format!("{what} in {ns}"),
            None => what.to_string(),
        };
        if let Ok(mut all) = self.all_health.lock() {
            all.push((label.clone(), health.clone()));
        }
        let h = health.clone();
        let changes = self.changes.clone();
        let metrics = self.metrics.clone();
        let resource = what.to_string();
        tracing::info!(watch = %label, "starting watch");
        // Bookmarks keep resourceVersion fresh on quiet kinds, so a reconnect resumes instead
        // of relisting (a relist is the most expensive thing a watch can do to the API server).
        let cfg = watcher::Config::default().any_semantic();
        let stream = watcher(api, cfg)
            .default_backoff()
            .modify(strip)
            .reflect(writer);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(ev) => {
                        h.clear_error();
                        let touched: Vec<&K> = match &ev {
                            watcher::Event::Apply(o) | watcher::Event::Delete(o) => vec![o],
                            watcher::Event::InitApply(o) => vec![o],
                            watcher::Event::InitDone => {
                                if !h.synced.swap(true, Ordering::AcqRel) {
                                    tracing::info!(watch = %label, "watch synced");
                                }
                                h.synced_notify.notify_waiters();
                                vec![]
                            }
                            watcher::Event::Init => {
                                metrics
                                    .watch_restarts
                                    .get_or_create(&ResourceLabel::new(&resource))
                                    .inc();
                                vec![]
                            }
                        };
                        for o in touched {
                            let _ = changes.send(Change {
                                resource: resource.clone(),
                                namespace: o.namespace().unwrap_or_default(),
                                name: o.name_any(),
                            });
                        }
                    }
                    Err(e) => {
                        tracing::warn!(watch = %label, error = %e, "watch error");
                        metrics
                            .watch_errors
                            .get_or_create(&ResourceLabel::new(&resource))
                            .inc();
                        h.set_error(e.to_string());
                    }
                }
            }
        });
        Watch {
            store,
            dyntype,
            health,
            what: what.to_string(),
        }
    }
}

/// Drop what no check reads: managed fields and the last-applied annotation are often larger
/// than the rest of the object together.
fn strip_meta<K: KubeResource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Keep of a pod only labels, owner, deletion, node, phase, IPs and conditions.
fn strip_pod(p: &mut Pod) {
    strip_meta(p);
    p.metadata.annotations = None;
    p.spec = p.spec.take().map(|s| PodSpec {
        node_name: s.node_name,
        ..PodSpec::default()
    });
    p.status = p.status.take().map(|s| PodStatus {
        phase: s.phase,
        pod_ip: s.pod_ip,
        pod_ips: s.pod_ips,
        // Checks read only the Ready condition; the other four are a third of a stored pod.
        conditions: s
            .conditions
            .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
        ..PodStatus::default()
    });
}

fn to_json(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

struct DiscoveryExpiry;

impl moka::Expiry<(String, String), Result<ApiResource, CacheError>> for DiscoveryExpiry {
    fn expire_after_create(
        &self,
        _key: &(String, String),
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
    }

    fn pod_list(ready: bool, rv: &str) -> Value {
        let status = if ready { "True" } else { "False" };
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": rv},
               "items": [{"metadata": {"name": "web-0", "namespace": NS, "resourceVersion": rv,
                                       "labels": {"app": "web"}},
                          "status": {"phase": "Running", "podIP": "10.0.0.1",
                                     "conditions": [{"type": "Ready", "status": status}]}}]})
    }

    async fn pods(State(s): State<Arc<Script>>, Query(q): Query<HashMap<String, String>>) -> Response {
        if q.get("watch").map(String::as_str) == Some("true") {
            let reply = s.watches.lock().unwrap().pop_front().unwrap_or(WatchReply::Quiet);
            let body = match reply {
                WatchReply::Quiet => Body::from_stream(futures::stream::pending::<
                    Result<Vec<u8>, std::io::Error>,
                >()),
                WatchReply::ErrorWhen(code, fire) => Body::from_stream(futures::stream::once(async move {
                    let _ = fire.await;
                    let event = json!({"type": "ERROR", "object": {
                        "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                        "reason": if code == 410 { "Expired" } else { "InternalError" },
                        "message": if code == 410 { "too old resource version: 1 (7)" } else { "etcdserver: leader changed" }}});
                    Ok::<_, std::io::Error>(format!("{event}\n").into_bytes())
                })),
            };
            return (StatusCode::OK, body).into_response();
        }
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
        axum::Json(pod_list(reply.ready, reply.resource_version)).into_response()
    }

    async fn access_review(State(s): State<Arc<Script>>, axum::Json(mut review): axum::Json<Value>) -> Response {
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
        Cache::new(
            client,
            Some(BTreeSet::from([NS.to_string()])),
            Duration::from_secs(2),
            Arc::new(Metrics::default()),
        )
    }

    fn ready_of(pods: &[Arc<Pod>]) -> Vec<bool> {
        pods.iter()
            .map(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .collect()
    }

    async fn until<F: FnMut() -> bool>(what: &str, mut f: F) {
        let start = Instant::now();
        while !f() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}: not within 10s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn reads_during_a_relist_after_410_gone_are_not_served_as_fresh() {
        let script = Arc::new(Script::default());
        let (gone, gone_rx) = oneshot::channel();
        let (relisted, relisted_rx) = oneshot::channel();
        script.lists.lock().unwrap().extend([
            ListReply { ready: true, resource_version: "1", hold: None },
            ListReply { ready: false, resource_version: "7", hold: Some(relisted_rx) },
        ]);
        script.watches.lock().unwrap().push_back(WatchReply::ErrorWhen(410, gone_rx));
        let cache = cache(fake_api(script.clone()).await);

        let before = cache.pods(NS).await.expect("the first list is served");
        assert_eq!(ready_of(&before), [true]);

        // The pod turned NotReady while the watch was away; the relist that will say so is
        // still on its way, and the store still holds the pod as it was before the outage.
        gone.send(()).unwrap();
        until("the relist starts", || script.lists_started.load(Ordering::SeqCst) == 2).await;
        let during = cache.pods(NS).await;
        assert!(
            during.is_err(),
            "a read between the watch error and the completed relist must fail, got {:?}",
            during.map(|p| ready_of(&p))
        );

        relisted.send(()).unwrap();
        let start = Instant::now();
        loop {
            match cache.pods(NS).await {
                Ok(p) => {
                    assert_eq!(ready_of(&p), [false], "after the relist the store is the truth");
                    break;
                }
                Err(e) => assert!(start.elapsed() < Duration::from_secs(10), "still {e}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_watch_that_recovered_is_read_without_waiting_for_a_timer() {
        let script = Arc::new(Script::default());
        let (fail, fail_rx) = oneshot::channel();
        script.lists.lock().unwrap().push_back(ListReply {
            ready: true,
            resource_version: "1",
            hold: None,
        });
        script.watches.lock().unwrap().push_back(WatchReply::ErrorWhen(500, fail_rx));
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
            ready: true,
            resource_version: "1",
            hold: None,
        });
        let cache = cache(fake_api(script.clone()).await);

        let start = Instant::now();
        let read = cache.pods(NS).await;
        assert!(read.is_err(), "RBAC forbids pods: {:?}", read.map(|p| p.len()));
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
}
