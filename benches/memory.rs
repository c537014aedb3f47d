//! Memory of the watch cache, two ways.
//!
//! **On the shared control plane** (default): RSS of a running `wavegate serve` before and after
//! `--pods` (default 2,000) pods appear in one namespace behind a Service that wavegate is asked
//! about. The pods look like a Deployment's (labels, annotations, a container with env, ports,
//! resources and a probe, and a kubelet-like status with container statuses), so the API server
//! sends wavegate what a real cluster sends; wavegate keeps only what its checks read. They are
//! marked Ready with non-loopback IPs (nothing connects to them), so kube-controller-manager also
//! publishes 2,000 endpoints in EndpointSlices, which wavegate caches too. "Cached" is proven by
//! the Service verdict counting every endpoint. With `--not-ready` the pods carry the same status
//! but not Ready and without an IP, so there are no endpoints: the pod cache alone.
//!
//! Usage: `cargo bench --bench memory -- --wavegate http://127.0.0.1:PORT --pid PID
//! [--pods 2000] [--not-ready] [--keep]` (`--keep` leaves the namespace for the caller, which
//! prints its name as `namespace=`). Prints `BENCH memory[.not-ready] …` with RSS in KiB and
//! bytes per pod.
//!
//! **At issue 11's scale** (`--cluster`): on a control plane of its own
//! (tests/support/private_control_plane.rs: 30,000 pods would slow every other user of the
//! shared one), it starts `wavegate serve` (`--serve`, a release build; `--verdict-ttl 1ms`, so
//! every ask is judged) and measures, in that one process:
//! 1. the CPU of an uncached Service ask (one Service, 10 Ready pods, in a cluster of 10 pods);
//! 2. RSS after 30 namespaces with 30,000 pods (Deployment-like spec, no status), 10,000
//!    Services selecting them (3 pods each), the 10,000 EndpointSlices kube-controller-manager
//!    publishes for them and 1,000 WaveGates (each with a `service` check) are all cached —
//!    counted by wavegate's own `wavegate_cached_objects` against what the API server lists;
//! 3. the same ask's CPU again, now among 30,010 pods (item 1: at most 1.5× the first), and,
//!    as a contrast, an ask on a Service in a namespace of 1,000 pods.
//!
//! Usage: `cargo bench --bench memory -- --cluster --serve target/release/wavegate
//! [--namespaces 30] [--pods 30000] [--services 10000] [--gates 1000] [--asks 30000]
//! [--log FILE]`. Prints `BENCH memory.cluster …` and `BENCH ask.cluster …`.

#[path = "../tests/support/cluster.rs"]
mod cluster;
#[path = "../tests/support/private_control_plane.rs"]
mod private_control_plane;
mod support;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::{Served, report};

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status: {e}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn pod(ns: &str, i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("mem-7d9c5b6f4-{i:05}"), "namespace": ns,
            "labels": {"app": "mem", "app.kubernetes.io/name": "mem",
                       "app.kubernetes.io/instance": "bench", "pod-template-hash": "7d9c5b6f4"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T06:00:00Z",
                            "prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
            // No ownerReferences: kube-controller-manager's garbage collector deletes pods
            // whose owner does not exist, and there is no ReplicaSet controller to own them.
        },
        "spec": {
            "nodeName": "wavegate-node",
            "containers": [{
                "name": "app", "image": "registry.example.invalid/mem/app:1.2.3",
                "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}],
                "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"},
                        {"name": "DATABASE_URL", "value": "postgres://app@db:5432/app"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5}
            }]
        }
    })
}

fn status(i: usize, ready: bool) -> Value {
    let at = "2026-11-30T06:00:00Z";
    let r = if ready { "True" } else { "False" };
    let mut status = json!({
        "phase": "Running", "hostIP": "10.0.0.1",
        "qosClass": "Burstable", "startTime": at,
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": at},
            {"type": "Initialized", "status": "True", "lastTransitionTime": at},
            {"type": "Ready", "status": r, "lastTransitionTime": at},
            {"type": "ContainersReady", "status": r, "lastTransitionTime": at},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}
        ],
        "containerStatuses": [{
            "name": "app", "ready": ready, "started": true, "restartCount": 0,
            "image": "registry.example.invalid/mem/app:1.2.3",
            "imageID": "registry.example.invalid/mem/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "containerID": format!("containerd://{i:064x}"),
            "state": {"running": {"startedAt": at}}
        }]
    });
    // kube-controller-manager publishes no endpoint for a pod without an IP.
    if ready {
        let ip = format!("10.98.{}.{}", i / 250, i % 250 + 1);
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{ "ip": ip }]);
    }
    json!({ "status": status })
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--cluster") {
        return at_scale::run().await;
    }
    let served = Served::new(&support::required("--wavegate"));
    let pid: u32 = support::required("--pid")
        .parse()
        .expect("--pid is a number");
    let pods = support::arg_or("--pods", 2000usize);
    let keep = std::env::args().any(|a| a == "--keep");
    let ready = !std::env::args().any(|a| a == "--not-ready");
    let client = cluster::client().await;

    let ns = cluster::namespace(&client, "wgbench-mem").await;
    cluster::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "mem", "namespace": ns},
               "spec": {"selector": {"app": "mem"}, "ports": [{"port": 8080}]}}),
    )
    .await;
    // Starts (or reuses) the watches a Service check reads, before the baseline.
    let _ = served.verdict("services", &ns, "mem").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (before, _) = rss_kib(pid);

    let started = Instant::now();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created: Vec<Result<(), kube::Error>> = futures::stream::iter(0..pods)
        .map(|i| {
            let api = api.clone();
            let ns = ns.clone();
            async move {
                let p: Pod = serde_json::from_value(pod(&ns, i)).expect("pod");
                let p = api.create(&PostParams::default(), &p).await?;
                let name = p.metadata.name.unwrap_or_default();
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(status(i, ready)),
                )
                .await
                .map(|_| ())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let errors = created.iter().filter(|r| r.is_err()).count();
    let create_s = started.elapsed().as_secs_f64();

    // Cached: the verdict counts every pod's endpoint.
    let want = if ready {
        format!("has {pods} ready endpoints")
    } else {
        format!("{pods} of {pods} selected pods not Ready")
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut counted = false;
    while Instant::now() < deadline {
        let verdict = served.verdict("services", &ns, "mem").await;
        if verdict.is_ok_and(|v| v["message"].as_str().is_some_and(|m| m.contains(&want))) {
            counted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cached_s = started.elapsed().as_secs_f64();
    // Let allocator and watch buffers settle before reading.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (after, peak) = rss_kib(pid);
    let per_pod = (after as f64 - before as f64) * 1024.0 / pods as f64;

    report(
        if ready { "memory" } else { "memory.not-ready" },
        &[
            ("pods", pods.to_string()),
            ("create_errors", errors.to_string()),
            ("cached", counted.to_string()),
            ("rss_before_kib", before.to_string()),
            ("rss_after_kib", after.to_string()),
            ("hwm_kib", peak.to_string()),
            ("bytes_per_pod", format!("{per_pod:.0}")),
            ("create_s", format!("{create_s:.1}")),
            ("cached_s", format!("{cached_s:.1}")),
            ("namespace", ns.clone()),
        ],
    );
    if !keep {
        support::drop_namespace(&client, &ns).await;
    }
}

/// Issue 11's cluster on a private control plane (`--cluster`).
mod at_scale {
    use super::private_control_plane::PrivateControlPlane;
    use super::support::{self, Served, cpu_ns, metric_sum, report};
    use super::{pod, rss_kib, status};
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::{Pod, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
    use kube::{Client, Resource};
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// The asked Service: 10 Ready pods in a namespace of their own.
    const SMALL: &str = "wgmem-small";
    const SMALL_PODS: usize = 10;
    /// Concurrent asks: under `serve`'s 64-request bound, so every ask is judged.
    const CONCURRENCY: usize = 32;

    /// `wavegate serve`, stopped when dropped (also when the bench fails).
    struct Serve(Child);

    impl Drop for Serve {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// CPU per uncached ask: `asks` asks for `ns/name`, each with one of 1,000 `minReady`
    /// values in turn (so no verdict is still cached when its ask comes round again), 32 at a
    /// time. (µs of wavegate's CPU per ask, asks per second, share of asks evaluated.)
    async fn ask_cpu(served: &Served, pid: u32, ns: &str, name: &str, asks: usize) -> AskCost {
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("HTTP client");
        let url = format!("{}/api/v1/health/services/{ns}/{name}", served.url);
        let misses = |m: &str| metric_sum(m, "wavegate_verdict_cache_total", "outcome=\"miss\"");
        // Warm-up: connections, allocator, the verdict cache's first entries.
        let _ = burst(&http, &url, 2000).await;
        let m0 = misses(&served.metrics().await);
        let (c0, t0) = (cpu_ns(pid), Instant::now());
        let failed = burst(&http, &url, asks).await;
        let (c1, wall) = (cpu_ns(pid), t0.elapsed());
        let m1 = misses(&served.metrics().await);
        let verdict = served
            .verdict("services", ns, name)
            .await
            .unwrap_or_default();
        AskCost {
            cpu_us: (c1 - c0) as f64 / 1e3 / asks as f64,
            per_s: asks as f64 / wall.as_secs_f64(),
            evaluated_pct: 100.0 * (m1 - m0) / asks as f64,
            failed,
            status: verdict["status"].as_str().unwrap_or("?").to_string(),
        }
    }

    struct AskCost {
        cpu_us: f64,
        per_s: f64,
        evaluated_pct: f64,
        failed: usize,
        status: String,
    }

    /// `n` asks, `CONCURRENCY` at a time; how many failed.
    async fn burst(http: &reqwest::Client, url: &str, n: usize) -> usize {
        futures::stream::iter(0..n)
            .map(|i| {
                let req = http.get(format!("{url}?minReady={}", i % 1000 + 1));
                async move { req.send().await.is_ok_and(|r| r.status().is_success()) }
            })
            .buffer_unordered(CONCURRENCY)
            .filter(|ok| futures::future::ready(!ok))
            .count()
            .await
    }

    /// Create every object `make` yields, `64` at a time; how many failed.
    async fn create_all<K>(client: &Client, objects: Vec<(String, Value)>) -> usize
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + DeserializeOwned
            + serde::Serialize,
    {
        futures::stream::iter(objects)
            .map(|(ns, o)| {
                let api: Api<K> = Api::namespaced(client.clone(), &ns);
                async move {
                    let o: K = serde_json::from_value(o).expect("object");
                    api.create(&PostParams::default(), &o).await
                }
            })
            .buffer_unordered(64)
            .filter(|r| futures::future::ready(r.is_err()))
            .count()
            .await
    }

    async fn count<K>(client: &Client) -> usize
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned,
    {
        Api::<K>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0)
    }

    /// What `wavegate_cached_objects{resource=…}` says.
    fn cached(metrics: &str, resource: &str) -> usize {
        metric_sum(
            metrics,
            "wavegate_cached_objects",
            &format!("resource=\"{resource}\""),
        ) as usize
    }

    /// Poll until `done`, at most `timeout`; whether it was reached.
    async fn until<F, Fut>(what: &str, timeout: Duration, mut done: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if done().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!("gave up waiting: {what}");
        false
    }

    pub async fn run() {
        let serve_bin = support::required("--serve");
        let namespaces = support::arg_or("--namespaces", 30usize);
        let pods = support::arg_or("--pods", 30_000usize);
        let services = support::arg_or("--services", 10_000usize);
        let gates = support::arg_or("--gates", 1_000usize);
        let asks = support::arg_or("--asks", 30_000usize);
        let log = support::arg("--log").unwrap_or_else(|| "/dev/null".into());
        let started = Instant::now();
        let step = |what: &str| eprintln!("[{:>4}s] {what}", started.elapsed().as_secs());

        step("private control plane");
        let cp = PrivateControlPlane::up("bench-memory");
        let client = cp.admin().await;
        cp.kubectl(&[
            "apply",
            "--server-side",
            "-f",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/deploy/crd/wavegate.dev_wavegates.yaml"
            ),
        ]);
        cp.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/wavegates.wavegate.dev",
        ]);

        step("the asked Service: 10 Ready pods");
        let mut all_ns: Vec<String> = (0..namespaces).map(|i| format!("wgmem-{i:02}")).collect();
        all_ns.push(SMALL.into());
        for ns in &all_ns {
            cp.kubectl(&["create", "namespace", ns]);
        }
        super::cluster::apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "web", "namespace": SMALL},
                   "spec": {"selector": {"app": "mem"}, "ports": [{"port": 8080}]}}),
        )
        .await;
        let small: Api<Pod> = Api::namespaced(client.clone(), SMALL);
        for i in 0..SMALL_PODS {
            let p: Pod = serde_json::from_value(pod(SMALL, i)).expect("pod");
            let p = small
                .create(&PostParams::default(), &p)
                .await
                .expect("create pod");
            let name = p.metadata.name.unwrap_or_default();
            small
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(status(i, true)),
                )
                .await
                .expect("pod status");
        }

        step("wavegate serve (--verdict-ttl 1ms)");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&serve_bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            // Every ask judged; no periodic re-evaluation of the 1,000 gates in the CPU numbers.
            .args([
                "--verdict-ttl",
                "1ms",
                "--resync",
                "1h",
                "--status-validity",
                "2h",
            ])
            .env("KUBECONFIG", &cp.kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {serve_bin}: {e}"));
        let mut serve = Serve(child);
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Ok(Some(exit)) = serve.0.try_wait() {
            panic!("wavegate serve exited at once ({exit}); see {log}");
        }
        let pid = serve.0.id();
        let served = Served::new(&format!("http://127.0.0.1:{port}"));
        let want = format!("has {SMALL_PODS} ready endpoints");
        let ready = until(
            "the small Service's verdict",
            Duration::from_secs(120),
            || async {
                served
                    .verdict("services", SMALL, "web")
                    .await
                    .is_ok_and(|v| v["message"].as_str().is_some_and(|m| m.contains(&want)))
            },
        )
        .await;
        assert!(
            ready,
            "wavegate never judged {SMALL}/web Healthy; see {log}"
        );
        let (rss_start, _) = rss_kib(pid);

        step("uncached asks, 10 pods in the cluster");
        let before = ask_cpu(&served, pid, SMALL, "web", asks).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (rss_small, _) = rss_kib(pid);

        step(&format!(
            "{services} Services and {pods} pods in {namespaces} namespaces"
        ));
        let t = Instant::now();
        let svc_objects: Vec<(String, Value)> = (0..services)
            .map(|s| {
                let ns = format!("wgmem-{:02}", s % namespaces);
                let o = json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("svc-{s:05}"), "namespace": ns,
                                 "labels": {"app.kubernetes.io/instance": "bench"}},
                    "spec": {"selector": {"app": format!("svc-{s:05}")},
                             "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}});
                (ns, o)
            })
            .collect();
        let svc_errors = create_all::<Service>(&client, svc_objects).await;
        let pod_objects: Vec<(String, Value)> = (0..pods)
            .map(|i| {
                let s = i * services / pods;
                let ns = format!("wgmem-{:02}", s % namespaces);
                let mut o = pod(&ns, i);
                // One Deployment per Service: its pods' names and labels.
                let app = format!("svc-{s:05}");
                let hash = format!("{:010x}", s * 7919 % 0xffff_ffff);
                o["metadata"]["name"] = json!(format!("{app}-{hash}-{i:05}"));
                o["metadata"]["labels"] = json!({"app": app, "app.kubernetes.io/name": app,
                    "app.kubernetes.io/instance": "bench", "pod-template-hash": hash});
                (ns, o)
            })
            .collect();
        let pod_errors = create_all::<Pod>(&client, pod_objects).await;
        let create_s = t.elapsed().as_secs_f64();

        step("kube-controller-manager's EndpointSlices");
        let slices_deadline = Instant::now() + Duration::from_secs(900);
        let published = loop {
            if count::<EndpointSlice>(&client).await > services {
                break true;
            }
            if Instant::now() > slices_deadline {
                eprintln!("gave up waiting for an EndpointSlice per Service");
                break false;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let slices_s = t.elapsed().as_secs_f64();

        step(&format!("{gates} WaveGates"));
        let ar = super::cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
        let gate_objects: Vec<(String, Value)> = (0..gates)
            .map(|g| {
                let s = g * services / gates.max(1);
                let ns = format!("wgmem-{:02}", s % namespaces);
                let o = json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
                    "metadata": {"name": format!("gate-{g:04}"), "namespace": ns},
                    "spec": {"checks": [{"name": "backend", "service": {"name": format!("svc-{s:05}")}}]}});
                (ns, o)
            })
            .collect();
        let gate_errors = futures::stream::iter(gate_objects)
            .map(|(ns, o)| {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
                async move {
                    let o: DynamicObject = serde_json::from_value(o).expect("gate");
                    api.create(&PostParams::default(), &o).await
                }
            })
            .buffer_unordered(32)
            .filter(|r| futures::future::ready(r.is_err()))
            .count()
            .await;

        step("everything cached, every gate judged");
        let (want_pods, want_services) =
            (count::<Pod>(&client).await, count::<Service>(&client).await);
        // A wavegate without `wavegate_cached_objects` (a build from before it, measured for
        // comparison) is taken as cached once its RSS has not grown by 1% in 10 s.
        let counts_objects = served.metrics().await.contains("wavegate_cached_objects");
        let mut last_rss = 0;
        let counted = until(
            "wavegate_cached_objects = what the API server lists",
            Duration::from_secs(600),
            || {
                let last = last_rss;
                let (rss, _) = rss_kib(pid);
                last_rss = rss;
                let (client, served) = (&client, &served);
                async move {
                    if !counts_objects {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        return rss < last + last / 100;
                    }
                    let want_slices = count::<EndpointSlice>(client).await;
                    let metrics = served.metrics().await;
                    cached(&metrics, "pods") == want_pods
                        && cached(&metrics, "services") == want_services
                        && cached(&metrics, "endpointslices.discovery.k8s.io") == want_slices
                        && cached(&metrics, "wavegates.wavegate.dev") == gates
                }
            },
        )
        .await;
        // Settled: no status write for 5 s (each gate written once, Progressing: its pods
        // have no status, so none is Ready).
        let writes_now = || async {
            metric_sum(
                &served.metrics().await,
                "wavegate_gate_status_writes_total",
                "",
            )
        };
        let settle_deadline = Instant::now() + Duration::from_secs(600);
        let mut writes = writes_now().await;
        let settled = loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let now = writes_now().await;
            if now == writes && now >= gates as f64 {
                break true;
            }
            writes = now;
            if Instant::now() > settle_deadline {
                eprintln!("gave up waiting for the gate controller to settle");
                break false;
            }
        };
        let cached_s = t.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (rss_full, hwm) = rss_kib(pid);
        let metrics = served.metrics().await;

        step("uncached asks again, 30,000 more pods in the cluster");
        let after = ask_cpu(&served, pid, SMALL, "web", asks).await;
        let big = ask_cpu(&served, pid, "wgmem-00", "svc-00000", asks / 3).await;
        let (rss_end, hwm_end) = rss_kib(pid);

        report(
            "memory.cluster",
            &[
                ("namespaces", namespaces.to_string()),
                ("pods", cached(&metrics, "pods").to_string()),
                ("services", cached(&metrics, "services").to_string()),
                (
                    "slices",
                    cached(&metrics, "endpointslices.discovery.k8s.io").to_string(),
                ),
                (
                    "gates",
                    cached(&metrics, "wavegates.wavegate.dev").to_string(),
                ),
                (
                    "create_errors",
                    (svc_errors + pod_errors + gate_errors).to_string(),
                ),
                ("slices_published", published.to_string()),
                (
                    "cached",
                    if counts_objects {
                        (counted && settled).to_string()
                    } else {
                        format!("rss_stable_{}", counted && settled)
                    },
                ),
                ("gate_writes", writes.to_string()),
                ("rss_start_kib", rss_start.to_string()),
                ("rss_small_kib", rss_small.to_string()),
                ("rss_after_kib", rss_full.to_string()),
                ("hwm_kib", hwm.to_string()),
                ("rss_end_kib", rss_end.to_string()),
                ("hwm_end_kib", hwm_end.to_string()),
                (
                    "bytes_per_pod",
                    format!(
                        "{:.0}",
                        (rss_full as f64 - rss_small as f64) * 1024.0 / pods as f64
                    ),
                ),
                ("create_s", format!("{create_s:.1}")),
                ("slices_s", format!("{slices_s:.1}")),
                ("cached_s", format!("{cached_s:.1}")),
            ],
        );
        for (name, cost) in [
            ("small", &before),
            ("cluster", &after),
            ("namespace-1000", &big),
        ] {
            report(
                &format!("ask.{name}"),
                &[
                    ("cpu_us", format!("{:.1}", cost.cpu_us)),
                    ("asks_per_s", format!("{:.0}", cost.per_s)),
                    ("evaluated_pct", format!("{:.1}", cost.evaluated_pct)),
                    ("failed", cost.failed.to_string()),
                    ("status", cost.status.clone()),
                ],
            );
        }
        report(
            "ask.ratio",
            &[(
                "cluster_vs_small",
                format!("{:.2}", after.cpu_us / before.cpu_us),
            )],
        );
        drop(serve);
        step("tearing down the private control plane");
        drop(cp);
    }
}
