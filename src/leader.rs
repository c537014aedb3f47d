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

use crate::metrics::Metrics;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use std::sync::Arc;
use std::time::Duration;
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
