//! Which kinds Argo CD has a health check for: its built-in ones, and those an `argocd-cm`
//! adds. A kind without one is "done" the moment it is applied (gitops-engine
//! `sync_context.go`: a resource with no health check does not hold its wave), so nothing in
//! its wave waits for it to be ready.

use super::manifest::{InputError, expands, parse_within};
use super::yaml::{Budget, Refusal};
use crate::glob::Glob;
use serde_json::Value;
use std::collections::BTreeSet;

/// Kinds, among those the rules ask about, for which Argo CD 3.2 ships a health check
/// (argo-cd v3.2.11 `resource_customizations/<group>/<Kind>/health.lua`; `tests/offline/lint.rs`
/// re-reads that folder from the Go module cache). Not shipped: `postgresql.cnpg.io/Database`
/// (3.6 adds one), `crdb.cockroachlabs.com/CrdbCluster`, `argoproj.io/Application` (removed
/// in Argo CD 1.8) and `wavegate.dev/WaveGate`.
pub const BUILT_IN: &[&str] = &["postgresql.cnpg.io/Cluster"];

/// Health customizations of an argocd-cm.
#[derive(Debug, Clone, Default)]
pub struct ArgocdCm {
    /// `group/Kind` keys (`Kind` for the core group), possibly with wildcards.
    health: Vec<Glob>,
}

impl ArgocdCm {
    /// Read an argocd-cm ConfigMap (a manifest holding it, e.g. a Kustomize patch).
    ///
    /// Keys as argo-cd `util/settings/settings.go` reads them: `resource.customizations.health.
    /// <group>_<Kind>` (`convertToOverrideKey`: `group_Kind` → `group/Kind`, a bare `Kind` for
    /// the core group, `all` → `*/*`), and the older single `resource.customizations` key whose
    /// YAML maps `group/Kind` to `{health.lua: …}`.
    pub fn parse(file: &str, text: &str) -> Result<ArgocdCm, InputError> {
        let mut objects = Vec::new();
        let mut budget = Budget::default();
        parse_within(file, text, true, &mut budget, &mut objects)?;
        let cm = objects
            .iter()
            .find(|o| o.is("", "ConfigMap"))
            .ok_or_else(|| InputError {
                file: file.to_string(),
                line: 1,
                message: "no ConfigMap in the --argocd-cm file".to_string(),
            })?;
        let mut health = BTreeSet::new();
        let data = cm.body.get("data").and_then(Value::as_object);
        for (key, value) in data.into_iter().flatten() {
            if let Some(gk) = key.strip_prefix("resource.customizations.health.") {
                let non_empty = value.as_str().is_some_and(|v| !v.trim().is_empty());
                if !non_empty {
                    continue;
                }
                let gk = match gk.split_once('_') {
                    _ if gk == "all" => "*/*".to_string(),
                    Some((g, k)) => format!("{g}/{k}"),
                    None => gk.to_string(),
                };
                health.insert(gk);
            } else if key == "resource.customizations"
                && let Some(text) = value.as_str()
            {
                let legacy = match budget.document(text) {
                    Ok(legacy) => legacy,
                    Err(Refusal::Expands) => return Err(expands(file, cm.line)),
                    Err(Refusal::Invalid(e)) => {
                        return Err(InputError {
                            file: file.to_string(),
                            line: cm.line,
                            message: format!("argocd-cm resource.customizations is not YAML: {e}"),
                        });
                    }
                };
                for (gk, o) in legacy.as_object().into_iter().flatten() {
                    if o.get("health.lua").and_then(Value::as_str).is_some() {
                        health.insert(gk.clone());
                    }
                }
            }
        }
        Ok(ArgocdCm {
            health: health.iter().map(|k| Glob::new(k)).collect(),
        })
    }

    /// Whether this argocd-cm customizes the health of `group_kind` (`group/Kind`), wildcards
    /// included (argo-cd `util/lua/lua.go` `getWildcardHealthOverrideLua`: [`Glob`] on
    /// `group/Kind`).
    pub fn has_health(&self, group_kind: &str) -> bool {
        self.health.iter().any(|k| k.matches(group_kind))
    }
}

/// Whether Argo CD judges `group_kind`'s health: from the argocd-cm, or by a script of its
/// release — the given release's bundled scripts (`--argocd-health-scripts`, exact or wildcard
/// folder) when known, else [`BUILT_IN`].
pub fn has_health(
    cm: Option<&ArgocdCm>,
    bundled: Option<&crate::argocd_lua::Bundled>,
    group_kind: &str,
) -> bool {
    let shipped = match bundled {
        Some(bundled) => bundled.has(group_kind),
        None => BUILT_IN.contains(&group_kind),
    };
    shipped || cm.is_some_and(|cm| cm.has_health(group_kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keys_legacy_key_and_wildcards_are_read() {
        let cm = ArgocdCm::parse(
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: argocd-cm}\ndata:\n  resource.customizations.health.wavegate.dev_WaveGate: |\n    return {}\n  resource.customizations.health.Service: 'x'\n  resource.customizations.health.*.cnpg.io_Data*: 'x'\n  resource.customizations: |\n    argoproj.io/Application:\n      health.lua: 'x'\n",
        )
        .unwrap();
        assert!(cm.has_health("wavegate.dev/WaveGate"));
        assert!(cm.has_health("Service"));
        assert!(cm.has_health("postgresql.cnpg.io/Database"));
        assert!(cm.has_health("argoproj.io/Application"));
        assert!(!cm.has_health("crdb.cockroachlabs.com/CrdbCluster"));
    }

    #[test]
    fn yaml_aliases_in_an_argocd_cm_cannot_expand() {
        let laughs = crate::lint::manifest::tests::billion_laughs(3, 100);
        let e = ArgocdCm::parse("cm.yaml", &laughs).unwrap_err();
        assert!(e.message.contains("aliases"), "{e}");
        // The legacy key holds YAML of its own.
        let inner = laughs.replace('\n', "\n    ");
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: argocd-cm}}\ndata:\n  resource.customizations: |\n    {inner}\n"
        );
        let e = ArgocdCm::parse("cm.yaml", &cm).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("cm.yaml", 1), "{e}");
        assert!(e.message.contains("aliases"), "{e}");
    }

    #[test]
    fn a_file_without_a_configmap_is_bad_input() {
        assert!(
            ArgocdCm::parse(
                "cm.yaml",
                "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n"
            )
            .is_err()
        );
    }
}
