//! Chaos for the job features: unique keys, priorities, the queue's rate limit and
//! outcomes (waiting for a job's end, the events stream), each through real `jobqueue
//! worker --exec` processes SIGKILLed and restarted (tests/support/fleet.rs), and where
//! said Redis SIGKILLed and restarted with an AOF (`appendfsync always`) or replies
//! lost on the way back (tests/support/reply_dropper.rs).
//!
//! The oracle of (u), (q) and (r) is Redis's own history of its writes, read back from
//! its append-only file (tests/support/aof.rs): every job made and ended, every lock taken
//! and released, every lease, in the order Redis applied them, whatever the queue's
//! counters and logs say. Runs are counted from the workers' own records
//! (tests/support/runs.rs).
//!
//! CI-sized by default (about 15–30 s a scenario). `JOBQUEUE_CHAOS_SCALE=N` multiplies
//! the jobs and the faults (`make chaos`); `JOBQUEUE_CHAOS_REPORT=FILE` appends each tally
//! to FILE. Each scenario runs alone by its letter: `cargo test --test chaos_features u_`.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use jobqueue::queue::{JobEnd, NewJob, Queue, RateLimit, UniqueOutcome};
use rand::Rng;
use support::aof;
use support::chaos::{
    Faults, Kind, connect, payload, report, scale, settings, wait_until_settled, work,
};
use support::fleet::{Fleet, TAG};
use support::redis::RedisServer;
use support::reply_dropper::ReplyDropper;
use support::runs::{self, Work};
use tokio_util::sync::CancellationToken;

/// The overlap bound of every worker here (`--kill-grace 1s`): see tests/chaos.rs.
const GRACE: Duration = Duration::from_secs(1);

/// `P:{T}:job:` of the queue the fleets work on.
fn job_prefix() -> Vec<u8> {
    format!("jq:{{{TAG}}}:job:").into_bytes()
}

/// A server that keeps its whole history in its AOF, each write on disk before its reply
/// (it is SIGKILLed).
fn durable_server() -> RedisServer {
    let mut args = aof::ARGS.to_vec();
    args.extend(["--appendfsync", "always"]);
    RedisServer::start_with(&args)
}

/// Whether the workload's job `i` of `kind` is fragile: a plain job allowed a single
/// claim (`max_attempts` 1), so a SIGKILL of its worker, or a lease lost in a Redis
/// restart, has the reaper dead-letter it (and release what it held, announce its end).
fn fragile(i: usize, kind: Kind) -> bool {
    kind == Kind::Ok && i % 7 == 3
}

/// What every scenario checks of its jobs at the end, from their hashes and the
/// workers' records: each one acked or dead as its kind says, or a fragile one dead of
/// its expired lease (none lost), each run at least once (a fragile job dead of its lease
/// may not have started), never twice under one lease, no two runs of a job overlapping
/// past the grace, and every job run more than once explained by a run on a worker SIGKILLed or a lease the reaper
/// took back.
#[derive(Debug, Default)]
struct Ends {
    jobs: usize,
    acked: usize,
    dead: usize,
    /// Of the dead, fragile jobs whose lease the reaper ended.
    dead_by_reaper: usize,
    lost: usize,
    runs: usize,
    /// Jobs run more than once, and how many runs beyond the first they had.
    doubled: usize,
    extra_runs: usize,
    /// Jobs run more than once with no earlier run on a worker that was SIGKILLed.
    doubled_unexplained: usize,
    overlap_beyond_grace: usize,
    problems: Vec<String>,
}

/// `strict`: a job run more than once must have had an earlier run on a worker that was
/// SIGKILLed (where Redis is not restarted; a restart may also cost a live worker its
/// lease, which only the queue's count of reaped leases explains).
async fn ends(
    queue: &Queue,
    dir: &Path,
    kinds: &HashMap<String, Kind>,
    fragile: &HashSet<String>,
    strict: bool,
) -> Ends {
    let stats = queue.stats().await.unwrap();
    let all = runs::read(dir);
    let by_job = runs::by_job(&all);
    let kills = runs::kills(dir);
    let mut e = Ends {
        jobs: kinds.len(),
        ..Ends::default()
    };
    for (id, kind) in kinds {
        let job = queue.job(id).await.unwrap();
        let status = job.as_ref().and_then(|j| j.status.clone());
        let error = job.as_ref().and_then(|j| j.last_error.as_deref());
        let reaped = status.as_deref() == Some("dead")
            && fragile.contains(id)
            && error == Some("lease expired");
        match (status.as_deref(), kind) {
            (Some("done"), Kind::Ok | Kind::Flaky) => e.acked += 1,
            (Some("dead"), Kind::Poison) => e.dead += 1,
            (Some("dead"), _) if reaped => {
                e.dead += 1;
                e.dead_by_reaper += 1;
            }
            (Some("done" | "dead"), _) => {
                e.problems
                    .push(format!("{id} ({kind:?}) ended {status:?}: {job:?}"));
            }
            _ => {
                e.lost += 1;
                e.problems.push(format!("{id} lost: status {status:?}"));
            }
        }
        let mut seen: Vec<&runs::Run> = by_job.get(id.as_bytes()).cloned().unwrap_or_default();
        seen.sort_by(|a, b| a.start.total_cmp(&b.start));
        e.runs += seen.len();
        if seen.is_empty() && !reaped {
            e.problems
                .push(format!("{id} ended {status:?} without running"));
        }
        // Every run is a lease of its own: two runs under one attempt number would mean
        // one lease ran twice.
        let attempts: HashSet<u32> = seen.iter().map(|r| r.attempt).collect();
        if attempts.len() != seen.len() {
            e.problems
                .push(format!("{id} ran twice under one lease: {seen:?}"));
        }
        // A flaky job's failed first run is one run more that no fault explains.
        let planned = usize::from(*kind == Kind::Flaky);
        if seen.len() > 1 + planned {
            e.doubled += 1;
            e.extra_runs += seen.len() - 1 - planned;
            let explained = seen[..seen.len() - 1]
                .iter()
                .any(|r| kills.contains_key(&r.worker));
            if strict && !explained {
                e.doubled_unexplained += 1;
                e.problems.push(format!(
                    "{id} ran {} times, none of its earlier runs on a SIGKILLed worker: {seen:?}",
                    seen.len()
                ));
            }
        }
    }
    if e.extra_runs as u64 > stats.reaped + stats.released {
        e.problems.push(format!(
            "{} extra runs, but only {} leases reaped and {} released",
            e.extra_runs, stats.reaped, stats.released
        ));
    }
    let (beyond, _) = runs::overlaps_beyond(&all, GRACE);
    e.overlap_beyond_grace = beyond.len();
    e.problems.extend(beyond);
    e
}

impl std::fmt::Display for Ends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "jobs={} acked={} dead={} (by_reaper={}) lost={} runs={} doubled={} (extra_runs={}, \
             unexplained={}) overlap_beyond_grace={}",
            self.jobs,
            self.acked,
            self.dead,
            self.dead_by_reaper,
            self.lost,
            self.runs,
            self.doubled,
            self.extra_runs,
            self.doubled_unexplained,
            self.overlap_beyond_grace
        )
    }
}

// ---------------------------------------------------------------------------------------
// (u) unique keys

/// The unique-key history replayed from the AOF, step by step.
#[derive(Debug, Default)]
struct UniqueReplay {
    steps: usize,
    /// Jobs made with a unique key.
    made: usize,
    /// Steps after which a key was held by two live jobs, or a lock named no live job of
    /// its key, or a live job's key had no lock naming it.
    problems: Vec<String>,
}

/// Replay `steps`: after each, at most one live job holds a key, its lock names it, and
/// no lock names anything else. A job lives from the write that makes it (its
/// `payload`) to the one that ends it (`status` done, dead or cancelled, or its hash
/// deleted).
fn replay_unique(steps: &[Vec<aof::Command>], tag: &str) -> UniqueReplay {
    let jobs_at = format!("jq:{{{tag}}}:job:").into_bytes();
    let locks_at = format!("jq:{{{tag}}}:unique:").into_bytes();
    // id → (its key, live); key → its live jobs; key → the job its lock names
    let mut jobs: HashMap<Vec<u8>, (Option<Vec<u8>>, bool)> = HashMap::new();
    let mut live: HashMap<Vec<u8>, HashSet<Vec<u8>>> = HashMap::new();
    let mut locks: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut out = UniqueReplay::default();
    for (n, step) in steps.iter().enumerate() {
        let mut touched: HashSet<Vec<u8>> = HashSet::new();
        for cmd in step {
            let Some(key) = cmd.get(1) else { continue };
            if let Some(id) = key.strip_prefix(jobs_at.as_slice()) {
                let job = jobs.entry(id.to_vec()).or_insert((None, false));
                if let (Some(k), true) = (&job.0, job.1) {
                    live.entry(k.clone()).or_default().remove(id);
                }
                match cmd[0].as_slice() {
                    b"DEL" | b"UNLINK" => job.1 = false,
                    _ => {
                        for (field, value) in aof::hash_fields(cmd, key) {
                            match field {
                                b"payload" => job.1 = true,
                                b"unique_key" => {
                                    job.0 = Some(value.to_vec());
                                    out.made += 1;
                                }
                                b"status" => {
                                    job.1 = !matches!(value, b"done" | b"dead" | b"cancelled")
                                }
                                _ => {}
                            }
                        }
                    }
                }
                if let Some(k) = &job.0 {
                    if job.1 {
                        live.entry(k.clone()).or_default().insert(id.to_vec());
                    }
                    touched.insert(k.clone());
                }
            } else if let Some(k) = key.strip_prefix(locks_at.as_slice()) {
                match cmd[0].as_slice() {
                    b"SET" => {
                        locks.insert(k.to_vec(), cmd[2].clone());
                    }
                    b"DEL" | b"UNLINK" => {
                        locks.remove(k);
                    }
                    _ => {}
                }
                touched.insert(k.to_vec());
            }
        }
        out.steps += 1;
        for k in touched {
            let holders: Vec<&Vec<u8>> =
                live.get(&k).map(|s| s.iter().collect()).unwrap_or_default();
            let show = runs::show(&k);
            if holders.len() > 1 {
                out.problems.push(format!(
                    "step {n}: key {show} held by {} live jobs at once: {:?}",
                    holders.len(),
                    holders.iter().map(|id| runs::show(id)).collect::<Vec<_>>()
                ));
            }
            match (locks.get(&k), holders.first()) {
                (Some(holder), Some(id)) if holder == *id => {}
                (None, None) => {}
                (lock, _) => out.problems.push(format!(
                    "step {n}: the lock of {show} names {:?}, the live jobs of the key are {:?}",
                    lock.map(|h| runs::show(h)),
                    holders.iter().map(|id| runs::show(id)).collect::<Vec<_>>()
                )),
            }
        }
    }
    out
}

/// One producer's view of its enqueues.
#[derive(Debug, Default)]
struct Produced {
    /// Accepted (a reply said created): id → (key, kind).
    accepted: HashMap<String, (String, Kind)>,
    /// Refused: (id, key, the holder the reply named).
    refused: Vec<(String, String, String)>,
    /// No reply (the call failed): made or not, the job hashes tell.
    unsure: HashMap<String, (String, Kind)>,
    /// Replies that fit no case (neither made nor refused by the key).
    odd: Vec<String>,
    /// The fragile jobs sent.
    fragile: HashSet<String>,
}

/// (u): producers enqueue jobs under 20 unique keys (`until-done`) while workers are
/// SIGKILLed and Redis is SIGKILLed and restarted with an AOF. Replayed from the AOF,
/// no two live jobs ever held one key, every lock named the live job of its key and
/// each live job's key was locked; every refusal named a job of that key; every job
/// made ended (acked or dead, none lost); and at the end no lock is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u_unique_keys_hold_one_job_each_through_worker_kills_and_redis_restarts() {
    const KEYS: usize = 20;
    let scale = scale();
    let mut server = durable_server();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();

    let stop = CancellationToken::new();
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let stop = stop.clone();
            let url = url.clone();
            tokio::spawn(async move {
                let queue = connect(&url, false).await;
                let mut out = Produced::default();
                let mut i = 0;
                while !stop.is_cancelled() {
                    i += 1;
                    let id = format!("u{p}-{i}");
                    let key = format!("k{}", rand::rng().random_range(0..KEYS));
                    let (kind, _) = payload(i);
                    let mut job = NewJob::new(work(kind, 50..200))
                        .id(id.clone())
                        .unique_key(key.clone());
                    if fragile(i, kind) {
                        job = job.max_attempts(1);
                        out.fragile.insert(id.clone());
                    }
                    match queue.enqueue(job).await {
                        Ok(e) if e.created => {
                            out.accepted.insert(id, (key, kind));
                        }
                        Ok(e) => match e.unique {
                            Some(UniqueOutcome::Refused { existing }) => {
                                out.refused.push((id, key, runs::show(existing.as_bytes())));
                            }
                            other => out.odd.push(format!("{id}: {other:?}")),
                        },
                        Err(_) => {
                            out.unsure.insert(id, (key, kind));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    let pause = rand::rng().random_range(5..25);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                out
            })
        })
        .collect();
    let mut fleet = Fleet::start_with(&url, false, dir.path(), 3, "uniq", Work::Sleep, &[]);

    // 12 s (× scale) of faults; every third one Redis.
    let mut faults = Faults::default();
    let until = tokio::time::Instant::now() + Duration::from_secs(12 * scale as u64);
    while tokio::time::Instant::now() < until {
        Faults::pause().await;
        faults.next(&mut fleet, Some(&mut server), 3).await;
    }
    stop.cancel();
    let mut produced = Produced::default();
    for p in producers {
        let out = p.await.unwrap();
        produced.accepted.extend(out.accepted);
        produced.refused.extend(out.refused);
        produced.unsure.extend(out.unsure);
        produced.odd.extend(out.odd);
        produced.fragile.extend(out.fragile);
    }
    // A fresh connection: the old one may have seen the last restart.
    let queue = connect(&url, false).await;
    // A call that failed may have made its job: its hash says.
    let mut made_unseen = 0;
    for (id, job) in &produced.unsure {
        if queue.job(id).await.unwrap().is_some() {
            produced.accepted.insert(id.clone(), job.clone());
            made_unseen += 1;
        }
    }
    let n = produced.accepted.len();
    wait_until_settled(&queue, || n, Duration::from_secs(60 * scale as u64), &fleet).await;
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "workers survive Redis restarts: {crashed:?}"
    );
    fleet.stop();

    let kinds: HashMap<String, Kind> = produced
        .accepted
        .iter()
        .map(|(id, (_, k))| (id.clone(), *k))
        .collect();
    let mut e = ends(&queue, dir.path(), &kinds, &produced.fragile, false).await;
    let mut problems = std::mem::take(&mut e.problems);
    problems.extend(produced.odd.iter().map(|o| format!("an odd reply: {o}")));
    // Each refusal named a job made under the key.
    let mut refusals_wrong = 0;
    for (id, key, holder) in &produced.refused {
        let ok = produced.accepted.get(holder).is_some_and(|(k, _)| k == key);
        if !ok {
            refusals_wrong += 1;
            problems.push(format!(
                "{id} was refused for {key} by {holder}, which is no job made under that key"
            ));
        }
    }
    // No lock is left: every job ended.
    let mut conn = server.conn();
    let left: Vec<Vec<u8>> =
        redis::Commands::scan_match(&mut conn, format!("jq:\\{{{TAG}\\}}:unique:*"))
            .unwrap()
            .map(|k: redis::RedisResult<Vec<u8>>| k.unwrap())
            .collect();
    for k in &left {
        let holder: Option<Vec<u8>> = redis::cmd("GET").arg(k).query(&mut conn).unwrap();
        problems.push(format!(
            "the lock {} outlived every job: it names {:?}",
            runs::show(k),
            holder.map(|h| runs::show(&h))
        ));
    }
    let replay = replay_unique(&aof::steps(server.dir.path()), TAG);
    if replay.made != n {
        problems.push(format!(
            "the AOF holds {} jobs made with a key, the producers {n}",
            replay.made
        ));
    }
    problems.extend(replay.problems.iter().take(20).cloned());
    let tally = format!(
        "chaos (u) unique keys (until-done, {KEYS} keys) through worker SIGKILLs and Redis restarts, AOF always: \
         made={n} refused={} refusals_wrong={refusals_wrong} {e} \
         key_violations={} locks_left={} | made_with_lost_reply={made_unseen} calls_failed={} \
         aof_steps={} faults={} (worker_kills={} redis_restarts={})",
        produced.refused.len(),
        replay.problems.len(),
        left.len(),
        produced.unsure.len(),
        replay.steps,
        faults.total(),
        faults.worker_kills,
        faults.redis_restarts,
    );
    report(&tally);
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert_eq!(
        (e.lost, replay.problems.len(), left.len(), refusals_wrong),
        (0, 0, 0, 0)
    );
    assert!(
        n > KEYS && !produced.refused.is_empty(),
        "the keys were contended: {tally}"
    );
    assert!(
        faults.worker_kills > 0 && faults.redis_restarts > 0,
        "{tally}"
    );
}

// ---------------------------------------------------------------------------------------
// (q) priorities

/// The strict order replayed from the AOF.
#[derive(Debug, Default)]
struct PriorityReplay {
    leases: usize,
    /// Leases of a job while a job of lower priority was ready and left ready: the order
    /// had something to decide.
    ahead: usize,
    /// Leases of a job while a job of higher priority was ready before the step and left
    /// ready after it.
    problems: Vec<String>,
}

/// Whether `key` is one of the queue's ready lists, `P:{T}:pending` or `P:{T}:pending:<p>`.
fn is_ready_list(key: &[u8], pending: &[u8]) -> bool {
    matches!(key.strip_prefix(pending), Some(b"" | [b':', b'1'..=b'9']))
}

/// Replay `steps`: each job's priority (its hash's `priority`, as its enqueue wrote it;
/// absent: 0), which jobs are ready (pushed onto a ready list, whichever, and not leased
/// since), and at each step that leases, whether a job of higher priority than one it
/// leased was ready before the step and is still ready after it.
fn replay_priorities(steps: &[Vec<aof::Command>], tag: &str) -> PriorityReplay {
    let pending = format!("jq:{{{tag}}}:pending").into_bytes();
    let prefix = format!("jq:{{{tag}}}:job:").into_bytes();
    let leases = aof::leases(steps, &prefix);
    let mut leases_at: HashMap<usize, Vec<&aof::Lease>> = HashMap::new();
    for l in &leases {
        leases_at.entry(l.step).or_default().push(l);
    }
    let mut priority: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut ready: [HashSet<Vec<u8>>; 10] = Default::default();
    let mut out = PriorityReplay {
        leases: leases.len(),
        ..PriorityReplay::default()
    };
    for (n, step) in steps.iter().enumerate() {
        for cmd in step {
            let Some(id) = cmd.get(1).and_then(|k| k.strip_prefix(prefix.as_slice())) else {
                continue;
            };
            for (field, value) in aof::hash_fields(cmd, &cmd[1]) {
                if let (b"priority", [d @ b'0'..=b'9']) = (field, value) {
                    priority.insert(id.to_vec(), (d - b'0') as usize);
                }
            }
        }
        let of = |id: &[u8]| priority.get(id).copied().unwrap_or(0);
        let mut pushed: HashSet<&[u8]> = HashSet::new();
        for cmd in step {
            if matches!(cmd[0].as_slice(), b"LPUSH" | b"RPUSH") && is_ready_list(&cmd[1], &pending)
            {
                for id in &cmd[2..] {
                    ready[of(id)].insert(id.clone());
                    pushed.insert(id);
                }
            }
        }
        let Some(leased) = leases_at.get(&n) else {
            continue;
        };
        for l in leased {
            ready[of(&l.id)].remove(&l.id);
        }
        // The priorities of the jobs ready before the step and still ready after it.
        let waits = |p: &usize| ready[*p].iter().any(|id| !pushed.contains(id.as_slice()));
        let highest = (0..10usize).rev().find(waits);
        let lowest = (0..10usize).find(waits);
        for l in leased {
            let p = of(&l.id);
            if let Some(w) = highest
                && w > p
            {
                out.problems.push(format!(
                    "step {n}: {} (priority {p}) leased while a job of priority {w} waited",
                    runs::show(&l.id)
                ));
            }
            if lowest.is_some_and(|w| w < p) {
                out.ahead += 1;
            }
        }
    }
    out
}

/// Every 9th job of (q) flaky (its retry is put back in line after its backoff), the
/// rest plain.
fn flaky_or_ok(i: usize) -> Kind {
    if i % 9 == 4 { Kind::Flaky } else { Kind::Ok }
}

/// (q): a backlog of jobs of priorities 0 and 2 and a steady stream of jobs of
/// priorities 5 and 9 (every 9th of each flaky), while workers are SIGKILLed (their
/// leases reaped and put back in line). Replayed from the AOF, no lease ever took a job
/// while one of higher priority was ready and stayed ready (strict order, reaped and
/// retried jobs included); every job ran (none lost), and a job ran more than its
/// planned runs only after a run on a worker that was SIGKILLed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_priorities_keep_their_order_through_worker_kills() {
    let scale = scale();
    let server = RedisServer::start_with(&aof::ARGS);
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    let mut kinds: HashMap<String, Kind> = HashMap::new();
    let backlog: Vec<NewJob> = (0..400 * scale)
        .map(|i| {
            let id = format!("lo{i}");
            let kind = flaky_or_ok(i);
            kinds.insert(id.clone(), kind);
            NewJob::new(work(kind, 100..250))
                .id(id)
                .priority(if i % 2 == 0 { 0 } else { 2 })
        })
        .collect();
    queue.enqueue_many(backlog).await.unwrap();

    let stop = CancellationToken::new();
    let stream = {
        let stop = stop.clone();
        let queue = connect(&url, false).await;
        tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut i = 0;
            while !stop.is_cancelled() {
                let id = format!("hi{i}");
                let kind = flaky_or_ok(i);
                let job = NewJob::new(work(kind, 20..100))
                    .id(id.clone())
                    .priority(if i % 2 == 0 { 9 } else { 5 });
                let made = queue.enqueue(job).await.unwrap();
                assert!(made.created, "{id}: {made:?}");
                ids.push((id, kind));
                i += 1;
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
            ids
        })
    };
    let mut fleet = Fleet::start_with(
        &url,
        false,
        dir.path(),
        3,
        "prio",
        Work::Sleep,
        &["--visibility", "3s"],
    );
    let mut faults = Faults::default();
    let until = tokio::time::Instant::now() + Duration::from_secs(12 * scale as u64);
    while tokio::time::Instant::now() < until {
        Faults::pause().await;
        faults.next(&mut fleet, None, 1).await;
    }
    stop.cancel();
    kinds.extend(stream.await.unwrap());
    let n = kinds.len();
    wait_until_settled(&queue, || n, Duration::from_secs(60 * scale as u64), &fleet).await;
    fleet.stop();

    let e = ends(&queue, dir.path(), &kinds, &HashSet::new(), true).await;
    let mut problems = e.problems.clone();
    let stats = queue.stats().await.unwrap();
    let replay = replay_priorities(&aof::steps(server.dir.path()), TAG);
    if replay.leases as u64 != stats.claimed {
        problems.push(format!(
            "the AOF holds {} leases, the queue counted {} claims",
            replay.leases, stats.claimed
        ));
    }
    problems.extend(replay.problems.iter().take(20).cloned());
    let tally = format!(
        "chaos (q) priorities 0,2 backlog + 5,9 stream through worker SIGKILLs: {e} \
         order_violations={} | leases={} leased_ahead_of_lower={} reaped={} worker_kills={}",
        replay.problems.len(),
        replay.leases,
        replay.ahead,
        stats.reaped,
        faults.worker_kills,
    );
    report(&tally);
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert_eq!(
        (e.lost, e.doubled_unexplained, replay.problems.len()),
        (0, 0, 0)
    );
    assert!(
        replay.ahead > 0 && stats.reaped > 0 && faults.worker_kills > 0,
        "the order was put to the test, with leases reaped: {tally}"
    );
}

// ---------------------------------------------------------------------------------------
// (r) the queue's rate limit

/// The most of `at` (ms, sorted) in any window of `per` ms: the claims the limit counts
/// at each claim, those of (at - per, at].
fn busiest_window(at: &[i64], per: i64) -> usize {
    (0..at.len())
        .map(|i| {
            at[..=i]
                .iter()
                .rev()
                .take_while(|t| **t > at[i] - per)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// (r): a rate limit of 12 a second across 8 worker processes that are SIGKILLed, Redis
/// SIGKILLed and restarted with an AOF, and claim and settle_claim replies lost on the
/// way back (their retries answered from the request's record). Every lease Redis made
/// (from its AOF) counted: none of any window of a second holds more than 12; every job
/// ends (none lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_rate_limit_holds_through_worker_kills_redis_restarts_and_lost_replies() {
    const MAX: usize = 12;
    const PER_MS: i64 = 1000;
    let scale = scale();
    let mut server = durable_server();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    let limit: RateLimit = format!("{MAX}/1s").parse().unwrap();
    queue
        .set_rate_limits(Some(Some(limit)), None)
        .await
        .unwrap();
    queue.load_scripts().await.unwrap();
    let scripts = &jobqueue::queue::SCRIPTS;
    let proxy = ReplyDropper::start_with(
        server.port,
        &[
            scripts.settle_claim.sha.as_bytes(),
            scripts.claim.sha.as_bytes(),
        ],
    )
    .await;
    proxy.cut_at_random_of(0, 100);
    proxy.cut_at_random_of(1, 100);
    let n = 150 * scale;
    let mut kinds = HashMap::new();
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            let (kind, text) = payload(i);
            let id = format!("r{i}");
            kinds.insert(id.clone(), kind);
            NewJob::new(text).id(id)
        })
        .collect();
    queue.enqueue_many(jobs).await.unwrap();
    let mut fleet = Fleet::start_with(&proxy.url(), false, dir.path(), 8, "rate", Work::Sleep, &[]);

    // Faults until the work is done (at most 10 × scale); every third one Redis.
    let mut faults = Faults::default();
    let observer = connect(&url, false).await;
    while faults.total() < 10 * scale {
        Faults::pause().await;
        let done = observer
            .stats()
            .await
            .is_ok_and(|s| s.pending + s.processing + s.delayed == 0);
        if done {
            break;
        }
        faults.next(&mut fleet, Some(&mut server), 3).await;
    }
    let queue = connect(&url, false).await;
    wait_until_settled(&queue, || n, Duration::from_secs(90 * scale as u64), &fleet).await;
    let crashed = fleet.crashed();
    assert!(
        crashed.is_empty(),
        "workers survive Redis restarts and lost replies: {crashed:?}"
    );
    fleet.stop();

    let e = ends(&queue, dir.path(), &kinds, &HashSet::new(), false).await;
    let mut problems = e.problems.clone();
    let stats = queue.stats().await.unwrap();
    let leases = aof::leases(&aof::steps(server.dir.path()), &job_prefix());
    // One call's leases share its token: a lease is a job and a token.
    let tokens: HashSet<(&[u8], &[u8])> = leases
        .iter()
        .map(|l| (l.id.as_slice(), l.token.as_slice()))
        .collect();
    if tokens.len() != leases.len() {
        problems.push(format!(
            "{} leases but {} distinct ones",
            leases.len(),
            tokens.len()
        ));
    }
    if leases.len() as u64 != stats.claimed {
        problems.push(format!(
            "the AOF holds {} leases, the queue counted {} claims",
            leases.len(),
            stats.claimed
        ));
    }
    // Every run the workers made had a lease in the history.
    let mut per_job: HashMap<&[u8], usize> = HashMap::new();
    for l in &leases {
        *per_job.entry(l.id.as_slice()).or_default() += 1;
    }
    for (id, seen) in runs::by_job(&runs::read(dir.path())) {
        let attempts: HashSet<u32> = seen.iter().map(|r| r.attempt).collect();
        if attempts.len() > per_job.get(id.as_slice()).copied().unwrap_or(0) {
            problems.push(format!(
                "{} ran under {} leases, the AOF holds {:?}",
                runs::show(&id),
                attempts.len(),
                per_job.get(id.as_slice())
            ));
        }
    }
    let mut at: Vec<i64> = leases.iter().map(|l| l.at_ms).collect();
    at.sort();
    let busiest = busiest_window(&at, PER_MS);
    if busiest > MAX {
        problems.push(format!(
            "a window of {PER_MS} ms held {busiest} leases, over the limit of {MAX}"
        ));
    }
    let span = at.last().zip(at.first()).map_or(0, |(z, a)| z - a);
    let tally = format!(
        "chaos (r) rate limit {MAX}/{PER_MS}ms, 8 workers, through worker SIGKILLs, Redis restarts and lost replies: \
         {e} leases={} busiest_window={busiest} (limit {MAX}) | over {:.1} s, rate_limited={} \
         replies_cut={} of {} replayed={} faults={} (worker_kills={} redis_restarts={})",
        leases.len(),
        span as f64 / 1000.0,
        stats.rate_limited,
        proxy.cuts(),
        proxy.seen(),
        stats.replayed,
        faults.total(),
        faults.worker_kills,
        faults.redis_restarts,
    );
    report(&tally);
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert_eq!(e.lost, 0);
    assert!(busiest <= MAX, "{tally}");
    assert!(
        stats.rate_limited > 0 && proxy.cuts() > 0 && faults.redis_restarts > 0,
        "the limit bit, replies were lost and Redis restarted: {tally}"
    );
}

// ---------------------------------------------------------------------------------------
// (o) outcomes

/// What the waiters saw.
#[derive(Debug, Default)]
struct Waited {
    /// Jobs waited for: id → kind.
    jobs: HashMap<String, Kind>,
    /// The fragile ones.
    fragile: HashSet<String>,
    results: usize,
    deaths: usize,
    /// Waits that ended with the timeout while the job had ended.
    hung: usize,
    /// Waits that ended with the timeout while the job had not ended.
    timed_out: usize,
    /// Calls that failed (Redis went away) and were taken up again.
    errors: usize,
    problems: Vec<String>,
}

/// Enqueue job `id` and wait for its end through Redis restarts. A call that fails is
/// taken up again: with `again`, sent again as it was (`enqueue_and_wait` of the same id
/// waits for the job a failed call made); else the job's hash tells whether it was made,
/// and `wait_for` waits for it alone.
async fn enqueue_and_wait_through(
    queue: &Queue,
    id: &str,
    (kind, fragile): (Kind, bool),
    again: bool,
    out: &mut Waited,
) {
    const TIMEOUT: Duration = Duration::from_secs(20);
    let mut made = false;
    let mut failed = false;
    let end = loop {
        let call = if made {
            queue.wait_for(id, TIMEOUT).await
        } else {
            let mut job = NewJob::new(work(kind, 20..150)).id(id.to_string());
            if fragile {
                job = job.max_attempts(1);
            }
            queue
                .enqueue_and_wait(job, TIMEOUT)
                .await
                .map(|(enqueued, end)| {
                    // Made by this call, or (sent again) by the one that failed.
                    let made = enqueued.created || (failed && enqueued.unique.is_none());
                    if !made {
                        out.problems.push(format!("{id}: not made: {enqueued:?}"));
                    }
                    end
                })
        };
        match call {
            Ok(end) => break end,
            Err(_) => {
                out.errors += 1;
                failed = true;
                tokio::time::sleep(Duration::from_millis(100)).await;
                if again {
                    continue;
                }
                // Made by the failed call or not, the hash says (the next call waits).
                loop {
                    match queue.job(id).await {
                        Ok(job) => {
                            made = job.is_some();
                            break;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            }
        }
    };
    out.jobs.insert(id.to_string(), kind);
    if fragile {
        out.fragile.insert(id.to_string());
    }
    match (end, kind) {
        (Some(JobEnd::Done(result)), Kind::Ok | Kind::Flaky) => {
            out.results += 1;
            if result != format!("done {id}").as_bytes() {
                out.problems
                    .push(format!("{id}: the wait returned the result {result:?}"));
            }
        }
        (Some(JobEnd::Dead(error)), _) if fragile && error == "lease expired" => out.deaths += 1,
        (Some(JobEnd::Dead(error)), Kind::Poison) => {
            out.deaths += 1;
            if !error.contains("poison payload") {
                out.problems
                    .push(format!("{id}: the wait returned the error {error:?}"));
            }
        }
        (Some(other), _) => out
            .problems
            .push(format!("{id} ({kind:?}): the wait returned {other:?}")),
        (None, _) => match queue.job_end(id.as_bytes()).await {
            Ok(Some(end)) => {
                out.hung += 1;
                out.problems.push(format!(
                    "{id}: the wait timed out after {TIMEOUT:?}, but the job had ended: {end:?}"
                ));
            }
            _ => {
                out.timed_out += 1;
                out.problems
                    .push(format!("{id}: not ended {TIMEOUT:?} after its enqueue"));
            }
        },
    }
}

/// (o): six producers each enqueue a job and wait for its end (`enqueue_and_wait`),
/// one after the other, while workers are SIGKILLed and Redis is SIGKILLed and
/// restarted with an AOF; the queue keeps its events. A call that fails is sent again as
/// it was by three of them, and taken up by the others as a `wait_for` of the job when
/// its hash says the failed call made it (else sent again). Every wait returns its job's
/// result (its command's stdout), or for a poison job its death and error; none returns
/// with the timeout when its job has ended; and the events stream holds an `acked` entry
/// for every acked job and a `dead` one for every dead job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o_waits_return_every_outcome_through_worker_kills_and_redis_restarts() {
    let scale = scale();
    let mut server = durable_server();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let queue = connect(&url, false).await;
    queue.configure(&settings()).await.unwrap();
    queue.set_events(1_000_000).await.unwrap();

    let stop = CancellationToken::new();
    let waiters: Vec<_> = (0..6)
        .map(|w| {
            let stop = stop.clone();
            let url = url.clone();
            tokio::spawn(async move {
                let queue = connect(&url, false).await;
                let mut out = Waited::default();
                let mut i = 0;
                while !stop.is_cancelled() {
                    // Spread the kinds over the waiters: w, w + 6, … of the workload.
                    let n = w + 6 * i;
                    let (kind, _) = payload(n);
                    let id = format!("o{w}-{i}");
                    let job = (kind, fragile(n, kind));
                    enqueue_and_wait_through(&queue, &id, job, w % 2 == 0, &mut out).await;
                    i += 1;
                }
                out
            })
        })
        .collect();
    let mut fleet = Fleet::start_with(&url, false, dir.path(), 3, "wait", Work::Echo, &[]);
    let mut faults = Faults::default();
    let until = tokio::time::Instant::now() + Duration::from_secs(12 * scale as u64);
    while tokio::time::Instant::now() < until {
        Faults::pause().await;
        faults.next(&mut fleet, Some(&mut server), 3).await;
    }
    stop.cancel();
    let mut waited = Waited::default();
    for w in waiters {
        let out = w.await.unwrap();
        let all = &mut waited;
        all.jobs.extend(out.jobs);
        all.fragile.extend(out.fragile);
        all.results += out.results;
        all.deaths += out.deaths;
        all.hung += out.hung;
        all.timed_out += out.timed_out;
        all.errors += out.errors;
        all.problems.extend(out.problems);
    }
    let queue = connect(&url, false).await;
    let n = waited.jobs.len();
    wait_until_settled(&queue, || n, Duration::from_secs(60 * scale as u64), &fleet).await;
    fleet.stop();

    let e = ends(&queue, dir.path(), &waited.jobs, &waited.fragile, false).await;
    let mut problems = waited.problems;
    problems.extend(e.problems.iter().cloned());
    // The events stream, whole.
    let mut conn = server.conn();
    let entries: Vec<(String, HashMap<String, Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(queue.events_key())
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    let mut events: HashMap<(String, String), usize> = HashMap::new();
    for (_, fields) in &entries {
        let text =
            |f: &str| String::from_utf8_lossy(fields.get(f).map_or(&[][..], |v| v)).into_owned();
        *events.entry((text("id"), text("event"))).or_default() += 1;
    }
    let (mut missing, mut twice) = (0, 0);
    for id in waited.jobs.keys() {
        let status = queue.job(id).await.unwrap().and_then(|j| j.status);
        let event = if status.as_deref() == Some("dead") {
            "dead"
        } else {
            "acked"
        };
        match events
            .get(&(id.clone(), event.to_string()))
            .copied()
            .unwrap_or(0)
        {
            0 => {
                missing += 1;
                problems.push(format!("{id}: no {event} event"));
            }
            1 => {}
            _ => twice += 1,
        }
    }
    let tally = format!(
        "chaos (o) enqueue_and_wait through worker SIGKILLs and Redis restarts, AOF always: \
         waits={n} results={} deaths={} hung={} timed_out={} events_missing={missing} {e} \
         | events={} ends_announced_twice={twice} calls_failed={} faults={} (worker_kills={} redis_restarts={})",
        waited.results,
        waited.deaths,
        waited.hung,
        waited.timed_out,
        entries.len(),
        waited.errors,
        faults.total(),
        faults.worker_kills,
        faults.redis_restarts,
    );
    report(&tally);
    assert!(problems.is_empty(), "{tally}\n{}", problems.join("\n"));
    assert_eq!(
        (waited.hung, waited.timed_out, missing, e.lost),
        (0, 0, 0, 0)
    );
    assert!(
        waited.results > 0 && waited.deaths > 0 && faults.redis_restarts > 0,
        "{tally}"
    );
}
