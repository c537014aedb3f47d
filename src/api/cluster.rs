//! Which cluster a request addresses: `{cluster}` in `/api/v1/clusters/{cluster}/…`, else the
//! home cluster (every route without it, as before there were several).

use super::{ApiError, AppState};
use crate::clusters::{HOME, Refused};
use crate::evaluate::Evaluator;
use axum::Json;
use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::request::Parts;
use serde_json::{Value, json};
use std::sync::Arc;

/// The evaluator of the addressed cluster.
pub(crate) struct InCluster(pub Arc<Evaluator>);

impl FromRequestParts<AppState> for InCluster {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        let Some((_, name)) = params.iter().find(|(k, _)| *k == "cluster") else {
            return Ok(InCluster(state.evaluator.clone()));
        };
        state.clusters.get(name).map(InCluster).ok_or_else(|| {
            ApiError::NotFound(format!(
                "no cluster named {:?} (GET /api/v1/clusters lists them)",
                crate::health::printable(name)
            ))
        })
    }
}

/// `GET /api/v1/clusters`: every cluster judged, whether its watches are synced, and the
/// clusters its source names that are refused, with why.
pub(crate) async fn list(State(state): State<AppState>) -> Json<Value> {
    let entry = |name: &str, server: &str, ev: &Evaluator| {
        let (ready, problems) = match ev.cache().readiness() {
            Ok(_) => (true, Vec::new()),
            Err(p) => (false, p),
        };
        json!({"name": name, "server": server, "ready": ready, "problems": problems})
    };
    let mut clusters = vec![entry(HOME, crate::clusters::HOME_SERVER, &state.evaluator)];
    for c in state.clusters.remotes().values() {
        clusters.push(entry(&c.name, &c.server, &c.evaluator));
    }
    let refused: Vec<Refused> = state.clusters.refused();
    Json(json!({"clusters": clusters, "refused": refused}))
}
