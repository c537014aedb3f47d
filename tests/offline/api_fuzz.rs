//! Fuzzing the HTTP router in-process: random paths, query strings and headers (bearer tokens,
//! Argo CD's proxy headers) never panic, never answer 500, and answer a 5xx only as a 503 that
//! says wavegate cannot read the cluster — never because of what the caller sent.
//!
//! No API server: wavegate's client points at a closed loopback port, so every cache read ends
//! as "not synced" after a 10 ms wait. Gate waits are capped at zero, so a well-formed wait is
//! refused at once instead of holding the run.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256, a few seconds);
//! a longer run: `PROPTEST_CASES=20000 cargo test --test offline api_fuzz::`; `FUZZ_STATS=1` (with
//! `-- --nocapture`) prints every status, path and body.

use crate::proptest_config;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use wavegate::api::{self, AppState, LimitArgs, Token};
use wavegate::cache::Cache;
use wavegate::evaluate::{EvalConfig, Evaluator};
use wavegate::metrics::Metrics;

fn router(token: Option<&str>) -> Router {
    let mut config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    config.connect_timeout = Some(Duration::from_millis(50));
    let client = kube::Client::try_from(config).unwrap();
    let metrics = Arc::new(Metrics::default());
    let cache = Cache::new(client, None, Duration::from_millis(10), metrics.clone());
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let mut state = AppState::new(evaluator, metrics).with_limits(LimitArgs {
        max_waiters: 0,
        request_timeout: Duration::from_secs(2),
        ..LimitArgs::default()
    });
    if let Some(t) = token {
        state = state.with_token(Token::fixed(t));
    }
    api::router(state)
}

/// Segments that reach deep into the routes, mixed with hostile ones.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("api".to_string()),
        Just("v1".to_string()),
        Just("health".to_string()),
        Just("gates".to_string()),
        Just("applications".to_string()),
        Just("waves".to_string()),
        Just("wait".to_string()),
        Just("services".to_string()),
        Just("deployments.apps".to_string()),
        Just("crdbclusters.crdb.cockroachlabs.com".to_string()),
        Just("applications.argoproj.io".to_string()),
        Just("secrets".to_string()),
        Just("cicd".to_string()),
        Just("..".to_string()),
        Just("%2e%2e".to_string()),
        Just("%2F".to_string()),
        Just("%00".to_string()),
        Just("%ff%fe".to_string()),
        Just("".to_string()),
        "[a-z0-9.-]{1,70}",
        "[A-Za-z0-9%._~:@!$&'()*+,;=-]{0,40}",
        "\\PC{0,12}",
    ]
}

/// Percent-encode what a URI may not carry raw, so the case reaches the router.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@%".contains(c) {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

fn path() -> impl Strategy<Value = String> {
    let seg = || segment().prop_map(|s| encode(&s));
    prop_oneof![
        // Every route, with hostile parameters.
        4 => (seg(), seg(), seg()).prop_map(|(r, n, m)| format!("/api/v1/health/{r}/{n}/{m}")),
        2 => (seg(), seg()).prop_map(|(n, m)| format!("/api/v1/gates/{n}/{m}")),
        2 => (seg(), seg()).prop_map(|(n, m)| format!("/api/v1/gates/{n}/{m}/wait")),
        2 => (seg(), seg()).prop_map(|(n, m)| format!("/api/v1/applications/{n}/{m}/waves")),
        1 => prop_oneof![
            Just("/api/v1/applications".to_string()),
            Just("/api/v1/applications/waves".to_string()),
            Just("/api/v1/gates".to_string()),
            Just("/api/v1/waves".to_string()),
            Just("/readyz".to_string()),
            Just("/metrics".to_string()),
        ],
        1 => prop::collection::vec(seg(), 0..8).prop_map(|s| format!("/{}", s.join("/"))),
        1 => "/[ -~]{0,80}",
    ]
}

fn query() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("minReady".to_string()),
        Just("expectedNodes".to_string()),
        Just("selector".to_string()),
        Just("healthy".to_string()),
        Just("degraded".to_string()),
        Just("timeout".to_string()),
        Just("requireClusterReady".to_string()),
        Just("app".to_string()),
        "[A-Za-z%]{0,10}",
    ];
    let value = prop_oneof![
        Just("%24.status%5B".to_string()),
        Just("%24..*".to_string()),
        Just("99999999999999999999".to_string()),
        Just("-1".to_string()),
        Just("1h".to_string()),
        Just("a%3Db,c".to_string()),
        "[ -~&&[^#&=]]{0,30}",
        "%[0-9a-fA-F]{2}",
    ];
    prop::collection::vec((key, value), 0..4).prop_map(|kv| {
        if kv.is_empty() {
            String::new()
        } else {
            let pairs: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", pairs.join("&"))
        }
    })
}

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"argocd:platform".to_vec()),
        Just(b"Bearer t0ken".to_vec()),
        Just(b"bearer t0ken".to_vec()),
        Just(b"default".to_vec()),
        Just(b"a:b:c".to_vec()),
        Just(b":".to_vec()),
        "[ -~]{0,60}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..30),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(&'static str, Vec<u8>)>> {
    let name = prop_oneof![
        Just("authorization"),
        Just("argocd-application-name"),
        Just("argocd-project-name"),
        Just("argocd-namespace"),
        Just("argocd-username"),
        Just("accept"),
    ];
    prop::collection::vec((name, header_value()), 0..4)
}

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = tokio::time::timeout(Duration::from_secs(5), app.clone().oneshot(req))
        .await
        .expect("no answer within 5s")
        .expect("the router is infallible");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).to_string();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn check(uri: &str, status: StatusCode, body: &Value) -> Result<(), TestCaseError> {
    prop_assert_ne!(
        status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{} -> {}",
        uri,
        body
    );
    if status.is_server_error() {
        prop_assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{} -> {}",
            uri,
            body
        );
        // Only because the (absent) cluster cannot be read, which is what every 503 says
        // (`/readyz` in text, by its contract; everything else in JSON).
        let msg = body["error"].as_str().or(body.as_str()).unwrap_or("");
        prop_assert!(
            ["discovery", "synced", "watch", "scope", "longer than"]
                .iter()
                .any(|w| msg.contains(w)),
            "{} -> {}: a 503 that is not about the cluster",
            uri,
            body
        );
    }
    if (status.is_client_error() || status.is_server_error()) && !uri.starts_with("/readyz") {
        let msg = body["error"].as_str();
        prop_assert!(
            msg.is_some_and(|m| !m.is_empty()),
            "{} -> {}: a refusal must say why in JSON",
            uri,
            body
        );
    }
    Ok(())
}

#[test]
fn random_requests_never_panic_or_answer_500() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (open, guarded) = rt.block_on(async { (router(None), router(Some("t0ken"))) });
    let mut runner = proptest::test_runner::TestRunner::new(proptest_config::config(256));
    let result = runner.run(
        &(path(), query(), headers(), any::<bool>()),
        |(path, query, headers, with_token)| {
            let uri = format!("{path}{query}");
            let mut builder = Request::get(uri.as_str());
            for (name, value) in &headers {
                if let Ok(v) = HeaderValue::from_bytes(value) {
                    builder = builder.header(*name, v);
                }
            }
            // Strings the http crate will not accept as a URI never reach a server.
            let Ok(req) = builder.body(Body::empty()) else {
                return Ok(());
            };
            let app = if with_token { &guarded } else { &open };
            let (status, body) = rt.block_on(send(app, req));
            if std::env::var_os("FUZZ_STATS").is_some() {
                eprintln!("STAT {} {uri} {body}", status.as_u16());
            }
            check(&uri, status, &body)
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
