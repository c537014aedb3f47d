//! Discovery: which resource, at which version, the API server serves for a group and plural
//! (or kind), resolved from one discovery document per cluster. Each kind a view names that the
//! cache does not know would otherwise cost requests of its own (two per group), so a view of
//! an Application listing hundreds of kinds could send the API server hundreds of requests at
//! every poll. The document is fetched whole (aggregated discovery, `/api` and `/apis`: two
//! requests), kept for [`DISCOVERY_TTL`], and fetched again on a miss at most once per
//! [`DISCOVERY_MISS_TTL`] (a CRD installed since), however many kinds miss.

use super::{Cache, CacheError};
use crate::resource::GroupResource;
use kube::api::ApiResource;
use kube::discovery::Discovery;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a discovery document is used before it is fetched again.
pub(super) const DISCOVERY_TTL: Duration = Duration::from_secs(300);
/// How soon after the last fetch a kind the document does not name may fetch it again: a CRD
/// installed later is picked up within this.
pub(super) const DISCOVERY_MISS_TTL: Duration = Duration::from_secs(10);

/// How a discovery look-up names the resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Served {
    Plural(String),
    Kind(String),
}

/// The cluster's discovery document, and when it was last fetched (or tried).
#[derive(Default)]
pub(super) struct Catalog {
    latest: tokio::sync::Mutex<Fetched>,
}

#[derive(Default)]
struct Fetched {
    tried: Option<Instant>,
    /// The latest document fetched; kept through a failed fetch, since what it names is still
    /// served far more likely than not.
    document: Option<Arc<Discovery>>,
    /// Why the latest fetch failed, if it did.
    error: Option<String>,
    /// What the document answered for each look-up that found something. A view names each
    /// of its resources' kinds, and finding one in the document builds every version's
    /// `ApiResource` of its group again: for 2,000 resources that was 6% of a view's CPU.
    /// Emptied with each new document; misses are not kept, so names no document serves
    /// (an Application's status may list anything) cannot grow it.
    found: HashMap<(String, Served), ApiResource>,
}

impl Catalog {
    /// `by` in `group`, from the document fetched again first when the last fetch is `max_age`
    /// old; with why the latest fetch failed, if it did. Concurrent look-ups wait for one
    /// fetch instead of each making their own.
    async fn find(
        &self,
        client: &kube::Client,
        max_age: Duration,
        group: &str,
        by: &Served,
    ) -> (Option<ApiResource>, Option<String>) {
        let mut latest = self.latest.lock().await;
        if latest.tried.is_none_or(|t| t.elapsed() >= max_age) {
            latest.tried = Some(Instant::now());
            // Boxed: fetching is kilobytes of state that every lookup's future would carry.
            match Box::pin(fetch(client)).await {
                Ok(d) => {
                    latest.document = Some(Arc::new(d));
                    latest.found.clear();
                    latest.error = None;
                }
                Err(e) => latest.error = Some(e.to_string()),
            }
        }
        let key = (group.to_string(), by.clone());
        if let Some(found) = latest.found.get(&key) {
            return (Some(found.clone()), latest.error.clone());
        }
        let found = latest.document.as_deref().and_then(|d| find(d, group, by));
        if let Some(found) = &found {
            latest.found.insert(key, found.clone());
        }
        (found, latest.error.clone())
    }
}

/// The whole document: aggregated discovery (GA since Kubernetes 1.30), or, from an API server
/// without it, one request per group version.
async fn fetch(client: &kube::Client) -> Result<Discovery, kube::Error> {
    let document = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(error = %e, "no aggregated discovery; discovering group by group");
            Discovery::new(client.clone()).run().await?
        }
    };
    // Every API server serves the core group (namespaces, pods): a document without it is not
    // discovery (a proxy's or a broken server's answer parsed into an empty list), and reading
    // it as one would call every kind "not served", a definite answer nothing backs.
    if !document.has_group("") {
        return Err(kube::Error::Discovery(
            kube::error::DiscoveryError::MissingApiGroup(
                "the discovery document has no core group (\"\"/v1)".into(),
            ),
        ));
    }
    Ok(document)
}

fn find(document: &Discovery, group: &str, by: &Served) -> Option<ApiResource> {
    let g = document.get(group)?;
    match by {
        Served::Kind(k) => g.recommended_kind(k).map(|(ar, _)| ar),
        Served::Plural(p) => g
            .recommended_resources()
            .into_iter()
            .map(|(ar, _)| ar)
            .find(|ar| &ar.plural == p),
    }
}

impl Cache {
    /// The plural under which the API server serves `kind` in `group` (for resources named by
    /// kind, as Argo CD lists them in an Application's status).
    pub(crate) async fn plural_of(&self, group: &str, kind: &str) -> Result<String, CacheError> {
        let what = format!("kind {kind} in group {group:?}");
        let found = self
            .served(group, Served::Kind(kind.to_string()), what)
            .await?;
        Ok(found.plural)
    }

    /// Whether the API server serves `kind` at all.
    pub(crate) async fn resolve(&self, kind: &GroupResource) -> Result<(), CacheError> {
        self.discover(kind).await.map(|_| ())
    }

    /// Resolve `kind` to the served version.
    pub(crate) async fn discover(&self, kind: &GroupResource) -> Result<ApiResource, CacheError> {
        let plural = Served::Plural(kind.plural.to_string());
        self.served(&kind.group, plural, kind.to_string()).await
    }

    /// One resource of `group`, by plural or by kind, from the cluster's discovery document.
    pub(super) async fn served(
        &self,
        group: &str,
        by: Served,
        what: String,
    ) -> Result<ApiResource, CacheError> {
        let client = &self.client;
        if let (Some(found), _) = self.catalog.find(client, DISCOVERY_TTL, group, &by).await {
            return Ok(found);
        }
        let found = self
            .catalog
            .find(client, DISCOVERY_MISS_TTL, group, &by)
            .await;
        match found {
            (Some(found), _) => Ok(found),
            (None, None) => Err(CacheError::NotInstalled(what)),
            (None, Some(error)) => Err(CacheError::Discovery { what, error }),
        }
    }
}
