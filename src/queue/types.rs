//! The values the client hands out and takes in.

use std::borrow::Borrow;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use rand::RngCore;

/// A job to enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// Caller-given id (for deduplication): any 1 to
    /// [`MAX_ID_LEN`](super::MAX_ID_LEN) bytes; a compact random id when `None`.
    pub id: Option<JobId>,
    pub payload: Bytes,
    /// Run no earlier than this from now (Redis clock). Zero: ready now.
    pub delay: Duration,
    /// Run no earlier than this time, read against the Redis clock (the script works
    /// out the delay); a time not in the future means ready now. Instead of `delay`
    /// when given.
    pub at: Option<std::time::SystemTime>,
    /// Settings of this job's own that override its queue's.
    pub options: JobOptions,
    /// At most one job per key at a time (docs/protocol.md, *Unique keys*).
    pub unique: Unique,
}

/// A job's unique key: while a job holds the key, another job enqueued with it is
/// refused with the holder's id ([`UniqueOutcome::Refused`]), or in
/// [`UniqueMode::Debounce`] replaces the holder's payload and delay
/// ([`UniqueOutcome::Replaced`]). `key: None` (the default): no unique key; a mode or a
/// window without a key is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unique {
    /// 1 to [`MAX_UNIQUE_KEY_LEN`](super::MAX_UNIQUE_KEY_LEN) bytes of any kind.
    pub key: Option<Bytes>,
    /// How long the key is held; [`UniqueMode::UntilDone`] when `None`.
    pub mode: Option<UniqueMode>,
    /// At most this long from the enqueue (a TTL on the lock), whichever ends first.
    pub window: Option<Duration>,
}

/// How long a job holds its unique key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum UniqueMode {
    /// Until a worker claims the job (or it is cancelled or deleted before that).
    UntilStarted,
    /// Until the job ends: acked, dead, cancelled, deleted or purged.
    #[default]
    UntilDone,
    /// As `UntilStarted`, and a job enqueued with the key meanwhile replaces the waiting
    /// job's payload and delay instead of being refused.
    Debounce,
}

impl UniqueMode {
    /// The mode as the protocol and the CLI write it.
    pub fn as_str(self) -> &'static str {
        match self {
            UniqueMode::UntilStarted => "until-started",
            UniqueMode::UntilDone => "until-done",
            UniqueMode::Debounce => "debounce",
        }
    }
}

impl fmt::Display for UniqueMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for UniqueMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "until-started" => Ok(UniqueMode::UntilStarted),
            "until-done" => Ok(UniqueMode::UntilDone),
            "debounce" => Ok(UniqueMode::Debounce),
            other => Err(format!(
                "{other:?} is not a unique mode: until-started, until-done or debounce"
            )),
        }
    }
}

impl Unique {
    /// Refuse what the enqueue script would refuse, naming what is wrong.
    pub fn validate(&self) -> super::Result<()> {
        let bad = |what: &'static str, reason: String| {
            Err(super::Error::InvalidArgument { what, reason })
        };
        let Some(key) = &self.key else {
            if self.mode.is_some() || self.window.is_some() {
                return bad(
                    "unique key",
                    "a unique mode or window needs a unique key".to_string(),
                );
            }
            return Ok(());
        };
        if key.is_empty() || key.len() > super::MAX_UNIQUE_KEY_LEN {
            return bad(
                "unique key",
                format!(
                    "{} bytes: must be 1 to {} bytes",
                    key.len(),
                    super::MAX_UNIQUE_KEY_LEN
                ),
            );
        }
        if let Some(w) = self.window
            && (w.as_millis() == 0 || w.as_millis() > super::settings::MAX_MS)
        {
            return bad(
                "unique window",
                format!(
                    "{} must be from 1 ms to 10^15 ms",
                    crate::duration::format(w)
                ),
            );
        }
        Ok(())
    }

    /// What one enqueue call shares among its jobs: the mode and the window.
    pub(crate) fn call_shape(&self) -> Option<(UniqueMode, u128)> {
        self.key.as_ref().map(|_| {
            (
                self.mode.unwrap_or_default(),
                self.window.map_or(0, |w| w.as_millis()),
            )
        })
    }
}

/// A job's own settings, overriding its queue's for it alone (docs/protocol.md,
/// *Per-job options*): stored in its hash at enqueue and read by the scripts that retry
/// or dead-letter it (the retry policy), lease it (the visibility), and handed to its
/// worker with each lease (the visibility and the timeout). `None`: the queue's setting
/// (for the timeout: the worker's). The queue's stats and the operator's scaling do not
/// look at them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobOptions {
    /// Claims before a failure dead-letters the job (1 to 1 000 000).
    pub max_attempts: Option<u32>,
    /// The retry delay after the first failure.
    pub backoff_initial: Option<Duration>,
    /// The longest retry delay (not below the initial one when both are given).
    pub backoff_max: Option<Duration>,
    /// Each retry's delay is the previous one's times this (1 to 1000).
    pub backoff_multiplier: Option<f64>,
    /// The job's priority, 0 to [`MAX_PRIORITY`](super::MAX_PRIORITY): a higher one is
    /// claimed first (docs/protocol.md, *Priorities*). `None` and 0: the default, 0.
    pub priority: Option<u8>,
    /// Announce the job's end on the queue's `done` stream and keep its hash at least this
    /// long after it ends, for a waiter ([`crate::queue::Queue::wait_for`]); 1 ms to 10^15 ms.
    pub notify: Option<Duration>,
    /// The length of every lease of this job (claim, renewal) instead of the queue's
    /// visibility timeout and the worker's own (1 ms to 10^15 ms).
    pub visibility: Option<Duration>,
    /// The longest one run of this job may take, instead of the worker's `--timeout`:
    /// past it its worker stops it and fails it with `timed out after …` (1 ms to
    /// 10^15 ms).
    pub timeout: Option<Duration>,
    /// The key the queue's per-key rate limit counts this job under (1 to 256 bytes,
    /// e.g. a customer id): claim sets a job aside while its key has no slot left.
    pub rate_key: Option<String>,
}

// The multiplier is a finite number (validate refuses NaN before it is used).
impl Eq for JobOptions {}

/// The most attempts a job may be given.
pub const MAX_JOB_ATTEMPTS: u32 = 1_000_000;

impl JobOptions {
    pub fn is_empty(&self) -> bool {
        *self == JobOptions::default()
    }

    /// Refuse options the scripts would refuse, naming what is wrong.
    pub fn validate(&self) -> super::Result<()> {
        let bad = |what: &'static str, reason: String| {
            Err(super::Error::InvalidArgument { what, reason })
        };
        if let Some(n) = self.max_attempts
            && !(1..=MAX_JOB_ATTEMPTS).contains(&n)
        {
            return bad(
                "max attempts",
                format!("{n} is not between 1 and {MAX_JOB_ATTEMPTS}"),
            );
        }
        if let Some(p) = self.priority
            && p > super::MAX_PRIORITY
        {
            return bad(
                "priority",
                format!("{p} is not between 0 and {}", super::MAX_PRIORITY),
            );
        }
        if let Some(m) = self.backoff_multiplier
            && !(1.0..=super::settings::MAX_MULTIPLIER).contains(&m)
        {
            return bad(
                "backoff multiplier",
                format!("{m} is not a number from 1 to 1000"),
            );
        }
        for (what, d) in [
            ("backoff initial", self.backoff_initial),
            ("backoff max", self.backoff_max),
        ] {
            if let Some(d) = d
                && d.as_millis() > super::settings::MAX_MS
            {
                return bad(what, "must be at most 10^15 ms".to_string());
            }
        }
        if let Some(d) = self.notify
            && (d.is_zero() || d.as_millis() > super::settings::MAX_MS)
        {
            return bad("notify", "must be 1 ms to 10^15 ms".to_string());
        }
        for (what, d) in [("visibility", self.visibility), ("timeout", self.timeout)] {
            if let Some(d) = d {
                if d.as_millis() == 0 {
                    return bad(
                        what,
                        format!("{} is too short (at least 1ms)", crate::duration::format(d)),
                    );
                }
                if d.as_millis() > super::settings::MAX_MS {
                    return bad(what, "must be at most 10^15 ms".to_string());
                }
            }
        }
        if let Some(key) = &self.rate_key {
            super::rate_limit::validate_rate_key(key)?;
        }
        if let (Some(initial), Some(max)) = (self.backoff_initial, self.backoff_max)
            && max < initial
        {
            return bad(
                "backoff max",
                format!(
                    "{} is below the initial backoff {}",
                    crate::duration::format(max),
                    crate::duration::format(initial)
                ),
            );
        }
        Ok(())
    }

    /// The job hash fields, as enqueue's options block sends them.
    pub fn to_fields(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(n) = self.max_attempts {
            out.push(("max_attempts", n.to_string()));
        }
        if let Some(d) = self.backoff_initial {
            out.push(("backoff_initial_ms", d.as_millis().to_string()));
        }
        if let Some(d) = self.backoff_max {
            out.push(("backoff_max_ms", d.as_millis().to_string()));
        }
        if let Some(m) = self.backoff_multiplier {
            out.push(("backoff_multiplier", super::settings::format_multiplier(m)));
        }
        // 0 is the default: a job hash without the field has it
        if let Some(p) = self.priority.filter(|&p| p > 0) {
            out.push(("priority", p.to_string()));
        }
        if let Some(d) = self.notify {
            out.push(("notify", d.as_millis().max(1).to_string()));
        }
        if let Some(d) = self.visibility {
            out.push(("visibility_timeout_ms", d.as_millis().to_string()));
        }
        if let Some(d) = self.timeout {
            out.push(("timeout_ms", d.as_millis().to_string()));
        }
        if let Some(key) = &self.rate_key {
            out.push(("rate_key", key.clone()));
        }
        out
    }

    /// The options a job's hash holds, read back from the fields [`JobOptions::to_fields`]
    /// writes: each as the scripts take it (times in whole ms, at most 10^15; a lease or a
    /// run limit at least 1 ms), a field of another shape left out (stored data: another
    /// writer may have put anything there).
    pub fn from_fields(fields: &std::collections::HashMap<String, Vec<u8>>) -> JobOptions {
        let text = |name: &str| fields.get(name).and_then(|v| std::str::from_utf8(v).ok());
        // 1 to 16 decimal digits, as the scripts read a stored time
        let ms = |name: &str, least: u64| {
            text(name)
                .filter(|v| (1..=16).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&v| v >= least && u128::from(v) <= super::settings::MAX_MS)
                .map(Duration::from_millis)
        };
        JobOptions {
            max_attempts: text("max_attempts")
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|n| (1..=MAX_JOB_ATTEMPTS).contains(n)),
            backoff_initial: ms("backoff_initial_ms", 0),
            backoff_max: ms("backoff_max_ms", 0),
            backoff_multiplier: text("backoff_multiplier")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|m| (1.0..=super::settings::MAX_MULTIPLIER).contains(m)),
            priority: match fields.get("priority").map(Vec::as_slice) {
                Some(&[d]) if (b'1'..=b'9').contains(&d) => Some(d - b'0'),
                _ => None,
            },
            notify: ms("notify", 1),
            visibility: ms("visibility_timeout_ms", 1),
            timeout: ms("timeout_ms", 1),
            rate_key: text("rate_key")
                .filter(|k| !k.is_empty())
                .map(str::to_string),
        }
    }
}

impl NewJob {
    pub fn new(payload: impl Into<Bytes>) -> NewJob {
        NewJob {
            id: None,
            payload: payload.into(),
            delay: Duration::ZERO,
            at: None,
            options: JobOptions::default(),
            unique: Unique::default(),
        }
    }

    /// At most one job with this key at a time: see [`Unique`]. Held until the job ends
    /// unless [`NewJob::unique_mode`] says otherwise.
    pub fn unique_key(mut self, key: impl Into<Bytes>) -> NewJob {
        self.unique.key = Some(key.into());
        self
    }

    /// How long the unique key is held.
    pub fn unique_mode(mut self, mode: UniqueMode) -> NewJob {
        self.unique.mode = Some(mode);
        self
    }

    /// Hold the unique key at most this long (whichever of this and the mode ends first).
    pub fn unique_for(mut self, window: Duration) -> NewJob {
        self.unique.window = Some(window);
        self
    }

    /// Run at this time (the Redis clock's), not before; now when it is past. Instead
    /// of [`NewJob::delay`].
    pub fn at(mut self, time: std::time::SystemTime) -> NewJob {
        self.at = Some(time);
        self
    }

    /// The enqueue script's `delay_ms` argument: the delay in ms, or `@` and the run-at
    /// time in ms since the epoch.
    pub(crate) fn delay_arg(&self) -> super::Result<String> {
        let Some(at) = self.at else {
            return Ok((self.delay.as_millis() as u64).to_string());
        };
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .map_err(|_| super::Error::InvalidArgument {
                what: "run-at time",
                reason: "is before 1970-01-01T00:00:00Z".to_string(),
            })?;
        if ms > super::settings::MAX_MS {
            return Err(super::Error::InvalidArgument {
                what: "run-at time",
                reason: format!("{ms} ms since the epoch is over 10^15 ms"),
            });
        }
        Ok(format!("@{ms}"))
    }

    /// Claims before a failure dead-letters this job, instead of the queue's setting.
    pub fn max_attempts(mut self, n: u32) -> NewJob {
        self.options.max_attempts = Some(n);
        self
    }

    /// This job's retry backoff (first delay, longest delay, multiplier), each instead of
    /// the queue's setting when given.
    pub fn backoff(
        mut self,
        initial: Option<Duration>,
        max: Option<Duration>,
        multiplier: Option<f64>,
    ) -> NewJob {
        self.options.backoff_initial = initial;
        self.options.backoff_max = max;
        self.options.backoff_multiplier = multiplier;
        self
    }

    /// This job's priority, 0 (the default) to [`MAX_PRIORITY`](super::MAX_PRIORITY):
    /// higher is claimed first; FIFO among jobs of one priority.
    pub fn priority(mut self, p: u8) -> NewJob {
        self.options.priority = Some(p);
        self
    }

    /// This job's own lease length, instead of the queue's visibility timeout (and of
    /// a worker's own): every claim and renewal of it leases it for this long.
    pub fn visibility(mut self, visibility: Duration) -> NewJob {
        self.options.visibility = Some(visibility);
        self
    }

    /// The longest one run of this job may take, instead of its worker's timeout.
    pub fn timeout(mut self, timeout: Duration) -> NewJob {
        self.options.timeout = Some(timeout);
        self
    }

    /// All of this job's own options at once.
    /// Count this job under `key` for the queue's per-key rate limit.
    pub fn rate_key(mut self, key: impl Into<String>) -> NewJob {
        self.options.rate_key = Some(key.into());
        self
    }

    pub fn options(mut self, options: JobOptions) -> NewJob {
        self.options = options;
        self
    }

    pub fn id(mut self, id: impl Into<JobId>) -> NewJob {
        self.id = Some(id.into());
        self
    }

    pub fn delay(mut self, delay: Duration) -> NewJob {
        self.delay = delay;
        self
    }
}

/// A job id as Redis holds it: bytes, 1 to [`MAX_ID_LEN`](super::MAX_ID_LEN) of any kind
/// (the protocol's only limits). Displayed as it is when it is UTF-8 text without control
/// characters, else as [`HEX_PREFIX`] and its bytes in hex (`hex:626164ff`); a text id
/// that itself begins with `hex:` is displayed in hex too, so no two ids display alike.
/// [`JobId::as_bytes`] is the id itself.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(Bytes);

/// What marks an id displayed by its bytes: `hex:` and the bytes in lowercase hex.
pub const HEX_PREFIX: &str = "hex:";

impl JobId {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The id as text, when it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Whether the id displays as itself: UTF-8 without control characters, and not
    /// beginning with [`HEX_PREFIX`]. Otherwise it displays as `hex:` and its bytes.
    pub fn is_plain(&self) -> bool {
        self.as_str()
            .is_some_and(|s| !s.starts_with(HEX_PREFIX) && !s.chars().any(char::is_control))
    }

    /// The id's bytes in lowercase hex, without the prefix.
    pub fn hex(&self) -> String {
        hex::encode(&self.0)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_plain()
            && let Some(s) = self.as_str()
        {
            return f.pad(s);
        }
        f.pad(&format!("{HEX_PREFIX}{}", self.hex()))
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            Some(s) => fmt::Debug::fmt(s, f),
            None => write!(f, "b\"{}\"", self.0.escape_ascii()),
        }
    }
}

impl AsRef<[u8]> for JobId {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for JobId {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for JobId {
    fn from(id: &str) -> Self {
        JobId(Bytes::copy_from_slice(id.as_bytes()))
    }
}

impl From<&String> for JobId {
    fn from(id: &String) -> Self {
        JobId::from(id.as_str())
    }
}

impl From<String> for JobId {
    fn from(id: String) -> Self {
        JobId(Bytes::from(id))
    }
}

impl From<&[u8]> for JobId {
    fn from(id: &[u8]) -> Self {
        JobId(Bytes::copy_from_slice(id))
    }
}

impl From<Vec<u8>> for JobId {
    fn from(id: Vec<u8>) -> Self {
        JobId(Bytes::from(id))
    }
}

impl From<Bytes> for JobId {
    fn from(id: Bytes) -> Self {
        JobId(id)
    }
}

impl PartialEq<str> for JobId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for JobId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<String> for JobId {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<JobId> for str {
    fn eq(&self, other: &JobId) -> bool {
        other == self
    }
}

impl PartialEq<JobId> for &str {
    fn eq(&self, other: &JobId) -> bool {
        other == self
    }
}

impl PartialEq<JobId> for String {
    fn eq(&self, other: &JobId) -> bool {
        other == self
    }
}

impl redis::ToRedisArgs for JobId {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg(&self.0);
    }
}

impl redis::ToSingleRedisArg for JobId {}

impl redis::FromRedisValue for JobId {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        Vec::<u8>::from_redis_value(v).map(JobId::from)
    }
}

/// The id itself when it is UTF-8 (a JSON string carries any text exactly), else its
/// `hex:` form; JSON output adds `id_hex` beside it wherever the id is not plain.
impl serde::Serialize for JobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.as_str() {
            Some(text) => s.serialize_str(text),
            None => s.collect_str(self),
        }
    }
}

/// What became of one enqueued job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub id: JobId,
    /// False when a job with this id already existed, or another job held its unique key
    /// (then `unique` says which); no job was made under `id` then.
    pub created: bool,
    /// Set when the job's unique key was held by another job.
    pub unique: Option<UniqueOutcome>,
}

impl Enqueued {
    /// The job that holds this job's unique key, when that refused or absorbed this one.
    pub fn existing(&self) -> Option<&JobId> {
        match &self.unique {
            Some(UniqueOutcome::Refused { existing } | UniqueOutcome::Replaced { existing }) => {
                Some(existing)
            }
            None => None,
        }
    }
}

/// A job whose unique key was held when it was enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UniqueOutcome {
    /// Nothing was written: `existing` holds the key.
    Refused { existing: JobId },
    /// Debounce: the waiting job `existing` took this job's payload and delay.
    Replaced { existing: JobId },
}

/// A claimed job: the worker holds it until `lease_until`, and proves it with `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: JobId,
    pub payload: Bytes,
    /// Claims since enqueue (or since the last redrive), this one included.
    pub attempts: u32,
    pub token: String,
    /// Lease expiry, milliseconds since the epoch on the Redis clock: one visibility
    /// after the claim call that made the lease reached Redis. That call may be earlier
    /// than the one that returned the lease: a claim whose reply was lost on every try is
    /// answered by a later claim with the same request id, which replays the leases
    /// ([`Claimed::first_sent`]). A local deadline (the worker runtime's) counts from the
    /// first send of the request, never from the call that brought the reply, so it
    /// never falls after this moment.
    pub lease_until: i64,
    /// The partition the job was claimed from (its index in `PartitionedQueue::partitions`),
    /// where its ack, extend and fail must go; 0 for a queue that is not partitioned.
    pub partition: usize,
    /// The job's own lease length ([`JobOptions::visibility`]), which `lease_until`
    /// counts and every renewal of it uses whatever length the caller asks for; `None`:
    /// the claim's (the queue's, or the worker's own).
    pub visibility: Option<Duration>,
    /// The job's own maximum run time ([`JobOptions::timeout`]); `None`: the worker's.
    pub timeout: Option<Duration>,
}

impl Lease {
    /// The id and token of this lease, for the calls that take many (`ack_many`,
    /// `extend_many`). Not `as_ref`: that name belongs to `AsRef`.
    pub fn lease_ref(&self) -> LeaseRef<'_> {
        LeaseRef {
            id: self.id.as_bytes(),
            token: &self.token,
            partition: self.partition,
            ..Default::default()
        }
    }
}

/// Id and token (and the partition of a partitioned queue): all that acking, extending
/// or failing a lease needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseRef<'a> {
    pub id: &'a [u8],
    pub token: &'a str,
    /// See [`Lease::partition`]; a plain `Queue` ignores it.
    pub partition: usize,
    /// The job's result, stored by its ack (at most [`MAX_RESULT`] bytes); other calls
    /// ignore it.
    pub result: Option<&'a [u8]>,
    /// The job's progress, written by its next extend; other calls ignore it.
    pub progress: Option<&'a Progress>,
}

impl<'a> LeaseRef<'a> {
    /// The same lease, held in partition `partition` of a partitioned queue.
    pub fn in_partition(mut self, partition: usize) -> Self {
        self.partition = partition;
        self
    }

    /// The same lease, acked with `result` (see [`MAX_RESULT`]).
    pub fn with_result(mut self, result: &'a [u8]) -> Self {
        self.result = Some(result);
        self
    }

    /// The same lease, extended with `progress`.
    pub fn with_progress(mut self, progress: &'a Progress) -> Self {
        self.progress = Some(progress);
        self
    }
}

/// The most bytes of a job's result (ack's and settle_claim's `results` block).
pub const MAX_RESULT: usize = 65536;
/// The most bytes of a progress message (extend's `progress` block).
pub const MAX_PROGRESS_TEXT: usize = 256;

/// How far a running job is: a percent and a short message, sent with its lease's next
/// extend and kept in its hash (`progress`, `progress_msg`, `progress_at`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Progress {
    /// 0 to 100.
    pub percent: u8,
    /// At most [`MAX_PROGRESS_TEXT`] bytes.
    pub message: String,
    /// When it was written (ms, the Redis clock); `None` in a progress not yet sent.
    pub at: Option<i64>,
}

impl Progress {
    /// A progress report, refused (naming what is wrong) when the percent is over 100 or
    /// the message over [`MAX_PROGRESS_TEXT`] bytes.
    pub fn new(percent: u8, message: impl Into<String>) -> super::Result<Progress> {
        let message = message.into();
        if percent > 100 {
            return Err(super::Error::InvalidArgument {
                what: "progress",
                reason: format!("{percent} is not a percent from 0 to 100"),
            });
        }
        if message.len() > MAX_PROGRESS_TEXT {
            return Err(super::Error::InvalidArgument {
                what: "progress",
                reason: format!(
                    "the message is {} bytes, more than {MAX_PROGRESS_TEXT}",
                    message.len()
                ),
            });
        }
        Ok(Progress {
            percent,
            message,
            at: None,
        })
    }
}

/// How a job ended, as a waiter learns it ([`crate::queue::Queue::wait_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// Acked, with its result (empty when it stored none).
    Done(Bytes),
    /// Dead-lettered, with the error of its last attempt.
    Dead(String),
    /// Cancelled.
    Cancelled,
    /// Its hash is gone (deleted or purged, or kept for less than the wait lasted).
    Gone,
}

/// One entry of a queue's events stream (`P:{T}:events`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobEvent {
    /// The stream entry's id (`<ms>-<seq>`).
    pub stream_id: String,
    /// `acked`, `failed`, `dead` or `cancelled`.
    pub event: String,
    pub id: JobId,
    /// The attempt's error, for `failed` and `dead` (its first 256 bytes).
    pub error: Option<String>,
}

impl<'a> From<&'a Lease> for LeaseRef<'a> {
    fn from(lease: &'a Lease) -> Self {
        lease.lease_ref()
    }
}

impl<'a> From<(&'a str, &'a str)> for LeaseRef<'a> {
    fn from((id, token): (&'a str, &'a str)) -> Self {
        LeaseRef {
            id: id.as_bytes(),
            token,
            ..Default::default()
        }
    }
}

impl<'a> From<(&'a JobId, &'a str)> for LeaseRef<'a> {
    fn from((id, token): (&'a JobId, &'a str)) -> Self {
        LeaseRef {
            id: id.as_bytes(),
            token,
            ..Default::default()
        }
    }
}

/// How `fail` ends a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Try again later, unless attempts reached `max_attempts`.
    Retry,
    /// Straight to the dead-letter set.
    Dead,
}

impl FailMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailMode::Retry => "retry",
            FailMode::Dead => "dead",
        }
    }
}

/// When a retried job runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backoff {
    /// The queue's policy (`backoff_*` in meta).
    #[default]
    Policy,
    /// Back of the pending line, now.
    Immediate,
    /// After this long.
    After(Duration),
}

impl Backoff {
    pub(crate) fn as_arg(self) -> i64 {
        match self {
            Backoff::Policy => -1,
            Backoff::Immediate => 0,
            Backoff::After(d) => (d.as_millis() as i64).max(1),
        }
    }
}

/// What `fail` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    Pending,
    Delayed,
    Dead,
    /// The token no longer holds the lease: nothing changed.
    Stale,
}

/// One `claim` call's reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    pub leases: Vec<Lease>,
    /// The call stopped at one of its bounds (a run of orphans in front of the jobs, or
    /// 100 due delayed jobs) with fewer leases than asked: claim again at once instead of
    /// waiting for a wake marker.
    pub more: bool,
    /// The queue's rate limit had no claim slot left when the call ended: the next one
    /// opens this long from the call (on the Redis clock). Claiming before then leases
    /// nothing.
    pub rate_wait: Option<Duration>,
    /// Set when the call carried the request id of an earlier claim whose reply was lost
    /// on every try: when that claim was first sent. Redis answers such a call with the
    /// leases the earlier claim made (they end one visibility after it reached Redis, not
    /// after this call did), so a local deadline for these leases counts from here.
    /// `None`: the leases were made by this call (sent after the caller called it).
    pub first_sent: Option<tokio::time::Instant>,
    /// Under `replicated` durability: the call ran on the primary (its leases are held
    /// there, and a `settle_claim`'s acks and fails were applied there) but fewer
    /// replicas than asked confirmed it in time. The leases are to be run all the same; a
    /// failover before the replicas catch up may undo the call (see
    /// [`super::Durability`]).
    pub unconfirmed: Option<super::Unconfirmed>,
}

/// A lease to end in the settle part of [`crate::queue::Queue::settle_claim`]: what the
/// worker's handler made of its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle<'a> {
    /// Done: as `ack`.
    Ack(LeaseRef<'a>),
    /// Failed: as `fail`, retried per `backoff` or dead-lettered per `mode`.
    Fail {
        lease: LeaseRef<'a>,
        error: &'a str,
        mode: FailMode,
        backoff: Backoff,
    },
    /// Not finished (the worker is stopping): as `release`, the attempt not charged.
    Release(LeaseRef<'a>),
}

impl<'a> Settle<'a> {
    pub fn lease(&self) -> LeaseRef<'a> {
        match *self {
            Settle::Ack(lease) | Settle::Release(lease) | Settle::Fail { lease, .. } => lease,
        }
    }
}

/// What the settle part did with one [`Settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The ack was accepted: the job is done.
    Acked,
    /// The fail or release was accepted: the job is now `Pending`, `Delayed` or `Dead`.
    Moved(FailOutcome),
    /// Refused: the caller no longer held the lease (counted `stale` or `unknown`).
    Stale,
}

/// The answer of one settle-and-claim call: one [`Settled`] per [`Settle`] given, in
/// order, and the claim's leases.
#[derive(Debug)]
pub struct SettledClaim {
    pub settled: Vec<Settled>,
    pub claimed: Claimed,
}

/// One `reap` call's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapOutcome {
    pub requeued: u64,
    pub dead_lettered: u64,
    /// Expired leases or due delayed jobs remain.
    pub more: bool,
    /// Due delayed jobs moved to pending (so they run even when no worker claims).
    pub promoted: u64,
    /// Set-aside ids put back where their status says, their job hash being there again.
    pub restored: u64,
}

impl std::ops::AddAssign for ReapOutcome {
    fn add_assign(&mut self, other: ReapOutcome) {
        self.requeued += other.requeued;
        self.dead_lettered += other.dead_lettered;
        self.promoted += other.promoted;
        self.restored += other.restored;
        self.more = other.more;
    }
}

/// What one [`Queue::maintain`](super::Queue::maintain) pass did and saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Maintenance {
    /// `meta` did not hold the settings and was written.
    pub configured: bool,
    pub reaped: ReapOutcome,
    /// The counts after reaping.
    pub stats: super::QueueStats,
    /// Round trips to Redis the pass took: 1 when there was nothing to write.
    pub round_trips: u32,
    /// The partition record's fields of `meta` as read (`partitions`,
    /// `drain_partitions`; see [`PartitionRecord`](super::PartitionRecord)).
    pub recorded_partitions: [Option<String>; 2],
    /// The tuner of an `auto` visibility timeout recorded in `meta` before the pass
    /// (`visibility_owner`, see [`super::auto_visibility`]) while its mode was `auto`.
    pub auto_owner: Option<super::auto_visibility::Owner>,
    /// The schedules fired (docs/protocol.md, Schedules).
    pub fired: super::Fired,
}

/// Which dead jobs `redrive` and `purge` act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    Ids(Vec<String>),
    /// By id, as bytes: an id another client wrote need not be UTF-8.
    IdBytes(Vec<Vec<u8>>),
    /// The n oldest by time of death.
    Oldest(usize),
}

/// A job's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    Pending,
    Processing,
    Delayed,
    Done,
    Dead,
}

impl JobStatus {
    pub fn parse(s: &str) -> Option<JobStatus> {
        Some(match s {
            "pending" => JobStatus::Pending,
            "processing" => JobStatus::Processing,
            "delayed" => JobStatus::Delayed,
            "done" => JobStatus::Done,
            "dead" => JobStatus::Dead,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Processing => "processing",
            JobStatus::Delayed => "delayed",
            JobStatus::Done => "done",
            JobStatus::Dead => "dead",
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job's hash, read for inspection (`jobqueue dead show`, `peek`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobInfo {
    pub id: JobId,
    #[serde(serialize_with = "serialize_payload")]
    pub payload: Bytes,
    pub status: Option<String>,
    pub attempts: u32,
    /// Its priority (0 to 9; 0 when the hash holds none, as the scripts read it).
    pub priority: u8,
    pub enqueued_at: Option<i64>,
    pub claimed_at: Option<i64>,
    pub lease_until: Option<i64>,
    pub last_error: Option<String>,
    pub worker: Option<String>,
    /// The errors of the job's last failed attempts (at most [`ERRORS_KEPT`], each cut to
    /// [`ERROR_BYTES`]), oldest first.
    pub errors: Vec<AttemptError>,
    /// The job's unique key (shown as an id is) and its mode, when it was enqueued with
    /// one; kept after the key is released.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<JobId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_mode: Option<String>,
    /// The last progress its worker reported (fields `progress`, `progress_msg`,
    /// `progress_at`).
    pub progress: Option<Progress>,
    /// The result its ack stored (field `result`).
    #[serde(serialize_with = "serialize_opt_payload")]
    pub result: Option<Bytes>,
    /// Its own options, as its hash holds them ([`JobOptions::from_fields`]); rendered by
    /// [`crate::queue::view::JobView::json`] under the hash's field names.
    #[serde(skip)]
    pub options: JobOptions,
}

/// How many failed attempts' errors a job keeps (`error:1` .. `error:5` of its hash).
pub const ERRORS_KEPT: usize = 5;
/// The most bytes of one attempt's error a job keeps (`last_error` is kept whole).
pub const ERROR_BYTES: usize = 1024;

/// One failed attempt's error as the job keeps it: `<attempt>:<at ms>:<text>` in a field
/// `error:<k>` of its hash, written by fail, settle_claim's fails and reap (`lease expired`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttemptError {
    /// The attempt that failed (1 for the first claim; counted again after a redrive).
    pub attempt: u32,
    /// When it failed (ms, the Redis clock).
    pub at: i64,
    pub error: String,
}

impl AttemptError {
    /// Parse one `error:<k>` field; `None` when it is not `<digits>:<digits>:<text>`
    /// (stored data: another writer may have put anything there).
    pub fn parse(v: &[u8]) -> Option<AttemptError> {
        let mut parts = v.splitn(3, |&b| b == b':');
        let num = |p: &[u8]| -> Option<i64> {
            if p.is_empty() || p.len() > 16 || !p.iter().all(u8::is_ascii_digit) {
                return None;
            }
            std::str::from_utf8(p).ok()?.parse().ok()
        };
        let attempt = num(parts.next()?)?;
        let at = num(parts.next()?)?;
        let error = String::from_utf8_lossy(parts.next()?).into_owned();
        Some(AttemptError {
            attempt: u32::try_from(attempt).ok()?,
            at,
            error,
        })
    }

    /// The kept errors of a job hash (fields `error:1` .. `error:5`), oldest first.
    pub fn from_fields(fields: &std::collections::HashMap<String, Vec<u8>>) -> Vec<AttemptError> {
        let mut out: Vec<AttemptError> = (1..=ERRORS_KEPT)
            .filter_map(|k| fields.get(&format!("error:{k}")))
            .filter_map(|v| AttemptError::parse(v))
            .collect();
        out.sort_by_key(|e| (e.at, e.attempt));
        out
    }
}

/// What [`crate::queue::Queue::delete_job`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    /// The job was deleted: it was pending, delayed or dead.
    Deleted(JobStatus),
    /// The job was left alone: it is leased (`processing`) or finished (`done`, or
    /// another status), named here.
    Kept(String),
    /// No job hash exists for the id.
    Absent,
}

/// What [`crate::queue::Queue::cancel`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancellation {
    /// The job was pending or delayed: it is cancelled (its hash kept with status
    /// `cancelled` for the completed retention, counted in `cancelled`).
    Cancelled(JobStatus),
    /// The job is leased: its worker is told at its next lease renewal, stops the job and
    /// ends it as cancelled (or a reaper does, when the lease expires).
    Requested,
    /// The job was left alone: it is dead, done or cancelled already, named here.
    Kept(String),
    /// No job hash exists for the id.
    Absent,
}

/// One lease's answer to a renewal ([`crate::queue::Queue::renew_many`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Extended until this time (ms).
    Extended(i64),
    /// Extended, but the job's cancellation was asked for: stop it and end the lease with
    /// [`crate::queue::Queue::end_cancelled`].
    Cancelled,
    /// The lease is no longer the caller's.
    Stale,
}

/// How long `purge --orphans` remembers an id it forgot (reap puts it back if its hash
/// comes back meanwhile): 7 days, as the reap script holds it.
pub const PURGED_REMEMBERED_MS: i64 = 7 * 24 * 3600 * 1000;

/// An id in the queue's `orphans` set: set aside by claim or reap because it had no job
/// hash (absent, or a key of another type), or forgotten by `purge --orphans` and
/// remembered for [`PURGED_REMEMBERED_MS`] in case its hash comes back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SetAside {
    /// When it was set aside or, when `purged`, when purge forgot it (ms).
    pub at: i64,
    pub purged: bool,
    /// The type of its job key when read: `none` (absent), `hash` (back: the next reap
    /// puts it back) or another type (the key is not a job).
    pub key_type: String,
}

impl SetAside {
    /// Why it is there and what happens to it, for people.
    pub fn reason(&self) -> String {
        let why = match self.key_type.as_str() {
            "none" => {
                "its job hash is absent (a Cluster slot migration, or deleted by hand)".to_string()
            }
            "hash" => {
                "its job hash is back: the next reap puts it where its status says".to_string()
            }
            other => format!(
                "its job key holds the wrong type ({other}), not a hash: claim and reap                  leave the key alone and the id set aside until the key is a job hash again"
            ),
        };
        if self.purged {
            format!(
                "forgotten by purge --orphans; {why}; reap still puts it back if it comes back within 7 days"
            )
        } else {
            why
        }
    }
}

fn serialize_payload<S: serde::Serializer>(payload: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(payload))
}

fn serialize_opt_payload<S: serde::Serializer>(
    payload: &Option<Bytes>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match payload {
        Some(p) => s.serialize_some(&String::from_utf8_lossy(p)),
        None => s.serialize_none(),
    }
}

const ID_ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A compact random job id: 12 characters of base62, about 71 bits. Short, so that the
/// job's key fits a small allocation; a collision is not ruled out, so the client that
/// generated the id draws a new one when enqueue reports it as taken (see
/// `Queue::enqueue_many`): a collision is never a lost job nor a false duplicate.
pub fn new_job_id() -> String {
    let mut n = rand::rng().next_u64() as u128 | ((rand::rng().next_u64() as u128) << 64);
    let mut id = String::with_capacity(12);
    for _ in 0..12 {
        id.push(ID_ALPHABET[(n % 62) as usize] as char);
        n /= 62;
    }
    id
}

/// A fresh claim token: 128 random bits, hex.
pub fn new_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn hash(fields: &[(&str, &str)]) -> std::collections::HashMap<String, Vec<u8>> {
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn job_options_read_back_what_enqueue_stores() {
        let options = JobOptions {
            max_attempts: Some(3),
            backoff_initial: Some(Duration::from_millis(250)),
            backoff_max: Some(Duration::from_secs(60)),
            backoff_multiplier: Some(1.5),
            priority: Some(7),
            notify: Some(Duration::from_secs(600)),
            visibility: Some(Duration::from_secs(30)),
            timeout: Some(Duration::from_secs(120)),
            rate_key: Some("customer-42".into()),
        };
        let fields: Vec<(&str, String)> = options.to_fields();
        let stored = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        assert_eq!(JobOptions::from_fields(&stored), options);
        assert!(JobOptions::from_fields(&hash(&[("payload", "x")])).is_empty());
    }

    #[test]
    fn job_options_of_another_shape_are_left_out() {
        let cases: &[(&str, &str)] = &[
            ("max_attempts", "0"),
            ("max_attempts", "1000001"),
            ("max_attempts", "-1"),
            ("backoff_initial_ms", "1e3"),
            ("backoff_max_ms", "-5"),
            ("backoff_multiplier", "0.5"),
            ("backoff_multiplier", "NaN"),
            ("priority", "0"),
            ("priority", "10"),
            ("notify", "0"),
            ("visibility_timeout_ms", "0"),
            ("visibility_timeout_ms", "0x10"),
            ("timeout_ms", "1000000000000001"),
            ("timeout_ms", " 5"),
            ("rate_key", ""),
        ];
        for (name, value) in cases {
            assert!(
                JobOptions::from_fields(&hash(&[(name, value)])).is_empty(),
                "{name} = {value:?}"
            );
        }
        // the edges the scripts take
        let edge = JobOptions::from_fields(&hash(&[
            ("backoff_initial_ms", "0"),
            ("timeout_ms", "1000000000000000"),
        ]));
        assert_eq!(edge.backoff_initial, Some(Duration::ZERO));
        assert_eq!(
            edge.timeout,
            Some(Duration::from_millis(1_000_000_000_000_000))
        );
    }

    #[test]
    fn tokens_are_128_bits_and_distinct() {
        let tokens: HashSet<String> = (0..1000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 1000);
        assert!(
            tokens
                .iter()
                .all(|t| t.len() == 32 && t.chars().all(|c| c.is_ascii_hexdigit()))
        );
    }

    #[test]
    fn ids_are_compact_and_distinct() {
        let ids: HashSet<String> = (0..1000).map(|_| new_job_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(
            ids.iter()
                .all(|i| i.len() == 12 && i.chars().all(|c| c.is_ascii_alphanumeric()))
        );
    }

    #[test]
    fn job_ids_show_plain_or_in_hex_and_compare_with_text() {
        let plain = JobId::from("order-7 b");
        assert!(plain.is_plain());
        assert_eq!(plain.to_string(), "order-7 b");
        assert_eq!(plain.as_str(), Some("order-7 b"));
        assert_eq!(plain, "order-7 b");
        assert_eq!(format!("{plain:?}"), "\"order-7 b\"");
        assert_eq!(format!("[{:<6}]", JobId::from("ab")), "[ab    ]");

        let bytes = JobId::from(b"a\xff\tb\\".to_vec());
        assert_eq!(bytes.as_str(), None);
        assert_eq!(bytes.to_string(), "hex:61ff09625c");
        assert_eq!(format!("{bytes:?}"), "b\"a\\xff\\tb\\\\\"");
        assert_eq!(format!("[{bytes:<16}]"), "[hex:61ff09625c  ]");
        assert_ne!(bytes, "a\u{fffd}\tb\\");
        assert_eq!(JobId::from("nul\0").to_string(), "hex:6e756c00");
        // Text that reads as the hex form of another id is shown in hex itself.
        assert_eq!(JobId::from("hex:41").to_string(), "hex:6865783a3431");
        assert_eq!(JobId::from("bad\\xff").to_string(), "bad\\xff");
        assert_eq!(serde_json::to_string(&bytes).unwrap(), "\"hex:61ff09625c\"");
        // JSON carries a UTF-8 id exactly, control characters included.
        assert_eq!(
            serde_json::to_string(&JobId::from("a\tb")).unwrap(),
            "\"a\\tb\""
        );
    }

    #[test]
    fn backoff_arguments() {
        assert_eq!(Backoff::Policy.as_arg(), -1);
        assert_eq!(Backoff::Immediate.as_arg(), 0);
        assert_eq!(Backoff::After(Duration::from_millis(250)).as_arg(), 250);
        // A sub-millisecond backoff still means "later", not "immediately".
        assert_eq!(Backoff::After(Duration::from_micros(10)).as_arg(), 1);
    }
}
