//! The queue client: the protocol of `lua/` (see `docs/protocol.md`) as typed operations.
//!
//! ```no_run
//! # async fn demo() -> jobqueue::queue::Result<()> {
//! use jobqueue::queue::{ConnectOptions, NewJob, Queue, Redis};
//! let redis = Redis::connect(&ConnectOptions::new("redis://127.0.0.1:6379")).await?;
//! let queue = Queue::new(redis, "jq", "emails")?;
//! queue.enqueue(NewJob::new(&b"{\"to\":\"ada@example.com\"}"[..])).await?;
//! if let Some(lease) = queue.claim_one("worker-1", None).await? {
//!     // ... do the work, then:
//!     queue.ack(&lease).await?;
//! }
//! # Ok(()) }
//! ```

pub mod auto_visibility;
mod client;
mod connection;
pub mod tuning;
pub(crate) use connection::url_has_password;
mod durability;
mod error;
pub mod history;
mod keys;
mod partitioned;
pub mod partitions;
mod pinned;
pub mod rate_limit;
pub mod schedule;
mod scripts;
mod sentinel;
mod settings;
mod stats;
mod types;
pub mod view;

pub(crate) use client::within_window;
pub use client::{
    Consumer, DEFAULT_MAX_PAYLOAD, EVENTS_FIELD, Fired, ID_DRAWS, MAX_EVENTS_LEN, NOTIFY_MARGIN,
    Queue, REQUEST_RECORD_LIFE, REQUEST_RETRY_WINDOW, WAIT_RECHECK, parse_claim_token,
    parse_stream_id, reap_due,
};
pub use connection::{
    ClientPairProblem, ConnectOptions, Dedicated, Redis, check_client_pair, pem_blocks, redact_url,
};
pub use durability::{DEFAULT_WAIT_TIMEOUT, Durability, Unconfirmed};
pub use error::{Error, Result, TlsProblem};
pub use keys::{
    DEFAULT_PREFIX, MAX_ID_LEN, MAX_PRIORITY, MAX_UNIQUE_KEY_LEN, QueueKeys, validate_id,
    validate_tag,
};
pub use partitioned::{
    PartitionWaiter, PartitionedConsumer, PartitionedQueue, PartitionedStats, add_stats,
};
pub use partitions::{
    DRAIN_PARTITIONS_FIELD, MAX_PARTITIONS, PARTITIONS_FIELD, PartitionLayout, PartitionRecord,
    partition_of, partition_tags,
};
pub use rate_limit::{RateLimit, RateLimits};
pub use scripts::{SCRIPTS, Script, Scripts};
pub use sentinel::SentinelOptions;
pub use settings::{PRIORITY_MODE_FIELD, PriorityMode, QueueSettings};
pub use stats::{Histogram, OwnRuns, QueueStats};
pub use types::{
    AttemptError, Backoff, Cancellation, Claimed, Deletion, ERROR_BYTES, ERRORS_KEPT, Enqueued,
    FailMode, FailOutcome, HEX_PREFIX, JobEnd, JobEvent, JobId, JobInfo, JobOptions, JobStatus,
    Lease, LeaseRef, MAX_JOB_ATTEMPTS, MAX_PROGRESS_TEXT, MAX_RESULT, Maintenance, NewJob,
    PURGED_REMEMBERED_MS, Progress, ReapOutcome, Renewal, Selection, SetAside, Settle, Settled,
    SettledClaim, Unique, UniqueMode, UniqueOutcome, new_job_id, new_token,
};

/// The most items one script call takes (the protocol's bound on every count).
pub const MAX_BATCH: usize = 1000;
