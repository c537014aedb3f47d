//! Path and query extractors whose rejection is an [`ApiError`] (a 400 naming what is wrong),
//! so a handler never sees a malformed request and no handler maps axum's rejections itself.

use super::ApiError;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use std::collections::HashMap;

impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> ApiError {
        ApiError::BadRequest(e.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> ApiError {
        ApiError::BadRequest(e.body_text())
    }
}

/// The route's path parameters as `T`.
pub(crate) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(t) = Path::<T>::from_request_parts(parts, state).await?;
        Ok(ApiPath(t))
    }
}

/// The query string's parameters (each handler says which it accepts).
pub(crate) struct ApiQuery(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for ApiQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(q) = Query::<HashMap<String, String>>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(q))
    }
}
