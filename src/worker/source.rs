//! Where a worker's jobs come from: one queue, or the partitions of a partitioned queue.
//! The runtime calls the same operations on either; a partitioned source claims in
//! rotation over its partitions and sends each ack, extend and fail to the partition the
//! lease names.

use std::time::Duration;

use tokio::time::Instant;

use crate::queue::{
    Backoff, Durability, FailMode, FailOutcome, Lease, LeaseRef, PartitionWaiter, PartitionedQueue,
    Queue, QueueSettings, ReapOutcome, Result, Settle, Settled, SettledClaim,
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

    /// The durability the queue publishes in `meta` (the operator's `spec.durability`);
    /// a partitioned queue's is read from its first partition (the operator publishes
    /// the same setting to every partition).
    pub async fn published_durability(&self) -> Result<Option<Durability>> {
        match self {
            JobSource::One(q) => q.published_durability().await,
            JobSource::Partitioned(q) => q.partition(0)?.published_durability().await,
        }
    }

    /// The same source, its writes made with `durability`.
    pub fn with_durability(self, durability: Durability) -> JobSource {
        match self {
            JobSource::One(q) => JobSource::One(q.durability(durability)),
            JobSource::Partitioned(q) => {
                JobSource::Partitioned(q.map_partitions(|p| p.durability(durability)))
            }
        }
    }

    /// End the leases of `settles` and claim up to `n` jobs. One queue: one
    /// `settle_claim` call (sent again unchanged by the caller, it settles nothing twice).
    /// A partitioned queue: the endings go to their partitions (acks batched per
    /// partition, in parallel), then a claim in rotation, so a busy partitioned worker
    /// pays two round trips per batch; a resend after a lost reply finds the endings
    /// already made and reports them stale (nothing is applied twice: each needs the
    /// lease, which the first one ended). Its claim may carry the request id of an
    /// earlier claim whose every reply was lost and get that claim's leases back
    /// ([`crate::queue::Claimed::first_sent`] then says when it was first sent).
    pub(crate) async fn settle_claim(
        &self,
        request: &str,
        first_sent: Instant,
        settles: &[Settle<'_>],
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<SettledClaim> {
        let q = match self {
            JobSource::One(q) => {
                return q
                    .settle_claim_since(request, first_sent, settles, n, worker, visibility)
                    .await;
            }
            JobSource::Partitioned(q) => q,
        };
        let mut settled = vec![Settled::Stale; settles.len()];
        let acks: Vec<usize> = (0..settles.len())
            .filter(|&i| matches!(settles[i], Settle::Ack(_)))
            .collect();
        if !acks.is_empty() {
            let refs: Vec<LeaseRef<'_>> = acks.iter().map(|&i| settles[i].lease()).collect();
            for (&i, ok) in acks.iter().zip(q.ack_many(&refs).await?) {
                if ok {
                    settled[i] = Settled::Acked;
                }
            }
        }
        for (i, settle) in settles.iter().enumerate() {
            let outcome = match *settle {
                Settle::Ack(_) => continue,
                Settle::Fail {
                    lease,
                    error,
                    mode,
                    backoff,
                } => q.fail(lease, error, mode, backoff).await?,
                Settle::Release(lease) => {
                    if q.release(lease).await? {
                        FailOutcome::Pending
                    } else {
                        FailOutcome::Stale
                    }
                }
            };
            if outcome != FailOutcome::Stale {
                settled[i] = Settled::Moved(outcome);
            }
        }
        let claimed = q.claim_batch(n, worker, visibility).await?;
        Ok(SettledClaim { settled, claimed })
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
