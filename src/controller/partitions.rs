//! Partitioned queues in the operator (`spec.partitions`): which partitions one
//! reconcile maintains, and the bookkeeping of a shrink. Pure functions; the reconcile
//! does the Redis work (one `Queue::maintain` per partition).
//!
//! A queue of N partitions is N ordinary queues, with the tags of
//! `queue::partition_tags(hashTag, N)`. When N shrinks, the partitions left out of the
//! new layout still hold jobs: they are *draining*. The operator goes on maintaining
//! them (reaping expired leases, promoting due delayed jobs, counting) until they hold
//! no job at all, so nothing is lost, and it remembers them in the status
//! (`status.partitions.draining`): the status is its memory across restarts. A status
//! that is gone (a JobQueue deleted and created again) is made up for by a probe, once,
//! of every tag any layout up to [`PROBE_MAX`] partitions has ([`probe_tags`]), when
//! no successful reconcile has recorded the queue's partitions yet.
//!
//! Growing N adds partitions. When the old N divides the new one, the old partitions
//! are all in the new layout and nothing drains; otherwise the old ones left out drain
//! as after a shrink.

use std::collections::HashSet;

use crate::crd::{JobQueueStatus, MAX_SPEC_PARTITIONS, PartitionCounts, PartitionsStatus};
use crate::queue::partitions::tag_slot;
use crate::queue::{PartitionRecord, QueueStats, Result, partition_tags};

/// The largest layout whose partitions a probe looks for: the most `spec.partitions`
/// allows.
pub const PROBE_MAX: usize = MAX_SPEC_PARTITIONS as usize;

/// The partitions one reconcile maintains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The layout in force: `spec.partitions` tags, partition 0 first.
    pub tags: Vec<String>,
    /// Partitions of earlier layouts that may still hold jobs (from the status's
    /// memory), in the order remembered; none of them is in `tags`.
    pub draining: Vec<String>,
}

impl Layout {
    /// Every partition to maintain: the layout's, then the draining ones.
    pub fn all(&self) -> impl Iterator<Item = (&str, bool)> {
        let current = self.tags.iter().map(|t| (t.as_str(), false));
        current.chain(self.draining.iter().map(|t| (t.as_str(), true)))
    }

    /// How many partitions a reconcile maintains (each one round trip when steady).
    pub fn len(&self) -> usize {
        self.tags.len() + self.draining.len()
    }

    /// Never: a layout has at least one partition.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The partitions to maintain for `desired` partitions of queue `tag`, given what the
/// previous status remembers: its draining partitions, and, when the count changed
/// since, the partitions of the layout it recorded that are not in the new one.
pub fn layout(tag: &str, desired: usize, prev: Option<&JobQueueStatus>) -> Result<Layout> {
    let tags = partition_tags(tag, desired)?;
    let mut earlier: Vec<String> = Vec::new();
    if let Some(record) = prev.and_then(|s| s.partitions.as_ref()) {
        earlier.extend(record.draining.iter().cloned());
        let was = record.desired as usize;
        if was != desired && was >= 1 {
            earlier.extend(partition_tags(tag, was)?);
        }
    }
    Ok(Layout {
        draining: others(&tags, earlier),
        tags,
    })
}

/// `earlier` without duplicates and without the tags of `current`, in order.
fn others(current: &[String], earlier: Vec<String>) -> Vec<String> {
    let mut seen: HashSet<String> = current.iter().cloned().collect();
    earlier
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// Every tag of the layouts of 1 to [`PROBE_MAX`] partitions that is not in `current`:
/// where a queue deleted and created again may have left jobs (about 400 tags; the
/// layouts share most of theirs).
pub fn probe_tags(tag: &str, current: &[String]) -> Result<Vec<String>> {
    let mut all = Vec::new();
    for n in 1..=PROBE_MAX {
        all.extend(partition_tags(tag, n)?);
    }
    Ok(others(current, all))
}

/// One partition as one reconcile saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionObservation {
    pub tag: String,
    /// A partition of an earlier layout.
    pub draining: bool,
    /// Its counts after this reconcile's upkeep.
    pub stats: QueueStats,
}

/// Whether a partition holds any job: pending, processing, delayed, dead or set aside.
/// Only an empty one has finished draining (its dead jobs are jobs too: they wait for a
/// redrive or their retention).
pub fn holds_jobs(s: &QueueStats) -> bool {
    s.pending + s.processing + s.delayed + s.dead + s.orphaned > 0
}

/// The sum of the partitions' counts, counters and histograms: the queue's.
pub fn total(parts: &[PartitionObservation]) -> QueueStats {
    let mut t = QueueStats::default();
    for p in parts {
        add(&mut t, &p.stats);
    }
    t
}

fn add(t: &mut QueueStats, s: &QueueStats) {
    let QueueStats {
        pending,
        pending_by_priority,
        processing,
        expired,
        delayed,
        due,
        dead,
        orphaned,
        oldest_pending_ms,
        time_ms,
        enqueued,
        claimed,
        acked,
        failed,
        retried,
        released,
        reaped,
        dead_lettered,
        dead_trimmed,
        stale,
        unknown,
        redriven,
        purged,
        orphans,
        set_aside,
        restored,
        restored_purged,
        wrong_type,
        orphans_purged,
        promoted,
        replayed,
        rate_limited,
        rate_deferred,
        run_now,
        deleted,
        cancelled,
        paused,
        paused_at,
        histogram,
        own,
    } = s;
    t.pending += pending;
    for (t, p) in t.pending_by_priority.iter_mut().zip(pending_by_priority) {
        *t += p;
    }
    t.processing += processing;
    t.expired += expired;
    t.delayed += delayed;
    t.due += due;
    t.dead += dead;
    t.orphaned += orphaned;
    // The queue's latency is its oldest partition's; the clock, the latest reading.
    t.oldest_pending_ms = match (t.oldest_pending_ms, *oldest_pending_ms) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    t.time_ms = t.time_ms.max(*time_ms);
    t.enqueued += enqueued;
    t.claimed += claimed;
    t.acked += acked;
    t.failed += failed;
    t.retried += retried;
    t.released += released;
    t.reaped += reaped;
    t.dead_lettered += dead_lettered;
    t.dead_trimmed += dead_trimmed;
    t.stale += stale;
    t.unknown += unknown;
    t.redriven += redriven;
    t.purged += purged;
    t.orphans += orphans;
    t.set_aside += set_aside;
    t.restored += restored;
    t.restored_purged += restored_purged;
    t.wrong_type += wrong_type;
    t.orphans_purged += orphans_purged;
    t.promoted += promoted;
    t.replayed += replayed;
    t.rate_limited += rate_limited;
    t.rate_deferred += rate_deferred;
    t.run_now += run_now;
    t.deleted += deleted;
    t.cancelled += cancelled;
    // a queue with one partition paused is reported paused (since its earliest pause)
    t.paused |= paused;
    t.paused_at = match (t.paused_at, *paused_at) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    for (bucket, n) in &histogram.buckets {
        *t.histogram.buckets.entry(*bucket).or_default() += n;
    }
    t.own.reaped += own.reaped;
    t.own.stale += own.stale;
    for (bucket, n) in &own.histogram.buckets {
        *t.own.histogram.buckets.entry(*bucket).or_default() += n;
    }
}

/// The draining partitions that still hold jobs after this reconcile, in order.
pub fn still_draining(parts: &[PartitionObservation]) -> Vec<String> {
    parts
        .iter()
        .filter(|p| p.draining && holds_jobs(&p.stats))
        .map(|p| p.tag.clone())
        .collect()
}

/// `status.partitions` after a reconcile that maintained `parts` with `desired`
/// partitions in force: `None` for a queue of one partition with nothing draining (the
/// status of an unpartitioned queue is as it always was). Partitions that finished
/// draining are left out, and forgotten.
pub fn record(desired: usize, parts: &[PartitionObservation]) -> Option<PartitionsStatus> {
    let draining = still_draining(parts);
    if desired <= 1 && draining.is_empty() {
        return None;
    }
    let items = parts
        .iter()
        .filter(|p| !p.draining || holds_jobs(&p.stats))
        .map(|p| PartitionCounts {
            tag: p.tag.clone(),
            slot: u32::from(tag_slot(p.tag.as_bytes())),
            draining: p.draining,
            pending: p.stats.pending,
            processing: p.stats.processing,
            delayed: p.stats.delayed,
            due: p.stats.due,
            dead: p.stats.dead,
            orphaned: p.stats.orphaned,
        })
        .collect();
    Some(PartitionsStatus {
        desired: u32::try_from(desired).unwrap_or(u32::MAX),
        draining,
        items,
    })
}

/// The partition record the queue's own `meta` should hold after a reconcile that found
/// `draining` partitions still holding jobs with `desired` in force (see
/// `queue::PartitionRecord`): `Some` when it differs from `recorded` (the two fields as
/// read, `partitions` and `drain_partitions`), `None` when nothing is to be written.
///
/// - `desired` is recorded whenever the queue is or was partitioned; an unpartitioned
///   queue that records nothing is left so (no record reads as one partition).
/// - While partitions drain, `drain_partitions` is a layout that holds every one of them,
///   so a client that reads the record claims from them too: the one recorded already
///   when it still does, else the previous `spec.partitions` (`was`), else the smallest
///   count that does. Partitions of two resizes in a row whose layouts do not nest may be
///   in no one layout: then the previous count, and the status names the rest.
/// - Once nothing drains, `drain_partitions` goes.
pub fn record_to_write(
    tag: &str,
    desired: usize,
    was: Option<usize>,
    draining: &[String],
    recorded: &[Option<String>; 2],
) -> Result<Option<PartitionRecord>> {
    let have = [recorded[0].as_deref(), recorded[1].as_deref()];
    let drain = if draining.is_empty() {
        None
    } else {
        let current = partition_tags(tag, desired)?;
        let covers = |m: usize| -> Result<bool> {
            let tags = partition_tags(tag, m)?;
            Ok(draining
                .iter()
                .all(|t| tags.contains(t) || current.contains(t)))
        };
        let recorded_drain = have[1].and_then(|d| d.trim().parse::<usize>().ok());
        let mut chosen = None;
        for m in recorded_drain.into_iter().chain(was).chain(1..=PROBE_MAX) {
            if m != desired && (1..=crate::queue::MAX_PARTITIONS).contains(&m) && covers(m)? {
                chosen = Some(m);
                break;
            }
        }
        chosen.or(was.filter(|w| *w != desired))
    };
    if desired <= 1 && drain.is_none() && have[0].is_none() {
        return Ok(None);
    }
    let want = PartitionRecord {
        partitions: desired,
        drain,
    };
    let (p, d) = want.to_fields();
    if have == [Some(p.as_str()), d.as_deref()] {
        return Ok(None);
    }
    Ok(Some(want))
}

/// What the draining partitions still hold, for the condition's message:
/// `emails~3 (4 pending, 1 dead), emails~5 (2 processing)`.
pub fn draining_summary(parts: &[PartitionObservation]) -> String {
    parts
        .iter()
        .filter(|p| p.draining && holds_jobs(&p.stats))
        .map(|p| {
            let s = &p.stats;
            let counts: Vec<String> = [
                (s.pending, "pending"),
                (s.processing, "processing"),
                (s.delayed, "delayed"),
                (s.dead, "dead"),
                (s.orphaned, "set aside"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
            format!("{} ({})", p.tag, counts.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_of(desired: u32, draining: &[&str]) -> JobQueueStatus {
        JobQueueStatus {
            partitions: Some(PartitionsStatus {
                desired,
                draining: draining.iter().map(|t| t.to_string()).collect(),
                items: Vec::new(),
            }),
            ..JobQueueStatus::default()
        }
    }

    fn part(tag: &str, draining: bool, pending: u64, dead: u64) -> PartitionObservation {
        PartitionObservation {
            tag: tag.into(),
            draining,
            stats: QueueStats {
                pending,
                dead,
                ..QueueStats::default()
            },
        }
    }

    #[test]
    fn an_unpartitioned_queue_maintains_itself_alone() {
        let l = layout("emails", 1, None).unwrap();
        assert_eq!(l.tags, ["emails"]);
        assert!(l.draining.is_empty());
        let l = layout("emails", 1, Some(&JobQueueStatus::default())).unwrap();
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn a_shrink_drains_the_partitions_left_out() {
        let four = partition_tags("emails", 4).unwrap();
        let two = partition_tags("emails", 2).unwrap();
        let l = layout("emails", 2, Some(&record_of(4, &[]))).unwrap();
        assert_eq!(l.tags, two);
        let mut want: Vec<String> = four.iter().filter(|t| !two.contains(t)).cloned().collect();
        assert_eq!(want.len(), 2, "2 divides 4: two of the four stay");
        assert_eq!(l.draining, want);
        // Once recorded, the draining set is the memory: the count no longer differs.
        let l = layout("emails", 2, Some(&record_of(2, &[&want[1]]))).unwrap();
        assert_eq!(l.draining, vec![want.remove(1)]);
    }

    #[test]
    fn a_second_shrink_while_draining_keeps_the_first_ones() {
        let eight = partition_tags("emails", 8).unwrap();
        let four = partition_tags("emails", 4).unwrap();
        let two = partition_tags("emails", 2).unwrap();
        // 8 -> 4 recorded with every removed one still holding jobs, then 4 -> 2.
        let first: Vec<&str> = eight
            .iter()
            .filter(|t| !four.contains(t))
            .map(String::as_str)
            .collect();
        let l = layout("emails", 2, Some(&record_of(4, &first))).unwrap();
        let want: HashSet<&String> = eight.iter().filter(|t| !two.contains(t)).collect();
        assert_eq!(l.draining.iter().collect::<HashSet<_>>(), want);
        assert_eq!(l.draining.len(), 6);
    }

    #[test]
    fn growing_by_a_multiple_drains_nothing_and_otherwise_the_left_out() {
        let l = layout("emails", 4, Some(&record_of(2, &[]))).unwrap();
        assert!(l.draining.is_empty(), "{:?}", l.draining);
        let three = partition_tags("emails", 3).unwrap();
        let four = partition_tags("emails", 4).unwrap();
        let l = layout("emails", 4, Some(&record_of(3, &[]))).unwrap();
        let want: Vec<String> = three.into_iter().filter(|t| !four.contains(t)).collect();
        assert_eq!(l.draining, want);
    }

    #[test]
    fn a_draining_partition_back_in_the_layout_is_no_longer_draining() {
        let four = partition_tags("emails", 4).unwrap();
        let gone = &four[3];
        // Shrunk 4 -> 2 (partition 3 draining), then grown back to 4.
        let l = layout("emails", 4, Some(&record_of(2, &[gone]))).unwrap();
        assert_eq!(l.tags, four);
        assert!(l.draining.is_empty(), "{:?}", l.draining);
    }

    #[test]
    fn the_probe_covers_every_layout_up_to_the_bound_once() {
        let current = partition_tags("emails", 2).unwrap();
        let probe = probe_tags("emails", &current).unwrap();
        for n in [1, 3, 4, 7, 64, 255, 256] {
            for t in partition_tags("emails", n).unwrap() {
                assert!(
                    probe.contains(&t) || current.contains(&t),
                    "{t} of {n} partitions"
                );
            }
        }
        let unique: HashSet<&String> = probe.iter().collect();
        assert_eq!(unique.len(), probe.len(), "no tag twice");
        assert!(probe.iter().all(|t| !current.contains(t)));
        assert!(probe.len() < 1000, "{} tags", probe.len());
    }

    #[test]
    fn totals_sum_every_partition() {
        let mut a = part("e", false, 3, 1);
        a.stats.processing = 2;
        a.stats.reaped = 5;
        a.stats.histogram.buckets.insert(2, 4);
        let mut b = part("e~1", true, 4, 0);
        b.stats.due = 1;
        b.stats.histogram.buckets.insert(2, 1);
        b.stats.histogram.buckets.insert(5, 1);
        let t = total(&[a, b]);
        assert_eq!((t.pending, t.processing, t.dead, t.due), (7, 2, 1, 1));
        assert_eq!(t.reaped, 5);
        assert_eq!(t.histogram.buckets[&2], 5);
        assert_eq!(t.histogram.buckets[&5], 1);
    }

    #[test]
    fn the_record_keeps_draining_partitions_until_they_hold_no_job() {
        let parts = [
            part("e", false, 0, 0),
            part("e~1", false, 2, 0),
            part("e~2", true, 0, 3), // dead jobs only: still draining
            part("e~3", true, 0, 0), // empty: drained, forgotten
        ];
        let r = record(2, &parts).unwrap();
        assert_eq!(r.desired, 2);
        assert_eq!(r.draining, ["e~2"]);
        let tags: Vec<&str> = r.items.iter().map(|i| i.tag.as_str()).collect();
        assert_eq!(tags, ["e", "e~1", "e~2"]);
        assert!(r.items[2].draining && !r.items[0].draining);
        assert_eq!(r.items[1].slot, u32::from(tag_slot(b"e~1")));
        assert_eq!(draining_summary(&parts), "e~2 (3 dead)");
        // Drained down to one partition: the status is an unpartitioned queue's again.
        assert_eq!(
            record(1, &[part("e", false, 9, 0), part("e~3", true, 0, 0)]),
            None
        );
        assert!(record(1, &[part("e", false, 0, 0), part("e~3", true, 1, 0)]).is_some());
    }

    #[test]
    fn the_record_follows_the_spec_and_the_drain() {
        let none: [Option<String>; 2] = [None, None];
        let rec = |p: &str, d: Option<&str>| [Some(p.to_string()), d.map(str::to_string)];
        // An unpartitioned queue with no record is left alone.
        assert_eq!(record_to_write("e", 1, None, &[], &none).unwrap(), None);
        // Partitioned: the count is written, and not again once there.
        assert_eq!(
            record_to_write("e", 4, None, &[], &none).unwrap(),
            Some(PartitionRecord::new(4))
        );
        assert_eq!(
            record_to_write("e", 4, None, &[], &rec("4", None)).unwrap(),
            None
        );
        // Shrunk 4 -> 2: the removed partitions drain, and the record says so.
        let four = partition_tags("e", 4).unwrap();
        let two = partition_tags("e", 2).unwrap();
        let gone: Vec<String> = four.iter().filter(|t| !two.contains(t)).cloned().collect();
        let shrinking = PartitionRecord {
            partitions: 2,
            drain: Some(4),
        };
        assert_eq!(
            record_to_write("e", 2, Some(4), &gone, &rec("4", None)).unwrap(),
            Some(shrinking)
        );
        assert_eq!(
            record_to_write("e", 2, Some(2), &gone[1..], &rec("2", Some("4"))).unwrap(),
            None,
            "the recorded drain still holds what drains"
        );
        // Drained: the drain goes. Shrunk to one: one is recorded, not left out.
        assert_eq!(
            record_to_write("e", 2, Some(2), &[], &rec("2", Some("4"))).unwrap(),
            Some(PartitionRecord::new(2))
        );
        assert_eq!(
            record_to_write("e", 1, Some(2), &[], &rec("2", None)).unwrap(),
            Some(PartitionRecord::new(1))
        );
        // No memory of the earlier count (a probe found them): a layout that holds them.
        let r = record_to_write("e", 1, None, &gone, &none)
            .unwrap()
            .unwrap();
        let d = r.drain.unwrap();
        let tags = partition_tags("e", d).unwrap();
        assert!(gone.iter().all(|t| tags.contains(t)), "{d}: {tags:?}");
    }
}
