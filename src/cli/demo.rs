//! `jobqueue demo`: a private redis-server, a few thousand jobs, worker processes of
//! which some are SIGKILLed mid-job, and the reaper bringing their jobs back, shown
//! live, ending with a check that every job was done or dead-lettered: none lost.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::Args;
use rand::Rng;
use rand::seq::IndexedRandom;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio_util::sync::CancellationToken;

use super::common::{Interrupted, stop_signal};
use super::demo_worker::DemoJob;
use super::format::format_latency;
use crate::duration;
use crate::queue::{ConnectOptions, NewJob, Queue, QueueSettings, QueueStats, Redis};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue demo
  jobqueue demo --jobs 10000 --workers 8 --kill-every 300ms
  jobqueue demo --kill-every 0        # no crashes: the happy path

Needs redis-server 6.2 or newer on PATH (or REDIS_SERVER=/path/to/redis-server);
`make demo` installs it when it is missing. Exits 0 when no job was lost.";

/// The demo queue's hash tag.
const TAG: &str = "demo";
/// Attempts before a failing job is dead-lettered.
const MAX_ATTEMPTS: u32 = 3;
/// Every this many jobs, one fails on purpose (it ends dead after MAX_ATTEMPTS).
const FAIL_EVERY: u64 = 250;
/// Every this many jobs, one is slow: it outlives a third of its lease and renews it.
const SLOW_EVERY: u64 = 200;
const SLOW_WORK: Duration = Duration::from_millis(800);
/// Workers that die on their own (not killed by us) before the demo gives up.
const MAX_UNEXPECTED_EXITS: u32 = 5;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How many jobs to enqueue.
    #[arg(long, default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub jobs: u64,
    /// Worker processes running at once.
    #[arg(long, default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// SIGKILL a busy worker about this often (randomised ±50%) and start a replacement;
    /// 0: never.
    #[arg(long, default_value = "700ms", value_parser = duration::parse)]
    pub kill_every: Duration,
    /// The workers' lease length: how long a killed worker's job waits for the reaper.
    #[arg(long, default_value = "2s", value_parser = duration::parse)]
    pub visibility: Duration,
    /// Give up (exit 1) if the jobs are not all done or dead by then.
    #[arg(long, default_value = "2m", value_parser = duration::parse)]
    pub timeout: Duration,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.visibility < Duration::from_millis(100) {
        return Err(super::common::UsageError("--visibility must be at least 100ms".into()).into());
    }
    let server = find_redis_server()?;
    let version = redis_version(&server).await?;
    let dir = std::env::temp_dir().join(format!(
        "jobqueue-demo-{}-{:08x}",
        std::process::id(),
        rand::rng().random::<u32>()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut fleet = Fleet {
        dir,
        redis: None,
        workers: Vec::new(),
        spawned: 0,
    };
    let outcome = tokio::select! {
        result = demo(&args, &server, &version, &mut fleet) => result,
        signal = stop_signal() => {
            println!();
            println!("{signal}: stopping the workers and redis-server");
            Err(Interrupted(signal).into())
        }
    };
    let stopped = fleet.stop().await;
    match (outcome, stopped) {
        (Ok(()), Ok(())) => {
            println!("redis-server stopped; the demo left nothing behind.");
            Ok(())
        }
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) => Err(e),
    }
}

async fn demo(
    args: &DemoArgs,
    server: &Path,
    version: &str,
    fleet: &mut Fleet,
) -> anyhow::Result<()> {
    let port = fleet.start_redis(server).await?;
    let url = format!("redis://127.0.0.1:{port}");
    let redis = Redis::connect(&ConnectOptions::new(&url)).await?;
    let queue = Queue::new(redis, crate::queue::DEFAULT_PREFIX, TAG)?;
    queue
        .configure(&QueueSettings {
            visibility_timeout: args.visibility,
            max_attempts: MAX_ATTEMPTS,
            // Keep done jobs, so the end can check every single one.
            completed_retention: Duration::from_secs(3600),
            ..QueueSettings::default()
        })
        .await?;
    queue.load_scripts().await?;

    let jobs = demo_jobs(args.jobs);
    let failing = jobs.iter().filter(|j| j.fails).count();
    let slow = jobs
        .iter()
        .filter(|j| j.work_ms >= SLOW_WORK.as_millis() as u64)
        .count();
    let ids: Vec<String> = jobs.iter().map(|j| job_id(j.n)).collect();
    let reap_every = (args.visibility / 8).clamp(Duration::from_millis(50), Duration::from_secs(1));

    println!("jobqueue demo");
    println!("  redis-server {version} on 127.0.0.1:{port} (private; stopped at the end)");
    println!(
        "  {} jobs ({failing} fail on purpose, {slow} are slow and renew their lease), {} worker processes",
        args.jobs, args.workers
    );
    if args.kill_every.is_zero() {
        println!("  no worker is killed (--kill-every 0)");
    } else {
        println!(
            "  about every {} a busy worker is SIGKILLed mid-job and replaced",
            duration::format(args.kill_every)
        );
    }
    println!(
        "  leases last {}: the reaper (every {}) puts the jobs of dead workers back",
        duration::format(args.visibility),
        duration::format(reap_every)
    );
    println!();

    let started = Instant::now();
    let new_jobs = jobs
        .iter()
        .zip(&ids)
        .map(|(job, id)| NewJob::new(serde_json::to_vec(job).expect("plain struct")).id(id))
        .collect();
    let enqueued = queue.enqueue_many(new_jobs).await?;
    if enqueued.iter().any(|e| !e.created) {
        bail!("the demo queue was not empty");
    }

    for _ in 0..args.workers {
        fleet.spawn_worker(&url, args.visibility).await?;
    }

    // The reaper: in this process, like the operator would run it.
    let stop_reaper = CancellationToken::new();
    let reaper = {
        let queue = queue.clone();
        let stop = stop_reaper.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(reap_every);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok::<(), crate::queue::Error>(()),
                    _ = tick.tick() => {}
                }
                queue.reap_expired(100, 10).await?;
            }
        })
    };
    let _stop_reaper = stop_reaper.clone().drop_guard();

    let live = std::io::stdout().is_terminal();
    let deadline = started + args.timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_kill = (!args.kill_every.is_zero()).then(|| started + jitter(args.kill_every));
    let mut killed = 0u64;
    let mut unexpected = 0u32;
    let mut last_line = Instant::now() - Duration::from_secs(10);
    let stats = loop {
        tick.tick().await;
        if reaper.is_finished() {
            return Err(match reaper.await {
                Ok(Err(e)) => anyhow::Error::from(e).context("the reaper failed"),
                _ => anyhow!("the reaper stopped"),
            });
        }
        fleet.check_redis()?;
        for name in fleet.reap_exited()? {
            unexpected += 1;
            let log = last_line_of(&fleet.dir.join(format!("{name}.log")));
            if unexpected > MAX_UNEXPECTED_EXITS {
                bail!("demo workers keep exiting on their own; the last said: {log}");
            }
            fleet.spawn_worker(&url, args.visibility).await?;
        }
        let stats = queue.stats().await?;
        let finished =
            stats.enqueued >= args.jobs && stats.pending + stats.processing + stats.delayed == 0;
        if let Some(at) = next_kill
            && Instant::now() >= at
            && stats.pending > 0
            && fleet.kill_busy_worker(&queue).await?
        {
            killed += 1;
            fleet.spawn_worker(&url, args.visibility).await?;
            next_kill = Some(Instant::now() + jitter(args.kill_every));
        }
        let line = progress(&stats, args.jobs, fleet.workers.len(), killed, started);
        if finished {
            if live {
                println!("\r\x1b[2K{line}");
            } else {
                println!("{line}");
            }
            break stats;
        }
        if live {
            print!("\r\x1b[2K{line}");
            std::io::stdout().flush()?;
        } else if last_line.elapsed() >= Duration::from_secs(1) {
            println!("{line}");
            last_line = Instant::now();
        }
        if Instant::now() > deadline {
            println!();
            bail!(
                "the demo did not finish within {}: {} pending, {} processing, {} delayed",
                duration::format(args.timeout),
                stats.pending,
                stats.processing,
                stats.delayed
            );
        }
    };
    let elapsed = started.elapsed();
    stop_reaper.cancel();
    let _ = reaper.await;
    fleet.kill_workers().await;

    let tally = tally(&queue, &jobs, &ids).await?;
    println!();
    print!("{}", summary(&tally, &stats, killed, elapsed));
    if tally.lost() > 0 || tally.acked_twice(&stats) > 0 {
        bail!(
            "{} jobs lost, {} acked twice: the queue broke its promise",
            tally.lost(),
            tally.acked_twice(&stats)
        );
    }
    Ok(())
}

/// The demo's jobs: a few milliseconds of work each, some slow, some failing.
fn demo_jobs(count: u64) -> Vec<DemoJob> {
    let mut rng = rand::rng();
    (1..=count)
        .map(|n| DemoJob {
            n,
            work_ms: if n % SLOW_EVERY == SLOW_EVERY / 2 {
                SLOW_WORK.as_millis() as u64
            } else {
                rng.random_range(2..=12)
            },
            fails: n % FAIL_EVERY == FAIL_EVERY / 2,
        })
        .collect()
}

fn job_id(n: u64) -> String {
    format!("job-{n:07}")
}

/// `every` randomised by ±50%, so kills don't fall into step with the work.
fn jitter(every: Duration) -> Duration {
    every.mul_f64(rand::rng().random_range(0.5..1.5))
}

fn progress(s: &QueueStats, total: u64, workers: usize, killed: u64, started: Instant) -> String {
    let finished = s.acked + s.dead;
    let width = 20usize;
    let filled = ((finished as f64 / total.max(1) as f64) * width as f64).round() as usize;
    let bar: String = "#".repeat(filled.min(width)) + &"-".repeat(width - filled.min(width));
    format!(
        "[{bar}] {:>5.1}s  pending {:>6}  processing {:>3}  done {:>6}  dead {:>3}  reaped {:>3}  workers {workers} (killed {killed})",
        started.elapsed().as_secs_f64(),
        s.pending + s.delayed,
        s.processing,
        s.acked,
        s.dead,
        s.reaped
    )
}

/// Where every enqueued job ended, read job by job (not from the counters).
#[derive(Debug, Default, PartialEq)]
struct Tally {
    enqueued: u64,
    done: u64,
    dead: u64,
    /// Dead although not one of the jobs that fail on purpose.
    dead_unplanned: u64,
    /// Jobs claimed more than once because a worker died holding them.
    reran: u64,
    missing: Vec<String>,
}

impl Tally {
    fn lost(&self) -> u64 {
        self.enqueued - self.done - self.dead
    }

    /// More successful acks than done jobs would mean a job was acked twice.
    fn acked_twice(&self, stats: &QueueStats) -> u64 {
        stats.acked.saturating_sub(self.done)
    }
}

async fn tally(queue: &Queue, jobs: &[DemoJob], ids: &[String]) -> anyhow::Result<Tally> {
    let mut tally = Tally {
        enqueued: ids.len() as u64,
        ..Tally::default()
    };
    let mut conn = queue.redis().clone();
    for (chunk_jobs, chunk_ids) in jobs.chunks(1000).zip(ids.chunks(1000)) {
        let mut pipe = redis::pipe();
        for id in chunk_ids {
            pipe.cmd("HMGET")
                .arg(queue.keys().job(id))
                .arg("status")
                .arg("attempts");
        }
        let rows: Vec<(Option<String>, Option<u32>)> = pipe
            .query_async(&mut conn)
            .await
            .context("reading the jobs back")?;
        for ((job, id), (status, attempts)) in chunk_jobs.iter().zip(chunk_ids).zip(rows) {
            let attempts = attempts.unwrap_or(0);
            match status.as_deref() {
                Some("done") => tally.done += 1,
                Some("dead") => {
                    tally.dead += 1;
                    if !job.fails {
                        tally.dead_unplanned += 1;
                    }
                }
                _ => {
                    tally.missing.push(id.clone());
                    continue;
                }
            }
            // A failing job is claimed MAX_ATTEMPTS times by design; more is a crash.
            let planned = if job.fails { MAX_ATTEMPTS } else { 1 };
            if attempts > planned {
                tally.reran += 1;
            }
        }
    }
    Ok(tally)
}

fn summary(t: &Tally, s: &QueueStats, killed: u64, elapsed: Duration) -> String {
    let mut out = format!("finished in {:.1}s\n", elapsed.as_secs_f64());
    let mut row = |label: &str, value: String, note: &str| {
        let line = format!("  {label:<20}{value:>10}  {note}");
        out.push_str(line.trim_end());
        out.push('\n');
    };
    row("enqueued", t.enqueued.to_string(), "");
    row("done", t.done.to_string(), "acked by a worker");
    let dead_note = if t.dead_unplanned > 0 {
        format!(
            "{} failing on purpose, {} crashed {MAX_ATTEMPTS} times",
            t.dead - t.dead_unplanned,
            t.dead_unplanned
        )
    } else {
        format!("failing on purpose: {MAX_ATTEMPTS} attempts, then the dead-letter set")
    };
    row("dead", t.dead.to_string(), &dead_note);
    let lost_note = if t.lost() == 0 {
        "enqueued = done + dead: every job accounted for".to_string()
    } else {
        format!("never finished: {}", t.missing.join(", "))
    };
    row("lost", t.lost().to_string(), &lost_note);
    row(
        "workers killed",
        killed.to_string(),
        "SIGKILL while holding a job",
    );
    row(
        "leases reaped",
        s.reaped.to_string(),
        "expired leases of dead workers, put back by the reaper",
    );
    row(
        "ran more than once",
        t.reran.to_string(),
        "at-least-once: their worker died before the ack",
    );
    row(
        "acked twice",
        t.acked_twice(s).to_string(),
        "a lease is fenced by its token",
    );
    if let (Some(p50), Some(p99)) = (s.histogram.quantile(0.5), s.histogram.quantile(0.99)) {
        row(
            "processing p50/p99",
            format!("{}/{}", format_latency(p50), format_latency(p99)),
            "",
        );
    }
    out
}

/// The redis-server to run: `$REDIS_SERVER`, else `redis-server` on PATH.
fn find_redis_server() -> anyhow::Result<PathBuf> {
    let wanted = std::env::var_os("REDIS_SERVER")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "redis-server".into());
    let wanted = PathBuf::from(wanted);
    let found = if wanted.components().count() > 1 {
        wanted.is_file().then(|| wanted.clone())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(&wanted))
                .find(|p| p.is_file())
        })
    };
    found.ok_or_else(|| {
        anyhow!(
            "{} not found: the demo runs its own redis-server (6.2 or newer). Install it \
             (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis), \
             run `make demo` (installs it), or set REDIS_SERVER=/path/to/redis-server",
            wanted.display()
        )
    })
}

/// `redis-server --version` → `7.2.4`; refuses servers older than 6.2.
async fn redis_version(server: &Path) -> anyhow::Result<String> {
    let out = Command::new(server)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {}", server.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap_or("unknown")
        .to_string();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if version != "unknown" && (major, minor) < (6, 2) {
        bail!(
            "{} is version {version}: the queue's scripts need 6.2 or newer",
            server.display()
        );
    }
    Ok(version)
}

/// The processes the demo started; all of them go when the demo ends, however it ends.
struct Fleet {
    dir: PathBuf,
    redis: Option<(Child, u16)>,
    workers: Vec<Worker>,
    spawned: u64,
}

struct Worker {
    name: String,
    child: Child,
    /// Held open: a worker exits when its stdin closes (when the demo goes away).
    _stdin: Option<ChildStdin>,
}

impl Fleet {
    /// Start redis-server on a free loopback port; retries when another process takes
    /// the port first.
    async fn start_redis(&mut self, server: &Path) -> anyhow::Result<u16> {
        let log = self.dir.join("redis.log");
        for _ in 0..10 {
            let port = free_port()?;
            let mut child = Command::new(server)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .arg("--dir")
                .arg(&self.dir)
                .arg("--logfile")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("cannot start {}", server.display()))?;
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(status) = child.try_wait()? {
                    let said = std::fs::read_to_string(&log).unwrap_or_default();
                    if said.contains("Address already in use") {
                        break;
                    }
                    bail!(
                        "redis-server exited at start ({status}): {}",
                        last_line_of(&log)
                    );
                }
                if ping(port).await {
                    self.redis = Some((child, port));
                    return Ok(port);
                }
                if Instant::now() > deadline {
                    bail!(
                        "redis-server did not answer within 10s: {}",
                        last_line_of(&log)
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        bail!("no free loopback port for redis-server")
    }

    fn check_redis(&mut self) -> anyhow::Result<()> {
        if let Some((child, _)) = &mut self.redis
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "redis-server exited ({status}): {}",
                last_line_of(&self.dir.join("redis.log"))
            );
        }
        Ok(())
    }

    async fn spawn_worker(&mut self, url: &str, visibility: Duration) -> anyhow::Result<()> {
        self.spawned += 1;
        let name = format!("worker-{}", self.spawned);
        let exe = std::env::current_exe().context("cannot find the jobqueue binary")?;
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let mut child = Command::new(exe)
            .args(["demo-worker", "--redis", url, "--tag", TAG, "--name", &name])
            .args(["--visibility", &format!("{}ms", visibility.as_millis())])
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a demo worker")?;
        let stdin = child.stdin.take();
        self.workers.push(Worker {
            name,
            child,
            _stdin: stdin,
        });
        Ok(())
    }

    /// Workers that exited without being killed: removed, their names returned.
    fn reap_exited(&mut self) -> anyhow::Result<Vec<String>> {
        let mut gone = Vec::new();
        let mut i = 0;
        while i < self.workers.len() {
            if self.workers[i].child.try_wait()?.is_some() {
                gone.push(self.workers.swap_remove(i).name);
            } else {
                i += 1;
            }
        }
        Ok(gone)
    }

    /// SIGKILL a random worker that holds a lease right now; false when none does. Jobs
    /// on their last attempts are spared, so that crashes alone never dead-letter a job
    /// in the demo (they would after `MAX_ATTEMPTS` of them: poison-job protection).
    async fn kill_busy_worker(&mut self, queue: &Queue) -> anyhow::Result<bool> {
        let holders = lease_holders(queue).await?;
        let busy: Vec<usize> = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                holders
                    .get(&w.name)
                    .is_some_and(|held| held.iter().all(|&a| a + 1 < MAX_ATTEMPTS))
            })
            .map(|(i, _)| i)
            .collect();
        let Some(&victim) = busy.choose(&mut rand::rng()) else {
            return Ok(false);
        };
        let mut worker = self.workers.swap_remove(victim);
        worker.child.start_kill()?;
        worker.child.wait().await?;
        Ok(true)
    }

    async fn kill_workers(&mut self) {
        for mut worker in self.workers.drain(..) {
            let _ = worker.child.start_kill();
            let _ = worker.child.wait().await;
        }
    }

    /// Stop everything: workers first, then redis-server (SHUTDOWN NOSAVE, SIGKILL if it
    /// lingers), then the scratch directory.
    async fn stop(&mut self) -> anyhow::Result<()> {
        self.kill_workers().await;
        if let Some((mut child, port)) = self.redis.take() {
            shutdown_redis(port).await;
            match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
            }
        }
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("cannot remove {}", self.dir.display()))?;
        Ok(())
    }
}

impl Drop for Fleet {
    /// A panic or an early return: kill what is left (kill_on_drop does the rest).
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.start_kill();
        }
        if let Some((child, _)) = &mut self.redis {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Worker name → the attempts of each job it holds a lease on.
async fn lease_holders(queue: &Queue) -> anyhow::Result<HashMap<String, Vec<u32>>> {
    let mut conn = queue.redis().clone();
    let ids: Vec<String> = redis::cmd("ZRANGE")
        .arg(&queue.keys().processing)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    let mut holders: HashMap<String, Vec<u32>> = HashMap::new();
    if ids.is_empty() {
        return Ok(holders);
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("HMGET")
            .arg(queue.keys().job(id))
            .arg("worker")
            .arg("attempts");
    }
    let rows: Vec<(Option<String>, Option<u32>)> = pipe.query_async(&mut conn).await?;
    for (worker, attempts) in rows {
        if let Some(worker) = worker {
            holders
                .entry(worker)
                .or_default()
                .push(attempts.unwrap_or(0));
        }
    }
    Ok(holders)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// True when a Redis answers PING on the loopback port.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut buf = [0u8; 7];
        stream.read_exact(&mut buf).await?;
        Ok::<bool, std::io::Error>(&buf == b"+PONG\r\n")
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Ok(true))
    )
}

async fn shutdown_redis(port: u16) {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"SHUTDOWN NOSAVE\r\n").await?;
        // The server closes the connection as it goes.
        let mut buf = [0u8; 64];
        let _ = stream.read(&mut buf).await;
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), attempt).await;
}

fn last_line_of(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "(no output)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_mix_plain_slow_and_failing() {
        let jobs = demo_jobs(1000);
        assert_eq!(jobs.len(), 1000);
        assert_eq!(jobs.iter().filter(|j| j.fails).count(), 4);
        assert_eq!(jobs.iter().filter(|j| j.work_ms == 800).count(), 5);
        assert!(
            jobs.iter()
                .filter(|j| j.work_ms != 800)
                .all(|j| (2..=12).contains(&j.work_ms))
        );
        assert_eq!(jobs[0].n, 1);
        // Ids sort like the jobs.
        assert!(job_id(9) < job_id(10));
    }

    #[test]
    fn the_summary_counts_every_job() {
        let tally = Tally {
            enqueued: 10,
            done: 8,
            dead: 2,
            reran: 1,
            ..Tally::default()
        };
        let stats = QueueStats {
            acked: 8,
            reaped: 1,
            ..QueueStats::default()
        };
        let text = summary(&tally, &stats, 3, Duration::from_secs(2));
        let value = |label: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(label))
                .and_then(|l| l[label.len() + 2..].split_whitespace().next())
                .map(str::to_string)
        };
        assert_eq!(value("lost").as_deref(), Some("0"), "{text}");
        assert_eq!(value("workers killed").as_deref(), Some("3"), "{text}");
        assert_eq!(value("acked twice").as_deref(), Some("0"), "{text}");
        let lost = Tally {
            done: 7,
            missing: vec!["job-0000003".into()],
            ..tally
        };
        let text = summary(&lost, &stats, 3, Duration::from_secs(2));
        assert!(text.contains("never finished: job-0000003"), "{text}");
        assert_eq!(lost.acked_twice(&stats), 1);
    }

    #[test]
    fn jitter_stays_within_half() {
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(1000));
            assert!((500..1500).contains(&j.as_millis()), "{j:?}");
        }
    }
}
