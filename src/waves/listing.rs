//! An Application's `status.resources`, parsed once per version of it. The waves view and its
//! live lint read that list at every poll (the UI extension asks every 5 s per open tab, the
//! dashboard every 2 s); a big Application lists thousands of resources, and between two polls
//! the list rarely changes. A listing is kept by the Application's UID and resourceVersion,
//! which the API server changes with every write of the object; one without either (never
//! from the API server) is parsed at every read.

use super::{Managed, managed_resources};
use crate::app_status::App;
use crate::json::At;
use crate::live_lint::{Listed, lint_resources};
use crate::locks::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Applications whose listing is kept, one version each; past this all are dropped (their
/// number is the cluster's to choose). Process-wide, as the Applications' UIDs are.
const MAX_KEPT: usize = 4096;

/// What an Application lists, as the waves view and its live lint read it.
pub(crate) struct Listing {
    /// What the waves judge, hooks left out ([`managed_resources`]).
    pub managed: Vec<Managed>,
    /// What live lint sees, hooks in ([`lint_resources`]).
    pub linted: Vec<Listed>,
}

/// The listings kept, by UID: the resourceVersion each was parsed at, and the listing.
type KeptListings = HashMap<String, (String, Arc<Listing>)>;

fn kept() -> &'static Mutex<KeptListings> {
    static KEPT: OnceLock<Mutex<KeptListings>> = OnceLock::new();
    KEPT.get_or_init(Mutex::default)
}

/// The listing of `app`, parsed once per version.
pub(crate) fn of(app: &App) -> Arc<Listing> {
    let parse = || {
        Arc::new(Listing {
            managed: managed_resources(app),
            linted: lint_resources(app),
        })
    };
    let uid = app.str_at("/metadata/uid").unwrap_or("");
    let version = app.str_at("/metadata/resourceVersion").unwrap_or("");
    if uid.is_empty() || version.is_empty() {
        return parse();
    }
    if let Some((at, listing)) = lock(kept()).get(uid)
        && at == version
    {
        return listing.clone();
    }
    // Parsed outside the lock: another view's lookup need not wait for it.
    let listing = parse();
    let mut kept = lock(kept());
    if kept.len() >= MAX_KEPT && !kept.contains_key(uid) {
        kept.clear();
    }
    kept.insert(uid.to_string(), (version.to_string(), listing.clone()));
    listing
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// An Application's whole JSON, listing Deployments `names`.
    fn whole(version: &str, names: &[&str]) -> Value {
        let resources: Vec<Value> = names
            .iter()
            .map(|n| {
                json!({"group": "apps", "version": "v1", "kind": "Deployment",
                            "namespace": "shop", "name": n, "syncWave": 1})
            })
            .collect();
        json!({"metadata": {"name": "shop", "namespace": "argocd",
                            "uid": "listing-test-uid", "resourceVersion": version},
               "status": {"resources": resources}})
    }

    fn app(version: &str, names: &[&str]) -> App {
        App::of(whole(version, names))
    }

    fn names(listing: &Listing) -> Vec<String> {
        listing
            .managed
            .iter()
            .map(|(r, _, _)| r.name.clone())
            .collect()
    }

    #[test]
    fn a_listing_is_parsed_once_per_version_and_anew_when_it_changes() {
        let first = of(&app("10", &["web"]));
        let again = of(&app("10", &["web"]));
        assert!(Arc::ptr_eq(&first, &again), "the same version parsed again");
        // A new version lists another resource: read at once, not the kept one.
        let next = of(&app("11", &["web", "api"]));
        assert_eq!(names(&next), ["web", "api"]);
        assert_eq!(next.linted.len(), 2);
        // Without a resourceVersion nothing is kept, so nothing stale can be served.
        for version in [Some(""), None] {
            let mut bare = whole("", &["db"]);
            if version.is_none() {
                let meta = bare["metadata"].as_object_mut().unwrap();
                meta.remove("resourceVersion");
            }
            let bare = App::of(bare);
            assert_eq!(bare.str_at("/metadata/resourceVersion"), version);
            assert_eq!(names(&of(&bare)), ["db"]);
        }
    }
}
