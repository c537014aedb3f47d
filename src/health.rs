//! Argo CD's health model: six statuses, a message, and worst-of aggregation.
//!
//! The JSON shape is exactly Argo CD's `HealthStatus` (`{"status":"Progressing","message":"…"}`)
//! so a verdict can be copied verbatim into a Lua health script's return value.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Argo CD's health codes (gitops-engine `pkg/health/health.go`).
///
/// During a sync Argo CD advances past a wave only when every resource in it is `Healthy`,
/// keeps waiting on `Progressing`, `Suspended`, `Missing` and `Unknown`, and fails the whole sync
/// on `Degraded` — so `Degraded` is reserved for definite, non-transient failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Status")]
pub enum HealthStatus {
    Healthy,
    Suspended,
    Progressing,
    Missing,
    Degraded,
    Unknown,
}

impl HealthStatus {
    pub const ALL: [HealthStatus; 6] = [
        HealthStatus::Healthy,
        HealthStatus::Suspended,
        HealthStatus::Progressing,
        HealthStatus::Missing,
        HealthStatus::Degraded,
        HealthStatus::Unknown,
    ];

    /// Position in gitops-engine's `healthOrder` (Healthy < Suspended < Progressing < Missing <
    /// Degraded < Unknown); `IsWorse` compares these indices.
    fn rank(self) -> u8 {
        match self {
            HealthStatus::Healthy => 0,
            HealthStatus::Suspended => 1,
            HealthStatus::Progressing => 2,
            HealthStatus::Missing => 3,
            HealthStatus::Degraded => 4,
            HealthStatus::Unknown => 5,
        }
    }

    /// The worst of `statuses` in Argo CD's order; Healthy when there are none.
    pub(crate) fn worst(statuses: impl IntoIterator<Item = HealthStatus>) -> HealthStatus {
        statuses.into_iter().fold(HealthStatus::Healthy, |acc, s| {
            if s.is_worse_than(acc) { s } else { acc }
        })
    }

    pub(crate) fn is_worse_than(self, other: HealthStatus) -> bool {
        self.rank() > other.rank()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "Healthy",
            HealthStatus::Suspended => "Suspended",
            HealthStatus::Progressing => "Progressing",
            HealthStatus::Missing => "Missing",
            HealthStatus::Degraded => "Degraded",
            HealthStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One judgement: a status and the sentence shown in the Argo CD UI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub status: HealthStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When an Argo CD health script judged the object: Argo CD's own status and message, as
    /// the script returned them (message under the no-echo rules), apart from wavegate's
    /// consequence above (a script's Degraded is Progressing until `--argocd-lua-grace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argo_status: Option<ArgoHealth>,
}

/// Argo CD's verdict on an object, as it would show it: what its health script
/// (`ExecuteHealthLua`) returned, or, on an error, gitops-engine's `GetResourceHealth` answer
/// (`Unknown` with the error's text). wavegate shows it as `argoStatus`, its message under the
/// no-echo rules (`crate::argocd_lua::ArgoHealth::shown`).
///
/// Present when an Argo CD health script judged the object (`judgedBy: argocd-lua:…`): Argo
/// CD's own status and message as the script returned them, apart from wavegate's verdict (a
/// script's Degraded is Progressing in the verdict until `--argocd-lua-grace` has passed). The
/// message is under the no-echo rules of docs/contracts.md: strings of the object outside its
/// status and identity are `<redacted>`, at most 1024 bytes shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArgoHealth {
    /// Argo CD's health code; `""` when the script returned no status.
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Verdict {
    pub fn new(status: HealthStatus, message: impl Into<String>) -> Self {
        Verdict {
            status,
            message: message.into(),
            argo_status: None,
        }
    }

    pub(crate) fn healthy(message: impl Into<String>) -> Self {
        Self::new(HealthStatus::Healthy, message)
    }

    pub(crate) fn progressing(message: impl Into<String>) -> Self {
        Self::new(HealthStatus::Progressing, message)
    }

    pub(crate) fn degraded(message: impl Into<String>) -> Self {
        Self::new(HealthStatus::Degraded, message)
    }

    pub(crate) fn missing(message: impl Into<String>) -> Self {
        Self::new(HealthStatus::Missing, message)
    }

    pub(crate) fn unknown(message: impl Into<String>) -> Self {
        Self::new(HealthStatus::Unknown, message)
    }

    pub(crate) fn suspended(message: impl Into<String>) -> Self {
        Self::new(HealthStatus::Suspended, message)
    }

    pub(crate) fn is_healthy(&self) -> bool {
        self.status == HealthStatus::Healthy
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.status)
        } else {
            write!(f, "{}: {}", self.status, self.message)
        }
    }
}

/// Characters that would act on a terminal or hide text instead of showing: controls
/// (escape sequences, carriage returns, newlines), bidi overrides and zero-width marks.
pub(crate) fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// `text` as it may be written to a terminal: every invisible character a space. Verdict
/// messages quote objects' own text (condition messages, CNPG's message, a WaveGate's stored
/// status), which whoever can write those objects controls.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if is_invisible(c) { ' ' } else { c })
        .collect()
}

/// [`printable`], keeping line breaks: for a verdict printed alone, whose message may be a
/// table (a CockroachDB cluster's pods).
pub(crate) fn printable_lines(text: &str) -> String {
    text.split('\n')
        .map(printable)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The worst of several verdicts, in Argo CD's order. The message leads with how many are
/// healthy and then lists every verdict that is not, so the UI names each blocker.
///
/// An empty list is `Unknown`: having nothing to judge is never evidence of health.
pub(crate) fn worst_of<'a>(verdicts: impl IntoIterator<Item = (&'a str, &'a Verdict)>) -> Verdict {
    let verdicts: Vec<_> = verdicts.into_iter().collect();
    if verdicts.is_empty() {
        return Verdict::unknown("nothing to check");
    }
    let worst = HealthStatus::worst(verdicts.iter().map(|(_, v)| v.status));
    let healthy = verdicts.iter().filter(|(_, v)| v.is_healthy()).count();
    let total = verdicts.len();
    if worst == HealthStatus::Healthy {
        return Verdict::healthy(format!("all {total} checks healthy"));
    }
    let blockers: Vec<String> = verdicts
        .iter()
        .filter(|(_, v)| !v.is_healthy())
        .map(|(name, v)| format!("{name}: {}", v.message))
        .collect();
    Verdict::new(
        worst,
        format!(
            "{healthy} of {total} checks healthy; {}",
            blockers.join("; ")
        ),
    )
}

/// What a check concludes from one snapshot of the cluster.
///
/// Some failures are definite only once they persist: CNPG retries a failed `CREATE DATABASE`
/// every 30 s, a selector can match nothing for a moment while pods are created, and CockroachDB
/// nodes see each other only after gossip settles. Such a check returns `Persistent`, and the
/// caller (which remembers since when) turns it into Progressing until a grace period has passed
/// and into Degraded after it — Degraded fails the Argo CD sync, so it must not fire early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A verdict that holds as is.
    Settled(Verdict),
    /// A failure that becomes Degraded once it has lasted the check's grace period.
    Persistent { message: String },
}

impl Finding {
    /// Resolve against how long this failure has been seen (`lasted`) and the allowed `grace`.
    /// The message does not count seconds, so a gate's status does not change (and is not
    /// rewritten) on every evaluation while the grace runs.
    pub fn resolve(self, lasted: std::time::Duration, grace: std::time::Duration) -> Verdict {
        match self {
            Finding::Settled(v) => v,
            Finding::Persistent { message } if lasted >= grace => Verdict::degraded(format!(
                "{message} (persisted longer than the {}s grace)",
                grace.as_secs()
            )),
            Finding::Persistent { message } => Verdict::progressing(format!(
                "{message} (Degraded if it persists for {}s)",
                grace.as_secs()
            )),
        }
    }
}

impl From<Verdict> for Finding {
    fn from(v: Verdict) -> Self {
        Finding::Settled(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_in_argo_cd_shape() {
        let v = Verdict::progressing("waiting");
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"status":"Progressing","message":"waiting"}"#
        );
    }

    #[test]
    fn unknown_is_worst_and_suspended_is_mildest_failure() {
        assert!(HealthStatus::Unknown.is_worse_than(HealthStatus::Degraded));
        assert!(HealthStatus::Degraded.is_worse_than(HealthStatus::Missing));
        assert!(HealthStatus::Missing.is_worse_than(HealthStatus::Progressing));
        assert!(HealthStatus::Progressing.is_worse_than(HealthStatus::Suspended));
        assert!(HealthStatus::Suspended.is_worse_than(HealthStatus::Healthy));
    }

    #[test]
    fn one_progressing_check_holds_the_aggregate() {
        let ok = Verdict::healthy("");
        let waiting = Verdict::progressing("ddb/forgejo: CNPG has not applied the database yet");
        let v = worst_of([("a", &ok), ("forgejo-db", &waiting), ("c", &ok)]);
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .starts_with("2 of 3 checks healthy; forgejo-db: ddb/forgejo")
        );
    }

    #[test]
    fn persistent_failure_is_progressing_until_grace_then_degraded() {
        use std::time::Duration;
        let f = Finding::Persistent {
            message: "applied=false".into(),
        };
        let early = f
            .clone()
            .resolve(Duration::from_secs(10), Duration::from_secs(90));
        assert_eq!(early.status, HealthStatus::Progressing);
        let late = f.resolve(Duration::from_secs(91), Duration::from_secs(90));
        assert_eq!(late.status, HealthStatus::Degraded);
        assert!(late.message.contains("applied=false"));
    }

    #[test]
    fn nothing_to_check_is_not_healthy() {
        assert_eq!(worst_of([]).status, HealthStatus::Unknown);
    }

    #[test]
    fn text_from_objects_cannot_drive_a_terminal() {
        let hostile = "ok\r\x1b[2Kgate: Healthy\x1b]52;c;aGk=\x07\u{202E}x\nnext";
        let shown = printable(hostile);
        assert!(!shown.chars().any(is_invisible), "{shown:?}");
        assert!(
            shown.starts_with("ok ") && shown.ends_with(" next"),
            "{shown:?}"
        );
        let kept = printable_lines(hostile);
        assert_eq!(kept.lines().count(), 2, "{kept:?}");
        assert!(
            !kept.replace('\n', "").chars().any(is_invisible),
            "{kept:?}"
        );
    }
}
