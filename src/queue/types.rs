//! The values the client hands out and takes in.

use std::time::Duration;

use bytes::Bytes;
use rand::RngCore;

/// A job to enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// Caller-given id (for deduplication); a compact random id when `None`.
    pub id: Option<String>,
    pub payload: Bytes,
    /// Run no earlier than this from now (Redis clock). Zero: ready now.
    pub delay: Duration,
}

impl NewJob {
    pub fn new(payload: impl Into<Bytes>) -> NewJob {
        NewJob {
            id: None,
            payload: payload.into(),
            delay: Duration::ZERO,
        }
    }

    pub fn id(mut self, id: impl Into<String>) -> NewJob {
        self.id = Some(id.into());
        self
    }

    pub fn delay(mut self, delay: Duration) -> NewJob {
        self.delay = delay;
        self
    }
}

/// What became of one enqueued job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub id: String,
    /// False when a job with this id already existed; nothing was changed then.
    pub created: bool,
}

/// A claimed job: the worker holds it until `lease_until`, and proves it with `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: String,
    pub payload: Bytes,
    /// Claims since enqueue (or since the last redrive), this one included.
    pub attempts: u32,
    pub token: String,
    /// Lease expiry, milliseconds since the epoch on the Redis clock.
    pub lease_until: i64,
}

impl Lease {
    /// The id and token of this lease, for the calls that take many (`ack_many`,
    /// `extend_many`). Not `as_ref`: that name belongs to `AsRef`.
    pub fn lease_ref(&self) -> LeaseRef<'_> {
        LeaseRef {
            id: &self.id,
            token: &self.token,
        }
    }
}

/// Id and token: all that acking, extending or failing a lease needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRef<'a> {
    pub id: &'a str,
    pub token: &'a str,
}

impl<'a> From<&'a Lease> for LeaseRef<'a> {
    fn from(lease: &'a Lease) -> Self {
        lease.lease_ref()
    }
}

impl<'a> From<(&'a str, &'a str)> for LeaseRef<'a> {
    fn from((id, token): (&'a str, &'a str)) -> Self {
        LeaseRef { id, token }
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
}

/// Which dead jobs `redrive` and `purge` act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    Ids(Vec<String>),
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
    pub id: String,
    #[serde(serialize_with = "serialize_payload")]
    pub payload: Bytes,
    pub status: Option<String>,
    pub attempts: u32,
    pub enqueued_at: Option<i64>,
    pub claimed_at: Option<i64>,
    pub lease_until: Option<i64>,
    pub last_error: Option<String>,
    pub worker: Option<String>,
}

fn serialize_payload<S: serde::Serializer>(payload: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(payload))
}

const ID_ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A compact random job id: 16 characters of base62, about 95 bits.
pub fn new_job_id() -> String {
    let mut rng = rand::rng();
    let mut n: u128 = ((rng.next_u64() as u128) << 64) | rng.next_u64() as u128;
    let mut id = String::with_capacity(16);
    for _ in 0..16 {
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
                .all(|i| i.len() == 16 && i.chars().all(|c| c.is_ascii_alphanumeric()))
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
