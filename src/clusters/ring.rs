//! `serve --shards N`: wavegate's own assignment of clusters to replicas, for installs whose
//! Argo CD does not shard its controller (or that want wavegate's replicas independent of it).
//!
//! A consistent hash ring with bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent
//! Hashing with Bounded Loads", 2017; the scheme argo-cd's `controller/sharding/consistent`
//! implements too, see [`super::shard`]): every shard has [`POINTS`] points on a ring of 64-bit
//! hashes, a cluster hashes to a point and goes to the first shard clockwise whose load, with
//! the cluster's weight added, stays within `ceil(BALANCE × total weight / shards)`. Adding or
//! removing one cluster or one shard moves few clusters (the tests measure how few), and no
//! shard carries more than the bound.
//!
//! A cluster's weight is what judging it costs: its WaveGates and its watches
//! ([`measured_weight`]), quantised to a power of two so that a gate added or a watch started
//! does not move a cluster. Each shard's Lease holder publishes the weights of the clusters it
//! judges in an annotation of its shard's Lease ([`WEIGHTS_ANNOTATION`], [`to_publish`]), at
//! most every [`REPUBLISH_AFTER`]; every replica reads every shard's Lease and takes each
//! cluster's published weight ([`published_weights`]), 1 when none is. So the assignment is a
//! pure function of the cluster Secrets and the shard Leases, which every replica reads alike.
//!
//! Why the flapping guard is at the publisher and not a "move only for a real margin" rule at
//! the readers: a margin needs a baseline (the assignment in force), which is state each
//! replica would keep on its own and could disagree about after a restart; a publisher that
//! changes its annotation at most every five minutes (stamped in the annotation, so a restart
//! does not reset it) keeps every reader's answer a function of what it reads.

use blake2::{Blake2b512, Digest};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How far above the average a shard's load may go: Argo CD's consistent hashing uses 1.25
/// (`consistent.New`'s load factor), and so does this ring.
pub const BALANCE: f64 = 1.25;
/// Points per shard on the ring. Argo CD uses 1000; 100 already spreads 2–20 shards within a
/// few percent of even before the bound applies, at a tenth of the hashing per read.
pub const POINTS: u32 = 100;
/// Moved on by any change of how the ring places clusters that its other parameters do not
/// name (the hash key, heaviest first, the weights' clamp and merge, an unknown cluster's
/// weight): it is part of the sharding inputs' digest, so replicas of two placements stand
/// back rather than both write one cluster during a rolling upgrade.
pub const VERSION: u32 = 1;
/// Where a shard's Lease holder publishes its clusters' weights (JSON, [`Published`]).
pub const WEIGHTS_ANNOTATION: &str = "wavegate.dev/shard-weights";
/// A holder changes its published weights at most this often.
pub const REPUBLISH_AFTER: Duration = Duration::from_secs(300);
/// No published weight counts for more (a hand-edited annotation cannot overflow the sums).
pub const MAX_WEIGHT: u32 = 1 << 16;

/// The most load any shard may carry when `total` weight is spread over `shards`.
pub fn bound(shards: u32, total: u64) -> u64 {
    (BALANCE * total as f64 / f64::from(shards.max(1))).ceil() as u64
}

/// Each cluster's shard, from `weights` (cluster key → weight, at least 1; the key is the
/// cluster's normalized server URL). Deterministic: the same map gives the same answer on
/// every replica, whatever the order it was built in.
///
/// Clusters are placed heaviest first (then by key), so that a heavy cluster is not the one
/// left without room; each walks the ring from its hash to the first shard it fits in. When
/// none fits (weights so uneven that one cluster outweighs the slack), it goes to the least
/// loaded shard, which then carries at most the average plus that cluster's weight.
pub fn assign(shards: u32, weights: &BTreeMap<String, u32>) -> BTreeMap<String, u32> {
    let shards = shards.max(1);
    let ring = ring(shards);
    let total: u64 = weights.values().map(|w| u64::from((*w).max(1))).sum();
    let cap = bound(shards, total);
    let mut order: Vec<(&String, u64)> = weights
        .iter()
        .map(|(k, w)| (k, u64::from((*w).max(1))))
        .collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let mut loads = vec![0u64; shards as usize];
    let mut out = BTreeMap::new();
    for (key, weight) in order {
        let shard = place(&ring, &loads, hash(&format!("cluster/{key}")), weight, cap);
        loads[shard as usize] += weight;
        out.insert(key.clone(), shard);
    }
    out
}

/// The points of `shards` shards, sorted by hash (a collision keeps the lower shard's point).
fn ring(shards: u32) -> Vec<(u64, u32)> {
    let mut points: BTreeMap<u64, u32> = BTreeMap::new();
    for shard in 0..shards {
        for i in 0..POINTS {
            points
                .entry(hash(&format!("shard/{shard}/{i}")))
                .or_insert(shard);
        }
    }
    points.into_iter().collect()
}

/// The first shard clockwise from `at` with room for `weight` under `cap`, else the least
/// loaded (the lowest numbered of equals).
fn place(ring: &[(u64, u32)], loads: &[u64], at: u64, weight: u64, cap: u64) -> u32 {
    let start = ring.partition_point(|(point, _)| *point < at);
    let mut seen = vec![false; loads.len()];
    let mut unseen = loads.len();
    for i in 0..ring.len() {
        let shard = ring[(start + i) % ring.len()].1;
        if seen[shard as usize] {
            continue;
        }
        if loads[shard as usize] + weight <= cap {
            return shard;
        }
        seen[shard as usize] = true;
        unseen -= 1;
        if unseen == 0 {
            break;
        }
    }
    (0..loads.len() as u32)
        .min_by_key(|s| (loads[*s as usize], *s))
        .unwrap_or(0)
}

/// The first 8 bytes of BLAKE2b-512, little-endian (as argo-cd's `consistent` ring hashes).
fn hash(key: &str) -> u64 {
    let digest = Blake2b512::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// The weight of a cluster with `gates` WaveGates and `watches` watches running: their sum,
/// rounded up to a power of two, so that the weight changes only when the cost doubles or
/// halves.
pub fn measured_weight(gates: usize, watches: usize) -> u32 {
    // Capped before rounding: MAX_WEIGHT is a power of two, and rounding usize::MAX overflows.
    let raw = gates.saturating_add(watches).clamp(1, MAX_WEIGHT as usize);
    raw.next_power_of_two() as u32
}

/// What a shard's Lease holder publishes ([`WEIGHTS_ANNOTATION`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    /// When it was published, by the publisher's clock.
    pub at: Timestamp,
    /// Cluster key → weight.
    pub weights: BTreeMap<String, u32>,
}

impl Published {
    /// The annotation's value; `None` for anything else than this JSON (whoever may write
    /// Leases may write it: a bad one counts as no weights, which only costs balance).
    pub fn parse(value: &str) -> Option<Published> {
        let mut p: Published = serde_json::from_str(value).ok()?;
        for w in p.weights.values_mut() {
            *w = (*w).clamp(1, MAX_WEIGHT);
        }
        Some(p)
    }

    pub fn render(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Every cluster's weight as the shards' Leases publish it: of two shards publishing one
/// cluster (the one that lost it still carries it, see [`to_publish`]), the larger. Clusters
/// no Lease names weigh 1 ([`weights_for`]).
pub fn published_weights<'a>(
    published: impl IntoIterator<Item = &'a Published>,
) -> BTreeMap<String, u32> {
    let mut weights: BTreeMap<String, u32> = BTreeMap::new();
    for p in published {
        for (key, w) in &p.weights {
            let at = weights.entry(key.clone()).or_insert(*w);
            *at = (*at).max(*w);
        }
    }
    weights
}

/// The ring's input: every cluster of `clusters`, with its published weight or 1.
pub fn weights_for(
    clusters: &BTreeSet<String>,
    published: &BTreeMap<String, u32>,
) -> BTreeMap<String, u32> {
    clusters
        .iter()
        .map(|k| (k.clone(), published.get(k).copied().unwrap_or(1)))
        .collect()
}

/// What a shard's holder should publish now, if anything: the weights it measured for the
/// clusters it judges (`measured`), and, of what it published before (`mine`), the clusters
/// that still exist (`clusters`) and that no other shard publishes (`others`). A cluster that
/// moved away is carried until its new shard publishes it: dropped at once, it would weigh 1
/// again, and the ring could hand it back. `None` while that equals what is published, or
/// while the last publication is younger than [`REPUBLISH_AFTER`] (a first one is at once).
pub fn to_publish(
    measured: &BTreeMap<String, u32>,
    mine: Option<&Published>,
    others: &BTreeMap<String, u32>,
    clusters: &BTreeSet<String>,
    now: Timestamp,
) -> Option<Published> {
    let mut weights = measured.clone();
    if let Some(mine) = mine {
        for (key, w) in &mine.weights {
            if !weights.contains_key(key) && clusters.contains(key) && !others.contains_key(key) {
                weights.insert(key.clone(), *w);
            }
        }
    }
    match mine {
        Some(p) if p.weights == weights => None,
        None if weights.is_empty() => None,
        // A publication dated ahead of this clock (a predecessor's clock ran ahead, or anyone
        // who may patch Leases) does not hold the weights until that date.
        Some(p)
            if p.at <= now
                && now.duration_since(p.at)
                    < SignedDuration::try_from(REPUBLISH_AFTER).unwrap_or(SignedDuration::MAX) =>
        {
            None
        }
        _ => Some(Published { at: now, weights }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unit(keys: impl IntoIterator<Item = String>) -> BTreeMap<String, u32> {
        keys.into_iter().map(|k| (k, 1)).collect()
    }

    fn servers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("https://c{i}.example")).collect()
    }

    fn loads(shards: u32, weights: &BTreeMap<String, u32>, a: &BTreeMap<String, u32>) -> Vec<u64> {
        let mut loads = vec![0u64; shards as usize];
        for (k, s) in a {
            loads[*s as usize] += u64::from(weights[k]);
        }
        loads
    }

    fn moved(a: &BTreeMap<String, u32>, b: &BTreeMap<String, u32>) -> usize {
        a.iter()
            .filter(|(k, s)| b.get(*k).is_some_and(|t| t != *s))
            .count()
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config::config(64))]

        /// The same clusters give the same answer, however the map was built.
        #[test]
        fn the_ring_is_deterministic(keys in proptest::collection::btree_set("[a-z0-9.:/-]{1,30}", 0..60), shards in 1u32..8) {
            let forward = unit(keys.iter().cloned());
            let backward = unit(keys.iter().rev().cloned());
            prop_assert_eq!(assign(shards, &forward), assign(shards, &backward));
            prop_assert!(assign(shards, &forward).values().all(|s| *s < shards));
            prop_assert_eq!(assign(shards, &forward).len(), keys.len());
        }

        /// Unit weights: no shard above ceil(1.25 × average).
        #[test]
        fn no_shard_carries_more_than_the_bound(n in 0usize..200, shards in 1u32..12) {
            let w = unit(servers(n));
            let l = loads(shards, &w, &assign(shards, &w));
            let cap = bound(shards, n as u64);
            prop_assert!(l.iter().all(|x| *x <= cap), "{:?} over {}", l, cap);
        }

        /// Any weights: no shard above the bound, or the average plus the heaviest cluster
        /// where one cluster outweighs the slack.
        #[test]
        fn weighted_loads_stay_bounded(ws in proptest::collection::vec(1u32..64, 0..80), shards in 1u32..8) {
            let w: BTreeMap<String, u32> = servers(ws.len()).into_iter().zip(ws.iter().copied()).collect();
            let total: u64 = ws.iter().map(|x| u64::from(*x)).sum();
            let heaviest = u64::from(ws.iter().copied().max().unwrap_or(1));
            let limit = bound(shards, total).max(total / u64::from(shards) + heaviest);
            let l = loads(shards, &w, &assign(shards, &w));
            prop_assert!(l.iter().all(|x| *x <= limit), "{:?} over {}", l, limit);
        }

        /// One cluster added moves few of the others (few: the measured mean is in
        /// `one_change_moves_few_clusters_measured`), with at least four clusters a shard on
        /// average: with fewer, one more cluster raises the bound's ceiling (ceil(1.25 ×
        /// 12 / 7) = 3 against 2 for 11), and the cascade moves 3 of 11.
        #[test]
        fn adding_a_cluster_moves_few((n, shards) in (2u32..8).prop_flat_map(|s| ((4 * s as usize)..150, Just(s)))) {
            let before = unit(servers(n));
            let after = unit(servers(n + 1));
            let m = moved(&assign(shards, &before), &assign(shards, &after));
            prop_assert!(m * 4 <= n, "{} of {} moved", m, n);
        }
    }

    /// The fraction of clusters that change shard when one cluster or one shard is added or
    /// removed, averaged over cluster counts 20..200 and 3..8 shards. Measured (printed with
    /// --nocapture): about 1–2 % per cluster added or removed (an ideal ring moves 0: only
    /// the bound's cascade moves any), and about 1/(shards+1) when a shard is added (the
    /// ideal share the new shard takes), against ~90 % for `hash mod shards`.
    #[test]
    fn one_change_moves_few_clusters_measured() {
        let (mut add_c, mut rm_c, mut add_s, mut rm_s, mut ideal_s, mut cases) =
            (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for n in (20..200).step_by(20) {
            for shards in 3u32..8 {
                let all = servers(n + 1);
                let base = unit(all[..n].iter().cloned());
                let a = assign(shards, &base);
                let plus = assign(shards, &unit(all.iter().cloned()));
                let minus = assign(shards, &unit(all[1..n].iter().cloned()));
                add_c += moved(&a, &plus) as f64 / n as f64;
                rm_c += moved(&a, &minus) as f64 / n as f64;
                add_s += moved(&a, &assign(shards + 1, &base)) as f64 / n as f64;
                rm_s += moved(&a, &assign(shards - 1, &base)) as f64 / n as f64;
                ideal_s += 1.0 / f64::from(shards + 1);
                cases += 1.0;
            }
        }
        let (add_c, rm_c, add_s, rm_s, ideal_s) = (
            add_c / cases,
            rm_c / cases,
            add_s / cases,
            rm_s / cases,
            ideal_s / cases,
        );
        println!(
            "moved per change: cluster added {:.1}%, removed {:.1}%, shard added {:.1}% \
             (ideal {:.1}%), shard removed {:.1}%",
            add_c * 100.0,
            rm_c * 100.0,
            add_s * 100.0,
            ideal_s * 100.0,
            rm_s * 100.0
        );
        assert!(add_c < 0.05 && rm_c < 0.05, "{add_c} {rm_c}");
        assert!(add_s < ideal_s * 1.5, "{add_s} against {ideal_s}");
        assert!(rm_s < 0.45, "{rm_s}");
    }

    /// A heavy cluster pushes others off its shard: weights shift load.
    #[test]
    fn weights_shift_load() {
        let keys = servers(40);
        let even = unit(keys.iter().cloned());
        let a = assign(4, &even);
        let heavy = keys[0].clone();
        let mut weighted = even.clone();
        weighted.insert(heavy.clone(), 16);
        let b = assign(4, &weighted);
        let shard = b[&heavy];
        let count = |a: &BTreeMap<String, u32>, s| a.values().filter(|x| **x == s).count();
        // Unweighted, ~10 clusters each; the heavy cluster's shard keeps fewer others.
        assert!(
            count(&b, shard) - 1 < count(&a, a[&heavy]) - 1,
            "{a:?} {b:?}"
        );
        let l = loads(4, &weighted, &b);
        assert!(l.iter().all(|x| *x <= bound(4, 55)), "{l:?}");
    }

    #[test]
    fn weights_are_powers_of_two_and_capped() {
        assert_eq!(measured_weight(0, 0), 1);
        assert_eq!(measured_weight(1, 2), 4);
        assert_eq!(measured_weight(3, 1), 4);
        assert_eq!(measured_weight(5, 0), 8);
        assert_eq!(measured_weight(usize::MAX, 1), MAX_WEIGHT);
        let p =
            Published::parse(r#"{"at":"2026-01-01T00:00:00Z","weights":{"a":0,"b":4294967295}}"#)
                .unwrap();
        assert_eq!(
            p.weights,
            BTreeMap::from([("a".into(), 1), ("b".into(), MAX_WEIGHT)])
        );
        assert_eq!(Published::parse(&p.render()), Some(p));
        assert_eq!(Published::parse("8"), None);
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn a_holder_republishes_only_changes_and_at_most_every_five_minutes() {
        let clusters: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let measured = BTreeMap::from([("a".to_string(), 4)]);
        let none = BTreeMap::new();
        let first = to_publish(&measured, None, &none, &clusters, at(0)).unwrap();
        assert_eq!(first.weights, measured);
        assert_eq!(
            to_publish(&measured, Some(&first), &none, &clusters, at(1000)),
            None
        );
        let doubled = BTreeMap::from([("a".to_string(), 8)]);
        assert_eq!(
            to_publish(&doubled, Some(&first), &none, &clusters, at(299)),
            None
        );
        let second = to_publish(&doubled, Some(&first), &none, &clusters, at(300)).unwrap();
        assert_eq!(second.weights, doubled);
    }

    /// A publication dated ahead of this clock does not hold the weights until that date.
    #[test]
    fn a_publication_dated_in_the_future_is_replaced() {
        let clusters: BTreeSet<String> = ["a"].map(String::from).into();
        let planted = Published {
            at: at(86_400 * 365),
            weights: BTreeMap::from([("a".to_string(), MAX_WEIGHT)]),
        };
        let measured = BTreeMap::from([("a".to_string(), 2)]);
        let none = BTreeMap::new();
        let next = to_publish(&measured, Some(&planted), &none, &clusters, at(10))
            .expect("the planted weights stood");
        assert_eq!(next.weights, measured);
    }

    /// `a` moved to another shard: its old shard carries its weight until the new one
    /// publishes it, so it never falls back to 1 (which could send it back).
    #[test]
    fn a_cluster_that_moved_away_is_carried_until_its_new_shard_publishes_it() {
        let clusters: BTreeSet<String> = ["a", "b"].map(String::from).into();
        let mine = Published {
            at: at(0),
            weights: BTreeMap::from([("a".into(), 8), ("b".into(), 2)]),
        };
        let measured = BTreeMap::from([("b".to_string(), 2)]);
        assert_eq!(
            to_publish(&measured, Some(&mine), &BTreeMap::new(), &clusters, at(900)),
            None
        );
        let others = BTreeMap::from([("a".to_string(), 8)]);
        let dropped = to_publish(&measured, Some(&mine), &others, &clusters, at(900)).unwrap();
        assert_eq!(dropped.weights, measured);
        // Gone from the Secrets: dropped too.
        let only_b: BTreeSet<String> = ["b".to_string()].into();
        let gone = to_publish(&measured, Some(&mine), &BTreeMap::new(), &only_b, at(900)).unwrap();
        assert_eq!(gone.weights, measured);
        // Both publish it meanwhile: every reader takes the larger.
        let theirs = Published {
            at: at(5),
            weights: BTreeMap::from([("a".into(), 4)]),
        };
        assert_eq!(published_weights([&mine, &theirs])["a"], 8);
        assert_eq!(weights_for(&clusters, &BTreeMap::new())["a"], 1);
    }
}
