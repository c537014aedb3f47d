//! The HTTP contract that needs no cluster, driven in-process with `oneshot`: wavegate's client
//! points at a closed loopback port, so every cache read is "not synced" — which is all these
//! rules need (refusals happen before any read, or must not depend on one).

use super::*;
use crate::cache::Cache;
use crate::cache::fed::{self, Feed};
use crate::evaluate::{EvalConfig, Evaluator};
use crate::metrics::Metrics;
use crate::resource::GroupResource;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use kube::api::DynamicObject;
use serde_json::Value;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt;

/// A client for an API server that is not there.
pub(crate) fn unreachable_client() -> kube::Client {
    let mut config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    config.connect_timeout = Some(Duration::from_millis(100));
    kube::Client::try_from(config).unwrap()
}

/// A client for an API server that accepts connections and never answers: every request
/// (the access review before a watch included) hangs until the caller gives up.
async fn silent_client() -> kube::Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap()
}

/// State whose cache reads wait `sync_wait` and then fail as "not synced".
pub(crate) fn state(sync_wait: Duration) -> AppState {
    state_with(unreachable_client(), sync_wait)
}

fn state_with(client: kube::Client, sync_wait: Duration) -> AppState {
    let metrics = Arc::new(Metrics::default());
    let cache = Cache::new(client, None, sync_wait, metrics.clone());
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    AppState::new(evaluator, metrics)
}

async fn call(app: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).to_string();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

fn error_of(body: &Value) -> &str {
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no JSON error: {body}"))
}

#[tokio::test]
async fn generic_health_of_a_secret_is_refused_before_any_read() {
    let app = router(state(Duration::from_secs(5)));
    let started = Instant::now();
    for path in [
        "/api/v1/health/secrets/kube-system/bootstrap-token",
        "/api/v1/health/pods/kube-system/etcd?degraded=%24.spec.containers%5B*%5D.env",
        "/api/v1/health/configmaps/default/settings",
    ] {
        let (code, _, body) = call(&app, get(path)).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{path}: {body}");
        assert!(error_of(&body).contains("--generic-kinds"), "{body}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused without waiting for a cache or discovery"
    );
}

#[tokio::test]
async fn api_requires_the_token_in_any_bearer_case_but_probes_do_not() {
    let app = router(state(Duration::from_millis(10)).with_token(Token::fixed("s3cret")));
    let (code, headers, body) = call(&app, get("/api/v1/gates")).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
    assert!(headers.contains_key(header::WWW_AUTHENTICATE));
    for auth in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        let req = Request::get("/api/v1/health/services/cicd/forgejo")
            .header(header::AUTHORIZATION, auth)
            .body(Body::empty())
            .unwrap();
        let (code, _, body) = call(&app, req).await;
        assert_eq!(code, StatusCode::OK, "{auth}: {body}");
        assert_ne!(
            body["status"], "Healthy",
            "an unsynced cache is never Healthy"
        );
    }
    let (code, _, _) = call(&app, get("/healthz")).await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn proxied_request_whose_application_cannot_be_read_is_not_served_unscoped() {
    let app = router(state(Duration::from_millis(20)));
    for path in [
        "/api/v1/gates",
        "/api/v1/applications",
        "/api/v1/health/services/kube-system/kube-dns",
    ] {
        let req = Request::get(path)
            .header("Argocd-Application-Name", "argocd:platform")
            .header("Argocd-Project-Name", "default")
            .body(Body::empty())
            .unwrap();
        let (code, _, body) = call(&app, req).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
        assert!(
            error_of(&body).contains("to scope the request"),
            "{path}: {body}"
        );
    }
    let req = Request::get("/api/v1/gates")
        .header("Argocd-Namespace", "argocd")
        .body(Body::empty())
        .unwrap();
    let (code, _, body) = call(&app, req).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        error_of(&body).contains("Argocd-Application-Name"),
        "{body}"
    );
}

#[tokio::test]
async fn every_response_is_nosniff_and_unframeable_and_the_dashboard_runs_only_its_own_code() {
    let app = router(state(Duration::from_millis(10)));
    let (code, headers, body) = call(&app, get("/")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    // The served page's inline script, hashed here independently, is the one the policy allows.
    let html = body.as_str().unwrap();
    let script = html
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(s, _)| s)
        .unwrap();
    // The policy hashes the script as served: with the shared table and timeline model in it.
    assert_eq!(
        script.matches("function wavesTable(").count(),
        1,
        "the served script holds ui/waves.js once"
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, script.as_bytes());
    let hash = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, digest);
    assert!(csp.contains(&format!("'sha256-{hash}'")), "{csp}");
    for path in ["/api/v1/nothing", "/healthz", "/api/v1/health/x/Bad/y"] {
        let (_, headers, _) = call(&app, get(path)).await;
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        // Kept by no shared cache, and never for another Application or caller.
        assert_eq!(
            headers[header::CACHE_CONTROL],
            "no-cache, private",
            "{path}"
        );
        let vary = headers[header::VARY].to_str().unwrap();
        assert!(vary.contains("Argocd-Application-Name"), "{path}: {vary}");
        let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
    }
}

#[tokio::test]
async fn requests_over_the_concurrency_limit_are_refused_at_once_with_503() {
    // Each admitted request holds its permit for the 1s sync wait of an unreachable cache.
    let app = router(state(Duration::from_secs(1)).with_limits(LimitArgs {
        max_concurrent_requests: 2,
        ..LimitArgs::default()
    }));
    let calls = (0..10).map(|i| {
        let app = app.clone();
        async move {
            let started = Instant::now();
            let path = format!("/api/v1/health/services/ns{i}/web");
            let r = call(&app, get(&path)).await;
            (r, started.elapsed())
        }
    });
    let results = futures::future::join_all(calls).await;
    let refused: Vec<_> = results
        .iter()
        .filter(|((_, _, body), _)| {
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("--max-concurrent-requests"))
        })
        .collect();
    assert_eq!(refused.len(), 8, "{results:?}");
    for ((code, headers, _), took) in refused {
        assert_eq!(*code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers[header::RETRY_AFTER], "1");
        assert!(*took < Duration::from_millis(500), "refused, not queued");
    }
    // The probes stay outside the bound.
    let (code, _, _) = call(&app, get("/healthz")).await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn a_request_longer_than_the_timeout_is_abandoned_with_a_message() {
    let slow = state_with(silent_client().await, Duration::from_secs(5));
    let app = router(slow.with_limits(LimitArgs {
        request_timeout: Duration::from_millis(200),
        ..LimitArgs::default()
    }));
    let started = Instant::now();
    let (code, _, body) = call(&app, get("/api/v1/health/services/cicd/web")).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(error_of(&body).contains("--request-timeout"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn gate_waits_over_the_cap_are_refused_with_429_after_input_checks() {
    let app = router(state(Duration::from_millis(50)).with_limits(LimitArgs {
        max_waiters: 2,
        ..LimitArgs::default()
    }));
    let waits = (0..5).map(|_| {
        let app = app.clone();
        async move { call(&app, get("/api/v1/gates/cicd/ready/wait?timeout=1s")).await }
    });
    let results = futures::future::join_all(waits).await;
    let codes: Vec<u16> = results.iter().map(|(c, _, _)| c.as_u16()).collect();
    assert_eq!(
        codes.iter().filter(|c| **c == 429).count(),
        3,
        "{results:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == 408).count(),
        2,
        "{results:?}"
    );
    let (_, headers, body) = results.iter().find(|(c, _, _)| c.as_u16() == 429).unwrap();
    assert!(error_of(body).contains("--max-waiters"), "{body}");
    assert_eq!(headers[header::RETRY_AFTER], "5");
    // Bad input is still a 400, whatever the waiters.
    let (code, _, _) = call(&app, get("/api/v1/gates/cicd/ready/wait?timeout=soon")).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_cluster_wavegate_does_not_judge_is_404_on_every_cluster_route() {
    let app = router(state(Duration::from_millis(10)));
    for path in [
        "/api/v1/clusters/prod/health/services/cicd/web",
        "/api/v1/clusters/prod/gates",
        "/api/v1/clusters/prod/gates/cicd/g",
        "/api/v1/clusters/prod/gates/cicd/g/wait?timeout=1s",
    ] {
        let (code, _, body) = call(&app, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(
            error_of(&body).contains("no cluster named \"prod\""),
            "{path}: {body}"
        );
    }
    // The home cluster answers under its Argo CD name too (here: not synced, so not 404).
    let req = Request::get("/api/v1/clusters/in-cluster/gates/cicd/g")
        .body(Body::empty())
        .unwrap();
    let (code, _, body) = call(&app, req).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (code, _, body) = call(
        &app,
        Request::get("/api/v1/clusters")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["clusters"][0]["name"], "in-cluster", "{body}");
    assert_eq!(body["refused"], serde_json::json!([]), "{body}");
}

/// A kubeconfig for a loopback API server that accepts connections and never answers.
async fn silent_kubeconfig(token: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://{addr}'}}\n\
         contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n\
         users:\n- name: u\n  user: {{token: {token}}}\n"
    )
}

#[tokio::test]
async fn a_wait_on_a_cluster_that_is_replaced_stops_with_503_and_why() {
    let dir = std::env::temp_dir().join(format!("wavegate-api-replaced-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge"), silent_kubeconfig("t1").await).unwrap();
    let source = crate::clusters::Source::kubeconfig_dir(dir.clone());
    let build: Box<crate::clusters::Build> = Box::new(|_, client| {
        let metrics = Arc::new(Metrics::default());
        // Reads wait long: only the cluster's replacement can end the wait early.
        let cache = Cache::new(client, None, Duration::from_secs(60), metrics.clone());
        Evaluator::new(cache, EvalConfig::default(), metrics).map_err(|e| e.to_string())
    });
    let home = state(Duration::from_millis(50));
    let clusters = crate::clusters::Clusters::new(home.clusters.home().clone());
    clusters.refresh(&source, &build).await.unwrap();
    let app = router(AppState {
        clusters: clusters.clone(),
        ..home
    });
    let waiting = tokio::spawn({
        let app = app.clone();
        async move {
            call(
                &app,
                get("/api/v1/clusters/edge/gates/shop/ready/wait?timeout=60s"),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    std::fs::write(dir.join("edge"), silent_kubeconfig("t2-other").await).unwrap();
    clusters.refresh(&source, &build).await.unwrap();
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the wait did not stop when its cluster was replaced")
        .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(error_of(&body).contains("replaced or removed"), "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn readyz_gives_counts_of_remote_clusters_never_their_names_or_errors() {
    let dir = std::env::temp_dir().join(format!("wavegate-api-readyz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret-prod"), silent_kubeconfig("t").await).unwrap();
    std::fs::write(dir.join("broken-staging"), "clusters: 5").unwrap();
    let source = crate::clusters::Source::kubeconfig_dir(dir.clone());
    let build: Box<crate::clusters::Build> = Box::new(|_, client| {
        let metrics = Arc::new(Metrics::default());
        let cache = Cache::new(client, None, Duration::from_millis(50), metrics.clone());
        cache.require(crate::gate::kind());
        Evaluator::new(cache, EvalConfig::default(), metrics).map_err(|e| e.to_string())
    });
    let home = state(Duration::from_millis(50));
    let clusters = crate::clusters::Clusters::new(home.clusters.home().clone());
    clusters.refresh(&source, &build).await.unwrap();
    let app = router(AppState { clusters, ..home });
    let (_, _, body) = call(&app, get("/readyz")).await;
    let text = body.as_str().unwrap_or_default().to_string();
    assert!(
        text.contains("remote clusters (not counted): 0 ready, 1 not ready, 1 refused"),
        "{text}"
    );
    for secret in ["secret-prod", "broken-staging", "127.0.0.1", "kubeconfig"] {
        assert!(!text.contains(secret), "{secret} in /readyz: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `?healthy=` with an expression over the bounds is the caller's mistake, answered at once
/// with the limit it broke — before any discovery or read.
#[tokio::test]
async fn an_exploding_expression_is_a_400_naming_the_limit() {
    let app = router(state(Duration::from_secs(5)));
    let attack = crate::checks::generic::tests::exploding_expression();
    let path = format!(
        "/api/v1/health/deployments.apps/cicd/forgejo?healthy={}",
        percent(&attack)
    );
    let started = Instant::now();
    let (code, _, body) = call(&app, get(&path)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(error_of(&body).contains("descendant segments"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Hostile argocd-cm health scripts: an endless loop, a string doubled without end, a
/// recursion without end, a table grown without end, and (with `useOpenLibs`) `string.rep` of a
/// gigabyte and backtracking patterns (C code, where no instruction is counted). Each costs a bounded amount (instructions, memory, Lua's stack) and is Unknown
/// naming what stopped it, and `/healthz` answers all along on a one-worker runtime. Timing is
/// asserted only against a generous bound.
#[tokio::test(flavor = "current_thread")]
async fn healthz_answers_while_hostile_argocd_cm_scripts_run() {
    let scripts = [
        ("Loop", "while true do end"),
        ("Double", "local s = 'x' while true do s = s .. s end"),
        (
            "Deep",
            "local function f(n) return 1 + f(n + 1) end return {status = 'Healthy', message = f(1)}",
        ),
        ("Grow", "local t = {} while true do t[#t + 1] = {obj} end"),
        (
            "Rep",
            "return {status = 'Healthy', message = string.rep('x', 1e9)}",
        ),
        (
            "Backtrack",
            "local s = string.rep('x', 1e4) return {status = 'Healthy', \
             message = tostring(s:find('.-.-.-y'))}",
        ),
        (
            "Classes",
            "local s = string.rep('a', 3e6) return {status = 'Healthy', \
             message = tostring(s:find('a*b'))}",
        ),
    ];
    let mut data: std::collections::BTreeMap<String, String> = scripts
        .iter()
        .map(|(kind, script)| {
            (
                format!("resource.customizations.health.example.com_{kind}"),
                script.to_string(),
            )
        })
        .collect();
    for kind in ["Rep", "Backtrack", "Classes"] {
        data.insert(
            format!("resource.customizations.useOpenLibs.example.com_{kind}"),
            "true".into(),
        );
    }
    let lua = Arc::new(crate::argocd_lua::LuaHealth::default());
    lua.set_argocd_cm(Some(&data));
    let mut runs = Vec::new();
    for _ in 0..2 {
        for (kind, _) in scripts {
            let object = serde_json::json!({
                "apiVersion": "example.com/v1", "kind": kind,
                "metadata": {"name": "hostile", "namespace": "cicd"}});
            let rule = crate::checks::generic::Rule::default();
            runs.push(tokio::spawn(crate::checks::generic::check_off_runtime(
                format!("{}s.example.com", kind.to_lowercase()),
                "cicd".into(),
                "hostile".into(),
                Some(std::sync::Arc::new(object)),
                rule,
                Some(lua.clone()),
            )));
        }
    }
    let app = router(state(Duration::from_millis(10)));
    let started = Instant::now();
    let (mut answers, mut slowest) = (0, Duration::ZERO);
    while !runs.iter().all(|r| r.is_finished()) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "hostile scripts still running after 120 s"
        );
        let asked = Instant::now();
        let (code, _, _) = call(&app, get("/healthz")).await;
        assert_eq!(code, StatusCode::OK);
        slowest = slowest.max(asked.elapsed());
        answers += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    assert!(
        slowest < Duration::from_secs(2),
        "/healthz took {slowest:?} once while hostile scripts ran ({took:?}, {answers} answers)"
    );
    for run in futures::future::join_all(runs).await {
        let judged = run.unwrap();
        let v = &judged.verdict;
        assert_eq!(v.status, crate::health::HealthStatus::Unknown, "{v}");
        let bound = [
            "Lua instructions",
            "MiB of memory",
            "stack overflow",
            "ran past 1s",
            "backtrack past the bound",
        ];
        assert!(bound.iter().any(|b| v.message.contains(b)), "{v}");
        let argo = v.argo_status.as_ref().expect("argoStatus");
        assert_eq!(argo.status, "Unknown", "{v}");
    }
    eprintln!("hostile scripts: {took:?}, /healthz answered {answers} times, slowest {slowest:?}");
}

/// Expressions are evaluated on the blocking pool: with every async worker's time available,
/// `/healthz` answers at once while costly (admitted) evaluations run. On a one-worker runtime
/// an evaluation on the async worker would hold it for the whole evaluation.
#[tokio::test(flavor = "current_thread")]
async fn healthz_answers_while_expressions_evaluate() {
    let items: Vec<Value> = (0..4_000)
        .map(|i| serde_json::json!({"name": format!("c{i}"), "env": [{"name": "A", "value": "x"}]}))
        .collect();
    let object = serde_json::json!({"spec": {"items": items}});
    let expr = "$..[*,*,*,*,*,*,*,*][*,*,*,*,*,*,*,*]";
    let rule = crate::checks::generic::Rule::new(Some(expr.into()), None, None).unwrap();
    let mut evaluations = Vec::new();
    for _ in 0..4 {
        let (o, r) = (Some(std::sync::Arc::new(object.clone())), rule.clone());
        evaluations.push(tokio::spawn(crate::checks::generic::check_off_runtime(
            "widgets.example.com".into(),
            "cicd".into(),
            "big".into(),
            o,
            r,
            None,
        )));
    }
    tokio::task::yield_now().await;
    let app = router(state(Duration::from_millis(10)));
    let started = Instant::now();
    let (code, _, _) = call(&app, get("/healthz")).await;
    let took = started.elapsed();
    assert_eq!(code, StatusCode::OK);
    let all = futures::future::join_all(evaluations).await;
    let total = started.elapsed();
    assert!(all.iter().all(|v| v.is_ok()));
    assert!(
        took < Duration::from_millis(100) && took * 5 < total,
        "/healthz took {took:?} while evaluations took {total:?}"
    );
}

/// A proxied request from `user` (the headers argocd-server sets) for application `app`.
fn proxied_get(path: &str, user: &str) -> Request<Body> {
    Request::get(path)
        .header("argocd-application-name", "argocd:shop")
        .header("argocd-project-name", "default")
        .header("argocd-namespace", "argocd")
        .header("argocd-user-id", user)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn one_caller_cannot_hold_every_request_slot() {
    // Each admitted request holds its places for the 1s sync wait of an unreachable cache.
    let app = router(state(Duration::from_secs(1)).with_limits(LimitArgs {
        max_concurrent_requests: 8,
        max_requests_per_caller: 2,
        ..LimitArgs::default()
    }));
    let calls = (0..8).map(|i| {
        let app = app.clone();
        let user = if i < 6 { "alice" } else { "bob" };
        async move {
            let r = call(
                &app,
                proxied_get("/api/v1/applications/argocd/shop/waves", user),
            )
            .await;
            (user, r)
        }
    });
    let results = futures::future::join_all(calls).await;
    let busy = |who: &str| {
        results
            .iter()
            .filter(|(u, (code, _, body))| {
                *u == who
                    && *code == StatusCode::TOO_MANY_REQUESTS
                    && error_of(body).contains("--max-requests-per-caller")
            })
            .count()
    };
    assert_eq!(busy("alice"), 4, "{results:?}");
    assert_eq!(busy("bob"), 0, "{results:?}");
    let refused = results
        .iter()
        .find(|(_, (c, _, _))| *c == StatusCode::TOO_MANY_REQUESTS)
        .unwrap();
    assert_eq!(refused.1.1[header::RETRY_AFTER], "1");
    // Once alice's requests are answered, her places are hers again.
    let (code, _, body) = call(
        &app,
        proxied_get("/api/v1/applications/argocd/shop/waves", "alice"),
    )
    .await;
    assert_ne!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");
}

#[tokio::test]
async fn one_caller_cannot_hold_every_gate_wait() {
    let app = router(state(Duration::from_millis(50)).with_limits(LimitArgs {
        max_waiters: 8,
        max_waiters_per_caller: 2,
        ..LimitArgs::default()
    }));
    // Direct calls (the token's holders) are one caller.
    let waits = (0..5).map(|_| {
        let app = app.clone();
        async move { call(&app, get("/api/v1/gates/cicd/ready/wait?timeout=1s")).await }
    });
    let results = futures::future::join_all(waits).await;
    let codes: Vec<u16> = results.iter().map(|(c, _, _)| c.as_u16()).collect();
    assert_eq!(
        codes.iter().filter(|c| **c == 429).count(),
        3,
        "{results:?}"
    );
    let (_, _, body) = results.iter().find(|(c, _, _)| c.as_u16() == 429).unwrap();
    assert!(
        error_of(body).contains("--max-waiters-per-caller"),
        "{body}"
    );
    // And the shares are given back.
    let again = call(&app, get("/api/v1/gates/cicd/ready/wait?timeout=1s")).await;
    assert_eq!(again.0.as_u16(), 408, "{again:?}");
}

/// A DatabaseRole is asked with the Database's parameters, and a wrong one is the caller's
/// mistake (400, naming what is allowed) before any read; a well-formed ask whose reads fail
/// (no API server answers) is a verdict that says why, never Healthy.
#[tokio::test]
async fn database_role_parameters_are_checked_and_a_failed_read_is_not_healthy() {
    let app = router(state(Duration::from_millis(300)));
    let role = "/api/v1/health/databaseroles.postgresql.cnpg.io/ddb/forgejo";
    for (query, says) in [
        ("?minReady=1", "requireClusterReady"),
        ("?requireClusterReady=maybe", "\"maybe\""),
    ] {
        let (code, _, body) = call(&app, get(&format!("{role}{query}"))).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(error_of(&body).contains(says), "{query}: {body}");
    }
    let (code, _, body) = call(&app, get(&format!("{role}?requireClusterReady=true"))).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_ne!(body["status"], "Healthy", "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("databaseroles.postgresql.cnpg.io ddb/forgejo: ")),
        "{body}"
    );
}

/// A batch of waves views judges several Applications at once, each of which its own request
/// would have judged under a place of the caller's share: batching must not multiply the
/// share. With the share taken by a batch, the caller's next request is refused; a batch
/// whose caller has no place left beside it is still answered, one Application at a time,
/// with no part refused.
#[tokio::test]
async fn a_batchs_applications_judged_at_once_count_against_the_callers_share() {
    // Each part holds its places until the request timeout: the API server never answers.
    let slow = state_with(silent_client().await, Duration::from_secs(5));
    let app = router(slow.with_limits(LimitArgs {
        max_requests_per_caller: 2,
        applications_concurrency: 4,
        request_timeout: Duration::from_secs(1),
        ..LimitArgs::default()
    }));
    let batch = "/api/v1/applications/waves?app=argocd/a&app=argocd/b&app=argocd/c";
    let running = tokio::spawn({
        let app = app.clone();
        async move { call(&app, get(batch)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let single = "/api/v1/applications/argocd/other/waves";
    let (code, headers, body) = call(&app, get(single)).await;
    assert_eq!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        error_of(&body).contains("--max-requests-per-caller"),
        "{body}"
    );
    assert_eq!(headers[header::RETRY_AFTER], "1");
    let (code, _, body) = running.await.unwrap();
    assert!(
        error_of(&body).contains("--request-timeout"),
        "{code}: {body}"
    );
    // The batch's places are given back with it.
    let (code, _, body) = call(&app, get(single)).await;
    assert_ne!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");

    // A share of one: the batch's own place, and nothing beside it.
    let one = router(state(Duration::from_millis(200)).with_limits(LimitArgs {
        max_requests_per_caller: 1,
        ..LimitArgs::default()
    }));
    let (code, _, body) = call(&one, get(batch)).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let parts = body["applications"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{body}");
    for part in parts {
        assert_eq!(part["status"], 503, "not synced, never refused: {body}");
    }
}

/// Every dashboard behind one ingress is one caller: a batch that took its extra places for
/// its whole life filled the caller's share with a few pages' polls, served from kept answers
/// or waiting on one slow Application, and the next page was refused with 429. A kept part
/// takes no place, and one Application judged at a time takes only the batch's own.
#[tokio::test]
async fn a_batch_of_kept_views_holds_no_place_beside_its_own() {
    // The cold Application is judged until the request timeout: the API server never answers.
    let slow = state_with(silent_client().await, Duration::from_secs(5));
    handlers::keep_view(&slow, "argocd", "a", &[], None);
    handlers::keep_view(&slow, "argocd", "b", &[], None);
    let app = router(slow.with_limits(LimitArgs {
        max_requests_per_caller: 2,
        applications_concurrency: 4,
        request_timeout: Duration::from_secs(1),
        ..LimitArgs::default()
    }));
    let batch = "/api/v1/applications/waves?app=argocd/a&app=argocd/b&app=argocd/cold";
    let running = tokio::spawn({
        let app = app.clone();
        async move { call(&app, get(batch)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, _, body) = call(&app, get("/api/v1/applications/argocd/other/waves")).await;
    assert_ne!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let (_, _, body) = running.await.unwrap();
    assert!(error_of(&body).contains("--request-timeout"), "{body}");
    // Kept parts are served from what was kept, at the answer's time.
    let kept = "/api/v1/applications/waves?app=argocd/a&app=argocd/b";
    let (code, _, body) = call(&app, get(kept)).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let parts = body["applications"].as_array().unwrap();
    assert_eq!(parts[0]["waves"]["kept"], "a", "{body}");
    assert_eq!(parts[0]["waves"]["now"], body["now"], "{body}");
    assert_eq!(parts[1]["waves"]["kept"], "b", "{body}");
}

/// Five dashboards behind one ingress are one caller. When a change leaves their pages' kept
/// views stale, the first batch judges them and the others wait for its turns, to be served
/// what it keeps: a part that only waited took a place beside its batch's own, so a few
/// waiting pages filled the caller's share and the next page (or the UI extension) was
/// refused with 429. A part takes its place only once it is its turn to judge.
#[tokio::test]
async fn batch_parts_waiting_for_anothers_judgement_hold_no_place() {
    // The first batch judges until the request timeout: the API server never answers.
    let slow = state_with(silent_client().await, Duration::from_secs(5));
    let app = router(slow.with_limits(LimitArgs {
        max_requests_per_caller: 6,
        applications_concurrency: 4,
        request_timeout: Duration::from_secs(2),
        ..LimitArgs::default()
    }));
    let batch = "/api/v1/applications/waves?app=argocd/a&app=argocd/b&app=argocd/c&app=argocd/d";
    let page = || {
        let app = app.clone();
        tokio::spawn(async move { call(&app, get(batch)).await })
    };
    // Its own place and three beside it: four of the six.
    let judging = page();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Its own place; its parts wait for the first batch's turns.
    let waiting = page();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, _, body) = call(&app, get("/api/v1/applications/argocd/other/waves")).await;
    assert_ne!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");
    for page in [judging, waiting] {
        let (code, _, body) = page.await.unwrap();
        assert_ne!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");
    }
}

/// A batch whose caller has no place beside its own judges one Application at a time, its
/// other parts waiting for that place. A part that waited holding its Application's turn made
/// every request for that Application, any caller's, wait behind the batch's judgements of
/// others, up to `--request-timeout` (503). A part waits for a place holding no turn: another
/// caller asking for one of those Applications is served at once.
#[tokio::test]
async fn a_batch_waiting_for_its_place_keeps_no_other_caller_from_its_applications() {
    let metrics = Arc::new(Metrics::default());
    let cache = fed::cache(
        "argocd",
        &[
            ("argoproj.io", "applications", "Application"),
            ("apps", "deployments", "Deployment"),
        ],
    )
    .await;
    let apps: Arc<Feed<DynamicObject>> =
        cache.feed(&GroupResource::new("argoproj.io", "applications"));
    // Never listed: the slow Application's Deployment is judged until the request timeout.
    let _deployments: Arc<Feed<DynamicObject>> =
        cache.feed(&GroupResource::new("apps", "deployments"));
    let in_cluster = json!({"name": "in-cluster", "namespace": "argocd"});
    let mut slow = application("slow", in_cluster.clone(), "Healthy", &[]);
    slow.data["status"]["resources"] = json!([{"group": "apps", "version": "v1",
        "kind": "Deployment", "namespace": "argocd", "name": "web", "status": "Synced"}]);
    let quick = ["b", "c", "d"].map(|name| application(name, in_cluster.clone(), "Healthy", &[]));
    apps.list(std::iter::once(slow).chain(quick));
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let app = router(AppState::new(evaluator, metrics).with_limits(LimitArgs {
        max_requests_per_caller: 1,
        applications_concurrency: 4,
        request_timeout: Duration::from_secs(10),
        ..LimitArgs::default()
    }));
    // Two callers, by the address each connects from.
    let from = |path: &str, ip: &str| {
        Request::get(path)
            .extension(limits::Peer(ip.parse().unwrap()))
            .body(Body::empty())
            .unwrap()
    };
    let batch = "/api/v1/applications/waves?app=argocd/slow&app=argocd/b&app=argocd/c&app=argocd/d";
    let running = tokio::spawn({
        let app = app.clone();
        let asked = from(batch, "10.0.0.1");
        async move { call(&app, asked).await }
    });
    // The slow part judges under the batch's own place; the others wait for it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let single = from("/api/v1/applications/argocd/b/waves", "10.0.0.2");
    let served = tokio::time::timeout(Duration::from_secs(5), call(&app, single)).await;
    let (code, _, body) = served.expect("another caller waited for the batch's judgements");
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "b", "{body}");
    assert!(
        !running.is_finished(),
        "the slow part was not judged until the timeout: nobody waited on the batch's place"
    );
    running.abort();
}

/// A place a test hands out: one permit of a semaphore it can look at; `waiting` says a
/// request has begun to wait for one.
struct Permits {
    permits: Arc<tokio::sync::Semaphore>,
    waiting: Arc<std::sync::atomic::AtomicBool>,
}

impl handlers::PlacesToJudge for Permits {
    type Place = tokio::sync::OwnedSemaphorePermit;
    fn free(&self) -> Option<Self::Place> {
        self.permits.clone().try_acquire_owned().ok()
    }
    fn next_free(&self) -> impl std::future::Future<Output = Self::Place> + Send {
        self.waiting
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let permits = self.permits.clone();
        async move { permits.acquire_owned().await.expect("never closed") }
    }
}

/// Until `done` holds, for at most 5 s; whether it did.
async fn eventually(done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

/// A part that waited for its batch's place and then finds its Application's turn taken (by
/// another caller judging it, which may take seconds) gives the place back while it waits for
/// the turn: it held it, and the batch's other parts, which could judge meanwhile, waited.
#[tokio::test]
async fn a_part_holds_no_place_while_it_waits_for_a_turn() {
    let metrics = Arc::new(Metrics::default());
    let (cache, apps) = argocd_cache().await;
    apps.list([application(
        "y",
        json!({"name": "in-cluster"}),
        "Healthy",
        &[],
    )]);
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let state = AppState::new(evaluator, metrics);
    let permits = Arc::new(tokio::sync::Semaphore::new(1));
    let waiting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The batch's place is taken (another part judges under it).
    let busy = permits.clone().try_acquire_owned().unwrap();
    let part = tokio::spawn({
        let state = state.clone();
        let places = Permits {
            permits: permits.clone(),
            waiting: waiting.clone(),
        };
        async move {
            handlers::view_answer(&state, "argocd", "y", None, &places)
                .await
                .map(|_| ())
        }
    });
    // No place at its turn: the part gave the turn back and waits for the place.
    let began = || waiting.load(std::sync::atomic::Ordering::SeqCst);
    assert!(eventually(began).await, "the part never waited for a place");
    let key = handlers::ViewKey::of("argocd", "y", None);
    let other = state.views.try_turn(&key).expect("the part holds no turn");
    // The place comes free (to the part, first in line) while another caller holds the turn.
    drop(busy);
    let given_back = || permits.clone().try_acquire_owned().is_ok();
    assert!(
        eventually(given_back).await,
        "the part kept the place while it waited for the turn"
    );
    assert!(!part.is_finished());
    drop(other);
    part.abort();
}

/// An Application in `argocd` that Argo CD reports Synced and `health`, deploying to
/// `destination` the ConfigMaps `shop/<name>` of `configmaps`.
fn application(name: &str, destination: Value, health: &str, configmaps: &[&str]) -> DynamicObject {
    let resources: Vec<Value> = configmaps
        .iter()
        .map(|c| json!({"version": "v1", "kind": "ConfigMap", "namespace": "shop", "name": c, "status": "Synced"}))
        .collect();
    serde_json::from_value(
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd", "uid": name, "resourceVersion": "1"},
        "spec": {"project": "default", "destination": destination},
        "status": {"sync": {"status": "Synced"}, "health": {"status": health},
                   "resources": resources}}),
    )
    .unwrap()
}

/// A cache of Argo CD's namespace whose Applications the test feeds.
async fn argocd_cache() -> (Arc<Cache>, Arc<Feed<DynamicObject>>) {
    let cache = fed::cache("argocd", &[("argoproj.io", "applications", "Application")]).await;
    let apps = cache.feed(&GroupResource::new("argoproj.io", "applications"));
    (cache, apps)
}

/// A cache stops its watches only once dropped, and a kept view is dropped by nothing but a
/// newer answer of its Application: a view kept of an Application deploying to a remote
/// cluster kept that cluster, and its watches, alive after its source replaced or removed it,
/// for as long as nobody looked at the view again. A kept view holds no cluster it read, and
/// the next poll judges it afresh.
#[tokio::test]
async fn a_kept_view_does_not_keep_a_removed_cluster_watched() {
    use crate::clusters::{Build, Cluster, Clusters, Source};
    let metrics = Arc::new(Metrics::default());
    let (home, apps) = argocd_cache().await;
    let to_edge = json!({"name": "edge", "namespace": "shop"});
    apps.list([application("shop", to_edge, "Healthy", &["settings"])]);
    let edge = fed::cache("shop", &[("", "configmaps", "ConfigMap")]).await;
    let configmaps: Arc<Feed<DynamicObject>> = edge.feed(&GroupResource::new("", "configmaps"));
    configmaps.list([
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}}))
        .unwrap(),
    ]);
    let edge = Evaluator::new(edge, EvalConfig::default(), metrics.clone()).unwrap();
    let edge = std::sync::Mutex::new(Some(edge));
    let build: Box<Build> = Box::new(move |_, _| {
        let built = edge.lock().unwrap().take();
        built.ok_or_else(|| "built once".to_string())
    });
    let home = Evaluator::new(home, EvalConfig::default(), metrics.clone()).unwrap();
    let clusters = Clusters::new(Cluster::home(home));
    let dir = std::env::temp_dir().join(format!("wavegate-kept-edge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("edge"),
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\n\
         contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n\
         users:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    let source = Source::kubeconfig_dir(dir.clone());
    clusters.refresh(&source, &build).await.unwrap();
    let app = router(AppState::of(clusters.clone(), metrics));
    let view = "/api/v1/applications/argocd/shop/waves";
    let (code, _, judged) = call(&app, get(view)).await;
    assert_eq!(code, StatusCode::OK, "{judged}");
    let resource = &judged["waves"][0]["resources"][0];
    assert_eq!(resource["name"], "settings", "{judged}");
    assert_eq!(
        resource["status"], "Healthy",
        "read from the edge cluster: {judged}"
    );
    let cluster = Arc::downgrade(&clusters.remotes()["edge"]);
    let cache = Arc::downgrade(&clusters.remotes()["edge"].cache);

    std::fs::remove_file(dir.join("edge")).unwrap();
    clusters.refresh(&source, &build).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(clusters.remotes().is_empty());
    let started = Instant::now();
    while cluster.strong_count() > 0 || cache.strong_count() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the removed cluster ({} holders) and its cache ({}) are still held",
            cluster.strong_count(),
            cache.strong_count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, _, again) = call(&app, get(view)).await;
    assert_eq!(code, StatusCode::OK, "{again}");
    let resource = &again["waves"][0]["resources"][0];
    assert_ne!(resource["status"], "Healthy", "judged afresh: {again}");
}

/// A part of a batch is its kept answer only while that answer holds, as for its own endpoint:
/// past the time one of its verdicts may change by itself, or once anything it read changed
/// (its Application written again), the batch judges it afresh.
#[tokio::test]
async fn a_batch_judges_again_a_kept_view_that_expired_or_whose_reads_changed() {
    let metrics = Arc::new(Metrics::default());
    let (cache, apps) = argocd_cache().await;
    let in_cluster = json!({"name": "in-cluster", "namespace": "shop"});
    apps.list([
        application("expiring", in_cluster.clone(), "Healthy", &[]),
        application("changing", in_cluster.clone(), "Healthy", &[]),
    ]);
    let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
    let state = AppState::new(evaluator, metrics);
    let app = router(state.clone());
    let batch = "/api/v1/applications/waves?app=argocd/expiring&app=argocd/changing";
    let parts = |body: &Value| body["applications"].as_array().unwrap().clone();
    // Judged once, so that every watch the views read has listed: what is kept below is
    // stamped with the cache as it stays.
    let (code, _, body) = call(&app, get(batch)).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(parts(&body).iter().all(|p| p["status"] == 200), "{body}");
    let home = [state.clusters.home().clone()];
    let later = Instant::now() + Duration::from_secs(60);
    handlers::keep_view(&state, "argocd", "expiring", &home, Some(later));
    handlers::keep_view(&state, "argocd", "changing", &home, None);
    let (_, _, body) = call(&app, get(batch)).await;
    let [expiring, changing] = <[Value; 2]>::try_from(parts(&body)).unwrap();
    assert_eq!(expiring["waves"]["kept"], "expiring", "{body}");
    assert_eq!(changing["waves"]["kept"], "changing", "{body}");

    // Kept again, expired as soon as kept.
    handlers::keep_view(&state, "argocd", "expiring", &home, Some(Instant::now()));
    let (_, _, body) = call(&app, get(batch)).await;
    let [expiring, changing] = <[Value; 2]>::try_from(parts(&body)).unwrap();
    assert_eq!(expiring["status"], 200, "{body}");
    assert_eq!(
        expiring["waves"]["kept"],
        Value::Null,
        "served past its expiry: {body}"
    );
    assert_eq!(expiring["waves"]["name"], "expiring", "judged: {body}");
    assert_eq!(
        changing["waves"]["kept"], "changing",
        "nothing it read changed: {body}"
    );

    apps.send(kube::runtime::watcher::Event::Apply(application(
        "changing",
        in_cluster,
        "Degraded",
        &[],
    )));
    // Served as kept only until the watch has applied the change.
    let changed = Instant::now();
    let (_, _, body) = loop {
        let answer = call(&app, get(batch)).await;
        if answer.2["applications"][1]["waves"]["kept"].is_null() {
            break answer;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(5),
            "still served as kept after its Application changed: {}",
            answer.2
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let changing = &parts(&body)[1];
    assert_eq!(changing["status"], 200, "{body}");
    assert_eq!(changing["waves"]["name"], "changing", "judged: {body}");
    let health = changing["waves"]["health"]["message"].as_str().unwrap();
    assert!(health.ends_with("health Degraded"), "as changed: {body}");
}
