//! The watches a cache runs, and where each stands: listing, synced, or relisting after an
//! error; which ones readiness covers; when an on-demand one is stopped for being idle.

use super::reflect::Sink;
use super::{Cache, CacheError};
use crate::locks::lock;
use crate::resource::Kind;
use crate::store_index::StoreIndex;
use kube::Resource as KubeResource;
use kube::api::Api;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// When the latest list completed: proof, as good as a heartbeat, that the store was fresh.
    pub(super) listed_at: Mutex<Option<Instant>>,
    /// Wakes the watch's task to drop its stream and relist (a heartbeat's word).
    pub(super) relist_now: Notify,
    pub(super) last_read: Mutex<Instant>,
}

impl WatchHealth {
    pub(super) fn new() -> Self {
        WatchHealth {
            phase: Mutex::new(Phase::Listing),
            listed: Notify::new(),
            listed_at: Mutex::new(None),
            relist_now: Notify::new(),
            last_read: Mutex::new(Instant::now()),
        }
    }

    pub(super) fn phase(&self) -> Phase {
        lock(&self.phase).clone()
    }

    /// A watch error: a synced watch is relisting from now on; one that never listed is still
    /// listing.
    pub(super) fn failed(&self, error: String) {
        let mut phase = lock(&self.phase);
        if *phase != Phase::Listing {
            *phase = Phase::Relisting(error);
        }
    }

    /// Stopped for a reason that outlasts a list (the object bound): reads give it, even
    /// before the first list completed.
    pub(super) fn stopped(&self, error: String) {
        *lock(&self.phase) = Phase::Relisting(error);
        self.listed.notify_waiters();
    }

    pub(super) fn listed(&self) {
        *lock(&self.listed_at) = Some(Instant::now());
        *lock(&self.phase) = Phase::Synced;
        self.listed.notify_waiters();
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

/// One watch, read through `R`: the views of a typed kind ([`StoreIndex`]), or the reflector
/// store of a dynamic one ([`Objects`]).
#[derive(Clone)]
pub(super) struct Watch<R> {
    pub(super) reader: R,
    pub(super) health: Arc<WatchHealth>,
    /// `pods in shop`, `wavegates.wavegate.dev`: what messages call this watch.
    pub(super) label: String,
    /// Required by the process: counts for readiness, never bounded or evicted.
    pub(super) required: bool,
    pub(super) task: AbortHandle,
}

/// Watches of one type by (resource, namespace scope).
pub(super) type WatchKey = (String, Option<String>);
pub(super) type WatchSet<R> = Mutex<HashMap<WatchKey, Watch<R>>>;
pub(super) type Views<V> = Arc<StoreIndex<V>>;

impl Cache {
    /// The phase of one watch and when its latest list completed.
    pub(super) fn phase_of(&self, key: &WatchKey) -> Option<(Phase, Option<Instant>)> {
        fn get<R>(set: &WatchSet<R>, key: &WatchKey) -> Option<(Phase, Option<Instant>)> {
            lock(set)
                .get(key)
                .map(|w| (w.health.phase(), w.health.listed_at()))
        }
        get(&self.dynamic, key)
            .or_else(|| get(&self.pods, key))
            .or_else(|| get(&self.services, key))
            .or_else(|| get(&self.slices, key))
    }

    /// Start the watch for `key` unless another read just did; an on-demand watch takes one
    /// of the `max_on_demand` places or is refused.
    pub(super) fn start<R, K, S>(
        &self,
        set: &WatchSet<R>,
        kind: Kind,
        key: WatchKey,
        api: Api<K>,
        reader: R,
        sink: S,
    ) -> Result<Watch<R>, CacheError>
    where
        R: Clone,
        K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
        S: Sink<K>,
    {
        let mut guard = lock(set);
        if let Some(w) = guard.get(&key) {
            return Ok(w.clone());
        }
        let label = label_of(&key.0, &key.1);
        let required = lock(&self.required).contains_key(&key.0);
        if !required {
            let max = self.limits.max_on_demand;
            self.on_demand
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .map_err(|_| CacheError::TooManyWatches {
                    what: label.clone(),
                    max,
                })?;
        }
        let w = self.spawn(api, reader, sink, kind, label, required);
        guard.insert(key, w.clone());
        Ok(w)
    }

    /// The watches listed before `listed_before` (all with `None`) relist: none of them may
    /// serve reads until its new list completes.
    pub(super) fn relist(&self, reason: &str, listed_before: Option<Instant>) {
        fn tell<R>(set: &WatchSet<R>, reason: &str, before: Option<Instant>) {
            for w in lock(set).values() {
                let stale = match (before, w.health.listed_at()) {
                    (Some(t), Some(listed)) => listed <= t,
                    _ => true,
                };
                if stale {
                    w.health.failed(reason.to_string());
                    w.health.relist_now.notify_one();
                }
            }
        }
        tell(&self.pods, reason, listed_before);
        tell(&self.services, reason, listed_before);
        tell(&self.slices, reason, listed_before);
        tell(&self.dynamic, reason, listed_before);
    }

    /// Stop on-demand watches nobody has read for `limits.idle`.
    pub(super) fn evict_idle(&self) {
        fn sweep<R>(set: &WatchSet<R>, idle: Duration, on_demand: &AtomicUsize) {
            lock(set).retain(|_, w| {
                if w.required || w.health.idle_for() < idle {
                    return true;
                }
                tracing::info!(watch = %w.label, idle = %humantime::format_duration(idle), "stopping idle watch");
                w.task.abort();
                on_demand.fetch_sub(1, Ordering::AcqRel);
                false
            });
        }
        let idle = self.limits.idle;
        sweep(&self.pods, idle, &self.on_demand);
        sweep(&self.services, idle, &self.on_demand);
        sweep(&self.slices, idle, &self.on_demand);
        sweep(&self.dynamic, idle, &self.on_demand);
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
            Some(c) => c.evict_idle(),
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
