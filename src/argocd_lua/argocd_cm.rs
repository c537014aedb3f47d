//! argocd-cm, followed live: its health customizations replace the previous ones as soon as
//! the ConfigMap changes, with no restart (Argo CD's settings manager reloads the same way).
//! One watch, on that one name, so RBAC grants `get`/`list`/`watch` on it alone.

use super::LuaHealth;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;

/// Argo CD reads its settings from this ConfigMap in its own namespace.
pub const ARGOCD_CM: &str = "argocd-cm";

/// Follow `namespace`/argocd-cm until the process ends. A ConfigMap that is gone (or absent
/// after a relist) leaves no customization behind.
pub async fn follow(client: kube::Client, namespace: String, lua: Arc<LuaHealth>) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={ARGOCD_CM}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut listed = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed = false,
            Ok(watcher::Event::InitApply(cm)) | Ok(watcher::Event::Apply(cm)) => {
                listed = true;
                lua.set_argocd_cm(cm.data.as_ref());
                tracing::info!(namespace, "argocd-cm health customizations read");
            }
            Ok(watcher::Event::InitDone) if !listed => lua.set_argocd_cm(None),
            Ok(watcher::Event::InitDone) => {}
            Ok(watcher::Event::Delete(_)) => lua.set_argocd_cm(None),
            Err(e) => tracing::warn!(
                namespace,
                "watching {ARGOCD_CM} (its health scripts judge kinds without a check): {e}"
            ),
        }
    }
}
