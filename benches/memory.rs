//! Memory of the watch cache: RSS of a running `wavegate serve` before and after `--pods`
//! (default 2,000) pods appear in one namespace behind a Service that wavegate is asked about.
//!
//! The pods look like a Deployment's (labels, annotations, a container with env, ports,
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

#[path = "../tests/support/cluster.rs"]
mod cluster;
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
