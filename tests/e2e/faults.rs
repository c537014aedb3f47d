//! Faults injected into a real control plane while `wavegate serve` (the real binary, with the
//! `deploy/base` ServiceAccount's token) judges a Service and a WaveGate on it: kube-apiserver
//! restarted, etcd restarted, etcd compacted under a frozen wavegate (410 Gone territory),
//! wavegate restarted, status writes forbidden (RBAC revoked), kube-apiserver paused (SIGSTOP)
//! for longer than the watch timeout. Where the fault allows it, the truth changes while
//! wavegate cannot see it (the pod turns NotReady while wavegate is down or frozen).
//!
//! An observer asks wavegate and reads the gate every 100 ms throughout and checks each answer
//! against the truth the test set: never Healthy once the pod is not ready (after a 2 s
//! allowance for ordinary watch latency, counted from the change), never Degraded (nothing here
//! is a definite failure of the cluster). After each fault: the verdict and the gate recover to
//! the truth, wavegate never exited on its own, and `/readyz` says what its caches can vouch for.
//!
//! The control plane is private (own state directory and ports): the shared one on 6443 is
//! never stopped or paused. `WAVEGATE_FAULTS_PAUSE` sets the API server pause (default 300 s,
//! past kube-rs' 290 s watch timeout); results are summarised in docs/verification.md.

use crate::cluster;
use crate::private_control_plane;

use cluster::{apply, pod, set_pod_ready};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use private_control_plane::PrivateControlPlane;
use serde_json::{Value, json};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NS: &str = "faults";
/// How late a verdict may still show a change that reached the API server, on a working watch.
const WATCH_LATENCY: Duration = Duration::from_secs(2);
/// The same for the gate's stored status: a judgement and a status write more. A completed
/// relist announces every object it listed once the store is readable, and a change resets the
/// reconcile's retry backoff, so after an etcd restart the status follows as fast as the
/// verdict (1.5 s measured; 4.7–4.9 s before, when the list's objects were announced while
/// reads were still refused and the gate waited for its retry backoff).
const WRITE_LATENCY: Duration = Duration::from_secs(4);
/// wavegate's default `--status-validity`: a status's `health.validUntil` less this is when its
/// verdict was written (to the second, rounded down), which tells a status written after the
/// change from one left over from before it, however the observer's samples fell.
const STATUS_VALIDITY_SECONDS: i64 = 180;
const RECOVERY: Duration = Duration::from_secs(90);

/// What the test made true, and since when.
#[derive(Clone, Copy)]
struct Truth {
    ready: bool,
    since: Instant,
    /// `since` by the wall clock, which wavegate's `validUntil` is written by.
    since_wall: Timestamp,
    /// Until then the gate's stored status cannot be current (wavegate is down, frozen or may
    /// not write): a Healthy there is an old verdict, counted apart.
    writes_blocked_until: Option<Instant>,
}

#[derive(Default)]
struct Tally {
    samples: u64,
    false_healthy_verdicts: Vec<String>,
    false_healthy_gate: Vec<String>,
    stale_gate_while_blocked: u64,
    /// Last time wavegate said it could not see: its verdict (down, frozen, relisting), or its
    /// own `/readyz` (a required watch it cannot vouch for, such as the WaveGates' own while the
    /// API server's `/readyz` still fails after etcd is back: the gate cannot be read, so no
    /// status can be written).
    blind_at: Option<Instant>,
    degraded: Vec<String>,
    /// Per phase, how long after the pod turned NotReady the gate's stored status first left
    /// Healthy (the write latency the phases measure).
    gate_lag: Vec<(String, Duration)>,
    /// The truth (`since`) whose gate lag is already recorded.
    lag_recorded_for: Option<Instant>,
}

struct Observer {
    truth: Mutex<Truth>,
    tally: Mutex<Tally>,
    phase: Mutex<String>,
}

impl Observer {
    fn set_truth(&self, ready: bool) {
        let mut t = self.truth.lock().unwrap();
        t.ready = ready;
        t.since = Instant::now();
        t.since_wall = Timestamp::now();
    }

    fn block_writes(&self) {
        self.truth.lock().unwrap().writes_blocked_until = Some(far_future());
    }

    fn unblock_writes(&self) {
        self.truth.lock().unwrap().writes_blocked_until = Some(Instant::now());
    }

    /// One sample: `verdict` as answered at `answered` to a request sent at `asked`, then
    /// wavegate's `/readyz` and the gate's stored status.
    fn record(
        &self,
        verdict: &Value,
        (asked, answered): (Instant, Instant),
        gate: Option<&Gate>,
        vouching: bool,
    ) {
        let now = Instant::now();
        let truth = *self.truth.lock().unwrap();
        let phase = self.phase.lock().unwrap().clone();
        let mut tally = self.tally.lock().unwrap();
        tally.samples += 1;
        let not_ready_for = (!truth.ready).then(|| now.duration_since(truth.since));
        // A verdict is judged after its request was sent, and is wrong only if the truth had
        // changed by then: the `/readyz` and gate reads after it may take seconds (3 s each
        // against a frozen wavegate), and a Healthy answered before a SIGSTOP, then sampled at
        // the thaw, once passed for a verdict served 17 s after the pod turned NotReady.
        // Unless the answer itself took long: a request wavegate held across a freeze was
        // judged after the thaw (or was answered from what it read before the freeze, which is
        // as wrong), so it must be as fresh as one sent at its answer.
        let held = answered.duration_since(asked) > Duration::from_secs(1);
        let not_ready_when_asked = (!truth.ready && truth.since <= asked)
            .then(|| asked.duration_since(truth.since))
            .or_else(|| {
                (held && !truth.ready && truth.since <= answered)
                    .then(|| answered.duration_since(truth.since))
            });
        let status = verdict["status"].as_str().unwrap_or("");
        let message = verdict["message"].as_str().unwrap_or("");
        let blind = !vouching
            || verdict.is_null()
            || ["relisting", "has not synced", "not heard from"]
                .iter()
                .any(|m| message.contains(m));
        if blind {
            tally.blind_at = Some(now);
        }
        if status == "Healthy" && not_ready_when_asked.is_some_and(|d| d > WATCH_LATENCY) {
            tally.false_healthy_verdicts.push(format!(
                "[{phase}] asked {:?} after the change: {verdict}",
                not_ready_when_asked.unwrap_or_default()
            ));
        }
        if status == "Degraded" {
            tally.degraded.push(format!("[{phase}] verdict {verdict}"));
        }
        // Written by wavegate after it could have known of the change: never an old status.
        let written_after_change = gate
            .and_then(|g| g.written)
            .is_some_and(|w| w >= truth.since_wall + WATCH_LATENCY);
        let gate = gate.map(|g| g.health.as_str());
        if let (Some(d), Some(g)) = (not_ready_for, gate)
            && g != "Healthy"
            && tally.lag_recorded_for != Some(truth.since)
        {
            tally.lag_recorded_for = Some(truth.since);
            tally.gate_lag.push((phase.clone(), d));
        }
        match gate {
            Some("Healthy") if not_ready_for.is_some_and(|d| d > WATCH_LATENCY) => {
                // The stored status can be no fresher than wavegate's own knowledge: while it
                // cannot see, or may not write, the last status stands. Only one written before
                // the change is excused so: the excuse is read from the status itself, not from
                // which statuses the observer's samples happened to catch (a Healthy written
                // 80 ms before a freeze, never sampled, once passed for a fresh write).
                let blocked = truth
                    .writes_blocked_until
                    .is_some_and(|until| now < until + WRITE_LATENCY)
                    || tally.blind_at.is_some_and(|at| now < at + WRITE_LATENCY);
                if blocked && !written_after_change {
                    tally.stale_gate_while_blocked += 1;
                } else if written_after_change || not_ready_for.is_some_and(|d| d > WRITE_LATENCY) {
                    tally.false_healthy_gate.push(format!(
                        "[{phase}] gate Healthy {:?} after the change{}",
                        not_ready_for.unwrap_or_default(),
                        if written_after_change {
                            ", written after it"
                        } else {
                            ""
                        }
                    ));
                }
            }
            Some("Degraded") => tally.degraded.push(format!("[{phase}] gate Degraded")),
            _ => {}
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

/// `wavegate serve` as a child process, logging to a file.
struct Wavegate {
    child: Child,
    url: String,
    log: PathBuf,
    kubeconfig: PathBuf,
    port: u16,
}

impl Wavegate {
    fn start(kubeconfig: &Path, log: &Path, port: u16) -> Wavegate {
        let out = File::options().create(true).append(true).open(log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--namespaces", NS, "--resync", "2s"])
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                "info,wavegate::cache=debug,wavegate::gate=debug",
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("wavegate binary");
        Wavegate {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log: log.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
            port,
        }
    }

    fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} wavegate");
    }

    /// SIGTERM, as the kubelet stops it, and wait for the exit.
    fn stop(&mut self) {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "wavegate ignores SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn restart(&mut self) {
        self.stop();
        *self = Wavegate::start(&self.kubeconfig, &self.log, self.port);
    }

    /// Never exited on its own (no crash, no crash loop).
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            panic!(
                "wavegate exited ({status}); last log lines:\n{}",
                tail.join("\n")
            );
        }
    }

    fn log_contains(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .contains(needle)
    }
}

impl Drop for Wavegate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn get(http: &reqwest::Client, url: &str) -> Result<(u16, Value), String> {
    let resp = http
        .get(url)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    Ok((
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

async fn verdict(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    match get(http, &format!("{url}/api/v1/health/services/{NS}/web")).await? {
        (200, v) => Ok(v),
        (code, body) => Err(format!("{code}: {body}")),
    }
}

async fn readyz(http: &reqwest::Client, url: &str) -> Result<u16, String> {
    get(http, &format!("{url}/readyz"))
        .await
        .map(|(code, _)| code)
}

fn gates(client: &Client) -> Api<DynamicObject> {
    let ar = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    Api::namespaced_with(client.clone(), NS, &ar)
}

/// The gate's stored status, when it is about the current generation.
struct Gate {
    /// `status.health.status`.
    health: String,
    /// When its verdict was written, to the second: `health.validUntil` less the validity.
    written: Option<Timestamp>,
}

async fn gate(client: &Client) -> Option<Gate> {
    let g = tokio::time::timeout(Duration::from_secs(3), gates(client).get("web"))
        .await
        .ok()?
        .ok()?;
    let g = serde_json::to_value(g).ok()?;
    let health = &g["status"]["health"];
    let written = health["validUntil"]
        .as_i64()
        .and_then(|s| Timestamp::from_second(s - STATUS_VALIDITY_SECONDS).ok());
    let health = health["status"].as_str()?.to_string();
    (g["status"]["observedGeneration"] == g["metadata"]["generation"])
        .then_some(Gate { health, written })
}

/// The gate's `status.health.status`, when the status is about the current generation.
async fn gate_status(client: &Client) -> Option<String> {
    gate(client).await.map(|g| g.health)
}

async fn until<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(()) => return,
            Err(last) if start.elapsed() > timeout => {
                panic!("{what}: not within {timeout:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

struct Scene {
    cp: PrivateControlPlane,
    admin: Client,
    wg: Wavegate,
    http: reqwest::Client,
    observer: Arc<Observer>,
}

impl Scene {
    fn phase(&self, name: &str) {
        eprintln!("--- fault: {name}");
        *self.observer.phase.lock().unwrap() = name.to_string();
    }

    async fn admin_now(&mut self) -> Client {
        // A fresh client: the old one's connections died with the API server.
        self.admin = self.cp.admin().await;
        self.admin.clone()
    }

    /// The pod turns NotReady (the truth first, so no answer after it can claim otherwise).
    async fn pod_turns_not_ready(&self) {
        self.observer.set_truth(false);
        set_pod_ready(&self.admin, NS, "web-0", "10.0.0.1", false).await;
    }

    /// The pod turns Ready. The truth turns as the patch leaves: once the API server has it,
    /// wavegate may see it and write a new Healthy status before the patch's answer is back,
    /// and that write is not a false one. (What this excuses: a Healthy written in the one
    /// request's time before the API server stored the patch.)
    async fn pod_turns_ready(&self) {
        self.observer.set_truth(true);
        set_pod_ready(&self.admin, NS, "web-0", "10.0.0.1", true).await;
    }

    async fn verdict_becomes(&self, want: &str) {
        let (http, url) = (&self.http, &self.wg.url);
        until(&format!("verdict {want}"), RECOVERY, || async move {
            let v = verdict(http, url).await?;
            (v["status"] == want).then_some(()).ok_or(v.to_string())
        })
        .await;
    }

    async fn gate_becomes(&self, want: &str) {
        let admin = &self.admin;
        until(&format!("gate {want}"), RECOVERY, || async move {
            let s = gate_status(admin).await;
            (s.as_deref() == Some(want))
                .then_some(())
                .ok_or(format!("{s:?}"))
        })
        .await;
    }

    async fn readyz_becomes(&self, want: u16, within: Duration) {
        let (http, url) = (&self.http, &self.wg.url);
        until(&format!("/readyz {want}"), within, || async move {
            let code = readyz(http, url).await?;
            (code == want).then_some(()).ok_or(code.to_string())
        })
        .await;
    }

    /// Wavegate sees the pod unready and the gate says so.
    async fn recovers_to_not_ready(&mut self) {
        self.verdict_becomes("Progressing").await;
        self.gate_becomes("Progressing").await;
        self.readyz_becomes(200, RECOVERY).await;
        self.wg.assert_running();
    }

    /// Back to the healthy start of the next fault.
    async fn back_to_healthy(&mut self) {
        self.pod_turns_ready().await;
        self.verdict_becomes("Healthy").await;
        self.gate_becomes("Healthy").await;
        self.readyz_becomes(200, RECOVERY).await;
        self.wg.assert_running();
    }
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn faults_never_make_wavegate_claim_healthy_or_degraded_falsely() {
    let cp = PrivateControlPlane::up("faults");
    let admin = cp.admin().await;
    // As installed: deploy/base RBAC, wavegate with its ServiceAccount's token.
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    // The base reads argocd-cm in Argo CD's namespace, which an install has.
    cp.kubectl(&["create", "namespace", "argocd"]);
    cp.kubectl(&["apply", "--server-side", "-k", base.to_str().unwrap()]);
    cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/wavegates.wavegate.dev",
    ]);
    let token = cp.kubectl(&[
        "-n",
        "wavegate",
        "create",
        "token",
        "wavegate",
        "--duration=2h",
    ]);
    let sa_kubeconfig = cp.kubeconfig_with_token("wavegate", token.trim());
    cp.kubectl(&["create", "namespace", NS]);
    pod(&admin, NS, "web-0", json!({"app": "web"})).await;
    set_pod_ready(&admin, NS, "web-0", "10.0.0.1", true).await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": NS},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": "web", "namespace": NS},
               "spec": {"checks": [{"name": "web", "service": {"name": "web"}}]}}),
    )
    .await;

    let port = crate::private_control_plane::free_port(false);
    let wg = Wavegate::start(&sa_kubeconfig, &cp.state.join("wavegate.log"), port);
    let observer = Arc::new(Observer {
        truth: Mutex::new(Truth {
            ready: true,
            since: Instant::now(),
            since_wall: Timestamp::now(),
            writes_blocked_until: None,
        }),
        tally: Mutex::default(),
        phase: Mutex::new("start".into()),
    });
    let mut scene = Scene {
        cp,
        admin,
        wg,
        http: reqwest::Client::new(),
        observer: observer.clone(),
    };
    scene.readyz_becomes(200, RECOVERY).await;
    scene.verdict_becomes("Healthy").await;
    scene.gate_becomes("Healthy").await;

    let watching = {
        let (url, obs) = (scene.wg.url.clone(), observer.clone());
        let kubeconfig = scene.cp.kubeconfig.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut admin: Option<Client> = None;
            loop {
                let asked = Instant::now();
                let v = verdict(&http, &url).await.ok();
                let answered = Instant::now();
                let vouching = readyz(&http, &url).await == Ok(200);
                if admin.is_none() {
                    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
                    let opts = kube::config::KubeConfigOptions::default();
                    if let Ok(cfg) = kube::Config::from_custom_kubeconfig(kc, &opts).await {
                        admin = Client::try_from(cfg).ok();
                    }
                }
                let g = match &admin {
                    Some(a) => gate(a).await,
                    None => None,
                };
                obs.record(
                    v.as_ref().unwrap_or(&Value::Null),
                    (asked, answered),
                    g.as_ref(),
                    vouching,
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // 1. kube-apiserver restarted. While it is away nothing is served as fresh; the truth
    // changes the moment it is back, before wavegate has relisted.
    scene.phase("kube-apiserver restarted");
    scene.cp.stop("kube-apiserver");
    scene.verdict_becomes("Progressing").await;
    scene.readyz_becomes(503, Duration::from_secs(30)).await;
    scene.cp.start("kube-apiserver");
    scene.admin_now().await;
    scene.pod_turns_not_ready().await;
    scene.recovers_to_not_ready().await;
    scene.back_to_healthy().await;

    // 2. etcd restarted: the API server stays up but can neither read nor write.
    scene.phase("etcd restarted");
    scene.cp.stop("etcd");
    scene.verdict_becomes("Progressing").await;
    scene.readyz_becomes(503, Duration::from_secs(30)).await;
    scene.wg.assert_running();
    scene.cp.start("etcd");
    until("the API server is ready again", RECOVERY, || async {
        let admin = scene.cp.admin().await;
        admin
            .apiserver_version()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())?;
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin, NS)
            .get("web-0")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    scene.admin_now().await;
    scene.pod_turns_not_ready().await;
    scene.recovers_to_not_ready().await;
    scene.back_to_healthy().await;

    // 3. Compaction under a frozen wavegate: the pod turns NotReady while wavegate is frozen
    // (SIGSTOP), other pods churn, etcd is compacted past everything wavegate has seen and
    // kube-apiserver restarts with a fresh watch cache, so no resourceVersion wavegate holds
    // can be resumed from (410 Gone). Then wavegate thaws, holding the pre-outage pod.
    scene.phase("etcd compacted under a frozen wavegate (410 Gone)");
    scene.wg.signal("STOP");
    scene.observer.block_writes();
    scene.pod_turns_not_ready().await;
    pod(&scene.admin, NS, "churn-0", json!({"app": "churn"})).await;
    for i in 0..150 {
        let patch = json!({"metadata": {"labels": {"round": i.to_string()}}});
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(scene.admin.clone(), NS)
            .patch("churn-0", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
    let revision = scene.cp.compact();
    eprintln!("etcd compacted to revision {revision}");
    scene.cp.stop("kube-apiserver");
    scene.cp.start("kube-apiserver");
    scene.admin_now().await;
    scene.wg.signal("CONT");
    scene.observer.unblock_writes();
    scene.recovers_to_not_ready().await;
    scene.back_to_healthy().await;

    // 4. wavegate restarted while the truth changes.
    scene.phase("wavegate restarted");
    scene.wg.stop();
    scene.observer.block_writes();
    scene.pod_turns_not_ready().await;
    scene.wg = Wavegate::start(
        &scene.wg.kubeconfig.clone(),
        &scene.wg.log.clone(),
        scene.wg.port,
    );
    scene.observer.unblock_writes();
    scene.recovers_to_not_ready().await;
    scene.back_to_healthy().await;
    scene.wg.restart();
    scene.readyz_becomes(200, RECOVERY).await;
    scene.verdict_becomes("Healthy").await;

    // 5. Status writes fail: the ClusterRole loses `patch wavegates/status`.
    scene.phase("status writes forbidden (RBAC revoked)");
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(scene.admin.clone());
    let role = roles.get("wavegate").await.unwrap();
    let mut revoked = role.clone();
    revoked.rules.as_mut().unwrap().retain(|r| {
        !r.resources
            .as_ref()
            .is_some_and(|res| res.iter().any(|x| x == "wavegates/status"))
    });
    revoked.metadata.managed_fields = None;
    roles
        .replace("wavegate", &Default::default(), &revoked)
        .await
        .unwrap();
    scene.observer.block_writes();
    scene.pod_turns_not_ready().await;
    scene.verdict_becomes("Progressing").await;
    until("wavegate reports the refused write", RECOVERY, || async {
        scene
            .wg
            .log_contains("status write failed")
            .then_some(())
            .ok_or_else(|| "no refused write logged yet".to_string())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    scene.wg.assert_running();
    scene.readyz_becomes(200, Duration::from_secs(5)).await;
    let mut restored = roles.get("wavegate").await.unwrap();
    restored.rules = role.rules.clone();
    restored.metadata.managed_fields = None;
    roles
        .replace("wavegate", &Default::default(), &restored)
        .await
        .unwrap();
    scene.observer.unblock_writes();
    scene.recovers_to_not_ready().await;
    scene.back_to_healthy().await;

    // 6. kube-apiserver paused (SIGSTOP) for longer than the watch timeout: no error reaches
    // the watches, only silence.
    // A value without a unit ("10") is refused, not read as the default: a run meant to take
    // seconds silently took five minutes.
    let pause = match std::env::var("WAVEGATE_FAULTS_PAUSE") {
        Ok(s) => humantime::parse_duration(&s).unwrap_or_else(|e| {
            panic!("WAVEGATE_FAULTS_PAUSE={s:?} is not a duration with a unit (e.g. 20s): {e}")
        }),
        Err(_) => Duration::from_secs(300),
    };
    scene.phase("kube-apiserver paused (SIGSTOP)");
    scene.cp.signal("kube-apiserver", "STOP");
    scene.verdict_becomes("Progressing").await;
    scene.readyz_becomes(503, Duration::from_secs(30)).await;
    tokio::time::sleep(pause).await;
    scene.wg.assert_running();
    let v = verdict(&scene.http, &scene.wg.url).await.unwrap();
    assert_eq!(v["status"], "Progressing", "still paused: {v}");
    assert_eq!(readyz(&scene.http, &scene.wg.url).await, Ok(503));
    scene.cp.signal("kube-apiserver", "CONT");
    scene.admin_now().await;
    scene.pod_turns_not_ready().await;
    scene.recovers_to_not_ready().await;
    scene.back_to_healthy().await;

    watching.abort();
    let tally = observer.tally.lock().unwrap();
    eprintln!(
        "faults: 6 injected; {} observations; false Healthy verdicts {}; false Healthy gate \
         statuses {}; Degraded {}; old gate status read while wavegate could not see or write: {}",
        tally.samples,
        tally.false_healthy_verdicts.len(),
        tally.false_healthy_gate.len(),
        tally.degraded.len(),
        tally.stale_gate_while_blocked,
    );
    for (phase, lag) in &tally.gate_lag {
        eprintln!(
            "faults: [{phase}] gate status left Healthy {lag:?} after the pod turned NotReady"
        );
    }
    if !(tally.false_healthy_verdicts.is_empty() && tally.false_healthy_gate.is_empty()) {
        // CI keeps only this output: what wavegate did about its caches and the gate.
        let log = std::fs::read_to_string(&scene.wg.log).unwrap_or_default();
        let said = [
            "written",
            "answers again",
            "unreachable",
            "not written",
            "not listed",
        ];
        for line in log.lines().filter(|l| said.iter().any(|s| l.contains(s))) {
            eprintln!("wavegate: {line}");
        }
    }
    assert!(
        tally.false_healthy_verdicts.is_empty(),
        "false Healthy verdicts: {:#?}",
        tally.false_healthy_verdicts
    );
    assert!(
        tally.false_healthy_gate.is_empty(),
        "false Healthy gate statuses: {:#?}",
        tally.false_healthy_gate
    );
    assert!(tally.degraded.is_empty(), "Degraded: {:#?}", tally.degraded);
}
