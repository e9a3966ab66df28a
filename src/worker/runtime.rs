//! The worker's tasks: the claim loop and the wait for jobs in flight at shutdown
//! ([`run`] strings them together), one task per job (its handler, then the report of
//! its outcome: a success straight to the claim loop, the rest to the completer), the
//! completer (acks, fails and releases), the renewer, the deadline watcher (each lease's local
//! deadline, see [`super::lease`]), the reaper (unless turned off), and the signal
//! listener (on [`crate::shutdown`]).
//!
//! Slots are semaphore permits. A permit travels with its job from the claim to the end
//! of its lease (the ack or fail reply), so the worker never holds more than
//! `concurrency` leases.

use std::any::Any;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{AbortHandle, Abortable, join_all};
use redis::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::lease::{self, Step};
use super::source::{JobSource, PartitionWake};
use super::{
    Counters, JobContext, JobError, JobOutcome, MAX_ERROR_TEXT, PROGRESS_DELAY, RetryDelay, Worker,
    WorkerStats,
};
use crate::duration;
use crate::queue::auto_visibility::Timing;
use crate::queue::{
    Dedicated, Error, FailMode, FailOutcome, JobId, Lease, LeaseRef, MAX_BATCH, Queue, Renewal,
    Result, Settle, Settled, Unconfirmed, new_token, within_window,
};
use crate::shutdown::Signals;

/// The shortest idle wait for a delayed job that is due (or nearly): a job the claim
/// could not promote never turns the wait into a busy loop.
const MIN_DUE_WAIT: Duration = Duration::from_millis(5);

/// One reaper pass: at most this many script calls of this many entries each, so a
/// worker's reaper never holds Redis for long (the next pass goes on).
const REAP_BATCH: usize = 100;
const REAP_CALLS: usize = 10;

/// After the shutdown deadline, how long to wait for aborted jobs to unwind.
const ABORT_GRACE: Duration = Duration::from_secs(2);

/// A lease this worker holds.
struct InFlight {
    id: JobId,
    cancel: CancellationToken,
    lost: Arc<AtomicBool>,
    /// The handler finished and its ack or fail is on its way: a stale renewal now only
    /// means the lease already ended.
    completing: bool,
    abort: Option<AbortHandle>,
    /// The lease's local deadline ([`lease::deadline`]), moved by each renewal.
    deadline: Instant,
    /// The job's own lease length ([`Lease::visibility`]): Redis leases it for this long
    /// at every renewal whatever the call asks, so its deadline moves by this. `None`:
    /// the worker's lease length.
    own_len: Option<Duration>,
    /// When the handler was cancelled because the lease was lost, or because the job's
    /// cancellation was asked for (`jobqueue cancel`).
    lost_at: Option<Instant>,
    /// The job's cancellation was asked for: it ends as cancelled, whatever its handler
    /// made of it.
    cancelled: Arc<AtomicBool>,
    /// The partition the lease is held in (0 unless the queue is partitioned).
    partition: usize,
    /// The handler's progress and result.
    outcome: Arc<JobOutcome>,
}

impl InFlight {
    /// The lease is gone: cancel the handler, never ack its result.
    fn mark_lost(&mut self, now: Instant) {
        self.lost.store(true, Ordering::SeqCst);
        self.lost_at = Some(now);
        self.cancel.cancel();
    }

    fn is_lost(&self, now: Instant) -> bool {
        self.lost.load(Ordering::SeqCst) || (!self.completing && now >= self.deadline)
    }
}

/// Everything the worker's tasks share.
struct Shared {
    queue: JobSource,
    worker_id: Arc<str>,
    queue_name: Arc<str>,
    visibility: Option<Duration>,
    /// The longest a job's handler runs (`None`: no limit).
    timeout: Option<Duration>,
    /// The lease length claims and renewals ask for, in ms: the worker's own, else the
    /// queue's setting as last read. Asked for explicitly, so the local deadlines match.
    lease_ms: AtomicU64,
    /// After a lost lease's handler is cancelled, how long until it is aborted.
    lease_grace: Duration,
    /// Poked when a lease is added with a deadline earlier than the deadline watcher's
    /// next wake, or a deadline changes.
    deadlines_changed: Notify,
    /// Poked when a lease of a job with its own lease length starts: the renewer looks
    /// again at how soon its next round must come.
    renewals_changed: Notify,
    /// When the deadline watcher wakes next (`None`: not before it is poked). Written by
    /// the watcher and read by `start_job` with `inflight` locked, so a new lease is
    /// either seen by the watcher's scan or compared with the wake that scan set.
    watch_next: Mutex<Option<Instant>>,
    retry_backoff: crate::queue::Backoff,
    retry_initial: Duration,
    retry_max: Duration,
    /// The longest idle wait on `wake`.
    poll: Duration,
    /// Poked when this worker's fail put a job in `delayed`: an idle claim loop reads
    /// the earliest due time again.
    delayed_changed: Notify,
    /// Poked to wake the reaper's schedule firer, which waits for it while no schedule
    /// runs: by the reaper when its round trip found a schedule tick, and by the claim
    /// loop when a wake marker found no job (`schedule` put and resume push one).
    schedules_seen: Notify,
    /// In-flight leases by job id and claim token (a job can come back to this worker
    /// under a new token while an old attempt still unwinds; the leases of one
    /// settle_claim call share a token).
    inflight: Mutex<HashMap<LeaseKey, InFlight>>,
    /// Held by a renewal from its snapshot to its reply, and by the completer while it
    /// marks leases as completing: a renewal never races the ack of a lease it covers
    /// (which would count a needless `stale` in the queue's stats).
    renew_gate: tokio::sync::Mutex<()>,
    counters: Arc<Counters>,
    /// Finished jobs whose leases the claim loop ends in its next call.
    endings: Mutex<Endings>,
    /// Poked when `endings` gets something.
    endings_ready: Notify,
    /// Poked when a handler reports progress: the renewer sends it soon.
    progress_reported: Arc<Notify>,
    /// Cancelled once shutdown begins.
    shutdown: CancellationToken,
    /// Cancelled at the shutdown deadline: stop retrying, abandon what is left.
    hard_stop: CancellationToken,
    /// When a failure to reach Redis was last logged as a warning (see `redis_error`).
    quiet_until: Mutex<Option<std::time::Instant>>,
    /// When a call the replicas did not confirm was last logged as a warning (see
    /// `note_unconfirmed`).
    quiet_unconfirmed: Mutex<Option<std::time::Instant>>,
    /// Commands follow the primary through failovers (Sentinel): `READONLY` is a
    /// failover under way, retried; otherwise the endpoint is a replica and the worker
    /// stops.
    follows_primary: bool,
    /// What stopped the worker, when something retrying cannot fix did.
    fatal: Mutex<Option<Error>>,
}

/// After a warning that Redis cannot be reached, the same kind of failure is logged at
/// debug level for this long: an outage or a failover is a few lines in the log (the
/// connection's own "lost the primary" and "going on with the new primary"), not one
/// per retry of each claim, ack and renewal.
const TRANSIENT_QUIET: Duration = Duration::from_secs(10);

impl Shared {
    fn inflight(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, InFlight>> {
        // A panic never happens while the lock is held; recover the map regardless.
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Give finished jobs to the claim loop, which ends their leases in its next call
    /// (with their slots, which that call uses for new leases). Returns what it did not
    /// take: everything, once it stopped claiming.
    fn hand_to_claimer(
        &self,
        acks: Vec<Completion>,
        fails: Vec<(Completion, String, FailMode)>,
    ) -> (Vec<Completion>, Vec<(Completion, String, FailMode)>) {
        if acks.is_empty() && fails.is_empty() {
            return (acks, fails);
        }
        let mut endings = self.endings.lock().unwrap_or_else(|p| p.into_inner());
        if !endings.open {
            return (acks, fails);
        }
        endings.items.extend(acks.into_iter().map(|c| Ending {
            c,
            kind: EndKind::Ack,
        }));
        endings
            .items
            .extend(fails.into_iter().map(|(c, text, mode)| Ending {
                c,
                kind: EndKind::Fail(text, mode),
            }));
        drop(endings);
        self.endings_ready.notify_one();
        (Vec::new(), Vec::new())
    }

    /// Up to [`MAX_BATCH`] finished jobs handed to the claim loop, oldest first.
    fn take_endings(&self) -> Vec<Ending> {
        let mut endings = self.endings.lock().unwrap_or_else(|p| p.into_inner());
        let n = endings.items.len().min(MAX_BATCH);
        endings.items.drain(..n).collect()
    }

    /// Open or close the hand-over (the claim loop closes it while it waits for jobs, so
    /// the completer ends leases itself meanwhile). Closing fails, returning false, when
    /// something was handed over and not taken yet: the loop takes it first.
    fn set_endings_open(&self, open: bool) -> bool {
        let mut endings = self.endings.lock().unwrap_or_else(|p| p.into_inner());
        if !open && !endings.items.is_empty() {
            return false;
        }
        endings.open = open;
        true
    }

    /// The claim loop stopped: from now on the completer ends leases itself; returns what
    /// was handed over and not ended yet.
    fn close_endings(&self) -> Vec<Ending> {
        let mut endings = self.endings.lock().unwrap_or_else(|p| p.into_inner());
        endings.open = false;
        std::mem::take(&mut endings.items)
    }

    fn lease_len(&self) -> Duration {
        Duration::from_millis(self.lease_ms.load(Ordering::Relaxed))
    }

    fn delay(&self) -> RetryDelay {
        RetryDelay::new(self.retry_initial, self.retry_max)
    }

    /// Whether a failed call is tried again: a transient failure, or (behind Sentinel) a
    /// `READONLY` from a primary demoted by a failover, whose next call goes to the new
    /// primary.
    fn retryable(&self, err: &Error) -> bool {
        err.is_transient() || (self.follows_primary && matches!(err, Error::ReadOnly { .. }))
    }

    /// A `READONLY` reply from an endpoint given as the primary: it is a replica, and no
    /// retry makes it take writes. The worker stops (shutdown), reporting the error.
    /// True when `err` is such a reply.
    fn stop_if_readonly(&self, err: &Error) -> bool {
        if self.follows_primary || !matches!(err, Error::ReadOnly { .. }) {
            return false;
        }
        Counters::add(&self.counters.redis_errors, 1);
        let mut fatal = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if fatal.is_none()
            && let Error::ReadOnly { queue, op } = err
        {
            error!(queue = %self.queue_name, error = %err, "the worker cannot go on; stopping");
            *fatal = Some(Error::ReadOnly {
                queue: queue.clone(),
                op,
            });
        }
        drop(fatal);
        self.shutdown.cancel();
        true
    }

    /// A call that ran on the primary but that too few replicas confirmed: it took
    /// effect (the jobs it leased are run, the acks and fails it carried are applied),
    /// and a failover before the replicas catch up may undo it. Logged as a warning,
    /// then at debug level for [`TRANSIENT_QUIET`] (every call is unconfirmed while the
    /// replicas are down).
    fn note_unconfirmed(&self, what: &str, short: Unconfirmed) {
        Counters::add(&self.counters.unconfirmed, 1);
        let now = std::time::Instant::now();
        let mut quiet = self
            .quiet_unconfirmed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let text = format!(
            "{what} applied on the primary but not confirmed by {} replica(s) ({short}): \
             a failover now may undo it (an acked job would run again, a leased one could \
             be claimed by another worker)",
            short.wanted
        );
        if quiet.is_some_and(|until| now < until) {
            debug!(queue = %self.queue_name, "{text}");
        } else {
            *quiet = Some(now + TRANSIENT_QUIET);
            warn!(queue = %self.queue_name,
                "{text}; calls not confirmed in the next {} are logged at debug level",
                duration::format(TRANSIENT_QUIET));
        }
    }

    fn redis_error(&self, what: &str, err: &Error, delay: Duration) {
        if self.stop_if_readonly(err) {
            return;
        }
        Counters::add(&self.counters.redis_errors, 1);
        if self.retryable(err) {
            let now = std::time::Instant::now();
            let mut quiet = self.quiet_until.lock().unwrap_or_else(|p| p.into_inner());
            if quiet.is_some_and(|until| now < until) {
                debug!(queue = %self.queue_name, error = %err, retry_in = %duration::format(delay), "{what} failed; retrying");
            } else {
                *quiet = Some(now + TRANSIENT_QUIET);
                warn!(queue = %self.queue_name, error = %err, retry_in = %duration::format(delay),
                    "{what} failed; retrying (failures to reach Redis in the next {} are logged at debug level)",
                    duration::format(TRANSIENT_QUIET));
            }
        } else {
            error!(queue = %self.queue_name, error = %err, retry_in = %duration::format(delay), "{what} failed; retrying");
        }
    }
}

/// Finished jobs waiting for the claim loop's next call, while it claims (`open`).
struct Endings {
    open: bool,
    items: Vec<Ending>,
}

/// A finished job whose lease the claim loop ends: acked, or failed with its error text.
struct Ending {
    c: Completion,
    kind: EndKind,
}

enum EndKind {
    Ack,
    Fail(String, FailMode),
}

impl Ending {
    fn settle(&self, backoff: crate::queue::Backoff) -> Settle<'_> {
        let lease = self.c.lease.lease_ref();
        match &self.kind {
            EndKind::Ack => Settle::Ack(match &self.c.result {
                Some(r) => lease.with_result(r),
                None => lease,
            }),
            EndKind::Fail(text, mode) => Settle::Fail {
                lease,
                error: text,
                mode: *mode,
                backoff,
            },
        }
    }

    /// Count and log what the settle part did with this lease.
    fn note(&self, shared: &Shared, settled: Settled) {
        match (&self.kind, settled) {
            (EndKind::Ack, settled) => note_ack(shared, &self.c, settled == Settled::Acked),
            (EndKind::Fail(text, _), Settled::Moved(outcome)) => {
                note_fail(shared, &self.c, text, outcome)
            }
            (EndKind::Fail(text, _), _) => note_fail(shared, &self.c, text, FailOutcome::Stale),
        }
    }
}

enum Outcome {
    Finished(std::result::Result<(), JobError>),
    Panicked(String),
    /// Aborted at the shutdown deadline, or after its lease was lost.
    Aborted,
    /// Never started: the claim's reply came after the lease's local deadline.
    NotStarted,
    /// Stopped because its cancellation was asked for (`jobqueue cancel`): the lease
    /// ends as cancelled, neither retried nor dead.
    Cancelled,
}

struct Completion {
    lease: Lease,
    outcome: Outcome,
    /// How long the handler ran, for the per-job log line.
    took: Duration,
    /// The result its ack stores ([`JobContext::set_result`]).
    result: Option<Vec<u8>>,
    _permit: OwnedSemaphorePermit,
}

type Handler<H> = Arc<H>;

/// The worker's life: start the helper tasks, claim until shutdown, wait for the jobs in
/// flight up to the deadline, stop the helpers. Returns the counters, and the error that
/// stopped the worker when it was not a shutdown (an endpoint that is a read-only
/// replica).
pub(super) async fn run<H, F>(worker: Worker, handler: Handler<H>) -> (WorkerStats, Option<Error>)
where
    H: Fn(Lease, JobContext) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = std::result::Result<(), JobError>> + Send + 'static,
{
    let Worker {
        queue,
        config,
        shutdown,
        counters,
    } = worker;
    // A partition found empty is looked at again after the poll interval, busy or idle.
    let queue = match queue {
        JobSource::Partitioned(q) => JobSource::Partitioned(q.recheck_empty(config.poll_interval)),
        one => one,
    };
    let follows_primary = queue.follows_primary();
    let shared = Arc::new(Shared {
        worker_id: Arc::from(config.worker_id.as_str()),
        queue_name: Arc::from(queue.name()),
        queue,
        visibility: config.visibility,
        timeout: config.timeout,
        lease_ms: AtomicU64::new(0),
        lease_grace: config.lease_grace,
        deadlines_changed: Notify::new(),
        renewals_changed: Notify::new(),
        watch_next: Mutex::new(None),
        retry_backoff: config.retry_backoff,
        retry_initial: config.retry_initial,
        retry_max: config.retry_max,
        poll: config.poll_interval,
        delayed_changed: Notify::new(),
        schedules_seen: Notify::new(),
        inflight: Mutex::new(HashMap::new()),
        renew_gate: tokio::sync::Mutex::new(()),
        counters: counters.clone(),
        endings: Mutex::new(Endings {
            open: true,
            items: Vec::new(),
        }),
        endings_ready: Notify::new(),
        progress_reported: Arc::new(Notify::new()),
        shutdown,
        hard_stop: CancellationToken::new(),
        quiet_until: Mutex::new(None),
        quiet_unconfirmed: Mutex::new(None),
        follows_primary,
        fatal: Mutex::new(None),
    });
    // Listening from before anything that says the worker runs: a SIGTERM sent once
    // the start line is out (Kubernetes stopping a pod it just started) is a graceful
    // shutdown, never the default action that ends the process.
    let signals = config.handle_signals.then(Signals::new);
    // The lease length in effect: the worker's own, else the queue's setting.
    let visibility = match config.visibility {
        Some(v) => v,
        None => queue_visibility(&shared.queue).await,
    };
    shared
        .lease_ms
        .store(visibility.as_millis().max(1) as u64, Ordering::Relaxed);
    info!(
        queue = %shared.queue_name,
        worker = %shared.worker_id,
        concurrency = config.concurrency,
        visibility = %duration::format(visibility),
        reaper = config.reaper,
        "worker started"
    );

    let signals = signals.map(|signals| tokio::spawn(listen_for_signals(shared.clone(), signals)));
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Completion>();
    let completer = tokio::spawn(complete_jobs(shared.clone(), done_rx));
    let stop_renewing = CancellationToken::new();
    let renewer = tokio::spawn(renew_leases(
        shared.clone(),
        visibility,
        stop_renewing.clone(),
    ));
    let watcher = tokio::spawn(watch_deadlines(shared.clone(), stop_renewing.clone()));
    let reaper = config
        .reaper
        .then(|| tokio::spawn(reap_now_and_then(shared.clone(), config.tuning)));

    let slots = Arc::new(Semaphore::new(config.concurrency));
    let max_claim = config.max_claim.min(config.concurrency);
    claim_until_shutdown(&shared, &handler, &slots, max_claim, &done_tx).await;
    end_handed_over(&shared).await;
    wait_for_jobs(
        &shared,
        &slots,
        config.concurrency,
        config.shutdown_deadline,
    )
    .await;

    // Leases left now are abandoned: they must expire, so stop renewing them.
    stop_renewing.cancel();
    drop(done_tx);
    if tokio::time::timeout(ABORT_GRACE, completer).await.is_err() {
        warn!(queue = %shared.queue_name, "jobs still unwinding after the shutdown deadline; leaving them");
    }
    let _ = renewer.await;
    let _ = watcher.await;
    if let Some(reaper) = reaper {
        let _ = reaper.await;
    }
    if let Some(signals) = signals {
        signals.abort();
    }
    let stats = counters.snapshot();
    info!(
        queue = %shared.queue_name,
        acked = stats.acked,
        retried = stats.retried,
        dead = stats.dead,
        abandoned = stats.abandoned,
        released = stats.released,
        "worker stopped"
    );
    let fatal = shared
        .fatal
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    (stats, fatal)
}

/// The claim loop: as many jobs as there are free slots (at most `max_claim` per call),
/// each started with its slot, until shutdown begins. Jobs that finished since the last
/// call are ended in the same call (`settle_claim`: ack or fail, then claim), and their
/// slots claim again, so a busy worker makes one round trip per job (per batch). Between
/// claims of an empty queue it waits on the wake list, up to the poll interval or until
/// the earliest delayed job is due (or this worker delays one, or a job finishes); Redis
/// failures are retried with backoff.
async fn claim_until_shutdown<H, F>(
    shared: &Arc<Shared>,
    handler: &Handler<H>,
    slots: &Arc<Semaphore>,
    max_claim: usize,
    done: &mpsc::UnboundedSender<Completion>,
) where
    H: Fn(Lease, JobContext) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = std::result::Result<(), JobError>> + Send + 'static,
{
    let shutdown = &shared.shutdown;
    let mut waker = Waker::default();
    let mut delay = shared.delay();
    // The last wait ended with a wake marker that no claim has turned into a job yet.
    let mut marker = false;
    // The queue's rate limit left no claim slot: no claim before this (a claim that ends
    // leases is sent all the same, its claim part answering the wait again).
    let mut rate_until: Option<Instant> = None;
    loop {
        let endings = shared.take_endings();
        let mut permits = Vec::new();
        if endings.is_empty()
            && let Some(until) = rate_until.take()
            && until > Instant::now()
        {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = shared.endings_ready.notified() => {
                    rate_until = Some(until);
                    continue;
                }
                _ = tokio::time::sleep_until(until) => {}
            }
            continue;
        }
        if endings.is_empty() {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = shared.endings_ready.notified() => continue,
                permit = slots.clone().acquire_owned() => {
                    permits.push(permit.expect("the semaphore is never closed"))
                }
            }
        } else if shutdown.is_cancelled() {
            // Ended by the shutdown path (close_endings), without a claim.
            let mut back = shared.endings.lock().unwrap_or_else(|p| p.into_inner());
            let later = std::mem::replace(&mut back.items, endings);
            back.items.extend(later);
            return;
        }
        while endings.len() + permits.len() < max_claim {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let n = (endings.len() + permits.len()).clamp(1, max_claim);
        // A claim is never cut short by shutdown: a claimed job must reach a handler (or
        // at worst its lease runs out), and one claim is quick.
        let lease_len = shared.lease_len();
        let sent = Instant::now();
        let reply = settle_and_claim(shared, &endings, n, lease_len, &mut delay).await;
        // The finished jobs' slots claim for the next ones.
        for ending in endings {
            permits.push(ending.c._permit);
        }
        if let Ok(claimed) = &reply {
            rate_until = claimed.rate_wait.map(|wait| {
                Counters::add(&shared.counters.rate_limited, 1);
                Instant::now() + wait
            });
        }
        match reply {
            Ok(claimed) if claimed.leases.is_empty() => {
                delay.reset();
                drop(permits);
                // A marker with no job behind it: a schedule may have been added or
                // resumed (or a job delayed), so the idle schedule firer looks.
                if std::mem::take(&mut marker) {
                    shared.schedules_seen.notify_one();
                }
                if claimed.more || claimed.rate_wait.is_some() {
                    // A run of orphans in front of the jobs: claim again at once; or the
                    // rate limit: claim again when its next slot opens (above).
                    continue;
                }
                // Jobs that finished during the call: end them (and claim) before waiting.
                // While the loop waits, the completer ends leases itself, so a wait is
                // never cut short (which would drop its connection) by a finished job.
                if !shared.set_endings_open(false) {
                    continue;
                }
                // Unreadable: wait the poll interval, the claim will say what is wrong.
                let due_in = shared.queue.next_due_in().await.ok().flatten();
                let until = due_in
                    .map(|d| (d + Duration::from_millis(1)).max(MIN_DUE_WAIT))
                    .filter(|d| *d < shared.poll);
                let woke = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    _ = shared.delayed_changed.notified() => Ok(false),
                    woke = waker.wait(&shared.queue, shared.poll, until) => woke,
                };
                shared.set_endings_open(true);
                marker = matches!(woke, Ok(true));
                if let Err(err) = woke {
                    let wait = delay.next_delay();
                    shared.redis_error("waiting for jobs", &err, wait);
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
            Ok(claimed) => {
                delay.reset();
                marker = false;
                let leases = claimed.leases;
                Counters::add(&shared.counters.claimed, leases.len() as u64);
                debug!(queue = %shared.queue_name, n = leases.len(), "claimed");
                let mut permits = permits.into_iter();
                for lease in leases {
                    let permit = permits.next().expect("claim returns at most n jobs");
                    // A replay of a claim whose reply was lost counts from that claim's
                    // send; a job with its own lease length was leased for that long.
                    let deadline = lease::claim_deadline(
                        sent,
                        claimed.first_sent,
                        lease.visibility.unwrap_or(lease_len),
                    );
                    start_job(shared, handler, lease, deadline, permit, done);
                }
            }
            Err(wait) => {
                drop(permits);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// One `settle_claim` call: end the leases of `endings` and claim up to `n` jobs. Its
/// answer says what became of each ending (counted and logged here). When the call
/// fails, it is sent again, unchanged (same request id), while the failure is transient
/// and the shutdown deadline has not passed, so the endings are settled exactly once; a
/// claim with nothing to settle is not repeated (the loop claims anew). Past
/// [`crate::queue::REQUEST_RETRY_WINDOW`] from its first send, the request's record may be gone from
/// Redis: the call is then sent with a fresh request id (each ending is still applied at
/// most once, by its token; one the lost call applied is answered stale, and leases the
/// lost call made expire to the reaper). When it gave up, how long to wait before the
/// next claim: an ending's lease then expires and its job runs again (at-least-once).
async fn settle_and_claim(
    shared: &Shared,
    endings: &[Ending],
    n: usize,
    lease_len: Duration,
    delay: &mut RetryDelay,
) -> std::result::Result<crate::queue::Claimed, Duration> {
    let settles: Vec<Settle<'_>> = endings
        .iter()
        .map(|e| e.settle(shared.retry_backoff))
        .collect();
    let mut request = new_token();
    let mut first_sent = tokio::time::Instant::now();
    let reply = loop {
        let sent = shared
            .queue
            .settle_claim(
                &request,
                first_sent,
                &settles,
                n,
                &shared.worker_id,
                Some(lease_len),
            )
            .await;
        match sent {
            Ok(reply) => break Some(reply),
            Err(err) if endings.is_empty() => {
                let wait = delay.next_delay();
                shared.redis_error("claim", &err, wait);
                return Err(wait);
            }
            Err(err) if shared.retryable(&err) && !shared.hard_stop.is_cancelled() => {
                let wait = delay.next_delay();
                shared.redis_error("ending leases and claiming", &err, wait);
                let fresh = !within_window(first_sent, wait);
                tokio::select! {
                    _ = shared.hard_stop.cancelled() => break None,
                    _ = tokio::time::sleep(wait) => {}
                }
                if fresh {
                    warn!(queue = %shared.queue_name, endings = endings.len(),
                        "ending leases: no answer within the retry window; sending the call as a new request (leases the unanswered one made expire to the reaper)");
                    request = new_token();
                    first_sent = tokio::time::Instant::now();
                }
            }
            Err(err) => {
                if !shared.stop_if_readonly(&err) {
                    Counters::add(&shared.counters.redis_errors, 1);
                    error!(queue = %shared.queue_name, error = %err,
                        "ending leases failed; giving up, the leases will expire");
                }
                break None;
            }
        }
    };
    // Under `replicated`: the call took effect on the primary all the same, its leases
    // are run as any others.
    if let Some(short) = reply.as_ref().and_then(|r| r.claimed.unconfirmed) {
        let leased = reply.as_ref().map_or(0, |r| r.claimed.leases.len());
        let what = match endings.len() {
            0 => format!("a claim of {leased} job(s)"),
            ended => format!("the end of {ended} lease(s) and a claim of {leased} job(s)"),
        };
        shared.note_unconfirmed(&what, short);
    }
    let answered = reply.as_ref().map(|r| r.settled.as_slice());
    {
        let mut map = shared.inflight();
        for (i, e) in endings.iter().enumerate() {
            map.remove(&lease_key(&e.c.lease));
            if let Some(settled) = answered.and_then(|a| a.get(i)) {
                e.note(shared, *settled);
            }
        }
    }
    reply.map(|r| r.claimed).ok_or_else(|| delay.next_delay())
}

/// After the last claim: end the leases of jobs handed to the claim loop that it did not
/// end, as the completer does from now on.
async fn end_handed_over(shared: &Shared) {
    let mut acks = Vec::new();
    let mut fails = Vec::new();
    for ending in shared.close_endings() {
        match ending.kind {
            EndKind::Ack => acks.push(ending.c),
            EndKind::Fail(text, mode) => fails.push((ending.c, text, mode)),
        }
    }
    let failing = join_all(
        fails
            .into_iter()
            .map(|(c, text, mode)| fail_one(shared, c, text, mode)),
    );
    tokio::join!(ack_all(shared, acks), failing);
}

/// Shutdown, after the last claim: wait until every slot is free again (every job in
/// flight finished and its lease ended), up to `deadline` or a second signal; then
/// cancel and abort what still runs, leaving its lease to expire.
async fn wait_for_jobs(shared: &Shared, slots: &Semaphore, concurrency: usize, deadline: Duration) {
    let running = shared.inflight().len();
    info!(
        queue = %shared.queue_name,
        running,
        deadline = %duration::format(deadline),
        "shutting down: no more claims, waiting for jobs in flight"
    );
    let finished = tokio::select! {
        _ = slots.acquire_many(concurrency as u32) => true,
        _ = tokio::time::sleep(deadline) => false,
        _ = shared.hard_stop.cancelled() => false,
    };
    if finished {
        return;
    }
    shared.hard_stop.cancel();
    let left: Vec<(JobId, Option<AbortHandle>, CancellationToken)> = shared
        .inflight()
        .values()
        .map(|f| (f.id.clone(), f.abort.clone(), f.cancel.clone()))
        .collect();
    for (id, abort, cancel) in left {
        warn!(queue = %shared.queue_name, job = %id, "shutdown deadline passed: job abandoned, its lease will expire");
        cancel.cancel();
        if let Some(abort) = abort {
            abort.abort();
        }
    }
}

/// A lease in flight: its job id and claim token.
type LeaseKey = (JobId, String);

fn lease_key(lease: &Lease) -> LeaseKey {
    (lease.id.clone(), lease.token.clone())
}

fn start_job<H, F>(
    shared: &Arc<Shared>,
    handler: &Handler<H>,
    lease: Lease,
    deadline: Instant,
    permit: OwnedSemaphorePermit,
    done: &mpsc::UnboundedSender<Completion>,
) where
    H: Fn(Lease, JobContext) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = std::result::Result<(), JobError>> + Send + 'static,
{
    if Instant::now() >= deadline {
        // The reply came later than the lease is sure to last: running the job now could
        // overlap another worker's run of it. It is released at once, uncharged (stale,
        // changing nothing, if the lease was already reaped), rather than left to expire
        // and be charged an attempt it never had.
        Counters::add(&shared.counters.lost, 1);
        warn!(queue = %shared.queue_name, job = %lease.id,
            "the claim's reply came after the lease's local deadline; not running the job, releasing it");
        let _ = done.send(Completion {
            lease,
            outcome: Outcome::NotStarted,
            took: Duration::ZERO,
            result: None,
            _permit: permit,
        });
        return;
    }
    let cancel = CancellationToken::new();
    let timeout_cancel = cancel.clone();
    let lost = Arc::new(AtomicBool::new(false));
    let cancelled = Arc::new(AtomicBool::new(false));
    let cancelled_flag = cancelled.clone();
    let outcome = Arc::new(JobOutcome {
        reported: shared.progress_reported.clone(),
        ..Default::default()
    });
    let reported = outcome.clone();
    let ctx = JobContext {
        outcome: outcome.clone(),
        cancel: cancel.clone(),
        // A child: a handler cancelling it must not shut the worker down.
        shutdown: shared.shutdown.child_token(),
        lost: lost.clone(),
        worker_id: shared.worker_id.clone(),
        queue: shared.queue_name.clone(),
    };
    let (abort, registration) = AbortHandle::new_pair();
    let wake_watcher = {
        let mut map = shared.inflight();
        map.insert(
            lease_key(&lease),
            InFlight {
                id: lease.id.clone(),
                cancel,
                lost,
                completing: false,
                abort: Some(abort),
                deadline,
                own_len: lease.visibility,
                lost_at: None,
                cancelled,
                partition: lease.partition,
                outcome,
            },
        );
        let next = *shared.watch_next.lock().unwrap_or_else(|p| p.into_inner());
        // A later deadline than the watcher's next wake needs no wake now.
        next.is_none_or(|next| deadline < next)
    };
    if wake_watcher {
        shared.deadlines_changed.notify_one();
    }
    if lease.visibility.is_some() {
        shared.renewals_changed.notify_one();
    }
    let done = done.clone();
    let handler = handler.clone();
    let shared = shared.clone();
    // One task runs the handler and reports its outcome: a panic (even while building the
    // handler's future) is caught as one, and the deadline watcher's or the shutdown's
    // abort ends it as `Aborted`.
    // The job's own maximum run time, else the worker's.
    let limit = lease.timeout.or(shared.timeout);
    tokio::spawn(async move {
        let started = Instant::now();
        let job = lease.clone();
        let run = AssertUnwindSafe(async move { handler(job, ctx).await }).catch_unwind();
        let run = Abortable::new(run, registration);
        let (ran, timed_out) =
            run_with_limit(run, limit, &timeout_cancel, shared.lease_grace).await;
        let outcome = match (ran, timed_out) {
            // Its cancellation was asked for: cancelled, whatever the handler did of it.
            _ if cancelled_flag.load(Ordering::SeqCst) => Outcome::Cancelled,
            // Aborted by the deadline watcher (a lost lease) or the shutdown deadline.
            (Some(Err(_aborted)), _) => Outcome::Aborted,
            // Past its maximum run time: failed (retried or dead by the usual rules),
            // whatever the handler made of its cancellation.
            (_, Some(limit)) => Outcome::Finished(Err(JobError::retry(format!(
                "timed out after {}",
                duration::format(limit)
            )))),
            (Some(Ok(Ok(result))), None) => Outcome::Finished(result),
            (Some(Ok(Err(panic))), None) => Outcome::Panicked(panic_text(panic)),
            (None, None) => Outcome::Aborted,
        };
        // The result the handler set: a refused one (over the bound) fails the job.
        let result = reported
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let (outcome, result) = match (outcome, result) {
            (Outcome::Finished(Ok(())), Some(Err(len))) => (
                Outcome::Finished(Err(JobError::retry(super::result_too_large(len)))),
                None,
            ),
            (outcome, result) => (outcome, result.and_then(|r| r.ok())),
        };
        let c = Completion {
            lease,
            outcome,
            took: started.elapsed(),
            result,
            _permit: permit,
        };
        if let Some(c) = hand_success_to_claimer(&shared, c) {
            let _ = done.send(c);
        }
    });
}

/// Run a job's handler, within its maximum run time when it has one. Past it, the
/// handler's context is cancelled (an exec command gets SIGTERM, then SIGKILL after its
/// kill grace) and the handler has `grace` to stop before it is dropped (aborted).
/// Returns the handler's result (`None`: dropped after the grace) and, when the time ran
/// out, the limit.
async fn run_with_limit<T>(
    run: impl std::future::Future<Output = T>,
    limit: Option<Duration>,
    cancel: &CancellationToken,
    grace: Duration,
) -> (Option<T>, Option<Duration>) {
    let Some(limit) = limit else {
        return (Some(run.await), None);
    };
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => return (Some(result), None),
        _ = tokio::time::sleep(limit) => {}
    }
    cancel.cancel();
    (tokio::time::timeout(grace, run).await.ok(), Some(limit))
}

/// A job that succeeded goes straight to the claim loop, whose next call acks it, when
/// no renewal holds the gate and the lease is not lost (what the completer would do with
/// it, one task hop sooner); anything else is returned for the completer.
fn hand_success_to_claimer(shared: &Shared, c: Completion) -> Option<Completion> {
    if !matches!(c.outcome, Outcome::Finished(Ok(()))) {
        return Some(c);
    }
    let Ok(gate) = shared.renew_gate.try_lock() else {
        return Some(c);
    };
    {
        let mut map = shared.inflight();
        match map.get_mut(&lease_key(&c.lease)) {
            Some(f) if f.is_lost(Instant::now()) => return Some(c),
            Some(f) => f.completing = true,
            None => {}
        }
    }
    drop(gate);
    let (mut acks, _) = shared.hand_to_claimer(vec![c], Vec::new());
    acks.pop()
}

fn panic_text(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-text panic payload)".to_string()
    }
}

/// Ends the leases of finished jobs: acks in batches, fails one by one (concurrently).
async fn complete_jobs(shared: Arc<Shared>, mut done: mpsc::UnboundedReceiver<Completion>) {
    let mut batch = Vec::new();
    while done.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let mut acks: Vec<Completion> = Vec::new();
        let mut fails: Vec<(Completion, String, FailMode)> = Vec::new();
        let mut releases: Vec<Completion> = Vec::new();
        let mut cancels: Vec<Completion> = Vec::new();
        let gate = shared.renew_gate.lock().await;
        let now = Instant::now();
        for c in batch.drain(..) {
            let lost = {
                let mut map = shared.inflight();
                match map.get_mut(&lease_key(&c.lease)) {
                    Some(f) if f.is_lost(now) => true,
                    Some(f) => {
                        f.completing = true;
                        false
                    }
                    None => false,
                }
            };
            if lost {
                // The lease was taken away: someone else may be running this job now.
                Counters::add(&shared.counters.lost, 1);
                warn!(queue = %shared.queue_name, job = %c.lease.id, attempt = c.lease.attempts,
                    "lease was lost while the job ran; its result is not acked");
                shared.inflight().remove(&lease_key(&c.lease));
                continue;
            }
            match &c.outcome {
                Outcome::Finished(Ok(())) => acks.push(c),
                Outcome::Finished(Err(JobError::Interrupted(_)))
                    if shared.shutdown.is_cancelled() =>
                {
                    releases.push(c)
                }
                Outcome::Finished(Err(err)) => {
                    let mode = if err.is_permanent() {
                        FailMode::Dead
                    } else {
                        FailMode::Retry
                    };
                    let text =
                        crate::worker::truncate_text(err.message().to_string(), MAX_ERROR_TEXT);
                    fails.push((c, text, mode));
                }
                Outcome::Panicked(msg) => {
                    Counters::add(&shared.counters.panicked, 1);
                    let text = crate::worker::truncate_text(
                        format!("handler panicked: {msg}"),
                        MAX_ERROR_TEXT,
                    );
                    error!(queue = %shared.queue_name, job = %c.lease.id, "{text}");
                    fails.push((c, text, FailMode::Retry));
                }
                Outcome::Aborted => {
                    // Aborted at the shutdown deadline: it no longer runs, hand it back.
                    Counters::add(&shared.counters.abandoned, 1);
                    releases.push(c);
                }
                Outcome::NotStarted => releases.push(c),
                Outcome::Cancelled => cancels.push(c),
            }
        }
        drop(gate);
        // While the claim loop runs, it ends these leases in its next call (settle and
        // claim in one round trip); after it stopped, they are ended here.
        let (acks, fails) = shared.hand_to_claimer(acks, fails);
        let acking = ack_all(&shared, acks);
        let failing = join_all(
            fails
                .into_iter()
                .map(|(c, text, mode)| fail_one(&shared, c, text, mode)),
        );
        let releasing = join_all(releases.into_iter().map(|c| release_one(&shared, c)));
        let cancelling = join_all(cancels.into_iter().map(|c| cancel_one(&shared, c)));
        tokio::join!(acking, failing, releasing, cancelling);
    }
}

async fn ack_all(shared: &Shared, acks: Vec<Completion>) {
    if acks.is_empty() {
        return;
    }
    let refs: Vec<LeaseRef<'_>> = acks
        .iter()
        .map(|c| match &c.result {
            Some(r) => c.lease.lease_ref().with_result(r),
            None => c.lease.lease_ref(),
        })
        .collect();
    let answer = with_retry(shared, "ack", || shared.queue.ack_many(&refs)).await;
    if let Some((_, Some(short))) = &answer {
        shared.note_unconfirmed(&format!("{} ack(s)", acks.len()), *short);
    }
    if let Some((flags, _)) = answer {
        for (c, ok) in acks.iter().zip(flags) {
            note_ack(shared, c, ok);
        }
    }
    let mut map = shared.inflight();
    for c in &acks {
        map.remove(&lease_key(&c.lease));
    }
}

async fn fail_one(shared: &Shared, c: Completion, text: String, mode: FailMode) {
    let outcome = with_retry(shared, "fail", || {
        shared
            .queue
            .fail(&c.lease, &text, mode, shared.retry_backoff)
    })
    .await;
    if let Some((outcome, short)) = outcome {
        if let Some(short) = short {
            shared.note_unconfirmed("a fail", short);
        }
        note_fail(shared, &c, &text, outcome);
    }
    shared.inflight().remove(&lease_key(&c.lease));
}

/// Count and log the answer to an ack.
fn note_ack(shared: &Shared, c: &Completion, ok: bool) {
    if ok {
        Counters::add(&shared.counters.acked, 1);
        debug!(queue = %shared.queue_name, job = %c.lease.id, attempt = c.lease.attempts,
            took = %crate::duration::format(c.took), "acked");
    } else {
        Counters::add(&shared.counters.stale, 1);
        warn!(queue = %shared.queue_name, job = %c.lease.id,
            "ack refused as stale: the lease had been taken away (the visibility timeout may be shorter than the job)");
    }
}

/// Count and log the answer to a fail.
fn note_fail(shared: &Shared, c: &Completion, text: &str, outcome: FailOutcome) {
    match outcome {
        FailOutcome::Dead => {
            Counters::add(&shared.counters.dead, 1);
            warn!(queue = %shared.queue_name, job = %c.lease.id, attempt = c.lease.attempts, error = %crate::telemetry::one_line(text), "job dead-lettered");
        }
        FailOutcome::Pending | FailOutcome::Delayed => {
            if outcome == FailOutcome::Delayed {
                shared.delayed_changed.notify_one();
            }
            Counters::add(&shared.counters.retried, 1);
            info!(queue = %shared.queue_name, job = %c.lease.id, attempt = c.lease.attempts, error = %crate::telemetry::one_line(text), "job failed; will retry");
        }
        FailOutcome::Stale => {
            Counters::add(&shared.counters.stale, 1);
            warn!(queue = %shared.queue_name, job = %c.lease.id, "fail refused as stale: the lease had been taken away");
        }
    }
}

/// End the lease of a job stopped because its cancellation was asked for.
async fn cancel_one(shared: &Shared, c: Completion) {
    let answer = with_retry(shared, "cancel", || shared.queue.end_cancelled(&c.lease)).await;
    match answer {
        Some(true) => {
            Counters::add(&shared.counters.cancelled, 1);
            info!(queue = %shared.queue_name, job = %c.lease.id, attempt = c.lease.attempts,
                "job cancelled (`jobqueue cancel`): stopped, neither retried nor dead-lettered");
        }
        Some(false) => {
            Counters::add(&shared.counters.stale, 1);
            warn!(queue = %shared.queue_name, job = %c.lease.id, "ending the cancelled job was refused as stale: the lease had been taken away");
        }
        None => {}
    }
    shared.inflight().remove(&lease_key(&c.lease));
}

async fn release_one(shared: &Shared, c: Completion) {
    let answer = with_retry(shared, "release", || shared.queue.release(&c.lease)).await;
    if let Some((_, Some(short))) = answer {
        shared.note_unconfirmed("a release", short);
    }
    match answer.map(|(released, _)| released) {
        Some(true) => {
            Counters::add(&shared.counters.released, 1);
            let why = match c.outcome {
                Outcome::NotStarted => "job not started (its claim came back too late)",
                _ => "job unfinished at shutdown",
            };
            info!(queue = %shared.queue_name, job = %c.lease.id, attempt = c.lease.attempts,
                "{why}: released without charging the attempt");
        }
        Some(false) => {
            Counters::add(&shared.counters.stale, 1);
            warn!(queue = %shared.queue_name, job = %c.lease.id, "release refused as stale: the lease had been taken away");
        }
        None => {}
    }
    shared.inflight().remove(&lease_key(&c.lease));
}

/// Run `op` until it succeeds, retrying transient failures with backoff until the
/// shutdown deadline. `None` when it gave up (the lease then expires and the job runs
/// again: at-least-once).
async fn with_retry<T, Fut>(shared: &Shared, what: &str, mut op: impl FnMut() -> Fut) -> Option<T>
where
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut delay = shared.delay();
    loop {
        match op().await {
            Ok(v) => return Some(v),
            Err(err) if shared.retryable(&err) && !shared.hard_stop.is_cancelled() => {
                let wait = delay.next_delay();
                shared.redis_error(what, &err, wait);
                tokio::select! {
                    _ = shared.hard_stop.cancelled() => return None,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            Err(err) => {
                if !shared.stop_if_readonly(&err) {
                    Counters::add(&shared.counters.redis_errors, 1);
                    error!(queue = %shared.queue_name, error = %err, "{what} failed; giving up, the lease will expire");
                }
                return None;
            }
        }
    }
}

/// The queue's visibility timeout, or the default when it cannot be read (claims then
/// fail and retry anyway).
async fn queue_visibility(queue: &JobSource) -> Duration {
    queue
        .settings()
        .await
        .map(|s| s.visibility_timeout)
        .unwrap_or(crate::queue::QueueSettings::default().visibility_timeout)
}

/// Renews every lease in flight in one `extend` call, at a third of the lease length
/// (the queue's setting, re-read each round, unless the worker has its own), or of the
/// shortest own lease length of a job in flight when that is shorter (a job enqueued
/// with its own visibility: Redis renews it by that length whatever the call asks). A
/// reply moves each renewed lease's local deadline to the call's send time + its lease
/// length; the call waits for its reply no longer than the earliest deadline it covers.
/// A stale answer cancels that job's context.
async fn renew_leases(shared: Arc<Shared>, mut visibility: Duration, stop: CancellationToken) {
    let mut delay = shared.delay();
    let mut wait = visibility / 3;
    let mut last = Instant::now();
    loop {
        // The next round: `wait` after the last one, sooner while a job with a shorter
        // lease of its own is in flight (looked at again when one starts); a reported
        // progress moves it to within PROGRESS_DELAY.
        let mut soon: Option<Instant> = None;
        loop {
            let mut next = match shortest_own_lease(&shared) {
                Some(own) => last + wait.min(renewal_interval(own)),
                None => last + wait,
            };
            if let Some(soon) = soon {
                next = next.min(soon);
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(next) => break,
                _ = shared.renewals_changed.notified() => {}
                _ = shared.progress_reported.notified() => {
                    let by = Instant::now() + PROGRESS_DELAY;
                    soon = Some(soon.map_or(by, |s| s.min(by)));
                }
            }
        }
        let interval = renewal_interval(visibility);
        if shared.visibility.is_none()
            && let Ok(Ok(settings)) = tokio::time::timeout(interval, shared.queue.settings()).await
        {
            // The operator or the CLI may change the queue's visibility timeout.
            visibility = settings.visibility_timeout;
            shared
                .lease_ms
                .store(visibility.as_millis().max(1) as u64, Ordering::Relaxed);
        }
        let interval = renewal_interval(visibility);
        let lease_len = shared.lease_len();
        let _gate = shared.renew_gate.lock().await;
        let sent = Instant::now();
        last = sent;
        // Leases past their deadline are the watcher's: a reply cannot save them.
        #[allow(clippy::type_complexity)]
        let held: Vec<(
            JobId,
            String,
            Instant,
            usize,
            Option<crate::queue::Progress>,
        )> = shared
            .inflight()
            .iter()
            .filter(|(_, f)| !f.completing && !f.is_lost(sent))
            .map(|((_, token), f)| {
                // the progress not sent yet, if any
                let progress = match &*f.outcome.progress.lock().unwrap_or_else(|e| e.into_inner())
                {
                    Some((p, true)) => Some(p.clone()),
                    _ => None,
                };
                (
                    f.id.clone(),
                    token.clone(),
                    f.deadline,
                    f.partition,
                    progress,
                )
            })
            .collect();
        let Some(budget) = lease::extend_timeout(sent, held.iter().map(|h| h.2)) else {
            wait = interval;
            continue;
        };
        let refs: Vec<LeaseRef<'_>> = held
            .iter()
            .map(|(id, token, _, p, progress)| {
                let r = LeaseRef::from((id, token.as_str())).in_partition(*p);
                match progress {
                    Some(progress) => r.with_progress(progress),
                    None => r,
                }
            })
            .collect();
        let reply = tokio::time::timeout(budget, shared.queue.renew_many(&refs, Some(lease_len)));
        match reply.await {
            Ok(Ok(results)) => {
                delay.reset();
                Counters::add(&shared.counters.renewals, 1);
                wait = interval;
                let now = Instant::now();
                let mut map = shared.inflight();
                for ((id, token, _, _, sent_progress), until) in held.iter().zip(results) {
                    let Some(f) = map.get_mut(&(id.clone(), token.clone())) else {
                        continue;
                    };
                    // The progress sent is written: not sent again unless replaced.
                    if let Some(sent_progress) = sent_progress {
                        let mut p = f.outcome.progress.lock().unwrap_or_else(|e| e.into_inner());
                        if let Some((latest, unsent)) = p.as_mut()
                            && latest == sent_progress
                        {
                            *unsent = false;
                        }
                    }
                    if until != Renewal::Stale {
                        let renewed = lease::deadline(sent, f.own_len.unwrap_or(lease_len));
                        f.deadline = f.deadline.max(renewed);
                    }
                    if until == Renewal::Cancelled && !f.completing && f.lost_at.is_none() {
                        // Stopped like a lost lease (cancelled, aborted after the grace),
                        // but its end is reported: the lease is still this worker's.
                        f.cancelled.store(true, Ordering::SeqCst);
                        f.lost_at = Some(now);
                        f.cancel.cancel();
                        info!(queue = %shared.queue_name, job = %id,
                            "the job's cancellation was asked for; stopping it");
                    } else if until == Renewal::Stale && !f.completing && f.lost_at.is_none() {
                        f.mark_lost(now);
                        warn!(queue = %shared.queue_name, job = %id,
                            "lease renewal came back stale: the lease was taken away; cancelling the job");
                    }
                }
                drop(map);
                shared.deadlines_changed.notify_one();
            }
            Ok(Err(err)) => {
                // Try again soon, but no later than the regular interval.
                wait = delay.next_delay().min(interval);
                shared.redis_error("lease renewal", &err, wait);
            }
            Err(_) => {
                wait = delay.next_delay().min(interval);
                Counters::add(&shared.counters.redis_errors, 1);
                warn!(queue = %shared.queue_name, waited = %duration::format(budget),
                    "lease renewal got no reply before the earliest lease's local deadline; retrying");
            }
        }
    }
}

/// A third of a lease length (at least 10 ms): how often a lease of that length is
/// renewed.
fn renewal_interval(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

/// The shortest own lease length ([`Lease::visibility`]) of a job in flight, if any.
fn shortest_own_lease(shared: &Shared) -> Option<Duration> {
    shared
        .inflight()
        .values()
        .filter(|f| !f.completing)
        .filter_map(|f| f.own_len)
        .min()
}

/// Enforces each lease's local deadline: when it passes without a renewal the lease is
/// lost (the handler's context is cancelled, its result never acked); a handler still
/// running the grace period after losing its lease is aborted.
async fn watch_deadlines(shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        {
            let mut map = shared.inflight();
            for f in map.values_mut().filter(|f| !f.completing) {
                match lease::step(
                    now,
                    f.deadline,
                    f.lost_at,
                    f.abort.is_some(),
                    shared.lease_grace,
                ) {
                    Step::Wait(at) => {
                        next = match (next, at) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        }
                    }
                    Step::Cancel => {
                        f.mark_lost(now);
                        warn!(queue = %shared.queue_name, job = %f.id,
                            "the lease's local deadline passed without a renewal: the lease may be gone; cancelling the job");
                        next = Some(next.map_or(now + shared.lease_grace, |n| {
                            n.min(now + shared.lease_grace)
                        }));
                    }
                    Step::Abort => {
                        if let Some(abort) = f.abort.take() {
                            warn!(queue = %shared.queue_name, job = %f.id,
                                "the job still ran after its lease was lost and the grace period passed; aborting it");
                            abort.abort();
                        }
                    }
                }
            }
            *shared.watch_next.lock().unwrap_or_else(|p| p.into_inner()) = next;
        }
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shared.deadlines_changed.notified() => {}
            _ = sleep => {}
        }
    }
}

/// The worker's reaper: a bounded reap pass (expired leases, due delayed jobs, the dead
/// set) every [`reap_interval`] of the lease length in force, until shutdown begins. A
/// failed pass is logged and tried again at the next one. The first pass comes at a
/// random point of the first interval, so a fleet started at once does not reap in step,
/// and a worker restarted after a crash soon frees the jobs its predecessor held.
async fn reap_now_and_then(shared: Arc<Shared>, tuning: Timing) {
    let mut wait = reap_interval(shared.lease_len()).mul_f64(rand::random::<f64>());
    let writer = format!("reaper:{}", shared.worker_id);
    let _firer = AbortOnDrop(tokio::spawn(fire_schedules_on_time(shared.clone())));
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = reap_interval(shared.lease_len());
        if let JobSource::One(queue) = &shared.queue {
            tune_visibility(&shared, queue, &writer, &tuning, wait).await;
        }
        // One queue: the first reap call's round trip reads the earliest schedule tick
        // too, and wakes the schedule firer when a schedule runs.
        let pass = match &shared.queue {
            JobSource::One(queue) => queue
                .reap_expired_and_first_tick(REAP_BATCH, REAP_CALLS)
                .await
                .map(|(o, first_tick)| {
                    if first_tick.is_some() {
                        shared.schedules_seen.notify_one();
                    }
                    o
                }),
            JobSource::Partitioned(_) => shared.queue.reap_expired(REAP_BATCH, REAP_CALLS).await,
        };
        match pass {
            Ok(o) => {
                let reaped = o.requeued + o.dead_lettered;
                Counters::add(&shared.counters.reaped, reaped);
                if reaped > 0 {
                    info!(queue = %shared.queue_name, requeued = o.requeued, dead_lettered = o.dead_lettered,
                        "reaped expired leases of workers that stopped renewing them");
                }
                debug!(queue = %shared.queue_name, promoted = o.promoted, restored = o.restored, more = o.more, "reap pass");
            }
            Err(err) => shared.redis_error("reap", &err, wait),
        }
    }
}

/// The longest the reaper's schedule firer waits between looks at the queue's schedules
/// while one runs (a schedule added meanwhile is seen within it).
const SCHEDULE_POLL: Duration = Duration::from_secs(1);

/// Aborts its task when dropped: the reaper's schedule firer ends with the reaper.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The reaper's schedule firer (docs/protocol.md, Schedules): fires the queue's due
/// schedules at their tick (plus up to 20 ms, so a fleet's firers do not all race for
/// it), looking again at least every [`SCHEDULE_POLL`] while a schedule runs. When none
/// runs it sends nothing: it waits for `Shared::schedules_seen`, which the reaper's
/// rounds notify when their round trip found a schedule tick, and the claim loop when a
/// wake marker found no job (a schedule put or resumed pushes one). Twins firing one
/// tick make one job. Not on a partitioned queue.
async fn fire_schedules_on_time(shared: Arc<Shared>) {
    let JobSource::One(queue) = &shared.queue else {
        return;
    };
    let mut retry = shared.delay();
    loop {
        let wait = match queue.fire_schedules(None).await {
            Ok(f) => {
                retry.reset();
                if f.fired + f.skipped > 0 {
                    debug!(queue = %shared.queue_name, fired = f.fired, skipped = f.skipped,
                        "fired schedules");
                }
                f.next_tick.map(|t| {
                    let until = Duration::from_millis(t.saturating_sub(f.now_ms).max(0) as u64);
                    until.min(SCHEDULE_POLL) + Duration::from_millis(rand::random::<u64>() % 20)
                })
            }
            // Tried again soon, as the claim loop does: a tick is still on time when it
            // fires less than its interval late, and a firer that waited a whole poll
            // after a Redis restart would skip the ticks of an `every 1s` schedule.
            Err(err) => {
                let wait = retry.next_delay().min(SCHEDULE_POLL);
                shared.redis_error("fire schedules", &err, wait);
                Some(wait)
            }
        };
        match wait {
            Some(wait) => tokio::select! {
                _ = shared.shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            },
            None => tokio::select! {
                _ = shared.shutdown.cancelled() => return,
                _ = shared.schedules_seen.notified() => {}
            },
        }
    }
}

/// A queue whose visibility timeout is `auto`: this reaper's turn at setting it, when no
/// other writer has it. A change is logged; the renewer takes the new value at its next
/// round, and claims take it from the queue at once.
async fn tune_visibility(
    shared: &Shared,
    queue: &Queue,
    writer: &str,
    timing: &Timing,
    wait: Duration,
) {
    match crate::queue::tuning::tune(queue, writer, timing).await {
        Ok(Some(t)) if t.changed() => {
            info!(queue = %shared.queue_name, from = %duration::format(t.from),
                to = %duration::format(t.decision.value), reason = %t.decision.reason,
                "visibility timeout (auto) changed");
        }
        Ok(Some(t)) => {
            debug!(queue = %shared.queue_name, value = %duration::format(t.from), reason = %t.decision.reason,
                "visibility timeout (auto) held");
        }
        Ok(None) => {}
        Err(err) => shared.redis_error("visibility tuning", &err, wait),
    }
}

/// Half the lease length (at least 100 ms, at most a minute), ±25 % at random: a job
/// whose worker died is back in line at most about 1.6 leases after its last renewal,
/// and a fleet's reapers drift apart instead of reaping in step.
fn reap_interval(lease: Duration) -> Duration {
    let base = (lease / 2).clamp(Duration::from_millis(100), Duration::from_secs(60));
    base.mul_f64(rand::random_range(0.75..1.25))
}

/// First SIGTERM or Ctrl-C: graceful shutdown. A second one: skip the wait.
async fn listen_for_signals(shared: Arc<Shared>, mut signals: Signals) {
    let which = signals.recv().await;
    info!("{which} received: shutting down gracefully (send it again to stop now)");
    shared.shutdown.cancel();
    let which = signals.recv().await;
    warn!("{which} received again: abandoning the jobs in flight");
    shared.hard_stop.cancel();
}

/// Waits for wake markers on a connection of its own, made on first use and dropped
/// when it fails or a wait is cut short.
#[derive(Default)]
struct Waker {
    conn: Option<Dedicated>,
    /// A partitioned queue's wait: one BLPOP per partition.
    partitions: PartitionWake,
}

impl Waker {
    /// BLPOP `wake` for up to `block`, or only `until` when given. Redis ends a blocking
    /// command's timeout on its own timer (to within ~100 ms), too coarse for a due time,
    /// so `until` is kept here: when it passes first, the connection is dropped with its
    /// BLPOP. A marker that BLPOP took before the drop was pushed before the claim that
    /// follows, so that claim sees its job: no wake-up is lost. True when BLPOP took a
    /// marker (always false on a partitioned queue, which has no schedule firer).
    async fn wait(
        &mut self,
        source: &JobSource,
        block: Duration,
        until: Option<Duration>,
    ) -> Result<bool> {
        let queue = match source {
            JobSource::One(queue) => queue,
            JobSource::Partitioned(queue) => {
                self.partitions.wait(queue, block, until).await;
                return Ok(false);
            }
        };
        // Taken out for the wait: a wait dropped halfway (shutdown, a poke) drops the
        // connection, whose reply would otherwise come to the next BLPOP.
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => queue.redis().dedicated(block).await?,
        };
        let secs = format!("{:.3}", block.as_secs_f64().max(0.001));
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(&queue.keys().wake).arg(secs);
        let blpop = cmd.query_async::<Value>(&mut conn);
        let result = match until {
            Some(until) => match tokio::time::timeout(until, blpop).await {
                Ok(result) => result,
                Err(_) => return Ok(false),
            },
            None => blpop.await,
        };
        let popped = match result {
            Ok(reply) => !matches!(reply, Value::Nil),
            Err(err) => {
                return Err(Error::from_redis(queue.name(), "BLPOP wake", err)
                    .with_user(queue.redis().user()));
            }
        };
        self.conn = Some(conn);
        Ok(popped)
    }
}
