//! What the waves view of a 2,000-resource Application costs after one change, with verdicts
//! kept until what they read changes and without: a timing printed, never asserted (run with
//! `cargo test --profile bench-fast --lib -- --ignored --nocapture waves_view_after_one_change`).
//! On a current-thread runtime, so wall time is the request's CPU time.

use super::{AppState, router};
use crate::cache::fed::{self, Feed};
use crate::evaluate::{EvalConfig, Evaluator};
use crate::metrics::Metrics;
use crate::resource::GroupResource;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt;

const NS: &str = "big";
const RESOURCES: usize = 2_000;
const WAVES: usize = 20;

fn name_of(i: usize) -> String {
    format!("{}-{i:05}", ["configmap", "service", "deployment"][i % 3])
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn deployment(i: usize, paused: bool) -> DynamicObject {
    typed(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name_of(i), "namespace": NS, "generation": 1, "uid": format!("d{i}")},
        "spec": {"replicas": 0, "paused": paused},
        "status": {"observedGeneration": 1, "replicas": 0}}))
}

fn application() -> DynamicObject {
    let resources: Vec<Value> = (0..RESOURCES)
        .map(|i| {
            let (group, kind) = [("", "ConfigMap"), ("", "Service"), ("apps", "Deployment")][i % 3];
            json!({"group": group, "version": "v1", "kind": kind, "namespace": NS,
                   "name": name_of(i), "syncWave": i * WAVES / RESOURCES, "status": "Synced"})
        })
        .collect();
    typed(
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "big", "namespace": NS, "uid": "app", "resourceVersion": "1"},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://example.invalid/repo.git", "path": "big", "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": NS}},
        "status": {"sync": {"status": "Synced", "revision": "4f2a9c1"},
                   "health": {"status": "Healthy"}, "resources": resources,
                   "operationState": {"phase": "Succeeded", "startedAt": "2026-12-01T03:00:00Z",
                                      "finishedAt": "2026-12-01T03:01:00Z"}}}),
    )
}

/// CPU time of this process's threads (`/proc/self/task/*/schedstat`), by thread: the blocking
/// pool's too, where generic rules are evaluated.
fn cpu() -> std::collections::HashMap<String, u64> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let t = t.ok()?;
            let ns = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            let ns = ns.split_whitespace().next()?.parse::<u64>().ok()?;
            Some((t.file_name().to_string_lossy().into_owned(), ns))
        })
        .collect()
}

fn cpu_since(before: &std::collections::HashMap<String, u64>) -> Duration {
    let ns = cpu()
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    Duration::from_nanos(ns)
}

async fn get(app: &axum::Router, path: &str) -> usize {
    let req = Request::get(path).body(Body::empty()).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap()
        .len()
}

#[test]
#[ignore = "a timing: run it with --profile bench-fast --ignored --nocapture"]
fn waves_view_after_one_change() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cache = fed::cache(
            NS,
            &[
                ("", "configmaps", "ConfigMap"),
                ("apps", "deployments", "Deployment"),
                ("argoproj.io", "applications", "Application"),
            ],
        )
        .await;
        let services: Arc<Feed<Service>> = cache.feed(&GroupResource::SERVICES);
        let pods: Arc<Feed<Pod>> = cache.feed(&GroupResource::PODS);
        let slices: Arc<Feed<EndpointSlice>> = cache.feed(&GroupResource::ENDPOINT_SLICES);
        let deployments: Arc<Feed<DynamicObject>> =
            cache.feed(&GroupResource::new("apps", "deployments"));
        let configmaps: Arc<Feed<DynamicObject>> = cache.feed(&GroupResource::new("", "configmaps"));
        let apps: Arc<Feed<DynamicObject>> =
            cache.feed(&GroupResource::new("argoproj.io", "applications"));
        let of = |k: usize| (0..RESOURCES).filter(move |i| i % 3 == k);
        configmaps.list(of(0).map(|i| {
            typed(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name_of(i), "namespace": NS}, "data": {"i": i.to_string()}}))
        }));
        services.list(of(1).map(|i| {
            typed(json!({"metadata": {"name": name_of(i), "namespace": NS, "uid": format!("s{i}")},
                "spec": {"selector": {"app": name_of(i)}, "ports": [{"port": 80}]}}))
        }));
        pods.list(of(1).map(|i| {
            typed(json!({"metadata": {"name": format!("{}-0", name_of(i)), "namespace": NS,
                                      "labels": {"app": name_of(i)}},
                "status": {"phase": "Running", "podIP": format!("10.{}.{}.1", i / 250, i % 250),
                           "conditions": [{"type": "Ready", "status": "True"}]}}))
        }));
        slices.list(of(1).map(|i| {
            typed(json!({"metadata": {"name": format!("{}-abc", name_of(i)), "namespace": NS,
                    "labels": {"kubernetes.io/service-name": name_of(i)}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [format!("10.{}.{}.1", i / 250, i % 250)],
                    "targetRef": {"kind": "Pod", "namespace": NS, "name": format!("{}-0", name_of(i))},
                    "conditions": {"ready": true}}]}))
        }));
        deployments.list(of(2).map(|i| deployment(i, false)));
        apps.list([application()]);
        let metrics = Arc::new(Metrics::default());
        let evaluator = Evaluator::new(cache, EvalConfig::default(), metrics.clone()).unwrap();
        let app = router(AppState::new(evaluator, metrics));
        let path = format!("/api/v1/applications/{NS}/big/waves");
        let started = Instant::now();
        let bytes = get(&app, &path).await;
        eprintln!("first view: {:?}, {bytes} bytes", started.elapsed());
        get(&app, &path).await;
        let rounds = 20;
        let started = Instant::now();
        for _ in 0..rounds {
            get(&app, &path).await;
        }
        eprintln!("nothing changed: {:?} per view", started.elapsed() / rounds);
        // `KEPT_ONLY=1`: verdicts kept in every round (to profile that case alone).
        let phases: &[bool] = match std::env::var("KEPT_ONLY") {
            Ok(_) => &[false, false, false, false, false],
            Err(_) => &[false, true, false, true],
        };
        for &keep_nothing in phases {
            crate::evaluate::tests::KEEP_NOTHING.set(keep_nothing);
            let mut took = Vec::new();
            for round in 0..rounds {
                deployments.send(Event::Apply(deployment(2, round % 2 == 0)));
                fed::settle().await;
                // Past the verdict cache's coalescing TTL, as a poll 5 s later is.
                tokio::time::sleep(Duration::from_millis(60)).await;
                let (started, cpu_before) = (Instant::now(), cpu());
                get(&app, &path).await;
                took.push((started.elapsed(), cpu_since(&cpu_before)));
            }
            let mut wall: Vec<Duration> = took.iter().map(|t| t.0).collect();
            let mut cpu: Vec<Duration> = took.iter().map(|t| t.1).collect();
            wall.sort();
            cpu.sort();
            eprintln!(
                "after one change, {}: CPU p50 {:?} p95 {:?}; wall p50 {:?} p95 {:?}",
                if keep_nothing { "every verdict judged afresh" } else { "verdicts kept" },
                cpu[cpu.len() / 2],
                cpu[cpu.len() * 95 / 100],
                wall[wall.len() / 2],
                wall[wall.len() * 95 / 100]
            );
        }
    });
}
