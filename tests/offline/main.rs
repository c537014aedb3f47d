//! wavegate's tests that need no cluster, in one test binary: the sequence oracles, Rust-Lua
//! parity in Argo CD's Lua VM, `wavegate lint`, the HTTP router under fuzzing, the probe
//! against CockroachDB stand-ins, the CRD and the shipped manifests, and the release check's
//! choice of binary. One binary links kube and tokio once instead of once per file.
//! (tests/api_load.rs stays a binary of its own: it measures its process's RSS.)
//!
//! Needs Go (the Lua harness is gopher-lua, built once) and kubectl (`kubectl kustomize`); the
//! Helm tests also need Helm, built from its Go module by `scripts/helm.sh`, and so say
//! `#[ignore = ...]` (scripts/test.sh runs them with `--include-ignored`).

#[path = "../support/crdb_standin.rs"]
mod crdb_standin;
#[path = "../support/proptest_config.rs"]
mod proptest_config;

mod api_fuzz;
mod argocd_lua;
mod check_targets;
mod crd;
mod deploy_manifests;
mod helm_chart;
mod layers;
mod lint;
mod openapi;
mod oracle_cnpg;
mod oracle_cockroach;
mod oracle_service;
mod parity;
mod parity_hydrator;
mod probe;
mod release_binary;
mod shards;
mod ui;
