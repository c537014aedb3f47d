//! Bounds on what callers can make wavegate spend: time per request, requests in flight, gate
//! waits held open, and applications judged at once. Each is a `wavegate serve` flag; a request
//! over a bound is refused at once with a JSON message (503 or 429 and `Retry-After`), never
//! queued, so a flood cannot build up memory or starve the gate controller.
//!
//! `/healthz`, `/readyz` and `/metrics` are outside these bounds: the kubelet's probes must keep
//! answering while the API is saturated, or a busy wavegate would be restarted.

use super::{ApiError, AppState};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Longest an API request (other than a gate wait, bounded by its own `?timeout=`, at most
    /// 5m) may take; then 503 with a message.
    #[arg(long, env = "WAVEGATE_REQUEST_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// API requests served at once (gate waits not counted); more are refused with 503.
    #[arg(long, env = "WAVEGATE_MAX_CONCURRENT_REQUESTS", default_value_t = 64)]
    pub max_concurrent_requests: usize,
    /// Gate waits (`/api/v1/gates/…/wait` long-polls) held open at once; more are refused with
    /// 429. Each is woken by every change wavegate watches, so this also bounds that work.
    #[arg(long, env = "WAVEGATE_MAX_WAITERS", default_value_t = 64)]
    pub max_waiters: usize,
    /// Applications `GET /api/v1/applications` judges at once.
    #[arg(long, env = "WAVEGATE_APPLICATIONS_CONCURRENCY", default_value_t = 4)]
    pub applications_concurrency: usize,
}

impl Default for LimitArgs {
    fn default() -> Self {
        LimitArgs {
            request_timeout: Duration::from_secs(30),
            max_concurrent_requests: 64,
            max_waiters: 64,
            applications_concurrency: 4,
        }
    }
}

/// The bounds in force, with the permits they hand out.
pub struct Limits {
    pub args: LimitArgs,
    requests: Arc<Semaphore>,
    waiters: Arc<Semaphore>,
}

impl Limits {
    pub(crate) fn new(args: LimitArgs) -> Limits {
        Limits {
            requests: Arc::new(Semaphore::new(args.max_concurrent_requests)),
            waiters: Arc::new(Semaphore::new(args.max_waiters)),
            args,
        }
    }

    /// A place among the waiters, held for as long as the wait lasts.
    pub(crate) fn waiter(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.waiters.clone().try_acquire_owned().map_err(|_| {
            ApiError::TooManyWaiters(format!(
                "{} gate waits are already held open (--max-waiters); retry later, or wait with \
                 `wavegate wait`, which watches the gate through the Kubernetes API",
                self.args.max_waiters
            ))
        })
    }

    /// How many applications one listing judges at once (at least one).
    pub(crate) fn applications_concurrency(&self) -> usize {
        self.args.applications_concurrency.max(1)
    }
}

/// Middleware for every API route except gate waits: a permit or 503 at once, then the request
/// timeout.
pub(crate) async fn bounded(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let limits = &state.limits;
    let _permit = limits.requests.clone().try_acquire_owned().map_err(|_| {
        state.metrics.record_refusal("overloaded");
        ApiError::Overloaded(format!(
            "wavegate is already serving its limit of {} concurrent API requests \
             (--max-concurrent-requests); retry shortly",
            limits.args.max_concurrent_requests
        ))
    })?;
    let timeout = limits.args.request_timeout;
    tokio::time::timeout(timeout, next.run(req))
        .await
        .map_err(|_| {
            state.metrics.record_refusal("timeout");
            ApiError::Overloaded(format!(
                "the request took longer than {} (--request-timeout) and was abandoned",
                humantime::format_duration(timeout)
            ))
        })
}
