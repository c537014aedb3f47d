//! JSON stripping: what the cache keeps of a whole object is what the checks, views and the
//! timeline read, not its managed fields, last-applied annotation or sync history.

use super::APPLICATIONS;
use crate::app_status::Lists;
use crate::resource::GroupResource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::Resource as KubeResource;
use kube::api::DynamicObject;
use serde_json::Value;
use std::sync::Arc;

/// The one managedFields entry the cache keeps.
pub(crate) use crate::views::ARGOCD_MANAGER;

/// What objects of `kind` lose before they are stored.
pub(super) fn for_kind(kind: &GroupResource) -> fn(&mut DynamicObject) {
    if *kind == APPLICATIONS {
        strip_application
    } else if *kind == GroupResource::fixed("postgresql.cnpg.io", "databases")
        || *kind == GroupResource::fixed("postgresql.cnpg.io", "databaseroles")
    {
        strip_database
    } else {
        strip_meta
    }
}

/// How objects of a kind have their resource lists taken out of their JSON (their `data`:
/// what is not metadata) when they are stored, to be kept beside it.
pub(super) type Take = fn(&mut Value) -> Arc<Lists>;

/// Whether objects of `kind` keep their resource lists typed beside their JSON: Applications
/// do ([`crate::app_status`]). As JSON, the lists were nine tenths of a big Application's
/// stripped object.
pub(super) fn lists_taken_for(kind: &GroupResource) -> Option<Take> {
    (*kind == APPLICATIONS).then_some(take_lists as Take)
}

fn take_lists(data: &mut Value) -> Arc<Lists> {
    Arc::new(Lists::take(data))
}

/// Drop what no check reads: managed fields and the last-applied annotation are often larger
/// than the rest of the object together. Argo CD's own managedFields entry stays, without its
/// field set: its `time` is when Argo CD last changed the object (the waves timeline, see
/// `timeline`).
pub(super) fn strip_meta<K: KubeResource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = meta
        .managed_fields
        .take()
        .map(|entries| {
            entries
                .into_iter()
                .filter(|f| f.manager.as_deref() == Some(ARGOCD_MANAGER))
                .map(|f| ManagedFieldsEntry {
                    fields_v1: None,
                    ..f
                })
                .collect::<Vec<_>>()
        })
        .filter(|kept| !kept.is_empty());
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A CNPG Database (and DatabaseRole, judged alike) keeps, besides, when its status was last
/// written (the newest entry of the `status` subresource, without its field set): a status
/// older than its Cluster is about a Cluster that is gone (`checks::cnpg`).
pub(super) fn strip_database(o: &mut DynamicObject) {
    let written = o
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .max_by_key(|f| f.time.as_ref().map(|t| t.0))
        .map(|f| ManagedFieldsEntry {
            fields_v1: None,
            ..f.clone()
        });
    strip_meta(o);
    if let Some(written) = written {
        o.metadata
            .managed_fields
            .get_or_insert_with(Vec::new)
            .push(written);
    }
}

/// An Argo CD Application also loses its sync history (up to ten past syncs, each with its
/// full source), and the per-resource results of its last sync keep only which resource and
/// how it went: the Application check reads the operation's phase and message and the
/// comparison, the waves view `status.resources`, the timeline which resources the sync reached,
/// notices which WaveGate the sync still waits for (`hookPhase: Running`).
pub(super) fn strip_application(o: &mut DynamicObject) {
    strip_meta(o);
    if let Some(status) = o.data.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("history");
        if let Some(results) = status
            .get_mut("operationState")
            .and_then(|s| s.pointer_mut("/syncResult/resources"))
            .and_then(Value::as_array_mut)
        {
            for r in results.iter_mut().filter_map(Value::as_object_mut) {
                r.retain(|k, _| {
                    matches!(
                        k.as_str(),
                        "group"
                            | "kind"
                            | "namespace"
                            | "name"
                            | "status"
                            | "hookType"
                            | "hookPhase"
                    )
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    pub(super) fn an_application_keeps_what_checks_read_and_loses_its_history() {
        let mut app: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd",
                         "managedFields": [
                             {"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-01T02:00:00Z",
                              "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
                             {"manager": "argocd-controller", "operation": "Apply", "time": "2026-12-01T03:00:00Z",
                              "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                         "wavegate.dev/annotate": "true"}},
            "spec": {"source": {"repoURL": "https://example.invalid/repo"}},
            "status": {"history": [{"id": 1}],
                       "resources": [{"kind": "Service", "name": "web"}],
                       "sync": {"status": "Synced"},
                       "operationState": {"phase": "Succeeded",
                                          "syncResult": {"revision": "abc", "resources": [
                                              {"group": "", "version": "v1", "kind": "Service", "namespace": "shop", "name": "web",
                                               "status": "Synced", "message": "service/web configured", "syncPhase": "Sync", "hookPhase": "Succeeded",
                                               "images": ["registry.example/web:1"]}]}}}
        }))
        .unwrap();
        strip_application(&mut app);
        let v = serde_json::to_value(&app).unwrap();
        // Argo CD's entry stays for the timeline, without its field set.
        assert_eq!(
            v["metadata"]["managedFields"],
            json!([{"manager": "argocd-controller", "operation": "Apply",
                    "time": "2026-12-01T03:00:00Z", "fieldsType": "FieldsV1"}])
        );
        assert_eq!(
            v["metadata"]["annotations"],
            json!({"wavegate.dev/annotate": "true"})
        );
        assert!(v["status"].get("history").is_none());
        assert_eq!(
            v["status"]["operationState"],
            json!({"phase": "Succeeded", "syncResult": {"revision": "abc", "resources": [
                {"group": "", "kind": "Service", "namespace": "shop", "name": "web", "status": "Synced", "hookPhase": "Succeeded"}]}})
        );
        assert_eq!(v["status"]["resources"][0]["name"], "web");
        assert_eq!(v["status"]["sync"]["status"], "Synced");
    }
}
