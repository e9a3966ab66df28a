//! The one refresher: every interval, one `stats` call per queue, kept as a snapshot
//! that every page and API call reads. However many tabs poll, Redis sees the same
//! number of `stats` calls; the counters' history gives the rates and the health badges.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::Console;
use super::live::{self, RedisHealth};
pub use super::live::{Entry, Health, Sample, Snapshot};
use super::source::Found;

/// How many queues' `stats` calls are in flight at once.
const PARALLEL: usize = 16;

/// The snapshot, swapped whole at the end of each refresh.
#[derive(Default)]
pub struct Shared(RwLock<Arc<Snapshot>>);

impl Shared {
    pub fn get(&self) -> Arc<Snapshot> {
        self.0.read().expect("snapshot lock").clone()
    }

    fn set(&self, snapshot: Snapshot) {
        *self.0.write().expect("snapshot lock") = Arc::new(snapshot);
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Start the refresher: one refresh now, then one per `config.refresh`, until `shutdown`.
pub fn spawn_refresher(console: Arc<Console>, shutdown: CancellationToken) {
    console.snapshot.set(Snapshot {
        started: Some(Instant::now()),
        ..Snapshot::default()
    });
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(console.config.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let next = refresh(&console).await;
            console.snapshot.set(next);
        }
    });
}

/// How many samples the history keeps: `history / refresh`, at least 2, at most 600.
fn keep(console: &Console) -> usize {
    let n = console.config.history.as_millis() / console.config.refresh.as_millis().max(1);
    (n as usize).clamp(2, 600)
}

/// How often a refresh in progress publishes what it has read so far.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// One refresh: list the queues, probe each Redis and call `stats` once per queue, each
/// queue published as its answer comes (at most every [`PUBLISH_EVERY`]), so one queue
/// that does not answer holds back no other, and a hung Redis shows as counts that grow
/// old. Returns the snapshot at its end.
async fn refresh(console: &Console) -> Snapshot {
    let old = console.snapshot.get();
    let (found, error) = match console.source.list().await {
        Ok(found) => (found, None),
        Err(e) => {
            // Keep showing the queues known, with why the list is not fresh.
            let kept = old
                .entries
                .values()
                .map(|e| Found {
                    id: e.id.clone(),
                    queue: e.queue.clone(),
                    problem: None,
                    kube: e.kube.clone(),
                    parts: e.parts.clone(),
                })
                .collect();
            (kept, Some(format!("{e:#}")))
        }
    };
    let keep = keep(console);
    let timeout = live::call_timeout(console.config.refresh);
    // The queues listed now, each with what was read of it before.
    let mut work = Snapshot {
        seq: old.seq,
        at_ms: old.at_ms,
        stats_calls: old.stats_calls,
        error,
        entries: BTreeMap::new(),
        redis: BTreeMap::new(),
        started: old.started,
    };
    let mut probes = BTreeMap::new();
    for f in &found {
        let before = old.entries.get(&f.id);
        if let Some(q) = &f.queue {
            probes
                .entry(q.redis().endpoint().to_string())
                .or_insert_with(|| q.clone());
        }
        work.entries.insert(
            f.id.clone(),
            Entry {
                id: f.id.clone(),
                queue: f.queue.clone(),
                stats: before.and_then(|b| b.stats.clone()),
                error: match &f.queue {
                    Some(_) => before.and_then(|b| b.error.clone()),
                    None => f.problem.clone(),
                },
                kube: f.kube.clone(),
                history: before.map(|b| b.history.clone()).unwrap_or_default(),
                read_at: before.and_then(|b| b.read_at),
                parts: f.parts.clone(),
            },
        );
    }
    for endpoint in probes.keys() {
        if let Some(before) = old.redis.get(endpoint) {
            work.redis.insert(endpoint.clone(), before.clone());
        }
    }
    // Queues that came or went, or a listing that failed, show at once.
    if !work.entries.keys().eq(old.entries.keys()) || work.error != old.error {
        console.snapshot.set(work.clone());
    }
    let mut published = Instant::now();

    let probing = futures::future::join_all(
        probes
            .into_values()
            .map(|q| async move { live::probe(&q, timeout).await }),
    );
    let reading = futures::stream::iter(found.into_iter().filter(|f| f.queue.is_some()))
        .map(|f| async move {
            // A partitioned queue's counts are those of all its partitions.
            let stats = match tokio::time::timeout(timeout, f.stats()).await {
                Ok(Some(Ok(s))) => Ok(s),
                Ok(Some(Err(e))) => Err(e.to_string()),
                Ok(None) => Err("no queue to read".to_string()),
                Err(_) => Err(format!("no answer within {}", live::fmt(timeout))),
            };
            (f.id, stats, now_ms())
        })
        .buffer_unordered(PARALLEL);
    tokio::pin!(probing);
    tokio::pin!(reading);
    let mut probed = false;
    let mut calls = 0;
    loop {
        tokio::select! {
            done = &mut probing, if !probed => {
                probed = true;
                for health in done {
                    keep_probe(&mut work.redis, health);
                }
                // News of a Redis that does not answer goes out at once.
                console.snapshot.set(work.clone());
                published = Instant::now();
                continue;
            }
            next = reading.next() => {
                let Some((id, stats, at_ms)) = next else { break };
                calls += 1;
                if let Some(entry) = work.entries.get_mut(&id) {
                    match stats {
                        Ok(s) => {
                            entry.history.push_back(Sample::of(at_ms, &s));
                            while entry.history.len() > keep {
                                entry.history.pop_front();
                            }
                            entry.stats = Some(s);
                            entry.error = None;
                            entry.read_at = Some(Instant::now());
                        }
                        // The counts read before are kept, with why they are not fresh.
                        Err(e) => entry.error = Some(e),
                    }
                }
                work.stats_calls = old.stats_calls + calls;
            }
        }
        if published.elapsed() >= PUBLISH_EVERY {
            console.snapshot.set(work.clone());
            published = Instant::now();
        }
    }
    if !probed {
        for health in probing.await {
            keep_probe(&mut work.redis, health);
        }
    }
    work.seq = old.seq + 1;
    work.at_ms = now_ms();
    work.stats_calls = old.stats_calls + calls;
    work
}

/// Keep a probe's result; one that got no answer keeps the facts read before (memory,
/// policy, …, with their age), with why it failed.
fn keep_probe(redis: &mut BTreeMap<String, RedisHealth>, health: RedisHealth) {
    match (health.error, redis.get_mut(&health.endpoint)) {
        (Some(error), Some(before)) => before.error = Some(error),
        (error, _) => {
            redis.insert(health.endpoint.clone(), RedisHealth { error, ..health });
        }
    }
}

/// Per-second rates between consecutive samples: `(at_ms, enqueued, acked, failed)`.
pub fn rates(history: &VecDeque<Sample>) -> Vec<(i64, f64, f64, f64)> {
    history
        .iter()
        .zip(history.iter().skip(1))
        .filter(|(a, b)| b.at_ms > a.at_ms)
        .map(|(a, b)| {
            let secs = (b.at_ms - a.at_ms) as f64 / 1000.0;
            let per = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
            (
                b.at_ms,
                per(a.enqueued, b.enqueued),
                per(a.acked, b.acked),
                per(a.failed, b.failed),
            )
        })
        .collect()
}

/// The badges of a queue (see [`live::health_of`]), its age not counted.
pub fn health(entry: &Entry, window: Duration) -> Vec<Health> {
    let reading = live::Reading {
        age: None,
        ..live::Reading::of(entry, Instant::now())
    };
    live::health_of(&reading, &live::Rules::new(Duration::from_secs(2), window))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueStats;

    fn sample(at_ms: i64, enqueued: u64, acked: u64, dead_lettered: u64) -> Sample {
        Sample {
            at_ms,
            enqueued,
            acked,
            failed: 0,
            dead_lettered,
            stale: 0,
        }
    }

    #[test]
    fn rates_are_per_second_between_samples() {
        let h: VecDeque<Sample> = [sample(0, 0, 0, 0), sample(2000, 10, 4, 0)].into();
        assert_eq!(rates(&h), vec![(2000, 5.0, 2.0, 0.0)]);
        // A counter reset (a queue deleted and made again) reads as 0, not a huge rate.
        let h: VecDeque<Sample> = [sample(0, 10, 0, 0), sample(1000, 2, 0, 0)].into();
        assert_eq!(rates(&h)[0].1, 0.0);
    }

    #[test]
    fn badges_follow_growth_and_counts() {
        let mut entry = Entry {
            id: "a".into(),
            queue: None,
            stats: Some(QueueStats::default()),
            error: None,
            kube: None,
            history: [sample(0, 0, 0, 1), sample(1000, 0, 0, 1)].into(),
            parts: Vec::new(),
            read_at: None,
        };
        assert!(health(&entry, Duration::from_secs(60)).is_empty());
        entry.history.push_back(sample(2000, 0, 0, 3));
        entry.stats.as_mut().unwrap().orphaned = 2;
        let texts: Vec<String> = health(&entry, Duration::from_secs(60))
            .into_iter()
            .map(|h| h.text)
            .collect();
        assert!(texts[0].starts_with("dead letters growing: 2"), "{texts:?}");
        assert!(texts[1].contains("2 orphaned"), "{texts:?}");
    }
}
