//! The committed CRD must be exactly what the Rust types generate, so the schema the API server
//! validates against never drifts from what the controller reads and writes.

const COMMITTED: &str = "deploy/crd/wavegate.dev_wavegates.yaml";

#[test]
fn committed_crd_matches_the_rust_types() {
    let generated = wavegate::gate::crd::crd_yaml().expect("CRD serializes");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(COMMITTED);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{COMMITTED} differs from the CRD generated from src/gate/crd.rs (first difference at \
             line {}: committed {:?}, generated {:?}); run `cargo run -- crd > {COMMITTED}`",
            first + 1,
            committed.lines().nth(first),
            generated.lines().nth(first),
        );
    }
}
