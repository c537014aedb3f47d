//! The Argo CD UI extension shows what each check of a gate points at from the WaveGate's spec
//! alone (`checkTarget` in argocd/extension/extension-wavegate.js: an entry field → the kind's
//! kubectl name). A kind missing from its table shows an empty target on the Gate tab, so the
//! table is held to the registry here. (The dashboard shows the API's `target`, which the
//! server derives from the registry.)

use std::collections::BTreeMap;
use wavegate::resource::registry::{GENERIC_ENTRY, KINDS, check_targets};

const EXTENSION: &str = "argocd/extension/extension-wavegate.js";

/// The `{ field: 'name', … }` table of `checkTarget` in `text`.
fn check_target_table(text: &str) -> Option<BTreeMap<String, String>> {
    let body = &text[text.find("function checkTarget(")?..];
    let table = &body[body.find('{')? + 1..];
    let table = &table[table.find('{')? + 1..];
    let table = &table[..table.find('}')?];
    table
        .split(',')
        .map(|pair| {
            let (k, v) = pair.split_once(':')?;
            let v = v.trim().strip_prefix('\'')?.strip_suffix('\'')?;
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

#[test]
fn the_extension_names_every_registered_kind_as_the_registry_does() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(EXTENSION);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{EXTENSION}: {e}"));
    let table = check_target_table(&text)
        .unwrap_or_else(|| panic!("{EXTENSION}: no `kinds` table in checkTarget"));
    assert_eq!(
        table,
        check_targets(KINDS),
        "checkTarget's table against the registry"
    );
    // The generic entry names its kind itself.
    assert!(
        text.contains(&format!("check.{GENERIC_ENTRY}.resource")),
        "checkTarget reads the generic entry's kind"
    );
}

#[test]
fn the_table_is_read_as_written() {
    let js = "function checkTarget(check, gateNs) {\n var kinds = {\n a: 'x.y', bC: 'z'\n };";
    let table = check_target_table(js).unwrap();
    assert_eq!(table.len(), 2);
    assert_eq!(table["bC"], "z");
    assert_eq!(
        check_target_table("function checkTarget(c) { var k = { a: b }; }"),
        None
    );
}
