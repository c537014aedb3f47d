//! Which clusters this replica judges under `serve --shard-like-argocd`, and when it may write
//! for one: the assignment [`super::shard`] computes, as this replica last read it, kept with
//! the time it was computed and the time each cluster became this replica's.
//!
//! A cluster's shard can change at runtime (a Secret's `shard` edited, `skip-reconcile`
//! toggled, a cluster added that moves others under round-robin or consistent hashing), and
//! each replica learns it at its own next read of the Secrets. Each replica holds only its own
//! shard's Lease, so the Lease alone cannot stop the replica that lost a cluster from writing
//! for it while the one that gained it already does. Two rules, checked at every write, close
//! that window:
//!
//! - **A write needs a fresh assignment**: one computed within [`Rules::stale_after`]. A replica
//!   that has not re-read the Secrets since (its reads failing, or itself frozen) writes
//!   nothing, whatever it believed.
//! - **A gained cluster waits [`Rules::handover`]** (longer than `stale_after` plus the time a
//!   write takes to arrive) before its first write. Any write of the replica that lost it is
//!   admitted on an assignment read before the move was visible, so within `stale_after` of it;
//!   by the time the new owner writes, that window has closed.
//!
//! Both are measured with the monotonic clock, which runs on while a process is frozen.

use super::shard::Assignment;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Who judges a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", tag = "judgedBy")]
pub enum Owner {
    /// This replica.
    ThisReplica,
    /// The replica running as this shard.
    Replica { shard: i64 },
    /// No replica: Argo CD does not reconcile it either.
    Nobody { why: String },
}

impl Owner {
    pub(super) fn of(a: Assignment, replica: i64, replicas: u32) -> Owner {
        if a.paused {
            Owner::Nobody {
                why: format!(
                    "paused: its cluster Secret has {}=true",
                    super::shard::SKIP_RECONCILE
                ),
            }
        } else if a.shard < 0 {
            Owner::Nobody {
                why: format!("its cluster Secret's shard {} is negative", a.shard),
            }
        } else if a.shard >= i64::from(replicas.max(1)) {
            Owner::Nobody {
                why: format!("shard {} has no replica (there are {replicas})", a.shard),
            }
        } else if a.shard == replica {
            Owner::ThisReplica
        } else {
            Owner::Replica { shard: a.shard }
        }
    }

    /// What a replica that does not judge the cluster says of it.
    pub fn elsewhere(&self, cluster: &str) -> Option<String> {
        let cluster = crate::health::printable(cluster);
        match self {
            Owner::ThisReplica => None,
            Owner::Replica { shard } => Some(format!(
                "cluster {cluster:?} is judged by wavegate replica {shard} (shard {shard}); ask \
                 that replica"
            )),
            Owner::Nobody { why } => Some(format!(
                "cluster {cluster:?} is judged by no wavegate replica: {why}"
            )),
        }
    }
}

/// How long an assignment counts and how long a gained cluster waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub stale_after: Duration,
    pub handover: Duration,
}

impl Rules {
    /// The rules for a replica that reads the Secrets every `resync`: an assignment counts for
    /// two reads (one failed read stops nothing), and a gained cluster waits that plus the time
    /// a write may take to arrive ([`crate::leader::REQUEST_TIMEOUT`]).
    pub fn for_resync(resync: Duration) -> Rules {
        let stale_after = resync * 2;
        Rules {
            stale_after,
            handover: stale_after + crate::leader::REQUEST_TIMEOUT,
        }
    }
}

/// This replica's view of the assignment.
#[derive(Debug)]
pub struct Ownership {
    /// The shard this replica runs as.
    pub replica: i64,
    pub replicas: u32,
    rules: Rules,
    computed_at: Option<Instant>,
    /// By cluster name (home as `in-cluster`).
    assigned: BTreeMap<String, Assignment>,
    /// Since when each cluster of this replica has been its own, continuously.
    mine_since: HashMap<String, Instant>,
    /// Why no replica may judge anything now (a live replica writes by another rule: other sharding inputs, or unsharded).
    held_back: Option<String>,
}

/// What changed at an [`Ownership::update`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Clusters known before and after whose shard or pause changed.
    pub moved: Vec<String>,
    /// Whether the set of clusters this replica judges changed.
    pub mine_changed: bool,
    /// Whether every replica started or stopped standing back (`held_back`).
    pub held_back_changed: bool,
}

impl Ownership {
    pub fn new(replica: i64, replicas: u32, rules: Rules) -> Ownership {
        Ownership {
            replica,
            replicas,
            rules,
            computed_at: None,
            assigned: BTreeMap::new(),
            mine_since: HashMap::new(),
            held_back: None,
        }
    }

    #[cfg(test)]
    fn rules(&self) -> Rules {
        self.rules
    }

    /// The assignment computed from a read of the Secrets started at `read_at` and taken at
    /// `now`; with `held_back`, this replica judges none of it, for that reason.
    ///
    /// Freshness counts from the read's start and a handover from `now`, its end: a read that
    /// took long (identities of unreachable clusters, a slow API server) makes the replica that
    /// may have lost a cluster stop sooner and the one that gained it wait longer, never the
    /// other way round.
    pub fn update(
        &mut self,
        assigned: BTreeMap<String, Assignment>,
        held_back: Option<String>,
        read_at: Instant,
        now: Instant,
    ) -> Changes {
        let moved = assigned
            .iter()
            .filter(|(name, a)| self.assigned.get(*name).is_some_and(|b| b != *a))
            .map(|(name, _)| name.clone())
            .collect();
        let before: Vec<String> = {
            let mut v: Vec<String> = self.mine_since.keys().cloned().collect();
            v.sort();
            v
        };
        let mut mine_since = HashMap::new();
        for (name, a) in assigned.iter().filter(|_| held_back.is_none()) {
            if Owner::of(*a, self.replica, self.replicas) == Owner::ThisReplica {
                let since = self.mine_since.get(name).copied().unwrap_or(now);
                mine_since.insert(name.clone(), since);
            }
        }
        let mut after: Vec<String> = mine_since.keys().cloned().collect();
        after.sort();
        // Its reason too: kept Unknown answers quote it.
        let held_back_changed = self.held_back != held_back;
        self.assigned = assigned;
        self.mine_since = mine_since;
        self.held_back = held_back;
        self.computed_at = Some(read_at.min(now));
        Changes {
            moved,
            mine_changed: before != after,
            held_back_changed,
        }
    }

    /// `cluster` stays this replica's but now points at another API server (its Secret's
    /// `server` edited): its handover starts anew at `now`, as if it had just been gained. The
    /// replica that judged that server until now may still write it until its own assignment
    /// goes stale; an edited Secret keeps its UID, and Argo CD places a cluster by that.
    pub fn renew(&mut self, cluster: &str, now: Instant) {
        if let Some(since) = self.mine_since.get_mut(cluster) {
            *since = now;
        }
    }

    /// Who judges `cluster`; `None` when the last assignment does not name it.
    pub fn owner(&self, cluster: &str) -> Option<Owner> {
        let a = self.assigned.get(cluster)?;
        Some(match &self.held_back {
            Some(why) => Owner::Nobody { why: why.clone() },
            None => Owner::of(*a, self.replica, self.replicas),
        })
    }

    /// Whether this replica judges `cluster` (watches it, runs its controller), handover or not.
    #[cfg(test)]
    fn is_mine(&self, cluster: &str) -> bool {
        self.mine_since.contains_key(cluster)
    }

    /// Whether `cluster`'s writer may run at `now`: this replica's, and its handover over.
    pub fn writes(&self, cluster: &str, now: Instant) -> bool {
        self.mine_since
            .get(cluster)
            .is_some_and(|since| now.saturating_duration_since(*since) >= self.rules.handover)
    }

    /// Whether `cluster` has been this replica's, continuously, for at least `long` at `now`.
    pub fn mine_for(&self, cluster: &str, long: Duration, now: Instant) -> bool {
        self.mine_since
            .get(cluster)
            .is_some_and(|since| now.saturating_duration_since(*since) >= long)
    }

    /// When the next cluster's handover ends, if one is pending at `now`.
    pub fn next_handover(&self, now: Instant) -> Option<Instant> {
        self.mine_since
            .values()
            .map(|since| *since + self.rules.handover)
            .filter(|at| *at > now)
            .min()
    }

    /// Asked right before a write for `cluster` at `now` (see the module's rules).
    pub fn admit(&self, cluster: &str, now: Instant) -> Result<(), String> {
        let Some(at) = self.computed_at else {
            return Err("no shard assignment has been computed yet".into());
        };
        let age = now.saturating_duration_since(at);
        if age > self.rules.stale_after {
            return Err(format!(
                "the shard assignment was computed {}s ago, more than {}s: the cluster may \
                 have moved to another replica since",
                age.as_secs(),
                self.rules.stale_after.as_secs()
            ));
        }
        match self.owner(cluster) {
            None => {
                return Err(format!(
                    "cluster {cluster:?} is not in the shard assignment"
                ));
            }
            Some(owner) => {
                if let Some(why) = owner.elsewhere(cluster) {
                    return Err(why);
                }
            }
        }
        if !self.writes(cluster, now) {
            return Err(format!(
                "cluster {cluster:?} became this replica's less than {}s ago; the replica \
                 that judged it before may still be writing",
                self.rules.handover.as_secs()
            ));
        }
        Ok(())
    }

    /// How many clusters this replica judges, and how many no replica does (by the Secrets;
    /// not while a live replica writes by another rule).
    pub fn counts(&self) -> (usize, usize) {
        let nobody = self
            .assigned
            .values()
            .filter(|a| {
                matches!(
                    Owner::of(**a, self.replica, self.replicas),
                    Owner::Nobody { .. }
                )
            })
            .count();
        (self.mine_since.len(), nobody)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESYNC: Duration = Duration::from_secs(1);

    fn on(shard: i64) -> Assignment {
        Assignment {
            shard,
            paused: false,
        }
    }

    fn paused(shard: i64) -> Assignment {
        Assignment {
            shard,
            paused: true,
        }
    }

    fn assignment(pairs: &[(&str, Assignment)]) -> BTreeMap<String, Assignment> {
        pairs.iter().map(|(n, a)| (n.to_string(), *a)).collect()
    }

    /// Replica 1 of 3, its rules from a 1 s resync (stale after 2 s, handover 4 s).
    fn replica_1() -> Ownership {
        Ownership::new(1, 3, Rules::for_resync(RESYNC))
    }

    #[test]
    fn a_cluster_gained_is_written_only_after_the_handover() {
        let t0 = Instant::now();
        let mut o = replica_1();
        o.update(assignment(&[("a", on(1)), ("b", on(2))]), None, t0, t0);
        assert!(o.is_mine("a"));
        let early = o.admit("a", t0 + Duration::from_secs(1)).unwrap_err();
        assert!(early.contains("may still be writing"), "{early}");
        // Kept fresh by reads every second, the handover ends 4 s after it was first seen.
        for s in 1..=4 {
            o.update(
                assignment(&[("a", on(1)), ("b", on(2))]),
                None,
                t0 + Duration::from_secs(s),
                t0 + Duration::from_secs(s),
            );
        }
        assert_eq!(o.admit("a", t0 + Duration::from_secs(4)), Ok(()));
        assert_eq!(o.next_handover(t0 + Duration::from_secs(4)), None);
    }

    /// What a cluster costs is measured only once it has been this replica's for a while
    /// (`Sharding::settled`), and a move away and back starts that over.
    #[test]
    fn a_cluster_counts_as_settled_only_after_being_mine_continuously() {
        let t0 = Instant::now();
        let mut o = replica_1();
        let long = Duration::from_secs(6);
        o.update(assignment(&[("a", on(1))]), None, t0, t0);
        assert!(!o.mine_for("a", long, t0 + Duration::from_secs(5)));
        assert!(o.mine_for("a", long, t0 + long));
        let t7 = t0 + Duration::from_secs(7);
        o.update(assignment(&[("a", on(2))]), None, t7, t7);
        o.update(assignment(&[("a", on(1))]), None, t7, t7);
        assert!(!o.mine_for("a", long, t7 + Duration::from_secs(5)));
        assert!(!o.mine_for("b", Duration::ZERO, t7));
    }

    /// The old owner of a cluster whose Secret moved it: once its assignment shows the move it
    /// refuses; before it does, it stops anyway when the assignment goes stale — and the new
    /// owner's handover outlasts that.
    #[test]
    fn the_replica_a_cluster_moved_away_from_stops_before_the_new_owner_starts() {
        let t0 = Instant::now();
        let mut old = replica_1();
        old.update(assignment(&[("a", on(1))]), None, t0, t0);
        let ready = t0 + old.rules().handover;
        old.update(assignment(&[("a", on(1))]), None, ready, ready);
        assert_eq!(old.admit("a", ready), Ok(()));

        // The Secret is edited at `moved`; the new owner reads it at once.
        let moved = ready + Duration::from_millis(100);
        let mut new = Ownership::new(2, 3, Rules::for_resync(RESYNC));
        new.update(assignment(&[("a", on(2))]), None, moved, moved);
        let first_write = moved + new.rules().handover;
        // The old owner, frozen since its last read, wakes: its last assignment is before
        // `moved`, and every moment it would still admit the write is before `first_write`.
        let last_admitted = ready + old.rules().stale_after;
        assert_eq!(old.admit("a", last_admitted), Ok(()));
        assert!(
            old.admit("a", last_admitted + Duration::from_millis(1))
                .is_err()
        );
        assert!(last_admitted + crate::leader::REQUEST_TIMEOUT <= first_write);
        assert!(
            new.admit("a", first_write - Duration::from_millis(1))
                .is_err()
        );
        for s in 0..=new.rules().handover.as_secs() {
            new.update(
                assignment(&[("a", on(2))]),
                None,
                moved + Duration::from_secs(s),
                moved + Duration::from_secs(s),
            );
        }
        assert_eq!(new.admit("a", first_write), Ok(()));

        // And once the old owner reads the move, it refuses at once, naming the new owner.
        let changes = old.update(assignment(&[("a", on(2))]), None, moved, moved);
        assert_eq!(changes.moved, vec!["a".to_string()]);
        assert!(changes.mine_changed);
        let why = old.admit("a", moved).unwrap_err();
        assert!(why.contains("judged by wavegate replica 2"), "{why}");
    }

    /// A read that took 30 s (identities of unreachable clusters, a slow API server) is as old
    /// as its start for the replica that may have lost a cluster, and its handover starts at
    /// its end for the replica that gained one.
    /// Standing back changes who judges every cluster even on a replica that judges none, so
    /// answers kept with `judgedBy` are told (the waves of stamps move on it).
    #[test]
    fn standing_back_and_agreeing_again_are_changes_on_a_replica_that_judges_nothing() {
        let mut o = replica_1();
        let t0 = Instant::now();
        let others = || assignment(&[("a", on(2))]);
        assert!(!o.update(others(), None, t0, t0).held_back_changed);
        let why = Some("a rival shards by other inputs".to_string());
        let back = o.update(others(), why.clone(), t0, t0);
        assert!(back.held_back_changed && !back.mine_changed && back.moved.is_empty());
        assert!(!o.update(others(), why, t0, t0).held_back_changed);
        // Another reason: answers that quote the first must not be kept.
        let other = Some("a rival counts replicas otherwise".to_string());
        assert!(o.update(others(), other, t0, t0).held_back_changed);
        assert!(o.update(others(), None, t0, t0).held_back_changed);
    }

    #[test]
    fn a_cluster_whose_server_changed_waits_a_handover_again() {
        let mut o = replica_1();
        let h = o.rules().handover;
        let t0 = Instant::now();
        o.update(assignment(&[("a", on(1))]), None, t0, t0);
        let later = t0 + h * 3;
        o.update(assignment(&[("a", on(1))]), None, later, later);
        assert!(o.writes("a", later), "owned for three handovers");
        // Its Secret's server edited: the replica that judged that server may still write it.
        o.renew("a", later);
        assert!(!o.writes("a", later + h / 2));
        assert!(o.writes("a", later + h));
        // A cluster not this replica's is not made one.
        o.renew("b", later);
        assert!(!o.is_mine("b"));
    }

    #[test]
    fn a_slow_read_shortens_freshness_and_lengthens_the_handover() {
        let t0 = Instant::now();
        let t30 = t0 + Duration::from_secs(30);
        let mut o = replica_1();
        o.update(assignment(&[("a", on(1))]), None, t0, t30);
        assert!(o.admit("a", t30).unwrap_err().contains("computed 30s ago"));
        assert_eq!(o.next_handover(t30), Some(t30 + o.rules().handover));
    }

    #[test]
    fn a_replica_that_cannot_read_the_secrets_writes_nothing_once_its_assignment_is_stale() {
        let t0 = Instant::now();
        let mut o = replica_1();
        assert!(
            o.admit("a", t0)
                .unwrap_err()
                .contains("no shard assignment")
        );
        o.update(assignment(&[("a", on(1))]), None, t0, t0);
        let later = t0 + Duration::from_secs(60);
        let why = o.admit("a", later).unwrap_err();
        assert!(why.contains("computed 60s ago"), "{why}");
    }

    #[test]
    fn skip_reconcile_toggled_stops_and_then_restarts_the_handover() {
        let t0 = Instant::now();
        let mut o = replica_1();
        o.update(assignment(&[("a", on(1))]), None, t0, t0);
        let t1 = t0 + Duration::from_secs(10);
        o.update(assignment(&[("a", on(1))]), None, t1, t1);
        assert_eq!(o.admit("a", t1), Ok(()));
        let t2 = t1 + Duration::from_secs(1);
        let changes = o.update(assignment(&[("a", paused(1))]), None, t2, t2);
        assert!(changes.mine_changed);
        assert_eq!(o.counts(), (0, 1));
        let why = o.admit("a", t2).unwrap_err();
        assert!(
            why.contains("judged by no wavegate replica: paused"),
            "{why}"
        );
        // Resumed: a fresh handover, as if it came from another replica (one may have judged
        // it while this one did not look).
        let t3 = t2 + Duration::from_secs(1);
        o.update(assignment(&[("a", on(1))]), None, t3, t3);
        assert!(o.admit("a", t3).is_err());
        assert_eq!(o.next_handover(t3), Some(t3 + o.rules().handover));
    }

    #[test]
    fn negative_shards_and_other_replicas_clusters_are_not_mine() {
        let mut o = replica_1();
        o.update(
            assignment(&[("a", on(-1)), ("b", on(0)), ("c", on(1)), ("d", paused(0))]),
            None,
            Instant::now(),
            Instant::now(),
        );
        assert_eq!(o.owner("b"), Some(Owner::Replica { shard: 0 }));
        assert_eq!(o.owner("c"), Some(Owner::ThisReplica));
        assert!(matches!(o.owner("a"), Some(Owner::Nobody { .. })));
        assert_eq!(o.owner("e"), None);
        assert_eq!(o.counts(), (1, 2));
    }

    /// While a live replica shards by other inputs, every cluster is nobody's, with why, and
    /// agreeing again starts a fresh handover.
    #[test]
    fn a_replica_held_back_judges_nothing_and_says_why() {
        let t0 = Instant::now();
        let mut o = replica_1();
        o.update(assignment(&[("a", on(1))]), None, t0, t0);
        let t1 = t0 + Duration::from_secs(10);
        let why = "replica 3 counts 4".to_string();
        let changes = o.update(assignment(&[("a", on(1))]), Some(why), t1, t1);
        assert!(changes.mine_changed);
        assert!(o.admit("a", t1).unwrap_err().contains("replica 3 counts 4"));
        assert_eq!(o.counts(), (0, 0));
        o.update(assignment(&[("a", on(1))]), None, t1, t1);
        assert!(o.admit("a", t1).is_err());
        assert_eq!(o.next_handover(t1), Some(t1 + o.rules().handover));
    }

    /// Argo CD's `InferShard` keeps a replica numbered like the replica count (it compares with
    /// `>`): that replica judges nothing rather than a cluster another one judges.
    #[test]
    fn a_replica_numbered_past_the_last_shard_judges_nothing() {
        let mut o = Ownership::new(3, 3, Rules::for_resync(RESYNC));
        o.update(
            assignment(&[("a", on(0)), ("b", on(2))]),
            None,
            Instant::now(),
            Instant::now(),
        );
        assert_eq!(o.counts(), (0, 0));
    }
}
