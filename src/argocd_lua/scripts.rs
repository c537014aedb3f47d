//! Where a kind's health script comes from, in argo-cd `util/lua/lua.go` `GetHealthScript`'s
//! order: the argocd-cm's `group/Kind` key, then an argocd-cm wildcard key, then the release's
//! bundled `resource_customizations/<group>/<Kind>/health.lua`, then a bundled wildcard folder
//! (`_` standing for `*`, first in sorted order).

use super::Libraries;
use crate::glob::Glob;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a script was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    ArgocdCm,
    Bundled,
}

/// A script chosen for a kind.
#[derive(Debug, Clone)]
pub struct Script {
    pub source: Arc<str>,
    pub libraries: Libraries,
    pub origin: Origin,
    /// The key it was found under (`group/Kind`, or a wildcard pattern).
    pub key: String,
}

impl Script {
    /// How the waves view and `judgedBy` name it.
    pub fn judged_by(&self) -> String {
        format!("argocd-lua:{}", self.key)
    }
}

/// A release's bundled scripts: a `resource_customizations` folder, read once.
#[derive(Debug, Default)]
pub struct Bundled {
    exact: BTreeMap<String, Arc<str>>,
    /// Wildcard folders in sorted order, as `getGlobHealthScriptPaths` sorts them.
    wildcards: Vec<(String, Glob, Arc<str>)>,
}

/// A bundled folder that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading Argo CD's bundled health scripts at {path}: {source}")]
pub struct BundledError {
    path: PathBuf,
    source: std::io::Error,
}

impl Bundled {
    /// Read `<dir>/<group>/<Kind>/health.lua` (the argo-cd module's `resource_customizations`).
    pub fn load(dir: &Path) -> Result<Bundled, BundledError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BundledError { path, source }
        };
        let mut bundled = Bundled::default();
        let mut groups: Vec<_> = std::fs::read_dir(dir)
            .map_err(err(dir))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        groups.sort();
        for group in groups {
            let mut kinds: Vec<_> = std::fs::read_dir(&group)
                .map_err(err(&group))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect();
            kinds.sort();
            for kind in kinds {
                let script = kind.join("health.lua");
                if !script.is_file() {
                    continue;
                }
                let source: Arc<str> = std::fs::read_to_string(&script)
                    .map_err(err(&script))?
                    .into();
                let (Some(g), Some(k)) = (name(&group), name(&kind)) else {
                    continue;
                };
                let key = format!("{g}/{k}");
                if key.contains('_') {
                    let glob = Glob::new(&key.replace('_', "*"));
                    bundled.wildcards.push((key, glob, source));
                } else {
                    bundled.exact.insert(key, source);
                }
            }
        }
        bundled.wildcards.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(bundled)
    }

    /// How many scripts the folder holds.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every script, by key.
    pub fn scripts(&self) -> impl Iterator<Item = (&str, &Arc<str>)> {
        self.exact
            .iter()
            .map(|(k, s)| (k.as_str(), s))
            .chain(self.wildcards.iter().map(|(k, _, s)| (k.as_str(), s)))
    }

    fn lookup(&self, key: &str) -> Option<Script> {
        let (key, source) = match self.exact.get_key_value(key) {
            Some((k, s)) => (k.clone(), s.clone()),
            None => self
                .wildcards
                .iter()
                .find(|(_, glob, _)| glob.matches(key))
                .map(|(k, _, s)| (k.clone(), s.clone()))?,
        };
        Some(Script {
            source,
            libraries: Libraries::Open,
            origin: Origin::Bundled,
            key,
        })
    }
}

fn name(p: &Path) -> Option<&str> {
    p.file_name().and_then(|n| n.to_str())
}

/// The health customizations of an `argocd-cm`'s `data`.
#[derive(Debug, Default, Clone)]
pub struct Customizations {
    /// By override key (`group/Kind`, `Kind`, or a wildcard pattern).
    health: BTreeMap<String, (Arc<str>, Libraries)>,
    /// Keys Argo CD would refuse, with the reason.
    pub problems: Vec<String>,
}

/// A `resource.customizations` (legacy key) entry, as argo-cd's `rawResourceOverride`.
#[derive(Deserialize)]
struct LegacyOverride {
    #[serde(rename = "health.lua", default)]
    health: String,
    #[serde(rename = "health.lua.useOpenLibs", default)]
    use_open_libs: bool,
}

impl Customizations {
    /// Read as argo-cd `util/settings/settings.go` `GetResourceOverrides` does: the legacy
    /// `resource.customizations` YAML first, then each `resource.customizations.<type>.<group_Kind>`
    /// key over it (`convertToOverrideKey`: `group_Kind` → `group/Kind`, `all` → `*/*`).
    pub fn from_data(data: &BTreeMap<String, String>) -> Customizations {
        let mut health: BTreeMap<String, (String, bool)> = BTreeMap::new();
        let mut problems = Vec::new();
        if let Some(legacy) = data
            .get("resource.customizations")
            .filter(|v| !v.is_empty())
        {
            match serde_yaml::from_str::<BTreeMap<String, LegacyOverride>>(legacy) {
                Ok(entries) => {
                    for (key, o) in entries {
                        health.insert(key, (o.health, o.use_open_libs));
                    }
                }
                Err(e) => problems.push(format!("resource.customizations is not valid: {e}")),
            }
        }
        for (key, value) in data {
            let Some(rest) = key.strip_prefix("resource.customizations.") else {
                continue;
            };
            let Some((kind_of, group_kind)) = rest.split_once('.') else {
                continue;
            };
            let override_key = match group_kind.split('_').collect::<Vec<_>>().as_slice() {
                ["all"] => "*/*".to_string(),
                [kind] if !kind.is_empty() => kind.to_string(),
                [group, kind] => format!("{group}/{kind}"),
                _ => {
                    problems.push(format!(
                        "{key}: group kind should be in format <group>_<Kind> or <Kind>"
                    ));
                    continue;
                }
            };
            match kind_of {
                "health" => health.entry(override_key).or_default().0 = value.clone(),
                "useOpenLibs" => match value.trim().parse::<bool>() {
                    Ok(open) => health.entry(override_key).or_default().1 = open,
                    Err(_) => problems.push(format!("{key}: {value:?} is not true or false")),
                },
                _ => {}
            }
        }
        let health = health
            .into_iter()
            .filter(|(_, (script, _))| !script.is_empty())
            .map(|(k, (script, open))| {
                let libraries = if open {
                    Libraries::Open
                } else {
                    Libraries::Argocd
                };
                (k, (Arc::from(script), libraries))
            })
            .collect();
        Customizations { health, problems }
    }

    pub fn len(&self) -> usize {
        self.health.len()
    }

    pub fn is_empty(&self) -> bool {
        self.health.is_empty()
    }

    fn lookup(&self, key: &str) -> Option<Script> {
        let found = self.health.get_key_value(key).or_else(|| {
            // `getWildcardHealthOverrideLua`: Argo CD takes the first of a Go map, so which of
            // several matching wildcards wins is unspecified there; here it is the first in
            // sorted order.
            self.health
                .iter()
                .find(|(pattern, _)| Glob::new(pattern).matches(key))
        })?;
        let (key, (source, libraries)) = found;
        Some(Script {
            source: source.clone(),
            libraries: *libraries,
            origin: Origin::ArgocdCm,
            key: key.clone(),
        })
    }
}

/// Every script wavegate may run: the live argocd-cm's and the release's bundled ones.
#[derive(Debug, Default)]
pub struct Scripts {
    pub custom: Customizations,
    pub bundled: Arc<Bundled>,
}

impl Scripts {
    /// The script Argo CD would run for `group`/`kind`, if any.
    pub fn lookup(&self, group: &str, kind: &str) -> Option<Script> {
        let key = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{group}/{kind}")
        };
        self.custom
            .lookup(&key)
            .or_else(|| self.bundled.lookup(&key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn split_keys_override_the_legacy_key() {
        let c = Customizations::from_data(&data(&[
            (
                "resource.customizations",
                "cert-manager.io/Certificate:\n  health.lua: legacy\n  health.lua.useOpenLibs: true\nexample.com/Old:\n  health.lua: old\n",
            ),
            (
                "resource.customizations.health.cert-manager.io_Certificate",
                "split",
            ),
            ("resource.customizations.health.Service", "svc"),
            ("resource.customizations.health.*.example.io_Thing*", "wild"),
        ]));
        let s = Scripts {
            custom: c,
            bundled: Arc::default(),
        };
        let cert = s.lookup("cert-manager.io", "Certificate").unwrap();
        assert_eq!((&*cert.source, cert.libraries), ("split", Libraries::Open));
        assert_eq!(&*s.lookup("example.com", "Old").unwrap().source, "old");
        assert_eq!(&*s.lookup("", "Service").unwrap().source, "svc");
        let wild = s.lookup("a.example.io", "ThingSet").unwrap();
        assert_eq!(wild.judged_by(), "argocd-lua:*.example.io/Thing*");
        assert!(s.lookup("apps", "Deployment").is_none());
    }

    #[test]
    fn a_malformed_key_is_a_problem_not_a_script() {
        let c = Customizations::from_data(&data(&[
            ("resource.customizations.health.a_b_c", "x"),
            ("resource.customizations.useOpenLibs.a_B", "maybe"),
        ]));
        assert!(c.is_empty());
        assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
    }
}
