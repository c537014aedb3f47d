//! The store of a dynamic kind: kube-rs' reflector store of its objects, each stripped of what
//! no check reads ([`super::strip`]) before it is stored, and, for a kind a caller reads as a
//! type of its own (WaveGates as `WaveGate`), also kept parsed: parsed once, when its watch
//! event arrives, not at every read.
//!
//! Each object is kept as the JSON every read hands out, shared: a read is a reference count,
//! not a copy. Serialising the object at each read was 15% of the CPU of a waves view of 2,000
//! Databases (each Database and its Cluster read per judgement, tests/e2e/waves_lint_load.rs).

use super::bounds;
use super::sink::Sink;
use super::strip::Take;
use crate::app_status::Lists;
use kube::Resource;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

/// An object read as `T`: parsed once, or why it does not parse as `T` (the same error a parse
/// of its JSON at the read would give).
pub(crate) type Decoded<T> = Result<Arc<T>, Arc<serde_json::Error>>;

type Parsed = Result<Arc<dyn Any + Send + Sync>, Arc<serde_json::Error>>;

/// How a watch's objects are parsed, and as which type.
type Parser = (TypeId, fn(&Value) -> Parsed);

/// The object as `T`, from its JSON (borrowed: nothing is copied to parse it).
fn parse<T: DeserializeOwned>(o: &Value) -> Decoded<T> {
    T::deserialize(o).map(Arc::new).map_err(Arc::new)
}

fn parse_any<T: DeserializeOwned + Send + Sync + 'static>(o: &Value) -> Parsed {
    parse::<T>(o).map(|t| t as Arc<dyn Any + Send + Sync>)
}

/// The object as its JSON: the data moved, not copied (Applications change often and carry a
/// large status), with the metadata and type beside it, as `DynamicObject` serialises.
fn json_of(object: DynamicObject) -> Value {
    let DynamicObject {
        types,
        metadata,
        data,
    } = object;
    match (data, serde_json::to_value(&metadata)) {
        (Value::Object(mut fields), Ok(metadata)) => {
            fields.insert("metadata".into(), metadata);
            if let Some(t) = types {
                fields.insert("apiVersion".into(), Value::String(t.api_version));
                fields.insert("kind".into(), Value::String(t.kind));
            }
            Value::Object(fields)
        }
        // Never from a watch (an object's JSON is an object); serialised whole all the same.
        (data, _) => serde_json::to_value(DynamicObject {
            types,
            metadata,
            data,
        })
        .unwrap_or(Value::Null),
    }
}

/// One object as stored: stripped, as JSON, with what the reflector keys it by; parsed once
/// its kind is read typed.
#[derive(Clone)]
pub(super) struct Stored {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    uid: Option<String>,
    json: Arc<Value>,
    parsed: OnceLock<Parsed>,
    /// An Application's resource lists, taken out of `json` ([`super::strip::lists_taken_for`]).
    lists: Option<Arc<Lists>>,
}

impl Stored {
    fn new(mut object: DynamicObject, parser: Option<&Parser>, take: Option<Take>) -> Stored {
        let meta = &object.metadata;
        let (name, namespace) = (meta.name.clone(), meta.namespace.clone());
        let (resource_version, uid) = (meta.resource_version.clone(), meta.uid.clone());
        let lists = take.map(|take| take(&mut object.data));
        let json = Arc::new(json_of(object));
        let parsed = OnceLock::new();
        if let Some((_, parse)) = parser {
            let _ = parsed.set(parse(&json));
        }
        Stored {
            name,
            namespace,
            resource_version,
            uid,
            json,
            parsed,
            lists,
        }
    }

    /// Its JSON, and the resource lists taken out of it (`None`: none were, and the JSON has
    /// them).
    fn with_lists(&self) -> (Arc<Value>, Option<Arc<Lists>>) {
        (self.json(), self.lists.clone())
    }

    /// Namespace ("" for none) and name.
    fn at(&self) -> (String, String) {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
        )
    }

    fn json(&self) -> Arc<Value> {
        self.json.clone()
    }

    /// The object as `T`, parsed when its event arrived if the watch's parser is `T`'s, else
    /// now, once (an object stored before its kind was first read typed).
    fn decoded<T: DeserializeOwned + Send + Sync + 'static>(
        &self,
        parser: Option<&Parser>,
    ) -> Decoded<T> {
        if let Some((of, parse_as)) = parser
            && *of == TypeId::of::<T>()
        {
            match self.parsed.get_or_init(|| parse_as(&self.json)) {
                Ok(any) => {
                    if let Ok(t) = any.clone().downcast::<T>() {
                        return Ok(t);
                    }
                }
                Err(e) => return Err(e.clone()),
            }
        }
        parse::<T>(&self.json)
    }
}

/// The reflector store keys objects by their metadata, as it does `DynamicObject`.
impl Lookup for Stored {
    type DynamicType = ApiResource;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        <DynamicObject as Resource>::kind(dt)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        <DynamicObject as Resource>::group(dt)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        <DynamicObject as Resource>::version(dt)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        <DynamicObject as Resource>::plural(dt)
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        self.name.as_deref().map(Cow::Borrowed)
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.namespace.as_deref().map(Cow::Borrowed)
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.resource_version.as_deref().map(Cow::Borrowed)
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        self.uid.as_deref().map(Cow::Borrowed)
    }
}

/// The objects of a dynamic kind, and the resource they are.
#[derive(Clone)]
pub(super) struct Objects {
    store: Store<Stored>,
    resource: ApiResource,
    /// Set by the first read of the kind as a type: from then on each object is parsed when
    /// its event arrives.
    parser: Arc<OnceLock<Parser>>,
}

impl Objects {
    /// An empty store of `resource`, and the sink its watch fills it through, dropping from
    /// every object what `strip` drops and keeping beside its JSON the lists `take` takes out
    /// of it.
    pub(super) fn new(
        resource: ApiResource,
        strip: fn(&mut DynamicObject),
        take: Option<Take>,
    ) -> (Objects, DynamicSink) {
        let writer = reflector::store::Writer::new(resource.clone());
        let parser = Arc::new(OnceLock::new());
        let objects = Objects {
            store: writer.as_reader(),
            resource: resource.clone(),
            parser: parser.clone(),
        };
        let sink = DynamicSink {
            writer,
            resource,
            strip,
            take,
            parser,
        };
        (objects, sink)
    }

    fn key(&self, namespace: &str, name: &str) -> ObjectRef<Stored> {
        // A cluster-scoped object (Argo CD lists it with namespace "") has no namespace in its
        // reference; `within("")` would name one that nothing lives in.
        let key = ObjectRef::new_with(name, self.resource.clone());
        if namespace.is_empty() {
            key
        } else {
            key.within(namespace)
        }
    }

    /// One object as JSON.
    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(&self.key(namespace, name)).map(|o| o.json())
    }

    /// Every object (of `namespace` only, when given) as JSON.
    pub(super) fn all(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.matching(namespace).map(|o| o.json()).collect()
    }

    /// One object as JSON, with the resource lists taken out of it, of the same version.
    pub(super) fn get_with_lists(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<(Arc<Value>, Option<Arc<Lists>>)> {
        self.store
            .get(&self.key(namespace, name))
            .map(|o| o.with_lists())
    }

    /// Every object (of `namespace` only, when given) as [`Objects::get_with_lists`] reads it.
    pub(super) fn all_with_lists(
        &self,
        namespace: Option<&str>,
    ) -> Vec<(Arc<Value>, Option<Arc<Lists>>)> {
        self.matching(namespace).map(|o| o.with_lists()).collect()
    }

    /// The (namespace, name) of every object (of `namespace` only, when given).
    pub(super) fn names(&self, namespace: Option<&str>) -> Vec<(String, String)> {
        self.matching(namespace).map(|o| o.at()).collect()
    }

    /// One object as `T`.
    pub(super) fn get_as<T: DeserializeOwned + Send + Sync + 'static>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Decoded<T>> {
        let parser = self.parse_as::<T>();
        self.store
            .get(&self.key(namespace, name))
            .map(|o| o.decoded::<T>(Some(parser)))
    }

    /// Every object (of `namespace` only, when given) as `T`.
    pub(super) fn all_as<T: DeserializeOwned + Send + Sync + 'static>(
        &self,
        namespace: Option<&str>,
    ) -> Vec<Decoded<T>> {
        let parser = self.parse_as::<T>();
        self.matching(namespace)
            .map(|o| o.decoded::<T>(Some(parser)))
            .collect()
    }

    /// From now on, objects are parsed as `T` when their events arrive (unless another type
    /// came first: one type per kind).
    fn parse_as<T: DeserializeOwned + Send + Sync + 'static>(&self) -> &Parser {
        self.parser
            .get_or_init(|| (TypeId::of::<T>(), parse_any::<T>))
    }

    fn matching(&self, namespace: Option<&str>) -> impl Iterator<Item = Arc<Stored>> {
        self.store
            .state()
            .into_iter()
            .filter(move |o| namespace.is_none() || o.namespace.as_deref() == namespace)
    }
}

/// A dynamic kind's reflector store, fed objects without what no check reads, parsed when the
/// kind is read typed.
pub(super) struct DynamicSink {
    writer: reflector::store::Writer<Stored>,
    resource: ApiResource,
    strip: fn(&mut DynamicObject),
    take: Option<Take>,
    parser: Arc<OnceLock<Parser>>,
}

impl DynamicSink {
    fn stored(&self, mut object: DynamicObject) -> Stored {
        (self.strip)(&mut object);
        Stored::new(object, self.parser.get(), self.take)
    }

    /// A deleted object: only what the store finds it by (no parse, no lists taken).
    fn deleted(&self, object: DynamicObject) -> Stored {
        Stored::new(object, None, None)
    }
}

impl Sink<DynamicObject> for DynamicSink {
    fn apply(&mut self, event: watcher::Event<DynamicObject>) -> Vec<(String, String)> {
        let event = match event {
            watcher::Event::Apply(o) => watcher::Event::Apply(self.stored(o)),
            watcher::Event::Delete(o) => watcher::Event::Delete(self.deleted(o)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(o) => watcher::Event::InitApply(self.stored(o)),
            watcher::Event::InitDone => watcher::Event::InitDone,
        };
        let before =
            matches!(event, watcher::Event::InitDone).then(|| self.writer.as_reader().state());
        self.writer.apply_watcher_event(&event);
        let now = self.writer.as_reader();
        before
            .unwrap_or_default()
            .iter()
            .filter(|o| now.get(&o.to_object_ref(self.resource.clone())).is_none())
            .map(|o| o.at())
            .collect()
    }

    fn len(&self) -> usize {
        self.writer.as_reader().len()
    }

    fn weight(&self, o: &DynamicObject) -> usize {
        bounds::OBJECT_OVERHEAD + bounds::meta_weight(&o.metadata) + bounds::json_weight(&o.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    /// Stands for a kind read typed (the cache may not name `WaveGate`, which lives above it).
    #[derive(Debug, Deserialize)]
    struct Gate {
        spec: GateSpec,
    }

    #[derive(Debug, Deserialize)]
    struct GateSpec {
        checks: Vec<String>,
    }

    fn object(name: &str, checks: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": "1"},
            "spec": {"checks": checks}
        }))
        .unwrap()
    }

    fn store() -> (Objects, DynamicSink) {
        let resource = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("wavegate.dev", "v1alpha1", "WaveGate"),
            "wavegates",
        );
        Objects::new(resource, super::super::strip::strip_meta, None)
    }

    fn listed(sink: &mut DynamicSink, objects: Vec<DynamicObject>) {
        sink.apply(watcher::Event::Init);
        for o in objects {
            sink.apply(watcher::Event::InitApply(o));
        }
        sink.apply(watcher::Event::InitDone);
    }

    /// What a read hands out is the JSON `DynamicObject` serialises to, field for field.
    #[test]
    fn stored_json_is_the_objects_own() {
        let mut o = object("good", json!(["a"]));
        o.data["status"] = json!({"phase": "Ready", "n": 3});
        assert_eq!(json_of(o.clone()), serde_json::to_value(&o).unwrap());
        o.types = None;
        assert_eq!(json_of(o.clone()), serde_json::to_value(&o).unwrap());
    }

    /// An Application's lists leave its JSON when it is stored, and a read hands out the JSON
    /// and the lists of one version.
    #[test]
    fn what_a_kind_keeps_beside_its_json_is_read_with_it() {
        let resource = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
            "applications",
        );
        let kind = crate::resource::GroupResource::fixed("argoproj.io", "applications");
        let (objects, mut sink) = Objects::new(
            resource,
            super::super::strip::for_kind(&kind),
            super::super::strip::lists_taken_for(&kind),
        );
        let app = |version: &str, names: &[&str]| -> DynamicObject {
            let resources: Vec<Value> = names
                .iter()
                .map(|n| json!({"kind": "Service", "namespace": "shop", "name": n}))
                .collect();
            serde_json::from_value(json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "shop", "namespace": "argocd", "resourceVersion": version},
                "status": {"sync": {"status": "Synced"}, "resources": resources}
            }))
            .unwrap()
        };
        listed(&mut sink, vec![app("1", &["web"])]);
        let (json, lists) = objects.get_with_lists("argocd", "shop").unwrap();
        assert!(json.pointer("/status/resources").is_none());
        assert_eq!(json["status"]["sync"]["status"], "Synced");
        let lists = lists.expect("kept beside the JSON");
        assert_eq!(lists.resources[0].name.as_deref(), Some("web"));

        sink.apply(watcher::Event::Apply(app("2", &["web", "api"])));
        let all = objects.all_with_lists(None);
        assert_eq!(all.len(), 1);
        let (json, lists) = &all[0];
        assert_eq!(json["metadata"]["resourceVersion"], "2");
        assert_eq!(lists.as_ref().unwrap().resources.len(), 2);

        // A kind that keeps nothing beside: its JSON whole.
        let (gates, mut gate_sink) = store();
        listed(&mut gate_sink, vec![object("g", json!(["a"]))]);
        let (json, none) = gates.get_with_lists("shop", "g").unwrap();
        assert!(none.is_none());
        assert_eq!(json["spec"]["checks"], json!(["a"]));
    }

    #[test]
    fn an_object_read_typed_is_parsed_once_and_a_bad_one_keeps_its_parse_error() {
        let (objects, mut sink) = store();
        // Listed before anything read the kind typed: parsed at its first typed read.
        listed(
            &mut sink,
            vec![object("good", json!(["a"])), object("bad", json!("a"))],
        );
        let good = objects.get_as::<Gate>("shop", "good").unwrap().unwrap();
        assert_eq!(good.spec.checks, ["a"]);
        let again = objects.get_as::<Gate>("shop", "good").unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&good, &again),
            "parsed again at the second read"
        );

        // The error a parse of its JSON at the read gave before the typed store, word for word.
        let json = objects.get("shop", "bad").unwrap();
        let expected = serde_json::from_value::<Gate>((*json).clone())
            .unwrap_err()
            .to_string();
        let bad = objects.get_as::<Gate>("shop", "bad").unwrap().unwrap_err();
        assert_eq!(bad.to_string(), expected);
        let all = objects.all_as::<Gate>(None);
        assert_eq!(all.iter().filter(|g| g.is_err()).count(), 1);

        // From now on an event is parsed when it arrives, before any read.
        sink.apply(watcher::Event::Apply(object("new", json!(["b"]))));
        let stored = objects
            .store
            .get(&objects.key("shop", "new"))
            .expect("stored");
        assert!(stored.parsed.get().is_some_and(Result::is_ok));
        let mut names = objects.names(Some("shop"));
        names.sort();
        assert_eq!(
            names,
            [("shop", "bad"), ("shop", "good"), ("shop", "new")]
                .map(|(n, m)| (n.to_string(), m.to_string()))
        );
    }
}
