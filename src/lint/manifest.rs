//! Rendered manifests in, objects out, each with the file and line it was written at.
//!
//! Input is what `kustomize build`, `helm template` and `argocd app manifests` print:
//! multi-document YAML (or JSON), possibly `List` objects. Documents are split here, on the
//! `---` markers YAML puts at column 0 (inside a block scalar content is always indented, so a
//! marker there is never text), so that every object and every parse error carries the line
//! of the file it came from. Bad input is an [`InputError`] naming file and line; it never
//! panics and is never guessed around.

use super::printable::{is_hidden, printable};
use super::yaml::{Budget, Refusal};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// Input that cannot be linted, with where it is.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{file}:{line}: {message}")]
pub struct InputError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl InputError {
    fn at(file: &str, line: usize, message: impl Into<String>) -> InputError {
        InputError {
            file: file.to_string(),
            line,
            message: message.into(),
        }
    }
}

/// One Kubernetes object as written in a manifest.
#[derive(Debug, Clone)]
pub struct Object {
    pub file: Arc<str>,
    /// 1-based line of the object's first line (its document's first non-comment line).
    pub line: usize,
    pub api_version: String,
    /// The API group (`""` for the core group).
    pub group: String,
    pub kind: String,
    /// `metadata.name`, or `metadata.generateName` for hooks that are named at sync time.
    pub name: String,
    /// `metadata.namespace` as written (absent for cluster-scoped objects and for objects that
    /// take the Application's destination namespace).
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub body: Value,
}

impl Object {
    /// `group/Kind` (`Kind` for the core group), as argocd-cm keys and messages name kinds.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}/{}", self.group, self.kind)
        }
    }

    pub fn is(&self, group: &str, kind: &str) -> bool {
        self.group == group && self.kind == kind
    }

    /// The namespace the object lands in: its own, else the destination's (`""` when the
    /// destination is not known; all such objects then share it).
    pub fn ns<'a>(&'a self, destination: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(destination)
    }

    /// `Kind ns/name`, as messages name an object.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    pub fn at(&self, path: &[&str]) -> Option<&Value> {
        path.iter().try_fold(&self.body, |v, key| v.get(key))
    }
}

/// Where manifests come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file, or a directory read recursively (`*.yaml`, `*.yml`, `*.json`; no hidden
    /// entries, no symlinked directories, symlinked files only inside it).
    Path(PathBuf),
    /// Text already read (stdin, or a test), with the name findings should show.
    Text { name: String, text: String },
}

/// Read every source; the first bad document stops the run. Each file is read once, however
/// many names lead to it.
pub fn read(sources: &[Source]) -> Result<Vec<Object>, InputError> {
    let mut objects = Vec::new();
    let budget = &mut Budget::default();
    let mut read = HashSet::new();
    for source in sources {
        match source {
            Source::Text { name, text } => parse_within(name, text, true, budget, &mut objects)?,
            Source::Path(path) if path.is_dir() => {
                let shown = path.display().to_string();
                let io = |e: std::io::Error| InputError::at(&shown, 0, e.to_string());
                let root = path.canonicalize().map_err(io)?;
                let mut files = Vec::new();
                walk(path, &root, &mut files).map_err(io)?;
                // A file's own name before a link's, then path order.
                files.sort_by(|a, b| (a.link, &a.path).cmp(&(b.link, &b.path)));
                files.retain(|f| read.insert(f.canonical.clone()));
                files.sort_by(|a, b| a.path.cmp(&b.path));
                for file in files {
                    let text = read_text(&file.path)?;
                    // A chart or kustomization directory also holds values files, Chart.yaml
                    // and the like: documents without a kind are not objects there.
                    let name = file.path.display().to_string();
                    parse_within(&name, &text, false, budget, &mut objects)?;
                }
            }
            Source::Path(path) => {
                // Named on the command line: read wherever it is, once.
                if let Ok(canonical) = path.canonicalize()
                    && !read.insert(canonical)
                {
                    continue;
                }
                let text = read_text(path)?;
                parse_within(
                    &path.display().to_string(),
                    &text,
                    true,
                    budget,
                    &mut objects,
                )?;
            }
        }
    }
    Ok(objects)
}

fn read_text(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path)
        .map_err(|e| InputError::at(&path.display().to_string(), 0, format!("cannot read: {e}")))
}

/// A manifest file found in a directory.
struct Found {
    /// As reached from the directory given.
    path: PathBuf,
    canonical: PathBuf,
    /// Reached through a symbolic link.
    link: bool,
}

/// The manifest files under `dir`, which is inside `root` (canonical). A pull request writes
/// the tree, so the walk stays in it: a symlinked directory is not entered (links to `.` made
/// the walk endless, a link to `/` read the CI runner's files), a symlinked file is read only
/// when it resolves to a file inside `root`, and what is neither a file nor a directory (a
/// FIFO would block the read) is passed over.
fn walk(dir: &Path, root: &Path, out: &mut Vec<Found>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&path, root, out)?;
            continue;
        }
        let manifest = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if !manifest {
            continue;
        }
        if kind.is_file() {
            let canonical = path.canonicalize()?;
            out.push(Found {
                path,
                canonical,
                link: false,
            });
        } else if kind.is_symlink()
            && let Ok(canonical) = path.canonicalize()
            && canonical.starts_with(root)
            && canonical.is_file()
        {
            out.push(Found {
                path,
                canonical,
                link: true,
            });
        }
    }
    Ok(())
}

/// Parse one file's text. `strict`: a document without `kind` is an error (a file named on
/// the command line must hold objects); otherwise it is skipped.
pub fn parse(
    file: &str,
    text: &str,
    strict: bool,
    out: &mut Vec<Object>,
) -> Result<(), InputError> {
    parse_within(file, text, strict, &mut Budget::default(), out)
}

/// [`parse`], as part of a run whose documents share `budget`.
pub(crate) fn parse_within(
    file: &str,
    text: &str,
    strict: bool,
    budget: &mut Budget,
    out: &mut Vec<Object>,
) -> Result<(), InputError> {
    let file: Arc<str> = Arc::from(file);
    for doc in documents(text) {
        if let Some((line, _)) = doc
            .lines
            .iter()
            .find(|(_, l)| l.trim_start().starts_with("{{"))
        {
            return Err(InputError::at(
                &file,
                *line,
                "unrendered template (`{{ … }}`): lint rendered manifests (helm template, kustomize build, argocd app manifests)",
            ));
        }
        let body = doc
            .lines
            .iter()
            .map(|(_, l)| *l)
            .collect::<Vec<_>>()
            .join("\n");
        let value: Value = match budget.document(&body) {
            Ok(v) => v,
            Err(Refusal::Expands) => return Err(expands(&file, doc.start)),
            Err(Refusal::Invalid(e)) => {
                let line = e
                    .location()
                    .map_or(doc.first, |l| doc.first + l.line().saturating_sub(1));
                let hint = if body.contains("{{") {
                    " (it holds `{{`: is it an unrendered template?)"
                } else {
                    ""
                };
                return Err(InputError::at(
                    &file,
                    line,
                    format!("invalid YAML: {}{hint}", first_sentence(&e.to_string())),
                ));
            }
        };
        let line = doc.start;
        match value {
            Value::Null => {}
            Value::Array(items) => {
                for item in items {
                    object(&file, line, item, strict, out)?;
                }
            }
            v => object(&file, line, v, strict, out)?,
        }
    }
    Ok(())
}

/// A document whose aliases expand past the run's budget.
pub(crate) fn expands(file: &str, line: usize) -> InputError {
    InputError::at(
        file,
        line,
        format!(
            "YAML aliases in this document expand past what wavegate lint reads ({}); expand them in the file, or lint it in parts",
            Budget::describe()
        ),
    )
}

/// serde_yaml appends " at line N column M"; the line is reported separately.
fn first_sentence(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

fn object(
    file: &Arc<str>,
    line: usize,
    value: Value,
    strict: bool,
    out: &mut Vec<Object>,
) -> Result<(), InputError> {
    let Value::Object(map) = &value else {
        return Err(InputError::at(
            file,
            line,
            "not a Kubernetes object (expected a mapping with apiVersion and kind)",
        ));
    };
    let kind = map.get("kind");
    if kind.is_none() && !strict {
        return Ok(());
    }
    let kind = text_field(file, line, kind, "kind")?;
    let api_version = text_field(file, line, map.get("apiVersion"), "apiVersion")?;
    // `kind: List` (kubectl get -o yaml, some `argocd app manifests` outputs) wraps objects.
    if kind.ends_with("List")
        && let Some(Value::Array(items)) = map.get("items")
    {
        for item in items {
            object(file, line, item.clone(), true, out)?;
        }
        return Ok(());
    }
    let group = match api_version.rsplit_once('/') {
        Some((g, _)) => g.to_string(),
        None => String::new(),
    };
    // Kustomize's own configuration is not applied to a cluster.
    if group == "kustomize.config.k8s.io" || group == "config.kubernetes.io" {
        return Ok(());
    }
    known_kind(file, line, &group, &api_version, &kind)?;
    let meta = map.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .or_else(|| meta.and_then(|m| m.get("generateName")));
    let name = text_field(file, line, name, "metadata.name")?;
    let namespace = match meta.and_then(|m| m.get("namespace")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(text_field(file, line, Some(v), "metadata.namespace")?),
    };
    let labels = string_map(meta.and_then(|m| m.get("labels")));
    let annotations = string_map(meta.and_then(|m| m.get("annotations")));
    out.push(Object {
        file: file.clone(),
        line,
        api_version,
        group,
        kind,
        name,
        namespace,
        labels,
        annotations,
        body: value,
    });
    Ok(())
}

fn text_field(
    file: &str,
    line: usize,
    value: Option<&Value>,
    field: &str,
) -> Result<String, InputError> {
    match value {
        Some(Value::String(s)) if s.contains("{{") => Err(InputError::at(
            file,
            line,
            format!("{field} {s:?} is an unrendered template: lint rendered manifests"),
        )),
        // Kubernetes refuses control characters in kinds, names and namespaces; in a lint
        // message they would write to the CI log (see `printable`).
        Some(Value::String(s)) if s.chars().any(is_hidden) => Err(InputError::at(
            file,
            line,
            format!(
                "{field} \"{}\" holds a control character, which Kubernetes refuses",
                printable(s)
            ),
        )),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(other) if !other.is_null() && !other.is_string() => Err(InputError::at(
            file,
            line,
            format!("{field} must be a string, not {other}"),
        )),
        _ => Err(InputError::at(
            file,
            line,
            format!("object without {field}"),
        )),
    }
}

/// Labels and annotations as strings; a non-string value (which the API server would reject)
/// is kept as its JSON text so nothing is silently dropped.
fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    let Some(Value::Object(map)) = value else {
        return BTreeMap::new();
    };
    map.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Kinds of the built-in API groups. A kind these groups do not serve is a typo the API server
/// would reject at sync time ("no matches for kind"); kinds of other groups belong to CRDs this
/// lint cannot know and are accepted.
const BUILT_IN: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "Namespace",
            "Node",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
            "Service",
            "ServiceAccount",
        ],
    ),
    (
        "apps",
        &[
            "ControllerRevision",
            "DaemonSet",
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
        ],
    ),
    ("batch", &["CronJob", "Job"]),
    (
        "networking.k8s.io",
        &[
            "Ingress",
            "IngressClass",
            "IPAddress",
            "NetworkPolicy",
            "ServiceCIDR",
        ],
    ),
    (
        "rbac.authorization.k8s.io",
        &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    ),
    (
        "policy",
        &["PodDisruptionBudget", "Eviction", "PodSecurityPolicy"],
    ),
    ("autoscaling", &["HorizontalPodAutoscaler", "Scale"]),
    (
        "storage.k8s.io",
        &[
            "CSIDriver",
            "CSINode",
            "CSIStorageCapacity",
            "StorageClass",
            "VolumeAttachment",
            "VolumeAttributesClass",
        ],
    ),
    ("apiextensions.k8s.io", &["CustomResourceDefinition"]),
    ("apiregistration.k8s.io", &["APIService"]),
    (
        "admissionregistration.k8s.io",
        &[
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
        ],
    ),
    ("scheduling.k8s.io", &["PriorityClass"]),
    ("coordination.k8s.io", &["Lease", "LeaseCandidate"]),
    ("discovery.k8s.io", &["EndpointSlice"]),
    ("node.k8s.io", &["RuntimeClass"]),
    ("events.k8s.io", &["Event"]),
    (
        "certificates.k8s.io",
        &["CertificateSigningRequest", "ClusterTrustBundle"],
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        &["FlowSchema", "PriorityLevelConfiguration"],
    ),
];

fn known_kind(
    file: &str,
    line: usize,
    group: &str,
    api_version: &str,
    kind: &str,
) -> Result<(), InputError> {
    let Some((_, kinds)) = BUILT_IN.iter().find(|(g, _)| *g == group) else {
        return Ok(());
    };
    if kinds.contains(&kind) {
        return Ok(());
    }
    let hint = kinds
        .iter()
        .map(|k| (edit_distance(&k.to_lowercase(), &kind.to_lowercase()), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| format!(" (did you mean {k}?)"))
        .unwrap_or_default();
    Err(InputError::at(
        file,
        line,
        format!("unknown kind {kind:?} for apiVersion {api_version}{hint}"),
    ))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let old = row[j + 1];
            row[j + 1] = (old + 1).min(row[j] + 1).min(prev + usize::from(ca != *cb));
            prev = old;
        }
    }
    row[b.len()]
}

struct Document<'a> {
    /// Line of the first line handed to the YAML parser (for its error positions).
    first: usize,
    /// Line of the first content line (not blank, not a comment): where the object "is".
    start: usize,
    lines: Vec<(usize, &'a str)>,
}

fn flush<'a>(lines: &mut Vec<(usize, &'a str)>, first: usize, docs: &mut Vec<Document<'a>>) {
    let content = lines.iter().find(|(_, l)| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    });
    if let Some((start, _)) = content {
        let start = *start;
        docs.push(Document {
            first,
            start,
            lines: std::mem::take(lines),
        });
    }
    lines.clear();
}

fn documents(text: &str) -> Vec<Document<'_>> {
    let mut docs = Vec::new();
    let mut current: Vec<(usize, &str)> = Vec::new();
    let mut first = 1;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        // `---` (optionally followed by content we do not support, e.g. a tag) starts a
        // document; `...` ends one.
        let marker = line.starts_with("---")
            && line[3..]
                .chars()
                .next()
                .is_none_or(|c| c == ' ' || c == '\t');
        if marker || line.trim_end() == "..." {
            flush(&mut current, first, &mut docs);
            first = n + 1;
            continue;
        }
        if current.is_empty() {
            first = n;
        }
        current.push((n, line));
    }
    flush(&mut current, first, &mut docs);
    docs
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn read_text(text: &str) -> Result<Vec<Object>, InputError> {
        let mut out = Vec::new();
        parse("m.yaml", text, true, &mut out).map(|_| out)
    }

    #[test]
    fn each_object_carries_the_line_it_starts_at() {
        let objects = read_text(
            "# header\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n\n# c\napiVersion: v1\nkind: Secret\nmetadata: {name: b, namespace: x}\n",
        )
        .unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!((objects[0].line, objects[0].name.as_str()), (3, "a"));
        assert_eq!(
            (objects[1].line, objects[1].describe().as_str()),
            (9, "Secret x/b")
        );
    }

    #[test]
    fn invalid_yaml_names_file_and_line() {
        let e = read_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: [b\n").unwrap_err();
        assert_eq!(e.file, "m.yaml");
        assert!(e.line >= 8, "{e}");
        assert!(e.message.starts_with("invalid YAML"), "{e}");
    }

    #[test]
    fn unrendered_template_is_bad_input_with_its_line() {
        let e = read_text("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels:\n    {{- include \"labels\" . | nindent 4 }}\n").unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        assert!(e.message.contains("unrendered template"), "{e}");
        let e = read_text(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: \"{{ .Release.Name }}-join\"\n",
        )
        .unwrap_err();
        assert!(e.message.contains("unrendered"), "{e}");
    }

    #[test]
    fn templates_inside_values_are_data_not_templating() {
        let objects = read_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: alerts}\ndata:\n  rule: 'summary: {{ $labels.instance }} down'\n").unwrap();
        assert_eq!(objects.len(), 1);
    }

    #[test]
    fn misspelt_built_in_kind_is_bad_input_with_a_suggestion() {
        let e =
            read_text("apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: a}\n").unwrap_err();
        assert!(e.message.contains("did you mean Deployment?"), "{e}");
        // Kinds of other groups come from CRDs the lint cannot see.
        assert!(
            read_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: a}\n").is_ok()
        );
    }

    #[test]
    fn objects_without_kind_or_name_are_bad_input() {
        assert!(read_text("apiVersion: v1\nmetadata: {name: a}\n").is_err());
        assert!(read_text("apiVersion: v1\nkind: Secret\nmetadata: {}\n").is_err());
        assert!(read_text("- 1\n- 2\n").is_err());
        assert!(read_text("just text\n").is_err());
    }

    #[test]
    fn lists_and_json_are_read() {
        let objects = read_text(r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a"}},{"apiVersion":"v1","kind":"Secret","metadata":{"name":"b"}}]}"#).unwrap();
        assert_eq!(objects.len(), 2);
    }

    /// A billion-laughs document: `levels` anchors, each a list of `width` aliases of the one
    /// before, so that a few KB expand to `width^levels` values.
    pub(crate) fn billion_laughs(levels: usize, width: usize) -> String {
        let mut text =
            String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: laughs}\ndata:\n");
        text.push_str(&format!("  l0: &l0 [{}]\n", vec!["lol"; width].join(", ")));
        for level in 1..levels {
            let alias = format!("*l{}", level - 1);
            text.push_str(&format!(
                "  l{level}: &l{level} [{}]\n",
                vec![alias.as_str(); width].join(", ")
            ));
        }
        text
    }

    #[test]
    fn yaml_aliases_cannot_expand_a_small_file_into_millions_of_values() {
        // Growing sizes: the smallest (about 1.5 KB, a million values) was read on main.
        for (levels, width) in [(3, 100), (3, 300), (4, 100), (3, 1000), (10, 10)] {
            let text = format!("# laughs\n{}", billion_laughs(levels, width));
            let e = read_text(&text).unwrap_err();
            assert_eq!((e.file.as_str(), e.line), ("m.yaml", 2), "{e}");
            assert!(e.message.contains("aliases"), "{e}");
        }
        // Aliases as people use them (shared blocks) still read.
        let shared = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared}\ndata:\n  x: &x {a: '1', b: '2'}\n  y: *x\n  z: {<<: *x, c: '3'}\n";
        assert_eq!(read_text(shared).unwrap().len(), 1);
    }

    #[test]
    fn names_with_control_characters_are_refused() {
        for name in [
            r#""a\n::error file=x::forged""#,
            r#""a\e[2Jb""#,
            r#""a\rb""#,
        ] {
            let text = format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: ns}}\n"
            );
            let e = read_text(&text).unwrap_err();
            assert!(e.message.contains("control character"), "{e}");
            assert!(!e.to_string().contains('\n'), "{e}");
            let text =
                format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: a, namespace: {name}}}\n");
            assert!(read_text(&text).is_err());
        }
    }

    /// A directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(what: &str) -> TempDir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir()
                .join(format!("wavegate-{what}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn names_read(dir: &Path) -> Vec<String> {
        read(&[Source::Path(dir.to_path_buf())])
            .unwrap()
            .iter()
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect()
    }

    #[test]
    fn a_directory_walk_stays_in_the_repository_and_reads_each_file_once() {
        use std::os::unix::fs::symlink;
        let tmp = TempDir::new("walk");
        let (repo, outside) = (tmp.0.join("repo"), tmp.0.join("outside"));
        std::fs::create_dir_all(repo.join("app")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(
            repo.join("app/svc.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n",
        )
        .unwrap();
        std::fs::write(
            outside.join("secret.yaml"),
            "apiVersion: v1\nkind: Secret\nmetadata: {name: runner-secret}\n",
        )
        .unwrap();
        // A link to `.` (a Service read 41 times on main), to a directory and to a file outside
        // the repository, and a second name for a file inside it.
        symlink(".", repo.join("app/again")).unwrap();
        symlink(&outside, repo.join("runner")).unwrap();
        symlink(outside.join("secret.yaml"), repo.join("stolen.yaml")).unwrap();
        symlink("app/svc.yaml", repo.join("alias.yaml")).unwrap();
        symlink("nowhere.yaml", repo.join("dangling.yaml")).unwrap();
        assert_eq!(names_read(&repo), ["Service web"]);
        // Two links to `.` never finished on main.
        symlink(".", repo.join("app/twice")).unwrap();
        symlink("..", repo.join("app/up")).unwrap();
        assert_eq!(names_read(&repo), ["Service web"]);
        // The repository named through a link is still walked; a file given twice is read once.
        symlink(&repo, tmp.0.join("checkout")).unwrap();
        let objects = read(&[
            Source::Path(tmp.0.join("checkout")),
            Source::Path(repo.join("app/svc.yaml")),
        ])
        .unwrap();
        assert_eq!(objects.len(), 1);
    }

    #[test]
    fn hooks_named_at_sync_time_use_generate_name() {
        let objects =
            read_text("apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: migrate-}\n")
                .unwrap();
        assert_eq!(objects[0].name, "migrate-");
    }
}
