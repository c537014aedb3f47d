//! One error type for the HTTP layer: every way a request can fail becomes a 4xx (or, when
//! wavegate itself cannot answer, a 503) with a JSON message here, in one place, so handlers
//! just return `Result`.

use crate::resource::InputError;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use thiserror::Error;

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
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Input(_) | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unavailable(_) | ApiError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooManyWaiters(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = match &self {
            ApiError::Overloaded(_) => Some("1"),
            ApiError::TooManyWaiters(_) => Some("5"),
            _ => None,
        };
        let mut resp = (status, Json(json!({ "error": self.to_string() }))).into_response();
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
