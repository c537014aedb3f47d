//! The HTTP/1 server loop, with the bounds `axum::serve` does not set: a client that never
//! finishes its request head is closed after `--header-read-timeout` (hyper enforces it only
//! with a timer, which `axum::serve` does not install), a head larger than `--max-header-bytes`
//! is refused, and no more than `--max-connections` connections are open at once (more are
//! closed as soon as they are accepted). So slow or silent clients hold a bounded number of
//! sockets and buffers for a bounded time.
//!
//! The monitoring port adds two bounds of its own ([`ConnectionArgs::monitoring`]): its few
//! connection places could otherwise be held by anything in the monitoring namespace that the
//! NetworkPolicy lets in — idle sockets, or a client that pipelines requests and never reads
//! the answers (hyper has no write timeout), which the header timeout never ends — and the
//! kubelet's probes, refused, would restart the pod. So a connection that moves no byte for
//! `stall_timeout` is closed; no one peer address (one pod) holds more than half the places, so
//! the kubelet's (the node's address) always finds one free of it; and when every place is taken
//! a new connection closes the one that has moved nothing for longest (at least a second) among
//! those of the peer holding most, instead of being refused. Several pods flooding the port with
//! new connections (not slow ones) can still crowd a probe out now and then: that costs them CPU
//! at accept, not one quiet socket per place.
//!
//! HTTP/1 only: argocd-server's proxy extension, kubelets, Prometheus and browsers all speak it.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
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
    /// A connection that moves no byte either way for this long is closed (`None`: only the
    /// header timeout). Off on the API port, whose gate waits are quiet long-polls.
    #[arg(skip)]
    pub stall_timeout: Option<Duration>,
    /// At the connection cap, close the connection that has moved nothing for longest
    /// instead of refusing the new one.
    #[arg(skip)]
    pub evict_stalest: bool,
}

impl ConnectionArgs {
    /// The monitoring port's bounds: few places (only Prometheus and the kubelet are let in),
    /// heads within 5 s, no connection quiet for 5 s, and the stalest closed at the cap.
    pub fn monitoring(&self) -> ConnectionArgs {
        ConnectionArgs {
            header_read_timeout: self.header_read_timeout.min(MONITORING_QUIET),
            max_header_bytes: self.max_header_bytes,
            max_connections: 16,
            stall_timeout: Some(MONITORING_QUIET),
            evict_stalest: true,
        }
    }
}

/// How long a monitoring connection may send nothing or leave its answer unread. A kubelet
/// probe or a Prometheus scrape is done in milliseconds.
const MONITORING_QUIET: Duration = Duration::from_secs(5);

impl Default for ConnectionArgs {
    fn default() -> Self {
        ConnectionArgs {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16384,
            max_connections: 256,
            stall_timeout: None,
            evict_stalest: false,
        }
    }
}

/// How long shutdown waits for requests in flight (gate waits are long-polls; their callers
/// retry, as `wavegate wait` does).
const DRAIN: Duration = Duration::from_secs(10);

/// How long a new connection waits for the place of the one it closed.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// Only a connection quiet at least this long is closed for a newcomer: a probe or a scrape in
/// flight (served within milliseconds) is never displaced by connections arriving after it.
const EVICTABLE_AFTER: Duration = Duration::from_secs(1);

/// The open connections: when each last moved a byte, and how to close it.
#[derive(Default)]
struct Live {
    started: std::sync::OnceLock<tokio::time::Instant>,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Conn>>,
}

/// One open connection: its peer, when it last moved a byte, and how to close it.
struct Conn {
    ip: std::net::IpAddr,
    moved: Arc<AtomicU64>,
    close: tokio_util::sync::CancellationToken,
}

impl Live {
    /// Milliseconds since the server started.
    fn now(&self) -> u64 {
        let started = *self.started.get_or_init(tokio::time::Instant::now);
        started.elapsed().as_millis() as u64
    }

    fn register(
        &self,
        ip: std::net::IpAddr,
        moved: Arc<AtomicU64>,
        close: tokio_util::sync::CancellationToken,
    ) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Conn { ip, moved, close });
        id
    }

    /// Connections open from `ip`.
    fn held_by(&self, ip: std::net::IpAddr) -> usize {
        self.lock().values().filter(|c| c.ip == ip).count()
    }

    fn forget(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Close, among the connections of the peer holding most, the one that has moved nothing
    /// for longest, if it has been quiet for [`EVICTABLE_AFTER`]; false when there is none.
    fn close_stalest(&self) -> bool {
        let before = self
            .now()
            .saturating_sub(EVICTABLE_AFTER.as_millis() as u64);
        let open = self.lock();
        let mut held: HashMap<std::net::IpAddr, usize> = HashMap::new();
        for c in open.values() {
            *held.entry(c.ip).or_default() += 1;
        }
        let stalest = open
            .values()
            .filter(|c| !c.close.is_cancelled() && c.moved.load(Ordering::Relaxed) <= before)
            .min_by_key(|c| {
                (
                    std::cmp::Reverse(held.get(&c.ip).copied().unwrap_or(0)),
                    c.moved.load(Ordering::Relaxed),
                )
            });
        match stalest {
            Some(c) => {
                c.close.cancel();
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Conn>> {
        crate::locks::lock(&self.open)
    }
}

/// Ends once the connection has moved no byte for `stall` (never when `None`).
async fn stalled(live: &Live, moved: &AtomicU64, stall: Option<Duration>) {
    let Some(stall) = stall else {
        return std::future::pending().await;
    };
    let limit = stall.as_millis() as u64;
    loop {
        let quiet = live.now().saturating_sub(moved.load(Ordering::Relaxed));
        if quiet >= limit {
            return;
        }
        tokio::time::sleep(Duration::from_millis(limit - quiet)).await;
    }
}

/// A socket that stamps the time whenever a byte moves either way.
struct Stamped {
    inner: TcpStream,
    moved: Arc<AtomicU64>,
    live: Arc<Live>,
}

impl Stamped {
    fn stamp(&self) {
        self.moved.store(self.live.now(), Ordering::Relaxed);
    }
}

impl AsyncRead for Stamped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.stamp();
        }
        polled
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.stamp();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

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
    let live = Arc::new(Live::default());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
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
        let ip = peer.ip();
        let per_peer = if args.evict_stalest {
            (args.max_connections / 2).max(1)
        } else {
            usize::MAX
        };
        let permit = match open.clone().try_acquire_owned() {
            _ if live.held_by(ip) >= per_peer => None,
            Ok(p) => Some(p),
            Err(_) if args.evict_stalest && live.close_stalest() => {
                // The closed connection's task ends at once and gives its place back.
                tokio::time::timeout(EVICTION_WAIT, open.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        let Some(permit) = permit else {
            on_refused();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        // The per-caller shares tell direct callers apart by it (`super::limits::caller`).
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(super::limits::Peer(ip));
                req
            },
        ));
        let moved = Arc::new(AtomicU64::new(live.now()));
        let io = Stamped {
            inner: stream,
            moved: moved.clone(),
            live: live.clone(),
        };
        let conn = http.serve_connection(TokioIo::new(io), service);
        let conn = graceful.watch(conn);
        let close = tokio_util::sync::CancellationToken::new();
        let id = live.register(ip, moved.clone(), close.clone());
        let (live, stall) = (live.clone(), args.stall_timeout);
        tokio::spawn(async move {
            let _permit = permit;
            // Errors here are the client's (reset, timeout, malformed head): nothing to do.
            tokio::select! {
                _ = conn => {}
                () = close.cancelled() => {}
                () = stalled(&live, &moved, stall) => {}
            }
            live.forget(id);
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
            ..ConnectionArgs::default()
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
