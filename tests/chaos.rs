//! Chaos and durability: real `jobqueue worker --exec` processes SIGKILLed and restarted,
//! two reapers at once, connections cut, Redis SIGKILLed and restarted with an AOF, the
//! same on a 3-master Cluster, claim replies lost on the way back, and the queue's slot
//! migrated between Cluster nodes under load. At the end every job is acked or dead and none is
//! lost; every job run more than once is explained by an expired lease.
//!
//! CI-sized by default. `JOBQUEUE_CHAOS_SCALE=N` multiplies the jobs and the faults
//! (`make chaos`); `JOBQUEUE_CHAOS_REPORT=FILE` appends each tally to FILE.

mod support;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{ConnectOptions, NewJob, Queue, QueueSettings, Redis};
use rand::Rng;
use support::eventually::Wait;
use support::redis::{RedisCluster, RedisServer};
use support::reply_dropper::ReplyDropper;
use support::slot_migration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");
const TAG: &str = "chaos";
const VISIBILITY: &str = "1s";

/// Records each run (S at the start, E at a clean end) and acts on the payload
/// `<kind> <seconds>`: `poison` exits with the dead-letter code, `flaky` fails its
/// first attempt, anything else sleeps and succeeds.
const HANDLER: &str = r#"
echo "S $JOBQUEUE_JOB_ID $JOBQUEUE_ATTEMPT" >> "$CHAOS_LOG"
read kind secs
case "$kind" in
  poison) echo "poison payload" >&2; exit 99 ;;
  flaky) if [ "$JOBQUEUE_ATTEMPT" = 1 ]; then echo "flaky first attempt" >&2; exit 1; fi ;;
esac
sleep "$secs"
echo "E $JOBQUEUE_JOB_ID $JOBQUEUE_ATTEMPT" >> "$CHAOS_LOG"
"#;

fn scale() -> usize {
    std::env::var("JOBQUEUE_CHAOS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(1)
}

/// The queue's settings: retries come back fast, leases are short, done jobs are kept
/// (for an hour) so the final accounting can read every job.
fn settings() -> QueueSettings {
    QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        max_attempts: 20,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
        completed_retention: Duration::from_secs(3600),
        ..QueueSettings::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ok,
    Flaky,
    Poison,
}

/// The workload: every 23rd job poison, every 9th flaky, the rest plain; each sleeps
/// 20–150 ms.
fn jobs(from: usize, to: usize) -> Vec<(String, Kind, NewJob)> {
    let mut rng = rand::rng();
    (from..to)
        .map(|i| {
            let kind = if i % 23 == 7 {
                Kind::Poison
            } else if i % 9 == 4 {
                Kind::Flaky
            } else {
                Kind::Ok
            };
            let word = match kind {
                Kind::Ok => "ok",
                Kind::Flaky => "flaky",
                Kind::Poison => "poison",
            };
            let secs = rng.random_range(20..150) as f64 / 1000.0;
            let id = format!("j{i}");
            let job = NewJob::new(format!("{word} {secs:.3}\n")).id(id.clone());
            (id, kind, job)
        })
        .collect()
}

async fn connect(url: &str, cluster: bool) -> Queue {
    let redis = Redis::connect(
        &ConnectOptions::new(url)
            .cluster(cluster)
            .response_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("connect");
    Queue::new(redis, "jq", TAG).unwrap()
}

/// Worker processes, killed and restarted at will.
struct Fleet {
    url: String,
    cluster: bool,
    dir: PathBuf,
    procs: Vec<Option<Child>>,
    generation: usize,
    visibility: &'static str,
}

impl Fleet {
    fn start(url: &str, cluster: bool, dir: &Path, count: usize) -> Fleet {
        Fleet::start_with(url, cluster, dir, count, VISIBILITY)
    }

    /// Workers whose leases last `visibility`.
    fn start_with(
        url: &str,
        cluster: bool,
        dir: &Path,
        count: usize,
        visibility: &'static str,
    ) -> Fleet {
        let mut fleet = Fleet {
            url: url.to_string(),
            cluster,
            dir: dir.to_path_buf(),
            procs: (0..count).map(|_| None).collect(),
            generation: 0,
            visibility,
        };
        for i in 0..count {
            fleet.spawn(i);
        }
        fleet
    }

    fn spawn(&mut self, i: usize) {
        self.generation += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("worker-{i}.log")))
            .unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--redis", &self.url, "--tag", TAG])
            .args(["--concurrency", "4", "--visibility", self.visibility])
            .args(["--shutdown-timeout", "3s"])
            .args(["--worker-id", &format!("w{i}-g{}", self.generation)]);
        if self.cluster {
            cmd.arg("--cluster");
        }
        let child = cmd
            .args(["--exec", "sh", "-c", HANDLER])
            .env("CHAOS_LOG", self.dir.join("executions.log"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run jobqueue worker");
        self.procs[i] = Some(child);
    }

    /// SIGKILL one running worker; returns its slot.
    fn kill_random(&mut self) -> Option<usize> {
        let running: Vec<usize> = (0..self.procs.len())
            .filter(|&i| self.procs[i].is_some())
            .collect();
        if running.is_empty() {
            return None;
        }
        let i = running[rand::rng().random_range(0..running.len())];
        let mut child = self.procs[i].take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        Some(i)
    }

    /// Workers that exited without being killed by the test.
    fn crashed(&mut self) -> Vec<String> {
        self.procs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, p)| {
                let status = p.as_mut()?.try_wait().ok()??;
                Some(format!("worker {i} exited: {status}"))
            })
            .collect()
    }

    /// SIGTERM everyone and wait; returns how many exited cleanly.
    fn stop(&mut self) -> usize {
        let mut clean = 0;
        for child in self.procs.iter_mut().flatten() {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        for mut child in self.procs.iter_mut().filter_map(Option::take) {
            if child.wait().map(|s| s.success()).unwrap_or(false) {
                clean += 1;
            }
        }
        clean
    }

    fn logs(&self) -> String {
        (0..self.procs.len())
            .map(|i| {
                std::fs::read_to_string(self.dir.join(format!("worker-{i}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for mut child in self.procs.iter_mut().filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reapers (each on its own connection) that keep going through Redis failures.
fn start_reapers(queues: Vec<Queue>, stop: &CancellationToken) -> Vec<JoinHandle<u64>> {
    queues
        .into_iter()
        .map(|queue| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut requeued = 0;
                while !stop.is_cancelled() {
                    if let Ok(out) = queue.reap_expired(100, 20).await {
                        requeued += out.requeued;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                requeued
            })
        })
        .collect()
}

/// Reads pending, processing, delayed and dead in one atomic step and checks that no id
/// is in two places or twice in pending; counts the violations.
fn start_invariant_checker(
    queue: Queue,
    stop: &CancellationToken,
) -> JoinHandle<(u64, Vec<String>)> {
    let stop = stop.clone();
    tokio::spawn(async move {
        let script = redis::Script::new(
            "return {redis.call('LRANGE', KEYS[1], 0, -1), redis.call('ZRANGE', KEYS[2], 0, -1), \
             redis.call('ZRANGE', KEYS[3], 0, -1), redis.call('ZRANGE', KEYS[4], 0, -1)}",
        );
        let keys = queue.keys().clone();
        let mut conn = queue.redis().clone();
        let mut checks = 0;
        let mut problems = Vec::new();
        while !stop.is_cancelled() {
            let snapshot: redis::RedisResult<[Vec<String>; 4]> = script
                .key(&keys.pending)
                .key(&keys.processing)
                .key(&keys.delayed)
                .key(&keys.dead)
                .invoke_async(&mut conn)
                .await;
            if let Ok([pending, processing, delayed, dead]) = snapshot {
                checks += 1;
                let mut seen = HashSet::new();
                for id in pending
                    .iter()
                    .chain(&processing)
                    .chain(&delayed)
                    .chain(&dead)
                {
                    if !seen.insert(id.clone()) {
                        problems.push(format!("{id} is in two places at once"));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (checks, problems)
    })
}

/// Each run's figures.
#[derive(Debug, Default)]
struct Tally {
    scenario: &'static str,
    enqueued: usize,
    acked: usize,
    dead: usize,
    executions: usize,
    executed_more_than_once: usize,
    extra_executions: usize,
    reaped: u64,
    retried: u64,
    stale_rejected: u64,
    faults: usize,
    lost: usize,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "chaos {}: enqueued={} acked={} dead={} executed_more_than_once={} \
             stale_acks_rejected={} lost={} | faults={} runs={} extra_runs={} \
             (explained by retried={} + reaped={})",
            self.scenario,
            self.enqueued,
            self.acked,
            self.dead,
            self.executed_more_than_once,
            self.stale_rejected,
            self.lost,
            self.faults,
            self.executions,
            self.extra_executions,
            self.retried,
            self.reaped,
        )
    }
}

fn report(tally: &Tally) {
    println!("{tally}");
    if let Ok(path) = std::env::var("JOBQUEUE_CHAOS_REPORT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{tally}").unwrap();
    }
}

/// Runs of each job from the execution log: attempt numbers seen at start.
fn executions(dir: &Path) -> HashMap<String, Vec<u32>> {
    let text = std::fs::read_to_string(dir.join("executions.log")).unwrap_or_default();
    let mut runs: HashMap<String, Vec<u32>> = HashMap::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        if let (Some("S"), Some(id), Some(attempt)) = (parts.next(), parts.next(), parts.next()) {
            runs.entry(id.to_string())
                .or_default()
                .push(attempt.parse().expect("attempt number"));
        }
    }
    runs
}

/// Wait until every one of `expected` jobs is done or dead and nothing is left in
/// flight. Panics with the worker logs after `limit`.
async fn wait_until_settled(
    queue: &Queue,
    expected: impl Fn() -> usize,
    limit: Duration,
    fleet: &Fleet,
) {
    let last = Mutex::new(None);
    Wait::for_("every job settled")
        .within(limit)
        .every(Duration::from_millis(100))
        .explained_by(|| {
            format!(
                "last stats: {:?}\nworker logs:\n{}",
                last.lock().unwrap(),
                fleet.logs()
            )
        })
        .until(async || {
            let stats = queue.stats().await;
            let settled = matches!(&stats, Ok(s) if s.pending == 0
                && s.processing == 0
                && s.delayed == 0
                && (s.acked + s.dead) as usize >= expected());
            *last.lock().unwrap() = Some(stats);
            settled
        })
        .await;
}

/// The final accounting shared by every scenario: reads every job, checks that none is
/// lost, that dead ones are exactly the poison ones, that each job run more than once
/// is explained by an expired lease (or the one planned failure), and that the queue's
/// counters add up.
async fn account(
    scenario: &'static str,
    queue: &Queue,
    dir: &Path,
    kinds: &HashMap<String, Kind>,
    faults: usize,
) -> Tally {
    let stats = queue.stats().await.unwrap();
    let runs = executions(dir);
    let mut tally = Tally {
        scenario,
        enqueued: kinds.len(),
        faults,
        reaped: stats.reaped,
        retried: stats.retried,
        stale_rejected: stats.stale,
        ..Tally::default()
    };
    let mut problems = Vec::new();
    let mut reclaims_without_fail = 0u64;
    for (id, kind) in kinds {
        let job = queue.job(id).await.unwrap();
        let status = job.as_ref().and_then(|j| j.status.clone());
        let attempts = job.as_ref().map_or(0, |j| j.attempts);
        match status.as_deref() {
            Some("done") => tally.acked += 1,
            Some("dead") => {
                tally.dead += 1;
                if *kind != Kind::Poison {
                    problems.push(format!(
                        "{id} ({kind:?}) is dead: {:?}",
                        job.and_then(|j| j.last_error)
                    ));
                }
            }
            other => {
                tally.lost += 1;
                problems.push(format!("{id} lost: status {other:?}"));
            }
        }
        if *kind == Kind::Poison && status.as_deref() == Some("done") {
            problems.push(format!("{id} is poison but was acked"));
        }
        let seen = runs.get(id).map(Vec::as_slice).unwrap_or(&[]);
        tally.executions += seen.len();
        if seen.is_empty() {
            problems.push(format!("{id} ended {status:?} without ever running"));
        }
        // Every run is a claim of its own: two runs under one attempt number would mean
        // one lease ran twice.
        let distinct: HashSet<u32> = seen.iter().copied().collect();
        if distinct.len() != seen.len() {
            problems.push(format!("{id} ran twice under one lease: attempts {seen:?}"));
        }
        if seen.iter().any(|&a| a > attempts) {
            problems.push(format!(
                "{id} ran with attempt {seen:?} beyond its {attempts} claims"
            ));
        }
        if seen.len() > 1 {
            tally.executed_more_than_once += 1;
            tally.extra_executions += seen.len() - 1;
        }
        // Claims beyond the first that no fail asked for: each needs a reaped lease.
        let planned = u32::from(*kind == Kind::Flaky);
        reclaims_without_fail += u64::from(attempts.saturating_sub(1 + planned));
    }
    if tally.extra_executions as u64 > stats.reaped + stats.retried {
        problems.push(format!(
            "{} extra runs, but only {} reaped leases and {} retries",
            tally.extra_executions, stats.reaped, stats.retried
        ));
    }
    if reclaims_without_fail > stats.reaped {
        problems.push(format!(
            "{reclaims_without_fail} claims after the first are not explained by {} reaped leases",
            stats.reaped
        ));
    }
    // Every claim ends in exactly one way, and each job was claimed once plus once per
    // requeue: claimed = jobs + reaped + retried.
    if stats.claimed != kinds.len() as u64 + stats.reaped + stats.retried {
        problems.push(format!(
            "counters do not add up: claimed {} != jobs {} + reaped {} + retried {}",
            stats.claimed,
            kinds.len(),
            stats.reaped,
            stats.retried
        ));
    }
    // Ids set aside while a slot migrated are orphans too, put back by the reaper.
    if stats.orphans != stats.set_aside {
        problems.push(format!(
            "{} orphans, {} of them set aside: an id was queued twice",
            stats.orphans, stats.set_aside
        ));
    }
    if stats.orphaned != 0 {
        problems.push(format!("{} ids still set aside", stats.orphaned));
    }
    let poison = kinds.values().filter(|k| **k == Kind::Poison).count();
    if tally.dead != poison {
        problems.push(format!(
            "{} dead, expected the {poison} poison jobs",
            tally.dead
        ));
    }
    report(&tally);
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert_eq!(tally.lost, 0);
    tally
}

/// (a), (b) and (e): worker processes SIGKILLed at random and restarted, with one or
/// two reapers running.
async fn killed_workers(scenario: &'static str, url: &str, cluster: bool, reapers: usize) -> Tally {
    let scale = scale();
    let n = 300 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(url, cluster).await;
    queue.configure(&settings()).await.unwrap();
    let batch = jobs(0, n);
    let kinds: HashMap<String, Kind> = batch.iter().map(|(id, k, _)| (id.clone(), *k)).collect();
    queue
        .enqueue_many(batch.into_iter().map(|(_, _, j)| j).collect())
        .await
        .unwrap();

    let stop = CancellationToken::new();
    let mut reaper_queues = Vec::new();
    for _ in 0..reapers {
        reaper_queues.push(connect(url, cluster).await);
    }
    let reaper_tasks = start_reapers(reaper_queues, &stop);
    let checker = start_invariant_checker(connect(url, cluster).await, &stop);
    let mut fleet = Fleet::start(url, cluster, dir.path(), 3);

    // Kill a worker every 250–600 ms (while jobs remain), restart it 100–300 ms later.
    let kills_planned = 6 * scale;
    let mut kills = 0;
    while kills < kills_planned {
        let pause = rand::rng().random_range(250..600);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let s = queue.stats().await.unwrap();
        if s.pending + s.processing == 0 {
            break;
        }
        if let Some(i) = fleet.kill_random() {
            kills += 1;
            let pause = rand::rng().random_range(100..300);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            fleet.spawn(i);
        }
    }
    wait_until_settled(
        &queue,
        || n,
        Duration::from_secs(120 * scale as u64),
        &fleet,
    )
    .await;
    fleet.stop();
    stop.cancel();
    let mut requeued_by_reapers = 0;
    for task in reaper_tasks {
        requeued_by_reapers += task.await.unwrap();
    }
    let (checks, problems) = checker.await.unwrap();
    assert!(checks > 0, "the invariant checker ran");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let tally = account(scenario, &queue, dir.path(), &kinds, kills).await;
    assert_eq!(
        requeued_by_reapers, tally.reaped,
        "reapers' own counts match the queue's"
    );
    assert!(kills > 0, "at least one worker was killed mid-run");
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_sigkilled_and_restarted_lose_nothing() {
    let server = RedisServer::start();
    let tally = killed_workers("(a) workers SIGKILLed", &server.url(), false, 1).await;
    assert!(tally.acked > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_two_reapers_at_once_never_requeue_twice() {
    let server = RedisServer::start();
    killed_workers("(b) two reapers", &server.url(), false, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_workers_sigkilled_on_a_cluster_lose_nothing() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    killed_workers("(e) cluster, workers SIGKILLed", &cluster.url(), true, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_workers_recover_from_cut_connections_by_themselves() {
    let scale = scale();
    let server = RedisServer::start();
    let url = server.url();
    let n = 300 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    let batch = jobs(0, n);
    let kinds: HashMap<String, Kind> = batch.iter().map(|(id, k, _)| (id.clone(), *k)).collect();
    queue
        .enqueue_many(batch.into_iter().map(|(_, _, j)| j).collect())
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, false).await], &stop);
    let mut fleet = Fleet::start(&url, false, dir.path(), 3);

    let cuts_planned = 8 * scale;
    let mut cuts = 0;
    let mut cut_clients = 0;
    while cuts < cuts_planned {
        let pause = rand::rng().random_range(200..500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let mut conn = server.conn();
        let s: (i64, i64) = redis::pipe()
            .cmd("LLEN")
            .arg(&queue.keys().pending)
            .cmd("ZCARD")
            .arg(&queue.keys().processing)
            .query(&mut conn)
            .unwrap();
        if s.0 + s.1 == 0 {
            break;
        }
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut conn)
            .unwrap();
        cuts += 1;
        cut_clients += killed;
        assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    }
    wait_until_settled(
        &queue,
        || n,
        Duration::from_secs(120 * scale as u64),
        &fleet,
    )
    .await;
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "workers must survive cut connections: {crashed:?}"
    );
    assert_eq!(
        fleet.stop(),
        3,
        "every worker shut down cleanly\n{}",
        fleet.logs()
    );
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    assert!(
        cuts > 0 && cut_clients > cuts as i64,
        "connections were cut mid-run"
    );
    // A fresh connection for the accounting: the test's own were cut too.
    let queue = connect(&url, false).await;
    account("(c) connections cut", &queue, dir.path(), &kinds, cuts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_redis_sigkilled_and_restarted_with_aof_keeps_every_ack_and_every_job() {
    let scale = scale();
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let url = server.url();
    let n = 300 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    let all = jobs(0, n);
    let kinds: HashMap<String, Kind> = all.iter().map(|(id, k, _)| (id.clone(), *k)).collect();

    // A producer enqueueing in small batches through the restarts; a batch counts as
    // enqueued once a call returned Ok (retried with the same ids until then).
    let confirmed = Arc::new(AtomicU64::new(0));
    let producer = {
        let queue = connect(&url, false).await;
        let confirmed = confirmed.clone();
        let mut all: Vec<NewJob> = all.into_iter().map(|(_, _, j)| j).collect();
        tokio::spawn(async move {
            while !all.is_empty() {
                let rest = all.split_off(all.len().min(20));
                loop {
                    match queue.enqueue_many(all.clone()).await {
                        Ok(out) => {
                            confirmed.fetch_add(out.len() as u64, Ordering::SeqCst);
                            break;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                all = rest;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, false).await], &stop);
    let mut fleet = Fleet::start(&url, false, dir.path(), 2);

    // Before each crash, note every job seen done (and its claim count): an ack the
    // server confirmed must survive the crash, and the job must never be claimed again.
    let acked_before_crash: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let restarts_planned = 4 * scale;
    let mut restarts = 0;
    let observer = connect(&url, false).await;
    while restarts < restarts_planned {
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(400..900))).await;
        let mut snapshot = HashMap::new();
        let mut complete = true;
        for id in kinds.keys() {
            match observer.job(id).await {
                Ok(Some(job)) if job.status.as_deref() == Some("done") => {
                    snapshot.insert(id.clone(), job.attempts);
                }
                Ok(_) => {}
                Err(_) => {
                    complete = false;
                    break;
                }
            }
        }
        if complete {
            acked_before_crash.lock().unwrap().extend(snapshot);
        }
        tokio::task::block_in_place(|| {
            server.kill();
            std::thread::sleep(Duration::from_millis(rand::rng().random_range(50..300)));
            server.restart();
        });
        restarts += 1;
        // Every crash happens with work in flight, until the workload is done.
        if confirmed.load(Ordering::SeqCst) == n as u64
            && observer
                .stats()
                .await
                .map(|s| s.pending + s.processing == 0)
                .unwrap_or(false)
        {
            break;
        }
    }
    producer.await.unwrap();
    wait_until_settled(
        &queue,
        || n,
        Duration::from_secs(120 * scale as u64),
        &fleet,
    )
    .await;
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "workers must survive Redis restarts: {crashed:?}"
    );
    fleet.stop();
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    // No acked job came back: still done, and never claimed again.
    let acked = acked_before_crash.lock().unwrap().clone();
    let mut came_back = Vec::new();
    for (id, attempts) in &acked {
        let job = queue.job(id).await.unwrap();
        let now = job.as_ref().map(|j| (j.status.clone(), j.attempts));
        if now != Some((Some("done".to_string()), *attempts)) {
            came_back.push(format!(
                "{id}: acked with {attempts} claims before a crash, now {now:?}"
            ));
        }
    }
    assert!(!acked.is_empty(), "some jobs were acked before a crash");
    assert!(came_back.is_empty(), "{}", came_back.join("\n"));
    assert_eq!(confirmed.load(Ordering::SeqCst), n as u64);
    assert!(restarts > 0);
    account(
        "(d) Redis SIGKILLed, AOF always",
        &queue,
        dir.path(),
        &kinds,
        restarts,
    )
    .await;
}

/// (f) The replies of claim calls lost at random (the connection cut after the request
/// reached Redis): each lost claim is sent again with its request id and gets the leases
/// made for it, so none waits for the reaper (leases of 30 s would show as `reaped`),
/// none is charged twice, and no job dies without running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_lost_claim_replies_are_answered_by_their_retry() {
    let scale = scale();
    let server = RedisServer::start();
    let n = 300 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&server.url(), false).await;
    queue
        .configure(&QueueSettings {
            visibility_timeout: Duration::from_secs(30),
            ..settings()
        })
        .await
        .unwrap();
    queue.load_scripts().await.unwrap();
    let proxy =
        ReplyDropper::start(server.port, jobqueue::queue::SCRIPTS.claim.sha.as_bytes()).await;
    proxy.cut_at_random(150);
    let batch = jobs(0, n);
    let kinds: HashMap<String, Kind> = batch.iter().map(|(id, k, _)| (id.clone(), *k)).collect();
    queue
        .enqueue_many(batch.into_iter().map(|(_, _, j)| j).collect())
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&server.url(), false).await], &stop);
    let mut fleet = Fleet::start_with(&proxy.url(), false, dir.path(), 3, "30s");
    wait_until_settled(&queue, || n, Duration::from_secs(25), &fleet).await;
    assert_eq!(
        fleet.stop(),
        3,
        "workers survive lost replies\n{}",
        fleet.logs()
    );
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    let cuts = proxy.cuts() as usize;
    let stats = queue.stats().await.unwrap();
    assert!(
        cuts > 0,
        "claim replies were lost: {cuts} of {}",
        proxy.seen()
    );
    assert_eq!(stats.reaped, 0, "no lease waited for the reaper: {stats:?}");
    assert!(
        stats.replayed > 0 && stats.replayed <= cuts as u64,
        "lost claims were answered from their record: replayed {} of {cuts} cut",
        stats.replayed
    );
    let tally = account("(f) claim replies lost", &queue, dir.path(), &kinds, cuts).await;
    println!(
        "chaos (f) claim replies lost: claims_seen={} cut={cuts} replayed={}",
        proxy.seen(),
        stats.replayed
    );
    assert_eq!(tally.lost, 0);
}

/// (g) The queue's slot moved to another Cluster node key by key and back while workers
/// and a reaper run: job hashes and queue keys are split between two nodes for a while,
/// ids whose hash is elsewhere are set aside and put back; nothing is lost and nothing
/// stays set aside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_slot_migration_under_load_loses_nothing() {
    let scale = scale();
    let cluster = RedisCluster::start();
    let url = cluster.url();
    let n = 300 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, true).await;
    queue.configure(&settings()).await.unwrap();
    let batch = jobs(0, n);
    let kinds: HashMap<String, Kind> = batch.iter().map(|(id, k, _)| (id.clone(), *k)).collect();
    queue
        .enqueue_many(batch.into_iter().map(|(_, _, j)| j).collect())
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, true).await], &stop);
    let mut fleet = Fleet::start(&url, true, dir.path(), 3);
    let slot = slot_migration::slot_of(&cluster, &format!("{{{TAG}}}"));
    let home = cluster.node_of(&format!("{{{TAG}}}"));
    let away = (home + 1) % 3;
    let mut moved = 0;
    let mut migrations = 0;
    for _ in 0..scale {
        for (src, dst) in [(home, away), (away, home)] {
            tokio::time::sleep(Duration::from_millis(300)).await;
            slot_migration::begin(&cluster, slot, src, dst);
            loop {
                let batch = slot_migration::migrate_batch(&cluster, slot, src, dst, 10);
                if batch == 0 {
                    break;
                }
                moved += batch;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            slot_migration::finish(&cluster, slot, src, dst);
            migrations += 1;
        }
    }
    wait_until_settled(
        &queue,
        || n,
        Duration::from_secs(120 * scale as u64),
        &fleet,
    )
    .await;
    Wait::for_("no id left set aside")
        .within(Duration::from_secs(10))
        .until(async || queue.stats().await.is_ok_and(|s| s.orphaned == 0))
        .await;
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert_eq!(
        fleet.stop(),
        3,
        "workers survive the migration\n{}",
        fleet.logs()
    );
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    assert!(moved > 0, "keys were migrated");
    let stats = queue.stats().await.unwrap();
    let tally = account(
        "(g) slot migrated and back",
        &queue,
        dir.path(),
        &kinds,
        migrations,
    )
    .await;
    println!(
        "chaos (g) slot migrated and back: migrations={migrations} keys_moved={moved} set_aside={} restored={} orphaned={}",
        stats.set_aside, stats.restored, stats.orphaned
    );
    assert_eq!(tally.lost, 0);
}
