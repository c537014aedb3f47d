//! The pure rules of a WaveGate's verdict, together: the asks its entries make, the wait and
//! its timeout, the sync attempts that date it, and the status written.

use super::asks::*;
use super::crd::{Entry, GateCheck, WaveGate, WaveGateStatus};
use super::status::*;
use super::sync::*;
use super::timeout::*;
use crate::ask::Ask;
use crate::ask::Check;
use crate::gate::crd::{CnpgDatabaseRoleCheck, ResourceCheck, ServiceCheck, WaveGateSpec};
use crate::health::{HealthStatus, Verdict};
use crate::resource::{CheckKind, Target};
use crate::views::{INSTANCE_LABEL, TRACKING_ID, TrackingMethod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use std::collections::HashMap;
use std::time::Duration;

const VALIDITY: Duration = Duration::from_secs(180);

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
    GateCheck::new(
        name,
        Entry::Service(ServiceCheck {
            name: service.into(),
            namespace: None,
            min_ready: None,
        }),
    )
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
    let since = waiting_since(g, current, None);
    let now = ts(now);
    let health = gate_health(
        &checks,
        &HashMap::new(),
        Some(("10m", parse_timeout("10m").unwrap())),
        waited(since, now),
    );
    next_status(g, current, checks, health, since, now, Some(VALIDITY))
}

#[test]
fn omitted_namespace_is_the_gates() {
    let ask = ask_of(&service_check("http", "forgejo"), "ddb").unwrap();
    let expected = Target::new(CheckKind::SERVICE, "ddb", "forgejo").unwrap();
    assert_eq!(ask, Ask::with_defaults(expected));
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
    let check = GateCheck::new(
        "web",
        Entry::Generic(ResourceCheck {
            resource: "deployments.apps".into(),
            name: "web".into(),
            namespace: Some("prod".into()),
            healthy: Some("$.status[?@.availableReplicas > 0]".into()),
            progressing: None,
            degraded: None,
        }),
    );
    let ask = ask_of(&check, "prod").unwrap();
    match &ask.check {
        Check::Generic {
            group,
            plural,
            rule,
        } => {
            assert_eq!((group.as_str(), plural.as_str()), ("apps", "deployments"));
            assert_eq!(ask.namespace, "prod");
            assert!(rule.healthy.is_some());
        }
        other => panic!("expected a generic check, got {other:?}"),
    }
    assert_eq!(target_of(&check, "ddb"), "deployments.apps prod/web");
}

fn role_check(name: &str, require_cluster_ready: Option<bool>) -> GateCheck {
    GateCheck::new(
        name,
        Entry::CnpgDatabaseRole(CnpgDatabaseRoleCheck {
            name: "forgejo".into(),
            namespace: None,
            require_cluster_ready,
        }),
    )
}

#[test]
fn a_database_role_entry_asks_about_the_role_not_a_database() {
    let ask = ask_of(&role_check("role", Some(true)), "ddb").unwrap();
    assert_eq!(
        ask.check,
        Check::CnpgDatabaseRole(crate::checks::cnpg::Params::new(Some(true)))
    );
    assert_eq!(
        ask.to_string(),
        "databaseroles.postgresql.cnpg.io ddb/forgejo"
    );
    let defaults = ask_of(&role_check("role", None), "ddb").unwrap();
    let target = Target::new(CheckKind::CNPG_DATABASE_ROLE, "ddb", "forgejo").unwrap();
    assert_eq!(defaults, Ask::with_defaults(target));
}

#[test]
fn a_database_and_a_role_in_one_check_are_rejected_naming_every_kind() {
    let mut check = role_check("both", None);
    check
        .entries
        .0
        .push(Entry::CnpgDatabase(crate::gate::crd::CnpgDatabaseCheck {
            name: "forgejo".into(),
            namespace: None,
            require_cluster_ready: None,
        }));
    let err = ask_of(&check, "ddb").unwrap_err().to_string();
    assert!(err.contains("cnpgDatabase, cnpgDatabaseRole"), "{err}");
    assert_eq!(
        invalid_check(&ask_of(&check, "ddb").unwrap_err()).status,
        HealthStatus::Degraded
    );
}

#[test]
fn two_kinds_in_one_check_are_rejected() {
    let mut check = service_check("both", "forgejo");
    check
        .entries
        .0
        .push(Entry::Application(crate::gate::crd::ApplicationCheck {
            name: "x".into(),
            namespace: None,
        }));
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
    let v = gate_health(&checks, &HashMap::new(), None, Duration::from_secs(3600));
    assert_eq!(v.status, HealthStatus::Progressing);
    let checks = judged(&[
        ("db", Verdict::healthy("")),
        ("x", Verdict::unknown("watch failing")),
    ]);
    // Never Unknown at the gate: a hook gate would fail the sync on it.
    assert_eq!(
        gate_health(&checks, &HashMap::new(), None, Duration::ZERO).status,
        HealthStatus::Progressing
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
    let early = gate_health(&checks, &HashMap::new(), limit, Duration::from_secs(599));
    assert_eq!(early.status, HealthStatus::Progressing);
    let late = gate_health(&checks, &HashMap::new(), limit, Duration::from_secs(600));
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
        &HashMap::new(),
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
        // Within half the validity, so `validUntil` is carried over too.
        "2026-11-30T06:01:00Z",
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
    let since = waiting_since(&g, Some(&waiting), None);
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

#[test]
fn blind_check_past_the_timeout_is_not_degraded() {
    // wavegate restarted after the timeout ran out while it was down; its pod cache has not
    // synced yet. That is wavegate's blindness, not the cluster's failure.
    let checks = judged(&[(
        "forgejo-http",
        Verdict::progressing("the cache of pods has not synced yet"),
    )]);
    let blind = HashMap::from([(
        "forgejo-http".to_string(),
        "the cache of pods has not synced yet".to_string(),
    )]);
    let limit = Some(("10m", Duration::from_secs(600)));
    let v = gate_health(&checks, &blind, limit, Duration::from_secs(7200));
    assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    assert!(v.message.contains("cannot judge forgejo-http"), "{v}");
    let seen = gate_health(&checks, &HashMap::new(), limit, Duration::from_secs(7200));
    assert_eq!(seen.status, HealthStatus::Degraded);
}

#[test]
fn missing_target_or_blind_unknown_never_reaches_argo_cd_as_missing_or_unknown() {
    // A hook gate that answered Missing would be "done at once"; Unknown would fail it.
    let missing = judged(&[(
        "db",
        Verdict::missing("Database ddb/forgejo does not exist"),
    )]);
    let v = gate_health(&missing, &HashMap::new(), None, Duration::ZERO);
    assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    let unknown = judged(&[("db", Verdict::unknown("the watch on databases is failing"))]);
    let v = gate_health(&unknown, &HashMap::new(), None, Duration::ZERO);
    assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    let blind = HashMap::from([("db".to_string(), "watch failing".to_string())]);
    let v = gate_health(&unknown, &blind, None, Duration::ZERO);
    assert_eq!(v.status, HealthStatus::Progressing, "{v}");
}

#[test]
fn a_new_sync_attempt_gets_the_full_timeout_again() {
    // Timed out yesterday at generation 1, unchanged in git; today's sync started at 09:00.
    let g = gate();
    let yesterday = status_at(
        &g,
        None,
        &[("forgejo-http", Verdict::progressing("0 ready"))],
        "2026-11-30T06:20:00Z",
    );
    assert_eq!(
        yesterday.health.as_ref().unwrap().status,
        HealthStatus::Degraded
    );
    let started = ts("2026-12-01T09:00:00Z");
    let since = waiting_since(&g, Some(&yesterday), Some(started));
    assert_eq!(since, Some(started));
    let checks = judged(&[("forgejo-http", Verdict::progressing("0 ready"))]);
    let v = gate_health(
        &checks,
        &HashMap::new(),
        Some(("10m", Duration::from_secs(600))),
        waited(since, ts("2026-12-01T09:01:00Z")),
    );
    assert_eq!(v.status, HealthStatus::Progressing, "{v}");
}

#[test]
fn managing_application_comes_from_argo_cd_tracking() {
    use TrackingMethod::{Annotation, AnnotationAndLabel, Label};
    let id = |id: &str| Some([(TRACKING_ID.to_string(), id.to_string())].into());
    let label = |app: &str| Some([(INSTANCE_LABEL.to_string(), app.to_string())].into());
    let mut g = gate();
    g.metadata.annotations = id("team-a_forgejo:wavegate.dev/WaveGate:ddb/databases-created");
    let forgejo = Some(("team-a".into(), "forgejo".into()));
    assert_eq!(managing_application(&g, "argocd", Annotation), forgejo);
    assert_eq!(
        managing_application(&g, "argocd", AnnotationAndLabel),
        forgejo
    );
    // Under annotation tracking, a Helm chart's instance label names no Application, even
    // beside a tracking id; under label tracking it is the only mark read.
    g.metadata.labels = label("platform");
    assert_eq!(managing_application(&g, "argocd", Annotation), forgejo);
    assert_eq!(
        managing_application(&g, "argocd", Label),
        Some(("argocd".into(), "platform".into()))
    );
    g.metadata.annotations = None;
    assert_eq!(managing_application(&g, "argocd", Annotation), None);
    assert_eq!(managing_application(&g, "argocd", AnnotationAndLabel), None);
    // An id copied from another object (another gate, another namespace, another kind)
    // does not make this gate managed (Argo CD's isSelfReferencedObj).
    for copied in [
        "forgejo:wavegate.dev/WaveGate:ddb/other-gate",
        "forgejo:wavegate.dev/WaveGate:other-ns/databases-created",
        "forgejo:/Service:ddb/databases-created",
        "forgejo:wavegate.dev/WaveGate/x:ddb/databases-created",
    ] {
        g.metadata.annotations = id(copied);
        assert_eq!(
            managing_application(&g, "argocd", Annotation),
            None,
            "{copied}"
        );
    }
    g.metadata.labels = None;
    assert_eq!(managing_application(&g, "argocd", Label), None);
}

#[test]
fn only_a_running_operation_is_a_sync_attempt() {
    let running = serde_json::json!({"status": {"operationState": {
        "phase": "Running", "startedAt": "2026-12-01T09:00:00Z"}}});
    let attempt = sync_attempt(&running).unwrap();
    let now = ts("2026-12-01T09:30:00Z");
    assert_eq!(
        attempt_started(&attempt, None, now),
        ts("2026-12-01T09:00:00Z")
    );
    let done = serde_json::json!({"status": {"operationState": {
        "phase": "Failed", "startedAt": "2026-12-01T09:00:00Z"}}});
    assert_eq!(sync_attempt(&done), None);
}

/// Argo CD's automatic retry keeps the operation's `startedAt`: measured from it, a gate
/// that timed out in the first attempt would be Degraded at once in every retry.
#[test]
fn an_automatic_retry_gets_its_full_timeout() {
    let app = |retry: i64, finished: Option<&str>| {
        let mut op = serde_json::json!({"phase": "Running",
            "startedAt": "2026-12-01T09:00:00Z", "retryCount": retry});
        if let Some(f) = finished {
            op["finishedAt"] = f.into();
        }
        serde_json::json!({"metadata": {"uid": "app-1"}, "status": {"operationState": op}})
    };
    let first = sync_attempt(&app(0, None)).unwrap();
    // The first attempt failed at 09:10 (the gate timed out); Argo CD waits for the backoff.
    let backoff = sync_attempt(&app(1, Some("2026-12-01T09:10:00Z"))).unwrap();
    let retry = sync_attempt(&app(1, None)).unwrap();
    assert_ne!(first.id, retry.id);
    assert!(backoff.between_attempts && !retry.between_attempts);
    let seen = ts("2026-12-01T09:10:05Z");
    assert_eq!(attempt_started(&backoff, None, seen), seen);
    assert_eq!(
        attempt_started(&retry, Some(seen), ts("2026-12-01T09:12:00Z")),
        seen
    );

    // The gate's Ready condition went False at 09:00, in the first attempt: the retry is
    // measured from 09:10:05, so two minutes into it a 5m timeout has not fired.
    let mut g = gate();
    g.spec.timeout = Some("5m".into());
    let status = WaveGateStatus {
        conditions: vec![Condition {
            type_: READY.into(),
            status: "False".into(),
            reason: "Progressing".into(),
            message: String::new(),
            observed_generation: g.metadata.generation,
            last_transition_time: Time(ts("2026-12-01T09:00:00Z")),
        }],
        ..WaveGateStatus::default()
    };
    let start = attempt_started(&retry, Some(seen), ts("2026-12-01T09:12:05Z"));
    let since = waiting_since(&g, Some(&status), Some(start));
    assert_eq!(
        waited(since, ts("2026-12-01T09:12:05Z")),
        Duration::from_secs(120)
    );
}

#[test]
fn a_hook_gate_recreated_per_sync_needs_no_expiry_and_is_never_renewed() {
    let hook = |policy: Option<&str>| {
        let mut g = gate();
        let mut a = std::collections::BTreeMap::from([(
            "argocd.argoproj.io/hook".to_string(),
            "Sync".to_string(),
        )]);
        if let Some(p) = policy {
            a.insert("argocd.argoproj.io/hook-delete-policy".into(), p.into());
        }
        g.metadata.annotations = Some(a);
        g
    };
    let mut skip = hook(None);
    if let Some(a) = skip.metadata.annotations.as_mut() {
        a.insert("argocd.argoproj.io/hook".into(), "Skip".into());
    }
    let mut helm_kept = hook(None);
    if let Some(a) = helm_kept.metadata.annotations.as_mut() {
        a.insert("helm.sh/hook-delete-policy".into(), "hook-failed".into());
    }
    for (g, recreated) in [
        (gate(), false),
        (skip, false),
        (helm_kept, false),
        (hook(None), true),
        (hook(Some("BeforeHookCreation")), true),
        (hook(Some("HookFailed, BeforeHookCreation")), true),
        // Deleted only when the whole sync succeeds: a failed sync leaves it Healthy.
        (hook(Some("HookSucceeded")), false),
        (hook(Some("HookFailed")), false),
    ] {
        assert_eq!(
            recreated_per_sync(&g),
            recreated,
            "{:?}",
            g.metadata.annotations
        );
        let now = ts("2026-12-01T10:00:00Z");
        let checks = vec![("web".to_string(), Verdict::healthy("ok"))];
        let s = next_status(
            &g,
            None,
            checks,
            Verdict::healthy("ok"),
            None,
            now,
            Some(VALIDITY),
        );
        let until = s.health.as_ref().unwrap().valid_until;
        assert_eq!(until.is_none(), recreated, "{:?}", g.metadata.annotations);
        // Settled: the same verdict an hour later writes exactly the same status.
        let later = ts("2026-12-01T11:00:00Z");
        let checks = vec![("web".to_string(), Verdict::healthy("ok"))];
        let again = next_status(
            &g,
            Some(&s),
            checks,
            Verdict::healthy("ok"),
            None,
            later,
            Some(VALIDITY),
        );
        assert_eq!(again == s, recreated);
    }
}

#[test]
fn a_settled_verdict_is_confirmed_once_per_half_validity() {
    let g = gate();
    let ok = [("forgejo-http", Verdict::healthy("2 ready endpoints"))];
    let first = status_at(&g, None, &ok, "2026-11-30T06:01:00Z");
    let until = first.health.as_ref().unwrap().valid_until.unwrap();
    assert_eq!(until, ts("2026-11-30T06:04:00Z").as_second());
    // A minute later: unchanged, so no write.
    let later = status_at(&g, Some(&first), &ok, "2026-11-30T06:02:00Z");
    assert_eq!(later, first);
    // Past half the validity: confirmed again, with a new deadline.
    let renewed = status_at(&g, Some(&first), &ok, "2026-11-30T06:02:31Z");
    assert_eq!(
        renewed.health.as_ref().unwrap().valid_until,
        Some(ts("2026-11-30T06:05:31Z").as_second())
    );
}

fn generic_check(resource: &str, namespace: Option<&str>) -> GateCheck {
    GateCheck::new(
        "peek",
        Entry::Generic(ResourceCheck {
            resource: resource.into(),
            name: "db-credentials".into(),
            namespace: namespace.map(Into::into),
            healthy: None,
            progressing: None,
            degraded: Some("$.data.password".into()),
        }),
    )
}

#[test]
fn tenant_gate_checking_another_namespace_is_degraded_with_the_reason() {
    let check = GateCheck::new(
        "peek",
        Entry::Service(ServiceCheck {
            name: "kube-dns".into(),
            namespace: Some("kube-system".into()),
            min_ready: None,
        }),
    );
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

// ---- Argo CD operation lifecycles, whole sequences -------------------------------------

#[derive(Debug, Clone, Copy)]
enum OpEvent {
    /// A new sync operation starts (a new `startedAt`).
    NewSync,
    /// The running attempt fails; Argo CD waits for the retry's backoff.
    AttemptFails,
    /// The backoff passed: the retry runs (same `startedAt`, `finishedAt` cleared).
    RetryStarts,
    /// The operation ends (no retries left, or terminated).
    OperationEnds,
    /// wavegate restarts: its memory of first-seen retries is gone.
    Restart,
    /// The clock steps back an hour, or forward ten minutes (NTP, a VM resumed).
    ClockBack,
    ClockForward,
    Wait,
}

fn op_event() -> impl proptest::strategy::Strategy<Value = OpEvent> {
    use proptest::prelude::*;
    prop_oneof![
        1 => Just(OpEvent::NewSync),
        2 => Just(OpEvent::AttemptFails),
        2 => Just(OpEvent::RetryStarts),
        1 => Just(OpEvent::OperationEnds),
        1 => Just(OpEvent::Restart),
        1 => Just(OpEvent::ClockBack),
        1 => Just(OpEvent::ClockForward),
        6 => Just(OpEvent::Wait),
    ]
}

proptest::proptest! {
    #![proptest_config(crate::testing::proptest_config::config(500))]

    /// A gate whose check never becomes Healthy, through random Argo CD operation
    /// lifecycles (sync, failure, automatic retry, a new sync, wavegate restarts), judged
    /// after every event with the status stored by the step before: the gate is Degraded
    /// only when the attempt running now has run for its full timeout, and it is Degraded
    /// by then (unless wavegate restarted during a retry, which only lengthens the wait).
    /// Whatever the clock does, the stored `validUntil` is never beyond now + validity.
    #[test]
    fn no_sync_attempt_fails_before_its_full_timeout(
        events in proptest::collection::vec(op_event(), 1..40)
    ) {
        let limit = Duration::from_secs(600);
        let mut g = gate();
        g.spec.timeout = Some("10m".into());
        let checks = vec![("forgejo-http".to_string(), Verdict::progressing("no endpoints"))];
        let blind = HashMap::new();
        let mut now = ts("2026-12-01T09:00:00Z");
        let mut stored: Option<WaveGateStatus> = None;
        let mut clock = AttemptClock::default();
        // Argo CD's operation state, and the truth the oracle keeps: when the attempt that
        // runs now really began, and whether wavegate restarted since.
        let mut op: Option<serde_json::Value> = None;
        let mut began: Option<(Timestamp, bool)> = None;
        let mut operations = 0;
        let mut stepped_back = false;
        for (step, event) in events.iter().enumerate() {
            match event {
                OpEvent::NewSync => {
                    operations += 1;
                    op = Some(serde_json::json!({"phase": "Running",
                        "startedAt": now.to_string(), "retryCount": 0}));
                    began = Some((now, false));
                }
                OpEvent::AttemptFails => {
                    if let Some(o) = op.as_mut().filter(|o| o["finishedAt"].is_null()) {
                        o["retryCount"] = (o["retryCount"].as_i64().unwrap() + 1).into();
                        o["finishedAt"] = now.to_string().into();
                        began = None;
                    }
                }
                OpEvent::RetryStarts => {
                    if let Some(o) = op.as_mut().filter(|o| o["finishedAt"].is_string()) {
                        o.as_object_mut().unwrap().remove("finishedAt");
                        began = Some((now, false));
                    }
                }
                OpEvent::OperationEnds => {
                    op = None;
                    began = None;
                }
                OpEvent::Restart => {
                    clock = AttemptClock::default();
                    if let Some((_, restarted)) = began.as_mut() {
                        *restarted = true;
                    }
                }
                OpEvent::ClockBack => {
                    // What was written an hour "ahead" (the Ready condition's time) now
                    // lies in the future: the wait may only grow, so liveness is not
                    // asked of this attempt.
                    now -= Duration::from_secs(3600);
                    stepped_back = true;
                }
                OpEvent::ClockForward => now += Duration::from_secs(600),
                OpEvent::Wait => now += Duration::from_secs(170),
            }
            let app = serde_json::json!({"metadata": {"uid": format!("app-{operations}")},
                "status": {"operationState": op.clone().unwrap_or_default()}});
            let started = clock.started(&app, now);
            let since = waiting_since(&g, stored.as_ref(), started);
            let waited_now = waited(since, now);
            let health = gate_health(&checks, &blind, Some(("10m", limit)), waited_now);
            let at = format!("step {step} ({event:?}) of {events:?}");
            if let Some((began_at, restarted)) = began {
                let ran = waited(Some(began_at), now);
                proptest::prop_assert!(
                    health.status != HealthStatus::Degraded || ran >= limit,
                    "{}: Degraded after {:?} of the attempt", at, ran
                );
                let first_attempt = op.as_ref().is_some_and(|o| o["retryCount"] == 0);
                if ran >= limit && (first_attempt || !restarted) && !stepped_back {
                    proptest::prop_assert_eq!(health.status, HealthStatus::Degraded, "{}", at);
                }
            }
            let status = next_status(&g, stored.as_ref(), checks.clone(), health, since, now, Some(VALIDITY));
            let until = status.health.as_ref().and_then(|h| h.valid_until);
            proptest::prop_assert!(
                until.is_some_and(|u| u <= now.as_second() + VALIDITY.as_secs() as i64),
                "{}: validUntil {:?} beyond now + validity ({})", at, until, now.as_second()
            );
            stored = Some(status);
        }
    }
}
