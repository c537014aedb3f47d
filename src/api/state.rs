//! What every handler shares.

use super::limits::{LimitArgs, Limits};
use super::token::Token;
use crate::clusters::Clusters;
use crate::evaluate::Evaluator;
use crate::metrics::Metrics;
use crate::policy::CheckPolicy;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    /// The home cluster's.
    pub evaluator: Arc<Evaluator>,
    /// Every cluster judged, home included (`/api/v1/clusters/{cluster}/…`).
    pub clusters: Arc<Clusters>,
    pub metrics: Arc<Metrics>,
    /// When set, `/api/*` requires `Authorization: Bearer <token>` (Argo CD's proxy extension
    /// sends it from argocd-secret).
    pub token: Option<Arc<Token>>,
    pub limits: Arc<Limits>,
    /// Which kinds generic checks may name.
    pub policy: Arc<CheckPolicy>,
}

impl AppState {
    /// No token, default limits, the default policy.
    pub fn new(evaluator: Arc<Evaluator>, metrics: Arc<Metrics>) -> AppState {
        AppState {
            clusters: Clusters::new(evaluator.clone()),
            evaluator,
            metrics,
            token: None,
            limits: Arc::new(Limits::new(LimitArgs::default())),
            policy: Arc::new(CheckPolicy::default()),
        }
    }

    /// Judge the remote clusters of `clusters` too (its home must be this state's evaluator).
    pub fn with_clusters(mut self, clusters: Arc<Clusters>) -> AppState {
        self.evaluator = clusters.home().clone();
        self.clusters = clusters;
        self
    }

    pub fn with_token(mut self, token: Token) -> AppState {
        self.token = Some(Arc::new(token));
        self
    }

    pub fn with_limits(mut self, limits: LimitArgs) -> AppState {
        self.limits = Arc::new(Limits::new(limits));
        self
    }

    pub(crate) fn with_policy(mut self, policy: CheckPolicy) -> AppState {
        self.policy = Arc::new(policy);
        self
    }
}
