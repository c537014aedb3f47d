//! wavegate: truthful readiness for Argo CD sync waves.

pub mod checks;
pub mod health;
