//! Chaos and durability: real `jobqueue worker --exec` processes SIGKILLed and restarted
//! (with commands that start grandchildren, too), two reapers at once, connections cut,
//! a worker partitioned from Redis for longer than its lease, Redis SIGKILLed and
//! restarted with an AOF, the same on a 3-master Cluster, and (through the operator
//! binary against the stand-in API server) workers scaled up from zero for delayed and
//! retried jobs that fall due, claim replies lost on the way back, and the queue's slot
//! migrated between Cluster nodes under load; and behind Sentinel, the primary
//! SIGKILLed under load and a manual failover while workers hold leases; `replicated`
//! durability whose `WAIT` times out (no replica, a replica SIGSTOPped); ids of 1024
//! bytes and ids that are not UTF-8 through the exec worker; schedules fired by the
//! workers through their SIGKILLs and Redis restarts with an AOF (every tick one job). At the end every job is
//! acked or dead and none is lost; every job run more than once is explained by an
//! expired lease. Runs are counted from each worker process's own records
//! (tests/support/runs.rs): no job is dead-lettered without having run
//! (`dead_without_running`), and no two runs of a job overlap for longer than the grace
//! (`overlap_beyond_grace`).
//!
//! CI-sized by default. `JOBQUEUE_CHAOS_SCALE=N` multiplies the jobs and the faults
//! (`make chaos`); `JOBQUEUE_CHAOS_REPORT=FILE` appends each tally to FILE. Each scenario
//! runs alone by its letter: `cargo test --test chaos m_`.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{NewJob, Queue, QueueSettings, Redis};
use rand::Rng;
use support::chaos::{
    Faults, Kind, connect, payload, report, scale, settings, start_reapers, wait_until_settled,
};
use support::eventually::Wait;
use support::fleet::{Fleet, TAG};
use support::procs;
use support::proxy::Proxy;
use support::redis::{RedisCluster, RedisServer, enqueue_raw};
use support::reply_dropper::ReplyDropper;
use support::runs::{self, Work};
use support::sentinel::{MASTER, SentinelSetup};
use support::slot_migration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The overlap bound of the suite: every worker runs with `--kill-grace 1s` (or less),
/// so two runs of one job may overlap by at most this (docs/reliability.md, "The lease's
/// local deadline"). `overlap_beyond_grace` counts the pairs of runs that overlapped
/// longer, from the workers' own records.
const GRACE: Duration = Duration::from_secs(1);

/// The workload: every 23rd job poison, every 9th flaky, the rest plain; each sleeps
/// 20–150 ms.
fn jobs(from: usize, to: usize) -> Vec<(String, Kind, NewJob)> {
    (from..to)
        .map(|i| {
            let (kind, payload) = payload(i);
            let id = format!("j{i}");
            let job = NewJob::new(payload).id(id.clone());
            (id, kind, job)
        })
        .collect()
}

/// Enqueue `batch`; returns each job's kind, for the final accounting.
async fn enqueue(queue: &Queue, batch: Vec<(String, Kind, NewJob)>) -> HashMap<String, Kind> {
    let kinds = batch.iter().map(|(id, k, _)| (id.clone(), *k)).collect();
    queue
        .enqueue_many(batch.into_iter().map(|(_, _, j)| j).collect())
        .await
        .unwrap();
    kinds
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

/// Each run's figures. Runs are counted from the workers' own records
/// (tests/support/runs.rs), not from the queue's counters.
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
    /// Dead-lettered jobs that no worker ever started: must be 0.
    dead_without_running: usize,
    /// Pairs of runs of one job that overlapped longer than [`GRACE`]: must be 0.
    overlap_beyond_grace: usize,
    /// The longest two runs of one job overlapped (for the figures).
    longest_overlap: Duration,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "chaos {}: enqueued={} acked={} dead={} executed_more_than_once={} \
             stale_acks_rejected={} lost={} dead_without_running={} overlap_beyond_grace={} \
             | faults={} runs={} extra_runs={} (explained by retried={} + reaped={}) \
             longest_overlap={:.3}s",
            self.scenario,
            self.enqueued,
            self.acked,
            self.dead,
            self.executed_more_than_once,
            self.stale_rejected,
            self.lost,
            self.dead_without_running,
            self.overlap_beyond_grace,
            self.faults,
            self.executions,
            self.extra_executions,
            self.retried,
            self.reaped,
            self.longest_overlap.as_secs_f64(),
        )
    }
}

/// Runs of each job from the workers' own records: attempt numbers seen at start.
fn executions(dir: &Path) -> HashMap<Vec<u8>, Vec<u32>> {
    let mut runs: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
    for run in runs::read(dir) {
        runs.entry(run.id).or_default().push(run.attempt);
    }
    runs
}

/// What the workers' records say beyond the run counts: the dead jobs that never
/// started (`dead` lists them), and the pairs of runs of one job that overlapped longer
/// than [`GRACE`]. Fills the tally's two figures; returns one line per violation.
fn run_checks(tally: &mut Tally, dir: &Path, dead: &[Vec<u8>]) -> Vec<String> {
    let all = runs::read(dir);
    let started = runs::by_job(&all);
    let mut problems = Vec::new();
    for id in dead {
        if !started.contains_key(id) {
            tally.dead_without_running += 1;
            problems.push(format!(
                "{} was dead-lettered without ever running",
                runs::show(id)
            ));
        }
    }
    let (beyond, longest) = runs::overlaps_beyond(&all, GRACE);
    tally.overlap_beyond_grace = beyond.len();
    tally.longest_overlap = longest;
    problems.extend(beyond);
    problems
}

/// The final accounting shared by every scenario: reads every job, checks that none is
/// lost, that dead ones are exactly the poison ones, that each job run more than once
/// is explained by an expired lease (or the one planned failure), and that the queue's
/// counters add up.
async fn account<K: AsRef<[u8]>>(
    scenario: &'static str,
    queue: &Queue,
    dir: &Path,
    kinds: &HashMap<K, Kind>,
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
    let mut dead = Vec::new();
    for (id, kind) in kinds {
        let job = queue.job(id).await.unwrap();
        let id = id.as_ref();
        let show = runs::show(id);
        let status = job.as_ref().and_then(|j| j.status.clone());
        let attempts = job.as_ref().map_or(0, |j| j.attempts);
        match status.as_deref() {
            Some("done") => tally.acked += 1,
            Some("dead") => {
                tally.dead += 1;
                dead.push(id.to_vec());
                if *kind != Kind::Poison {
                    problems.push(format!(
                        "{show} ({kind:?}) is dead: {:?}",
                        job.and_then(|j| j.last_error)
                    ));
                }
            }
            other => {
                tally.lost += 1;
                problems.push(format!("{show} lost: status {other:?}"));
            }
        }
        if *kind == Kind::Poison && status.as_deref() == Some("done") {
            problems.push(format!("{show} is poison but was acked"));
        }
        let seen = runs.get(id).map(Vec::as_slice).unwrap_or(&[]);
        tally.executions += seen.len();
        if seen.is_empty() {
            problems.push(format!("{show} ended {status:?} without ever running"));
        }
        // Every run is a claim of its own: two runs under one attempt number would mean
        // one lease ran twice.
        let distinct: HashSet<u32> = seen.iter().copied().collect();
        if distinct.len() != seen.len() {
            problems.push(format!(
                "{show} ran twice under one lease: attempts {seen:?}"
            ));
        }
        if seen.iter().any(|&a| a > attempts) {
            problems.push(format!(
                "{show} ran with attempt {seen:?} beyond its {attempts} claims"
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
    if tally.extra_executions as u64 > stats.reaped + stats.retried + stats.released {
        problems.push(format!(
            "{} extra runs, but only {} reaped leases, {} retries and {} releases",
            tally.extra_executions, stats.reaped, stats.retried, stats.released
        ));
    }
    if reclaims_without_fail > stats.reaped {
        problems.push(format!(
            "{reclaims_without_fail} claims after the first are not explained by {} reaped leases",
            stats.reaped
        ));
    }
    // Every claim ends in exactly one way, and each job was claimed once plus once per
    // requeue: claimed = jobs + reaped + retried + released.
    if stats.claimed != kinds.len() as u64 + stats.reaped + stats.retried + stats.released {
        problems.push(format!(
            "counters do not add up: claimed {} != jobs {} + reaped {} + retried {} + released {}",
            stats.claimed,
            kinds.len(),
            stats.reaped,
            stats.retried,
            stats.released
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
    problems.extend(run_checks(&mut tally, dir, &dead));
    report(&tally);
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert_eq!(
        (
            tally.lost,
            tally.dead_without_running,
            tally.overlap_beyond_grace
        ),
        (0, 0, 0)
    );
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
    let kinds = enqueue(&queue, jobs(0, n)).await;

    let stop = CancellationToken::new();
    let mut reaper_queues = Vec::new();
    for _ in 0..reapers {
        reaper_queues.push(connect(url, cluster).await);
    }
    let reaper_tasks = start_reapers(reaper_queues, &stop);
    let checker = start_invariant_checker(connect(url, cluster).await, &stop);
    // The scenario's reapers are the only ones (the workers' own are off), so every
    // reaped lease is counted by one of them and the counts below must match.
    let mut fleet = Fleet::start_with(
        url,
        cluster,
        dir.path(),
        3,
        "w",
        Work::Sleep,
        &["--no-reaper"],
    );

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
    let kinds = enqueue(&queue, jobs(0, n)).await;
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

/// The leases a worker holds now, read from Redis: (job id, token).
async fn leases_of(queue: &Queue, worker: &str) -> Vec<(String, String)> {
    let mut conn = queue.redis().clone();
    let ids: Vec<String> = redis::cmd("ZRANGE")
        .arg(&queue.keys().processing)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut held = Vec::new();
    for id in ids {
        // The worker holding a lease is in its claim_token.
        let token: Option<String> = redis::cmd("HGET")
            .arg(queue.keys().job(&id))
            .arg("claim_token")
            .query_async(&mut conn)
            .await
            .unwrap();
        let who = token
            .as_deref()
            .and_then(|t| jobqueue::queue::parse_claim_token(t.as_bytes()))
            .map(|l| l.1);
        if let (Some(who), Some(token)) = (who, token)
            && who == worker
        {
            held.push((id, token));
        }
    }
    held
}

/// Runs started by `worker` that never reached their end (stopped by a signal), and
/// whether each job then ran to its end under a later claim (on another worker, or on
/// this one after the heal).
fn interrupted_runs(dir: &Path, worker: &str) -> Vec<(String, u32, bool)> {
    let all = runs::read(dir);
    all.iter()
        .filter(|r| r.worker == worker && r.how != runs::End::Finished)
        .map(|r| {
            let again = all
                .iter()
                .any(|m| m.id == r.id && m.attempt > r.attempt && m.how == runs::End::Finished);
            (runs::show(&r.id), r.attempt, again)
        })
        .collect()
}

/// (f) One worker reaches Redis through a proxy that the test cuts, holding the traffic
/// back without closing anything, for more than twice the lease, again and again. Each
/// time, every process of its jobs must be gone by the lease's local deadline plus the
/// kill grace (while still cut off), its jobs run on the other workers, and an ack with
/// its tokens sent from its side after the heal is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_a_partitioned_worker_stops_by_its_lease_deadline_and_its_late_acks_are_refused() {
    let scale = scale();
    let server = RedisServer::start();
    let proxy = Proxy::start(([127, 0, 0, 1], server.port).into());
    let url = server.url();
    let lease = Duration::from_secs(1);
    let grace = Duration::from_millis(500);
    let n = 40 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    // Jobs longer than the lease, so a cut always catches the cut-off worker mid-job
    // with runs its deadline must stop.
    let batch: Vec<(String, NewJob)> = (0..n)
        .map(|i| {
            let id = format!("p{i}");
            let secs = rand::rng().random_range(1500..3000) as f64 / 1000.0;
            (id.clone(), NewJob::new(format!("ok {secs:.3}\n")).id(id))
        })
        .collect();
    let kinds: HashMap<String, Kind> = batch.iter().map(|(id, _)| (id.clone(), Kind::Ok)).collect();
    queue
        .enqueue_many(batch.into_iter().map(|(_, j)| j).collect())
        .await
        .unwrap();

    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, false).await], &stop);
    let checker = start_invariant_checker(connect(&url, false).await, &stop);
    let mut healthy = Fleet::start(&url, false, dir.path(), 2);
    let mut cut_off = Fleet::start_with(
        &proxy.url(),
        false,
        dir.path(),
        1,
        "cut",
        Work::Sleep,
        &["--kill-grace", "500ms"],
    );
    let cut_id = cut_off.ids[0].clone();
    // The cut-off side's own connection, for its late acks.
    let far = connect(&proxy.url(), false).await;

    let mut cuts = 0;
    let mut late_acks_refused = 0;
    let mut slowest_stop = Duration::ZERO;
    while cuts < 2 * scale {
        let s = queue.stats().await.unwrap();
        if s.pending < 8 {
            break;
        }
        let held = Wait::for_("the cut-off worker in the middle of jobs")
            .within(Duration::from_secs(30))
            .explained_by(|| cut_off.logs())
            .until(async || {
                let held = leases_of(&queue, &cut_id).await;
                (!held.is_empty() && !procs::with_env("JOBQUEUE_WORKER_ID", &cut_id).is_empty())
                    .then_some(held)
            })
            .await;
        proxy.blackhole();
        let cut_at = tokio::time::Instant::now();
        // Its last renewal was sent before the cut: deadline <= cut + lease, SIGTERM then,
        // SIGKILL by grace later. Checked while it is still cut off, with nothing but its
        // own deadline to stop them. How long it took is the tally's slowest_stop (about
        // lease + grace on a quiet machine): a measurement, not a bound, as a loaded one
        // stretches it.
        Wait::for_("every process of the cut-off worker's jobs gone")
            .within(Duration::from_secs(30))
            .every(Duration::from_millis(20))
            .explained_by(|| {
                format!(
                    "left: {:?}\n{}",
                    procs::with_env("JOBQUEUE_WORKER_ID", &cut_id),
                    cut_off.logs()
                )
            })
            .until(async || procs::with_env("JOBQUEUE_WORKER_ID", &cut_id).is_empty())
            .await;
        slowest_stop = slowest_stop.max(cut_at.elapsed());
        // Stay cut for more than two leases: the reaper hands its jobs to the others.
        tokio::time::sleep_until(cut_at + lease * 2 + grace).await;
        proxy.heal();
        for (job, token) in &held {
            let accepted = far.ack((job.as_str(), token.as_str())).await.unwrap();
            assert!(
                !accepted,
                "a late ack of {job} from the cut-off side was accepted"
            );
            late_acks_refused += 1;
        }
        cuts += 1;
    }
    wait_until_settled(
        &queue,
        || n,
        Duration::from_secs(120 * scale as u64),
        &healthy,
    )
    .await;
    healthy.stop();
    cut_off.stop();
    stop.cancel();
    for task in reapers {
        task.await.unwrap();
    }
    let (checks, problems) = checker.await.unwrap();
    assert!(checks > 0, "the invariant checker ran");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let interrupted = interrupted_runs(dir.path(), &cut_id);
    let tally = account(
        "(f) a worker partitioned past its lease",
        &queue,
        dir.path(),
        &kinds,
        cuts,
    )
    .await;
    println!(
        "  cuts={cuts} interrupted_runs={} late_acks_refused={late_acks_refused} slowest_stop={slowest_stop:?} (lease {lease:?} + grace {grace:?})",
        interrupted.len()
    );
    assert!(cuts > 0, "the worker was cut off at least once");
    assert!(
        !interrupted.is_empty(),
        "cuts interrupted runs: {:?}",
        runs::read(dir.path())
            .into_iter()
            .filter(|r| r.worker == cut_id)
            .collect::<Vec<_>>()
    );
    let not_again: Vec<_> = interrupted.iter().filter(|r| !r.2).collect();
    assert!(not_again.is_empty(), "did not run again: {not_again:?}");
    assert!(tally.reaped > 0);
}

/// (g) Workers whose commands start grandchildren (a background pipeline), SIGKILLed at
/// random: after each kill no process of the killed worker's jobs survives (read from
/// the process table), and every job runs again elsewhere. The first jobs run 5 s, so
/// a surviving grandchild cannot end by itself within the check's 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_exec_workers_sigkilled_take_their_grandchildren_with_them() {
    let scale = scale();
    let server = RedisServer::start();
    let url = server.url();
    let n = 200 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    // Long jobs first: their pipelines outlive the 3 s the check below allows, so a
    // grandchild left behind by a killed worker is seen, not gone by itself.
    let long = 24 * scale;
    let mut batch: Vec<(String, Kind, NewJob)> = (0..long)
        .map(|i| {
            let id = format!("long{i}");
            (id.clone(), Kind::Ok, NewJob::new("ok 5\n").id(id))
        })
        .collect();
    batch.extend(jobs(0, n));
    let n = n + long;
    let kinds = enqueue(&queue, batch).await;
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, false).await], &stop);
    let mut fleet = Fleet::start_with(
        &url,
        false,
        dir.path(),
        3,
        "grand",
        Work::Grandchildren,
        &[],
    );

    let mut kills = 0;
    let mut kills_mid_job = 0;
    while kills < 6 * scale {
        let pause = rand::rng().random_range(250..600);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let s = queue.stats().await.unwrap();
        if s.pending + s.processing == 0 {
            break;
        }
        let running: Vec<usize> = fleet
            .ids
            .iter()
            .map(|id| procs::with_env("JOBQUEUE_WORKER_ID", id).len())
            .collect();
        let Some(i) = fleet.kill_random() else {
            continue;
        };
        kills += 1;
        if running[i] > 0 {
            kills_mid_job += 1;
        }
        let killed = fleet.ids[i].clone();
        Wait::for_("no process of the killed worker's jobs left")
            .within(Duration::from_secs(3))
            .every(Duration::from_millis(20))
            .explained_by(|| format!("left: {:?}", procs::with_env("JOBQUEUE_WORKER_ID", &killed)))
            .until(async || procs::with_env("JOBQUEUE_WORKER_ID", &killed).is_empty())
            .await;
        fleet.spawn(i);
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
    for task in reapers {
        task.await.unwrap();
    }
    let tally = account(
        "(g) exec workers with grandchildren SIGKILLed",
        &queue,
        dir.path(),
        &kinds,
        kills,
    )
    .await;
    assert!(
        kills > 0 && kills_mid_job > 0,
        "workers were killed mid-run"
    );
    assert!(tally.acked > 0);
}

/// (h) Scale-to-zero with delayed and retried jobs, through the operator binary against
/// the stand-in API server: the workers are at zero, jobs fall due (delayed enqueues,
/// and a job whose first attempt failed with a backoff), and nothing claims. The
/// operator's reaper promotes them (`reaper.batchSize` 1 and `--reap-budget` 1: one per
/// reconcile) and its backlog counts the rest as due, so the first reconcile that sees
/// them due scales the Deployment from 0 straight to what they need. The test plays
/// the kubelet: worker processes run while the Deployment has replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_scale_to_zero_wakes_for_delayed_and_retried_jobs() {
    use jobqueue::queue::{Backoff, FailMode, FailOutcome};
    use serde_json::json;
    use support::redis::{redis_now_ms, wait_past};
    use support::standin::{OperatorProcess, StandIn};

    const APPS: &str = "/apis/apps/v1";
    const CRD: &str = "/apis/jobqueue.dev/v1alpha1";
    const SCALE: &str = "/apis/apps/v1/namespaces/jobs/deployments/worker/scale";
    // Enough due jobs for 3 replicas at 10 per replica; the maximum is 3.
    let n = 29 * scale();
    let server = RedisServer::start();
    let queue = connect(&server.url(), false).await;
    let dir = tempfile::tempdir().unwrap();
    let mut conn = server.conn();
    let due_after = Duration::from_secs(3);

    // The retried job: its first attempt (the test's) failed, its retry waits a backoff.
    let mut kinds: HashMap<String, Kind> = HashMap::new();
    let retried = queue
        .enqueue(NewJob::new("flaky 0.01").id("retried"))
        .await
        .unwrap();
    kinds.insert(retried.id.to_string(), Kind::Flaky);
    let lease = queue.claim_one("first-try", None).await.unwrap().unwrap();
    let outcome = queue
        .fail(
            &lease,
            "first try",
            FailMode::Retry,
            Backoff::After(due_after),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailOutcome::Delayed);
    // The delayed ones, due at the same time.
    let delayed: Vec<NewJob> = (0..n)
        .map(|i| {
            kinds.insert(format!("later-{i}"), Kind::Ok);
            NewJob::new("ok 0.02")
                .id(format!("later-{i}"))
                .delay(due_after)
        })
        .collect();
    queue.enqueue_many(delayed).await.unwrap();
    // Every job is due once Redis's clock passes this.
    let due_at = redis_now_ms(&mut conn) + due_after.as_millis() as i64;

    let api = StandIn::start().await;
    api.put(
        APPS,
        "deployments",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "worker", "namespace": "jobs"},
            "spec": {"replicas": 0}
        }),
    );
    api.put(
        CRD,
        "jobqueues",
        json!({
            "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
            "metadata": {"name": "chaos", "namespace": "jobs"},
            "spec": {
                "redis": {"url": server.url()},
                "hashTag": TAG,
                "completedRetention": "1h",
                "reaper": {"interval": "1s", "batchSize": 1},
                "workers": {
                    "scaleTargetRef": {"name": "worker"},
                    "minReplicas": 0,
                    "maxReplicas": 3,
                    "targetBacklogPerReplica": 10,
                    "scaleDownStabilization": "2s"
                }
            }
        }),
    );
    let op = OperatorProcess::start(
        &api,
        "jobs",
        dir.path(),
        &["--no-leader-election", "--reap-budget", "1"],
        &[],
    );
    let replicas = {
        let api = api.clone();
        move || {
            api.get(APPS, "deployments", "jobs", "worker").unwrap()["spec"]["replicas"]
                .as_i64()
                .unwrap_or(0) as usize
        }
    };

    // The kubelet: as many worker processes as the Deployment has replicas.
    let fleet = Arc::new(Mutex::new(Fleet::start(
        &server.url(),
        false,
        dir.path(),
        0,
    )));
    let stop = CancellationToken::new();
    let kubelet = {
        let (fleet, stop, replicas) = (fleet.clone(), stop.clone(), replicas.clone());
        tokio::spawn(async move {
            let mut most = 0;
            while !stop.is_cancelled() {
                let want = replicas();
                most = most.max(want);
                {
                    let mut fleet = fleet.lock().unwrap();
                    while fleet.running() < want {
                        fleet.grow();
                    }
                    while fleet.running() > want {
                        fleet.shrink();
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        })
    };

    // The jobs fall due with no worker running.
    let mut poll = server.conn();
    tokio::task::spawn_blocking(move || wait_past(&mut poll, due_at))
        .await
        .unwrap();
    let due_seen = api.log().len();
    op.wait_for("a scale-up from zero")
        .until(async || replicas() > 0)
        .await;
    let log = api.log();
    let scale_requests: Vec<(usize, String, String)> = log
        .iter()
        .enumerate()
        .filter(|(_, r)| r.path == SCALE)
        .map(|(i, r)| (i, r.method.clone(), r.body.clone()))
        .collect();
    let (first_patch, _, body) = scale_requests
        .iter()
        .find(|(_, m, _)| m == "PATCH")
        .expect("a scale patch")
        .clone();
    let to: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        to["spec"]["replicas"], 3,
        "from zero straight to what all due jobs need (10 per replica), not only the \
         promoted ones"
    );
    // Within one reaper interval: the reconcile in flight when the jobs fell due may
    // have read Redis before; the next one scales. Counted in reconciles (each reads
    // the scale once), not in wall time.
    let reads_between = scale_requests
        .iter()
        .filter(|(i, m, _)| m == "GET" && *i >= due_seen && *i < first_patch)
        .count();
    assert!(
        reads_between <= 2,
        "{reads_between} reconciles after the jobs fell due before the scale-up"
    );

    // The workers run everything; then the Deployment goes back to zero.
    let expected = kinds.len() as u64;
    let logs_dir = dir.path().to_path_buf();
    Wait::for_("every job acked")
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .explained_by(move || {
            let logs: Vec<String> = std::fs::read_dir(&logs_dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("worker-"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                .collect();
            format!("worker logs:\n{}", logs.join("\n"))
        })
        .until(async || {
            let s = queue.stats().await.unwrap();
            s.pending == 0 && s.processing == 0 && s.delayed == 0 && s.acked == expected
        })
        .await;
    op.wait_for("the workers back at zero")
        .until(async || replicas() == 0)
        .await;
    stop.cancel();
    let most = kubelet.await.unwrap();
    assert!(most > 0, "no worker ever ran");
    fleet.lock().unwrap().stop();
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.due, stats.orphaned), (0, 0));
    let tally = account(
        "(h) scale-to-zero with delayed and retried jobs",
        &queue,
        dir.path(),
        &kinds,
        0,
    )
    .await;
    assert_eq!(tally.acked as u64, expected, "every job ran and was acked");
    assert_eq!(
        queue.job("retried").await.unwrap().unwrap().attempts,
        2,
        "the retried job ran again after its backoff"
    );
}

/// (i) The replies of claim calls lost at random (the connection cut after the request
/// reached Redis): each lost claim is sent again with its request id and gets the leases
/// made for it, so none waits for the reaper (leases of 30 s would show as `reaped`),
/// none is charged twice, and no job dies without running. Workers claim with
/// `settle_claim` (ending their finished leases in the same call), so its replies are
/// the ones cut, acks and fails included: a resend answers them from the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i_lost_claim_replies_are_answered_by_their_retry() {
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
    let proxy = ReplyDropper::start(
        server.port,
        jobqueue::queue::SCRIPTS.settle_claim.sha.as_bytes(),
    )
    .await;
    proxy.cut_at_random(150);
    let kinds = enqueue(&queue, jobs(0, n)).await;
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&server.url(), false).await], &stop);
    let mut fleet = Fleet::start_with(
        &proxy.url(),
        false,
        dir.path(),
        3,
        "lost",
        Work::Sleep,
        &["--visibility", "30s"],
    );
    wait_until_settled(&queue, || n, Duration::from_secs(25 * scale as u64), &fleet).await;
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
    let tally = account("(i) claim replies lost", &queue, dir.path(), &kinds, cuts).await;
    println!(
        "chaos (i) claim replies lost: claims_seen={} cut={cuts} replayed={}",
        proxy.seen(),
        stats.replayed
    );
    assert_eq!(tally.lost, 0);
}

/// (j) The queue's slot moved to another Cluster node key by key and back while workers
/// and a reaper run: job hashes and queue keys are split between two nodes for a while,
/// ids whose hash is elsewhere are set aside and put back; nothing is lost and nothing
/// stays set aside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j_slot_migration_under_load_loses_nothing() {
    let scale = scale();
    let cluster = RedisCluster::start();
    let url = cluster.url();
    let n = 300 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, true).await;
    queue.configure(&settings()).await.unwrap();
    let kinds = enqueue(&queue, jobs(0, n)).await;
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, true).await], &stop);
    let mut fleet = Fleet::start_with(&url, true, dir.path(), 3, "mig", Work::Sleep, &[]);
    let slot = slot_migration::slot_of(&cluster, &format!("{{{TAG}}}"));
    let home = cluster.node_of(&format!("{{{TAG}}}"));
    let away = (home + 1) % 3;
    let mut moved = 0;
    let mut migrations = 0;
    for _ in 0..scale {
        for (src, dst) in [(home, away), (away, home)] {
            tokio::time::sleep(Duration::from_millis(300)).await;
            slot_migration::begin(&cluster, slot, src, dst);
            // The queue's own keys first, then its job hashes ten at a time: for the
            // whole migration, scripts run where the queue keys are and find the
            // hashes of the ids they hold missing.
            moved += slot_migration::migrate_present(&cluster, src, dst, &queue.keys().all_keys());
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
        "(j) slot migrated and back",
        &queue,
        dir.path(),
        &kinds,
        migrations,
    )
    .await;
    println!(
        "chaos (j) slot migrated and back: migrations={migrations} keys_moved={moved} set_aside={} restored={} orphaned={}",
        stats.set_aside, stats.restored, stats.orphaned
    );
    assert_eq!(tally.lost, 0);
}

/// A queue handle through the Sentinels of `setup`, with `durability`.
async fn connect_sentinel(setup: &SentinelSetup, durability: &str) -> Queue {
    let redis = Redis::connect(
        &setup
            .options()
            .response_timeout(Duration::from_secs(5))
            .failover_wait(Duration::from_secs(30)),
    )
    .await
    .expect("connect via Sentinel");
    Queue::new(redis, "jq", TAG)
        .unwrap()
        .durability(durability.parse().unwrap())
}

/// The `jobqueue worker` arguments that reach the queue through `setup`'s Sentinels.
fn sentinel_args(setup: &SentinelSetup, durability: &str) -> Vec<String> {
    vec![
        "--sentinel".into(),
        setup.addr_list(),
        "--master-name".into(),
        MASTER.into(),
        "--durability".into(),
        durability.into(),
    ]
}

/// A producer enqueueing `all` in batches of 5 every 25 ms; a batch counts as enqueued
/// once a call returned Ok (sent again with the same ids until then). Returns the ids
/// confirmed.
fn start_producer(
    queue: Queue,
    all: Vec<(String, Kind, NewJob)>,
    confirmed: Arc<Mutex<Vec<String>>>,
) -> JoinHandle<u64> {
    tokio::spawn(async move {
        let mut retries = 0;
        let mut all = all;
        while !all.is_empty() {
            let rest = all.split_off(all.len().min(5));
            loop {
                let jobs = all.iter().map(|(_, _, j)| j.clone()).collect();
                match queue.enqueue_many(jobs).await {
                    Ok(_) => {
                        confirmed
                            .lock()
                            .unwrap()
                            .extend(all.iter().map(|(id, _, _)| id.clone()));
                        break;
                    }
                    Err(_) => {
                        retries += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            all = rest;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        retries
    })
}

/// Wait until nothing is pending, claimed or delayed (jobs whose enqueue a failover
/// lost are never coming; the accounting counts them).
async fn wait_until_drained(queue: &Queue, limit: Duration, fleet: &Fleet) {
    let last = Mutex::new(None);
    Wait::for_("the queue drained")
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
            let drained =
                matches!(&stats, Ok(s) if s.pending == 0 && s.processing == 0 && s.delayed == 0);
            *last.lock().unwrap() = Some(stats);
            drained
        })
        .await;
}

/// The accounting of a failover: a job whose enqueue was confirmed must end done (or
/// dead, for poison); one that did not is lost. A failover may also drop a claim, an
/// ack or a fail that the primary made and did not pass on: the job then runs again
/// (one attempt number may run twice), which is counted, not refused.
async fn account_failover(
    scenario: &'static str,
    queue: &Queue,
    dir: &Path,
    kinds: &HashMap<String, Kind>,
    confirmed: &[String],
    faults: usize,
) -> (Tally, Vec<String>) {
    let stats = queue.stats().await.unwrap();
    let runs = executions(dir);
    let confirmed: HashSet<&String> = confirmed.iter().collect();
    let mut tally = Tally {
        scenario,
        enqueued: confirmed.len(),
        faults,
        reaped: stats.reaped,
        retried: stats.retried,
        stale_rejected: stats.stale,
        ..Tally::default()
    };
    let mut problems = Vec::new();
    let mut lost = Vec::new();
    let mut dead = Vec::new();
    for (id, kind) in kinds {
        if !confirmed.contains(id) {
            continue;
        }
        let job = queue.job(id).await.unwrap();
        let status = job.as_ref().and_then(|j| j.status.clone());
        match status.as_deref() {
            Some("done") => tally.acked += 1,
            Some("dead") => {
                tally.dead += 1;
                dead.push(id.as_bytes().to_vec());
                if *kind != Kind::Poison {
                    problems.push(format!("{id} ({kind:?}) is dead"));
                }
            }
            other => {
                tally.lost += 1;
                lost.push(format!("{id}: status {other:?}"));
            }
        }
        if *kind == Kind::Poison && status.as_deref() == Some("done") {
            problems.push(format!("{id} is poison but was acked"));
        }
        let seen = runs.get(id.as_bytes()).map(Vec::as_slice).unwrap_or(&[]);
        tally.executions += seen.len();
        if seen.len() > 1 {
            tally.executed_more_than_once += 1;
            tally.extra_executions += seen.len() - 1;
        }
    }
    problems.extend(run_checks(&mut tally, dir, &dead));
    report(&tally);
    if !lost.is_empty() {
        println!("{scenario}: lost jobs: {}", lost.join(", "));
    }
    (tally, problems)
}

/// The worker log lines that show a switch of primary.
fn switch_lines(fleet: &Fleet) -> Vec<String> {
    fleet
        .logs()
        .lines()
        .filter(|l| l.contains("primary") || l.contains("failover"))
        .map(str::to_string)
        .collect()
}

/// (k) The primary SIGKILLed under load (producer, workers through Sentinel, a reaper),
/// Sentinel promotes a replica and everyone carries on; the killed node comes back as a
/// replica. With `primary` durability a failover may drop writes the primary confirmed
/// and had not passed on yet: the lost count is reported as it is. With `replicated`
/// durability every confirmed enqueue survives: lost = 0.
async fn primary_killed(scenario: &'static str, durability: &str) -> Tally {
    let scale = scale();
    let mut setup = SentinelSetup::start();
    let n = 200 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect_sentinel(&setup, durability).await;
    queue.configure(&settings()).await.unwrap();
    let all = jobs(0, n);
    let kinds: HashMap<String, Kind> = all.iter().map(|(id, k, _)| (id.clone(), *k)).collect();
    let confirmed: Arc<Mutex<Vec<String>>> = Arc::default();
    let producer = start_producer(
        connect_sentinel(&setup, durability).await,
        all,
        confirmed.clone(),
    );
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect_sentinel(&setup, durability).await], &stop);
    let args = sentinel_args(&setup, durability);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut fleet = Fleet::start_with(
        "redis://127.0.0.1:1",
        false,
        dir.path(),
        3,
        if durability == "primary" { "kp" } else { "kr" },
        Work::Sleep,
        &args,
    );
    // A kill once a third (then more) of the jobs were confirmed, with work in flight.
    let kills_planned = 1 + scale / 4;
    let mut kills = 0;
    while kills < kills_planned {
        let target = n * (kills + 1) / (kills_planned + 2);
        Wait::for_("jobs confirmed before the kill")
            .within(Duration::from_secs(60 * scale as u64))
            .every(Duration::from_millis(20))
            .until(async || confirmed.lock().unwrap().len() >= target)
            .await;
        let old = setup.primary_port();
        tokio::task::block_in_place(|| {
            setup.server(old).kill();
            let new = setup.wait_for_new_primary(old);
            // The node comes back empty, once every Sentinel names `new` (one that still
            // named the old node would send clients to the empty one), and the
            // Sentinels make it a replica of `new`.
            setup.wait_until_all_name(new);
            setup.server(old).restart();
            setup.wait_for_role(old, "slave");
            // Healthy again (every Sentinel agrees, both replicas in sync) before the
            // next kill.
            setup.wait_until_ready();
            new
        });
        kills += 1;
    }
    let retries = producer.await.unwrap();
    wait_until_drained(&queue, Duration::from_secs(120 * scale as u64), &fleet).await;
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "workers must survive a failover: {crashed:?}"
    );
    let switches = switch_lines(&fleet);
    fleet.stop();
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    let confirmed = confirmed.lock().unwrap().clone();
    assert_eq!(confirmed.len(), n, "the producer got every batch confirmed");
    let (tally, problems) =
        account_failover(scenario, &queue, dir.path(), &kinds, &confirmed, kills).await;
    println!(
        "{scenario}: producer retries={retries}; worker lines about the primary: {}\n  {}",
        switches.len(),
        switches
            .iter()
            .take(4)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert!(
        !switches.is_empty(),
        "the workers logged the switch of primary"
    );
    assert_eq!(kills, kills_planned);
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k_primary_sigkilled_under_load_default_durability_reports_lost() {
    let tally = primary_killed("(k) primary SIGKILLed, durability primary", "primary").await;
    // Nothing is promised about lost here: it is reported. The rest is.
    assert!(tally.acked > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k_primary_sigkilled_under_load_replicated_durability_loses_nothing() {
    let tally = primary_killed(
        "(k) primary SIGKILLed, durability replicated:1:2s",
        "replicated:1:2s",
    )
    .await;
    assert_eq!(tally.lost, 0, "{tally}");
}

/// (l) `SENTINEL FAILOVER` while workers hold leases (every job enqueued, and
/// confirmed by both replicas, before): no job is lost, the leases held across the
/// failover are still fenced on the new primary (a stale token's ack is refused, the
/// holder's is taken), and the workers go on there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l_manual_failover_while_leases_are_held_loses_nothing_and_keeps_fencing() {
    let scale = scale();
    let setup = SentinelSetup::start();
    let n = 200 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect_sentinel(&setup, "primary").await;
    queue.configure(&settings()).await.unwrap();
    let rounds = 1 + scale / 4;
    let mut all = jobs(0, n);
    let ids: Vec<String> = all.iter().map(|(id, _, _)| id.clone()).collect();
    let producer = queue.clone().durability("replicated:2:5s".parse().unwrap());
    // The work comes in one part per failover, enqueued just before it: each failover
    // meets a backlog and leases held (the workers no longer stall on one).
    let mut parts = Vec::new();
    for r in (0..rounds).rev() {
        parts.push(all.split_off(n * r / rounds));
    }
    let mut kinds = enqueue(&producer, parts.remove(0)).await;
    // Two leases of the test's own: one held across the failover, one left to expire.
    let held = queue
        .claim_one("holder", Some(Duration::from_secs(120)))
        .await
        .unwrap()
        .expect("a job to hold");
    let expiring = queue
        .claim_one("sleeper", Some(Duration::from_millis(300)))
        .await
        .unwrap()
        .expect("a job to let expire");
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect_sentinel(&setup, "primary").await], &stop);
    let args = sentinel_args(&setup, "primary");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut fleet = Fleet::start_with(
        "redis://127.0.0.1:1",
        false,
        dir.path(),
        3,
        "lf",
        Work::Sleep,
        &args,
    );
    let mut failovers = 0;
    let mut leases_at_failover = Vec::new();
    for round in 0..rounds {
        if round > 0 {
            kinds.extend(enqueue(&producer, parts.remove(0)).await);
        }
        let last = Mutex::new(None);
        Wait::for_("workers holding leases")
            .within(Duration::from_secs(30))
            .every(Duration::from_millis(10))
            .explained_by(|| format!("last stats: {:?}\n{}", last.lock().unwrap(), fleet.logs()))
            .until(async || {
                let stats = queue.stats().await;
                let ready = matches!(&stats, Ok(s) if s.processing > 2);
                *last.lock().unwrap() = Some(stats);
                ready
            })
            .await;
        leases_at_failover.push(queue.stats().await.map(|s| s.processing).unwrap_or(0));
        tokio::task::block_in_place(|| {
            setup.failover();
            setup.wait_until_ready();
        });
        failovers += 1;
    }
    // Fencing on the new primary: a made-up token is refused, the holder's ack is taken;
    // the expired lease was reaped and claimed again, so its old token is stale.
    let forged = jobqueue::queue::LeaseRef {
        id: held.id.as_bytes(),
        token: "forged",
        ..Default::default()
    };
    assert!(
        !queue.ack(forged).await.unwrap(),
        "a forged token's ack is refused"
    );
    assert!(
        queue.ack(&held).await.unwrap(),
        "the holder's lease survived the failover"
    );
    Wait::for_("the expired lease reaped and taken by a worker")
        .within(Duration::from_secs(60))
        .until(async || {
            queue
                .job(expiring.id.as_bytes())
                .await
                .ok()
                .flatten()
                .is_some_and(|j| j.attempts >= 2 || j.status.as_deref() == Some("done"))
        })
        .await;
    assert!(
        !queue.ack(&expiring).await.unwrap(),
        "an expired lease's token is stale on the new primary"
    );
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
        "workers must survive a failover: {crashed:?}"
    );
    let switches = switch_lines(&fleet);
    fleet.stop();
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    // The holder's job ran under the test, not a worker: count it as run once.
    runs::note_own_run(dir.path(), "holder", held.id.as_bytes(), 1);
    let (tally, problems) = account_failover(
        "(l) SENTINEL FAILOVER with leases held",
        &queue,
        dir.path(),
        &kinds,
        &ids,
        failovers,
    )
    .await;
    println!(
        "(l): leases held by workers at each failover: {leases_at_failover:?}; worker lines about the primary: {}\n  {}",
        switches.len(),
        switches
            .iter()
            .take(4)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert_eq!(tally.lost, 0, "{tally}");
    assert!(
        tally.stale_rejected >= 2,
        "the forged and the expired tokens were refused: {tally}"
    );
    // The workers stop sending to the old primary when the Sentinels' leader tells the
    // replica to take over: what they did there is not dropped, so the runs beyond a
    // job's first are the planned retries and reaped leases, give or take the claims in
    // flight at that instant (at most one per worker slot: 3 workers × 4).
    let stats = queue.stats().await.unwrap();
    let explained = stats.retried + stats.reaped + stats.released;
    let unexplained = (tally.extra_executions as u64).saturating_sub(explained);
    assert!(
        unexplained <= 12 * failovers as u64,
        "{unexplained} runs beyond the first are explained by no retry or reaped lease: \
         work done on the old primary after the promotion began was dropped ({tally})"
    );
}

/// `WAIT` calls the server has answered so far (INFO commandstats).
fn wait_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// (m) `replicated` durability where `WAIT` times out: the workers ask for one replica's
/// confirmation and do not get it, on a Redis with no replica (every `WAIT` times out)
/// or with a replica that stalls (SIGSTOPped again and again for longer than the
/// `WAIT`'s timeout, then SIGCONTinued). A write that was not confirmed still ran on the
/// primary: the leases a settle_claim made must be run (or given back at once,
/// uncharged), never left to expire. With `max_attempts` 2 a job whose leases were left
/// twice would die without running: `dead_without_running` must be 0, and every job
/// ends done or dead as the workload says.
async fn replicated_wait_times_out(scenario: &'static str, stalls: bool) -> Tally {
    let scale = scale();
    let server = RedisServer::start();
    let replica = stalls.then(|| RedisServer::start_replica_of(&server));
    let url = server.url();
    let n = 120 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue
        .configure(&QueueSettings {
            max_attempts: 2,
            ..settings()
        })
        .await
        .unwrap();
    let kinds = enqueue(&queue, jobs(0, n)).await;
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, false).await], &stop);
    let (name, durability) = if stalls {
        ("rstall", "replicated:1:100ms")
    } else {
        ("rnone", "replicated:1:50ms")
    };
    let mut fleet = Fleet::start_with(
        &url,
        false,
        dir.path(),
        3,
        name,
        Work::Sleep,
        &["--durability", durability],
    );
    let waits_before = wait_calls(&server);
    let mut stalled = 0;
    if let Some(replica) = &replica {
        // A stall of 300–600 ms every 200–400 ms while jobs remain.
        while stalled < 8 * scale {
            tokio::time::sleep(Duration::from_millis(rand::rng().random_range(200..400))).await;
            let s = queue.stats().await.unwrap();
            if s.pending + s.processing == 0 {
                break;
            }
            replica.pause(true);
            tokio::time::sleep(Duration::from_millis(rand::rng().random_range(300..600))).await;
            replica.pause(false);
            stalled += 1;
        }
    }
    wait_until_settled(&queue, || n, Duration::from_secs(60 * scale as u64), &fleet).await;
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "workers must survive unconfirmed writes: {crashed:?}\n{}",
        fleet.logs()
    );
    fleet.stop();
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    let waits = wait_calls(&server) - waits_before;
    println!("chaos {scenario}: WAIT calls={waits} replica stalls={stalled}");
    let faults = if stalls { stalled } else { waits as usize };
    let tally = account(scenario, &queue, dir.path(), &kinds, faults).await;
    assert!(waits > 0, "the workers waited for a replica");
    assert!(!stalls || stalled > 0, "the replica stalled under load");
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m_replicated_durability_without_a_replica_runs_every_lease() {
    replicated_wait_times_out("(m) replicated, no replica: every WAIT times out", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_replicated_durability_with_a_stalled_replica_runs_every_lease() {
    replicated_wait_times_out("(n) replicated, replica SIGSTOPped again and again", true).await;
}

/// (o) Long and byte ids through the exec worker, workers SIGKILLed at random: ids of
/// 1024 bytes (the longest an id may be: the job's key, `JOBQUEUE_JOB_ID` and the
/// replies all carry it), ids that are not UTF-8 and hold a space (written by another
/// client through the protocol's enqueue script), and 1024-byte ids that are not UTF-8.
/// Each command gets its id's bytes in `JOBQUEUE_JOB_ID` and records them as they are;
/// the accounting finds every job by those bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o_long_and_byte_ids_through_exec_workers_sigkilled() {
    let scale = scale();
    let server = RedisServer::start();
    let url = server.url();
    let n = 150 * scale;
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    // Through the protocol's enqueue script, as a client in another language writes
    // them (this client makes ids of up to 256 bytes of text).
    let mut kinds: HashMap<Vec<u8>, Kind> = HashMap::new();
    for i in 0..n {
        let (kind, payload) = payload(i);
        let id: Vec<u8> = match i % 3 {
            0 => {
                let mut id = format!("long-{i}-").into_bytes();
                id.resize(1024, b'x');
                id
            }
            1 => {
                let mut id = b"\xff\xfebyte ".to_vec();
                id.extend_from_slice(format!("{i}").as_bytes());
                id.push(0x80);
                id
            }
            _ => {
                let mut id = format!("both-{i}-").into_bytes();
                id.resize(1024, 0xfe);
                id
            }
        };
        enqueue_raw(&queue, &id, payload.as_bytes()).await;
        kinds.insert(id, kind);
    }
    assert_eq!(queue.stats().await.unwrap().pending as usize, n);
    let stop = CancellationToken::new();
    let reapers = start_reapers(vec![connect(&url, false).await], &stop);
    let mut fleet = Fleet::start_with(&url, false, dir.path(), 3, "ids", Work::Sleep, &[]);
    let mut kills = 0;
    while kills < 3 * scale {
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(300..600))).await;
        let s = queue.stats().await.unwrap();
        if s.pending + s.processing == 0 {
            break;
        }
        if let Some(i) = fleet.kill_random() {
            kills += 1;
            tokio::time::sleep(Duration::from_millis(rand::rng().random_range(100..300))).await;
            fleet.spawn(i);
        }
    }
    wait_until_settled(&queue, || n, Duration::from_secs(60 * scale as u64), &fleet).await;
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "no id stops a worker: {crashed:?}\n{}",
        fleet.logs()
    );
    fleet.stop();
    stop.cancel();
    for r in reapers {
        r.await.unwrap();
    }
    let tally = account(
        "(o) long and byte ids, workers SIGKILLed",
        &queue,
        dir.path(),
        &kinds,
        kills,
    )
    .await;
    assert!(kills > 0 && tally.acked > 0);
}

/// (p)'s figures: ticks due while the workers fired, jobs fired for them, ticks with no
/// job (`lost`) and jobs beyond one per tick (`doubled`).
#[derive(Debug, Default)]
struct ScheduleTally {
    scenario: &'static str,
    ticks: usize,
    fired: usize,
    lost: usize,
    doubled: u64,
    worker_kills: usize,
    redis_restarts: usize,
}

impl std::fmt::Display for ScheduleTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "chaos {}: ticks={} fired={} lost={} doubled={} | faults={} (worker_kills={} \
             redis_restarts={})",
            self.scenario,
            self.ticks,
            self.fired,
            self.lost,
            self.doubled,
            self.worker_kills + self.redis_restarts,
            self.worker_kills,
            self.redis_restarts,
        )
    }
}

/// (p): two `every 1s` schedules (`skip` and `once`) fired by three worker processes
/// only, through worker SIGKILLs and Redis SIGKILLed and restarted with an AOF
/// (`appendfsync always`): every tick from the first to the last before the schedules
/// are paused has exactly one job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p_schedules_fire_each_tick_once_through_worker_kills_and_redis_restarts() {
    use jobqueue::queue::schedule::{Missed, Rule, Schedule};
    use support::firers::{fired_ticks, gaps, scheduled};

    let scale = scale();
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    let names = ["p-skip", "p-once"];
    for (name, missed) in names.into_iter().zip([Missed::Skip, Missed::Once]) {
        let s = Schedule {
            name: name.into(),
            rule: Rule::Every(Duration::from_secs(1)),
            payload: b"ok 0.050\n".to_vec(),
            options: Default::default(),
            missed,
            paused: false,
        };
        queue.put_schedule(&s).await.unwrap();
    }
    let first = queue
        .schedule(names[0])
        .await
        .unwrap()
        .unwrap()
        .next_tick
        .unwrap();
    assert_eq!(
        queue.schedule(names[1]).await.unwrap().unwrap().next_tick,
        Some(first)
    );
    let mut fleet = Fleet::start_with(&url, false, dir.path(), 3, "sch", Work::Sleep, &[]);

    // 12 s (× scale) of faults every 400–900 ms: a worker SIGKILLed and restarted
    // 100–300 ms later, every third fault Redis SIGKILLed and restarted 50–300 ms later.
    let until = first + 12_000 * scale as i64;
    let observer = connect(&url, false).await;
    let mut faults = Faults::default();
    loop {
        Faults::pause().await;
        let Ok(now) = observer.now_ms().await else {
            continue;
        };
        if now > until {
            break;
        }
        faults.next(&mut fleet, Some(&mut server), 3).await;
    }
    let Faults {
        worker_kills,
        redis_restarts,
    } = faults;
    // The schedules stop; the last tick each fired is the end of its run.
    let mut tally = ScheduleTally {
        scenario: "(p) schedules through worker SIGKILLs and Redis restarts, AOF always",
        worker_kills,
        redis_restarts,
        ..ScheduleTally::default()
    };
    // A new connection: the old one may have seen the last restart.
    let queue = connect(&url, false).await;
    let mut conn = server.conn();
    let mut problems = Vec::new();
    for name in names {
        assert_eq!(queue.pause_schedule(name, true).await.unwrap(), Some(true));
        let last = queue
            .schedule(name)
            .await
            .unwrap()
            .unwrap()
            .last_tick
            .unwrap();
        let now = queue.now_ms().await.unwrap();
        assert!(
            last >= now - 2_000,
            "{name}: the last tick fired, {last}, is a tick before the pause at {now}\n{}",
            fleet.logs()
        );
        let ticks = fired_ticks(&mut conn, TAG, name);
        let due = ((last - first) / 1000 + 1) as usize;
        tally.ticks += due;
        tally.fired += ticks.len();
        tally.lost += due - ticks.len().min(due);
        if ticks.first() != Some(&first) || ticks.last() != Some(&last) {
            problems.push(format!(
                "{name}: ticks from {first} to {last}, fired {ticks:?}"
            ));
        }
        for (a, b) in gaps(&ticks, 1000) {
            problems.push(format!("{name}: no job for the ticks between {a} and {b}"));
        }
    }
    tally.doubled = scheduled(&mut conn, TAG).saturating_sub(tally.fired as u64);
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "workers must survive Redis restarts: {crashed:?}"
    );
    fleet.stop();
    report(&tally);
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        fleet.logs()
    );
    assert_eq!((tally.lost, tally.doubled), (0, 0), "{tally}");
    assert!(worker_kills > 0 && redis_restarts > 0, "{tally}");
}
