//! What the chaos scenarios (tests/chaos.rs, tests/chaos_features.rs) share: their
//! size (`JOBQUEUE_CHAOS_SCALE`), their tallies' report (`JOBQUEUE_CHAOS_REPORT`), the
//! queue's settings and connections, the workload's payloads, reapers that keep going
//! through Redis failures, and the faults themselves: worker processes SIGKILLed and
//! restarted, Redis SIGKILLed and restarted.

use std::io::Write;
use std::ops::Range;
use std::sync::Mutex;
use std::time::Duration;

use jobqueue::queue::{ConnectOptions, Queue, QueueSettings, Redis};
use rand::Rng;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::eventually::Wait;
use super::fleet::{Fleet, TAG};
use super::redis::RedisServer;

/// The multiplier of jobs and faults: `JOBQUEUE_CHAOS_SCALE` (`make chaos`), 1 unless set.
pub fn scale() -> usize {
    std::env::var("JOBQUEUE_CHAOS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(1)
}

/// Print a scenario's tally, and append it to `JOBQUEUE_CHAOS_REPORT` when set.
pub fn report(tally: &impl std::fmt::Display) {
    println!("{tally}");
    if let Ok(path) = std::env::var("JOBQUEUE_CHAOS_REPORT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{tally}").unwrap();
    }
}

/// The queue's settings: retries come back fast, leases are short, done jobs are kept
/// (for an hour) so the final accounting can read every job.
pub fn settings() -> QueueSettings {
    QueueSettings {
        visibility_timeout: Duration::from_secs(1),
        max_attempts: 20,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
        completed_retention: Duration::from_secs(3600),
        ..QueueSettings::default()
    }
}

/// The queue [`TAG`] of the Redis at `url`, on a connection of its own.
pub async fn connect(url: &str, cluster: bool) -> Queue {
    let redis = Redis::connect(
        &ConnectOptions::new(url)
            .cluster(cluster)
            .response_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("connect");
    Queue::new(redis, "jq", TAG).unwrap()
}

/// Reapers (each on its own connection) that keep going through Redis failures.
pub fn start_reapers(queues: Vec<Queue>, stop: &CancellationToken) -> Vec<JoinHandle<u64>> {
    queues
        .into_iter()
        .map(|queue| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut requeued = 0;
                while !stop.is_cancelled() {
                    if let Ok(out) = queue.reap_expired(100, 20).await {
                        requeued += out.requeued;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                requeued
            })
        })
        .collect()
}

/// Wait until every one of `expected` jobs is done or dead and nothing is left in
/// flight. Panics with the worker logs after `limit`.
pub async fn wait_until_settled(
    queue: &Queue,
    expected: impl Fn() -> usize,
    limit: Duration,
    fleet: &Fleet,
) {
    let last = Mutex::new(None);
    Wait::for_("every job settled")
        .within(limit)
        .every(Duration::from_millis(100))
        .explained_by(|| {
            format!(
                "last stats: {:?}\nworker logs:\n{}",
                last.lock().unwrap(),
                fleet.logs()
            )
        })
        .until(async || {
            let stats = queue.stats().await;
            let settled = matches!(&stats, Ok(s) if s.pending == 0
                && s.processing == 0
                && s.delayed == 0
                && (s.acked + s.dead) as usize >= expected());
            *last.lock().unwrap() = Some(stats);
            settled
        })
        .await;
}

/// What the handler of the workers (tests/support/runs.rs) does with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ok,
    /// Fails its first attempt.
    Flaky,
    /// Exits with the dead-letter code.
    Poison,
}

/// The kind and payload of the workload's job number `i`: every 23rd job poison, every
/// 9th flaky, the rest plain; each sleeps 20–150 ms.
pub fn payload(i: usize) -> (Kind, String) {
    let kind = if i % 23 == 7 {
        Kind::Poison
    } else if i % 9 == 4 {
        Kind::Flaky
    } else {
        Kind::Ok
    };
    (kind, work(kind, 20..150))
}

/// The payload of a job of `kind` that sleeps a random number of `ms`.
pub fn work(kind: Kind, ms: Range<u64>) -> String {
    let word = match kind {
        Kind::Ok => "ok",
        Kind::Flaky => "flaky",
        Kind::Poison => "poison",
    };
    let secs = rand::rng().random_range(ms) as f64 / 1000.0;
    format!("{word} {secs:.3}\n")
}

/// Faults made one at a time, counted: a worker SIGKILLed and restarted 100–300 ms
/// later, or Redis SIGKILLed and restarted (with its AOF) 50–300 ms later.
#[derive(Debug, Default, Clone, Copy)]
pub struct Faults {
    pub worker_kills: usize,
    pub redis_restarts: usize,
}

impl Faults {
    /// Pause 400–900 ms (the time between two faults).
    pub async fn pause() {
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(400..900))).await;
    }

    /// The next fault: every `redis_every`-th one Redis SIGKILLed and restarted when
    /// `server` is given, the others a worker of `fleet`.
    pub async fn next(
        &mut self,
        fleet: &mut Fleet,
        server: Option<&mut RedisServer>,
        redis_every: usize,
    ) {
        let n = self.worker_kills + self.redis_restarts;
        match server {
            Some(server) if n % redis_every == redis_every - 1 => {
                tokio::task::block_in_place(|| {
                    server.kill();
                    std::thread::sleep(Duration::from_millis(rand::rng().random_range(50..300)));
                    server.restart();
                });
                self.redis_restarts += 1;
            }
            _ => {
                if let Some(i) = fleet.kill_random() {
                    self.worker_kills += 1;
                    let pause = rand::rng().random_range(100..300);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    fleet.spawn(i);
                }
            }
        }
    }

    pub fn total(&self) -> usize {
        self.worker_kills + self.redis_restarts
    }
}
