//! Which application-controller replica Argo CD gives each cluster to, computed from the same
//! inputs and by the same rules, so that a wavegate replica can judge exactly the clusters its
//! Argo CD counterpart reconciles.
//!
//! The rules are Argo CD's (argo-cd `controller/sharding/`, v3.4 to v3.6 alike; the conformance
//! test `tests/offline/shards.rs` runs each release's own code against this module):
//!
//! - The cluster list is util/db `ListClusters`: every cluster Secret (`SecretToCluster`: id =
//!   the Secret's UID, server without trailing `/`, `shard` parsed by `strconv.Atoi`), except the
//!   in-cluster server's when argocd-cm sets `cluster.inClusterEnabled: "false"`; with in-cluster
//!   enabled and no Secret for it, a local cluster with an **empty id** is added.
//! - `cache.go` `updateDistribution`: a `shard` below the replica count is taken as it is (even
//!   a negative one, which then no replica manages); one at or above it gives **shard 0**, not
//!   the algorithm's answer. Otherwise the algorithm decides; with one replica or none
//!   (`NewClusterSharding`: `NoShardingDistributionFunction`) every cluster is shard 0.
//! - `cache.go` `IsManagedCluster`: `argocd.argoproj.io/skip-reconcile` on the Secret, read by
//!   `strconv.ParseBool`, pauses the cluster: no replica manages it, whatever its shard.
//!
//! "In-cluster is always shard 0" holds only where the id is empty: legacy maps an empty id to 0
//! and round-robin sorts it first, but consistent hashing hashes it like any other, and an
//! in-cluster *Secret* has a UID like any other Secret.

use blake2::{Blake2b512, Digest};
use k8s_openapi::api::core::v1::Secret;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

/// The annotation that pauses a cluster (argo-cd `common.AnnotationKeyAppSkipReconcile`).
pub const SKIP_RECONCILE: &str = "argocd.argoproj.io/skip-reconcile";

/// Argo CD's name for the cluster it runs in has this server
/// (`appv1.KubernetesInternalAPIServerAddr`).
const IN_CLUSTER_SERVER: &str = super::HOME_SERVER;

/// `controller.sharding.algorithm` in argocd-cmd-params-cm (the controller's
/// `ARGOCD_CONTROLLER_SHARDING_ALGORITHM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// FNV-32a of the cluster id, modulo the replica count; the default.
    Legacy,
    /// The cluster's rank among all clusters sorted by id, modulo the replica count.
    RoundRobin,
    /// Consistent hashing with bounded loads, the load of a shard being its clusters'
    /// Applications.
    ConsistentHashing,
}

impl Algorithm {
    /// The algorithm Argo CD runs for a configured name: `GetDistributionFunction` falls back to
    /// legacy for a name it does not know, with a warning, and so does this.
    pub fn from_name(name: &str) -> Self {
        match name {
            "round-robin" => Self::RoundRobin,
            "consistent-hashing" => Self::ConsistentHashing,
            _ => Self::Legacy,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Legacy => "legacy",
            Self::RoundRobin => "round-robin",
            Self::ConsistentHashing => "consistent-hashing",
        }
    }

    /// Whether Argo CD knows `name` (it runs legacy for any other).
    pub fn is_known(name: &str) -> bool {
        ["legacy", "round-robin", "consistent-hashing"].contains(&name)
    }
}

/// A cluster as Argo CD's sharding sees it (the fields of `v1alpha1.Cluster` it reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardedCluster {
    /// The cluster Secret's UID; empty for the local in-cluster cluster that has no Secret.
    pub id: String,
    pub server: String,
    /// The Secret's `shard`, when it parses as an integer.
    pub shard: Option<i64>,
    /// `argocd.argoproj.io/skip-reconcile` is true.
    pub paused: bool,
}

impl ShardedCluster {
    /// The fields util/db `SecretToCluster` fills from a cluster Secret.
    pub fn from_secret(secret: &Secret) -> Self {
        let data = |key: &str| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        };
        let annotation = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SKIP_RECONCILE));
        Self {
            id: secret.metadata.uid.clone().unwrap_or_default(),
            server: data("server")
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_string(),
            // strconv.Atoi: optional sign, decimal digits, int64 range; anything else is logged
            // and ignored, as Rust's i64 parsing rejects the same strings.
            shard: data("shard").and_then(|s| s.parse().ok()),
            paused: annotation.is_some_and(|v| go_parse_bool(v) == Some(true)),
        }
    }

    /// The in-cluster cluster util/db adds when no Secret names it (`getLocalCluster`).
    pub fn local() -> Self {
        Self {
            id: String::new(),
            server: IN_CLUSTER_SERVER.to_string(),
            shard: None,
            paused: false,
        }
    }
}

/// `strconv.ParseBool`: `None` for a value it rejects (which does not pause the cluster).
pub(crate) fn go_parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The cluster list util/db `ListClusters` hands to the sharding, from the clusters of Argo CD's
/// cluster Secrets (in any order) and argocd-cm's `cluster.inClusterEnabled` (anything but
/// `"false"` enables it).
pub fn argocd_cluster_list(
    secrets: impl IntoIterator<Item = ShardedCluster>,
    in_cluster_enabled: bool,
) -> Vec<ShardedCluster> {
    let mut list: Vec<ShardedCluster> = secrets
        .into_iter()
        .filter(|c| in_cluster_enabled || c.server != IN_CLUSTER_SERVER)
        .collect();
    if in_cluster_enabled && !list.iter().any(|c| c.server == IN_CLUSTER_SERVER) {
        list.push(ShardedCluster::local());
    }
    list
}

/// Which shard a cluster has, and whether it is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assignment {
    /// What `ClusterSharding.GetDistribution` reports for the cluster's server.
    pub shard: i64,
    pub paused: bool,
}

impl Assignment {
    /// `ClusterSharding.IsManagedCluster` for the replica running as `replica_shard`.
    pub fn is_managed_by(self, replica_shard: i64) -> bool {
        !self.paused && self.shard == replica_shard
    }
}

/// Every cluster's assignment, by server, as `ClusterSharding.Init` computes it from the cluster
/// list and the destination server of every Application.
///
/// Clusters are keyed by server as Argo CD keys them: of two with one server, the later in
/// `clusters` wins (upstream's order is the informer's, so which one is not defined there).
pub fn distribute<'a>(
    algorithm: Algorithm,
    replicas: u32,
    clusters: &[ShardedCluster],
    app_servers: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, Assignment> {
    let mut by_server: BTreeMap<&str, &ShardedCluster> = BTreeMap::new();
    for c in clusters {
        by_server.insert(&c.server, c);
    }
    let members: Vec<&ShardedCluster> = by_server.values().copied().collect();
    let computed: HashMap<&str, i64> = if replicas <= 1 {
        HashMap::new()
    } else {
        match algorithm {
            Algorithm::Legacy => members
                .iter()
                .map(|c| (c.id.as_str(), legacy(&c.id, replicas)))
                .collect(),
            Algorithm::RoundRobin => round_robin(&members, replicas),
            Algorithm::ConsistentHashing => {
                let mut apps: HashMap<&str, i64> = HashMap::new();
                for server in app_servers {
                    *apps.entry(server).or_default() += 1;
                }
                consistent_hashing(&members, replicas, &apps)
            }
        }
    };
    members
        .iter()
        .map(|c| {
            let shard = match c.shard {
                Some(requested) if requested < i64::from(replicas) => requested,
                Some(_) => 0,
                None => computed.get(c.id.as_str()).copied().unwrap_or(0),
            };
            let assignment = Assignment {
                shard,
                paused: c.paused,
            };
            (c.server.clone(), assignment)
        })
        .collect()
}

/// `LegacyDistributionFunction`: an empty id (the local in-cluster cluster) is shard 0, any other
/// is its FNV-32a hash modulo the replica count.
fn legacy(id: &str, replicas: u32) -> i64 {
    if id.is_empty() {
        return 0;
    }
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    i64::from(hash % replicas)
}

/// `RoundRobinDistributionFunction`: the rank of the cluster's id among all clusters' ids sorted
/// bytewise (Go's string order), every cluster counted, pinned and paused ones too; of equal ids
/// the last rank wins, as upstream's map from id to rank keeps it.
fn round_robin<'a>(members: &[&'a ShardedCluster], replicas: u32) -> HashMap<&'a str, i64> {
    let mut ids: Vec<&str> = members.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.into_iter()
        .enumerate()
        .map(|(rank, id)| (id, (rank % replicas as usize) as i64))
        .collect()
}

/// `createConsistentHashingWithBoundLoads`: clusters in id order each take the least-loaded shard
/// the ring offers for their id, and add their Applications (counted by destination server) to
/// that shard's load. Equal ids are ordered by upstream's unstable sort, so their outcome is not
/// defined there; the last one's shard wins the id, as upstream's map keeps it.
fn consistent_hashing<'a>(
    members: &[&'a ShardedCluster],
    replicas: u32,
    apps: &HashMap<&str, i64>,
) -> HashMap<&'a str, i64> {
    let mut sorted = members.to_vec();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    let mut ring = Ring::new(replicas);
    let mut shards = HashMap::new();
    for c in sorted {
        let shard = ring.least_loaded(&c.id);
        shards.insert(c.id.as_str(), i64::from(shard));
        let load = ring.loads[shard as usize] + apps.get(c.server.as_str()).copied().unwrap_or(0);
        ring.set_load(shard, load);
    }
    shards
}

/// argo-cd `controller/sharding/consistent`: a ring of 1000 points per shard, each the BLAKE2b
/// hash of the shard's number followed by the point's index ("0"+"12" = "012").
struct Ring {
    /// Point -> shard; where two shards' strings collide, the later-added shard owns the point.
    points: BTreeMap<u64, u32>,
    loads: Vec<i64>,
    total: i64,
}

/// `consistent.New`'s replication factor.
const POINTS_PER_SHARD: u32 = 1000;

impl Ring {
    fn new(replicas: u32) -> Self {
        let mut points = BTreeMap::new();
        for shard in 0..replicas {
            for i in 0..POINTS_PER_SHARD {
                points.insert(ring_hash(&format!("{shard}{i}")), shard);
            }
        }
        Self {
            points,
            loads: vec![0; replicas as usize],
            total: 0,
        }
    }

    /// `GetLeast`: from the key's hash, walk the ring clockwise (points strictly after the
    /// current one, wrapping to the smallest) until a shard's load is under the bound.
    fn least_loaded(&self, key: &str) -> u32 {
        let mut at = ring_hash(key);
        loop {
            let (&point, &shard) = self
                .points
                .range((Bound::Excluded(at), Bound::Unbounded))
                .next()
                .or_else(|| self.points.iter().next())
                .expect("a ring with at least one shard");
            if self.load_ok(shard) {
                return shard;
            }
            at = point;
        }
    }

    /// `loadOK`: load < ceil(max(1, floor((total + 1) / shards)) * 1.25), in Go's integer
    /// division then float64 arithmetic.
    fn load_ok(&self, shard: u32) -> bool {
        let total = self.total.max(0);
        let average = (total + 1) / self.loads.len() as i64;
        let average = if average == 0 { 1.0 } else { average as f64 };
        (self.loads[shard as usize] as f64) < (average * 1.25).ceil()
    }

    /// `UpdateLoad`.
    fn set_load(&mut self, shard: u32, load: i64) {
        self.total += load - self.loads[shard as usize];
        self.loads[shard as usize] = load;
    }
}

/// `Consistent.hash`: the first 8 bytes of BLAKE2b-512, little-endian.
fn ring_hash(key: &str) -> u64 {
    let digest = Blake2b512::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// The shard a controller replica runs as, as `GetClusterSharding` decides it without dynamic
/// distribution (a StatefulSet): with more than one replica, the configured shard
/// (`ARGOCD_CONTROLLER_SHARD`) if not negative, else the number after the last `-` of the pod's
/// hostname (`InferShard`; 0 when it is not a number), and 0 when that exceeds the replica count;
/// with one replica or none, 0.
///
/// Upstream compares with `>`, so a replica whose number equals the replica count keeps it, and
/// then manages no cluster.
pub fn replica_shard(replicas: u32, configured: Option<i64>, hostname: &str) -> i64 {
    if replicas <= 1 {
        return 0;
    }
    let shard = match configured {
        Some(shard) if shard >= 0 => shard,
        _ => hostname
            .rsplit('-')
            .next()
            .and_then(|last| last.parse().ok())
            .unwrap_or(0),
    };
    if shard > i64::from(replicas) {
        0
    } else {
        shard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    fn cluster(id: &str, server: &str) -> ShardedCluster {
        ShardedCluster {
            id: id.into(),
            server: server.into(),
            shard: None,
            paused: false,
        }
    }

    fn shards(algorithm: Algorithm, replicas: u32, clusters: &[ShardedCluster]) -> Vec<i64> {
        let d = distribute(algorithm, replicas, clusters, []);
        clusters.iter().map(|c| d[&c.server].shard).collect()
    }

    /// argo-cd sharding_test.go `createTestClusters`: ids "1".."5".
    fn five() -> Vec<ShardedCluster> {
        (1..=5)
            .map(|i| {
                cluster(
                    &i.to_string(),
                    &format!("https://kubernetes.default.svc?{i}"),
                )
            })
            .collect()
    }

    #[test]
    fn round_robin_deals_clusters_in_id_order_like_upstreams_own_test() {
        // TestGetShardByIndexModuloReplicasCountDistributionFunction2.
        assert_eq!(shards(Algorithm::RoundRobin, 1, &five()), [0, 0, 0, 0, 0]);
        assert_eq!(shards(Algorithm::RoundRobin, 2, &five()), [0, 1, 0, 1, 0]);
        assert_eq!(shards(Algorithm::RoundRobin, 3, &five()), [0, 1, 2, 0, 1]);
    }

    #[test]
    fn legacy_is_fnv32a_of_the_uid() {
        // FNV-32a("a") = 0xe40c292c, the reference vector.
        assert_eq!(legacy("a", 1000), 0xe40c_292c % 1000);
        assert_eq!(legacy("", 3), 0);
    }

    #[test]
    fn a_pinned_shard_beyond_the_replicas_falls_to_shard_0_not_the_algorithm() {
        let mut clusters = five();
        clusters[1].shard = Some(7);
        clusters[2].shard = Some(-1);
        let d = distribute(Algorithm::RoundRobin, 3, &clusters, []);
        assert_eq!(d[&clusters[1].server].shard, 0);
        // A negative shard is kept, and no replica manages the cluster.
        assert!((0..3).all(|r| !d[&clusters[2].server].is_managed_by(r)));
    }

    #[test]
    fn skip_reconcile_pauses_a_cluster_for_every_replica() {
        let secret = Secret {
            metadata: ObjectMeta {
                uid: Some("u-1".into()),
                annotations: Some([(SKIP_RECONCILE.to_string(), "True".to_string())].into()),
                ..Default::default()
            },
            data: Some(
                [
                    (
                        "server".to_string(),
                        ByteString(b"https://a.example//".to_vec()),
                    ),
                    ("shard".to_string(), ByteString(b"+1".to_vec())),
                ]
                .into(),
            ),
            ..Default::default()
        };
        let c = ShardedCluster::from_secret(&secret);
        assert_eq!((c.server.as_str(), c.shard), ("https://a.example", Some(1)));
        let d = distribute(Algorithm::Legacy, 2, &[c], []);
        assert_eq!(d["https://a.example"].shard, 1);
        assert!(!d["https://a.example"].is_managed_by(1));
    }

    #[test]
    fn the_local_cluster_is_added_only_when_enabled_and_no_secret_names_it() {
        let remote = cluster("u-1", "https://a.example");
        let list = argocd_cluster_list([remote.clone()], true);
        assert_eq!(list, vec![remote.clone(), ShardedCluster::local()]);
        let list = argocd_cluster_list([remote.clone()], false);
        assert_eq!(list, vec![remote]);
        let own = cluster("u-2", IN_CLUSTER_SERVER);
        let list = argocd_cluster_list([own.clone()], true);
        assert_eq!(list, vec![own.clone()]);
        assert!(argocd_cluster_list([own], false).is_empty());
    }

    #[test]
    fn consistent_hashing_keeps_every_shard_within_its_bound() {
        let clusters: Vec<_> = (0..133)
            .map(|i| cluster(&format!("{i:06}"), &format!("https://c{i}")))
            .collect();
        let d = distribute(Algorithm::ConsistentHashing, 3, &clusters, []);
        let mut count = [0; 3];
        for a in d.values() {
            count[a.shard as usize] += 1;
        }
        // TestConsistentHashingWhenClusterIsAddedAndRemoved: within 10% of the average.
        assert!(count.iter().all(|&n| (40..=48).contains(&n)), "{count:?}");
    }

    #[test]
    fn a_replica_takes_its_shard_from_its_pod_name() {
        // TestInferShard, and GetClusterSharding's fallbacks.
        assert_eq!(replica_shard(5, None, "example-shard-3"), 3);
        assert_eq!(replica_shard(5, None, "example-shard"), 0);
        assert_eq!(replica_shard(5, Some(2), "example-shard-3"), 2);
        assert_eq!(replica_shard(5, None, "argocd-application-controller-6"), 0);
        assert_eq!(replica_shard(5, None, "argocd-application-controller-5"), 5);
        assert_eq!(replica_shard(1, Some(4), "x-3"), 0);
    }

    #[test]
    fn unknown_algorithm_names_run_legacy() {
        assert_eq!(Algorithm::from_name("hash"), Algorithm::Legacy);
        assert!(!Algorithm::is_known("hash"));
        for a in [
            Algorithm::Legacy,
            Algorithm::RoundRobin,
            Algorithm::ConsistentHashing,
        ] {
            assert_eq!(Algorithm::from_name(a.name()), a);
        }
    }
}
