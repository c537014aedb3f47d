//! The HTTP/1 server loop, with the bounds `axum::serve` does not set: a client that never
//! finishes its request head is closed after `--header-read-timeout` (hyper enforces it only
//! with a timer, which `axum::serve` does not install), a head larger than `--max-header-bytes`
//! is refused, and no more than `--max-connections` connections are open at once (more are
//! closed as soon as they are accepted). So slow or silent clients hold a bounded number of
//! sockets and buffers for a bounded time.
//!
//! HTTP/1 only: argocd-server's proxy extension, kubelets, Prometheus and browsers all speak it.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// hyper refuses a smaller read buffer (`http1::Builder::max_buf_size`).
const MIN_BUFFER: usize = 8192;

#[derive(clap::Args, Debug, Clone)]
pub struct ConnectionArgs {
    /// Longest a client may take to send a request's head (and to start the next one on a
    /// kept-alive connection); then the connection is closed.
    #[arg(long, env = "WAVEGATE_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers) read, in bytes (at least 8192); a
    /// larger one is answered 431 and the connection closed.
    #[arg(long, env = "WAVEGATE_MAX_HEADER_BYTES", default_value_t = 16384)]
    pub max_header_bytes: usize,
    /// Connections open at once on the API port; more are closed when accepted.
    #[arg(long, env = "WAVEGATE_MAX_CONNECTIONS", default_value_t = 256)]
    pub max_connections: usize,
}

impl Default for ConnectionArgs {
    fn default() -> Self {
        ConnectionArgs {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16384,
            max_connections: 256,
        }
    }
}

/// How long shutdown waits for requests in flight (gate waits are long-polls; their callers
/// retry, as `wavegate wait` does).
const DRAIN: Duration = Duration::from_secs(10);

/// Serve `app` on `listener` until `shutdown` completes, then drain for at most [`DRAIN`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    args: ConnectionArgs,
    on_refused: impl Fn() + Send + 'static,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(args.header_read_timeout)
        .max_buf_size(args.max_header_bytes.max(MIN_BUFFER));
    let open = Arc::new(Semaphore::new(args.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            on_refused();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _permit = permit;
            // Errors here are the client's (reset, timeout, malformed head): nothing to do.
            let _ = conn.await;
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {DRAIN:?}; stopping anyway");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tests::state;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    async fn start(
        args: ConnectionArgs,
    ) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = crate::api::router(state(Duration::from_millis(10)));
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = refused.clone();
        let count = move || {
            r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        };
        tokio::spawn(serve(listener, app, args, count, std::future::pending()));
        (addr, refused)
    }

    /// A connection that has sent part of a request head and then nothing.
    async fn stalled(addr: std::net::SocketAddr, bytes: usize) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
        head.resize(bytes, b'a');
        // A refused connection may already be closed: the write's result does not matter.
        let _ = s.write_all(&head).await;
        s
    }

    /// Whether the server has closed `s` (EOF or reset) within `within`.
    async fn closed(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(within, s.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                // A 408/431 answer before closing: keep reading to the end.
                Ok(Ok(_)) => continue,
            }
        }
    }

    async fn healthz(addr: std::net::SocketAddr) -> Option<Duration> {
        let started = Instant::now();
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(2), s.read_to_string(&mut out))
            .await
            .ok()?
            .ok()?;
        out.starts_with("HTTP/1.1 200").then(|| started.elapsed())
    }

    #[tokio::test]
    async fn never_finished_headers_are_closed_and_connections_are_capped() {
        let args = ConnectionArgs {
            header_read_timeout: Duration::from_secs(1),
            max_header_bytes: 16384,
            max_connections: 20,
        };
        let (addr, refused) = start(args).await;
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(stalled(addr, 4000).await);
        }
        // Over the cap: closed at once.
        let mut extra = stalled(addr, 100).await;
        assert!(closed(&mut extra, Duration::from_millis(500)).await);
        assert!(refused.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        // Each stalled client is closed after the header-read timeout, not held.
        let started = Instant::now();
        for s in &mut held {
            assert!(closed(s, Duration::from_secs(3)).await, "still open");
        }
        assert!(started.elapsed() < Duration::from_secs(3));
        // And the port answers again.
        assert!(healthz(addr).await.is_some(), "/healthz after the attack");
    }

    #[tokio::test]
    async fn a_head_larger_than_the_limit_is_refused() {
        let (addr, _) = start(ConnectionArgs {
            max_header_bytes: 8192,
            ..ConnectionArgs::default()
        })
        .await;
        let mut s = stalled(addr, 64 * 1024).await;
        assert!(closed(&mut s, Duration::from_secs(2)).await);
        assert!(healthz(addr).await.is_some());
    }
}
