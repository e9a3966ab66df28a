//! Partitioned queues (docs/partitions.md): the partition tags on a real 3-master
//! Cluster, routing and deduplication, fair claims across partitions, acks that go to
//! the partition of their lease, the idle wait on every partition, and the scenario: a
//! queue of 6 partitions on the Cluster with a producer, `jobqueue worker --exec`
//! processes (some SIGKILLed), a reaper, and a shrink from 6 to 3 partitions midway.
//! At the end no job is lost, every job is done or dead, and every partition is drained.
//! Then the same queue shape under the faults of a partitioned worker: 3 partitions
//! shrunk to 1 under load on one server, workers SIGKILLed, and the replies of claims
//! lost on the way back (tests/support/reply_dropper.rs). Both count runs from the
//! workers' own records (tests/support/runs.rs): no job is dead-lettered without running
//! (`dead_without_running` = 0) and no two runs of a job overlap for longer than the
//! workers' 1 s kill grace (`overlap_beyond_grace` = 0). `make chaos` runs both at full
//! size; alone: `cargo test --test partitions six_partitions` or `… three_partitions`.
//!
//! (tests/partition.rs is about network partitions, not these.)
//!
//! CI-sized by default; `JOBQUEUE_CHAOS_SCALE=N` multiplies the jobs and the kills.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::partitions::tag_slot;
use jobqueue::queue::{
    NewJob, PartitionedQueue, Queue, QueueSettings, Redis, SCRIPTS, partition_of, partition_tags,
};
use jobqueue::worker::Worker;
use rand::Rng;
use support::eventually::{Wait, eventually};
use support::redis::{RedisCluster, RedisServer};
use support::reply_dropper::ReplyDropper;
use support::runs::{self, Work};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

fn scale() -> usize {
    std::env::var("JOBQUEUE_CHAOS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(1)
}

#[tokio::test]
async fn partition_tags_spread_over_the_cluster_nodes() {
    let cluster = RedisCluster::start();
    for n in [3, 6] {
        let tags = partition_tags("orders", n).unwrap();
        let mut per_node = [0usize; 3];
        for t in &tags {
            // The slot the library computes is the one the Cluster computes.
            let key = format!("jq:{{{t}}}:pending");
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query(&mut cluster.nodes[0].conn())
                .unwrap();
            assert_eq!(slot, tag_slot(t.as_bytes()), "{t}");
            per_node[cluster.node_of(&key)] += 1;
        }
        // Slots split evenly over 3 masters: each master serves n/3 partitions.
        assert_eq!(per_node, [n / 3; 3], "{n} partitions: {tags:?}");
    }
}

#[tokio::test]
async fn the_same_id_goes_to_the_same_partition_and_is_deduplicated() {
    let server = RedisServer::start();
    let queue = PartitionedQueue::new(server.redis().await, "jq", "dedup", 6).unwrap();
    let first = queue
        .enqueue(NewJob::new(&b"a"[..]).id("order-17"))
        .await
        .unwrap();
    assert!(first.created);
    let again = queue
        .enqueue(NewJob::new(&b"b"[..]).id("order-17"))
        .await
        .unwrap();
    assert!(!again.created, "the second enqueue of an id is refused");
    let p = queue.partition_for(b"order-17");
    assert_eq!(p, partition_of(b"order-17", 6));
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.total.pending, 1);
    assert_eq!(stats.partitions[p].pending, 1, "{:?}", stats.partitions);

    // A batch is split over the partitions, each job where its id says.
    let jobs: Vec<NewJob> = (0..120)
        .map(|i| NewJob::new(&b"x"[..]).id(format!("j{i}")))
        .collect();
    let out = queue.enqueue_many(jobs).await.unwrap();
    assert_eq!(out.len(), 120);
    assert!(
        out.iter()
            .enumerate()
            .all(|(i, e)| e.created && e.id.as_str() == Some(&format!("j{i}")))
    );
    for i in 0..120 {
        let id = format!("j{i}");
        let p = queue.partition_for(id.as_bytes());
        assert!(
            queue.partitions()[p].job(&id).await.unwrap().is_some(),
            "{id} not in partition {p}"
        );
    }
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.total.pending, 121);
    assert!(stats.partitions.iter().all(|s| s.pending > 0), "{stats:?}");

    // A partition key keeps its jobs together, in order.
    let keyed: Vec<NewJob> = (0..5)
        .map(|i| NewJob::new(format!("{i}").into_bytes()).id(format!("k{i}")))
        .collect();
    queue.enqueue_keyed(b"customer-9", keyed).await.unwrap();
    let p = queue.partition_for(b"customer-9");
    let ids = queue.partitions()[p].pending_ids(1000).await.unwrap();
    let order: Vec<&str> = ids
        .iter()
        .filter_map(|id| id.as_str())
        .filter(|id| id.starts_with('k'))
        .collect();
    assert_eq!(order, ["k0", "k1", "k2", "k3", "k4"]);
}

#[tokio::test]
async fn claims_rotate_so_no_partition_starves() {
    const RECHECK: Duration = Duration::from_millis(100);
    let server = RedisServer::start();
    let queue = PartitionedQueue::new(server.redis().await, "jq", "fair", 6)
        .unwrap()
        .recheck_empty(RECHECK);
    // Every partition loaded alike: strict rotation, 10 claims each.
    for (p, part) in queue.partitions().iter().enumerate() {
        let jobs = (0..10)
            .map(|i| NewJob::new(&b"x"[..]).id(format!("p{p}-{i}")))
            .collect();
        part.enqueue_many(jobs).await.unwrap();
    }
    let mut claims = [0usize; 6];
    for _ in 0..60 {
        let leases = queue.claim(1, "w", None).await.unwrap();
        assert_eq!(leases.len(), 1);
        claims[leases[0].partition] += 1;
        assert!(queue.ack(&leases[0]).await.unwrap());
    }
    assert_eq!(claims, [10; 6]);

    // A steady flow into partition 0 (each claim's jobs replaced), the other partitions
    // found empty by the claims (nothing marks them ready by hand): two jobs that then go
    // into partition 4 are claimed by the first claim made a recheck interval later, not
    // after the flow.
    let mut flowed = 0;
    let mut flow = async |n: usize| {
        let jobs = (flowed..flowed + n)
            .map(|i| NewJob::new(&b"x"[..]).id(format!("f{i}")))
            .collect();
        flowed += n;
        queue.partitions()[0].enqueue_many(jobs).await.unwrap();
    };
    flow(20).await;
    for _ in 0..2 {
        let leases = queue.claim(5, "w", None).await.unwrap();
        assert_eq!(leases[0].partition, 0);
        flow(leases.len()).await;
    }
    assert!(queue.claim(5, "w", None).await.unwrap()[0].partition == 0);
    let enqueued = Instant::now();
    let few = (0..2)
        .map(|i| NewJob::new(&b"x"[..]).id(format!("s{i}")))
        .collect();
    queue.partitions()[4].enqueue_many(few).await.unwrap();
    // (claim started at, partition it gave jobs from)
    let mut made = Vec::new();
    loop {
        let at = Instant::now();
        let leases = queue.claim(5, "w", None).await.unwrap();
        assert!(!leases.is_empty());
        made.push((at, leases[0].partition));
        if leases[0].partition == 4 {
            assert_eq!(leases.len(), 2, "both jobs of the small partition at once");
            break;
        }
        flow(leases.len()).await;
        if made
            .iter()
            .filter(|(at, _)| *at >= enqueued + RECHECK)
            .count()
            > 10
        {
            break;
        }
    }
    // The small partition's jobs are claimed no later than by the first claim that
    // started a recheck interval after the enqueue (partition 0 gave last, and the
    // rotation tries 1 to 5 before it).
    let first_late = made
        .iter()
        .position(|(at, _)| *at >= enqueued + RECHECK)
        .unwrap_or(made.len());
    let small = made.iter().position(|(_, p)| *p == 4);
    let late: Vec<usize> = made[first_late..].iter().map(|(_, p)| *p).collect();
    assert!(
        small.is_some_and(|s| s <= first_late),
        "claims made {RECHECK:?} or more after the jobs went into partition 4 took from \
         partitions {late:?}"
    );
    assert_eq!(
        queue.partitions()[4].stats().await.unwrap().pending,
        0,
        "the small partition was drained while the flow goes on"
    );
}

/// One job run by the worker of `a_busy_worker_looks_again_at_a_partition_it_found_empty`.
struct Run {
    id: String,
    partition: usize,
    ended: Instant,
}

/// A busy worker looks again at a partition it found empty once its poll interval has
/// passed, without waiting to be idle: with a steady flow into partition 0 (each of its
/// jobs enqueues the next), a job put into partition 1 after the worker found that
/// partition empty is claimed by the first claim made a poll interval later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_worker_looks_again_at_a_partition_it_found_empty() {
    const POLL: Duration = Duration::from_millis(200);
    let server = RedisServer::start();
    let queue = PartitionedQueue::new(server.redis().await, "jq", "busy", 3).unwrap();
    let flow = queue.partitions()[0].clone();
    let first = (0..20)
        .map(|i| NewJob::new(&b"x"[..]).id(format!("flow-{i}")))
        .collect();
    flow.enqueue_many(first).await.unwrap();

    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(20));
    let stop = CancellationToken::new();
    let worker = Worker::builder(queue.clone())
        .concurrency(1)
        .poll_interval(POLL)
        .reaper(false)
        .handle_signals(false)
        .shutdown_token(stop.clone())
        .build()
        .unwrap();
    let worker = tokio::spawn({
        let runs = runs.clone();
        worker.run(move |lease, _ctx| {
            let (runs, flow, next) = (runs.clone(), flow.clone(), next.clone());
            async move {
                if lease.partition == 0 {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    flow.enqueue(NewJob::new(&b"x"[..]).id(format!("flow-{n}")))
                        .await
                        .unwrap();
                }
                runs.lock().unwrap().push(Run {
                    id: lease.id.to_string(),
                    partition: lease.partition,
                    ended: Instant::now(),
                });
                Ok(())
            }
        })
    });

    // Three claims made: each started at partition 0's successor, so partitions 1 and 2
    // were found empty.
    eventually("the worker runs three jobs", async || {
        runs.lock().unwrap().len() >= 3
    })
    .await;
    let enqueued = Instant::now();
    queue.partitions()[1]
        .enqueue(NewJob::new(&b"x"[..]).id("lone"))
        .await
        .unwrap();
    // Until it ran, or ten more jobs from partition 0 ran after the first one that
    // ended a poll interval after it was enqueued.
    let rechecked = enqueued + POLL;
    eventually(
        "the lone job runs or partition 0 goes on without it",
        async || {
            let runs = runs.lock().unwrap();
            runs.iter().any(|r| r.id == "lone")
                || runs.iter().filter(|r| r.ended >= rechecked).count() > 10
        },
    )
    .await;
    stop.cancel();
    worker.await.unwrap();

    let runs = runs.lock().unwrap();
    // With one job at a time, the claim after a job starts once that job ended: the
    // claim after the first job that ended at `rechecked` or later looks at partition 1
    // (the one after partition 0 in the rotation) again, if no claim did sooner.
    let late = runs
        .iter()
        .position(|r| r.ended >= rechecked)
        .unwrap_or(runs.len());
    let lone = runs.iter().position(|r| r.id == "lone");
    let behind = lone.unwrap_or(runs.len()).saturating_sub(late + 1);
    assert!(
        lone.is_some_and(|l| l <= late + 1),
        "the job in partition 1 ran at {lone:?} of {} runs: {behind} jobs of partition 0 were \
         claimed after a poll interval ({POLL:?}) had passed since it was enqueued",
        runs.len()
    );
    assert_eq!(runs[lone.unwrap()].partition, 1);
}

#[tokio::test]
async fn leases_are_acked_extended_and_failed_in_their_partition() {
    let server = RedisServer::start();
    let queue = PartitionedQueue::new(server.redis().await, "jq", "route", 4).unwrap();
    let jobs = (0..40)
        .map(|i| NewJob::new(&b"x"[..]).id(format!("j{i}")))
        .collect();
    queue.enqueue_many(jobs).await.unwrap();
    let mut leases = Vec::new();
    while leases.len() < 40 {
        let got = queue.claim(7, "w", None).await.unwrap();
        assert!(!got.is_empty(), "all 40 are claimable");
        leases.extend(got);
    }
    for lease in &leases {
        let id = lease.id.as_str().unwrap();
        assert_eq!(lease.partition, queue.partition_for(id.as_bytes()), "{id}");
    }
    // Refs of every partition in one call: each goes where its lease was made.
    let refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
    let extended = queue
        .extend_many(&refs, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(extended.iter().all(Option::is_some), "{extended:?}");
    let (fail, ack) = leases.split_at(1);
    let outcome = queue
        .fail(
            &fail[0],
            "boom",
            jobqueue::queue::FailMode::Dead,
            jobqueue::queue::Backoff::Policy,
        )
        .await
        .unwrap();
    assert_eq!(outcome, jobqueue::queue::FailOutcome::Dead);
    let refs: Vec<_> = ack.iter().map(|l| l.lease_ref()).collect();
    assert_eq!(queue.ack_many(&refs).await.unwrap(), vec![true; 39]);
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.total.acked, stats.total.dead, stats.total.stale),
        (39, 1, 0)
    );
    // A lease sent to a partition it does not belong to is stale there, not acked.
    let wrong = fail[0]
        .lease_ref()
        .in_partition((fail[0].partition + 1) % 4);
    assert!(!queue.ack(wrong).await.unwrap());
    // The dead job is redriven from whichever partition holds it.
    let sel = jobqueue::queue::Selection::Oldest(10);
    assert_eq!(queue.redrive(&sel).await.unwrap(), 1);
    assert_eq!(queue.stats().await.unwrap().total.pending, 1);
}

#[tokio::test]
async fn an_idle_consumer_wakes_for_a_job_in_any_partition() {
    let server = RedisServer::start();
    let redis = server.redis().await;
    let queue = PartitionedQueue::new(redis.clone(), "jq", "wake", 6).unwrap();
    let mut consumer = queue.consumer("w");
    // Nothing yet: every partition is found empty.
    assert!(
        consumer
            .next_jobs(1, Duration::from_millis(50))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(queue.all_empty());
    let producer = PartitionedQueue::new(redis, "jq", "wake", 6).unwrap();
    let waiting = tokio::spawn(async move {
        consumer
            .next_job(Duration::from_secs(30))
            .await
            .map(|l| l.map(|l| (l.id.to_string(), l.partition)))
    });
    // The consumer is idle with every partition found empty: the job's wake marker,
    // not a poll, tells it where to look.
    producer
        .enqueue(NewJob::new(&b"x"[..]).id("late"))
        .await
        .unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(
        got,
        Some(("late".to_string(), producer.partition_for(b"late")))
    );
}

/// The overlap bound: the workers run with `--kill-grace 1s`.
const GRACE: Duration = Duration::from_secs(1);

/// A worker process on the queue `tag` (on a Cluster when `cluster`), with leases of
/// `visibility` and its partition flags; its runs are recorded in `dir`
/// (tests/support/runs.rs).
fn spawn_worker(
    url: &str,
    cluster: bool,
    tag: &str,
    dir: &Path,
    id: &str,
    visibility: &str,
    partitions: &[&str],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{id}.log")))
        .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["worker", "--redis", url, "--tag", tag]);
    if cluster {
        cmd.arg("--cluster");
    }
    cmd.args(partitions)
        .args([
            "--concurrency",
            "4",
            "--visibility",
            visibility,
            "--kill-grace",
            "1s",
        ])
        .args(["--shutdown-timeout", "3s", "--worker-id", id])
        .arg("--exec")
        .args(runs::command(Work::Sleep))
        .env(runs::RUNS_ENV, dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("run jobqueue worker")
}

/// SIGKILL a worker process, noting when (its runs without an end ended by then).
fn kill_worker(dir: &Path, id: &str, mut child: Child) {
    runs::note_kill(dir, id);
    let _ = child.kill();
    let _ = child.wait();
}

/// The end of a scenario: each job done, or dead if it is poison, in the partition of
/// `home(id)`; no job dead without running; no two runs of a job overlapping past
/// [`GRACE`]. Returns (done, dead, problems, dead_without_running,
/// overlap_beyond_grace, the longest overlap).
async fn check_jobs<'a>(
    kinds: &HashMap<String, &str>,
    home: impl Fn(&str) -> &'a Queue,
    dir: &Path,
) -> (usize, usize, Vec<String>, usize, usize, Duration) {
    let all = runs::read(dir);
    let started = runs::by_job(&all);
    let mut problems = Vec::new();
    let (mut done, mut dead, mut dead_without_running) = (0, 0, 0);
    for (id, kind) in kinds {
        let info = home(id).job(id).await.unwrap();
        let status = info.as_ref().and_then(|i| i.status.clone());
        if status.as_deref() == Some("dead") && !started.contains_key(id.as_bytes()) {
            dead_without_running += 1;
            problems.push(format!(
                "{id} ({kind}) was dead-lettered without ever running: {:?}",
                info.and_then(|i| i.last_error)
            ));
            continue;
        }
        match status.as_deref() {
            Some("done") if *kind != "poison" => done += 1,
            Some("dead") if *kind == "poison" => dead += 1,
            other => problems.push(format!("{id} ({kind}) in {}: {other:?}", home(id).name())),
        }
    }
    let (beyond, longest) = runs::overlaps_beyond(&all, GRACE);
    let overlaps = beyond.len();
    problems.extend(beyond);
    (
        done,
        dead,
        problems,
        dead_without_running,
        overlaps,
        longest,
    )
}

/// The worker id of some lease held now, if any.
async fn lease_holder(queue: &PartitionedQueue) -> Option<String> {
    for part in queue.partitions() {
        for (id, _) in part.processing_ids(1).await.ok()? {
            if let Some(worker) = part.job(id.as_bytes()).await.ok()?.and_then(|j| j.worker) {
                return Some(worker);
            }
        }
    }
    None
}

#[tokio::test]
async fn six_partitions_on_a_cluster_shrunk_to_three_lose_nothing() {
    let cluster = RedisCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let url = cluster.url();
    let redis: Redis = cluster.redis().await;
    let six = PartitionedQueue::new(redis.clone(), "jq", "parts", 6).unwrap();
    six.configure(&QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        max_attempts: 20,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
        completed_retention: Duration::from_secs(3600),
        ..QueueSettings::default()
    })
    .await
    .unwrap();
    // Batches of 60 jobs; half before the shrink, half after; a worker SIGKILLed after
    // every second batch.
    let batches = 10 * scale();
    let total = 60 * batches;

    // Workers on all six partitions.
    let mut workers: Vec<(String, Child)> = (0..3)
        .map(|i| {
            let id = format!("six-{i}");
            let child = spawn_worker(
                &url,
                true,
                "parts",
                dir.path(),
                &id,
                "1s",
                &["--partitions", "6"],
            );
            (id, child)
        })
        .collect();
    // A reaper over every partition (the operator's part, here the library's).
    let stop = CancellationToken::new();
    let reaper = {
        let queue = six.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut requeued = 0;
            while !stop.is_cancelled() {
                if let Ok(o) = queue.reap_expired(100, 10).await {
                    requeued += o.requeued;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            requeued
        })
    };

    // The producer: half the jobs on 6 partitions, then the shrink, then half on 3.
    let three = PartitionedQueue::resizing(redis.clone(), "jq", "parts", 3, 6).unwrap();
    let kept: Vec<usize> = three.layout().route.clone();
    assert_eq!(three.partitions().len(), 6, "6 → 3 drains the six queues");
    let removed: Vec<usize> = (0..6).filter(|p| !kept.contains(p)).collect();
    let mut kinds: HashMap<String, &str> = HashMap::new();
    let mut rng = rand::rng();
    let mut killed = 0;
    for batch in 0..batches {
        let queue = if batch < batches / 2 { &six } else { &three };
        let jobs: Vec<NewJob> = (batch * 60..(batch + 1) * 60)
            .map(|i| {
                let kind = match i % 17 {
                    3 => "poison",
                    5 | 11 => "flaky",
                    _ => "ok",
                };
                kinds.insert(format!("j{i}"), kind);
                let secs = rng.random_range(20..200) as f64 / 1000.0;
                NewJob::new(format!("{kind} {secs:.3}\n").into_bytes()).id(format!("j{i}"))
            })
            .collect();
        let out = queue.enqueue_many(jobs).await.unwrap();
        assert!(out.iter().all(|e| e.created));
        if batch == batches / 2 - 1 {
            // The shrink: after this no job goes to the removed partitions...
            let before = six.stats().await.unwrap();
            let enqueued_removed: u64 =
                removed.iter().map(|&p| before.partitions[p].enqueued).sum();
            assert!(enqueued_removed > 0);
            // ...and new workers drain all six while routing to three.
            let id = "three-0".to_string();
            let args = ["--partitions", "3", "--drain-partitions", "6"];
            workers.push((
                id.clone(),
                spawn_worker(&url, true, "parts", dir.path(), &id, "1s", &args),
            ));
        }
        // SIGKILL a worker that holds a lease (a random one when none is seen), and
        // start another in its place.
        if batch % 2 == 1 {
            let holder = lease_holder(&three).await;
            let i = holder
                .and_then(|w| workers.iter().position(|(id, _)| *id == w))
                .unwrap_or_else(|| rng.random_range(0..workers.len()));
            let (id, child) = workers.remove(i);
            kill_worker(dir.path(), &id, child);
            killed += 1;
            let id = format!("after-kill-{killed}");
            let args = ["--partitions", "3", "--drain-partitions", "6"];
            workers.push((
                id.clone(),
                spawn_worker(&url, true, "parts", dir.path(), &id, "1s", &args),
            ));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    let logs = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let last = std::sync::Mutex::new(None);
    Wait::for_("every partition drained and every job done or dead")
        .within(Duration::from_secs(60 + 30 * scale() as u64))
        .every(Duration::from_millis(200))
        .explained_by(|| format!("last stats: {:?}\nlogs:\n{}", last.lock().unwrap(), logs()))
        .until(async || {
            let stats = three.stats().await;
            let done = matches!(&stats, Ok(s) if s.partitions.iter().all(|p| p.pending == 0
                && p.processing == 0 && p.delayed == 0)
                && (s.total.acked + s.total.dead) as usize >= total);
            *last.lock().unwrap() = stats.ok();
            done
        })
        .await;
    stop.cancel();
    let requeued = reaper.await.unwrap();
    for (_, mut child) in workers {
        let _ = child.kill();
        let _ = child.wait();
    }

    // Every job is done or dead, in the partition its layout routed it to; poison ones dead.
    let home = |id: &str| {
        let n: usize = id[1..].parse().unwrap();
        let queue = if n < total / 2 { &six } else { &three };
        &queue.partitions()[queue.partition_for(id.as_bytes())]
    };
    let (done, dead, lost, dead_without_running, overlaps, longest) =
        check_jobs(&kinds, home, dir.path()).await;
    let stats = three.stats().await.unwrap();
    println!(
        "partitions 6 → 3 on a 3-master Cluster: {total} jobs, {done} done, {dead} dead, \
         lost {}, dead_without_running={dead_without_running} \
         overlap_beyond_grace={overlaps} (longest {:.3}s), {killed} workers SIGKILLed, {} \
         leases reaped ({requeued} by the test's reaper); per partition (acked): {:?}",
        lost.len() - dead_without_running - overlaps,
        longest.as_secs_f64(),
        stats.total.reaped,
        stats.partitions.iter().map(|s| s.acked).collect::<Vec<_>>()
    );
    assert!(lost.is_empty(), "lost or wrong:\n{}", lost.join("\n"));
    // The killed workers' leases were taken back by a reaper (the test's or a worker's).
    assert!(stats.total.reaped > 0, "{:?}", stats.total);
    assert_eq!(done + dead, total);
    // Each partition drained; the removed ones got no job after the shrink (their
    // enqueued counters are what the first half put there).
    for (p, s) in stats.partitions.iter().enumerate() {
        assert_eq!(
            (s.pending, s.processing, s.delayed),
            (0, 0, 0),
            "partition {p}"
        );
    }
    let first_half: Vec<String> = (0..total / 2).map(|i| format!("j{i}")).collect();
    for &p in &removed {
        let routed_there = first_half
            .iter()
            .filter(|id| six.partition_for(id.as_bytes()) == p)
            .count() as u64;
        assert_eq!(stats.partitions[p].enqueued, routed_there, "partition {p}");
    }
    // Every partition did work: claims were spread over all six.
    assert!(
        stats.partitions.iter().all(|s| s.acked > 0),
        "{:?}",
        stats.partitions
    );
}

/// 3 partitions shrunk to 1 under load on one server. Two of the workers reach Redis
/// through a proxy that loses replies (the script runs, the connection is cut before
/// its reply): those of every renewal, so only the workers' local deadlines end their
/// leases, and those of claims for 1.5 to 2.8 s at a time (less than a lease of 3 s;
/// longer than a claim's four sends, 100 + 200 + 400 ms apart, so every send of some
/// claims is lost and a later claim gets their leases replayed), then none for 0.2 to
/// 0.5 s, again and again. The others (one from the start, the new layout's) reach Redis directly, so a
/// job whose lease ended in Redis is run by one of them while the worker behind the
/// proxy may still run it. Workers SIGKILLed along the way are replaced by workers of
/// the new layout that reach Redis the same way. One job in four works longer than the
/// lease, so a run that outlives its lease in Redis is seen beside the next one. At the
/// end every job is done (or dead, for poison) where its layout put it, none was
/// dead-lettered without running, and no two runs of a job overlapped for longer than
/// the kill grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_partitions_shrunk_to_one_with_claim_replies_lost_and_workers_sigkilled() {
    const TAG: &str = "shrink";
    const LEASE: &str = "3s";
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let redis: Redis = server.redis().await;
    let three = PartitionedQueue::new(redis.clone(), "jq", TAG, 3).unwrap();
    three
        .configure(&QueueSettings {
            visibility_timeout: Duration::from_secs(3),
            max_attempts: 20,
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_millis(100),
            completed_retention: Duration::from_secs(3600),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    three.load_scripts().await.unwrap();
    let proxy = ReplyDropper::start(server.port, SCRIPTS.claim.sha.as_bytes()).await;
    proxy.always_cut(SCRIPTS.extend.sha.as_bytes());
    let proxy = std::sync::Arc::new(proxy);
    let (url, direct) = (proxy.url(), server.url());
    let one = PartitionedQueue::resizing(redis.clone(), "jq", TAG, 1, 3).unwrap();
    let kept = one.layout().route.clone();
    let removed: Vec<usize> = (0..3).filter(|p| !kept.contains(p)).collect();

    let batches = 3 * scale();
    let per_batch = 30;
    let total = per_batch * batches;
    // Two workers behind the proxy, one direct; each keeps its way to Redis across kills.
    let mut workers: Vec<(String, &str, Child)> = [&url, &url, &direct]
        .into_iter()
        .enumerate()
        .map(|(i, way)| {
            let id = format!("three-{i}");
            let args = ["--partitions", "3"];
            let child = spawn_worker(way, false, TAG, dir.path(), &id, LEASE, &args);
            (id, way.as_str(), child)
        })
        .collect();
    let stop = CancellationToken::new();
    let blackouts = {
        let (proxy, stop) = (proxy.clone(), stop.clone());
        tokio::spawn(async move {
            let mut blackouts = 0;
            while !stop.is_cancelled() {
                proxy.cut_at_random(1000);
                let on = rand::rng().random_range(1500..2800);
                tokio::time::sleep(Duration::from_millis(on)).await;
                proxy.cut_at_random(0);
                blackouts += 1;
                let off = rand::rng().random_range(200..500);
                tokio::time::sleep(Duration::from_millis(off)).await;
            }
            blackouts
        })
    };
    let reaper = {
        let queue = one.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let _ = queue.reap_expired(100, 10).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let mut kinds: HashMap<String, &str> = HashMap::new();
    let mut killed = 0;
    for batch in 0..batches {
        let queue = if batch < batches / 2 { &three } else { &one };
        let jobs: Vec<NewJob> = (batch * per_batch..(batch + 1) * per_batch)
            .map(|i| {
                let kind = match i % 17 {
                    3 => "poison",
                    5 | 11 => "flaky",
                    _ => "ok",
                };
                kinds.insert(format!("j{i}"), kind);
                let ms = if i % 4 == 1 {
                    rand::rng().random_range(3500..4500)
                } else {
                    rand::rng().random_range(20..200)
                };
                let secs = ms as f64 / 1000.0;
                NewJob::new(format!("{kind} {secs:.3}\n").into_bytes()).id(format!("j{i}"))
            })
            .collect();
        let out = queue.enqueue_many(jobs).await.unwrap();
        assert!(out.iter().all(|e| e.created));
        if batch == batches / 2 - 1 {
            // The shrink: from now on jobs go to one partition, and a worker of the new
            // layout drains all three.
            let id = "one-0".to_string();
            let args = ["--partitions", "1", "--drain-partitions", "3"];
            let child = spawn_worker(&direct, false, TAG, dir.path(), &id, LEASE, &args);
            workers.push((id, direct.as_str(), child));
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        if batch % 2 == 1 {
            let i = rand::rng().random_range(0..workers.len());
            let (id, way, child) = workers.remove(i);
            kill_worker(dir.path(), &id, child);
            killed += 1;
            let id = format!("after-kill-{killed}");
            let args = ["--partitions", "1", "--drain-partitions", "3"];
            let child = spawn_worker(way, false, TAG, dir.path(), &id, LEASE, &args);
            workers.push((id, way, child));
        }
    }

    let logs = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let e = e.ok()?;
                e.file_name()
                    .to_string_lossy()
                    .ends_with(".log")
                    .then(|| std::fs::read_to_string(e.path()).ok())?
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let last = Mutex::new(None);
    Wait::for_("every partition drained and every job done or dead")
        .within(Duration::from_secs(60 + 30 * scale() as u64))
        .every(Duration::from_millis(200))
        .explained_by(|| format!("last stats: {:?}\nlogs:\n{}", last.lock().unwrap(), logs()))
        .until(async || {
            let stats = one.stats().await;
            let done = matches!(&stats, Ok(s) if s.partitions.iter().all(|p| p.pending == 0
                && p.processing == 0 && p.delayed == 0)
                && (s.total.acked + s.total.dead) as usize >= total);
            *last.lock().unwrap() = stats.ok();
            done
        })
        .await;
    stop.cancel();
    reaper.await.unwrap();
    let blackouts = blackouts.await.unwrap();
    for (_, _, mut child) in workers {
        let _ = child.kill();
        let _ = child.wait();
    }

    // The first half of the batches went to three partitions, the rest to one.
    let before_shrink = per_batch * (batches / 2);
    let home = |id: &str| {
        let n: usize = id[1..].parse().unwrap();
        let queue = if n < before_shrink { &three } else { &one };
        &queue.partitions()[queue.partition_for(id.as_bytes())]
    };
    let (done, dead, wrong, dead_without_running, overlaps, longest) =
        check_jobs(&kinds, home, dir.path()).await;
    let stats = one.stats().await.unwrap();
    println!(
        "partitions 3 → 1, claim replies lost, workers SIGKILLed: {total} jobs, {done} done, \
         {dead} dead, dead_without_running={dead_without_running} \
         overlap_beyond_grace={overlaps} (longest {:.3}s), {killed} workers SIGKILLed, \
         {blackouts} blackouts, claims seen={} cut={}, replayed={} reaped={} stale={}",
        longest.as_secs_f64(),
        proxy.seen(),
        proxy.cuts(),
        stats.total.replayed,
        stats.total.reaped,
        stats.total.stale,
    );
    assert!(wrong.is_empty(), "lost or wrong:\n{}", wrong.join("\n"));
    assert_eq!((dead_without_running, overlaps), (0, 0));
    assert_eq!(done + dead, total);
    assert!(proxy.cuts() > 0 && killed > 0);
    // Nothing went to the removed partitions after the shrink.
    let first_half: Vec<String> = (0..before_shrink).map(|i| format!("j{i}")).collect();
    for &p in &removed {
        let routed_there = first_half
            .iter()
            .filter(|id| three.partition_for(id.as_bytes()) == p)
            .count() as u64;
        assert_eq!(stats.partitions[p].enqueued, routed_there, "partition {p}");
    }
}

/// `jobqueue` with `args`, stdin `input`; returns stdout, failing the test on a non-zero exit.
fn cli(args: &[&str], input: &str) -> String {
    let out = support::procs::output_with_stdin(Command::new(BIN).args(args), input.as_bytes());
    assert!(
        out.status.success(),
        "jobqueue {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn the_cli_enqueues_counts_and_redrives_across_partitions() {
    let server = RedisServer::start();
    let url = server.url();
    let base = ["--redis", url.as_str(), "--tag", "cli", "--partitions", "3"];
    let with = |extra: &[&str]| -> Vec<String> {
        extra
            .iter()
            .chain(base.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |extra: &[&str], input: &str| {
        let args = with(extra);
        cli(&args.iter().map(String::as_str).collect::<Vec<_>>(), input)
    };
    let lines: String = (0..30).map(|i| format!("job {i}\n")).collect();
    run(&["enqueue", "--stdin"], &lines);
    run(
        &["enqueue", "--partition-key", "k", "--id", "keyed-1", "x"],
        "",
    );

    let stats: serde_json::Value = serde_json::from_str(&run(&["stats", "--json"], "")).unwrap();
    assert_eq!(stats["pending"], 31, "{stats}");
    let parts = stats["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    let sum: u64 = parts.iter().map(|p| p["pending"].as_u64().unwrap()).sum();
    assert_eq!(sum, 31);
    assert!(
        parts.iter().all(|p| p["pending"].as_u64().unwrap() > 0),
        "{stats}"
    );
    let one: serde_json::Value =
        serde_json::from_str(&run(&["stats", "--json", "--partition", "1"], "")).unwrap();
    assert_eq!(one["pending"], parts[1]["pending"]);
    assert_eq!(one["queue"], parts[1]["queue"]);

    // The library sees the same layout, and the keyed job where its key says.
    let queue = PartitionedQueue::new(server.redis().await, "jq", "cli", 3).unwrap();
    let p = queue.partition_for(b"k");
    assert!(
        queue.partitions()[p]
            .job("keyed-1")
            .await
            .unwrap()
            .is_some()
    );

    // Dead jobs in several partitions: the CLI redrives the oldest over all of them.
    let mut dead = 0;
    while dead < 6 {
        let leases = queue.claim(10, "w", None).await.unwrap();
        assert!(!leases.is_empty());
        for lease in leases {
            queue
                .fail(
                    &lease,
                    "no",
                    jobqueue::queue::FailMode::Dead,
                    jobqueue::queue::Backoff::Policy,
                )
                .await
                .unwrap();
            dead += 1;
        }
    }
    let out = run(&["dead", "redrive", "--oldest", "4"], "");
    assert!(out.contains("redrove 4 dead jobs"), "{out}");
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.total.dead, dead - 4);
    let out = run(&["dead", "purge", "--all", "--yes"], "");
    assert!(
        out.contains(&format!("purged {} dead jobs", dead - 4)),
        "{out}"
    );
    assert_eq!(queue.stats().await.unwrap().total.dead, 0);
    let out = run(&["reap"], "");
    assert!(out.contains("(3 partitions)"), "{out}");

    // A partition that is not there is a usage error naming the range.
    for (partitions, partition) in [("3", "3"), ("1", "2")] {
        let out = Command::new(BIN)
            .args(["stats", "--redis", url.as_str(), "--tag", "cli"])
            .args(["--partitions", partitions, "--partition", partition])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("{partition} is not a partition")),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_failing_partition_does_not_stop_claims_from_the_others() {
    let server = RedisServer::start();
    let queue = PartitionedQueue::new(server.redis().await, "jq", "sick", 3).unwrap();
    // Partition 0's pending list is a string: every claim there fails (WRONGTYPE), as
    // one on a node that is down would.
    let _: () = redis::cmd("SET")
        .arg(&queue.partitions()[0].keys().pending)
        .arg("not a list")
        .query(&mut server.conn())
        .unwrap();
    for p in [1, 2] {
        let jobs = (0..5)
            .map(|i| NewJob::new(&b"x"[..]).id(format!("p{p}-{i}")))
            .collect();
        queue.partitions()[p].enqueue_many(jobs).await.unwrap();
    }
    for _ in 0..10 {
        let leases = queue.claim(1, "w", None).await.unwrap();
        assert_eq!(leases.len(), 1);
        assert_ne!(leases[0].partition, 0);
    }
    // Nothing left elsewhere: now the failure is reported.
    let err = queue.claim(1, "w", None).await.unwrap_err();
    // It names the partition that failed.
    let sick = queue.partitions()[0].name();
    assert!(err.to_string().contains(sick), "{err}");
}
