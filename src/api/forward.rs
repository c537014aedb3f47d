//! Reads about a cluster another replica judges, forwarded to it once.
//!
//! With `--shard-like-argocd` each replica judges its shard's clusters only, but Argo CD's proxy
//! extension (and any client of the Service) reaches one Service balanced over every replica:
//! with three replicas, two polls in three would land where the cluster is not judged and get
//! 421. So a replica that answers 421 for a `GET` forwards it to the replica that judges the
//! cluster and passes its answer through (status, body, `ETag`, `Wavegate-Now`,
//! `Content-Type`, `Retry-After`, and a HEAD's `Content-Length`), with `Wavegate-Judged-By`
//! naming the replica that answered.
//!
//! Bounded on every side:
//! - **One hop.** A forwarded request carries `Wavegate-Forwarded-By`; one that lands on a
//!   replica that does not judge the cluster either (it moved meanwhile) is answered 421 there,
//!   never forwarded again, and that 421 comes back as it is.
//! - **Reads only.** Every API route is a `GET`; any other method is never forwarded.
//! - **Time and number.** `--peer-timeout` for a read (a gate wait: its own `?timeout=` more),
//!   at most `--max-forwards` reads forwarded at once (a gate wait instead takes a place among
//!   this replica's waiters, as a local one would), an answer of at most [`MAX_BODY`].
//! - **Where.** The replica is the live holder of the cluster's shard Lease, as last listed.
//!   Anyone who may write Leases in the namespace can write that holder's name, and the
//!   request carries the caller's bearer token: so only the pod name before the identity's
//!   first `_` is used, only if it is a DNS-1123 label, and only in a host the installer wrote
//!   (`--peer-url`, `--peer`). A holder name that is anything else is not forwarded to.
//!
//! A peer that cannot be reached is 502 and one that does not answer in time 504 (RFC 9110
//! §15.6.3, §15.6.5: what a gateway answers for its upstream), with a message naming the
//! replica: never a verdict made up here, and never 503, which this replica answers when its
//! own cache cannot answer — a different fault for whoever is on call.

use super::error::Misdirected;
use super::{ApiError, AppState};
use crate::clusters::{Owner, holder_pod};
use crate::resource::is_dns_label as dns_label;
use axum::extract::{OriginalUri, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Marks a forwarded request, naming the replica that forwarded it.
pub(crate) const FORWARDED_BY: &str = "wavegate-forwarded-by";
/// Names the replica that answered (`--shard-like-argocd` with forwarding).
pub(crate) const JUDGED_BY: &str = "wavegate-judged-by";
/// The largest answer passed through: the waves view of an application with thousands of
/// resources is a few megabytes.
pub(crate) const MAX_BODY: usize = 32 << 20;

/// The request headers a peer needs to answer as this replica would: the token, what the
/// caller holds (`If-None-Match`), and Argo CD's proxy headers, which scope the answer to one
/// application and name the caller for the per-caller bounds.
const PASSED_ON: [&str; 8] = [
    "authorization",
    "accept",
    "if-none-match",
    "argocd-application-name",
    "argocd-project-name",
    "argocd-namespace",
    "argocd-user-id",
    "argocd-username",
];
/// The answer's headers passed back.
const PASSED_BACK: [&str; 6] = [
    "content-type",
    "etag",
    super::handlers::WAVEGATE_NOW,
    "retry-after",
    "www-authenticate",
    JUDGED_BY,
];

#[derive(clap::Args, Debug, Clone, Default)]
pub struct PeerArgs {
    /// With `--shard-like-argocd`: forward a read about a cluster another replica judges to
    /// that replica (one hop), at this address. `{holder}` is replaced by the pod name of the
    /// shard Lease's holder (only a DNS label is accepted), `{namespace}` by the pod's own
    /// (`POD_NAMESPACE`, else the ServiceAccount's; else the Lease's); e.g. `http://{holder}.wavegate-peers.{namespace}.svc:8080` with a headless
    /// Service `wavegate-peers`. Unset (and no `--peer`): such a read is answered 421.
    #[arg(long, env = "WAVEGATE_PEER_URL")]
    pub peer_url: Option<String>,
    /// A replica's fixed address, `POD=URL` (comma-separated for several), used before
    /// `--peer-url` (replicas outside a StatefulSet's DNS).
    #[arg(long = "peer", env = "WAVEGATE_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Longest a forwarded read may take, its answer included (a gate wait: its `?timeout=`
    /// more); then 504.
    #[arg(long, env = "WAVEGATE_PEER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub peer_timeout: Duration,
    /// Reads forwarded at once (gate waits not counted: they hold places among the waiters);
    /// more are answered 503 with `Retry-After`.
    #[arg(long, env = "WAVEGATE_MAX_FORWARDS", default_value_t = 32)]
    pub max_forwards: usize,
}

impl PeerArgs {
    /// Whether any address is given.
    pub fn forwards(&self) -> bool {
        self.peer_url.is_some() || !self.peers.is_empty()
    }
}

/// An `http://` base address with no user, query or fragment; `{holder}` may stand in its host.
fn base_address(text: &str, what: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("http://")
        .ok_or_else(|| format!("{what} {text:?}: expected http://… (wavegate serves HTTP)"))?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty()
        || host.contains('@')
        || text.contains(['?', '#'])
        || text.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{what} {text:?}: expected http://host[:port][/path], no user, query or fragment"
        ));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// Where each replica is reached.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    /// `--peer-url`, `{namespace}` already replaced.
    template: Option<String>,
    /// `--peer`, by pod.
    fixed: BTreeMap<String, String>,
}

impl Peers {
    /// From the flags; `namespace` is the pods' own (a validated namespace).
    pub(crate) fn new(args: &PeerArgs, namespace: &str) -> Result<Peers, String> {
        let template = match &args.peer_url {
            None => None,
            Some(t) => {
                let t = base_address(t, "--peer-url")?;
                let host = t["http://".len()..].split('/').next().unwrap_or_default();
                if t.matches("{holder}").count() != 1 || !host.contains("{holder}") {
                    return Err(format!(
                        "--peer-url {t:?}: {{holder}} must stand once, in the host (each \
                         replica has its own address)"
                    ));
                }
                let t = t.replace("{namespace}", namespace);
                if t.replace("{holder}", "").contains(['{', '}']) {
                    return Err(format!(
                        "--peer-url {t:?}: only {{holder}} and {{namespace}} are replaced"
                    ));
                }
                Some(t)
            }
        };
        let mut fixed = BTreeMap::new();
        for entry in &args.peers {
            let (pod, url) = entry
                .split_once('=')
                .ok_or_else(|| format!("--peer {entry:?}: expected POD=URL"))?;
            if !dns_label(pod) {
                return Err(format!("--peer {entry:?}: {pod:?} is not a pod name"));
            }
            fixed.insert(pod.to_string(), base_address(url, "--peer")?);
        }
        Ok(Peers { template, fixed })
    }

    /// The base address of the replica `pod` (a DNS label, see [`holder_pod`]).
    fn address(&self, pod: &str) -> Option<String> {
        if let Some(url) = self.fixed.get(pod) {
            return Some(url.clone());
        }
        debug_assert!(dns_label(pod));
        self.template.as_ref().map(|t| t.replace("{holder}", pod))
    }
}

/// What a 421 about `cluster` becomes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Asked again at `url`, of the replica `pod`.
    Forward { pod: String, url: String },
    /// Answered 421 here, with why it was not forwarded.
    Stay(String),
}

/// The request as the forwarding decision sees it.
pub(crate) struct Asked {
    method: Method,
    /// `Wavegate-Forwarded-By`, when another replica sent it.
    forwarded_by: Option<String>,
    path_and_query: String,
    passed_on: HeaderMap,
}

impl Asked {
    fn of(req: &Request) -> Asked {
        let uri = req
            .extensions()
            .get::<OriginalUri>()
            .map_or(req.uri(), |o| &o.0);
        let h = req.headers();
        let mut passed_on = HeaderMap::new();
        for name in PASSED_ON {
            for v in h.get_all(name) {
                passed_on.append(HeaderName::from_static(name), v.clone());
            }
        }
        Asked {
            method: req.method().clone(),
            forwarded_by: h.get(FORWARDED_BY).map(|v| {
                let v = String::from_utf8_lossy(v.as_bytes());
                crate::health::printable(&v).chars().take(80).collect()
            }),
            path_and_query: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string()),
            passed_on,
        }
    }
}

/// Where a request about a cluster owned by `owner` goes: to the live holder of its shard's
/// Lease (`holder`), at its address, unless it was forwarded already, is no read, or nobody
/// fit can be named. `me`: this replica's pod name.
pub(crate) fn route(
    asked: &Asked,
    owner: Option<&Owner>,
    holder: Option<&str>,
    peers: &Peers,
    me: &str,
) -> Route {
    // HEAD too: axum answers it with the GET route, and a client checking an ETag or a
    // status asks it like a GET.
    if asked.method != Method::GET && asked.method != Method::HEAD {
        return Route::Stay("only reads are forwarded".into());
    }
    if let Some(by) = &asked.forwarded_by {
        return Route::Stay(format!(
            "this request was forwarded by {by:?} already, and is never forwarded twice"
        ));
    }
    let shard = match owner {
        Some(Owner::Replica { shard }) => *shard,
        _ => return Route::Stay("no other replica judges it".into()),
    };
    let Some(holder) = holder else {
        return Route::Stay(format!("shard {shard}'s Lease has no live holder"));
    };
    let pod = match holder_pod(holder) {
        Ok(pod) => pod,
        Err(why) => return Route::Stay(format!("shard {shard}'s Lease: {why}")),
    };
    if pod == me {
        return Route::Stay(format!("shard {shard}'s Lease names this replica's pod"));
    }
    match peers.address(pod) {
        Some(base) => Route::Forward {
            pod: pod.to_string(),
            url: format!("{base}{}", asked.path_and_query),
        },
        None => Route::Stay(format!("no address for replica {pod} (--peer-url, --peer)")),
    }
}

/// Where one request is forwarded to, and how it was asked.
struct Peer<'a> {
    pod: &'a str,
    url: &'a str,
    method: Method,
}

/// Forwards 421s to the replica that judges the cluster.
pub struct Forwarder {
    peers: Peers,
    /// This replica's pod name.
    me: String,
    me_header: HeaderValue,
    timeout: Duration,
    slots: Arc<Semaphore>,
    max_forwards: usize,
    client: reqwest::Client,
}

impl Forwarder {
    /// `me`: this replica's pod name; `namespace`: the pods' own.
    pub fn new(args: &PeerArgs, me: &str, namespace: &str) -> Result<Forwarder, String> {
        let peers = Peers::new(args, namespace)?;
        let me_header = HeaderValue::from_str(me)
            .map_err(|_| format!("this replica's name {me:?} is no header value"))?;
        // reqwest is built without a TLS provider of its own and wants one even for http://;
        // ring, kube's, as the process default (as `probe` does; installed first elsewhere is
        // fine). No redirects (a peer has no business sending the token elsewhere), no proxy
        // from the environment (peers are reached directly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(args.peer_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the peers' HTTP client: {e}"))?;
        Ok(Forwarder {
            peers,
            me: me.to_string(),
            me_header,
            timeout: args.peer_timeout,
            slots: Arc::new(Semaphore::new(args.max_forwards.max(1))),
            max_forwards: args.max_forwards.max(1),
            client,
        })
    }

    /// `resp`, the local answer to `asked`: marked as this replica's, or, when it is a 421
    /// about a cluster another replica judges, that replica's answer (or why there is none).
    /// `wait`: the gate wait's bound, when the request is one.
    async fn after(
        &self,
        state: &AppState,
        asked: Asked,
        mut resp: Response,
        wait: Option<(Duration, String)>,
    ) -> Response {
        let misdirected = (resp.status() == StatusCode::MISDIRECTED_REQUEST)
            .then(|| resp.extensions().get::<Misdirected>().cloned())
            .flatten();
        let Some(Misdirected { cluster, why }) = misdirected else {
            if resp.status() != StatusCode::MISDIRECTED_REQUEST {
                resp.headers_mut().insert(JUDGED_BY, self.me_header.clone());
            }
            return resp;
        };
        let sharding = state.clusters.sharding();
        let owner = sharding.and_then(|s| s.owner(&cluster));
        let holder = match &owner {
            Some(Owner::Replica { shard }) => sharding.and_then(|s| s.holder(*shard)),
            _ => None,
        };
        let (pod, url) = match route(
            &asked,
            owner.as_ref(),
            holder.as_deref(),
            &self.peers,
            &self.me,
        ) {
            Route::Forward { pod, url } => (pod, url),
            Route::Stay(reason) => {
                state.metrics.record_forward("not_forwarded");
                return ApiError::JudgedElsewhere {
                    cluster,
                    why: format!("{why}; not forwarded: {reason}"),
                }
                .into_response();
            }
        };
        let sent = async {
            let (timeout, _place) = match wait {
                Some((bound, caller)) => {
                    let place = super::limits::waiter(state, &caller)?;
                    (bound + self.timeout, Slot::Waiter(place))
                }
                None => {
                    let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
                        state.metrics.record_forward("busy");
                        ApiError::Overloaded(format!(
                            "{} reads are being forwarded to other replicas already \
                             (--max-forwards); retry",
                            self.max_forwards
                        ))
                    })?;
                    (self.timeout, Slot::Forward(slot))
                }
            };
            let to = Peer {
                pod: &pod,
                url: &url,
                method: asked.method.clone(),
            };
            self.send(state, &cluster, &why, to, asked.passed_on, timeout)
                .await
        };
        sent.await.unwrap_or_else(IntoResponse::into_response)
    }

    async fn send(
        &self,
        state: &AppState,
        cluster: &str,
        why: &str,
        Peer { pod, url, method }: Peer<'_>,
        headers: HeaderMap,
        timeout: Duration,
    ) -> Result<Response, ApiError> {
        let failed = |e: reqwest::Error| {
            let e = e.without_url();
            let text: String = crate::health::printable(&e.to_string())
                .chars()
                .take(300)
                .collect();
            if e.is_timeout() {
                state.metrics.record_forward("peer_timeout");
                ApiError::PeerTimeout(format!(
                    "{why}; forwarded to it (pod {pod}), which did not answer within {}",
                    humantime::format_duration(timeout)
                ))
            } else {
                state.metrics.record_forward("peer_failed");
                ApiError::PeerFailed(format!(
                    "{why}; forwarded to it (pod {pod}), which could not be asked: {text}"
                ))
            }
        };
        let head = method == Method::HEAD;
        let mut answer = self
            .client
            .request(method, url)
            .headers(headers)
            .header(FORWARDED_BY, self.me_header.clone())
            .timeout(timeout)
            .send()
            .await
            .map_err(failed)?;
        let status = answer.status();
        let mut passed = HeaderMap::new();
        for name in PASSED_BACK {
            if let Some(v) = answer.headers().get(name) {
                passed.insert(HeaderName::from_static(name), v.clone());
            }
        }
        // A HEAD's answer has no body but may give the length a GET's would have (RFC 9110
        // §9.3.2), as the peer's does: only the peer knows it, and without it the empty body
        // here would be answered `Content-Length: 0`, a length no GET has.
        if head && let Some(length) = answer.headers().get(header::CONTENT_LENGTH) {
            passed.insert(header::CONTENT_LENGTH, length.clone());
        }
        // A peer that does not say who answered (one without peer addresses of its own) is
        // the pod it was sent to, unless it did not judge it either.
        if status != StatusCode::MISDIRECTED_REQUEST
            && !passed.contains_key(JUDGED_BY)
            && let Ok(v) = HeaderValue::from_str(pod)
        {
            passed.insert(JUDGED_BY, v);
        }
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_BODY {
                state.metrics.record_forward("peer_failed");
                return Err(ApiError::PeerFailed(format!(
                    "{why}; forwarded to it (pod {pod}), whose answer passed {} MiB",
                    MAX_BODY >> 20
                )));
            }
            body.extend_from_slice(&chunk);
        }
        state.metrics.record_forward("forwarded");
        tracing::debug!(cluster, pod, %status, "read forwarded");
        Ok((status, passed, body).into_response())
    }
}

/// What a forward holds while it runs.
enum Slot {
    Forward(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit),
    Waiter(#[allow(dead_code)] super::limits::WaiterPermit),
}

/// Middleware on the quick API routes (inside the request bounds, so a forward holds its
/// request's place and deadline).
pub(crate) async fn reads(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(forwarder) = state.forward.clone() else {
        return next.run(req).await;
    };
    let asked = Asked::of(&req);
    let resp = next.run(req).await;
    forwarder.after(&state, asked, resp, None).await
}

/// Middleware on the gate wait routes: a forwarded wait takes a place among this replica's
/// waiters, under its caller's share, for as long as it is forwarded.
pub(crate) async fn waits(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(forwarder) = state.forward.clone() else {
        return next.run(req).await;
    };
    let asked = Asked::of(&req);
    let peer = req.extensions().get::<super::limits::Peer>().cloned();
    let caller = super::limits::caller(req.headers(), peer.as_ref());
    let timeout = req
        .uri()
        .query()
        .and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("timeout="))
                .map(str::to_string)
        })
        .map_or(Ok(crate::gate::view::DEFAULT_HTTP_WAIT), |t| {
            crate::gate::view::http_wait_timeout(Some(&t))
        })
        // The peer refuses a bad one at once.
        .unwrap_or(crate::gate::view::MAX_HTTP_WAIT);
    let resp = next.run(req).await;
    forwarder
        .after(&state, asked, resp, Some((timeout, caller)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(method: Method, forwarded_by: Option<&str>) -> Asked {
        Asked {
            method,
            forwarded_by: forwarded_by.map(str::to_string),
            path_and_query: "/api/v1/clusters/a/gates/shop/up?x=1".into(),
            passed_on: HeaderMap::new(),
        }
    }

    fn peers(template: &str) -> Peers {
        let args = PeerArgs {
            peer_url: Some(template.into()),
            ..PeerArgs::default()
        };
        Peers::new(&args, "wavegate").unwrap()
    }

    const TEMPLATE: &str = "http://{holder}.wavegate-peers.{namespace}.svc:8080";
    const OWNED_BY_1: Owner = Owner::Replica { shard: 1 };

    #[test]
    fn a_read_goes_to_the_pod_holding_the_shard_lease() {
        let got = route(
            &asked(Method::GET, None),
            Some(&OWNED_BY_1),
            Some("wavegate-1_42-18f3a.r3"),
            &peers(TEMPLATE),
            "wavegate-0",
        );
        assert_eq!(
            got,
            Route::Forward {
                pod: "wavegate-1".into(),
                url: "http://wavegate-1.wavegate-peers.wavegate.svc:8080\
                      /api/v1/clusters/a/gates/shop/up?x=1"
                    .into()
            }
        );
    }

    #[test]
    fn a_head_request_is_forwarded_like_a_get() {
        let got = route(
            &asked(Method::HEAD, None),
            Some(&OWNED_BY_1),
            Some("wavegate-1_42-18f3a.r3"),
            &peers(TEMPLATE),
            "wavegate-0",
        );
        assert!(
            matches!(got, Route::Forward { ref pod, .. } if pod == "wavegate-1"),
            "{got:?}"
        );
    }

    /// One hop: a replica that gets a forwarded request about a cluster it does not judge
    /// (the cluster moved meanwhile) answers 421 itself, or two replicas that each think the
    /// other judges it would bounce the request between them.
    #[test]
    fn a_forwarded_request_is_never_forwarded_again() {
        let got = route(
            &asked(Method::GET, Some("wavegate-2")),
            Some(&OWNED_BY_1),
            Some("wavegate-1_42-18f3a.r3"),
            &peers(TEMPLATE),
            "wavegate-0",
        );
        assert!(
            matches!(&got, Route::Stay(why) if why.contains("forwarded by \"wavegate-2\"")),
            "{got:?}"
        );
    }

    #[test]
    fn only_reads_are_forwarded() {
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            let got = route(
                &asked(method.clone(), None),
                Some(&OWNED_BY_1),
                Some("wavegate-1_42-18f3a.r3"),
                &peers(TEMPLATE),
                "wavegate-0",
            );
            assert_eq!(
                got,
                Route::Stay("only reads are forwarded".into()),
                "{method}"
            );
        }
    }

    /// Anyone who may update Leases in the namespace writes the holder: a name that would move
    /// the host (and with it the caller's bearer token) anywhere else is not forwarded to.
    #[test]
    fn a_hostile_holder_name_is_never_put_in_an_address() {
        for hostile in [
            "evil.example.com_1-a.r3",
            "evil.example.com:80/x_1",
            "attacker@evil_1",
            "wavegate-1#@evil.example.com",
            "wavegate-1/../../x_1",
            "Wavegate-1_1",
            "-wavegate_1",
            "wavegate-_1",
            "wavegate-1%2f_1",
            "wave gate_1",
            "wavegate\u{2028}1_1",
            "_1-a.r3",
            "",
            &"a".repeat(64),
        ] {
            let got = route(
                &asked(Method::GET, None),
                Some(&OWNED_BY_1),
                Some(hostile),
                &peers(TEMPLATE),
                "wavegate-0",
            );
            assert!(
                matches!(&got, Route::Stay(why) if why.contains("does not name a pod")),
                "{hostile:?}: {got:?}"
            );
        }
        assert_eq!(holder_pod(&"a".repeat(63)), Ok("a".repeat(63).as_str()));
    }

    #[test]
    fn no_owner_no_holder_or_no_address_stays_421() {
        let p = peers(TEMPLATE);
        let get = asked(Method::GET, None);
        let nobody = Owner::Nobody {
            why: "paused".into(),
        };
        for (owner, holder, me, want) in [
            (
                Some(&nobody),
                Some("wavegate-1_1"),
                "wavegate-0",
                "no other replica",
            ),
            (
                Some(&Owner::ThisReplica),
                None,
                "wavegate-0",
                "no other replica",
            ),
            (None, None, "wavegate-0", "no other replica"),
            (Some(&OWNED_BY_1), None, "wavegate-0", "no live holder"),
            (
                Some(&OWNED_BY_1),
                Some("wavegate-0_1"),
                "wavegate-0",
                "this replica",
            ),
        ] {
            let got = route(&get, owner, holder, &p, me);
            assert!(
                matches!(&got, Route::Stay(why) if why.contains(want)),
                "{owner:?} {holder:?}: {got:?}"
            );
        }
        let fixed_only = Peers::new(
            &PeerArgs {
                peers: vec!["r1=http://127.0.0.1:18091".into()],
                ..PeerArgs::default()
            },
            "wavegate",
        )
        .unwrap();
        let got = route(&get, Some(&OWNED_BY_1), Some("r2_1"), &fixed_only, "r0");
        assert!(
            matches!(&got, Route::Stay(why) if why.contains("no address")),
            "{got:?}"
        );
        let got = route(&get, Some(&OWNED_BY_1), Some("r1_1"), &fixed_only, "r0");
        assert!(
            matches!(&got, Route::Forward { url, .. } if url.starts_with("http://127.0.0.1:18091/api/")),
            "{got:?}"
        );
    }

    #[test]
    fn a_peer_address_is_refused_unless_holder_stands_in_its_host() {
        let bad = |t: &str| {
            let args = PeerArgs {
                peer_url: Some(t.into()),
                ..PeerArgs::default()
            };
            Peers::new(&args, "ns").unwrap_err()
        };
        for t in [
            "https://{holder}.peers.svc",
            "http://peers.svc/{holder}",
            "http://{holder}.{holder}.svc",
            "http://user@{holder}.svc",
            "http://{holder}.svc/?x=1",
            "http://{holder}.{other}.svc",
            "{holder}.svc",
        ] {
            let e = bad(t);
            assert!(e.contains("--peer-url"), "{t}: {e}");
        }
        let bad_fixed = |p: &str| {
            let args = PeerArgs {
                peers: vec![p.into()],
                ..PeerArgs::default()
            };
            Peers::new(&args, "ns").unwrap_err()
        };
        for p in [
            "r1",
            "R1=http://x",
            "r1=ftp://x",
            "r1=http://",
            "r1=http://a@b",
        ] {
            let e = bad_fixed(p);
            assert!(e.contains("--peer"), "{p}: {e}");
        }
    }

    /// The owner's answer comes back as it gave it — status, body, ETag, Wavegate-Now,
    /// Content-Type — and nothing else of its headers (a cookie here); the request reaches it
    /// marked as forwarded, with the caller's token and If-None-Match.
    #[tokio::test]
    async fn a_peers_answer_passes_through_with_only_the_headers_that_describe_it() {
        use axum::routing::get;
        let peer = axum::Router::new().route(
            "/api/v1/gates",
            get(|h: HeaderMap| async move {
                let seen = |k: &str| {
                    h.get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_string()
                };
                let body = [
                    seen("authorization"),
                    seen("if-none-match"),
                    seen(FORWARDED_BY),
                ];
                (
                    StatusCode::ACCEPTED,
                    [
                        ("etag", "W/\"abc\""),
                        ("wavegate-now", "2026-12-06T08:00:00Z"),
                        ("content-type", "application/json"),
                        ("set-cookie", "session=x"),
                    ],
                    body.join("|"),
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let served = tokio::spawn(async move { axum::serve(listener, peer).await });
        let args = PeerArgs {
            peers: vec![format!("r1=http://{at}")],
            peer_timeout: Duration::from_secs(5),
            max_forwards: 4,
            ..PeerArgs::default()
        };
        let forwarder = Forwarder::new(&args, "r0", "ns").unwrap();
        let state = crate::api::tests::state(Duration::from_millis(10));
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer t"));
        headers.insert("if-none-match", HeaderValue::from_static("W/\"abc\""));
        let resp = forwarder
            .send(
                &state,
                "a",
                "why",
                Peer {
                    pod: "r1",
                    url: &format!("http://{at}/api/v1/gates"),
                    method: Method::GET,
                },
                headers,
                args.peer_timeout,
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        let h = resp.headers();
        assert_eq!(h["etag"], "W/\"abc\"");
        assert_eq!(h["wavegate-now"], "2026-12-06T08:00:00Z");
        assert_eq!(h["content-type"], "application/json");
        // The peer named no one: it is the pod it was sent to.
        assert_eq!(h[JUDGED_BY], "r1");
        assert!(h.get("set-cookie").is_none(), "{h:?}");
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(&body[..], b"Bearer t|W/\"abc\"|r0");
        // HEAD is asked as HEAD: the same status and headers, no body.
        let head = forwarder
            .send(
                &state,
                "a",
                "why",
                Peer {
                    pod: "r1",
                    url: &format!("http://{at}/api/v1/gates"),
                    method: Method::HEAD,
                },
                HeaderMap::new(),
                args.peer_timeout,
            )
            .await
            .unwrap();
        assert_eq!(head.status(), StatusCode::ACCEPTED);
        assert_eq!(head.headers()["etag"], "W/\"abc\"");
        let body = axum::body::to_bytes(head.into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(body.is_empty(), "{body:?}");
        served.abort();
    }

    /// A HEAD forwarded to a peer answers what the peer's does: no body, and the length the
    /// GET's body has, never a `Content-Length: 0` that no GET of it answers.
    #[tokio::test]
    async fn a_forwarded_head_gives_the_length_of_the_get() {
        use axum::routing::get;
        use tower::ServiceExt;
        let peer = axum::Router::new().route("/api/v1/gates", get(|| async { "{\"gates\":[]}" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let served = tokio::spawn(async move { axum::serve(listener, peer).await });
        let args = PeerArgs {
            peers: vec![format!("r1=http://{at}")],
            peer_timeout: Duration::from_secs(5),
            ..PeerArgs::default()
        };
        let forwarder = Arc::new(Forwarder::new(&args, "r0", "ns").unwrap());
        let state = crate::api::tests::state(Duration::from_millis(10));
        // Answered through a router, as a forwarded read is: axum fills in a length only where
        // the answer gives none.
        let local = axum::Router::new().route(
            "/api/v1/gates",
            get(move |method: Method| async move {
                let to = Peer {
                    pod: "r1",
                    url: &format!("http://{at}/api/v1/gates"),
                    method,
                };
                forwarder
                    .send(&state, "a", "why", to, HeaderMap::new(), args.peer_timeout)
                    .await
                    .unwrap()
            }),
        );
        let ask = |method: Method| {
            let request = axum::http::Request::builder()
                .method(method)
                .uri("/api/v1/gates")
                .body(axum::body::Body::empty())
                .unwrap();
            local.clone().oneshot(request)
        };
        let got = ask(Method::GET).await.unwrap();
        let got = axum::body::to_bytes(got.into_body(), usize::MAX)
            .await
            .unwrap();
        let head = ask(Method::HEAD).await.unwrap();
        assert_eq!(head.status(), StatusCode::OK);
        assert_eq!(
            head.headers().get(header::CONTENT_LENGTH),
            Some(&HeaderValue::from(got.len())),
            "{:?}",
            head.headers()
        );
        let body = axum::body::to_bytes(head.into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(body.is_empty(), "{body:?}");
        served.abort();
    }

    /// A peer that does not answer in time is 504 within the timeout, not a hang; one that
    /// refuses the connection is 502; neither is ever a verdict.
    #[tokio::test]
    async fn a_silent_peer_is_504_within_the_timeout_and_a_closed_one_502() {
        // Accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_at = silent.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                open.push(s);
            }
        });
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let args = PeerArgs {
            peers: vec![
                format!("r1=http://{silent_at}"),
                format!("r2=http://{closed}"),
            ],
            peer_timeout: Duration::from_millis(300),
            max_forwards: 4,
            ..PeerArgs::default()
        };
        let forwarder = Forwarder::new(&args, "r0", "ns").unwrap();
        let state = crate::api::tests::state(Duration::from_millis(10));
        let started = std::time::Instant::now();
        let e = forwarder
            .send(
                &state,
                "a",
                "cluster \"a\" is judged by wavegate replica 1",
                Peer {
                    pod: "r1",
                    url: &format!("http://{silent_at}/api/v1/gates"),
                    method: Method::GET,
                },
                HeaderMap::new(),
                args.peer_timeout,
            )
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
        let e = forwarder
            .send(
                &state,
                "a",
                "cluster \"a\" is judged by wavegate replica 2",
                Peer {
                    pod: "r2",
                    url: &format!("http://{closed}/api/v1/gates"),
                    method: Method::GET,
                },
                HeaderMap::new(),
                args.peer_timeout,
            )
            .await
            .unwrap_err();
        let message = e.to_string();
        assert_eq!(e.into_response().status(), StatusCode::BAD_GATEWAY);
        assert!(message.contains("pod r2"), "{message}");
        held.abort();
    }
}
