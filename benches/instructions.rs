//! `make bench-instructions`: the instructions Redis executes per job, counted by valgrind.
//!
//! Wall-clock cost on a shared machine drifts by tens of percent from minute to minute;
//! the instructions redis-server executes for a call do not. This starts a private
//! redis-server under `valgrind --tool=callgrind --instr-atstart=no` on a free loopback
//! port, prepares each phase with instrumentation off (fills, claims), then switches it on
//! around N identical calls made one at a time (`callgrind_control -i on`, `-z`), reads the
//! count (`callgrind_control -e Ir`) and divides by the jobs the phase handled. Each count
//! is also given in *claim-shaped units*: the instructions of one call of the smallest
//! script that claims (`RPOP` an id and `LPUSH` it back, the same script `make bench` times
//! with redis-benchmark), counted in the same run.
//!
//! `cargo bench --bench instructions -- [--quick] [--only NAME[,NAME…]]`
//! Phases (names for `--only`): claim_shaped, enqueue, claim_ack, features, reap, combined,
//! worker. `features` is claim+ack again with each feature of a job or a queue in use, one
//! at a time, beside the plain figure it is compared with (the `FEATURES` table).
//! `--quick` runs a tenth of the calls. Run without `--bench` (as `cargo test
//! --all-targets` does) it makes a smoke pass of a hundredth, or says it skipped when
//! valgrind is missing. The server runs with `--hz 1`: its timer work then adds about
//! 0.15 M instructions per second of a phase instead of 1.2 M, so a count depends on the
//! calls, not on how long the machine took to make them.

#[path = "../tests/support/redis.rs"]
mod common;

use std::io::Read as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jobqueue::queue::{ConnectOptions, Lease, NewJob, Queue, RateLimit, Redis, SCRIPTS, Settle};
use serde_json::json;

const TAG: &str = "bench";

/// A ~45-byte JSON payload, different for every job (the same as `make bench`'s).
fn payload(i: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"to":"u{:07}@example.com","tpl":"welcome"}}"#,
        i % 10_000_000
    ))
}

fn tool(env: &str, default: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| default.to_string())
}

fn have(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

// ---------------------------------------------------------------------------------------
// redis-server under callgrind

/// One redis-server under callgrind, instrumentation off until a phase switches it on.
struct Grind {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    control: String,
    /// When the current phase began, and the wall seconds of the last one.
    began: std::cell::Cell<Option<Instant>>,
    seconds: std::cell::Cell<f64>,
}

impl Grind {
    fn start() -> Grind {
        let dir = tempfile::tempdir().expect("tempdir");
        let valgrind = tool("VALGRIND", "valgrind");
        let server = tool("REDIS_SERVER", "redis-server");
        for _ in 0..10 {
            let port = common::free_port();
            let log = dir.path().join("valgrind.log");
            let mut child = Command::new(&valgrind)
                .arg("--tool=callgrind")
                .arg("--instr-atstart=no")
                .arg(format!(
                    "--callgrind-out-file={}",
                    dir.path().join("callgrind.out").display()
                ))
                .arg(format!("--log-file={}", log.display()))
                .arg(&server)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .args(["--hz", "1"])
                .args(["--dir", dir.path().to_str().unwrap()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot run {valgrind} ({e}): install valgrind (make bench-instructions does)")
                });
            // valgrind starts slowly; the server answers PING once it is up.
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    let vlog = std::fs::read_to_string(&log).unwrap_or_default();
                    if vlog.contains("Address already in use") || err.contains("already in use") {
                        break;
                    }
                    panic!("redis-server under valgrind exited ({status}): {err}{vlog}");
                }
                if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500))
                    && redis::cmd("PING").query::<String>(&mut conn).is_ok()
                {
                    return Grind {
                        child,
                        port,
                        dir,
                        control: tool("CALLGRIND_CONTROL", "callgrind_control"),
                        began: Default::default(),
                        seconds: Default::default(),
                    };
                }
                assert!(
                    Instant::now() < deadline,
                    "redis-server under valgrind did not answer within 120 s"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("redis-server under valgrind found no free port");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn control(&self, args: &[&str]) -> String {
        let out = Command::new(&self.control)
            .args(args)
            .arg(self.child.id().to_string())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} ({e})", self.control));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{} {args:?} failed: {text}{}",
            self.control,
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// Instrumentation on, counters at zero.
    fn begin(&self) {
        self.control(&["-i", "on"]);
        self.control(&["-z"]);
        self.began.set(Some(Instant::now()));
    }

    /// The instructions executed since `begin` (all threads), then instrumentation off.
    fn end(&self) -> u64 {
        let text = self.control(&["-e", "Ir"]);
        self.dump_profile();
        self.control(&["-i", "off"]);
        if let Some(t) = self.began.take() {
            self.seconds.set(t.elapsed().as_secs_f64());
        }
        let total: u64 = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Th "))
            .filter_map(|rest| rest.split_whitespace().nth(1))
            .filter_map(|n| n.replace(',', "").parse::<u64>().ok())
            .sum();
        assert!(
            total > 0,
            "callgrind_control -e Ir printed no count: {text}"
        );
        total
    }
}

impl Grind {
    /// With `INSTR_PROFILE_DIR` set, each phase's counts are also dumped there as a
    /// callgrind profile (`callgrind_annotate` reads them), numbered in phase order.
    fn dump_profile(&self) {
        let Ok(to) = std::env::var("INSTR_PROFILE_DIR") else {
            return;
        };
        self.control(&["-d"]);
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("callgrind.out.") {
                std::fs::rename(entry.path(), std::path::Path::new(&to).join(&name)).unwrap();
            }
        }
    }
}

impl Drop for Grind {
    fn drop(&mut self) {
        // A clean exit lets valgrind remove its vgdb pipes; kill it if it does not come.
        if let Ok(mut conn) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
            let _ = redis::cmd("SHUTDOWN")
                .arg("NOSAVE")
                .query::<redis::Value>(&mut conn);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.dir;
    }
}

// ---------------------------------------------------------------------------------------
// Results

#[derive(Default)]
struct Line {
    name: String,
    what: String,
    calls: usize,
    jobs: usize,
    instructions: u64,
    /// Wall time of the phase: the server's own timer work while it ran is counted too.
    seconds: f64,
    /// Instructions per job over those of the plain claim+ack of the same batch.
    vs_plain: Option<f64>,
    /// In the JSON lines only (the claim and ack parts of a feature's claim+ack).
    hidden: bool,
}

impl Line {
    fn per_job(&self) -> f64 {
        self.instructions as f64 / self.jobs.max(1) as f64
    }
}

fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print_table(lines: &[Line], unit: Option<f64>, skipped: &[String]) {
    // The ratio to the plain claim+ack, when a phase gives one (`features`).
    let ratio = lines.iter().any(|l| l.vs_plain.is_some());
    let mut head = vec![
        "phase",
        "calls",
        "jobs",
        "instructions per job",
        "claim-shaped units",
    ];
    if ratio {
        head.push("× plain claim+ack");
    }
    let rows: Vec<Vec<String>> = lines
        .iter()
        .filter(|l| !l.hidden)
        .map(|l| {
            let mut r = vec![
                l.what.clone(),
                l.calls.to_string(),
                l.jobs.to_string(),
                thousands(l.per_job()),
                unit.map(|u| format!("{:.2}", l.per_job() / u))
                    .unwrap_or_default(),
            ];
            if ratio {
                r.push(l.vs_plain.map(|v| format!("{v:.2}")).unwrap_or_default());
            }
            r
        })
        .collect();
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let fmt = |cols: &[String]| {
        let mut s = String::from("|");
        for (i, c) in cols.iter().enumerate() {
            let pad = " ".repeat(width[i] - c.chars().count());
            if i == 0 {
                s.push_str(&format!(" {c}{pad} |"));
            } else {
                s.push_str(&format!(" {pad}{c} |"));
            }
        }
        s
    };
    println!(
        "{}",
        fmt(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>())
    );
    let sep: Vec<String> = width
        .iter()
        .enumerate()
        .map(|(i, w)| {
            if i == 0 {
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
    for s in skipped {
        println!("{s}");
    }
}

// ---------------------------------------------------------------------------------------
// Phases

async fn fill(q: &Queue, n: usize) {
    let mut i = 0;
    while i < n {
        let k = (n - i).min(1000);
        let jobs: Vec<NewJob> = (i..i + k).map(|j| NewJob::new(payload(j))).collect();
        q.enqueue_many(jobs).await.unwrap();
        i += k;
    }
}

fn flush(conn: &mut redis::Connection) {
    let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
}

/// The scripts of the protocol this harness knows by name; any other script whose name
/// says it claims is the combined ack+claim call.
const KNOWN_SCRIPTS: [&str; 9] = [
    "enqueue", "claim", "ack", "extend", "fail", "reap", "stats", "redrive", "purge",
];

fn combined_script() -> Option<&'static str> {
    SCRIPTS
        .all()
        .into_iter()
        .map(|s| s.name)
        .find(|n| !KNOWN_SCRIPTS.contains(n) && n.contains("claim"))
}

/// Ack `done` and claim up to `n` more in one `settle_claim` call, as a busy worker does
/// in its steady state (a fresh request id each call, as the worker runtime sends).
async fn ack_and_claim(q: &Queue, done: &[Lease], n: usize) -> Option<Vec<Lease>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let request = format!("grind-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let settles: Vec<Settle<'_>> = done.iter().map(|l| Settle::Ack(l.lease_ref())).collect();
    let out = q
        .settle_claim(&request, &settles, n, "grind", None)
        .await
        .expect("settle_claim");
    Some(out.claimed.leases)
}

/// Run a `Worker` with an empty handler until it has acked `jobs` jobs.
async fn run_worker(q: &Queue, concurrency: usize, jobs: usize) {
    use jobqueue::worker::Worker;
    let worker = Worker::builder(q.clone())
        .handle_signals(false)
        .reaper(false)
        .concurrency(concurrency)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let stats = worker.stats();
    let run = tokio::spawn(worker.run(|_lease, _ctx| async { Ok(()) }));
    let deadline = Instant::now() + Duration::from_secs(3600);
    while stats.get().acked < jobs as u64 {
        assert!(
            Instant::now() < deadline,
            "the worker stalled: {:?}",
            stats.get()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    let end = run.await.unwrap();
    assert_eq!(end.acked, jobs as u64, "the worker acked every job once");
}

/// One feature of a job or a queue in use for the `features` phase's claim+ack.
struct Feature {
    name: &'static str,
    what: &'static str,
    /// The i-th job enqueued.
    job: fn(usize) -> NewJob,
    /// Each lease acked with a result (`LeaseRef::with_result`).
    result: bool,
    /// The queue's rate limits (the queue's, the per-key one), set before the fill.
    rate: (Option<RateLimit>, Option<RateLimit>),
    /// The queue's events stream on, this long.
    events: Option<u64>,
}

/// A limit that never binds here: a million claims a second.
const UNBOUND: Option<RateLimit> = Some(RateLimit {
    max: 1_000_000,
    per: Duration::from_secs(1),
});

/// What a job acked with a result carries (a small JSON document).
const RESULT: &[u8] = br#"{"sent":true,"message_id":"0123456789abcdef"}"#;

fn plain_job(i: usize) -> NewJob {
    NewJob::new(payload(i))
}

/// The first is the plain claim+ack every other is compared with.
const FEATURES: &[Feature] = &[
    Feature {
        name: "plain",
        what: "plain",
        job: plain_job,
        result: false,
        rate: (None, None),
        events: None,
    },
    Feature {
        name: "unique",
        what: "unique key (until-done)",
        job: |i| NewJob::new(payload(i)).unique_key(format!("user-{i:07}")),
        result: false,
        rate: (None, None),
        events: None,
    },
    Feature {
        name: "own_timeout",
        what: "own timeout and visibility",
        job: |i| {
            NewJob::new(payload(i))
                .timeout(Duration::from_secs(60))
                .visibility(Duration::from_secs(120))
        },
        result: false,
        rate: (None, None),
        events: None,
    },
    Feature {
        name: "rate_limit",
        what: "queue rate limit (never binds)",
        job: plain_job,
        result: false,
        rate: (UNBOUND, None),
        events: None,
    },
    Feature {
        name: "rate_key",
        what: "per-key rate limit, rate key (1 of 100)",
        job: |i| NewJob::new(payload(i)).rate_key(format!("customer-{:02}", i % 100)),
        result: false,
        rate: (None, UNBOUND),
        events: None,
    },
    Feature {
        name: "notify",
        what: "notify",
        job: notify_job,
        result: false,
        rate: (None, None),
        events: None,
    },
    Feature {
        name: "notify_result",
        what: "notify, acked with a result",
        job: notify_job,
        result: true,
        rate: (None, None),
        events: None,
    },
    Feature {
        name: "priority",
        what: "priority 5 (strict)",
        job: |i| NewJob::new(payload(i)).priority(5),
        result: false,
        rate: (None, None),
        events: None,
    },
    Feature {
        name: "events",
        what: "queue events on",
        job: plain_job,
        result: false,
        rate: (None, None),
        events: Some(10_000),
    },
];

fn notify_job(i: usize) -> NewJob {
    let mut job = NewJob::new(payload(i));
    job.options.notify = Some(Duration::from_secs(600));
    job
}

/// The instructions of `calls` claims of `batch` jobs each (from a backlog of `job`s just
/// filled), then of their acks, and the seconds of each.
async fn claim_then_ack(
    g: &Grind,
    q: &Queue,
    batch: usize,
    calls: usize,
    job: fn(usize) -> NewJob,
    result: Option<&[u8]>,
) -> ((u64, f64), (u64, f64)) {
    let mut i = 0;
    while i < batch * calls {
        let k = (batch * calls - i).min(1000);
        let made = q.enqueue_many((i..i + k).map(job).collect()).await.unwrap();
        assert!(made.iter().all(|e| e.created), "every job was made");
        i += k;
    }
    let mut held = Vec::with_capacity(calls);
    g.begin();
    for _ in 0..calls {
        let leases = q.claim(batch, "grind", None).await.unwrap();
        assert_eq!(leases.len(), batch, "the backlog holds a full batch");
        held.push(leases);
    }
    let claim = (g.end(), g.seconds.get());
    g.begin();
    for leases in &held {
        let refs: Vec<_> = leases
            .iter()
            .map(|l| match result {
                Some(r) => l.lease_ref().with_result(r),
                None => l.lease_ref(),
            })
            .collect();
        let acked = q.ack_many(&refs).await.unwrap();
        assert!(acked.iter().all(|a| *a), "every lease was acked");
    }
    let ack = (g.end(), g.seconds.get());
    (claim, ack)
}

struct Args {
    scale: usize,
    only: Option<Vec<String>>,
}

fn args() -> Args {
    // `cargo bench` passes --bench; without it (cargo test --all-targets) a smoke pass.
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
    fn runs(&self, phase: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == phase))
    }
    /// `n` at full size, scaled down, never below 1.
    fn n(&self, n: usize) -> usize {
        (n / self.scale).max(1)
    }
}

fn version(bin: &str) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let args = args();
    let valgrind = tool("VALGRIND", "valgrind");
    let control = tool("CALLGRIND_CONTROL", "callgrind_control");
    if !have(&valgrind) || !have(&control) {
        assert!(
            args.scale != 1,
            "{valgrind} or {control} not found: `make bench-instructions` installs valgrind"
        );
        println!(
            "instructions: skipped, {valgrind} or {control} not found (make bench-instructions installs them)"
        );
        return;
    }
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    eprintln!("starting redis-server under callgrind …");
    let g = Grind::start();
    let mut conn = redis::Client::open(g.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let q = Queue::new(
        Redis::connect(&ConnectOptions::new(g.url())).await.unwrap(),
        "jq",
        TAG,
    )
    .unwrap();
    q.load_scripts().await.unwrap();
    let mut lines: Vec<Line> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();

    // What the server executes doing nothing (its timer, at --hz 1), per second: a phase
    // of s seconds counts about s times this on top of its calls (JSON `idle_share`).
    g.begin();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_per_second = g.end() as f64 / g.seconds.get();

    // The unit: one call of the claim-shaped script. ------------------------------------
    let mut unit = None;
    if args.runs("claim_shaped") {
        eprintln!("claim-shaped script …");
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(
                "local id = redis.call('RPOP', KEYS[1]) redis.call('LPUSH', KEYS[1], id) return id",
            )
            .query(&mut conn)
            .unwrap();
        let _: () = redis::cmd("LPUSH")
            .arg("bench:rot")
            .arg("0123456789abcdef")
            .query(&mut conn)
            .unwrap();
        let calls = args.n(2000);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha).arg(1).arg("bench:rot");
        g.begin();
        for _ in 0..calls {
            let _: redis::Value = cmd.query(&mut conn).unwrap();
        }
        let ir = g.end();
        unit = Some(ir as f64 / calls as f64);
        lines.push(Line {
            name: "claim_shaped".into(),
            what: "claim-shaped script (RPOP + LPUSH), per call".into(),
            calls,
            jobs: calls,
            instructions: ir,
            seconds: g.seconds.get(),
            ..Default::default()
        });
    }

    // enqueue, batch 1 and 1000 ----------------------------------------------------------
    if args.runs("enqueue") {
        eprintln!("enqueue …");
        flush(&mut conn);
        let calls = args.n(2000);
        g.begin();
        for i in 0..calls {
            q.enqueue(NewJob::new(payload(i))).await.unwrap();
        }
        let ir = g.end();
        lines.push(Line {
            name: "enqueue.b1".into(),
            what: "enqueue, batch 1".into(),
            calls,
            jobs: calls,
            instructions: ir,
            seconds: g.seconds.get(),
            ..Default::default()
        });
        flush(&mut conn);
        let calls = args.n(20);
        let jobs: Vec<Vec<NewJob>> = (0..calls)
            .map(|c| {
                (c * 1000..(c + 1) * 1000)
                    .map(|j| NewJob::new(payload(j)))
                    .collect()
            })
            .collect();
        g.begin();
        for batch in jobs {
            let made = q.enqueue_many(batch).await.unwrap();
            assert_eq!(made.len(), 1000);
        }
        let ir = g.end();
        lines.push(Line {
            name: "enqueue.b1000".into(),
            what: "enqueue, batch 1000".into(),
            calls,
            jobs: calls * 1000,
            instructions: ir,
            seconds: g.seconds.get(),
            ..Default::default()
        });
    }

    // claim then ack, batch 1 and 32 ------------------------------------------------------
    if args.runs("claim_ack") {
        for (batch, calls) in [(1usize, args.n(2000)), (32, args.n(200))] {
            eprintln!("claim+ack, batch {batch} …");
            flush(&mut conn);
            let ((claim, claim_s), (ack, ack_s)) =
                claim_then_ack(&g, &q, batch, calls, plain_job, None).await;
            let jobs = batch * calls;
            lines.push(Line {
                name: format!("claim_ack.b{batch}"),
                what: format!("claim+ack, batch {batch}"),
                calls: 2 * calls,
                jobs,
                instructions: claim + ack,
                seconds: claim_s + ack_s,
                ..Default::default()
            });
            for (name, ir, seconds) in [("claim", claim, claim_s), ("ack", ack, ack_s)] {
                lines.push(Line {
                    name: format!("{name}.b{batch}"),
                    what: format!("  {name} part, batch {batch}"),
                    calls,
                    jobs,
                    instructions: ir,
                    seconds,
                    ..Default::default()
                });
            }
        }
    }

    // claim then ack with each feature in use, batch 1 and 32 ---------------------------
    if args.runs("features") {
        for (batch, calls) in [(1usize, args.n(2000)), (32, args.n(200))] {
            let mut plain = None;
            for f in FEATURES {
                eprintln!("claim+ack, {}, batch {batch} …", f.what);
                flush(&mut conn);
                if f.rate != (None, None) {
                    q.set_rate_limits(Some(f.rate.0), Some(f.rate.1))
                        .await
                        .unwrap();
                }
                if let Some(n) = f.events {
                    q.set_events(n).await.unwrap();
                }
                let result = f.result.then_some(RESULT);
                let ((claim, claim_s), (ack, ack_s)) =
                    claim_then_ack(&g, &q, batch, calls, f.job, result).await;
                let jobs = batch * calls;
                let per_job = (claim + ack) as f64 / jobs as f64;
                let plain = *plain.get_or_insert(per_job);
                lines.push(Line {
                    name: format!("features.{}.b{batch}", f.name),
                    what: format!("claim+ack, {}, batch {batch}", f.what),
                    calls: 2 * calls,
                    jobs,
                    instructions: claim + ack,
                    seconds: claim_s + ack_s,
                    vs_plain: Some(per_job / plain),
                    ..Default::default()
                });
                for (part, ir, seconds) in [("claim", claim, claim_s), ("ack", ack, ack_s)] {
                    lines.push(Line {
                        name: format!("features.{}.{part}.b{batch}", f.name),
                        what: format!("{part} part, {}, batch {batch}", f.what),
                        calls,
                        jobs,
                        instructions: ir,
                        seconds,
                        hidden: true,
                        ..Default::default()
                    });
                }
            }
        }
    }

    // The combined ack+claim, batch 1 and 32 ---------------------------------------------
    if args.runs("combined") {
        match combined_script() {
            None => skipped.push(format!(
                "combined ack+claim, batch 1 and 32: skipped, this build has no combined script (lua/ has {})",
                SCRIPTS.all().map(|s| s.name).join(", ")
            )),
            Some(name) => {
                for (batch, calls) in [(1usize, args.n(2000)), (32, args.n(200))] {
                    eprintln!("combined ack+claim ({name}), batch {batch} …");
                    flush(&mut conn);
                    // The first claim, the uncounted call and the counted ones.
                    fill(&q, batch * (calls + 2)).await;
                    let first = q.claim(batch, "grind", None).await.unwrap();
                    // One call outside the count, to learn whether this harness makes it.
                    let Some(mut held) = ack_and_claim(&q, &first, batch).await else {
                        skipped.push(format!(
                            "combined ack+claim, batch {batch}: skipped, the script `{name}` exists but benches/instructions.rs does not call it yet (ack_and_claim)"
                        ));
                        continue;
                    };
                    g.begin();
                    for _ in 0..calls {
                        let next = ack_and_claim(&q, &held, batch).await.unwrap();
                        assert_eq!(next.len(), batch, "the backlog holds a full batch");
                        held = next;
                    }
                    let ir = g.end();
                    lines.push(Line {
                        name: format!("combined.b{batch}"),
                        what: format!("ack+claim in one call ({name}), batch {batch}"),
                        calls,
                        jobs: batch * calls,
                        instructions: ir,
                        seconds: g.seconds.get(),
                        ..Default::default()
                    });
                }
            }
        }
    }

    // reap, batch 250 ----------------------------------------------------------------------
    if args.runs("reap") {
        eprintln!("reap, batch 250 …");
        flush(&mut conn);
        let leases = args.n(10_000);
        fill(&q, leases).await;
        let mut until = 0;
        let mut claimed = 0;
        while claimed < leases {
            let got = q
                .claim(1000, "doomed", Some(Duration::from_millis(1)))
                .await
                .unwrap();
            claimed += got.len();
            for l in got {
                until = until.max(l.lease_until);
            }
        }
        common::wait_past(&mut conn, until);
        let mut calls = 0;
        let mut requeued = 0;
        g.begin();
        loop {
            let r = q.reap(250).await.unwrap();
            requeued += r.requeued as usize;
            calls += 1;
            if !r.more {
                break;
            }
        }
        let ir = g.end();
        assert_eq!(requeued, leases, "every expired lease was requeued");
        lines.push(Line {
            name: "reap.b250".into(),
            what: "reap, batch 250, per lease".into(),
            calls,
            jobs: leases,
            instructions: ir,
            seconds: g.seconds.get(),
            ..Default::default()
        });
    }

    // The worker runtime, empty handler ----------------------------------------------------
    if args.runs("worker") {
        for (concurrency, jobs) in [(1usize, args.n(2000)), (32, args.n(6400))] {
            eprintln!("worker runtime, concurrency {concurrency} …");
            flush(&mut conn);
            fill(&q, jobs).await;
            g.begin();
            run_worker(&q, concurrency, jobs).await;
            let ir = g.end();
            lines.push(Line {
                name: format!("worker.c{concurrency}"),
                what: format!("worker runtime, empty handler, concurrency {concurrency}"),
                calls: 0,
                jobs,
                instructions: ir,
                seconds: g.seconds.get(),
                ..Default::default()
            });
        }
    }

    drop(conn);
    drop(q);
    let redis_version = version(&tool("REDIS_SERVER", "redis-server"));
    drop(g);

    println!();
    print_table(&lines, unit, &skipped);
    println!();
    for l in &lines {
        let mut o = json!({
            "name": format!("instructions.{}", l.name),
            "what": l.what.trim(),
            "calls": l.calls,
            "jobs": l.jobs,
            "instructions": l.instructions,
            "instructions_per_job": l.per_job().round(),
            "seconds": (l.seconds * 100.0).round() / 100.0,
            "idle_share": (idle_per_second * l.seconds / l.instructions as f64 * 1e4).round() / 1e4,
        });
        if let Some(u) = unit {
            o["claim_shaped_units"] = json!((l.per_job() / u * 100.0).round() / 100.0);
        }
        if let Some(v) = l.vs_plain {
            o["vs_plain_claim_ack"] = json!((v * 100.0).round() / 100.0);
        }
        println!("{o}");
    }
    println!(
        "{}",
        json!({
            "name": "machine",
            "loadavg_at_start": load,
            "valgrind": version(&valgrind),
            "redis": redis_version,
            "scale": format!("1/{}", args.scale),
            "idle_instructions_per_second": idle_per_second.round(),
            "skipped": skipped,
        })
    );
}
