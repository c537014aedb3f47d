//! `serve --shard-like-argocd`: this replica judges only the clusters Argo CD's
//! application-controller of the same number reconciles; `serve --shards N`: only those
//! wavegate's own ring gives it ([`super::ring`]), Argo CD's settings not read. The inputs are Argo CD's own
//! (controller/sharding, `GetClusterSharding`): the replica count (`ARGOCD_CONTROLLER_REPLICAS`),
//! this replica's number (`ARGOCD_CONTROLLER_SHARD`, else the StatefulSet pod's ordinal), the
//! algorithm (`controller.sharding.algorithm` in argocd-cmd-params-cm), argocd-cm's
//! `cluster.inClusterEnabled`, and every cluster Secret's `shard` and `skip-reconcile`.
//!
//! The computation is [`super::shard`]'s (or [`super::ring`]'s); what this replica makes of it
//! (and when it may write) is [`super::ownership`]'s, the same for both.

use super::ownership::{Owner, Ownership, Rules};
use super::ring::{self, Published};
use super::shard::{self, Algorithm, Assignment, ShardedCluster};
use super::{ClusterError, HOME_SERVER};
use crate::leader::Rivals;
use crate::locks;
use crate::metrics::Metrics;
use blake2::{Blake2b512, Digest};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// argocd-cmd-params-cm, where Argo CD's Helm chart and manifests set the controller's flags.
const CMD_PARAMS: &str = "argocd-cmd-params-cm";
const ALGORITHM_KEY: &str = "controller.sharding.algorithm";
const ARGOCD_CM: &str = "argocd-cm";
const IN_CLUSTER_KEY: &str = "cluster.inClusterEnabled";

/// Whose assignment the replicas follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Argo CD's (`--shard-like-argocd`, [`shard`]).
    LikeArgoCd,
    /// wavegate's own ring (`--shards`, [`ring`]): every cluster judged, none paused or pinned
    /// (those are Argo CD's controller's settings), home a cluster of the ring like any other.
    Own,
}

/// How this replica shards (`wavegate serve` flags).
#[derive(Debug, Clone)]
pub struct ShardSettings {
    /// The shard this replica runs as ([`shard::replica_shard`]).
    pub replica: i64,
    pub replicas: u32,
    pub mode: Mode,
    /// With [`Mode::LikeArgoCd`]: `--sharding-algorithm` (`ARGOCD_CONTROLLER_SHARDING_ALGORITHM`);
    /// `None`: read from argocd-cmd-params-cm at every read of the Secrets.
    pub algorithm: Option<Algorithm>,
    /// Where Argo CD's ConfigMaps and Applications are.
    pub argocd_namespace: String,
    pub rules: Rules,
    /// Where Argo CD's cluster Secrets are read (`--clusters-namespace`).
    pub clusters_namespace: String,
    /// Where the shards' Leases are, and the unsharded Lease's name (`--leader-elect-lease`),
    /// which the shards' names start with.
    pub leases: (String, String),
    /// This process's identity in its shard's Lease (set with the election): with
    /// [`Mode::Own`], it publishes its clusters' weights there while it holds it.
    pub identity: String,
}

impl ShardSettings {
    /// Every input two replicas must share to compute one owner per cluster and to hand a
    /// cluster over safely, in words (logged, and named when replicas disagree). This
    /// replica's own number is not one: it differs by design.
    pub fn inputs(&self) -> String {
        if self.mode == Mode::Own {
            // Every parameter of the ring: replicas on another ring would compute other
            // owners. (Argo CD's mode keeps its words as they were, so that a rolling upgrade
            // does not make its replicas stand back.)
            return format!(
                "mode=own replicas={} ring=v{}:points:{},balance:{},weights:{}:every-{}s \
                 clusters-namespace={} lease={}/{} stale-after={}ms handover={}ms",
                self.replicas,
                ring::VERSION,
                ring::POINTS,
                ring::BALANCE,
                ring::WEIGHTS_ANNOTATION,
                ring::REPUBLISH_AFTER.as_secs(),
                self.clusters_namespace,
                self.leases.0,
                self.leases.1,
                self.rules.stale_after.as_millis(),
                self.rules.handover.as_millis(),
            );
        }
        let algorithm = match self.algorithm {
            Some(a) => a.name().to_string(),
            None => format!("{CMD_PARAMS}:{ALGORITHM_KEY}"),
        };
        format!(
            "replicas={} algorithm={algorithm} argocd-namespace={} clusters-namespace={} \
             lease={}/{} stale-after={}ms handover={}ms",
            self.replicas,
            self.argocd_namespace,
            self.clusters_namespace,
            self.leases.0,
            self.leases.1,
            self.rules.stale_after.as_millis(),
            self.rules.handover.as_millis(),
        )
    }

    /// Ends every shard Lease holder's identity: a digest of [`Self::inputs`], so that a
    /// replica sees, in the Leases alone, any live replica that shards by other inputs.
    pub fn identity_suffix(&self) -> String {
        let digest = Blake2b512::digest(self.inputs().as_bytes());
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!(".s{hex}")
    }

    /// The Leases that keep this replica from writing ([`crate::leader::Rivals`]).
    pub fn rivals(&self) -> Rivals {
        Rivals::of_sharded(&self.leases.1, &self.identity_suffix())
    }
}

/// This replica's sharding: its settings and its view of the assignment.
pub struct Sharding {
    pub settings: ShardSettings,
    ownership: Arc<RwLock<Ownership>>,
    /// The live holder of each shard's Lease, by shard, as the last read of the Secrets listed
    /// them: where a read about another replica's cluster is forwarded (`api::forward`).
    holders: RwLock<BTreeMap<i64, String>>,
    /// Set when a read finds another pod (or none) holding a shard: answers kept with the
    /// holders' names in them (`judgedBy` in `/api/v1/applications`) are then stale, though no
    /// watched object changed. Taken by the refresh ([`Sharding::take_holders_moved`]).
    holders_moved: std::sync::atomic::AtomicBool,
    /// The clusters this replica judged at the last update (`None` before the first): what a
    /// read gains and loses is counted against it.
    mine: RwLock<Option<BTreeSet<String>>>,
    /// The task timing each gained cluster's warm-up, by cluster: one at a time, so that
    /// assignments flapping (a rival Lease blinking live) do not pile up pollers.
    warming: std::sync::Mutex<HashMap<String, tokio::task::AbortHandle>>,
    metrics: Arc<Metrics>,
}

/// What an [`Sharding::update`] changed.
pub(super) struct Updated {
    /// Whether what this replica judges, or any cluster's shard, changed.
    pub changed: bool,
    /// The clusters that became this replica's (none at the first update: that is a start,
    /// not a move).
    pub gained: Vec<String>,
}

/// One computation: each Secret's assignment, by where it was read, and home's.
pub struct Assigned {
    /// `Err` while a live replica shards by other inputs, or an unsharded leader holds its
    /// Lease: then this replica judges nothing ([`Rivals::check`]).
    pub agreement: Result<(), String>,
    /// The shards whose Lease had no live holder when it was read.
    pub unheld: Vec<i64>,
    by_origin: HashMap<String, Assignment>,
    /// The in-cluster destination's. When argocd-cm disables it and no Secret names it, Argo CD
    /// deploys nothing there by that name; home's WaveGates are then judged by replica 0 so
    /// that they are still judged once.
    pub home: Assignment,
}

impl Assigned {
    /// The assignment of the Secret read at `origin`.
    pub fn of(&self, origin: &str) -> Option<Assignment> {
        self.by_origin.get(origin).copied()
    }
}

impl Sharding {
    pub fn new(settings: ShardSettings, metrics: Arc<Metrics>) -> Sharding {
        let ownership = Ownership::new(settings.replica, settings.replicas, settings.rules);
        metrics.shard.set(settings.replica);
        metrics.set_shard_assigned_at(Instant::now());
        tracing::info!(inputs = %settings.inputs(), digest = %settings.identity_suffix(),
            "sharding inputs; every live replica must share them to write");
        Sharding {
            settings,
            ownership: Arc::new(RwLock::new(ownership)),
            holders: RwLock::default(),
            holders_moved: std::sync::atomic::AtomicBool::new(false),
            mine: RwLock::default(),
            warming: std::sync::Mutex::default(),
            metrics,
        }
    }

    /// Compute the assignment from `secrets` (every cluster Secret just read, by origin), the
    /// shard Leases and, like Argo CD, Argo CD's settings, read now with `client`. Fails rather
    /// than guess when a setting cannot be read: the last assignment then goes stale and this
    /// replica stops writing. `measured`: with [`Mode::Own`], the weights of the clusters this
    /// replica judges ([`ring::measured_weight`]), published on its Lease while it holds it.
    pub(super) async fn assign(
        &self,
        client: &kube::Client,
        secrets: &[(String, ShardedCluster)],
        measured: &BTreeMap<String, u32>,
    ) -> Result<Assigned, ClusterError> {
        let by_server = match self.settings.mode {
            Mode::LikeArgoCd => Some(self.like_argocd(client, secrets).await?),
            Mode::Own => None,
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.settings.leases.0);
        let held = leases.list(&ListParams::default()).await.map_err(|e| {
            ClusterError::SourceUnreadable(format!(
                "cannot list the shard Leases in {}: {e}",
                self.settings.leases.0
            ))
        })?;
        // Mixed replicas (scaling a StatefulSet rolls pods one by one, so old ones compute with
        // the old count and new ones with the new; an unsharded Deployment left beside the
        // StatefulSet) would each write clusters the others write too. Here every replica
        // stops writing until the live ones agree: their verdicts expire (`validUntil`)
        // rather than two replicas write one cluster.
        let now = Timestamp::now();
        let rivals = self.settings.rivals();
        let agreement = rivals.check(&held.items, now);
        let unheld = rivals.unheld_shards(&held.items, self.settings.replicas, now);
        let holders = rivals.shard_holders(&held.items, now);
        let pods = |h: &BTreeMap<i64, String>| -> BTreeMap<i64, String> {
            h.iter()
                .map(|(shard, id)| (*shard, holder_pod(id).unwrap_or(id).to_string()))
                .collect()
        };
        let before = std::mem::replace(&mut *locks::write(&self.holders), holders.clone());
        if pods(&before) != pods(&holders) {
            self.holders_moved
                .store(true, std::sync::atomic::Ordering::Release);
        }
        let by_server = match by_server {
            Some(b) => b,
            None => self.own(&leases, &held.items, secrets, measured, now).await,
        };
        Ok(Assigned {
            agreement,
            unheld,
            by_origin: secrets
                .iter()
                .filter_map(|(origin, c)| by_server.get(&c.server).map(|a| (origin.clone(), *a)))
                .collect(),
            home: by_server.get(HOME_SERVER).copied().unwrap_or(Assignment {
                shard: 0,
                paused: false,
            }),
        })
    }

    /// Argo CD's assignment, by server, from its settings read now.
    async fn like_argocd(
        &self,
        client: &kube::Client,
        secrets: &[(String, ShardedCluster)],
    ) -> Result<BTreeMap<String, Assignment>, ClusterError> {
        let ns = &self.settings.argocd_namespace;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let read = |name: &'static str| {
            let maps = maps.clone();
            async move {
                maps.get_opt(name).await.map_err(|e| {
                    ClusterError::SourceUnreadable(format!(
                        "cannot read ConfigMap {ns}/{name} to shard like Argo CD: {e}"
                    ))
                })
            }
        };
        let setting = |cm: &Option<ConfigMap>, key: &str| {
            cm.as_ref()
                .and_then(|c| c.data.as_ref())
                .and_then(|d| d.get(key))
                .map(|v| v.trim().to_string())
        };
        let algorithm = match self.settings.algorithm {
            Some(a) => a,
            None => {
                let name = setting(&read(CMD_PARAMS).await?, ALGORITHM_KEY).unwrap_or_default();
                if !name.is_empty() && !Algorithm::is_known(&name) {
                    tracing::warn!(algorithm = %name, "unknown sharding algorithm; Argo CD runs legacy, and so does wavegate");
                }
                Algorithm::from_name(&name)
            }
        };
        // argo-cd util/settings `IsInClusterEnabled`: anything but "false" enables it.
        let in_cluster =
            setting(&read(ARGOCD_CM).await?, IN_CLUSTER_KEY).as_deref() != Some("false");
        let app_servers = match algorithm {
            Algorithm::ConsistentHashing => application_servers(client, ns).await?,
            _ => Vec::new(),
        };
        let list = shard::argocd_cluster_list(secrets.iter().map(|(_, c)| c.clone()), in_cluster);
        Ok(shard::distribute(
            algorithm,
            self.settings.replicas,
            &list,
            app_servers.iter().map(String::as_str),
        ))
    }

    /// wavegate's own assignment, by server: the ring over every Secret's cluster and home,
    /// weighted as the shard Leases of `leases` publish it; and, while this replica holds its
    /// shard's Lease, its own clusters' weights published there (see [`ring`]).
    ///
    /// Replicas read the Leases at different times, so for a moment one may weigh a cluster
    /// by the weights before a publication and another by those after, and both take it for
    /// theirs. That is the window a Secret's edited `shard` opens under Argo CD's rules, and
    /// [`super::ownership`]'s rules close it the same way: the Leases are listed after the
    /// read of the Secrets started (`read_at`, from which the old owner's assignment goes
    /// stale), and the new owner waits `handover`, longer than `stale_after`, from the end
    /// of its own read, which saw the publication; any later read of the old owner sees it
    /// too (a list is a quorum read). Publications are at least [`ring::REPUBLISH_AFTER`]
    /// apart, far longer than a handover, so a cluster cannot move back within one.
    async fn own(
        &self,
        api: &Api<Lease>,
        leases: &[Lease],
        secrets: &[(String, ShardedCluster)],
        measured: &BTreeMap<String, u32>,
        now: Timestamp,
    ) -> BTreeMap<String, Assignment> {
        let rivals = self.settings.rivals();
        let mut clusters: BTreeSet<String> = secrets
            .iter()
            .map(|(_, c)| super::normalize_server(&c.server))
            .collect();
        clusters.insert(HOME_SERVER.to_string());
        // Only the shards of this count: a Lease left by a larger count (scaled down) is no
        // shard's any more, and its old weights must not count.
        let shard_lease = |shard: i64| {
            let name = rivals.shard_lease(shard);
            leases
                .iter()
                .find(|l| l.metadata.name.as_deref() == Some(name.as_str()))
        };
        let published_by = |lease: &Lease| {
            let value = lease
                .metadata
                .annotations
                .as_ref()?
                .get(ring::WEIGHTS_ANNOTATION)?;
            Published::parse(value)
        };
        let mut mine = None;
        let mut others = Vec::new();
        for shard in 0..i64::from(self.settings.replicas) {
            let p = shard_lease(shard).and_then(published_by);
            if shard == self.settings.replica {
                mine = p;
            } else {
                others.extend(p);
            }
        }
        let weights = ring::published_weights(others.iter().chain(mine.iter()));
        let assigned = ring::assign(
            self.settings.replicas,
            &ring::weights_for(&clusters, &weights),
        );
        if let Some(lease) = shard_lease(self.settings.replica) {
            let holds =
                crate::leader::live_holder(lease, now) == Some(self.settings.identity.as_str());
            let others = ring::published_weights(others.iter());
            match ring::to_publish(measured, mine.as_ref(), &others, &clusters, now) {
                Some(p) if holds => self.publish(api, lease, &p).await,
                _ => {}
            }
        }
        let on = |server: &str| Assignment {
            shard: i64::from(
                assigned
                    .get(&super::normalize_server(server))
                    .copied()
                    .unwrap_or(0),
            ),
            paused: false,
        };
        let mut by_server: BTreeMap<String, Assignment> = secrets
            .iter()
            .map(|(_, c)| (c.server.clone(), on(&c.server)))
            .collect();
        by_server.insert(HOME_SERVER.to_string(), on(HOME_SERVER));
        by_server
    }

    /// Write `published` on this replica's shard Lease `lease`, on the condition that it is
    /// as listed (so still this replica's: a Lease taken over since has another
    /// resourceVersion). A failure is logged; the next read tries again.
    async fn publish(&self, api: &Api<Lease>, lease: &Lease, published: &Published) {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": lease.metadata.resource_version,
                "annotations": { ring::WEIGHTS_ANNOTATION: published.render() },
            }
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(lease = %name, weights = ?published.weights, "published this shard's cluster weights")
            }
            // A warning: a publication that keeps failing (RBAC without `patch` on the Lease, an
            // annotation past the API server's 256 KiB) leaves every weight at 1, unseen.
            Err(e) => {
                tracing::warn!(lease = %name, error = %e, "cannot publish the cluster weights; trying at the next read")
            }
        }
    }

    /// Whether a cluster with `assignment` is this replica's (none is while a live replica
    /// writes by another rule, see [`Assigned::agreement`]).
    pub(super) fn is_mine(&self, assigned: &Assigned, assignment: Option<Assignment>) -> bool {
        if assigned.agreement.is_err() {
            return false;
        }
        assignment.is_some_and(|a| {
            Owner::of(a, self.settings.replica, self.settings.replicas) == Owner::ThisReplica
        })
    }

    /// Take the assignment by cluster name; whether what this replica judges changed. While
    /// `agreement` fails, every cluster is taken as another replica's: nothing is written here.
    /// `read_at`: when the read of the Secrets this assignment comes from started.
    pub(super) fn update(
        &self,
        assigned: BTreeMap<String, Assignment>,
        agreement: &Result<(), String>,
        read_at: Instant,
    ) -> Updated {
        let held_back = agreement
            .as_ref()
            .err()
            .map(|why| format!("the wavegate replicas do not shard alike ({why})"));
        match &held_back {
            Some(why) if self.metrics.shard_disagreement.get() == 0 => {
                tracing::warn!(reason = %why, inputs = %self.settings.inputs(),
                    "judging no cluster until every live replica shards by this replica's inputs");
            }
            _ => {}
        }
        self.metrics
            .shard_disagreement
            .set(i64::from(held_back.is_some()));
        let (replica, replicas) = (self.settings.replica, self.settings.replicas);
        let mine: BTreeSet<String> = assigned
            .iter()
            .filter(|(_, a)| {
                held_back.is_none() && Owner::of(**a, replica, replicas) == Owner::ThisReplica
            })
            .map(|(name, _)| name.clone())
            .collect();
        let before = locks::write(&self.mine).replace(mine.clone());
        let gained: Vec<String> = match &before {
            Some(before) => {
                let lost = before.difference(&mine).count();
                self.metrics.shard_clusters_lost.inc_by(lost as u64);
                mine.difference(before).cloned().collect()
            }
            None => Vec::new(),
        };
        self.metrics
            .shard_clusters_gained
            .inc_by(gained.len() as u64);
        let mut ownership = locks::write(&self.ownership);
        let changes = ownership.update(assigned, held_back, read_at, Instant::now());
        self.metrics
            .set_shard_assigned_at(read_at.min(Instant::now()));
        for cluster in &changes.moved {
            let owner = ownership.owner(cluster);
            tracing::info!(%cluster, ?owner, "cluster moved to another shard");
        }
        self.metrics.shard_moves.inc_by(changes.moved.len() as u64);
        let (owned, unowned) = ownership.counts();
        self.metrics.shard_clusters_owned.set(owned as i64);
        self.metrics.shard_clusters_unowned.set(unowned as i64);
        Updated {
            // Standing back (or no longer) changes who judges every cluster, also on a replica
            // that judges none: answers kept with `judgedBy` must not outlive it.
            changed: changes.mine_changed || !changes.moved.is_empty() || changes.held_back_changed,
            gained,
        }
    }

    /// Clusters of this replica whose API server changed under the same name wait a handover
    /// again ([`Ownership::renew`]).
    pub(super) fn renew(&self, clusters: &BTreeSet<String>) {
        let now = Instant::now();
        let mut ownership = locks::write(&self.ownership);
        for cluster in clusters {
            tracing::info!(%cluster, "cluster's API server changed: its writes wait a handover");
            ownership.renew(cluster, now);
        }
    }

    /// Observe in `wavegate_shard_warm_seconds` how long after `since` (the read that made it
    /// this replica's) `cluster`'s required watches are synced; nothing if it stops first or
    /// takes over ten minutes.
    pub(super) fn time_to_warm(&self, cluster: Arc<super::Cluster>, since: Instant) {
        let metrics = self.metrics.clone();
        let name = cluster.name.clone();
        let timing = tokio::spawn(async move {
            let give_up = since + std::time::Duration::from_secs(600);
            while Instant::now() < give_up {
                if cluster.cache.readiness().is_ok() {
                    metrics
                        .shard_warm_seconds
                        .observe(since.elapsed().as_secs_f64());
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                    () = cluster.stop.cancelled() => return,
                }
            }
        });
        let mut warming = locks::lock(&self.warming);
        warming.retain(|_, task| !task.is_finished());
        if let Some(before) = warming.insert(name, timing.abort_handle()) {
            before.abort();
        }
    }

    /// The shards whose Lease had no live holder at the last read: nobody writes their
    /// clusters' gates, and their verdicts expire.
    pub(super) fn leases_read(&self, unheld: &[i64]) {
        let before = self.metrics.shard_leases_unheld.set(unheld.len() as i64);
        if !unheld.is_empty() && before != unheld.len() as i64 {
            tracing::warn!(shards = ?unheld, "no live replica holds these shards' Leases: their clusters' gates are not written");
        }
    }

    /// Who judges `cluster`, per the last assignment.
    pub fn owner(&self, cluster: &str) -> Option<Owner> {
        locks::read(&self.ownership).owner(cluster)
    }

    /// Whether a read since the last call found a shard held by another pod, or by none.
    pub(super) fn take_holders_moved(&self) -> bool {
        self.holders_moved
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// The identity holding shard `shard`'s Lease when the Leases were last listed, if it was
    /// live then. Whoever may write Leases in the namespace can write it: it is a claim to
    /// validate, never an address.
    pub fn holder(&self, shard: i64) -> Option<String> {
        locks::read(&self.holders).get(&shard).cloned()
    }

    /// Why this replica does not judge `cluster`, if it does not.
    pub fn elsewhere(&self, cluster: &str) -> Option<String> {
        self.owner(cluster).and_then(|o| o.elsewhere(cluster))
    }

    /// Whether `cluster`'s writers may run now (this replica's, its handover over).
    pub fn writes(&self, cluster: &str) -> bool {
        locks::read(&self.ownership).writes(cluster, Instant::now())
    }

    /// Whether what judging `cluster` costs here can be measured: its handover over and its
    /// gate controller judging for another two resyncs (`stale_after`), so that the watches
    /// its checks start on their first judgement are running. Measured earlier, a cluster
    /// would weigh only its WaveGates' watch, and that weight would stand for the
    /// [`ring::REPUBLISH_AFTER`] until the next publication.
    pub fn settled(&self, cluster: &str) -> bool {
        let rules = self.settings.rules;
        locks::read(&self.ownership).mine_for(
            cluster,
            rules.handover + rules.stale_after,
            Instant::now(),
        )
    }

    /// When the next pending handover ends.
    pub fn next_handover(&self) -> Option<Instant> {
        locks::read(&self.ownership).next_handover(Instant::now())
    }

    /// The condition every write for `cluster` is fenced on ([`crate::leader::Fence::guarded`]).
    pub fn guard(&self, cluster: &str) -> crate::leader::Guard {
        let (ownership, cluster) = (self.ownership.clone(), cluster.to_string());
        Arc::new(move || locks::read(&ownership).admit(&cluster, Instant::now()))
    }
}

/// The pod named by a shard Lease holder's identity (`<pod>_<process>.s<digest>`, see
/// [`ShardSettings::identity_suffix`]), if it is a DNS-1123 label (what a StatefulSet pod's
/// host name is, and all a peer address may be built from); else why it is not used.
pub fn holder_pod(identity: &str) -> Result<&str, String> {
    let pod = identity.split_once('_').map_or(identity, |(pod, _)| pod);
    if crate::resource::is_dns_label(pod) {
        Ok(pod)
    } else {
        let shown: String = crate::health::printable(identity)
            .chars()
            .take(80)
            .collect();
        Err(format!(
            "its holder {shown:?} does not name a pod (a DNS label)"
        ))
    }
}

/// The destination server of every Application in `namespace`, which consistent hashing
/// weighs shards by (argo-cd `getAppDistribution` counts `spec.destination.server`).
async fn application_servers(
    client: &kube::Client,
    namespace: &str,
) -> Result<Vec<String>, ClusterError> {
    let ar = kube::api::ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Application".into(),
        plural: "applications".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let apps = api.list(&ListParams::default()).await.map_err(|e| {
        ClusterError::SourceUnreadable(format!(
            "cannot list Applications in {namespace} for consistent-hashing sharding: {e}"
        ))
    })?;
    Ok(apps
        .items
        .iter()
        .map(|a| {
            a.data
                .pointer("/spec/destination/server")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusters::Rules;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn lease(name: &str, holder: &str, renewed: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(at(renewed))),
                lease_duration_seconds: Some(10),
                ..Default::default()
            }),
        }
    }

    fn settings(replicas: u32, algorithm: Option<Algorithm>) -> ShardSettings {
        ShardSettings {
            replica: 1,
            replicas,
            mode: Mode::LikeArgoCd,
            algorithm,
            argocd_namespace: "argocd".into(),
            rules: Rules::for_resync(std::time::Duration::from_secs(30)),
            clusters_namespace: "argocd".into(),
            leases: ("wavegate".into(), "wavegate".into()),
            identity: String::new(),
        }
    }

    /// A holder identity as `serve` makes it for a replica with `settings`.
    fn holder(pod: &str, settings: &ShardSettings) -> String {
        format!("{pod}_7-a{}", settings.identity_suffix())
    }

    /// Scaling from 2 to 3 replicas: the old wavegate-1 still holds shard 1 by 2 while the new
    /// wavegate-2 holds shard 2 by 3. A cluster can be each one's; neither writes until the old
    /// one is gone (its Lease released or expired).
    #[test]
    fn replicas_that_count_differently_write_nothing_until_the_old_ones_are_gone() {
        let (by2, by3) = (settings(2, None), settings(3, None));
        let old = lease("wavegate-shard-1", &holder("wavegate-1", &by2), 0);
        let new = lease("wavegate-shard-2", &holder("wavegate-2", &by3), 0);
        let both = [old.clone(), new.clone()];
        let why = by3.rivals().check(&both, at(5)).unwrap_err();
        assert!(why.contains("wavegate-1_7-a"), "{why}");
        assert!(by2.rivals().check(&both, at(5)).is_err());
        // The old Lease expired (its pod killed) or another Lease of the namespace: agreed.
        assert_eq!(by3.rivals().check(&both, at(11)), Ok(()));
        let other = lease("wavegate-webhook", "someone", 0);
        assert_eq!(by3.rivals().check(&[other, new], at(5)), Ok(()));
    }

    /// Same count, other algorithm (one replica given --sharding-algorithm, the other reading
    /// argocd-cmd-params-cm; or a rollout changing it): legacy and round-robin put one cluster
    /// on two shards, so these two stand back as well.
    #[test]
    fn replicas_with_another_algorithm_or_handover_stand_back() {
        let legacy = settings(3, Some(Algorithm::Legacy));
        let from_cm = settings(3, None);
        let mut slower = settings(3, Some(Algorithm::Legacy));
        slower.rules = Rules::for_resync(std::time::Duration::from_secs(5));
        for other in [&from_cm, &slower, &settings(3, Some(Algorithm::RoundRobin))] {
            let held = lease("wavegate-shard-0", &holder("wavegate-0", other), 0);
            let why = legacy.rivals().check(&[held], at(5)).unwrap_err();
            assert!(why.contains("shards by other inputs"), "{why}");
        }
        // Replicas differ in their own number only: alike.
        let mut replica_2 = settings(3, Some(Algorithm::Legacy));
        replica_2.replica = 2;
        assert_eq!(replica_2.identity_suffix(), legacy.identity_suffix());
        let held = lease("wavegate-shard-2", &holder("wavegate-2", &replica_2), 0);
        assert_eq!(legacy.rivals().check(&[held], at(5)), Ok(()));
    }

    /// A Deployment's unsharded leader left beside the StatefulSet: the shards stand back
    /// while its Lease is live, and it stands back while any shard's is (its fence reads the
    /// same list), so the two never both write.
    #[test]
    fn sharded_replicas_and_an_unsharded_leader_never_write_together() {
        let sharded = settings(3, None);
        let plain = lease("wavegate", "wavegate-7d9f8-abcde", 0);
        let shard = lease("wavegate-shard-1", &holder("wavegate-1", &sharded), 0);
        let why = sharded
            .rivals()
            .check(std::slice::from_ref(&plain), at(5))
            .unwrap_err();
        assert!(why.contains("unsharded Lease wavegate"), "{why}");
        let unsharded = Rivals::of_unsharded("wavegate");
        let both = [plain.clone(), shard.clone()];
        let why = unsharded.check(&both, at(5)).unwrap_err();
        assert!(why.contains("shard Lease wavegate-shard-1"), "{why}");
        // Released or expired: the other mode writes again.
        assert_eq!(sharded.rivals().check(&[plain], at(10)), Ok(()));
        assert_eq!(unsharded.check(&[shard], at(10)), Ok(()));
        // Only `<lease>-shard-<N>` is a shard Lease.
        let unrelated = lease("wavegate-shard-x", "someone", 0);
        assert_eq!(unsharded.check(&[unrelated], at(5)), Ok(()));
    }

    #[test]
    fn a_shard_whose_lease_is_missing_released_or_expired_is_unheld() {
        let s = settings(4, None);
        let mut released = lease("wavegate-shard-2", "x", 0);
        released.spec.as_mut().unwrap().holder_identity = Some(String::new());
        let leases = [
            lease("wavegate-shard-0", "a", 0),
            lease("wavegate-shard-1", "b", -20),
            released,
        ];
        assert_eq!(s.rivals().unheld_shards(&leases, 4, at(5)), vec![1, 2, 3]);
    }

    /// A cluster that moves away and back is one lost and one gained; the clusters a replica
    /// starts with are neither (a restart is no move), and nor is a cluster that stays.
    #[test]
    fn a_cluster_moving_away_and_back_is_counted_lost_then_gained() {
        let settings = ShardSettings {
            replica: 1,
            replicas: 2,
            mode: Mode::LikeArgoCd,
            algorithm: None,
            argocd_namespace: "argocd".into(),
            rules: Rules::for_resync(std::time::Duration::from_secs(1)),
            clusters_namespace: "argocd".into(),
            leases: ("wavegate".into(), "wavegate".into()),
            identity: String::new(),
        };
        let metrics = Arc::new(Metrics::default());
        let sharding = Sharding::new(settings, metrics.clone());
        let on = |shard| Assignment {
            shard,
            paused: false,
        };
        let assigned = |a: i64| {
            BTreeMap::from([
                ("a".to_string(), on(a)),
                ("stays".to_string(), on(1)),
                (crate::clusters::HOME.to_string(), on(0)),
            ])
        };
        let counts = || {
            (
                metrics.shard_clusters_gained.get(),
                metrics.shard_clusters_lost.get(),
            )
        };
        let now = Instant::now();
        let first = sharding.update(assigned(1), &Ok(()), now);
        assert!(first.gained.is_empty(), "{:?}", first.gained);
        assert_eq!(counts(), (0, 0));
        let away = sharding.update(assigned(0), &Ok(()), now);
        assert!(away.gained.is_empty());
        assert_eq!(counts(), (0, 1));
        let back = sharding.update(assigned(1), &Ok(()), now);
        assert_eq!(back.gained, ["a"]);
        assert_eq!(counts(), (1, 1));
        // Replicas that disagree on their count judge nothing: both are lost until they agree.
        sharding.update(assigned(1), &Err("r3".into()), now);
        assert_eq!(counts(), (1, 3));
    }

    /// `--shards`: replicas list the Leases at different moments, so around a publication of
    /// new weights one may place a cluster by the old weights and another by the new, each
    /// taking it for its own. Simulated over every 50 ms of 20 s, replicas reading every
    /// second at their own phase, each read listing the Leases some time after it starts: no
    /// cluster is ever admitted by two replicas less than a write's flight apart
    /// ([`crate::leader::REQUEST_TIMEOUT`]), which is what Ownership's handover buys.
    mod ring_views {
        use super::*;
        use crate::clusters::ownership::{Ownership, Rules};
        use crate::clusters::ring;
        use proptest::prelude::*;
        use std::time::Duration;

        const RESYNC: Duration = Duration::from_secs(1);

        fn view(replicas: u32, heavy: bool) -> BTreeMap<String, Assignment> {
            let weights: BTreeMap<String, u32> = (0..20)
                .map(|i| (format!("c{i}"), if heavy && i < 2 { 16 } else { 1 }))
                .collect();
            ring::assign(replicas, &weights)
                .into_iter()
                .map(|(k, s)| {
                    (
                        k,
                        Assignment {
                            shard: i64::from(s),
                            paused: false,
                        },
                    )
                })
                .collect()
        }

        proptest! {
            #![proptest_config(crate::testing::proptest_config::config(64))]

            #[test]
            fn replicas_reading_the_leases_at_different_times_never_write_one_cluster_together(
                phases in proptest::collection::vec(0u64..1000, 3),
                delays in proptest::collection::vec(0u64..900, 3),
                published_ms in 5000u64..9000,
            ) {
                let (old, new) = (view(3, false), view(3, true));
                let moved: Vec<&String> = old.keys().filter(|k| old[*k] != new[*k]).collect();
                prop_assert!(!moved.is_empty(), "the weights move some cluster");
                let t0 = Instant::now();
                let ms = |m: u64| t0 + Duration::from_millis(m);
                let published = ms(published_ms);
                let mut replicas: Vec<Ownership> = (0..3)
                    .map(|r| Ownership::new(r, 3, Rules::for_resync(RESYNC)))
                    .collect();
                // (when the read ends, replica, when it started, what it saw)
                let mut reads = Vec::new();
                for r in 0..3 {
                    let mut start = phases[r];
                    while start < 20_000 {
                        // The Leases are listed at the end of the read (after the Secrets).
                        let listed = ms(start + delays[r]);
                        let seen = if listed >= published { &new } else { &old };
                        reads.push((start + delays[r], r, start, seen.clone()));
                        start += RESYNC.as_millis() as u64;
                    }
                }
                reads.sort_by_key(|(end, r, _, _)| (*end, *r));
                let mut next = 0;
                let mut admitted: BTreeMap<String, Vec<(u64, usize)>> = BTreeMap::new();
                for t in (0..20_000).step_by(50) {
                    while next < reads.len() && reads[next].0 <= t {
                        let (end, r, start, seen) = reads[next].clone();
                        replicas[r].update(seen, None, ms(start), ms(end));
                        next += 1;
                    }
                    for (r, o) in replicas.iter().enumerate() {
                        for c in old.keys() {
                            if o.admit(c, ms(t)).is_ok() {
                                admitted.entry(c.clone()).or_default().push((t, r));
                            }
                        }
                    }
                }
                let flight = crate::leader::REQUEST_TIMEOUT.as_millis() as u64;
                for (c, at) in &admitted {
                    for (i, (t1, r1)) in at.iter().enumerate() {
                        for (t2, r2) in &at[i + 1..] {
                            prop_assert!(
                                r1 == r2 || t2 - t1 >= flight,
                                "{} admitted by {} at {}ms and by {} at {}ms", c, r1, t1, r2, t2
                            );
                        }
                    }
                }
                // And the moved clusters are written by their new owner in the end.
                for c in moved {
                    let last = admitted.get(c).and_then(|a| a.last()).copied();
                    prop_assert_eq!(last.map(|(_, r)| r as i64), Some(new[c].shard));
                }
            }
        }
    }

    /// Where a read is forwarded comes from live shard Leases only: an expired holder (a
    /// killed pod) is nobody to ask, and a Lease of another name is no shard's.
    #[test]
    fn only_a_live_shard_lease_names_a_holder() {
        // The Leases' names as a replica started with its settings names them: parsed with
        // any other prefix, no holder is ever found and no read is forwarded.
        let s = settings(3, None);
        let leases = [
            lease(&s.rivals().shard_lease(1), "wavegate-1_7-a.r3", 0),
            lease(&s.rivals().shard_lease(2), "wavegate-2_9-b.r3", -20),
            lease("wavegate-shard-x", "wavegate-x_1-c.r3", 0),
            lease("wavegate", "wavegate-0_1-d", 0),
        ];
        let got = s.rivals().shard_holders(&leases, at(5));
        assert_eq!(got, BTreeMap::from([(1, "wavegate-1_7-a.r3".to_string())]));
    }
}
