//! What a remote cluster may make wavegate hold: objects Kubernetes' own validation would
//! refuse are not held at all, and what the rest cost is weighed in bytes, so that a hostile or
//! broken remote API server cannot fill memory with a few huge objects under the object bound.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// A label value: apimachinery `pkg/util/validation/validation.go` `LabelValueMaxLength`.
const LABEL_VALUE_MAX: usize = 63;
/// A label key's name part (`qualifiedNameMaxLength`, same file).
const LABEL_NAME_MAX: usize = 63;
/// A label key's prefix, a DNS subdomain (`DNS1123SubdomainMaxLength`, same file).
const LABEL_PREFIX_MAX: usize = 253;
/// All of an object's annotations, keys and values together: apimachinery
/// `pkg/api/validation/objectmeta.go` `TotalAnnotationSizeLimitB` (256 KiB).
const ANNOTATIONS_MAX: usize = 256 * (1 << 10);

/// The annotation that whole objects lose before they are stored (`strip`): not weighed.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What one object costs besides the text it carries: its view or JSON skeleton, its `Arc`,
/// its places in the store's maps (a view is ~400 bytes with its place in the store, see
/// `views`).
pub(super) const OBJECT_OVERHEAD: usize = 512;

/// Why an object's metadata is one no Kubernetes API server would have admitted (`None`: it
/// is within Kubernetes' limits). Every API server validates metadata of every kind, built-in
/// and custom alike (`ValidateObjectMeta`), so such an object comes from a broken or hostile
/// server, and what it carries beyond the limits is not worth holding.
pub(super) fn beyond_kubernetes_limits(meta: &ObjectMeta) -> Option<String> {
    for (key, value) in meta.labels.iter().flatten() {
        let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
        if prefix.len() > LABEL_PREFIX_MAX || name.len() > LABEL_NAME_MAX {
            return Some(format!(
                "a label key of {} bytes (Kubernetes allows a {LABEL_PREFIX_MAX}-byte prefix \
                 and a {LABEL_NAME_MAX}-byte name)",
                key.len()
            ));
        }
        if value.len() > LABEL_VALUE_MAX {
            return Some(format!(
                "a label value of {} bytes (Kubernetes allows {LABEL_VALUE_MAX})",
                value.len()
            ));
        }
    }
    let annotations: usize = meta
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    (annotations > ANNOTATIONS_MAX).then(|| {
        format!("{annotations} bytes of annotations (Kubernetes allows {ANNOTATIONS_MAX} in all)")
    })
}

/// The bytes of text in an object's metadata that the cache may keep: name, namespace, labels,
/// annotations (but the last-applied one, which is stripped) and owners.
pub(super) fn meta_weight(meta: &ObjectMeta) -> usize {
    let text = |s: &Option<String>| s.as_deref().map_or(0, str::len);
    let labels: usize = meta
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let annotations: usize = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != LAST_APPLIED)
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let owners: usize = meta
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.api_version.len() + o.kind.len() + o.name.len() + o.uid.len())
        .sum();
    text(&meta.name) + text(&meta.namespace) + labels + annotations + owners
}

/// The length of `value` as JSON, counted without writing it anywhere.
pub(super) fn json_weight(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a `serde_json::Value` cannot fail; were it to, the count so far stands.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A watch's key for an object it holds: its namespace and name, hashed (the store keeps the
/// names; the bound needs only to tell objects apart).
pub(super) fn key_of(namespace: &str, name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (namespace, name).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, String)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("web-0".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn metadata_kubernetes_would_refuse_is_named_and_the_limits_themselves_pass() {
        let at_limits = meta(
            &[(
                &format!("{}/{}", "p".repeat(253), "n".repeat(63)),
                &"v".repeat(63),
            )],
            &[("a", "x".repeat(ANNOTATIONS_MAX - 1))],
        );
        assert_eq!(beyond_kubernetes_limits(&at_limits), None);
        let value = meta(&[("app", &"v".repeat(64))], &[]);
        assert!(
            beyond_kubernetes_limits(&value)
                .is_some_and(|why| why.contains("label value of 64 bytes"))
        );
        let key = meta(&[(&"n".repeat(64), "web")], &[]);
        assert!(beyond_kubernetes_limits(&key).is_some_and(|why| why.contains("label key")));
        let annotations = meta(&[], &[("a", "x".repeat(ANNOTATIONS_MAX))]);
        assert!(
            beyond_kubernetes_limits(&annotations)
                .is_some_and(|why| why.contains("bytes of annotations"))
        );
    }

    #[test]
    fn weight_counts_kept_text_but_not_the_stripped_last_applied_annotation() {
        let m = meta(
            &[("app", "web")],
            &[(LAST_APPLIED, "x".repeat(10_000)), ("note", "abc".into())],
        );
        assert_eq!(meta_weight(&m), "web-0".len() + 6 + 7);
        assert_eq!(
            json_weight(&serde_json::json!({"a": 1})),
            r#"{"a":1}"#.len()
        );
    }
}
