//! One error type for the HTTP layer: every way a request can fail becomes a 4xx (or, when
//! wavegate itself cannot answer, a 503) with a JSON message here, in one place, so handlers
//! just return `Result`.

use crate::cache::CacheError;
use crate::resource::InputError;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;
use thiserror::Error;

/// The body of every refusal: what went wrong, in words a person can act on.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Error")]
pub(crate) struct ErrorBody {
    pub error: String,
}

/// On a 421's response: which cluster it was about and why, for `forward` to act on.
#[derive(Debug, Clone)]
pub(crate) struct Misdirected {
    pub cluster: String,
    pub why: String,
}

#[derive(Debug, Error)]
pub enum ApiError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    BadRequest(String),
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// Understood, and refused: outside what Argo CD authorized, or outside the installer's
    /// policy.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// wavegate cannot answer truthfully right now (a cache that has not synced, a failing
    /// watch, an unreadable token file).
    #[error("{0}")]
    Unavailable(String),
    /// A bound was reached (`--max-concurrent-requests`, `--request-timeout`): try again.
    #[error("{0}")]
    Overloaded(String),
    /// Too many gate waits are held open (`--max-waiters`).
    #[error("{0}")]
    TooManyWaiters(String),
    /// One caller holds its share of a bound (`--max-requests-per-caller`,
    /// `--max-waiters-per-caller`): the others keep theirs.
    #[error("{0}")]
    CallerBusy(String),
    /// With `--shard-like-argocd`: `cluster` is judged by another replica (or by none), and
    /// this one will not guess. The message names the replica. A read may be forwarded to it
    /// (`forward`), which the response's [`Misdirected`] lets the forwarding layer see.
    #[error("{why}")]
    JudgedElsewhere { cluster: String, why: String },
    /// A read forwarded to the replica that judges its cluster got no answer from it.
    #[error("{0}")]
    PeerFailed(String),
    /// A read forwarded to the replica that judges its cluster was not answered in time.
    #[error("{0}")]
    PeerTimeout(String),
}

impl From<crate::clusters::ClusterError> for ApiError {
    fn from(e: crate::clusters::ClusterError) -> ApiError {
        match e {
            crate::clusters::ClusterError::JudgedElsewhere { cluster, why } => {
                ApiError::JudgedElsewhere { cluster, why }
            }
            crate::clusters::ClusterError::UnknownName(name) => ApiError::NotFound(format!(
                "no cluster named {name:?} (GET /api/v1/clusters lists them)"
            )),
            e => ApiError::NotFound(format!("{e} (GET /api/v1/clusters lists them)")),
        }
    }
}

/// A failed cache read, as every endpoint answers it unless [`Reading`] says otherwise: what
/// the cache cannot reach (a kind not installed, a namespace outside `--namespaces`) is 404, and
/// anything else — a watch not synced or relisting, RBAC, the watch bound, discovery failing —
/// is wavegate unable to answer for now, 503 (never a verdict read from a stale store).
impl From<CacheError> for ApiError {
    fn from(e: CacheError) -> ApiError {
        if e.out_of_reach() {
            ApiError::NotFound(e.to_string())
        } else {
            ApiError::Unavailable(e.to_string())
        }
    }
}

/// The reads whose failure answers otherwise than `From<CacheError>`, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reading<'a> {
    /// Discovery of the kind a health request names: the same statuses, the message naming
    /// the kind (an unknown kind is the caller's mistake, discovery failing is wavegate's).
    Kind(&'a str),
    /// The Application a waves view is about. Argo CD names it, so its namespace outside
    /// `--namespaces` is no mistake of the caller's but wavegate deployed blind to Argo CD's
    /// Applications: 503, not 404. A CRD not installed is still 404.
    Application,
    /// The Application Argo CD authorized a proxied request for (`Application ns/name`): one
    /// wavegate can never read refuses the request (403), so nothing is shown unscoped.
    Scope(&'a str),
}

impl ApiError {
    /// A failed cache read of `reading`.
    pub(crate) fn reading(e: CacheError, reading: Reading<'_>) -> ApiError {
        match reading {
            Reading::Kind(resource) => match ApiError::from(e) {
                ApiError::NotFound(e) => {
                    ApiError::NotFound(format!("unknown resource {resource}: {e}"))
                }
                e => ApiError::Unavailable(format!("cannot resolve {resource}: {e}")),
            },
            Reading::Application => match e {
                CacheError::NamespaceNotWatched(_) => ApiError::Unavailable(e.to_string()),
                e => ApiError::from(e),
            },
            Reading::Scope(what) if e.out_of_reach() => ApiError::Forbidden(format!(
                "{what}, which Argo CD authorized this request for, cannot be read by \
                 wavegate ({e}), so nothing can be shown for it"
            )),
            Reading::Scope(what) => {
                ApiError::Unavailable(format!("cannot read {what} to scope the request: {e}"))
            }
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::Input(_) | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unavailable(_) | ApiError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooManyWaiters(_) | ApiError::CallerBusy(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::JudgedElsewhere { .. } => StatusCode::MISDIRECTED_REQUEST,
            ApiError::PeerFailed(_) => StatusCode::BAD_GATEWAY,
            ApiError::PeerTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = match &self {
            ApiError::Overloaded(_) => Some("1"),
            ApiError::TooManyWaiters(_) => Some("5"),
            ApiError::CallerBusy(_) => Some("1"),
            _ => None,
        };
        let body = ErrorBody {
            error: self.to_string(),
        };
        let misdirected = match self {
            ApiError::JudgedElsewhere { cluster, why } => Some(Misdirected { cluster, why }),
            _ => None,
        };
        let mut resp = (status, Json(body)).into_response();
        if let Some(m) = misdirected {
            resp.extensions_mut().insert(m);
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"wavegate\""),
            );
        }
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(secs));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(e: ApiError) -> (StatusCode, String) {
        (e.status(), e.to_string())
    }

    #[test]
    fn a_failed_cache_read_is_404_out_of_reach_and_503_otherwise() {
        let unwatched = || CacheError::NamespaceNotWatched("shop".into());
        let not_installed = || CacheError::NotInstalled("wavegates.wavegate.dev".into());
        let listing = || CacheError::NotSynced("wavegates.wavegate.dev".into());
        assert_eq!(answer(unwatched().into()).0, StatusCode::NOT_FOUND);
        assert_eq!(answer(not_installed().into()).0, StatusCode::NOT_FOUND);
        assert_eq!(answer(listing().into()).0, StatusCode::SERVICE_UNAVAILABLE);

        let app = |e| answer(ApiError::reading(e, Reading::Application)).0;
        assert_eq!(app(unwatched()), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(app(not_installed()), StatusCode::NOT_FOUND);
        assert_eq!(app(listing()), StatusCode::SERVICE_UNAVAILABLE);

        let kind = |e| answer(ApiError::reading(e, Reading::Kind("foos.example.com")));
        let (status, message) = kind(not_installed());
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            message.starts_with("unknown resource foos.example.com: "),
            "{message}"
        );
        let discovery = CacheError::Discovery {
            what: "foos.example.com".into(),
            error: "connection refused".into(),
        };
        let (status, message) = kind(discovery);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            message.starts_with("cannot resolve foos.example.com: "),
            "{message}"
        );

        let scope = |e| {
            answer(ApiError::reading(
                e,
                Reading::Scope("Application argocd/shop"),
            ))
        };
        assert_eq!(scope(unwatched()).0, StatusCode::FORBIDDEN);
        assert_eq!(scope(not_installed()).0, StatusCode::FORBIDDEN);
        let (status, message) = scope(listing());
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(message.contains("to scope the request"), "{message}");
    }

    /// With shards, a cluster another replica judges is 421 Misdirected Request naming that
    /// replica: never a 404 that would read as "no such cluster", an answer guessed from here,
    /// or 409, which a gate's wait route answers for Degraded (a hook would fail the sync).
    #[test]
    fn a_cluster_judged_by_another_replica_is_421_naming_it() {
        use crate::clusters::ClusterError;
        let why = "cluster \"a\" is judged by wavegate replica 1 (shard 1); ask that replica";
        let elsewhere = ClusterError::JudgedElsewhere {
            cluster: "a".into(),
            why: why.into(),
        };
        let (status, message) = answer(elsewhere.into());
        assert_eq!(
            (status, message.as_str()),
            (StatusCode::MISDIRECTED_REQUEST, why)
        );
        let (status, message) = answer(ClusterError::UnknownName("b".into()).into());
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(message.starts_with("no cluster named \"b\""), "{message}");
    }
}
