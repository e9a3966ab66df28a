//! `make bench` (section `partitions`): one logical queue over 1, 3 and 6 partitions on a
//! private 3-master Redis Cluster (slots split evenly), end to end: producers enqueue in
//! batches of 100 through `PartitionedQueue`, consumers claim up to 50 and ack them in one
//! call, until every job is acked. For each partition count: jobs/s, the Redis CPU each
//! node spent (INFO cpu, used_cpu_sys + used_cpu_user, before and after), the spread
//! (busiest node's CPU ÷ the mean; target ≤ 1.3 with ≥ 3 partitions), and a projection of
//! what a 10-node Cluster would sustain from the per-job Redis CPU.
//!
//! `cargo bench --bench partitions -- [--quick]`. Run without `--bench` (as `cargo test
//! --all-targets` does) it makes a smoke pass on a hundredth of the jobs.
//!
//! The client, the three servers and everything else share this machine's cores, so
//! jobs/s is bound by the machine, not by Redis: the per-node CPU and the spread are the
//! figures that carry over to a real Cluster.

#[path = "../tests/support/redis.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jobqueue::queue::{NewJob, PartitionedQueue, Redis};
use serde_json::json;

use common::RedisCluster;

const PRODUCERS: usize = 4;
const CONSUMERS: usize = 8;
const ENQUEUE_BATCH: usize = 100;
const CLAIM_BATCH: usize = 50;

fn scale() -> usize {
    let mut scale = 100;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--bench" if scale == 100 => scale = 1,
            "--quick" => scale = 10,
            _ => {}
        }
    }
    scale
}

/// used_cpu_sys + used_cpu_user of each node, in seconds.
fn node_cpu(cluster: &RedisCluster) -> Vec<f64> {
    cluster
        .nodes
        .iter()
        .map(|node| {
            let info: String = redis::cmd("INFO")
                .arg("cpu")
                .query(&mut node.conn())
                .expect("INFO cpu");
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            field("used_cpu_sys") + field("used_cpu_user")
        })
        .collect()
}

struct Run {
    partitions: usize,
    jobs: usize,
    secs: f64,
    /// Redis CPU seconds per node during the run.
    cpu: Vec<f64>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.jobs as f64 / self.secs
    }
    fn mean(&self) -> f64 {
        self.cpu.iter().sum::<f64>() / self.cpu.len() as f64
    }
    fn spread(&self) -> f64 {
        let max = self.cpu.iter().cloned().fold(0.0, f64::max);
        max / self.mean().max(1e-9)
    }
    /// Redis CPU µs per job, all nodes together.
    fn cpu_us_per_job(&self) -> f64 {
        self.cpu.iter().sum::<f64>() * 1e6 / self.jobs as f64
    }
}

async fn run(redis: Redis, cluster: &RedisCluster, partitions: usize, jobs: usize) -> Run {
    let tag = format!("pbench{partitions}");
    let queue = PartitionedQueue::new(redis, "jq", &tag, partitions).unwrap();
    queue.load_scripts().await.unwrap();
    let before = node_cpu(cluster);
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let (queue, next) = (queue.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let from = next.fetch_add(ENQUEUE_BATCH, Ordering::Relaxed);
                    if from >= jobs {
                        return;
                    }
                    let to = (from + ENQUEUE_BATCH).min(jobs);
                    let batch = (from..to)
                        .map(|i| {
                            NewJob::new(format!(r#"{{"to":"u{i:07}@example.com"}}"#).into_bytes())
                        })
                        .collect();
                    queue.enqueue_many(batch).await.unwrap();
                }
            })
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let (queue, acked) = (queue.clone(), acked.clone());
            tokio::spawn(async move {
                let worker = format!("bench-{c}");
                let mut consumer = queue.consumer(worker);
                while acked.load(Ordering::Relaxed) < jobs {
                    let leases = consumer
                        .next_jobs(CLAIM_BATCH, Duration::from_millis(50))
                        .await
                        .unwrap();
                    if leases.is_empty() {
                        continue;
                    }
                    let refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
                    let ok = queue.ack_many(&refs).await.unwrap();
                    acked.fetch_add(ok.iter().filter(|a| **a).count(), Ordering::Relaxed);
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    for c in consumers {
        c.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let after = node_cpu(cluster);
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.total.acked as usize, jobs, "every job acked once");
    Run {
        partitions,
        jobs,
        secs,
        cpu: before.iter().zip(&after).map(|(a, b)| b - a).collect(),
    }
}

#[tokio::main]
async fn main() {
    let scale = scale();
    let jobs = 200_000 / scale;
    let cluster = RedisCluster::start();
    let redis = cluster.redis().await;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!("partitions: {jobs} jobs per run, 3-master Cluster, {cores} cores on this machine");
    let mut runs = Vec::new();
    for partitions in [1, 3, 6] {
        runs.push(run(redis.clone(), &cluster, partitions, jobs).await);
    }
    println!();
    println!("partitions  jobs/s   Redis CPU s per node (n0 n1 n2)  spread  µs CPU/job  target");
    for r in &runs {
        let target = if r.partitions >= 3 {
            format!(
                "spread ≤ 1.3: {}",
                if r.spread() <= 1.3 { "met" } else { "MISSED" }
            )
        } else {
            "-".into()
        };
        println!(
            "{:>10}  {:>6.0}   {:>8.2} {:>8.2} {:>8.2}         {:>6.2}  {:>10.1}  {target}",
            r.partitions,
            r.rate(),
            r.cpu[0],
            r.cpu[1],
            r.cpu[2],
            r.spread(),
            r.cpu_us_per_job()
        );
    }
    // The projection: a node is one Redis core; with partitions spread evenly (≥ 10,
    // the slots split evenly) each node carries 1/10 of the jobs, so the Cluster's
    // ceiling is 10 cores ÷ the Redis CPU one job costs, divided by the spread measured.
    let six = runs.last().expect("three runs");
    let per_job = six.cpu_us_per_job() / 1e6;
    let ceiling = 10.0 / per_job / six.spread().max(1.0);
    println!();
    println!(
        "projection: a 10-node Cluster (one core per node, ≥ 10 partitions, clients and \
         network not the limit) sustains about {:.0} jobs/s end to end ({:.1} µs of Redis \
         CPU per job, measured with 6 partitions, divided by the spread {:.2})",
        ceiling,
        per_job * 1e6,
        six.spread().max(1.0)
    );
    for r in &runs {
        println!(
            "{}",
            json!({
                "bench": "partitions",
                "partitions": r.partitions,
                "jobs": r.jobs,
                "jobs_per_s": r.rate().round(),
                "redis_cpu_s_per_node": r.cpu.iter().map(|c| (c * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
                "spread": (r.spread() * 100.0).round() / 100.0,
                "redis_cpu_us_per_job": (r.cpu_us_per_job() * 10.0).round() / 10.0,
                "cores": cores,
            })
        );
    }
}
