//! Big applications: the waves view (with its timeline: one answer), the applications list
//! and the dashboard's refresh for an Application whose `status.resources` lists `--resources`
//! (2,000) objects over `--waves` (20) waves, and for a parent with `--children` (200) child
//! Applications of `--child-resources` (10) resources each; plus the same at half and a tenth
//! the size, to show whether the cost grows linearly; plus the big view polled after each change
//! of one object it judges, and by `--pollers` (10) Waves tabs at once, with and without a change
//! before each round.
//!
//! Against a `wavegate serve` started just before (`--wavegate URL --pid PID`), and optionally an
//! older build beside it (`--old URL --old-pid PID`, watching the same namespace; each shape is
//! measured on the old build, then on the new): the first request of each shape is the first
//! after start (watches listing); then `--asks` (50) warm requests each, one at a time
//! (`--refreshes` (10) for the list, the dashboard and the rounds of pollers). Per shape and
//! build: first request, warm p50/p95/max, wavegate's CPU per warm request
//! (`/proc/PID/task/*/schedstat`), its RSS after, the API-server requests the warm requests
//! caused (`apiserver_flowcontrol_dispatched_requests_total` of FlowSchema `wgbench-wavegate`,
//! which scripts/bench-bigapps.sh makes match only wavegate's identity), and how busy the rest
//! of the machine was meanwhile; at the end, each build's RSS 3 s after the last request
//! (`BENCH bigapps.settled.<build> rss_kib=…`).
//!
//! Usage: `bigapps --wavegate http://127.0.0.1:PORT --pid PID [--old URL --old-pid PID]
//! [--namespace NS] [--keep true] [--shapes LIST]` (`--namespace`: a new namespace of that name
//! instead of a random one; `--shapes`: only the shapes whose names start with one of these,
//! comma-separated, e.g. `waves-timeline.2000,dashboard`, or `none` to build the Applications
//! and measure nothing); prints `BENCH bigapps.<shape>.<old|new> …` lines. With `--keep true` the
//! Applications stay (for tests/browser/render-bench.mjs) and their namespace is printed as
//! `BENCH bigapps.namespace`.

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

/// The kinds a large application is made of, in turn: a ConfigMap (Argo CD has no health check
/// for it, so its recorded sync status counts), a Service (wavegate's Service check: its
/// EndpointSlices and pods from the watch cache) and a Deployment (the generic rules on a watch of
/// Deployments) — so the view judges two thirds of the resources itself and the timeline reads
/// their live objects.
const KINDS: [(&str, &str, &str, &str); 3] = [
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Service", "services"),
    ("apps", "v1", "Deployment", "deployments"),
];

fn name_of(i: usize) -> String {
    let (_, _, kind, _) = KINDS[i % KINDS.len()];
    format!("{}-{i:05}", kind.to_lowercase())
}

/// The i-th managed object as Argo CD would apply it.
fn object(ns: &str, i: usize) -> Value {
    let name = name_of(i);
    match i % KINDS.len() {
        0 => json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns}, "data": {"i": i.to_string()}}),
        1 => json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}}),
        // No replicas: kube-controller-manager completes its rollout without a kubelet.
        _ => json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                             "template": {"metadata": {"labels": {"app": name}},
                                          "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}}}}),
    }
}

/// The i-th managed object's entry in `status.resources`.
fn managed(ns: &str, i: usize, wave: usize) -> Value {
    let (group, version, kind, _) = KINDS[i % KINDS.len()];
    resource(ns, kind, group, version, &name_of(i), wave)
}

fn resource(ns: &str, kind: &str, group: &str, version: &str, name: &str, wave: usize) -> Value {
    json!({"group": group, "version": version, "kind": kind, "namespace": ns, "name": name,
           "syncWave": wave, "status": "Synced"})
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

/// The managed objects, applied with Argo CD's field manager so the timeline finds their time.
async fn managed_objects(client: &Client, ns: &str, n: usize) {
    let apis: Vec<Api<DynamicObject>> = KINDS
        .iter()
        .map(|(g, v, k, p)| {
            Api::namespaced_with(client.clone(), ns, &cluster::api_resource(g, v, k, p))
        })
        .collect();
    let apis = &apis;
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| async move {
            let api = &apis[i % KINDS.len()];
            api.patch(
                &name_of(i),
                &PatchParams::apply(ARGOCD_MANAGER),
                &Patch::Apply(&object(ns, i)),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {}: {e}", name_of(i)));
        })
        .await;
}

/// Until kube-controller-manager is done with what the bench created: the Deployment
/// controller writes a ReplicaSet and a status for each Deployment, the EndpointSlice
/// controller a slice for each Service, at its client's 20 requests a second. Each of those
/// writes is an event wavegate's watches deliver, and an event may change a view, so a "nothing
/// changed" row measured earlier would judge at most polls.
async fn settled(admin: &Client, ns: &str) {
    let kinds = [
        ("apps", "v1", "Deployment", "deployments"),
        ("apps", "v1", "ReplicaSet", "replicasets"),
        ("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    ];
    let fingerprint = || async {
        let mut versions = Vec::new();
        for (g, v, k, p) in kinds {
            let api: Api<DynamicObject> =
                Api::namespaced_with(admin.clone(), ns, &cluster::api_resource(g, v, k, p));
            let list = api.list(&Default::default()).await.expect("list");
            versions.push(list.items.len().to_string());
            versions.extend(
                list.items
                    .iter()
                    .filter_map(|o| o.metadata.resource_version.clone()),
            );
        }
        versions.sort();
        versions
    };
    let start = Instant::now();
    let mut last = fingerprint().await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = fingerprint().await;
        if now == last {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "kube-controller-manager still writing in {ns} after 10 minutes"
        );
        last = now;
    }
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

/// Requests wavegate made to the API server as a writer so far (its own /metrics): gate status
/// and annotation writes, refused ones included, and Events. The gate controller answers what
/// other clients of the shared control plane do to their WaveGates, whatever the views cost.
async fn writer_requests(http: &reqwest::Client, base: &str) -> f64 {
    let text = match http.get(format!("{base}/metrics")).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    [
        "wavegate_gate_status_writes_total",
        "wavegate_annotation_writes_total",
        "wavegate_write_errors_total",
    ]
    .iter()
    .map(|m| support::metric_sum(&text, m, ""))
    .sum::<f64>()
        + support::metric_sum(&text, "wavegate_events_total", r#"outcome="sent""#)
        + support::metric_sum(&text, "wavegate_events_total", r#"outcome="retried""#)
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

/// Busy and total jiffies of all cores (`/proc/stat`): how busy the machine was meanwhile.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = f.iter().take(8).sum();
    // idle and iowait
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

fn load1() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

async fn get(http: &reqwest::Client, url: &str) -> (Duration, axum::body::Bytes) {
    let started = Instant::now();
    let resp = http.get(url).send().await.expect("request");
    let status = resp.status();
    let body = resp.bytes().await.expect("body");
    assert!(
        status.is_success(),
        "{url}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    (started.elapsed(), body)
}

/// Whether the wavegate at `base` answers the dashboard's one request for a page's views
/// (`GET /api/v1/applications/waves`; builds before it do not), asked once per server and
/// outside any measured time.
async fn answers_batches(http: &reqwest::Client, base: &str) -> bool {
    static KNOWN: std::sync::Mutex<Vec<(String, bool)>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, b)) = KNOWN.lock().unwrap().iter().find(|(k, _)| k == base) {
        return *b;
    }
    let url = format!("{base}/api/v1/applications/waves?app=default/none");
    let status = http.get(&url).send().await.expect("request").status();
    let batches = status.is_success();
    KNOWN.lock().unwrap().push((base.to_string(), batches));
    batches
}

/// A `wavegate serve` under measurement: the build it is (`old`, `new`), where it answers, its
/// process.
struct Server {
    build: &'static str,
    base: String,
    pid: u32,
}

/// What a measured request is.
enum Ask {
    /// One GET of a path.
    Get(String),
    /// What the dashboard (src/api/dashboard.html `load`) does every 2 s: the gates and the
    /// applications, then the waves views of the applications on its first page (20, by name):
    /// in one request where the build answers `GET /api/v1/applications/waves` (src/api/
    /// batch.rs), else one request each, as many at a time as a browser opens connections to
    /// one host over HTTP/1.1 (6). No entity tags are sent: every view is answered whole.
    Refresh,
    /// `pollers` GETs of a path at once: that many open Waves tabs of the UI extension whose
    /// 5-second polls come due together.
    Pollers { path: String, pollers: usize },
    /// One change of an object the view judges, seen by the wavegate measured, before each ask:
    /// what a poll costs when the cluster moved since the last one.
    AfterChange(Box<Ask>, Change),
}

/// Pauses and resumes one Deployment of the big Application in turn, and waits until the
/// wavegate measured has applied the change (its verdict on that Deployment alone says so).
struct Change {
    admin: Client,
    ns: String,
    deployment: String,
    paused: std::sync::atomic::AtomicBool,
}

impl Change {
    async fn make(&self, http: &reqwest::Client, base: &str) {
        let paused = !self
            .paused
            .fetch_xor(true, std::sync::atomic::Ordering::Relaxed);
        let ar = cluster::api_resource("apps", "v1", "Deployment", "deployments");
        Api::<DynamicObject>::namespaced_with(self.admin.clone(), &self.ns, &ar)
            .patch(
                &self.deployment,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": paused}})),
            )
            .await
            .unwrap_or_else(|e| panic!("pause {}: {e}", self.deployment));
        let health = format!(
            "{base}/api/v1/health/deployments.apps/{}/{}",
            self.ns, self.deployment
        );
        let since = Instant::now();
        loop {
            let (_, body) = get(http, &health).await;
            let verdict: Value = serde_json::from_slice(&body).expect("verdict JSON");
            if (verdict["status"] == "Suspended") == paused {
                return;
            }
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "{base} never saw {} paused={paused}: {verdict}",
                self.deployment
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Applications on one page of the dashboard (src/api/dashboard.html `APPS_PER_PAGE`).
const APPS_PER_PAGE: usize = 20;

/// Connections a browser opens to one host over HTTP/1.1 (Chromium's per-host socket limit).
const BROWSER_CONNECTIONS: usize = 6;

impl Ask {
    /// Requests one ask makes that count as answers (what CPU per request divides by).
    fn requests(&self) -> usize {
        match self {
            Ask::Get(_) | Ask::Refresh => 1,
            Ask::Pollers { pollers, .. } => *pollers,
            Ask::AfterChange(ask, _) => ask.requests(),
        }
    }

    /// The time of each answer, and the bytes answered.
    async fn run(&self, http: &reqwest::Client, base: &str) -> (Vec<Duration>, usize) {
        match self {
            Ask::Get(path) => {
                let (took, body) = get(http, &format!("{base}{path}")).await;
                (vec![took], body.len())
            }
            Ask::Pollers { path, pollers } => {
                let url = format!("{base}{path}");
                let answers =
                    futures::future::join_all((0..*pollers).map(|_| get(http, &url))).await;
                let bytes = answers.iter().map(|(_, b)| b.len()).sum();
                (answers.into_iter().map(|(t, _)| t).collect(), bytes)
            }
            Ask::AfterChange(ask, change) => {
                change.make(http, base).await;
                Box::pin(ask.run(http, base)).await
            }
            Ask::Refresh => {
                let batches = answers_batches(http, base).await;
                let started = Instant::now();
                let (gates_url, list_url) = (
                    format!("{base}/api/v1/gates"),
                    format!("{base}/api/v1/applications"),
                );
                let ((_, gates), (_, list)) =
                    tokio::join!(get(http, &gates_url), get(http, &list_url));
                let apps: Value = serde_json::from_slice(&list).expect("applications JSON");
                let mut names: Vec<(String, String)> = apps["applications"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|app| {
                                let s = |k: &str| app[k].as_str().unwrap_or("").to_string();
                                (s("namespace"), s("name"))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                if batches {
                    let apps: Vec<String> = names
                        .iter()
                        .take(APPS_PER_PAGE)
                        .map(|(ns, name)| format!("app={ns}/{name}"))
                        .collect();
                    let url = format!("{base}/api/v1/applications/waves?{}", apps.join("&"));
                    let (_, views) = get(http, &url).await;
                    let bytes = gates.len() + list.len() + views.len();
                    return (vec![started.elapsed()], bytes);
                }
                let urls: Vec<String> = names
                    .iter()
                    .take(APPS_PER_PAGE)
                    .map(|(ns, name)| format!("{base}/api/v1/applications/{ns}/{name}/waves"))
                    .collect();
                let bytes: usize = futures::stream::iter(urls)
                    .map(|u| async move { get(http, &u).await.1.len() })
                    .buffer_unordered(BROWSER_CONNECTIONS)
                    .fold(gates.len() + list.len(), |sum, b| async move { sum + b })
                    .await;
                (vec![started.elapsed()], bytes)
            }
        }
    }
}

/// First ask, then `asks` warm ones; one BENCH line, `bigapps.<name>.<build>`.
async fn measure(
    name: &str,
    server: &Server,
    ask: &Ask,
    asks: usize,
    admin: &Client,
    resources: usize,
) {
    let (base, pid) = (server.base.as_str(), server.pid);
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let (first, bytes) = ask.run(&http, base).await;
    // Let the watches the first request started, and the events of any change, settle before
    // the warm requests count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes0 = writer_requests(&http, base).await;
    let (requests0, ns0, ticks0, machine0) = (
        own_requests(admin).await,
        support::thread_cpu_ns(pid),
        cpu_ticks(pid),
        machine_ticks(),
    );
    let own0 = cpu_ticks(std::process::id());
    let mut took = Vec::new();
    for _ in 0..asks {
        took.extend(ask.run(&http, base).await.0);
    }
    let (requests1, ns1, ticks1, machine1) = (
        own_requests(admin).await,
        support::cpu_ns_since(pid, &ns0),
        cpu_ticks(pid),
        machine_ticks(),
    );
    let writes = writer_requests(&http, base).await - writes0;
    let own1 = cpu_ticks(std::process::id());
    let s = Summary::of(&took).expect("samples");
    // What kept the cores busy besides wavegate and this client (the API server, the other
    // wavegate's watches, other work on the machine), in percent of all cores over the warm
    // requests.
    let others = (machine1.0 - machine0.0)
        .saturating_sub(ticks1 - ticks0)
        .saturating_sub(own1 - own0);
    let others_pct = 100.0 * others as f64 / (machine1.1 - machine0.1).max(1) as f64;
    let answered = asks * ask.requests();
    let mut fields = vec![
        ("resources", resources.to_string()),
        (
            "first_ms",
            ms(first.iter().copied().max().unwrap_or_default()),
        ),
        ("bytes", bytes.to_string()),
    ];
    fields.extend(s.fields());
    fields.extend([
        (
            "cpu_ms_per_request",
            format!("{:.2}", ns1 as f64 / 1e6 / answered as f64),
        ),
        // The two reads of the API server's own /metrics go through the admin's flow schema.
        // What the views caused: all of wavegate's requests but its writes.
        (
            "apiserver_requests",
            format!("{:.0}", (requests1 - requests0 - writes).max(0.0)),
        ),
        ("writer_requests", format!("{writes:.0}")),
        ("rss_kib", rss_kib(pid).to_string()),
        ("others_busy_pct", format!("{others_pct:.0}")),
        ("load1", load1()),
    ]);
    report(&format!("bigapps.{name}.{}", server.build), &fields);
}

#[tokio::main]
async fn main() {
    // The build under test, and optionally an older one measured beside it in the same run
    // (each shape on the old build, then on the new, so both meet the same machine).
    let mut servers = Vec::new();
    if let Some(old) = support::arg("--old") {
        let pid = required("--old-pid").parse().expect("--old-pid");
        servers.push(Server {
            build: "old",
            base: old.trim_end_matches('/').to_string(),
            pid,
        });
    }
    servers.push(Server {
        build: "new",
        base: required("--wavegate").trim_end_matches('/').to_string(),
        pid: required("--pid").parse().expect("--pid"),
    });
    let n: usize = arg_or("--resources", 2000);
    let waves: usize = arg_or("--waves", 20);
    let children: usize = arg_or("--children", 200);
    let per_child: usize = arg_or("--child-resources", 10);
    let asks: usize = arg_or("--asks", 50);
    let refreshes: usize = arg_or("--refreshes", 10);
    let pollers: usize = arg_or("--pollers", 10);
    let admin = cluster::client().await;
    let ns = match support::arg("--namespace") {
        // The one a wavegate started with `--namespaces` watches, so that what other clients of
        // a shared control plane do elsewhere (their WaveGates, their pods) costs it nothing.
        Some(ns) => {
            let namespace: k8s_openapi::api::core::v1::Namespace =
                serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
            kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
                .create(&Default::default(), &namespace)
                .await
                .expect("create namespace");
            ns
        }
        None => cluster::namespace(&admin, "wgbench-bigapps").await,
    };
    let built = Instant::now();
    managed_objects(&admin, &ns, n.max(children * per_child)).await;
    let span = |from: usize, count: usize| -> Vec<Value> {
        (from..from + count)
            .map(|i| managed(&ns, i, i % waves))
            .collect()
    };
    let children_of = |count: usize| -> Vec<Value> {
        (0..count)
            .map(|j| {
                resource(
                    &ns,
                    "Application",
                    "argoproj.io",
                    "v1alpha1",
                    &format!("child-{j:03}"),
                    j % waves,
                )
            })
            .collect()
    };
    let mut apps = vec![
        application(&ns, "big", &span(0, n)),
        application(&ns, "half", &span(0, n / 2)),
        application(&ns, "tenth", &span(0, n / 10)),
        application(&ns, "parent", &children_of(children)),
        application(&ns, "parent-half", &children_of(children / 2)),
    ];
    for j in 0..children {
        apps.push(application(
            &ns,
            &format!("child-{j:03}"),
            &span(j * per_child, per_child),
        ));
    }
    let applications = apps.len();
    create_all(&admin, apps).await;
    eprintln!("bigapps: objects created in {:?}", built.elapsed());

    // Until every wavegate's watch shows every Application (one of 2,000 resources is over a
    // megabyte): the Application's own health reads nothing else, so no other watch starts
    // before the first measured request.
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let names: Vec<String> = ["big", "half", "tenth", "parent", "parent-half"]
        .into_iter()
        .map(String::from)
        .chain((0..children).map(|j| format!("child-{j:03}")))
        .collect();
    let seen = Instant::now();
    for server in &servers {
        for name in &names {
            let health = format!(
                "{}/api/v1/health/applications.argoproj.io/{ns}/{name}",
                server.base
            );
            loop {
                let (_, body) = get(&http, &health).await;
                let verdict: Value = serde_json::from_slice(&body).expect("verdict JSON");
                if verdict["status"] != "Missing" {
                    break;
                }
                assert!(
                    seen.elapsed() < Duration::from_secs(120),
                    "{} never saw Application {ns}/{name}: {verdict}",
                    server.build
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eprintln!("bigapps: wavegate saw them {:?} later", seen.elapsed());
    let quiet = Instant::now();
    settled(&admin, &ns).await;
    eprintln!(
        "bigapps: the controllers were done {:?} later",
        quiet.elapsed()
    );
    let waves_of = |app: &str| format!("/api/v1/applications/{ns}/{app}/waves");
    // A Deployment of the big Application (index 2: a Deployment, in wave 2).
    let change = || Change {
        admin: admin.clone(),
        ns: ns.clone(),
        deployment: name_of(2),
        paused: false.into(),
    };
    let everything = n + n / 2 + n / 10 + children * (per_child + 1) + children / 2;
    let shapes = [
        (
            format!("waves-timeline.{n}"),
            Ask::Get(waves_of("big")),
            asks,
            n,
        ),
        (
            format!("waves-timeline.{}", n / 2),
            Ask::Get(waves_of("half")),
            asks,
            n / 2,
        ),
        (
            format!("waves-timeline.{}", n / 10),
            Ask::Get(waves_of("tenth")),
            asks,
            n / 10,
        ),
        (
            format!("parent.{children}x{per_child}"),
            Ask::Get(waves_of("parent")),
            asks,
            children,
        ),
        (
            format!("parent.{}x{per_child}", children / 2),
            Ask::Get(waves_of("parent-half")),
            asks,
            children / 2,
        ),
        (
            format!("changed.{n}"),
            Ask::AfterChange(Box::new(Ask::Get(waves_of("big"))), change()),
            asks,
            n,
        ),
        (
            format!("pollers.{pollers}x{n}"),
            Ask::Pollers {
                path: waves_of("big"),
                pollers,
            },
            refreshes,
            n,
        ),
        (
            format!("pollers-changed.{pollers}x{n}"),
            Ask::AfterChange(
                Box::new(Ask::Pollers {
                    path: waves_of("big"),
                    pollers,
                }),
                change(),
            ),
            refreshes,
            n,
        ),
        (
            "applications".to_string(),
            Ask::Get("/api/v1/applications".to_string()),
            refreshes,
            everything,
        ),
        ("dashboard".to_string(), Ask::Refresh, refreshes, everything),
    ];
    // Only the shapes asked for (all by default): a run for one row need not take ten minutes.
    let only: Option<Vec<String>> =
        support::arg("--shapes").map(|s| s.split(',').map(|p| p.trim().to_string()).collect());
    let chosen = |shape: &str| {
        only.as_ref().is_none_or(|o| {
            o.iter()
                .any(|p| !p.is_empty() && shape.starts_with(p.as_str()))
        })
    };
    for (shape, ask, count, resources) in shapes.iter().filter(|s| chosen(&s.0)) {
        for server in &servers {
            measure(shape, server, ask, *count, &admin, *resources).await;
        }
    }
    // RSS once the requests have paused: what an idle replica holds after the bench, when
    // memory the views freed has been given back (`wavegate::heap`, a second after the last
    // answer), beside the RSS read right after each shape's last request.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for server in &servers {
        report(
            &format!("bigapps.settled.{}", server.build),
            &[("rss_kib", rss_kib(server.pid).to_string())],
        );
    }
    eprintln!("bigapps: {applications} Applications in {ns}");
    if support::arg("--keep").is_some_and(|k| k == "true") {
        // For tests/browser/render-bench.mjs; the caller removes the namespace.
        report("bigapps.namespace", &[("name", ns)]);
    } else {
        support::drop_namespace(&admin, &ns).await;
    }
}
