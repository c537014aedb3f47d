//! tests/release/run.sh checks the binary it finds. With no debug build it takes the release
//! one, which must have been built from the checkout's sources: one left from older sources,
//! checked in their stead, passed a release check of code nobody was releasing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A checkout of `dir` with the release check, sources last changed an hour ago but for
/// `src/main.rs`, changed at `edited`, and a release build (no debug one) made at `built`. The
/// check's first step after choosing its binary (`scripts/tools.sh`) only says it was reached.
fn checkout(dir: &Path, built: SystemTime, edited: SystemTime) {
    let _ = std::fs::remove_dir_all(dir);
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let write = |path: &str, text: &str, at: SystemTime| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(at).unwrap();
    };
    let copy = |path: &str| std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap();
    write(
        "tests/release/run.sh",
        &copy("tests/release/run.sh"),
        hour_ago,
    );
    write(
        "tests/private-copy.sh",
        &copy("tests/private-copy.sh"),
        hour_ago,
    );
    let reached = "#!/bin/sh\necho \"tools.sh reached: $*\" >&2\nexit 1\n";
    write("scripts/tools.sh", reached, hour_ago);
    write("Cargo.toml", "[package]\n", hour_ago);
    write("Cargo.lock", "version = 4\n", hour_ago);
    write("ui/waves.js", "", hour_ago);
    write("src/main.rs", "fn main() {}\n", edited);
    write("target/release/wavegate", "#!/bin/sh\n", built);
    for exe in ["scripts/tools.sh", "target/release/wavegate"] {
        let status = Command::new("chmod").arg("+x").arg(dir.join(exe)).status();
        assert!(status.unwrap().success());
    }
}

fn run_check(dir: &Path) -> std::process::Child {
    Command::new("bash")
        .arg(dir.join("tests/release/run.sh"))
        .env("TEST_OUTPUT", dir.join("test-output"))
        .env_remove("WAVEGATE_RELEASE_BIN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Each run waits 10 s for a debug build that never appears (it may be being linked anew), so
/// the two run side by side.
#[test]
fn a_release_build_older_than_its_sources_is_not_checked() {
    let now = SystemTime::now();
    let dir = |case: &str| -> PathBuf {
        std::env::temp_dir().join(format!("wavegate-release-{case}-{}", std::process::id()))
    };
    let (stale, fresh) = (dir("stale"), dir("fresh"));
    checkout(&stale, now - Duration::from_secs(1800), now);
    checkout(&fresh, now, now - Duration::from_secs(3600));
    let (stale_run, fresh_run) = (run_check(&stale), run_check(&fresh));
    let (stale_out, fresh_out) = (
        stale_run.wait_with_output().unwrap(),
        fresh_run.wait_with_output().unwrap(),
    );
    let said = stderr(&stale_out);
    assert!(!stale_out.status.success(), "{said}");
    assert!(
        said.contains("target/release/wavegate is older than src/main.rs"),
        "a release build older than src/main.rs was taken:\n{said}"
    );
    assert!(!said.contains("tools.sh reached"), "{said}");
    let said = stderr(&fresh_out);
    assert!(
        said.contains("tools.sh reached: path actionlint"),
        "a release build newer than its sources was not taken:\n{said}"
    );
    for dir in [stale, fresh] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
