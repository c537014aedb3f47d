//! The committed OpenAPI document must be exactly what the Rust types generate, so the schema a
//! client or a UI reads never drifts from what the API sends; and every `$ref` in it must name a
//! schema, parameter or response the document has.

use serde_json::Value;

const COMMITTED: &str = "docs/openapi.yaml";

fn generated() -> String {
    wavegate::api::openapi::openapi_yaml().expect("the OpenAPI document serializes")
}

#[test]
fn committed_openapi_matches_the_rust_types() {
    let generated = generated();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(COMMITTED);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{COMMITTED} differs from the document generated from src/api/openapi.base.yaml and \
             the Rust types (first difference at line {}: committed {:?}, generated {:?}); run \
             `cargo run -- openapi > {COMMITTED}`",
            first + 1,
            committed.lines().nth(first),
            generated.lines().nth(first),
        );
    }
}

/// Every `$ref` string anywhere under `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn every_reference_names_something_the_document_has() {
    let doc: Value = serde_yaml::from_str(&generated()).unwrap();
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(
        found.contains(&"#/components/schemas/WaveTimeline"),
        "the scan sees the generated references: {found:?}"
    );
    let dangling: Vec<&&str> = found
        .iter()
        .filter(|r| {
            r.strip_prefix('#')
                .and_then(|pointer| doc.pointer(pointer))
                .is_none()
        })
        .collect();
    assert!(dangling.is_empty(), "references to nothing: {dangling:?}");
}

/// The schema lists every way a resource can have been judged: the view sends `outofscope`
/// through Argo CD's proxy, which the hand-written document once left out.
#[test]
fn the_schema_names_every_judge_the_waves_view_sends() {
    let doc: Value = serde_yaml::from_str(&generated()).unwrap();
    let words = doc
        .pointer("/components/schemas/JudgedBy/anyOf/0/enum")
        .and_then(Value::as_array)
        .expect("JudgedBy lists its words");
    for judge in ["wavegate", "kstatus", "argocd", "outofscope"] {
        assert!(
            words.iter().any(|w| w == judge),
            "{judge} missing from {words:?}"
        );
    }
}
