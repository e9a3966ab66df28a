//! The worker runtime against a real Redis: concurrency, renewal, stale leases, retries,
//! dead-lettering, panics, graceful shutdown and reconnection.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, LeaseRef, NewJob, Queue, QueueSettings};
use jobqueue::worker::{JobContext, JobError, StatsHandle, Worker, WorkerStats};
use redis::AsyncCommands;
use support::eventually::eventually;
use support::redis::RedisServer;
use tokio::sync::{Barrier, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

async fn configured(server: &RedisServer, tag: &str, settings: QueueSettings) -> Queue {
    let queue = server.queue(tag).await;
    queue.configure(&settings).await.unwrap();
    queue
}

fn builder(queue: &Queue) -> jobqueue::worker::WorkerBuilder {
    Worker::builder(queue.clone())
        .handle_signals(false)
        .worker_id("test-worker")
        .redis_retry(Duration::from_millis(20), Duration::from_millis(200))
}

struct Running {
    shutdown: CancellationToken,
    stats: StatsHandle,
    task: JoinHandle<WorkerStats>,
}

impl Running {
    async fn stop(self) -> WorkerStats {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the worker stops after shutdown")
            .expect("the worker task does not panic")
    }
}

fn spawn<H, F>(worker: Worker, handler: H) -> Running
where
    H: Fn(jobqueue::queue::Lease, JobContext) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), JobError>> + Send + 'static,
{
    let shutdown = worker.shutdown_token();
    let stats = worker.stats();
    let task = tokio::spawn(worker.run(handler));
    Running {
        shutdown,
        stats,
        task,
    }
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

async fn status(queue: &Queue, id: &str) -> Option<String> {
    queue.job(id).await.unwrap().and_then(|j| j.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn builder_refuses_bad_settings_by_name() {
    let server = RedisServer::start();
    let queue = server.queue("cfg").await;
    let err = builder(&queue).concurrency(0).build().unwrap_err();
    assert!(err.to_string().contains("concurrency"), "{err}");
    let err = builder(&queue)
        .visibility(Some(Duration::from_millis(5)))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("visibility timeout"), "{err}");
    let err = builder(&queue).worker_id("").build().unwrap_err();
    assert!(err.to_string().contains("worker id"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_bound_is_respected_and_reached() {
    let server = RedisServer::start();
    let queue = configured(&server, "conc", QueueSettings::default()).await;
    const JOBS: usize = 12;
    let jobs: Vec<NewJob> = (0..JOBS).map(|i| NewJob::new(format!("{i}"))).collect();
    queue.enqueue_many(jobs).await.unwrap();

    let current = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let max_leases = Arc::new(AtomicUsize::new(0));
    // Jobs pass in groups of three: with fewer slots they would wait forever, with more
    // a fourth job would be seen running alongside the three.
    let barrier = Arc::new(Barrier::new(3));
    let worker = builder(&queue).concurrency(3).build().unwrap();
    let (c, m, l, b, q) = (
        current.clone(),
        max_seen.clone(),
        max_leases.clone(),
        barrier.clone(),
        queue.clone(),
    );
    let running = spawn(worker, move |_lease, _ctx| {
        let (c, m, l, b, q) = (c.clone(), m.clone(), l.clone(), b.clone(), q.clone());
        async move {
            let now = c.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            let leases = q.stats().await.unwrap().processing as usize;
            l.fetch_max(leases, Ordering::SeqCst);
            b.wait().await;
            c.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    });
    eventually("all jobs acked", || async {
        queue.stats().await.unwrap().acked == JOBS as u64
    })
    .await;
    let stats = running.stop().await;
    assert_eq!(max_seen.load(Ordering::SeqCst), 3);
    assert!(max_leases.load(Ordering::SeqCst) <= 3);
    assert_eq!(stats.acked, JOBS as u64);
    assert_eq!(stats.claimed, JOBS as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewal_keeps_a_long_job_alive_past_the_visibility_timeout() {
    let server = RedisServer::start();
    let queue = configured(&server, "renew", QueueSettings::default()).await;
    queue.enqueue(NewJob::new("long").id("long")).await.unwrap();
    let visibility = Duration::from_millis(600);

    // A reaper that would take the job away the moment its lease ran out.
    let reaper_stop = CancellationToken::new();
    let reaper = {
        let queue = queue.clone();
        let stop = reaper_stop.clone();
        tokio::spawn(async move {
            let mut reaped = 0;
            while !stop.is_cancelled() {
                reaped += queue.reap_expired(100, 10).await.unwrap().requeued;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            reaped
        })
    };

    let runs = Arc::new(AtomicUsize::new(0));
    let extended = Arc::new(AtomicBool::new(false));
    let worker = builder(&queue)
        .visibility(Some(visibility))
        .build()
        .unwrap();
    let (r, e, q, url) = (runs.clone(), extended.clone(), queue.clone(), server.url());
    let running = spawn(worker, move |lease, ctx| {
        let (r, e, q, url) = (r.clone(), e.clone(), q.clone(), url.clone());
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            // Work for three visibility timeouts, by the Redis clock.
            let until = lease.lease_until + 3 * visibility.as_millis() as i64;
            let mut conn = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            loop {
                let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
                if s * 1000 + us / 1000 > until {
                    break;
                }
                assert!(!ctx.is_cancelled(), "the lease must not be lost");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let job = q.job(&lease.id).await.unwrap().unwrap();
            e.store(
                job.lease_until.unwrap_or(0) > lease.lease_until,
                Ordering::SeqCst,
            );
            Ok(())
        }
    });
    eventually("the long job acked", || async {
        queue.stats().await.unwrap().acked == 1
    })
    .await;
    let stats = running.stop().await;
    reaper_stop.cancel();
    assert_eq!(reaper.await.unwrap(), 0, "the reaper never took the job");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(extended.load(Ordering::SeqCst), "lease_until moved forward");
    assert!(stats.renewals >= 3, "{stats:?}");
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.reaped, qs.stale, qs.claimed), (0, 0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_renewal_cancels_the_handler_and_its_result_is_not_acked() {
    let server = RedisServer::start();
    let queue = configured(&server, "stale", QueueSettings::default()).await;
    queue.enqueue(NewJob::new("x").id("x")).await.unwrap();

    let (started_tx, mut started_rx) = mpsc::unbounded_channel::<()>();
    let saw_lost = Arc::new(AtomicBool::new(false));
    let worker = builder(&queue)
        .visibility(Some(Duration::from_millis(300)))
        .build()
        .unwrap();
    let lost = saw_lost.clone();
    let running = spawn(worker, move |_lease, ctx| {
        let (started, lost) = (started_tx.clone(), lost.clone());
        async move {
            started.send(()).unwrap();
            tokio::time::timeout(Duration::from_secs(20), ctx.cancelled())
                .await
                .map_err(|_| JobError::retry("never cancelled"))?;
            lost.store(ctx.lease_lost(), Ordering::SeqCst);
            // A handler that ignores the cancellation and claims success anyway.
            Ok(())
        }
    });
    started_rx.recv().await.unwrap();

    // Take the lease away: end it with the worker's own token, as a reaper would, and
    // let another worker claim the job.
    let mut conn = server.redis().await;
    let token: String = conn.hget("jq:{stale}:job:x", "claim_token").await.unwrap();
    let outcome = queue
        .fail(
            LeaseRef {
                id: b"x",
                token: &token,
                ..Default::default()
            },
            "taken away",
            FailMode::Retry,
            Backoff::Immediate,
        )
        .await
        .unwrap();
    assert_eq!(outcome, jobqueue::queue::FailOutcome::Pending);
    let thief = queue
        .claim_one("thief", Some(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("the job is ready again");

    eventually("the worker noticed the lost lease", || async {
        running.stats.get().lost == 1
    })
    .await;
    assert!(saw_lost.load(Ordering::SeqCst), "ctx.lease_lost() was true");
    let job = queue.job("x").await.unwrap().unwrap();
    assert_eq!(job.status.as_deref(), Some("processing"));
    assert_eq!(job.worker.as_deref(), Some("thief"));
    let stats = running.stop().await;
    assert_eq!((stats.acked, stats.stale, stats.lost), (0, 0, 1));
    let qs = queue.stats().await.unwrap();
    // One stale answer: the renewal. The handler's Ok was never sent as an ack.
    assert_eq!((qs.acked, qs.stale), (0, 1));
    assert!(queue.ack(&thief).await.unwrap(), "the new holder acks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn errors_retry_with_their_text_until_max_attempts() {
    let server = RedisServer::start();
    let settings = QueueSettings {
        max_attempts: 2,
        ..Default::default()
    };
    let queue = configured(&server, "retry", settings).await;
    queue.enqueue(NewJob::new("x").id("x")).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::<(u32, Option<String>)>::new()));
    let worker = builder(&queue)
        .retry_backoff(Backoff::Immediate)
        .build()
        .unwrap();
    let (s, q) = (seen.clone(), queue.clone());
    let running = spawn(worker, move |lease, _ctx| {
        let (s, q) = (s.clone(), q.clone());
        async move {
            let before = q.job(&lease.id).await.unwrap().unwrap().last_error;
            s.lock().unwrap().push((lease.attempts, before));
            Err(JobError::retry(format!(
                "boom on attempt {}",
                lease.attempts
            )))
        }
    });
    eventually("the job dead after two attempts", || async {
        status(&queue, "x").await.as_deref() == Some("dead")
    })
    .await;
    let stats = running.stop().await;
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(1, None), (2, Some("boom on attempt 1".to_string()))]
    );
    let job = queue.job("x").await.unwrap().unwrap();
    assert_eq!(job.last_error.as_deref(), Some("boom on attempt 2"));
    assert_eq!(job.attempts, 2);
    assert_eq!((stats.retried, stats.dead, stats.acked), (1, 1, 0));
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.failed, qs.retried, qs.dead_lettered), (2, 1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn question_mark_errors_retry_with_the_error_text() {
    let server = RedisServer::start();
    let settings = QueueSettings {
        max_attempts: 1,
        ..Default::default()
    };
    let queue = configured(&server, "qm", settings).await;
    queue
        .enqueue(NewJob::new(&b"\xff\xfe"[..]).id("bin"))
        .await
        .unwrap();
    let worker = builder(&queue).build().unwrap();
    let running = spawn(worker, |lease, _ctx| async move {
        let text = String::from_utf8(lease.payload.to_vec())?;
        assert!(!text.is_empty());
        Ok(())
    });
    eventually("the job failed out", || async {
        status(&queue, "bin").await.as_deref() == Some("dead")
    })
    .await;
    running.stop().await;
    let job = queue.job("bin").await.unwrap().unwrap();
    let err = job.last_error.unwrap();
    assert!(err.contains("invalid utf-8"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permanent_errors_dead_letter_at_once() {
    let server = RedisServer::start();
    let queue = configured(&server, "perm", QueueSettings::default()).await;
    queue.enqueue(NewJob::new("{").id("x")).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = builder(&queue).build().unwrap();
    let r = runs.clone();
    let running = spawn(worker, move |_lease, _ctx| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Err(JobError::permanent("malformed payload"))
        }
    });
    eventually("the job dead", || async {
        status(&queue, "x").await.as_deref() == Some("dead")
    })
    .await;
    let stats = running.stop().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let job = queue.job("x").await.unwrap().unwrap();
    assert_eq!(job.last_error.as_deref(), Some("malformed payload"));
    assert_eq!(job.attempts, 1);
    assert_eq!((stats.dead, stats.retried), (1, 0));
    assert_eq!(queue.stats().await.unwrap().retried, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_handler_fails_its_job_and_the_worker_goes_on() {
    let server = RedisServer::start();
    let queue = configured(&server, "panic", QueueSettings::default()).await;
    queue.enqueue(NewJob::new("p").id("p")).await.unwrap();
    queue.enqueue(NewJob::new("ok").id("ok")).await.unwrap();
    let second_try_saw = Arc::new(Mutex::new(None::<String>));
    let worker = builder(&queue)
        .retry_backoff(Backoff::Immediate)
        .build()
        .unwrap();
    let (s, q) = (second_try_saw.clone(), queue.clone());
    let running = spawn(worker, move |lease, _ctx| {
        let (s, q) = (s.clone(), q.clone());
        async move {
            if lease.id == "p" {
                if lease.attempts == 1 {
                    panic!("kaboom");
                }
                *s.lock().unwrap() = q.job("p").await.unwrap().unwrap().last_error;
            }
            Ok(())
        }
    });
    eventually("both jobs acked", || async {
        queue.stats().await.unwrap().acked == 2
    })
    .await;
    let stats = running.stop().await;
    assert_eq!(
        second_try_saw.lock().unwrap().as_deref(),
        Some("handler panicked: kaboom")
    );
    assert_eq!((stats.panicked, stats.retried, stats.acked), (1, 1, 2));
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.failed, qs.retried), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_acks_what_finishes_in_time_and_releases_the_rest_uncharged() {
    let server = RedisServer::start();
    let queue = configured(&server, "shut", QueueSettings::default()).await;
    queue.enqueue(NewJob::new("slow").id("slow")).await.unwrap();
    queue
        .enqueue(NewJob::new("stuck").id("stuck"))
        .await
        .unwrap();

    let (started_tx, mut started_rx) = mpsc::unbounded_channel::<String>();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let stuck_cancelled = Arc::new(AtomicBool::new(false));
    let worker = builder(&queue)
        .concurrency(2)
        .visibility(Some(Duration::from_millis(600)))
        .shutdown_deadline(Duration::from_millis(800))
        .build()
        .unwrap();
    let (rel, sc) = (release_rx.clone(), stuck_cancelled.clone());
    let running = spawn(worker, move |lease, ctx| {
        let (started, rel, sc) = (started_tx.clone(), rel.clone(), sc.clone());
        async move {
            started.send(lease.id.to_string()).unwrap();
            if lease.id == "slow" {
                let release = rel.lock().unwrap().take().unwrap();
                release.await.unwrap();
                assert!(
                    ctx.shutdown().is_cancelled(),
                    "released after shutdown began"
                );
                Ok(())
            } else {
                // Never finishes: at the deadline the worker drops it (which the guard
                // records), it is not left running.
                let _guard = SetOnDrop(sc);
                std::future::pending::<()>().await;
                Ok(())
            }
        }
    });
    let mut started = vec![
        started_rx.recv().await.unwrap(),
        started_rx.recv().await.unwrap(),
    ];
    started.sort();
    assert_eq!(started, ["slow", "stuck"]);
    let stuck_token: String = server
        .redis()
        .await
        .hget("jq:{shut}:job:stuck", "claim_token")
        .await
        .unwrap();
    // Waiting behind the two running jobs: must never be claimed once shutdown began.
    queue
        .enqueue(NewJob::new("later").id("later"))
        .await
        .unwrap();

    running.shutdown.cancel();
    release_tx.send(()).unwrap();
    let stats = tokio::time::timeout(Duration::from_secs(30), running.task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stats.acked, stats.abandoned, stats.claimed), (1, 1, 2));
    assert!(
        stuck_cancelled.load(Ordering::SeqCst),
        "the stuck job was stopped"
    );
    assert!(queue.job("slow").await.unwrap().is_none(), "slow was acked");
    let later = queue.job("later").await.unwrap().unwrap();
    assert_eq!(
        (later.status.as_deref(), later.attempts),
        (Some("pending"), 0)
    );

    // The unfinished job was neither acked nor failed but released: back in pending at
    // once, its lease ended, the attempt not charged (a job on its last attempt is not
    // dead-lettered by a restart).
    let stuck = queue.job("stuck").await.unwrap().unwrap();
    assert_eq!(
        (stuck.status.as_deref(), stuck.attempts, stuck.lease_until),
        (Some("pending"), 0, None)
    );
    let until: Option<String> = server
        .redis()
        .await
        .hget("jq:{shut}:job:stuck", "lease_until")
        .await
        .unwrap();
    assert_eq!(until, None, "the lease {stuck_token} ended");
    assert_eq!(stats.released, 1);
    let reaped = queue.reap(100).await.unwrap();
    assert_eq!(reaped.requeued, 0, "nothing left for the reaper");
    let qs = queue.stats().await.unwrap();
    assert_eq!((qs.acked, qs.failed, qs.stale, qs.released), (1, 0, 0, 1));
    assert_eq!(qs.pending, 2, "stuck and later wait for the next worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worker_recovers_from_killed_connections_and_a_restarted_server() {
    let mut server = RedisServer::start();
    let queue = configured(&server, "kill", QueueSettings::default()).await;
    let acked_ids = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    // A claim whose reply is lost to a cut leaves its job leased to nobody until the
    // lease expires: a reaper hands it out again.
    let reaper_stop = CancellationToken::new();
    let reaper = {
        let (queue, stop) = (queue.clone(), reaper_stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let _ = queue.reap_expired(100, 10).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let worker = builder(&queue)
        .concurrency(2)
        .visibility(Some(Duration::from_secs(1)))
        .build()
        .unwrap();
    let ids = acked_ids.clone();
    let running = spawn(worker, move |lease, _ctx| {
        let ids = ids.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            *ids.lock().unwrap().entry(lease.id.to_string()).or_default() += 1;
            Ok(())
        }
    });
    let server_url = server.url();
    let enqueue = |from: usize, to: usize| {
        let url = server_url.clone();
        async move {
            // A fresh client each time: the test's own connections are killed too.
            let redis = jobqueue::queue::Redis::connect(&jobqueue::queue::ConnectOptions::new(url))
                .await
                .unwrap();
            let q = Queue::new(redis, "jq", "kill").unwrap();
            let jobs = (from..to)
                .map(|i| NewJob::new("x").id(format!("j{i}")))
                .collect();
            q.enqueue_many(jobs).await.unwrap();
        }
    };
    let done = |n: usize| {
        let ids = acked_ids.clone();
        async move { ids.lock().unwrap().len() >= n }
    };
    enqueue(0, 5).await;
    eventually("the first jobs done", || done(5)).await;

    // Cut every client connection while the worker waits for jobs.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut server.conn())
        .unwrap();
    assert!(killed >= 2, "the worker's connections were cut ({killed})");
    enqueue(5, 10).await;
    eventually("jobs enqueued after the cut done", || done(10)).await;
    assert!(running.stats.get().redis_errors >= 1, "the cut was noticed");

    // Cut them again while jobs are running.
    enqueue(10, 40).await;
    eventually("some of the next batch done", || done(15)).await;
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut server.conn())
        .unwrap();
    eventually("the batch done", || done(40)).await;
    eventually("every ack of the batch in", || async {
        queue.stats().await.map(|s| s.acked == 40).unwrap_or(false)
    })
    .await;

    // Redis gone for a while: the worker backs off instead of spinning, then resumes.
    server.kill();
    let errors_before = running.stats.get().redis_errors;
    eventually("failures seen while Redis is down", || async {
        running.stats.get().redis_errors >= errors_before + 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let errors_down = running.stats.get().redis_errors - errors_before;
    server.restart();
    assert!(
        errors_down < 100,
        "{errors_down} failed calls while Redis was down: the worker must back off"
    );
    // Nothing was persisted: the queue starts empty on the restarted server.
    enqueue(40, 45).await;
    eventually("jobs after the restart done", || done(45)).await;
    eventually("their acks in", || async {
        queue.stats().await.map(|s| s.acked == 5).unwrap_or(false)
    })
    .await;
    running.stop().await;
    reaper_stop.cancel();
    reaper.await.unwrap();
    let ids = acked_ids.lock().unwrap();
    assert!(ids.values().all(|&n| n == 1), "every job ran once");
}

/// `calls` of `cmdstat_evalsha` in `INFO commandstats`: script calls the server ran.
fn evalsha_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_worker_makes_one_script_call_per_job() {
    const JOBS: u64 = 200;
    let server = RedisServer::start();
    let queue = server.queue("onetrip").await;
    queue
        .enqueue_many((0..JOBS).map(|i| NewJob::new(format!("{i}"))).collect())
        .await
        .unwrap();
    let mut conn = server.conn();
    let before = evalsha_calls(&mut conn);
    let worker = builder(&queue)
        .concurrency(1)
        .reaper(false)
        .build()
        .unwrap();
    let running = spawn(worker, |_lease, _ctx| async { Ok(()) });
    // Waiting on the worker's own counters: the test sends no script call meanwhile.
    eventually("all jobs acked", || async {
        running.stats.get().acked == JOBS
    })
    .await;
    let stats = running.stop().await;
    assert_eq!((stats.acked, stats.claimed), (JOBS, JOBS));
    let calls = evalsha_calls(&mut conn) - before;
    // One settle-and-claim per job, plus the first claim and the claims that find the
    // queue empty before the stop (not 2 per job: a claim, then an ack).
    assert!(
        (JOBS..JOBS + 10).contains(&calls),
        "{calls} script calls for {JOBS} jobs"
    );
    let s = queue.stats().await.unwrap();
    assert_eq!((s.acked, s.pending, s.processing), (JOBS, 0, 0));
}

/// A record of each settle_claim call is kept for its retries, but not for as long as the
/// leases: the call that ends a lease deletes the record of the call that made it, so a
/// worker that processed many jobs under an hour's visibility leaves a bounded number of
/// records, not one per job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_records_do_not_pile_up_under_a_long_visibility() {
    const JOBS: u64 = 50;
    let server = RedisServer::start();
    let queue = server.queue("records").await;
    queue
        .enqueue_many((0..JOBS).map(|i| NewJob::new(format!("{i}"))).collect())
        .await
        .unwrap();
    let worker = builder(&queue)
        .concurrency(1)
        .visibility(Some(Duration::from_secs(3600)))
        .reaper(false)
        .build()
        .unwrap();
    let running = spawn(worker, |_lease, _ctx| async { Ok(()) });
    eventually("all jobs acked", || async {
        running.stats.get().acked == JOBS
    })
    .await;
    running.stop().await;
    let records = server.request_records("records");
    assert!(
        records.len() <= 2,
        "{} request records left after {JOBS} jobs: {records:?}",
        records.len()
    );
}

/// Writes log lines to a shared buffer and raises SIGTERM in the same instant the
/// worker's start line is written: the moment a Kubernetes pod stopped right after it
/// started gets its signal.
#[derive(Clone)]
struct TermOnStartLine(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for TermOnStartLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let start = String::from_utf8_lossy(buf).contains("worker started");
        self.0.lock().unwrap().extend_from_slice(buf);
        if start {
            // SAFETY: raise has no memory effects.
            assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_sigterm_as_the_start_line_is_written_is_a_graceful_shutdown() {
    let server = RedisServer::start();
    let queue = configured(&server, "term-at-start", QueueSettings::default()).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let writer = TermOnStartLine(log.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    // The current-thread runtime runs the worker's tasks on this thread, under this
    // subscriber.
    let _default = tracing::subscriber::set_default(subscriber);
    let worker = Worker::builder(queue.clone())
        .worker_id("term-at-start")
        .build()
        .unwrap();
    assert!(worker.config().handle_signals);
    // Before the fix the signal came before the listener and ended the test process.
    let stats = tokio::time::timeout(
        Duration::from_secs(30),
        worker.run(|_lease, _ctx| async { Ok(()) }),
    )
    .await
    .expect("the worker shuts down on the SIGTERM");
    let log = String::from_utf8(log.lock().unwrap().clone()).unwrap();
    assert!(
        log.contains("SIGTERM received: shutting down gracefully"),
        "{log}"
    );
    assert!(log.contains("worker stopped"), "{log}");
    assert_eq!(stats.claimed, 0, "{stats:?}");
}

/// A primary demoted to a replica under a running worker (a failover without Sentinel,
/// or `REPLICAOF` by hand): every write is refused with READONLY and no retry changes
/// that. The worker stops by itself and `try_run` says why, instead of retrying for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_whose_primary_is_demoted_stops_with_the_error() {
    let server = RedisServer::start();
    let new_primary = RedisServer::start();
    let queue = configured(&server, "demoted", QueueSettings::default()).await;
    let worker = builder(&queue).build().unwrap();
    let stats = worker.stats();
    let run = tokio::spawn(worker.try_run(|_lease, _ctx| async { Ok(()) }));
    queue.enqueue(NewJob::new("x").id("before")).await.unwrap();
    eventually("the job acked", || async { stats.get().acked == 1 }).await;

    let other = new_primary.queue("demoted").await;
    other.configure(&QueueSettings::default()).await.unwrap();
    other.enqueue(NewJob::new("x").id("after")).await.unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(new_primary.port)
        .query(&mut server.conn())
        .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the worker stops by itself")
        .unwrap();
    let err = stopped.expect_err("a replica is an error");
    assert!(
        matches!(err, jobqueue::queue::Error::ReadOnly { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("read-only replica"), "{err}");
    assert_eq!(status(&other, "after").await.as_deref(), Some("pending"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_past_its_timeout_is_cancelled_then_aborted_and_fails_timed_out() {
    let server = RedisServer::start();
    let settings = QueueSettings {
        max_attempts: 2,
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
        ..QueueSettings::default()
    };
    let queue = configured(&server, "tmo", settings).await;
    // `polite` stops when its context is cancelled; `deaf` ignores it and is aborted
    // (dropped) the lease grace later. `quick` finishes in time.
    for id in ["polite", "deaf", "quick"] {
        queue.enqueue(NewJob::new(id).id(id)).await.unwrap();
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let seen_cancel = Arc::new(AtomicUsize::new(0));
    let worker = builder(&queue)
        .concurrency(3)
        .timeout(Some(Duration::from_millis(300)))
        .lease_grace(Duration::from_millis(200))
        .build()
        .unwrap();
    let (dropped2, seen2) = (dropped.clone(), seen_cancel.clone());
    let running = spawn(worker, move |lease, ctx| {
        let dropped = dropped2.clone();
        let seen = seen2.clone();
        async move {
            match lease.id.as_str() {
                Some("quick") => Ok(()),
                Some("polite") => {
                    ctx.cancelled().await;
                    seen.fetch_add(1, Ordering::SeqCst);
                    Err(JobError::interrupted("stopped"))
                }
                _ => {
                    let _guard = SetOnDrop(dropped);
                    std::future::pending::<()>().await;
                    Ok(())
                }
            }
        }
    });
    eventually("both slow jobs dead after their two attempts", async || {
        status(&queue, "polite").await.as_deref() == Some("dead")
            && status(&queue, "deaf").await.as_deref() == Some("dead")
    })
    .await;
    for id in ["polite", "deaf"] {
        let job = queue.job(id).await.unwrap().unwrap();
        assert_eq!(
            job.last_error.as_deref(),
            Some("timed out after 300ms"),
            "{id}"
        );
        assert_eq!(job.attempts, 2, "{id}: retried once, as any failure");
    }
    assert!(queue.job("quick").await.unwrap().is_none(), "quick acked");
    assert_eq!(
        seen_cancel.load(Ordering::SeqCst),
        2,
        "polite saw its cancellation"
    );
    assert!(dropped.load(Ordering::SeqCst), "deaf was aborted");
    let stats = running.stop().await;
    assert_eq!(
        (stats.acked, stats.retried, stats.dead),
        (1, 2, 2),
        "{stats:?}"
    );
}
