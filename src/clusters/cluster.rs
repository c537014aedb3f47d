//! One cluster wavegate judges: its client, its cache, its evaluator and the signal that it is
//! no longer judged. Home is one too; everything that runs per cluster (a request's reads, a
//! gate controller) is built from it (compare kubert's `Runtime`, which owns a cluster's
//! client, readiness and shutdown).

use super::{HOME, HOME_SERVER};
use crate::cache::Cache;
use crate::evaluate::Evaluator;
use crate::gate::controller::{self, Context, DeploysHere, Settings};
use crate::metrics::Metrics;
use kube::api::Api;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub struct Cluster {
    /// Argo CD's name for it (`in-cluster` for home).
    pub name: String,
    /// Its API server, as Argo CD's destinations name it (normalized).
    pub server: String,
    pub client: kube::Client,
    /// Its watches; the cluster is ready when this cache's required watches are.
    pub cache: Arc<Cache>,
    pub evaluator: Arc<Evaluator>,
    /// Fired when the cluster is replaced (its source changed) or removed: what is in flight
    /// with it stops rather than answer about a cluster no longer judged. Home's never fires.
    pub stop: CancellationToken,
    /// What its source said, to tell a changed Secret or file from the same one (0 for home).
    pub(super) fingerprint: u64,
    /// Which cluster this really is ([`identity`]), once read.
    pub(super) identity: OnceLock<String>,
    /// Whether not reading it was logged (once, not at every resync).
    identity_warned: AtomicBool,
    /// After a failed read, not before this: see [`IDENTITY_RETRY`].
    identity_retry: std::sync::Mutex<Option<Instant>>,
}

impl Cluster {
    /// The cluster `evaluator` judges, over its cache and that cache's client (one cluster by
    /// construction).
    pub(super) fn new(name: &str, server: &str, evaluator: Arc<Evaluator>) -> Cluster {
        let cache = evaluator.cache().clone();
        Cluster {
            name: name.to_string(),
            server: server.to_string(),
            client: cache.client().clone(),
            cache,
            evaluator,
            stop: CancellationToken::new(),
            fingerprint: 0,
            identity: OnceLock::new(),
            identity_warned: AtomicBool::new(false),
            identity_retry: std::sync::Mutex::new(None),
        }
    }

    /// The cluster wavegate runs in, judged by `evaluator`.
    pub fn home(evaluator: Arc<Evaluator>) -> Arc<Cluster> {
        Arc::new(Cluster::new(HOME, HOME_SERVER, evaluator))
    }

    /// A destination cluster, and what its source said of it; `identity` when already read.
    pub(super) fn remote(
        name: &str,
        server: &str,
        evaluator: Arc<Evaluator>,
        fingerprint: u64,
        identity: Option<String>,
    ) -> Cluster {
        let known = OnceLock::new();
        if let Some(id) = identity {
            let _ = known.set(id);
        }
        // Unknown here means the read made while connecting failed just now.
        let retry = known
            .get()
            .is_none()
            .then(|| Instant::now() + IDENTITY_RETRY);
        Cluster {
            fingerprint,
            identity_warned: AtomicBool::new(known.get().is_none()),
            identity: known,
            identity_retry: std::sync::Mutex::new(retry),
            ..Cluster::new(name, server, evaluator)
        }
    }

    /// Why what runs with this cluster must stop (once `stop` has fired).
    pub fn stopped_reason(&self) -> String {
        format!(
            "cluster {:?} was replaced or removed by its source while this request used it; \
             ask again",
            self.name
        )
    }

    /// This cluster's gate controller: it judges and writes the WaveGates of this cluster, and
    /// reads Argo CD's Applications in `argocd`, the cluster Argo CD runs in (home). An
    /// Application deploys here when its destination names this cluster's name or server (see
    /// [`Cluster::gate_controller_in`] for the cluster set's own resolution).
    pub fn gate_controller(
        &self,
        argocd: &Cluster,
        metrics: Arc<Metrics>,
        settings: Settings,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (name, server) = (self.name.clone(), self.server.clone());
        let deploys_here: DeploysHere = Arc::new(move |app| names_cluster(app, &name, &server));
        self.gate_controller_in(argocd, metrics, settings, deploys_here)
    }

    /// [`Cluster::gate_controller`], with Applications' destinations resolved by
    /// `deploys_here`.
    pub(super) fn gate_controller_in(
        &self,
        argocd: &Cluster,
        metrics: Arc<Metrics>,
        settings: Settings,
        deploys_here: DeploysHere,
    ) -> impl Future<Output = ()> + Send + 'static {
        let context = Context {
            cluster: self.name.clone(),
            client: self.client.clone(),
            evaluator: self.evaluator.clone(),
            applications: argocd.evaluator.clone(),
            metrics,
            deploys_here,
        };
        controller::run(context, settings)
    }

    /// Read this cluster's [`identity`] unless known, or failed less than [`IDENTITY_RETRY`]
    /// ago; whether it was learnt now.
    pub(super) async fn identify(&self) -> bool {
        if self.identity.get().is_some() {
            return false;
        }
        if crate::locks::lock(&self.identity_retry).is_some_and(|at| Instant::now() < at) {
            return false;
        }
        match identity(&self.client).await {
            Ok(id) => self.identity.set(id).is_ok(),
            Err(e) => {
                *crate::locks::lock(&self.identity_retry) = Some(Instant::now() + IDENTITY_RETRY);
                if self.identity_warned.swap(true, Ordering::Relaxed) {
                    return false;
                }
                tracing::warn!(cluster = %self.name, error = %e,
                    "cannot read this cluster's identity (get namespaces/kube-system); its \
                     WaveGates get no status writer until it can be told apart from home");
                false
            }
        }
    }
}

/// Whether `app`'s destination names the cluster `name` at `server` (normalized): by name when
/// it gives one, else by server, as Argo CD resolves it (argo-cd `util/argo`
/// `GetDestinationCluster`); no destination at all is home's.
pub(crate) fn names_cluster(app: &serde_json::Value, name: &str, server: &str) -> bool {
    let field = |k: &str| {
        app.pointer(&format!("/spec/destination/{k}"))
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (field("name"), field("server")) {
        (Some(n), _) => n == name,
        (None, Some(s)) => super::normalize_server(s) == server,
        (None, None) => name == HOME,
    }
}

/// What a cluster is, whatever address a Secret spells for it: the UID of its `kube-system`
/// Namespace. Every cluster has one (the API server creates it at start, pkg/controlplane's
/// system-namespaces controller), it can never be deleted (k8s.io/apiserver
/// `pkg/admission/plugin/namespace/lifecycle`, `immortalNamespaces`), and a UID is unique per
/// cluster, so two API addresses that show the same one front the same objects. Needs `get`
/// on that one Namespace, at home and in every remote cluster.
pub async fn identity(client: &kube::Client) -> Result<String, IdentityError> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let read = tokio::time::timeout(IDENTITY_TIMEOUT, namespaces.get("kube-system"));
    match read.await {
        Err(_) => Err(IdentityError::NoAnswer(IDENTITY_TIMEOUT)),
        Ok(Err(e)) => Err(IdentityError::Read(e)),
        Ok(Ok(ns)) => ns
            .metadata
            .uid
            .filter(|u| !u.is_empty())
            .ok_or(IdentityError::NoUid),
    }
}

/// Why a cluster's identity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("no answer within {}s", .0.as_secs())]
    NoAnswer(Duration),
    #[error(transparent)]
    Read(kube::Error),
    #[error("Namespace kube-system has no uid")]
    NoUid,
}

/// How long reading a cluster's identity may take (once per cluster, or per retry until read).
const IDENTITY_TIMEOUT: Duration = Duration::from_secs(5);

/// A cluster whose identity could not be read is asked again this long after, not at every
/// read of the cluster list. A read of the Secrets waits for these reads before its shard
/// assignment is installed, and that assignment counts only within 2 × `--clusters-resync` of
/// the read's start: retried at every read, one server that never answers (5 s) left every
/// assignment stale on arrival at a 2 s resync, and the replica wrote no cluster's gates at
/// all. Now such a read is slow once a minute.
pub(crate) const IDENTITY_RETRY: Duration = Duration::from_secs(60);
