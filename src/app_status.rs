//! An Argo CD Application's two resource lists, as wavegate keeps them: `status.resources`
//! (every object its manifests render, with the wave and sync status Argo CD recorded) and the
//! last sync's `status.operationState.syncResult.resources` (what that sync did to each). The
//! waves view, its timeline and live lint, notices, the gate controller and the proxy's scope
//! read them; nothing else of wavegate reads them.
//!
//! Why not the JSON: as a `serde_json::Value` each entry is a B-tree node of ~640 bytes plus a
//! heap chunk per key and per string, ~2 KB per resource for the two lists. The 2,000-resource
//! Application of `benches/bigapps.rs` is 877 KB of JSON and 4.15 MB as a `Value` (a counting
//! allocator; docs/benchmarks.md, "RSS and a release built for size"). Here an entry is a
//! struct of shared strings, and the strings that repeat (group, kind, version, namespace,
//! status, and each name, which both lists carry) are one allocation per Application.
//!
//! An entry keeps each field as the JSON readers read it: a field that is absent, or not a
//! string, is `None` (readers that need a default take `""`); `hook` not a `true` is `false`;
//! `syncWave` not an integer is 0 (Argo CD's default); `health` that is not a verdict is `None`.
//! A list that is absent or not an array is empty.

use crate::health::Verdict;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;
use std::ops::Deref;
use std::sync::Arc;

/// A string as a list entry holds it, shared.
pub type Text = Option<Arc<str>>;

/// The text of `t`, or `""` when it is absent.
pub fn text(t: &Text) -> &str {
    t.as_deref().unwrap_or("")
}

/// One entry of `status.resources` (argo-cd `pkg/apis/application/v1alpha1/types.go`,
/// `ResourceStatus`).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceStatus {
    pub group: Text,
    pub version: Text,
    pub kind: Text,
    pub namespace: Text,
    pub name: Text,
    /// Its sync status (`Synced`, `OutOfSync`, …).
    pub status: Text,
    /// The health Argo CD recorded (none from 3.0 on, unless configured).
    pub health: Option<Box<Verdict>>,
    /// A hook (it runs during a sync phase; it is in no wave's health).
    pub hook: bool,
    pub sync_wave: i64,
}

/// One entry of `syncResult.resources` (argo-cd `ResourceResult`), as the cache keeps it: which
/// resource, and how its sync went (`cache::strip` drops the rest).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceResult {
    pub group: Text,
    pub kind: Text,
    pub namespace: Text,
    pub name: Text,
    pub status: Text,
    pub hook_type: Text,
    pub hook_phase: Text,
}

/// An Application's two lists.
#[derive(Debug, Default, PartialEq)]
pub struct Lists {
    /// `status.resources`.
    pub resources: Box<[ResourceStatus]>,
    /// `status.operationState.syncResult.resources`.
    pub results: Box<[ResourceResult]>,
}

/// The strings of one Application's lists, each kept once.
#[derive(Default)]
struct Strings(HashSet<Arc<str>>);

impl Strings {
    fn at(&mut self, entry: &Value, key: &str) -> Text {
        let s = entry.get(key)?.as_str()?;
        if let Some(shared) = self.0.get(s) {
            return Some(shared.clone());
        }
        let shared: Arc<str> = Arc::from(s);
        self.0.insert(shared.clone());
        Some(shared)
    }
}

impl Lists {
    /// Takes both lists out of an Application's JSON: what remains has neither, and the lists
    /// are read from what this returns.
    pub fn take(app: &mut Value) -> Lists {
        let mut strings = Strings::default();
        let resources = taken(app, "/status", "resources")
            .iter()
            .map(|r| ResourceStatus {
                group: strings.at(r, "group"),
                version: strings.at(r, "version"),
                kind: strings.at(r, "kind"),
                namespace: strings.at(r, "namespace"),
                name: strings.at(r, "name"),
                status: strings.at(r, "status"),
                health: r
                    .get("health")
                    .and_then(|h| Verdict::deserialize(h).ok())
                    .map(Box::new),
                hook: r.get("hook").and_then(Value::as_bool).unwrap_or(false),
                sync_wave: r.get("syncWave").and_then(Value::as_i64).unwrap_or(0),
            })
            .collect();
        let results = taken(app, "/status/operationState/syncResult", "resources")
            .iter()
            .map(|x| ResourceResult {
                group: strings.at(x, "group"),
                kind: strings.at(x, "kind"),
                namespace: strings.at(x, "namespace"),
                name: strings.at(x, "name"),
                status: strings.at(x, "status"),
                hook_type: strings.at(x, "hookType"),
                hook_phase: strings.at(x, "hookPhase"),
            })
            .collect();
        Lists { resources, results }
    }
}

/// The array at `parent`'s `key`, removed from it; empty when there is none (an entry that is
/// not an array is left where it is: no reader reads it).
fn taken(app: &mut Value, parent: &str, key: &str) -> Vec<Value> {
    let Some(parent) = app.pointer_mut(parent).and_then(Value::as_object_mut) else {
        return Vec::new();
    };
    if !parent.get(key).is_some_and(Value::is_array) {
        return Vec::new();
    }
    match parent.remove(key) {
        Some(Value::Array(list)) => list,
        _ => Vec::new(),
    }
}

/// An Application: its JSON, without the two lists, and the lists. It reads as its JSON
/// (`Deref`); the lists only through [`App::lists`], so that nothing reads the lists from a
/// JSON that no longer has them.
#[derive(Debug, Clone)]
pub struct App {
    json: Arc<Value>,
    lists: Arc<Lists>,
}

impl App {
    /// An Application from its whole JSON (the lists are taken out of it).
    pub fn of(mut json: Value) -> App {
        let lists = Lists::take(&mut json);
        App {
            json: Arc::new(json),
            lists: Arc::new(lists),
        }
    }

    /// An Application as the cache keeps it: its JSON, and the lists taken out of it when it
    /// was stored. Without them (an object stored whole) they are read from the JSON.
    pub fn kept(json: Arc<Value>, lists: Option<Arc<Lists>>) -> App {
        match lists {
            Some(lists) => App { json, lists },
            None => App::of(Arc::unwrap_or_clone(json)),
        }
    }

    /// Its JSON, without the two lists.
    pub fn json(&self) -> &Value {
        &self.json
    }

    pub fn lists(&self) -> &Lists {
        &self.lists
    }

    /// Its lists, to keep beyond this read (shared, not copied).
    pub fn shared_lists(&self) -> Arc<Lists> {
        self.lists.clone()
    }
}

impl Deref for App {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.json
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;
    use crate::json::At;
    use proptest::prelude::*;
    use serde_json::json;

    fn app(resources: Value, results: Value) -> Value {
        json!({"metadata": {"name": "shop", "namespace": "argocd"},
               "status": {"sync": {"status": "Synced"}, "resources": resources,
                          "operationState": {"phase": "Succeeded",
                                             "syncResult": {"revision": "abc", "resources": results}}}})
    }

    #[test]
    fn the_lists_leave_the_json_and_the_rest_stays() {
        let a = App::of(app(
            json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop",
                    "name": "web", "status": "Synced", "syncWave": 2,
                    "health": {"status": "Progressing", "message": "rolling out"}},
                   {"kind": "Job", "name": "migrate", "hook": true}]),
            json!([{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web",
                    "status": "Synced"},
                   {"kind": "Job", "name": "migrate", "hookType": "PreSync", "hookPhase": "Running"}]),
        ));
        assert!(a.pointer("/status/resources").is_none());
        assert!(
            a.pointer("/status/operationState/syncResult/resources")
                .is_none()
        );
        assert_eq!(
            a.str_at("/status/operationState/syncResult/revision"),
            Some("abc")
        );
        assert_eq!(a.str_at("/status/sync/status"), Some("Synced"));
        let l = a.lists();
        assert_eq!(l.resources.len(), 2);
        let web = &l.resources[0];
        assert_eq!(
            (text(&web.group), text(&web.kind), web.sync_wave, web.hook),
            ("apps", "Deployment", 2, false)
        );
        let health = web.health.as_deref().expect("a verdict");
        assert_eq!(health.status, HealthStatus::Progressing);
        assert_eq!(health.message, "rolling out");
        let job = &l.resources[1];
        assert_eq!(
            (job.group.as_deref(), job.hook, job.sync_wave),
            (None, true, 0)
        );
        assert_eq!(text(&l.results[1].hook_type), "PreSync");
        assert_eq!(l.results[1].hook_phase.as_deref(), Some("Running"));
        // One allocation for a string both lists carry.
        assert!(Arc::ptr_eq(
            web.name.as_ref().unwrap(),
            l.results[0].name.as_ref().unwrap()
        ));
    }

    #[test]
    fn what_is_not_a_list_reads_as_empty_and_no_entry_field_is_guessed() {
        for (resources, results) in [
            (json!(null), json!("x")),
            (json!({"kind": "Service"}), json!(3)),
        ] {
            let a = App::of(app(resources.clone(), results.clone()));
            assert_eq!(*a.lists(), Lists::default());
            // Left as they were: nothing reads them.
            assert_eq!(a["status"]["resources"], resources);
        }
        let a = App::of(app(
            json!([7, {"kind": 3, "name": "", "hook": "true", "syncWave": 1.5,
                       "health": {"status": "Fine"}}]),
            json!([]),
        ));
        let l = a.lists();
        let empty = ResourceStatus {
            group: None,
            version: None,
            kind: None,
            namespace: None,
            name: None,
            status: None,
            health: None,
            hook: false,
            sync_wave: 0,
        };
        assert_eq!(l.resources[0], empty);
        assert_eq!(
            l.resources[1],
            ResourceStatus {
                name: Some(Arc::from("")),
                ..empty
            }
        );
        // A JSON with no status at all.
        assert_eq!(*App::of(json!({"metadata": {}})).lists(), Lists::default());
    }

    #[test]
    fn a_kept_application_without_its_lists_reads_them_from_its_json() {
        let whole = app(json!([{"kind": "Service", "name": "web"}]), json!([]));
        let a = App::kept(Arc::new(whole), None);
        assert_eq!(a.lists().resources.len(), 1);
        assert!(a.pointer("/status/resources").is_none());
    }

    /// A field of an entry as the readers of the JSON read it.
    fn read(entry: &Value, key: &str) -> Option<String> {
        entry.get(key).and_then(Value::as_str).map(str::to_string)
    }

    fn field() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            "[a-c]{0,2}".prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
            Just(json!({"status": "Healthy"})),
            Just(json!([])),
        ]
    }

    fn entry() -> impl Strategy<Value = Value> {
        let keys = [
            "group",
            "version",
            "kind",
            "namespace",
            "name",
            "status",
            "hook",
            "syncWave",
            "health",
            "hookType",
            "hookPhase",
        ];
        prop::collection::vec(prop::option::of(field()), keys.len()).prop_map(move |fields| {
            let mut m = serde_json::Map::new();
            for (k, v) in keys.iter().zip(fields) {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
            Value::Object(m)
        })
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config::config(300))]
        /// Every field of every entry reads as a read of the whole JSON would read it.
        #[test]
        fn each_entry_reads_as_its_json(
            resources in prop::collection::vec(prop_oneof![entry(), field()], 0..6),
            results in prop::collection::vec(prop_oneof![entry(), field()], 0..6),
        ) {
            let whole = app(Value::from(resources.clone()), Value::from(results.clone()));
            let a = App::of(whole);
            let l = a.lists();
            prop_assert_eq!(l.resources.len(), resources.len());
            for (r, e) in resources.iter().zip(l.resources.iter()) {
                let s = |t: &Text| t.as_deref().map(str::to_string);
                prop_assert_eq!(s(&e.group), read(r, "group"));
                prop_assert_eq!(s(&e.version), read(r, "version"));
                prop_assert_eq!(s(&e.kind), read(r, "kind"));
                prop_assert_eq!(s(&e.namespace), read(r, "namespace"));
                prop_assert_eq!(s(&e.name), read(r, "name"));
                prop_assert_eq!(s(&e.status), read(r, "status"));
                prop_assert_eq!(e.hook, r.get("hook").and_then(Value::as_bool).unwrap_or(false));
                prop_assert_eq!(e.sync_wave, r.get("syncWave").and_then(Value::as_i64).unwrap_or(0));
                let health = r.get("health").and_then(|h| serde_json::from_value::<Verdict>(h.clone()).ok());
                prop_assert_eq!(e.health.as_deref(), health.as_ref());
            }
            prop_assert_eq!(l.results.len(), results.len());
            for (x, e) in results.iter().zip(l.results.iter()) {
                let s = |t: &Text| t.as_deref().map(str::to_string);
                prop_assert_eq!(s(&e.group), read(x, "group"));
                prop_assert_eq!(s(&e.kind), read(x, "kind"));
                prop_assert_eq!(s(&e.namespace), read(x, "namespace"));
                prop_assert_eq!(s(&e.name), read(x, "name"));
                prop_assert_eq!(s(&e.status), read(x, "status"));
                prop_assert_eq!(s(&e.hook_type), read(x, "hookType"));
                prop_assert_eq!(s(&e.hook_phase), read(x, "hookPhase"));
            }
        }
    }
}
