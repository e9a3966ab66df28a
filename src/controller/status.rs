//! Status and conditions, built by pure functions from what one reconcile observed.
//!
//! Every function takes the previous status and the time as arguments, so a condition's
//! `lastTransitionTime` is kept unless its status really changed, and the same input
//! always builds the same status: an idle queue's status does not change, and the
//! controller then writes nothing.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::partitions::{self, PartitionObservation};
use super::scaling::{Decision, Reason};
use crate::crd::{JobQueueStatus, VisibilityStatus};
use crate::queue::{Histogram, QueueStats, ReapOutcome};

/// Condition types.
pub mod types {
    /// The queue is configured, reaped and counted.
    pub const READY: &str = "Ready";
    /// The operator reached the queue's Redis (and it accepted the credentials).
    pub const REDIS_AVAILABLE: &str = "RedisAvailable";
    /// Acks arrive after their lease expired: jobs run longer than the visibility timeout.
    pub const LEASE_TOO_SHORT: &str = "LeaseTooShort";
    /// The operator scales the worker workload on backlog (with `spec.workers`).
    pub const SCALING: &str = "Scaling";
    /// Ids sit in the orphans set: their job hash was absent when a script looked.
    pub const JOBS_ORPHANED: &str = "JobsOrphaned";
    /// The partitions `spec.partitions` left out of its layout (after a shrink) are
    /// empty: `False` while they still hold jobs, `True` once they are drained. Present
    /// once a reconcile has had partitions of an earlier layout to drain.
    pub const PARTITIONS_DRAINED: &str = "PartitionsDrained";
    /// The spec passed the controller's validation and is in force as written; when
    /// `False`, the reason says what the operator does instead (see [`SpecVerdict`]).
    ///
    /// [`SpecVerdict`]: super::SpecVerdict
    pub const SPEC_VALID: &str = "SpecValid";
    /// With `spec.rateLimit` and `spec.workers`: `True` while the replicas are capped at
    /// what the rate limit keeps busy (below what the backlog asks for), `False` while the
    /// backlog asks for no more, `Unknown` before any processing time was observed.
    pub const RATE_LIMITED: &str = "RateLimited";
}

/// Condition reasons.
pub mod reasons {
    /// The rate limit keeps fewer replicas busy than the backlog asks for.
    pub const RATE_LIMIT_CAPS_REPLICAS: &str = "RateLimitCapsReplicas";
    /// The backlog asks for no more replicas than the rate limit keeps busy.
    pub const BELOW_RATE_LIMIT: &str = "BelowRateLimit";
    /// No ack yet: the processing time the cap needs is unknown; no cap.
    pub const NO_PROCESSING_TIMES: &str = "NoProcessingTimes";
    pub const QUEUE_HEALTHY: &str = "QueueHealthy";
    pub const CONNECTED: &str = "Connected";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    pub const SECRET_KEY_MISSING: &str = "SecretKeyMissing";
    pub const SECRET_UNREADABLE: &str = "SecretUnreadable";
    pub const REDIS_UNREACHABLE: &str = "RedisUnreachable";
    pub const AUTH_FAILED: &str = "AuthFailed";
    /// Redis's ACL refused a command or a key of the queue to the user.
    pub const ACL_DENIED: &str = "AclDenied";
    /// A TLS certificate was refused: the server's by the operator, or the operator's.
    pub const TLS_REJECTED: &str = "TlsRejected";
    /// No Sentinel of `spec.redis.sentinel.addresses` answered.
    pub const SENTINEL_UNREACHABLE: &str = "SentinelUnreachable";
    /// The Sentinels answered but monitor no master of `spec.redis.sentinel.masterName`.
    pub const UNKNOWN_MASTER: &str = "UnknownMaster";
    /// The Redis of the URL is a replica: it refused a write (`READONLY`).
    pub const READ_ONLY: &str = "ReadOnly";
    /// Under `spec.durability: replicated`, fewer replicas than asked confirmed a write.
    pub const NOT_REPLICATED: &str = "NotReplicated";
    pub const INVALID_URL: &str = "InvalidURL";
    pub const WRONG_TYPE: &str = "WrongType";
    pub const REDIS_ERROR: &str = "RedisError";
    pub const STALE_ACKS: &str = "StaleAcks";
    pub const NO_STALE_ACKS: &str = "NoRecentStaleAcks";
    pub const ORPHANED_JOBS: &str = "OrphanedJobs";
    pub const NO_ORPHANED_JOBS: &str = "NoOrphanedJobs";
    pub const VALID_SPEC: &str = "ValidSpec";
    /// `spec.workers` is invalid: the queue is reaped and counted, the workers not scaled.
    pub const INVALID_WORKERS: &str = "InvalidWorkers";
    /// The spec is invalid as a whole: the queue is reaped and counted with the last
    /// settings that passed validation.
    pub const LAST_GOOD_SPEC: &str = "LastGoodSpec";
    /// Partitions of an earlier layout still hold jobs.
    pub const DRAINING: &str = "Draining";
    /// Every partition of an earlier layout is empty.
    pub const DRAINED: &str = "Drained";
}

/// How long `LeaseTooShort` stays true after the stale-ack count last grew.
pub const STALE_ACK_WINDOW: Duration = Duration::from_secs(15 * 60);

/// `True`, `False` or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Now, at the API's precision (whole seconds), so a time read back from the API
/// server compares equal to the one written.
pub fn now() -> Timestamp {
    truncate(Timestamp::now())
}

/// A timestamp cut to whole seconds.
pub fn truncate(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// A new condition.
pub fn condition(
    type_: &str,
    status: Status,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.as_str().to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: Time(now),
    }
}

/// Put `new` into `conditions`, replacing the one of its type. Its
/// `lastTransitionTime` is the previous one's unless the status changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            *old = new;
        }
        None => conditions.push(new),
    }
}

/// Give each condition of `new` whose status is the one `prev` had the transition time
/// `prev` had. A reconcile may set a condition more than once (`Ready` is `True` once
/// the queue is read, then `False` while the last good spec is in force; `Scaling` is
/// dropped without a scaler, then set again to say why it pauses); what changed is
/// decided against the status before the reconcile, not against a step on the way.
pub fn keep_transition_times(prev: Option<&JobQueueStatus>, new: &mut JobQueueStatus) {
    let Some(prev) = prev else {
        return;
    };
    for c in &mut new.conditions {
        if let Some(old) = prev.condition(&c.type_)
            && old.status == c.status
        {
            c.last_transition_time = old.last_transition_time.clone();
        }
    }
}

/// p50 and p99 of the processing-time histogram, formatted; `None` before any ack.
pub fn quantiles(h: &Histogram) -> (Option<String>, Option<String>) {
    (
        h.quantile(0.5).map(crate::duration::format),
        h.quantile(0.99).map(crate::duration::format),
    )
}

/// What one successful reconcile saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// The redacted endpoint, e.g. `redis://redis:6379`.
    pub endpoint: String,
    pub cluster: bool,
    /// The queue's name, `jq:{emails}`.
    pub queue: String,
    /// What this reconcile's reaper calls did.
    pub reaped: ReapOutcome,
    /// The counts after reaping: the sum over the partitions.
    pub stats: QueueStats,
    /// The queue's visibility timeout, for the stale-ack message.
    pub visibility_timeout: Duration,
    /// Under `visibilityTimeout: auto`: the value in force and its record.
    pub visibility: Option<VisibilityObserved>,
    /// `spec.partitions` in force (0 reads as 1).
    pub desired_partitions: usize,
    /// Each partition maintained: the layout's, then those of earlier layouts still
    /// draining (empty reads as the one unpartitioned queue).
    pub partitions: Vec<PartitionObservation>,
    /// `spec.schedules` as Redis holds them.
    pub schedules: Vec<crate::queue::schedule::ScheduleInfo>,
}

/// The visibility timeout under `auto`, as this reconcile left it.
#[derive(Debug, Clone, PartialEq)]
pub struct VisibilityObserved {
    pub current: Duration,
    pub reason: String,
    pub set_by: Option<String>,
    pub set_at_ms: Option<i64>,
    /// The value before, when this reconcile changed it.
    pub changed_from: Option<Duration>,
}

/// Whether `status` holds counts a reconcile observed (a status written only by failed
/// reconciles holds zeros, which are no baseline for "the count grew").
pub fn has_counts(status: &JobQueueStatus) -> bool {
    // Only a successful reconcile sets this condition.
    status.condition(types::LEASE_TOO_SHORT).is_some()
}

/// Whether a reconcile must probe for partitions of earlier layouts: no successful
/// reconcile has recorded the queue's partitions yet (a new JobQueue, or one deleted
/// and created again over keys that are still in Redis; see `partitions::probe_tags`).
pub fn needs_partition_probe(prev: Option<&JobQueueStatus>) -> bool {
    prev.is_none_or(|s| !has_counts(s))
}

/// The status after a successful reconcile.
pub fn observed(
    prev: Option<&JobQueueStatus>,
    generation: Option<i64>,
    obs: &Observation,
    now: Timestamp,
) -> JobQueueStatus {
    let mut status = prev.cloned().unwrap_or_default();
    let stats = &obs.stats;
    let stale_grew = prev.is_some_and(|p| has_counts(p) && stats.stale > p.stale_acks);

    status.observed_generation = generation;
    status.pending = stats.pending;
    status.processing = stats.processing;
    status.expired = stats.expired;
    status.delayed = stats.delayed;
    status.due = stats.due;
    status.dead = stats.dead;
    status.orphaned = stats.orphaned;
    status.paused = stats.paused;
    status.reaped = stats.reaped;
    status.dead_lettered = stats.dead_lettered;
    status.stale_acks = stats.stale;
    (status.p50, status.p99) = quantiles(&stats.histogram);
    status.oldest_pending_since = stats
        .oldest_pending_ms
        .filter(|ms| *ms > 0 && stats.time_ms > 0)
        .and_then(|ms| Timestamp::from_millisecond(stats.time_ms - ms as i64).ok())
        .map(|t| Time(truncate(t)));
    if obs.reaped.requeued + obs.reaped.dead_lettered > 0 {
        status.last_reap_time = Some(Time(now));
    }
    if stale_grew {
        status.last_stale_ack_time = Some(Time(now));
    }
    status.visibility = obs.visibility.as_ref().map(|v| VisibilityStatus {
        current: crate::duration::format(v.current),
        reason: v.reason.clone(),
        since: v
            .set_at_ms
            // whole seconds, as the API server keeps a time (else every status differs)
            .and_then(|ms| Timestamp::from_second(ms.div_euclid(1000)).ok())
            .map(Time),
        set_by: v.set_by.clone(),
    });

    // whole seconds, as the API server keeps a time
    let tick = |ms: Option<i64>| {
        ms.and_then(|ms| Timestamp::from_second(ms.div_euclid(1000)).ok())
            .map(Time)
    };
    status.schedules = obs
        .schedules
        .iter()
        .map(|s| crate::crd::ScheduleStatus {
            name: s.name.clone(),
            last_tick: tick(s.last_tick),
            next_tick: tick(s.next_tick),
        })
        .collect();

    let kind = if obs.cluster {
        "Redis Cluster"
    } else {
        "Redis"
    };
    set_condition(
        &mut status.conditions,
        condition(
            types::REDIS_AVAILABLE,
            Status::True,
            reasons::CONNECTED,
            format!("connected to {kind} at {}", obs.endpoint),
            generation,
            now,
        ),
    );
    set_condition(
        &mut status.conditions,
        condition(
            types::READY,
            Status::True,
            reasons::QUEUE_HEALTHY,
            format!("queue {} is configured, reaped and counted", obs.queue),
            generation,
            now,
        ),
    );
    let lease = lease_condition(&status, obs.visibility_timeout, generation, now);
    set_condition(&mut status.conditions, lease);
    let orphans = orphans_condition(stats.orphaned, generation, now);
    set_condition(&mut status.conditions, orphans);
    let desired = obs.desired_partitions.max(1);
    status.partitions = partitions::record(desired, &obs.partitions);
    let checked_draining = obs.partitions.iter().any(|p| p.draining);
    if checked_draining || status.condition(types::PARTITIONS_DRAINED).is_some() {
        let drained = drained_condition(desired, &obs.partitions, generation, now);
        set_condition(&mut status.conditions, drained);
    }
    status
}

/// `PartitionsDrained`: false while partitions of an earlier layout hold jobs, true once
/// they are all empty (and forgotten).
fn drained_condition(
    desired: usize,
    parts: &[PartitionObservation],
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let left = partitions::still_draining(parts);
    let layout = match desired {
        1 => "the one partition".to_string(),
        n => format!("the {n} partitions"),
    };
    if left.is_empty() {
        condition(
            types::PARTITIONS_DRAINED,
            Status::True,
            reasons::DRAINED,
            format!(
                "the partitions of earlier layouts are empty: every job is in {layout} of \
                 spec.partitions"
            ),
            generation,
            now,
        )
    } else {
        let (partitions, hold) = match left.len() {
            1 => ("1 partition".to_string(), "holds"),
            n => (format!("{n} partitions"), "hold"),
        };
        condition(
            types::PARTITIONS_DRAINED,
            Status::False,
            reasons::DRAINING,
            format!(
                "{partitions} of an earlier layout still {hold} jobs: {}. They are reaped \
                 and counted until they are empty; new jobs go to {layout} of \
                 spec.partitions, and workers must go on claiming from these (e.g. \
                 `--drain-partitions`) until this condition is True",
                partitions::draining_summary(parts)
            ),
            generation,
            now,
        )
    }
}

/// `JobsOrphaned`: true while ids sit in the orphans set. The reaper puts an id back as
/// soon as its job hash is there again (the end of a slot migration); one that stays
/// has lost its hash for good and needs a person.
fn orphans_condition(orphaned: u64, generation: Option<i64>, now: Timestamp) -> Condition {
    if orphaned > 0 {
        condition(
            types::JOBS_ORPHANED,
            Status::True,
            reasons::ORPHANED_JOBS,
            orphaned_message(orphaned),
            generation,
            now,
        )
    } else {
        condition(
            types::JOBS_ORPHANED,
            Status::False,
            reasons::NO_ORPHANED_JOBS,
            "no job id is set aside for a missing job hash",
            generation,
            now,
        )
    }
}

/// What `orphaned` ids mean, and what to do about them (the condition's message and the
/// Warning's note).
pub fn orphaned_message(orphaned: u64) -> String {
    let (ids, are, their) = if orphaned == 1 {
        ("job id", "is", "its")
    } else {
        ("job ids", "are", "their")
    };
    format!(
        "{orphaned} {ids} {are} set aside because {their} job hash was absent (a Redis \
         Cluster slot migration, or hashes deleted by hand); the reaper puts each back once \
         its hash is there again. If they stay after any migration has ended, check \
         `jobqueue stats` and remove them with `jobqueue dead purge --orphans --yes`"
    )
}

/// `LeaseTooShort`: true while the stale-ack count grew within [`STALE_ACK_WINDOW`].
fn lease_condition(
    status: &JobQueueStatus,
    visibility_timeout: Duration,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let window = SignedDuration::try_from(STALE_ACK_WINDOW).unwrap_or(SignedDuration::MAX);
    let recent = status
        .last_stale_ack_time
        .as_ref()
        .is_some_and(|t| now.duration_since(t.0) < window);
    if recent {
        let p99 = status
            .p99
            .as_deref()
            .map(|p| format!("; p99 processing time is {p}"))
            .unwrap_or_default();
        condition(
            types::LEASE_TOO_SHORT,
            Status::True,
            reasons::STALE_ACKS,
            format!(
                "{} acks so far arrived after their lease had expired: jobs run longer than \
                 visibilityTimeout ({}){p99}. Raise visibilityTimeout or extend leases while \
                 working",
                status.stale_acks,
                crate::duration::format(visibility_timeout),
            ),
            generation,
            now,
        )
    } else {
        condition(
            types::LEASE_TOO_SHORT,
            Status::False,
            reasons::NO_STALE_ACKS,
            format!(
                "no ack arrived after its lease expired in the last {}",
                crate::duration::format(STALE_ACK_WINDOW)
            ),
            generation,
            now,
        )
    }
}

/// The scaler's part of the status: `desiredReplicas`, `currentReplicas`,
/// `lastScaleTime` (when it scaled, now) and the `Scaling` condition. `None` (no
/// `spec.workers`) removes them all.
pub fn scaled(
    status: &mut JobQueueStatus,
    decision: Option<&Decision>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let Some(decision) = decision else {
        status.desired_replicas = None;
        status.current_replicas = None;
        status.last_scale_time = None;
        status.conditions.retain(|c| c.type_ != types::SCALING);
        return;
    };
    if decision.reason == Reason::ScaleFailed {
        // What could not be read stays as last seen rather than vanishing for a moment.
        status.desired_replicas = decision.desired.or(status.desired_replicas);
        status.current_replicas = decision.replicas_after().or(status.current_replicas);
    } else {
        status.desired_replicas = decision.desired;
        status.current_replicas = decision.replicas_after();
    }
    if decision.patch().is_some() {
        status.last_scale_time = Some(Time(now));
    }
    let state = if decision.reason.is_scaling() {
        Status::True
    } else {
        Status::False
    };
    set_condition(
        &mut status.conditions,
        condition(
            types::SCALING,
            state,
            decision.reason.as_str(),
            decision.message.clone(),
            generation,
            now,
        ),
    );
}

/// The quantile of the processing-time histogram the rate limit's cap uses: an upper
/// estimate of the mean time (Little's law wants the mean), so the cap never starves the
/// limit of workers.
pub const RATE_CAP_QUANTILE: f64 = 0.9;

/// The `RateLimited` condition: `limit` is the queue's rate limit in force and `verdict`
/// the scaler's word on it ([`scaling::rate_verdict`], `None` before any processing time
/// was seen). Removed without a limit or without `spec.workers` (`scaling` false).
///
/// [`scaling::rate_verdict`]: super::scaling::rate_verdict
pub fn rate_limited(
    status: &mut JobQueueStatus,
    limit: Option<crate::queue::RateLimit>,
    scaling: bool,
    verdict: Option<&super::scaling::RateVerdict>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let Some(limit) = limit.filter(|_| scaling) else {
        status.conditions.retain(|c| c.type_ != types::RATE_LIMITED);
        return;
    };
    let (state, reason, message) = match verdict {
        None => (
            Status::Unknown,
            reasons::NO_PROCESSING_TIMES,
            format!(
                "rate limit {limit}: no processing time observed yet (no ack), so the \
                 replicas are not capped"
            ),
        ),
        Some(v) => {
            let c = v.capacity;
            let replicas = |n: i64| {
                if n == 1 {
                    "1 replica".to_string()
                } else {
                    format!("{n} replicas")
                }
            };
            let numbers = format!(
                "rate limit {limit} ({} claims/s) × processing time {} (p90) ÷ concurrency {} \
                 keeps {} busy; the backlog asks for {}",
                format_rate(limit.per_second()),
                crate::duration::format(c.processing),
                c.concurrency,
                replicas(i64::from(c.replicas)),
                v.asked
            );
            if v.capping {
                (
                    Status::True,
                    reasons::RATE_LIMIT_CAPS_REPLICAS,
                    format!("{numbers}: capped at {}", c.replicas),
                )
            } else {
                (Status::False, reasons::BELOW_RATE_LIMIT, numbers)
            }
        }
    };
    set_condition(
        &mut status.conditions,
        condition(types::RATE_LIMITED, state, reason, message, generation, now),
    );
}

/// Claims per second, as a person reads them: `10`, `0.5`, `0.0003`.
fn format_rate(per_second: f64) -> String {
    let s = format!("{per_second:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "0" {
        format!("{per_second:.2e}")
    } else {
        s.to_string()
    }
}

/// `Scaling=Unknown` while the operator cannot decide (the queue cannot be read, the
/// spec is invalid): the replicas are left as they are; `reason` is the failure's.
pub fn scaling_paused(
    status: &mut JobQueueStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    set_condition(
        &mut status.conditions,
        condition(
            types::SCALING,
            Status::Unknown,
            reason,
            message,
            generation,
            now,
        ),
    );
}

/// What the controller made of a spec: which of it is in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecVerdict {
    /// The whole spec is in force.
    Valid,
    /// `spec.workers` is invalid (the problem names the field): the queue is reaped and
    /// counted, the workers are not scaled.
    InvalidWorkers(String),
    /// The spec is invalid as a whole: the queue is reaped and counted with the settings
    /// of an earlier spec (of `generation`), the last that passed validation; the
    /// workers are not scaled.
    LastGood {
        problem: String,
        generation: Option<i64>,
    },
    /// The spec is invalid as a whole and there is no earlier good one to fall back on
    /// (the operator started since): nothing is done until the spec changes.
    Invalid(String),
}

impl SpecVerdict {
    /// `the last valid settings (generation 3)`.
    fn last_good(generation: Option<i64>) -> String {
        match generation {
            Some(g) => format!("the last valid settings (generation {g})"),
            None => "the last valid settings".to_string(),
        }
    }
}

/// The `SpecValid` condition for `verdict`, alone: what any reconcile writes.
pub fn spec_valid(
    status: &mut JobQueueStatus,
    verdict: &SpecVerdict,
    generation: Option<i64>,
    now: Timestamp,
) {
    let (state, reason, message) = match verdict {
        SpecVerdict::Valid => (
            Status::True,
            reasons::VALID_SPEC,
            "the spec passed validation and is in force".to_string(),
        ),
        SpecVerdict::InvalidWorkers(problem) => (
            Status::False,
            reasons::INVALID_WORKERS,
            format!(
                "spec.workers is invalid: {problem}. The queue is still reaped and counted; \
                 the workers are not scaled (their replicas are left as they are) until it \
                 is fixed"
            ),
        ),
        SpecVerdict::LastGood {
            problem,
            generation: good,
        } => (
            Status::False,
            reasons::LAST_GOOD_SPEC,
            format!(
                "the spec is invalid: {problem}. The queue is reaped and counted with {} \
                 until it is fixed; the workers are not scaled",
                SpecVerdict::last_good(*good)
            ),
        ),
        SpecVerdict::Invalid(problem) => (
            Status::False,
            reasons::INVALID_SPEC,
            format!(
                "the spec is invalid: {problem}. The queue is not reaped until it is fixed: \
                 the operator has no earlier valid spec of it to fall back on"
            ),
        ),
    };
    set_condition(
        &mut status.conditions,
        condition(types::SPEC_VALID, state, reason, message, generation, now),
    );
}

/// After a successful reconcile: the `SpecValid` condition, and what a spec not wholly
/// in force means for the others. With `InvalidWorkers`, `Scaling=False` says why the
/// workers are not scaled (`Ready` stays about the queue, which is reaped and counted);
/// with `LastGoodSpec`, `Ready=False` says the spec is not what is in force, and
/// `Scaling=Unknown` (with `spec.workers`) that the replicas are left as they are.
pub fn spec_checked(
    status: &mut JobQueueStatus,
    verdict: &SpecVerdict,
    workers: bool,
    generation: Option<i64>,
    now: Timestamp,
) {
    spec_valid(status, verdict, generation, now);
    match verdict {
        SpecVerdict::InvalidWorkers(problem) if workers => set_condition(
            &mut status.conditions,
            condition(
                types::SCALING,
                Status::False,
                reasons::INVALID_WORKERS,
                format!("not scaling: {problem}; the replicas are left as they are"),
                generation,
                now,
            ),
        ),
        SpecVerdict::LastGood {
            problem,
            generation: good,
        } => {
            set_condition(
                &mut status.conditions,
                condition(
                    types::READY,
                    Status::False,
                    reasons::LAST_GOOD_SPEC,
                    format!(
                        "the spec is invalid: {problem}; the queue is reaped and counted \
                         with {}",
                        SpecVerdict::last_good(*good)
                    ),
                    generation,
                    now,
                ),
            );
            if workers {
                scaling_paused(
                    status,
                    reasons::INVALID_SPEC,
                    "not scaling while the spec is invalid: the replicas are left as they are",
                    generation,
                    now,
                );
            }
        }
        _ => {}
    }
}

/// The Warning to raise when `new` says the spec is partly or no longer in force and
/// `prev` did not say so in these words: its reason and note. Once per change, not on
/// every reconcile (a spec with no fallback has its own Warning, `InvalidSpec`).
pub fn spec_warning(
    prev: Option<&JobQueueStatus>,
    new: &JobQueueStatus,
) -> Option<(&'static str, String)> {
    let now = new.condition(types::SPEC_VALID)?;
    let reason = match now.reason.as_str() {
        reasons::INVALID_WORKERS => reasons::INVALID_WORKERS,
        reasons::LAST_GOOD_SPEC => reasons::INVALID_SPEC,
        _ => return None,
    };
    let was = prev.and_then(|p| p.condition(types::SPEC_VALID));
    if was.is_some_and(|c| c.reason == now.reason && c.message == now.message) {
        return None;
    }
    Some((reason, now.message.clone()))
}

/// Why a reconcile could not observe the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The condition reason, e.g. `RedisUnreachable`.
    pub reason: &'static str,
    /// What went wrong, with no secret in it.
    pub message: String,
    /// Whether Redis itself was reached (a wrong-typed key is found on a live Redis).
    pub redis_reached: bool,
}

/// The status after a failed reconcile: the counts of the last good one are kept, the
/// conditions say what is wrong.
pub fn failed(
    prev: Option<&JobQueueStatus>,
    generation: Option<i64>,
    failure: &Failure,
    now: Timestamp,
) -> JobQueueStatus {
    let mut status = prev.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let redis = if failure.redis_reached {
        let kept = status
            .condition(types::REDIS_AVAILABLE)
            .filter(|c| c.status == Status::True.as_str())
            .cloned();
        kept.map(|mut c| {
            c.observed_generation = generation;
            c
        })
        .unwrap_or_else(|| {
            condition(
                types::REDIS_AVAILABLE,
                Status::True,
                reasons::CONNECTED,
                "connected",
                generation,
                now,
            )
        })
    } else {
        condition(
            types::REDIS_AVAILABLE,
            Status::False,
            failure.reason,
            failure.message.clone(),
            generation,
            now,
        )
    };
    set_condition(&mut status.conditions, redis);
    set_condition(
        &mut status.conditions,
        condition(
            types::READY,
            Status::False,
            failure.reason,
            failure.message.clone(),
            generation,
            now,
        ),
    );
    status
}

/// The status for a spec the controller cannot act on.
pub fn invalid_spec(
    prev: Option<&JobQueueStatus>,
    generation: Option<i64>,
    message: &str,
    now: Timestamp,
) -> JobQueueStatus {
    let mut status = prev.cloned().unwrap_or_default();
    status.observed_generation = generation;
    set_condition(
        &mut status.conditions,
        condition(
            types::READY,
            Status::False,
            reasons::INVALID_SPEC,
            format!("the spec is invalid: {message}"),
            generation,
            now,
        ),
    );
    set_condition(
        &mut status.conditions,
        condition(
            types::REDIS_AVAILABLE,
            Status::Unknown,
            reasons::INVALID_SPEC,
            "not checked while the spec is invalid",
            generation,
            now,
        ),
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn obs(pending: u64, stale: u64) -> Observation {
        Observation {
            endpoint: "redis://redis:6379".into(),
            cluster: false,
            queue: "jq:{emails}".into(),
            reaped: ReapOutcome::default(),
            stats: QueueStats {
                pending,
                stale,
                ..QueueStats::default()
            },
            visibility_timeout: Duration::from_secs(30),
            visibility: None,
            ..Observation::default()
        }
    }

    fn cond<'a>(s: &'a JobQueueStatus, type_: &str) -> &'a Condition {
        s.condition(type_).unwrap_or_else(|| panic!("no {type_}"))
    }

    #[test]
    fn a_first_observation_is_ready_with_counts() {
        let mut o = obs(7, 0);
        o.stats.processing = 2;
        o.stats.expired = 1;
        o.stats.delayed = 3;
        o.stats.due = 2;
        o.stats.dead = 4;
        o.stats.reaped = 11;
        o.stats.dead_lettered = 5;
        o.stats.histogram = Histogram {
            buckets: [(3, 100)].into_iter().collect(),
        };
        let s = observed(None, Some(3), &o, t(0));
        assert_eq!(
            (s.pending, s.processing, s.expired, s.delayed, s.dead),
            (7, 2, 1, 3, 4)
        );
        assert_eq!((s.due, s.orphaned), (2, 0));
        assert_eq!((s.reaped, s.dead_lettered, s.stale_acks), (11, 5, 0));
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.p50.as_deref(), Some("12ms"));
        assert_eq!(s.p99.as_deref(), Some("15ms"));
        assert_eq!(s.oldest_pending_since, None, "not known: no time read");
        // A job has waited 3m12s at the Redis clock of the reading: since then.
        o.stats.oldest_pending_ms = Some(192_500);
        o.stats.time_ms = 1_700_000_000_000;
        let s = observed(None, Some(3), &o, t(0));
        assert_eq!(
            s.oldest_pending_since,
            Some(Time(Timestamp::from_second(1_700_000_000 - 193).unwrap()))
        );
        let ready = cond(&s, types::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "QueueHealthy")
        );
        assert_eq!(ready.observed_generation, Some(3));
        let redis = cond(&s, types::REDIS_AVAILABLE);
        assert_eq!(redis.message, "connected to Redis at redis://redis:6379");
        assert_eq!(cond(&s, types::LEASE_TOO_SHORT).status, "False");
        let orphans = cond(&s, types::JOBS_ORPHANED);
        assert_eq!(
            (orphans.status.as_str(), orphans.reason.as_str()),
            ("False", "NoOrphanedJobs")
        );
        assert_eq!(s.last_reap_time, None, "nothing was reaped");
    }

    #[test]
    fn orphaned_ids_are_counted_and_a_condition_says_what_to_do() {
        let mut o = obs(0, 0);
        o.stats.orphaned = 4;
        let s = observed(None, Some(1), &o, t(0));
        assert_eq!(s.orphaned, 4);
        let c = cond(&s, types::JOBS_ORPHANED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "OrphanedJobs")
        );
        assert!(
            c.message.starts_with("4 job ids are set aside"),
            "{}",
            c.message
        );
        assert!(
            c.message.contains("`jobqueue dead purge --orphans --yes`"),
            "{}",
            c.message
        );
        // Put back by the reaper: false again, from that reconcile on.
        o.stats.orphaned = 0;
        let back = observed(Some(&s), Some(1), &o, t(10));
        let c = cond(&back, types::JOBS_ORPHANED);
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.clone()),
            ("False", Time(t(10)))
        );
        assert_eq!(back.orphaned, 0);
    }

    fn partition(tag: &str, draining: bool, pending: u64) -> PartitionObservation {
        PartitionObservation {
            tag: tag.into(),
            draining,
            stats: QueueStats {
                pending,
                ..QueueStats::default()
            },
        }
    }

    #[test]
    fn a_shrink_is_drained_once_the_removed_partitions_are_empty() {
        let mut o = obs(0, 0);
        o.desired_partitions = 2;
        o.partitions = vec![
            partition("e", false, 1),
            partition("e~1", false, 2),
            partition("e~2", true, 3),
            partition("e~5", true, 0),
        ];
        let s = observed(None, Some(2), &o, t(0));
        let record = s.partitions.as_ref().expect("a partitioned queue's record");
        assert_eq!(
            (record.desired, &record.draining[..]),
            (2, &["e~2".to_string()][..])
        );
        assert_eq!(record.items.len(), 3, "e~5 is empty: drained and forgotten");
        let c = cond(&s, types::PARTITIONS_DRAINED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "Draining")
        );
        assert!(
            c.message
                .starts_with("1 partition of an earlier layout still holds jobs: e~2 (3 pending)."),
            "{}",
            c.message
        );
        // The next reconcile maintains e~2 alone of the old ones; it is empty now.
        o.partitions.truncate(3);
        o.partitions[2].stats.pending = 0;
        let done = observed(Some(&s), Some(2), &o, t(30));
        let c = cond(&done, types::PARTITIONS_DRAINED);
        assert_eq!(
            (
                c.status.as_str(),
                c.reason.as_str(),
                &c.last_transition_time
            ),
            ("True", "Drained", &Time(t(30)))
        );
        let record = done.partitions.as_ref().unwrap();
        assert!(record.draining.is_empty());
        let tags: Vec<&str> = record.items.iter().map(|i| i.tag.as_str()).collect();
        assert_eq!(tags, ["e", "e~1"]);
        // Afterwards, with nothing left to drain, the condition stays as it was.
        o.partitions.truncate(2);
        let later = observed(Some(&done), Some(2), &o, t(60));
        assert_eq!(later, done);
    }

    #[test]
    fn only_a_queue_without_a_successful_reconcile_is_probed() {
        assert!(needs_partition_probe(None));
        let down = Failure {
            reason: reasons::REDIS_UNREACHABLE,
            message: "down".into(),
            redis_reached: false,
        };
        assert!(needs_partition_probe(Some(&failed(
            None,
            Some(1),
            &down,
            t(0)
        ))));
        let seen = observed(None, Some(1), &obs(0, 0), t(0));
        assert!(!needs_partition_probe(Some(&seen)));
    }

    #[test]
    fn an_unpartitioned_queue_has_no_partition_record_nor_condition() {
        let mut o = obs(4, 0);
        o.desired_partitions = 1;
        o.partitions = vec![partition("emails", false, 4)];
        let s = observed(None, Some(1), &o, t(0));
        assert_eq!(s.partitions, None);
        assert!(s.condition(types::PARTITIONS_DRAINED).is_none());
    }

    #[test]
    fn an_idle_queue_builds_the_same_status() {
        let first = observed(None, Some(1), &obs(0, 0), t(0));
        let again = observed(Some(&first), Some(1), &obs(0, 0), t(600));
        assert_eq!(first, again, "nothing changed, so nothing to write");
    }

    #[test]
    fn transition_time_is_kept_unless_the_status_changes() {
        let ok = observed(None, Some(1), &obs(0, 0), t(0));
        let still = observed(Some(&ok), Some(1), &obs(5, 0), t(100));
        assert_eq!(cond(&still, types::READY).last_transition_time, Time(t(0)));
        let down = Failure {
            reason: reasons::REDIS_UNREACHABLE,
            message: "cannot connect to Redis at redis://redis:6379".into(),
            redis_reached: false,
        };
        let failed1 = failed(Some(&still), Some(1), &down, t(200));
        let ready = cond(&failed1, types::READY);
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                &ready.last_transition_time
            ),
            ("False", "RedisUnreachable", &Time(t(200)))
        );
        assert_eq!(failed1.pending, 5, "the last counts are kept");
        // Failing again later with another reason: still False, the time is kept.
        let auth = Failure {
            reason: reasons::AUTH_FAILED,
            message: "refused".into(),
            redis_reached: false,
        };
        let failed2 = failed(Some(&failed1), Some(1), &auth, t(300));
        let ready = cond(&failed2, types::READY);
        assert_eq!(ready.reason, "AuthFailed");
        assert_eq!(ready.last_transition_time, Time(t(200)));
        let back = observed(Some(&failed2), Some(1), &obs(5, 0), t(400));
        assert_eq!(cond(&back, types::READY).last_transition_time, Time(t(400)));
        assert_eq!(
            cond(&back, types::REDIS_AVAILABLE).last_transition_time,
            Time(t(400))
        );
    }

    #[test]
    fn a_wrong_type_keeps_redis_available() {
        let ok = observed(None, Some(1), &obs(0, 0), t(0));
        let wrong = Failure {
            reason: reasons::WRONG_TYPE,
            message: "key jq:{emails}:pending holds a hash, expected a list".into(),
            redis_reached: true,
        };
        let s = failed(Some(&ok), Some(2), &wrong, t(50));
        let redis = cond(&s, types::REDIS_AVAILABLE);
        assert_eq!(redis.status, "True");
        assert_eq!(redis.last_transition_time, Time(t(0)));
        assert_eq!(redis.observed_generation, Some(2));
        let ready = cond(&s, types::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "WrongType")
        );
        assert!(ready.message.contains("jq:{emails}:pending"));
    }

    #[test]
    fn an_invalid_spec_is_not_ready_and_redis_is_unknown() {
        let s = invalid_spec(
            None,
            Some(4),
            "spec.reaper.interval: \"0s\" must be above zero",
            t(0),
        );
        let ready = cond(&s, types::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert!(ready.message.contains("spec.reaper.interval"));
        assert_eq!(cond(&s, types::REDIS_AVAILABLE).status, "Unknown");
        assert_eq!(s.observed_generation, Some(4));
    }

    #[test]
    fn a_spec_partly_in_force_says_which_part_and_warns_once() {
        let base = observed(None, Some(2), &obs(3, 0), t(0));
        let problem = "spec.workers.minReplicas: 5 exceeds maxReplicas (2)".to_string();

        let mut s = base.clone();
        spec_checked(
            &mut s,
            &SpecVerdict::InvalidWorkers(problem.clone()),
            true,
            Some(2),
            t(0),
        );
        let c = cond(&s, types::SPEC_VALID);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "InvalidWorkers")
        );
        assert!(c.message.contains(&problem), "{}", c.message);
        let scaling = cond(&s, types::SCALING);
        assert_eq!(
            (scaling.status.as_str(), scaling.reason.as_str()),
            ("False", "InvalidWorkers")
        );
        assert_eq!(
            cond(&s, types::READY).status,
            "True",
            "Ready is about the queue"
        );
        let (reason, note) = spec_warning(Some(&base), &s).expect("a Warning");
        assert_eq!(reason, "InvalidWorkers");
        assert!(note.contains(&problem), "{note}");
        assert_eq!(
            spec_warning(Some(&s), &s),
            None,
            "once, not every reconcile"
        );

        let mut s = base.clone();
        let last_good = SpecVerdict::LastGood {
            problem: "spec.visibilityTimeout: \"soon\" is not a duration".into(),
            generation: Some(1),
        };
        spec_checked(&mut s, &last_good, false, Some(2), t(0));
        let ready = cond(&s, types::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "LastGoodSpec")
        );
        assert!(
            ready.message.contains("(generation 1)"),
            "{}",
            ready.message
        );
        assert!(
            s.condition(types::SCALING).is_none(),
            "no workers, no Scaling"
        );
        assert_eq!(spec_warning(None, &s).map(|w| w.0), Some("InvalidSpec"));

        // Valid: True, and nothing else touched.
        let mut s = base.clone();
        spec_checked(&mut s, &SpecVerdict::Valid, true, Some(2), t(0));
        let c = cond(&s, types::SPEC_VALID);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "ValidSpec")
        );
        assert_eq!(spec_warning(None, &s), None);
        s.conditions.retain(|c| c.type_ != types::SPEC_VALID);
        assert_eq!(s, base);
    }

    #[test]
    fn stale_acks_raise_a_warning_for_a_while() {
        let first = observed(None, Some(1), &obs(0, 3), t(0));
        assert_eq!(
            cond(&first, types::LEASE_TOO_SHORT).status,
            "False",
            "stale acks from before the operator saw the queue are history"
        );
        let grew = observed(Some(&first), Some(1), &obs(0, 5), t(10));
        let c = cond(&grew, types::LEASE_TOO_SHORT);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "StaleAcks")
        );
        assert!(
            c.message.contains("visibilityTimeout (30s)"),
            "{}",
            c.message
        );
        assert_eq!(grew.last_stale_ack_time, Some(Time(t(10))));
        // No growth: still true inside the window, unchanged status.
        let quiet = observed(Some(&grew), Some(1), &obs(0, 5), t(10 + 60));
        assert_eq!(quiet, grew);
        // Past the window: false again.
        let later = observed(Some(&quiet), Some(1), &obs(0, 5), t(10 + 15 * 60));
        let c = cond(&later, types::LEASE_TOO_SHORT);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "NoRecentStaleAcks")
        );
        assert_eq!(c.last_transition_time, Time(t(10 + 15 * 60)));
    }

    #[test]
    fn counts_written_by_failures_are_no_baseline() {
        let down = Failure {
            reason: reasons::REDIS_UNREACHABLE,
            message: "down".into(),
            redis_reached: false,
        };
        let failed_first = failed(None, Some(1), &down, t(0));
        assert!(!has_counts(&failed_first));
        let s = observed(Some(&failed_first), Some(1), &obs(0, 9), t(10));
        assert_eq!(cond(&s, types::LEASE_TOO_SHORT).status, "False");
        assert_eq!(s.last_stale_ack_time, None);
        assert!(has_counts(&s));
    }

    #[test]
    fn reaping_sets_the_reap_time() {
        let mut o = obs(1, 0);
        o.reaped = ReapOutcome {
            requeued: 1,
            dead_lettered: 0,
            more: false,
            promoted: 0,
            restored: 0,
        };
        let s = observed(None, Some(1), &o, t(5));
        assert_eq!(s.last_reap_time, Some(Time(t(5))));
        let idle = observed(Some(&s), Some(1), &obs(1, 0), t(50));
        assert_eq!(idle.last_reap_time, Some(Time(t(5))), "kept while idle");
    }

    #[test]
    fn scaling_sets_replicas_and_its_condition() {
        let base = observed(None, Some(1), &obs(30, 0), t(0));
        let up = Decision {
            reason: Reason::ScaledUp,
            current: Some(0),
            desired: Some(3),
            message: "scaled Deployment/w from 0 to 3 replicas".into(),
        };
        let mut s = base.clone();
        scaled(&mut s, Some(&up), Some(1), t(10));
        assert_eq!(
            (s.desired_replicas, s.current_replicas),
            (Some(3), Some(3)),
            "the target has what was patched"
        );
        assert_eq!(s.last_scale_time, Some(Time(t(10))));
        let c = cond(&s, types::SCALING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "True",
                "ScaledUp",
                "scaled Deployment/w from 0 to 3 replicas"
            )
        );

        // Holding: the scale time and the transition time are kept.
        let steady = Decision {
            reason: Reason::Steady,
            current: Some(3),
            desired: Some(3),
            message: "3 replicas of Deployment/w".into(),
        };
        let mut held = s.clone();
        scaled(&mut held, Some(&steady), Some(1), t(20));
        assert_eq!(held.last_scale_time, Some(Time(t(10))));
        assert_eq!(
            cond(&held, types::SCALING).last_transition_time,
            Time(t(10))
        );
        assert_eq!(cond(&held, types::SCALING).reason, "Steady");

        // An HPA takes over: False, no desired replicas.
        let conflict = Decision {
            reason: Reason::HpaConflict,
            current: Some(3),
            desired: None,
            message: "HorizontalPodAutoscaler default/h scales Deployment/w".into(),
        };
        let mut claimed = held.clone();
        scaled(&mut claimed, Some(&conflict), Some(1), t(30));
        assert_eq!(
            (claimed.desired_replicas, claimed.current_replicas),
            (None, Some(3))
        );
        let c = cond(&claimed, types::SCALING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "HPAConflict")
        );
        assert_eq!(c.last_transition_time, Time(t(30)));

        // The scale cannot be read for a moment: False, the last numbers kept.
        let unreadable = Decision {
            reason: Reason::ScaleFailed,
            current: None,
            desired: None,
            message: "cannot read the scale of Deployment/w: forbidden".into(),
        };
        let mut failing = held.clone();
        scaled(&mut failing, Some(&unreadable), Some(1), t(35));
        assert_eq!(
            (failing.desired_replicas, failing.current_replicas),
            (Some(3), Some(3))
        );
        assert_eq!(cond(&failing, types::SCALING).status, "False");

        // Redis down: Unknown, the numbers kept.
        let mut paused = held.clone();
        scaling_paused(
            &mut paused,
            reasons::REDIS_UNREACHABLE,
            "not scaling",
            Some(1),
            t(40),
        );
        let c = cond(&paused, types::SCALING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "RedisUnreachable")
        );
        assert_eq!(paused.current_replicas, Some(3));

        // spec.workers removed: the scaler's fields go.
        let mut gone = held.clone();
        scaled(&mut gone, None, Some(2), t(50));
        assert_eq!(
            (
                gone.desired_replicas,
                gone.current_replicas,
                &gone.last_scale_time
            ),
            (None, None, &None)
        );
        assert!(gone.condition(types::SCALING).is_none());
        assert_eq!(gone.conditions.len(), base.conditions.len());
    }

    #[test]
    fn quantiles_come_from_the_histogram() {
        assert_eq!(quantiles(&Histogram::default()), (None, None));
        // 99 acks in [4, 8) ms, one in [1024, 2048) ms.
        let h = Histogram {
            buckets: [(2, 99), (10, 1)].into_iter().collect(),
        };
        let (p50, p99) = quantiles(&h);
        assert_eq!(p50.as_deref(), Some("6ms"));
        assert_eq!(p99.as_deref(), Some("8ms"));
        let h = Histogram {
            buckets: [(2, 90), (10, 10)].into_iter().collect(),
        };
        assert_eq!(quantiles(&h).1.as_deref(), Some("1.94s"));
    }

    /// The status steps of a reconcile that read the queue, without a scaler.
    fn reconciled(
        prev: Option<&JobQueueStatus>,
        verdict: &SpecVerdict,
        now: Timestamp,
    ) -> JobQueueStatus {
        let mut s = observed(prev, Some(2), &obs(3, 0), now);
        scaled(&mut s, None, Some(2), now);
        spec_checked(&mut s, verdict, true, Some(2), now);
        keep_transition_times(prev, &mut s);
        s
    }

    #[test]
    fn a_condition_set_twice_in_a_reconcile_keeps_its_transition_time() {
        let last_good = SpecVerdict::LastGood {
            problem: "spec.visibilityTimeout: \"soon\" is not a duration".into(),
            generation: Some(1),
        };
        let invalid_workers = SpecVerdict::InvalidWorkers("spec.workers: crossed".into());
        for verdict in [last_good, invalid_workers] {
            let first = reconciled(None, &verdict, t(0));
            let again = reconciled(Some(&first), &verdict, t(30));
            assert_eq!(
                again, first,
                "{verdict:?}: nothing changed, nothing to write"
            );
            for c in &again.conditions {
                assert_eq!(
                    c.last_transition_time,
                    Time(t(0)),
                    "{verdict:?}: {}",
                    c.type_
                );
            }
            // A real transition still moves it.
            let fixed = reconciled(Some(&again), &SpecVerdict::Valid, t(60));
            assert_eq!(
                cond(&fixed, types::SPEC_VALID).last_transition_time,
                Time(t(60))
            );
            assert_eq!(
                cond(&fixed, types::REDIS_AVAILABLE).last_transition_time,
                Time(t(0))
            );
        }
    }

    #[test]
    fn truncation_drops_sub_seconds() {
        let t = Timestamp::from_millisecond(1_700_000_000_123).unwrap();
        assert_eq!(truncate(t).as_millisecond(), 1_700_000_000_000);
    }
}
