//! Everything that fires a queue's schedules, as processes: `jobqueue worker` processes
//! (their reapers fire; [`Fleet`]) and `jobqueue operator` processes against the
//! stand-in API server (their upkeep pass fires; [`OperatorProcess`]), each operator
//! without leader election so that every replica reconciles and fires. The JobQueue's
//! `spec.schedules` is the operators' to write; all of them are stopped (SIGKILL) and
//! started again at will.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::fleet::Fleet;
use super::runs::Work;
use super::standin::{OperatorProcess, StandIn};

const CRD: &str = "/apis/jobqueue.dev/v1alpha1";
const NAMESPACE: &str = "jobs";

/// The workers' leases: their reapers come round every 1–2.5 s.
pub const WORKER_VISIBILITY: &str = "3s";

pub struct Firers {
    pub fleet: Fleet,
    pub api: StandIn,
    operators: Vec<Option<OperatorProcess>>,
    dir: PathBuf,
}

impl Firers {
    /// `workers` worker processes and `operators` operator processes on queue `tag` of
    /// the Redis at `url`, whose JobQueue (upkeep every second) holds `schedules` (the
    /// CRD's `spec.schedules`). Logs and run records go to `dir`.
    pub async fn start(
        url: &str,
        tag: &str,
        dir: &Path,
        workers: usize,
        operators: usize,
        schedules: Value,
    ) -> Firers {
        let api = StandIn::start().await;
        api.put(
            CRD,
            "jobqueues",
            json!({
                "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
                "metadata": {"name": tag, "namespace": NAMESPACE},
                "spec": {
                    "redis": {"url": url},
                    "hashTag": tag,
                    "completedRetention": "1h",
                    "reaper": {"interval": "1s"},
                    "schedules": schedules,
                }
            }),
        );
        let fleet = Fleet::configured(
            url,
            false,
            dir,
            "sched",
            Work::Sleep,
            &["--visibility", WORKER_VISIBILITY],
        )
        .tag(tag);
        let mut firers = Firers {
            fleet,
            api,
            operators: (0..operators).map(|_| None).collect(),
            dir: dir.to_path_buf(),
        };
        for _ in 0..workers {
            firers.fleet.grow();
        }
        firers.start_operators();
        firers
    }

    fn start_operators(&mut self) {
        for (i, slot) in self.operators.iter_mut().enumerate() {
            if slot.is_none() {
                let dir = self.dir.join(format!("operator-{i}"));
                std::fs::create_dir_all(&dir).unwrap();
                *slot = Some(OperatorProcess::start(
                    &self.api,
                    NAMESPACE,
                    &dir,
                    &["--no-leader-election"],
                    &[],
                ));
            }
        }
    }

    /// SIGKILL every worker and operator.
    pub fn stop_all(&mut self) {
        self.fleet.kill_all();
        for op in &mut self.operators {
            // dropped: SIGKILL and wait
            op.take();
        }
    }

    /// Start every worker and operator again.
    pub fn start_all(&mut self) {
        self.fleet.restart_stopped();
        self.start_operators();
    }

    /// The logs of every worker and operator, for a failure's message.
    pub fn logs(&self) -> String {
        let mut out = self.fleet.logs();
        for op in self.operators.iter().flatten() {
            out.push_str("\n--- operator\n");
            out.push_str(&op.logs());
        }
        out
    }
}

/// The ticks schedule `name` of queue `tag` fired jobs for, sorted, from the job hashes
/// (`jq:{tag}:job:sched:<name>:<tick>`; done jobs are kept an hour).
pub fn fired_ticks(conn: &mut redis::Connection, tag: &str, name: &str) -> Vec<i64> {
    let prefix = format!("jq:{{{tag}}}:job:sched:{name}:");
    let pattern = format!("jq:\\{{{tag}\\}}:job:sched:{name}:*");
    let keys: Vec<String> = redis::Commands::scan_match(conn, pattern)
        .unwrap()
        .map(|k: redis::RedisResult<String>| k.unwrap())
        .collect();
    let mut ticks: Vec<i64> = keys
        .iter()
        .filter_map(|k| k.strip_prefix(&prefix)?.parse().ok())
        .collect();
    ticks.sort();
    ticks
}

/// How many jobs the queue's schedules fired in all: its `scheduled` counter, which the
/// fire script counts once per job it makes (a tick fired twice counts twice).
pub fn scheduled(conn: &mut redis::Connection, tag: &str) -> u64 {
    let n: Option<u64> = redis::cmd("HGET")
        .arg(format!("jq:{{{tag}}}:stats"))
        .arg("scheduled")
        .query(conn)
        .unwrap();
    n.unwrap_or(0)
}

/// The ticks of `ticks` that do not follow the one before by exactly `interval` ms.
pub fn gaps(ticks: &[i64], interval: i64) -> Vec<(i64, i64)> {
    ticks
        .windows(2)
        .filter(|w| w[1] - w[0] != interval)
        .map(|w| (w[0], w[1]))
        .collect()
}
