//! docs/extending.md's walk-through, proved on a real kind: cert-manager's `Certificate` added
//! as a row of the registry's table (step 1). Each list derived from the table picks the row up
//! with no other edit; what is not derived (the kind's contract and entry, which need its code,
//! the shipped RBAC and the extension's table) is held to the table by a test that fails until
//! its step is done, and here what that test demands of the new row is shown.

use crate::gate::crd;
use crate::kinds::IMPLEMENTED;
use crate::lint::manifest;
use crate::lint::rules::{suggested_entry, targets_of};
use crate::resource::CheckKind;
use crate::resource::registry::{
    KINDS, KindSpec, Permission, PermissionRule, check_targets, entries_in, permissions,
};
use serde_json::json;
use std::sync::LazyLock;

/// cert-manager's Certificate, named as its CRD names it (cert-manager/cert-manager,
/// `deploy/crds/cert-manager.io_certificates.yaml`: group `cert-manager.io`, plural
/// `certificates`, Kind `Certificate`, short names `cert` and `certs`). Its check would read the
/// Certificate's `Ready` condition and, to say why it is not Ready, its CertificateRequests.
const CERTIFICATE: KindSpec = KindSpec {
    group: "cert-manager.io",
    plural: "certificates",
    kind: "Certificate",
    short_names: &["cert", "certs"],
    entry: "certificate",
    verbs: &["get", "list", "watch"],
    reads: &[("cert-manager.io", "certificaterequests")],
    grace: true,
    annotated: false,
    suggested: "",
};

/// The registry's table as step 1 leaves it: every row of [`KINDS`], then the Certificate's.
/// The proof needs a kind the registry does not have yet; once Certificate is one, walk
/// through another.
static WITH_CERTIFICATE: LazyLock<Vec<KindSpec>> = LazyLock::new(|| {
    assert!(
        !KINDS
            .iter()
            .any(|k| k.group == CERTIFICATE.group || k.entry == CERTIFICATE.entry),
        "cert-manager's Certificate is a registered kind now: walk through one that is not"
    );
    KINDS.iter().copied().chain([CERTIFICATE]).collect()
});

fn table() -> &'static [KindSpec] {
    &WITH_CERTIFICATE
}

fn certificate() -> &'static KindSpec {
    table().last().unwrap()
}

/// Without the row, `cert` would name a generic kind in the core group and a Certificate would
/// be judged by kstatus; with it, each of its kubectl names is the dedicated kind, and Argo
/// CD's listing of `cert-manager.io`/`Certificate` finds it.
#[test]
fn a_certificate_row_makes_each_of_its_kubectl_names_the_dedicated_kind() {
    let dedicated = CheckKind::Dedicated(certificate());
    for name in [
        "certificates.cert-manager.io",
        "certificate.cert-manager.io",
        "Certificate.cert-manager.io",
        "cert.cert-manager.io",
        "certs.cert-manager.io",
    ] {
        assert_eq!(CheckKind::parse_in(table(), name), Ok(dedicated.clone()));
        assert!(
            matches!(CheckKind::parse(name), Ok(CheckKind::Generic { .. })),
            "{name} is already dedicated without the row"
        );
    }
    assert_eq!(
        CheckKind::dedicated_in(table(), "cert-manager.io", "Certificate"),
        Some(dedicated.clone())
    );
    assert_eq!(dedicated.to_string(), "certificates.cert-manager.io");
}

/// The API server counts only the entries the CEL rule names: a Certificate entry left out of
/// it could be set beside a Service entry in one check.
#[test]
fn the_crd_rule_counts_a_certificate_entry() {
    let entries: Vec<&str> = entries_in(table()).collect();
    let rule = crd::one_entry_rule(&entries);
    let rule = &rule[0];
    assert!(
        rule["rule"]
            .as_str()
            .unwrap()
            .contains("has(self.certificate), has(self.resource)]"),
        "{rule}"
    );
    assert!(
        rule["message"]
            .as_str()
            .unwrap()
            .ends_with("application, certificate, resource"),
        "{rule}"
    );
}

/// The incident the registry closed: lint skipped a new kind's gate entries, so it reported
/// the wave a gate already held. A `certificate:` entry is read as the gate's target.
#[test]
fn lint_reads_a_certificate_entry_as_a_gate_target() {
    let check = json!({"name": "tls", "certificate": {"name": "web-tls"}});
    let targets = targets_of(table(), &check, "shop");
    assert_eq!(targets.len(), 1, "{targets:?}");
    let t = &targets[0];
    assert_eq!(
        (t.kind.as_str(), t.namespace.as_str(), t.name.as_str()),
        ("cert-manager.io/Certificate", "shop", "web-tls")
    );
    assert!(!t.resource);
    assert!(targets_of(KINDS, &check, "shop").is_empty());
}

/// A gate lint suggests for a Certificate asks for it by its own entry, which judges it by its
/// check, not by the generic rule.
#[test]
fn lint_suggests_a_gate_with_a_certificate_entry() {
    let mut objects = Vec::new();
    let text = "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: web-tls, namespace: shop}\n";
    manifest::parse("cert.yaml", text, true, &mut objects).unwrap();
    assert_eq!(
        suggested_entry(table(), &objects[0]),
        "certificate: {name: web-tls}"
    );
    assert!(suggested_entry(KINDS, &objects[0]).starts_with("resource: "));
}

/// What `tests/offline/deploy_manifests.rs` demands of every rendering once the row exists:
/// reading Certificates and their CertificateRequests, and no patch on Certificates (annotation
/// mode leaves a kind without a Lua script alone).
#[test]
fn every_rendering_must_grant_what_a_certificate_check_reads() {
    let before = permissions(KINDS);
    let added: Vec<Permission> = permissions(table())
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    let said: Vec<(&str, &str, PermissionRule)> =
        added.iter().map(|p| (p.plural, p.verb, p.rule)).collect();
    let read = PermissionRule::Granted;
    assert_eq!(
        said,
        [
            ("certificates", "get", read),
            ("certificates", "list", read),
            ("certificates", "watch", read),
            ("certificaterequests", "get", read),
            ("certificaterequests", "list", read),
            ("certificaterequests", "watch", read),
            ("certificates", "patch", PermissionRule::Refused),
        ]
    );
    assert!(added.iter().all(|p| p.group == "cert-manager.io"));
}

/// What `tests/offline/check_targets.rs` demands of the UI extension's `checkTarget` table.
#[test]
fn the_extension_must_name_a_certificate_entry_s_target() {
    let targets = check_targets(table());
    assert_eq!(targets["certificate"], "certificates.cert-manager.io");
    assert_eq!(targets.len(), check_targets(KINDS).len() + 1);
}

/// The steps that are not derived fail their guards until done: without its line in
/// `check_kinds!` the row has no contract (`every_registered_kind_has_one_contract`), and the
/// CRD's schema lacks the entry field the CEL rule counts
/// (`the_cel_rule_counts_every_kind_field_and_only_those`).
#[test]
fn a_certificate_row_alone_fails_the_contract_and_schema_guards() {
    let uncontracted: Vec<&KindSpec> = table()
        .iter()
        .filter(|k| !IMPLEMENTED.contains(k))
        .collect();
    assert_eq!(uncontracted, [&CERTIFICATE]);

    let fields = crd::schema_entry_fields();
    let unfielded: Vec<&str> = entries_in(table())
        .filter(|e| !fields.iter().any(|f| f == e))
        .collect();
    assert_eq!(unfielded, ["certificate"]);
}
