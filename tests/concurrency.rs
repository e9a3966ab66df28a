//! Claimers, dying claimers and a reaper at once: every job ends done or dead, none is
//! lost, none is in two places, and the counters add up.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{NewJob, Queue, QueueSettings};
use rand::Rng;
use redis::Commands;
use support::redis::RedisServer;
use tokio_util::sync::CancellationToken;

const JOBS: usize = 3000;
const CLAIMERS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claimers_dying_claimers_and_a_reaper_lose_nothing() {
    let server = RedisServer::start();
    let queue = server.queue("conc").await;
    queue
        .configure(&QueueSettings {
            max_attempts: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new(format!("{{\"n\":{i}}}").into_bytes()).id(format!("j{i}")))
        .collect();
    queue.enqueue_many(jobs).await.unwrap();

    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let abandoned = Arc::new(Mutex::new(0usize));
    let rejected = Arc::new(Mutex::new(0u64));
    let done = CancellationToken::new();

    // The reaper, on its own connection.
    let reaper_queue = Queue::new(server.redis().await, "jq", "conc").unwrap();
    let reaper_done = done.clone();
    let reaper = tokio::spawn(async move {
        let mut passes = 0;
        while !reaper_done.is_cancelled() {
            reaper_queue.reap_expired(50, 100).await.unwrap();
            passes += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        passes
    });

    let mut claimers = vec![];
    for w in 0..CLAIMERS {
        let queue = Queue::new(server.redis().await, "jq", "conc").unwrap();
        let acked = acked.clone();
        let abandoned = abandoned.clone();
        let rejected = rejected.clone();
        let done = done.clone();
        claimers.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let mut consumer = queue
                .consumer(worker.clone())
                .visibility(Some(Duration::from_millis(500)));
            while !done.is_cancelled() {
                let leases = consumer
                    .next_jobs(8, Duration::from_millis(50))
                    .await
                    .unwrap();
                let mut to_ack = vec![];
                for lease in &leases {
                    // One claim in five "dies": it never acks, its lease runs out.
                    if rand::rng().random_bool(0.2) {
                        *abandoned.lock().unwrap() += 1;
                    } else {
                        to_ack.push(lease.lease_ref());
                    }
                }
                if !to_ack.is_empty() {
                    let flags = queue.ack_many(&to_ack).await.unwrap();
                    let mut acked = acked.lock().unwrap();
                    for (lease, ok) in to_ack.iter().zip(flags) {
                        if ok {
                            acked.push(String::from_utf8(lease.id.to_vec()).unwrap());
                        } else {
                            // Only possible when this claimer was slower than its lease.
                            *rejected.lock().unwrap() += 1;
                        }
                    }
                }
            }
        }));
    }

    // Wait for the end: nothing pending, processing or delayed.
    let watcher = Queue::new(server.redis().await, "jq", "conc").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let s = watcher.stats().await.unwrap();
        if s.pending == 0 && s.processing == 0 && s.delayed == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "queue did not drain: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done.cancel();
    for c in claimers {
        c.await.unwrap();
    }
    let passes = reaper.await.unwrap();
    assert!(passes > 0);

    let acked = acked.lock().unwrap().clone();
    let acked_set: HashSet<&String> = acked.iter().collect();
    assert_eq!(acked.len(), acked_set.len(), "no job acked twice");
    let mut conn = server.conn();
    let keys = watcher.keys();
    let dead: Vec<String> = conn.zrange(&keys.dead, 0, -1).unwrap();
    let dead_set: HashSet<&String> = dead.iter().collect();
    assert!(
        acked_set.is_disjoint(&dead_set),
        "no job both done and dead"
    );
    assert_eq!(acked.len() + dead.len(), JOBS, "every job is done or dead");
    for i in 0..JOBS {
        let id = format!("j{i}");
        let status: Option<String> = conn.hget(keys.job(&id), "status").unwrap();
        if dead_set.contains(&id) {
            assert_eq!(status.as_deref(), Some("dead"));
        } else {
            assert!(acked_set.contains(&id), "{id} lost");
            assert_eq!(status, None, "done jobs are deleted");
        }
    }
    let pending: usize = conn.llen(&keys.pending).unwrap();
    let processing: usize = conn.zcard(&keys.processing).unwrap();
    assert_eq!((pending, processing), (0, 0));

    let s = watcher.stats().await.unwrap();
    let abandoned = *abandoned.lock().unwrap() as u64;
    assert_eq!(s.enqueued, JOBS as u64);
    assert_eq!(s.acked, acked.len() as u64);
    assert_eq!(s.dead, dead.len() as u64);
    assert_eq!(s.dead_lettered, dead.len() as u64);
    assert_eq!(s.claimed, s.acked + s.reaped + s.dead_lettered, "{s:?}");
    let rejected = *rejected.lock().unwrap();
    assert_eq!(
        s.reaped + s.dead_lettered,
        abandoned + rejected,
        "every abandoned lease was reaped"
    );
    assert_eq!(s.stale, rejected);
    assert_eq!(s.histogram.total(), s.acked);
    assert!(
        s.reaped > 0 && !dead.is_empty(),
        "the run exercised both outcomes: {s:?}"
    );
}
