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

/// A release whose bundled scripts are not at hand.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("{0:?} is not an Argo CD release (X.Y.Z or vX.Y.Z)")]
    NotARelease(String),
    #[error(
        "no bundled health scripts of Argo CD {version} under {root} (releases there: {available})"
    )]
    Absent {
        version: String,
        root: PathBuf,
        available: String,
    },
    #[error(transparent)]
    Unreadable(#[from] BundledError),
}

impl Bundled {
    /// The scripts of Argo CD `version` (`3.5.1` or `v3.5.1`) under `root`: `<root>/v3.5.1/`.
    pub fn of_release(root: &Path, version: &str) -> Result<Bundled, ReleaseError> {
        let bare = version.strip_prefix('v').unwrap_or(version);
        let parts: Vec<&str> = bare.split('.').collect();
        let numeric =
            |p: &&str| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit());
        if parts.len() != 3 || !parts.iter().all(numeric) {
            return Err(ReleaseError::NotARelease(crate::health::printable(version)));
        }
        let dir = root.join(format!("v{bare}"));
        if !dir.is_dir() {
            let mut available: Vec<String> = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect();
            available.sort();
            return Err(ReleaseError::Absent {
                version: format!("v{bare}"),
                root: root.to_path_buf(),
                available: if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                },
            });
        }
        Ok(Bundled::load(&dir)?)
    }

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

    /// Whether the release ships a health script for `group_kind` (`group/Kind`, `Kind` for the
    /// core group): an exact folder or a wildcard one.
    pub fn has(&self, group_kind: &str) -> bool {
        self.lookup(group_kind).is_some()
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
#[derive(Debug, Default, Clone, PartialEq)]
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

    /// `<root>/v<X.Y.Z>/<group>/<Kind>/health.lua`, with a `_` wildcard folder.
    fn releases() -> PathBuf {
        let root = std::env::temp_dir().join(format!("wavegate-releases-{}", std::process::id()));
        for (release, gk) in [
            ("v3.5.1", "postgresql.cnpg.io/Cluster"),
            ("v3.6.1", "postgresql.cnpg.io/Database"),
            ("v3.6.1", "_.crossplane.io/_"),
        ] {
            let dir = root.join(release).join(gk);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("health.lua"), "return {status = 'Healthy'}").unwrap();
        }
        root
    }

    #[test]
    fn a_release_selects_its_own_folder_and_nothing_else() {
        let root = releases();
        let old = Bundled::of_release(&root, "3.5.1").unwrap();
        let new = Bundled::of_release(&root, "v3.6.1").unwrap();
        assert!(old.has("postgresql.cnpg.io/Cluster") && !old.has("postgresql.cnpg.io/Database"));
        assert!(new.has("postgresql.cnpg.io/Database") && !new.has("postgresql.cnpg.io/Cluster"));
        assert!(new.has("pkg.crossplane.io/Provider"), "the wildcard folder");
        let absent = Bundled::of_release(&root, "3.7.0").unwrap_err().to_string();
        assert!(
            absent.contains("v3.7.0") && absent.contains("v3.5.1, v3.6.1"),
            "{absent}"
        );
        for bad in [
            "../../etc",
            "3.5",
            "3.5.1/../..",
            "latest",
            "v3.5.1-rc1",
            "",
        ] {
            let e = Bundled::of_release(&root, bad).unwrap_err();
            assert!(matches!(e, ReleaseError::NotARelease(_)), "{bad}: {e}");
        }
        std::fs::remove_dir_all(root).unwrap();
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
