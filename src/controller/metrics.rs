//! The operator's Prometheus metrics (prometheus-client), served on `/metrics`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use k8s_openapi::jiff::Timestamp;

use super::status::types;
use crate::crd::{JobQueueStatus, PartitionsStatus};
use crate::queue::{QueueStats, ReapOutcome};

/// One JobQueue.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub namespace: String,
    pub name: String,
}

impl QueueLabels {
    pub fn new(namespace: &str, name: &str) -> QueueLabels {
        QueueLabels {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// One JobQueue and a failure category.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub namespace: String,
    pub name: String,
    pub error: String,
}

/// One JobQueue and a quantile of its processing time (`0.5`, `0.99`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuantileLabels {
    pub namespace: String,
    pub name: String,
    pub quantile: String,
}

/// The quantiles of processing time published per queue.
const QUANTILES: [(f64, &str); 2] = [(0.5, "0.5"), (0.99, "0.99")];

/// One JobQueue and the direction of a scale operation (`up` or `down`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScaleLabels {
    pub namespace: String,
    pub name: String,
    pub direction: String,
}

/// One partition of a partitioned JobQueue, by its hash tag (at most 256 plus the
/// draining ones per queue; unpartitioned queues have none).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub namespace: String,
    pub name: String,
    pub partition: String,
}

/// Every metric of the operator.
pub struct Metrics {
    pub pending: Family<QueueLabels, Gauge>,
    pub processing: Family<QueueLabels, Gauge>,
    pub expired: Family<QueueLabels, Gauge>,
    pub delayed: Family<QueueLabels, Gauge>,
    /// Delayed jobs whose time has come, not yet promoted (in the scaling backlog).
    pub due: Family<QueueLabels, Gauge>,
    pub dead: Family<QueueLabels, Gauge>,
    /// Ids set aside because their job hash was absent: nonzero after a slot migration
    /// has ended means lost hashes (the `JobQueueOrphanedJobs` alert).
    pub orphaned: Family<QueueLabels, Gauge>,
    /// Processing time of acked jobs (claim to ack), from the queue's histogram.
    pub processing_time: Family<QuantileLabels, Gauge<f64, AtomicU64>>,
    /// How long the oldest job ready to run has waited (the queue's latency); no series
    /// while it is not known (the next job was enqueued by an earlier release).
    pub oldest_pending: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    /// The visibility timeout in force (under `auto`, the value the operator set last).
    pub visibility_timeout: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    /// Acks, extends and fails refused since the queue began (Redis's `stale` counter,
    /// mirrored: it resets only when the queue's stats do).
    pub stale_acks: Family<QueueLabels, Counter>,
    /// Acks and extends refused because no job hash exists for the id (Redis's
    /// `unknown` counter, mirrored).
    pub unknown_acks: Family<QueueLabels, Counter>,
    /// 1 while the queue's `Ready` condition is `True`, else 0.
    pub queue_ready: Family<QueueLabels, Gauge>,
    /// 1 when the last reconcile read the queue's Redis, 0 when it could not (or did not
    /// get that far: an invalid spec).
    pub redis_up: Family<QueueLabels, Gauge>,
    /// 1 while the queue's `LeaseTooShort` condition is `True`, else 0.
    pub lease_too_short: Family<QueueLabels, Gauge>,
    /// When the counts were last read from Redis (Unix seconds): during an outage the
    /// count gauges keep their last value, and this says how old it is.
    pub last_observed: Family<QueueLabels, Gauge>,
    pub reaped: Family<QueueLabels, Counter>,
    pub dead_lettered: Family<QueueLabels, Counter>,
    pub promoted: Family<QueueLabels, Counter>,
    pub restored: Family<QueueLabels, Counter>,
    pub reconcile_runs: Family<QueueLabels, Counter>,
    pub reconcile_failures: Family<FailureLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub desired_replicas: Family<QueueLabels, Gauge>,
    pub current_replicas: Family<QueueLabels, Gauge>,
    pub scale_operations: Family<ScaleLabels, Counter>,
    /// Pending jobs per partition of a partitioned queue: the one count with a
    /// `partition` label, enough to see a hot or a stuck partition (the other counts
    /// are the queue's totals).
    pub partition_pending: Family<PartitionLabels, Gauge>,
    /// Partitions of an earlier layout still holding jobs (after `spec.partitions`
    /// shrank); partitioned queues only.
    pub partitions_draining: Family<QueueLabels, Gauge>,
    /// The partitions each queue has `partition_pending` series for.
    partitions_known: Mutex<HashMap<QueueLabels, Vec<String>>>,
    /// Queues with series, and the `error` labels each has failed with, so every series
    /// of a deleted queue can be forgotten.
    known: Mutex<HashMap<QueueLabels, BTreeSet<String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            pending: Family::default(),
            processing: Family::default(),
            expired: Family::default(),
            delayed: Family::default(),
            due: Family::default(),
            dead: Family::default(),
            orphaned: Family::default(),
            processing_time: Family::default(),
            oldest_pending: Family::default(),
            visibility_timeout: Family::default(),
            stale_acks: Family::default(),
            unknown_acks: Family::default(),
            queue_ready: Family::default(),
            redis_up: Family::default(),
            lease_too_short: Family::default(),
            last_observed: Family::default(),
            reaped: Family::default(),
            dead_lettered: Family::default(),
            promoted: Family::default(),
            restored: Family::default(),
            reconcile_runs: Family::default(),
            reconcile_failures: Family::default(),
            reconcile_duration: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            desired_replicas: Family::default(),
            current_replicas: Family::default(),
            scale_operations: Family::default(),
            partition_pending: Family::default(),
            partitions_draining: Family::default(),
            partitions_known: Mutex::default(),
            known: Mutex::default(),
        }
    }
}

impl Metrics {
    /// Register every metric under the `jobqueue_` prefix.
    pub fn register(self, registry: &mut Registry) -> Self {
        let r = registry.sub_registry_with_prefix("jobqueue");
        r.register("pending", "Jobs ready to be claimed", self.pending.clone());
        r.register(
            "processing",
            "Jobs leased to a worker",
            self.processing.clone(),
        );
        r.register(
            "expired",
            "Leases past their visibility timeout, not yet reaped",
            self.expired.clone(),
        );
        r.register(
            "delayed",
            "Jobs waiting for a retry backoff or a delay",
            self.delayed.clone(),
        );
        r.register(
            "due",
            "Delayed jobs whose time has come, not yet promoted to pending",
            self.due.clone(),
        );
        r.register("dead", "Jobs in the dead-letter set", self.dead.clone());
        r.register(
            "orphaned",
            "Job ids set aside because their job hash was absent",
            self.orphaned.clone(),
        );
        r.register(
            "oldest_pending_seconds",
            "How long the oldest job ready to run has waited to be claimed (queue latency, Redis clock)",
            self.oldest_pending.clone(),
        );
        r.register(
            "processing_time_seconds",
            "Processing time of acked jobs (claim to ack) at a quantile, from the queue's histogram",
            self.processing_time.clone(),
        );
        r.register(
            "visibility_timeout_seconds",
            "The visibility timeout in force (under visibilityTimeout: auto, the value set last)",
            self.visibility_timeout.clone(),
        );
        r.register(
            "stale_acks",
            "Acks, extends and fails refused because the lease had been taken away, since the queue began",
            self.stale_acks.clone(),
        );
        r.register(
            "unknown_acks",
            "Acks and extends refused because no job exists for the id, since the queue began",
            self.unknown_acks.clone(),
        );
        r.register(
            "queue_ready",
            "1 while the JobQueue's Ready condition is True, else 0",
            self.queue_ready.clone(),
        );
        r.register(
            "redis_up",
            "1 when the last reconcile read the queue's Redis, else 0",
            self.redis_up.clone(),
        );
        r.register(
            "lease_too_short",
            "1 while the JobQueue's LeaseTooShort condition is True (acks after their lease expired), else 0",
            self.lease_too_short.clone(),
        );
        r.register(
            "last_observed_timestamp_seconds",
            "When the queue's counts were last read from Redis (Unix time)",
            self.last_observed.clone(),
        );
        r.register(
            "reaped",
            "Expired leases the operator put back to pending",
            self.reaped.clone(),
        );
        r.register(
            "dead_lettered",
            "Expired leases the operator moved to the dead-letter set",
            self.dead_lettered.clone(),
        );
        r.register(
            "promoted",
            "Due delayed jobs the operator's reaper moved to pending",
            self.promoted.clone(),
        );
        r.register(
            "restored",
            "Set-aside ids the operator's reaper put back, their job hash being there again",
            self.restored.clone(),
        );
        r.register(
            "reconcile_runs",
            "Reconciles started",
            self.reconcile_runs.clone(),
        );
        r.register(
            "reconcile_failures",
            "Reconciles that failed, by error category",
            self.reconcile_failures.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Time one reconcile took",
            self.reconcile_duration.clone(),
        );
        r.register(
            "desired_replicas",
            "Worker replicas the scaler wants",
            self.desired_replicas.clone(),
        );
        r.register(
            "current_replicas",
            "Worker replicas the scale target has",
            self.current_replicas.clone(),
        );
        r.register(
            "scale_operations",
            "Scale patches of the worker workload, by direction",
            self.scale_operations.clone(),
        );
        r.register(
            "partition_pending",
            "Jobs ready to be claimed in one partition of a partitioned queue",
            self.partition_pending.clone(),
        );
        r.register(
            "partitions_draining",
            "Partitions of an earlier layout of a partitioned queue that still hold jobs",
            self.partitions_draining.clone(),
        );
        self
    }

    /// Mirror `status.partitions`: one `partition_pending` series per partition listed,
    /// the series of partitions no longer listed dropped; `None` (an unpartitioned queue)
    /// drops them all.
    pub fn partitions(&self, queue: &QueueLabels, record: Option<&PartitionsStatus>) {
        let now: Vec<String> = record
            .map(|r| r.items.iter().map(|i| i.tag.clone()).collect())
            .unwrap_or_default();
        let before = {
            let mut known = self.partitions_known.lock().expect("metrics lock");
            match record {
                Some(_) => known.insert(queue.clone(), now.clone()),
                None => known.remove(queue),
            }
            .unwrap_or_default()
        };
        let labels = |partition: &str| PartitionLabels {
            namespace: queue.namespace.clone(),
            name: queue.name.clone(),
            partition: partition.to_string(),
        };
        for gone in before.iter().filter(|t| !now.contains(t)) {
            self.partition_pending.remove(&labels(gone));
        }
        match record {
            Some(r) => {
                for item in &r.items {
                    self.partition_pending
                        .get_or_create(&labels(&item.tag))
                        .set(i64::try_from(item.pending).unwrap_or(i64::MAX));
                }
                self.partitions_draining
                    .get_or_create(queue)
                    .set(r.draining.len() as i64);
            }
            None => {
                self.partitions_draining.remove(queue);
            }
        }
    }

    /// Count a reconcile and time it until the guard drops.
    pub fn reconcile_started(&self, queue: &QueueLabels) -> ReconcileTimer<'_> {
        self.touch(queue, None);
        self.reconcile_runs.get_or_create(queue).inc();
        ReconcileTimer {
            start: Instant::now(),
            histogram: &self.reconcile_duration,
        }
    }

    pub fn reconcile_failed(&self, queue: &QueueLabels, error: &str) {
        self.touch(queue, Some(error));
        self.reconcile_failures
            .get_or_create(&FailureLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                error: error.to_string(),
            })
            .inc();
    }

    /// Publish the visibility timeout in force.
    pub fn visibility(&self, queue: &QueueLabels, value: std::time::Duration) {
        self.visibility_timeout
            .get_or_create(queue)
            .set(value.as_secs_f64());
    }

    /// Publish one reconcile's counts and reaper work.
    pub fn observed(&self, queue: &QueueLabels, stats: &QueueStats, reaped: &ReapOutcome) {
        let set = |family: &Family<QueueLabels, Gauge>, v: u64| {
            family
                .get_or_create(queue)
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        set(&self.pending, stats.pending);
        set(&self.processing, stats.processing);
        set(&self.expired, stats.expired);
        set(&self.delayed, stats.delayed);
        set(&self.due, stats.due);
        set(&self.dead, stats.dead);
        set(&self.orphaned, stats.orphaned);
        // Counters mirroring Redis's own: set, not added to (a reset of the queue's stats
        // reads as a counter reset, which rate() and increase() handle).
        for (family, v) in [
            (&self.stale_acks, stats.stale),
            (&self.unknown_acks, stats.unknown),
        ] {
            family
                .get_or_create(queue)
                .inner()
                .store(v, Ordering::Relaxed);
        }
        for (q, label) in QUANTILES {
            let labels = QuantileLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                quantile: label.to_string(),
            };
            match stats.histogram.quantile(q) {
                Some(d) => {
                    self.processing_time
                        .get_or_create(&labels)
                        .set(d.as_secs_f64());
                }
                None => {
                    self.processing_time.remove(&labels);
                }
            }
        }
        match stats.oldest_pending_ms {
            Some(ms) => {
                self.oldest_pending
                    .get_or_create(queue)
                    .set(ms as f64 / 1000.0);
            }
            None => {
                self.oldest_pending.remove(queue);
            }
        }
        self.reaped.get_or_create(queue).inc_by(reaped.requeued);
        self.dead_lettered
            .get_or_create(queue)
            .inc_by(reaped.dead_lettered);
        self.promoted.get_or_create(queue).inc_by(reaped.promoted);
        self.restored.get_or_create(queue).inc_by(reaped.restored);
        self.touch(queue, None);
    }

    /// Mirror one reconcile's outcome, whatever it was: `queue_ready` and
    /// `lease_too_short` from the conditions of the status it decided, `redis_up` from
    /// whether it read the queue's Redis (`read_at`, the reconcile's time, which
    /// `last_observed_timestamp_seconds` then takes). A reconcile that could not read
    /// Redis leaves the counts as they were: their observation time shows their age.
    pub fn outcome(
        &self,
        queue: &QueueLabels,
        status: &JobQueueStatus,
        read_at: Option<Timestamp>,
    ) {
        self.touch(queue, None);
        for (family, type_) in [
            (&self.queue_ready, types::READY),
            (&self.lease_too_short, types::LEASE_TOO_SHORT),
        ] {
            match status.condition(type_) {
                Some(c) => {
                    family
                        .get_or_create(queue)
                        .set(i64::from(c.status == "True"));
                }
                None => {
                    family.remove(queue);
                }
            }
        }
        self.redis_up
            .get_or_create(queue)
            .set(i64::from(read_at.is_some()));
        if let Some(t) = read_at {
            self.last_observed.get_or_create(queue).set(t.as_second());
        }
    }

    /// Publish the scaler's replicas; `None` drops the series (nothing to show).
    pub fn replicas(&self, queue: &QueueLabels, desired: Option<i32>, current: Option<i32>) {
        self.touch(queue, None);
        for (family, value) in [
            (&self.desired_replicas, desired),
            (&self.current_replicas, current),
        ] {
            match value {
                Some(v) => {
                    family.get_or_create(queue).set(i64::from(v));
                }
                None => {
                    family.remove(queue);
                }
            }
        }
    }

    /// Count one scale patch from `from` to `to` replicas.
    pub fn scaled(&self, queue: &QueueLabels, from: i32, to: i32) {
        self.touch(queue, None);
        let direction = if to > from { "up" } else { "down" };
        self.scale_operations
            .get_or_create(&ScaleLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                direction: direction.to_string(),
            })
            .inc();
    }

    /// Remember that `queue` has series (and, with `error`, a failure series).
    fn touch(&self, queue: &QueueLabels, error: Option<&str>) {
        let mut known = self.known.lock().expect("metrics lock");
        let errors = known.entry(queue.clone()).or_default();
        if let Some(error) = error
            && !errors.contains(error)
        {
            errors.insert(error.to_string());
        }
    }

    /// Drop the series of queues that no longer exist.
    pub fn retain(&self, alive: &HashSet<QueueLabels>) {
        let gone: Vec<QueueLabels> = {
            let known = self.known.lock().expect("metrics lock");
            known
                .keys()
                .filter(|q| !alive.contains(q))
                .cloned()
                .collect()
        };
        for queue in gone {
            self.forget(&queue);
        }
    }

    /// Drop every series of one queue at once: its gauges, its counters, its failures
    /// by error, its processing-time quantiles and its scale operations.
    pub fn forget(&self, queue: &QueueLabels) {
        let errors = self
            .known
            .lock()
            .expect("metrics lock")
            .remove(queue)
            .unwrap_or_default();
        for family in [
            &self.pending,
            &self.processing,
            &self.expired,
            &self.delayed,
            &self.due,
            &self.dead,
            &self.orphaned,
            &self.queue_ready,
            &self.redis_up,
            &self.lease_too_short,
            &self.last_observed,
            &self.desired_replicas,
            &self.current_replicas,
        ] {
            family.remove(queue);
        }
        self.oldest_pending.remove(queue);
        self.partitions(queue, None);
        self.visibility_timeout.remove(queue);
        for family in [
            &self.stale_acks,
            &self.unknown_acks,
            &self.reaped,
            &self.dead_lettered,
            &self.promoted,
            &self.restored,
            &self.reconcile_runs,
        ] {
            family.remove(queue);
        }
        for (_, label) in QUANTILES {
            self.processing_time.remove(&QuantileLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                quantile: label.to_string(),
            });
        }
        for direction in ["up", "down"] {
            self.scale_operations.remove(&ScaleLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                direction: direction.to_string(),
            });
        }
        for error in errors {
            self.reconcile_failures.remove(&FailureLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                error,
            });
        }
    }
}

/// Observes the reconcile's duration when dropped.
pub struct ReconcileTimer<'a> {
    start: Instant,
    histogram: &'a Histogram,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

/// The registry in the Prometheus text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_series_follow_the_record_and_go_with_the_queue() {
        use crate::crd::PartitionCounts;
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        let q = QueueLabels::new("prod", "emails");
        let record = |tags: &[&str], draining: &[&str]| PartitionsStatus {
            desired: 2,
            draining: draining.iter().map(|t| t.to_string()).collect(),
            items: tags
                .iter()
                .enumerate()
                .map(|(i, t)| PartitionCounts {
                    tag: t.to_string(),
                    pending: i as u64 + 3,
                    ..PartitionCounts::default()
                })
                .collect(),
        };
        metrics.partitions(
            &q,
            Some(&record(&["emails", "emails~1", "emails~4"], &["emails~4"])),
        );
        let text = encode(&registry);
        for line in [
            r#"jobqueue_partition_pending{namespace="prod",name="emails",partition="emails"} 3"#,
            r#"jobqueue_partition_pending{namespace="prod",name="emails",partition="emails~4"} 5"#,
            r#"jobqueue_partitions_draining{namespace="prod",name="emails"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        // emails~4 drained: its series goes.
        metrics.partitions(&q, Some(&record(&["emails", "emails~1"], &[])));
        let text = encode(&registry);
        assert!(!text.contains(r#"partition="emails~4""#), "{text}");
        assert!(text.contains(r#"jobqueue_partitions_draining{namespace="prod",name="emails"} 0"#));
        // The queue deleted: every partition series goes with it.
        metrics.observed(&q, &QueueStats::default(), &ReapOutcome::default());
        metrics.forget(&q);
        let text = encode(&registry);
        assert!(!text.contains("partition_pending{"), "{text}");
        assert!(!text.contains("partitions_draining{"), "{text}");
    }

    #[test]
    fn gauges_counters_and_failures_are_exported() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        let q = QueueLabels::new("prod", "emails");
        {
            let _timer = metrics.reconcile_started(&q);
        }
        let mut stats = QueueStats {
            pending: 7,
            due: 5,
            dead: 2,
            orphaned: 4,
            stale: 3,
            unknown: 6,
            oldest_pending_ms: Some(2500),
            ..QueueStats::default()
        };
        // 10 acks in [512, 1024) ms.
        stats.histogram.buckets.insert(9, 10);
        let reaped = ReapOutcome {
            requeued: 3,
            dead_lettered: 1,
            more: false,
            promoted: 5,
            restored: 2,
        };
        metrics.observed(&q, &stats, &reaped);
        metrics.observed(&q, &stats, &reaped);
        metrics.reconcile_failed(&q, "redis_unreachable");
        metrics.replicas(&q, Some(4), Some(2));
        metrics.scaled(&q, 2, 4);
        metrics.scaled(&q, 0, 2);
        metrics.scaled(&q, 4, 1);
        let text = encode(&registry);
        for line in [
            r#"jobqueue_pending{namespace="prod",name="emails"} 7"#,
            r#"jobqueue_oldest_pending_seconds{namespace="prod",name="emails"} 2.5"#,
            r#"jobqueue_dead{namespace="prod",name="emails"} 2"#,
            r#"jobqueue_due{namespace="prod",name="emails"} 5"#,
            r#"jobqueue_orphaned{namespace="prod",name="emails"} 4"#,
            r#"jobqueue_promoted_total{namespace="prod",name="emails"} 10"#,
            r#"jobqueue_restored_total{namespace="prod",name="emails"} 4"#,
            r#"jobqueue_stale_acks_total{namespace="prod",name="emails"} 3"#,
            r#"jobqueue_unknown_acks_total{namespace="prod",name="emails"} 6"#,
            r#"jobqueue_processing_time_seconds{namespace="prod",name="emails",quantile="0.5"} 0.768"#,
            r#"jobqueue_processing_time_seconds{namespace="prod",name="emails",quantile="0.99"} 1.01"#,
            r#"jobqueue_reaped_total{namespace="prod",name="emails"} 6"#,
            r#"jobqueue_dead_lettered_total{namespace="prod",name="emails"} 2"#,
            r#"jobqueue_reconcile_runs_total{namespace="prod",name="emails"} 1"#,
            r#"jobqueue_reconcile_failures_total{namespace="prod",name="emails",error="redis_unreachable"} 1"#,
            "jobqueue_reconcile_duration_seconds_count 1",
            r#"jobqueue_desired_replicas{namespace="prod",name="emails"} 4"#,
            r#"jobqueue_current_replicas{namespace="prod",name="emails"} 2"#,
            r#"jobqueue_scale_operations_total{namespace="prod",name="emails",direction="up"} 2"#,
            r#"jobqueue_scale_operations_total{namespace="prod",name="emails",direction="down"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        metrics.replicas(&q, None, Some(2));
        let text = encode(&registry);
        assert!(!text.contains("jobqueue_desired_replicas{"), "{text}");
        metrics.retain(&HashSet::new());
        let text = encode(&registry);
        for gone in [
            "jobqueue_pending{",
            "jobqueue_orphaned{",
            "jobqueue_promoted_total{",
        ] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
        assert!(!text.contains("jobqueue_current_replicas{"), "{text}");
        assert!(!text.contains("jobqueue_scale_operations_total{"), "{text}");
    }

    /// Every family with a series of the queue, then the queue deleted: nothing of it
    /// may remain in the exposition.
    #[test]
    fn a_deleted_queue_leaves_no_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        let q = QueueLabels::new("prod", "gone");
        populate(&metrics, &q);
        // Every family of the registry has a series of the queue (but the reconcile
        // duration, which has no queue label): a family added without a way here fails.
        let text = encode(&registry);
        for (family, series) in families(&text) {
            if family == "jobqueue_reconcile_duration_seconds" {
                continue;
            }
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("{series}{{")) && l.contains(r#"name="gone""#)),
                "no series of the queue in {family}: the test misses a family\n{text}"
            );
        }
        metrics.retain(&HashSet::from([QueueLabels::new("prod", "kept")]));
        let text = encode(&registry);
        let left: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(r#"name="gone""#))
            .collect();
        assert!(
            left.is_empty(),
            "series of a deleted queue remain: {left:?}"
        );
    }

    /// Give `q` a series in every family it can have one in.
    fn populate(metrics: &Metrics, q: &QueueLabels) {
        {
            let _timer = metrics.reconcile_started(q);
        }
        metrics.reconcile_failed(q, "redis_unreachable");
        metrics.reconcile_failed(q, "invalid_spec");
        let mut stats = QueueStats {
            stale: 1,
            oldest_pending_ms: Some(1000),
            ..QueueStats::default()
        };
        stats.histogram.buckets.insert(9, 10);
        metrics.observed(q, &stats, &ReapOutcome::default());
        metrics.visibility(q, std::time::Duration::from_secs(30));
        metrics.replicas(q, Some(2), Some(1));
        let record = PartitionsStatus {
            desired: 2,
            draining: vec!["emails~3".into()],
            items: vec![crate::crd::PartitionCounts {
                tag: "emails".into(),
                pending: 1,
                ..Default::default()
            }],
        };
        metrics.partitions(q, Some(&record));
        metrics.scaled(q, 1, 2);
        metrics.scaled(q, 2, 1);
        metrics.outcome(
            q,
            &status_with(&[("Ready", "True"), ("LeaseTooShort", "True")]),
            Some(Timestamp::UNIX_EPOCH),
        );
    }

    /// `(family, series name)` of every `# TYPE` line: a counter's series end in
    /// `_total`; a histogram is named by its family (as the guide's table does).
    fn families(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let mut parts = l.split(' ');
                let name = parts.next().unwrap_or_default().to_string();
                let series = match parts.next() {
                    Some("counter") => format!("{name}_total"),
                    _ => name.clone(),
                };
                (name, series)
            })
            .collect()
    }

    /// The metrics table of docs/operations.md (which the chart check holds the alerts
    /// and the dashboard to) lists exactly what the registry exports.
    #[test]
    fn the_operations_guide_lists_every_exported_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        populate(&metrics, &QueueLabels::new("prod", "emails"));
        let exported: BTreeSet<String> = families(&encode(&registry))
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        let guide = include_str!("../../docs/operations.md");
        let documented: BTreeSet<String> = guide
            .lines()
            .filter_map(|l| {
                // | `jobqueue_name` | type | labels | meaning |
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                let kind = *cells.get(2)?;
                (name.starts_with("jobqueue_") && ["gauge", "counter", "histogram"].contains(&kind))
                    .then(|| name.to_string())
            })
            .collect();
        assert_eq!(
            exported, documented,
            "the registry (left) and the metrics table of docs/operations.md (right) differ"
        );
    }

    fn status_with(conditions: &[(&str, &str)]) -> JobQueueStatus {
        JobQueueStatus {
            conditions: conditions
                .iter()
                .map(|(type_, status)| {
                    crate::controller::status::condition(
                        type_,
                        if *status == "True" {
                            crate::controller::status::Status::True
                        } else {
                            crate::controller::status::Status::False
                        },
                        "Test",
                        "",
                        None,
                        Timestamp::UNIX_EPOCH,
                    )
                })
                .collect(),
            ..JobQueueStatus::default()
        }
    }

    /// The health gauges mirror the conditions and whether Redis was read; a reconcile
    /// that could not read Redis keeps the last observation time.
    #[test]
    fn health_gauges_follow_each_outcome() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        let q = QueueLabels::new("prod", "emails");
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        metrics.outcome(
            &q,
            &status_with(&[("Ready", "True"), ("LeaseTooShort", "False")]),
            Some(t),
        );
        let text = encode(&registry);
        for line in [
            r#"jobqueue_queue_ready{namespace="prod",name="emails"} 1"#,
            r#"jobqueue_redis_up{namespace="prod",name="emails"} 1"#,
            r#"jobqueue_lease_too_short{namespace="prod",name="emails"} 0"#,
            r#"jobqueue_last_observed_timestamp_seconds{namespace="prod",name="emails"} 1700000000"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // Redis down: Ready False, nothing read; the observation time stays.
        metrics.outcome(
            &q,
            &status_with(&[("Ready", "False"), ("LeaseTooShort", "True")]),
            None,
        );
        let text = encode(&registry);
        for line in [
            r#"jobqueue_queue_ready{namespace="prod",name="emails"} 0"#,
            r#"jobqueue_redis_up{namespace="prod",name="emails"} 0"#,
            r#"jobqueue_lease_too_short{namespace="prod",name="emails"} 1"#,
            r#"jobqueue_last_observed_timestamp_seconds{namespace="prod",name="emails"} 1700000000"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // A status without the condition: no series rather than a guess.
        metrics.outcome(&q, &status_with(&[("Ready", "False")]), None);
        assert!(!encode(&registry).contains("jobqueue_lease_too_short{"));
    }

    /// `forget` drops one queue and leaves the others.
    #[test]
    fn forget_drops_one_queue() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        let (a, b) = (QueueLabels::new("prod", "a"), QueueLabels::new("prod", "b"));
        for q in [&a, &b] {
            metrics.observed(q, &QueueStats::default(), &ReapOutcome::default());
            metrics.reconcile_failed(q, "redis_error");
        }
        metrics.forget(&a);
        let text = encode(&registry);
        assert!(!text.contains(r#"name="a""#), "{text}");
        assert!(text.contains(r#"jobqueue_reconcile_failures_total{namespace="prod",name="b",error="redis_error"} 1"#), "{text}");
        assert!(
            text.contains(r#"jobqueue_pending{namespace="prod",name="b"} 0"#),
            "{text}"
        );
    }
}
