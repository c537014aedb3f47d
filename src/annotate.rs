//! Annotation mode (`wavegate serve --annotate`): on objects that opt in with
//! `wavegate.dev/annotate: "true"`, wavegate writes its verdict into three annotations that the
//! Argo CD health scripts in `argocd/` read, so Argo CD's health for the object itself becomes
//! truthful. The annotations are removed when the opt-in goes away (docs/contracts.md).
//!
//! Cost, deliberately opt-in: to find opted-in objects wavegate must watch every object of the
//! four kinds (Services, CNPG Databases, CrdbClusters, Argo CD Applications) in the watched
//! namespaces — for Services that is a second, cluster-wide watch next to the one the Service
//! check uses. Hence off by default; scope it with `--namespaces` where possible.
//!
//! Writes are JSON merge patches of `metadata.annotations` only (field manager `wavegate`), sent
//! only when the wanted annotations differ from the object's, so wavegate's own write (which
//! comes back as a watch event) causes one re-evaluation and no second write. A merge patch never
//! creates an object that was deleted meanwhile (the API server answers 404), and `null`
//! removes an annotation whoever wrote it.

use crate::ask::{Ask, Check};
use crate::cache::{CacheError, Change};
use crate::deps::DepIndex;
use crate::evaluate::{Evaluator, reads};
use crate::events;
use crate::health::Verdict;
use crate::json::At;
use crate::leader::{Fence, Fenced};
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::queue::{self, Action, QueueConfig, Reconcile};
use crate::resource::{CheckKind, InputError, Target};
use crate::written::{self, DEFAULT_STATUS_VALIDITY, FIELD_MANAGER};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;

pub const OPT_IN: &str = "wavegate.dev/annotate";
pub const STATUS: &str = "wavegate.dev/health-status";
pub const MESSAGE: &str = "wavegate.dev/health-message";
pub const OBSERVED_GENERATION: &str = "wavegate.dev/observed-generation";
/// Unix time (seconds) until which the verdict counts (see `--status-validity`).
pub const VALID_UNTIL: &str = "wavegate.dev/valid-until";
/// For Services: the selector the verdict was judged for, `k=v,k2=v2` sorted by key. A
/// Service has no `metadata.generation`, so this is how the health script knows that the
/// verdict is about the selector Argo CD just applied, not the one before it.
pub const JUDGED_SELECTOR: &str = "wavegate.dev/judged-selector";
/// What else the verdict was judged on, in the form the kind's health script renders it from
/// the object (a Service's type and publishNotReadyAddresses, a Database's status): the
/// script believes the verdict only while the object still shows it.
pub const JUDGED_STATE: &str = "wavegate.dev/judged-state";
/// Every annotation wavegate writes (the admission policy in deploy/ must list them all).
pub const WRITTEN: [&str; 6] = [
    STATUS,
    MESSAGE,
    OBSERVED_GENERATION,
    VALID_UNTIL,
    JUDGED_SELECTOR,
    JUDGED_STATE,
];

#[derive(Debug, Error)]
pub(crate) enum AnnotateError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("annotation write failed: {0}")]
    Write(#[from] kube::Error),
    #[error(transparent)]
    Fenced(#[from] Fenced),
    #[error(
        "not written: the verdict was judged before a silence of the API server or of wavegate \
         itself (frozen); judging again"
    )]
    Silenced,
}

/// Resource, namespace, name.
type Key = (CheckKind, String, String);

/// wavegate's annotations as last written on an object, and the versions at which the cache
/// does not show them yet.
type Written = written::Memory<BTreeMap<String, String>>;

struct Annotator {
    validity: Option<Duration>,
    fence: Fence,
    evaluator: Arc<Evaluator>,
    metrics: Arc<Metrics>,
    index: Mutex<DepIndex<Key>>,
    /// The annotations last written per object: until the watch delivers our patch, the cache
    /// still holds the object as it was, and comparing with that would send the same patch (and
    /// its Event) again when a dependency changes meanwhile — what the gate controller's
    /// `written` memory does for statuses.
    written: Mutex<HashMap<Key, Written>>,
    events: events::Publisher,
}

/// Run annotation mode until the cache's change feed closes. Each patch increments
/// [`Metrics::annotation_writes`].
pub async fn run(evaluator: Arc<Evaluator>, metrics: Arc<Metrics>, resync: Duration) {
    let validity = Some(DEFAULT_STATUS_VALIDITY);
    run_with(evaluator, metrics, resync, validity, Fence::default()).await
}

/// [`run`], with how long a written verdict counts (`None`: forever) and the fence every write
/// asks first (`--leader-elect`'s Lease).
pub async fn run_with(
    evaluator: Arc<Evaluator>,
    metrics: Arc<Metrics>,
    resync: Duration,
    validity: Option<Duration>,
    fence: Fence,
) {
    run_debounced(evaluator, metrics, resync, validity, fence, queue::DEBOUNCE).await
}

/// [`run_with`], with how long changes are coalesced before a reconcile. Shorter than the
/// default (20 ms), a reconcile woken right after wavegate's own patch reads the cache before
/// the watch has delivered that patch: what a busy API server does to the default, made
/// certain (tests/e2e/annotate.rs).
pub async fn run_debounced(
    evaluator: Arc<Evaluator>,
    metrics: Arc<Metrics>,
    resync: Duration,
    validity: Option<Duration>,
    fence: Fence,
    debounce: Duration,
) {
    let changes = evaluator.cache().subscribe();
    let annotator = Arc::new(Annotator {
        events: events::Publisher::new(evaluator.cache().client().clone(), metrics.clone()),
        evaluator,
        metrics: metrics.clone(),
        index: Mutex::default(),
        written: Mutex::default(),
        validity,
        fence,
    });
    tracing::info!(
        "annotation mode started (watching services, CNPG databases, CrdbClusters, Argo CD applications)"
    );
    let config = QueueConfig {
        debounce,
        ..QueueConfig::new("annotations", resync)
    };
    queue::run(annotator, changes, config, metrics).await;
}

impl Reconcile<Key> for Annotator {
    type Error = AnnotateError;

    fn affected(&self, change: &Change) -> Vec<Key> {
        let mut keys = lock(&self.index).affected(change);
        // The object itself, so that opting in (or out) is noticed at once.
        if let Some(kind) = CheckKind::annotated().find(|k| k.kind() == change.kind) {
            keys.push((kind, change.namespace.clone(), change.name.clone()));
        }
        keys
    }

    async fn all(&self) -> Vec<Key> {
        let cache = self.evaluator.cache();
        let mut keys = Vec::new();
        for kind in CheckKind::annotated() {
            match cache.objects(&kind.kind(), None).await {
                Ok(objects) => keys.extend(
                    objects
                        .iter()
                        .filter(|o| concerns_us(&annotations_of(o)))
                        .filter_map(|o| {
                            let m = o.get("metadata")?;
                            Some((
                                kind.clone(),
                                m.get("namespace")?.as_str()?.to_string(),
                                m.get("name")?.as_str()?.to_string(),
                            ))
                        }),
                ),
                // A CRD that is not installed has no objects to annotate.
                Err(CacheError::NotInstalled(_)) => {}
                Err(e) => {
                    tracing::warn!(resource = %kind, error = %e, "annotation mode cannot list")
                }
            }
        }
        keys
    }

    async fn reconcile(&self, key: Key) -> Result<Action, AnnotateError> {
        self.annotate(&key).await
    }
}

impl Annotator {
    async fn annotate(&self, key: &Key) -> Result<Action, AnnotateError> {
        let (kind, ns, name) = key;
        // A verdict judged before a silence is not written after it (see `write`).
        let heard = self.evaluator.cache().silences();
        let Some(object) = self
            .evaluator
            .cache()
            .object(&kind.kind(), ns, name)
            .await?
        else {
            self.forget(key);
            return Ok(Action::await_change());
        };
        let rv = object
            .str_at("/metadata/resourceVersion")
            .map(str::to_string);
        let current = self.current_annotations(key, &rv, annotations_of(&object));
        if !concerns_us(&current) {
            self.forget(key);
            return Ok(Action::await_change());
        }
        let (wanted, requeue, event) = if opted_in(&current) {
            let ask = Ask::with_defaults(Target::new(kind.clone(), ns, name)?);
            // Dependencies first, so a change during the judgement wakes this object again.
            self.set_deps(key, Some(&ask));
            let judged = self.evaluator.judge_fresh(&ask).await;
            // A watch that has not listed yet: the verdict stored here still counts, and is
            // kept until the watch lists or the verdict runs out (`written::kept_over_cold`).
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            let stored_until = current.get(VALID_UNTIL).and_then(|u| u.parse().ok());
            if judged.cold
                && let Some(recheck) = written::kept_over_cold(stored_until, now)
            {
                return Ok(Action::requeue(recheck));
            }
            let verdict = judged.verdict;
            let generation = object.i64_at("/metadata/generation");
            // A probe-based check converges without any watch event to wake it.
            let requeue = if matches!(ask.check, Check::CrdbCluster(_)) && !verdict.is_healthy() {
                Action::requeue(self.evaluator.probe_recheck())
            } else {
                Action::await_change()
            };
            let mut wanted = wanted_annotations(&verdict, generation);
            // The selector the verdict was judged with, from the evaluator's own snapshot: this
            // object came from another watch, which may already show a newer selector.
            if *kind == CheckKind::SERVICE
                && let Some(selector) = judged.judged_selector.or_else(|| judged_selector(&object))
            {
                wanted.insert(JUDGED_SELECTOR.into(), selector);
            }
            if let Some(state) = judged.judged_state {
                wanted.insert(JUDGED_STATE.into(), state);
            }
            if let Some(validity) = self.validity {
                let until = valid_until(&current, &wanted, validity, now);
                wanted.insert(VALID_UNTIL.into(), until.to_string());
            }
            // Compared with the annotation the object carries (or our own write the cache has
            // not shown yet), never with an older memory (src/events.rs).
            let old = events::parse_status(current.get(STATUS).map(String::as_str));
            let event = events::transition(old, verdict.status, &verdict.message, false);
            (wanted, requeue, event)
        } else {
            self.set_deps(key, None);
            (BTreeMap::new(), Action::await_change(), None)
        };
        // Conditional on the version the verdict was judged from (or the one our own last patch
        // produced, while the cache has not caught up with it): a replica that froze after
        // judging, or lost its lease meanwhile, is refused (409) instead of overwriting the newer
        // verdict another writer put there; the retry judges again on the current object.
        let precondition = written::precondition(lock(&self.written).get(key), &rv);
        if let Some(patch) = annotation_patch(&current, &wanted, precondition) {
            let produced = self.write(kind, (ns, name), patch, heard).await?;
            {
                let mut w = lock(&self.written);
                let after = Written::after(w.get(key), &rv, None, produced, wanted);
                w.insert(key.clone(), after);
            }
            if let Some(t) = event {
                let ar = self.api_resource(kind).await?;
                let regarding = events::reference(&object, &ar.api_version, &ar.kind);
                self.events.publish(t, events::ANNOTATE, regarding);
            }
        }
        Ok(requeue)
    }

    /// The object's annotations as far as wavegate knows them (see [`as_written`]).
    fn current_annotations(
        &self,
        key: &Key,
        rv: &Option<String>,
        cached: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let written = lock(&self.written).get(key).cloned();
        as_written(cached, rv, written.as_ref())
    }

    fn forget(&self, key: &Key) {
        self.set_deps(key, None);
        lock(&self.written).remove(key);
    }

    fn set_deps(&self, key: &Key, ask: Option<&Ask>) {
        let mut idx = lock(&self.index);
        match ask {
            Some(ask) => idx.set(key.clone(), reads(ask)),
            None => idx.remove(key),
        }
    }

    async fn write(
        &self,
        kind: &CheckKind,
        (ns, name): (&str, &str),
        patch: Value,
        heard: u64,
    ) -> Result<Option<String>, AnnotateError> {
        let ar = self.api_resource(kind).await?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.evaluator.cache().client().clone(), ns, &ar);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.fence.admit().await?;
        // Judged, then frozen, then sent: the precondition refuses it only where someone else
        // wrote meanwhile, so a verdict from before a silence is judged again instead.
        if !self.evaluator.cache().heard_throughout(heard) {
            return Err(AnnotateError::Silenced);
        }
        let written = api
            .patch(name, &params, &Patch::Merge(&patch))
            .await
            .inspect_err(|e| self.metrics.record_write_failure("annotate", e))?;
        self.metrics.annotation_writes.inc();
        tracing::info!(object = %format!("{kind} {ns}/{name}"), "annotations written");
        Ok(written.metadata.resource_version)
    }

    /// The served version of `kind` (objects read from a watch list carry no apiVersion, and
    /// CrdbCluster is served as v1beta1 or, by older operators, v1alpha1), from the cache's
    /// discovery.
    async fn api_resource(&self, kind: &CheckKind) -> Result<ApiResource, AnnotateError> {
        Ok(self.evaluator.cache().discover(&kind.kind()).await?)
    }
}

/// `cached` (an object's annotations, read at resourceVersion `rv`) with wavegate's own as last
/// written, while the cache still shows the object at a version that write supersedes (the one
/// it was made over, or one an earlier write of ours produced); once the cache shows any other
/// version (the write itself, or someone else's change after it), what it shows.
fn as_written(
    mut cached: BTreeMap<String, String>,
    rv: &Option<String>,
    written: Option<&Written>,
) -> BTreeMap<String, String> {
    if let Some(written) = written
        && written.lags(rv)
    {
        for k in WRITTEN {
            match written.value.get(k) {
                Some(v) => cached.insert(k.to_string(), v.clone()),
                None => cached.remove(k),
            };
        }
    }
    cached
}

fn annotations_of(object: &Value) -> BTreeMap<String, String> {
    object
        .object_at("/metadata/annotations")
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn opted_in(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(OPT_IN).map(String::as_str) == Some("true")
}

/// Opted in, or carrying annotations wavegate wrote that must now be removed.
fn concerns_us(annotations: &BTreeMap<String, String>) -> bool {
    opted_in(annotations) || WRITTEN.iter().any(|k| annotations.contains_key(*k))
}

/// The Service's selector as `k=v,k2=v2`, sorted by key (how the Service health script renders
/// it too), or `None` without one.
pub fn judged_selector(service: &Value) -> Option<String> {
    // A Service without a selector is recorded as "" (what the health script renders for
    // one), so gaining a selector later is a change the script sees.
    let Some(selector) = service.object_at("/spec/selector") else {
        return Some(String::new());
    };
    let sorted: BTreeMap<&String, &str> = selector
        .iter()
        .filter_map(|(k, v)| Some((k, v.as_str()?)))
        .collect();
    Some(
        sorted
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// The written `valid-until`, kept while the same verdict has at least half its validity left
/// (so a settled object is rewritten once per half validity), else `now + validity`.
fn valid_until(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, String>,
    validity: Duration,
    now: i64,
) -> i64 {
    let same = [
        STATUS,
        MESSAGE,
        OBSERVED_GENERATION,
        JUDGED_SELECTOR,
        JUDGED_STATE,
    ]
    .iter()
    .all(|k| current.get(*k) == wanted.get(*k));
    let previous = current.get(VALID_UNTIL).and_then(|u| u.parse::<i64>().ok());
    written::valid_until(previous, same, validity, now)
}

/// The three annotations for a verdict; `observed-generation` only for kinds with a generation.
pub fn wanted_annotations(verdict: &Verdict, generation: Option<i64>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([
        (STATUS.to_string(), verdict.status.as_str().to_string()),
        (MESSAGE.to_string(), verdict.message.clone()),
    ]);
    if let Some(g) = generation {
        out.insert(OBSERVED_GENERATION.to_string(), g.to_string());
    }
    out
}

/// The merge patch that turns `current`'s wavegate annotations into `wanted`, or `None` when
/// they already match (the write that is skipped). With `precondition`, the patch carries it as
/// `metadata.resourceVersion`, which the API server compares with the object's (a mismatch is
/// 409 Conflict, as for an update: k8s.io/apiserver pkg/endpoints/handlers/patch.go applies the
/// patch and hands the result to the store's optimistic-concurrency check).
pub fn annotation_patch(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, String>,
    precondition: Option<String>,
) -> Option<Value> {
    let mut changes = Map::new();
    for key in WRITTEN {
        match (current.get(key), wanted.get(key)) {
            (Some(c), Some(w)) if c == w => {}
            (_, Some(w)) => {
                changes.insert(key.into(), Value::String(w.clone()));
            }
            (Some(_), None) => {
                changes.insert(key.into(), Value::Null);
            }
            (None, None) => {}
        }
    }
    if changes.is_empty() {
        return None;
    }
    let mut metadata = json!({ "annotations": changes });
    if let Some(rv) = precondition {
        metadata["resourceVersion"] = Value::String(rv);
    }
    Some(json!({ "metadata": metadata }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn opted_in_object_gets_status_message_and_generation() {
        let current = ann(&[(OPT_IN, "true")]);
        let wanted = wanted_annotations(
            &Verdict::progressing("CNPG has not applied ddb/forgejo yet"),
            Some(3),
        );
        let patch = annotation_patch(&current, &wanted, None).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {
                STATUS: "Progressing",
                MESSAGE: "CNPG has not applied ddb/forgejo yet",
                OBSERVED_GENERATION: "3",
            }}})
        );
    }

    #[test]
    fn unchanged_verdict_writes_nothing() {
        let wanted = wanted_annotations(&Verdict::healthy("3 ready endpoints"), None);
        let mut current = wanted.clone();
        current.insert(OPT_IN.into(), "true".into());
        current.insert("unrelated".into(), "x".into());
        assert_eq!(annotation_patch(&current, &wanted, None), None);
    }

    #[test]
    fn dropping_the_opt_in_removes_all_three() {
        let current = ann(&[
            (STATUS, "Healthy"),
            (MESSAGE, "ok"),
            (OBSERVED_GENERATION, "2"),
            ("keep", "me"),
        ]);
        assert!(concerns_us(&current));
        let patch = annotation_patch(&current, &BTreeMap::new(), None).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {STATUS: null, MESSAGE: null, OBSERVED_GENERATION: null}}})
        );
    }

    #[test]
    fn objects_without_opt_in_or_our_annotations_are_left_alone() {
        assert!(!concerns_us(&ann(&[(OPT_IN, "false"), ("app", "x")])));
        assert_eq!(
            annotation_patch(&BTreeMap::new(), &BTreeMap::new(), None),
            None
        );
    }

    #[test]
    fn a_kind_without_generation_loses_a_stale_generation_annotation() {
        let current = ann(&[
            (OPT_IN, "true"),
            (STATUS, "Healthy"),
            (MESSAGE, "ok"),
            (OBSERVED_GENERATION, "1"),
        ]);
        let wanted = wanted_annotations(&Verdict::healthy("ok"), None);
        assert_eq!(
            annotation_patch(&current, &wanted, None),
            Some(json!({"metadata": {"annotations": {OBSERVED_GENERATION: null}}}))
        );
    }

    #[test]
    fn a_service_verdict_records_the_selector_it_judged() {
        let svc = json!({"spec": {"selector": {"b": "2", "a": "1"}}});
        assert_eq!(judged_selector(&svc).as_deref(), Some("a=1,b=2"));
        assert_eq!(judged_selector(&json!({"spec": {}})).as_deref(), Some(""));
    }

    #[test]
    fn valid_until_is_renewed_at_half_validity_or_on_a_new_verdict() {
        let validity = Duration::from_secs(180);
        let wanted = ann(&[(STATUS, "Healthy"), (MESSAGE, "ok")]);
        let mut current = wanted.clone();
        current.insert(VALID_UNTIL.into(), "1180".into());
        assert_eq!(valid_until(&current, &wanted, validity, 1000), 1180);
        assert_eq!(valid_until(&current, &wanted, validity, 1091), 1271);
        let changed = ann(&[(STATUS, "Progressing"), (MESSAGE, "0 ready")]);
        assert_eq!(valid_until(&current, &changed, validity, 1010), 1190);
    }

    /// What `annotate` decides for one reconcile: the patch and the Event, given the cached
    /// object (annotations at `rv`) and the memory of the last write, which it updates with
    /// the resourceVersion the patch `produces`. Versions in these sequences are consecutive
    /// numbers, so the server holds `produces - 1` when a patch is sent: the patch's
    /// precondition must be exactly that, or the server would refuse our own sequence.
    fn reconcile(
        memory: &mut Option<Written>,
        cached: &BTreeMap<String, String>,
        rv: &str,
        verdict: &Verdict,
        produces: &str,
    ) -> (bool, bool) {
        let rv = Some(rv.to_string());
        let current = as_written(cached.clone(), &rv, memory.as_ref());
        let wanted = wanted_annotations(verdict, None);
        let old = events::parse_status(current.get(STATUS).map(String::as_str));
        let event = events::transition(old, verdict.status, &verdict.message, false);
        let precondition = written::precondition(memory.as_ref(), &rv);
        match annotation_patch(&current, &wanted, precondition) {
            Some(patch) => {
                let server = produces.parse::<u64>().unwrap() - 1;
                assert_eq!(
                    patch["metadata"]["resourceVersion"],
                    json!(server.to_string()),
                    "the patch over cache version {rv:?} would be refused"
                );
                let produced = Some(produces.to_string());
                *memory = Some(Written::after(memory.as_ref(), &rv, None, produced, wanted));
                (true, event.is_some())
            }
            None => (false, false),
        }
    }

    #[test]
    fn a_change_before_the_cache_shows_our_patch_repeats_neither_patch_nor_event() {
        let mut memory = None;
        let progressing = Verdict::progressing("0 of 1 ready");
        let healthy = Verdict::healthy("1 ready endpoint");
        let at_rv7 = ann(&[(OPT_IN, "true")]);
        // The first verdict: one patch, one Event (over resourceVersion 7, producing 8).
        assert_eq!(
            reconcile(&mut memory, &at_rv7, "7", &progressing, "8"),
            (true, true)
        );
        // A pod changes before the watch delivers the patch: the cache still shows rv 7.
        assert_eq!(
            reconcile(&mut memory, &at_rv7, "7", &progressing, "-"),
            (false, false)
        );
        // The patch arrives (rv 8): nothing to do.
        let mut at_rv8 = at_rv7.clone();
        at_rv8.extend(wanted_annotations(&progressing, None));
        assert_eq!(
            reconcile(&mut memory, &at_rv8, "8", &progressing, "-"),
            (false, false)
        );
        // The verdict changes: one patch and one Event, and again none while the cache lags.
        assert_eq!(
            reconcile(&mut memory, &at_rv8, "8", &healthy, "9"),
            (true, true)
        );
        assert_eq!(
            reconcile(&mut memory, &at_rv8, "8", &healthy, "-"),
            (false, false)
        );
        // Someone else changed our annotations since (rv 10): the object, not memory, counts.
        let mut at_rv10 = at_rv8.clone();
        at_rv10.insert(STATUS.into(), "Degraded".into());
        assert_eq!(
            reconcile(&mut memory, &at_rv10, "10", &healthy, "11"),
            (true, true)
        );
    }

    #[test]
    fn two_writes_before_the_cache_shows_the_first_do_not_repeat_the_second() {
        let mut memory = None;
        let waiting = Verdict::progressing("0 of 1 ready");
        let unpublished = Verdict::progressing("1 ready, its endpoint not yet published");
        let healthy = Verdict::healthy("1 ready endpoint");
        let at_rv7 = ann(&[(OPT_IN, "true")]);
        assert_eq!(
            reconcile(&mut memory, &at_rv7, "7", &waiting, "8"),
            (true, true)
        );
        // The cache shows the first patch (rv 8).
        let mut at_rv8 = at_rv7.clone();
        at_rv8.extend(wanted_annotations(&waiting, None));
        // The pod turns Ready: a new message (rv 9), then, before the cache shows rv 9, the
        // endpoint is published: Healthy (rv 10), written while the cache still shows rv 8.
        assert_eq!(
            reconcile(&mut memory, &at_rv8, "8", &unpublished, "9"),
            (true, false)
        );
        assert_eq!(
            reconcile(&mut memory, &at_rv8, "8", &healthy, "10"),
            (true, true)
        );
        // The cache now shows rv 9, wavegate's own intermediate write: Healthy is already
        // written over it, so neither the patch nor its Event is sent again.
        let mut at_rv9 = at_rv8.clone();
        at_rv9.extend(wanted_annotations(&unpublished, None));
        assert_eq!(
            reconcile(&mut memory, &at_rv9, "9", &healthy, "-"),
            (false, false)
        );
        // Then rv 10, the Healthy write itself.
        let mut at_rv10 = at_rv9.clone();
        at_rv10.extend(wanted_annotations(&healthy, None));
        assert_eq!(
            reconcile(&mut memory, &at_rv10, "10", &healthy, "-"),
            (false, false)
        );
        // Someone else's change after that (rv 11) is what counts again.
        let mut at_rv11 = at_rv10.clone();
        at_rv11.remove(STATUS);
        assert_eq!(
            reconcile(&mut memory, &at_rv11, "11", &healthy, "12"),
            (true, true)
        );
    }
}
