//! Requests that come through Argo CD's proxy extension see one application and what belongs to
//! it, nothing else.
//!
//! argocd-server authorizes a proxy-extension call for exactly one Application: it requires
//! `Argocd-Application-Name: <namespace>:<name>` and `Argocd-Project-Name`, checks that the user
//! may `get` that application and `invoke` the extension, checks that the project header matches
//! the application's project, and then forwards *any* subpath and query to the backend
//! (argo-cd `server/extension/extension.go`: `ValidateHeaders`, `authorize`, `CallExtension`).
//! So the path is the user's choice, and only the application header carries Argo CD's
//! decision. wavegate therefore serves, on such a request:
//!
//! - the application itself and its waves;
//! - the objects in its `status.resources` (what Argo CD shows in its resource tree), including
//!   child Applications and their waves (app-of-apps) and WaveGates among them — but only
//!   those that really are the application's: `status.resources` comes from the manifests in
//!   its Git repository, which may list any object (another team's Service, an Application of
//!   another project). So a listed object is served only while its own tracking names this
//!   application — under argocd-cm's tracking method (`--tracking-method`), the annotation
//!   `argocd.argoproj.io/tracking-id` whose whole id names the object, or with `label` the label
//!   `app.kubernetes.io/instance` (see `views::Tracking`) — and a child Application only while
//!   it is also in the project Argo CD authorized the user for. The waves view and the timeline
//!   apply the same rule to each object they would read (`waves::ViewScope`);
//!
//! and refuses everything else with 403. Routes are denied unless listed in [`AppScope::admit`],
//! so a new route is closed behind the proxy until someone decides what it may show there.
//!
//! A request without these headers did not come through the proxy (argocd-server always sets
//! them); it is a direct call, which the bearer token guards (see `token`).

use super::error::Reading;
use super::{ApiError, AppState};
use crate::app_status::{Lists, text};
use crate::clusters::{Cluster, ClusterError};
use crate::evaluate::Evaluator;
use crate::json::At;
use crate::resource::{self, CheckKind};
use crate::views::{TrackingMethod, managing_app};
use crate::waves::{ViewScope, instance_name};
use axum::extract::{FromRequestParts, MatchedPath, Path, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) const APPLICATION_HEADER: &str = "argocd-application-name";
pub(crate) const PROJECT_HEADER: &str = "argocd-project-name";
/// Set by argocd-server on every proxied request (its own namespace).
const NAMESPACE_HEADER: &str = "argocd-namespace";

/// What one proxied request may see: the application Argo CD authorized, and its resources.
#[derive(Clone)]
pub(crate) struct AppScope {
    pub namespace: String,
    pub name: String,
    /// The project Argo CD authorized the user for (and the application's own).
    project: String,
    /// How Argo CD's tracking names this application (its `InstanceName`).
    instance: String,
    /// argocd-cm's tracking method, and Argo CD's namespace.
    method: TrackingMethod,
    argocd_namespace: String,
    /// Which kinds generic checks may name: checked before anything is read.
    policy: Arc<crate::policy::CheckPolicy>,
    /// Its `status.resources`, hooks included (they are the application's too): shared with
    /// the cache, not copied per request.
    lists: Arc<Lists>,
    /// Where Applications are read (the home cluster).
    home: Option<Arc<Evaluator>>,
    /// Where its resources live: the object routes without `{cluster}` read this cluster
    /// (`cluster::InCluster`), since the same namespace and name in another cluster is
    /// another object.
    destination: Result<Arc<Cluster>, ClusterError>,
}

/// `(namespace, name, project)` from Argo CD's headers, `None` when the request carries none of
/// them (a direct call).
pub(crate) fn proxied(headers: &HeaderMap) -> Result<Option<(String, String, String)>, ApiError> {
    let get = |h: &str| headers.get(h).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let app = get(APPLICATION_HEADER);
    let project = get(PROJECT_HEADER);
    if app.is_none() && project.is_none() && get(NAMESPACE_HEADER).is_none() {
        return Ok(None);
    }
    let app = app.ok_or_else(|| {
        ApiError::BadRequest(
            "a request through Argo CD's proxy needs Argocd-Application-Name: <namespace>:<name>"
                .into(),
        )
    })?;
    let (namespace, name) = match app.split(':').collect::<Vec<_>>()[..] {
        [ns, name] => (ns, name),
        _ => {
            return Err(ApiError::BadRequest(format!(
                "Argocd-Application-Name {app:?}: expected <namespace>:<name>"
            )));
        }
    };
    resource::validate_namespace(namespace)?;
    resource::validate_name(name)?;
    let project = project.ok_or_else(|| {
        ApiError::BadRequest("a request through Argo CD's proxy needs Argocd-Project-Name".into())
    })?;
    resource::validate_name(project).map_err(|_| {
        ApiError::BadRequest(format!(
            "Argocd-Project-Name {project:?} is not a project name"
        ))
    })?;
    Ok(Some((
        namespace.to_string(),
        name.to_string(),
        project.to_string(),
    )))
}

impl AppScope {
    /// Read the application from the cache and check the project Argo CD named.
    async fn load(
        state: &AppState,
        namespace: &str,
        name: &str,
        project: &str,
    ) -> Result<AppScope, ApiError> {
        let what = format!("Application {namespace}/{name}");
        let app = state
            .clusters
            .home()
            .cache
            .application(namespace, name)
            .await
            .map_err(|e| ApiError::reading(e, Reading::Scope(&what)))?
            .ok_or_else(|| {
                ApiError::Forbidden(format!(
                    "{what}, which Argo CD authorized this request for, does not exist"
                ))
            })?;
        // Argo CD's `Spec.GetProject()`: an empty project is "default".
        let actual = app.text_at("/spec/project").unwrap_or("default");
        if actual != project {
            return Err(ApiError::Forbidden(format!(
                "{what} belongs to project {actual}, not {project} as Argocd-Project-Name says"
            )));
        }
        Ok(AppScope {
            namespace: namespace.to_string(),
            name: name.to_string(),
            project: project.to_string(),
            instance: instance_name(namespace, name, &state.argocd_namespace),
            method: state.tracking_method,
            argocd_namespace: state.argocd_namespace.clone(),
            policy: state.policy.clone(),
            lists: app.shared_lists(),
            home: Some(state.clusters.home().evaluator.clone()),
            destination: state.clusters.destination_of(&app),
        })
    }

    /// Whether an object of `group`/`kind` is tracked as this application's.
    fn manages(&self, object: &Value, group: &str, kind: &str) -> bool {
        managing_app(object, group, kind, self.method) == Some(self.instance.as_str())
    }

    /// What the waves view and the timeline of an application in this scope may read.
    pub(crate) fn view_scope(&self) -> ViewScope {
        ViewScope {
            project: self.project.clone(),
            argocd_namespace: self.argocd_namespace.clone(),
            method: self.method,
        }
    }

    /// The cluster its resources are read in, or 403 when wavegate does not judge it.
    pub(crate) fn destination(&self) -> Result<Arc<Cluster>, ApiError> {
        self.destination.clone().map_err(|e| match e {
            ClusterError::JudgedElsewhere { cluster, why } => {
                ApiError::JudgedElsewhere { cluster, why }
            }
            e => ApiError::Forbidden(format!(
                "Application {}/{} deploys to a cluster wavegate does not judge ({e}), so its \
                 resources cannot be shown",
                self.namespace, self.name
            )),
        })
    }

    fn owns(&self, group: &str, kind: &str, namespace: &str, name: &str) -> bool {
        self.lists.resources.iter().any(|r| {
            text(&r.group) == group
                && text(&r.kind) == kind
                && text(&r.namespace) == namespace
                && text(&r.name) == name
        })
    }

    /// The application itself, or one of its child Applications: listed in its resources,
    /// tracked as its own, and in the project Argo CD authorized (`app` is the live object).
    pub(crate) fn allows_application(&self, app: &Value) -> bool {
        let s = |p: &str| app.str_at(p).unwrap_or("");
        let (namespace, name) = (s("/metadata/namespace"), s("/metadata/name"));
        if namespace == self.namespace && name == self.name {
            return true;
        }
        let project = Some(s("/spec/project")).filter(|p| !p.is_empty());
        let (group, kind) = CheckKind::APPLICATION.group_kind();
        self.owns(group, kind, namespace, name)
            && self.manages(app, group, kind)
            && project.unwrap_or("default") == self.project
    }

    /// [`AppScope::allows_application`] for an Application named by the request.
    pub(crate) async fn allows_application_named(&self, namespace: &str, name: &str) -> bool {
        if namespace == self.namespace && name == self.name {
            return true;
        }
        let (group, kind) = CheckKind::APPLICATION.group_kind();
        if !self.owns(group, kind, namespace, name) {
            return false;
        }
        let Some(home) = &self.home else { return false };
        match home
            .cache()
            .object(&CheckKind::APPLICATION.kind(), namespace, name)
            .await
        {
            Ok(Some(app)) => self.allows_application(&app),
            _ => false,
        }
    }

    /// A WaveGate listed in the application's resources and tracked as its own.
    pub(crate) async fn allows_gate(&self, namespace: &str, name: &str) -> bool {
        if !self.owns("wavegate.dev", "WaveGate", namespace, name) {
            return false;
        }
        self.live_manages(&crate::gate::kind(), "WaveGate", namespace, name)
            .await
    }

    /// Whether the live object in the destination is tracked as this application's (absent
    /// or unreadable: no, since nothing then vouches for it).
    async fn live_manages(
        &self,
        kind: &crate::resource::GroupResource,
        kind_name: &str,
        namespace: &str,
        name: &str,
    ) -> bool {
        let Ok(destination) = &self.destination else {
            return false;
        };
        match destination
            .evaluator
            .cache()
            .object(kind, namespace, name)
            .await
        {
            Ok(Some(object)) => self.manages(&object, &kind.group, kind_name),
            _ => false,
        }
    }

    /// Whether an object named the kubectl way belongs to the application: listed in its
    /// resources and tracked as its own. A generic kind is matched by asking discovery for
    /// the plural of each resource's kind (cached), only for resources whose group, namespace
    /// and name already match.
    async fn allows_object(&self, resource: &CheckKind, namespace: &str, name: &str) -> bool {
        let Ok(destination) = &self.destination else {
            return false;
        };
        let cache = destination.evaluator.cache();
        match resource {
            r if *r == CheckKind::APPLICATION => {
                self.allows_application_named(namespace, name).await
            }
            r if *r == CheckKind::SERVICE => {
                // Read from the compact Service view (which keeps the tracking), never a
                // full-object watch of Services.
                self.owns("", "Service", namespace, name)
                    && matches!(
                        cache.service(namespace, name).await,
                        Ok(Some(s)) if s.tracking.app(self.method) == Some(self.instance.as_str())
                    )
            }
            CheckKind::Generic { group, plural } => {
                for r in (self.lists.resources.iter()).filter(|r| {
                    text(&r.group) == group
                        && text(&r.namespace) == namespace
                        && text(&r.name) == name
                }) {
                    let kind = text(&r.kind);
                    let found = cache.plural_of(group, kind).await;
                    if found.as_deref() == Ok(plural.as_str()) {
                        return self
                            .live_manages(&resource.kind(), kind, namespace, name)
                            .await;
                    }
                }
                false
            }
            // Every other dedicated kind is read whole from the cache (only Services are kept
            // in a compact view), so its tracking is read like a generic kind's.
            CheckKind::Dedicated(_) => {
                let (group, kind) = resource.group_kind();
                self.owns(group, kind, namespace, name)
                    && self
                        .live_manages(&resource.kind(), kind, namespace, name)
                        .await
            }
        }
    }

    pub(crate) fn refuse(&self, what: &str) -> ApiError {
        ApiError::Forbidden(format!(
            "Argo CD authorized this request for Application {}/{} only, and {what} is not one \
             of its resources",
            self.namespace, self.name
        ))
    }

    /// Whether the matched route, with these path parameters, stays inside the scope.
    async fn admit(&self, route: &str, params: &HashMap<String, String>) -> Result<(), ApiError> {
        let p = |k: &str| params.get(k).map(String::as_str).unwrap_or("");
        if route.starts_with("/api/v1/gates") || route.starts_with("/api/v1/health/") {
            // Objects read in the destination: none when wavegate does not judge it.
            self.destination()?;
        }
        match route {
            // Lists are filtered by their handlers, and each part of a batch of views is
            // admitted by it as its own route would be (`batch`); the header's own application
            // is in scope.
            "/api/v1/waves"
            | "/api/v1/applications"
            | "/api/v1/gates"
            | "/api/v1/applications/waves" => Ok(()),
            "/api/v1/applications/{namespace}/{name}/waves" => {
                if self
                    .allows_application_named(p("namespace"), p("name"))
                    .await
                {
                    Ok(())
                } else {
                    Err(self.refuse(&format!("Application {}/{}", p("namespace"), p("name"))))
                }
            }
            "/api/v1/gates/{namespace}/{name}" | "/api/v1/gates/{namespace}/{name}/wait" => {
                if self.allows_gate(p("namespace"), p("name")).await {
                    Ok(())
                } else {
                    Err(self.refuse(&format!("WaveGate {}/{}", p("namespace"), p("name"))))
                }
            }
            "/api/v1/health/{resource}/{namespace}/{name}" => {
                let resource = CheckKind::parse(p("resource"))
                    .map_err(|e| ApiError::NotFound(e.to_string()))?;
                // The installer's policy first, as the handler applies it: a kind off
                // `--generic-kinds` is refused before anything is read (or watched) to find
                // out whether the object is the application's.
                self.policy
                    .allows_kind(&resource)
                    .map_err(|e| ApiError::Forbidden(e.to_string()))?;
                if self
                    .allows_object(&resource, p("namespace"), p("name"))
                    .await
                {
                    Ok(())
                } else {
                    Err(self.refuse(&format!("{resource} {}/{}", p("namespace"), p("name"))))
                }
            }
            other => Err(ApiError::Forbidden(format!(
                "{other} is not served through Argo CD's proxy extension"
            ))),
        }
    }
}

/// Middleware on the whole server: a request that carries any of Argo CD's proxy headers came
/// through argocd-server for one application, and reaches only the scoped API (`/api/*`,
/// checked by [`authorize`]); the dashboard, the probes and `/metrics` are not for it.
/// argocd-server forwards any subpath with the bearer token, so the token alone cannot tell.
pub(crate) async fn api_only(req: Request, next: Next) -> Result<Response, ApiError> {
    let h = req.headers();
    let through_proxy = [APPLICATION_HEADER, PROJECT_HEADER, NAMESPACE_HEADER]
        .iter()
        .any(|k| h.contains_key(*k));
    if through_proxy && !req.uri().path().starts_with("/api/") {
        return Err(ApiError::Forbidden(format!(
            "{} is not served through Argo CD's proxy extension",
            req.uri().path()
        )));
    }
    Ok(next.run(req).await)
}

/// Middleware on every API route: direct calls pass; proxied calls are scoped to their
/// application, and the scope is handed to the handler (lists filter by it).
pub(crate) async fn authorize(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some((namespace, name, project)) = proxied(req.headers())? else {
        return Ok(next.run(req).await);
    };
    // Gate waits are outside `--request-timeout`, but establishing their scope is not.
    let timeout = state.limits.args.request_timeout;
    let scope = tokio::time::timeout(timeout, AppScope::load(&state, &namespace, &name, &project))
        .await
        .map_err(|_| {
            ApiError::Overloaded(format!(
                "reading Application {namespace}/{name} to scope the request took longer than {} \
                 (--request-timeout)",
                humantime::format_duration(timeout)
            ))
        })??;
    let (mut parts, body) = req.into_parts();
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let params = if route.contains('{') {
        Path::<HashMap<String, String>>::from_request_parts(&mut parts, &state)
            .await?
            .0
    } else {
        HashMap::new()
    };
    scope.admit(&route, &params).await.inspect_err(|e| {
        if matches!(e, ApiError::Forbidden(_)) {
            state.metrics.record_refusal("out_of_scope");
        }
    })?;
    parts.extensions.insert(Arc::new(scope));
    Ok(next.run(Request::from_parts(parts, body)).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app_status::App;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn direct_calls_carry_no_argo_cd_headers() {
        assert!(proxied(&HeaderMap::new()).unwrap().is_none());
    }

    #[test]
    fn malformed_argo_cd_headers_are_a_400_not_a_direct_call() {
        for h in [
            headers(&[("argocd-namespace", "argocd")]),
            headers(&[("argocd-project-name", "default")]),
            headers(&[("argocd-application-name", "argocd:platform")]),
            headers(&[
                ("argocd-application-name", "argocd:plat:form"),
                ("argocd-project-name", "default"),
            ]),
            headers(&[
                ("argocd-application-name", "Argocd:platform"),
                ("argocd-project-name", "default"),
            ]),
            headers(&[
                ("argocd-application-name", "argocd:platform"),
                ("argocd-project-name", "../x"),
            ]),
        ] {
            let err = proxied(&h).unwrap_err();
            assert!(
                matches!(err, ApiError::BadRequest(_) | ApiError::Input(_)),
                "{h:?}: {err:?}"
            );
        }
        let ok = headers(&[
            ("argocd-application-name", "argocd:platform"),
            ("argocd-project-name", "default"),
        ]);
        assert_eq!(
            proxied(&ok).unwrap(),
            Some(("argocd".into(), "platform".into(), "default".into()))
        );
    }

    fn scope_of(app: &Value) -> AppScope {
        AppScope {
            namespace: "argocd".into(),
            name: "platform".into(),
            project: "platform-team".into(),
            instance: instance_name("argocd", "platform", "argocd"),
            method: TrackingMethod::Annotation,
            argocd_namespace: "argocd".into(),
            policy: Arc::default(),
            lists: App::of(app.clone()).shared_lists(),
            home: None,
            destination: Err(ClusterError::UnknownName("x".into())),
        }
    }

    fn application(name: &str, project: &str, tracking: Option<&str>) -> Value {
        let mut app = serde_json::json!({
            "metadata": {"namespace": "argocd", "name": name},
            "spec": {"project": project}
        });
        if let Some(id) = tracking {
            app["metadata"]["annotations"] =
                serde_json::json!({"argocd.argoproj.io/tracking-id": id});
        }
        app
    }

    #[test]
    fn scope_is_the_app_and_its_own_child_apps_in_its_project() {
        let app = serde_json::json!({"status": {"resources": [
            {"group": "wavegate.dev", "kind": "WaveGate", "namespace": "cicd", "name": "ready"},
            {"group": "argoproj.io", "kind": "Application", "namespace": "argocd", "name": "child"},
            {"group": "argoproj.io", "kind": "Application", "namespace": "argocd", "name": "payroll"},
            {"group": "argoproj.io", "kind": "Application", "namespace": "argocd", "name": "labelled"}
        ]}});
        let scope = scope_of(&app);
        let id = "platform:argoproj.io/Application:argocd/child";
        assert!(scope.allows_application(&application("platform", "platform-team", None)));
        assert!(scope.allows_application(&application("child", "platform-team", Some(id))));
        // Listed by the app's Git, but managed by another application.
        let foreign = "finance:argoproj.io/Application:argocd/payroll";
        assert!(!scope.allows_application(&application("payroll", "finance", Some(foreign))));
        // Tracked as this app's, but in a project the user was not authorized for.
        let id = "platform:argoproj.io/Application:argocd/payroll";
        assert!(!scope.allows_application(&application("payroll", "finance", Some(id))));
        // Not listed at all.
        let id = "platform:argoproj.io/Application:argocd/other";
        assert!(!scope.allows_application(&application("other", "platform-team", Some(id))));
        // An id copied onto another object names that other object, not this one (Argo CD's
        // `isSelfReferencedObj`).
        let copied = "platform:argoproj.io/Application:argocd/child";
        assert!(!scope.allows_application(&application("payroll", "platform-team", Some(copied))));
        let wrong_kind = "platform:argoproj.io/AppProject:argocd/payroll";
        assert!(!scope.allows_application(&application(
            "payroll",
            "platform-team",
            Some(wrong_kind)
        )));
        // The instance label, which Git (or a Helm chart) can put on any object, counts only
        // under argocd-cm's `label` tracking; Argo CD 3.x's default is the annotation.
        let mut labelled = application("labelled", "platform-team", None);
        labelled["metadata"]["labels"] =
            serde_json::json!({"app.kubernetes.io/instance": "platform"});
        assert!(!scope.allows_application(&labelled));
        let by_label = AppScope {
            method: TrackingMethod::Label,
            ..scope.clone()
        };
        assert!(by_label.allows_application(&labelled));
        // And under `label`, the annotation alone does not count.
        let id = "platform:argoproj.io/Application:argocd/child";
        assert!(!by_label.allows_application(&application("child", "platform-team", Some(id))));
        let both = AppScope {
            method: TrackingMethod::AnnotationAndLabel,
            ..scope.clone()
        };
        assert!(
            !both.allows_application(&labelled),
            "GetAppName reads the annotation only"
        );
        assert!(both.allows_application(&application("child", "platform-team", Some(id))));
    }

    #[test]
    fn instance_names_follow_argo_cd() {
        assert_eq!(instance_name("argocd", "web", "argocd"), "web");
        assert_eq!(instance_name("team-a", "web", "argocd"), "team-a_web");
    }
}
