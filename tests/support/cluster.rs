//! Helpers for end-to-end tests on the real local control plane (`scripts/control-plane.sh`):
//! a client, a fresh namespace per test, pods whose status the test writes as the kubelet
//! would, and wavegate's HTTP API served in-process on a loopback port.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wavegate::api::{self, AppState};
use wavegate::cache::Cache;
use wavegate::evaluate::{EvalConfig, Evaluator};
use wavegate::metrics::Metrics;

/// A client for the local control plane. Fails loudly when there is none: these tests prove
/// wavegate against a real API server and must never pass by being skipped.
pub async fn client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!(
            "end-to-end tests need the local control plane: run scripts/test.sh, or \
             `scripts/control-plane.sh up` and `eval $(scripts/control-plane.sh env)`"
        );
    }
    let client = Client::try_default()
        .await
        .unwrap_or_else(|e| panic!("cannot build a client from KUBECONFIG: {e}"));
    client
        .apiserver_version()
        .await
        .unwrap_or_else(|e| panic!("the API server in KUBECONFIG does not answer: {e}"));
    // Every test may make WaveGates, and they run concurrently in one process in any order: none
    // may rely on another having installed the CRD first.
    static CRD: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    CRD.get_or_init(install_wavegate_crd);
    client
}

/// The WaveGate CRD, as `deploy/` installs it (idempotent).
fn install_wavegate_crd() {
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/crd/wavegate.dev_wavegates.yaml"
    );
    for args in [
        vec!["apply", "--server-side", "--force-conflicts", "-f", crd],
        vec![
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/wavegates.wavegate.dev",
        ],
    ] {
        let out = std::process::Command::new("kubectl")
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e} (kubectl must be on PATH)"));
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A namespace of its own for one test, named after it.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let suffix = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 0xffffff
    );
    let name = format!("{prefix}-{suffix}");
    // Labelled so scripts/test.sh can remove every test namespace before the browser tests.
    let ns: Namespace = serde_json::from_value(json!({"metadata": {
        "name": name, "labels": {"wavegate.dev/test": "e2e"}
    }}))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

/// Server-side apply one object given as JSON (any kind).
pub async fn apply(client: &Client, obj: Value) -> DynamicObject {
    let api_version = obj["apiVersion"].as_str().unwrap().to_string();
    let kind = obj["kind"].as_str().unwrap().to_string();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, &kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    api.patch(
        &name,
        &PatchParams::apply("wavegate-test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {ns}/{name}: {e}"))
}

/// Merge-patch the status subresource of a custom resource, as its operator would.
pub async fn patch_status(client: &Client, ar: &ApiResource, ns: &str, name: &str, status: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("patch status of {ns}/{name}: {e}"));
}

pub fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A pod on the fake node `wavegate-node` (kube-controller-manager's EndpointSlice controller
/// ignores pods whose node does not exist).
pub async fn pod(client: &Client, ns: &str, name: &str, labels: Value) {
    apply(
        client,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": "wavegate-node",
                     "containers": [{"name": "main", "image": "example.invalid/app:1"}]}
        }),
    )
    .await;
}

/// Service `name` selecting pods labelled `app=<app>`, port 80.
pub async fn service(client: &Client, ns: &str, name: &str, app: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}}),
    )
    .await;
}

/// Play the kubelet: Running with an IP and the Ready condition set to `ready`.
pub async fn set_pod_ready(client: &Client, ns: &str, name: &str, ip: &str, ready: bool) {
    let s = if ready { "True" } else { "False" };
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [
                    {"type": "Ready", "status": s},
                    {"type": "ContainersReady", "status": s},
                    {"type": "PodScheduled", "status": "True"}
                ]
            }})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch pod status {ns}/{name}: {e}"));
}

/// wavegate's HTTP API in-process on 127.0.0.1, with the given evaluation settings.
pub struct Wavegate {
    pub url: String,
    pub evaluator: Arc<Evaluator>,
    pub metrics: Arc<Metrics>,
    http: reqwest::Client,
}

impl Wavegate {
    pub async fn start(client: Client, config: EvalConfig) -> Wavegate {
        Self::start_with(client, config, Duration::from_secs(5), None).await
    }

    /// Watching only `namespaces`, so that wavegates of tests running in parallel do not
    /// reconcile each other's WaveGates.
    pub async fn start_in(client: Client, config: EvalConfig, namespaces: &[&str]) -> Wavegate {
        let scope = namespaces.iter().map(|s| s.to_string()).collect();
        Self::start_full(client, config, Duration::from_secs(5), None, Some(scope)).await
    }

    /// Watching only `namespaces`, with reads that never wait for a new watch to list
    /// (`--sync-wait 0`): the first read of every kind finds its cache cold, as on a replica
    /// that just gained a cluster whose lists take longer than `--sync-wait`.
    pub async fn start_cold_in(client: Client, namespaces: &[&str]) -> Wavegate {
        let scope = namespaces.iter().map(|s| s.to_string()).collect();
        let config = EvalConfig::default();
        Self::start_full(client, config, Duration::ZERO, None, Some(scope)).await
    }

    pub async fn start_with(
        client: Client,
        config: EvalConfig,
        sync_wait: Duration,
        token: Option<&str>,
    ) -> Wavegate {
        Self::start_full(client, config, sync_wait, token, None).await
    }

    async fn start_full(
        client: Client,
        config: EvalConfig,
        sync_wait: Duration,
        token: Option<&str>,
        namespaces: Option<std::collections::BTreeSet<String>>,
    ) -> Wavegate {
        let metrics = Arc::new(Metrics::default());
        let cache = Cache::new(client, namespaces, sync_wait, metrics.clone());
        // What `wavegate serve` requires for readiness.
        cache.require(wavegate::gate::kind());
        let evaluator = Evaluator::new(cache, config, metrics.clone()).unwrap();
        // Every request of a test comes from one address (one caller): the shared bounds apply,
        // the per-caller shares would only make concurrent asks of one test refuse each other.
        let defaults = api::LimitArgs::default();
        let mut state =
            AppState::new(evaluator.clone(), metrics.clone()).with_limits(api::LimitArgs {
                max_requests_per_caller: defaults.max_concurrent_requests,
                max_waiters_per_caller: defaults.max_waiters,
                ..defaults
            });
        if let Some(token) = token {
            state = state.with_token(api::Token::fixed(token));
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, api::router(state)).await.unwrap();
        });
        Wavegate {
            url,
            evaluator,
            metrics,
            http: reqwest::Client::new(),
        }
    }

    /// Also run the gate controller, as `wavegate serve` does.
    pub fn with_gates(self, resync: Duration) -> Self {
        let home = wavegate::clusters::Cluster::home(self.evaluator.clone());
        let settings = wavegate::gate::controller::Settings::new(resync);
        tokio::spawn(home.gate_controller(&home, self.metrics.clone(), settings));
        self
    }

    /// GET a path; returns the status code and the JSON body (or the text as a JSON string).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (code, body)
    }

    /// The verdict for `resource/namespace/name?query`.
    pub async fn health(&self, resource: &str, ns: &str, name: &str, query: &str) -> Value {
        let (code, body) = self
            .get(&format!("/api/v1/health/{resource}/{ns}/{name}{query}"))
            .await;
        assert_eq!(code, 200, "health of {resource} {ns}/{name}: {body}");
        body
    }
}

/// Poll `f` until it returns `Some`, or panic after `timeout` with the last value seen.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(t) => return t,
            Err(last) if start.elapsed() > timeout => {
                panic!("{what}: not reached within {timeout:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
