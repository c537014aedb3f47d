//! Built-in Kubernetes kinds, judged the way Argo CD judges them: gitops-engine's
//! `pkg/health` (`GetHealthCheckFunc` in health.go and one `health_<kind>.go` per kind), written
//! here from its rules, not translated from its code. Where gitops-engine would say Healthy on
//! data that proves nothing yet, this says Progressing instead (each place is marked "Stricter").
//!
//! Field names follow the Kubernetes API types (`k8s.io/api`). Numbers read as Go's typed
//! structs read them: an absent count is 0, an absent `spec.replicas` is "unset".

use crate::json::At;
use serde_json::Value;

use crate::health::Verdict;

/// The kinds with a built-in rule, by API group and plural (the form wavegate's generic
/// resources are named in: `deployments.apps`, `pods`).
const KINDS: &[(&str, &str, Rule)] = &[
    ("apps", "deployments", deployment),
    ("extensions", "deployments", deployment),
    ("apps", "statefulsets", stateful_set),
    ("apps", "daemonsets", daemon_set),
    ("extensions", "daemonsets", daemon_set),
    ("apps", "replicasets", replica_set),
    ("extensions", "replicasets", replica_set),
    ("", "pods", pod),
    ("batch", "jobs", job),
    ("", "persistentvolumeclaims", persistent_volume_claim),
    ("networking.k8s.io", "ingresses", ingress),
    ("extensions", "ingresses", ingress),
    ("", "services", service),
    (
        "autoscaling",
        "horizontalpodautoscalers",
        horizontal_pod_autoscaler,
    ),
    ("apiregistration.k8s.io", "apiservices", api_service),
];

type Rule = fn(&str, &Value) -> Verdict;

/// Argo CD's verdict for `object` if `resource` (`plural` or `plural.group`) is a kind it has a
/// built-in rule for; `None` for every other kind. `id` names the object in messages. The
/// caller has already handled absence and deletion.
pub(crate) fn judge(resource: &str, id: &str, object: &Value) -> Option<Verdict> {
    let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
    KINDS
        .iter()
        .find(|(g, p, _)| *g == group && *p == plural)
        .map(|(_, _, rule)| rule(id, object))
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.i64_at(pointer).unwrap_or(0)
}

fn conditions(object: &Value) -> &[Value] {
    object
        .array_at("/status/conditions")
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    conditions(object)
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn is_true(condition: &Value) -> bool {
    condition.get("status").and_then(Value::as_str) == Some("True")
}

/// `: message` from a condition or status, or nothing.
fn because(message: Option<&str>) -> String {
    message.map_or(String::new(), |m| format!(": {m}"))
}

/// The controller has not reported on the current generation. gitops-engine compares
/// `metadata.generation` with `status.observedGeneration` (0 when absent) for every workload.
/// Stricter: an absent `status.observedGeneration` is never "observed", even when the object
/// carries no generation either, so an object no controller has touched is not Healthy.
fn unobserved(id: &str, object: &Value) -> Option<Verdict> {
    let generation = int(object, "/metadata/generation");
    match object.i64_at("/status/observedGeneration") {
        None => Some(Verdict::progressing(format!(
            "{id}: its controller has not reported a status yet"
        ))),
        Some(observed) if observed < generation => Some(Verdict::progressing(format!(
            "{id}: generation {generation} not observed yet (status.observedGeneration {observed})"
        ))),
        Some(_) => None,
    }
}

/// health_deployment.go: paused → Suspended; a `Progressing` condition with reason
/// `ProgressDeadlineExceeded` → Degraded (the deployment controller's own verdict that the
/// rollout failed); otherwise Progressing until every wanted replica is updated, no old one is
/// left and every updated one is available (kubectl's `rollout status`).
fn deployment(id: &str, d: &Value) -> Verdict {
    if d.bool_at("/spec/paused") == Some(true) {
        return Verdict::suspended(format!("{id} is paused"));
    }
    if let Some(v) = unobserved(id, d) {
        return v;
    }
    if let Some(c) = condition(d, "Progressing")
        && c.get("reason").and_then(Value::as_str) == Some("ProgressDeadlineExceeded")
    {
        return Verdict::degraded(format!(
            "{id} exceeded its progress deadline{}",
            because(c.text_at("/message"))
        ));
    }
    let updated = int(d, "/status/updatedReplicas");
    let replicas = int(d, "/status/replicas");
    let available = int(d, "/status/availableReplicas");
    if let Some(wanted) = d.i64_at("/spec/replicas")
        && updated < wanted
    {
        return Verdict::progressing(format!("{id}: {updated} of {wanted} replicas updated"));
    }
    if replicas > updated {
        return Verdict::progressing(format!(
            "{id}: {} old replicas pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Verdict::progressing(format!(
            "{id}: {available} of {updated} updated replicas available"
        ));
    }
    Verdict::healthy(format!("{id}: {available} replicas updated and available"))
}

/// health_statefulset.go: Progressing until the spec is observed (an observedGeneration of 0
/// counts as not observed) and `spec.replicas` pods are ready; then a partitioned rolling
/// update needs the pods above the partition updated, OnDelete needs nothing more, and a plain
/// rolling update needs `updateRevision == currentRevision`.
fn stateful_set(id: &str, s: &Value) -> Verdict {
    if let Some(v) = unobserved(id, s) {
        return v;
    }
    if int(s, "/status/observedGeneration") == 0 {
        return Verdict::progressing(format!("{id}: spec not observed yet"));
    }
    let ready = int(s, "/status/readyReplicas");
    let updated = int(s, "/status/updatedReplicas");
    let wanted = s.i64_at("/spec/replicas");
    if let Some(wanted) = wanted
        && ready < wanted
    {
        return Verdict::progressing(format!("{id}: {ready} of {wanted} pods ready"));
    }
    let strategy = s.text_at("/spec/updateStrategy/type");
    let rolling = s.pointer("/spec/updateStrategy/rollingUpdate");
    if strategy == Some("RollingUpdate") && rolling.is_some_and(|r| !r.is_null()) {
        if let (Some(wanted), Some(partition)) = (
            wanted,
            s.i64_at("/spec/updateStrategy/rollingUpdate/partition"),
        ) && updated < wanted - partition
        {
            return Verdict::progressing(format!(
                "{id}: partitioned rollout, {updated} of {} pods updated",
                wanted - partition
            ));
        }
        return Verdict::healthy(format!("{id}: {ready} pods ready, rollout complete"));
    }
    if strategy == Some("OnDelete") {
        return Verdict::healthy(format!("{id}: {ready} pods ready (OnDelete updates)"));
    }
    let update_revision = s.text_at("/status/updateRevision");
    if update_revision != s.text_at("/status/currentRevision") {
        return Verdict::progressing(format!(
            "{id}: rolling update to revision {} in progress, {updated} pods updated",
            update_revision.unwrap_or("(none)")
        ));
    }
    Verdict::healthy(format!("{id}: {ready} pods ready, rollout complete"))
}

/// health_daemonset.go: after the spec is observed, every scheduled pod updated and available.
/// Stricter: gitops-engine calls an OnDelete DaemonSet Healthy without looking at its pods;
/// here it still needs every scheduled pod available (only the "updated" test is skipped,
/// since OnDelete pods update only when someone deletes them).
fn daemon_set(id: &str, d: &Value) -> Verdict {
    if let Some(v) = unobserved(id, d) {
        return v;
    }
    let desired = int(d, "/status/desiredNumberScheduled");
    let updated = int(d, "/status/updatedNumberScheduled");
    let available = int(d, "/status/numberAvailable");
    let on_delete = d.text_at("/spec/updateStrategy/type") == Some("OnDelete");
    if !on_delete && updated < desired {
        return Verdict::progressing(format!(
            "{id}: {updated} of {desired} scheduled pods updated"
        ));
    }
    if available < desired {
        return Verdict::progressing(format!(
            "{id}: {available} of {desired} scheduled pods available"
        ));
    }
    Verdict::healthy(format!(
        "{id}: {available} of {desired} scheduled pods available"
    ))
}

/// health_replicaset.go: `ReplicaFailure=True` (e.g. a quota refusing pods) → Degraded;
/// Progressing until `spec.replicas` are available.
fn replica_set(id: &str, r: &Value) -> Verdict {
    if let Some(v) = unobserved(id, r) {
        return v;
    }
    if let Some(c) = condition(r, "ReplicaFailure").filter(|c| is_true(c)) {
        return Verdict::degraded(format!(
            "{id} cannot create its pods{}",
            because(c.text_at("/message"))
        ));
    }
    let available = int(r, "/status/availableReplicas");
    if let Some(wanted) = r.i64_at("/spec/replicas")
        && available < wanted
    {
        return Verdict::progressing(format!("{id}: {available} of {wanted} replicas available"));
    }
    Verdict::healthy(format!("{id}: {available} replicas available"))
}

/// health_pod.go. For `restartPolicy: Always` (the default) a container waiting with a reason
/// that starts with `Err` or ends with `Error` or `BackOff` (ErrImagePull, CrashLoopBackOff,
/// CreateContainerConfigError) is Degraded. Then by phase: Pending → Progressing, Succeeded →
/// Healthy, Failed → Degraded; Running → Healthy when Ready, Degraded when not Ready and a
/// container has terminated before, else Progressing — except that a Running pod that is meant
/// to finish (OnFailure/Never, typically a hook) is Progressing. Any other phase is Unknown.
fn pod(id: &str, p: &Value) -> Verdict {
    let restart = p.text_at("/spec/restartPolicy").unwrap_or("Always");
    let statuses = |key: &str| -> Vec<&Value> {
        p.array_at(&format!("/status/{key}"))
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    };
    let containers = statuses("containerStatuses");
    let message = p.text_at("/status/message");
    if restart == "Always" {
        let failing: Vec<String> = containers
            .iter()
            .filter_map(|c| {
                let reason = c.text_at("/state/waiting/reason")?;
                let bad = reason.starts_with("Err")
                    || reason.ends_with("Error")
                    || reason.ends_with("BackOff");
                bad.then(|| {
                    let name = c.text_at("/name").unwrap_or("?");
                    format!("container {name} is waiting: {reason}")
                })
            })
            .collect();
        if !failing.is_empty() {
            return Verdict::degraded(format!("{id}: {}", failing.join(", ")));
        }
    }
    match p.text_at("/status/phase") {
        Some("Pending") => Verdict::progressing(format!("{id} is Pending{}", because(message))),
        Some("Succeeded") => Verdict::healthy(format!("{id} Succeeded")),
        Some("Failed") => {
            let all = statuses("initContainerStatuses")
                .into_iter()
                .chain(containers.iter().copied());
            let why = message.map(str::to_string).or_else(|| {
                all.filter_map(|c| {
                    let terminated = c.pointer("/state/terminated").filter(|t| !t.is_null())?;
                    let name = c.text_at("/name").unwrap_or("?");
                    let code = int(terminated, "/exitCode");
                    match terminated.text_at("/reason") {
                        Some(reason) => Some(format!("container {name} terminated: {reason}")),
                        None if code != 0 => {
                            Some(format!("container {name} failed with exit code {code}"))
                        }
                        None => None,
                    }
                })
                .next()
            });
            Verdict::degraded(format!("{id} Failed{}", because(why.as_deref())))
        }
        Some("Running") if restart != "Always" => Verdict::progressing(format!(
            "{id} is Running (restartPolicy {restart}: it is done only when it Succeeds)"
        )),
        Some("Running") => {
            if condition(p, "Ready").is_some_and(is_true) {
                Verdict::healthy(format!("{id} is Running and Ready"))
            } else if containers.iter().any(|c| {
                c.pointer("/lastState/terminated")
                    .is_some_and(|t| !t.is_null())
            }) {
                Verdict::degraded(format!(
                    "{id} is not Ready and a container has terminated{}",
                    because(message)
                ))
            } else {
                Verdict::progressing(format!("{id} is Running, not Ready yet"))
            }
        }
        other => Verdict::unknown(format!(
            "{id}: phase {}{}",
            other.unwrap_or("(none)"),
            because(message)
        )),
    }
}

/// health_job.go: `Failed` → Degraded, `Complete` → Healthy, else Progressing; a suspended Job
/// (`spec.suspend`) is Suspended, as Argo CD reports it.
fn job(id: &str, j: &Value) -> Verdict {
    if let Some(c) = condition(j, "Failed").filter(|c| is_true(c)) {
        return Verdict::degraded(format!(
            "{id} failed{}",
            because(c.text_at("/reason").or(c.text_at("/message")))
        ));
    }
    if condition(j, "Complete").is_some_and(is_true) {
        return Verdict::healthy(format!("{id} completed"));
    }
    if j.bool_at("/spec/suspend") == Some(true) {
        return Verdict::suspended(format!("{id} is suspended"));
    }
    Verdict::progressing(format!(
        "{id} is running ({} active, {} succeeded, {} failed)",
        int(j, "/status/active"),
        int(j, "/status/succeeded"),
        int(j, "/status/failed")
    ))
}

/// health_pvc.go: Bound → Healthy, Pending → Progressing, Lost → Degraded, else Unknown.
fn persistent_volume_claim(id: &str, c: &Value) -> Verdict {
    match c.text_at("/status/phase") {
        Some("Bound") => Verdict::healthy(format!("{id} is Bound")),
        Some("Pending") => Verdict::progressing(format!("{id} is Pending")),
        Some("Lost") => Verdict::degraded(format!("{id} lost its volume")),
        other => Verdict::unknown(format!("{id}: phase {}", other.unwrap_or("(none)"))),
    }
}

fn has_load_balancer_ingress(object: &Value) -> bool {
    object
        .array_at("/status/loadBalancer/ingress")
        .is_some_and(|a| !a.is_empty())
}

/// health_ingress.go: Healthy once the controller has published an address.
fn ingress(id: &str, i: &Value) -> Verdict {
    if has_load_balancer_ingress(i) {
        Verdict::healthy(format!("{id} has a load balancer address"))
    } else {
        Verdict::progressing(format!("{id}: waiting for a load balancer address"))
    }
}

/// health_service.go: only a LoadBalancer needs something (an address). wavegate's own
/// `services` check is the one that looks at endpoints.
fn service(id: &str, s: &Value) -> Verdict {
    if s.text_at("/spec/type") != Some("LoadBalancer") {
        return Verdict::healthy(format!("{id} exists"));
    }
    if has_load_balancer_ingress(s) {
        Verdict::healthy(format!("{id} has a load balancer address"))
    } else {
        Verdict::progressing(format!("{id}: waiting for a load balancer address"))
    }
}

/// health_hpa.go: the first condition (in order) that is a known failure
/// (AbleToScale/FailedGetScale, AbleToScale/FailedUpdateScale, ScalingActive/
/// FailedGetResourceMetric, ScalingActive/InvalidSelector) → Degraded, or a known success
/// (AbleToScale/SucceededRescale, ScalingLimited/DesiredWithinRange|TooFewReplicas|
/// TooManyReplicas) → Healthy; otherwise "Waiting to Autoscale" (Progressing). Like Argo CD,
/// the type and reason decide, not the condition's status. autoscaling/v1 objects carry the
/// conditions in the `autoscaling.alpha.kubernetes.io/conditions` annotation.
fn horizontal_pod_autoscaler(id: &str, h: &Value) -> Verdict {
    const DEGRADED: &[(&str, &str)] = &[
        ("AbleToScale", "FailedGetScale"),
        ("AbleToScale", "FailedUpdateScale"),
        ("ScalingActive", "FailedGetResourceMetric"),
        ("ScalingActive", "InvalidSelector"),
    ];
    const HEALTHY: &[(&str, &str)] = &[
        ("AbleToScale", "SucceededRescale"),
        ("ScalingLimited", "DesiredWithinRange"),
        ("ScalingLimited", "TooFewReplicas"),
        ("ScalingLimited", "TooManyReplicas"),
    ];
    let from_annotation: Option<Vec<Value>> = h
        .str_at("/metadata/annotations/autoscaling.alpha.kubernetes.io~1conditions")
        .and_then(|a| serde_json::from_str(a).ok());
    let list: Vec<Value> = if conditions(h).is_empty() {
        from_annotation.unwrap_or_default()
    } else {
        conditions(h).to_vec()
    };
    for c in &list {
        let pair = (
            c.get("type").and_then(Value::as_str).unwrap_or(""),
            c.get("reason").and_then(Value::as_str).unwrap_or(""),
        );
        if DEGRADED.contains(&pair) {
            return Verdict::degraded(format!(
                "{id}: {} {}{}",
                pair.0,
                pair.1,
                because(c.text_at("/message"))
            ));
        }
        if HEALTHY.contains(&pair) {
            return Verdict::healthy(format!("{id}: {} {}", pair.0, pair.1));
        }
    }
    Verdict::progressing(format!("{id}: waiting to autoscale"))
}

/// health_apiservice.go: the `Available` condition decides; without it, Progressing.
fn api_service(id: &str, a: &Value) -> Verdict {
    match condition(a, "Available") {
        Some(c) if is_true(c) => Verdict::healthy(format!("{id} is Available")),
        Some(c) => Verdict::progressing(format!(
            "{id} is not Available{}",
            because(c.text_at("/reason").or(c.text_at("/message")))
        )),
        None => Verdict::progressing(format!("{id}: waiting to be processed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;
    use serde_json::json;

    fn status(resource: &str, object: Value) -> HealthStatus {
        judge(resource, "x", &object).expect("built-in kind").status
    }

    fn fixture(name: &str) -> Value {
        let path = format!(
            "{}/tests/fixtures/generic/{name}.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_yaml::from_str(&text).unwrap()
    }

    #[test]
    fn deployment_past_its_progress_deadline_with_no_available_replica_is_degraded() {
        let v = judge(
            "deployments.apps",
            "Deployment cicd/forgejo",
            &fixture("deployment-unavailable"),
        )
        .unwrap();
        assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
        assert!(
            v.message.contains("exceeded its progress deadline"),
            "{}",
            v.message
        );
    }

    #[test]
    fn deployment_without_any_status_is_progressing() {
        let d = json!({"metadata": {"generation": 1}, "spec": {"replicas": 1}});
        assert_eq!(status("deployments.apps", d), HealthStatus::Progressing);
        // Not even a generation: still nothing a controller has said.
        let d = json!({"metadata": {}, "spec": {}});
        assert_eq!(status("deployments.apps", d), HealthStatus::Progressing);
    }

    #[test]
    fn deployment_rolled_out_is_healthy_and_paused_is_suspended() {
        assert_eq!(
            status("deployments.apps", fixture("deployment-available")),
            HealthStatus::Healthy
        );
        let mut d = fixture("deployment-available");
        d["spec"]["paused"] = true.into();
        assert_eq!(status("deployments.apps", d), HealthStatus::Suspended);
    }

    #[test]
    fn deployment_with_updated_but_unavailable_replicas_is_progressing() {
        let d = json!({
            "metadata": {"generation": 2},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}
        });
        assert_eq!(status("deployments.apps", d), HealthStatus::Progressing);
    }

    #[test]
    fn statefulset_rules() {
        let base = json!({
            "metadata": {"generation": 3},
            "spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}},
            "status": {"observedGeneration": 3, "readyReplicas": 3, "updatedReplicas": 3,
                       "currentRevision": "a", "updateRevision": "a"}
        });
        assert_eq!(
            status("statefulsets.apps", base.clone()),
            HealthStatus::Healthy
        );
        let mut s = base.clone();
        s["status"]["readyReplicas"] = 2.into();
        assert_eq!(status("statefulsets.apps", s), HealthStatus::Progressing);
        let mut s = base.clone();
        s["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = 1.into();
        s["status"]["updatedReplicas"] = 1.into();
        assert_eq!(status("statefulsets.apps", s), HealthStatus::Progressing);
        let mut s = base.clone();
        s["spec"]["updateStrategy"] = json!({"type": "RollingUpdate"});
        s["status"]["updateRevision"] = "b".into();
        assert_eq!(status("statefulsets.apps", s), HealthStatus::Progressing);
        let mut s = base;
        s["status"]["observedGeneration"] = 2.into();
        assert_eq!(status("statefulsets.apps", s), HealthStatus::Progressing);
    }

    #[test]
    fn daemonset_on_delete_still_needs_available_pods() {
        let d = json!({
            "metadata": {"generation": 1},
            "spec": {"updateStrategy": {"type": "OnDelete"}},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 2,
                       "updatedNumberScheduled": 0, "numberAvailable": 1}
        });
        assert_eq!(
            status("daemonsets.apps", d.clone()),
            HealthStatus::Progressing
        );
        let mut d = d;
        d["status"]["numberAvailable"] = 2.into();
        assert_eq!(status("daemonsets.apps", d), HealthStatus::Healthy);
    }

    #[test]
    fn replicaset_failure_is_degraded() {
        let r = json!({
            "metadata": {"generation": 1},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "conditions": [
                {"type": "ReplicaFailure", "status": "True", "message": "exceeded quota"}]}
        });
        assert_eq!(status("replicasets.apps", r), HealthStatus::Degraded);
    }

    #[test]
    fn pod_rules() {
        let running_ready = json!({
            "spec": {},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        });
        assert_eq!(status("pods", running_ready), HealthStatus::Healthy);
        let crash = json!({
            "spec": {"restartPolicy": "Always"},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        });
        assert_eq!(status("pods", crash), HealthStatus::Degraded);
        let hook = json!({"spec": {"restartPolicy": "Never"}, "status": {"phase": "Running"}});
        assert_eq!(status("pods", hook), HealthStatus::Progressing);
        let failed = json!({"spec": {}, "status": {"phase": "Failed"}});
        assert_eq!(status("pods", failed), HealthStatus::Degraded);
        let none = json!({"spec": {}});
        assert_eq!(status("pods", none), HealthStatus::Unknown);
    }

    #[test]
    fn job_pvc_ingress_service_hpa_apiservice() {
        let job = |c: Value| json!({"spec": {}, "status": {"conditions": c}});
        assert_eq!(
            status(
                "jobs.batch",
                job(json!([{"type": "Complete", "status": "True"}]))
            ),
            HealthStatus::Healthy
        );
        assert_eq!(
            status(
                "jobs.batch",
                job(
                    json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
                )
            ),
            HealthStatus::Degraded
        );
        assert_eq!(
            status("jobs.batch", job(json!([]))),
            HealthStatus::Progressing
        );

        let pvc = |p: &str| json!({"status": {"phase": p}});
        assert_eq!(
            status("persistentvolumeclaims", pvc("Bound")),
            HealthStatus::Healthy
        );
        assert_eq!(
            status("persistentvolumeclaims", pvc("Pending")),
            HealthStatus::Progressing
        );
        assert_eq!(
            status("persistentvolumeclaims", pvc("Lost")),
            HealthStatus::Degraded
        );

        assert_eq!(
            status("ingresses.networking.k8s.io", json!({"status": {}})),
            HealthStatus::Progressing
        );
        assert_eq!(
            status(
                "ingresses.networking.k8s.io",
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.2"}]}}})
            ),
            HealthStatus::Healthy
        );
        assert_eq!(
            status("services", json!({"spec": {"type": "LoadBalancer"}})),
            HealthStatus::Progressing
        );
        assert_eq!(
            status("services", json!({"spec": {"type": "ClusterIP"}})),
            HealthStatus::Healthy
        );

        let hpa = |c: Value| json!({"status": {"conditions": c}});
        assert_eq!(
            status(
                "horizontalpodautoscalers.autoscaling",
                hpa(
                    json!([{"type": "AbleToScale", "status": "False", "reason": "FailedGetScale"}])
                )
            ),
            HealthStatus::Degraded
        );
        assert_eq!(
            status(
                "horizontalpodautoscalers.autoscaling",
                hpa(
                    json!([{"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange"}])
                )
            ),
            HealthStatus::Healthy
        );
        let v1 = json!({"metadata": {"annotations": {
            "autoscaling.alpha.kubernetes.io/conditions":
                "[{\"type\":\"AbleToScale\",\"status\":\"True\",\"reason\":\"SucceededRescale\"}]"}}});
        assert_eq!(
            status("horizontalpodautoscalers.autoscaling", v1),
            HealthStatus::Healthy
        );
        assert_eq!(
            status("horizontalpodautoscalers.autoscaling", json!({})),
            HealthStatus::Progressing
        );

        let api = |s: &str| json!({"status": {"conditions": [{"type": "Available", "status": s}]}});
        assert_eq!(
            status("apiservices.apiregistration.k8s.io", api("True")),
            HealthStatus::Healthy
        );
        assert_eq!(
            status("apiservices.apiregistration.k8s.io", api("False")),
            HealthStatus::Progressing
        );
    }

    #[test]
    fn other_kinds_have_no_built_in_rule() {
        assert!(judge("configmaps", "x", &json!({})).is_none());
        assert!(judge("helmreleases.helm.toolkit.fluxcd.io", "x", &json!({})).is_none());
        assert!(judge("deployments.example.com", "x", &json!({})).is_none());
    }

    /// gitops-engine's Deployment rule as a plain reference, written from its documented
    /// behaviour with Go's zero values (absent = 0), sharing no code with [`deployment`].
    #[allow(clippy::too_many_arguments)]
    fn oracle_deployment(
        paused: bool,
        generation: i64,
        observed: i64,
        deadline_exceeded: bool,
        spec_replicas: Option<i64>,
        replicas: i64,
        updated: i64,
        available: i64,
    ) -> HealthStatus {
        if paused {
            return HealthStatus::Suspended;
        }
        if generation > observed {
            return HealthStatus::Progressing;
        }
        if deadline_exceeded {
            return HealthStatus::Degraded;
        }
        let short =
            spec_replicas.is_some_and(|r| updated < r) || replicas > updated || available < updated;
        if short {
            HealthStatus::Progressing
        } else {
            HealthStatus::Healthy
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::testing::proptest_config::config(2000))]

        /// Never Healthy where Argo CD's rule is not, never Degraded where it is not, and the
        /// same answer whenever the controller has reported an observedGeneration (the one
        /// place this rule is deliberately stricter).
        #[test]
        fn deployment_rule_agrees_with_gitops_engine(
            paused in proptest::prelude::any::<bool>(),
            generation in proptest::option::of(0i64..4),
            observed in proptest::option::of(0i64..4),
            reason in proptest::sample::select(vec!["", "NewReplicaSetAvailable", "ReplicaSetUpdated", "ProgressDeadlineExceeded"]),
            spec_replicas in proptest::option::of(0i64..4),
            replicas in proptest::option::of(0i64..5),
            updated in proptest::option::of(0i64..5),
            available in proptest::option::of(0i64..5),
        ) {
            let mut d = json!({"metadata": {}, "spec": {}, "status": {}});
            if paused { d["spec"]["paused"] = true.into(); }
            if let Some(g) = generation { d["metadata"]["generation"] = g.into(); }
            if let Some(r) = spec_replicas { d["spec"]["replicas"] = r.into(); }
            for (key, v) in [("observedGeneration", observed), ("replicas", replicas),
                             ("updatedReplicas", updated), ("availableReplicas", available)] {
                if let Some(v) = v { d["status"][key] = v.into(); }
            }
            if !reason.is_empty() {
                d["status"]["conditions"] = json!([{"type": "Progressing", "status": "True", "reason": reason}]);
            }
            let got = judge("deployments.apps", "d", &d).unwrap().status;
            let want = oracle_deployment(
                paused,
                generation.unwrap_or(0),
                observed.unwrap_or(0),
                reason == "ProgressDeadlineExceeded",
                spec_replicas,
                replicas.unwrap_or(0),
                updated.unwrap_or(0),
                available.unwrap_or(0),
            );
            if got == HealthStatus::Healthy {
                proptest::prop_assert_eq!(want, HealthStatus::Healthy, "{}", d);
            }
            if got == HealthStatus::Degraded {
                proptest::prop_assert_eq!(want, HealthStatus::Degraded, "{}", d);
            }
            if observed.is_some() {
                proptest::prop_assert_eq!(got, want, "{}", d);
            } else if !paused {
                proptest::prop_assert_eq!(got, HealthStatus::Progressing, "{}", d);
            }
        }
    }
}
