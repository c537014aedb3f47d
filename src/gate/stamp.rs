//! The verdict stamp: a metadata annotation on each WaveGate that changes whenever what Argo CD
//! shows for the gate changes, so that Argo CD looks at the gate again.
//!
//! Argo CD 3.x does not look again at a resource whose `status` alone changed, unless its health
//! *status* changed with it: `resource.compareoptions` ignores `/status` of every kind by default
//! (argo-cd `util/settings/settings.go`, `GetResourceOverrides`, `ignoreResourceStatusField`
//! "all"), those ignores also mask resource updates (`GetIgnoreResourceUpdatesOverrides`, with
//! `ignoreDifferencesOnResourceUpdates` true by default), and `controller/cache/cache.go`
//! `skipResourceUpdate` drops an update whose hash and `Health.Status` are unchanged. A gate whose
//! message goes from Argo CD's own "waiting for wavegate to evaluate generation 1" to "Service
//! cicd/forgejo … matches no pods" stays Progressing, so Argo CD's UI would keep the old words
//! until its next periodic refresh (`timeout.reconciliation`, 120 s plus up to 60 s of jitter).
//! `metadata` is hashed: writing the stamp makes Argo CD refresh the Application's tree, which
//! reads the new status through the health script. Where the health status itself changes,
//! Argo CD looks again without it, and no stamp is written ([`next`]).

use super::crd::WaveGateStatus;
use crate::health::HealthStatus;

/// The annotation. The shipped ValidatingAdmissionPolicy (deploy/base/admission-policy.yaml)
/// lets wavegate's ServiceAccount change this annotation of a WaveGate and nothing else.
pub const ANNOTATION: &str = "wavegate.dev/verdict";

/// What Argo CD's health script reads from a status (argocd/argocd-cm `wavegate.dev_WaveGate`:
/// the generation it judged, the health status and message), as a short stable string: equal
/// stamps mean Argo CD would show the same thing. The message enters as a digest (FNV-1a, 64
/// bit), which keeps the annotation short whatever the message's length.
pub fn of(status: &WaveGateStatus) -> String {
    let generation = status
        .observed_generation
        .map_or_else(|| "-".to_string(), |g| g.to_string());
    let (health, message) = status
        .health
        .as_ref()
        .map_or(("None", ""), |h| (h.status.as_str(), h.message.as_str()));
    format!("{generation}/{health}/{:016x}", fnv1a(message.as_bytes()))
}

/// What Argo CD's cluster cache recorded as a gate's health status when it last saw the gate
/// with status `before` and `generation`: the health script's answer, which `skipResourceUpdate`
/// compares with the next one. `None` when it cannot be told: the script also turns a verdict
/// past its `validUntil` into Progressing, as of the moment Argo CD saw it, which may be any
/// time since the write; a verdict that expires within [`CLOCK_MARGIN`] of `now` may have
/// been seen either way (or by a clock a little ahead of ours).
fn recorded_health(
    before: Option<&WaveGateStatus>,
    generation: Option<i64>,
    now: i64,
) -> Option<HealthStatus> {
    let Some(before) = before else {
        return Some(HealthStatus::Progressing);
    };
    if before.observed_generation.is_none()
        || (generation.is_some() && before.observed_generation != generation)
    {
        return Some(HealthStatus::Progressing);
    }
    let health = before.health.as_ref()?;
    match health.valid_until {
        Some(until) if until < now.saturating_add(CLOCK_MARGIN) => None,
        _ => Some(health.status),
    }
}

/// How close to `now` a verdict's expiry makes Argo CD's last judgement of it uncertain.
const CLOCK_MARGIN: i64 = 30;

/// The stamp to write once `status` is written over `before` (the gate's status until then, at
/// `generation`, stamped `current`); `None` when Argo CD looks again without one or would show
/// nothing new.
///
/// - Argo CD looks again by itself when the health status it records changes
///   (`skipResourceUpdate`), which is most verdict changes (Progressing → Healthy): no stamp,
///   one write instead of two — but only when the gate's stamp names `before`. Argo CD may not
///   have seen `before` at all: after a relist of its watch it compares the gate with the last
///   version it did see, and only a stamp that moved on since then tells them apart. So a
///   change is left unstamped only right after a stamped one (or the first verdict), never
///   twice in a row.
/// - Otherwise a new message, generation or status is news, and so is the renewal of a verdict
///   whose `validUntil` had passed, which the health script shows as expired ("… is wavegate
///   running?") whatever it says.
/// - The stamp is [`of`] the status and `version`, the resourceVersion the status write
///   produced: a stamp never repeats one Argo CD saw before, even where the status does (after
///   a relist, Argo CD compares with whatever version it saw last, and a repeated stamp with the
///   same health status would look like no change at all).
pub fn next(
    current: Option<&str>,
    before: Option<&WaveGateStatus>,
    generation: Option<i64>,
    status: &WaveGateStatus,
    version: &str,
    now: i64,
) -> Option<String> {
    let after = status.health.as_ref().map(|h| h.status);
    if let (Some(recorded), Some(after)) = (recorded_health(before, generation, now), after)
        && recorded != after
        && names(current, before)
    {
        return None;
    }
    let fresh = of(status);
    let expired = before
        .and_then(|b| b.health.as_ref())
        .and_then(|h| h.valid_until)
        .is_some_and(|until| until < now);
    let news = expired || before.map(of).as_deref() != Some(fresh.as_str());
    news.then(|| format!("{fresh}/{version}"))
}

/// Whether the stamp `current` was written for `status` (both absent: a gate's first verdict).
pub fn names(current: Option<&str>, status: Option<&WaveGateStatus>) -> bool {
    match (current, status) {
        (None, None) => true,
        // The version is digits (etcd's revisions); anything else is a stamp of an older
        // wavegate (`…/again`, or none), which may have stood on several statuses: it names none.
        (Some(stamp), Some(status)) => stamp.rsplit_once('/').is_some_and(|(stamped, version)| {
            !version.is_empty()
                && version.bytes().all(|b| b.is_ascii_digit())
                && stamped == of(status)
        }),
        _ => false,
    }
}

pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::crd::GateHealth;

    fn status(generation: Option<i64>, health: Option<(HealthStatus, &str)>) -> WaveGateStatus {
        WaveGateStatus {
            observed_generation: generation,
            health: health.map(|(status, message)| GateHealth {
                status,
                message: message.into(),
                valid_until: None,
            }),
            checks: vec![],
            conditions: vec![],
        }
    }

    #[test]
    fn changes_with_each_field_argo_cd_reads() {
        let base = of(&status(
            Some(1),
            Some((HealthStatus::Progressing, "no pods")),
        ));
        for other in [
            status(Some(2), Some((HealthStatus::Progressing, "no pods"))),
            status(Some(1), Some((HealthStatus::Healthy, "no pods"))),
            status(
                Some(1),
                Some((HealthStatus::Progressing, "no ready endpoints")),
            ),
            status(None, Some((HealthStatus::Progressing, "no pods"))),
            status(Some(1), None),
        ] {
            assert_ne!(of(&other), base, "{other:?}");
        }
    }

    #[test]
    fn ignores_what_argo_cd_does_not_show() {
        // The renewal of validUntil and the per-check rows do not change what Argo CD shows.
        let mut renewed = status(Some(1), Some((HealthStatus::Progressing, "no pods")));
        if let Some(h) = renewed.health.as_mut() {
            h.valid_until = Some(1_900_000_000);
        }
        assert_eq!(
            of(&renewed),
            of(&status(
                Some(1),
                Some((HealthStatus::Progressing, "no pods"))
            ))
        );
    }

    fn verdict(generation: i64, health: HealthStatus, message: &str, until: i64) -> WaveGateStatus {
        let mut s = status(Some(generation), Some((health, message)));
        if let Some(h) = s.health.as_mut() {
            h.valid_until = Some(until);
        }
        s
    }

    /// The stamp a write producing resourceVersion `version` gives `s`.
    fn stamp_of(s: &WaveGateStatus, version: &str) -> String {
        format!("{}/{version}", of(s))
    }

    #[test]
    fn a_new_message_under_the_same_status_is_stamped() {
        let now = 1_000;
        let before = verdict(1, HealthStatus::Progressing, "no pods", now + 150);
        let after = verdict(1, HealthStatus::Progressing, "not ready", now + 180);
        let stamp = stamp_of(&before, "10");
        assert_eq!(
            next(Some(&stamp), Some(&before), Some(1), &after, "12", now),
            Some(stamp_of(&after, "12"))
        );
        // The first verdict: Argo CD showed its own "waiting for wavegate" Progressing.
        assert_eq!(
            next(None, None, Some(1), &before, "9", now),
            Some(stamp_of(&before, "9"))
        );
        // A renewal shows nothing new.
        let renewed = verdict(1, HealthStatus::Progressing, "no pods", now + 180);
        assert_eq!(
            next(Some(&stamp), Some(&before), Some(1), &renewed, "12", now),
            None
        );
    }

    #[test]
    fn a_change_of_health_status_is_not_stamped_argo_cd_notices_it() {
        let now = 1_000;
        let before = verdict(1, HealthStatus::Progressing, "no pods", now + 150);
        let stamp = stamp_of(&before, "10");
        let after = verdict(1, HealthStatus::Healthy, "1 ready", now + 180);
        assert_eq!(
            next(Some(&stamp), Some(&before), Some(1), &after, "12", now),
            None
        );
        // Unless Argo CD may have recorded the old verdict as expired (Progressing as well).
        let expiring = verdict(1, HealthStatus::Healthy, "1 ready", now + 10);
        let progressing = verdict(1, HealthStatus::Progressing, "no pods", now + 180);
        let stamp_expiring = stamp_of(&expiring, "10");
        assert!(
            next(
                Some(&stamp_expiring),
                Some(&expiring),
                Some(1),
                &progressing,
                "12",
                now
            )
            .is_some()
        );
        // A new generation: Argo CD recorded "waiting for wavegate" (Progressing).
        let new_generation = verdict(2, HealthStatus::Progressing, "no pods", now + 180);
        assert!(
            next(
                Some(&stamp),
                Some(&before),
                Some(2),
                &new_generation,
                "12",
                now
            )
            .is_some()
        );
        let healthy = verdict(2, HealthStatus::Healthy, "1 ready", now + 180);
        assert_eq!(
            next(Some(&stamp), Some(&before), Some(2), &healthy, "12", now),
            None
        );
    }

    #[test]
    fn two_changes_in_a_row_are_not_both_left_unstamped() {
        // Progressing "a" (stamped) → Healthy (not stamped) → Progressing "b": Argo CD, relisting
        // after missing the Healthy, compares "b" with "a": same status, so only a new stamp
        // makes it look.
        let now = 1_000;
        let a = verdict(1, HealthStatus::Progressing, "a", now + 180);
        let healthy = verdict(1, HealthStatus::Healthy, "ok", now + 180);
        let b = verdict(1, HealthStatus::Progressing, "b", now + 180);
        let stamp = stamp_of(&a, "10");
        assert_eq!(
            next(Some(&stamp), Some(&a), Some(1), &healthy, "12", now),
            None
        );
        assert_eq!(
            next(Some(&stamp), Some(&healthy), Some(1), &b, "13", now),
            Some(stamp_of(&b, "13"))
        );
    }

    #[test]
    fn a_stamp_never_repeats_even_where_the_status_does() {
        let now = 1_000;
        let a = verdict(1, HealthStatus::Progressing, "a", now + 180);
        let b = verdict(1, HealthStatus::Progressing, "b", now + 180);
        let first = next(None, None, Some(1), &a, "10", now).unwrap();
        let second = next(Some(&first), Some(&a), Some(1), &b, "12", now).unwrap();
        let third = next(Some(&second), Some(&b), Some(1), &a, "14", now).unwrap();
        assert_ne!(first, third);
    }

    #[test]
    fn a_stamp_of_an_older_wavegate_names_no_status() {
        // Before the version was part of the stamp, one value could stand on several statuses
        // ("…/again", or the bare content): it must not let a change go unstamped.
        let now = 1_000;
        let a = verdict(1, HealthStatus::Progressing, "a", now + 180);
        let healthy = verdict(1, HealthStatus::Healthy, "ok", now + 180);
        for old in [of(&a), format!("{}/again", of(&a))] {
            assert!(!names(Some(&old), Some(&a)), "{old}");
            assert!(next(Some(&old), Some(&a), Some(1), &healthy, "12", now).is_some());
        }
        assert!(names(Some(&stamp_of(&a, "10")), Some(&a)));
    }

    #[test]
    fn the_renewal_of_an_expired_verdict_is_stamped() {
        let now = 1_000;
        let before = verdict(1, HealthStatus::Healthy, "1 ready", now - 5);
        let renewed = verdict(1, HealthStatus::Healthy, "1 ready", now + 180);
        let stamp = stamp_of(&before, "10");
        assert_eq!(
            next(Some(&stamp), Some(&before), Some(1), &renewed, "12", now),
            Some(stamp_of(&renewed, "12"))
        );
    }

    /// Argo CD, as far as the stamp matters, written from its source rather than from
    /// [`next`]: its cluster cache records, at each event, the health script's answer and a
    /// hash of everything but `status` (controller/cache/cache.go); an event that changes
    /// neither the recorded health status nor the hash is skipped (`skipResourceUpdate`),
    /// any other refreshes the Application, which then shows the script's answer.
    struct ArgoCd {
        recorded: Option<(HealthStatus, Hashed)>,
        shown: (HealthStatus, String),
        /// Its watch is down: events are missed until the relist, which compares the gate as
        /// it then is with the last version recorded (gitops-engine `replaceResourceCache`).
        blind: bool,
    }

    /// What Argo CD hashes of a gate, as far as this test changes it: the generation (a new
    /// spec), the stamp, and someone else's edits of metadata (a label, an annotation).
    type Hashed = (i64, Option<String>, u32);

    /// The shipped health script (argocd/resource_customizations/…/WaveGate/health.lua), read
    /// afresh: generation, then health, then expiry, then the verdict.
    fn script(
        generation: i64,
        status: Option<&WaveGateStatus>,
        now: i64,
    ) -> (HealthStatus, String) {
        let Some(s) = status.filter(|s| s.observed_generation == Some(generation)) else {
            return (
                HealthStatus::Progressing,
                format!("waiting for {generation}"),
            );
        };
        let Some(h) = &s.health else {
            return (HealthStatus::Progressing, "no health".into());
        };
        match h.valid_until {
            Some(until) if until < now => {
                (HealthStatus::Progressing, format!("{:?} expired", h.status))
            }
            _ => (h.status, h.message.clone()),
        }
    }

    impl ArgoCd {
        fn event(&mut self, hash: Hashed, status: Option<&WaveGateStatus>, now: i64) {
            if self.blind {
                return;
            }
            let health = script(hash.0, status, now);
            let skipped = self
                .recorded
                .as_ref()
                .is_some_and(|(h, x)| *h == health.0 && *x == hash);
            if !skipped {
                self.shown = health.clone();
            }
            self.recorded = Some((health.0, hash));
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::testing::proptest_config::config(2000))]

        /// Whatever wavegate writes, whenever, and whatever Argo CD changes in between: once
        /// a status (and its stamp, if any) is written, Argo CD shows what its health script
        /// says of the gate as it now is, without waiting for a periodic refresh.
        #[test]
        fn argo_cd_shows_every_written_verdict_at_once(
            steps in proptest::collection::vec((0u8..8, 0u8..3, 0u8..3, 0i64..200), 1..60),
        ) {
            let validity = std::time::Duration::from_secs(180);
            let mut now = 1_000_000;
            let (mut generation, mut edits, mut version) = (1, 0, 0u64);
            let mut stored: Option<WaveGateStatus> = None;
            let mut stamp: Option<String> = None;
            let mut argo = ArgoCd { recorded: None, shown: (HealthStatus::Progressing, String::new()), blind: false };
            argo.event((generation, stamp.clone(), edits), None, now);
            for (action, health, message, seconds) in steps {
                match action {
                    0 => now += seconds,
                    // Argo CD applies a new spec.
                    1 => {
                        generation += 1;
                        argo.event((generation, stamp.clone(), edits), stored.as_ref(), now);
                    }
                    // Someone edits the gate's metadata.
                    2 => {
                        edits += 1;
                        argo.event((generation, stamp.clone(), edits), stored.as_ref(), now);
                    }
                    // Argo CD's periodic refresh (timeout.reconciliation).
                    3 => argo.shown = script(generation, stored.as_ref(), now),
                    // Its watch of WaveGates breaks...
                    4 => argo.blind = true,
                    // ... and relists: once it has, it shows what the script says of the gate
                    // (unless the verdict expired since, unrenewed: that shows at the next
                    // periodic refresh, by design).
                    5 => {
                        let was_blind = std::mem::replace(&mut argo.blind, false);
                        argo.event((generation, stamp.clone(), edits), stored.as_ref(), now);
                        let expired = stored
                            .as_ref()
                            .and_then(|s| s.health.as_ref())
                            .and_then(|h| h.valid_until)
                            .is_some_and(|until| until < now);
                        if was_blind && !expired {
                            proptest::prop_assert_eq!(&argo.shown, &script(generation, stored.as_ref(), now), "after a relist");
                        }
                    }
                    _ => {
                        let health = [HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded][health as usize];
                        let message = ["a", "b", "c"][message as usize];
                        let previous = stored.as_ref().and_then(|s| s.health.as_ref());
                        let same = previous.is_some_and(|p| p.status == health && p.message == message)
                            && stored.as_ref().and_then(|s| s.observed_generation) == Some(generation);
                        let until = crate::written::valid_until(previous.and_then(|p| p.valid_until), same, validity, now);
                        let written = verdict(generation, health, message, until);
                        version += 1;
                        let want = next(stamp.as_deref(), stored.as_ref(), Some(generation), &written, &version.to_string(), now);
                        argo.event((generation, stamp.clone(), edits), Some(&written), now);
                        if let Some(want) = want {
                            proptest::prop_assert_ne!(Some(&want), stamp.as_ref(), "a stamp that changes nothing");
                            stamp = Some(want);
                            argo.event((generation, stamp.clone(), edits), Some(&written), now);
                        }
                        stored = Some(written);
                        if !argo.blind {
                            proptest::prop_assert_eq!(&argo.shown, &script(generation, stored.as_ref(), now));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn is_short_and_stable() {
        let long = "x".repeat(10_000);
        let s = of(&status(Some(7), Some((HealthStatus::Degraded, &long))));
        assert!(s.len() < 64, "{s}");
        // A fixed value: the stamp must not change between wavegate builds for the same status
        // (every gate would be patched once after an upgrade otherwise).
        assert_eq!(
            of(&status(Some(1), Some((HealthStatus::Healthy, "")))),
            "1/Healthy/cbf29ce484222325"
        );
    }
}
