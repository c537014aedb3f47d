//! YAML documents to JSON values, within a budget of what their aliases may expand to.
//!
//! `wavegate lint` reads pull requests nobody has reviewed yet. serde_yaml 0.9 bounds how often
//! a document may replay an anchor (100 × its events, `RepetitionLimitExceeded`) but not what
//! the replays build: lists of aliases of lists of aliases ("billion laughs") made a 5 KB
//! document a million values, and 50 KB more than 2 GB. So values are built here and counted
//! as they are made; a run may build at most [`VALUES_PER_BYTE`] values and as many bytes of
//! strings per byte it read, plus a fixed allowance for aliases as people use them (shared
//! blocks, merge keys). Text without aliases never comes near that: every value takes at
//! least a byte of YAML, and no string is longer than its YAML. Depth is serde_yaml's own
//! bound (128 levels, "recursion limit exceeded").

use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Values a run may build per byte of YAML it read.
pub const VALUES_PER_BYTE: usize = 2;
/// What aliases may add to a run beyond that, in values and in bytes of strings.
pub const ALIAS_VALUES: usize = 100_000;
pub const ALIAS_BYTES: usize = 16 << 20;

/// What one run of `wavegate lint` may still build.
#[derive(Debug)]
pub struct Budget {
    values: usize,
    bytes: usize,
    exhausted: bool,
}

/// Why a document was not read.
#[derive(Debug)]
pub enum Refusal {
    Invalid(serde_yaml::Error),
    /// Its aliases expand past the run's budget.
    Expands,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            values: ALIAS_VALUES,
            bytes: ALIAS_BYTES,
            exhausted: false,
        }
    }
}

impl Budget {
    /// One YAML document (the text between two `---`), as serde_yaml reads it into JSON.
    pub fn document(&mut self, text: &str) -> Result<Value, Refusal> {
        let credit = text.len().saturating_mul(VALUES_PER_BYTE);
        self.values = self.values.saturating_add(credit);
        self.bytes = self.bytes.saturating_add(credit);
        let build = Build { budget: self };
        match build.deserialize(serde_yaml::Deserializer::from_str(text)) {
            Ok(value) => Ok(value),
            Err(_) if self.exhausted => Err(Refusal::Expands),
            Err(e) => Err(Refusal::Invalid(e)),
        }
    }

    fn spend<E: Error>(&mut self, bytes: usize) -> Result<(), E> {
        if self.exhausted || self.values == 0 || self.bytes < bytes {
            self.exhausted = true;
            return Err(E::custom("aliases expand past the budget"));
        }
        self.values -= 1;
        self.bytes -= bytes;
        Ok(())
    }

    /// The bound, in words, for error messages.
    pub fn describe() -> String {
        format!(
            "{VALUES_PER_BYTE} values and {VALUES_PER_BYTE} bytes of text per byte read, plus {ALIAS_VALUES} values and {} MiB for aliases",
            ALIAS_BYTES >> 20
        )
    }
}

/// Builds one value, as `serde_json::Value`'s own `Deserialize` does, paying for each part.
struct Build<'b> {
    budget: &'b mut Budget,
}

impl<'de> DeserializeSeed<'de> for Build<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: Error>(self, v: bool) -> Result<Value, E> {
        self.budget.spend(0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<Value, E> {
        self.budget.spend(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Value, E> {
        self.budget.spend(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: Error>(self, v: i128) -> Result<Value, E> {
        self.budget.spend(0)?;
        serde::Deserialize::deserialize(serde::de::value::I128Deserializer::<E>::new(v))
            .map(Value::Number)
    }

    fn visit_u128<E: Error>(self, v: u128) -> Result<Value, E> {
        self.budget.spend(0)?;
        serde::Deserialize::deserialize(serde::de::value::U128Deserializer::<E>::new(v))
            .map(Value::Number)
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<Value, E> {
        self.budget.spend(0)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Value, E> {
        self.budget.spend(v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Value, E> {
        self.budget.spend(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_none<E: Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_unit<E: Error>(self) -> Result<Value, E> {
        self.budget.spend(0)?;
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.spend(0)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Build {
            budget: &mut *self.budget,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.spend(0)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key {
            budget: &mut *self.budget,
        })? {
            let value = map.next_value_seed(Build {
                budget: &mut *self.budget,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key, read as a string as `serde_json::Value` reads keys (`KeyClassifier`).
struct Key<'b> {
    budget: &'b mut Budget,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<String, E> {
        self.budget.spend(v.len())?;
        Ok(v.to_string())
    }

    fn visit_string<E: Error>(self, v: String) -> Result<String, E> {
        self.budget.spend(v.len())?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_read_as_serde_yaml_reads_them() {
        for text in [
            "",
            "# only a comment\n",
            "a: 1\nb: -2\nc: 1.5\nd: .nan\ne: ~\nf: [true, 'x', \"y\\n\"]\n1: int key\n",
            "big: 340282366920938463463374607431768211455\nneg: -170141183460469231731687303715884105728\n",
            "x: &x {a: [1, 2]}\ny: *x\nz: {<<: *x, b: 3}\n",
            "list:\n  - |\n    block\n    text\n  - >-\n    folded\n    text\n",
            "- !tag value\n",
            "[a: b]: c\n",
            "a: 1\na: 2\n",
        ] {
            let ours = Budget::default().document(text);
            let theirs: Result<Value, _> = serde_yaml::from_str(text);
            match (ours, theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text:?}"),
                (Err(Refusal::Invalid(_)), Err(_)) => {}
                (a, b) => panic!("{text:?}: ours {a:?}, serde_yaml {b:?}"),
            }
        }
    }

    #[test]
    fn the_budget_is_shared_by_the_documents_of_a_run() {
        // Each document below stays under the allowance alone; together they do not.
        let laughs = crate::lint::manifest::tests::billion_laughs(2, 200);
        let mut budget = Budget::default();
        let refused = (0..10).position(|_| budget.document(&laughs).is_err());
        assert!(refused.is_some_and(|n| n > 0), "{refused:?}");
    }
}
