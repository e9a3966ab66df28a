//! The `JobQueue` custom resource (`jobqueue.dev/v1alpha1`).
//!
//! The schema carries defaults and CEL rules (`x-kubernetes-validations`) so the API
//! server refuses what it can; what slips past (an old API server, a CRD installed
//! without its rules) is caught again by the controller's own validation and reported
//! with the `SpecValid` condition (see `docs/operator.md`). The fields that say where the
//! queue's keys are (`hashTag`, `keyPrefix`, `redis.url`, `redis.urlSecretRef`,
//! `redis.cluster`) are immutable: a change would orphan the keys.
//!
//! Durations are Go-style strings (`60s`, `1m30s`, `500ms`) as everywhere in Kubernetes.
//! They are kept as strings in the types so one malformed value never stops the whole
//! object from being read: the controller parses them and names the bad field.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "jobqueue.dev";
/// The API version.
pub const VERSION: &str = "v1alpha1";
/// `group/version`, as in `apiVersion`.
pub const API_VERSION: &str = "jobqueue.dev/v1alpha1";

/// A Go duration as CEL's `duration()` reads it (`60s`, `1m30s`, `500ms`, `-5s`, `0`): a
/// value checked against it first is refused with its rule's message, not with a CEL
/// runtime error, and a comparison of two durations is only made when both read.
macro_rules! go_duration {
    () => {
        "^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"
    };
}

/// Why the fields that say where the queue's keys are may not change.
macro_rules! keys_stay {
    ($field:literal) => {
        concat!(
            $field,
            " is immutable: changing it would orphan the queue's keys in Redis (its jobs, \
             leases and dead letters stay where they are). To move a queue, create a new \
             JobQueue and drain the old one"
        )
    };
}

const POSITIVE: &str = concat!(
    "self.matches('",
    go_duration!(),
    "') && duration(self) > duration('0s')"
);
/// A positive duration, or `auto`.
const POSITIVE_OR_AUTO: &str = concat!(
    "self == 'auto' || (self.matches('",
    go_duration!(),
    "') && duration(self) > duration('0s'))"
);
const NON_NEGATIVE: &str = concat!(
    "self.matches('",
    go_duration!(),
    "') && duration(self) >= duration('0s')"
);
/// `retry.max >= retry.initial`, compared only when both are durations CEL reads (the
/// fields' own rules refuse the others, with their own messages).
const RETRY_BOUNDS: &str = concat!(
    "!has(self.initial) || !has(self.max) || !self.initial.matches('",
    go_duration!(),
    "') || !self.max.matches('",
    go_duration!(),
    "') || duration(self.max) >= duration(self.initial)"
);

// Several printer columns repeat `type_`, which this lint mistakes for a repeated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "jobqueue.dev",
    version = "v1alpha1",
    kind = "JobQueue",
    namespaced,
    shortname = "jq",
    category = "jobqueue",
    status = "JobQueueStatus",
    derive = "PartialEq",
    doc = "A Redis reliable job queue with visibility timeouts, kept healthy by the jobqueue operator.",
    printcolumn(
        name = "Pending",
        type_ = "integer",
        json_path = ".status.pending",
        description = "Jobs ready to be claimed"
    ),
    printcolumn(
        name = "Processing",
        type_ = "integer",
        json_path = ".status.processing",
        description = "Jobs leased to a worker"
    ),
    printcolumn(
        name = "Dead",
        type_ = "integer",
        json_path = ".status.dead",
        description = "Jobs in the dead-letter set"
    ),
    printcolumn(
        name = "Due",
        type_ = "integer",
        json_path = ".status.due",
        description = "Delayed jobs whose time has come, not yet promoted",
        priority = 1
    ),
    printcolumn(
        name = "Orphaned",
        type_ = "integer",
        json_path = ".status.orphaned",
        description = "Ids set aside because their job hash was absent",
        priority = 1
    ),
    printcolumn(
        name = "Oldest",
        type_ = "date",
        json_path = ".status.oldestPendingSince",
        description = "How long the oldest job ready to run has waited",
        priority = 1
    ),
    printcolumn(
        name = "Partitions",
        type_ = "integer",
        json_path = ".spec.partitions",
        description = "Partitions the queue is spread over",
        priority = 1
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.currentReplicas",
        description = "Current worker replicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the queue is reachable and reaped"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    cel
)]
#[serde(rename_all = "camelCase")]
/// The queue the operator keeps: where it lives, its protocol settings, how it is reaped
/// and (optionally) which workers to scale.
pub struct JobQueueSpec {
    /// Where the queue lives.
    pub redis: RedisSpec,

    /// The text of the queue's Redis Cluster hash tag, e.g. `emails`: keys become
    /// `jq:{emails}:…`. Without braces; immutable once set.
    #[x_kube(
        validation = Rule::new("self.size() > 0").message("hashTag must not be empty"),
        validation = Rule::new("!self.contains('{') && !self.contains('}')")
            .message("hashTag must not contain braces: write `emails`, not `{emails}`"),
        validation = Rule::new("self == oldSelf").message(keys_stay!("hashTag"))
    )]
    #[schemars(length(max = 128))]
    pub hash_tag: String,

    /// The prefix of every key of the queue.
    #[serde(default = "default_key_prefix")]
    #[x_kube(
        validation = Rule::new("self.size() > 0 && !self.contains('{') && !self.contains('}')")
            .message("keyPrefix must be non-empty and contain no braces"),
        validation = Rule::new("self == oldSelf").message(keys_stay!("keyPrefix"))
    )]
    #[schemars(length(max = 64))]
    pub key_prefix: String,

    /// How long a claimed job stays invisible to other workers before the reaper puts it
    /// back (a Go duration, e.g. `60s`), or `auto`: the operator sets it from the queue's
    /// recent processing times (p99 × margin within `visibilityAuto`'s bounds), raises it
    /// at once when leases are taken from running jobs, and lowers it slowly; the value
    /// and why are in `status.visibility`. `auto` is for a queue of one partition.
    #[serde(default = "default_visibility_timeout")]
    #[x_kube(validation = Rule::new(POSITIVE_OR_AUTO).message("visibilityTimeout must be a positive duration or auto"))]
    #[schemars(length(max = 32))]
    pub visibility_timeout: String,

    /// The bounds and margin of `visibilityTimeout: auto` (defaults 5s, 15m, 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility_auto: Option<VisibilityAutoSpec>,

    /// Claims after which a failing or expiring job goes to the dead-letter set.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1))]
    pub max_attempts: u32,

    /// Backoff between retries of a failed job.
    #[serde(default)]
    pub retry: RetrySpec,

    /// How long an acked job's hash is kept (a deduplication window); `0s` deletes it on ack.
    #[serde(default = "default_completed_retention")]
    #[x_kube(validation = Rule::new(NON_NEGATIVE).message("completedRetention must not be negative"))]
    #[schemars(length(max = 32))]
    pub completed_retention: String,

    /// Limits of the dead-letter set.
    #[serde(default)]
    pub dead_letter: DeadLetterSpec,

    /// How often and how much the operator reaps expired leases.
    #[serde(default)]
    pub reaper: ReaperSpec,

    /// What the queue's writes wait for: the operator's own (reaps) and, published in
    /// the queue's `meta`, those of workers started without `--durability`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilitySpec>,

    /// Pause the queue's claims: `true` pauses it (workers claim nothing; producers,
    /// acks, fails and the reaper go on, and the workers' replicas are left as they are),
    /// `false` resumes it. Absent, the operator leaves the pause to `jobqueue pause` /
    /// `jobqueue resume` and the console, and reports it in `status.paused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,

    /// At most `max` claims per `per` across every worker of the queue (e.g. `{max: 100,
    /// per: 1s}`), kept by the claim scripts on the Redis clock; a limited worker waits
    /// for the next slot. The operator also scales the workers no higher than the limit
    /// keeps busy (condition `RateLimited`). Absent: no limit (one set with `jobqueue
    /// configure --rate-limit` is removed, as the spec owns the queue's settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitSpec>,

    /// The same limit for the jobs of each rate key apart (`jobqueue enqueue --rate-key`),
    /// so one key (a tenant) cannot take the whole queue: a job over its key's limit
    /// waits in delayed for its key's next slot. Absent: no per-key limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_key: Option<RateLimitSpec>,

    /// How claims choose among the priorities of ready jobs (`jobqueue enqueue
    /// --priority`, a schedule's `priority`): `strict`, the highest priority with a ready
    /// job first, always; or `weighted`, a round robin where priority p weighs 2^p, so
    /// none starves. Absent: strict (a mode set with `jobqueue configure --priority-mode`
    /// is reset, as the spec owns the queue's settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self == 'strict' || self == 'weighted'")
            .message("priorityMode must be strict or weighted")
    )]
    #[schemars(length(max = 16))]
    pub priority_mode: Option<String>,

    /// The worker workload to scale on backlog. Without it, the operator does not scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersSpec>,

    /// How many partitions the queue is spread over (1 to 256): each is an ordinary
    /// queue with a hash tag of its own (`emails`, `emails~17`, ...), so on a Redis
    /// Cluster they spread over the masters. 1, the default, is the queue as it always
    /// was. May change: growing adds partitions; shrinking drains the removed ones
    /// (reaped and counted until empty, `status.partitions.draining`), nothing is lost.
    #[serde(default = "default_partitions")]
    #[x_kube(
        validation = Rule::new("self >= 1 && self <= 256")
            .message("partitions must be between 1 and 256")
    )]
    #[schemars(range(min = 1, max = 256))]
    pub partitions: u32,

    /// Recurring jobs: each a named rule, `every` an interval or a `cron` expression in a
    /// `timeZone`, that enqueues one job with `payload` per tick (docs/protocol.md,
    /// Schedules). The operator writes them into Redis and removes the ones it wrote that
    /// are no longer listed; schedules added with `jobqueue schedule add` are left alone.
    /// Not on a partitioned queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// (A list map keyed by name: the API server refuses two entries of one name.)
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    #[schemars(length(max = 100))]
    pub schedules: Vec<ScheduleSpec>,
}

/// One entry of `spec.schedules`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.every) != has(self.cron)")
        .message("a schedule has exactly one of every and cron"),
    validation = Rule::new("!has(self.timeZone) || has(self.cron)")
        .message("timeZone applies to cron")
)]
pub struct ScheduleSpec {
    /// 1..200 characters of A-Z a-z 0-9 . _ - (part of the jobs' ids).
    #[x_kube(
        validation = Rule::new("self.matches('^[A-Za-z0-9._-]{1,200}$')")
            .message("a schedule name is 1..200 characters of A-Z a-z 0-9 . _ -")
    )]
    #[schemars(length(max = 200))]
    pub name: String,
    /// Tick every interval (e.g. `30s`, `5m`), at multiples of it since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(POSITIVE).message("every must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub every: Option<String>,
    /// A 5-field cron expression (6 with seconds first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub cron: Option<String>,
    /// The cron expression's IANA time zone; UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub time_zone: Option<String>,
    /// The payload of every job it enqueues.
    #[serde(default)]
    #[schemars(length(max = 65536))]
    pub payload: String,
    /// A tick late by its interval or more: `skip` it (the default) or fire `once`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'skip' || self == 'once'").message("missed must be skip or once"))]
    #[schemars(length(max = 8))]
    pub missed: Option<String>,

    // The options of every job it fires (docs/protocol.md, Per-job options): those of
    // `jobqueue enqueue` and `jobqueue schedule add`, each instead of the queue's setting
    // (or the worker's) for those jobs alone.
    /// Claims before a job it fires, failing, goes to the dead-letter set, instead of
    /// `spec.maxAttempts` (1 to 1000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self >= 1 && self <= 1000000")
            .message("a schedule's maxAttempts must be between 1 and 1000000")
    )]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_attempts: Option<u32>,
    /// Its jobs' retry backoff after their first failure, instead of `spec.retry.initial`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(NON_NEGATIVE).message("a schedule's backoffInitial must be a duration, not negative"))]
    #[schemars(length(max = 32))]
    pub backoff_initial: Option<String>,
    /// Its jobs' longest retry backoff, instead of `spec.retry.max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(NON_NEGATIVE).message("a schedule's backoffMax must be a duration, not negative"))]
    #[schemars(length(max = 32))]
    pub backoff_max: Option<String>,
    /// Each retry of its jobs waits this many times longer than the previous one (1 to
    /// 1000), instead of `spec.retry.multiplier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self >= 1.0 && self <= 1000.0")
            .message("a schedule's backoffMultiplier must be a number from 1 to 1000")
    )]
    #[schemars(range(min = 1.0, max = 1000.0))]
    pub backoff_multiplier: Option<f64>,
    /// Its jobs' priority, 0 (the default, lowest) to 9 (highest): a higher priority is
    /// claimed first (`priorityMode` says how strictly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self >= 0 && self <= 9")
            .message("a schedule's priority must be between 0 and 9")
    )]
    #[schemars(range(min = 0, max = 9))]
    pub priority: Option<u8>,
    /// The longest one run of a job it fires may take (e.g. `2m`), instead of the
    /// worker's `--timeout`: past it, its worker stops it and fails it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(POSITIVE).message("a schedule's timeout must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub timeout: Option<String>,
    /// The length of its jobs' leases (e.g. `30s`), instead of `spec.visibilityTimeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(POSITIVE).message("a schedule's visibility must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub visibility: Option<String>,
    /// The key `spec.rateLimitPerKey` counts its jobs under (1 to 256 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() >= 1").message("a schedule's rateKey must not be empty"))]
    #[schemars(length(max = 256))]
    pub rate_key: Option<String>,
}

/// One schedule of `status.schedules`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    pub name: String,
    /// The last tick fired (or skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tick: Option<Time>,
    /// The next tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_tick: Option<Time>,
}

/// The most partitions `spec.partitions` allows: a worker waits on one connection per
/// partition, and the operator maintains each one per `reaper.interval`.
pub const MAX_SPEC_PARTITIONS: u32 = 256;

/// How to reach Redis. Credentials come from Secrets and are never copied into the
/// status, events or logs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "(has(self.url) ? 1 : 0) + (has(self.urlSecretRef) ? 1 : 0) + \
         (has(self.sentinel) ? 1 : 0) == 1"
    )
    .message("exactly one of url, urlSecretRef and sentinel must be set"),
    validation = Rule::new("!has(self.sentinel) || !has(self.cluster) || !self.cluster")
        .message(
            "sentinel and cluster exclude each other: a Cluster fails over by itself, give \
             its seed nodes in url"
        ),
    validation = Rule::new(
        "has(self.url) == has(oldSelf.url) && (!has(self.url) || self.url == oldSelf.url)"
    )
    .message(keys_stay!("redis.url")),
    validation = Rule::new(
        "has(self.urlSecretRef) == has(oldSelf.urlSecretRef) && \
         (!has(self.urlSecretRef) || self.urlSecretRef == oldSelf.urlSecretRef)"
    )
    .message(keys_stay!("redis.urlSecretRef")),
    validation = Rule::new(
        "has(self.sentinel) == has(oldSelf.sentinel) && (!has(self.sentinel) || \
         (self.sentinel.masterName == oldSelf.sentinel.masterName && \
          self.sentinel.addresses == oldSelf.sentinel.addresses))"
    )
    .message(keys_stay!("redis.sentinel (its addresses and masterName)")),
    validation = Rule::new(
        "(has(self.cluster) && self.cluster) == (has(oldSelf.cluster) && oldSelf.cluster)"
    )
    .message(keys_stay!("redis.cluster"))
)]
pub struct RedisSpec {
    /// `redis://host:port[/db]`, or `rediss://` for TLS. For a Cluster, seed nodes
    /// separated by commas. Put a URL holding a password in a Secret instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self.startsWith('redis://') || self.startsWith('rediss://')")
            .message("url must start with redis:// or rediss://"),
        validation = Rule::new(
            "self.matches('^[[:space:]]*rediss?://[^,]*(,[[:space:]]*rediss?://[^,]*)*$')"
        )
        .message("every seed node of url must start with redis:// or rediss://")
    )]
    #[schemars(length(max = 4096))]
    pub url: Option<String>,

    /// A Secret key holding the URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_secret_ref: Option<SecretKeySelector>,

    /// Find the primary through Redis Sentinel (and follow its failovers) instead of a
    /// URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<SentinelSpec>,

    /// A Secret key holding the ACL user (Redis 6+) to sign in as, used instead of one in
    /// the URL; its password is `passwordSecretRef`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_secret_ref: Option<SecretKeySelector>,

    /// A Secret key holding the password of the Redis nodes (used instead of one in the
    /// URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeySelector>,

    /// Talk the Redis Cluster protocol.
    #[serde(default)]
    pub cluster: bool,

    /// Use TLS (`rediss://`) even when the URL says `redis://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
}

/// `spec.redis.sentinel`: the Sentinels to ask for the primary of one master name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SentinelSpec {
    /// `host:port` of each Sentinel (port 26379 when left out), not URLs; the first
    /// that answers is asked.
    #[x_kube(
        validation = Rule::new("self.size() > 0").message("sentinel.addresses must not be empty")
    )]
    #[schemars(length(max = 16), inner(length(max = 256)))]
    pub addresses: Vec<String>,
    /// The master name the Sentinels monitor (`sentinel monitor NAME ...`).
    #[x_kube(
        validation = Rule::new("self.size() > 0").message("sentinel.masterName must not be empty")
    )]
    #[schemars(length(max = 256))]
    pub master_name: String,
    /// A Secret key holding the Sentinels' own password (their `requirepass`); the data
    /// nodes' password is `redis.passwordSecretRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeySelector>,
}

/// A key of a Secret in the JobQueue's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// The Secret's name.
    #[x_kube(validation = Rule::new("self.size() > 0").message("the Secret name must not be empty"))]
    #[schemars(length(max = 253))]
    pub name: String,
    /// The key within the Secret's data.
    #[x_kube(validation = Rule::new("self.size() > 0").message("the Secret key must not be empty"))]
    #[schemars(length(max = 253))]
    pub key: String,
}

/// TLS settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.clientCertSecretRef) == has(self.clientKeySecretRef)")
        .message("tls.clientCertSecretRef and tls.clientKeySecretRef go together: set both or neither")
)]
pub struct TlsSpec {
    /// A Secret key holding the PEM CA bundle that signs the server's certificate. The
    /// system roots are used without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret_ref: Option<SecretKeySelector>,
    /// A Secret key holding the PEM client certificate (chain) for mutual TLS, for a
    /// Redis with `tls-auth-clients yes` (e.g. key `tls.crt` of a `kubernetes.io/tls`
    /// Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_secret_ref: Option<SecretKeySelector>,
    /// A Secret key holding the PEM private key of the client certificate (e.g. key
    /// `tls.key` of the same Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_secret_ref: Option<SecretKeySelector>,
    /// The name to check the server's certificate for (and to send as SNI) instead of
    /// the URL's host, which is still where to connect: for a Redis reached by an address
    /// its certificate does not list (an IP address, a Service alias). One standalone
    /// server only: not with `cluster` or `sentinel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("tls.serverName must not be empty when set"))]
    #[schemars(length(max = 253))]
    pub server_name: Option<String>,
}

/// `spec.durability`: what the queue's writes wait for before they count as done.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DurabilitySpec {
    /// `primary`: a write is done once the primary ran it (a failover right after can
    /// lose it). `replicated`: also once `replicas` replicas confirmed it within
    /// `timeout` (`WAIT`), else the write reports an error; a worker's claims wait too,
    /// and the jobs a call leased are run even when too few replicas confirmed it.
    #[serde(default)]
    pub mode: DurabilityMode,
    /// Replicas that must confirm a write (with `replicated`).
    #[serde(default = "default_durability_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: u32,
    /// How long a write waits for them (with `replicated`).
    #[serde(default = "default_durability_timeout")]
    #[x_kube(validation = Rule::new(POSITIVE).message("durability.timeout must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub timeout: String,
}

/// The two durability modes.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
#[serde(rename_all = "camelCase")]
pub enum DurabilityMode {
    /// Done once the primary ran it.
    #[default]
    Primary,
    /// Done once the primary ran it and `replicas` replicas confirmed it.
    Replicated,
}

impl Default for DurabilitySpec {
    fn default() -> Self {
        DurabilitySpec {
            mode: DurabilityMode::Primary,
            replicas: default_durability_replicas(),
            timeout: default_durability_timeout(),
        }
    }
}

/// Exponential backoff between retries: `initial × multiplier^(attempt-1)`, capped at `max`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(RETRY_BOUNDS).message("retry.max must not be below retry.initial"))]
pub struct RetrySpec {
    /// The first retry's delay.
    #[serde(default = "default_retry_initial")]
    #[x_kube(validation = Rule::new(POSITIVE).message("retry.initial must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub initial: String,
    /// The longest delay.
    #[serde(default = "default_retry_max")]
    #[x_kube(validation = Rule::new(POSITIVE).message("retry.max must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub max: String,
    /// Growth factor per attempt (1 to 1000).
    #[serde(default = "default_retry_multiplier")]
    #[schemars(range(min = 1.0, max = 1000.0))]
    pub multiplier: f64,
}

/// `spec.rateLimit`, `spec.rateLimitPerKey`: at most `max` claims in any window of `per`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitSpec {
    /// The most claims per window (1 to 1000000).
    #[x_kube(
        validation = Rule::new("self >= 1 && self <= 1000000")
            .message("rateLimit.max must be between 1 and 1000000")
    )]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max: u32,
    /// The window, a positive duration of whole milliseconds (e.g. `1s`, `500ms`).
    #[x_kube(validation = Rule::new(POSITIVE).message("rateLimit.per must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub per: String,
}

/// Limits of the dead-letter set; the reaper trims beyond them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterSpec {
    /// Dead jobs older than this are deleted; `0s` keeps them regardless of age.
    #[serde(default = "default_dead_retention")]
    #[x_kube(validation = Rule::new(NON_NEGATIVE).message("deadLetter.retention must not be negative"))]
    #[schemars(length(max = 32))]
    pub retention: String,
    /// At most this many dead jobs are kept; 0 means no limit.
    #[serde(default = "default_dead_max_length")]
    #[schemars(range(max = 9_007_199_254_740_992_u64))]
    pub max_length: u64,
}

/// `spec.visibilityAuto`: the bounds and margin of `visibilityTimeout: auto`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VisibilityAutoSpec {
    /// The least value (never below the 1s renewals need).
    #[serde(default = "default_auto_min")]
    #[x_kube(validation = Rule::new(POSITIVE).message("visibilityAuto.min must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub min: String,
    /// The largest value.
    #[serde(default = "default_auto_max")]
    #[x_kube(validation = Rule::new(POSITIVE).message("visibilityAuto.max must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub max: String,
    /// The value aimed at is p99 × margin (1 to 100).
    #[serde(default = "default_auto_margin")]
    #[schemars(range(min = 1.0, max = 100.0))]
    pub margin: f64,
}

fn default_auto_min() -> String {
    "5s".into()
}
fn default_auto_max() -> String {
    "15m".into()
}
fn default_auto_margin() -> f64 {
    2.0
}

/// `status.visibility`: the visibility timeout in force under `auto`, and why.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VisibilityStatus {
    /// The value in force, e.g. `30s`.
    pub current: String,
    /// Why it is what it is.
    #[serde(default)]
    pub reason: String,
    /// When it was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// Who set it: `operator`, `cli`, `reaper:<worker>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<String>,
}

/// The reaper: expired leases go back to pending (or to the dead-letter set once out of
/// attempts).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReaperSpec {
    /// Time between two reconciles of the queue (reap, then publish the status).
    #[serde(default = "default_reaper_interval")]
    #[x_kube(validation = Rule::new(POSITIVE).message("reaper.interval must be a positive duration"))]
    #[schemars(length(max = 32))]
    pub interval: String,
    /// Expired leases handled per reaper call (1 to 1000).
    #[serde(default = "default_reaper_batch")]
    #[schemars(range(min = 1, max = 1000))]
    pub batch_size: u32,
}

/// The workload that runs the queue's workers, scaled on backlog.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.minReplicas) || self.minReplicas <= self.maxReplicas")
        .message("minReplicas must not exceed maxReplicas")
)]
pub struct WorkersSpec {
    /// The object to scale; any kind with a scale subresource.
    pub scale_target_ref: ScaleTargetRef,
    /// Fewest replicas (0 allows scaling to zero).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_replicas: i32,
    /// Most replicas.
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    /// Jobs one replica runs at once (its `jobqueue worker --concurrency`): with
    /// `spec.rateLimit`, the replicas the limit keeps busy are the limit's rate × the
    /// observed processing time ÷ this.
    #[serde(default = "default_concurrency")]
    #[x_kube(validation = Rule::new("self >= 1").message("workers.concurrency must be at least 1"))]
    #[schemars(range(min = 1))]
    pub concurrency: u32,
    /// Pending plus processing jobs one replica is expected to handle.
    #[serde(default = "default_target_backlog")]
    #[schemars(range(min = 1))]
    pub target_backlog_per_replica: u32,
    /// Below or at this backlog the workload may scale to zero; above it, it scales up
    /// from zero.
    #[serde(default)]
    pub activation_backlog: u32,
    /// How long a lower recommendation must hold before scaling down: the highest
    /// recommendation within this window wins.
    #[serde(default = "default_scale_down_stabilization")]
    #[x_kube(
        validation = Rule::new(NON_NEGATIVE)
            .message("workers.scaleDownStabilization must not be negative")
    )]
    #[schemars(length(max = 32))]
    pub scale_down_stabilization: String,
    /// Deprecated: use `behavior.scaleUp`. At most this many replicas added per
    /// reconcile; used only when `behavior.scaleUp` is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_scale_up_step: Option<i32>,
    /// How fast to scale up, as a HorizontalPodAutoscaler's `behavior`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<WorkersBehavior>,
    /// The replicas to hold while the queue cannot be read (as KEDA's `fallback`), so a
    /// workload at zero still runs when only the operator's path to Redis is broken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackSpec>,
    /// What deleting the JobQueue does to the target's replicas: `keep` leaves them as
    /// they are, `restore` sets them back to the count the target had when the operator
    /// took it (`status.originalReplicas`), `zero` scales the target to 0.
    #[serde(default)]
    pub on_delete: OnDelete,
}

/// `spec.workers.fallback`: after `failureThreshold` reconciles in a row that could not
/// read the queue, scale the target to `replicas` and hold it there until the queue can
/// be read again.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FallbackSpec {
    /// Failed reconciles in a row before the fallback (at least 1).
    #[x_kube(validation = Rule::new("self >= 1").message("fallback.failureThreshold must be at least 1"))]
    #[schemars(range(min = 1))]
    pub failure_threshold: u32,
    /// The replicas to hold (0 or more).
    #[x_kube(validation = Rule::new("self >= 0").message("fallback.replicas must not be negative"))]
    #[schemars(range(min = 0))]
    pub replicas: i32,
}

/// What deleting a JobQueue does to its worker target (as KEDA's
/// `advanced.restoreToOriginalReplicaCount`, with a third choice).
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
#[serde(rename_all = "camelCase")]
pub enum OnDelete {
    /// Leave the replicas as they are.
    #[default]
    Keep,
    /// Set the replicas back to `status.originalReplicas`.
    Restore,
    /// Scale the target to 0.
    Zero,
}

/// Scaling behavior, as the HPA's `spec.behavior` (scale-down has
/// `scaleDownStabilization`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkersBehavior {
    /// How fast replicas are added; the HPA's defaults without it (+100 % or +4 pods per
    /// 15 s, the larger; no stabilization window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<ScaleUpRules>,
}

/// The HPA's `HPAScalingRules`, for scale-up.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "!has(self.policies) || self.policies.size() > 0 || \
         (has(self.selectPolicy) && self.selectPolicy == 'Disabled')"
    )
    .message("behavior.scaleUp.policies must not be empty unless selectPolicy is Disabled")
)]
pub struct ScaleUpRules {
    /// The changes allowed per period; within a period each counts from the replicas at
    /// its start.
    #[serde(default = "default_scale_up_policies")]
    #[schemars(length(max = 10))]
    pub policies: Vec<ScalingPolicy>,
    /// Which policy wins: `Max` (the largest change), `Min` (the smallest) or `Disabled`
    /// (no scale-up beyond `minReplicas`).
    #[serde(default)]
    pub select_policy: SelectPolicy,
    /// Seconds over which the lowest recommendation wins a scale-up (0: scale up at once).
    #[serde(default)]
    #[schemars(range(min = 0, max = 3600))]
    pub stabilization_window_seconds: i32,
}

/// One scale-up policy: at most `value` pods, or `value` percent, more per period.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingPolicy {
    /// `Pods` or `Percent`.
    #[serde(rename = "type")]
    pub type_: ScalingPolicyType,
    /// Pods, or percent of the replicas at the start of the period.
    #[schemars(range(min = 1))]
    pub value: i32,
    /// The period's length in seconds (1 to 1800).
    #[schemars(range(min = 1, max = 1800))]
    pub period_seconds: i32,
}

/// The kind of a [`ScalingPolicy`].
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalingPolicyType {
    Pods,
    Percent,
}

/// Which scale-up policy wins.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum SelectPolicy {
    #[default]
    Max,
    Min,
    Disabled,
}

impl Default for ScaleUpRules {
    fn default() -> Self {
        ScaleUpRules {
            policies: default_scale_up_policies(),
            select_policy: SelectPolicy::Max,
            stabilization_window_seconds: 0,
        }
    }
}

/// What to scale.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// The target's API version, e.g. `apps/v1`.
    #[serde(default = "default_target_api_version")]
    #[x_kube(
        validation = Rule::new("self.matches('^([^/ ]+/)?[^/ ]+$')").message(
            "scaleTargetRef.apiVersion must be group/version (e.g. apps/v1) or a core \
             version (v1)"
        )
    )]
    pub api_version: String,
    /// The target's kind, e.g. `Deployment` or `StatefulSet`.
    #[serde(default = "default_target_kind")]
    #[x_kube(
        validation = Rule::new("self.matches('^[A-Za-z0-9]+$')")
            .message("scaleTargetRef.kind must be a kind name (e.g. Deployment)")
    )]
    pub kind: String,
    /// The target's name, in the JobQueue's namespace.
    #[x_kube(validation = Rule::new("self.size() > 0").message("scaleTargetRef.name must not be empty"))]
    pub name: String,
}

/// What the operator last saw of the queue.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobQueueStatus {
    /// The generation of the spec this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Jobs ready to be claimed.
    #[serde(default)]
    pub pending: u64,
    /// Jobs leased to a worker.
    #[serde(default)]
    pub processing: u64,
    /// Leases past their visibility timeout, not yet reaped.
    #[serde(default)]
    pub expired: u64,
    /// Jobs waiting for their retry backoff or delay, due or not.
    #[serde(default)]
    pub delayed: u64,
    /// Of `delayed`, the jobs whose time has come, not yet promoted to pending: work to
    /// do now, counted in the backlog that scales the workers.
    #[serde(default)]
    pub due: u64,
    /// Jobs in the dead-letter set.
    #[serde(default)]
    pub dead: u64,
    /// The queue is paused: its claims stop (`spec.paused`, `jobqueue pause`, the console).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Ids set aside because their job hash was absent (a Cluster slot migration, or a
    /// hash deleted by hand). The reaper puts each back once its hash is there again;
    /// ids that stay are what `jobqueue dead purge --orphans --yes` removes.
    #[serde(default)]
    pub orphaned: u64,

    /// Expired leases put back since the queue began.
    #[serde(default)]
    pub reaped: u64,
    /// Jobs moved to the dead-letter set since the queue began.
    #[serde(default)]
    pub dead_lettered: u64,
    /// Acks that arrived after their lease had been taken away, since the queue began.
    #[serde(default)]
    pub stale_acks: u64,

    /// Median processing time of acked jobs (from the queue's histogram).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<String>,
    /// 99th percentile processing time of acked jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<String>,
    /// Since when the oldest job ready to run has waited to be claimed (by the Redis
    /// clock): its age is the queue's latency. Absent when none waits, or when the next
    /// job holds no time (enqueued by an earlier release). It moves only when another job
    /// becomes the oldest, so a waiting queue's status does not change at every reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_pending_since: Option<Time>,

    /// Replicas the scaler wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Replicas the scale target has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// When the scaler last changed the replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// When the reaper last put an expired lease back or dead-lettered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reap_time: Option<Time>,
    /// When the operator last saw the stale-ack count grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stale_ack_time: Option<Time>,

    /// The replicas the worker target had when the operator first took it, kept for
    /// `spec.workers.onDelete: restore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_replicas: Option<OriginalReplicas>,

    /// Under `visibilityTimeout: auto`: the value in force, why, since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<VisibilityStatus>,

    /// The partitions of a partitioned queue (`spec.partitions` above 1, or partitions
    /// of an earlier layout still draining): what the counts above are the sum of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<PartitionsStatus>,

    /// The schedules of `spec.schedules` as Redis holds them: last and next tick.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleStatus>,

    /// `Ready`, `RedisAvailable`, `LeaseTooShort`, `JobsOrphaned` (and `Scaling` with
    /// workers, `PartitionsDrained` once `spec.partitions` has shrunk).
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// `status.partitions`: the layout in force, the partitions of earlier layouts still
/// draining (the operator's memory across restarts: it goes on reaping them until they
/// are empty), and each partition's counts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PartitionsStatus {
    /// The partition count in force (`spec.partitions` of `observedGeneration`).
    pub desired: u32,
    /// The hash tags of partitions of an earlier layout that still hold jobs (pending,
    /// processing, delayed, dead or set aside): reaped and counted until they are empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024))]
    pub draining: Vec<String>,
    /// Each partition's counts: the layout's partitions in order, then the draining ones.
    #[serde(default)]
    #[schemars(length(max = 1280))]
    pub items: Vec<PartitionCounts>,
}

/// One partition's counts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PartitionCounts {
    /// The partition's hash tag (`emails`, `emails~17`): its keys are `prefix:{tag}:…`.
    pub tag: String,
    /// The Redis Cluster slot of its keys: the node serving that slot holds it.
    pub slot: u32,
    /// A partition of an earlier layout, draining.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
    #[serde(default)]
    pub pending: u64,
    #[serde(default)]
    pub processing: u64,
    #[serde(default)]
    pub delayed: u64,
    #[serde(default)]
    pub due: u64,
    #[serde(default)]
    pub dead: u64,
    #[serde(default)]
    pub orphaned: u64,
}

/// A scale target's replicas before the operator first scaled it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OriginalReplicas {
    /// The target they belong to, `Kind/name` (another target starts afresh).
    pub target: String,
    /// Its replicas when the operator took it.
    pub replicas: i32,
}

impl JobQueueStatus {
    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

impl Default for RetrySpec {
    fn default() -> Self {
        RetrySpec {
            initial: default_retry_initial(),
            max: default_retry_max(),
            multiplier: default_retry_multiplier(),
        }
    }
}

impl Default for DeadLetterSpec {
    fn default() -> Self {
        DeadLetterSpec {
            retention: default_dead_retention(),
            max_length: default_dead_max_length(),
        }
    }
}

impl Default for ReaperSpec {
    fn default() -> Self {
        ReaperSpec {
            interval: default_reaper_interval(),
            batch_size: default_reaper_batch(),
        }
    }
}

impl JobQueueSpec {
    /// A spec with every default and the given Redis URL and hash tag.
    pub fn new(url: impl Into<String>, hash_tag: impl Into<String>) -> JobQueueSpec {
        JobQueueSpec {
            redis: RedisSpec {
                url: Some(url.into()),
                ..RedisSpec::default()
            },
            hash_tag: hash_tag.into(),
            key_prefix: default_key_prefix(),
            visibility_timeout: default_visibility_timeout(),
            visibility_auto: None,
            max_attempts: default_max_attempts(),
            retry: RetrySpec::default(),
            completed_retention: default_completed_retention(),
            dead_letter: DeadLetterSpec::default(),
            reaper: ReaperSpec::default(),
            durability: None,
            paused: None,
            rate_limit: None,
            rate_limit_per_key: None,
            priority_mode: None,
            workers: None,
            partitions: default_partitions(),
            schedules: Vec::new(),
        }
    }
}

fn default_key_prefix() -> String {
    crate::queue::DEFAULT_PREFIX.to_string()
}
fn default_visibility_timeout() -> String {
    "30s".into()
}
fn default_max_attempts() -> u32 {
    5
}
fn default_retry_initial() -> String {
    "1s".into()
}
fn default_retry_max() -> String {
    "5m".into()
}
fn default_retry_multiplier() -> f64 {
    2.0
}
fn default_completed_retention() -> String {
    "0s".into()
}
fn default_dead_retention() -> String {
    "168h".into()
}
fn default_dead_max_length() -> u64 {
    10_000
}
fn default_reaper_interval() -> String {
    "10s".into()
}
/// 250 leases per call: a call stays well under 5 ms of Redis time (a script blocks every
/// client of its Redis) while a round trip per 250 leases keeps the reaper above
/// 100,000 leases/s (docs/benchmarks.md).
fn default_reaper_batch() -> u32 {
    250
}
fn default_durability_replicas() -> u32 {
    1
}
fn default_durability_timeout() -> String {
    "1s".into()
}
fn default_partitions() -> u32 {
    1
}
fn default_concurrency() -> u32 {
    1
}
fn default_target_backlog() -> u32 {
    10
}
fn default_scale_down_stabilization() -> String {
    "300s".into()
}
/// The HPA's: +100 % or +4 pods per 15 s.
fn default_scale_up_policies() -> Vec<ScalingPolicy> {
    vec![
        ScalingPolicy {
            type_: ScalingPolicyType::Percent,
            value: 100,
            period_seconds: 15,
        },
        ScalingPolicy {
            type_: ScalingPolicyType::Pods,
            value: 4,
            period_seconds: 15,
        },
    ]
}
fn default_target_api_version() -> String {
    "apps/v1".into()
}
fn default_target_kind() -> String {
    "Deployment".into()
}

/// The CustomResourceDefinition as YAML, as `jobqueue crd` prints it.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let yaml = serde_saphyr::to_string(&JobQueue::crd()).expect("the CRD serializes to YAML");
    format!("---\n{yaml}")
}
