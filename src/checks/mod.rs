//! The checks: pure functions from a snapshot of cluster objects (and probe results) to a
//! [`Finding`](crate::health::Finding) or [`Verdict`](crate::health::Verdict). No I/O here, so
//! every rule is unit-tested with plain fixtures.

pub mod application;
pub mod builtin;
pub mod cnpg;
pub mod cockroach;
pub mod generic;
pub mod service;
