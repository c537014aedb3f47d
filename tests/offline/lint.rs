//! `wavegate lint`: the field reports' manifests, one failing and one passing fixture per rule,
//! the CLI's exit codes and formats (SARIF validated against the published schema), the
//! gitops-engine order against an independent reference under shuffled input, and manifests
//! nobody here wrote (read from Go modules at test time).

use crate::proptest_config;

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use wavegate::lint::sync_order::{Moment, Phase, sync_tasks};
use wavegate::lint::{self, Options, Report, Rule, Source, manifest, references};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lint_files(files: &[&str], options: &Options) -> Report {
    let sources: Vec<Source> = files.iter().map(|f| Source::Path(root().join(f))).collect();
    lint::lint_sources(&sources, options).unwrap()
}

fn rules(report: &Report) -> Vec<Rule> {
    report.active().map(|f| f.rule).collect()
}

// ---- the field reports ----------------------------------------------------------------------

#[test]
fn seed_001_as_reported_finds_the_selector_and_the_database_in_the_same_wave() {
    let r = lint_files(
        &["tests/scenarios/lint/seed-001-forgejo.yaml"],
        &Options::default(),
    );
    assert_eq!(
        rules(&r),
        [Rule::SelectorMatchesNothing, Rule::SameWave],
        "{r:#?}"
    );
    let selector = &r.findings[0];
    assert!(
        selector.message.contains("Service cicd/forgejo selects app=forgejo, which matches no pod template; Deployment cicd/forgejo (app=gitea"),
        "{}",
        selector.message
    );
    assert!(selector.fix.contains("app: gitea"), "{}", selector.fix);
    let db = &r.findings[1];
    assert!(
        db.message.contains(
            "Deployment cicd/forgejo (wave 0) uses database forgejo of Cluster ddb-cluster"
        ),
        "{}",
        db.message
    );
    assert!(
        db.message
            .contains("Database ddb/forgejo is applied in wave 0"),
        "{}",
        db.message
    );
    assert!(
        db.fix.contains("cnpgDatabase: {name: forgejo}"),
        "{}",
        db.fix
    );
    assert!(
        db.fix.contains("argocd.argoproj.io/sync-wave: \"1\""),
        "{}",
        db.fix
    );
    assert_eq!(db.locations[0].line, 48);
    assert_eq!(db.locations[1].line, 24);
}

#[test]
fn seed_001_after_the_documented_fix_is_clean() {
    let r = lint_files(
        &["tests/scenarios/lint/seed-001-forgejo-fixed.yaml"],
        &Options::default(),
    );
    assert!(r.findings.is_empty(), "{r:#?}");
}

#[test]
fn seed_000_as_reported_finds_the_join_service_created_after_the_pods() {
    let r = lint_files(
        &["tests/scenarios/lint/seed-000-cockroachdb.yaml"],
        &Options::default(),
    );
    assert_eq!(rules(&r), [Rule::MissingJoinService], "{r:#?}");
    let f = &r.findings[0];
    assert!(
        f.message
            .contains("--join cockroachdb-join.prod.svc.cluster.local:26258"),
        "{}",
        f.message
    );
    assert!(
        f.fix.contains("name: cockroachdb-join") && f.fix.contains("sync-wave: \"-1\""),
        "{}",
        f.fix
    );
}

#[test]
fn join_service_in_the_crdbcluster_wave_is_applied_first() {
    // The live scenario has the join Service in the CrdbCluster's wave. gitops-engine applies a
    // wave one run of a kind after another, in its kind order (Service is in it, CrdbCluster is
    // not, so it comes last): the Service is stored before the CrdbCluster is applied. The real
    // Argo CD does so (tests/argocd/order.sh): no finding.
    let r = lint_files(
        &["tests/scenarios/seed-000-cockroachdb.yaml"],
        &Options::default(),
    );
    assert!(
        !r.active().any(|f| f.rule == Rule::SameWave),
        "{:#?}",
        r.findings
    );
}

#[test]
fn seed_000_after_the_field_fix_is_clean() {
    // The fix pre-creates the Service as a Helm pre-install hook: Argo CD's PreSync phase.
    let r = lint_files(
        &["tests/scenarios/lint/seed-000-cockroachdb-fixed.yaml"],
        &Options::default(),
    );
    assert!(r.findings.is_empty(), "{r:#?}");
}

#[test]
fn shipped_examples_are_clean() {
    for dir in [
        "argocd/examples/seed-000-cockroachdb",
        "argocd/examples/seed-001-forgejo",
    ] {
        let r = lint_files(&[dir], &Options::default());
        assert!(r.findings.is_empty(), "{dir}: {r:#?}");
    }
    let cm = cm("argocd/argocd-cm/argocd-cm-patch.yaml");
    let r = lint_files(
        &["argocd/examples/apps"],
        &Options {
            argocd_cm: Some(cm),
            ..Options::default()
        },
    );
    assert!(r.findings.is_empty(), "{r:#?}");
}

fn cm(path: &str) -> lint::ArgocdCm {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    lint::ArgocdCm::parse(path, &text).unwrap()
}

// ---- one failing and one passing fixture per rule --------------------------------------------

#[test]
fn every_rule_has_a_failing_and_a_passing_fixture() {
    for rule in Rule::ALL {
        let dir = format!("tests/fixtures/lint/{}", rule.id());
        for (case, want) in [("fail", vec![rule]), ("pass", vec![])] {
            let cm_file = format!("{dir}/{case}.argocd-cm.yaml");
            let options = Options {
                argocd_cm: root().join(&cm_file).exists().then(|| cm(&cm_file)),
                ..Options::default()
            };
            let r = lint_files(&[&format!("{dir}/{case}.yaml")], &options);
            assert_eq!(rules(&r), want, "{dir}/{case}.yaml: {r:#?}");
        }
    }
}

#[test]
fn ignore_flag_drops_a_rule() {
    let options = Options {
        ignore: [Rule::SameWave].into(),
        ..Options::default()
    };
    let r = lint_files(&["tests/fixtures/lint/same-wave/fail.yaml"], &options);
    assert!(r.findings.is_empty(), "{r:#?}");
}

// ---- the CLI --------------------------------------------------------------------------------

fn wavegate(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn exit_codes_are_0_clean_1_findings_2_bad_input() {
    let (code, out, _) = wavegate(
        &["lint", "tests/scenarios/lint/seed-001-forgejo-fixed.yaml"],
        "",
    );
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = wavegate(&["lint", "tests/scenarios/lint/seed-001-forgejo.yaml"], "");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("error[same-wave]") && out.ends_with("2 findings in 6 objects\n"),
        "{out}"
    );
    let (code, _, err) = wavegate(&["lint", "no/such/file.yaml"], "");
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = wavegate(&["lint", "--ignore", "no-such-rule", "-"], "");
    assert_eq!(code, 2, "{err}");
}

#[test]
fn bad_input_is_a_clear_error_with_file_and_line_never_a_panic() {
    let cases = [
        (
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: [a\n",
            "<stdin>:",
            "invalid YAML",
        ),
        (
            "apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: a}\n",
            "<stdin>:1:",
            "did you mean Deployment?",
        ),
        (
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  labels:\n{{ include \"x\" . }}\n",
            "<stdin>:7:",
            "unrendered template",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}\n",
            "<stdin>:",
            "unrendered",
        ),
        ("\u{0}\u{1}binary", "<stdin>:", ""),
        ("- [unbalanced\n", "<stdin>:", "invalid YAML"),
        (
            "apiVersion: v1\nkind: Secret\nmetadata: {name: a, annotations: {wavegate.dev/lint-ignore: \"same-wave\"}}\n",
            "<stdin>:1:",
            "RULE: reason",
        ),
        (
            "apiVersion: v1\nkind: Secret\nmetadata: {name: a, annotations: {wavegate.dev/lint-ignore: \"same-wave:  \"}}\n",
            "<stdin>:1:",
            "needs a reason",
        ),
    ];
    for (input, place, words) in cases {
        let (code, out, err) = wavegate(&["lint", "-"], input);
        assert_eq!(code, 2, "{input:?}: {out}{err}");
        assert!(
            err.contains(place) && err.contains(words),
            "{input:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn annotation_silences_a_finding_with_its_reason() {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/lint/same-wave/fail.yaml")).unwrap();
    let silenced = text.replace(
        "metadata: {name: orders, namespace: shop}\nspec:\n  selector",
        "metadata:\n  name: orders\n  namespace: shop\n  annotations:\n    wavegate.dev/lint-ignore: \"same-wave: orders retries its first connection for 10 minutes\"\nspec:\n  selector",
    );
    assert_ne!(text, silenced);
    let (code, out, err) = wavegate(&["lint", "-"], &silenced);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("(silenced: orders retries its first connection for 10 minutes)"),
        "{out}"
    );
    let (_, json, _) = wavegate(&["lint", "-o", "json", "-"], &silenced);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["findings"][0]["rule"], "same-wave");
    assert_eq!(
        v["findings"][0]["suppressed"],
        "orders retries its first connection for 10 minutes"
    );
}

#[test]
fn json_output_names_objects_files_lines_and_waves() {
    let (code, out, _) = wavegate(
        &[
            "lint",
            "-o",
            "json",
            "tests/scenarios/lint/seed-001-forgejo.yaml",
        ],
        "",
    );
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let f = &v["findings"][1];
    assert_eq!(f["rule"], "same-wave");
    assert_eq!(f["locations"][0]["object"], "Deployment cicd/forgejo");
    assert_eq!(
        f["locations"][0]["file"],
        "tests/scenarios/lint/seed-001-forgejo.yaml"
    );
    assert_eq!(f["locations"][0]["line"], 48);
    assert_eq!(f["locations"][0]["wave"], 0);
    assert_eq!(f["locations"][0]["phase"], "Sync");
}

/// `npm ci` of tests/sarif (ajv and the OASIS SARIF 2.1.0 schema as shipped in
/// @microsoft/jest-sarif), at test time; node_modules is not committed.
fn sarif_validator() -> PathBuf {
    let dir = root().join("tests/sarif");
    if !dir.join("node_modules/ajv-draft-04").exists() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .expect("npm (Node.js) is required for the SARIF schema check");
        assert!(status.success(), "npm ci in tests/sarif failed");
    }
    dir.join("validate.mjs")
}

#[test]
fn sarif_output_is_valid_sarif_2_1_0_by_the_published_schema() {
    let validator = sarif_validator();
    let tmp = std::env::temp_dir().join(format!("wavegate-lint-sarif-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut files = Vec::new();
    // Findings of every rule, a clean run, and a silenced finding (SARIF suppressions).
    for (i, args) in [
        vec!["tests/scenarios/lint/seed-001-forgejo.yaml"],
        vec!["tests/scenarios/lint/seed-000-cockroachdb.yaml"],
        vec!["tests/scenarios/lint/seed-001-forgejo-fixed.yaml"],
        vec!["tests/fixtures/lint"],
    ]
    .into_iter()
    .enumerate()
    {
        let mut all = vec!["lint", "-o", "sarif"];
        all.extend(args);
        let (code, out, err) = wavegate(&all, "");
        assert!(code == 0 || code == 1, "{err}");
        let file = tmp.join(format!("{i}.sarif"));
        std::fs::write(&file, &out).unwrap();
        files.push(file);
    }
    let silenced = "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: a, annotations: {argocd.argoproj.io/sync-wave: \"1\"}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a, annotations: {wavegate.dev/lint-ignore: \"later-wave: demo\"}}\nspec: {volumes: [{name: s, secret: {secretName: s}}], containers: [{name: c, image: x}]}\n";
    let (code, out, _) = wavegate(&["lint", "-o", "sarif", "-"], silenced);
    assert_eq!(code, 0);
    assert!(out.contains("\"suppressions\""), "{out}");
    let file = tmp.join("silenced.sarif");
    std::fs::write(&file, &out).unwrap();
    files.push(file);
    // The validator rejects what is not SARIF, so a pass means something.
    let broken = tmp.join("broken.sarif");
    std::fs::write(
        &broken,
        out.replace("\"version\": \"2.1.0\"", "\"version\": \"2.0\""),
    )
    .unwrap();
    let run = |files: &[PathBuf]| {
        Command::new("node")
            .arg(&validator)
            .args(files)
            .output()
            .unwrap()
    };
    let bad = run(std::slice::from_ref(&broken));
    assert!(
        !bad.status.success(),
        "{}",
        String::from_utf8_lossy(&bad.stdout)
    );
    let good = run(&files);
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stdout)
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

// ---- the gitops-engine order against an independent reference --------------------------------

/// What the generator varies per object.
#[derive(Debug, Clone)]
struct Spec {
    kind: usize,
    name: usize,
    ns: usize,
    wave: Option<i64>,
    garbage_wave: bool,
    hook: usize,
    weight: Option<i64>,
}

const KINDS: [(&str, &str); 8] = [
    ("v1", "Namespace"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("batch/v1", "Job"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("example.com/v1", "Widget"),
    ("v1", "ConfigMap"),
];
const NAMES: [&str; 4] = ["a", "b", "zz", "m"];
const NAMESPACES: [Option<&str>; 3] = [Some("a"), Some("b"), None];
const HOOKS: [Option<(&str, &str)>; 10] = [
    None,
    None,
    None,
    Some(("argocd.argoproj.io/hook", "PreSync")),
    Some(("argocd.argoproj.io/hook", "PostSync")),
    Some(("argocd.argoproj.io/hook", "Sync")),
    Some(("argocd.argoproj.io/hook", "Skip")),
    Some(("argocd.argoproj.io/hook", "PreSync, PostSync")),
    Some(("helm.sh/hook", "pre-install,post-upgrade")),
    Some(("helm.sh/hook", "test")),
];

fn render(specs: &[Spec]) -> String {
    let mut docs = Vec::new();
    for s in specs {
        let (api, kind) = KINDS[s.kind];
        let name = if kind == "Namespace" {
            // A Namespace is named like the namespaces others use.
            NAMESPACES[s.name % 2].unwrap_or("a").to_string()
        } else if kind == "CustomResourceDefinition" {
            "widgets.example.com".to_string()
        } else {
            NAMES[s.name].to_string()
        };
        let mut ann = Vec::new();
        if let Some(w) = s.wave {
            ann.push(format!("argocd.argoproj.io/sync-wave: \"{w}\""));
        }
        if s.garbage_wave {
            ann.push("argocd.argoproj.io/sync-wave: \"soon\"".to_string());
        }
        if let Some((k, v)) = HOOKS[s.hook] {
            ann.push(format!("{k}: \"{v}\""));
        }
        if let Some(w) = s.weight {
            ann.push(format!("helm.sh/hook-weight: \"{w}\""));
        }
        let ns = match (kind, NAMESPACES[s.ns]) {
            ("Namespace" | "CustomResourceDefinition", _) | (_, None) => String::new(),
            (_, Some(ns)) => format!("\n  namespace: {ns}"),
        };
        let annotations = if ann.is_empty() {
            String::new()
        } else {
            format!("\n  annotations: {{{}}}", ann.join(", "))
        };
        let spec = if kind == "CustomResourceDefinition" {
            "\nspec: {group: example.com, names: {kind: Widget}}"
        } else {
            ""
        };
        docs.push(format!(
            "apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}{ns}{annotations}{spec}\n"
        ));
    }
    docs.join("---\n")
}

/// Keep one object per (kind, namespace, name), as a valid set has.
fn unique(specs: Vec<Spec>) -> Vec<Spec> {
    let mut seen = std::collections::BTreeSet::new();
    let text = render(&specs);
    let mut objs = Vec::new();
    manifest::parse("p.yaml", &text, true, &mut objs).unwrap();
    specs
        .into_iter()
        .zip(objs)
        .filter(|(_, o)| seen.insert((o.kind.clone(), o.namespace.clone(), o.name.clone())))
        .map(|(s, _)| s)
        .collect()
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0..KINDS.len(),
        0..NAMES.len(),
        0..NAMESPACES.len(),
        proptest::option::of(-3i64..4),
        proptest::bool::weighted(0.1),
        0..HOOKS.len(),
        proptest::option::weighted(0.2, -2i64..3),
    )
        .prop_map(|(kind, name, ns, wave, garbage_wave, hook, weight)| Spec {
            kind,
            name,
            ns,
            wave,
            garbage_wave,
            hook,
            weight,
        })
}

/// Which objects use a dependency (a Namespace's, a CRD's).
type Users = Box<dyn Fn(&manifest::Object) -> bool>;

/// The reference: each object's moments, computed from the rules as the Argo CD docs state
/// them ("Sync phases and waves"), not from the implementation's data flow:
/// - phases: a hook runs in each phase it names (Argo CD's annotation wins over Helm's), `Skip`
///   alone and Helm hooks Argo CD does not map mean never; everything else is Sync;
/// - wave: the sync-wave annotation if it is an integer, else the Helm hook weight, else 0;
/// - a Namespace (CRD) is applied no later than the earliest object in it (of its kind).
fn reference(objs: &[manifest::Object], dest: &str) -> BTreeMap<usize, Vec<Moment>> {
    let int =
        |o: &manifest::Object, k: &str| o.annotations.get(k).and_then(|v| v.parse::<i64>().ok());
    let wave_of = |o: &manifest::Object| {
        int(o, "argocd.argoproj.io/sync-wave")
            .or_else(|| int(o, "helm.sh/hook-weight"))
            .unwrap_or(0)
    };
    let phases_of = |o: &manifest::Object| -> Vec<Phase> {
        let split = |k: &str| -> Vec<String> {
            o.annotations
                .get(k)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let argo = split("argocd.argoproj.io/hook");
        let mut phases: Vec<Phase> = argo
            .iter()
            .filter_map(|t| match t.as_str() {
                "PreSync" => Some(Phase::PreSync),
                "Sync" => Some(Phase::Sync),
                "PostSync" => Some(Phase::PostSync),
                "SyncFail" => Some(Phase::SyncFail),
                _ => None,
            })
            .collect();
        let argo_known = argo.iter().any(|t| {
            matches!(
                t.as_str(),
                "PreSync" | "Sync" | "PostSync" | "SyncFail" | "Skip"
            )
        });
        let only_skip = argo_known && phases.is_empty();
        if only_skip {
            return vec![];
        }
        let helm = split("helm.sh/hook");
        if !argo_known {
            phases = helm
                .iter()
                .filter_map(|t| match t.as_str() {
                    "pre-install" | "pre-upgrade" => Some(Phase::PreSync),
                    "post-install" | "post-upgrade" => Some(Phase::PostSync),
                    _ => None,
                })
                .collect();
        }
        let hook = o.annotations.contains_key("argocd.argoproj.io/hook")
            || helm.iter().any(|h| h != "crd-install")
                && o.annotations.contains_key("helm.sh/hook");
        if !hook {
            return vec![Phase::Sync];
        }
        phases.sort();
        phases.dedup();
        phases
    };
    let mut out: BTreeMap<usize, Vec<Moment>> = BTreeMap::new();
    for (i, o) in objs.iter().enumerate() {
        let w = wave_of(o);
        out.insert(
            i,
            phases_of(o)
                .into_iter()
                .map(|phase| Moment { phase, wave: w })
                .collect(),
        );
    }
    let earliest = |pred: &dyn Fn(&manifest::Object) -> bool,
                    out: &BTreeMap<usize, Vec<Moment>>| {
        objs.iter()
            .enumerate()
            .filter(|(_, o)| pred(o))
            .flat_map(|(i, _)| out[&i].clone())
            .min()
    };
    for (i, o) in objs.iter().enumerate() {
        let dep_of: Option<Users> = if o.kind == "Namespace" {
            let name = o.name.clone();
            let dest = dest.to_string();
            Some(Box::new(move |x: &manifest::Object| {
                x.kind != "Namespace" && x.namespace.as_deref().unwrap_or(&dest) == name
            }))
        } else if o.kind == "CustomResourceDefinition" {
            Some(Box::new(|x: &manifest::Object| x.kind == "Widget"))
        } else {
            None
        };
        let Some(dep_of) = dep_of else { continue };
        let Some(first_user) = earliest(&*dep_of, &out) else {
            continue;
        };
        // Every task of the dependency that would come after its first user is applied with it.
        let moved: Vec<Moment> = out[&i]
            .iter()
            .map(|&m| if m > first_user { first_user } else { m })
            .collect();
        out.insert(i, moved);
    }
    out
}

proptest! {
    #![proptest_config(proptest_config::config(300))]

    #[test]
    fn sync_order_matches_the_reference_whatever_the_document_order(
        specs in proptest::collection::vec(spec(), 1..14),
        seed in any::<u64>(),
    ) {
        let specs = unique(specs);
        let mut objs = Vec::new();
        manifest::parse("p.yaml", &render(&specs), true, &mut objs).unwrap();
        let tasks = sync_tasks(&objs, "");
        // Moments per object, as the reference says.
        let mut got: BTreeMap<usize, Vec<Moment>> = (0..objs.len()).map(|i| (i, vec![])).collect();
        for t in &tasks {
            got.get_mut(&t.object).unwrap().push(t.at);
        }
        for v in got.values_mut() { v.sort(); }
        let mut want = reference(&objs, "");
        for v in want.values_mut() { v.sort(); }
        prop_assert_eq!(&got, &want, "{}", render(&specs));
        // Argo CD applies moment by moment: the task list never goes back in time.
        prop_assert!(tasks.windows(2).all(|w| w[0].at <= w[1].at));
        // Shuffled documents: the same sequence of (kind, namespace, name, moment).
        let mut shuffled = specs.clone();
        let mut rng = seed;
        for i in (1..shuffled.len()).rev() {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (rng >> 33) as usize % (i + 1));
        }
        let mut objs2 = Vec::new();
        manifest::parse("p.yaml", &render(&shuffled), true, &mut objs2).unwrap();
        let seq = |objs: &[manifest::Object]| -> Vec<(String, Option<String>, String, Moment)> {
            sync_tasks(objs, "").iter().map(|t| {
                let o = &objs[t.object];
                (o.kind.clone(), o.namespace.clone(), o.name.clone(), t.at)
            }).collect()
        };
        prop_assert_eq!(seq(&objs), seq(&objs2));
    }

    #[test]
    fn lint_never_panics_on_arbitrary_text(text in "(?s).{0,400}") {
        let _ = lint::lint_sources(&[Source::Text { name: "x".into(), text }], &Options::default());
    }
}

// ---- manifests nobody here wrote --------------------------------------------------------------

/// A Go module's directory in the module cache (downloaded through the Go module proxy when
/// absent).
pub(crate) fn go_module(module: &str) -> PathBuf {
    let out = Command::new("go")
        .args(["mod", "download", "-json", module])
        // A release that needs a newer Go than the machine's (3.6.1: go 1.27) gets it as
        // scripts/argocd.sh does: the go command fetches that toolchain once.
        .env(
            "GOTOOLCHAIN",
            std::env::var("WAVEGATE_GOTOOLCHAIN").unwrap_or_else(|_| "auto".to_string()),
        )
        .current_dir(std::env::temp_dir())
        .output()
        .expect("go is required");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "go mod download {module}: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let dir = v["Dir"]
        .as_str()
        .unwrap_or_else(|| panic!("go mod download {module}: {v}"));
    PathBuf::from(dir)
}

/// The Argo CD module version the project builds (hack/argocd/go.mod).
fn argocd_module() -> PathBuf {
    let gomod = std::fs::read_to_string(root().join("hack/argocd/go.mod")).unwrap();
    let version = gomod
        .lines()
        .find_map(|l| l.trim().strip_prefix("github.com/argoproj/argo-cd/v3 "))
        .map(|v| v.split_whitespace().next().unwrap().to_string())
        .expect("argo-cd version in hack/argocd/go.mod");
    go_module(&format!("github.com/argoproj/argo-cd/v3@{version}"))
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Lint each file on its own; every file must read and give no finding (a finding here would
/// be a false positive: these install and run as they are). Returns (objects, references).
fn lint_clean(files: &[PathBuf]) -> (usize, usize) {
    let (mut objects, mut refs) = (0, 0);
    for f in files {
        // As in a directory: documents without a kind (Prometheus rule files, Helm values in
        // the samples) are not objects and are skipped; anything else that does not read fails.
        let text = std::fs::read_to_string(f).unwrap();
        let mut objs = Vec::new();
        manifest::parse(&f.display().to_string(), &text, false, &mut objs)
            .unwrap_or_else(|e| panic!("{e}"));
        let report = lint::lint(&objs, &Options::default()).unwrap();
        assert!(
            report.findings.is_empty(),
            "{}: {:#?}",
            f.display(),
            report.findings
        );
        let index = references::Index::new(&objs, "");
        refs += references::references(&objs, "", &index).len();
        objects += objs.len();
    }
    eprintln!(
        "{} files, {objects} objects, {refs} references, 0 findings",
        files.len()
    );
    (objects, refs)
}

#[test]
fn argo_cd_install_manifests_are_clean() {
    let argocd = argocd_module();
    let files: Vec<PathBuf> = [
        "manifests/install.yaml",
        "manifests/ha/install.yaml",
        "manifests/namespace-install.yaml",
        "manifests/core-install.yaml",
        // The redis-ha Helm chart as Argo CD renders it (helm template output, upstream).
        "manifests/ha/base/redis-ha/chart/upstream.yaml",
    ]
    .iter()
    .map(|f| argocd.join(f))
    .collect();
    let (objects, refs) = lint_clean(&files);
    // The graph is not empty: Deployments read ConfigMaps and Secrets, run as
    // ServiceAccounts and reach Services (argocd-redis, argocd-repo-server) by DNS.
    assert!(
        objects > 200 && refs > 100,
        "{objects} objects, {refs} references"
    );
}

#[test]
fn cloudnative_pg_samples_and_config_are_clean() {
    let cnpg = go_module("github.com/cloudnative-pg/cloudnative-pg@v1.27.1");
    let mut files = files_under(&cnpg.join("docs/src/samples"));
    files.push(cnpg.join("releases/cnpg-1.27.1.yaml"));
    let (objects, _) = lint_clean(&files);
    assert!(objects > 100, "{objects}");
    // config/ is a tree of Kustomize bases: lint each base as the set it is.
    for dir in std::fs::read_dir(cnpg.join("config")).unwrap() {
        let dir = dir.unwrap().path();
        let r = lint::lint_sources(&[Source::Path(dir.clone())], &Options::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            r.findings.is_empty(),
            "{}: {:#?}",
            dir.display(),
            r.findings
        );
    }
}

#[test]
fn argo_cd_3_2_ships_health_checks_only_for_the_kinds_lint_assumes() {
    let argocd = argocd_module();
    let has = |gk: &str| {
        argocd
            .join("resource_customizations")
            .join(gk)
            .join("health.lua")
            .exists()
    };
    for gk in lint::argocd_cm::BUILT_IN {
        assert!(has(gk), "{gk} has no built-in health in this Argo CD");
    }
    for gk in [
        "postgresql.cnpg.io/Database",
        "crdb.cockroachlabs.com/CrdbCluster",
        "argoproj.io/Application",
        "wavegate.dev/WaveGate",
    ] {
        assert!(
            !has(gk),
            "{gk} has a built-in health check now: update lint::argocd_cm::BUILT_IN"
        );
    }
}

/// With the release's bundled scripts given (`--argocd-health-scripts`), a kind with a script
/// there has a health check: Argo CD 3.6.1 ships one for CNPG's `Database`, 3.5.1 does not, so
/// the same manifests need a WaveGate only under 3.5.1.
#[test]
fn a_bundled_script_of_the_given_release_counts_as_a_health_check() {
    let fixture = "tests/fixtures/lint/not-awaited/fail.yaml";
    let scripts = |v: &str| {
        go_module(&format!("github.com/argoproj/argo-cd/v3@{v}")).join("resource_customizations")
    };
    let (old, new) = (scripts("v3.5.1"), scripts("v3.6.1"));
    let with = |dir: &Path| Options {
        bundled: Some(std::sync::Arc::new(
            wavegate::argocd_lua::Bundled::load(dir).unwrap(),
        )),
        ..Options::default()
    };
    let r = lint_files(&[fixture], &with(&old));
    assert_eq!(rules(&r), [Rule::NotAwaited], "{r:#?}");
    let r = lint_files(&[fixture], &with(&new));
    assert_eq!(rules(&r), [], "{r:#?}");

    // The same through the CLI flag; a folder that cannot be read is bad input (exit 2).
    for (dir, code) in [(&old, 1), (&new, 0)] {
        let dir = dir.display().to_string();
        let (status, out, err) = wavegate(&["lint", "--argocd-health-scripts", &dir, fixture], "");
        assert_eq!(status, code, "{dir}: {out}{err}");
    }
    let (status, _, err) = wavegate(
        &[
            "lint",
            "--argocd-health-scripts",
            "/nonexistent/scripts",
            fixture,
        ],
        "",
    );
    assert_eq!(status, 2, "{err}");
    assert!(err.contains("/nonexistent/scripts"), "{err}");
}
