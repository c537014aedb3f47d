//! From a question ("is this object truly ready?") to a verdict: read a snapshot from the cache,
//! probe CockroachDB pods where needed, run the pure check, and resolve persistent failures
//! against their grace periods.
//!
//! Verdicts and probe results go through short-TTL moka caches with request coalescing
//! (`get_with`), so a thousand concurrent asks for one object cause one evaluation and one probe
//! per pod.

use crate::cache::{Cache, CacheError};
use crate::checks::{application, cnpg, cockroach, generic, service};
use crate::health::{Finding, Verdict};
use crate::metrics::{Metrics, ResourceLabel};
use crate::probe::{self, Credentials};
use crate::resource::{InputError, Resource, Target};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One question, with the check's parameters. Built from an HTTP query, a CLI flag set or a
/// WaveGate check entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Ask {
    Service {
        namespace: String,
        name: String,
        min_ready: u32,
    },
    CnpgDatabase {
        namespace: String,
        name: String,
        require_cluster_ready: bool,
    },
    CrdbCluster {
        namespace: String,
        name: String,
        expected_nodes: Option<u32>,
        selector: Option<BTreeMap<String, String>>,
    },
    Application {
        namespace: String,
        name: String,
    },
    Generic {
        group: String,
        plural: String,
        namespace: String,
        name: String,
        rule: generic::Rule,
    },
}

impl Ask {
    /// Build an ask from a target and string parameters (HTTP query or CLI `--param k=v`).
    /// Unknown parameters are rejected so a typo never silently weakens a check.
    pub fn from_params(
        target: Target,
        params: &HashMap<String, String>,
    ) -> Result<Ask, InputError> {
        let Target {
            resource,
            namespace,
            name,
        } = target;
        let allowed: &[&str] = match resource {
            Resource::Service => &["minReady"],
            Resource::CnpgDatabase => &["requireClusterReady"],
            Resource::CrdbCluster => &["expectedNodes", "selector"],
            Resource::Application => &[],
            Resource::Generic { .. } => &["healthy", "progressing", "degraded"],
        };
        if let Some(k) = params.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(InputError::Parameter {
                name: k.clone(),
                reason: format!(
                    "not a parameter of {resource} (allowed: {})",
                    if allowed.is_empty() {
                        "none".to_string()
                    } else {
                        allowed.join(", ")
                    }
                ),
            });
        }
        Ok(match resource {
            Resource::Service => Ask::Service {
                namespace,
                name,
                min_ready: parse_param(params, "minReady")?.unwrap_or(1),
            },
            Resource::CnpgDatabase => Ask::CnpgDatabase {
                namespace,
                name,
                require_cluster_ready: parse_param(params, "requireClusterReady")?.unwrap_or(false),
            },
            Resource::CrdbCluster => Ask::CrdbCluster {
                namespace,
                name,
                expected_nodes: parse_param(params, "expectedNodes")?
                    .map(|n: u32| {
                        // Nothing expected proves nothing; say so instead of judging it.
                        (n > 0).then_some(n).ok_or_else(|| InputError::Parameter {
                            name: "expectedNodes".into(),
                            reason: "must be at least 1".into(),
                        })
                    })
                    .transpose()?,
                selector: params
                    .get("selector")
                    .map(|s| parse_selector(s))
                    .transpose()?,
            },
            Resource::Application => Ask::Application { namespace, name },
            Resource::Generic { group, plural } => {
                let rule = generic::Rule {
                    healthy: params.get("healthy").cloned(),
                    progressing: params.get("progressing").cloned(),
                    degraded: params.get("degraded").cloned(),
                };
                generic::validate(&rule).map_err(|reason| InputError::Parameter {
                    name: "healthy/progressing/degraded".into(),
                    reason,
                })?;
                Ask::Generic {
                    group,
                    plural,
                    namespace,
                    name,
                    rule,
                }
            }
        })
    }

    /// kubectl-style resource, for metrics and messages.
    pub fn resource(&self) -> String {
        match self {
            Ask::Service { .. } => Resource::Service.to_string(),
            Ask::CnpgDatabase { .. } => Resource::CnpgDatabase.to_string(),
            Ask::CrdbCluster { .. } => Resource::CrdbCluster.to_string(),
            Ask::Application { .. } => Resource::Application.to_string(),
            Ask::Generic { group, plural, .. } => Resource::Generic {
                group: group.clone(),
                plural: plural.clone(),
            }
            .to_string(),
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Ask::Service { namespace, .. }
            | Ask::CnpgDatabase { namespace, .. }
            | Ask::CrdbCluster { namespace, .. }
            | Ask::Application { namespace, .. }
            | Ask::Generic { namespace, .. } => namespace,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Ask::Service { name, .. }
            | Ask::CnpgDatabase { name, .. }
            | Ask::CrdbCluster { name, .. }
            | Ask::Application { name, .. }
            | Ask::Generic { name, .. } => name,
        }
    }

    /// `namespace/name` of the object judged.
    pub fn object(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    fn key(&self) -> String {
        // Debug is stable within one process, which is all a cache key needs.
        format!("{self:?}")
    }
}

fn parse_param<T: std::str::FromStr>(
    params: &HashMap<String, String>,
    name: &str,
) -> Result<Option<T>, InputError>
where
    T::Err: std::fmt::Display,
{
    params
        .get(name)
        .map(|v| {
            v.parse::<T>().map_err(|e| InputError::Parameter {
                name: name.to_string(),
                reason: format!("{v:?}: {e}"),
            })
        })
        .transpose()
}

/// `k=v,k2=v2`, the equality-only subset of a label selector.
fn parse_selector(s: &str) -> Result<BTreeMap<String, String>, InputError> {
    let bad = |why: &str| InputError::Parameter {
        name: "selector".into(),
        reason: format!("{s:?}: {why} (expected key=value[,key=value])"),
    };
    let mut out = BTreeMap::new();
    for pair in s.split(',') {
        let (k, v) = pair.split_once('=').ok_or_else(|| bad("missing '='"))?;
        let valid = |x: &str| {
            x.len() <= 317
                && x.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        };
        if k.is_empty() || !valid(k) || !valid(v) {
            return Err(bad("invalid label key or value"));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

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
        }
    }
}

/// A verdict and whether it rests on evidence about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
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
}

/// How long a persistent failure that is no longer observed is remembered. A failure that
/// comes back after this starts a new grace period instead of inheriting an old one.
const FORGET_FAILURES_AFTER: Duration = Duration::from_secs(120);

/// At most this many persistent failures are remembered; the oldest observations go first.
/// Keys come from what callers ask about, so the map must not grow with them.
const MAX_REMEMBERED_FAILURES: usize = 10_000;

/// Since when a persistent failure of one object identity has been observed, and when last.
#[derive(Debug, Clone, Copy)]
struct Observed {
    since: Instant,
    last: Instant,
}

pub struct Evaluator {
    cache: Arc<Cache>,
    config: EvalConfig,
    verdicts: moka::future::Cache<String, Judgement>,
    probes: moka::future::Cache<String, cockroach::PodProbe>,
    /// When each persistent failure was first seen, by ask and object identity (UID and
    /// generation), so a grace period belongs to one object at one spec.
    failing_since: Mutex<HashMap<String, Observed>>,
    prober: probe::Prober,
    metrics: Arc<Metrics>,
}

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
                .max_capacity(100_000)
                .build(),
            probes: moka::future::Cache::builder()
                .time_to_live(config.probe_ttl.max(Duration::from_millis(1)))
                .max_capacity(10_000)
                .build(),
            failing_since: Mutex::default(),
            prober,
            cache,
            config,
            metrics,
        }))
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The verdict for `ask`, from the verdict cache when fresh. Concurrent asks for the same
    /// object wait on one evaluation.
    pub async fn judge(&self, ask: &Ask) -> Verdict {
        self.metrics
            .asks
            .get_or_create(&ResourceLabel::new(&ask.resource()))
            .inc();
        let mut computed = false;
        let verdict = self
            .verdicts
            // Boxed: the evaluation's state machine (probe futures included) is large, and
            // would otherwise be moved around on every ask, cache hit or not.
            .get_with(ask.key(), async {
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
    pub async fn judge_fresh(&self, ask: &Ask) -> Judgement {
        let j = self.evaluate(ask).await;
        self.verdicts.insert(ask.key(), j.clone()).await;
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
        let key = format!("{}|{}", ask.key(), found.identity);
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
        }
    }

    async fn find(&self, ask: &Ask) -> Result<Found, CacheError> {
        let c = &self.cache;
        Ok(match ask {
            Ask::Service {
                namespace,
                name,
                min_ready,
            } => {
                let svc = c.service(namespace, name).await?;
                let pods = c.pods(namespace).await?;
                let slices = c.endpoint_slices(namespace, name).await?;
                let params = service::Params {
                    min_ready: *min_ready,
                };
                let f = service::check(namespace, name, svc.as_deref(), &pods, &slices, &params);
                // A Service has no metadata.generation: its spec is its selector.
                let selector = svc.as_deref().map(|s| {
                    let selector = s.spec.as_ref().and_then(|spec| spec.selector.as_ref());
                    let text: Vec<String> = selector
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    text.join(",")
                });
                let identity = svc
                    .as_deref()
                    .zip(selector.as_ref())
                    .map(|(s, text)| format!("{}@{text}", identity_of(&s.metadata)));
                Found {
                    judged_selector: selector,
                    ..Found::seen(f, self.config.selector_grace, identity)
                }
            }
            Ask::CnpgDatabase {
                namespace,
                name,
                require_cluster_ready,
            } => {
                let (g, _) = Resource::CnpgDatabase.group_plural();
                let db = c.object(g, "databases", namespace, name).await?;
                let cluster = match db.as_ref().and_then(cnpg::cluster_name) {
                    Some(cluster) => c.object(g, "clusters", namespace, cluster).await?,
                    None => None,
                };
                let params = cnpg::Params {
                    require_cluster_ready: *require_cluster_ready,
                };
                let f = cnpg::check(namespace, name, db.as_ref(), cluster.as_ref(), &params);
                let identity = db.as_ref().map(json_identity);
                Found::seen(f, self.config.cnpg_grace, identity)
            }
            Ask::CrdbCluster {
                namespace,
                name,
                expected_nodes,
                selector,
            } => {
                let (g, p) = Resource::CrdbCluster.group_plural();
                let cluster = c.object(g, p, namespace, name).await?;
                let pods = c.pods(namespace).await?;
                let params = cockroach::Params {
                    expected_nodes: *expected_nodes,
                    selector: selector.clone(),
                    http_port: None,
                    owners: self.crdb_owners(namespace, cluster.as_ref()).await,
                };
                let mut unanswered = None;
                let f = match cockroach::plan(namespace, name, cluster.as_ref(), &pods, &params) {
                    Err(f) => f,
                    Ok(plan) => {
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
            Ask::Application { namespace, name } => {
                let (g, p) = Resource::Application.group_plural();
                let app = c.object(g, p, namespace, name).await?;
                let v = application::check(namespace, name, app.as_ref());
                Found::seen(v.into(), Duration::ZERO, None)
            }
            Ask::Generic {
                group,
                plural,
                namespace,
                name,
                rule,
            } => {
                let obj = c.object(group, plural, namespace, name).await?;
                let v = generic::check(&ask.resource(), namespace, name, obj.as_ref(), rule);
                Found::seen(v.into(), Duration::ZERO, None)
            }
        })
    }

    /// Judge an object named by kind with the generic kstatus rules (no expressions).
    pub async fn judge_kind(&self, r: &crate::waves::ResourceRef) -> Verdict {
        let what = format!("{} {}/{}", r.kind, r.namespace, r.name);
        match self.cache.plural_of(&r.group, &r.kind).await {
            Ok(plural) => {
                let ask = Ask::Generic {
                    group: r.group.clone(),
                    plural,
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    rule: generic::Rule::default(),
                };
                self.judge(&ask).await
            }
            Err(e) => Verdict::unknown(format!("{what}: {e}")),
        }
    }

    /// Probe one pod, coalesced and cached for the probe TTL.
    async fn probe(
        &self,
        namespace: &str,
        cluster: &str,
        target: &cockroach::ProbeTarget,
    ) -> cockroach::PodProbe {
        // Membership is part of the key: a pod's answer with credentials is not its answer
        // without, and the server name it was verified for belongs to one cluster.
        let key = format!(
            "{namespace}/{cluster}|{}|{}:{}|{}",
            target.pod, target.ip, target.port, target.controlled_by_cluster
        );
        self.probes
            .get_with(key, async {
                let started = Instant::now();
                let p = self.prober.probe(namespace, cluster, target).await;
                self.metrics
                    .probe_seconds
                    .observe(started.elapsed().as_secs_f64());
                if matches!(p.readiness, cockroach::Readiness::Unreachable(_)) {
                    self.metrics.probe_errors.inc();
                }
                p
            })
            .await
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
        let (group, plural, kind) = if cluster.pointer("/spec/regions").is_some() {
            (Resource::CRDB_GROUP, "crdbnodes", "CrdbNode")
        } else {
            ("apps", "statefulsets", "StatefulSet")
        };
        if let Ok(found) = self.cache.objects(group, plural, Some(namespace)).await {
            owners.record(kind, &found);
        }
        owners
    }

    fn lasted(&self, key: &str, now: Instant) -> Duration {
        match self.failing_since.lock() {
            Ok(mut m) => observe(&mut m, key, now),
            Err(_) => Duration::ZERO,
        }
    }

    fn forget(&self, key: &str) {
        if let Ok(mut m) = self.failing_since.lock() {
            m.remove(key);
        }
    }
}

/// What `find` concluded, with what the grace period of a persistent failure belongs to.
struct Found {
    finding: Finding,
    grace: Duration,
    /// The judged object's UID and generation: a failure of another object under the same name,
    /// or of the same object at another spec, starts its own grace period.
    identity: String,
    blind: Option<String>,
    judged_selector: Option<String>,
}

impl Found {
    fn seen(finding: Finding, grace: Duration, identity: Option<String>) -> Found {
        Found {
            finding,
            grace,
            identity: identity.unwrap_or_default(),
            blind: None,
            judged_selector: None,
        }
    }
}

fn identity_of(meta: &kube::api::ObjectMeta) -> String {
    format!(
        "{}@{}",
        meta.uid.as_deref().unwrap_or(""),
        meta.generation.unwrap_or(0)
    )
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
fn observe(m: &mut HashMap<String, Observed>, key: &str, now: Instant) -> Duration {
    let fresh = |o: &Observed| now.saturating_duration_since(o.last) < FORGET_FAILURES_AFTER;
    if !m.contains_key(key) && m.len() >= MAX_REMEMBERED_FAILURES {
        m.retain(|_, o| fresh(o));
        if m.len() >= MAX_REMEMBERED_FAILURES
            && let Some(oldest) = m.iter().min_by_key(|(_, o)| o.last).map(|(k, _)| k.clone())
        {
            m.remove(&oldest);
        }
    }
    let entry = m.entry(key.to_string()).or_insert(Observed {
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
