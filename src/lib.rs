//! wavegate: truthful readiness for Argo CD sync waves.
//!
//! Data flows one way: watch ([`cache`]) → snapshot → pure check ([`checks`]) → verdict
//! ([`health`]) → HTTP ([`api`]), WaveGate status or annotations. Modules form layers, and a
//! module imports only from layers below its own (`tests/offline/layers.rs` enforces it):
//!
//! 1. [`health`], [`resource`], [`views`], `json`, `glob` — verdicts; how kinds, objects and
//!    parameters are named, and the registry of check kinds; what the cache keeps of pods, Services and EndpointSlices; typed
//!    reads of JSON objects; Argo CD's wildcards (argocd-cm keys);
//! 2. [`argocd_lua`] — Argo CD's health scripts run in its sandbox, and where they come from;
//! 3. [`metrics`], [`checks`], `table`, `store_index`, [`app_status`] — counters; the pure check
//!    functions; kubectl-style tables; the views' store; an Application's resource lists, compact;
//! 4. [`cache`], [`probe`], [`written`], [`leader`], [`events`], `progress`, [`lint`] — the
//!    watch cache; CockroachDB probes; what the writers share; which replica writes; which
//!    Event a transition deserves; `wavegate wait`'s output; wave order and readiness found in
//!    rendered manifests;
//! 5. `deps` — which cached objects a verdict was read from;
//! 6. `kinds` — each check kind's contract: its check and parameters, what it reads, how it
//!    gathers a snapshot for its check, its WaveGate entry;
//! 7. `ask` — what to check: an object and its kind's check;
//! 8. [`evaluate`], [`policy`], `queue` — reads → verdicts; what a gate may check; the
//!    reconcile queue;
//! 9. [`gate`], [`annotate`] — the writers;
//! 10. [`notice`] — Argo CD's notice on an Application whose sync a WaveGate holds;
//! 11. [`clusters`] — which clusters are judged, each a [`clusters::Cluster`] (home too) with
//!     its own client, cache and evaluator, and the writers of each;
//! 12. `live_lint` — a live Application's objects linted like rendered manifests;
//! 13. `waves` — an Application's resources by wave;
//! 14. `timeline` — the last sync of those waves over time;
//! 15. [`api`] — HTTP;
//! 16. [`cli`] — the subcommands.
//!
//! # Words
//!
//! Each word below means one thing in names, comments and docs:
//!
//! - **Kind**: a Kubernetes kind as an object's `kind` field spells it (`Database`, `Service`).
//! - **group-resource** ([`resource::GroupResource`]): what the API server serves and the cache
//!   watches, an API group and a plural (`databases.postgresql.cnpg.io`).
//! - **check kind** ([`resource::CheckKind`]): what wavegate judges an object by — a dedicated
//!   check (Service, CNPG Database, CockroachDB cluster, Application) or the generic rule for
//!   any other group-resource. Each dedicated one is a row of [`resource::registry`] (the one
//!   table of its names, WaveGate entry and RBAC) and a module of `kinds` (its contract).
//! - **check**: a pure function of a snapshot to a finding ([`checks`]); also a WaveGate's entry
//!   that asks for one (`spec.checks[]`).
//! - **ask**: one question, an object and its check kind's parameters (`ask::Ask`).
//! - **verdict** ([`health::Verdict`]): a health status in Argo CD's words and why. **judge**:
//!   to turn reads into a verdict (the evaluator, a health script, a view); a **judgement** is a
//!   verdict with what it rested on and until when it holds.
//! - **blind**: a verdict that says more about wavegate than about the cluster (a cache not
//!   synced, a probe not answered); it holds back the gate's timeout, never a definite Degraded.
//! - **grace**: how long one object may fail the same way before its check says Degraded (the
//!   evaluator's clock); **timeout**: how long a gate may wait in one sync attempt (the gate's
//!   clock, kept in the API server). `gate::timeout` tables every clock.
//! - **view**: an HTTP answer built for people — the waves view of an Application, the gate
//!   view, the dashboard. The compact forms the cache keeps of pods, Services and EndpointSlices
//!   are in [`views`] (the one exception, kept for its age in the code); a **scope** is what a
//!   view may read for a user Argo CD's proxy authorized.
//! - **writer**: what changes the cluster — the gate controller, annotation mode, notices.

// docs/extending.md's walk-through as a test: a row added to the registry reaches every list
// derived from it.
#[cfg(test)]
mod adding_a_kind;
pub mod annotate;
pub mod api;
pub(crate) mod app_status;
pub mod argocd_lua;
pub(crate) mod ask;
pub mod cache;
pub mod checks;
pub mod cli;
pub mod clusters;
pub(crate) mod deps;
pub mod evaluate;
pub mod events;
pub mod gate;
mod glob;
pub(crate) mod hashing;
pub mod health;
pub mod heap;
mod json;
mod kinds;
pub mod leader;
pub mod lint;
mod live_lint;
pub(crate) mod locks;
pub mod metrics;
pub mod notice;
pub mod policy;
pub mod probe;
mod progress;
pub(crate) mod queue;
pub mod resource;
pub(crate) mod store_index;
mod table;
#[cfg(test)]
mod testing;
pub(crate) mod timeline;
pub mod views;
pub(crate) mod waves;
pub mod written;
