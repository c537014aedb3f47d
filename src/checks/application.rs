//! Argo CD `Application` (`applications.argoproj.io`) for app-of-apps: is the child really done?
//!
//! A parent Application's sync wave advances when its child Applications report Healthy. Argo
//! CD's own health snippet for Applications (argocd-cm, "argoproj.io/Application" in the
//! operator manual) returns `status.health` as is — so a child still describing the previous
//! revision reads Healthy before it has even started to roll out the new one (argo-cd #4577,
//! "Sync waves complete when objects are still Progressing"), and a child whose resources do
//! not exist yet briefly lets the parent go green (argo-cd #6708).
//!
//! Healthy here needs all of: health Healthy, sync Synced, the last comparison made against
//! what the spec asks for now, and no operation running or pending. Field names follow
//! `pkg/apis/application/v1alpha1/types.go` (`ApplicationStatus`, `SyncStatus.ComparedTo`,
//! `OperationState`).

use crate::json::At;
use serde_json::{Map, Value};

use crate::health::{HealthStatus, Verdict};

/// The status an Application's verdict was judged on, as annotation mode records it
/// (`wavegate.dev/judged-state`) and the Application health script renders it:
/// `health=<status>,sync=<status>,revision=<rev, or revisions joined by spaces>,operation=<phase>,requested=<true|false>`.
/// Argo CD's Application CRD has no status subresource (`subresources: {}`), so today every
/// status write bumps `metadata.generation` and the observed generation already dates a
/// verdict; this keeps a stored verdict honest where that does not hold (a CRD served with a
/// status subresource), and says in the annotation what the verdict was about.
pub fn judged_state(app: &Value) -> String {
    let text = |p: &str| app.str_at(p).unwrap_or("");
    let revision = match app.array_at("/status/sync/revisions") {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|r| r.as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" "),
        _ => text("/status/sync/revision").to_string(),
    };
    let requested = app.get("operation").is_some_and(|o| !o.is_null());
    format!(
        "health={},sync={},revision={revision},operation={},requested={requested}",
        text("/status/health/status"),
        text("/status/sync/status"),
        text("/status/operationState/phase"),
    )
}

/// Judge one child Application.
pub fn check(namespace: &str, name: &str, application: Option<&Value>) -> Verdict {
    let object = format!("Application {namespace}/{name}");
    let Some(app) = application else {
        return Verdict::missing(format!("{object} not found"));
    };
    if app
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return Verdict::progressing(format!("{object} is being deleted"));
    }

    let status = app.get("status").filter(|s| !s.is_null());
    if status.is_none_or(|s| s.get("health").is_none() && s.get("sync").is_none()) {
        return Verdict::progressing(format!(
            "{object} has no health or sync status yet (Argo CD has not reconciled it)"
        ));
    }

    let mut shortfalls: Vec<(HealthStatus, String)> = Vec::new();

    // An operation in flight means the status describes a state that is about to change.
    let operation_running = operation_in_flight(app);
    if let Some(clause) = &operation_running {
        shortfalls.push((HealthStatus::Progressing, clause.clone()));
    }

    // The status is only evidence about the spec it was computed from. Argo CD's controller
    // uses this same test to decide that a comparison is stale and must be redone
    // (`needRefreshAppStatus` / `currentSourceEqualsSyncedSource` in
    // controller/appcontroller.go: "spec.source differs", "spec.destination differs").
    let stale = stale_comparison(app);
    // With a source hydrator, comparedTo names only the branch the hydrated manifests are
    // synced from; a new dry revision or hydrator config changes what is on it only once the
    // hydrator has run, so until then the comparison describes the old spec too.
    let hydrating = hydration_behind(app);
    let comparison_current = stale.is_none() && hydrating.is_none();
    for clause in stale.into_iter().chain(hydrating) {
        shortfalls.push((HealthStatus::Progressing, clause));
    }

    // A finished operation that failed. Only after the operation-in-flight and staleness tests,
    // because whether the failure is definite depends on them.
    if let Some(shortfall) =
        failed_operation(app, comparison_current && operation_running.is_none())
    {
        shortfalls.push(shortfall);
    }

    let health = app.str_at("/status/health/status").unwrap_or("Unknown");
    let health_message = app.text_at("/status/health/message");
    let sync = app.str_at("/status/sync/status").unwrap_or("Unknown");

    let health_status = match health {
        "Healthy" => None,
        // Argo CD's snippet passes a child's Degraded through, failing the parent's sync. We
        // agree only when the Degraded belongs to the current spec and nothing is running:
        // during a rollout or before a refresh it may describe the old state and clear up.
        "Degraded" if comparison_current && operation_running.is_none() => {
            Some(HealthStatus::Degraded)
        }
        "Degraded" => Some(HealthStatus::Progressing),
        "Suspended" => Some(HealthStatus::Suspended),
        // #6708: Missing means the child's resources are not created yet — keep waiting. It is
        // not our Missing (the Application object itself exists).
        "Progressing" | "Missing" => Some(HealthStatus::Progressing),
        _ => Some(HealthStatus::Unknown),
    };
    if let Some(status) = health_status {
        let clause = match health_message {
            Some(m) => format!("health {health}: {m}"),
            None => format!("health {health}"),
        };
        shortfalls.push((status, clause));
    }

    match sync {
        "Synced" => {}
        "OutOfSync" => shortfalls.push((HealthStatus::Progressing, sync_clause(health, sync))),
        _ => {
            let clause = match comparison_error(app) {
                Some(error) => format!("{}: {error}", sync_clause(health, sync)),
                None => sync_clause(health, sync),
            };
            shortfalls.push((HealthStatus::Unknown, clause));
        }
    }

    if shortfalls.is_empty() {
        let revision = synced_revisions(app);
        return Verdict::healthy(format!("{object} is Healthy and Synced{revision}"));
    }
    let status = HealthStatus::worst(shortfalls.iter().map(|(s, _)| *s));
    let clauses: Vec<&str> = shortfalls.iter().map(|(_, c)| c.as_str()).collect();
    Verdict::new(status, format!("{object}: {}", clauses.join("; ")))
}

fn sync_clause(health: &str, sync: &str) -> String {
    if health == "Healthy" {
        format!("is Healthy but {sync}")
    } else {
        format!("is {sync}")
    }
}

/// `operationState.phase` Running/Terminating, or an `operation` requested but not started.
fn operation_in_flight(app: &Value) -> Option<String> {
    let phase = app.str_at("/status/operationState/phase");
    if let Some(phase @ ("Running" | "Terminating")) = phase {
        let message = app.text_at("/status/operationState/message");
        return Some(match message {
            Some(m) => format!("sync operation {phase} ({m})"),
            None => format!("sync operation {phase}"),
        });
    }
    // The controller moves `operation` into `status.operationState` when it starts; while the
    // field is set the operation is still to come (or in progress).
    if app.get("operation").is_some_and(|o| !o.is_null()) {
        return Some("sync operation requested, not started yet".to_string());
    }
    None
}

/// The last operation finished `Failed` (a sync task or hook failed) or `Error` (the operation
/// could not run), per gitops-engine's `OperationPhase`. Either way the child did not reach
/// what was asked, so it is never Healthy, even when its health and sync read Healthy/Synced
/// (a failed PostSync migration hook leaves exactly that).
///
/// Degraded only when the failure is definite: nothing is running or pending, the comparison is
/// current, and the failed sync was of exactly what is compared now — the same revision(s) as
/// `status.sync` and the same source(s) as the spec. Argo CD's automated sync then does not try
/// again (`alreadyAttemptedSync` in controller/appcontroller.go skips a revision and source it
/// already attempted and failed; retries happen inside the operation while its phase is still
/// Running), so waiting would only wait for the timeout. A failure of an earlier revision or
/// source, or one without a sync result, may be superseded: Progressing.
fn failed_operation(app: &Value, settled: bool) -> Option<(HealthStatus, String)> {
    let state = app.pointer("/status/operationState")?;
    let phase = state.get("phase").and_then(Value::as_str)?;
    if !matches!(phase, "Failed" | "Error") {
        return None;
    }
    let clause = match state
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
    {
        Some(m) => format!("last sync {phase}: {m}"),
        None => format!("last sync {phase}"),
    };
    if settled && failed_sync_is_current(app) {
        Some((HealthStatus::Degraded, clause))
    } else {
        Some((
            HealthStatus::Progressing,
            format!("{clause} (not of the current spec and revision)"),
        ))
    }
}

/// Whether `operationState.syncResult` is a sync of the revision(s) last compared and of the
/// spec's source(s). Argo CD records a sync's `source` as `GetSource()` and its `sources` as
/// `spec.sources` (controller/sync.go, `newSyncOperationResult`), so a multi-source sync is
/// recognised by its `sources` and `revisions`, every other one by its `source` and
/// `revision`, a hydrator's being its sync source.
fn failed_sync_is_current(app: &Value) -> bool {
    let Some(result) = app.pointer("/status/operationState/syncResult") else {
        return false;
    };
    let spec = app.get("spec").unwrap_or(&Value::Null);
    let (revision_key, source_key, wanted) = match wanted_sources(spec) {
        Wanted::Many(sources) => ("revisions", "sources", Value::Array(sources.to_vec())),
        Wanted::One(source) => ("revision", "source", source),
    };
    let synced = app
        .pointer("/status/sync")
        .and_then(|s| s.get(revision_key))
        .and_then(normalized);
    let attempted = result.get(revision_key).and_then(normalized);
    synced.is_some()
        && synced == attempted
        && normalized(result.get(source_key).unwrap_or(&Value::Null)) == normalized(&wanted)
}

/// What Argo CD compares an Application with and syncs, as it records it in
/// `status.sync.comparedTo` (controller/state.go, `CompareAppState`; the same in 3.4–3.6).
enum Wanted<'a> {
    /// `comparedTo.source`: `spec.source`, or the source hydrator's sync source.
    One(Value),
    /// `comparedTo.sources`: `spec.sources`, in order, `ref` sources included.
    Many(&'a [Value]),
}

/// `ApplicationSpec.GetSource` / `HasMultipleSources` (pkg/apis/application/v1alpha1/types.go):
/// a `sourceHydrator` wins over `sources`, which win over `source` when not empty.
fn wanted_sources(spec: &Value) -> Wanted<'_> {
    if let Some(hydrator) = spec.get("sourceHydrator").filter(|h| h.is_object()) {
        return Wanted::One(hydrator_sync_source(hydrator));
    }
    match spec.get("sources").and_then(Value::as_array) {
        Some(sources) if !sources.is_empty() => Wanted::Many(sources),
        _ => Wanted::One(spec.get("source").cloned().unwrap_or(Value::Null)),
    }
}

/// `SourceHydrator.GetSyncSource`: where hydrated manifests are synced from. The repository
/// is `syncSource.repoURL` when set (a field since Argo CD 3.5, absent from 3.4's CRD, whose
/// controller always takes the dry source's), else `drySource.repoURL`; the revision is
/// `syncSource.targetBranch`. Nothing else of the hydrator is compared.
fn hydrator_sync_source(hydrator: &Value) -> Value {
    let text = |p: &str| hydrator.str_at(p).unwrap_or("");
    let repo = Some(text("/syncSource/repoURL"))
        .filter(|r| !r.is_empty())
        .unwrap_or(text("/drySource/repoURL"));
    serde_json::json!({
        "repoURL": repo,
        "path": text("/syncSource/path"),
        "targetRevision": text("/syncSource/targetBranch"),
    })
}

/// With `spec.sourceHydrator`, why the hydrated branch may not yet hold what the spec asks
/// for: Argo CD's hydrator records each run in `status.sourceHydrator.currentOperation`,
/// with the hydrator config it ran for (controller/hydrator/hydrator.go). Hydrating, Failed
/// (the hydrator retries), or hydrated for another config (a new dry revision the parent just
/// applied) is Progressing. No record at all says nothing (the branch may be written by
/// something other than Argo CD's hydrator).
fn hydration_behind(app: &Value) -> Option<String> {
    let wanted = app
        .pointer("/spec/sourceHydrator")
        .filter(|h| h.is_object())?;
    let run = app.pointer("/status/sourceHydrator/currentOperation")?;
    let with_message = |what: String| match run.text_at("/message") {
        Some(m) => format!("{what} ({m})"),
        None => what,
    };
    match run.str_at("/phase").unwrap_or("") {
        "Hydrated" => (normalized(run.get("sourceHydrator").unwrap_or(&Value::Null))
            != normalized(wanted))
        .then(|| "last hydrated another sourceHydrator than the spec has".to_string()),
        "Hydrating" => Some(with_message("hydrating its dry source".to_string())),
        phase => Some(with_message(format!("hydration {phase}"))),
    }
}

/// Why the last comparison does not describe the current spec, if it does not.
fn stale_comparison(app: &Value) -> Option<String> {
    let Some(compared) = app.pointer("/status/sync/comparedTo") else {
        return Some("has not been compared with its spec yet".to_string());
    };
    let spec = app.get("spec").unwrap_or(&Value::Null);

    // Argo CD's controller compares the same way to decide that a comparison is stale
    // (`currentSourceEqualsSyncedSource`): `sources` for a multi-source spec, else `source`.
    let source_clause = match wanted_sources(spec) {
        Wanted::Many(wanted) => {
            let seen = compared
                .get("sources")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if seen.len() != wanted.len() {
                Some(format!(
                    "last compared {} source(s) but spec has {}",
                    seen.len(),
                    wanted.len()
                ))
            } else {
                let differences: Vec<String> = wanted
                    .iter()
                    .zip(seen)
                    .enumerate()
                    .filter_map(|(i, (w, s))| {
                        source_difference(s, w).map(|d| format!("source #{}: {d}", i + 1))
                    })
                    .collect();
                (!differences.is_empty()).then(|| differences.join(", "))
            }
        }
        Wanted::One(wanted) => {
            source_difference(compared.get("source").unwrap_or(&Value::Null), &wanted)
        }
    };

    let destination_clause = {
        let seen = compared.get("destination").unwrap_or(&Value::Null);
        let wanted = spec.get("destination").unwrap_or(&Value::Null);
        (normalized(seen) != normalized(wanted)).then(|| {
            format!(
                "last compared destination {} but spec asks for {}",
                destination_text(seen),
                destination_text(wanted)
            )
        })
    };

    // The controller also recompares when `spec.ignoreDifferences` changed, since it changes
    // what counts as OutOfSync (`ComparedTo.IgnoreDifferences`).
    let ignore_clause = (normalized(compared.get("ignoreDifferences").unwrap_or(&Value::Null))
        != normalized(spec.get("ignoreDifferences").unwrap_or(&Value::Null)))
    .then(|| "last compared other ignoreDifferences than the spec has".to_string());

    let clauses: Vec<String> = source_clause
        .into_iter()
        .chain(destination_clause)
        .chain(ignore_clause)
        .collect();
    (!clauses.is_empty()).then(|| clauses.join(", "))
}

/// How a compared source differs from the wanted one, led by the revision (the common case).
fn source_difference(seen: &Value, wanted: &Value) -> Option<String> {
    let (seen, wanted) = (normalized(seen), normalized(wanted));
    if seen == wanted {
        return None;
    }
    let field = |v: &Option<Value>, key: &str| {
        v.as_ref()
            .and_then(|v| v.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let (seen_rev, wanted_rev) = (
        field(&seen, "targetRevision"),
        field(&wanted, "targetRevision"),
    );
    if seen_rev != wanted_rev {
        return Some(format!(
            "last compared revision {} but spec asks for {}",
            scalar_text(&seen_rev),
            scalar_text(&wanted_rev)
        ));
    }
    let mut keys: Vec<&String> = Vec::new();
    for v in [&seen, &wanted].into_iter().flatten() {
        if let Some(map) = v.as_object() {
            keys.extend(map.keys());
        }
    }
    keys.sort();
    keys.dedup();
    let differing: Vec<&str> = keys
        .into_iter()
        .filter(|k| field(&seen, k) != field(&wanted, k))
        .map(String::as_str)
        .collect();
    Some(format!(
        "last compared a source that differs from the spec in {}",
        differing.join(", ")
    ))
}

/// Drop what Go's `omitempty` would drop (null, "", false, 0, [], {}), recursively, so that an
/// absent block and an empty one compare equal — as they do for Argo CD, whose
/// `ApplicationSource.Equals` compares Go structs where both are the zero value. `None` means
/// "nothing set".
fn normalized(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Bool(b) => b.then_some(Value::Bool(true)),
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .map(|i| normalized(i).unwrap_or(Value::Null))
                .collect(),
        )),
        Value::Object(map) => {
            let kept: Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| normalized(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other.clone()),
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "(none)".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn destination_text(destination: &Value) -> String {
    let part = |key: &str| {
        destination
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let target = part("server").or(part("name")).unwrap_or("(none)");
    match part("namespace") {
        Some(ns) => format!("{target} namespace {ns}"),
        None => target.to_string(),
    }
}

fn comparison_error(app: &Value) -> Option<String> {
    app.array_at("/status/conditions")?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("ComparisonError"))
        .and_then(|c| c.get("message").and_then(Value::as_str))
        .map(str::to_string)
}

fn synced_revisions(app: &Value) -> String {
    if let Some(revision) = app.text_at("/status/sync/revision") {
        return format!(" at revision {revision}");
    }
    let revisions: Vec<&str> = app
        .array_at("/status/sync/revisions")
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if revisions.is_empty() {
        String::new()
    } else {
        format!(" at revisions {}", revisions.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let yaml = match name {
            "healthy-synced" => {
                include_str!("../../tests/fixtures/application/healthy-synced.yaml")
            }
            "healthy-before-sync" => {
                include_str!("../../tests/fixtures/application/healthy-before-sync.yaml")
            }
            "healthy-outofsync" => {
                include_str!("../../tests/fixtures/application/healthy-outofsync.yaml")
            }
            "operation-running" => {
                include_str!("../../tests/fixtures/application/operation-running.yaml")
            }
            "degraded" => include_str!("../../tests/fixtures/application/degraded.yaml"),
            "suspended" => include_str!("../../tests/fixtures/application/suspended.yaml"),
            "multi-source" => include_str!("../../tests/fixtures/application/multi-source.yaml"),
            "multi-source-stale" => {
                include_str!("../../tests/fixtures/application/multi-source-stale.yaml")
            }
            "missing-resources" => {
                include_str!("../../tests/fixtures/application/missing-resources.yaml")
            }
            "never-compared" => {
                include_str!("../../tests/fixtures/application/never-compared.yaml")
            }
            other => panic!("no fixture {other}"),
        };
        serde_yaml::from_str(yaml).unwrap()
    }

    /// Every source shape Argo CD 3.4–3.6 accepts (`source`, `sources` with a `ref` source,
    /// `sourceHydrator` with and without `syncSource.repoURL`, `destination.name`), in the
    /// Application script's testdata, which the Lua harness and tests/offline/parity.rs run too.
    #[test]
    fn every_source_shape_is_judged_on_what_argo_cd_records_in_compared_to() {
        let cases: [(&str, &str, HealthStatus); 9] = [
            (
                "healthy.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/healthy.yaml"
                ),
                HealthStatus::Healthy,
            ),
            (
                "source-hydrator-healthy.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/source-hydrator-healthy.yaml"
                ),
                HealthStatus::Healthy,
            ),
            (
                "source-hydrator-sync-repo.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/source-hydrator-sync-repo.yaml"
                ),
                HealthStatus::Healthy,
            ),
            (
                "source-hydrator-stale-branch.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/source-hydrator-stale-branch.yaml"
                ),
                HealthStatus::Progressing,
            ),
            (
                "source-hydrator-hydrating.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/source-hydrator-hydrating.yaml"
                ),
                HealthStatus::Progressing,
            ),
            (
                "source-hydrator-sync-failed.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/source-hydrator-sync-failed.yaml"
                ),
                HealthStatus::Degraded,
            ),
            (
                "destination-name.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/destination-name.yaml"
                ),
                HealthStatus::Healthy,
            ),
            (
                "destination-server-became-name.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/destination-server-became-name.yaml"
                ),
                HealthStatus::Progressing,
            ),
            (
                "multi-source-ref-stale.yaml",
                include_str!(
                    "../../argocd/resource_customizations/argoproj.io/Application/testdata/multi-source-ref-stale.yaml"
                ),
                HealthStatus::Progressing,
            ),
        ];
        let mut wrong = Vec::new();
        for (file, yaml, expected) in cases {
            let app: Value = serde_yaml::from_str(yaml).unwrap();
            let v = check("argocd", "forgejo", Some(&app));
            if v.status != expected {
                wrong.push(format!(
                    "{file}: {} ({}), expected {expected}",
                    v.status, v.message
                ));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn a_hydrated_branch_of_an_older_dry_revision_is_not_healthy() {
        // The parent moved the dry source on; the hydrator is still at it.
        let yaml = include_str!(
            "../../argocd/resource_customizations/argoproj.io/Application/testdata/source-hydrator-hydrating.yaml"
        );
        let mut app: Value = serde_yaml::from_str(yaml).unwrap();
        let v = check("argocd", "forgejo", Some(&app));
        assert!(
            v.message.contains("last hydrated another sourceHydrator"),
            "{v}"
        );
        app["status"]["sourceHydrator"]["currentOperation"]["phase"] = "Hydrating".into();
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(v.message.contains("hydrating its dry source"), "{v}");
        // Hydrated for this spec: Healthy.
        app["status"]["sourceHydrator"]["currentOperation"]["phase"] = "Hydrated".into();
        app["status"]["sourceHydrator"]["currentOperation"]["sourceHydrator"]["drySource"]["targetRevision"] =
            "v1.5.0".into();
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Healthy, "{v}");
    }

    fn judge(name: &str) -> Verdict {
        let app = fixture(name);
        let ns = app["metadata"]["namespace"].as_str().unwrap().to_string();
        let n = app["metadata"]["name"].as_str().unwrap().to_string();
        check(&ns, &n, Some(&app))
    }

    #[test]
    fn healthy_synced_current_child_is_healthy() {
        let v = judge("healthy-synced");
        assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
        assert_eq!(
            v.message,
            "Application argocd/forgejo is Healthy and Synced at revision \
             4f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39"
        );
    }

    #[test]
    fn healthy_before_syncing_the_new_revision_is_progressing() {
        let v = judge("healthy-before-sync");
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Application argocd/forgejo: last compared revision v1.3.0 but spec asks for v1.4.0"
        );
    }

    #[test]
    fn healthy_but_out_of_sync_is_progressing() {
        let v = judge("healthy-outofsync");
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Application argocd/forgejo: is Healthy but OutOfSync"
        );
    }

    #[test]
    fn running_sync_operation_is_progressing_even_when_healthy_and_synced() {
        let v = judge("operation-running");
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Application argocd/forgejo: sync operation Running (waiting for completion of hook \
             batch/Job/forgejo-migrate)"
        );
    }

    #[test]
    fn pending_operation_is_progressing() {
        let mut app = fixture("healthy-synced");
        app["operation"] = serde_json::json!({"sync": {"revision": "v1.4.0"}});
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .contains("sync operation requested, not started yet")
        );
    }

    #[test]
    fn degraded_child_of_the_current_spec_is_degraded() {
        let v = judge("degraded");
        assert_eq!(v.status, HealthStatus::Degraded);
        assert_eq!(
            v.message,
            "Application argocd/forgejo: health Degraded: Deployment \"forgejo\" exceeded its \
             progress deadline"
        );
    }

    #[test]
    fn degraded_child_mid_sync_is_only_progressing() {
        let mut app = fixture("degraded");
        app["status"]["operationState"]["phase"] = "Running".into();
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(v.message.contains("health Degraded: Deployment"));
    }

    #[test]
    fn suspended_child_is_suspended() {
        let v = judge("suspended");
        assert_eq!(v.status, HealthStatus::Suspended);
        assert_eq!(v.message, "Application argocd/reports: health Suspended");
    }

    #[test]
    fn multi_source_compares_every_source_and_ignores_empty_blocks() {
        let v = judge("multi-source");
        assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
        assert!(
            v.message
                .ends_with("at revisions 25.4.2, 0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d")
        );
    }

    #[test]
    fn multi_source_with_a_stale_chart_version_is_progressing() {
        let v = judge("multi-source-stale");
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Application argocd/cockroachdb: source #1: last compared revision 25.4.2 but spec \
             asks for 25.4.3"
        );
    }

    #[test]
    fn child_whose_resources_are_missing_is_progressing_not_healthy() {
        let v = judge("missing-resources");
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Application argocd/forgejo: health Missing; is OutOfSync"
        );
    }

    #[test]
    fn never_compared_child_is_not_healthy() {
        let v = judge("never-compared");
        assert_eq!(v.status, HealthStatus::Progressing);
        assert_eq!(
            v.message,
            "Application argocd/forgejo has no health or sync status yet (Argo CD has not \
             reconciled it)"
        );
    }

    #[test]
    fn changed_path_is_named() {
        let mut app = fixture("healthy-synced");
        app["spec"]["source"]["path"] = "forgejo-v2".into();
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .ends_with("last compared a source that differs from the spec in path")
        );
    }

    #[test]
    fn changed_destination_is_named() {
        let mut app = fixture("healthy-synced");
        app["spec"]["destination"]["namespace"] = "forge".into();
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(v.message.contains(
            "last compared destination https://kubernetes.default.svc namespace cicd but spec \
             asks for https://kubernetes.default.svc namespace forge"
        ));
    }

    #[test]
    fn absent_application_is_missing() {
        let v = check("argocd", "forgejo", None);
        assert_eq!(v.status, HealthStatus::Missing);
        assert_eq!(v.message, "Application argocd/forgejo not found");
    }

    /// A fixture shared with the shipped Lua script (argocd/resource_customizations).
    fn lua_fixture(name: &str) -> Value {
        let path = format!(
            "{}/argocd/resource_customizations/argoproj.io/Application/testdata/{name}.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_yaml::from_str(&yaml).unwrap()
    }

    fn judge_lua_fixture(name: &str) -> Verdict {
        check("argocd", "forgejo", Some(&lua_fixture(name)))
    }

    #[test]
    fn failed_postsync_hook_of_the_current_revision_is_degraded_not_healthy() {
        let v = judge_lua_fixture("failed-postsync-hook");
        assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
        assert!(
            v.message
                .contains("last sync Failed: one or more synchronization tasks"),
            "{}",
            v.message
        );
    }

    #[test]
    fn errored_sync_of_the_current_revision_is_degraded_not_healthy() {
        let v = judge_lua_fixture("errored-sync-current");
        assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
    }

    #[test]
    fn failed_sync_of_an_older_revision_is_progressing_not_healthy() {
        let v = judge_lua_fixture("failed-sync-older-revision");
        assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
        assert!(v.message.contains("not of the current spec and revision"));
    }

    #[test]
    fn failed_sync_while_a_new_one_runs_is_progressing() {
        let mut app = lua_fixture("failed-postsync-hook");
        app["operation"] = serde_json::json!({"sync": {"revision": "v1.4.1"}});
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
    }

    #[test]
    fn every_part_of_a_changed_spec_makes_the_comparison_stale() {
        for name in [
            "stale-destination",
            "stale-helm-values",
            "stale-helm-value-files",
            "stale-kustomize-images",
            "stale-directory",
            "stale-plugin-env",
            "multi-source-stale-value-files",
        ] {
            let v = judge_lua_fixture(name);
            assert_eq!(v.status, HealthStatus::Progressing, "{name}: {}", v.message);
        }
    }

    #[test]
    fn changed_ignore_differences_makes_the_comparison_stale() {
        let mut app = fixture("healthy-synced");
        app["spec"]["ignoreDifferences"] = serde_json::json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]);
        let v = check("argocd", "forgejo", Some(&app));
        assert_eq!(v.status, HealthStatus::Progressing, "{}", v.message);
        assert!(v.message.contains("ignoreDifferences"));
    }

    #[test]
    fn empty_blocks_are_the_same_as_absent_ones() {
        let v = judge_lua_fixture("empty-blocks");
        assert_eq!(v.status, HealthStatus::Healthy, "{}", v.message);
    }

    #[test]
    fn degraded_and_out_of_sync_with_a_current_comparison_is_degraded() {
        let v = judge_lua_fixture("degraded-out-of-sync-current");
        assert_eq!(v.status, HealthStatus::Degraded, "{}", v.message);
    }
}
