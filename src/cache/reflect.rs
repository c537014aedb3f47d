//! The watch task: a kube-rs watcher feeding one store, replaced by a fresh one (a full list)
//! after any error, announcing every change it stores, and counting what it holds against the
//! cluster's bounds (objects and bytes, see [`super::bounds`]).

use super::bounds::{self, key_of};
use super::sink::Sink;
use super::watches::{Phase, Started, WatchHealth};
use super::{Cache, Change, Held};
use crate::metrics::{Metrics, ResourceLabel};
use crate::resource::GroupResource;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Resource as KubeResource, ResourceExt};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// Between a watch error and the next list: doubling from the first to the last delay. Short,
/// unlike kube-rs' default (up to 30 s): every second of backoff is a second in which nothing
/// that depends on the watch can be judged, and wavegate has only a handful of watches.
pub(super) const RELIST_FIRST_DELAY: Duration = Duration::from_millis(500);
pub(super) const RELIST_LAST_DELAY: Duration = Duration::from_secs(5);

/// How long a watch stopped at a bound waits before listing again: each try makes the API server
/// send (and wavegate parse) up to the bound again.
pub(super) const OVER_BOUND_RETRY: Duration = Duration::from_secs(60);

impl Cache {
    /// Spawn the task of one watch.
    pub(super) fn spawn<K, S>(
        &self,
        api: Api<K>,
        sink: S,
        kind: GroupResource,
        label: &str,
        required: bool,
    ) -> Started
    where
        K: KubeResource + Clone + Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
        S: Sink<K>,
    {
        let health = Arc::new(WatchHealth::new(self.epoch.clone(), self.marks.clone()));
        tracing::info!(watch = %label, required, "starting watch");
        #[cfg(test)]
        let source = self.fed_source(&kind).unwrap_or(Source::Api(api));
        #[cfg(not(test))]
        let source = Source::Api(api);
        let run = Reflect {
            source,
            sink,
            counted: 0,
            counted_bytes: 0,
            weights: Weights::default(),
            health: health.clone(),
            label: label.to_string(),
            kind,
            changes: self.changes.clone(),
            metrics: self.metrics.clone(),
            listed: Vec::new(),
            list_began: Instant::now(),
            held: self.held.clone(),
            // What `serve` cannot do without (WaveGates) is never bounded: the bound keeps a
            // remote cluster's on-demand reads from filling memory, not its gate writer blind.
            bounds: Bounds {
                max_objects: self.limits.max_objects,
                max_bytes: self.limits.max_bytes,
            }
            .any()
            .filter(|_| !required),
        };
        self.metrics.watches.inc();
        let task = tokio::spawn(run.run()).abort_handle();
        Started { health, task }
    }
}
/// A remote cluster's bounds on what its on-demand watches hold together.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    max_objects: Option<usize>,
    max_bytes: Option<usize>,
}

impl Bounds {
    fn any(self) -> Option<Bounds> {
        (self.max_objects.is_some() || self.max_bytes.is_some()).then_some(self)
    }
}

/// The weight of each object a bounded watch holds, and of each a list in progress delivered,
/// by [`key_of`] its namespace and name: an update replaces an object's weight rather than
/// adding one more object, so a cluster exactly at the bound stays within it.
#[derive(Default)]
struct Weights {
    stored: HashMap<u64, usize>,
    stored_bytes: usize,
    listing: HashMap<u64, usize>,
    listing_bytes: usize,
}

/// A watch's events, as a kube-rs watcher delivers them.
pub(super) type Events<K> = futures::stream::BoxStream<'static, watcher::Result<watcher::Event<K>>>;

/// Where a watch's events come from: the API server, or in tests what the test sends.
#[cfg_attr(test, allow(clippy::large_enum_variant))] // One per watch.
pub(super) enum Source<K: KubeResource + Clone + 'static> {
    Api(Api<K>),
    #[cfg(test)]
    Fed(Box<dyn FnMut() -> Events<K> + Send>),
}

/// One watch's task: a kube-rs watcher feeding the store, replaced by a fresh one (a full
/// list) after any error.
pub(super) struct Reflect<K: KubeResource + Clone + 'static, S> {
    source: Source<K>,
    sink: S,
    /// What this watch adds to `wavegate_cached_objects`.
    counted: i64,
    /// What this watch adds to the cache's bytes held.
    counted_bytes: usize,
    /// Kept only when bounded.
    weights: Weights,
    health: Arc<WatchHealth>,
    label: String,
    kind: GroupResource,
    changes: broadcast::Sender<Change>,
    metrics: Arc<Metrics>,
    /// Objects a list in progress delivered, announced when it completes: until then reads of
    /// this watch are refused, so whoever reacted at once would read nothing, judge "relisting"
    /// and wait for its retry backoff or the resync to hear of the object again.
    listed: Vec<(String, String)>,
    /// When the list in progress was asked for: what it delivers is at least this fresh, and no
    /// fresher (see [`WatchHealth::listed`]).
    list_began: Instant,
    /// What every watch of this cache holds, and the bounds on it (`None`: unbounded).
    held: Arc<Held>,
    bounds: Option<Bounds>,
}

/// A stopped watch (evicted, or its cache dropped) holds nothing any more.
impl<K: KubeResource + Clone + 'static, S> Drop for Reflect<K, S> {
    fn drop(&mut self) {
        self.metrics.watches.dec();
        self.metrics
            .cached_objects
            .get_or_create(&ResourceLabel::new(&self.kind.to_string()))
            .dec_by(self.counted);
        self.held
            .objects
            .fetch_sub(self.counted.max(0) as usize, Ordering::AcqRel);
        self.held
            .bytes
            .fetch_sub(self.counted_bytes, Ordering::AcqRel);
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
            let mut stream: Events<K> = match &mut self.source {
                Source::Api(api) => watcher(api.clone(), watcher::Config::default()).boxed(),
                #[cfg(test)]
                Source::Fed(next) => next(),
            };
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

    /// Apply one event; `Err` with the reason when what the cache holds would pass a bound.
    fn apply(&mut self, event: watcher::Event<K>) -> Result<(), OverBound> {
        if let Some(bounds) = self.bounds {
            self.weigh(&event, bounds)?;
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
                // kube-rs emits it before it sends the list request.
                self.listed.clear();
                self.list_began = Instant::now();
                None
            }
            watcher::Event::InitDone => None,
        };
        let (init, done) = (
            matches!(event, watcher::Event::Init),
            matches!(event, watcher::Event::InitDone),
        );
        let deleted = matches!(event, watcher::Event::Delete(_));
        // Marked before and after the store changes (see `marks`): a verdict read meanwhile
        // is never kept as if read after.
        let marks = self.health.marks.clone();
        let begin = || match &touched {
            Some((namespace, name)) => marks.object_begins(&self.kind, namespace, name),
            None if init || done => marks.phase_begins(),
            None => {}
        };
        let end = |gone: bool| match &touched {
            Some((namespace, name)) => marks.object_ends(&self.kind, namespace, name, gone),
            None if init || done => marks.phase_ends(),
            None => {}
        };
        begin();
        // Stored first, told after: whoever reacts to the change reads the new state.
        let gone = self.sink.apply(event);
        if done {
            marks.objects_dropped(&self.kind, &gone);
        }
        end(deleted);
        self.health.bump();
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
            self.health.listed(self.list_began);
            let listed = std::mem::take(&mut self.listed);
            for (namespace, name) in listed.into_iter().chain(gone) {
                self.changed(namespace, name);
            }
            tracing::info!(watch = %self.label, "watch synced");
        }
        Ok(())
    }

    /// Follow what `event` changes in this watch's weights, refusing an object Kubernetes would
    /// not have admitted and one that would take the cache past a bound. A list replaces the
    /// store only when it completes: while it runs, what it delivered counts instead of what
    /// the store still holds, or every relist of a cluster over half a bound would stop it.
    fn weigh(&mut self, event: &watcher::Event<K>, bounds: Bounds) -> Result<(), OverBound> {
        let w = &mut self.weights;
        let (o, listing) = match event {
            watcher::Event::Init => {
                w.listing.clear();
                w.listing_bytes = 0;
                return Ok(());
            }
            watcher::Event::InitDone => {
                w.stored = std::mem::take(&mut w.listing);
                w.stored_bytes = std::mem::take(&mut w.listing_bytes);
                return Ok(());
            }
            watcher::Event::Delete(o) => {
                let key = key_of(&o.namespace().unwrap_or_default(), &o.name_any());
                if let Some(gone) = w.stored.remove(&key) {
                    w.stored_bytes -= gone;
                }
                return Ok(());
            }
            watcher::Event::InitApply(o) => (o, true),
            watcher::Event::Apply(o) => (o, false),
        };
        let (namespace, name) = (o.namespace().unwrap_or_default(), o.name_any());
        if let Some(why) = bounds::beyond_kubernetes_limits(o.meta()) {
            return Err(OverBound::Invalid {
                watch: self.label.clone(),
                object: format!("{namespace}/{name}"),
                why,
            });
        }
        let weight = self.sink.weight(o);
        let (set, bytes) = if listing {
            (&mut w.listing, &mut w.listing_bytes)
        } else {
            (&mut w.stored, &mut w.stored_bytes)
        };
        let key = key_of(&namespace, &name);
        let before = set.get(&key).copied();
        let others = self
            .held
            .objects
            .load(Ordering::Acquire)
            .saturating_sub(self.counted.max(0) as usize);
        let other_bytes = self
            .held
            .bytes
            .load(Ordering::Acquire)
            .saturating_sub(self.counted_bytes);
        let objects = others + set.len() + usize::from(before.is_none());
        let held_bytes = other_bytes + *bytes - before.unwrap_or(0) + weight;
        if let Some(max) = bounds.max_objects
            && objects > max
        {
            return Err(OverBound::Objects {
                max,
                watch: self.label.clone(),
            });
        }
        if let Some(max) = bounds.max_bytes
            && held_bytes > max
        {
            return Err(OverBound::Bytes {
                max,
                watch: self.label.clone(),
            });
        }
        set.insert(key, weight);
        *bytes = *bytes - before.unwrap_or(0) + weight;
        Ok(())
    }

    /// Drop every object this watch holds (an empty list replaces them), after it hit a bound:
    /// a watch that cannot be read whole holds nothing.
    fn empty(&mut self) {
        self.listed.clear();
        self.weights = Weights::default();
        self.health.marks.phase_begins();
        let _ = self.sink.apply(watcher::Event::Init);
        let dropped = self.sink.apply(watcher::Event::InitDone);
        self.health.marks.objects_dropped(&self.kind, &dropped);
        self.health.marks.phase_ends();
        self.health.bump();
        self.count();
        let label = ResourceLabel::new(&self.kind.to_string());
        self.metrics.objects_over_bound.get_or_create(&label).inc();
        tracing::warn!(watch = %self.label, "stopped at a bound of the cluster; retrying later");
        // What was judged on the dropped objects is judged again now, on a watch that says
        // why it holds nothing; untold, a verdict written on them would stand until the next
        // resync.
        for (namespace, name) in dropped {
            self.changed(namespace, name);
        }
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
                    .objects
                    .fetch_add((now - self.counted) as usize, Ordering::AcqRel);
            } else {
                self.held
                    .objects
                    .fetch_sub((self.counted - now) as usize, Ordering::AcqRel);
            }
            self.counted = now;
        }
        let bytes = self.weights.stored_bytes;
        if bytes > self.counted_bytes {
            self.held
                .bytes
                .fetch_add(bytes - self.counted_bytes, Ordering::AcqRel);
        } else {
            self.held
                .bytes
                .fetch_sub(self.counted_bytes - bytes, Ordering::AcqRel);
        }
        self.counted_bytes = bytes;
    }

    fn changed(&self, namespace: String, name: String) {
        let _ = self.changes.send(Change {
            kind: self.kind.clone(),
            namespace,
            name,
        });
    }
}

/// Why a watch of a bounded (remote) cluster was stopped and emptied.
#[derive(Debug, thiserror::Error)]
enum OverBound {
    #[error(
        "this cluster's watches would hold more than {max} objects (--max-cluster-objects), so \
         wavegate stopped the watch of {watch} and retries it every {}",
        humantime::format_duration(OVER_BOUND_RETRY)
    )]
    Objects { max: usize, watch: String },
    #[error(
        "this cluster's watches would hold more than {} (--max-cluster-bytes), so wavegate \
         stopped the watch of {watch} and retries it every {}",
        bytes_text(*max),
        humantime::format_duration(OVER_BOUND_RETRY)
    )]
    Bytes { max: usize, watch: String },
    /// Kubernetes validates every object's metadata, so only a broken or hostile API server
    /// sends one beyond its limits; what it carries is not worth holding.
    #[error(
        "the API server sent {object} in the watch of {watch} with {why}, which no Kubernetes \
         API server admits, so wavegate stopped that watch and retries it every {}",
        humantime::format_duration(OVER_BOUND_RETRY)
    )]
    Invalid {
        watch: String,
        object: String,
        why: String,
    },
}

/// `64 MiB`, `1536 KiB`, `100 bytes`.
fn bytes_text(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}
