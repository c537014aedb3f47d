//! CloudNativePG `Database` and `DatabaseRole` (`postgresql.cnpg.io`): created by the operator
//! at the current generation, optionally in a Ready `Cluster` (`checks::cnpg`; fixtures in
//! `tests/fixtures/cnpg/`). The two are reconciled alike from the Cluster's primary, so one
//! module serves both.

use super::{
    Check, DedicatedKind, Found, GateEntry, NAME, NAMESPACE, Probes, Reads, Sources, json_identity,
    namespace_or,
};
use crate::cache::CacheError;
use crate::checks::cnpg::{self, Params};
use crate::deps::Dep;
use crate::health::Finding;
use crate::json::At;
use crate::resource::registry::{self, KindSpec};
use crate::resource::{CheckKind, GroupResource, InputError, Query, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The Clusters a Database is created in.
pub(crate) const CLUSTERS: GroupResource = GroupResource::fixed(registry::CNPG_GROUP, "clusters");

// A WaveGate's `cnpgDatabase:` or `cnpgDatabaseRole:` entry (no doc comment: each kind's
// `ABOUT` describes its field). The two are one shape, as CNPG reconciles them alike.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CnpgCheck {
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub name: String,
    /// Defaults to the gate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE))]
    pub namespace: Option<String>,
    /// Also require the CNPG Cluster the object names to be Ready (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_cluster_ready: Option<bool>,
}

/// A `cnpgDatabase:` entry.
pub type CnpgDatabaseCheck = CnpgCheck;
/// A `cnpgDatabaseRole:` entry.
pub type CnpgDatabaseRoleCheck = CnpgCheck;

impl GateEntry for CnpgCheck {
    fn ask(
        &self,
        field: &str,
        _: &str,
        gate_namespace: &str,
    ) -> Result<(Target, Check), InputError> {
        let ns = namespace_or(&self.namespace, gate_namespace);
        let params = Params::new(self.require_cluster_ready);
        let (kind, check) = if field == DatabaseRole::SPEC.entry {
            (
                CheckKind::CNPG_DATABASE_ROLE,
                Check::CnpgDatabaseRole(params),
            )
        } else {
            (CheckKind::CNPG_DATABASE, Check::CnpgDatabase(params))
        };
        Ok((Target::new(kind, &ns, &self.name)?, check))
    }
}

/// The CNPG Database check kind.
pub(crate) struct Database;

/// The CNPG DatabaseRole check kind.
pub(crate) struct DatabaseRole;

impl DedicatedKind for Database {
    const SPEC: &'static KindSpec = &registry::CNPG_DATABASE;
    const PARAMS: &'static [&'static str] = Params::NAMES;
    type Params = Params;
    const ABOUT: &'static str = "A CloudNativePG Database has been created by the operator.";

    fn params(q: &Query) -> Result<Params, InputError> {
        Params::from_query(q)
    }

    fn reads(namespace: &str, name: &str) -> Vec<Dep> {
        reads(Self::SPEC, namespace, name)
    }

    async fn gather<R: Reads, P: Probes>(
        from: &Sources<'_, R, P>,
        namespace: &str,
        name: &str,
        params: &Params,
    ) -> Result<Found, CacheError> {
        gather(from, Self::SPEC, cnpg::check, namespace, name, params).await
    }
}

impl DedicatedKind for DatabaseRole {
    const SPEC: &'static KindSpec = &registry::CNPG_DATABASE_ROLE;
    const PARAMS: &'static [&'static str] = Params::NAMES;
    type Params = Params;
    const ABOUT: &'static str =
        "A CloudNativePG DatabaseRole (CNPG 1.30) has been created by the operator.";

    fn params(q: &Query) -> Result<Params, InputError> {
        Params::from_query(q)
    }

    fn reads(namespace: &str, name: &str) -> Vec<Dep> {
        reads(Self::SPEC, namespace, name)
    }

    async fn gather<R: Reads, P: Probes>(
        from: &Sources<'_, R, P>,
        namespace: &str,
        name: &str,
        params: &Params,
    ) -> Result<Found, CacheError> {
        gather(from, Self::SPEC, cnpg::check_role, namespace, name, params).await
    }
}

/// A pure check of a Database or DatabaseRole in its Cluster (`checks::cnpg`).
type Judge = fn(&str, &str, Option<&Value>, Option<&Value>, &Params) -> Finding;

/// The Database or DatabaseRole (`kind`), and its Cluster: the object names it in its spec, so
/// any Cluster of the namespace will do.
fn reads(kind: &'static KindSpec, namespace: &str, name: &str) -> Vec<Dep> {
    vec![
        Dep::object(CheckKind::Dedicated(kind).kind(), namespace, name),
        Dep::namespace(CLUSTERS, namespace),
    ]
}

/// Judge the Database or DatabaseRole (`kind`) `namespace/name` with `judge`.
async fn gather<R: Reads, P>(
    from: &Sources<'_, R, P>,
    kind: &'static KindSpec,
    judge: Judge,
    namespace: &str,
    name: &str,
    params: &Params,
) -> Result<Found, CacheError> {
    let c = from.cache;
    let db = c
        .object(&CheckKind::Dedicated(kind).kind(), namespace, name)
        .await?;
    let cluster = match db.as_deref().and_then(cnpg::cluster_name) {
        Some(cluster) => c.object(&CLUSTERS, namespace, cluster).await?,
        None => None,
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
