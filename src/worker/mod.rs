//! The worker runtime: claim jobs, run a handler on each with bounded concurrency, keep
//! their leases alive, and end every lease the right way.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use jobqueue::queue::{ConnectOptions, Queue, Redis};
//! use jobqueue::worker::{JobError, Worker};
//!
//! let redis = Redis::connect(&ConnectOptions::new("redis://127.0.0.1:6379")).await?;
//! let queue = Queue::new(redis, "jq", "emails")?;
//! let worker = Worker::builder(queue).concurrency(8).build()?;
//! worker
//!     .run(|lease, ctx| async move {
//!         let text = std::str::from_utf8(&lease.payload).map_err(JobError::permanent)?;
//!         tokio::select! {
//!             _ = ctx.cancelled() => Err(JobError::interrupted("stopped")),
//!             _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {
//!                 println!("sent {text}");
//!                 Ok(())
//!             }
//!         }
//!     })
//!     .await;
//! # Ok(()) }
//! ```
//!
//! What the runtime promises (see `docs/reliability.md`):
//! - At most `concurrency` leases are held at once; claims ask for as many jobs as there
//!   are free slots, and an idle worker waits on the queue's `wake` list on a connection
//!   of its own, no longer than its poll interval or until the earliest delayed job is
//!   due (so delays and retry backoffs end on time, to within tens of milliseconds).
//! - Unless turned off ([`WorkerBuilder::reaper`]), every worker also reaps the queue now
//!   and then: expired leases of crashed workers go back to pending (or to dead), due
//!   delayed jobs are promoted, the dead set is trimmed. A queue whose workers all run
//!   this heals itself without the operator or `jobqueue reap`; reapers side by side are
//!   safe (each reap call is one atomic script).
//! - Every in-flight lease is renewed in one `extend` call at a third of the visibility
//!   timeout. A renewal that comes back stale means the lease was taken away: the
//!   handler's [`JobContext`] is cancelled and its result is never acked.
//! - Every lease also has a local deadline: the moment the claim or the last successful
//!   renewal was sent, plus the lease length (for leases Redis replays to a claim that
//!   reuses the request id of one whose every reply was lost, the first send of that
//!   request). When it passes (a worker cut off from
//!   Redis cannot renew), the lease is treated as lost the same way, without waiting for
//!   Redis to say so; a handler still running [`WorkerBuilder::lease_grace`] after that
//!   is aborted. Another worker can only get the job after the lease ends in Redis,
//!   which is never before the local deadline: two runs of a job overlap by at most the
//!   grace period (plus the drift between the two clocks' rates).
//! - `Ok` acks (acks of jobs finishing together go in one call), [`JobError::Retry`]
//!   fails with retry, [`JobError::Permanent`] dead-letters, and a panic fails the job with
//!   retry and the text `handler panicked: …`. The worker itself keeps running.
//! - Shutdown (SIGTERM, Ctrl-C, or the shutdown token) stops claiming and waits for the
//!   jobs in flight up to the shutdown deadline. A job whose handler gives up because of
//!   the shutdown ([`JobError::Interrupted`]) or that is aborted at the deadline is
//!   released: back to the front of pending without charging the attempt, so a routine
//!   restart never dead-letters a job on its last attempt. (When the release cannot
//!   reach Redis, the lease expires for the reaper to hand the job out again.)
//! - Redis failures are retried with capped, jittered exponential backoff; the worker
//!   never spins and never exits because Redis went away.
//! - On a partitioned queue ([`JobSource::Partitioned`], see `docs/partitions.md`) each
//!   claim takes jobs from one partition, in rotation; each lease's ack, renewal, fail or
//!   release goes to its partition; an idle worker waits on every partition's `wake`
//!   list; the reaper reaps every partition.

mod backoff;
pub mod exec;
mod lease;
mod runtime;
mod source;
pub mod supervisor;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::queue::{Backoff, Error, MAX_BATCH, Result};

pub use backoff::RetryDelay;
pub use source::JobSource;

/// The most bytes of error text a worker stores in a job's `last_error`.
pub const MAX_ERROR_TEXT: usize = 4096;

/// Why a handler did not finish its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// Try again later (per the queue's backoff policy), until `max_attempts` is reached.
    Retry(String),
    /// Trying again cannot help (a malformed payload, say): dead-letter the job now.
    Permanent(String),
    /// The handler stopped because the worker is shutting down ([`JobContext::shutdown`]):
    /// the job is released without charging the attempt. Outside a shutdown it counts as
    /// [`JobError::Retry`].
    Interrupted(String),
}

impl JobError {
    pub fn retry(error: impl fmt::Display) -> JobError {
        JobError::Retry(error.to_string())
    }

    pub fn permanent(error: impl fmt::Display) -> JobError {
        JobError::Permanent(error.to_string())
    }

    pub fn interrupted(why: impl fmt::Display) -> JobError {
        JobError::Interrupted(why.to_string())
    }

    pub fn message(&self) -> &str {
        match self {
            JobError::Retry(m) | JobError::Permanent(m) | JobError::Interrupted(m) => m,
        }
    }

    pub fn is_permanent(&self) -> bool {
        matches!(self, JobError::Permanent(_))
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// `?` on any error in a handler means "retry": the error and its sources become the
/// job's `last_error`. Use [`JobError::permanent`] for errors that retrying cannot fix.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(error: E) -> JobError {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        JobError::Retry(text)
    }
}

/// What a handler learns about its job besides the lease.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// What the handler reports: progress and result (see [`JobContext::progress`]).
    pub(crate) outcome: Arc<JobOutcome>,
    cancel: CancellationToken,
    shutdown: CancellationToken,
    lost: Arc<AtomicBool>,
    worker_id: Arc<str>,
    queue: Arc<str>,
}

/// A job's progress and result as its handler reports them, read by the renewer (progress,
/// sent with the lease's next extend) and the ack (result).
#[derive(Debug, Default)]
pub(crate) struct JobOutcome {
    /// The latest progress, and whether it still has to be sent.
    pub(crate) progress: std::sync::Mutex<Option<(crate::queue::Progress, bool)>>,
    /// The result: its bytes, or the size of one refused for being over
    /// [`crate::queue::MAX_RESULT`] (the job then fails).
    pub(crate) result: std::sync::Mutex<Option<std::result::Result<Vec<u8>, usize>>>,
    /// Poked when a progress is reported: the renewer sends it within
    /// [`PROGRESS_DELAY`] unless a renewal is due sooner.
    pub(crate) reported: Arc<tokio::sync::Notify>,
}

/// The longest a reported progress waits for the next renewal: sooner, the renewer sends
/// an early one (one `extend` for every lease held, as a regular renewal).
pub const PROGRESS_DELAY: Duration = Duration::from_secs(1);

impl JobContext {
    /// Report how far the job is: a percent (0 to 100) and a message of at most
    /// [`crate::queue::MAX_PROGRESS_TEXT`] bytes. It rides on the lease's next renewal
    /// (at most [`PROGRESS_DELAY`] later), which writes it into the job's hash
    /// (`progress`, `progress_msg`, `progress_at`); a later report replaces one not yet
    /// sent. Refused, changing nothing, when either is out of bounds.
    pub fn progress(
        &self,
        percent: u8,
        message: impl Into<String>,
    ) -> std::result::Result<(), JobError> {
        let p = crate::queue::Progress::new(percent, message).map_err(JobError::permanent)?;
        *self
            .outcome
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((p, true));
        self.outcome.reported.notify_one();
        Ok(())
    }

    /// Store `result` with the job's ack (at most [`crate::queue::MAX_RESULT`] bytes): it
    /// is kept in the job's hash (`result`) as long as the hash is kept. A result over the
    /// bound is refused with an error, and the job then fails with that error (its
    /// attempt is retried or dead-lettered as usual) even if the handler succeeds: a
    /// result is never cut short.
    pub fn set_result(&self, result: impl Into<Vec<u8>>) -> std::result::Result<(), JobError> {
        let result = result.into();
        let mut slot = self
            .outcome
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if result.len() > crate::queue::MAX_RESULT {
            *slot = Some(Err(result.len()));
            return Err(JobError::retry(result_too_large(result.len())));
        }
        *slot = Some(Ok(result));
        Ok(())
    }

    /// Cancelled when the job must stop now: its lease was lost (a renewal came back
    /// stale, or the lease's local deadline passed without a renewal; the result will
    /// not be acked whatever it is), or the worker's shutdown deadline passed.
    pub fn token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Resolves when [`JobContext::token`] is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// True once this worker no longer holds the lease (a stale renewal, or the local
    /// deadline passed).
    pub fn lease_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Cancelled when the worker begins shutting down: finish soon (the job is still
    /// acked if it ends before the deadline).
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The queue's name, `prefix:{tag}`.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}

/// The error of a job whose result is over [`crate::queue::MAX_RESULT`].
pub(crate) fn result_too_large(len: usize) -> String {
    format!(
        "the job's result is {len} bytes, more than the {} a result may hold",
        crate::queue::MAX_RESULT
    )
}

/// Counters of one worker since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Leases claimed.
    pub claimed: u64,
    /// Acks accepted.
    pub acked: u64,
    /// Jobs failed with retry (the queue may still dead-letter them at `max_attempts`).
    pub retried: u64,
    /// Jobs the queue dead-lettered on this worker's fail.
    pub dead: u64,
    /// Handlers that panicked (their jobs are also counted in `retried` or `dead`).
    pub panicked: u64,
    /// Leases found taken away on renewal; their results were not acked.
    pub lost: u64,
    /// Acks or fails the queue refused as stale.
    pub stale: u64,
    /// Jobs still running at the shutdown deadline (aborted, then released).
    pub abandoned: u64,
    /// Leases handed back unfinished at shutdown, without charging an attempt.
    pub released: u64,
    /// Jobs stopped because their cancellation was asked for, and ended as cancelled.
    pub cancelled: u64,
    /// Renewal calls made (each covers every lease in flight).
    pub renewals: u64,
    /// Redis calls that failed (each followed by a backoff and a retry).
    pub redis_errors: u64,
    /// Expired leases (of any worker) this worker's reaper requeued or dead-lettered.
    pub reaped: u64,
    /// Under `replicated` durability: calls (claims, acks, fails) that took effect on the
    /// primary but that fewer replicas than asked confirmed in time.
    pub unconfirmed: u64,
    /// Claims answered by the queue's rate limit with the wait for its next slot (the
    /// worker then claims again when it opens, without polling).
    pub rate_limited: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    claimed: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    panicked: AtomicU64,
    lost: AtomicU64,
    stale: AtomicU64,
    abandoned: AtomicU64,
    released: AtomicU64,
    cancelled: AtomicU64,
    renewals: AtomicU64,
    redis_errors: AtomicU64,
    reaped: AtomicU64,
    unconfirmed: AtomicU64,
    rate_limited: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> WorkerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerStats {
            claimed: get(&self.claimed),
            acked: get(&self.acked),
            retried: get(&self.retried),
            dead: get(&self.dead),
            panicked: get(&self.panicked),
            lost: get(&self.lost),
            stale: get(&self.stale),
            abandoned: get(&self.abandoned),
            released: get(&self.released),
            cancelled: get(&self.cancelled),
            renewals: get(&self.renewals),
            redis_errors: get(&self.redis_errors),
            reaped: get(&self.reaped),
            unconfirmed: get(&self.unconfirmed),
            rate_limited: get(&self.rate_limited),
        }
    }
}

/// A live view of a worker's counters, usable while it runs.
#[derive(Debug, Clone)]
pub struct StatsHandle(Arc<Counters>);

impl StatsHandle {
    pub fn get(&self) -> WorkerStats {
        self.0.snapshot()
    }
}

/// How a worker runs. Built with [`Worker::builder`].
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub concurrency: usize,
    /// Lease length for claims and renewals; the queue's `visibility_timeout` when `None`.
    pub visibility: Option<Duration>,
    /// The longest a job's handler runs before it is stopped and the job failed with
    /// `timed out after …` (`None`: no limit).
    pub timeout: Option<Duration>,
    /// How long shutdown waits for jobs in flight before abandoning them.
    pub shutdown_deadline: Duration,
    /// After a lease is lost, how long its handler has to stop before it is aborted.
    pub lease_grace: Duration,
    pub worker_id: String,
    /// Shut down on SIGTERM and Ctrl-C (a second signal skips the wait).
    pub handle_signals: bool,
    /// When a failed job runs again.
    pub retry_backoff: Backoff,
    /// Most jobs one claim asks for.
    pub max_claim: usize,
    /// First and longest wait after a Redis failure.
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Reap the queue now and then (see [`WorkerBuilder::reaper`]).
    pub reaper: bool,
    /// The longest an idle worker waits for a wake marker before claiming again.
    pub poll_interval: Duration,
    /// How the reaper tunes a queue whose visibility timeout is `auto` (see
    /// [`WorkerBuilder::auto_visibility_timing`]).
    pub tuning: crate::queue::auto_visibility::Timing,
}

/// Builds a [`Worker`].
#[derive(Debug)]
pub struct WorkerBuilder {
    queue: JobSource,
    config: WorkerConfig,
    shutdown: Option<CancellationToken>,
}

impl WorkerBuilder {
    /// Jobs run at once (default 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// Lease length instead of the queue's visibility timeout.
    pub fn visibility(mut self, visibility: Option<Duration>) -> Self {
        self.config.visibility = visibility;
        self
    }

    /// The longest a job runs (default: no limit). Past it the handler's context is
    /// cancelled (an exec command gets SIGTERM, then SIGKILL after its kill grace), the
    /// handler has the [`WorkerBuilder::lease_grace`] to stop before it is aborted, and
    /// the job fails with `timed out after <limit>`, retried or dead-lettered by the
    /// queue's rules.
    pub fn timeout(mut self, limit: Option<Duration>) -> Self {
        self.config.timeout = limit;
        self
    }

    /// How long shutdown waits for jobs in flight (default 30 s).
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.config.shutdown_deadline = deadline;
        self
    }

    /// After a lease is lost (a stale renewal, or its local deadline passed), how long
    /// the handler has to stop once its context is cancelled before the runtime aborts
    /// it (default 5 s). Two runs of a job overlap by at most this long.
    pub fn lease_grace(mut self, grace: Duration) -> Self {
        self.config.lease_grace = grace;
        self
    }

    /// The name recorded in each job's `worker` field (default `hostname-pid`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.config.worker_id = id.into();
        self
    }

    /// Shut down on SIGTERM and Ctrl-C (default true).
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.config.handle_signals = on;
        self
    }

    /// Shut down when this token is cancelled.
    pub fn shutdown_token(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// When jobs failed with [`JobError::Retry`] run again (default: the queue's policy).
    pub fn retry_backoff(mut self, backoff: Backoff) -> Self {
        self.config.retry_backoff = backoff;
        self
    }

    /// The most jobs one claim asks for (default 100, at most the free slots).
    pub fn max_claim(mut self, n: usize) -> Self {
        self.config.max_claim = n;
        self
    }

    /// Backoff after Redis failures: first wait and longest wait (default 100 ms, 10 s).
    pub fn redis_retry(mut self, initial: Duration, max: Duration) -> Self {
        self.config.retry_initial = initial;
        self.config.retry_max = max;
        self
    }

    /// Reap the queue (expired leases back to pending or dead, due delayed jobs promoted,
    /// the dead set trimmed) every half lease or so, with jitter (default true). Leave it
    /// on unless something else reaps and you want the fewest Redis calls: on Kubernetes
    /// the operator reaps too, and reapers side by side are safe.
    pub fn reaper(mut self, on: bool) -> Self {
        self.config.reaper = on;
        self
    }

    /// The longest an idle worker waits for a wake marker before claiming again
    /// (default 1 s). Wake markers and the earliest delayed job's due time end the wait
    /// sooner, so this only bounds how late a job is seen when its marker was missed.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.config.poll_interval = every;
        self
    }

    /// With the reaper on and the queue's visibility timeout `auto` (and not tuned by the
    /// operator), the reaper reconsiders the value every `timing.interval` (one reaper
    /// of the fleet at a time); a lower value waits `timing.stabilization` (defaults
    /// 30 s and 5 min). Shorter timings are for tests and benchmarks.
    pub fn auto_visibility_timing(mut self, timing: crate::queue::auto_visibility::Timing) -> Self {
        self.config.tuning = timing;
        self
    }

    pub fn build(self) -> Result<Worker> {
        let c = &self.config;
        let bad = |what: &'static str, reason: String| Error::InvalidArgument { what, reason };
        if c.concurrency == 0 || c.concurrency > MAX_BATCH {
            return Err(bad(
                "concurrency",
                format!("{} is not between 1 and {MAX_BATCH}", c.concurrency),
            ));
        }
        if c.max_claim == 0 || c.max_claim > MAX_BATCH {
            return Err(bad(
                "max claim",
                format!("{} is not between 1 and {MAX_BATCH}", c.max_claim),
            ));
        }
        if let Some(v) = c.visibility
            && v < Duration::from_millis(30)
        {
            return Err(bad(
                "visibility timeout",
                format!("{v:?} is too short (at least 30ms: leases are renewed at a third of it)"),
            ));
        }
        if c.timeout.is_some_and(|t| t.is_zero()) {
            return Err(bad("timeout", "must be more than 0".to_string()));
        }
        if c.poll_interval < Duration::from_millis(10) {
            return Err(bad(
                "poll interval",
                format!("{:?} is too short (at least 10ms)", c.poll_interval),
            ));
        }
        if c.worker_id.is_empty() || c.worker_id.chars().any(char::is_control) {
            return Err(bad(
                "worker id",
                format!("{:?} must be non-empty printable text", c.worker_id),
            ));
        }
        Ok(Worker {
            queue: self.queue,
            config: self.config,
            shutdown: self.shutdown.unwrap_or_default(),
            counters: Arc::new(Counters::default()),
        })
    }
}

/// Runs a handler over a queue's jobs. See the module documentation.
#[derive(Debug)]
pub struct Worker {
    queue: JobSource,
    config: WorkerConfig,
    shutdown: CancellationToken,
    counters: Arc<Counters>,
}

impl Worker {
    /// A worker on one queue, or on a partitioned queue (`PartitionedQueue`): it then
    /// claims from the partitions in rotation and waits on all of them when idle.
    pub fn builder(queue: impl Into<JobSource>) -> WorkerBuilder {
        WorkerBuilder {
            queue: queue.into(),
            config: WorkerConfig {
                concurrency: 1,
                visibility: None,
                timeout: None,
                shutdown_deadline: Duration::from_secs(30),
                lease_grace: Duration::from_secs(5),
                worker_id: default_worker_id(),
                handle_signals: true,
                retry_backoff: Backoff::Policy,
                max_claim: 100,
                retry_initial: Duration::from_millis(100),
                retry_max: Duration::from_secs(10),
                reaper: true,
                poll_interval: Duration::from_secs(1),
                tuning: Default::default(),
            },
            shutdown: None,
        }
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Cancel it to shut the worker down gracefully.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub fn stats(&self) -> StatsHandle {
        StatsHandle(self.counters.clone())
    }

    /// Run until shut down; returns the worker's counters. A worker whose endpoint turns
    /// out to be a read-only replica (without Sentinel) stops by itself, with the error
    /// logged: [`Worker::try_run`] returns it.
    pub async fn run<H, F>(self, handler: H) -> WorkerStats
    where
        H: Fn(crate::queue::Lease, JobContext) -> F + Send + Sync + 'static,
        F: std::future::Future<Output = std::result::Result<(), JobError>> + Send + 'static,
    {
        runtime::run(self, Arc::new(handler)).await.0
    }

    /// [`Worker::run`], returning the error that stopped the worker when it was not a
    /// shutdown: [`crate::queue::Error::ReadOnly`] when the endpoint (not behind
    /// Sentinel) is a replica, which no retry makes take writes. The jobs in flight then
    /// were stopped as at a shutdown.
    pub async fn try_run<H, F>(self, handler: H) -> crate::queue::Result<WorkerStats>
    where
        H: Fn(crate::queue::Lease, JobContext) -> F + Send + Sync + 'static,
        F: std::future::Future<Output = std::result::Result<(), JobError>> + Send + 'static,
    {
        match runtime::run(self, Arc::new(handler)).await {
            (_, Some(err)) => Err(err),
            (stats, None) => Ok(stats),
        }
    }
}

/// `hostname-pid`: unique per process on a host, and readable in `jobqueue peek`.
pub fn default_worker_id() -> String {
    format!("{}-{}", hostname(), std::process::id())
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".to_string())
}

/// Cut `text` to at most `max` bytes on a character boundary, keeping its start.
pub(crate) fn truncate_text(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn question_mark_retries_with_the_whole_chain() {
        let err: JobError = Outer(std::io::Error::other("inner")).into();
        assert_eq!(err, JobError::Retry("outer: inner".into()));
        assert!(!err.is_permanent());
        assert!(JobError::permanent("bad").is_permanent());
    }

    #[test]
    fn worker_id_names_host_and_process() {
        let id = default_worker_id();
        assert!(id.ends_with(&format!("-{}", std::process::id())), "{id}");
        assert!(id.len() > 2 + std::process::id().to_string().len());
    }

    #[test]
    fn long_error_text_is_cut_on_a_char_boundary() {
        let text = "é".repeat(10);
        let cut = truncate_text(text, 5);
        assert_eq!(cut, "éé");
        assert_eq!(truncate_text("short".into(), 100), "short");
    }
}
