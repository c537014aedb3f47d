//! Where a watch's events go: the one interface between the task that runs a watch
//! ([`super::reflect`]) and the stores it fills (typed views in a [`StoreWriter`], dynamic objects
//! in [`super::objects`]). Its own file, so that neither side imports the other.

use super::bounds;
use crate::store_index::StoreWriter;
use kube::ResourceExt;
use kube::runtime::watcher;

/// Where a watch's events go.
pub(super) trait Sink<K>: Send + 'static {
    /// Apply one event, as kube-rs' reflector writer does (a list replaces the stored objects
    /// when it completes); at the end of a list, the (namespace, name) of objects it removed.
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<(String, String)>;

    /// How many objects are stored.
    fn len(&self) -> usize;

    /// About how many bytes storing `o` costs (see [`bounds`]).
    fn weight(&self, o: &K) -> usize;
}

impl<K: ResourceExt + Send + 'static, V: crate::views::View> Sink<K> for StoreWriter<K, V> {
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<(String, String)> {
        StoreWriter::apply(self, &event)
    }

    fn len(&self) -> usize {
        self.store().len()
    }

    fn weight(&self, o: &K) -> usize {
        bounds::OBJECT_OVERHEAD + self.view_of(o).text_bytes()
    }
}
