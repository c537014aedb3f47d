//! Which cluster a request addresses: `{cluster}` in `/api/v1/clusters/{cluster}/…`; else,
//! through Argo CD's proxy, the destination cluster of the Application Argo CD authorized
//! (`scope` refuses the request when wavegate does not judge it); else the home cluster.

use super::scope::AppScope;
use super::{ApiError, AppState};
use crate::clusters::{Cluster, Owner, Refused};
use axum::Json;
use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::request::Parts;
use schemars::JsonSchema;
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;

/// The addressed cluster.
pub(crate) struct InCluster(pub Arc<Cluster>);

impl InCluster {
    /// `work`, unless the cluster is replaced or removed first: then 503 with why, never an
    /// answer about a cluster no longer judged.
    pub(crate) async fn unless_stopped<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Result<T, ApiError> {
        tokio::select! {
            out = work => Ok(out),
            () = self.0.stop.cancelled() => Err(ApiError::Unavailable(self.0.stopped_reason())),
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
            return Ok(InCluster(state.clusters.home().clone()));
        };
        // Another replica's cluster is 421 with its number, never read from here.
        Ok(InCluster(state.clusters.find(name)?))
    }
}

/// `GET /api/v1/clusters`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterList {
    pub clusters: Vec<ClusterState>,
    /// The clusters their source names that wavegate does not run, with why.
    pub refused: Vec<Refused>,
    /// With `--shard-like-argocd`: this replica's shard, and the clusters other replicas (or
    /// none) judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardState>,
}

/// This replica's shard and what it does not judge.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ShardState {
    /// The shard this replica runs as.
    pub replica: i64,
    pub replicas: u32,
    /// Who writes home's (`in-cluster`) WaveGates; its reads are served by every replica.
    pub home: Option<Owner>,
    pub elsewhere: Vec<JudgedElsewhere>,
}

/// A cluster another replica judges (or none does).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JudgedElsewhere {
    pub name: String,
    pub server: String,
    pub owner: Option<Owner>,
    /// The pod of the replica that judges it: the live holder of its shard's Lease when the
    /// Leases were last read (absent when none holds it, or its holder names no pod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// A cluster wavegate judges, and whether its watches are synced.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterState {
    /// `in-cluster`, or the name its Argo CD cluster Secret (or kubeconfig file) gives it.
    pub name: String,
    pub server: String,
    pub ready: bool,
    /// Why it is not ready.
    pub problems: Vec<String>,
}

impl ClusterState {
    fn of(c: &Cluster) -> Self {
        let (ready, problems) = match c.cache.readiness() {
            Ok(_) => (true, Vec::new()),
            Err(p) => (false, p),
        };
        ClusterState {
            name: c.name.clone(),
            server: c.server.clone(),
            ready,
            problems,
        }
    }
}

/// `GET /api/v1/clusters`: every cluster judged, whether its watches are synced, and the
/// clusters its source names that are refused, with why.
pub(crate) async fn list(State(state): State<AppState>) -> Json<ClusterList> {
    let home = std::iter::once(state.clusters.home());
    let clusters = home
        .chain(state.clusters.remotes().values())
        .map(|c| ClusterState::of(c))
        .collect();
    let shard = state.clusters.sharding().map(|s| ShardState {
        replica: s.settings.replica,
        replicas: s.settings.replicas,
        home: s.owner(crate::clusters::HOME),
        elsewhere: state
            .clusters
            .elsewhere()
            .iter()
            .map(|(name, e)| {
                let owner = s.owner(name);
                let holder = match owner {
                    Some(Owner::Replica { shard }) => s.holder(shard),
                    _ => None,
                };
                JudgedElsewhere {
                    name: name.clone(),
                    server: e.server.clone(),
                    owner,
                    holder: holder
                        .as_deref()
                        .and_then(|h| crate::clusters::holder_pod(h).ok())
                        .map(str::to_string),
                }
            })
            .collect(),
    });
    Json(ClusterList {
        clusters,
        refused: state.clusters.refused(),
        shard,
    })
}
