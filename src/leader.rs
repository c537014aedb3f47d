//! Several replicas, one writer. Every replica watches and serves reads from its own caches;
//! only the holder of a `coordination.k8s.io` Lease runs the writers (the gate controller and
//! annotation mode), so a verdict is written once, not once per replica. The protocol (acquire,
//! renew before expiry, take over an expired lease, tolerate clock skew) is kube-lease-manager's.
//!
//! Takeover after a leader dies without releasing (SIGKILL, a lost node) takes at most the
//! lease duration plus about a second; a leader that shuts down cleanly releases the lease, so
//! the next one starts at once.

use crate::metrics::Metrics;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::AbortHandle;

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
/// After the election itself fails (the API server unreachable, RBAC), try again after this.
const RETRY: Duration = Duration::from_secs(2);

/// Run the writers `start` spawns while this replica holds the lease, and stop them as soon as
/// it does not. Runs until the process ends.
pub async fn lead<F>(client: Client, election: Election, metrics: Arc<Metrics>, start: F)
where
    F: Fn() -> Vec<AbortHandle>,
{
    let secs = |d: Duration| d.as_secs().max(1);
    let grace = secs(RENEW_BEFORE_EXPIRY).min(secs(election.duration).saturating_sub(1).max(1));
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
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let (mut leading, task) = manager.watch().await;
        let mut writers: Vec<AbortHandle> = Vec::new();
        loop {
            let leader = *leading.borrow_and_update();
            if leader && writers.is_empty() {
                tracing::info!(identity = %election.identity, lease = %election.lease, "leading: starting the writers");
                writers = start();
            } else if !leader && !writers.is_empty() {
                tracing::warn!(identity = %election.identity, "lost the lease: stopping the writers");
                stop(&mut writers);
            }
            metrics.leader.set(i64::from(leader));
            if leading.changed().await.is_err() {
                break;
            }
        }
        // The election task ended (its errors are logged by kube-lease-manager): nobody here
        // may write until it holds the lease again.
        stop(&mut writers);
        metrics.leader.set(0);
        match task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election failed; retrying"),
            Err(e) => tracing::warn!(error = %e, "leader election stopped; retrying"),
            Ok(Ok(_)) => {}
        }
        tokio::time::sleep(RETRY).await;
    }
}

fn stop(writers: &mut Vec<AbortHandle>) {
    for w in writers.drain(..) {
        w.abort();
    }
}
