//! tests/release/run.sh checks the binary it finds. With no debug build it takes the release
//! one, which must have been built from the checkout's sources: one left from older sources,
//! checked in their stead, passed a release check of code nobody was releasing. What it was
//! built from is what cargo's dep-info says: a test-only file changed since is no reason to
//! refuse it (cargo would not rebuild it for one).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, SystemTime};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A checkout of `case`, with the release check, files last changed an hour ago but those of
/// `edited`, changed now, and a release build (no debug one) made `built_ago`, with cargo's
/// dep-info when `depinfo`: it names `src/main.rs`, `src/lib.rs` (relative, as with
/// `build.dep-info-basedir`) and `ui/a page.js`, not the test-only `src/tests.rs`. The check's
/// first step after choosing its binary (`scripts/tools.sh`) only says it was reached.
fn checkout(case: &str, built_ago: Duration, edited: &[&str], depinfo: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wavegate-release-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let now = SystemTime::now();
    let hour_ago = now - Duration::from_secs(3600);
    let write = |path: &str, text: &str, at: SystemTime| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(at).unwrap();
    };
    let copy = |path: &str| std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap();
    let reached = "#!/bin/sh\necho \"tools.sh reached: $*\" >&2\nexit 1\n";
    for (path, text) in [
        ("tests/release/run.sh", copy("tests/release/run.sh")),
        ("tests/private-copy.sh", copy("tests/private-copy.sh")),
        ("scripts/tools.sh", reached.to_string()),
        ("Cargo.toml", "[package]\n".into()),
        ("Cargo.lock", "version = 4\n".into()),
        ("ui/a page.js", String::new()),
        ("src/main.rs", "fn main() {}\n".into()),
        ("src/lib.rs", String::new()),
        ("src/tests.rs", String::new()),
    ] {
        let at = if edited.contains(&path) {
            now
        } else {
            hour_ago
        };
        write(path, &text, at);
    }
    let built = now - built_ago;
    write("target/release/wavegate", "#!/bin/sh\n", built);
    if depinfo {
        let d = dir.display();
        let rule =
            format!("{d}/target/release/wavegate: {d}/src/main.rs src/lib.rs {d}/ui/a\\ page.js\n");
        write("target/release/wavegate.d", &rule, built);
    }
    for exe in ["scripts/tools.sh", "target/release/wavegate"] {
        let status = Command::new("chmod").arg("+x").arg(dir.join(exe)).status();
        assert!(status.unwrap().success());
    }
    dir
}

/// The check run in `dir`, with no binary named for it.
fn run_check(dir: &Path) -> Child {
    Command::new("bash")
        .arg(dir.join("tests/release/run.sh"))
        .env("TEST_OUTPUT", dir.join("test-output"))
        .env_remove("WAVEGATE_RELEASE_BIN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// What the check said, once it ended; its checkout removed.
fn ended(dir: PathBuf, run: Child) -> (Output, String) {
    let out = run.wait_with_output().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, said)
}

/// Each run waits 10 s for a debug build that never appears (it may be being linked anew), so
/// the runs go side by side.
#[test]
fn a_release_build_older_than_its_sources_is_not_checked() {
    let half_hour = Duration::from_secs(1800);
    let stale = checkout("stale", half_hour, &["src/main.rs"], true);
    let spaced = checkout("spaced", half_hour, &["ui/a page.js"], true);
    let locked = checkout("locked", half_hour, &["Cargo.lock"], true);
    let fresh = checkout("fresh", Duration::ZERO, &[], true);
    let unknown = checkout("unknown", Duration::ZERO, &[], false);
    // Its target directory copied from the fresh checkout: dep-info naming that one's sources.
    let copied = checkout("copied", Duration::ZERO, &[], false);
    let d = fresh.display();
    std::fs::write(
        copied.join("target/release/wavegate.d"),
        format!("{d}/target/release/wavegate: {d}/src/main.rs {d}/src/lib.rs\n"),
    )
    .unwrap();
    let runs = [&stale, &spaced, &locked, &fresh, &unknown, &copied].map(|dir| run_check(dir));
    let [
        stale_run,
        spaced_run,
        locked_run,
        fresh_run,
        unknown_run,
        copied_run,
    ] = runs;
    let (out, said_copied) = ended(copied, copied_run);
    assert!(!out.status.success(), "{said_copied}");
    assert!(
        said_copied.contains("names another checkout's sources"),
        "a release build of another checkout was taken:\n{said_copied}"
    );

    for (dir, run, newer) in [
        (stale, stale_run, "src/main.rs"),
        (spaced, spaced_run, "ui/a page.js"),
        (locked, locked_run, "Cargo.lock"),
    ] {
        let (out, said) = ended(dir, run);
        assert!(!out.status.success(), "{said}");
        assert!(
            said.contains(&format!("target/release/wavegate is older than {newer}")),
            "a release build older than {newer} was taken:\n{said}"
        );
        assert!(!said.contains("tools.sh reached"), "{said}");
    }
    let (_, said_fresh) = ended(fresh, fresh_run);
    assert!(
        said_fresh.contains("tools.sh reached: path actionlint"),
        "a release build newer than its sources was not taken:\n{said_fresh}"
    );
    let (out, said_unknown) = ended(unknown, unknown_run);
    assert!(!out.status.success(), "{said_unknown}");
    assert!(
        said_unknown.contains("has no dep-info (")
            && said_unknown.contains("target/release/wavegate.d"),
        "a release build whose sources are unknown was taken:\n{said_unknown}"
    );
}

/// A release build is refused only for what it was built from: a test-only module edited
/// after it (`#[cfg(test)] mod tests;` in a file of its own, test data) failed the check, and
/// `cargo build --release` could not mend it, having nothing to rebuild.
#[test]
fn a_test_only_file_newer_than_the_release_build_does_not_fail_the_check() {
    let dir = checkout(
        "test-only",
        Duration::from_secs(1800),
        &["src/tests.rs"],
        true,
    );
    let run = run_check(&dir);
    let (_, said) = ended(dir, run);
    assert!(
        said.contains("tools.sh reached: path actionlint"),
        "a release build was refused for a file it was not built from:\n{said}"
    );
}
