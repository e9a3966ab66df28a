//! A worker that already waits idle wakes for a job delayed by someone else: another
//! client's enqueue with a delay, or another worker's retry with a backoff, that runs
//! before every job already delayed pushes a wake marker, so the waiting worker re-reads
//! the earliest due time instead of sleeping to its next poll (30 s here, far beyond the
//! tests' deadlines).

mod support;

use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, FailOutcome, NewJob, Queue};
use jobqueue::worker::{StatsHandle, Worker};
use support::eventually::{Wait, eventually};
use support::redis::RedisServer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A worker on `queue` with a 30 s poll, no reaper, acking every job.
fn idle_worker(queue: &Queue) -> (StatsHandle, CancellationToken, JoinHandle<()>) {
    let worker = Worker::builder(queue.clone())
        .handle_signals(false)
        .poll_interval(Duration::from_secs(30))
        .reaper(false)
        .build()
        .unwrap();
    let stats = worker.stats();
    let shutdown = worker.shutdown_token();
    let task = tokio::spawn(async move {
        worker.run(|_lease, _ctx| async move { Ok(()) }).await;
    });
    (stats, shutdown, task)
}

/// Until the worker's BLPOP on `wake` blocks: it found nothing to claim and waits.
async fn until_blocked(server: &RedisServer) {
    let mut conn = server.conn();
    eventually("the worker blocked on wake", async || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut conn).unwrap();
        info.lines().any(|l| l.trim() == "blocked_clients:1")
    })
    .await;
}

async fn stop(shutdown: CancellationToken, task: JoinHandle<()>) {
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the worker stops")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_delayed_by_another_client_wakes_a_waiting_worker() {
    let server = RedisServer::start();
    let queue = server.queue("wake").await;
    // A job due in an hour: what the worker reads as the earliest due time.
    queue
        .enqueue(
            NewJob::new("late")
                .id("late")
                .delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let (stats, shutdown, task) = idle_worker(&queue);
    until_blocked(&server).await;

    let other = server.queue("wake").await;
    other
        .enqueue(
            NewJob::new("soon")
                .id("soon")
                .delay(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    // Far below the 30 s poll: without the marker this times out.
    Wait::for_("the job delayed 300 ms acked")
        .within(Duration::from_secs(10))
        .until(async || stats.get().acked == 1)
        .await;
    let soon = queue.job("soon").await.unwrap();
    assert!(
        soon.is_none_or(|j| j.status.as_deref() == Some("done")),
        "soon ran"
    );
    let late = queue.job("late").await.unwrap().unwrap();
    assert_eq!(late.status.as_deref(), Some("delayed"), "late is not due");
    stop(shutdown, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_backoff_by_another_worker_wakes_a_waiting_worker() {
    let server = RedisServer::start();
    let queue = server.queue("wakefail").await;
    queue.enqueue(NewJob::new("x").id("x")).await.unwrap();
    let other = server.queue("wakefail").await;
    let lease = other.claim_one("other", None).await.unwrap().unwrap();
    let (stats, shutdown, task) = idle_worker(&queue);
    until_blocked(&server).await;

    let outcome = other
        .fail(
            &lease,
            "try again",
            FailMode::Retry,
            Backoff::After(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailOutcome::Delayed);
    Wait::for_("the job retried after 300 ms acked")
        .within(Duration::from_secs(10))
        .until(async || stats.get().acked == 1)
        .await;
    stop(shutdown, task).await;
}
