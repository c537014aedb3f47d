//! The shipped Kustomize variants say what deploy/README.md promises: the API token is on by
//! default, annotation mode carries its admission policy, and the namespace-scoped variants hold
//! no cluster-scoped object (a namespace admin could not apply one). Rendered with
//! `kubectl kustomize`, as a user would.

use serde_json::Value;
use std::process::Command;

/// Every shipped Kustomize rendering.
const EVERY_VARIANT: &[&str] = &[
    "deploy/base",
    "deploy/overlays/annotate",
    "deploy/overlays/notices",
    "deploy/overlays/namespaced",
    "deploy/overlays/namespaced-annotate",
    "deploy/overlays/crdb-credentials",
    "deploy/overlays/clusters",
    "deploy/overlays/clusters-kubeconfigs",
    "deploy/overlays/shards",
    "deploy/remote-cluster",
];

/// Whether a Role or ClusterRole has a rule granting `verb` on `group`/`resource`.
fn grants(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    role["rules"].as_array().into_iter().flatten().any(|r| {
        let has =
            |field: &str, want: &str| r[field].as_array().into_iter().flatten().any(|x| x == want);
        has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
    })
}

fn render(dir: &str) -> Vec<Value> {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .args(["kustomize", &format!("{root}/{dir}")])
        .output()
        .unwrap_or_else(|e| panic!("these tests need kubectl (kubectl kustomize): {e}"));
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

fn deployment_args(objects: &[Value]) -> Vec<String> {
    let d = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

const CLUSTER_SCOPED: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "Namespace",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

#[test]
fn base_requires_the_api_token_by_default() {
    for dir in [
        "deploy/base",
        "deploy/overlays/annotate",
        "deploy/overlays/namespaced",
    ] {
        let objects = render(dir);
        let args = deployment_args(&objects);
        assert!(
            args.iter().any(|a| a.starts_with("--token-file=")),
            "{dir}: {args:?}"
        );
        let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let volumes = d["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
        assert!(
            volumes
                .iter()
                .any(|v| v["secret"]["secretName"] == "wavegate-api-token"
                    && v["secret"]["optional"] == false),
            "{dir}: the token Secret is mounted and required"
        );
    }
}

/// `/metrics` names every gate and cluster and needs no token on its own port: only the
/// monitoring namespace may reach that port, Argo CD only the API port, and the probes use the
/// monitoring port (where API clients cannot crowd them out).
#[test]
fn metrics_are_served_on_their_own_port_open_to_monitoring_only() {
    for dir in [
        "deploy/base",
        "deploy/overlays/annotate",
        "deploy/overlays/namespaced",
        "deploy/overlays/clusters",
    ] {
        let objects = render(dir);
        let args = deployment_args(&objects);
        assert!(
            args.iter().any(|a| a == "--metrics-listen=0.0.0.0:9090"),
            "{dir}: {args:?}"
        );
        let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{dir}: {probe}");
        }
        let policy = objects
            .iter()
            .find(|o| o["kind"] == "NetworkPolicy")
            .unwrap();
        let rules = policy["spec"]["ingress"].as_array().unwrap();
        let from = |port: i64| -> Vec<String> {
            rules
                .iter()
                .filter(|r| {
                    r["ports"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["port"] == port)
                })
                .flat_map(|r| r["from"].as_array().unwrap().clone())
                .map(|f| {
                    f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(from(9090), ["monitoring"], "{dir}");
        assert_eq!(from(8080), ["argocd"], "{dir}");
    }
}

#[test]
fn annotation_mode_ships_the_admission_policy_that_narrows_its_patch() {
    let objects = render("deploy/overlays/annotate");
    let k = kinds(&objects);
    assert!(
        k.contains(&"ValidatingAdmissionPolicy".to_string()),
        "{k:?}"
    );
    assert!(
        k.contains(&"ValidatingAdmissionPolicyBinding".to_string()),
        "{k:?}"
    );
    assert!(deployment_args(&objects).contains(&"--annotate".to_string()));
}

/// Annotation mode's admission policy lets wavegate's patch through only as annotations it
/// writes, and only on the resources it lists: a kind annotation mode writes on but the policy
/// does not list is patched with the full power of the grant.
#[test]
fn annotation_modes_policy_narrows_every_kind_it_writes_on() {
    use wavegate::resource::registry::{KINDS, PermissionRule, permissions};
    let objects = render("deploy/overlays/annotate");
    let policy = objects
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == "wavegate-annotations-only"
        })
        .expect("the admission policy");
    let rules = policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .expect("resourceRules");
    let narrows = |group: &str, plural: &str| {
        rules.iter().any(|r| {
            r["apiGroups"].as_array().unwrap().contains(&group.into())
                && r["resources"].as_array().unwrap().contains(&plural.into())
                && r["operations"]
                    .as_array()
                    .unwrap()
                    .contains(&"UPDATE".into())
        })
    };
    let written: Vec<_> = permissions(KINDS)
        .into_iter()
        .filter(|p| p.rule == PermissionRule::GrantedWhenAnnotating)
        .collect();
    assert!(!written.is_empty());
    for p in written {
        assert!(
            narrows(p.group, p.plural),
            "the annotation policy does not narrow {} (group {:?}), which annotation mode patches",
            p.plural,
            p.group
        );
    }
}

#[test]
fn namespaced_variants_hold_no_cluster_scoped_object() {
    for dir in [
        "deploy/overlays/namespaced",
        "deploy/overlays/namespaced-annotate",
    ] {
        let objects = render(dir);
        let k = kinds(&objects);
        for cs in CLUSTER_SCOPED {
            assert!(!k.contains(&cs.to_string()), "{dir} contains a {cs}: {k:?}");
        }
    }
    let objects = render("deploy/overlays/namespaced-annotate");
    assert!(deployment_args(&objects).contains(&"--annotate".to_string()));
    let patchers: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-annotate")
        .collect();
    assert_eq!(patchers.len(), 2, "one annotate Role per watched namespace");
}

#[test]
fn every_variant_may_send_events_and_nothing_more_on_events() {
    // src/events.rs sends an Event per transition through kube-rs's recorder: create + patch on
    // events.k8s.io events, in the namespaces the gates and annotated objects live in.
    for dir in [
        "deploy/base",
        "deploy/overlays/annotate",
        "deploy/overlays/namespaced",
        "deploy/overlays/namespaced-annotate",
        "deploy/overlays/clusters",
        "deploy/overlays/clusters-kubeconfigs",
    ] {
        let objects = render(dir);
        let roles: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
            .collect();
        let rules = || {
            roles
                .iter()
                .flat_map(|r| r["rules"].as_array().unwrap().iter())
        };
        let on_events: Vec<&Value> = rules()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == "events" || x == "*")
            })
            .collect();
        assert!(
            !on_events.is_empty(),
            "{dir}: no rule lets wavegate send Events"
        );
        for rule in &on_events {
            assert_eq!(
                rule["apiGroups"],
                serde_json::json!(["events.k8s.io"]),
                "{dir}: {rule}"
            );
            assert_eq!(
                rule["verbs"],
                serde_json::json!(["create", "patch"]),
                "{dir}: {rule}"
            );
        }
        if dir.contains("namespaced") {
            // One Role per watched namespace (ddb, cicd), each with the Events rule.
            let with_events = roles
                .iter()
                .filter(|r| r["metadata"]["name"] == "wavegate")
                .filter(|r| {
                    r["rules"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|x| x["apiGroups"] == serde_json::json!(["events.k8s.io"]))
                })
                .count();
            assert_eq!(with_events, 2, "{dir}");
        }
    }
}

#[test]
fn every_variant_runs_two_replicas_with_one_writer_elected_on_a_named_lease() {
    for dir in [
        "deploy/base",
        "deploy/overlays/annotate",
        "deploy/overlays/namespaced",
        "deploy/overlays/namespaced-annotate",
        "deploy/overlays/clusters",
        "deploy/overlays/clusters-kubeconfigs",
    ] {
        let objects = render(dir);
        let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert_eq!(d["spec"]["replicas"], 2, "{dir}");
        assert!(
            deployment_args(&objects).contains(&"--leader-elect".to_string()),
            "{dir}"
        );
        // Argo CD 3.x's default tracking, said where an operator looks for it.
        assert!(
            deployment_args(&objects).contains(&"--tracking-method=annotation".to_string()),
            "{dir}"
        );
        let env = d["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
        assert!(
            env.contains("POD_NAMESPACE") && env.contains("POD_NAME"),
            "{dir}: {env}"
        );
        let pdb = objects.iter().find(|o| o["kind"] == "PodDisruptionBudget");
        assert_eq!(
            pdb.map(|p| &p["spec"]["maxUnavailable"]),
            Some(&Value::from(1)),
            "{dir}"
        );
        // Changing or getting any Lease but wavegate's own is not granted; listing the
        // namespace's Leases is, so that the leader sees a shard's live holder beside it.
        let role = objects
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-leader")
            .unwrap_or_else(|| panic!("{dir}: no leader Role"));
        for rule in role["rules"].as_array().unwrap() {
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            if verbs != ["create"] && verbs != ["list"] {
                assert_eq!(
                    rule["resourceNames"],
                    serde_json::json!(["wavegate"]),
                    "{dir}: {rule}"
                );
            }
        }
    }
}

#[test]
fn admission_policy_lets_wavegate_write_every_annotation_it_writes() {
    // The policy denies any other change by wavegate's ServiceAccount, so an annotation
    // annotate.rs writes but the policy does not list makes every write fail once the policy
    // is loaded (valid-until and judged-selector were once missing).
    let objects = render("deploy/overlays/annotate");
    let policy = objects
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == "wavegate-annotations-only"
        })
        .expect("the admission policy");
    let owned = policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "owned")
        .and_then(|v| v["expression"].as_str())
        .expect("variable owned");
    use wavegate::annotate::*;
    for key in WRITTEN {
        assert!(
            owned.contains(&format!("'{key}'")),
            "{key} missing from {owned}"
        );
    }
    assert!(
        !owned.contains(OPT_IN),
        "the opt-in is the user's, not wavegate's"
    );
}

/// `--notices` patches Applications: its overlay ships the Role that allows it (in Argo CD's
/// namespace, marked for the admission policies) and the policy that narrows it to exactly the
/// keys src/notice.rs writes; annotation mode's policy lets the notice keys through to a holder
/// of the `notices` mark, or a write with both modes on would be refused by one of them.
#[test]
fn the_notices_policy_names_exactly_what_notices_write() {
    use wavegate::notice::WRITTEN;
    let objects = render("deploy/overlays/notices");
    assert!(deployment_args(&objects).contains(&"--notices".to_string()));
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-notices")
        .expect("Role wavegate-notices");
    assert_eq!(role["metadata"]["namespace"], "argocd");
    assert!(grants(role, "argoproj.io", "applications", "patch"));
    assert!(grants(role, "wavegate.dev", "writers", "narrowed"));
    assert!(grants(role, "wavegate.dev", "notices", "narrowed"));
    let owned_of = |objects: &[Value], name: &str| -> String {
        let policy = objects
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicy" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("the admission policy {name}"));
        policy["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "owned")
            .and_then(|v| v["expression"].as_str())
            .expect("variable owned")
            .to_string()
    };
    let owned = owned_of(&objects, "wavegate-notices-only");
    let listed: Vec<&str> = owned
        .split('\'')
        .skip(1)
        .step_by(2)
        .filter(|k| k.starts_with("notice.") || *k == "wavegate.dev/notice")
        .collect();
    assert_eq!(listed, WRITTEN.to_vec(), "{owned}");
    for key in ["permanent", "scope", "icon"] {
        assert!(
            !owned.contains(&format!("notice.argocd.argoproj.io/{key}")),
            "{owned}"
        );
    }
    let annotate = owned_of(
        &render("deploy/overlays/annotate"),
        "wavegate-annotations-only",
    );
    for key in WRITTEN {
        assert!(
            annotate.contains(&format!("'{key}'")),
            "{key} missing from {annotate}"
        );
    }
    // The read-only base grants no patch on Applications.
    let base = render("deploy/base");
    assert!(
        !base
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
            .any(|r| grants(r, "argoproj.io", "applications", "patch")),
        "deploy/base may patch Applications"
    );
}

/// The gate controller's `patch` on WaveGates exists only to write the verdict stamp: every
/// cluster-wide variant that grants it ships the policy that narrows it to that annotation, and
/// the policy names exactly the annotation the controller writes (a different name would make
/// every stamp fail once the policy is loaded).
#[test]
fn patch_on_wavegates_comes_with_the_policy_that_narrows_it_to_the_stamp() {
    for dir in [
        "deploy/base",
        "deploy/overlays/annotate",
        "deploy/overlays/clusters",
        "deploy/remote-cluster",
    ] {
        let objects = render(dir);
        let role = objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "wavegate")
            .unwrap_or_else(|| panic!("{dir}: ClusterRole wavegate"));
        let patches_gates = role["rules"].as_array().unwrap().iter().any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == "wavegates")
                && r["verbs"].as_array().unwrap().iter().any(|v| v == "patch")
        });
        assert!(patches_gates, "{dir}: the stamp needs patch on wavegates");
        let policy = objects
            .iter()
            .find(|o| {
                o["kind"] == "ValidatingAdmissionPolicy"
                    && o["metadata"]["name"] == "wavegate-gate-verdict-only"
            })
            .unwrap_or_else(|| panic!("{dir}: the policy narrowing patch on wavegates"));
        let owned = policy["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "owned")
            .and_then(|v| v["expression"].as_str())
            .unwrap();
        assert_eq!(
            owned,
            format!("['{}']", wavegate::gate::stamp::ANNOTATION),
            "{dir}"
        );
        assert!(
            objects.iter().any(|o| {
                o["kind"] == "ValidatingAdmissionPolicyBinding"
                    && o["spec"]["policyName"] == "wavegate-gate-verdict-only"
            }),
            "{dir}: the policy's binding"
        );
    }
}

/// Each admission policy narrows RBAC the same install grants (patch on WaveGates, patch for
/// annotation mode), recognising wavegate by a mark those roles carry. Argo CD orders an unknown
/// kind such as a ValidatingAdmissionPolicy after all the kinds it knows within one wave
/// (gitops-engine sync_tasks.go kindOrder), i.e. after the Deployment. So every policy, its
/// binding, and every role carrying the mark with its binding sit in sync wave -1: the roles
/// first (an upgrade never meets a policy looking for a mark not yet granted), then the
/// policies, then everything else, the Deployment included, in wave 0. No other object names a
/// wave.
#[test]
fn admission_policies_and_the_roles_they_recognise_come_a_sync_wave_before_the_rest() {
    const WAVE: &str = "argocd.argoproj.io/sync-wave";
    for dir in EVERY_VARIANT {
        let objects = render(dir);
        let marked = |o: &Value| grants(o, "wavegate.dev", "writers", "narrowed");
        let marked_roles: Vec<(String, String)> = objects
            .iter()
            .filter(|o| marked(o))
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default().to_string(),
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        let mut early = 0;
        for o in &objects {
            let kind = o["kind"].as_str().unwrap_or_default();
            let binds_marked = marked_roles.iter().any(|(k, n)| {
                o["roleRef"]["kind"] == k.as_str() && o["roleRef"]["name"] == n.as_str()
            });
            let first = matches!(
                kind,
                "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding"
            ) || marked(o)
                || binds_marked;
            early += usize::from(first);
            assert_eq!(
                o["metadata"]["annotations"][WAVE].as_str(),
                first.then_some("-1"),
                "{dir}: {kind} {}",
                o["metadata"]["name"]
            );
        }
        assert!(early >= 2, "{dir}: {early} objects in wave -1");
    }
}

/// The admission policies recognise wavegate by a mark in its RBAC (verb `narrowed` on
/// `wavegate.dev` `writers`), not by an account name: every role that grants `patch` on a
/// resource a policy narrows must carry the mark, or that patch goes unnarrowed.
#[test]
fn every_role_that_grants_a_narrowed_patch_carries_wavegates_mark() {
    for dir in EVERY_VARIANT {
        let objects = render(dir);
        // What a shipped policy narrows: this rendering's, or the base's and annotation mode's
        // (the namespaced overlays leave them to a cluster admin).
        let mut narrowed: Vec<(String, String)> = Vec::new();
        for policies in [
            objects.clone(),
            render("deploy/base"),
            render("deploy/overlays/annotate"),
        ] {
            for p in policies
                .iter()
                .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
            {
                let text = p["spec"]["matchConditions"].to_string();
                assert!(
                    text.contains("resource('writers')") && text.contains("check('narrowed')"),
                    "{dir}: {} recognises wavegate otherwise: {text}",
                    p["metadata"]["name"]
                );
                for rule in p["spec"]["matchConstraints"]["resourceRules"]
                    .as_array()
                    .unwrap()
                {
                    for g in rule["apiGroups"].as_array().unwrap() {
                        for r in rule["resources"].as_array().unwrap() {
                            let key = (g.as_str().unwrap().into(), r.as_str().unwrap().into());
                            if !narrowed.contains(&key) {
                                narrowed.push(key);
                            }
                        }
                    }
                }
            }
        }
        assert!(narrowed.len() >= 5, "{dir}: {narrowed:?}");
        let mut checked = 0;
        for role in objects
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        {
            if narrowed
                .iter()
                .any(|(g, r)| grants(role, g, r, "patch") || grants(role, g, r, "*"))
            {
                checked += 1;
                assert!(
                    grants(role, "wavegate.dev", "writers", "narrowed"),
                    "{dir}: {} {} grants a narrowed patch without wavegate's mark",
                    role["kind"],
                    role["metadata"]["name"]
                );
            }
        }
        assert!(checked >= 1, "{dir}: no role grants a narrowed patch");
    }
}

/// Many clusters from Argo CD's Secrets: the only new access is `list` on Secrets, in Argo CD's
/// namespace (docs/security.md says what that reads), bound to wavegate's ServiceAccount.
#[test]
fn clusters_variant_reads_secrets_only_in_argocds_namespace() {
    let objects = render("deploy/overlays/clusters");
    let on_secrets: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        .filter(|o| o["rules"].to_string().contains("secrets"))
        .collect();
    assert_eq!(on_secrets.len(), 1, "{on_secrets:?}");
    let role = on_secrets[0];
    assert_eq!(
        (&role["kind"], &role["metadata"]["namespace"]),
        (&Value::from("Role"), &Value::from("argocd"))
    );
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}])
    );
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "RoleBinding" && o["metadata"]["name"] == "wavegate-clusters")
        .expect("its RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], "argocd");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "wavegate", "namespace": "wavegate"}])
    );
    let args = deployment_args(&objects);
    assert!(
        args.contains(&"--clusters-from=argocd-secrets".to_string()),
        "{args:?}"
    );
    // The kubeconfig variant needs no access to any Secret through the API.
    let kubeconfigs = render("deploy/overlays/clusters-kubeconfigs");
    assert!(
        !kubeconfigs
            .iter()
            .any(|o| o["rules"].to_string().contains("secrets"))
    );
}

/// What a destination cluster gets: the CRD and the base's ServiceAccount and ClusterRole,
/// nothing that runs, and no Lease access (the one Lease is in the home cluster).
#[test]
fn remote_cluster_holds_the_base_rbac_and_nothing_that_runs() {
    let remote = render("deploy/remote-cluster");
    assert_eq!(
        kinds(&remote),
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    let base = render("deploy/base");
    let rules = |objects: &[Value]| {
        objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole")
            .map(|o| o["rules"].clone())
    };
    assert_eq!(rules(&remote), rules(&base));
}

/// Every Role and ClusterRole a rendering holds.
fn roles(objects: &[Value]) -> Vec<&Value> {
    objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .collect()
}

/// A check kind whose RBAC a rendering lacks is Unknown forever there ("forbidden" from the
/// watch), and one whose annotation patch is missing never gets its verdict written: each
/// rendering grants what the registry says every kind needs (`registry::permissions`). (The
/// Helm chart's renderings are held to these by `tests/offline/helm_chart.rs`.)
#[test]
fn every_variant_grants_what_each_registered_kind_needs() {
    use wavegate::resource::registry::{KINDS, PermissionRule, permissions};
    let needed = permissions(KINDS);
    for dir in EVERY_VARIANT {
        let objects = render(dir);
        let roles = roles(&objects);
        let annotates = dir.contains("annotate");
        for p in &needed {
            let granted = roles.iter().any(|r| grants(r, p.group, p.plural, p.verb));
            let (verb, on, kind) = (p.verb, p.plural, p.kind);
            let group = p.group;
            match p.rule {
                PermissionRule::Granted => assert!(
                    granted,
                    "{dir} does not grant {verb} on {on} (group {group:?}), which the {kind} check reads"
                ),
                PermissionRule::GrantedWhenAnnotating => assert!(
                    granted || !annotates,
                    "{dir} does not grant {verb} on {on} (group {group:?}), where annotation mode writes {kind} verdicts"
                ),
                PermissionRule::Refused => assert!(
                    !granted,
                    "{dir} grants {verb} on {on} (group {group:?}), which annotation mode leaves alone"
                ),
            }
        }
    }
}

/// Sharded like Argo CD's controller: a StatefulSet (a replica's number is its pod's ordinal;
/// a Deployment's pods have none and are refused at start) counting as many replicas as it
/// runs, each of which may hold its own shard's Lease and list the others', and read the
/// algorithm Argo CD's controller runs.
#[test]
fn the_shards_variant_runs_a_numbered_replica_per_shard_with_its_lease() {
    let objects = render("deploy/overlays/shards");
    assert!(
        !objects.iter().any(|o| o["kind"] == "Deployment"),
        "an unsharded Deployment beside the shards keeps them all from writing"
    );
    let set = objects
        .iter()
        .find(|o| o["kind"] == "StatefulSet")
        .expect("a StatefulSet");
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for flag in ["--shard-like-argocd", "--clusters-from=argocd-secrets"] {
        assert!(args.contains(&flag), "{args:?}");
    }
    let env = |name: &str| {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
    };
    let replicas = set["spec"]["replicas"].as_u64().unwrap();
    assert!(replicas >= 2, "{replicas}");
    assert_eq!(
        env("ARGOCD_CONTROLLER_REPLICAS").map(|e| e["value"].clone()),
        Some(Value::from(replicas.to_string())),
        "the replicas count themselves as they run"
    );
    assert_eq!(
        env("POD_NAME").map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone()),
        Some(Value::from("metadata.name")),
        "the ordinal comes from the pod's name"
    );
    let governing = set["spec"]["serviceName"].as_str().unwrap();
    let headless = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == governing)
        .unwrap_or_else(|| panic!("no Service {governing}"));
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(
        headless["spec"]["publishNotReadyAddresses"], true,
        "a Lease holder not Ready yet must still be reachable by its name"
    );
    assert_eq!(
        headless["spec"]["selector"],
        set["spec"]["selector"]["matchLabels"]
    );
    // Reads about another replica's cluster go to its pod under the governing Service, which
    // the NetworkPolicy lets the replicas reach.
    let peer = format!("--peer-url=http://{{holder}}.{governing}.{{namespace}}.svc:8080");
    assert!(args.contains(&peer.as_str()), "{args:?}");
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .expect("a NetworkPolicy");
    let from_peers = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .any(|rule| {
            rule["from"].as_array().into_iter().flatten().any(|f| {
                f["namespaceSelector"].is_null()
                    && f["podSelector"]["matchLabels"] == set["spec"]["selector"]["matchLabels"]
            }) && rule["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["port"] == 8080)
        });
    assert!(from_peers, "the replicas cannot reach each other: {policy}");

    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "wavegate-leader")
        .unwrap();
    let may = |verb: &str, lease: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            let has = |field: &str, want: &str| {
                r[field].as_array().into_iter().flatten().any(|x| x == want)
            };
            has("resources", "leases")
                && has("verbs", verb)
                && (r["resourceNames"].is_null() || has("resourceNames", lease))
        })
    };
    for shard in 0..replicas {
        let lease = format!("wavegate-shard-{shard}");
        for verb in ["get", "patch", "create", "list"] {
            assert!(may(verb, &lease), "{verb} on Lease {lease}: {role}");
        }
    }
    let beyond = format!("wavegate-shard-{replicas}");
    assert!(!may("patch", &beyond), "{role}");
    // The algorithm, from Argo CD's namespace, by name.
    let roles = roles(&objects);
    assert!(roles.iter().any(|r| {
        r["metadata"]["namespace"] == "argocd"
            && r["rules"].as_array().unwrap().iter().any(|rule| {
                rule["resourceNames"]
                    .as_array()
                    .is_some_and(|n| n.iter().any(|x| x == "argocd-cmd-params-cm"))
                    && rule["verbs"].as_array().unwrap().iter().any(|v| v == "get")
            })
    }));
}
