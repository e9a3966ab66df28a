//! `make bench` (second part): the operator at scale. The operator binary runs against
//! the stand-in API server (tests/support/standin.rs) with N JobQueues (500 by default),
//! each with its own Secret (the Redis URL) and its own Deployment of workers, all on
//! one private redis-server. Once every queue has been reconciled, two windows:
//!
//! - **idle**: nothing changes; the steady state's API requests per second by verb, the
//!   Redis commands per queue per reaper interval (`INFO commandstats` deltas, the
//!   bench's own `INFO` calls left out), GET/LIST per reconcile;
//! - **busy**: the bench enqueues one job into every queue every second (counts change
//!   on every reconcile): status patches per minute, with `--status-interval 30s`.
//!
//! and the operator's RSS (`VmRSS`, and its peak `VmHWM`, from /proc). Prints a table
//! with the targets and one JSON object.
//!
//! `cargo bench --bench operator_scale -- [--queues N] [--interval SECS] [--window SECS]`
//! Run without `--bench` (as `cargo test --all-targets` does), it makes a smoke pass
//! with 10 queues and short windows, and checks no target.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jobqueue::queue::NewJob;
use serde_json::{Value, json};
use support::redis::RedisServer;
use support::standin::{Logged, OperatorProcess, StandIn};

const NS: &str = "bench";
const JQ: &str = "/apis/jobqueue.dev/v1alpha1";

struct Args {
    full: bool,
    queues: usize,
    interval: u64,
    window: u64,
}

fn args() -> Args {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let full = raw.iter().any(|a| a == "--bench");
    let mut a = if full {
        Args {
            full,
            queues: 500,
            interval: 3,
            window: 30,
        }
    } else {
        Args {
            full,
            queues: 10,
            interval: 1,
            window: 3,
        }
    };
    let mut it = raw.iter();
    while let Some(flag) = it.next() {
        let mut num = || it.next().and_then(|v| v.parse::<u64>().ok());
        match flag.as_str() {
            "--queues" => a.queues = num().expect("--queues N") as usize,
            "--interval" => a.interval = num().expect("--interval SECS"),
            "--window" => a.window = num().expect("--window SECS"),
            _ => {}
        }
    }
    a
}

/// The sum of `calls` of every command but INFO, from `INFO commandstats`.
fn redis_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split(':')
                .nth(1)?
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `total_reads_processed` of `INFO stats`: the socket reads Redis made, one per round
/// trip of a lone client (pipelines of several clients on one connection may share one).
fn redis_reads(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// GET, LIST, WATCH, PATCH, POST, PUT, DELETE of a slice of the request log.
fn by_verb(log: &[Logged]) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for l in log {
        let named = {
            let parts: Vec<&str> = l.path.trim_matches('/').split('/').collect();
            // /api/v1/namespaces/ns/plural/name[/sub] or /apis/g/v/namespaces/ns/plural/name
            let base = if parts.first() == Some(&"api") { 2 } else { 3 };
            let rest = &parts[base.min(parts.len())..];
            let rest = if rest.first() == Some(&"namespaces") && rest.len() >= 2 {
                &rest[2..]
            } else {
                rest
            };
            rest.len() >= 2
        };
        let verb = match l.method.as_str() {
            "GET" if l.query.contains("watch=true") || l.query.contains("watch=1") => "WATCH",
            "GET" if named => "GET",
            "GET" => "LIST",
            "PATCH" => "PATCH",
            "POST" => "POST",
            "PUT" => "PUT",
            "DELETE" => "DELETE",
            _ => "other",
        };
        *out.entry(verb).or_insert(0) += 1;
    }
    out
}

fn status_patches(log: &[Logged]) -> usize {
    log.iter()
        .filter(|l| {
            l.method == "PATCH" && l.path.ends_with("/status") && l.path.contains("/jobqueues/")
        })
        .count()
}

fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn per_sec(map: &BTreeMap<&'static str, usize>, secs: f64) -> String {
    ["GET", "LIST", "WATCH", "PATCH", "POST", "PUT"]
        .iter()
        .map(|v| format!("{v} {:.2}", *map.get(v).unwrap_or(&0) as f64 / secs))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::main]
async fn main() {
    let a = args();
    let redis = RedisServer::start();
    let api = StandIn::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret_url =
        serde_json::to_value(k8s_openapi::ByteString(redis.url().into_bytes())).unwrap();
    for i in 0..a.queues {
        api.put(
            "/api/v1",
            "secrets",
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("q{i}-redis"), "namespace": NS},
                "data": {"url": secret_url}
            }),
        );
        api.put(
            "/apis/apps/v1",
            "deployments",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("w{i}"), "namespace": NS},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": format!("w{i}")}},
                         "template": {"metadata": {"labels": {"app": format!("w{i}")}},
                                      "spec": {"containers": [{"name": "w", "image": "worker:1"}]}}}
            }),
        );
        api.put(
            JQ,
            "jobqueues",
            json!({
                "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
                "metadata": {"name": format!("q{i}"), "namespace": NS},
                "spec": {
                    "redis": {"urlSecretRef": {"name": format!("q{i}-redis"), "key": "url"}},
                    "hashTag": format!("q{i}"),
                    "reaper": {"interval": format!("{}s", a.interval)},
                    "workers": {
                        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                           "name": format!("w{i}")},
                        "minReplicas": 0, "maxReplicas": 10, "targetBacklogPerReplica": 1000
                    }
                }
            }),
        );
    }
    // The commands of one steady-state upkeep (meta current, nothing expired), measured
    // alone: the operator's commands divided by it are its round trips.
    let per_upkeep = {
        let mut conn = redis.conn();
        let probe = redis.queue("probe").await;
        let settings = jobqueue::queue::QueueSettings::default();
        probe.maintain(&settings, 100, 10).await.unwrap();
        let c0 = redis_calls(&mut conn);
        let done = probe.maintain(&settings, 100, 10).await.unwrap();
        assert_eq!(done.round_trips, 1, "a steady upkeep is one round trip");
        redis_calls(&mut conn) - c0
    };
    let started = Instant::now();
    let op = OperatorProcess::start(
        &api,
        NS,
        dir.path(),
        &[
            "--no-leader-election",
            "--namespace",
            NS,
            "--status-interval",
            "30s",
            "--log-level",
            "warn",
        ],
        &[],
    );
    let pid = op.child.id();
    let reconciled = |api: &StandIn| {
        api.all("jobqueues")
            .iter()
            .filter(|q| {
                q["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count()
    };
    op.wait_for("every queue reconciled and ready")
        .within(Duration::from_secs(300))
        .every(Duration::from_millis(200))
        .until(async || (reconciled(&api) == a.queues).then_some(()))
        .await;
    let warmup = started.elapsed();
    // Two intervals more: the first reconciles' writes settle.
    tokio::time::sleep(Duration::from_secs(2 * a.interval)).await;

    let mut conn = redis.conn();
    let window = Duration::from_secs(a.window);

    // Idle: nothing changes.
    let reads_info = {
        let r0 = redis_reads(&mut conn);
        let r1 = redis_reads(&mut conn);
        r1 - r0
    };
    let reads0 = redis_reads(&mut conn);
    let (log0, calls0, t0) = (api.log().len(), redis_calls(&mut conn), Instant::now());
    tokio::time::sleep(window).await;
    let (log1, calls1, idle_secs) = (
        api.log(),
        redis_calls(&mut conn),
        t0.elapsed().as_secs_f64(),
    );
    let reads1 = redis_reads(&mut conn);
    // Each INFO is a read: three more between the two counts.
    let idle_reads = (reads1 - reads0).saturating_sub(3 * reads_info);
    let idle_log = &log1[log0..];
    let idle = by_verb(idle_log);
    let intervals = idle_secs / a.interval as f64;
    let idle_calls = calls1 - calls0;
    let commands_per_queue_interval = idle_calls as f64 / a.queues as f64 / intervals;
    let round_trips_per_queue_interval = commands_per_queue_interval / per_upkeep as f64;
    let reads_per_queue_interval = idle_reads as f64 / a.queues as f64 / intervals;
    let reconciles = a.queues as f64 * intervals;
    let reads = (idle.get("GET").unwrap_or(&0) + idle.get("LIST").unwrap_or(&0)) as f64;
    let reads_per_reconcile = reads / reconciles;
    let rss_idle = proc_kib(pid, "VmRSS:");

    // Busy: one job into every queue every second.
    let queues: Vec<_> = {
        let r = redis.redis().await;
        (0..a.queues)
            .map(|i| jobqueue::queue::Queue::new(r.clone(), "jq", &format!("q{i}")).unwrap())
            .collect()
    };
    let log2 = api.log().len();
    let t1 = Instant::now();
    while t1.elapsed() < window {
        let tick = Instant::now();
        let jobs = queues.iter().map(|q| q.enqueue(NewJob::new("x")));
        for r in futures::future::join_all(jobs).await {
            r.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed())).await;
    }
    let busy_secs = t1.elapsed().as_secs_f64();
    let log3 = api.log();
    let busy_log = &log3[log2..];
    let busy = by_verb(busy_log);
    let patches_per_min = status_patches(busy_log) as f64 * 60.0 / busy_secs;
    let patches_per_min_queue = patches_per_min / a.queues as f64;
    let rss = proc_kib(pid, "VmRSS:");
    let hwm = proc_kib(pid, "VmHWM:");

    println!();
    println!(
        "operator at scale: {} JobQueues (each with a Secret and a Deployment), one redis-server, \
         reaper.interval {}s, --status-interval 30s; warm-up (all ready) {:.1}s",
        a.queues,
        a.interval,
        warmup.as_secs_f64()
    );
    println!("idle window {idle_secs:.0}s:");
    println!(
        "  API requests/s by verb      {}",
        per_sec(&idle, idle_secs)
    );
    println!(
        "  API GET+LIST per reconcile  {reads_per_reconcile:.4}   (target 0 in the steady state)"
    );
    println!(
        "  Redis round trips/queue/interval {round_trips_per_queue_interval:.2}   (target <= 1; {commands_per_queue_interval:.1} commands per queue per interval, {per_upkeep} per upkeep round trip; {idle_calls} commands in {intervals:.1} intervals)"
    );
    println!(
        "  Redis socket reads/queue/interval {reads_per_queue_interval:.2}   (pipelines of queues sharing the connection may share a read)"
    );
    println!("busy window {busy_secs:.0}s (one job per queue per second):");
    println!(
        "  API requests/s by verb      {}",
        per_sec(&busy, busy_secs)
    );
    println!(
        "  status patches/min          {patches_per_min:.0} ({patches_per_min_queue:.2} per queue; without the throttle {:.0} per queue)",
        60.0 / a.interval as f64
    );
    println!(
        "operator RSS                  {:.1} MiB idle, {:.1} MiB busy, peak {:.1} MiB   (target < 64 MiB)",
        rss_idle as f64 / 1024.0,
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    let result: Value = json!({
        "bench": "operator_scale",
        "queues": a.queues,
        "reaper_interval_s": a.interval,
        "warmup_s": warmup.as_secs_f64(),
        "idle": {"seconds": idle_secs, "requests": idle, "get_list_per_reconcile": reads_per_reconcile,
                 "redis_commands_per_queue_per_interval": commands_per_queue_interval,
                 "redis_commands_per_upkeep": per_upkeep,
                 "redis_round_trips_per_queue_per_interval": round_trips_per_queue_interval,
                 "redis_reads_per_queue_per_interval": reads_per_queue_interval},
        "busy": {"seconds": busy_secs, "requests": busy, "status_patches_per_minute": patches_per_min},
        "rss_kib": {"idle": rss_idle, "busy": rss, "peak": hwm},
    });
    println!("{result}");
    if a.full {
        let mut missed = Vec::new();
        if round_trips_per_queue_interval > 1.05 {
            missed.push("Redis round trips per queue per interval");
        }
        if reads_per_reconcile > 0.01 {
            missed.push("API GET/LIST per reconcile");
        }
        if hwm > 64 * 1024 {
            missed.push("RSS");
        }
        if !missed.is_empty() {
            eprintln!("missed targets: {}", missed.join(", "));
        }
    }
    drop(op);
}
