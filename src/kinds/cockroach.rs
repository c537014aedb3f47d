//! CockroachDB operator `CrdbCluster` (`crdb.cockroachlabs.com`): one cluster, every expected
//! node live, proven by probing each pod (`checks::cockroach` plans and judges, the evaluator
//! probes; fixtures in `tests/fixtures/cockroach/`).

use super::{
    Check, DedicatedKind, Found, GateEntry, NAME, NAMESPACE, Probes, Reads, Sources, json_identity,
};
use crate::cache::CacheError;
use crate::checks::cockroach::{self, Wanted};
use crate::deps::Dep;
use crate::health::Verdict;
use crate::json::At;
use crate::resource::registry::{self, KindSpec};
use crate::resource::{CheckKind, GroupResource, InputError, Query, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the current operator makes of each node, and what proves a pod's membership there.
pub(crate) const CRDB_NODES: GroupResource =
    GroupResource::fixed(registry::CRDB_GROUP, "crdbnodes");
/// What the older operator (`v1alpha1`) runs the nodes in.
pub(crate) const STATEFUL_SETS: GroupResource = GroupResource::fixed("apps", "statefulsets");

// A WaveGate's `cockroachCluster:` entry (no doc comment: its kind's `ABOUT` describes
// the field).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CockroachClusterCheck {
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub name: String,
    /// Defaults to the gate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE))]
    pub namespace: Option<String>,
    /// Nodes that must be live and see each other (default: from the CrdbCluster's spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("format" = "int32"))]
    pub expected_nodes: Option<u32>,
    /// Pod labels selecting the cluster's pods (default: the operator's labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<BTreeMap<String, String>>,
}

impl GateEntry for CockroachClusterCheck {
    fn ask(&self, _: &str, _: &str, gate_namespace: &str) -> Result<(Target, Check), InputError> {
        let ns = super::namespace_or(&self.namespace, gate_namespace);
        let target = Target::new(CheckKind::CRDB_CLUSTER, &ns, &self.name)?;
        let wanted = Wanted::new(self.expected_nodes, self.selector.clone())?;
        Ok((target, Check::CrdbCluster(wanted)))
    }
}

/// The CrdbCluster check kind.
pub(crate) struct CrdbCluster;

impl DedicatedKind for CrdbCluster {
    const SPEC: &'static KindSpec = &registry::CRDB_CLUSTER;
    const PARAMS: &'static [&'static str] = Wanted::NAMES;
    type Params = Wanted;
    const ABOUT: &'static str =
        "A CockroachDB cluster is one cluster with every expected node live.";

    fn params(q: &Query) -> Result<Wanted, InputError> {
        Wanted::from_query(q)
    }

    /// The CrdbCluster, the pods of its namespace, and what proves their membership (CrdbNodes
    /// or StatefulSets, read when credentials are configured). Probe answers are not watched:
    /// whoever waits on the verdict judges again every probe TTL.
    fn reads(namespace: &str, name: &str) -> Vec<Dep> {
        vec![
            Dep::object(CheckKind::CRDB_CLUSTER.kind(), namespace, name),
            Dep::namespace(GroupResource::PODS, namespace),
            Dep::namespace(CRDB_NODES, namespace),
            Dep::namespace(STATEFUL_SETS, namespace),
        ]
    }

    async fn gather<R: Reads, P: Probes>(
        from: &Sources<'_, R, P>,
        namespace: &str,
        name: &str,
        wanted: &Wanted,
    ) -> Result<Found, CacheError> {
        gather(from, namespace, name, wanted).await
    }
}

async fn gather<R: Reads, P: Probes>(
    from: &Sources<'_, R, P>,
    namespace: &str,
    name: &str,
    wanted: &Wanted,
) -> Result<Found, CacheError> {
    // No probe at all, whatever the pods say: a pod IP dialled from here may be another
    // network's pod (see `EvalConfig::probes_refused`).
    if let Some(why) = &from.config.probes_refused {
        let v = Verdict::unknown(format!("CrdbCluster {namespace}/{name}: {why}"));
        return Ok(Found {
            blind: Some(why.clone()),
            ..Found::seen(v.into(), Duration::ZERO, None)
        });
    }
    let c = from.cache;
    let cluster = c
        .object(&CheckKind::CRDB_CLUSTER.kind(), namespace, name)
        .await?;
    let pods = c.pods(namespace).await?;
    let params = cockroach::Params {
        expected_nodes: wanted.expected_nodes,
        selector: wanted.selector.clone(),
        http_port: None,
        owners: owners(from, namespace, cluster.as_deref()).await,
    };
    let mut unanswered = None;
    let f = match cockroach::plan(namespace, name, cluster.as_deref(), &pods, &params) {
        Err(f) => f,
        Ok(mut plan) => {
            // A pod whose controller is the CrdbCluster itself counts as a member whatever the
            // owners say: the installer's list must hold there too.
            if !credentials_allowed(from, namespace, name) {
                for t in &mut plan.targets {
                    t.controlled_by_cluster = false;
                }
            }
            let probes = futures::future::join_all(
                plan.targets
                    .iter()
                    .map(|t| from.probes.probe(namespace, name, t)),
            )
            .await;
            let f = cockroach::judge(namespace, name, &plan, &probes);
            unanswered = cockroach::blindness(&f, &probes);
            f
        }
    };
    let identity = cluster.as_deref().map(json_identity);
    Ok(Found {
        blind: unanswered,
        ..Found::seen(f, from.config.crdb_grace, identity)
    })
}

/// What proves CockroachDB pods' membership, read only when there are credentials to protect,
/// and only the kind this cluster's operator uses: CrdbNodes for the current one
/// (`spec.regions`), StatefulSets for the older one. A kind that is not there or cannot be read
/// proves nothing, which only withholds credentials.
async fn owners<R: Reads, P>(
    from: &Sources<'_, R, P>,
    namespace: &str,
    cluster: Option<&Value>,
) -> cockroach::Owners {
    let mut owners = cockroach::Owners::default();
    let Some(cluster) = cluster else {
        return owners;
    };
    if from.config.crdb_credentials.is_none() {
        return owners;
    }
    // Membership proven is what lets credentials go to a pod: a cluster the installer did not
    // name proves none, so its pods are probed without them (with a CA shared across tenants,
    // a tenant's own CrdbCluster can present correctly issued certificates).
    let name = cluster.str_at("/metadata/name").unwrap_or("");
    if !credentials_allowed(from, namespace, name) {
        return owners;
    }
    let (owner, kind) = if cluster.pointer("/spec/regions").is_some() {
        (CRDB_NODES, "CrdbNode")
    } else {
        (STATEFUL_SETS, "StatefulSet")
    };
    if let Ok(found) = from.cache.objects(&owner, namespace).await {
        owners.record(kind, found.iter().map(|o| &**o));
    }
    owners
}

/// Whether the installer lets this CrdbCluster's members receive the DB Console credentials
/// (`--crdb-credentials-for`; unset: every CrdbCluster).
fn credentials_allowed<R, P>(from: &Sources<'_, R, P>, namespace: &str, name: &str) -> bool {
    from.config
        .crdb_credentials_for
        .as_ref()
        .is_none_or(|allowed| allowed.contains(&(namespace.to_string(), name.to_string())))
}
