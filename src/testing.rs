//! Helpers shared by the unit tests of every module (compiled for tests only).

/// The one proptest configuration, the same file the integration tests include.
#[path = "../tests/support/proptest_config.rs"]
pub(crate) mod proptest_config;
