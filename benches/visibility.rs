//! `make bench` (last part): the visibility timeout `auto` against fixed 5 s and fixed 60 s
//! on a workload whose processing times shift, with real worker processes SIGKILLed.
//!
//! For each setting, on a private redis-server of its own (the three run side by side):
//! worker processes (this binary again, `--worker-child`: the library's worker runtime
//! with its reaper, the way `jobqueue worker` runs it) whose handler sleeps the job's
//! time and appends its runs to a file of its own (tests/support/runs.rs's records); a
//! producer that enqueues one job every quarter of the phase's processing time (half the
//! workers' slots busy); phases of 2 s jobs, then 20 s, then 2 s (the last split in two:
//! the first 5 min, then 15 min more); `--kills` workers SIGKILLed in each phase (each
//! replaced at once by a new one, as a Deployment would). Then, per phase:
//!
//! - jobs run more than once for another reason than their worker's death (a lease lost
//!   under a running job), from the workers' own records; the runs SIGKILLed with their
//!   worker, and those that ended on a worker SIGKILLed before it acked them, are
//!   counted apart;
//! - the time from a worker's SIGKILL to each of its jobs starting again (p50, p99);
//! - Redis calls and Redis µs (INFO commandstats, every command but INFO, those scripts
//!   run included) per job enqueued in the phase, over the phase (not the final drain);
//! - the value in force at the phase's end, and for `auto` each change with its reason.
//!
//! Time is scaled by `--scale` (default 0.1: 0.2 s and 2 s jobs, phases of 30 s): job
//! times, phase lengths, the fixed values, `auto`'s bounds (5 s to 15 min), the tuning
//! interval (30 s) and stabilization (5 min) and the renewal floor (1 s), through
//! `WorkerBuilder::auto_visibility_timing`, and the workers' poll interval. Times are
//! printed in workload seconds (measured ÷ scale), comparable across scales.
//!
//! `cargo bench --bench visibility -- [--scale F] [--kills N] [--workers N]
//! [--phases JOB:LEN,…] [--only fixed5,fixed60,auto]` (JOB and LEN in seconds at scale 1;
//! default `2:300,20:300,2:300,2:900`). Run without `--bench` (as `cargo test
//! --all-targets` does) it does nothing: the rule's decisions on this workload are
//! asserted by `cargo test --lib auto_visibility` (a replay, not timings).

#[path = "../tests/support/redis.rs"]
mod common;
#[path = "../tests/support/runs.rs"]
#[allow(dead_code)]
mod runs;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobqueue::queue::auto_visibility::{self, AutoBounds, Timing, fields};
use jobqueue::queue::{ConnectOptions, NewJob, Queue, QueueSettings, Redis};
use jobqueue::worker::{JobError, Worker};
use serde_json::json;

use common::RedisServer;

const TAG: &str = "vis";

#[derive(Clone, Debug)]
struct Opts {
    scale: f64,
    /// (seconds of work per job, seconds the phase lasts), at scale 1.
    phases: Vec<(f64, f64)>,
    workers: usize,
    concurrency: usize,
    kills: usize,
    settings: Vec<Setting>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Setting {
    /// A fixed value, seconds at scale 1.
    Fixed(f64),
    Auto,
}

impl Setting {
    fn name(self) -> String {
        match self {
            Setting::Fixed(s) => format!("fixed {s}s"),
            Setting::Auto => "auto".into(),
        }
    }
    fn key(self) -> String {
        match self {
            Setting::Fixed(s) => format!("fixed{s}"),
            Setting::Auto => "auto".into(),
        }
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "visibility: {msg}\nusage: cargo bench --bench visibility -- [--scale F] [--kills N] [--workers N] [--phases JOB:LEN,…] [--only fixed5,fixed60,auto]"
    );
    std::process::exit(2)
}

fn opts(args: &[String]) -> Opts {
    let mut o = Opts {
        scale: 0.1,
        phases: vec![(2.0, 300.0), (20.0, 300.0), (2.0, 300.0), (2.0, 900.0)],
        workers: 4,
        concurrency: 2,
        kills: 3,
        settings: vec![Setting::Fixed(5.0), Setting::Fixed(60.0), Setting::Auto],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        let num = |v: String, what: &str| -> f64 {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .unwrap_or_else(|| usage(&format!("{what}: {v:?} is not a positive number")))
        };
        match a.as_str() {
            "--bench" => {}
            "--scale" => {
                o.scale = num(val(), "--scale");
                if !(0.02..=10.0).contains(&o.scale) {
                    usage("--scale: from 0.02 (leases of 100 ms at least) to 10");
                }
            }
            "--kills" => o.kills = num(val(), "--kills") as usize,
            "--workers" => o.workers = (num(val(), "--workers") as usize).max(2),
            "--phases" => {
                o.phases = val()
                    .split(',')
                    .map(|p| {
                        let (job, len) = p
                            .split_once(':')
                            .unwrap_or_else(|| usage(&format!("--phases: {p:?} is not JOB:LEN")));
                        (
                            num(job.into(), "--phases JOB"),
                            num(len.into(), "--phases LEN"),
                        )
                    })
                    .collect()
            }
            "--only" => {
                o.settings = val()
                    .split(',')
                    .map(|s| match s {
                        "auto" => Setting::Auto,
                        f if f.starts_with("fixed") => {
                            Setting::Fixed(num(f["fixed".len()..].into(), "--only fixedN"))
                        }
                        other => usage(&format!("--only: unknown setting {other:?}")),
                    })
                    .collect()
            }
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    o
}

fn scaled(secs: f64, scale: f64) -> Duration {
    Duration::from_secs_f64(secs * scale)
}

/// `auto`'s timing, scaled.
fn timing(scale: f64) -> Timing {
    let d = Timing::default();
    Timing {
        interval: d.interval.mul_f64(scale),
        stabilization: d.stabilization.mul_f64(scale),
        renewal_floor: d.renewal_floor.mul_f64(scale),
    }
}

fn bounds(scale: f64) -> AutoBounds {
    let d = AutoBounds::default();
    AutoBounds {
        min: d.min.mul_f64(scale),
        max: d.max.mul_f64(scale),
        margin: d.margin,
    }
}

// ---------------------------------------------------------------------------------------
// The worker process

/// `--worker-child URL TAG ID DIR SCALE CONCURRENCY`: a worker with its reaper; each run
/// of a job (payload `work <seconds>`) sleeps its seconds and is recorded in
/// `DIR/ID.runs` (start, end, or SIGTERM-like end when its lease is lost).
fn child(args: &[String]) {
    let [url, tag, id, dir, scale, concurrency] = args else {
        usage("--worker-child URL TAG ID DIR SCALE CONCURRENCY");
    };
    let scale: f64 = scale.parse().unwrap();
    let concurrency: usize = concurrency.parse().unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(dir).join(format!("{id}.runs")))
        .unwrap();
    let file = Arc::new(Mutex::new(file));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let redis = Redis::connect(&ConnectOptions::new(url.clone()))
            .await
            .expect("connect");
        let queue = Queue::new(redis, "jq", tag).unwrap();
        let worker = Worker::builder(queue)
            .handle_signals(false)
            .worker_id(id.clone())
            .concurrency(concurrency)
            .max_claim(1)
            .poll_interval(scaled(1.0, scale).max(Duration::from_millis(10)))
            .lease_grace(scaled(5.0, scale))
            .auto_visibility_timing(timing(scale))
            .build()
            .unwrap();
        worker
            .run(move |lease, ctx| {
                let file = file.clone();
                async move {
                    let text = String::from_utf8_lossy(&lease.payload).into_owned();
                    let secs: f64 = text
                        .strip_prefix("work ")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0.0);
                    let rec = |tag: char| {
                        let mut line = format!("{tag} {} {} {secs} ", runs::now(), lease.attempts)
                            .into_bytes();
                        line.extend_from_slice(lease.id.as_bytes());
                        line.push(b'\n');
                        file.lock().unwrap().write_all(&line).unwrap();
                    };
                    rec('S');
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs_f64(secs)) => {
                            rec('E');
                            Ok(())
                        }
                        _ = ctx.cancelled() => {
                            rec('T');
                            Err(JobError::retry("lease lost"))
                        }
                    }
                }
            })
            .await;
    });
}

// ---------------------------------------------------------------------------------------
// One scenario

/// The worker processes of a scenario, SIGKILLed when it ends however it ends.
struct Fleet {
    exe: PathBuf,
    url: String,
    dir: PathBuf,
    scale: f64,
    concurrency: usize,
    next: usize,
    live: Vec<(String, Child)>,
}

impl Fleet {
    fn spawn(&mut self) {
        let id = format!("w{}", self.next);
        self.next += 1;
        let log = std::fs::File::create(self.dir.join(format!("{id}.log"))).unwrap();
        let child = Command::new(&self.exe)
            .args(["--worker-child", &self.url, TAG, &id])
            .arg(&self.dir)
            .args([self.scale.to_string(), self.concurrency.to_string()])
            .env("JOBQUEUE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a worker process");
        self.live.push((id, child));
    }

    /// SIGKILL the oldest worker running a job (the oldest when none is); returns its id.
    fn kill_one(&mut self) -> String {
        let at = (0..self.live.len())
            .find(|&i| open_runs(&self.dir, &self.live[i].0) > 0)
            .unwrap_or(0);
        let (id, mut child) = self.live.remove(at);
        child.kill().unwrap();
        runs::note_kill(&self.dir, &id);
        child.wait().unwrap();
        id
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, c) in &mut self.live {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Per command (INFO excepted): (calls, µs). The commands scripts run count too (Redis
/// counts them under their own names), so `calls` is what Redis executed.
fn commandstats(conn: &mut redis::Connection) -> HashMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(name, _)| *name != "info")
        .map(|(name, rest)| {
            let field = |f: &str| -> u64 {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(f)?.parse().ok())
                    .unwrap_or(0)
            };
            (name.to_string(), (field("calls="), field("usec=")))
        })
        .collect()
}

/// Calls and µs between two readings of [`commandstats`].
fn spent(before: &HashMap<String, (u64, u64)>, after: &HashMap<String, (u64, u64)>) -> (u64, u64) {
    after.iter().fold((0, 0), |(c, u), (name, (calls, usec))| {
        let (c0, u0) = before.get(name).copied().unwrap_or((0, 0));
        (c + calls.saturating_sub(c0), u + usec.saturating_sub(u0))
    })
}

/// Runs of a worker started and not ended, from its records so far.
fn open_runs(dir: &Path, worker: &str) -> i64 {
    let text = std::fs::read(dir.join(format!("{worker}.runs"))).unwrap_or_default();
    text.split(|&b| b == b'\n')
        .map(|l| match l.first() {
            Some(b'S') => 1,
            Some(b'E' | b'T') => -1,
            _ => 0,
        })
        .sum()
}

#[derive(Default, Clone, Debug)]
struct PhaseResult {
    jobs: usize,
    /// Jobs run again after a run that was not SIGKILLed (a lease lost while it ran).
    twice: usize,
    /// Runs SIGKILLed with their worker.
    killed_runs: usize,
    /// Seconds from a worker's SIGKILL to its job's next start (measured, unscaled).
    recovery: Vec<f64>,
    /// Killed runs whose job never started again.
    never_rerun: usize,
    /// Runs that ended on a worker SIGKILLed before it acked them (run again too).
    unacked_at_kill: usize,
    calls: u64,
    /// µs Redis spent on the calls.
    usec: u64,
    vis_end_ms: u64,
}

struct Outcome {
    setting: Setting,
    phases: Vec<PhaseResult>,
    /// (seconds since the start, phase, value ms, reason) of each change of the value.
    changes: Vec<(f64, usize, u64, String)>,
    lost: usize,
    /// Calls per command over the whole run, most first.
    by_command: Vec<(String, u64)>,
}

fn vis(conn: &mut redis::Connection, meta: &str) -> (u64, String) {
    let (v, r): (Option<u64>, Option<String>) = redis::cmd("HMGET")
        .arg(meta)
        .arg("visibility_timeout_ms")
        .arg(fields::REASON)
        .query(conn)
        .unwrap();
    (v.unwrap_or(0), r.unwrap_or_default())
}

async fn scenario(o: Opts, setting: Setting) -> Outcome {
    let s = o.scale;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = server.queue(TAG).await;
    let initial = match setting {
        Setting::Fixed(v) => scaled(v, s),
        Setting::Auto => scaled(30.0, s),
    };
    queue
        .configure(&QueueSettings {
            visibility_timeout: initial,
            max_attempts: 1000,
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    if setting == Setting::Auto {
        let now = queue.now_ms().await.unwrap();
        let mut write = auto_visibility::auto_fields(&bounds(s));
        write.extend(auto_visibility::set_fields("cli", now, "auto turned on"));
        queue.write_meta(&write).await.unwrap();
    }
    let meta = queue.keys().meta.clone();
    let mut conn = server.conn();
    let mut fleet = Fleet {
        exe: std::env::current_exe().unwrap(),
        url: server.url(),
        dir: dir.path().to_path_buf(),
        scale: s,
        concurrency: o.concurrency,
        next: 0,
        live: Vec::new(),
    };
    for _ in 0..o.workers {
        fleet.spawn();
    }
    let start = Instant::now();
    let mut phase_of: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut killed: HashMap<String, (usize, f64)> = HashMap::new();
    let mut changes = Vec::new();
    let mut last = vis(&mut conn, &meta);
    let mut results = vec![PhaseResult::default(); o.phases.len()];
    let mut calls_before = commandstats(&mut conn);
    let mut n = 0usize;
    for (pi, &(job, len)) in o.phases.iter().enumerate() {
        let phase_start = Instant::now();
        let len = scaled(len, s);
        let every = scaled(job, s) / 4;
        let kill_at: Vec<Duration> = (1..=o.kills)
            .map(|k| len.mul_f64(k as f64 / (o.kills + 1) as f64))
            .collect();
        let mut kills_done = 0;
        let mut next = phase_start;
        while phase_start.elapsed() < len {
            let id = format!("p{pi}-{n}");
            n += 1;
            queue
                .enqueue(NewJob::new(format!("work {}", job * s)).id(id.clone()))
                .await
                .unwrap();
            phase_of.insert(id.into_bytes(), pi);
            results[pi].jobs += 1;
            while kills_done < kill_at.len() && phase_start.elapsed() >= kill_at[kills_done] {
                let victim = fleet.kill_one();
                killed.insert(victim, (pi, runs::now()));
                fleet.spawn();
                kills_done += 1;
            }
            let now = vis(&mut conn, &meta);
            if now != last {
                changes.push((start.elapsed().as_secs_f64(), pi, now.0, now.1.clone()));
                last = now;
            }
            next += every;
            tokio::time::sleep_until(next.into()).await;
        }
        let c = commandstats(&mut conn);
        (results[pi].calls, results[pi].usec) = spent(&calls_before, &c);
        calls_before = c;
        results[pi].vis_end_ms = last.0;
    }
    // Drain: every job run to its end (a SIGKILLed worker's jobs wait for their lease).
    let drain = Instant::now();
    loop {
        let st = queue.stats().await.unwrap();
        if st.pending + st.processing + st.delayed == 0 && st.acked >= n as u64 {
            break;
        }
        if drain.elapsed() > scaled(1800.0, s).max(Duration::from_secs(60)) {
            eprintln!("{}: not drained: {st:?}", setting.name());
            break;
        }
        let now = vis(&mut conn, &meta);
        if now != last {
            let pi = o.phases.len() - 1;
            changes.push((start.elapsed().as_secs_f64(), pi, now.0, now.1.clone()));
            last = now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The drain's calls are left out (the longer the lease, the longer it lasts).
    let end_stats = commandstats(&mut conn);
    drop(fleet);

    let all = runs::read(dir.path());
    let by_job = runs::by_job(&all);
    let mut lost = 0;
    for (id, pi) in &phase_of {
        let mut rs: Vec<&runs::Run> = by_job.get(id).cloned().unwrap_or_default();
        if !rs.iter().any(|r| r.how == runs::End::Finished) {
            lost += 1;
        }
        rs.sort_by(|a, b| a.start.total_cmp(&b.start));
        let mut twice = false;
        for (i, r) in rs.iter().enumerate() {
            let died = r.how == runs::End::Killed && killed.contains_key(&r.worker);
            if died {
                let (kpi, at) = killed[&r.worker];
                let p = &mut results[kpi];
                p.killed_runs += 1;
                match rs.get(i + 1) {
                    Some(again) => p.recovery.push(again.start - at),
                    None => p.never_rerun += 1,
                }
            } else if i + 1 < rs.len() {
                // A run that reached its end on a worker SIGKILLed before it could ack:
                // the kill's doing, not a lease lost.
                match killed.get(&r.worker) {
                    Some(&(kpi, at)) if at >= r.end => results[kpi].unacked_at_kill += 1,
                    _ => twice = true,
                }
            }
        }
        results[*pi].twice += usize::from(twice);
    }
    let mut by_command: Vec<(String, u64)> =
        end_stats.into_iter().map(|(k, (c, _))| (k, c)).collect();
    by_command.sort_by_key(|c| std::cmp::Reverse(c.1));
    Outcome {
        setting,
        phases: results,
        changes,
        lost,
        by_command,
    }
}

// ---------------------------------------------------------------------------------------
// The report

fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

fn phase_name(o: &Opts, pi: usize) -> String {
    let (job, len) = o.phases[pi];
    format!("{} {job}s jobs ({}s)", pi + 1, len)
}

/// The measures compared: (name, value per outcome and phase; lower is better).
type Measure = (&'static str, fn(&PhaseResult, f64) -> Option<f64>);

fn measures() -> [Measure; 5] {
    [
        ("run twice", |p, _| Some(p.twice as f64)),
        ("death→rerun p50", |p, s| {
            quantile(&p.recovery, 0.5).map(|x| x / s)
        }),
        ("death→rerun p99", |p, s| {
            quantile(&p.recovery, 0.99).map(|x| x / s)
        }),
        ("Redis calls/job", |p, _| {
            (p.jobs > 0).then(|| p.calls as f64 / p.jobs as f64)
        }),
        ("Redis µs/job", |p, _| {
            (p.jobs > 0).then(|| p.usec as f64 / p.jobs as f64)
        }),
    ]
}

fn report(o: &Opts, outs: &[Outcome]) {
    let s = o.scale;
    println!(
        "\nvisibility timeout: fixed vs auto (scale {s}; times in workload seconds = measured ÷ {s})\n"
    );
    println!(
        "| phase | setting | jobs | run twice | killed runs | death→rerun p50 | p99 | Redis calls/job | Redis µs/job | value at end |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let f = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{x:.1}"));
    for pi in 0..o.phases.len() {
        for out in outs {
            let p = &out.phases[pi];
            let mut never = String::new();
            if p.unacked_at_kill > 0 {
                never += &format!(" + {} unacked", p.unacked_at_kill);
            }
            if p.never_rerun > 0 {
                never += &format!(" ({} never)", p.never_rerun);
            }
            println!(
                "| {} | {} | {} | {} | {}{never} | {}s | {}s | {:.1} | {:.0} | {:.1}s |",
                phase_name(o, pi),
                out.setting.name(),
                p.jobs,
                p.twice,
                p.killed_runs,
                f(quantile(&p.recovery, 0.5).map(|x| x / s)),
                f(quantile(&p.recovery, 0.99).map(|x| x / s)),
                p.calls as f64 / p.jobs.max(1) as f64,
                p.usec as f64 / p.jobs.max(1) as f64,
                p.vis_end_ms as f64 / 1000.0 / s,
            );
        }
    }
    // auto against the best fixed setting, measure by measure, phase by phase.
    if let Some(auto) = outs.iter().find(|x| x.setting == Setting::Auto) {
        println!("\nauto against the best fixed setting (goal: within 10 %):\n");
        println!("| phase | measure | best fixed | auto | within 10 % |");
        println!("|---|---|---:|---:|---|");
        for pi in 0..o.phases.len() {
            for (name, m) in measures() {
                let best = outs
                    .iter()
                    .filter(|x| x.setting != Setting::Auto)
                    .filter_map(|x| Some((m(&x.phases[pi], s)?, x.setting)))
                    .min_by(|a, b| a.0.total_cmp(&b.0));
                let Some((best, which)) = best else { continue };
                let a = m(&auto.phases[pi], s);
                let ok = a.is_some_and(|a| a <= best * 1.1 + 1e-9);
                println!(
                    "| {} | {name} | {} ({}) | {} | {} |",
                    phase_name(o, pi),
                    f(Some(best)),
                    which.name(),
                    f(a),
                    if ok { "yes" } else { "NO" }
                );
            }
        }
        println!(
            "\nauto's changes (workload seconds since the start; the reasons quote measured times):\n"
        );
        for (t, pi, v, reason) in &auto.changes {
            println!(
                "- {:.0}s (phase {}): {:.1}s — {reason}",
                t / s,
                pi + 1,
                *v as f64 / 1000.0 / s
            );
        }
    }
    for out in outs {
        if out.lost > 0 {
            println!(
                "{}: {} jobs never ran to their end",
                out.setting.name(),
                out.lost
            );
        }
        let j = json!({
            "setting": out.setting.key(),
            "scale": s,
            "lost": out.lost,
            "phases": out.phases.iter().enumerate().map(|(pi, p)| json!({
                "phase": phase_name(o, pi),
                "jobs": p.jobs,
                "run_twice": p.twice,
                "killed_runs": p.killed_runs,
                "never_rerun": p.never_rerun,
                "unacked_at_kill": p.unacked_at_kill,
                "recovery_s": p.recovery.iter().map(|x| x / s).collect::<Vec<_>>(),
                "redis_calls": p.calls,
                "redis_usec": p.usec,
                "visibility_end_s": p.vis_end_ms as f64 / 1000.0 / s,
            })).collect::<Vec<_>>(),
            "calls_by_command": out.by_command.iter().take(12).collect::<Vec<_>>(),
        });
        println!("{j}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker-child") {
        child(&args[1..]);
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        println!(
            "visibility: a benchmark (cargo bench --bench visibility); the rule's decisions on its workload are asserted by `cargo test --lib auto_visibility`"
        );
        return;
    }
    let o = opts(&args);
    let total: f64 = o.phases.iter().map(|p| p.1).sum::<f64>() * o.scale;
    eprintln!(
        "visibility: {} settings side by side, {} phases, about {:.0} s plus the drain",
        o.settings.len(),
        o.phases.len(),
        total
    );
    let handles: Vec<_> = o
        .settings
        .iter()
        .map(|&setting| {
            let o = o.clone();
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(scenario(o, setting))
            })
        })
        .collect();
    let outs: Vec<Outcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    report(&o, &outs);
}
