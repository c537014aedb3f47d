//! The rules: what in a set of manifests makes a wave start before what it needs is ready.

use super::argocd_cm::{ArgocdCm, has_health};
use super::manifest::{InputError, Object};
use super::printable::printable;
use super::references::{CNPG, Need, Reference, Target, templates};
use super::sync_order::{HOOK, Moment, Phase, SYNC_WAVE, Task, first_applied, last_moment};
use crate::checks::service::{format_labels, relevant_labels, resemblance};
use crate::resource::registry::{self, KindSpec};
use crate::views::{Interner, Labels};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The annotation that silences a finding on the objects it involves, with a reason:
/// `wavegate.dev/lint-ignore: "same-wave: the app retries until the database exists"`
/// (several: one per line or separated by `;`).
pub const IGNORE_ANNOTATION: &str = "wavegate.dev/lint-ignore";
const ANNOTATE: &str = "wavegate.dev/annotate";
const WAVEGATE: &str = "wavegate.dev";

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "LintRule")]
pub enum Rule {
    LaterWave,
    SameWave,
    NotAwaited,
    MissingJoinService,
    SelectorMatchesNothing,
    GateInLastWave,
    GateChecksLaterObject,
    GateNeedsLua,
    AppOfAppsWithoutHealth,
}

impl Rule {
    pub const ALL: [Rule; 9] = [
        Rule::LaterWave,
        Rule::SameWave,
        Rule::NotAwaited,
        Rule::MissingJoinService,
        Rule::SelectorMatchesNothing,
        Rule::GateInLastWave,
        Rule::GateChecksLaterObject,
        Rule::GateNeedsLua,
        Rule::AppOfAppsWithoutHealth,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Rule::LaterWave => "later-wave",
            Rule::SameWave => "same-wave",
            Rule::NotAwaited => "not-awaited",
            Rule::MissingJoinService => "missing-join-service",
            Rule::SelectorMatchesNothing => "selector-matches-nothing",
            Rule::GateInLastWave => "gate-in-last-wave",
            Rule::GateChecksLaterObject => "gate-checks-later-object",
            Rule::GateNeedsLua => "gate-needs-lua",
            Rule::AppOfAppsWithoutHealth => "app-of-apps-without-health",
        }
    }

    pub fn parse(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == id)
    }

    /// One line, for `--help`, SARIF and docs.
    pub fn summary(self) -> &'static str {
        match self {
            Rule::LaterWave => {
                "An object needs something that Argo CD applies only in a later wave or phase."
            }
            Rule::SameWave => {
                "An object needs another object to be ready (or to exist before it starts), but both are applied in the same wave."
            }
            Rule::NotAwaited => {
                "An object needs another to be ready, and nothing between them waits for it: Argo CD has no health check for its kind and no WaveGate checks it."
            }
            Rule::MissingJoinService => {
                "A CockroachDB CrdbCluster's pods join through <name>-join, which the manifests do not create before it."
            }
            Rule::SelectorMatchesNothing => {
                "A Service's selector matches no pod template, while a template nearly matches."
            }
            Rule::GateInLastWave => {
                "A WaveGate is in the last wave of the sync, where Argo CD waits for nothing."
            }
            Rule::GateChecksLaterObject => {
                "A WaveGate checks an object that Argo CD applies only after the gate's wave."
            }
            Rule::GateNeedsLua => {
                "A WaveGate (or an annotation-mode object) needs a health check that the given argocd-cm does not have."
            }
            Rule::AppOfAppsWithoutHealth => {
                "Child Applications sit in sync waves, but Argo CD has no health check for argoproj.io/Application."
            }
        }
    }

    /// SARIF level: `error` when the sync breaks or hangs, `warning` when it works by luck.
    pub fn level(self) -> &'static str {
        match self {
            Rule::NotAwaited | Rule::SelectorMatchesNothing | Rule::AppOfAppsWithoutHealth => {
                "warning"
            }
            _ => "error",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// An object a finding is about, and where it is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub object: String,
    /// When Argo CD applies it (`None`: never, or not in the manifests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<i64>,
    #[serde(skip)]
    pub index: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: Rule,
    pub level: &'static str,
    /// What is wrong, naming the objects and their waves.
    pub message: String,
    /// Why it matters at sync time.
    pub why: String,
    /// What to change; YAML to insert where that is the fix.
    pub fix: String,
    /// The objects involved, the one to change first.
    pub locations: Vec<Location>,
    /// Silenced by an in-manifest annotation, with its reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<String>,
}

/// A WaveGate of the set and what its checks point at.
struct Gate {
    object: usize,
    at: Moment,
    targets: Vec<GateTarget>,
}

#[derive(Debug)]
pub(crate) struct GateTarget {
    check: String,
    /// `group/Kind`, or for a `resource` check the kubectl resource (`plural.group`).
    pub(crate) kind: String,
    pub(crate) resource: bool,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl GateTarget {
    fn matches(&self, o: &Object, destination: &str) -> bool {
        if o.name != self.name || o.ns(destination) != self.namespace {
            return false;
        }
        if !self.resource {
            return o.group_kind() == self.kind;
        }
        let (plural, group) = self.kind.split_once('.').unwrap_or((&self.kind, ""));
        let kind = o.kind.to_ascii_lowercase();
        let plurals = [
            kind.clone(),
            format!("{kind}s"),
            format!("{kind}es"),
            kind.strip_suffix('y')
                .map(|k| format!("{k}ies"))
                .unwrap_or_default(),
        ];
        o.group == group && plurals.iter().any(|p| p == plural)
    }
}

pub struct Input<'a> {
    pub objects: &'a [Object],
    pub destination: &'a str,
    pub tasks: &'a [Task],
    pub argocd_cm: Option<&'a ArgocdCm>,
    pub bundled: Option<&'a crate::argocd_lua::Bundled>,
}

/// Every finding, suppressions applied; sorted by file and line.
pub fn findings(
    input: &Input<'_>,
    references: &[Reference],
    ignored: &BTreeSet<Rule>,
) -> Result<Vec<Finding>, InputError> {
    let objects = input.objects;
    let dest = input.destination;
    let first = first_applied(input.tasks, objects.len());
    let last = last_moment(input.tasks);
    let gates = gates(objects, dest, &first);
    let mut position = vec![None; objects.len()];
    for (i, t) in input.tasks.iter().enumerate() {
        if position[t.object].is_none() && first[t.object] == Some(t.at) {
            position[t.object] = Some(i);
        }
    }
    let cx = Cx {
        objects,
        dest,
        first: &first,
        gates: &gates,
        cm: input.argocd_cm,
        bundled: input.bundled,
        tasks: input.tasks,
        position,
    };
    let mut out = Vec::new();
    reference_rules(&cx, references, &mut out);
    selector_rule(&cx, &mut out);
    gate_rules(&cx, last, &mut out);
    app_of_apps_rule(&cx, &mut out);
    out.retain(|f| !ignored.contains(&f.rule));
    let silences = silences(objects)?;
    for f in &mut out {
        f.suppressed = f
            .locations
            .iter()
            .filter_map(|l| l.index)
            .find_map(|i| silences.get(&(i, f.rule)).cloned());
    }
    out.sort_by(|a, b| {
        let key = |f: &Finding| {
            f.locations
                .first()
                .map(|l| (l.file.clone(), l.line))
                .unwrap_or_default()
        };
        key(a)
            .cmp(&key(b))
            .then_with(|| a.rule.cmp(&b.rule))
            .then_with(|| a.message.cmp(&b.message))
    });
    out.dedup();
    Ok(out)
}

struct Cx<'a> {
    objects: &'a [Object],
    dest: &'a str,
    first: &'a [Option<Moment>],
    gates: &'a [Gate],
    cm: Option<&'a ArgocdCm>,
    bundled: Option<&'a crate::argocd_lua::Bundled>,
    tasks: &'a [Task],
    /// Each object's first task in `tasks` (at its `first` moment).
    position: Vec<Option<usize>>,
}

impl Cx<'_> {
    /// Whether Argo CD has stored `p` before it applies `c`, both in one moment: gitops-engine
    /// applies a moment's tasks in runs of one kind, one run after another (`runTasks`: "Only
    /// wait if the type of the next task is different than the previous type", each run through
    /// `processCreateTasks`), so an earlier run is applied before a later one starts — but no
    /// health is waited for between them.
    fn applied_before(&self, p: usize, c: usize) -> bool {
        let (Some(a), Some(b)) = (self.position[p], self.position[c]) else {
            return false;
        };
        let kind = |i: usize| self.objects[self.tasks[i].object].kind.as_str();
        a < b && (a..b).any(|i| kind(i) != kind(i + 1))
    }

    fn location(&self, i: usize) -> Location {
        let o = &self.objects[i];
        Location {
            file: o.file.to_string(),
            line: o.line,
            object: o.describe(),
            phase: self.first[i].map(|m| m.phase),
            wave: self.first[i].map(|m| m.wave),
            index: Some(i),
        }
    }

    fn when(&self, i: usize) -> String {
        self.first[i].map_or_else(|| "never applied".to_string(), |m| m.to_string())
    }

    /// Whether Argo CD itself waits for `o` to be ready before leaving its wave.
    fn argo_waits_for(&self, o: &Object) -> bool {
        let gk = o.group_kind();
        if has_health(self.cm, self.bundled, &gk) {
            return true;
        }
        // Annotation mode: wavegate's verdict on the object, read by a Lua check in argocd-cm.
        // Without an argocd-cm to look at, the annotation is taken at its word.
        o.annotations.get(ANNOTATE).is_some_and(|v| v == "true") && self.cm.is_none()
    }

    /// A gate that holds the sync between `from` (inclusive) and `to` (exclusive) and checks
    /// object `p` (for a CNPG Cluster, also a check of one of its Databases or DatabaseRoles:
    /// CNPG applies them only on a running Cluster).
    fn gate_between(&self, p: usize, from: Moment, to: Moment) -> Option<&Gate> {
        let o = &self.objects[p];
        self.gates.iter().find(|g| {
            from <= g.at
                && g.at < to
                && g.targets.iter().any(|t| {
                    t.matches(o, self.dest)
                        || (o.is(CNPG, "Cluster")
                            && (t.kind == format!("{CNPG}/Database")
                                || t.kind == format!("{CNPG}/DatabaseRole"))
                            && self.objects.iter().any(|d| {
                                t.matches(d, self.dest)
                                    && d.at(&["spec", "cluster", "name"]).and_then(Value::as_str)
                                        == Some(o.name.as_str())
                            }))
                })
        })
    }
}

fn gates(objects: &[Object], dest: &str, first: &[Option<Moment>]) -> Vec<Gate> {
    let mut out = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        if !o.is(WAVEGATE, "WaveGate") {
            continue;
        }
        let Some(at) = first[i] else { continue };
        let ns = o.ns(dest);
        let targets = o
            .at(&["spec", "checks"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|c| targets_of(registry::KINDS, c, ns))
            .collect();
        out.push(Gate {
            object: i,
            at,
            targets,
        });
    }
    out
}

/// What one check of a WaveGate points at, reading every entry the WaveGate CRD has: each of
/// `kinds`' (named by group/Kind) and the generic one (which names its kind in `resource`).
/// `ns` fills an omitted namespace.
pub(crate) fn targets_of(kinds: &[KindSpec], c: &Value, ns: &str) -> Vec<GateTarget> {
    let check = c
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    let entries = kinds
        .iter()
        .map(|k| (k.entry, k.group_kind(), false))
        .chain([(registry::GENERIC_ENTRY, String::new(), true)]);
    let mut targets = Vec::new();
    for (field, kind, resource) in entries {
        let Some(spec) = c.get(field) else { continue };
        let Some(name) = spec.get("name").and_then(Value::as_str) else {
            continue;
        };
        let kind = if resource {
            match spec.get("resource").and_then(Value::as_str) {
                Some(r) => r.to_string(),
                None => continue,
            }
        } else {
            kind
        };
        targets.push(GateTarget {
            check: check.clone(),
            kind,
            resource,
            namespace: spec
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or(ns)
                .to_string(),
            name: name.to_string(),
        });
    }
    targets
}

/// The entry of a gate that waits for `p`: its kind's own entry among `kinds`, which judges it
/// strictly, or else the generic one.
pub(crate) fn suggested_entry(kinds: &[KindSpec], p: &Object) -> String {
    match registry::by_group_kind_in(kinds, &p.group, &p.kind) {
        Some(k) => format!("{}: {{name: {}{}}}", k.entry, p.name, k.suggested),
        None => {
            let (group, kind) = (p.group.as_str(), p.kind.as_str());
            let plural = format!("{}s", kind.to_ascii_lowercase());
            let resource = if group.is_empty() {
                plural
            } else {
                format!("{plural}.{group}")
            };
            format!("resource: {{resource: {resource}, name: {}}}", p.name)
        }
    }
}

/// Annotations for placing an object at `m`.
fn placement(m: Moment) -> String {
    let mut s = String::new();
    if m.phase != Phase::Sync {
        s.push_str(&format!("    {HOOK}: {}\n", m.phase));
    }
    s.push_str(&format!("    {SYNC_WAVE}: \"{}\"\n", m.wave));
    s
}

fn at_wave(m: Moment, wave: i64) -> Moment {
    Moment {
        phase: m.phase,
        wave,
    }
}

/// A WaveGate that waits for `p`, placed at `at`, as YAML.
fn gate_yaml(p: &Object, at: Moment) -> String {
    let check = suggested_entry(registry::KINDS, p);
    let ns = p
        .namespace
        .as_ref()
        .map(|n| format!("  namespace: {n}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: wavegate.dev/v1alpha1\nkind: WaveGate\nmetadata:\n  name: {}-ready\n{ns}  annotations:\n{}spec:\n  checks:\n    - name: {}\n      {check}\n",
        p.name,
        placement(at),
        p.name
    )
}

fn reference_rules(cx: &Cx<'_>, refs: &[Reference], out: &mut Vec<Finding>) {
    let mut seen: BTreeSet<(usize, usize, Rule)> = BTreeSet::new();
    // Database findings, so that the same finding about their Cluster is not said twice.
    let mut db_findings: BTreeSet<(usize, String, Rule)> = BTreeSet::new();
    let mut cluster_findings: Vec<(usize, String, Finding)> = Vec::new();
    for r in refs {
        let c = r.consumer;
        let Some(cm) = cx.first[c] else { continue };
        let consumer = &cx.objects[c];
        let p = match &r.target {
            Target::Absent {
                kind,
                namespace,
                name,
            } => {
                out.push(missing_join(cx, c, cm, kind, namespace, name, &r.how));
                continue;
            }
            Target::Object(p) => *p,
        };
        let producer = &cx.objects[p];
        let Some(pm) = cx.first[p] else { continue };
        let rule = if pm > cm {
            Rule::LaterWave
        } else if pm == cm
            && (r.need == Need::Ready || (r.need == Need::ExistsFirst && !cx.applied_before(p, c)))
        {
            Rule::SameWave
        } else if pm < cm
            && r.need == Need::Ready
            && !cx.argo_waits_for(producer)
            && cx.gate_between(p, pm, cm).is_none()
        {
            Rule::NotAwaited
        } else {
            continue;
        };
        if !seen.insert((c, p, rule)) {
            continue;
        }
        let waits = cx.argo_waits_for(producer);
        let (c_desc, p_desc) = (consumer.describe(), producer.describe());
        let message = format!(
            "{c_desc} ({}) {}; {p_desc} is applied in {}",
            cx.when(c),
            r.how,
            cx.when(p)
        );
        let (why, fix) = match rule {
            Rule::LaterWave => {
                let why = "Argo CD applies the next wave only when this one is healthy, so the object waits for something that is not there yet: its pods fail or never start, and the sync hangs or fails.".to_string();
                let mut fix = if pm.phase == cm.phase {
                    format!(
                        "move {p_desc} to wave {} or earlier, or {c_desc} to wave {} or later",
                        cm.wave - 1,
                        pm.wave + 1
                    )
                } else {
                    format!("apply {p_desc} in the {} phase or earlier (it is in {}), or {c_desc} later", cm.phase, pm.phase)
                };
                if r.need == Need::Ready && !waits {
                    fix.push_str(&format!(
                        ", with a WaveGate between them:\n{}",
                        gate_yaml(producer, at_wave(pm, pm.wave))
                    ));
                }
                (why, fix)
            }
            Rule::SameWave if r.need == Need::ExistsFirst => (
                "Argo CD applies this object only with or after the consumer's kind in their wave, so the consumer may start before this exists; a CockroachDB node that cannot resolve its join address within seconds initialises a cluster of its own (seed 000: two one-node clusters).".to_string(),
                format!(
                    "move {p_desc} to an earlier wave:\n  metadata:\n    annotations:\n{}",
                    placement(at_wave(cm, cm.wave - 1)).replace("    ", "      ")
                ),
            ),
            Rule::SameWave if waits => (
                format!("Argo CD waits for no object's health within a wave: {c_desc} starts before {p_desc} is ready."),
                format!(
                    "move {c_desc} (and what must follow it) to wave {}: Argo CD waits for {p_desc}'s health before it starts that wave",
                    pm.wave + 1
                ),
            ),
            Rule::SameWave => (
                format!("Argo CD waits for no object's health within a wave: {c_desc} starts before the operator has made {p_desc} ready, and crashes or retries until it is."),
                format!(
                    "insert this WaveGate in wave {} and move {c_desc} (and what must follow it) to wave {}:\n{}",
                    pm.wave + 1,
                    pm.wave + 2,
                    gate_yaml(producer, at_wave(pm, pm.wave + 1))
                ),
            ),
            _ => {
                let gate_at = if pm.phase == cm.phase {
                    at_wave(cm, cm.wave - 1)
                } else {
                    pm
                };
                (
                    format!(
                        "Argo CD has no health check for {} (none built in{}; none in {}), so it moves on as soon as {p_desc} is stored, before the operator has made it ready.",
                        producer.group_kind(),
                        if cx.bundled.is_some() { " or bundled with the given release" } else { "" },
                        if cx.cm.is_some() { "the given argocd-cm" } else { "argocd-cm unless given with --argocd-cm" }
                    ),
                    format!("insert this WaveGate between them ({}):\n{}", gate_at, gate_yaml(producer, gate_at)),
                )
            }
        };
        let finding = Finding {
            rule,
            level: rule.level(),
            message,
            why,
            fix,
            locations: vec![cx.location(c), cx.location(p)],
            suppressed: None,
        };
        if producer.is(CNPG, "Database") {
            if let Some(cluster) = producer
                .at(&["spec", "cluster", "name"])
                .and_then(Value::as_str)
            {
                db_findings.insert((c, cluster.to_string(), rule));
            }
            out.push(finding);
        } else if producer.is(CNPG, "Cluster") {
            cluster_findings.push((c, producer.name.clone(), finding));
        } else {
            out.push(finding);
        }
    }
    for (c, cluster, f) in cluster_findings {
        if !db_findings.contains(&(c, cluster, f.rule)) {
            out.push(f);
        }
    }
}

fn missing_join(
    cx: &Cx<'_>,
    c: usize,
    cm: Moment,
    kind: &str,
    namespace: &str,
    name: &str,
    how: &str,
) -> Finding {
    let consumer = &cx.objects[c];
    let cluster = &consumer.name;
    let ns_line = if namespace.is_empty() {
        String::new()
    } else {
        format!("  namespace: {namespace}\n")
    };
    let before = at_wave(cm, cm.wave - 1);
    Finding {
        rule: Rule::MissingJoinService,
        level: Rule::MissingJoinService.level(),
        message: format!(
            "{} ({}) {how}; no {kind} {name} is in the manifests, so only the operator creates it, after the pods",
            consumer.describe(),
            cx.when(c)
        ),
        why: "Pods that cannot resolve the join address within seconds each initialise a new cluster: a 2-node deployment became two independent one-node clusters (seed 000).".to_string(),
        fix: format!(
            "create the join Service in an earlier wave (the operator adopts it):\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n{ns_line}  annotations:\n{}spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector:\n    crdb.cockroachlabs.com/cluster: {cluster}\n  ports:\n    - {{name: sql, port: 26257, targetPort: sql}}\n    - {{name: grpc, port: 26258, targetPort: grpc}}\n    - {{name: http, port: 8080, targetPort: http}}\n",
            placement(before)
        ),
        locations: vec![cx.location(c)],
        suppressed: None,
    }
}

fn selector_rule(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let templates = templates(cx.objects);
    if templates.is_empty() {
        return;
    }
    let mut strings = Interner::default();
    // Per namespace: (object, pod template labels, owning workload).
    type Candidates<'a> = Vec<(usize, Labels, Option<&'a str>)>;
    let mut by_ns: BTreeMap<&str, Candidates<'_>> = BTreeMap::new();
    for t in &templates {
        let labels = Labels::of(&t.labels, &mut strings);
        by_ns
            .entry(cx.objects[t.object].ns(cx.dest))
            .or_default()
            .push((t.object, labels, t.workload));
    }
    for (i, o) in cx.objects.iter().enumerate() {
        if !o.is("", "Service") || cx.first[i].is_none() {
            continue;
        }
        if o.at(&["spec", "type"]).and_then(Value::as_str) == Some("ExternalName") {
            continue;
        }
        let Some(Value::Object(sel)) = o.at(&["spec", "selector"]) else {
            continue;
        };
        let sel: BTreeMap<String, String> = sel
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        if sel.is_empty() {
            continue;
        }
        let selector = Labels::of(&sel, &mut strings);
        let Some(candidates) = by_ns.get(o.ns(cx.dest)) else {
            continue;
        };
        if candidates
            .iter()
            .any(|(_, l, _)| l.matches(selector.iter()))
        {
            continue;
        }
        // Only a template that nearly matches is evidence of a mistake: pods that match
        // nothing here may come from an operator (CNPG, CockroachDB) or another application.
        let best = candidates
            .iter()
            .filter_map(|(t, l, w)| Some((resemblance(&selector, &o.name, l, *w)?, *t, l)))
            .max_by(|a, b| {
                a.0.cmp(&b.0)
                    .then_with(|| cx.objects[b.1].name.cmp(&cx.objects[a.1].name))
            });
        let Some((_, t, labels)) = best else { continue };
        let target = &cx.objects[t];
        let wanted = format_labels(selector.iter());
        let fixed: Vec<(&str, &str)> = selector
            .iter()
            .filter_map(|(k, _)| Some((k, labels.get(k)?)))
            .collect();
        // The fix is several lines: label text, which the manifests write, must stay on one.
        let shown = printable(&wanted);
        let relabel = if target.kind == "Pod" {
            format!("label {} with {shown}", target.describe())
        } else {
            format!("label {}'s pod template with {shown}", target.describe())
        };
        let fix = if fixed.is_empty() {
            relabel
        } else {
            let lines: String = fixed
                .iter()
                .map(|(k, v)| format!("    {}: {}\n", printable(k), printable(v)))
                .collect();
            format!("select the template's labels:\n  selector:\n{lines}or {relabel}")
        };
        out.push(Finding {
            rule: Rule::SelectorMatchesNothing,
            level: Rule::SelectorMatchesNothing.level(),
            message: format!(
                "{} selects {wanted}, which matches no pod template; {} ({}) looks like the intended target",
                o.describe(),
                target.describe(),
                format_labels(relevant_labels(&selector, labels).into_iter())
            ),
            why: "Argo CD calls every Service Healthy, so the wave moves on while the Service has no endpoints: clients get connection refused (seed 001).".to_string(),
            fix,
            locations: vec![cx.location(i), cx.location(t)],
            suppressed: None,
        });
    }
}

fn gate_rules(cx: &Cx<'_>, last: Option<Moment>, out: &mut Vec<Finding>) {
    for g in cx.gates {
        let gate = &cx.objects[g.object];
        if Some(g.at) == last {
            out.push(Finding {
                rule: Rule::GateInLastWave,
                level: Rule::GateInLastWave.level(),
                message: format!("{} is in {}, the last of this sync", gate.describe(), g.at),
                why: "After the last wave Argo CD waits for nothing (gitops-engine sync_context.go, finalWave): the sync ends and the gate holds back no object.".to_string(),
                fix: format!(
                    "move the objects that need what the gate checks to {} or later",
                    at_wave(g.at, g.at.wave + 1)
                ),
                locations: vec![cx.location(g.object)],
                suppressed: None,
            });
        }
        for t in &g.targets {
            let Some(p) = cx.objects.iter().position(|o| t.matches(o, cx.dest)) else {
                continue;
            };
            let Some(pm) = cx.first[p] else { continue };
            if pm <= g.at {
                continue;
            }
            let target = &cx.objects[p];
            out.push(Finding {
                rule: Rule::GateChecksLaterObject,
                level: Rule::GateChecksLaterObject.level(),
                message: format!(
                    "{} ({}) checks {} (check {}), which is applied in {}",
                    gate.describe(),
                    g.at,
                    target.describe(),
                    t.check,
                    pm
                ),
                why: "Argo CD applies the checked object only after the gate's wave is healthy, and the gate is healthy only after the object is: the sync waits until the gate's timeout, or forever.".to_string(),
                fix: format!(
                    "move {} to {pm} or later, or {} to {} or earlier",
                    gate.describe(),
                    target.describe(),
                    g.at
                ),
                locations: vec![cx.location(g.object), cx.location(p)],
                suppressed: None,
            });
        }
    }
    let Some(cm) = cx.cm else { return };
    let mut needs: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for g in cx.gates {
        needs
            .entry(format!("{WAVEGATE}/WaveGate"))
            .or_default()
            .push(g.object);
    }
    for (i, o) in cx.objects.iter().enumerate() {
        if o.annotations.get(ANNOTATE).is_some_and(|v| v == "true") && cx.first[i].is_some() {
            needs.entry(o.group_kind()).or_default().push(i);
        }
    }
    for (gk, objs) in needs {
        // Annotation mode needs wavegate's own script even for kinds Argo CD judges natively.
        if cm.has_health(&gk) {
            continue;
        }
        let key = match gk.split_once('/') {
            Some((g, k)) => format!("{g}_{k}"),
            None => gk.clone(),
        };
        let what = if gk == format!("{WAVEGATE}/WaveGate") {
            "WaveGate".to_string()
        } else {
            format!("annotation-mode {gk}")
        };
        out.push(Finding {
            rule: Rule::GateNeedsLua,
            level: Rule::GateNeedsLua.level(),
            message: format!(
                "{} needs Argo CD to read its health, but the given argocd-cm has no resource.customizations.health.{key}",
                objs.iter().map(|&i| cx.objects[i].describe()).collect::<Vec<_>>().join(", ")
            ),
            why: format!("Without that health check Argo CD treats every {what} as done the moment it is applied, so it holds back nothing."),
            fix: format!("add resource.customizations.health.{key} to argocd-cm: wavegate ships it in argocd/argocd-cm/argocd-cm-patch.yaml (kubectl apply -k argocd/argocd-cm)"),
            locations: objs.iter().map(|&i| cx.location(i)).collect(),
            suppressed: None,
        });
    }
}

fn app_of_apps_rule(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    if has_health(cx.cm, cx.bundled, "argoproj.io/Application") {
        return;
    }
    let last = cx.first.iter().flatten().max().copied();
    let mut held: Vec<usize> = Vec::new();
    for (i, o) in cx.objects.iter().enumerate() {
        if !o.is("argoproj.io", "Application") {
            continue;
        }
        let Some(at) = cx.first[i] else { continue };
        // Only an Application something comes after is relied upon to be healthy.
        if last.is_none_or(|l| at >= l) {
            continue;
        }
        // A gate checking it holds what comes after the gate; nothing but gates may sit
        // between the child and that gate.
        let gated = cx.gates.iter().any(|g| {
            at <= g.at
                && g.targets.iter().any(|t| t.matches(o, cx.dest))
                && cx.objects.iter().enumerate().all(|(j, other)| {
                    other.is(WAVEGATE, "WaveGate")
                        || cx.first[j].is_none_or(|m| m <= at || m > g.at)
                })
        });
        if gated {
            continue;
        }
        held.push(i);
    }
    let Some(&first) = held.first() else { return };
    let child = &cx.objects[first];
    let at = cx.first[first].unwrap_or(Moment {
        phase: Phase::Sync,
        wave: 0,
    });
    out.push(Finding {
        rule: Rule::AppOfAppsWithoutHealth,
        level: Rule::AppOfAppsWithoutHealth.level(),
        message: format!(
            "child Applications sit in waves that later waves rely on ({}), but Argo CD has no health check for argoproj.io/Application{}",
            held.iter().map(|&i| format!("{} in {}", cx.objects[i].describe(), cx.when(i))).collect::<Vec<_>>().join(", "),
            if cx.cm.is_some() { " in the given argocd-cm" } else { " unless argocd-cm adds one (give it with --argocd-cm)" }
        ),
        why: "Argo CD removed the Application health check in 1.8: a child Application counts as done once applied, so the next wave starts before the child has synced or become healthy (argo-cd #4577, #6708).".to_string(),
        fix: format!(
            "add resource.customizations.health.argoproj.io_Application to argocd-cm (wavegate ships one: argocd/resource_customizations/argoproj.io/Application/health.lua), or gate each child, e.g.:\n{}",
            gate_yaml(child, at)
        ),
        locations: held.iter().map(|&i| cx.location(i)).collect(),
        suppressed: None,
    });
}

/// `(object, rule) → reason` from the objects' ignore annotations.
fn silences(objects: &[Object]) -> Result<BTreeMap<(usize, Rule), String>, InputError> {
    let mut out = BTreeMap::new();
    for (i, o) in objects.iter().enumerate() {
        let Some(value) = o.annotations.get(IGNORE_ANNOTATION) else {
            continue;
        };
        for entry in value
            .split(['\n', ';'])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let bad = |message: String| InputError {
                file: o.file.to_string(),
                line: o.line,
                message,
            };
            let Some((rule, reason)) = entry.split_once(':') else {
                return Err(bad(format!(
                    "{IGNORE_ANNOTATION} on {}: {entry:?} must be \"RULE: reason\"",
                    o.describe()
                )));
            };
            let (rule, reason) = (rule.trim(), reason.trim());
            let Some(rule) = Rule::parse(rule) else {
                return Err(bad(format!(
                    "{IGNORE_ANNOTATION} on {}: unknown rule {rule:?} (rules: {})",
                    o.describe(),
                    Rule::ALL.map(Rule::id).join(", ")
                )));
            };
            if reason.is_empty() {
                return Err(bad(format!(
                    "{IGNORE_ANNOTATION} on {}: silencing {rule} needs a reason (\"{rule}: why it is fine\")",
                    o.describe()
                )));
            }
            out.insert((i, rule), reason.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::manifest;

    fn objects(text: &str) -> Vec<Object> {
        let mut out = Vec::new();
        manifest::parse("test.yaml", text, true, &mut out).unwrap();
        out
    }

    const WAVE_0: Moment = Moment {
        phase: Phase::Sync,
        wave: 0,
    };

    /// A WaveGate entry lint does not read is a gate lint does not see: it would report the
    /// wave the gate already holds, or suggest a second gate.
    #[test]
    fn every_entry_of_the_registry_is_read_as_a_gate_target() {
        let kinds = registry::KINDS
            .iter()
            .map(|k| (k.entry, "", k.group_kind()))
            .chain([(
                registry::GENERIC_ENTRY,
                ", resource: jobs.batch",
                "jobs.batch".to_string(),
            )]);
        for (entry, extra, kind) in kinds {
            let text = format!(
                "apiVersion: wavegate.dev/v1alpha1\nkind: WaveGate\nmetadata: {{name: g, namespace: ns}}\nspec:\n  checks:\n    - name: c\n      {entry}: {{name: x{extra}}}\n"
            );
            let found = gates(&objects(&text), "default", &[Some(WAVE_0)]);
            let targets = &found[0].targets;
            assert_eq!(targets.len(), 1, "{entry}");
            assert_eq!(
                (targets[0].kind.as_str(), targets[0].name.as_str()),
                (kind.as_str(), "x")
            );
            assert_eq!(targets[0].resource, entry == registry::GENERIC_ENTRY);
        }
    }

    /// The gate a fix suggests asks for each dedicated kind by its own entry, which is what
    /// judges it strictly; the generic entry would judge it by kstatus.
    #[test]
    fn a_suggested_gate_checks_a_dedicated_kind_by_its_entry() {
        for k in registry::KINDS {
            let api_version = if k.group.is_empty() {
                "v1".to_string()
            } else {
                format!("{}/v1", k.group)
            };
            let text = format!(
                "apiVersion: {api_version}\nkind: {}\nmetadata: {{name: x, namespace: ns}}\n",
                k.kind
            );
            let yaml = gate_yaml(&objects(&text)[0], WAVE_0);
            let gate: Value = serde_yaml::from_str(&yaml).unwrap();
            let check = &gate["spec"]["checks"][0];
            assert_eq!(check[k.entry]["name"], "x", "{yaml}");
            // Read back by lint as the gate it is.
            let found = gates(&objects(&yaml), "default", &[Some(WAVE_0)]);
            assert_eq!(found[0].targets[0].kind, k.group_kind(), "{yaml}");
        }
    }
}
