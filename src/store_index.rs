//! A secondary index over a watch cache's store: objects by bucket — pods by namespace,
//! EndpointSlices by their Service (namespace and `kubernetes.io/service-name`) — so that a
//! check reads one namespace's pods or one Service's slices without scanning every object
//! cached (issue 11: an uncached verdict must not cost more on a cluster of 30,000 pods than on
//! one of ten). The reflector's store has no index of its own.
//!
//! The index holds the store's own `Arc`s, not copies: per object one more pointer and its
//! name. It follows the watch's events after the store has applied them, and is rebuilt from
//! the store when a (re)list completes, so it shows exactly what the store shows: until the
//! relist is done both keep the objects from before it.

use crate::resource::Kind;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use kube::Resource as KubeResource;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// The label by which the EndpointSlice controller ties a slice to its Service
/// (discovery.k8s.io/v1 `LabelServiceName`).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// (namespace, name) of an object.
type Key = (String, String);

/// Which bucket an object belongs in, if any.
type Bucket<K> = fn(&K) -> Option<String>;

pub struct StoreIndex<K> {
    bucket: Bucket<K>,
    inner: RwLock<Buckets<K>>,
}

struct Buckets<K> {
    by_bucket: HashMap<String, HashMap<Key, Arc<K>>>,
    /// Where each object is, so an object whose bucket changed (a relabelled slice) moves.
    bucket_of: HashMap<Key, String>,
}

impl<K> Default for Buckets<K> {
    fn default() -> Self {
        Buckets {
            by_bucket: HashMap::new(),
            bucket_of: HashMap::new(),
        }
    }
}

/// Pods by namespace.
pub fn namespace_bucket<K: KubeResource>(o: &K) -> Option<String> {
    o.meta().namespace.clone()
}

/// EndpointSlices by Service: `namespace/service`.
pub fn service_bucket<K: KubeResource>(o: &K) -> Option<String> {
    let ns = o.meta().namespace.as_deref()?;
    let service = o.meta().labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some(format!("{ns}/{service}"))
}

impl<K> StoreIndex<K>
where
    K: KubeResource + Clone + 'static,
    K::DynamicType: Hash + Eq + Clone,
{
    /// The index a watch of `kind` keeps, if its readers look objects up by more than name.
    pub fn for_kind(kind: &Kind) -> Option<Arc<StoreIndex<K>>> {
        let bucket: Bucket<K> = if *kind == Kind::PODS {
            namespace_bucket::<K>
        } else if *kind == Kind::ENDPOINT_SLICES {
            service_bucket::<K>
        } else {
            return None;
        };
        Some(Arc::new(StoreIndex {
            bucket,
            inner: RwLock::default(),
        }))
    }

    /// Follow one watch event, after `store` has applied it.
    pub fn apply(&self, event: &watcher::Event<K>, store: &Store<K>, dyntype: &K::DynamicType) {
        match event {
            watcher::Event::Apply(o) => {
                let key = key_of(o);
                match store.get(&ObjectRef::from_obj_with(o, dyntype.clone())) {
                    Some(stored) => self.insert(key, stored),
                    None => self.remove(&key),
                }
            }
            watcher::Event::Delete(o) => self.remove(&key_of(o)),
            // The store swaps in the new list only at InitDone; so does the index.
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => self.rebuild(store),
        }
    }

    /// The objects in `bucket` (a namespace, or `namespace/service`).
    pub fn get(&self, bucket: &str) -> Vec<Arc<K>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner
            .by_bucket
            .get(bucket)
            .map(|objects| objects.values().cloned().collect())
            .unwrap_or_default()
    }

    fn insert(&self, key: Key, o: Arc<K>) {
        let bucket = (self.bucket)(&o);
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let Buckets {
            by_bucket,
            bucket_of,
        } = &mut *inner;
        if let Some(old) = bucket_of.get(&key)
            && Some(old) != bucket.as_ref()
        {
            remove_from(by_bucket, old, &key);
            bucket_of.remove(&key);
        }
        if let Some(bucket) = bucket {
            by_bucket
                .entry(bucket.clone())
                .or_default()
                .insert(key.clone(), o);
            bucket_of.insert(key, bucket);
        }
    }

    fn remove(&self, key: &Key) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = inner.bucket_of.remove(key) {
            remove_from(&mut inner.by_bucket, &old, key);
        }
    }

    fn rebuild(&self, store: &Store<K>) {
        let mut fresh = Buckets::default();
        for o in store.state() {
            if let Some(bucket) = (self.bucket)(&o) {
                let key = key_of(o.as_ref());
                fresh
                    .by_bucket
                    .entry(bucket.clone())
                    .or_default()
                    .insert(key.clone(), o);
                fresh.bucket_of.insert(key, bucket);
            }
        }
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    }
}

fn key_of<K: KubeResource>(o: &K) -> Key {
    (o.namespace().unwrap_or_default(), o.name_any())
}

fn remove_from<K>(by_bucket: &mut HashMap<String, HashMap<Key, Arc<K>>>, bucket: &str, key: &Key) {
    if let Some(objects) = by_bucket.get_mut(bucket) {
        objects.remove(key);
        if objects.is_empty() {
            by_bucket.remove(bucket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::runtime::reflector::store::Writer;

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

    /// Writer and index fed the same events, as Reflect does.
    struct Fed<K: KubeResource<DynamicType = ()> + Clone + 'static> {
        writer: Writer<K>,
        index: Arc<StoreIndex<K>>,
    }

    impl<K: KubeResource<DynamicType = ()> + Clone + 'static> Fed<K> {
        fn new(kind: Kind) -> Self {
            Fed {
                writer: Writer::default(),
                index: StoreIndex::for_kind(&kind).unwrap(),
            }
        }

        fn feed(&mut self, event: watcher::Event<K>) {
            self.writer.apply_watcher_event(&event);
            self.index.apply(&event, &self.writer.as_reader(), &());
        }
    }

    fn names<K: KubeResource>(objects: Vec<Arc<K>>) -> Vec<String> {
        let mut n: Vec<String> = objects.iter().map(|o| o.name_any()).collect();
        n.sort();
        n
    }

    #[test]
    fn pods_by_namespace_follow_applies_deletes_and_relists() {
        let mut fed = Fed::<Pod>::new(Kind::PODS);
        fed.feed(watcher::Event::Init);
        fed.feed(watcher::Event::InitApply(pod("a", "p1")));
        fed.feed(watcher::Event::InitApply(pod("b", "p2")));
        assert!(
            fed.index.get("a").is_empty(),
            "nothing before the list is done"
        );
        fed.feed(watcher::Event::InitDone);
        assert_eq!(names(fed.index.get("a")), ["p1"]);
        fed.feed(watcher::Event::Apply(pod("a", "p3")));
        fed.feed(watcher::Event::Delete(pod("b", "p2")));
        assert_eq!(names(fed.index.get("a")), ["p1", "p3"]);
        assert!(fed.index.get("b").is_empty());
        // A relist that no longer has p1: gone with InitDone, not before.
        fed.feed(watcher::Event::Init);
        fed.feed(watcher::Event::InitApply(pod("a", "p3")));
        assert_eq!(names(fed.index.get("a")), ["p1", "p3"]);
        fed.feed(watcher::Event::InitDone);
        assert_eq!(names(fed.index.get("a")), ["p3"]);
        // The index holds the store's own objects.
        let stored = fed.writer.as_reader().state();
        assert!(Arc::ptr_eq(&stored[0], &fed.index.get("a")[0]));
    }

    #[test]
    fn slices_by_service_move_when_relabelled() {
        let mut fed = Fed::<EndpointSlice>::new(Kind::ENDPOINT_SLICES);
        fed.feed(watcher::Event::Init);
        fed.feed(watcher::Event::InitDone);
        fed.feed(watcher::Event::Apply(slice("a", "web-x", "web")));
        fed.feed(watcher::Event::Apply(slice("a", "api-x", "api")));
        fed.feed(watcher::Event::Apply(slice("b", "web-y", "web")));
        assert_eq!(names(fed.index.get("a/web")), ["web-x"]);
        fed.feed(watcher::Event::Apply(slice("a", "web-x", "api")));
        assert!(fed.index.get("a/web").is_empty());
        assert_eq!(names(fed.index.get("a/api")), ["api-x", "web-x"]);
        let mut unlabelled = slice("a", "api-x", "api");
        unlabelled.metadata.labels = None;
        fed.feed(watcher::Event::Apply(unlabelled));
        assert_eq!(names(fed.index.get("a/api")), ["web-x"]);
    }

    #[test]
    fn other_resources_keep_no_index() {
        assert!(StoreIndex::<Pod>::for_kind(&Kind::SERVICES).is_none());
    }
}
