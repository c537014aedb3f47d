//! `GET /api/v1/applications/waves?app=<namespace>/<name>[@<etag>]&app=…`: the waves views of
//! several Applications in one answer, for the dashboard's page of Applications.
//!
//! A page of 20 Applications asked its views one request each, and 23 fetches a refresh (most of
//! them 304s) cost headless chromium 40–60 ms of main-thread time on their own, over the 50 ms
//! an update may take (docs/benchmarks.md, "the browser and memory"). Here each part
//! is exactly what the Application's own endpoint (`GET /api/v1/applications/{namespace}/{name}
//! /waves`) would answer the same caller, from the same kept answers (`handlers::view_answer`):
//! its status, its ETag, and with 200 its view, or 304 with no view when the tag the caller sent
//! for it still names it. Every part is served with the answer's `now` as its time, so a page
//! can move the clock of a view it kept (ui/waves.js `withNow`); `now` is taken before any part
//! is resolved, and each part was resolved (served from what was kept, or judged) at some time
//! between `now` and when the answer was written, as late as `--request-timeout` after it.
//!
//! Through Argo CD's proxy each part is admitted as the single route would be
//! (`AppScope::allows_application_named`), with the same 403 and message: a part says no more
//! about an Application than asking for it alone does.
//!
//! Each Application judged at once beyond the first holds a place in its caller's share
//! (`--max-requests-per-caller`) and among the requests served at once, as its own request
//! would, while it is judged ([`Places`]): otherwise each of a caller's batches, one request to
//! the bounds, would judge `--applications-concurrency` Applications at a time, several times
//! what the caller's share lets its single requests judge. A part served from its kept answer
//! takes no place, nor does one waiting for another request's judgement of its Application
//! (`handlers::view_answer` takes the place only when it is the part's turn to judge), and a
//! part waiting for a place holds no turn, so no request for its Application waits for the
//! batch's other judgements. The batch's own place judges one Application at a time, so a
//! batch whose caller has no place left is still answered, one Application at a time, rather
//! than in refused parts.
//!
//! With shards, an Application whose destination another replica judges is a 421 part ("ask it
//! alone"), not forwarded from here: the single endpoint forwards it (`forward`), with its own
//! deadline, peer failures and `Wavegate-Judged-By`, which one answer of many parts could only
//! mix with the others'. Such Applications are few on a page and move only with a shard, so the
//! page's extra request for each costs little.

use super::handlers::{self, ViewAnswer, view_answer};
use super::limits::Peer;
use super::scope::AppScope;
use super::{ApiError, AppState};
use crate::timeline::WavesWithTimeline;
use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Serialize;
use std::sync::Arc;

/// More Applications than this in one request is a 400: each may be judged afresh, within the
/// one request's `--request-timeout`. The dashboard asks for a page of 20.
pub(crate) const MAX_APPS: usize = 50;

/// The answer: every Application asked for, in the order asked.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WavesBatch")]
pub(crate) struct WavesBatch {
    /// The time every part is served with: each 200 part's `timeline.now`, and what a 304
    /// part's view, held by the caller, would now say. Taken before any part was resolved: each
    /// was resolved at some time between it and when the answer was written (within
    /// `--request-timeout`).
    pub now: String,
    pub applications: Vec<WavesPart>,
}

/// One Application's part: what its own waves endpoint would have answered.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WavesPart {
    pub namespace: String,
    pub name: String,
    /// The status `GET /api/v1/applications/{namespace}/{name}/waves` would have answered
    /// (with `If-None-Match` the tag sent for it): 200 with `waves`, 304 without (the view the
    /// caller holds is current), or an error status with `error`. 421: another replica judges
    /// it; ask its own endpoint, which forwards the request there.
    pub status: u16,
    /// The view's entity tag (200 and 304), to send back for it next time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Why there is no view (any status but 200 and 304).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The view (200 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waves: Option<WavesWithTimeline>,
}

/// One `app` parameter: `<namespace>/<name>`, optionally `@` and the ETag the caller holds for
/// it (neither a namespace nor a name can hold `/` or `@`).
#[derive(Debug, PartialEq)]
struct Asked {
    namespace: String,
    name: String,
    known: Option<HeaderValue>,
}

/// The `app` parameters of a query, in order; any other parameter, a malformed or repeated
/// Application, none or more than [`MAX_APPS`] is a 400 saying which.
fn asked(query: &[(String, String)]) -> Result<Vec<Asked>, ApiError> {
    let mut apps: Vec<Asked> = Vec::new();
    for (key, value) in query {
        if key != "app" {
            return Err(ApiError::BadRequest(format!(
                "unknown parameter {key} (allowed: app=<namespace>/<name>[@<etag>], repeated)"
            )));
        }
        let (app, known) = match value.split_once('@') {
            Some((app, tag)) => (app, Some(tag)),
            None => (value.as_str(), None),
        };
        let bad = |why: String| {
            ApiError::BadRequest(format!(
                "app={value:?}: {why} (expected <namespace>/<name>[@<etag>])"
            ))
        };
        let (namespace, name) = app
            .split_once('/')
            .ok_or_else(|| bad("no '/' between namespace and name".into()))?;
        crate::resource::validate_namespace(namespace).map_err(|e| bad(e.to_string()))?;
        crate::resource::validate_name(name).map_err(|e| bad(e.to_string()))?;
        let known = known
            .map(|t| HeaderValue::from_str(t).map_err(|_| bad("the entity tag is not text".into())))
            .transpose()?;
        if apps
            .iter()
            .any(|a| a.namespace == namespace && a.name == name)
        {
            return Err(bad("asked for twice".into()));
        }
        apps.push(Asked {
            namespace: namespace.to_string(),
            name: name.to_string(),
            known,
        });
        if apps.len() > MAX_APPS {
            return Err(ApiError::BadRequest(format!(
                "more than {MAX_APPS} applications in one request; ask for them in pages"
            )));
        }
    }
    if apps.is_empty() {
        return Err(ApiError::BadRequest(
            "no application asked for: app=<namespace>/<name>[@<etag>], repeated".into(),
        ));
    }
    Ok(apps)
}

/// `GET /api/v1/applications/waves`.
pub(crate) async fn waves(
    State(state): State<AppState>,
    scope: Option<Extension<Arc<AppScope>>>,
    headers: HeaderMap,
    peer: Option<Extension<Peer>>,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let apps = asked(&query)?;
    let scope = scope.as_ref().map(|Extension(s)| &**s);
    let state = &state;
    let caller = super::limits::caller(&headers, peer.as_ref().map(|Extension(p)| p));
    let places = Places::new(state, caller);
    // A few at a time, in order, as the list of applications judges them.
    let in_flight = state.limits.applications_concurrency().min(apps.len());
    let (served_at, parts) =
        resolved(&apps, in_flight, |a| resolve(state, scope, &places, a)).await;
    let served_at = crate::timeline::rfc3339(served_at);
    let body = write(&served_at, apps, parts)
        .map(super::handlers::Pieces::of)
        .map_err(|e| ApiError::Unavailable(format!("cannot serialise the answer: {e}")))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(now) = HeaderValue::from_str(&served_at) {
        headers.insert(super::handlers::WAVEGATE_NOW, now);
    }
    Ok((StatusCode::OK, headers, axum::body::Body::new(body)).into_response())
}

/// A part: its Application's view as its own endpoint would serve it, or why not.
type Part = Result<Arc<ViewAnswer>, ApiError>;

/// The time the answer is served at, then every part, resolved `in_flight` at a time, in order.
///
/// The time is taken before any part is resolved. Each part is then what its own endpoint
/// answered at a time no earlier than `now`: a kept answer that still held when it was looked
/// up, or a view judged after it. So no part says at `now` what had stopped being true by then
/// (taken after the parts, `now` was as late as the slowest part, and a view kept earlier could
/// be served at a time past its verdicts' expiry or after its objects changed). A view judged
/// after `now` may name a time past it (a sync started, a wave applied meanwhile), by as much
/// as the request's `--request-timeout`; the timeline draws such a time where it is, and says
/// "now" only at `now`.
async fn resolved<'a, F, Fut>(
    apps: &'a [Asked],
    in_flight: usize,
    resolve: F,
) -> (k8s_openapi::jiff::Timestamp, Vec<Part>)
where
    F: Fn(&'a Asked) -> Fut,
    Fut: std::future::Future<Output = Part>,
{
    let served_at = k8s_openapi::jiff::Timestamp::now();
    let resolve = &resolve;
    let parts = futures::stream::iter(0..apps.len())
        .map(move |i| resolve(&apps[i]))
        .buffered(in_flight)
        .collect()
        .await;
    (served_at, parts)
}

/// One Application's view as its own route would serve it: through Argo CD's proxy, admitted
/// as `scope::AppScope::admit` admits that route first. Its kept answer, if it holds, costs
/// no place, nor does waiting for another request's judgement of it; only judging it does.
async fn resolve(
    state: &AppState,
    scope: Option<&AppScope>,
    places: &Places<'_>,
    a: &Asked,
) -> Part {
    if let Some(scope) = scope
        && !scope.allows_application_named(&a.namespace, &a.name).await
    {
        state.metrics.record_refusal("out_of_scope");
        return Err(scope.refuse(&format!("Application {}/{}", a.namespace, a.name)));
    }
    view_answer(state, &a.namespace, &a.name, scope, &places).await
}

/// The places a batch judges its Applications under: the request's own, which judges one at
/// a time, and those of its caller's share taken beside it for as long as one judgement
/// lasts. A place is taken only to judge, once it is the part's turn (`handlers::view_answer`),
/// and given back as soon as that judgement ends, so a batch served from kept answers, waiting
/// on one slow Application or on another page's judgement of its Applications, holds no more
/// of its caller's share than a single request: a caller (one ingress's dashboards, Argo CD's
/// anonymous users) is many pages, each polling a batch.
struct Places<'a> {
    state: &'a AppState,
    caller: String,
    own: tokio::sync::Semaphore,
}

/// What one judgement is made under, given back when dropped.
enum Place<'a> {
    Own {
        _permit: tokio::sync::SemaphorePermit<'a>,
    },
    Beside {
        _place: super::limits::RequestPlace,
    },
}

impl<'a> Places<'a> {
    fn new(state: &'a AppState, caller: String) -> Self {
        Places {
            state,
            caller,
            own: tokio::sync::Semaphore::new(1),
        }
    }
}

/// The request's own place if free, else one beside it if the caller's share (and the
/// server's bound) has one, else the own place once free: never refused, never waiting on the
/// share, and no more judged at once than the places held.
impl<'p> handlers::PlacesToJudge for &'p Places<'_> {
    type Place = Place<'p>;

    fn free(&self) -> Option<Place<'p>> {
        let places = *self;
        if let Ok(own) = places.own.try_acquire() {
            return Some(Place::Own { _permit: own });
        }
        let beside = places.state.limits.request(&places.caller).ok()?;
        Some(Place::Beside { _place: beside })
    }

    fn next_free(&self) -> impl std::future::Future<Output = Place<'p>> + Send {
        let places = *self;
        async move {
            let own = places.own.acquire().await;
            Place::Own {
                _permit: own.expect("the own place is never closed"),
            }
        }
    }
}

/// The answer's pieces: each part's fields from serde, and a 200 part's view as its kept bytes
/// with the time between them, shared, not copied: 50 big views copied into one buffer per request made 16 such
/// requests at once gigabytes, where the single endpoint copies nothing.
fn write(
    served_at: &str,
    apps: Vec<Asked>,
    parts: Vec<Part>,
) -> Result<Vec<Bytes>, serde_json::Error> {
    let now = Bytes::from(serde_json::to_vec(served_at)?);
    let mut pieces = Vec::new();
    let mut out = Vec::new();
    out.extend_from_slice(b"{\"now\":");
    out.extend_from_slice(&now);
    out.extend_from_slice(b",\"applications\":[");
    for (i, (a, resolved)) in apps.into_iter().zip(parts).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut part = WavesPart {
            namespace: a.namespace,
            name: a.name,
            status: 200,
            etag: None,
            error: None,
            waves: None,
        };
        let view = match resolved {
            Ok(answer) => {
                part.etag = answer.etag().to_str().ok().map(str::to_string);
                if a.known.is_some_and(|k| answer.named_by(&k)) {
                    part.status = StatusCode::NOT_MODIFIED.as_u16();
                    None
                } else {
                    Some(answer)
                }
            }
            Err(e) => {
                part.status = e.status().as_u16();
                part.error = Some(e.to_string());
                None
            }
        };
        let head = serde_json::to_vec(&part)?;
        match view {
            Some(answer) => {
                // `{…}` of the fields, then `,"waves":<view>}`.
                out.extend_from_slice(&head[..head.len() - 1]);
                out.extend_from_slice(b",\"waves\":");
                pieces.push(Bytes::from(std::mem::take(&mut out)));
                pieces.extend(answer.pieces_at(&now));
                out.push(b'}');
            }
            None => out.extend_from_slice(&head),
        }
    }
    out.extend_from_slice(b"]}");
    pieces.push(Bytes::from(out));
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        match asked(&query(pairs)) {
            Err(ApiError::BadRequest(why)) => why,
            other => panic!("{pairs:?}: expected a 400, got {other:?}"),
        }
    }

    /// The answer's `now` is taken before any part is resolved: a part kept, or judged, while
    /// a slower one was judged is never served at a time later than it was looked up at.
    #[tokio::test]
    async fn the_answers_time_is_no_later_than_any_part() {
        use std::time::Duration;
        let apps = asked(&query(&[("app", "argocd/kept"), ("app", "argocd/slow")])).unwrap();
        let looked_up = std::sync::Mutex::new(Vec::new());
        let resolve = |a: &Asked| {
            let looked_up = &looked_up;
            let slow = a.name == "slow";
            async move {
                if slow {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                looked_up
                    .lock()
                    .unwrap()
                    .push(k8s_openapi::jiff::Timestamp::now());
                Ok(Arc::new(ViewAnswer::test(b"\"view\"", None)))
            }
        };
        let (served_at, parts) = resolved(&apps, 2, resolve).await;
        assert_eq!(parts.len(), 2);
        let looked_up = looked_up.into_inner().unwrap();
        assert_eq!(looked_up.len(), 2);
        for at in looked_up {
            assert!(
                served_at <= at,
                "served at {served_at}, a part looked up at {at}"
            );
        }
        assert_eq!(view(&parts[0]), "\"view\"");
    }

    /// The text of a part's view.
    fn view(part: &Part) -> String {
        let answer = part.as_ref().expect("a view");
        let [head, ..] = answer.pieces_at(&Bytes::new());
        String::from_utf8(head.to_vec()).unwrap()
    }

    #[test]
    fn apps_are_read_in_order_with_the_tags_held() {
        let apps = asked(&query(&[
            ("app", "argocd/web"),
            ("app", "team-a/db.primary@W/\"0123\""),
        ]))
        .unwrap();
        assert_eq!(
            apps,
            vec![
                Asked {
                    namespace: "argocd".into(),
                    name: "web".into(),
                    known: None
                },
                Asked {
                    namespace: "team-a".into(),
                    name: "db.primary".into(),
                    known: Some(HeaderValue::from_static("W/\"0123\""))
                },
            ]
        );
    }

    #[test]
    fn malformed_repeated_or_too_many_apps_are_a_400_saying_which() {
        assert!(refused(&[]).contains("no application"));
        assert!(refused(&[("apps", "argocd/web")]).contains("unknown parameter apps"));
        assert!(refused(&[("app", "argocd")]).contains("no '/'"));
        assert!(refused(&[("app", "Argocd/web")]).contains("\"Argocd/web\""));
        assert!(refused(&[("app", "argocd/web/x")]).contains("argocd/web/x"));
        assert!(refused(&[("app", "argocd/")]).contains("argocd/"));
        assert!(refused(&[("app", "argocd/web@\u{7f}")]).contains("not text"));
        assert!(refused(&[("app", "argocd/web"), ("app", "argocd/web@W/\"1\"")]).contains("twice"));
        let many: Vec<String> = (0..=MAX_APPS).map(|i| format!("argocd/app-{i}")).collect();
        let pairs: Vec<(&str, &str)> = many.iter().map(|a| ("app", a.as_str())).collect();
        assert!(refused(&pairs).contains(&format!("more than {MAX_APPS}")));
        assert!(
            asked(&query(&pairs[..MAX_APPS])).is_ok(),
            "{MAX_APPS} is allowed"
        );
    }
}
