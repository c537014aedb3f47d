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

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};
use serde::Deserialize;

use crate::checks::cockroach::{PodProbe, ProbeTarget, Readiness};

/// A SQL user allowed to log in to the DB Console. Loaded by the caller from a mounted Secret
/// file; never logged, never put in a message.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// How to reach the nodes' HTTP port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scheme {
    /// Insecure clusters (`--insecure`, `tlsEnabled: false`).
    #[default]
    Http,
    /// Secure clusters. The node certificate must be valid for the pod IP under the configured
    /// CA — or certificate checks must be switched off explicitly ([`TlsSettings`]).
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

/// TLS for [`Scheme::Https`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// The cluster CA (PEM), e.g. `ca.crt` from the operator's node Secret.
    pub ca_pem: Option<Vec<u8>>,
    /// Skip certificate verification. Only for an explicit opt-in: the operators' node
    /// certificates name the Services, not pod IPs, so verification against an IP can fail even
    /// on a healthy cluster. Readiness and node counts carry no secrets, but the login does:
    /// with this on, the password goes to whoever answers on the pod IP.
    pub accept_invalid_certs: bool,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field(
                "ca_pem",
                &self.ca_pem.as_ref().map(|p| format!("{} bytes", p.len())),
            )
            .field("accept_invalid_certs", &self.accept_invalid_certs)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cluster CA is not valid PEM: {0}")]
    InvalidCa(reqwest::Error),
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
}

/// An HTTP client for probing. No redirects (a node has no business sending us elsewhere), no
/// proxies from the environment (probes go straight to pod IPs).
pub fn client(tls: &TlsSettings) -> Result<reqwest::Client, ProbeError> {
    // reqwest is built without a TLS provider of its own; use ring, the one kube uses, as the
    // process default. Another caller having installed it first is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(30));
    if let Some(pem) = &tls.ca_pem {
        let ca = reqwest::Certificate::from_pem(pem).map_err(ProbeError::InvalidCa)?;
        builder = builder.tls_certs_only([ca]);
    }
    if tls.accept_invalid_certs {
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    builder.build().map_err(ProbeError::Client)
}

/// Probe one pod over plain HTTP (insecure clusters). See [`probe_pod_with`].
pub async fn probe_pod(
    client: &reqwest::Client,
    target: &ProbeTarget,
    credentials: Option<&Credentials>,
    timeout: Duration,
) -> PodProbe {
    probe_pod_with(client, Scheme::Http, target, credentials, timeout).await
}

/// Probe one pod; returns within `timeout` whatever the pod does.
pub async fn probe_pod_with(
    client: &reqwest::Client,
    scheme: Scheme,
    target: &ProbeTarget,
    credentials: Option<&Credentials>,
    timeout: Duration,
) -> PodProbe {
    let Ok(ip) = target.ip.parse::<IpAddr>() else {
        return PodProbe::bare(
            &target.pod,
            Readiness::Unreachable(format!("pod IP {:?} is not an IP address", target.ip)),
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

async fn health(client: &reqwest::Client, base: &str) -> Readiness {
    let response = match client.get(format!("{base}/health?ready=1")).send().await {
        Ok(r) => r,
        Err(e) => return Readiness::Unreachable(transport_error(&e)),
    };
    let status = response.status();
    if status == StatusCode::OK {
        return Readiness::Ready;
    }
    match response.text().await {
        Ok(body) => Readiness::NotReady(not_ready_reason(status, &body)),
        Err(e) => Readiness::Unreachable(transport_error(&e)),
    }
}

/// CockroachDB's reason from a non-200 `/health?ready=1` body.
fn not_ready_reason(status: StatusCode, body: &str) -> String {
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
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| body.trim().chars().take(200).collect());
    if reason.is_empty() {
        format!("HTTP {}", status.as_u16())
    } else {
        reason
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct StatusVars {
    node_id: Option<i64>,
    live_nodes: Option<i64>,
}

async fn status_vars(client: &reqwest::Client, base: &str) -> Result<StatusVars, String> {
    let response = client
        .get(format!("{base}/_status/vars"))
        .send()
        .await
        .map_err(|e| transport_error(&e))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status().as_u16()));
    }
    let body = response.text().await.map_err(|e| transport_error(&e))?;
    parse_status_vars(&body)
}

fn parse_status_vars(body: &str) -> Result<StatusVars, String> {
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape =
        prometheus_parse::Scrape::parse(lines).map_err(|e| format!("not Prometheus text: {e}"))?;
    let value = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name)
            .and_then(|s| match s.value {
                prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Untyped(v) => Some(v),
                _ => None,
            })
            .filter(|v| v.is_finite() && v.fract() == 0.0)
            // Whole numbers well inside i64; the cast cannot truncate.
            .map(|v| v as i64)
    };
    Ok(StatusVars {
        node_id: value("node_id"),
        live_nodes: value("liveness_livenodes"),
    })
}

/// The cluster ID, if the node will tell. `Ok(None)`: it wants a login we do not have.
async fn cluster_id(
    client: &reqwest::Client,
    base: &str,
    credentials: Option<&Credentials>,
) -> Result<Option<String>, String> {
    let session = match credentials {
        Some(credentials) => Some(login(client, base, credentials).await?),
        None => None,
    };
    let mut request = client.get(format!("{base}/_admin/v1/cluster"));
    if let Some(session) = &session {
        request = request.header(COOKIE, session.as_str());
    }
    let outcome = async {
        let response = request.send().await.map_err(|e| transport_error(&e))?;
        match response.status() {
            // Secure cluster and no credentials configured: the ID is simply unknown.
            StatusCode::UNAUTHORIZED if session.is_none() => Ok(None),
            status if status.is_success() => {
                let body = response.text().await.map_err(|e| transport_error(&e))?;
                parse_cluster_id(&body).map(Some)
            }
            status => Err(format!(
                "/_admin/v1/cluster answered HTTP {}",
                status.as_u16()
            )),
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
) -> Result<String, String> {
    let body = serde_json::json!({
        "username": credentials.username,
        "password": credentials.password,
    });
    let response = client
        .post(format!("{base}/login"))
        .json(&body)
        .send()
        .await
        .map_err(|e| transport_error(&e))?;
    if !response.status().is_success() {
        // The body may echo the username; the status says enough.
        return Err(format!(
            "login as {} rejected (HTTP {})",
            credentials.username,
            response.status().as_u16()
        ));
    }
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(session_cookie)
        .ok_or_else(|| "login answered without a session cookie".to_string())
}

/// `session=<value>` from one `Set-Cookie` header, attributes dropped.
fn session_cookie(set_cookie: &str) -> Option<String> {
    let pair = set_cookie.split(';').next()?.trim();
    let (name, value) = pair.split_once('=')?;
    (name == "session" && !value.is_empty()).then(|| format!("session={value}"))
}

fn parse_cluster_id(body: &str) -> Result<String, String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ClusterResponse {
        #[serde(default)]
        cluster_id: String,
    }
    let parsed: ClusterResponse =
        serde_json::from_str(body).map_err(|e| format!("/_admin/v1/cluster: {e}"))?;
    if parsed.cluster_id.is_empty() {
        Err("/_admin/v1/cluster has no clusterId".to_string())
    } else {
        Ok(parsed.cluster_id)
    }
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
        Some(root) => format!("{kind}: {root}"),
        None => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READY: &str = include_str!("../tests/fixtures/cockroach/health-ready.json");
    const WAITING: &str = include_str!("../tests/fixtures/cockroach/health-waiting-for-init.json");
    const VARS: &str = include_str!("../tests/fixtures/cockroach/status-vars.txt");
    const CLUSTER: &str = include_str!("../tests/fixtures/cockroach/admin-cluster.json");

    #[test]
    fn waiting_for_init_body_gives_cockroachs_reason() {
        assert_eq!(
            not_ready_reason(StatusCode::SERVICE_UNAVAILABLE, WAITING),
            "node is waiting for cluster initialization"
        );
    }

    #[test]
    fn unparseable_or_empty_health_body_still_gives_a_reason() {
        assert_eq!(
            not_ready_reason(StatusCode::SERVICE_UNAVAILABLE, "node is draining\n"),
            "node is draining"
        );
        assert_eq!(not_ready_reason(StatusCode::BAD_GATEWAY, ""), "HTTP 502");
        // A JSON body without a message is shown as it is.
        assert_eq!(
            not_ready_reason(StatusCode::SERVICE_UNAVAILABLE, READY),
            "{}"
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
    fn cluster_id_is_read_from_camel_case_json() {
        assert_eq!(
            parse_cluster_id(CLUSTER).as_deref(),
            Ok("15152a17-fcc9-4a51-8c04-af0ec0126551")
        );
        assert!(parse_cluster_id(r#"{"cluster_id":"x"}"#).is_err());
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
    fn credentials_debug_hides_the_password() {
        let c = Credentials {
            username: "wavegate".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("wavegate"));
        assert!(!shown.contains("hunter2"));
    }

    #[test]
    fn timeout_is_shown_in_seconds_or_milliseconds() {
        assert_eq!(seconds(Duration::from_secs(2)), "2s");
        assert_eq!(seconds(Duration::from_millis(300)), "300ms");
    }
}
