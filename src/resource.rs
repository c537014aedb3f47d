//! The bottom layer: how wavegate names kinds and objects. A resource named the way kubectl
//! names it ([`CheckKind`], whose dedicated kinds are the rows of [`registry`]), a kind as the API server serves it ([`GroupResource`]), an object name that is
//! a well-formed Kubernetes name, and a caller's `key=value` parameters ([`Query`]). Everything a
//! client sends is parsed here first, so the rest of wavegate only ever sees valid targets.

pub mod registry;

use registry::KindSpec;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A kind as the API server serves it: API group (`""` for the core group) and plural. The
/// cache's change feed and the dependency index name what changed by it, so a spelling
/// mismatch is a type error, not a lost wake-up.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: Cow<'static, str>,
    pub plural: Cow<'static, str>,
}

impl GroupResource {
    pub(crate) const PODS: GroupResource = GroupResource::fixed("", "pods");
    pub(crate) const SERVICES: GroupResource = GroupResource::fixed("", "services");
    pub(crate) const ENDPOINT_SLICES: GroupResource =
        GroupResource::fixed("discovery.k8s.io", "endpointslices");

    pub(crate) const fn fixed(group: &'static str, plural: &'static str) -> GroupResource {
        GroupResource {
            group: Cow::Borrowed(group),
            plural: Cow::Borrowed(plural),
        }
    }

    pub(crate) fn new(group: &str, plural: &str) -> GroupResource {
        GroupResource {
            group: Cow::Owned(group.to_string()),
            plural: Cow::Owned(plural.to_string()),
        }
    }
}

/// kubectl-style: `pods`, `wavegates.wavegate.dev`.
impl fmt::Display for GroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

/// One managed resource of an Argo CD Application, as `status.resources[]` lists it: by kind,
/// not plural (`ResourceStatus` in argo-cd pkg/apis/application/v1alpha1/types.go).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceRef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// A resource kind wavegate can judge: one with a dedicated check (a row of [`registry`]), or
/// any other, judged by the generic rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CheckKind {
    /// A kind of [`registry::KINDS`] (`CheckKind::SERVICE`, …).
    Dedicated(&'static KindSpec),
    /// Any other kind, named `plural` (core group) or `plural.group`; judged by kstatus rules and
    /// optional JSONPath expressions.
    Generic { group: String, plural: String },
}

impl CheckKind {
    /// The kinds with a check of their own (everything else is [`CheckKind::Generic`]).
    pub(crate) fn dedicated_kinds() -> impl Iterator<Item = CheckKind> {
        registry::KINDS.iter().map(CheckKind::Dedicated)
    }

    /// The dedicated kinds annotation mode writes verdicts on: those with a Lua script in
    /// `argocd/resource_customizations/` that reads them back. (A DatabaseRole has none yet;
    /// gates and the HTTP API judge it.)
    pub(crate) fn annotated() -> impl Iterator<Item = CheckKind> {
        CheckKind::dedicated_kinds().filter(|k| k.spec().is_some_and(|s| s.annotated))
    }

    /// The dedicated resource Argo CD lists as `group`/`kind` in an Application's status.
    pub(crate) fn dedicated(group: &str, kind: &str) -> Option<CheckKind> {
        CheckKind::dedicated_in(registry::KINDS, group, kind)
    }

    /// [`CheckKind::dedicated`] among a table of kinds.
    pub(crate) fn dedicated_in(
        kinds: &'static [KindSpec],
        group: &str,
        kind: &str,
    ) -> Option<CheckKind> {
        registry::by_group_kind_in(kinds, group, kind).map(CheckKind::Dedicated)
    }

    /// The registry's row, for a dedicated kind.
    pub(crate) fn spec(&self) -> Option<&'static KindSpec> {
        match self {
            CheckKind::Dedicated(spec) => Some(spec),
            CheckKind::Generic { .. } => None,
        }
    }

    /// Group and Kind (as Argo CD and owner references name it) of a dedicated resource.
    pub(crate) fn group_kind(&self) -> (&str, &str) {
        let kind = self.spec().map_or("", |s| s.kind);
        (self.group_plural().0, kind)
    }

    /// The kind as the API server serves it.
    pub(crate) fn kind(&self) -> GroupResource {
        match self {
            CheckKind::Dedicated(spec) => GroupResource::fixed(spec.group, spec.plural),
            CheckKind::Generic { group, plural } => GroupResource::new(group, plural),
        }
    }

    /// Parse a kubectl-style resource name: `services`, `svc`, `databases.postgresql.cnpg.io`,
    /// `deployments.apps`. Short names are accepted only for the kinds wavegate knows, because
    /// resolving arbitrary short names would need discovery on every request.
    pub(crate) fn parse(s: &str) -> Result<CheckKind, InputError> {
        CheckKind::parse_in(registry::KINDS, s)
    }

    /// [`CheckKind::parse`] with `kinds` as the kinds that have a check of their own.
    pub(crate) fn parse_in(kinds: &'static [KindSpec], s: &str) -> Result<CheckKind, InputError> {
        let lower = s.to_ascii_lowercase();
        if let Some(spec) = registry::by_name_in(kinds, &lower) {
            return Ok(CheckKind::Dedicated(spec));
        }
        let (plural, group) = match lower.split_once('.') {
            Some((p, g)) => (p, g),
            None => (lower.as_str(), ""),
        };
        if !is_dns_label(plural) || (!group.is_empty() && !is_dns_subdomain(group)) {
            return Err(InputError::Resource(s.to_string()));
        }
        Ok(CheckKind::Generic {
            group: group.to_string(),
            plural: plural.to_string(),
        })
    }

    /// Group and plural, as used for discovery and in messages.
    pub(crate) fn group_plural(&self) -> (&str, &str) {
        match self {
            CheckKind::Dedicated(spec) => (spec.group, spec.plural),
            CheckKind::Generic { group, plural } => (group, plural),
        }
    }
}

impl fmt::Display for CheckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group_plural() {
            ("", plural) => f.write_str(plural),
            (group, plural) => write!(f, "{plural}.{group}"),
        }
    }
}

/// One object to judge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    pub resource: CheckKind,
    pub namespace: String,
    pub name: String,
}

impl Target {
    pub(crate) fn new(
        resource: CheckKind,
        namespace: &str,
        name: &str,
    ) -> Result<Target, InputError> {
        validate_namespace(namespace)?;
        validate_name(name)?;
        Ok(Target {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.resource, self.namespace, self.name)
    }
}

/// A caller's `key=value` check parameters (an HTTP query, `wavegate check -p`), read by the
/// check they belong to: each check's parameters parse and validate themselves from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Query<'a>(pub &'a HashMap<String, String>);

impl Query<'_> {
    /// Refuse any parameter `resource` does not take, so a typo never silently weakens a check.
    pub(crate) fn only(&self, resource: &CheckKind, allowed: &[&str]) -> Result<(), InputError> {
        match self.0.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(InputError::Parameter {
                name: k.clone(),
                reason: format!(
                    "not a parameter of {resource} (allowed: {})",
                    if allowed.is_empty() {
                        "none".to_string()
                    } else {
                        allowed.join(", ")
                    }
                ),
            }),
        }
    }

    pub(crate) fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Parameter `name` parsed as `T`, if given.
    pub(crate) fn parse<T: FromStr>(&self, name: &str) -> Result<Option<T>, InputError>
    where
        T::Err: fmt::Display,
    {
        self.text(name)
            .map(|v| {
                v.parse::<T>().map_err(|e| InputError::Parameter {
                    name: name.to_string(),
                    reason: format!("{v:?}: {e}"),
                })
            })
            .transpose()
    }
}

/// Input a client sent that wavegate will not act on. Each becomes a 4xx with this message.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InputError {
    #[error(
        "{0:?} is not a resource name (expected e.g. services or databases.postgresql.cnpg.io)"
    )]
    Resource(String),
    #[error(
        "{0:?} is not a valid namespace (RFC 1123 label: lowercase letters, digits and '-', at most 63)"
    )]
    Namespace(String),
    #[error(
        "{0:?} is not a valid object name (RFC 1123 subdomain: lowercase letters, digits, '-' and '.', at most 253)"
    )]
    Name(String),
    #[error("invalid parameter {name}: {reason}")]
    Parameter { name: String, reason: String },
}

pub(crate) fn validate_namespace(ns: &str) -> Result<(), InputError> {
    if is_dns_label(ns) {
        Ok(())
    } else {
        Err(InputError::Namespace(ns.to_string()))
    }
}

pub(crate) fn validate_name(name: &str) -> Result<(), InputError> {
    if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(InputError::Name(name.to_string()))
    }
}

/// RFC 1123 label, as Kubernetes' `IsDNS1123Label` (apimachinery validation).
/// RFC 1123 label, as Kubernetes' `IsDNS1123Label`.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain, as Kubernetes' `IsDNS1123Subdomain`.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_names_resolve_to_known_checks() {
        assert_eq!(CheckKind::parse("services"), Ok(CheckKind::SERVICE));
        assert_eq!(CheckKind::parse("svc"), Ok(CheckKind::SERVICE));
        assert_eq!(
            CheckKind::parse("databases.postgresql.cnpg.io"),
            Ok(CheckKind::CNPG_DATABASE)
        );
        assert_eq!(
            CheckKind::parse("DatabaseRoles.postgresql.cnpg.io"),
            Ok(CheckKind::CNPG_DATABASE_ROLE)
        );
        assert_eq!(
            CheckKind::parse("crdbclusters.crdb.cockroachlabs.com"),
            Ok(CheckKind::CRDB_CLUSTER)
        );
        assert_eq!(
            CheckKind::parse("deployments.apps"),
            Ok(CheckKind::Generic {
                group: "apps".into(),
                plural: "deployments".into()
            })
        );
    }

    #[test]
    fn path_tricks_and_bad_names_are_rejected() {
        assert!(CheckKind::parse("../etc").is_err());
        assert!(CheckKind::parse("").is_err());
        assert!(Target::new(CheckKind::SERVICE, "Cicd", "forgejo").is_err());
        assert!(Target::new(CheckKind::SERVICE, "cicd", "forgejo/..").is_err());
        assert!(Target::new(CheckKind::SERVICE, "cicd", &"a".repeat(254)).is_err());
        assert!(Target::new(CheckKind::SERVICE, "cicd", "forgejo.v2").is_ok());
    }

    /// Annotation mode writes verdicts only where a Lua script reads them back: a kind in
    /// `annotated()` without one would carry annotations Argo CD ignores, and one with a script
    /// but left out would never be written, so its script would wait forever.
    #[test]
    fn annotated_kinds_are_the_dedicated_kinds_with_a_lua_script() {
        let scripts =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("argocd/resource_customizations");
        let with_script: Vec<CheckKind> = CheckKind::dedicated_kinds()
            .filter(|r| {
                let (group, kind) = r.group_kind();
                let dir = if group.is_empty() {
                    kind.to_string()
                } else {
                    format!("{group}/{kind}")
                };
                scripts.join(dir).join("health.lua").is_file()
            })
            .collect();
        assert_eq!(with_script, CheckKind::annotated().collect::<Vec<_>>());
        assert!(!CheckKind::annotated().any(|k| k == CheckKind::CNPG_DATABASE_ROLE));
        let (group, kind) = CheckKind::CNPG_DATABASE_ROLE.group_kind();
        assert_eq!(
            CheckKind::dedicated(group, kind),
            Some(CheckKind::CNPG_DATABASE_ROLE)
        );
    }
}
