//! Reads served by every replica under `serve --shard-like-argocd`, on real control planes: Argo
//! CD's proxy reaches one Service balanced over all replicas, so a poll about a cluster lands
//! on a replica that does not judge it as often as not. Two replicas (`--shard-replicas 2`):
//! r0 judges home (`in-cluster`), r1 a private control plane `a` (its Secret's `shard: "1"`),
//! where a WaveGate waits on a Service whose pod is not ready. Each knows the other's address
//! by pod name (`--peer r0=…,r1=…`, the loopback stand-in for `--peer-url`).
//!
//! Proven: r0 lists `a` as judged by pod r1; r0 asked about a gate of `a`, or the waves view of
//! an Application deployed to `a`, answers what r1 answers, with `Wavegate-Judged-By: r1`, and a poll holding that answer's
//! ETag gets 304 through r0, and so do the proxy's waves view and a gate wait (its 408); a
//! request already forwarded once is answered 421 by r0, never
//! forwarded again. Then `a` moves to shard 0 (its Secret edited): r1 forwards to r0, r0 counts
//! it gained and times its warming, r1 counts it lost. Once r0 is killed, r1 answers 502
//! naming it (its Lease still live) and then 421 (its Lease expired) — never a verdict of its
//! own.

use crate::cluster;
use crate::clusters::{Serve, cluster_secret, gate, prepared};
use crate::private_control_plane::PrivateControlPlane;

use cluster::{apply, eventually, pod, service, set_pod_ready};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(40);
/// The replicas' Lease duration: how long a killed owner's Lease still names it.
const LEASE: Duration = Duration::from_secs(10);

fn replica(ns: &str, shard: u32, label: &str, port: u16, peers: &str) -> Serve {
    let (shard, lease) = (shard.to_string(), format!("{}s", LEASE.as_secs()));
    let args = [
        "--shard-like-argocd",
        "--shard-replicas",
        "2",
        "--shard",
        &shard,
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
        "--leader-elect-namespace",
        ns,
        "--leader-elect-identity",
        label,
        "--leader-elect-duration",
        &lease,
        "--peer",
        peers,
        "--peer-timeout",
        "3s",
    ];
    Serve::start_at(&format!("shard-reads-{label}"), port, &args)
}

/// Status, the headers wavegate sets, and the body of `GET path` with `headers`.
async fn ask(
    serve: &Serve,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, Value, String), String> {
    let mut req = reqwest::Client::new().get(format!("{}{path}", serve.url));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let h = |k: &str| {
        r.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let seen = json!({"judgedBy": h("wavegate-judged-by"), "etag": h("etag"),
                      "now": h("wavegate-now")});
    Ok((status, seen, r.text().await.map_err(|e| e.to_string())?))
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn a_read_about_another_replicas_cluster_is_answered_by_that_replica_through_any() {
    let home = cluster::client().await;
    let ns = cluster::namespace(&home, "shard-reads").await;
    let cp_a = PrivateControlPlane::up("shard-reads-a");
    let a = cp_a.admin().await;
    let (server, config, _) = prepared(&cp_a);
    cp_a.kubectl(&["create", "namespace", &ns]);
    let mut secret = cluster_secret(&ns, "cluster-a", "a", &server, config);
    secret["stringData"]["shard"] = json!("1");
    apply(&home, secret).await;
    service(&a, &ns, "web", "web").await;
    pod(&a, &ns, "web-0", json!({"app": "web"})).await;
    set_pod_ready(&a, &ns, "web-0", "10.97.1.1", false).await;
    apply(&a, gate(&ns, "web-up", "web")).await;
    // An Application deployed to `a`, as Argo CD records it: the Service, then the gate.
    apply(
        &home,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": "shop", "namespace": ns},
               "spec": {"project": "default", "destination": {"name": "a", "namespace": ns},
                        "source": {"repoURL": "https://git.example.com/x.git", "path": "x"}},
               "status": {"resources": [
                   {"group": "", "version": "v1", "kind": "Service", "namespace": ns,
                    "name": "web", "status": "Synced", "syncWave": 0},
                   {"group": "wavegate.dev", "version": "v1alpha1", "kind": "WaveGate",
                    "namespace": ns, "name": "web-up", "status": "Synced", "syncWave": 1}]}}),
    )
    .await;

    // Never the same port twice, and below the ephemeral range.
    let [p0, p1] = [0, 1].map(|_| crate::private_control_plane::free_port(false));
    let peers = format!("r0=http://127.0.0.1:{p0},r1=http://127.0.0.1:{p1}");
    let r0 = replica(&ns, 0, "r0", p0, &peers);
    let r1 = replica(&ns, 1, "r1", p1, &peers);

    let gate_a = format!("/api/v1/clusters/a/gates/{ns}/web-up");
    let direct = eventually(WAIT, "r1 judges a's gate", || async {
        let (status, seen, body) = ask(&r1, &gate_a, &[]).await?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        match (status, v["health"]["status"].as_str()) {
            (200, Some("Progressing")) if seen["judgedBy"] == "r1" => Ok(v),
            _ => Err(format!("{status} {seen} {body}")),
        }
    })
    .await;
    // r0 learns who holds shard 1's Lease at its next read of the Secrets.
    let through_r0 = eventually(WAIT, "r0 answers with r1's answer", || async {
        let (status, seen, body) = ask(&r0, &gate_a, &[]).await?;
        if status != 200 {
            return Err(format!("{status} {seen} {body}"));
        }
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        Ok((seen, v))
    })
    .await;
    assert_eq!(through_r0.0["judgedBy"], "r1", "{through_r0:?}");
    assert_eq!(through_r0.1["health"], direct["health"], "{through_r0:?}");

    // What the hop costs: the same read, 20 times each way (debug build, loopback).
    let mut took = BTreeMap::new();
    for (via, serve) in [("r1 directly", &r1), ("r0, forwarded", &r0)] {
        let mut times = Vec::new();
        for _ in 0..20 {
            let started = std::time::Instant::now();
            let (status, _, _) = ask(serve, &gate_a, &[]).await.unwrap();
            assert_eq!(status, 200);
            times.push(started.elapsed());
        }
        times.sort();
        took.insert(via, (times[10], times[18]));
    }
    println!("a's gate read, (p50, p95): {took:?}");

    // The cluster list names the replica judging `a` by its pod.
    let (_, listed) = r0.json("/api/v1/clusters").await.unwrap();
    let elsewhere = &listed["shard"]["elsewhere"][0];
    assert_eq!(
        (&elsewhere["name"], &elsewhere["holder"]),
        (&json!("a"), &json!("r1")),
        "{listed}"
    );

    // The Application list names r1 for the Application deployed to `a`, not judged by r0
    // into a wall of Unknown.
    let (_, apps) = r0.json("/api/v1/applications").await.unwrap();
    let shop = apps["applications"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["name"] == "shop" && a["namespace"] == ns.as_str())
        .unwrap_or_else(|| panic!("shop is not listed: {apps}"));
    assert_eq!(shop["judgedBy"], "r1", "{shop}");
    assert_eq!(shop["health"]["status"], "Unknown", "{shop}");
    assert!(
        shop["health"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not judged by this wavegate replica")),
        "{shop}"
    );
    let (_, apps) = r1.json("/api/v1/applications").await.unwrap();
    assert!(
        !apps.to_string().contains("judgedBy"),
        "r1 judges shop itself: {apps}"
    );

    // The waves view of an Application deployed to `a`: r1's, not one with every resource
    // Unknown for being judged elsewhere; a poll holding it gets 304 through r0 as well.
    let view = format!("/api/v1/applications/{ns}/shop/waves");
    let (status, seen, body) = ask(&r0, &view, &[]).await.unwrap();
    assert_eq!((status, &seen["judgedBy"]), (200, &json!("r1")), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let judged: Vec<String> = v["waves"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["resources"].as_array().cloned().unwrap_or_default())
        .map(|r| format!("{} {}", r["status"], r["message"]))
        .collect();
    assert_eq!(judged.len(), 2, "{v}");
    assert!(
        judged
            .iter()
            .all(|r| !r.contains("judged by wavegate replica")),
        "{judged:?}"
    );
    let etag = seen["etag"].as_str().expect("an ETag").to_string();
    let (status, seen, _) = ask(&r0, &view, &[("If-None-Match", &etag)]).await.unwrap();
    assert_eq!(status, 304, "{seen}");
    assert_eq!(seen["judgedBy"], "r1");
    assert!(seen["now"].is_string(), "{seen}");
    // The views of a dashboard page in one answer (`api::batch`) are never forwarded: r0 answers
    // shop as a 421 part, for the page to ask its own endpoint (forwarded, as above); r1, which
    // judges it, answers the view whose ETag r0 passed on.
    let batch = format!("/api/v1/applications/waves?app={ns}/shop");
    let part = |body: &str| serde_json::from_str::<Value>(body).unwrap()["applications"][0].clone();
    let (status, _, body) = ask(&r0, &batch, &[]).await.unwrap();
    let far = part(&body);
    assert_eq!(
        (status, &far["status"], far.get("waves")),
        (200, &json!(421), None),
        "{body}"
    );
    assert!(
        far["error"].as_str().is_some_and(|e| e.contains("shard")),
        "{body}"
    );
    let (status, _, body) = ask(&r1, &batch, &[]).await.unwrap();
    let near = part(&body);
    assert_eq!(
        (status, &near["status"], &near["etag"]),
        (200, &json!(200), &json!(etag)),
        "{body}"
    );

    // Through Argo CD's proxy (its headers passed on, the scope checked again by r1), and a
    // gate wait, a read that ends when its own timeout does (408, the gate as it stands).
    let (status, seen, body) = ask(
        &r0,
        "/api/v1/waves",
        &[
            ("Argocd-Application-Name", &format!("{ns}:shop")),
            ("Argocd-Project-Name", "default"),
        ],
    )
    .await
    .unwrap();
    assert_eq!((status, &seen["judgedBy"]), (200, &json!("r1")), "{body}");
    let waited = std::time::Instant::now();
    let (status, seen, body) = ask(&r0, &format!("{gate_a}/wait?timeout=2s"), &[])
        .await
        .unwrap();
    assert_eq!((status, &seen["judgedBy"]), (408, &json!("r1")), "{body}");
    assert!(
        waited.elapsed() >= Duration::from_secs(2),
        "{:?}",
        waited.elapsed()
    );

    // One hop: r0 never forwards what another replica forwarded to it.
    let (status, _, body) = ask(&r0, &gate_a, &[("Wavegate-Forwarded-By", "r9")])
        .await
        .unwrap();
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("never forwarded twice"), "{body}");

    // `a` moves to shard 0 (its Secret edited): r0 judges it once its watches sync, and now r1
    // forwards to r0. r0 counts it gained and times its warming; r1 counts it lost.
    let secrets: kube::api::Api<k8s_openapi::api::core::v1::Secret> =
        kube::api::Api::namespaced(home.clone(), &ns);
    let patch = json!({"stringData": {"shard": "0"}});
    secrets
        .patch(
            "cluster-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let moved = std::time::Instant::now();
    eventually(WAIT, "r1 forwards a's reads to r0", || async {
        let (status, seen, body) = ask(&r1, &gate_a, &[]).await?;
        if status == 200 && seen["judgedBy"] == "r0" {
            Ok(())
        } else {
            Err(format!("{status} {seen} {body}"))
        }
    })
    .await;
    println!(
        "a moved to shard 0; r1's read of it answered by r0 after {:?}",
        moved.elapsed()
    );
    let warm = eventually(WAIT, "r0 times a's warming", || async {
        match metric(&r0, "wavegate_shard_warm_seconds_count").await {
            Some(n) if n >= 1.0 => Ok(metric(&r0, "wavegate_shard_warm_seconds_sum").await),
            n => Err(format!("{n:?}")),
        }
    })
    .await;
    println!("r0 warmed a in {warm:?} s after the read that gained it");
    assert_eq!(
        metric(&r0, "wavegate_shard_clusters_gained_total").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&r1, "wavegate_shard_clusters_lost_total").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&r1, "wavegate_shard_clusters_owned").await,
        Some(0.0)
    );
    for r in [&r0, &r1] {
        let watches = metric(r, "wavegate_watches").await;
        assert!(watches.is_some_and(|n| n >= 1.0), "{watches:?}");
    }

    // r0 dies: r1 says so (502 while the Lease still names r0), then 421 once it has expired;
    // never an answer of its own.
    let (_, metrics) = r0.get("/metrics").await.unwrap();
    let forwarded = metrics
        .lines()
        .find_map(|l| l.strip_prefix("wavegate_forwards_total{outcome=\"forwarded\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(forwarded.is_some_and(|n| n >= 3.0), "{forwarded:?}");
    // r1's Application list names r0 for shop now; kept, it must not outlive r0's Lease.
    let judged_by = |apps: &Value| {
        apps["applications"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["name"] == "shop" && a["namespace"] == ns.as_str())
            .map(|a| a["judgedBy"].clone())
    };
    let (_, apps) = r1.json("/api/v1/applications").await.unwrap();
    assert_eq!(judged_by(&apps), Some(json!("r0")), "{apps}");
    let mut r0 = r0;
    r0.kill();
    let (status, _, body) = ask(&r1, &gate_a, &[]).await.unwrap();
    assert!(status == 502 || status == 421, "{status} {body}");
    if status == 502 {
        assert!(body.contains("pod r0"), "{body}");
    }
    eventually(LEASE + WAIT, "r1 knows no holder of shard 0", || async {
        let (status, _, body) = ask(&r1, &gate_a, &[]).await?;
        match status {
            421 if body.contains("no live holder") => Ok(()),
            502 | 421 => Err(format!("{status} {body}")),
            _ => panic!("r1 answered {status} for a cluster nobody judges: {body}"),
        }
    })
    .await;
    // Nothing in the namespace changed, but the list no longer names the dead holder.
    let (_, apps) = r1.json("/api/v1/applications").await.unwrap();
    assert_eq!(judged_by(&apps), Some(Value::Null), "{apps}");
}

/// A metric of `serve` without labels.
async fn metric(serve: &Serve, name: &str) -> Option<f64> {
    let (_, text) = serve.get("/metrics").await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
