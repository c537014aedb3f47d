//! What a caller may make wavegate read on its behalf: which kinds a generic check may name
//! (HTTP API and WaveGates), and which namespaces a WaveGate's checks may reach beyond the
//! gate's own.
//!
//! wavegate reads with its own, fairly broad ServiceAccount. Whoever may create a WaveGate in
//! one namespace (a tenant) or reach the HTTP API must not be able to borrow that account to read
//! other namespaces or sensitive kinds: a generic check reports what an object's fields say, and
//! a Service check names pods that nearly match. So both are refused unless the installer opts
//! in with `--gate-cross-namespace` and `--generic-kinds`.

use crate::ask::{Ask, Check};
use crate::resource::{CheckKind, InputError};
use std::collections::BTreeSet;

/// Kinds a generic check may name by default, as `(group, plural)`: workloads and the objects
/// whose readiness a sync wave typically waits for. Pods, Secrets and ConfigMaps are left out on
/// purpose: their fields hold environment values and credentials, and no wave needs a generic
/// check on them (a Service check covers pods).
pub(crate) const DEFAULT_GENERIC_KINDS: &[(&str, &str)] = &[
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("apps", "replicasets"),
    ("batch", "jobs"),
    ("", "persistentvolumeclaims"),
    ("networking.k8s.io", "ingresses"),
    ("autoscaling", "horizontalpodautoscalers"),
    ("apiregistration.k8s.io", "apiservices"),
    // The CRDs wavegate knows; their dedicated checks are not generic, these are the others.
    ("postgresql.cnpg.io", "clusters"),
    ("wavegate.dev", "wavegates"),
];

/// The installer's choices (`wavegate serve` flags).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PolicyArgs {
    /// Namespaces that any WaveGate's checks may name besides the gate's own (comma-separated;
    /// `*` for any). Empty (the default): a gate checks only objects in its own namespace, so
    /// whoever may create a WaveGate reads nothing elsewhere through it.
    #[arg(long, env = "WAVEGATE_GATE_CROSS_NAMESPACE", value_delimiter = ',')]
    pub gate_cross_namespace: Vec<String>,
    /// Kinds generic checks may name in addition to the defaults (deployments, statefulsets,
    /// daemonsets, replicasets, jobs, persistentvolumeclaims, ingresses,
    /// horizontalpodautoscalers, apiservices, clusters.postgresql.cnpg.io,
    /// wavegates.wavegate.dev), as kubectl names them: `cronjobs.batch,widgets.example.com`.
    #[arg(long, env = "WAVEGATE_GENERIC_KINDS", value_delimiter = ',')]
    pub generic_kinds: Vec<String>,
}

/// Which namespaces a gate's checks may name besides its own.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CrossNamespace {
    Listed(BTreeSet<String>),
    Any,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckPolicy {
    generic_kinds: BTreeSet<(String, String)>,
    cross_namespace: CrossNamespace,
}

impl Default for CheckPolicy {
    fn default() -> Self {
        CheckPolicy {
            generic_kinds: DEFAULT_GENERIC_KINDS
                .iter()
                .map(|(g, p)| (g.to_string(), p.to_string()))
                .collect(),
            cross_namespace: CrossNamespace::Listed(BTreeSet::new()),
        }
    }
}

/// Flags that do not make a policy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PolicyError {
    #[error("--generic-kinds: {0}")]
    GenericKind(#[source] InputError),
    #[error("--generic-kinds: {0} has its own check and needs no listing")]
    OwnCheck(CheckKind),
    #[error("--gate-cross-namespace: {0}")]
    CrossNamespace(#[source] InputError),
}

/// A generic check on a kind off the allow-list; the message is the sentence shown to the
/// caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "generic checks on {resource} are not allowed by this wavegate (allowed: {}); the \
     installer can add the kind with --generic-kinds",
    allowed.join(", ")
)]
pub(crate) struct KindNotAllowed {
    resource: String,
    allowed: Vec<String>,
}

impl PolicyArgs {
    pub(crate) fn policy(&self) -> Result<CheckPolicy, PolicyError> {
        let mut policy = CheckPolicy::default();
        for kind in self.generic_kinds.iter().map(|s| s.trim()) {
            if kind.is_empty() {
                continue;
            }
            match CheckKind::parse(kind).map_err(PolicyError::GenericKind)? {
                CheckKind::Generic { group, plural } => {
                    policy.generic_kinds.insert((group, plural));
                }
                known => return Err(PolicyError::OwnCheck(known)),
            }
        }
        let mut listed = BTreeSet::new();
        for ns in self.gate_cross_namespace.iter().map(|s| s.trim()) {
            match ns {
                "" => {}
                "*" => policy.cross_namespace = CrossNamespace::Any,
                ns => {
                    crate::resource::validate_namespace(ns).map_err(PolicyError::CrossNamespace)?;
                    listed.insert(ns.to_string());
                }
            }
        }
        if policy.cross_namespace != CrossNamespace::Any {
            policy.cross_namespace = CrossNamespace::Listed(listed);
        }
        Ok(policy)
    }
}

impl CheckPolicy {
    /// Whether a check may read this kind: the dedicated checks always; a generic check only on
    /// the allow-list. The error is the sentence shown to the caller.
    pub(crate) fn allows_kind(&self, resource: &CheckKind) -> Result<(), KindNotAllowed> {
        let CheckKind::Generic { group, plural } = resource else {
            return Ok(());
        };
        if self
            .generic_kinds
            .contains(&(group.clone(), plural.clone()))
        {
            return Ok(());
        }
        Err(KindNotAllowed {
            resource: resource.to_string(),
            allowed: self.generic_kind_names(),
        })
    }

    fn generic_kind_names(&self) -> Vec<String> {
        self.generic_kinds
            .iter()
            .map(|(group, plural)| {
                CheckKind::Generic {
                    group: group.clone(),
                    plural: plural.clone(),
                }
                .to_string()
            })
            .collect()
    }

    /// Whether a WaveGate in `gate_namespace` may ask this. A refusal is an [`InputError`]: the
    /// gate controller turns it into that check's Degraded verdict, because a policy refusal is
    /// definite and waiting would not change it.
    pub(crate) fn admit_gate_check(
        &self,
        gate_namespace: &str,
        ask: &Ask,
    ) -> Result<(), InputError> {
        let target = ask.namespace();
        let allowed = target == gate_namespace
            || match &self.cross_namespace {
                CrossNamespace::Any => true,
                CrossNamespace::Listed(list) => list.contains(target),
            };
        if !allowed {
            return Err(InputError::Parameter {
                name: "namespace".into(),
                reason: format!(
                    "{target} is not the gate's namespace {gate_namespace}; a WaveGate checks \
                     only its own namespace unless the installer lists {target} in \
                     --gate-cross-namespace"
                ),
            });
        }
        if let Check::Generic { .. } = ask.check {
            self.allows_kind(&ask.resource())
                .map_err(|e| InputError::Parameter {
                    name: "resource".into(),
                    reason: e.to_string(),
                })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Target;

    fn generic(plural: &str, group: &str, namespace: &str) -> Ask {
        let resource = CheckKind::Generic {
            group: group.into(),
            plural: plural.into(),
        };
        Ask::with_defaults(Target::new(resource, namespace, "x").unwrap())
    }

    fn service(namespace: &str) -> Ask {
        Ask::with_defaults(Target::new(CheckKind::SERVICE, namespace, "web").unwrap())
    }

    #[test]
    fn secrets_configmaps_and_pods_are_not_generic_kinds_by_default() {
        let p = CheckPolicy::default();
        for kind in ["secrets", "configmaps", "pods", "serviceaccounts", "nodes"] {
            let err = p.allows_kind(&CheckKind::parse(kind).unwrap()).unwrap_err();
            assert!(err.to_string().contains("--generic-kinds"), "{err}");
        }
        for kind in ["deployments.apps", "jobs.batch", "persistentvolumeclaims"] {
            assert_eq!(p.allows_kind(&CheckKind::parse(kind).unwrap()), Ok(()));
        }
        assert_eq!(p.allows_kind(&CheckKind::SERVICE), Ok(()));
    }

    #[test]
    fn the_installer_can_extend_the_kinds() {
        let p = PolicyArgs {
            generic_kinds: vec!["cronjobs.batch".into(), " configmaps ".into()],
            ..PolicyArgs::default()
        }
        .policy()
        .unwrap();
        assert_eq!(
            p.allows_kind(&CheckKind::parse("configmaps").unwrap()),
            Ok(())
        );
        assert!(
            p.allows_kind(&CheckKind::parse("secrets").unwrap())
                .is_err()
        );
        let bad = PolicyArgs {
            generic_kinds: vec!["../x".into()],
            ..PolicyArgs::default()
        };
        assert!(bad.policy().is_err());
    }

    #[test]
    fn gate_reading_another_namespace_is_refused_by_default() {
        let p = CheckPolicy::default();
        assert_eq!(p.admit_gate_check("cicd", &service("cicd")), Ok(()));
        let err = p
            .admit_gate_check("tenant", &service("kube-system"))
            .unwrap_err();
        assert!(err.to_string().contains("--gate-cross-namespace"), "{err}");
    }

    #[test]
    fn listed_namespaces_and_star_open_cross_namespace_checks() {
        let listed = PolicyArgs {
            gate_cross_namespace: vec!["ddb".into()],
            ..PolicyArgs::default()
        }
        .policy()
        .unwrap();
        assert_eq!(listed.admit_gate_check("cicd", &service("ddb")), Ok(()));
        assert!(listed.admit_gate_check("cicd", &service("prod")).is_err());
        let any = PolicyArgs {
            gate_cross_namespace: vec!["*".into()],
            ..PolicyArgs::default()
        }
        .policy()
        .unwrap();
        assert_eq!(any.admit_gate_check("cicd", &service("prod")), Ok(()));
        assert!(
            any.admit_gate_check("cicd", &generic("secrets", "", "cicd"))
                .is_err(),
            "namespace opt-in does not open kinds"
        );
    }
}
