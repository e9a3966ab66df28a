//! A job's own maximum run time (`timeout_ms`) and lease length (`visibility_timeout_ms`),
//! set at enqueue (`jobqueue enqueue --timeout 2m --visibility 30s`): the scripts lease it
//! for its own length at every claim and renewal, the claim replies carry both, and the
//! worker stops a run that passes its timeout and fails it `timed out after …`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use jobqueue::queue::{
    Backoff, JobOptions, Lease, NewJob, Queue, QueueSettings, Settle, new_token, parse_claim_token,
};
use jobqueue::worker::{JobError, Worker};
use redis::Commands;
use support::eventually::{Wait, eventually};
use support::exec::{ExecWorker, processes_of_job};
use support::redis::{RedisCluster, RedisServer, redis_now_ms};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// A queue whose own visibility timeout is a minute (far longer than any job's own here)
/// and whose retries wait a minute, so a failed job stays in `delayed` to be looked at.
async fn minute_queue(queue: &Queue, max_attempts: u32) {
    queue
        .configure(&QueueSettings {
            visibility_timeout: Duration::from_secs(60),
            max_attempts,
            backoff_initial: Duration::from_secs(60),
            backoff_max: Duration::from_secs(60),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
}

/// The lease's length on the Redis clock: lease_until − claimed_at (from its token).
fn lease_length(lease: &Lease) -> i64 {
    let (claimed_at, _) = parse_claim_token(lease.token.as_bytes()).expect("a claim token");
    lease.lease_until - claimed_at
}

fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), rand::random::<u32>())
}

/// `jobqueue enqueue` as a user types it; returns its stderr when it fails.
fn enqueue_cli(server: &RedisServer, tag: &str, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(BIN)
        .args(["enqueue", "--redis", &server.url(), "--tag", tag])
        .args(args)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_job_past_its_own_timeout_is_stopped_and_fails() {
    let server = RedisServer::start();
    let queue = server.queue("own").await;
    minute_queue(&queue, 5).await;
    let out = tempfile::tempdir().unwrap();
    let retried = unique("retried");
    let last = unique("last");
    // `sleep 3600` in a pipeline: the job's command and a grandchild of the worker.
    let script = r#"echo started > "$OUT/$JOBQUEUE_JOB_ID.started"; sleep 3600 | cat"#;
    // No --timeout of the worker's own: each job's limit is its own.
    let mut worker = ExecWorker::start(
        &server,
        "own",
        out.path(),
        &["--concurrency", "2", "--kill-grace", "300ms"],
        script,
    );
    enqueue_cli(&server, "own", &["--id", &retried, "--timeout", "1s", "x"]).unwrap();
    enqueue_cli(
        &server,
        "own",
        &["--id", &last, "--timeout", "1s", "--max-attempts", "1", "x"],
    )
    .unwrap();
    let mut conn = server.conn();
    let stored: Option<String> = conn
        .hget(format!("jq:{{own}}:job:{retried}"), "timeout_ms")
        .unwrap();
    assert_eq!(stored.as_deref(), Some("1000"), "kept in the job's hash");

    for (id, status) in [(&retried, "delayed"), (&last, "dead")] {
        Wait::for_(format!("{id} failed ({status})"))
            .within(Duration::from_secs(20))
            .explained_by(|| worker.log())
            .until(async || {
                let job = queue.job(id.as_str()).await.unwrap();
                job.is_some_and(|j| j.status.as_deref() == Some(status))
            })
            .await;
        worker.assert_running();
        assert!(
            out.path().join(format!("{id}.started")).exists(),
            "{id} ran"
        );
        let job = queue.job(id.as_str()).await.unwrap().unwrap();
        assert_eq!(
            job.last_error.as_deref(),
            Some("timed out after 1s"),
            "{id}"
        );
        assert_eq!(job.attempts, 1, "{id}");
        Wait::for_(format!("every process of {id} gone"))
            .within(Duration::from_secs(5))
            .explained_by(|| format!("left: {:?}", processes_of_job(id)))
            .until(async || processes_of_job(id).is_empty())
            .await;
    }
    let qs = queue.stats().await.unwrap();
    assert_eq!(
        (qs.dead, qs.delayed, qs.acked, qs.processing),
        (1, 1, 0, 0),
        "{qs:?}"
    );
    let (exit, log) = worker.terminate().await;
    assert!(exit.success(), "{log}");
}

#[tokio::test]
async fn a_jobs_own_visibility_is_the_length_of_its_leases() {
    let server = RedisServer::start();
    let queue = server.queue("vis").await;
    minute_queue(&queue, 5).await;
    enqueue_cli(
        &server,
        "vis",
        &["--id", "short", "--visibility", "2s", "x"],
    )
    .unwrap();
    let mut conn = server.conn();
    let stored: Option<String> = conn
        .hget("jq:{vis}:job:short", "visibility_timeout_ms")
        .unwrap();
    assert_eq!(stored.as_deref(), Some("2000"));

    // Claimed with the queue's 60 s, or with a caller's own 45 s: its own 2 s.
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(lease_length(&lease), 2000, "{lease:?}");
    assert_eq!(lease.visibility, Some(Duration::from_secs(2)));
    assert_eq!(lease.timeout, None);
    let score: f64 = conn.zscore("jq:{vis}:processing", "short").unwrap();
    assert_eq!(
        score as i64, lease.lease_until,
        "processing is scored the same"
    );

    // Extended by the queue's value or by a caller's own: its own 2 s from now.
    for by in [None, Some(Duration::from_secs(45))] {
        let before = redis_now_ms(&mut conn);
        let until = queue.extend(&lease, by).await.unwrap().unwrap();
        let after = redis_now_ms(&mut conn);
        assert!(
            before + 2000 <= until && until <= after + 2000,
            "{by:?}: {before} {until} {after}"
        );
    }
    assert!(queue.ack(&lease).await.unwrap());

    queue.enqueue(NewJob::new("x").id("other")).await.unwrap();
    let lease = queue
        .claim_one("w", Some(Duration::from_secs(45)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        lease_length(&lease),
        45_000,
        "a job without its own: the caller's"
    );
    assert_eq!((lease.visibility, lease.timeout), (None, None));
}

#[tokio::test]
async fn batch_claims_with_mixed_options_keep_each_jobs_own() {
    let server = RedisServer::start();
    let queue = server.queue("mix").await;
    minute_queue(&queue, 5).await;
    let s = Duration::from_secs;
    let jobs = [
        ("plain", JobOptions::default()),
        (
            "timeout",
            JobOptions {
                timeout: Some(s(7)),
                ..JobOptions::default()
            },
        ),
        (
            "visibility",
            JobOptions {
                visibility: Some(s(3)),
                ..JobOptions::default()
            },
        ),
        (
            "both",
            JobOptions {
                timeout: Some(s(9)),
                visibility: Some(s(4)),
                max_attempts: Some(2),
                ..JobOptions::default()
            },
        ),
    ];
    // (length of the lease on the Redis clock, own visibility, own timeout)
    let want = |id: &str| match id.trim_end_matches(char::is_numeric) {
        "plain" => (60_000, None, None),
        "timeout" => (60_000, None, Some(s(7))),
        "visibility" => (3_000, Some(s(3)), None),
        "both" => (4_000, Some(s(4)), Some(s(9))),
        other => panic!("{other}"),
    };
    let enqueue_all = async |round: u32| {
        let new: Vec<NewJob> = jobs
            .iter()
            .map(|(id, o)| {
                NewJob::new("x")
                    .id(format!("{id}{round}"))
                    .options(o.clone())
            })
            .collect();
        queue.enqueue_many(new).await.unwrap();
    };
    let check = |leases: &[Lease], via: &str| {
        let mut got: Vec<&str> = leases
            .iter()
            .map(|l| l.id.as_str().unwrap().trim_end_matches(char::is_numeric))
            .collect();
        got.sort();
        assert_eq!(got, ["both", "plain", "timeout", "visibility"], "{via}");
        for lease in leases {
            let id = lease.id.as_str().unwrap();
            assert_eq!(
                (lease_length(lease), lease.visibility, lease.timeout),
                want(id),
                "{via}: {id}"
            );
        }
    };

    // claim, and its replay (the same request id) answers the same
    enqueue_all(1).await;
    let request = new_token();
    let first = queue.claim_request(&request, 10, "w", None).await.unwrap();
    check(&first.leases, "claim");
    let again = queue.claim_request(&request, 10, "w", None).await.unwrap();
    check(&again.leases, "claim replayed");

    // settle_claim: the flat reply, acking the first batch and claiming the next
    enqueue_all(2).await;
    let settles: Vec<Settle<'_>> = first
        .leases
        .iter()
        .map(|l| Settle::Ack(l.lease_ref()))
        .collect();
    let request = new_token();
    let settled = queue
        .settle_claim(&request, &settles, 10, "w", None)
        .await
        .unwrap();
    check(&settled.claimed.leases, "settle_claim");
    let again = queue
        .settle_claim(&request, &settles, 10, "w", None)
        .await
        .unwrap();
    check(&again.claimed.leases, "settle_claim replayed");

    // a batch of plain jobs alone: the reply has no options at all
    queue.enqueue(NewJob::new("x").id("p2")).await.unwrap();
    let settles: Vec<Settle<'_>> = settled
        .claimed
        .leases
        .iter()
        .map(|l| Settle::Fail {
            lease: l.lease_ref(),
            error: "e",
            mode: jobqueue::queue::FailMode::Dead,
            backoff: Backoff::Policy,
        })
        .collect();
    let plain = queue
        .settle_claim(&new_token(), &settles, 10, "w", None)
        .await
        .unwrap();
    assert_eq!(plain.claimed.leases.len(), 1);
    assert_eq!(lease_length(&plain.claimed.leases[0]), 60_000);
}

/// A library worker running `handler`, shut down when the test ends.
fn start_worker<F, Fut>(
    queue: &Queue,
    handler: F,
) -> (CancellationToken, tokio::task::JoinHandle<()>)
where
    F: Fn(Lease, jobqueue::worker::JobContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), JobError>> + Send + 'static,
{
    let shutdown = CancellationToken::new();
    let worker = Worker::builder(queue.clone())
        .handle_signals(false)
        .worker_id("timeout-worker")
        .concurrency(2)
        // the worker's own limit, which a job's own replaces
        .timeout(Some(Duration::from_secs(600)))
        .lease_grace(Duration::from_millis(500))
        .shutdown_token(shutdown.clone())
        .build()
        .unwrap();
    let task = tokio::spawn(async move {
        worker.run(handler).await;
    });
    (shutdown, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_handler_is_cancelled_at_its_jobs_timeout() {
    let server = RedisServer::start();
    let queue = server.queue("lib").await;
    minute_queue(&queue, 5).await;
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let seen = saw_cancel.clone();
    let (shutdown, task) = start_worker(&queue, move |lease, ctx| {
        let seen = seen.clone();
        async move {
            if lease.payload.as_ref() == b"quick" {
                return Ok(());
            }
            ctx.cancelled().await;
            seen.store(true, Ordering::SeqCst);
            Err(JobError::retry("stopped"))
        }
    });
    queue
        .enqueue(
            NewJob::new("slow")
                .id("slow")
                .timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    queue
        .enqueue(
            NewJob::new("quick")
                .id("quick")
                .timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let job = eventually("the slow job failed", async || {
        queue
            .job("slow")
            .await
            .unwrap()
            .filter(|j| j.status.as_deref() == Some("delayed"))
    })
    .await;
    assert!(
        saw_cancel.load(Ordering::SeqCst),
        "the handler's context was cancelled"
    );
    assert_eq!(job.last_error.as_deref(), Some("timed out after 300ms"));
    assert_eq!(job.attempts, 1);
    eventually("the quick job acked", async || {
        queue.job("quick").await.unwrap().is_none()
    })
    .await;
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_worker_renews_a_short_own_lease_and_a_dead_one_loses_it() {
    let server = RedisServer::start();
    let queue = server.queue("renew").await;
    minute_queue(&queue, 5).await;
    let runs = Arc::new(AtomicU32::new(0));
    let finish = CancellationToken::new();
    let (r, f) = (runs.clone(), finish.clone());
    let (shutdown, task) = start_worker(&queue, move |_lease, _ctx| {
        let (r, f) = (r.clone(), f.clone());
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            f.cancelled().await;
            Ok(())
        }
    });
    queue
        .enqueue(
            NewJob::new("x")
                .id("long")
                .visibility(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    let mut conn = server.conn();
    let claimed_at = eventually("the job claimed", async || {
        let job = queue.job("long").await.unwrap()?;
        job.claimed_at
    })
    .await;
    // It runs past three of its own leases while reapers look at it every 100 ms; the
    // lease stays within 2 s of Redis's clock and moves forward.
    let mut renewed = 0;
    let mut last_until = 0;
    Wait::for_("the job run past 3 of its leases")
        .within(Duration::from_secs(20))
        .every(Duration::from_millis(100))
        .until(async || {
            let reaped = queue.reap(100).await.unwrap();
            assert_eq!(
                reaped.requeued + reaped.dead_lettered,
                0,
                "reaped while renewed"
            );
            let now = redis_now_ms(&mut conn);
            let until: f64 = conn.zscore("jq:{renew}:processing", "long").unwrap();
            let until = until as i64;
            assert!(
                until - now <= 2000,
                "a lease of its own 2 s: {until} at {now}"
            );
            if until > last_until {
                renewed += 1;
                last_until = until;
            }
            now > claimed_at + 6000
        })
        .await;
    assert!(renewed >= 3, "renewed {renewed} times");
    finish.cancel();
    eventually("the job acked", async || {
        queue.job("long").await.unwrap().is_none()
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "it ran once");
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.acked, qs.reaped, qs.stale), (1, 0, 0), "{qs:?}");
    shutdown.cancel();
    task.await.unwrap();

    // Its worker SIGKILLed mid-job: the lease ends by its own 2 s, not the queue's 60 s.
    let out = tempfile::tempdir().unwrap();
    let worker = ExecWorker::start(&server, "renew", out.path(), &[], "sleep 3600");
    enqueue_cli(
        &server,
        "renew",
        &["--id", "killed", "--visibility", "2s", "x"],
    )
    .unwrap();
    let until = eventually("the job claimed", async || {
        queue.job("killed").await.unwrap()?.lease_until
    })
    .await;
    assert!(until - redis_now_ms(&mut conn) <= 2000);
    worker.signal(libc::SIGKILL);
    drop(worker);
    Wait::for_("the job reaped once its own lease ended")
        .within(Duration::from_secs(20))
        .until(async || queue.reap(100).await.unwrap().requeued == 1)
        .await;
    let job = queue.job("killed").await.unwrap().unwrap();
    assert_eq!(job.status.as_deref(), Some("pending"));
    assert!(
        job.errors.iter().any(|e| e.error == "lease expired"),
        "{:?}",
        job.errors
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_own_options_work_the_same_on_a_cluster() {
    let cluster = RedisCluster::start();
    let queue = Queue::new(cluster.redis().await, "jq", "jt").unwrap();
    minute_queue(&queue, 5).await;
    queue
        .enqueue(
            NewJob::new("x")
                .id("c1")
                .visibility(Duration::from_secs(2))
                .timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    queue.enqueue(NewJob::new("x").id("c2")).await.unwrap();
    let leases = queue.claim(2, "w", None).await.unwrap();
    let got: Vec<_> = leases
        .iter()
        .map(|l| {
            (
                l.id.as_str().unwrap(),
                lease_length(l),
                l.visibility,
                l.timeout,
            )
        })
        .collect();
    let s = Duration::from_secs;
    assert_eq!(
        got,
        [
            ("c1", 2000, Some(s(2)), Some(s(5))),
            ("c2", 60_000, None, None)
        ]
    );
    let until = queue.extend(&leases[0], None).await.unwrap().unwrap();
    let now = queue.now_ms().await.unwrap();
    assert!(until <= now + 2000, "{until} {now}");
}
