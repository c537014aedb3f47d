//! The cluster set follows its source at runtime, with a stand-in API server on loopback that
//! answers lists with nothing and holds watches open, so open watches can be counted.

use super::*;
use crate::cache::Cache;
use crate::evaluate::EvalConfig;
use crate::metrics::Metrics;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An API server stand-in: every GET without `watch=` gets an empty list, a POST (access review)
/// is allowed, a watch is answered and then held open. Counts the watches held open.
async fn standin() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let open = Arc::new(AtomicUsize::new(0));
    let counter = open.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let open = counter.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    while buf.len() < end + 4 + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..end + 4 + length);
                    let line = head.lines().next().unwrap_or("");
                    if line.starts_with("GET") && line.contains("watch=") {
                        let _ = socket
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                            .await;
                        open.fetch_add(1, Ordering::SeqCst);
                        // Held until the client goes away.
                        while !matches!(socket.read(&mut chunk).await, Ok(0) | Err(_)) {}
                        open.fetch_sub(1, Ordering::SeqCst);
                        return;
                    }
                    let body = if line.starts_with("POST") {
                        r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{},"status":{"allowed":true}}"#
                    } else {
                        r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"1"},"items":[]}"#
                    };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, open)
}

fn evaluator(client: kube::Client) -> Arc<Evaluator> {
    let metrics = Arc::new(Metrics::default());
    let cache = Cache::new(client, None, Duration::from_secs(1), metrics.clone());
    Evaluator::new(cache, EvalConfig::default(), metrics).unwrap()
}

fn home() -> Arc<Evaluator> {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    evaluator(kube::Client::try_from(config).unwrap())
}

fn kubeconfig(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{server}'}}\n\
         contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n\
         users:\n- name: u\n  user: {{token: {token}}}\n"
    )
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: not within 10s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn kubeconfig_files_added_changed_and_removed_follow_at_runtime_and_watches_stop() {
    let (server, open) = standin().await;
    let dir = std::env::temp_dir().join(format!("wavegate-clusters-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("..data")).unwrap();
    std::fs::write(dir.join("edge"), kubeconfig(&server, "t1")).unwrap();
    std::fs::write(dir.join("in-cluster"), kubeconfig(&server, "t1")).unwrap();
    std::fs::write(dir.join("broken"), "clusters: 5").unwrap();
    let source = Source::kubeconfig_dir(dir.clone());
    let build: Box<Build> = Box::new(|_, client| Ok(evaluator(client)));
    let clusters = Clusters::new(Cluster::home(home()));
    let mut changed = clusters.subscribe();

    clusters.refresh(&source, &build).await.unwrap();
    assert!(changed.has_changed().unwrap());
    changed.borrow_and_update();
    let names: Vec<String> = clusters.remotes().keys().cloned().collect();
    assert_eq!(names, ["edge"]);
    assert_eq!(clusters.remotes()["edge"].server, server);
    let refused = clusters.refused();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused.iter().any(|r| r.source.ends_with("broken")));
    assert!(refused.iter().any(|r| r.reason.contains("home cluster")));

    // A watch against the cluster, held open by the stand-in.
    let edge = clusters.get("edge").unwrap();
    let _ = edge.cache().service("shop", "web").await;
    until("a watch open", || open.load(Ordering::SeqCst) >= 1).await;

    // Unchanged: the same cluster, nothing rebuilt.
    clusters.refresh(&source, &build).await.unwrap();
    assert!(Arc::ptr_eq(&clusters.get("edge").unwrap(), &edge));
    assert!(!changed.has_changed().unwrap());

    // Changed credentials: rebuilt, and the old caches' watches stop once it is let go.
    std::fs::write(dir.join("edge"), kubeconfig(&server, "t2")).unwrap();
    clusters.refresh(&source, &build).await.unwrap();
    assert!(changed.has_changed().unwrap());
    changed.borrow_and_update();
    let rebuilt = clusters.get("edge").unwrap();
    assert!(!Arc::ptr_eq(&rebuilt, &edge));
    drop(edge);
    until("the old cluster's watch stopped", || {
        open.load(Ordering::SeqCst) == 0
    })
    .await;

    // Removed: gone from the API, and its watches stop.
    let _ = rebuilt.cache().service("shop", "web").await;
    until("a watch open again", || open.load(Ordering::SeqCst) >= 1).await;
    std::fs::remove_file(dir.join("edge")).unwrap();
    clusters.refresh(&source, &build).await.unwrap();
    assert!(clusters.get("edge").is_none());
    assert!(changed.has_changed().unwrap());
    drop(rebuilt);
    until("the removed cluster's watch stopped", || {
        open.load(Ordering::SeqCst) == 0
    })
    .await;

    // A directory that cannot be read keeps the clusters as they are.
    std::fs::write(dir.join("edge"), kubeconfig(&server, "t1")).unwrap();
    clusters.refresh(&source, &build).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(clusters.refresh(&source, &build).await.is_err());
    assert!(clusters.get("edge").is_some());
}

#[tokio::test]
async fn an_applications_destination_picks_its_cluster_by_name_else_server() {
    let clusters = Clusters::new(Cluster::home(home()));
    let app = |d: serde_json::Value| serde_json::json!({"spec": {"destination": d}});
    let home_ptr = clusters.home().evaluator.clone();
    for d in [
        serde_json::json!({"name": "in-cluster"}),
        serde_json::json!({"server": "https://kubernetes.default.svc/"}),
        serde_json::json!({}),
    ] {
        let got = clusters.of_application(&app(d.clone())).unwrap();
        assert!(Arc::ptr_eq(&got, &home_ptr), "{d}");
    }
    let e = clusters
        .of_application(&app(
            serde_json::json!({"name": "prod", "server": "https://kubernetes.default.svc"}),
        ))
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("\"prod\" is not one wavegate judges"),
        "{e}"
    );
    let e = clusters
        .of_application(&app(serde_json::json!({"server": "https://10.0.0.1:6443"})))
        .err()
        .unwrap();
    assert!(e.to_string().contains("https://10.0.0.1:6443"), "{e}");
}

fn destination(name: &str, server: &str) -> Destination {
    source::from_kubeconfig_bytes(name.into(), name, kubeconfig(server, "t").as_bytes()).unwrap()
}

#[test]
fn a_name_or_server_claimed_twice_refuses_every_claimant() {
    let remote = |d| Ok(Entry::Remote(Box::new(d)));
    let found: Found = vec![
        (
            "Secret a/one".into(),
            remote(destination("prod", "https://10.0.0.1:6443")),
        ),
        (
            "Secret a/two".into(),
            remote(destination("prod", "https://10.0.0.2:6443")),
        ),
        (
            "Secret a/three".into(),
            remote(destination("staging", "https://10.0.0.3:6443")),
        ),
        (
            "Secret a/four".into(),
            remote(destination("qa", "https://10.0.0.3:6443/")),
        ),
        (
            "Secret a/five".into(),
            remote(destination("edge", "https://10.0.0.5:6443")),
        ),
        (
            "Secret a/six".into(),
            remote(destination(HOME, "https://10.0.0.6:6443")),
        ),
        // The home cluster renamed, and a remote claiming the same name: both refused.
        ("Secret a/seven".into(), Ok(Entry::Home("home".into()))),
        (
            "Secret a/eight".into(),
            remote(destination("home", "https://10.0.0.8:6443")),
        ),
        ("Secret a/nine".into(), Ok(Entry::Home("local".into()))),
        ("Secret a/ten".into(), Ok(Entry::Home(HOME.into()))),
    ];
    let (usable, home_names, refused) = unambiguous(found);
    assert_eq!(home_names.into_iter().collect::<Vec<_>>(), ["local"]);
    let names: Vec<&str> = usable.iter().map(|(_, d)| d.name.as_str()).collect();
    assert_eq!(names, ["edge"], "{refused:?}");
    let why = |source: &str| {
        refused
            .iter()
            .find(|r| r.source == source)
            .map(|r| r.reason.clone())
            .unwrap_or_else(|| panic!("{source} not refused: {refused:?}"))
    };
    for s in ["Secret a/one", "Secret a/two"] {
        assert!(
            why(s).contains("name \"prod\" is claimed by 2 sources"),
            "{}",
            why(s)
        );
    }
    for s in ["Secret a/three", "Secret a/four"] {
        assert!(
            why(s).contains("server https://10.0.0.3:6443 is claimed by 2"),
            "{}",
            why(s)
        );
    }
    assert!(why("Secret a/six").contains("home cluster"));
    for s in ["Secret a/seven", "Secret a/eight"] {
        assert!(
            why(s).contains("name \"home\" is claimed by 2 sources"),
            "{}",
            why(s)
        );
    }
    assert_eq!(refused.len(), 7, "{refused:?}");
}

#[tokio::test]
async fn a_duplicate_server_stops_the_running_cluster_and_a_replaced_one_signals_its_users() {
    let (server, _open) = standin().await;
    let dir = std::env::temp_dir().join(format!("wavegate-clusters-dup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge"), kubeconfig(&server, "t1")).unwrap();
    let source = Source::kubeconfig_dir(dir.clone());
    let build: Box<Build> = Box::new(|_, client| Ok(evaluator(client)));
    let clusters = Clusters::new(Cluster::home(home()));
    clusters.refresh(&source, &build).await.unwrap();
    let first = clusters.lookup("edge").unwrap();
    assert!(!first.stop.is_cancelled());
    let app = serde_json::json!({"spec": {"destination": {"server": server}}});
    assert_eq!(clusters.destination_of(&app).unwrap().name, "edge");

    // Rebuilt from changed settings: the old one's users are told to stop; the new one runs.
    std::fs::write(dir.join("edge"), kubeconfig(&server, "t2-longer")).unwrap();
    clusters.refresh(&source, &build).await.unwrap();
    assert!(first.stop.is_cancelled());
    assert!(first.stopped_reason().contains("replaced or removed"));
    let second = clusters.lookup("edge").unwrap();
    assert!(!second.stop.is_cancelled());

    // Another file claims the same server: neither runs, and the running one stops.
    std::fs::write(dir.join("impostor"), kubeconfig(&server, "t3")).unwrap();
    clusters.refresh(&source, &build).await.unwrap();
    assert!(clusters.remotes().is_empty(), "{:?}", clusters.refused());
    assert!(second.stop.is_cancelled());
    assert_eq!(clusters.refused().len(), 2, "{:?}", clusters.refused());
    assert!(
        clusters
            .refused()
            .iter()
            .all(|r| r.reason.contains("claimed by 2 sources"))
    );
    let e = clusters.destination_of(&app).err().unwrap();
    assert!(matches!(e, ClusterError::UnknownServer(_)), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_unchanged_kubeconfig_file_is_not_parsed_again() {
    let dir = std::env::temp_dir().join(format!("wavegate-clusters-seen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge"), kubeconfig("https://127.0.0.1:1", "t")).unwrap();
    let source = Source::kubeconfig_dir(dir.clone());
    let Source::KubeconfigDir { seen, .. } = &source else {
        unreachable!()
    };
    source.read().await.unwrap();
    // Tamper with the remembered outcome: an unchanged file keeps it (not parsed again)…
    let path = dir.join("edge");
    seen.lock().unwrap().get_mut(&path).unwrap().outcome =
        Err(SourceError::Invalid("remembered".into()));
    let (found, _) = source.read().await.unwrap();
    assert_eq!(found[0].1.as_ref().unwrap_err().to_string(), "remembered");
    // …and a file that changed size is parsed again.
    std::fs::write(&path, kubeconfig("https://127.0.0.1:1", "longer-token")).unwrap();
    let (found, _) = source.read().await.unwrap();
    assert!(found[0].1.is_ok(), "{:?}", found[0].1.as_ref().err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn cockroachdb_checks_in_a_remote_cluster_are_unknown_without_a_probe() {
    use crate::resource::{CheckKind, Target};
    let metrics = Arc::new(Metrics::default());
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let cache = Cache::new(
        kube::Client::try_from(config).unwrap(),
        None,
        Duration::from_millis(50),
        metrics.clone(),
    );
    let home = EvalConfig {
        crdb_credentials: Some(crate::probe::Credentials {
            username: "root".into(),
            password: "s3cr3t".into(),
        }),
        ..EvalConfig::default()
    };
    let remote = remote_eval_config(home);
    assert!(remote.crdb_credentials.is_none() && remote.crdb_tls.ca_pem.is_none());
    let ev = Evaluator::new(cache, remote, metrics.clone()).unwrap();
    let target = Target::new(CheckKind::CRDB_CLUSTER, "db", "crdb").unwrap();
    let ask = crate::ask::Ask::from_params(target, &std::collections::HashMap::new()).unwrap();
    let v = ev.judge(&ask).await;
    assert_eq!(v.status, crate::health::HealthStatus::Unknown, "{v:?}");
    assert!(
        v.message.contains("not supported in remote clusters"),
        "{v:?}"
    );
    let j = ev.judge_fresh(&ask).await;
    assert!(j.blind.is_some(), "never grounds for Degraded: {j:?}");
}

#[tokio::test]
async fn a_renamed_home_cluster_resolves_to_home() {
    let clusters = Clusters::new(Cluster::home(home()));
    *clusters.home_names.write().unwrap() = Arc::new(["local".to_string()].into());
    let app = serde_json::json!({"spec": {"destination": {"name": "local"}}});
    let got = clusters.destination_of(&app).unwrap();
    assert!(Arc::ptr_eq(&got.evaluator, &clusters.home().evaluator));
    assert!(clusters.lookup("local").is_some() && clusters.lookup("other").is_none());
}

/// A hostile remote API server answers a list with a body that never ends. The client stops
/// reading at the bound with an error, instead of buffering it until memory runs out.
#[tokio::test]
async fn a_remote_list_body_that_never_ends_is_cut_at_the_bound() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let sent = counter.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = socket.read(&mut head).await;
                let start = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             transfer-encoding: chunked\r\n\r\n";
                if socket.write_all(start.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                while socket.write_all(chunk.as_bytes()).await.is_ok() {
                    sent.fetch_add(0x10000, Ordering::SeqCst);
                }
            });
        }
    });
    let config = kube::Config::new(url.parse().unwrap());
    let client = bounded_client(config, 1024 * 1024).unwrap();
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::all(client);
    let listed = tokio::time::timeout(Duration::from_secs(10), api.list(&ListParams::default()))
        .await
        .expect("the list ends at the bound, not never");
    assert!(listed.is_err());
    // What the server got to send before the client stopped reading: the bound plus what the
    // sockets buffer, far from unbounded.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = sent.load(Ordering::SeqCst);
    assert!(sent < 32 * 1024 * 1024, "{sent} bytes were read");
}

/// One writer per real cluster: remotes that reach one cluster by several addresses or
/// credentials share its identity, and only the first of them by name gets a gate controller;
/// a remote whose identity is unread or is home's gets none. Every assignment of three names to
/// {unread, home, X, Y}, against the rule written out.
#[tokio::test]
async fn one_writer_per_cluster_identity_the_first_by_name() {
    let names = ["b", "a", "c"];
    let choices = [None, Some("home"), Some("x"), Some("y")];
    for case in 0..choices.len().pow(names.len() as u32) {
        let clusters = Clusters::new(Cluster::home(home()));
        clusters.home.identity.set("home".to_string()).unwrap();
        let mut remote = BTreeMap::new();
        let mut first_of: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            let id = choices[case / choices.len().pow(i as u32) % choices.len()];
            let cluster = Cluster::new(name, &format!("https://{name}.test"), home());
            if let Some(id) = id {
                cluster.identity.set(id.to_string()).unwrap();
                if id != "home" {
                    let first = first_of.entry(id).or_insert(name);
                    *first = (*first).min(name);
                }
            }
            remote.insert(name.to_string(), Arc::new(cluster));
        }
        *clusters.remote.write().unwrap() = Arc::new(remote);
        let got: BTreeSet<String> = clusters.writable().into_keys().collect();
        let mut want: BTreeSet<String> = first_of.values().map(|n| n.to_string()).collect();
        want.insert(HOME.to_string());
        assert_eq!(got, want, "case {case}");
    }
}

/// A gate's tracking id may name an Application that lists a gate of the same namespace and
/// name in another cluster: that Application says nothing about this cluster's gate (when its
/// sync started, that it exists), so it counts only where its destination is the gate's own
/// cluster.
#[test]
fn an_application_deploying_elsewhere_does_not_name_this_cluster() {
    let app =
        |destination: serde_json::Value| serde_json::json!({"spec": {"destination": destination}});
    let home = (HOME, HOME_SERVER);
    let second = ("second", "https://second.example:6443");
    let cases = [
        (
            serde_json::json!({"name": "second", "namespace": "ns"}),
            false,
            true,
        ),
        (
            serde_json::json!({"server": "https://second.example:6443/"}),
            false,
            true,
        ),
        (serde_json::json!({"name": "in-cluster"}), true, false),
        (
            serde_json::json!({"server": "https://kubernetes.default.svc"}),
            true,
            false,
        ),
        // By name when a name is given, whatever the server says.
        (
            serde_json::json!({"name": "second", "server": HOME_SERVER}),
            false,
            true,
        ),
        (serde_json::json!({}), true, false),
    ];
    for (destination, at_home, at_second) in cases {
        let a = app(destination.clone());
        assert_eq!(
            cluster::names_cluster(&a, home.0, home.1),
            at_home,
            "{destination}"
        );
        assert_eq!(
            cluster::names_cluster(&a, second.0, second.1),
            at_second,
            "{destination}"
        );
    }
}

/// The stamp a view is kept under (every cluster's, narrowed to those it read) equals the one
/// it is looked up by (those it read) when it read home twice: an Application deploying to the
/// cluster it lives in.
#[tokio::test]
async fn a_stamp_of_home_read_twice_is_the_stamp_it_was_kept_under() {
    let clusters = Clusters::new(Cluster::home(home()));
    let home = clusters.home().clone();
    let read = [home.clone(), home.clone()];
    let kept = clusters
        .stamp(clusters.all().iter().map(|c| &**c))
        .only(read.iter().map(|c| &**c));
    assert_eq!(kept, clusters.stamp(read.iter().map(|c| &**c)));
}

/// Replica 1 of 2 judges "b"; "a" reaches the same cluster through another Secret and is
/// replica 0's. The first name of that cluster is "a", so replica 0 writes its WaveGates and
/// replica 1 writes nothing there: two replicas never both write one cluster. Home is replica
/// 0's too. Asked about "a", replica 1 names replica 0 rather than answer.
#[tokio::test]
async fn a_cluster_reached_by_two_secrets_on_two_replicas_gets_one_writer() {
    let settings = ShardSettings {
        replica: 1,
        replicas: 2,
        mode: crate::clusters::Mode::LikeArgoCd,
        algorithm: Some(shard::Algorithm::Legacy),
        argocd_namespace: "argocd".into(),
        // No handover wait here: what is shown is who writes, not when.
        rules: Rules {
            stale_after: Duration::from_secs(60),
            handover: Duration::ZERO,
        },
        clusters_namespace: "argocd".into(),
        leases: ("wavegate".into(), "wavegate".into()),
        identity: String::new(),
    };
    let sharding = Sharding::new(settings, Arc::new(Metrics::default()));
    let clusters = Clusters::sharded(Cluster::home(home()), sharding);
    clusters.home.identity.set("home".to_string()).unwrap();
    let b = Cluster::new("b", "https://b.test", home());
    b.identity.set("x".to_string()).unwrap();
    let c = Cluster::new("c", "https://c.test", home());
    c.identity.set("y".to_string()).unwrap();
    *clusters.remote.write().unwrap() = Arc::new(
        [
            ("b".to_string(), Arc::new(b)),
            ("c".to_string(), Arc::new(c)),
        ]
        .into(),
    );
    let a = Elsewhere {
        server: "https://a.test".into(),
        fingerprint: 1,
        identity: Some("x".into()),
        retry_at: None,
    };
    *clusters.elsewhere.write().unwrap() = Arc::new([("a".to_string(), a)].into());
    let on = |shard| shard::Assignment {
        shard,
        paused: false,
    };
    let assigned = [
        (HOME.to_string(), on(0)),
        ("a".to_string(), on(0)),
        ("b".to_string(), on(1)),
        ("c".to_string(), on(1)),
    ];
    clusters.sharding().unwrap().update(
        assigned.into_iter().collect(),
        &Ok(()),
        std::time::Instant::now(),
    );

    let got: BTreeSet<String> = clusters.writable().into_keys().collect();
    assert_eq!(got, BTreeSet::from(["c".to_string()]));

    let e = clusters.find("a").err().unwrap();
    assert!(matches!(e, ClusterError::JudgedElsewhere { .. }), "{e}");
    assert!(
        e.to_string().contains("judged by wavegate replica 0"),
        "{e}"
    );
    let app = serde_json::json!({"spec": {"destination": {"server": "https://a.test/"}}});
    let e = clusters.destination_of(&app).err().unwrap();
    assert!(e.to_string().contains("replica 0"), "{e}");
    // Home is read everywhere.
    assert!(clusters.find(HOME).is_ok());
}

/// A cluster judged elsewhere whose Secret's server is edited is a change of what
/// `destination_of` answers (a review found only names compared), and the same names at the
/// same servers are not.
#[test]
fn an_edited_server_of_a_cluster_judged_elsewhere_is_a_change() {
    let at = |server: &str| Elsewhere {
        server: server.into(),
        fingerprint: 1,
        identity: None,
        retry_at: None,
    };
    let places = |server: &str| BTreeMap::from([("a".to_string(), at(server))]);
    assert!(super::same_places(
        &places("https://a.test"),
        &places("https://a.test")
    ));
    assert!(!super::same_places(
        &places("https://a.test"),
        &places("https://a2.test")
    ));
    assert!(!super::same_places(
        &places("https://a.test"),
        &BTreeMap::new()
    ));
}
