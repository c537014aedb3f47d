//! The waves view: an Application's resources grouped by sync wave, each judged truthfully, and
//! the first wave that is not really ready.
//!
//! Argo CD records each managed resource in `status.resources[]` with its `syncWave`
//! (`ResourceStatus` in pkg/apis/application/v1alpha1/types.go). Since Argo CD 3.0 the
//! per-resource `health` there is not persisted by default, so it is used only as a last resort.

use crate::app_status::{App, text};
use crate::ask::Ask;
use crate::cache::Decoded;
use crate::clusters::Clusters;
use crate::evaluate::{Evaluator, RECHECK_UNSURE};
use crate::gate::crd::WaveGate;
use crate::gate::view::Gate;
use crate::health::{HealthStatus, Verdict};
use crate::json::At;
use crate::live_lint::LiveLint;
use crate::policy::CheckPolicy;
use crate::resource::{CheckKind, GroupResource, ResourceRef, Target};
use crate::views::{TrackingMethod, managing_app};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Serialize;
use std::time::{Duration, Instant};

pub(crate) mod listing;

/// Who judged a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JudgedBy {
    /// One of wavegate's checks (or a WaveGate's own status).
    Wavegate,
    /// kstatus rules on the live object.
    Kstatus,
    /// An Argo CD health script on the live object (argocd-cm's or the release's bundled one),
    /// named by its key: `argocd-lua:<group>/<Kind>`.
    ArgocdLua(String),
    /// The health Argo CD recorded in the Application's status.
    Argocd,
    /// Not judged: through Argo CD's proxy, an object the Application lists but does not
    /// manage (see [`ViewScope`]); nothing of it was read for the view.
    OutOfScope,
}

impl JudgedBy {
    /// The judges the API names by a word alone (every one but a script, which has a key).
    const NAMED: [JudgedBy; 4] = [
        JudgedBy::Wavegate,
        JudgedBy::Kstatus,
        JudgedBy::Argocd,
        JudgedBy::OutOfScope,
    ];
}

impl Serialize for JudgedBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            JudgedBy::Wavegate => s.serialize_str("wavegate"),
            JudgedBy::Kstatus => s.serialize_str("kstatus"),
            JudgedBy::ArgocdLua(key) => s.collect_str(&format_args!("argocd-lua:{key}")),
            JudgedBy::Argocd => s.serialize_str("argocd"),
            JudgedBy::OutOfScope => s.serialize_str("outofscope"),
        }
    }
}

/// The words [`JudgedBy::NAMED`] serialise to, or a script's key after `argocd-lua:`: the
/// schema is read off the serialisation, so it cannot leave a judge out.
impl JsonSchema for JudgedBy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "JudgedBy".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let words: Vec<serde_json::Value> = JudgedBy::NAMED
            .iter()
            .filter_map(|j| serde_json::to_value(j).ok())
            .collect();
        schemars::json_schema!({
            "description": "Who judged the resource: wavegate (its checks, or a WaveGate's own \
                status), kstatus (kstatus rules on the live object), argocd (the health Argo CD \
                recorded), outofscope (through Argo CD's proxy, an object the Application lists \
                but does not manage: not read), or an Argo CD health script by its key, \
                argocd-lua:<group>/<Kind>.",
            "anyOf": [
                {"type": "string", "enum": words},
                {"type": "string", "pattern": "^argocd-lua:"},
            ],
        })
    }
}

/// What a view may read on behalf of a user whom Argo CD's proxy authorized for one
/// Application and project. `status.resources` comes from the application's Git repository,
/// which may list any object (another team's Service, an Application of another project), so a
/// listed object that exists is judged only while its own tracking names the viewed
/// application, and a child Application only while it is also in the authorized project.
/// Otherwise the view shows the health Argo CD recorded for it, if any, and reads nothing.
#[derive(Debug, Clone)]
pub(crate) struct ViewScope {
    /// The project Argo CD authorized the user for.
    pub project: String,
    /// Argo CD's namespace (how its tracking names an Application there and elsewhere).
    pub argocd_namespace: String,
    pub method: TrackingMethod,
}

/// Argo CD's `Application.InstanceName`: the name alone for an Application in Argo CD's own
/// namespace, `<namespace>_<name>` otherwise (argo-cd `pkg/apis/application/v1alpha1/types.go`).
pub(crate) fn instance_name(namespace: &str, name: &str, argocd_namespace: &str) -> String {
    if namespace == argocd_namespace {
        name.to_string()
    } else {
        format!("{namespace}_{name}")
    }
}

/// [`ViewScope`] for the view of one application.
pub(crate) struct Scoped<'a> {
    scope: &'a ViewScope,
    /// The viewed application's `InstanceName`.
    instance: String,
}

impl Scoped<'_> {
    /// `Err(why)` when `r` exists and is not the viewed application's to show, or when whose it
    /// is cannot be read (a watch still listing, relisting, refused): the judge's own read may
    /// succeed a moment later and would then show an object nobody proved the user may see. An
    /// object that does not exist is judged (Missing): Argo CD's own tree shows that much
    /// already.
    async fn admits(
        &self,
        evaluator: &Evaluator,
        policy: &CheckPolicy,
        r: &ResourceRef,
    ) -> Result<(), NotAdmitted> {
        let cache = evaluator.cache();
        let (group, kind) = (r.group.as_str(), r.kind.as_str());
        let method = self.scope.method;
        let managed = if group.is_empty() && kind == "Service" {
            match cache.service(&r.namespace, &r.name).await {
                Ok(Some(s)) => Some(s.tracking.app(method) == Some(self.instance.as_str())),
                Ok(None) => None,
                Err(e) => return Err(self.unreadable(r, e)),
            }
        } else if group.is_empty() && kind == "Pod" {
            match cache.pod(&r.namespace, &r.name).await {
                Ok(Some(p)) => Some(
                    p.argocd.as_ref().and_then(|a| a.tracking.app(method))
                        == Some(self.instance.as_str()),
                ),
                Ok(None) => None,
                Err(e) => return Err(self.unreadable(r, e)),
            }
        } else {
            let live_kind = match CheckKind::dedicated(group, kind) {
                Some(resource) => resource.kind(),
                None if group == crate::gate::kind().group && kind == "WaveGate" => {
                    crate::gate::kind()
                }
                None => {
                    let Ok(plural) = cache.plural_of(group, kind).await else {
                        return Ok(());
                    };
                    let generic = CheckKind::Generic {
                        group: group.to_string(),
                        plural: plural.clone(),
                    };
                    // The policy before any read: a refused kind is not watched to find out
                    // whose it is (`judge_kind` then says it is not judged).
                    if policy.allows_kind(&generic).is_err() {
                        return Ok(());
                    }
                    GroupResource::new(group, &plural)
                }
            };
            match cache.object(&live_kind, &r.namespace, &r.name).await {
                Ok(Some(object)) => Some(
                    managing_app(&object, group, kind, method) == Some(self.instance.as_str())
                        && (kind != "Application"
                            || group != CheckKind::APPLICATION.group_kind().0
                            || {
                                let project = object.text_at("/spec/project").unwrap_or("default");
                                project == self.scope.project
                            }),
                ),
                Ok(None) => None,
                Err(e) => return Err(self.unreadable(r, e)),
            }
        };
        match managed {
            Some(false) => Err(NotAdmitted::NotItsOwn {
                object: object_name(r),
                app: self.instance.clone(),
            }),
            _ => Ok(()),
        }
    }

    fn unreadable(&self, r: &ResourceRef, error: crate::cache::CacheError) -> NotAdmitted {
        NotAdmitted::Unreadable {
            object: object_name(r),
            app: self.instance.clone(),
            error,
        }
    }
}

/// Why an object an Application lists is not shown through Argo CD's proxy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotAdmitted {
    #[error(
        "{object} is not shown: it is listed by Application {app}, but it is not that \
         application's own object (its Argo CD tracking does not name it, or it is in another \
         project)"
    )]
    NotItsOwn { object: String, app: String },
    #[error(
        "{object} is not shown: wavegate cannot tell yet whether it is Application {app}'s own \
         object ({error})"
    )]
    Unreadable {
        object: String,
        app: String,
        #[source]
        error: crate::cache::CacheError,
    },
}

/// `<Kind> <namespace>/<name>`, as the messages name a listed object.
fn object_name(r: &ResourceRef) -> String {
    format!("{} {}/{}", r.kind, r.namespace, r.name)
}

/// One resource of an Application, judged.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JudgedResource {
    #[serde(flatten)]
    pub resource: ResourceRef,
    pub status: HealthStatus,
    pub message: String,
    pub judged_by: JudgedBy,
    /// Argo CD's own status and message when one of its health scripts judged the object
    /// (`judgedBy: argocd-lua:…`), apart from wavegate's verdict above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argo_status: Option<crate::argocd_lua::ArgoHealth>,
}

impl JudgedResource {
    pub(crate) fn new(resource: ResourceRef, verdict: Verdict, judged_by: JudgedBy) -> Self {
        JudgedResource {
            resource,
            status: verdict.status,
            message: verdict.message,
            judged_by,
            argo_status: verdict.argo_status,
        }
    }
}

// Each resource is a [`JudgedResource`], or what it serialises to where an answer is
// assembled from kept rows (`api::rows`); the doc comment below is the API's description.
/// One sync wave of an Application: its resources and the worst of their statuses.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Wave")]
pub(crate) struct Wave<R = JudgedResource> {
    pub wave: i64,
    pub status: HealthStatus,
    pub resources: Vec<R>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Waves")]
pub(crate) struct Waves<R = JudgedResource> {
    pub namespace: String,
    pub name: String,
    pub health: Verdict,
    /// The first wave that is not truly healthy.
    pub blocking_wave: Option<i64>,
    pub message: String,
    pub waves: Vec<Wave<R>>,
    /// `wavegate lint`'s findings on the live objects, when asked for one Application (the
    /// per-application waves endpoints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lint: Option<LiveLint>,
    /// When a verdict of this view may change with time alone (see
    /// [`crate::evaluate::Judgement::valid_until`]); `None`: it holds until something it read
    /// changes.
    #[serde(skip)]
    pub valid_until: Option<Instant>,
}

/// A resource an Application manages: the resource, its wave, and the health Argo CD recorded
/// (or its own, for kinds it never health-checks).
pub(crate) type Managed = (ResourceRef, i64, Option<Verdict>);

/// The resources of an Application with their waves, skipping hooks (they run during a sync
/// phase and are not part of any wave's health).
pub(crate) fn managed_resources(app: &App) -> Vec<Managed> {
    app.lists()
        .resources
        .iter()
        .filter(|r| !r.hook)
        .map(|r| {
            let resource = ResourceRef {
                group: text(&r.group).to_string(),
                version: text(&r.version).to_string(),
                kind: text(&r.kind).to_string(),
                namespace: text(&r.namespace).to_string(),
                name: text(&r.name).to_string(),
            };
            let reported = (r.health.as_deref().cloned())
                .or_else(|| without_health_check(&resource, text(&r.status)));
            (resource, r.sync_wave, reported)
        })
        .collect()
}

/// Kinds gitops-engine has no health check for (pkg/health/health.go `GetHealthCheckFunc`, and
/// no Lua of Argo CD's resource_customizations): Argo CD counts one done as soon as it is applied.
/// From 3.0 Argo CD records no per-resource health in `status.resources`, so its sync status is
/// what it knows of them.
const NO_HEALTH_CHECK: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Namespace"),
    ("", "ServiceAccount"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("networking.k8s.io", "NetworkPolicy"),
];

/// Argo CD's own view of a kind it never health-checks: done once applied as desired (Synced),
/// waiting otherwise. Never read from the cluster (a ConfigMap's or Secret's data is not the
/// waves view's to hold).
fn without_health_check(r: &ResourceRef, sync_status: &str) -> Option<Verdict> {
    if !NO_HEALTH_CHECK.contains(&(r.group.as_str(), r.kind.as_str())) {
        return None;
    }
    let what = format!("{} {}/{}", r.kind, r.namespace, r.name);
    Some(if sync_status == "Synced" {
        Verdict::healthy(format!(
            "{what}: Argo CD has no health check for this kind and reports it applied as desired (Synced)"
        ))
    } else {
        Verdict::progressing(format!(
            "{what}: Argo CD has no health check for this kind and reports it {} (not applied as desired yet)",
            if sync_status.is_empty() {
                "without a sync status"
            } else {
                sync_status
            }
        ))
    })
}

/// Group judged resources into waves in ascending order and find the first blocking one.
pub(crate) fn assemble(
    namespace: &str,
    name: &str,
    health: Verdict,
    judged: Vec<(i64, JudgedResource)>,
) -> Waves {
    assemble_by(namespace, name, health, judged, |r| r)
}

/// [`assemble`] of rows that each hold a judged resource (`judged` says where).
pub(crate) fn assemble_by<R>(
    namespace: &str,
    name: &str,
    health: Verdict,
    mut rows: Vec<(i64, R)>,
    judged: impl Fn(&R) -> &JudgedResource,
) -> Waves<R> {
    let mut waves: Vec<Wave<R>> = Vec::new();
    rows.sort_by_key(|(w, _)| *w);
    for (w, r) in rows {
        match waves.last_mut() {
            Some(last) if last.wave == w => last.resources.push(r),
            _ => waves.push(Wave {
                wave: w,
                status: HealthStatus::Healthy,
                resources: vec![r],
            }),
        }
    }
    for wave in &mut waves {
        // `worst_of`'s status (a wave has a resource at least), without the message it
        // would write and nobody reads: a string per resource of a view.
        wave.status = HealthStatus::worst(wave.resources.iter().map(|r| judged(r).status));
    }
    let blocking = waves.iter().find(|w| w.status != HealthStatus::Healthy);
    let message = match blocking {
        None if waves.is_empty() => {
            format!("Application {namespace}/{name} lists no resources yet")
        }
        None => "all waves truly healthy".to_string(),
        Some(w) => {
            let reasons: Vec<String> = w
                .resources
                .iter()
                .map(&judged)
                .filter(|r| r.status != HealthStatus::Healthy)
                .map(|r| {
                    format!(
                        "{} {}/{} is {}: {}",
                        r.resource.kind, r.resource.namespace, r.resource.name, r.status, r.message
                    )
                })
                .collect();
            format!(
                "wave {} is not truly healthy: {}",
                w.wave,
                reasons.join("; ")
            )
        }
    };
    Waves {
        namespace: namespace.to_string(),
        name: name.to_string(),
        health,
        blocking_wave: blocking.map(|w| w.wave),
        message,
        waves,
        lint: None,
        valid_until: None,
    }
}

/// The ask for a resource wavegate has a dedicated check for, with the check's defaults.
fn ask_for(r: &ResourceRef) -> Option<Ask> {
    let resource = CheckKind::dedicated(&r.group, &r.kind)?;
    // Argo CD lists cluster-scoped resources with namespace "", which no dedicated kind is.
    let target = Target::new(resource, &r.namespace, &r.name).ok()?;
    Some(Ask::with_defaults(target))
}

/// Judge an object named by kind with the generic rules (no expressions), when the installer's
/// policy allows reading that kind.
async fn judge_kind(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    r: &ResourceRef,
) -> (Verdict, Option<Instant>) {
    let what = format!("{} {}/{}", r.kind, r.namespace, r.name);
    match Box::pin(evaluator.cache().plural_of(&r.group, &r.kind)).await {
        Ok(plural) => match generic_ask(policy, r, plural) {
            Ok(ask) => evaluator.judge_until(&ask).await,
            Err(verdict) => (verdict, None),
        },
        Err(e) => (Verdict::unknown(format!("{what}: {e}")), unsure()),
    }
}

/// The generic rules' ask for `r`, of a kind served as `plural`; or, when the installer's
/// policy refuses the kind, the verdict that says so.
fn generic_ask(policy: &CheckPolicy, r: &ResourceRef, plural: String) -> Result<Ask, Verdict> {
    // The health route's policy: a kind off `--generic-kinds` (pods, Secrets) is not read on
    // an Application's behalf either — its manifests are not the installer's.
    let resource = CheckKind::Generic {
        group: r.group.clone(),
        plural,
    };
    // Never Healthy without reading it: existence is evidence wavegate lacks (the same kinds
    // are off the shipped RBAC, whose access review refuses them alike).
    if let Err(why) = policy.allows_kind(&resource) {
        return Err(Verdict::unknown(format!(
            "{} {}/{}: not judged, and Argo CD recorded no health for it: {why}",
            r.kind, r.namespace, r.name
        )));
    }
    Ok(Ask {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        check: crate::ask::Check::defaults(resource),
    })
}

/// [`gate_verdict`], and until when it holds: a verdict wavegate wrote with a `validUntil`
/// turns Progressing once that second has passed, with no watch event.
fn gate_verdict_until(
    gate: Option<Decoded<WaveGate>>,
    r: &ResourceRef,
) -> (Verdict, Option<Instant>) {
    let until = gate
        .as_ref()
        .and_then(|g| g.as_ref().ok())
        .and_then(|g| g.status.as_ref()?.health.as_ref()?.valid_until);
    let expires = until.map(|until| {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        // Whole seconds, rounded down: at worst judged again up to a second early.
        Instant::now() + Duration::from_secs(until.saturating_sub(now).max(0) as u64)
    });
    (gate_verdict(gate, r), expires)
}

/// A WaveGate is judged by the status wavegate's controller wrote, read the same way as the
/// gate API and the Lua check read it (stale generation → Progressing).
fn gate_verdict(gate: Option<Decoded<WaveGate>>, r: &ResourceRef) -> Verdict {
    let Some(gate) = gate else {
        return Verdict::missing(format!(
            "WaveGate {}/{} does not exist",
            r.namespace, r.name
        ));
    };
    match gate {
        Ok(gate) => Gate::of(&gate).health,
        Err(e) => Verdict::unknown(format!(
            "WaveGate {}/{} cannot be read: {e}",
            r.namespace, r.name
        )),
    }
}

/// Judge every resource of `app` in its destination cluster and assemble the view. A
/// destination wavegate does not judge makes every resource Unknown with the reason: judging
/// them in another cluster would read other objects of the same names.
pub(crate) async fn view(
    clusters: &Clusters,
    policy: &CheckPolicy,
    app: &App,
    scope: Option<&ViewScope>,
) -> Waves {
    match clusters.of_application(app) {
        Ok(evaluator) => view_in(&evaluator, policy, app, scope).await,
        Err(why) => {
            let s = |p: &str| app.str_at(p).unwrap_or("");
            let (namespace, name) = (s("/metadata/namespace"), s("/metadata/name"));
            let health = crate::checks::application::check(namespace, name, Some(app.json()));
            let judged = managed_resources(app)
                .into_iter()
                .map(|(r, wave, _)| {
                    let verdict = Verdict::unknown(why.to_string());
                    (wave, JudgedResource::new(r, verdict, JudgedBy::Wavegate))
                })
                .collect();
            assemble(namespace, name, health, judged)
        }
    }
}

/// [`view`], with `wavegate lint`'s findings on the Application's live objects. Through Argo
/// CD's proxy (`scope`), lint reads only the objects the view may read: the viewed
/// application's own. The rules run in `runs`, within its budget.
pub(crate) async fn view_with_findings(
    clusters: &Clusters,
    policy: &CheckPolicy,
    runs: &crate::live_lint::Runs,
    app: &App,
    scope: Option<&ViewScope>,
) -> Waves {
    let mut waves = view(clusters, policy, app, scope).await;
    let (lint, until) = findings(clusters, policy, runs, app, scope).await;
    waves.lint = Some(lint);
    waves.valid_until = earliest(waves.valid_until, until);
    waves
}

/// `wavegate lint`'s findings on `app`'s live objects (see [`view_with_findings`]), and when
/// they may change with time alone.
pub(crate) async fn findings(
    clusters: &Clusters,
    policy: &CheckPolicy,
    runs: &crate::live_lint::Runs,
    app: &App,
    scope: Option<&ViewScope>,
) -> (LiveLint, Option<Instant>) {
    let mut unsure_lint = false;
    let lint = match clusters.of_application(app) {
        Ok(evaluator) => {
            let s = |p: &str| app.str_at(p).unwrap_or("");
            let scoped = scope.map(|scope| Scoped {
                scope,
                instance: instance_name(
                    s("/metadata/namespace"),
                    s("/metadata/name"),
                    &scope.argocd_namespace,
                ),
            });
            // Parsed once per version of the Application (`listing`).
            let listing = listing::of(app);
            let resources: std::borrow::Cow<'_, [crate::live_lint::Listed]> = match &scoped {
                None => std::borrow::Cow::Borrowed(listing.linted.as_slice()),
                Some(scoped) => {
                    // Owned, as before: a future borrowing from the listing is not `Send` for
                    // every lifetime the router asks of it.
                    let admitted = listing.linted.iter().cloned().map(|l| {
                        let evaluator = &evaluator;
                        async move {
                            let admitted = scoped.admits(evaluator, policy, &l.resource).await;
                            admitted.is_ok().then_some(l)
                        }
                    });
                    futures::stream::iter(admitted)
                        .buffered(JUDGED_AT_ONCE)
                        .filter_map(std::future::ready)
                        .collect::<Vec<_>>()
                        .await
                        .into()
                }
            };
            let read =
                crate::live_lint::read_input(&evaluator, policy, app, &resources, runs.kept());
            match read.await {
                Ok(input) => {
                    let viewed = crate::live_lint::Viewed {
                        namespace: s("/metadata/namespace").to_string(),
                        name: s("/metadata/name").to_string(),
                        project: scope.map(|scope| scope.project.clone()),
                    };
                    runs.lint(viewed, input, crate::live_lint::LintInput::lint)
                        .await
                }
                Err(not_read) => {
                    unsure_lint = true;
                    not_read
                }
            }
        }
        Err(why) => LiveLint {
            note: Some(format!("not linted: {why}")),
            ..LiveLint::default()
        },
    };
    // Rules that did not run at this poll (busy, out of time) may run at the next.
    let until = (unsure_lint || lint.passing).then(unsure).flatten();
    (lint, until)
}

/// Resources judged at once for one view. Most verdicts come from the watch cache or the
/// verdict cache; the first ask of a kind may wait for its watch to list, and a CockroachDB
/// check for its probes: those waits overlap instead of adding up.
pub(crate) const JUDGED_AT_ONCE: usize = 32;

/// [`view`] in one cluster.
async fn view_in(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    app: &App,
    scope: Option<&ViewScope>,
) -> Waves {
    let namespace = app.str_at("/metadata/namespace").unwrap_or("");
    let name = app.str_at("/metadata/name").unwrap_or("");
    let health = crate::checks::application::check(namespace, name, Some(app.json()));
    let scoped = scope.map(|scope| Scoped {
        scope,
        instance: instance_name(namespace, name, &scope.argocd_namespace),
    });
    // Parsed once per version of the Application (`listing`).
    let listing = listing::of(app);
    let listed: Vec<&Managed> = listing.managed.iter().collect();
    let judged = judge_listed(evaluator, policy, &listed, scoped.as_ref()).await;
    let valid_until = judged.iter().filter_map(|j| j.until).min();
    let judged = judged.into_iter().map(|j| (j.wave, j.resource)).collect();
    Waves {
        valid_until,
        ..assemble(namespace, name, health, judged)
    }
}

/// One listed resource judged for a view.
pub(crate) struct JudgedRow {
    pub wave: i64,
    pub resource: JudgedResource,
    /// When its verdict may change with time alone ([`Waves::valid_until`]).
    pub until: Option<Instant>,
    /// What it rests on, when what is built of it may be kept until that changes (`rows`);
    /// `None`: judged again at every view.
    pub rests: Option<Rests>,
}

/// What a judged resource rests on, besides its entry in the Application's listing.
pub(crate) enum Rests {
    /// Argo CD's record in that entry alone.
    Record,
    /// A kept verdict: its grounds, the object it is of (read by the judgement, so that a
    /// change of it lets the verdict go), and for a kind without a dedicated check the plural
    /// its ask was made with (discovery's, looked up again at every view).
    Kept {
        grounds: std::sync::Arc<crate::evaluate::Grounds>,
        object: crate::cache::Dep,
        plural: Option<String>,
    },
}

impl Rests {
    /// What a row with a kept verdict rests on, if that verdict was judged with the scripts of
    /// generation `scripts`: the one taken before the row's judge was named
    /// ([`judged_by_rules`]). A verdict judged with scripts that changed after that has a
    /// label (`judgedBy`) from the old scripts; its row is built again at the next answer
    /// instead of being kept with the wrong label.
    fn kept(
        ask: &Ask,
        grounds: std::sync::Arc<crate::evaluate::Grounds>,
        scripts: u64,
    ) -> Option<Rests> {
        if grounds.scripts() != scripts {
            return None;
        }
        let resource = ask.resource();
        let object = crate::cache::Dep::object(resource.kind(), &ask.namespace, &ask.name);
        let plural = match resource {
            CheckKind::Generic { plural, .. } => Some(plural),
            _ => None,
        };
        Some(Rests::Kept {
            grounds,
            object,
            plural,
        })
    }
}

/// Judge each of `listed`. All judgements together wait at most the evaluator's patience
/// (`--sync-wait` plus a probe timeout); a resource not judged by then is Unknown, saying so.
pub(crate) async fn judge_listed(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    listed: &[&Managed],
    scoped: Option<&Scoped<'_>>,
) -> Vec<JudgedRow> {
    let deadline = tokio::time::Instant::now() + evaluator.patience();
    // Before any judge is named: see `Rests::kept`.
    let scripts = evaluator.scripts();
    // First what needs no waiting: verdicts kept while what they read holds, and those of
    // Argo CD's own record; only the rest is judged, each its own future (perf, 2,000
    // resources after one change: a future, a timeout and the metrics per resource were a
    // quarter of the view's CPU, for verdicts already at hand).
    let mut judged: Vec<Option<JudgedRow>> =
        std::iter::repeat_with(|| None).take(listed.len()).collect();
    let plans = plan(evaluator, policy, listed, scoped, deadline).await;
    let asks: Vec<&Ask> = plans
        .iter()
        .filter_map(|p| match p {
            Plan::Ask(ask, _) => Some(ask),
            _ => None,
        })
        .collect();
    let mut kept = evaluator.kept_verdicts(&asks).into_iter();
    let mut rest = Vec::new();
    for (i, (plan, &(r, wave, reported))) in plans.into_iter().zip(listed).enumerate() {
        let (now, ask) = match plan {
            Plan::Done(verdict, by, until) => {
                let rests = (by == JudgedBy::Argocd).then_some(Rests::Record);
                (Some((verdict, by, until, rests)), None)
            }
            Plan::Ask(ask, by) => match kept.next().flatten() {
                Some((verdict, until, grounds)) => {
                    let rests = Rests::kept(&ask, grounds, scripts);
                    (Some((verdict, by, until, rests)), None)
                }
                None => (None, Some(ask)),
            },
            Plan::Judge => (None, None),
        };
        match now {
            Some((verdict, by, until, rests)) => {
                judged[i] = Some(JudgedRow {
                    wave: *wave,
                    resource: JudgedResource::new(r.clone(), verdict, by),
                    until,
                    rests,
                })
            }
            None => rest.push((i, r.clone(), *wave, reported.clone(), ask)),
        }
    }
    let (judging, asked): (Vec<_>, Vec<_>) = rest
        .into_iter()
        // Boxed: a judgement's state machine is kilobytes, and unboxed the stream copies each
        // one as it is queued (perf: FuturesUnordered::push's memcpy, ~8% of a 2,000-resource
        // view's CPU).
        .map(|(i, r, wave, reported, ask)| {
            let judging = judge_by(evaluator, policy, r, wave, reported, scoped, deadline);
            (Box::pin(async move { (i, judging.await) }), ask)
        })
        .unzip();
    let fresh: Vec<_> = futures::stream::iter(judging)
        .buffered(JUDGED_AT_ONCE)
        .collect()
        .await;
    for ((i, (wave, resource, until)), ask) in fresh.into_iter().zip(asked) {
        // Judged just now and kept: its grounds, if the kept verdict is this one.
        let rests = match (ask, until) {
            (Some(ask), None) => {
                let verdict = Verdict {
                    status: resource.status,
                    message: resource.message.clone(),
                    argo_status: resource.argo_status.clone(),
                };
                (evaluator.grounds_of(&ask, &verdict)).and_then(|g| Rests::kept(&ask, g, scripts))
            }
            _ => None,
        };
        judged[i] = Some(JudgedRow {
            wave,
            resource,
            until,
            rests,
        });
    }
    // Every slot is filled: each resource either served above or judged.
    judged.into_iter().flatten().collect()
}

/// How one resource of a view is judged, decided without waiting for anything.
enum Plan {
    /// Known already: Argo CD's record, or not judged by the installer's policy.
    Done(Verdict, JudgedBy, Option<Instant>),
    /// Its verdict is this ask's: served if kept ([`Evaluator::kept_verdicts`]), else judged.
    Ask(Ask, JudgedBy),
    /// Judged by [`judge_by`]: a read is needed first (scope admission, a pod, a gate), or its
    /// kind's plural is not known.
    Judge,
}

/// The [`Plan`] of each of `listed`: [`judge_scoped`]'s and [`judge_one`]'s choices, made
/// alike, where they need no read of an object. The plural of each generic kind is looked up
/// once (within `deadline`), not once per resource.
async fn plan(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    listed: &[&Managed],
    scoped: Option<&Scoped<'_>>,
    deadline: tokio::time::Instant,
) -> Vec<Plan> {
    let mut plurals: Vec<((&str, &str), Option<String>)> = Vec::new();
    let mut plans = Vec::with_capacity(listed.len());
    for &(r, _, reported) in listed {
        let ask = ask_for(r);
        let reads = ask.is_some() || is_gate(r) || is_pod(r) || reported.is_none();
        let plan = if scoped.is_some() && reads {
            Plan::Judge
        } else if let Some(ask) = ask {
            Plan::Ask(ask, JudgedBy::Wavegate)
        } else if is_pod(r) || is_gate(r) {
            Plan::Judge
        } else if let Some(v) = reported {
            Plan::Done(v.clone(), JudgedBy::Argocd, None)
        } else {
            let key = (r.group.as_str(), r.kind.as_str());
            let plural = match plurals.iter().find(|(k, _)| *k == key) {
                Some((_, plural)) => plural.clone(),
                None => {
                    let looked_up = evaluator.cache().plural_of(&r.group, &r.kind);
                    // A lookup that fails or waits too long: judged one by one, as before,
                    // and its verdict says why.
                    let plural = match tokio::time::timeout_at(deadline, Box::pin(looked_up)).await
                    {
                        Ok(Ok(plural)) => Some(plural),
                        _ => None,
                    };
                    plurals.push((key, plural.clone()));
                    plural
                }
            };
            match plural {
                None => Plan::Judge,
                Some(plural) => match generic_ask(policy, r, plural) {
                    Ok(ask) => Plan::Ask(ask, judged_by_rules(evaluator, r)),
                    Err(verdict) => Plan::Done(verdict, judged_by_rules(evaluator, r), None),
                },
            }
        };
        plans.push(plan);
    }
    plans
}

/// Who judges a resource of a kind without a dedicated check: Argo CD's script for its kind,
/// if there is one, else kstatus.
fn judged_by_rules(evaluator: &Evaluator, r: &ResourceRef) -> JudgedBy {
    let script = evaluator
        .argocd_lua()
        .and_then(|lua| lua.script_for(&r.group, &r.kind));
    match script {
        Some(script) => JudgedBy::ArgocdLua(script.key),
        None => JudgedBy::Kstatus,
    }
}

/// [`judge_one`], given up at `deadline`.
async fn judge_by(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    r: ResourceRef,
    wave: i64,
    reported: Option<Verdict>,
    scoped: Option<&Scoped<'_>>,
    deadline: tokio::time::Instant,
) -> (i64, JudgedResource, Option<Instant>) {
    let judged = judge_scoped(evaluator, policy, &r, reported, scoped);
    let (verdict, by, until) = match tokio::time::timeout_at(deadline, judged).await {
        Ok(judged) => judged,
        Err(_) => (
            Verdict::unknown(format!(
                "{} {}/{} was not judged within {} (--sync-wait and the probe timeout: its \
                     watch is still listing or its probes have not answered)",
                r.kind,
                r.namespace,
                r.name,
                humantime::format_duration(evaluator.patience())
            )),
            JudgedBy::Wavegate,
            Some(Instant::now() + RECHECK_UNSURE),
        ),
    };
    (wave, JudgedResource::new(r, verdict, by), until)
}

/// A verdict, who gave it, and until when it holds if nothing it read changes.
type Judged = (Verdict, JudgedBy, Option<Instant>);

/// The earlier of two expiries (`None`: never).
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Until when a verdict that rests on a failed read holds: it may pass with no watch event.
fn unsure() -> Option<Instant> {
    Some(Instant::now() + RECHECK_UNSURE)
}

/// [`judge_one`], through Argo CD's proxy when `scoped`: an object that is read to be judged
/// is first checked to be the viewed application's own.
async fn judge_scoped(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    r: &ResourceRef,
    reported: Option<Verdict>,
    scoped: Option<&Scoped<'_>>,
) -> Judged {
    let reads = ask_for(r).is_some() || is_gate(r) || is_pod(r) || reported.is_none();
    if let (Some(scoped), true) = (scoped, reads)
        && let Err(why) = Box::pin(scoped.admits(evaluator, policy, r)).await
    {
        let until = match why {
            NotAdmitted::Unreadable { .. } => unsure(),
            NotAdmitted::NotItsOwn { .. } => None,
        };
        return match reported {
            Some(v) => (v, JudgedBy::Argocd, until),
            None => (
                Verdict::unknown(why.to_string()),
                JudgedBy::OutOfScope,
                until,
            ),
        };
    }
    judge_one(evaluator, policy, r, reported).await
}

fn is_gate(r: &ResourceRef) -> bool {
    r.group == crate::gate::kind().group && r.kind == <WaveGate as kube::Resource>::kind(&())
}

fn is_pod(r: &ResourceRef) -> bool {
    r.group.is_empty() && r.kind == "Pod"
}

/// The verdict for one resource of an Application, and who gave it.
async fn judge_one(
    evaluator: &Evaluator,
    policy: &CheckPolicy,
    r: &ResourceRef,
    reported: Option<Verdict>,
) -> Judged {
    let gate_kind: GroupResource = crate::gate::kind();
    if let Some(ask) = ask_for(r) {
        let (verdict, until) = evaluator.judge_until(&ask).await;
        (verdict, JudgedBy::Wavegate, until)
    } else if is_pod(r) {
        // From the compact pod view every Service check reads too; never the whole pod.
        // (Boxed here and below: the reads' state machines are kilobytes, and would make every
        // resource's judgement as large, moved and allocated per resource of a view.)
        match Box::pin(evaluator.cache().pod(&r.namespace, &r.name)).await {
            Ok(pod) => (
                crate::checks::pod::check(&r.namespace, &r.name, pod.as_deref()),
                JudgedBy::Wavegate,
                None,
            ),
            Err(e) => (
                Verdict::unknown(format!("Pod {}/{}: {e}", r.namespace, r.name)),
                JudgedBy::Wavegate,
                unsure(),
            ),
        }
    } else if is_gate(r) {
        let gate = Box::pin(evaluator.cache().object_as::<WaveGate>(
            &gate_kind,
            &r.namespace,
            &r.name,
        ))
        .await;
        match gate {
            Ok(g) => {
                let (verdict, until) = gate_verdict_until(g, r);
                (verdict, JudgedBy::Wavegate, until)
            }
            Err(e) => (
                Verdict::unknown(format!("WaveGate {}/{}: {e}", r.namespace, r.name)),
                JudgedBy::Wavegate,
                unsure(),
            ),
        }
    } else if let Some(v) = reported {
        (v, JudgedBy::Argocd, None)
    } else {
        let by = judged_by_rules(evaluator, r);
        let (verdict, until) = judge_kind(evaluator, policy, r).await;
        (verdict, by, until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(kind: &str, name: &str, status: HealthStatus, msg: &str) -> JudgedResource {
        let resource = ResourceRef {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: "cicd".into(),
            name: name.into(),
        };
        JudgedResource::new(resource, Verdict::new(status, msg), JudgedBy::Wavegate)
    }

    /// A new judge must be placed: named by a word (and then in the schema's list) or a script.
    #[test]
    fn every_judge_is_a_word_the_schema_lists_or_a_script() {
        let all = [
            JudgedBy::Wavegate,
            JudgedBy::Kstatus,
            JudgedBy::Argocd,
            JudgedBy::OutOfScope,
            JudgedBy::ArgocdLua("apps/Deployment".into()),
        ];
        for judge in all {
            let wire = serde_json::to_value(&judge).unwrap();
            match judge {
                JudgedBy::ArgocdLua(_) => assert_eq!(wire, "argocd-lua:apps/Deployment"),
                JudgedBy::Wavegate
                | JudgedBy::Kstatus
                | JudgedBy::Argocd
                | JudgedBy::OutOfScope => {
                    assert!(JudgedBy::NAMED.contains(&judge), "{wire} is not in NAMED")
                }
            }
        }
    }

    #[test]
    fn first_unhealthy_wave_blocks_even_if_later_waves_look_fine() {
        let w = assemble(
            "argocd",
            "platform",
            Verdict::healthy(""),
            vec![
                (5, judged("Deployment", "app", HealthStatus::Healthy, "")),
                (
                    1,
                    judged(
                        "Service",
                        "forgejo",
                        HealthStatus::Progressing,
                        "matches no pods",
                    ),
                ),
                (0, judged("ConfigMap", "c", HealthStatus::Healthy, "")),
            ],
        );
        assert_eq!(
            w.waves.iter().map(|w| w.wave).collect::<Vec<_>>(),
            [0, 1, 5]
        );
        assert_eq!(w.blocking_wave, Some(1));
        assert!(
            w.message
                .contains("Service cicd/forgejo is Progressing: matches no pods")
        );
    }

    #[test]
    fn hooks_are_not_part_of_any_wave() {
        let app = serde_json::json!({"status": {"resources": [
            {"kind": "Job", "name": "wait", "namespace": "x", "hook": true, "syncWave": 2},
            {"kind": "Service", "name": "s", "namespace": "x", "version": "v1", "syncWave": -1}
        ]}});
        let rs = managed_resources(&App::of(app));
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].1, -1);
    }

    #[test]
    fn gate_with_stale_generation_is_not_trusted() {
        let gate = serde_json::json!({
            "apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
            "metadata": {"name": "g", "namespace": "cicd", "generation": 2},
            "spec": {"checks": [{"name": "web", "service": {"name": "web"}}]},
            "status": {"observedGeneration": 1, "health": {"status": "Healthy"}}});
        let r = ResourceRef {
            group: "wavegate.dev".into(),
            version: "v1alpha1".into(),
            kind: "WaveGate".into(),
            namespace: "cicd".into(),
            name: "g".into(),
        };
        assert_eq!(
            gate_verdict(Some(decoded(gate)), &r).status,
            HealthStatus::Progressing
        );
        assert_eq!(gate_verdict(None, &r).status, HealthStatus::Missing);
    }

    /// What the cache keeps of a WaveGate: parsed as the JSON it stores would be.
    fn decoded(gate: serde_json::Value) -> Decoded<WaveGate> {
        serde_json::from_value(gate)
            .map(std::sync::Arc::new)
            .map_err(std::sync::Arc::new)
    }

    #[test]
    fn a_gate_that_does_not_parse_is_unknown_and_says_why() {
        let gate = serde_json::json!({
            "apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
            "metadata": {"name": "g", "namespace": "cicd", "generation": 1},
            "spec": {"checks": "web"}});
        let r = ResourceRef {
            group: "wavegate.dev".into(),
            version: "v1alpha1".into(),
            kind: "WaveGate".into(),
            namespace: "cicd".into(),
            name: "g".into(),
        };
        let parse_error = serde_json::from_value::<WaveGate>(gate.clone()).unwrap_err();
        let v = gate_verdict(Some(decoded(gate)), &r);
        assert_eq!(v.status, HealthStatus::Unknown);
        assert_eq!(
            v.message,
            format!("WaveGate cicd/g cannot be read: {parse_error}")
        );
    }

    #[test]
    fn kinds_argo_cd_never_health_checks_follow_their_sync_status_never_their_data() {
        let app = serde_json::json!({"status": {"resources": [
            {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "cicd", "name": "next-app", "status": "Synced", "syncWave": 5},
            {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "cicd", "name": "later", "status": "OutOfSync", "syncWave": 6},
            {"group": "", "version": "v1", "kind": "Pod", "namespace": "cicd", "name": "bare", "status": "Synced", "syncWave": 6}]}});
        let listed = managed_resources(&App::of(app));
        let health = |name: &str| {
            listed
                .iter()
                .find(|(r, _, _)| r.name == name)
                .and_then(|(_, _, v)| v.as_ref().map(|v| v.status))
        };
        assert_eq!(health("next-app"), Some(HealthStatus::Healthy));
        assert_eq!(health("later"), Some(HealthStatus::Progressing));
        // A Pod has a health check in Argo CD: Synced says nothing about it being Ready.
        assert_eq!(health("bare"), None);
    }

    #[test]
    fn no_resources_is_not_reported_as_healthy_waves() {
        let w = assemble("argocd", "p", Verdict::progressing("x"), vec![]);
        assert_eq!(w.blocking_wave, None);
        assert!(w.message.contains("lists no resources"));
    }
}
