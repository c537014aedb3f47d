//! What the two writers (the gate controller, annotation mode) share about the verdicts they
//! write into the API server: who writes them, and how long Argo CD may believe one.

use std::time::Duration;

/// The field manager of every write (server-side apply of WaveGate status, annotation patches).
pub const FIELD_MANAGER: &str = "wavegate";

/// Three minutes: long enough that a wavegate restart (or an API server brown-out) does not
/// expire every settled verdict, short enough that a wave does not advance on a verdict from a
/// wavegate that stopped long ago. Confirmed every 90 s, so the resync (15 s) must be shorter.
pub(crate) const DEFAULT_STATUS_VALIDITY: Duration = Duration::from_secs(180);

/// Until when (Unix seconds) a verdict written at `now` counts: the `previous` deadline while
/// the verdict is the same and has at least half its validity left, so a settled verdict is
/// rewritten once per half validity (which is what proves to Argo CD that wavegate still stands
/// by it); otherwise `now + validity`.
///
/// A deadline further away than `now + validity` is never carried over: it was set by a clock
/// that has since stepped back, by a wavegate running with a longer validity, or by another
/// writer whose clock is ahead, and keeping it would let Argo CD believe the verdict longer
/// than this wavegate vouches for it.
pub(crate) fn valid_until(
    previous: Option<i64>,
    same_verdict: bool,
    validity: Duration,
    now: i64,
) -> i64 {
    let v = i64::try_from(validity.as_secs()).unwrap_or(i64::MAX / 4);
    previous
        .filter(|until| same_verdict && until - now >= v / 2 && until - now <= v)
        .unwrap_or(now.saturating_add(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_kept_until_half_the_validity_is_left_and_reset_by_a_new_verdict() {
        let v = Duration::from_secs(180);
        assert_eq!(valid_until(Some(1180), true, v, 1000), 1180);
        assert_eq!(valid_until(Some(1180), true, v, 1090), 1180);
        assert_eq!(valid_until(Some(1180), true, v, 1091), 1271);
        assert_eq!(valid_until(Some(1180), false, v, 1010), 1190);
        assert_eq!(valid_until(None, true, v, 1000), 1180);
    }

    #[test]
    fn a_deadline_beyond_now_plus_validity_is_not_carried_over() {
        let v = Duration::from_secs(180);
        // The clock stepped back an hour after the deadline was written.
        assert_eq!(valid_until(Some(4780), true, v, 1000), 1180);
        // A wavegate with a 1 h validity wrote it; this one vouches for 3 minutes.
        assert_eq!(valid_until(Some(1000 + 3600), true, v, 1000), 1180);
        // Exactly one validity ahead is what this wavegate itself writes.
        assert_eq!(valid_until(Some(1180), true, v, 1000), 1180);
    }
}
