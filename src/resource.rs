//! What a caller may ask about: a resource named the way kubectl names it, and an object name
//! that is a well-formed Kubernetes name. Everything a client sends is parsed here first, so the
//! rest of wavegate only ever sees valid targets.

use std::fmt;
use thiserror::Error;

/// A resource kind wavegate can judge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Core `Service`, judged by its selector, pods and EndpointSlices.
    Service,
    /// CloudNativePG `Database` (postgresql.cnpg.io).
    CnpgDatabase,
    /// CockroachDB operator `CrdbCluster` (crdb.cockroachlabs.com).
    CrdbCluster,
    /// Argo CD `Application` (argoproj.io), for app-of-apps.
    Application,
    /// Any other kind, named `plural` (core group) or `plural.group`; judged by kstatus rules and
    /// optional JSONPath expressions.
    Generic { group: String, plural: String },
}

impl Resource {
    pub const CNPG_GROUP: &'static str = "postgresql.cnpg.io";
    pub const CRDB_GROUP: &'static str = "crdb.cockroachlabs.com";
    pub const ARGO_GROUP: &'static str = "argoproj.io";

    /// Parse a kubectl-style resource name: `services`, `svc`, `databases.postgresql.cnpg.io`,
    /// `deployments.apps`. Short names are accepted only for the kinds wavegate knows, because
    /// resolving arbitrary short names would need discovery on every request.
    pub fn parse(s: &str) -> Result<Resource, InputError> {
        let lower = s.to_ascii_lowercase();
        let known = match lower.as_str() {
            "services" | "service" | "svc" => Some(Resource::Service),
            "databases.postgresql.cnpg.io" | "database.postgresql.cnpg.io" => {
                Some(Resource::CnpgDatabase)
            }
            "crdbclusters.crdb.cockroachlabs.com" | "crdbcluster.crdb.cockroachlabs.com" => {
                Some(Resource::CrdbCluster)
            }
            "applications.argoproj.io" | "application.argoproj.io" | "app.argoproj.io" => {
                Some(Resource::Application)
            }
            _ => None,
        };
        if let Some(r) = known {
            return Ok(r);
        }
        let (plural, group) = match lower.split_once('.') {
            Some((p, g)) => (p, g),
            None => (lower.as_str(), ""),
        };
        if !is_dns_label(plural) || (!group.is_empty() && !is_dns_subdomain(group)) {
            return Err(InputError::Resource(s.to_string()));
        }
        Ok(Resource::Generic {
            group: group.to_string(),
            plural: plural.to_string(),
        })
    }

    /// Group and plural, as used for discovery and in messages.
    pub fn group_plural(&self) -> (&str, &str) {
        match self {
            Resource::Service => ("", "services"),
            Resource::CnpgDatabase => (Self::CNPG_GROUP, "databases"),
            Resource::CrdbCluster => (Self::CRDB_GROUP, "crdbclusters"),
            Resource::Application => (Self::ARGO_GROUP, "applications"),
            Resource::Generic { group, plural } => (group, plural),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group_plural() {
            ("", plural) => f.write_str(plural),
            (group, plural) => write!(f, "{plural}.{group}"),
        }
    }
}

/// One object to judge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub resource: Resource,
    pub namespace: String,
    pub name: String,
}

impl Target {
    pub fn new(resource: Resource, namespace: &str, name: &str) -> Result<Target, InputError> {
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

pub fn validate_namespace(ns: &str) -> Result<(), InputError> {
    if is_dns_label(ns) {
        Ok(())
    } else {
        Err(InputError::Namespace(ns.to_string()))
    }
}

pub fn validate_name(name: &str) -> Result<(), InputError> {
    if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(InputError::Name(name.to_string()))
    }
}

/// RFC 1123 label, as Kubernetes' `IsDNS1123Label` (apimachinery validation).
fn is_dns_label(s: &str) -> bool {
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
        assert_eq!(Resource::parse("services"), Ok(Resource::Service));
        assert_eq!(Resource::parse("svc"), Ok(Resource::Service));
        assert_eq!(
            Resource::parse("databases.postgresql.cnpg.io"),
            Ok(Resource::CnpgDatabase)
        );
        assert_eq!(
            Resource::parse("crdbclusters.crdb.cockroachlabs.com"),
            Ok(Resource::CrdbCluster)
        );
        assert_eq!(
            Resource::parse("deployments.apps"),
            Ok(Resource::Generic {
                group: "apps".into(),
                plural: "deployments".into()
            })
        );
    }

    #[test]
    fn path_tricks_and_bad_names_are_rejected() {
        assert!(Resource::parse("../etc").is_err());
        assert!(Resource::parse("").is_err());
        assert!(Target::new(Resource::Service, "Cicd", "forgejo").is_err());
        assert!(Target::new(Resource::Service, "cicd", "forgejo/..").is_err());
        assert!(Target::new(Resource::Service, "cicd", &"a".repeat(254)).is_err());
        assert!(Target::new(Resource::Service, "cicd", "forgejo.v2").is_ok());
    }
}
