//! Several replicas, one writer. Every replica watches and serves reads from its own caches;
//! only the holder of a `coordination.k8s.io` Lease runs the writers (the gate controller and
//! annotation mode), so a verdict is written once, not once per replica. The protocol (acquire,
//! renew before expiry, take over an expired lease, tolerate clock skew) is kube-lease-manager's.
//!
//! A replica stops its writers as soon as it cannot show that it holds the lease: when the
//! lease moves, and also when a renewal fails (the API server unreachable, the Lease deleted),
//! since by the time it could renew again another replica may have taken over. Renewals use a
//! client whose requests time out before the lease would expire, so a hung request is a failed
//! renewal too. Takeover after a leader dies (SIGKILL, a lost node) takes at most the lease
//! duration plus about a second. A leader that stops cleanly (SIGTERM) stops its writers first,
//! so nothing is written during termination, and releases the lease; the others still find it
//! free only when they look again, at the expiry they last saw (kube-lease-manager sleeps until
//! then), so takeover takes as long as after a crash.
//!
//! Stopping the writers is not enough on its own: a replica frozen (SIGSTOP, a stalled node)
//! between judging and writing wakes with its write ready to go, and which runs first, the
//! renewal that finds the lease lost or that write, is up to the scheduler. If the new leader
//! agreed with what the object already showed, it wrote nothing, so the late write's
//! resourceVersion precondition still holds and a stale verdict would stand until the next
//! reconcile. So every write first asks the [`Fence`], which reads the Lease.
//!
//! An unsharded leader holds `<lease>`; the replicas of `--shard-like-argocd` (or of
//! `--shards`, wavegate's own ring) each hold `<lease>-shard-<N>`. Those are different Leases, so neither election keeps the other mode
//! out, and replicas that shard by different inputs (replica count, algorithm, …) compute
//! different owners for one cluster and hold different shard Leases too. Every write therefore
//! also finds no live [`Rivals`] in the same read: of two replicas in different modes, each
//! holds its own Lease before it looks at the other's, so when both start together at least
//! one of them sees the other and stands back.

use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

/// Where the Lease lives and who this replica is.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub lease: String,
    /// Unique per replica: the pod name in a Deployment.
    pub identity: String,
    /// How long a lease the holder stopped renewing keeps the others out.
    pub duration: Duration,
    /// The Leases whose live holder keeps this replica from writing.
    pub rivals: Rivals,
}

/// The Leases of replicas that would write the same clusters by another rule: the other mode's,
/// and, with shards, those of replicas that shard by other inputs. Judged by their holders'
/// identities and renewals, from one list of the namespace's Leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rivals {
    /// The unsharded Lease (`--leader-elect-lease`); the shards' are `<lease>-shard-<N>`.
    lease: String,
    /// With shards: how every shard Lease holder's identity ends when it shards by this
    /// replica's inputs (`crate::clusters::ShardSettings::identity_suffix`).
    sharded: Option<String>,
}

impl Rivals {
    /// Of an unsharded leader of `lease`: any live holder of a shard Lease.
    pub fn of_unsharded(lease: &str) -> Rivals {
        Rivals {
            lease: lease.to_string(),
            sharded: None,
        }
    }

    /// Of a shard's replica (`lease` is the unsharded one): a live holder of the unsharded
    /// Lease, or of a shard Lease whose identity does not end with `suffix`.
    pub fn of_sharded(lease: &str, suffix: &str) -> Rivals {
        Rivals {
            lease: lease.to_string(),
            sharded: Some(suffix.to_string()),
        }
    }

    /// The name of shard `shard`'s Lease.
    pub fn shard_lease(&self, shard: i64) -> String {
        format!("{}-shard-{shard}", self.lease)
    }

    /// The shard whose Lease `name` is, if it is one.
    fn shard_of(&self, name: &str) -> Option<i64> {
        name.strip_prefix(&self.lease)?
            .strip_prefix("-shard-")?
            .parse()
            .ok()
    }

    /// Ok when no Lease of `leases` has a live rival holder at `now`; else why this replica
    /// must not write.
    pub fn check(&self, leases: &[Lease], now: Timestamp) -> Result<(), String> {
        for lease in leases {
            let name = lease.metadata.name.as_deref().unwrap_or_default();
            let Some(holder) = live_holder(lease, now) else {
                continue;
            };
            let shard = self.shard_of(name);
            match (&self.sharded, shard) {
                (Some(_), None) if name == self.lease => {
                    return Err(format!(
                        "the unsharded Lease {name} is held by {holder}: an unsharded wavegate \
                         leader writes every cluster's gates, so no shard's replica writes \
                         beside it"
                    ));
                }
                (None, Some(_)) => {
                    return Err(format!(
                        "the shard Lease {name} is held by {holder}: sharded replicas \
                         (--shard-like-argocd or --shards) write their shards' clusters, so the \
                         unsharded leader does not write beside them"
                    ));
                }
                (Some(suffix), Some(_)) if !holder.ends_with(suffix.as_str()) => {
                    return Err(format!(
                        "the shard Lease {name} is held by {holder}, which shards by other \
                         inputs than this replica (whose holders end with {suffix}): the two \
                         may compute different owners for one cluster"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The shards of `0..replicas` whose Lease has no live holder in `leases` at `now`.
    /// The live holder of every shard Lease of `leases` at `now`, by shard (whatever the
    /// holder's digest: where a read about one of its clusters is forwarded).
    pub fn shard_holders(&self, leases: &[Lease], now: Timestamp) -> BTreeMap<i64, String> {
        leases
            .iter()
            .filter_map(|lease| {
                let shard = self.shard_of(lease.metadata.name.as_deref()?)?;
                Some((shard, live_holder(lease, now)?.to_string()))
            })
            .collect()
    }

    pub fn unheld_shards(&self, leases: &[Lease], replicas: u32, now: Timestamp) -> Vec<i64> {
        (0..i64::from(replicas))
            .filter(|shard| {
                let name = self.shard_lease(*shard);
                !leases.iter().any(|l| {
                    l.metadata.name.as_deref() == Some(name.as_str())
                        && live_holder(l, now).is_some()
                })
            })
            .collect()
    }
}

/// The holder of `lease` if it renewed it within its duration before `now`.
pub(crate) fn live_holder(lease: &Lease, now: Timestamp) -> Option<&str> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let seconds = spec.lease_duration_seconds?;
    let expires = renewed
        .checked_add(SignedDuration::from_secs(seconds.into()))
        .ok()?;
    (expires > now).then_some(holder)
}

/// The holder renews this long before its lease would expire: a node's clock may be this far
/// off before two replicas could both believe they hold it.
const RENEW_BEFORE_EXPIRY: Duration = Duration::from_secs(3);
/// Every request of the election gives up after this, well inside [`RENEW_BEFORE_EXPIRY`], so
/// a renewal that hangs fails (and the writers stop) before the lease can expire.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// After the election itself fails (the API server unreachable, RBAC), try again after this.
const RETRY: Duration = Duration::from_secs(2);

/// Run the writers `start` spawns while this replica holds the lease, and stop them as soon as
/// it does not or cannot tell. `client` should time out requests within [`REQUEST_TIMEOUT`].
/// Returns once `shutdown` is cancelled, after stopping the writers and releasing the lease.
pub async fn lead<F>(
    client: Client,
    election: Election,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    start: F,
) where
    F: Fn() -> Vec<AbortHandle>,
{
    let secs = |d: Duration| d.as_secs().max(1);
    let grace = secs(RENEW_BEFORE_EXPIRY).min(secs(election.duration).saturating_sub(1).max(1));
    let mut writers: Vec<AbortHandle> = Vec::new();
    loop {
        let manager = LeaseManagerBuilder::new(client.clone(), &election.lease)
            .with_namespace(&election.namespace)
            .with_identity(&election.identity)
            .with_duration(secs(election.duration))
            .with_grace(grace)
            .with_field_manager(format!("wavegate-leader-{}", election.identity))
            .build()
            .await;
        let manager = match manager {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, lease = %election.lease, "cannot use the Lease; retrying");
                tokio::select! {
                    () = tokio::time::sleep(RETRY) => continue,
                    () = shutdown.cancelled() => return,
                }
            }
        };
        // `changed` returns when this replica gains or loses the lease, and fails when it
        // cannot renew or read it: then nobody here may write until a new manager holds it.
        loop {
            let changed = tokio::select! {
                changed = manager.changed() => changed,
                () = shutdown.cancelled() => {
                    stop(&mut writers, &metrics, "shutting down");
                    match manager.release().await {
                        Ok(()) => tracing::info!(lease = %election.lease, "lease released"),
                        Err(e) => tracing::warn!(error = %e, "cannot release the lease; it expires"),
                    }
                    return;
                }
            };
            match changed {
                Ok(true) if writers.is_empty() => {
                    tracing::info!(identity = %election.identity, lease = %election.lease, "leading: starting the writers");
                    writers = start();
                    metrics.leader.set(1);
                }
                Ok(true) => {}
                Ok(false) => {
                    stop(&mut writers, &metrics, "lost the lease");
                }
                Err(e) => {
                    stop(
                        &mut writers,
                        &metrics,
                        &format!("cannot renew the lease: {e}"),
                    );
                    break;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RETRY) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Asked right before every write: does this replica still hold the lease, with time to spare
/// for the write to arrive? Without an election (one replica) it always does. With shards, a
/// writer's fence also asks whether its cluster is still this replica's ([`Fence::guarded`]).
#[derive(Clone, Default)]
pub struct Fence {
    lease: Option<Arc<LeaseFence>>,
    guard: Option<Guard>,
}

/// A further condition of a write, answered without I/O: `Err` says why it may not be sent.
pub type Guard = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.lease {
            None => f.write_str("Fence(no election")?,
            Some(l) => write!(f, "Fence(lease {} as {}", l.lease, l.identity)?,
        }
        match &self.guard {
            None => f.write_str(")"),
            Some(_) => f.write_str(", guarded)"),
        }
    }
}

struct LeaseFence {
    metrics: Arc<Metrics>,
    leases: Api<Lease>,
    lease: String,
    identity: String,
    /// When set, the Lease is read with the others of its namespace (one list instead of one
    /// get), and a live rival stops the write.
    rivals: Option<Rivals>,
}

/// Why a write was not sent: this replica is not (or cannot show it is) the leader.
#[derive(Debug, Error)]
pub enum Fenced {
    #[error("not sent: this replica ({identity}) does not hold the lease {lease}: {why}")]
    NotHolder {
        identity: String,
        lease: String,
        why: String,
    },
    #[error("not sent: cannot read the lease {lease}: {source}")]
    Unreadable { lease: String, source: kube::Error },
    #[error("not sent: {0}")]
    NotOwned(String),
    /// Another mode's replica, or one sharding by other inputs, holds a Lease: writing would
    /// make two writers of one cluster.
    #[error(
        "not sent: {0}; every replica of one install must run with the same sharding settings, \
         sharded or not"
    )]
    Rival(String),
}

impl Fence {
    /// The fence of `election`'s Lease; `client` should time out within [`REQUEST_TIMEOUT`].
    /// Each write it stops counts in [`Metrics::writes_fenced`].
    pub fn of(client: Client, election: &Election, metrics: Arc<Metrics>) -> Fence {
        Fence {
            lease: Some(Arc::new(LeaseFence {
                metrics,
                leases: Api::namespaced(client, &election.namespace),
                lease: election.lease.clone(),
                identity: election.identity.clone(),
                rivals: Some(election.rivals.clone()),
            })),
            guard: None,
        }
    }

    /// This fence, and `guard` asked before the lease (it costs no request) and again after
    /// its answer. A write it stops
    /// counts in [`Metrics::writes_fenced`] like one the lease stops.
    pub fn guarded(&self, guard: Guard) -> Fence {
        Fence {
            lease: self.lease.clone(),
            guard: Some(guard),
        }
    }

    /// Ok when the write about to be sent may be: one GET of the Lease per write (writes are
    /// rare: a verdict that changed). What remains open is a freeze between this answer and the
    /// request leaving, and a request the network holds for longer than the lease has left.
    pub async fn admit(&self) -> Result<(), Fenced> {
        self.guarded_now()?;
        let Some(fence) = &self.lease else {
            return Ok(());
        };
        let held = match &fence.rivals {
            None => match fence.leases.get(&fence.lease).await {
                // Read after the answer came: a freeze during the GET counts against the lease.
                Ok(lease) => fence.holds(&lease, Timestamp::now()),
                Err(source) => Err(Fenced::Unreadable {
                    lease: fence.lease.clone(),
                    source,
                }),
            },
            Some(rivals) => match fence.leases.list(&ListParams::default()).await {
                Ok(list) => {
                    let now = Timestamp::now();
                    let own = list
                        .items
                        .iter()
                        .find(|l| l.metadata.name.as_deref() == Some(fence.lease.as_str()));
                    match own {
                        None => Err(fence.not_holder("the Lease does not exist".into())),
                        Some(lease) => fence.holds(lease, now),
                    }
                    .and_then(|()| {
                        let rival = rivals.check(&list.items, now);
                        let standing_back = rival.is_err();
                        let was = fence.metrics.shard_disagreement.set(i64::from(standing_back));
                        if let Err(why) = &rival
                            && was == 0
                        {
                            tracing::warn!(reason = %why, "writing nothing while another wavegate replica writes by another rule");
                        }
                        rival.map_err(Fenced::Rival)
                    })
                }
                Err(source) => Err(Fenced::Unreadable {
                    lease: fence.lease.clone(),
                    source,
                }),
            },
        };
        if held.is_err() {
            fence.metrics.writes_fenced.inc();
        }
        held?;
        // Asked again once the Lease's answer is back: the GET may have taken up to its
        // timeout, which the handover of a moved cluster counts only once, for the write.
        self.guarded_now()
    }

    /// The guard's answer now (none: admitted).
    fn guarded_now(&self) -> Result<(), Fenced> {
        match &self.guard {
            Some(guard) => guard().map_err(|why| {
                if let Some(fence) = &self.lease {
                    fence.metrics.writes_fenced.inc();
                }
                Fenced::NotOwned(why)
            }),
            None => Ok(()),
        }
    }
}

impl LeaseFence {
    fn not_holder(&self, why: String) -> Fenced {
        Fenced::NotHolder {
            identity: self.identity.clone(),
            lease: self.lease.clone(),
            why,
        }
    }

    fn holds(&self, lease: &Lease, now: Timestamp) -> Result<(), Fenced> {
        holds(lease, &self.identity, now).map_err(|why| self.not_holder(why))
    }
}

/// Whether `lease` is `identity`'s at `now` for at least [`REQUEST_TIMEOUT`] more, so a write
/// sent now arrives before anyone else may take over. The renewTime compared with `now` was
/// written by this replica's own clock (kube-lease-manager renews with `Timestamp::now()`), and
/// a frozen replica's clock moved on while it was frozen, so it finds the lease run out even
/// when nobody has taken it yet. Another replica takes over by *its* clock: one running ahead
/// by more than the 2 s kept here could take over while a late write is still admitted (the
/// election itself tolerates [`RENEW_BEFORE_EXPIRY`]).
pub fn holds(lease: &Lease, identity: &str, now: Timestamp) -> Result<(), String> {
    let spec = lease.spec.as_ref().ok_or("the Lease has no spec")?;
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == identity => {}
        Some(holder) => return Err(format!("{holder} holds it")),
        None => return Err("nobody holds it".into()),
    }
    let renewed = spec
        .renew_time
        .as_ref()
        .ok_or("it has never been renewed")?
        .0;
    let seconds = spec.lease_duration_seconds.ok_or("it has no duration")?;
    let expires = renewed
        .checked_add(SignedDuration::from_secs(seconds.into()))
        .map_err(|_| format!("renewed at {renewed} for {seconds}s ends past any time"))?;
    let left = expires.duration_since(now);
    let needed = SignedDuration::try_from(REQUEST_TIMEOUT).unwrap_or(SignedDuration::MAX);
    if left < needed {
        return Err(format!(
            "it runs out at {expires}, {}s from now, too soon for a write to arrive",
            left.as_secs()
        ));
    }
    Ok(())
}

fn stop(writers: &mut Vec<AbortHandle>, metrics: &Metrics, why: &str) {
    if !writers.is_empty() {
        tracing::warn!(reason = why, "stopping the writers");
    }
    for w in writers.drain(..) {
        w.abort();
    }
    metrics.leader.set(0);
    // What this replica last wrote is no longer its to report: the leader's `/metrics` say
    // what the gates are now (the alerts take the max over replicas).
    metrics.gate_health.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed: Option<Timestamp>, seconds: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: renewed.map(MicroTime),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn the_holder_with_time_left_may_write() {
        assert_eq!(
            holds(&lease(Some("a"), Some(at(0)), 15), "a", at(5)),
            Ok(())
        );
        // Exactly the time a write may take is still enough.
        assert_eq!(
            holds(&lease(Some("a"), Some(at(0)), 15), "a", at(13)),
            Ok(())
        );
    }

    /// The frozen ex-leader: another replica took the lease while it was frozen.
    #[test]
    fn a_replica_the_lease_moved_away_from_may_not() {
        let why = holds(&lease(Some("b"), Some(at(20)), 15), "a", at(21)).unwrap_err();
        assert!(why.contains("b holds it"), "{why}");
        assert!(holds(&lease(None, Some(at(20)), 15), "a", at(21)).is_err());
    }

    /// Frozen past its lease, nobody has taken it yet: still no write.
    #[test]
    fn a_holder_whose_lease_ran_out_or_is_about_to_may_not() {
        for now in [at(14), at(15), at(16), at(600)] {
            let why = holds(&lease(Some("a"), Some(at(0)), 15), "a", now).unwrap_err();
            assert!(why.contains("too soon"), "{now}: {why}");
        }
    }

    #[test]
    fn a_lease_without_renewal_duration_or_spec_admits_nobody() {
        assert!(holds(&lease(Some("a"), None, 15), "a", at(0)).is_err());
        let mut no_duration = lease(Some("a"), Some(at(0)), 15);
        no_duration.spec.as_mut().unwrap().lease_duration_seconds = None;
        assert!(holds(&no_duration, "a", at(0)).is_err());
        assert!(holds(&Lease::default(), "a", at(0)).is_err());
    }

    #[tokio::test]
    async fn without_an_election_every_write_is_admitted() {
        assert!(Fence::default().admit().await.is_ok());
    }

    /// A shard's writer whose cluster moved away is stopped by its guard before any request.
    #[tokio::test]
    async fn a_guard_that_refuses_stops_the_write() {
        let fence = Fence::default().guarded(Arc::new(|| Err("judged by replica 2".into())));
        let why = fence.admit().await.unwrap_err().to_string();
        assert_eq!(why, "not sent: judged by replica 2");
        let open = Fence::default().guarded(Arc::new(|| Ok(())));
        assert!(open.admit().await.is_ok());
    }

    /// A fence of `lease` for `identity`, whose API answers every request with `leases`.
    fn fence_listing(
        leases: Vec<Lease>,
        (lease, identity): (&str, &str),
        rivals: Rivals,
    ) -> (Fence, Arc<Metrics>) {
        let list = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
            "metadata": {}, "items": leases,
        });
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            let body = serde_json::to_vec(&list).unwrap_or_default();
            async move {
                http::Response::builder()
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body))
            }
        });
        let metrics = Arc::new(Metrics::default());
        let fence = Fence {
            lease: Some(Arc::new(LeaseFence {
                metrics: metrics.clone(),
                leases: Api::namespaced(kube::Client::new(svc, "wavegate"), "wavegate"),
                lease: lease.into(),
                identity: identity.into(),
                rivals: Some(rivals),
            })),
            guard: None,
        };
        (fence, metrics)
    }

    fn named(name: &str, holder: &str, renewed: Timestamp) -> Lease {
        let mut l = lease(Some(holder), Some(renewed), 15);
        l.metadata.name = Some(name.into());
        l
    }

    /// An unsharded Deployment left running beside the shards' StatefulSet: each holds its own
    /// Lease, and neither writes while the other's is live.
    #[tokio::test]
    async fn a_leader_does_not_write_beside_a_live_holder_of_the_other_modes_lease() {
        let now = Timestamp::now();
        let (shard, metrics) = fence_listing(
            vec![
                named("wavegate-shard-1", "me.s1", now),
                named("wavegate", "wavegate-7d9f8-abcde", now),
            ],
            ("wavegate-shard-1", "me.s1"),
            Rivals::of_sharded("wavegate", ".s1"),
        );
        let why = shard.admit().await.unwrap_err().to_string();
        assert!(why.contains("unsharded Lease wavegate is held"), "{why}");
        assert_eq!(metrics.shard_disagreement.get(), 1);
        assert_eq!(metrics.writes_fenced.get(), 1);

        let (unsharded, metrics) = fence_listing(
            vec![
                named("wavegate", "me", now),
                named("wavegate-shard-0", "wavegate-0_1-a.s1", now),
            ],
            ("wavegate", "me"),
            Rivals::of_unsharded("wavegate"),
        );
        let why = unsharded.admit().await.unwrap_err().to_string();
        assert!(
            why.contains("shard Lease wavegate-shard-0 is held"),
            "{why}"
        );
        assert_eq!(metrics.shard_disagreement.get(), 1);

        // The other mode's Lease expired: each writes alone again.
        let expired = now - SignedDuration::from_secs(60);
        let (alone, metrics) = fence_listing(
            vec![
                named("wavegate", "me", now),
                named("wavegate-shard-0", "wavegate-0_1-a.s1", expired),
            ],
            ("wavegate", "me"),
            Rivals::of_unsharded("wavegate"),
        );
        assert!(alone.admit().await.is_ok());
        assert_eq!(metrics.shard_disagreement.get(), 0);
    }

    /// Two shard replicas that shard by different inputs each hold their own shard's Lease;
    /// the write is refused on the other's identity.
    #[tokio::test]
    async fn a_shard_replica_does_not_write_beside_one_sharding_by_other_inputs() {
        let now = Timestamp::now();
        let (fence, _) = fence_listing(
            vec![
                named("wavegate-shard-1", "me.s1", now),
                named("wavegate-shard-2", "wavegate-2_9-b.s2", now),
            ],
            ("wavegate-shard-1", "me.s1"),
            Rivals::of_sharded("wavegate", ".s1"),
        );
        let fenced = fence.admit().await.unwrap_err();
        assert!(matches!(fenced, Fenced::Rival(_)), "{fenced}");
    }

    /// The cluster moves away while the Lease is being read (the GET may take its whole
    /// timeout): the write is stopped all the same.
    #[tokio::test]
    async fn a_guard_that_turns_while_the_lease_is_read_stops_the_write() {
        let renewed = Timestamp::now();
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| async move {
            let mut held = lease(Some("a"), Some(renewed), 15);
            held.metadata.name = Some("wavegate-shard-1".into());
            let body = serde_json::to_vec(&held).unwrap_or_default();
            http::Response::builder()
                .header("content-type", "application/json")
                .body(kube::client::Body::from(body))
        });
        let client = kube::Client::new(svc, "wavegate");
        let metrics = Arc::new(Metrics::default());
        let fence = Fence {
            lease: Some(Arc::new(LeaseFence {
                metrics: metrics.clone(),
                leases: Api::namespaced(client, "wavegate"),
                lease: "wavegate-shard-1".into(),
                identity: "a".into(),
                rivals: None,
            })),
            guard: None,
        };
        assert!(fence.admit().await.is_ok(), "the holder may write");
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let turns = fence.guarded(Arc::new({
            let asked = asked.clone();
            move || match asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => Ok(()),
                _ => Err("judged by replica 2".into()),
            }
        }));
        let why = turns.admit().await.unwrap_err().to_string();
        assert_eq!(why, "not sent: judged by replica 2");
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
