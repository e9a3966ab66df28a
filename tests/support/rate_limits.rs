//! Rate-limit scenarios: a fleet of in-process workers on one queue whose handler notes
//! when each job was claimed (the claimed_at of its lease token, on the Redis clock) and
//! its rate key, and the count of script calls Redis ran (`INFO commandstats`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{Queue, parse_claim_token};
use jobqueue::worker::{StatsHandle, Worker, WorkerStats};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One claimed job as the handler saw it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub id: String,
    pub payload: String,
    /// When it was claimed (ms, Redis clock), from its lease token.
    pub at_ms: i64,
    pub attempts: u32,
}

/// Workers running on one queue until [`Fleet::stop`].
pub struct Fleet {
    pub claims: Arc<Mutex<Vec<Claim>>>,
    workers: Vec<(CancellationToken, StatsHandle, JoinHandle<WorkerStats>)>,
}

impl Fleet {
    /// `workers` workers of `concurrency` each, claiming at most `concurrency` a call,
    /// whose handler notes its job and succeeds at once.
    pub fn start(queue: &Queue, workers: usize, concurrency: usize) -> Fleet {
        let claims = Arc::new(Mutex::new(Vec::new()));
        let mut running = Vec::new();
        for w in 0..workers {
            let worker = Worker::builder(queue.clone())
                .handle_signals(false)
                .worker_id(format!("rate-{w}"))
                .concurrency(concurrency)
                .max_claim(concurrency)
                .reaper(false)
                .redis_retry(Duration::from_millis(20), Duration::from_millis(200))
                .build()
                .expect("a valid worker");
            let shutdown = worker.shutdown_token();
            let stats = worker.stats();
            let seen = claims.clone();
            let task = tokio::spawn(worker.run(move |lease, _ctx| {
                let seen = seen.clone();
                async move {
                    let (at_ms, _) = parse_claim_token(lease.token.as_bytes())
                        .expect("a lease token names its claim time");
                    seen.lock().unwrap().push(Claim {
                        id: String::from_utf8_lossy(lease.id.as_bytes()).into_owned(),
                        payload: String::from_utf8_lossy(&lease.payload).into_owned(),
                        at_ms,
                        attempts: lease.attempts,
                    });
                    Ok(())
                }
            }));
            running.push((shutdown, stats, task));
        }
        Fleet {
            claims,
            workers: running,
        }
    }

    /// The claims noted so far.
    pub fn claims(&self) -> Vec<Claim> {
        self.claims.lock().unwrap().clone()
    }

    /// The workers' counters, summed.
    pub fn stats(&self) -> WorkerStats {
        let mut sum = WorkerStats::default();
        for (_, stats, _) in &self.workers {
            let s = stats.get();
            sum.claimed += s.claimed;
            sum.acked += s.acked;
            sum.rate_limited += s.rate_limited;
        }
        sum
    }

    /// Shut every worker down and wait for it.
    pub async fn stop(self) {
        for (shutdown, _, _) in &self.workers {
            shutdown.cancel();
        }
        for (_, _, task) in self.workers {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("a worker stops after shutdown")
                .expect("a worker task does not panic");
        }
    }
}

/// How many times Redis ran `command` (e.g. `evalsha`, or `zcount` inside scripts) since
/// its start or `CONFIG RESETSTAT`.
pub fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    let head = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}
