//! The question each check entry of a WaveGate asks, under the policy of what a gate may check.

use super::crd::GateCheck;
use crate::ask::Ask;
use crate::health::Verdict;
use crate::policy::CheckPolicy;
use crate::resource::InputError;
use crate::resource::registry;

/// [`ask_under`] the strict default policy.
#[cfg(test)]
pub(crate) fn ask_of(check: &GateCheck, gate_namespace: &str) -> Result<Ask, InputError> {
    ask_under(check, gate_namespace, &CheckPolicy::default())
}

/// The question a check entry asks, or why it cannot be asked: a malformed name or JSONPath the
/// schema could not catch, or a namespace or kind `policy` refuses (a tenant who may create a
/// gate must not read other namespaces or Secrets through it). `gate_namespace` fills an
/// omitted `namespace`.
pub(crate) fn ask_under(
    check: &GateCheck,
    gate_namespace: &str,
    policy: &CheckPolicy,
) -> Result<Ask, InputError> {
    let ask = ask_unchecked(check, gate_namespace)?;
    policy.admit_gate_check(gate_namespace, &ask)?;
    Ok(ask)
}

/// The question a check entry asks, before any policy.
fn ask_unchecked(check: &GateCheck, gate_namespace: &str) -> Result<Ask, InputError> {
    match check.entries.asks()[..] {
        [(field, entry)] => {
            let (target, judged) = entry.ask(field, &check.name, gate_namespace)?;
            Ok(Ask::new(target, judged))
        }
        // The CRD's CEL rule rejects these; an API server without CEL validation might not.
        _ => Err(InputError::Parameter {
            name: check.name.clone(),
            reason: format!(
                "set exactly one of {}",
                registry::entries().collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}

/// What a check entry points at, as the HTTP API shows it: `services cicd/forgejo`.
pub(crate) fn target_of(check: &GateCheck, gate_namespace: &str) -> String {
    // Shown also for a check the policy refuses, so the reader sees what it pointed at.
    match ask_unchecked(check, gate_namespace) {
        Ok(ask) => ask.to_string(),
        Err(_) => String::new(),
    }
}

/// Each check's verdict: evaluated where the entry is valid, Degraded where it is not (a gate
/// whose check can never be asked would otherwise wait until Argo CD's own timeout).
pub(crate) fn invalid_check(e: &InputError) -> Verdict {
    Verdict::degraded(format!("invalid check: {e}"))
}
