//! Check kinds, one module each, the way Argo CD keeps everything about a kind in
//! `resource_customizations/<group>/<Kind>/`. A kind's module implements [`DedicatedKind`]: its
//! row of the registry (`resource::registry`, where everything other layers need to know about
//! it lives), what its check reads from the cache (so a change to any of it wakes whoever waits
//! on the verdict), and how it gathers those reads into the snapshot its pure check judges (the
//! check itself is `checks::<kind>`, with its parameters). Its WaveGate entry type, named beside
//! it in `check_kinds!`, turns an entry into a [`Check`] ([`GateEntry`]) and is the schema of
//! the entry's field in the CRD. Its fixtures sit in `tests/fixtures/<kind>/`. The
//! `check_kinds!` list below is the one place the impls are collected; `docs/extending.md` says
//! how to add one.
//!
//! A kind reads the cache through [`Reads`] only, so a test can run each kind's gather against
//! a cache that records what it was asked, and fail when a read is missing from the kind's
//! declared reads (a read nobody is woken for).

pub(crate) mod application;
pub(crate) mod cnpg;
pub(crate) mod cockroach;
pub(crate) mod generic;
pub(crate) mod service;

use crate::cache::{Cache, CacheError};
use crate::checks;
use crate::checks::cockroach::{PodProbe, ProbeTarget};
use crate::deps::Dep;
use crate::health::Finding;
use crate::json::At;
use crate::probe::{self, Credentials};
use crate::resource::registry::{GENERIC_ENTRY, KindSpec};
use crate::resource::{CheckKind, GroupResource, InputError, Query, Target};
use crate::views::{PodView, ServiceView, SliceView};
use schemars::{Schema, SchemaGenerator};
use serde::Serialize;
use serde::de::{IgnoredAny, MapAccess};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A dedicated check kind's contract with the rest of wavegate, implemented once in each
/// `kinds/<kind>.rs`: [`Check`] and its dispatch ([`reads`], [`gather`], parsing) are built
/// from these impls by `check_kinds!` below, so no code matches over the kinds by hand.
pub(crate) trait DedicatedKind {
    /// Its row of the registry.
    const SPEC: &'static KindSpec;
    /// The parameters a caller may pass (`?minReady=1`); any other is refused.
    const PARAMS: &'static [&'static str];
    /// Its check's parameters.
    type Params: Default;
    /// What its entry asks, in one sentence: the field's description in `kubectl explain`.
    const ABOUT: &'static str;

    /// The parameters from a caller's query (names already checked against `PARAMS`).
    fn params(q: &Query) -> Result<Self::Params, InputError>;

    /// What [`DedicatedKind::gather`] reads from the cache for `namespace/name`.
    fn reads(namespace: &str, name: &str) -> Vec<Dep>;

    /// Read what the check judges of `namespace/name` and run it.
    fn gather<R: Reads, P: Probes>(
        from: &Sources<'_, R, P>,
        namespace: &str,
        name: &str,
        params: &Self::Params,
    ) -> impl Future<Output = Result<Found, CacheError>> + Send;
}

/// [`Check`] and the WaveGate check's [`Entry`], each with a variant per dedicated kind, and
/// their dispatch to each kind's [`DedicatedKind`] impl and entry type.
macro_rules! check_kinds {
    ($($variant:ident($kind:ty, $entry:ty)),+ $(,)?) => {
        /// A check and its parameters.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub(crate) enum Check {
            $($variant(<$kind as DedicatedKind>::Params),)+
            /// Any other kind: Argo CD's rule for built-in kinds, kstatus for the rest, plus
            /// the caller's expressions.
            Generic {
                group: String,
                plural: String,
                rule: checks::generic::Rule,
            },
        }

        /// One entry of a WaveGate check: a dedicated kind's, under its registry row's `entry`
        /// field, or the generic one.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Entry {
            $($variant($entry),)+
            Generic(generic::ResourceCheck),
        }

        impl Entry {
            /// Its field in the check.
            pub(crate) fn field(&self) -> &'static str {
                match self {
                    $(Entry::$variant(_) => <$kind as DedicatedKind>::SPEC.entry,)+
                    Entry::Generic(_) => GENERIC_ENTRY,
                }
            }

            /// What asks its check.
            pub(crate) fn gate_entry(&self) -> &dyn GateEntry {
                match self {
                    $(Entry::$variant(e) => e,)+
                    Entry::Generic(e) => e,
                }
            }

            /// The entry under `field`, its value read from `map`; `None` (the value skipped)
            /// when `field` is no entry, or its value is `null`: the CRD makes every entry
            /// nullable and CEL counts a null field as absent (`has()` is false), so the API
            /// server admits `service: null` beside the one real entry (a Helm `toYaml` of an
            /// unset value), and it must not make the whole gate unreadable.
            pub(crate) fn read<'de, A: MapAccess<'de>>(
                field: &str,
                map: &mut A,
            ) -> Result<Option<Entry>, A::Error> {
                $(if field == <$kind as DedicatedKind>::SPEC.entry {
                    return map.next_value::<Option<$entry>>().map(|e| e.map(Entry::$variant));
                })+
                if field == GENERIC_ENTRY {
                    return map
                        .next_value::<Option<generic::ResourceCheck>>()
                        .map(|e| e.map(Entry::Generic));
                }
                map.next_value::<IgnoredAny>().map(|_| None)
            }

            /// Each entry field with its schema, as the CRD shows them: optional, described.
            pub(crate) fn schemas(g: &mut SchemaGenerator) -> Vec<(&'static str, Schema)> {
                fn described(mut schema: Schema, about: &str) -> Schema {
                    schema.insert("description".into(), about.into());
                    schema
                }
                vec![
                    $((
                        <$kind as DedicatedKind>::SPEC.entry,
                        described(
                            g.subschema_for::<Option<$entry>>(),
                            <$kind as DedicatedKind>::ABOUT,
                        ),
                    ),)+
                    (
                        GENERIC_ENTRY,
                        described(
                            g.subschema_for::<Option<generic::ResourceCheck>>(),
                            generic::ABOUT,
                        ),
                    ),
                ]
            }
        }

        impl Serialize for Entry {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(Entry::$variant(e) => e.serialize(s),)+
                    Entry::Generic(e) => e.serialize(s),
                }
            }
        }

        /// The registry rows [`Check`] has a variant for, in its order.
        #[cfg(test)]
        pub(crate) const IMPLEMENTED: &[&KindSpec] = &[$(<$kind as DedicatedKind>::SPEC),+];

        impl Check {
            /// The check `resource` gets from a caller's parameters; a parameter it does not
            /// take is refused, so a typo never silently weakens a check.
            pub(crate) fn from_query(resource: CheckKind, q: Query) -> Result<Check, InputError> {
                if let CheckKind::Dedicated(spec) = &resource {
                    $(if *spec == <$kind as DedicatedKind>::SPEC {
                        q.only(&resource, <$kind as DedicatedKind>::PARAMS)?;
                        return Ok(Check::$variant(<$kind as DedicatedKind>::params(&q)?));
                    })+
                }
                // The generic rule, also for a registry row without a contract (which
                // `every_registered_kind_has_one_contract` forbids).
                let (group, plural) = resource.group_plural();
                q.only(&resource, checks::generic::Rule::NAMES)?;
                Ok(Check::Generic {
                    group: group.to_string(),
                    plural: plural.to_string(),
                    rule: checks::generic::Rule::from_query(&q)?,
                })
            }

            /// The check `resource` gets with every parameter at its default.
            pub(crate) fn defaults(resource: CheckKind) -> Check {
                if let CheckKind::Dedicated(spec) = &resource {
                    $(if *spec == <$kind as DedicatedKind>::SPEC {
                        return Check::$variant(Default::default());
                    })+
                }
                let (group, plural) = resource.group_plural();
                Check::Generic {
                    group: group.to_string(),
                    plural: plural.to_string(),
                    rule: checks::generic::Rule::default(),
                }
            }

            /// The kind this check judges.
            pub(crate) fn resource(&self) -> CheckKind {
                match self {
                    $(Check::$variant(_) => CheckKind::Dedicated(<$kind as DedicatedKind>::SPEC),)+
                    Check::Generic { group, plural, .. } => CheckKind::Generic {
                        group: group.clone(),
                        plural: plural.clone(),
                    },
                }
            }
        }

        /// What [`gather`] reads from the cache for `check` of `namespace/name`, so that a
        /// change to any of it wakes whatever waits on the verdict (the gate controller,
        /// annotation mode). The test `every_read_of_a_gather_is_declared` runs each kind's
        /// gather against a recording cache and fails on a read missing here.
        pub(crate) fn reads(check: &Check, namespace: &str, name: &str) -> Vec<Dep> {
            match check {
                $(Check::$variant(_) => <$kind as DedicatedKind>::reads(namespace, name),)+
                Check::Generic { group, plural, .. } => {
                    generic::reads(group, plural, namespace, name)
                }
            }
        }

        /// Read what `check` judges of `namespace/name` and run it.
        pub(crate) async fn gather<R: Reads, P: Probes>(
            check: &Check,
            namespace: &str,
            name: &str,
            from: &Sources<'_, R, P>,
        ) -> Result<Found, CacheError> {
            match check {
                $(Check::$variant(params) => {
                    <$kind as DedicatedKind>::gather(from, namespace, name, params).await
                })+
                Check::Generic {
                    group,
                    plural,
                    rule,
                } => generic::gather(from, group, plural, namespace, name, rule).await,
            }
        }
    };
}

check_kinds! {
    Service(service::Service, service::ServiceCheck),
    CnpgDatabase(cnpg::Database, cnpg::CnpgCheck),
    CnpgDatabaseRole(cnpg::DatabaseRole, cnpg::CnpgCheck),
    CrdbCluster(cockroach::CrdbCluster, cockroach::CockroachClusterCheck),
    Application(application::Application, application::ApplicationCheck),
}

/// Tunables of evaluation, set from `wavegate serve` flags.
#[derive(Debug, Clone)]
pub struct EvalConfig {
    pub verdict_ttl: Duration,
    pub probe_ttl: Duration,
    pub probe_timeout: Duration,
    /// How long a selector may match no pods while near-matching pods exist before Degraded.
    pub selector_grace: Duration,
    /// How long CNPG may report `applied: false` before Degraded (CNPG retries every 30 s).
    pub cnpg_grace: Duration,
    /// How long ready CockroachDB pods may see fewer live nodes than expected before Degraded.
    pub crdb_grace: Duration,
    pub crdb_scheme: probe::Scheme,
    pub crdb_tls: probe::TlsSettings,
    pub crdb_credentials: Option<Credentials>,
    /// When set, only these CrdbClusters (`(namespace, name)`) receive `crdb_credentials`.
    pub crdb_credentials_for: Option<std::collections::BTreeSet<(String, String)>>,
    /// When set, CockroachDB checks send no probe and are Unknown with this reason: a remote
    /// cluster's pod IPs are not wavegate's network to reach (an overlapping pod CIDR would
    /// answer from a home pod, and receive the DB Console credentials).
    pub probes_refused: Option<String>,
    /// Argo CD's health scripts (argocd-cm and the release's bundled ones) for kinds without a
    /// dedicated check; `None`: built-in rules and kstatus only.
    pub argocd_lua: Option<Arc<crate::argocd_lua::LuaHealth>>,
    /// How long a health script's Degraded must last before a gate takes it as definite.
    pub argocd_lua_grace: Duration,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            verdict_ttl: Duration::from_millis(50),
            probe_ttl: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(2),
            selector_grace: Duration::from_secs(60),
            cnpg_grace: Duration::from_secs(90),
            crdb_grace: Duration::from_secs(60),
            crdb_scheme: probe::Scheme::Http,
            crdb_tls: probe::TlsSettings::default(),
            crdb_credentials: None,
            crdb_credentials_for: None,
            probes_refused: None,
            argocd_lua: None,
            argocd_lua_grace: Duration::from_secs(90),
        }
    }
}

/// The cache as a kind's gather reads it: the watch cache ([`Cache`]) in service, a recording
/// double in tests.
pub(crate) trait Reads: Sync {
    /// One object of any kind, as JSON (`None` when it does not exist), shared with the
    /// cache: reading it copies nothing.
    fn object(
        &self,
        kind: &GroupResource,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Arc<Value>>, CacheError>> + Send;
    /// All objects of a kind in one namespace.
    fn objects(
        &self,
        kind: &GroupResource,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<Arc<Value>>, CacheError>> + Send;
    fn service(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Arc<ServiceView>>, CacheError>> + Send;
    fn pods(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<Arc<PodView>>, CacheError>> + Send;
    /// The EndpointSlices of Service `namespace/service`.
    fn endpoint_slices(
        &self,
        namespace: &str,
        service: &str,
    ) -> impl Future<Output = Result<Vec<Arc<SliceView>>, CacheError>> + Send;
}

impl Reads for Cache {
    fn object(
        &self,
        kind: &GroupResource,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Arc<Value>>, CacheError>> + Send {
        Cache::object(self, kind, namespace, name)
    }

    fn objects(
        &self,
        kind: &GroupResource,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<Arc<Value>>, CacheError>> + Send {
        Cache::objects(self, kind, Some(namespace))
    }

    fn service(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Arc<ServiceView>>, CacheError>> + Send {
        Cache::service(self, namespace, name)
    }

    fn pods(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<Arc<PodView>>, CacheError>> + Send {
        Cache::pods(self, namespace)
    }

    fn endpoint_slices(
        &self,
        namespace: &str,
        service: &str,
    ) -> impl Future<Output = Result<Vec<Arc<SliceView>>, CacheError>> + Send {
        Cache::endpoint_slices(self, namespace, service)
    }
}

/// CockroachDB pods' answers, probed and cached by the evaluator.
pub(crate) trait Probes: Sync {
    fn probe(
        &self,
        namespace: &str,
        cluster: &str,
        target: &ProbeTarget,
    ) -> impl Future<Output = PodProbe> + Send;
}

/// What a kind's gather may use: the cache, the probes and the evaluation settings.
pub(crate) struct Sources<'a, R, P> {
    pub cache: &'a R,
    pub probes: &'a P,
    pub config: &'a EvalConfig,
}

/// What a kind's gather concluded, with what the grace period of a persistent failure belongs
/// to.
pub(crate) struct Found {
    pub finding: Finding,
    pub grace: Duration,
    /// The judged object's UID and generation: a failure of another object under the same
    /// name, or of the same object at another spec, starts its own grace period.
    pub identity: String,
    pub blind: Option<String>,
    pub judged_selector: Option<String>,
    pub judged_state: Option<String>,
    /// Argo CD's own status and message, when one of its health scripts judged the object:
    /// kept beside the verdict whatever the grace makes of it.
    pub argo_status: Option<crate::argocd_lua::ArgoHealth>,
}

impl Found {
    pub(crate) fn seen(finding: Finding, grace: Duration, identity: Option<String>) -> Found {
        Found {
            finding,
            grace,
            identity: identity.unwrap_or_default(),
            blind: None,
            judged_selector: None,
            judged_state: None,
            argo_status: None,
        }
    }
}

/// UID and generation of a JSON object, as a grace period's identity.
fn json_identity(obj: &Value) -> String {
    format!(
        "{}@{}",
        obj.str_at("/metadata/uid").unwrap_or(""),
        obj.i64_at("/metadata/generation").unwrap_or(0)
    )
}

/// Object names in a WaveGate entry (RFC 1123 subdomain, Kubernetes' `IsDNS1123Subdomain`).
pub(crate) const NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Namespaces in a WaveGate entry (RFC 1123 label).
pub(crate) const NAMESPACE: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A WaveGate check entry of one kind (`service: {…}`, `cnpgDatabase: {…}`, …).
pub(crate) trait GateEntry {
    /// The object this entry points at and the check it asks for; `field` is the entry's
    /// field in the check (a kind's `KindSpec::entry`), `check` the check's name,
    /// `gate_namespace` fills an omitted `namespace`.
    fn ask(
        &self,
        field: &str,
        check: &str,
        gate_namespace: &str,
    ) -> Result<(Target, Check), InputError>;
}

/// The namespace an entry names, or the gate's.
fn namespace_or(namespace: &Option<String>, gate_namespace: &str) -> String {
    namespace
        .clone()
        .unwrap_or_else(|| gate_namespace.to_string())
}

#[cfg(test)]
mod tests;
