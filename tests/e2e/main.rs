//! wavegate end to end on the real local control plane (`scripts/control-plane.sh`): one test
//! binary for every file here, so kube, tokio and the test support are compiled and linked once,
//! not once per file, and the tests of every file run concurrently (each makes its own namespace,
//! or its own private control plane on free ports, `support/private_control_plane.rs`).
//!
//! Every test says `#[ignore = "needs the local control plane"]`: a plain `cargo test` on a machine
//! without one runs the unit and offline tests and passes; `scripts/test.sh` starts the control
//! plane and runs these too (`cargo test --test e2e -- --include-ignored`), and without a
//! `KUBECONFIG` they fail loudly (`support/cluster.rs`), never pass by being skipped.

#[path = "../support/cluster.rs"]
mod cluster;
#[path = "../support/counting_standin.rs"]
mod counting_standin;
#[path = "../support/crdb_standin.rs"]
mod crdb_standin;
#[path = "../support/kubelet_probe.rs"]
mod kubelet_probe;
#[path = "../support/private_control_plane.rs"]
mod private_control_plane;

mod annotate;
mod api;
mod api_scope;
mod argocd_lua;
mod cli;
mod clusters;
mod cnpg;
mod cnpg_role;
mod crdb;
mod crdb_scale;
mod events;
mod faults;
mod gate_policy;
mod gates;
mod generic;
mod leader;
mod notices;
mod seeds;
mod shard_failover;
mod shard_reads;
mod shards;
mod shards_own;
mod timeline;
mod vap;
mod waves;
mod waves_batch;
mod waves_lint;
mod waves_lint_load;
