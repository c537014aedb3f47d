//! Which clusters wavegate judges: the home cluster (where it runs, with its own credentials)
//! and, with `--clusters-from`, the destination clusters Argo CD deploys to, each with its own
//! cache and evaluator. The set follows its source (Argo CD's cluster Secrets, or a directory
//! of kubeconfigs): re-read every `--clusters-resync`, a cluster added, removed or edited there
//! is added, removed or rebuilt here, and one that cannot be used is refused with its reason
//! while the others run.
//!
//! A remote cluster that cannot be reached only makes its own verdicts Unknown: its cache's
//! watches fail like any watch (issue 8's rule: a failing watch is never Healthy), and nothing
//! here waits on it.

mod source;

pub use source::{
    Destination, FromSecret, SECRET_TYPE_CLUSTER, SECRET_TYPE_LABEL, SourceError,
    from_argocd_secret, from_kubeconfig_file, normalize_server,
};

use crate::evaluate::Evaluator;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::config::KubeConfigOptions;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// Argo CD's name for the cluster it runs in (argo-cd `common.KubernetesInClusterName`)…
pub const HOME: &str = "in-cluster";
/// …and its server (`common.KubernetesInternalAPIServerAddr`).
pub const HOME_SERVER: &str = "https://kubernetes.default.svc";

/// One remote cluster that runs.
pub struct Cluster {
    pub name: String,
    pub server: String,
    pub evaluator: Arc<Evaluator>,
    fingerprint: u64,
}

/// A cluster its source names but wavegate does not run, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Refused {
    /// Where it was read: `Secret argocd/cluster-x` or a kubeconfig file path.
    pub source: String,
    pub reason: String,
}

/// Where the remote clusters come from.
pub enum Source {
    /// Argo CD's cluster Secrets in one namespace: every one (list, label selector), or only
    /// the named ones (get each; the Role can then be narrowed by `resourceNames`).
    ArgoCdSecrets {
        client: kube::Client,
        namespace: String,
        names: Vec<String>,
    },
    /// A mounted directory, one kubeconfig file per cluster named after it.
    KubeconfigDir(PathBuf),
}

/// Builds the evaluator of a new or changed cluster (the caller owns the flags it needs).
pub type Build = dyn Fn(&Destination, kube::Client) -> Result<Arc<Evaluator>, String> + Send + Sync;

/// The clusters that run now.
pub struct Clusters {
    home: Arc<Evaluator>,
    remote: RwLock<Arc<BTreeMap<String, Arc<Cluster>>>>,
    refused: RwLock<Vec<Refused>>,
    /// Bumped whenever the remote set changes (the per-cluster writers follow it).
    changed: watch::Sender<u64>,
}

impl Clusters {
    /// The home cluster alone (and, once refreshed from a source, the remote ones).
    pub fn new(home: Arc<Evaluator>) -> Arc<Clusters> {
        Arc::new(Clusters {
            home,
            remote: RwLock::default(),
            refused: RwLock::default(),
            changed: watch::Sender::new(0),
        })
    }

    pub fn home(&self) -> &Arc<Evaluator> {
        &self.home
    }

    /// The evaluator of the cluster named `name` (`in-cluster` is the home cluster).
    pub fn get(&self, name: &str) -> Option<Arc<Evaluator>> {
        if name == HOME {
            return Some(self.home.clone());
        }
        self.remotes().get(name).map(|c| c.evaluator.clone())
    }

    /// The remote clusters that run, by name.
    pub fn remotes(&self) -> Arc<BTreeMap<String, Arc<Cluster>>> {
        self.remote.read().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn refused(&self) -> Vec<Refused> {
        self.refused.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// Notified when the remote set changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The evaluator of an Application's destination (`spec.destination.name`, else
    /// `.server`), as Argo CD resolves it (argo-cd `util/argo` `GetDestinationCluster`: by name
    /// when a name is given, else by server), or why there is none.
    pub fn of_application(&self, app: &Value) -> Result<Arc<Evaluator>, String> {
        let field = |k: &str| {
            app.pointer(&format!("/spec/destination/{k}"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        match (field("name"), field("server")) {
            (Some(name), _) => self
                .get(name)
                .ok_or_else(|| format!("destination cluster {name:?} is not one wavegate judges")),
            (None, Some(server)) => {
                let server = normalize_server(server);
                if server == HOME_SERVER {
                    return Ok(self.home.clone());
                }
                self.remotes()
                    .values()
                    .find(|c| c.server == server)
                    .map(|c| c.evaluator.clone())
                    .ok_or_else(|| {
                        format!("destination server {server} is not a cluster wavegate judges")
                    })
            }
            // No destination: Argo CD refuses to sync it; the home cluster is as good a guess
            // as any for reading what it last reported.
            (None, None) => Ok(self.home.clone()),
        }
    }

    /// Read the source and bring the running set in line with it. A source that cannot be
    /// read at all (the home API server down) leaves the set as it is.
    pub async fn refresh(&self, source: &Source, build: &Build) -> Result<(), String> {
        let found = source.read().await?;
        let current = self.remotes();
        let mut next = BTreeMap::new();
        let mut refused = Vec::new();
        for (origin, found) in found {
            let d = match found {
                Ok(d) => d,
                Err(e) => {
                    refused.push(Refused {
                        source: origin,
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            if next.contains_key(&d.name) || d.name == HOME {
                refused.push(Refused {
                    source: origin,
                    reason: format!("cluster name {:?} is already taken", d.name),
                });
                continue;
            }
            let kept = current
                .get(&d.name)
                .filter(|c| c.fingerprint == d.fingerprint)
                .cloned();
            let cluster = match kept {
                Some(c) => c,
                None => match connect(&d, build).await {
                    Ok(c) => {
                        tracing::info!(cluster = %d.name, server = %d.server, %origin, "cluster added");
                        Arc::new(c)
                    }
                    Err(reason) => {
                        refused.push(Refused {
                            source: origin,
                            reason,
                        });
                        continue;
                    }
                },
            };
            next.insert(d.name.clone(), cluster);
        }
        for gone in current.keys().filter(|n| !next.contains_key(*n)) {
            tracing::info!(cluster = %gone, "cluster removed");
        }
        // Once per refusal, not at every resync.
        let before = self.refused();
        for r in refused.iter().filter(|r| !before.contains(r)) {
            tracing::warn!(source = %r.source, reason = %r.reason, "cluster refused");
        }
        let same = current.len() == next.len()
            && current
                .iter()
                .zip(next.iter())
                .all(|((a, x), (b, y))| a == b && Arc::ptr_eq(x, y));
        if let Ok(mut r) = self.refused.write() {
            *r = refused;
        }
        if !same {
            if let Ok(mut r) = self.remote.write() {
                *r = Arc::new(next);
            }
            self.changed.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// Refresh now and then every `every`, for as long as the process runs.
    pub async fn follow(self: Arc<Self>, source: Source, build: Box<Build>, every: Duration) {
        loop {
            if let Err(e) = self.refresh(&source, &build).await {
                tracing::warn!(error = %e, "cannot read the cluster list; keeping the clusters as they are");
            }
            tokio::time::sleep(every).await;
        }
    }
}

async fn connect(d: &Destination, build: &Build) -> Result<Cluster, String> {
    let config =
        kube::Config::from_custom_kubeconfig(d.kubeconfig.clone(), &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("cannot use its connection settings: {e}"))?;
    let client = kube::Client::try_from(config)
        .map_err(|e| format!("cannot build a client from its connection settings: {e}"))?;
    let evaluator = build(d, client)?;
    Ok(Cluster {
        name: d.name.clone(),
        server: d.server.clone(),
        evaluator,
        fingerprint: d.fingerprint,
    })
}

/// Every cluster a source names, each with where it was read and what it is.
type Found = Vec<(String, Result<Destination, SourceError>)>;

impl Source {
    async fn read(&self) -> Result<Found, String> {
        match self {
            Source::ArgoCdSecrets {
                client,
                namespace,
                names,
            } => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let secrets = if names.is_empty() {
                    let lp = ListParams::default()
                        .labels(&format!("{SECRET_TYPE_LABEL}={SECRET_TYPE_CLUSTER}"));
                    api.list(&lp)
                        .await
                        .map_err(|e| format!("cannot list cluster Secrets in {namespace}: {e}"))?
                        .items
                        .into_iter()
                        .map(Ok)
                        .collect::<Vec<_>>()
                } else {
                    let mut found = Vec::new();
                    for name in names {
                        found.push(match api.get_opt(name).await {
                            Ok(Some(s)) => Ok(s),
                            Ok(None) => Err((name.clone(), "not found".to_string())),
                            // This one Secret, not the API server: refuse it, keep the others.
                            Err(kube::Error::Api(e)) if e.code == 403 => Err((
                                name.clone(),
                                format!(
                                    "forbidden (is it in the Role's resourceNames?): {}",
                                    e.message
                                ),
                            )),
                            Err(e) => {
                                return Err(format!("cannot read Secret {namespace}/{name}: {e}"));
                            }
                        });
                    }
                    found
                };
                Ok(secrets
                    .into_iter()
                    .filter_map(|s| match s {
                        Err((name, why)) => Some((
                            format!("Secret {namespace}/{name}"),
                            Err(SourceError::Unreadable(why)),
                        )),
                        Ok(s) => {
                            let origin = format!(
                                "Secret {namespace}/{}",
                                s.metadata.name.as_deref().unwrap_or("")
                            );
                            match from_argocd_secret(&s) {
                                Ok(FromSecret::Home) => None,
                                Ok(FromSecret::Remote(d)) => Some((origin, Ok(*d))),
                                Err(e) => Some((origin, Err(e))),
                            }
                        }
                    })
                    .collect())
            }
            Source::KubeconfigDir(dir) => {
                let entries = std::fs::read_dir(dir)
                    .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
                let mut paths: Vec<PathBuf> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    // A mounted Secret also holds `..data` and `..<timestamp>` entries.
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| !n.starts_with('.'))
                    })
                    .collect();
                paths.sort();
                Ok(paths
                    .into_iter()
                    .map(|p| (p.display().to_string(), from_kubeconfig_file(&p)))
                    .collect())
            }
        }
    }
}

#[cfg(test)]
mod tests;
