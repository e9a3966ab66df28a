//! A worker written in Rust on the jobqueue library's worker runtime: it claims jobs of
//! one queue, handles up to eight at once, renews each lease while its job runs, and acks,
//! retries or dead-letters each job by the handler's result.
//!
//! ```console
//! $ printf 'Ada\nGrace\nBarbara\n' | jobqueue enqueue --tag greetings --stdin
//! $ JOBQUEUE_REDIS_URL=redis://127.0.0.1:6379 JOBQUEUE_TAG=greetings \
//!     cargo run --release --example rust-worker
//! ```
//!
//! SIGTERM or Ctrl-C stops claiming and lets the jobs in flight finish (up to 30 s); a
//! job still running then is abandoned to its lease, which expires, and the reaper hands
//! the job out again.

use std::time::Duration;

use anyhow::Context as _;
use jobqueue::queue::{ConnectOptions, Lease, Queue, Redis};
use jobqueue::worker::{JobContext, JobError, Worker};

/// What one job does: greet the name in its payload.
///
/// `Ok` acks the job. [`JobError::Retry`] (also what `?` makes of any error) fails it to
/// run again after the queue's backoff, until `maxAttempts`; [`JobError::Permanent`]
/// dead-letters it at once: retrying a malformed payload cannot help.
async fn greet(lease: Lease, ctx: JobContext) -> Result<(), JobError> {
    let name = std::str::from_utf8(&lease.payload).map_err(JobError::permanent)?;
    if name.trim().is_empty() {
        return Err(JobError::permanent("empty name"));
    }
    tokio::select! {
        // The lease was taken away, or the shutdown deadline passed: stop now; the
        // result would not be acked anyway.
        _ = ctx.cancelled() => Err(JobError::retry("interrupted")),
        _ = tokio::time::sleep(Duration::from_millis(100)) => {
            println!("hello, {name} (job {}, attempt {})", lease.id, lease.attempts);
            Ok(())
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("JOBQUEUE_REDIS_URL").unwrap_or("redis://127.0.0.1:6379".into());
    let tag = std::env::var("JOBQUEUE_TAG").context("set JOBQUEUE_TAG to the queue's hash tag")?;
    let prefix = std::env::var("JOBQUEUE_PREFIX").unwrap_or("jq".into());

    let redis = Redis::connect(&ConnectOptions::new(url)).await?;
    // The endpoint is printed with its password, if any, redacted.
    println!("connected to {}", redis.endpoint());
    let queue = Queue::new(redis, &prefix, &tag)?;
    let worker = Worker::builder(queue)
        .concurrency(8)
        .shutdown_deadline(Duration::from_secs(30))
        .build()?;
    let stats = worker.run(greet).await;
    println!(
        "stopped: {} acked, {} retried, {} dead-lettered, {} abandoned",
        stats.acked, stats.retried, stats.dead, stats.abandoned
    );
    Ok(())
}
