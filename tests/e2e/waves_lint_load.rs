//! The live-lint attack of docs/security.md (Safety 4, item 1) on the real control plane: one
//! Application lists thousands of CNPG Databases of one Cluster and a Deployment reaching it
//! with a 200 KB env value, and ten viewers poll its waves view at once, as the UI extension
//! does every 5 s, while the kubelet probes `/healthz` every 100 ms. Every poll must answer with
//! findings or with why lint was skipped, and `/healthz` must answer every probe within the
//! liveness probe's timeout. `--nocapture` prints the latencies and RSS (this test binary's:
//! run it alone, by name, for a number that is the attack's).

use crate::cluster::{self, Wavegate, apply};
use crate::kubelet_probe::{self, Prober};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use wavegate::evaluate::EvalConfig;

/// Databases of Cluster pg the Application lists, as in the attack of the issue (creation time
/// is printed: lower it if creating them takes far longer than 30 s on the machine).
const DATABASES: usize = 2_000;
const VIEWERS: usize = 10;
const POLLING: Duration = Duration::from_secs(10);

fn database(ns: &str, name: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"name": name, "owner": name, "cluster": {"name": "pg"}}}),
    )
    .unwrap()
}

fn database_name(i: usize) -> String {
    // The first is the one the Deployment uses: a same-wave finding.
    if i == 0 {
        "forgejo".to_string()
    } else {
        format!("db{i}")
    }
}

/// What Argo CD records of the Application's resources: all in wave 3.
fn listed(ns: &str) -> Value {
    let r = |group: &str, kind: &str, name: &str| {
        json!({"group": group, "version": "v1", "kind": kind, "namespace": ns, "name": name,
               "status": "Synced", "syncWave": 3})
    };
    let mut resources = vec![
        r("postgresql.cnpg.io", "Cluster", "pg"),
        r("apps", "Deployment", "forgejo"),
    ];
    resources
        .extend((0..DATABASES).map(|i| r("postgresql.cnpg.io", "Database", &database_name(i))));
    json!({"health": {"status": "Progressing"},
           "sync": {"status": "Synced", "revision": "4f2a9c1"},
           "resources": resources})
}

/// One poll's answer: `Ok(true)` with findings, `Ok(false)` skipped, `Err` anything else.
fn poll_answer(code: u16, waves: &Value) -> Result<bool, String> {
    if code != 200 {
        return Err(format!("{code}: {waves}"));
    }
    let lint = &waves["lint"];
    if lint["skipped"]
        .as_str()
        .is_some_and(|s| s.starts_with("lint skipped: "))
    {
        return Ok(false);
    }
    let same_wave = lint["findings"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f["rule"] == "same-wave"));
    if same_wave {
        Ok(true)
    } else {
        Err(format!(
            "neither the same-wave finding nor lint.skipped: {lint}"
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[ignore = "needs the local control plane"]
async fn thousands_of_databases_polled_by_ten_viewers_leave_healthz_answering() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "lint-load").await;
    apply(
        &client,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg", "namespace": ns},
               "spec": {"instances": 1, "storage": {"size": "1Gi"}}}),
    )
    .await;
    let ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Database", "databases");
    let databases: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let started = Instant::now();
    let created: Vec<_> = futures::stream::iter(0..DATABASES)
        .map(|i| {
            let (databases, db) = (databases.clone(), database(&ns, &database_name(i)));
            async move { databases.create(&PostParams::default(), &db).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let creation = started.elapsed();
    for c in created {
        c.unwrap_or_else(|e| panic!("create a Database: {e}"));
    }
    apply(
        &client,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"replicas": 0,
                        "selector": {"matchLabels": {"app": "forgejo"}},
                        "template": {"metadata": {"labels": {"app": "forgejo"}},
                                     "spec": {"containers": [{"name": "forgejo",
                                        "image": "codeberg.org/forgejo/forgejo:11",
                                        "env": [
                                          {"name": "FORGEJO__database__HOST",
                                           "value": format!("pg-rw.{ns}.svc.cluster.local:5432")},
                                          {"name": "FORGEJO__database__NAME", "value": "forgejo"},
                                          {"name": "PADDING",
                                           "value": "word ".repeat(200_000 / 5)}]}]}}}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": "platform", "namespace": ns},
               "spec": {"project": "default",
                        "source": {"repoURL": "https://git.example.com/platform.git",
                                   "path": "apps/forgejo", "targetRevision": "main"},
                        "destination": {"server": "https://kubernetes.default.svc",
                                        "namespace": ns}}}),
    )
    .await;
    let apps = cluster::api_resource("argoproj.io", "v1alpha1", "Application", "applications");
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &apps)
        .patch(
            "platform",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": listed(&ns)})),
        )
        .await
        .unwrap();

    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns]).await;
    let path = format!("/api/v1/applications/{ns}/platform/waves");
    let before = kubelet_probe::rss_bytes();
    let probe = Prober::start(&wg.url, Duration::from_millis(100));
    let started = Instant::now();
    let viewers = (0..VIEWERS).map(|_| {
        let (wg, path) = (&wg, &path);
        async move {
            let mut answers = Vec::new();
            while started.elapsed() < POLLING {
                let asked = Instant::now();
                let (code, waves) = wg.get(path).await;
                answers.push((poll_answer(code, &waves), asked.elapsed()));
            }
            answers
        }
    });
    let answers: Vec<_> = futures::future::join_all(viewers)
        .await
        .into_iter()
        .flatten()
        .collect();
    let samples = probe.stop();
    let after = kubelet_probe::rss_bytes();

    let with_findings = answers.iter().filter(|(a, _)| a == &Ok(true)).count();
    let skipped = answers.iter().filter(|(a, _)| a == &Ok(false)).count();
    let mut polls: Vec<Duration> = answers.iter().map(|(_, took)| *took).collect();
    polls.sort();
    eprintln!(
        "live lint: {DATABASES} Databases created in {creation:?}; {VIEWERS} viewers, {} polls \
         in {POLLING:?}: {with_findings} with findings, {skipped} lint.skipped; poll p50 {:?}, \
         max {:?}; rss before {:.1} MiB, peak {:.1} MiB (+{:.1}), after {:.1} MiB; /healthz: {}",
        answers.len(),
        polls.get(polls.len() / 2),
        polls.last(),
        kubelet_probe::mib(before),
        kubelet_probe::mib(samples.rss_peak),
        kubelet_probe::mib(samples.rss_peak.saturating_sub(before)),
        kubelet_probe::mib(after),
        samples.summary(),
    );
    for (answer, _) in &answers {
        if let Err(e) = answer {
            panic!("a poll of the waves view: {e}");
        }
    }
    assert!(with_findings > 0, "no poll showed the findings");
    assert!(samples.latencies.len() >= 10, "{}", samples.summary());
    // The kubelet restarts the pod only after `failureThreshold` probes in a row have failed,
    // `periodSeconds` apart: that is what the attack must not reach. A single probe over the
    // 2 s timeout is counted and printed, not asserted (a loaded CI machine may stretch one).
    // Before the first judgement was shared, ten viewers judging 2,000 Databases at once
    // stalled `/healthz` once for ~6 s and peaked at 874 MiB (docs/security.md keeps the
    // numbers); the peak is printed, not asserted: other tests share this process.
    assert!(
        samples.longest_failing() < kubelet_probe::liveness_tolerance(),
        "{}",
        samples.summary()
    );
}
