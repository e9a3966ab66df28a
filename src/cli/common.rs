//! What the operations subcommands share: opening a queue, signals, usage errors.

use super::ConnectArgs;
use crate::queue::{PartitionedQueue, Queue, QueueStats, ReapOutcome, Selection};
use crate::shutdown::Signal;

/// Stopped by Ctrl-C or SIGTERM before the work was finished.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {0}")]
pub struct Interrupted(pub &'static str);

/// Flags that make sense one by one but not together (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Connect and check that each of the queue's keys is absent or of its protocol type, so
/// that a key written by something else is reported by name before anything is done.
pub async fn open(connect: &ConnectArgs) -> anyhow::Result<Queue> {
    let queue = connect.queue().await?;
    queue.check_key_types().await?;
    Ok(queue)
}

/// A note on stderr when none of the queue's keys exist (a mistyped tag or prefix reads
/// as an empty queue otherwise); not an error: a new queue is empty too.
pub async fn note_if_absent(queue: &Queue) -> anyhow::Result<()> {
    if !queue.exists().await? {
        eprintln!(
            "note: no queue exists at {} (none of its keys are in Redis): check --tag and --prefix",
            queue.name()
        );
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM, naming which as a person at the terminal says it;
/// listening from the call on, as [`crate::shutdown::shutdown_signal`].
pub fn stop_signal() -> impl Future<Output = &'static str> + Send + 'static {
    let signal = crate::shutdown::shutdown_signal();
    async move {
        match signal.await {
            Signal::Interrupt => "Ctrl-C",
            Signal::Terminate => "SIGTERM",
        }
    }
}

/// What an operations command acts on: one queue (an unpartitioned queue, or the
/// partition `--partition` names), or every partition of a partitioned queue.
#[derive(Clone)]
pub enum Target {
    One(Queue),
    All(PartitionedQueue),
}

impl Target {
    pub fn name(&self) -> &str {
        match self {
            Target::One(q) => q.name(),
            Target::All(q) => q.name(),
        }
    }

    /// The one queue, or each partition: for commands that list per partition.
    pub fn queues(&self) -> Vec<Queue> {
        match self {
            Target::One(q) => vec![q.clone()],
            Target::All(q) => q.partitions().to_vec(),
        }
    }

    pub async fn reap_expired(
        &self,
        batch: usize,
        calls: usize,
    ) -> crate::queue::Result<ReapOutcome> {
        match self {
            Target::One(q) => q.reap_expired(batch, calls).await,
            Target::All(q) => q.reap_expired(batch, calls).await,
        }
    }

    pub async fn redrive(&self, selection: &Selection) -> crate::queue::Result<u64> {
        match self {
            Target::One(q) => q.redrive(selection).await,
            Target::All(q) => q.redrive(selection).await,
        }
    }

    pub async fn purge(&self, selection: &Selection) -> crate::queue::Result<u64> {
        match self {
            Target::One(q) => q.purge(selection).await,
            Target::All(q) => q.purge(selection).await,
        }
    }

    /// The counts and counters: the queue's, or the sum over the partitions.
    pub async fn stats(&self) -> crate::queue::Result<QueueStats> {
        match self {
            Target::One(q) => q.stats().await,
            Target::All(q) => Ok(q.stats().await?.total),
        }
    }
}

/// [`open`] for the commands that understand a partitioned queue: with `--partitions`
/// (or `--drain-partitions`) and no `--partition`, every partition, each checked.
pub async fn open_target(connect: &ConnectArgs) -> anyhow::Result<Target> {
    if !connect.all_partitions() {
        return Ok(Target::One(open(connect).await?));
    }
    let queue = connect.partitioned().await?;
    queue.check_key_types().await?;
    Ok(Target::All(queue))
}

/// [`note_if_absent`] for every partition.
pub async fn note_if_target_absent(target: &Target) -> anyhow::Result<()> {
    match target {
        Target::One(q) => note_if_absent(q).await,
        Target::All(q) => {
            if !q.exists().await? {
                eprintln!(
                    "note: no partition of {} exists (none of their keys are in Redis): check --tag, --prefix and --partitions",
                    q.name()
                );
            }
            Ok(())
        }
    }
}
