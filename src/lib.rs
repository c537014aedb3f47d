//! wavegate: truthful readiness for Argo CD sync waves.
//!
//! Data flows one way: watch ([`cache`]) → snapshot → pure check ([`checks`]) → verdict
//! ([`health`]) → HTTP, WaveGate status or annotations.

pub mod cache;
pub mod checks;
pub mod health;
pub mod metrics;
pub mod probe;
pub mod resource;
