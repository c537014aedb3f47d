//! Stand-in CockroachDB nodes for the demo: serves `/health?ready=1`, `/_status/vars` and
//! `/_admin/v1/cluster` on loopback addresses used as pod IPs, as the e2e tests do.
//!
//! Usage: `cargo run --example crdb-standin -- 127.0.0.2:8080=1,1,<cluster-id> 127.0.0.3:8080=1,1,<id>`
//! (`node_id,live_nodes,cluster_id` per node; `wait` instead serves 503 "waiting for init").

#[path = "../tests/support/crdb_standin.rs"]
mod crdb_standin;

use crdb_standin::{CrdbStandin, NodeState};
use std::net::SocketAddrV4;

#[tokio::main]
async fn main() {
    let mut nodes = Vec::new();
    for arg in std::env::args().skip(1) {
        let Some((addr, state)) = arg.split_once('=') else {
            eprintln!(
                "crdb-standin: {arg:?}: expected ip:port=node,live,cluster-id or ip:port=wait"
            );
            std::process::exit(2);
        };
        let Ok(addr) = addr.parse::<SocketAddrV4>() else {
            eprintln!("crdb-standin: {addr:?} is not ip:port");
            std::process::exit(2);
        };
        let state = if state == "wait" {
            NodeState::waiting_for_init()
        } else {
            let parts: Vec<&str> = state.splitn(3, ',').collect();
            match parts.as_slice() {
                [node, live, id] => match (node.parse(), live.parse()) {
                    (Ok(node), Ok(live)) => NodeState::ready(node, live, id),
                    _ => {
                        eprintln!("crdb-standin: {state:?}: node and live must be numbers");
                        std::process::exit(2);
                    }
                },
                _ => {
                    eprintln!("crdb-standin: {state:?}: expected node,live,cluster-id");
                    std::process::exit(2);
                }
            }
        };
        let standin = CrdbStandin::start(*addr.ip(), addr.port()).await;
        standin.set(state);
        eprintln!("crdb-standin: serving {}", standin.addr());
        nodes.push(standin);
    }
    if nodes.is_empty() {
        eprintln!("crdb-standin: no nodes given");
        std::process::exit(2);
    }
    let _ = tokio::signal::ctrl_c().await;
}
