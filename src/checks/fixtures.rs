//! Fixture readers shared by the checks' unit tests: each test names a file under
//! `tests/fixtures/` (a YAML object or a `kind: List`) and reads as one sentence about it.

use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

/// One object, as the API server would return it.
pub(crate) fn object(yaml: &str) -> Value {
    serde_yaml::from_str(yaml).expect("fixture is one YAML object")
}

/// The `items` of a `kind: List` fixture, typed (pods, …).
pub(crate) fn items<T: DeserializeOwned>(yaml: &str) -> Vec<Arc<T>> {
    object(yaml)["items"]
        .as_array()
        .expect("fixture is a List with items")
        .iter()
        .map(|item| Arc::new(serde_json::from_value(item.clone()).expect("item of this type")))
        .collect()
}
