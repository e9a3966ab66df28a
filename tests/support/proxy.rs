//! A TCP proxy in front of a server that a test can cut the way a network partition
//! does: [`Proxy::blackhole`] stops forwarding in both directions without closing
//! anything, so neither side learns that the other is gone; [`Proxy::heal`] lets the
//! bytes held back meanwhile through (as TCP would deliver them after a partition).
//! It runs on a thread of its own, so it works under any test runtime.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    port: u16,
    /// True while traffic is held back.
    cut: Arc<watch::Sender<bool>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Listen on a free loopback port and forward every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let port = std_listener.local_addr().unwrap().port();
        let (cut, _) = watch::channel(false);
        let cut = Arc::new(cut);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = {
            let cut = cut.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).unwrap();
                    tokio::select! {
                        _ = stopped => {}
                        _ = accept_loop(listener, upstream, cut) => {}
                    }
                });
            })
        };
        Proxy {
            port,
            cut,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stop forwarding (both ways, every connection, new ones too) without closing.
    pub fn blackhole(&self) {
        self.cut.send_replace(true);
    }

    /// Forward again, the held-back bytes first.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, cut: Arc<watch::Sender<bool>>) {
    while let Ok((client, _)) = listener.accept().await {
        let cut = cut.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_r, client_w) = client.into_split();
            let (server_r, server_w) = server.into_split();
            tokio::join!(
                pump(client_r, server_w, cut.subscribe()),
                pump(server_r, client_w, cut.subscribe())
            );
        });
    }
}

/// Copy one direction, holding the bytes back (not reading, not writing) while cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if cut.wait_for(|c| !*c).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // Bytes read just as the cut began wait for the heal too.
        if cut.wait_for(|c| !*c).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
