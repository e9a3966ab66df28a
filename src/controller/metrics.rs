//! The operator's Prometheus metrics (prometheus-client), served on `/metrics`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
    /// Acks, extends and fails refused since the queue began (Redis's `stale` counter).
    pub stale_acks: Family<QueueLabels, Gauge>,
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
    /// Queues with series, so deleted queues can be forgotten.
    known: Mutex<HashSet<QueueLabels>>,
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
            stale_acks: Family::default(),
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
            "processing_time_seconds",
            "Processing time of acked jobs (claim to ack) at a quantile, from the queue's histogram",
            self.processing_time.clone(),
        );
        r.register(
            "stale_acks",
            "Acks, extends and fails refused because the lease had been taken away, since the queue began",
            self.stale_acks.clone(),
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
        self
    }

    /// Count a reconcile and time it until the guard drops.
    pub fn reconcile_started(&self, queue: &QueueLabels) -> ReconcileTimer<'_> {
        self.reconcile_runs.get_or_create(queue).inc();
        ReconcileTimer {
            start: Instant::now(),
            histogram: &self.reconcile_duration,
        }
    }

    pub fn reconcile_failed(&self, queue: &QueueLabels, error: &str) {
        self.reconcile_failures
            .get_or_create(&FailureLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                error: error.to_string(),
            })
            .inc();
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
        set(&self.stale_acks, stats.stale);
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
        self.reaped.get_or_create(queue).inc_by(reaped.requeued);
        self.dead_lettered
            .get_or_create(queue)
            .inc_by(reaped.dead_lettered);
        self.promoted.get_or_create(queue).inc_by(reaped.promoted);
        self.restored.get_or_create(queue).inc_by(reaped.restored);
        self.known
            .lock()
            .expect("metrics lock")
            .insert(queue.clone());
    }

    /// Publish the scaler's replicas; `None` drops the series (nothing to show).
    pub fn replicas(&self, queue: &QueueLabels, desired: Option<i32>, current: Option<i32>) {
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
        let direction = if to > from { "up" } else { "down" };
        self.scale_operations
            .get_or_create(&ScaleLabels {
                namespace: queue.namespace.clone(),
                name: queue.name.clone(),
                direction: direction.to_string(),
            })
            .inc();
    }

    /// Drop the series of one queue (deleted), as [`retain`](Self::retain) drops those
    /// of every queue that no longer exists.
    pub fn forget(&self, queue: &QueueLabels) {
        let alive: HashSet<QueueLabels> = {
            let known = self.known.lock().expect("metrics lock");
            known.iter().filter(|q| *q != queue).cloned().collect()
        };
        self.retain(&alive);
    }

    /// Drop the series of queues that no longer exist.
    pub fn retain(&self, alive: &HashSet<QueueLabels>) {
        let mut known = self.known.lock().expect("metrics lock");
        let gone: Vec<QueueLabels> = known.difference(alive).cloned().collect();
        for queue in gone {
            for family in [
                &self.pending,
                &self.processing,
                &self.expired,
                &self.delayed,
                &self.due,
                &self.dead,
                &self.orphaned,
                &self.stale_acks,
                &self.desired_replicas,
                &self.current_replicas,
            ] {
                family.remove(&queue);
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
            for family in [
                &self.reaped,
                &self.dead_lettered,
                &self.promoted,
                &self.restored,
                &self.reconcile_runs,
            ] {
                family.remove(&queue);
            }
            known.remove(&queue);
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
            r#"jobqueue_dead{namespace="prod",name="emails"} 2"#,
            r#"jobqueue_due{namespace="prod",name="emails"} 5"#,
            r#"jobqueue_orphaned{namespace="prod",name="emails"} 4"#,
            r#"jobqueue_promoted_total{namespace="prod",name="emails"} 10"#,
            r#"jobqueue_restored_total{namespace="prod",name="emails"} 4"#,
            r#"jobqueue_stale_acks{namespace="prod",name="emails"} 3"#,
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
}
