//! WaveGates end to end, as installed: `deploy/base` applied to the real local control plane,
//! wavegate running with its own ServiceAccount's token (so the RBAC is proven sufficient and
//! minimal), the seed scenarios turning truly healthy, and each gate's live object run through
//! Argo CD's Lua VM: Argo CD's verdict must equal the `status.health` wavegate wrote.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/crdb_standin.rs"]
mod crdb_standin;

use cluster::{Wavegate, apply, eventually, patch_status, pod, set_pod_ready};
use crdb_standin::{CrdbStandin, NodeState};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn kubectl(args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("kubectl {args:?}: {e} (kubectl must be on PATH)"));
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl apply -k deploy/base` once per test binary, then a client that authenticates with
/// a token minted for the `wavegate` ServiceAccount through the TokenRequest API.
async fn installed_wavegate_client() -> kube::Client {
    static TOKEN: OnceLock<String> = OnceLock::new();
    let _admin = cluster::client().await;
    let token = TOKEN.get_or_init(|| {
        let base = repo().join("deploy/base");
        kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-k",
            base.to_str().unwrap(),
        ]);
        kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/wavegates.wavegate.dev",
        ]);
        kubectl(&[
            "-n",
            "wavegate",
            "create",
            "token",
            "wavegate",
            "--duration=1h",
        ])
        .trim()
        .to_string()
    });
    let mut kubeconfig = Kubeconfig::read().expect("KUBECONFIG");
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.token = Some(token.clone().into());
            auth.client_certificate_data = None;
            auth.client_key_data = None;
        }
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The luahealth CLI of the gopher-lua harness, built once.
fn luahealth() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = std::env::temp_dir().join("wavegate-luahealth");
        let status = Command::new("go")
            .args(["build", "-o", out.to_str().unwrap(), "./cmd/luahealth"])
            .current_dir(repo().join("argocd/lua-harness"))
            .status()
            .expect("go must be on PATH to build the Lua harness");
        assert!(
            status.success(),
            "building argocd/lua-harness/cmd/luahealth failed"
        );
        out
    })
}

/// Argo CD's verdict on a live WaveGate, from the shipped health.lua in Argo CD's sandbox.
fn argo_cd_health(gate: &Value) -> Value {
    let script = repo().join("argocd/resource_customizations/wavegate.dev/WaveGate/health.lua");
    let obj = std::env::temp_dir().join(format!(
        "wavegate-gate-{}-{}.json",
        gate["metadata"]["namespace"].as_str().unwrap(),
        gate["metadata"]["name"].as_str().unwrap()
    ));
    std::fs::write(&obj, gate.to_string()).unwrap();
    let out = Command::new(luahealth())
        .args([
            "--script",
            script.to_str().unwrap(),
            "--object",
            obj.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "luahealth failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn gates_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = cluster::api_resource("wavegate.dev", "v1alpha1", "WaveGate", "wavegates");
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Wait until the live gate's `status.health.status` is `want` at its current generation, then
/// check Argo CD's Lua verdict on that same object equals it.
async fn gate_becomes(client: &kube::Client, ns: &str, name: &str, want: &str) -> Value {
    let api = gates_api(client, ns);
    let gate = eventually(
        Duration::from_secs(30),
        &format!("WaveGate {ns}/{name} {want}"),
        || async {
            let g = serde_json::to_value(api.get(name).await.map_err(|e| e.to_string())?).unwrap();
            let current = g["status"]["observedGeneration"] == g["metadata"]["generation"];
            if current && g["status"]["health"]["status"] == want {
                Ok(g)
            } else {
                Err(g["status"].to_string())
            }
        },
    )
    .await;
    let argo = argo_cd_health(&gate);
    let health = &gate["status"]["health"];
    assert_eq!(
        (&argo["status"], &argo["message"]),
        (&health["status"], &health["message"]),
        "Argo CD's Lua verdict must equal wavegate's status.health"
    );
    gate
}

fn gate(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

#[tokio::test]
async fn service_account_rbac_is_sufficient_and_minimal() {
    let client = installed_wavegate_client().await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::all(client.clone());
    let err = secrets.list(&ListParams::default()).await.unwrap_err();
    assert!(err.to_string().contains("forbidden"), "{err}");
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    let err = services
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forbidden"), "{err}");
    // What the checks need is allowed.
    services.list(&ListParams::default()).await.unwrap();
    gates_api(&client, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
}

/// Seed 001 through gates: the Database gate and the Service gate hold until the operator has
/// applied the database and the selector is fixed; a gate past its timeout is Degraded.
#[tokio::test]
async fn gates_follow_seed_001_to_healthy_and_time_out_to_degraded() {
    let admin = cluster::client().await;
    let client = installed_wavegate_client().await;
    let ns = cluster::namespace(&admin, "gates-seed001").await;
    pod(
        &admin,
        &ns,
        "forgejo-0",
        // As the chart labels it (tests/scenarios/seed-001-forgejo.yaml): the release name
        // `forgejo` under app.kubernetes.io/instance is what makes it a near match.
        json!({"app": "gitea", "app.kubernetes.io/name": "gitea",
               "app.kubernetes.io/instance": "forgejo"}),
    )
    .await;
    set_pod_ready(&admin, &ns, "forgejo-0", "10.244.2.9", true).await;
    let service = |app: &str| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "forgejo", "namespace": ns},
               "spec": {"selector": {"app": app}, "ports": [{"port": 3000}]}})
    };
    apply(&admin, service("forgejo")).await;
    apply(
        &admin,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": ns}, "spec": {"instances": 1}}),
    )
    .await;
    let db = apply(
        &admin,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Database",
        "metadata": {"name": "forgejo", "namespace": ns},
        "spec": {"name": "forgejo", "owner": "forgejo", "cluster": {"name": "pg"}}}),
    )
    .await;

    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns])
        .await
        .with_gates(Duration::from_secs(1));
    apply(
        &admin,
        gate(
            &ns,
            "databases-created",
            json!({"checks": [{"name": "forgejo-db", "cnpgDatabase": {"name": "forgejo"}}]}),
        ),
    )
    .await;
    apply(&admin, gate(&ns, "forgejo-serving",
        json!({"checks": [{"name": "forgejo-http", "service": {"name": "forgejo", "minReady": 1}}]}))).await;
    apply(
        &admin,
        gate(
            &ns,
            "never-ready",
            json!({"timeout": "2s",
        "checks": [{"name": "absent", "service": {"name": "not-there"}}]}),
        ),
    )
    .await;

    let g = gate_becomes(&client, &ns, "databases-created", "Progressing").await;
    assert!(
        g["status"]["checks"][0]["message"]
            .as_str()
            .unwrap()
            .contains("forgejo"),
        "{g}"
    );
    let g = gate_becomes(&client, &ns, "forgejo-serving", "Progressing").await;
    assert!(
        g["status"]["health"]["message"]
            .as_str()
            .unwrap()
            .contains("gitea"),
        "{g}"
    );
    assert_eq!(g["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(g["status"]["conditions"][0]["status"], "False");

    let db_ar = cluster::api_resource("postgresql.cnpg.io", "v1", "Database", "databases");
    patch_status(
        &admin,
        &db_ar,
        &ns,
        "forgejo",
        json!({"applied": true, "observedGeneration": db.metadata.generation}),
    )
    .await;
    gate_becomes(&client, &ns, "databases-created", "Healthy").await;

    apply(&admin, service("gitea")).await;
    let g = gate_becomes(&client, &ns, "forgejo-serving", "Healthy").await;
    assert_eq!(g["status"]["conditions"][0]["status"], "True");

    let g = gate_becomes(&client, &ns, "never-ready", "Degraded").await;
    let msg = g["status"]["health"]["message"].as_str().unwrap();
    assert!(
        msg.contains("timed out") && msg.contains("not-there"),
        "{msg}"
    );

    // The HTTP view and the bounded wait agree with the stored status.
    let (code, body) = wg
        .get(&format!(
            "/api/v1/gates/{ns}/forgejo-serving/wait?timeout=2s"
        ))
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = wg
        .get(&format!("/api/v1/gates/{ns}/never-ready/wait?timeout=2s"))
        .await;
    assert_eq!(code, 409, "{body}");

    // Settled gates are not rewritten on resync: no hot write loop.
    let before = wg.metrics.gate_status_writes.get();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = wg.metrics.gate_status_writes.get();
    assert_eq!(before, after, "status rewritten without a change");
}

/// Seed 000 through a gate: a split CockroachDB is Degraded (fails the sync), a joined one
/// Healthy.
#[tokio::test]
async fn gate_on_split_cockroachdb_is_degraded_and_healthy_once_joined() {
    let admin = cluster::client().await;
    let client = installed_wavegate_client().await;
    let ns = cluster::namespace(&admin, "gates-seed000").await;
    let a = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, 31), 0).await;
    let b = CrdbStandin::start(Ipv4Addr::new(127, 0, 0, 32), a.port()).await;
    a.set(NodeState::ready(
        1,
        1,
        "15152a17-fcc9-4a51-8c04-af0ec0126551",
    ));
    b.set(NodeState::ready(
        1,
        1,
        "2c4d3ec6-47f5-4161-97ff-ef4b12f595f0",
    ));
    apply(
        &admin,
        json!({"apiVersion": "crdb.cockroachlabs.com/v1beta1", "kind": "CrdbCluster",
        "metadata": {"name": "cockroachdb", "namespace": ns},
        "spec": {"regions": [{"code": "local", "nodes": 2, "namespace": ns}],
                 "template": {"spec": {"httpPort": a.port()}}}}),
    )
    .await;
    for (name, ip) in [
        ("cockroachdb-0", "127.0.0.31"),
        ("cockroachdb-1", "127.0.0.32"),
    ] {
        pod(
            &admin,
            &ns,
            name,
            json!({"crdb.cockroachlabs.com/cluster": "cockroachdb"}),
        )
        .await;
        set_pod_ready(&admin, &ns, name, ip, true).await;
    }
    let config = EvalConfig {
        probe_ttl: Duration::from_millis(200),
        probe_timeout: Duration::from_millis(700),
        crdb_grace: Duration::from_secs(1),
        ..EvalConfig::default()
    };
    let _wg = Wavegate::start_in(client.clone(), config, &[&ns])
        .await
        .with_gates(Duration::from_secs(1));
    apply(
        &admin,
        gate(
            &ns,
            "crdb-single-cluster",
            json!({"checks": [
        {"name": "crdb", "cockroachCluster": {"name": "cockroachdb", "expectedNodes": 2}}]}),
        ),
    )
    .await;

    // Without credentials the cluster IDs are unknown; two ready pods that each see one live
    // node for longer than the grace are the proof of a split.
    let g = gate_becomes(&client, &ns, "crdb-single-cluster", "Degraded").await;
    let msg = g["status"]["health"]["message"].as_str().unwrap();
    assert!(
        msg.contains("cockroachdb-0") && msg.contains("cockroachdb-1"),
        "{msg}"
    );

    a.set(NodeState::ready(
        1,
        2,
        "15152a17-fcc9-4a51-8c04-af0ec0126551",
    ));
    b.set(NodeState::ready(
        2,
        2,
        "15152a17-fcc9-4a51-8c04-af0ec0126551",
    ));
    gate_becomes(&client, &ns, "crdb-single-cluster", "Healthy").await;
}
