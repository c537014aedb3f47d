//! What the gate controller does with one WaveGate, decided from what it read: the status to
//! write (if the stored one is not already it), when to look again, and the Event to send.
//! Pure (no I/O, no clock: the caller passes `now`), so the controller is read → decide →
//! write and every rule here — the timeout (`super::timeout`), the requeue, the Event — is a
//! unit test (compare controller-rs, whose `reconcile` returns an `Action`).

use super::crd::{WaveGate, WaveGateStatus};
use super::status::next_status;
pub(crate) use super::timeout::SyncClock;
use super::timeout::{health_over_time, parse_timeout, until_timeout, waited, waiting_since};
use crate::events::{self, Transition};
use crate::health::{HealthStatus, Verdict};
use crate::written;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::time::Duration;

/// Everything [`decide`] needs that the controller read.
pub(crate) struct Inputs<'a> {
    pub gate: &'a WaveGate,
    /// Each check's verdict, by check name, in spec order.
    pub verdicts: Vec<(String, Verdict)>,
    /// Checks wavegate could not see (check name → why): see [`gate_health`].
    pub blind: HashMap<String, String>,
    /// What the gate reads through a watch that has not listed yet: its checks, and the
    /// Application that manages it (see [`decide`]).
    pub cold: Vec<String>,
    /// The status to compare with: what the object carries, or what this controller wrote
    /// while the cache has not caught up with it.
    pub stored: Option<WaveGateStatus>,
    pub sync: SyncClock,
    /// A check is answered by probing (CockroachDB): a verdict that is not Healthy is looked at
    /// again after the probe's recheck interval, as nothing in the API server announces a change.
    pub probing: bool,
}

/// How the controller runs, as far as a decision is concerned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// How long a written verdict counts (`health.validUntil`); `None`: forever.
    pub status_validity: Option<Duration>,
    /// How soon a probed, not yet Healthy gate is judged again.
    pub probe_recheck: Duration,
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    /// The status the gate should carry.
    pub status: WaveGateStatus,
    /// Whether it differs from the stored one, so it must be written.
    pub write: bool,
    /// When to judge again without any change; `None`: at the next change or resync.
    pub requeue: Option<Duration>,
    /// The Event the transition deserves, sent only after the write succeeded.
    pub event: Option<Transition>,
    /// A `spec.timeout` that does not parse: the gate is judged without it, and the controller
    /// logs why.
    pub ignored_timeout: Option<String>,
    /// Why the status that should be written is not, for now: what has not listed yet.
    pub held: Option<String>,
}

impl Decision {
    /// The health the decided status carries.
    pub(crate) fn health(&self) -> HealthStatus {
        health_of(&self.status)
    }
}

/// The health a status carries, `Unknown` before any verdict.
pub(crate) fn health_of(s: &WaveGateStatus) -> HealthStatus {
    s.health
        .as_ref()
        .map_or(HealthStatus::Unknown, |h| h.status)
}

pub(crate) fn decide(inputs: Inputs<'_>, rules: &Rules, now: Timestamp) -> Decision {
    let Inputs {
        gate,
        verdicts,
        blind,
        cold,
        stored,
        sync,
        probing,
    } = inputs;
    let (timeout, ignored_timeout) = match gate.spec.timeout.as_deref() {
        None => (None, None),
        Some(t) => match parse_timeout(t) {
            Ok(d) => (Some((t, d)), None),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let since = waiting_since(gate, stored.as_ref(), sync.started());
    let waited = waited(since, now);
    let (health, timed_out) = health_over_time(&verdicts, &blind, timeout, waited, &sync);
    let status = next_status(
        gate,
        stored.as_ref(),
        verdicts,
        health,
        since,
        now,
        rules.status_validity,
    );
    let health = health_of(&status);
    let mut requeue = until_timeout(health, timeout.map(|(_, d)| d), waited)
        // One more second: the API server keeps whole seconds, so `since` can be up to a
        // second later than the moment waiting began.
        .map(|d| d + Duration::from_secs(1));
    if probing && health != HealthStatus::Healthy {
        requeue = Some(requeue.map_or(rules.probe_recheck, |d| d.min(rules.probe_recheck)));
    }
    let write = stored.as_ref() != Some(&status);
    // A watch that has not listed yet: the verdict another writer (or this one) stored is
    // kept while it counts (`written::kept_over_cold`).
    if write
        && !cold.is_empty()
        && let Some(kept) = stored.as_ref()
        && let Some(recheck) = written::kept_over_cold(
            kept.health.as_ref().and_then(|h| h.valid_until),
            now.as_second(),
        )
    {
        return Decision {
            status: kept.clone(),
            write: false,
            requeue: Some(requeue.map_or(recheck, |d| d.min(recheck))),
            event: None,
            ignored_timeout,
            held: Some(format!(
                "not written over a verdict that still counts: {} not listed yet",
                cold.join(", ")
            )),
        };
    }
    // Compared with the status the object carried, not with memory (src/events.rs).
    let event = write
        .then(|| {
            let old = stored
                .as_ref()
                .and_then(|s| s.health.as_ref())
                .map(|h| h.status);
            let new = status.health.as_ref()?;
            events::transition(old, new.status, &new.message, timed_out)
        })
        .flatten();
    Decision {
        status,
        write,
        requeue,
        event,
        ignored_timeout,
        held: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::crd::{Entry, GateCheck, ServiceCheck, WaveGateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    const RULES: Rules = Rules {
        status_validity: Some(Duration::from_secs(180)),
        probe_recheck: Duration::from_secs(5),
    };

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// A gate `ddb/databases-created` at generation 1 with a 10-minute timeout, created at
    /// 06:00:00.
    fn gate(timeout: Option<&str>) -> WaveGate {
        let mut g = WaveGate::new(
            "databases-created",
            WaveGateSpec {
                timeout: timeout.map(Into::into),
                checks: vec![GateCheck::new(
                    "http",
                    Entry::Service(ServiceCheck {
                        name: "forgejo".into(),
                        namespace: None,
                        min_ready: None,
                    }),
                )],
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

    fn waiting() -> Vec<(String, Verdict)> {
        vec![("http".into(), Verdict::progressing("no ready endpoints"))]
    }

    fn inputs(gate: &WaveGate, stored: Option<WaveGateStatus>, sync: SyncClock) -> Inputs<'_> {
        Inputs {
            gate,
            verdicts: waiting(),
            blind: HashMap::new(),
            cold: Vec::new(),
            stored,
            sync,
            probing: false,
        }
    }

    #[test]
    fn a_first_verdict_is_written_with_its_event_and_a_requeue_at_the_timeout() {
        let g = gate(Some("10m"));
        let d = decide(
            inputs(&g, None, SyncClock::Unmanaged),
            &RULES,
            ts("2026-11-30T06:04:00Z"),
        );
        assert_eq!(d.health(), HealthStatus::Progressing);
        assert!(d.write);
        assert_eq!(d.event.as_ref().map(|e| e.reason), Some("Progressing"));
        // 6 minutes left, plus the API server's whole second.
        assert_eq!(d.requeue, Some(Duration::from_secs(361)));
    }

    #[test]
    fn the_same_status_again_is_neither_written_nor_announced() {
        let g = gate(Some("10m"));
        let now = ts("2026-11-30T06:04:00Z");
        let first = decide(inputs(&g, None, SyncClock::Unmanaged), &RULES, now);
        let again = decide(
            inputs(&g, Some(first.status.clone()), SyncClock::Unmanaged),
            &RULES,
            now,
        );
        assert!(!again.write);
        assert_eq!(again.event, None);
        assert_eq!(again.status, first.status);
    }

    #[test]
    fn the_timeout_fires_with_a_timed_out_event_and_no_requeue() {
        let g = gate(Some("10m"));
        let d = decide(
            inputs(&g, None, SyncClock::Read(None)),
            &RULES,
            ts("2026-11-30T06:10:00Z"),
        );
        assert_eq!(d.health(), HealthStatus::Degraded);
        let event = d.event.expect("an event");
        assert_eq!(event.reason, "TimedOut");
        assert!(event.warning);
        assert_eq!(d.requeue, None);
    }

    #[test]
    fn a_blind_sync_clock_never_times_out() {
        let g = gate(Some("10m"));
        let why = "Application argocd/forgejo was not found".to_string();
        let d = decide(
            inputs(&g, None, SyncClock::Blind(why.clone())),
            &RULES,
            ts("2026-11-30T07:00:00Z"),
        );
        assert_eq!(d.health(), HealthStatus::Progressing);
        let message = &d.status.health.as_ref().unwrap().message;
        assert!(
            message.contains("the 10m timeout is not applied"),
            "{message}"
        );
        assert!(message.contains(&why), "{message}");
        assert_ne!(d.event.map(|e| e.reason), Some("TimedOut"));
    }

    #[test]
    fn a_new_sync_attempt_gets_the_full_timeout() {
        let g = gate(Some("10m"));
        // Waiting since creation (06:00); the attempt that applies the gate began at 06:55.
        let d = decide(
            inputs(&g, None, SyncClock::Read(Some(ts("2026-11-30T06:55:00Z")))),
            &RULES,
            ts("2026-11-30T07:00:00Z"),
        );
        assert_eq!(d.health(), HealthStatus::Progressing);
        assert_eq!(d.requeue, Some(Duration::from_secs(301)));
        let unmanaged = decide(
            inputs(&g, None, SyncClock::Unmanaged),
            &RULES,
            ts("2026-11-30T07:00:00Z"),
        );
        assert_eq!(unmanaged.health(), HealthStatus::Degraded);
    }

    #[test]
    fn a_probed_gate_is_looked_at_again_at_the_recheck_interval() {
        let g = gate(Some("10m"));
        let mut i = inputs(&g, None, SyncClock::Unmanaged);
        i.probing = true;
        let d = decide(i, &RULES, ts("2026-11-30T06:04:00Z"));
        assert_eq!(d.requeue, Some(RULES.probe_recheck));

        let no_timeout = gate(None);
        let mut i = inputs(&no_timeout, None, SyncClock::Unmanaged);
        i.probing = true;
        assert_eq!(
            decide(i, &RULES, ts("2026-11-30T06:04:00Z")).requeue,
            Some(RULES.probe_recheck)
        );

        let mut i = inputs(&g, None, SyncClock::Unmanaged);
        i.probing = true;
        i.verdicts = vec![("http".into(), Verdict::healthy("3 ready endpoints"))];
        assert_eq!(decide(i, &RULES, ts("2026-11-30T06:04:00Z")).requeue, None);
    }

    #[test]
    fn an_unparsable_timeout_is_ignored_and_reported() {
        let g = gate(Some("ten minutes"));
        let d = decide(
            inputs(&g, None, SyncClock::Unmanaged),
            &RULES,
            ts("2026-11-30T09:00:00Z"),
        );
        assert_eq!(d.health(), HealthStatus::Progressing);
        assert_eq!(d.requeue, None);
        assert!(
            d.ignored_timeout
                .as_deref()
                .is_some_and(|e| e.contains("ten minutes")),
            "{:?}",
            d.ignored_timeout
        );
    }

    #[test]
    fn a_blind_check_holds_the_timeout_but_the_gate_still_writes() {
        let g = gate(Some("10m"));
        let mut i = inputs(&g, None, SyncClock::Read(None));
        i.blind = HashMap::from([("http".to_string(), "the cache is relisting".to_string())]);
        let d = decide(i, &RULES, ts("2026-11-30T06:30:00Z"));
        assert_eq!(d.health(), HealthStatus::Progressing);
        assert!(d.write);
        assert_ne!(d.event.map(|e| e.reason), Some("TimedOut"));
    }

    /// A cluster gained from another replica: the previous owner wrote Healthy, valid until
    /// 06:33; the successor's Service watch has not listed yet. Nothing is written over it
    /// until the watch lists (judged again within a second) or the verdict runs out.
    #[test]
    fn a_cold_watch_does_not_overwrite_a_verdict_that_still_counts() {
        let g = gate(Some("10m"));
        let healthy_at = ts("2026-11-30T06:30:00Z");
        let mut healthy = inputs(&g, None, SyncClock::Unmanaged);
        healthy.verdicts = vec![("http".into(), Verdict::healthy("1 ready endpoint"))];
        let previous = decide(healthy, &RULES, healthy_at).status;
        let cold = |now: &str| {
            let mut i = inputs(&g, Some(previous.clone()), SyncClock::Unmanaged);
            let why = "the cache of services in ddb has not synced yet";
            i.verdicts = vec![("http".into(), Verdict::progressing(why))];
            i.blind = HashMap::from([("http".to_string(), why.to_string())]);
            i.cold = vec!["check http".into()];
            decide(i, &RULES, ts(now))
        };
        let d = cold("2026-11-30T06:31:00Z");
        assert!(!d.write, "{:?}", d.status.health);
        assert_eq!(d.status, previous);
        assert_eq!(d.health(), HealthStatus::Healthy);
        assert_eq!(d.event, None);
        assert_eq!(d.requeue, Some(written::COLD_RECHECK));
        assert!(d.held.unwrap().contains("check http not listed yet"));
        // Run out: Argo CD reads it as Progressing anyway, and the reason is written.
        let d = cold("2026-11-30T06:33:00Z");
        assert!(d.write);
        assert_eq!(d.health(), HealthStatus::Progressing);
        // A verdict without validUntil (--status-validity 0) would never run out: not kept.
        let mut i = inputs(&g, Some(previous.clone()), SyncClock::Unmanaged);
        i.stored
            .as_mut()
            .unwrap()
            .health
            .as_mut()
            .unwrap()
            .valid_until = None;
        i.cold = vec!["check http".into()];
        assert!(decide(i, &RULES, ts("2026-11-30T06:31:00Z")).write);
    }

    /// A proven split CockroachDB cluster, a Database CNPG refused: definite failures.
    fn split() -> Verdict {
        Verdict::degraded("prod/cockroachdb: split cluster — 2 cluster IDs among 3 pods")
    }

    #[test]
    fn a_definite_failure_stays_degraded_when_the_sync_clock_cannot_be_read() {
        let g = gate(Some("10m"));
        let mut i = inputs(
            &g,
            None,
            SyncClock::Blind("Application argocd/forgejo was not found".into()),
        );
        i.verdicts = vec![("crdb".into(), split())];
        // Past the timeout: the clock cannot be read, so the timeout is not applied; the split
        // is about the cluster, not about the clock.
        let d = decide(i, &RULES, ts("2026-11-30T07:00:00Z"));
        assert_eq!(d.health(), HealthStatus::Degraded, "{:?}", d.status.health);
        assert_ne!(d.event.map(|e| e.reason), Some("TimedOut"));
    }

    #[test]
    fn a_definite_failure_stays_degraded_beside_a_blind_check() {
        let g = gate(Some("10m"));
        let mut i = inputs(&g, None, SyncClock::Read(None));
        i.verdicts = vec![
            ("crdb".into(), split()),
            (
                "http".into(),
                Verdict::progressing("the cache is relisting"),
            ),
        ];
        i.blind = HashMap::from([
            ("http".to_string(), "the cache is relisting".to_string()),
            (
                "crdb".to_string(),
                "pod cockroachdb-2 did not answer".to_string(),
            ),
        ]);
        let d = decide(i, &RULES, ts("2026-11-30T06:30:00Z"));
        assert_eq!(d.health(), HealthStatus::Degraded, "{:?}", d.status.health);
        let message = &d.status.health.as_ref().map(|h| h.message.clone());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("split cluster")),
            "{message:?}"
        );
        // Degraded by the check, not by the clock.
        assert_eq!(d.event.map(|e| e.reason), Some("Degraded"));
    }

    /// What the clock reads in the model: the kind of [`SyncClock`], and for `Read`, how many
    /// minutes after the gate's creation the sync attempt began (if one runs).
    #[derive(Debug, Clone)]
    enum ModelClock {
        Unmanaged,
        Read(Option<i64>),
        Blind,
    }

    proptest::proptest! {
        #![proptest_config(crate::testing::proptest_config::config(1000))]

        /// Timeout × blindness × definite failure × sync clock, against a model written from
        /// the contract (docs/contracts.md, "Grace periods, blindness and timeouts"), not from
        /// the code: a definite Degraded stays Degraded whatever the clock and blindness; the
        /// timeout turns waiting into Degraded only when the clock can be read and no check
        /// that is not Healthy is blind; nothing else is ever Degraded, and the gate is never
        /// Unknown or Missing.
        #[test]
        fn a_definite_failure_is_never_softened_and_waiting_fails_only_on_a_readable_clock(
            checks in proptest::collection::vec((0u8..6, proptest::bool::ANY), 1..4),
            timeout in proptest::option::of(1i64..30),
            waited in 0i64..60,
            clock in proptest::prop_oneof![
                proptest::strategy::Just(ModelClock::Unmanaged),
                proptest::strategy::Just(ModelClock::Blind),
                proptest::strategy::Strategy::prop_map(proptest::option::of(0i64..60), ModelClock::Read),
            ],
        ) {
            use proptest::prelude::*;
            let statuses = [
                HealthStatus::Healthy,
                HealthStatus::Progressing,
                HealthStatus::Degraded,
                HealthStatus::Suspended,
                HealthStatus::Missing,
                HealthStatus::Unknown,
            ];
            let spelled = timeout.map(|m| format!("{m}m"));
            let g = gate(spelled.as_deref());
            let created = ts("2026-11-30T06:00:00Z");
            let now = created + k8s_openapi::jiff::SignedDuration::from_mins(waited);
            let mut verdicts = Vec::new();
            let mut blind = HashMap::new();
            for (i, (status, is_blind)) in checks.iter().enumerate() {
                let name = format!("c{i}");
                let status = statuses[usize::from(*status)];
                verdicts.push((name.clone(), Verdict::new(status, format!("{status} evidence"))));
                if *is_blind {
                    blind.insert(name, "wavegate cannot see it".to_string());
                }
            }
            let sync = match &clock {
                ModelClock::Unmanaged => SyncClock::Unmanaged,
                ModelClock::Blind => SyncClock::Blind("cannot read the Application".into()),
                ModelClock::Read(started) => SyncClock::Read(started.map(|m| {
                    created + k8s_openapi::jiff::SignedDuration::from_mins(m)
                })),
            };
            let d = decide(
                Inputs { gate: &g, verdicts, blind, cold: Vec::new(), stored: None, sync, probing: false },
                &RULES,
                now,
            );

            // The model.
            let definite = checks.iter().any(|(s, _)| statuses[usize::from(*s)] == HealthStatus::Degraded);
            let all_healthy = checks.iter().all(|(s, _)| statuses[usize::from(*s)] == HealthStatus::Healthy);
            let blind_waiting = checks
                .iter()
                .any(|(s, b)| *b && statuses[usize::from(*s)] != HealthStatus::Healthy);
            let waiting_for = match &clock {
                ModelClock::Read(Some(started)) => waited - (*started).min(waited),
                _ => waited,
            };
            let past = timeout.is_some_and(|limit| waiting_for >= limit);
            let timed_out = past && !matches!(clock, ModelClock::Blind) && !blind_waiting;
            let expected = if definite {
                HealthStatus::Degraded
            } else if all_healthy {
                HealthStatus::Healthy
            } else if timed_out {
                HealthStatus::Degraded
            } else if past {
                // Held past the timeout only because wavegate cannot judge: waiting, saying so.
                HealthStatus::Progressing
            } else if checks.iter().all(|(s, _)| {
                matches!(statuses[usize::from(*s)], HealthStatus::Healthy | HealthStatus::Suspended)
            }) {
                HealthStatus::Suspended
            } else {
                HealthStatus::Progressing
            };
            prop_assert_eq!(d.health(), expected, "{:?}", d.status.health);
            let reason = d.event.map(|e| e.reason);
            prop_assert_eq!(
                reason == Some("TimedOut"),
                !definite && !all_healthy && timed_out,
                "event {:?}", reason
            );
        }
    }
}
