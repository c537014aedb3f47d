//! Clusters shared across replicas the way Argo CD shards its application-controller, on real
//! control planes: home (the shared one, `in-cluster`, shard 0 by Argo CD's legacy rule) and
//! two private ones, `a` (its Secret's `shard: "1"`) and `b` (`shard: "2"`), each with a
//! WaveGate on a Service whose pod the test makes ready or not. Four `wavegate serve
//! --shard-like-argocd --shard-replicas 3` processes: one per shard, and a second one for shard
//! 2 (two replicas that both believe they are shard 2, as a StatefulSet's replacement pod and a
//! frozen old one would).
//!
//! Proven, with every status write counted per replica and per cluster: each gate is written
//! only by its shard's Lease holder; another replica asked about a cluster answers 421 naming
//! the replica that judges it; after SIGKILL, shard 1's successor (a new process with the same
//! number, as the StatefulSet restarts it) and shard 2's standby write the next change within
//! the bound; a Secret whose shard changes at runtime moves its gate to the new replica and the
//! old one stops; a frozen Lease holder is replaced by a standby and, woken, writes nothing;
//! `skip-reconcile` stops every writer of its cluster and, removed, brings its
//! replica back; a replica counting 4 replicas (a StatefulSet scaling) stops every replica's
//! writes until it is gone; an unsharded leader beside them makes every one stand back, itself
//! included; a shard whose only replica died is counted without a holder. No gate is ever
//! written by two replicas. A second test runs one replica with the RBAC of
//! deploy/overlays/shards on a private control plane.
//!
//! Private control planes cost ~300 MiB and a few seconds of CPU each on this 2-core machine,
//! so there are two, not six: what is proven per cluster needs one cluster per shard.

use crate::cluster;
use crate::clusters::{Serve, cluster_secret, gate, gates, prepared};
use crate::private_control_plane::PrivateControlPlane;

use cluster::{apply, eventually, pod, service, set_pod_ready};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The Lease duration of every replica.
const LEASE: Duration = Duration::from_secs(10);
/// A successor writes within the Lease, the handover of a gained cluster (2 × the 1 s resync
/// of the Secrets + 2 s) and a cache sync, after its predecessor's death.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(40);

/// One replica process and the shard it was started as.
pub(crate) struct Replica {
    pub(crate) serve: Serve,
    pub(crate) label: String,
}

impl Replica {
    fn start(ns: &str, shard: u32, label: &str) -> Replica {
        Replica::start_counting(ns, shard, 3, label)
    }

    /// A replica that believes there are `replicas` of them.
    fn start_counting(ns: &str, shard: u32, replicas: u32, label: &str) -> Replica {
        Replica::start_reading(ns, shard, replicas, "1s", label)
    }

    /// A replica that reads the cluster Secrets every `resync`: its assignment counts for two
    /// of them, and a cluster it gains waits two of them and 2 s before its first write.
    pub(crate) fn start_reading(
        ns: &str,
        shard: u32,
        replicas: u32,
        resync: &str,
        label: &str,
    ) -> Replica {
        let (shard, lease) = (shard.to_string(), format!("{}s", LEASE.as_secs()));
        let replicas = replicas.to_string();
        let args = [
            "--shard-like-argocd",
            "--shard-replicas",
            &replicas,
            "--shard",
            &shard,
            "--clusters-from",
            "argocd-secrets",
            "--clusters-namespace",
            ns,
            "--clusters-resync",
            resync,
            "--argocd-namespace",
            ns,
            "--namespaces",
            ns,
            "--leader-elect-namespace",
            ns,
            "--leader-elect-identity",
            label,
            "--leader-elect-duration",
            &lease,
        ];
        Replica {
            serve: Serve::start(&format!("shards-{label}"), &args),
            label: label.to_string(),
        }
    }

    /// An unsharded leader (`--leader-elect` on the plain Lease `wavegate`) of every cluster,
    /// as a Deployment left beside the shards' StatefulSet runs.
    fn unsharded(ns: &str, label: &str) -> Replica {
        let lease = format!("{}s", LEASE.as_secs());
        let args = [
            "--clusters-from",
            "argocd-secrets",
            "--clusters-namespace",
            ns,
            "--clusters-resync",
            "1s",
            "--argocd-namespace",
            ns,
            "--namespaces",
            ns,
            "--leader-elect",
            "--leader-elect-namespace",
            ns,
            "--leader-elect-identity",
            label,
            "--leader-elect-duration",
            &lease,
        ];
        Replica {
            serve: Serve::start(&format!("shards-{label}"), &args),
            label: label.to_string(),
        }
    }

    /// Status writes of this replica, by cluster.
    pub(crate) async fn writes(&self) -> BTreeMap<String, f64> {
        // A failed scrape read as "no writes" would pass for a replica that wrote nothing.
        let what = format!("{}'s metrics", self.label);
        let text = eventually(Duration::from_secs(10), &what, || async {
            match self.serve.get("/metrics").await? {
                (200, text) => Ok(text),
                (status, body) => Err(format!("{status} {body}")),
            }
        })
        .await;
        let prefix = "wavegate_cluster_gate_status_writes_total{cluster=\"";
        text.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(prefix)?;
                let (cluster, value) = rest.split_once("\"} ")?;
                Some((cluster.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }

    /// SIGTERM, as the kubelet stops a pod: the Lease is released.
    async fn terminate(&mut self) {
        self.serve.terminate().await;
    }

    pub(crate) async fn metric(&self, name: &str) -> Option<f64> {
        let (_, text) = self.serve.get("/metrics").await.ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }
}

/// Every replica's writes, by replica label and cluster.
pub(crate) async fn all(replicas: &[Replica]) -> BTreeMap<(String, String), f64> {
    let mut all = BTreeMap::new();
    for r in replicas {
        for (cluster, n) in r.writes().await {
            all.insert((r.label.clone(), cluster), n);
        }
    }
    all
}

/// Which replicas wrote for `cluster` between `before` and `after`.
pub(crate) fn writers_of(
    cluster: &str,
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
) -> Vec<String> {
    after
        .iter()
        .filter(|((r, c), n)| {
            c == cluster && **n > before.get(&(r.clone(), c.clone())).copied().unwrap_or(0.0)
        })
        .map(|((r, _), _)| r.clone())
        .collect()
}

pub(crate) async fn gate_health(client: &kube::Client, ns: &str) -> String {
    match gates(client, ns).get("web-up").await {
        Ok(g) => g.data["status"]["health"]["status"]
            .as_str()
            .unwrap_or("none")
            .to_string(),
        Err(e) => e.to_string(),
    }
}

async fn gate_becomes(client: &kube::Client, ns: &str, want: &str, within: Duration, what: &str) {
    eventually(within, what, || async {
        let got = gate_health(client, ns).await;
        if got == want { Ok(()) } else { Err(got) }
    })
    .await
}

pub(crate) async fn lease_holder(home: &kube::Client, ns: &str, shard: u32) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(home.clone(), ns);
    let lease = leases
        .get_opt(&format!("wavegate-shard-{shard}"))
        .await
        .ok()??;
    lease.spec?.holder_identity
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn each_replica_writes_only_its_shards_clusters_and_a_successor_takes_over() {
    let home = cluster::client().await;
    let ns = cluster::namespace(&home, "shards").await;
    let (cp_a, cp_b) = (
        PrivateControlPlane::up("shards-a"),
        PrivateControlPlane::up("shards-b"),
    );
    let (a, b) = (cp_a.admin().await, cp_b.admin().await);
    let secrets: Api<Secret> = Api::namespaced(home.clone(), &ns);
    for (name, cp, shard) in [("a", &cp_a, "1"), ("b", &cp_b, "2")] {
        let (server, config, _) = prepared(cp);
        cp.kubectl(&["create", "namespace", &ns]);
        let mut secret = cluster_secret(&ns, &format!("cluster-{name}"), name, &server, config);
        secret["stringData"]["shard"] = json!(shard);
        apply(&home, secret).await;
    }
    // Every cluster: a Service whose pod is not ready, and a gate on it.
    let clusters = [("in-cluster", &home), ("a", &a), ("b", &b)];
    for (i, (_, client)) in clusters.iter().enumerate() {
        service(client, &ns, "web", "web").await;
        pod(client, &ns, "web-0", json!({"app": "web"})).await;
        set_pod_ready(client, &ns, "web-0", &format!("10.98.{i}.1"), false).await;
        apply(client, gate(&ns, "web-up", "web")).await;
    }
    let ready = |i: usize, client: &kube::Client, ready: bool| {
        let (client, ns) = (client.clone(), ns.clone());
        async move { set_pod_ready(&client, &ns, "web-0", &format!("10.98.{i}.1"), ready).await }
    };

    let mut replicas = vec![
        Replica::start(&ns, 0, "r0"),
        Replica::start(&ns, 1, "r1"),
        Replica::start(&ns, 2, "r2"),
        Replica::start(&ns, 2, "r2b"),
    ];
    for (name, client) in clusters {
        gate_becomes(
            client,
            &ns,
            "Progressing",
            WAIT,
            &format!("{name}'s gate judged"),
        )
        .await;
    }
    // Settled: every write so far was by the shard's replica, shard 2's by one of its two.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let by =
        |replicas: &[Replica], label: &str| replicas.iter().position(|r| r.label == label).unwrap();
    let none = BTreeMap::new();
    let start = all(&replicas).await;
    assert_eq!(writers_of("in-cluster", &none, &start), ["r0"], "{start:?}");
    assert_eq!(writers_of("a", &none, &start), ["r1"], "{start:?}");
    let b_writer = writers_of("b", &none, &start);
    assert_eq!(
        b_writer.len(),
        1,
        "shard 2 written by one replica: {start:?}"
    );
    let holder2 = lease_holder(&home, &ns, 2).await.unwrap();
    assert!(
        holder2.starts_with(&format!("{}_", b_writer[0])),
        "{holder2} holds shard 2, {b_writer:?} wrote"
    );
    for label in ["r0", "r1"] {
        let owned = replicas[by(&replicas, label)]
            .metric("wavegate_shard_clusters_owned")
            .await;
        assert_eq!(owned, Some(1.0), "{label}");
    }

    // Reads: replica 0 asked about a names replica 1; replica 1 answers; home reads anywhere.
    let (r0, r1) = (&replicas[0].serve, &replicas[1].serve);
    let gate_a = format!("/api/v1/clusters/a/gates/{ns}/web-up");
    let (status, body) = r0.get(&gate_a).await.unwrap();
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("judged by wavegate replica 1"), "{body}");
    let (status, body) = r1.get(&gate_a).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = r1.get(&format!("/api/v1/gates/{ns}/web-up")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (_, listed) = r0.json("/api/v1/clusters").await.unwrap();
    assert_eq!(listed["shard"]["replica"], 0, "{listed}");
    let elsewhere = listed["shard"]["elsewhere"].to_string();
    assert!(
        elsewhere.contains("\"shard\":1") && elsewhere.contains("\"shard\":2"),
        "{elsewhere}"
    );

    // SIGKILL shard 1's replica and shard 2's Lease holder, then change both clusters. Shard 1
    // comes back as a new process with the same number (what a StatefulSet does); shard 2's
    // standby takes over.
    let before_kill = all(&replicas).await;
    let b_holder = b_writer[0].clone();
    let mut dead = vec![replicas.remove(by(&replicas, "r1"))];
    dead.push(replicas.remove(by(&replicas, &b_holder)));
    for d in &mut dead {
        d.serve.kill();
    }
    let killed = Instant::now();
    ready(1, &a, true).await;
    ready(2, &b, true).await;
    replicas.push(Replica::start(&ns, 1, "r1-new"));
    let mut took = BTreeMap::new();
    for (name, client) in [("a", &a), ("b", &b)] {
        gate_becomes(
            client,
            &ns,
            "Healthy",
            TAKEOVER_LIMIT + Duration::from_secs(10),
            &format!("{name} taken over"),
        )
        .await;
        took.insert(name, killed.elapsed());
    }
    println!("death to the successor's first write: {took:?}");
    for (name, t) in &took {
        assert!(*t <= TAKEOVER_LIMIT, "{name} taken over after {t:?}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_kill = all(&replicas).await;
    let standby = if b_holder == "r2" { "r2b" } else { "r2" };
    assert_eq!(
        writers_of("a", &before_kill, &after_kill),
        ["r1-new"],
        "{after_kill:?}"
    );
    assert_eq!(
        writers_of("b", &before_kill, &after_kill),
        [standby],
        "{after_kill:?}"
    );
    assert_eq!(
        writers_of("in-cluster", &before_kill, &after_kill),
        Vec::<String>::new()
    );
    let holder1 = lease_holder(&home, &ns, 1).await.unwrap();
    assert!(holder1.starts_with("r1-new_"), "{holder1}");

    // A frozen Lease holder (SIGSTOP: a stalled node) keeps its Lease until it expires; a new
    // standby for shard 2 then takes it and writes b's change. Woken (SIGCONT), the old
    // holder finds its Lease gone and writes nothing, whatever it had ready.
    replicas.push(Replica::start(&ns, 2, "r2c"));
    let before_freeze = all(&replicas).await;
    let frozen = by(&replicas, standby);
    replicas[frozen].serve.signal("STOP");
    let froze = Instant::now();
    ready(2, &b, false).await;
    gate_becomes(
        &b,
        &ns,
        "Progressing",
        TAKEOVER_LIMIT + Duration::from_secs(10),
        "b taken over from a frozen holder",
    )
    .await;
    println!(
        "shard 2's holder frozen; the new standby wrote b after {:?}",
        froze.elapsed()
    );
    replicas[frozen].serve.signal("CONT");
    ready(2, &b, true).await;
    gate_becomes(&b, &ns, "Healthy", WAIT, "b's next change").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let thawed = all(&replicas).await;
    assert_eq!(
        writers_of("b", &before_freeze, &thawed),
        ["r2c"],
        "{thawed:?}"
    );
    let holder2 = lease_holder(&home, &ns, 2).await.unwrap();
    assert!(holder2.starts_with("r2c_"), "{holder2}");

    // shard 2 stops; the next change of b is written by replica 0 alone.
    let before_move = all(&replicas).await;
    let patch = json!({"stringData": {"shard": "0"}});
    secrets
        .patch("cluster-b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let moved = Instant::now();
    // Until r2c has read the Secrets again it still judges b (its assignment is fresh), and
    // may write a change made meanwhile: the change below waits for both to have seen the move.
    eventually(WAIT, "replica 0 judges b and r2c no longer", || async {
        let path = format!("/api/v1/clusters/b/gates/{ns}/web-up");
        let (status, body) = replicas[0].serve.get(&path).await?;
        let (old, _) = replicas[by(&replicas, "r2c")].serve.get(&path).await?;
        if status == 200 && old == 421 {
            Ok(())
        } else {
            Err(format!("r0 {status} {body}; r2c {old}"))
        }
    })
    .await;
    ready(2, &b, false).await;
    gate_becomes(&b, &ns, "Progressing", WAIT, "b's change after the move").await;
    println!(
        "b moved to shard 0; its next change written {:?} after the Secret changed",
        moved.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_move = all(&replicas).await;
    assert_eq!(
        writers_of("b", &before_move, &after_move),
        ["r0"],
        "{after_move:?}"
    );
    let moves = replicas[0]
        .metric("wavegate_shard_moves_total")
        .await
        .unwrap_or(0.0);
    assert!(moves >= 1.0, "replica 0 counted the move: {moves}");
    let (status, body) = replicas[by(&replicas, standby)]
        .serve
        .get(&format!("/api/v1/clusters/b/gates/{ns}/web-up"))
        .await
        .unwrap();
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("replica 0"), "{body}");

    // skip-reconcile pauses a: nobody writes it, every replica counts it unowned; removed, its
    // replica judges it again (after a handover) and writes the change made meanwhile.
    let pause = |on: bool| {
        let secrets = secrets.clone();
        async move {
            let patch = json!({"metadata": {"annotations": {
                "argocd.argoproj.io/skip-reconcile": if on { "true" } else { "false" }}}});
            secrets
                .patch("cluster-a", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    pause(true).await;
    eventually(WAIT, "a unowned everywhere", || async {
        for r in &replicas {
            if r.metric("wavegate_shard_clusters_unowned").await != Some(1.0) {
                return Err(format!("{} does not count it yet", r.label));
            }
        }
        Ok(())
    })
    .await;
    let before_pause = all(&replicas).await;
    ready(1, &a, false).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        gate_health(&a, &ns).await,
        "Healthy",
        "nobody judges a paused cluster"
    );
    let paused = all(&replicas).await;
    assert_eq!(
        writers_of("a", &before_pause, &paused),
        Vec::<String>::new()
    );
    let (status, body) = replicas[by(&replicas, "r1-new")]
        .serve
        .get(&gate_a)
        .await
        .unwrap();
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("paused"), "{body}");
    pause(false).await;
    gate_becomes(&a, &ns, "Progressing", WAIT, "a judged again once resumed").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let resumed = all(&replicas).await;
    assert_eq!(
        writers_of("a", &paused, &resumed),
        ["r1-new"],
        "{resumed:?}"
    );

    // A replica that counts 4 replicas (a StatefulSet scaling up, its new pod started before
    // the others restarted) takes the free shard 3: every replica sees a live Lease holder
    // sharding by another count and judges nothing, so a change is written by nobody; once it
    // stops (SIGTERM releases its Lease), home's replica writes it after a handover.
    let mut r3 = Replica::start_counting(&ns, 3, 4, "r3-of-4");
    eventually(WAIT, "every replica stops judging", || async {
        for r in replicas.iter().chain([&r3]) {
            if r.metric("wavegate_shard_disagreement").await != Some(1.0) {
                return Err(format!("{} still judges", r.label));
            }
        }
        Ok(())
    })
    .await;
    let before_scale = all(&replicas).await;
    ready(0, &home, true).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        gate_health(&home, &ns).await,
        "Progressing",
        "nobody writes while replicas disagree"
    );
    let during = all(&replicas).await;
    assert_eq!(
        writers_of("in-cluster", &before_scale, &during),
        Vec::<String>::new()
    );
    assert_eq!(
        r3.writes().await.values().sum::<f64>(),
        0.0,
        "the new replica wrote"
    );
    r3.terminate().await;
    let stopped = Instant::now();
    gate_becomes(
        &home,
        &ns,
        "Healthy",
        WAIT,
        "home written once the replicas agree",
    )
    .await;
    println!(
        "replicas agreed again; home's change written {:?} after the odd one stopped",
        stopped.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let agreed = all(&replicas).await;
    assert_eq!(
        writers_of("in-cluster", &during, &agreed),
        ["r0"],
        "{agreed:?}"
    );

    // An unsharded leader left beside the shards (a Deployment not yet deleted while moving to
    // the StatefulSet) holds the plain Lease `wavegate`, which no shard's election keeps it
    // from: the shards stand back while it is live, and its fence refuses every write while a
    // shard's Lease is live, so a change is written by nobody. Stopped (SIGTERM releases its
    // Lease), the shards write again after their handover.
    let mut plain = Replica::unsharded(&ns, "plain");
    eventually(WAIT, "the shards stand back", || async {
        for r in &replicas {
            if r.metric("wavegate_shard_disagreement").await != Some(1.0) {
                return Err(format!("{} still judges", r.label));
            }
        }
        Ok(())
    })
    .await;
    let before_plain = all(&replicas).await;
    ready(0, &home, false).await;
    eventually(WAIT, "the unsharded leader stands back", || async {
        match plain.metric("wavegate_shard_disagreement").await {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        gate_health(&home, &ns).await,
        "Healthy",
        "nobody writes while both modes hold Leases"
    );
    let beside = all(&replicas).await;
    assert_eq!(
        writers_of("in-cluster", &before_plain, &beside),
        Vec::<String>::new()
    );
    assert_eq!(
        plain.writes().await.values().sum::<f64>(),
        0.0,
        "the unsharded leader wrote beside the shards"
    );
    plain.terminate().await;
    let plain_stopped = Instant::now();
    gate_becomes(
        &home,
        &ns,
        "Progressing",
        WAIT,
        "home written once the unsharded leader stopped",
    )
    .await;
    println!(
        "the unsharded leader stopped; home's change written {:?} later",
        plain_stopped.elapsed()
    );
    let after_plain = all(&replicas).await;
    assert_eq!(
        writers_of("in-cluster", &beside, &after_plain),
        ["r0"],
        "{after_plain:?}"
    );

    // Shard 1's replica dies and nothing replaces it (a StatefulSet pod on a lost node): once
    // its Lease expires, every live replica counts that shard without a holder
    // (WavegateShardWithoutHolder), and their assignments stay fresh.
    let mut gone = replicas.remove(by(&replicas, "r1-new"));
    gone.serve.kill();
    let died = Instant::now();
    eventually(LEASE + WAIT, "shard 1 counted without a holder", || async {
        for r in &replicas {
            if r.metric("wavegate_shard_leases_unheld").await != Some(1.0) {
                return Err(format!("{} does not count it", r.label));
            }
        }
        Ok(())
    })
    .await;
    println!(
        "shard 1's replica killed; counted without a holder after {:?}",
        died.elapsed()
    );
    let age = replicas[0]
        .metric("wavegate_shard_assignment_age_seconds")
        .await
        .unwrap_or(f64::MAX);
    assert!(age < 3.0, "replica 0's assignment is {age} s old");

    // Over the whole run: no write was sent and then fenced away more than at the handovers.
    for r in &replicas {
        let fenced = r
            .metric("wavegate_writes_fenced_total")
            .await
            .unwrap_or(0.0);
        println!("{}: {fenced} writes fenced", r.label);
    }
}

/// deploy/overlays/shards as an installer applies it, on a private control plane, and one
/// replica (`wavegate-0` of 2) running with the wavegate ServiceAccount's token: the RBAC it
/// ships is all a shard's replica needs to read Argo CD's sharding inputs (cluster Secrets,
/// argocd-cmd-params-cm, argocd-cm), list the Leases, hold its own shard's Lease and write its
/// gates. (No kubelet runs the StatefulSet's pods here; the process plays its pod 0.)
#[tokio::test]
#[ignore = "needs the control plane's binaries (a private control plane)"]
async fn the_shards_overlays_rbac_lets_a_replica_hold_its_lease_and_write() {
    let cp = PrivateControlPlane::up("shards-rbac");
    let admin = cp.admin().await;
    let overlay = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/overlays/shards");
    cp.kubectl(&["create", "namespace", "argocd"]);
    cp.kubectl(&["apply", "--server-side", "-k", overlay.to_str().unwrap()]);
    cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/wavegates.wavegate.dev",
    ]);
    for (name, data) in [
        (
            "argocd-cmd-params-cm",
            json!({"controller.sharding.algorithm": "round-robin"}),
        ),
        ("argocd-cm", json!({})),
    ] {
        apply(
            &admin,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "argocd"}, "data": data}),
        )
        .await;
    }
    let token = cp.kubectl(&[
        "-n",
        "wavegate",
        "create",
        "token",
        "wavegate",
        "--duration=1h",
    ]);
    let kubeconfig = cp.kubeconfig_with_token("wavegate", token.trim());
    let ns = "shards-rbac";
    cp.kubectl(&["create", "namespace", ns]);
    service(&admin, ns, "web", "web").await;
    pod(&admin, ns, "web-0", json!({"app": "web"})).await;
    set_pod_ready(&admin, ns, "web-0", "10.98.9.1", false).await;
    apply(&admin, gate(ns, "web-up", "web")).await;

    // As the StatefulSet's pod wavegate-0 (its args and env, plus a fast resync).
    let replica = Replica {
        serve: Serve::start_as(
            "shards-rbac-0",
            Some(&kubeconfig),
            &[
                "--shard-like-argocd",
                "--shard-replicas",
                "2",
                "--clusters-from=argocd-secrets",
                "--clusters-namespace=argocd",
                "--clusters-resync=1s",
                "--argocd-namespace=argocd",
                "--leader-elect",
                "--leader-elect-namespace=wavegate",
                "--leader-elect-identity=wavegate-0",
                "--namespaces",
                ns,
            ],
        ),
        label: "wavegate-0".into(),
    };
    // Home (Argo CD's in-cluster destination, no Secret) is shard 0 under round-robin.
    gate_becomes(
        &admin,
        ns,
        "Progressing",
        WAIT,
        "home's gate written by shard 0",
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "wavegate");
    let held = leases.get("wavegate-shard-0").await.unwrap();
    let holder = held
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.starts_with("wavegate-0_"), "{holder}");
    let metric = |name: &'static str| {
        let r = &replica;
        async move { r.metric(name).await }
    };
    // Shard 1 has no replica here: counted, from the Leases this account may list.
    assert_eq!(metric("wavegate_shard_leases_unheld").await, Some(1.0));
    assert_eq!(metric("wavegate_shard_disagreement").await, Some(0.0));
    assert_eq!(metric("wavegate_writes_fenced_total").await, Some(0.0));
    let age = metric("wavegate_shard_assignment_age_seconds")
        .await
        .unwrap_or(f64::MAX);
    assert!(
        age < 3.0,
        "the assignment is {age} s old: a read is refused"
    );
}

/// Argo CD's dynamic cluster distribution: its controllers shard by their Deployment's
/// `spec.replicas` (argo-cd `controller/sharding/sharding.go`, `GetClusterSharding`), not by
/// `ARGOCD_CONTROLLER_REPLICAS`, and a replica started with that mode counts alike. One whose
/// Deployment is missing does not start: it could not know the count.
/// A cluster Secret whose server accepts connections and never answers (a decommissioned
/// cluster behind a firewall that drops): a read of the Secrets that asks its identity waits
/// 5 s, longer than an assignment counts at a 2 s resync (4 s). Asked at every read, every
/// assignment was stale on arrival and this replica never wrote any cluster's gates again;
/// asked once a minute (`IDENTITY_RETRY`), home's gate is written.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_cluster_that_never_answers_does_not_stop_the_other_clusters_writes() {
    let home = cluster::client().await;
    let ns = cluster::namespace(&home, "shards-silent").await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = format!("https://{}", silent.local_addr().unwrap());
    // Accepted and held open, never answered.
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    // Any CA will do (the handshake never completes): the shared control plane's.
    let kubeconfig = kube::config::Kubeconfig::read_from(std::env::var("KUBECONFIG").unwrap())
        .expect("the control plane's kubeconfig");
    let ca = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority_data.clone())
        .expect("a CA in the kubeconfig");
    let config = json!({"bearerToken": "unused", "tlsClientConfig": {"caData": ca.clone()}});
    let mut silent_secret = cluster_secret(&ns, "cluster-silent", "silent", &server, config);
    silent_secret["stringData"]["shard"] = json!("0");
    apply(&home, silent_secret).await;
    service(&home, &ns, "web", "web").await;
    pod(&home, &ns, "web-0", json!({"app": "web"})).await;
    set_pod_ready(&home, &ns, "web-0", "10.98.7.1", false).await;
    apply(&home, gate(&ns, "web-up", "web")).await;

    // Replica 0 of 2 (replica 1 never runs): home and `silent` are shard 0's.
    let replica = Replica::start_reading(&ns, 0, 2, "2s", "silent0");
    gate_becomes(&home, &ns, "Progressing", WAIT, "home's gate written").await;
    set_pod_ready(&home, &ns, "web-0", "10.98.7.1", true).await;
    gate_becomes(&home, &ns, "Healthy", WAIT, "home's gate written again").await;
    // A second silent Secret, of a shard this replica does not judge: its identity is asked
    // (two Secrets reaching one cluster must not get two writers), with the same retry.
    let silent_b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_b = format!("https://{}", silent_b.local_addr().unwrap());
    let held_b = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent_b.accept().await {
            open.push(socket);
        }
    });
    let config = json!({"bearerToken": "unused", "tlsClientConfig": {"caData": ca}});
    let mut elsewhere = cluster_secret(&ns, "cluster-silent-b", "silent-b", &server_b, config);
    elsewhere["stringData"]["shard"] = json!("1");
    apply(&home, elsewhere).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    set_pod_ready(&home, &ns, "web-0", "10.98.7.1", false).await;
    gate_becomes(
        &home,
        &ns,
        "Progressing",
        WAIT,
        "home's gate written beside both",
    )
    .await;
    // Both Secrets were taken (their identities unread), not refused for their form.
    let (_, listed) = replica.serve.json("/api/v1/clusters").await.unwrap();
    assert!(
        listed.to_string().contains(r#""name":"silent""#) && listed["refused"] == json!([]),
        "the silent cluster is listed: {listed}"
    );
    assert!(
        listed["shard"]["elsewhere"]
            .to_string()
            .contains("silent-b"),
        "silent-b is another shard's: {listed}"
    );
    held.abort();
    held_b.abort();
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn with_dynamic_distribution_the_replica_count_is_the_controller_deployments() {
    let home = cluster::client().await;
    let ns = cluster::namespace(&home, "shards-dynamic").await;
    apply(
        &home,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "argocd-application-controller", "namespace": ns},
               "spec": {"replicas": 3,
                        "selector": {"matchLabels": {"app": "controller"}},
                        "template": {"metadata": {"labels": {"app": "controller"}},
                                     "spec": {"containers": [{"name": "c", "image": "example.invalid/c:1"}]}}}}),
    )
    .await;
    let args = |controller: &'static str| {
        [
            "--shard-like-argocd",
            "--argocd-dynamic-distribution",
            "--argocd-controller-name",
            controller,
            "--shard",
            "1",
            "--clusters-from",
            "argocd-secrets",
            "--clusters-namespace",
            &ns,
            "--clusters-resync",
            "1s",
            "--argocd-namespace",
            &ns,
            "--namespaces",
            &ns,
            "--leader-elect-namespace",
            &ns,
            "--leader-elect-identity",
            "dyn",
        ]
        .map(str::to_string)
    };
    let started = args("argocd-application-controller");
    let mut serve = Serve::start(
        "shards-dynamic",
        &started.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let shard = eventually(WAIT, "the replica's shard", || async {
        match serve.json("/api/v1/clusters").await? {
            (200, v) if !v["shard"].is_null() => Ok(v["shard"].clone()),
            (status, v) => Err(format!("{status} {v}")),
        }
    })
    .await;
    assert_eq!(
        (&shard["replica"], &shard["replicas"]),
        (&json!(1), &json!(3)),
        "{shard}"
    );
    // Scaled, as an operator or an autoscaler does: the replica exits (non-zero) within about
    // a resync, to be restarted with the new count, instead of sharding by the old one.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(home.clone(), &ns);
    deployments
        .patch(
            "argocd-application-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let status = eventually(WAIT, "the replica exits after the scale", || {
        let exited = serve.exited();
        async move { exited.ok_or_else(|| "still running".to_string()) }
    })
    .await;
    assert_eq!(status.code(), Some(1), "{status:?}");

    let missing = args("no-such-controller");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(&missing)
        .env(
            "KUBECONFIG",
            std::env::var("KUBECONFIG").unwrap_or_default(),
        )
        .env_remove("ARGOCD_CONTROLLER_REPLICAS")
        .output()
        .expect("wavegate binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started without the Deployment: {stderr}"
    );
    assert!(
        stderr.contains("no-such-controller") && stderr.contains("--argocd-dynamic-distribution"),
        "{stderr}"
    );
}
