//! Event-driven re-evaluation, shared by the gate controller and annotation mode: which cached
//! objects a judged thing depends on ([`DepIndex`]), and a work queue ([`run`]) that turns cache
//! changes into debounced, bounded-concurrency re-evaluations plus a periodic resync.
//!
//! The queue never runs one key twice at once; a change that arrives while its key is being
//! judged runs it again afterwards, so the last change is never lost. Changes are coalesced for
//! a short fixed window after the first one (not extended by later ones, so a busy namespace
//! cannot starve a gate).

use crate::cache::Change;
use crate::evaluate::Ask;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, broadcast};
use tokio::task::{Id, JoinSet};
use tokio::time::{Instant, sleep_until};

/// CockroachDB checks depend on pod probes, which no watch event announces; something waiting
/// on one is judged again this often (the evaluator's probe cache keeps the cost at one probe
/// per pod per probe TTL).
pub const PROBE_RECHECK: Duration = Duration::from_secs(2);

/// Something a verdict was read from: one object, or every object of a kind in a namespace
/// (pods and EndpointSlices, whose names a Service check does not know in advance).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dep {
    Object {
        resource: String,
        namespace: String,
        name: String,
    },
    Namespace {
        resource: String,
        namespace: String,
    },
}

impl Dep {
    pub fn object(resource: &str, namespace: &str, name: &str) -> Dep {
        Dep::Object {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn namespace(resource: &str, namespace: &str) -> Dep {
        Dep::Namespace {
            resource: resource.into(),
            namespace: namespace.into(),
        }
    }
}

/// What the evaluator reads for `ask`, as the cache names the resources in its [`Change`]s.
pub fn deps_of(ask: &Ask) -> Vec<Dep> {
    let (ns, name) = (ask.namespace(), ask.name());
    let own = Dep::object(&ask.resource(), ns, name);
    match ask {
        Ask::Service { .. } => vec![
            own,
            Dep::namespace("pods", ns),
            Dep::namespace("endpointslices", ns),
        ],
        // The Database names its Cluster in its spec; any Cluster in the namespace will do.
        Ask::CnpgDatabase { .. } => vec![own, Dep::namespace("clusters.postgresql.cnpg.io", ns)],
        Ask::CrdbCluster { .. } => vec![own, Dep::namespace("pods", ns)],
        Ask::Application { .. } | Ask::Generic { .. } => vec![own],
    }
}

/// Reverse index from cached objects to the keys (gates, annotated objects) that read them.
pub struct DepIndex<K> {
    objects: HashMap<(String, String, String), HashSet<K>>,
    namespaces: HashMap<(String, String), HashSet<K>>,
    deps: HashMap<K, Vec<Dep>>,
}

impl<K> Default for DepIndex<K> {
    fn default() -> Self {
        DepIndex {
            objects: HashMap::new(),
            namespaces: HashMap::new(),
            deps: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> DepIndex<K> {
    /// Replace what `key` depends on.
    pub fn set(&mut self, key: K, deps: Vec<Dep>) {
        if self.deps.get(&key) == Some(&deps) {
            return;
        }
        self.remove(&key);
        for d in &deps {
            let set = match d {
                Dep::Object {
                    resource,
                    namespace,
                    name,
                } => self
                    .objects
                    .entry((resource.clone(), namespace.clone(), name.clone()))
                    .or_default(),
                Dep::Namespace {
                    resource,
                    namespace,
                } => self
                    .namespaces
                    .entry((resource.clone(), namespace.clone()))
                    .or_default(),
            };
            set.insert(key.clone());
        }
        self.deps.insert(key, deps);
    }

    pub fn remove(&mut self, key: &K) {
        for d in self.deps.remove(key).unwrap_or_default() {
            match d {
                Dep::Object {
                    resource,
                    namespace,
                    name,
                } => {
                    let k = (resource, namespace, name);
                    if let Some(set) = self.objects.get_mut(&k) {
                        set.remove(key);
                        if set.is_empty() {
                            self.objects.remove(&k);
                        }
                    }
                }
                Dep::Namespace {
                    resource,
                    namespace,
                } => {
                    let k = (resource, namespace);
                    if let Some(set) = self.namespaces.get_mut(&k) {
                        set.remove(key);
                        if set.is_empty() {
                            self.namespaces.remove(&k);
                        }
                    }
                }
            }
        }
    }

    /// Keys whose verdict may have changed with `change`.
    pub fn affected(&self, change: &Change) -> Vec<K> {
        let exact = self.objects.get(&(
            change.resource.clone(),
            change.namespace.clone(),
            change.name.clone(),
        ));
        let in_ns = self
            .namespaces
            .get(&(change.resource.clone(), change.namespace.clone()));
        let mut out: Vec<K> = exact.into_iter().chain(in_ns).flatten().cloned().collect();
        if exact.is_some() && in_ns.is_some() {
            let mut seen = HashSet::new();
            out.retain(|k| seen.insert(k.clone()));
        }
        out
    }
}

/// The work a queue drives.
pub trait Reconcile<K>: Send + Sync + 'static {
    /// Keys to re-evaluate because of `change`.
    fn affected(&self, change: &Change) -> Vec<K>;
    /// Every key, for the periodic resync (and at start).
    fn all(&self) -> impl Future<Output = Vec<K>> + Send;
    /// Judge `key` and write what changed; `Some(d)` asks to be judged again after `d`
    /// (a timeout that will fire, a probe-based check still converging).
    fn reconcile(&self, key: K) -> impl Future<Output = Option<Duration>> + Send;
}

#[derive(Debug, Clone, Copy)]
pub struct QueueConfig {
    /// How long changes are coalesced after the first one.
    pub debounce: Duration,
    /// Keys judged at once.
    pub concurrency: usize,
    /// Every key is judged at least this often (grace periods and timeouts advance with time,
    /// not with events; a lost event is repaired).
    pub resync: Duration,
}

impl QueueConfig {
    pub fn new(resync: Duration) -> Self {
        QueueConfig {
            debounce: Duration::from_millis(20),
            concurrency: 4,
            resync,
        }
    }
}

/// Drive `work` until the change channel closes.
pub async fn run<K, R>(work: Arc<R>, mut changes: broadcast::Receiver<Change>, cfg: QueueConfig)
where
    K: Clone + Eq + Hash + Send + Sync + std::fmt::Debug + 'static,
    R: Reconcile<K>,
{
    let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let mut dirty: HashSet<K> = HashSet::new();
    let mut running: HashMap<Id, K> = HashMap::new();
    let mut again: HashSet<K> = HashSet::new();
    let mut timers: HashMap<K, Instant> = HashMap::new();
    let mut due: Option<Instant> = None;
    let mut tasks: JoinSet<Option<Duration>> = JoinSet::new();
    let mut resync = tokio::time::interval(cfg.resync.max(Duration::from_millis(10)));
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next_timer = timers.values().min().copied();
        tokio::select! {
            _ = resync.tick() => {
                dirty.extend(work.all().await);
                due.get_or_insert(Instant::now() + cfg.debounce);
            }
            msg = changes.recv() => match msg {
                Ok(change) => {
                    let keys = work.affected(&change);
                    if !keys.is_empty() {
                        dirty.extend(keys);
                        due.get_or_insert(Instant::now() + cfg.debounce);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "change feed lagged; re-evaluating everything");
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
                    timers.remove(&key);
                    let (w, p, k) = (work.clone(), permits.clone(), key.clone());
                    let handle = tasks.spawn(async move {
                        let _permit = p.acquire_owned().await.ok();
                        w.reconcile(k).await
                    });
                    running.insert(handle.id(), key);
                }
            }
            _ = sleep_until(next_timer.unwrap_or_else(Instant::now)), if next_timer.is_some() => {
                let now = Instant::now();
                let fired: Vec<K> = timers.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
                for k in fired {
                    timers.remove(&k);
                    dirty.insert(k);
                }
                due.get_or_insert(now + cfg.debounce);
            }
            Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let (id, requeue) = match done {
                    Ok((id, requeue)) => (id, requeue),
                    Err(e) => {
                        tracing::error!(error = %e, "a re-evaluation panicked");
                        (e.id(), None)
                    }
                };
                if let Some(key) = running.remove(&id) {
                    if let Some(after) = requeue {
                        timers.insert(key.clone(), Instant::now() + after);
                    }
                    if again.remove(&key) {
                        dirty.insert(key);
                        due.get_or_insert(Instant::now() + cfg.debounce);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn change(resource: &str, ns: &str, name: &str) -> Change {
        Change {
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_pod_change_reaches_gates_with_service_checks_in_that_namespace_only() {
        let mut idx = DepIndex::default();
        let svc = |ns: &str| Ask::Service {
            namespace: ns.into(),
            name: "forgejo".into(),
            min_ready: 1,
        };
        idx.set("a", deps_of(&svc("cicd")));
        idx.set("b", deps_of(&svc("prod")));
        assert_eq!(
            idx.affected(&change("pods", "cicd", "forgejo-7d9c")),
            vec!["a"]
        );
        assert_eq!(
            idx.affected(&change("services", "prod", "forgejo")),
            vec!["b"]
        );
        assert!(
            idx.affected(&change("services", "prod", "other"))
                .is_empty()
        );
        idx.remove(&"a");
        assert!(idx.affected(&change("pods", "cicd", "x")).is_empty());
        assert!(
            idx.objects.len() == 1 && idx.namespaces.len() == 2,
            "a's entries are gone"
        );
    }

    #[test]
    fn a_database_change_reaches_its_gate_and_so_does_its_cluster() {
        let mut idx = DepIndex::default();
        let db = Ask::CnpgDatabase {
            namespace: "ddb".into(),
            name: "forgejo".into(),
            require_cluster_ready: true,
        };
        idx.set("g", deps_of(&db));
        assert_eq!(
            idx.affected(&change("databases.postgresql.cnpg.io", "ddb", "forgejo")),
            vec!["g"]
        );
        assert_eq!(
            idx.affected(&change("clusters.postgresql.cnpg.io", "ddb", "pg")),
            vec!["g"]
        );
    }

    /// Counts reconciles; `slow` keys take 100 ms.
    #[derive(Default)]
    struct Recorder {
        runs: Mutex<Vec<&'static str>>,
        requeue: Option<Duration>,
    }

    impl Reconcile<&'static str> for Recorder {
        fn affected(&self, change: &Change) -> Vec<&'static str> {
            match change.name.as_str() {
                "a" => vec!["a"],
                "b" => vec!["b"],
                _ => vec![],
            }
        }
        async fn all(&self) -> Vec<&'static str> {
            vec!["a"]
        }
        async fn reconcile(&self, key: &'static str) -> Option<Duration> {
            self.runs.lock().unwrap().push(key);
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.requeue
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

    async fn settle(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_is_judged_once_and_the_last_one_is_never_lost() {
        let (tx, rx) = broadcast::channel(64);
        let rec = Arc::new(Recorder::default());
        tokio::spawn(run(
            rec.clone(),
            rx,
            QueueConfig::new(Duration::from_secs(15)),
        ));
        settle(200).await; // the initial resync judges "a" once
        assert_eq!(rec.count("a"), 1);
        for _ in 0..50 {
            tx.send(change("pods", "ns", "b")).unwrap();
        }
        settle(30).await;
        assert_eq!(
            rec.count("b"),
            1,
            "50 changes within the debounce window: one judgement"
        );
        // While "b" is being judged, another change arrives: it runs again afterwards.
        tx.send(change("pods", "ns", "b")).unwrap();
        settle(300).await;
        assert_eq!(rec.count("b"), 2);
        tx.send(change("pods", "ns", "unrelated")).unwrap();
        settle(300).await;
        assert_eq!(rec.runs.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn resync_judges_everything_periodically() {
        let (_tx, rx) = broadcast::channel(64);
        let rec = Arc::new(Recorder::default());
        tokio::spawn(run(
            rec.clone(),
            rx,
            QueueConfig::new(Duration::from_secs(15)),
        ));
        settle(200).await;
        assert_eq!(rec.count("a"), 1);
        settle(15_000).await;
        assert_eq!(rec.count("a"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_requested_recheck_fires_without_any_event() {
        let (_tx, rx) = broadcast::channel(64);
        let rec = Arc::new(Recorder {
            requeue: Some(Duration::from_secs(2)),
            ..Recorder::default()
        });
        tokio::spawn(run(
            rec.clone(),
            rx,
            QueueConfig::new(Duration::from_secs(600)),
        ));
        settle(200).await;
        assert_eq!(rec.count("a"), 1);
        settle(2_000).await;
        assert_eq!(rec.count("a"), 2);
        settle(2_200).await;
        assert_eq!(rec.count("a"), 3);
    }
}
