//! WaveGates: the custom resource Argo CD waits on ([`crd`]), the pure rules that turn check
//! verdicts into its status — the asks its entries make ([`asks`]), the Argo CD sync that is
//! applying it ([`sync`]), its verdict over time and the timeout ([`timeout`]), the status
//! written ([`status`]) — what to do with one gate — status, requeue, Event —
//! decided from what was read ([`decide`]), the controller that reads, decides and writes
//! ([`controller`]) and marks each write where Argo CD notices it ([`stamp`]), and the view the HTTP API and `wavegate wait` serve ([`view`]).
//!
//! One controller runs per cluster (`clusters::Cluster::gate_controller` builds its
//! [`controller::Context`]); it returns when its cache's change feed closes. Each status write
//! increments `metrics.gate_status_writes`.

pub(crate) mod asks;
pub mod controller;
pub mod crd;
mod decide;
mod entries;
pub mod stamp;
pub mod status;
pub(crate) mod sync;
#[cfg(test)]
mod tests;
pub mod timeout;
pub(crate) mod view;

pub use controller::run;

use crate::resource::GroupResource;

/// WaveGates as the cache names them, from the CRD type's own group and plural.
pub fn kind() -> GroupResource {
    use kube::Resource;
    GroupResource::new(&crd::WaveGate::group(&()), &crd::WaveGate::plural(&()))
}
