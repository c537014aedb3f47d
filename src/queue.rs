//! The reconcile queue that drives the writers (the gate controller, annotation mode): cache
//! changes become debounced, bounded-concurrency reconciles of the keys they affect, plus a
//! periodic resync, timers a reconcile asks for, and retries with backoff when one fails.
//!
//! The queue never runs one key twice at once; a change that arrives while its key is being
//! reconciled runs it again afterwards, so the last change is never lost. Changes are coalesced
//! for a short fixed window after the first one (not extended by later ones, so a busy namespace
//! cannot starve a gate). Timers live in a [`DelayQueue`], one per key.

use crate::cache::Change;
use crate::metrics::Metrics;
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, broadcast};
use tokio::task::{Id, JoinSet};
use tokio::time::{Instant, sleep_until};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue;

/// How long changes are coalesced after the first one: long enough to fold a Deployment's
/// burst of pod and EndpointSlice events into one reconcile, short next to a human's wait.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(20);
/// Keys reconciled at once: each reconcile is a few cache reads and at most one write, so this
/// is how many status writes wait on the API server at once. A change that moves 1,000 gates
/// is bounded by the API server's write throughput; with 4 its round trips were the limit
/// (about 230 writes/s), with 16 the gates follow within ~1.2× of writing the same statuses
/// directly 32 at a time (benches/gates.rs, `gates_floor`), still well under the default
/// priority-and-fairness share of one client.
pub(crate) const CONCURRENCY: usize = 16;
/// The first retry of a failed reconcile; doubled per failure up to [`RETRY_LAST`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_LAST: Duration = Duration::from_secs(30);

/// The work a queue drives.
pub(crate) trait Reconcile<K>: Send + Sync + 'static {
    /// Why a reconcile failed (a status write refused, a cache that cannot answer).
    type Error: fmt::Display + Send + 'static;
    /// Keys to reconcile because of `change`.
    fn affected(&self, change: &Change) -> Vec<K>;
    /// Every key, for the periodic resync (and at start).
    fn all(&self) -> impl Future<Output = Vec<K>> + Send;
    /// Judge `key` and write what changed; the [`Action`] says when to reconcile it again
    /// without a change. An error is retried with backoff and counted in
    /// `wavegate_reconcile_errors_total`.
    fn reconcile(&self, key: K) -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// What a reconcile asks of the queue once it has written what changed (kube-runtime's
/// `controller::Action`): to run again after a delay, or only when something it reads changes
/// (and at the periodic resync, which runs every key anyway).
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile again after `after` even if nothing changes: a timeout that will fire, a
    /// probe-based check still converging, a write to retry on a newer version.
    pub(crate) fn requeue(after: Duration) -> Action {
        Action {
            requeue_after: Some(after),
        }
    }

    /// Reconcile again only on a change (or the resync).
    pub(crate) fn await_change() -> Action {
        Action {
            requeue_after: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueConfig {
    /// What the queue drives, as its metrics and logs name it (`gates`, `annotations`).
    pub name: &'static str,
    pub debounce: Duration,
    pub concurrency: usize,
    /// Every key is reconciled at least this often (grace periods and timeouts advance with
    /// time, not with events; a lost event is repaired).
    pub resync: Duration,
}

impl QueueConfig {
    pub(crate) fn new(name: &'static str, resync: Duration) -> Self {
        QueueConfig {
            name,
            debounce: DEBOUNCE,
            concurrency: CONCURRENCY,
            resync,
        }
    }
}

/// The delay before retry number `failures` (1-based) of one key.
fn retry_after(failures: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(RETRY_LAST)
}

/// One timer per key.
struct Timers<K> {
    queue: DelayQueue<K>,
    keys: HashMap<K, delay_queue::Key>,
}

impl<K: Clone + Eq + Hash> Timers<K> {
    fn new() -> Self {
        Timers {
            queue: DelayQueue::new(),
            keys: HashMap::new(),
        }
    }

    /// Fire `key` after `after`, replacing its earlier timer.
    fn set(&mut self, key: K, after: Duration) {
        match self.keys.get(&key) {
            Some(k) => self.queue.reset(k, after),
            None => {
                let k = self.queue.insert(key.clone(), after);
                self.keys.insert(key, k);
            }
        }
    }

    fn cancel(&mut self, key: &K) {
        if let Some(k) = self.keys.remove(key) {
            self.queue.remove(&k);
        }
    }

    /// The next key whose timer fired; pending forever while there are none.
    async fn next(&mut self) -> K {
        match self.queue.next().await {
            Some(expired) => {
                let key = expired.into_inner();
                self.keys.remove(&key);
                key
            }
            None => std::future::pending().await,
        }
    }
}

/// Where a queue hears of changes: its own cluster's feed and, for a remote cluster's gates,
/// the home cluster's changes that `wanted` picks (Argo CD keeps Applications at home).
pub(crate) struct Feed {
    own: broadcast::Receiver<Change>,
    other: Option<(broadcast::Receiver<Change>, Wanted)>,
}

/// Which of another cluster's changes a [`Feed`] passes on.
type Wanted = fn(&Change) -> bool;

impl From<broadcast::Receiver<Change>> for Feed {
    fn from(own: broadcast::Receiver<Change>) -> Feed {
        Feed { own, other: None }
    }
}

impl Feed {
    pub(crate) fn with_other(
        own: broadcast::Receiver<Change>,
        other: broadcast::Receiver<Change>,
        wanted: Wanted,
    ) -> Feed {
        Feed {
            own,
            other: Some((other, wanted)),
        }
    }

    /// The next change; closed when the own feed closes (another cluster's closing only
    /// stops hearing from it). A lag on either is reported, so the queue reconciles all.
    async fn recv(&mut self) -> Result<Change, broadcast::error::RecvError> {
        use broadcast::error::RecvError;
        loop {
            let Some((other, wanted)) = self.other.as_mut() else {
                return self.own.recv().await;
            };
            let from_other = tokio::select! {
                r = self.own.recv() => return r,
                r = other.recv() => r,
            };
            match from_other {
                Ok(c) if wanted(&c) => return Ok(c),
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => return Err(RecvError::Lagged(n)),
                Err(RecvError::Closed) => self.other = None,
            }
        }
    }
}

/// Drive `work` until the change channel closes.
pub(crate) async fn run<K, R>(
    work: Arc<R>,
    changes: impl Into<Feed>,
    cfg: QueueConfig,
    metrics: Arc<Metrics>,
) where
    K: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static,
    R: Reconcile<K>,
{
    let mut changes = changes.into();
    let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let mut dirty: HashSet<K> = HashSet::new();
    let mut running: HashMap<Id, K> = HashMap::new();
    let mut again: HashSet<K> = HashSet::new();
    let mut timers = Timers::new();
    let mut failures: HashMap<K, u32> = HashMap::new();
    let mut due: Option<Instant> = None;
    let mut tasks: JoinSet<Result<Action, String>> = JoinSet::new();
    let mut resync = tokio::time::interval(cfg.resync.max(Duration::from_millis(10)));
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = resync.tick() => {
                dirty.extend(work.all().await);
                due.get_or_insert(Instant::now() + cfg.debounce);
            }
            msg = changes.recv() => match msg {
                Ok(change) => {
                    let keys = work.affected(&change);
                    if !keys.is_empty() {
                        // A change is news: work that failed on what it reads (a watch that
                        // was relisting and has now listed) starts its backoff again, and
                        // runs now rather than when its retry timer says.
                        for key in &keys {
                            failures.remove(key);
                        }
                        dirty.extend(keys);
                        due.get_or_insert(Instant::now() + cfg.debounce);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(queue = cfg.name, missed = n, "change feed lagged; reconciling everything");
                    dirty.extend(work.all().await);
                    due.get_or_insert(Instant::now() + cfg.debounce);
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                due = None;
                let busy: HashSet<&K> = running.values().collect();
                let (wait, start): (Vec<K>, Vec<K>) = dirty.drain().partition(|k| busy.contains(k));
                again.extend(wait);
                for key in start {
                    timers.cancel(&key);
                    let (w, p, k) = (work.clone(), permits.clone(), key.clone());
                    let handle = tasks.spawn(async move {
                        let _permit = p.acquire_owned().await.ok();
                        // Boxed: a task waiting for its permit is then a few bytes, not the
                        // whole reconcile (~6 KB), which 1,000 dirty gates at once would each
                        // reserve (see docs/benchmarks.md, memory at 1,000 WaveGates).
                        Box::pin(w.reconcile(k)).await.map_err(|e| e.to_string())
                    });
                    running.insert(handle.id(), key);
                }
            }
            key = timers.next() => {
                dirty.insert(key);
                due.get_or_insert(Instant::now() + cfg.debounce);
            }
            Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let (id, outcome) = match done {
                    Ok((id, outcome)) => (id, outcome),
                    Err(e) => (e.id(), Err(format!("the reconcile panicked: {e}"))),
                };
                let Some(key) = running.remove(&id) else { continue };
                match outcome {
                    Ok(action) => {
                        failures.remove(&key);
                        if let Some(after) = action.requeue_after {
                            // Never later than the resync, which judges it anyway; and a
                            // requested delay (a gate's `timeout: 20000h`) must not reach
                            // DelayQueue's limit (~2 years), where it panics.
                            timers.set(key.clone(), after.min(cfg.resync));
                        }
                    }
                    Err(error) => {
                        let n = failures.entry(key.clone()).or_default();
                        *n = n.saturating_add(1);
                        let after = retry_after(*n).min(cfg.resync);
                        tracing::warn!(
                            queue = cfg.name, key = ?key, %error, failures = *n,
                            retry_in = %humantime::format_duration(after),
                            "reconcile failed"
                        );
                        metrics.record_reconcile_error(cfg.name);
                        timers.set(key.clone(), after);
                    }
                }
                if again.remove(&key) {
                    dirty.insert(key);
                    due.get_or_insert(Instant::now() + cfg.debounce);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::GroupResource;
    use std::sync::Mutex;

    fn change(name: &str) -> Change {
        Change {
            kind: GroupResource::PODS,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    /// Counts reconciles, each taking 100 ms; `fail` keys fail their first `fail_times` runs.
    #[derive(Default)]
    struct Recorder {
        runs: Mutex<Vec<&'static str>>,
        requeue: Option<Duration>,
        fail_times: usize,
    }

    impl Reconcile<&'static str> for Recorder {
        type Error = String;
        fn affected(&self, change: &Change) -> Vec<&'static str> {
            match change.name.as_str() {
                "a" => vec!["a"],
                "b" => vec!["b"],
                "fail" => vec!["fail"],
                _ => vec![],
            }
        }
        async fn all(&self) -> Vec<&'static str> {
            vec!["a"]
        }
        async fn reconcile(&self, key: &'static str) -> Result<Action, String> {
            let n = {
                let mut runs = self.runs.lock().unwrap();
                runs.push(key);
                runs.iter().filter(|k| **k == key).count()
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            if key == "fail" && n <= self.fail_times {
                return Err(format!("write refused ({n})"));
            }
            Ok(self
                .requeue
                .map_or_else(Action::await_change, Action::requeue))
        }
    }

    impl Recorder {
        fn count(&self, key: &str) -> usize {
            self.runs
                .lock()
                .unwrap()
                .iter()
                .filter(|k| **k == key)
                .count()
        }
    }

    fn start(rec: &Arc<Recorder>, resync: Duration) -> (broadcast::Sender<Change>, Arc<Metrics>) {
        let (tx, rx) = broadcast::channel(64);
        let metrics = Arc::new(Metrics::default());
        tokio::spawn(run(
            rec.clone(),
            rx,
            QueueConfig::new("test", resync),
            metrics.clone(),
        ));
        (tx, metrics)
    }

    async fn settle(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_is_judged_once_and_the_last_one_is_never_lost() {
        let rec = Arc::new(Recorder::default());
        let (tx, _) = start(&rec, Duration::from_secs(15));
        settle(200).await; // the initial resync judges "a" once
        assert_eq!(rec.count("a"), 1);
        for _ in 0..50 {
            tx.send(change("b")).unwrap();
        }
        settle(30).await;
        assert_eq!(
            rec.count("b"),
            1,
            "50 changes within the debounce window: one judgement"
        );
        // While "b" is being judged, another change arrives: it runs again afterwards.
        tx.send(change("b")).unwrap();
        settle(300).await;
        assert_eq!(rec.count("b"), 2);
        tx.send(change("unrelated")).unwrap();
        settle(300).await;
        assert_eq!(rec.runs.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn resync_judges_everything_periodically() {
        let rec = Arc::new(Recorder::default());
        let _feed = start(&rec, Duration::from_secs(15));
        settle(200).await;
        assert_eq!(rec.count("a"), 1);
        settle(15_000).await;
        assert_eq!(rec.count("a"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_requested_recheck_fires_without_any_event() {
        let rec = Arc::new(Recorder {
            requeue: Some(Duration::from_secs(2)),
            ..Recorder::default()
        });
        let _feed = start(&rec, Duration::from_secs(600));
        settle(200).await;
        assert_eq!(rec.count("a"), 1);
        settle(2_000).await;
        assert_eq!(rec.count("a"), 2);
        settle(2_200).await;
        assert_eq!(rec.count("a"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_reconcile_is_retried_with_growing_backoff_and_counted() {
        let rec = Arc::new(Recorder {
            fail_times: 3,
            ..Recorder::default()
        });
        let (tx, metrics) = start(&rec, Duration::from_secs(600));
        settle(200).await;
        tx.send(change("fail")).unwrap();
        // Runs at ~0 (fails), +0.5 s (fails), +1 s (fails), +2 s (succeeds), then nothing
        // until the resync, which is ten minutes away.
        settle(150).await;
        assert_eq!(rec.count("fail"), 1);
        settle(600).await;
        assert_eq!(rec.count("fail"), 2, "first retry after 500 ms");
        settle(1_100).await;
        assert_eq!(rec.count("fail"), 3, "second retry after 1 s");
        settle(2_100).await;
        assert_eq!(rec.count("fail"), 4, "third retry after 2 s succeeds");
        settle(60_000).await;
        assert_eq!(rec.count("fail"), 4, "no retries after a success");
        assert!(
            metrics
                .encode()
                .contains("wavegate_reconcile_errors_total{queue=\"test\"} 3"),
            "{}",
            metrics.encode()
        );
    }

    /// After an etcd restart a watch relists; work that failed while it could not read (and
    /// backed off to seconds) must run on the watch's news, and fail fast again if it must.
    #[tokio::test(start_paused = true)]
    async fn a_change_resets_the_backoff_of_work_that_failed() {
        let rec = Arc::new(Recorder {
            fail_times: 5,
            ..Recorder::default()
        });
        let (tx, _metrics) = start(&rec, Duration::from_secs(600));
        settle(200).await;
        tx.send(change("fail")).unwrap();
        // Fails at ~0, +0.6 s, +1.8 s, +3.9 s (each run takes 0.1 s); the next retry would be
        // 4 s later.
        settle(4_000).await;
        assert_eq!(rec.count("fail"), 4);
        tx.send(change("fail")).unwrap();
        // Runs on the change (fails a fifth time), then retries after 0.5 s, not 8 s.
        settle(300).await;
        assert_eq!(rec.count("fail"), 5);
        settle(900).await;
        assert_eq!(
            rec.count("fail"),
            6,
            "the backoff started again after the change"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_requeue_years_away_is_a_resync_not_a_panic() {
        // A tenant's gate with `timeout: 20000h` asks to be judged again in 20,000 hours,
        // past what a DelayQueue holds.
        let rec = Arc::new(Recorder {
            requeue: Some(Duration::from_secs(20_000 * 3600)),
            ..Recorder::default()
        });
        let _feed = start(&rec, Duration::from_secs(15));
        settle(200).await;
        assert_eq!(rec.count("a"), 1);
        settle(16_000).await;
        assert!(rec.count("a") >= 2, "the queue still runs");
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let delays: Vec<u64> = (1..=9).map(|n| retry_after(n).as_millis() as u64).collect();
        assert_eq!(
            delays,
            [
                500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000
            ]
        );
        assert_eq!(retry_after(u32::MAX), RETRY_LAST);
    }
}
