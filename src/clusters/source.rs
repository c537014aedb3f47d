//! Where destination clusters come from: Argo CD's cluster Secrets, or a directory of
//! kubeconfig files (one per cluster, the file name being the cluster's name). Either way a
//! cluster becomes a [`Destination`]: its name, its server and a kubeconfig kube-rs reads, so
//! both sources connect the same way. Parsing is pure and never echoes a credential.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::config::Kubeconfig;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::path::Path;
use thiserror::Error;

/// Argo CD labels its cluster Secrets with this (argo-cd `common/common.go`:
/// `LabelKeySecretType`, `LabelValueSecretTypeCluster`).
pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
pub const SECRET_TYPE_CLUSTER: &str = "cluster";

/// Why one cluster cannot be used. The cluster is refused with this message; the others run.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SourceError {
    #[error("{0}")]
    Invalid(String),
    /// Authentication wavegate cannot perform (an exec plugin, EKS IAM, a proxy).
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Unreadable(String),
}

/// One destination cluster as its source describes it.
#[derive(Debug, Clone)]
pub struct Destination {
    /// How the HTTP API and Applications (`spec.destination.name`) address it.
    pub name: String,
    /// Its API server URL, without a trailing slash (`spec.destination.server`).
    pub server: String,
    /// Argo CD's `namespaces` key: the cluster is managed in these namespaces only, so only
    /// these are watched. `None`: cluster-wide.
    pub namespaces: Option<BTreeSet<String>>,
    pub kubeconfig: Kubeconfig,
    /// Changes when anything the source says about the cluster changes, so an edited Secret
    /// or file rebuilds that cluster and an unchanged one keeps its caches.
    pub fingerprint: u64,
}

/// Argo CD's `ClusterConfig`, the JSON in a cluster Secret's `config` key (argo-cd
/// `pkg/apis/application/v1alpha1/types.go`: `ClusterConfig`, `TLSClientConfig`; written by
/// `util/db/cluster.go` `clusterToSecret`, read by `secretToCluster`). `[]byte` fields are
/// base64 in JSON, as Go's encoding/json writes them.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterConfig {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    bearer_token: String,
    #[serde(default)]
    tls_client_config: TlsClientConfig,
    #[serde(default)]
    aws_auth_config: Option<serde_json::Value>,
    #[serde(default)]
    exec_provider_config: Option<serde_json::Value>,
    #[serde(default)]
    proxy_url: String,
}

/// Credentials never reach a log or a panic message through `{:?}`.
impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |s: &str| if s.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("ClusterConfig")
            .field("username", &self.username)
            .field("password", &set(&self.password))
            .field("bearer_token", &set(&self.bearer_token))
            .field("tls_client_config", &self.tls_client_config)
            .field("aws_auth_config", &self.aws_auth_config.is_some())
            .field("exec_provider_config", &self.exec_provider_config.is_some())
            .field("proxy_url", &set(&self.proxy_url))
            .finish()
    }
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TlsClientConfig {
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    server_name: String,
    #[serde(default)]
    cert_data: Option<String>,
    #[serde(default)]
    key_data: Option<String>,
    #[serde(default)]
    ca_data: Option<String>,
}

impl std::fmt::Debug for TlsClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClientConfig")
            .field("insecure", &self.insecure)
            .field("server_name", &self.server_name)
            .field("cert_data", &self.cert_data.is_some())
            .field("key_data", &self.key_data.as_ref().map(|_| "<redacted>"))
            .field("ca_data", &self.ca_data.is_some())
            .finish()
    }
}

/// The longest cluster name accepted (a Secret's `name` key is free text).
const MAX_NAME: usize = 253;

fn validate_name(name: &str) -> Result<(), SourceError> {
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(SourceError::Invalid(format!(
            "cluster name {:?} must be 1 to {MAX_NAME} printable characters",
            crate::health::printable(name)
        )));
    }
    Ok(())
}

/// A server URL as Argo CD stores and compares it (`strings.TrimRight(c.Server, "/")`).
pub fn normalize_server(server: &str) -> String {
    server.trim().trim_end_matches('/').to_string()
}

/// An API server URL wavegate may send credentials to: https, or http only to a loopback host
/// (a `kubectl proxy` sidecar in the pod's own network namespace); no whitespace or control
/// character anywhere (it would reach logs and `/api/v1/clusters` verbatim).
fn validate_server(server: &str) -> Result<(), SourceError> {
    let printable = || crate::health::printable(server);
    if server.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SourceError::Invalid(format!(
            "server {:?} contains whitespace or control characters",
            printable()
        )));
    }
    let host_of = |rest: &str| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        authority.rsplit('@').next().unwrap_or("").to_string()
    };
    if let Some(rest) = server.strip_prefix("https://") {
        if !host_of(rest).is_empty() {
            return Ok(());
        }
    } else if let Some(rest) = server.strip_prefix("http://") {
        let host = host_of(rest);
        let name = match host.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
            _ => host.clone(),
        };
        let loopback = name == "localhost"
            || name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback {
            return Ok(());
        }
        if !host.is_empty() {
            return Err(SourceError::Invalid(format!(
                "server {:?} is plain http: its credentials would cross the network in clear \
                 text (use https; http is accepted only to a loopback address)",
                printable()
            )));
        }
    }
    Err(SourceError::Invalid(format!(
        "server {:?} must be an https URL with a host",
        printable()
    )))
}

/// A base64 field of the config: checked here so a bad one names its field.
fn base64_field(field: &str, value: &Option<String>) -> Result<Option<String>, SourceError> {
    match value.as_deref() {
        None | Some("") => Ok(None),
        Some(v) => base64::engine::general_purpose::STANDARD
            .decode(v)
            .map(|_| Some(v.to_string()))
            .map_err(|e| SourceError::Invalid(format!("{field} is not base64: {e}"))),
    }
}

fn fingerprint(parts: &[&[u8]]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

fn text<'a>(secret: &'a Secret, key: &str) -> Result<Option<&'a str>, SourceError> {
    match secret.data.as_ref().and_then(|d| d.get(key)) {
        None => Ok(None),
        Some(bytes) => std::str::from_utf8(&bytes.0)
            .map(Some)
            .map_err(|_| SourceError::Invalid(format!("key {key} is not UTF-8"))),
    }
}

/// The home cluster as Argo CD names it: Applications deploying there say `in-cluster` or
/// `https://kubernetes.default.svc` (argo-cd `common.KubernetesInternalAPIServerAddr`).
pub fn is_home(name: &str, server: &str) -> bool {
    name == super::HOME || normalize_server(server) == super::HOME_SERVER
}

/// Outcome of reading one cluster Secret: a remote destination, the home cluster's own Secret
/// (served with wavegate's own credentials, so its connection settings are skipped; the name it
/// gives the home cluster is kept), or why it is refused.
#[derive(Debug)]
pub enum FromSecret {
    Remote(Box<Destination>),
    /// The name Applications may use for the home cluster (`in-cluster` unless renamed).
    Home(String),
}

/// How far cluster Secrets are trusted (`wavegate serve --clusters-*` flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SecretTrust {
    /// Accept project-scoped cluster Secrets (a `project` key): Argo CD lets a project's
    /// admins create them (argo-cd `util/db/cluster.go`, `secretToCluster` reads `project`;
    /// project-scoped clusters, "Project scoped Repositories and Clusters" in its docs), so
    /// they come from less trusted hands than the installer's own.
    pub project_scoped: bool,
    /// Accept `tlsClientConfig.insecure: true` (no verification of the API server).
    pub insecure: bool,
}

/// One Argo CD cluster Secret → a destination (argo-cd `util/db/cluster.go` `secretToCluster`:
/// `server`, `name` (defaulting to the server, as `clusterToSecret` writes it), `namespaces`
/// (comma-separated), `config`).
pub fn from_argocd_secret(secret: &Secret, trust: SecretTrust) -> Result<FromSecret, SourceError> {
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SECRET_TYPE_LABEL))
        .is_some_and(|v| v == SECRET_TYPE_CLUSTER);
    if !labelled {
        return Err(SourceError::Invalid(format!(
            "not labelled {SECRET_TYPE_LABEL}={SECRET_TYPE_CLUSTER}, so it is not an Argo CD \
             cluster Secret"
        )));
    }
    // Before anything else is read: a project's admin may name it like a production cluster
    // (or give its server), and a refused duplicate would take the real one down with it.
    if let Some(project) = text(secret, "project")?.filter(|p| !p.trim().is_empty())
        && !trust.project_scoped
    {
        return Err(SourceError::Unsupported(format!(
            "is scoped to project {:?}, and project-scoped cluster Secrets are ignored unless \
             --clusters-project-scoped is set",
            project.chars().take(63).collect::<String>()
        )));
    }
    let server = text(secret, "server")?
        .map(normalize_server)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| SourceError::Invalid("has no server key".into()))?;
    let name = match text(secret, "name")? {
        Some(n) if !n.trim().is_empty() => n.trim().to_string(),
        _ => server.clone(),
    };
    validate_name(&name)?;
    if is_home(&name, &server) {
        return Ok(FromSecret::Home(name));
    }
    validate_server(&server)?;
    let namespaces = match text(secret, "namespaces")? {
        None => None,
        Some(list) => {
            let set: BTreeSet<String> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            for ns in &set {
                crate::resource::validate_namespace(ns)
                    .map_err(|e| SourceError::Invalid(format!("namespaces: {e}")))?;
            }
            (!set.is_empty()).then_some(set)
        }
    };
    let raw = text(secret, "config")?.ok_or_else(|| {
        SourceError::Invalid(
            "has no config key (Argo CD would connect without credentials; wavegate does not)"
                .into(),
        )
    })?;
    // serde's message quotes the offending value, which may be a misplaced credential: say
    // only where it is.
    let config: ClusterConfig = serde_json::from_str(raw).map_err(|e| {
        SourceError::Invalid(format!(
            "config is not Argo CD's JSON ({:?} error at line {}, column {})",
            e.classify(),
            e.line(),
            e.column()
        ))
    })?;
    let kubeconfig = kubeconfig_of(&name, &server, &config)?;
    if config.tls_client_config.insecure && !trust.insecure {
        return Err(SourceError::Unsupported(
            "sets tlsClientConfig.insecure (the API server is not verified), which wavegate \
             refuses unless --clusters-allow-insecure is set"
                .into(),
        ));
    }
    let print = fingerprint(&[name.as_bytes(), server.as_bytes(), raw.as_bytes()])
        ^ fingerprint(&[format!("{namespaces:?}").as_bytes()]);
    Ok(FromSecret::Remote(Box::new(Destination {
        name,
        server,
        namespaces,
        kubeconfig,
        fingerprint: print,
    })))
}

/// Argo CD's connection settings as a kubeconfig, refusing what wavegate cannot do.
fn kubeconfig_of(name: &str, server: &str, c: &ClusterConfig) -> Result<Kubeconfig, SourceError> {
    if c.exec_provider_config
        .as_ref()
        .is_some_and(|v| !v.is_null())
    {
        return Err(SourceError::Unsupported(
            "uses execProviderConfig (a credential plugin), which wavegate does not run; give \
             it a bearerToken or a client certificate"
                .into(),
        ));
    }
    if c.aws_auth_config.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(SourceError::Unsupported(
            "uses awsAuthConfig (EKS IAM), which wavegate does not support; give it a \
             bearerToken or a client certificate"
                .into(),
        ));
    }
    if !c.proxy_url.is_empty() {
        return Err(SourceError::Unsupported(
            "uses proxyUrl, which wavegate does not support".into(),
        ));
    }
    let tls = &c.tls_client_config;
    let ca = base64_field("tlsClientConfig.caData", &tls.ca_data)?;
    let cert = base64_field("tlsClientConfig.certData", &tls.cert_data)?;
    let key = base64_field("tlsClientConfig.keyData", &tls.key_data)?;
    // client-go refuses the same combination ("specifying a root certificates file with the
    // insecure flag is not allowed", rest.Config validation in transport).
    if tls.insecure && ca.is_some() {
        return Err(SourceError::Invalid(
            "tlsClientConfig sets both insecure and caData".into(),
        ));
    }
    if cert.is_some() != key.is_some() {
        return Err(SourceError::Invalid(
            "tlsClientConfig needs both certData and keyData for a client certificate".into(),
        ));
    }
    let basic = !c.username.is_empty() && !c.password.is_empty();
    if c.bearer_token.is_empty() && cert.is_none() && !basic {
        return Err(SourceError::Invalid(
            "config has no credentials (bearerToken, tlsClientConfig certData/keyData, or \
             username/password)"
                .into(),
        ));
    }
    let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let kubeconfig = json!({
        "clusters": [{"name": name, "cluster": {
            "server": server,
            "certificate-authority-data": ca,
            "insecure-skip-tls-verify": tls.insecure,
            "tls-server-name": nonempty(&tls.server_name),
        }}],
        "users": [{"name": name, "user": {
            "token": nonempty(&c.bearer_token),
            "client-certificate-data": cert,
            "client-key-data": key,
            "username": basic.then(|| c.username.clone()),
            "password": basic.then(|| c.password.clone()),
        }}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    });
    serde_json::from_value(strip_nulls(kubeconfig))
        .map_err(|e| SourceError::Invalid(format!("cannot form a kubeconfig: {e}")))
}

fn strip_nulls(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => m
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k, strip_nulls(v)))
            .collect(),
        serde_json::Value::Array(a) => a.into_iter().map(strip_nulls).collect(),
        other => other,
    }
}

/// The largest kubeconfig file read (one cluster's is a few KiB; a CA bundle a few more).
pub const MAX_KUBECONFIG: u64 = 1024 * 1024;

/// One kubeconfig file of the mounted directory → a destination named after the file. Its
/// server is read when the client is built (the current context's cluster). Blocking: call it
/// off the async workers.
pub fn from_kubeconfig_file(path: &Path) -> Result<Destination, SourceError> {
    use std::io::Read;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| SourceError::Invalid(format!("{} has no UTF-8 name", path.display())))?
        .to_string();
    validate_name(&name)?;
    let unreadable =
        |e: std::io::Error| SourceError::Unreadable(format!("cannot read {}: {e}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_KUBECONFIG + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_KUBECONFIG {
        return Err(SourceError::Invalid(format!(
            "{} is larger than {MAX_KUBECONFIG} bytes, too large for a kubeconfig",
            path.display()
        )));
    }
    from_kubeconfig_bytes(name, &path.display().to_string(), &bytes)
}

/// A kubeconfig's text → a destination named `name` (`origin` says where it was read).
pub fn from_kubeconfig_bytes(
    name: String,
    origin: &str,
    bytes: &[u8],
) -> Result<Destination, SourceError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| SourceError::Invalid(format!("{origin} is not UTF-8")))?;
    // The YAML error quotes what it could not read, which may be a credential: not repeated.
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| {
        SourceError::Invalid(format!(
            "{origin} is not a kubeconfig (it does not parse as one)"
        ))
    })?;
    refuse_references(origin, &kubeconfig)?;
    let current = kubeconfig.current_context.clone().unwrap_or_default();
    let server = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| kubeconfig.clusters.iter().find(|k| k.name == c.cluster))
        .and_then(|k| k.cluster.as_ref())
        .and_then(|k| k.server.as_deref())
        .map(normalize_server)
        .ok_or_else(|| {
            SourceError::Invalid(format!(
                "{origin}: its current context names no cluster with a server"
            ))
        })?;
    validate_server(&server)?;
    Ok(Destination {
        fingerprint: fingerprint(&[name.as_bytes(), bytes]),
        name,
        server,
        namespaces: None,
        kubeconfig,
    })
}

/// Inline data only. A path in a mounted kubeconfig would be read from wavegate's own file
/// system: `tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token` with a foreign
/// server sends wavegate's own credentials there. A proxy is not supported (as for Secrets),
/// and neither are credential plugins.
fn refuse_references(origin: &str, kubeconfig: &Kubeconfig) -> Result<(), SourceError> {
    let refuse = |what: &str| {
        Err(SourceError::Unsupported(format!(
            "{origin} uses {what}, which wavegate refuses: give credentials and CAs inline \
             (token, client-certificate-data, client-key-data, certificate-authority-data)"
        )))
    };
    for c in kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
    {
        if c.certificate_authority.is_some() {
            return refuse("certificate-authority (a file path)");
        }
        if c.proxy_url.is_some() {
            return refuse("proxy-url");
        }
    }
    for auth in kubeconfig
        .auth_infos
        .iter()
        .filter_map(|u| u.auth_info.as_ref())
    {
        if auth.exec.is_some() || auth.auth_provider.is_some() {
            return Err(SourceError::Unsupported(format!(
                "{origin} uses an exec or auth-provider credential plugin, which wavegate does \
                 not run; use a token or a client certificate"
            )));
        }
        if auth.token_file.is_some() {
            return refuse("tokenFile (a file path)");
        }
        if auth.client_certificate.is_some() || auth.client_key.is_some() {
            return refuse("client-certificate or client-key (a file path)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(data: &[(&str, &str)]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("cluster-remote".into());
        s.metadata.labels = Some(BTreeMap::from([(
            SECRET_TYPE_LABEL.to_string(),
            SECRET_TYPE_CLUSTER.to_string(),
        )]));
        s.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        s
    }

    fn refused(s: &Secret) -> String {
        match from_argocd_secret(s, SecretTrust::default()) {
            Err(e) => e.to_string(),
            Ok(d) => panic!("accepted: {d:?}"),
        }
    }

    fn remote(s: &Secret) -> Destination {
        match from_argocd_secret(s, SecretTrust::default()) {
            Ok(FromSecret::Remote(d)) => *d,
            other => panic!("not a remote destination: {other:?}"),
        }
    }

    const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="; // base64 of a PEM header

    #[test]
    fn bearer_token_secret_becomes_a_kubeconfig() {
        let config = format!(
            r#"{{"bearerToken":"abc","tlsClientConfig":{{"insecure":false,"caData":"{CA}","serverName":"kubernetes"}}}}"#
        );
        let d = remote(&secret(&[
            ("name", "prod"),
            ("server", "https://10.0.0.1:6443/"),
            ("config", &config),
            ("namespaces", "a, b,"),
        ]));
        assert_eq!(d.name, "prod");
        assert_eq!(d.server, "https://10.0.0.1:6443");
        assert_eq!(
            d.namespaces,
            Some(BTreeSet::from(["a".to_string(), "b".to_string()]))
        );
        let cluster = d.kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some(CA));
        assert_eq!(cluster.tls_server_name.as_deref(), Some("kubernetes"));
        let user = d.kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some() && user.client_certificate_data.is_none());
    }

    /// A project's admin creates a cluster Secret named like production: ignored unless the
    /// installer opts in, so it can neither shadow nor collide with the real one.
    #[test]
    fn project_scoped_secrets_are_refused_unless_opted_in() {
        let config = format!(r#"{{"bearerToken":"abc","tlsClientConfig":{{"caData":"{CA}"}}}}"#);
        let s = secret(&[
            ("name", "prod"),
            ("server", "https://10.0.0.1:6443"),
            ("config", &config),
            ("project", "team-a"),
        ]);
        let why = refused(&s);
        assert!(
            why.contains("project \"team-a\"") && why.contains("--clusters-project-scoped"),
            "{why}"
        );
        let trusting = SecretTrust {
            project_scoped: true,
            ..SecretTrust::default()
        };
        assert!(matches!(
            from_argocd_secret(&s, trusting),
            Ok(FromSecret::Remote(d)) if d.name == "prod"
        ));
    }

    #[test]
    fn insecure_clusters_are_refused_unless_allowed() {
        let s = secret(&[
            ("name", "lab"),
            ("server", "https://10.0.0.9:6443"),
            (
                "config",
                r#"{"bearerToken":"abc","tlsClientConfig":{"insecure":true}}"#,
            ),
        ]);
        let why = refused(&s);
        assert!(why.contains("--clusters-allow-insecure"), "{why}");
        let trusting = SecretTrust {
            insecure: true,
            ..SecretTrust::default()
        };
        assert!(matches!(
            from_argocd_secret(&s, trusting),
            Ok(FromSecret::Remote(_))
        ));
    }

    #[test]
    fn a_secret_without_a_name_is_named_after_its_server() {
        let d = remote(&secret(&[
            ("server", "https://remote.example:6443"),
            ("config", r#"{"bearerToken":"t"}"#),
        ]));
        assert_eq!(d.name, "https://remote.example:6443");
    }

    #[test]
    fn the_home_clusters_own_secret_is_skipped_not_refused() {
        let s = secret(&[
            ("name", "in-cluster"),
            ("server", "https://kubernetes.default.svc"),
        ]);
        assert!(
            matches!(from_argocd_secret(&s, SecretTrust::default()), Ok(FromSecret::Home(n)) if n == "in-cluster")
        );
        // Renamed (Argo CD allows it): the name is kept, the settings skipped.
        let s = secret(&[
            ("name", "home"),
            ("server", "https://kubernetes.default.svc/"),
        ]);
        assert!(
            matches!(from_argocd_secret(&s, SecretTrust::default()), Ok(FromSecret::Home(n)) if n == "home")
        );
    }

    #[test]
    fn missing_keys_are_refused_with_their_name() {
        assert!(refused(&secret(&[("name", "x")])).contains("no server"));
        assert!(
            refused(&secret(&[("name", "x"), ("server", "https://a:1")])).contains("no config")
        );
        let mut unlabelled = secret(&[("server", "https://a:1"), ("config", "{}")]);
        unlabelled.metadata.labels = None;
        assert!(refused(&unlabelled).contains("not labelled"));
    }

    #[test]
    fn hostile_configs_are_refused_with_a_reason_not_a_panic() {
        let with = |config: &str| {
            refused(&secret(&[
                ("name", "x"),
                ("server", "https://a:1"),
                ("config", config),
            ]))
        };
        assert!(with("{not json").contains("not Argo CD's JSON"));
        assert!(with(r#"{"bearerToken": 5}"#).contains("not Argo CD's JSON"));
        assert!(
            with(r#"{"tlsClientConfig":{"caData":"%%%"},"bearerToken":"t"}"#)
                .contains("caData is not base64")
        );
        assert!(
            with(r#"{"tlsClientConfig":{"certData":"YQ=="}}"#)
                .contains("both certData and keyData")
        );
        assert!(
            with(r#"{"tlsClientConfig":{"insecure":true,"caData":"YQ=="},"bearerToken":"t"}"#)
                .contains("both insecure and caData")
        );
        assert!(with("{}").contains("no credentials"));
        assert!(with(r#"{"tlsClientConfig":{"insecure":true}}"#).contains("no credentials"));
        assert!(
            with(r#"{"execProviderConfig":{"command":"argocd-k8s-auth"}}"#)
                .contains("execProviderConfig")
        );
        assert!(with(r#"{"awsAuthConfig":{"clusterName":"prod"}}"#).contains("awsAuthConfig"));
        assert!(with(r#"{"bearerToken":"t","proxyUrl":"http://p:3128"}"#).contains("proxyUrl"));
        let bad_server = refused(&secret(&[("server", "not-a-url"), ("config", "{}")]));
        assert!(bad_server.contains("URL"), "{bad_server}");
        let control = refused(&secret(&[
            ("name", "a\u{1b}[2Jb"),
            ("server", "https://a:1"),
            ("config", r#"{"bearerToken":"t"}"#),
        ]));
        assert!(control.contains("printable"), "{control}");
    }

    #[test]
    fn errors_never_echo_the_credential() {
        let e = refused(&secret(&[
            ("name", "x"),
            ("server", "https://a:1"),
            (
                "config",
                r#"{"bearerToken":"s3cr3t-token","tlsClientConfig":{"keyData":"s3cr3t"}}"#,
            ),
        ]));
        assert!(!e.contains("s3cr3t"), "{e}");
    }

    #[test]
    fn an_edited_secret_changes_its_fingerprint() {
        let a = remote(&secret(&[
            ("name", "x"),
            ("server", "https://a:1"),
            ("config", r#"{"bearerToken":"t"}"#),
        ]));
        let b = remote(&secret(&[
            ("name", "x"),
            ("server", "https://a:1"),
            ("config", r#"{"bearerToken":"u"}"#),
        ]));
        let a2 = remote(&secret(&[
            ("name", "x"),
            ("server", "https://a:1"),
            ("config", r#"{"bearerToken":"t"}"#),
        ]));
        assert_ne!(a.fingerprint, b.fingerprint);
        assert_eq!(a.fingerprint, a2.fingerprint);
    }

    #[test]
    fn kubeconfig_files_are_named_after_the_file_and_exec_plugins_are_refused() {
        let dir = std::env::temp_dir().join(format!("wavegate-kubeconfigs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("staging");
        std::fs::write(
            &ok,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:7443/\ncontexts:\n- name: ctx\n  context: {cluster: c, user: u}\ncurrent-context: ctx\nusers:\n- name: u\n  user: {token: t}\n",
        )
        .unwrap();
        let d = from_kubeconfig_file(&ok).unwrap();
        assert_eq!(
            (d.name.as_str(), d.server.as_str()),
            ("staging", "https://127.0.0.1:7443")
        );
        let exec = dir.join("eks");
        std::fs::write(
            &exec,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://a:1'}\ncontexts:\n- name: ctx\n  context: {cluster: c, user: u}\ncurrent-context: ctx\nusers:\n- name: u\n  user:\n    exec: {command: aws, apiVersion: client.authentication.k8s.io/v1beta1}\n",
        )
        .unwrap();
        let e = from_kubeconfig_file(&exec).unwrap_err();
        assert!(matches!(e, SourceError::Unsupported(_)), "{e}");
        let junk = dir.join("junk");
        std::fs::write(&junk, "{{{").unwrap();
        assert!(
            from_kubeconfig_file(&junk)
                .unwrap_err()
                .to_string()
                .contains("not a kubeconfig")
        );
        let nocontext = dir.join("nocontext");
        std::fs::write(&nocontext, "apiVersion: v1\nkind: Config\n").unwrap();
        assert!(
            from_kubeconfig_file(&nocontext)
                .unwrap_err()
                .to_string()
                .contains("current context")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn with_server(server: &str) -> String {
        refused(&secret(&[
            ("name", "x"),
            ("server", server),
            ("config", r#"{"bearerToken":"t"}"#),
        ]))
    }

    #[test]
    fn plain_http_and_control_characters_in_a_server_are_refused() {
        let e = with_server("http://10.0.0.1:6443");
        assert!(e.contains("plain http"), "{e}");
        let e = with_server("http://user@evil.example/");
        assert!(e.contains("plain http"), "{e}");
        for s in ["https://a:1/x\u{1b}[2J", "https://a:1/\ny", "https://a b:1"] {
            let e = with_server(s);
            assert!(e.contains("control characters"), "{s:?}: {e}");
            assert!(!e.contains('\u{1b}') && !e.contains('\n'), "{e}");
        }
        assert!(with_server("ftp://a:1").contains("https URL"));
        // A loopback http server (a `kubectl proxy` sidecar) and https are accepted.
        for ok in [
            "http://127.0.0.1:8001",
            "http://localhost:8001",
            "http://[::1]:8001",
        ] {
            let d = remote(&secret(&[
                ("name", "x"),
                ("server", ok),
                ("config", r#"{"bearerToken":"t"}"#),
            ]));
            assert_eq!(d.server, ok);
        }
    }

    #[test]
    fn misplaced_credentials_in_a_config_are_not_echoed() {
        for config in [
            r#"{"tlsClientConfig":{"insecure":"s3cr3t-token"}}"#,
            r#"{"bearerToken":"t","tlsClientConfig":"s3cr3t-token"}"#,
            r#"{"username":["s3cr3t-token"]}"#,
        ] {
            let e = refused(&secret(&[
                ("name", "x"),
                ("server", "https://a:1"),
                ("config", config),
            ]));
            assert!(e.contains("not Argo CD's JSON"), "{e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        }
        let e = from_kubeconfig_bytes("x".into(), "x", b"apiVersion: v1\nclusters: s3cr3t-token\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a kubeconfig") && !e.contains("s3cr3t"),
            "{e}"
        );
    }

    #[test]
    fn debug_of_a_cluster_config_redacts_credentials() {
        let c: ClusterConfig = serde_json::from_str(
            r#"{"username":"admin","password":"s3cr3t-pw","bearerToken":"s3cr3t-token",
                "tlsClientConfig":{"keyData":"s3cr3t-key","certData":"c"}}"#,
        )
        .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains("admin") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    fn kubeconfig_with(cluster: &str, user: &str) -> Vec<u8> {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://a:1', {cluster}}}\ncontexts:\n- name: ctx\n  context: {{cluster: c, user: u}}\ncurrent-context: ctx\nusers:\n- name: u\n  user: {{{user}}}\n"
        )
        .into_bytes()
    }

    #[test]
    fn kubeconfig_file_references_and_proxies_are_refused_inline_data_is_not() {
        let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
        for (cluster, user, what) in [
            ("", &*format!("tokenFile: {sa}/token"), "tokenFile"),
            (
                "",
                "client-certificate: /c.crt, client-key-data: YQ==",
                "client-certificate",
            ),
            (
                "",
                "client-certificate-data: YQ==, client-key: /c.key",
                "client-key",
            ),
            (
                &*format!("certificate-authority: {sa}/ca.crt"),
                "token: t",
                "certificate-authority",
            ),
            ("proxy-url: 'http://p:3128'", "token: t", "proxy-url"),
        ] {
            let e = from_kubeconfig_bytes("x".into(), "x", &kubeconfig_with(cluster, user))
                .unwrap_err();
            assert!(matches!(e, SourceError::Unsupported(_)), "{what}: {e}");
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
        let ok = kubeconfig_with("certificate-authority-data: YQ==", "token: t");
        assert!(from_kubeconfig_bytes("x".into(), "x", &ok).is_ok());
    }

    #[test]
    fn a_kubeconfig_file_over_the_cap_is_refused_unread() {
        let dir = std::env::temp_dir().join(format!("wavegate-kc-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big");
        let mut text = kubeconfig_with("", "token: t");
        text.resize(MAX_KUBECONFIG as usize + 10, b'#');
        std::fs::write(&big, &text).unwrap();
        let e = from_kubeconfig_file(&big).unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
