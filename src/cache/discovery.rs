//! Discovery: which resource, at which version, the API server serves for a group and plural
//! (or kind), with answers kept for a while and concurrent look-ups coalesced.

use super::{Cache, CacheError};
use crate::resource::Kind;
use kube::api::ApiResource;
use std::time::{Duration, Instant};

/// How long positive and negative discovery answers are kept. A CRD installed later is picked
/// up within the negative TTL.
pub(super) const DISCOVERY_TTL: Duration = Duration::from_secs(300);
pub(super) const DISCOVERY_MISS_TTL: Duration = Duration::from_secs(10);

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
    pub(crate) async fn resolve(&self, kind: &Kind) -> Result<(), CacheError> {
        self.discover(kind).await.map(|_| ())
    }

    /// Resolve `kind` to the served version.
    pub(crate) async fn discover(&self, kind: &Kind) -> Result<ApiResource, CacheError> {
        let plural = Served::Plural(kind.plural.to_string());
        self.served(&kind.group, plural, kind.to_string()).await
    }

    /// Discovery of one resource of `group`, by plural or by kind, coalescing concurrent
    /// look-ups and keeping answers for the discovery TTLs.
    pub(super) async fn served(
        &self,
        group: &str,
        by: Served,
        what: String,
    ) -> Result<ApiResource, CacheError> {
        let client = self.client.clone();
        let g = group.to_string();
        self.discovered
            .get_with((g.clone(), by.clone()), async move {
                match kube::discovery::group(&client, &g).await {
                    Ok(api_group) => match &by {
                        Served::Kind(k) => api_group.recommended_kind(k).map(|(ar, _)| ar),
                        Served::Plural(p) => api_group
                            .recommended_resources()
                            .into_iter()
                            .map(|(ar, _)| ar)
                            .find(|ar| &ar.plural == p),
                    }
                    .ok_or(CacheError::NotInstalled(what)),
                    Err(kube::Error::Discovery(_)) => Err(CacheError::NotInstalled(what)),
                    Err(e) => Err(CacheError::Discovery {
                        what,
                        error: e.to_string(),
                    }),
                }
            })
            .await
    }
}
/// How a discovery look-up names the resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Served {
    Plural(String),
    Kind(String),
}

pub(super) struct DiscoveryExpiry;

impl moka::Expiry<(String, Served), Result<ApiResource, CacheError>> for DiscoveryExpiry {
    fn expire_after_create(
        &self,
        _key: &(String, Served),
        value: &Result<ApiResource, CacheError>,
        _now: Instant,
    ) -> Option<Duration> {
        Some(if value.is_ok() {
            DISCOVERY_TTL
        } else {
            DISCOVERY_MISS_TTL
        })
    }
}
