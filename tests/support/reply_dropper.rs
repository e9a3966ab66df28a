//! A TCP proxy in front of a redis-server that loses replies on purpose: a request that
//! contains a marker (e.g. the claim script's SHA) is forwarded, then the connection is
//! cut before any reply reaches the client. The script may have run; the client only
//! sees a broken connection. Everything else is forwarded as it is. Several markers
//! (`start_with`) are cut each by its own rule.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

struct Marker {
    bytes: Vec<u8>,
    /// Cut this many of the next requests with this marker.
    next: AtomicU64,
    /// Then cut each with this probability, in thousandths.
    per_mille: AtomicU64,
}

struct State {
    upstream: SocketAddr,
    markers: Vec<Marker>,
    /// Requests that contain one of these are cut, every one (not counted as marked).
    always: std::sync::Mutex<Vec<Vec<u8>>>,
    /// Marked requests seen and cut.
    seen: AtomicU64,
    cuts: AtomicU64,
}

impl State {
    /// Whether to cut a request of these bytes (the first marker it contains decides).
    fn should_cut(&self, chunk: &[u8]) -> bool {
        let Some(marker) = self.markers.iter().find(|m| contains(chunk, &m.bytes)) else {
            return false;
        };
        self.seen.fetch_add(1, Ordering::SeqCst);
        let armed = marker
            .next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        armed || rand::rng().random_range(0..1000) < marker.per_mille.load(Ordering::SeqCst)
    }
}

pub struct ReplyDropper {
    port: u16,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl ReplyDropper {
    /// Listen on a free loopback port in front of `127.0.0.1:upstream_port`; requests
    /// that contain `marker` may lose their reply.
    pub async fn start(upstream_port: u16, marker: &[u8]) -> ReplyDropper {
        Self::start_with(upstream_port, &[marker]).await
    }

    /// As `start`, with several markers, each cut by its own rule (`cut_next_of`,
    /// `cut_at_random_of`, by its index in `markers`).
    pub async fn start_with(upstream_port: u16, markers: &[&[u8]]) -> ReplyDropper {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            upstream: SocketAddr::from(([127, 0, 0, 1], upstream_port)),
            markers: markers
                .iter()
                .map(|m| Marker {
                    bytes: m.to_vec(),
                    next: AtomicU64::new(0),
                    per_mille: AtomicU64::new(0),
                })
                .collect(),
            seen: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
            always: std::sync::Mutex::new(Vec::new()),
        });
        let accepting = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, accepting.clone()));
            }
        });
        ReplyDropper {
            port,
            state,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Cut the connection of the next `n` marked requests after forwarding them.
    pub fn cut_next(&self, n: u64) {
        self.cut_next_of(0, n);
    }

    /// Cut each marked request with probability `per_mille` / 1000.
    pub fn cut_at_random(&self, per_mille: u64) {
        self.cut_at_random_of(0, per_mille);
    }

    /// `cut_next` for the requests with marker `i`.
    pub fn cut_next_of(&self, i: usize, n: u64) {
        self.state.markers[i].next.store(n, Ordering::SeqCst);
    }

    /// `cut_at_random` for the requests with marker `i`.
    pub fn cut_at_random_of(&self, i: usize, per_mille: u64) {
        self.state.markers[i]
            .per_mille
            .store(per_mille, Ordering::SeqCst);
    }

    /// Cut every request that contains `marker` from now on (e.g. every renewal of the
    /// clients behind the proxy, so that only their local deadlines end their leases).
    pub fn always_cut(&self, marker: &[u8]) {
        self.state.always.lock().unwrap().push(marker.to_vec());
    }

    /// Marked requests seen so far.
    pub fn seen(&self) -> u64 {
        self.state.seen.load(Ordering::SeqCst)
    }

    /// Marked requests whose reply was cut so far.
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for ReplyDropper {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

async fn serve(client: TcpStream, state: Arc<State>) {
    let Ok(upstream) = TcpStream::connect(state.upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut up_read, mut up_write) = upstream.into_split();
    // Once a marked request is cut, no byte from the server reaches the client again.
    let cut = Arc::new(AtomicBool::new(false));
    let cutting = cut.clone();
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = up_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            if cutting.load(Ordering::SeqCst) {
                continue; // lost: the connection is about to be cut
            }
            client_write.write_all(&buf[..n]).await?;
        }
    };
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            let chunk = &buf[..n];
            let always = state
                .always
                .lock()
                .unwrap()
                .iter()
                .any(|m| contains(chunk, m));
            let cut_this = always || state.should_cut(chunk);
            if cut_this {
                cut.store(true, Ordering::SeqCst);
                state.cuts.fetch_add(1, Ordering::SeqCst);
            }
            up_write.write_all(chunk).await?;
            if cut_this {
                // Give the server the time to run it; its reply is never forwarded.
                tokio::time::sleep(Duration::from_millis(30)).await;
                return Ok(());
            }
        }
    };
    // The client's side ends the connection (a cut, or the client closing); the
    // server's side ends it when the server closes.
    tokio::select! {
        _ = down => {}
        _ = up => {}
    }
}
