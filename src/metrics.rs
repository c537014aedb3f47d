//! Prometheus metrics: what wavegate was asked, what it answered, and what it cost.

use crate::health::HealthStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    pub resource: String,
}

impl ResourceLabel {
    pub(crate) fn new(resource: &str) -> Self {
        ResourceLabel {
            resource: resource.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabels {
    /// The gate's cluster (`in-cluster` for home): same-named gates of two clusters are two
    /// series, and a removed cluster's are cleared ([`Metrics::forget_cluster_gates`]).
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    pub cluster: String,
}

/// Who wrote: `gate` (WaveGate status) or `annotate` (annotation mode).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriterLabel {
    pub writer: String,
}

/// The writers of [`Metrics::write_errors`], created at 0 so that `rate()` sees them before the
/// first failure.
pub const WRITERS: [&str; 4] = ["gate", "gate-stamp", "annotate", "notice"];

/// Whether the API server refused a write because its precondition (`resourceVersion`) no
/// longer holds: the object changed since it was judged. The writers judge again; it is an
/// outcome they expect, not a failure to write.
pub(crate) fn refused_precondition(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

/// The outcomes of [`Metrics::events`], created at 0.
pub const EVENT_OUTCOMES: [&str; 3] = ["sent", "retried", "dropped"];

pub struct Metrics {
    registry: Registry,
    pub asks: Family<ResourceLabel, Counter>,
    pub verdicts: Family<StatusLabel, Counter>,
    pub verdict_cache: Family<OutcomeLabel, Counter>,
    pub probe_seconds: Histogram,
    pub watch_restarts: Family<ResourceLabel, Counter>,
    pub watch_errors: Family<ResourceLabel, Counter>,
    /// Objects held by the watch caches, by resource (what their memory grows with).
    pub cached_objects: Family<ResourceLabel, Gauge>,
    /// Watches stopped and emptied because a cluster's objects would pass
    /// `--max-cluster-objects`, by resource.
    pub objects_over_bound: Family<ResourceLabel, Counter>,
    pub gate_status_writes: Counter,
    /// The same writes by the gates' cluster: which replica wrote for which cluster.
    pub cluster_gate_status_writes: Family<ClusterLabel, Counter>,
    /// The shard this replica runs as with `--shard-like-argocd`, -1 without: the alerts
    /// count the Lease holders per shard with it (`count_values`).
    pub shard: Gauge,
    /// Clusters this replica judges (with `--shard-like-argocd`; home counts when it is one).
    pub shard_clusters_owned: Gauge,
    /// Clusters no replica judges: paused by `skip-reconcile`, or a negative `shard`.
    pub shard_clusters_unowned: Gauge,
    /// Clusters whose shard (or pause) changed between two reads of the Secrets.
    pub shard_moves: Counter,
    /// 1 while this replica stands back because a live replica writes by another rule: one
    /// sharding by other inputs (a StatefulSet scaling, another algorithm), or the other mode
    /// (an unsharded leader beside `--shard-like-argocd` replicas).
    pub shard_disagreement: Gauge,
    /// Shards whose Lease has no live holder, as this replica last read the Leases
    /// (`--shard-like-argocd`): their clusters' gates are not written.
    pub shard_leases_unheld: Gauge,
    /// Seconds since this replica's shard assignment was computed, at each scrape; since the
    /// start until a first one is (`--shard-like-argocd`; -1 without).
    shard_assignment_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// When the read the current assignment comes from started.
    shard_assigned_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// Clusters that became this replica's, and that stopped being its, after its first read of
    /// the Secrets (a move, a pause, a replica count that disagrees).
    pub shard_clusters_gained: Counter,
    pub shard_clusters_lost: Counter,
    /// From the read of the Secrets that made a cluster this replica's to its required watches
    /// (its WaveGates) synced: how long a gained cluster is not judged yet.
    pub shard_warm_seconds: Histogram,
    /// Watches running, every cluster's (what the API servers serve this replica).
    pub watches: Gauge,
    /// Reads about another replica's cluster (a 421 here), by what became of them:
    /// `forwarded` (its answer passed through), `not_forwarded` (no live holder, a holder name
    /// that is no pod, no address, or already forwarded once), `busy` (`--max-forwards`),
    /// `peer_failed` (502), `peer_timeout` (504).
    pub forwards: Family<OutcomeLabel, Counter>,
    /// Metadata patches that mark a new gate status where Argo CD notices it (gate/stamp.rs).
    pub gate_stamp_writes: Counter,
    pub annotation_writes: Counter,
    /// Writes not sent because this replica could not show it holds the Lease
    /// ([`crate::leader::Fence`]): a few at a handover; steadily, a leader that runs its
    /// writers without holding the lease.
    pub writes_fenced: Counter,
    pub notice_writes: Counter,
    /// API requests refused before a handler answered them: `unauthorized`, `out_of_scope`
    /// (Argo CD proxy scope), `kind_not_allowed`, `overloaded`, `timeout`, `too_many_waiters`, `caller_busy`.
    pub api_refusals: Family<ReasonLabel, Counter>,
    /// Reconciles that failed (a status or annotation write refused, a cache that could not
    /// answer), by queue: `gates`, `annotations`. Each is retried with backoff.
    pub reconcile_errors: Family<QueueLabel, Counter>,
    /// 1 while this replica holds the writers' Lease (`--leader-elect`), or writes without one.
    pub leader: Gauge,
    /// 1 for each WaveGate's current status (kube-state-metrics style); deploy/monitoring's
    /// "Degraded" and "Progressing too long" alerts read it.
    pub gate_health: Family<GateLabels, Gauge>,
    /// Status or annotation patches the API server refused (the "writes failing" alert).
    pub write_errors: Family<WriterLabel, Counter>,
    /// Patches refused by their own precondition (409: the object changed since it was read),
    /// an outcome the writers expect and answer by judging again; never in `write_errors`,
    /// which pages.
    pub write_conflicts: Family<WriterLabel, Counter>,
    /// CockroachDB pod probes without a usable answer (the "probe errors" alert).
    pub probe_errors: Counter,
    /// Kubernetes Events by outcome: `sent`, `retried` (refused, tried again later), `dropped`
    /// (given up: refused for good, retries or backlog exhausted).
    pub events: Family<OutcomeLabel, Counter>,
    /// The gates with a `gate_health` series, by cluster: a prometheus-client family cannot be
    /// listed, and the series of a cluster whose controller stopped must be removed.
    gates_shown: std::sync::Mutex<
        std::collections::HashMap<String, std::collections::HashSet<(String, String)>>,
    >,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("wavegate");
        let asks = Family::<ResourceLabel, Counter>::default();
        let verdicts = Family::<StatusLabel, Counter>::default();
        let verdict_cache = Family::<OutcomeLabel, Counter>::default();
        let probe_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let watch_restarts = Family::<ResourceLabel, Counter>::default();
        let watch_errors = Family::<ResourceLabel, Counter>::default();
        let cached_objects = Family::<ResourceLabel, Gauge>::default();
        let objects_over_bound = Family::<ResourceLabel, Counter>::default();
        let gate_status_writes = Counter::default();
        let gate_stamp_writes = Counter::default();
        let annotation_writes = Counter::default();
        let writes_fenced = Counter::default();
        let notice_writes = Counter::default();
        let cluster_gate_status_writes = Family::<ClusterLabel, Counter>::default();
        let shard = Gauge::default();
        shard.set(-1);
        let shard_clusters_owned = Gauge::default();
        let shard_clusters_unowned = Gauge::default();
        let shard_moves = Counter::default();
        let shard_disagreement = Gauge::default();
        let forwards = Family::<OutcomeLabel, Counter>::default();
        let shard_clusters_gained = Counter::default();
        let shard_clusters_lost = Counter::default();
        // 0.1 s to ~7 min: a cache syncs in a second; a gained cluster's writers may wait a
        // handover of 2 × --clusters-resync + 2 s (62 s by default) before they watch.
        let shard_warm_seconds = Histogram::new(exponential_buckets(0.1, 2.0, 13));
        let watches = Gauge::default();
        registry.register(
            "shard_clusters_gained",
            "Clusters that became this replica's after its first read of the cluster Secrets \
             (--shard-like-argocd)",
            shard_clusters_gained.clone(),
        );
        registry.register(
            "shard_clusters_lost",
            "Clusters that stopped being this replica's (--shard-like-argocd)",
            shard_clusters_lost.clone(),
        );
        registry.register(
            "shard_warm_seconds",
            "From the read that made a cluster this replica's to its WaveGates' watch synced \
             (--shard-like-argocd)",
            shard_warm_seconds.clone(),
        );
        registry.register(
            "watches",
            "Watches running, over every cluster this replica judges",
            watches.clone(),
        );
        registry.register(
            "forwards",
            "Reads about a cluster another replica judges, by outcome: forwarded, \
             not_forwarded, busy, peer_failed, peer_timeout (--peer-url)",
            forwards.clone(),
        );
        registry.register(
            "shard_disagreement",
            "1 while this replica writes nothing because a live replica writes by another \
             rule: it shards by other inputs, or one is sharded and the other not",
            shard_disagreement.clone(),
        );
        let shard_leases_unheld = Gauge::default();
        registry.register(
            "shard_leases_unheld",
            "Shards whose Lease has no live holder, as this replica last read them: their \
             clusters' gates are not written (--shard-like-argocd)",
            shard_leases_unheld.clone(),
        );
        let shard_assignment_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        shard_assignment_age.set(-1.0);
        registry.register(
            "shard_assignment_age_seconds",
            "Seconds since this replica's shard assignment was computed (since its start \
             before the first); past 2 x --clusters-resync it writes nothing \
             (--shard-like-argocd; -1 without)",
            shard_assignment_age.clone(),
        );
        registry.register(
            "cluster_gate_status_writes",
            "WaveGate status patches sent to the API server, by the gates' cluster",
            cluster_gate_status_writes.clone(),
        );
        registry.register(
            "shard",
            "The shard this replica runs as (--shard-like-argocd); -1 without",
            shard.clone(),
        );
        registry.register(
            "shard_clusters_owned",
            "Clusters this replica judges (--shard-like-argocd)",
            shard_clusters_owned.clone(),
        );
        registry.register(
            "shard_clusters_unowned",
            "Clusters no replica judges: paused by skip-reconcile, or a negative shard \
             (--shard-like-argocd)",
            shard_clusters_unowned.clone(),
        );
        registry.register(
            "shard_moves",
            "Clusters whose shard or pause changed between two reads of the cluster Secrets \
             (--shard-like-argocd)",
            shard_moves.clone(),
        );
        registry.register("asks", "Health asks by resource", asks.clone());
        registry.register("verdicts", "Verdicts by status", verdicts.clone());
        registry.register(
            "verdict_cache",
            "Verdict cache lookups by outcome (hit, miss)",
            verdict_cache.clone(),
        );
        registry.register(
            "probe_duration_seconds",
            "Time to probe one CockroachDB pod",
            probe_seconds.clone(),
        );
        registry.register(
            "watch_restarts",
            "Watch (re)lists by resource",
            watch_restarts.clone(),
        );
        registry.register(
            "watch_errors",
            "Watch errors by resource",
            watch_errors.clone(),
        );
        registry.register(
            "cached_objects",
            "Objects held by the watch caches, by resource",
            cached_objects.clone(),
        );
        registry.register(
            "objects_over_bound",
            "Watches stopped because a remote cluster's objects would pass \
             --max-cluster-objects, by resource",
            objects_over_bound.clone(),
        );
        registry.register(
            "gate_status_writes",
            "WaveGate status patches sent to the API server",
            gate_status_writes.clone(),
        );
        registry.register(
            "gate_stamp_writes",
            "WaveGate metadata patches marking a new status for Argo CD's resource-update filter",
            gate_stamp_writes.clone(),
        );
        registry.register(
            "annotation_writes",
            "Annotation-mode patches sent to the API server",
            annotation_writes.clone(),
        );
        registry.register(
            "writes_fenced",
            "Writes not sent: this replica could not show it holds the Lease (--leader-elect)",
            writes_fenced.clone(),
        );
        registry.register(
            "notice_writes",
            "Argo CD notice annotation patches on Applications sent to the API server (--notices)",
            notice_writes.clone(),
        );
        let api_refusals = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "api_refusals",
            "API requests refused by reason (unauthorized, out_of_scope, kind_not_allowed, \
             overloaded, timeout, too_many_waiters, caller_busy)",
            api_refusals.clone(),
        );
        let reconcile_errors = Family::<QueueLabel, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles (status or annotation writes, unreadable objects) by queue",
            reconcile_errors.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica runs the writers (holds the Lease with --leader-elect)",
            leader.clone(),
        );
        let gate_health = Family::<GateLabels, Gauge>::default();
        registry.register(
            "gate_health",
            "1 for each WaveGate's current status (labels cluster, namespace, name, status)",
            gate_health.clone(),
        );
        let write_errors = Family::<WriterLabel, Counter>::default();
        for writer in WRITERS {
            let _ = write_errors.get_or_create(&WriterLabel {
                writer: writer.to_string(),
            });
        }
        registry.register(
            "write_errors",
            "WaveGate status (writer=gate) and annotation (writer=annotate) patches that failed",
            write_errors.clone(),
        );
        let write_conflicts = Family::<WriterLabel, Counter>::default();
        for writer in WRITERS {
            let _ = write_conflicts.get_or_create(&WriterLabel {
                writer: writer.to_string(),
            });
        }
        registry.register(
            "write_conflicts",
            "Patches refused by their resourceVersion precondition (409, the object changed \
             since it was judged; judged again), by writer",
            write_conflicts.clone(),
        );
        let probe_errors = Counter::default();
        registry.register(
            "probe_errors",
            "CockroachDB pod probes without a usable answer (refused, timed out, garbage)",
            probe_errors.clone(),
        );
        let events = Family::<OutcomeLabel, Counter>::default();
        for outcome in EVENT_OUTCOMES {
            let _ = events.get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            });
        }
        registry.register(
            "events",
            "Kubernetes Events by outcome (sent, retried: refused and tried again, dropped: \
             given up)",
            events.clone(),
        );
        Metrics {
            registry,
            events,
            leader,
            reconcile_errors,
            gate_health,
            write_errors,
            write_conflicts,
            probe_errors,
            asks,
            verdicts,
            verdict_cache,
            probe_seconds,
            watch_restarts,
            watch_errors,
            cached_objects,
            objects_over_bound,
            gate_status_writes,
            cluster_gate_status_writes,
            shard,
            shard_clusters_owned,
            shard_clusters_unowned,
            shard_moves,
            shard_disagreement,
            shard_leases_unheld,
            shard_assignment_age,
            shard_assigned_at: Default::default(),
            shard_clusters_gained,
            shard_clusters_lost,
            shard_warm_seconds,
            watches,
            forwards,
            gate_stamp_writes,
            annotation_writes,
            writes_fenced,
            notice_writes,
            api_refusals,
            gates_shown: Default::default(),
        }
    }
}

impl Metrics {
    pub(crate) fn record_verdict(&self, status: HealthStatus) {
        self.verdicts
            .get_or_create(&StatusLabel {
                status: status.as_str().to_string(),
            })
            .inc();
    }

    /// [`Metrics::record_verdict`] and [`Metrics::record_cache`] of `n` verdicts at once.
    pub(crate) fn record_verdicts(&self, status: HealthStatus, hit: bool, n: u64) {
        self.verdicts
            .get_or_create(&StatusLabel {
                status: status.as_str().to_string(),
            })
            .inc_by(n);
        let outcome = if hit { "hit" } else { "miss" };
        self.verdict_cache
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc_by(n);
    }

    pub(crate) fn record_cache(&self, hit: bool) {
        let outcome = if hit { "hit" } else { "miss" };
        self.verdict_cache
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub(crate) fn record_refusal(&self, reason: &str) {
        self.api_refusals
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// One read about another replica's cluster, and what became of it (see `forwards`).
    pub(crate) fn record_forward(&self, outcome: &str) {
        self.forwards
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub(crate) fn record_reconcile_error(&self, queue: &str) {
        self.reconcile_errors
            .get_or_create(&QueueLabel {
                queue: queue.to_string(),
            })
            .inc();
    }

    /// A patch by `writer` (one of [`WRITERS`]) was refused with `e`: a refused precondition
    /// (409) is counted apart from the errors that page.
    pub(crate) fn record_write_failure(&self, writer: &str, e: &kube::Error) {
        if refused_precondition(e) {
            self.write_conflicts
                .get_or_create(&WriterLabel {
                    writer: writer.to_string(),
                })
                .inc();
        } else {
            self.record_write_error(writer);
        }
    }

    /// A patch by `writer` (one of [`WRITERS`]) failed.
    pub fn record_write_error(&self, writer: &str) {
        self.write_errors
            .get_or_create(&WriterLabel {
                writer: writer.to_string(),
            })
            .inc();
    }

    /// One Event `outcome` (one of [`EVENT_OUTCOMES`]).
    pub(crate) fn record_event(&self, outcome: &str) {
        self.events
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// How many Events had `outcome` so far.
    pub fn events_with(&self, outcome: &str) -> u64 {
        self.events
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .get()
    }

    /// Gate `namespace/name` of `cluster` is now `status` (`None`: the gate is gone). Labelled
    /// by cluster: the same namespace and name can be a gate in several clusters.
    pub fn set_gate_health(
        &self,
        cluster: &str,
        namespace: &str,
        name: &str,
        status: Option<HealthStatus>,
    ) {
        for s in HealthStatus::ALL {
            let labels = GateLabels {
                cluster: cluster.to_string(),
                namespace: namespace.to_string(),
                name: name.to_string(),
                status: s.as_str().to_string(),
            };
            if Some(s) == status {
                self.gate_health.get_or_create(&labels).set(1);
            } else {
                self.gate_health.remove(&labels);
            }
        }
        let mut shown = crate::locks::lock(&self.gates_shown);
        let gates = shown.entry(cluster.to_string()).or_default();
        let key = (namespace.to_string(), name.to_string());
        match status {
            Some(_) => gates.insert(key),
            None => gates.remove(&key),
        };
    }

    /// Every `gate_health` series of `cluster` goes (its controller stopped: the cluster was
    /// removed or rebuilt), so no alert fires for a gate no longer judged.
    pub fn forget_cluster_gates(&self, cluster: &str) {
        let gates = crate::locks::lock(&self.gates_shown)
            .remove(cluster)
            .unwrap_or_default();
        for (namespace, name) in gates {
            self.set_gate_health(cluster, &namespace, &name, None);
        }
    }

    /// The read the shard assignment now in use comes from started at `at` (or, before the
    /// first, the replica started then).
    pub(crate) fn set_shard_assigned_at(&self, at: std::time::Instant) {
        *crate::locks::lock(&self.shard_assigned_at) = Some(at);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        // The assignment's age is the scrape's: a replica whose reads of the Secrets hang
        // still shows it growing.
        if let Some(at) = *crate::locks::lock(&self.shard_assigned_at) {
            self.shard_assignment_age.set(at.elapsed().as_secs_f64());
        }
        let mut out = String::new();
        match prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            Ok(()) => out,
            Err(e) => format!("# encoding failed: {e}\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica whose reads of the Secrets hang shows its assignment aging at every scrape,
    /// not the age it had at its last read; an unsharded one shows -1.
    #[test]
    fn the_shard_assignment_ages_at_each_scrape() {
        let m = Metrics::default();
        assert!(
            m.encode()
                .contains("\nwavegate_shard_assignment_age_seconds -1.0\n"),
            "{}",
            m.encode()
        );
        let read = std::time::Instant::now() - std::time::Duration::from_secs(90);
        m.set_shard_assigned_at(read);
        let text = m.encode();
        let age: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("wavegate_shard_assignment_age_seconds "))
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!((90.0..100.0).contains(&age), "{text}");
    }

    #[test]
    fn a_gate_shows_only_its_current_status_and_disappears_when_gone() {
        let m = Metrics::default();
        m.set_gate_health(
            "in-cluster",
            "cicd",
            "db-ready",
            Some(HealthStatus::Progressing),
        );
        m.set_gate_health(
            "in-cluster",
            "cicd",
            "db-ready",
            Some(HealthStatus::Degraded),
        );
        let text = m.encode();
        assert!(
            text.contains(
                r#"wavegate_gate_health{cluster="in-cluster",namespace="cicd",name="db-ready",status="Degraded"} 1"#
            ),
            "{text}"
        );
        assert!(!text.contains(r#"status="Progressing""#), "{text}");
        m.set_gate_health("in-cluster", "cicd", "db-ready", None);
        assert!(!m.encode().contains("db-ready"));
    }

    #[test]
    fn same_named_gates_of_two_clusters_are_two_series_and_a_stopped_clusters_go() {
        let m = Metrics::default();
        m.set_gate_health("in-cluster", "cicd", "db", Some(HealthStatus::Healthy));
        m.set_gate_health("prod", "cicd", "db", Some(HealthStatus::Degraded));
        m.set_gate_health("prod", "cicd", "web", Some(HealthStatus::Progressing));
        let text = m.encode();
        assert!(
            text.contains(
                r#"{cluster="in-cluster",namespace="cicd",name="db",status="Healthy"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"{cluster="prod",namespace="cicd",name="db",status="Degraded"} 1"#),
            "{text}"
        );
        m.forget_cluster_gates("prod");
        let text = m.encode();
        assert!(!text.contains(r#"cluster="prod""#), "{text}");
        assert!(
            text.contains(r#"cluster="in-cluster",namespace="cicd",name="db""#),
            "{text}"
        );
    }

    #[test]
    fn write_errors_exist_at_zero_before_the_first_failure() {
        let text = Metrics::default().encode();
        assert!(
            text.contains(r#"wavegate_write_errors_total{writer="gate"} 0"#),
            "{text}"
        );
        assert!(text.contains(r#"wavegate_write_errors_total{writer="annotate"} 0"#));
    }
}
