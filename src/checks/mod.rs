//! The checks: pure functions from a snapshot of cluster objects (and probe results) to a
//! [`Finding`](crate::health::Finding) or [`Verdict`](crate::health::Verdict). No I/O here, so
//! every rule is unit-tested with plain fixtures.

pub mod application;
pub(crate) mod builtin;
pub mod cnpg;
pub mod cockroach;
#[cfg(test)]
mod fixtures;
pub(crate) mod generic;
pub mod service;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::core::Selector;
use std::collections::BTreeMap;

/// The pod's `Ready` condition, which Kubernetes' `podutil.IsPodReady` reads (True: Ready).
fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
}

/// Kubernetes' equality selector semantics (a Service's selector, a caller's CockroachDB
/// selector): every pair must be among the pod's labels (`labels.SelectorFromSet`), which is
/// what kube-core's `Selector` implements.
fn selector_of(selector: &BTreeMap<String, String>) -> Selector {
    selector
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn labels_of(pod: &Pod) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&NONE)
}
