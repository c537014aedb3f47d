//! Bounds on what callers can make wavegate spend: time per request, requests in flight, gate
//! waits held open, and applications judged at once. Each is a `wavegate serve` flag; a request
//! over a bound is refused at once with a JSON message (503 or 429 and `Retry-After`), never
//! queued, so a flood cannot build up memory or starve the gate controller.
//!
//! Each caller also gets a share of the two shared bounds (`--max-requests-per-caller`,
//! `--max-waiters-per-caller`), so one Argo CD user polling from many tabs, or one script in a
//! loop, cannot hold every slot while everyone else is refused. A caller is the Argo CD user
//! argocd-server names on a proxied request (`Argocd-User-Id`, else `Argocd-Username`: argo-cd
//! `server/extension/extension.go` `prepareRequest` sets both from the session). A direct call
//! (the bearer token's holders: operators, CI, the hook Jobs that wait on gates) is its peer's
//! address: the token is shared, but each hook Job runs in its own pod, so one tenant's waits
//! cannot fill the share another tenant's hook needs (a Service keeps the pod's source address
//! for in-cluster traffic; kube-proxy rewrites only the destination). argocd-server sets
//! these headers only when it knows the user, so with anonymous access enabled in Argo CD a
//! browser can choose them itself: the shares then still stop an honest user's burst, and the
//! shared bounds stop the rest.
//!
//! `/healthz`, `/readyz` and `/metrics` are outside these bounds: the kubelet's probes must keep
//! answering while the API is saturated, or a busy wavegate would be restarted.

use super::{ApiError, AppState};
use crate::locks::lock;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
    /// API requests one caller may have served at once (see the module comment for who a
    /// caller is); more are refused with 429. Each Application a batch of waves views judges
    /// at once beside another counts as one more, while it is judged.
    #[arg(long, env = "WAVEGATE_MAX_REQUESTS_PER_CALLER", default_value_t = 16)]
    pub max_requests_per_caller: usize,
    /// Gate waits one caller may hold open at once; more are refused with 429.
    #[arg(long, env = "WAVEGATE_MAX_WAITERS_PER_CALLER", default_value_t = 16)]
    pub max_waiters_per_caller: usize,
    /// Applications `GET /api/v1/applications` (or one batch of waves views) judges at once.
    #[arg(long, env = "WAVEGATE_APPLICATIONS_CONCURRENCY", default_value_t = 4)]
    pub applications_concurrency: usize,
}

impl Default for LimitArgs {
    fn default() -> Self {
        LimitArgs {
            request_timeout: Duration::from_secs(30),
            max_concurrent_requests: 64,
            max_waiters: 64,
            max_requests_per_caller: 16,
            max_waiters_per_caller: 16,
            applications_concurrency: 4,
        }
    }
}

/// The bounds in force, with the permits they hand out.
pub struct Limits {
    pub args: LimitArgs,
    requests: Arc<Semaphore>,
    waiters: Arc<Semaphore>,
    requests_by_caller: Arc<Shares>,
    waiters_by_caller: Arc<Shares>,
}

/// How many places each caller holds under one bound. A caller with none held has no entry,
/// so the map is never larger than the bound's own permits.
#[derive(Default)]
struct Shares(Mutex<HashMap<String, usize>>);

/// One place of one caller, given back when dropped.
pub(crate) struct Share {
    shares: Arc<Shares>,
    caller: String,
}

impl Shares {
    fn take(self: &Arc<Self>, caller: &str, most: usize) -> Option<Share> {
        let mut held = lock(&self.0);
        let n = held.entry(caller.to_string()).or_default();
        if *n >= most.max(1) {
            if *n == 0 {
                held.remove(caller);
            }
            return None;
        }
        *n += 1;
        Some(Share {
            shares: self.clone(),
            caller: caller.to_string(),
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = lock(&self.shares.0);
        if let Some(n) = held.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.caller);
            }
        }
    }
}

/// The address a request's connection came from, set by the server loop (`super::serve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer(pub std::net::IpAddr);

/// Who is asking, for the per-caller shares (see the module comment).
pub(crate) fn caller(headers: &HeaderMap, peer: Option<&Peer>) -> String {
    let proxied = headers.contains_key(super::scope::APPLICATION_HEADER);
    if !proxied {
        return match peer {
            Some(Peer(ip)) => format!("direct:{ip}"),
            None => "direct".into(),
        };
    }
    let user = ["argocd-user-id", "argocd-username"]
        .iter()
        .find_map(|h| headers.get(*h)?.to_str().ok().filter(|v| !v.is_empty()));
    match user {
        // Bounded: a header's value is the client's to make long.
        Some(u) => format!("argocd-user:{}", u.chars().take(256).collect::<String>()),
        None => "argocd-anonymous".into(),
    }
}

/// A place among the waiters for `caller`, its refusal counted.
pub(crate) fn waiter(state: &AppState, caller: &str) -> Result<WaiterPermit, ApiError> {
    state.limits.waiter(caller).inspect_err(|e| {
        let reason = match e {
            ApiError::CallerBusy(_) => "caller_busy",
            _ => "too_many_waiters",
        };
        state.metrics.record_refusal(reason);
    })
}

/// A place among the requests served at once and in the caller's share, held for as long as
/// the work it admits lasts.
pub(crate) struct RequestPlace {
    _share: Share,
    _permit: OwnedSemaphorePermit,
}

/// A place among the waiters and in the caller's share, held for as long as the wait lasts.
pub(crate) struct WaiterPermit {
    _share: Share,
    _permit: OwnedSemaphorePermit,
}

impl Limits {
    pub(crate) fn new(args: LimitArgs) -> Limits {
        Limits {
            requests: Arc::new(Semaphore::new(args.max_concurrent_requests)),
            waiters: Arc::new(Semaphore::new(args.max_waiters)),
            requests_by_caller: Arc::default(),
            waiters_by_caller: Arc::default(),
            args,
        }
    }

    /// A place among the requests served at once, in `caller`'s share: what a request holds
    /// while it is served (see [`bounded`]).
    pub(crate) fn request(&self, caller: &str) -> Result<RequestPlace, ApiError> {
        let permit = self.requests.clone().try_acquire_owned().map_err(|_| {
            ApiError::Overloaded(format!(
                "wavegate is already serving its limit of {} concurrent API requests \
                 (--max-concurrent-requests); retry shortly",
                self.args.max_concurrent_requests
            ))
        })?;
        let most = self.args.max_requests_per_caller;
        let share = self.requests_by_caller.take(caller, most).ok_or_else(|| {
            ApiError::CallerBusy(format!(
                "this caller already has {most} API requests in flight \
                 (--max-requests-per-caller); retry shortly"
            ))
        })?;
        Ok(RequestPlace {
            _share: share,
            _permit: permit,
        })
    }

    /// A place among the waiters for `caller`, held for as long as the wait lasts.
    pub(crate) fn waiter(&self, caller: &str) -> Result<WaiterPermit, ApiError> {
        let permit = self.waiters.clone().try_acquire_owned().map_err(|_| {
            ApiError::TooManyWaiters(format!(
                "{} gate waits are already held open (--max-waiters); retry later, or wait with \
                 `wavegate wait`, which watches the gate through the Kubernetes API",
                self.args.max_waiters
            ))
        })?;
        let most = self.args.max_waiters_per_caller;
        let share = self.waiters_by_caller.take(caller, most).ok_or_else(|| {
            ApiError::CallerBusy(format!(
                "this caller already holds {most} gate waits open (--max-waiters-per-caller); \
                 retry when one ends"
            ))
        })?;
        Ok(WaiterPermit {
            _share: share,
            _permit: permit,
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
    let caller = caller(req.headers(), req.extensions().get::<Peer>());
    let _place = limits.request(&caller).inspect_err(|e| {
        let reason = match e {
            ApiError::CallerBusy(_) => "caller_busy",
            _ => "overloaded",
        };
        state.metrics.record_refusal(reason);
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn shares_are_per_caller_and_given_back() {
        let shares = Arc::new(Shares::default());
        let a1 = shares.take("alice", 2).unwrap();
        let _a2 = shares.take("alice", 2).unwrap();
        assert!(shares.take("alice", 2).is_none());
        let b = shares.take("bob", 2).unwrap();
        drop(a1);
        let _a3 = shares.take("alice", 2).expect("given back");
        drop(b);
        assert!(
            !lock(&shares.0).contains_key("bob"),
            "no entry once none held"
        );
        // A share of 0 is read as 1: a caller is never locked out entirely.
        let z = Arc::new(Shares::default());
        let only = z.take("x", 0);
        assert!(only.is_some() && z.take("x", 0).is_none());
    }

    #[test]
    fn the_caller_is_argo_cds_user_or_the_peer_of_a_direct_call() {
        let mut h = HeaderMap::new();
        let pod = Peer("10.244.1.7".parse().unwrap());
        let peer = Some(&pod);
        assert_eq!(caller(&h, None), "direct");
        assert_eq!(caller(&h, peer), "direct:10.244.1.7");
        // A direct call naming a user is still its peer.
        h.insert("argocd-user-id", HeaderValue::from_static("alice"));
        assert_eq!(caller(&h, peer), "direct:10.244.1.7");
        h.insert(
            "argocd-application-name",
            HeaderValue::from_static("argocd:a"),
        );
        assert_eq!(caller(&h, peer), "argocd-user:alice");
        h.remove("argocd-user-id");
        h.insert("argocd-username", HeaderValue::from_static("Alice"));
        assert_eq!(caller(&h, peer), "argocd-user:Alice");
        h.remove("argocd-username");
        assert_eq!(caller(&h, peer), "argocd-anonymous");
        let long = "x".repeat(10_000);
        h.insert("argocd-user-id", HeaderValue::from_str(&long).unwrap());
        assert_eq!(caller(&h, peer).len(), "argocd-user:".len() + 256);
    }

    /// Every direct call carries the one token; a share per token would let one tenant's hook
    /// Jobs (or one script in a loop) hold every wait of the share and fail every other
    /// tenant's hook with 429 while the shared bound has room.
    #[test]
    fn one_pods_waits_do_not_refuse_another_pods_wait() {
        let limits = Limits::new(LimitArgs::default());
        let direct = HeaderMap::new();
        let (a, b) = (
            Peer("10.244.1.7".parse().unwrap()),
            Peer("10.244.2.9".parse().unwrap()),
        );
        let held: Vec<_> = (0..limits.args.max_waiters_per_caller)
            .map(|_| {
                limits
                    .waiter(&caller(&direct, Some(&a)))
                    .unwrap_or_else(|e| panic!("a's waits: {e:?}"))
            })
            .collect();
        assert!(
            limits.waiter(&caller(&direct, Some(&a))).is_err(),
            "a is over its share"
        );
        assert!(
            limits.waiter(&caller(&direct, Some(&b))).is_ok(),
            "b refused while a holds {} waits",
            held.len()
        );
    }
}
