//! Argo CD `Application` (`argoproj.io`), for app-of-apps: Healthy, Synced to the revision its
//! spec asks for, and idle (`checks::application`, one rule with the shipped
//! `argoproj.io/Application/health.lua`; fixtures in `tests/fixtures/application/`).

use super::{
    Check, DedicatedKind, Found, GateEntry, NAME, NAMESPACE, Probes, Reads, Sources, namespace_or,
};
use crate::cache::CacheError;
use crate::checks::application;
use crate::deps::Dep;
use crate::resource::registry::{self, KindSpec};
use crate::resource::{CheckKind, InputError, Query, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

// A WaveGate's `application:` entry (no doc comment: its kind's `ABOUT` describes the field).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationCheck {
    #[schemars(length(min = 1, max = 253), regex(pattern = NAME))]
    pub name: String,
    /// Defaults to the gate's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE))]
    pub namespace: Option<String>,
}

impl GateEntry for ApplicationCheck {
    fn ask(&self, _: &str, _: &str, gate_namespace: &str) -> Result<(Target, Check), InputError> {
        let ns = namespace_or(&self.namespace, gate_namespace);
        let target = Target::new(CheckKind::APPLICATION, &ns, &self.name)?;
        Ok((target, Check::Application(())))
    }
}

/// The Application check kind; it takes no parameters.
pub(crate) struct Application;

impl DedicatedKind for Application {
    const SPEC: &'static KindSpec = &registry::APPLICATION;
    const PARAMS: &'static [&'static str] = &[];
    type Params = ();
    const ABOUT: &'static str =
        "An Argo CD Application is Healthy, Synced to the revision it asks for, and idle.";

    fn params(_: &Query) -> Result<(), InputError> {
        Ok(())
    }

    /// The Application alone: its status carries everything the check reads.
    fn reads(namespace: &str, name: &str) -> Vec<Dep> {
        vec![Dep::object(CheckKind::APPLICATION.kind(), namespace, name)]
    }

    async fn gather<R: Reads, P: Probes>(
        from: &Sources<'_, R, P>,
        namespace: &str,
        name: &str,
        _: &(),
    ) -> Result<Found, CacheError> {
        gather(from, namespace, name).await
    }
}

async fn gather<R: Reads, P>(
    from: &Sources<'_, R, P>,
    namespace: &str,
    name: &str,
) -> Result<Found, CacheError> {
    let app = from
        .cache
        .object(&CheckKind::APPLICATION.kind(), namespace, name)
        .await?;
    let v = application::check(namespace, name, app.as_deref());
    Ok(Found {
        judged_state: app.as_deref().map(application::judged_state),
        ..Found::seen(v.into(), Duration::ZERO, None)
    })
}
