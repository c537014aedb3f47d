//! CloudNativePG 1.30's `DatabaseRole` through WaveGates, on the real local control plane with
//! the minimal DatabaseRole CRD (`tests/crds/`): wavegate runs with the installed RBAC
//! (`deploy/base`), and its judgement of the role follows the operator's status
//! (`DatabaseRoleStatus` in cloudnative-pg api/v1/databaserole_types.go: `applied`,
//! `observedGeneration`, `message`), which the test writes as CNPG's instance manager would.

use crate::cluster;
use crate::gates::{gate, gate_becomes, gates_api, installed_wavegate_client};

use cluster::{Wavegate, apply, eventually, patch_status};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn roles_ar() -> kube::discovery::ApiResource {
    cluster::api_resource("postgresql.cnpg.io", "v1", "DatabaseRole", "databaseroles")
}

fn role(ns: &str, name: &str, login: bool) -> Value {
    json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "DatabaseRole",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"name": name, "login": login, "cluster": {"name": "pg"}}})
}

/// A Cluster `pg` whose primary runs, as CNPG reports it: only a primary applies roles, so a
/// refusal is CNPG's answer rather than a Cluster still starting.
async fn running_cluster(admin: &kube::Client, ns: &str) {
    apply(
        admin,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "pg", "namespace": ns}, "spec": {"instances": 1}}),
    )
    .await;
    patch_status(
        admin,
        &cluster::api_resource("postgresql.cnpg.io", "v1", "Cluster", "clusters"),
        ns,
        "pg",
        json!({"instances": 1, "readyInstances": 1, "currentPrimary": "pg-1",
               "targetPrimary": "pg-1"}),
    )
    .await;
}

fn check_message(gate: &Value) -> &str {
    gate["status"]["checks"][0]["message"]
        .as_str()
        .unwrap_or("")
}

/// The role's Secret-less twin of seed 001: an app in the next wave logs in as a role the
/// operator has not created yet. The gate holds while the status is empty and while it is about
/// an older generation, is Healthy only once `applied: true` is recorded at the current one, and
/// a role CNPG refused is Degraded with CNPG's message.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn role_gate_is_healthy_only_when_cnpg_applied_the_current_generation() {
    let admin = cluster::client().await;
    let client = installed_wavegate_client().await;
    let ns = cluster::namespace(&admin, "gates-role").await;
    running_cluster(&admin, &ns).await;
    let forgejo = apply(&admin, role(&ns, "forgejo", true)).await;
    let first = forgejo.metadata.generation.expect("generation");
    apply(&admin, role(&ns, "nobody", true)).await;
    // detectMissingPasswordSecret's refusal: SetAsFailed, observedGeneration left alone.
    patch_status(
        &admin,
        &roles_ar(),
        &ns,
        "nobody",
        json!({"applied": false, "message": "Secret \"nobody-role\" not found"}),
    )
    .await;

    let config = EvalConfig {
        cnpg_grace: Duration::from_secs(2),
        verdict_ttl: Duration::from_millis(1),
        ..EvalConfig::default()
    };
    let wg = Wavegate::start_in(client.clone(), config, &[&ns])
        .await
        .with_gates(Duration::from_secs(1));
    apply(
        &admin,
        gate(
            &ns,
            "roles-created",
            json!({"checks": [{"name": "forgejo-role", "cnpgDatabaseRole": {"name": "forgejo"}}]}),
        ),
    )
    .await;
    apply(
        &admin,
        gate(
            &ns,
            "role-refused",
            json!({"checks": [{"name": "nobody-role", "cnpgDatabaseRole": {"name": "nobody"}}]}),
        ),
    )
    .await;

    let g = gate_becomes(&client, &ns, "roles-created", "Progressing").await;
    assert!(
        check_message(&g).contains("CNPG has not applied the role yet (status empty)"),
        "{g}"
    );

    patch_status(
        &admin,
        &roles_ar(),
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": first}),
    )
    .await;
    let g = gate_becomes(&client, &ns, "roles-created", "Healthy").await;
    assert!(
        check_message(&g).contains("PostgreSQL role forgejo exists on Cluster"),
        "{g}"
    );

    // A new spec: the status still says applied, but for the generation before.
    let changed = apply(&admin, role(&ns, "forgejo", false)).await;
    let second = changed.metadata.generation.expect("generation");
    assert!(second > first, "a spec change makes a new generation");
    let g = gate_becomes(&client, &ns, "roles-created", "Progressing").await;
    assert!(
        check_message(&g).contains(&format!(
            "CNPG has not reconciled generation {second} yet (observed {first})"
        )),
        "{g}"
    );
    patch_status(
        &admin,
        &roles_ar(),
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": second}),
    )
    .await;
    gate_becomes(&client, &ns, "roles-created", "Healthy").await;

    let g = gate_becomes(&client, &ns, "role-refused", "Degraded").await;
    assert!(
        check_message(&g)
            .contains("CNPG failed to apply the role: Secret \"nobody-role\" not found"),
        "{g}"
    );
    // The HTTP API says the same of the role itself.
    let v = wg
        .health("databaseroles.postgresql.cnpg.io", &ns, "nobody", "")
        .await;
    assert_eq!(v["status"], "Degraded", "{v}");
}

/// The CRD's CEL rule counts `cnpgDatabaseRole` among the kinds: the API server refuses a check
/// that names a Database and a role at once, and stores one that names only the role.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn api_server_refuses_a_check_naming_a_database_and_a_role() {
    let admin = cluster::client().await;
    let ns = cluster::namespace(&admin, "gates-role-cel").await;
    let gates = gates_api(&admin, &ns);
    let ssa = PatchParams::apply("wavegate-test").force();
    let both = gate(
        &ns,
        "both",
        json!({"checks": [{"name": "db", "cnpgDatabase": {"name": "forgejo"},
                           "cnpgDatabaseRole": {"name": "forgejo"}}]}),
    );
    let err = gates
        .patch("both", &ssa, &Patch::Apply(&both))
        .await
        .expect_err("two kinds in one check must be refused");
    assert!(
        err.to_string()
            .contains("each check must set exactly one of service, cnpgDatabase, cnpgDatabaseRole"),
        "{err}"
    );
    let one = gate(
        &ns,
        "one",
        json!({"checks": [{"name": "role", "cnpgDatabaseRole": {"name": "forgejo"}}]}),
    );
    let stored = gates
        .patch("one", &ssa, &Patch::Apply(&one))
        .await
        .expect("a check naming only the role is stored");
    assert_eq!(
        stored.data["spec"]["checks"][0]["cnpgDatabaseRole"]["name"],
        "forgejo"
    );
}

/// A wavegate whose RBAC lacks `databaseroles` (an install from before it checked them) cannot
/// read the role: an applied role is then never Healthy, and the gate says why.
#[tokio::test]
#[ignore = "needs the local control plane"]
async fn role_wavegate_may_not_read_is_never_healthy() {
    let admin = cluster::client().await;
    // The installed ClusterRole, which this test copies without databaseroles.
    installed_wavegate_client().await;
    let ns = cluster::namespace(&admin, "gates-role-blind").await;
    running_cluster(&admin, &ns).await;
    let forgejo = apply(&admin, role(&ns, "forgejo", true)).await;
    patch_status(
        &admin,
        &roles_ar(),
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": forgejo.metadata.generation}),
    )
    .await;

    let blind = "wavegate-e2e-without-databaseroles";
    let cluster_roles: Api<ClusterRole> = Api::all(admin.clone());
    let installed = cluster_roles
        .get("wavegate")
        .await
        .expect("ClusterRole wavegate");
    let mut rules = installed.rules.clone().unwrap_or_default();
    let mut removed = false;
    for rule in &mut rules {
        if let Some(resources) = rule.resources.as_mut() {
            let before = resources.len();
            resources.retain(|r| r != "databaseroles");
            removed |= resources.len() != before;
        }
    }
    assert!(removed, "the installed ClusterRole grants databaseroles");
    let without = ClusterRole {
        metadata: ObjectMeta {
            name: Some(blind.into()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
        ..ClusterRole::default()
    };
    let ssa = PatchParams::apply("wavegate-test").force();
    cluster_roles
        .patch(blind, &ssa, &Patch::Apply(&without))
        .await
        .expect("apply the ClusterRole without databaseroles");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": blind, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": blind},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": blind}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .patch(blind, &ssa, &Patch::Apply(&binding))
        .await
        .expect("bind it in the test's namespace");
    let mut config = kube::Config::infer().await.expect("KUBECONFIG");
    config.auth_info.impersonate = Some(blind.into());
    let client = kube::Client::try_from(config).expect("impersonating client");

    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns])
        .await
        .with_gates(Duration::from_secs(1));
    apply(
        &admin,
        gate(
            &ns,
            "roles-created",
            json!({"checks": [{"name": "forgejo-role", "cnpgDatabaseRole": {"name": "forgejo"}}]}),
        ),
    )
    .await;
    let v = eventually(
        Duration::from_secs(30),
        "the refused read is reported",
        || async {
            let v = wg
                .health("databaseroles.postgresql.cnpg.io", &ns, "forgejo", "")
                .await;
            if v["message"].as_str().is_some_and(|m| m.contains("RBAC")) {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert_ne!(v["status"], "Healthy", "{v}");
    let gates = gates_api(&admin, &ns);
    let g = eventually(Duration::from_secs(30), "the gate judged", || async {
        let g = serde_json::to_value(
            gates
                .get("roles-created")
                .await
                .map_err(|e| e.to_string())?,
        )
        .unwrap();
        if g["status"]["observedGeneration"] == g["metadata"]["generation"]
            && check_message(&g).contains("RBAC")
        {
            Ok(g)
        } else {
            Err(g["status"].to_string())
        }
    })
    .await;
    assert_eq!(g["status"]["health"]["status"], "Progressing", "{g}");
    // Still not Healthy a few resyncs later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let g = serde_json::to_value(gates.get("roles-created").await.unwrap()).unwrap();
    assert_ne!(g["status"]["health"]["status"], "Healthy", "{g}");
}
