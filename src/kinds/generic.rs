//! Any other kind, named `plural.group`: Argo CD's own rule for built-in kinds, kstatus for the
//! rest, and the caller's JSONPath expressions (`checks::generic`, `checks::builtin`; fixtures
//! in `tests/fixtures/generic/`).

use super::{Check, Found, GateEntry, NAME, NAMESPACE, Reads, Sources, namespace_or};
use crate::cache::CacheError;
use crate::checks::generic::{self, Rule};
use crate::deps::Dep;
use crate::health::{Finding, HealthStatus};
use crate::resource::{CheckKind, GroupResource, InputError, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What a WaveGate's `resource:` entry asks: the field's description in `kubectl explain`.
pub(crate) const ABOUT: &str =
    "Any other object, judged by kstatus rules and optional JSONPath expressions.";

// A WaveGate's `resource:` entry (no doc comment: `ABOUT` describes the field).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCheck {
    /// The kind as kubectl names it: `deployments.apps`, `statefulsets.apps`, `jobs.batch`.
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub resource: String,
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub name: String,
    /// Defaults to the gate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE))]
    pub namespace: Option<String>,
    /// JSONPath (RFC 9535) that holds when the object is healthy. An expression holds when it
    /// selects at least one node and every selected node is `true` or an object/array (what a
    /// filter selects); `false` does not hold; a selected string, number or null is an error
    /// (compare it in a filter: `$[?@.status.phase=='Bound']`). Checked after the kind's own
    /// rule (Argo CD's for built-in kinds, kstatus for the rest), which it can only make stricter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub healthy: Option<String>,
    /// JSONPath that holds while the object is still progressing (same typing as `healthy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub progressing: Option<String>,
    /// JSONPath that holds when the object has definitely failed (same typing as `healthy`).
    /// Messages name the expression, never the matched value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub degraded: Option<String>,
}

impl GateEntry for ResourceCheck {
    fn ask(
        &self,
        _: &str,
        check: &str,
        gate_namespace: &str,
    ) -> Result<(Target, Check), InputError> {
        let ns = namespace_or(&self.namespace, gate_namespace);
        let t = Target::new(CheckKind::parse(&self.resource)?, &ns, &self.name)?;
        let expressions = [&self.healthy, &self.progressing, &self.degraded];
        let judged = match t.resource.clone() {
            CheckKind::Generic { group, plural } => {
                let [h, p, d] = expressions.map(Clone::clone);
                let rule = Rule::new(h, p, d)?;
                Check::Generic {
                    group,
                    plural,
                    rule,
                }
            }
            // `resource: services` judges a Service by its own check; expressions would be
            // ignored.
            dedicated if expressions.iter().all(|e| e.is_none()) => Check::defaults(dedicated),
            dedicated => {
                return Err(InputError::Parameter {
                    name: check.to_string(),
                    reason: format!(
                        "{dedicated} has a check of its own; JSONPath expressions are for other \
                         kinds"
                    ),
                });
            }
        };
        Ok((t, judged))
    }
}

/// The object alone: the rule and the expressions read nothing else.
pub(crate) fn reads(group: &str, plural: &str, namespace: &str, name: &str) -> Vec<Dep> {
    vec![Dep::object(
        GroupResource::new(group, plural),
        namespace,
        name,
    )]
}

pub(crate) async fn gather<R: Reads, P>(
    from: &Sources<'_, R, P>,
    group: &str,
    plural: &str,
    namespace: &str,
    name: &str,
    rule: &Rule,
) -> Result<Found, CacheError> {
    let kind = GroupResource::new(group, plural);
    let obj = from.cache.object(&kind, namespace, name).await?;
    let identity = obj.as_deref().map(super::json_identity);
    let (ns, n, rule) = (namespace.to_string(), name.to_string(), rule.clone());
    let lua = from.config.argocd_lua.clone();
    let judged = generic::check_off_runtime(kind.to_string(), ns, n, obj, rule, lua).await;
    // A bundled script may call a transient state Degraded (CNPG's `Cluster`: "Switchover in
    // progress", "Failing over"). Inside its own Application that is Argo CD's decision; a gate
    // fails a sync only on a definite failure, so a script's Degraded counts once it has
    // lasted the grace period.
    let mut v = judged.verdict;
    let argo_status = v.argo_status.take();
    if judged.script.is_some() && v.status == HealthStatus::Degraded {
        let finding = Finding::Persistent { message: v.message };
        return Ok(Found {
            argo_status,
            ..Found::seen(finding, from.config.argocd_lua_grace, identity)
        });
    }
    Ok(Found {
        argo_status,
        ..Found::seen(v.into(), Duration::ZERO, None)
    })
}
