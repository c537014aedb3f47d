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

/// The generic rule's own verdict on `object` (resource as wavegate names it, e.g.
/// `clusters.postgresql.cnpg.io`; no expressions), with `lua`'s scripts when given and Argo CD's
/// built-in rules or kstatus otherwise. For `benches/argocd_lua.rs`, which compares the two.
#[doc(hidden)]
pub fn judge_generic(
    resource: &str,
    object: &serde_json::Value,
    lua: Option<&crate::argocd_lua::LuaHealth>,
) -> crate::health::Verdict {
    let ns = object
        .pointer("/metadata/namespace")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("");
    let name = object
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("");
    let rule = generic::Rule::default();
    generic::check_with(resource, ns, name, Some(object), &rule, lua).verdict
}
