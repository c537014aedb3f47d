//! Big applications (issue 23 item 1): the waves view, the timeline and the dashboard's
//! refresh for an Application whose `status.resources` lists `--resources` (2,000) objects over
//! `--waves` (20) waves, and for a parent with `--children` (200) child Applications of
//! `--child-resources` (10) resources each; plus an Application a tenth the size, to show
//! whether the cost grows linearly with the resources.
//!
//! Against a `wavegate serve` started just before (`--wavegate URL --pid PID`): the first
//! request of each shape is the first after start (watches listing); then `--asks` (50) warm
//! requests each, one at a time. Per shape: first request, warm p50/p95/max, wavegate's CPU per
//! warm request (`/proc/PID/stat`), its RSS after, and the API-server requests the warm requests
//! caused (`apiserver_flowcontrol_dispatched_requests_total` of FlowSchema `wgbench-wavegate`,
//! which scripts/bench.sh makes match only wavegate's identity).
//!
//! Usage: `cargo bench --bench bigapps -- --wavegate http://127.0.0.1:PORT --pid PID`
//! Prints `BENCH bigapps.<shape> …` lines for scripts/bench.sh.

#[path = "../tests/support/cluster.rs"]
mod cluster;
mod support;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::{Summary, arg_or, ms, report, required};

const ARGOCD_MANAGER: &str = "argocd-controller";

fn resource(ns: &str, kind: &str, group: &str, name: &str, wave: usize) -> Value {
    json!({"group": group, "version": if group.is_empty() { "v1" } else { "v1alpha1" },
           "kind": kind, "namespace": ns, "name": name, "syncWave": wave,
           "status": "Synced"})
}

fn result(r: &Value) -> Value {
    json!({"group": r["group"], "version": r["version"], "kind": r["kind"],
           "namespace": r["namespace"], "name": r["name"], "status": "Synced",
           "message": "configured", "syncPhase": "Sync"})
}

/// An Application listing `resources`, synced and healthy as Argo CD records it, its last sync
/// finished a minute ago.
fn application(ns: &str, name: &str, resources: &[Value]) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://example.invalid/repo.git", "path": name, "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}},
        "status": {
            "sync": {"status": "Synced", "revision": "4f2a9c1",
                     "comparedTo": {"source": {"repoURL": "https://example.invalid/repo.git", "path": name, "targetRevision": "main"},
                                    "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}}},
            "health": {"status": "Healthy"},
            "resources": resources,
            "operationState": {"phase": "Succeeded", "message": "successfully synced",
                "startedAt": "2026-12-01T03:00:00Z", "finishedAt": "2026-12-01T03:01:00Z",
                "syncResult": {"revision": "4f2a9c1",
                               "resources": resources.iter().map(result).collect::<Vec<_>>()}}}})
}

async fn create_all(client: &Client, objects: Vec<Value>) {
    futures::stream::iter(objects)
        .for_each_concurrent(32, |o| async move {
            cluster::apply(client, o).await;
        })
        .await;
}

/// ConfigMaps applied with Argo CD's field manager, so the timeline finds its time.
async fn config_maps(client: &Client, ns: &str, n: usize) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &cluster::api_resource("", "v1", "ConfigMap", "configmaps"),
    );
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                let name = format!("cm-{i:05}");
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "namespace": ns}, "data": {"i": i.to_string()}});
                api.patch(&name, &PatchParams::apply(ARGOCD_MANAGER), &Patch::Apply(&cm))
                    .await
                    .expect("apply ConfigMap");
            }
        })
        .await;
}

/// wavegate's requests to the API server so far (its FlowSchema's dispatched requests).
async fn own_requests(client: &Client) -> f64 {
    let text = client
        .request_text(
            axum::http::Request::get("/metrics")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .unwrap_or_default();
    support::metric_sum(
        &text,
        "apiserver_flowcontrol_dispatched_requests_total",
        r#"flow_schema="wgbench-wavegate""#,
    )
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state field.
    n(11) + n(12)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn get(http: &reqwest::Client, url: &str) -> (Duration, usize) {
    let started = Instant::now();
    let resp = http.get(url).send().await.expect("request");
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    let body = resp.bytes().await.expect("body");
    (started.elapsed(), body.len())
}

/// First request, then `asks` warm ones; one BENCH line.
async fn measure(name: &str, url: &str, asks: usize, pid: u32, admin: &Client, resources: usize) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let (first, bytes) = get(&http, url).await;
    // Let the watches the first request started settle before the warm requests count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (requests0, ticks0) = (own_requests(admin).await, cpu_ticks(pid));
    let mut took = Vec::new();
    for _ in 0..asks {
        took.push(get(&http, url).await.0);
    }
    let (requests1, ticks1) = (own_requests(admin).await, cpu_ticks(pid));
    let tick = 1e6 / 100.0; // µs per tick: CLK_TCK is 100 on Linux
    let s = Summary::of(&took).expect("samples");
    let mut fields = vec![
        ("resources", resources.to_string()),
        ("first_ms", ms(first)),
        ("bytes", bytes.to_string()),
    ];
    fields.extend(s.fields());
    fields.extend([
        (
            "cpu_ms_per_request",
            format!("{:.1}", (ticks1 - ticks0) as f64 * tick / 1e3 / asks as f64),
        ),
        // The two reads of the API server's own /metrics go through the admin's flow schema.
        (
            "apiserver_requests",
            format!("{:.0}", requests1 - requests0),
        ),
        ("rss_kib", rss_kib(pid).to_string()),
    ]);
    report(&format!("bigapps.{name}"), &fields);
}

#[tokio::main]
async fn main() {
    let url = required("--wavegate");
    let pid: u32 = required("--pid").parse().expect("--pid");
    let n: usize = arg_or("--resources", 2000);
    let waves: usize = arg_or("--waves", 20);
    let children: usize = arg_or("--children", 200);
    let per_child: usize = arg_or("--child-resources", 10);
    let asks: usize = arg_or("--asks", 50);
    let admin = cluster::client().await;
    let ns = cluster::namespace(&admin, "wgbench-bigapps").await;
    let built = Instant::now();
    config_maps(&admin, &ns, n.max(children * per_child)).await;
    let cms = |from: usize, count: usize| -> Vec<Value> {
        (from..from + count)
            .map(|i| resource(&ns, "ConfigMap", "", &format!("cm-{i:05}"), i % waves))
            .collect()
    };
    let mut apps = vec![
        application(&ns, "big", &cms(0, n)),
        application(&ns, "tenth", &cms(0, n / 10)),
    ];
    let child_refs: Vec<Value> = (0..children)
        .map(|j| {
            resource(
                &ns,
                "Application",
                "argoproj.io",
                &format!("child-{j:03}"),
                j % waves,
            )
        })
        .collect();
    apps.push(application(&ns, "parent", &child_refs));
    for j in 0..children {
        apps.push(application(
            &ns,
            &format!("child-{j:03}"),
            &cms(j * per_child, per_child),
        ));
    }
    create_all(&admin, apps).await;
    eprintln!("bigapps: objects created in {:?}", built.elapsed());

    let base = url.trim_end_matches('/');
    let waves_of = |app: &str| format!("{base}/api/v1/applications/{ns}/{app}/waves");
    measure(
        "waves-timeline.2000",
        &waves_of("big"),
        asks,
        pid,
        &admin,
        n,
    )
    .await;
    measure(
        "waves-timeline.200",
        &waves_of("tenth"),
        asks,
        pid,
        &admin,
        n / 10,
    )
    .await;
    measure(
        "parent.200x10",
        &waves_of("parent"),
        asks,
        pid,
        &admin,
        children,
    )
    .await;
    measure(
        "dashboard",
        &format!("{base}/api/v1/applications"),
        asks.min(20),
        pid,
        &admin,
        n + n / 10 + children * (per_child + 1),
    )
    .await;
    support::drop_namespace(&admin, &ns).await;
}
