//! The `wavegate` binary's `check` and `wait` on the real control plane, as a person or a hook
//! Job runs them: `check -o wide` over several targets, `wait` redrawing its block in place on
//! a terminal (tmux, read back with capture-pane) and writing plain lines into a pipe.

use crate::cluster;

use cluster::{Wavegate, apply, eventually, pod, set_pod_ready};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use wavegate::evaluate::EvalConfig;

fn wavegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

async fn service(client: &kube::Client, ns: &str, name: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}}),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn check_wide_is_a_table_of_every_target_and_exits_with_the_worst() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "cli-check").await;
    pod(&client, &ns, "a-0", json!({"app": "a"})).await;
    set_pod_ready(&client, &ns, "a-0", "10.244.41.1", true).await;
    service(&client, &ns, "a").await;
    pod(&client, &ns, "b-0", json!({"app": "b"})).await;
    service(&client, &ns, "b").await;
    // Let the EndpointSlice controller publish a's endpoint.
    eventually(Duration::from_secs(15), "services/a Healthy", || async {
        let o = wavegate(&["check", "services/a", "-n", &ns]);
        if o.status.code() == Some(0) {
            Ok(())
        } else {
            Err(stdout(&o))
        }
    })
    .await;

    let targets = ["services/a", "services/b", "databases.postgresql.cnpg.io/c"];
    let o = wavegate(&[&["check"][..], &targets, &["-n", &ns, "-o", "wide"]].concat());
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["NAMESPACE", "TARGET", "STATUS", "MESSAGE"],
        "{out}"
    );
    // Columns line up: each STATUS starts where its header does.
    let col = lines[0].find("STATUS").unwrap();
    for (line, (target, status)) in lines[1..].iter().zip([
        ("services/a", "Healthy"),
        ("services/b", "Progressing"),
        ("databases.postgresql.cnpg.io/c", "Missing"),
    ]) {
        assert!(line.starts_with(&ns), "{out}");
        assert!(line.contains(target), "{out}");
        assert_eq!(&line[col..col + status.len()], status, "{out}");
    }
    // Worst of Healthy, Progressing, Missing (gitops-engine's order): Missing, exit 5.
    assert_eq!(o.status.code(), Some(5), "{out}");

    // One target: the output it always had.
    let o = wavegate(&["check", "services/a", "-n", &ns]);
    assert!(stdout(&o).starts_with("Healthy: "), "{}", stdout(&o));
    assert_eq!(stdout(&o).lines().count(), 1);
    let o = wavegate(&["check", "services/b", "-n", &ns, "-o", "json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["status"], "Progressing", "{v}");
    assert_eq!(o.status.code(), Some(3));
    // Several as JSON: an array.
    let o = wavegate(&["check", "services/a", "services/b", "-n", &ns, "-o", "json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v[1]["name"], "b", "{v}");
    assert_eq!(v[1]["status"], "Progressing", "{v}");
    assert_eq!(o.status.code(), Some(3));
    // A bad target among good ones is a usage error, judged before anything is read.
    let o = wavegate(&["check", "services/a", "nope", "-n", &ns]);
    assert_eq!(o.status.code(), Some(2));
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn wait_into_a_pipe_writes_one_plain_line_per_change() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "cli-pipe").await;
    pod(&client, &ns, "web-0", json!({"app": "web"})).await;
    service(&client, &ns, "web").await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args([
            "wait",
            "services/web",
            "-n",
            &ns,
            "--timeout",
            "60s",
            "--interval",
            "300ms",
        ])
        .env("TERM", "xterm-256color")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(
        first.starts_with(&format!("services {ns}/web: Progressing: ")),
        "{first:?}"
    );
    set_pod_ready(&client, &ns, "web-0", "10.244.42.1", true).await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let log = first + &rest;
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(
        !log.contains('\x1b'),
        "control characters in a log: {log:?}"
    );
    let lines: Vec<&str> = log.lines().collect();
    // Judged every 300 ms: a line only when the verdict changed (the pod turned ready; the
    // endpoint followed), so a handful, never one per poll.
    assert!(lines.len() <= 4, "{log}");
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with(&format!("services {ns}/web: Healthy: ")),
        "{log}"
    );
    assert!(stdout(&out).starts_with("Healthy: "), "{}", stdout(&out));
}

/// A tmux server of this test's own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(session: &str, command: &str) -> Tmux {
        let socket = format!("wavegate-test-{}", std::process::id());
        let version = Command::new("tmux").arg("-V").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "tmux is required for the terminal test (.ci/run installs it): {version:?}"
        );
        let ok = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                session,
            ])
            .args(["-x", "160", "-y", "24", command])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        Tmux { socket }
    }

    fn pane(&self) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "0"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

#[tokio::test]
#[ignore = "needs the local control plane"]
async fn wait_on_a_terminal_redraws_one_line_per_check_in_place() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "cli-tty").await;
    pod(&client, &ns, "web-0", json!({"app": "web"})).await;
    service(&client, &ns, "web").await;
    service(&client, &ns, "api").await;
    pod(&client, &ns, "api-0", json!({"app": "api"})).await;
    set_pod_ready(&client, &ns, "api-0", "10.244.43.2", true).await;
    let wg = Wavegate::start_in(client.clone(), EvalConfig::default(), &[&ns])
        .await
        .with_gates(Duration::from_secs(1));
    apply(
        &client,
        json!({"apiVersion": "wavegate.dev/v1alpha1", "kind": "WaveGate",
               "metadata": {"name": "web-up", "namespace": ns},
               "spec": {"checks": [{"name": "web", "service": {"name": "web"}},
                                   {"name": "api", "service": {"name": "api"}}]}}),
    )
    .await;
    let kubeconfig =
        std::env::var("KUBECONFIG").expect("KUBECONFIG (scripts/control-plane.sh env)");
    let command = format!(
        "env KUBECONFIG={kubeconfig} TERM=screen {} wait gate/web-up -n {ns} --timeout 5m; \
         echo EXIT=$?; sleep 60",
        env!("CARGO_BIN_EXE_wavegate")
    );
    let tmux = Tmux::start("wait", &command);
    let header = format!("WaveGate {ns}/web-up: Progressing   1/2 healthy   elapsed ");
    let first = eventually(Duration::from_secs(20), "the live block", || async {
        let pane = tmux.pane();
        if pane.contains(&header) && pane.contains("  web     Progressing") {
            Ok(pane)
        } else {
            Err(pane)
        }
    })
    .await;
    let elapsed = |pane: &str| {
        pane.lines()
            .find(|l| l.starts_with(&header))
            .map(|l| l[header.len()..].split("   ").next().unwrap().to_string())
    };
    assert!(first.contains("  CHECK   STATUS        MESSAGE"), "{first}");
    assert!(first.contains("  api     Healthy       "), "{first}");
    assert!(first.contains("remaining 4m"), "{first}");
    // The clock moves, in place: still one header, one line per check.
    let later = eventually(
        Duration::from_secs(10),
        "elapsed time advancing",
        || async {
            let pane = tmux.pane();
            if elapsed(&pane) != elapsed(&first) {
                Ok(pane)
            } else {
                Err(pane)
            }
        },
    )
    .await;
    assert_eq!(
        later.matches(&format!("WaveGate {ns}/web-up:")).count(),
        1,
        "{later}"
    );
    assert_eq!(later.matches("  web     ").count(), 1, "{later}");

    set_pod_ready(&client, &ns, "web-0", "10.244.43.1", true).await;
    let done = eventually(Duration::from_secs(20), "the wait ends Healthy", || async {
        let pane = tmux.pane();
        if pane.contains("EXIT=") {
            Ok(pane)
        } else {
            Err(pane)
        }
    })
    .await;
    let out =
        std::env::var("TEST_OUTPUT").unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(format!("{out}/wavegate-wait-tmux-waiting.txt"), &later);
    let _ = std::fs::write(format!("{out}/wavegate-wait-tmux-done.txt"), &done);
    assert!(done.contains("EXIT=0"), "{done}");
    assert!(
        done.contains(&format!("WaveGate {ns}/web-up: Healthy   2/2 healthy")),
        "{done}"
    );
    assert_eq!(
        done.matches(&format!("WaveGate {ns}/web-up:")).count(),
        1,
        "{done}"
    );
    assert_eq!(done.matches("  web     ").count(), 1, "{done}");
    // The verdict on stdout, after the block.
    assert!(done.contains("Healthy: all 2 checks healthy"), "{done}");
    drop(wg);
}
