//! The kubelet's view of wavegate during an attack: `/healthz` asked on a fresh connection at a
//! steady pace, and this process's resident memory read at each ask.
//!
//! The prober runs on a thread of its own with its own runtime. Sharing wavegate's runtime would
//! hide the very stall being measured: a worker held by a 16 MiB parse would also hold the
//! prober's timer, so the ask would go out late and look fast.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shipped chart's livenessProbe (deploy/helm/wavegate/templates/deployment.yaml): a
/// `/healthz` answer slower than `timeoutSeconds` is a failed probe, and the kubelet restarts
/// the container after `failureThreshold` failed probes in a row, `periodSeconds` apart.
pub const LIVENESS_TIMEOUT: Duration = Duration::from_secs(2);
pub const LIVENESS_PERIOD: Duration = Duration::from_secs(10);
pub const LIVENESS_FAILURE_THRESHOLD: u32 = 3;

/// How long `/healthz` may fail without the kubelet restarting the pod, whenever its probes
/// fall: the first failed probe and `failureThreshold - 1` more, `periodSeconds` apart.
pub fn liveness_tolerance() -> Duration {
    LIVENESS_PERIOD * (LIVENESS_FAILURE_THRESHOLD - 1)
}

/// Resident memory of this process, from /proc (Linux).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The most resident memory this process had at any sample so far.
pub struct PeakRss(Arc<AtomicU64>);

impl PeakRss {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// A running prober.
pub struct Prober {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Samples>,
}

/// What the prober saw.
#[derive(Debug, Default)]
pub struct Samples {
    /// Each ask's latency, `None` when it failed or got no answer within 10 s.
    pub latencies: Vec<Option<Duration>>,
    /// When each ask went out, from the prober's start.
    pub asked_at: Vec<Duration>,
    pub rss_peak: u64,
}

impl Prober {
    /// Ask `{url}/healthz` every `every` until stopped.
    pub fn start(url: &str, every: Duration) -> Prober {
        let (stop, peak) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let url = format!("{url}/healthz");
        let thread = std::thread::spawn({
            let (stop, peak) = (stop.clone(), peak.clone());
            move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let mut samples = Samples::default();
                    let begun = Instant::now();
                    while !stop.load(Ordering::Acquire) {
                        let started = Instant::now();
                        samples.asked_at.push(begun.elapsed());
                        samples.latencies.push(healthz(&url).await);
                        peak.fetch_max(rss_bytes(), Ordering::AcqRel);
                        tokio::time::sleep(every.saturating_sub(started.elapsed())).await;
                    }
                    samples.rss_peak = peak.load(Ordering::Acquire);
                    samples
                })
            }
        });
        Prober { stop, peak, thread }
    }

    pub fn peak_rss(&self) -> PeakRss {
        PeakRss(self.peak.clone())
    }

    pub fn stop(self) -> Samples {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap()
    }
}

/// One ask on a fresh connection (as the kubelet asks), timed to its answer.
async fn healthz(url: &str) -> Option<Duration> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let resp = http.get(url).send().await.ok()?;
    resp.status().is_success().then(|| started.elapsed())
}

impl Samples {
    /// Asks that failed or took longer than the liveness probe waits.
    pub fn failed_probes(&self) -> usize {
        self.latencies
            .iter()
            .filter(|l| l.is_none_or(|l| l > LIVENESS_TIMEOUT))
            .count()
    }

    /// The longest time `/healthz` failed without a break: from the first of a run of failed
    /// asks going out to the last one's answer or timeout. A kubelet probing at any moment
    /// inside it would have seen a failure.
    pub fn longest_failing(&self) -> Duration {
        let (mut longest, mut since) = (Duration::ZERO, None);
        for (at, latency) in self.asked_at.iter().zip(&self.latencies) {
            match latency {
                Some(l) if *l <= LIVENESS_TIMEOUT => since = None,
                _ => {
                    let first = *since.get_or_insert(*at);
                    let end = *at + latency.unwrap_or(Duration::from_secs(10));
                    longest = longest.max(end - first);
                }
            }
        }
        longest
    }

    /// The answered asks' latency at quantile `q` (0.99: p99; 1.0: the slowest).
    pub fn quantile(&self, q: f64) -> Duration {
        let mut answered: Vec<Duration> = self.latencies.iter().flatten().copied().collect();
        answered.sort();
        let Some(last) = answered.len().checked_sub(1) else {
            return Duration::ZERO;
        };
        answered[((last as f64) * q).round() as usize]
    }

    /// `n asks, p50 …, p99 …, max …, k failed`.
    pub fn summary(&self) -> String {
        format!(
            "{} asks, p50 {:?}, p99 {:?}, max {:?}, {} failed or over {:?} (longest failing \
             {:?})",
            self.latencies.len(),
            self.quantile(0.5),
            self.quantile(0.99),
            self.quantile(1.0),
            self.failed_probes(),
            LIVENESS_TIMEOUT,
            self.longest_failing(),
        )
    }
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
