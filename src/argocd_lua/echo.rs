//! The no-echo rules for what a health script says. A JSONPath verdict names the expression,
//! never the value it selected (src/checks/generic.rs); a script's message is text the script
//! built, often from the object, and it is shown to everyone who can see the gate, the waves
//! view or the Argo CD application. So, before wavegate shows it (in its verdict and in
//! `argoStatus`):
//! - every string of the object outside `status` and its identity (`apiVersion`, `kind`,
//!   `metadata.name`, `metadata.namespace`) of at least [`MIN_ECHOED`] characters becomes
//!   `<redacted>` — an env value, an inline password, an annotation (`last-applied-
//!   configuration` holds the whole spec). What the controller reports in `status` (condition
//!   messages, phases) is what scripts are for, and stays;
//! - invisible characters (controls, bidi overrides) become spaces ([`printable`]);
//! - at most [`MAX_SHOWN`] bytes are shown, saying how long the message was.
//!
//! The same applies to a failed run's error text (`error(obj.spec.password)`).

use crate::health::printable;
use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::Value;
use std::collections::BTreeSet;

/// The longest script message shown, in bytes.
pub const MAX_SHOWN: usize = 1024;
/// Of a longer message, only this much is searched for echoes (the rest is never shown).
const MAX_SCANNED: usize = 64 << 10;
/// Shorter strings (`True`, `Ready`, `v1`) are words of every message, not secrets.
pub const MIN_ECHOED: usize = 6;
/// What stands for a redacted string.
pub const REDACTED: &str = "<redacted>";

/// `message` as wavegate shows it for a script's run on `object`.
pub fn shown(message: &str, object: &Value) -> String {
    if message.is_empty() {
        return String::new();
    }
    let scanned = cut(message, MAX_SCANNED);
    let redacted = redact(scanned, object);
    let visible = printable(&redacted);
    if visible.len() <= MAX_SHOWN && scanned.len() == message.len() {
        return visible;
    }
    format!(
        "{}… (a message of {} bytes, cut to {MAX_SHOWN})",
        cut(&visible, MAX_SHOWN),
        message.len()
    )
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn redact(message: &str, object: &Value) -> String {
    let mut reported = BTreeSet::new();
    if let Some(status) = object.get("status") {
        strings(status, &mut |s| {
            reported.insert(s);
        });
    }
    let identity = [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ]
    .map(|p| object.pointer(p).and_then(Value::as_str));
    let mut secret: BTreeSet<&str> = BTreeSet::new();
    let Some(fields) = object.as_object() else {
        return message.to_string();
    };
    for (key, value) in fields {
        if key == "status" {
            continue;
        }
        strings(value, &mut |s| {
            if s.chars().count() >= MIN_ECHOED
                && s.len() <= message.len()
                && !reported.contains(s)
                && !identity.contains(&Some(s))
            {
                secret.insert(s);
            }
        });
    }
    if secret.is_empty() {
        return message.to_string();
    }
    match AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&secret)
    {
        Ok(ac) => ac.replace_all(message, &vec![REDACTED; secret.len()]),
        // Too many patterns to build an automaton of: show nothing rather than risk an echo.
        Err(_) => format!("{REDACTED} (the message could not be checked for echoes)"),
    }
}

/// Every string value under `value` (not object keys), without recursion.
fn strings<'a>(value: &'a Value, each: &mut impl FnMut(&'a str)) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => each(s),
            Value::Array(a) => stack.extend(a),
            Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object() -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "widget-one", "namespace": "tenant",
                         "annotations": {"note": "hunter2-annotation"}},
            "spec": {"password": "s3cr3t-pa55", "image": "registry/app:1.2.3",
                     "env": [{"name": "TOKEN", "value": "tok-abcdef"}], "short": "abc"},
            "status": {"phase": "Provisioning", "image": "registry/app:1.2.3"}
        })
    }

    #[test]
    fn strings_of_the_spec_and_metadata_are_redacted_status_and_identity_stay() {
        let o = object();
        let m = shown(
            "widget-one in tenant: pw s3cr3t-pa55, token tok-abcdef, note hunter2-annotation, \
             phase Provisioning, image registry/app:1.2.3, abc",
            &o,
        );
        for leaked in ["s3cr3t-pa55", "tok-abcdef", "hunter2-annotation"] {
            assert!(!m.contains(leaked), "{m}");
        }
        for kept in [
            "widget-one",
            "tenant",
            "Provisioning",
            "registry/app:1.2.3",
            "abc",
        ] {
            assert!(m.contains(kept), "{kept}: {m}");
        }
        assert_eq!(m.matches(REDACTED).count(), 3, "{m}");
    }

    #[test]
    fn a_huge_message_is_cut_and_says_how_long_it_was() {
        let huge = "é".repeat(1 << 20);
        let m = shown(&huge, &object());
        assert!(m.len() < MAX_SHOWN + 100, "{}", m.len());
        assert!(m.ends_with(&format!("(a message of {} bytes, cut to 1024)", huge.len())));
    }

    #[test]
    fn invisible_characters_cannot_act_on_a_terminal() {
        let m = shown("ok\u{1b}[2J\r\n\u{202e}done", &object());
        assert!(!m.chars().any(crate::health::is_invisible), "{m:?}");
    }
}
