//! The watch table: every watch a cache runs, one entry each, saying which store it feeds and
//! where it stands (listing, synced, or relisting after an error). Lifecycle code — readiness,
//! a heartbeat's relist, stopping idle watches, stopping them all — walks this one table
//! (kube-runtime keeps a store per reflector the same way; kubert's `index` keys them in one
//! map).

use super::marks::Marks;
use super::objects::Objects;
use super::{Cache, CacheError};
use crate::locks::lock;
use crate::store_index::StoreIndex;
use crate::views::{PodView, ServiceView, SliceView};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    Listing,
    Synced,
    Relisting(String),
}

/// Where one watch stands, and when it was last read.
pub(super) struct WatchHealth {
    pub(super) phase: Mutex<Phase>,
    pub(super) listed: Notify,
    /// When the latest completed list was asked for: proof, as good as a heartbeat, that the
    /// store was fresh then.
    pub(super) listed_at: Mutex<Option<Instant>>,
    /// Why the latest list failed while the watch had never listed.
    list_failed: Mutex<Option<String>>,
    /// Wakes the watch's task to drop its stream and relist (a heartbeat's word).
    pub(super) relist_now: Notify,
    pub(super) last_read: Mutex<Instant>,
    /// The cache's epoch (see [`super::Cache::epoch`]), moved on by every change of this
    /// watch's store or phase.
    epoch: Arc<AtomicU64>,
    /// The cache's marks of change, the phase's moved around every change of this watch's
    /// phase.
    pub(super) marks: Arc<Marks>,
}

impl WatchHealth {
    pub(super) fn new(epoch: Arc<AtomicU64>, marks: Arc<Marks>) -> Self {
        WatchHealth {
            epoch,
            marks,
            phase: Mutex::new(Phase::Listing),
            listed: Notify::new(),
            listed_at: Mutex::new(None),
            list_failed: Mutex::new(None),
            relist_now: Notify::new(),
            last_read: Mutex::new(Instant::now()),
        }
    }

    /// What a read of this watch would answer changed (an event, a phase, the watch stopped).
    pub(super) fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn phase(&self) -> Phase {
        lock(&self.phase).clone()
    }

    /// A watch error: a synced watch is relisting from now on; one that never listed is still
    /// listing, and its reads say why its list failed.
    pub(super) fn failed(&self, error: String) {
        self.marks.phase_begins();
        {
            let mut phase = lock(&self.phase);
            if *phase == Phase::Listing {
                *lock(&self.list_failed) = Some(error);
            } else {
                *phase = Phase::Relisting(error);
            }
        }
        self.marks.phase_ends();
        self.bump();
    }

    /// The heartbeat's word: a synced watch relists from now on. A first list on its way is
    /// left to go on (the watch task heeds the word only while relisting), and has not failed:
    /// its reads still say it is on its way, not that it failed (see
    /// [`super::CacheError::ListFailing`]).
    pub(super) fn told_to_relist(&self, reason: String) {
        self.marks.phase_begins();
        {
            let mut phase = lock(&self.phase);
            if *phase != Phase::Listing {
                *phase = Phase::Relisting(reason);
            }
        }
        self.marks.phase_ends();
        self.bump();
    }

    /// Stopped for a reason that outlasts a list (the object bound): reads give it, even
    /// before the first list completed.
    pub(super) fn stopped(&self, error: String) {
        self.marks.phase_begins();
        *lock(&self.phase) = Phase::Relisting(error);
        self.marks.phase_ends();
        self.bump();
        self.listed.notify_waiters();
    }

    /// The list asked for at `began` completed. It vouches for the store as of `began`, not of
    /// its completion: a list that started before a silence, or long before a heartbeat's
    /// window, may hold objects from then.
    pub(super) fn listed(&self, began: Instant) {
        self.marks.phase_begins();
        *lock(&self.listed_at) = Some(began);
        *lock(&self.phase) = Phase::Synced;
        self.marks.phase_ends();
        self.bump();
        self.listed.notify_waiters();
    }

    /// Why the first list failed, while the watch has not listed yet.
    pub(super) fn list_failed(&self) -> Option<String> {
        lock(&self.list_failed).clone()
    }

    pub(super) fn listed_at(&self) -> Option<Instant> {
        *lock(&self.listed_at)
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_read) = Instant::now();
    }

    pub(super) fn idle_for(&self) -> Duration {
        lock(&self.last_read).elapsed()
    }
}

/// The compact views of a typed kind, in wavegate's own store.
pub(super) type Views<V> = Arc<StoreIndex<V>>;

/// The store a watch feeds, and so the reads it serves.
#[derive(Clone)]
pub(super) enum Reader {
    Pods(Views<PodView>),
    Services(Views<ServiceView>),
    Slices(Views<SliceView>),
    /// Whole objects of any other kind (and Services whole, for annotation mode).
    Objects(Objects),
}

/// Which [`Reader`] a watch feeds, without the store: part of its key, since Services are
/// watched both as compact views and whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Feeds {
    Pods,
    Services,
    Slices,
    Objects,
}

/// A store a read can ask the table for by its type.
pub(super) trait Feed: Clone + Sized {
    const FEEDS: Feeds;
    fn of(reader: &Reader) -> Option<&Self>;
    fn into_reader(self) -> Reader;
}

macro_rules! feed {
    ($($variant:ident: $t:ty),*) => {$(
        impl Feed for $t {
            const FEEDS: Feeds = Feeds::$variant;
            fn of(reader: &Reader) -> Option<&Self> {
                match reader {
                    Reader::$variant(r) => Some(r),
                    _ => None,
                }
            }
            fn into_reader(self) -> Reader {
                Reader::$variant(self)
            }
        }
    )*};
}
feed!(Pods: Views<PodView>, Services: Views<ServiceView>, Slices: Views<SliceView>, Objects: Objects);

/// A watch: which store, of which resource, in which namespace (`None`: cluster-wide).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct WatchKey {
    feeds: Feeds,
    /// `pods`, `wavegates.wavegate.dev`.
    what: String,
    scope: Option<String>,
}

impl WatchKey {
    fn new(feeds: Feeds, what: &str, scope: Option<String>) -> WatchKey {
        WatchKey {
            feeds,
            what: what.to_string(),
            scope,
        }
    }

    /// `pods in shop`, `wavegates.wavegate.dev`: what messages call this watch.
    fn label(&self) -> String {
        label_of(&self.what, &self.scope)
    }
}

/// One entry of the table.
struct Watch {
    reader: Reader,
    health: Arc<WatchHealth>,
    label: String,
    /// Required by the process: counts for readiness, never bounded or evicted.
    required: bool,
    task: AbortHandle,
}

/// One watch as a read sees it: its store as `R`, and where it stands.
pub(super) struct Watched<R> {
    pub(super) reader: R,
    pub(super) health: Arc<WatchHealth>,
    pub(super) label: String,
}

impl<R: Feed> Watched<R> {
    fn of(w: &Watch) -> Option<Watched<R>> {
        Some(Watched {
            reader: R::of(&w.reader)?.clone(),
            health: w.health.clone(),
            label: w.label.clone(),
        })
    }
}

/// A started watch's task and health, for its entry.
pub(super) struct Started {
    pub(super) health: Arc<WatchHealth>,
    pub(super) task: AbortHandle,
}

#[derive(Default)]
pub(super) struct WatchTable {
    watches: Mutex<HashMap<WatchKey, Watch>>,
    /// How many entries were started for callers' reads (see `WatchLimits::max_on_demand`).
    on_demand: AtomicUsize,
}

impl WatchTable {
    pub(super) fn get<R: Feed>(&self, what: &str, scope: &Option<String>) -> Option<Watched<R>> {
        let key = WatchKey::new(R::FEEDS, what, scope.clone());
        lock(&self.watches).get(&key).and_then(Watched::of)
    }

    /// The watch of `what` in `scope`, started by `start` unless another read just did. An
    /// on-demand watch takes one of the `max_on_demand` places or is refused.
    pub(super) fn get_or_start<R: Feed>(
        &self,
        what: &str,
        scope: Option<String>,
        reader: R,
        required: bool,
        max_on_demand: usize,
        start: impl FnOnce(&str) -> Started,
    ) -> Result<Watched<R>, CacheError> {
        let key = WatchKey::new(R::FEEDS, what, scope);
        let mut watches = lock(&self.watches);
        if let Some(w) = watches.get(&key).and_then(Watched::of) {
            return Ok(w);
        }
        let label = key.label();
        if !required {
            self.on_demand
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max_on_demand).then_some(n + 1)
                })
                .map_err(|_| CacheError::TooManyWatches {
                    what: label.clone(),
                    max: max_on_demand,
                })?;
        }
        let Started { health, task } = start(&label);
        let watched = Watched {
            reader: reader.clone(),
            health: health.clone(),
            label: label.clone(),
        };
        let watch = Watch {
            reader: reader.into_reader(),
            health,
            label,
            required,
            task,
        };
        // Reads of `what` in this scope go to this watch from now on.
        watched.health.marks.phase_begins();
        watches.insert(key, watch);
        watched.health.marks.phase_ends();
        Ok(watched)
    }

    /// The scope a read of `what` in `namespace` goes to when wavegate watches every
    /// namespace: the namespace's own watch, up to `per_kind` namespaces of one kind, then a
    /// cluster-wide one. A namespace whose own watch runs keeps reading it until the
    /// cluster-wide watch has synced: a read that went to the new watch at once would answer
    /// "has not synced yet" for every namespace that was being served, for as long as the
    /// cluster-wide list takes. Once it has synced, the namespaced watches are stopped and
    /// every read goes to it.
    pub(super) fn unscoped<R: Feed>(
        &self,
        what: &str,
        namespace: &str,
        per_kind: usize,
    ) -> Option<String> {
        let feeds = R::FEEDS;
        let mut watches = lock(&self.watches);
        let own = WatchKey::new(feeds, what, Some(namespace.to_string()));
        if let Some(wide) = watches.get(&WatchKey::new(feeds, what, None)) {
            if wide.health.phase() != Phase::Synced {
                return watches.contains_key(&own).then_some(own.scope).flatten();
            }
            let marks = wide.health.marks.clone();
            let handed_over =
                |k: &WatchKey| k.feeds == feeds && k.what == what && k.scope.is_some();
            // Reads of every namespace go to the cluster-wide watch from now on, whose store
            // may not hold what the namespaced ones did.
            let any = watches.keys().any(handed_over);
            if any {
                marks.phase_begins();
            }
            watches.retain(|k, w| {
                let handed_over = handed_over(k);
                if handed_over {
                    tracing::info!(watch = %w.label, "stopping namespaced watch: the cluster-wide one has synced");
                    w.task.abort();
                    w.health.bump();
                    if !w.required {
                        self.on_demand.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                !handed_over
            });
            if any {
                marks.phase_ends();
            }
            return None;
        }
        if watches.contains_key(&own) {
            return own.scope;
        }
        let scoped = watches
            .keys()
            .filter(|k| k.feeds == feeds && k.what == what && k.scope.is_some())
            .count();
        (scoped < per_kind).then_some(own.scope).flatten()
    }

    /// The phase of every required watch and when its latest list completed, by resource
    /// and scope.
    /// How many watches run, and how many objects the required ones hold (see `Cache::load`).
    pub(super) fn load(&self) -> (usize, usize) {
        let watches = lock(&self.watches);
        let required = watches
            .values()
            .filter(|w| w.required)
            .map(|w| match &w.reader {
                Reader::Objects(o) => o.names(None).len(),
                _ => 0,
            })
            .sum();
        (watches.len(), required)
    }

    pub(super) fn required_phases(
        &self,
    ) -> HashMap<(String, Option<String>), (Phase, Option<Instant>)> {
        let mut phases = HashMap::new();
        for (key, w) in lock(&self.watches).iter().filter(|(_, w)| w.required) {
            let at = (key.what.clone(), key.scope.clone());
            // Whole objects first, as the process requires them (`Cache::require` reads
            // objects); a view of the same resource is another watch.
            if key.feeds == Feeds::Objects || !phases.contains_key(&at) {
                phases.insert(at, (w.health.phase(), w.health.listed_at()));
            }
        }
        phases
    }

    /// Whether every watch is synced, its latest list begun within `within` and after `since`:
    /// each store is then as fresh as a heartbeat would make it. None is vouched for without a
    /// watch.
    pub(super) fn all_listed_within(&self, within: Duration, since: Option<Instant>) -> bool {
        let watches = lock(&self.watches);
        !watches.is_empty()
            && watches.values().all(|w| {
                w.health.phase() == Phase::Synced
                    && w.health.listed_at().is_some_and(|at| {
                        at.elapsed() <= within && since.is_none_or(|since| at > since)
                    })
            })
    }

    /// Every listed watch listed at `at` instead.
    #[cfg(test)]
    pub(super) fn listed_at_for_test(&self, at: Instant) {
        for w in lock(&self.watches).values() {
            if let Some(listed) = lock(&w.health.listed_at).as_mut() {
                *listed = at;
            }
        }
    }

    /// The watches listed before `listed_before` (all with `None`) relist: none of them may
    /// serve reads until its new list completes.
    pub(super) fn relist(&self, reason: &str, listed_before: Option<Instant>) {
        for w in lock(&self.watches).values() {
            let stale = match (listed_before, w.health.listed_at()) {
                (Some(t), Some(listed)) => listed <= t,
                _ => true,
            };
            if stale {
                w.health.told_to_relist(reason.to_string());
                w.health.relist_now.notify_one();
            }
        }
    }

    /// Stop on-demand watches nobody has read for `idle`.
    pub(super) fn evict_idle(&self, idle: Duration) {
        let mut stopped = None;
        lock(&self.watches).retain(|_, w| {
            if w.required || w.health.idle_for() < idle {
                return true;
            }
            tracing::info!(watch = %w.label, idle = %humantime::format_duration(idle), "stopping idle watch");
            if stopped.is_none() {
                w.health.marks.phase_begins();
            }
            w.task.abort();
            w.health.bump();
            self.on_demand.fetch_sub(1, Ordering::AcqRel);
            stopped = Some(w.health.marks.clone());
            false
        });
        // Its reads start a new watch, which lists afresh.
        if let Some(marks) = stopped {
            marks.phase_ends();
        }
    }

    pub(super) fn stop_all(&self) {
        for w in lock(&self.watches).values() {
            w.task.abort();
        }
    }

    /// How many watches were started for callers' reads.
    #[cfg(test)]
    pub(super) fn on_demand(&self) -> usize {
        self.on_demand.load(Ordering::SeqCst)
    }

    /// The scopes of the watches feeding `feeds`.
    #[cfg(test)]
    pub(super) fn scopes(&self, feeds: Feeds) -> Vec<Option<String>> {
        lock(&self.watches)
            .iter()
            .filter(|(k, _)| k.feeds == feeds)
            .map(|(k, _)| k.scope.clone())
            .collect()
    }
}

/// Stop idle on-demand watches, as long as the cache exists.
pub(super) async fn evict_idle(cache: Weak<Cache>) {
    let every = match cache.upgrade() {
        Some(c) => (c.limits.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(60)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        match cache.upgrade() {
            Some(c) => c.watches.evict_idle(c.limits.idle),
            None => return,
        }
    }
}

pub(super) fn label_of(what: &str, scope: &Option<String>) -> String {
    match scope {
        Some(ns) => format!("{what} in {ns}"),
        None => what.to_string(),
    }
}
