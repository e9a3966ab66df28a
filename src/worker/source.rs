//! Where a worker's jobs come from: one queue, or the partitions of a partitioned queue.
//! The runtime calls the same operations on either; a partitioned source claims in
//! rotation over its partitions and sends each ack, extend and fail to the partition the
//! lease names.

use std::time::Duration;

use tokio::time::Instant;

use crate::queue::{
    Backoff, Claimed, Durability, FailMode, FailOutcome, Lease, LeaseRef, PartitionWaiter,
    PartitionedQueue, Queue, QueueSettings, ReapOutcome, Renewal, Result, Settle, Settled,
    SettledClaim, Unconfirmed,
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

    /// Whether commands follow the primary through failovers (Sentinel): a `READONLY`
    /// reply then means a failover under way, not a replica given by mistake.
    pub(crate) fn follows_primary(&self) -> bool {
        match self {
            JobSource::One(q) => q.redis().is_sentinel(),
            JobSource::Partitioned(q) => q.partitions().iter().all(|p| p.redis().is_sentinel()),
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
        let mut short = None;
        if !acks.is_empty() {
            let refs: Vec<LeaseRef<'_>> = acks.iter().map(|&i| settles[i].lease()).collect();
            let (flags, unconfirmed) = acks_per_partition(q, &refs).await?;
            short = Unconfirmed::worst(short, unconfirmed);
            for (&i, ok) in acks.iter().zip(flags) {
                if ok {
                    settled[i] = Settled::Acked;
                }
            }
        }
        for (i, settle) in settles.iter().enumerate() {
            let (outcome, unconfirmed) = match *settle {
                Settle::Ack(_) => continue,
                Settle::Fail {
                    lease,
                    error,
                    mode,
                    backoff,
                } => {
                    q.partition(lease.partition)?
                        .fail_applied(lease, error, mode, backoff)
                        .await?
                }
                Settle::Release(lease) => {
                    let (released, unconfirmed) =
                        q.partition(lease.partition)?.release_applied(lease).await?;
                    let outcome = if released {
                        FailOutcome::Pending
                    } else {
                        FailOutcome::Stale
                    };
                    (outcome, unconfirmed)
                }
            };
            short = Unconfirmed::worst(short, unconfirmed);
            if outcome != FailOutcome::Stale {
                settled[i] = Settled::Moved(outcome);
            }
        }
        // Under `replicated`, a claim that was not confirmed is logged where it is made
        // and its leases come back all the same.
        let claimed = q.claim_batch(n, worker, visibility).await?;
        let unconfirmed = Unconfirmed::worst(short, claimed.unconfirmed);
        Ok(SettledClaim {
            settled,
            claimed: Claimed {
                unconfirmed,
                ..claimed
            },
        })
    }

    /// Ack many leases; one flag per lease, in order, and whether the replicas confirmed
    /// (see [`Queue::ack_many_applied`]).
    pub(crate) async fn ack_many(
        &self,
        leases: &[LeaseRef<'_>],
    ) -> Result<(Vec<bool>, Option<Unconfirmed>)> {
        match self {
            JobSource::One(q) => q.ack_many_applied(leases).await,
            JobSource::Partitioned(q) => acks_per_partition(q, leases).await,
        }
    }

    pub(crate) async fn renew_many(
        &self,
        leases: &[LeaseRef<'_>],
        by: Option<Duration>,
    ) -> Result<Vec<Renewal>> {
        match self {
            JobSource::One(q) => q.renew_many(leases, by).await,
            JobSource::Partitioned(q) => q.renew_many(leases, by).await,
        }
    }

    /// End a lease whose job's cancellation was asked for ([`Queue::end_cancelled`]).
    pub(crate) async fn end_cancelled(&self, lease: &Lease) -> Result<bool> {
        self.queue_of(lease)?.end_cancelled(lease).await
    }

    /// The lease's queue: the one queue, or the partition the lease names.
    fn queue_of(&self, lease: &Lease) -> Result<&Queue> {
        match self {
            JobSource::One(q) => Ok(q),
            JobSource::Partitioned(q) => q.partition(lease.partition),
        }
    }

    /// Fail a lease; and whether the replicas confirmed (see [`Queue::fail_applied`]).
    pub(crate) async fn fail(
        &self,
        lease: &Lease,
        error: &str,
        mode: FailMode,
        backoff: Backoff,
    ) -> Result<(FailOutcome, Option<Unconfirmed>)> {
        self.queue_of(lease)?
            .fail_applied(lease, error, mode, backoff)
            .await
    }

    /// Release a lease; and whether the replicas confirmed (see
    /// [`Queue::release_applied`]).
    pub(crate) async fn release(&self, lease: &Lease) -> Result<(bool, Option<Unconfirmed>)> {
        self.queue_of(lease)?.release_applied(lease).await
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

/// Acks sent to the partitions the leases name, in parallel: one flag per lease, in
/// order, and the worst shortfall of replica confirmations.
async fn acks_per_partition(
    q: &PartitionedQueue,
    leases: &[LeaseRef<'_>],
) -> Result<(Vec<bool>, Option<Unconfirmed>)> {
    let mut by_partition: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (i, lease) in leases.iter().enumerate() {
        by_partition.entry(lease.partition).or_default().push(i);
    }
    let calls = by_partition.iter().map(|(&p, which)| async move {
        let refs: Vec<LeaseRef<'_>> = which.iter().map(|&i| leases[i]).collect();
        q.partition(p)?.ack_many_applied(&refs).await
    });
    let answers = futures::future::try_join_all(calls).await?;
    let mut flags = vec![false; leases.len()];
    let mut short = None;
    for (which, (answer, unconfirmed)) in by_partition.values().zip(answers) {
        short = Unconfirmed::worst(short, unconfirmed);
        for (&i, ok) in which.iter().zip(answer) {
            flags[i] = ok;
        }
    }
    Ok((flags, short))
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
