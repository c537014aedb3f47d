//! A fleet of ready CockroachDB stand-in nodes on loopback addresses that count what they are
//! asked: requests per node, probe rounds per node (`/health`, one per round), and the most
//! rounds in flight at once across the fleet — the numbers wavegate's probe coalescing and its
//! concurrency bound promise. Each `/health` answer can be delayed, so that rounds overlap
//! long enough for a missing bound to show.
//!
//! The answers have CockroachDB's shapes as few lines allow; `crdb_standin.rs` is the stand-in
//! with state, TLS and logins. Used by tests/e2e/crdb_scale.rs and benches/coalescing.rs with
//! `#[path = "…/support/counting_standin.rs"] mod counting_standin;`.

#![allow(dead_code)]

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::json;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub const CLUSTER_ID: &str = "6f2f4c4e-5c1b-4a4e-9d0e-000000000bec";

/// What one node was asked.
#[derive(Default)]
pub struct Node {
    pub requests: AtomicU64,
    pub rounds: AtomicU64,
}

/// Rounds in flight across the fleet, and the most seen at once.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

pub struct Fleet {
    pub nodes: Vec<Arc<Node>>,
    pub port: u16,
    in_flight: Arc<InFlight>,
}

#[derive(Clone)]
struct Shared {
    node: Arc<Node>,
    in_flight: Arc<InFlight>,
    delay: Duration,
}

impl Fleet {
    /// `pods` ready nodes of one `pods`-node cluster at `{prefix}.1` … `{prefix}.{pods}`, all on
    /// `port` (0: the first node picks one and the others share it).
    pub async fn start(prefix: [u8; 3], pods: usize, port: u16, delay: Duration) -> Fleet {
        assert!((1..=254).contains(&pods), "1–254 pods per /24");
        let in_flight = Arc::new(InFlight::default());
        let mut nodes = Vec::new();
        let mut port = port;
        for i in 1..=pods {
            let ip = Ipv4Addr::new(prefix[0], prefix[1], prefix[2], i as u8);
            let shared = Shared {
                node: Arc::new(Node::default()),
                in_flight: in_flight.clone(),
                delay,
            };
            nodes.push(shared.node.clone());
            let listener = tokio::net::TcpListener::bind((ip, port))
                .await
                .unwrap_or_else(|e| panic!("stand-in cannot bind {ip}:{port}: {e}"));
            port = listener.local_addr().unwrap().port();
            let app = router(ip, i, pods, shared);
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
        }
        Fleet {
            nodes,
            port,
            in_flight,
        }
    }

    /// The most probe rounds (`/health` requests) in flight at once so far.
    pub fn peak_rounds_in_flight(&self) -> usize {
        self.in_flight.peak.load(Ordering::SeqCst)
    }

    pub fn rounds(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| n.rounds.load(Ordering::SeqCst))
            .collect()
    }

    pub fn requests(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| n.requests.load(Ordering::SeqCst))
            .collect()
    }
}

fn router(ip: Ipv4Addr, node_id: usize, live: usize, shared: Shared) -> Router {
    let vars = format!(
        "# TYPE node_id gauge\n\
         node_id{{advertise_addr=\"{ip}:26258\",http_addr=\"{ip}:8080\",sql_addr=\"{ip}:26257\"}} {node_id}\n\
         # TYPE liveness_livenodes gauge\n\
         liveness_livenodes {live}\n"
    );
    Router::new()
        .route("/health", get(health))
        .route("/_status/vars", get(move || async move { vars }))
        .route(
            "/_admin/v1/cluster",
            get(|| async { axum::Json(json!({"clusterId": CLUSTER_ID})) }),
        )
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            |State(s): State<Shared>,
             req: axum::extract::Request,
             next: axum::middleware::Next| async move {
                s.node.requests.fetch_add(1, Ordering::SeqCst);
                next.run(req).await
            },
        ))
        .with_state(shared)
}

async fn health(State(s): State<Shared>) -> axum::Json<serde_json::Value> {
    s.node.rounds.fetch_add(1, Ordering::SeqCst);
    let now = s.in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
    s.in_flight.peak.fetch_max(now, Ordering::SeqCst);
    // Counted out even when the prober gives up and the connection (and this future) goes.
    let _leaving = Leaving(s.in_flight.clone());
    tokio::time::sleep(s.delay).await;
    axum::Json(json!({}))
}

struct Leaving(Arc<InFlight>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}
