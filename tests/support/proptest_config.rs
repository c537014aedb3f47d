//! The one proptest configuration of the project, for unit tests (`src/testing.rs` includes this
//! file) and integration tests (`#[path = "support/proptest_config.rs"] mod proptest_config;`):
//! the number of cases comes from `PROPTEST_CASES` when set (a quick look, or a long search
//! before a release), else from the test's own default; failures are not persisted to files
//! (a case worth keeping becomes a named test next to the property).

pub fn config(default_cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(default_cases),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
