//! From a question ("is this object truly ready?") to a verdict: read a snapshot from the cache,
//! probe CockroachDB pods where needed, run the pure check, and resolve persistent failures
//! against their grace periods.
//!
//! Verdicts and probe results go through short-TTL moka caches with request coalescing
//! (`get_with`), so a thousand concurrent asks for one object cause one evaluation and one probe
//! per pod.

use crate::ask::Ask;
use crate::cache::{Cache, CacheError};
use crate::checks::cockroach;
use crate::health::{Finding, Verdict};
use crate::kinds::{self, Found};
use crate::locks::lock;
use crate::metrics::{Metrics, ResourceLabel};
use crate::probe;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod memo;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use memo::Grounds;

/// A verdict served at once by [`Evaluator::kept_verdicts`], until when it holds, and what it
/// rests on.
pub(crate) type KeptVerdict = (Verdict, Option<Instant>, Arc<Grounds>);

pub use crate::kinds::EvalConfig;

/// What judging `ask` reads from the cache (its kind's declared reads), for whoever must be
/// woken when it changes: the gate controller, annotation mode.
pub(crate) fn reads(ask: &Ask) -> Vec<crate::deps::Dep> {
    kinds::reads(&ask.check, &ask.namespace, &ask.name)
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
    /// The read failed because a watch it needs has not listed yet, and no list of it has
    /// failed (a kind read for the first time, or every kind of a cluster this replica just
    /// gained): the verdict says nothing about the cluster, not even that it changed since a
    /// verdict written before. A failed list is news about wavegate's sight, and is written.
    pub cold: bool,
    /// For a Service: the selector this verdict was judged with (`k=v,…` sorted by key, `""`
    /// for none), read from the same snapshot as the verdict. Annotation mode records it, and
    /// must not take it from another read of the Service, which may be newer than the verdict.
    pub judged_selector: Option<String>,
    /// What else the verdict was judged on, for the health script to compare with the object
    /// it reads: a Service's type and `publishNotReadyAddresses`
    /// ([`crate::checks::service::judged_spec`]), a Database's status
    /// ([`crate::checks::cnpg::judged_status`]), an Application's health, sync and operation
    /// ([`crate::checks::application::judged_state`]). From the
    /// same snapshot as the verdict, like `judged_selector`.
    pub judged_state: Option<String>,
    /// When the verdict may change with time alone, with nothing watched changing: the end of
    /// a grace period, a probe answer's age, a script that read the clock, a read that failed
    /// and is tried again. `None`: it holds until something it read changes.
    pub valid_until: Option<Instant>,
}

/// How long a persistent failure that is no longer observed is remembered. A failure that
/// comes back after this starts a new grace period instead of inheriting an old one.
const FORGET_FAILURES_AFTER: Duration = Duration::from_secs(120);

/// At most this many persistent failures are remembered; the oldest observations go first.
/// Keys come from what callers ask about, so the map must not grow with them.
const MAX_REMEMBERED_FAILURES: usize = 10_000;

/// A persistent failure: the ask and the judged object's identity (see [`Found::identity`]).
type FailureKey = (Ask, String);

/// How soon a verdict is judged again when it rests on something that may pass without any
/// watch event: a read that failed (discovery retries a missing kind, an access review
/// expires), a script that read the clock.
pub(crate) const RECHECK_UNSURE: Duration = Duration::from_secs(1);

/// A failure past its grace is observed again at least this often while something keeps its
/// verdict, so it is not forgotten ([`FORGET_FAILURES_AFTER`]) and its grace started anew.
const REOBSERVE_FAILURE: Duration = Duration::from_secs(30);

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

/// See [`Evaluator::reads_at`].
type ReadsAt = (u64, u64);

pub struct Evaluator {
    cache: Arc<Cache>,
    config: EvalConfig,
    /// Verdicts coalesced for `--verdict-ttl`, each with the [`Evaluator::reads_at`] it was
    /// judged at: served only to an ask made at the same (see [`Evaluator::judge_cached`]).
    verdicts: moka::future::Cache<Ask, (ReadsAt, Judgement)>,
    /// Verdicts kept until what they read changes (`memo`).
    memo: memo::Memo,
    probes: moka::future::Cache<String, cockroach::PodProbe>,
    /// When each persistent failure was first seen, by ask and object identity (UID and
    /// generation), so a grace period belongs to one object at one spec.
    failing_since: Mutex<HashMap<FailureKey, Observed>>,
    prober: Arc<probe::Prober>,
    /// Probes running, by the probe cache's key: each runs as a task of its own, so an ask
    /// that goes away (its HTTP request cancelled) does not cancel a probe other asks wait on,
    /// and an ask that takes over the probe cache's wait joins the same probe.
    probing: Arc<Mutex<HashMap<String, (u64, SharedProbe)>>>,
    /// Probes asked for, ever: a verdict judged while this moved rests on probe answers,
    /// which age without any watch event.
    probes_asked: std::sync::atomic::AtomicU64,
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
            memo: memo::Memo::default(),
            failing_since: Mutex::default(),
            prober: Arc::new(prober),
            probing: Arc::default(),
            probes_asked: Default::default(),
            cache,
            config,
            metrics,
        }))
    }

    /// Argo CD's health scripts this evaluator judges with.
    pub(crate) fn argocd_lua(&self) -> Option<&Arc<crate::argocd_lua::LuaHealth>> {
        self.config.argocd_lua.as_ref()
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
        self.judge_until(ask).await.0
    }

    /// [`Evaluator::judge`], and until when the verdict holds if nothing it read changes
    /// ([`Judgement::valid_until`]).
    pub(crate) async fn judge_until(&self, ask: &Ask) -> (Verdict, Option<Instant>) {
        self.metrics
            .asks
            .get_or_create(&ResourceLabel::new(&ask.resource().to_string()))
            .inc();
        // Kept and still holding (`memo`): as fresh as the verdict cache's, or fresher, and
        // served without building the evaluation's state machine (kilobytes, per resource of
        // a view).
        if let Some(kept) = self.kept(ask) {
            self.metrics.record_cache(true);
            self.metrics.record_verdict(kept.verdict.status);
            return (kept.verdict, kept.valid_until);
        }
        Box::pin(self.judge_cached(ask)).await
    }

    /// The verdicts kept for `asks` whose reads still hold ([`Evaluator::judge_until`]'s
    /// first step for each, counted alike), all at once and without awaiting anything: a view
    /// serves these first, and judges only the rest (`None`s) one by one.
    pub(crate) fn kept_verdicts(&self, asks: &[&Ask]) -> Vec<Option<KeptVerdict>> {
        #[cfg(test)]
        if tests::KEEP_NOTHING.get() {
            return vec![None; asks.len()];
        }
        let now = Instant::now();
        let looked_up = asks.iter().copied().filter(|a| keepable(a));
        let mut found = self
            .memo
            .get_all(looked_up, &self.cache, self.scripts(), now)
            .into_iter();
        let kept: Vec<Option<(Judgement, Arc<Grounds>)>> = asks
            .iter()
            .map(|a| {
                if keepable(a) {
                    found.next().flatten()
                } else {
                    None
                }
            })
            .collect();
        // The counters `judge_until` moves for a kept verdict, moved once per label.
        let mut asked: Vec<(crate::resource::CheckKind, u64)> = Vec::new();
        let mut statuses: Vec<(crate::health::HealthStatus, u64)> = Vec::new();
        for (ask, j) in asks.iter().zip(&kept) {
            let Some((j, _)) = j else { continue };
            let resource = ask.resource();
            match asked.iter_mut().find(|(r, _)| *r == resource) {
                Some((_, n)) => *n += 1,
                None => asked.push((resource, 1)),
            }
            match statuses.iter_mut().find(|(s, _)| *s == j.verdict.status) {
                Some((_, n)) => *n += 1,
                None => statuses.push((j.verdict.status, 1)),
            }
        }
        for (resource, n) in asked {
            self.metrics
                .asks
                .get_or_create(&ResourceLabel::new(&resource.to_string()))
                .inc_by(n);
        }
        for (status, n) in statuses {
            self.metrics.record_verdicts(status, true, n);
        }
        kept.into_iter()
            .map(|j| j.map(|(j, grounds)| (j.verdict, j.valid_until, grounds)))
            .collect()
    }

    /// What the verdict kept for `ask` rests on, if that verdict is `verdict` and still holds
    /// (see `memo::Memo::grounds_of`): for a verdict just judged, which a view may then keep
    /// built into its rows as long as these grounds hold.
    pub(crate) fn grounds_of(&self, ask: &Ask, verdict: &Verdict) -> Option<Arc<Grounds>> {
        #[cfg(test)]
        if tests::KEEP_NOTHING.get() {
            return None;
        }
        if !keepable(ask) {
            return None;
        }
        let now = Instant::now();
        (self.memo).grounds_of(ask, verdict, &self.cache, self.scripts(), now)
    }

    /// A look at what kept verdicts rest on, as of one moment ([`Holding::holds`]): for many
    /// at once, under one lock of the marks.
    pub(crate) fn holding(&self) -> Holding<'_> {
        Holding {
            marks: self.cache.marks().look(),
            vouched: self.cache.vouched(),
            scripts: self.scripts(),
            now: Instant::now(),
        }
    }

    /// The verdict kept for `ask`, if what it read still holds.
    fn kept(&self, ask: &Ask) -> Option<Judgement> {
        #[cfg(test)]
        if tests::KEEP_NOTHING.get() {
            return None;
        }
        if !keepable(ask) {
            return None;
        }
        let now = Instant::now();
        self.memo.get(ask, &self.cache, self.scripts(), now)
    }

    /// What the reads of a judgement would answer, and the scripts it would run: the cache's
    /// epoch and the scripts' generation, both taken before judging.
    fn reads_at(&self) -> ReadsAt {
        (self.cache.epoch(), self.scripts())
    }

    /// [`Evaluator::judge_until`] through the verdict cache. Asks made together wait on one
    /// judgement; an ask made after anything it may read changed is judged again. A view kept
    /// under the clusters' stamp taken after a change would otherwise keep a verdict judged
    /// before it, coalesced within `--verdict-ttl`, until the next event (a rollout's last status write shown Progressing after it was
    /// Available).
    async fn judge_cached(&self, ask: &Ask) -> (Verdict, Option<Instant>) {
        let mut computed = false;
        let at = self.reads_at();
        let (judged_at, judged) = self
            .verdicts
            // Boxed: the evaluation's state machine (probe futures included) is large, and
            // would otherwise be moved around on every ask, cache hit or not.
            .get_with_by_ref(ask, async {
                computed = true;
                (at, Box::pin(self.judge_kept(ask)).await)
            })
            .await;
        // Judged at these reads, or after them (by an ask made later): as fresh as this ask.
        let judged = if judged_at.0 >= at.0 && judged_at.1 >= at.1 {
            judged
        } else {
            computed = true;
            let judged = Box::pin(self.judge_kept(ask)).await;
            self.verdicts
                .insert(ask.clone(), (at, judged.clone()))
                .await;
            judged
        };
        self.metrics.record_cache(!computed);
        self.metrics.record_verdict(judged.verdict.status);
        (judged.verdict, judged.valid_until)
    }

    /// Evaluate now, bypassing the verdict cache (probes stay cached). For the gate controller,
    /// which runs on change events and must see the change that woke it.
    pub(crate) async fn judge_fresh(&self, ask: &Ask) -> Judgement {
        let at = self.reads_at();
        let j = self.judge_and_keep(ask).await;
        self.verdicts.insert(ask.clone(), (at, j.clone())).await;
        j
    }

    /// The verdict kept for `ask` while what it read holds (`memo`), or a new one.
    async fn judge_kept(&self, ask: &Ask) -> Judgement {
        #[cfg(test)]
        if tests::KEEP_NOTHING.get() {
            return self.evaluate(ask).await.0;
        }
        match self.kept(ask) {
            Some(kept) => kept,
            None => self.judge_and_keep(ask).await,
        }
    }

    /// Evaluate `ask`, and keep the verdict when it rests on its reads alone.
    async fn judge_and_keep(&self, ask: &Ask) -> Judgement {
        if !keepable(ask) {
            return self.evaluate(ask).await.0;
        }
        // Taken before any read: a change while judging leaves what is kept stale in the
        // marks' eyes, never served.
        let taken = memo::Memo::take(ask, &self.cache, self.scripts());
        let (j, keep) = self.evaluate(ask).await;
        if keep {
            let at_most = memo::KEEP_AT_MOST.min(self.cache.watch_idle() / 2);
            self.memo.keep(ask, taken, &j, at_most);
        } else {
            self.memo.forget(ask);
        }
        j
    }

    /// The generation of Argo CD's health scripts judged with (0 without any).
    pub(crate) fn scripts(&self) -> u64 {
        self.config
            .argocd_lua
            .as_ref()
            .map_or(0, |l| l.generation())
    }

    /// Judge `ask` now, and whether the verdict rests on the reads alone (none failed or was
    /// blind, no probe, no clock read, no grace period running, not Unknown): what may be kept
    /// until they change.
    async fn evaluate(&self, ask: &Ask) -> (Judgement, bool) {
        let (probes, clock) = (self.probes_asked(), crate::argocd_lua::clock_reads());
        let (found, failed, cold) = match self.find(ask).await {
            Ok(found) => (found, false, false),
            Err(e) => (
                Found {
                    blind: blindness(&e),
                    ..Found::seen(cache_verdict(ask, &e).into(), Duration::ZERO, None)
                },
                true,
                matches!(e, CacheError::NotSynced(_)),
            ),
        };
        let now = Instant::now();
        let key = (ask.clone(), found.identity);
        let lasted = match &found.finding {
            Finding::Persistent { .. } => self.lasted(&key, now),
            Finding::Settled(_) => {
                self.forget(&key);
                Duration::ZERO
            }
        };
        // Counters moved by any evaluation meanwhile, not only this one's: at worst a verdict
        // is judged again sooner than it had to be.
        let mut expiries = vec![];
        if failed || found.blind.is_some() || crate::argocd_lua::clock_reads() != clock {
            expiries.push(RECHECK_UNSURE);
        }
        if self.probes_asked() != probes {
            expiries.push(self.probe_recheck());
        }
        if let Finding::Persistent { .. } = &found.finding {
            expiries.push(if lasted < found.grace {
                found.grace - lasted
            } else {
                REOBSERVE_FAILURE
            });
        }
        let settled = matches!(found.finding, Finding::Settled(_));
        let mut verdict = found.finding.resolve(lasted, found.grace);
        verdict.argo_status = found.argo_status;
        let keep = expiries.is_empty()
            && settled
            && found.blind.is_none()
            && verdict.status != crate::health::HealthStatus::Unknown;
        let j = Judgement {
            verdict,
            blind: found.blind,
            cold,
            judged_selector: found.judged_selector,
            judged_state: found.judged_state,
            valid_until: expiries.into_iter().min().map(|d| now + d),
        };
        (j, keep)
    }

    fn probes_asked(&self) -> u64 {
        self.probes_asked.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn find(&self, ask: &Ask) -> Result<Found, CacheError> {
        let sources = kinds::Sources {
            cache: self.cache.as_ref(),
            probes: self,
            config: &self.config,
        };
        kinds::gather(&ask.check, &ask.namespace, &ask.name, &sources).await
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
        self.probes_asked
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
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

    fn lasted(&self, key: &FailureKey, now: Instant) -> Duration {
        observe(&mut lock(&self.failing_since), key, now)
    }

    fn forget(&self, key: &FailureKey) {
        lock(&self.failing_since).remove(key);
    }
}

impl kinds::Probes for Evaluator {
    fn probe(
        &self,
        namespace: &str,
        cluster: &str,
        target: &cockroach::ProbeTarget,
    ) -> impl Future<Output = cockroach::PodProbe> + Send {
        Evaluator::probe(self, namespace, cluster, target)
    }
}

/// See [`Evaluator::holding`].
pub(crate) struct Holding<'a> {
    marks: crate::cache::MarkLook<'a>,
    vouched: bool,
    scripts: u64,
    now: Instant,
}

impl Holding<'_> {
    /// Whether a verdict resting on `grounds` would be served kept now.
    pub(crate) fn holds(&self, grounds: &Grounds) -> bool {
        #[cfg(test)]
        if tests::KEEP_NOTHING.get() {
            return false;
        }
        grounds.hold(&self.marks, self.vouched, self.scripts, self.now)
    }
}

/// Whether a verdict of `ask` may be kept at all: a CockroachDB check rests on probe answers,
/// which age without any watch event, and the probe cache already keeps them for their TTL.
fn keepable(ask: &Ask) -> bool {
    !matches!(ask.check, crate::kinds::Check::CrdbCluster(_))
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

/// Why a read that failed with `e` says more about wavegate than about the cluster, if it does:
/// a watch not synced, relisting, refused or bounded, discovery failing — all may pass, so a
/// gate's timeout must not fire on them. What is out of reach (a kind the cluster does not
/// serve, a namespace outside `--namespaces`) stays so however long one waits: not blind, so
/// the timeout applies, and the verdict's message says why.
fn blindness(e: &CacheError) -> Option<String> {
    (!e.out_of_reach()).then(|| e.to_string())
}

/// A cache that cannot answer is never evidence of health: not yet synced keeps the wave
/// waiting (Progressing), anything else is Unknown with the reason.
fn cache_verdict(ask: &Ask, e: &CacheError) -> Verdict {
    let mut msg = format!("{} {}: {e}", ask.resource(), ask.object());
    if e.out_of_reach() {
        msg.push_str("; waiting does not change that, so a gate's timeout applies");
    }
    match e {
        // Transient blindness of wavegate's own cache: Progressing, never Unknown, which
        // fails a hook gate and with it the sync.
        CacheError::NotSynced(_)
        | CacheError::ListFailing { .. }
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
