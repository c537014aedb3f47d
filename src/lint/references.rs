//! What each object needs from the others: the reference graph the rules judge.
//!
//! A workload (any object with a pod template) needs the Secrets, ConfigMaps, PVCs and
//! ServiceAccount its pods mount or read, the Services it reaches by DNS name (in env values,
//! args, command, or the ConfigMaps and Secrets it reads), a CloudNativePG Cluster it reaches
//! through the Services and Secret the operator generates for it (`<cluster>-rw`, `-ro`, `-r`;
//! `<cluster>-app`, `-superuser`), and each CNPG Database of that Cluster whose database name it
//! names. A CockroachDB `CrdbCluster` needs its `<name>-join` Service: the operator starts pods
//! with `--join <name>-join.<ns>.svc.cluster.local:26258` (seed 000).
//!
//! Only references to objects in the same set become edges (apart from the join Service, whose
//! absence is the seed 000 race): what the set does not hold is someone else's to order.

use super::manifest::Object;
use serde_json::Value;
use std::collections::HashMap;

/// What the consumer needs of the producer, which decides how early it must come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// To exist. The kubelet and controllers retry until it does (a missing Secret volume
    /// keeps the pod in ContainerCreating, a missing ServiceAccount makes the ReplicaSet
    /// controller retry), so the same wave works; a later wave never comes, because Argo CD
    /// waits for the consumer's wave to be healthy first.
    Exists,
    /// To exist before the consumer starts: a CockroachDB node that cannot resolve its join
    /// address within seconds starts a cluster of its own (seed 000).
    ExistsFirst,
    /// To be ready, which takes an operator's work after it is applied (a CNPG Database
    /// exists only once the operator has run CREATE DATABASE, seed 001).
    Ready,
}

/// The object a reference points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Object(usize),
    /// Not in the set, but it must be (the CockroachDB join Service).
    Absent {
        kind: &'static str,
        namespace: String,
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub consumer: usize,
    pub target: Target,
    pub need: Need,
    /// How, in words: "reads Secret db-creds (env PASSWORD)".
    pub how: String,
}

/// Kinds that carry a pod template, and the path to it.
fn pod_template(o: &Object) -> Option<&Value> {
    let path: &[&str] = match (o.group.as_str(), o.kind.as_str()) {
        ("", "Pod") => &[],
        ("", "ReplicationController")
        | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job")
        | ("argoproj.io", "Rollout") => &["spec", "template"],
        ("batch", "CronJob") => &["spec", "jobTemplate", "spec", "template"],
        _ => return None,
    };
    o.at(path)
}

/// A pod template of the set: its labels and the workload it belongs to.
pub struct Template<'a> {
    pub object: usize,
    pub labels: std::collections::BTreeMap<String, String>,
    pub workload: Option<&'a str>,
}

/// Pod templates (and Pods), for matching Service selectors.
pub fn templates(objects: &[Object]) -> Vec<Template<'_>> {
    let mut out = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let Some(t) = pod_template(o) else { continue };
        let labels = if o.kind == "Pod" {
            o.labels.clone()
        } else {
            t.get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default()
        };
        // A Pod written into a manifest has no owner; a template's pods belong to it.
        let workload = (o.kind != "Pod").then_some(o.name.as_str());
        out.push(Template {
            object: i,
            labels,
            workload,
        });
    }
    out
}

type Key<'a> = (&'a str, &'a str, &'a str);

/// Objects by (group/Kind, namespace, name).
pub struct Index<'a> {
    by_key: HashMap<(String, &'a str, &'a str), usize>,
    /// CNPG Databases by (namespace, cluster).
    databases: HashMap<(&'a str, &'a str), Vec<usize>>,
}

impl<'a> Index<'a> {
    pub fn new(objects: &'a [Object], destination: &'a str) -> Index<'a> {
        let mut by_key = HashMap::with_capacity(objects.len());
        let mut databases: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        for (i, o) in objects.iter().enumerate() {
            by_key
                .entry((o.group_kind(), o.ns(destination), o.name.as_str()))
                .or_insert(i);
            if o.is(CNPG, "Database")
                && let Some(cluster) = o.at(&["spec", "cluster", "name"]).and_then(Value::as_str)
            {
                databases
                    .entry((o.ns(destination), cluster))
                    .or_default()
                    .push(i);
            }
        }
        Index { by_key, databases }
    }

    pub fn get(&self, (group_kind, ns, name): Key<'_>) -> Option<usize> {
        self.by_key
            .get(&(group_kind.to_string(), ns, name))
            .copied()
    }
}

pub const CNPG: &str = "postgresql.cnpg.io";
pub const CRDB: &str = "crdb.cockroachlabs.com";

/// Every reference in the set.
pub fn references(objects: &[Object], destination: &str, index: &Index<'_>) -> Vec<Reference> {
    let mut out = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        if let Some(template) = pod_template(o) {
            workload_refs(i, o, template, objects, destination, index, &mut out);
        }
        if o.is(CRDB, "CrdbCluster") {
            let ns = o.ns(destination);
            let join = format!("{}-join", o.name);
            let how = format!(
                "starts pods that join through Service {join} (--join {join}.{ns}.svc.cluster.local:26258)"
            );
            let target = match index.get(("Service", ns, &join)) {
                Some(s) => Some(Target::Object(s)),
                // The operator of `crdb.cockroachlabs.com/v1beta1` (spec.regions) creates the
                // join Service only after the pods (seed 000); the older v1alpha1 operator
                // joins through its StatefulSet's own pod names.
                None if o.api_version.ends_with("/v1beta1") => Some(Target::Absent {
                    kind: "Service",
                    namespace: ns.to_string(),
                    name: join,
                }),
                None => None,
            };
            if let Some(target) = target {
                out.push(Reference {
                    consumer: i,
                    target,
                    need: Need::ExistsFirst,
                    how,
                });
            }
        }
    }
    out
}

/// A string a workload carries, and where.
struct Text<'v> {
    place: String,
    /// The env var's name, when the text is an env value.
    env: Option<&'v str>,
    value: &'v str,
}

fn workload_refs(
    i: usize,
    o: &Object,
    template: &Value,
    objects: &[Object],
    destination: &str,
    index: &Index<'_>,
    out: &mut Vec<Reference>,
) {
    let ns = o.ns(destination);
    let spec = template.get("spec").unwrap_or(&Value::Null);
    let mut push = |kind: &str, name: &str, need: Need, how: String| {
        if let Some(p) = index.get((kind, ns, name))
            && p != i
        {
            out.push(Reference {
                consumer: i,
                target: Target::Object(p),
                need,
                how,
            });
            return true;
        }
        false
    };
    let str_at = |v: &Value, path: &[&str]| -> Option<String> {
        path.iter()
            .try_fold(v, |v, k| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let optional = |v: &Value| v.get("optional").and_then(Value::as_bool) == Some(true);

    let mut read_configs: Vec<usize> = Vec::new();
    let mut secret_names: Vec<(String, String)> = Vec::new();

    // Volumes.
    for v in arr(spec.get("volumes")) {
        let vol = str_at(v, &["name"]).unwrap_or_default();
        if let Some(s) = str_at(v, &["secret", "secretName"])
            && !optional(&v["secret"])
        {
            secret_names.push((s, format!("volume {vol}")));
        }
        if let Some(c) = str_at(v, &["configMap", "name"])
            && !optional(&v["configMap"])
            && push(
                "ConfigMap",
                &c,
                Need::Exists,
                format!("mounts ConfigMap {c} (volume {vol})"),
            )
            && let Some(p) = index.get(("ConfigMap", ns, &c))
        {
            read_configs.push(p);
        }
        if let Some(c) = str_at(v, &["persistentVolumeClaim", "claimName"]) {
            push(
                "PersistentVolumeClaim",
                &c,
                Need::Exists,
                format!("mounts PersistentVolumeClaim {c} (volume {vol})"),
            );
        }
        for s in arr(v.get("projected").and_then(|p| p.get("sources"))) {
            if let Some(n) = str_at(s, &["secret", "name"])
                && !optional(&s["secret"])
            {
                secret_names.push((n, format!("volume {vol}")));
            }
            if let Some(c) = str_at(s, &["configMap", "name"])
                && !optional(&s["configMap"])
                && push(
                    "ConfigMap",
                    &c,
                    Need::Exists,
                    format!("mounts ConfigMap {c} (volume {vol})"),
                )
                && let Some(p) = index.get(("ConfigMap", ns, &c))
            {
                read_configs.push(p);
            }
        }
    }
    // Containers: env, envFrom, args, command.
    let mut texts: Vec<Text<'_>> = Vec::new();
    for c in arr(spec.get("initContainers")).chain(arr(spec.get("containers"))) {
        let cname = c.get("name").and_then(Value::as_str).unwrap_or("?");
        for e in arr(c.get("env")) {
            let ename = e.get("name").and_then(Value::as_str).unwrap_or("?");
            if let Some(v) = e.get("value").and_then(Value::as_str) {
                texts.push(Text {
                    place: format!("env {ename} of container {cname}"),
                    env: Some(ename),
                    value: v,
                });
            }
            let from = e.get("valueFrom").unwrap_or(&Value::Null);
            if let Some(s) = str_at(from, &["secretKeyRef", "name"])
                && !optional(&from["secretKeyRef"])
            {
                secret_names.push((s, format!("env {ename}")));
            }
            if let Some(cm) = str_at(from, &["configMapKeyRef", "name"])
                && !optional(&from["configMapKeyRef"])
                && push(
                    "ConfigMap",
                    &cm,
                    Need::Exists,
                    format!("reads ConfigMap {cm} (env {ename})"),
                )
                && let Some(p) = index.get(("ConfigMap", ns, &cm))
            {
                read_configs.push(p);
            }
        }
        for e in arr(c.get("envFrom")) {
            if let Some(s) = str_at(e, &["secretRef", "name"])
                && !optional(&e["secretRef"])
            {
                secret_names.push((s, format!("envFrom of container {cname}")));
            }
            if let Some(cm) = str_at(e, &["configMapRef", "name"])
                && !optional(&e["configMapRef"])
                && push(
                    "ConfigMap",
                    &cm,
                    Need::Exists,
                    format!("reads ConfigMap {cm} (envFrom of container {cname})"),
                )
                && let Some(p) = index.get(("ConfigMap", ns, &cm))
            {
                read_configs.push(p);
            }
        }
        for key in ["command", "args"] {
            for a in arr(c.get(key)) {
                if let Some(v) = a.as_str() {
                    texts.push(Text {
                        place: format!("{key} of container {cname}"),
                        env: None,
                        value: v,
                    });
                }
            }
        }
    }
    for s in arr(spec.get("imagePullSecrets")) {
        if let Some(n) = str_at(s, &["name"]) {
            secret_names.push((n, "imagePullSecrets".to_string()));
        }
    }
    let account =
        str_at(spec, &["serviceAccountName"]).or_else(|| str_at(spec, &["serviceAccount"]));
    if let Some(sa) = account {
        push(
            "ServiceAccount",
            &sa,
            Need::Exists,
            format!("runs as ServiceAccount {sa}"),
        );
    }
    // Secrets: in the set, or generated by a CNPG Cluster of the set.
    let mut clusters: Vec<(usize, String)> = Vec::new();
    for (s, place) in &secret_names {
        if push(
            "Secret",
            s,
            Need::Exists,
            format!("reads Secret {s} ({place})"),
        ) {
            if let Some(p) = index.get(("Secret", ns, s)) {
                read_configs.push(p);
            }
        } else if let Some((cluster, suffix)) = s.rsplit_once('-')
            && matches!(suffix, "app" | "superuser")
            && let Some(c) = index.get((&format!("{CNPG}/Cluster"), ns, cluster))
        {
            clusters.push((
                c,
                format!("reads Secret {s}, which CNPG generates for Cluster {cluster} ({place})"),
            ));
        }
    }
    // Config the workload reads is text it carries, too.
    let mut config_texts: Vec<(String, String)> = Vec::new();
    for p in &read_configs {
        let cfg = &objects[*p];
        for key in ["data", "stringData"] {
            if let Some(Value::Object(m)) = cfg.body.get(key) {
                for (k, v) in m {
                    let Some(v) = v.as_str() else { continue };
                    let text = if cfg.kind == "Secret" && key == "data" {
                        match decode_base64(v) {
                            Some(t) => t,
                            None => continue,
                        }
                    } else {
                        v.to_string()
                    };
                    config_texts.push((format!("{} {} key {k}", cfg.kind, cfg.name), text));
                }
            }
        }
    }
    for (place, value) in &config_texts {
        texts.push(Text {
            place: place.clone(),
            env: None,
            value,
        });
    }
    // DNS names.
    for t in &texts {
        for host in hosts(t.value, t.env) {
            for (svc, svc_ns) in host.candidates(ns) {
                let how = format!(
                    "reaches Service {svc} by DNS ({} in {})",
                    host.text, t.place
                );
                if let Some(p) = index.get(("Service", svc_ns, svc)) {
                    if p != i {
                        out.push(Reference {
                            consumer: i,
                            target: Target::Object(p),
                            need: Need::Exists,
                            how,
                        });
                    }
                    break;
                }
                if let Some((cluster, suffix)) = svc.rsplit_once('-')
                    && matches!(suffix, "rw" | "ro" | "r")
                    && let Some(c) = index.get((&format!("{CNPG}/Cluster"), svc_ns, cluster))
                {
                    clusters.push((
                        c,
                        format!(
                            "reaches {}, which CNPG creates for Cluster {cluster} ({})",
                            host.text, t.place
                        ),
                    ));
                    break;
                }
            }
        }
    }
    // CNPG Clusters, and the Databases of them whose name the workload uses: each text is
    // split into words once, not once per Database (2,000 Databases and a 200 KB env value
    // took over 30 s).
    clusters.sort_by_key(|(c, _)| *c);
    clusters.dedup_by_key(|(c, _)| *c);
    let mut first_use: HashMap<&str, usize> = HashMap::new();
    if !clusters.is_empty() {
        for (n, t) in texts.iter().enumerate() {
            for w in words(t.value) {
                first_use.entry(w).or_insert(n);
            }
        }
    }
    for (c, how) in clusters {
        let cluster = &objects[c];
        out.push(Reference {
            consumer: i,
            target: Target::Object(c),
            need: Need::Ready,
            how,
        });
        let key = (cluster.ns(destination), cluster.name.as_str());
        for &d in index.databases.get(&key).into_iter().flatten() {
            let db = &objects[d];
            let Some(dbname) = db.at(&["spec", "name"]).and_then(Value::as_str) else {
                continue;
            };
            if let Some(t) = first_use.get(dbname).map(|&n| &texts[n]) {
                out.push(Reference {
                    consumer: i,
                    target: Target::Object(d),
                    need: Need::Ready,
                    how: format!(
                        "uses database {dbname} of Cluster {} ({})",
                        cluster.name, t.place
                    ),
                });
            }
        }
    }
}

fn arr(v: Option<&Value>) -> impl Iterator<Item = &Value> {
    v.and_then(Value::as_array).into_iter().flatten()
}

#[cfg(test)]
thread_local! {
    /// Bytes of text split into words, for tests that bound the work.
    static WORD_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Identifier-like words of a text (database names: letters, digits, `_`, `-`, `$`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    #[cfg(test)]
    WORD_BYTES.with(|n| n.set(n.get() + text.len()));
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$'))
        .filter(|w| !w.is_empty())
}

/// A DNS name found in a text.
#[derive(Debug, PartialEq, Eq)]
pub struct Host<'t> {
    pub text: &'t str,
    labels: Vec<&'t str>,
}

impl<'t> Host<'t> {
    /// The (service, namespace) pairs this name can resolve to from a pod in `ns`, as
    /// Kubernetes DNS names them (`<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc[.cluster.local]`, and
    /// a StatefulSet pod's `<pod>.<svc>[.<ns>[.svc[.cluster.local]]]`).
    pub fn candidates<'s>(&'s self, ns: &'s str) -> Vec<(&'s str, &'s str)> {
        let l = &self.labels;
        let body = if l.ends_with(&["svc", "cluster", "local"]) {
            &l[..l.len() - 3]
        } else if l.ends_with(&["svc"]) {
            &l[..l.len() - 1]
        } else {
            return match l.as_slice() {
                [svc] => vec![(*svc, ns)],
                [a, b] => vec![(*a, *b), (*b, ns)],
                _ => Vec::new(),
            };
        };
        match body {
            [svc, namespace] => vec![(*svc, *namespace)],
            [_pod, svc, namespace] => vec![(*svc, *namespace)],
            _ => Vec::new(),
        }
    }
}

/// Env var names whose whole value is a host name.
fn names_a_host(env: &str) -> bool {
    let e = env.to_ascii_uppercase();
    [
        "HOST", "ADDR", "SERVER", "SERVICE", "ENDPOINT", "URL", "URI", "DSN",
    ]
    .iter()
    .any(|k| e.contains(k))
}

/// DNS names in a text. A single label (`redis`) counts only where it can only be a host: with
/// a port (`redis:6379`), after `://` or `@`, or as the whole value of an env var named like a
/// host (`REDIS_HOST`); otherwise every word would be a Service name.
pub fn hosts<'t>(text: &'t str, env: Option<&str>) -> Vec<Host<'t>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let is_host = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.';
    let mut i = 0;
    while i < bytes.len() {
        if !is_host(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_host(bytes[i]) {
            i += 1;
        }
        // Uppercase, `_` or `$` glued to it: part of a larger word, not a name.
        let glued = |c: u8| c.is_ascii_uppercase() || c == b'_' || c == b'$' || c == b'{';
        if (start > 0 && glued(bytes[start - 1])) || (i < bytes.len() && glued(bytes[i])) {
            continue;
        }
        // `user@host`: the user is no host.
        if bytes.get(i) == Some(&b'@') {
            continue;
        }
        let token = text[start..i].trim_end_matches('.');
        let labels: Vec<&str> = token.split('.').collect();
        let valid = labels
            .iter()
            .all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-'))
            && labels[0].bytes().any(|c| c.is_ascii_lowercase());
        if !valid {
            continue;
        }
        if labels.len() == 1 {
            let port =
                bytes.get(i) == Some(&b':') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
            let url = text[..start].ends_with("://") || text[..start].ends_with('@');
            let whole = token == text.trim() && env.is_some_and(names_a_host);
            if !(port || url || whole) {
                continue;
            }
        }
        out.push(Host {
            text: token,
            labels,
        });
    }
    out
}

fn decode_base64(text: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names<'t>(text: &'t str, env: Option<&str>) -> Vec<&'t str> {
        hosts(text, env).into_iter().map(|h| h.text).collect()
    }

    #[test]
    fn dns_names_in_urls_args_and_host_vars() {
        assert_eq!(
            names(
                "postgres://app@pg-rw.ddb.svc.cluster.local:5432/forgejo?sslmode=disable",
                None
            ),
            ["pg-rw.ddb.svc.cluster.local"]
        );
        assert_eq!(
            names("--join cockroachdb-join.prod.svc.cluster.local:26258", None),
            ["cockroachdb-join.prod.svc.cluster.local"]
        );
        assert_eq!(names("redis:6379", None), ["redis"]);
        assert_eq!(names("redis", Some("REDIS_HOST")), ["redis"]);
        assert!(names("redis", Some("CACHE_TYPE")).is_empty());
        assert!(names("run the server now", None).is_empty());
        assert!(names("${POD_NAME}.cockroachdb", None).is_empty());
    }

    /// A CNPG Cluster with `databases` Databases, and a Deployment that reaches the Cluster
    /// and carries `text` bytes of words in an env value.
    fn many_databases(databases: usize, text: usize) -> Vec<Object> {
        let mut yaml = String::from(
            "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata: {name: pg, namespace: ns}\n",
        );
        for d in 0..databases {
            yaml.push_str(&format!("---\napiVersion: postgresql.cnpg.io/v1\nkind: Database\nmetadata: {{name: db{d}, namespace: ns}}\nspec: {{name: db{d}, cluster: {{name: pg}}}}\n"));
        }
        let words = "lorem ipsum dolor ".repeat(text / 18);
        yaml.push_str(&format!("---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: app, namespace: ns}}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          env:\n            - {{name: NOTES, value: '{words}'}}\n            - {{name: DATABASE_URL, value: 'postgres://pg-rw:5432/db{}'}}\n", databases - 1));
        let mut out = Vec::new();
        crate::lint::manifest::parse("m.yaml", &yaml, true, &mut out).unwrap();
        out
    }

    /// Words split while finding `objects`' references, and the databases found used.
    fn word_work(objects: &[Object]) -> (usize, Vec<String>) {
        WORD_BYTES.with(|n| n.set(0));
        let index = Index::new(objects, "");
        let refs = references(objects, "", &index);
        let used = refs
            .iter()
            .filter(|r| r.how.starts_with("uses database"))
            .map(|r| r.how.clone())
            .collect();
        (WORD_BYTES.with(|n| n.get()), used)
    }

    #[test]
    fn many_databases_and_a_long_env_value_cost_linear_work() {
        // 2,000 Databases and a 200 KB env value froze the waves view on main: every Database
        // split every text into words again.
        let (small, used) = word_work(&many_databases(50, 20_000));
        assert_eq!(
            used,
            ["uses database db49 of Cluster pg (env DATABASE_URL of container app)"]
        );
        let (large, used) = word_work(&many_databases(200, 80_000));
        assert_eq!(used.len(), 1, "{used:?}");
        // 4× the Databases and 4× the text: about 4× the work, not 16×.
        assert!(
            large <= 5 * small,
            "{small} bytes split for 50 Databases, {large} for 200"
        );
        assert!(large <= 2 * 80_100, "{large} bytes split for 80 KB of text");
    }

    #[test]
    fn candidates_follow_kubernetes_dns() {
        let h = &hosts("pg-rw.ddb.svc:5432", None)[0];
        assert_eq!(h.candidates("cicd"), [("pg-rw", "ddb")]);
        let h = &hosts("web-0.web.prod.svc.cluster.local", None)[0];
        assert_eq!(h.candidates("x"), [("web", "prod")]);
        let h = &hosts("api.other", None)[0];
        assert_eq!(h.candidates("x"), [("api", "other"), ("other", "x")]);
    }
}
