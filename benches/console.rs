//! The web console's Redis cost: N queues on one private redis-server, the console
//! (in-process, as `jobqueue ui` runs it) refreshing every 200ms, and P API pollers
//! asking for the overview and queue pages as fast as they get answers. Redis counts the
//! script calls (INFO commandstats, EVALSHA + EVAL: the console calls no script but
//! `stats` when read-only), reported per queue per refresh: 1.00 whatever P is.
//!
//! Then the bytes Redis sends for one poll of a queue page whose queue holds 10 jobs of
//! 4 MiB: read as the console reads the list (the preview script, each payload cut to
//! its first bytes), and as it read it before (one HGETALL per job, whole payloads).
//!
//! `cargo bench --bench console -- [--queues N]` (200 by default, pollers 1, 10, 50).
//! Run without `--bench` (as `cargo test --all-targets` does), it makes a smoke pass
//! with 20 queues and 10 pollers.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use jobqueue::console::{self, Config, Source};
use jobqueue::queue::{Durability, NewJob, Queue};
use support::redis::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const REFRESH: Duration = Duration::from_millis(200);

/// The `stats` calls since the reset: the stats script runs ZCOUNT three times per call
/// (expired, due, orphaned), and no other read of the console does (the queue page reads
/// the ready lists' lengths with LLEN, and its lists call the preview script, so
/// EVALSHA would count them too).
fn script_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let calls: HashMap<&str, u64> = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name, calls.parse().ok()?))
        })
        .collect();
    calls.get("cmdstat_zcount").copied().unwrap_or(0) / ZCOUNT_PER_STATS
}

/// The ZCOUNTs of one `stats` call: expired leases, due delayed jobs, set-aside ids.
const ZCOUNT_PER_STATS: u64 = 3;

async fn get(addr: SocketAddr, path: &str) -> bool {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.is_ok() && out.starts_with(b"HTTP/1.1 200")
}

async fn refreshes(addr: SocketAddr) -> u64 {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET /api/overview HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["refreshes"].as_u64().unwrap()
}

async fn wait_refreshes(addr: SocketAddr, at_least: u64) -> u64 {
    loop {
        let r = refreshes(addr).await;
        if r >= at_least {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One window: `pollers` pollers while the console does `rounds` refreshes. Returns the
/// script calls per queue per refresh and the requests served.
async fn window(
    server: &RedisServer,
    addr: SocketAddr,
    queues: usize,
    pollers: usize,
    rounds: u64,
) -> (f64, u64) {
    let mut conn = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let before = refreshes(addr).await;
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..pollers)
        .map(|i| {
            let (stop, served) = (stop.clone(), served.clone());
            tokio::spawn(async move {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let path = if n.is_multiple_of(2) {
                        "/api/overview".to_string()
                    } else {
                        format!("/api/queue?q=q{:04}", (i * 7) % queues)
                    };
                    if get(addr, &path).await {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let after = wait_refreshes(addr, before + rounds).await;
    let calls = script_calls(&mut conn);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let per = calls as f64 / (queues as f64 * (after - before) as f64);
    (per, served.load(Ordering::Relaxed))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let queues: usize = args
        .iter()
        .position(|a| a == "--queues")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(if full { 200 } else { 20 });
    let pollers: &[usize] = if full { &[1, 10, 50] } else { &[10] };
    let rounds = if full { 10 } else { 3 };

    let server = RedisServer::start();
    let redis = server.redis().await;
    for i in 0..queues {
        let q = Queue::new(redis.clone(), "jq", &format!("q{i:04}")).unwrap();
        q.enqueue(NewJob::new("x")).await.unwrap();
    }
    let shutdown = CancellationToken::new();
    let config = Config {
        listen: SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0),
        allow_writes: false,
        token: None,
        refresh: REFRESH,
        history: Duration::from_secs(60),
        client_timeout: Duration::from_secs(10),
        max_connections: console::server::default_max_connections(),
    };
    let source = Source::redis(redis, "jq", None, Durability::Primary, REFRESH);
    let (addr, server_task) = console::serve(config, source, shutdown.clone())
        .await
        .unwrap();
    wait_refreshes(addr, 2).await;
    println!(
        "console cost: {queues} queues, refresh every {}ms, {rounds} refreshes per window",
        REFRESH.as_millis()
    );
    println!(
        "{:>8}  {:>10}  {:>22}",
        "pollers", "requests", "stats calls/queue/refresh"
    );
    for &p in pollers {
        let (per, served) = window(&server, addr, queues, p, rounds).await;
        println!("{p:>8}  {served:>10}  {per:>22.2}");
        assert!(
            per <= 1.0 + 2.0 / rounds as f64,
            "{per:.2} script calls per queue per refresh with {p} pollers: the cost grew with the pages"
        );
    }
    shutdown.cancel();
    let _ = server_task.await;
    page_bytes(if full { 4 << 20 } else { 256 << 10 }).await;
}

/// Bytes Redis has sent to its clients so far (INFO stats).
fn net_output(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// One queue of 10 jobs of `size` bytes on a redis-server of its own, a console that
/// refreshed once (and not again while measured): the bytes Redis sends for one poll of
/// the queue page (what each open tab costs per refresh), and for the whole hashes the
/// page read before previews were cut in the script.
async fn page_bytes(size: usize) {
    const JOBS: usize = 10;
    let server = RedisServer::start();
    let redis = server.redis().await;
    let queue = Queue::new(redis.clone(), "jq", "big").unwrap();
    let mut ids = Vec::new();
    for i in 0..JOBS {
        let mut payload = format!("{{\"n\":{i},\"blob\":\"").into_bytes();
        payload.resize(size, b'x');
        ids.push(queue.enqueue(NewJob::new(payload)).await.unwrap().id);
    }
    let shutdown = CancellationToken::new();
    let config = Config {
        listen: SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0),
        allow_writes: false,
        token: None,
        refresh: Duration::from_secs(3600),
        history: Duration::from_secs(60),
        client_timeout: Duration::from_secs(10),
        max_connections: console::server::default_max_connections(),
    };
    let source = Source::redis(
        redis,
        "jq",
        Some(vec!["big".into()]),
        Durability::Primary,
        REFRESH,
    );
    let (addr, server_task) = console::serve(config, source, shutdown.clone())
        .await
        .unwrap();
    wait_refreshes(addr, 1).await;
    let mut conn = server.conn();
    let before = net_output(&mut conn);
    assert!(
        get(addr, "/api/queue?q=big").await,
        "the queue page answers"
    );
    let now = net_output(&mut conn) - before;
    let before = net_output(&mut conn);
    for id in &ids {
        let _: redis::Value = redis::cmd("HGETALL")
            .arg(queue.keys().job_key(id.as_bytes()))
            .query(&mut conn)
            .unwrap();
    }
    let whole = net_output(&mut conn) - before;
    println!(
        "queue page poll, {JOBS} pending jobs of {} KiB: Redis sent {now} bytes (preview \
         script); {whole} bytes as one HGETALL per job (before)",
        size >> 10
    );
    assert!(
        now < 64 * 1024,
        "one queue page poll made Redis send {now} bytes: previews are not cut in the script"
    );
    shutdown.cancel();
    let _ = server_task.await;
}
