//! Core `Service`: judged by its selector, the pods it matches and its EndpointSlices
//! (`checks::service`; fixtures in `tests/fixtures/service/`).

use super::{
    Check, DedicatedKind, Found, GateEntry, NAME, NAMESPACE, Probes, Reads, Sources, namespace_or,
};
use crate::cache::CacheError;
use crate::checks::service::{self, Params};
use crate::deps::Dep;
use crate::resource::registry::{self, KindSpec};
use crate::resource::{CheckKind, GroupResource, InputError, Query, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// A WaveGate's `service:` entry (no doc comment: its kind's `ABOUT` describes the field).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceCheck {
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub name: String,
    /// Defaults to the gate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE))]
    pub namespace: Option<String>,
    /// Ready endpoints required (default 1; 0 means "the Service exists", e.g. a headless join
    /// Service before its pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("format" = "int32"))]
    pub min_ready: Option<u32>,
}

impl GateEntry for ServiceCheck {
    fn ask(&self, _: &str, _: &str, gate_namespace: &str) -> Result<(Target, Check), InputError> {
        let ns = namespace_or(&self.namespace, gate_namespace);
        let target = Target::new(CheckKind::SERVICE, &ns, &self.name)?;
        Ok((target, Check::Service(Params::new(self.min_ready))))
    }
}

/// The Service check kind.
pub(crate) struct Service;

impl DedicatedKind for Service {
    const SPEC: &'static KindSpec = &registry::SERVICE;
    const PARAMS: &'static [&'static str] = Params::NAMES;
    type Params = Params;
    const ABOUT: &'static str =
        "A Service has ready endpoints behind a selector that matches pods.";

    fn params(q: &Query) -> Result<Params, InputError> {
        Params::from_query(q)
    }

    /// The Service, every pod of its namespace and its EndpointSlices, whose names the check
    /// does not know in advance.
    fn reads(namespace: &str, name: &str) -> Vec<Dep> {
        vec![
            Dep::object(GroupResource::SERVICES, namespace, name),
            Dep::namespace(GroupResource::PODS, namespace),
            Dep::namespace(GroupResource::ENDPOINT_SLICES, namespace),
        ]
    }

    async fn gather<R: Reads, P: Probes>(
        from: &Sources<'_, R, P>,
        namespace: &str,
        name: &str,
        params: &Params,
    ) -> Result<Found, CacheError> {
        gather(from, namespace, name, params).await
    }
}

async fn gather<R: Reads, P>(
    from: &Sources<'_, R, P>,
    namespace: &str,
    name: &str,
    params: &Params,
) -> Result<Found, CacheError> {
    let c = from.cache;
    let svc = c.service(namespace, name).await?;
    let pods = c.pods(namespace).await?;
    let slices = c.endpoint_slices(namespace, name).await?;
    let f = service::check(namespace, name, svc.as_deref(), &pods, &slices, params);
    // A Service has no metadata.generation: its spec is its selector.
    let selector = svc.as_deref().map(|s| {
        let text: Vec<String> = s
            .selector
            .iter()
            .flat_map(|l| l.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        text.join(",")
    });
    let identity = svc.as_deref().zip(selector.as_ref()).map(|(s, text)| {
        let uid = s.uid.as_ref().map(ToString::to_string).unwrap_or_default();
        format!("{uid}@{}@{text}", s.generation.unwrap_or(0))
    });
    Ok(Found {
        judged_selector: selector,
        judged_state: svc.as_deref().map(service::judged_spec),
        ..Found::seen(f, from.config.selector_grace, identity)
    })
}
