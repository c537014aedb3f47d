//! Which cluster a request addresses: `{cluster}` in `/api/v1/clusters/{cluster}/…`; else,
//! through Argo CD's proxy, the destination cluster of the Application Argo CD authorized
//! (`scope` refuses the request when wavegate does not judge it); else the home cluster.

use super::scope::AppScope;
use super::{ApiError, AppState};
use crate::clusters::{HOME, InUse, Refused};
use crate::evaluate::Evaluator;
use axum::Json;
use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::request::Parts;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;

/// The addressed cluster.
pub(crate) struct InCluster(pub InUse);

impl InCluster {
    /// `work`, unless the cluster is replaced or removed first: then 503 with why, never an
    /// answer about a cluster no longer judged.
    pub(crate) async fn unless_stopped<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Result<T, ApiError> {
        tokio::select! {
            out = work => Ok(out),
            () = self.0.stopped.cancelled() => Err(ApiError::Unavailable(self.0.stopped_reason())),
        }
    }
}

impl FromRequestParts<AppState> for InCluster {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        let Some((_, name)) = params.iter().find(|(k, _)| *k == "cluster") else {
            // Proxied: the authorized Application's destination, never the home cluster's
            // object of the same name.
            if let Some(scope) = parts.extensions.get::<Arc<AppScope>>() {
                return scope.destination().map(InCluster);
            }
            return state
                .clusters
                .lookup(HOME)
                .map(InCluster)
                .ok_or_else(|| ApiError::Unavailable("the home cluster is not judged".into()));
        };
        state.clusters.lookup(name).map(InCluster).ok_or_else(|| {
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
