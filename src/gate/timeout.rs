//! A gate's verdict over time: how a check's Unknown or Missing reads at the gate, what
//! blindness holds back, when the timeout turns waiting into Degraded, and that nothing turns a
//! definite Degraded back into waiting. Every rule about time at the gate is here; pure (the
//! caller passes `now` and what it read).
//!
//! # One clock per purpose
//!
//! | clock | measures | kept | decides |
//! |---|---|---|---|
//! | the gate's wait ([`waiting_since`]) | how long this gate has waited in this sync attempt | in the API server: the `Ready` condition's `lastTransitionTime` while False, else `creationTimestamp`; never earlier than the attempt's start ([`super::sync::AttemptClock`]) | `spec.timeout` (here) |
//! | a check's grace (`crate::evaluate`, `Evaluator::lasted`) | how long one object at one spec has failed the same way (a CNPG Database refused, a script's Degraded) | in memory, per check and object identity; forgotten 120 s after it is last seen | a check's own Progressing → Degraded (`--*-grace`, `--argocd-lua-grace`) before the gate sees it |
//! | a written verdict's life ([`super::status::next_status`], `crate::written::valid_until`) | how long Argo CD may believe a verdict wavegate wrote | in the object: `health.validUntil` | Argo CD's Lua reads a stale verdict as Progressing |
//!
//! The gate's wait is the only clock the timeout reads, and it survives restarts. A check's
//! grace is the evaluator's and never reaches the timeout: a gate sees the check's verdict
//! after it. Time from the wavegate process (`Instant`) decides only when to look again, never
//! a verdict.
//!
//! The wait: a gate waits "since" the moment it last stopped being Ready at its current
//! generation. So a wavegate restart does not reset the clock, a gate that was Healthy for a
//! week and then loses an endpoint gets its full timeout again (rather than failing the sync at
//! once), and a changed spec (new generation) starts a new clock. A gate that has never been
//! judged counts from its `creationTimestamp`.

use super::crd::{WaveGate, WaveGateStatus};
use super::status::READY;
use crate::health::{HealthStatus, Verdict, worst_of};
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::time::Duration;

/// What the controller knows about the sync that is applying the gate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SyncClock {
    /// No Argo CD Application manages the gate (no tracking id, no instance label).
    Unmanaged,
    /// The managing Application was read: when its current sync attempt began, `None` when no
    /// operation runs.
    Read(Option<Timestamp>),
    /// The managing Application could not be read or was not found, and why. wavegate then
    /// cannot tell when this sync attempt started: measuring the timeout from the gate's
    /// history could fail a new sync for an old one's wait, so the timeout is not applied.
    Blind(String),
}

impl SyncClock {
    /// When the sync attempt began, when it is known.
    pub(crate) fn started(&self) -> Option<Timestamp> {
        match self {
            SyncClock::Read(started) => *started,
            SyncClock::Unmanaged | SyncClock::Blind(_) => None,
        }
    }
}

/// The gate's health after `waited` under `timeout` (spelled as the spec wrote it), and whether
/// the timeout is what made it Degraded (its Event says TimedOut, not Degraded): [`gate_health`],
/// except that a blind sync clock never lets the timeout fire. A check's own Degraded is
/// definite: no clock or blindness turns it into waiting, and it is no timeout.
pub(crate) fn health_over_time(
    verdicts: &[(String, Verdict)],
    blind: &HashMap<String, String>,
    timeout: Option<(&str, Duration)>,
    waited: Duration,
    sync: &SyncClock,
) -> (Verdict, bool) {
    let definite = definite_failure(verdicts);
    match sync {
        SyncClock::Blind(why) => {
            let v = gate_health(verdicts, blind, None, waited);
            let v = match timeout {
                Some((spelled, limit)) if !v.is_healthy() && !definite && waited >= limit => {
                    Verdict::progressing(format!(
                        "{}; the {spelled} timeout is not applied: {why}",
                        v.message
                    ))
                }
                _ => v,
            };
            (v, false)
        }
        SyncClock::Unmanaged | SyncClock::Read(_) => {
            let v = gate_health(verdicts, blind, timeout, waited);
            let timed_out = v.status == HealthStatus::Degraded
                && !definite
                && timeout.is_some_and(|(_, limit)| waited >= limit);
            (v, timed_out)
        }
    }
}
/// The gate's health: the worst of its checks (so a check whose cache is not synced, which the
/// evaluator reports as Progressing or Unknown, keeps the gate from Healthy), or Degraded once
/// it has waited longer than `timeout`.
///
/// A gate may be a Sync hook, and gitops-engine treats a hook's health differently from a
/// resource's (sync_context.go): Missing means "done at once" and Unknown fails the hook. So a
/// gate never passes those two on from a check: a check target that does not exist yet, one
/// wavegate cannot see (`blind`: check name → why), or one whose state is unknown (an
/// Application whose comparison failed while the repo-server restarts) is Progressing at the
/// gate; only the timeout turns waiting into Degraded.
///
/// The timeout fires only on evidence about the cluster: while any check that is not Healthy is
/// blind, waiting longer than the timeout says nothing about the cluster, only about wavegate
/// (a restart whose caches have not synced, a first probe that got no answer), and the gate
/// stays Progressing with both facts in its message.
///
/// Blindness and the timeout decide only about *waiting*. A check that is Degraded (a proven
/// split CockroachDB cluster, a Database CNPG refused, an invalid check) is a definite verdict
/// about the cluster: the gate is Degraded with that check's reason whatever else is blind and
/// however long it waited, so the sync fails on the known failure instead of hanging on it.
pub fn gate_health(
    checks: &[(String, Verdict)],
    blind: &HashMap<String, String>,
    timeout: Option<(&str, Duration)>,
    waited: Duration,
) -> Verdict {
    let at_gate: Vec<(String, Verdict)> = checks
        .iter()
        .map(|(n, v)| {
            let v = match v.status {
                HealthStatus::Missing | HealthStatus::Unknown => {
                    Verdict::progressing(v.message.clone())
                }
                _ => v.clone(),
            };
            (n.clone(), v)
        })
        .collect();
    let worst = worst_of(at_gate.iter().map(|(n, v)| (n.as_str(), v)));
    if definite_failure(&at_gate) {
        return worst;
    }
    let Some((spelled, limit)) = timeout else {
        return worst;
    };
    if worst.is_healthy() || waited < limit {
        return worst;
    }
    let unseen: Vec<String> = at_gate
        .iter()
        .filter(|(_, v)| !v.is_healthy())
        .filter_map(|(n, _)| blind.get(n).map(|why| format!("{n}: {why}")))
        .collect();
    if !unseen.is_empty() {
        return Verdict::progressing(format!(
            "waited longer than the {spelled} timeout, but wavegate cannot judge {}, so the \
             timeout does not fail the sync yet; {}",
            unseen.join("; "),
            worst.message
        ));
    }
    let still: Vec<String> = at_gate
        .iter()
        .filter(|(_, v)| !v.is_healthy())
        .map(|(n, v)| format!("{n}: {v}"))
        .collect();
    let still = if still.is_empty() {
        worst.message
    } else {
        still.join("; ")
    };
    Verdict::degraded(format!(
        "timed out after {spelled}; still not ready: {still}"
    ))
}

/// Whether a check is Degraded on its own evidence (not by the gate's timeout): see
/// [`gate_health`].
pub(crate) fn definite_failure(checks: &[(String, Verdict)]) -> bool {
    checks
        .iter()
        .any(|(_, v)| v.status == HealthStatus::Degraded)
}

/// A timeout that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeoutError {
    #[error("timeout {given:?} is not a duration: {source}")]
    NotADuration {
        given: String,
        source: std::sync::Arc<kube::core::duration::ParseError>,
    },
    #[error("timeout {0:?} is negative")]
    Negative(String),
}

/// `spec.timeout` as a duration (Go syntax, as the schema's pattern admits).
pub fn parse_timeout(s: &str) -> Result<Duration, TimeoutError> {
    let d: kube::core::Duration = s.parse().map_err(|e| TimeoutError::NotADuration {
        given: s.to_string(),
        source: std::sync::Arc::new(e),
    })?;
    if d.is_negative() {
        return Err(TimeoutError::Negative(s.to_string()));
    }
    Ok(d.into())
}

/// Since when the gate has been waiting in this sync attempt, if it is known (see the module
/// comment); `None` means it starts waiting now. `sync_started` is when the Argo CD operation
/// that is syncing the gate's Application began: every sync attempt gets the full timeout, so a
/// gate that timed out yesterday and is unchanged in git is not Degraded at once today.
pub(crate) fn waiting_since(
    gate: &WaveGate,
    current: Option<&WaveGateStatus>,
    sync_started: Option<Timestamp>,
) -> Option<Timestamp> {
    let generation = gate.metadata.generation;
    let ready = current.and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    let since = match ready {
        Some(c) if c.status == "False" && c.observed_generation == generation => {
            Some(c.last_transition_time.0)
        }
        Some(_) => None,
        None => gate.metadata.creation_timestamp.as_ref().map(|t| t.0),
    };
    match (since, sync_started) {
        (Some(s), Some(started)) => Some(s.max(started)),
        (since, _) => since,
    }
}

/// How long until the timeout fires for a gate that is not Healthy, so the controller can
/// re-evaluate at that moment rather than at the next resync.
pub(crate) fn until_timeout(
    health: HealthStatus,
    timeout: Option<Duration>,
    waited: Duration,
) -> Option<Duration> {
    match (health, timeout) {
        (HealthStatus::Healthy | HealthStatus::Degraded, _) | (_, None) => None,
        (_, Some(limit)) => limit.checked_sub(waited),
    }
}

/// Elapsed time from `since` to `now`, zero if `since` is in the future (clock skew between
/// the API server and wavegate).
pub(crate) fn waited(since: Option<Timestamp>, now: Timestamp) -> Duration {
    since
        .and_then(|s| (now - s).try_into().ok())
        .unwrap_or(Duration::ZERO)
}
