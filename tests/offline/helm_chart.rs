//! The Helm chart (deploy/helm/wavegate) renders the same objects as the Kustomize variants it
//! stands for. Both are rendered by the real tools — Helm built from its Go module by
//! scripts/helm.sh, Kustomize as `kubectl kustomize` — and compared object by object, field by
//! field, with a readable list of differences on failure.
//!
//! Normalisation, and nothing else:
//! - the Helm output is read back through `kubectl kustomize` too, so both sides go through the
//!   same YAML reader kubectl uses (`defaultMode: 0440` is octal there, 288);
//! - the label `app.kubernetes.io/managed-by` names the tool (kustomize / Helm) and is dropped;
//! - the CRD comes from one file (deploy/crd, a symlink in the chart's crds/); Helm installs
//!   crds/ verbatim, without the chart's labels, so the CRD is compared without labels;
//! - volumes and volumeMounts are keyed by name (their patch merge key; a strategic merge
//!   puts a component's volume first), so they are compared sorted by name;
//! - flag order after the `serve` subcommand does not matter to the command line, and overlays
//!   append their flags in different orders, so the args are compared as a sorted list.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// Helm's binary, built (once, cached) by scripts/helm.sh.
fn helm() -> PathBuf {
    let out = Command::new(format!("{ROOT}/scripts/helm.sh"))
        .arg("path")
        .output()
        .unwrap_or_else(|e| panic!("scripts/helm.sh path: {e}"));
    assert!(
        out.status.success(),
        "scripts/helm.sh path failed (Helm is built from its Go module; needs go):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("helm_chart")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("this test needs kubectl (kubectl kustomize): {e}"));
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The path from `dir` to the repository root, as `../..`: Kustomize refuses absolute paths.
fn relative_root(dir: &Path) -> PathBuf {
    let (dir, root) = (
        dir.canonicalize().unwrap(),
        Path::new(ROOT).canonicalize().unwrap(),
    );
    let common = dir
        .components()
        .zip(root.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut up: PathBuf = dir.components().skip(common).map(|_| "..").collect();
    up.extend(root.components().skip(common));
    up
}

/// A Kustomize variant: the base plus components, as a user's kustomization would list them.
fn render_kustomize(name: &str, base: &str, components: &[&str]) -> Vec<Value> {
    let dir = scratch(&format!("kustomize-{name}"));
    let root = relative_root(&dir);
    let root = root.display();
    let mut k = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {root}/{base}\n"
    );
    if !components.is_empty() {
        k.push_str("components:\n");
        for c in components {
            k.push_str(&format!("  - {root}/{c}\n"));
        }
    }
    std::fs::write(dir.join("kustomization.yaml"), k).unwrap();
    kustomize(&dir)
}

fn helm_template(args: &[&str]) -> std::process::Output {
    Command::new(helm())
        .args([
            "template",
            "wavegate",
            &format!("{ROOT}/deploy/helm/wavegate"),
        ])
        .args(["--namespace", "wavegate"])
        .args(args)
        .output()
        .unwrap()
}

/// The chart rendered with `args`, read back through the same YAML reader as Kustomize's output.
fn render_helm(name: &str, args: &[&str]) -> Vec<Value> {
    let out = helm_template(args);
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = scratch(&format!("helm-{name}"));
    std::fs::write(dir.join("helm.yaml"), &out.stdout).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - helm.yaml\n",
    )
    .unwrap();
    kustomize(&dir)
}

fn sort_by_name(list: &mut Value) {
    if let Some(items) = list.as_array_mut() {
        items.sort_by_key(|i| i["name"].as_str().unwrap_or("").to_string());
    }
}

type Key = (String, String, String, String);

fn normalise(objects: Vec<Value>) -> BTreeMap<Key, Value> {
    let mut by_key = BTreeMap::new();
    for mut o in objects {
        let kind = o["kind"].as_str().unwrap_or("").to_string();
        if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
            labels.remove("app.kubernetes.io/managed-by");
        }
        if kind == "CustomResourceDefinition" {
            o["metadata"].as_object_mut().unwrap().remove("labels");
        }
        if kind == "Deployment" {
            let pod = &mut o["spec"]["template"]["spec"];
            sort_by_name(&mut pod["volumes"]);
            for c in pod["containers"].as_array_mut().into_iter().flatten() {
                sort_by_name(&mut c["volumeMounts"]);
                if let Some(args) = c["args"].as_array_mut()
                    && args.len() > 1
                {
                    args[1..].sort_by_key(|a| a.as_str().unwrap_or("").to_string());
                }
            }
        }
        let key = (
            o["apiVersion"].as_str().unwrap_or("").to_string(),
            kind,
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            o["metadata"]["name"].as_str().unwrap_or("").to_string(),
        );
        assert!(by_key.insert(key.clone(), o).is_none(), "{key:?} twice");
    }
    by_key
}

/// Every leaf where `a` (Kustomize) and `b` (Helm) differ, as `path: kustomize … / helm …`.
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => diff(&p, u, v, out),
                    (Some(u), None) => out.push(format!("{p}: only in kustomize: {u}")),
                    (None, Some(v)) => out.push(format!("{p}: only in helm: {v}")),
                    (None, None) => unreachable!(),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), u, v, out);
            }
        }
        _ if a != b => out.push(format!("{path}: kustomize {a} / helm {b}")),
        _ => {}
    }
}

fn assert_equivalent(variant: &str, kustomized: Vec<Value>, helmed: Vec<Value>) {
    let (k, h) = (normalise(kustomized), normalise(helmed));
    let mut problems = Vec::new();
    for (key, a) in &k {
        let name = format!("{} {}/{}", key.1, key.2, key.3);
        match h.get(key) {
            None => problems.push(format!("{name}: only in kustomize")),
            Some(b) => {
                let mut d = Vec::new();
                diff("", a, b, &mut d);
                problems.extend(d.into_iter().map(|l| format!("{name}: {l}")));
            }
        }
    }
    for key in h.keys().filter(|key| !k.contains_key(*key)) {
        problems.push(format!("{} {}/{}: only in helm", key.1, key.2, key.3));
    }
    assert!(
        problems.is_empty(),
        "{variant}: the Helm chart and Kustomize differ in {} place(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    assert!(!k.is_empty(), "{variant}: nothing rendered");
}

#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn base() {
    assert_equivalent(
        "base",
        render_kustomize("base", "deploy/base", &[]),
        render_helm("base", &["--include-crds"]),
    );
}

#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn annotate() {
    assert_equivalent(
        "annotate",
        render_kustomize("annotate", "deploy/base", &["deploy/components/annotate"]),
        render_helm(
            "annotate",
            &["--include-crds", "--set", "annotate.enabled=true"],
        ),
    );
}

#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn notices() {
    assert_equivalent(
        "notices",
        render_kustomize("notices", "deploy/base", &["deploy/components/notices"]),
        render_helm(
            "notices",
            &["--include-crds", "--set", "notices.enabled=true"],
        ),
    );
}

#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn crdb_credentials() {
    assert_equivalent(
        "crdb-credentials",
        render_kustomize(
            "crdb",
            "deploy/base",
            &["deploy/components/crdb-credentials"],
        ),
        render_helm(
            "crdb",
            &["--include-crds", "--set", "crdbCredentials.enabled=true"],
        ),
    );
}

#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn annotate_with_crdb_credentials() {
    assert_equivalent(
        "annotate + crdb-credentials",
        render_kustomize(
            "both",
            "deploy/base",
            &[
                "deploy/components/annotate",
                "deploy/components/crdb-credentials",
            ],
        ),
        render_helm(
            "both",
            &[
                "--include-crds",
                "--set",
                "annotate.enabled=true",
                "--set",
                "crdbCredentials.enabled=true",
            ],
        ),
    );
}

/// The namespaced overlays watch ddb and cicd and hold no cluster-scoped object; the chart's
/// CRD stays out without --include-crds (`helm install --skip-crds`).
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn namespaced() {
    assert_equivalent(
        "namespaced",
        kustomize(Path::new(&format!("{ROOT}/deploy/overlays/namespaced"))),
        render_helm("namespaced", &["--set", "watchNamespaces={ddb,cicd}"]),
    );
}

#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn namespaced_annotate() {
    assert_equivalent(
        "namespaced-annotate",
        kustomize(Path::new(&format!(
            "{ROOT}/deploy/overlays/namespaced-annotate"
        ))),
        render_helm(
            "namespaced-annotate",
            &[
                "--set",
                "watchNamespaces={ddb,cicd}",
                "--set",
                "annotate.enabled=true",
            ],
        ),
    );
}

/// Many clusters from Argo CD's cluster Secrets: the Role in Argo CD's namespace and the flags.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn clusters_from_argocd_secrets() {
    assert_equivalent(
        "clusters",
        render_kustomize("clusters", "deploy/base", &["deploy/components/clusters"]),
        render_helm(
            "clusters",
            &["--include-crds", "--set", "clusters.from=argocd-secrets"],
        ),
    );
}

/// Many clusters from kubeconfigs of wavegate's own: the mounted Secret and the flags.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn clusters_from_kubeconfigs() {
    assert_equivalent(
        "clusters-kubeconfigs",
        render_kustomize(
            "clusters-kubeconfigs",
            "deploy/base",
            &["deploy/components/clusters-kubeconfigs"],
        ),
        render_helm(
            "clusters-kubeconfigs",
            &["--include-crds", "--set", "clusters.from=kubeconfig-dir"],
        ),
    );
}

/// Sharded like Argo CD's controller: the StatefulSet with the Deployment's pod, its headless
/// Service, each shard's Lease and the algorithm's ConfigMap.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn shards_like_argocd() {
    assert_equivalent(
        "shards",
        render_kustomize(
            "shards",
            "deploy/base",
            &["deploy/components/clusters", "deploy/components/shards"],
        ),
        render_helm(
            "shards",
            &[
                "--include-crds",
                "--set",
                "clusters.from=argocd-secrets",
                "--set",
                "shards.enabled=true",
            ],
        ),
    );
}

/// With Argo CD's dynamic cluster distribution: the controller Deployment's count is read
/// (its scale only, by name), in place of ARGOCD_CONTROLLER_REPLICAS.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn shards_with_argo_cds_dynamic_distribution() {
    let helmed = render_helm(
        "shards-dynamic",
        &[
            "--include-crds",
            "--set",
            "clusters.from=argocd-secrets",
            "--set",
            "shards.enabled=true",
            "--set",
            "shards.argocdDynamicDistribution=true",
        ],
    );
    let role = helmed
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-shards-dynamic")
        .expect("the dynamic distribution's Role");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": ["apps"], "resources": ["deployments/scale"],
                            "resourceNames": ["argocd-application-controller"], "verbs": ["get"]}]),
        "{role}"
    );
    let set = helmed.iter().find(|o| o["kind"] == "StatefulSet").unwrap();
    let env = set["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
    assert!(
        env.contains("ARGOCD_ENABLE_DYNAMIC_CLUSTER_DISTRIBUTION"),
        "{env}"
    );
    assert!(!env.contains("ARGOCD_CONTROLLER_REPLICAS"), "{env}");
    // Dynamic distribution is Argo CD's count: refused with wavegate's own ring.
    let out = helm_template(&[
        "--set",
        "clusters.from=argocd-secrets",
        "--set",
        "shards.enabled=true",
        "--set",
        "shards.mode=own",
        "--set",
        "shards.argocdDynamicDistribution=true",
    ]);
    assert!(
        !out.status.success(),
        "own ring with dynamic distribution was accepted"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("shards.mode=argocd"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing else of Argo CD's Deployments is readable.
    let rules: String = helmed
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .map(|o| o["rules"].to_string())
        .collect();
    assert!(!rules.contains(r#""deployments""#), "{rules}");
    assert_equivalent(
        "shards-dynamic",
        render_kustomize(
            "shards-dynamic",
            "deploy/base",
            &[
                "deploy/components/clusters",
                "deploy/components/shards",
                "deploy/components/shards-dynamic",
            ],
        ),
        helmed,
    );
}

/// A sharded install whose replicas cannot compute Argo CD's assignment is refused at render
/// time, not at the pods' start.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn shards_without_every_cluster_secret_are_refused() {
    for (set, expect) in [
        (vec!["shards.enabled=true"], "clusters.from=argocd-secrets"),
        (
            vec![
                "shards.enabled=true",
                "clusters.from=argocd-secrets",
                "clusters.secretNames={cluster-prod}",
            ],
            "secretNames",
        ),
    ] {
        let args: Vec<&str> = set.iter().flat_map(|s| ["--set", *s]).collect();
        let out = helm_template(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set:?} was accepted");
        assert!(err.contains(expect), "{set:?}: {err}");
    }
    // Three replicas: three shard Leases.
    let objects = render_helm(
        "shards-3",
        &[
            "--set",
            "clusters.from=argocd-secrets",
            "--set",
            "shards.enabled=true",
            "--set",
            "replicas=3",
        ],
    );
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-leader")
        .unwrap();
    assert!(
        role["rules"]
            .to_string()
            .contains(r#"["wavegate-shard-0","wavegate-shard-1","wavegate-shard-2"]"#),
        "{role}"
    );
}

/// wavegate's own ring (`shards.mode=own`): the same StatefulSet and shard Leases, run with
/// `--shards=<replicas>` instead of Argo CD's sharding, and nothing of Argo CD's settings read.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn shards_on_wavegates_own_ring() {
    let objects = render_helm(
        "shards-own",
        &[
            "--set",
            "clusters.from=argocd-secrets",
            "--set",
            "shards.enabled=true",
            "--set",
            "shards.mode=own",
            "--set",
            "replicas=3",
        ],
    );
    let set = objects
        .iter()
        .find(|o| o["kind"] == "StatefulSet")
        .expect("a StatefulSet");
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    let args = container["args"].to_string();
    assert!(args.contains(r#""--shards=3""#), "{args}");
    assert!(args.contains("--peer-url="), "{args}");
    assert!(!args.contains("--shard-like-argocd"), "{args}");
    assert!(
        !container["env"]
            .to_string()
            .contains("ARGOCD_CONTROLLER_REPLICAS"),
        "{}",
        container["env"]
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["name"] == "wavegate-shards" && o["kind"] == "Role"),
        "argocd-cmd-params-cm is not read by the ring"
    );
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-leader")
        .unwrap();
    assert!(
        role["rules"]
            .to_string()
            .contains(r#"["wavegate-shard-0","wavegate-shard-1","wavegate-shard-2"]"#),
        "{role}"
    );
    let out = helm_template(&[
        "--set",
        "clusters.from=argocd-secrets",
        "--set",
        "shards.enabled=true",
        "--set",
        "shards.mode=hash",
    ]);
    assert!(!out.status.success(), "an unknown mode was accepted");
}

/// Narrowed to named Secrets: only `get` on exactly those (resourceNames), never `list`, and
/// wavegate is told to read only them.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn clusters_narrowed_to_named_secrets_can_get_only_those() {
    let objects = render_helm(
        "clusters-named",
        &[
            "--set",
            "clusters.from=argocd-secrets",
            "--set",
            "clusters.secretNames={cluster-prod,cluster-staging}",
        ],
    );
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-clusters")
        .expect("the Role wavegate-clusters");
    assert_eq!(role["metadata"]["namespace"], "argocd");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                             "resourceNames": ["cluster-prod", "cluster-staging"]}])
    );
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--clusters-secrets=cluster-prod,cluster-staging"),
        "{args}"
    );
}

/// values.schema.json is enforced: a misspelt key, a wrong type and a bad namespace name are
/// refused by `helm template` with the schema's message.
#[test]
#[ignore = "needs Helm, built from its Go module by scripts/helm.sh"]
fn values_schema_rejects_bad_values() {
    for (set, expect) in [
        ("annotate.enabeld=true", "enabeld"),
        ("replicas=two", "replicas"),
        ("watchNamespaces={Not_A_Namespace}", "watchNamespaces"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("clusters.from=everywhere", "from"),
    ] {
        let out = helm_template(&["--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} was accepted");
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(expect),
            "--set {set}: {err}"
        );
    }
}
