//! The heartbeat: silence is not health. A paused API server (or a wavegate that was itself
//! frozen) produces no watch error, so the API server's `/readyz` is asked at every
//! [`super::WatchLimits::heartbeat`], and the stores are read only while it (or a store's own
//! latest list) vouches for them.

use super::Cache;
use crate::locks::lock;
use kube::Client;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How often the heartbeat asks again while the API server does not answer, so that its return
/// is noticed (and the watches relisted) within this.
pub(super) const HEARTBEAT_RETRY: Duration = Duration::from_secs(1);

impl Cache {
    /// Why a store cannot be vouched for, if neither a heartbeat nor its own latest list
    /// reached the API server lately. That happens when the API server is unreachable, and
    /// also when wavegate itself was frozen (SIGSTOP, a stalled node): then a store may have
    /// missed changes, and even the first request served after thawing must not read it.
    pub(super) fn silence(&self, listed_at: Option<Instant>) -> Option<String> {
        let heard = *lock(&self.heard);
        let last = listed_at.map_or(heard, |l| l.max(heard));
        let silent = last.elapsed();
        (silent > 2 * self.limits.heartbeat).then(|| {
            format!(
                "wavegate has not heard from the API server for {}",
                humantime::format_duration(Duration::from_secs(silent.as_secs()))
            )
        })
    }
}
/// Turn every watch to relisting when the API server stops answering (see
/// [`WatchLimits::heartbeat`]), or answers again after a silence (wavegate was frozen, or the
/// API server was away): what the stores missed meanwhile is only known after a new list.
///
/// Which watches relist when the API server answers again depends on what is known of the
/// silence's start. After heartbeats that failed, every watch was turned to relisting at the
/// first failure: one listed since the last answer before it listed during the outage, and
/// keeps its store. After a silence no heartbeat saw fail (this process was frozen, or starved
/// of CPU, between two of them), or one that came late, the silence began at some unknown
/// instant after the last answer: a watch listed just before it holds what it held then,
/// however recent its list looks, so every watch relists.
pub(super) async fn heartbeat(cache: Weak<Cache>) {
    let mut answering = true;
    // While the heartbeat fails: when it last answered before.
    let mut answered_before_failures = None;
    loop {
        let Some((client, every)) = cache
            .upgrade()
            .map(|c| (c.client.clone(), c.limits.heartbeat))
        else {
            return;
        };
        let pause = if answering {
            every
        } else {
            every.min(HEARTBEAT_RETRY)
        };
        let slept_at = Instant::now();
        tokio::time::sleep(pause).await;
        // A sleep that overran by a whole heartbeat: this process was frozen (or starved) at
        // some instant since the last tick. Counted before the API server is asked, which may
        // take up to `every`: meanwhile lists made after the thaw could vouch for the stores,
        // and a decision judged before the freeze would pass for one judged after the last
        // silence. So after heartbeats that failed as much as after answers.
        if slept_at.elapsed() > pause + every
            && let Some(c) = cache.upgrade()
        {
            let why = format!(
                "wavegate itself was frozen or starved (a {} heartbeat pause took {})",
                humantime::format_duration(pause),
                humantime::format_duration(Duration::from_millis(
                    slept_at
                        .elapsed()
                        .as_millis()
                        .try_into()
                        .unwrap_or(u64::MAX)
                ))
            );
            tracing::warn!(%why, "relisting every watch");
            c.count_silence();
            c.watches.relist(&why, None);
            answered_before_failures = None;
        }
        let answer = tokio::time::timeout(every, api_server_ready(&client)).await;
        // Longer than the pause, the longest answer and as much again: frozen meanwhile.
        let late = slept_at.elapsed() > pause + 2 * every;
        let Some(c) = cache.upgrade() else { return };
        let error = match answer {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!(
                "the API server is not ready: {}",
                failed_checks(&e)
            )),
            Err(_) => Some(format!(
                "the API server did not answer within {}",
                humantime::format_duration(every)
            )),
        };
        tracing::debug!(error = ?error, answering, "heartbeat");
        match error {
            Some(e) => {
                if answering {
                    tracing::warn!(error = %e, "API server unreachable; relisting every watch");
                    c.count_silence();
                    c.watches.relist(&e, None);
                    answered_before_failures = Some(*lock(&c.heard));
                } else if late {
                    // Frozen while the request was under way, between two failures.
                    c.count_silence();
                    c.watches.relist(&e, None);
                    answered_before_failures = None;
                }
                answering = false;
            }
            None => {
                if let Some(silence) = c.silence(None) {
                    // Failures seen bound the silence's start; none seen, nothing is known.
                    let stale_if_listed_before = answered_before_failures.filter(|_| !late);
                    tracing::warn!(%silence, after_failures = stale_if_listed_before.is_some(), "API server answers again; relisting the watches that have not listed since");
                    c.count_silence();
                    c.watches.relist(&silence, stale_if_listed_before);
                }
                *lock(&c.heard) = Instant::now();
                answering = true;
                answered_before_failures = None;
            }
        }
    }
}

/// The API server's own `/readyz` (readable by anyone through the default
/// `system:public-info-viewer` ClusterRole). Unlike `/version` it fails while the API server
/// cannot reach etcd: its watch cache then stops following etcd and catches up only later, so
/// what wavegate's watches deliver afterwards may lag, until a fresh consistent list.
pub(super) async fn api_server_ready(client: &Client) -> Result<(), kube::Error> {
    let request = axum::http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(request).await.map(|_| ())
}

/// The failing checks of a `/readyz` answer (`[-]etcd failed: reason withheld`), not its
/// whole verbose body.
pub(super) fn failed_checks(e: &kube::Error) -> String {
    let text = e.to_string();
    let failed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("[-]"))
        .collect();
    if failed.is_empty() {
        text
    } else {
        failed.join("; ")
    }
}
