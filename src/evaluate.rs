//! From a question ("is this object truly ready?") to a verdict: read a snapshot from the cache,
//! probe CockroachDB pods where needed, run the pure check, and resolve persistent failures
//! against their grace periods.
//!
//! Verdicts and probe results go through short-TTL moka caches with request coalescing
//! (`get_with`), so a thousand concurrent asks for one object cause one evaluation and one probe
//! per pod.

use crate::ask::{Ask, Check};
use crate::cache::{Cache, CacheError};
use crate::checks::{application, cnpg, cockroach, generic, service};
use crate::deps::Dep;
use crate::health::{Finding, Verdict};
use crate::json::At;
use crate::locks::lock;
use crate::metrics::{Metrics, ResourceLabel};
use crate::probe::{self, Credentials};
use crate::resource::{Kind, Resource};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tunables of evaluation, set from `wavegate serve` flags.
#[derive(Debug, Clone)]
pub struct EvalConfig {
    pub verdict_ttl: Duration,
    pub probe_ttl: Duration,
    pub probe_timeout: Duration,
    /// How long a selector may match no pods while near-matching pods exist before Degraded.
    pub selector_grace: Duration,
    /// How long CNPG may report `applied: false` before Degraded (CNPG retries every 30 s).
    pub cnpg_grace: Duration,
    /// How long ready CockroachDB pods may see fewer live nodes than expected before Degraded.
    pub crdb_grace: Duration,
    pub crdb_scheme: probe::Scheme,
    pub crdb_tls: probe::TlsSettings,
    pub crdb_credentials: Option<Credentials>,
    /// When set, only these CrdbClusters (`(namespace, name)`) receive `crdb_credentials`.
    pub crdb_credentials_for: Option<std::collections::BTreeSet<(String, String)>>,
    // clusters-fix (review finding 3): CockroachDB checks are not probed, Unknown with this
    // reason. Set for remote clusters, whose pod IPs are not wavegate's network to reach.
    pub probes_refused: Option<String>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            verdict_ttl: Duration::from_millis(50),
            probe_ttl: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(2),
            selector_grace: Duration::from_secs(60),
            cnpg_grace: Duration::from_secs(90),
            crdb_grace: Duration::from_secs(60),
            crdb_scheme: probe::Scheme::Http,
            crdb_tls: probe::TlsSettings::default(),
            crdb_credentials: None,
            crdb_credentials_for: None,
            probes_refused: None,
        }
    }
}

/// A verdict and whether it rests on evidence about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Judgement {
    pub verdict: Verdict,
    /// Why the verdict says more about wavegate than about the cluster (a cache that has not
    /// synced, is failing or relisting; a probe that got no answer), if it does. Such a verdict
    /// is never grounds for Degraded: a gate's timeout does not fire on it (DESIGN.md: "Degraded
    /// needs evidence about the cluster, never about wavegate's own state").
    pub blind: Option<String>,
    /// For a Service: the selector this verdict was judged with (`k=v,…` sorted by key, `""`
    /// for none), read from the same snapshot as the verdict. Annotation mode records it, and
    /// must not take it from another read of the Service, which may be newer than the verdict.
    pub judged_selector: Option<String>,
    /// What else the verdict was judged on, for the health script to compare with the object
    /// it reads: a Service's type and `publishNotReadyAddresses`
    /// ([`service::judged_spec`]), a Database's status ([`cnpg::judged_status`]), an
    /// Application's health, sync and operation ([`application::judged_state`]). From the
    /// same snapshot as the verdict, like `judged_selector`.
    pub judged_state: Option<String>,
}

/// How long a persistent failure that is no longer observed is remembered. A failure that
/// comes back after this starts a new grace period instead of inheriting an old one.
const FORGET_FAILURES_AFTER: Duration = Duration::from_secs(120);

/// At most this many persistent failures are remembered; the oldest observations go first.
/// Keys come from what callers ask about, so the map must not grow with them.
const MAX_REMEMBERED_FAILURES: usize = 10_000;

/// A persistent failure: the ask and the judged object's identity (see [`Found::identity`]).
type FailureKey = (Ask, String);

/// A CockroachDB check is rechecked at most this often, whatever `--probe-ttl` says (0 would
/// probe in a loop).
const MIN_PROBE_RECHECK: Duration = Duration::from_secs(1);

/// Verdicts kept for the verdict TTL; keys come from what callers ask, so the cache is bounded.
const MAX_CACHED_VERDICTS: u64 = 100_000;
/// Probe answers kept for the probe TTL, one per CockroachDB pod and membership.
const MAX_CACHED_PROBES: u64 = 10_000;

/// Since when a persistent failure of one object identity has been observed, and when last.
#[derive(Debug, Clone, Copy)]
struct Observed {
    since: Instant,
    last: Instant,
}

pub struct Evaluator {
    cache: Arc<Cache>,
    config: EvalConfig,
    verdicts: moka::future::Cache<Ask, Judgement>,
    probes: moka::future::Cache<String, cockroach::PodProbe>,
    /// When each persistent failure was first seen, by ask and object identity (UID and
    /// generation), so a grace period belongs to one object at one spec.
    failing_since: Mutex<HashMap<FailureKey, Observed>>,
    prober: Arc<probe::Prober>,
    /// Probes running, by the probe cache's key: each runs as a task of its own, so an ask
    /// that goes away (its HTTP request cancelled) does not cancel a probe other asks wait on,
    /// and an ask that takes over the probe cache's wait joins the same probe.
    probing: Arc<Mutex<HashMap<String, (u64, SharedProbe)>>>,
    metrics: Arc<Metrics>,
}

type SharedProbe =
    futures::future::Shared<futures::future::BoxFuture<'static, cockroach::PodProbe>>;

impl Evaluator {
    pub fn new(
        cache: Arc<Cache>,
        config: EvalConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Evaluator>, probe::ProbeError> {
        let prober = probe::Prober::new(
            config.crdb_scheme,
            config.crdb_tls.clone(),
            config.crdb_credentials.clone(),
            config.probe_timeout,
        )?;
        Ok(Arc::new(Evaluator {
            verdicts: moka::future::Cache::builder()
                .time_to_live(config.verdict_ttl.max(Duration::from_millis(1)))
                .max_capacity(MAX_CACHED_VERDICTS)
                .build(),
            probes: moka::future::Cache::builder()
                .time_to_live(config.probe_ttl.max(Duration::from_millis(1)))
                .max_capacity(MAX_CACHED_PROBES)
                .build(),
            failing_since: Mutex::default(),
            prober: Arc::new(prober),
            probing: Arc::default(),
            cache,
            config,
            metrics,
        }))
    }

    pub(crate) fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The longest one judgement should need: a watch's first list (`--sync-wait`), then a
    /// probe round (the probe timeout).
    pub(crate) fn patience(&self) -> Duration {
        self.cache.sync_wait() + self.config.probe_timeout
    }

    /// How often something waiting on a CockroachDB check is judged again: probes are not
    /// watched, and a fresh answer exists once per probe TTL (the probe cache keeps the cost at
    /// one probe per pod per TTL however often this runs).
    pub(crate) fn probe_recheck(&self) -> Duration {
        self.config.probe_ttl.max(MIN_PROBE_RECHECK)
    }

    /// The verdict for `ask`, from the verdict cache when fresh. Concurrent asks for the same
    /// object wait on one evaluation.
    pub(crate) async fn judge(&self, ask: &Ask) -> Verdict {
        self.metrics
            .asks
            .get_or_create(&ResourceLabel::new(&ask.resource().to_string()))
            .inc();
        let mut computed = false;
        let verdict = self
            .verdicts
            // Boxed: the evaluation's state machine (probe futures included) is large, and
            // would otherwise be moved around on every ask, cache hit or not.
            .get_with_by_ref(ask, async {
                computed = true;
                Box::pin(self.evaluate(ask)).await
            })
            .await
            .verdict;
        self.metrics.record_cache(!computed);
        self.metrics.record_verdict(verdict.status);
        verdict
    }

    /// Evaluate now, bypassing the verdict cache (probes stay cached). For the gate controller,
    /// which runs on change events and must see the change that woke it.
    pub(crate) async fn judge_fresh(&self, ask: &Ask) -> Judgement {
        let j = self.evaluate(ask).await;
        self.verdicts.insert(ask.clone(), j.clone()).await;
        j
    }

    async fn evaluate(&self, ask: &Ask) -> Judgement {
        let found = match self.find(ask).await {
            Ok(found) => found,
            Err(e) => Found {
                blind: Some(e.to_string()),
                ..Found::seen(cache_verdict(ask, &e).into(), Duration::ZERO, None)
            },
        };
        let key = (ask.clone(), found.identity);
        let lasted = match &found.finding {
            Finding::Persistent { .. } => self.lasted(&key, Instant::now()),
            Finding::Settled(_) => {
                self.forget(&key);
                Duration::ZERO
            }
        };
        Judgement {
            verdict: found.finding.resolve(lasted, found.grace),
            blind: found.blind,
            judged_selector: found.judged_selector,
            judged_state: found.judged_state,
        }
    }

    async fn find(&self, ask: &Ask) -> Result<Found, CacheError> {
        let c = &self.cache;
        let (namespace, name) = (ask.namespace.as_str(), ask.name.as_str());
        Ok(match &ask.check {
            Check::Service(params) => {
                let svc = c.service(namespace, name).await?;
                let pods = c.pods(namespace).await?;
                let slices = c.endpoint_slices(namespace, name).await?;
                let f = service::check(namespace, name, svc.as_deref(), &pods, &slices, params);
                // A Service has no metadata.generation: its spec is its selector.
                let selector = svc.as_deref().map(|s| {
                    let text: Vec<String> = s
                        .selector
                        .iter()
                        .flat_map(|l| l.iter())
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    text.join(",")
                });
                let identity = svc.as_deref().zip(selector.as_ref()).map(|(s, text)| {
                    let uid = s.uid.as_ref().map(ToString::to_string).unwrap_or_default();
                    format!("{uid}@{}@{text}", s.generation.unwrap_or(0))
                });
                Found {
                    judged_selector: selector,
                    judged_state: svc.as_deref().map(service::judged_spec),
                    ..Found::seen(f, self.config.selector_grace, identity)
                }
            }
            Check::CnpgDatabase(params) => {
                let db = c.object(&CNPG_DATABASES, namespace, name).await?;
                let cluster = match db.as_ref().and_then(cnpg::cluster_name) {
                    Some(cluster) => c.object(&CNPG_CLUSTERS, namespace, cluster).await?,
                    None => None,
                };
                let f = cnpg::check(namespace, name, db.as_ref(), cluster.as_ref(), params);
                // The Cluster's UID too: a Database failing on a Cluster that was deleted and
                // recreated under the same name failed on another Cluster, and the new one's
                // primary gets its own grace.
                let identity = db.as_ref().map(|d| {
                    let cluster_uid = cluster
                        .as_ref()
                        .and_then(|c| c.str_at("/metadata/uid"))
                        .unwrap_or("");
                    format!("{}@{cluster_uid}", json_identity(d))
                });
                Found {
                    judged_state: db.as_ref().map(cnpg::judged_status),
                    ..Found::seen(f, self.config.cnpg_grace, identity)
                }
            }
            // clusters-fix (finding 3): no probe at all, whatever the pods say.
            Check::CrdbCluster(_) if self.config.probes_refused.is_some() => {
                let why = self.config.probes_refused.clone().unwrap_or_default();
                let v = Verdict::unknown(format!("CrdbCluster {namespace}/{name}: {why}"));
                Found {
                    blind: Some(why),
                    ..Found::seen(v.into(), Duration::ZERO, None)
                }
            }
            Check::CrdbCluster(wanted) => {
                let cluster = c.object(&CRDB_CLUSTERS, namespace, name).await?;
                let pods = c.pods(namespace).await?;
                let params = cockroach::Params {
                    expected_nodes: wanted.expected_nodes,
                    selector: wanted.selector.clone(),
                    http_port: None,
                    owners: self.crdb_owners(namespace, cluster.as_ref()).await,
                };
                let mut unanswered = None;
                let f = match cockroach::plan(namespace, name, cluster.as_ref(), &pods, &params) {
                    Err(f) => f,
                    Ok(mut plan) => {
                        // A pod whose controller is the CrdbCluster itself counts as a member
                        // whatever the owners say: the installer's list must hold there too.
                        if !self.credentials_allowed(namespace, name) {
                            for t in &mut plan.targets {
                                t.controlled_by_cluster = false;
                            }
                        }
                        let probes = futures::future::join_all(
                            plan.targets.iter().map(|t| self.probe(namespace, name, t)),
                        )
                        .await;
                        unanswered = probes.iter().find_map(|p| match &p.readiness {
                            cockroach::Readiness::Unreachable(why) => {
                                Some(format!("pod {} did not answer: {why}", p.pod))
                            }
                            _ => None,
                        });
                        cockroach::judge(namespace, name, &plan, &probes)
                    }
                };
                let identity = cluster.as_ref().map(json_identity);
                Found {
                    blind: unanswered,
                    ..Found::seen(f, self.config.crdb_grace, identity)
                }
            }
            Check::Application => {
                let app = c.object(&APPLICATIONS, namespace, name).await?;
                let v = application::check(namespace, name, app.as_ref());
                Found {
                    judged_state: app.as_ref().map(application::judged_state),
                    ..Found::seen(v.into(), Duration::ZERO, None)
                }
            }
            Check::Generic {
                group,
                plural,
                rule,
            } => {
                let obj = c.object(&Kind::new(group, plural), namespace, name).await?;
                let kind = ask.resource().to_string();
                let (ns, n, rule) = (namespace.to_string(), name.to_string(), rule.clone());
                let v = generic::check_off_runtime(kind, ns, n, obj, rule).await;
                Found::seen(v.into(), Duration::ZERO, None)
            }
        })
    }

    /// Probe one pod, coalesced and cached for the probe TTL.
    async fn probe(
        &self,
        namespace: &str,
        cluster: &str,
        target: &cockroach::ProbeTarget,
    ) -> cockroach::PodProbe {
        // Membership is part of the key: a pod's answer with credentials is not its answer
        // without, and the server name it was verified for belongs to one cluster. So is the
        // pod's UID: a pod recreated under its name is a new node.
        let key = format!(
            "{namespace}/{cluster}|{}|{}|{}:{}|{}",
            target.pod, target.uid, target.ip, target.port, target.controlled_by_cluster
        );
        self.probes
            .get_with(key.clone(), self.probing(key, namespace, cluster, target))
            .await
    }

    /// The running probe of `key`, or a new one.
    async fn probing(
        &self,
        key: String,
        namespace: &str,
        cluster: &str,
        target: &cockroach::ProbeTarget,
    ) -> cockroach::PodProbe {
        use futures::FutureExt;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let running = {
            let mut probing = lock(&self.probing);
            match probing.get(&key) {
                Some((_, running)) => running.clone(),
                None => {
                    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let (prober, metrics, cache, all, done) = (
                        self.prober.clone(),
                        self.metrics.clone(),
                        self.probes.clone(),
                        self.probing.clone(),
                        self.probing.clone(),
                    );
                    let (ns, cl, t, k, key_done) = (
                        namespace.to_string(),
                        cluster.to_string(),
                        target.clone(),
                        key.clone(),
                        key.clone(),
                    );
                    let task = tokio::spawn(async move {
                        let started = Instant::now();
                        let p = prober.probe(&ns, &cl, &t).await;
                        metrics
                            .probe_seconds
                            .observe(started.elapsed().as_secs_f64());
                        if matches!(p.readiness, cockroach::Readiness::Unreachable(_)) {
                            metrics.probe_errors.inc();
                        }
                        // Cached even when every ask that waited for it has gone.
                        cache.insert(k.clone(), p.clone()).await;
                        forget(&done, &k, id);
                        p
                    });
                    let pod = target.pod.clone();
                    let running = async move {
                        let outcome = task.await;
                        // Also here: a probe task that panicked never reached its own
                        // `forget`, and must not stay "running" for as long as its pod lives.
                        forget(&all, &key_done, id);
                        outcome.unwrap_or_else(|e| {
                            cockroach::PodProbe::bare(
                                &pod,
                                cockroach::Readiness::Unreachable(format!(
                                    "the probe stopped: {e}"
                                )),
                            )
                        })
                    }
                    .boxed()
                    .shared();
                    probing.insert(key, (id, running.clone()));
                    running
                }
            }
        };
        running.await
    }

    /// What proves CockroachDB pods' membership, read only when there are credentials to
    /// protect, and only the kind this cluster's operator uses: CrdbNodes for the current one
    /// (`spec.regions`), StatefulSets for the older one. A kind that is not there or cannot be
    /// read proves nothing, which only withholds credentials.
    async fn crdb_owners(
        &self,
        namespace: &str,
        cluster: Option<&serde_json::Value>,
    ) -> cockroach::Owners {
        let mut owners = cockroach::Owners::default();
        let Some(cluster) = cluster else {
            return owners;
        };
        if self.config.crdb_credentials.is_none() {
            return owners;
        }
        // Membership proven is what lets credentials go to a pod: a cluster the installer did
        // not name proves none, so its pods are probed without them (with a CA shared across
        // tenants, a tenant's own CrdbCluster can present correctly issued certificates).
        let name = cluster.str_at("/metadata/name").unwrap_or("");
        if !self.credentials_allowed(namespace, name) {
            return owners;
        }
        let (owner, kind) = if cluster.pointer("/spec/regions").is_some() {
            (CRDB_NODES, "CrdbNode")
        } else {
            (STATEFUL_SETS, "StatefulSet")
        };
        if let Ok(found) = self.cache.objects(&owner, Some(namespace)).await {
            owners.record(kind, &found);
        }
        owners
    }

    /// Whether the installer lets this CrdbCluster's members receive the DB Console
    /// credentials (`--crdb-credentials-for`; unset: every CrdbCluster).
    fn credentials_allowed(&self, namespace: &str, name: &str) -> bool {
        self.config
            .crdb_credentials_for
            .as_ref()
            .is_none_or(|allowed| allowed.contains(&(namespace.to_string(), name.to_string())))
    }

    fn lasted(&self, key: &FailureKey, now: Instant) -> Duration {
        observe(&mut lock(&self.failing_since), key, now)
    }

    fn forget(&self, key: &FailureKey) {
        lock(&self.failing_since).remove(key);
    }
}

/// What [`Evaluator::find`] reads from the cache for `ask`, so that a change to any of it wakes
/// whatever waits on the verdict (the gate controller, annotation mode). Keep the two in step:
/// a read missing here is a change nobody is woken for.
pub(crate) fn reads(ask: &Ask) -> Vec<Dep> {
    let (ns, name) = (ask.namespace.as_str(), ask.name.as_str());
    let own = Dep::object(ask.resource().kind(), ns, name);
    match &ask.check {
        Check::Service(_) => vec![
            own,
            Dep::namespace(Kind::PODS, ns),
            Dep::namespace(Kind::ENDPOINT_SLICES, ns),
        ],
        // The Database names its Cluster in its spec; any Cluster in the namespace will do.
        Check::CnpgDatabase(_) => vec![own, Dep::namespace(CNPG_CLUSTERS, ns)],
        // Probes are not watched: the controller rechecks these every probe TTL.
        Check::CrdbCluster(_) => vec![own, Dep::namespace(Kind::PODS, ns)],
        Check::Application | Check::Generic { .. } => vec![own],
    }
}

const CNPG_DATABASES: Kind = Kind::fixed(Resource::CNPG_GROUP, "databases");
const CNPG_CLUSTERS: Kind = Kind::fixed(Resource::CNPG_GROUP, "clusters");
const CRDB_CLUSTERS: Kind = Kind::fixed(Resource::CRDB_GROUP, "crdbclusters");
const APPLICATIONS: Kind = Kind::fixed(Resource::ARGO_GROUP, "applications");
const CRDB_NODES: Kind = Kind::fixed(Resource::CRDB_GROUP, "crdbnodes");
const STATEFUL_SETS: Kind = Kind::fixed("apps", "statefulsets");

/// What `find` concluded, with what the grace period of a persistent failure belongs to.
struct Found {
    finding: Finding,
    grace: Duration,
    /// The judged object's UID and generation: a failure of another object under the same name,
    /// or of the same object at another spec, starts its own grace period.
    identity: String,
    blind: Option<String>,
    judged_selector: Option<String>,
    judged_state: Option<String>,
}

impl Found {
    fn seen(finding: Finding, grace: Duration, identity: Option<String>) -> Found {
        Found {
            finding,
            grace,
            identity: identity.unwrap_or_default(),
            blind: None,
            judged_selector: None,
            judged_state: None,
        }
    }
}

fn json_identity(obj: &serde_json::Value) -> String {
    let meta = &obj["metadata"];
    format!(
        "{}@{}",
        meta["uid"].as_str().unwrap_or(""),
        meta["generation"].as_i64().unwrap_or(0)
    )
}

/// Record an observation of the persistent failure `key` at `now` and return how long it has
/// lasted. A failure not observed for [`FORGET_FAILURES_AFTER`] starts again; the map is pruned
/// of such stale entries, and of the oldest ones past [`MAX_REMEMBERED_FAILURES`].
fn observe<K: Clone + Eq + Hash>(m: &mut HashMap<K, Observed>, key: &K, now: Instant) -> Duration {
    let fresh = |o: &Observed| now.saturating_duration_since(o.last) < FORGET_FAILURES_AFTER;
    if !m.contains_key(key) && m.len() >= MAX_REMEMBERED_FAILURES {
        m.retain(|_, o| fresh(o));
        if m.len() >= MAX_REMEMBERED_FAILURES
            && let Some(oldest) = m.iter().min_by_key(|(_, o)| o.last).map(|(k, _)| k.clone())
        {
            m.remove(&oldest);
        }
    }
    let entry = m.entry(key.clone()).or_insert(Observed {
        since: now,
        last: now,
    });
    if !fresh(entry) {
        entry.since = now;
    }
    entry.last = now;
    now.saturating_duration_since(entry.since)
}

/// A cache that cannot answer is never evidence of health: not yet synced keeps the wave
/// waiting (Progressing), anything else is Unknown with the reason.
fn cache_verdict(ask: &Ask, e: &CacheError) -> Verdict {
    let msg = format!("{} {}: {e}", ask.resource(), ask.object());
    match e {
        // Transient blindness of wavegate's own cache: Progressing, never Unknown, which
        // fails a hook gate and with it the sync.
        CacheError::NotSynced(_)
        | CacheError::Relisting { .. }
        | CacheError::AccessReview { .. } => Verdict::progressing(msg),
        _ => Verdict::unknown(msg),
    }
}

/// Drops `key` from the running probes if it is still the probe `id` (a newer one may have
/// taken its place).
fn forget(probing: &Mutex<HashMap<String, (u64, SharedProbe)>>, key: &str, id: u64) {
    let mut probing = lock(probing);
    if probing.get(key).is_some_and(|(i, _)| *i == id) {
        probing.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Change;
    use crate::deps::DepIndex;
    use crate::resource::Target;

    fn change(kind: Kind, ns: &str, name: &str) -> Change {
        Change {
            kind,
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn ask(resource: Resource, ns: &str) -> Ask {
        Ask::with_defaults(Target::new(resource, ns, "forgejo").unwrap())
    }

    #[test]
    fn a_pod_change_reaches_gates_with_service_checks_in_that_namespace_only() {
        let mut idx = DepIndex::default();
        let svc = |ns: &str| ask(Resource::Service, ns);
        idx.set("a", reads(&svc("cicd")));
        idx.set("b", reads(&svc("prod")));
        assert_eq!(
            idx.affected(&change(Kind::PODS, "cicd", "forgejo-7d9c")),
            vec!["a"]
        );
        assert_eq!(
            idx.affected(&change(Kind::SERVICES, "prod", "forgejo")),
            vec!["b"]
        );
        assert!(
            idx.affected(&change(Kind::SERVICES, "prod", "other"))
                .is_empty()
        );
        idx.remove(&"a");
        assert!(idx.affected(&change(Kind::PODS, "cicd", "x")).is_empty());
    }

    #[test]
    fn a_database_change_reaches_its_gate_and_so_does_its_cluster() {
        let mut idx = DepIndex::default();
        let db = ask(Resource::CnpgDatabase, "ddb");
        idx.set("g", reads(&db));
        assert_eq!(
            idx.affected(&change(CNPG_DATABASES, "ddb", "forgejo")),
            vec!["g"]
        );
        assert_eq!(idx.affected(&change(CNPG_CLUSTERS, "ddb", "pg")), vec!["g"]);
    }
}
