//! wavegate: truthful readiness for Argo CD sync waves.
//!
//! Data flows one way: watch ([`cache`]) → snapshot → pure check ([`checks`]) → verdict
//! ([`health`]) → HTTP ([`api`]), WaveGate status or annotations.

pub mod annotate;
pub mod api;
pub mod cache;
pub mod checks;
pub mod cli;
pub mod evaluate;
pub mod gate;
pub mod health;
pub mod metrics;
pub mod policy;
pub mod probe;
pub mod resource;
pub mod store_index;
pub mod waves;
