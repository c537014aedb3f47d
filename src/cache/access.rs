//! The access review: whether wavegate's ServiceAccount may list and watch a kind, asked before
//! a watch starts and kept for a while.

use super::watches::label_of;
use super::{Cache, CacheError};
use crate::resource::GroupResource;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};

/// How long an access review's answer is kept. A grant an administrator adds is picked up
/// within the denial TTL; a grant revoked while a watch runs shows at once as a failing watch.
pub(super) const ACCESS_TTL: Duration = Duration::from_secs(300);
pub(super) const ACCESS_DENIED_TTL: Duration = Duration::from_secs(30);

impl Cache {
    /// Whether wavegate may list and watch `plural.group` in `scope`, from a cached
    /// SelfSubjectAccessReview (authorization.k8s.io/v1; every authenticated user may create
    /// one, through the default `system:basic-user` ClusterRole). Asked before a watch starts:
    /// a watch RBAC forbids would only retry its 403 forever and never sync.
    pub(super) async fn authorize(
        &self,
        kind: &GroupResource,
        scope: &Option<String>,
    ) -> Result<(), CacheError> {
        let what = label_of(&kind.to_string(), scope);
        let (group, plural) = (kind.group.as_ref(), kind.plural.as_ref());
        let key = (
            group.to_string(),
            plural.to_string(),
            scope.clone().unwrap_or_default(),
        );
        let client = self.client.clone();
        let allowed = self
            .access
            .try_get_with(key, async move {
                let (list, watch) = futures::future::try_join(
                    access_review(&client, "list", group, plural, scope),
                    access_review(&client, "watch", group, plural, scope),
                )
                .await?;
                Ok::<_, kube::Error>(list && watch)
            })
            .await
            .map_err(|e| CacheError::AccessReview {
                what: what.clone(),
                error: e.to_string(),
            })?;
        if allowed {
            Ok(())
        } else {
            Err(CacheError::Forbidden { what })
        }
    }
}
pub(super) async fn access_review(
    client: &Client,
    verb: &str,
    group: &str,
    plural: &str,
    scope: &Option<String>,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_string()),
                resource: Some(plural.to_string()),
                verb: Some(verb.to_string()),
                namespace: scope.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

pub(super) struct AccessExpiry;

impl moka::Expiry<(String, String, String), bool> for AccessExpiry {
    fn expire_after_create(
        &self,
        _key: &(String, String, String),
        allowed: &bool,
        _now: Instant,
    ) -> Option<Duration> {
        Some(if *allowed {
            ACCESS_TTL
        } else {
            ACCESS_DENIED_TTL
        })
    }
}
