//! What to check: one object and the check that judges it, with its parameters. The single
//! vocabulary every front end converts into — an HTTP query or `wavegate check -p`
//! ([`Ask::from_params`]), a WaveGate check entry (`gate::asks::ask_of`), an annotated object and
//! an Application's managed resource ([`Ask::with_defaults`]) — and the verdict cache's key
//! (`Hash + Eq`). The [`Check`] and its parameters belong to the kind (`kinds`): each kind's
//! parameters own their names, defaults, parsing and validation (`Params::from_query`,
//! `Params::new` in `checks::*`), and its module lists the cache reads an ask depends on.

pub(crate) use crate::kinds::Check;
use crate::resource::{CheckKind, InputError, Query, Target};
use std::collections::HashMap;
use std::fmt;

/// One question: is `namespace/name` truly ready by `check`?
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Ask {
    pub namespace: String,
    pub name: String,
    pub check: Check,
}

impl Ask {
    pub(crate) fn new(target: Target, check: Check) -> Ask {
        Ask {
            namespace: target.namespace,
            name: target.name,
            check,
        }
    }

    /// From a target and string parameters (HTTP query, CLI `--param k=v`).
    pub(crate) fn from_params(
        target: Target,
        params: &HashMap<String, String>,
    ) -> Result<Ask, InputError> {
        let check = Check::from_query(target.resource.clone(), Query(params))?;
        Ok(Ask::new(target, check))
    }

    /// `target` judged with its check's defaults (annotation mode, the waves view).
    pub(crate) fn with_defaults(target: Target) -> Ask {
        let check = Check::defaults(target.resource.clone());
        Ask::new(target, check)
    }

    /// The kind judged, kubectl-style in messages and metrics.
    pub(crate) fn resource(&self) -> CheckKind {
        self.check.resource()
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `namespace/name` of the object judged.
    pub(crate) fn object(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// `services cicd/forgejo`, as messages and the gate API name what a check points at.
impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.resource(), self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn target(resource: CheckKind) -> Target {
        Target::new(resource, "cicd", "forgejo").unwrap()
    }

    #[test]
    fn every_front_end_reaches_the_same_ask_and_cache_key() {
        let from_query = Ask::from_params(target(CheckKind::SERVICE), &params(&[])).unwrap();
        let defaults = Ask::with_defaults(target(CheckKind::SERVICE));
        assert_eq!(from_query, defaults);
        let explicit =
            Ask::from_params(target(CheckKind::SERVICE), &params(&[("minReady", "1")])).unwrap();
        assert_eq!(
            explicit, defaults,
            "minReady=1 is the default, not another ask"
        );
        let mut keys = std::collections::HashSet::new();
        assert!(keys.insert(defaults) && !keys.insert(explicit));
    }

    #[test]
    fn a_parameter_of_another_check_is_refused_by_name() {
        let err = Ask::from_params(target(CheckKind::SERVICE), &params(&[("minready", "2")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("minready") && err.contains("minReady"),
            "{err}"
        );
        let err = Ask::from_params(
            target(CheckKind::APPLICATION),
            &params(&[("minReady", "1")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("allowed: none"), "{err}");
    }

    #[test]
    fn parameters_are_validated_where_they_are_defined() {
        let crdb = target(CheckKind::CRDB_CLUSTER);
        for bad in [
            &[("expectedNodes", "0")][..],
            &[("expectedNodes", "-1")],
            &[("selector", "app")],
            &[("selector", "app=cockroach db")],
        ] {
            assert!(
                Ask::from_params(crdb.clone(), &params(bad)).is_err(),
                "{bad:?}"
            );
        }
        let ok = Ask::from_params(
            crdb,
            &params(&[("expectedNodes", "3"), ("selector", "app=db,tier=data")]),
        )
        .unwrap();
        let Check::CrdbCluster(w) = ok.check else {
            panic!("{ok:?}")
        };
        assert_eq!(w.expected_nodes, Some(3));
        assert_eq!(w.selector.map(|s| s.len()), Some(2));
        let generic = CheckKind::parse("deployments.apps").unwrap();
        assert!(Ask::from_params(target(generic), &params(&[("healthy", "status.x")])).is_err());
    }
}
