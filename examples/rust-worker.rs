//! A worker written in Rust on the jobqueue library: it claims jobs of one queue, handles
//! up to `CONCURRENCY` at once, renews each lease while its job runs, and ends every lease
//! with an ack or a fail.
//!
//! ```console
//! $ jobqueue enqueue --tag greetings 'Ada' 'Grace' 'Barbara'
//! $ JOBQUEUE_REDIS_URL=redis://127.0.0.1:6379 JOBQUEUE_TAG=greetings \
//!     cargo run --example rust-worker
//! ```
//!
//! SIGTERM or Ctrl-C stops claiming and lets the jobs in flight finish; a job that does
//! not finish is left to its lease, which expires and the reaper hands the job out again.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use jobqueue::queue::{Backoff, ConnectOptions, FailMode, FailOutcome, Lease, Queue, Redis};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Jobs handled at once.
const CONCURRENCY: usize = 8;

/// What one job does: here, greet the name in the payload. An `Err` is retried per the
/// queue's backoff; a payload that can never work is dead-lettered at once.
async fn handle(lease: &Lease) -> Result<(), JobError> {
    let name = std::str::from_utf8(&lease.payload)
        .map_err(|_| JobError::Permanent("the payload is not UTF-8".into()))?;
    if name.trim().is_empty() {
        return Err(JobError::Permanent("empty name".into()));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!(
        "hello, {name} (job {}, attempt {})",
        lease.id, lease.attempts
    );
    Ok(())
}

enum JobError {
    /// Dead-letter the job now.
    Permanent(String),
    /// Try again later, until the queue's maxAttempts.
    #[allow(dead_code)]
    Retry(String),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("JOBQUEUE_REDIS_URL").unwrap_or("redis://127.0.0.1:6379".into());
    let tag = std::env::var("JOBQUEUE_TAG").context("set JOBQUEUE_TAG to the queue's hash tag")?;
    let prefix = std::env::var("JOBQUEUE_PREFIX").unwrap_or("jq".into());
    let redis = Redis::connect(&ConnectOptions::new(url)).await?;
    println!("connected to {}", redis.endpoint()); // the password, if any, is redacted
    let queue = Queue::new(redis, &prefix, &tag)?;
    // Renew at a third of the visibility timeout the operator wrote into the queue.
    let renew_every = queue.settings().await?.visibility_timeout / 3;

    let worker_id = format!("rust-worker-{}", std::process::id());
    let mut consumer = queue.consumer(worker_id);
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            wait_for_signal().await;
            shutdown.cancel();
        }
    });

    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    let mut running = JoinSet::new();
    while !shutdown.is_cancelled() {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = slots.clone().acquire_owned() => permit?,
        };
        let lease = tokio::select! {
            _ = shutdown.cancelled() => break,
            next = consumer.next_job(Duration::from_secs(5)) => match next {
                Ok(Some(lease)) => lease,
                Ok(None) => continue,
                Err(e) if e.is_transient() => {
                    eprintln!("redis: {e}; retrying in 1s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            },
        };
        let queue = queue.clone();
        running.spawn(async move {
            let _permit = permit;
            if let Err(e) = run_one(&queue, &lease, renew_every).await {
                eprintln!("job {}: {e}", lease.id);
            }
        });
        // Reap finished tasks as we go.
        while running.try_join_next().is_some() {}
    }
    println!("shutting down: waiting for the jobs in flight");
    while running.join_next().await.is_some() {}
    Ok(())
}

/// Run one job while renewing its lease, then ack or fail it.
async fn run_one(queue: &Queue, lease: &Lease, renew_every: Duration) -> anyhow::Result<()> {
    let work = handle(lease);
    tokio::pin!(work);
    let mut renew =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    let result = loop {
        tokio::select! {
            result = &mut work => break result,
            _ = renew.tick() => {
                if queue.extend(lease, None).await?.is_none() {
                    // The lease expired and was handed out again: stop, never ack.
                    anyhow::bail!("lease lost: the job ran past its visibility timeout");
                }
            }
        }
    };
    match result {
        Ok(()) => {
            if !queue.ack(lease).await? {
                eprintln!("job {}: stale ack, the lease had expired", lease.id);
            }
        }
        Err(JobError::Retry(why)) => {
            let outcome = queue
                .fail(lease, &why, FailMode::Retry, Backoff::Policy)
                .await?;
            if outcome == FailOutcome::Dead {
                eprintln!(
                    "job {}: dead-lettered after {} attempts: {why}",
                    lease.id, lease.attempts
                );
            }
        }
        Err(JobError::Permanent(why)) => {
            queue
                .fail(lease, &why, FailMode::Dead, Backoff::Policy)
                .await?;
            eprintln!("job {}: dead-lettered: {why}", lease.id);
        }
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
