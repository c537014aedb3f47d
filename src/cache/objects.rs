//! The store of a dynamic kind: kube-rs' reflector store of its objects as JSON, each stripped
//! of what no check reads ([`super::strip`]) before it is stored.

use super::reflect::Sink;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::Value;

/// The objects of a dynamic kind, as JSON, and the resource they are.
#[derive(Clone)]
pub(super) struct Objects {
    pub(super) store: Store<DynamicObject>,
    pub(super) resource: ApiResource,
}

/// A dynamic kind's reflector store, fed objects without what no check reads.
pub(super) struct DynamicSink {
    pub(super) writer: reflector::store::Writer<DynamicObject>,
    pub(super) resource: ApiResource,
    pub(super) strip: fn(&mut DynamicObject),
}

impl Sink<DynamicObject> for DynamicSink {
    fn apply(&mut self, event: watcher::Event<DynamicObject>) -> Vec<(String, String)> {
        let event = event.modify(self.strip);
        let before =
            matches!(event, watcher::Event::InitDone).then(|| self.writer.as_reader().state());
        self.writer.apply_watcher_event(&event);
        let now = self.writer.as_reader();
        before
            .unwrap_or_default()
            .iter()
            .filter(|o| {
                now.get(&ObjectRef::from_obj_with(o.as_ref(), self.resource.clone()))
                    .is_none()
            })
            .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
            .collect()
    }

    fn len(&self) -> usize {
        self.writer.as_reader().len()
    }
}

pub(super) fn to_json(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}
