//! What the watch cache keeps of pods, Services and EndpointSlices: compact views holding only
//! the fields the checks (`checks::service`, `checks::cockroach`), the verdict identity
//! (`evaluate`) and the waves timeline read, built from each typed object as the watch
//! delivers it and then dropped.
//!
//! Why not the k8s-openapi objects, stripped: their structs are large even when nearly empty
//! (a `Pod` is 2,464 bytes inline, 1,488 of them `PodSpec`; `ObjectMeta` 360; every label map
//! a `BTreeMap` node of ~540 bytes), so a stripped pod would cost ~3.2 KB cached (178
//! MiB at 30,000 pods). A view is ~400 bytes with its place in the store (one heaptrack reading
//! of benches/memory.rs --cluster): strings boxed to
//! their length, UIDs as 16 bytes, label maps as sorted slices shared by identical label sets
//! (a workload's replicas), and the strings that repeat across objects (label keys and values,
//! owner kinds, phases, condition words, namespaces) shared through an [`Interner`]. An absent
//! name reads as `""` (the API server serves none without one).
//!
//! A view must not change what a verdict says: a field a check reads keeps its absence
//! (`Option`) wherever the check tells "absent" from "empty"; a field read only for its
//! presence (`deletionTimestamp`) or only as `== Some(true)` (`controller`,
//! `publishNotReadyAddresses`) becomes a `bool`.

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Argo CD's field manager, for client- and server-side apply alike (argo-cd common/common.go
/// `ArgoCDSSAManager`): the managedFields entry whose time says when Argo CD last changed an
/// object (the waves timeline).
pub const ARGOCD_MANAGER: &str = "argocd-controller";

/// The label by which the EndpointSlice controller ties a slice to its Service
/// (discovery.k8s.io/v1 `LabelServiceName`).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

type Pairs = [(Arc<str>, Arc<str>)];

/// Shared copies of what repeats across cached objects: strings, and whole label sets (the
/// replicas of one workload carry the same labels). Unused entries are dropped when a table
/// has doubled since its last sweep, after a relist, and when deletions have halved the store
/// ([`Interner::sweep`]), so label values that come and go (a `pod-template-hash` per rollout,
/// a scaled-down StatefulSet's pod names) do not accumulate.
#[derive(Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    strings_swept_at: usize,
    label_sets: HashSet<Arc<Pairs>>,
    label_sets_swept_at: usize,
}

impl Interner {
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(s) {
            return shared.clone();
        }
        if self.strings.len() >= 2 * self.strings_swept_at.max(512) {
            self.sweep();
        }
        let shared: Arc<str> = Arc::from(s);
        self.strings.insert(shared.clone());
        shared
    }

    fn labels(&mut self, pairs: Vec<(Arc<str>, Arc<str>)>) -> Arc<Pairs> {
        if let Some(shared) = self.label_sets.get(pairs.as_slice()) {
            return shared.clone();
        }
        if self.label_sets.len() >= 2 * self.label_sets_swept_at.max(512) {
            self.label_sets.retain(|l| Arc::strong_count(l) > 1);
            self.label_sets_swept_at = self.label_sets.len();
        }
        let shared: Arc<Pairs> = Arc::from(pairs);
        self.label_sets.insert(shared.clone());
        shared
    }

    /// Drop every entry no cached view holds any more, and the table space it took. Also
    /// called by the store after a relist and when deletions have halved it: growth alone
    /// would leave a scaled-down StatefulSet's unique `pod-name` labels in the tables until
    /// unrelated growth doubled them.
    pub fn sweep(&mut self) {
        // Label sets hold strings: unused ones go first.
        self.label_sets.retain(|l| Arc::strong_count(l) > 1);
        self.label_sets.shrink_to_fit();
        self.label_sets_swept_at = self.label_sets.len();
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.strings.shrink_to_fit();
        self.strings_swept_at = self.strings.len();
    }

    /// Strings and label sets held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.strings.len() + self.label_sets.len()
    }
}

/// A label map (or an equality selector) as pairs sorted by key: `BTreeMap` order, so messages
/// that list labels read exactly as before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels(Arc<Pairs>);

impl Default for Labels {
    fn default() -> Self {
        Labels(Arc::new([]))
    }
}

impl Labels {
    pub(crate) fn of(map: &BTreeMap<String, String>, strings: &mut Interner) -> Labels {
        // A BTreeMap iterates in key order already.
        let pairs = map
            .iter()
            .map(|(k, v)| (strings.get(k), strings.get(v)))
            .collect();
        Labels(strings.labels(pairs))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| self.0[i].1.as_ref())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Kubernetes' equality selector (`labels.SelectorFromSet`, what a Service's selector
    /// means): every pair of `selector` is among these labels.
    pub fn matches<'a>(&self, selector: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        selector.into_iter().all(|(k, v)| self.get(k) == Some(v))
    }
}

/// An object's UID. The API server's are UUIDs, 36 characters of text (48 bytes on the heap);
/// kept as their 16 bytes when in the canonical lowercase form, whose text they give back
/// exactly, as text otherwise, so two UIDs are equal exactly when their texts are.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Uid {
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Uid {
    pub fn of(text: &str) -> Uid {
        Uid::canonical(text).map_or_else(|| Uid::Text(text.into()), Uid::Uuid)
    }

    fn canonical(text: &str) -> Option<[u8; 16]> {
        let t = text.as_bytes();
        if t.len() != 36 || [8, 13, 18, 23].iter().any(|&i| t[i] != b'-') {
            return None;
        }
        let mut hex = t.iter().filter(|&&c| c != b'-');
        let mut out = [0u8; 16];
        for byte in &mut out {
            let digit = |c: Option<&u8>| match c? {
                c @ b'0'..=b'9' => Some(c - b'0'),
                c @ b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            };
            *byte = digit(hex.next())? << 4 | digit(hex.next())?;
        }
        Some(out)
    }

    /// Whether this is the UID written `text`.
    pub fn is(&self, text: &str) -> bool {
        match self {
            Uid::Uuid(bytes) => Uid::canonical(text).as_ref() == Some(bytes),
            Uid::Text(own) => **own == *text,
        }
    }
}

impl std::fmt::Display for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Uid::Text(text) => f.write_str(text),
            Uid::Uuid(b) => {
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::fmt::Debug for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}", self = self.to_string())
    }
}

/// An owner reference, as the checks read it: which workload owns a pod (`kind`, `name`), and
/// whose UID (a slice's Service, a pod's CrdbCluster chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub kind: Arc<str>,
    pub name: Box<str>,
    pub uid: Uid,
    /// `controller: true`; absent and false read alike.
    pub controller: bool,
}

impl Owner {
    fn of(o: &OwnerReference, strings: &mut Interner) -> Owner {
        Owner {
            kind: strings.get(&o.kind),
            name: o.name.as_str().into(),
            uid: Uid::of(&o.uid),
            controller: o.controller == Some(true),
        }
    }
}

/// A pod's `Ready` condition (what `podutil.IsPodReady` reads), with the reason a message
/// quotes when it is not True.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyCondition {
    pub status: Arc<str>,
    pub reason: Option<Arc<str>>,
}

/// A pod: identity, labels, owners, whether it is being deleted, phase, IP and readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: Box<str>,
    pub namespace: Option<Arc<str>>,
    pub uid: Option<Uid>,
    pub labels: Labels,
    pub owners: Box<[Owner]>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    pub phase: Option<Arc<str>>,
    /// `status.podIP`: the only address a probe may go to.
    pub ip: Option<Box<str>>,
    pub ready: Option<ReadyCondition>,
    /// `spec.restartPolicy` is `Always` (the default): what Argo CD's Pod health reads to tell
    /// a server from a run-to-completion pod.
    pub restarts_always: bool,
    /// What Argo CD wrote on it, for a pod Argo CD applied itself (a bare Pod in an
    /// Application's manifests); boxed, since most pods (a workload's) have none.
    pub argocd: Option<Box<ArgoMarks>>,
}

/// When Argo CD last changed an object, and which application's its tracking says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgoMarks {
    pub changed_at: Option<Time>,
    pub tracking: Tracking,
}

impl PodView {
    pub fn project(pod: &Pod, strings: &mut Interner) -> PodView {
        let meta = &pod.metadata;
        let status = pod.status.as_ref();
        PodView {
            name: name_of(meta),
            namespace: meta.namespace.as_deref().map(|ns| strings.get(ns)),
            uid: meta.uid.as_deref().map(Uid::of),
            labels: labels_of(meta, strings),
            owners: owners_of(meta, strings),
            deleting: meta.deletion_timestamp.is_some(),
            phase: status
                .and_then(|s| s.phase.as_deref())
                .map(|p| strings.get(p)),
            ip: status.and_then(|s| s.pod_ip.as_deref()).map(Box::from),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| ReadyCondition {
                    status: strings.get(&c.status),
                    reason: c.reason.as_deref().map(|r| strings.get(r)),
                }),
            restarts_always: pod
                .spec
                .as_ref()
                .and_then(|s| s.restart_policy.as_deref())
                .is_none_or(|p| p == "Always"),
            argocd: {
                let marks = ArgoMarks {
                    changed_at: argocd_changed_at(meta),
                    tracking: tracking_of(meta, "", "Pod", strings),
                };
                (marks.changed_at.is_some() || marks.tracking != Tracking::default())
                    .then(|| Box::new(marks))
            },
        }
    }
}

impl From<&Pod> for PodView {
    fn from(pod: &Pod) -> Self {
        PodView::project(pod, &mut Interner::default())
    }
}

/// A Service: identity, whether it is being deleted, what decides how it is judged (type,
/// selector, `publishNotReadyAddresses`, a LoadBalancer's address), and when Argo CD last
/// changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceView {
    pub name: Box<str>,
    pub namespace: Option<Arc<str>>,
    pub uid: Option<Uid>,
    pub generation: Option<i64>,
    pub deleting: bool,
    /// `spec.type`.
    pub type_: Option<Arc<str>>,
    pub external_name: Option<Box<str>>,
    /// `status.loadBalancer.ingress` lists at least one address.
    pub load_balancer_ingress: bool,
    /// `spec.selector`, absent or empty alike (an empty selector round-trips as none).
    pub selector: Option<Labels>,
    pub publish_not_ready_addresses: bool,
    /// The latest `time` of Argo CD's managedFields entries.
    pub argocd_changed_at: Option<Time>,
    /// Which Argo CD application manages it ([`Tracking`]).
    pub tracking: Tracking,
}

/// Argo CD's tracking annotation and its default instance label (argo-cd
/// `util/argo/resource_tracking.go`: the annotation `<app>:<group>/<kind>:<namespace>/<name>`
/// is the default method since 3.0; label tracking writes the app's name into the label).
pub const TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

/// argocd-cm `application.resourceTrackingMethod`: which of an object's marks Argo CD reads to
/// tell which application manages it (argo-cd `util/argo/resource_tracking.go` `GetAppName`;
/// an empty setting is `annotation`, `util/settings/settings.go` `GetTrackingMethod`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum TrackingMethod {
    /// The tracking-id annotation only (Argo CD 3.x's default).
    #[default]
    Annotation,
    /// The instance label only (Argo CD 2.x's default).
    Label,
    /// Both are written, but `GetAppName` reads the annotation only: the label, which Git can
    /// set on any object (and which Helm charts set on every object they render), decides
    /// nothing.
    #[value(name = "annotation+label")]
    AnnotationAndLabel,
}

/// An object's tracking marks, as Argo CD's ownership check reads them: the application its
/// tracking-id names, kept only when the id's group, kind, namespace and name are the object's
/// own (argo-cd `controller/state.go` `isSelfReferencedObj`: an id copied onto another object
/// does not make it managed), and its instance label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tracking {
    pub annotation: Option<Arc<str>>,
    pub label: Option<Arc<str>>,
}

impl Tracking {
    /// The application (Argo CD's `InstanceName`: `<name>` in Argo CD's own namespace,
    /// `<namespace>_<name>` elsewhere) that manages the object, under `method`.
    pub fn app(&self, method: TrackingMethod) -> Option<&str> {
        match method {
            TrackingMethod::Label => self.label.as_deref(),
            TrackingMethod::Annotation | TrackingMethod::AnnotationAndLabel => {
                self.annotation.as_deref()
            }
        }
    }

    /// `id` and `label` of an object of `group`/`kind` named `namespace`/`name`.
    pub fn of(
        id: Option<&str>,
        label: Option<&str>,
        object: ObjectId<'_>,
        strings: &mut Interner,
    ) -> Tracking {
        Tracking {
            annotation: id
                .and_then(|id| app_of_id(id, object))
                .map(|app| strings.get(app)),
            label: label.map(|l| strings.get(l)),
        }
    }
}

/// What a tracking id must name: an object's group, kind, namespace (`""` when cluster-scoped)
/// and name.
#[derive(Debug, Clone, Copy)]
pub struct ObjectId<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// The application a tracking id names, if the rest of the id names `object` (argo-cd
/// `ParseAppInstanceValue`: `<app>:<group>/<kind>:<namespace>/<name>`; `isSelfReferencedObj`:
/// a cluster-scoped object matches any namespace in the id).
pub fn app_of_id<'a>(id: &'a str, object: ObjectId<'_>) -> Option<&'a str> {
    let mut parts = id.splitn(3, ':');
    let (app, group_kind, ns_name) = (parts.next()?, parts.next()?, parts.next()?);
    let (group, kind) = split_exactly_once(group_kind)?;
    let (namespace, name) = split_exactly_once(ns_name)?;
    let same = group == object.group
        && kind == object.kind
        && name == object.name
        && (object.namespace.is_empty() || namespace == object.namespace);
    same.then_some(app)
}

/// `a/b` with exactly one `/` (Argo CD's `strings.Split` into exactly two parts).
fn split_exactly_once(s: &str) -> Option<(&str, &str)> {
    let (a, b) = s.split_once('/')?;
    (!b.contains('/')).then_some((a, b))
}

/// The application a JSON object's tracking names under `method`, given what the object is
/// (`group`/`kind`: the kind it was read as; the API server does not always echo it).
pub fn managing_app<'a>(
    object: &'a serde_json::Value,
    group: &str,
    kind: &str,
    method: TrackingMethod,
) -> Option<&'a str> {
    let meta = object.get("metadata")?;
    let s = |field: &str, key: &str| meta.get(field)?.get(key)?.as_str();
    match method {
        TrackingMethod::Label => s("labels", INSTANCE_LABEL),
        TrackingMethod::Annotation | TrackingMethod::AnnotationAndLabel => {
            let str_of = |k: &str| meta.get(k).and_then(serde_json::Value::as_str);
            let id = ObjectId {
                group,
                kind,
                namespace: str_of("namespace").unwrap_or(""),
                name: str_of("name").unwrap_or(""),
            };
            app_of_id(s("annotations", TRACKING_ID)?, id)
        }
    }
}

/// An object's tracking marks from its metadata.
fn tracking_of(meta: &ObjectMeta, group: &str, kind: &str, strings: &mut Interner) -> Tracking {
    let id = ObjectId {
        group,
        kind,
        namespace: meta.namespace.as_deref().unwrap_or(""),
        name: meta.name.as_deref().unwrap_or(""),
    };
    Tracking::of(
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(TRACKING_ID))
            .map(String::as_str),
        meta.labels
            .as_ref()
            .and_then(|l| l.get(INSTANCE_LABEL))
            .map(String::as_str),
        id,
        strings,
    )
}

/// The latest `time` of Argo CD's managedFields entries: when Argo CD last changed the object.
fn argocd_changed_at(meta: &ObjectMeta) -> Option<Time> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|f| f.manager.as_deref() == Some(ARGOCD_MANAGER))
        .filter_map(|f| f.time.clone())
        .max_by_key(|t| t.0)
}

impl ServiceView {
    pub fn project(service: &Service, strings: &mut Interner) -> ServiceView {
        let meta = &service.metadata;
        let spec = service.spec.as_ref();
        ServiceView {
            name: name_of(meta),
            namespace: meta.namespace.as_deref().map(|ns| strings.get(ns)),
            uid: meta.uid.as_deref().map(Uid::of),
            generation: meta.generation,
            deleting: meta.deletion_timestamp.is_some(),
            type_: spec
                .and_then(|s| s.type_.as_deref())
                .map(|t| strings.get(t)),
            external_name: spec.and_then(|s| s.external_name.as_deref()).map(Box::from),
            load_balancer_ingress: service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .is_some_and(|i| !i.is_empty()),
            selector: spec
                .and_then(|s| s.selector.as_ref())
                .filter(|s| !s.is_empty())
                .map(|s| Labels::of(s, strings)),
            publish_not_ready_addresses: spec.and_then(|s| s.publish_not_ready_addresses)
                == Some(true),
            argocd_changed_at: argocd_changed_at(meta),
            tracking: tracking_of(meta, "", "Service", strings),
        }
    }
}

impl From<&Service> for ServiceView {
    fn from(service: &Service) -> Self {
        ServiceView::project(service, &mut Interner::default())
    }
}

/// Where an endpoint points: a pod, usually.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Option<Arc<str>>,
    pub namespace: Option<Arc<str>>,
    pub name: Option<Box<str>>,
    pub uid: Option<Uid>,
}

/// One endpoint of a slice: its first address (what identifies it without a target), its
/// target, and the conditions kube-proxy reads (absent `ready` means ready, per the API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointView {
    pub address: Option<Box<str>>,
    pub target: Option<Target>,
    pub ready: Option<bool>,
    pub terminating: Option<bool>,
}

impl EndpointView {
    fn of(e: &Endpoint, strings: &mut Interner) -> EndpointView {
        let conditions = e.conditions.as_ref();
        EndpointView {
            address: e.addresses.first().map(|a| a.as_str().into()),
            target: e.target_ref.as_ref().map(|r| target_of(r, strings)),
            ready: conditions.and_then(|c| c.ready),
            terminating: conditions.and_then(|c| c.terminating),
        }
    }
}

fn target_of(r: &ObjectReference, strings: &mut Interner) -> Target {
    Target {
        kind: r.kind.as_deref().map(|k| strings.get(k)),
        namespace: r.namespace.as_deref().map(|ns| strings.get(ns)),
        name: r.name.as_deref().map(Box::from),
        uid: r.uid.as_deref().map(Uid::of),
    }
}

/// An EndpointSlice: which Service it speaks for (its `kubernetes.io/service-name` label and
/// owner), and its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceView {
    pub name: Box<str>,
    pub namespace: Option<Arc<str>>,
    pub service: Option<Arc<str>>,
    pub owners: Box<[Owner]>,
    pub endpoints: Box<[EndpointView]>,
}

impl SliceView {
    pub fn project(slice: &EndpointSlice, strings: &mut Interner) -> SliceView {
        let meta = &slice.metadata;
        SliceView {
            name: name_of(meta),
            namespace: meta.namespace.as_deref().map(|ns| strings.get(ns)),
            service: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .map(|s| strings.get(s)),
            owners: owners_of(meta, strings),
            endpoints: slice
                .endpoints
                .iter()
                .flatten()
                .map(|e| EndpointView::of(e, strings))
                .collect(),
        }
    }
}

impl From<&EndpointSlice> for SliceView {
    fn from(slice: &EndpointSlice) -> Self {
        SliceView::project(slice, &mut Interner::default())
    }
}

/// A cached view: named in its namespace.
pub trait View: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn namespace(&self) -> Option<&str>;
    /// The bytes of text it holds, each shared string counted as if it were its own (a remote
    /// cluster's byte bound, `cache::bounds`, errs on the side of the bound).
    fn text_bytes(&self) -> usize;
}

macro_rules! view {
    ($($t:ty),*) => {$(
        impl View for $t {
            fn name(&self) -> &str {
                &self.name
            }
            fn namespace(&self) -> Option<&str> {
                self.namespace.as_deref()
            }
            fn text_bytes(&self) -> usize {
                self.text()
            }
        }
    )*};
}
view!(PodView, ServiceView, SliceView);

fn len(s: Option<&str>) -> usize {
    s.map_or(0, str::len)
}

impl Labels {
    fn text(&self) -> usize {
        self.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

impl Owner {
    fn text(&self) -> usize {
        self.kind.len() + self.name.len() + self.uid.to_string().len()
    }
}

impl Tracking {
    fn text(&self) -> usize {
        len(self.annotation.as_deref()) + len(self.label.as_deref())
    }
}

impl PodView {
    fn text(&self) -> usize {
        let ready = self
            .ready
            .as_ref()
            .map_or(0, |r| r.status.len() + len(r.reason.as_deref()));
        self.name.len()
            + len(self.namespace.as_deref())
            + self.labels.text()
            + self.owners.iter().map(Owner::text).sum::<usize>()
            + len(self.phase.as_deref())
            + len(self.ip.as_deref())
            + ready
            + self.argocd.as_ref().map_or(0, |a| a.tracking.text())
    }
}

impl ServiceView {
    fn text(&self) -> usize {
        self.name.len()
            + len(self.namespace.as_deref())
            + len(self.type_.as_deref())
            + len(self.external_name.as_deref())
            + self.selector.as_ref().map_or(0, Labels::text)
            + self.tracking.text()
    }
}

impl SliceView {
    fn text(&self) -> usize {
        let endpoint = |e: &EndpointView| {
            len(e.address.as_deref())
                + e.target.as_ref().map_or(0, |t| {
                    len(t.kind.as_deref()) + len(t.namespace.as_deref()) + len(t.name.as_deref())
                })
                + std::mem::size_of::<EndpointView>()
        };
        self.name.len()
            + len(self.namespace.as_deref())
            + len(self.service.as_deref())
            + self.owners.iter().map(Owner::text).sum::<usize>()
            + self.endpoints.iter().map(endpoint).sum::<usize>()
    }
}

fn name_of(meta: &ObjectMeta) -> Box<str> {
    meta.name.as_deref().unwrap_or_default().into()
}

fn labels_of(meta: &ObjectMeta, strings: &mut Interner) -> Labels {
    meta.labels
        .as_ref()
        .map(|l| Labels::of(l, strings))
        .unwrap_or_default()
}

fn owners_of(meta: &ObjectMeta, strings: &mut Interner) -> Box<[Owner]> {
    meta.owner_references
        .iter()
        .flatten()
        .map(|o| Owner::of(o, strings))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_keeps_what_checks_read_and_nothing_else() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u1",
                         "labels": {"b": "2", "a": "1"},
                         "annotations": {"huge": "x"},
                         "deletionTimestamp": "2026-12-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                              "name": "web", "uid": "s1", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Initialized", "status": "True"},
                                      {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                                       "message": "not yet"}]}
        }))
        .unwrap();
        let view = PodView::from(&pod);
        assert_eq!(
            view.labels.iter().collect::<Vec<_>>(),
            [("a", "1"), ("b", "2")]
        );
        assert!(view.deleting);
        assert_eq!(view.owners[0].kind.as_ref(), "StatefulSet");
        assert!(view.owners[0].controller);
        assert_eq!(view.ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            view.ready,
            Some(ReadyCondition {
                status: "False".into(),
                reason: Some("ContainersNotReady".into())
            })
        );
    }

    #[test]
    fn a_field_the_checks_read_stays_absent_when_absent() {
        let view = PodView::from(&Pod::default());
        assert_eq!(view.phase, None);
        assert_eq!(view.ip, None);
        assert_eq!(view.ready, None);
        assert_eq!(view.uid, None);
        assert!(view.labels.is_empty());
    }

    #[test]
    fn equal_strings_are_shared_and_unused_ones_swept() {
        let mut strings = Interner::default();
        let a = strings.get("app");
        assert!(Arc::ptr_eq(&a, &strings.get("app")));
        for i in 0..5000 {
            strings.get(&format!("gone-{i}"));
        }
        assert!(strings.strings.len() < 5000, "unused strings were swept");
        assert!(Arc::ptr_eq(&a, &strings.get("app")), "a used one was kept");
    }

    #[test]
    fn a_service_keeps_argocds_latest_change() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop",
                         "managedFields": [
                             {"manager": "argocd-controller", "operation": "Update", "time": "2026-12-01T01:00:00Z"},
                             {"manager": "kubectl", "operation": "Update", "time": "2026-12-01T05:00:00Z"},
                             {"manager": "argocd-controller", "operation": "Apply", "time": "2026-12-01T03:00:00Z"}]},
            "spec": {"selector": {}}
        }))
        .unwrap();
        let view = ServiceView::from(&svc);
        assert_eq!(
            view.argocd_changed_at.map(|t| t.0.to_string()),
            Some("2026-12-01T03:00:00Z".to_string())
        );
        assert_eq!(view.selector, None, "an empty selector reads as none");
    }

    #[test]
    fn a_uid_reads_back_as_written_and_equals_only_its_own_text() {
        let text = "15152a17-fcc9-4a51-8c04-af0ec0126551";
        let uid = Uid::of(text);
        assert!(matches!(uid, Uid::Uuid(_)));
        assert_eq!(uid.to_string(), text);
        assert!(uid.is(text));
        assert!(
            !uid.is("15152A17-FCC9-4A51-8C04-AF0EC0126551"),
            "another text"
        );
        assert!(!uid.is("2c4d3ec6-47f5-4161-97ff-ef4b12f595f0"));
        for odd in ["svc-uid-2", "15152A17-FCC9-4A51-8C04-AF0EC0126551", ""] {
            let uid = Uid::of(odd);
            assert!(matches!(uid, Uid::Text(_)), "{odd}");
            assert_eq!(uid.to_string(), odd);
            assert!(uid.is(odd));
            assert_ne!(uid, Uid::of(text));
        }
    }

    #[test]
    fn replicas_share_one_label_set() {
        let mut strings = Interner::default();
        let map: BTreeMap<String, String> = [("app".into(), "web".into())].into();
        let (a, b) = (
            Labels::of(&map, &mut strings),
            Labels::of(&map, &mut strings),
        );
        assert!(Arc::ptr_eq(&a.0, &b.0));
    }

    #[test]
    fn labels_match_as_an_equality_selector() {
        let mut strings = Interner::default();
        let labels = Labels::of(
            &[("app".into(), "web".into()), ("tier".into(), "db".into())].into(),
            &mut strings,
        );
        assert!(labels.matches([("app", "web")]));
        assert!(labels.matches([]));
        assert!(!labels.matches([("app", "web"), ("x", "y")]));
        assert!(!labels.matches([("app", "db")]));
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;
    use std::mem::size_of;

    /// The sizes the module doc quotes, pinned: a k8s-openapi upgrade that changes them fails
    /// here, and the doc (and the reason for the views) is read again.
    #[test]
    fn the_objects_the_views_replace_are_as_large_as_the_doc_says() {
        assert_eq!(
            (
                size_of::<Pod>(),
                size_of::<k8s_openapi::api::core::v1::PodSpec>(),
                size_of::<ObjectMeta>()
            ),
            (2464, 1488, 360)
        );
        // A view holds boxed and shared data: its inline part is a fraction of a Pod's.
        assert!(
            size_of::<PodView>() * 8 <= size_of::<Pod>(),
            "PodView is {} bytes inline",
            size_of::<PodView>()
        );
    }
}
