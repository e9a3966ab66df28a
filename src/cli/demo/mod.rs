//! `jobqueue demo`: a private redis-server, a few thousand jobs, worker processes of
//! which some are SIGKILLed mid-job, and the reaper bringing their jobs back, shown
//! live, ending with a check that every job was done or dead-lettered: none lost.
//!
//! This module is the command and its flow; [`fleet`] starts, kills and stops the
//! processes, [`report`] shows the progress and makes the final check, and [`worker`]
//! is the hidden `demo-worker` subcommand each worker process runs.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::Args;
use rand::Rng;
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::common::{Interrupted, stop_signal};
use crate::duration;
use crate::queue::{ConnectOptions, NewJob, Queue, QueueSettings, QueueStats, Redis};
use fleet::{Fleet, last_line_of};
use worker::DemoJob;

mod fleet;
mod report;
pub mod worker;

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
    let mut fleet = Fleet::new(dir);
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
    let queue = open_queue(&url, args.visibility).await?;
    let jobs = demo_jobs(args.jobs);
    let ids: Vec<String> = jobs.iter().map(|j| job_id(j.n)).collect();
    let reap_every = (args.visibility / 8).clamp(Duration::from_millis(50), Duration::from_secs(1));
    print_intro(args, version, port, &jobs, reap_every);

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
    let mut reaper = Reaper::start(queue.clone(), reap_every);
    let (stats, killed) = watch(args, &url, &queue, fleet, &mut reaper, started).await?;
    let elapsed = started.elapsed();
    reaper.stop().await;
    fleet.kill_workers().await;
    report::check(&queue, &jobs, &ids, &stats, killed, elapsed).await
}

/// The demo queue on the private server: the demo's lease length and attempts, and done
/// jobs kept so that the end can check every single one.
async fn open_queue(url: &str, visibility: Duration) -> anyhow::Result<Queue> {
    let redis = Redis::connect(&ConnectOptions::new(url)).await?;
    let queue = Queue::new(redis, crate::queue::DEFAULT_PREFIX, TAG)?;
    queue
        .configure(&QueueSettings {
            visibility_timeout: visibility,
            max_attempts: MAX_ATTEMPTS,
            completed_retention: Duration::from_secs(3600),
            ..QueueSettings::default()
        })
        .await?;
    queue.load_scripts().await?;
    Ok(queue)
}

fn print_intro(args: &DemoArgs, version: &str, port: u16, jobs: &[DemoJob], reap_every: Duration) {
    let failing = jobs.iter().filter(|j| j.fails).count();
    let slow = jobs
        .iter()
        .filter(|j| j.work_ms >= SLOW_WORK.as_millis() as u64)
        .count();
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
        "  leases last {}: the reaper (every {}) puts the jobs of dead workers back\n  \
         (these workers are bare protocol clients; `jobqueue worker` reaps by itself)",
        duration::format(args.visibility),
        duration::format(reap_every)
    );
    println!();
}

/// Until every job is done or dead: kill a busy worker now and then and replace it,
/// replace workers that die on their own, and show the progress. The final counts and
/// the number of workers killed.
async fn watch(
    args: &DemoArgs,
    url: &str,
    queue: &Queue,
    fleet: &mut Fleet,
    reaper: &mut Reaper,
    started: Instant,
) -> anyhow::Result<(QueueStats, u64)> {
    let live = std::io::stdout().is_terminal();
    let deadline = started + args.timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_kill = (!args.kill_every.is_zero()).then(|| started + jitter(args.kill_every));
    let mut killed = 0u64;
    let mut unexpected = 0u32;
    let mut last_line = Instant::now() - Duration::from_secs(10);
    loop {
        tick.tick().await;
        reaper.check().await?;
        fleet.check_redis()?;
        for name in fleet.reap_exited()? {
            unexpected += 1;
            let log = last_line_of(&fleet.dir.join(format!("{name}.log")));
            if unexpected > MAX_UNEXPECTED_EXITS {
                bail!("demo workers keep exiting on their own; the last said: {log}");
            }
            fleet.spawn_worker(url, args.visibility).await?;
        }
        let stats = queue.stats().await?;
        let finished =
            stats.enqueued >= args.jobs && stats.pending + stats.processing + stats.delayed == 0;
        if let Some(at) = next_kill
            && Instant::now() >= at
            && stats.pending > 0
            && fleet.kill_busy_worker(queue).await?
        {
            killed += 1;
            fleet.spawn_worker(url, args.visibility).await?;
            next_kill = Some(Instant::now() + jitter(args.kill_every));
        }
        let line = report::progress(&stats, args.jobs, fleet.workers(), killed, started);
        if finished {
            if live {
                println!("\r\x1b[2K{line}");
            } else {
                println!("{line}");
            }
            return Ok((stats, killed));
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
    }
}

/// The reaper, in this process, like the operator or `jobqueue reap --every` would run
/// it: the demo's workers are bare protocol clients that do not reap (`jobqueue worker`
/// and the Rust runtime reap by themselves). Dropping it stops it.
struct Reaper {
    task: JoinHandle<crate::queue::Result<()>>,
    _stop: DropGuard,
}

impl Reaper {
    fn start(queue: Queue, every: Duration) -> Reaper {
        let stop = CancellationToken::new();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return Ok(()),
                        _ = tick.tick() => {}
                    }
                    queue.reap_expired(100, 10).await?;
                }
            })
        };
        Reaper {
            task,
            _stop: stop.drop_guard(),
        }
    }

    /// An error once the reaper has stopped on its own.
    async fn check(&mut self) -> anyhow::Result<()> {
        if !self.task.is_finished() {
            return Ok(());
        }
        Err(match (&mut self.task).await {
            Ok(Err(e)) => anyhow::Error::from(e).context("the reaper failed"),
            _ => anyhow!("the reaper stopped"),
        })
    }

    async fn stop(self) {
        let Reaper { task, _stop: stop } = self;
        drop(stop);
        let _ = task.await;
    }
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
    fn jitter_stays_within_half() {
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(1000));
            assert!((500..1500).contains(&j.as_millis()), "{j:?}");
        }
    }
}
