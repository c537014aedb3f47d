//! Typed reads of a JSON object by JSON pointer (RFC 6901, `serde_json::Value::pointer`): the
//! value at the pointer if it has the asked type, `None` if it is absent or of another type.
//! Numbers follow `serde_json`: [`At::i64_at`] takes only integers that fit an `i64`,
//! [`At::u64_at`] only non-negative ones, so a float or a string holding digits is `None`.

use serde_json::{Map, Value};

/// Typed getters on a JSON value, one per JSON type.
pub(crate) trait At {
    /// The string at `pointer`.
    fn str_at(&self, pointer: &str) -> Option<&str>;
    /// The string at `pointer`, unless it is empty (Kubernetes' `omitempty` treats `""` as
    /// unset).
    fn text_at(&self, pointer: &str) -> Option<&str> {
        self.str_at(pointer).filter(|s| !s.is_empty())
    }
    fn i64_at(&self, pointer: &str) -> Option<i64>;
    fn u64_at(&self, pointer: &str) -> Option<u64>;
    fn bool_at(&self, pointer: &str) -> Option<bool>;
    fn array_at(&self, pointer: &str) -> Option<&Vec<Value>>;
    fn object_at(&self, pointer: &str) -> Option<&Map<String, Value>>;
}

impl At for Value {
    fn str_at(&self, pointer: &str) -> Option<&str> {
        self.pointer(pointer).and_then(Value::as_str)
    }

    fn i64_at(&self, pointer: &str) -> Option<i64> {
        self.pointer(pointer).and_then(Value::as_i64)
    }

    fn u64_at(&self, pointer: &str) -> Option<u64> {
        self.pointer(pointer).and_then(Value::as_u64)
    }

    fn bool_at(&self, pointer: &str) -> Option<bool> {
        self.pointer(pointer).and_then(Value::as_bool)
    }

    fn array_at(&self, pointer: &str) -> Option<&Vec<Value>> {
        self.pointer(pointer).and_then(Value::as_array)
    }

    fn object_at(&self, pointer: &str) -> Option<&Map<String, Value>> {
        self.pointer(pointer).and_then(Value::as_object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_getter_answers_only_for_its_own_type() {
        let v = json!({"s": "x", "e": "", "n": -3, "u": 7, "f": 1.5, "b": true,
                       "a": [1], "o": {"k": null}, "digits": "12"});
        assert_eq!(v.str_at("/s"), Some("x"));
        assert_eq!(v.str_at("/e"), Some(""));
        assert_eq!(v.text_at("/e"), None);
        assert_eq!(v.str_at("/missing"), None);
        assert_eq!(v.str_at("/n"), None);
        assert_eq!(v.i64_at("/n"), Some(-3));
        assert_eq!(v.u64_at("/n"), None, "negative is not a u64");
        assert_eq!(v.u64_at("/u"), Some(7));
        assert_eq!(v.i64_at("/f"), None, "a float is not an integer");
        assert_eq!(v.i64_at("/digits"), None, "a string is not a number");
        assert_eq!(v.bool_at("/b"), Some(true));
        assert_eq!(v.array_at("/a").map(Vec::len), Some(1));
        assert!(v.object_at("/o").is_some_and(|o| o.contains_key("k")));
        assert_eq!(v.object_at("/o/k"), None, "null is no object");
    }
}
