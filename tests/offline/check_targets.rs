//! The Argo CD UI extension shows what each check of a gate points at from the WaveGate's spec
//! alone (`checkTarget` in argocd/extension/extension-wavegate.js: an entry field → the kind's
//! kubectl name). A kind missing from its table shows an empty target on the Gate tab, so the
//! table is held to the registry here. (The dashboard shows the API's `target`, which the
//! server derives from the registry.)

use std::collections::BTreeMap;
use wavegate::resource::registry::{GENERIC_ENTRY, KINDS, by_group_kind, check_targets};

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

/// The `{ group: '…', kind: '…', resource: '…' }` rows of the Readiness tab's `CHECKED_KINDS`.
fn readiness_kinds(text: &str) -> Option<Vec<(String, String, String)>> {
    let body = &text[text.find("var CHECKED_KINDS = [")?..];
    let body = &body[..body.find("];")?];
    let field = |row: &str, name: &str| -> Option<String> {
        let at = row.find(&format!("{name}: '"))? + name.len() + 3;
        Some(row[at..at + row[at..].find('\'')?].to_string())
    };
    body.split('{')
        .skip(1)
        .map(|row| {
            Some((
                field(row, "group")?,
                field(row, "kind")?,
                field(row, "resource")?,
            ))
        })
        .collect()
}

/// The Readiness tab asks wavegate for `api/v1/health/<resource>/…` of the objects of each
/// kind it lists: a kind not in the registry would be asked under the generic rule, and a
/// wrong kubectl name would be asked for another kind. Every registered kind has the tab but
/// Applications, which have their Waves tab instead (a CNPG DatabaseRole once had none).
#[test]
fn the_readiness_tab_asks_for_registered_kinds_by_their_kubectl_names() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(EXTENSION);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{EXTENSION}: {e}"));
    let rows =
        readiness_kinds(&text).unwrap_or_else(|| panic!("{EXTENSION}: no CHECKED_KINDS table"));
    let listed: Vec<(&str, &str)> = rows.iter().map(|(g, k, _)| (&**g, &**k)).collect();
    for spec in KINDS.iter().filter(|s| s.kind != "Application") {
        assert!(
            listed.contains(&(spec.group, spec.kind)),
            "the Readiness tab has no row for {}/{}: its objects get no tab",
            spec.group,
            spec.kind
        );
    }
    for (group, kind, resource) in rows {
        let spec = by_group_kind(&group, &kind).unwrap_or_else(|| {
            panic!("CHECKED_KINDS lists {group}/{kind}, which no registry row is")
        });
        assert_eq!(resource, spec.kubectl_name(), "{group}/{kind}");
    }
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
