//! One error type for the HTTP layer: every way a request can fail becomes a 4xx with a JSON
//! message here, in one place, so handlers just return `Result`.

use crate::resource::InputError;
use axum::Json;
use axum::http::StatusCode;
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
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Input(_) | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut resp = (status, Json(json!({ "error": self.to_string() }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"wavegate\""),
            );
        }
        resp
    }
}
