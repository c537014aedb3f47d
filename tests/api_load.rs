//! A small load test on loopback: a flood of API requests and gate waits against a served
//! wavegate is refused beyond the configured bounds — not queued (exactly the bound's share is
//! served), with a JSON message and `Retry-After` — while `/healthz` keeps answering and memory
//! stays flat across rounds. `--nocapture` prints the counts, the slowest refusal and RSS.
//! Its own test binary, not a module of tests/offline: it measures this process's RSS, which other
//! tests running beside it in one process would move.
//! Two attacks that need no token are measured the same way: connections that never finish
//! their headers, and JSONPath expressions built to explode.
//!
//! No real API server: wavegate's client points at a loopback stand-in that allows every access
//! review and answers nothing else usefully, so a watch never syncs and every admitted health ask
//! holds its permit for the 500 ms sync wait and then answers "not synced" (Progressing), which
//! makes the concurrency bound observable without a cluster.
//!
//! One more attack has a hostile stand-in of its own: a remote cluster's API server sending
//! pods with 16 MiB of labels each (`a_remote_api_server_sending_huge_labels_is_stopped_at_the_byte_bound`).

#[path = "support/kubelet_probe.rs"]
mod kubelet_probe;

use kubelet_probe::rss_bytes;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wavegate::api::{self, AppState, LimitArgs};
use wavegate::cache::Cache;
use wavegate::evaluate::{EvalConfig, Evaluator};
use wavegate::metrics::Metrics;

const MAX_REQUESTS: usize = 16;
const MAX_WAITERS: usize = 8;

/// An API server that answers anything, after 100 ms, with an access review that allows it.
async fn slow_api_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                let body = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{},"status":{"allowed":true}}"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    url
}

async fn serve() -> String {
    let config = kube::Config::new(slow_api_server().await.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let metrics = Arc::new(Metrics::default());
    let cache = Cache::new(client, None, Duration::from_millis(500), metrics.clone());
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let state = AppState::new(evaluator, metrics).with_limits(LimitArgs {
        max_concurrent_requests: MAX_REQUESTS,
        max_waiters: MAX_WAITERS,
        request_timeout: Duration::from_secs(10),
        ..LimitArgs::default()
    });
    // The flood opens more connections than the default --max-connections (256), which would
    // close the excess at accept; this test is about the request bounds behind it.
    let connections = api::ConnectionArgs {
        max_connections: 1024,
        ..api::ConnectionArgs::default()
    };
    serve_state(state, connections).await
}

/// `state` served by wavegate's own server loop (`wavegate serve`'s), with `connections`.
async fn serve_state(state: AppState, connections: api::ConnectionArgs) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = api::router(state);
    tokio::spawn(api::serve(
        listener,
        app,
        connections,
        || {},
        std::future::pending(),
    ));
    url
}

#[derive(Default, Debug)]
struct Round {
    ok: usize,
    overloaded: usize,
    waits_refused: usize,
    waits_held: usize,
    slowest_refusal: Duration,
}

async fn round(http: &reqwest::Client, url: &str, requests: usize, waits: usize) -> Round {
    let asks = (0..requests).map(|i| {
        let (http, url) = (http.clone(), url.to_string());
        async move {
            let started = Instant::now();
            let r = http
                .get(format!("{url}/api/v1/health/services/load-{}/web", i % 50))
                .send()
                .await
                .unwrap();
            let code = r.status().as_u16();
            let retry = r.headers().get("retry-after").cloned();
            let body: Value = r.json().await.unwrap();
            (code, retry, body, started.elapsed(), false)
        }
    });
    let held = (0..waits).map(|_| {
        let (http, url) = (http.clone(), url.to_string());
        async move {
            let started = Instant::now();
            let r = http
                .get(format!("{url}/api/v1/gates/load/gate/wait?timeout=2s"))
                .send()
                .await
                .unwrap();
            let code = r.status().as_u16();
            let retry = r.headers().get("retry-after").cloned();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            (code, retry, body, started.elapsed(), true)
        }
    });
    let (asks, held) = tokio::join!(
        futures::future::join_all(asks),
        futures::future::join_all(held)
    );
    let mut out = Round::default();
    for (code, retry, body, took, is_wait) in asks.into_iter().chain(held) {
        match (code, is_wait) {
            (200, false) => {
                assert_ne!(body["status"], "Healthy", "nothing is synced: {body}");
                out.ok += 1;
            }
            (503, false) => {
                let msg = body["error"].as_str().unwrap_or_default();
                assert!(msg.contains("--max-concurrent-requests"), "{body}");
                assert_eq!(retry.unwrap(), "1");
                out.overloaded += 1;
                out.slowest_refusal = out.slowest_refusal.max(took);
            }
            (429, true) => {
                let msg = body["error"].as_str().unwrap_or_default();
                assert!(msg.contains("--max-waiters"), "{body}");
                assert_eq!(retry.unwrap(), "5");
                out.waits_refused += 1;
                out.slowest_refusal = out.slowest_refusal.max(took);
            }
            // A held wait on a gate that cannot be read ends at its own timeout.
            (408, true) => out.waits_held += 1,
            other => panic!("unexpected answer {other:?}: {body}"),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_is_refused_beyond_the_bounds_and_memory_stays_flat() {
    let _alone = MEASURED.lock().await;
    let url = serve().await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .build()
        .unwrap();
    // The kubelet's probe during the flood.
    let probe = {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let started = Instant::now();
            let code = http
                .get(format!("{url}/healthz"))
                .send()
                .await
                .unwrap()
                .status();
            (code, started.elapsed())
        })
    };
    let first = round(&http, &url, 300, 40).await;
    let (probe_code, probe_took) = probe.await.unwrap();
    let after_first = rss_bytes();
    let mut last = Round::default();
    let (mut overloaded, mut waits_refused) = (first.overloaded, first.waits_refused);
    for _ in 0..3 {
        last = round(&http, &url, 300, 40).await;
        overloaded += last.overloaded;
        waits_refused += last.waits_refused;
    }
    let after_last = rss_bytes();
    eprintln!(
        "load: first {first:?}; last {last:?}; rss after round 1 {} KiB, after round 4 {} KiB",
        after_first / 1024,
        after_last / 1024
    );
    for r in [&first, &last] {
        assert_eq!(r.ok + r.overloaded, 300, "{r:?}");
        assert!(r.ok >= MAX_REQUESTS, "the bound admits its share: {r:?}");
        assert!(r.overloaded >= 300 - 4 * MAX_REQUESTS, "{r:?}");
        assert_eq!(r.waits_held, MAX_WAITERS, "{r:?}");
        assert_eq!(r.waits_refused, 40 - MAX_WAITERS, "{r:?}");
    }
    assert!(
        probe_code.is_success(),
        "/healthz during the flood: {probe_code}"
    );
    eprintln!("load: /healthz answered in {probe_took:?} during the flood");
    // Operators see the refusals in /metrics (outside the bounds, like the probes).
    let metrics = http.get(format!("{url}/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    for line in [
        format!("wavegate_api_refusals_total{{reason=\"overloaded\"}} {overloaded}"),
        format!("wavegate_api_refusals_total{{reason=\"too_many_waiters\"}} {waits_refused}"),
    ] {
        assert!(
            text.contains(&line),
            "{line} missing from /metrics:\n{text}"
        );
    }
    let growth = after_last.saturating_sub(after_first);
    assert!(
        growth < 16 * 1024 * 1024,
        "memory grew by {} KiB over three more rounds",
        growth / 1024
    );
}

/// A stand-in API server on loopback that answers 404 to everything and counts the requests.
async fn counting_apiserver() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            (
                axum::http::StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Failure", "reason": "NotFound", "code": 404})),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, hits)
}

#[tokio::test]
async fn kinds_chosen_by_callers_cost_the_api_server_almost_nothing() {
    use std::sync::atomic::Ordering;
    let (apiserver, hits) = counting_apiserver().await;
    let client = kube::Client::try_from(kube::Config::new(apiserver.parse().unwrap())).unwrap();
    let metrics = Arc::new(Metrics::default());
    let cache = Cache::new(client, None, Duration::from_millis(100), metrics.clone());
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let url = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        // Every ask reaches the cache: the bounds are not what this test measures.
        let state = AppState::new(evaluator, metrics).with_limits(LimitArgs {
            max_concurrent_requests: 256,
            max_requests_per_caller: 256,
            ..LimitArgs::default()
        });
        let app = api::router(state);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    };
    let http = reqwest::Client::new();
    // 300 different invented kinds: refused before discovery, not one request upstream.
    for i in 0..300 {
        let r = http
            .get(format!("{url}/api/v1/health/widget{i}.example{i}.com/ns/x"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403);
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "discovery requests for refused kinds"
    );
    // 200 asks for one allow-listed kind the server does not serve: the answer is cached.
    let asks = (0..200).map(|_| {
        http.get(format!("{url}/api/v1/health/deployments.apps/ns/x"))
            .send()
    });
    // 404, or 503 while the cache cannot read the server's discovery.
    for r in futures::future::join_all(asks).await {
        let code = r.unwrap().status().as_u16();
        assert!(code == 404 || code == 503, "{code}");
    }
    let spent = hits.load(Ordering::SeqCst);
    eprintln!("load: 200 asks for an unserved allow-listed kind cost {spent} API requests");
    assert!(spent <= 3, "{spent} API requests for one kind");
}

/// `/healthz`'s latency, on a fresh connection (as the kubelet asks).
async fn healthz_latency(url: &str) -> Option<Duration> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let resp = http.get(format!("{url}/healthz")).send().await.ok()?;
    resp.status().is_success().then(|| started.elapsed())
}

/// 200 connections that send part of a request head (half 8 KiB and stall, half 256 KiB, more
/// than --max-header-bytes) and then 200 requests whose `healthy=` expression is built to
/// explode: connections are closed at the header timeout or refused over the head limit,
/// expressions are refused before they run, `/healthz` keeps answering, memory comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_costly_expressions_leave_healthz_answering() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _alone = MEASURED.lock().await;
    let config = kube::Config::new(slow_api_server().await.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let metrics = Arc::new(Metrics::default());
    let cache = Cache::new(client, None, Duration::from_millis(500), metrics.clone());
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let timeout = Duration::from_secs(3);
    let url = serve_state(
        AppState::new(evaluator, metrics),
        api::ConnectionArgs {
            header_read_timeout: timeout,
            ..api::ConnectionArgs::default()
        },
    )
    .await;
    let addr = url.trim_start_matches("http://").to_string();
    let before = rss_bytes();
    let idle = healthz_latency(&url).await.expect("/healthz before");

    // The header attack.
    let mut held = Vec::new();
    for i in 0..200 {
        let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
            continue;
        };
        let size = if i % 2 == 0 { 8 * 1024 } else { 256 * 1024 };
        let mut head = b"GET /api/v1/gates HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
        head.resize(size, b'a');
        let _ = tokio::time::timeout(Duration::from_millis(200), s.write_all(&head)).await;
        held.push(s);
    }
    let during_headers = rss_bytes();
    let healthz_during_headers = healthz_latency(&url).await;
    let started = Instant::now();
    let mut closed = 0;
    for s in &mut held {
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(timeout * 3, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    closed += 1;
                    break;
                }
                Ok(Ok(_)) => continue,
                Err(_) => break,
            }
        }
    }
    let all_closed_after = started.elapsed();
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_headers = rss_bytes();

    // The expression attack: refused before any read, however many at once.
    let union = format!("[{}]", ["*"; 30].join(","));
    let attack = format!("$..{union}..{union}..{union}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    let asks = (0..200).map(|_| {
        let (http, url, attack) = (http.clone(), url.clone(), attack.clone());
        tokio::spawn(async move {
            http.get(format!(
                "{url}/api/v1/health/deployments.apps/cicd/forgejo?healthy={}",
                percent(&attack)
            ))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
        })
    });
    let probe = tokio::spawn({
        let url = url.clone();
        async move { healthz_latency(&url).await }
    });
    let codes: Vec<u16> = futures::future::join_all(asks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let expressions_took = started.elapsed();
    let healthz_during_expressions = probe.await.unwrap();
    let after_expressions = rss_bytes();

    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "attacks: rss before {:.1} MiB; 200 stalled heads held {:.1} MiB, {closed} closed within \
         {all_closed_after:?} (header timeout {timeout:?}), after {:.1} MiB; 200 exploding \
         expressions answered in {expressions_took:?}, after {:.1} MiB; /healthz idle {idle:?}, \
         during heads {healthz_during_headers:?}, during expressions {healthz_during_expressions:?}",
        mib(before),
        mib(during_headers),
        mib(after_headers),
        mib(after_expressions),
    );
    assert_eq!(
        closed, 200,
        "every stalled connection is closed by the server"
    );
    assert!(all_closed_after < timeout * 3, "{all_closed_after:?}");
    assert!(
        healthz_during_headers.is_some(),
        "/healthz answers while 200 heads stall"
    );
    assert!(codes.iter().all(|c| *c == 400), "{codes:?}");
    assert!(healthz_during_expressions.is_some());
    assert!(
        after_expressions.saturating_sub(before) < 32 * 1024 * 1024,
        "memory after both attacks: +{:.1} MiB",
        mib(after_expressions.saturating_sub(before))
    );
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The monitoring port (`--metrics-listen`) has 16 places, and the NetworkPolicy lets the whole
/// monitoring namespace in. A pod there (127.0.0.2) tries to hold every place and keep holding
/// it: 32 connections, half idle, half pipelining requests and never reading the answers, each
/// reopened a second after the server closes it. The kubelet's `/healthz` on a fresh connection must
/// still be answered (refused, the kubelet restarts the pod), and the stalled connections must be
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_cannot_hold_the_monitoring_port() {
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;
    let config = kube::Config::new(slow_api_server().await.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let metrics = Arc::new(Metrics::default());
    let cache = Cache::new(client, None, Duration::from_millis(500), metrics.clone());
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let state = AppState::new(evaluator, metrics).with_metrics_elsewhere();
    let _alone = MEASURED.lock().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let limits = api::ConnectionArgs::default().monitoring();
    tokio::spawn(api::serve(
        listener,
        api::monitoring_router(state),
        limits.clone(),
        || {},
        std::future::pending(),
    ));
    let before = rss_bytes();
    let idle = healthz_latency(&url).await.expect("/healthz before");

    // 32 attackers, each reopening its connection a second after the server closes it.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reopened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for i in 0..32 {
        let (stop, reopened) = (stop.clone(), reopened.clone());
        attackers.push(tokio::spawn(async move {
            let pipelined = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(4096);
            while !stop.load(Ordering::SeqCst) {
                // From the attacking pod's own address; the kubelet probes from another.
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
                let Ok(mut s) = socket.connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if i % 2 == 1 {
                    // Never read: the answers fill both socket buffers, then the server's
                    // write waits forever, and so does its read of the next request.
                    loop {
                        match tokio::time::timeout(
                            Duration::from_millis(500),
                            s.write_all(&pipelined),
                        )
                        .await
                        {
                            Ok(Ok(())) => continue,
                            Ok(Err(_)) => break,
                            Err(_) => {}
                        }
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        // Stuck: wait until the server closes it.
                        let mut b = [0u8; 1];
                        let _ = tokio::time::timeout(Duration::from_secs(30), s.peek(&mut b)).await;
                        break;
                    }
                } else {
                    // Idle: connected, sends nothing, until the server closes it.
                    let mut b = [0u8; 1];
                    let _ = tokio::time::timeout(Duration::from_secs(30), s.peek(&mut b)).await;
                }
                reopened.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = rss_bytes();
    // The kubelet: a probe every 500 ms for 12 s (past the 5 s stall bound, twice).
    let mut latencies = Vec::new();
    let mut refused = 0;
    for _ in 0..24 {
        match healthz_latency(&url).await {
            Some(l) => latencies.push(l),
            None => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let closed = reopened.load(Ordering::SeqCst);
    for a in attackers {
        a.abort();
    }
    latencies.sort();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "monitoring port: rss before {:.1} MiB, during {:.1} MiB; 32 reopening slow clients \
         (16 places); /healthz idle {idle:?}, during: {} of 24 answered, median {:?}, max {:?}, \
         {refused} refused; the server closed {closed} attacker connections",
        mib(before),
        mib(during),
        latencies.len(),
        latencies.get(latencies.len() / 2),
        latencies.last(),
    );
    assert_eq!(
        refused, 0,
        "/healthz refused while slow clients hold the port"
    );
    assert!(
        latencies.iter().all(|l| *l < Duration::from_secs(1)),
        "{latencies:?}"
    );
    assert!(
        closed >= 32,
        "stalled connections were closed and reopened: {closed}"
    );
}

/// Tests that measure this process's memory run one at a time: the remote-bytes attack moves
/// it by tens of MiB, which would read as a leak in a test running beside it.
static MEASURED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Label text each pod of the hostile API server carries: 16 MiB.
const HOSTILE_LABEL_BYTES: usize = 16 << 20;
/// Pages of one list, one pod each: 512 MiB of labels per list.
const HOSTILE_PAGES: usize = 32;
/// Namespace `shop` and the Service asked about.
const SHOP: &str = "shop";

/// The labels of hostile pod `pod`, as JSON: about 44,000 labels at Kubernetes' own limits (a
/// 253-byte prefix, a 63-byte name, a 63-byte value), so no single one is refused for its size,
/// each key and value naming the pod, so no two pods share a string the cache could keep once.
fn hostile_labels(pod: usize) -> String {
    use std::fmt::Write;
    let prefix = "p".repeat(253);
    let per_label = prefix.len() + 1 + 63 + 63;
    let mut json = String::with_capacity(HOSTILE_LABEL_BYTES + HOSTILE_LABEL_BYTES / 16);
    json.push_str(r#"{"app":"web""#);
    for i in 0..HOSTILE_LABEL_BYTES / per_label {
        let _ = write!(json, r#","{prefix}/k{pod:05}{i:057}":"v{pod:05}{i:057}""#);
    }
    json.push('}');
    json
}

/// What the hostile API server sent.
#[derive(Default)]
struct Sent {
    pages: std::sync::atomic::AtomicUsize,
    lists: std::sync::atomic::AtomicUsize,
}

/// A remote cluster's API server, hostile or broken, on loopback: it answers what wavegate asks
/// to judge a Service (its identity, access reviews, discovery, Services, EndpointSlices), and
/// lists pods one page at a time, each pod with 16 MiB of labels, each page well under the
/// per-response bound; every watch of pods ends at once with 410 Gone, so every watch is a
/// relist.
async fn hostile_apiserver(sent: Arc<Sent>) -> String {
    use axum::body::Body;
    use axum::extract::{Query, Request};
    use axum::response::IntoResponse;
    use serde_json::json;
    use std::collections::HashMap;
    use std::sync::atomic::Ordering;
    let discovered = |group: &str, plural: &str, kind: &str| {
        json!({"metadata": {"name": group}, "versions": [{"version": "v1", "freshness": "Current",
               "resources": [{"resource": plural, "scope": "Namespaced",
                              "singularResource": kind.to_lowercase(),
                              "verbs": ["get", "list", "watch"],
                              "responseKind": {"group": group, "version": "v1", "kind": kind}}]}]})
    };
    let core = json!({"apiVersion": "apidiscovery.k8s.io/v2", "kind": "APIGroupDiscoveryList",
        "metadata": {}, "items": [{"metadata": {"name": ""}, "versions": [{"version": "v1",
            "freshness": "Current", "resources": [
                discovered("", "pods", "Pod")["versions"][0]["resources"][0].clone(),
                discovered("", "services", "Service")["versions"][0]["resources"][0].clone()]}]}]});
    let groups = json!({"apiVersion": "apidiscovery.k8s.io/v2", "kind": "APIGroupDiscoveryList",
        "metadata": {}, "items": [discovered("discovery.k8s.io", "endpointslices", "EndpointSlice")]});
    let app = axum::Router::new()
        .route("/readyz", axum::routing::get(|| async { "ok" }))
        .route(
            "/api/v1/namespaces/kube-system",
            axum::routing::get(|| async {
                axum::Json(json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "kube-system", "uid": "hostile-remote-kube-system"}}))
            }),
        )
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            axum::routing::post(|axum::Json(mut review): axum::Json<Value>| async move {
                review["status"] = json!({"allowed": true});
                axum::Json(review)
            }),
        )
        .route(
            "/api",
            axum::routing::get(move || async move { axum::Json(core) }),
        )
        .route(
            "/apis",
            axum::routing::get(move || async move { axum::Json(groups) }),
        )
        .fallback(
            move |Query(q): Query<HashMap<String, String>>, request: Request| {
                let sent = sent.clone();
                async move {
                    let path = request.uri().path().to_string();
                    let kind = path.rsplit('/').next().unwrap_or_default().to_string();
                    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
                    let list = |kind: &str, items: &str| {
                        format!(r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"resourceVersion":"1"}},"items":[{items}]}}"#)
                            .into_response()
                    };
                    match (kind.as_str(), watch) {
                        ("pods", true) => {
                            let gone = json!({"type": "ERROR", "object": {"apiVersion": "v1",
                                "kind": "Status", "status": "Failure", "code": 410,
                                "reason": "Expired", "message": "too old resource version"}});
                            format!("{gone}\n").into_response()
                        }
                        // Quiet: nothing changes.
                        ("services" | "endpointslices", true) => Body::from_stream(
                            futures::stream::pending::<Result<Vec<u8>, std::io::Error>>(),
                        )
                        .into_response(),
                        ("services", false) => list(
                            "ServiceList",
                            &json!({"metadata": {"name": "web", "namespace": SHOP,
                                "resourceVersion": "1", "uid": "web-uid"},
                                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
                            .to_string(),
                        ),
                        ("endpointslices", false) => list("EndpointSliceList", ""),
                        ("pods", false) => {
                            let page: usize = q
                                .get("continue")
                                .and_then(|c| c.parse().ok())
                                .unwrap_or(0);
                            if page == 0 {
                                sent.lists.fetch_add(1, Ordering::SeqCst);
                            }
                            sent.pages.fetch_add(1, Ordering::SeqCst);
                            let next = if page + 1 < HOSTILE_PAGES {
                                format!(r#","continue":"{}""#, page + 1)
                            } else {
                                String::new()
                            };
                            // Off the runtime wavegate runs on: the stand-in's work is not
                            // the attack's cost.
                            let labels = tokio::task::spawn_blocking(move || hostile_labels(page))
                                .await
                                .unwrap();
                            let head = format!(
                                r#"{{"apiVersion":"v1","kind":"PodList","metadata":{{"resourceVersion":"1"{next}}},"items":[{{"metadata":{{"name":"web-{page}","namespace":"{SHOP}","resourceVersion":"1","labels":"#
                            );
                            let tail = r#"},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}]}"#;
                            format!("{head}{labels}{tail}").into_response()
                        }
                        _ => (
                            axum::http::StatusCode::NOT_FOUND,
                            axum::Json(json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "NotFound", "code": 404})),
                        )
                            .into_response(),
                    }
                }
            },
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// `serve`'s flags, at their defaults.
#[derive(clap::Parser)]
struct ServeFlags {
    #[command(flatten)]
    cluster: wavegate::cli::ClusterArgs,
}

/// The remote-bytes attack of docs/security.md (Safety 4, item 6), served as `wavegate serve`
/// serves a cluster of `--clusters-from`, with the shipped flags: a remote API server sends
/// pods with 16 MiB of labels page by page, 512 MiB a list, a relist at every watch. A viewer
/// asks for a Service of that cluster in a loop while `/healthz` is probed every 100 ms. The
/// pods' watch must stop at --max-cluster-bytes with the reason in the answer, memory must stay
/// far below what the attack sends, and `/healthz` must never fail long enough for the kubelet
/// to restart the pod. One tokio worker, as the chart's 500m CPU limit gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_remote_api_server_sending_huge_labels_is_stopped_at_the_byte_bound() {
    use clap::Parser;
    use std::sync::atomic::Ordering;
    use wavegate::clusters::{Cluster, Clusters, Source};
    let _alone = MEASURED.lock().await;
    let sent = Arc::new(Sent::default());
    let remote = hostile_apiserver(sent.clone()).await;
    let dir = std::env::temp_dir().join(format!("wavegate-load-remote-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("hostile"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{remote}'}}\n\
             contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n\
             users:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let flags = ServeFlags::parse_from(["wavegate"]);
    let metrics = Arc::new(Metrics::default());
    let home = {
        let config = kube::Config::new(slow_api_server().await.parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let cache = Cache::new(client, None, Duration::from_millis(500), metrics.clone());
        Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap()
    };
    let clusters = Clusters::new(Cluster::home(home));
    let build = wavegate::cli::remote_build(&flags.cluster, None, metrics.clone()).unwrap();
    clusters
        .refresh(&Source::kubeconfig_dir(dir.clone()), &build)
        .await
        .unwrap();
    assert!(
        clusters.remotes().contains_key("hostile"),
        "refused: {:?}",
        clusters.refused()
    );
    let url = serve_state(
        AppState::of(clusters, metrics),
        api::ConnectionArgs::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let ask = || async {
        let r = http
            .get(format!(
                "{url}/api/v1/clusters/hostile/health/services/{SHOP}/web"
            ))
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        (code, r.json::<Value>().await.unwrap_or(Value::Null))
    };

    // The same probe with no attack, for the machine's own share of the latency.
    let idle = kubelet_probe::Prober::start(&url, Duration::from_millis(100));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = idle.stop();
    let before = rss_bytes();
    let probe = kubelet_probe::Prober::start(&url, Duration::from_millis(100));
    let peak = probe.peak_rss();
    // Far below the 512 MiB a list sends, and with the process's own ~35 MiB under the
    // chart's 256 Mi memory limit (the stand-in's buffers count here too).
    let bound = 192 << 20;
    let started = Instant::now();
    let mut answers = 0;
    let stopped_after = loop {
        let (code, verdict) = ask().await;
        answers += 1;
        assert_eq!(code, 200, "{verdict}");
        assert_ne!(verdict["status"], "Healthy", "{verdict}");
        let message = verdict["message"].as_str().unwrap_or_default();
        if message.contains("(--max-cluster-bytes)") {
            break started.elapsed();
        }
        let grown = peak.get().saturating_sub(before);
        assert!(
            grown < bound && started.elapsed() < Duration::from_secs(120),
            "after {:?}, {} pages sent: memory grew by {:.0} MiB and the watch is not stopped; \
             last answer {verdict}",
            started.elapsed(),
            sent.pages.load(Ordering::SeqCst),
            kubelet_probe::mib(grown)
        );
    };
    // Viewers go on asking: the answer keeps the reason, and nothing is listed again yet.
    let pages_at_stop = sent.pages.load(Ordering::SeqCst);
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let (code, verdict) = ask().await;
        answers += 1;
        assert_eq!(code, 200, "{verdict}");
        let message = verdict["message"].as_str().unwrap_or_default();
        assert!(message.contains("(--max-cluster-bytes)"), "{verdict}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = rss_bytes();
    let samples = probe.stop();
    let metrics_text = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let over_bound = metrics_text
        .lines()
        .find(|l| l.starts_with("wavegate_objects_over_bound") && l.contains("pods"))
        .unwrap_or("wavegate_objects_over_bound for pods: none")
        .to_string();
    eprintln!(
        "remote bytes: stopped at --max-cluster-bytes {} MiB after {stopped_after:?} and {} of \
         {HOSTILE_PAGES} pages ({} MiB of labels sent, {} list(s)); {answers} asks answered; \
         rss before {:.1} MiB, peak {:.1} MiB (+{:.1}), after {:.1} MiB; /healthz during: {}; \
         /healthz idle before: {}; {over_bound}",
        kubelet_probe::mib(flags.cluster.max_cluster_bytes as u64),
        pages_at_stop,
        pages_at_stop * (HOSTILE_LABEL_BYTES >> 20),
        sent.lists.load(Ordering::SeqCst),
        kubelet_probe::mib(before),
        kubelet_probe::mib(samples.rss_peak),
        kubelet_probe::mib(samples.rss_peak.saturating_sub(before)),
        kubelet_probe::mib(after),
        samples.summary(),
        idle.summary(),
    );
    assert!(
        pages_at_stop < HOSTILE_PAGES,
        "the whole list was read: {pages_at_stop} pages"
    );
    assert_eq!(
        sent.pages.load(Ordering::SeqCst),
        pages_at_stop,
        "listed again within the over-bound retry"
    );
    assert!(over_bound.ends_with(" 1"), "{over_bound}");
    assert!(
        samples.rss_peak.saturating_sub(before) < bound,
        "peak memory +{:.0} MiB",
        kubelet_probe::mib(samples.rss_peak.saturating_sub(before))
    );
    assert!(samples.latencies.len() >= 20, "{}", samples.summary());
    // Not every probe within the timeout: each 16 MiB page is parsed and weighed on the one
    // async worker, which in a debug build on a busy machine holds `/healthz` for about 2 s
    // a page. What must hold is the kubelet's own rule: no restart.
    assert!(
        samples.longest_failing() < kubelet_probe::liveness_tolerance(),
        "the kubelet would restart the pod: {}",
        samples.summary()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
