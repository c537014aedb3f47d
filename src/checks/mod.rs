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
pub mod pod;
pub mod service;

use crate::views::{PodView, ReadyCondition};

/// The pod's `Ready` condition, which Kubernetes' `podutil.IsPodReady` reads (True: Ready).
fn ready_condition(pod: &PodView) -> Option<&ReadyCondition> {
    pod.ready.as_ref()
}
