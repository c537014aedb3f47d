//! The generic rule, for any kind: the Argo CD health script the user's Argo CD would run for
//! it ([`crate::argocd_lua`]: argocd-cm, then the release's bundled scripts), else Argo CD's
//! built-in health rules for the kinds it has them for ([`super::builtin`]), kstatus' generic
//! conditions for the rest, plus user-supplied
//! JSONPath (RFC 9535) expressions for healthy / progressing / degraded, in the spirit of Flux
//! `healthCheckExprs`.
//!
//! Expressions are typed: an expression holds when it selects at least one node and every
//! selected node is JSON `true` or an object/array (what a filter such as
//! `$.status.conditions[?@.type=='Ready' && @.status=='True']` selects). A selected `false`
//! means "does not hold". A selected string, number or `null` has no truth value — the string
//! "False" and the number 0 must not pass for true — so such an expression is an error
//! (Unknown) that asks for a comparison in a filter: `$[?@.status.phase=='Bound']`,
//! `$[?@.status.readyReplicas >= 2]`.
//!
//! Messages name the expression that matched, never the matched value: an expression can select
//! any field of the object (a pod's environment, a Secret reference), and verdicts are shown to
//! everyone who can see the gate or the Argo CD application.
//!
//! Expressions come from less trusted hands (anyone who may view an Argo CD application sends
//! them through the proxy; a tenant writes them into its own WaveGate), and RFC 9535 evaluation
//! is not bounded by the text's length: each descendant segment multiplies the nodes visited by
//! the object's size, and each selector of a union repeats the whole remaining query (RFC 9535
//! section 2.5: results are not de-duplicated), so `$..[*,*,*]..[*,*,*]..[*,*,*]` on one pod
//! visits billions of nodes. [`Bounds`] therefore limits the parsed query, not only its text,
//! to what keeps one evaluation linear in the object's size (times small constants), and
//! [`check_off_runtime`] evaluates on the blocking pool behind a small semaphore so that even
//! a slow one never holds an async worker (or `/healthz`).

use crate::argocd_lua::LuaHealth;
use crate::json::At;
use jsonpath_rust::parser::errors::JsonPathError;
use jsonpath_rust::parser::model::{
    Comparable, Comparison, FilterAtom, FnArg, JpQuery, Literal, Segment, Selector, Test,
    TestFunction,
};
use jsonpath_rust::parser::parse_json_path;
use jsonpath_rust::query::js_path_process;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::builtin;
use crate::health::{HealthStatus, Verdict};
use crate::resource::{InputError, Query};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// JSONPath (RFC 9535) expressions, each judged against the whole object as the API returns it.
/// An expression holds when it selects at least one node and every selected node is `true` or
/// an object/array; a selected `false` does not hold; a selected string, number or `null` is an
/// error (compare it in a filter instead). Write conditions as filters:
/// `$.status.conditions[?@.type=='Available' && @.status=='True']`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub(crate) struct Rule {
    /// Healthy only when this holds (and the kind's own rule and nothing below object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<String>,
    /// Progressing while this holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressing: Option<String>,
    /// Degraded (fails the Argo CD sync) while this holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

impl Rule {
    /// What a caller may set, as the HTTP API and `wavegate check -p` name it.
    pub(crate) const NAMES: &[&str] = &["healthy", "progressing", "degraded"];

    /// A rule whose every expression parses; the error names the bad one.
    pub(crate) fn new(
        healthy: Option<String>,
        progressing: Option<String>,
        degraded: Option<String>,
    ) -> Result<Rule, InputError> {
        let rule = Rule {
            healthy,
            progressing,
            degraded,
        };
        validate(&rule).map_err(|e| InputError::Parameter {
            name: "healthy/progressing/degraded".into(),
            reason: e.to_string(),
        })?;
        Ok(rule)
    }

    pub(crate) fn from_query(q: &Query) -> Result<Rule, InputError> {
        let text = |k: &str| q.text(k).map(str::to_string);
        Rule::new(text("healthy"), text("progressing"), text("degraded"))
    }
}

/// An expression of a rule that cannot be used; the message names it (which one, and its text
/// unless it is too long to quote).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RuleError {
    #[error(
        "{which} expression is {len} bytes long, more than the {} allowed",
        Bounds::MAX_BYTES
    )]
    TooLong { which: &'static str, len: usize },
    #[error("{which} expression `{expr}` is not valid JSONPath: {error}")]
    NotJsonPath {
        which: &'static str,
        expr: String,
        #[source]
        error: JsonPathError,
    },
    #[error("{which} expression `{expr}` {why}")]
    OverBudget {
        which: &'static str,
        expr: String,
        why: String,
    },
}

/// Why an expression cannot be judged on one object — naming the type of a selected scalar,
/// never its value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum HoldsError {
    #[error("failed: {0}")]
    Failed(JsonPathError),
    #[error(
        "selects {0}, which is neither true nor false; compare it in a filter, e.g. \
         `$[?@.status.phase=='Bound']` or `$[?@.status.readyReplicas >= 1]`"
    )]
    NotBoolean(&'static str),
}

/// Parse every expression of `rule`; the error names the bad one.
pub(crate) fn validate(rule: &Rule) -> Result<(), RuleError> {
    Compiled::new(rule).map(|_| ())
}

/// Judge `kind` `namespace/name` (namespace empty for cluster-scoped kinds) by `rule`. `kind`
/// is the resource as wavegate names it (`deployments.apps`, `pods`, `helmreleases.helm.
/// toolkit.fluxcd.io`); it selects the built-in rule, if any.
///
/// Order: a bad rule is Unknown whatever the object's state (a rule that cannot be evaluated
/// must never let a wave pass); then absence and deletion; then the kind's own rule — Argo CD's
/// for built-in kinds, kstatus' generic rules for the rest — which the expressions can only make
/// stricter; then degraded → progressing → healthy expressions.
#[cfg(test)]
pub(crate) fn check(
    kind: &str,
    namespace: &str,
    name: &str,
    object: Option<&Value>,
    rule: &Rule,
) -> Verdict {
    check_with(kind, namespace, name, object, rule, None).verdict
}

/// A verdict of the generic rule, and the Argo CD health script that gave the kind's own
/// verdict, if one did.
pub(crate) struct Judged {
    pub verdict: Verdict,
    pub script: Option<crate::argocd_lua::Script>,
}

/// [`check`], with the kind's own rule from Argo CD's health scripts when `lua` has one for the
/// object's `group/Kind` (argocd-cm, then the release's bundled scripts): Argo CD runs a kind's
/// script in place of its built-in Go rule (gitops-engine `GetResourceHealth`: the override
/// first), so wavegate does too, and uses its built-in rules and kstatus only for the rest.
pub(crate) fn check_with(
    kind: &str,
    namespace: &str,
    name: &str,
    object: Option<&Value>,
    rule: &Rule,
    lua: Option<&LuaHealth>,
) -> Judged {
    let mut script = None;
    let mut verdict = judge(kind, namespace, name, object, rule, lua, &mut script);
    // An expression's verdict replaces the script's, not what Argo CD said.
    if verdict.argo_status.is_none() {
        verdict.argo_status = script.as_ref().and_then(|(_, argo)| argo.clone());
    }
    Judged {
        verdict,
        script: script.map(|(s, _)| s),
    }
}

fn judge(
    kind: &str,
    namespace: &str,
    name: &str,
    object: Option<&Value>,
    rule: &Rule,
    lua: Option<&LuaHealth>,
    script: &mut Option<(
        crate::argocd_lua::Script,
        Option<crate::argocd_lua::ArgoHealth>,
    )>,
) -> Verdict {
    let id = id(kind, namespace, name);
    let compiled = match Compiled::new(rule) {
        Ok(c) => c,
        Err(e) => return Verdict::unknown(format!("{id}: {e}")),
    };
    let Some(object) = object else {
        return Verdict::missing(format!("{id} does not exist"));
    };
    // gitops-engine's GetResourceHealth: a deleting object is "Progressing: Pending deletion"
    // before any rule runs.
    if object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return Verdict::progressing(format!("{id} is being deleted"));
    }
    let scripted = lua.and_then(|lua| lua.judge(&id, object));
    let own = match scripted {
        Some((used, verdict)) => {
            *script = Some((used, verdict.argo_status.clone()));
            verdict
        }
        None => match builtin::judge(kind, &id, object) {
            Some(verdict) => verdict,
            None => kstatus(&id, object).unwrap_or_else(|| {
                Verdict::healthy(format!("{id} exists and reports no failing condition"))
            }),
        },
    };
    if own.status != HealthStatus::Healthy {
        return own;
    }

    let holds = |which: &str, expr: &Expr| -> Result<bool, Verdict> {
        expr.holds(object).map_err(|e| {
            Verdict::unknown(format!("{id}: {which} expression `{}` {e}", expr.source))
        })
    };
    if let Some(expr) = &compiled.degraded {
        match holds("degraded", expr) {
            Err(v) => return v,
            Ok(true) => {
                return Verdict::degraded(format!(
                    "{id}: degraded expression `{}` holds",
                    expr.source
                ));
            }
            Ok(false) => {}
        }
    }
    if let Some(expr) = &compiled.progressing {
        match holds("progressing", expr) {
            Err(v) => return v,
            Ok(true) => {
                return Verdict::progressing(format!(
                    "{id}: progressing expression `{}` holds",
                    expr.source
                ));
            }
            Ok(false) => {}
        }
    }
    match &compiled.healthy {
        Some(expr) => match holds("healthy", expr) {
            Err(v) => v,
            Ok(true) => {
                Verdict::healthy(format!("{id}: healthy expression `{}` holds", expr.source))
            }
            Ok(false) => Verdict::progressing(format!(
                "{id}: healthy expression `{}` does not hold yet",
                expr.source
            )),
        },
        None => own,
    }
}

fn id(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// kstatus' generic properties (sigs.k8s.io/cli-utils `pkg/kstatus/status/generic.go`,
/// `checkGenericProperties`): deletion, an unobserved generation, `Stalled` and `Reconciling`.
/// `Ready` is not a kstatus condition, but the convention most controllers follow (Flux,
/// Crossplane, cert-manager); only its `False`/`Unknown` are used, to hold a wave back.
fn kstatus(id: &str, object: &Value) -> Option<Verdict> {
    // Like kstatus' `checkGeneration`: only objects whose controller reports
    // observedGeneration can be stale in this sense.
    let generation = object.i64_at("/metadata/generation");
    let observed = object.i64_at("/status/observedGeneration");
    if let (Some(generation), Some(observed)) = (generation, observed)
        && observed != generation
    {
        return Some(Verdict::progressing(format!(
            "{id}: generation {generation} not observed yet (status.observedGeneration {observed})"
        )));
    }
    // A condition speaks for the generation in its own `observedGeneration` (metav1.Condition):
    // a Ready=True, or a Stalled=True, written for an older spec says nothing about this one.
    // Controllers that set only the conditions' observedGeneration (many kubebuilder ones) would
    // otherwise pass the check above with a stale verdict.
    if let Some(generation) = generation {
        for type_ in ["Stalled", "Reconciling", "Ready"] {
            if let Some(c) = condition(object, type_)
                && let Some(seen) = c.get("observedGeneration").and_then(Value::as_i64)
                && seen < generation
            {
                return Some(Verdict::progressing(format!(
                    "{id}: its {type_} condition describes generation {seen}, not {generation}"
                )));
            }
        }
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
        .array_at("/status/conditions")?
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

/// What one expression may ask for. Each limit is named in the error that enforces it.
pub(crate) struct Bounds;

impl Bounds {
    /// Bytes of one expression (also the CRD's `maxLength`). Real health expressions are a
    /// path and a filter, well under 200 bytes.
    pub(crate) const MAX_BYTES: usize = 512;
    /// Descendant segments (`..`) in the whole expression, filters included: one keeps the
    /// nodes visited linear in the object's size; two nest (every node's descendants).
    const MAX_DESCENDANTS: usize = 1;
    /// Selectors in one bracketed union (`[a,b,c]`).
    const MAX_UNION: usize = 8;
    /// The product of all unions' widths: how often a node can be selected again, since each
    /// selector of a union runs the rest of the query once more.
    const MAX_REPEATS: usize = 64;
    /// Filters nested in filters.
    const MAX_FILTER_DEPTH: usize = 3;
    /// `match()`/`search()` calls: each compiles its pattern again for every node it tests.
    const MAX_REGEX_CALLS: usize = 2;
    /// Bytes of one regular expression literal.
    const MAX_REGEX_BYTES: usize = 64;
}

/// What a parsed query asks for, summed over the whole tree.
#[derive(Default)]
struct Cost {
    descendants: usize,
    widest_union: usize,
    repeats: usize,
    filter_depth: usize,
    regex_calls: usize,
    longest_regex: usize,
}

impl Cost {
    fn of(query: &JpQuery) -> Cost {
        let mut cost = Cost {
            repeats: 1,
            ..Cost::default()
        };
        cost.segments(&query.segments, 0);
        cost
    }

    fn segments(&mut self, segments: &[Segment], depth: usize) {
        for s in segments {
            self.segment(s, depth);
        }
    }

    fn segment(&mut self, segment: &Segment, depth: usize) {
        match segment {
            Segment::Descendant(inner) => {
                self.descendants += 1;
                self.segment(inner, depth);
            }
            Segment::Selector(s) => self.selector(s, depth),
            Segment::Selectors(list) => {
                self.widest_union = self.widest_union.max(list.len());
                self.repeats = self.repeats.saturating_mul(list.len().max(1));
                for s in list {
                    self.selector(s, depth);
                }
            }
        }
    }

    fn selector(&mut self, selector: &Selector, depth: usize) {
        if let Selector::Filter(f) = selector {
            self.filter_depth = self.filter_depth.max(depth + 1);
            self.filter(f, depth + 1);
        }
    }

    fn filter(&mut self, filter: &jsonpath_rust::parser::model::Filter, depth: usize) {
        use jsonpath_rust::parser::model::Filter;
        match filter {
            Filter::Or(list) | Filter::And(list) => list.iter().for_each(|f| self.filter(f, depth)),
            Filter::Atom(atom) => match atom {
                FilterAtom::Filter { expr, .. } => self.filter(expr, depth),
                FilterAtom::Test { expr, .. } => self.test(expr, depth),
                FilterAtom::Comparison(c) => {
                    let (Comparison::Eq(a, b)
                    | Comparison::Ne(a, b)
                    | Comparison::Gt(a, b)
                    | Comparison::Gte(a, b)
                    | Comparison::Lt(a, b)
                    | Comparison::Lte(a, b)) = c.as_ref();
                    for side in [a, b] {
                        if let Comparable::Function(f) = side {
                            self.function(f, depth);
                        }
                    }
                }
            },
        }
    }

    fn test(&mut self, test: &Test, depth: usize) {
        match test {
            Test::RelQuery(segments) => self.segments(segments, depth),
            Test::AbsQuery(q) => self.segments(&q.segments, depth),
            Test::Function(f) => self.function(f, depth),
        }
    }

    fn function(&mut self, f: &TestFunction, depth: usize) {
        let args: Vec<&FnArg> = match f {
            TestFunction::Custom(_, args) => args.iter().collect(),
            TestFunction::Length(a) => vec![a.as_ref()],
            TestFunction::Value(a) | TestFunction::Count(a) => vec![a],
            TestFunction::Search(a, b) | TestFunction::Match(a, b) => {
                self.regex_calls += 1;
                if let FnArg::Literal(Literal::String(p)) = b {
                    self.longest_regex = self.longest_regex.max(p.len());
                }
                vec![a, b]
            }
        };
        for a in args {
            match a {
                FnArg::Literal(_) => {}
                FnArg::Test(t) => self.test(t, depth),
                FnArg::Filter(f) => self.filter(f, depth),
            }
        }
    }

    /// The first limit this query is over, as the message that names it.
    fn over(&self) -> Option<String> {
        let b = |what: &str, n: usize, max: usize, advice: &str| {
            (n > max).then(|| format!("has {n} {what}, more than the {max} allowed; {advice}"))
        };
        b(
            "descendant segments (`..`)",
            self.descendants,
            Bounds::MAX_DESCENDANTS,
            "name the path to the field instead",
        )
        .or_else(|| {
            b(
                "selectors in one union",
                self.widest_union,
                Bounds::MAX_UNION,
                "use a filter",
            )
        })
        .or_else(|| {
            (self.repeats > Bounds::MAX_REPEATS).then(|| {
                format!(
                    "repeats every selected node {} times (the product of its unions' widths),                      more than the {} allowed",
                    self.repeats,
                    Bounds::MAX_REPEATS
                )
            })
        })
        .or_else(|| {
            b(
                "levels of nested filters",
                self.filter_depth,
                Bounds::MAX_FILTER_DEPTH,
                "flatten the filter",
            )
        })
        .or_else(|| {
            (self.descendants > 0 && self.regex_calls > 0).then(|| {
                "uses match()/search() together with a descendant segment (`..`), which compiles \
                 the regular expression again for every node of the object; name the path to \
                 the field instead"
                    .to_string()
            })
        })
        .or_else(|| {
            b(
                "match()/search() calls",
                self.regex_calls,
                Bounds::MAX_REGEX_CALLS,
                "compare with == where you can",
            )
        })
        .or_else(|| {
            b(
                "bytes in a regular expression",
                self.longest_regex,
                Bounds::MAX_REGEX_BYTES,
                "shorten the pattern",
            )
        })
    }
}

/// Evaluations running at once on the blocking pool, for every caller together: enough for
/// gates and API reads to progress, few enough that costly expressions cannot take every core.
const CONCURRENT_EVALUATIONS: usize = 2;

static EVALUATIONS: std::sync::LazyLock<Arc<Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(Semaphore::new(CONCURRENT_EVALUATIONS)));

/// [`check`], off the async workers: on the blocking pool, at most [`CONCURRENT_EVALUATIONS`]
/// at once (others wait their turn, within the caller's own timeout).
/// A Lua health script runs here too: its instruction, memory and time bounds keep one run
/// short, and the semaphore keeps hostile scripts from taking more than these threads.
pub(crate) async fn check_off_runtime(
    kind: String,
    namespace: String,
    name: String,
    object: Option<Arc<Value>>,
    rule: Rule,
    lua: Option<Arc<LuaHealth>>,
) -> Judged {
    let id = id(&kind, &namespace, &name);
    let unknown = |why: String| Judged {
        verdict: Verdict::unknown(why),
        script: None,
    };
    let Ok(permit) = EVALUATIONS.clone().acquire_owned().await else {
        return unknown(format!("{id}: expression evaluation is shutting down"));
    };
    let judged = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        check_with(
            &kind,
            &namespace,
            &name,
            object.as_deref(),
            &rule,
            lua.as_deref(),
        )
    })
    .await;
    judged.unwrap_or_else(|e| unknown(format!("{id}: evaluating the rule failed: {e}")))
}

struct Expr {
    source: String,
    query: JpQuery,
}

impl Expr {
    fn parse(which: &'static str, source: &str) -> Result<Self, RuleError> {
        if source.len() > Bounds::MAX_BYTES {
            // Not quoted: the message would be as long as the expression.
            return Err(RuleError::TooLong {
                which,
                len: source.len(),
            });
        }
        let query = parse_json_path(source).map_err(|error| RuleError::NotJsonPath {
            which,
            expr: source.to_string(),
            error,
        })?;
        if let Some(why) = Cost::of(&query).over() {
            return Err(RuleError::OverBudget {
                which,
                expr: source.to_string(),
                why,
            });
        }
        Ok(Expr {
            source: source.to_owned(),
            query,
        })
    }

    /// Whether the expression holds (see [`Rule`]): at least one node selected, all of them
    /// `true` or objects/arrays. `Err` says why it cannot be judged — naming the type of a
    /// selected scalar, never its value.
    fn holds(&self, object: &Value) -> Result<bool, HoldsError> {
        let nodes = js_path_process(&self.query, object).map_err(HoldsError::Failed)?;
        let mut any = false;
        let mut all = true;
        for node in nodes {
            let kind = match node.val {
                Value::Bool(b) => {
                    all &= *b;
                    any = true;
                    continue;
                }
                Value::Object(_) | Value::Array(_) => {
                    any = true;
                    continue;
                }
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Null => "null",
            };
            return Err(HoldsError::NotBoolean(kind));
        }
        Ok(any && all)
    }
}

struct Compiled {
    healthy: Option<Expr>,
    progressing: Option<Expr>,
    degraded: Option<Expr>,
}

impl Compiled {
    fn new(rule: &Rule) -> Result<Self, RuleError> {
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
pub(crate) mod tests {
    use super::*;
    use crate::health::HealthStatus;

    use crate::checks::fixtures::object as fixture;

    const AVAILABLE: &str = "$.status.conditions[?@.type=='Available' && @.status=='True']";

    fn rule(healthy: Option<&str>, progressing: Option<&str>, degraded: Option<&str>) -> Rule {
        Rule {
            healthy: healthy.map(Into::into),
            progressing: progressing.map(Into::into),
            degraded: degraded.map(Into::into),
        }
    }

    /// Expression semantics on a kind without a built-in rule (wavegate names real Deployments
    /// `deployments.apps`, which Argo CD's Deployment rule judges first).
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
        let err = validate(&rule(Some(AVAILABLE), None, Some("status.phase")))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("degraded expression `status.phase`"),
            "{err}"
        );
    }

    /// An expression that explodes without the bounds: nested descendant segments of wide unions, about
    /// 200 bytes, which evaluated for seconds and allocated hundreds of MiB on one pod.
    pub(crate) fn exploding_expression() -> String {
        let union = format!("[{}]", ["*"; 30].join(","));
        format!("${union}..{union}..{union}").replacen("$[", "$..[", 1)
    }

    #[test]
    fn nested_descendants_of_wide_unions_are_refused_before_evaluation() {
        let attack = exploding_expression();
        assert!(attack.len() < 250, "{}", attack.len());
        let err = validate(&rule(Some(&attack), None, None))
            .unwrap_err()
            .to_string();
        assert!(err.contains("descendant segments"), "{err}");
        // Each limit on its own, each named.
        let cases = [
            ("$..a..b", "descendant segments"),
            ("$..[?match(@.a,'x')]", "together with a descendant segment"),
            (
                "$.spec['a','b','c','d','e','f','g','h','i']",
                "selectors in one union",
            ),
            (
                "$[*,*,*,*][*,*,*,*][*,*,*,*][*,*]",
                "repeats every selected node 128 times",
            ),
            ("$[?@[?@[?@[?@.a]]]]", "levels of nested filters"),
            (
                "$[?match(@.a,'x') && search(@.b,'y') && match(@.c,'z')]",
                "match()/search() calls",
            ),
            (
                "$[?match(@.a,'(a|aa)+(b|bb)+(c|cc)+(d|dd)+(e|ee)+(f|ff)+(g|gg)+(h|hh)+(i|ii)+(j|jj)+')]",
                "bytes in a regular expression",
            ),
        ];
        for (expr, limit) in cases {
            let err = validate(&rule(None, Some(expr), None))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(&format!("progressing expression `{expr}`")) && err.contains(limit),
                "{expr}: {err}"
            );
        }
        // A gate or a request with it is never judged Healthy.
        let v = deployment(ROLLED_OUT, &rule(Some(&attack), None, None));
        assert_eq!(v.status, HealthStatus::Unknown, "{}", v.message);
    }

    #[test]
    fn a_union_of_many_repeated_names_is_refused_by_length() {
        let attack = format!(
            "$[{}]",
            std::iter::repeat_n("'a'", 100_000)
                .collect::<Vec<_>>()
                .join(",")
        );
        let started = std::time::Instant::now();
        let err = Rule::new(Some(attack), None, None).unwrap_err().to_string();
        assert!(
            err.contains("bytes long, more than the 512 allowed"),
            "{err}"
        );
        assert!(
            !err.contains("'a','a'"),
            "the expression is not echoed: {err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_millis(50));
    }

    #[test]
    fn everyday_expressions_stay_within_the_bounds() {
        for expr in [
            AVAILABLE,
            "$..conditions[?@.type=='Ready' && @.status=='True']",
            "$.status.conditions[?@.type=='Ready' || @.type=='Available'][?@.status=='True']",
            "$[?@.status.phase=='Bound']",
            "$[?@.status.readyReplicas >= 2]",
            "$.status[?match(@.phase, 'Succeeded|Running')]",
            "$.spec.containers[0,1]",
        ] {
            assert_eq!(validate(&rule(Some(expr), None, None)), Ok(()), "{expr}");
        }
    }

    /// The costliest expressions the bounds admit, on a large object, end: one descendant
    /// segment with a filter and 64 repeats; regular expressions on one wide array. (The
    /// refused ones ran for minutes and gigabytes; the bound here only guards against that,
    /// the cost itself is measured in benches/expressions.rs.)
    #[test]
    fn the_costliest_admitted_expressions_end() {
        let items: Vec<Value> = (0..2_000)
            .map(|i| serde_json::json!({"name": format!("c{i}"), "env": [{"name": "A", "value": "x"}]}))
            .collect();
        let object = serde_json::json!({"metadata": {"name": "big"}, "spec": {"items": items}});
        for expr in [
            "$..[?@.name=='c1' || @.value=='x'][*,*,*,*,*,*,*,*][*,*,*,*,*,*,*,*]",
            "$.spec.items[?match(@.name,'c1[0-9]+') && search(@.name,'9')].env[*,*,*,*,*,*,*,*]",
        ] {
            let started = std::time::Instant::now();
            let v = check(
                "Widget",
                "cicd",
                "big",
                Some(&object),
                &rule(Some(expr), None, None),
            );
            assert_ne!(v.status, HealthStatus::Unknown, "{expr}: {}", v.message);
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "{expr}: {:?}",
                started.elapsed()
            );
        }
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

    // ---- A Deployment with no expressions, and kinds off the allow-list ----

    fn generic(resource: &str, yaml: &str, r: &Rule) -> Verdict {
        let object = fixture(yaml);
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        check(resource, &ns, &name, Some(&object), r)
    }

    #[test]
    fn deployment_past_its_progress_deadline_with_no_available_replica_is_not_healthy() {
        // The bare `resource` check and the waves view: no expressions at all.
        let v = generic("deployments.apps", UNAVAILABLE, &Rule::default());
        assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
        assert!(
            v.message.contains("exceeded its progress deadline"),
            "{}",
            v.message
        );
    }

    #[test]
    fn deployment_with_no_status_at_all_is_not_healthy() {
        let v = generic(
            "deployments.apps",
            include_str!("../../tests/fixtures/generic/deployment-no-status.yaml"),
            &Rule::default(),
        );
        assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    }

    #[test]
    fn rolled_out_deployment_is_healthy_by_argo_cds_rule() {
        let v = generic("deployments.apps", ROLLED_OUT, &Rule::default());
        assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
    }

    #[test]
    fn ready_true_condition_of_an_older_generation_is_not_healthy() {
        let v = generic(
            "certificates.cert-manager.io",
            include_str!(
                "../../tests/fixtures/generic/certificate-ready-for-older-generation.yaml"
            ),
            &Rule::default(),
        );
        assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
        assert!(
            v.message
                .contains("Ready condition describes generation 2, not 3"),
            "{}",
            v.message
        );
    }

    #[test]
    fn stalled_condition_of_an_older_generation_is_not_degraded() {
        let mut object = fixture(HELMRELEASE_STALLED);
        object["metadata"]["generation"] = 3.into();
        object["status"]["observedGeneration"] = 3.into();
        object["status"]["conditions"][1]["observedGeneration"] = 2.into();
        let v = check(
            "helmreleases.helm.toolkit.fluxcd.io",
            "cicd",
            "forgejo",
            Some(&object),
            &Rule::default(),
        );
        assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    }

    #[test]
    fn healthy_expression_selecting_the_string_false_is_not_healthy() {
        let mut object = fixture(CONFIGMAP);
        object["data"] = serde_json::json!({"ready": "False"});
        let v = check(
            "configmaps",
            "cicd",
            "forgejo-env",
            Some(&object),
            &rule(Some("$.data.ready"), None, None),
        );
        assert_eq!(v.status, HealthStatus::Unknown, "{}", v.message);
        assert!(v.message.contains("selects a string"), "{}", v.message);
        assert!(
            !v.message.contains("False"),
            "quotes the value: {}",
            v.message
        );
    }

    #[test]
    fn healthy_expression_selecting_the_number_zero_is_not_healthy() {
        let v = deployment(
            ROLLED_OUT,
            &rule(Some("$.status.observedGeneration"), None, None),
        );
        assert_ne!(v.status, HealthStatus::Healthy, "{}", v.message);
        let mut object = fixture(ROLLED_OUT);
        object["status"]["unavailableReplicas"] = 0.into();
        let v = check(
            "Deployment",
            "cicd",
            "forgejo",
            Some(&object),
            &rule(Some("$.status.unavailableReplicas"), None, None),
        );
        assert_eq!(v.status, HealthStatus::Unknown, "{}", v.message);
        assert!(v.message.contains("selects a number"), "{}", v.message);
    }

    #[test]
    fn healthy_expression_needs_every_selected_boolean_true() {
        let mut object = fixture(CONFIGMAP);
        object["data"] = serde_json::json!({"a": {"ok": true}, "b": {"ok": false}});
        let judge = |expr: &str| {
            check(
                "configmaps",
                "cicd",
                "x",
                Some(&object),
                &rule(Some(expr), None, None),
            )
            .status
        };
        assert_eq!(judge("$.data.a.ok"), HealthStatus::Healthy);
        assert_eq!(judge("$.data.*.ok"), HealthStatus::Progressing);
        assert_eq!(judge("$.data.missing"), HealthStatus::Progressing);
    }

    #[test]
    fn degraded_and_progressing_messages_never_quote_the_matched_value() {
        let secret = "hunter2-do-not-leak";
        let pod = include_str!("../../tests/fixtures/generic/pod-with-secret-env.yaml");
        for (r, want) in [
            (
                rule(None, None, Some("$.spec.containers[*].env")),
                HealthStatus::Degraded,
            ),
            (
                rule(
                    None,
                    None,
                    Some("$.spec.containers[*].env[?@.name=='FORGEJO__database__PASSWD']"),
                ),
                HealthStatus::Degraded,
            ),
            (
                rule(None, Some("$.spec.containers[*].env"), None),
                HealthStatus::Progressing,
            ),
            (
                rule(Some("$.spec.containers[*].env[*].value"), None, None),
                HealthStatus::Unknown,
            ),
        ] {
            let v = generic("pods", pod, &r);
            assert_eq!(v.status, want, "{}", v.message);
            assert!(
                !v.message.contains(secret),
                "leaks the value: {}",
                v.message
            );
        }
    }

    // ---- kstatus rules against a plain reference ----

    /// One generated condition: type, status, own observedGeneration.
    type Cond = (&'static str, &'static str, Option<i64>);

    /// kstatus as documented in docs/contracts.md, written without the check's code:
    /// (may it be Healthy, may it be Degraded).
    fn oracle_kstatus(
        generation: Option<i64>,
        observed: Option<i64>,
        conds: &[Cond],
    ) -> (bool, bool) {
        let first = |t: &str| conds.iter().find(|c| c.0 == t);
        let current = |c: &Cond| match (generation, c.2) {
            (Some(g), Some(o)) => o >= g,
            _ => true,
        };
        let observed_ok = match (generation, observed) {
            (Some(g), Some(o)) => o == g,
            _ => true,
        };
        let all_current = ["Stalled", "Reconciling", "Ready"]
            .iter()
            .filter_map(|t| first(t))
            .all(current);
        let stalled = first("Stalled").is_some_and(|c| c.1 == "True");
        let reconciling = first("Reconciling").is_some_and(|c| c.1 == "True");
        let not_ready = first("Ready").is_some_and(|c| c.1 == "False" || c.1 == "Unknown");
        let healthy = observed_ok && all_current && !stalled && !reconciling && !not_ready;
        let degraded = observed_ok && all_current && stalled;
        (healthy, degraded)
    }

    proptest::proptest! {
        #![proptest_config(crate::testing::proptest_config::config(2000))]

        /// Never Healthy where the reference says not ready, never Degraded without its
        /// definite failure (a current Stalled=True), for kinds without a built-in rule.
        #[test]
        fn kstatus_rules_never_say_more_than_the_reference(
            generation in proptest::option::of(1i64..4),
            observed in proptest::option::of(1i64..4),
            conds in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["Ready", "Stalled", "Reconciling", "Synced"]),
                    proptest::sample::select(vec!["True", "False", "Unknown"]),
                    proptest::option::of(1i64..4),
                ),
                0..4,
            ),
        ) {
            let mut object = serde_json::json!({"metadata": {}, "status": {}});
            if let Some(g) = generation { object["metadata"]["generation"] = g.into(); }
            if let Some(o) = observed { object["status"]["observedGeneration"] = o.into(); }
            let list: Vec<Value> = conds.iter().map(|(t, st, og)| {
                let mut c = serde_json::json!({"type": t, "status": st});
                if let Some(og) = og { c["observedGeneration"] = (*og).into(); }
                c
            }).collect();
            object["status"]["conditions"] = Value::Array(list);
            let v = check("widgets.example.com", "ns", "w", Some(&object), &Rule::default());
            let (may_be_healthy, may_be_degraded) = oracle_kstatus(generation, observed, &conds);
            if v.status == HealthStatus::Healthy {
                proptest::prop_assert!(may_be_healthy, "{} for {}", v.message, object);
            }
            if v.status == HealthStatus::Degraded {
                proptest::prop_assert!(may_be_degraded, "{} for {}", v.message, object);
            }
            if may_be_healthy {
                proptest::prop_assert_eq!(v.status, HealthStatus::Healthy, "{}", object);
            }
        }
    }
}
