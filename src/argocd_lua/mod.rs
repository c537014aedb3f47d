//! Argo CD's Lua health scripts, run by wavegate: the same script Argo CD would pick for a
//! kind, in the same sandbox, with the same result.
//!
//! ```text
//! argocd-cm (live) ─┐
//!                   ├─ Scripts::lookup(group, Kind) ─ Engine::run(script, obj) ─ Outcome
//! bundled dir ──────┘
//! ```
//!
//! [`scripts`] knows where a kind's script comes from (argo-cd `util/lua/lua.go`
//! `GetHealthScript`), [`engine`] how it runs (`ExecuteHealthLua`). The checks turn an
//! [`Outcome`] into a [`Verdict`](crate::health::Verdict) with [`judge`].

pub mod argocd_cm;
pub mod echo;
mod engine;
mod scripts;

pub(crate) use engine::clock_reads;
pub use engine::{Engine, Libraries, Limits, Outcome};
pub use scripts::{Bundled, Customizations, Origin, Script, Scripts};

/// Where the image keeps each Argo CD release's bundled health scripts (`--argocd-scripts-root`):
/// `<root>/v<X.Y.Z>/<group>/<Kind>/health.lua`, copied from the argo-cd Go module unmodified
/// when the image is built (Dockerfile, stage `argocd-scripts`).
pub const SCRIPTS_ROOT: &str = "/usr/share/wavegate/argocd";

pub use crate::health::ArgoHealth;
use crate::health::{HealthStatus, Verdict};
use serde_json::Value;

/// Why a script gave no health.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("{0}")]
    Compile(String),
    #[error("{0}")]
    Runtime(String),
    /// An instruction, memory or time bound stopped it.
    #[error("{0}")]
    Bound(String),
    #[error("the Lua sandbox could not be built: {0}")]
    Sandbox(String),
}

/// gitops-engine's health codes (`isValidHealthStatusCode`).
pub(crate) fn parse_status(s: &str) -> Option<HealthStatus> {
    HealthStatus::ALL.into_iter().find(|h| h.as_str() == s)
}

impl ArgoHealth {
    pub fn of(result: &Result<Outcome, ScriptError>) -> ArgoHealth {
        let (status, message) = match result {
            Ok(Outcome::Health { status, message }) => (status.as_str(), message.clone()),
            Ok(Outcome::Empty) => ("", String::new()),
            Ok(Outcome::InvalidStatus) => (
                "Unknown",
                "Lua returned an invalid health status".to_string(),
            ),
            Err(e) => ("Unknown", e.to_string()),
        };
        ArgoHealth {
            status: status.to_string(),
            message,
        }
    }

    /// [`ArgoHealth::of`] as wavegate shows it: the message (or error) under the no-echo rules
    /// of [`echo`] for a run on `object`.
    pub fn shown(result: &Result<Outcome, ScriptError>, object: &Value) -> ArgoHealth {
        let ArgoHealth { status, message } = ArgoHealth::of(result);
        ArgoHealth {
            status,
            message: echo::shown(&message, object),
        }
    }
}

/// wavegate's verdict from a script's run on `object`, which `id` names. A script that returns
/// no status, an invalid one, or fails is never Healthy: Unknown, with the reason. Whatever the
/// script said (message or error) is shown under the no-echo rules of [`echo`]; Argo CD's own
/// status and message are kept apart as `argoStatus`.
pub(crate) fn judge(
    id: &str,
    script: &Script,
    result: &Result<Outcome, ScriptError>,
    object: &Value,
) -> Verdict {
    let by = script.judged_by();
    let mut verdict = match result {
        Ok(Outcome::Health { status, message }) => {
            let message = if message.is_empty() {
                format!("{id}: {by} says {status}")
            } else {
                format!("{id}: {}", echo::shown(message, object))
            };
            Verdict::new(*status, message)
        }
        Ok(Outcome::Empty) => Verdict::unknown(format!("{id}: {by} returned no health status")),
        Ok(Outcome::InvalidStatus) => {
            Verdict::unknown(format!("{id}: {by} returned an invalid health status"))
        }
        Err(e) => Verdict::unknown(format!(
            "{id}: {by} failed: {}",
            echo::shown(&e.to_string(), object)
        )),
    };
    verdict.argo_status = Some(ArgoHealth::shown(result, object));
    verdict
}

/// The `group/Kind` of an object (`Kind` alone for the core group), as Argo CD keys scripts.
pub fn group_kind(object: &Value) -> Option<(String, String)> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let group = match api_version.rsplit_once('/') {
        Some((group, _)) => group,
        None => "",
    };
    Some((group.to_string(), kind.to_string()))
}

/// The engine and the scripts a running wavegate judges with; the argocd-cm part is replaced
/// whenever the ConfigMap changes.
#[derive(Default)]
pub struct LuaHealth {
    engine: Engine,
    scripts: std::sync::RwLock<Scripts>,
    /// Moved before and after argocd-cm's scripts are replaced: a verdict judged by a script
    /// is kept only while this stays (see [`LuaHealth::generation`]).
    generation: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for LuaHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LuaHealth")
            .field("compiled_scripts", &self.engine.compiled_scripts())
            .finish_non_exhaustive()
    }
}

impl LuaHealth {
    pub fn new(bundled: Bundled) -> LuaHealth {
        LuaHealth {
            engine: Engine::default(),
            scripts: std::sync::RwLock::new(Scripts {
                custom: Customizations::default(),
                bundled: std::sync::Arc::new(bundled),
            }),
            generation: Default::default(),
        }
    }

    /// Take the health customizations of argocd-cm's `data` (`None`: the ConfigMap is gone).
    pub fn set_argocd_cm(&self, data: Option<&std::collections::BTreeMap<String, String>>) {
        let custom = data.map(Customizations::from_data).unwrap_or_default();
        for problem in &custom.problems {
            tracing::warn!("argocd-cm: {problem}");
        }
        // The same scripts again (any other key of argocd-cm edited, a relist of its watch):
        // no new generation, which would let every kept verdict, row and answer go.
        let unchanged = self
            .scripts
            .read()
            .is_ok_and(|scripts| scripts.custom == custom);
        if unchanged {
            return;
        }
        use std::sync::atomic::Ordering::AcqRel;
        self.generation.fetch_add(1, AcqRel);
        if let Ok(mut scripts) = self.scripts.write() {
            scripts.custom = custom;
        }
        self.generation.fetch_add(1, AcqRel);
    }

    /// Which scripts judge: equal generations, taken before and after a judgement, mean the
    /// same scripts throughout (a generation taken while they were replaced equals no later
    /// one).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The script Argo CD would run for `group`/`kind`.
    pub fn script_for(&self, group: &str, kind: &str) -> Option<Script> {
        self.scripts.read().ok()?.lookup(group, kind)
    }

    /// Run the kind's script on `object`, when there is one.
    pub(crate) fn judge(&self, id: &str, object: &Value) -> Option<(Script, Verdict)> {
        let (group, kind) = group_kind(object)?;
        let script = self.script_for(&group, &kind)?;
        let result = self.engine.run(&script.source, script.libraries, object);
        let verdict = judge(id, &script, &result, object);
        Some((script, verdict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// argocd-cm written again with the same scripts (another key edited, a relist) is no new
    /// generation: kept verdicts and answers stay. Other scripts are.
    #[test]
    fn the_same_scripts_again_are_no_new_generation() {
        let lua = LuaHealth::default();
        let data = |script: &str| {
            std::collections::BTreeMap::from([
                (
                    "resource.customizations.health.example.com_Widget".to_string(),
                    script.to_string(),
                ),
                ("url".to_string(), "https://argocd.example.com".to_string()),
            ])
        };
        lua.set_argocd_cm(Some(&data("return {status = \"Healthy\"}")));
        let first = lua.generation();
        let mut again = data("return {status = \"Healthy\"}");
        again.insert("url".into(), "https://cd.example.com".into());
        lua.set_argocd_cm(Some(&again));
        assert_eq!(lua.generation(), first);
        lua.set_argocd_cm(Some(&data("return {status = \"Degraded\"}")));
        assert_ne!(lua.generation(), first);
        lua.set_argocd_cm(None);
        assert!(lua.script_for("example.com", "Widget").is_none());
    }

    fn lua_with(script: &str) -> LuaHealth {
        let lua = LuaHealth::default();
        let data = [(
            "resource.customizations.health.example.com_Widget".to_string(),
            script.to_string(),
        )];
        lua.set_argocd_cm(Some(&data.into_iter().collect()));
        lua
    }

    fn widget() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    }

    #[test]
    fn a_script_that_fails_or_says_nothing_is_unknown_never_healthy() {
        for script in [
            "error('boom')",
            "return {}",
            "return {status = 'Fine'}",
            "return 7",
        ] {
            let (_, v) = lua_with(script)
                .judge("widgets.example.com cicd/w", &widget())
                .unwrap();
            assert_eq!(v.status, HealthStatus::Unknown, "{script}: {v}");
            assert!(v.message.contains("argocd-lua:example.com/Widget"), "{v}");
        }
    }

    #[test]
    fn the_scripts_status_and_message_are_kept() {
        let lua =
            lua_with("return {status = 'Suspended', message = 'paused by ' .. obj.metadata.name}");
        let (script, v) = lua.judge("widgets.example.com cicd/w", &widget()).unwrap();
        assert_eq!(script.origin, Origin::ArgocdCm);
        assert_eq!(v.status, HealthStatus::Suspended);
        assert_eq!(v.message, "widgets.example.com cicd/w: paused by w");
        let argo = v.argo_status.expect("argoStatus");
        assert_eq!(
            (argo.status.as_str(), argo.message.as_str()),
            ("Suspended", "paused by w")
        );
    }

    /// A hostile script that echoes the object's spec (an inline password, an env value, the
    /// last-applied annotation) in its message or its error, or returns a huge message: the
    /// verdict and `argoStatus` show neither the values nor more than `echo::MAX_SHOWN` bytes.
    #[test]
    fn a_scripts_message_and_error_are_under_the_no_echo_rules() {
        let object = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration":
                    "{\"spec\":{\"password\":\"pa55w0rd-xyz\"}}"}},
            "spec": {"password": "pa55w0rd-xyz",
                     "env": [{"name": "TOKEN", "value": "ghp_0123456789"}]},
            "status": {"phase": "Degraded-ish"}
        });
        let secrets = ["pa55w0rd-xyz", "ghp_0123456789"];
        for script in [
            "return {status = 'Degraded', message = obj.spec.password .. ' ' \
             .. obj.spec.env[1].value .. ' ' \
             .. obj.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'] \
             .. ' in ' .. obj.status.phase}",
            "error('leaking ' .. obj.spec.password .. ' and ' .. obj.spec.env[1].value)",
            "local s = obj.spec.password for i = 1, 16 do s = s .. s end \
             return {status = 'Progressing', message = s}",
        ] {
            let (_, v) = lua_with(script)
                .judge("widgets.example.com cicd/w", &object)
                .unwrap();
            let argo = v.argo_status.clone().expect("argoStatus");
            for shown in [&v.message, &argo.message] {
                for secret in secrets {
                    assert!(!shown.contains(secret), "{script}: {shown}");
                }
                assert!(shown.len() <= echo::MAX_SHOWN + 200, "{}", shown.len());
                assert!(shown.contains(echo::REDACTED), "{shown}");
            }
            assert!(!v.message.contains("\"spec\""), "{v}");
        }
        // What the controller reports in status is what scripts are for, and stays.
        let (_, v) = lua_with("return {status = 'Progressing', message = obj.status.phase}")
            .judge("widgets.example.com cicd/w", &object)
            .unwrap();
        assert_eq!(v.message, "widgets.example.com cicd/w: Degraded-ish");
    }

    #[test]
    fn a_removed_argocd_cm_leaves_no_script_behind() {
        let lua = lua_with("return {status = 'Healthy'}");
        lua.set_argocd_cm(None);
        assert!(lua.judge("w", &widget()).is_none());
    }
}
