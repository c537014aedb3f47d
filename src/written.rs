//! What the two writers (the gate controller, annotation mode) share about the verdicts they
//! write into the API server: who writes them, and how long Argo CD may believe one.

use std::time::Duration;

/// The field manager of every write (server-side apply of WaveGate status, annotation patches).
pub const FIELD_MANAGER: &str = "wavegate";

/// Three minutes: long enough that a wavegate restart (or an API server brown-out) does not
/// expire every settled verdict, short enough that a wave does not advance on a verdict from a
/// wavegate that stopped long ago. Confirmed every 90 s, so the resync (15 s) must be shorter.
pub(crate) const DEFAULT_STATUS_VALIDITY: Duration = Duration::from_secs(180);

/// How soon a verdict that would be written from a watch that has not listed yet is judged
/// again, while a stored one that still counts is kept instead (see [`kept_over_cold`]): a list
/// that completes with nothing the verdict reads wakes nobody.
pub(crate) const COLD_RECHECK: Duration = Duration::from_secs(1);

/// When a verdict would be written from a watch that has not listed yet (a kind read for the
/// first time, or every kind of a cluster this replica just gained from another), and the stored
/// verdict's `valid_until` (Unix seconds) is still ahead of `now`: how soon to judge again
/// instead of writing. Such a watch knows nothing about the cluster, not even that what the
/// stored verdict says has changed; writing Progressing ("has not synced yet") over a Healthy
/// that still counts would hold a wave the cluster allows, for wavegate's own sake. A stored
/// verdict past its deadline is read as Progressing by Argo CD's scripts anyway; one without
/// (`--status-validity 0`) would never end if the watch never listed: both are written over.
pub(crate) fn kept_over_cold(valid_until: Option<i64>, now: i64) -> Option<Duration> {
    let left = u64::try_from(valid_until? - now).ok().filter(|s| *s > 0)?;
    Some(COLD_RECHECK.min(Duration::from_secs(left)))
}

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

/// What a writer last wrote on one object, and the resourceVersions at which its cache does not
/// show that yet. A watch delivers a writer's own write some time after the write returned; a
/// judgement in between sees an older version and must neither write the same thing again nor
/// precondition a write on a version the writer itself already moved past (409 though nobody
/// else wrote). Both writers keep one per object (the gate controller its status, annotation
/// mode its annotations).
#[derive(Clone, Debug)]
pub(crate) struct Memory<T> {
    /// Every version the cache may still show before it shows `produced`: the one the last
    /// write went over, the versions that write passed through on the way (a status write before
    /// its stamp), and, while the cache still lagged when it was made, those of earlier writes.
    behind: Vec<String>,
    /// The version the last write produced (its response's).
    produced: Option<String>,
    pub(crate) value: T,
}

/// A safety bound on the versions remembered per object, never reached by a watch that moves:
/// [`Memory::after`] forgets every version the watch has passed, so what is left are our own
/// writes since the version the watch shows now (two per stamped verdict). Only a watch stuck
/// for over 500 verdict changes of one object reaches it; then the newest are not remembered,
/// since an in-order watch shows the oldest next, and a relist (which shows the newest at once)
/// is the likelier way out.
const BEHIND_AT_MOST: usize = 1024;

impl<T> Memory<T> {
    /// The memory after writing `value` over what the cache showed at `rv`, passing through
    /// `passed` and producing `produced`. While the cache lagged behind the previous write, it
    /// may still show that write's versions (or those after `rv` before it): they stay behind
    /// this one too. Those before `rv` are forgotten: a watch delivers one object's versions in
    /// order (a relist jumps ahead, never back), so it will not show them again.
    pub(crate) fn after(
        previous: Option<&Self>,
        rv: &Option<String>,
        passed: Option<String>,
        produced: Option<String>,
        value: T,
    ) -> Self {
        let mut behind = match previous {
            Some(p) if p.lags(rv) => {
                let shown = p.behind.iter().position(|b| Some(b) == rv.as_ref());
                let mut b = p.behind[shown.unwrap_or(0)..].to_vec();
                b.extend(p.produced.clone());
                b
            }
            _ => Vec::new(),
        };
        for v in [rv.clone(), passed].into_iter().flatten() {
            if !behind.contains(&v) {
                behind.push(v);
            }
        }
        behind.truncate(BEHIND_AT_MOST);
        Memory {
            behind,
            produced,
            value,
        }
    }

    /// Whether the cache, showing the object at `rv`, has not caught up with the last write.
    pub(crate) fn lags(&self, rv: &Option<String>) -> bool {
        rv.as_ref().is_some_and(|rv| self.behind.contains(rv))
    }
}

/// The resourceVersion a write must find when the cache shows `rv`: what the last write
/// produced while the cache lags behind it, else `rv`.
pub(crate) fn precondition<T>(memory: Option<&Memory<T>>, rv: &Option<String>) -> Option<String> {
    match memory {
        Some(m) if m.lags(rv) => m.produced.clone(),
        _ => rv.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cold_watch_keeps_only_a_stored_verdict_that_still_counts() {
        // Valid 90 s more: kept, judged again within a second.
        assert_eq!(kept_over_cold(Some(1090), 1000), Some(COLD_RECHECK));
        assert_eq!(
            kept_over_cold(Some(1001), 1000),
            Some(Duration::from_secs(1))
        );
        // Run out, or never expiring (nothing would end it if the watch never listed).
        assert_eq!(kept_over_cold(Some(1000), 1000), None);
        assert_eq!(kept_over_cold(Some(900), 1000), None);
        assert_eq!(kept_over_cold(None, 1000), None);
    }
    use proptest::prelude::*;

    fn rv(v: u64) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn a_write_followed_by_its_stamp_is_found_from_either_version_before_it() {
        // The status went over 10 and produced 11; the stamp produced 12.
        let m = Memory::after(None, &rv(10), rv(11), rv(12), ());
        assert_eq!(precondition(Some(&m), &rv(10)), rv(12));
        assert_eq!(precondition(Some(&m), &rv(11)), rv(12), "the in-between");
        assert_eq!(precondition(Some(&m), &rv(12)), rv(12));
        // Someone else wrote after us: their version is the one to find.
        assert_eq!(precondition(Some(&m), &rv(13)), rv(13));
        assert_eq!(precondition::<()>(None, &rv(10)), rv(10));
        assert!(m.lags(&rv(11)) && !m.lags(&rv(12)));
    }

    #[test]
    fn a_second_write_before_the_watch_caught_up_keeps_the_first_writes_versions() {
        // Status over 10 → 11, stamp → 12; the watch delivers 11, a new verdict is written
        // over 12 (the precondition) → 13, stamp → 14. The watch then delivers 12.
        let first = Memory::after(None, &rv(10), rv(11), rv(12), "S1");
        assert_eq!(precondition(Some(&first), &rv(11)), rv(12));
        let second = Memory::after(Some(&first), &rv(11), rv(13), rv(14), "S2");
        for shown in [11, 12, 13] {
            assert!(second.lags(&rv(shown)), "{shown}");
            assert_eq!(precondition(Some(&second), &rv(shown)), rv(14), "{shown}");
        }
        assert_eq!(precondition(Some(&second), &rv(14)), rv(14));
        // The watch showed 11, so it has passed 10 and never shows it again: forgotten.
        assert!(
            !second.behind.contains(&"10".to_string()),
            "{:?}",
            second.behind
        );
    }

    #[test]
    fn five_stamped_verdicts_during_watch_lag_are_all_recognised() {
        // A rollout: "1 of 5 ready", "2 of 5", … each a stamped status write (status, then
        // stamp) while the watch still shows version 10. Then the watch delivers, in order,
        // every version we wrote.
        let mut memory: Option<Memory<usize>> = None;
        let mut server = 10;
        for verdict in 1..=5 {
            let pre = precondition(memory.as_ref(), &rv(10));
            assert_eq!(
                pre,
                rv(server),
                "verdict {verdict} refused by our own write"
            );
            memory = Some(Memory::after(
                memory.as_ref(),
                &rv(10),
                rv(server + 1),
                rv(server + 2),
                verdict,
            ));
            server += 2;
        }
        let m = memory.as_ref();
        for shown in 10..server {
            assert!(
                m.is_some_and(|m| m.lags(&rv(shown))),
                "version {shown} not ours"
            );
            assert_eq!(precondition(m, &rv(shown)), rv(server), "{shown}");
        }
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config::config(500))]

        /// One object, one writer, a watch that delivers the writer's versions late and in
        /// order, however late, and other writers now and then. Wherever the cache stands, a
        /// write is preconditioned on the server's current version exactly when the cache
        /// shows one of ours (or the last other writer's, which the cache then shows); it is
        /// never refused by our own earlier write. Writes outnumber deliveries, so the watch
        /// falls hundreds of our versions behind.
        #[test]
        fn a_write_is_never_preconditioned_on_a_version_we_moved_past(
            steps in proptest::collection::vec((0u8..8, 1u8..3), 1..300),
        ) {
            let mut server: u64 = 1; // the object's current version
            let mut shown: u64 = 1; // what the cache shows (a version the server had)
            let mut history = vec![(1u64, false)]; // every version, ours?
            let mut memory: Option<Memory<()>> = None;
            for (action, passes) in steps {
                match action {
                    // We judge at the cached version and write (status, perhaps a stamp).
                    0..=4 => {
                        let at = Some(shown.to_string());
                        let pre = precondition(memory.as_ref(), &at);
                        // The server refuses a precondition that is not its current version;
                        // ours must hold unless another writer moved it since the cache showed it.
                        let since = history.iter().filter(|(v, _)| *v > shown);
                        let others_since = since.clone().any(|(_, ours)| !ours);
                        // Fewer of our versions than BEHIND_AT_MOST fit in a case, so the
                        // bound is never what saves a write here.
                        prop_assert!(since.filter(|(_, ours)| *ours).count() < BEHIND_AT_MOST);
                        if pre != Some(server.to_string()) {
                            prop_assert!(
                                others_since,
                                "refused by our own write: cache {shown}, server {server}, \
                                 precondition {pre:?}"
                            );
                            continue;
                        }
                        let mut passed = None;
                        for i in 0..passes {
                            server += 1;
                            history.push((server, true));
                            if i + 1 < passes {
                                passed = Some(server.to_string());
                            }
                        }
                        memory = Some(Memory::after(memory.as_ref(), &at, passed, Some(server.to_string()), ()));
                    }
                    // The watch delivers the next version.
                    5 | 6 => shown = (shown + 1).min(server),
                    // Someone else writes.
                    _ => {
                        server += 1;
                        history.push((server, false));
                    }
                }
            }
        }
    }

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
