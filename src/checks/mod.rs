//! The checks: pure functions from a snapshot of cluster objects (and probe results) to a
//! [`Finding`](crate::health::Finding) or [`Verdict`](crate::health::Verdict). No I/O here, so
//! every rule is unit-tested with plain fixtures.

pub mod application;
pub mod builtin;
pub mod cnpg;
pub mod cockroach;
#[cfg(test)]
mod fixtures;
pub mod generic;
pub mod service;

use k8s_openapi::api::core::v1::{Pod, PodCondition};

/// The pod's `Ready` condition, which Kubernetes' `podutil.IsPodReady` reads (True: Ready).
fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
}
