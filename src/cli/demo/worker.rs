//! One worker process of `jobqueue demo`: claim, "work" a few milliseconds, ack.
//!
//! Deliberately small and self-contained over the queue client, so the demo shows the
//! protocol itself: a lease is held by its token, renewed with `extend` while the work
//! runs, and ended by `ack` or `fail`. The demo SIGKILLs these processes mid-job; what
//! they held comes back through the reaper once the lease expires. Being bare protocol
//! clients, they do not reap (`jobqueue worker` and the Rust runtime do): the demo runs
//! the reaper itself, as `jobqueue reap --every` would.

use std::time::Duration;

use clap::Args;
use tokio::io::AsyncReadExt;

use crate::queue::{Backoff, ConnectOptions, FailMode, Lease, Queue, Redis};

#[derive(Debug, Args)]
pub struct DemoWorkerArgs {
    #[arg(long)]
    pub redis: String,
    #[arg(long)]
    pub tag: String,
    /// Worker name, recorded in the jobs it claims.
    #[arg(long)]
    pub name: String,
    #[arg(long, value_parser = crate::duration::parse)]
    pub visibility: Duration,
}

/// A demo job's payload.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DemoJob {
    /// Its number, 1-based.
    pub n: u64,
    /// How long the work takes.
    pub work_ms: u64,
    /// A job that always fails: it ends in the dead-letter set after max attempts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fails: bool,
}

pub async fn run(args: DemoWorkerArgs) -> anyhow::Result<()> {
    exit_when_parent_goes();
    let redis = Redis::connect(&ConnectOptions::new(&args.redis)).await?;
    let queue = Queue::new(redis, crate::queue::DEFAULT_PREFIX, &args.tag)?;
    let mut consumer = queue
        .consumer(args.name.clone())
        .visibility(Some(args.visibility));
    loop {
        let lease = match consumer.next_job(Duration::from_secs(1)).await {
            Ok(Some(lease)) => lease,
            Ok(None) => continue,
            Err(err) if err.is_transient() => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        if let Err(err) = process(&queue, &lease, args.visibility).await {
            if !err.is_transient() {
                return Err(err.into());
            }
            // The lease is left to expire; the reaper gives the job to someone else.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn process(queue: &Queue, lease: &Lease, visibility: Duration) -> crate::queue::Result<()> {
    let job: DemoJob = match serde_json::from_slice(&lease.payload) {
        Ok(job) => job,
        Err(e) => {
            let error = format!("not a demo job: {e}");
            queue
                .fail(lease, &error, FailMode::Dead, Backoff::Policy)
                .await?;
            return Ok(());
        }
    };
    // Work in slices of a third of the lease, renewing the lease between slices.
    let slice = visibility / 3;
    let mut left = Duration::from_millis(job.work_ms);
    while !left.is_zero() {
        let step = left.min(slice);
        tokio::time::sleep(step).await;
        left -= step;
        if !left.is_zero() && queue.extend(lease, Some(visibility)).await?.is_none() {
            // The lease was taken away: someone else has the job now. Stop, don't ack.
            return Ok(());
        }
    }
    if job.fails {
        let error = format!("job {} always fails (on purpose)", job.n);
        queue
            .fail(lease, &error, FailMode::Retry, Backoff::Immediate)
            .await?;
    } else {
        queue.ack(lease).await?;
    }
    Ok(())
}

/// The demo keeps our stdin open; when it goes away (even by SIGKILL), so do we.
fn exit_when_parent_goes() {
    tokio::spawn(async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => std::process::exit(0),
                Ok(_) => {}
            }
        }
    });
}
