//! `make bench-peers`: jobqueue and BullMQ, the same workload on the same redis-server.
//!
//! One private redis-server (`--save "" --appendonly no`, a free loopback port), FLUSHALL
//! before every run, the two systems one after the other: enqueue N jobs one per call and
//! in batches of 1000; process N jobs with an empty handler at concurrency 1, 16 and 64;
//! bytes per waiting job (`INFO memory` used_memory, less the clients' buffers, before and
//! after the batched enqueue, divided by N; a 45-byte JSON payload on both sides).
//!
//! jobqueue's side is this process: `Queue::enqueue` / `enqueue_many`, the worker runtime
//! (`jobqueue::worker::Worker`, an empty handler, the given concurrency, everything else
//! its defaults), as a second line batched claim: that many tasks each claiming 32
//! jobs and acking them in one call (`make bench`'s claim+ack at batch 32), and as a
//! third the same batches through `settle_claim`: each call acks a task's previous 32
//! and claims its next 32 (one call per batch, as a batching consumer makes). BullMQ's side
//! is `benches/peers/bullmq.mjs` under node (BullMQ pinned in benches/peers/package.json,
//! installed by `make bench-peers` into benches/peers/node_modules), one process per run.
//! Beside BullMQ's worker, the Node.js package's (clients/node, built by `make
//! bench-peers`) runs the same processing workload at concurrency 1 and 64
//! (`benches/peers/jobqueue-node.mjs`), its jobs enqueued by this process, and is compared
//! with the same run's BullMQ figure.
//!
//! `priorities`: the same with priorities, beside BullMQ's: N jobs enqueued in batches of
//! 100, the k-th batch of priority k mod 10 (BullMQ: 10 - k mod 10, its 1 the highest),
//! then processed at concurrency 16 (highest priority first on both sides).
//!
//! Rate limited (`ratelimit`): N/10 jobs (at least 200, at most 5000) at a limit of a
//! fifth of them per second, one worker at concurrency 16 on each side (jobqueue's
//! `rate_limit`, BullMQ's Worker `limiter`): the seconds to finish (about 4 when the
//! limit holds) and the Redis commands per job (`INFO commandstats`: what a limited
//! worker costs the server while it waits).
//!
//! `cargo bench --bench peers -- [--jobs N] [--quick] [--only enqueue,process,memory,priorities,ratelimit]`
//! N defaults to 50,000 (a few minutes); `--quick` is N/10. Run without `--bench` (as
//! `cargo test --all-targets` does) it makes a smoke pass of 500 jobs, BullMQ's side only
//! when it is installed.

#[path = "../tests/support/redis.rs"]
mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobqueue::queue::{Lease, NewJob, Queue, Settle, Settled, new_token};
use serde_json::json;

use common::RedisServer;

const TAG: &str = "bench";
const CONCURRENCY: [usize; 3] = [1, 16, 64];
const CLAIM_BATCH: usize = 32;
/// The batch size of the priorities' runs: one priority per batch, ten levels.
const PRIORITY_BATCH: usize = 100;
/// The concurrency of the priorities' processing run.
const PRIORITY_CONCURRENCY: usize = 16;

/// The 45-byte JSON payload both sides send: BullMQ's JSON.stringify of its job data
/// gives the same bytes.
fn payload(i: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"to":"u{:07}@example.com","tpl":"welcome"}}"#,
        i % 10_000_000
    ))
}

// ---------------------------------------------------------------------------------------
// The server

struct Server {
    redis: RedisServer,
    conn: redis::Connection,
}

impl Server {
    fn info(&mut self, section: &str) -> HashMap<String, String> {
        let text: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn)
            .unwrap();
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect()
    }

    fn flush(&mut self) {
        let _: () = redis::cmd("FLUSHALL").query(&mut self.conn).unwrap();
    }

    /// Bytes the data takes: used_memory less the clients' buffers.
    fn used(&mut self) -> i64 {
        let i = self.info("memory");
        let get = |k: &str| i.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        get("used_memory") - get("mem_clients_normal")
    }

    /// Redis CPU seconds so far (user + system).
    fn cpu(&mut self) -> f64 {
        let i = self.info("cpu");
        let get = |k: &str| i.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        get("used_cpu_user") + get("used_cpu_sys")
    }

    /// Commands Redis ran since the last `CONFIG RESETSTAT` (inside scripts included, the
    /// bench's own INFO and CONFIG left out).
    fn commands(&mut self) -> u64 {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn)
            .unwrap();
        text.lines()
            .filter(|l| !l.starts_with("cmdstat_info:") && !l.starts_with("cmdstat_config"))
            .filter_map(|l| {
                l.split_once(":calls=")?
                    .1
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    fn reset_stats(&mut self) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.conn)
            .unwrap();
    }

    fn keys(&mut self) -> i64 {
        redis::cmd("DBSIZE").query(&mut self.conn).unwrap()
    }
}

/// A window as the tables name it: `1s`, `250ms`.
fn duration_text(d: Duration) -> String {
    jobqueue::duration::format(d)
}

/// One timed run: jobs, wall seconds, Redis CPU seconds.
#[derive(Clone, Copy, Default)]
struct Run {
    jobs: usize,
    seconds: f64,
    redis_cpu: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.jobs as f64 / self.seconds.max(1e-9)
    }
    fn redis_us_per_job(&self) -> f64 {
        self.redis_cpu * 1e6 / self.jobs.max(1) as f64
    }
}

// ---------------------------------------------------------------------------------------
// jobqueue's side

async fn fill(q: &Queue, n: usize) {
    let mut i = 0;
    while i < n {
        let k = (n - i).min(1000);
        let jobs: Vec<NewJob> = (i..i + k).map(|j| NewJob::new(payload(j))).collect();
        q.enqueue_many(jobs).await.unwrap();
        i += k;
    }
}

/// Batches of [`PRIORITY_BATCH`], the k-th of priority k mod 10.
async fn fill_prioritized(q: &Queue, n: usize) {
    let mut i = 0;
    while i < n {
        let k = (n - i).min(PRIORITY_BATCH);
        let p = ((i / PRIORITY_BATCH) % 10) as u8;
        let jobs: Vec<NewJob> = (i..i + k)
            .map(|j| NewJob::new(payload(j)).priority(p))
            .collect();
        q.enqueue_many(jobs).await.unwrap();
        i += k;
    }
}

async fn jq_enqueue_prioritized(s: &mut Server, q: &Queue, jobs: usize) -> Run {
    let cpu = s.cpu();
    let start = Instant::now();
    fill_prioritized(q, jobs).await;
    Run {
        jobs,
        seconds: start.elapsed().as_secs_f64(),
        redis_cpu: s.cpu() - cpu,
    }
}

async fn jq_enqueue(s: &mut Server, q: &Queue, jobs: usize, batch: usize) -> Run {
    let cpu = s.cpu();
    let start = Instant::now();
    if batch == 1 {
        for i in 0..jobs {
            q.enqueue(NewJob::new(payload(i))).await.unwrap();
        }
    } else {
        fill(q, jobs).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    Run {
        jobs,
        seconds,
        redis_cpu: s.cpu() - cpu,
    }
}

/// The worker runtime with an empty handler until it has acked every job of the backlog.
async fn jq_worker(s: &mut Server, q: &Queue, jobs: usize, concurrency: usize) -> Run {
    use jobqueue::worker::Worker;
    let worker = Worker::builder(q.clone())
        .handle_signals(false)
        .concurrency(concurrency)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let stats = worker.stats();
    let cpu = s.cpu();
    let start = Instant::now();
    let run = tokio::spawn(worker.run(|_lease, _ctx| async { Ok(()) }));
    let deadline = Instant::now() + Duration::from_secs(3600);
    while stats.get().acked < jobs as u64 {
        assert!(
            Instant::now() < deadline,
            "the worker stalled: {:?}",
            stats.get()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let redis_cpu = s.cpu() - cpu;
    stop.cancel();
    let end = run.await.unwrap();
    assert_eq!(end.acked, jobs as u64, "the worker acked every job once");
    Run {
        jobs,
        seconds,
        redis_cpu,
    }
}

/// `tasks` tasks each claiming `CLAIM_BATCH` jobs and acking them in one call, until the
/// backlog is gone.
/// The end of a run of batching tasks: wait for them, check that every job was done
/// once, and time it.
async fn batched_run(
    s: &mut Server,
    handles: Vec<tokio::task::JoinHandle<()>>,
    start: Instant,
    cpu: f64,
    done: &AtomicUsize,
    jobs: usize,
) -> Run {
    for h in handles {
        h.await.unwrap();
    }
    let seconds = start.elapsed().as_secs_f64();
    let redis_cpu = s.cpu() - cpu;
    assert_eq!(
        done.load(Ordering::Relaxed),
        jobs,
        "every job was claimed and acked once"
    );
    Run {
        jobs,
        seconds,
        redis_cpu,
    }
}

async fn jq_batched(s: &mut Server, q: &Queue, jobs: usize, tasks: usize) -> Run {
    let done = Arc::new(AtomicUsize::new(0));
    let cpu = s.cpu();
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (q, done) = (q.clone(), done.clone());
            tokio::spawn(async move {
                let worker = format!("bench-{t}");
                loop {
                    let leases = q.claim(CLAIM_BATCH, &worker, None).await.unwrap();
                    if leases.is_empty() {
                        break;
                    }
                    let refs: Vec<_> = leases.iter().map(Lease::lease_ref).collect();
                    let acked = q.ack_many(&refs).await.unwrap();
                    assert!(acked.iter().all(|a| *a), "every lease was acked");
                    done.fetch_add(leases.len(), Ordering::Relaxed);
                }
            })
        })
        .collect();
    batched_run(s, handles, start, cpu, &done, jobs).await
}

// ---------------------------------------------------------------------------------------
// BullMQ's side

struct Bull {
    node: String,
    script: PathBuf,
    version: String,
}

impl Bull {
    /// BullMQ as installed by `make bench-peers`, or why it cannot run.
    fn find() -> Result<Bull, String> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/peers");
        let installed = dir.join("node_modules/bullmq/package.json");
        let text = std::fs::read_to_string(&installed).map_err(|_| {
            format!(
                "BullMQ is not installed in {} (make bench-peers installs it)",
                dir.display()
            )
        })?;
        let version = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["version"].as_str().map(String::from))
            .unwrap_or_default();
        let node = std::env::var("NODE").unwrap_or_else(|_| "node".into());
        Command::new(&node)
            .arg("--version")
            .output()
            .map_err(|e| format!("cannot run {node} ({e}); install Node.js 18 or newer"))?;
        Ok(Bull {
            node,
            script: dir.join("bullmq.mjs"),
            version,
        })
    }

    fn run(&self, port: u16, args: &[&str]) -> f64 {
        let out = Command::new(&self.node)
            .arg(&self.script)
            .args(args)
            .args(["--port", &port.to_string()])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} ({e})", self.node));
        assert!(
            out.status.success(),
            "bullmq.mjs {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = line
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("bullmq.mjs {args:?} printed no result: {line}"));
        v["seconds"]
            .as_f64()
            .expect("seconds in bullmq.mjs's result")
    }

    fn enqueue(&self, s: &mut Server, jobs: usize, batch: usize) -> Run {
        self.enqueue_with(s, jobs, batch, false)
    }

    /// With `priorities`: the k-th batch of priority 10 - k mod 10.
    fn enqueue_with(&self, s: &mut Server, jobs: usize, batch: usize, priorities: bool) -> Run {
        let cpu = s.cpu();
        let seconds = self.run(
            s.redis.port,
            &[
                "enqueue",
                "--jobs",
                &jobs.to_string(),
                "--batch",
                &batch.to_string(),
                "--priorities",
                if priorities { "1" } else { "0" },
            ],
        );
        Run {
            jobs,
            seconds,
            redis_cpu: s.cpu() - cpu,
        }
    }

    /// `process` with BullMQ's limiter: at most `max` jobs per `per`.
    fn limited(
        &self,
        s: &mut Server,
        jobs: usize,
        concurrency: usize,
        max: u32,
        per: Duration,
    ) -> (Run, u64) {
        self.enqueue(s, jobs, 1000);
        s.reset_stats();
        let cpu = s.cpu();
        let seconds = self.run(
            s.redis.port,
            &[
                "process",
                "--jobs",
                &jobs.to_string(),
                "--concurrency",
                &concurrency.to_string(),
                "--fill",
                "0",
                "--max",
                &max.to_string(),
                "--duration",
                &per.as_millis().to_string(),
            ],
        );
        let run = Run {
            jobs,
            seconds,
            redis_cpu: s.cpu() - cpu,
        };
        (run, s.commands())
    }

    fn process(&self, s: &mut Server, jobs: usize, concurrency: usize) -> Run {
        self.process_with(s, jobs, concurrency, false)
    }

    /// With `priorities`: the backlog added as [`Bull::enqueue_with`] adds it, in batches
    /// of [`PRIORITY_BATCH`].
    fn process_with(
        &self,
        s: &mut Server,
        jobs: usize,
        concurrency: usize,
        priorities: bool,
    ) -> Run {
        if priorities {
            self.enqueue_with(s, jobs, PRIORITY_BATCH, true);
        } else {
            self.enqueue(s, jobs, 1000);
        }
        let cpu = s.cpu();
        let seconds = self.run(
            s.redis.port,
            &[
                "process",
                "--jobs",
                &jobs.to_string(),
                "--concurrency",
                &concurrency.to_string(),
                "--fill",
                "0",
            ],
        );
        Run {
            jobs,
            seconds,
            redis_cpu: s.cpu() - cpu,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The Node.js package's worker (clients/node)

/// Concurrencies the Node package's worker runs at, beside BullMQ's.
const NODE_CONCURRENCY: [usize; 2] = [1, 64];

struct NodeClient {
    node: String,
    script: PathBuf,
}

impl NodeClient {
    /// The package as `make bench-peers` builds it (clients/node/dist), or why it cannot run.
    fn find() -> Result<NodeClient, String> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let built = root.join("clients/node/dist/src/index.js");
        if !built.exists() {
            return Err(format!(
                "the Node package is not built ({} is missing; make bench-peers builds it)",
                built.display()
            ));
        }
        Ok(NodeClient {
            node: std::env::var("NODE").unwrap_or_else(|_| "node".into()),
            script: root.join("benches/peers/jobqueue-node.mjs"),
        })
    }

    /// `jobs` jobs already in the queue, processed by a Node worker at `concurrency`.
    fn process(&self, s: &mut Server, jobs: usize, concurrency: usize) -> Run {
        let cpu = s.cpu();
        let out = Command::new(&self.node)
            .arg(&self.script)
            .args(["process", "--jobs", &jobs.to_string()])
            .args(["--concurrency", &concurrency.to_string()])
            .args(["--port", &s.redis.port.to_string(), "--tag", TAG])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} ({e})", self.node));
        assert!(
            out.status.success(),
            "jobqueue-node.mjs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = line
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("jobqueue-node.mjs printed no result: {line}"));
        Run {
            jobs,
            seconds: v["seconds"].as_f64().expect("seconds in its result"),
            redis_cpu: s.cpu() - cpu,
        }
    }
}

// ---------------------------------------------------------------------------------------
/// `tasks` tasks each ending their previous `CLAIM_BATCH` leases and claiming the next
/// ones in one `settle_claim` call, until the backlog is gone.
async fn jq_settled(s: &mut Server, q: &Queue, jobs: usize, tasks: usize) -> Run {
    let done = Arc::new(AtomicUsize::new(0));
    let cpu = s.cpu();
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (q, done) = (q.clone(), done.clone());
            tokio::spawn(async move {
                let worker = format!("bench-{t}");
                let mut held: Vec<Lease> = Vec::new();
                loop {
                    let settles: Vec<Settle> =
                        held.iter().map(|l| Settle::Ack(l.lease_ref())).collect();
                    let reply = q
                        .settle_claim(&new_token(), &settles, CLAIM_BATCH, &worker, None)
                        .await
                        .unwrap();
                    assert!(
                        reply.settled.iter().all(|s| *s == Settled::Acked),
                        "every lease was acked"
                    );
                    done.fetch_add(held.len(), Ordering::Relaxed);
                    held = reply.claimed.leases;
                    if held.is_empty() {
                        break;
                    }
                }
            })
        })
        .collect();
    batched_run(s, handles, start, cpu, &done, jobs).await
}

// The table

/// One workload: jobqueue's figure(s) and BullMQ's.
struct Line {
    name: String,
    what: String,
    unit: &'static str,
    jq: f64,
    jq_batched: Option<f64>,
    /// Batches of 32 through settle_claim.
    jq_settled: Option<f64>,
    bull: Option<f64>,
    /// Redis CPU µs per job: jobqueue, jobqueue batched, batched through settle_claim,
    /// BullMQ.
    cpu: [Option<f64>; 4],
}

fn human(v: f64) -> String {
    if v >= 10_000.0 {
        let s = format!("{:.0}", v);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v >= 100.0 {
        format!("{:.0}", v)
    } else {
        format!("{:.1}", v)
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => String::new(),
    }
}

fn print_table(lines: &[Line]) {
    let head = [
        "workload",
        "unit",
        "jobqueue",
        "jobqueue batch 32",
        "batch 32 settle_claim",
        "BullMQ",
        "jobqueue ÷ BullMQ",
        "batch 32 ÷ BullMQ",
        "settle_claim ÷ BullMQ",
        "Redis CPU µs/job (jq / b32 / settle / BullMQ)",
    ];
    let opt = |v: Option<f64>| v.map(human).unwrap_or_else(|| "–".into());
    let rows: Vec<[String; 10]> = lines
        .iter()
        .map(|l| {
            [
                l.what.clone(),
                l.unit.to_string(),
                human(l.jq),
                l.jq_batched.map(human).unwrap_or_default(),
                l.jq_settled.map(human).unwrap_or_default(),
                opt(l.bull),
                ratio(Some(l.jq), l.bull),
                ratio(l.jq_batched, l.bull),
                ratio(l.jq_settled, l.bull),
                if l.cpu.iter().any(Option::is_some) {
                    l.cpu.map(opt).join(" / ")
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    let mut width = head.map(|h| h.chars().count());
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let fmt = |cols: &[String]| {
        let mut s = String::from("|");
        for (i, c) in cols.iter().enumerate() {
            let pad = " ".repeat(width[i] - c.chars().count());
            if i < 2 {
                s.push_str(&format!(" {c}{pad} |"));
            } else {
                s.push_str(&format!(" {pad}{c} |"));
            }
        }
        s
    };
    println!("{}", fmt(&head.map(String::from)));
    let sep: Vec<String> = width
        .iter()
        .enumerate()
        .map(|(i, w)| {
            if i < 2 {
                "-".repeat(*w)
            } else {
                format!("{}:", "-".repeat(w - 1))
            }
        })
        .collect();
    println!(
        "|{}|",
        sep.iter()
            .map(|s| format!(" {s} "))
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in &rows {
        println!("{}", fmt(r));
    }
}

// ---------------------------------------------------------------------------------------

struct Args {
    jobs: usize,
    smoke: bool,
    only: Option<Vec<String>>,
}

fn args() -> Args {
    let mut a = Args {
        jobs: 50_000,
        smoke: true,
        only: None,
    };
    let mut quick = false;
    let mut jobs = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--bench" => a.smoke = false,
            "--quick" => quick = true,
            "--jobs" => {
                let v = it.next().unwrap_or_default();
                jobs = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .unwrap_or_else(|| {
                            panic!("--jobs takes a positive number of jobs, not {v:?}")
                        }),
                );
            }
            "--only" => a.only = it.next().map(|s| s.split(',').map(String::from).collect()),
            _ => {}
        }
    }
    a.jobs = match (jobs, quick, a.smoke) {
        (Some(n), _, _) => n,
        (None, true, _) => a.jobs / 10,
        (None, false, true) => 500,
        (None, false, false) => a.jobs,
    };
    a
}

impl Args {
    fn runs(&self, section: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == section))
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    let n = args.jobs;
    let bull = match Bull::find() {
        Ok(b) => Some(b),
        Err(why) if args.smoke => {
            println!("bench-peers: BullMQ's side skipped: {why}");
            None
        }
        Err(why) => panic!("{why}"),
    };
    let node_client = match NodeClient::find() {
        Ok(n) => Some(n),
        Err(why) if args.smoke => {
            println!("bench-peers: the Node package's side skipped: {why}");
            None
        }
        Err(why) => panic!("{why}"),
    };
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let redis = RedisServer::start();
    let conn = redis.conn();
    let mut s = Server { redis, conn };
    let server = s.info("server");
    let machine = json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_at_start": load,
        "redis_version": server.get("redis_version"),
        "bullmq_version": bull.as_ref().map(|b| b.version.clone()),
        "jobs": n,
    });
    eprintln!("machine: {machine}");
    let q = Queue::new(s.redis.redis().await, "jq", TAG).unwrap();
    q.load_scripts().await.unwrap();
    let mut lines: Vec<Line> = Vec::new();
    let per_job_cpu = |r: &Run| Some(r.redis_us_per_job());

    if args.runs("enqueue") || args.runs("memory") {
        for batch in [1usize, 1000] {
            eprintln!("enqueue, batch {batch} …");
            s.flush();
            let before = s.used();
            let jq = jq_enqueue(&mut s, &q, n, batch).await;
            let jq_bytes = (s.used() - before) as f64 / n as f64;
            let mut bull_run = None;
            let mut bull_bytes = None;
            if let Some(b) = &bull {
                s.flush();
                let before = s.used();
                bull_run = Some(b.enqueue(&mut s, n, batch));
                bull_bytes = Some((s.used() - before) as f64 / n as f64);
            }
            if args.runs("enqueue") {
                lines.push(Line {
                    name: format!("enqueue.b{batch}"),
                    what: if batch == 1 {
                        "enqueue, one job per call (Queue.add)".into()
                    } else {
                        format!("enqueue, batches of {batch} (Queue.addBulk)")
                    },
                    unit: "jobs/s",
                    jq: jq.rate(),
                    jq_batched: None,
                    jq_settled: None,
                    bull: bull_run.map(|r| r.rate()),
                    cpu: [
                        per_job_cpu(&jq),
                        None,
                        None,
                        bull_run.as_ref().and_then(per_job_cpu),
                    ],
                });
            }
            if batch == 1000 && args.runs("memory") {
                lines.push(Line {
                    name: "memory.waiting_job".into(),
                    what: "Redis memory per waiting job (45-byte payload)".into(),
                    unit: "bytes",
                    jq: jq_bytes,
                    jq_batched: None,
                    jq_settled: None,
                    bull: bull_bytes,
                    cpu: [None; 4],
                });
            }
        }
    }

    let mut bull_runs: HashMap<usize, Run> = HashMap::new();
    if args.runs("process") {
        for c in CONCURRENCY {
            eprintln!("process, concurrency {c} …");
            s.flush();
            fill(&q, n).await;
            let jq = jq_worker(&mut s, &q, n, c).await;
            s.flush();
            fill(&q, n).await;
            let batched = jq_batched(&mut s, &q, n, c).await;
            s.flush();
            fill(&q, n).await;
            let settled = jq_settled(&mut s, &q, n, c).await;
            let mut bull_run = None;
            if let Some(b) = &bull {
                s.flush();
                bull_run = Some(b.process(&mut s, n, c));
                bull_runs.insert(c, bull_run.unwrap());
            }
            lines.push(Line {
                name: format!("process.c{c}"),
                what: format!("process, empty handler, concurrency {c}"),
                unit: "jobs/s",
                jq: jq.rate(),
                jq_batched: Some(batched.rate()),
                jq_settled: Some(settled.rate()),
                bull: bull_run.map(|r| r.rate()),
                cpu: [
                    per_job_cpu(&jq),
                    per_job_cpu(&batched),
                    per_job_cpu(&settled),
                    bull_run.as_ref().and_then(per_job_cpu),
                ],
            });
        }
    }
    if args.runs("priorities") {
        eprintln!("priorities: enqueue …");
        s.flush();
        let jq = jq_enqueue_prioritized(&mut s, &q, n).await;
        let mut bull_run = None;
        if let Some(b) = &bull {
            s.flush();
            bull_run = Some(b.enqueue_with(&mut s, n, PRIORITY_BATCH, true));
        }
        lines.push(Line {
            name: format!("priorities.enqueue.b{PRIORITY_BATCH}"),
            what: format!(
                "enqueue with 10 priorities, batches of {PRIORITY_BATCH} (Queue.addBulk, opts.priority)"
            ),
            unit: "jobs/s",
            jq: jq.rate(),
            jq_batched: None,
            jq_settled: None,
            bull: bull_run.map(|r| r.rate()),
            cpu: [
                per_job_cpu(&jq),
                None,
                None,
                bull_run.as_ref().and_then(per_job_cpu),
            ],
        });
        let c = PRIORITY_CONCURRENCY;
        eprintln!("priorities: process, concurrency {c} …");
        s.flush();
        fill_prioritized(&q, n).await;
        let jq = jq_worker(&mut s, &q, n, c).await;
        s.flush();
        fill_prioritized(&q, n).await;
        let batched = jq_batched(&mut s, &q, n, c).await;
        s.flush();
        fill_prioritized(&q, n).await;
        let settled = jq_settled(&mut s, &q, n, c).await;
        let mut bull_run = None;
        if let Some(b) = &bull {
            s.flush();
            bull_run = Some(b.process_with(&mut s, n, c, true));
        }
        lines.push(Line {
            name: format!("priorities.process.c{c}"),
            what: format!("process jobs of 10 priorities, empty handler, concurrency {c}"),
            unit: "jobs/s",
            jq: jq.rate(),
            jq_batched: Some(batched.rate()),
            jq_settled: Some(settled.rate()),
            bull: bull_run.map(|r| r.rate()),
            cpu: [
                per_job_cpu(&jq),
                per_job_cpu(&batched),
                per_job_cpu(&settled),
                bull_run.as_ref().and_then(per_job_cpu),
            ],
        });
    }
    if args.runs("ratelimit") {
        let jobs = (n / 10).clamp(200, 5000);
        let max = (jobs / 5) as u32;
        // the smoke pass (cargo test) keeps to about a second
        let per = if args.smoke {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        };
        let c = 16;
        let window = crate::duration_text(per);
        eprintln!("rate limited, {jobs} jobs at {max}/{window}, concurrency {c} …");
        s.flush();
        fill(&q, jobs).await;
        let limit = jobqueue::queue::RateLimit::new(max, per).unwrap();
        q.set_rate_limits(Some(Some(limit)), None).await.unwrap();
        s.reset_stats();
        let jq = jq_worker(&mut s, &q, jobs, c).await;
        let jq_commands = s.commands();
        let mut bull_run = None;
        if let Some(b) = &bull {
            s.flush();
            bull_run = Some(b.limited(&mut s, jobs, c, max, per));
        }
        let what = format!("rate limited, {jobs} jobs at {max}/{window}, concurrency {c}");
        lines.push(Line {
            name: "ratelimit.seconds".into(),
            what: format!("{what}: seconds to finish (4 windows when the limit holds)"),
            unit: "s",
            jq: jq.seconds,
            jq_batched: None,
            jq_settled: None,
            bull: bull_run.map(|(r, _)| r.seconds),
            cpu: [
                per_job_cpu(&jq),
                None,
                None,
                bull_run.as_ref().and_then(|(r, _)| per_job_cpu(r)),
            ],
        });
        lines.push(Line {
            name: "ratelimit.commands_per_job".into(),
            what: format!("{what}: Redis commands per job"),
            unit: "commands",
            jq: jq_commands as f64 / jobs as f64,
            jq_batched: None,
            jq_settled: None,
            bull: bull_run.map(|(_, c)| c as f64 / jobs as f64),
            cpu: [None; 4],
        });
    }
    if let (true, Some(node)) = (args.runs("process"), &node_client) {
        for c in NODE_CONCURRENCY {
            eprintln!("process, the Node package's worker, concurrency {c} …");
            s.flush();
            fill(&q, n).await;
            let run = node.process(&mut s, n, c);
            let bull_run = bull_runs.get(&c);
            lines.push(Line {
                name: format!("process_node.c{c}"),
                what: format!(
                    "process, empty handler, concurrency {c}: Node package (clients/node)"
                ),
                unit: "jobs/s",
                jq: run.rate(),
                jq_batched: None,
                jq_settled: None,
                bull: bull_run.map(|r| r.rate()),
                cpu: [
                    per_job_cpu(&run),
                    None,
                    None,
                    bull_run.and_then(per_job_cpu),
                ],
            });
        }
    }
    let keys_left = s.keys();

    println!();
    print_table(&lines);
    println!();
    for l in &lines {
        let mut o = json!({
            "name": format!("peers.{}", l.name),
            "what": l.what,
            "unit": l.unit,
            "jobqueue": (l.jq * 10.0).round() / 10.0,
        });
        if let Some(v) = l.jq_batched {
            o["jobqueue_batch32"] = json!((v * 10.0).round() / 10.0);
        }
        if let Some(v) = l.jq_settled {
            o["jobqueue_batch32_settle_claim"] = json!((v * 10.0).round() / 10.0);
        }
        if let Some(v) = l.bull {
            o["bullmq"] = json!((v * 10.0).round() / 10.0);
            o["jobqueue_over_bullmq"] = json!((l.jq / v * 1000.0).round() / 1000.0);
        }
        let [a, b, d, c] = l.cpu;
        if a.is_some() || c.is_some() {
            let r = |v: Option<f64>| v.map(|v| (v * 100.0).round() / 100.0);
            o["redis_cpu_us_per_job"] = json!({
                "jobqueue": r(a),
                "jobqueue_batch32": r(b),
                "jobqueue_batch32_settle_claim": r(d),
                "bullmq": r(c),
            });
        }
        println!("{o}");
    }
    println!(
        "{}",
        json!({"name": "machine", "machine": machine, "keys_left_by_last_run": keys_left})
    );
}
