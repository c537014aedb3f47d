//! Which cached objects a verdict was read from, and the reverse index from a changed object to
//! the keys (gates, annotated objects) that read it. What a check reads is listed next to the
//! reads themselves (`kinds::reads`); the index only stores and matches it.

use crate::cache::Change;
pub(crate) use crate::cache::Dep;
use crate::resource::GroupResource;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// Reverse index from cached objects to the keys (gates, annotated objects) that read them.
pub(crate) struct DepIndex<K> {
    objects: HashMap<(GroupResource, String, String), HashSet<K>>,
    namespaces: HashMap<(GroupResource, String), HashSet<K>>,
    deps: HashMap<K, Vec<Dep>>,
}

impl<K> Default for DepIndex<K> {
    fn default() -> Self {
        DepIndex {
            objects: HashMap::new(),
            namespaces: HashMap::new(),
            deps: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> DepIndex<K> {
    /// Replace what `key` depends on.
    pub(crate) fn set(&mut self, key: K, deps: Vec<Dep>) {
        if self.deps.get(&key) == Some(&deps) {
            return;
        }
        self.remove(&key);
        for d in &deps {
            let set = match d {
                Dep::Object {
                    kind,
                    namespace,
                    name,
                } => self
                    .objects
                    .entry((kind.clone(), namespace.clone(), name.clone()))
                    .or_default(),
                Dep::Namespace { kind, namespace } => self
                    .namespaces
                    .entry((kind.clone(), namespace.clone()))
                    .or_default(),
            };
            set.insert(key.clone());
        }
        self.deps.insert(key, deps);
    }

    pub(crate) fn remove(&mut self, key: &K) {
        for d in self.deps.remove(key).unwrap_or_default() {
            match d {
                Dep::Object {
                    kind,
                    namespace,
                    name,
                } => {
                    let k = (kind, namespace, name);
                    if let Some(set) = self.objects.get_mut(&k) {
                        set.remove(key);
                        if set.is_empty() {
                            self.objects.remove(&k);
                        }
                    }
                }
                Dep::Namespace { kind, namespace } => {
                    let k = (kind, namespace);
                    if let Some(set) = self.namespaces.get_mut(&k) {
                        set.remove(key);
                        if set.is_empty() {
                            self.namespaces.remove(&k);
                        }
                    }
                }
            }
        }
    }

    /// Keys whose verdict may have changed with `change`.
    pub(crate) fn affected(&self, change: &Change) -> Vec<K> {
        let exact = self.objects.get(&(
            change.kind.clone(),
            change.namespace.clone(),
            change.name.clone(),
        ));
        let in_ns = self
            .namespaces
            .get(&(change.kind.clone(), change.namespace.clone()));
        let mut out: Vec<K> = exact.into_iter().chain(in_ns).flatten().cloned().collect();
        if exact.is_some() && in_ns.is_some() {
            let mut seen = HashSet::new();
            out.retain(|k| seen.insert(k.clone()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_woken_by_its_objects_and_namespaces_once_and_forgotten_when_removed() {
        let mut idx = DepIndex::default();
        let svc = Dep::object(GroupResource::SERVICES, "cicd", "web");
        idx.set(
            "g",
            vec![svc.clone(), Dep::namespace(GroupResource::PODS, "cicd")],
        );
        idx.set("h", vec![svc]);
        let change = |kind: GroupResource, name: &str| Change {
            kind,
            namespace: "cicd".into(),
            name: name.into(),
        };
        let mut woken = idx.affected(&change(GroupResource::SERVICES, "web"));
        woken.sort();
        assert_eq!(woken, ["g", "h"]);
        assert_eq!(idx.affected(&change(GroupResource::PODS, "web-0")), ["g"]);
        // A pod named like the Service is still one wake-up for "g".
        idx.set(
            "g",
            vec![
                Dep::object(GroupResource::PODS, "cicd", "web"),
                Dep::namespace(GroupResource::PODS, "cicd"),
            ],
        );
        assert_eq!(idx.affected(&change(GroupResource::PODS, "web")), ["g"]);
        idx.remove(&"g");
        idx.remove(&"h");
        assert!(idx.objects.is_empty() && idx.namespaces.is_empty() && idx.deps.is_empty());
    }
}
