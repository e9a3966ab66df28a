//! `Queue`: every script of the protocol as a typed operation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use redis::{Cmd, ToRedisArgs, Value};
use tokio::time::Instant;

use super::MAX_BATCH;
use super::connection::{Dedicated, Redis};
use super::durability::{Durability, Unconfirmed};
use super::error::{Error, Result};
use super::keys::{QueueKeys, validate_id};
use super::partitions::{DRAIN_PARTITIONS_FIELD, PARTITIONS_FIELD, PartitionRecord};
use super::rate_limit::{RateLimit, RateLimits};
use super::scripts::{SCRIPTS, Script};
use super::settings::{DURABILITY_FIELD, QueueSettings};
use super::stats::QueueStats;
use super::types::*;

mod outcomes;
pub use outcomes::{EVENTS_FIELD, MAX_EVENTS_LEN, NOTIFY_MARGIN, WAIT_RECHECK, parse_stream_id};

/// How many claim calls `Queue::claim` makes at most while each comes back empty with
/// `more`: each takes 100 or more orphans out of pending.
const CLAIM_ROUNDS: usize = 10;

/// How many times one claim is sent again, with the same request id, after its reply
/// was lost (a timeout or a broken connection), and the first wait between (doubled
/// each time). Script calls are never repeated by the connection itself.
const CLAIM_RETRIES: u32 = 3;
const CLAIM_RETRY_WAIT: Duration = Duration::from_millis(100);

/// The longest a request record of claim and settle_claim lives in Redis (the
/// visibility when shorter; `RECORD_MS` of lua/include/request_record.lua): a call sent
/// again with its request id after that is a new call.
pub const REQUEST_RECORD_LIFE: Duration = Duration::from_secs(60);

/// How long after its first send a claim or settle_claim is sent again with the same
/// request id, at most: half the record's life, so a resend reaches Redis while the
/// record is there even when it travels as long as a response timeout. After this the
/// call is given up (or, by the worker runtime, sent with a fresh request id).
pub const REQUEST_RETRY_WINDOW: Duration = Duration::from_secs(30);

/// How many ids a job enqueued without one gets at most: the first, and new ones while
/// enqueue reports the drawn id as taken.
pub const ID_DRAWS: usize = 5;

/// A handle on one queue. Cheap to clone; clones share the Redis connection.
#[derive(Clone, Debug)]
pub struct Queue {
    redis: Redis,
    keys: Arc<QueueKeys>,
    /// Per worker: the claim whose reply was lost on every try. The worker's next claim
    /// of the same visibility and at least as many jobs reuses its request id, so leases
    /// Redis made for it reach the worker instead of waiting for the reaper (with the
    /// first send's time, [`Claimed::first_sent`], from which their deadline counts).
    unanswered: Arc<Mutex<HashMap<String, Unanswered>>>,
    /// Payloads larger than this are refused before anything is sent.
    max_payload: usize,
    /// What enqueue, ack, fail, reap and the claims wait for (see [`Durability`]).
    durability: Durability,
    /// Where the ids of jobs enqueued without one come from.
    new_id: fn() -> String,
}

/// A claim request whose reply never arrived.
#[derive(Debug)]
struct Unanswered {
    n: usize,
    visibility: Option<Duration>,
    request: String,
    /// When the claim was first sent: a lease it made ends one visibility after that at
    /// the earliest, and its request id is reused only inside [`REQUEST_RETRY_WINDOW`]
    /// from then.
    first_sent: Instant,
}

/// The default client-side payload limit: 64 MiB. Redis takes up to 512 MiB per value
/// (`proto-max-bulk-len`), but a job that large stalls the server for every other
/// client while it is copied; a queue carries references to big data, not the data.
pub const DEFAULT_MAX_PAYLOAD: usize = 64 << 20;

impl Queue {
    /// The queue `prefix:{tag}` on `redis`.
    pub fn new(redis: Redis, prefix: &str, tag: &str) -> Result<Queue> {
        Ok(Queue {
            redis,
            keys: Arc::new(QueueKeys::new(prefix, tag)?),
            unanswered: Arc::default(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            durability: Durability::Primary,
            new_id: new_job_id,
        })
    }

    /// Draw the ids of jobs enqueued without one from `next` instead of [`new_job_id`]
    /// (an id that enqueue reports as taken is drawn again, up to [`ID_DRAWS`] times).
    pub fn id_source(mut self, next: fn() -> String) -> Queue {
        self.new_id = next;
        self
    }

    /// Wait for replication after enqueue, ack, fail, reap, claim and settle_claim (see
    /// [`Durability`]); the default is [`Durability::Primary`].
    pub fn durability(mut self, durability: Durability) -> Queue {
        self.durability = durability;
        self
    }

    pub fn durability_setting(&self) -> Durability {
        self.durability
    }

    /// Refuse payloads larger than `bytes` (default [`DEFAULT_MAX_PAYLOAD`]) before they
    /// are sent, with [`Error::InvalidArgument`] (`invalid payload: …`).
    pub fn max_payload(mut self, bytes: usize) -> Queue {
        self.max_payload = bytes;
        self
    }

    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// `prefix:{tag}`.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    /// Redis's clock in milliseconds since the epoch: the clock of every lease, score and
    /// time the queue keeps (the scripts read it too).
    /// On a Cluster it is the clock of the node that holds the queue's slot.
    pub async fn now_ms(&self) -> Result<i64> {
        let reply: Value = self
            .redis
            .query_on_node_of(&self.keys.meta, redis::cmd("TIME"))
            .await
            .map_err(|e| self.err("TIME", e))?;
        time_ms(reply).map_err(|detail| self.protocol("TIME", detail))
    }

    /// Check that this handle writes to a primary: a replica refuses every write
    /// (`READONLY`), so a worker or a reaper pointed at one could do nothing, and a reap
    /// with nothing to write would even seem to succeed. `ROLE` naming a replica is
    /// [`Error::ReadOnly`]. Behind Sentinel commands go to the primary the Sentinels name
    /// (a `READONLY` reply sends them to the new one): nothing to check. A user whose ACL
    /// does not grant `ROLE` is not checked (its writes fail with `ReadOnly` instead).
    pub async fn check_primary(&self) -> Result<()> {
        if self.redis.is_sentinel() {
            return Ok(());
        }
        let role = self
            .redis
            .query_on_node_of(&self.keys.meta, redis::cmd("ROLE"))
            .await
            .map_err(|e| self.err("ROLE", e));
        match role {
            Ok(Value::Array(items))
                if matches!(items.first().and_then(as_str), Some("slave" | "replica")) =>
            {
                Err(Error::ReadOnly {
                    queue: self.keys.name.clone(),
                    op: "writes",
                })
            }
            Ok(_) | Err(Error::Denied { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Load every script into the server(s) now, so the first calls need no NOSCRIPT
    /// round trip. Calls work without it: a missing script is loaded on demand.
    pub async fn load_scripts(&self) -> Result<()> {
        let mut conn = self.redis.clone();
        for script in SCRIPTS.all() {
            script
                .load(&mut conn)
                .await
                .map_err(|e| self.err("SCRIPT LOAD", e))?;
        }
        Ok(())
    }

    fn err(&self, op: &'static str, e: redis::RedisError) -> Error {
        Error::from_redis(&self.keys.name, op, e).with_user(self.redis.user())
    }

    /// A failed plain command on `key`: a WRONGTYPE reply names that key.
    fn err_on(&self, op: &'static str, key: &str, e: redis::RedisError) -> Error {
        match Error::from_redis(&self.keys.name, op, e).with_user(self.redis.user()) {
            Error::WrongType { queue, detail, .. } => Error::WrongType {
                queue,
                key: key.to_string(),
                detail,
            },
            other => other,
        }
    }

    fn protocol(&self, op: &'static str, detail: impl Into<String>) -> Error {
        Error::Protocol {
            queue: self.keys.name.clone(),
            op,
            detail: detail.into(),
        }
    }

    fn script_cmd<K: ToRedisArgs>(&self, script: &Script, job_keys: &[K]) -> Cmd {
        let mut cmd = script.cmd(7 + job_keys.len());
        for key in self.keys.queue_keys() {
            cmd.arg(key);
        }
        for key in job_keys {
            cmd.arg(key);
        }
        cmd.arg(&self.keys.job_prefix);
        cmd
    }

    async fn run(&self, script: &Script, cmd: &Cmd) -> Result<Value> {
        let mut conn = self.redis.clone();
        script
            .run(&mut conn, cmd)
            .await
            .map_err(|e| self.err(script.name, e))
    }

    /// [`Queue::run`] for the writes that [`Durability`] covers and that must be confirmed
    /// (enqueue, ack, fail, reap): fewer confirmations than asked is
    /// [`Error::NotReplicated`].
    async fn run_durable(&self, script: &Script, cmd: &Cmd) -> Result<Value> {
        match self.run_replicated(script, cmd).await? {
            (reply, None) => Ok(reply),
            (_, Some(short)) => Err(short.into_error(&self.keys.name, script.name)),
        }
    }

    /// [`Queue::run`] under the handle's [`Durability`]: under `Replicated`, `WAIT`
    /// follows the script on the same connection, in the same round trip. The script's
    /// reply comes back in any case (the script ran on the primary), with what `WAIT`
    /// answered when fewer replicas than asked confirmed it.
    async fn run_replicated(
        &self,
        script: &Script,
        cmd: &Cmd,
    ) -> Result<(Value, Option<Unconfirmed>)> {
        let Durability::Replicated { replicas, timeout } = self.durability else {
            return Ok((self.run(script, cmd).await?, None));
        };
        let timeout_ms = timeout.as_millis().max(1) as u64;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(cmd.clone());
        pipe.cmd("WAIT").arg(replicas).arg(timeout_ms);
        let mut conn = self.redis.clone();
        let mut loaded = false;
        loop {
            let replies: Vec<Value> = pipe
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err(script.name, e))?;
            let [reply, acked] = <[Value; 2]>::try_from(replies).map_err(|r| {
                self.protocol(script.name, format!("{} replies to script + WAIT", r.len()))
            })?;
            let reply = match reply {
                Value::ServerError(e) => {
                    let e: redis::RedisError = e.into();
                    // NOSCRIPT: the script did not run (nor did anything WAIT covers).
                    if !loaded
                        && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                    {
                        script
                            .load(&mut conn)
                            .await
                            .map_err(|e| self.err(script.name, e))?;
                        loaded = true;
                        continue;
                    }
                    return Err(self.err(script.name, e));
                }
                reply => reply,
            };
            let acked = match acked {
                Value::Int(n) => n,
                Value::ServerError(e) => return Err(self.err("WAIT", e.into())),
                other => return Err(self.protocol("WAIT", format!("{other:?}"))),
            };
            let short = (acked < i64::from(replicas)).then_some(Unconfirmed {
                acked,
                wanted: replicas,
                timeout_ms,
            });
            return Ok((reply, short));
        }
    }

    /// Enqueue one job. Its id is the caller's or a new compact one.
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let mut out = self.enqueue_many(vec![job]).await?;
        out.pop()
            .ok_or_else(|| self.protocol("enqueue", "empty reply"))
    }

    /// Enqueue many jobs, in calls of up to 1000. Returns one entry per job, in order.
    pub async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let mut out = Vec::with_capacity(jobs.len());
        let mut jobs = jobs.into_iter().peekable();
        while let Some(first) = jobs.peek() {
            // One call carries one set of per-job options and one unique mode and window
            // (or none): a run of jobs with the same.
            let options = first.options.clone();
            let shape = first.unique.call_shape();
            let mut chunk = Vec::new();
            while chunk.len() < MAX_BATCH
                && let Some(job) =
                    jobs.next_if(|j| j.options == options && j.unique.call_shape() == shape)
            {
                chunk.push(job);
            }
            out.extend(self.enqueue_chunk(chunk).await?);
        }
        Ok(out)
    }

    async fn enqueue_chunk(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let mut ids = Vec::with_capacity(jobs.len());
        for job in &jobs {
            job.options.validate()?;
            job.unique.validate()?;
            job.delay_arg()?;
            if job.payload.len() > self.max_payload {
                return Err(Error::InvalidArgument {
                    what: "payload",
                    reason: format!(
                        "{} bytes is over the limit of {} bytes of queue {} (raise the \
                         limit, or store the data elsewhere and enqueue a reference to it)",
                        job.payload.len(),
                        self.max_payload,
                        self.keys.name
                    ),
                });
            }
            let id = match &job.id {
                Some(id) => {
                    validate_id(id)?;
                    id.clone()
                }
                None => (self.new_id)().into(),
            };
            ids.push(id);
        }
        // A generated id that is taken (a collision, however unlikely with 71 random
        // bits) is no duplicate: its job is sent again under a new id.
        let mut created = vec![false; jobs.len()];
        let mut unique: Vec<Option<UniqueOutcome>> = vec![None; jobs.len()];
        let mut todo: Vec<usize> = (0..jobs.len()).collect();
        for draw in 1..=ID_DRAWS {
            let flags = self.enqueue_call(&jobs, &ids, &todo).await?;
            let mut again = Vec::new();
            for (&i, flag) in todo.iter().zip(flags) {
                let flag = match flag {
                    EnqueueFlag::Id(flag) => flag,
                    EnqueueFlag::Unique(outcome) => {
                        // a key held by another job: no collision, nothing to draw again
                        unique[i] = Some(outcome);
                        continue;
                    }
                };
                created[i] = flag == 1;
                if flag != 1 && jobs[i].id.is_none() && draw < ID_DRAWS {
                    ids[i] = (self.new_id)().into();
                    again.push(i);
                }
            }
            if again.is_empty() {
                break;
            }
            tracing::debug!(queue = %self.keys.name, n = again.len(),
                "generated job ids were taken; enqueueing those jobs under new ids");
            todo = again;
        }
        Ok(ids
            .into_iter()
            .zip(created)
            .zip(unique)
            .map(|((id, created), unique)| Enqueued {
                id,
                created,
                unique,
            })
            .collect())
    }

    /// One enqueue call for the jobs at `which`: an answer per job (1 when enqueued, 0
    /// when its id is taken, or its unique key's holder).
    async fn enqueue_call(
        &self,
        jobs: &[NewJob],
        ids: &[JobId],
        which: &[usize],
    ) -> Result<Vec<EnqueueFlag>> {
        let job_keys: Vec<Vec<u8>> = which
            .iter()
            .map(|&i| self.keys.job_key(ids[i].as_bytes()))
            .collect();
        let mut cmd = self.script_cmd(&SCRIPTS.enqueue, &job_keys);
        cmd.arg(which.len());
        for &i in which {
            cmd.arg(&ids[i])
                .arg(jobs[i].payload.as_ref())
                .arg(jobs[i].delay_arg()?);
        }
        // Every job of a call has the same unique mode and window (enqueue_many splits
        // runs by them), and a key each.
        if let Some((mode, window)) = which.first().and_then(|&i| jobs[i].unique.call_shape()) {
            cmd.arg("unique").arg(mode.as_str()).arg(window.to_string());
            for &i in which {
                cmd.arg(jobs[i].unique.key.as_deref().unwrap_or_default());
            }
        }
        // Every job of a call has the same options (enqueue_many splits runs by them).
        let options = which
            .first()
            .map(|&i| jobs[i].options.to_fields())
            .unwrap_or_default();
        if !options.is_empty() {
            cmd.arg("options");
            for (name, value) in options {
                cmd.arg(name).arg(value);
            }
        }
        let reply = self.run_durable(&SCRIPTS.enqueue, &cmd).await?;
        let flags =
            enqueue_flags(&reply).ok_or_else(|| self.protocol("enqueue", format!("{reply:?}")))?;
        if flags.len() != which.len() {
            return Err(self.protocol("enqueue", "reply length differs from the job count"));
        }
        Ok(flags)
    }

    /// Claim up to `n` ready jobs for `worker`. `visibility` overrides the queue's
    /// visibility timeout for these leases.
    pub async fn claim(
        &self,
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Vec<Lease>> {
        Ok(self.claim_rounds(n, worker, visibility).await?.leases)
    }

    /// [`Queue::claim`], with the reply's [`Claimed::first_sent`] (`more` is false).
    pub(crate) async fn claim_rounds(
        &self,
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Claimed> {
        // A reply with no lease but `more` met a run of orphans: each call takes at least
        // 100 of them out of pending, so a few more calls reach the jobs behind them.
        for _ in 0..CLAIM_ROUNDS {
            let claimed = self.claim_batch(n, worker, visibility).await?;
            if let Some(short) = claimed.unconfirmed
                && !claimed.leases.is_empty()
            {
                self.note_unconfirmed_claim(short, claimed.leases.len());
            }
            if !claimed.leases.is_empty() || !claimed.more {
                return Ok(Claimed {
                    more: false,
                    ..claimed
                });
            }
        }
        Ok(Claimed::default())
    }

    /// Log a claim the replicas did not confirm, for the callers of [`Queue::claim`],
    /// whose answer cannot carry it: a warning, then debug lines for 10 s (while the
    /// replicas are down every claim is one).
    fn note_unconfirmed_claim(&self, short: Unconfirmed, leases: usize) {
        static QUIET_UNTIL: Mutex<Option<std::time::Instant>> = Mutex::new(None);
        const QUIET: Duration = Duration::from_secs(10);
        let text = format!(
            "a claim of {leases} job(s) applied on the primary but not confirmed by {} \
             replica(s) ({short}): its leases are returned; a failover now may let another \
             worker claim them",
            short.wanted
        );
        let now = std::time::Instant::now();
        let mut quiet = QUIET_UNTIL.lock().unwrap_or_else(|e| e.into_inner());
        if quiet.is_some_and(|until| now < until) {
            tracing::debug!(queue = %self.keys.name, "{text}");
        } else {
            *quiet = Some(now + QUIET);
            tracing::warn!(queue = %self.keys.name,
                "{text}; claims not confirmed in the next 10s are logged at debug level");
        }
    }

    /// One logical claim, with its `more` flag (see [`Claimed`]). It carries a fresh
    /// request id, or the id of this worker's last claim (of the same `visibility`, for
    /// at most `n` jobs, sent first less than [`REQUEST_RETRY_WINDOW`] ago) whose reply
    /// was lost, while a lease it made could still be run (less than `visibility` since
    /// it was first sent; then [`Claimed::first_sent`] says when that was): then it is
    /// that claim again, with its `n`. After a lost reply (a timeout or a broken
    /// connection) the call is sent again with the same id and arguments, up to
    /// [`CLAIM_RETRIES`] times inside the window: Redis answers a repeated id with the
    /// leases it made for it, so none is leased to nobody.
    pub async fn claim_batch(
        &self,
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Claimed> {
        check_count("n", n)?;
        let now = Instant::now();
        let (request, n, first_sent) = match self.take_unanswered(worker, n, visibility, now) {
            Some(last) => (last.request, last.n, Some(last.first_sent)),
            None => (new_token(), n, None),
        };
        let mut wait = CLAIM_RETRY_WAIT;
        let mut retries = 0;
        loop {
            match self.claim_request(&request, n, worker, visibility).await {
                Err(err) if err.is_transient() => {
                    let since = first_sent.unwrap_or(now);
                    if retries == CLAIM_RETRIES || !within_window(since, wait) {
                        self.remember_unanswered(worker, n, visibility, request, since);
                        return Err(err);
                    }
                    retries += 1;
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                other => {
                    return other.map(|claimed| Claimed {
                        first_sent,
                        ..claimed
                    });
                }
            }
        }
    }

    /// One claim call with the caller's request id (1 to 256 bytes, e.g. 128 random bits
    /// in hex; see docs/protocol.md, claim). Sending the same id again from the same
    /// `worker` with the same `n` and `visibility` after a lost reply returns the leases
    /// the first call made (those still held) instead of new ones, while its record lives
    /// (the visibility, at most [`REQUEST_RECORD_LIFE`]); the id sent by another worker or
    /// with other arguments is refused ([`Error::Rejected`], `invalid request`).
    /// Under `replicated` [`Durability`] the call waits for the replicas; too few
    /// confirmations are reported in [`Claimed::unconfirmed`], never as an error (the
    /// leases are held).
    pub async fn claim_request(
        &self,
        request: &str,
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Claimed> {
        check_count("n", n)?;
        validate_request(request)?;
        let extra = [self.keys.orphans.clone(), self.keys.claim_request(request)];
        let mut cmd = self.script_cmd(&SCRIPTS.claim, &extra);
        cmd.arg(n)
            .arg(worker)
            .arg(visibility.map_or(0, |v| v.as_millis().max(1) as u64))
            .arg(request);
        for _ in 0..n {
            cmd.arg(new_token());
        }
        let (reply, unconfirmed) = self.run_replicated(&SCRIPTS.claim, &cmd).await?;
        let (jobs, more) = match reply {
            Value::Array(reply) => match <[Value; 2]>::try_from(reply) {
                Ok([Value::Array(jobs), Value::Int(more)]) => (jobs, more),
                Ok(other) => return Err(self.protocol("claim", format!("{other:?}"))),
                Err(reply) => return Err(self.protocol("claim", format!("{reply:?}"))),
            },
            other => return Err(self.protocol("claim", format!("{other:?}"))),
        };
        let leases = self.take_leases(jobs).await;
        Ok(Claimed {
            leases,
            more: more == 1,
            rate_wait: rate_wait(more),
            first_sent: None,
            unconfirmed,
        })
    }

    /// Settle finished leases and claim up to `n` jobs in one call (the `settle_claim`
    /// script, docs/protocol.md): each [`Settle`] is acked, failed or released exactly as
    /// by [`Queue::ack`], [`Queue::fail`] and [`Queue::release`] (a stale one changes
    /// nothing and never keeps the claim from happening), then the claim runs as
    /// [`Queue::claim_request`]. `request` identifies the call (1 to 256 bytes, e.g.
    /// [`new_token`]); a lost reply is sent again with the same request id up to
    /// [`CLAIM_RETRIES`] times inside [`REQUEST_RETRY_WINDOW`], and Redis answers a repeat
    /// from its record (the settle part is not applied twice). When this returns a
    /// transient error the call may have run: send it again with the same `request`,
    /// `worker`, `n`, `visibility` and settles, within [`REQUEST_RETRY_WINDOW`] of the
    /// first send, to learn its answer (other arguments under the same id are refused).
    /// Under `replicated` [`Durability`] the call waits for the replicas, as ack, fail
    /// and claim do; too few confirmations are not an error (the settles were applied on
    /// the primary and the leases are held there): the answer says so in
    /// [`Claimed::unconfirmed`], and its leases are to be run as any others.
    pub async fn settle_claim(
        &self,
        request: &str,
        settles: &[Settle<'_>],
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<SettledClaim> {
        self.settle_claim_since(request, Instant::now(), settles, n, worker, visibility)
            .await
    }

    /// [`Queue::settle_claim`] for a call first sent at `first_sent` (a caller sending
    /// it again after a transient error): it is resent here only while the resend
    /// leaves inside [`REQUEST_RETRY_WINDOW`] from then.
    pub async fn settle_claim_since(
        &self,
        request: &str,
        first_sent: Instant,
        settles: &[Settle<'_>],
        n: usize,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<SettledClaim> {
        check_count("n", n)?;
        validate_request(request)?;
        if settles.len() > MAX_BATCH {
            return Err(Error::InvalidArgument {
                what: "settles",
                reason: format!("{} is more than {MAX_BATCH} in one call", settles.len()),
            });
        }
        let extra = [self.keys.orphans.clone(), self.keys.claim_request(request)];
        let mut cmd = self.script_cmd(&SCRIPTS.settle_claim, &extra);
        let acks: Vec<usize> = (0..settles.len())
            .filter(|&i| matches!(settles[i], Settle::Ack(_)))
            .collect();
        let fails: Vec<usize> = (0..settles.len())
            .filter(|&i| !matches!(settles[i], Settle::Ack(_)))
            .collect();
        cmd.arg(n)
            .arg(worker)
            .arg(visibility.map_or(0, |v| v.as_millis().max(1) as u64))
            .arg(request)
            .arg(acks.len())
            .arg(fails.len());
        for &i in &acks {
            let lease = settles[i].lease();
            cmd.arg(lease.id).arg(lease.token);
        }
        for &i in &fails {
            match settles[i] {
                Settle::Fail {
                    lease,
                    error,
                    mode,
                    backoff,
                } => cmd
                    .arg(lease.id)
                    .arg(lease.token)
                    .arg(error)
                    .arg(mode.as_str())
                    .arg(backoff.as_arg()),
                Settle::Release(lease) => cmd
                    .arg(lease.id)
                    .arg(lease.token)
                    .arg("")
                    .arg("release")
                    .arg(0),
                Settle::Ack(_) => unreachable!("acks are listed apart"),
            };
        }
        results_block(&mut cmd, acks.iter().map(|&i| settles[i].lease().result))?;
        let mut wait = CLAIM_RETRY_WAIT;
        let mut retries = 0;
        let (reply, unconfirmed) = loop {
            let sent = self.run_replicated(&SCRIPTS.settle_claim, &cmd).await;
            match sent {
                Err(err)
                    if err.is_transient()
                        && retries < CLAIM_RETRIES
                        && within_window(first_sent, wait) =>
                {
                    retries += 1;
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                other => break other?,
            }
        };
        // One flat array: more, the leases' token, the ack results, the fail outcomes, then
        // id, payload, attempts, lease_until per leased job, then (when a leased job has
        // its own options) one array of timeout_ms, visibility_timeout_ms per leased job.
        let Value::Array(mut reply) = reply else {
            return Err(self.protocol("settle_claim", format!("{reply:?}")));
        };
        let head = 2 + acks.len() + fails.len();
        let options = match reply.last() {
            Some(Value::Array(_)) if reply.len() > head && (reply.len() - head) % 4 == 1 => {
                match reply.pop() {
                    Some(Value::Array(options)) => Some(options),
                    _ => None,
                }
            }
            _ => None,
        };
        if reply.len() < head || !(reply.len() - head).is_multiple_of(4) {
            return Err(self.protocol(
                "settle_claim",
                format!(
                    "{} entries for {} acks and {} fails",
                    reply.len(),
                    acks.len(),
                    fails.len()
                ),
            ));
        }
        let entries = reply.split_off(head);
        let Value::Int(more) = reply[0] else {
            return Err(self.protocol("settle_claim", "more unreadable"));
        };
        let token = reply[1].clone();
        let acked: Option<Vec<i64>> = reply[2..2 + acks.len()]
            .iter()
            .map(|v| match v {
                Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect();
        let acked = acked.ok_or_else(|| self.protocol("settle_claim", "ack results"))?;
        let failed: Option<Vec<FailOutcome>> = reply[2 + acks.len()..]
            .iter()
            .map(|v| match as_str(v) {
                Some("pending") => Some(FailOutcome::Pending),
                Some("delayed") => Some(FailOutcome::Delayed),
                Some("dead") => Some(FailOutcome::Dead),
                Some("stale") => Some(FailOutcome::Stale),
                _ => None,
            })
            .collect();
        let failed = failed.ok_or_else(|| self.protocol("settle_claim", "fail outcomes"))?;
        // Each job as claim replies it: id, payload, attempts, token, lease_until (and
        // its own timeout_ms, visibility_timeout_ms when the reply carries them).
        let leased = entries.len() / 4;
        let options = match options {
            Some(o) if o.len() == 2 * leased => Some(o),
            Some(o) => {
                return Err(self.protocol(
                    "settle_claim",
                    format!("{} option entries for {leased} leases", o.len()),
                ));
            }
            None => None,
        };
        let mut options = options.map(Vec::into_iter);
        let mut jobs = Vec::with_capacity(leased);
        let mut entries = entries.into_iter();
        while let (Some(id), Some(payload), Some(attempts), Some(lease_until)) = (
            entries.next(),
            entries.next(),
            entries.next(),
            entries.next(),
        ) {
            let mut job = vec![id, payload, attempts, token.clone(), lease_until];
            if let Some(options) = options.as_mut()
                && let (Some(timeout), Some(visibility)) = (options.next(), options.next())
                && (timeout != Value::Int(0) || visibility != Value::Int(0))
            {
                job.push(timeout);
                job.push(visibility);
            }
            jobs.push(Value::Array(job));
        }
        let mut settled = vec![Settled::Stale; settles.len()];
        for (&i, flag) in acks.iter().zip(acked) {
            settled[i] = if flag == 1 {
                Settled::Acked
            } else {
                Settled::Stale
            };
        }
        for (&i, outcome) in fails.iter().zip(failed) {
            settled[i] = match outcome {
                FailOutcome::Stale => Settled::Stale,
                moved => Settled::Moved(moved),
            };
        }
        let leases = self.take_leases(jobs).await;
        Ok(SettledClaim {
            settled,
            claimed: Claimed {
                leases,
                more: more == 1,
                rate_wait: rate_wait(more),
                first_sent: None,
                unconfirmed,
            },
        })
    }

    /// The lost claim of `worker` to send again in place of a new claim of `n` jobs
    /// (its request id, its `n` and when it was first sent), when it still can be.
    fn take_unanswered(
        &self,
        worker: &str,
        n: usize,
        visibility: Option<Duration>,
        now: Instant,
    ) -> Option<Unanswered> {
        let mut unanswered = self.unanswered.lock().unwrap_or_else(|e| e.into_inner());
        let last = unanswered.remove(worker)?;
        // A replay answers at most the `last.n` leases recorded, so a claim of the same
        // visibility with as many free slots or more can be that claim again, sent with
        // its own arguments (a record answers only the same ones; a worker's free slots
        // only grow while it waits to try again). A smaller claim could not take them
        // all, and a claim after the retry window would find the record gone: those are
        // new requests, and the lost claim's leases go to the reaper. Once a visibility
        // has passed since the first send, a lease it made has no time left that the
        // caller could count on (see `Claimed::first_sent`), and a fresh claim under the
        // old id would be given that past deadline too: a new request then.
        let expired = visibility.is_some_and(|v| now >= last.first_sent + v);
        (last.n <= n
            && last.visibility == visibility
            && !expired
            && within_window(last.first_sent, Duration::ZERO))
        .then_some(last)
    }

    fn remember_unanswered(
        &self,
        worker: &str,
        n: usize,
        visibility: Option<Duration>,
        request: String,
        first_sent: Instant,
    ) {
        let mut unanswered = self.unanswered.lock().unwrap_or_else(|e| e.into_inner());
        unanswered.insert(
            worker.to_string(),
            Unanswered {
                n,
                visibility,
                request,
                first_sent,
            },
        );
    }

    /// The leases of a claim reply. An entry this client cannot read as a lease is
    /// ended on its own, so it never costs the jobs claimed beside it (see
    /// [`Queue::refuse_entry`]).
    async fn take_leases(&self, jobs: Vec<Value>) -> Vec<Lease> {
        let mut leases = Vec::with_capacity(jobs.len());
        for job in jobs {
            match parse_lease(job) {
                Ok(lease) => leases.push(lease),
                Err(entry) => self.refuse_entry(entry).await,
            }
        }
        leases
    }

    /// End the lease of a claim entry the client cannot use with `fail` in mode `retry`
    /// (the queue's backoff): the attempt is charged, so an entry no client can read
    /// ends in the dead-letter set with the reason as its last error, where people see
    /// it. `release` would charge nothing and put the job at the front of pending, to be
    /// claimed and refused again at once, forever. An entry without a readable id and
    /// token cannot be addressed: its lease expires for the reaper.
    async fn refuse_entry(&self, entry: Unreadable) {
        let Some((id, token)) = entry.lease else {
            tracing::warn!(queue = %self.keys.name, reason = %entry.reason,
                "a claim entry could not be read and has no id and token to end it by; its lease will expire");
            return;
        };
        let error = format!(
            "the client could not read its claim entry: {}",
            entry.reason
        );
        let lease = LeaseRef {
            id: id.as_bytes(),
            token: &token,
            ..Default::default()
        };
        let ended = self
            .end_lease(
                lease,
                &error,
                FailMode::Retry.as_str(),
                Backoff::Policy.as_arg(),
            )
            .await;
        match ended {
            Ok(outcome) => tracing::warn!(queue = %self.keys.name, job = %id, ?outcome,
                reason = %entry.reason, "a claim entry could not be read; its lease was failed"),
            Err(err) => tracing::warn!(queue = %self.keys.name, job = %id, error = %err,
                reason = %entry.reason, "a claim entry could not be read nor failed; its lease will expire"),
        }
    }

    /// Claim one job, if one is ready.
    pub async fn claim_one(
        &self,
        worker: &str,
        visibility: Option<Duration>,
    ) -> Result<Option<Lease>> {
        Ok(self.claim(1, worker, visibility).await?.pop())
    }

    /// Ack one lease: true when accepted, false when stale (the lease was taken away).
    pub async fn ack<'a>(&self, lease: impl Into<LeaseRef<'a>>) -> Result<bool> {
        Ok(self.ack_many(&[lease.into()]).await?.first() == Some(&true))
    }

    /// Ack many leases; one flag per lease, in order.
    pub async fn ack_many(&self, leases: &[LeaseRef<'_>]) -> Result<Vec<bool>> {
        match self.ack_many_applied(leases).await? {
            (flags, None) => Ok(flags),
            (_, Some(short)) => Err(short.into_error(&self.keys.name, SCRIPTS.ack.name)),
        }
    }

    /// [`Queue::ack_many`] that, under `replicated` [`Durability`], reports too few
    /// replica confirmations beside the flags instead of as
    /// [`Error::NotReplicated`]: the acks were applied on the primary either way (a
    /// worker logs it and goes on; a failover before the replicas catch up may bring the
    /// jobs back, to run again).
    pub async fn ack_many_applied(
        &self,
        leases: &[LeaseRef<'_>],
    ) -> Result<(Vec<bool>, Option<Unconfirmed>)> {
        let mut out = Vec::with_capacity(leases.len());
        let mut short = None;
        for chunk in leases.chunks(MAX_BATCH) {
            let job_keys: Vec<Vec<u8>> = chunk.iter().map(|l| self.keys.job_key(l.id)).collect();
            let mut cmd = self.script_cmd(&SCRIPTS.ack, &job_keys);
            cmd.arg(chunk.len());
            for lease in chunk {
                cmd.arg(lease.id).arg(lease.token);
            }
            results_block(&mut cmd, chunk.iter().map(|l| l.result))?;
            let (reply, unconfirmed) = self.run_replicated(&SCRIPTS.ack, &cmd).await?;
            short = Unconfirmed::worst(short, unconfirmed);
            let flags = int_array(&reply).filter(|f| f.len() == chunk.len());
            let flags = flags.ok_or_else(|| self.protocol("ack", format!("{reply:?}")))?;
            out.extend(flags.into_iter().map(|f| f == 1));
        }
        Ok((out, short))
    }

    /// Extend one lease by `by` from now (the queue's visibility timeout when `None`).
    /// Returns the new lease_until, or `None` when the lease is stale.
    pub async fn extend<'a>(
        &self,
        lease: impl Into<LeaseRef<'a>>,
        by: Option<Duration>,
    ) -> Result<Option<i64>> {
        Ok(self.extend_many(&[lease.into()], by).await?.pop().flatten())
    }

    /// Extend many leases in one call per 1000; one result per lease, in order: the new
    /// lease_until, or `None` when the lease is stale or its job's cancellation was asked
    /// for (see [`Queue::renew_many`], which tells the two apart).
    pub async fn extend_many(
        &self,
        leases: &[LeaseRef<'_>],
        by: Option<Duration>,
    ) -> Result<Vec<Option<i64>>> {
        Ok(self
            .renew_many(leases, by)
            .await?
            .into_iter()
            .map(|r| match r {
                Renewal::Extended(until) => Some(until),
                Renewal::Cancelled | Renewal::Stale => None,
            })
            .collect())
    }

    /// Extend many leases in one call per 1000; one [`Renewal`] per lease, in order.
    pub async fn renew_many(
        &self,
        leases: &[LeaseRef<'_>],
        by: Option<Duration>,
    ) -> Result<Vec<Renewal>> {
        let ms = by.map_or(0, |d| d.as_millis().max(1) as u64);
        let mut out = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(MAX_BATCH) {
            let job_keys: Vec<Vec<u8>> = chunk.iter().map(|l| self.keys.job_key(l.id)).collect();
            let mut cmd = self.script_cmd(&SCRIPTS.extend, &job_keys);
            cmd.arg(ms).arg(chunk.len());
            for lease in chunk {
                cmd.arg(lease.id).arg(lease.token);
            }
            // The progress of the leases that carry one: `progress`, then i, percent,
            // message per lease (i counts from 1 in this call).
            if chunk.iter().any(|l| l.progress.is_some()) {
                cmd.arg("progress");
                for (i, lease) in chunk.iter().enumerate() {
                    if let Some(p) = lease.progress {
                        cmd.arg(i + 1).arg(p.percent).arg(&p.message);
                    }
                }
            }
            let reply = self.run(&SCRIPTS.extend, &cmd).await?;
            let until = int_array(&reply).filter(|f| f.len() == chunk.len());
            let until = until.ok_or_else(|| self.protocol("extend", format!("{reply:?}")))?;
            out.extend(until.into_iter().map(|u| match u {
                u if u > 0 => Renewal::Extended(u),
                -1 => Renewal::Cancelled,
                _ => Renewal::Stale,
            }));
        }
        Ok(out)
    }

    /// End a lease as failed: retried later (per `backoff`) or dead-lettered.
    pub async fn fail<'a>(
        &self,
        lease: impl Into<LeaseRef<'a>>,
        error: &str,
        mode: FailMode,
        backoff: Backoff,
    ) -> Result<FailOutcome> {
        self.end_lease(lease.into(), error, mode.as_str(), backoff.as_arg())
            .await
    }

    /// [`Queue::fail`] that reports too few replica confirmations beside the outcome
    /// instead of as an error (see [`Queue::ack_many_applied`]).
    pub async fn fail_applied<'a>(
        &self,
        lease: impl Into<LeaseRef<'a>>,
        error: &str,
        mode: FailMode,
        backoff: Backoff,
    ) -> Result<(FailOutcome, Option<Unconfirmed>)> {
        self.end_lease_applied(lease.into(), error, mode.as_str(), backoff.as_arg())
            .await
    }

    /// [`Queue::release`] that reports too few replica confirmations beside the answer
    /// instead of as an error (see [`Queue::ack_many_applied`]).
    pub async fn release_applied<'a>(
        &self,
        lease: impl Into<LeaseRef<'a>>,
    ) -> Result<(bool, Option<Unconfirmed>)> {
        let (outcome, short) = self
            .end_lease_applied(lease.into(), "", "release", 0)
            .await?;
        Ok((outcome != FailOutcome::Stale, short))
    }

    /// Hand back a lease on a job this worker did not finish (it is shutting down): the
    /// job goes to the front of pending and the attempt is not charged (attempts drops
    /// by one), so a routine restart never dead-letters a job. True when released,
    /// false when stale (the lease was taken away).
    pub async fn release<'a>(&self, lease: impl Into<LeaseRef<'a>>) -> Result<bool> {
        let outcome = self.end_lease(lease.into(), "", "release", 0).await?;
        Ok(outcome != FailOutcome::Stale)
    }

    /// The `fail` script in any of its modes.
    async fn end_lease(
        &self,
        lease: LeaseRef<'_>,
        error: &str,
        mode: &str,
        backoff: i64,
    ) -> Result<FailOutcome> {
        match self.end_lease_applied(lease, error, mode, backoff).await? {
            (outcome, None) => Ok(outcome),
            (_, Some(short)) => Err(short.into_error(&self.keys.name, SCRIPTS.fail.name)),
        }
    }

    async fn end_lease_applied(
        &self,
        lease: LeaseRef<'_>,
        error: &str,
        mode: &str,
        backoff: i64,
    ) -> Result<(FailOutcome, Option<Unconfirmed>)> {
        let job_keys = [self.keys.job_key(lease.id)];
        let mut cmd = self.script_cmd(&SCRIPTS.fail, &job_keys);
        cmd.arg(lease.id)
            .arg(lease.token)
            .arg(error)
            .arg(mode)
            .arg(backoff);
        let (reply, short) = self.run_replicated(&SCRIPTS.fail, &cmd).await?;
        let outcome = match as_str(&reply) {
            Some("pending") => FailOutcome::Pending,
            Some("delayed") => FailOutcome::Delayed,
            Some("dead") => FailOutcome::Dead,
            Some("stale") => FailOutcome::Stale,
            _ => return Err(self.protocol("fail", format!("{reply:?}"))),
        };
        Ok((outcome, short))
    }

    /// One reaper pass over at most `batch` expired leases.
    pub async fn reap(&self, batch: usize) -> Result<ReapOutcome> {
        check_count("batch", batch)?;
        let mut cmd = self.script_cmd(&SCRIPTS.reap, std::slice::from_ref(&self.keys.orphans));
        cmd.arg(batch);
        // Under `replicated`, a reap's outcome counts once replicas confirmed it.
        let reply = self.run_durable(&SCRIPTS.reap, &cmd).await?;
        self.reap_outcome(&reply)
    }

    fn reap_outcome(&self, reply: &Value) -> Result<ReapOutcome> {
        match int_array(reply).as_deref() {
            Some(&[requeued, dead_lettered, more, promoted, restored]) => Ok(ReapOutcome {
                requeued: requeued.max(0) as u64,
                dead_lettered: dead_lettered.max(0) as u64,
                more: more == 1,
                promoted: promoted.max(0) as u64,
                restored: restored.max(0) as u64,
            }),
            _ => Err(self.protocol("reap", format!("{reply:?}"))),
        }
    }

    /// Reap until no expired lease remains or `max_calls` calls were made.
    pub async fn reap_expired(&self, batch: usize, max_calls: usize) -> Result<ReapOutcome> {
        let mut total = ReapOutcome::default();
        for _ in 0..max_calls.max(1) {
            let pass = self.reap(batch).await?;
            total += pass;
            if !pass.more {
                break;
            }
        }
        Ok(total)
    }

    /// [`Queue::reap_expired`], with the earliest schedule tick (ms, Redis clock; `None`
    /// when no schedule runs) read in the first reap call's round trip: a worker's reaper
    /// learns whether its schedule firer has anything to look at without a round trip of
    /// its own. Under `replicated` durability the read is a round trip of its own.
    pub async fn reap_expired_and_first_tick(
        &self,
        batch: usize,
        max_calls: usize,
    ) -> Result<(ReapOutcome, Option<i64>)> {
        check_count("batch", batch)?;
        let (mut total, first_tick) = if matches!(self.durability, Durability::Primary) {
            let mut cmd = self.script_cmd(&SCRIPTS.reap, std::slice::from_ref(&self.keys.orphans));
            cmd.arg(batch);
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            pipe.cmd("ZRANGE")
                .arg(&self.keys.schedule_due)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
            pipe.add_command(cmd);
            let mut conn = self.redis.clone();
            let replies: Vec<Value> = pipe
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err(SCRIPTS.reap.name, e))?;
            let [due, reply] = <[Value; 2]>::try_from(replies).map_err(|r| {
                self.protocol(
                    SCRIPTS.reap.name,
                    format!("{} replies to ZRANGE + reap", r.len()),
                )
            })?;
            let first_tick = self.first_tick(due)?;
            let pass = match reply {
                Value::ServerError(e) => {
                    let e: redis::RedisError = e.into();
                    if e.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
                        return Err(self.err(SCRIPTS.reap.name, e));
                    }
                    // The server forgot the script (restart, failover): reap() loads it.
                    self.reap(batch).await?
                }
                reply => self.reap_outcome(&reply)?,
            };
            (pass, first_tick)
        } else {
            let mut conn = self.redis.clone();
            let due: Value = redis::cmd("ZRANGE")
                .arg(&self.keys.schedule_due)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err_on("schedules", &self.keys.schedule_due, e))?;
            (self.reap(batch).await?, self.first_tick(due)?)
        };
        if total.more && max_calls > 1 {
            total += self.reap_expired(batch, max_calls - 1).await?;
        }
        Ok((total, first_tick))
    }

    /// The earliest tick of a `ZRANGE schedule_due 0 0 WITHSCORES` reply.
    fn first_tick(&self, due: Value) -> Result<Option<i64>> {
        if let Value::ServerError(e) = due {
            return Err(self.err_on("schedules", &self.keys.schedule_due, e.into()));
        }
        let due: Vec<(String, f64)> = redis::from_redis_value(due)
            .map_err(|e| self.protocol("schedules", format!("schedule_due: {e}")))?;
        Ok(due.first().map(|(_, t)| *t as i64))
    }

    /// Counts and counters, and whether the queue is paused, in one round trip.
    pub async fn stats(&self) -> Result<QueueStats> {
        let cmd = self.script_cmd(&SCRIPTS.stats, std::slice::from_ref(&self.keys.orphans));
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("HGET").arg(&self.keys.meta).arg(PAUSED_FIELD);
        pipe.add_command(cmd.clone());
        let mut conn = self.redis.clone();
        let replies: Vec<Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("stats", e))?;
        let mut replies = replies.into_iter();
        let paused = match replies.next() {
            Some(Value::ServerError(e)) => {
                return Err(self.err_on("HGET meta", &self.keys.meta, e.into()));
            }
            Some(v) => v,
            None => return Err(self.protocol("stats", "fewer replies than commands")),
        };
        let mut stats = match replies.next() {
            Some(Value::ServerError(e)) => {
                let e: redis::RedisError = e.into();
                if e.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
                    return Err(self.err(SCRIPTS.stats.name, e));
                }
                // the server forgot the script (restart, failover): run() loads it
                let reply = self.run(&SCRIPTS.stats, &cmd).await?;
                self.parse_stats(&reply)?
            }
            Some(v) => self.parse_stats(&v)?,
            None => return Err(self.protocol("stats", "fewer replies than commands")),
        };
        let paused = match &paused {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        };
        set_paused(&mut stats, paused.as_deref());
        Ok(stats)
    }

    /// Pause the queue: claims lease nothing (and promote nothing) until [`Queue::resume`];
    /// enqueues, acks, fails, extends and reaps go on. False when it was paused already.
    pub async fn pause(&self) -> Result<bool> {
        let mut cmd = self.script_cmd::<String>(&SCRIPTS.manage, &[]);
        cmd.arg("pause");
        Ok(self.count_reply(&SCRIPTS.manage, &cmd).await? == 1)
    }

    /// Resume a paused queue (its sleeping workers get a wake marker per pending job, at
    /// most 1024). False when it was not paused.
    pub async fn resume(&self) -> Result<bool> {
        let mut cmd = self.script_cmd::<String>(&SCRIPTS.manage, &[]);
        cmd.arg("resume");
        Ok(self.count_reply(&SCRIPTS.manage, &cmd).await? == 1)
    }

    /// Run a delayed job now: it goes to the front of pending. False (nothing changed)
    /// when the job is not delayed.
    pub async fn run_now(&self, id: impl AsRef<[u8]>) -> Result<bool> {
        let id = id.as_ref();
        check_existing_id(id)?;
        let mut cmd = self.script_cmd(&SCRIPTS.manage, &[self.keys.job_key(id)]);
        cmd.arg("run").arg(id);
        Ok(self.count_reply(&SCRIPTS.manage, &cmd).await? == 1)
    }

    /// Delete one job that is pending, delayed or dead (its hash and its list entry); a
    /// leased or finished job is left alone and named in the answer.
    pub async fn delete_job(&self, id: impl AsRef<[u8]>) -> Result<Deletion> {
        let id = id.as_ref();
        check_existing_id(id)?;
        let mut cmd = self.script_cmd(&SCRIPTS.manage, &[self.keys.job_key(id)]);
        cmd.arg("delete").arg(id);
        let reply = self.run(&SCRIPTS.manage, &cmd).await?;
        let status = as_str(&reply)
            .ok_or_else(|| self.protocol("manage", format!("{reply:?}")))?
            .to_string();
        Ok(match status.as_str() {
            "absent" => Deletion::Absent,
            "pending" => Deletion::Deleted(JobStatus::Pending),
            "delayed" => Deletion::Deleted(JobStatus::Delayed),
            "dead" => Deletion::Deleted(JobStatus::Dead),
            _ => Deletion::Kept(status),
        })
    }

    /// Cancel one job: a pending or delayed job ends at once (status `cancelled`, kept for
    /// the completed retention); a leased one is marked, and its worker stops it at its
    /// next renewal. A dead, finished or cancelled job is left alone and named.
    pub async fn cancel(&self, id: impl AsRef<[u8]>) -> Result<Cancellation> {
        let id = id.as_ref();
        check_existing_id(id)?;
        let mut cmd = self.script_cmd(&SCRIPTS.manage, &[self.keys.job_key(id)]);
        cmd.arg("cancel").arg(id);
        let reply = self.run(&SCRIPTS.manage, &cmd).await?;
        let status = as_str(&reply)
            .ok_or_else(|| self.protocol("manage", format!("{reply:?}")))?
            .to_string();
        Ok(match status.as_str() {
            "absent" => Cancellation::Absent,
            "pending" => Cancellation::Cancelled(JobStatus::Pending),
            "delayed" => Cancellation::Cancelled(JobStatus::Delayed),
            "processing" => Cancellation::Requested,
            _ => Cancellation::Kept(status),
        })
    }

    /// End a lease whose job's cancellation was asked for ([`Renewal::Cancelled`]): it
    /// leaves processing as `cancelled`, neither retried nor dead. False (nothing changed)
    /// when the lease is not the caller's, or no cancellation was asked for.
    pub async fn end_cancelled<'a>(&self, lease: impl Into<LeaseRef<'a>>) -> Result<bool> {
        let lease = lease.into();
        let mut cmd = self.script_cmd(&SCRIPTS.manage, &[self.keys.job_key(lease.id)]);
        cmd.arg("cancelled").arg(lease.id).arg(lease.token);
        Ok(self.count_reply(&SCRIPTS.manage, &cmd).await? == 1)
    }

    fn parse_stats(&self, reply: &Value) -> Result<QueueStats> {
        let Value::Array(items) = reply else {
            return Err(self.protocol("stats", format!("{reply:?}")));
        };
        let mut pairs = Vec::with_capacity(items.len() / 2);
        for pair in items.chunks(2) {
            match pair {
                [name, Value::Int(v)] => {
                    let name =
                        as_str(name).ok_or_else(|| self.protocol("stats", "non-string name"))?;
                    pairs.push((name, *v));
                }
                _ => return Err(self.protocol("stats", "a value is not an integer")),
            }
        }
        Ok(QueueStats::from_pairs(pairs))
    }

    /// Move dead jobs back to pending (attempts reset). Returns how many moved.
    pub async fn redrive(&self, selection: &Selection) -> Result<u64> {
        self.dead_op(&SCRIPTS.redrive, selection).await
    }

    /// Delete dead jobs with their hashes. Returns how many were deleted.
    pub async fn purge(&self, selection: &Selection) -> Result<u64> {
        self.dead_op(&SCRIPTS.purge, selection).await
    }

    /// Forget, on purpose, up to `n` set-aside ids (longest set aside first) that still
    /// have no job hash; ids whose hash is back are left for the reaper. A forgotten id
    /// is remembered for [`PURGED_REMEMBERED_MS`]: the reaper still puts it back if its
    /// hash comes back meanwhile. Returns how many were forgotten (`purge --orphans`).
    pub async fn purge_orphans(&self, n: usize) -> Result<u64> {
        check_count("n", n)?;
        let mut cmd = self.script_cmd(&SCRIPTS.purge, std::slice::from_ref(&self.keys.orphans));
        cmd.arg("orphans").arg(n);
        self.count_reply(&SCRIPTS.purge, &cmd).await
    }

    async fn dead_op(&self, script: &Script, selection: &Selection) -> Result<u64> {
        let mut total = 0u64;
        match selection {
            Selection::Oldest(n) => {
                check_count("n", *n)?;
                let mut cmd = self.script_cmd::<String>(script, &[]);
                cmd.arg("oldest").arg(*n);
                total += self.count_reply(script, &cmd).await?;
            }
            Selection::Ids(_) | Selection::IdBytes(_) => {
                let ids: Vec<&[u8]> = match selection {
                    Selection::Ids(ids) => ids.iter().map(|id| id.as_bytes()).collect(),
                    Selection::IdBytes(ids) => ids.iter().map(Vec::as_slice).collect(),
                    Selection::Oldest(_) => unreachable!(),
                };
                if ids.is_empty() {
                    return Err(Error::InvalidArgument {
                        what: "ids",
                        reason: "at least one id is needed".into(),
                    });
                }
                for chunk in ids.chunks(MAX_BATCH) {
                    for id in chunk {
                        // An existing id, as another client may have written it: the
                        // protocol's bounds only (this client makes stricter ones).
                        check_existing_id(id)?;
                    }
                    let job_keys: Vec<Vec<u8>> =
                        chunk.iter().map(|id| self.keys.job_key(id)).collect();
                    let mut cmd = self.script_cmd(script, &job_keys);
                    cmd.arg("ids");
                    for id in chunk {
                        cmd.arg(id);
                    }
                    total += self.count_reply(script, &cmd).await?;
                }
            }
        }
        Ok(total)
    }

    async fn count_reply(&self, script: &Script, cmd: &Cmd) -> Result<u64> {
        match self.run(script, cmd).await? {
            Value::Int(n) => Ok(n.max(0) as u64),
            other => Err(self.protocol(script.name, format!("{other:?}"))),
        }
    }

    /// Write the queue's settings into `meta`.
    pub async fn configure(&self, settings: &QueueSettings) -> Result<()> {
        settings.validate()?;
        let mut conn = self.redis.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(&self.keys.meta)
            .arg(settings.to_fields())
            .ignore();
        let absent = settings.absent_fields();
        if !absent.is_empty() {
            pipe.cmd("HDEL").arg(&self.keys.meta).arg(absent).ignore();
        }
        let _: () = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HSET meta", &self.keys.meta, e))?;
        Ok(())
    }

    /// Write fields of `meta` the scripts do not read (the records of `auto`, see
    /// [`super::auto_visibility`]) or `visibility_timeout_ms` with them.
    pub async fn write_meta(&self, fields: &[(&str, String)]) -> Result<()> {
        if fields.is_empty() {
            return Ok(());
        }
        let mut conn = self.redis.clone();
        let _: Value = redis::cmd("HSET")
            .arg(&self.keys.meta)
            .arg(fields)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HSET meta", &self.keys.meta, e))?;
        Ok(())
    }

    /// Set or remove the queue's rate limits (docs/protocol.md, *Rate limits*): `None`
    /// leaves a limit as it is, `Some(None)` removes it, `Some(Some(limit))` sets it. The
    /// next claim keeps the new limit.
    pub async fn set_rate_limits(
        &self,
        queue: Option<Option<RateLimit>>,
        per_key: Option<Option<RateLimit>>,
    ) -> Result<()> {
        let mut set: Vec<(&str, String)> = Vec::new();
        let mut remove: Vec<&str> = Vec::new();
        for (field, change) in [
            (super::rate_limit::RATE_LIMIT_FIELD, queue),
            (super::rate_limit::RATE_LIMIT_PER_KEY_FIELD, per_key),
        ] {
            match change {
                Some(Some(limit)) => {
                    RateLimit::new(limit.max, limit.per).map_err(|reason| {
                        Error::InvalidArgument {
                            what: "rate limit",
                            reason,
                        }
                    })?;
                    set.push((field, limit.to_field()));
                }
                Some(None) => remove.push(field),
                None => {}
            }
        }
        self.write_meta(&set).await?;
        if !remove.is_empty() {
            let mut conn = self.redis.clone();
            let _: Value = redis::cmd("HDEL")
                .arg(&self.keys.meta)
                .arg(&remove)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err_on("HDEL meta", &self.keys.meta, e))?;
        }
        Ok(())
    }

    /// The queue's rate limits, as the scripts read them from `meta`.
    pub async fn rate_limits(&self) -> Result<RateLimits> {
        Ok(RateLimits::from_fields(&self.meta_fields().await?))
    }

    /// Take the queue's tuning turn for `hold`: `SET <queue>:tuning <holder> NX PX`, in
    /// the queue's slot. True when taken: no other writer tunes the queue until it ends.
    pub async fn take_tuning_turn(&self, holder: &str, hold: Duration) -> Result<bool> {
        let key = format!("{}:tuning", self.keys.name);
        let mut conn = self.redis.clone();
        let reply: Value = redis::cmd("SET")
            .arg(&key)
            .arg(holder)
            .arg("NX")
            .arg("PX")
            .arg(hold.as_millis().max(1) as u64)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("SET tuning", &key, e))?;
        Ok(!matches!(reply, Value::Nil))
    }

    /// The `durability` field of `meta` for this handle's durability: absent for
    /// `primary` (what a worker without the field assumes).
    fn published(&self) -> Option<String> {
        match self.durability {
            Durability::Primary => None,
            replicated => Some(replicated.to_string()),
        }
    }

    /// Write this handle's durability into `meta` (`durability`), where workers started
    /// without a durability of their own read it ([`Queue::published_durability`]);
    /// `primary` removes the field.
    pub async fn publish_durability(&self) -> Result<()> {
        let mut conn = self.redis.clone();
        let cmd = match self.published() {
            Some(value) => {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(&self.keys.meta).arg(DURABILITY_FIELD).arg(value);
                cmd
            }
            None => {
                let mut cmd = redis::cmd("HDEL");
                cmd.arg(&self.keys.meta).arg(DURABILITY_FIELD);
                cmd
            }
        };
        let _: Value = cmd
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HSET meta", &self.keys.meta, e))?;
        Ok(())
    }

    /// The durability published in `meta` (by the operator, from `spec.durability`):
    /// `None` when the field is absent. A value that does not read is an error naming
    /// the queue.
    pub async fn published_durability(&self) -> Result<Option<Durability>> {
        let mut conn = self.redis.clone();
        let value: Option<String> = redis::cmd("HGET")
            .arg(&self.keys.meta)
            .arg(DURABILITY_FIELD)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HGET meta", &self.keys.meta, e))?;
        value
            .map(|v| {
                v.parse().map_err(|e: Error| Error::InvalidArgument {
                    what: "durability",
                    reason: format!("field durability of {} holds {v:?}: {e}", self.keys.meta),
                })
            })
            .transpose()
    }

    /// The partition layout this queue records in its `meta` (see [`PartitionRecord`]):
    /// meaningful on a partitioned queue's own tag `T` (partition 0 of no layout in
    /// particular, but a partition of every one). `None` when no count is recorded.
    pub async fn partition_record(&self) -> Result<Option<PartitionRecord>> {
        let mut conn = self.redis.clone();
        let (partitions, drain): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(&self.keys.meta)
            .arg(PARTITIONS_FIELD)
            .arg(DRAIN_PARTITIONS_FIELD)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HMGET meta", &self.keys.meta, e))?;
        PartitionRecord::from_fields(&self.keys.meta, partitions.as_deref(), drain.as_deref())
    }

    /// Write `record` into this queue's `meta` (both fields at once: `drain_partitions`
    /// removed when no resize is under way). Call it on the queue's own tag `T`.
    pub async fn record_partitions(&self, record: &PartitionRecord) -> Result<()> {
        super::partitions::validate_partitions(record.partitions)?;
        if let Some(d) = record.drain {
            super::partitions::validate_partitions(d)?;
        }
        let (partitions, drain) = record.to_fields();
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("HSET")
            .arg(&self.keys.meta)
            .arg(PARTITIONS_FIELD)
            .arg(partitions)
            .ignore();
        match drain {
            Some(d) => pipe
                .cmd("HSET")
                .arg(&self.keys.meta)
                .arg(DRAIN_PARTITIONS_FIELD)
                .arg(d)
                .ignore(),
            None => pipe
                .cmd("HDEL")
                .arg(&self.keys.meta)
                .arg(DRAIN_PARTITIONS_FIELD)
                .ignore(),
        };
        let mut conn = self.redis.clone();
        let () = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HSET meta", &self.keys.meta, e))?;
        Ok(())
    }

    /// The settings in `meta` (defaults for absent fields).
    pub async fn settings(&self) -> Result<QueueSettings> {
        Ok(QueueSettings::from_fields(&self.meta_fields().await?))
    }

    /// The queue's `meta` hash as stored (see [`QueueSettings::from_fields`] and
    /// [`QueueSettings::ignored_fields`]).
    pub async fn meta_fields(&self) -> Result<HashMap<String, String>> {
        let mut conn = self.redis.clone();
        redis::cmd("HGETALL")
            .arg(&self.keys.meta)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HGETALL meta", &self.keys.meta, e))
    }

    /// Check that each of the queue's keys (the seven and `orphans`) is absent or of its
    /// protocol type.
    pub async fn check_key_types(&self) -> Result<()> {
        let mut pipe = redis::pipe();
        for key in self.keys.all_keys() {
            pipe.cmd("TYPE").arg(key);
        }
        let mut conn = self.redis.clone();
        let types: Vec<String> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("TYPE", e))?;
        self.check_types(&types)
    }

    /// False when none of the queue's keys exist: nothing was ever enqueued, configured
    /// or counted under this name (often a mistyped tag or prefix).
    pub async fn exists(&self) -> Result<bool> {
        let mut conn = self.redis.clone();
        let n: u64 = redis::cmd("EXISTS")
            .arg(&self.keys.all_keys()[..])
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("EXISTS", e))?;
        Ok(n > 0)
    }

    fn check_types(&self, types: &[String]) -> Result<()> {
        let expected = [
            "list", "zset", "zset", "zset", "hash", "hash", "list", "zset",
        ];
        for ((key, want), got) in self.keys.all_keys().iter().zip(expected).zip(types) {
            if got != "none" && got != want {
                return Err(Error::WrongType {
                    queue: self.keys.name.clone(),
                    key: key.to_string(),
                    detail: format!("found a {got}, expected a {want}"),
                });
            }
        }
        Ok(())
    }

    /// One upkeep pass, as the operator runs it for each queue: check the seven keys'
    /// types, make `meta` hold `settings`, reap expired leases (at most `max_calls` reap
    /// calls of `batch`) and read the stats.
    ///
    /// When `meta` already holds the settings and there is nothing to reap or trim, all of
    /// it is one pipelined round trip that writes nothing. Otherwise `meta` is written
    /// (only when it differs), reap runs and the stats are read again. A wrong-typed key
    /// fails the pass before anything is written.
    pub async fn maintain(
        &self,
        settings: &QueueSettings,
        batch: usize,
        max_calls: usize,
    ) -> Result<Maintenance> {
        settings.validate()?;
        check_count("batch", batch)?;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for key in self.keys.all_keys() {
            pipe.cmd("TYPE").arg(key);
        }
        pipe.cmd("HGETALL").arg(&self.keys.meta);
        pipe.cmd("ZRANGE")
            .arg(&self.keys.dead)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        pipe.cmd("TIME");
        pipe.add_command(self.script_cmd(&SCRIPTS.stats, std::slice::from_ref(&self.keys.orphans)));
        pipe.cmd("ZRANGE")
            .arg(&self.keys.schedule_due)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        let mut conn = self.redis.clone();
        let replies: Vec<Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("maintain", e))?;
        let mut round_trips = 1;
        let mut replies = replies.into_iter();
        let mut next = |op: &'static str| -> Result<Value> {
            match replies.next() {
                Some(Value::ServerError(e)) => Err(self.err(op, e.into())),
                Some(v) => Ok(v),
                None => Err(self.protocol("maintain", "fewer replies than commands")),
            }
        };
        let mut types = Vec::with_capacity(8);
        for _ in 0..8 {
            let v = next("TYPE")?;
            types.push(as_str(&v).unwrap_or_default().to_string());
        }
        self.check_types(&types)?;
        let meta: HashMap<String, String> = redis::from_redis_value(next("HGETALL meta")?)
            .map_err(|e| self.protocol("maintain", format!("meta: {e}")))?;
        let oldest_dead: Vec<(String, f64)> = redis::from_redis_value(next("ZRANGE dead")?)
            .map_err(|e| self.protocol("maintain", format!("dead: {e}")))?;
        let now_ms = time_ms(next("TIME")?).map_err(|detail| self.protocol("maintain", detail))?;
        let stats_reply = replies.next();
        let mut stats = match stats_reply {
            Some(Value::ServerError(e)) => {
                let e: redis::RedisError = e.into();
                if e.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
                    return Err(self.err(SCRIPTS.stats.name, e));
                }
                // The server forgot the script (restart, failover): stats() loads it.
                round_trips += 2;
                self.stats().await?
            }
            Some(v) => self.parse_stats(&v)?,
            None => return Err(self.protocol("maintain", "fewer replies than commands")),
        };
        // The earliest schedule tick: fired below when it is due (a wrong-typed key is
        // reported by the fire call).
        let first_tick = match replies.next() {
            Some(Value::Array(v)) => v.get(1).and_then(|t| match t {
                Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<f64>().ok(),
                Value::Double(d) => Some(*d),
                _ => None,
            }),
            _ => Some(f64::MIN),
        };

        set_paused(&mut stats, meta.get(PAUSED_FIELD).map(String::as_str));
        let configured = !meta_holds(&meta, settings);
        if configured {
            self.configure(settings).await?;
            round_trips += 1;
        }
        if meta.get(DURABILITY_FIELD) != self.published().as_ref() {
            self.publish_durability().await?;
            round_trips += 1;
        }
        let oldest_dead = oldest_dead.first().map(|(_, at)| *at as i64);
        let mut reaped = ReapOutcome::default();
        if configured || reap_due(&stats, settings, oldest_dead, now_ms) {
            for _ in 0..max_calls.max(1) {
                let pass = self.reap(batch).await?;
                round_trips += 1;
                reaped += pass;
                if !pass.more {
                    break;
                }
            }
            stats = self.stats().await?;
            round_trips += 1;
        }
        let mut fired = Fired::default();
        if first_tick.is_some_and(|t| t as i64 <= now_ms) {
            fired = self.fire_schedules(Some(now_ms)).await?;
            round_trips += 3;
        }
        let record = super::auto_visibility::VisibilityRecord::from_fields(&meta);
        let auto_owner = record.auto.map(|_| record.owner);
        Ok(Maintenance {
            recorded_partitions: [PARTITIONS_FIELD, DRAIN_PARTITIONS_FIELD]
                .map(|field| meta.get(field).cloned()),
            auto_owner,
            configured,
            reaped,
            stats,
            round_trips,
            fired,
        })
    }

    /// Read one job's hash; `None` when it does not exist. Any id is read as it is,
    /// whoever wrote it (only the ids this client makes are checked).
    pub async fn job(&self, id: impl AsRef<[u8]>) -> Result<Option<JobInfo>> {
        let id = id.as_ref();
        if id.is_empty() {
            return Err(Error::InvalidArgument {
                what: "job id",
                reason: "must not be empty".into(),
            });
        }
        let mut conn = self.redis.clone();
        let key = self.keys.job_key(id);
        let fields: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HGETALL job", &String::from_utf8_lossy(&key), e))?;
        if fields.is_empty() {
            return Ok(None);
        }
        Ok(Some(info_from_fields(id, &fields)))
    }

    /// Each job's hash as [`Queue::job`] reads it, but with only the first `n` bytes of
    /// its payload (the preview script, `lua/preview.lua`: the reply is bounded whatever
    /// the payloads' size), and the whole payload's length; `None` for an id whose hash
    /// is absent or whose job key holds another type.
    pub async fn previews(&self, ids: &[&[u8]], n: usize) -> Result<Vec<Option<(JobInfo, usize)>>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH) {
            if chunk.iter().any(|id| id.is_empty()) {
                return Err(Error::InvalidArgument {
                    what: "job id",
                    reason: "must not be empty".into(),
                });
            }
            let keys: Vec<Vec<u8>> = chunk.iter().map(|id| self.keys.job_key(id)).collect();
            let mut cmd = self.script_cmd(&SCRIPTS.preview, &keys);
            cmd.arg(n);
            let Value::Array(jobs) = self.run(&SCRIPTS.preview, &cmd).await? else {
                return Err(self.protocol("preview", "not an array"));
            };
            if jobs.len() != chunk.len() {
                return Err(self.protocol("preview", format!("{} replies", jobs.len())));
            }
            for (id, job) in chunk.iter().zip(jobs) {
                let Value::Array(items) = job else {
                    return Err(self.protocol("preview", format!("{job:?}")));
                };
                if items.is_empty() {
                    out.push(None);
                    continue;
                }
                let bytes = |v: &Value| match v {
                    Value::BulkString(b) => b.clone(),
                    Value::SimpleString(s) => s.clone().into_bytes(),
                    Value::Int(i) => i.to_string().into_bytes(),
                    _ => Vec::new(),
                };
                let len = match items.first() {
                    Some(Value::Int(len)) => *len,
                    other => return Err(self.protocol("preview", format!("{other:?}"))),
                };
                let mut fields: HashMap<String, Vec<u8>> = items[2..]
                    .chunks(2)
                    .filter(|pair| pair.len() == 2)
                    .map(|pair| {
                        (
                            String::from_utf8_lossy(&bytes(&pair[0])).into_owned(),
                            bytes(&pair[1]),
                        )
                    })
                    .collect();
                if len >= 0 {
                    fields.insert("payload".into(), bytes(&items[1]));
                }
                out.push(Some((info_from_fields(id, &fields), len.max(0) as usize)));
            }
        }
        Ok(out)
    }

    /// Ids of dead jobs, oldest death first, with their time of death (ms).
    pub async fn dead_ids(&self, offset: usize, count: usize) -> Result<Vec<(JobId, i64)>> {
        self.scored_ids(&self.keys.dead, "ZRANGE dead", offset, count)
            .await
    }

    /// Ids of delayed jobs, the next due first, with the time each is due (ms).
    pub async fn delayed_ids(&self, count: usize) -> Result<Vec<(JobId, i64)>> {
        self.scored_ids(&self.keys.delayed, "ZRANGE delayed", 0, count)
            .await
    }

    /// Ids of claimed jobs, the first lease to end first, with the time it ends (ms).
    pub async fn processing_ids(&self, count: usize) -> Result<Vec<(JobId, i64)>> {
        self.scored_ids(&self.keys.processing, "ZRANGE processing", 0, count)
            .await
    }

    /// Where job `id` is filed in the sorted set `key` (run-at, lease end or time of
    /// death, ms), or `None` when it is not there.
    pub async fn score_of(
        &self,
        key: &str,
        op: &'static str,
        id: impl AsRef<[u8]>,
    ) -> Result<Option<i64>> {
        let mut conn = self.redis.clone();
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(key)
            .arg(id.as_ref())
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on(op, key, e))?;
        Ok(score.map(|s| s as i64))
    }

    /// Whether `id` is in the queue's orphans set (set aside, or forgotten by purge and
    /// remembered), with the type of its job key; `None` when it is not there.
    pub async fn set_aside(&self, id: impl AsRef<[u8]>) -> Result<Option<SetAside>> {
        let id = id.as_ref();
        let Some(score) = self
            .score_of(&self.keys.orphans, "ZSCORE orphans", id)
            .await?
        else {
            return Ok(None);
        };
        let key = self.keys.job_key(id);
        let mut conn = self.redis.clone();
        let key_type: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("TYPE job", &String::from_utf8_lossy(&key), e))?;
        Ok(Some(SetAside {
            at: score.abs(),
            purged: score < 0,
            key_type,
        }))
    }

    /// A range of the sorted set `key`, lowest score first, with the scores (ms).
    async fn scored_ids(
        &self,
        key: &str,
        op: &'static str,
        offset: usize,
        count: usize,
    ) -> Result<Vec<(JobId, i64)>> {
        // Redis ranks are i64: a page past that (an offset from a flag or a URL) is empty.
        const LAST_RANK: usize = i64::MAX as usize;
        if offset > LAST_RANK {
            return Ok(Vec::new());
        }
        let end = offset.saturating_add(count.max(1) - 1).min(LAST_RANK);
        let mut conn = self.redis.clone();
        let items: Vec<(JobId, f64)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(offset)
            .arg(end)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on(op, key, e))?;
        Ok(items.into_iter().map(|(id, at)| (id, at as i64)).collect())
    }

    /// How long until the earliest delayed job is due, by Redis's clock: `None` when no
    /// job is delayed, zero when one is due already. Read-only (two reads: the delayed
    /// set's first entry, then `TIME`); an idle worker uses it to wake when a delay or a
    /// backoff ends instead of at its next poll.
    pub async fn next_due_in(&self) -> Result<Option<Duration>> {
        let mut conn = self.redis.clone();
        let first: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(&self.keys.delayed)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("ZRANGE delayed", &self.keys.delayed, e))?;
        let Some(&(_, run_at)) = first.first() else {
            return Ok(None);
        };
        let now = self.now_ms().await?;
        let left = (run_at as i64).saturating_sub(now).max(0);
        Ok(Some(Duration::from_millis(left as u64)))
    }

    /// Ids next in line to be claimed, the next one first: the highest priority's first,
    /// each priority's in its order (as strict claims take them).
    pub async fn pending_ids(&self, count: usize) -> Result<Vec<JobId>> {
        Ok(self.pending_page(0, count.max(1)).await?.0)
    }

    /// A page of the ready jobs in claim order (highest priority first, as strict claims
    /// take them): `want` ids after the first `skip`, and how many jobs are ready in all.
    /// One round trip for the lengths, one for the page.
    pub async fn pending_page(&self, skip: usize, want: usize) -> Result<(Vec<JobId>, usize)> {
        let lists = self.keys.ready_lists();
        let mut conn = self.redis.clone();
        let mut pipe = redis::pipe();
        for key in &lists {
            pipe.cmd("LLEN").arg(key);
        }
        let lens: Vec<usize> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("LLEN pending", &self.keys.pending, e))?;
        let total = lens.iter().sum();
        // the range of each list the page covers; next in line is a list's tail
        let mut pipe = redis::pipe();
        let (mut skip, mut want, mut asked) = (skip, want, 0);
        for (key, &len) in lists.iter().zip(&lens) {
            if want == 0 {
                break;
            }
            if skip >= len {
                skip -= len;
                continue;
            }
            let take = want.min(len - skip);
            pipe.cmd("LRANGE")
                .arg(key)
                .arg(-((skip + take) as i64))
                .arg(-((skip + 1) as i64));
            asked += 1;
            skip = 0;
            want -= take;
        }
        if asked == 0 {
            return Ok((Vec::new(), total));
        }
        let pages: Vec<Vec<JobId>> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("LRANGE pending", &self.keys.pending, e))?;
        let ids = pages
            .into_iter()
            .flat_map(|page| page.into_iter().rev())
            .collect();
        Ok((ids, total))
    }

    /// The queue's priority mode (`meta`'s `priority_mode`; strict when absent).
    pub async fn priority_mode(&self) -> Result<super::PriorityMode> {
        let mut conn = self.redis.clone();
        let v: Option<String> = redis::cmd("HGET")
            .arg(&self.keys.meta)
            .arg(super::PRIORITY_MODE_FIELD)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("HGET meta", &self.keys.meta, e))?;
        Ok(super::PriorityMode::from_field(v.as_deref()))
    }

    /// Set the queue's priority mode: how claims choose among the priorities' ready lists.
    pub async fn set_priority_mode(&self, mode: super::PriorityMode) -> Result<()> {
        self.write_meta(&[(super::PRIORITY_MODE_FIELD, mode.as_str().to_string())])
            .await
    }

    /// A consumer for `worker`, whose `next_job` blocks on its own connection.
    pub fn consumer(&self, worker: impl Into<String>) -> Consumer {
        Consumer {
            queue: self.clone(),
            worker: worker.into(),
            visibility: None,
            wake: None,
        }
    }
}

/// Claims jobs for one worker, waiting for new ones on the queue's `wake` list.
pub struct Consumer {
    queue: Queue,
    worker: String,
    visibility: Option<Duration>,
    wake: Option<Dedicated>,
}

/// How long one BLPOP on `wake` waits at most, a safety net: a delayed job that becomes
/// the earliest pushes a marker, and the wait ends when the earliest one is due.
const WAKE_WAIT: Duration = Duration::from_secs(1);

/// The shortest wait for a due time, so a job due now that a claim could not take yet
/// does not turn the wait into a busy loop.
const MIN_DUE_WAIT: Duration = Duration::from_millis(5);

impl Consumer {
    /// Use this visibility timeout for the leases it claims instead of the queue's.
    pub fn visibility(mut self, visibility: Option<Duration>) -> Consumer {
        self.visibility = visibility;
        self
    }

    pub fn worker(&self) -> &str {
        &self.worker
    }

    /// Claim one job, waiting up to `timeout` for one to be ready.
    pub async fn next_job(&mut self, timeout: Duration) -> Result<Option<Lease>> {
        Ok(self.next_jobs(1, timeout).await?.pop())
    }

    /// Claim up to `n` jobs, waiting up to `timeout` for at least one.
    pub async fn next_jobs(&mut self, n: usize, timeout: Duration) -> Result<Vec<Lease>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let claimed = self
                .queue
                .claim_rounds(n, &self.worker, self.visibility)
                .await?;
            let leases = claimed.leases;
            if !leases.is_empty() {
                return Ok(leases);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(leases);
            }
            // The rate limit: no claim before its next slot opens.
            if let Some(wait) = claimed.rate_wait {
                tokio::time::sleep(wait.min(left)).await;
                continue;
            }
            // Unreadable: wait the full time, the next claim will say what is wrong.
            let due_in = self.queue.next_due_in().await.ok().flatten();
            let until = due_in
                .map(|d| (d + Duration::from_millis(1)).max(MIN_DUE_WAIT))
                .filter(|d| *d < left.min(WAKE_WAIT));
            self.wait_for_wake(left.min(WAKE_WAIT), until).await?;
        }
    }

    /// BLPOP `wake` on this consumer's own connection for up to `wait`, or only `until`
    /// when given. Redis times a blocking command out on its own coarse timer, so `until`
    /// is kept here: when it passes first the connection is dropped with its BLPOP (a
    /// marker that BLPOP took was pushed before the claim that follows, which sees it).
    async fn wait_for_wake(&mut self, wait: Duration, until: Option<Duration>) -> Result<()> {
        if self.wake.is_none() {
            self.wake = Some(self.queue.redis.dedicated(WAKE_WAIT).await?);
        }
        let conn = self.wake.as_mut().expect("set above");
        // BLPOP takes seconds; fractions are accepted since Redis 6.
        let secs = format!("{:.3}", wait.as_secs_f64().max(0.001));
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(&self.queue.keys.wake).arg(secs);
        let blpop = cmd.query_async::<Value>(conn);
        let result = match until {
            Some(until) => match tokio::time::timeout(until, blpop).await {
                Ok(result) => result,
                Err(_) => {
                    // Its reply would otherwise come to the next BLPOP.
                    self.wake = None;
                    return Ok(());
                }
            },
            None => blpop.await,
        };
        if let Err(e) = result {
            // A broken connection is made anew next time.
            self.wake = None;
            return Err(self.queue.err("BLPOP wake", e));
        }
        Ok(())
    }
}

/// `meta` holds every field of `settings` with exactly the text `configure` writes.
fn meta_holds(meta: &HashMap<String, String>, settings: &QueueSettings) -> bool {
    settings
        .to_fields()
        .iter()
        .all(|(name, value)| meta.get(*name) == Some(value))
        && settings
            .absent_fields()
            .iter()
            .all(|name| !meta.contains_key(*name))
}

/// Whether a reap call would change anything, judged from what one round trip saw: an
/// expired lease, a due delayed job, a set-aside id (to look at again), a dead set over
/// `dead_max_len`, or a dead job older than `dead_retention` (the same tests reap makes;
/// `settings` are the ones `meta` holds).
pub fn reap_due(
    stats: &QueueStats,
    settings: &QueueSettings,
    oldest_dead_ms: Option<i64>,
    now_ms: i64,
) -> bool {
    // due delayed jobs must run even when no worker claims; set-aside ids are looked at
    // again each pass
    if stats.expired > 0 || stats.due > 0 || stats.orphaned > 0 {
        return true;
    }
    if settings.dead_max_len > 0 && stats.dead > settings.dead_max_len {
        return true;
    }
    let retention = settings.dead_retention.as_millis().min(i64::MAX as u128) as i64;
    retention > 0 && oldest_dead_ms.is_some_and(|died| died < now_ms.saturating_sub(retention))
}

/// A `TIME` reply (seconds, microseconds) as milliseconds since the epoch.
fn time_ms(reply: Value) -> std::result::Result<i64, String> {
    let (secs, micros): (i64, i64) =
        redis::from_redis_value(reply).map_err(|e| format!("TIME: {e}"))?;
    Ok(secs * 1000 + micros / 1000)
}

/// Whether a call first sent at `first_sent` can still be sent again with its request id
/// after waiting `wait`: the resend leaves inside [`REQUEST_RETRY_WINDOW`].
pub(crate) fn within_window(first_sent: Instant, wait: Duration) -> bool {
    first_sent.elapsed() + wait < REQUEST_RETRY_WINDOW
}

/// A claim request id is 1 to 256 bytes (it is part of a key name).
fn validate_request(request: &str) -> Result<()> {
    if request.is_empty() || request.len() > 256 {
        return Err(Error::InvalidArgument {
            what: "claim request id",
            reason: format!("{} bytes is not between 1 and 256", request.len()),
        });
    }
    Ok(())
}

fn check_count(what: &'static str, n: usize) -> Result<()> {
    if (1..=MAX_BATCH).contains(&n) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            what,
            reason: format!("{n} is not between 1 and {MAX_BATCH}"),
        })
    }
}

/// A job's hash, read as its fields, as [`JobInfo`].
fn info_from_fields(id: &[u8], fields: &HashMap<String, Vec<u8>>) -> JobInfo {
    let text = |name: &str| {
        fields
            .get(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let int = |name: &str| text(name).and_then(|v| v.parse::<i64>().ok());
    // claimed_at and the worker are in the claim_token of the last lease; a job of the
    // older layout has them as fields of their own.
    let lease = fields.get("claim_token").and_then(|t| parse_claim_token(t));
    JobInfo {
        id: id.into(),
        payload: fields
            .get("payload")
            .map(|p| Bytes::from(p.clone()))
            .unwrap_or_default(),
        // A job enqueued ready holds only its payload: no status means pending.
        status: text("status").or_else(|| {
            fields
                .contains_key("payload")
                .then(|| JobStatus::Pending.as_str().to_string())
        }),
        attempts: int("attempts").unwrap_or(0).max(0) as u32,
        // as the scripts read it: one digit 1..9, anything else 0
        priority: match fields.get("priority").map(Vec::as_slice) {
            Some(&[d]) if (b'1'..=b'9').contains(&d) => d - b'0',
            _ => 0,
        },
        enqueued_at: int("enqueued_at"),
        claimed_at: int("claimed_at").or(lease.as_ref().map(|l| l.0)),
        lease_until: int("lease_until"),
        last_error: text("last_error"),
        worker: text("worker").or(lease.map(|l| l.1)),
        errors: AttemptError::from_fields(fields),
        unique_key: fields.get("unique_key").map(|k| JobId::from(&k[..])),
        unique_mode: text("unique_mode"),
        progress: int("progress").map(|p| Progress {
            percent: p.clamp(0, 100) as u8,
            message: text("progress_msg").unwrap_or_default(),
            at: int("progress_at"),
        }),
        result: fields.get("result").map(|r| Bytes::from(r.clone())),
        options: JobOptions::from_fields(fields),
    }
}

/// A claim's `more` below 0: the queue's rate limit left no slot, the next opens in
/// -more ms (docs/protocol.md, *Rate limits*).
fn rate_wait(more: i64) -> Option<Duration> {
    (more < 0).then(|| Duration::from_millis(more.unsigned_abs()))
}

/// The claimed_at (ms) and the worker a claim_token carries: claim writes it as
/// `<claimed_at>:<byte length of the worker>:<worker>:<token>`, claimed_at 1 to 16
/// decimal digits. None for a token of the older layout (the caller's token alone) and
/// for any other bytes (a token is stored data: it may be anything).
pub fn parse_claim_token(token: &[u8]) -> Option<(i64, String)> {
    let colon = |b: &[u8]| b.iter().position(|&c| c == b':');
    // 1..=digits decimal digits, nothing else (no sign, no spaces)
    let decimal = |b: &[u8], digits: usize| -> Option<u64> {
        if b.is_empty() || b.len() > digits || !b.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(b).ok()?.parse().ok()
    };
    let at = colon(token)?;
    let claimed_at = i64::try_from(decimal(&token[..at], 16)?).ok()?;
    let rest = &token[at + 1..];
    let at = colon(rest)?;
    // a length longer than what follows is refused below; 19 digits fit any usize here
    let len = usize::try_from(decimal(&rest[..at], 19)?).ok()?;
    let rest = &rest[at + 1..];
    if rest.len() <= len || rest[len] != b':' {
        return None;
    }
    Some((
        claimed_at,
        String::from_utf8_lossy(&rest[..len]).into_owned(),
    ))
}

/// The `results` block of ack and settle_claim: the word, then i, result for each ack
/// (i from 1, in the call's ack order) that carries one; nothing when none does. A result
/// over [`MAX_RESULT`] bytes is refused before anything is sent.
fn results_block<'a>(
    cmd: &mut redis::Cmd,
    results: impl Iterator<Item = Option<&'a [u8]>>,
) -> Result<()> {
    let mut first = true;
    for (i, r) in results.enumerate() {
        let Some(r) = r else { continue };
        if r.len() > MAX_RESULT {
            return Err(Error::InvalidArgument {
                what: "result",
                reason: format!(
                    "{} bytes is more than the {MAX_RESULT} a job's result may hold",
                    r.len()
                ),
            });
        }
        if first {
            cmd.arg("results");
            first = false;
        }
        cmd.arg(i + 1).arg(r);
    }
    Ok(())
}

fn as_str(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// One entry of enqueue's reply: 1 or 0, or `{2, holder}` / `{3, holder}` for a unique
/// key held by another job.
enum EnqueueFlag {
    Id(i64),
    Unique(UniqueOutcome),
}

fn enqueue_flags(v: &Value) -> Option<Vec<EnqueueFlag>> {
    let Value::Array(items) = v else { return None };
    items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Some(EnqueueFlag::Id(*n)),
            Value::Array(pair) => match pair.as_slice() {
                [Value::Int(code), Value::BulkString(id)] => {
                    let existing = JobId::from(&id[..]);
                    match code {
                        2 => Some(EnqueueFlag::Unique(UniqueOutcome::Refused { existing })),
                        3 => Some(EnqueueFlag::Unique(UniqueOutcome::Replaced { existing })),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn int_array(v: &Value) -> Option<Vec<i64>> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// A claim entry that is not a lease the client can use; `lease` holds its id and token
/// when those could be read, so the lease can still be ended.
#[derive(Debug, PartialEq)]
struct Unreadable {
    lease: Option<(JobId, String)>,
    reason: String,
}

/// One claim entry, `{id, payload, attempts, token, lease_until}`, and for a job with
/// its own options `timeout_ms, visibility_timeout_ms` after them (0: not its own). The
/// id is bytes, as Redis holds it: any id makes a lease.
fn parse_lease(v: Value) -> std::result::Result<Lease, Unreadable> {
    let unreadable = |lease, reason: &str| Unreadable {
        lease,
        reason: reason.to_string(),
    };
    let Value::Array(fields) = v else {
        return Err(unreadable(None, "not an array"));
    };
    let id = match fields.first() {
        Some(Value::BulkString(b)) => Some(JobId::from(b.as_slice())),
        _ => None,
    };
    let token = match fields.get(3) {
        Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    };
    let (Some(id), Some(token)) = (id, token) else {
        return Err(unreadable(None, "no id or token"));
    };
    let lease = Some((id.clone(), token.clone()));
    if fields.len() != 5 && fields.len() != 7 {
        return Err(unreadable(
            lease,
            &format!("{} fields, not 5 or 7", fields.len()),
        ));
    }
    // a job's own option: a positive integer of ms; 0 when the job has none
    let own = |i: usize| match fields.get(i) {
        None | Some(Value::Int(0)) => Ok(None),
        Some(Value::Int(ms)) if *ms > 0 => Ok(Some(Duration::from_millis(*ms as u64))),
        Some(_) => Err(()),
    };
    let (Ok(timeout), Ok(visibility)) = (own(5), own(6)) else {
        return Err(unreadable(
            lease,
            "timeout_ms or visibility_timeout_ms is not a whole number of ms",
        ));
    };
    let payload = match &fields[1] {
        Value::BulkString(b) => Bytes::from(b.clone()),
        _ => return Err(unreadable(lease, "the payload is not a string")),
    };
    let attempts = match fields[2] {
        Value::Int(n) => n.max(0) as u32,
        _ => return Err(unreadable(lease, "attempts is not an integer")),
    };
    let lease_until = match fields[4] {
        Value::Int(n) => n,
        _ => return Err(unreadable(lease, "lease_until is not an integer")),
    };
    Ok(Lease {
        id,
        payload,
        attempts,
        token,
        lease_until,
        partition: 0,
        visibility,
        timeout,
    })
}

/// An id that names a job already in Redis: 1 to [`MAX_ID_LEN`](super::MAX_ID_LEN) bytes
/// of any kind, the protocol's bounds (docs/protocol.md, enqueue), so an id another client
/// wrote with a space or in bytes that are not UTF-8 can be named to redrive and purge.
pub fn check_existing_id(id: &[u8]) -> Result<()> {
    if id.is_empty() || id.len() > super::MAX_ID_LEN {
        return Err(Error::InvalidArgument {
            what: "job id",
            reason: format!(
                "an id of {} bytes: ids are 1 to {} bytes",
                id.len(),
                super::MAX_ID_LEN
            ),
        });
    }
    Ok(())
}

/// The field of `meta` that pauses a queue (its value: the ms it was paused).
pub const PAUSED_FIELD: &str = "paused";

/// Fill `paused` and `paused_at` of `stats` from `meta`'s `paused` field as read (nil when
/// absent).
fn set_paused(stats: &mut QueueStats, field: Option<&str>) {
    stats.paused = field.is_some();
    stats.paused_at = field.and_then(|t| t.parse::<i64>().ok());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_is_resent_only_inside_the_retry_window() {
        // The window ends well inside the record's life in Redis (60 s), leaving room for
        // a resend that travels as long as the default response timeout (10 s).
        assert!(REQUEST_RETRY_WINDOW + Duration::from_secs(10) < REQUEST_RECORD_LIFE);
        let now = Instant::now();
        assert!(within_window(now, CLAIM_RETRY_WAIT));
        let late = now.checked_sub(Duration::from_secs(29)).unwrap();
        assert!(
            !within_window(late, Duration::from_secs(2)),
            "the wait ends past the window"
        );
        assert!(within_window(late, Duration::ZERO));
        let gone = now.checked_sub(REQUEST_RETRY_WINDOW).unwrap();
        assert!(!within_window(gone, Duration::ZERO));
    }

    #[test]
    fn a_claim_token_carries_claimed_at_and_the_worker() {
        assert_eq!(
            parse_claim_token(b"1700000000123:4:w:1a:tok"),
            Some((1_700_000_000_123, "w:1a".to_string()))
        );
        assert_eq!(parse_claim_token(b"5:0::t"), Some((5, String::new())));
        // the older layout: the caller's token alone
        assert_eq!(parse_claim_token(b"0123abcd"), None);
        assert_eq!(parse_claim_token(b"12:9:short:t"), None);
    }

    #[test]
    fn a_hostile_claim_token_is_none_not_a_panic() {
        for token in [
            &b"1:18446744073709551615:w:t"[..],
            b"1:18446744073709551614:w:t",
            b"1:99999999999999999999999:w:t",
            b"-inf:1:w:t",
            b"inf:1:w:t",
            b"-5:1:w:t",
            b"+5:1:w:t",
            b"12345678901234567:1:w:t",
            b"99999999999999999999:1:w:t",
            b":1:w:t",
            b"5:+1:w:t",
            b"5:1:w",
            b"5::w:t",
            b"-inf:",
            b"\xff:1:w:t",
        ] {
            assert_eq!(
                parse_claim_token(token),
                None,
                "{}",
                String::from_utf8_lossy(token)
            );
        }
        // claimed_at as claim writes it: 1 to 16 decimal digits
        assert_eq!(
            parse_claim_token(b"9999999999999999:1:w:t"),
            Some((9_999_999_999_999_999, "w".to_string()))
        );
    }

    #[test]
    fn time_replies_become_milliseconds() {
        let reply = |secs: &str, micros: &str| {
            Value::Array(vec![
                Value::BulkString(secs.as_bytes().to_vec()),
                Value::BulkString(micros.as_bytes().to_vec()),
            ])
        };
        assert_eq!(
            time_ms(reply("1700000000", "123999")),
            Ok(1_700_000_000_123)
        );
        assert_eq!(time_ms(reply("0", "999")), Ok(0));
        assert!(time_ms(Value::Nil).unwrap_err().starts_with("TIME: "));
    }

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    #[test]
    fn claim_entries_with_any_id_are_leases() {
        let entry = |id: &[u8]| {
            Value::Array(vec![
                bulk(id),
                bulk(b"payload"),
                Value::Int(2),
                bulk(b"t0ken"),
                Value::Int(1_700_000_000_000),
            ])
        };
        let lease = parse_lease(entry(b"a\xff b")).unwrap();
        assert_eq!(lease.id.as_bytes(), b"a\xff b");
        assert_eq!(lease.token, "t0ken");
        assert_eq!((lease.attempts, lease.lease_until), (2, 1_700_000_000_000));
        assert_eq!(&lease.payload[..], b"payload");
    }

    #[test]
    fn claim_entries_of_jobs_with_their_own_options_carry_them() {
        let entry = |timeout: Value, visibility: Value| {
            parse_lease(Value::Array(vec![
                bulk(b"j1"),
                bulk(b"p"),
                Value::Int(1),
                bulk(b"tok"),
                Value::Int(5),
                timeout,
                visibility,
            ]))
        };
        let lease = entry(Value::Int(120_000), Value::Int(0)).unwrap();
        assert_eq!(lease.timeout, Some(Duration::from_secs(120)));
        assert_eq!(lease.visibility, None);
        let lease = entry(Value::Int(0), Value::Int(2000)).unwrap();
        assert_eq!(
            (lease.timeout, lease.visibility),
            (None, Some(Duration::from_secs(2)))
        );
        // an option that is not a whole number of ms: refused, with what ends its lease
        let bad = entry(bulk(b"soon"), Value::Int(0)).unwrap_err();
        assert_eq!(bad.lease, Some((JobId::from("j1"), "tok".to_string())));
        assert!(bad.reason.contains("timeout_ms"), "{}", bad.reason);
        assert!(entry(Value::Int(-1), Value::Int(0)).is_err());
    }

    #[test]
    fn unreadable_claim_entries_keep_what_ends_their_lease() {
        // id and token readable: the lease can be failed on its own
        let bad = parse_lease(Value::Array(vec![
            bulk(b"j1"),
            Value::Int(7),
            Value::Int(1),
            bulk(b"tok"),
            Value::Int(5),
        ]))
        .unwrap_err();
        assert_eq!(bad.lease, Some((JobId::from("j1"), "tok".to_string())));
        assert!(bad.reason.contains("payload"), "{}", bad.reason);
        let short = parse_lease(Value::Array(vec![
            bulk(b"j2"),
            bulk(b"p"),
            Value::Int(1),
            bulk(b"tok"),
        ]))
        .unwrap_err();
        assert_eq!(short.lease, Some((JobId::from("j2"), "tok".to_string())));
        // neither: nothing to address
        assert_eq!(parse_lease(Value::Nil).unwrap_err().lease, None);
        let no_token = Value::Array(vec![bulk(b"j3"), bulk(b"p"), Value::Int(1)]);
        assert_eq!(parse_lease(no_token).unwrap_err().lease, None);
    }
}

/// What one [`Queue::fire_schedules`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fired {
    /// Jobs enqueued for ticks.
    pub fired: u64,
    /// Missed ticks passed over under `skip`.
    pub skipped: u64,
    /// Ticks whose job existed already (fired before, by a twin or an earlier try).
    pub existing: u64,
    /// The earliest next tick (ms, Redis clock) after the call, when a schedule runs.
    pub next_tick: Option<i64>,
    /// The Redis clock the call fired against (ms).
    pub now_ms: i64,
}

/// The schedules hash (name, rule) and the due zset (name, tick) as read together.
type NamedRulesAndTicks = (Vec<(String, String)>, Vec<(String, f64)>);

// Schedules (lua/schedule.lua; docs/protocol.md, Schedules).
impl Queue {
    fn schedule_cmd(&self, job_keys: &[&str]) -> Cmd {
        let mut keys: Vec<&str> = vec![&self.keys.schedules, &self.keys.schedule_due];
        keys.extend_from_slice(job_keys);
        self.script_cmd(&SCRIPTS.schedule, &keys)
    }

    /// Write schedule `s` (create it or replace its rule): 1 created, 2 changed, 0 the
    /// same rule was there already (its next and last tick are kept).
    pub async fn put_schedule(&self, s: &super::schedule::Schedule) -> Result<i64> {
        use super::schedule::{MAX_SCHEDULE_PAYLOAD, Rule, validate_name};
        validate_name(&s.name)?;
        s.rule.validate()?;
        s.options.validate()?;
        if s.payload.len() > MAX_SCHEDULE_PAYLOAD {
            return Err(Error::InvalidArgument {
                what: "payload",
                reason: format!(
                    "{} bytes: a schedule's payload is at most {MAX_SCHEDULE_PAYLOAD} bytes",
                    s.payload.len()
                ),
            });
        }
        let (kind, spec, tz, first) = match &s.rule {
            Rule::Every(d) => ("every", d.as_millis().to_string(), String::new(), 0),
            Rule::Cron { expr, tz } => {
                let now = self.now_ms().await?;
                ("cron", expr.clone(), tz.clone(), s.rule.after(now)?)
            }
        };
        let mut cmd = self.schedule_cmd(&[]);
        cmd.arg("put")
            .arg(&s.name)
            .arg(kind)
            .arg(spec)
            .arg(tz)
            .arg(s.missed.as_str())
            .arg(if s.paused { "1" } else { "0" })
            .arg(&s.payload[..])
            .arg(first);
        let options = s.options.to_fields();
        if !options.is_empty() {
            cmd.arg("options");
            for (name, value) in options {
                cmd.arg(name).arg(value);
            }
        }
        let reply = self.run(&SCRIPTS.schedule, &cmd).await?;
        match reply {
            Value::Int(n) => Ok(n),
            other => Err(self.protocol("schedule put", format!("{other:?}"))),
        }
    }

    /// Remove schedule `name`; false when there was none. Jobs it fired stay.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool> {
        super::schedule::validate_name(name)?;
        let mut cmd = self.schedule_cmd(&[]);
        cmd.arg("rm").arg(name);
        match self.run(&SCRIPTS.schedule, &cmd).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(self.protocol("schedule rm", format!("{other:?}"))),
        }
    }

    /// Pause (`pause` true) or resume schedule `name`: `None` when there is no such
    /// schedule, else whether the call changed it. A resumed schedule's next tick is the
    /// first after now: ticks while it was paused are not fired.
    pub async fn pause_schedule(&self, name: &str, pause: bool) -> Result<Option<bool>> {
        let mut first = 0;
        if !pause {
            let Some(info) = self.schedule(name).await? else {
                return Ok(None);
            };
            if let super::schedule::Rule::Cron { .. } = info.rule {
                first = info.rule.after(self.now_ms().await?)?;
            }
        }
        super::schedule::validate_name(name)?;
        let mut cmd = self.schedule_cmd(&[]);
        cmd.arg(if pause { "pause" } else { "resume" }).arg(name);
        if !pause {
            cmd.arg(first);
        }
        match self.run(&SCRIPTS.schedule, &cmd).await? {
            Value::Int(-1) => Ok(None),
            Value::Int(n) => Ok(Some(n == 1)),
            other => Err(self.protocol("schedule pause", format!("{other:?}"))),
        }
    }

    /// Every schedule of the queue, by name.
    pub async fn schedules(&self) -> Result<Vec<super::schedule::ScheduleInfo>> {
        let mut conn = self.redis.clone();
        let (rules, due): NamedRulesAndTicks = redis::pipe()
            .cmd("HGETALL")
            .arg(&self.keys.schedules)
            .cmd("ZRANGE")
            .arg(&self.keys.schedule_due)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("schedules", e))?;
        let due: HashMap<String, i64> = due.into_iter().map(|(n, s)| (n, s as i64)).collect();
        let mut out = Vec::with_capacity(rules.len());
        for (name, json) in rules {
            let stored: super::schedule::StoredRule = serde_json::from_str(&json)
                .map_err(|e| self.protocol("schedules", format!("rule of {name}: {e}")))?;
            let next = due.get(&name).copied();
            out.push(stored.info(name, next)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Schedule `name`, `None` when there is none.
    pub async fn schedule(&self, name: &str) -> Result<Option<super::schedule::ScheduleInfo>> {
        super::schedule::validate_name(name)?;
        let mut conn = self.redis.clone();
        let (json, due): (Option<String>, Vec<Option<f64>>) = redis::pipe()
            .cmd("HGET")
            .arg(&self.keys.schedules)
            .arg(name)
            .cmd("ZMSCORE")
            .arg(&self.keys.schedule_due)
            .arg(name)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("schedule", e))?;
        let Some(json) = json else { return Ok(None) };
        let stored: super::schedule::StoredRule = serde_json::from_str(&json)
            .map_err(|e| self.protocol("schedule", format!("rule of {name}: {e}")))?;
        let due = due.first().copied().flatten();
        Ok(Some(stored.info(name.to_string(), due.map(|d| d as i64))?))
    }

    /// Fire the schedules whose tick is due (at most [`FIRE_BATCH`] per call): one job per
    /// tick, whoever fires it (a twin's call for the same tick changes nothing). `now_ms`:
    /// the Redis clock when the caller just read it, else it is read here.
    ///
    /// [`FIRE_BATCH`]: super::schedule::FIRE_BATCH
    pub async fn fire_schedules(&self, now_ms: Option<i64>) -> Result<Fired> {
        use super::schedule::{FIRE_BATCH, StoredRule, tick_job_id};
        let now = match now_ms {
            Some(n) => n,
            None => self.now_ms().await?,
        };
        let mut conn = self.redis.clone();
        let due: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&self.keys.schedule_due)
            .arg(0)
            .arg(FIRE_BATCH - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("schedules", &self.keys.schedule_due, e))?;
        let mut out = Fired {
            next_tick: due.first().map(|(_, t)| *t as i64),
            now_ms: now,
            ..Fired::default()
        };
        let due: Vec<(String, i64)> = due
            .into_iter()
            .map(|(n, t)| (n, t as i64))
            .filter(|(_, t)| *t <= now)
            .collect();
        if due.is_empty() {
            return Ok(out);
        }
        let names: Vec<&str> = due.iter().map(|(n, _)| n.as_str()).collect();
        let rules: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&self.keys.schedules)
            .arg(&names)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err_on("schedules", &self.keys.schedules, e))?;
        let mut quads = Vec::new();
        for ((name, tick), json) in due.iter().zip(rules) {
            if super::schedule::validate_name(name).is_err() {
                continue;
            }
            // every: the script computes both ticks; cron: computed here from the rule
            let (n1, n2) = match json.as_deref().map(serde_json::from_str::<StoredRule>) {
                Some(Ok(r)) if r.kind == "cron" => {
                    let rule = r.rule()?;
                    match (rule.after(*tick), rule.after(now)) {
                        (Ok(a), Ok(b)) => (a, b),
                        (Err(e), _) | (_, Err(e)) => {
                            tracing::warn!(queue = %self.keys.name, schedule = %name, error = %e,
                                "schedule has no next tick; not fired");
                            continue;
                        }
                    }
                }
                _ => (0, 0),
            };
            quads.push((name.as_str(), *tick, n1, n2));
        }
        if quads.is_empty() {
            return Ok(out);
        }
        let job_keys: Vec<String> = quads
            .iter()
            .map(|(name, tick, _, _)| self.keys.job(&tick_job_id(name, *tick)))
            .collect();
        let key_refs: Vec<&str> = job_keys.iter().map(String::as_str).collect();
        let mut cmd = self.schedule_cmd(&key_refs);
        cmd.arg("fire").arg(quads.len());
        for (name, tick, n1, n2) in &quads {
            cmd.arg(*name).arg(*tick).arg(*n1).arg(*n2);
        }
        let reply = self.run_durable(&SCRIPTS.schedule, &cmd).await?;
        let flags = int_array(&reply)
            .ok_or_else(|| self.protocol("schedule fire", format!("{reply:?}")))?;
        for f in flags {
            match f {
                1 => out.fired += 1,
                2 => out.skipped += 1,
                3 => out.existing += 1,
                _ => {}
            }
        }
        let first: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&self.keys.schedule_due)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("schedules", e))?;
        out.next_tick = first.first().map(|(_, t)| *t as i64);
        Ok(out)
    }
}
