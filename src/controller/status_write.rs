//! When a reconcile writes the status: at once when something a person would act on
//! changed (a condition's status or reason, the replicas, the observed generation, the
//! last scale), and for a change of the counts alone (pending, processing, ..., the
//! orphans, the percentiles, the last reap, and the condition messages, which quote
//! the counts: "backlog 25 (25 pending, 0 processing) needs 3 replicas") at most once
//! per `--status-interval` per queue. A
//! busy queue's counts change on every reconcile; writing each would be one PATCH per
//! queue per `reaper.interval`, and one watch event per PATCH to every watcher of
//! JobQueues. The metrics carry the live counts.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{JobQueueStatus, PartitionCounts, PartitionsStatus};

/// What to do with a new status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusWrite {
    /// Nothing changed.
    Unchanged,
    /// Something a person would act on changed: write now.
    Significant,
    /// Only the counts changed, and the last write is old enough (or unknown): write.
    Counts,
    /// Only the counts changed, and the last write is recent: wait.
    Deferred,
}

impl StatusWrite {
    pub fn writes(self) -> bool {
        matches!(self, StatusWrite::Significant | StatusWrite::Counts)
    }
}

/// Decide whether `new` is written over `prev`, the last write of this controller having
/// been at `last_write`, at most one counts-only write per `every` (zero: every change).
pub fn decide(
    prev: Option<&JobQueueStatus>,
    new: &JobQueueStatus,
    last_write: Option<Timestamp>,
    now: Timestamp,
    every: Duration,
) -> StatusWrite {
    let Some(prev) = prev else {
        return StatusWrite::Significant;
    };
    if prev == new {
        return StatusWrite::Unchanged;
    }
    if without_counts(prev) != without_counts(new) {
        return StatusWrite::Significant;
    }
    let due = match last_write {
        None => true,
        Some(last) => {
            let elapsed = now.duration_since(last);
            elapsed.is_negative() || elapsed.unsigned_abs() >= every
        }
    };
    if every.is_zero() || due {
        StatusWrite::Counts
    } else {
        StatusWrite::Deferred
    }
}

/// The status with its counts blanked: what is left is what a person acts on.
fn without_counts(s: &JobQueueStatus) -> JobQueueStatus {
    JobQueueStatus {
        pending: 0,
        processing: 0,
        expired: 0,
        delayed: 0,
        due: 0,
        dead: 0,
        reaped: 0,
        dead_lettered: 0,
        stale_acks: 0,
        orphaned: 0,
        p50: None,
        p99: None,
        oldest_pending_since: None,
        last_reap_time: None,
        last_stale_ack_time: None,
        // Which partitions there are, and which drain, is news; their counts are counts.
        partitions: s.partitions.as_ref().map(|p| PartitionsStatus {
            items: p
                .items
                .iter()
                .map(|i| PartitionCounts {
                    tag: i.tag.clone(),
                    slot: i.slot,
                    draining: i.draining,
                    ..PartitionCounts::default()
                })
                .collect(),
            ..p.clone()
        }),
        conditions: s
            .conditions
            .iter()
            .map(|c| Condition {
                message: String::new(),
                ..c.clone()
            })
            .collect(),
        ..s.clone()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn ready(reason: &str) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: if reason == "Ready" { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: Time(at(0)),
        }
    }

    fn base() -> JobQueueStatus {
        JobQueueStatus {
            observed_generation: Some(1),
            pending: 5,
            current_replicas: Some(2),
            desired_replicas: Some(2),
            conditions: vec![ready("Ready")],
            partitions: Some(PartitionsStatus {
                desired: 2,
                draining: vec!["e~3".into()],
                items: ["e", "e~1", "e~3"]
                    .iter()
                    .map(|t| PartitionCounts {
                        tag: t.to_string(),
                        draining: *t == "e~3",
                        pending: 1,
                        ..PartitionCounts::default()
                    })
                    .collect(),
            }),
            ..JobQueueStatus::default()
        }
    }

    #[test]
    fn what_is_written_when() {
        let s30 = Duration::from_secs(30);
        type Edit = fn(&mut JobQueueStatus);
        // What, the change, the last write, now, the interval, the decision.
        type Case = (&'static str, Edit, Option<i64>, i64, Duration, StatusWrite);
        let cases: Vec<Case> = vec![
            (
                "nothing changed",
                |_| {},
                Some(0),
                1,
                s30,
                StatusWrite::Unchanged,
            ),
            (
                "counts, 1 s after a write",
                |s| s.pending = 6,
                Some(0),
                1,
                s30,
                StatusWrite::Deferred,
            ),
            (
                "counts, 29 s after",
                |s| s.processing = 3,
                Some(0),
                29,
                s30,
                StatusWrite::Deferred,
            ),
            (
                "counts, 30 s after",
                |s| s.pending = 6,
                Some(0),
                30,
                s30,
                StatusWrite::Counts,
            ),
            (
                "counts, no write known",
                |s| s.pending = 6,
                None,
                1,
                s30,
                StatusWrite::Counts,
            ),
            (
                "counts, interval zero",
                |s| s.pending = 6,
                Some(0),
                0,
                Duration::ZERO,
                StatusWrite::Counts,
            ),
            (
                "percentiles are counts",
                |s| s.p99 = Some("2s".into()),
                Some(0),
                1,
                s30,
                StatusWrite::Deferred,
            ),
            (
                "last reap is counts",
                |s| s.last_reap_time = Some(Time(at(1))),
                Some(0),
                1,
                s30,
                StatusWrite::Deferred,
            ),
            (
                "a condition's reason",
                |s| s.conditions = vec![ready("RedisUnreachable")],
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "a condition's message alone (it quotes counts)",
                |s| s.conditions[0].message = "x".into(),
                Some(0),
                1,
                s30,
                StatusWrite::Deferred,
            ),
            (
                "a condition's status",
                |s| s.conditions[0].status = "Unknown".into(),
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "a new condition",
                |s| s.conditions.push(ready("Degraded")),
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "the current replicas",
                |s| s.current_replicas = Some(3),
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "the desired replicas",
                |s| s.desired_replicas = Some(4),
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "the generation",
                |s| s.observed_generation = Some(2),
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "the orphans' count",
                |s| s.orphaned = 1,
                Some(0),
                1,
                s30,
                StatusWrite::Deferred,
            ),
            (
                "counts and a condition",
                |s| {
                    s.pending = 9;
                    s.conditions[0].reason = "X".into()
                },
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "a partition's counts",
                |s| s.partitions.as_mut().unwrap().items[0].pending = 7,
                Some(0),
                1,
                s30,
                StatusWrite::Deferred,
            ),
            (
                "a partition drained (and forgotten)",
                |s| {
                    let p = s.partitions.as_mut().unwrap();
                    p.draining.clear();
                    p.items.pop();
                },
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "the partition count",
                |s| s.partitions.as_mut().unwrap().desired = 4,
                Some(0),
                1,
                s30,
                StatusWrite::Significant,
            ),
            (
                "the clock went back",
                |s| s.pending = 6,
                Some(10),
                5,
                s30,
                StatusWrite::Counts,
            ),
        ];
        for (what, edit, last, now, every, want) in cases {
            let prev = base();
            let mut new = base();
            edit(&mut new);
            let got = decide(Some(&prev), &new, last.map(at), at(now), every);
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_first_status_is_written() {
        let got = decide(None, &base(), Some(at(0)), at(1), Duration::from_secs(30));
        assert_eq!(got, StatusWrite::Significant);
        assert!(got.writes());
        assert!(!StatusWrite::Deferred.writes());
    }
}
