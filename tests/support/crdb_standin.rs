//! A stand-in CockroachDB node for tests: an HTTP server on a loopback address (playing the pod
//! IP) that serves the endpoint shapes wavegate reads, with state that tests change at runtime.
//!
//! - `GET /health?ready=1`: 200 `{}` when ready; 503 with the gRPC-gateway error JSON
//!   (`"node is waiting for cluster initialization"`, code 14 = Unavailable) while waiting.
//! - `GET /_status/vars`: Prometheus text with `node_id{advertise_addr,http_addr,sql_addr}` and
//!   `liveness_livenodes`.
//! - `POST /login` (JSON `{username, password}`) → `Set-Cookie: session=…`; `GET /logout`.
//! - `GET /_admin/v1/cluster` → `{"clusterId": …}`; with a login configured it wants the
//!   `session` cookie, like a secure cluster.
//! - `Mode::Hang`: every request is accepted and never answered.
//! - `Mode::Says(body)`: `/health?ready=1` answers 503 with `body` as it is — a hostile or
//!   broken pod writing whatever it likes.
//!
//! [`CrdbStandin::start_tls`] serves the same over TLS with a certificate from
//! `tests/fixtures/cockroach/tls` ([`Cert`]). Every `POST /login` is counted, accepted or not,
//! so tests can prove credentials never reached a pod.
//!
//! Use from an integration test with
//! `#[path = "support/crdb_standin.rs"] mod crdb_standin;`.

#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the node is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Initialised and accepting SQL clients.
    Ready,
    /// Started without a cluster to join (or join target not resolvable yet).
    WaitingForInit,
    /// Accepts connections, never answers.
    Hang,
    /// Not ready, and `/health?ready=1` answers 503 with this body, verbatim.
    Says(&'static str),
}

/// Which certificate a TLS stand-in presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cert {
    /// A node certificate of CrdbCluster prod/cockroachdb from the cluster CA (`ca.crt`).
    Node,
    /// The same names, signed by another CA: not a node of this cluster.
    Impostor,
}

impl Cert {
    fn files(self) -> (&'static str, &'static str) {
        match self {
            Cert::Node => ("node.crt", "node.key"),
            Cert::Impostor => ("impostor.crt", "impostor.key"),
        }
    }
}

/// The test cluster CA, PEM: what wavegate is configured with.
pub fn cluster_ca_pem() -> Vec<u8> {
    std::fs::read(tls_dir().join("ca.crt")).expect("tests/fixtures/cockroach/tls/ca.crt")
}

fn tls_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cockroach/tls")
}

/// Everything the stand-in reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub mode: Mode,
    pub node_id: i64,
    pub live_nodes: i64,
    pub cluster_id: String,
    /// `Some((username, password))`: a secure cluster; `/_admin/v1/cluster` needs a login.
    pub login: Option<(String, String)>,
}

impl NodeState {
    pub fn ready(node_id: i64, live_nodes: i64, cluster_id: &str) -> Self {
        NodeState {
            mode: Mode::Ready,
            node_id,
            live_nodes,
            cluster_id: cluster_id.to_string(),
            login: None,
        }
    }

    pub fn waiting_for_init() -> Self {
        NodeState {
            mode: Mode::WaitingForInit,
            node_id: 0,
            live_nodes: 0,
            cluster_id: String::new(),
            login: None,
        }
    }

    pub fn hanging() -> Self {
        NodeState {
            mode: Mode::Hang,
            ..NodeState::waiting_for_init()
        }
    }

    pub fn with_login(mut self, username: &str, password: &str) -> Self {
        self.login = Some((username.to_string(), password.to_string()));
        self
    }
}

#[derive(Debug, Default)]
struct Sessions {
    /// `POST /login` requests received, whatever their outcome.
    attempts: u64,
    issued: u64,
    open: BTreeSet<String>,
}

struct Shared {
    state: Mutex<NodeState>,
    sessions: Mutex<Sessions>,
    addr: SocketAddr,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running stand-in; stops serving when dropped.
pub struct CrdbStandin {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl CrdbStandin {
    /// Bind `ip:port` (port 0: any free one) and serve a ready one-node cluster until `set`.
    pub async fn start(ip: Ipv4Addr, port: u16) -> CrdbStandin {
        let (listener, shared, app) = Self::bind(ip, port).await;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        CrdbStandin { shared, task }
    }

    /// Like [`CrdbStandin::start`], over TLS with `cert`, as a secure cluster's node serves its
    /// HTTP port.
    pub async fn start_tls(ip: Ipv4Addr, port: u16, cert: Cert) -> CrdbStandin {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let (listener, shared, app) = Self::bind(ip, port).await;
        let (crt, key) = cert.files();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(tls_dir().join(crt))
                .expect("stand-in certificate")
                .collect::<Result<_, _>>()
                .expect("stand-in certificate PEM");
        let key = PrivateKeyDer::from_pem_file(tls_dir().join(key)).expect("stand-in key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("stand-in TLS config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let app = app.clone();
                tokio::spawn(async move {
                    // A client that rejects our certificate ends the handshake; nothing to do.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
            }
        });
        CrdbStandin { shared, task }
    }

    async fn bind(ip: Ipv4Addr, port: u16) -> (TcpListener, Arc<Shared>, Router) {
        let listener = TcpListener::bind((ip, port))
            .await
            .unwrap_or_else(|e| panic!("stand-in cannot bind {ip}:{port}: {e}"));
        let addr = listener.local_addr().expect("bound address");
        let shared = Arc::new(Shared {
            state: Mutex::new(NodeState::ready(
                1,
                1,
                "00000000-0000-4000-8000-000000000001",
            )),
            sessions: Mutex::new(Sessions::default()),
            addr,
        });
        let app = Router::new()
            .route("/health", get(health))
            .route("/_status/vars", get(status_vars))
            .route("/login", post(login))
            .route("/logout", get(logout))
            .route("/_admin/v1/cluster", get(cluster))
            .with_state(shared.clone());
        (listener, shared, app)
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    pub fn port(&self) -> u16 {
        self.shared.addr.port()
    }

    /// Replace what the node reports, effective for the next request.
    pub fn set(&self, state: NodeState) {
        *lock(&self.shared.state) = state;
    }

    pub fn state(&self) -> NodeState {
        lock(&self.shared.state).clone()
    }

    /// Logins granted so far.
    pub fn logins(&self) -> u64 {
        lock(&self.shared.sessions).issued
    }

    /// `POST /login` requests received so far, granted or not: anything above 0 means the
    /// credentials reached this pod.
    pub fn login_attempts(&self) -> u64 {
        lock(&self.shared.sessions).attempts
    }

    /// Sessions granted and not yet logged out.
    pub fn open_sessions(&self) -> usize {
        lock(&self.shared.sessions).open.len()
    }
}

impl Drop for CrdbStandin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type AppState = State<Arc<Shared>>;

/// Waits forever in `Mode::Hang`, else returns the current state.
async fn current(shared: &Shared) -> NodeState {
    let state = lock(&shared.state).clone();
    if state.mode == Mode::Hang {
        std::future::pending::<()>().await;
    }
    state
}

/// gRPC-gateway's error body for a gRPC status, as CockroachDB's HTTP endpoints send it.
fn grpc_error(http: StatusCode, code: u32, message: &str) -> Response {
    let body = json!({"error": message, "code": code, "message": message, "details": []});
    (http, Json(body)).into_response()
}

fn waiting_for_init() -> Response {
    grpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        14,
        "node is waiting for cluster initialization",
    )
}

async fn health(State(shared): AppState, Query(query): Query<HashMap<String, String>>) -> Response {
    let state = current(&shared).await;
    let ready_asked = matches!(query.get("ready").map(String::as_str), Some("1" | "true"));
    if ready_asked && state.mode == Mode::WaitingForInit {
        return waiting_for_init();
    }
    if let (true, Mode::Says(body)) = (ready_asked, state.mode) {
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    Json(json!({})).into_response()
}

async fn status_vars(State(shared): AppState) -> Response {
    let state = current(&shared).await;
    let host = shared.addr.ip();
    let body = format!(
        "# HELP node_id node ID with labels for advertised RPC and HTTP addresses\n\
         # TYPE node_id gauge\n\
         node_id{{advertise_addr=\"{host}:26258\",http_addr=\"{host}:{port}\",sql_addr=\"{host}:26257\"}} {node}\n\
         # HELP liveness_livenodes Number of live nodes in the cluster (will be 0 if this node is not itself live)\n\
         # TYPE liveness_livenodes gauge\n\
         liveness_livenodes {live}\n\
         # HELP sql_conns Number of open SQL connections\n\
         # TYPE sql_conns gauge\n\
         sql_conns 0\n",
        port = shared.addr.port(),
        node = state.node_id,
        live = state.live_nodes,
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

#[derive(Deserialize)]
struct LoginRequest {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

async fn login(State(shared): AppState, Json(request): Json<LoginRequest>) -> Response {
    lock(&shared.sessions).attempts += 1;
    let state = current(&shared).await;
    let accepted = match &state.login {
        Some((user, password)) => request.username == *user && request.password == *password,
        None => !request.username.is_empty(),
    };
    if !accepted {
        return grpc_error(
            StatusCode::UNAUTHORIZED,
            16,
            "the provided credentials did not match any account on the server",
        );
    }
    let token = {
        let mut sessions = lock(&shared.sessions);
        sessions.issued += 1;
        let token = format!("c3RhbmRpbi{}", sessions.issued);
        sessions.open.insert(token.clone());
        token
    };
    (
        [(
            header::SET_COOKIE,
            format!("session={token}; Path=/; HttpOnly"),
        )],
        Json(json!({})),
    )
        .into_response()
}

fn session(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == "session")
        .map(|(_, value)| value.to_string())
}

async fn logout(State(shared): AppState, headers: HeaderMap) -> Response {
    current(&shared).await;
    match session(&headers) {
        Some(token) if lock(&shared.sessions).open.remove(&token) => {
            Json(json!({})).into_response()
        }
        _ => grpc_error(StatusCode::UNAUTHORIZED, 16, "invalid session"),
    }
}

async fn cluster(State(shared): AppState, headers: HeaderMap) -> Response {
    let state = current(&shared).await;
    if state.mode == Mode::WaitingForInit {
        return waiting_for_init();
    }
    if state.login.is_some() {
        let valid = session(&headers).is_some_and(|t| lock(&shared.sessions).open.contains(&t));
        if !valid {
            return (
                StatusCode::UNAUTHORIZED,
                "a valid authentication cookie or JWT is required\n",
            )
                .into_response();
        }
    }
    Json(json!({
        "clusterId": state.cluster_id,
        "reportingEnabled": false,
        "enterpriseEnabled": false,
    }))
    .into_response()
}
