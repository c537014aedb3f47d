//! Answers kept until what they read changes: the waves view of a big Application costs
//! judging every resource and serialising the result, while the UI extension asks for it every
//! 5 s per open tab and the dashboard every 2 s. An answer is kept with the [`Stamp`] of the
//! clusters it read, taken *before* it was computed, and the earliest time any of its verdicts
//! may change on its own (a grace period ending, a probe answer ageing, a WaveGate's
//! `validUntil`). It is served again only while the stamp is equal (no event, phase change or
//! stopped watch in any cache it read, no change in how destinations resolve) and that time
//! has not come; otherwise it is computed afresh.

use crate::clusters::Stamp;
use crate::locks::lock;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// More entries than this and they are all dropped: keys are Applications (and proxy scopes),
/// whose number the cluster decides.
const MAX_KEPT: usize = 4096;

struct Entry<V> {
    stamp: Stamp,
    valid_until: Option<Instant>,
    value: Arc<V>,
}

pub(crate) struct Kept<K, V> {
    entries: Mutex<HashMap<K, Entry<V>>>,
}

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Kept {
            entries: Mutex::default(),
        }
    }
}

impl<K: Hash + Eq, V> Kept<K, V> {
    /// The answer kept for `key`, if it was computed from `stamp` and holds at `now`.
    #[cfg(test)]
    pub(crate) fn get(&self, key: &K, stamp: &Stamp, now: Instant) -> Option<Arc<V>> {
        self.get_by(key, |_| Some(stamp.clone()), now)
    }

    /// The answer kept for `key`, if it holds at `now` and `stamp_of` it (the stamp, now, of
    /// the clusters it read; `None`: they cannot be vouched for) is the stamp it was computed
    /// from.
    pub(crate) fn get_by(
        &self,
        key: &K,
        stamp_of: impl FnOnce(&V) -> Option<Stamp>,
        now: Instant,
    ) -> Option<Arc<V>> {
        let (stamp, value) = {
            let entries = lock(&self.entries);
            let e = entries.get(key)?;
            if e.valid_until.is_some_and(|until| now >= until) {
                return None;
            }
            (e.stamp.clone(), e.value.clone())
        };
        (stamp_of(&value)? == stamp).then_some(value)
    }

    /// Keep `value`, computed from what was read at `stamp`, until `valid_until`.
    pub(crate) fn put(&self, key: K, stamp: Stamp, valid_until: Option<Instant>, value: Arc<V>) {
        let mut entries = lock(&self.entries);
        if entries.len() >= MAX_KEPT && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(
            key,
            Entry {
                stamp,
                valid_until,
                value,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    /// A world of objects whose versions change, read into an answer whose verdicts turn at
    /// known times (a grace period from when each object last changed): what a view is.
    #[derive(Clone, Debug)]
    struct World {
        versions: Vec<u64>,
        changed_at: Vec<Instant>,
        epoch: u64,
    }

    const GRACE: Duration = Duration::from_secs(3);

    impl World {
        /// The answer at `now`, and when it next turns by itself.
        fn judge(&self, now: Instant) -> (Vec<(u64, bool)>, Option<Instant>) {
            let answer = self
                .versions
                .iter()
                .zip(&self.changed_at)
                .map(|(v, at)| (*v, now >= *at + GRACE))
                .collect();
            let turns = self
                .changed_at
                .iter()
                .map(|at| *at + GRACE)
                .filter(|t| *t > now)
                .min();
            (answer, turns)
        }

        fn stamp(&self) -> Stamp {
            Stamp::test(self.epoch)
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        Change(usize),
        Advance(u64),
        Poll,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..4usize).prop_map(Step::Change),
            (0..2500u64).prop_map(Step::Advance),
            Just(Step::Poll),
        ]
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config::config(500))]

        /// A kept answer never outlives a change of what it read, nor the moment one of its
        /// verdicts turns: whatever the order of changes, clock and polls, a poll answers
        /// exactly what a fresh computation would.
        #[test]
        fn a_kept_answer_equals_a_fresh_one(steps in proptest::collection::vec(step(), 1..60)) {
            let start = Instant::now();
            let mut now = start;
            let mut world = World { versions: vec![0; 4], changed_at: vec![start; 4], epoch: 0 };
            let kept: Kept<&str, Vec<(u64, bool)>> = Kept::default();
            for step in steps {
                match step {
                    Step::Change(i) => {
                        world.versions[i] += 1;
                        world.changed_at[i] = now;
                        world.epoch += 1;
                    }
                    Step::Advance(ms) => now += Duration::from_millis(ms),
                    Step::Poll => {
                        let stamp = world.stamp();
                        let answer = match kept.get(&"app", &stamp, now) {
                            Some(a) => a,
                            None => {
                                let (answer, until) = world.judge(now);
                                let answer = Arc::new(answer);
                                kept.put("app", stamp, until, answer.clone());
                                answer
                            }
                        };
                        prop_assert_eq!(&*answer, &world.judge(now).0);
                    }
                }
            }
        }
    }

    #[test]
    fn an_answer_is_kept_while_nothing_changed() {
        let kept: Kept<&str, u32> = Kept::default();
        let now = Instant::now();
        kept.put("app", Stamp::test(1), None, Arc::new(7));
        assert_eq!(kept.get(&"app", &Stamp::test(1), now).as_deref(), Some(&7));
        assert_eq!(kept.get(&"app", &Stamp::test(2), now), None);
        kept.put(
            "app",
            Stamp::test(2),
            Some(now + Duration::from_secs(1)),
            Arc::new(8),
        );
        assert_eq!(kept.get(&"app", &Stamp::test(2), now).as_deref(), Some(&8));
        assert_eq!(
            kept.get(&"app", &Stamp::test(2), now + Duration::from_secs(1)),
            None,
            "kept past its verdicts' expiry"
        );
    }
}
