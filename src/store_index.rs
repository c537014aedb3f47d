//! The store of a typed watch (pods, Services, EndpointSlices): compact views
//! ([`crate::views`]) by namespace in name order, and, for EndpointSlices, also by the Service
//! they speak for, so that a check reads one namespace's pods or one Service's slices without
//! scanning every object cached: an uncached verdict must not cost more on a cluster of
//! 30,000 pods than on one of ten.
//!
//! A store of wavegate's own rather than kube-rs' reflector `Store`: that one keys every object
//! by an `ObjectRef` (name, namespace, resourceVersion and UID: four more strings per object)
//! and needs `kube::Resource`, which needs a whole `ObjectMeta` in every view. Here each view
//! is held once, by `Arc`, and found by its own name (`Borrow<str>`); namespaces and Service
//! names are shared strings.
//!
//! It follows kube-rs' reflector semantics (`reflector::store::Writer`): a (re)list is
//! buffered and replaces the stored views only when it completes (`Event::InitDone`), so until
//! then the views from before it stay (and the cache refuses to serve them as fresh).

use crate::views::{Interner, View};
use kube::ResourceExt;
use kube::runtime::watcher;
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

/// A view found by its name.
struct ByName<V>(Arc<V>);

impl<V: View> Borrow<str> for ByName<V> {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

impl<V: View> PartialEq for ByName<V> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<V: View> Eq for ByName<V> {}

impl<V: View> PartialOrd for ByName<V> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<V: View> Ord for ByName<V> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.name().cmp(other.0.name())
    }
}

type Named<V> = BTreeSet<ByName<V>>;

/// The second key a view may be found by within its namespace (a slice's Service).
pub type Bucket<V> = fn(&V) -> Option<&Arc<str>>;

pub struct StoreIndex<V> {
    bucket: Option<Bucket<V>>,
    inner: RwLock<Stored<V>>,
}

struct Stored<V> {
    /// Namespace ("" for none) → views in name order.
    by_namespace: HashMap<Arc<str>, Named<V>>,
    /// Namespace → bucket → views in name order.
    by_bucket: HashMap<Arc<str>, HashMap<Arc<str>, Named<V>>>,
    count: usize,
}

impl<V> Default for Stored<V> {
    fn default() -> Self {
        Stored {
            by_namespace: HashMap::new(),
            by_bucket: HashMap::new(),
            count: 0,
        }
    }
}

impl<V: View> Stored<V> {
    fn namespace_key(&self, v: &V, strings: &mut Interner) -> Arc<str> {
        strings.get(v.namespace().unwrap_or(""))
    }

    fn insert(&mut self, v: Arc<V>, bucket: Option<Bucket<V>>, strings: &mut Interner) {
        let ns = self.namespace_key(&v, strings);
        self.remove(&ns, v.name(), bucket);
        if let Some(b) = bucket.and_then(|b| b(&v)) {
            self.by_bucket
                .entry(ns.clone())
                .or_default()
                .entry(b.clone())
                .or_default()
                .insert(ByName(v.clone()));
        }
        self.by_namespace.entry(ns).or_default().insert(ByName(v));
        self.count += 1;
    }

    fn remove(&mut self, ns: &str, name: &str, bucket: Option<Bucket<V>>) -> Option<Arc<V>> {
        let named = self.by_namespace.get_mut(ns)?;
        let old = named.take(name)?.0;
        self.count -= 1;
        if named.is_empty() {
            self.by_namespace.remove(ns);
        }
        if let Some(b) = bucket.and_then(|b| b(&old))
            && let Some(buckets) = self.by_bucket.get_mut(ns)
        {
            if let Some(in_bucket) = buckets.get_mut(b.as_ref()) {
                in_bucket.remove(name);
                if in_bucket.is_empty() {
                    buckets.remove(b.as_ref());
                }
            }
            if buckets.is_empty() {
                self.by_bucket.remove(ns);
            }
        }
        Some(old)
    }

    fn contains(&self, ns: &str, name: &str) -> bool {
        self.by_namespace
            .get(ns)
            .is_some_and(|named| named.contains(name))
    }
}

impl<V: View> StoreIndex<V> {
    /// A store whose views are also found by `bucket` (slices by Service).
    pub fn new(bucket: Option<Bucket<V>>) -> Arc<StoreIndex<V>> {
        Arc::new(StoreIndex {
            bucket,
            inner: RwLock::default(),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Stored<V>> {
        // Nothing is left half-updated under this lock (each change is one insert or remove),
        // so a panic elsewhere does not poison the views.
        crate::locks::read(&self.inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Stored<V>> {
        crate::locks::write(&self.inner)
    }

    /// The views of one namespace, in name order.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<V>> {
        collect(self.read().by_namespace.get(namespace))
    }

    /// The views of one bucket of a namespace (a Service's slices), in name order.
    pub fn in_bucket(&self, namespace: &str, bucket: &str) -> Vec<Arc<V>> {
        collect(
            self.read()
                .by_bucket
                .get(namespace)
                .and_then(|b| b.get(bucket)),
        )
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<V>> {
        self.read()
            .by_namespace
            .get(namespace)?
            .get(name)
            .map(|v| v.0.clone())
    }

    /// How many views are stored.
    pub fn len(&self) -> usize {
        self.read().count
    }
}

fn collect<V>(named: Option<&Named<V>>) -> Vec<Arc<V>> {
    named
        .map(|n| n.iter().map(|v| v.0.clone()).collect())
        .unwrap_or_default()
}

/// The writing end: projects each object a watch delivers into its view and applies the
/// event, as kube-rs' reflector writer does for whole objects.
pub struct StoreWriter<K, V> {
    store: Arc<StoreIndex<V>>,
    project: fn(&K, &mut Interner) -> V,
    strings: Interner,
    /// The views of a list in progress (`Init` .. `InitDone`).
    listing: Option<Vec<Arc<V>>>,
    /// The most views stored since the interner was last swept.
    peak: usize,
}

impl<K: ResourceExt, V: View> StoreWriter<K, V> {
    pub fn new(store: Arc<StoreIndex<V>>, project: fn(&K, &mut Interner) -> V) -> Self {
        StoreWriter {
            store,
            project,
            strings: Interner::default(),
            listing: None,
            peak: 0,
        }
    }

    pub fn store(&self) -> &Arc<StoreIndex<V>> {
        &self.store
    }

    /// The view `o` would be stored as, on its own (sharing no strings with the store).
    pub fn view_of(&self, o: &K) -> V {
        (self.project)(o, &mut Interner::default())
    }

    /// Apply one watch event. At the end of a list: the (namespace, name) of the views that
    /// list no longer has (deleted while the watch was away; they get no event of their own).
    pub fn apply(&mut self, event: &watcher::Event<K>) -> Vec<(String, String)> {
        let bucket = self.store.bucket;
        match event {
            watcher::Event::Apply(o) => {
                let v = Arc::new((self.project)(o, &mut self.strings));
                self.store.write().insert(v, bucket, &mut self.strings);
                self.peak = self.peak.max(self.store.len());
            }
            watcher::Event::Delete(o) => {
                let ns = o.namespace().unwrap_or_default();
                self.store.write().remove(&ns, &o.name_any(), bucket);
                let len = self.store.len();
                if len * 2 < self.peak {
                    self.strings.sweep();
                    self.peak = len;
                }
            }
            watcher::Event::Init => self.listing = Some(Vec::new()),
            watcher::Event::InitApply(o) => {
                let v = Arc::new((self.project)(o, &mut self.strings));
                self.listing.get_or_insert_default().push(v);
            }
            watcher::Event::InitDone => {
                let mut fresh = Stored::default();
                for v in self.listing.take().unwrap_or_default() {
                    fresh.insert(v, bucket, &mut self.strings);
                }
                let old = std::mem::replace(&mut *self.store.write(), fresh);
                let gone = {
                    let now = self.store.read();
                    old.by_namespace
                        .iter()
                        .flat_map(|(ns, named)| named.iter().map(move |v| (ns, v.0.name())))
                        .filter(|(ns, name)| !now.contains(ns, name))
                        .map(|(ns, name)| (ns.to_string(), name.to_string()))
                        .collect()
                };
                // The old views are gone now: what only they held goes from the interner.
                drop(old);
                self.strings.sweep();
                self.peak = self.store.len();
                return gone;
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::{PodView, SERVICE_NAME_LABEL, SliceView};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    fn pod(ns: &str, name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p
    }

    fn slice(ns: &str, name: &str, service: &str) -> EndpointSlice {
        let mut s = EndpointSlice {
            address_type: "IPv4".into(),
            ..EndpointSlice::default()
        };
        s.metadata.namespace = Some(ns.into());
        s.metadata.name = Some(name.into());
        s.metadata.labels = Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into());
        s
    }

    #[test]
    fn deleted_views_take_their_interned_labels_with_them() {
        let store = StoreIndex::<PodView>::new(None);
        let mut writer = StoreWriter::new(store.clone(), PodView::project);
        let labelled = |i: usize| {
            let mut p = pod("db", &format!("db-{i}"));
            p.metadata.labels = Some(
                [(
                    "statefulset.kubernetes.io/pod-name".to_string(),
                    format!("db-{i}"),
                )]
                .into(),
            );
            p
        };
        for i in 0..2000 {
            writer.apply(&watcher::Event::Apply(labelled(i)));
        }
        let full = writer.strings.held();
        assert!(full >= 2000, "{full} interned for 2,000 unique labels");
        // Scaled down: no new string is interned, yet the unique ones must go.
        for i in 10..2000 {
            writer.apply(&watcher::Event::Delete(labelled(i)));
        }
        assert_eq!(store.len(), 10);
        let left = writer.strings.held();
        assert!(left < 100, "{left} of {full} still interned for 10 pods");
    }

    fn names<V: View>(views: Vec<Arc<V>>) -> Vec<String> {
        views.iter().map(|v| v.name().to_string()).collect()
    }

    fn pods() -> StoreWriter<Pod, PodView> {
        StoreWriter::new(StoreIndex::new(None), PodView::project)
    }

    fn slices() -> StoreWriter<EndpointSlice, SliceView> {
        StoreWriter::new(
            StoreIndex::new(Some(|s: &SliceView| s.service.as_ref())),
            SliceView::project,
        )
    }

    #[test]
    fn pods_by_namespace_follow_applies_deletes_and_relists() {
        let mut w = pods();
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(pod("a", "p1")));
        w.apply(&watcher::Event::InitApply(pod("b", "p2")));
        assert!(
            w.store.in_namespace("a").is_empty(),
            "nothing before the list is done"
        );
        assert!(w.apply(&watcher::Event::InitDone).is_empty());
        assert_eq!(names(w.store.in_namespace("a")), ["p1"]);
        w.apply(&watcher::Event::Apply(pod("a", "p3")));
        w.apply(&watcher::Event::Delete(pod("b", "p2")));
        assert_eq!(names(w.store.in_namespace("a")), ["p1", "p3"]);
        assert!(w.store.in_namespace("b").is_empty());
        assert_eq!(w.store.len(), 2);
        // A relist that no longer has p1: gone with InitDone, not before, and told.
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(pod("a", "p3")));
        assert_eq!(names(w.store.in_namespace("a")), ["p1", "p3"]);
        let gone = w.apply(&watcher::Event::InitDone);
        assert_eq!(gone, [("a".to_string(), "p1".to_string())]);
        assert_eq!(names(w.store.in_namespace("a")), ["p3"]);
        assert_eq!(
            w.store.get("a", "p3").map(|p| p.name.to_string()),
            Some("p3".into())
        );
        assert_eq!(w.store.get("a", "p1"), None);
    }

    #[test]
    fn views_come_in_name_order_whatever_the_order_of_events() {
        let mut w = pods();
        w.apply(&watcher::Event::Init);
        for name in ["c", "a", "d", "b"] {
            w.apply(&watcher::Event::InitApply(pod("ns", name)));
        }
        w.apply(&watcher::Event::InitDone);
        assert_eq!(names(w.store.in_namespace("ns")), ["a", "b", "c", "d"]);
    }

    #[test]
    fn slices_by_service_move_when_relabelled() {
        let mut w = slices();
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitDone);
        w.apply(&watcher::Event::Apply(slice("a", "web-x", "web")));
        w.apply(&watcher::Event::Apply(slice("a", "api-x", "api")));
        w.apply(&watcher::Event::Apply(slice("b", "web-y", "web")));
        assert_eq!(names(w.store.in_bucket("a", "web")), ["web-x"]);
        w.apply(&watcher::Event::Apply(slice("a", "web-x", "api")));
        assert!(w.store.in_bucket("a", "web").is_empty());
        assert_eq!(names(w.store.in_bucket("a", "api")), ["api-x", "web-x"]);
        let mut unlabelled = slice("a", "api-x", "api");
        unlabelled.metadata.labels = None;
        w.apply(&watcher::Event::Apply(unlabelled));
        assert_eq!(names(w.store.in_bucket("a", "api")), ["web-x"]);
        assert_eq!(names(w.store.in_namespace("a")), ["api-x", "web-x"]);
        w.apply(&watcher::Event::Delete(slice("a", "web-x", "api")));
        assert!(w.store.in_bucket("a", "api").is_empty());
    }
}
