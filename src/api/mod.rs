//! The HTTP layer: read-only JSON API, probes for the kubelet, metrics and the dashboard.
//!
//! The same router serves Argo CD's proxy extension: Argo CD strips `/extensions/wavegate`
//! and forwards the rest, so the API paths are identical behind the proxy — but what a proxied
//! request may see is scoped to the application Argo CD authorized (`scope`).
//!
//! Layers of `/api/*`, outermost first: bearer token (`token`) → bounds (`limits`) → forward to
//! the replica that judges the cluster, for a read answered 421 here (`forward`) → proxy scope
//! (`scope`) → handler. Every response carries `X-Content-Type-Options: nosniff`, a
//! Content-Security-Policy, and `Cache-Control: no-cache, private` with a `Vary` on the headers
//! that choose what is answered (`headers`).

mod batch;
mod cluster;
mod error;
mod extract;
mod forward;
mod handlers;
mod headers;
mod kept;
mod limits;
pub mod openapi;
mod rows;
mod scope;
mod serve;
mod state;
#[cfg(test)]
mod timing;
mod token;
pub mod ui;

pub use error::ApiError;
pub use forward::{Forwarder, PeerArgs};
pub use limits::LimitArgs;
pub use serve::{ConnectionArgs, serve};
pub use state::AppState;
pub use token::Token;

use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::get;

pub fn router(state: AppState) -> Router {
    let scoped =
        |r: Router<AppState>| r.route_layer(from_fn_with_state(state.clone(), scope::authorize));
    // What a cluster answers, registered once and nested twice: under `/api/v1` for home (or,
    // through Argo CD's proxy, the authorized Application's destination) and under
    // `/api/v1/clusters/{cluster}` for the one named (`cluster::InCluster` tells them apart).
    let in_cluster = |r: Router<AppState>| {
        Router::new()
            .nest("/api/v1", r.clone())
            .nest("/api/v1/clusters/{cluster}", r)
    };
    let quick = scoped(
        Router::new()
            .route("/api/v1/applications", get(handlers::applications))
            .route(
                "/api/v1/applications/{namespace}/{name}/waves",
                get(handlers::application_waves),
            )
            .route("/api/v1/applications/waves", get(batch::waves))
            .route("/api/v1/waves", get(handlers::header_waves))
            .route("/api/v1/clusters", get(cluster::list))
            .merge(in_cluster(
                Router::new()
                    .route(
                        "/health/{resource}/{namespace}/{name}",
                        get(handlers::health),
                    )
                    .route("/gates", get(handlers::gates))
                    .route("/gates/{namespace}/{name}", get(handlers::gate)),
            )),
    )
    // Inside the bounds: a forwarded read holds its request's place and deadline.
    .route_layer(from_fn_with_state(state.clone(), forward::reads))
    .route_layer(from_fn_with_state(state.clone(), limits::bounded));
    // Gate waits are long-polls: bounded by their own timeout and `--max-waiters` (taken in the
    // handler, after the input is validated), not by the request timeout.
    let waits = scoped(in_cluster(
        Router::new().route("/gates/{namespace}/{name}/wait", get(handlers::gate_wait)),
    ))
    .route_layer(from_fn_with_state(state.clone(), forward::waits));
    let api = quick
        .merge(waits)
        .route_layer(from_fn_with_state(state.clone(), handlers::require_token));
    let mut app = Router::new()
        .merge(api)
        .route("/", get(handlers::dashboard))
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz));
    if state.metrics_on_api {
        // Gate names and cluster names of every tenant: the token's, like the API (Argo CD's
        // proxy sends the token too, which `scope::api_only` answers below).
        app = app.route(
            "/metrics",
            get(handlers::metrics)
                .route_layer(from_fn_with_state(state.clone(), handlers::require_token)),
        );
    }
    app.fallback(handlers::not_found)
        .layer(from_fn(scope::api_only))
        .layer(from_fn(headers::security_headers))
        .layer(from_fn(answered))
        .with_state(state)
}

/// Marks every answer of the API port for `crate::heap`: what building it freed is given back
/// to the system once the requests pause.
async fn answered(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    crate::heap::worked();
    response
}

/// The monitoring port (`--metrics-listen`): `/metrics` without a token, for the Prometheus
/// that the NetworkPolicy lets in, and the kubelet's probes, which then cannot be crowded out
/// by clients of the API port (`--max-connections`).
pub fn monitoring_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::not_found)
        .layer(from_fn(scope::api_only))
        .layer(from_fn(headers::security_headers))
        .with_state(state)
}

#[cfg(test)]
mod tests;
