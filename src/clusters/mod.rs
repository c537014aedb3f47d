//! Which clusters wavegate judges: the home cluster (where it runs, with its own credentials)
//! and, with `--clusters-from`, the destination clusters Argo CD deploys to, each with its own
//! cache and evaluator. The set follows its source (Argo CD's cluster Secrets, or a directory
//! of kubeconfigs): re-read every `--clusters-resync`, a cluster added, removed or edited there
//! is added, removed or rebuilt here, and one that cannot be used is refused with its reason
//! while the others run.
//!
//! Each is a [`Cluster`], home included, and each runs its own writers ([`Clusters::run_writers`]).
//! A remote cluster that cannot be reached only makes its own verdicts Unknown: its cache's
//! watches fail like any watch (a failing watch is never Healthy), and nothing here waits on it.

mod cluster;
mod ownership;
pub mod ring;
pub mod shard;
mod sharding;
mod source;
mod writers;

pub use cluster::{Cluster, identity};
pub use ownership::{Owner, Rules};
pub use sharding::{Mode, ShardSettings, Sharding, holder_pod};
pub use source::{
    Destination, FromSecret, SECRET_TYPE_CLUSTER, SECRET_TYPE_LABEL, SecretTrust, SourceError,
    from_argocd_secret, from_kubeconfig_file, normalize_server,
};
pub use writers::Writers;

use crate::evaluate::{EvalConfig, Evaluator};
use crate::locks;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::config::KubeConfigOptions;
use serde::Serialize;
use serde_json::Value;
use shard::ShardedCluster;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};
use thiserror::Error;
use tokio::sync::watch;

/// Why a cluster cannot be used, or a destination resolved.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClusterError {
    #[error("destination cluster {0:?} is not one wavegate judges")]
    UnknownName(String),
    #[error("destination server {0} is not a cluster wavegate judges")]
    UnknownServer(String),
    #[error("cannot read the cluster list: {0}")]
    SourceUnreadable(String),
    #[error("cannot use its connection settings: {0}")]
    Connect(String),
    #[error("cannot build its evaluator: {0}")]
    Build(String),
    /// With `--shard-like-argocd`: another replica judges `cluster`, or none does.
    #[error("{why}")]
    JudgedElsewhere { cluster: String, why: String },
}

/// Argo CD's name for the cluster it runs in (argo-cd `common.KubernetesInClusterName`)…
pub const HOME: &str = "in-cluster";
/// …and its server (`common.KubernetesInternalAPIServerAddr`).
pub const HOME_SERVER: &str = "https://kubernetes.default.svc";

/// A cluster its source names but wavegate does not run, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Refused {
    /// Where it was read: `Secret argocd/cluster-x` or a kubeconfig file path.
    pub source: String,
    pub reason: String,
}

/// Where the remote clusters come from.
pub enum Source {
    /// Argo CD's cluster Secrets in one namespace: every one (list, label selector), or only
    /// the named ones (get each; the Role can then be narrowed by `resourceNames`).
    ArgoCdSecrets {
        client: kube::Client,
        namespace: String,
        names: Vec<String>,
        trust: SecretTrust,
    },
    /// A mounted directory, one kubeconfig file per cluster named after it (see
    /// [`Source::kubeconfig_dir`]).
    KubeconfigDir {
        dir: PathBuf,
        /// What each file said when last parsed, by path: a file whose modification time and
        /// size are unchanged is not parsed again at every resync.
        seen: Arc<Mutex<HashMap<PathBuf, Parsed>>>,
    },
}

/// One kubeconfig file as last read.
#[derive(Clone)]
pub struct Parsed {
    modified: Option<SystemTime>,
    len: u64,
    outcome: Result<Destination, SourceError>,
}

/// Builds the evaluator of a new or changed cluster (the caller owns the flags it needs).
pub type Build = dyn Fn(&Destination, kube::Client) -> Result<Arc<Evaluator>, String> + Send + Sync;

/// The clusters that run now.
pub struct Clusters {
    home: Arc<Cluster>,
    /// Other names the source gives the home cluster (a renamed `in-cluster` Secret, or a
    /// Secret that reaches it by another address).
    home_names: RwLock<Arc<std::collections::BTreeSet<String>>>,
    /// Other addresses of the home cluster (a Secret's server whose identity is home's).
    home_servers: RwLock<Arc<std::collections::BTreeSet<String>>>,
    /// Secrets found to reach home, by name, with the fingerprint of what they said: unchanged,
    /// they are not connected again at every refresh.
    alias_fingerprints: RwLock<HashMap<String, u64>>,
    remote: RwLock<Arc<BTreeMap<String, Arc<Cluster>>>>,
    /// With `--shard-like-argocd`: which clusters this replica judges.
    sharding: Option<Sharding>,
    /// With `--shard-like-argocd`: the clusters other replicas (or none) judge, by name. They
    /// are not connected to beyond reading their identity once.
    elsewhere: RwLock<Arc<BTreeMap<String, Elsewhere>>>,
    refused: RwLock<Vec<Refused>>,
    /// Bumped whenever the remote set changes (the per-cluster writers follow it).
    changed: watch::Sender<u64>,
    /// Bumped whenever what [`Clusters::destination_of`] answers may change: the remote set,
    /// or the names and servers that mean home.
    resolved: std::sync::atomic::AtomicU64,
}

/// See [`Clusters::stamp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    resolved: u64,
    /// (which cache, its epoch, the generation of the health scripts its evaluator judges
    /// with). The scripts are argocd-cm's, followed by a watch of their own
    /// (`argocd_lua::argocd_cm`), not the cache's: a kept answer judged before they changed
    /// would otherwise be served until the cache's next event, on a quiet cluster for ever.
    epochs: Vec<(usize, u64, u64)>,
}

impl Stamp {
    /// This stamp of the caches of `clusters` only.
    pub(crate) fn only<'a>(&self, clusters: impl IntoIterator<Item = &'a Cluster>) -> Stamp {
        let kept: Vec<usize> = clusters
            .into_iter()
            .map(|c| Arc::as_ptr(c.evaluator.cache()) as usize)
            .collect();
        Stamp {
            resolved: self.resolved,
            epochs: self
                .epochs
                .iter()
                .filter(|(cache, ..)| kept.contains(cache))
                .copied()
                .collect(),
        }
    }

    #[cfg(test)]
    pub(crate) fn test(epoch: u64) -> Stamp {
        Stamp {
            resolved: 0,
            epochs: vec![(0, epoch, 0)],
        }
    }
}

/// A cluster of the source that another replica judges (or none does).
#[derive(Debug, Clone)]
pub struct Elsewhere {
    pub server: String,
    fingerprint: u64,
    /// Its [`identity`], once read: two Secrets reaching one cluster must not get two writers
    /// on two replicas either ([`Clusters::writable`]).
    identity: Option<String>,
    /// Unread: not asked again before this ([`cluster::IDENTITY_RETRY`]).
    retry_at: Option<std::time::Instant>,
}

/// Whether two sets of clusters judged elsewhere name the same clusters at the same servers:
/// [`Clusters::destination_of`] answers by either (a cluster's server edited moves an
/// Application deploying to the new address from "not a cluster wavegate judges" to "judged
/// elsewhere", and answers kept with the old must go).
fn same_places(a: &BTreeMap<String, Elsewhere>, b: &BTreeMap<String, Elsewhere>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((n, x), (m, y))| n == m && x.server == y.server)
}

impl Clusters {
    /// The home cluster alone (and, once refreshed from a source, the remote ones).
    pub fn new(home: Arc<Cluster>) -> Arc<Clusters> {
        Arc::new(Clusters::unsharded(home))
    }

    fn unsharded(home: Arc<Cluster>) -> Clusters {
        Clusters {
            home,
            home_names: RwLock::default(),
            home_servers: RwLock::default(),
            alias_fingerprints: RwLock::default(),
            remote: RwLock::default(),
            sharding: None,
            elsewhere: RwLock::default(),
            refused: RwLock::default(),
            changed: watch::Sender::new(0),
            resolved: Default::default(),
        }
    }

    /// The clusters of one replica that judges only its shard's (`--shard-like-argocd`).
    pub fn sharded(home: Arc<Cluster>, sharding: Sharding) -> Arc<Clusters> {
        Arc::new(Clusters {
            sharding: Some(sharding),
            ..Clusters::unsharded(home)
        })
    }

    /// With `--shard-like-argocd`, this replica's sharding.
    pub fn sharding(&self) -> Option<&Sharding> {
        self.sharding.as_ref()
    }

    /// The clusters another replica judges (or none does), by name.
    pub fn elsewhere(&self) -> Arc<BTreeMap<String, Elsewhere>> {
        locks::read(&self.elsewhere).clone()
    }

    /// The cluster named `name`, or why there is none here: unknown, or judged by another
    /// replica.
    pub fn find(&self, name: &str) -> Result<Arc<Cluster>, ClusterError> {
        if let Some(c) = self.lookup(name) {
            return Ok(c);
        }
        if self.elsewhere().contains_key(name)
            && let Some(why) = self.sharding.as_ref().and_then(|s| s.elsewhere(name))
        {
            return Err(ClusterError::JudgedElsewhere {
                cluster: name.to_string(),
                why,
            });
        }
        Err(ClusterError::UnknownName(crate::health::printable(name)))
    }

    /// The cluster wavegate runs in.
    pub fn home(&self) -> &Arc<Cluster> {
        &self.home
    }

    /// The evaluator of the cluster named `name` (`in-cluster` is the home cluster).
    pub fn get(&self, name: &str) -> Option<Arc<Evaluator>> {
        self.lookup(name).map(|c| c.evaluator.clone())
    }

    /// The cluster named `name`: `in-cluster`, or another name its source gives home, is home.
    pub fn lookup(&self, name: &str) -> Option<Arc<Cluster>> {
        let renamed = || locks::read(&self.home_names).contains(name);
        if name == self.home.name || renamed() {
            return Some(self.home.clone());
        }
        self.remotes().get(name).cloned()
    }

    /// The remote clusters that run, by name.
    pub fn remotes(&self) -> Arc<BTreeMap<String, Arc<Cluster>>> {
        locks::read(&self.remote).clone()
    }

    pub fn refused(&self) -> Vec<Refused> {
        locks::read(&self.refused).clone()
    }

    /// What answers read from `clusters` were derived from: how destinations resolve, and the
    /// epoch of each cache (home first). Equal stamps: every read would answer the same.
    pub(crate) fn stamp<'a>(&self, clusters: impl IntoIterator<Item = &'a Cluster>) -> Stamp {
        let resolved = self.resolved.load(std::sync::atomic::Ordering::Acquire);
        let mut epochs: Vec<(usize, u64, u64)> = clusters
            .into_iter()
            .map(|c| {
                let cache = c.evaluator.cache();
                (
                    Arc::as_ptr(cache) as usize,
                    cache.epoch(),
                    c.evaluator.scripts(),
                )
            })
            .collect();
        // One entry per cache, in one order: a view reads home twice when the Application
        // deploys to home (its own cluster, then its destination's), and a stamp of
        // [home, home] must equal the kept [home], or such a view is never served kept.
        epochs.sort_unstable();
        epochs.dedup_by_key(|(cache, ..)| *cache);
        Stamp { resolved, epochs }
    }

    /// Every cluster: home first, then the remote ones.
    pub(crate) fn all(&self) -> Vec<Arc<Cluster>> {
        std::iter::once(self.home.clone())
            .chain(self.remotes().values().cloned())
            .collect()
    }

    /// Whether every cache of `clusters` serves reads now (see `Cache::vouched`).
    pub(crate) fn vouched<'a>(clusters: impl IntoIterator<Item = &'a Cluster>) -> bool {
        clusters.into_iter().all(|c| c.evaluator.cache().vouched())
    }

    /// Notified when the remote set changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The evaluator of an Application's destination (see [`Clusters::destination_of`]).
    pub fn of_application(&self, app: &Value) -> Result<Arc<Evaluator>, ClusterError> {
        self.destination_of(app).map(|c| c.evaluator.clone())
    }

    /// An Application's destination cluster (`spec.destination.name`, else `.server`), as
    /// Argo CD resolves it (argo-cd `util/argo` `GetDestinationCluster`: by name when a name is
    /// given, else by server), or why there is none.
    pub fn destination_of(&self, app: &Value) -> Result<Arc<Cluster>, ClusterError> {
        let field = |k: &str| {
            app.pointer(&format!("/spec/destination/{k}"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        match (field("name"), field("server")) {
            (Some(name), _) => self.find(name),
            (None, Some(server)) => {
                let server = normalize_server(server);
                let aliased = || locks::read(&self.home_servers).contains(&server);
                if server == self.home.server || aliased() {
                    return Ok(self.home.clone());
                }
                // Servers are unique among the remotes (`refresh` refuses duplicates).
                if let Some(c) = self.remotes().values().find(|c| c.server == server) {
                    return Ok(c.clone());
                }
                match self.elsewhere().iter().find(|(_, e)| e.server == server) {
                    Some((name, _)) => self.find(name),
                    None => Err(ClusterError::UnknownServer(crate::health::printable(
                        &server,
                    ))),
                }
            }
            // No destination: Argo CD refuses to sync it; the home cluster is as good a guess
            // as any for reading what it last reported.
            (None, None) => Ok(self.home.clone()),
        }
    }

    /// Whether `cluster` is proven to be another cluster than home: both identities read, and
    /// different. Only such a cluster gets a gate controller of its own: one that might be home
    /// by another address would be a second writer of home's WaveGates.
    pub fn proven_elsewhere(&self, cluster: &Cluster) -> bool {
        match (self.home.identity.get(), cluster.identity.get()) {
            (Some(home), Some(there)) => home != there,
            _ => false,
        }
    }

    /// With `--shards`, what each cluster this replica judges weighs, by server
    /// ([`ring::measured_weight`]): its WaveGates and watches, once it has been judged here
    /// for a while ([`Sharding::settled`]) and its caches are synced (before, it would weigh
    /// too little and the ring could move it at the next publication).
    fn measured(&self, sharding: &Sharding) -> BTreeMap<String, u32> {
        if sharding.settings.mode != Mode::Own {
            return BTreeMap::new();
        }
        let remotes = self.remotes();
        std::iter::once(&self.home)
            .chain(remotes.values())
            .filter(|c| sharding.settled(&c.name))
            .filter(|c| c.cache.readiness().is_ok())
            .map(|c| {
                let (watches, gates) = c.cache.load();
                (
                    normalize_server(&c.server),
                    ring::measured_weight(gates, watches),
                )
            })
            .collect()
    }

    /// Read the source and bring the running set in line with it. A source that cannot be
    /// read at all (the home API server down) leaves the set as it is.
    pub async fn refresh(&self, source: &Source, build: &Build) -> Result<(), ClusterError> {
        let read_at = std::time::Instant::now();
        let (found, sharded) = source.read().await?;
        // With shards, the assignment is computed from this very read of the Secrets (and
        // Argo CD's settings read right after it): a cluster this replica does not judge is
        // never connected to beyond reading its identity.
        let assigned = match (&self.sharding, source) {
            (Some(sharding), Source::ArgoCdSecrets { client, .. }) => {
                let measured = self.measured(sharding);
                Some(sharding.assign(client, &sharded, &measured).await?)
            }
            _ => None,
        };
        let current = self.remotes();
        let before_elsewhere = self.elsewhere();
        let mut next = BTreeMap::new();
        let mut elsewhere = BTreeMap::new();
        let mut by_name: BTreeMap<String, shard::Assignment> = BTreeMap::new();
        let (usable, mut home_names, mut refused) = unambiguous(found);
        let mut home_servers = std::collections::BTreeSet::new();
        let mut aliases = HashMap::new();
        // Identities learnt in this round: a cluster proven elsewhere now gets its writer.
        let mut learnt = false;
        if self.home.identity.get().is_none() {
            match identity(&self.home.client).await {
                Ok(id) => learnt |= self.home.identity.set(id).is_ok(),
                Err(e) => tracing::warn!(
                    error = %e,
                    "cannot read the home cluster's identity (get namespaces/kube-system); no \
                     remote cluster gets a gate controller until it can be told apart from home"
                ),
            }
        }
        // The identities of clusters judged elsewhere not known yet, read at once (each read
        // bounded): one unreachable cluster must not hold the reading of the others.
        let mut identities: HashMap<String, Option<String>> = HashMap::new();
        if let (Some(sharding), Some(assigned)) = (&self.sharding, &assigned) {
            let now = std::time::Instant::now();
            let unread = usable.iter().filter(|(origin, d)| {
                // Known, or failed a short while ago with this very Secret.
                let known = before_elsewhere.get(&d.name).is_some_and(|e| {
                    e.fingerprint == d.fingerprint
                        && (e.identity.is_some() || e.retry_at.is_some_and(|at| now < at))
                });
                !known && !sharding.is_mine(assigned, assigned.of(origin))
            });
            let reads = unread.map(|(_, d)| {
                // Said once per Secret as it is, not at every resync.
                let warn = before_elsewhere
                    .get(&d.name)
                    .is_none_or(|e| e.fingerprint != d.fingerprint);
                async move { (d.name.clone(), identify_destination(d, warn).await) }
            });
            identities = futures::future::join_all(reads).await.into_iter().collect();
        }
        // Clusters that stay this replica's by name but now point at another API server: the
        // replica that judged that server until now may still write it until its own next
        // read, so these wait a handover as a gained cluster does (an edited Secret keeps its
        // UID, and Argo CD's sharding places it by that, not by its server).
        let renewed: std::collections::BTreeSet<String> = usable
            .iter()
            .filter(|(_, d)| current.get(&d.name).is_some_and(|c| c.server != d.server))
            .map(|(_, d)| d.name.clone())
            .collect();
        for (origin, d) in usable {
            if let (Some(sharding), Some(assigned)) = (&self.sharding, &assigned) {
                let assignment = assigned.of(&origin);
                if !sharding.is_mine(assigned, assignment) {
                    let before = before_elsewhere
                        .get(&d.name)
                        .filter(|e| e.fingerprint == d.fingerprint);
                    let (id, retry_at) = match identities.remove(&d.name) {
                        Some(None) => (
                            None,
                            Some(std::time::Instant::now() + cluster::IDENTITY_RETRY),
                        ),
                        Some(read) => (read, None),
                        None => (
                            before.and_then(|e| e.identity.clone()),
                            before.and_then(|e| e.retry_at),
                        ),
                    };
                    if id.is_some() && id.as_ref() == self.home.identity.get() {
                        home_names.insert(d.name.clone());
                        home_servers.insert(d.server.clone());
                        continue;
                    }
                    if let Some(a) = assignment {
                        by_name.insert(d.name.clone(), a);
                    }
                    let entry = Elsewhere {
                        server: d.server.clone(),
                        fingerprint: d.fingerprint,
                        identity: id,
                        retry_at,
                    };
                    learnt |=
                        before_elsewhere.get(&d.name).map(|e| &e.identity) != Some(&entry.identity);
                    elsewhere.insert(d.name.clone(), entry);
                    continue;
                }
                if let Some(a) = assignment {
                    by_name.insert(d.name.clone(), a);
                }
            }
            let kept = current
                .get(&d.name)
                .filter(|c| c.fingerprint == d.fingerprint)
                .cloned();
            let cluster = match kept {
                Some(c) => {
                    learnt |= c.identify().await;
                    c
                }
                // Known as home by this Secret as it is: nothing to connect.
                None if locks::read(&self.alias_fingerprints).get(&d.name)
                    == Some(&d.fingerprint) =>
                {
                    by_name.remove(&d.name);
                    home_names.insert(d.name.clone());
                    home_servers.insert(d.server.clone());
                    aliases.insert(d.name.clone(), d.fingerprint);
                    continue;
                }
                None => match connect(&d, build, self.home.identity.get()).await {
                    Ok(Some(c)) => {
                        learnt |= c.identity.get().is_some();
                        tracing::info!(cluster = %d.name, server = %d.server, %origin, "cluster added");
                        Arc::new(c)
                    }
                    Ok(None) => {
                        tracing::info!(cluster = %d.name, server = %d.server, %origin,
                            "this cluster Secret names the home cluster by another address; served as home");
                        by_name.remove(&d.name);
                        home_names.insert(d.name.clone());
                        home_servers.insert(d.server.clone());
                        aliases.insert(d.name.clone(), d.fingerprint);
                        continue;
                    }
                    Err(e) => {
                        by_name.remove(&d.name);
                        refused.push(Refused {
                            source: origin,
                            reason: e.to_string(),
                        });
                        continue;
                    }
                },
            };
            // The home cluster by another address: served as home, never a second writer.
            if let (Some(home), Some(there)) = (self.home.identity.get(), cluster.identity.get())
                && home == there
            {
                tracing::info!(cluster = %d.name, server = %d.server, %origin,
                    "this cluster Secret names the home cluster by another address; served as home");
                by_name.remove(&d.name);
                home_names.insert(d.name.clone());
                home_servers.insert(d.server.clone());
                aliases.insert(d.name.clone(), d.fingerprint);
                continue;
            }
            next.insert(d.name.clone(), cluster);
        }
        // Replaced or removed: whatever is in flight with the old one stops.
        for (name, old) in current.iter() {
            if !next.get(name).is_some_and(|c| Arc::ptr_eq(c, old)) {
                old.stop.cancel();
            }
            if !next.contains_key(name) {
                tracing::info!(cluster = %name, "cluster removed");
            }
        }
        refused.sort_by(|a, b| a.source.cmp(&b.source));
        // Once per refusal, not at every resync.
        let before = self.refused();
        for r in refused.iter().filter(|r| !before.contains(r)) {
            tracing::warn!(source = %r.source, reason = %r.reason, "cluster refused");
        }
        let same = current.len() == next.len()
            && current
                .iter()
                .zip(next.iter())
                .all(|((a, x), (b, y))| a == b && Arc::ptr_eq(x, y));
        let same_elsewhere = same_places(&before_elsewhere, &elsewhere);
        *locks::write(&self.refused) = refused;
        let aliased = **locks::read(&self.home_names) != home_names
            || **locks::read(&self.home_servers) != home_servers;
        *locks::write(&self.home_names) = Arc::new(home_names);
        *locks::write(&self.home_servers) = Arc::new(home_servers);
        *locks::write(&self.alias_fingerprints) = aliases;
        *locks::write(&self.elsewhere) = Arc::new(elsewhere);
        // The assignment is this replica's only once every cluster it names is in place: a
        // cluster gained is connected above, a cluster lost is gone from `next`.
        let mut reassigned = false;
        if let (Some(sharding), Some(assigned)) = (&self.sharding, &assigned) {
            by_name.insert(HOME.to_string(), assigned.home);
            let updated = sharding.update(by_name, &assigned.agreement, read_at);
            sharding.renew(&renewed);
            sharding.leases_read(&assigned.unheld);
            reassigned = updated.changed;
            for name in updated.gained {
                let gained = match name.as_str() {
                    HOME => Some(self.home.clone()),
                    _ => next.get(&name).cloned(),
                };
                if let Some(cluster) = gained {
                    sharding.time_to_warm(cluster, read_at);
                }
            }
        }
        if !same || learnt || !same_elsewhere || reassigned {
            *locks::write(&self.remote) = Arc::new(next);
            self.changed.send_modify(|n| *n += 1);
        }
        // Another pod holding a shard changes no destination, but answers that name the
        // holders (`judgedBy`) are kept by this stamp too.
        let holders_moved = self
            .sharding
            .as_ref()
            .is_some_and(|s| s.take_holders_moved());
        if !same || learnt || aliased || !same_elsewhere || reassigned || holders_moved {
            self.resolved
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        Ok(())
    }

    /// Refresh now and then every `every`, for as long as the process runs.
    pub async fn follow(self: Arc<Self>, source: Source, build: Box<Build>, every: Duration) {
        loop {
            if let Err(e) = self.refresh(&source, &build).await {
                tracing::warn!(error = %e, "cannot read the cluster list; keeping the clusters as they are");
            }
            tokio::time::sleep(every).await;
        }
    }
}

/// Which destinations may run: every one whose name and server no other destination claims.
/// Argo CD refuses an ambiguous cluster name (argo-cd `util/db/cluster.go` `GetClusterServersByName`
/// callers fail on more than one server); here a name or server claimed twice refuses every
/// claimant, so a Secret added later (or sorting first) can never stand in for a cluster.
fn unambiguous(
    found: Found,
) -> (
    Vec<(String, Destination)>,
    std::collections::BTreeSet<String>,
    Vec<Refused>,
) {
    let mut refused = Vec::new();
    let mut ok = Vec::new();
    let mut home_names = Vec::new();
    for (origin, d) in found {
        match d {
            Ok(Entry::Home(name)) => home_names.push((origin, name)),
            Ok(Entry::Remote(d)) if d.name == HOME => refused.push(Refused {
                source: origin,
                reason: format!("cluster name {HOME:?} is the home cluster's"),
            }),
            Ok(Entry::Remote(d)) => ok.push((origin, *d)),
            Err(e) => refused.push(Refused {
                source: origin,
                reason: e.to_string(),
            }),
        }
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut servers: HashMap<String, usize> = HashMap::new();
    for (_, d) in &ok {
        *names.entry(d.name.clone()).or_default() += 1;
        *servers.entry(d.server.clone()).or_default() += 1;
    }
    // `in-cluster` is always the home cluster's; another name for it counts like a cluster's.
    for (_, name) in home_names.iter().filter(|(_, n)| n != HOME) {
        *names.entry(name.clone()).or_default() += 1;
    }
    let claimants = |n: &HashMap<String, usize>, k: &str| n.get(k).copied().unwrap_or(0);
    let name_claimed = |name: &str| {
        (claimants(&names, name) > 1).then(|| {
            format!(
                "cluster name {:?} is claimed by {} sources, so none of them is used",
                crate::health::printable(name),
                claimants(&names, name)
            )
        })
    };
    let mut aliases = std::collections::BTreeSet::new();
    for (origin, name) in home_names {
        match name_claimed(&name) {
            Some(reason) if name != HOME => refused.push(Refused {
                source: origin,
                reason,
            }),
            _ => {
                aliases.insert(name);
            }
        }
    }
    aliases.remove(HOME);
    let mut usable = Vec::new();
    for (origin, d) in ok {
        let reason = name_claimed(&d.name).or_else(|| {
            (claimants(&servers, &d.server) > 1).then(|| {
                format!(
                    "server {} is claimed by {} sources, so none of them is used (an \
                     Application naming it would be ambiguous)",
                    crate::health::printable(&d.server),
                    claimants(&servers, &d.server)
                )
            })
        });
        match reason {
            Some(reason) => refused.push(Refused {
                source: origin,
                reason,
            }),
            None => usable.push((origin, d)),
        }
    }
    (usable, aliases, refused)
}

/// Most bytes one response of a remote cluster's API server may carry (a list, or a watch
/// stream until it is reopened). Honest servers page lists (kube's watcher asks for 500
/// objects a page); a hostile or broken one that sends an endless body would otherwise be
/// buffered whole, since a list is read completely before it is parsed.
pub(crate) const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// A client whose every response body ends in an error after `max` bytes.
pub(crate) fn bounded_client(
    config: kube::Config,
    max: usize,
) -> Result<kube::Client, ClusterError> {
    use kube::client::{ClientBuilder, DynBody};
    let limit = tower::util::MapResponseLayer::new(move |resp: http::Response<Box<DynBody>>| {
        resp.map(|body| http_body_util::Limited::new(body, max))
    });
    Ok(ClientBuilder::try_from(config)
        .map_err(|e| ClusterError::Connect(e.to_string()))?
        .with_layer(&limit)
        .build())
}

/// A new or changed cluster, or `None` when its identity is home's (no evaluator, no watch: it
/// is served as home). An unreadable identity is read again at the next refresh
/// ([`Cluster::identify`]).
async fn connect(
    d: &Destination,
    build: &Build,
    home: Option<&String>,
) -> Result<Option<Cluster>, ClusterError> {
    let config =
        kube::Config::from_custom_kubeconfig(d.kubeconfig.clone(), &KubeConfigOptions::default())
            .await
            .map_err(|e| ClusterError::Connect(e.to_string()))?;
    let client = bounded_client(config, MAX_RESPONSE_BYTES)?;
    let known = match identity(&client).await {
        Ok(id) if Some(&id) == home => return Ok(None),
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(cluster = %d.name, error = %e,
                "cannot read this cluster's identity (get namespaces/kube-system); its WaveGates \
                 get no status writer until it can be told apart from home");
            None
        }
    };
    let evaluator = build(d, client).map_err(ClusterError::Build)?;
    Ok(Some(Cluster::remote(
        &d.name,
        &d.server,
        evaluator,
        d.fingerprint,
        known,
    )))
}

/// The [`identity`] of a destination this replica does not judge, read with its own
/// credentials; `None` when it cannot be read (then it takes part in no grouping).
async fn identify_destination(d: &Destination, warn: bool) -> Option<String> {
    let config =
        kube::Config::from_custom_kubeconfig(d.kubeconfig.clone(), &KubeConfigOptions::default())
            .await
            .ok()?;
    let client = bounded_client(config, MAX_RESPONSE_BYTES).ok()?;
    match identity(&client).await {
        Ok(id) => Some(id),
        Err(e) => {
            if warn {
                tracing::warn!(cluster = %d.name, error = %e,
                    "cannot read the identity of a cluster another replica judges; if it is \
                     also reached by a cluster Secret this replica judges, both may write its \
                     WaveGates");
            }
            None
        }
    }
}

/// How a remote cluster is judged: like home, except that CockroachDB checks send no probe and
/// hold no probe credentials or CA. Pod IPs are read from the remote API server but dialled from
/// the home network: a remote cluster's pods are usually unroutable, and with overlapping pod
/// CIDRs a home pod would answer (and receive the DB Console password). Such a check is Unknown
/// with the reason, never a probe.
pub fn remote_eval_config(home: EvalConfig) -> EvalConfig {
    EvalConfig {
        crdb_credentials: None,
        crdb_tls: crate::probe::TlsSettings::default(),
        probes_refused: Some(REMOTE_PROBES_REFUSED.to_string()),
        ..home
    }
}

pub const REMOTE_PROBES_REFUSED: &str = "CockroachDB probes are not supported in remote \
    clusters (their pod IPs are not reachable from the home cluster), so wavegate does not judge \
    it there";

/// One cluster a source names.
#[derive(Debug)]
enum Entry {
    Remote(Box<Destination>),
    /// The home cluster's own Secret, under this name.
    Home(String),
}

/// Every cluster a source names, each with where it was read and what it is.
type Found = Vec<(String, Result<Entry, SourceError>)>;

impl Source {
    /// The kubeconfig files in `dir`.
    pub fn kubeconfig_dir(dir: PathBuf) -> Source {
        Source::KubeconfigDir {
            dir,
            seen: Arc::default(),
        }
    }

    /// Every cluster the source names, and, for Argo CD's Secrets, each Secret as Argo CD's
    /// sharding sees it (every labelled Secret, refused ones too: Argo CD counts them).
    async fn read(&self) -> Result<(Found, Vec<(String, ShardedCluster)>), ClusterError> {
        match self {
            Source::ArgoCdSecrets {
                client,
                namespace,
                names,
                trust,
            } => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let secrets = if names.is_empty() {
                    let lp = ListParams::default()
                        .labels(&format!("{SECRET_TYPE_LABEL}={SECRET_TYPE_CLUSTER}"));
                    api.list(&lp)
                        .await
                        .map_err(|e| {
                            ClusterError::SourceUnreadable(format!(
                                "cannot list cluster Secrets in {namespace}: {e}"
                            ))
                        })?
                        .items
                        .into_iter()
                        .map(Ok)
                        .collect::<Vec<_>>()
                } else {
                    let mut found = Vec::new();
                    for name in names {
                        found.push(match api.get_opt(name).await {
                            Ok(Some(s)) => Ok(s),
                            Ok(None) => Err((name.clone(), "not found".to_string())),
                            // This one Secret, not the API server: refuse it, keep the others.
                            Err(kube::Error::Api(e)) if e.code == 403 => Err((
                                name.clone(),
                                format!(
                                    "forbidden (is it in the Role's resourceNames?): {}",
                                    e.message
                                ),
                            )),
                            Err(e) => {
                                return Err(ClusterError::SourceUnreadable(format!(
                                    "cannot read Secret {namespace}/{name}: {e}"
                                )));
                            }
                        });
                    }
                    found
                };
                let sharded = secrets
                    .iter()
                    .filter_map(|s| s.as_ref().ok())
                    .map(|s| {
                        let origin = format!(
                            "Secret {namespace}/{}",
                            s.metadata.name.as_deref().unwrap_or("")
                        );
                        (origin, ShardedCluster::from_secret(s))
                    })
                    .collect();
                let found = secrets
                    .into_iter()
                    .map(|s| match s {
                        Err((name, why)) => (
                            format!("Secret {namespace}/{name}"),
                            Err(SourceError::Unreadable(why)),
                        ),
                        Ok(s) => {
                            let origin = format!(
                                "Secret {namespace}/{}",
                                s.metadata.name.as_deref().unwrap_or("")
                            );
                            let entry = match from_argocd_secret(&s, *trust) {
                                Ok(FromSecret::Home(name)) => Ok(Entry::Home(name)),
                                Ok(FromSecret::Remote(d)) => Ok(Entry::Remote(d)),
                                Err(e) => Err(e),
                            };
                            (origin, entry)
                        }
                    })
                    .collect();
                Ok((found, sharded))
            }
            Source::KubeconfigDir { dir, seen } => {
                let (dir, seen) = (dir.clone(), seen.clone());
                // File system reads block: off the async workers.
                let found = tokio::task::spawn_blocking(move || read_kubeconfig_dir(&dir, &seen))
                    .await
                    .map_err(|e| ClusterError::SourceUnreadable(e.to_string()))??;
                Ok((found, Vec::new()))
            }
        }
    }
}

/// Every kubeconfig file of `dir`, parsed again only when its modification time or size
/// changed since `seen` recorded it.
fn read_kubeconfig_dir(
    dir: &std::path::Path,
    seen: &Mutex<HashMap<PathBuf, Parsed>>,
) -> Result<Found, ClusterError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        ClusterError::SourceUnreadable(format!("cannot read {}: {e}", dir.display()))
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        // A mounted Secret also holds `..data` and `..<timestamp>` entries.
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.'))
        })
        .collect();
    paths.sort();
    let mut seen = locks::lock(seen);
    seen.retain(|p, _| paths.contains(p));
    Ok(paths
        .into_iter()
        .map(|p| {
            // Follows symlinks, as a mounted Secret's files are.
            let meta = std::fs::metadata(&p).ok();
            let modified = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.as_ref().map_or(0, |m| m.len());
            let unchanged = seen
                .get(&p)
                .filter(|s| meta.is_some() && s.modified == modified && s.len == len);
            let outcome = match unchanged {
                Some(s) => s.outcome.clone(),
                None => {
                    let outcome = from_kubeconfig_file(&p);
                    // A read that failed is tried again next time, whatever the metadata says.
                    if !matches!(outcome, Err(SourceError::Unreadable(_))) {
                        seen.insert(
                            p.clone(),
                            Parsed {
                                modified,
                                len,
                                outcome: outcome.clone(),
                            },
                        );
                    }
                    outcome
                }
            };
            let entry = outcome.map(|d| Entry::Remote(Box::new(d)));
            (p.display().to_string(), entry)
        })
        .collect())
}

#[cfg(test)]
mod tests;
