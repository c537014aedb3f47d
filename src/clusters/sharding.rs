//! `serve --shard-like-argocd`: this replica judges only the clusters Argo CD's
//! application-controller of the same number reconciles. The inputs are Argo CD's own
//! (controller/sharding, `GetClusterSharding`): the replica count (`ARGOCD_CONTROLLER_REPLICAS`),
//! this replica's number (`ARGOCD_CONTROLLER_SHARD`, else the StatefulSet pod's ordinal), the
//! algorithm (`controller.sharding.algorithm` in argocd-cmd-params-cm), argocd-cm's
//! `cluster.inClusterEnabled`, and every cluster Secret's `shard` and `skip-reconcile`.
//!
//! The computation is [`super::shard`]'s; what this replica makes of it (and when it may
//! write) is [`super::ownership`]'s.

use super::ownership::{Owner, Ownership, Rules};
use super::shard::{self, Algorithm, Assignment, ShardedCluster};
use super::{ClusterError, HOME_SERVER};
use crate::locks;
use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DynamicObject, ListParams};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// argocd-cmd-params-cm, where Argo CD's Helm chart and manifests set the controller's flags.
const CMD_PARAMS: &str = "argocd-cmd-params-cm";
const ALGORITHM_KEY: &str = "controller.sharding.algorithm";
const ARGOCD_CM: &str = "argocd-cm";
const IN_CLUSTER_KEY: &str = "cluster.inClusterEnabled";

/// How this replica shards (`wavegate serve` flags).
#[derive(Debug, Clone)]
pub struct ShardSettings {
    /// The shard this replica runs as ([`shard::replica_shard`]).
    pub replica: i64,
    pub replicas: u32,
    /// `--sharding-algorithm` (`ARGOCD_CONTROLLER_SHARDING_ALGORITHM`); `None`: read from
    /// argocd-cmd-params-cm at every read of the Secrets.
    pub algorithm: Option<Algorithm>,
    /// Where Argo CD's ConfigMaps and Applications are.
    pub argocd_namespace: String,
    pub rules: Rules,
    /// Where the shards' Leases are, and their names' common start (`wavegate-shard-`).
    pub leases: (String, String),
}

/// Ends every shard Lease holder's identity: the replica count it shards by, so that replicas
/// that count differently see each other ([`agreed`]).
pub fn identity_suffix(replicas: u32) -> String {
    format!(".r{replicas}")
}

/// This replica's sharding: its settings and its view of the assignment.
pub struct Sharding {
    pub settings: ShardSettings,
    ownership: Arc<RwLock<Ownership>>,
    /// The live holder of each shard's Lease, by shard, as the last read of the Secrets listed
    /// them: where a read about another replica's cluster is forwarded (`api::forward`).
    holders: RwLock<BTreeMap<i64, String>>,
    /// The clusters this replica judged at the last update (`None` before the first): what a
    /// read gains and loses is counted against it.
    mine: RwLock<Option<BTreeSet<String>>>,
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
    /// `Err` while a live replica shards by another replica count: then this replica judges
    /// nothing (see [`agreed`]).
    pub agreement: Result<(), String>,
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
        Sharding {
            settings,
            ownership: Arc::new(RwLock::new(ownership)),
            holders: RwLock::default(),
            mine: RwLock::default(),
            metrics,
        }
    }

    /// Compute the assignment from `secrets` (every cluster Secret just read, by origin) and
    /// Argo CD's settings, read now with `client`. Fails rather than guess when a setting
    /// cannot be read: the last assignment then goes stale and this replica stops writing.
    pub(super) async fn assign(
        &self,
        client: &kube::Client,
        secrets: &[(String, ShardedCluster)],
    ) -> Result<Assigned, ClusterError> {
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
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.settings.leases.0);
        let held = leases.list(&ListParams::default()).await.map_err(|e| {
            ClusterError::SourceUnreadable(format!(
                "cannot list the shard Leases in {}: {e}",
                self.settings.leases.0
            ))
        })?;
        let now = Timestamp::now();
        let agreement = agreed(
            &held.items,
            &self.settings.leases.1,
            self.settings.replicas,
            now,
        );
        *locks::write(&self.holders) = holders(&held.items, &self.settings.leases.1, now);
        let list = shard::argocd_cluster_list(secrets.iter().map(|(_, c)| c.clone()), in_cluster);
        let by_server = shard::distribute(
            algorithm,
            self.settings.replicas,
            &list,
            app_servers.iter().map(String::as_str),
        );
        Ok(Assigned {
            agreement,
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

    /// Whether a cluster with `assignment` is this replica's (none is while the replicas
    /// disagree on their count).
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
            .map(|why| format!("the wavegate replicas do not agree on their count ({why})"));
        match &held_back {
            Some(why) if self.metrics.shard_disagreement.get() == 0 => {
                tracing::warn!(reason = %why, "judging no cluster until every replica shards by the same count");
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
        for cluster in &changes.moved {
            let owner = ownership.owner(cluster);
            tracing::info!(%cluster, ?owner, "cluster moved to another shard");
        }
        self.metrics.shard_moves.inc_by(changes.moved.len() as u64);
        let (owned, unowned) = ownership.counts();
        self.metrics.shard_clusters_owned.set(owned as i64);
        self.metrics.shard_clusters_unowned.set(unowned as i64);
        Updated {
            changed: changes.mine_changed || !changes.moved.is_empty(),
            gained,
        }
    }

    /// Observe in `wavegate_shard_warm_seconds` how long after `since` (the read that made it
    /// this replica's) `cluster`'s required watches are synced; nothing if it stops first or
    /// takes over ten minutes.
    pub(super) fn time_to_warm(&self, cluster: Arc<super::Cluster>, since: Instant) {
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
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
    }

    /// Who judges `cluster`, per the last assignment.
    pub fn owner(&self, cluster: &str) -> Option<Owner> {
        locks::read(&self.ownership).owner(cluster)
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

/// Whether every live holder of a shard Lease (`prefix<N>`, renewed within its duration at
/// `now`) shards by `replicas`, as its identity says ([`identity_suffix`]).
///
/// While a StatefulSet scales (Argo CD's replica count changed, the pods rolled one by one),
/// old pods compute with the old count and new ones with the new: a cluster can then be shard
/// 1 of 2 for an old pod and shard 2 of 3 for a new one, two Leases, two writers. Argo CD's
/// controllers overlap the same way. Here every replica stops writing until the live ones
/// agree: their verdicts expire (`validUntil`) rather than two replicas write one cluster.
pub fn agreed(leases: &[Lease], prefix: &str, replicas: u32, now: Timestamp) -> Result<(), String> {
    let ours = identity_suffix(replicas);
    for (name, _, holder) in live(leases, prefix, now) {
        if !holder.ends_with(&ours) {
            return Err(format!(
                "Lease {name} is held by {holder}, which does not shard by {replicas} replicas"
            ));
        }
    }
    Ok(())
}

/// The live holder of every shard Lease (`prefix<N>`), by shard.
fn holders(leases: &[Lease], prefix: &str, now: Timestamp) -> BTreeMap<i64, String> {
    live(leases, prefix, now)
        .filter_map(|(_, shard, holder)| Some((shard.parse().ok()?, holder.to_string())))
        .collect()
}

/// Each shard Lease (`prefix<N>`) held and renewed within its duration at `now`: its name, the
/// `<N>` of it, its holder.
fn live<'a>(
    leases: &'a [Lease],
    prefix: &'a str,
    now: Timestamp,
) -> impl Iterator<Item = (&'a str, &'a str, &'a str)> {
    leases.iter().filter_map(move |lease| {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let shard = name.strip_prefix(prefix)?;
        let spec = lease.spec.as_ref()?;
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
        let live = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(seconds)) => renewed
                .0
                .checked_add(SignedDuration::from_secs(seconds.into()))
                .is_ok_and(|expires| expires > now),
            _ => false,
        };
        live.then_some((name, shard, holder))
    })
}

/// The pod named by a shard Lease holder's identity (`<pod>_<process>.r<replicas>`), if it is
/// a DNS-1123 label (what a StatefulSet pod's host name is, and all a peer address may be
/// built from); else why it is not used.
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

    /// Scaling from 2 to 3 replicas: the old wavegate-1 still holds shard 1 by 2 while the new
    /// wavegate-2 holds shard 2 by 3. A cluster can be each one's; neither writes until the old
    /// one is gone (its Lease released or expired).
    #[test]
    fn replicas_that_count_differently_write_nothing_until_the_old_ones_are_gone() {
        let old = lease("wavegate-shard-1", "wavegate-1_7-a.r2", 0);
        let new = lease("wavegate-shard-2", "wavegate-2_9-b.r3", 0);
        let both = [old.clone(), new.clone()];
        let why = agreed(&both, "wavegate-shard-", 3, at(5)).unwrap_err();
        assert!(why.contains("wavegate-1_7-a.r2"), "{why}");
        assert!(agreed(&both, "wavegate-shard-", 2, at(5)).is_err());
        // The old Lease expired (its pod killed) or another Lease of the namespace: agreed.
        assert_eq!(agreed(&both, "wavegate-shard-", 3, at(11)), Ok(()));
        let other = lease("wavegate", "someone", 0);
        assert_eq!(agreed(&[other, new], "wavegate-shard-", 3, at(5)), Ok(()));
    }

    /// A cluster that moves away and back is one lost and one gained; the clusters a replica
    /// starts with are neither (a restart is no move), and nor is a cluster that stays.
    #[test]
    fn a_cluster_moving_away_and_back_is_counted_lost_then_gained() {
        let settings = ShardSettings {
            replica: 1,
            replicas: 2,
            algorithm: None,
            argocd_namespace: "argocd".into(),
            rules: Rules::for_resync(std::time::Duration::from_secs(1)),
            leases: ("wavegate".into(), "wavegate-shard-".into()),
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

    /// Where a read is forwarded comes from live shard Leases only: an expired holder (a
    /// killed pod) is nobody to ask, and a Lease of another name is no shard's.
    #[test]
    fn only_a_live_shard_lease_names_a_holder() {
        let leases = [
            lease("wavegate-shard-1", "wavegate-1_7-a.r3", 0),
            lease("wavegate-shard-2", "wavegate-2_9-b.r3", -20),
            lease("wavegate-shard-x", "wavegate-x_1-c.r3", 0),
            lease("wavegate", "wavegate-0_1-d", 0),
        ];
        let got = holders(&leases, "wavegate-shard-", at(5));
        assert_eq!(got, BTreeMap::from([(1, "wavegate-1_7-a.r3".to_string())]));
    }
}
