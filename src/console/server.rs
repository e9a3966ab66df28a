//! The console's HTTP server: hyper's HTTP/1 on each accepted connection, with bounds
//! that a browser never meets and that an idle or slow client cannot outlast:
//!
//! - A request's headers arrive within `client_timeout`, counted from the connection's
//!   start or from the end of the previous response: an idle kept-alive connection, or
//!   one that sends half a request and stops, is closed when it runs out.
//! - A request, its body included, is answered within [`REQUEST_TIMEOUT`] (a JSON 408
//!   otherwise).
//! - At most `max_connections` at once (by default a share of the open-file limit). At
//!   the cap, a new connection closes the one that has been quiet longest, idle ones
//!   (between requests) first; when every one is busy, new ones wait in the listen
//!   backlog until one ends. So idle sockets cannot use up the descriptors the console
//!   needs for its pages and for Redis.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use futures::task::AtomicWaker;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How long one request may take, reading its body and answering included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// A connection quiet for less than this is not closed to make room (it is likely in
/// the middle of a request).
const SHED_QUIET: Duration = Duration::from_millis(500);
/// Descriptors kept out of the connections' share: Redis, the Kubernetes API, logs.
const RESERVED_FDS: u64 = 64;

/// The server's bounds (see the module comment).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub client_timeout: Duration,
    pub max_connections: usize,
}

/// The default cap: half of what the open-file limit leaves after [`RESERVED_FDS`],
/// between 16 and 4096 (`ulimit -n 256` gives 96).
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct passed; nothing else is touched.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    };
    (soft.saturating_sub(RESERVED_FDS) / 2).clamp(16, 4096) as usize
}

/// What the server knows of one open connection.
struct Conn {
    opened: Instant,
    /// Milliseconds since `opened` of the last byte read or written.
    last_io_ms: AtomicU64,
    /// Between requests: the last I/O was a write (a response), or there was none yet.
    idle: AtomicBool,
    closing: AtomicBool,
    waker: AtomicWaker,
}

impl Conn {
    fn touch(&self, wrote: bool) {
        self.last_io_ms
            .store(self.opened.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.idle.store(wrote, Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        self.opened.elapsed().saturating_sub(Duration::from_millis(
            self.last_io_ms.load(Ordering::Relaxed),
        ))
    }

    fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
        self.waker.wake();
    }
}

/// The open connections.
#[derive(Default)]
struct Registry {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    freed: Notify,
}

impl Registry {
    fn len(&self) -> usize {
        self.conns.lock().expect("connections lock").len()
    }

    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            opened: Instant::now(),
            last_io_ms: AtomicU64::new(0),
            idle: AtomicBool::new(true),
            closing: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        self.conns
            .lock()
            .expect("connections lock")
            .insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.conns.lock().expect("connections lock").remove(&id);
        self.freed.notify_one();
    }

    /// Close the connection quiet longest (idle ones first); false when every one is
    /// busy. It leaves the count at once: its socket closes as its task sees it.
    fn shed_one(&self) -> bool {
        let mut conns = self.conns.lock().expect("connections lock");
        let victim = conns
            .iter()
            .filter(|(_, c)| c.quiet_for() >= SHED_QUIET || c.idle.load(Ordering::Relaxed))
            .max_by_key(|(_, c)| (c.idle.load(Ordering::Relaxed), c.quiet_for()))
            .map(|(id, _)| *id);
        match victim.and_then(|id| conns.remove(&id)) {
            Some(conn) => {
                conn.close();
                true
            }
            None => false,
        }
    }
}

/// A TCP stream that records its last I/O and can be closed from outside.
struct Tracked {
    inner: TcpStream,
    conn: Arc<Conn>,
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed to make room for another connection",
    )
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.conn.waker.register(cx.waker());
        if self.conn.closing.load(Ordering::Relaxed) {
            return Poll::Ready(Err(closed()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.touch(false);
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // One task polls both halves: a write stuck on a client that does not read is
        // woken by a close too.
        self.conn.waker.register(cx.waker());
        if self.conn.closing.load(Ordering::Relaxed) {
            return Poll::Ready(Err(closed()));
        }
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch(true);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A JSON 408: the request (its body, or the answer) took longer than allowed.
fn too_slow() -> Response {
    super::guard::error(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request was not read and answered within {}s",
            REQUEST_TIMEOUT.as_secs()
        ),
    )
}

/// Serve `app` on `listener` within `limits` until `shutdown`; then let the requests
/// in flight finish (5 s at most).
pub async fn run(listener: TcpListener, app: Router, limits: Limits, shutdown: CancellationToken) {
    let registry = Arc::new(Registry::default());
    let tasks = TaskTracker::new();
    let cap = limits.max_connections.max(1);
    'serve: loop {
        while registry.len() >= cap {
            if registry.shed_one() {
                continue;
            }
            tokio::select! {
                _ = registry.freed.notified() => {}
                _ = shutdown.cancelled() => break 'serve,
            }
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (EMFILE) or a connection reset before it was taken:
                // make room if there is a quiet one, and try again shortly.
                tracing::warn!(error = %e, "the console could not accept a connection");
                registry.shed_one();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = shutdown.cancelled() => break,
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, conn) = registry.add();
        let io = TokioIo::new(Tracked {
            inner: stream,
            conn,
        });
        let app = app.clone();
        let registry = registry.clone();
        let shutdown = shutdown.clone();
        tasks.spawn(async move {
            serve_connection(io, peer, app, limits, shutdown).await;
            registry.remove(id);
        });
    }
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await;
}

async fn serve_connection(
    io: TokioIo<Tracked>,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        async move {
            let answered = tokio::time::timeout(REQUEST_TIMEOUT, app.oneshot(req.map(Body::new)));
            Ok::<_, Infallible>(match answered.await {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => too_slow(),
            })
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.client_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => {
            if let Err(e) = served {
                tracing::debug!(error = %e, %peer, "a console connection ended");
            }
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
