//! `PartitionedQueue`: one logical queue over N ordinary queues (see `partitions.rs` for
//! the tags and the routing), so its throughput grows with a Redis Cluster's masters.
//!
//! - Producers: a job goes to the partition its id (or a caller-given partition key)
//!   hashes to; a batch is split per partition and the parts are sent in parallel.
//! - Consumers: claims start at the partition after the one that last gave jobs (at a
//!   random one first) and rotate, so every partition with jobs gets its turn; a
//!   partition whose claim came back empty is skipped until a wake marker or a due
//!   delayed job says to look again, and at the latest for the recheck interval (the
//!   worker's poll interval), busy or idle. Acks, extends and fails go to the partition
//!   each lease names ([`Lease::partition`]).
//! - Waiting: one blocking `BLPOP` per partition, each on a connection of its own, and
//!   only while the consumer is idle. One wait per Cluster node is not possible: a
//!   `BLPOP` over keys of different slots is refused (`CROSSSLOT`) even when one node
//!   serves them all. So a waiting consumer holds N connections (N ≤ `MAX_PARTITIONS`).
//! - Resizing: `PartitionedQueue::resizing(route, drain)` routes new jobs to the `route`
//!   layout and claims from every queue of both layouts, until the queues left out of
//!   the new layout are empty.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::try_join_all;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::client::Queue;
use super::connection::Redis;
use super::error::{Error, Result};
use super::partitions::PartitionLayout;
use super::settings::QueueSettings;
use super::stats::QueueStats;
use super::types::*;

/// A handle on a partitioned queue. Cheap to clone; clones share the connection, the
/// claim rotation and the knowledge of which partitions were found empty.
#[derive(Clone, Debug)]
pub struct PartitionedQueue {
    tag: String,
    name: Arc<str>,
    layout: Arc<PartitionLayout>,
    parts: Arc<Vec<Queue>>,
    /// Where the next claim starts.
    cursor: Arc<AtomicUsize>,
    /// Which partitions were found empty, and until when they are skipped.
    empty: Arc<EmptyMarks>,
}

/// The default recheck interval of a partition found empty: the worker's default poll
/// interval.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(1);

/// Per partition: skipped by claims until a moment (its claim came back empty then),
/// or not. Times are milliseconds after `base` on the monotonic clock, so each mark is
/// one atomic word; 0 means "look at it".
#[derive(Debug)]
struct EmptyMarks {
    base: Instant,
    /// How long a partition found empty is skipped when nothing marks it ready sooner.
    recheck: Duration,
    until: Vec<AtomicU64>,
}

impl EmptyMarks {
    fn new(n: usize, recheck: Duration) -> EmptyMarks {
        EmptyMarks {
            base: Instant::now(),
            recheck,
            until: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether a claim at `now` skips partition `p`.
    fn skips(&self, p: usize, now: Instant) -> bool {
        self.until
            .get(p)
            .is_some_and(|u| self.ms(now) < u.load(Ordering::Relaxed))
    }

    /// Partition `p`'s claim at `now` came back empty: skip it for the recheck interval
    /// (rounded up to the millisecond, so never less).
    fn found_empty(&self, p: usize, now: Instant) {
        if let Some(u) = self.until.get(p) {
            let recheck =
                u64::try_from(self.recheck.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
            let until = self.ms(now).saturating_add(recheck).max(1);
            u.store(until, Ordering::Relaxed);
        }
    }

    fn ready(&self, p: usize) {
        if let Some(u) = self.until.get(p) {
            u.store(0, Ordering::Relaxed);
        }
    }

    fn all_ready(&self) {
        for u in &self.until {
            u.store(0, Ordering::Relaxed);
        }
    }

    fn all_skipped(&self, now: Instant) -> bool {
        (0..self.until.len()).all(|p| self.skips(p, now))
    }
}

/// The stats of every partition and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PartitionedStats {
    pub total: QueueStats,
    pub partitions: Vec<QueueStats>,
}

impl PartitionedQueue {
    /// Queue `prefix:{tag}` with `n` partitions (1 is the unpartitioned queue itself).
    pub fn new(redis: Redis, prefix: &str, tag: &str, n: usize) -> Result<PartitionedQueue> {
        Self::resizing(redis, prefix, tag, n, n)
    }

    /// While a queue is resized: new jobs go to the `route` partitions, claims, stats,
    /// reaps, redrives and purges cover the queues of both the `route` and the `drain`
    /// layouts (see `PartitionLayout`). Shrinking 6 → 3: `resizing(.., 3, 6)` until the
    /// three queues left out are empty, then `new(.., 3)`. Growing 3 → 6: producers use
    /// `new(.., 6)` at once, workers `resizing(.., 6, 3)` or simply `new(.., 6)` when 3
    /// divides 6 (the three old queues are among the six).
    pub fn resizing(
        redis: Redis,
        prefix: &str,
        tag: &str,
        route: usize,
        drain: usize,
    ) -> Result<PartitionedQueue> {
        let layout = PartitionLayout::new(tag, route, drain)?;
        let parts = layout
            .tags
            .iter()
            .map(|t| Queue::new(redis.clone(), prefix, t))
            .collect::<Result<Vec<_>>>()?;
        let name = if parts.len() == 1 {
            parts[0].name().to_string()
        } else {
            format!("{prefix}:{{{tag}}} ({} partitions)", parts.len())
        };
        let n = parts.len();
        Ok(PartitionedQueue {
            tag: tag.to_string(),
            name: Arc::from(name),
            layout: Arc::new(layout),
            parts: Arc::new(parts),
            cursor: Arc::new(AtomicUsize::new(rand::random_range(0..n))),
            empty: Arc::new(EmptyMarks::new(n, DEFAULT_RECHECK)),
        })
    }

    /// Look again at a partition found empty once `every` has passed (default
    /// [`DEFAULT_RECHECK`]; the worker runtime uses its poll interval), whether or not
    /// the consumer was idle meanwhile: a claim never skips a partition for longer, so a
    /// job that went into a partition without its wake marker reaching this consumer
    /// (a busy worker does not wait on the markers, other workers take them) waits at
    /// most that long plus one claim. Wake markers and due delayed jobs make it sooner.
    /// Starts afresh: every partition is looked at by the next claim.
    pub fn recheck_empty(mut self, every: Duration) -> PartitionedQueue {
        self.empty = Arc::new(EmptyMarks::new(self.parts.len(), every));
        self
    }

    /// Apply `f` to every partition's handle (e.g. `|q| q.durability(..)` or
    /// `|q| q.max_payload(..)`).
    pub fn map_partitions(mut self, f: impl Fn(Queue) -> Queue) -> PartitionedQueue {
        let parts: Vec<Queue> = self.parts.iter().cloned().map(f).collect();
        self.parts = Arc::new(parts);
        self
    }

    /// `prefix:{tag} (N partitions)`, or the queue's own name with one partition.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The logical queue's tag (partition tags are derived from it).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    pub fn layout(&self) -> &PartitionLayout {
        &self.layout
    }

    /// Every partition this handle claims from, in `layout().tags` order: each an
    /// ordinary `Queue` (stats, reap, maintain, peek one partition).
    pub fn partitions(&self) -> &[Queue] {
        &self.parts
    }

    pub fn partition(&self, i: usize) -> Result<&Queue> {
        self.parts.get(i).ok_or_else(|| Error::InvalidArgument {
            what: "partition",
            reason: format!(
                "{i} is not a partition of {} (0 to {})",
                self.name,
                self.parts.len() - 1
            ),
        })
    }

    /// How many partitions new jobs are spread over.
    pub fn route_count(&self) -> usize {
        self.layout.route.len()
    }

    /// The partition (index in `partitions()`) a job with this id or partition key goes to.
    pub fn partition_for(&self, key: &[u8]) -> usize {
        self.layout.route_of(key)
    }

    /// Enqueue one job in the partition of its id (a new id is made here when it has none).
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let mut out = self.enqueue_many(vec![job]).await?;
        out.pop().ok_or_else(|| Error::Protocol {
            queue: self.name.to_string(),
            op: "enqueue",
            detail: "empty reply".into(),
        })
    }

    /// Enqueue many jobs, each in the partition of its id (of its unique key when it has
    /// one: a key is held in one partition); the partitions' parts are sent
    /// in parallel. One entry per job, in order. An error of any part fails the call
    /// (other parts may have been enqueued: enqueue again with the same ids, which
    /// deduplicates).
    pub async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let jobs: Vec<NewJob> = jobs
            .into_iter()
            .map(|mut job| {
                if job.id.is_none() {
                    job.id = Some(new_job_id().into());
                }
                job
            })
            .collect();
        // A job with a unique key goes to its key's partition, where the key's lock is.
        let route: Vec<usize> = jobs
            .iter()
            .map(|j| match &j.unique.key {
                Some(key) => self.partition_for(key),
                None => self.partition_for(j.id.as_ref().map_or(&b""[..], JobId::as_bytes)),
            })
            .collect();
        self.enqueue_routed(jobs, route).await
    }

    /// Enqueue jobs all in the partition of `key`: jobs of one key are claimed in the
    /// order they were enqueued (as in an unpartitioned queue). Deduplication by id holds
    /// among jobs enqueued with the same key.
    pub async fn enqueue_keyed(&self, key: &[u8], jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let p = self.partition_for(key);
        self.parts[p].enqueue_many(jobs).await
    }

    async fn enqueue_routed(&self, jobs: Vec<NewJob>, route: Vec<usize>) -> Result<Vec<Enqueued>> {
        let n = jobs.len();
        let mut per: Vec<(Vec<usize>, Vec<NewJob>)> = vec![Default::default(); self.parts.len()];
        for (at, (job, p)) in jobs.into_iter().zip(route).enumerate() {
            per[p].0.push(at);
            per[p].1.push(job);
        }
        let sends = per
            .into_iter()
            .enumerate()
            .filter(|(_, (at, _))| !at.is_empty())
            .map(|(p, (at, jobs))| async move {
                let done = self.parts[p].enqueue_many(jobs).await?;
                Ok::<_, Error>((at, done))
            });
        let mut out: Vec<Option<Enqueued>> = vec![None; n];
        for (at, done) in try_join_all(sends).await? {
            for (i, e) in at.into_iter().zip(done) {
                out[i] = Some(e);
            }
        }
        out.into_iter()
            .map(|e| {
                e.ok_or_else(|| Error::Protocol {
                    queue: self.name.to_string(),
                    op: "enqueue",
                    detail: "a partition's reply was shorter than its jobs".into(),
                })
            })
            .collect()
    }

    /// Claim up to `n` jobs from one partition: the first, in rotation from the partition
    /// after the last one that gave jobs, that has any. A partition found empty is
    /// skipped until `mark_ready` or `mark_all_ready`, or until the recheck interval
    /// ([`PartitionedQueue::recheck_empty`]) has passed since; an empty result means
    /// every partition was found empty lately (then wait, e.g. with `waiter`).
    pub async fn claim(
        &self,
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Vec<Lease>> {
        Ok(self.claim_batch(n, worker, visibility).await?.leases)
    }

    /// [`PartitionedQueue::claim`], with [`Claimed::first_sent`] when the partition's
    /// claim carried the request id of an earlier claim whose reply was lost (the leases
    /// may be that claim's: their local deadline counts from its first send). `more` is
    /// false.
    pub async fn claim_batch(
        &self,
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Claimed> {
        let count = self.parts.len();
        let start = self.cursor.load(Ordering::Relaxed) % count;
        // A partition that fails (its node down) does not stop the others: its error is
        // returned only when no other partition gave jobs.
        let mut failed = None;
        for step in 0..count {
            let p = (start + step) % count;
            if self.empty.skips(p, Instant::now()) {
                continue;
            }
            let mut claimed = match self.parts[p].claim_rounds(n, worker, visibility).await {
                Ok(claimed) => claimed,
                Err(err) => {
                    failed.get_or_insert(err);
                    continue;
                }
            };
            if claimed.leases.is_empty() {
                self.empty.found_empty(p, Instant::now());
                continue;
            }
            self.cursor.store(p + 1, Ordering::Relaxed);
            for lease in &mut claimed.leases {
                lease.partition = p;
            }
            return Ok(claimed);
        }
        match failed {
            Some(err) => {
                // The next claim starts after the partition that failed first.
                self.cursor.store(start + 1, Ordering::Relaxed);
                Err(err)
            }
            None => Ok(Claimed::default()),
        }
    }

    /// Partition `p` may have jobs again (a wake marker came from it).
    pub fn mark_ready(&self, p: usize) {
        self.empty.ready(p);
    }

    /// Look at every partition again at the next claim (after a poll interval passed, or
    /// a delayed job came due).
    pub fn mark_all_ready(&self) {
        self.empty.all_ready();
    }

    /// Whether the next claim would skip every partition: each was found empty less than
    /// the recheck interval ago and not marked ready since.
    pub fn all_empty(&self) -> bool {
        self.empty.all_skipped(Instant::now())
    }

    /// Ack many leases, each in its partition (the partitions' calls in parallel); one
    /// flag per lease, in order.
    pub async fn ack_many(&self, leases: &[LeaseRef<'_>]) -> Result<Vec<bool>> {
        self.per_partition(leases, |q, refs| async move { q.ack_many(&refs).await })
            .await
    }

    pub async fn ack<'a>(&self, lease: impl Into<LeaseRef<'a>>) -> Result<bool> {
        Ok(self.ack_many(&[lease.into()]).await?.first() == Some(&true))
    }

    /// Extend many leases, each in its partition; one result per lease, in order.
    pub async fn extend_many(
        &self,
        leases: &[LeaseRef<'_>],
        by: Option<Duration>,
    ) -> Result<Vec<Option<i64>>> {
        self.per_partition(
            leases,
            |q, refs| async move { q.extend_many(&refs, by).await },
        )
        .await
    }

    /// [`Queue::renew_many`], each lease in its partition; one answer per lease, in order.
    pub async fn renew_many(
        &self,
        leases: &[LeaseRef<'_>],
        by: Option<Duration>,
    ) -> Result<Vec<Renewal>> {
        self.per_partition(
            leases,
            |q, refs| async move { q.renew_many(&refs, by).await },
        )
        .await
    }

    /// Fail a lease in its partition (a retry stays in that partition).
    pub async fn fail<'a>(
        &self,
        lease: impl Into<LeaseRef<'a>>,
        error: &str,
        mode: FailMode,
        backoff: Backoff,
    ) -> Result<FailOutcome> {
        let lease = lease.into();
        self.partition(lease.partition)?
            .fail(lease, error, mode, backoff)
            .await
    }

    /// Hand back an unfinished lease in its partition (see `Queue::release`).
    pub async fn release<'a>(&self, lease: impl Into<LeaseRef<'a>>) -> Result<bool> {
        let lease = lease.into();
        self.partition(lease.partition)?.release(lease).await
    }

    /// Split `leases` by partition, run `op` on each part in parallel, and put the
    /// results back in the order of `leases`.
    async fn per_partition<'a, T, F, Fut>(&self, leases: &[LeaseRef<'a>], op: F) -> Result<Vec<T>>
    where
        F: Fn(Queue, Vec<LeaseRef<'a>>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>>>,
    {
        let mut per: Vec<(Vec<usize>, Vec<LeaseRef<'a>>)> =
            vec![Default::default(); self.parts.len()];
        for (at, lease) in leases.iter().enumerate() {
            self.partition(lease.partition)?;
            per[lease.partition].0.push(at);
            per[lease.partition].1.push(*lease);
        }
        let calls = per
            .into_iter()
            .enumerate()
            .filter(|(_, (at, _))| !at.is_empty())
            .map(|(p, (at, refs))| {
                let call = op(self.parts[p].clone(), refs);
                async move { Ok::<_, Error>((at, call.await?)) }
            });
        let mut out: Vec<Option<T>> = (0..leases.len()).map(|_| None).collect();
        for (at, results) in try_join_all(calls).await? {
            for (i, r) in at.into_iter().zip(results) {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| {
                r.ok_or_else(|| Error::Protocol {
                    queue: self.name.to_string(),
                    op: "ack/extend",
                    detail: "a partition's reply was shorter than its leases".into(),
                })
            })
            .collect()
    }

    /// Every partition's stats (read in parallel) and their sum.
    pub async fn stats(&self) -> Result<PartitionedStats> {
        let partitions = try_join_all(self.parts.iter().map(|q| q.stats())).await?;
        let mut total = QueueStats::default();
        for s in &partitions {
            add_stats(&mut total, s);
        }
        Ok(PartitionedStats { total, partitions })
    }

    /// One reap call of `batch` on every partition, summed.
    pub async fn reap(&self, batch: usize) -> Result<ReapOutcome> {
        let outcomes = try_join_all(self.parts.iter().map(|q| q.reap(batch))).await?;
        Ok(sum_reaps(outcomes))
    }

    /// `Queue::reap_expired` on every partition (in parallel), summed.
    pub async fn reap_expired(&self, batch: usize, max_calls: usize) -> Result<ReapOutcome> {
        let outcomes =
            try_join_all(self.parts.iter().map(|q| q.reap_expired(batch, max_calls))).await?;
        Ok(sum_reaps(outcomes))
    }

    /// Load every script ahead of the first calls, on the node(s) of every partition
    /// (see `Queue::load_scripts`).
    pub async fn load_scripts(&self) -> Result<()> {
        try_join_all(self.parts.iter().map(|q| q.load_scripts())).await?;
        Ok(())
    }

    /// Write `settings` to every partition's `meta`.
    pub async fn configure(&self, settings: &QueueSettings) -> Result<()> {
        try_join_all(self.parts.iter().map(|q| q.configure(settings))).await?;
        Ok(())
    }

    /// The settings of the first routed partition (all partitions are configured alike).
    pub async fn settings(&self) -> Result<QueueSettings> {
        self.parts[self.layout.route[0]].settings().await
    }

    /// Check every partition's keys' types (see `Queue::check_key_types`).
    pub async fn check_key_types(&self) -> Result<()> {
        try_join_all(self.parts.iter().map(|q| q.check_key_types())).await?;
        Ok(())
    }

    /// Whether any partition has any key.
    pub async fn exists(&self) -> Result<bool> {
        let each = try_join_all(self.parts.iter().map(|q| q.exists())).await?;
        Ok(each.into_iter().any(|e| e))
    }

    /// The earliest due time of a delayed job over all partitions (see
    /// `Queue::next_due_in`).
    pub async fn next_due_in(&self) -> Result<Option<Duration>> {
        let each = try_join_all(self.parts.iter().map(|q| q.next_due_in())).await?;
        Ok(each.into_iter().flatten().min())
    }

    /// Redrive dead jobs. `Ids`: each id in whichever partition holds it. `Oldest(n)`:
    /// the n oldest deaths over all partitions.
    pub async fn redrive(&self, selection: &Selection) -> Result<u64> {
        self.dead_op(selection, false).await
    }

    /// Purge dead jobs; the selection as in `redrive`.
    pub async fn purge(&self, selection: &Selection) -> Result<u64> {
        self.dead_op(selection, true).await
    }

    async fn dead_op(&self, selection: &Selection, purge: bool) -> Result<u64> {
        let per: Vec<Option<Selection>> = match selection {
            // The scripts skip ids that are not in their partition's dead set.
            Selection::Ids(_) | Selection::IdBytes(_) => {
                vec![Some(selection.clone()); self.parts.len()]
            }
            Selection::Oldest(n) => self
                .oldest_dead(*n)
                .await?
                .into_iter()
                .map(|ids| (!ids.is_empty()).then_some(Selection::IdBytes(ids)))
                .collect(),
        };
        let calls = self
            .parts
            .iter()
            .zip(per)
            .filter_map(|(q, sel)| sel.map(|s| (q, s)))
            .map(|(q, s)| async move {
                if purge {
                    q.purge(&s).await
                } else {
                    q.redrive(&s).await
                }
            });
        Ok(try_join_all(calls).await?.into_iter().sum())
    }

    /// The ids of the `n` oldest dead jobs over all partitions, per partition.
    async fn oldest_dead(&self, n: usize) -> Result<Vec<Vec<Vec<u8>>>> {
        let each = try_join_all(self.parts.iter().map(|q| q.dead_ids(0, n))).await?;
        let mut all: Vec<(i64, usize, JobId)> = each
            .into_iter()
            .enumerate()
            .flat_map(|(p, ids)| ids.into_iter().map(move |(id, at)| (at, p, id)))
            .collect();
        all.sort_by_key(|(at, p, _)| (*at, *p));
        let mut per = vec![Vec::new(); self.parts.len()];
        for (_, p, id) in all.into_iter().take(n) {
            // The id's bytes: its escaped text would name another job.
            per[p].push(id.as_bytes().to_vec());
        }
        Ok(per)
    }

    /// A waiter for idle consumers of this handle: one `BLPOP` per partition on a
    /// connection of its own, blocking at most `block` at a time and only while someone
    /// waits. Its tasks end when it is dropped.
    pub fn waiter(&self, block: Duration) -> PartitionWaiter {
        let (waiting, rx) = watch::channel(false);
        let woke = Arc::new(Notify::new());
        let tasks = self
            .parts
            .iter()
            .enumerate()
            .map(|(p, q)| {
                tokio::spawn(blpop_loop(
                    self.clone(),
                    q.clone(),
                    p,
                    block,
                    rx.clone(),
                    woke.clone(),
                ))
            })
            .collect();
        PartitionWaiter {
            queue: self.clone(),
            waiting,
            woke,
            tasks,
        }
    }

    /// A consumer for `worker`: `next_jobs` claims in rotation and waits on `waiter`.
    pub fn consumer(&self, worker: impl Into<String>) -> PartitionedConsumer {
        PartitionedConsumer {
            queue: self.clone(),
            worker: worker.into(),
            visibility: None,
            waiter: None,
        }
    }
}

/// Waits for a wake marker on any partition (see `PartitionedQueue::waiter`).
#[derive(Debug)]
pub struct PartitionWaiter {
    queue: PartitionedQueue,
    waiting: watch::Sender<bool>,
    woke: Arc<Notify>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for PartitionWaiter {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl PartitionWaiter {
    /// Wait until a marker comes from some partition (which is then marked ready), or
    /// `wait` passes (every partition is then marked ready, a safety net for markers
    /// other workers took). A marker taken while nobody waited was noted already: the
    /// wait ends at once.
    pub async fn wait(&self, wait: Duration) {
        self.waiting.send_replace(true);
        let woke = tokio::time::timeout(wait, self.woke.notified()).await;
        self.waiting.send_replace(false);
        if woke.is_err() {
            self.queue.mark_all_ready();
        }
    }
}

/// One partition's wait: while someone waits, BLPOP its `wake` list on a connection of
/// its own; a marker marks the partition ready and wakes the waiter. A failure drops the
/// connection and tries again after a pause (the waiter's timeout covers the gap).
async fn blpop_loop(
    queue: PartitionedQueue,
    part: Queue,
    p: usize,
    block: Duration,
    mut waiting: watch::Receiver<bool>,
    woke: Arc<Notify>,
) {
    let mut conn = None;
    let secs = format!("{:.3}", block.as_secs_f64().max(0.001));
    loop {
        if waiting.wait_for(|w| *w).await.is_err() {
            return;
        }
        if conn.is_none() {
            match part.redis().dedicated(block).await {
                Ok(c) => conn = Some(c),
                Err(_) => {
                    tokio::time::sleep(block.min(Duration::from_secs(1))).await;
                    continue;
                }
            }
        }
        let c = conn.as_mut().expect("set above");
        let reply: redis::RedisResult<Option<(String, String)>> = redis::cmd("BLPOP")
            .arg(&part.keys().wake)
            .arg(&secs)
            .query_async(c)
            .await;
        match reply {
            Ok(Some(_)) => {
                queue.mark_ready(p);
                woke.notify_one();
            }
            Ok(None) => {}
            Err(_) => {
                conn = None;
                tokio::time::sleep(block.min(Duration::from_secs(1))).await;
            }
        }
    }
}

/// Claims jobs of a partitioned queue for one worker, waiting on every partition's
/// `wake` list when all are empty.
pub struct PartitionedConsumer {
    queue: PartitionedQueue,
    worker: String,
    visibility: Option<Duration>,
    waiter: Option<PartitionWaiter>,
}

/// How long one BLPOP waits at most, and how often every partition is looked at again
/// while idle (markers other workers took are not missed for longer).
const WAKE_WAIT: Duration = Duration::from_secs(1);

/// The shortest wait for a due delayed job.
const MIN_DUE_WAIT: Duration = Duration::from_millis(5);

impl PartitionedConsumer {
    pub fn visibility(mut self, visibility: Option<Duration>) -> PartitionedConsumer {
        self.visibility = visibility;
        self
    }

    pub fn worker(&self) -> &str {
        &self.worker
    }

    /// Claim up to `n` jobs (from one partition), waiting up to `timeout` for one.
    pub async fn next_jobs(&mut self, n: usize, timeout: Duration) -> Result<Vec<Lease>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let leases = self.queue.claim(n, &self.worker, self.visibility).await?;
            if !leases.is_empty() {
                return Ok(leases);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(leases);
            }
            let due_in = self.queue.next_due_in().await.ok().flatten();
            let wait = match due_in {
                Some(d) => (d + Duration::from_millis(1)).max(MIN_DUE_WAIT),
                None => WAKE_WAIT,
            };
            let waiter = self
                .waiter
                .get_or_insert_with(|| self.queue.waiter(WAKE_WAIT));
            waiter.wait(wait.min(left).min(WAKE_WAIT)).await;
        }
    }

    pub async fn next_job(&mut self, timeout: Duration) -> Result<Option<Lease>> {
        Ok(self.next_jobs(1, timeout).await?.pop())
    }
}

fn sum_reaps(outcomes: Vec<ReapOutcome>) -> ReapOutcome {
    let mut total = ReapOutcome::default();
    for o in outcomes {
        total += o;
    }
    total
}

/// Add `s`'s counts, counters and histogram to `total`.
pub fn add_stats(total: &mut QueueStats, s: &QueueStats) {
    let QueueStats {
        pending,
        pending_by_priority,
        processing,
        expired,
        delayed,
        due,
        dead,
        orphaned,
        oldest_pending_ms,
        time_ms,
        enqueued,
        claimed,
        acked,
        failed,
        retried,
        released,
        reaped,
        dead_lettered,
        dead_trimmed,
        stale,
        unknown,
        redriven,
        purged,
        orphans,
        set_aside,
        restored,
        restored_purged,
        wrong_type,
        orphans_purged,
        promoted,
        replayed,
        rate_limited,
        rate_deferred,
        run_now,
        deleted,
        cancelled,
        paused,
        paused_at,
        histogram,
        own,
    } = s;
    total.pending += pending;
    for (t, p) in total
        .pending_by_priority
        .iter_mut()
        .zip(pending_by_priority)
    {
        *t += p;
    }
    total.processing += processing;
    total.expired += expired;
    total.delayed += delayed;
    total.due += due;
    total.dead += dead;
    total.orphaned += orphaned;
    // The queue's latency is its oldest partition's; the clock, the latest reading.
    total.oldest_pending_ms = match (total.oldest_pending_ms, *oldest_pending_ms) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    total.time_ms = total.time_ms.max(*time_ms);
    total.enqueued += enqueued;
    total.claimed += claimed;
    total.acked += acked;
    total.failed += failed;
    total.retried += retried;
    total.released += released;
    total.reaped += reaped;
    total.dead_lettered += dead_lettered;
    total.dead_trimmed += dead_trimmed;
    total.stale += stale;
    total.unknown += unknown;
    total.redriven += redriven;
    total.purged += purged;
    total.orphans += orphans;
    total.set_aside += set_aside;
    total.restored += restored;
    total.restored_purged += restored_purged;
    total.wrong_type += wrong_type;
    total.orphans_purged += orphans_purged;
    total.promoted += promoted;
    total.replayed += replayed;
    total.rate_limited += rate_limited;
    total.rate_deferred += rate_deferred;
    total.run_now += run_now;
    total.deleted += deleted;
    total.cancelled += cancelled;
    // a queue with one partition paused is reported paused (since its earliest pause)
    total.paused |= paused;
    total.paused_at = match (total.paused_at, *paused_at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    for (b, n) in &histogram.buckets {
        *total.histogram.buckets.entry(*b).or_default() += n;
    }
    total.own.reaped += own.reaped;
    total.own.stale += own.stale;
    for (b, n) in &own.histogram.buckets {
        *total.own.histogram.buckets.entry(*b).or_default() += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_partition_found_empty_is_skipped_for_the_recheck_interval_only() {
        let marks = EmptyMarks::new(3, 200 * MS);
        let t = marks.base + 5 * MS;
        assert!(!marks.skips(1, t), "not found empty yet");
        marks.found_empty(1, t);
        assert!(marks.skips(1, t));
        assert!(marks.skips(1, t + 199 * MS));
        assert!(
            !marks.skips(1, t + 200 * MS),
            "looked at again after the interval"
        );
        assert!(
            !marks.skips(0, t) && !marks.skips(2, t),
            "only that partition"
        );
        // Found empty again: skipped for another interval from then.
        marks.found_empty(1, t + 300 * MS);
        assert!(marks.skips(1, t + 499 * MS));
        assert!(!marks.skips(1, t + 500 * MS));
    }

    #[test]
    fn a_wake_marker_ends_the_skip_sooner() {
        let marks = EmptyMarks::new(2, Duration::from_secs(3600));
        let t = marks.base;
        marks.found_empty(0, t);
        marks.found_empty(1, t);
        assert!(marks.all_skipped(t + MS));
        marks.ready(1);
        assert!(!marks.skips(1, t + MS) && marks.skips(0, t + MS));
        assert!(!marks.all_skipped(t + MS));
        marks.all_ready();
        assert!(!marks.skips(0, t + MS));
    }

    #[test]
    fn a_sub_millisecond_recheck_still_skips_until_it_passed() {
        let marks = EmptyMarks::new(1, Duration::from_micros(1500));
        let t = marks.base + 10 * MS;
        marks.found_empty(0, t);
        assert!(marks.skips(0, t + MS));
        assert!(!marks.skips(0, t + 2 * MS));
        // Found empty at the very start of the clock: still skipped (0 means ready).
        let marks = EmptyMarks::new(1, Duration::ZERO);
        marks.found_empty(0, marks.base);
        assert!(marks.skips(0, marks.base));
        assert!(!marks.skips(0, marks.base + MS));
    }
}
