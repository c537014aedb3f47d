//! A bare Pod listed in an Application's waves, judged from the compact view the cache keeps
//! of every pod (phase, the Ready condition, restart policy, deletion) — never from the whole
//! object, whose environment values are not wavegate's to hold.
//!
//! The statuses mean what Argo CD's own Pod health means (gitops-engine
//! `pkg/health/health_pod.go` `getCorev1PodHealth`): Pending → Progressing; Succeeded →
//! Healthy; Failed → Degraded; Running with restart policy Always → Healthy once Ready
//! (`podutils.IsPodReady`), Progressing before; Running with OnFailure or Never → Progressing
//! (it is done when it succeeds); any other phase → Unknown. Argo CD also calls Degraded a
//! container waiting in `*BackOff`/`Err*` or a not-ready pod whose container terminated once;
//! the compact view keeps no container statuses, so those read as Progressing here, which
//! holds the wave the same way without claiming a failure wavegate did not see.

use crate::health::Verdict;
use crate::views::PodView;

pub fn check(namespace: &str, name: &str, pod: Option<&PodView>) -> Verdict {
    let Some(pod) = pod else {
        return Verdict::missing(format!("Pod {namespace}/{name} does not exist"));
    };
    let what = format!("Pod {namespace}/{}", pod.name);
    if pod.deleting {
        // gitops-engine judges any object being deleted "Progressing: Pending deletion".
        return Verdict::progressing(format!("{what} is being deleted"));
    }
    let ready = pod.ready.as_ref();
    match pod.phase.as_deref() {
        Some("Pending") => Verdict::progressing(format!("{what} is Pending")),
        Some("Succeeded") => Verdict::healthy(format!("{what} has Succeeded")),
        Some("Failed") => Verdict::degraded(format!("{what} has Failed")),
        Some("Running") if !pod.restarts_always => Verdict::progressing(format!(
            "{what} is Running; with restart policy OnFailure or Never it is done when it \
             Succeeds"
        )),
        Some("Running") => match ready {
            Some(c) if &*c.status == "True" => Verdict::healthy(format!("{what} is Ready")),
            Some(c) => Verdict::progressing(format!(
                "{what} is Running but not Ready (Ready={}{})",
                c.status,
                c.reason
                    .as_deref()
                    .map(|r| format!(", reason {r}"))
                    .unwrap_or_default()
            )),
            None => Verdict::progressing(format!(
                "{what} is Running but reports no Ready condition yet"
            )),
        },
        Some(other) => Verdict::unknown(format!("{what} is in phase {other}")),
        None => Verdict::unknown(format!("{what} reports no phase yet")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(restart: &str, phase: &str, ready: Option<&str>) -> PodView {
        let mut status = json!({"phase": phase});
        if let Some(r) = ready {
            status["conditions"] =
                json!([{"type": "Ready", "status": r, "reason": "ContainersNotReady"}]);
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "bare", "namespace": "cicd"},
            "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "x"}]},
            "status": status
        }))
        .unwrap();
        PodView::from(&pod)
    }

    #[test]
    fn a_bare_pod_is_judged_as_argo_cd_judges_pods() {
        let s = |p: &PodView| check("cicd", "bare", Some(p)).status;
        use HealthStatus::*;
        assert_eq!(s(&pod("Always", "Running", Some("True"))), Healthy);
        assert_eq!(s(&pod("Always", "Running", Some("False"))), Progressing);
        assert_eq!(s(&pod("Always", "Running", None)), Progressing);
        assert_eq!(s(&pod("Always", "Pending", None)), Progressing);
        assert_eq!(s(&pod("Never", "Succeeded", None)), Healthy);
        assert_eq!(s(&pod("Never", "Failed", None)), Degraded);
        // Ready, but a run-to-completion pod is done only when it succeeds.
        assert_eq!(s(&pod("Never", "Running", Some("True"))), Progressing);
        assert_eq!(s(&pod("OnFailure", "Running", Some("True"))), Progressing);
        assert_eq!(s(&pod("Always", "Unknown", None)), Unknown);
        assert_eq!(check("cicd", "bare", None).status, Missing);
        let mut deleting = pod("Always", "Running", Some("True"));
        deleting.deleting = true;
        assert_eq!(s(&deleting), Progressing);
        let msg = check(
            "cicd",
            "bare",
            Some(&pod("Always", "Running", Some("False"))),
        )
        .message;
        assert!(
            msg.contains("Pod cicd/bare") && msg.contains("ContainersNotReady"),
            "{msg}"
        );
    }

    #[test]
    fn a_pod_without_a_restart_policy_restarts_always() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "bare"}, "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        assert_eq!(
            check("cicd", "bare", Some(&PodView::from(&pod))).status,
            HealthStatus::Healthy
        );
    }
}
