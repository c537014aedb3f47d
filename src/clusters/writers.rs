//! The writers of every cluster, run and supervised here: a gate controller per cluster (home,
//! and each remote cluster proven not to be home), started and stopped as the set changes, and
//! annotation mode.

use super::{Cluster, Clusters};
use crate::gate::controller::{DeploysHere, Settings};
use crate::metrics::Metrics;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{AbortHandle, JoinSet};

/// What the writers do besides judging gates (`wavegate serve` flags).
#[derive(Clone)]
pub struct Writers {
    pub gates: Settings,
    /// Annotation mode (`--annotate`): its resync and how long a written verdict counts.
    pub annotate: Option<(Duration, Option<Duration>)>,
    /// Notices (`--notices`) on the Applications at home.
    pub notices: Option<crate::notice::Settings>,
}

impl Clusters {
    /// Run the writers of every cluster until one of them ends on its own (none does while the
    /// process runs, unless it panicked): the caller then decides what that means (`serve`
    /// exits). Dropping this future stops them all.
    pub async fn run_writers(self: Arc<Self>, metrics: Arc<Metrics>, writers: Writers) {
        let mut tasks = JoinSet::new();
        // With shards, every write for a cluster also asks whether the cluster is still this
        // replica's (see `ownership`); the writers of a cluster that moved away are stopped
        // too, but a writer may be between its decision and its write.
        let fence_of = |cluster: &str| match &self.sharding {
            Some(sharding) => writers.gates.fence.guarded(sharding.guard(cluster)),
            None => writers.gates.fence.clone(),
        };
        // Annotation mode runs at home only. Argo CD's Lua reads the annotation on the object
        // in its destination, so it could run anywhere; but a remote cluster is given a
        // read-only role (deploy/remote-cluster, plus WaveGate status), while annotating needs
        // `patch` on Services, Databases and CrdbClusters and a watch of every one of them: an
        // installer who wants that in a destination grants it there, and that is a decision
        // the opt-in flag alone should not make for every cluster Argo CD deploys to.
        // With shards, annotation mode and notices run with home's gate controller, on the
        // replica that judges home.
        let home_writers = |tasks: &mut JoinSet<()>| {
            let mut started = Vec::new();
            if let Some((resync, validity)) = writers.annotate {
                started.push(tasks.spawn(crate::annotate::run_with(
                    self.home.evaluator.clone(),
                    metrics.clone(),
                    resync,
                    validity,
                    fence_of(&self.home.name),
                )));
            }
            if let Some(settings) = &writers.notices {
                let settings = crate::notice::Settings {
                    fence: match &self.sharding {
                        Some(sharding) => settings.fence.guarded(sharding.guard(&self.home.name)),
                        None => settings.fence.clone(),
                    },
                    ..settings.clone()
                };
                let home = self.home.evaluator.clone();
                started.push(tasks.spawn(crate::notice::run(home, metrics.clone(), settings)));
            }
            started
        };
        let mut at_home: Vec<AbortHandle> = Vec::new();
        if self.sharding.is_none() {
            at_home = home_writers(&mut tasks);
        }
        let mut changed = self.subscribe();
        let mut running: HashMap<String, (Arc<Cluster>, AbortHandle)> = HashMap::new();
        loop {
            changed.borrow_and_update();
            let now = self.writable();
            if self.sharding.is_some() {
                let home_here = now.contains_key(&self.home.name);
                if !home_here {
                    at_home.drain(..).for_each(|t| t.abort());
                } else if at_home.is_empty() {
                    at_home = home_writers(&mut tasks);
                }
            }
            // Removed, or rebuilt from a changed source: that cluster's controller stops.
            running.retain(|name, (cluster, task)| {
                let same = now.get(name).is_some_and(|c| Arc::ptr_eq(c, cluster));
                if !same {
                    task.abort();
                    // No alert for a gate no longer judged (a rebuilt cluster's controller
                    // renews its own at once).
                    metrics.forget_cluster_gates(name);
                }
                same
            });
            for (name, cluster) in now {
                if let Entry::Vacant(slot) = running.entry(name) {
                    // An Application deploys here when the cluster set resolves its destination
                    // to this very cluster (a renamed home Secret and home's other addresses
                    // included), as Argo CD resolves it.
                    let (clusters, here) = (Arc::downgrade(&self), cluster.clone());
                    let deploys_here: DeploysHere = Arc::new(move |app| {
                        clusters.upgrade().is_some_and(|all| {
                            all.destination_of(app)
                                .is_ok_and(|d| Arc::ptr_eq(&d, &here))
                        })
                    });
                    let settings = crate::gate::controller::Settings {
                        fence: fence_of(slot.key()),
                        ..writers.gates.clone()
                    };
                    let run = cluster.gate_controller_in(
                        &self.home,
                        metrics.clone(),
                        settings,
                        deploys_here,
                    );
                    slot.insert((cluster, tasks.spawn(run)));
                }
            }
            // A cluster gained waits out its handover; then its controller starts.
            let handover = self.sharding.as_ref().and_then(|s| s.next_handover());
            let handover_ends = async {
                match handover {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                () = handover_ends => {}
                Some(done) = tasks.join_next() => {
                    if !matches!(&done, Err(e) if e.is_cancelled()) {
                        tracing::error!(outcome = ?done.err(), "a writer stopped");
                        return;
                    }
                }
            }
        }
    }

    /// The clusters whose WaveGates get a writer, by name: home, and each remote cluster proven
    /// not to be home (one that might be home by another address would be a second writer of
    /// home's WaveGates, see [`Clusters::proven_elsewhere`]).
    ///
    /// One writer per real cluster: two Secrets or kubeconfigs may reach one cluster by two
    /// addresses (a load balancer and a direct URL) or with two credentials (project-scoped
    /// clusters). Two controllers there would judge the same WaveGates and refuse each other's
    /// preconditioned writes, each refusal counted as a write error. Remotes are grouped by
    /// identity (the `kube-system` namespace's UID, [`super::identity`]) and the first name in
    /// each group writes: deterministic, so every replica and every restart picks the same one.
    /// The others still serve reads from their own caches.
    ///
    /// With shards, the group's first name is chosen among the clusters every replica knows
    /// (its own and those judged elsewhere), so that two replicas never both write one cluster
    /// reached by two Secrets; and a cluster writes here only while it is this replica's and
    /// its handover is over (home included).
    pub(super) fn writable(&self) -> HashMap<String, Arc<Cluster>> {
        let remotes = self.remotes();
        let elsewhere = self.elsewhere();
        // Every name with a known identity, ordered by name: the first of an identity writes.
        let mut named: Vec<(&String, Option<&Arc<Cluster>>, &str)> = Vec::new();
        for (name, cluster) in remotes.iter() {
            if !self.proven_elsewhere(cluster) {
                continue;
            }
            if let Some(id) = cluster.identity.get() {
                named.push((name, Some(cluster), id.as_str()));
            }
        }
        for (name, e) in elsewhere.iter() {
            if let Some(id) = &e.identity {
                named.push((name, None, id.as_str()));
            }
        }
        named.sort_by(|a, b| a.0.cmp(b.0));
        let mut writer_of: HashMap<&str, (&String, Option<&Arc<Cluster>>)> = HashMap::new();
        for (name, cluster, id) in named {
            writer_of.entry(id).or_insert((name, cluster));
        }
        let mut all: HashMap<String, Arc<Cluster>> = writer_of
            .into_values()
            .filter_map(|(name, c)| Some((name.clone(), c?.clone())))
            .collect();
        all.insert(self.home.name.clone(), self.home.clone());
        if let Some(sharding) = &self.sharding {
            all.retain(|name, _| sharding.writes(name));
        }
        all
    }
}
