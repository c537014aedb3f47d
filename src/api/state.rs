//! What every handler shares.

use crate::evaluate::Evaluator;
use crate::metrics::Metrics;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub evaluator: Arc<Evaluator>,
    pub metrics: Arc<Metrics>,
    /// When set, `/api/*` requires `Authorization: Bearer <token>` (Argo CD's proxy extension
    /// sends it from argocd-secret).
    pub token: Option<Arc<str>>,
}
