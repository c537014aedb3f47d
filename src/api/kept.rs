//! Answers kept until what they read changes: the waves view of a big Application costs
//! judging every resource and serialising the result, while the UI extension asks for it every
//! 5 s per open tab and the dashboard every 2 s. An answer is kept with the [`Stamp`] of the
//! clusters it read, taken *before* it was computed, and the earliest time any of its verdicts
//! may change on its own (a grace period ending, a probe answer ageing, a WaveGate's
//! `validUntil`). It is served again only while the stamp is equal (no event, phase change or
//! stopped watch in any cache it read, no change in how destinations resolve) and that time
//! has not come; otherwise it is computed afresh.
//!
//! Computing is one [`Turn`] at a time per key: concurrent first polls of an Application wait
//! for the one judging it and are served what it kept. Ten viewers of an Application of 2,000
//! Databases each judging it at once held ten judgements in memory (874 MiB) and kept the
//! worker from `/healthz` for seconds (docs/security.md). A waiter takes the kept answer if
//! its stamp still holds, or if its reads began after the waiter asked ([`Kept::read_since`]):
//! on a live cluster something changes during a judgement of seconds, and the stamp alone
//! would have every waiter judge again, one after the other.

use crate::clusters::Stamp;
use crate::locks::lock;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::OwnedMutexGuard;

/// More entries than this and they are all dropped: keys are Applications (and proxy scopes),
/// whose number the cluster decides.
const MAX_KEPT: usize = 4096;

/// More keys waiting or computing than this and those nobody holds are swept: a waiter
/// cancelled just as its turn came leaves its key behind, and keys are the requests' to choose.
const MAX_TURNS: usize = 1024;

struct Entry<V> {
    stamp: Stamp,
    /// When the reads it was computed from began (its stamp taken).
    read_at: Instant,
    valid_until: Option<Instant>,
    value: Arc<V>,
}

pub(crate) struct Kept<K, V> {
    entries: Mutex<HashMap<K, Entry<V>>>,
    /// The turn of each key being computed; gone once nobody holds or waits for it (or, left
    /// behind by a cancelled waiter, swept past [`MAX_TURNS`]).
    turns: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Kept {
            entries: Mutex::default(),
            turns: Mutex::default(),
        }
    }
}

/// The right to compute the answer of one key; the next waiting request gets it when this is
/// dropped (the answer kept, or the request gone).
pub(crate) struct Turn<'a, K: Hash + Eq, V> {
    kept: &'a Kept<K, V>,
    key: K,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl<K: Hash + Eq, V> Drop for Turn<'_, K, V> {
    fn drop(&mut self) {
        let mut turns = lock(&self.kept.turns);
        let held = self.held.take();
        // The map's and this turn's: nobody else holds or waits for the key.
        if held
            .as_ref()
            .is_some_and(|h| Arc::strong_count(OwnedMutexGuard::mutex(h)) == 2)
        {
            turns.remove(&self.key);
        }
        drop(held);
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

    /// The answer last kept for `key`, whether it holds or not: what the next one may be
    /// built from in part (see `rows`).
    pub(crate) fn latest(&self, key: &K) -> Option<Arc<V>> {
        lock(&self.entries).get(key).map(|e| e.value.clone())
    }

    /// Wait for the turn to compute the answer of `key`; whoever had it may have kept it, so
    /// look again before computing.
    pub(crate) async fn turn(&self, key: &K) -> Turn<'_, K, V>
    where
        K: Clone,
    {
        let held = self.turn_of(key).lock_owned().await;
        self.held(key, held)
    }

    /// The turn for `key` if nobody holds it now.
    pub(crate) fn try_turn(&self, key: &K) -> Option<Turn<'_, K, V>>
    where
        K: Clone,
    {
        let turn = self.turn_of(key);
        match turn.clone().try_lock_owned() {
            Ok(held) => Some(self.held(key, held)),
            Err(_) => {
                // Its holder may have let go meanwhile and, seeing this look, left the key in
                // place: the map's and this look's, nobody holds or waits for it.
                let mut turns = lock(&self.turns);
                if Arc::strong_count(&turn) == 2 {
                    turns.remove(key);
                }
                None
            }
        }
    }

    /// The lock of `key`'s turn, shared by all who want it.
    fn turn_of(&self, key: &K) -> Arc<tokio::sync::Mutex<()>>
    where
        K: Clone,
    {
        let mut turns = lock(&self.turns);
        if turns.len() >= MAX_TURNS {
            turns.retain(|_, t| Arc::strong_count(t) > 1);
        }
        turns.entry(key.clone()).or_default().clone()
    }

    fn held(&self, key: &K, held: tokio::sync::OwnedMutexGuard<()>) -> Turn<'_, K, V>
    where
        K: Clone,
    {
        Turn {
            kept: self,
            key: key.clone(),
            held: Some(held),
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        lock(&self.turns).len()
    }

    /// The answer kept for `key` whose reads began at or after `since` (when the caller asked),
    /// if it holds at `now`: as fresh as one the caller would compute itself.
    pub(crate) fn read_since(&self, key: &K, since: Instant, now: Instant) -> Option<Arc<V>> {
        let entries = lock(&self.entries);
        let e = entries.get(key)?;
        let expired = e.valid_until.is_some_and(|until| now >= until);
        (e.read_at >= since && !expired).then(|| e.value.clone())
    }

    /// Keep `value`, computed from what was read at `stamp` (taken at `read_at`), until
    /// `valid_until`.
    pub(crate) fn put(
        &self,
        key: K,
        (stamp, read_at): (Stamp, Instant),
        valid_until: Option<Instant>,
        value: Arc<V>,
    ) {
        let mut entries = lock(&self.entries);
        if entries.len() >= MAX_KEPT && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(
            key,
            Entry {
                stamp,
                read_at,
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
                                kept.put("app", (stamp, now), until, answer.clone());
                                answer
                            }
                        };
                        prop_assert_eq!(&*answer, &world.judge(now).0);
                    }
                }
            }
        }
    }

    /// Concurrent first asks of one key compute it once, the others are served what it kept,
    /// a key of its own is not held up, and no turn is left behind.
    #[tokio::test]
    async fn concurrent_first_asks_compute_once() {
        let kept: Arc<Kept<&str, u32>> = Arc::default();
        let computed = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let ask = |key: &'static str| {
            let (kept, computed) = (kept.clone(), computed.clone());
            async move {
                let now = Instant::now();
                if let Some(v) = kept.get(&key, &Stamp::test(1), now) {
                    return *v;
                }
                let _turn = kept.turn(&key).await;
                if let Some(v) = kept.get(&key, &Stamp::test(1), now) {
                    return *v;
                }
                let n = computed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                kept.put(key, (Stamp::test(1), now), None, Arc::new(n));
                n
            }
        };
        let asks: Vec<_> = (0..10).map(|_| tokio::spawn(ask("app"))).collect();
        let other = tokio::spawn(ask("other"));
        let mut answers = Vec::new();
        for a in asks {
            answers.push(a.await.unwrap());
        }
        let other = other.await.unwrap();
        assert_eq!(computed.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
        assert_ne!(answers[0], other);
        assert_eq!(kept.waiting(), 0, "a turn was left behind");
    }

    /// On a live cluster the stamp moves during every judgement: waiters still take an answer
    /// whose reads began after they asked, never one whose reads began before, so ten
    /// concurrent asks judge at most twice (the first, and one for those who asked after its
    /// reads began).
    #[tokio::test]
    async fn waiters_take_an_answer_read_after_they_asked_though_the_stamp_moved() {
        use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
        let kept: Arc<Kept<&str, u32>> = Arc::default();
        let epoch = Arc::new(AtomicU32::new(1));
        // When the reads of answer `n` began.
        let reads: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let ask = || {
            let (kept, epoch, reads) = (kept.clone(), epoch.clone(), reads.clone());
            async move {
                let asked = Instant::now();
                let stamp = || Stamp::test(epoch.load(SeqCst).into());
                if let Some(v) = kept.get(&"app", &stamp(), asked) {
                    return (asked, *v);
                }
                let _turn = kept.turn(&"app").await;
                let now = Instant::now();
                let fresh = kept.get(&"app", &stamp(), now);
                if let Some(v) = fresh.or_else(|| kept.read_since(&"app", asked, now)) {
                    return (asked, *v);
                }
                let (read, read_at) = (stamp(), Instant::now());
                let n = {
                    let mut reads = lock(&reads);
                    reads.push(read_at);
                    reads.len() as u32 - 1
                };
                // Something in the cluster changes while it judges.
                epoch.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                kept.put("app", (read, read_at), None, Arc::new(n));
                (asked, n)
            }
        };
        // Kept from before anyone below asked, under a stamp that has moved on since.
        lock(&reads).push(Instant::now());
        kept.put("app", (Stamp::test(0), lock(&reads)[0]), None, Arc::new(0));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let asks: Vec<_> = (0..10).map(|_| tokio::spawn(ask())).collect();
        let mut answers = Vec::new();
        for a in asks {
            answers.push(a.await.unwrap());
        }
        let reads = lock(&reads).clone();
        for (asked, n) in &answers {
            assert!(
                reads[*n as usize] >= *asked,
                "answer {n} was read before its asker asked"
            );
        }
        assert!(reads.len() - 1 <= 2, "judged {} times", reads.len() - 1);
        assert_eq!(kept.waiting(), 0);
    }

    /// Turns left behind are swept once there are many.
    #[tokio::test]
    async fn turns_nobody_holds_are_swept() {
        let kept: Kept<String, u32> = Kept::default();
        for i in 0..MAX_TURNS {
            lock(&kept.turns).insert(i.to_string(), Arc::default());
        }
        let held = kept.turn(&"app".to_string()).await;
        assert_eq!(kept.waiting(), 1);
        drop(held);
        assert_eq!(kept.waiting(), 0);
    }

    /// A look at a turn someone holds leaves nothing behind once the holder lets go.
    #[tokio::test]
    async fn a_look_at_a_held_turn_leaves_no_key_behind() {
        let kept: Kept<&str, u32> = Kept::default();
        let held = kept.turn(&"app").await;
        assert!(kept.try_turn(&"app").is_none());
        drop(held);
        assert_eq!(kept.waiting(), 0);
        let again = kept.try_turn(&"app").expect("nobody holds it");
        assert!(kept.try_turn(&"app").is_none());
        drop(again);
        assert_eq!(kept.waiting(), 0);
    }

    /// A request dropped while it waits (its client gone) neither blocks the key nor leaks.
    #[tokio::test]
    async fn a_dropped_wait_leaves_nothing_behind() {
        let kept: Kept<&str, u32> = Kept::default();
        let first = kept.turn(&"app").await;
        {
            let waiting = kept.turn(&"app");
            tokio::pin!(waiting);
            assert!(futures::poll!(waiting.as_mut()).is_pending());
        }
        drop(first);
        let _again = kept.turn(&"app").await;
        drop(_again);
        assert_eq!(kept.waiting(), 0);
    }

    #[test]
    fn an_answer_is_kept_while_nothing_changed() {
        let kept: Kept<&str, u32> = Kept::default();
        let now = Instant::now();
        kept.put("app", (Stamp::test(1), now), None, Arc::new(7));
        assert_eq!(kept.get(&"app", &Stamp::test(1), now).as_deref(), Some(&7));
        assert_eq!(kept.get(&"app", &Stamp::test(2), now), None);
        kept.put(
            "app",
            (Stamp::test(2), now),
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
