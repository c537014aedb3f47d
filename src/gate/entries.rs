//! The entry fields of a WaveGate check, one per kind of `check_kinds!` (under its registry
//! row's `entry`) and the generic `resource`: read, written and described by walking the kinds,
//! so a new kind's field appears in the CRD without a field written here. Serde's field names
//! are literals, which a registry row's `entry` is not; hence a map walked by hand.

use crate::kinds::{Entry, GateEntry};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// The entries a check sets, in the order it sets them (exactly one in a valid check; the
/// CRD's CEL rule says so, an API server without CEL might not).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entries(pub Vec<Entry>);

impl Entries {
    /// Each entry with its field's name.
    pub(crate) fn asks(&self) -> Vec<(&'static str, &dyn GateEntry)> {
        self.0.iter().map(|e| (e.field(), e.gate_entry())).collect()
    }
}

impl Serialize for Entries {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for e in &self.0 {
            map.serialize_entry(e.field(), e)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a check's entry fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(field) = map.next_key::<String>()? {
                    // Other fields are ignored, as the API server prunes them.
                    if let Some(e) = Entry::read(&field, &mut map)? {
                        out.push(e);
                    }
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Fields)
    }
}

impl JsonSchema for Entries {
    fn schema_name() -> Cow<'static, str> {
        "CheckEntries".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let properties: serde_json::Map<String, serde_json::Value> = Entry::schemas(g)
            .into_iter()
            .map(|(field, schema)| (field.to_string(), schema.to_value()))
            .collect();
        schemars::json_schema!({ "type": "object", "properties": properties })
    }
}
