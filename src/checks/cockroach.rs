//! CockroachDB single cluster (`crdbclusters.crdb.cockroachlabs.com`): is it ONE cluster?
//!
//! Seed 000: when the pods start before the `<name>-join` Service resolves, each node gives up
//! joining and initialises a cluster of its own. Every pod is Ready, the operator is content,
//! and Argo CD sees nothing wrong — yet data written through one pod is invisible through the
//! other. Only the nodes themselves know: each reports its node id and how many live nodes it
//! sees, and (with credentials) its cluster ID.
//!
//! The check runs in two pure steps around the network I/O in [`crate::probe`]:
//! [`plan`] picks the pods to probe from the cache (their IPs come from the Pod objects only, so
//! a caller cannot point the prober anywhere else), and [`judge`] turns the answers into a
//! [`Finding`].
//!
//! Pods are untrusted. What they say reaches a verdict only as [`PodText`]: quoted, bounded,
//! one line, attributed to the pod. Credentials go only to pods the plan proves are controlled
//! by the named CrdbCluster ([`ProbeTarget::controlled_by_cluster`]); the prober adds the other
//! half of the proof, a node certificate from the cluster's CA.

use crate::json::At;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use crate::health::{Finding, HealthStatus, Verdict, is_invisible};
use crate::resource::{InputError, Query};
use crate::views::PodView;

/// CockroachDB's default `--http-port`, and the default of both operators' `httpPort`.
pub(crate) const DEFAULT_HTTP_PORT: u16 = 8080;

/// Label the current operator (cockroachdb-parent chart, `v1beta1`) puts on every pod of a
/// cluster; seed 000's Services select on it too.
const CLUSTER_LABEL: &str = "crdb.cockroachlabs.com/cluster";

/// Labels the older public cockroach-operator (`v1alpha1`) puts on its StatefulSet's pods
/// (cockroach-operator `pkg/resource` StatefulSet builder: `app.kubernetes.io/name=cockroachdb`,
/// `app.kubernetes.io/instance=<cluster>`, `app.kubernetes.io/component=database`).
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// What a caller may ask of a CockroachDB check (an HTTP query, a WaveGate check entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Wanted {
    /// Live nodes every member must see; default: from the CrdbCluster's spec.
    pub expected_nodes: Option<u32>,
    /// Pods to probe instead of the operator's labels (equality only).
    pub selector: Option<BTreeMap<String, String>>,
}

/// A label key: an optional DNS-subdomain prefix (253) and `/`, then a name (63)
/// (apimachinery validation `IsQualifiedName`).
const MAX_LABEL_KEY: usize = 253 + 1 + 63;
/// A label value (apimachinery validation `IsValidLabelValue`).
const MAX_LABEL_VALUE: usize = 63;

impl Wanted {
    /// What a caller may set, as the HTTP API and `wavegate check -p` name it.
    pub(crate) const NAMES: &[&str] = &["expectedNodes", "selector"];

    /// Nothing expected proves nothing: `expectedNodes` is at least 1 when given. Selector
    /// keys and values must be label-shaped.
    pub(crate) fn new(
        expected_nodes: Option<u32>,
        selector: Option<BTreeMap<String, String>>,
    ) -> Result<Wanted, InputError> {
        if expected_nodes == Some(0) {
            return Err(InputError::Parameter {
                name: "expectedNodes".into(),
                reason: "must be at least 1".into(),
            });
        }
        let label_text = |x: &str, max: usize| {
            x.len() <= max
                && x.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        };
        let bad = selector.iter().flatten().find(|(k, v)| {
            k.is_empty() || !label_text(k, MAX_LABEL_KEY) || !label_text(v, MAX_LABEL_VALUE)
        });
        if let Some((k, v)) = bad {
            return Err(InputError::Parameter {
                name: "selector".into(),
                reason: format!("{k:?}={v:?}: invalid label key or value"),
            });
        }
        Ok(Wanted {
            expected_nodes,
            selector,
        })
    }

    pub(crate) fn from_query(q: &Query) -> Result<Wanted, InputError> {
        let selector = q.text("selector").map(parse_selector).transpose()?;
        Wanted::new(q.parse("expectedNodes")?, selector)
    }
}

/// `k=v,k2=v2`, the equality-only subset of a label selector.
fn parse_selector(s: &str) -> Result<BTreeMap<String, String>, InputError> {
    s.split(',')
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| InputError::Parameter {
                    name: "selector".into(),
                    reason: format!("{s:?}: missing '=' (expected key=value[,key=value])"),
                })
        })
        .collect()
}

/// What the check runs with: the caller's [`Wanted`] and what proves membership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    /// Live nodes every member must see (the whole cluster, all regions).
    pub expected_nodes: Option<u32>,
    /// Pods to probe, instead of the operator's labels. Narrows what is probed without
    /// credentials; it never makes a pod a member of the cluster (see [`Owners`]).
    pub selector: Option<BTreeMap<String, String>>,
    /// The nodes' `--http-port`, instead of the CrdbCluster's.
    pub http_port: Option<u16>,
    /// Controllers of the namespace's StatefulSets and CrdbNodes, to prove pod membership.
    pub owners: Owners,
}

/// The links that make a pod provably part of a CrdbCluster. Kubernetes records control in
/// `ownerReferences` (the entry with `controller: true`; at most one per object, apimachinery
/// `ValidateOwnerReferences`):
/// - current operator (cockroachdb-parent chart): pod → `CrdbNode` (one per node, named like
///   the pod) → CrdbCluster;
/// - older cockroach-operator (`v1alpha1`): pod → StatefulSet `<cluster>` → CrdbCluster
///   (`ctrl.SetControllerReference` on everything the operator creates);
/// - a pod controlled by the CrdbCluster itself.
///
/// Matched by UID, so a namesake recreated under another cluster does not count. Anyone who
/// may create pods in the namespace can write an ownerReference too, which is why membership
/// alone never carries credentials: the prober also requires TLS with a node certificate from
/// the cluster's CA.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    /// UID of a StatefulSet or CrdbNode → (its kind, UID of the CrdbCluster controlling it).
    controlled: BTreeMap<String, (String, String)>,
}

impl Owners {
    /// Record StatefulSets or CrdbNodes (`kind`) of one namespace, as the API returns them
    /// (JSON; list items need not carry their own `kind`).
    pub fn record<'a>(&mut self, kind: &str, objects: impl IntoIterator<Item = &'a Value>) {
        if !matches!(kind, "StatefulSet" | "CrdbNode") {
            return;
        }
        for object in objects {
            let Some(uid) = object.str_at("/metadata/uid") else {
                continue;
            };
            let controller = object
                .array_at("/metadata/ownerReferences")
                .into_iter()
                .flatten()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true));
            if let Some(controller) = controller
                && controller.get("kind").and_then(Value::as_str) == Some("CrdbCluster")
                && let Some(owner) = controller.get("uid").and_then(Value::as_str)
            {
                self.controlled
                    .insert(uid.to_string(), (kind.to_string(), owner.to_string()));
            }
        }
    }

    /// Whether the pod's controller chain ends at the CrdbCluster with UID `cluster_uid`.
    fn controls(&self, cluster_uid: &str, pod: &PodView) -> bool {
        let Some(controller) = pod.owners.iter().find(|r| r.controller) else {
            return false;
        };
        if &*controller.kind == "CrdbCluster" {
            return controller.uid.is(cluster_uid);
        }
        self.controlled
            .get(&controller.uid.to_string())
            .is_some_and(|(kind, owner)| **kind == *controller.kind && owner == cluster_uid)
    }
}

/// One pod to probe. `ip` is the Pod's `status.podIP`, never caller input (no SSRF).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProbeTarget {
    pub pod: String,
    /// The pod's UID (empty when unknown): a pod recreated under the same name, even at the
    /// same IP, is another node and must not inherit the old one's cached answer.
    pub uid: String,
    pub ip: String,
    pub port: u16,
    /// The pod's controller chain ends at the named CrdbCluster ([`Owners`]). Only such pods
    /// may receive credentials, whatever selected them.
    pub controlled_by_cluster: bool,
}

/// Text a pod wrote, made safe to show inside a verdict: control characters and line breaks
/// become spaces, the quote marks cannot be closed from inside, and the length is bounded.
/// Shown as `«…»` after the pod's name, so it can never pass for wavegate's own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodText(String);

impl PodText {
    /// Longest quote kept, in characters; CockroachDB's own reasons are well under it.
    pub(crate) const MAX_CHARS: usize = 160;

    pub fn new(raw: &str) -> PodText {
        let mut out = String::new();
        let mut kept = 0;
        let mut pending_space = false;
        for c in raw.chars() {
            let c = match c {
                '«' => '‹',
                '»' => '›',
                c if is_invisible(c) => ' ',
                c => c,
            };
            if c.is_whitespace() {
                pending_space = !out.is_empty();
                continue;
            }
            if kept + usize::from(pending_space) + 1 > Self::MAX_CHARS {
                out.push('…');
                return PodText(out);
            }
            if pending_space {
                out.push(' ');
                kept += 1;
                pending_space = false;
            }
            out.push(c);
            kept += 1;
        }
        PodText(out)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PodText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "«{}»", self.0)
    }
}

/// A selected pod that cannot be probed (yet), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnprobedPod {
    pub pod: String,
    pub reason: String,
}

/// Which pods to probe and what to expect of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Live nodes each member must see: the whole cluster, every region.
    pub expected_nodes: u32,
    /// Pods expected in this namespace (this region's share of a multi-region cluster).
    pub expected_pods: u32,
    /// Pods with an IP, sorted by name; probed even when Kubernetes says not Ready, because
    /// their answer explains why ("node is waiting for cluster initialization").
    pub targets: Vec<ProbeTarget>,
    /// Selected pods that count as existing but cannot be probed (no IP yet, failed).
    pub unprobed: Vec<UnprobedPod>,
    /// Selected pods on their way out (deletionTimestamp set): a rollout is in progress.
    pub terminating: Vec<String>,
    /// Probed pods whose `Ready` condition is not True, with the condition's reason.
    pub not_ready_in_kubernetes: BTreeMap<String, String>,
}

impl Plan {
    /// Selected pods that exist and are not terminating.
    pub(crate) fn pods_present(&self) -> usize {
        self.targets.len() + self.unprobed.len()
    }
}

/// How one pod answered `GET /health?ready=1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// 200: the node accepts SQL clients.
    Ready,
    /// Not ready for a reason wavegate itself established (Pod condition, no IP, terminating).
    NotReady(String),
    /// The node answered but is not ready, in its own words (the 503 body), e.g. "node is
    /// waiting for cluster initialization".
    Declined(PodText),
    /// No usable answer: connection refused, timeout, garbage.
    Unreachable(String),
}

/// What one pod said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodProbe {
    pub pod: String,
    pub readiness: Readiness,
    /// `node_id` from `/_status/vars`.
    pub node_id: Option<i64>,
    /// `liveness_livenodes` from `/_status/vars` (0 when the node is not itself live).
    pub live_nodes: Option<i64>,
    /// `clusterId` from `/_admin/v1/cluster` (needs a login in secure clusters).
    pub cluster_id: Option<String>,
    /// Side remarks worth showing, e.g. why the cluster ID could not be read.
    pub notes: Vec<String>,
}

impl PodProbe {
    /// A probe that got nothing but `readiness`.
    pub fn bare(pod: impl Into<String>, readiness: Readiness) -> Self {
        PodProbe {
            pod: pod.into(),
            readiness,
            node_id: None,
            live_nodes: None,
            cluster_id: None,
            notes: Vec::new(),
        }
    }
}

/// The two CrdbCluster shapes. Detected by shape, not `apiVersion`: the current operator's CRD
/// (cockroachdb-operator-chart, helm-charts
/// `cockroachdb-parent/charts/operator/manifests/crds/crdb.cockroachlabs.com_crdbclusters.yaml`)
/// serves only `v1beta1`, but while it coexists with the older operator during a migration
/// (`migration.enabled`) the one object is served as both versions, and seed 000's
/// ownerReferences say `crdb.cockroachlabs.com/v1alpha1` over a `regions` spec.
enum Generation {
    /// `spec.regions[]` (cockroachdb-parent chart, helm-charts `api/v1beta1/crdbcluster_types.go`).
    Regions,
    /// `spec.nodes` (cockroach-operator `api/v1alpha1`): one StatefulSet named like the cluster.
    StatefulSet,
}

/// Decide which pods to probe and how many nodes to expect.
///
/// The CrdbCluster must exist: it is what names the members. Before it exists there is nothing
/// to judge (a Service check on `<name>-join` covers "the join address resolves"), and pods
/// picked by a caller's selector alone are not a cluster.
pub fn plan(
    namespace: &str,
    name: &str,
    cluster: Option<&Value>,
    pods_in_namespace: &[Arc<PodView>],
    params: &Params,
) -> Result<Plan, Finding> {
    let object = format!("{namespace}/{name}");
    let Some(cluster) = cluster else {
        return Err(Verdict::missing(format!("{object}: CrdbCluster not found")).into());
    };
    let spec = cluster.get("spec").unwrap_or(&Value::Null);
    let (generation, counts) = expected_from_spec(cluster, spec).ok_or_else(|| {
        Finding::Settled(Verdict::unknown(format!(
            "{object}: CrdbCluster has neither spec.regions[].nodes nor spec.nodes; \
             set expectedNodes"
        )))
    })?;
    // `spec.mode: Disabled` (helm-charts api/v1beta1/crdbcluster_types.go `ReconciliationMode`):
    // the operator creates, updates and decommissions no CrdbNode of this cluster. Whatever the
    // pods say then is not the spec made real — during a migration it is the older operator's
    // cluster (the migration guide hands a cluster back with `Disabled`), and a changed spec is
    // never acted on. Suspended, Argo CD's word for a resource whose controller is paused (a
    // paused Deployment, a suspended CronJob): a wave waits on it as on Progressing, a hook
    // gate keeps running, and the gate's timeout ends the wait; never Healthy by accident,
    // never Degraded for a state someone chose. (`CreateOnly` still creates missing nodes, so
    // it is judged as usual.)
    if matches!(generation, Generation::Regions) && spec.str_at("/mode") == Some("Disabled") {
        return Err(Verdict::suspended(format!(
            "{object}: spec.mode is Disabled, so the CockroachDB operator reconciles none of \
             its CrdbNodes (creates, updates and decommissions none): the running nodes are \
             not made to follow this spec; set spec.mode: MutableOnly to hand the cluster to \
             the operator"
        ))
        .into());
    }
    let port = match generation {
        Generation::Regions => spec.u64_at("/template/spec/httpPort"),
        Generation::StatefulSet => spec.u64_at("/httpPort"),
    }
    .and_then(|p| u16::try_from(p).ok());
    let cluster_uid = cluster.str_at("/metadata/uid").unwrap_or_default();

    let (expected_nodes, expected_pods) = match params.expected_nodes {
        Some(nodes) if counts.local_known => (nodes, counts.local.min(nodes)),
        Some(nodes) => (nodes, nodes),
        None => (counts.total, counts.local),
    };
    // Nothing expected is never Healthy: with no pod to ask, "every expected pod is ready and
    // sees the others" holds vacuously and proves nothing about the cluster.
    if expected_nodes == 0 {
        return Err(Verdict::unknown(format!(
            "{object}: expects 0 nodes; there is nothing to probe, so nothing proves the \
             cluster works"
        ))
        .into());
    }
    if expected_pods == 0 {
        let region = cluster.str_at("/status/region").unwrap_or("?");
        return Err(Verdict::unknown(format!(
            "{object}: the local region {region:?} expects 0 nodes (of {expected_nodes} in \
             all regions); there is no pod here to probe, so nothing here proves the cluster \
             works — check it from a region that runs nodes"
        ))
        .into());
    }
    let port = params.http_port.or(port).unwrap_or(DEFAULT_HTTP_PORT);

    let mut plan = Plan {
        expected_nodes,
        expected_pods,
        targets: Vec::new(),
        unprobed: Vec::new(),
        terminating: Vec::new(),
        not_ready_in_kubernetes: BTreeMap::new(),
    };
    let mut pods: Vec<&PodView> = pods_in_namespace
        .iter()
        .map(Arc::as_ref)
        .filter(|pod| pod.namespace.as_deref().is_none_or(|ns| ns == namespace))
        .filter(|pod| selects(pod, name, &generation, params.selector.as_ref()))
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    for pod in pods {
        let pod_name = pod.name.to_string();
        if pod.deleting {
            plan.terminating.push(pod_name);
            continue;
        }
        // Pod status is written by kubelets (or anyone allowed to update pods/status), not
        // validated to a fixed vocabulary: bounded and one line like a pod's own words.
        let phase = PodText::new(pod.phase.as_deref().unwrap_or("Pending"));
        let phase = phase.as_str();
        if matches!(phase, "Succeeded" | "Failed") {
            plan.unprobed.push(UnprobedPod {
                pod: pod_name,
                reason: format!("pod phase {phase}"),
            });
            continue;
        }
        // The IP must parse as an address: it is the only thing that reaches a URL.
        let ip = pod.ip.as_deref().filter(|ip| !ip.is_empty());
        let Some(ip) = ip else {
            plan.unprobed.push(UnprobedPod {
                pod: pod_name,
                reason: format!("no pod IP yet (phase {phase})"),
            });
            continue;
        };
        if ip.parse::<IpAddr>().is_err() {
            plan.unprobed.push(UnprobedPod {
                pod: pod_name,
                reason: format!("pod IP {} is not an IP address", PodText::new(ip)),
            });
            continue;
        }
        if let Some(reason) = kubernetes_unreadiness(pod) {
            plan.not_ready_in_kubernetes
                .insert(pod_name.clone(), reason);
        }
        plan.targets.push(ProbeTarget {
            pod: pod_name,
            uid: pod
                .uid
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            ip: ip.to_string(),
            port,
            controlled_by_cluster: !cluster_uid.is_empty()
                && params.owners.controls(cluster_uid, pod),
        });
    }
    Ok(plan)
}

struct ExpectedCounts {
    total: u32,
    local: u32,
    /// Whether `local` was derived from a region known to be this one (multi-region).
    local_known: bool,
}

fn expected_from_spec(cluster: &Value, spec: &Value) -> Option<(Generation, ExpectedCounts)> {
    if let Some(regions) = spec.get("regions").and_then(Value::as_array) {
        let nodes = |r: &Value| {
            r.get("nodes")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0)
        };
        let total: u32 = regions.iter().map(nodes).sum();
        // Every region's nodes join one cluster, so each member must see the sum. Only this
        // Kubernetes cluster's region has pods here: the operator records it in
        // `status.region` (helm-charts `CrdbClusterStatus.Region`). Without it, a
        // multi-region spec expects every node here, which can only err towards waiting.
        let local_region = cluster.str_at("/status/region").and_then(|code| {
            regions
                .iter()
                .find(|r| r.get("code").and_then(Value::as_str) == Some(code))
        });
        let counts = match (regions.len(), local_region) {
            (1, _) => ExpectedCounts {
                total,
                local: total,
                local_known: false,
            },
            (_, Some(region)) => ExpectedCounts {
                total,
                local: nodes(region),
                local_known: true,
            },
            (_, None) => ExpectedCounts {
                total,
                local: total,
                local_known: false,
            },
        };
        return Some((Generation::Regions, counts));
    }
    let nodes = spec
        .get("nodes")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())?;
    Some((
        Generation::StatefulSet,
        ExpectedCounts {
            total: nodes,
            local: nodes,
            local_known: false,
        },
    ))
}

fn selects(
    pod: &PodView,
    cluster: &str,
    generation: &Generation,
    selector: Option<&BTreeMap<String, String>>,
) -> bool {
    if let Some(selector) = selector {
        // Kubernetes' equality selector (`labels.SelectorFromSet`).
        return pod
            .labels
            .matches(selector.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    let label = |key: &str| pod.labels.get(key);
    let current = || label(CLUSTER_LABEL) == Some(cluster);
    let older = || {
        (label(INSTANCE_LABEL) == Some(cluster) && label(NAME_LABEL) == Some("cockroachdb"))
            || pod
                .owners
                .iter()
                .any(|o| &*o.kind == "StatefulSet" && &*o.name == cluster)
    };
    match generation {
        Generation::Regions => current(),
        Generation::StatefulSet => older(),
    }
}

/// Why Kubernetes does not consider the pod Ready, if it does not.
fn kubernetes_unreadiness(pod: &PodView) -> Option<String> {
    match super::ready_condition(pod) {
        Some(c) if &*c.status == "True" => None,
        Some(c) => Some(match c.reason.as_deref() {
            Some(reason) => format!(
                "Pod condition Ready={} ({})",
                PodText::new(&c.status).as_str(),
                PodText::new(reason).as_str()
            ),
            None => format!("Pod condition Ready={}", PodText::new(&c.status).as_str()),
        }),
        None => Some("Pod has no Ready condition yet".to_string()),
    }
}

/// Judge the cluster from every target's probe.
///
/// Degraded only on proof (two cluster IDs); "all ready but the pods disagree about the live
/// nodes" is [`Finding::Persistent`], because gossip takes a moment to settle after a join and
/// Degraded fails the Argo CD sync; pods that agree on fewer live nodes than expected are
/// waiting for the others (Progressing).
/// Why `finding`, judged from `probes`, says more about wavegate than about the cluster, if it
/// does: a pod that did not answer its probe. Never for a verdict that is Degraded already
/// (two cluster IDs): what the answering pods proved stands whatever the silent one would say.
pub(crate) fn blindness(finding: &Finding, probes: &[PodProbe]) -> Option<String> {
    if matches!(finding, Finding::Settled(v) if v.status == HealthStatus::Degraded) {
        return None;
    }
    probes.iter().find_map(|p| match &p.readiness {
        Readiness::Unreachable(why) => Some(format!("pod {} did not answer: {why}", p.pod)),
        _ => None,
    })
}

pub fn judge(namespace: &str, name: &str, plan: &Plan, probes: &[PodProbe]) -> Finding {
    let object = format!("{namespace}/{name}");
    let expected = i64::from(plan.expected_nodes);
    let by_pod: BTreeMap<&str, &PodProbe> = probes.iter().map(|p| (p.pod.as_str(), p)).collect();

    // One row per selected pod, probed or not, for the table.
    let mut rows: Vec<PodProbe> = Vec::new();
    for target in &plan.targets {
        let mut row = by_pod.get(target.pod.as_str()).map_or_else(
            || PodProbe::bare(&target.pod, Readiness::Unreachable("not probed".into())),
            |p| (*p).clone(),
        );
        if let Some(reason) = plan.not_ready_in_kubernetes.get(&target.pod)
            && row.readiness == Readiness::Ready
        {
            row.readiness = Readiness::NotReady(reason.clone());
        }
        rows.push(row);
    }
    for unprobed in &plan.unprobed {
        rows.push(PodProbe::bare(
            &unprobed.pod,
            Readiness::NotReady(unprobed.reason.clone()),
        ));
    }
    for pod in &plan.terminating {
        rows.push(PodProbe::bare(
            pod,
            Readiness::NotReady("terminating".into()),
        ));
    }
    rows.sort_by(|a, b| a.pod.cmp(&b.pod));

    let with_table = |summary: String| format!("{object}: {summary}\n{}", table(&rows));

    let cluster_ids: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.cluster_id.as_deref())
        .collect();
    let with_id = rows.iter().filter(|r| r.cluster_id.is_some()).count();
    if cluster_ids.len() >= 2 {
        // Proof: a CockroachDB cluster has exactly one ID, so two IDs are two clusters.
        return Verdict::degraded(with_table(format!(
            "split cluster — {} cluster IDs among {with_id} pods",
            cluster_ids.len()
        )))
        .into();
    }

    let mut waiting: Vec<String> = Vec::new();
    let present = plan.pods_present();
    let wanted = usize::try_from(plan.expected_pods).unwrap_or(usize::MAX);
    if present < wanted {
        waiting.push(format!("{present} of {wanted} pods exist"));
    } else if present > wanted {
        waiting.push(format!("{present} pods exist for {wanted} expected nodes"));
    }
    if !plan.terminating.is_empty() {
        waiting.push(format!("{} pod(s) terminating", plan.terminating.len()));
    }
    for row in &rows {
        if plan.terminating.contains(&row.pod) {
            continue;
        }
        match &row.readiness {
            Readiness::Ready => match row.live_nodes {
                None => waiting.push(format!(
                    "{} is ready but reported no liveness_livenodes",
                    row.pod
                )),
                Some(live) if live > expected => waiting.push(format!(
                    "{} sees {live} live nodes, more than the {expected} expected",
                    row.pod
                )),
                Some(_) => {}
            },
            Readiness::NotReady(reason) => waiting.push(format!("{} not ready: {reason}", row.pod)),
            Readiness::Declined(said) => {
                waiting.push(format!("{} not ready; the pod says {said}", row.pod))
            }
            Readiness::Unreachable(error) => {
                waiting.push(format!("{} unreachable: {error}", row.pod))
            }
        }
    }
    if present == 0 || plan.expected_nodes == 0 {
        // Never reached through `plan`, which refuses an empty expectation; a hand-built plan
        // must not turn "nobody was asked" into Healthy either.
        waiting.push("no pod to probe".to_string());
    }
    if !waiting.is_empty() {
        return Verdict::progressing(with_table(waiting.join("; "))).into();
    }

    // Everyone is ready and answered; now the count each one sees.
    let short: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.live_nodes
                .filter(|live| *live < expected)
                .map(|live| format!("{} sees {live} of {expected} live nodes", r.pod))
        })
        .collect();
    let mut node_ids: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for row in &rows {
        if let Some(id) = row.node_id {
            node_ids.entry(id).or_default().push(&row.pod);
        }
    }
    let shared: Vec<String> = node_ids
        .iter()
        .filter(|(_, pods)| pods.len() > 1)
        .map(|(id, pods)| format!("{} all claim node {id}", pods.join(", ")))
        .collect();
    // Too few live nodes is a split (or a dead node) only on inconsistent evidence: pods that
    // disagree about how many nodes are live, two pods claiming one node, or more ready
    // pods here than the live nodes each of them sees (every one of them is itself a live
    // node). Pods that all agree on the same count, at least as many as they are, are one
    // cluster whose other nodes have not joined yet — a multi-region cluster brought up
    // region by region looks exactly like that from each region.
    let counts: BTreeSet<i64> = rows.iter().filter_map(|r| r.live_nodes).collect();
    let agreed = match (counts.len(), counts.first()) {
        (1, Some(&live)) => Some(live),
        _ => None,
    };
    if !short.is_empty()
        && shared.is_empty()
        && let Some(live) = agreed
        && live >= i64::try_from(rows.len()).unwrap_or(i64::MAX)
    {
        let id = match cluster_ids.first() {
            Some(id) => format!(" (cluster ID {id})"),
            None => String::new(),
        };
        return Verdict::progressing(with_table(format!(
            "all {present} pods here agree on {live} of {expected} live nodes{id}; waiting \
             for the other {} to join (other regions, or nodes not started yet)",
            expected - live
        )))
        .into();
    }
    if !short.is_empty() || !shared.is_empty() {
        let mut summary = if cluster_ids.len() == 1 && with_id == rows.len() {
            // Same cluster everywhere: not a split, but nodes that are not live.
            format!(
                "pods see fewer live nodes than expected — {}",
                short.join(", ")
            )
        } else {
            let mut evidence = short;
            evidence.extend(shared);
            format!(
                "probable split cluster — {} (cluster IDs unknown without credentials)",
                evidence.join(", ")
            )
        };
        if cluster_ids.len() == 1 && with_id < rows.len() {
            summary.push_str("; some cluster IDs unknown");
        }
        return Finding::Persistent {
            message: with_table(summary),
        };
    }

    let id = match cluster_ids.first() {
        Some(id) => format!(", cluster ID {id}"),
        None => String::new(),
    };
    Verdict::healthy(format!(
        "{object}: all {present} pods ready, each sees {expected} live nodes{id}"
    ))
    .into()
}

/// The per-pod table shown under every non-Healthy message.
pub(crate) fn table(probes: &[PodProbe]) -> String {
    const HEADER: [&str; 5] = ["POD", "NODE", "LIVE", "CLUSTER ID", "READY"];
    let dash = || "-".to_string();
    let cells: Vec<[String; 5]> = probes
        .iter()
        .map(|p| {
            [
                p.pod.clone(),
                p.node_id.map_or_else(dash, |n| n.to_string()),
                p.live_nodes.map_or_else(dash, |n| n.to_string()),
                p.cluster_id.clone().unwrap_or_else(dash),
                match &p.readiness {
                    Readiness::Ready => "yes".to_string(),
                    Readiness::NotReady(reason) => format!("no: {reason}"),
                    Readiness::Declined(said) => format!("no: says {said}"),
                    Readiness::Unreachable(error) => format!("unreachable: {error}"),
                },
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |row: [&str; 5]| {
        let mut out = String::from(" ");
        for (i, cell) in row.iter().enumerate() {
            out.push(' ');
            if i + 1 == row.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$} ", w = widths[i]));
            }
        }
        out.trim_end().to_string()
    };
    let mut lines = vec![line(HEADER)];
    lines.extend(
        cells
            .iter()
            .map(|r| line([&r[0], &r[1], &r[2], &r[3], &r[4]])),
    );
    for p in probes {
        lines.extend(p.notes.iter().map(|n| format!("  {}: {n}", p.pod)));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;
    use k8s_openapi::api::core::v1::Pod;

    const V1BETA1: &str = include_str!("../../tests/fixtures/cockroach/crdbcluster-v1beta1.yaml");
    const V1ALPHA1: &str = include_str!("../../tests/fixtures/cockroach/crdbcluster-v1alpha1.yaml");
    const MULTI_REGION: &str =
        include_str!("../../tests/fixtures/cockroach/crdbcluster-multi-region.yaml");
    const PODS_V1BETA1: &str = include_str!("../../tests/fixtures/cockroach/pods-v1beta1.yaml");
    const PODS_STARTING: &str =
        include_str!("../../tests/fixtures/cockroach/pods-v1beta1-starting.yaml");
    const PODS_V1ALPHA1: &str = include_str!("../../tests/fixtures/cockroach/pods-v1alpha1.yaml");
    const OWNERS_V1BETA1: &str = include_str!("../../tests/fixtures/cockroach/owners-v1beta1.yaml");
    const OWNERS_V1ALPHA1: &str =
        include_str!("../../tests/fixtures/cockroach/owners-v1alpha1.yaml");

    const ID_A: &str = "15152a17-fcc9-4a51-8c04-af0ec0126551";
    const ID_B: &str = "2c4d3ec6-47f5-4161-97ff-ef4b12f595f0";

    use crate::checks::fixtures::{items, object};

    fn owners(yaml: &str) -> Owners {
        let list = object(yaml);
        let mut owners = Owners::default();
        for item in list["items"].as_array().unwrap() {
            owners.record(item["kind"].as_str().unwrap(), [item]);
        }
        owners
    }

    fn pods(yaml: &str) -> Vec<Arc<Pod>> {
        items(yaml)
    }

    /// [`super::plan`] on fixture pods, as the cache keeps them.
    fn plan(
        namespace: &str,
        name: &str,
        cluster: Option<&Value>,
        pods: &[Arc<Pod>],
        params: &Params,
    ) -> Result<Plan, Finding> {
        let views: Vec<Arc<PodView>> = pods.iter().map(|p| Arc::new(p.as_ref().into())).collect();
        super::plan(namespace, name, cluster, &views, params)
    }

    #[test]
    fn cluster_the_operator_does_not_reconcile_is_suspended_not_healthy() {
        // Both pods of seed 000 are there and would answer; with reconciliation disabled their
        // answers are not the spec made real.
        let cluster = object(include_str!(
            "../../tests/fixtures/cockroach/crdbcluster-v1beta1-disabled.yaml"
        ));
        let finding = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods(PODS_V1BETA1),
            &Params::default(),
        )
        .unwrap_err();
        assert_eq!(
            settled(finding),
            Verdict::suspended(
                "prod/cockroachdb: spec.mode is Disabled, so the CockroachDB operator reconciles \
                 none of its CrdbNodes (creates, updates and decommissions none): the running \
                 nodes are not made to follow this spec; set spec.mode: MutableOnly to hand the \
                 cluster to the operator"
            )
        );
        // The other modes create missing nodes: judged as usual.
        for mode in ["MutableOnly", "CreateOnly"] {
            let mut cluster = cluster.clone();
            cluster["spec"]["mode"] = mode.into();
            assert!(
                plan(
                    "prod",
                    "cockroachdb",
                    Some(&cluster),
                    &pods(PODS_V1BETA1),
                    &Params::default()
                )
                .is_ok(),
                "{mode}"
            );
        }
    }

    fn seed_plan() -> Plan {
        let cluster = object(V1BETA1);
        plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods(PODS_V1BETA1),
            &Params::default(),
        )
        .unwrap()
    }

    fn probe(pod: &str) -> PodProbe {
        PodProbe::bare(pod, Readiness::Ready)
    }

    trait Sees {
        fn node(self, id: i64, live: i64) -> Self;
        fn cluster(self, id: &str) -> Self;
    }

    impl Sees for PodProbe {
        fn node(mut self, id: i64, live: i64) -> Self {
            self.node_id = Some(id);
            self.live_nodes = Some(live);
            self
        }
        fn cluster(mut self, id: &str) -> Self {
            self.cluster_id = Some(id.to_string());
            self
        }
    }

    fn settled(finding: Finding) -> Verdict {
        match finding {
            Finding::Settled(v) => v,
            Finding::Persistent { message } => panic!("expected a settled verdict, got {message}"),
        }
    }

    #[test]
    fn current_operator_selects_pods_by_cluster_label_and_sums_regions() {
        let plan = seed_plan();
        assert_eq!(plan.expected_nodes, 2);
        assert_eq!(plan.expected_pods, 2);
        assert_eq!(
            plan.targets,
            vec![
                ProbeTarget {
                    pod: "cockroachdb-fgrbw".into(),
                    uid: String::new(),
                    ip: "10.244.1.17".into(),
                    port: 8080,
                    controlled_by_cluster: false,
                },
                ProbeTarget {
                    pod: "cockroachdb-nbm5k".into(),
                    uid: String::new(),
                    ip: "10.244.2.9".into(),
                    port: 8080,
                    controlled_by_cluster: false,
                },
            ]
        );
    }

    #[test]
    fn older_operator_selects_statefulset_pods_and_reads_spec_nodes_and_http_port() {
        let cluster = object(V1ALPHA1);
        let plan = plan(
            "prod",
            "roach",
            Some(&cluster),
            &pods(PODS_V1ALPHA1),
            &Params::default(),
        )
        .unwrap();
        assert_eq!(plan.expected_nodes, 3);
        let names: Vec<_> = plan.targets.iter().map(|t| t.pod.as_str()).collect();
        assert_eq!(names, ["roach-0", "roach-1", "roach-2"]);
        assert!(plan.targets.iter().all(|t| t.port == 8090));
    }

    #[test]
    fn multi_region_expects_every_region_live_but_only_local_pods_here() {
        let cluster = object(MULTI_REGION);
        let plan = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods(PODS_V1BETA1),
            &Params::default(),
        )
        .unwrap();
        assert_eq!(plan.expected_nodes, 8);
        assert_eq!(plan.expected_pods, 3);
        assert!(plan.targets.iter().all(|t| t.port == 8081));
    }

    #[test]
    fn missing_cluster_without_overrides_is_missing() {
        let err = plan(
            "prod",
            "cockroachdb",
            None,
            &pods(PODS_V1BETA1),
            &Params::default(),
        )
        .unwrap_err();
        let v = settled(err);
        assert_eq!(v.status, HealthStatus::Missing);
        assert!(
            v.message
                .starts_with("prod/cockroachdb: CrdbCluster not found")
        );
    }

    #[test]
    fn selector_and_expected_nodes_without_the_cluster_is_missing() {
        // With both overrides the CrdbCluster is still needed: otherwise the pods a caller's
        // selector picked would be treated as the cluster (and get the credentials).
        let params = Params {
            expected_nodes: Some(2),
            selector: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "cockroachdb".to_string(),
            )])),
            http_port: Some(9090),
            ..Params::default()
        };
        let v =
            settled(plan("prod", "cockroachdb", None, &pods(PODS_V1BETA1), &params).unwrap_err());
        assert_eq!(v.status, HealthStatus::Missing);
        assert_eq!(v.message, "prod/cockroachdb: CrdbCluster not found");
    }

    #[test]
    fn local_region_expecting_zero_nodes_is_never_healthy() {
        // This Kubernetes cluster's region runs no node: nothing to probe must not read as
        // "all 0 pods ready", Healthy.
        let mut cluster = object(MULTI_REGION);
        cluster["spec"]["regions"][1]["nodes"] = 0.into();
        let finding = match plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &[],
            &Params::default(),
        ) {
            Ok(plan) => judge("prod", "cockroachdb", &plan, &[]),
            Err(finding) => finding,
        };
        let v = settled(finding);
        assert_eq!(v.status, HealthStatus::Unknown, "{}", v.message);
        assert!(
            v.message
                .contains("local region \"us-central1\" expects 0 nodes (of 5"),
            "{}",
            v.message
        );
        assert!(v.message.contains("nothing here proves the cluster works"));
    }

    #[test]
    fn local_region_without_a_node_count_is_never_healthy() {
        let mut cluster = object(MULTI_REGION);
        cluster["spec"]["regions"][1]
            .as_object_mut()
            .unwrap()
            .remove("nodes");
        let v = settled(
            plan(
                "prod",
                "cockroachdb",
                Some(&cluster),
                &[],
                &Params::default(),
            )
            .unwrap_err(),
        );
        assert_eq!(v.status, HealthStatus::Unknown, "{}", v.message);
    }

    #[test]
    fn zero_expected_nodes_is_never_healthy() {
        let cluster = object(V1BETA1);
        let params = Params {
            expected_nodes: Some(0),
            ..Params::default()
        };
        let v = settled(
            plan(
                "prod",
                "cockroachdb",
                Some(&cluster),
                &pods(PODS_V1BETA1),
                &params,
            )
            .unwrap_err(),
        );
        assert_eq!(v.status, HealthStatus::Unknown);
        assert!(v.message.contains("expects 0 nodes"), "{}", v.message);
    }

    #[test]
    fn a_plan_with_nothing_to_probe_is_not_judged_healthy() {
        let empty = Plan {
            expected_nodes: 3,
            expected_pods: 0,
            targets: Vec::new(),
            unprobed: Vec::new(),
            terminating: Vec::new(),
            not_ready_in_kubernetes: BTreeMap::new(),
        };
        let v = settled(judge("prod", "cockroachdb", &empty, &[]));
        assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
        assert!(v.message.contains("no pod to probe"));
    }

    #[test]
    fn only_pods_controlled_through_a_crdbnode_of_this_cluster_are_members() {
        let cluster = object(V1BETA1);
        let params = Params {
            owners: owners(OWNERS_V1BETA1),
            ..Params::default()
        };
        let planned = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods(PODS_V1BETA1),
            &params,
        )
        .unwrap();
        let members: Vec<(&str, bool)> = planned
            .targets
            .iter()
            .map(|t| (t.pod.as_str(), t.controlled_by_cluster))
            .collect();
        // nbm5k carries the cluster label but no controller: selected, probed, not a member.
        assert_eq!(
            members,
            [("cockroachdb-fgrbw", true), ("cockroachdb-nbm5k", false)]
        );

        // The same CrdbNode controlled by a CrdbCluster of another UID proves nothing.
        let mut recreated = cluster.clone();
        recreated["metadata"]["uid"] = "00000000-0000-4000-8000-0000000000aa".into();
        let planned = plan(
            "prod",
            "cockroachdb",
            Some(&recreated),
            &pods(PODS_V1BETA1),
            &params,
        )
        .unwrap();
        assert!(planned.targets.iter().all(|t| !t.controlled_by_cluster));
    }

    #[test]
    fn a_caller_selector_never_makes_a_pod_a_member() {
        let cluster = object(V1BETA1);
        let params = Params {
            selector: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "forgejo".to_string(),
            )])),
            owners: owners(OWNERS_V1BETA1),
            ..Params::default()
        };
        let plan = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods(PODS_V1BETA1),
            &params,
        )
        .unwrap();
        assert_eq!(plan.targets.len(), 1);
        assert_eq!(plan.targets[0].pod, "forgejo-7d9c");
        assert!(!plan.targets[0].controlled_by_cluster);
    }

    #[test]
    fn statefulset_pods_of_the_older_operator_are_members_through_the_statefulset() {
        let cluster = object(V1ALPHA1);
        let params = Params {
            owners: owners(OWNERS_V1ALPHA1),
            ..Params::default()
        };
        let plan = plan(
            "prod",
            "roach",
            Some(&cluster),
            &pods(PODS_V1ALPHA1),
            &params,
        )
        .unwrap();
        assert!(
            plan.targets.iter().all(|t| t.controlled_by_cluster),
            "{:?}",
            plan.targets
        );
        // A pod claiming a StatefulSet by a UID that is not a StatefulSet controlled by the
        // cluster is not a member.
        assert!(
            !owners(OWNERS_V1ALPHA1).controls(
                "3a2b1c0d-9e8f-4a7b-8c6d-5e4f3a2b1c0d",
                &PodView::from(
                    pods(PODS_V1ALPHA1)
                        .into_iter()
                        .find(|p| p.metadata.name.as_deref() == Some("roach-other-0"))
                        .unwrap()
                        .as_ref()
                )
            )
        );
    }

    #[test]
    fn pod_status_text_cannot_start_a_line_of_its_own() {
        let cluster = object(V1BETA1);
        let mut pods = pods(PODS_V1BETA1);
        let pod = Arc::make_mut(&mut pods[1]);
        let status = pod.status.as_mut().unwrap();
        status.pod_ip = None;
        status.phase = Some("Pending\nprod/cockroachdb: all 2 pods ready".into());
        let plan = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods,
            &Params::default(),
        )
        .unwrap();
        let v = settled(judge(
            "prod",
            "cockroachdb",
            &plan,
            &[probe("cockroachdb-fgrbw")],
        ));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message.lines().skip(1).all(|l| l.starts_with("  ")),
            "{}",
            v.message
        );
    }

    #[test]
    fn pod_text_is_one_bounded_quoted_line() {
        let hostile = "fine\n\rprod/cockroachdb: all 2 pods ready\u{202E}«x» \t end";
        let text = PodText::new(hostile);
        assert_eq!(
            text.to_string(),
            "«fine prod/cockroachdb: all 2 pods ready ‹x› end»"
        );
        let long = PodText::new(&"a".repeat(10_000));
        assert_eq!(long.as_str().chars().count(), PodText::MAX_CHARS + 1);
        assert!(long.as_str().ends_with('…'));
        assert_eq!(PodText::new(" \n ").as_str(), "");
    }

    #[test]
    fn pods_without_ip_or_terminating_are_not_probed() {
        let cluster = object(V1BETA1);
        let plan = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods(PODS_STARTING),
            &Params::default(),
        )
        .unwrap();
        assert_eq!(plan.targets.len(), 1);
        assert_eq!(plan.unprobed[0].pod, "cockroachdb-nbm5k");
        assert_eq!(plan.unprobed[0].reason, "no pod IP yet (phase Pending)");
        assert_eq!(plan.terminating, ["cockroachdb-x7q2p"]);
        assert_eq!(
            plan.not_ready_in_kubernetes["cockroachdb-fgrbw"],
            "Pod condition Ready=False (ContainersNotReady)"
        );
        let v = settled(judge("prod", "cockroachdb", &plan, &[]));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .contains("cockroachdb-nbm5k not ready: no pod IP yet")
        );
    }

    #[test]
    fn two_cluster_ids_is_degraded() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 1).cluster(ID_A),
            probe("cockroachdb-nbm5k").node(1, 1).cluster(ID_B),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Degraded);
        let lines: Vec<&str> = v.message.lines().collect();
        assert_eq!(
            lines[0],
            "prod/cockroachdb: split cluster — 2 cluster IDs among 2 pods"
        );
        assert_eq!(
            lines[1],
            "  POD                NODE  LIVE  CLUSTER ID                            READY"
        );
        assert_eq!(
            lines[2],
            "  cockroachdb-fgrbw  1     1     15152a17-fcc9-4a51-8c04-af0ec0126551  yes"
        );
        assert!(lines[3].contains(ID_B));
    }

    #[test]
    fn a_proven_split_is_not_blind_when_a_third_pod_does_not_answer() {
        let mut plan = seed_plan();
        let mut third = plan.targets[0].clone();
        third.pod = "cockroachdb-x7q2p".into();
        plan.targets.push(third);
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 1).cluster(ID_A),
            probe("cockroachdb-nbm5k").node(1, 1).cluster(ID_B),
            PodProbe::bare(
                "cockroachdb-x7q2p",
                Readiness::Unreachable("timeout".into()),
            ),
        ];
        let finding = judge("prod", "cockroachdb", &plan, &probes);
        assert_eq!(settled(finding.clone()).status, HealthStatus::Degraded);
        // Two cluster IDs are proof about the cluster whatever a third pod says; blindness
        // would only hold back a timeout, never this.
        assert_eq!(blindness(&finding, &probes), None);
        // Waiting on a pod that does not answer is blind.
        let waiting = [
            probe("cockroachdb-fgrbw").node(1, 1).cluster(ID_A),
            PodProbe::bare(
                "cockroachdb-nbm5k",
                Readiness::Unreachable("timeout".into()),
            ),
        ];
        let finding = judge("prod", "cockroachdb", &plan, &waiting);
        assert_eq!(settled(finding.clone()).status, HealthStatus::Progressing);
        assert!(blindness(&finding, &waiting).is_some_and(|w| w.contains("cockroachdb-nbm5k")));
    }

    #[test]
    fn split_is_proven_even_while_another_pod_is_still_starting() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 1).cluster(ID_A),
            PodProbe::bare(
                "cockroachdb-nbm5k",
                Readiness::Unreachable("timeout".into()),
            )
            .cluster(ID_B),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Degraded);
    }

    #[test]
    fn all_ready_but_each_sees_one_node_is_a_persistent_probable_split() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 1),
            probe("cockroachdb-nbm5k").node(1, 1),
        ];
        match judge("prod", "cockroachdb", &plan, &probes) {
            Finding::Persistent { message } => {
                assert!(message.starts_with("prod/cockroachdb: probable split cluster — "));
                assert!(message.contains("cockroachdb-fgrbw sees 1 of 2 live nodes"));
                assert!(message.contains("cockroachdb-fgrbw, cockroachdb-nbm5k all claim node 1"));
            }
            other => panic!("expected Persistent, got {other:?}"),
        }
    }

    #[test]
    fn waiting_for_cluster_initialization_is_progressing() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 1).cluster(ID_A),
            PodProbe::bare(
                "cockroachdb-nbm5k",
                Readiness::Declined(PodText::new("node is waiting for cluster initialization")),
            ),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(v.message.starts_with(
            "prod/cockroachdb: cockroachdb-nbm5k not ready; the pod says «node is waiting for \
             cluster initialization»"
        ));
    }

    #[test]
    fn fewer_pods_than_expected_is_progressing() {
        let cluster = object(V1BETA1);
        let one_pod = &pods(PODS_V1BETA1)[..1];
        let plan = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            one_pod,
            &Params::default(),
        )
        .unwrap();
        let probes = [probe("cockroachdb-fgrbw").node(1, 1)];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(v.message.starts_with("prod/cockroachdb: 1 of 2 pods exist"));
    }

    #[test]
    fn ready_probe_does_not_override_kubernetes_not_ready() {
        let cluster = object(V1BETA1);
        let plan = plan(
            "prod",
            "cockroachdb",
            Some(&cluster),
            &pods(PODS_STARTING),
            &Params::default(),
        )
        .unwrap();
        let v = settled(judge(
            "prod",
            "cockroachdb",
            &plan,
            &[probe("cockroachdb-fgrbw").node(1, 2)],
        ));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .contains("cockroachdb-fgrbw not ready: Pod condition Ready=False")
        );
    }

    #[test]
    fn unanswered_probe_is_not_healthy() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 2).cluster(ID_A),
            PodProbe::bare(
                "cockroachdb-nbm5k",
                Readiness::Unreachable("no answer within 2s".into()),
            ),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .contains("cockroachdb-nbm5k unreachable: no answer within 2s")
        );
    }

    #[test]
    fn ready_without_live_node_count_is_not_healthy() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 2),
            probe("cockroachdb-nbm5k"),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(v.message.contains("reported no liveness_livenodes"));
    }

    #[test]
    fn one_cluster_with_a_dead_node_is_persistent_but_not_called_a_split() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 1).cluster(ID_A),
            probe("cockroachdb-nbm5k").node(2, 1).cluster(ID_A),
        ];
        match judge("prod", "cockroachdb", &plan, &probes) {
            Finding::Persistent { message } => {
                assert!(message.contains("pods see fewer live nodes than expected"));
                assert!(!message.contains("split"));
            }
            other => panic!("expected Persistent, got {other:?}"),
        }
    }

    #[test]
    fn three_pods_agreeing_on_three_of_eight_nodes_are_one_cluster_waiting_for_other_regions() {
        let mut plan = seed_plan();
        // This region's pods all run; five nodes in other regions have not started yet.
        plan.expected_nodes = 8;
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 2),
            probe("cockroachdb-nbm5k").node(2, 2),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message
                .contains("all 2 pods here agree on 2 of 8 live nodes; waiting for the other 6"),
            "{v}"
        );
        // The same with credentials: one cluster ID everywhere.
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 2).cluster(ID_A),
            probe("cockroachdb-nbm5k").node(2, 2).cluster(ID_A),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    }

    #[test]
    fn pods_that_disagree_about_the_live_nodes_are_still_a_probable_split() {
        let mut plan = seed_plan();
        plan.expected_nodes = 8;
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 3),
            probe("cockroachdb-nbm5k").node(2, 2),
        ];
        let finding = judge("prod", "cockroachdb", &plan, &probes);
        assert!(matches!(finding, Finding::Persistent { .. }), "{finding:?}");
    }

    #[test]
    fn joined_cluster_is_healthy() {
        let plan = seed_plan();
        let probes = [
            probe("cockroachdb-fgrbw").node(1, 2).cluster(ID_A),
            probe("cockroachdb-nbm5k").node(2, 2).cluster(ID_A),
        ];
        let v = settled(judge("prod", "cockroachdb", &plan, &probes));
        assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
        assert_eq!(
            v.message,
            format!(
                "prod/cockroachdb: all 2 pods ready, each sees 2 live nodes, cluster ID {ID_A}"
            )
        );
    }
}
