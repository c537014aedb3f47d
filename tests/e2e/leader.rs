//! Several replicas, one writer, on the real local control plane: three
//! `wavegate serve --leader-elect` processes share one Lease. Only the holder writes WaveGate
//! status; SIGKILL it and another replica writes the next change within the lease duration;
//! every change is written exactly once across all replicas, and every replica keeps answering
//! reads throughout.

use crate::cluster;

use cluster::{apply, eventually, pod, set_pod_ready};
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};
use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The lease duration the replicas run with; takeover after a SIGKILL may take this long plus
/// the time to notice the expiry.
const LEASE: Duration = Duration::from_secs(10);
/// A new leader writes within 15 s of the old one's death.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(15);

struct Replica {
    identity: String,
    child: Child,
    url: String,
}

impl Replica {
    fn start(ns: &str, identity: &str) -> Replica {
        // A free loopback port below the ephemeral range.
        let port = crate::private_control_plane::free_port(false);
        let out = std::env::var("TEST_OUTPUT")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
        let log = File::create(format!("{out}/e2e-leader-{identity}.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_wavegate"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--namespaces",
                ns,
                "--resync",
                "2s",
                "--status-validity",
                "0",
            ])
            .args(["--leader-elect", "--leader-elect-namespace", ns])
            .args(["--leader-elect-identity", identity])
            .args(["--leader-elect-duration", &format!("{}s", LEASE.as_secs())])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("wavegate binary");
        Replica {
            identity: identity.into(),
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        let text = reqwest::get(format!("{}/metrics", self.url))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn lease_holder(client: &kube::Client, ns: &str) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    let lease = leases.get_opt("wavegate").await.ok()??;
    lease.spec?.holder_identity
}

async fn gate_status(client: &kube::Client, ns: &str) -> Option<String> {
    let ar = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let g = serde_json::to_value(api.get("web-up").await.ok()?).ok()?;
    g.pointer("/status/health/status")
        .and_then(Value::as_str)
        .map(str::to_string)
}

async fn gate_becomes(client: &kube::Client, ns: &str, want: &str, within: Duration) {
    eventually(within, &format!("gate {want}"), || async {
        match gate_status(client, ns).await {
            Some(s) if s == want => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn one_writer_among_three_replicas_and_a_new_one_after_sigkill() {
    let admin = cluster::client().await;
    let ns = cluster::namespace(&admin, "leader").await;
    pod(&admin, &ns, "web", json!({"app": "web"})).await;
    set_pod_ready(&admin, &ns, "web", "10.244.9.1", false).await;
    cluster::service(&admin, &ns, "web", "web").await;
    apply(
        &admin,
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": "web-up", "namespace": ns},
               "spec": {"checks": [{"name": "web", "service": {"name": "web"}}]}}),
    )
    .await;

    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::start(&ns, &format!("replica-{i}")))
        .collect();
    for r in &replicas {
        eventually(
            Duration::from_secs(30),
            "replica answers /healthz",
            || async {
                match reqwest::get(format!("{}/healthz", r.url)).await {
                    Ok(resp) if resp.status().is_success() => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    let first = eventually(Duration::from_secs(30), "a lease holder", || async {
        lease_holder(&admin, &ns)
            .await
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    gate_becomes(&admin, &ns, "Progressing", Duration::from_secs(30)).await;
    set_pod_ready(&admin, &ns, "web", "10.244.9.1", true).await;
    gate_becomes(&admin, &ns, "Healthy", Duration::from_secs(30)).await;

    // Exactly one replica leads and has written: the first verdict and the Healthy one — and,
    // when a reconcile fell between the pod turning Ready and kube-controller-manager
    // publishing its endpoint, that true intermediate state (Progressing with its own message)
    // once. Never a status twice, never by another replica.
    let writes = "wavegate_gate_status_writes_total";
    let mut leaders = Vec::new();
    let mut written_before = 0.0;
    let mut written_by_others = 0.0;
    for r in &replicas {
        let written = r.metric(writes).await.unwrap_or(0.0);
        if r.metric("wavegate_leader").await == Some(1.0) {
            leaders.push(r.identity.clone());
        } else {
            written_by_others += written;
        }
        written_before += written;
    }
    assert_eq!(
        leaders,
        std::slice::from_ref(&first),
        "one leader, the Lease holder"
    );
    assert_eq!(written_by_others, 0.0, "only the leader writes");
    assert!(
        (2.0..=3.0).contains(&written_before),
        "Progressing once, Healthy once (and at most the intermediate state), by one replica: \
         {written_before} writes"
    );

    // Readers keep asking the two others throughout the takeover.
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let readers: Vec<_> = replicas
        .iter()
        .filter(|r| r.identity != first)
        .map(|r| {
            let url = format!("{}/api/v1/health/services/{ns}/web", r.url);
            let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match reqwest::get(&url).await {
                        Ok(resp) if resp.status().is_success() => {
                            answered.fetch_add(1, Ordering::Relaxed)
                        }
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .collect();

    let leader_at = replicas.iter().position(|r| r.identity == first).unwrap();
    let mut dead = replicas.remove(leader_at);
    dead.child.kill().unwrap(); // SIGKILL: no release of the lease
    dead.child.wait().unwrap();
    let killed = Instant::now();
    set_pod_ready(&admin, &ns, "web", "10.244.9.1", false).await;
    gate_becomes(
        &admin,
        &ns,
        "Progressing",
        TAKEOVER_LIMIT + Duration::from_secs(5),
    )
    .await;
    let takeover = killed.elapsed();
    let second = lease_holder(&admin, &ns).await.unwrap_or_default();
    println!("leader {first} killed; {second} wrote the next change after {takeover:?}");
    assert_ne!(second, first, "the Lease moved to a live replica");
    assert!(
        takeover <= TAKEOVER_LIMIT,
        "a new leader wrote after {takeover:?}, more than {TAKEOVER_LIMIT:?}"
    );

    // Settle, then count: one more write (the change after the kill), none twice, none lost.
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    let mut written_after = 0.0;
    let mut leading = 0;
    for r in &replicas {
        written_after += r.metric(writes).await.unwrap_or(0.0);
        leading += usize::from(r.metric("wavegate_leader").await == Some(1.0));
    }
    assert_eq!(leading, 1, "one leader among the survivors");
    assert_eq!(
        written_after, 1.0,
        "the change after the kill, written once"
    );
    assert_eq!(
        gate_status(&admin, &ns).await.as_deref(),
        Some("Progressing")
    );
    let (answered, failed) = (
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    println!("reads during the takeover: {answered} answered, {failed} failed");
    assert!(answered >= 20, "reads kept being answered: {answered}");
    assert_eq!(failed, 0, "no read failed during the takeover");

    // A clean stop (SIGTERM, as the kubelet sends): the leader exits promptly, having stopped
    // its writers and released the lease; the last replica writes the next change.
    let at = replicas.iter().position(|r| r.identity == second).unwrap();
    let mut stopped = replicas.remove(at);
    let pid = stopped.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let terminated = Instant::now();
    while stopped.child.try_wait().unwrap().is_none() {
        assert!(
            terminated.elapsed() < Duration::from_secs(10),
            "SIGTERM ignored"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let exited = terminated.elapsed();
    set_pod_ready(&admin, &ns, "web", "10.244.9.1", true).await;
    gate_becomes(
        &admin,
        &ns,
        "Healthy",
        TAKEOVER_LIMIT + Duration::from_secs(5),
    )
    .await;
    let takeover = terminated.elapsed();
    let third = lease_holder(&admin, &ns).await.unwrap_or_default();
    println!("leader {second} stopped by SIGTERM in {exited:?}; {third} wrote after {takeover:?}");
    assert_eq!(
        third, replicas[0].identity,
        "the last replica holds the lease"
    );
    assert!(
        takeover <= TAKEOVER_LIMIT,
        "takeover after SIGTERM took {takeover:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        replicas[0].metric(writes).await,
        Some(1.0),
        "the change after the stop, written once by the last replica"
    );
}
