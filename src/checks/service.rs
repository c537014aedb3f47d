//! Service endpoints: does this Service actually route to something?
//!
//! Argo CD (and kstatus, Flux, Helm, kapp) call every Service Healthy unless it is a
//! LoadBalancer still waiting for an address. None of them notices a selector that matches no
//! pods (seed 001: `app: forgejo` against pods labelled `app: gitea`) or a Service with zero
//! ready endpoints. This check does, reading the same EndpointSlices kube-proxy and DNS read.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::health::{Finding, Verdict};
use crate::resource::{InputError, Query};
use crate::views::{EndpointView, Labels, PodView, ServiceView, SliceView, Uid};

/// How many pods with near-matching labels a message names at most.
const MAX_NAMED_PODS: usize = 3;

/// Label keys that commonly carry an application's identity. Shown next to a near-matching
/// pod so the reader sees at a glance what the pod calls itself.
const IDENTITY_KEYS: [&str; 4] = [
    "app",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "k8s-app",
];

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// Ready endpoints required. `0` means "the Service exists", for headless join Services
    /// that must resolve before their pods are created (seed 000).
    pub min_ready: u32,
}

impl Params {
    /// What a caller may set, as the HTTP API and `wavegate check -p` name it.
    pub(crate) const NAMES: &[&str] = &["minReady"];

    /// One ready endpoint unless told otherwise.
    pub(crate) fn new(min_ready: Option<u32>) -> Params {
        Params {
            min_ready: min_ready.unwrap_or(1),
        }
    }

    pub(crate) fn from_query(q: &Query) -> Result<Params, InputError> {
        Ok(Params::new(q.parse("minReady")?))
    }
}

impl Default for Params {
    fn default() -> Self {
        Params::new(None)
    }
}

/// Judge Service `namespace/name` from the cached Service, the pods of its namespace and its
/// EndpointSlices (those labelled `kubernetes.io/service-name=<name>`).
pub fn check(
    namespace: &str,
    name: &str,
    service: Option<&ServiceView>,
    pods_in_namespace: &[Arc<PodView>],
    slices: &[Arc<SliceView>],
    params: &Params,
) -> Finding {
    let id = format!("{namespace}/{name}");
    let Some(service) = service else {
        return Verdict::missing(format!("Service {id} does not exist")).into();
    };
    if service.deleting {
        // A finalizer holds it; its endpoints are about to go with it, whatever they say now.
        return Verdict::progressing(format!("Service {id} is being deleted")).into();
    }

    if service.type_.as_deref() == Some("ExternalName") {
        let target = service.external_name.as_deref().unwrap_or("");
        // An ExternalName Service is a DNS CNAME; the EndpointSlice controller skips it, so
        // there are no endpoints to count and existing is all it can do.
        return Verdict::healthy(format!(
            "Service {id} is an ExternalName alias for {target:?}; Kubernetes publishes no endpoints for it"
        ))
        .into();
    }

    // Argo CD's own rule (gitops-engine health_service.go): a LoadBalancer is Progressing until
    // the cloud controller has published an ingress address; clients outside cannot reach it.
    if service.type_.as_deref() == Some("LoadBalancer") && !service.load_balancer_ingress {
        return Verdict::progressing(format!(
            "Service {id} is a LoadBalancer without an ingress address yet"
        ))
        .into();
    }

    if params.min_ready == 0 {
        return Verdict::healthy(format!(
            "Service {id} exists (minReady 0: endpoints not required)"
        ))
        .into();
    }

    let slices = Slices::of(namespace, name, service, slices);

    // The EndpointSlice controller ignores a Service without a selector (and an empty selector
    // round-trips as none); its slices are written by hand or by another controller, and
    // kube-proxy routes to whatever ready endpoints they list. That is all the evidence there is.
    let Some(selector) = service.selector.as_ref().filter(|s| !s.is_empty()) else {
        let endpoints = slices.count_routed();
        if endpoints.ready >= params.min_ready as usize {
            return Verdict::healthy(format!(
                "Service {id} has no selector; its EndpointSlices list {} that kube-proxy routes to",
                plural(endpoints.ready, "ready endpoint")
            ))
            .into();
        }
        return Verdict::progressing(format!(
            "Service {id} has no selector and its EndpointSlices list {} (need {})",
            endpoints.summary(),
            params.min_ready
        ))
        .into();
    };

    let pods: Vec<&PodView> = pods_in_namespace
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.namespace.as_deref().is_none_or(|ns| ns == namespace))
        .collect();
    let matching: Vec<&PodView> = pods
        .iter()
        .copied()
        .filter(|p| p.labels.matches(selector.iter()))
        .collect();
    let live: Vec<&PodView> = matching.iter().copied().filter(|p| is_live(p)).collect();

    if live.is_empty() {
        return no_live_pods(&id, namespace, name, selector, &matching, &pods);
    }

    let publish_not_ready = service.publish_not_ready_addresses;
    let endpoints = slices.count_selected(namespace, &live, publish_not_ready);
    if endpoints.ready >= params.min_ready as usize {
        return healthy(&id, endpoints.ready);
    }

    let mut message = format!(
        "Service {id} has {} (need {})",
        endpoints.summary(),
        params.min_ready
    );
    let not_ready: Vec<String> = live
        .iter()
        .filter(|p| !is_ready(p))
        .map(|p| pod_id(namespace, p))
        .collect();
    if !not_ready.is_empty() && !publish_not_ready {
        message.push_str(&format!(
            "; {} of {} selected pods not Ready: {}",
            not_ready.len(),
            live.len(),
            name_some(&not_ready, 2)
        ));
    } else if live.len() < params.min_ready as usize {
        message.push_str(&format!(
            "; selector {} matches only {} pod(s)",
            format_labels(selector.iter()),
            live.len()
        ));
    }
    if endpoints.elsewhere > 0 {
        message.push_str(&format!(
            "; {} point at pods the selector does not pick (the EndpointSlice controller has \
             not caught up, or another controller wrote them) and do not count",
            plural(endpoints.elsewhere, "ready endpoint")
        ));
    }
    Verdict::progressing(message).into()
}

fn healthy(id: &str, ready: usize) -> Finding {
    Verdict::healthy(format!(
        "Service {id} has {}",
        plural(ready, "ready endpoint")
    ))
    .into()
}

/// `1 ready endpoint`, `2 ready endpoints`.
fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The parts of a Service's spec besides its selector that decide its verdict, as annotation
/// mode records them (`wavegate.dev/judged-state`) and the Service health script renders
/// them: `type=<spec.type, ClusterIP when unset>,publishNotReadyAddresses=<true|false>`. A
/// Service has no `metadata.generation`, so this is how a stored verdict is tied to the spec
/// it was judged for.
pub fn judged_spec(service: &ServiceView) -> String {
    format!(
        "type={},publishNotReadyAddresses={}",
        service.type_.as_deref().unwrap_or("ClusterIP"),
        service.publish_not_ready_addresses
    )
}

/// The selector matches no pod that could become an endpoint. Whether that is a mistake or a
/// moment in a rollout decides between a persistent failure and plain waiting.
fn no_live_pods(
    id: &str,
    namespace: &str,
    service: &str,
    selector: &Labels,
    matching: &[&PodView],
    pods: &[&PodView],
) -> Finding {
    let wanted = format_labels(selector.iter());
    if !matching.is_empty() {
        // Only finished or deleted pods match: a Job-like workload or a rollout in flight.
        // The controller that owns them will replace them (or not); either way, keep waiting.
        let names: Vec<String> = matching.iter().map(|p| pod_id(namespace, p)).collect();
        return Verdict::progressing(format!(
            "Service {id} selects {wanted}, which matches only pods that are finished or being deleted: {}",
            name_some(&names, MAX_NAMED_PODS)
        ))
        .into();
    }

    let mut near: Vec<(Resemblance, &PodView)> = pods
        .iter()
        .copied()
        .filter(|p| is_live(p))
        .filter_map(|p| resemblance(selector, service, &p.labels, workload_of(p)).map(|r| (r, p)))
        .collect();
    if near.is_empty() {
        // Nothing resembling the target exists yet: the workload is most likely being created
        // in this very wave. That is not evidence of a mistake.
        return Verdict::progressing(format!(
            "Service {id} selects {wanted}, which matches no pods yet"
        ))
        .into();
    }
    near.sort_by(|(a, pa), (b, pb)| b.cmp(a).then_with(|| pa.name.cmp(&pb.name)));
    let described: Vec<String> = near
        .iter()
        .take(MAX_NAMED_PODS)
        .map(|(_, p)| {
            format!(
                "{} ({})",
                pod_id(namespace, p),
                format_labels(relevant_labels(selector, &p.labels).into_iter())
            )
        })
        .collect();
    let (noun, verb) = if described.len() == 1 {
        ("pod", "looks")
    } else {
        ("pods", "look")
    };
    let more = match near.len().saturating_sub(MAX_NAMED_PODS) {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    if !near.iter().any(|(r, _)| r.strong) {
        // Only siblings: pods of the same application that differ in one value of a
        // multi-key selector, most often a component or role (`component=api` for a Service
        // of the workers). The hint helps a reader with a real typo, but it is no evidence
        // that the selector is wrong: the selected component may simply not run yet.
        return Verdict::progressing(format!(
            "Service {id} selects {wanted}, which matches no pods yet; closest: {}{more}, \
             differing in one value (a sibling component, or the intended target)",
            described.join(", ")
        ))
        .into();
    }
    // Strong evidence of a selector/label mismatch (seed 001), but a relabelling rollout
    // passes through this state too, so the caller's grace decides when it becomes Degraded.
    Finding::Persistent {
        message: format!(
            "Service {id} selects {wanted}, which matches no pods; {noun} {}{more} {verb} like the intended target",
            described.join(", ")
        ),
    }
}

/// How much a pod looks like the Service's intended target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Resemblance {
    /// Evidence of a mistake, not just of a relative: the wanted value under another key, or a
    /// workload named like the Service.
    pub(crate) strong: bool,
    pub(crate) score: u32,
}

/// A pod the EndpointSlice controller will publish (or is about to, once it has an IP).
///
/// `ShouldPodBeInEndpoints` (k8s.io/endpointslice/util) drops terminal pods (phase Succeeded or
/// Failed); pods with a deletionTimestamp stay listed only as `terminating`, never ready
/// (unless publishNotReadyAddresses), so they are no target for new traffic either. A pod
/// without an IP yet still counts here: it is the intended target, just not scheduled.
fn is_live(pod: &PodView) -> bool {
    let terminal = matches!(pod.phase.as_deref(), Some("Succeeded" | "Failed"));
    !terminal && !pod.deleting
}

/// `podutil.IsPodReady`: the pod's `Ready` condition is `True`.
fn is_ready(pod: &PodView) -> bool {
    super::ready_condition(pod).is_some_and(|c| &*c.status == "True")
}

/// How strongly a pod (its labels and the workload that owns it) suggests it was meant to be
/// selected, or `None` if it does not. `wavegate lint` asks the same of pod templates in
/// rendered manifests, so a review and a sync name the same intended target.
///
/// A guess that turns into Degraded (after the grace) must be strict, or any shared label
/// value (`app.kubernetes.io/instance=forgejo` on an unrelated pod) fails a sync whose workload
/// simply has no pods yet. A pod resembles the target when
/// - it carries every selector key and exactly one value differs, and either the wanted value
///   sits under another key of the pod (seed 001: `app=gitea` with
///   `app.kubernetes.io/instance=forgejo` for `app=forgejo`) — strong — or the selector has
///   other pairs that do match — a sibling (`component=api` for a Service of the workers), a
///   hint only; or
/// - its workload is named like the Service (a StatefulSet `forgejo`, a ReplicaSet
///   `forgejo-<pod-template-hash>` of a Deployment `forgejo`, or a pod `forgejo` without a
///   controller, which is its own workload), whatever its labels — strong.
pub(crate) fn resemblance(
    selector: &Labels,
    service: &str,
    labels: &Labels,
    workload: Option<&str>,
) -> Option<Resemblance> {
    let mut score = 0;
    let mut strong = false;
    let differing: Vec<(&str, &str)> = selector
        .iter()
        .filter(|(k, v)| labels.get(k).is_some_and(|have| have != *v))
        .collect();
    let all_keys = selector.iter().all(|(k, _)| labels.contains_key(k));
    if all_keys && differing.len() == 1 {
        let (key, wanted) = differing[0];
        let elsewhere = labels.iter().any(|(k, v)| k != key && v == wanted);
        if selector.len() > 1 || elsewhere {
            score += 4 * (selector.len() as u32 - 1) + if elsewhere { 2 } else { 0 } + 1;
            strong |= elsewhere;
        }
    }
    if workload.is_some_and(|w| w == service) {
        score += 8;
        strong = true;
    }
    (score > 0).then_some(Resemblance { strong, score })
}

/// The name of the workload that owns a pod: its controller, or for a ReplicaSet the
/// Deployment it was cut from (`<deployment>-<pod-template-hash>`, the name the Deployment
/// controller gives it, pkg/controller/deployment/sync.go). A pod without a controller is its
/// own workload.
fn workload_of(pod: &PodView) -> Option<&str> {
    let Some(owner) = pod.owners.iter().find(|o| o.controller) else {
        return (!pod.name.is_empty()).then_some(&*pod.name);
    };
    let name = &*owner.name;
    if &*owner.kind == "ReplicaSet" {
        let hash = pod.labels.get("pod-template-hash")?;
        return name.strip_suffix(hash)?.strip_suffix('-');
    }
    Some(name)
}

/// The pod's labels a reader needs to see the mismatch: the selector's keys, keys that hold a
/// selector value, and the usual identity keys.
pub(crate) fn relevant_labels<'a>(
    selector: &Labels,
    labels: &'a Labels,
) -> Vec<(&'a str, &'a str)> {
    let values: BTreeSet<&str> = selector.iter().map(|(_, v)| v).collect();
    labels
        .iter()
        .filter(|(k, v)| {
            selector.contains_key(k) || values.contains(v) || IDENTITY_KEYS.contains(k)
        })
        .collect()
}

pub(crate) fn format_labels<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    labels
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pod_id(namespace: &str, pod: &PodView) -> String {
    let ns = pod.namespace.as_deref().unwrap_or(namespace);
    // A view keeps an absent name as "" (the API server never serves one).
    let name = if pod.name.is_empty() {
        "<unnamed>"
    } else {
        &pod.name
    };
    format!("{ns}/{name}")
}

/// `a, b (and 3 more)`.
fn name_some(names: &[String], max: usize) -> String {
    let mut out = names
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > max {
        out.push_str(&format!(" (and {} more)", names.len() - max));
    }
    out
}

/// The EndpointSlices that speak for this Service: labelled with its name (discovery.k8s.io/v1
/// `LabelServiceName`, how the EndpointSlice controller and kube-proxy associate them) and not
/// owned by another Service. A Service deleted and recreated under the same name leaves the
/// old one's slices (owner UID of the old Service) until the garbage collector removes them;
/// they describe pods of a selector that may no longer exist.
struct Slices<'a>(Vec<&'a SliceView>);

impl<'a> Slices<'a> {
    fn of(
        namespace: &str,
        service_name: &str,
        service: &ServiceView,
        slices: &'a [Arc<SliceView>],
    ) -> Self {
        let uid = service.uid.as_ref();
        Slices(
            slices
                .iter()
                .map(Arc::as_ref)
                .filter(|s| {
                    s.namespace.as_deref().is_none_or(|ns| ns == namespace)
                        && s.service.as_deref() == Some(service_name)
                        && !owned_by_another_service(s, uid)
                })
                .collect(),
        )
    }

    fn endpoints(&self) -> impl Iterator<Item = &'a EndpointView> + '_ {
        self.0.iter().flat_map(|s| s.endpoints.iter())
    }

    /// What kube-proxy routes to: every ready, non-terminating endpoint listed.
    fn count_routed(&self) -> Endpoints {
        let mut all = BTreeSet::new();
        let mut ready = BTreeSet::new();
        for endpoint in self.endpoints() {
            let Some(key) = endpoint_key(endpoint) else {
                continue;
            };
            if counts_as_ready(endpoint) {
                ready.insert(key.clone());
            }
            all.insert(key);
        }
        Endpoints {
            ready: ready.len(),
            total: all.len(),
            elsewhere: 0,
        }
    }

    /// Ready endpoints that are the selected pods, now. A slice lags the pods it describes (the
    /// EndpointSlice controller batches updates) and may be written by another controller, so
    /// an endpoint counts only when its `targetRef` is a live pod the current selector picks
    /// (the same pod: UID too, where both are known, since a StatefulSet pod is recreated under
    /// its old name) and, unless `publishNotReadyAddresses`, that pod is Ready itself.
    fn count_selected(
        &self,
        namespace: &str,
        selected: &[&PodView],
        publish_not_ready: bool,
    ) -> Endpoints {
        let mut all = BTreeSet::new();
        let mut ready = BTreeSet::new();
        let mut elsewhere = BTreeSet::new();
        for endpoint in self.endpoints() {
            let Some(key) = endpoint_key(endpoint) else {
                continue;
            };
            let target = selected_target(endpoint, namespace, selected);
            if counts_as_ready(endpoint) {
                match target {
                    Some(pod) if publish_not_ready || is_ready(pod) => {
                        ready.insert(key.clone());
                    }
                    Some(_) => {}
                    None => {
                        elsewhere.insert(key.clone());
                    }
                }
            }
            all.insert(key);
        }
        Endpoints {
            ready: ready.len(),
            total: all.len(),
            elsewhere: elsewhere.len(),
        }
    }
}

fn owned_by_another_service(slice: &SliceView, uid: Option<&Uid>) -> bool {
    let Some(uid) = uid else {
        return false;
    };
    slice
        .owners
        .iter()
        .any(|o| &*o.kind == "Service" && o.uid != *uid)
}

/// The selected pod an endpoint points at, if any.
fn selected_target<'p>(
    endpoint: &EndpointView,
    namespace: &str,
    selected: &[&'p PodView],
) -> Option<&'p PodView> {
    let r = endpoint.target.as_ref()?;
    if r.kind.as_deref() != Some("Pod") || r.namespace.as_deref().is_some_and(|ns| ns != namespace)
    {
        return None;
    }
    let name = r.name.as_deref()?;
    selected.iter().copied().find(|p| {
        &*p.name == name
            && match (r.uid.as_ref(), p.uid.as_ref()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    })
}

/// Endpoints of one Service across all its EndpointSlices.
struct Endpoints {
    ready: usize,
    total: usize,
    /// Ready endpoints that are not pods the selector picks.
    elsewhere: usize,
}

impl Endpoints {
    fn summary(&self) -> String {
        format!("{} of {} ready endpoints", self.ready, self.total)
    }
}

/// One key per backend. Slices may overlap while the controller moves endpoints between them,
/// and a dual-stack Service has one slice per address family listing the same pod twice, so
/// the pod (targetRef) identifies an endpoint; addresses only when there is no targetRef.
fn endpoint_key(endpoint: &EndpointView) -> Option<String> {
    if let Some(r) = endpoint.target.as_ref()
        && let Some(name) = r.name.as_deref()
    {
        let kind = r.kind.as_deref().unwrap_or("");
        let ns = r.namespace.as_deref().unwrap_or("");
        return Some(format!("{kind}/{ns}/{name}"));
    }
    endpoint.address.as_ref().map(|a| format!("addr/{a}"))
}

/// Kubernetes' own readiness, not ours: `ready` nil means ready (EndpointConditions API doc),
/// and for `publishNotReadyAddresses` Services the EndpointSlice controller sets ready=true
/// whatever the pod's readiness (`podToEndpoint` in k8s.io/endpointslice utils.go) — exactly
/// what DNS publishes, which is the point of such Services. Terminating endpoints never count:
/// they are on their way out, even when publishNotReadyAddresses keeps them "ready".
fn counts_as_ready(endpoint: &EndpointView) -> bool {
    endpoint.ready.unwrap_or(true) && !endpoint.terminating.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;
    use crate::views::SERVICE_NAME_LABEL;
    use k8s_openapi::api::core::v1::{Pod, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde::Deserialize;

    /// The objects of one fixture file (a multi-document YAML of real objects).
    #[derive(Default)]
    struct Snapshot {
        service: Option<Service>,
        pods: Vec<Arc<Pod>>,
        slices: Vec<Arc<EndpointSlice>>,
    }

    impl Snapshot {
        fn load(yaml: &str) -> Self {
            let mut snapshot = Snapshot::default();
            for doc in serde_yaml::Deserializer::from_str(yaml) {
                let value = serde_yaml::Value::deserialize(doc).unwrap();
                let kind = value["kind"].as_str().unwrap().to_owned();
                match kind.as_str() {
                    "Service" => snapshot.service = Some(serde_yaml::from_value(value).unwrap()),
                    "Pod" => snapshot
                        .pods
                        .push(Arc::new(serde_yaml::from_value(value).unwrap())),
                    "EndpointSlice" => snapshot
                        .slices
                        .push(Arc::new(serde_yaml::from_value(value).unwrap())),
                    other => panic!("unexpected kind {other}"),
                }
            }
            snapshot
        }

        fn check(&self, min_ready: u32) -> Finding {
            let svc = self.service.as_ref().unwrap();
            let ns = svc.metadata.namespace.as_deref().unwrap();
            let name = svc.metadata.name.as_deref().unwrap();
            // Judged as the cache keeps them.
            let pods: Vec<Arc<PodView>> = self
                .pods
                .iter()
                .map(|p| Arc::new(p.as_ref().into()))
                .collect();
            let slices: Vec<Arc<SliceView>> = self
                .slices
                .iter()
                .map(|s| Arc::new(s.as_ref().into()))
                .collect();
            check(
                ns,
                name,
                Some(&svc.into()),
                &pods,
                &slices,
                &Params { min_ready },
            )
        }
    }

    fn settled(finding: Finding) -> Verdict {
        match finding {
            Finding::Settled(v) => v,
            Finding::Persistent { message } => panic!("expected a settled verdict, got {message}"),
        }
    }

    const SEED_001: &str =
        include_str!("../../tests/fixtures/service/seed-001-selector-mismatch.yaml");
    const FIXED: &str = include_str!("../../tests/fixtures/service/selector-fixed.yaml");
    const NOT_READY: &str = include_str!("../../tests/fixtures/service/pods-not-ready.yaml");
    const JOIN: &str = include_str!("../../tests/fixtures/service/seed-000-headless-join.yaml");
    const EXTERNAL: &str = include_str!("../../tests/fixtures/service/external-name.yaml");
    const PUBLISH_NOT_READY: &str =
        include_str!("../../tests/fixtures/service/publish-not-ready.yaml");
    const TERMINATING: &str =
        include_str!("../../tests/fixtures/service/terminating-endpoint.yaml");
    const MANUAL: &str = include_str!("../../tests/fixtures/service/manual-slice-ready-nil.yaml");
    const OVERLAP: &str = include_str!("../../tests/fixtures/service/overlapping-slices.yaml");

    #[test]
    fn missing_service_is_missing() {
        let v = settled(check("cicd", "forgejo", None, &[], &[], &Params::default()));
        assert_eq!(v.status, HealthStatus::Missing);
        assert_eq!(v.message, "Service cicd/forgejo does not exist");
    }

    #[test]
    fn selector_matching_no_pods_is_not_healthy() {
        let finding = Snapshot::load(SEED_001).check(1);
        let Finding::Persistent { message } = finding else {
            panic!("expected a persistent failure, got {finding:?}");
        };
        assert_eq!(
            message,
            "Service cicd/forgejo selects app=forgejo, which matches no pods; \
             pod cicd/gitea-7d9c8f6b5-x2k4q (app=gitea, app.kubernetes.io/instance=forgejo, \
             app.kubernetes.io/name=gitea) looks like the intended target"
        );
    }

    #[test]
    fn selector_mismatch_does_not_name_unrelated_pods() {
        let finding = Snapshot::load(SEED_001).check(1);
        let Finding::Persistent { message } = finding else {
            panic!("expected a persistent failure");
        };
        assert!(!message.contains("runner"), "{message}");
    }

    #[test]
    fn selector_mismatch_becomes_degraded_only_after_grace() {
        use std::time::Duration;
        let finding = Snapshot::load(SEED_001).check(1);
        let grace = Duration::from_secs(60);
        let early = finding.clone().resolve(Duration::from_secs(5), grace);
        assert_eq!(early.status, HealthStatus::Progressing);
        let late = finding.resolve(Duration::from_secs(61), grace);
        assert_eq!(late.status, HealthStatus::Degraded);
    }

    #[test]
    fn fixed_selector_with_ready_endpoint_is_healthy() {
        let v = settled(Snapshot::load(FIXED).check(1));
        assert_eq!(
            v,
            Verdict::healthy("Service cicd/forgejo has 1 ready endpoint")
        );
    }

    #[test]
    fn fewer_ready_endpoints_than_min_ready_is_progressing() {
        let v = settled(Snapshot::load(FIXED).check(2));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Service cicd/forgejo has 1 of 1 ready endpoints (need 2); \
             selector app=gitea, app.kubernetes.io/name=gitea matches only 1 pod(s)"
        );
    }

    #[test]
    fn matching_pods_that_are_not_ready_are_named() {
        let v = settled(Snapshot::load(NOT_READY).check(1));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Service cicd/forgejo has 0 of 2 ready endpoints (need 1); 2 of 2 selected pods \
             not Ready: cicd/gitea-7d9c8f6b5-x2k4q, cicd/gitea-7d9c8f6b5-p9m2c"
        );
    }

    #[test]
    fn headless_join_service_with_min_ready_zero_is_healthy_before_any_pod_exists() {
        let v = settled(Snapshot::load(JOIN).check(0));
        assert_eq!(v.status, HealthStatus::Healthy);
        assert!(
            v.message
                .starts_with("Service prod/cockroachdb-join exists")
        );
    }

    #[test]
    fn selector_with_no_pods_at_all_is_waiting_not_failing() {
        let v = settled(Snapshot::load(JOIN).check(1));
        assert_eq!(
            v,
            Verdict::progressing(
                "Service prod/cockroachdb-join selects crdb.cockroachlabs.com/cluster=cockroachdb, \
                 which matches no pods yet"
            )
        );
    }

    #[test]
    fn external_name_service_is_healthy_without_endpoints() {
        let v = settled(Snapshot::load(EXTERNAL).check(3));
        assert_eq!(v.status, HealthStatus::Healthy);
        assert!(v.message.contains("cicd/smtp"));
        assert!(v.message.contains("publishes no endpoints"));
    }

    #[test]
    fn publish_not_ready_addresses_counts_unready_pods_as_kubernetes_does() {
        let v = settled(Snapshot::load(PUBLISH_NOT_READY).check(2));
        assert_eq!(
            v,
            Verdict::healthy("Service prod/cockroachdb has 2 ready endpoints")
        );
    }

    #[test]
    fn terminating_endpoint_does_not_count() {
        let v = settled(Snapshot::load(TERMINATING).check(2));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .starts_with("Service cicd/forgejo has 1 of 2 ready endpoints (need 2)"),
            "{}",
            v.message
        );
    }

    #[test]
    fn terminating_endpoint_does_not_count_even_when_marked_ready() {
        let mut s = Snapshot::load(TERMINATING);
        let slice = Arc::make_mut(&mut s.slices[0]);
        for ep in slice.endpoints.iter_mut().flatten() {
            ep.conditions.get_or_insert_default().ready = Some(true);
        }
        let v = settled(s.check(2));
        assert_eq!(v.status, HealthStatus::Progressing);
    }

    #[test]
    fn selectorless_service_with_ready_nil_endpoint_is_healthy() {
        let v = settled(Snapshot::load(MANUAL).check(1));
        assert_eq!(
            v,
            Verdict::healthy(
                "Service ddb/legacy-pg has no selector; its EndpointSlices list 1 ready endpoint \
                 that kube-proxy routes to"
            )
        );
    }

    #[test]
    fn selectorless_service_without_endpoints_is_progressing() {
        let mut s = Snapshot::load(MANUAL);
        s.slices.clear();
        let v = settled(s.check(1));
        assert_eq!(
            v,
            Verdict::progressing(
                "Service ddb/legacy-pg has no selector and its EndpointSlices list \
                 0 of 0 ready endpoints (need 1)"
            )
        );
    }

    #[test]
    fn pod_listed_in_two_overlapping_slices_counts_once() {
        let v = settled(Snapshot::load(OVERLAP).check(2));
        assert!(
            v.message
                .starts_with("Service cicd/forgejo has 1 of 1 ready endpoints (need 2)"),
            "{}",
            v.message
        );
    }

    #[test]
    fn slices_of_another_service_are_ignored() {
        let mut s = Snapshot::load(FIXED);
        let slice = Arc::make_mut(&mut s.slices[0]);
        slice
            .metadata
            .labels
            .get_or_insert_default()
            .insert(SERVICE_NAME_LABEL.into(), "gitea-ssh".into());
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing);
    }

    #[test]
    fn only_finished_pods_matching_is_progressing() {
        let mut s = Snapshot::load(FIXED);
        let pod = Arc::make_mut(&mut s.pods[0]);
        pod.status.get_or_insert_default().phase = Some("Succeeded".into());
        s.slices.clear();
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message.contains("finished or being deleted"),
            "{}",
            v.message
        );
    }

    #[test]
    fn near_matches_are_capped_at_three() {
        let mut s = Snapshot::load(SEED_001);
        let template = s.pods[0].clone();
        for i in 0..4 {
            let mut pod = (*template).clone();
            pod.metadata.name = Some(format!("gitea-extra-{i}"));
            s.pods.push(Arc::new(pod));
        }
        let Finding::Persistent { message } = s.check(1) else {
            panic!("expected a persistent failure");
        };
        assert!(message.contains("(and 2 more) look like"), "{message}");
    }
    /// FIXED with the Service's UID set and its slice owned by it, as the controller writes it.
    fn owned_fixed() -> Snapshot {
        let mut s = Snapshot::load(FIXED);
        s.service.as_mut().unwrap().metadata.uid = Some("svc-uid-2".into());
        let slice = Arc::make_mut(&mut s.slices[0]);
        slice.metadata.owner_references = Some(vec![owner("Service", "forgejo", "svc-uid-2")]);
        s
    }

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    fn pod_mut(s: &mut Snapshot, i: usize) -> &mut Pod {
        Arc::make_mut(&mut s.pods[i])
    }

    fn set_ready(pod: &mut Pod, ready: bool) {
        for c in pod.status.as_mut().unwrap().conditions.iter_mut().flatten() {
            c.status = if ready { "True" } else { "False" }.into();
        }
    }

    #[test]
    fn ready_endpoint_of_a_pod_outside_the_selector_is_not_counted() {
        // The selector moved to a pod that is not Ready yet; the slice still lists the old pod.
        let mut s = owned_fixed();
        let mut new_pod = (*s.pods[0]).clone();
        new_pod.metadata.name = Some("forgejo-0".into());
        set_ready(&mut new_pod, false);
        s.pods.push(Arc::new(new_pod));
        pod_mut(&mut s, 0)
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("app".into(), "gitea-old".into());
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message
                .contains("1 ready endpoint point at pods the selector does not pick"),
            "{}",
            v.message
        );
    }

    #[test]
    fn slice_of_a_previous_service_uid_is_not_counted() {
        // Deleted and recreated under the same name: the old Service's slice is not yet gone.
        let mut s = owned_fixed();
        s.service.as_mut().unwrap().metadata.uid = Some("svc-uid-3".into());
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.contains("0 of 0 ready endpoints"),
            "{}",
            v.message
        );
    }

    #[test]
    fn service_being_deleted_is_never_healthy() {
        let mut s = owned_fixed();
        s.service.as_mut().unwrap().metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-01T00:00:00Z".parse().unwrap(),
            ));
        let v = settled(s.check(1));
        assert_eq!(
            v,
            Verdict::progressing("Service cicd/forgejo is being deleted")
        );
    }

    #[test]
    fn lagging_slice_for_a_pod_no_longer_ready_is_not_counted() {
        let mut s = owned_fixed();
        set_ready(pod_mut(&mut s, 0), false);
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    }

    #[test]
    fn endpoint_of_a_recreated_pod_with_the_same_name_is_not_counted() {
        let mut s = owned_fixed();
        pod_mut(&mut s, 0).metadata.uid = Some("pod-uid-new".into());
        let slice = Arc::make_mut(&mut s.slices[0]);
        slice.endpoints.as_mut().unwrap()[0]
            .target_ref
            .as_mut()
            .unwrap()
            .uid = Some("pod-uid-old".into());
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    }

    #[test]
    fn endpoint_of_the_selected_ready_pod_is_counted() {
        let mut s = owned_fixed();
        pod_mut(&mut s, 0).metadata.uid = Some("pod-uid-1".into());
        let slice = Arc::make_mut(&mut s.slices[0]);
        slice.endpoints.as_mut().unwrap()[0]
            .target_ref
            .as_mut()
            .unwrap()
            .uid = Some("pod-uid-1".into());
        let v = settled(s.check(1));
        assert_eq!(
            v,
            Verdict::healthy("Service cicd/forgejo has 1 ready endpoint")
        );
    }

    #[test]
    fn shared_instance_label_alone_is_not_a_near_match() {
        // An unrelated pod of the same Helm release: no `app` key at all.
        let mut s = Snapshot::load(SEED_001);
        let labels = pod_mut(&mut s, 0).metadata.labels.as_mut().unwrap();
        labels.remove("app");
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.ends_with("which matches no pods yet"),
            "{}",
            v.message
        );
    }

    #[test]
    fn pod_that_only_shares_the_selector_key_is_not_a_near_match() {
        // `app=runner` says nothing about `app=forgejo`.
        let mut s = Snapshot::load(SEED_001);
        let labels = pod_mut(&mut s, 0).metadata.labels.as_mut().unwrap();
        labels.retain(|k, _| k == "app");
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    }

    #[test]
    fn pod_of_a_deployment_named_like_the_service_is_a_near_match() {
        let mut s = Snapshot::load(SEED_001);
        let pod = pod_mut(&mut s, 0);
        pod.metadata
            .labels
            .as_mut()
            .unwrap()
            .retain(|k, _| k == "pod-template-hash");
        pod.metadata.owner_references =
            Some(vec![owner("ReplicaSet", "forgejo-7d9c8f6b5", "rs-uid")]);
        let finding = s.check(1);
        assert!(matches!(finding, Finding::Persistent { .. }), "{finding:?}");
    }

    #[test]
    fn multi_key_selector_with_one_value_off_is_a_hint_not_a_failure() {
        let mut s = Snapshot::load(FIXED);
        s.slices.clear();
        let sel = s
            .service
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .selector
            .as_mut()
            .unwrap();
        sel.insert("app.kubernetes.io/name".into(), "forgejo".into());
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.contains("closest: cicd/gitea-7d9c8f6b5-x2k4q"),
            "{v}"
        );
    }

    #[test]
    fn sibling_differing_only_in_component_is_progressing_with_the_hint() {
        // The Service of the workers before any worker runs; the api pods of the same app are
        // siblings, not a sign that the selector is wrong.
        let mut s = Snapshot::load(FIXED);
        s.slices.clear();
        let spec = s.service.as_mut().unwrap().spec.as_mut().unwrap();
        spec.selector = Some(
            [
                ("app.kubernetes.io/name", "shop"),
                ("app.kubernetes.io/component", "worker"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let pod = pod_mut(&mut s, 0);
        pod.metadata.labels = Some(
            [
                ("app.kubernetes.io/name", "shop"),
                ("app.kubernetes.io/component", "api"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.contains(
                "closest: cicd/gitea-7d9c8f6b5-x2k4q (app.kubernetes.io/component=api, \
                 app.kubernetes.io/name=shop)"
            ),
            "{v}"
        );
    }

    #[test]
    fn bare_pod_named_like_the_service_is_strong_evidence() {
        // A pod without a controller is its own workload: `forgejo`, for Service `forgejo`.
        let mut s = Snapshot::load(SEED_001);
        let pod = pod_mut(&mut s, 0);
        pod.metadata.name = Some("forgejo".into());
        pod.metadata.owner_references = None;
        pod.metadata
            .labels
            .as_mut()
            .unwrap()
            .retain(|k, _| k == "pod-template-hash");
        let finding = s.check(1);
        let Finding::Persistent { message } = finding else {
            panic!("expected a persistent failure, got {finding:?}");
        };
        assert!(message.contains("pod cicd/forgejo"), "{message}");
    }

    #[test]
    fn load_balancer_without_an_ingress_address_is_not_healthy() {
        let mut s = owned_fixed();
        s.service.as_mut().unwrap().spec.as_mut().unwrap().type_ = Some("LoadBalancer".into());
        let v = settled(s.check(1));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(v.message.contains("without an ingress address"), "{v}");
    }
}
