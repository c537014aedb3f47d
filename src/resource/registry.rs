//! The one table of check kinds: one row per kind with a dedicated check, and everything about
//! it that code other than its own module needs to know. It sits in the bottom layer so that
//! lint (which may not import `kinds`) reads the same rows as parsing, the WaveGate CRD, the
//! RBAC tests and the UI.
//!
//! What is derived from a row, and what holds the rest to it:
//!
//! - kubectl names ([`CheckKind::parse`]), group/plural/Kind, annotation mode's kinds;
//! - the WaveGate CRD's CEL rule (`gate::crd`; its tests hold the schema's entry fields, which
//!   `gate::entries` makes one per kind of `check_kinds!`, to [`entries`]);
//! - lint's gate targets and suggested gates (`lint::rules`);
//! - the kinds' contracts (`kinds`, whose test holds the implemented kinds to [`KINDS`]);
//! - the RBAC of every rendering ([`permissions`], checked by
//!   `tests/offline/deploy_manifests.rs` and `helm_chart.rs`) and the UI extension's
//!   `checkTarget` ([`check_targets`], checked by `tests/offline/check_targets.rs`).
//!
//! The derivations take the table as a parameter (`*_in`, `permissions`, `check_targets`), and
//! the test module `adding_a_kind` passes it with cert-manager's Certificate added, so
//! docs/extending.md's walk-through is checked on a real kind.
//!
//! Any other `plural.group` is judged by the generic rule, whose WaveGate entry is
//! [`GENERIC_ENTRY`].

use super::CheckKind;
use std::collections::BTreeMap;

/// A kind with a dedicated check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KindSpec {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// The plural the API server serves it under.
    pub plural: &'static str,
    /// The `kind` field of its objects, as Argo CD's `status.resources[]` and owner references
    /// name it.
    pub kind: &'static str,
    /// kubectl short names besides the plural and the lowercase Kind (`svc`).
    pub short_names: &'static [&'static str],
    /// Its WaveGate entry's field in `spec.checks[]` (`cnpgDatabase`).
    pub entry: &'static str,
    /// What wavegate needs on the kind itself to judge it: every rendering's RBAC grants these.
    pub verbs: &'static [&'static str],
    /// Other group-resources its check reads (`group`, `plural`), granted like `verbs`.
    pub reads: &'static [(&'static str, &'static str)],
    /// Whether a persistent failure waits a grace period before its check says Degraded (the
    /// evaluator's clock); without one the check's first answer counts.
    pub grace: bool,
    /// Whether annotation mode writes verdicts on it: a Lua script under
    /// `argocd/resource_customizations/<group>/<Kind>/` reads them back, and the annotate
    /// renderings grant `patch` on it.
    pub annotated: bool,
    /// The entry's parameters besides `name` in a gate lint suggests (`minReady: 1`).
    pub suggested: &'static str,
}

impl KindSpec {
    /// kubectl-style name of the kind: `services`, `databases.postgresql.cnpg.io`.
    pub fn kubectl_name(&self) -> String {
        qualified(self.plural, self.group)
    }

    /// Every name [`CheckKind::parse`] accepts for it (lowercase): plural, Kind and short
    /// names, each qualified by the group.
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        [self.plural.to_string(), self.kind.to_ascii_lowercase()]
            .into_iter()
            .chain(self.short_names.iter().map(|s| s.to_string()))
            .map(|n| qualified(&n, self.group))
    }

    /// `group/Kind` as Argo CD spells a kind (`Service` in the core group).
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}/{}", self.group, self.kind)
        }
    }
}

fn qualified(name: &str, group: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

/// Read-only access, what every check needs on what it judges.
const READ: &[&str] = &["get", "list", "watch"];

pub(crate) const CNPG_GROUP: &str = "postgresql.cnpg.io";
pub(crate) const CRDB_GROUP: &str = "crdb.cockroachlabs.com";
pub(crate) const ARGO_GROUP: &str = "argoproj.io";

/// Core `Service`, judged by its selector, pods and EndpointSlices.
pub const SERVICE: KindSpec = KindSpec {
    group: "",
    plural: "services",
    kind: "Service",
    short_names: &["svc"],
    entry: "service",
    verbs: READ,
    reads: &[("", "pods"), ("discovery.k8s.io", "endpointslices")],
    grace: true,
    annotated: true,
    suggested: ", minReady: 1",
};

/// CloudNativePG `Database`, created by the operator in its `Cluster`.
pub const CNPG_DATABASE: KindSpec = KindSpec {
    group: CNPG_GROUP,
    plural: "databases",
    kind: "Database",
    short_names: &[],
    entry: "cnpgDatabase",
    verbs: READ,
    reads: &[(CNPG_GROUP, "clusters")],
    grace: true,
    annotated: true,
    suggested: "",
};

/// CloudNativePG `DatabaseRole` (CNPG 1.30), reconciled like a Database. No Lua script reads
/// annotations on it yet: gates and the HTTP API judge it.
pub const CNPG_DATABASE_ROLE: KindSpec = KindSpec {
    group: CNPG_GROUP,
    plural: "databaseroles",
    kind: "DatabaseRole",
    short_names: &[],
    entry: "cnpgDatabaseRole",
    verbs: READ,
    reads: &[(CNPG_GROUP, "clusters")],
    grace: true,
    annotated: false,
    suggested: "",
};

/// CockroachDB operator `CrdbCluster`: its pods are probed. (What proves their membership,
/// CrdbNodes or StatefulSets, is read only with DB Console credentials, and granted by the
/// renderings that configure them.)
pub const CRDB_CLUSTER: KindSpec = KindSpec {
    group: CRDB_GROUP,
    plural: "crdbclusters",
    kind: "CrdbCluster",
    short_names: &[],
    entry: "cockroachCluster",
    verbs: READ,
    reads: &[("", "pods")],
    grace: true,
    annotated: true,
    suggested: "",
};

/// Argo CD `Application`, for app-of-apps.
pub const APPLICATION: KindSpec = KindSpec {
    group: ARGO_GROUP,
    plural: "applications",
    kind: "Application",
    short_names: &["app"],
    entry: "application",
    verbs: READ,
    reads: &[],
    grace: false,
    annotated: true,
    suggested: "",
};

/// Every kind with a dedicated check, in the order the WaveGate CRD lists their entries.
pub static KINDS: &[KindSpec] = &[
    SERVICE,
    CNPG_DATABASE,
    CNPG_DATABASE_ROLE,
    CRDB_CLUSTER,
    APPLICATION,
];

/// The WaveGate entry of any other kind, which names its kind in a `resource` field.
pub const GENERIC_ENTRY: &str = "resource";

/// Every WaveGate entry field, dedicated kinds first, as the CRD's CEL rule counts them.
pub fn entries() -> impl Iterator<Item = &'static str> {
    entries_in(KINDS)
}

/// The kind whose objects Argo CD lists as `group`/`kind`.
pub fn by_group_kind(group: &str, kind: &str) -> Option<&'static KindSpec> {
    by_group_kind_in(KINDS, group, kind)
}

/// The kind of a WaveGate entry field.
pub fn by_entry(entry: &str) -> Option<&'static KindSpec> {
    KINDS.iter().find(|k| k.entry == entry)
}

// Production passes [`KINDS`] to the derivations below; the walk-through test of
// docs/extending.md passes it with a row added, to show each picks a new kind up unedited.

/// [`entries`] of a table of kinds.
pub fn entries_in(kinds: &[KindSpec]) -> impl Iterator<Item = &str> {
    kinds.iter().map(|k| k.entry).chain([GENERIC_ENTRY])
}

/// [`by_group_kind`] in a table of kinds.
pub fn by_group_kind_in<'k>(
    kinds: &'k [KindSpec],
    group: &str,
    kind: &str,
) -> Option<&'k KindSpec> {
    kinds.iter().find(|k| k.group == group && k.kind == kind)
}

/// The kind a kubectl-style name (lowercase) names.
pub(super) fn by_name_in<'k>(kinds: &'k [KindSpec], name: &str) -> Option<&'k KindSpec> {
    kinds.iter().find(|k| k.names().any(|n| n == name))
}

/// What every rendering's RBAC must say about one verb on one group-resource, for the check
/// of `kind`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    pub group: &'static str,
    pub plural: &'static str,
    pub verb: &'static str,
    /// The Kind whose check needs it (or must not have it).
    pub kind: &'static str,
    pub rule: PermissionRule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PermissionRule {
    /// Every rendering grants it: without it the check is Unknown forever ("forbidden" from
    /// the watch).
    Granted,
    /// The renderings with annotation mode grant it: it writes verdicts there.
    GrantedWhenAnnotating,
    /// No rendering grants it: annotation mode leaves the kind alone, so a grant would be
    /// write access nobody uses.
    Refused,
}

/// The RBAC a table of kinds asks of every rendering (held by
/// `tests/offline/deploy_manifests.rs` and, through it, `helm_chart.rs`).
pub fn permissions(kinds: &[KindSpec]) -> Vec<Permission> {
    let mut out = Vec::new();
    for k in kinds {
        let own = [(k.group, k.plural)];
        for (group, plural) in own.iter().chain(k.reads) {
            for verb in k.verbs {
                out.push(Permission {
                    group,
                    plural,
                    verb,
                    kind: k.kind,
                    rule: PermissionRule::Granted,
                });
            }
        }
        // Notices patch Applications for their own reason; that is not this kind's need.
        out.push(Permission {
            group: k.group,
            plural: k.plural,
            verb: "patch",
            kind: k.kind,
            rule: if k.annotated {
                PermissionRule::GrantedWhenAnnotating
            } else {
                PermissionRule::Refused
            },
        });
    }
    out
}

/// The UI extension's `checkTarget` table: each dedicated entry field and the kubectl name of
/// its kind (the generic entry names its kind itself).
pub fn check_targets(kinds: &[KindSpec]) -> BTreeMap<String, String> {
    kinds
        .iter()
        .map(|k| (k.entry.to_string(), k.kubectl_name()))
        .collect()
}

impl CheckKind {
    pub(crate) const SERVICE: CheckKind = CheckKind::Dedicated(&SERVICE);
    pub(crate) const CNPG_DATABASE: CheckKind = CheckKind::Dedicated(&CNPG_DATABASE);
    pub(crate) const CNPG_DATABASE_ROLE: CheckKind = CheckKind::Dedicated(&CNPG_DATABASE_ROLE);
    pub(crate) const CRDB_CLUSTER: CheckKind = CheckKind::Dedicated(&CRDB_CLUSTER);
    pub(crate) const APPLICATION: CheckKind = CheckKind::Dedicated(&APPLICATION);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Two rows sharing a name, an entry or a group/Kind would make parsing, a gate's entry or
    /// Argo CD's listing resolve to whichever comes first.
    #[test]
    fn no_two_kinds_share_a_name_an_entry_or_a_group_kind() {
        let mut names = BTreeSet::new();
        let mut entries = BTreeSet::new();
        let mut kinds = BTreeSet::new();
        for k in KINDS {
            for n in k.names() {
                assert!(names.insert(n.clone()), "{n} names two kinds");
            }
            assert!(entries.insert(k.entry), "entry {} twice", k.entry);
            assert!(kinds.insert(k.group_kind()), "{} twice", k.group_kind());
            assert_ne!(k.entry, GENERIC_ENTRY);
        }
        assert_eq!(entries.len(), KINDS.len());
    }

    #[test]
    fn a_kind_is_found_by_each_of_its_names_and_its_entry() {
        for k in KINDS {
            for n in k.names() {
                assert_eq!(by_name_in(KINDS, &n), Some(k), "{n}");
            }
            assert_eq!(by_entry(k.entry), Some(k));
            assert_eq!(by_group_kind(k.group, k.kind), Some(k));
        }
        assert_eq!(by_name_in(KINDS, "app.argoproj.io"), Some(&APPLICATION));
        assert_eq!(by_name_in(KINDS, "applications"), None);
        assert_eq!(by_entry(GENERIC_ENTRY), None);
    }
}
