use super::*;
use crate::cache::Change;
use crate::checks::cockroach::Readiness;
use crate::deps::DepIndex;
use crate::resource::CheckKind;
use serde_json::json;
use std::sync::Mutex;

fn change(kind: GroupResource, ns: &str, name: &str) -> Change {
    Change {
        kind,
        namespace: ns.into(),
        name: name.into(),
    }
}

/// What `resource` judges of `ns/forgejo` with its defaults, as annotation mode asks.
fn reads_of(resource: CheckKind, ns: &str) -> Vec<Dep> {
    reads(&Check::defaults(resource), ns, "forgejo")
}

#[test]
fn a_pod_change_reaches_gates_with_service_checks_in_that_namespace_only() {
    let mut idx = DepIndex::default();
    idx.set("a", reads_of(CheckKind::SERVICE, "cicd"));
    idx.set("b", reads_of(CheckKind::SERVICE, "prod"));
    assert_eq!(
        idx.affected(&change(GroupResource::PODS, "cicd", "forgejo-7d9c")),
        vec!["a"]
    );
    assert_eq!(
        idx.affected(&change(GroupResource::SERVICES, "prod", "forgejo")),
        vec!["b"]
    );
    assert!(
        idx.affected(&change(GroupResource::SERVICES, "prod", "other"))
            .is_empty()
    );
    idx.remove(&"a");
    assert!(
        idx.affected(&change(GroupResource::PODS, "cicd", "x"))
            .is_empty()
    );
}

#[test]
fn a_database_change_reaches_its_gate_and_so_does_its_cluster() {
    let mut idx = DepIndex::default();
    idx.set("g", reads_of(CheckKind::CNPG_DATABASE, "ddb"));
    assert_eq!(
        idx.affected(&change(CheckKind::CNPG_DATABASE.kind(), "ddb", "forgejo")),
        vec!["g"]
    );
    assert_eq!(
        idx.affected(&change(cnpg::CLUSTERS, "ddb", "pg")),
        vec!["g"]
    );
}

#[test]
fn a_role_change_reaches_its_gate_but_a_database_of_the_same_name_does_not() {
    let mut idx = DepIndex::default();
    idx.set("g", reads_of(CheckKind::CNPG_DATABASE_ROLE, "ddb"));
    assert_eq!(
        idx.affected(&change(
            CheckKind::CNPG_DATABASE_ROLE.kind(),
            "ddb",
            "forgejo"
        )),
        vec!["g"]
    );
    assert!(
        idx.affected(&change(CheckKind::CNPG_DATABASE.kind(), "ddb", "forgejo"))
            .is_empty()
    );
    assert_eq!(
        idx.affected(&change(cnpg::CLUSTERS, "ddb", "pg")),
        vec!["g"]
    );
}

/// A cache that answers every read with an object shaped to take the gather down its longest
/// path (a Database naming its Cluster, a CrdbCluster of either operator), and records each read
/// as the dependency it is.
struct Recording {
    /// The CrdbCluster has `spec.regions` (the current operator) rather than `spec.nodes`.
    regions: bool,
    read: Mutex<Vec<Dep>>,
}

impl Recording {
    fn new(regions: bool) -> Recording {
        Recording {
            regions,
            read: Mutex::default(),
        }
    }

    fn record(&self, dep: Dep) {
        self.read.lock().unwrap().push(dep);
    }
}

impl Reads for Recording {
    async fn object(
        &self,
        kind: &GroupResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Value>>, CacheError> {
        self.record(Dep::object(kind.clone(), namespace, name));
        let spec = if self.regions {
            json!({"cluster": {"name": "pg"}, "regions": [{"code": "eu", "nodes": 3}]})
        } else {
            json!({"cluster": {"name": "pg"}, "nodes": 3})
        };
        Ok(Some(Arc::new(json!({
            "metadata": {"name": name, "namespace": namespace, "uid": "u1", "generation": 1},
            "spec": spec,
        }))))
    }

    async fn objects(
        &self,
        kind: &GroupResource,
        namespace: &str,
    ) -> Result<Vec<Arc<Value>>, CacheError> {
        self.record(Dep::namespace(kind.clone(), namespace));
        Ok(Vec::new())
    }

    async fn service(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<ServiceView>>, CacheError> {
        self.record(Dep::object(GroupResource::SERVICES, namespace, name));
        Ok(None)
    }

    async fn pods(&self, namespace: &str) -> Result<Vec<Arc<PodView>>, CacheError> {
        self.record(Dep::namespace(GroupResource::PODS, namespace));
        Ok(Vec::new())
    }

    async fn endpoint_slices(
        &self,
        namespace: &str,
        _service: &str,
    ) -> Result<Vec<Arc<SliceView>>, CacheError> {
        // Found by label, not by name: any slice of the namespace may be one of them.
        self.record(Dep::namespace(GroupResource::ENDPOINT_SLICES, namespace));
        Ok(Vec::new())
    }
}

struct NoAnswer;

impl Probes for NoAnswer {
    async fn probe(&self, _namespace: &str, _cluster: &str, target: &ProbeTarget) -> PodProbe {
        PodProbe::bare(&target.pod, Readiness::Unreachable("test".into()))
    }
}

/// Whether a change `declared` wakes for includes every change to what `read` read.
fn covers(declared: &[Dep], read: &Dep) -> bool {
    declared.iter().any(|d| match (d, read) {
        (a @ Dep::Object { .. }, b @ Dep::Object { .. }) => a == b,
        (
            Dep::Namespace { kind, namespace },
            Dep::Object {
                kind: k,
                namespace: n,
                ..
            }
            | Dep::Namespace {
                kind: k,
                namespace: n,
            },
        ) => kind == k && namespace == n,
        (Dep::Object { .. }, Dep::Namespace { .. }) => false,
    })
}

#[tokio::test]
async fn every_read_of_a_gather_is_declared() {
    // Credentials configured, so the CockroachDB gather also reads what proves membership.
    let config = EvalConfig {
        crdb_credentials: Some(Credentials {
            username: "u".into(),
            password: "p".into(),
        }),
        ..EvalConfig::default()
    };
    let generic = CheckKind::parse("deployments.apps").unwrap();
    let kinds = CheckKind::dedicated_kinds().chain([generic]);
    let mut checked = 0;
    for resource in kinds {
        for regions in [false, true] {
            let check = Check::defaults(resource.clone());
            let ask = format!("{resource} ns/forgejo");
            let cache = Recording::new(regions);
            let from = Sources {
                cache: &cache,
                probes: &NoAnswer,
                config: &config,
            };
            let found = gather(&check, "ns", "forgejo", &from).await.unwrap();
            if let Some(spec) = resource.spec() {
                assert_eq!(
                    found.grace > Duration::ZERO,
                    spec.grace,
                    "{ask}: the registry's grace flag against the grace its gather gives"
                );
            }
            let declared = reads(&check, "ns", "forgejo");
            let read = cache.read.into_inner().unwrap();
            assert!(!read.is_empty(), "{ask}: the gather read nothing");
            let undeclared: Vec<_> = read.iter().filter(|r| !covers(&declared, r)).collect();
            assert!(
                undeclared.is_empty(),
                "{ask} reads {undeclared:?}, which its kind's reads() does not declare \
                 (declared: {declared:?}): a change there would wake nobody"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * (CheckKind::dedicated_kinds().count() + 1));
}

#[test]
fn coverage_is_by_object_or_by_namespace() {
    let pods = Dep::namespace(GroupResource::PODS, "a");
    let pod = Dep::object(GroupResource::PODS, "a", "p");
    assert!(covers(std::slice::from_ref(&pods), &pod));
    assert!(covers(std::slice::from_ref(&pods), &pods));
    assert!(!covers(std::slice::from_ref(&pod), &pods));
    assert!(!covers(&[Dep::namespace(GroupResource::PODS, "b")], &pod));
    assert!(!covers(&[Dep::object(GroupResource::PODS, "a", "q")], &pod));
}

/// A registry row without a contract would be judged by the generic rule, and a contract
/// without a row could never be asked for: each row has exactly one, in the registry's order.
#[test]
fn every_registered_kind_has_one_contract() {
    let registered: Vec<&KindSpec> = crate::resource::registry::KINDS.iter().collect();
    assert_eq!(IMPLEMENTED, registered.as_slice());
    for kind in CheckKind::dedicated_kinds() {
        let check = Check::defaults(kind.clone());
        assert!(!matches!(check, Check::Generic { .. }), "{kind}");
        assert_eq!(check.resource(), kind);
        let empty = std::collections::HashMap::new();
        assert_eq!(Check::from_query(kind.clone(), Query(&empty)), Ok(check));
    }
}
