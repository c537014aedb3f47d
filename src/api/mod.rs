//! The HTTP layer: read-only JSON API, probes for the kubelet, metrics and the dashboard.
//!
//! The same router serves Argo CD's proxy extension: Argo CD strips `/extensions/wavegate`
//! and forwards the rest, so the API paths are identical behind the proxy.

mod error;
mod handlers;
mod state;

pub use error::ApiError;
pub use state::AppState;

use axum::Router;
use axum::routing::get;

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route(
            "/api/v1/health/{resource}/{namespace}/{name}",
            get(handlers::health),
        )
        .route("/api/v1/applications", get(handlers::applications))
        .route(
            "/api/v1/applications/{namespace}/{name}/waves",
            get(handlers::application_waves),
        )
        .route("/api/v1/waves", get(handlers::header_waves))
        .route("/api/v1/gates", get(handlers::gates))
        .route("/api/v1/gates/{namespace}/{name}", get(handlers::gate))
        .route(
            "/api/v1/gates/{namespace}/{name}/wait",
            get(handlers::gate_wait),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            handlers::require_token,
        ));
    Router::new()
        .merge(api)
        .route("/", get(handlers::dashboard))
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::not_found)
        .with_state(state)
}
