//! Asking CockroachDB nodes about themselves over HTTP — the only network I/O for the
//! CockroachDB check ([`crate::checks::cockroach`] plans and judges; this module only asks).
//!
//! Per pod, concurrently where independent, all bounded by one timeout:
//! - `GET /health?ready=1`: 200 when the node accepts SQL clients, 503 with the gRPC-gateway
//!   error JSON (`{"error": "node is waiting for cluster initialization", "code": 14, …}`)
//!   otherwise (cockroach `pkg/server/admin.go`, `checkReadinessForHealthCheck`).
//!   Unauthenticated by design ("Health is non-privileged and non-authenticated").
//! - `GET /_status/vars`: Prometheus text; `node_id` (the node's ID as the value, addresses as
//!   labels, `MetricsRecorder.AddNode`) and `liveness_livenodes` ("Number of live nodes in the
//!   cluster (will be 0 if this node is not itself live)"). Unauthenticated.
//! - `GET /_admin/v1/cluster`: JSON with camelCase `clusterId`. Open in insecure clusters; in
//!   secure ones it sits behind the DB Console session cookie (`authenticationMux` in
//!   `pkg/server/authserver/authentication.go` reads only the `session` cookie — the
//!   `X-Cockroach-API-Session` header is honoured only under `/api/v2/`). So with credentials we
//!   log in the way the DB Console does, `POST /login` with JSON `{username, password}`
//!   (`serverpb/authentication.proto`, `UserLogin`), take the `session` cookie from
//!   `Set-Cookie`, read the cluster, and revoke the session with `GET /logout` so probes do not
//!   pile up rows in `system.web_sessions`.
//!
//! Nothing here panics: every failure becomes [`Readiness::Unreachable`] or a note.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;

use crate::checks::cockroach::{PodProbe, PodText, ProbeTarget, Readiness};

/// A SQL user allowed to log in to the DB Console. Loaded by the caller from a mounted Secret
/// file; never logged, never put in a message (the username neither: it is half a credential).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &"<redacted>")
            .field("password", &"<redacted>")
            .finish()
    }
}

/// How to reach the nodes' HTTP port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheme {
    /// Insecure clusters (`--insecure`, `tlsEnabled: false`).
    #[default]
    Http,
    /// Secure clusters. With a CA, the node certificate is verified against the cluster's
    /// Service name ([`TlsSettings::server_name`]) while connecting to the pod IP.
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The DNS name every node certificate carries, for a CrdbCluster `{name}` in `{namespace}`:
/// both operators and the Helm chart's self-signer put `<cluster>-public.<ns>.svc.<domain>` in
/// the node certificate's SANs (cockroach-operator `pkg/actor/generate_cert.go`, helm-charts
/// `pkg/generator/generate_cert.go`), next to `localhost`, `127.0.0.1` and the discovery
/// Service wildcards — never the pod IP.
pub(crate) const DEFAULT_SERVER_NAME: &str = "{name}-public.{namespace}.svc.cluster.local";

/// TLS for [`Scheme::Https`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// The cluster CA (PEM), e.g. `ca.crt` from the operator's node Secret.
    pub ca_pem: Option<Vec<u8>>,
    /// Skip certificate verification. Only for an explicit opt-in; readiness and node counts
    /// carry no secrets, and credentials are never sent with this on.
    pub accept_invalid_certs: bool,
    /// Name the node certificate must be valid for, with `{name}` and `{namespace}` replaced
    /// by the CrdbCluster's; `None` means [`DEFAULT_SERVER_NAME`].
    pub server_name: Option<String>,
}

impl TlsSettings {
    /// The name a node of CrdbCluster `namespace/name` must prove it is.
    pub(crate) fn server_name_for(&self, namespace: &str, name: &str) -> String {
        self.server_name
            .as_deref()
            .unwrap_or(DEFAULT_SERVER_NAME)
            .replace("{name}", name)
            .replace("{namespace}", namespace)
    }
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field(
                "ca_pem",
                &self.ca_pem.as_ref().map(|p| format!("{} bytes", p.len())),
            )
            .field("accept_invalid_certs", &self.accept_invalid_certs)
            .field("server_name", &self.server_name)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cluster CA is not valid PEM: {0}")]
    InvalidCa(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
    #[error(
        "CockroachDB credentials are sent only over TLS that verifies the node certificate: \
         {0}"
    )]
    CredentialsNeedVerifiedTls(&'static str),
}

/// Bounds on what a pod may make wavegate read: a real `/_status/vars` is a few hundred KiB,
/// the other answers are tiny.
const MAX_VARS_BYTES: usize = 4 << 20;
const MAX_SMALL_BYTES: usize = 64 << 10;
const MAX_VERIFIED_CLIENTS: usize = 64;

/// At most this many pods are probed at once, across all clusters and asks (and all clusters
/// wavegate judges: every [`Prober`] shares them). A 100-node cluster judged cold is then ~7
/// waves of probe rounds, not 300 connections opened at once against the nodes (and wavegate's
/// own sockets); a round waiting for its turn does not use up its timeout. Each round is at
/// most three concurrent requests (and, with credentials, a login before and a logout after
/// the cluster read). The slots are shared fairly ([`ProbeRounds`]).
pub const MAX_CONCURRENT_ROUNDS: usize = 16;

/// The probe rounds in flight, shared fairly between CrdbClusters: a freed slot goes to a
/// waiting round of the destination cluster (a [`Prober`]) holding the fewest slots, and within
/// it of the CrdbCluster holding the fewest, oldest first. First come, first served would let
/// a CrdbCluster whose pods blackhole take every slot for as many probe timeouts as it has
/// pods over the bound, and every other cluster's verdict would wait behind them; shared like
/// this, another cluster waits at most for the slots the blackholed one held when it asked —
/// one probe timeout — and then gets its share.
pub struct ProbeRounds {
    capacity: usize,
    state: Mutex<RoundsState>,
}

/// Whose round: the destination cluster (one per [`Prober`]) and the CrdbCluster in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Flow {
    source: u64,
    cluster: String,
}

#[derive(Default)]
struct RoundsState {
    in_use: usize,
    by_flow: HashMap<Flow, usize>,
    by_source: HashMap<u64, usize>,
    waiting: std::collections::VecDeque<Waiter>,
}

struct Waiter {
    flow: Flow,
    turn: tokio::sync::oneshot::Sender<Turn>,
}

/// One slot, held while a round runs; given back when dropped.
struct Turn {
    rounds: Option<Arc<ProbeRounds>>,
    flow: Flow,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(rounds) = self.rounds.take() {
            let mut state = rounds.lock();
            state.give_back(&self.flow);
            rounds.hand_out(&mut state);
        }
    }
}

impl RoundsState {
    fn take(&mut self, flow: &Flow) {
        self.in_use += 1;
        *self.by_flow.entry(flow.clone()).or_default() += 1;
        *self.by_source.entry(flow.source).or_default() += 1;
    }

    fn give_back(&mut self, flow: &Flow) {
        self.in_use = self.in_use.saturating_sub(1);
        fn down<K: Eq + std::hash::Hash>(map: &mut HashMap<K, usize>, key: &K) {
            if let Some(n) = map.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
        down(&mut self.by_flow, flow);
        down(&mut self.by_source, &flow.source);
    }

    /// The waiting round to go next: fewest slots held by its destination cluster, then by
    /// its CrdbCluster, then the oldest.
    fn next(&self) -> Option<usize> {
        let held = |w: &Waiter| {
            (
                self.by_source.get(&w.flow.source).copied().unwrap_or(0),
                self.by_flow.get(&w.flow).copied().unwrap_or(0),
            )
        };
        (0..self.waiting.len()).min_by_key(|&i| (held(&self.waiting[i]), i))
    }
}

impl ProbeRounds {
    pub fn new(capacity: usize) -> Arc<ProbeRounds> {
        Arc::new(ProbeRounds {
            capacity: capacity.max(1),
            state: Mutex::default(),
        })
    }

    /// The rounds every [`Prober`] of this process shares.
    pub fn shared() -> Arc<ProbeRounds> {
        static SHARED: std::sync::OnceLock<Arc<ProbeRounds>> = std::sync::OnceLock::new();
        SHARED
            .get_or_init(|| ProbeRounds::new(MAX_CONCURRENT_ROUNDS))
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RoundsState> {
        crate::locks::lock(&self.state)
    }

    /// Wait for a slot for a round of `flow`. A caller that stops waiting leaves no slot
    /// behind: a slot handed to it meanwhile is given back when its `Turn` is dropped.
    async fn turn(self: &Arc<Self>, flow: Flow) -> Turn {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        {
            let mut state = self.lock();
            state.waiting.push_back(Waiter {
                flow: flow.clone(),
                turn: sender,
            });
            self.hand_out(&mut state);
        }
        // The sender is dropped unanswered only if the waiter list were dropped, which
        // `self` keeps; a round without a slot is still bounded by its timeout.
        receiver.await.unwrap_or(Turn { rounds: None, flow })
    }

    /// Hand free slots to waiting rounds, fairly.
    fn hand_out(self: &Arc<Self>, state: &mut RoundsState) {
        // Rounds whose caller stopped waiting are not served.
        state.waiting.retain(|w| !w.turn.is_closed());
        while state.in_use < self.capacity {
            let Some(i) = state.next() else { break };
            let Some(w) = state.waiting.remove(i) else {
                break;
            };
            state.take(&w.flow);
            let turn = Turn {
                rounds: Some(self.clone()),
                flow: w.flow.clone(),
            };
            if let Err(mut unwanted) = w.turn.send(turn) {
                // Its caller went away just now: the slot is free again (given back here,
                // under the lock, not by the Turn's drop).
                unwanted.rounds = None;
                state.give_back(&w.flow);
            }
        }
    }

    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.lock().in_use
    }
}

/// Asks CockroachDB pods about themselves. Holds the one secret wavegate has, and decides per
/// pod whether it may have it: only a pod the plan proved is controlled by the named
/// CrdbCluster ([`ProbeTarget::controlled_by_cluster`]), and only over TLS whose node
/// certificate chains to the configured cluster CA and names that cluster's Service.
pub struct Prober {
    scheme: Scheme,
    tls: TlsSettings,
    /// For pods of no particular cluster identity: plain HTTP, or HTTPS as configured.
    client: reqwest::Client,
    /// Roots for name-verified TLS, when a CA is configured.
    roots: Option<Arc<RootCertStore>>,
    credentials: Option<Credentials>,
    /// One name-verifying client per server name (one per CrdbCluster), built on first use.
    verified: Mutex<HashMap<String, reqwest::Client>>,
    timeout: Duration,
    /// Slots for probe rounds, shared with every other prober of the process.
    rounds: Arc<ProbeRounds>,
    /// This prober's destination cluster, as the fair share of [`ProbeRounds`] knows it.
    source: u64,
}

impl Prober {
    /// Refuses credentials without verified TLS: a configuration that would send the password
    /// in clear text, or to whoever answers on a pod IP, fails at startup instead.
    pub fn new(
        scheme: Scheme,
        tls: TlsSettings,
        credentials: Option<Credentials>,
        timeout: Duration,
    ) -> Result<Prober, ProbeError> {
        // reqwest is built without a TLS provider of its own; use ring, the one kube uses, as
        // the process default. Another caller having installed it first is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let roots = match &tls.ca_pem {
            Some(pem) => Some(Arc::new(roots(pem)?)),
            None => None,
        };
        if credentials.is_some() {
            if scheme != Scheme::Https {
                return Err(ProbeError::CredentialsNeedVerifiedTls(
                    "set --crdb-scheme https",
                ));
            }
            if roots.is_none() {
                return Err(ProbeError::CredentialsNeedVerifiedTls(
                    "set --crdb-ca-file to the cluster CA",
                ));
            }
            if tls.accept_invalid_certs {
                return Err(ProbeError::CredentialsNeedVerifiedTls(
                    "--crdb-insecure-skip-verify cannot be combined with credentials",
                ));
            }
        }
        let mut builder = base_client();
        if let Some(pem) = &tls.ca_pem {
            let ca = reqwest::Certificate::from_pem(pem)
                .map_err(|e| ProbeError::InvalidCa(e.to_string()))?;
            builder = builder.tls_certs_only([ca]);
        }
        if tls.accept_invalid_certs {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        Ok(Prober {
            scheme,
            client: builder.build().map_err(ProbeError::Client)?,
            roots,
            tls,
            credentials,
            verified: Mutex::default(),
            timeout,
            rounds: ProbeRounds::shared(),
            source: next_source(),
        })
    }

    /// This prober with rounds of its own instead of the process's.
    pub fn with_rounds(mut self, rounds: Arc<ProbeRounds>) -> Prober {
        self.rounds = rounds;
        self
    }

    /// Probe one pod of CrdbCluster `namespace/cluster`; returns within the timeout whatever
    /// the pod does.
    pub async fn probe(&self, namespace: &str, cluster: &str, target: &ProbeTarget) -> PodProbe {
        let verified = match (self.scheme, &self.roots) {
            (Scheme::Https, Some(roots)) if !self.tls.accept_invalid_certs => {
                let name = self.tls.server_name_for(namespace, cluster);
                match self.verified_client(&name, roots) {
                    Ok(client) => Some(client),
                    Err(e) => {
                        return PodProbe::bare(
                            &target.pod,
                            Readiness::Unreachable(bounded(&e.to_string())),
                        );
                    }
                }
            }
            _ => None,
        };
        let (client, credentials, withheld) = match (&self.credentials, verified) {
            (Some(credentials), Some(client)) if target.controlled_by_cluster => {
                (client, Some(credentials), None)
            }
            (Some(_), client) => (
                client.unwrap_or_else(|| self.client.clone()),
                None,
                Some(format!(
                    "cluster ID not read: the pod is not controlled by CrdbCluster \
                     {namespace}/{cluster}, so no credentials are sent to it"
                )),
            ),
            (None, client) => (client.unwrap_or_else(|| self.client.clone()), None, None),
        };
        let flow = Flow {
            source: self.source,
            cluster: format!("{namespace}/{cluster}"),
        };
        let _turn = self.rounds.turn(flow).await;
        let mut probe =
            probe_pod_with(&client, self.scheme, target, credentials, self.timeout).await;
        if let Some(note) = withheld
            && !matches!(probe.readiness, Readiness::Unreachable(_))
        {
            probe.notes.push(note);
        }
        probe
    }

    fn verified_client(
        &self,
        server_name: &str,
        roots: &Arc<RootCertStore>,
    ) -> Result<reqwest::Client, ProbeError> {
        let mut clients = crate::locks::lock(&self.verified);
        if let Some(client) = clients.get(server_name) {
            return Ok(client.clone());
        }
        let client = verified_client(server_name, roots.clone())?;
        // One per CrdbCluster that exists; the bound only keeps a namespace full of them from
        // growing the map without end.
        if clients.len() >= MAX_VERIFIED_CLIENTS {
            clients.clear();
        }
        clients.insert(server_name.to_string(), client.clone());
        Ok(client)
    }
}

/// A number per [`Prober`]: one per destination cluster.
fn next_source() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// No redirects (a node has no business sending us elsewhere), no proxies from the environment
/// (probes go straight to pod IPs).
fn base_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(30))
}

fn roots(pem: &[u8]) -> Result<RootCertStore, ProbeError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| ProbeError::InvalidCa(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| ProbeError::InvalidCa(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(ProbeError::InvalidCa("no certificate in the file".into()));
    }
    Ok(roots)
}

/// A client that connects to pod IPs but accepts only a certificate chaining to `roots` and
/// valid for `server_name` — the identity every node of the cluster shares.
fn verified_client(
    server_name: &str,
    roots: Arc<RootCertStore>,
) -> Result<reqwest::Client, ProbeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let name = ServerName::try_from(server_name.to_string()).map_err(|_| {
        ProbeError::CredentialsNeedVerifiedTls("the TLS server name is not a valid DNS name")
    })?;
    let inner = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| ProbeError::InvalidCa(e.to_string()))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeError::InvalidCa(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ClusterNameVerifier { inner, name }))
        .with_no_client_auth();
    base_client()
        .tls_backend_preconfigured(config)
        .build()
        .map_err(ProbeError::Client)
}

/// WebPKI verification with a fixed server name instead of the URL's host (the pod IP, which
/// no node certificate names). Chain, validity period, key usage and signatures are checked
/// exactly as for any HTTPS server.
#[derive(Debug)]
struct ClusterNameVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for ClusterNameVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _connected_to: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Probe one pod with `client`. Credentials, when given, are used as they are: deciding
/// whether this pod may have them is [`Prober::probe`]'s job.
async fn probe_pod_with(
    client: &reqwest::Client,
    scheme: Scheme,
    target: &ProbeTarget,
    credentials: Option<&Credentials>,
    timeout: Duration,
) -> PodProbe {
    let Ok(ip) = target.ip.parse::<IpAddr>() else {
        return PodProbe::bare(
            &target.pod,
            Readiness::Unreachable("pod IP is not an IP address".to_string()),
        );
    };
    // SocketAddr puts IPv6 addresses in brackets, as a URL needs.
    let base = format!("{}://{}", scheme.as_str(), SocketAddr::new(ip, target.port));
    let ask = async {
        let (readiness, vars, cluster) = tokio::join!(
            health(client, &base),
            status_vars(client, &base),
            cluster_id(client, &base, credentials),
        );
        let mut probe = PodProbe::bare(&target.pod, readiness);
        match vars {
            Ok(vars) => {
                probe.node_id = vars.node_id;
                probe.live_nodes = vars.live_nodes;
            }
            Err(e) => probe.notes.push(format!("/_status/vars: {e}")),
        }
        match cluster {
            Ok(id) => probe.cluster_id = id,
            Err(e) => probe.notes.push(format!("cluster ID: {e}")),
        }
        if matches!(probe.readiness, Readiness::Unreachable(_)) {
            // The same transport error three times says nothing new.
            probe.notes.clear();
        }
        probe
    };
    match tokio::time::timeout(timeout, ask).await {
        Ok(probe) => probe,
        Err(_) => PodProbe::bare(
            &target.pod,
            Readiness::Unreachable(format!("no answer within {}", seconds(timeout))),
        ),
    }
}

fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// What was wrong with a pod's answer. The text never quotes what the pod sent: it is shown
/// in verdicts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum AnswerError {
    /// [`transport_error`]'s bounded text.
    #[error("{0}")]
    Transport(String),
    #[error("answer longer than {0} bytes")]
    TooLong(usize),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("{0}: unterminated labels")]
    UnterminatedLabels(&'static str),
    #[error("{0}: no value")]
    NoValue(&'static str),
    #[error("{0}: value is not a number")]
    NotANumber(&'static str),
    #[error("not Prometheus text")]
    NotPrometheus,
    #[error("login rejected (HTTP {0})")]
    LoginRejected(u16),
    #[error("login answered without a session cookie")]
    NoSessionCookie,
    #[error("/_admin/v1/cluster answered HTTP {0}")]
    ClusterStatus(u16),
    #[error("/_admin/v1/cluster is not the expected JSON ({0})")]
    ClusterJson(&'static str),
    #[error("/_admin/v1/cluster has no clusterId")]
    NoClusterId,
    #[error("/_admin/v1/cluster: clusterId is not a UUID")]
    NotAUuid,
}

fn transport(error: reqwest::Error) -> AnswerError {
    AnswerError::Transport(transport_error(&error))
}

/// The body, up to `limit` bytes; a longer one is an error, not a truncated answer.
async fn body(mut response: reqwest::Response, limit: usize) -> Result<String, AnswerError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if bytes.len() + chunk.len() > limit {
            return Err(AnswerError::TooLong(limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

async fn health(client: &reqwest::Client, base: &str) -> Readiness {
    let response = match client.get(format!("{base}/health?ready=1")).send().await {
        Ok(r) => r,
        Err(e) => return Readiness::Unreachable(transport_error(&e)),
    };
    let status = response.status();
    if status == StatusCode::OK {
        return Readiness::Ready;
    }
    match body(response, MAX_SMALL_BYTES).await {
        Ok(body) => not_ready_reason(status, &body),
        Err(e) => Readiness::Unreachable(e.to_string()),
    }
}

/// CockroachDB's reason from a non-200 `/health?ready=1` body, in the pod's own words.
fn not_ready_reason(status: StatusCode, body: &str) -> Readiness {
    #[derive(Deserialize)]
    struct GatewayError {
        #[serde(default)]
        message: String,
        #[serde(default)]
        error: String,
    }
    let reason = serde_json::from_str::<GatewayError>(body)
        .ok()
        .map(|e| {
            if e.message.is_empty() {
                e.error
            } else {
                e.message
            }
        })
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| body.to_string());
    let said = PodText::new(&reason);
    if said.as_str().is_empty() {
        Readiness::NotReady(format!("HTTP {} without a reason", status.as_u16()))
    } else {
        Readiness::Declined(said)
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct StatusVars {
    node_id: Option<i64>,
    live_nodes: Option<i64>,
}

async fn status_vars(client: &reqwest::Client, base: &str) -> Result<StatusVars, AnswerError> {
    let response = client
        .get(format!("{base}/_status/vars"))
        .send()
        .await
        .map_err(transport)?;
    if !response.status().is_success() {
        return Err(AnswerError::Status(response.status().as_u16()));
    }
    parse_status_vars(&body(response, MAX_VARS_BYTES).await?)
}

/// `node_id` and `liveness_livenodes` from Prometheus text exposition. Only unlabelled or
/// labelled samples of exactly these names count; anything else is skipped. The error never
/// quotes the body.
fn parse_status_vars(body: &str) -> Result<StatusVars, AnswerError> {
    let mut vars = StatusVars::default();
    let mut samples = 0usize;
    for line in body.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        samples += 1;
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let (name, rest) = line.split_at(name_end);
        let (slot, name) = match name {
            "node_id" => (&mut vars.node_id, "node_id"),
            "liveness_livenodes" => (&mut vars.live_nodes, "liveness_livenodes"),
            _ => continue,
        };
        let rest = match rest.strip_prefix('{') {
            Some(labels) => after_labels(labels).ok_or(AnswerError::UnterminatedLabels(name))?,
            None => rest,
        };
        let value = rest
            .split_whitespace()
            .next()
            .ok_or(AnswerError::NoValue(name))?;
        let value: f64 = value.parse().map_err(|_| AnswerError::NotANumber(name))?;
        if slot.is_none() && value.is_finite() && value.fract() == 0.0 && value.abs() < 9.0e15 {
            // Whole numbers well inside i64; the cast cannot truncate.
            *slot = Some(value as i64);
        }
    }
    if samples == 0 && !body.trim().is_empty() && vars == StatusVars::default() {
        return Err(AnswerError::NotPrometheus);
    }
    Ok(vars)
}

/// What follows a sample's label set, given the text after its `{`. Label values are quoted,
/// and a `}` or `"` inside one is no delimiter: the exposition format escapes only `\\`, `\"`
/// and `\n` in them (Prometheus' `docs/instrumenting/exposition_formats.md`), so a value such
/// as `"}2"` must not end the set and be read as the sample's value. `None`: the line ends
/// inside the set (a value broken by a raw line break, or no closing brace).
fn after_labels(labels: &str) -> Option<&str> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(&labels[i + 1..]),
            _ => {}
        }
    }
    None
}

/// The cluster ID, if the node will tell. `Ok(None)`: it wants a login we do not have.
async fn cluster_id(
    client: &reqwest::Client,
    base: &str,
    credentials: Option<&Credentials>,
) -> Result<Option<String>, AnswerError> {
    let session = match credentials {
        Some(credentials) => Some(login(client, base, credentials).await?),
        None => None,
    };
    let mut request = client.get(format!("{base}/_admin/v1/cluster"));
    if let Some(session) = &session {
        request = request.header(COOKIE, session.as_str());
    }
    let outcome = async {
        let response = request.send().await.map_err(transport)?;
        match response.status() {
            // Secure cluster and no credentials for this pod: the ID is simply unknown.
            StatusCode::UNAUTHORIZED if session.is_none() => Ok(None),
            status if status.is_success() => {
                parse_cluster_id(&body(response, MAX_SMALL_BYTES).await?).map(Some)
            }
            status => Err(AnswerError::ClusterStatus(status.as_u16())),
        }
    }
    .await;
    if let Some(session) = &session {
        // Best effort: an unrevoked session merely expires later.
        let _ = client
            .get(format!("{base}/logout"))
            .header(COOKIE, session.as_str())
            .send()
            .await;
    }
    outcome
}

/// Log in like the DB Console; returns the `Cookie` header value carrying the session.
async fn login(
    client: &reqwest::Client,
    base: &str,
    credentials: &Credentials,
) -> Result<String, AnswerError> {
    let body = serde_json::json!({
        "username": credentials.username,
        "password": credentials.password,
    });
    let response = client
        .post(format!("{base}/login"))
        .json(&body)
        .send()
        .await
        .map_err(transport)?;
    if !response.status().is_success() {
        // The body may echo the username; the status says enough.
        return Err(AnswerError::LoginRejected(response.status().as_u16()));
    }
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(session_cookie)
        .ok_or(AnswerError::NoSessionCookie)
}

/// `session=<value>` from one `Set-Cookie` header, attributes dropped.
fn session_cookie(set_cookie: &str) -> Option<String> {
    let pair = set_cookie.split(';').next()?.trim();
    let (name, value) = pair.split_once('=')?;
    (name == "session" && !value.is_empty()).then(|| format!("session={value}"))
}

/// `clusterId`, which must look like the UUID it is: it is shown in verdicts, so nothing else
/// a pod writes there gets through.
fn parse_cluster_id(body: &str) -> Result<String, AnswerError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ClusterResponse {
        #[serde(default)]
        cluster_id: String,
    }
    let parsed: ClusterResponse =
        serde_json::from_str(body).map_err(|e| AnswerError::ClusterJson(e.classify_name()))?;
    let id = parsed.cluster_id;
    if id.is_empty() {
        Err(AnswerError::NoClusterId)
    } else if id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        Ok(id)
    } else {
        Err(AnswerError::NotAUuid)
    }
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected shape",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

/// Our own words, with room for a library's: one line, bounded. A TLS error can quote names
/// from the pod's certificate, so even these are not taken as they are.
fn bounded(text: &str) -> String {
    PodText::new(text).as_str().to_string()
}

/// A transport error without the URL (reqwest's Display includes it; the pod is named anyway).
fn transport_error(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else if error.is_decode() || error.is_body() {
        "bad response body"
    } else {
        "request failed"
    };
    let mut root = std::error::Error::source(error);
    while let Some(next) = root.and_then(std::error::Error::source) {
        root = Some(next);
    }
    match root {
        Some(root) => bounded(&format!("{kind}: {root}")),
        None => kind.to_string(),
    }
}

#[cfg(test)]
mod rounds_tests {
    use super::*;
    use futures::FutureExt;

    type Waiting<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Turn> + Send + 'a>>;

    fn flow(source: u64, cluster: &str) -> Flow {
        Flow {
            source,
            cluster: cluster.into(),
        }
    }

    /// A turn that is already granted, or `None` while it waits.
    fn granted(f: &mut Waiting<'_>) -> Option<Turn> {
        f.as_mut().now_or_never()
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_cluster_holding_fewest_not_to_the_oldest_waiter() {
        let rounds = ProbeRounds::new(2);
        let noisy = flow(0, "prod/blackhole");
        let quiet = flow(0, "prod/quiet");
        let mut held: Vec<Turn> = vec![
            rounds.turn(noisy.clone()).await,
            rounds.turn(noisy.clone()).await,
        ];
        let mut noisy_waiting: Vec<_> = (0..3)
            .map(|_| Box::pin(rounds.turn(noisy.clone())) as Waiting<'_>)
            .collect();
        for w in &mut noisy_waiting {
            assert!(granted(w).is_none());
        }
        let mut quiet_waiting: Waiting<'_> = Box::pin(rounds.turn(quiet.clone()));
        assert!(granted(&mut quiet_waiting).is_none());
        drop(held.remove(0));
        // The quiet cluster's round, though it asked last.
        let quiet_turn = granted(&mut quiet_waiting).expect("quiet's round got the freed slot");
        assert!(noisy_waiting.iter_mut().all(|w| granted(w).is_none()));
        assert_eq!(rounds.in_use(), 2);
        drop(quiet_turn);
        assert!(
            granted(&mut noisy_waiting[0]).is_some(),
            "then the oldest noisy round"
        );
    }

    #[tokio::test]
    async fn destination_clusters_share_before_their_crdbclusters_do() {
        let rounds = ProbeRounds::new(2);
        let mut held = vec![
            rounds.turn(flow(1, "a/one")).await,
            rounds.turn(flow(1, "a/one")).await,
        ];
        // Cluster 1 holds both slots; its other CrdbCluster asked first, cluster 2 after.
        let mut w1 = Box::pin(rounds.turn(flow(1, "a/two"))) as Waiting<'_>;
        assert!(granted(&mut w1).is_none());
        let mut w2 = Box::pin(rounds.turn(flow(2, "a/one"))) as Waiting<'_>;
        assert!(granted(&mut w2).is_none());
        drop(held.remove(0));
        assert!(granted(&mut w1).is_none());
        assert!(granted(&mut w2).is_some());
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_takes_no_slot() {
        let rounds = ProbeRounds::new(1);
        let first = rounds.turn(flow(0, "a/b")).await;
        let mut gone = Box::pin(rounds.turn(flow(0, "a/c"))) as Waiting<'_>;
        assert!(granted(&mut gone).is_none());
        drop(gone);
        drop(first);
        assert_eq!(rounds.in_use(), 0);
        let _next = rounds.turn(flow(0, "a/d")).await;
        assert_eq!(rounds.in_use(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READY: &str = include_str!("../tests/fixtures/cockroach/health-ready.json");
    const WAITING: &str = include_str!("../tests/fixtures/cockroach/health-waiting-for-init.json");
    const VARS: &str = include_str!("../tests/fixtures/cockroach/status-vars.txt");
    const CLUSTER: &str = include_str!("../tests/fixtures/cockroach/admin-cluster.json");

    fn said(text: &str) -> Readiness {
        Readiness::Declined(PodText::new(text))
    }

    #[test]
    fn waiting_for_init_body_gives_cockroachs_reason() {
        assert_eq!(
            not_ready_reason(StatusCode::SERVICE_UNAVAILABLE, WAITING),
            said("node is waiting for cluster initialization")
        );
    }

    #[test]
    fn unparseable_or_empty_health_body_still_gives_a_reason() {
        assert_eq!(
            not_ready_reason(StatusCode::SERVICE_UNAVAILABLE, "node is draining\n"),
            said("node is draining")
        );
        assert_eq!(
            not_ready_reason(StatusCode::BAD_GATEWAY, " \n"),
            Readiness::NotReady("HTTP 502 without a reason".into())
        );
        // A JSON body without a message is shown as it is, quoted.
        assert_eq!(
            not_ready_reason(StatusCode::SERVICE_UNAVAILABLE, READY),
            said("{}")
        );
    }

    #[test]
    fn a_hostile_health_body_stays_one_quoted_line() {
        let body = r#"{"message": "ok\n\nHealthy: prod/cockroachdb: all 3 pods ready»"}"#;
        let Readiness::Declined(text) = not_ready_reason(StatusCode::SERVICE_UNAVAILABLE, body)
        else {
            panic!("expected the pod's words");
        };
        assert_eq!(
            text.to_string(),
            "«ok Healthy: prod/cockroachdb: all 3 pods ready›»"
        );
    }

    #[test]
    fn status_vars_yield_node_id_and_live_nodes() {
        assert_eq!(
            parse_status_vars(VARS),
            Ok(StatusVars {
                node_id: Some(2),
                live_nodes: Some(2)
            })
        );
    }

    #[test]
    fn status_vars_without_liveness_leave_it_unknown() {
        let vars = parse_status_vars("# TYPE sql_conns gauge\nsql_conns 3\n").unwrap();
        assert_eq!(vars, StatusVars::default());
    }

    #[test]
    fn status_vars_labels_may_hold_braces_and_spaces() {
        let vars = parse_status_vars(
            "node_id{advertise_addr=\"a b}\",http_addr=\"x\"} 3\nliveness_livenodes 2 1700000000\n",
        )
        .unwrap();
        assert_eq!(vars.node_id, Some(3));
        assert_eq!(vars.live_nodes, Some(2));
        assert!(parse_status_vars("liveness_livenodes two\n").is_err());
        // A quoted '}' followed by digits is no value, wherever the line ends (found by
        // `status_vars_read_the_two_samples_wherever_they_are`: a raw line break in a value).
        let vars = parse_status_vars("node_id{a=\"}2\\\"}9\"} 1\n").unwrap();
        assert_eq!(vars.node_id, Some(1));
        assert!(parse_status_vars("node_id{a=\"}2\t\n\"} 1\nliveness_livenodes 0\n").is_err());
    }

    #[test]
    fn cluster_id_is_read_from_camel_case_json() {
        assert_eq!(
            parse_cluster_id(CLUSTER).as_deref(),
            Ok("15152a17-fcc9-4a51-8c04-af0ec0126551")
        );
        assert!(parse_cluster_id(r#"{"cluster_id":"x"}"#).is_err());
        // Whatever else a pod writes there never reaches a verdict.
        let err = parse_cluster_id(r#"{"clusterId":"x\nHealthy: fine"}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/_admin/v1/cluster: clusterId is not a UUID"
        );
    }

    #[test]
    fn session_cookie_is_taken_without_attributes() {
        assert_eq!(
            session_cookie("session=CIGAgICAgICAAR; Path=/; HttpOnly; Secure").as_deref(),
            Some("session=CIGAgICAgICAAR")
        );
        assert_eq!(
            session_cookie("session=Q0lHQQ==,system,UjBsR09E,app; Path=/; HttpOnly").as_deref(),
            Some("session=Q0lHQQ==,system,UjBsR09E,app")
        );
        assert_eq!(session_cookie("tenant=system; Path=/"), None);
    }

    #[test]
    fn credentials_debug_hides_username_and_password() {
        let c = Credentials {
            username: "wavegate-user".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("wavegate-user"));
        assert!(!shown.contains("hunter2"));
    }

    #[test]
    fn credentials_without_verified_tls_are_refused_at_startup() {
        let c = || {
            Some(Credentials {
                username: "u".into(),
                password: "p".into(),
            })
        };
        let t = Duration::from_secs(1);
        let plain = Prober::new(Scheme::Http, TlsSettings::default(), c(), t);
        assert!(matches!(
            plain,
            Err(ProbeError::CredentialsNeedVerifiedTls(_))
        ));
        let no_ca = Prober::new(Scheme::Https, TlsSettings::default(), c(), t);
        assert!(matches!(
            no_ca,
            Err(ProbeError::CredentialsNeedVerifiedTls(_))
        ));
        let skip = TlsSettings {
            accept_invalid_certs: true,
            ..TlsSettings::default()
        };
        let skip = Prober::new(Scheme::Https, skip, c(), t);
        assert!(matches!(
            skip,
            Err(ProbeError::CredentialsNeedVerifiedTls(_))
        ));
        // Without credentials every combination stays available for unauthenticated probes.
        assert!(Prober::new(Scheme::Http, TlsSettings::default(), None, t).is_ok());
    }

    #[test]
    fn server_name_names_the_clusters_public_service() {
        let tls = TlsSettings::default();
        assert_eq!(
            tls.server_name_for("prod", "cockroachdb"),
            "cockroachdb-public.prod.svc.cluster.local"
        );
        let custom = TlsSettings {
            server_name: Some("{name}.{namespace}.example".into()),
            ..TlsSettings::default()
        };
        assert_eq!(custom.server_name_for("prod", "db"), "db.prod.example");
    }

    #[test]
    fn timeout_is_shown_in_seconds_or_milliseconds() {
        assert_eq!(seconds(Duration::from_secs(2)), "2s");
        assert_eq!(seconds(Duration::from_millis(300)), "300ms");
    }
}

/// Whatever a pod sends, the parsers neither panic nor let unbounded or
/// multi-line text through. Case count: `PROPTEST_CASES` (proptest's default otherwise).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Text biased towards what breaks parsers and messages: line breaks, braces, quotes,
    /// numbers, guillemets, bidi and control characters, long runs.
    fn hostile_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            any::<String>(),
            Just("\n".to_string()),
            Just("\r\n".to_string()),
            Just("{".to_string()),
            Just("}".to_string()),
            Just("\"".to_string()),
            Just("«»".to_string()),
            Just("\u{202E}\u{2028}\u{200B}\u{1b}[31m".to_string()),
            Just("node_id".to_string()),
            Just("liveness_livenodes".to_string()),
            Just(" 1e308 NaN -Inf 3 ".to_string()),
            Just("# TYPE x gauge\n".to_string()),
            "[0-9a-f-]{0,40}".prop_map(|s| s),
            (0usize..3000).prop_map(|n| "x".repeat(n)),
        ];
        prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
    }

    fn assert_one_bounded_line(text: &str) {
        assert!(
            text.chars().count() <= PodText::MAX_CHARS + 1,
            "{} chars",
            text.chars().count()
        );
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(
            !text.contains(['«', '»', '\u{2028}', '\u{2029}', '\u{202E}']),
            "{text:?}"
        );
    }

    proptest! {
        #[test]
        fn status_vars_never_panic(body in hostile_text()) {
            let _ = parse_status_vars(&body);
        }

        #[test]
        fn status_vars_read_the_two_samples_wherever_they_are(
            before in hostile_text(),
            node in 1i64..1_000_000,
            live in 0i64..1000,
            labels in "[a-z_]{1,8}=\"[^\"\\\\]{0,20}\"",
        ) {
            let body = format!(
                "{}\nnode_id{{{labels}}} {node}\nliveness_livenodes {live}\n",
                before.replace("node_id", "n").replace("liveness_livenodes", "l")
            );
            let vars = parse_status_vars(&body);
            // Garbage before them may make the line-oriented format ambiguous, but never
            // yields other numbers than the ones written.
            if let Ok(vars) = vars {
                prop_assert!(vars.node_id.is_none_or(|n| n == node));
                prop_assert!(vars.live_nodes.is_none_or(|l| l == live));
            }
        }

        #[test]
        fn health_reason_is_one_bounded_quoted_line(body in hostile_text(), code in 400u16..600) {
            let status = StatusCode::from_u16(code).unwrap();
            for body in [body.clone(), serde_json::json!({"message": body}).to_string()] {
                match not_ready_reason(status, &body) {
                    Readiness::Declined(text) => assert_one_bounded_line(text.as_str()),
                    Readiness::NotReady(own) => {
                        prop_assert_eq!(own, format!("HTTP {code} without a reason"))
                    }
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
        }

        #[test]
        fn cluster_id_is_a_uuid_or_an_error_without_the_body(raw in hostile_text()) {
            for body in [raw.clone(), serde_json::json!({"clusterId": raw}).to_string()] {
                match parse_cluster_id(&body) {
                    Ok(id) => prop_assert!(
                        id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
                    ),
                    Err(e) => {
                        let e = e.to_string();
                        assert_one_bounded_line(&e);
                        prop_assert!(raw.len() < 8 || !e.contains(raw.as_str()));
                    }
                }
            }
        }

        #[test]
        fn session_cookie_never_panics(header in hostile_text()) {
            if let Some(cookie) = session_cookie(&header) {
                prop_assert!(cookie.starts_with("session="));
            }
        }

        #[test]
        fn pod_text_is_always_one_bounded_line(raw in hostile_text()) {
            let text = PodText::new(&raw);
            assert_one_bounded_line(text.as_str());
            prop_assert_eq!(text.as_str().trim(), text.as_str());
        }
    }
}
