//! A control plane of a test's own, for tests that stop, restart or pause its parts: the shared
//! one on 127.0.0.1:6443 serves every other test and must never be touched. Same script, same
//! binaries (`scripts/control-plane.sh` with its own `WAVEGATE_STATE` and free ports), torn
//! down when dropped.
#![allow(dead_code)]

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PrivateControlPlane {
    pub state: PathBuf,
    pub kubeconfig: PathBuf,
    pub apiserver_port: u16,
    env: Vec<(&'static str, String)>,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A loopback port nobody listens on (and, for etcd, its peer port 10 above), taken below the
/// kernel's ephemeral range (Linux's `ip_local_port_range` starts at 32768 by default): a port
/// from that range can be taken by any outgoing connection before the control plane binds it,
/// tens of seconds later when several start at once. Never the same port twice in one test
/// process, whose control planes (and `wavegate serve` processes) start concurrently: a port
/// from `bind(0)` once went to another test's process first, and the test read that process's
/// metrics as its own replica's.
pub fn free_port(with_peer: bool) -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        // RandomState is seeded per instance: a random number without a crate for it.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = 20000 + (random % 12700) as u16;
        let peer = with_peer.then_some(port + 10);
        let taken = |p: u16| given.contains(&p) || TcpListener::bind(("127.0.0.1", p)).is_err();
        if !taken(port) && !peer.is_some_and(taken) {
            given.extend([Some(port), peer].into_iter().flatten());
            return port;
        }
    }
    panic!("no free loopback port");
}

impl PrivateControlPlane {
    /// `scripts/control-plane.sh up` in a fresh state directory on free ports.
    pub fn up(name: &str) -> PrivateControlPlane {
        PrivateControlPlane::start_up(name, true)
    }

    /// Without the CRDs `up` applies for the tests (`tests/crds`: Argo CD's Application, CNPG's
    /// and CockroachDB's kinds): a destination that needs only the WaveGate CRD its installer
    /// brings. Establishing those CRDs is the longest step of a start on a loaded machine.
    pub fn up_bare(name: &str) -> PrivateControlPlane {
        PrivateControlPlane::start_up(name, false)
    }

    fn start_up(name: &str, test_crds: bool) -> PrivateControlPlane {
        let state = std::env::temp_dir().join(format!("wavegate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        let apiserver_port = free_port(false);
        let mut env = vec![
            ("WAVEGATE_STATE", state.display().to_string()),
            ("WAVEGATE_APISERVER_PORT", apiserver_port.to_string()),
            ("WAVEGATE_ETCD_PORT", free_port(true).to_string()),
            ("WAVEGATE_KCM_PORT", free_port(false).to_string()),
        ];
        if !test_crds {
            // A directory that does not exist: the script applies no CRD.
            env.push(("WAVEGATE_CRDS", state.join("no-crds").display().to_string()));
        }
        let cp = PrivateControlPlane {
            kubeconfig: state.join("kubeconfig"),
            state,
            apiserver_port,
            env,
        };
        cp.script(&["up"]);
        cp
    }

    /// Run `scripts/control-plane.sh <args>` against this control plane; its stdout.
    pub fn script(&self, args: &[&str]) -> String {
        let out = Command::new(repo().join("scripts/control-plane.sh"))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .expect("scripts/control-plane.sh");
        assert!(
            out.status.success(),
            "control-plane.sh {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn stop(&self, component: &str) {
        self.script(&["stop-component", component]);
    }

    pub fn start(&self, component: &str) {
        self.script(&["start-component", component]);
    }

    /// Send a signal (`STOP`, `CONT`) to one component.
    pub fn signal(&self, component: &str, signal: &str) {
        let pid = self.script(&["pid", component]);
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} {component} ({pid})");
    }

    /// Compact etcd up to its current revision; that revision.
    pub fn compact(&self) -> u64 {
        self.script(&["compact"]).parse().expect("a revision")
    }

    /// kubectl against this control plane as its admin.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e} (kubectl must be on PATH)"));
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(self.state.join("pki/admin.token"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// A kubeconfig file that authenticates with `token` instead of the admin's.
    pub fn kubeconfig_with_token(&self, name: &str, token: &str) -> PathBuf {
        let admin = std::fs::read_to_string(&self.kubeconfig).unwrap();
        let path = self.state.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, admin.replace(&self.admin_token(), token)).unwrap();
        path
    }

    pub async fn client(&self, kubeconfig: &Path) -> Client {
        let kc = Kubeconfig::read_from(kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(config).unwrap()
    }

    pub async fn admin(&self) -> Client {
        self.client(&self.kubeconfig).await
    }
}

impl Drop for PrivateControlPlane {
    fn drop(&mut self) {
        // A paused component would ignore SIGTERM until SIGKILL; let it run first.
        for c in ["etcd", "kube-apiserver", "kube-controller-manager"] {
            if let Ok(out) = Command::new(repo().join("scripts/control-plane.sh"))
                .args(["pid", c])
                .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
                .output()
            {
                let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !pid.is_empty() {
                    let _ = Command::new("kill").args(["-CONT", &pid]).status();
                }
            }
        }
        let _ = Command::new(repo().join("scripts/control-plane.sh"))
            .arg("down")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
        if std::env::var_os("WAVEGATE_KEEP_STATE").is_none() {
            let _ = std::fs::remove_dir_all(&self.state);
        }
    }
}
