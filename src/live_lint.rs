//! `wavegate lint`'s rules on a live Application: the objects it lists in `status.resources`,
//! read from the watch cache of its destination cluster, stand in for `argocd app manifests`.
//!
//! Only what the rules need is read, under the same policy as the waves view:
//! - pod templates of workloads (Deployment, StatefulSet, …), only for kinds the installer's
//!   `--generic-kinds` allows (the same kinds the waves view judges);
//! - a Service's type and selector, a CNPG Database's `spec.name` and `spec.cluster`, a
//!   WaveGate's `spec.checks` — the fields wavegate's checks on them already read;
//! - nothing of a Pod, Secret or ConfigMap but its kind, name and wave from the Application's
//!   status (no watch of them is started; a reference that only their data or a bare Pod's spec
//!   carries is not seen);
//! - every other object by kind, name and wave alone.
//!
//! Waves are the ones Argo CD recorded (`syncWave`); hooks are linted with them, in the phases
//! the last sync recorded for them (`lint_resources`), so the findings are `wavegate lint`'s on
//! the same manifests. Argo CD's argocd-cm is not read (a ConfigMap): the rules count only
//! Argo CD's built-in health checks, as `wavegate lint` does without `--argocd-cm`.

use crate::app_status::{App, text};
use crate::cache::Cache;
use crate::evaluate::Evaluator;
use crate::json::At;
use crate::lint::references::CNPG;
use crate::lint::rules::IGNORE_ANNOTATION;
use crate::lint::sync_order::{HELM_HOOK, HOOK, SYNC_WAVE};
use crate::lint::{Finding, Object, Options, Rule};
use crate::policy::CheckPolicy;
use crate::resource::{CheckKind, GroupResource, ResourceRef};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

mod kept;
mod runs;
pub(crate) use kept::{Kept, Sealed};
pub(crate) use runs::{Runs, Viewed};

/// One finding about a live Application.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LiveFinding {
    pub rule: Rule,
    /// `error` when the sync breaks or hangs, `warning` when it works by luck (SARIF levels).
    #[schemars(extend("enum" = ["error", "warning"]))]
    pub level: &'static str,
    /// The wave of the object to change first (the one that needs the other), where the
    /// dashboard shows the finding.
    pub wave: Option<i64>,
    pub message: String,
    pub why: String,
    pub fix: String,
    /// The objects involved, the one to change first, with their waves.
    pub objects: Vec<LiveObject>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LiveObject {
    pub object: String,
    pub wave: Option<i64>,
}

/// wavegate lint's findings on the Application's live objects (docs/lint.md, "In the waves
/// view"), and what could not be seen.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LiveLint {
    pub findings: Vec<LiveFinding>,
    /// Which objects lint saw only in part, and why (`None`: every object as the rules need).
    pub note: Option<String>,
    /// Why the rules did not run at this poll ("lint skipped: over budget: …", "lint skipped:
    /// busy: …"), so the UIs show it instead of an empty list that reads as "no findings".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The rules did not finish at this poll for a reason that may pass (busy, out of time,
    /// failed): whatever keeps this answer must ask again soon.
    #[serde(skip)]
    pub passing: bool,
}

/// What the rules read for one Application: its objects as lint sees them, the destination
/// namespace, and which objects were seen only in part.
#[derive(Debug)]
pub(crate) struct LintInput {
    /// Each sealed once, when read, and kept while what it was read from holds (`kept`).
    objects: Vec<Arc<Sealed>>,
    destination: String,
    unread: Vec<String>,
}

impl LintInput {
    /// The rules on this input: pure, and as costly as the input is large (see [`Runs`]).
    pub(crate) fn lint(self) -> LiveLint {
        let objects: Vec<Object> = self.objects.iter().map(|o| o.object.clone()).collect();
        lint(&objects, &self.destination, self.unread)
    }
}

/// Kinds whose pod template the rules read (`references::pod_template`), and their plural.
const WORKLOADS: &[(&str, &str, &str)] = &[
    ("apps", "Deployment", "deployments"),
    ("apps", "StatefulSet", "statefulsets"),
    ("apps", "DaemonSet", "daemonsets"),
    ("apps", "ReplicaSet", "replicasets"),
    ("batch", "Job", "jobs"),
    ("batch", "CronJob", "cronjobs"),
    ("", "ReplicationController", "replicationcontrollers"),
    ("argoproj.io", "Rollout", "rollouts"),
];

/// What lint reads of one object.
#[derive(Debug, Default)]
struct Seen {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    body: Value,
    /// Why it is seen in part, when lint would have read more.
    partly: Option<String>,
}

impl Seen {
    fn partly(why: impl Into<String>) -> Seen {
        Seen {
            partly: Some(why.into()),
            ..Seen::default()
        }
    }

    /// Keep only `fields` of an object read whole from the cache, its lint-ignore annotation
    /// (a silenced finding stays silent on the live Application) and its hook annotations.
    fn of(object: &Value, fields: &[&str]) -> Seen {
        let mut spec = Map::new();
        for f in fields {
            if let Some(v) = object.pointer(&format!("/spec/{f}")) {
                spec.insert((*f).to_string(), v.clone());
            }
        }
        // Its lint-ignore annotation, and the hook annotations that say in which phases it
        // is applied (for a hook whose types Argo CD has not recorded).
        let mut annotations = BTreeMap::new();
        for key in [IGNORE_ANNOTATION, HOOK, HELM_HOOK] {
            if let Some(v) = object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
            {
                annotations.insert(key.to_string(), v.to_string());
            }
        }
        Seen {
            annotations,
            body: json!({ "spec": spec }),
            ..Seen::default()
        }
    }
}

/// Read what the rules need of one resource of the Application.
async fn read(cache: &Cache, policy: &CheckPolicy, r: ResourceRef) -> Seen {
    let what = format!("{} {}/{}", r.kind, r.namespace, r.name);
    let from_cache = |e: crate::cache::CacheError| Seen::partly(format!("{what}: {e}"));
    match (r.group.as_str(), r.kind.as_str()) {
        ("", "Secret" | "ConfigMap") => {
            Seen::partly(format!("{what}: name only ({}s are never read)", r.kind))
        }
        // Not even the compact pod view: the waves view starts no watch of pods for an
        // Application's bare Pod, and neither does its lint.
        ("", "Pod") => Seen::partly(format!("{what}: name only (pods are not read)")),
        ("", "Service") => match cache.service(&r.namespace, &r.name).await {
            Ok(Some(s)) => {
                let selector: Map<String, Value> = s
                    .selector
                    .iter()
                    .flat_map(|l| l.iter())
                    .map(|(k, v)| (k.to_string(), Value::from(v)))
                    .collect();
                let mut spec = json!({ "selector": selector });
                if let Some(t) = &s.type_ {
                    spec["type"] = Value::from(&**t);
                }
                Seen {
                    body: json!({ "spec": spec }),
                    ..Seen::default()
                }
            }
            Ok(None) => Seen::default(),
            Err(e) => from_cache(e),
        },
        // The Cluster a Database or DatabaseRole names: a gate on either also holds its Cluster.
        (CNPG, kind @ ("Database" | "DatabaseRole")) => {
            let resource = match kind {
                "Database" => CheckKind::CNPG_DATABASE,
                _ => CheckKind::CNPG_DATABASE_ROLE,
            };
            match cache.object(&resource.kind(), &r.namespace, &r.name).await {
                Ok(Some(o)) => Seen::of(&o, &["name", "cluster"]),
                Ok(None) => Seen::default(),
                Err(e) => from_cache(e),
            }
        }
        (group, kind)
            if group == crate::gate::kind().group
                && kind == <crate::gate::crd::WaveGate as kube::Resource>::kind(&()) =>
        {
            match cache
                .object(&crate::gate::kind(), &r.namespace, &r.name)
                .await
            {
                Ok(Some(o)) => Seen::of(&o, &["checks"]),
                Ok(None) => Seen::default(),
                Err(e) => from_cache(e),
            }
        }
        (group, kind) => {
            let Some((_, _, plural)) = WORKLOADS.iter().find(|(g, k, _)| (*g, *k) == (group, kind))
            else {
                // Nothing of it is read by the rules but its kind, name and wave.
                return Seen::default();
            };
            let resource = CheckKind::Generic {
                group: group.to_string(),
                plural: plural.to_string(),
            };
            if let Err(why) = policy.allows_kind(&resource) {
                return Seen::partly(format!("{what}: not read: {why}"));
            }
            match cache
                .object(&GroupResource::new(group, plural), &r.namespace, &r.name)
                .await
            {
                Ok(Some(o)) => Seen::of(&o, &["template", "jobTemplate"]),
                Ok(None) => Seen::default(),
                Err(e) => from_cache(e),
            }
        }
    }
}

/// The object lint sees for `listed`: a hook carries the types Argo CD recorded, else those
/// its live object shows.
fn live_object(listed: &Listed, mut seen: Seen) -> Object {
    if let Hook::Of(types) = &listed.hook {
        seen.annotations.insert(HOOK.to_string(), types.clone());
    }
    object(&listed.resource, listed.wave, seen)
}

/// Whether lint can tell which phases `listed` is applied in.
fn phases_known(listed: &Listed, seen: &Seen) -> bool {
    listed.hook != Hook::Unrecorded
        || seen.annotations.contains_key(HOOK)
        || seen.annotations.contains_key(HELM_HOOK)
}

/// The object lint sees for a listed resource.
fn object(r: &ResourceRef, wave: i64, seen: Seen) -> Object {
    let mut annotations = seen.annotations;
    annotations.insert(SYNC_WAVE.to_string(), wave.to_string());
    Object {
        file: Arc::from(""),
        line: 0,
        api_version: if r.group.is_empty() {
            r.version.clone()
        } else {
            format!("{}/{}", r.group, r.version)
        },
        group: r.group.clone(),
        kind: r.kind.clone(),
        name: r.name.clone(),
        namespace: (!r.namespace.is_empty()).then(|| r.namespace.clone()),
        labels: seen.labels,
        annotations,
        body: seen.body,
    }
}

/// Lint the objects of `resources` (with the waves Argo CD recorded); `unread` says which
/// were seen only in part.
pub(crate) fn lint(objects: &[Object], destination: &str, unread: Vec<String>) -> LiveLint {
    let options = Options {
        destination: destination.to_string(),
        ..Options::default()
    };
    let mut note = summarise(&unread, objects.len());
    let findings = match crate::lint::lint(objects, &options) {
        Ok(report) => report.active().map(live).collect(),
        Err(e) => {
            note = Some(format!("not linted: {}", e.message));
            Vec::new()
        }
    };
    LiveLint {
        findings,
        note,
        skipped: None,
        passing: false,
    }
}

fn live(f: &Finding) -> LiveFinding {
    LiveFinding {
        rule: f.rule,
        level: f.level,
        wave: f.locations.first().and_then(|l| l.wave),
        message: f.message.clone(),
        why: f.why.clone(),
        fix: f.fix.clone(),
        objects: f
            .locations
            .iter()
            .map(|l| LiveObject {
                object: l.object.clone(),
                wave: l.wave,
            })
            .collect(),
    }
}

/// Objects seen in part, shortly: the first few reasons and how many more.
fn summarise(unread: &[String], total: usize) -> Option<String> {
    const SHOWN: usize = 5;
    if unread.is_empty() {
        return None;
    }
    let mut s = format!(
        "{} of {total} objects seen in part, so references only they carry are not seen: {}",
        unread.len(),
        unread[..unread.len().min(SHOWN)].join("; ")
    );
    if unread.len() > SHOWN {
        s.push_str(&format!("; and {} more", unread.len() - SHOWN));
    }
    Some(s)
}

/// Whether a listed resource is a hook, and of which types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hook {
    No,
    /// `argocd.argoproj.io/hook` as Argo CD recorded the hook's types (comma-separated).
    Of(String),
    /// A hook whose types Argo CD has not recorded: read from the live object, if it is read.
    Unrecorded,
}

/// One resource lint sees in a live Application, with the wave Argo CD recorded.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub resource: ResourceRef,
    pub wave: i64,
    pub hook: Hook,
}

/// The resources of `app` that `wavegate lint` would see in its manifests: every one Argo CD
/// lists in `status.resources`, with the wave it recorded, hooks included. The waves view
/// leaves hooks out of every wave's health, but lint must not: a PostSync hook makes the last
/// Sync wave not the last of the sync (gitops-engine `sync_context.go`, `finalWave`). A hook's
/// types are what the last sync recorded for it (`syncResult.resources[].hookType`, one result
/// per phase it ran in); hooks that sync deleted again are not listed, and neither are they
/// in the manifests' live objects.
pub(crate) fn lint_resources(app: &App) -> Vec<Listed> {
    let lists = app.lists();
    lists
        .resources
        .iter()
        .map(|r| {
            let resource = ResourceRef {
                group: text(&r.group).to_string(),
                version: text(&r.version).to_string(),
                kind: text(&r.kind).to_string(),
                namespace: text(&r.namespace).to_string(),
                name: text(&r.name).to_string(),
            };
            let hook = if r.hook {
                let mut types: Vec<&str> = Vec::new();
                for t in (lists.results.iter())
                    .filter(|x| {
                        text(&x.group) == resource.group
                            && text(&x.kind) == resource.kind
                            && text(&x.namespace) == resource.namespace
                            && text(&x.name) == resource.name
                    })
                    .filter_map(|x| x.hook_type.as_deref())
                {
                    if !t.is_empty() && !types.contains(&t) {
                        types.push(t);
                    }
                }
                if types.is_empty() {
                    Hook::Unrecorded
                } else {
                    Hook::Of(types.join(","))
                }
            } else {
                Hook::No
            };
            Listed {
                resource,
                wave: r.sync_wave,
                hook,
            }
        })
        .collect()
}

/// Reads at once; most come from watches the waves view has just read.
const READ_AT_ONCE: usize = 32;

/// Read what the rules need of the live objects of `app` in the cluster `evaluator` judges,
/// within its patience: `resources` are the ones it manages ([`lint_resources`], hooks
/// included); an object `kept` since its last read, while that read holds, is not read again.
/// `Err` says why nothing can be linted.
pub(crate) async fn read_input(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    app: &Value,
    resources: &[Listed],
    kept: &Kept,
) -> Result<LintInput, LiveLint> {
    let destination = app
        .str_at("/spec/destination/namespace")
        .unwrap_or("")
        .to_string();
    let cache = evaluator.cache();
    // What holds of the last reads first; only the rest is read.
    let looked = kept.get_all(cache, resources);
    let missed: Vec<&Listed> = resources
        .iter()
        .zip(&looked)
        .filter_map(|(l, found)| found.is_none().then_some(l))
        .collect();
    // Taken before any read: a change while reading leaves what is kept stale, never served.
    let taken: Vec<_> = missed
        .iter()
        .map(|l| kept::Taken::now(cache, policy, &l.resource))
        .collect();
    let reads: Vec<_> = missed
        .iter()
        .map(|l| Box::pin(read(cache, policy, l.resource.clone())))
        .collect();
    let reading = futures::stream::iter(reads)
        .buffered(READ_AT_ONCE)
        .collect::<Vec<_>>();
    let Ok(seen) = tokio::time::timeout(evaluator.patience(), reading).await else {
        return Err(LiveLint {
            note: Some(format!(
                "not linted: the objects were not read within {} (--sync-wait and the probe timeout)",
                humantime::format_duration(evaluator.patience())
            )),
            ..LiveLint::default()
        });
    };
    let mut fresh = taken.into_iter().zip(seen);
    let mut unread = Vec::new();
    let mut objects = Vec::with_capacity(resources.len());
    for (l, found) in resources.iter().zip(looked) {
        let part = match found {
            Some(part) => part,
            None => {
                let Some((taken, mut seen)) = fresh.next() else {
                    // One read per resource not found kept, in the same order.
                    continue;
                };
                let partly = seen.partly.take();
                if !phases_known(l, &seen) {
                    unread.extend(partly);
                    let r = &l.resource;
                    unread.push(format!(
                        "{} {}/{}: a hook whose phases neither the last sync nor its live object \
                         shows, left out",
                        r.kind, r.namespace, r.name
                    ));
                    continue;
                }
                let part = kept::Part {
                    partly,
                    object: Arc::new(Sealed::of(live_object(l, seen))),
                };
                kept.keep(cache, l, taken, &part);
                part
            }
        };
        unread.extend(part.partly);
        objects.push(part.object);
    }
    Ok(LintInput {
        objects,
        destination,
        unread,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(group: &str, kind: &str, ns: &str, name: &str) -> ResourceRef {
        ResourceRef {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn forgejo(db_wave: i64, app_wave: i64) -> Vec<Object> {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "forgejo", "namespace": "cicd"},
            "spec": {"replicas": 0, "template": {
                "metadata": {"labels": {"app": "gitea"}},
                "spec": {"containers": [{"name": "forgejo", "image": "forgejo", "env": [
                    {"name": "FORGEJO__database__HOST", "value": "pg-rw.ddb.svc.cluster.local:5432"},
                    {"name": "FORGEJO__database__NAME", "value": "forgejo"}]}]}}}});
        let database =
            json!({"spec": {"name": "forgejo", "owner": "forgejo", "cluster": {"name": "pg"}}});
        vec![
            object(&listed("", "Pod", "cicd", "forgejo-0"), 0, Seen::default()),
            object(
                &listed("", "Service", "cicd", "forgejo"),
                1,
                Seen {
                    body: json!({"spec": {"selector": {"app": "forgejo"}}}),
                    ..Seen::default()
                },
            ),
            object(
                &listed(CNPG, "Database", "ddb", "forgejo"),
                db_wave,
                Seen::of(&database, &["name", "cluster"]),
            ),
            object(
                &listed(CNPG, "Cluster", "ddb", "pg"),
                db_wave,
                Seen::default(),
            ),
            object(
                &listed("apps", "Deployment", "cicd", "forgejo"),
                app_wave,
                Seen::of(&deployment, &["template", "jobTemplate"]),
            ),
        ]
    }

    #[test]
    fn forgejo_in_the_wave_of_its_database_is_found_on_the_live_objects() {
        let found = lint(&forgejo(3, 3), "cicd", Vec::new());
        let same = found
            .findings
            .iter()
            .find(|f| f.rule == Rule::SameWave)
            .expect("a same-wave finding");
        assert_eq!(same.wave, Some(3));
        assert!(
            same.message.contains("uses database forgejo of Cluster pg")
                && same
                    .message
                    .contains("Database ddb/forgejo is applied in wave 3"),
            "{}",
            same.message
        );
        // The Deployment's pod template is the near match.
        let selector = found
            .findings
            .iter()
            .find(|f| f.rule == Rule::SelectorMatchesNothing)
            .expect("a selector finding");
        assert_eq!(selector.wave, Some(1));
    }

    #[test]
    fn forgejo_in_a_later_wave_than_its_database_is_not_a_same_wave_finding() {
        let found = lint(&forgejo(3, 5), "cicd", Vec::new());
        assert!(
            !found.findings.iter().any(|f| f.rule == Rule::SameWave),
            "{:?}",
            found.findings
        );
    }

    /// An Argo CD Application that synced `manifests` (ConfigMaps, WaveGates, Job hooks), as
    /// its status lists them: `status.resources` with each one's wave, hooks flagged, and the
    /// last sync's results with each hook's types (controller/sync.go, one result per phase).
    fn synced(manifests: &[Value]) -> Value {
        let mut resources = Vec::new();
        let mut results = Vec::new();
        for m in manifests {
            let (group, version) = match m["apiVersion"].as_str().unwrap().split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), m["apiVersion"].as_str().unwrap().to_string()),
            };
            let annotations = &m["metadata"]["annotations"];
            let wave: i64 = annotations[SYNC_WAVE].as_str().unwrap().parse().unwrap();
            let hook = annotations[crate::lint::sync_order::HOOK].as_str();
            let entry = json!({"group": group, "version": version, "kind": m["kind"],
                "namespace": m["metadata"]["namespace"], "name": m["metadata"]["name"],
                "syncWave": wave, "hook": hook.is_some()});
            resources.push(entry);
            for t in hook.iter().flat_map(|h| h.split(',')) {
                results.push(json!({"group": group, "kind": m["kind"],
                    "namespace": m["metadata"]["namespace"], "name": m["metadata"]["name"],
                    "status": "Synced", "hookType": t}));
            }
        }
        json!({"spec": {"destination": {"namespace": "cicd"}},
            "status": {"resources": resources, "operationState": {"phase": "Succeeded",
                "syncResult": {"resources": results}}}})
    }

    /// What the waves view lints for `app`, the live objects read as `manifests` show them.
    fn live_findings(app: &Value, manifests: &[Value]) -> Vec<(Rule, String)> {
        let objects: Vec<Object> = lint_resources(&App::of(app.clone()))
            .into_iter()
            .map(|l| {
                let m = manifests
                    .iter()
                    .find(|m| m["metadata"]["name"] == l.resource.name.as_str())
                    .unwrap();
                let seen = if l.resource.kind == "WaveGate" {
                    Seen::of(m, &["checks"])
                } else {
                    Seen::default()
                };
                live_object(&l, seen)
            })
            .collect();
        let mut found: Vec<_> = lint(&objects, "cicd", Vec::new())
            .findings
            .into_iter()
            .map(|f| (f.rule, f.message))
            .collect();
        found.sort();
        found
    }

    /// What `wavegate lint` finds in `manifests`.
    fn cli_findings(manifests: &[Value]) -> Vec<(Rule, String)> {
        let text: String = manifests
            .iter()
            .map(|m| format!("---\n{}", serde_yaml::to_string(m).unwrap()))
            .collect();
        let mut objects = Vec::new();
        crate::lint::manifest::parse("app.yaml", &text, true, &mut objects).unwrap();
        let options = Options {
            destination: "cicd".into(),
            ..Options::default()
        };
        let report = crate::lint::lint(&objects, &options).unwrap();
        let mut found: Vec<_> = report
            .active()
            .map(|f| (f.rule, f.message.clone()))
            .collect();
        found.sort();
        found
    }

    fn manifest(kind: u8, i: usize, wave: i64, hook: &str) -> Value {
        let mut annotations = json!({ SYNC_WAVE: wave.to_string() });
        let (api_version, kind, spec) = match kind {
            0 => ("v1", "ConfigMap", Value::Null),
            1 => ("wavegate.dev/v1alpha1", "WaveGate", json!({"checks": []})),
            _ => {
                annotations[crate::lint::sync_order::HOOK] = hook.into();
                (
                    "batch/v1",
                    "Job",
                    json!({"template": {"spec": {"containers": []}}}),
                )
            }
        };
        let mut m = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": format!("o{i}"), "namespace": "cicd", "annotations": annotations}});
        if !spec.is_null() {
            m["spec"] = spec;
        }
        m
    }

    #[test]
    fn a_gate_in_the_last_sync_wave_before_a_post_sync_hook_is_not_in_the_last_wave() {
        let manifests = [
            manifest(1, 0, 2, ""),
            manifest(0, 1, 1, ""),
            manifest(2, 2, 0, "PostSync"),
        ];
        let cli = cli_findings(&manifests);
        assert!(
            !cli.iter().any(|(r, _)| *r == Rule::GateInLastWave),
            "{cli:?}"
        );
        assert_eq!(live_findings(&synced(&manifests), &manifests), cli);
    }

    proptest::proptest! {
        #![proptest_config(crate::testing::proptest_config::config(300))]

        /// One input, one set of findings: the waves view, linting what Argo CD recorded of
        /// an Application that synced these manifests, finds what `wavegate lint` finds in
        /// them, hooks of every phase included.
        #[test]
        fn the_waves_views_findings_equal_wavegate_lints_on_the_same_manifests(
            objects in proptest::collection::vec(
                (0u8..3, -1i64..3, proptest::sample::select(vec![
                    "PreSync", "Sync", "PostSync", "SyncFail", "PreSync,PostSync",
                ])),
                1..7,
            ),
        ) {
            let manifests: Vec<Value> = objects
                .iter()
                .enumerate()
                .map(|(i, (kind, wave, hook))| manifest(*kind, i, *wave, hook))
                .collect();
            proptest::prop_assert_eq!(
                live_findings(&synced(&manifests), &manifests),
                cli_findings(&manifests)
            );
        }
    }

    /// What a poll reads of an unchanged workload is what the last poll read (not read, copied
    /// or fingerprinted again); a change of the workload is read at the next poll, and a
    /// change elsewhere in its namespace leaves it kept.
    #[tokio::test]
    async fn a_workload_read_once_is_kept_until_it_changes() {
        use crate::cache::fed::{self, Feed};
        use kube::api::DynamicObject;
        use kube::runtime::watcher::Event;
        let cache = fed::cache("shop", &[("apps", "deployments", "Deployment")]).await;
        let deployments: Arc<Feed<DynamicObject>> =
            cache.feed(&GroupResource::new("apps", "deployments"));
        let deployment = |name: &str, image: &str| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}}))
            .unwrap()
        };
        deployments.list([deployment("web", "web:1"), deployment("api", "api:1")]);
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let config = crate::evaluate::EvalConfig::default();
        let evaluator = Evaluator::new(cache, config, metrics).unwrap();
        let app = json!({"metadata": {"name": "shop", "namespace": "argocd"},
            "spec": {"destination": {"namespace": "shop"}},
            "status": {"resources": [
                {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop",
                 "name": "web", "syncWave": 1},
                {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "shop",
                 "name": "conf"}]}});
        let listed = lint_resources(&App::of(app.clone()));
        let (kept, policy) = (Kept::default(), CheckPolicy::default());
        let read = || async {
            fed::settle().await;
            read_input(&evaluator, &policy, &app, &listed, &kept)
                .await
                .unwrap()
        };
        let image = |input: &LintInput| {
            input.objects[0].object.body["spec"]["template"]["spec"]["containers"][0]["image"]
                .clone()
        };
        // The first read starts the watch: a phase change, after which nothing read before
        // it is kept.
        read().await;
        let first = read().await;
        assert_eq!(image(&first), "web:1");
        let same =
            |a: &LintInput, b: &LintInput, i: usize| Arc::ptr_eq(&a.objects[i], &b.objects[i]);
        deployments.send(Event::Apply(deployment("api", "api:2")));
        let again = read().await;
        assert!(same(&first, &again, 0), "read again, unchanged");
        assert!(same(&first, &again, 1), "the ConfigMap's name built again");
        assert_eq!(again.unread, first.unread);
        deployments.send(Event::Apply(deployment("web", "web:2")));
        let changed = read().await;
        assert_eq!(
            image(&changed),
            "web:2",
            "served as it was before it changed"
        );
        assert!(same(&first, &changed, 1));
    }

    #[test]
    fn objects_seen_in_part_are_said_and_bounded() {
        let unread: Vec<String> = (0..8)
            .map(|i| format!("Secret cicd/s{i}: name only"))
            .collect();
        let note = lint(&forgejo(3, 3), "cicd", unread)
            .note
            .unwrap_or_default();
        assert!(note.contains("and 3 more"), "{note}");
    }
}
