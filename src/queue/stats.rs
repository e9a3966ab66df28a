//! The queue's counts and counters, as the `stats` script returns them.

use std::collections::BTreeMap;
use std::time::Duration;

/// Processing times of acked jobs: bucket `b` counts acks that took
/// `[2^b, 2^(b+1))` milliseconds (bucket 0 also holds 0 ms and 1 ms).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Histogram {
    pub buckets: BTreeMap<u32, u64>,
}

impl Histogram {
    pub fn total(&self) -> u64 {
        self.buckets.values().sum()
    }

    /// The q-quantile (0 ≤ q ≤ 1), interpolated linearly inside its bucket; `None` when
    /// there were no acks.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = (q * total as f64).max(1.0);
        let mut seen = 0u64;
        for (&bucket, &count) in &self.buckets {
            if count == 0 {
                continue;
            }
            if (seen + count) as f64 >= rank {
                let low = if bucket == 0 {
                    0.0
                } else {
                    2f64.powi(bucket as i32)
                };
                let high = 2f64.powi(bucket as i32 + 1);
                let within = (rank - seen as f64) / count as f64;
                let ms = low + (high - low) * within;
                return Some(Duration::from_micros((ms * 1000.0) as u64));
            }
            seen += count;
        }
        None
    }
}

/// One `stats` call: the live counts, then the counters since the queue began.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueStats {
    /// Jobs ready to be claimed, of every priority.
    pub pending: u64,
    /// Of `pending`, the jobs of each priority (index 0 to 9).
    pub pending_by_priority: [u64; 10],
    pub processing: u64,
    /// Leases past due, not yet reaped.
    pub expired: u64,
    /// Every delayed job, due or not.
    pub delayed: u64,
    /// Delayed jobs whose time has come, not yet promoted: work to do now, even with no
    /// worker running (the reaper promotes them).
    pub due: u64,
    pub dead: u64,
    /// Ids set aside because they had no job hash (a Cluster slot migration, or a job
    /// key of another type); the reaper puts each back once its hash is there again. Ids
    /// `purge` of orphans forgot are not counted.
    pub orphaned: u64,
    /// How long the oldest job ready to run has waited (the queue's latency), in ms of
    /// the Redis clock: the next pending job since it arrived (enqueued, redriven, due,
    /// or put back after a lease), or a due delayed job since its run-at. 0 when nothing
    /// waits; `None` when the next job holds no time (enqueued by an earlier release).
    pub oldest_pending_ms: Option<u64>,
    /// The Redis clock (ms since the epoch) when these were read; 0 when not known.
    pub time_ms: i64,
    pub enqueued: u64,
    pub claimed: u64,
    pub acked: u64,
    pub failed: u64,
    pub retried: u64,
    /// Leases handed back unfinished by a worker shutting down (no attempt charged).
    pub released: u64,
    pub reaped: u64,
    pub dead_lettered: u64,
    pub dead_trimmed: u64,
    pub stale: u64,
    /// Acks and extends refused because no job hash exists for the id (a wrong id, or a
    /// job finished and deleted): apart from `stale`, which means a lease taken away.
    pub unknown: u64,
    pub redriven: u64,
    pub purged: u64,
    /// Ids found in a list whose job hash was absent or disagreed (set aside or dropped).
    pub orphans: u64,
    /// Of `orphans`, the ids set aside instead of dropped (their hash was absent).
    pub set_aside: u64,
    /// Set-aside ids put back, their hash being there again.
    pub restored: u64,
    /// Of `restored`, ids `purge` of orphans had forgotten: their hash came back within
    /// the 7 days a purged id is remembered.
    pub restored_purged: u64,
    /// Of `set_aside`, the ids whose job key held another type than a hash.
    pub wrong_type: u64,
    /// Set-aside ids forgotten on purpose (`purge` of orphans).
    pub orphans_purged: u64,
    /// Due delayed jobs the reaper moved to pending.
    pub promoted: u64,
    /// Claim calls answered from their request's record (a retry after a lost reply).
    pub replayed: u64,
    /// Claim calls that leased nothing because the queue's rate limit had no slot left.
    pub rate_limited: u64,
    /// Jobs claim set aside to delayed because their rate key had no slot left.
    pub rate_deferred: u64,
    /// Delayed jobs an operator ran before their time (`run now`).
    pub run_now: u64,
    /// Jobs an operator deleted one by one (pending, delayed or dead).
    pub deleted: u64,
    /// Jobs cancelled (`jobqueue cancel`): pending or delayed ones at once, leased ones
    /// when their worker (or a reaper) ended them.
    pub cancelled: u64,
    /// The queue is paused (`meta` holds `paused`): claims lease nothing.
    pub paused: bool,
    /// When it was paused (ms), when known.
    pub paused_at: Option<i64>,
    pub histogram: Histogram,
    /// Of `reaped`, `stale` and the histogram's acks, the ones of jobs with their own
    /// timeout or visibility (docs/protocol.md, Per-job options): the visibility timeout
    /// `auto` leaves them out of what it learns from.
    pub own: OwnRuns,
}

/// The counters of jobs with their own timeout or visibility (`own_reaped`, `own_stale`,
/// `own_h:<b>`), counted besides the queue's.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OwnRuns {
    pub reaped: u64,
    pub stale: u64,
    pub histogram: Histogram,
}

impl QueueStats {
    /// Fill from the flat `name, value, ...` reply; unknown names are ignored so newer
    /// scripts can add counters.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, i64)>) -> QueueStats {
        let mut s = QueueStats::default();
        for (name, value) in pairs {
            let v = value.max(0) as u64;
            match name {
                "pending" => s.pending = v,
                other if other.starts_with("pending:") => {
                    if let Some(p) = other["pending:".len()..]
                        .parse::<usize>()
                        .ok()
                        .filter(|p| (1..10).contains(p))
                    {
                        s.pending_by_priority[p] = v;
                    }
                }
                "processing" => s.processing = v,
                "expired" => s.expired = v,
                "delayed" => s.delayed = v,
                "due" => s.due = v,
                "dead" => s.dead = v,
                "orphaned" => s.orphaned = v,
                "oldest_pending_ms" => s.oldest_pending_ms = (value >= 0).then_some(v),
                "time" => s.time_ms = value,
                "enqueued" => s.enqueued = v,
                "claimed" => s.claimed = v,
                "acked" => s.acked = v,
                "failed" => s.failed = v,
                "retried" => s.retried = v,
                "released" => s.released = v,
                "reaped" => s.reaped = v,
                "dead_lettered" => s.dead_lettered = v,
                "dead_trimmed" => s.dead_trimmed = v,
                "stale" => s.stale = v,
                "unknown" => s.unknown = v,
                "redriven" => s.redriven = v,
                "purged" => s.purged = v,
                "orphans" => s.orphans = v,
                "set_aside" => s.set_aside = v,
                "restored" => s.restored = v,
                "restored_purged" => s.restored_purged = v,
                "wrong_type" => s.wrong_type = v,
                "orphans_purged" => s.orphans_purged = v,
                "promoted" => s.promoted = v,
                "replayed" => s.replayed = v,
                "rate_limited" => s.rate_limited = v,
                "rate_deferred" => s.rate_deferred = v,
                "run_now" => s.run_now = v,
                "deleted" => s.deleted = v,
                "cancelled" => s.cancelled = v,
                "own_reaped" => s.own.reaped = v,
                "own_stale" => s.own.stale = v,
                other => {
                    if let Some(b) = other.strip_prefix("h:").and_then(|b| b.parse::<u32>().ok()) {
                        *s.histogram.buckets.entry(b).or_default() += v;
                    } else if let Some(b) = other
                        .strip_prefix("own_h:")
                        .and_then(|b| b.parse::<u32>().ok())
                    {
                        *s.own.histogram.buckets.entry(b).or_default() += v;
                    }
                }
            }
        }
        // priority 0's are the rest: stats names the lists of priorities 1..9
        let above: u64 = s.pending_by_priority[1..].iter().sum();
        s.pending_by_priority[0] = s.pending.saturating_sub(above);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(pairs: &[(u32, u64)]) -> Histogram {
        Histogram {
            buckets: pairs.iter().copied().collect(),
        }
    }

    #[test]
    fn empty_histogram_has_no_quantile() {
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn quantiles_fall_in_the_right_bucket() {
        // 90 acks in [8,16) ms, 10 in [1024, 2048) ms.
        let h = hist(&[(3, 90), (10, 10)]);
        let p50 = h.quantile(0.5).unwrap().as_secs_f64() * 1000.0;
        assert!((8.0..16.0).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99).unwrap().as_secs_f64() * 1000.0;
        assert!((1024.0..=2048.0).contains(&p99), "{p99}");
        let p0 = h.quantile(0.0).unwrap().as_secs_f64() * 1000.0;
        assert!((8.0..16.0).contains(&p0), "{p0}");
        assert_eq!(h.quantile(1.0).unwrap(), Duration::from_millis(2048));
    }

    #[test]
    fn bucket_zero_starts_at_zero() {
        let h = hist(&[(0, 4)]);
        assert_eq!(h.quantile(0.5).unwrap(), Duration::from_millis(1));
    }

    #[test]
    fn pairs_fill_counts_counters_and_buckets() {
        let s = QueueStats::from_pairs([
            ("pending", 3),
            ("processing", 2),
            ("expired", 1),
            ("acked", 7),
            ("h:4", 5),
            ("h:0", 2),
            ("something_new", 9),
            ("oldest_pending_ms", 1500),
            ("time", 1_700_000_000_000),
        ]);
        assert_eq!(
            (s.oldest_pending_ms, s.time_ms),
            (Some(1500), 1_700_000_000_000)
        );
        // -1: the next pending job holds no time to tell its age by.
        let unknown = QueueStats::from_pairs([("pending", 1), ("oldest_pending_ms", -1)]);
        assert_eq!(unknown.oldest_pending_ms, None);
        assert_eq!((s.pending, s.processing, s.expired, s.acked), (3, 2, 1, 7));
        assert_eq!(s.histogram.total(), 7);
        assert_eq!(s.histogram.buckets[&4], 5);
    }
}
