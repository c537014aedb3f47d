//! CloudNativePG `Database` (`databases.postgresql.cnpg.io`): does the PostgreSQL database
//! exist yet?
//!
//! The API server stores a Database CR at once; the database exists only when CNPG's instance
//! manager on the Cluster's primary has run `CREATE DATABASE` and recorded it in the status
//! (seed 001: Forgejo started in between and crashed). The status fields are those of
//! `DatabaseStatus` in cloudnative-pg `api/v1/database_types.go`: `applied` (*bool),
//! `message`, `observedGeneration`. There is no `status.ready` in any released CNPG, whatever
//! hand-written wait Jobs poll for.

use crate::json::At;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::generic::condition_status;
use crate::health::{Finding, Verdict};
use crate::resource::{InputError, Query};

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Params {
    /// Also require the referenced `Cluster` to be Ready (condition `Ready` = `True`), for
    /// consumers that need the database to be reachable right now, not just created.
    pub require_cluster_ready: bool,
}

impl Params {
    /// What a caller may set, as the HTTP API and `wavegate check -p` name it.
    pub(crate) const NAMES: &[&str] = &["requireClusterReady"];

    /// The Database alone unless told otherwise.
    pub(crate) fn new(require_cluster_ready: Option<bool>) -> Params {
        Params {
            require_cluster_ready: require_cluster_ready.unwrap_or(false),
        }
    }

    pub(crate) fn from_query(q: &Query) -> Result<Params, InputError> {
        Ok(Params::new(q.parse("requireClusterReady")?))
    }
}

/// The Cluster a Database lives in (`spec.cluster.name`, a LocalObjectReference: same
/// namespace as the Database).
pub(crate) fn cluster_name(database: &Value) -> Option<&str> {
    database.str_at("/spec/cluster/name")
}

/// The Database status a verdict was judged on, as annotation mode records it
/// (`wavegate.dev/judged-state`) and the Database health script renders it:
/// `applied=<true|false|>,observedGeneration=<n|>,message=<text>`. CNPG changes the status
/// without a new generation (a failure, the Cluster's deletion), so a stored verdict is
/// believed only while the status it was judged on is still there.
pub fn judged_status(database: &Value) -> String {
    let status = database.get("status");
    let field = |k: &str| status.and_then(|s| s.get(k));
    let applied = field("applied")
        .and_then(Value::as_bool)
        .map_or(String::new(), |b| b.to_string());
    let observed = field("observedGeneration")
        .and_then(Value::as_i64)
        .map_or(String::new(), |g| g.to_string());
    let message = field("message").and_then(Value::as_str).unwrap_or("");
    format!("applied={applied},observedGeneration={observed},message={message}")
}

/// What a CNPG object managed from its Cluster's primary makes: a `Database` or (CNPG 1.30) a
/// `DatabaseRole`. Both have `spec.cluster` and `spec.name`, and the same status
/// (`applied`, `message`, `observedGeneration`) set the same way: `SetAsReady`, `SetAsFailed`,
/// `SetAsUnknown` in api/v1/database_funcs.go and api/v1/databaserole_funcs.go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Managed {
    Database,
    Role,
}

impl Managed {
    fn kind(self) -> &'static str {
        match self {
            Managed::Database => "Database",
            Managed::Role => "DatabaseRole",
        }
    }

    /// What it is in PostgreSQL.
    fn word(self) -> &'static str {
        match self {
            Managed::Database => "database",
            Managed::Role => "role",
        }
    }
}

/// Judge Database `namespace/name`, given the Database and its Cluster as the API returns them.
pub fn check(
    namespace: &str,
    name: &str,
    database: Option<&Value>,
    cluster: Option<&Value>,
    params: &Params,
) -> Finding {
    judge(
        Managed::Database,
        namespace,
        name,
        database,
        cluster,
        params,
    )
}

/// Judge DatabaseRole `namespace/name` (CNPG 1.30), given it and its Cluster. Its reconciler
/// (internal/management/controller/databaserole_controller.go) follows the Database's: only
/// the Cluster's primary applies it, not during a switchover, nothing on a replica cluster
/// (`applied` unset, "waiting for the cluster to become primary", also after a demotion,
/// `reconcileAppliedRole`), failures retried every 30 s. `ensure: absent` is refused (by the
/// CRD's validation, and as a failure by the reconciler), so a role is Healthy only present.
pub fn check_role(
    namespace: &str,
    name: &str,
    role: Option<&Value>,
    cluster: Option<&Value>,
    params: &Params,
) -> Finding {
    judge(Managed::Role, namespace, name, role, cluster, params)
}
/// The password Secret version a DatabaseRole must have applied: the message of its
/// `PasswordSecretChange` condition, when its spec names a password Secret.
fn password_secret_change(role: &Value) -> Option<&str> {
    role.pointer("/spec/passwordSecret/name")?;
    role.array_at("/status/conditions")?
        .iter()
        .find(|c| c.str_at("/type") == Some("PasswordSecretChange"))
        .and_then(|c| c.text_at("/message"))
}

fn judge(
    managed: Managed,
    namespace: &str,
    name: &str,
    database: Option<&Value>,
    cluster: Option<&Value>,
    params: &Params,
) -> Finding {
    let (what, word) = (managed.kind(), managed.word());
    let id = format!("{namespace}/{name}");
    let Some(db) = database else {
        return Verdict::missing(format!("{what} {id} does not exist")).into();
    };
    if db.pointer("/metadata/deletionTimestamp").is_some() {
        return Verdict::progressing(format!("{what} {id} is being deleted")).into();
    }
    let Some(cluster_name) = cluster_name(db) else {
        return Verdict::unknown(format!("{what} {id} has no spec.cluster.name")).into();
    };
    let cluster_id = format!("{namespace}/{cluster_name}");
    // The Database reconciler runs inside the instance manager of the Cluster's primary
    // (internal/management/controller/database_controller.go), so without a Cluster nothing
    // reconciles the Database, and its status — `applied: true` included — is about a Cluster
    // that is gone: when the Cluster is not found the reconciler returns without touching the
    // status. The operator's Cluster reconciler may later mark such a Database
    // `applied: false`, "The orphan database object is not reconciled"
    // (internal/controller/objects_not_reconciled.go). Neither is Healthy, and neither is a
    // failure of the Database itself: Progressing, naming the Cluster, until it is back (a
    // recreate) or the gate's timeout says otherwise. Not Missing: for a hook, Argo CD treats
    // Missing as done.
    let Some(cluster) = cluster else {
        let why = if db
            .get("status")
            .and_then(Value::as_object)
            .is_some_and(|s| !s.is_empty())
        {
            format!(
                " (CNPG reconciles a {what} from its Cluster's primary, so status.applied is \
                 about a Cluster that is gone)"
            )
        } else {
            " yet".to_string()
        };
        return Verdict::progressing(format!(
            "{what} {id}: Cluster {cluster_id} does not exist{why}"
        ))
        .into();
    };
    // A Cluster being deleted takes its PostgreSQL databases with it (its instances and
    // volumes go), whatever the Database's status says.
    if cluster.pointer("/metadata/deletionTimestamp").is_some() {
        return Verdict::progressing(format!(
            "{what} {id}: Cluster {cluster_id} is being deleted, and the PostgreSQL {word} \
             with it (status.applied is about a Cluster that is going away)"
        ))
        .into();
    }
    let cluster_problem = cluster_not_ready(&cluster_id, cluster);
    let waiting = |reason: String| -> Finding {
        match &cluster_problem {
            Some(problem) => Verdict::progressing(format!("{what} {id}: {reason}; {problem}")),
            None => Verdict::progressing(format!("{what} {id}: {reason}")),
        }
        .into()
    };

    let Some(generation) = db.i64_at("/metadata/generation") else {
        // The API server always sets generation on custom resources; without it nothing can
        // prove the status is current.
        return Verdict::unknown(format!("{what} {id} has no metadata.generation")).into();
    };
    let status = db
        .get("status")
        .and_then(Value::as_object)
        .filter(|s| !s.is_empty());
    let applied = status
        .and_then(|s| s.get("applied"))
        .and_then(Value::as_bool);
    let message = status
        .and_then(|s| s.get("message"))
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty());

    // A replica cluster is read-only: its databases are the primary cluster's, streamed to it.
    // CNPG's instance manager applies nothing there; since CNPG 1.30 it also withdraws what it
    // applied before a demotion, leaving `applied` unset with "waiting for the cluster to
    // become primary" and `observedGeneration` as it was, so the Database keeps ownership
    // (`handleReplicaRoleTransition` in internal/management/controller/common.go, called by
    // database_controller.go). Older CNPG left the demoted Database's `applied: true` in place
    // forever, and 1.30 does until the demoted primary's next reconcile. None of these is
    // Healthy: a consumer started now could not write the database, and CNPG itself no longer
    // vouches for it. Not Degraded: nothing failed, and a promotion applies it again. Not
    // Unknown: CNPG is not in doubt, and a hook gate answering Unknown fails the sync.
    // Progressing — what Argo CD 3.6's own Database script says of `applied` unset — so the
    // wave waits for the promotion or the gate's timeout.
    if is_replica(cluster) {
        let reported = match (applied, message) {
            (None, Some(m)) => format!("CNPG reports applied unset: {m:?}"),
            (None, None) => "CNPG has not applied it".to_string(),
            (Some(a), m) => format!(
                "CNPG's applied: {a}{} is from before it saw the Cluster as a replica",
                m.map(|m| format!(" ({m:?})")).unwrap_or_default()
            ),
        };
        return waiting(format!(
            "Cluster {cluster_id} is a replica cluster (spec.replica), read-only: CNPG applies \
             no {what} there, the {word} is the primary cluster's; {reported}; it is \
             applied again once the Cluster is promoted"
        ));
    }

    let Some(status) = status else {
        return waiting(format!(
            "CNPG has not applied the {word} yet (status empty)"
        ));
    };
    let observed = status.get("observedGeneration").and_then(Value::as_i64);

    // CNPG's `SetAsFailed` (api/v1/database_funcs.go) sets applied=false and the error but
    // leaves observedGeneration alone — only `SetAsReady` records the generation. So a failure
    // never carries "the current generation"; applied=false is the verdict on the spec CNPG
    // last tried, which is the current one except for the moment between a spec change and
    // the next reconcile. The caller's grace absorbs that moment, and CNPG retries every 30 s
    // (`databaseReconciliationInterval`), so only a lasting failure becomes Degraded.
    if applied == Some(false) {
        // A failure is definite only once the actor could have acted: the Database reconciler
        // does nothing unless its instance is the Cluster's `currentPrimary` and no switchover
        // is pending (`currentPrimary == targetPrimary`). A Cluster recreated under the same
        // name and still bootstrapping inherits the `applied: false` that CNPG wrote when the
        // old one was deleted ("cluster resource has been deleted, skipping reconciliation");
        // until the new primary runs, that is the old Cluster's story, not a failure.
        if let Some(why) = no_acting_primary(&cluster_id, cluster) {
            return waiting(format!(
                "CNPG reports applied: false ({}), but {why}, and only the primary's instance \
                 manager applies a {what}",
                message.unwrap_or("no message")
            ));
        }
        return Finding::Persistent {
            message: format!(
                "{what} {id}: CNPG failed to apply the {word}: {}",
                message.unwrap_or("(no message)")
            ),
        };
    }

    match observed {
        Some(o) if o == generation => {}
        Some(o) if o < generation => {
            return waiting(format!(
                "CNPG has not reconciled generation {generation} yet (observed {o})"
            ));
        }
        Some(o) => {
            return waiting(format!(
                "status.observedGeneration {o} does not match generation {generation}"
            ));
        }
        None => {
            return waiting(format!(
                "CNPG has not reconciled generation {generation} yet (no observedGeneration)"
            ));
        }
    }

    if applied != Some(true) {
        // `SetAsUnknown` clears applied and keeps observedGeneration, e.g. "waiting for the
        // cluster to become primary" after a demotion: once the Cluster is promoted, CNPG
        // applies it again (`handleReplicaRoleTransition` proceeds while applied is not true).
        let why = message.map_or(String::new(), |m| format!(": {m}"));
        return waiting(format!(
            "CNPG has not applied the {word} yet (applied unset{why})"
        ));
    }

    // A role's password lives in a Secret, outside its spec: a new password changes no
    // generation. The operator records the Secret's resourceVersion as the message of the
    // `PasswordSecretChange` condition (internal/controller/databaserole_controller.go,
    // `reconcilePasswordCondition`), and the instance manager counts the role reconciled only
    // while the version it applied, `status.secretResourceVersion`, is that one
    // (internal/management/controller/databaserole_controller.go, `isAlreadyReconciled`).
    // Until then `applied: true` is about the old password, which a consumer of the new one
    // cannot log in with.
    if managed == Managed::Role
        && let Some(wanted) = password_secret_change(db)
    {
        let applied_version = db.text_at("/status/secretResourceVersion");
        if applied_version != Some(wanted) {
            return waiting(format!(
                "its password Secret changed (version {wanted}) and CNPG has applied {}",
                applied_version.map_or("no version of it".to_string(), |v| format!("version {v}"))
            ));
        }
    }

    // `applied: true` is the word of the primary that applied it, and a Cluster with no
    // `status.currentPrimary` has never had one: the instance manager records itself there
    // when its primary starts (internal/management/controller/instance_startup.go), and CNPG
    // never clears it. So this status was written for an older Cluster of the same name,
    // deleted and recreated before the operator's Cluster reconciler saw it gone (only a
    // reconcile that finds no Cluster marks its Databases `applied: false`,
    // internal/controller/cluster_controller.go → notifyDeletionToOwnedResources): the new
    // Cluster, still bootstrapping, has no database yet. (A Cluster that had a primary keeps
    // the name through a switchover, and replicas carry the database, so only "never had a
    // primary" says the status is about another Cluster.)
    if cluster.text_at("/status/currentPrimary").is_none() {
        let phase = cluster
            .text_at("/status/phase")
            .map(|p| format!(", phase {p:?}"))
            .unwrap_or_default();
        return Verdict::progressing(format!(
            "{what} {id}: CNPG reports applied: true, but Cluster {cluster_id} has never had \
             a primary{phase}, so that status is about an older Cluster of the same name and \
             this one has not created the {word} yet"
        ))
        .into();
    }

    // The same, once the new Cluster has a primary: CNPG's Database reconciler returns at
    // once while `generation == status.observedGeneration`
    // (internal/management/controller/database_controller.go), so it never applies a Database
    // whose status an older Cluster of the same name left behind. The API server dates every
    // status write (`metadata.managedFields`, subresource `status`): `applied: true` last
    // written before this Cluster was created is about that older Cluster, and stays so until
    // the Database's spec changes. (The same second is not proof: timestamps are whole
    // seconds.)
    if let (Some(written), Some(created)) = (status_written(db), created(cluster))
        && written < created
    {
        return Verdict::progressing(format!(
            "{what} {id}: CNPG reports applied: true, but that status was written at \
             {written}, before Cluster {cluster_id} was created at {created}: it is about an \
             older Cluster of the same name, and CNPG does not apply a {what} again while its \
             generation is unchanged; change the {what}'s spec (or recreate it) so that this \
             Cluster creates the {word}"
        ))
        .into();
    }

    if params.require_cluster_ready
        && let Some(problem) = cluster_problem
    {
        return Verdict::progressing(format!(
            "{what} {id} is applied, but {problem} (requireClusterReady)"
        ))
        .into();
    }

    let pg_name = db.str_at("/spec/name").unwrap_or(name);
    // `ensure: absent` makes CNPG run DROP DATABASE and then mark the object applied: the
    // desired state ("no such database") is reached, which is what a wave waits for.
    if managed == Managed::Database && db.str_at("/spec/ensure") == Some("absent") {
        return Verdict::healthy(format!(
            "{what} {id}: PostgreSQL database {pg_name} dropped from Cluster {cluster_id} \
             (spec.ensure: absent, generation {generation} applied)"
        ))
        .into();
    }
    Verdict::healthy(format!(
        "{what} {id}: PostgreSQL {word} {pg_name} exists on Cluster {cluster_id} \
         (generation {generation} applied)"
    ))
    .into()
}

/// Why no primary of the Cluster could be applying the Database right now, or `None` when one
/// could: `status.currentPrimary` is set, equals `status.targetPrimary` (the Database reconciler
/// in internal/management/controller/database_controller.go requeues during a switchover) and
/// at least one instance is ready.
fn no_acting_primary(cluster_id: &str, cluster: &Value) -> Option<String> {
    let text = |p: &str| cluster.text_at(p);
    let current = text("/status/currentPrimary");
    let target = text("/status/targetPrimary");
    let ready = cluster.i64_at("/status/readyInstances").unwrap_or(0);
    let phase = text("/status/phase")
        .map(|p| format!(", phase {p:?}"))
        .unwrap_or_default();
    match current {
        None => Some(format!("Cluster {cluster_id} has no primary yet{phase}")),
        Some(c) if target.is_some_and(|t| t != c) => Some(format!(
            "Cluster {cluster_id} is switching its primary from {c} to {}{phase}",
            target.unwrap_or_default()
        )),
        Some(c) if ready < 1 => Some(format!(
            "Cluster {cluster_id} has no ready instance (primary {c}{phase})"
        )),
        Some(_) => None,
    }
}

/// Whether the Cluster is a replica cluster, as CNPG's `Cluster.IsReplica`
/// (api/v1/cluster_funcs.go) decides: `spec.replica.enabled` when set; otherwise (distributed
/// topology) unless `spec.replica.primary` names this Cluster (`spec.replica.self`, default its
/// name).
fn is_replica(cluster: &Value) -> bool {
    let Some(replica) = cluster.pointer("/spec/replica").filter(|r| r.is_object()) else {
        return false;
    };
    if let Some(enabled) = replica.get("enabled").and_then(Value::as_bool) {
        return enabled;
    }
    let me = replica
        .str_at("/self")
        .filter(|s| !s.is_empty())
        .or_else(|| cluster.str_at("/metadata/name"))
        .unwrap_or_default();
    replica.str_at("/primary").unwrap_or_default() != me
}

/// When the object's status was last written, as the API server records it: the newest
/// `metadata.managedFields` entry of the `status` subresource.
fn status_written(object: &Value) -> Option<Timestamp> {
    object
        .array_at("/metadata/managedFields")?
        .iter()
        .filter(|f| f.get("subresource").and_then(Value::as_str) == Some("status"))
        .filter_map(|f| f.get("time")?.as_str()?.parse::<Timestamp>().ok())
        .max()
}

fn created(object: &Value) -> Option<Timestamp> {
    object.str_at("/metadata/creationTimestamp")?.parse().ok()
}

/// Why the Cluster is not Ready, or `None` when it is. Readiness is CNPG's own condition
/// `Ready` (`ConditionClusterReady` in api/v1/cluster_types.go) being `True`; the instance
/// counts only explain it.
fn cluster_not_ready(cluster_id: &str, cluster: &Value) -> Option<String> {
    if condition_status(cluster, "Ready") == Some("True") {
        return None;
    }
    let wanted = cluster.i64_at("/spec/instances");
    let ready = cluster.i64_at("/status/readyInstances").unwrap_or(0);
    let mut details = Vec::new();
    if let Some(wanted) = wanted {
        details.push(format!("{ready} of {wanted} instances ready"));
    }
    if let Some(phase) = cluster.str_at("/status/phase") {
        details.push(format!("phase {phase:?}"));
    }
    let details = if details.is_empty() {
        String::new()
    } else {
        format!(" ({})", details.join("; "))
    };
    Some(format!("Cluster {cluster_id} is not Ready{details}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;

    use crate::checks::fixtures::object as fixture;

    const NEW: &str = include_str!("../../tests/fixtures/cnpg/database-new.yaml");
    const APPLIED: &str = include_str!("../../tests/fixtures/cnpg/database-applied.yaml");
    const FAILED: &str = include_str!("../../tests/fixtures/cnpg/database-failed.yaml");
    const STALE: &str = include_str!("../../tests/fixtures/cnpg/database-stale.yaml");
    const REPLICA: &str = include_str!("../../tests/fixtures/cnpg/database-replica-cluster.yaml");
    const ABSENT: &str = include_str!("../../tests/fixtures/cnpg/database-ensure-absent.yaml");
    const CLUSTER_READY: &str = include_str!("../../tests/fixtures/cnpg/cluster-ready.yaml");
    const CLUSTER_NOT_READY: &str =
        include_str!("../../tests/fixtures/cnpg/cluster-not-ready.yaml");
    const DEMOTED: &str = include_str!("../../tests/fixtures/cnpg/database-demoted.yaml");
    const CLUSTER_DEMOTED: &str = include_str!("../../tests/fixtures/cnpg/cluster-demoted.yaml");
    const ROLE: &str = include_str!("../../tests/fixtures/cnpg/databaserole-applied.yaml");
    const ROLE_FAILED: &str =
        include_str!("../../tests/fixtures/cnpg/databaserole-missing-secret.yaml");

    fn judge(db: &str, cluster: Option<&str>, require_cluster_ready: bool) -> Finding {
        let db = fixture(db);
        let cluster = cluster.map(fixture);
        let name = db["metadata"]["name"].as_str().unwrap().to_owned();
        check(
            "ddb",
            &name,
            Some(&db),
            cluster.as_ref(),
            &Params {
                require_cluster_ready,
            },
        )
    }

    fn settled(finding: Finding) -> Verdict {
        match finding {
            Finding::Settled(v) => v,
            Finding::Persistent { message } => panic!("expected a settled verdict, got {message}"),
        }
    }

    #[test]
    fn cluster_name_reads_spec_cluster_name() {
        assert_eq!(cluster_name(&fixture(NEW)), Some("ddb-cluster"));
        assert_eq!(cluster_name(&serde_json::json!({"spec": {}})), None);
    }

    #[test]
    fn missing_database_is_missing() {
        let v = settled(check("ddb", "forgejo", None, None, &Params::default()));
        assert_eq!(v, Verdict::missing("Database ddb/forgejo does not exist"));
    }

    #[test]
    fn database_cr_just_stored_is_not_healthy() {
        let v = settled(judge(NEW, Some(CLUSTER_READY), false));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: CNPG has not applied the database yet (status empty)"
            )
        );
    }

    #[test]
    fn applied_at_current_generation_is_healthy() {
        let v = settled(judge(APPLIED, Some(CLUSTER_READY), false));
        assert_eq!(
            v,
            Verdict::healthy(
                "Database ddb/forgejo: PostgreSQL database forgejo exists on Cluster \
                 ddb/ddb-cluster (generation 1 applied)"
            )
        );
    }

    #[test]
    fn applied_for_an_older_generation_is_not_healthy() {
        let v = settled(judge(STALE, Some(CLUSTER_READY), false));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: CNPG has not reconciled generation 3 yet (observed 2)"
            )
        );
    }

    #[test]
    fn failed_create_database_is_persistent_with_cnpg_message() {
        let finding = judge(FAILED, Some(CLUSTER_READY), false);
        assert_eq!(
            finding,
            Finding::Persistent {
                message: "Database ddb/forgejo: CNPG failed to apply the database: \
                          ERROR: role \"forgejo\" does not exist (SQLSTATE 42704)"
                    .into()
            }
        );
    }

    #[test]
    fn failure_left_from_an_older_generation_is_still_persistent_not_healthy() {
        // CNPG never records observedGeneration on failure, so applied=false wins over any
        // generation arithmetic.
        let mut db = fixture(FAILED);
        db["metadata"]["generation"] = 4.into();
        db["status"]["observedGeneration"] = 2.into();
        let finding = check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&fixture(CLUSTER_READY)),
            &Params::default(),
        );
        assert!(matches!(finding, Finding::Persistent { .. }));
    }

    #[test]
    fn replica_cluster_leaves_applied_unset_and_is_progressing() {
        let mut db = fixture(REPLICA);
        db["status"]["observedGeneration"] = 1.into();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&fixture(CLUSTER_READY)),
            &Params::default(),
        ));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: CNPG has not applied the database yet \
                 (applied unset: waiting for the cluster to become primary)"
            )
        );
    }

    #[test]
    fn database_withdrawn_after_its_cluster_was_demoted_is_progressing_not_healthy() {
        let v = settled(judge(DEMOTED, Some(CLUSTER_DEMOTED), false));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: Cluster ddb/ddb-cluster is a replica cluster \
                 (spec.replica), read-only: CNPG applies no Database there, the database is the \
                 primary cluster's; CNPG reports applied unset: \"waiting for the cluster to \
                 become primary\"; it is applied again once the Cluster is promoted"
            )
        );
    }

    #[test]
    fn applied_true_left_on_a_demoted_cluster_is_not_healthy() {
        // CNPG before 1.30 never re-evaluated an applied Database after a demotion, and 1.30
        // does so only on the demoted primary's next reconcile.
        let mut db = fixture(APPLIED);
        db["metadata"]["generation"] = 2.into();
        db["status"] = serde_json::json!({"applied": true, "observedGeneration": 2});
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&fixture(CLUSTER_DEMOTED)),
            &Params::default(),
        ));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message
                .contains("CNPG's applied: true is from before it saw the Cluster as a replica"),
            "{v}"
        );
    }

    #[test]
    fn applied_false_on_a_replica_cluster_is_never_a_failure() {
        // CNPG applies nothing on a replica, so a failure there is from before the demotion.
        let finding = check(
            "ddb",
            "forgejo",
            Some(&fixture(FAILED)),
            Some(&fixture(CLUSTER_DEMOTED)),
            &Params::default(),
        );
        assert_eq!(settled(finding).status, HealthStatus::Progressing);
    }

    #[test]
    fn withdrawn_database_after_the_promotion_waits_for_cnpg_to_apply_it_again() {
        let mut cluster = fixture(CLUSTER_DEMOTED);
        cluster["spec"]["replica"]["primary"] = "ddb-cluster".into();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&fixture(DEMOTED)),
            Some(&cluster),
            &Params::default(),
        ));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: CNPG has not applied the database yet \
                 (applied unset: waiting for the cluster to become primary)"
            )
        );
    }

    fn judge_role(role: &Value, cluster: &str) -> Finding {
        check_role(
            "ddb",
            "forgejo",
            Some(role),
            Some(&fixture(cluster)),
            &Params::default(),
        )
    }

    #[test]
    fn applied_role_is_healthy_and_named_as_a_role() {
        assert_eq!(
            settled(judge_role(&fixture(ROLE), CLUSTER_READY)),
            Verdict::healthy(
                "DatabaseRole ddb/forgejo: PostgreSQL role forgejo exists on Cluster \
                 ddb/ddb-cluster (generation 1 applied)"
            )
        );
    }

    #[test]
    fn role_without_its_password_secret_is_cnpgs_failure() {
        assert_eq!(
            judge_role(&fixture(ROLE_FAILED), CLUSTER_READY),
            Finding::Persistent {
                message: "DatabaseRole ddb/forgejo: CNPG failed to apply the role: Secret \
                          \"forgejo-role\" not found"
                    .into()
            }
        );
    }

    #[test]
    fn role_just_stored_or_stale_is_not_healthy() {
        let mut role = fixture(ROLE);
        role["status"] = Value::Null;
        let v = settled(judge_role(&role, CLUSTER_READY));
        assert_eq!(
            v,
            Verdict::progressing(
                "DatabaseRole ddb/forgejo: CNPG has not applied the role yet (status empty)"
            )
        );
        let mut role = fixture(ROLE);
        role["metadata"]["generation"] = 2.into();
        let v = settled(judge_role(&role, CLUSTER_READY));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
    }

    #[test]
    fn role_on_a_demoted_cluster_is_progressing_not_healthy() {
        // reconcileAppliedRole: the demoted primary reports applied unset, generation kept.
        let mut role = fixture(ROLE);
        role["status"] = serde_json::json!({"observedGeneration": 1,
            "message": "waiting for the cluster to become primary"});
        for role in [role, fixture(ROLE)] {
            let v = settled(judge_role(&role, CLUSTER_DEMOTED));
            assert_eq!(v.status, HealthStatus::Progressing, "{v}");
            assert!(
                v.message.contains(
                    "is a replica cluster (spec.replica), read-only: CNPG applies no \
                     DatabaseRole there, the role is the primary cluster's"
                ),
                "{v}"
            );
        }
    }

    #[test]
    fn role_with_ensure_absent_is_never_healthy_as_dropped() {
        // CNPG refuses ensure: absent for roles; an applied one (written before that rule) is
        // read as a role that exists, never as "dropped".
        let mut role = fixture(ROLE);
        role["spec"]["ensure"] = "absent".into();
        let v = settled(judge_role(&role, CLUSTER_READY));
        assert!(v.message.contains("exists on Cluster"), "{v}");
    }

    #[test]
    fn replica_cluster_is_read_as_cnpg_reads_it() {
        let with = |replica: Value| {
            let mut c = fixture(CLUSTER_READY);
            c["spec"]["replica"] = replica;
            is_replica(&c)
        };
        assert!(!is_replica(&fixture(CLUSTER_READY)));
        assert!(is_replica(&fixture(CLUSTER_DEMOTED)));
        // `enabled`, when set, wins over the distributed topology's fields.
        assert!(with(serde_json::json!({"enabled": true, "source": "eu"})));
        assert!(!with(
            serde_json::json!({"enabled": false, "primary": "eu"})
        ));
        // `self` defaults to the Cluster's name.
        assert!(!with(
            serde_json::json!({"primary": "ddb-cluster", "source": "eu"})
        ));
        assert!(with(serde_json::json!({"primary": "eu", "source": "eu"})));
        assert!(!with(
            serde_json::json!({"self": "us", "primary": "us", "source": "eu"})
        ));
        assert!(!with(Value::Null));
    }

    #[test]
    fn status_with_only_a_message_is_not_reconciled() {
        let v = settled(judge(REPLICA, Some(CLUSTER_READY), false));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(v.message.contains("no observedGeneration"), "{}", v.message);
    }

    #[test]
    fn missing_cluster_is_progressing_and_named() {
        let v = settled(judge(NEW, None, false));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: Cluster ddb/ddb-cluster does not exist yet"
            )
        );
    }

    #[test]
    fn applied_database_on_a_cluster_being_deleted_is_not_healthy() {
        // status.applied stays true while the Cluster under it goes away.
        let mut cluster = fixture(CLUSTER_READY);
        cluster["metadata"]["deletionTimestamp"] = "2025-12-19T17:00:00Z".into();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&fixture(APPLIED)),
            Some(&cluster),
            &Params::default(),
        ));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: Cluster ddb/ddb-cluster is being deleted, and the \
                 PostgreSQL database with it (status.applied is about a Cluster that is going \
                 away)"
            )
        );
    }

    #[test]
    fn applied_database_whose_cluster_is_gone_is_not_healthy() {
        let v = settled(judge(APPLIED, None, false));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: Cluster ddb/ddb-cluster does not exist (CNPG reconciles \
                 a Database from its Cluster's primary, so status.applied is about a Cluster \
                 that is gone)"
            )
        );
    }

    #[test]
    fn orphan_status_cnpg_writes_after_cluster_deletion_is_not_degraded() {
        // CNPG's Cluster reconciler marks the Databases of a deleted Cluster applied=false,
        // "The orphan database object is not reconciled" (objects_not_reconciled.go): the
        // Cluster being gone is the story, not a failure to apply.
        let mut db = fixture(APPLIED);
        db["status"]["applied"] = false.into();
        db["status"]["message"] = "The orphan database object is not reconciled".into();
        let finding = check("ddb", "forgejo", Some(&db), None, &Params::default());
        assert_eq!(settled(finding).status, HealthStatus::Progressing);
    }

    /// The Cluster deleted and recreated under the same name: CNPG marked the Database
    /// `applied: false`, "cluster resource has been deleted, skipping reconciliation", with
    /// `observedGeneration: 0`, and the new Cluster is still bootstrapping its primary.
    fn after_cluster_recreate() -> (Value, Value) {
        let mut db = fixture(APPLIED);
        db["status"] = serde_json::json!({"applied": false, "observedGeneration": 0,
            "message": "cluster resource has been deleted, skipping reconciliation"});
        let mut cluster = fixture(CLUSTER_READY);
        cluster["metadata"]["uid"] = "cluster-2".into();
        cluster["status"] = serde_json::json!({"instances": 1, "readyInstances": 0,
            "phase": "Setting up primary",
            "conditions": [{"type": "Ready", "status": "False"}]});
        (db, cluster)
    }

    #[test]
    fn applied_false_left_from_a_deleted_cluster_while_the_new_one_bootstraps_is_progressing() {
        let (db, cluster) = after_cluster_recreate();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&cluster),
            &Params::default(),
        ));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.contains(
                "Cluster ddb/ddb-cluster has no primary yet, phase \"Setting up primary\""
            ),
            "{v}"
        );
    }

    #[test]
    fn applied_false_during_a_switchover_or_without_a_ready_instance_is_progressing() {
        let (db, mut cluster) = after_cluster_recreate();
        cluster["status"]["currentPrimary"] = "ddb-cluster-1".into();
        cluster["status"]["targetPrimary"] = "ddb-cluster-2".into();
        cluster["status"]["readyInstances"] = 1.into();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&cluster),
            &Params::default(),
        ));
        assert!(v.message.contains("switching its primary"), "{v}");
        cluster["status"]["targetPrimary"] = "ddb-cluster-1".into();
        cluster["status"]["readyInstances"] = 0.into();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&cluster),
            &Params::default(),
        ));
        assert!(v.message.contains("has no ready instance"), "{v}");
    }

    #[test]
    fn applied_false_once_the_new_primary_runs_is_a_failure_again() {
        // The primary had its chance: an older CNPG that left observedGeneration alone never
        // reconciles this Database again (it counts as up to date), which the user must fix.
        let (db, mut cluster) = after_cluster_recreate();
        cluster["status"]["currentPrimary"] = "ddb-cluster-1".into();
        cluster["status"]["targetPrimary"] = "ddb-cluster-1".into();
        cluster["status"]["readyInstances"] = 1.into();
        let finding = check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&cluster),
            &Params::default(),
        );
        assert!(matches!(finding, Finding::Persistent { .. }), "{finding:?}");
    }

    #[test]
    fn applied_true_left_from_a_deleted_cluster_while_the_new_one_bootstraps_is_progressing() {
        // Deleted and recreated before CNPG's operator noticed: nothing rewrote the status, and
        // the new Cluster has no primary yet, so no database either.
        let (_, cluster) = after_cluster_recreate();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&fixture(APPLIED)),
            Some(&cluster),
            &Params::default(),
        ));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo: CNPG reports applied: true, but Cluster ddb/ddb-cluster \
                 has never had a primary, phase \"Setting up primary\", so that status is about \
                 an older Cluster of the same name and this one has not created the database yet"
            )
        );
    }

    /// The Database's status last written at `written` (the API server's managedFields), its
    /// Cluster created at `created` and running a primary.
    fn written_and_created(written: &str, created: &str) -> (Value, Value) {
        let mut db = fixture(APPLIED);
        db["metadata"]["managedFields"] = serde_json::json!([
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-11-30T04:00:00Z"},
            {"manager": "instance-manager", "operation": "Update", "subresource": "status",
             "time": written}
        ]);
        let mut cluster = fixture(CLUSTER_READY);
        cluster["metadata"]["creationTimestamp"] = created.into();
        cluster["status"]["currentPrimary"] = "ddb-cluster-1".into();
        (db, cluster)
    }

    #[test]
    fn applied_true_written_before_the_cluster_was_recreated_is_progressing() {
        // Recreated before CNPG's operator noticed, and the new primary already runs: CNPG
        // will not apply this Database again (its generation is observed), so no database
        // exists on this Cluster.
        let (db, cluster) = written_and_created("2026-11-30T05:00:00Z", "2026-11-30T06:00:00Z");
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&cluster),
            &Params::default(),
        ));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.contains("written at 2026-11-30T05:00:00Z, before Cluster ddb/ddb-cluster was created at 2026-11-30T06:00:00Z"),
            "{v}"
        );
        assert!(v.message.contains("change the Database's spec"), "{v}");
    }

    #[test]
    fn applied_true_written_by_this_cluster_is_healthy() {
        for written in ["2026-11-30T06:00:07Z", "2026-11-30T06:00:00Z"] {
            let (db, cluster) = written_and_created(written, "2026-11-30T06:00:00Z");
            let v = settled(check(
                "ddb",
                "forgejo",
                Some(&db),
                Some(&cluster),
                &Params::default(),
            ));
            assert_eq!(v.status, HealthStatus::Healthy, "{written}: {v}");
        }
    }

    #[test]
    fn applied_database_during_a_switchover_stays_healthy() {
        // The Cluster had a primary: the database is on it and on its replicas.
        let mut cluster = fixture(CLUSTER_READY);
        cluster["status"]["targetPrimary"] = "ddb-cluster-2".into();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&fixture(APPLIED)),
            Some(&cluster),
            &Params::default(),
        ));
        assert_eq!(v.status, HealthStatus::Healthy, "{v}");
    }

    #[test]
    fn applied_database_on_unready_cluster_is_healthy_unless_required() {
        let v = settled(judge(APPLIED, Some(CLUSTER_NOT_READY), false));
        assert_eq!(v.status, HealthStatus::Healthy);
    }

    #[test]
    fn applied_database_waits_for_cluster_when_required() {
        let v = settled(judge(APPLIED, Some(CLUSTER_NOT_READY), true));
        assert_eq!(
            v,
            Verdict::progressing(
                "Database ddb/forgejo is applied, but Cluster ddb/ddb-cluster is not Ready \
                 (1 of 3 instances ready; phase \"Creating a new replica\") (requireClusterReady)"
            )
        );
        let v = settled(judge(APPLIED, Some(CLUSTER_READY), true));
        assert_eq!(v.status, HealthStatus::Healthy);
    }

    #[test]
    fn unready_cluster_is_mentioned_while_waiting_for_the_database() {
        let v = settled(judge(NEW, Some(CLUSTER_NOT_READY), false));
        assert_eq!(v.status, HealthStatus::Progressing);
        assert!(
            v.message
                .ends_with("; Cluster ddb/ddb-cluster is not Ready (1 of 3 instances ready; phase \"Creating a new replica\")"),
            "{}",
            v.message
        );
    }

    #[test]
    fn ensure_absent_applied_is_healthy_and_says_dropped() {
        let v = settled(judge(ABSENT, Some(CLUSTER_READY), false));
        assert_eq!(v.status, HealthStatus::Healthy);
        assert!(
            v.message
                .contains("PostgreSQL database temporal_visibility dropped"),
            "{}",
            v.message
        );
    }

    #[test]
    fn database_being_deleted_is_progressing() {
        let mut db = fixture(APPLIED);
        db["metadata"]["deletionTimestamp"] = "2025-12-19T17:00:00Z".into();
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&fixture(CLUSTER_READY)),
            &Params::default(),
        ));
        assert_eq!(
            v,
            Verdict::progressing("Database ddb/forgejo is being deleted")
        );
    }

    #[test]
    fn ready_field_from_the_seed_is_not_trusted() {
        // Seed 001's wait Job polled status.ready, which CNPG never sets.
        let mut db = fixture(NEW);
        db["status"] = serde_json::json!({"ready": true});
        let v = settled(check(
            "ddb",
            "forgejo",
            Some(&db),
            Some(&fixture(CLUSTER_READY)),
            &Params::default(),
        ));
        assert_eq!(v.status, HealthStatus::Progressing);
    }

    /// A rotated password Secret changes no generation: until the primary applied the version
    /// the operator recorded, `applied: true` is about the old password.
    #[test]
    fn role_whose_password_secret_changed_is_not_healthy_until_cnpg_applied_it() {
        let mut role = fixture(ROLE);
        let condition = |version: &str| {
            serde_json::json!([{"type": "PasswordSecretChange", "status": "True",
                "reason": "ChangeDetected", "message": version,
                "lastTransitionTime": "2026-12-03T18:00:00Z"}])
        };
        role["status"]["conditions"] = condition("4712");
        let v = settled(judge_role(&role, CLUSTER_READY));
        assert_eq!(v.status, HealthStatus::Progressing, "{v}");
        assert!(
            v.message.contains("version 4712") && v.message.contains("version 4711"),
            "{v}"
        );
        role["status"]["conditions"] = condition("4711");
        assert_eq!(
            settled(judge_role(&role, CLUSTER_READY)).status,
            HealthStatus::Healthy
        );
        // No password Secret in the spec: the condition says nothing about this role.
        role["spec"]
            .as_object_mut()
            .unwrap()
            .remove("passwordSecret");
        role["status"]["conditions"] = condition("4712");
        assert_eq!(
            settled(judge_role(&role, CLUSTER_READY)).status,
            HealthStatus::Healthy
        );
    }
}
