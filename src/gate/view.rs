//! WaveGates as the HTTP API and `wavegate wait` show them (`Gate` in docs/contracts.md), read
//! from the WaveGate's status as stored in the API server (through the watch cache), and the
//! wait that hook Jobs and init containers block on.
//!
//! A status judged for an older generation is shown as Progressing, exactly as the Argo CD
//! health script for WaveGates does: the old generation's Healthy must not release anything.

use super::asks::target_of;
use super::crd::WaveGate;
use super::timeout::TimeoutError;
use crate::cache::{Cache, CacheError, Decoded};
use crate::health::{HealthStatus, Verdict};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use schemars::JsonSchema;
use serde::Serialize;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// A WaveGate as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Gate {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
    pub health: Verdict,
    pub checks: Vec<GateCheckView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "GateCheck")]
pub(crate) struct GateCheckView {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `services cicd/forgejo`.
    pub target: String,
    pub status: HealthStatus,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl Gate {
    pub(crate) fn of(gate: &WaveGate) -> Gate {
        Gate::at(gate, k8s_openapi::jiff::Timestamp::now())
    }

    /// The gate as seen at `now`.
    pub(crate) fn at(gate: &WaveGate, now: k8s_openapi::jiff::Timestamp) -> Gate {
        let namespace = gate.namespace().unwrap_or_default();
        let generation = gate.metadata.generation;
        let status = gate.status.as_ref();
        let observed_generation = status.and_then(|s| s.observed_generation);
        let what = format!("WaveGate {namespace}/{}", gate.name_any());
        let stale = observed_generation.is_none() || observed_generation != generation;
        let health = match (status.and_then(|s| s.health.as_ref()), stale) {
            (_, true) => Verdict::progressing(match observed_generation {
                None => format!("wavegate has not evaluated {what} yet"),
                Some(seen) => format!(
                    "wavegate has not evaluated generation {} of {what} yet (last evaluated {seen})",
                    generation.unwrap_or_default()
                ),
            }),
            (Some(h), false) => match h.valid_until {
                // As the Lua check reads it: a verdict wavegate no longer stands by does not
                // count, wherever it is read (`wavegate wait gate/…` included).
                Some(until) if until < now.as_second() => Verdict::progressing(format!(
                    "{what}: wavegate's verdict ({}) expired at {until} and was not renewed; \
                     is wavegate running?",
                    h.status
                )),
                _ => Verdict::new(h.status, h.message.clone()),
            },
            (None, false) => {
                Verdict::progressing(format!("wavegate wrote no health for {what} yet"))
            }
        };
        let checks = gate
            .spec
            .checks
            .iter()
            .map(|c| {
                let judged = status
                    .filter(|_| !stale)
                    .and_then(|s| s.checks.iter().find(|s| s.name == c.name));
                GateCheckView {
                    name: c.name.clone(),
                    label: c.label.clone(),
                    target: target_of(c, &namespace),
                    status: judged.map_or(HealthStatus::Progressing, |j| j.status),
                    message: judged
                        .map_or_else(|| "not evaluated yet".into(), |j| j.message.clone()),
                    last_transition_time: judged.map(|j| j.last_transition_time.clone()),
                }
            })
            .collect();
        Gate {
            sync_wave: gate
                .annotations()
                .get("argocd.argoproj.io/sync-wave")
                .and_then(|w| w.trim().parse().ok()),
            timeout: gate.spec.timeout.clone(),
            namespace,
            name: gate.name_any(),
            generation,
            observed_generation,
            health,
            checks,
        }
    }
}

/// The gate named by a `wait` target: `wavegates.wavegate.dev/<name>`, `wavegate/<name>`,
/// `wg/<name>` or `gate/<name>`; `None` for any other resource.
pub(crate) fn gate_target(target: &str) -> Option<&str> {
    let (resource, name) = target.split_once('/')?;
    let gate = matches!(
        resource.to_ascii_lowercase().as_str(),
        "wavegates.wavegate.dev"
            | "wavegate.wavegate.dev"
            | "wavegates"
            | "wavegate"
            | "wg"
            | "gate"
    );
    gate.then_some(name)
}

fn decode(gate: Decoded<WaveGate>) -> Option<std::sync::Arc<WaveGate>> {
    gate.inspect_err(|e| tracing::warn!(error = %e, "skipping a WaveGate that does not decode"))
        .ok()
}

/// Every WaveGate in the watched namespaces.
pub(crate) async fn list(cache: &Cache) -> Result<Vec<Gate>, CacheError> {
    let objects = cache.objects_as::<WaveGate>(&super::kind(), None).await?;
    let mut gates: Vec<Gate> = objects
        .into_iter()
        .filter_map(decode)
        .map(|g| Gate::of(&g))
        .collect();
    gates.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(gates)
}

pub(crate) async fn get(
    cache: &Cache,
    namespace: &str,
    name: &str,
) -> Result<Option<Gate>, CacheError> {
    let object = cache
        .object_as::<WaveGate>(&super::kind(), namespace, name)
        .await?;
    Ok(object.and_then(decode).map(|g| Gate::of(&g)))
}

/// The longest a `wait` request is held; a client asking for more gets 408 at this point and
/// asks again (well below common proxy idle timeouts' multiples, and bounded server memory).
pub(crate) const MAX_HTTP_WAIT: Duration = Duration::from_secs(300);
/// When `?timeout=` is absent.
pub(crate) const DEFAULT_HTTP_WAIT: Duration = Duration::from_secs(30);

/// The `?timeout=` of a wait request: a Go duration (`30s`, `2m`), capped at [`MAX_HTTP_WAIT`].
pub(crate) fn http_wait_timeout(given: Option<&str>) -> Result<Duration, TimeoutError> {
    match given {
        None => Ok(DEFAULT_HTTP_WAIT),
        Some(s) => super::timeout::parse_timeout(s).map(|d| d.min(MAX_HTTP_WAIT)),
    }
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Waited {
    Healthy(Gate),
    /// Definite failure (a check Degraded, or the gate's own timeout): stop waiting.
    Degraded(Gate),
    /// The caller's deadline passed; the gate as last seen, if it existed.
    TimedOut(Option<Gate>),
    /// The gate does not exist (only when the caller did not ask to wait for it to appear).
    NotFound,
}

/// Block until the gate is Healthy or Degraded at its current generation, or `timeout` passes.
/// Wakes on the gate's own watch events (the controller's status writes), not on a poll.
/// `until_exists`: a missing gate is waited for rather than reported. `seen` is called with
/// each distinct state of the gate (for progress output).
pub(crate) async fn wait(
    cache: &Cache,
    namespace: &str,
    name: &str,
    timeout: Duration,
    until_exists: bool,
    mut seen: impl FnMut(Option<&Gate>),
) -> Result<Waited, CacheError> {
    // Subscribe before the first read, so a write between the read and the wait is not missed.
    let mut changes = cache.subscribe();
    let deadline = Instant::now() + timeout;
    let mut last: Option<Option<Gate>> = None;
    loop {
        let gate = match get(cache, namespace, name).await {
            Ok(gate) => gate,
            // Definite: nothing to wait for here.
            Err(e) if e.out_of_reach() => return Err(e),
            // A watch that has not synced or is reconnecting: keep waiting, as for a gate
            // that is not ready, and never report a state read from it.
            Err(e) => {
                tracing::debug!(error = %e, "gate not readable yet");
                if !changed(&mut changes, namespace, name, deadline).await {
                    return Ok(Waited::TimedOut(last.flatten()));
                }
                continue;
            }
        };
        if last.as_ref() != Some(&gate) {
            seen(gate.as_ref());
        }
        match &gate {
            None if !until_exists => return Ok(Waited::NotFound),
            Some(g) if g.health.status == HealthStatus::Healthy => {
                return Ok(Waited::Healthy(g.clone()));
            }
            Some(g) if g.health.status == HealthStatus::Degraded => {
                return Ok(Waited::Degraded(g.clone()));
            }
            _ => {}
        }
        last = Some(gate);
        if !changed(&mut changes, namespace, name, deadline).await {
            return Ok(Waited::TimedOut(last.flatten()));
        }
    }
}

/// Wait for a change of this gate; false once `deadline` passes. A lagged or closed feed (or a
/// quiet 5 s) reads the gate again, so a lost event costs a few seconds, never the wait.
async fn changed(
    changes: &mut broadcast::Receiver<crate::cache::Change>,
    namespace: &str,
    name: &str,
    deadline: Instant,
) -> bool {
    let recheck = (Instant::now() + Duration::from_secs(5)).min(deadline);
    loop {
        tokio::select! {
            msg = changes.recv() => match msg {
                Ok(c) if c.kind == super::kind() && c.namespace == namespace && c.name == name => {
                    return true;
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return true,
                Err(broadcast::error::RecvError::Closed) => {
                    tokio::time::sleep_until(recheck).await;
                    return Instant::now() < deadline;
                }
            },
            _ = tokio::time::sleep_until(recheck) => return Instant::now() < deadline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::crd::{
        CheckStatus, Entry, GateCheck, GateHealth, ServiceCheck, WaveGateSpec, WaveGateStatus,
    };

    fn gate(generation: i64, status: Option<WaveGateStatus>) -> WaveGate {
        let mut g = WaveGate::new(
            "endpoints-ready",
            WaveGateSpec {
                timeout: Some("10m".into()),
                checks: vec![GateCheck::new(
                    "forgejo-http",
                    Entry::Service(ServiceCheck {
                        name: "forgejo".into(),
                        namespace: Some("cicd".into()),
                        min_ready: Some(1),
                    }),
                )],
            },
        );
        g.metadata.namespace = Some("ddb".into());
        g.metadata.generation = Some(generation);
        g.metadata.annotations =
            Some([("argocd.argoproj.io/sync-wave".to_string(), "5".to_string())].into());
        g.status = status;
        g
    }

    fn healthy_at(generation: i64) -> WaveGateStatus {
        WaveGateStatus {
            observed_generation: Some(generation),
            health: Some(GateHealth {
                status: HealthStatus::Healthy,
                message: "all 1 checks healthy".into(),
                valid_until: None,
            }),
            checks: vec![CheckStatus {
                name: "forgejo-http".into(),
                status: HealthStatus::Healthy,
                message: "2 ready endpoints".into(),
                last_transition_time: Time("2026-11-30T06:00:00Z".parse().unwrap()),
            }],
            conditions: vec![],
        }
    }

    #[test]
    fn gate_view_has_the_contract_shape_with_targets() {
        let v = serde_json::to_value(Gate::of(&gate(1, Some(healthy_at(1))))).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "namespace": "ddb", "name": "endpoints-ready", "generation": 1,
                "observedGeneration": 1, "timeout": "10m", "syncWave": 5,
                "health": {"status": "Healthy", "message": "all 1 checks healthy"},
                "checks": [{"name": "forgejo-http", "target": "services cicd/forgejo",
                            "status": "Healthy", "message": "2 ready endpoints",
                            "lastTransitionTime": "2026-11-30T06:00:00Z"}]
            })
        );
    }

    #[test]
    fn healthy_from_an_older_generation_is_progressing() {
        let v = Gate::of(&gate(2, Some(healthy_at(1))));
        assert_eq!(v.health.status, HealthStatus::Progressing);
        assert!(
            v.health.message.contains("generation 2"),
            "{}",
            v.health.message
        );
        assert_eq!(v.checks[0].status, HealthStatus::Progressing);
    }

    #[test]
    fn wait_targets_name_gates_the_kubectl_way() {
        assert_eq!(
            gate_target("wavegates.wavegate.dev/databases-created"),
            Some("databases-created")
        );
        assert_eq!(gate_target("gate/x"), Some("x"));
        assert_eq!(gate_target("wg/x"), Some("x"));
        assert_eq!(gate_target("services/x"), None);
        assert_eq!(gate_target("databases-created"), None);
    }

    #[test]
    fn http_wait_is_bounded() {
        assert_eq!(http_wait_timeout(None), Ok(DEFAULT_HTTP_WAIT));
        assert_eq!(http_wait_timeout(Some("2s")), Ok(Duration::from_secs(2)));
        assert_eq!(http_wait_timeout(Some("1h")), Ok(MAX_HTTP_WAIT));
        assert!(http_wait_timeout(Some("soon")).is_err());
        assert!(http_wait_timeout(Some("-1s")).is_err());
    }

    #[test]
    fn a_gate_never_judged_is_progressing() {
        let v = Gate::of(&gate(1, None));
        assert_eq!(v.health.status, HealthStatus::Progressing);
        assert_eq!(v.observed_generation, None);
    }
}
