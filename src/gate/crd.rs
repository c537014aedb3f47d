//! The `WaveGate` custom resource (`wavegate.dev/v1alpha1`), defined once in Rust: the CRD YAML
//! under `deploy/crd/` is generated from these types (`wavegate crd`), and `tests/offline/crd.rs` fails
//! when the committed file drifts from them.
//!
//! The schema is structural and validates what the API server can: each check sets exactly one
//! kind (CEL), names are unique (`listType: map`), `timeout` is a Go duration. What a schema
//! cannot say (e.g. a malformed JSONPath) becomes a Degraded verdict for that one check.

use crate::health::HealthStatus;
use crate::resource::registry;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// Each kind's entry is defined with the rest of its kind.
pub use super::entries::Entries;
pub use crate::kinds::Entry;
pub use crate::kinds::application::ApplicationCheck;
pub use crate::kinds::cnpg::{CnpgCheck, CnpgDatabaseCheck, CnpgDatabaseRoleCheck};
pub use crate::kinds::cockroach::CockroachClusterCheck;
pub use crate::kinds::generic::ResourceCheck;
pub use crate::kinds::service::ServiceCheck;

/// Checks that must all be Healthy before the next Argo CD sync wave may start.
///
/// Put the gate in the wave between the producers and the consumers; a gate in the last wave of
/// an application gates nothing, because Argo CD does not wait on the health of the last wave.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[kube(
    group = "wavegate.dev",
    version = "v1alpha1",
    kind = "WaveGate",
    namespaced,
    shortname = "wg",
    status = "WaveGateStatus",
    doc = "A readiness gate for Argo CD sync waves: Healthy when all its checks are.",
    printcolumn = r#"{"name":"Health","type":"string","jsonPath":".status.health.status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.health.message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WaveGateSpec {
    /// How long the gate may stay not Healthy before it turns Degraded, which fails the Argo CD
    /// sync with a message naming what is still not ready. A Go duration (`90s`, `10m`, `1h30m`).
    /// Counted from when the gate last stopped being Ready at its current generation (from its
    /// creation for a new gate). Without it the gate waits as long as Argo CD does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"))]
    pub timeout: Option<String>,
    /// The checks; the gate is Healthy when every one is.
    #[schemars(
        length(min = 1, max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub checks: Vec<GateCheck>,
}

/// One check: a name and exactly one kind with its parameters.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = exactly_one_entry)]
pub struct GateCheck {
    /// Unique within the gate; shown in messages and in `status.checks`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    )]
    pub name: String,
    /// Free text for people (dashboard, UI extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub label: Option<String>,
    // The kind it checks and its parameters: one optional field per kind (`gate::entries`).
    #[serde(flatten)]
    pub entries: Entries,
}

impl GateCheck {
    /// A check named `name` that sets `entry`.
    pub fn new(name: &str, entry: Entry) -> GateCheck {
        GateCheck {
            name: name.to_string(),
            label: None,
            entries: Entries(vec![entry]),
        }
    }
}

/// The CEL rule that a check sets exactly one entry, over the registry's entries: the API
/// server counts only what the rule names, so a kind missing here could be set beside another.
fn exactly_one_entry(schema: &mut schemars::Schema) {
    let entries: Vec<&str> = registry::entries().collect();
    schema.insert("x-kubernetes-validations".into(), one_entry_rule(&entries));
}

/// The `x-kubernetes-validations` that a check sets exactly one of `entries`.
pub(crate) fn one_entry_rule(entries: &[&str]) -> serde_json::Value {
    let has: Vec<String> = entries.iter().map(|e| format!("has(self.{e})")).collect();
    serde_json::json!([{
        "rule": format!("[{}].filter(x, x).size() == 1", has.join(", ")),
        "message": format!("each check must set exactly one of {}", entries.join(", ")),
    }])
}

/// The entry fields of a check in the generated schema (every property besides what each
/// check has: `name`, `label`), sorted.
#[cfg(test)]
pub(crate) fn schema_entry_fields() -> Vec<String> {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(WaveGate::crd()).unwrap();
    let properties = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/checks/items/properties")
        .and_then(serde_json::Value::as_object)
        .expect("the CRD has spec.checks[].properties");
    let mut fields: Vec<String> = properties
        .keys()
        .filter(|k| !["name", "label"].contains(&k.as_str()))
        .cloned()
        .collect();
    fields.sort_unstable();
    fields
}

/// What wavegate concluded, written through the status subresource.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveGateStatus {
    /// `metadata.generation` that `health` and `checks` judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The gate's Argo CD health: the worst of its checks, or Degraded once `timeout` passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<GateHealth>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub checks: Vec<CheckStatus>,
    /// `Ready` (True iff health is Healthy), for kstatus users: Flux, Helm 4, kapp.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Argo CD's `HealthStatus` shape.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
pub struct GateHealth {
    #[schemars(schema_with = "health_status_schema")]
    pub status: HealthStatus,
    #[serde(default)]
    pub message: String,
    /// Unix time (seconds) until which this verdict counts. wavegate confirms it well before
    /// then while it runs; Argo CD's health script treats a verdict past it as Progressing,
    /// so a stopped wavegate (or one that can no longer write) cannot release a wave with a
    /// verdict from before it stopped. Absent when `--status-validity` is 0.
    #[serde(
        default,
        rename = "validUntil",
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_until: Option<i64>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckStatus {
    pub name: String,
    #[schemars(schema_with = "health_status_schema")]
    pub status: HealthStatus,
    #[serde(default)]
    pub message: String,
    /// When `status` last changed.
    pub last_transition_time: Time,
}

fn health_status_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = HealthStatus::ALL.iter().map(|s| s.as_str()).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
}

/// The CustomResourceDefinition as YAML, as committed in `deploy/crd/wavegate.dev_wavegates.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    let yaml = serde_yaml::to_string(&WaveGate::crd())?;
    Ok(format!(
        "# Generated from src/gate/crd.rs by `wavegate crd`; do not edit.\n{yaml}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use serde_json::Value;

    /// The schema of one check, as the API server validates it.
    fn check_schema() -> Value {
        let crd = serde_json::to_value(WaveGate::crd()).unwrap();
        crd.pointer(
            "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/checks/items",
        )
        .expect("the CRD has spec.checks[]")
        .clone()
    }

    /// An entry field without a registry row (and so outside the CEL rule) would let a check
    /// set it beside another kind (the API server counts only what the rule names), and a
    /// registry row without its field (no `check_kinds!` line) would put a field the schema
    /// lacks into the rule, which the API server refuses.
    #[test]
    fn the_cel_rule_counts_every_kind_field_and_only_those() {
        let schema = check_schema();
        let fields = schema_entry_fields();
        let entries: Vec<&str> = registry::entries().collect();
        let mut kinds = entries.clone();
        kinds.sort_unstable();
        assert_eq!(
            fields, kinds,
            "the registry's entries against the schema's fields"
        );

        let validation = &schema["x-kubernetes-validations"][0];
        let rule = validation["rule"].as_str().unwrap();
        let counted: Vec<&str> = rule
            .split("has(self.")
            .skip(1)
            .map(|s| s.split(')').next().unwrap())
            .collect();
        assert_eq!(counted, entries, "{rule}");
        assert!(rule.ends_with(".filter(x, x).size() == 1"), "{rule}");
        let message = validation["message"].as_str().unwrap();
        assert!(message.ends_with(&entries.join(", ")), "{message}");
        assert!(entries.contains(&"cnpgDatabaseRole"));
    }

    /// A field read under another kind's name would judge the object by the wrong check (a
    /// DatabaseRole by the Database's rule) or under the wrong group-resource.
    #[test]
    fn every_entry_field_asks_for_its_registry_kind() {
        let mut all = serde_json::Map::new();
        for spec in registry::KINDS {
            let check: GateCheck = serde_json::from_value(serde_json::json!({
                "name": "c",
                (spec.entry): {"name": "forgejo", "namespace": "ddb"},
            }))
            .unwrap();
            let entries = check.entries.asks();
            assert_eq!(entries.len(), 1, "{}", spec.entry);
            let (field, entry) = entries[0];
            assert_eq!(field, spec.entry);
            let (target, judged) = entry.ask(field, "c", "gate-ns").unwrap();
            assert_eq!(target.resource, crate::resource::CheckKind::Dedicated(spec));
            assert_eq!(judged.resource(), target.resource, "{}", spec.entry);
            assert_eq!(
                (target.namespace.as_str(), target.name.as_str()),
                ("ddb", "forgejo")
            );
            all.insert(spec.entry.into(), serde_json::json!({"name": "forgejo"}));
        }
        all.insert(
            registry::GENERIC_ENTRY.into(),
            serde_json::json!({"name": "forgejo", "resource": "deployments.apps"}),
        );
        all.insert("name".into(), "c".into());
        let every: GateCheck = serde_json::from_value(Value::Object(all)).unwrap();
        // Read in the order the document has them.
        let mut fields: Vec<&str> = every.entries.asks().iter().map(|(f, _)| *f).collect();
        fields.sort_unstable();
        let mut entries: Vec<&str> = registry::entries().collect();
        entries.sort_unstable();
        assert_eq!(fields, entries);
    }

    /// The CRD makes each entry nullable and CEL counts a null field as absent, so the API
    /// server admits `service: null` beside the real entry (Helm's `toYaml` of an unset value).
    /// Refusing it would make the whole gate unreadable, and its wave wait for good.
    #[test]
    fn a_null_entry_beside_the_real_one_is_absent() {
        for spec in registry::KINDS {
            let other = registry::GENERIC_ENTRY;
            let check: GateCheck = serde_json::from_value(serde_json::json!({
                "name": "c",
                (spec.entry): null,
                (other): {"name": "forgejo", "resource": "deployments.apps"},
            }))
            .unwrap_or_else(|e| panic!("{}: null refused: {e}", spec.entry));
            let fields: Vec<&str> = check.entries.asks().iter().map(|(f, _)| *f).collect();
            assert_eq!(fields, [other], "{}", spec.entry);
        }
        let check: GateCheck = serde_json::from_value(serde_json::json!({
            "name": "c",
            "service": {"name": "web"},
            (registry::GENERIC_ENTRY): null,
        }))
        .unwrap();
        let fields: Vec<&str> = check.entries.asks().iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, ["service"]);
    }

    #[test]
    fn a_cnpg_database_role_entry_parses_into_its_own_field() {
        let spec: WaveGateSpec = serde_yaml::from_str(
            "checks:\n  - name: forgejo-role\n    cnpgDatabaseRole: \
             {name: forgejo, namespace: ddb, requireClusterReady: true}\n",
        )
        .unwrap();
        let check = &spec.checks[0];
        assert_eq!(
            check.entries,
            Entries(vec![Entry::CnpgDatabaseRole(CnpgDatabaseRoleCheck {
                name: "forgejo".into(),
                namespace: Some("ddb".into()),
                require_cluster_ready: Some(true),
            })])
        );
        // Written back as it was read (the controller's status echoes the spec's names).
        let back = serde_json::to_value(check).unwrap();
        assert_eq!(back["cnpgDatabaseRole"]["requireClusterReady"], true);
    }

    #[test]
    fn a_cnpg_database_role_entry_without_a_name_is_refused() {
        let err = serde_yaml::from_str::<WaveGateSpec>(
            "checks:\n  - name: forgejo-role\n    cnpgDatabaseRole: {namespace: ddb}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("name"), "{err}");
    }
}
