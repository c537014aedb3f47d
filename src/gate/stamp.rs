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
//! reads the new status through the health script.

use super::crd::WaveGateStatus;

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

/// The stamp to write once `status` is written over a gate stamped `current`; `None` when Argo
/// CD would show nothing new. A verdict whose `validUntil` had passed (`expired`) is shown by
/// the health script as expired ("… is wavegate running?"), so its renewal changes what Argo CD
/// shows even when the status itself is unchanged: the stamp then changes too.
pub fn next(current: Option<&str>, status: &WaveGateStatus, expired: bool) -> Option<String> {
    let fresh = of(status);
    let want = if expired && current == Some(fresh.as_str()) {
        format!("{fresh}/renewed")
    } else {
        fresh
    };
    (current != Some(want.as_str())).then_some(want)
}

fn fnv1a(bytes: &[u8]) -> u64 {
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
    use crate::health::HealthStatus;

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

    #[test]
    fn next_changes_only_when_argo_cd_would_show_something_new() {
        let s = status(Some(1), Some((HealthStatus::Progressing, "no pods")));
        let stamp = of(&s);
        assert_eq!(next(None, &s, false), Some(stamp.clone()));
        assert_eq!(next(Some(&stamp), &s, false), None);
        // Argo CD showed the verdict as expired: the same status renewed is news.
        let renewed = next(Some(&stamp), &s, true).unwrap();
        assert_ne!(renewed, stamp);
        // ... and the next expiry of the renewed one is news again.
        assert_eq!(next(Some(&renewed), &s, true), Some(stamp.clone()));
        let other = status(Some(1), Some((HealthStatus::Progressing, "not ready")));
        assert_eq!(next(Some(&stamp), &other, false), Some(of(&other)));
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
