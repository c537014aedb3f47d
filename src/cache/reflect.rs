//! The watch task: a kube-rs watcher feeding one store, replaced by a fresh one (a full list)
//! after any error, announcing every change it stores, and counting what it holds against the
//! cluster's object bound.

use super::watches::{Phase, Started, WatchHealth};
use super::{Cache, Change};
use crate::metrics::{Metrics, ResourceLabel};
use crate::resource::Kind;
use crate::store_index::StoreWriter;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Resource as KubeResource, ResourceExt};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;

/// Between a watch error and the next list: doubling from the first to the last delay. Short,
/// unlike kube-rs' default (up to 30 s): every second of backoff is a second in which nothing
/// that depends on the watch can be judged, and wavegate has only a handful of watches.
pub(super) const RELIST_FIRST_DELAY: Duration = Duration::from_millis(500);
pub(super) const RELIST_LAST_DELAY: Duration = Duration::from_secs(5);

/// How long a watch stopped at the object bound waits before listing again: each try makes the
/// API server send (and wavegate parse) up to the bound again.
pub(super) const OVER_BOUND_RETRY: Duration = Duration::from_secs(60);

impl Cache {
    /// Spawn the task of one watch.
    pub(super) fn spawn<K, S>(
        &self,
        api: Api<K>,
        sink: S,
        kind: Kind,
        label: &str,
        required: bool,
    ) -> Started
    where
        K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
        S: Sink<K>,
    {
        let health = Arc::new(WatchHealth::new());
        tracing::info!(watch = %label, required, "starting watch");
        let run = Reflect {
            api,
            sink,
            counted: 0,
            health: health.clone(),
            label: label.to_string(),
            kind,
            changes: self.changes.clone(),
            metrics: self.metrics.clone(),
            listed: Vec::new(),
            held: self.held.clone(),
            // What `serve` cannot do without (WaveGates) is never bounded: the bound keeps a
            // remote cluster's on-demand reads from filling memory, not its gate writer blind.
            max_objects: if required {
                None
            } else {
                self.limits.max_objects
            },
        };
        let task = tokio::spawn(run.run()).abort_handle();
        Started { health, task }
    }
}
/// Where a watch's events go.
pub(super) trait Sink<K>: Send + 'static {
    /// Apply one event, as kube-rs' reflector writer does (a list replaces the stored objects
    /// when it completes); at the end of a list, the (namespace, name) of objects it removed.
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<(String, String)>;

    /// How many objects are stored.
    fn len(&self) -> usize;
}

impl<K: ResourceExt + Send + 'static, V: crate::views::View> Sink<K> for StoreWriter<K, V> {
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<(String, String)> {
        StoreWriter::apply(self, &event)
    }

    fn len(&self) -> usize {
        self.store().len()
    }
}

/// One watch's task: a kube-rs watcher feeding the store, replaced by a fresh one (a full
/// list) after any error.
pub(super) struct Reflect<K: KubeResource + Clone + 'static, S> {
    api: Api<K>,
    sink: S,
    /// What this watch adds to `wavegate_cached_objects`.
    counted: i64,
    health: Arc<WatchHealth>,
    label: String,
    kind: Kind,
    changes: broadcast::Sender<Change>,
    metrics: Arc<Metrics>,
    /// Objects a list in progress delivered, announced when it completes: until then reads of
    /// this watch are refused, so whoever reacted at once would read nothing, judge "relisting"
    /// and wait for its retry backoff or the resync to hear of the object again.
    listed: Vec<(String, String)>,
    /// Objects held by every watch of this cache, and the bound on them.
    held: Arc<AtomicUsize>,
    max_objects: Option<usize>,
}

/// A stopped watch (evicted, or its cache dropped) holds nothing any more.
impl<K: KubeResource + Clone + 'static, S> Drop for Reflect<K, S> {
    fn drop(&mut self) {
        self.metrics
            .cached_objects
            .get_or_create(&ResourceLabel::new(&self.kind.to_string()))
            .dec_by(self.counted);
        self.held
            .fetch_sub(self.counted.max(0) as usize, Ordering::AcqRel);
    }
}

impl<K, S> Reflect<K, S>
where
    K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
    S: Sink<K>,
{
    async fn run(mut self) {
        let mut backoff = RELIST_FIRST_DELAY;
        loop {
            // The list is a consistent read (no resourceVersion): since KEP-2340 (consistent
            // reads from cache, GA) the API server serves it from its watch cache once that has
            // caught up with etcd, so a relist after an outage never starts from objects older
            // than the outage, as a resourceVersion=0 list could on a lagging API server.
            let stream = watcher(self.api.clone(), watcher::Config::default());
            let mut stream = std::pin::pin!(stream);
            // A heartbeat's word ends the watch at once and restarts it without a backoff:
            // either the API server went silent (the list will wait or fail on its own) or it
            // answers again after a silence, and the sooner the relist, the shorter the time
            // nothing can be judged.
            let (error, told, over) = loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    () = self.health.relist_now.notified() => match self.health.phase() {
                        Phase::Relisting(reason) => break (reason, true, false),
                        _ => continue,
                    },
                };
                match event {
                    Some(Ok(event)) => {
                        if matches!(event, watcher::Event::InitDone) {
                            backoff = RELIST_FIRST_DELAY;
                        }
                        if let Err(why) = self.apply(event) {
                            break (why.to_string(), false, true);
                        }
                    }
                    Some(Err(e)) => break (e.to_string(), false, false),
                    None => break ("the watch stream ended".to_string(), false, false),
                }
            };
            tracing::warn!(watch = %self.label, error = %error, "watch failed; relisting");
            self.metrics
                .watch_errors
                .get_or_create(&ResourceLabel::new(&self.kind.to_string()))
                .inc();
            if over {
                // Stopped before emptied: no reader may see an empty store as a synced one
                // ("no pods match" would be a verdict on nothing).
                self.health.stopped(error);
                self.empty();
                tokio::time::sleep(OVER_BOUND_RETRY).await;
                backoff = RELIST_FIRST_DELAY;
                continue;
            }
            self.health.failed(error);
            if told {
                backoff = RELIST_FIRST_DELAY;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => backoff = (backoff * 2).min(RELIST_LAST_DELAY),
                // The API server answers again: no reason to sit out the rest of the backoff.
                () = self.health.relist_now.notified() => backoff = RELIST_FIRST_DELAY,
            }
        }
    }

    /// Apply one event; `Err` with the reason when the objects held would pass the bound.
    fn apply(&mut self, event: watcher::Event<K>) -> Result<(), OverBound> {
        if let (Some(max), watcher::Event::InitApply(_) | watcher::Event::Apply(_)) =
            (self.max_objects, &event)
        {
            // A list replaces this watch's store when it completes: while it runs, count what
            // it delivered instead of what the store still holds, or every relist of a cluster
            // over half the bound would stop it. A watch event may update an object already
            // held; counting it as one more errs on the side of the bound.
            let others = self
                .held
                .load(Ordering::Acquire)
                .saturating_sub(self.counted.max(0) as usize);
            let held = match &event {
                watcher::Event::InitApply(_) => others + self.listed.len() + 1,
                _ => others + self.counted.max(0) as usize + 1,
            };
            if held > max {
                return Err(OverBound {
                    max,
                    watch: self.label.clone(),
                });
            }
        }
        let touched = match &event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                Some((o.namespace().unwrap_or_default(), o.name_any()))
            }
            watcher::Event::InitApply(o) => {
                self.listed
                    .push((o.namespace().unwrap_or_default(), o.name_any()));
                None
            }
            watcher::Event::Init => {
                self.listed.clear();
                None
            }
            watcher::Event::InitDone => None,
        };
        let (init, done) = (
            matches!(event, watcher::Event::Init),
            matches!(event, watcher::Event::InitDone),
        );
        // Stored first, told after: whoever reacts to the change reads the new state.
        let gone = self.sink.apply(event);
        self.count();
        if let Some((namespace, name)) = touched {
            self.changed(namespace, name);
        }
        if init {
            let label = ResourceLabel::new(&self.kind.to_string());
            self.metrics.watch_restarts.get_or_create(&label).inc();
            // At 0 from the first list, so deploy/monitoring's "watches failing" rate() has
            // a series before the first error.
            let _ = self.metrics.watch_errors.get_or_create(&label);
        }
        if done {
            // Readable from here on: what the list delivered, and the objects deleted while
            // the watch was away (they vanish with the relist and get no event of their own),
            // are announced now, so what depends on them is judged at once on the new state.
            self.health.listed();
            let listed = std::mem::take(&mut self.listed);
            for (namespace, name) in listed.into_iter().chain(gone) {
                self.changed(namespace, name);
            }
            tracing::info!(watch = %self.label, "watch synced");
        }
        Ok(())
    }

    /// Drop every object this watch holds (an empty list replaces them), after it hit the
    /// bound: a watch that cannot be read whole holds nothing.
    fn empty(&mut self) {
        self.listed.clear();
        let _ = self.sink.apply(watcher::Event::Init);
        let _ = self.sink.apply(watcher::Event::InitDone);
        self.count();
        let label = ResourceLabel::new(&self.kind.to_string());
        self.metrics.objects_over_bound.get_or_create(&label).inc();
        tracing::warn!(watch = %self.label, "stopped at --max-cluster-objects; retrying later");
    }

    /// Follow the store's size in `wavegate_cached_objects` (several watches of one kind, one
    /// per namespace when scoped, add up).
    fn count(&mut self) {
        let now = self.sink.len() as i64;
        if now != self.counted {
            self.metrics
                .cached_objects
                .get_or_create(&ResourceLabel::new(&self.kind.to_string()))
                .inc_by(now - self.counted);
            if now > self.counted {
                self.held
                    .fetch_add((now - self.counted) as usize, Ordering::AcqRel);
            } else {
                self.held
                    .fetch_sub((self.counted - now) as usize, Ordering::AcqRel);
            }
            self.counted = now;
        }
    }

    fn changed(&self, namespace: String, name: String) {
        let _ = self.changes.send(Change {
            kind: self.kind.clone(),
            namespace,
            name,
        });
    }
}

/// A watch stopped because the cluster's objects would pass `--max-cluster-objects`.
#[derive(Debug, thiserror::Error)]
#[error(
    "this cluster's watches would hold more than {max} objects (--max-cluster-objects), so \
     wavegate stopped the watch of {watch} and retries it every {}",
    humantime::format_duration(OVER_BOUND_RETRY)
)]
struct OverBound {
    max: usize,
    watch: String,
}
