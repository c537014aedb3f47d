//! From a WaveGate and its checks' verdicts to the status wavegate writes. Pure: no I/O and no
//! clock (the caller passes `now`), so every rule here is a unit test.
//!
//! Timeout clock: a gate waits "since" the moment it last stopped being Ready at its current
//! generation, and that moment is kept in the API server as the `Ready` condition's
//! `lastTransitionTime` (while False). So a wavegate restart does not reset the clock, a gate
//! that was Healthy for a week and then loses an endpoint gets its full timeout again (rather
//! than failing the sync at once), and a changed spec (new generation) starts a new clock. A
//! gate that has never been judged counts from its `creationTimestamp`.

use super::crd::{CheckStatus, GateCheck, GateHealth, WaveGate, WaveGateStatus};
use crate::evaluate::Ask;
use crate::health::{HealthStatus, Verdict, worst_of};
use crate::policy::CheckPolicy;
use crate::resource::{InputError, Resource, Target};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::time::Duration;

pub const READY: &str = "Ready";

/// The question a check entry asks, or why it cannot be asked: a malformed name or JSONPath the
/// schema could not catch, or a namespace or kind the installed [`CheckPolicy`] refuses (a
/// tenant who may create a gate must not read other namespaces or Secrets through it).
/// `gate_namespace` fills an omitted `namespace`.
pub fn ask_of(check: &GateCheck, gate_namespace: &str) -> Result<Ask, InputError> {
    ask_under(check, gate_namespace, CheckPolicy::installed())
}

/// [`ask_of`] under an explicit policy.
pub fn ask_under(
    check: &GateCheck,
    gate_namespace: &str,
    policy: &CheckPolicy,
) -> Result<Ask, InputError> {
    let ask = ask_unchecked(check, gate_namespace)?;
    policy.admit_gate_check(gate_namespace, &ask)?;
    Ok(ask)
}

/// The question a check entry asks, before any policy.
fn ask_unchecked(check: &GateCheck, gate_namespace: &str) -> Result<Ask, InputError> {
    let ns = |n: &Option<String>| n.clone().unwrap_or_else(|| gate_namespace.to_string());
    let target = |resource: Resource, namespace: &Option<String>, name: &str| {
        Target::new(resource, &ns(namespace), name)
    };
    let kinds = [
        check.service.is_some(),
        check.cnpg_database.is_some(),
        check.cockroach_cluster.is_some(),
        check.application.is_some(),
        check.resource.is_some(),
    ];
    // The CRD's CEL rule rejects these; an API server without CEL validation might not.
    let not_exactly_one = || InputError::Parameter {
        name: check.name.clone(),
        reason: "set exactly one of service, cnpgDatabase, cockroachCluster, application, \
                 resource"
            .into(),
    };
    if kinds.iter().filter(|k| **k).count() > 1 {
        return Err(not_exactly_one());
    }
    if let Some(s) = &check.service {
        let t = target(Resource::Service, &s.namespace, &s.name)?;
        return Ok(Ask::Service {
            namespace: t.namespace,
            name: t.name,
            min_ready: s.min_ready.unwrap_or(1),
        });
    }
    if let Some(d) = &check.cnpg_database {
        let t = target(Resource::CnpgDatabase, &d.namespace, &d.name)?;
        return Ok(Ask::CnpgDatabase {
            namespace: t.namespace,
            name: t.name,
            require_cluster_ready: d.require_cluster_ready.unwrap_or(false),
        });
    }
    if let Some(c) = &check.cockroach_cluster {
        let t = target(Resource::CrdbCluster, &c.namespace, &c.name)?;
        return Ok(Ask::CrdbCluster {
            namespace: t.namespace,
            name: t.name,
            expected_nodes: c.expected_nodes,
            selector: c.selector.clone(),
        });
    }
    if let Some(a) = &check.application {
        let t = target(Resource::Application, &a.namespace, &a.name)?;
        return Ok(Ask::Application {
            namespace: t.namespace,
            name: t.name,
        });
    }
    let Some(r) = &check.resource else {
        return Err(not_exactly_one());
    };
    let t = target(Resource::parse(&r.resource)?, &r.namespace, &r.name)?;
    // The same parameter names as the HTTP API, so a rule is validated exactly once, there.
    let params: HashMap<String, String> = [
        ("healthy", &r.healthy),
        ("progressing", &r.progressing),
        ("degraded", &r.degraded),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
    .collect();
    Ask::from_params(t, &params)
}

/// What a check entry points at, as the HTTP API shows it: `services cicd/forgejo`.
pub fn target_of(check: &GateCheck, gate_namespace: &str) -> String {
    // Shown also for a check the policy refuses, so the reader sees what it pointed at.
    match ask_unchecked(check, gate_namespace) {
        Ok(ask) => format!("{} {}", ask.resource(), ask.object()),
        Err(_) => String::new(),
    }
}

/// Each check's verdict: evaluated where the entry is valid, Degraded where it is not (a gate
/// whose check can never be asked would otherwise wait until Argo CD's own timeout).
pub fn invalid_check(e: &InputError) -> Verdict {
    Verdict::degraded(format!("invalid check: {e}"))
}

/// The gate's health: the worst of its checks (so a check whose cache is not synced, which the
/// evaluator reports as Progressing or Unknown, keeps the gate from Healthy), or Degraded once
/// it has waited longer than `timeout`.
pub fn gate_health(
    checks: &[(String, Verdict)],
    timeout: Option<(&str, Duration)>,
    waited: Duration,
) -> Verdict {
    let worst = worst_of(checks.iter().map(|(n, v)| (n.as_str(), v)));
    match timeout {
        Some((spelled, limit)) if !worst.is_healthy() && waited >= limit => {
            let still: Vec<String> = checks
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
        _ => worst,
    }
}

/// `spec.timeout` as a duration (Go syntax, as the schema's pattern admits).
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d: kube::core::Duration = s
        .parse()
        .map_err(|e| format!("timeout {s:?} is not a duration: {e}"))?;
    if d.is_negative() {
        return Err(format!("timeout {s:?} is negative"));
    }
    Ok(d.into())
}

/// Since when the gate has been waiting at its current generation, if it is known (see the
/// module comment); `None` means it starts waiting now.
pub fn waiting_since(gate: &WaveGate, current: Option<&WaveGateStatus>) -> Option<Timestamp> {
    let generation = gate.metadata.generation;
    let ready = current.and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    match ready {
        Some(c) if c.status == "False" && c.observed_generation == generation => {
            Some(c.last_transition_time.0)
        }
        Some(_) => None,
        None => gate.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// The status to write: `health`, each check, `observedGeneration` and `Ready`, carrying over
/// each `lastTransitionTime` whose status did not change so that an unchanged verdict yields
/// an identical status (and no write).
pub fn next_status(
    gate: &WaveGate,
    current: Option<&WaveGateStatus>,
    checks: Vec<(String, Verdict)>,
    health: Verdict,
    since: Option<Timestamp>,
    now: Timestamp,
) -> WaveGateStatus {
    let now = seconds(now);
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

/// How long until the timeout fires for a gate that is not Healthy, so the controller can
/// re-evaluate at that moment rather than at the next resync.
pub fn until_timeout(
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
pub fn waited(since: Option<Timestamp>, now: Timestamp) -> Duration {
    since
        .and_then(|s| (now - s).try_into().ok())
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::crd::{ResourceCheck, ServiceCheck, WaveGateSpec};
    use kube::api::ObjectMeta;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// A gate `ddb/databases-created` at generation 1, created at 06:00:00.
    fn gate() -> WaveGate {
        let mut g = WaveGate::new(
            "databases-created",
            WaveGateSpec {
                timeout: Some("10m".into()),
                checks: vec![service_check("forgejo-http", "forgejo")],
            },
        );
        g.metadata = ObjectMeta {
            namespace: Some("ddb".into()),
            generation: Some(1),
            creation_timestamp: Some(Time(ts("2026-11-30T06:00:00Z"))),
            ..g.metadata
        };
        g
    }

    fn service_check(name: &str, service: &str) -> GateCheck {
        GateCheck {
            name: name.into(),
            service: Some(ServiceCheck {
                name: service.into(),
                namespace: None,
                min_ready: None,
            }),
            ..GateCheck::default()
        }
    }

    fn judged(pairs: &[(&str, Verdict)]) -> Vec<(String, Verdict)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect()
    }

    /// Status as the controller computes it at `now` from `current`.
    fn status_at(
        g: &WaveGate,
        current: Option<&WaveGateStatus>,
        checks: &[(&str, Verdict)],
        now: &str,
    ) -> WaveGateStatus {
        let checks = judged(checks);
        let since = waiting_since(g, current);
        let now = ts(now);
        let health = gate_health(
            &checks,
            Some(("10m", parse_timeout("10m").unwrap())),
            waited(since, now),
        );
        next_status(g, current, checks, health, since, now)
    }

    #[test]
    fn omitted_namespace_is_the_gates() {
        let ask = ask_of(&service_check("http", "forgejo"), "ddb").unwrap();
        assert_eq!(
            ask,
            Ask::Service {
                namespace: "ddb".into(),
                name: "forgejo".into(),
                min_ready: 1
            }
        );
        assert_eq!(
            target_of(&service_check("http", "forgejo"), "ddb"),
            "services ddb/forgejo"
        );
    }

    #[test]
    fn a_bad_name_is_a_degraded_check_not_a_panic() {
        let err = ask_of(&service_check("http", "Forgejo/.."), "ddb").unwrap_err();
        let v = invalid_check(&err);
        assert_eq!(v.status, HealthStatus::Degraded);
        assert!(v.message.contains("Forgejo/.."), "{}", v.message);
    }

    #[test]
    fn generic_resource_entry_maps_to_a_generic_ask() {
        let check = GateCheck {
            name: "web".into(),
            resource: Some(ResourceCheck {
                resource: "deployments.apps".into(),
                name: "web".into(),
                namespace: Some("prod".into()),
                healthy: Some("$.status[?@.availableReplicas > 0]".into()),
                progressing: None,
                degraded: None,
            }),
            ..GateCheck::default()
        };
        match ask_of(&check, "prod").unwrap() {
            Ask::Generic {
                group,
                plural,
                namespace,
                rule,
                ..
            } => {
                assert_eq!((group.as_str(), plural.as_str()), ("apps", "deployments"));
                assert_eq!(namespace, "prod");
                assert!(rule.healthy.is_some());
            }
            other => panic!("expected a generic ask, got {other:?}"),
        }
        assert_eq!(target_of(&check, "ddb"), "deployments.apps prod/web");
    }

    #[test]
    fn two_kinds_in_one_check_are_rejected() {
        let mut check = service_check("both", "forgejo");
        check.application = Some(crate::gate::crd::ApplicationCheck {
            name: "x".into(),
            namespace: None,
        });
        assert!(ask_of(&check, "ddb").is_err());
        assert!(
            ask_of(
                &GateCheck {
                    name: "none".into(),
                    ..GateCheck::default()
                },
                "ddb"
            )
            .is_err()
        );
    }

    #[test]
    fn one_unsynced_cache_keeps_the_gate_from_healthy() {
        let checks = judged(&[
            ("db", Verdict::healthy("applied")),
            (
                "http",
                Verdict::progressing("the cache of pods has not synced yet"),
            ),
        ]);
        let v = gate_health(&checks, None, Duration::from_secs(3600));
        assert_eq!(v.status, HealthStatus::Progressing);
        let checks = judged(&[
            ("db", Verdict::healthy("")),
            ("x", Verdict::unknown("watch failing")),
        ]);
        assert_eq!(
            gate_health(&checks, None, Duration::ZERO).status,
            HealthStatus::Unknown
        );
    }

    #[test]
    fn timeout_elapsed_while_waiting_is_degraded_naming_what_is_not_ready() {
        let checks = judged(&[
            ("forgejo-db", Verdict::healthy("applied")),
            (
                "forgejo-http",
                Verdict::progressing("Service cicd/forgejo has 0 ready endpoints"),
            ),
        ]);
        let limit = Some(("10m", Duration::from_secs(600)));
        let early = gate_health(&checks, limit, Duration::from_secs(599));
        assert_eq!(early.status, HealthStatus::Progressing);
        let late = gate_health(&checks, limit, Duration::from_secs(600));
        assert_eq!(late.status, HealthStatus::Degraded);
        assert_eq!(
            late.message,
            "timed out after 10m; still not ready: forgejo-http: Progressing: Service cicd/forgejo \
             has 0 ready endpoints"
        );
    }

    #[test]
    fn a_healthy_gate_never_times_out() {
        let checks = judged(&[("db", Verdict::healthy("applied"))]);
        let v = gate_health(
            &checks,
            Some(("1s", Duration::from_secs(1))),
            Duration::from_secs(99),
        );
        assert!(v.is_healthy());
        assert_eq!(
            until_timeout(
                v.status,
                Some(Duration::from_secs(1)),
                Duration::from_secs(99)
            ),
            None
        );
    }

    #[test]
    fn timeouts_parse_as_go_durations() {
        assert_eq!(parse_timeout("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_timeout("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_timeout("10 minutes").is_err());
    }

    #[test]
    fn new_gate_counts_from_its_creation() {
        let g = gate();
        let s = status_at(
            &g,
            None,
            &[("forgejo-http", Verdict::progressing("0 ready"))],
            "2026-11-30T06:10:01Z",
        );
        assert_eq!(s.health.as_ref().unwrap().status, HealthStatus::Degraded);
        assert_eq!(
            s.conditions[0].last_transition_time,
            Time(ts("2026-11-30T06:00:00Z"))
        );
    }

    #[test]
    fn unchanged_verdicts_give_an_identical_status_so_nothing_is_written() {
        let g = gate();
        let checks = [("forgejo-http", Verdict::progressing("0 ready endpoints"))];
        let first = status_at(&g, None, &checks, "2026-11-30T06:00:02Z");
        let again = status_at(&g, Some(&first), &checks, "2026-11-30T06:00:17Z");
        assert_eq!(first, again);
        assert_eq!(first.observed_generation, Some(1));
        assert_eq!(first.conditions[0].status, "False");
        assert_eq!(first.conditions[0].reason, "Progressing");
    }

    #[test]
    fn transition_time_moves_only_when_a_status_changes() {
        let g = gate();
        let waiting = status_at(
            &g,
            None,
            &[("forgejo-http", Verdict::progressing("0 ready"))],
            "2026-11-30T06:00:02.700Z",
        );
        assert_eq!(
            waiting.checks[0].last_transition_time,
            Time(ts("2026-11-30T06:00:02Z"))
        );
        let other_message = status_at(
            &g,
            Some(&waiting),
            &[("forgejo-http", Verdict::progressing("1 of 2 ready"))],
            "2026-11-30T06:00:05Z",
        );
        assert_ne!(waiting, other_message, "a new message is worth a write");
        assert_eq!(
            other_message.checks[0].last_transition_time,
            waiting.checks[0].last_transition_time
        );
        let healthy = status_at(
            &g,
            Some(&other_message),
            &[("forgejo-http", Verdict::healthy("2 ready"))],
            "2026-11-30T06:00:09Z",
        );
        assert_eq!(
            healthy.checks[0].last_transition_time,
            Time(ts("2026-11-30T06:00:09Z"))
        );
        assert_eq!(healthy.conditions[0].status, "True");
        assert_eq!(healthy.conditions[0].reason, "Healthy");
        assert_eq!(
            healthy.conditions[0].last_transition_time,
            Time(ts("2026-11-30T06:00:09Z"))
        );
        let still = status_at(
            &g,
            Some(&healthy),
            &[("forgejo-http", Verdict::healthy("2 ready"))],
            "2026-11-30T07:00:00Z",
        );
        assert_eq!(healthy, still);
    }

    #[test]
    fn a_gate_healthy_for_days_gets_its_full_timeout_when_it_regresses() {
        let g = gate();
        let healthy = status_at(
            &g,
            None,
            &[("forgejo-http", Verdict::healthy("2 ready"))],
            "2026-11-30T06:01:00Z",
        );
        let regressed = status_at(
            &g,
            Some(&healthy),
            &[("forgejo-http", Verdict::progressing("0 ready"))],
            "2026-12-03T09:00:00Z",
        );
        assert_eq!(
            regressed.health.as_ref().unwrap().status,
            HealthStatus::Progressing
        );
        assert_eq!(
            regressed.conditions[0].last_transition_time,
            Time(ts("2026-12-03T09:00:00Z"))
        );
        let later = status_at(
            &g,
            Some(&regressed),
            &[("forgejo-http", Verdict::progressing("0 ready"))],
            "2026-12-03T09:10:00Z",
        );
        assert_eq!(
            later.health.as_ref().unwrap().status,
            HealthStatus::Degraded
        );
    }

    #[test]
    fn a_new_generation_restarts_the_clock() {
        let mut g = gate();
        let waiting = status_at(
            &g,
            None,
            &[("forgejo-http", Verdict::progressing("0 ready"))],
            "2026-11-30T06:09:00Z",
        );
        g.metadata.generation = Some(2);
        let since = waiting_since(&g, Some(&waiting));
        assert_eq!(since, None, "generation 2 has not waited yet");
        let s = status_at(
            &g,
            Some(&waiting),
            &[("forgejo-http", Verdict::progressing("0 ready"))],
            "2026-11-30T06:11:00Z",
        );
        assert_eq!(s.health.as_ref().unwrap().status, HealthStatus::Progressing);
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(s.conditions[0].observed_generation, Some(2));
        assert_eq!(
            s.conditions[0].last_transition_time,
            Time(ts("2026-11-30T06:11:00Z"))
        );
    }

    #[test]
    fn until_timeout_counts_down_for_waiting_gates_only() {
        let ten = Some(Duration::from_secs(600));
        assert_eq!(
            until_timeout(HealthStatus::Progressing, ten, Duration::from_secs(590)),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            until_timeout(HealthStatus::Progressing, None, Duration::ZERO),
            None
        );
        assert_eq!(
            until_timeout(HealthStatus::Degraded, ten, Duration::ZERO),
            None
        );
    }

    #[test]
    fn clock_skew_never_counts_negative_time() {
        assert_eq!(
            waited(Some(ts("2026-11-30T06:00:10Z")), ts("2026-11-30T06:00:00Z")),
            Duration::ZERO
        );
        assert_eq!(waited(None, ts("2026-11-30T06:00:00Z")), Duration::ZERO);
    }

    fn generic_check(resource: &str, namespace: Option<&str>) -> GateCheck {
        GateCheck {
            name: "peek".into(),
            resource: Some(ResourceCheck {
                resource: resource.into(),
                name: "db-credentials".into(),
                namespace: namespace.map(Into::into),
                healthy: None,
                progressing: None,
                degraded: Some("$.data.password".into()),
            }),
            ..GateCheck::default()
        }
    }

    #[test]
    fn tenant_gate_checking_another_namespace_is_degraded_with_the_reason() {
        let mut check = service_check("peek", "kube-dns");
        check.service.as_mut().unwrap().namespace = Some("kube-system".into());
        let err = ask_of(&check, "tenant-a").unwrap_err();
        let v = invalid_check(&err);
        assert_eq!(v.status, HealthStatus::Degraded);
        assert!(
            v.message.contains("--gate-cross-namespace"),
            "{}",
            v.message
        );
        assert_eq!(
            target_of(&check, "tenant-a"),
            "services kube-system/kube-dns"
        );
        let opted_in = crate::policy::PolicyArgs {
            gate_cross_namespace: vec!["kube-system".into()],
            ..Default::default()
        }
        .policy()
        .unwrap();
        assert!(ask_under(&check, "tenant-a", &opted_in).is_ok());
    }

    #[test]
    fn gate_generic_check_on_secrets_is_degraded_even_in_its_own_namespace() {
        let err = ask_of(&generic_check("secrets", None), "tenant-a").unwrap_err();
        let v = invalid_check(&err);
        assert_eq!(v.status, HealthStatus::Degraded);
        assert!(v.message.contains("secrets"), "{}", v.message);
        assert!(v.message.contains("--generic-kinds"), "{}", v.message);
        assert!(ask_of(&generic_check("deployments.apps", None), "tenant-a").is_ok());
    }
}
