use super::cluster::InCluster;
use super::error::Reading;
use super::extract::{ApiPath, ApiQuery};
use super::scope::AppScope;
use super::{ApiError, AppState};
use crate::app_status::App;
use crate::ask::Ask;
use crate::cache::CacheError;
use crate::clusters::Clusters;
use crate::gate::view as gate_view;
use crate::health::Verdict;
use crate::resource::{CheckKind, Target};
use crate::timeline::{self, WavesWithTimeline};
use crate::waves;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Serialize;
use std::sync::{Arc, Weak};

/// The proxy scope, when the request came through Argo CD (see `scope`).
type Scope = Option<Extension<Arc<AppScope>>>;

/// `GET /api/v1/applications`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApplicationList {
    pub applications: Vec<ApplicationSummary>,
}

/// One Application of the list: wavegate's verdict of it and its first blocking wave (its
/// waves endpoint has the rest).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApplicationSummary {
    pub namespace: String,
    pub name: String,
    pub health: Verdict,
    pub blocking_wave: Option<i64>,
    /// With shards, for an Application whose destination another replica judges: that
    /// replica's pod, when a live holder of its shard's Lease names one. Such an Application is
    /// not judged here (its health is Unknown, saying so); its waves view is that replica's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged_by: Option<String>,
}

impl ApplicationSummary {
    fn of(w: waves::Waves) -> Self {
        ApplicationSummary {
            namespace: w.namespace,
            name: w.name,
            health: w.health,
            blocking_wave: w.blocking_wave,
            judged_by: None,
        }
    }

    /// `app`, whose destination `cluster` another replica judges (`why`).
    fn elsewhere(state: &AppState, app: &serde_json::Value, cluster: &str, why: &str) -> Self {
        let field = |k: &str| {
            app.pointer(&format!("/metadata/{k}"))
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let judged_by = state
            .clusters
            .sharding()
            .and_then(|s| match s.owner(cluster)? {
                crate::clusters::Owner::Replica { shard } => {
                    let holder = s.holder(shard)?;
                    crate::clusters::holder_pod(&holder)
                        .ok()
                        .map(str::to_string)
                }
                _ => None,
            });
        ApplicationSummary {
            namespace: field("namespace"),
            name: field("name"),
            health: Verdict::unknown(format!("not judged by this wavegate replica: {why}")),
            blocking_wave: None,
            judged_by,
        }
    }
}

/// `GET /api/v1/gates`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GateList {
    pub gates: Vec<gate_view::Gate>,
}

/// An object's path parameters (a `{cluster}` beside them is [`InCluster`]'s).
#[derive(serde::Deserialize)]
pub(crate) struct ObjectPath {
    resource: String,
    namespace: String,
    name: String,
}

pub(crate) async fn health(
    State(state): State<AppState>,
    cluster: InCluster,
    ApiPath(ObjectPath {
        resource,
        namespace,
        name,
    }): ApiPath<ObjectPath>,
    ApiQuery(params): ApiQuery,
) -> Result<Json<Verdict>, ApiError> {
    let resource = CheckKind::parse(&resource).map_err(|e| ApiError::NotFound(e.to_string()))?;
    let evaluator = cluster.0.evaluator.clone();
    // Before any discovery: a kind off the allow-list costs the API server nothing.
    state.policy.allows_kind(&resource).map_err(|e| {
        state.metrics.record_refusal("kind_not_allowed");
        ApiError::Forbidden(e.to_string())
    })?;
    // Bad parameters (an expression over its bounds) are refused before any discovery too.
    let ask = Ask::from_params(Target::new(resource.clone(), &namespace, &name)?, &params)?;
    if let CheckKind::Generic { .. } = &resource {
        // An unknown kind is the caller's mistake (404), unlike a known CRD that is not
        // installed yet, which is a verdict (Unknown) because a later wave may install it.
        // Discovery that fails is wavegate's problem, not the caller's.
        evaluator
            .cache()
            .resolve(&resource.kind())
            .await
            .map_err(|e| ApiError::reading(e, Reading::Kind(&resource.to_string())))?;
    }
    cluster
        .unless_stopped(evaluator.judge(&ask))
        .await
        .map(Json)
}

pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// Ready once every watch the process requires (WaveGates, see `Cache::require`) has listed
/// and is not relisting after an error; watches started for callers' reads never count.
///
/// Only the home cluster decides: a remote cluster that is down is reported here (and at
/// `/api/v1/clusters`) but does not make the pod unready, since every replica would be
/// unready alike and the API would go dark for the clusters that work. Its own verdicts are
/// Unknown meanwhile, as Argo CD keeps working with one destination down.
///
/// Counts only, never names or error text: `/readyz` needs no token, so cluster names, servers,
/// kinds and errors stay behind the token at `/api/v1/clusters` (and in the log).
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let remotes = state.clusters.remotes();
    let ready = remotes
        .values()
        .filter(|c| c.cache.readiness().is_ok())
        .count();
    let refused = state.clusters.refused().len();
    let remote = if remotes.is_empty() && refused == 0 {
        String::new()
    } else {
        format!(
            "remote clusters (not counted): {ready} ready, {} not ready, {refused} refused \
             (details: GET /api/v1/clusters)\n",
            remotes.len() - ready
        )
    };
    match state.clusters.home().cache.readiness() {
        Ok(n) => (
            StatusCode::OK,
            format!("ok: {n} required watches synced\n{remote}"),
        )
            .into_response(),
        Err(problems) => {
            tracing::debug!(?problems, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "not ready: {} required watches not synced (details: wavegate's log at \
                     debug level)\n{remote}",
                    problems.len()
                ),
            )
                .into_response()
        }
    }
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

pub(crate) async fn dashboard() -> impl IntoResponse {
    (
        [super::headers::dashboard_csp()],
        Html(super::headers::DASHBOARD.as_str()),
    )
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::NotFound("no such endpoint; see docs/openapi.yaml".into())
}

/// Bearer-token check for `/api/*` (see `token`).
pub(crate) async fn require_token(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(token) = &state.token {
        token
            .verify(req.headers().get(header::AUTHORIZATION))
            .inspect_err(|e| {
                if matches!(e, ApiError::Unauthorized) {
                    state.metrics.record_refusal("unauthorized");
                }
            })?;
    }
    Ok(next.run(req).await)
}

/// Argo CD Applications with wavegate's own verdict and first blocking wave. When Argo CD's CRD
/// is not installed there are no applications to show, which is not an error. Through Argo CD's
/// proxy: the authorized application and its child applications only. Unscoped (the
/// dashboard), the answer is kept until anything in any cluster changes or a verdict expires.
pub(crate) async fn applications(
    State(state): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let known = headers.get(header::IF_NONE_MATCH);
    let clusters = state.clusters.all();
    let stamp_of = |_: &ViewAnswer| {
        Clusters::vouched(clusters.iter().map(|c| &**c))
            .then(|| state.clusters.stamp(clusters.iter().map(|c| &**c)))
    };
    let now = std::time::Instant::now();
    if scope.is_none()
        && let Some(kept) = state.listed.get_by(&(), stamp_of, now)
    {
        return Ok(kept.respond(None, known));
    }
    // One whole list judged at a time, as for a view (see `waves_of`).
    let _turn = match scope {
        None => Some(state.listed.turn(&()).await),
        Some(_) => None,
    };
    let asked = now;
    let now = std::time::Instant::now();
    if scope.is_none()
        && let Some(kept) = (state.listed.get_by(&(), stamp_of, now))
            .or_else(|| state.listed.read_since(&(), asked, now))
    {
        return Ok(kept.respond(None, known));
    }
    // Taken before any read: a change while judging leaves what is kept stale, never newer.
    let stamp = state.clusters.stamp(clusters.iter().map(|c| &**c));
    let read_at = std::time::Instant::now();
    let mut apps = match state.clusters.home().cache.applications(None).await {
        Ok(apps) => apps,
        Err(CacheError::NotInstalled(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    if let Some(Extension(scope)) = &scope {
        apps.retain(|app| scope.allows_application(app));
    }
    let view_scope = scope.as_ref().map(|Extension(s)| s.view_scope());
    // With shards, an Application another replica judges is named with that replica, not
    // judged here resource by resource into a wall of Unknown.
    let elsewhere = |app: &serde_json::Value| match state.clusters.destination_of(app) {
        Err(crate::clusters::ClusterError::JudgedElsewhere { cluster, why }) => {
            Some(ApplicationSummary::elsewhere(&state, app, &cluster, &why))
        }
        _ => None,
    };
    // A few at a time, in order: each view judges every resource of its application.
    let views: Vec<_> = apps
        .iter()
        .map(|app| async {
            match elsewhere(app) {
                Some(summary) => (summary, None),
                None => {
                    let w =
                        waves::view(&state.clusters, &state.policy, app, view_scope.as_ref()).await;
                    let valid_until = w.valid_until;
                    (ApplicationSummary::of(w), valid_until)
                }
            }
        })
        .collect();
    let views: Vec<(ApplicationSummary, _)> = futures::stream::iter(views)
        .buffered(state.limits.applications_concurrency())
        .collect()
        .await;
    let valid_until = views
        .iter()
        .fold(None, |at, (_, until)| waves::earliest(at, *until));
    let listed = ApplicationList {
        applications: views.into_iter().map(|(summary, _)| summary).collect(),
    };
    let answer = ViewAnswer::whole(serde_json::to_vec(&listed).map_err(internal)?, &clusters);
    let valid_until = waves::earliest(valid_until, kept_at_most(&clusters, now));
    let answer = Arc::new(answer);
    if scope.is_none() {
        state
            .listed
            .put((), (stamp, read_at), valid_until, answer.clone());
    }
    Ok(answer.respond(None, known))
}

/// Which view an answer is: the Application, and through Argo CD's proxy the scope it was
/// judged in (what a scoped view shows depends on it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ViewKey {
    namespace: String,
    name: String,
    scope: Option<(String, String, crate::views::TrackingMethod)>,
}

impl ViewKey {
    pub(crate) fn of(namespace: &str, name: &str, scope: Option<&waves::ViewScope>) -> ViewKey {
        ViewKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
            scope: scope.map(|s| (s.project.clone(), s.argocd_namespace.clone(), s.method)),
        }
    }
}

/// A serialised answer, split where the time it is served goes (`timeline.now`), and the
/// clusters whose caches it read.
pub(crate) struct ViewAnswer {
    /// Shared with every response that serves it: a poll sends these bytes, it does not copy
    /// them (a megabyte per poll of a 2,000-resource view, freed again after each).
    head: Bytes,
    tail: Bytes,
    /// Not held: a cache stops its watches only once dropped, and kept answers are dropped
    /// by nothing but a newer answer of their view, so a cluster replaced or removed by its
    /// source would go on being watched for as long as a view that read it stays kept. One
    /// gone is no longer vouched for, and the view is judged again.
    read: Vec<Weak<crate::clusters::Cluster>>,
    /// The rows it was assembled from, for the next answer of its view (`rows`).
    rows: Option<Arc<super::rows::Rows>>,
    /// When one of its verdicts may change by itself, as it is kept until (see `kept`): served
    /// at that time or later it would say what was true before.
    valid_until: Option<std::time::Instant>,
    /// Names the answer but for the time it is served: a poll that sends it back in
    /// `If-None-Match` and finds it unchanged is answered 304, with the time in
    /// [`WAVEGATE_NOW`] only (the UIs poll megabytes that rarely change).
    etag: HeaderValue,
}

/// The time a waves answer is served at (`timeline.now`), also on a 304 that has no body.
pub(crate) const WAVEGATE_NOW: &str = "wavegate-now";

/// Stands for `timeline.now` in a kept answer: a string no serialised answer holds otherwise.
/// Strings of the answer come from objects and Argo CD's records (a health message is copied
/// as Argo CD recorded it), so a fixed marker could be written into one and move the splice;
/// this one carries 128 random bits drawn once per process and is never served.
static NOW: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    use std::hash::{BuildHasher, RandomState};
    let keys = RandomState::new();
    format!(
        "\u{1}wavegate-now-{:016x}{:016x}\u{1}",
        keys.hash_one(1u8),
        keys.hash_one(2u8)
    )
});

impl ViewAnswer {
    fn whole(body: Vec<u8>, read: &[Arc<crate::clusters::Cluster>]) -> ViewAnswer {
        ViewAnswer::split(body, Vec::new(), read)
    }

    fn split(
        mut head: Vec<u8>,
        tail: Vec<u8>,
        read: &[Arc<crate::clusters::Cluster>],
    ) -> ViewAnswer {
        let etag = entity_tag(&head, &tail);
        // Kept as long as the view: without the room it grew into while it was serialised (up
        // to as much again).
        head.shrink_to_fit();
        ViewAnswer {
            head: Bytes::from(head),
            tail: Bytes::from(tail),
            read: read.iter().map(Arc::downgrade).collect(),
            rows: None,
            valid_until: None,
            etag,
        }
    }

    /// An answer of `body` (no place for the time) that holds until `valid_until`.
    #[cfg(test)]
    pub(crate) fn test(body: &[u8], valid_until: Option<std::time::Instant>) -> ViewAnswer {
        let mut answer = ViewAnswer::whole(body.to_vec(), &[]);
        answer.valid_until = valid_until;
        answer
    }

    /// The stamp, now, of the clusters it read; `None` when they cannot be vouched for (one
    /// is gone), so that nothing is kept or served from what they were.
    pub(crate) fn stamp(&self, clusters: &Clusters) -> Option<crate::clusters::Stamp> {
        let read: Vec<Arc<crate::clusters::Cluster>> =
            self.read.iter().map(Weak::upgrade).collect::<Option<_>>()?;
        let read = || read.iter().map(|c| &**c);
        Clusters::vouched(read()).then(|| clusters.stamp(read()))
    }

    /// `body` with [`NOW`] in it, split there.
    fn with_now(body: Vec<u8>, read: &[Arc<crate::clusters::Cluster>]) -> ViewAnswer {
        let marker = serde_json::to_vec(&*NOW).expect("a string serialises");
        // memmem, not a window compared at every byte: that was a memcmp call per byte of a
        // megabyte answer, a tenth of a 2,000-resource view's CPU after a change.
        match memchr::memmem::find(&body, &marker) {
            Some(at) => {
                let tail = body[at + marker.len()..].to_vec();
                let mut head = body;
                head.truncate(at);
                ViewAnswer::split(head, tail, read)
            }
            None => ViewAnswer::whole(body, read),
        }
    }

    /// Its entity tag: the same for every time it is served at.
    pub(crate) fn etag(&self) -> &HeaderValue {
        &self.etag
    }

    /// Whether `known` (an `If-None-Match` value) names this answer: served again, it would be 304.
    pub(crate) fn named_by(&self, known: &HeaderValue) -> bool {
        names(known, &self.etag)
    }

    /// The answer's pieces as served at `now` (the time as a JSON string): its shared bytes,
    /// not a copy of them.
    pub(crate) fn pieces_at(&self, now: &Bytes) -> [Bytes; 3] {
        [self.head.clone(), now.clone(), self.tail.clone()]
    }

    /// The answer as served at `now` (when it has a place for the time); 304 without a body
    /// when `known` (the request's `If-None-Match`) names it.
    fn respond(
        &self,
        now: Option<k8s_openapi::jiff::Timestamp>,
        known: Option<&HeaderValue>,
    ) -> Response {
        let now = now.map(timeline::rfc3339);
        let mut headers = HeaderMap::new();
        headers.insert(header::ETAG, self.etag.clone());
        if let Some(value) = now.as_deref().and_then(|t| HeaderValue::from_str(t).ok()) {
            headers.insert(WAVEGATE_NOW, value);
        }
        if known.is_some_and(|k| names(k, &self.etag)) {
            return (StatusCode::NOT_MODIFIED, headers).into_response();
        }
        let now = now.map(|t| serde_json::to_vec(&t).unwrap_or_default());
        let now = Bytes::from(now.unwrap_or_default());
        let body = Pieces::of([self.head.clone(), now, self.tail.clone()]);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        (headers, axum::body::Body::new(body)).into_response()
    }
}

/// A body sent as the pieces it is kept in (a kept answer's shared bytes and the time between
/// them), its length known: a response with a `Content-Length`, as one of a single buffer.
pub(crate) struct Pieces {
    pieces: std::collections::VecDeque<Bytes>,
    length: u64,
}

impl Pieces {
    pub(crate) fn of(pieces: impl IntoIterator<Item = Bytes>) -> Pieces {
        let pieces: std::collections::VecDeque<Bytes> =
            pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let length = pieces.iter().map(|p| p.len() as u64).sum();
        Pieces { pieces, length }
    }
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let piece = this.pieces.pop_front();
        if let Some(p) = &piece {
            this.length -= p.len() as u64;
        }
        std::task::Poll::Ready(piece.map(|p| Ok(http_body::Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.length)
    }
}

/// A weak entity tag for an answer's bytes but the time: weak, since two answers with one tag
/// differ in `timeline.now`. A cryptographic hash, so that nobody who writes a message into
/// the answer (an object's status, Argo CD's records) can make a changed answer keep its tag.
fn entity_tag(head: &[u8], tail: &[u8]) -> HeaderValue {
    use blake2::{Blake2b512, Digest};
    let mut hash = Blake2b512::new();
    hash.update((head.len() as u64).to_le_bytes());
    hash.update(head);
    hash.update(tail);
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    HeaderValue::from_str(&format!("W/\"{hex}\"")).expect("hex is a valid header value")
}

/// Whether `If-None-Match` (`*`, or entity tags separated by commas) names `etag`, by the weak
/// comparison RFC 9110 §13.1.2 prescribes for it.
fn names(if_none_match: &HeaderValue, etag: &HeaderValue) -> bool {
    let opaque = |t: &str| t.trim().trim_start_matches("W/").to_string();
    let (Ok(list), Ok(etag)) = (if_none_match.to_str(), etag.to_str()) else {
        return false;
    };
    let etag = opaque(etag);
    list.trim() == "*" || list.split(',').any(|t| opaque(t) == etag)
}

/// An answer read from caches whose on-demand watches stop after `watch_idle` unread is judged
/// again before half of that: kept answers read nothing, and would otherwise let the watches
/// they rest on stop following the cluster.
fn kept_at_most(
    read: &[Arc<crate::clusters::Cluster>],
    now: std::time::Instant,
) -> Option<std::time::Instant> {
    read.iter()
        .map(|c| now + c.evaluator.cache().watch_idle() / 2)
        .min()
}

fn internal(e: serde_json::Error) -> ApiError {
    ApiError::Unavailable(format!("cannot serialise the answer: {e}"))
}

pub(crate) async fn application_waves(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath((namespace, name)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let known = headers.get(header::IF_NONE_MATCH);
    waves_of(&state, &namespace, &name, scope, known).await
}

/// The proxy-extension entry: Argo CD names the application in `Argocd-Application-Name`
/// (`<namespace>:<name>`) after checking the caller may see it.
pub(crate) async fn header_waves(
    State(state): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let value = headers
        .get("argocd-application-name")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            ApiError::BadRequest(
                "missing header Argocd-Application-Name: <namespace>:<name>".into(),
            )
        })?;
    let (namespace, name) = value.split_once(':').ok_or_else(|| {
        ApiError::BadRequest(format!(
            "Argocd-Application-Name {value:?}: expected <namespace>:<name>"
        ))
    })?;
    waves_of(
        &state,
        namespace,
        name,
        scope,
        headers.get(header::IF_NONE_MATCH),
    )
    .await
}

/// The waves view and timeline of one application as served now; 304 when `known` names it.
async fn waves_of(
    state: &AppState,
    namespace: &str,
    name: &str,
    scope: Scope,
    known: Option<&HeaderValue>,
) -> Result<Response, ApiError> {
    let scope = scope.as_ref().map(|Extension(s)| &**s);
    let answer = view_answer(state, namespace, name, scope, &Admitted).await?;
    Ok(answer.respond(Some(k8s_openapi::jiff::Timestamp::now()), known))
}

/// Keeps `{"kept": name, "now": <time served>}` as the view of `namespace/name` (unscoped),
/// read now from `read`: it holds until `valid_until`, or until what it read changes.
#[cfg(test)]
pub(crate) fn keep_view(
    state: &AppState,
    namespace: &str,
    name: &str,
    read: &[Arc<crate::clusters::Cluster>],
    valid_until: Option<std::time::Instant>,
) {
    let now = serde_json::to_string(&*NOW).expect("a string serialises");
    let body = format!(r#"{{"kept":{name:?},"now":{now}}}"#);
    let mut answer = ViewAnswer::with_now(body.into_bytes(), read);
    answer.valid_until = valid_until;
    let stamp = answer
        .stamp(&state.clusters)
        .expect("its clusters vouched for");
    let key = ViewKey::of(namespace, name, None);
    let at = std::time::Instant::now();
    state
        .views
        .put(key, (stamp, at), valid_until, Arc::new(answer));
}

/// What a view is judged under: a place among the requests served at once (`limits`).
pub(crate) trait PlacesToJudge {
    type Place: Send;
    /// A place free now, if any.
    fn free(&self) -> Option<Self::Place>;
    /// The next place to come free.
    fn next_free(&self) -> impl std::future::Future<Output = Self::Place> + Send;
}

/// The place a single request was admitted with (`limits::bounded`): always at hand.
struct Admitted;

impl PlacesToJudge for Admitted {
    type Place = ();
    fn free(&self) -> Option<()> {
        Some(())
    }
    fn next_free(&self) -> impl std::future::Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// The waves view and timeline of one application, kept until what it read changes or one of
/// its verdicts expires (see `kept`); through Argo CD's proxy, reading only what the
/// application really manages (`waves::ViewScope`). What `waves_of` serves, and each part of a
/// batch (`batch`).
///
/// A judgement is made under a place of `places` (a batch's, `batch::Places`), taken only when
/// nothing kept serves the view and it is this request's turn: a request served what another
/// judged, or waiting for it to, holds none. A turn is never held while waiting for a place:
/// a batch's place may be judging another Application for seconds, and every request for this
/// one, any caller's, waits for its turn. So a request with no place free at its turn gives
/// the turn back, waits for a place holding nothing else, then takes the turn again and looks
/// again at what is kept. Nor is a place held while waiting for a turn: the batch's other
/// parts wait for that place, and another caller judging this Application may take seconds.
/// With the place it waited for, a request takes the turn only if it is free; if not, it gives
/// the place back and waits for the turn holding nothing. It does so once: parts that keep
/// handing turns and places to one another could otherwise go round without any judging, so
/// the next time it waits for the turn holding the place, and at most three rounds are made.
pub(crate) async fn view_answer(
    state: &AppState,
    namespace: &str,
    name: &str,
    scope: Option<&AppScope>,
    places: &impl PlacesToJudge,
) -> Result<Arc<ViewAnswer>, ApiError> {
    // Names as a check of the Application would take them: a bad one is a 400, not a 404.
    Target::new(CheckKind::APPLICATION, namespace, name)?;
    let view_scope = scope.map(AppScope::view_scope);
    let key = ViewKey::of(namespace, name, view_scope.as_ref());
    let now = std::time::Instant::now();
    let stamp_of = |answer: &ViewAnswer| answer.stamp(&state.clusters);
    if let Some(kept) = state.views.get_by(&key, stamp_of, now) {
        return Ok(kept);
    }
    let asked = now;
    let mut waited = None;
    let mut gave_back = false;
    let (_turn, _place) = loop {
        let turn = match waited {
            Some(_) if !gave_back => match state.views.try_turn(&key) {
                Some(turn) => turn,
                None => {
                    waited = None;
                    gave_back = true;
                    state.views.turn(&key).await
                }
            },
            _ => state.views.turn(&key).await,
        };
        let now = std::time::Instant::now();
        let kept = state.views.get_by(&key, stamp_of, now);
        if let Some(kept) = kept.or_else(|| state.views.read_since(&key, asked, now)) {
            return Ok(kept);
        }
        match waited.take().or_else(|| places.free()) {
            Some(place) => break (turn, place),
            None => {
                drop(turn);
                waited = Some(places.next_free().await);
            }
        }
    };
    // Taken before any read: a change while judging leaves what is kept stale, never newer.
    let clusters = state.clusters.all();
    let stamp = state.clusters.stamp(clusters.iter().map(|c| &**c));
    let read_at = std::time::Instant::now();
    let app = state
        .clusters
        .home()
        .cache
        .application(namespace, name)
        .await
        .map_err(|e| ApiError::reading(e, Reading::Application))?
        .ok_or_else(|| ApiError::NotFound(format!("Application {namespace}/{name} not found")))?;
    // Its destination judged by another replica: with forwarding, that replica's view, not
    // one with every resource Unknown for being judged elsewhere.
    if state.forward.is_some()
        && let Err(crate::clusters::ClusterError::JudgedElsewhere { cluster, why }) =
            state.clusters.destination_of(&app)
    {
        return Err(ApiError::JudgedElsewhere { cluster, why });
    }
    // The live objects are in the Application's destination cluster.
    let mut read = vec![state.clusters.home().clone()];
    let destination = state.clusters.destination_of(&app);
    if let Ok(cluster) = &destination {
        read.push(cluster.clone());
    }
    let (body, valid_until, rows) = match (&view_scope, &destination) {
        // Unscoped, from the rows of the last answer that still hold (`rows`); through Argo
        // CD's proxy every resource is first checked to be the application's own, each time.
        (None, Ok(cluster)) => {
            let last = state.views.latest(&key).and_then(|a| a.rows.clone());
            let assembled = super::rows::assemble(
                &state.clusters,
                &cluster.evaluator,
                &state.policy,
                &state.live_lint,
                &app,
                last.as_deref(),
                &NOW,
            )
            .await
            .map_err(internal)?;
            (assembled.body, assembled.valid_until, Some(assembled.rows))
        }
        _ => {
            let scope = view_scope.as_ref();
            let (view, valid_until) = judged_afresh(state, &app, scope, &destination).await;
            (
                serde_json::to_vec(&view).map_err(internal)?,
                valid_until,
                None,
            )
        }
    };
    let valid_until = waves::earliest(valid_until, kept_at_most(&read, read_at));
    let stamp = stamp.only(read.iter().map(|c| &**c));
    let mut answer = ViewAnswer::with_now(body, &read);
    answer.rows = rows;
    answer.valid_until = valid_until;
    let answer = Arc::new(answer);
    state
        .views
        .put(key, (stamp, read_at), valid_until, answer.clone());
    Ok(answer)
}

/// The waves view and timeline of `app`, every resource judged and timed for this answer,
/// with [`NOW`] for the time it is served; and when it may change with time alone.
async fn judged_afresh(
    state: &AppState,
    app: &App,
    view_scope: Option<&waves::ViewScope>,
    destination: &Result<Arc<crate::clusters::Cluster>, crate::clusters::ClusterError>,
) -> (WavesWithTimeline, Option<std::time::Instant>) {
    let waves = waves::view_with_findings(
        &state.clusters,
        &state.policy,
        &state.live_lint,
        app,
        view_scope,
    )
    .await;
    let served_at = k8s_openapi::jiff::Timestamp::now();
    let timeline = match destination {
        Ok(cluster) => {
            let ev = &cluster.evaluator;
            timeline::of(ev.cache(), &state.policy, app, &waves, served_at).await
        }
        Err(why) => {
            let unread = |_: &_| timeline::Live {
                unread: Some(why.to_string()),
                ..timeline::Live::default()
            };
            timeline::build(app, &waves, unread, served_at)
        }
    };
    let valid_until = waves.valid_until;
    let mut view = WavesWithTimeline::new(waves, timeline);
    view.timeline.now = NOW.clone();
    (view, valid_until)
}

/// [`judged_afresh`], serialised: what a view's answer is, whatever rows were kept.
#[cfg(test)]
pub(crate) async fn afresh(state: &AppState, app: &App) -> Vec<u8> {
    let destination = state.clusters.destination_of(app);
    let (view, _) = judged_afresh(state, app, None, &destination).await;
    serde_json::to_vec(&view).unwrap()
}

/// The JSON string [`NOW`] is in an answer before it is served.
#[cfg(test)]
pub(crate) fn now_marker() -> Vec<u8> {
    serde_json::to_vec(&*NOW).unwrap()
}

#[derive(serde::Deserialize)]
pub(crate) struct GatePath {
    namespace: String,
    name: String,
}

fn gate_path(
    ApiPath(GatePath { namespace, name }): ApiPath<GatePath>,
) -> Result<(String, String), ApiError> {
    crate::resource::validate_namespace(&namespace)?;
    crate::resource::validate_name(&name)?;
    Ok((namespace, name))
}

/// `GET /api/v1/gates`: every WaveGate, from its stored status (through Argo CD's proxy: the
/// authorized application's gates only).
pub(crate) async fn gates(cluster: InCluster, scope: Scope) -> Result<Json<GateList>, ApiError> {
    let listed = cluster
        .unless_stopped(gate_view::list(&cluster.0.cache))
        .await?;
    let mut gates = match listed {
        Ok(gates) => gates,
        Err(CacheError::NotInstalled(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    if let Some(Extension(scope)) = &scope {
        let mut kept = Vec::new();
        for g in gates {
            if scope.allows_gate(&g.namespace, &g.name).await {
                kept.push(g);
            }
        }
        gates = kept;
    }
    Ok(Json(GateList { gates }))
}

/// `GET /api/v1/gates/{namespace}/{name}`.
pub(crate) async fn gate(
    cluster: InCluster,
    path: ApiPath<GatePath>,
) -> Result<Json<gate_view::Gate>, ApiError> {
    let (namespace, name) = gate_path(path)?;
    let cache = &cluster.0.cache;
    cluster
        .unless_stopped(gate_view::get(cache, &namespace, &name))
        .await??
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("WaveGate {namespace}/{name} not found")))
}

/// `GET /api/v1/gates/{namespace}/{name}/wait?timeout=30s`: 200 Healthy, 409 Degraded, 408 when
/// the timeout (at most 5m) passes first; the body is the Gate in each case.
pub(crate) async fn gate_wait(
    State(state): State<AppState>,
    headers: HeaderMap,
    peer: Option<Extension<super::limits::Peer>>,
    cluster: InCluster,
    path: ApiPath<GatePath>,
    ApiQuery(params): ApiQuery,
) -> Result<Response, ApiError> {
    let (namespace, name) = gate_path(path)?;
    if let Some(k) = params.keys().find(|k| *k != "timeout") {
        return Err(ApiError::BadRequest(format!(
            "unknown parameter {k} (allowed: timeout)"
        )));
    }
    let timeout =
        gate_view::http_wait_timeout(params.get("timeout").map(String::as_str)).map_err(|e| {
            ApiError::BadRequest(format!(
                "invalid parameter timeout: {e} (e.g. 30s, 2m; at most 5m)"
            ))
        })?;
    let _waiting = super::limits::waiter(
        &state,
        &super::limits::caller(&headers, peer.as_ref().map(|p| &p.0)),
    )?;
    let cache = &cluster.0.cache;
    let waited = cluster
        .unless_stopped(gate_view::wait(
            cache,
            &namespace,
            &name,
            timeout,
            false,
            |_| {},
        ))
        .await??;
    Ok(match waited {
        gate_view::Waited::Healthy(g) => (StatusCode::OK, Json(g)).into_response(),
        gate_view::Waited::Degraded(g) => (StatusCode::CONFLICT, Json(g)).into_response(),
        gate_view::Waited::TimedOut(g) => (StatusCode::REQUEST_TIMEOUT, Json(g)).into_response(),
        gate_view::Waited::NotFound => {
            return Err(ApiError::NotFound(format!(
                "WaveGate {namespace}/{name} not found"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waves::{JudgedBy, JudgedResource};

    /// A kept answer is split where `timeline.now` goes. Argo CD's recorded health message is
    /// copied into the view as it is, and the waves come before the timeline: a message that
    /// spells a marker must stay the message, and the time must land in `timeline.now`.
    #[tokio::test]
    async fn a_string_that_spells_a_marker_does_not_move_timeline_now() {
        for forged in [
            "\u{1}wavegate-now\u{1}".to_string(),
            "\u{1}wavegate-now-00000000000000000000000000000000\u{1}".to_string(),
        ] {
            let app = App::of(serde_json::json!({"status": {"resources": [{
                "group": "example.com", "version": "v1", "kind": "Widget",
                "namespace": "shop", "name": "w",
                "health": {"status": "Progressing", "message": forged}}]}}));
            let (resource, _, reported) = crate::waves::managed_resources(&app)
                .into_iter()
                .next()
                .expect("one resource");
            let reported = reported.expect("Argo CD's recorded health");
            let waves = waves::assemble(
                "argocd",
                "shop",
                crate::health::Verdict::progressing("waiting"),
                vec![(0, JudgedResource::new(resource, reported, JudgedBy::Argocd))],
            );
            let served_at: k8s_openapi::jiff::Timestamp = "2026-12-03T18:00:00Z".parse().unwrap();
            let mut timeline =
                timeline::build(&app, &waves, |_| timeline::Live::default(), served_at);
            timeline.now = NOW.clone();
            let body = serde_json::to_vec(&WavesWithTimeline::new(waves, timeline)).unwrap();
            let response = ViewAnswer::with_now(body, &[]).respond(Some(served_at), None);
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            let served: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(
                served["timeline"]["now"],
                serde_json::json!(timeline::rfc3339(served_at)),
                "{served}"
            );
            assert_eq!(
                served["waves"][0]["resources"][0]["message"],
                serde_json::json!(forged),
                "{served}"
            );
        }
    }

    fn answer(head: &str, tail: &str) -> ViewAnswer {
        ViewAnswer::with_now(
            format!(r#"{head}{}{tail}"#, serde_json::to_string(&*NOW).unwrap()).into_bytes(),
            &[],
        )
    }

    /// A poll that names the answer it holds gets 304 and the time only; one that names any
    /// other (or none) gets the whole answer with its tag. The tag ignores the time alone.
    #[tokio::test]
    async fn a_poll_holding_the_same_answer_gets_304_with_the_time_only() {
        let served_at: k8s_openapi::jiff::Timestamp = "2026-12-03T18:00:00Z".parse().unwrap();
        let first = answer(r#"{"a":1,"now":"#, "}");
        let full = first.respond(Some(served_at), None);
        assert_eq!(full.status(), StatusCode::OK);
        let tag = full.headers()[header::ETAG].clone();
        assert!(tag.to_str().unwrap().starts_with("W/\""), "{tag:?}");
        assert_eq!(full.headers()[WAVEGATE_NOW], "2026-12-03T18:00:00Z");
        // Sent in pieces, with its length known (a `Content-Length`, not chunks).
        use http_body::Body as _;
        let whole = r#"{"a":1,"now":"2026-12-03T18:00:00Z"}"#;
        assert_eq!(full.body().size_hint().exact(), Some(whole.len() as u64));
        let body = axum::body::to_bytes(full.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(body, whole.as_bytes());

        let later: k8s_openapi::jiff::Timestamp = "2026-12-03T18:00:05Z".parse().unwrap();
        let same = answer(r#"{"a":1,"now":"#, "}").respond(Some(later), Some(&tag));
        assert_eq!(same.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(same.headers()[WAVEGATE_NOW], "2026-12-03T18:00:05Z");
        assert_eq!(same.headers()[header::ETAG], tag);
        let body = axum::body::to_bytes(same.into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(body.is_empty());

        // One byte moved from before the time to after it is another answer.
        for changed in [
            answer(r#"{"a":2,"now":"#, "}"),
            answer(r#"{"a":1,"now""#, ":}"),
        ] {
            let r = changed.respond(Some(later), Some(&tag));
            assert_eq!(r.status(), StatusCode::OK);
            assert_ne!(r.headers()[header::ETAG], tag);
        }
        let listed = HeaderValue::from_str(&format!("W/\"x\", {}", tag.to_str().unwrap())).unwrap();
        let r = answer(r#"{"a":1,"now":"#, "}").respond(Some(later), Some(&listed));
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "a tag among several");
        let strong = HeaderValue::from_str(tag.to_str().unwrap().trim_start_matches("W/")).unwrap();
        let r = answer(r#"{"a":1,"now":"#, "}").respond(Some(later), Some(&strong));
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "weak comparison");
        let r = answer(r#"{"a":1,"now":"#, "}")
            .respond(Some(later), Some(&HeaderValue::from_static("W/\"\"")));
        assert_eq!(r.status(), StatusCode::OK, "an empty tag names nothing");
    }
}
