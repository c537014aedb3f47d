//! The status wavegate writes on a WaveGate: its health, each check, and the `Ready` condition
//! whose `lastTransitionTime` keeps the timeout clock (see [`super::timeout`]).

use super::crd::{CheckStatus, GateHealth, WaveGate, WaveGateStatus};
use super::sync::recreated_per_sync;
use crate::health::Verdict;
use crate::written;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// The condition type that carries the gate's readiness, and its timeout clock while False.
pub(crate) const READY: &str = "Ready";

/// The status to write: `health`, each check, `observedGeneration` and `Ready`, carrying over
/// each `lastTransitionTime` whose status did not change so that an unchanged verdict yields
/// an identical status (and no write).
///
/// `health.validUntil` is `now + validity`, carried over while the same verdict has at least
/// half its validity left: a settled gate is rewritten once per half validity, which is what
/// proves to Argo CD that wavegate still stands by it.
pub fn next_status(
    gate: &WaveGate,
    current: Option<&WaveGateStatus>,
    checks: Vec<(String, Verdict)>,
    health: Verdict,
    since: Option<Timestamp>,
    now: Timestamp,
    validity: Option<Duration>,
) -> WaveGateStatus {
    let now = seconds(now);
    let validity = validity.filter(|_| !recreated_per_sync(gate));
    let valid_until = validity.map(|v| {
        let previous = current.and_then(|s| s.health.as_ref());
        let same =
            previous.is_some_and(|h| h.status == health.status && h.message == health.message);
        written::valid_until(
            previous.and_then(|h| h.valid_until),
            same,
            v,
            now.as_second(),
        )
    });
    let generation = gate.metadata.generation;
    let prev_check = |name: &str| {
        current
            .into_iter()
            .flat_map(|s| s.checks.iter())
            .find(|c| c.name == name)
    };
    let checks = checks
        .into_iter()
        .map(|(name, v)| {
            let last_transition_time = match prev_check(&name) {
                Some(p) if p.status == v.status => p.last_transition_time.clone(),
                _ => Time(now),
            };
            CheckStatus {
                name,
                status: v.status,
                message: v.message,
                last_transition_time,
            }
        })
        .collect();
    let ready = health.is_healthy();
    let prev_ready = current.and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    let last_transition_time = match (ready, prev_ready) {
        (false, _) => Time(seconds(since.unwrap_or(now))),
        (true, Some(p)) if p.status == "True" => p.last_transition_time.clone(),
        (true, _) => Time(now),
    };
    let condition = Condition {
        type_: READY.into(),
        status: if ready { "True" } else { "False" }.into(),
        reason: health.status.as_str().into(),
        message: health.message.clone(),
        observed_generation: generation,
        last_transition_time,
    };
    WaveGateStatus {
        observed_generation: generation,
        health: Some(GateHealth {
            status: health.status,
            message: health.message,
            valid_until,
        }),
        checks,
        conditions: vec![condition],
    }
}

/// The API server keeps timestamps to the second; so do we, or a status read back would never
/// equal the one computed.
fn seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}
