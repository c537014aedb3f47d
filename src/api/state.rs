//! What every handler shares.

use super::limits::{LimitArgs, Limits};
use super::token::Token;
use crate::clusters::{Cluster, Clusters};
use crate::evaluate::Evaluator;
use crate::metrics::Metrics;
use crate::policy::CheckPolicy;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    /// Every cluster judged, home included (`/api/v1/clusters/{cluster}/…`).
    pub clusters: Arc<Clusters>,
    pub metrics: Arc<Metrics>,
    /// When set, `/api/*` requires `Authorization: Bearer <token>` (Argo CD's proxy extension
    /// sends it from argocd-secret).
    pub token: Option<Arc<Token>>,
    pub limits: Arc<Limits>,
    /// Which kinds generic checks may name.
    pub policy: Arc<CheckPolicy>,
    /// Whether the API port serves `/metrics` (behind the token, when one is set); false when
    /// a separate monitoring port does (`--metrics-listen`).
    pub metrics_on_api: bool,
    /// Argo CD's own namespace (`--argocd-namespace`): how its tracking names an Application
    /// there (the name alone) and elsewhere (`<namespace>_<name>`).
    pub argocd_namespace: String,
    /// argocd-cm `application.resourceTrackingMethod` (`--tracking-method`).
    pub tracking_method: crate::views::TrackingMethod,
    /// The waves view's lint runs: bounded, budgeted and remembered across requests.
    pub(crate) live_lint: Arc<crate::live_lint::Runs>,
    /// Waves views kept until what they read changes (see `kept`).
    pub(crate) views: Arc<super::kept::Kept<super::handlers::ViewKey, super::handlers::ViewAnswer>>,
    /// `GET /api/v1/applications` (unscoped), kept the same way.
    pub(crate) listed: Arc<super::kept::Kept<(), super::handlers::ViewAnswer>>,
    /// With `--shard-like-argocd` and peer addresses: reads about another replica's cluster
    /// are forwarded to it (see `forward`).
    pub(crate) forward: Option<Arc<super::forward::Forwarder>>,
}

impl AppState {
    /// The home cluster alone, judged by `evaluator` (see [`AppState::of`]).
    pub fn new(evaluator: Arc<Evaluator>, metrics: Arc<Metrics>) -> AppState {
        AppState::of(Clusters::new(Cluster::home(evaluator)), metrics)
    }

    /// The clusters judged; no token, default limits, the default policy.
    pub fn of(clusters: Arc<Clusters>, metrics: Arc<Metrics>) -> AppState {
        AppState {
            clusters,
            metrics,
            token: None,
            limits: Arc::new(Limits::new(LimitArgs::default())),
            policy: Arc::new(CheckPolicy::default()),
            metrics_on_api: true,
            argocd_namespace: crate::gate::controller::DEFAULT_ARGOCD_NAMESPACE.into(),
            tracking_method: crate::views::TrackingMethod::default(),
            live_lint: Arc::new(crate::live_lint::Runs::default()),
            views: Arc::default(),
            listed: Arc::default(),
            forward: None,
        }
    }

    pub fn with_argocd_namespace(mut self, namespace: &str) -> AppState {
        self.argocd_namespace = namespace.to_string();
        self
    }

    pub fn with_tracking_method(mut self, method: crate::views::TrackingMethod) -> AppState {
        self.tracking_method = method;
        self
    }

    /// `/metrics` only on [`super::monitoring_router`].
    pub fn with_metrics_elsewhere(mut self) -> AppState {
        self.metrics_on_api = false;
        self
    }

    /// Forward reads about clusters other replicas judge (see `forward`).
    pub fn with_forwarder(mut self, forwarder: super::forward::Forwarder) -> AppState {
        self.forward = Some(Arc::new(forwarder));
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
