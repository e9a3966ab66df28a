//! The one refresher: every interval, one `stats` call per queue, kept as a snapshot
//! that every page and API call reads. However many tabs poll, Redis sees the same
//! number of `stats` calls; the counters' history gives the rates and the health badges.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::Console;
use super::source::{Found, KubeInfo};
use crate::queue::{Queue, QueueStats};

/// How many queues' `stats` calls are in flight at once.
const PARALLEL: usize = 16;

/// One reading of the counters that rates are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When it was read (ms since the epoch, this host's clock).
    pub at_ms: i64,
    pub enqueued: u64,
    pub acked: u64,
    pub failed: u64,
    pub dead_lettered: u64,
    pub stale: u64,
}

impl Sample {
    fn of(at_ms: i64, s: &QueueStats) -> Sample {
        Sample {
            at_ms,
            enqueued: s.enqueued,
            acked: s.acked,
            failed: s.failed,
            dead_lettered: s.dead_lettered,
            stale: s.stale,
        }
    }
}

/// One queue as last read.
#[derive(Clone)]
pub struct Entry {
    pub id: String,
    pub queue: Option<Queue>,
    /// The last `stats` reply; kept through a failed refresh (then `error` says so).
    pub stats: Option<QueueStats>,
    pub error: Option<String>,
    pub kube: Option<KubeInfo>,
    pub history: VecDeque<Sample>,
    /// Every partition of a partitioned queue (see `Found::parts`).
    pub parts: Vec<Queue>,
}

/// What the refresher last saw.
#[derive(Clone, Default)]
pub struct Snapshot {
    /// How many refreshes have completed (0 before the first).
    pub seq: u64,
    /// When the last refresh ended (ms since the epoch).
    pub at_ms: i64,
    /// `stats` calls made since start, all queues together.
    pub stats_calls: u64,
    /// Why the last listing of queues failed, if it did (the previous list is kept).
    pub error: Option<String>,
    pub entries: BTreeMap<String, Entry>,
}

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

/// One refresh: list the queues, one `stats` call each, and the history extended.
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
    let read = futures::stream::iter(found)
        .map(|f| async move {
            let stats = f.stats().await;
            (f, stats, now_ms())
        })
        .buffer_unordered(PARALLEL)
        .collect::<Vec<_>>()
        .await;
    let mut entries = BTreeMap::new();
    let mut calls = 0;
    for (found, stats, at_ms) in read {
        let before = old.entries.get(&found.id);
        let mut history = before.map(|e| e.history.clone()).unwrap_or_default();
        let (stats, error) = match stats {
            Some(Ok(s)) => {
                calls += 1;
                history.push_back(Sample::of(at_ms, &s));
                while history.len() > keep {
                    history.pop_front();
                }
                (Some(s), None)
            }
            Some(Err(e)) => {
                calls += 1;
                (before.and_then(|b| b.stats.clone()), Some(e.to_string()))
            }
            None => (None, found.problem.clone()),
        };
        entries.insert(
            found.id.clone(),
            Entry {
                id: found.id,
                queue: found.queue,
                stats,
                error,
                kube: found.kube,
                history,
                parts: found.parts,
            },
        );
    }
    Snapshot {
        seq: old.seq + 1,
        at_ms: now_ms(),
        stats_calls: old.stats_calls + calls,
        error,
        entries,
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

/// A health note: `warn` or `bad`, and what it means.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    pub level: &'static str,
    pub text: String,
}

/// The badges of a queue from its counts and the counters' growth over the history:
/// stale acks growing (leases too short for the work), dead letters growing, orphans
/// present, expired leases waiting, no reading at all.
pub fn health(entry: &Entry, window: Duration) -> Vec<Health> {
    let mut out = Vec::new();
    let Some(s) = &entry.stats else {
        out.push(Health {
            level: "bad",
            text: "not read".into(),
        });
        return out;
    };
    if let Some(e) = &entry.error {
        out.push(Health {
            level: "bad",
            text: format!("last read failed: {e}"),
        });
    }
    let grew = |f: fn(&Sample) -> u64| -> u64 {
        match (entry.history.front(), entry.history.back()) {
            (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
            _ => 0,
        }
    };
    let over = crate::duration::format(window);
    let stale = grew(|x| x.stale);
    if stale > 0 {
        out.push(Health {
            level: "warn",
            text: format!(
                "lease too short: {stale} acks arrived after their lease was taken away in the last {over}"
            ),
        });
    }
    let dead = grew(|x| x.dead_lettered);
    if dead > 0 {
        out.push(Health {
            level: "warn",
            text: format!("dead letters growing: {dead} in the last {over}"),
        });
    }
    if s.orphaned > 0 {
        out.push(Health {
            level: "warn",
            text: format!("{} orphaned ids set aside", s.orphaned),
        });
    }
    if s.expired > 0 {
        out.push(Health {
            level: "warn",
            text: format!("{} expired leases wait for a reaper", s.expired),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
