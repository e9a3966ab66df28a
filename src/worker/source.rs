//! Where a worker's jobs come from: one queue, or the partitions of a partitioned queue.
//! The runtime calls the same operations on either; a partitioned source claims in
//! rotation over its partitions and sends each ack, extend and fail to the partition the
//! lease names.

use std::time::Duration;

use crate::queue::{
    Backoff, FailMode, FailOutcome, Lease, LeaseRef, PartitionWaiter, PartitionedQueue, Queue,
    QueueSettings, ReapOutcome, Result,
};

/// One queue or N partitions (see `crate::queue::PartitionedQueue`).
#[derive(Debug, Clone)]
pub enum JobSource {
    One(Queue),
    Partitioned(PartitionedQueue),
}

impl From<Queue> for JobSource {
    fn from(queue: Queue) -> Self {
        JobSource::One(queue)
    }
}

impl From<PartitionedQueue> for JobSource {
    fn from(queue: PartitionedQueue) -> Self {
        JobSource::Partitioned(queue)
    }
}

impl JobSource {
    pub fn name(&self) -> &str {
        match self {
            JobSource::One(q) => q.name(),
            JobSource::Partitioned(q) => q.name(),
        }
    }

    pub(crate) async fn claim(
        &self,
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Vec<Lease>> {
        match self {
            JobSource::One(q) => q.claim(n, worker, visibility).await,
            JobSource::Partitioned(q) => q.claim(n, worker, visibility).await,
        }
    }

    pub(crate) async fn ack_many(&self, leases: &[LeaseRef<'_>]) -> Result<Vec<bool>> {
        match self {
            JobSource::One(q) => q.ack_many(leases).await,
            JobSource::Partitioned(q) => q.ack_many(leases).await,
        }
    }

    pub(crate) async fn extend_many(
        &self,
        leases: &[LeaseRef<'_>],
        by: Option<Duration>,
    ) -> Result<Vec<Option<i64>>> {
        match self {
            JobSource::One(q) => q.extend_many(leases, by).await,
            JobSource::Partitioned(q) => q.extend_many(leases, by).await,
        }
    }

    pub(crate) async fn fail(
        &self,
        lease: &Lease,
        error: &str,
        mode: FailMode,
        backoff: Backoff,
    ) -> Result<FailOutcome> {
        match self {
            JobSource::One(q) => q.fail(lease, error, mode, backoff).await,
            JobSource::Partitioned(q) => q.fail(lease, error, mode, backoff).await,
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        match self {
            JobSource::One(q) => q.release(lease).await,
            JobSource::Partitioned(q) => q.release(lease).await,
        }
    }

    pub(crate) async fn settings(&self) -> Result<QueueSettings> {
        match self {
            JobSource::One(q) => q.settings().await,
            JobSource::Partitioned(q) => q.settings().await,
        }
    }

    pub(crate) async fn next_due_in(&self) -> Result<Option<Duration>> {
        match self {
            JobSource::One(q) => q.next_due_in().await,
            JobSource::Partitioned(q) => q.next_due_in().await,
        }
    }

    pub(crate) async fn reap_expired(&self, batch: usize, max_calls: usize) -> Result<ReapOutcome> {
        match self {
            JobSource::One(q) => q.reap_expired(batch, max_calls).await,
            JobSource::Partitioned(q) => q.reap_expired(batch, max_calls).await,
        }
    }
}

/// The idle wait of a partitioned source: one BLPOP per partition (see
/// `PartitionedQueue::waiter`), made on first use.
#[derive(Default)]
pub(crate) struct PartitionWake {
    waiter: Option<PartitionWaiter>,
}

impl PartitionWake {
    /// Wait for a marker from any partition, up to `block`, or only `until` when given.
    pub(crate) async fn wait(
        &mut self,
        queue: &PartitionedQueue,
        block: Duration,
        until: Option<Duration>,
    ) {
        let waiter = self.waiter.get_or_insert_with(|| queue.waiter(block));
        waiter.wait(until.unwrap_or(block).min(block)).await;
    }
}
