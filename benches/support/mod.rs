//! What the benches share: asking a running `wavegate serve` for a verdict, summarising timings,
//! and the one machine-readable line per result that `scripts/bench.sh` turns into
//! `docs/benchmarks.md`:
//!
//! ```text
//! BENCH <name> key=value key=value …
//! ```
//!
//! Values never contain spaces (reasons use `_`), so the script splits on whitespace and `=`.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::Value;
use std::time::{Duration, Instant};

/// One result line for `scripts/bench.sh`.
pub fn report(name: &str, fields: &[(&str, String)]) {
    let mut line = format!("BENCH {name}");
    for (k, v) in fields {
        line.push_str(&format!(" {k}={}", v.replace(char::is_whitespace, "_")));
    }
    println!("{line}");
}

/// Milliseconds with two decimals, the unit of every latency the benches print.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// Nearest-rank percentiles of a sample: with 30 samples, p95 is the 29th smallest.
pub struct Summary {
    pub n: usize,
    pub p50: Duration,
    pub p95: Duration,
    pub max: Duration,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        let mut sorted = samples.to_vec();
        sorted.sort();
        let rank = |p: f64| {
            let k = (p * sorted.len() as f64).ceil() as usize;
            sorted[k.clamp(1, sorted.len()) - 1]
        };
        (!sorted.is_empty()).then(|| Summary {
            n: sorted.len(),
            p50: rank(0.50),
            p95: rank(0.95),
            max: sorted[sorted.len() - 1],
        })
    }

    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("n", self.n.to_string()),
            ("p50_ms", ms(self.p50)),
            ("p95_ms", ms(self.p95)),
            ("max_ms", ms(self.max)),
        ]
    }
}

/// A running `wavegate serve`, reached over loopback HTTP as Argo CD hooks and browsers reach it.
#[derive(Clone)]
pub struct Served {
    pub url: String,
    http: reqwest::Client,
}

impl Served {
    pub fn new(url: &str) -> Served {
        // reqwest carries no TLS provider of its own in this crate (see Cargo.toml); plain HTTP
        // needs none, but building a client wants a process default.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Served {
            url: url.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .no_proxy()
                // Bounded: a bench that hangs on a stuck server would never report.
                .timeout(Duration::from_secs(30))
                .build()
                .expect("HTTP client"),
        }
    }

    /// The verdict JSON for `resource/namespace/name`, or the transport or HTTP error.
    pub async fn verdict(&self, resource: &str, ns: &str, name: &str) -> Result<Value, String> {
        let url = format!("{}/api/v1/health/{resource}/{ns}/{name}", self.url);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let code = resp.status();
        let body: Value = resp.json().await.map_err(|e| e.to_string())?;
        if code.is_success() {
            Ok(body)
        } else {
            Err(format!("{url}: HTTP {code}: {body}"))
        }
    }

    /// `status` of the verdict, or `error` when there is none.
    pub async fn status(&self, resource: &str, ns: &str, name: &str) -> String {
        match self.verdict(resource, ns, name).await {
            Ok(v) => v["status"].as_str().unwrap_or("error").to_string(),
            Err(_) => "error".to_string(),
        }
    }

    /// Poll every `every` until the verdict's status satisfies `done`; the time it was first
    /// seen, or `None` after `timeout`.
    pub async fn until(
        &self,
        target: (&str, &str, &str),
        every: Duration,
        timeout: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while Instant::now() < deadline {
            tick.tick().await;
            if done(&self.status(target.0, target.1, target.2).await) {
                return Some(Instant::now());
            }
        }
        None
    }

    /// wavegate's own `/metrics` as text.
    pub async fn metrics(&self) -> String {
        match self.http.get(format!("{}/metrics", self.url)).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }
}

/// Sum of the samples of metric `name` in Prometheus/OpenMetrics text whose labels contain
/// `label` (e.g. `outcome="miss"`; empty: all of them).
pub fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Remove a bench namespace without waiting: pods on the fake node never finish a graceful
/// deletion (there is no kubelet), so they go first with grace period 0.
pub async fn drop_namespace(client: &Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = pods
        .delete_collection(
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
            &ListParams::default(),
        )
        .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
}

/// CPU time of every thread of `pid` so far, in nanoseconds (`/proc/PID/task/*/schedstat`:
/// finer than utime + stime's 10 ms ticks; a thread that exited meanwhile is not counted, and
/// wavegate's tokio workers live as long as it does).
pub fn cpu_ns(pid: u32) -> u64 {
    thread_cpu_ns(pid).values().sum()
}

/// [`cpu_ns`] by thread id.
pub fn thread_cpu_ns(pid: u32) -> std::collections::HashMap<String, u64> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("wavegate is running")
        .filter_map(|t| {
            let t = t.ok()?;
            let ns = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            let ns = ns.split_whitespace().next()?.parse::<u64>().ok()?;
            Some((t.file_name().to_string_lossy().into_owned(), ns))
        })
        .collect()
}

/// CPU time `pid`'s threads used since `before` ([`thread_cpu_ns`]). Thread by thread: a sum
/// over all threads goes down when one exits (tokio's blocking threads do after 10 s idle), and
/// a difference of sums then wrapped to 368,934,881,469 ms once. What an exited thread used
/// meanwhile is lost, so this can only undercount.
pub fn cpu_ns_since(pid: u32, before: &std::collections::HashMap<String, u64>) -> u64 {
    thread_cpu_ns(pid)
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// `--name value` from the command line (cargo bench also passes `--bench`, which is ignored).
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

pub fn arg_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub fn required(name: &str) -> String {
    arg(name).unwrap_or_else(|| {
        eprintln!("missing {name} <value>");
        std::process::exit(2)
    })
}
