//! CloudNativePG `Database` and `DatabaseRole` (`postgresql.cnpg.io`): created by the operator
//! at the current generation, optionally in a Ready `Cluster` (`checks::cnpg`; fixtures in
//! `tests/fixtures/cnpg/`). The two are reconciled alike from the Cluster's primary, so one
//! module serves both.

use super::{
    Check, Found, GateEntry, NAME, NAMESPACE, Reads, Sources, json_identity, namespace_or,
};
use crate::cache::CacheError;
use crate::checks::cnpg::{self, Params};
use crate::deps::Dep;
use crate::json::At;
use crate::resource::{CheckKind, GroupResource, InputError, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The Clusters a Database is created in.
pub(crate) const CLUSTERS: GroupResource = GroupResource::fixed(CheckKind::CNPG_GROUP, "clusters");

// A WaveGate's `cnpgDatabase:` entry (no doc comment: the field's in `GateCheck` describes it).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CnpgDatabaseCheck {
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub name: String,
    /// Defaults to the gate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE))]
    pub namespace: Option<String>,
    /// Also require the Database's CNPG Cluster to be Ready (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_cluster_ready: Option<bool>,
}

impl GateEntry for CnpgDatabaseCheck {
    fn ask(&self, _check: &str, gate_namespace: &str) -> Result<(Target, Check), InputError> {
        let ns = namespace_or(&self.namespace, gate_namespace);
        let target = Target::new(CheckKind::CnpgDatabase, &ns, &self.name)?;
        let params = Params::new(self.require_cluster_ready);
        Ok((target, Check::CnpgDatabase(params)))
    }
}

// A WaveGate's `cnpgDatabaseRole:` entry (no doc comment: the field's in `GateCheck` describes
// it).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CnpgDatabaseRoleCheck {
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub name: String,
    /// Defaults to the gate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE))]
    pub namespace: Option<String>,
    /// Also require the DatabaseRole's CNPG Cluster to be Ready (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_cluster_ready: Option<bool>,
}

impl GateEntry for CnpgDatabaseRoleCheck {
    fn ask(&self, _check: &str, gate_namespace: &str) -> Result<(Target, Check), InputError> {
        let ns = namespace_or(&self.namespace, gate_namespace);
        let target = Target::new(CheckKind::CnpgDatabaseRole, &ns, &self.name)?;
        let params = Params::new(self.require_cluster_ready);
        Ok((target, Check::CnpgDatabaseRole(params)))
    }
}

/// The Database or DatabaseRole (`kind`), and its Cluster: the object names it in its spec, so
/// any Cluster of the namespace will do.
pub(crate) fn reads(kind: CheckKind, namespace: &str, name: &str) -> Vec<Dep> {
    vec![
        Dep::object(kind.kind(), namespace, name),
        Dep::namespace(CLUSTERS, namespace),
    ]
}

/// Judge the Database or DatabaseRole (`kind`) `namespace/name`.
pub(crate) async fn gather<R: Reads, P>(
    from: &Sources<'_, R, P>,
    kind: CheckKind,
    namespace: &str,
    name: &str,
    params: &Params,
) -> Result<Found, CacheError> {
    let c = from.cache;
    let db = c.object(&kind.kind(), namespace, name).await?;
    let cluster = match db.as_deref().and_then(cnpg::cluster_name) {
        Some(cluster) => c.object(&CLUSTERS, namespace, cluster).await?,
        None => None,
    };
    let judge = match kind {
        CheckKind::CnpgDatabaseRole => cnpg::check_role,
        _ => cnpg::check,
    };
    let f = judge(namespace, name, db.as_deref(), cluster.as_deref(), params);
    // The Cluster's UID too: a Database failing on a Cluster that was deleted and recreated
    // under the same name failed on another Cluster, and the new one's primary gets its own
    // grace.
    let identity = db.as_deref().map(|d| {
        let cluster_uid = cluster
            .as_ref()
            .and_then(|c| c.str_at("/metadata/uid"))
            .unwrap_or("");
        format!("{}@{cluster_uid}", json_identity(d))
    });
    Ok(Found {
        judged_state: db.as_deref().map(cnpg::judged_status),
        ..Found::seen(f, from.config.cnpg_grace, identity)
    })
}
