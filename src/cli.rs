//! The subcommands: argument types and what each one runs.

use crate::api::{self, AppState};
use crate::ask::Ask;
use crate::cache::{Cache, WatchLimits};
use crate::clusters::{Cluster, Clusters, Source, Writers};
use crate::evaluate::{EvalConfig, Evaluator};
use crate::health::{HealthStatus, Verdict, printable, printable_lines};
/// `wavegate lint`: rendered manifests in, findings out (src/lint/).
pub use crate::lint::command::{LintArgs, run as lint};
use crate::metrics::Metrics;
use crate::policy::CheckPolicy;
use crate::probe::{Credentials, Scheme, TlsSettings};
use crate::progress::{Progress, Row, is_live};
use crate::resource::{CheckKind, InputError, Target};
use clap::Args;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// The most replicas `--shards` may share the clusters among.
const MAX_SHARDS: u32 = 1024;
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Namespaces to watch (comma-separated). Empty: cluster-wide watches.
    #[arg(long, env = "WAVEGATE_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// How long a verdict is reused for identical asks.
    #[arg(long, env = "WAVEGATE_VERDICT_TTL", default_value = "50ms", value_parser = humantime::parse_duration)]
    pub verdict_ttl: Duration,
    /// How long a CockroachDB probe result is reused.
    #[arg(long, env = "WAVEGATE_PROBE_TTL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub probe_ttl: Duration,
    /// Upper bound on probing one CockroachDB pod.
    #[arg(long, env = "WAVEGATE_PROBE_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub probe_timeout: Duration,
    /// How long a Service selector may match no pods while near-matching pods exist before
    /// the verdict turns Degraded (which fails an Argo CD sync).
    #[arg(long, env = "WAVEGATE_SELECTOR_GRACE", default_value = "60s", value_parser = humantime::parse_duration)]
    pub selector_grace: Duration,
    /// How long CNPG may report `applied: false` before Degraded (CNPG retries every 30s).
    #[arg(long, env = "WAVEGATE_CNPG_GRACE", default_value = "90s", value_parser = humantime::parse_duration)]
    pub cnpg_grace: Duration,
    /// How long ready CockroachDB pods may see fewer live nodes than expected before Degraded.
    #[arg(long, env = "WAVEGATE_CRDB_GRACE", default_value = "60s", value_parser = humantime::parse_duration)]
    pub crdb_grace: Duration,
    /// Argo CD's bundled health scripts of the release the user runs: the argo-cd Go module's
    /// `resource_customizations` folder (`go mod download -json github.com/argoproj/argo-cd/v3@<version>`,
    /// then its `Dir`). Kinds without a dedicated check are judged by the script Argo CD would
    /// run (argocd-cm's first, then these), and by Argo CD's built-in rules and kstatus
    /// otherwise.
    /// Wins over --argocd-version.
    #[arg(long, env = "WAVEGATE_ARGOCD_HEALTH_SCRIPTS")]
    pub argocd_health_scripts: Option<PathBuf>,
    /// The Argo CD release the user runs (`3.5.1` or `v3.5.1`): its bundled health scripts are
    /// read from `<--argocd-scripts-root>/v<X.Y.Z>/` (the image ships 3.4.7, 3.5.1 and 3.6.1
    /// there). Without it (and without --argocd-health-scripts), no bundled script is used.
    #[arg(long, env = "WAVEGATE_ARGOCD_RELEASE")]
    pub argocd_version: Option<String>,
    /// Where --argocd-version finds each release's bundled scripts: one `v<X.Y.Z>` folder per
    /// release, each the argo-cd module's `resource_customizations` (`<group>/<Kind>/health.lua`).
    #[arg(
        long,
        env = "WAVEGATE_ARGOCD_SCRIPTS_ROOT",
        default_value = crate::argocd_lua::SCRIPTS_ROOT
    )]
    pub argocd_scripts_root: PathBuf,
    /// How long an Argo CD health script's Degraded must last before a gate takes it as a
    /// definite failure (some scripts call a switchover or a failover Degraded).
    #[arg(long, env = "WAVEGATE_ARGOCD_LUA_GRACE", default_value = "90s", value_parser = humantime::parse_duration)]
    pub argocd_lua_grace: Duration,
    /// Directory of a mounted Secret with `username` and `password` files for CockroachDB's
    /// admin API (enables cluster-ID comparison). Never read through the Kubernetes API. Sent
    /// only to pods the CrdbCluster controls, over https verified with --crdb-ca-file.
    #[arg(long, env = "WAVEGATE_CRDB_CREDENTIALS_DIR")]
    pub crdb_credentials_dir: Option<PathBuf>,
    /// Only these CrdbClusters (`namespace/name`, comma-separated) receive the credentials of
    /// --crdb-credentials-dir; others are probed without. Empty: every CrdbCluster whose pods
    /// prove their membership over verified TLS — safe only while the CA behind --crdb-ca-file
    /// issues node certificates to no one else (see docs/security.md).
    #[arg(long, env = "WAVEGATE_CRDB_CREDENTIALS_FOR", value_delimiter = ',')]
    pub crdb_credentials_for: Vec<String>,
    /// How to reach CockroachDB nodes' HTTP port: `http` (insecure clusters) or `https`.
    #[arg(long, env = "WAVEGATE_CRDB_SCHEME", value_enum, default_value_t = Scheme::Http)]
    pub crdb_scheme: Scheme,
    /// PEM file of the CockroachDB cluster CA, to verify nodes over https (certificates must
    /// be valid for --crdb-tls-server-name). Required with --crdb-credentials-dir.
    #[arg(long, env = "WAVEGATE_CRDB_CA_FILE")]
    pub crdb_ca_file: Option<PathBuf>,
    /// Do not verify CockroachDB node certificates. Only for unauthenticated probes: refused
    /// together with --crdb-credentials-dir.
    #[arg(long, env = "WAVEGATE_CRDB_INSECURE_SKIP_VERIFY")]
    pub crdb_insecure_skip_verify: bool,
    /// How long a first read waits for a new watch to sync.
    #[arg(long, env = "WAVEGATE_SYNC_WAIT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub sync_wait: Duration,
    /// Name CockroachDB node certificates must be valid for (checked while connecting to the
    /// pod IP), `{name}` and `{namespace}` standing for the CrdbCluster's. Default:
    /// `{name}-public.{namespace}.svc.cluster.local`, which every operator puts in its node
    /// certificates.
    #[arg(long, env = "WAVEGATE_CRDB_TLS_SERVER_NAME")]
    pub crdb_tls_server_name: Option<String>,
    /// A watch started for a caller's read (not one `serve` itself needs) is stopped after
    /// this long without reads.
    #[arg(long, env = "WAVEGATE_WATCH_IDLE", default_value = "10m", value_parser = humantime::parse_duration)]
    pub watch_idle: Duration,
    /// At most this many watches for callers' reads at once; a read that needs one more is
    /// answered Unknown with the reason.
    #[arg(long, env = "WAVEGATE_MAX_WATCHES", default_value = "64")]
    pub max_watches: usize,
    /// At most this many objects held for one remote cluster (all its watches together); a
    /// watch that would pass it is stopped and emptied, and what needs it is Unknown with the
    /// reason until it fits (metric `wavegate_objects_over_bound`). The home cluster is not
    /// bounded.
    #[arg(long, env = "WAVEGATE_MAX_CLUSTER_OBJECTS", default_value = "100000")]
    pub max_cluster_objects: usize,
    /// At most about this many bytes held for one remote cluster (`64Mi`, `512Ki`, or bytes),
    /// each object weighed by the text wavegate keeps of it; past it, as past
    /// --max-cluster-objects. An object whose labels or annotations pass Kubernetes' own
    /// limits is never held. The home cluster is not bounded.
    #[arg(long, env = "WAVEGATE_MAX_CLUSTER_BYTES", default_value = "64Mi", value_parser = parse_bytes)]
    pub max_cluster_bytes: usize,
}

/// `64Mi`, `512Ki`, `1Gi` or a plain number of bytes (Kubernetes' binary quantity suffixes).
fn parse_bytes(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => {
            return Err(format!(
                "{text:?}: a number of bytes, or one with Ki, Mi or Gi"
            ));
        }
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{text:?}: a number of bytes, or one with Ki, Mi or Gi"))
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "WAVEGATE_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: String,
    /// File holding a bearer token that `/api/*` requests must present (and `/metrics` on
    /// the API port, unless --metrics-listen moves it).
    #[arg(long, env = "WAVEGATE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// A second address serving `/metrics` (without the token), `/healthz` and `/readyz` for
    /// monitoring and the kubelet; the API port then serves no `/metrics`. Open it to the
    /// monitoring namespace only (deploy/'s NetworkPolicy does).
    #[arg(long, env = "WAVEGATE_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// How often every WaveGate (and annotated object) is judged again without any change
    /// (grace periods and gate timeouts advance with time; changes are watched).
    #[arg(long, env = "WAVEGATE_RESYNC", default_value = "15s", value_parser = humantime::parse_duration)]
    pub resync: Duration,
    /// Annotation mode: write verdicts into `wavegate.dev/health-*` annotations on Services,
    /// CNPG Databases, CrdbClusters and Argo CD Applications that carry
    /// `wavegate.dev/annotate: "true"`. Off by default: finding them means watching every
    /// object of those kinds (in --namespaces), and it needs `patch` on them.
    #[arg(long, env = "WAVEGATE_ANNOTATE")]
    pub annotate: bool,
    /// Notices: while Argo CD's sync of an Application waits for a WaveGate, write Argo CD's
    /// notice annotations (`notice.argocd.argoproj.io/content`, `/severity`, `/url`) on that
    /// Application, so Argo CD 3.5+ shows why as a banner without any UI extension; removed
    /// when the wave advances or the sync ends. Off by default: it needs `patch` on
    /// Applications (narrowed to those keys by deploy/'s admission policy).
    #[arg(long, env = "WAVEGATE_NOTICES")]
    pub notices: bool,
    /// wavegate's address as a browser reaches it (e.g. `https://wavegate.example.com`): a
    /// notice links to the Application's waves view there. Unset: notices carry no link.
    #[arg(long, env = "WAVEGATE_PUBLIC_URL", value_parser = public_url)]
    pub public_url: Option<String>,
    /// At most one notice write per Application this often.
    #[arg(long, env = "WAVEGATE_NOTICE_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub notice_interval: Duration,
    /// Namespace of Argo CD's own Applications: a WaveGate whose tracking id names an
    /// Application without a namespace is managed by one in this namespace, and the start of
    /// that Application's running sync restarts the gate's timeout.
    #[arg(long, env = "WAVEGATE_ARGOCD_NAMESPACE", default_value = crate::gate::controller::DEFAULT_ARGOCD_NAMESPACE)]
    pub argocd_namespace: String,
    /// argocd-cm's `application.resourceTrackingMethod` (empty there means `annotation`):
    /// how Argo CD marks the objects an Application manages, which decides what a user that
    /// Argo CD's proxy authorized for one application may see of the objects it lists.
    #[arg(
        long,
        env = "WAVEGATE_TRACKING_METHOD",
        value_enum,
        default_value = "annotation"
    )]
    pub tracking_method: crate::views::TrackingMethod,
    /// How long a verdict wavegate writes (WaveGate `status.health.validUntil`, annotation
    /// `wavegate.dev/valid-until`) counts for Argo CD unless wavegate confirms it again; it is
    /// confirmed at half this. 0: forever (a stopped wavegate's last verdict then counts).
    #[arg(long, env = "WAVEGATE_STATUS_VALIDITY", default_value = "3m", value_parser = humantime::parse_duration)]
    pub status_validity: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub leader: LeaderArgs,
    #[command(flatten)]
    pub shards: ShardArgs,
    #[command(flatten)]
    pub peers: crate::api::PeerArgs,
    #[command(flatten)]
    pub clusters: ClustersArgs,
    #[command(flatten)]
    pub limits: crate::api::LimitArgs,
    #[command(flatten)]
    pub connections: crate::api::ConnectionArgs,
    #[command(flatten)]
    pub policy: crate::policy::PolicyArgs,
}

#[derive(Args, Debug, Clone)]
pub struct LeaderArgs {
    /// Run the writers (gate controller, annotation mode) only while holding a Lease, so that
    /// several replicas write each verdict once; every replica serves reads.
    #[arg(long, env = "WAVEGATE_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the Lease. Default: the pod's own (POD_NAMESPACE, or the ServiceAccount
    /// token's namespace file).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, env = "WAVEGATE_LEADER_ELECT_LEASE", default_value = "wavegate")]
    pub leader_elect_lease: String,
    /// This replica's identity in the Lease. Default: the pod name (POD_NAME), else the host name.
    #[arg(long, env = "POD_NAME")]
    pub leader_elect_identity: Option<String>,
    /// How long a leader that stopped renewing keeps the others from writing.
    #[arg(long, env = "WAVEGATE_LEADER_ELECT_DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_elect_duration: std::time::Duration,
}

#[derive(Args, Debug, Clone)]
pub struct ShardArgs {
    /// Judge only the clusters that Argo CD's application-controller replica with this
    /// replica's number reconciles, computed as Argo CD computes it (algorithm, replica count,
    /// each cluster Secret's `shard` and `argocd.argoproj.io/skip-reconcile`), and write only
    /// while holding this shard's Lease (`<--leader-elect-lease>-shard-<N>`). Needs
    /// `--clusters-from argocd-secrets`; implies leader election per shard.
    #[arg(long, env = "WAVEGATE_SHARD_LIKE_ARGOCD")]
    pub shard_like_argocd: bool,
    /// How many replicas share the clusters: the application-controller's replica count, read
    /// from the variable Argo CD's controller reads.
    #[arg(long, env = "ARGOCD_CONTROLLER_REPLICAS", default_value_t = 1)]
    pub shard_replicas: u32,
    /// This replica's shard. Default (or negative, as Argo CD's default -1): the number after
    /// the last `-` of the pod name (a StatefulSet's ordinal), as Argo CD's `InferShard` reads
    /// its hostname.
    #[arg(long, env = "ARGOCD_CONTROLLER_SHARD", allow_negative_numbers = true)]
    pub shard: Option<i64>,
    /// `legacy`, `round-robin` or `consistent-hashing`. Default: `controller.sharding.algorithm`
    /// of argocd-cmd-params-cm in --argocd-namespace, read again at every read of the cluster
    /// Secrets.
    #[arg(long, env = "ARGOCD_CONTROLLER_SHARDING_ALGORITHM")]
    pub sharding_algorithm: Option<String>,
    /// Argo CD's dynamic cluster distribution (its controller run as a Deployment with
    /// `ARGOCD_ENABLE_DYNAMIC_CLUSTER_DISTRIBUTION`): the replica count is that Deployment's
    /// `spec.replicas` (read through its scale), read at start as Argo CD's controller reads it
    /// at its own, instead of ARGOCD_CONTROLLER_REPLICAS; read again every --clusters-resync,
    /// and when it changed this replica exits, to be restarted with the new count. With
    /// --shard-like-argocd only (else ignored, with a warning: the variable is Argo CD's own).
    /// Values as Go's strconv.ParseBool takes them (true, True, TRUE, t, 1; false, …).
    #[arg(long, env = "ARGOCD_ENABLE_DYNAMIC_CLUSTER_DISTRIBUTION", value_parser = go_bool)]
    pub argocd_dynamic_distribution: bool,
    /// The application-controller Deployment that --argocd-dynamic-distribution reads, in
    /// --argocd-namespace.
    #[arg(
        long,
        env = "ARGOCD_APPLICATION_CONTROLLER_NAME",
        default_value = "argocd-application-controller"
    )]
    pub argocd_controller_name: String,
    /// Share the clusters among this many replicas by wavegate's own assignment, whether or
    /// not Argo CD shards its controller: a bounded-load consistent hash ring over the
    /// clusters, weighted by each cluster's WaveGates and watches as the replicas publish them
    /// on their shard Leases. This replica's number is --shard (else its pod's ordinal); it
    /// writes only while holding its shard's Lease (`<--leader-elect-lease>-shard-<N>`). Needs
    /// `--clusters-from argocd-secrets`; cannot be used with --shard-like-argocd.
    #[arg(
        long = "shards",
        env = "WAVEGATE_SHARDS",
        conflicts_with_all = ["shard_like_argocd", "sharding_algorithm"]
    )]
    pub own_shards: Option<u32>,
}

/// Where destination clusters come from (`--clusters-from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClustersFrom {
    /// Argo CD's cluster Secrets in --clusters-namespace.
    ArgocdSecrets,
    /// One kubeconfig file per cluster in --clusters-kubeconfig-dir (a mounted Secret).
    KubeconfigDir,
}

#[derive(Args, Debug, Clone)]
pub struct ClustersArgs {
    /// Also judge the clusters Argo CD deploys to, each with its own caches and gate
    /// controller, addressed as `/api/v1/clusters/{name}/…`. Off by default: only the cluster
    /// wavegate runs in (`in-cluster`).
    #[arg(long, env = "WAVEGATE_CLUSTERS_FROM", value_enum)]
    pub clusters_from: Option<ClustersFrom>,
    /// Namespace of Argo CD's cluster Secrets.
    #[arg(long, env = "WAVEGATE_CLUSTERS_NAMESPACE", default_value = "argocd")]
    pub clusters_namespace: String,
    /// Only these cluster Secrets (comma-separated), each read with `get`, so that the Role can
    /// name them in `resourceNames`. Empty: every Secret labelled as an Argo CD cluster (list).
    #[arg(long, env = "WAVEGATE_CLUSTERS_SECRETS", value_delimiter = ',')]
    pub clusters_secrets: Vec<String>,
    /// Directory of kubeconfig files, one per cluster, the file name being the cluster's name.
    #[arg(long, env = "WAVEGATE_CLUSTERS_KUBECONFIG_DIR")]
    pub clusters_kubeconfig_dir: Option<PathBuf>,
    /// How often the cluster list is read again: a cluster added, removed or changed there is
    /// added, removed or rebuilt within this long.
    #[arg(long, env = "WAVEGATE_CLUSTERS_RESYNC", default_value = "30s", value_parser = humantime::parse_duration)]
    pub clusters_resync: Duration,
    /// Also use project-scoped cluster Secrets (those with a `project` key), which a project's
    /// admins may create in Argo CD. Off: they are refused, so none can shadow or collide
    /// with a cluster the installer added.
    #[arg(long, env = "WAVEGATE_CLUSTERS_PROJECT_SCOPED")]
    pub clusters_project_scoped: bool,
    /// Also use cluster Secrets with `tlsClientConfig.insecure: true` (the API server's
    /// certificate not verified). Off: they are refused.
    #[arg(long, env = "WAVEGATE_CLUSTERS_ALLOW_INSECURE")]
    pub clusters_allow_insecure: bool,
}

impl ClustersArgs {
    /// The source of remote clusters, if any; `home` reads Argo CD's Secrets.
    fn source(&self, home: &kube::Client) -> Result<Option<Source>, CliError> {
        let from = self.clusters_from;
        if !self.clusters_secrets.is_empty() && from != Some(ClustersFrom::ArgocdSecrets) {
            return Err(CliError::Usage(
                "--clusters-secrets needs --clusters-from argocd-secrets".into(),
            ));
        }
        if self.clusters_kubeconfig_dir.is_some() && from != Some(ClustersFrom::KubeconfigDir) {
            return Err(CliError::Usage(
                "--clusters-kubeconfig-dir needs --clusters-from kubeconfig-dir".into(),
            ));
        }
        match from {
            None => Ok(None),
            Some(ClustersFrom::ArgocdSecrets) => {
                crate::resource::validate_namespace(&self.clusters_namespace)?;
                for name in &self.clusters_secrets {
                    crate::resource::validate_name(name)?;
                }
                Ok(Some(Source::ArgoCdSecrets {
                    client: home.clone(),
                    namespace: self.clusters_namespace.clone(),
                    names: self.clusters_secrets.clone(),
                    trust: crate::clusters::SecretTrust {
                        project_scoped: self.clusters_project_scoped,
                        insecure: self.clusters_allow_insecure,
                    },
                }))
            }
            Some(ClustersFrom::KubeconfigDir) => match &self.clusters_kubeconfig_dir {
                Some(dir) => Ok(Some(Source::kubeconfig_dir(dir.clone()))),
                None => Err(CliError::Usage(
                    "--clusters-from kubeconfig-dir needs --clusters-kubeconfig-dir".into(),
                )),
            },
        }
    }
}

/// `--public-url`: an http(s) URL, which is all Argo CD links a notice to
/// (`application-notice/notice.ts`, `sanitizeURL`, drops any other scheme).
fn public_url(text: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"))
        .ok_or_else(|| format!("{text:?} is not an http:// or https:// URL"))?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{text:?} is not an http:// or https:// URL with a host"
        ));
    }
    if text.contains(['?', '#']) {
        return Err(format!(
            "{text:?}: give the base address only (no query or fragment); the waves view's path is added to it"
        ));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// A boolean as Argo CD reads its environment (argo-cd `util/env` `ParseBoolFromEnv`, Go's
/// `strconv.ParseBool`). Where Argo CD falls back to false on anything else, wavegate refuses:
/// a value one of them reads as true and the other as false would shard them apart.
fn go_bool(value: &str) -> Result<bool, String> {
    // An empty variable is unset for Argo CD (`ParseBoolFromEnv` returns the default, false).
    if value.is_empty() {
        return Ok(false);
    }
    crate::clusters::shard::go_parse_bool(value).ok_or_else(|| {
        format!("{value:?}: expected true or false (as Go's strconv.ParseBool: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)")
    })
}

/// The replica count of Argo CD's controller Deployment (its scale's `spec.replicas`, which
/// is the Deployment's), as its controllers read it: none, fewer than one, or more than
/// wavegate shards among is refused (upstream refuses to start on the first; on the second its
/// readiness fails).
fn dynamic_replica_count(replicas: Option<i32>) -> Result<u32, String> {
    match replicas {
        None => Err("its scale has no spec.replicas (0, or not set)".into()),
        Some(n) if n < 1 => Err(format!("its spec.replicas is {n}")),
        Some(n) if n.unsigned_abs() > MAX_SHARDS => Err(format!(
            "its spec.replicas is {n}, more than the {MAX_SHARDS} replicas wavegate shards among"
        )),
        Some(n) => Ok(n.unsigned_abs()),
    }
}

/// Where `--argocd-dynamic-distribution` reads the replica count, and the count this replica
/// shards by.
#[derive(Clone)]
struct Recount {
    client: kube::Client,
    namespace: String,
    name: String,
    replicas: u32,
}

impl Recount {
    /// The controller Deployment's replica count now. Read through `deployments/scale`, so
    /// wavegate needs no read of the Deployment's pod template (its env may hold secrets).
    async fn read(&self) -> Result<u32, CliError> {
        use k8s_openapi::api::apps::v1::Deployment;
        let what = format!(
            "Deployment {}/{} (--argocd-dynamic-distribution: Argo CD's controllers shard by \
             its replica count)",
            self.namespace, self.name
        );
        let scale = kube::Api::<Deployment>::namespaced(self.client.clone(), &self.namespace)
            .get_scale(&self.name)
            .await
            .map_err(|e| CliError::Failed(format!("cannot read the scale of {what}: {e}")))?;
        dynamic_replica_count(scale.spec.and_then(|s| s.replicas))
            .map_err(|why| CliError::Failed(format!("{what}: {why}")))
    }

    /// Resolves once the count is no longer the one this replica shards by. Argo CD's
    /// controllers keep the count they started with (`ClusterSharding.Replicas` is set once in
    /// `NewClusterSharding`; the heartbeat's `UpdateShard` changes only the shard), so after a
    /// scale they disagree among themselves until restarted; wavegate's replicas would too, and
    /// replicas counting differently stand back (every write stops). Exiting lets each replica
    /// be restarted with the new count, within one `every` of the change.
    async fn changed(self, every: Duration) -> u32 {
        let mut failing = false;
        loop {
            tokio::time::sleep(every).await;
            match self.read().await {
                Ok(n) if n != self.replicas => return n,
                Ok(_) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "cannot read Argo CD's controller replica count again; sharding by the count read at start");
                }
                Err(_) => {}
            }
        }
    }
}

/// Where a pod's ServiceAccount namespace is mounted.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

impl ShardArgs {
    /// This replica's sharding, if `--shard-like-argocd`; `pod` is its pod (host) name.
    fn settings(
        &self,
        pod: &str,
        argocd_namespace: &str,
        clusters: &ClustersArgs,
    ) -> Result<Option<crate::clusters::ShardSettings>, CliError> {
        if let Some(replicas) = self.own_shards {
            return self
                .own(replicas, pod, argocd_namespace, clusters)
                .map(Some);
        }
        if !self.shard_like_argocd {
            return Ok(None);
        }
        if clusters.clusters_from != Some(ClustersFrom::ArgocdSecrets) {
            return Err(CliError::Usage(
                "--shard-like-argocd needs --clusters-from argocd-secrets: Argo CD shards the \
                 clusters of its cluster Secrets"
                    .into(),
            ));
        }
        if !clusters.clusters_secrets.is_empty() {
            return Err(CliError::Usage(
                "--shard-like-argocd cannot be used with --clusters-secrets: Argo CD's \
                 round-robin and consistent hashing place each cluster by all the others, so \
                 every cluster Secret must be read"
                    .into(),
            ));
        }
        let algorithm = match self.sharding_algorithm.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(name) if crate::clusters::shard::Algorithm::is_known(name) => {
                Some(crate::clusters::shard::Algorithm::from_name(name))
            }
            Some(name) => {
                return Err(CliError::Usage(format!(
                    "--sharding-algorithm {name:?}: expected legacy, round-robin or \
                     consistent-hashing"
                )));
            }
        };
        // Argo CD's `InferShard` takes a name without a number for shard 0, with a warning. For
        // wavegate that is a Deployment's pod (`wavegate-7d9f8-abcde`): every replica would be
        // shard 0 and the others' clusters judged by nobody, so it is refused instead.
        let numbered = pod
            .rsplit('-')
            .next()
            .is_some_and(|last| last.parse::<i64>().is_ok());
        if self.shard_replicas > 1 && self.shard.is_none_or(|s| s < 0) && !numbered {
            return Err(CliError::Usage(format!(
                "--shard-like-argocd with {} replicas: this replica's number is neither given \
                 (--shard, ARGOCD_CONTROLLER_SHARD) nor at the end of its pod name {pod:?} (run \
                 wavegate as a StatefulSet, whose pods are <name>-0, <name>-1, …)",
                self.shard_replicas
            )));
        }
        // Each replica hashes up to 1000 points a shard at every read of the Secrets
        // (consistent hashing): a typo in the count would take its memory, not start it.
        if self.shard_replicas > MAX_SHARDS {
            return Err(CliError::Usage(format!(
                "--shard-replicas (ARGOCD_CONTROLLER_REPLICAS) {} is more than the {MAX_SHARDS} \
                 replicas wavegate shards among",
                self.shard_replicas
            )));
        }
        let replica = crate::clusters::shard::replica_shard(self.shard_replicas, self.shard, pod);
        Ok(Some(crate::clusters::ShardSettings {
            replica,
            replicas: self.shard_replicas,
            mode: crate::clusters::Mode::LikeArgoCd,
            algorithm,
            argocd_namespace: argocd_namespace.to_string(),
            rules: crate::clusters::Rules::for_resync(
                clusters.clusters_resync.max(Duration::from_secs(1)),
            ),
            clusters_namespace: clusters.clusters_namespace.clone(),
            // Set with the election (`Server::build`).
            leases: Default::default(),
            identity: String::new(),
        }))
    }

    /// `--shards`: this replica's share of wavegate's own ring (`clusters::ring`).
    fn own(
        &self,
        replicas: u32,
        pod: &str,
        argocd_namespace: &str,
        clusters: &ClustersArgs,
    ) -> Result<crate::clusters::ShardSettings, CliError> {
        // Each replica hashes 100 ring points per shard at every read of the Secrets: a typo
        // (`--shards 4000000000`) would take the replica's memory, not start it.
        if !(1..=MAX_SHARDS).contains(&replicas) {
            return Err(CliError::Usage(format!(
                "--shards must be 1 to {MAX_SHARDS} (the number of replicas sharing the clusters), \
                 not {replicas}"
            )));
        }
        if clusters.clusters_from != Some(ClustersFrom::ArgocdSecrets) {
            return Err(CliError::Usage(
                "--shards needs --clusters-from argocd-secrets: the ring is computed from every \
                 replica's read of the cluster Secrets"
                    .into(),
            ));
        }
        if !clusters.clusters_secrets.is_empty() {
            return Err(CliError::Usage(
                "--shards cannot be used with --clusters-secrets: the ring places each cluster \
                 by all the others, so every cluster Secret must be read"
                    .into(),
            ));
        }
        // Unlike Argo CD's `InferShard`, no fallback to 0: a replica numbered wrongly would
        // leave a shard's clusters to nobody, or write beside the true shard 0.
        let ordinal = pod
            .rsplit('-')
            .next()
            .and_then(|last| last.parse::<i64>().ok());
        let replica = match (self.shard.filter(|s| *s >= 0), ordinal) {
            (Some(given), _) => given,
            (None, _) if replicas == 1 => 0,
            (None, Some(n)) => n,
            (None, None) => {
                return Err(CliError::Usage(format!(
                    "--shards {replicas}: this replica's number is neither given (--shard) nor \
                     at the end of its pod name {pod:?} (run wavegate as a StatefulSet, whose \
                     pods are <name>-0, <name>-1, …)"
                )));
            }
        };
        if replica >= i64::from(replicas) {
            return Err(CliError::Usage(format!(
                "--shards {replicas}: this replica's number {replica} is not below it (shards \
                 are numbered from 0)"
            )));
        }
        Ok(crate::clusters::ShardSettings {
            replica,
            replicas,
            mode: crate::clusters::Mode::Own,
            algorithm: None,
            argocd_namespace: argocd_namespace.to_string(),
            rules: crate::clusters::Rules::for_resync(
                clusters.clusters_resync.max(Duration::from_secs(1)),
            ),
            clusters_namespace: clusters.clusters_namespace.clone(),
            leases: Default::default(),
            identity: String::new(),
        })
    }
}

impl LeaderArgs {
    /// This replica's pod name (`POD_NAME`), else its host name.
    fn pod_name(&self) -> Result<String, CliError> {
        match &self.leader_elect_identity {
            Some(id) if !id.is_empty() => Ok(id.clone()),
            _ => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .map_err(|e| {
                    CliError::Usage(format!(
                        "--leader-elect needs --leader-elect-identity (or POD_NAME): {e}"
                    ))
                }),
        }
    }

    /// The election of shard `shard`'s Lease. The identity is this process's, not only its
    /// pod's: a StatefulSet's replacement pod has the old pod's name, and the old one may still
    /// run (a partitioned node); with one identity both would hold the Lease.
    /// Its identity ends with the digest of the sharding inputs, by which the other replicas
    /// see whether it shards as they do ([`crate::leader::Rivals`]).
    fn shard_election(
        &self,
        settings: &mut crate::clusters::ShardSettings,
    ) -> Result<crate::leader::Election, CliError> {
        let mut args = self.clone();
        args.leader_elect = true;
        let namespace = self.lease_namespace()?;
        settings.leases = (namespace, self.leader_elect_lease.clone());
        let rivals = settings.rivals();
        args.leader_elect_lease = rivals.shard_lease(settings.replica);
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let identity = format!(
            "{}_{}-{since:x}{}",
            self.pod_name()?,
            std::process::id(),
            settings.identity_suffix()
        );
        settings.identity = identity.clone();
        args.leader_elect_identity = Some(identity);
        let mut election = args.election()?.expect("leader_elect is set");
        election.rivals = rivals;
        Ok(election)
    }

    /// The pod's own namespace (`POD_NAMESPACE`, else the ServiceAccount's), which
    /// `--leader-elect-namespace` may move the Lease away from; else the Lease's.
    fn pod_namespace(&self) -> Result<String, CliError> {
        match std::env::var("POD_NAMESPACE") {
            Ok(ns) if !ns.is_empty() => {
                crate::resource::validate_namespace(&ns)?;
                Ok(ns)
            }
            _ => match std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE) {
                Ok(ns) => {
                    let ns = ns.trim().to_string();
                    crate::resource::validate_namespace(&ns)?;
                    Ok(ns)
                }
                Err(_) => self.lease_namespace(),
            },
        }
    }

    /// The Lease's namespace: `--leader-elect-namespace`, else the pod's own.
    fn lease_namespace(&self) -> Result<String, CliError> {
        let namespace = match &self.leader_elect_namespace {
            Some(ns) => ns.clone(),
            None => std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
                .map(|s| s.trim().to_string())
                .map_err(|e| {
                    CliError::Usage(format!(
                        "--leader-elect needs --leader-elect-namespace (or POD_NAMESPACE): {e}"
                    ))
                })?,
        };
        crate::resource::validate_namespace(&namespace)?;
        Ok(namespace)
    }

    /// The election to take part in, if any.
    fn election(&self) -> Result<Option<crate::leader::Election>, CliError> {
        if !self.leader_elect {
            return Ok(None);
        }
        let namespace = self.lease_namespace()?;
        let identity = self.pod_name()?;
        if self.leader_elect_duration < std::time::Duration::from_secs(5) {
            return Err(CliError::Usage(
                "--leader-elect-duration must be at least 5s".into(),
            ));
        }
        Ok(Some(crate::leader::Election {
            namespace,
            lease: self.leader_elect_lease.clone(),
            identity,
            duration: self.leader_elect_duration,
            // Unsharded: replicas of --shard-like-argocd beside it would write too.
            rivals: crate::leader::Rivals::of_unsharded(&self.leader_elect_lease),
        }))
    }
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// `<resource>/<name>`, resource as kubectl names it: services/forgejo,
    /// databases.postgresql.cnpg.io/forgejo, crdbclusters.crdb.cockroachlabs.com/cockroachdb.
    /// Several: all are judged (`wait`: waited for), the exit code is the worst one's.
    #[arg(required = true, num_args = 1..)]
    pub targets: Vec<String>,
    #[arg(
        short = 'n',
        long,
        env = "WAVEGATE_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    /// Check parameter `key=value` (e.g. minReady=0, expectedNodes=3); repeatable.
    #[arg(short = 'p', long = "param")]
    pub params: Vec<String>,
    /// Output format: `text`, `json` (one object; an array for several targets) or `wide` (a
    /// kubectl-style table, one row per target).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Args, Debug)]
pub struct WaitArgs {
    #[command(flatten)]
    pub check: CheckArgs,
    /// Give up after this long (exit 124).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Time between evaluations.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
    Wide,
}

const EXIT_ERROR: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_TIMEOUT: u8 = 124;

/// Why a subcommand could not do its job. Each kind is one exit code, decided in one place
/// ([`CliError::exit_code`]); the message goes to stderr as `wavegate: …` ([`fail`]).
#[derive(Debug, Error)]
pub enum CliError {
    /// Arguments or flags that cannot work: exit 2.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Input(#[from] InputError),
    /// wavegate could not evaluate (no cluster, a file it cannot read, a port it cannot
    /// bind): exit 1.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Input(_) => EXIT_USAGE,
            CliError::Failed(_) => EXIT_ERROR,
        }
    }
}

/// Report `e` and return its exit code.
fn fail(e: CliError) -> u8 {
    eprintln!("wavegate: {e}");
    e.exit_code()
}

/// Exit code of `check` for each status (documented in `--help` and README).
pub(crate) fn exit_code(status: HealthStatus) -> u8 {
    match status {
        HealthStatus::Healthy => 0,
        HealthStatus::Progressing => 3,
        HealthStatus::Degraded => 4,
        HealthStatus::Missing => 5,
        HealthStatus::Suspended => 6,
        HealthStatus::Unknown => 7,
    }
}

impl ClusterArgs {
    fn eval_config(&self) -> Result<EvalConfig, CliError> {
        let crdb_credentials = match &self.crdb_credentials_dir {
            Some(dir) => Some(read_credentials(dir)?),
            None => None,
        };
        let ca_pem = match &self.crdb_ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                CliError::Failed(format!(
                    "cannot read CockroachDB CA file {}: {e}",
                    path.display()
                ))
            })?),
            None => None,
        };
        let bundled = match (&self.argocd_health_scripts, &self.argocd_version) {
            (Some(dir), _) => crate::argocd_lua::Bundled::load(dir)
                .map_err(|e| CliError::Usage(format!("--argocd-health-scripts: {e}")))?,
            (None, Some(version)) => {
                crate::argocd_lua::Bundled::of_release(&self.argocd_scripts_root, version)
                    .map_err(|e| CliError::Usage(format!("--argocd-version: {e}")))?
            }
            (None, None) => crate::argocd_lua::Bundled::default(),
        };
        if !bundled.is_empty() {
            tracing::info!(
                scripts = bundled.len(),
                "Argo CD's bundled health scripts read"
            );
        }
        let argocd_lua = Arc::new(crate::argocd_lua::LuaHealth::new(bundled));
        let mut credentials_for = BTreeSet::new();
        for entry in self.crdb_credentials_for.iter().map(|s| s.trim()) {
            if entry.is_empty() {
                continue;
            }
            let (ns, name) = entry.split_once('/').ok_or_else(|| {
                CliError::Usage(format!(
                    "--crdb-credentials-for {entry:?}: expected <namespace>/<name>"
                ))
            })?;
            crate::resource::validate_namespace(ns)?;
            crate::resource::validate_name(name)?;
            credentials_for.insert((ns.to_string(), name.to_string()));
        }
        // Given but naming no cluster (`--crdb-credentials-for=`, an empty list rendered by a
        // template) must not fall open to "every CrdbCluster".
        if !self.crdb_credentials_for.is_empty() && credentials_for.is_empty() {
            return Err(CliError::Usage(
                "--crdb-credentials-for names no CrdbCluster: give <namespace>/<name>,… or leave it out".into(),
            ));
        }
        if !credentials_for.is_empty() && crdb_credentials.is_none() {
            return Err(CliError::Usage(
                "--crdb-credentials-for needs --crdb-credentials-dir".into(),
            ));
        }
        Ok(EvalConfig {
            crdb_credentials_for: (!credentials_for.is_empty()).then_some(credentials_for),
            crdb_scheme: self.crdb_scheme,
            crdb_tls: TlsSettings {
                ca_pem,
                accept_invalid_certs: self.crdb_insecure_skip_verify,
                server_name: self.crdb_tls_server_name.clone(),
            },
            verdict_ttl: self.verdict_ttl,
            probe_ttl: self.probe_ttl,
            probe_timeout: self.probe_timeout,
            selector_grace: self.selector_grace,
            cnpg_grace: self.cnpg_grace,
            crdb_grace: self.crdb_grace,
            crdb_credentials,
            probes_refused: None,
            argocd_lua: Some(argocd_lua),
            argocd_lua_grace: self.argocd_lua_grace,
        })
    }

    fn namespace_set(&self) -> Option<BTreeSet<String>> {
        let set: BTreeSet<String> = self
            .namespaces
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        (!set.is_empty()).then_some(set)
    }
}

/// Credentials from a mounted Secret volume: one file per key, as Kubernetes projects them.
fn read_credentials(dir: &std::path::Path) -> Result<Credentials, CliError> {
    let read = |key: &str| {
        let path = dir.join(key);
        std::fs::read_to_string(&path)
            .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
            .map_err(|e| {
                CliError::Failed(format!(
                    "cannot read CockroachDB credential file {}: {e}",
                    path.display()
                ))
            })
    };
    Ok(Credentials {
        username: read("username")?,
        password: read("password")?,
    })
}

async fn evaluator(
    cluster: &ClusterArgs,
    namespaces: Option<BTreeSet<String>>,
    metrics: Arc<Metrics>,
) -> Result<Arc<Evaluator>, CliError> {
    let config = cluster.eval_config()?;
    let client = kube_client().await?;
    evaluator_of(cluster, config, client, namespaces, false, metrics)
}

/// An evaluator over its own cache of the cluster `client` reaches.
fn evaluator_of(
    cluster: &ClusterArgs,
    config: EvalConfig,
    client: kube::Client,
    namespaces: Option<BTreeSet<String>>,
    bounded: bool,
    metrics: Arc<Metrics>,
) -> Result<Arc<Evaluator>, CliError> {
    let limits = WatchLimits {
        idle: cluster.watch_idle,
        max_on_demand: cluster.max_watches,
        max_objects: bounded.then_some(cluster.max_cluster_objects),
        max_bytes: bounded.then_some(cluster.max_cluster_bytes),
        ..WatchLimits::default()
    };
    let cache = Cache::with_limits(
        client,
        namespaces,
        cluster.sync_wait,
        limits,
        metrics.clone(),
    );
    Evaluator::new(cache, config, metrics).map_err(|e| CliError::Failed(e.to_string()))
}

/// How `serve` builds the evaluator of each remote cluster its source names: judged as
/// [`crate::clusters::remote_eval_config`] says, over a cache bounded by --max-cluster-objects
/// and --max-cluster-bytes, with `scripts`: home's Argo CD health scripts, the ones argocd-cm
/// is followed into. Argo CD's one application controller judges every cluster with the one
/// argocd-cm (argo-cd v3.5.1 `controller/cache/cache.go`: `liveStateCache.loadCacheSettings`
/// reads the resource overrides once, for the caches of all clusters); scripts loaded apart
/// for a remote cluster would never see argocd-cm.
pub fn remote_build(
    cluster: &ClusterArgs,
    scripts: Option<Arc<crate::argocd_lua::LuaHealth>>,
    metrics: Arc<Metrics>,
) -> Result<Box<crate::clusters::Build>, CliError> {
    let mut config = crate::clusters::remote_eval_config(cluster.eval_config()?);
    if scripts.is_some() {
        config.argocd_lua = scripts;
    }
    let cluster_args = cluster.clone();
    Ok(Box::new(move |d, client| {
        let ev = evaluator_of(
            &cluster_args,
            config.clone(),
            client,
            d.namespaces.clone(),
            // A remote API server (a project admin's cluster Secret, with opt-in) is bounded in
            // what it can make wavegate hold.
            true,
            metrics.clone(),
        )
        .map_err(|e| e.to_string())?;
        // Readiness covers each cluster's WaveGates, as at home (reported, see `/readyz`).
        ev.cache().require(crate::gate::kind());
        Ok(ev)
    }))
}

/// The clusters `serve` judges: home, and those of `--clusters-from`, read once before serving
/// (so the first requests already know them) and then followed.
async fn clusters(
    args: &ServeArgs,
    home: Arc<Cluster>,
    sharding: Option<crate::clusters::ShardSettings>,
    metrics: Arc<Metrics>,
) -> Result<Arc<Clusters>, CliError> {
    let source = args.clusters.source(&home.client)?;
    // Home's scripts, which argocd-cm is followed into, judge every cluster.
    let scripts = home.evaluator.argocd_lua().cloned();
    let clusters = match sharding {
        Some(settings) => {
            let sharding = crate::clusters::Sharding::new(settings, metrics.clone());
            Clusters::sharded(home, sharding)
        }
        None => Clusters::new(home),
    };
    let Some(source) = source else {
        return Ok(clusters);
    };
    let build = remote_build(&args.cluster, scripts, metrics)?;
    if let Err(e) = clusters.refresh(&source, &build).await {
        tracing::warn!(error = %e, "cannot read the cluster list yet; retrying");
    }
    let every = args.clusters.clusters_resync.max(Duration::from_secs(1));
    tokio::spawn(clusters.clone().follow(source, build, every));
    Ok(clusters)
}

/// Why gate timeouts cannot apply, if `--namespaces` leaves out Argo CD's namespace: a gate's
/// timeout is measured from the start of its managing Application's sync, and a gate whose
/// Application wavegate cannot read gets no timeout at all (docs/contracts.md, "Grace periods,
/// blindness and timeouts"). Said once at startup, loudly, and in each such gate's message.
fn timeouts_off(namespaces: Option<&BTreeSet<String>>, argocd_namespace: &str) -> Option<String> {
    let watched = namespaces?;
    (!watched.contains(argocd_namespace)).then(|| {
        format!(
            "--namespaces does not include Argo CD's namespace {argocd_namespace} \
             (--argocd-namespace): wavegate cannot read the Applications that manage gates, so \
             no gate an Application manages gets its timeout (it waits instead of failing the \
             sync); add {argocd_namespace} to --namespaces (Helm: watchNamespaces)"
        )
    })
}

/// `wavegate serve`: build the server, then run it until SIGTERM.
pub async fn serve(args: ServeArgs) -> u8 {
    match Server::build(args).await {
        Ok(server) => server.run().await,
        Err(e) => fail(e),
    }
}

/// The composition root of `wavegate serve`. [`Server::build`] does everything that can refuse
/// to start (flags, the token file, the clients, both listeners, the cluster list), so a
/// misconfigured replica exits before it takes a Lease or answers a probe; [`Server::run`] starts
/// the writers and serves until SIGTERM.
pub struct Server {
    args: ServeArgs,
    token: Option<api::Token>,
    policy: CheckPolicy,
    metrics: Arc<Metrics>,
    clusters: Arc<Clusters>,
    listener: tokio::net::TcpListener,
    /// `--metrics-listen`'s.
    monitoring: Option<tokio::net::TcpListener>,
    /// With `--leader-elect`: the election and its client.
    election: Option<(crate::leader::Election, kube::Client)>,
    /// With `--shard-like-argocd` and `--peer-url` (or `--peer`).
    forwarder: Option<api::Forwarder>,
    /// With `--argocd-dynamic-distribution`: the count this replica shards by, read again.
    recount: Option<Recount>,
}

impl Server {
    pub async fn build(args: ServeArgs) -> Result<Server, CliError> {
        let token = match &args.token_file {
            Some(path) => {
                Some(api::Token::from_file(path).map_err(|e| CliError::Usage(e.to_string()))?)
            }
            None => {
                tracing::warn!(
                    "no --token-file: anyone who reaches this port can call the API directly"
                );
                None
            }
        };
        let policy = args
            .policy
            .policy()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        if let Some(why) = timeouts_off(
            args.cluster.namespace_set().as_ref(),
            &args.argocd_namespace,
        ) {
            tracing::warn!("{why}");
        }
        let metrics = Arc::new(Metrics::default());
        let evaluator =
            evaluator(&args.cluster, args.cluster.namespace_set(), metrics.clone()).await?;
        if let Some(lua) = evaluator.argocd_lua().cloned() {
            let client = kube_client().await?;
            let follow =
                crate::argocd_lua::argocd_cm::follow(client, args.argocd_namespace.clone(), lua);
            tokio::spawn(follow);
        }
        // Readiness is what `serve` needs to do its job, the gate controller's WaveGates; watches
        // started by callers' reads never count (a caller could otherwise wedge it).
        let home = Cluster::home(evaluator);
        home.cache.require(crate::gate::kind());
        if !args.status_validity.is_zero() && args.status_validity < args.resync * 2 {
            return Err(CliError::Usage(format!(
                "--status-validity ({}) must be at least twice --resync ({}): verdicts are \
                 renewed at resyncs, and one that expires before it is renewed holds every wave",
                humantime::format_duration(args.status_validity),
                humantime::format_duration(args.resync)
            )));
        }
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| CliError::Failed(format!("cannot listen on {}: {e}", args.listen)))?;
        let monitoring = match &args.metrics_listen {
            None => None,
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                CliError::Failed(format!("cannot listen on {addr} (--metrics-listen): {e}"))
            })?),
        };
        let mut shards = args.shards.clone();
        let pod = args.leader.pod_name().unwrap_or_default();
        let recount = match (shards.argocd_dynamic_distribution, shards.shard_like_argocd) {
            (false, _) => None,
            (true, false) => {
                tracing::warn!(
                    "ARGOCD_ENABLE_DYNAMIC_CLUSTER_DISTRIBUTION (--argocd-dynamic-distribution) \
                     is ignored: it changes only how --shard-like-argocd counts replicas"
                );
                None
            }
            (true, true) => {
                // The flags first: a usage error is not hidden behind a failed read.
                shards.settings(&pod, &args.argocd_namespace, &args.clusters)?;
                let mut recount = Recount {
                    client: kube_client().await?,
                    namespace: args.argocd_namespace.clone(),
                    name: shards.argocd_controller_name.clone(),
                    replicas: 0,
                };
                recount.replicas = recount.read().await?;
                shards.shard_replicas = recount.replicas;
                Some(recount)
            }
        };
        let mut sharding = shards.settings(&pod, &args.argocd_namespace, &args.clusters)?;
        // With shards, each shard has its Lease: one replica writes for a shard's clusters.
        let election = match &mut sharding {
            Some(s) => {
                match s.mode {
                    crate::clusters::Mode::LikeArgoCd => tracing::info!(
                        shard = s.replica,
                        replicas = s.replicas,
                        "judging one shard's clusters, as Argo CD's controller of the same number"
                    ),
                    crate::clusters::Mode::Own => tracing::info!(
                        shard = s.replica,
                        replicas = s.replicas,
                        "judging one shard's clusters, by wavegate's own weighted ring"
                    ),
                }
                Some(args.leader.shard_election(s)?)
            }
            None => args.leader.election()?,
        };
        let forwarder = match (&sharding, args.peers.forwards()) {
            (_, false) => None,
            (None, true) => {
                return Err(CliError::Usage(
                    "--peer-url and --peer need --shard-like-argocd or --shards: only shards \
                     send reads to another replica"
                        .into(),
                ));
            }
            (Some(_), true) => Some(
                // The holders are pods of this one's StatefulSet: `{namespace}` is the pods'
                // namespace, where the headless Service is, wherever the Leases live.
                api::Forwarder::new(
                    &args.peers,
                    &args.leader.pod_name()?,
                    &args.leader.pod_namespace()?,
                )
                .map_err(CliError::Usage)?,
            ),
        };
        let election = match election {
            None => None,
            Some(election) => Some((election, lease_client().await?)),
        };
        let clusters = clusters(&args, home, sharding, metrics.clone()).await?;
        Ok(Server {
            args,
            token,
            policy,
            metrics,
            clusters,
            listener,
            monitoring,
            election,
            forwarder,
            recount,
        })
    }

    /// Start the writers (or the election that starts them) and serve until SIGTERM (or, with
    /// `--argocd-dynamic-distribution`, until Argo CD's controller count changes); then stop
    /// the writers and release the Lease. The process's exit code.
    pub async fn run(self) -> u8 {
        let Server {
            args,
            token,
            policy,
            metrics,
            clusters,
            listener,
            monitoring,
            election,
            forwarder,
            recount,
        } = self;
        crate::heap::start_trimming();
        // The writers: a gate controller per cluster, and annotation mode if asked for. With
        // --leader-elect only the replica holding the Lease runs them; every replica serves reads.
        let validity = (!args.status_validity.is_zero()).then_some(args.status_validity);
        // Every write asks it first: stopping the writers when the lease is lost cannot stop
        // one a frozen replica had ready to send (src/leader.rs).
        let fence = match &election {
            Some((election, client)) => {
                crate::leader::Fence::of(client.clone(), election, metrics.clone())
            }
            None => crate::leader::Fence::default(),
        };
        let writers = Writers {
            gates: crate::gate::controller::Settings {
                resync: args.resync,
                argocd_namespace: args.argocd_namespace.clone(),
                status_validity: validity,
                policy: Arc::new(policy.clone()),
                tracking_method: args.tracking_method,
                fence: fence.clone(),
            },
            annotate: args.annotate.then_some((args.resync, validity)),
            // Notices run where Argo CD's Applications are read: home.
            notices: args.notices.then(|| crate::notice::Settings {
                public_url: args.public_url.clone(),
                interval: args.notice_interval,
                resync: args.resync,
                fence,
            }),
        };
        let (all, m) = (clusters.clone(), metrics.clone());
        let writers = move || {
            let run = all.clone().run_writers(m.clone(), writers.clone());
            vec![tokio::spawn(supervised("writers", run)).abort_handle()]
        };
        // Cancelled once the server has stopped (SIGTERM): the leader stops its writers and
        // releases the Lease, so another replica takes over at once instead of after it expires.
        let stopping = tokio_util::sync::CancellationToken::new();
        let election_task = match election {
            None => {
                metrics.leader.set(1);
                writers();
                None
            }
            Some((election, client)) => {
                let run = crate::leader::lead(
                    client,
                    election,
                    metrics.clone(),
                    stopping.clone(),
                    writers,
                );
                // A panic in the election (kube-lease-manager unwraps a negative
                // leaseDurationSeconds) would leave the writers running with nobody renewing:
                // every write fenced, silently. Exit instead, so the kubelet restarts it loudly.
                Some(tokio::spawn(async move {
                    if let Err(e) = tokio::spawn(run).await
                        && e.is_panic()
                    {
                        tracing::error!(error = %e, "the leader election panicked; exiting");
                        std::process::exit(i32::from(EXIT_ERROR));
                    }
                }))
            }
        };
        let mut state = AppState::of(clusters, metrics.clone())
            .with_limits(args.limits.clone())
            .with_argocd_namespace(&args.argocd_namespace)
            .with_tracking_method(args.tracking_method)
            .with_policy(policy);
        if let Some(token) = token {
            state = state.with_token(token);
        }
        if let Some(forwarder) = forwarder {
            state = state.with_forwarder(forwarder);
        }
        let mut monitoring_task = None;
        if let Some(listener) = monitoring {
            state = state.with_metrics_elsewhere();
            let app = api::monitoring_router(state.clone());
            // Its own small bounds: only Prometheus and the kubelet are let in, and nothing they
            // share the namespace with may hold its places (see `api::serve`).
            let limits = args.connections.monitoring();
            let m = metrics.clone();
            let refused = move || m.record_refusal("connections_monitoring");
            let stop = stopping.clone();
            let run = api::serve(listener, app, limits, refused, stop.cancelled_owned());
            monitoring_task = Some(tokio::spawn(run));
        }
        tracing::info!(listen = %args.listen, metrics = ?args.metrics_listen, "wavegate serving");
        let app = api::router(state);
        let m = metrics.clone();
        let refused = move || m.record_refusal("connections");
        let recounted = Arc::new(std::sync::OnceLock::new());
        let stop = {
            let recounted = recounted.clone();
            let every = args.clusters.clusters_resync.max(Duration::from_secs(1));
            async move {
                let Some(recount) = recount else {
                    return shutdown_signal().await;
                };
                let was = recount.replicas;
                tokio::select! {
                    () = shutdown_signal() => {}
                    now = recount.changed(every) => {
                        tracing::error!(was, now, "Argo CD's application-controller Deployment \
                            changed its replica count; exiting, to be restarted with the new \
                            one (Argo CD's controllers keep theirs until they restart)");
                        let _ = recounted.set(());
                    }
                }
            }
        };
        api::serve(listener, app, args.connections.clone(), refused, stop).await;
        stopping.cancel();
        if let Some(task) = monitoring_task {
            let _ = task.await;
        }
        if let Some(task) = election_task {
            // Bounded: a release the API server does not answer only means the lease expires.
            let _ = tokio::time::timeout(2 * crate::leader::REQUEST_TIMEOUT, task).await;
        }
        match recounted.get() {
            Some(()) => EXIT_ERROR,
            None => 0,
        }
    }
}

/// SIGTERM (what the kubelet sends) or Ctrl-C.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}

/// Parse one `<resource>/<name>` of `check` into an ask, or the message for exit code 2.
fn ask_of(target: &str, args: &CheckArgs) -> Result<Ask, CliError> {
    let (resource, name) = target
        .split_once('/')
        .ok_or_else(|| CliError::Usage(format!("{target:?}: expected <resource>/<name>")))?;
    let target = Target::new(CheckKind::parse(resource)?, &args.namespace, name)?;
    let mut params = HashMap::new();
    for p in &args.params {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| CliError::Usage(format!("--param {p:?}: expected key=value")))?;
        params.insert(k.to_string(), v.to_string());
    }
    Ok(Ask::from_params(target, &params)?)
}

/// Run a writer until it ends. A writer never ends on its own while `serve` runs; if one does
/// (a panic), the process exits, so that the kubelet restarts it and another replica takes the
/// Lease, instead of a replica that holds the Lease and writes nothing. Aborting this task
/// aborts the writer too.
async fn supervised<F>(name: &'static str, writer: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let handle = tokio::spawn(writer);
    let _guard = AbortOnDrop(handle.abort_handle());
    let outcome = handle.await;
    tracing::error!(writer = name, outcome = ?outcome.err(), "a writer stopped; exiting");
    std::process::exit(i32::from(EXIT_ERROR));
}

/// The client of leader election: requests give up within `leader::REQUEST_TIMEOUT`, so a
/// renewal that hangs fails before the lease expires.
async fn lease_client() -> Result<kube::Client, CliError> {
    let timeout = Some(crate::leader::REQUEST_TIMEOUT);
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| CliError::Failed(format!("cannot configure the Lease client: {e}")))?;
    config.connect_timeout = timeout;
    config.read_timeout = timeout;
    config.write_timeout = timeout;
    kube::Client::try_from(config)
        .map_err(|e| CliError::Failed(format!("cannot build the Lease client: {e}")))
}

/// The Kubernetes client of the one-shot commands and `serve`.
async fn kube_client() -> Result<kube::Client, CliError> {
    kube::Client::try_default().await.map_err(|e| {
        CliError::Failed(format!(
            "cannot build a Kubernetes client (KUBECONFIG or in-cluster): {e}"
        ))
    })
}

/// Each target's verdict in the chosen format: one target prints as it always has (the verdict,
/// or its JSON), several as one line or JSON object each, `wide` as a table.
fn print_verdicts(judged: &[(Ask, Verdict)], output: Output) {
    match (output, judged) {
        (Output::Wide, _) => {
            let rows: Vec<Vec<String>> = judged
                .iter()
                .map(|(ask, v)| {
                    vec![
                        ask.namespace().to_string(),
                        format!("{}/{}", ask.resource(), ask.name),
                        v.status.to_string(),
                        printable(&v.message),
                    ]
                })
                .collect();
            for line in crate::table::render(&["NAMESPACE", "TARGET", "STATUS", "MESSAGE"], &rows) {
                println!("{line}");
            }
        }
        (_, [(_, v)]) => print_verdict(v, output),
        (Output::Json, _) => {
            let all: Vec<_> = judged
                .iter()
                .map(|(ask, v)| {
                    serde_json::json!({
                        "resource": ask.resource().to_string(),
                        "namespace": ask.namespace(),
                        "name": ask.name,
                        "status": v.status,
                        "message": v.message,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(all));
        }
        _ => {
            for (ask, v) in judged {
                println!("{}", printable(&format!("{ask}: {v}")));
            }
        }
    }
}

fn print_verdict(v: &Verdict, output: Output) {
    if output == Output::Json {
        match serde_json::to_string(v) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("wavegate: {e}"),
        }
    } else {
        println!("{}", printable_lines(&v.to_string()));
    }
}

async fn one_shot_evaluator(args: &CheckArgs) -> Result<(Vec<Ask>, Arc<Evaluator>), u8> {
    let asks = args
        .targets
        .iter()
        .map(|t| ask_of(t, args))
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    // One namespace's watches only: a one-shot check must not list the whole cluster.
    let scope = Some(BTreeSet::from([args.namespace.clone()]));
    let mut cluster = args.cluster.clone();
    cluster.verdict_ttl = Duration::from_millis(1);
    let ev = evaluator(&cluster, scope, Arc::new(Metrics::default()))
        .await
        .map_err(fail)?;
    Ok((asks, ev))
}

async fn judge_all(ev: &Evaluator, asks: &[Ask]) -> Vec<(Ask, Verdict)> {
    let verdicts = futures::future::join_all(
        asks.iter()
            .map(|a| async { ev.judge_fresh(a).await.verdict }),
    )
    .await;
    asks.iter().cloned().zip(verdicts).collect()
}

pub async fn check(args: CheckArgs) -> u8 {
    let (asks, ev) = match one_shot_evaluator(&args).await {
        Ok(x) => x,
        Err(code) => return code,
    };
    let judged = judge_all(&ev, &asks).await;
    print_verdicts(&judged, args.output);
    exit_code(HealthStatus::worst(judged.iter().map(|(_, v)| v.status)))
}

/// Exit code 130, as a shell reports an interrupted command.
const EXIT_INTERRUPTED: u8 = 130;

pub async fn wait(args: WaitArgs) -> u8 {
    let gates: Vec<&str> = args
        .check
        .targets
        .iter()
        .filter_map(|t| crate::gate::view::gate_target(t))
        .collect();
    match (gates.as_slice(), args.check.targets.len()) {
        ([name], 1) => return wait_gate(&args, name).await,
        ([], _) => {}
        _ => {
            let why = "wait takes one WaveGate alone (its checks are in its spec)";
            return fail(CliError::Usage(why.into()));
        }
    }
    let (asks, ev) = match one_shot_evaluator(&args.check).await {
        Ok(x) => x,
        Err(code) => return code,
    };
    let title = match asks.as_slice() {
        [ask] => format!("{} {}", ask.resource(), ask.object()),
        _ => format!("{} objects in {}", asks.len(), args.check.namespace),
    };
    let mut progress = Progress::new(std::io::stderr(), is_live(), title, args.timeout);
    let deadline = Instant::now() + args.timeout;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        let judged = judge_all(&ev, &asks).await;
        let rows = judged
            .iter()
            .map(|(ask, v)| Row {
                name: format!("{} {}", ask.resource(), ask.object()),
                status: v.status,
                message: v.message.clone(),
            })
            .collect();
        progress.show(None, rows);
        let status = HealthStatus::worst(judged.iter().map(|(_, v)| v.status));
        // Any definite failure ends the wait: Argo CD would fail the sync on it too.
        let failed = judged
            .iter()
            .any(|(_, v)| v.status == HealthStatus::Degraded);
        if status == HealthStatus::Healthy || failed {
            progress.finish();
            print_verdicts(&judged, args.check.output);
            return if failed {
                exit_code(HealthStatus::Degraded)
            } else {
                0
            };
        }
        let next = (Instant::now() + args.interval).min(deadline);
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => break,
                _ = ticker.tick() => progress.tick(),
                _ = tokio::signal::ctrl_c() => {
                    progress.finish();
                    return EXIT_INTERRUPTED;
                }
            }
        }
        if Instant::now() >= deadline {
            progress.finish();
            eprintln!(
                "wavegate: timed out after {} waiting for {}",
                humantime::format_duration(args.timeout),
                args.check.targets.join(" ")
            );
            return EXIT_TIMEOUT;
        }
    }
}

/// `wait` on a WaveGate: its stored `status.health` at its current generation, as judged by the
/// wavegate service. Reads only WaveGates in one namespace (a hook Job's ServiceAccount needs
/// get/list/watch on wavegates there, nothing else). A gate that does not exist yet is waited for.
async fn wait_gate(args: &WaitArgs, name: &str) -> u8 {
    use crate::gate::view::{self, Waited};
    let ns = &args.check.namespace;
    let valid = crate::resource::validate_namespace(ns).and(crate::resource::validate_name(name));
    if let Err(e) = valid {
        return fail(e.into());
    }
    if !args.check.params.is_empty() {
        let why = "a WaveGate takes no --param; its checks are in its spec";
        return fail(CliError::Usage(why.into()));
    }
    let client = match kube_client().await {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let scope = Some(BTreeSet::from([ns.clone()]));
    let cache = Cache::new(
        client,
        scope,
        args.check.cluster.sync_wait,
        Arc::new(Metrics::default()),
    );
    let what = format!("WaveGate {ns}/{name}");
    let progress = RefCell::new(Progress::new(
        std::io::stderr(),
        is_live(),
        what.clone(),
        args.timeout,
    ));
    let seen = |g: Option<&view::Gate>| {
        let (health, rows) = match g {
            Some(g) => (
                Some(g.health.clone()),
                g.checks
                    .iter()
                    .map(|c| Row {
                        name: c.name.clone(),
                        status: c.status,
                        message: c.message.clone(),
                    })
                    .collect(),
            ),
            None => (None, Vec::new()),
        };
        progress.borrow_mut().show(health, rows);
    };
    let waited = view::wait(&cache, ns, name, args.timeout, true, seen);
    tokio::pin!(waited);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let waited = loop {
        tokio::select! {
            w = &mut waited => break w,
            _ = ticker.tick() => progress.borrow_mut().tick(),
            _ = tokio::signal::ctrl_c() => {
                progress.borrow_mut().finish();
                return EXIT_INTERRUPTED;
            }
        }
    };
    progress.borrow_mut().finish();
    match waited {
        Ok(Waited::Healthy(g)) => {
            print_verdict(&g.health, args.check.output);
            exit_code(HealthStatus::Healthy)
        }
        Ok(Waited::Degraded(g)) => {
            print_verdict(&g.health, args.check.output);
            exit_code(HealthStatus::Degraded)
        }
        Ok(Waited::TimedOut(_) | Waited::NotFound) => {
            eprintln!(
                "wavegate: timed out after {} waiting for {what}",
                humantime::format_duration(args.timeout)
            );
            EXIT_TIMEOUT
        }
        Err(e) => fail(CliError::Failed(format!("{what}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags of a cluster as `serve` parses them.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        cluster: ClusterArgs,
    }

    /// A remote cluster's evaluator judges with home's scripts, so that argocd-cm, followed
    /// into home's, reaches every cluster (a review found remotes with scripts of their own,
    /// which never saw argocd-cm's custom health checks).
    #[tokio::test]
    async fn a_remote_cluster_judges_with_homes_scripts() {
        use clap::Parser;
        let flags = Flags::parse_from(["wavegate"]);
        let home = Arc::new(crate::argocd_lua::LuaHealth::default());
        let build = remote_build(&flags.cluster, Some(home.clone()), Arc::default()).unwrap();
        let destination = crate::clusters::Destination {
            name: "east".into(),
            server: "https://127.0.0.1:9".into(),
            namespaces: None,
            kubeconfig: Default::default(),
            fingerprint: 0,
        };
        let config = kube::Config::new("https://127.0.0.1:9".parse().unwrap());
        let remote = build(&destination, kube::Client::try_from(config).unwrap()).unwrap();
        let scripts = remote.argocd_lua().expect("a remote judges with scripts");
        assert!(Arc::ptr_eq(scripts, &home));
    }

    #[test]
    fn a_public_url_is_an_http_base_address() {
        assert_eq!(
            public_url("https://wavegate.example.com/").as_deref(),
            Ok("https://wavegate.example.com")
        );
        assert_eq!(
            public_url("http://127.0.0.1:18090").as_deref(),
            Ok("http://127.0.0.1:18090")
        );
        for bad in [
            "javascript:alert(1)",
            "wavegate.example.com",
            "https://",
            "https://wavegate.example.com/?x=1",
            "https://wave gate.example.com",
        ] {
            assert!(public_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_namespaced_install_without_argo_cds_namespace_says_gate_timeouts_are_off() {
        let watched: BTreeSet<String> = ["ddb".to_string(), "cicd".to_string()].into();
        let why = timeouts_off(Some(&watched), "argocd");
        assert!(
            why.as_deref().is_some_and(|w| w.contains("timeout")
                && w.contains("argocd")
                && w.contains("--namespaces")),
            "{why:?}"
        );
        let with_argocd: BTreeSet<String> = ["ddb".into(), "argocd".into()].into();
        assert_eq!(timeouts_off(Some(&with_argocd), "argocd"), None);
        // Cluster-wide: every namespace is watched.
        assert_eq!(timeouts_off(None, "argocd"), None);
    }

    #[derive(clap::Parser)]
    struct Sharded {
        #[command(flatten)]
        shards: ShardArgs,
        #[command(flatten)]
        clusters: ClustersArgs,
    }

    fn sharded(args: &[&str], pod: &str) -> Result<Option<crate::clusters::ShardSettings>, String> {
        use clap::Parser;
        let parsed = Sharded::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        parsed
            .shards
            .settings(pod, "argocd", &parsed.clusters)
            .map_err(|e| e.to_string())
    }

    /// A StatefulSet's pod `wavegate-2` is replica 2 unless told otherwise, as Argo CD's
    /// `InferShard` reads its hostname; Argo CD's default `ARGOCD_CONTROLLER_SHARD=-1` means
    /// the same.
    #[test]
    fn a_replica_takes_its_shard_from_its_pod_ordinal_like_argo_cds_controller() {
        let base = [
            "--shard-like-argocd",
            "--clusters-from",
            "argocd-secrets",
            "--shard-replicas",
            "3",
        ];
        let s = sharded(&base, "wavegate-2").unwrap().unwrap();
        assert_eq!((s.replica, s.replicas, s.algorithm), (2, 3, None));
        let s = sharded(&[&base[..], &["--shard", "-1"]].concat(), "wavegate-1").unwrap();
        assert_eq!(s.unwrap().replica, 1);
        let s = sharded(&[&base[..], &["--shard", "0"]].concat(), "wavegate-1").unwrap();
        assert_eq!(s.unwrap().replica, 0);
        let pinned = [&base[..], &["--sharding-algorithm", "round-robin"]].concat();
        let s = sharded(&pinned, "x-0").unwrap().unwrap();
        assert_eq!(
            s.algorithm,
            Some(crate::clusters::shard::Algorithm::RoundRobin)
        );
        assert_eq!(sharded(&[], "wavegate-1").unwrap().map(|s| s.replica), None);
    }

    /// `--shards`: wavegate's own ring, the number from --shard or the pod's ordinal, and
    /// never beside Argo CD's sharding flags.
    #[test]
    fn own_shards_take_a_number_below_their_count_and_exclude_argo_cds_sharding() {
        let base = ["--shards", "3", "--clusters-from", "argocd-secrets"];
        let s = sharded(&base, "wavegate-2").unwrap().unwrap();
        assert_eq!(
            (s.replica, s.replicas, s.mode),
            (2, 3, crate::clusters::Mode::Own)
        );
        let s = sharded(&[&base[..], &["--shard", "1"]].concat(), "wavegate-2").unwrap();
        assert_eq!(s.unwrap().replica, 1);
        for (args, pod, why) in [
            (
                &[&base[..], &["--shard-like-argocd"]].concat(),
                "w-0",
                "cannot be used with",
            ),
            (
                &[&base[..], &["--sharding-algorithm", "legacy"]].concat(),
                "w-0",
                "cannot be used with",
            ),
            (&base.to_vec(), "wavegate-7d9f8-abcde", "StatefulSet"),
            (&base.to_vec(), "wavegate-3", "not below it"),
            (
                &base[..2].to_vec(),
                "w-0",
                "needs --clusters-from argocd-secrets",
            ),
            (
                &["--shards", "0", "--clusters-from", "argocd-secrets"].to_vec(),
                "w-0",
                "must be 1 to 1024",
            ),
            (
                &[
                    "--shards",
                    "4000000000",
                    "--clusters-from",
                    "argocd-secrets",
                ]
                .to_vec(),
                "w-0",
                "must be 1 to 1024",
            ),
        ] {
            let e = sharded(args, pod).unwrap_err();
            assert!(e.contains(why), "{args:?} {pod}: {e}");
        }
        // Argo CD's count is ignored here: the ring's replicas are --shards.
        let both = [&base[..], &["--shard-replicas", "5"]].concat();
        assert_eq!(sharded(&both, "w-1").unwrap().unwrap().replicas, 3);
    }

    /// Argo CD's controllers shard by their Deployment's replicas; without a count, or with
    /// none, nothing can be computed alike.
    #[test]
    fn the_dynamic_replica_count_is_the_deployments() {
        assert_eq!(dynamic_replica_count(Some(3)), Ok(3));
        assert!(dynamic_replica_count(None).is_err());
        assert!(dynamic_replica_count(Some(0)).is_err());
        assert!(dynamic_replica_count(Some(-2)).is_err());
        assert_eq!(dynamic_replica_count(Some(1024)), Ok(1024));
        assert!(dynamic_replica_count(Some(100_000)).is_err());
    }

    /// Argo CD reads its boolean variables with Go's strconv.ParseBool; anything else is
    /// refused here (Argo CD would take it for false).
    #[test]
    fn the_dynamic_distribution_variable_reads_as_go_reads_it() {
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(go_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(go_bool(no), Ok(false), "{no}");
        }
        for refused in ["yes", "on", " true", "tRUE"] {
            assert!(go_bool(refused).is_err(), "{refused:?}");
        }
        assert_eq!(go_bool(""), Ok(false), "empty is unset, as for Argo CD");
    }

    #[test]
    fn argo_cds_replica_count_is_capped_as_the_rings() {
        let err = sharded(
            &[
                "--shard-like-argocd",
                "--clusters-from",
                "argocd-secrets",
                "--shard-replicas",
                "4000000000",
                "--shard",
                "0",
            ],
            "wavegate-0",
        )
        .unwrap_err();
        assert!(err.contains("more than the 1024"), "{err}");
        assert!(
            sharded(
                &[
                    "--shard-like-argocd",
                    "--clusters-from",
                    "argocd-secrets",
                    "--shard-replicas",
                    "1024",
                    "--shard",
                    "0",
                ],
                "wavegate-0"
            )
            .is_ok()
        );
    }

    /// The sharding inputs' digest names the mode and the ring: a replica of the ring and one
    /// sharding like Argo CD, by the same count, stand back from each other.
    #[test]
    fn the_ring_and_argo_cds_sharding_have_different_digests() {
        let own = sharded(
            &["--shards", "3", "--clusters-from", "argocd-secrets"],
            "w-1",
        )
        .unwrap()
        .unwrap();
        let argocd = sharded(
            &[
                "--shard-like-argocd",
                "--shard-replicas",
                "3",
                "--clusters-from",
                "argocd-secrets",
            ],
            "w-1",
        )
        .unwrap()
        .unwrap();
        assert!(
            own.inputs().starts_with("mode=own replicas=3 ring="),
            "{}",
            own.inputs()
        );
        assert_ne!(own.identity_suffix(), argocd.identity_suffix());
        let four = sharded(
            &["--shards", "4", "--clusters-from", "argocd-secrets"],
            "w-1",
        )
        .unwrap()
        .unwrap();
        assert_ne!(own.identity_suffix(), four.identity_suffix());
    }

    /// Round-robin and consistent hashing place each cluster by every other, so a replica that
    /// reads only some Secrets, or kubeconfig files, would compute another assignment than Argo
    /// CD's; an algorithm name Argo CD would silently run as legacy is refused here.
    #[test]
    fn sharding_that_could_not_match_argo_cds_is_refused_at_start() {
        for (args, why) in [
            (
                &["--shard-like-argocd"][..],
                "needs --clusters-from argocd-secrets",
            ),
            (
                &[
                    "--shard-like-argocd",
                    "--clusters-from",
                    "argocd-secrets",
                    "--clusters-secrets",
                    "a",
                ],
                "--clusters-secrets",
            ),
            (
                &[
                    "--shard-like-argocd",
                    "--clusters-from",
                    "argocd-secrets",
                    "--sharding-algorithm",
                    "hash",
                ],
                "expected legacy",
            ),
        ] {
            let e = sharded(args, "wavegate-0").unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
        }
        // A Deployment's pod has no number: every replica would be shard 0.
        let three = [
            "--shard-like-argocd",
            "--clusters-from",
            "argocd-secrets",
            "--shard-replicas",
            "3",
        ];
        let e = sharded(&three, "wavegate-7d9f8-abcde").unwrap_err();
        assert!(e.contains("StatefulSet"), "{e}");
        let given = [&three[..], &["--shard", "2"]].concat();
        assert_eq!(
            sharded(&given, "wavegate-7d9f8-abcde")
                .unwrap()
                .map(|s| s.replica),
            Some(2)
        );
    }
}
