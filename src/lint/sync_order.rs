//! The order in which Argo CD applies a set of objects, as gitops-engine computes it
//! (github.com/argoproj/gitops-engine, the version Argo CD 3.2 vendors: v0.7.1-0.20251217140045):
//!
//! - `pkg/sync/sync_phase.go` `syncPhases`: a resource is synced in phase `Sync`; a hook in
//!   every phase its hook types name; an object whose only hook type is `Skip` (`hook.Skip`),
//!   and a hook with no supported type (a Helm `test` hook), is never synced;
//! - `pkg/sync/hook/hook.go` `IsHook`/`Types`: the `argocd.argoproj.io/hook` annotation
//!   (comma-separated, trimmed, deduplicated: `PreSync`, `Sync`, `PostSync`, `SyncFail`,
//!   `Skip`); only when it names no known type, Helm's `helm.sh/hook` (`pre-install`,
//!   `pre-upgrade` → PreSync; `post-install`, `post-upgrade` → PostSync); `helm.sh/hook:
//!   crd-install` is not a hook (`hook/helm/hook.go`);
//! - `pkg/sync/syncwaves/waves.go` `Wave`: `argocd.argoproj.io/sync-wave` if it parses as an
//!   integer (`strconv.Atoi`), else `helm.sh/hook-weight` if it does, else 0 — for every
//!   object, hook or not;
//! - `pkg/sync/sync_tasks.go` `Less`: phase (PreSync −1, Sync 0, PostSync 1, SyncFail 2),
//!   then wave, then `kindOrder` (Helm's install order; kinds not in it sort after all that
//!   are), then name; then `Sort` moves each Namespace before the first object in it and each
//!   CRD before the first object of its kind (`adjustDeps`), giving them that object's phase
//!   and wave.
//!
//! `pkg/sync/sync_context.go` then applies one (phase, wave) at a time and starts the next only
//! when all of it is healthy; after the last (phase, wave) it waits for nothing (`finalWave`).
//! Within one (phase, wave), `runTasks` applies the tasks in runs of one kind, in the order
//! above, one run after another (the objects of a run concurrently, `processCreateTasks`): an
//! earlier kind is stored before a later kind is applied, but nothing waits for its health.
//! The real Argo CD 3.2.11 does exactly this (tests/argocd/order.sh).

use super::manifest::Object;
use serde::Serialize;

pub const SYNC_WAVE: &str = "argocd.argoproj.io/sync-wave";
pub const HOOK: &str = "argocd.argoproj.io/hook";
pub(crate) const HELM_HOOK: &str = "helm.sh/hook";
const HELM_HOOK_WEIGHT: &str = "helm.sh/hook-weight";

/// Sync phases in the order gitops-engine runs them (`syncPhaseOrder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Phase {
    PreSync,
    Sync,
    PostSync,
    SyncFail,
}

impl Phase {
    fn parse(text: &str) -> Option<Phase> {
        match text {
            "PreSync" => Some(Phase::PreSync),
            "Sync" => Some(Phase::Sync),
            "PostSync" => Some(Phase::PostSync),
            "SyncFail" => Some(Phase::SyncFail),
            _ => None,
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::PreSync => "PreSync",
            Phase::Sync => "Sync",
            Phase::PostSync => "PostSync",
            Phase::SyncFail => "SyncFail",
        })
    }
}

/// A step of the sync: Argo CD applies all of one moment, waits until it is healthy, then goes
/// on. Ordered as gitops-engine orders them (phase, then wave).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Moment {
    pub phase: Phase,
    pub wave: i64,
}

impl std::fmt::Display for Moment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.phase == Phase::Sync {
            write!(f, "wave {}", self.wave)
        } else {
            write!(f, "{} hook wave {}", self.phase, self.wave)
        }
    }
}

/// One object applied at one moment (a hook with several phases is several tasks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub object: usize,
    pub at: Moment,
    pub hook: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookType {
    Phase(Phase),
    Skip,
}

/// `resource.GetAnnotationCSVs`: split on commas, trim, drop empties, deduplicate.
fn csv(value: Option<&String>) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for item in value.map(|v| v.split(',')).into_iter().flatten() {
        let item = item.trim();
        if !item.is_empty() && !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// `hook.Types`.
fn hook_types(o: &Object) -> Vec<HookType> {
    let argo: Vec<HookType> = csv(o.annotations.get(HOOK))
        .into_iter()
        .filter_map(|t| match t {
            "Skip" => Some(HookType::Skip),
            t => Phase::parse(t).map(HookType::Phase),
        })
        .collect();
    if !argo.is_empty() {
        return argo;
    }
    let mut helm = Vec::new();
    for t in csv(o.annotations.get(HELM_HOOK)) {
        let phase = match t {
            "pre-install" | "pre-upgrade" => Phase::PreSync,
            "post-install" | "post-upgrade" => Phase::PostSync,
            _ => continue,
        };
        helm.push(HookType::Phase(phase));
    }
    helm
}

/// `hook.Skip`: `Skip` is the only hook type.
fn skipped(types: &[HookType]) -> bool {
    types.contains(&HookType::Skip) && types.len() == 1
}

/// `hook.IsHook`.
pub fn is_hook(o: &Object) -> bool {
    if o.annotations.contains_key(HOOK) {
        return !skipped(&hook_types(o));
    }
    o.annotations
        .get(HELM_HOOK)
        .is_some_and(|v| v != "crd-install")
}

/// `syncPhases`: the phases an object is applied in (none: never applied).
pub fn phases(o: &Object) -> Vec<Phase> {
    let types = hook_types(o);
    if skipped(&types) {
        return Vec::new();
    }
    if is_hook(o) {
        let mut out: Vec<Phase> = types
            .into_iter()
            .filter_map(|t| match t {
                HookType::Phase(p) => Some(p),
                HookType::Skip => None,
            })
            .collect();
        out.sort();
        out.dedup();
        return out;
    }
    vec![Phase::Sync]
}

/// `syncwaves.Wave`. Go's `strconv.Atoi` and Rust's `i64` parsing accept the same text (an
/// optional sign and decimal digits, 64-bit range).
pub fn wave(o: &Object) -> i64 {
    [SYNC_WAVE, HELM_HOOK_WEIGHT]
        .iter()
        .find_map(|key| o.annotations.get(*key)?.parse::<i64>().ok())
        .unwrap_or(0)
}

/// `kindOrder`: Helm's install order (`releaseutil/kind_sorter.go`), negative so that every
/// kind not listed (0) sorts after all listed ones. Keyed by kind alone, whatever the group.
const KIND_ORDER: &[&str] = &[
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
];

pub fn kind_order(kind: &str) -> i64 {
    KIND_ORDER
        .iter()
        .position(|k| *k == kind)
        .map_or(0, |i| i as i64 - KIND_ORDER.len() as i64)
}

/// Every task of a sync of `objects`, in the order gitops-engine applies them.
/// `destination` is the Application's destination namespace: gitops-engine gives it to every
/// object without one before ordering (`getSyncTasks`), cluster-scoped ones included.
pub fn sync_tasks(objects: &[Object], destination: &str) -> Vec<Task> {
    let mut tasks: Vec<Task> = Vec::with_capacity(objects.len());
    for (i, o) in objects.iter().enumerate() {
        let w = wave(o);
        let hook = is_hook(o);
        for phase in phases(o) {
            tasks.push(Task {
                object: i,
                at: Moment { phase, wave: w },
                hook,
            });
        }
    }
    // `Less`. gitops-engine's sort is not stable, so objects equal in phase, wave, kind and
    // name come in no defined order; namespace and document order make ours reproducible.
    tasks.sort_by(|a, b| {
        let (oa, ob) = (&objects[a.object], &objects[b.object]);
        a.at.cmp(&b.at)
            .then_with(|| kind_order(&oa.kind).cmp(&kind_order(&ob.kind)))
            .then_with(|| oa.name.cmp(&ob.name))
            .then_with(|| oa.ns(destination).cmp(ob.ns(destination)))
            .then_with(|| a.object.cmp(&b.object))
    });
    // Namespaces before the objects in them.
    adjust_deps(
        &mut tasks,
        objects,
        |o| (o.is("", "Namespace")).then(|| o.name.clone()),
        |o| {
            let ns = o.ns(destination);
            (!ns.is_empty()).then(|| ns.to_string())
        },
    );
    // CRDs before the objects of their kind.
    adjust_deps(
        &mut tasks,
        objects,
        |o| {
            if !o.is("apiextensions.k8s.io", "CustomResourceDefinition") {
                return None;
            }
            let group = o.at(&["spec", "group"])?.as_str()?;
            let kind = o.at(&["spec", "names", "kind"])?.as_str()?;
            Some(format!("{group}/{kind}"))
        },
        |o| Some(format!("{}/{}", o.group, o.kind)),
    );
    tasks
}

/// `syncTasks.adjustDeps`: a dependency found after the first task that refers to it moves
/// just before that task and takes its phase and wave.
fn adjust_deps(
    tasks: &mut [Task],
    objects: &[Object],
    is_dep: impl Fn(&Object) -> Option<String>,
    refers_to: impl Fn(&Object) -> Option<String>,
) {
    let mut first_index: std::collections::HashMap<String, usize> =
        std::collections::HashMap::new();
    for i in 0..tasks.len() {
        let o = &objects[tasks[i].object];
        if let Some(key) = is_dep(o) {
            if let Some(&index) = first_index.get(&key) {
                let mut t = tasks[i].clone();
                t.at = tasks[index].at;
                tasks[index..=i].rotate_right(1);
                tasks[index] = t;
                for v in first_index.values_mut() {
                    if *v >= index {
                        *v += 1;
                    }
                }
            }
        } else if let Some(key) = refers_to(o) {
            first_index.entry(key).or_insert(i);
        }
    }
}

/// When each object is first applied by a sync that succeeds (`SyncFail` hooks run only when
/// it fails), or `None` if never.
pub fn first_applied(tasks: &[Task], objects: usize) -> Vec<Option<Moment>> {
    let mut out = vec![None; objects];
    for t in tasks {
        if t.at.phase == Phase::SyncFail {
            continue;
        }
        let slot: &mut Option<Moment> = &mut out[t.object];
        if slot.is_none_or(|m| t.at < m) {
            *slot = Some(t.at);
        }
    }
    out
}

/// The last moment of a successful sync: after it Argo CD waits for nothing.
pub fn last_moment(tasks: &[Task]) -> Option<Moment> {
    tasks
        .iter()
        .map(|t| t.at)
        .filter(|m| m.phase != Phase::SyncFail)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::manifest::parse;

    fn objects(yaml: &str) -> Vec<Object> {
        let mut out = Vec::new();
        parse("t.yaml", yaml, true, &mut out).unwrap();
        out
    }

    fn order(yaml: &str) -> Vec<String> {
        let objs = objects(yaml);
        sync_tasks(&objs, "dest")
            .iter()
            .map(|t| format!("{}:{}/{}", t.at, objs[t.object].kind, objs[t.object].name))
            .collect()
    }

    #[test]
    fn phase_then_wave_then_kind_then_name() {
        let got = order(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: z}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, annotations: {argocd.argoproj.io/sync-wave: \"-1\"}}\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: m, annotations: {argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/sync-wave: \"5\"}}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: a}\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: post, annotations: {helm.sh/hook: post-install, helm.sh/hook-weight: \"-3\"}}\n",
        );
        assert_eq!(
            got,
            [
                "PreSync hook wave 5:Job/m",
                "wave -1:ConfigMap/b",
                "wave 0:Secret/z",
                "wave 0:Deployment/a",
                "wave 0:Widget/a",
                "PostSync hook wave -3:Job/post",
            ]
        );
    }

    #[test]
    fn skip_and_unsupported_helm_hooks_are_never_applied() {
        let got = order(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: skip, annotations: {argocd.argoproj.io/hook: Skip}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: test, annotations: {helm.sh/hook: test}}\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: c, annotations: {helm.sh/hook: crd-install}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: both, annotations: {argocd.argoproj.io/hook: \"Skip, PreSync,PreSync\"}}\n",
        );
        assert_eq!(
            got,
            [
                "PreSync hook wave 0:Pod/both",
                "wave 0:CustomResourceDefinition/c"
            ]
        );
    }

    #[test]
    fn argo_hook_annotation_overrides_helm_hook_types() {
        let got = order(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, annotations: {argocd.argoproj.io/hook: \"PostSync,SyncFail\", helm.sh/hook: pre-install}}\n",
        );
        assert_eq!(
            got,
            ["PostSync hook wave 0:Job/j", "SyncFail hook wave 0:Job/j"]
        );
    }

    #[test]
    fn unparsable_wave_falls_back_to_helm_weight_then_zero() {
        let objs = objects(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: a, annotations: {argocd.argoproj.io/sync-wave: \"one\", helm.sh/hook-weight: \"+4\"}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b, annotations: {argocd.argoproj.io/sync-wave: \" 2\"}}\n",
        );
        assert_eq!(wave(&objs[0]), 4);
        assert_eq!(wave(&objs[1]), 0);
    }

    #[test]
    fn namespace_moves_before_its_first_object_and_takes_its_wave() {
        let got = order(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: app, annotations: {argocd.argoproj.io/sync-wave: \"3\"}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: app, annotations: {argocd.argoproj.io/sync-wave: \"-2\"}}\n",
        );
        assert_eq!(got, ["wave -2:Namespace/app", "wave -2:Secret/s"]);
    }

    #[test]
    fn crd_moves_before_its_first_custom_resource() {
        let got = order(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com, annotations: {argocd.argoproj.io/sync-wave: \"1\"}}\nspec: {group: example.com, names: {kind: Widget}}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: x, annotations: {argocd.argoproj.io/hook: PreSync}}\n",
        );
        assert_eq!(
            got,
            [
                "PreSync hook wave 0:CustomResourceDefinition/widgets.example.com",
                "PreSync hook wave 0:Widget/w"
            ]
        );
    }
}
