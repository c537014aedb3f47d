//! The generic rule, for any kind: kstatus' generic conditions plus user-supplied JSONPath
//! (RFC 9535) expressions for healthy / progressing / degraded, in the spirit of Flux
//! `healthCheckExprs`.

use jsonpath_rust::parser::model::JpQuery;
use jsonpath_rust::parser::parse_json_path;
use jsonpath_rust::query::js_path_process;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::health::Verdict;

/// How much of a matched node a message quotes.
const MAX_QUOTE: usize = 200;

/// JSONPath expressions, each judged against the whole object as the API returns it. An
/// expression holds when it selects at least one node that is not `false` or `null`, so it is
/// written as a filter: `$.status.conditions[?@.type=='Available' && @.status=='True']`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Rule {
    /// Healthy only when this holds (and nothing below fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<String>,
    /// Progressing while this holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressing: Option<String>,
    /// Degraded (fails the Argo CD sync) while this holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

/// Parse every expression of `rule`; the error names the bad one.
pub fn validate(rule: &Rule) -> Result<(), String> {
    Compiled::new(rule).map(|_| ())
}

/// Judge `kind` `namespace/name` (namespace empty for cluster-scoped kinds) by `rule`.
///
/// Order: a bad rule is Unknown whatever the object's state (a rule that cannot be evaluated
/// must never let a wave pass); then kstatus' generic rules; then degraded → progressing →
/// healthy expressions.
pub fn check(
    kind: &str,
    namespace: &str,
    name: &str,
    object: Option<&Value>,
    rule: &Rule,
) -> Verdict {
    let id = if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    };
    let compiled = match Compiled::new(rule) {
        Ok(c) => c,
        Err(e) => return Verdict::unknown(format!("{id}: {e}")),
    };
    let Some(object) = object else {
        return Verdict::missing(format!("{id} does not exist"));
    };
    if let Some(verdict) = kstatus(&id, object) {
        return verdict;
    }

    let holds = |which: &str, expr: &Expr| -> Result<Option<String>, Verdict> {
        expr.holds(object).map_err(|e| {
            Verdict::unknown(format!(
                "{id}: {which} expression `{}` failed: {e}",
                expr.source
            ))
        })
    };
    if let Some(expr) = &compiled.degraded {
        match holds("degraded", expr) {
            Err(v) => return v,
            Ok(Some(node)) => {
                return Verdict::degraded(format!(
                    "{id}: degraded expression `{}` holds (matched {node})",
                    expr.source
                ));
            }
            Ok(None) => {}
        }
    }
    if let Some(expr) = &compiled.progressing {
        match holds("progressing", expr) {
            Err(v) => return v,
            Ok(Some(node)) => {
                return Verdict::progressing(format!(
                    "{id}: progressing expression `{}` holds (matched {node})",
                    expr.source
                ));
            }
            Ok(None) => {}
        }
    }
    match &compiled.healthy {
        Some(expr) => match holds("healthy", expr) {
            Err(v) => v,
            Ok(Some(_)) => {
                Verdict::healthy(format!("{id}: healthy expression `{}` holds", expr.source))
            }
            Ok(None) => Verdict::progressing(format!(
                "{id}: healthy expression `{}` does not hold yet",
                expr.source
            )),
        },
        None => Verdict::healthy(format!("{id} exists and reports no failing condition")),
    }
}

/// kstatus' generic properties (sigs.k8s.io/cli-utils `pkg/kstatus/status/generic.go`,
/// `checkGenericProperties`): deletion, an unobserved generation, `Stalled` and `Reconciling`.
/// `Ready` is not a kstatus condition, but the convention most controllers follow (Flux,
/// Crossplane, cert-manager); only its `False`/`Unknown` are used, to hold a wave back.
fn kstatus(id: &str, object: &Value) -> Option<Verdict> {
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        return Some(Verdict::progressing(format!("{id} is being deleted")));
    }
    // Like kstatus' `checkGeneration`: only objects whose controller reports
    // observedGeneration can be stale in this sense.
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && observed != generation
    {
        return Some(Verdict::progressing(format!(
            "{id}: generation {generation} not observed yet (status.observedGeneration {observed})"
        )));
    }
    // Stalled before Reconciling: kstatus takes whichever comes first in the list, but a
    // controller that says it has given up is the more important news.
    if let Some(c) = condition(object, "Stalled").filter(|c| status_of(c) == Some("True")) {
        return Some(Verdict::degraded(format!("{id} is stalled{}", explain(c))));
    }
    if let Some(c) = condition(object, "Reconciling").filter(|c| status_of(c) == Some("True")) {
        return Some(Verdict::progressing(format!(
            "{id} is reconciling{}",
            explain(c)
        )));
    }
    if let Some(c) = condition(object, "Ready") {
        match status_of(c) {
            Some("False") => {
                return Some(Verdict::progressing(format!(
                    "{id} is not Ready{}",
                    explain(c)
                )));
            }
            Some("Unknown") => {
                return Some(Verdict::progressing(format!(
                    "{id} readiness is Unknown{}",
                    explain(c)
                )));
            }
            _ => {}
        }
    }
    None
}

/// The condition of `type_` in `status.conditions`, in the metav1.Condition shape.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn status_of(condition: &Value) -> Option<&str> {
    condition.get("status").and_then(Value::as_str)
}

/// The `status` ("True", "False", "Unknown") of condition `type_`, if the object has it.
pub(crate) fn condition_status<'a>(object: &'a Value, type_: &str) -> Option<&'a str> {
    condition(object, type_).and_then(status_of)
}

/// `: Reason: message` from a condition, leaving out what is empty.
fn explain(condition: &Value) -> String {
    let text = |key| {
        condition
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (text("reason"), text("message")) {
        (Some(r), Some(m)) => format!(": {r}: {m}"),
        (Some(r), None) => format!(": {r}"),
        (None, Some(m)) => format!(": {m}"),
        (None, None) => String::new(),
    }
}

struct Expr {
    source: String,
    query: JpQuery,
}

impl Expr {
    fn parse(which: &str, source: &str) -> Result<Self, String> {
        let query = parse_json_path(source)
            .map_err(|e| format!("{which} expression `{source}` is not valid JSONPath: {e}"))?;
        Ok(Expr {
            source: source.to_owned(),
            query,
        })
    }

    /// The first selected node that is neither `false` nor `null`, quoted for a message, or
    /// `None` if there is none. Selecting a literal `false` must not count: `$.status.applied`
    /// reading `false` would otherwise report Healthy.
    fn holds(&self, object: &Value) -> Result<Option<String>, String> {
        let nodes = js_path_process(&self.query, object).map_err(|e| e.to_string())?;
        Ok(nodes
            .into_iter()
            .map(|n| n.val)
            .find(|v| !matches!(v, Value::Null | Value::Bool(false)))
            .map(quote))
    }
}

/// A node as compact JSON, cut to [`MAX_QUOTE`] characters.
fn quote(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(MAX_QUOTE) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

struct Compiled {
    healthy: Option<Expr>,
    progressing: Option<Expr>,
    degraded: Option<Expr>,
}

impl Compiled {
    fn new(rule: &Rule) -> Result<Self, String> {
        let parse = |which, source: &Option<String>| {
            source.as_deref().map(|s| Expr::parse(which, s)).transpose()
        };
        Ok(Compiled {
            healthy: parse("healthy", &rule.healthy)?,
            progressing: parse("progressing", &rule.progressing)?,
            degraded: parse("degraded", &rule.degraded)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;

    fn fixture(yaml: &str) -> Value {
        serde_yaml::from_str(yaml).unwrap()
    }

    const AVAILABLE: &str = "$.status.conditions[?@.type=='Available' && @.status=='True']";

    fn rule(healthy: Option<&str>, progressing: Option<&str>, degraded: Option<&str>) -> Rule {
        Rule {
            healthy: healthy.map(Into::into),
            progressing: progressing.map(Into::into),
            degraded: degraded.map(Into::into),
        }
    }

    fn deployment(yaml: &str, r: &Rule) -> Verdict {
        check("Deployment", "cicd", "forgejo", Some(&fixture(yaml)), r)
    }

    const ROLLED_OUT: &str = include_str!("../../tests/fixtures/generic/deployment-available.yaml");
    const NEW_GENERATION: &str =
        include_str!("../../tests/fixtures/generic/deployment-generation-not-observed.yaml");
    const UNAVAILABLE: &str =
        include_str!("../../tests/fixtures/generic/deployment-unavailable.yaml");
    const HELMRELEASE_STALLED: &str =
        include_str!("../../tests/fixtures/generic/helmrelease-stalled.yaml");
    const KUSTOMIZATION_RECONCILING: &str =
        include_str!("../../tests/fixtures/generic/kustomization-reconciling.yaml");
    const CERTIFICATE_NOT_READY: &str =
        include_str!("../../tests/fixtures/generic/certificate-not-ready.yaml");
    const CONFIGMAP: &str = include_str!("../../tests/fixtures/generic/configmap.yaml");

    #[test]
    fn absent_object_is_missing() {
        let v = check("Deployment", "cicd", "forgejo", None, &Rule::default());
        assert_eq!(
            v,
            Verdict::missing("Deployment cicd/forgejo does not exist")
        );
    }

    #[test]
    fn healthy_expression_that_holds_is_healthy() {
        let v = deployment(ROLLED_OUT, &rule(Some(AVAILABLE), None, None));
        assert_eq!(v.status, HealthStatus::Healthy);
        assert!(
            v.message
                .starts_with("Deployment cicd/forgejo: healthy expression")
        );
    }

    #[test]
    fn healthy_expression_that_does_not_hold_is_progressing() {
        let v = deployment(UNAVAILABLE, &rule(Some(AVAILABLE), None, None));
        assert_eq!(
            v,
            Verdict::progressing(format!(
                "Deployment cicd/forgejo: healthy expression `{AVAILABLE}` does not hold yet"
            ))
        );
    }

    #[test]
    fn unobserved_generation_is_never_healthy() {
        let v = deployment(NEW_GENERATION, &rule(Some(AVAILABLE), None, None));
        assert_eq!(
            v,
            Verdict::progressing(
                "Deployment cicd/forgejo: generation 5 not observed yet (status.observedGeneration 4)"
            )
        );
    }

    #[test]
    fn degraded_expression_wins_over_progressing_and_healthy() {
        let r = rule(
            Some(AVAILABLE),
            Some("$.status[?@.unavailableReplicas > 0]"),
            Some(
                "$.status.conditions[?@.type=='Progressing' && @.reason=='ProgressDeadlineExceeded']",
            ),
        );
        let v = deployment(UNAVAILABLE, &r);
        assert_eq!(v.status, HealthStatus::Degraded);
        assert!(
            v.message.contains("ProgressDeadlineExceeded"),
            "{}",
            v.message
        );
        assert!(v.message.contains("cicd/forgejo"), "{}", v.message);
    }

    #[test]
    fn progressing_expression_holds_before_healthy_is_considered() {
        let r = rule(
            Some("$.status"),
            Some("$.status.conditions[?@.status=='False']"),
            None,
        );
        let v = deployment(UNAVAILABLE, &r);
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message.contains("progressing expression"),
            "{}",
            v.message
        );
    }

    #[test]
    fn selecting_a_false_value_does_not_hold() {
        let mut object = fixture(ROLLED_OUT);
        object["status"]["paused"] = false.into();
        let v = check(
            "Deployment",
            "cicd",
            "forgejo",
            Some(&object),
            &rule(Some("$.status.paused"), None, None),
        );
        assert_eq!(v.status, HealthStatus::Progressing);
    }

    #[test]
    fn stalled_condition_is_degraded_with_its_reason() {
        let v = check(
            "HelmRelease",
            "cicd",
            "forgejo",
            Some(&fixture(HELMRELEASE_STALLED)),
            &Rule::default(),
        );
        assert_eq!(v.status, HealthStatus::Degraded);
        assert!(
            v.message
                .starts_with("HelmRelease cicd/forgejo is stalled: InstallFailed: "),
            "{}",
            v.message
        );
    }

    #[test]
    fn reconciling_condition_is_progressing() {
        let v = check(
            "Kustomization",
            "flux-system",
            "apps",
            Some(&fixture(KUSTOMIZATION_RECONCILING)),
            &Rule::default(),
        );
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .starts_with("Kustomization flux-system/apps is reconciling: Progressing: "),
            "{}",
            v.message
        );
    }

    #[test]
    fn ready_false_is_progressing_with_reason_and_message() {
        let v = check(
            "Certificate",
            "cicd",
            "forgejo-tls",
            Some(&fixture(CERTIFICATE_NOT_READY)),
            &Rule::default(),
        );
        assert_eq!(
            v,
            Verdict::progressing(
                "Certificate cicd/forgejo-tls is not Ready: DoesNotExist: Issuing certificate as Secret does not exist"
            )
        );
    }

    #[test]
    fn no_expressions_and_no_failing_condition_is_healthy() {
        let v = check(
            "ConfigMap",
            "cicd",
            "forgejo-env",
            Some(&fixture(CONFIGMAP)),
            &Rule::default(),
        );
        assert_eq!(
            v,
            Verdict::healthy("ConfigMap cicd/forgejo-env exists and reports no failing condition")
        );
    }

    #[test]
    fn object_being_deleted_is_progressing() {
        let mut object = fixture(ROLLED_OUT);
        object["metadata"]["deletionTimestamp"] = "2025-12-19T17:00:00Z".into();
        let v = check(
            "Deployment",
            "cicd",
            "forgejo",
            Some(&object),
            &Rule::default(),
        );
        assert_eq!(
            v,
            Verdict::progressing("Deployment cicd/forgejo is being deleted")
        );
    }

    #[test]
    fn bad_expression_is_unknown_never_healthy() {
        let r = rule(Some("$.status[?@.ready =="), None, None);
        let v = deployment(ROLLED_OUT, &r);
        assert_eq!(v.status, HealthStatus::Unknown);
        assert!(
            v.message
                .starts_with("Deployment cicd/forgejo: healthy expression `$.status[?@.ready ==` is not valid JSONPath"),
            "{}",
            v.message
        );
        // Even an absent object: the rule itself is broken.
        assert_eq!(
            check("Deployment", "cicd", "x", None, &r).status,
            HealthStatus::Unknown
        );
    }

    #[test]
    fn validate_names_the_bad_expression() {
        assert_eq!(validate(&rule(Some(AVAILABLE), None, None)), Ok(()));
        let err = validate(&rule(Some(AVAILABLE), None, Some("status.phase"))).unwrap_err();
        assert!(
            err.starts_with("degraded expression `status.phase`"),
            "{err}"
        );
    }

    #[test]
    fn cluster_scoped_object_is_named_without_namespace() {
        let v = check("Namespace", "", "cicd", None, &Rule::default());
        assert_eq!(v.message, "Namespace cicd does not exist");
    }

    #[test]
    fn rule_deserializes_from_gate_spec_shape() {
        let r: Rule = serde_json::from_value(serde_json::json!({"healthy": AVAILABLE})).unwrap();
        assert_eq!(r, rule(Some(AVAILABLE), None, None));
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"healthy": AVAILABLE})
        );
    }

    #[test]
    fn condition_status_reads_metav1_conditions() {
        let object = fixture(CERTIFICATE_NOT_READY);
        assert_eq!(condition_status(&object, "Ready"), Some("False"));
        assert_eq!(condition_status(&object, "Issuing"), Some("True"));
        assert_eq!(condition_status(&object, "Stalled"), None);
    }

    #[test]
    fn filter_tests_the_members_of_the_node_it_follows() {
        // RFC 9535: `$.status[?…]` tests each member of status, not status itself, so a
        // number like availableReplicas is never `@` there. Filter on the parent instead.
        let object = fixture(ROLLED_OUT);
        let judge = |expr: &str| {
            check(
                "Deployment",
                "cicd",
                "forgejo",
                Some(&object),
                &rule(Some(expr), None, None),
            )
            .status
        };
        assert_eq!(
            judge("$.status[?@.availableReplicas > 0]"),
            HealthStatus::Progressing
        );
        assert_eq!(judge("$[?@.availableReplicas > 0]"), HealthStatus::Healthy);
    }
}
