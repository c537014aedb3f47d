//! The Service endpoints rule against an independent oracle, over random cluster states.
//!
//! The oracle below is the rule of docs/contracts.md ("Service") written as plainly as
//! possible, sharing no code with `checks::service`: a Service is ready when at least `minReady`
//! distinct pods are (a) picked by its current selector, (b) alive (not deleted, not finished),
//! (c) Ready themselves unless `publishNotReadyAddresses`, and (d) listed as a ready,
//! non-terminating endpoint — the same pod, UID included — in a slice of this Service that no
//! other Service UID owns. States are random: selectors, UIDs, pods that come and go, slices
//! that lag or belong to a previous Service. After every state the check must agree with the
//! oracle exactly on Healthy, and may only report a persistent failure (the one that turns
//! Degraded after the grace) when the selector picks no live pod at all and a live pod is
//! strong evidence of a mislabel (the wanted value under another key; a sibling that differs
//! in one value of a multi-key selector is only a hint).
//!
//! A Service without a selector is judged by what kube-proxy would route to: every ready,
//! non-terminating endpoint of its slices.
//!
//! `PROPTEST_CASES` sets how many states are explored (default 2,000 here).

use crate::proptest_config;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use wavegate::checks::service::{Params, check};
use wavegate::health::{Finding, HealthStatus};
use wavegate::views::{PodView, SliceView};

const NS: &str = "shop";
const KEYS: [&str; 2] = ["app", "tier"];
const VALUES: [&str; 2] = ["web", "db"];

#[derive(Debug, Clone)]
struct PodState {
    labels: BTreeMap<String, String>,
    ready: bool,
    deleting: bool,
    finished: bool,
    /// The pod was recreated under the same name: a new UID.
    generation: u8,
}

#[derive(Debug, Clone)]
struct EndpointState {
    pod: usize,
    /// Which incarnation of the pod the endpoint was written for.
    generation: u8,
    ready: Option<bool>,
    terminating: bool,
}

#[derive(Debug, Clone)]
struct SliceState {
    /// Owner Service UID: `None` (a hand-written slice), or one of two Service incarnations.
    owner: Option<u8>,
    endpoints: Vec<EndpointState>,
}

#[derive(Debug, Clone)]
struct World {
    selector: BTreeMap<String, String>,
    service_uid: u8,
    deleting: bool,
    publish_not_ready: bool,
    min_ready: u32,
    pods: Vec<PodState>,
    slices: Vec<SliceState>,
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        prop::sample::select(KEYS.to_vec()).prop_map(String::from),
        prop::sample::select(VALUES.to_vec()).prop_map(String::from),
        0..=2,
    )
}

fn world() -> impl Strategy<Value = World> {
    let pod = (
        labels(),
        any::<bool>(),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        0u8..2,
    )
        .prop_map(|(labels, ready, deleting, finished, generation)| PodState {
            labels,
            ready,
            deleting,
            finished,
            generation,
        });
    let endpoint = (
        0usize..5,
        0u8..2,
        prop::option::of(any::<bool>()),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(pod, generation, ready, terminating)| EndpointState {
            pod,
            generation,
            ready,
            terminating,
        });
    let slice = (
        prop::option::of(0u8..2),
        proptest::collection::vec(endpoint, 0..5),
    )
        .prop_map(|(owner, endpoints)| SliceState { owner, endpoints });
    (
        labels(),
        0u8..2,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
        1u32..4,
        proptest::collection::vec(pod, 0..5),
        proptest::collection::vec(slice, 0..3),
    )
        .prop_map(
            |(selector, service_uid, deleting, publish_not_ready, min_ready, pods, slices)| World {
                selector,
                service_uid,
                deleting,
                publish_not_ready,
                min_ready,
                pods,
                slices,
            },
        )
}

fn pod_name(i: usize) -> String {
    format!("web-{i}")
}

fn pod_uid(i: usize, generation: u8) -> String {
    format!("pod-{i}-{generation}")
}

fn service_uid(u: u8) -> String {
    format!("svc-{u}")
}

/// The oracle: how many distinct pods the Service truly routes to now.
fn oracle_ready(w: &World) -> usize {
    if w.deleting {
        return 0;
    }
    let mut ready = BTreeSet::new();
    if w.selector.is_empty() {
        // No selector: the slices are all the evidence there is, read as kube-proxy does.
        for slice in w
            .slices
            .iter()
            .filter(|s| s.owner.is_none_or(|o| o == w.service_uid))
        {
            for e in &slice.endpoints {
                if e.ready != Some(false) && !e.terminating {
                    ready.insert(e.pod);
                }
            }
        }
        return ready.len();
    }
    for slice in &w.slices {
        if slice.owner.is_some_and(|o| o != w.service_uid) {
            continue;
        }
        for e in &slice.endpoints {
            let Some(pod) = w.pods.get(e.pod) else {
                continue;
            };
            let picked = w.selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v));
            let alive = !pod.deleting && !pod.finished;
            let same_pod = e.generation == pod.generation;
            let pod_ready = w.publish_not_ready || pod.ready;
            let endpoint_ready = e.ready != Some(false) && !e.terminating;
            if picked && alive && same_pod && pod_ready && endpoint_ready {
                ready.insert(e.pod);
            }
        }
    }
    ready.len()
}

fn oracle_picks_a_live_pod(w: &World) -> bool {
    w.pods.iter().any(|p| {
        !p.deleting && !p.finished && w.selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
    })
}

/// The contract's strong evidence of a mislabel: a live pod that carries every selector key with
/// exactly one value differing, and the wanted value under another of its keys. (Pods here
/// have no controller and are named `pod-…`, never like the Service `web`.)
fn oracle_strong_near_match(w: &World) -> bool {
    w.pods
        .iter()
        .filter(|p| !p.deleting && !p.finished)
        .any(|p| {
            let differing: Vec<(&String, &String)> = w
                .selector
                .iter()
                .filter(|(k, v)| p.labels.get(*k).is_some_and(|have| have != *v))
                .collect();
            let all_keys = w.selector.keys().all(|k| p.labels.contains_key(k));
            all_keys
                && differing.len() == 1
                && p.labels
                    .iter()
                    .any(|(k, v)| k != differing[0].0 && v == differing[0].1)
        })
}

fn deleted_at() -> Option<Time> {
    Some(Time("2026-12-01T00:00:00Z".parse().unwrap()))
}

/// The world as the API server would serve it.
fn objects(w: &World) -> (Service, Vec<Arc<Pod>>, Vec<Arc<EndpointSlice>>) {
    let service = Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some(NS.into()),
            uid: Some(service_uid(w.service_uid)),
            deletion_timestamp: if w.deleting { deleted_at() } else { None },
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(w.selector.clone()),
            publish_not_ready_addresses: Some(w.publish_not_ready),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let pods = w
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Arc::new(Pod {
                metadata: ObjectMeta {
                    name: Some(pod_name(i)),
                    namespace: Some(NS.into()),
                    uid: Some(pod_uid(i, p.generation)),
                    labels: Some(p.labels.clone()),
                    deletion_timestamp: if p.deleting { deleted_at() } else { None },
                    ..ObjectMeta::default()
                },
                status: Some(PodStatus {
                    phase: Some(if p.finished { "Succeeded" } else { "Running" }.into()),
                    conditions: Some(vec![PodCondition {
                        type_: "Ready".into(),
                        status: if p.ready { "True" } else { "False" }.into(),
                        ..PodCondition::default()
                    }]),
                    ..PodStatus::default()
                }),
                ..Pod::default()
            })
        })
        .collect();
    let slices = w
        .slices
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Arc::new(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(format!("web-{i}")),
                    namespace: Some(NS.into()),
                    labels: Some([("kubernetes.io/service-name".into(), "web".into())].into()),
                    owner_references: s.owner.map(|o| {
                        vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Service".into(),
                            name: "web".into(),
                            uid: service_uid(o),
                            controller: Some(true),
                            ..OwnerReference::default()
                        }]
                    }),
                    ..ObjectMeta::default()
                },
                address_type: "IPv4".into(),
                endpoints: Some(
                    s.endpoints
                        .iter()
                        .map(|e| Endpoint {
                            addresses: vec![format!("10.0.0.{}", e.pod + 1)],
                            conditions: Some(EndpointConditions {
                                ready: e.ready,
                                serving: e.ready,
                                terminating: Some(e.terminating),
                            }),
                            target_ref: Some(ObjectReference {
                                kind: Some("Pod".into()),
                                namespace: Some(NS.into()),
                                name: Some(pod_name(e.pod)),
                                uid: Some(pod_uid(e.pod, e.generation)),
                                ..ObjectReference::default()
                            }),
                            ..Endpoint::default()
                        })
                        .collect(),
                ),
                ports: None,
            })
        })
        .collect();
    (service, pods, slices)
}

proptest! {
    #![proptest_config(proptest_config::config(2000))]

    #[test]
    fn service_check_agrees_with_the_oracle(w in world()) {
        let (service, pods, slices) = objects(&w);
        let params = Params { min_ready: w.min_ready };
        // Judged as the cache keeps them: views of the objects.
        let pods: Vec<Arc<PodView>> = pods.iter().map(|p| Arc::new(p.as_ref().into())).collect();
        let slices: Vec<Arc<SliceView>> = slices.iter().map(|s| Arc::new(s.as_ref().into())).collect();
        let finding = check(NS, "web", Some(&(&service).into()), &pods, &slices, &params);
        let truly_ready = oracle_ready(&w) >= w.min_ready as usize;
        match &finding {
            Finding::Settled(v) => {
                prop_assert_eq!(
                    v.status == HealthStatus::Healthy,
                    truly_ready,
                    "check said {} but the oracle counts {} ready (need {})",
                    v, oracle_ready(&w), w.min_ready
                );
                prop_assert!(v.status != HealthStatus::Degraded, "Degraded from one snapshot: {}", v);
            }
            Finding::Persistent { message } => {
                prop_assert!(!truly_ready, "persistent failure on a ready Service: {}", message);
                prop_assert!(
                    !oracle_picks_a_live_pod(&w),
                    "persistent failure although the selector picks a live pod: {}",
                    message
                );
                prop_assert!(
                    oracle_strong_near_match(&w),
                    "persistent failure without strong evidence of a mislabel: {}",
                    message
                );
            }
        }
    }
}
