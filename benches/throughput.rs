//! `make bench`: what a queue sustains, measured next to what Redis itself sustains.
//!
//! Starts a private redis-server (`--save "" --appendonly no`) on a free loopback port,
//! measures the primitives the queue paths are bound by with `redis-benchmark`, then the
//! queue: enqueue, claim+ack, the worker runtime, the reaper, memory per waiting job and
//! the operator's cost per reconcile. Prints a table (each figure with its target and its
//! ratio to the primitive limit of the same run) and one JSON object per measurement.
//!
//! `cargo bench --bench throughput -- [--quick] [--only NAME[,NAME…]]`
//! `--quick` runs every measurement on a tenth of the data (a smoke run; its figures are
//! not the ones to publish). Run without `--bench` (as `cargo test --all-targets` does),
//! it makes a smoke pass on a hundredth of the data. `--only` picks sections: primitives, cost, enqueue,
//! claim_ack, durability, worker, reaper, memory, reconcile, settle_claim (add `primitives`
//! for the ratios).

#[path = "../tests/support/redis.rs"]
mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobqueue::queue::{
    Backoff, Durability, FailMode, Lease, NewJob, Queue, QueueSettings, SCRIPTS, new_job_id,
    new_token,
};
use serde_json::json;

use common::RedisServer;

/// A ~45-byte JSON payload, different for every job.
fn payload(i: usize) -> Bytes {
    let p = format!(
        r#"{{"to":"u{:07}@example.com","tpl":"welcome"}}"#,
        i % 10_000_000
    );
    debug_assert_eq!(p.len(), 45);
    Bytes::from(p)
}

const PAYLOAD_BYTES: usize = 45;
/// Concurrent callers in the Redis-cost measurement, and how many passes it makes.
const COST_TASKS: usize = 8;
const COST_PASSES: usize = 3;
const TAG: &str = "bench";

// ---------------------------------------------------------------------------------------
// Results

#[derive(Clone, Copy)]
enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    fn met(self, v: f64) -> bool {
        match self {
            Target::AtLeast(t) => v >= t,
            Target::AtMost(t) => v <= t,
        }
    }
    fn text(self) -> String {
        match self {
            Target::AtLeast(t) => format!("≥ {}", human(t)),
            Target::AtMost(t) => format!("≤ {}", human(t)),
        }
    }
}

/// The primitive a figure is compared with, and how: a rate is divided by the limit's
/// rate, a cost divides the limit's cost, so 1.0 always means "as good as the primitive".
#[derive(Clone)]
struct Limit {
    name: String,
    value: f64,
    /// true: figure / limit (rates); false: limit / figure (costs).
    rate: bool,
}

struct Row {
    name: String,
    what: String,
    value: f64,
    unit: &'static str,
    target: Option<Target>,
    limit: Option<Limit>,
    /// A Redis cost (µs) in claim-shaped units: the value divided by the µs of one call
    /// of the claim-shaped script in the same run, which moves with the machine as the
    /// value does (see `claim_shaped_units`).
    units: Option<f64>,
    extra: serde_json::Value,
}

impl Row {
    fn new(
        name: impl Into<String>,
        what: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> Row {
        Row {
            name: name.into(),
            what: what.into(),
            value,
            unit,
            target: None,
            limit: None,
            units: None,
            extra: json!({}),
        }
    }
    fn target(mut self, t: Target) -> Row {
        self.target = Some(t);
        self
    }
    fn limit(mut self, l: Option<&Limit>) -> Row {
        self.limit = l.cloned();
        self
    }
    fn extra(mut self, e: serde_json::Value) -> Row {
        self.extra = e;
        self
    }
    fn ratio(&self) -> Option<f64> {
        let l = self.limit.as_ref()?;
        if l.value <= 0.0 || self.value <= 0.0 {
            return None;
        }
        Some(if l.rate {
            self.value / l.value
        } else {
            l.value / self.value
        })
    }
    fn json(&self) -> serde_json::Value {
        let mut o = json!({
            "name": self.name,
            "what": self.what,
            "value": round3(self.value),
            "unit": self.unit,
        });
        if let Some(t) = self.target {
            o["target"] = json!(t.text());
            o["met"] = json!(t.met(self.value));
        }
        if let Some(l) = &self.limit {
            o["limit"] = json!(l.name);
            o["limit_value"] = json!(round3(l.value));
        }
        if let Some(r) = self.ratio() {
            o["ratio"] = json!(round3(r));
        }
        if let Some(u) = self.units {
            o["claim_shaped_units"] = json!(round3(u));
        }
        if let serde_json::Value::Object(extra) = &self.extra {
            for (k, v) in extra {
                o[k] = v.clone();
            }
        }
        o
    }
}

/// Every Redis cost in µs, in claim-shaped units too: divided by `unit_us`, the Redis µs
/// of one call of the claim-shaped script in the same run. The machine's speed drifts by
/// tens of percent from minute to minute and moves both alike, so units compare across
/// runs where µs do not. Rows in µs per job, call or lease get the `units` column; the
/// `…usec_per…` figures in a row's JSON get a `…units_per…` twin.
fn claim_shaped_units(rows: &mut [Row], unit_us: f64) {
    if unit_us <= 0.0 {
        return;
    }
    for r in rows {
        if matches!(r.unit, "µs/job" | "µs/call" | "µs/lease") {
            r.units = Some(r.value / unit_us);
        }
        if let serde_json::Value::Object(extra) = &mut r.extra {
            let twins: Vec<(String, f64)> = extra
                .iter()
                .filter(|(k, _)| k.contains("usec_per"))
                .filter_map(|(k, v)| Some((k.replace("usec_per", "units_per"), v.as_f64()?)))
                .collect();
            for (k, v) in twins {
                extra.insert(k, json!(round3(v / unit_us)));
            }
        }
    }
}

fn median(values: &[i64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid] as f64
    } else {
        (v[mid - 1] + v[mid]) as f64 / 2.0
    }
}

/// The q-quantile (nearest rank) of `values`.
fn percentile(values: &[i64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1] as f64
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (serde_json::Value::Object(a), serde_json::Value::Object(b)) = (into, from) {
        a.extend(b);
    }
}

fn round3(v: f64) -> f64 {
    if v.abs() >= 100.0 {
        v.round()
    } else {
        (v * 1000.0).round() / 1000.0
    }
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
    } else if v >= 10.0 {
        format!("{:.1}", v)
    } else {
        format!("{:.2}", v)
    }
}

fn print_table(rows: &[Row]) {
    let head = [
        "measurement",
        "value",
        "unit",
        "units",
        "target",
        "met",
        "ratio",
        "limit (same run)",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.what.clone(),
                human(r.value),
                r.unit.to_string(),
                r.units.map(|u| format!("{u:.2}")).unwrap_or_default(),
                r.target.map(|t| t.text()).unwrap_or_default(),
                match r.target {
                    Some(t) if t.met(r.value) => "yes".into(),
                    Some(_) => "NO".into(),
                    None => String::new(),
                },
                r.ratio().map(|x| format!("{x:.2}")).unwrap_or_default(),
                r.limit
                    .as_ref()
                    .map(|l| format!("{} = {}", l.name, human(l.value)))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let mut width = head.map(|h| h.chars().count());
    for row in &cells {
        for (i, c) in row.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let mut s = String::from("|");
        for (i, c) in cols.iter().enumerate() {
            let pad = width[i] - c.chars().count();
            if i == 1 || i == 3 || i == 6 {
                s.push_str(&format!(" {}{} |", " ".repeat(pad), c));
            } else {
                s.push_str(&format!(" {}{} |", c, " ".repeat(pad)));
            }
        }
        s
    };
    println!("{}", line(&head.map(String::from)));
    let sep: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", line(&sep).replace(' ', "-").replacen('-', " ", 0));
    for row in &cells {
        println!("{}", line(row));
    }
}

// ---------------------------------------------------------------------------------------
// Redis-side counters

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

    fn int(&mut self, section: &str, field: &str) -> i64 {
        self.info(section)[field].parse().unwrap()
    }

    /// calls and usec per command name, from INFO commandstats.
    fn commandstats(&mut self) -> HashMap<String, (u64, u64)> {
        self.info("commandstats")
            .into_iter()
            .filter_map(|(k, v)| {
                let name = k.strip_prefix("cmdstat_")?.to_string();
                let mut calls = 0;
                let mut usec = 0;
                for kv in v.split(',') {
                    match kv.split_once('=') {
                        Some(("calls", n)) => calls = n.parse().ok()?,
                        Some(("usec", n)) => usec = n.parse().ok()?,
                        _ => {}
                    }
                }
                Some((name, (calls, usec)))
            })
            .collect()
    }

    /// Log every command that takes at least `us` µs from now on, from an empty log.
    /// Commands a script calls are logged too (Redis 7), each as its own entry.
    fn slowlog_from(&mut self, us: u32) {
        self.config_set("slowlog-log-slower-than", &us.to_string());
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query(&mut self.conn)
            .unwrap();
    }

    /// The durations (µs) SLOWLOG holds for EVALSHA calls of the script `sha`.
    fn slowlog_durations(&mut self, sha: &str) -> Vec<i64> {
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query(&mut self.conn)
            .unwrap();
        let mut out = Vec::new();
        for entry in log {
            let redis::Value::Array(fields) = entry else {
                continue;
            };
            let (Some(redis::Value::Int(us)), Some(redis::Value::Array(argv))) =
                (fields.get(2), fields.get(3))
            else {
                continue;
            };
            if matches!(argv.get(1), Some(redis::Value::BulkString(b)) if b == sha.as_bytes()) {
                out.push(*us);
            }
        }
        out
    }

    fn flush(&mut self) {
        let _: () = redis::cmd("FLUSHALL").query(&mut self.conn).unwrap();
    }

    fn config_set(&mut self, name: &str, value: &str) {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut self.conn)
            .unwrap();
    }
}

/// CPU seconds used so far: Redis's (INFO cpu, user + system) and this process's.
#[derive(Clone, Copy)]
struct Cpu {
    redis: f64,
    client: f64,
}

impl Server {
    fn cpu(&mut self) -> Cpu {
        let info = self.info("cpu");
        let get = |k: &str| {
            info.get(k)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Cpu {
            redis: get("used_cpu_user") + get("used_cpu_sys"),
            client: own_cpu_seconds(),
        }
    }
}

/// utime + stime of this process, from /proc/self/stat (clock ticks of 1/100 s).
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line: 12 and 13 after the name.
    (tick(11) + tick(12)) / 100.0
}

/// CPU µs per job on each side between two snapshots.
fn cpu_per_job(a: Cpu, b: Cpu, jobs: usize) -> serde_json::Value {
    let per = |x: f64| round3(x * 1e6 / jobs.max(1) as f64);
    json!({
        "redis_cpu_us_per_job": per(b.redis - a.redis),
        "client_cpu_us_per_job": per(b.client - a.client),
    })
}

/// What the scripts cost Redis between two snapshots of INFO commandstats.
struct ScriptCost {
    calls: u64,
    usec_per_call: f64,
    /// redis.call()s per script call (every command but EVALSHA and INFO).
    inner_per_call: f64,
}

fn script_cost(
    before: &HashMap<String, (u64, u64)>,
    after: &HashMap<String, (u64, u64)>,
) -> ScriptCost {
    let delta = |name: &str| {
        let (c1, u1) = after.get(name).copied().unwrap_or_default();
        let (c0, u0) = before.get(name).copied().unwrap_or_default();
        (c1 - c0, u1 - u0)
    };
    let (calls, usec) = delta("evalsha");
    let inner: u64 = after
        .keys()
        .filter(|k| {
            !matches!(
                k.as_str(),
                "evalsha" | "info" | "script|load" | "config|set"
            )
        })
        .map(|k| delta(k).0)
        .sum();
    ScriptCost {
        calls,
        usec_per_call: usec as f64 / calls.max(1) as f64,
        inner_per_call: inner as f64 / calls.max(1) as f64,
    }
}

// ---------------------------------------------------------------------------------------
// redis-benchmark

struct Primitives {
    lpush: f64,
    rpop: f64,
    lpush_p: f64,
    rpop_p: f64,
    evalsha: f64,
    evalsha_p: f64,
    /// Redis µs per call of the claim-shaped script (INFO commandstats, same run).
    evalsha_us: f64,
    ping_rtt_ms: f64,
}

const PIPELINE: usize = 32;

fn redis_benchmark(port: u16, args: &[&str]) -> Vec<(String, f64)> {
    let bin = std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".into());
    let out = Command::new(&bin)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--csv"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin} ({e}): install redis-tools"));
    assert!(out.status.success(), "{bin} {args:?} failed: {:?}", out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split("\",\"").collect();
            let name = cols.first()?.trim_matches('"').to_string();
            let rps: f64 = cols.get(1)?.trim_matches('"').parse().ok()?;
            Some((name, rps))
        })
        .collect()
}

fn primitives(s: &mut Server, scale: usize) -> Primitives {
    let port = s.redis.port;
    let n = (200_000 / scale).to_string();
    let np = (2_000_000 / scale).to_string();
    let p = PIPELINE.to_string();
    let get = |rows: &[(String, f64)], name: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|r| r.1)
            .unwrap_or_else(|| panic!("redis-benchmark printed no {name}: {rows:?}"))
    };
    let plain = redis_benchmark(port, &["-n", &n, "-c", "50", "-t", "lpush,rpop"]);
    s.flush();
    let piped = redis_benchmark(port, &["-n", &np, "-c", "50", "-P", &p, "-t", "lpush,rpop"]);
    s.flush();
    // The smallest script that claims: pop an id and write it back (the list keeps its
    // length, so every call does the same work). One EVALSHA + two redis.call()s.
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("local id = redis.call('RPOP', KEYS[1]) redis.call('LPUSH', KEYS[1], id) return id")
        .query(&mut s.conn)
        .unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg("bench:rot")
        .arg("0123456789abcdef")
        .query(&mut s.conn)
        .unwrap();
    let eval = |extra: &[&str]| {
        let mut args = extra.to_vec();
        args.extend(["evalsha", sha.as_str(), "1", "bench:rot"]);
        redis_benchmark(port, &args)[0].1
    };
    let c0 = s.commandstats();
    let evalsha = eval(&["-n", &n, "-c", "50"]);
    let c1 = s.commandstats();
    let evalsha_us = script_cost(&c0, &c1).usec_per_call;
    let evalsha_p = eval(&["-n", &np, "-c", "50", "-P", &p]);
    let ping = redis_benchmark(
        port,
        &["-n", &(50_000 / scale).to_string(), "-c", "1", "ping"],
    );
    s.flush();
    Primitives {
        lpush: get(&plain, "LPUSH"),
        rpop: get(&plain, "RPOP"),
        lpush_p: get(&piped, "LPUSH"),
        rpop_p: get(&piped, "RPOP"),
        evalsha,
        evalsha_p,
        evalsha_us,
        ping_rtt_ms: 1000.0 / ping[0].1,
    }
}

// ---------------------------------------------------------------------------------------
// Queue workloads

async fn fill(q: &Queue, n: usize) {
    let mut i = 0;
    while i < n {
        let k = (n - i).min(1000);
        let jobs: Vec<NewJob> = (i..i + k).map(|j| NewJob::new(payload(j))).collect();
        q.enqueue_many(jobs).await.unwrap();
        i += k;
    }
}

/// Run `tasks` copies of `f` at once; the wall time until all are done.
async fn concurrently<F, Fut>(tasks: usize, f: F) -> Duration
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks).map(|t| tokio::spawn(f(t))).collect();
    for h in handles {
        h.await.unwrap();
    }
    start.elapsed()
}

async fn enqueue_single(q: &Queue, jobs: usize, tasks: usize) -> f64 {
    let per = jobs / tasks;
    let took = concurrently(tasks, |t| {
        let q = q.clone();
        async move {
            for i in 0..per {
                q.enqueue(NewJob::new(payload(t * per + i))).await.unwrap();
            }
        }
    })
    .await;
    (per * tasks) as f64 / took.as_secs_f64()
}

async fn enqueue_batched(q: &Queue, jobs: usize, tasks: usize, batch: usize) -> f64 {
    let calls = (jobs / batch / tasks).max(1);
    let took = concurrently(tasks, |t| {
        let q = q.clone();
        async move {
            for c in 0..calls {
                let base = (t * calls + c) * batch;
                let jobs: Vec<NewJob> = (base..base + batch)
                    .map(|j| NewJob::new(payload(j)))
                    .collect();
                q.enqueue_many(jobs).await.unwrap();
            }
        }
    })
    .await;
    (calls * tasks * batch) as f64 / took.as_secs_f64()
}

/// Claim and ack (empty handler) until the backlog is gone.
async fn drain(q: &Queue, tasks: usize, batch: usize) -> (usize, Duration) {
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let took = concurrently(tasks, |t| {
        let q = q.clone();
        let done = done.clone();
        async move {
            let worker = format!("bench-{t}");
            loop {
                let leases = q.claim(batch, &worker, None).await.unwrap();
                if leases.is_empty() {
                    break;
                }
                let refs: Vec<_> = leases.iter().map(Lease::lease_ref).collect();
                let acked = q.ack_many(&refs).await.unwrap();
                debug_assert!(acked.iter().all(|a| *a));
                done.fetch_add(leases.len(), std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .await;
    (done.load(std::sync::atomic::Ordering::Relaxed), took)
}

/// Claim `calls` batches of `batch` from COST_TASKS tasks at once, then ack them the same
/// way; what each script cost Redis (INFO commandstats). Calls in flight keep Redis busy,
/// as under load: one call at a time lets its CPU idle between calls, and is slower.
async fn claim_ack_cost(
    s: &mut Server,
    q: &Queue,
    batch: usize,
    calls: usize,
) -> (ScriptCost, ScriptCost) {
    let per_task = calls.div_ceil(COST_TASKS);
    let claimed = Arc::new(std::sync::Mutex::new(Vec::with_capacity(calls)));
    let c0 = s.commandstats();
    concurrently(COST_TASKS, |_| {
        let (q, claimed) = (q.clone(), claimed.clone());
        async move {
            for _ in 0..per_task {
                let got = q.claim(batch, "cost", None).await.unwrap();
                claimed.lock().unwrap().push(got);
            }
        }
    })
    .await;
    let c1 = s.commandstats();
    let batches = Arc::new(std::sync::Mutex::new(std::mem::take(
        &mut *claimed.lock().unwrap(),
    )));
    concurrently(COST_TASKS, |_| {
        let (q, batches) = (q.clone(), batches.clone());
        async move {
            loop {
                let Some(leases) = batches.lock().unwrap().pop() else {
                    break;
                };
                let refs: Vec<_> = leases.iter().map(Lease::lease_ref).collect();
                q.ack_many(&refs).await.unwrap();
            }
        }
    })
    .await;
    let c2 = s.commandstats();
    (script_cost(&c0, &c1), script_cost(&c1, &c2))
}

/// The combined call: COST_TASKS tasks each end the batch it claimed last and claim the
/// next `batch` in one `settle_claim` call, `calls` calls in all; what the script cost
/// Redis (INFO commandstats). The first claims and the last acks are outside the window.
async fn settle_claim_cost(s: &mut Server, q: &Queue, batch: usize, calls: usize) -> ScriptCost {
    use jobqueue::queue::Settle;
    let per_task = calls.div_ceil(COST_TASKS);
    let held: Vec<Vec<Lease>> = {
        let mut out = Vec::new();
        for _ in 0..COST_TASKS {
            out.push(q.claim(batch, "cost", None).await.unwrap());
        }
        out
    };
    let held = Arc::new(std::sync::Mutex::new(held));
    let c0 = s.commandstats();
    concurrently(COST_TASKS, |t| {
        let (q, held) = (q.clone(), held.clone());
        async move {
            let mut mine = std::mem::take(&mut held.lock().unwrap()[t]);
            for _ in 0..per_task {
                let settles: Vec<Settle<'_>> =
                    mine.iter().map(|l| Settle::Ack(l.lease_ref())).collect();
                let r = q
                    .settle_claim(&new_token(), &settles, batch, "cost", None)
                    .await
                    .unwrap();
                mine = r.claimed.leases;
            }
            held.lock().unwrap()[t] = mine;
        }
    })
    .await;
    let c1 = s.commandstats();
    let rest: Vec<Lease> = held.lock().unwrap().drain(..).flatten().collect();
    let refs: Vec<_> = rest.iter().map(Lease::lease_ref).collect();
    q.ack_many(&refs).await.unwrap();
    script_cost(&c0, &c1)
}

/// Run a `Worker` (its defaults, or `concurrency`) with an empty handler until it has
/// acked `jobs` jobs; the wall time from start to the last ack.
async fn run_worker(q: &Queue, concurrency: Option<usize>, jobs: usize) -> (u64, Duration) {
    use jobqueue::worker::Worker;
    let mut builder = Worker::builder(q.clone()).handle_signals(false);
    if let Some(c) = concurrency {
        builder = builder.concurrency(c);
    }
    let worker = builder.build().unwrap();
    let stop = worker.shutdown_token();
    let stats = worker.stats();
    let start = Instant::now();
    let run = tokio::spawn(worker.run(|_lease, _ctx| async { Ok(()) }));
    let deadline = Instant::now() + Duration::from_secs(600);
    while stats.get().acked < jobs as u64 {
        assert!(
            Instant::now() < deadline,
            "the worker stalled: {:?}",
            stats.get()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = start.elapsed();
    stop.cancel();
    let end = run.await.unwrap();
    (end.acked, took)
}

// ---------------------------------------------------------------------------------------

struct Args {
    scale: usize,
    only: Option<Vec<String>>,
}

fn args() -> Args {
    // `cargo bench` passes --bench. Without it the binary runs under `cargo test
    // --all-targets`: then a smoke pass on a hundredth of the data proves it still works.
    let mut a = Args {
        scale: 100,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--bench" if a.scale == 100 => a.scale = 1,
            "--quick" => a.scale = 10,
            "--only" => a.only = it.next().map(|s| s.split(',').map(String::from).collect()),
            _ => {}
        }
    }
    a
}

impl Args {
    fn runs(&self, section: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == section))
    }
}

fn machine(s: &mut Server) -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let server = s.info("server");
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "loadavg_at_start": load,
        "redis_version": server.get("redis_version"),
        "redis_allocator": s.info("memory").get("mem_allocator"),
    })
}

#[tokio::main]
async fn main() {
    let args = args();
    let scale = args.scale;
    let redis = RedisServer::start();
    let conn = redis.conn();
    let mut s = Server { redis, conn };
    let m = machine(&mut s);
    eprintln!("machine: {m}");
    let mut rows: Vec<Row> = Vec::new();

    let prim = if args.runs("primitives") {
        eprintln!("redis-benchmark primitives …");
        Some(primitives(&mut s, scale))
    } else {
        None
    };
    let lim = |name: &str, value: f64| -> Option<Limit> {
        prim.as_ref().map(|_| Limit {
            name: name.to_string(),
            value,
            rate: true,
        })
    };
    let (l_lpush, l_rpop, l_lpush_p, l_rpop_p, l_eval, l_eval_p, l_rtt) = match &prim {
        Some(p) => {
            for (name, what, v) in [
                ("primitive.lpush", "redis-benchmark LPUSH (c=50)", p.lpush),
                ("primitive.rpop", "redis-benchmark RPOP (c=50)", p.rpop),
                (
                    "primitive.lpush_p32",
                    "redis-benchmark LPUSH (c=50, -P 32)",
                    p.lpush_p,
                ),
                (
                    "primitive.rpop_p32",
                    "redis-benchmark RPOP (c=50, -P 32)",
                    p.rpop_p,
                ),
                (
                    "primitive.evalsha",
                    "redis-benchmark EVALSHA claim-shaped (c=50)",
                    p.evalsha,
                ),
                (
                    "primitive.evalsha_p32",
                    "redis-benchmark EVALSHA claim-shaped (c=50, -P 32)",
                    p.evalsha_p,
                ),
            ] {
                rows.push(Row::new(name, what, v, "ops/s"));
            }
            rows.push(Row::new(
                "primitive.evalsha_us",
                "Redis µs per call of the claim-shaped script (commandstats)",
                p.evalsha_us,
                "µs/call",
            ));
            rows.push(Row::new(
                "primitive.ping_rtt",
                "redis-benchmark PING round trip (c=1)",
                p.ping_rtt_ms,
                "ms",
            ));
            (
                lim("LPUSH", p.lpush),
                lim("RPOP", p.rpop),
                lim("LPUSH -P32", p.lpush_p),
                lim("RPOP -P32", p.rpop_p),
                lim("EVALSHA", p.evalsha),
                lim("EVALSHA -P32", p.evalsha_p),
                Some(Limit {
                    name: "PING RTT ms".into(),
                    value: p.ping_rtt_ms,
                    rate: false,
                }),
            )
        }
        None => Default::default(),
    };
    let half = |l: &Option<Limit>| {
        l.as_ref().map(|l| Limit {
            name: format!("{} / 2", l.name),
            value: l.value / 2.0,
            rate: true,
        })
    };

    let q = Queue::new(s.redis.redis().await, "jq", TAG).unwrap();
    q.load_scripts().await.unwrap();

    // Redis time per job, from INFO commandstats ------------------------------------
    if args.runs("cost") {
        for (batch, calls, target) in [(1usize, 5000usize, 25.0), (32, 500, 8.0)] {
            eprintln!("Redis cost per job, batch {batch} …");
            let calls = calls / scale;
            // Three passes; the lowest is the least disturbed by the rest of the machine.
            let passes: Vec<(ScriptCost, ScriptCost)> = {
                let mut out = Vec::new();
                for _ in 0..COST_PASSES {
                    s.flush();
                    fill(&q, batch * calls).await;
                    out.push(claim_ack_cost(&mut s, &q, batch, calls).await);
                }
                out
            };
            let per_job = |(c, a): &(ScriptCost, ScriptCost)| {
                (c.usec_per_call + a.usec_per_call) / batch as f64
            };
            let best = passes
                .iter()
                .min_by(|x, y| per_job(x).total_cmp(&per_job(y)))
                .unwrap();
            let (claim, ack) = best;
            // The floor: two calls of the smallest claim-shaped script per `batch` jobs.
            let floor = prim.as_ref().map(|p| Limit {
                name: format!("2 claim-shaped calls / {batch} jobs, µs"),
                value: 2.0 * p.evalsha_us / batch as f64,
                rate: false,
            });
            rows.push(
                Row::new(
                    format!("cost.claim_ack.b{batch}"),
                    format!("Redis µs per job, claim+ack, batch {batch}"),
                    per_job(best),
                    "µs/job",
                )
                .target(Target::AtMost(target))
                .limit(floor.as_ref())
                .extra(json!({
                    "passes_usec_per_job": passes.iter().map(|p| round3(per_job(p))).collect::<Vec<_>>(),
                    "claim_usec_per_call": round3(claim.usec_per_call),
                    "ack_usec_per_call": round3(ack.usec_per_call),
                    "claim_redis_calls_per_call": round3(claim.inner_per_call),
                    "ack_redis_calls_per_call": round3(ack.inner_per_call),
                    "claim_calls": claim.calls,
                    "ack_calls": ack.calls,
                })),
            );
            for (name, cost) in [("claim", claim), ("ack", ack)] {
                rows.push(Row::new(
                    format!("cost.{name}.b{batch}"),
                    format!("  {name}, batch {batch}: µs per call"),
                    cost.usec_per_call,
                    "µs/call",
                ));
                rows.push(Row::new(
                    format!("cost.{name}.calls.b{batch}"),
                    format!("  {name}, batch {batch}: redis.call()s per call"),
                    cost.inner_per_call,
                    "calls",
                ));
            }
        }
        // enqueue's cost per job at batch 1000
        s.flush();
        let c0 = s.commandstats();
        fill(&q, 20_000 / scale).await;
        let c1 = s.commandstats();
        let enq = script_cost(&c0, &c1);
        rows.push(
            Row::new(
                "cost.enqueue.b1000",
                "Redis µs per job, enqueue, batch 1000",
                enq.usec_per_call / 1000.0,
                "µs/job",
            )
            .extra(json!({"redis_calls_per_call": round3(enq.inner_per_call)})),
        );
        // and at batch 1, from COST_TASKS callers at once as above
        s.flush();
        let per_task = (2000 / scale).div_ceil(COST_TASKS);
        let c0 = s.commandstats();
        concurrently(COST_TASKS, |t| {
            let q = q.clone();
            async move {
                for i in 0..per_task {
                    q.enqueue(NewJob::new(payload(t * per_task + i)))
                        .await
                        .unwrap();
                }
            }
        })
        .await;
        let c1 = s.commandstats();
        let enq = script_cost(&c0, &c1);
        rows.push(
            Row::new(
                "cost.enqueue.b1",
                "Redis µs per job, enqueue, batch 1",
                enq.usec_per_call,
                "µs/job",
            )
            .extra(json!({"redis_calls_per_call": round3(enq.inner_per_call)})),
        );
    }

    // The combined call: ack the last batch and claim the next in one call -------------
    if args.runs("settle_claim") {
        for (batch, calls) in [(1usize, 5000usize), (32, 500)] {
            eprintln!("Redis cost per job, settle_claim, batch {batch} …");
            let calls = calls / scale;
            let mut passes = Vec::new();
            for _ in 0..COST_PASSES {
                s.flush();
                fill(&q, batch * (calls + 2 * COST_TASKS)).await;
                passes.push(settle_claim_cost(&mut s, &q, batch, calls).await);
            }
            let per_job = |c: &ScriptCost| c.usec_per_call / batch as f64;
            let best = passes
                .iter()
                .min_by(|x, y| per_job(x).total_cmp(&per_job(y)))
                .unwrap();
            // In claim-shaped units: µs per job over µs per call of the claim-shaped script.
            let units = prim.as_ref().map(|p| per_job(best) / p.evalsha_us);
            rows.push(
                Row::new(
                    format!("cost.settle_claim.b{batch}"),
                    format!("Redis µs per job, settle_claim (ack+claim in one call), batch {batch}"),
                    per_job(best),
                    "µs/job",
                )
                .extra(json!({
                    "passes_usec_per_job": passes.iter().map(|p| round3(per_job(p))).collect::<Vec<_>>(),
                    "claim_shaped_units_per_job": units.map(round3),
                    "redis_calls_per_call": round3(best.inner_per_call),
                    "calls": best.calls,
                })),
            );
        }
    }

    // Enqueue -------------------------------------------------------------------------
    if args.runs("enqueue") {
        eprintln!("enqueue …");
        for tasks in [1usize, 16] {
            s.flush();
            let rate = enqueue_single(&q, 20_000 / scale, tasks).await;
            rows.push(
                Row::new(
                    format!("enqueue.single.c{tasks}"),
                    format!("enqueue, one job per call, concurrency {tasks}"),
                    rate,
                    "jobs/s",
                )
                .limit(l_eval.as_ref()),
            );
        }
        for tasks in [1usize, 4] {
            s.flush();
            let jobs = 200_000 / scale;
            let u0 = s.cpu();
            let rate = enqueue_batched(&q, jobs, tasks, 1000).await;
            let u1 = s.cpu();
            rows.push(
                Row::new(
                    format!("enqueue.batch1000.c{tasks}"),
                    format!("enqueue, batches of 1000, concurrency {tasks}"),
                    rate,
                    "jobs/s",
                )
                .target(Target::AtLeast(150_000.0))
                .limit(l_lpush_p.as_ref())
                .extra(cpu_per_job(u0, u1, jobs)),
            );
        }
    }

    // Claim + ack ---------------------------------------------------------------------
    if args.runs("claim_ack") {
        let backlog = 50_000 / scale;
        for batch in [1usize, 32] {
            for tasks in [1usize, 16, 64] {
                eprintln!("claim+ack batch {batch} concurrency {tasks} …");
                s.flush();
                fill(&q, backlog).await;
                let c0 = s.commandstats();
                let u0 = s.cpu();
                let (done, took) = drain(&q, tasks, batch).await;
                let u1 = s.cpu();
                let c1 = s.commandstats();
                assert_eq!(done, backlog, "every job was claimed and acked once");
                let cost = script_cost(&c0, &c1);
                let mut extra = json!({
                    "backlog": backlog,
                    "seconds": round3(took.as_secs_f64()),
                    "redis_usec_per_job": round3(cost.usec_per_call * cost.calls as f64 / done as f64),
                });
                merge(&mut extra, cpu_per_job(u0, u1, done));
                let mut row = Row::new(
                    format!("claim_ack.b{batch}.c{tasks}"),
                    format!("claim+ack, batch {batch}, concurrency {tasks}"),
                    done as f64 / took.as_secs_f64(),
                    "jobs/s",
                )
                .extra(extra);
                if batch == 1 {
                    row = row.limit(half(&l_eval).as_ref());
                } else {
                    row = row.limit(l_rpop_p.as_ref());
                    if tasks >= 16 {
                        row = row.target(Target::AtLeast(100_000.0));
                    }
                }
                rows.push(row);
            }
        }
    }

    // Durability: `replicated` (WAIT 1 after each write) next to the default ---------
    if args.runs("durability") {
        // One replica attached, for both: the default pays the replication stream too,
        // only `replicated` waits for it.
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &s.redis.port.to_string()]);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut s.conn)
                .unwrap();
            if info.contains("state=online") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not attach: {info}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let jobs = 20_000 / scale;
        for (name, durability) in [
            ("primary", Durability::Primary),
            ("replicated", "replicated:1:1s".parse().unwrap()),
        ] {
            let dq = q.clone().durability(durability);
            for batch in [1usize, 32] {
                for tasks in [1usize, 16] {
                    eprintln!("durability {name}, batch {batch}, concurrency {tasks} …");
                    s.flush();
                    let enq = enqueue_batched(&dq, jobs, tasks, batch).await;
                    let (done, took) = drain(&dq, tasks, batch).await;
                    rows.push(Row::new(
                        format!("durability.{name}.enqueue.b{batch}.c{tasks}"),
                        format!("enqueue, durability {name}, batch {batch}, concurrency {tasks}"),
                        enq,
                        "jobs/s",
                    ));
                    rows.push(Row::new(
                        format!("durability.{name}.claim_ack.b{batch}.c{tasks}"),
                        format!("claim+ack, durability {name}, batch {batch}, concurrency {tasks}"),
                        done as f64 / took.as_secs_f64(),
                        "jobs/s",
                    ));
                }
            }
        }
        drop(replica);
    }

    // End to end through the worker runtime -------------------------------------------
    if args.runs("worker") {
        // Its defaults (one job at a time), then wider: the runtime claims as many jobs
        // as it has free slots and acks the jobs that finish together in one call.
        for (concurrency, jobs) in [
            (None, 20_000 / scale),
            (Some(16), 50_000 / scale),
            (Some(64), 50_000 / scale),
        ] {
            let label = concurrency.map_or("defaults (concurrency 1)".to_string(), |c| {
                format!("concurrency {c}")
            });
            eprintln!("worker runtime, {label} …");
            s.flush();
            fill(&q, jobs).await;
            let u0 = s.cpu();
            let (acked, took) = run_worker(&q, concurrency, jobs).await;
            let u1 = s.cpu();
            assert_eq!(acked, jobs as u64, "the worker acked every job");
            let mut extra = json!({"jobs": jobs, "seconds": round3(took.as_secs_f64())});
            merge(&mut extra, cpu_per_job(u0, u1, jobs));
            let name =
                concurrency.map_or("worker.defaults".to_string(), |c| format!("worker.c{c}"));
            rows.push(
                Row::new(
                    name,
                    format!("Worker runtime, empty handler, {label}"),
                    jobs as f64 / took.as_secs_f64(),
                    "jobs/s",
                )
                .limit(half(&l_eval).as_ref())
                .extra(extra),
            );
        }
    }

    // Reaper --------------------------------------------------------------------------
    if args.runs("reaper") {
        let leases = 100_000 / scale;
        // The operator's default batch (the JobQueue's reaper.batchSize) and the largest.
        let default_batch = jobqueue::crd::ReaperSpec::default().batch_size as usize;
        let mut batches = vec![default_batch];
        if default_batch != 1000 {
            batches.push(1000);
        }
        for batch in batches {
            eprintln!("reaper batch {batch} …");
            s.flush();
            fill(&q, leases).await;
            let mut until = 0;
            for _ in 0..leases.div_ceil(1000) {
                for l in q
                    .claim(1000, "doomed", Some(Duration::from_millis(1)))
                    .await
                    .unwrap()
                {
                    until = until.max(l.lease_until);
                }
            }
            common::wait_past(&mut s.conn, until);
            // Every reap call of 250 or more leases takes well over 100 µs; the commands it
            // runs inside take less, and would crowd the log out at a threshold of 0.
            s.config_set("slowlog-max-len", "100000");
            s.slowlog_from(100);
            let c0 = s.commandstats();
            let u0 = s.cpu();
            let start = Instant::now();
            let mut longest_client = Duration::ZERO;
            let mut requeued = 0;
            let mut calls = 0;
            loop {
                let t = Instant::now();
                let r = q.reap(batch).await.unwrap();
                longest_client = longest_client.max(t.elapsed());
                requeued += r.requeued;
                calls += 1;
                if !r.more {
                    break;
                }
            }
            let took = start.elapsed();
            let u1 = s.cpu();
            let c1 = s.commandstats();
            s.config_set("slowlog-log-slower-than", "10000");
            let durations = s.slowlog_durations(&SCRIPTS.reap.sha);
            let longest_us = durations.iter().copied().max().unwrap_or(0);
            let logged = durations.len();
            assert_eq!(
                requeued as usize, leases,
                "every expired lease was requeued"
            );
            let cost = script_cost(&c0, &c1);
            let mut extra = json!({
                "calls": calls,
                "redis_usec_per_lease": round3(cost.usec_per_call * cost.calls as f64 / leases as f64),
                "redis_calls_per_lease": round3(cost.inner_per_call * cost.calls as f64 / leases as f64),
            });
            merge(&mut extra, cpu_per_job(u0, u1, leases));
            let default = if batch == default_batch {
                " (default)"
            } else {
                ""
            };
            let mut row = Row::new(
                format!("reaper.b{batch}"),
                format!("reaper, {leases} expired leases, batch {batch}{default}"),
                leases as f64 / took.as_secs_f64(),
                "leases/s",
            )
            .limit(l_lpush_p.as_ref())
            .extra(extra);
            if batch == default_batch {
                row = row.target(Target::AtLeast(100_000.0));
            }
            rows.push(row);
            rows.push(Row::new(
                format!("cost.reap.b{batch}"),
                format!("  Redis µs per lease, reap batch {batch}"),
                cost.usec_per_call * cost.calls as f64 / leases as f64,
                "µs/lease",
            ));
            let mut row = Row::new(
                format!("reaper.longest_call.b{batch}"),
                format!("reaper, longest single call (SLOWLOG), batch {batch}{default}"),
                longest_us as f64 / 1000.0,
                "ms",
            )
            .extra(json!({
                "slowlog_entries": logged,
                "calls": calls,
                "median_ms": round3(median(&durations) / 1000.0),
                "p99_ms": round3(percentile(&durations, 0.99) / 1000.0),
                "client_longest_ms": round3(longest_client.as_secs_f64() * 1000.0),
            }));
            if batch == default_batch {
                row = row.target(Target::AtMost(5.0));
            }
            rows.push(row);
        }
    }

    // Memory per waiting job ----------------------------------------------------------
    if args.runs("memory") {
        eprintln!("memory …");
        let n = 100_000 / scale;
        s.flush();
        let used = |s: &mut Server| {
            let i = s.info("memory");
            let u: i64 = i["used_memory"].parse().unwrap();
            let c: i64 = i
                .get("mem_clients_normal")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            u - c
        };
        // The floor: the payloads alone, in Redis's most compact container.
        let before = used(&mut s);
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let mut cmd = redis::cmd("LPUSH");
            cmd.arg("bench:floor");
            for i in chunk {
                cmd.arg(payload(*i).as_ref());
            }
            let _: () = cmd.query(&mut s.conn).unwrap();
        }
        let floor = (used(&mut s) - before) as f64 / n as f64;
        s.flush();
        let before = used(&mut s);
        fill(&q, n).await;
        let per_job = (used(&mut s) - before) as f64 / n as f64;
        let id = q.pending_ids(1).await.unwrap().remove(0);
        let key = q.keys().job(id.as_str().unwrap());
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&key)
            .query(&mut s.conn)
            .unwrap();
        let usage: i64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .query(&mut s.conn)
            .unwrap();
        let fields: i64 = redis::cmd("HLEN").arg(&key).query(&mut s.conn).unwrap();
        rows.push(
            Row::new(
                "memory.waiting_job",
                format!("Redis memory per waiting job ({PAYLOAD_BYTES}-byte payload)"),
                per_job,
                "bytes",
            )
            .target(Target::AtMost(180.0))
            .limit(Some(&Limit {
                name: "list of payloads, bytes/entry".into(),
                value: floor,
                rate: false,
            }))
            .extra(json!({
                "jobs": n,
                "job_key": key,
                "job_hash_encoding": encoding,
                "job_hash_fields": fields,
                "memory_usage_of_one_job_key": usage,
            })),
        );
        // What other layouts of a waiting job would cost, built directly with HSET and
        // LPUSH in the same key space: the figures docs/benchmarks.md weighs.
        let variants: [(&str, &str, usize, &[&str]); 3] = [
            (
                "memory.layout.payload_status_id16",
                "  what-if: payload + status, 16-character ids (before the lean job)",
                16,
                &["status"],
            ),
            (
                "memory.layout.payload_status",
                "  what-if: payload + status, 12-character ids",
                12,
                &["status"],
            ),
            (
                "memory.layout.payload_only_id16",
                "  what-if: payload only, 16-character ids",
                16,
                &[],
            ),
        ];
        for (name, what, id_len, extra_fields) in variants {
            s.flush();
            let before = used(&mut s);
            let prefix = &q.keys().job_prefix;
            for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
                let mut pipe = redis::pipe();
                let mut ids = Vec::with_capacity(chunk.len());
                for i in chunk {
                    // Ids of any length from the generated ones (ASCII, 12 characters each).
                    let id = format!("{}{}", new_job_id(), new_job_id())[..id_len].to_string();
                    let mut cmd = redis::cmd("HSET");
                    cmd.arg(format!("{prefix}{id}"))
                        .arg("payload")
                        .arg(payload(*i).as_ref());
                    for field in extra_fields {
                        cmd.arg(*field).arg("pending");
                    }
                    pipe.add_command(cmd).ignore();
                    ids.push(id);
                }
                pipe.cmd("LPUSH").arg(&q.keys().pending).arg(&ids).ignore();
                let _: () = pipe.query(&mut s.conn).unwrap();
            }
            let bytes = (used(&mut s) - before) as f64 / n as f64;
            rows.push(Row::new(name, what, bytes, "bytes"));
        }
        // Request records: what one claim or settle_claim call that leased a job keeps
        // for its retries (at most REQUEST_RECORD_LIFE, the visibility when shorter; a
        // settle_claim's record goes as soon as a lease it made is ended). Measured as
        // the memory the records free when deleted, with a worker id as the runtime
        // makes one in Kubernetes (pod name and pid) and 32-hex request ids.
        let calls = 20_000 / scale;
        let worker = "emails-worker-7d9f8c6b5-x2k4q-1";
        let hour = Some(Duration::from_secs(3600));
        for (name, what, settle) in [
            (
                "memory.request_record.settle_claim",
                "Redis memory per request record (settle_claim, 1 job leased)",
                true,
            ),
            (
                "memory.request_record.claim",
                "Redis memory per request record (claim, 1 job leased)",
                false,
            ),
        ] {
            s.flush();
            fill(&q, calls).await;
            for _ in 0..calls {
                if settle {
                    q.settle_claim(&new_token(), &[], 1, worker, hour)
                        .await
                        .unwrap();
                } else {
                    q.claim_request(&new_token(), 1, worker, hour)
                        .await
                        .unwrap();
                }
            }
            let pattern = q
                .keys()
                .claim_request("*")
                .replace('{', "\\{")
                .replace('}', "\\}");
            let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut s.conn).unwrap();
            assert_eq!(keys.len(), calls, "one record per call");
            let usage: i64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&keys[0])
                .query(&mut s.conn)
                .unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut s.conn).unwrap();
            let with = used(&mut s);
            for chunk in keys.chunks(1000) {
                let _: () = redis::cmd("DEL").arg(chunk).query(&mut s.conn).unwrap();
            }
            let bytes = (with - used(&mut s)) as f64 / calls as f64;
            rows.push(Row::new(name, what, bytes, "bytes").extra(json!({
                "calls": calls,
                "worker_id_bytes": worker.len(),
                "memory_usage_of_one_record": usage,
                "record_pttl_ms_with_1h_visibility": ttl,
            })));
        }
    }

    // The operator's cost per reconcile -----------------------------------------------
    if args.runs("reconcile") {
        eprintln!("reconcile …");
        s.flush();
        fill(&q, 50_000 / scale).await;
        let leases = q.claim(100, "busy", None).await.unwrap();
        for l in &leases[..10] {
            q.fail(l, "boom", FailMode::Dead, Backoff::Policy)
                .await
                .unwrap();
        }
        let settings = QueueSettings::default();
        let reads = |s: &mut Server| s.int("stats", "total_reads_processed");
        // INFO's own read is counted too: measure what a bare pair of INFOs adds.
        let r0 = reads(&mut s);
        let r1 = reads(&mut s);
        let info_reads = r1 - r0;
        let first = q.maintain(&settings, 100, 10).await.unwrap();
        let r2 = reads(&mut s);
        let first_rt = r2 - r1 - info_reads;
        let runs = 200 / scale.min(10);
        let mut rts = 0;
        let start = Instant::now();
        let r_start = reads(&mut s);
        for _ in 0..runs {
            let m = q.maintain(&settings, 100, 10).await.unwrap();
            assert!(!m.configured && m.reaped == Default::default());
        }
        let took = start.elapsed();
        rts += reads(&mut s) - r_start - info_reads;
        let ms = took.as_secs_f64() * 1000.0 / runs as f64;
        rows.push(
            Row::new(
                "reconcile.round_trips",
                "operator: Redis round trips per queue per reconcile (nothing expired)",
                rts as f64 / runs as f64,
                "round trips",
            )
            .target(Target::AtMost(1.0))
            .extra(json!({
                "first_reconcile_round_trips": first_rt,
                "first_reconcile_configured": first.configured,
                "client_counted_round_trips": first.round_trips,
            })),
        );
        rows.push(
            Row::new(
                "reconcile.ms",
                "operator: milliseconds per queue per reconcile (nothing expired)",
                ms,
                "ms",
            )
            .limit(l_rtt.as_ref()),
        );
    }

    let _ = (&l_lpush, &l_rpop, &l_eval_p);
    if let Some(p) = &prim {
        claim_shaped_units(&mut rows, p.evalsha_us);
    }
    println!();
    print_table(&rows);
    println!();
    for r in &rows {
        println!("{}", r.json());
    }
    println!(
        "{}",
        json!({"name": "machine", "machine": m, "scale": format!("1/{scale}")})
    );
}
