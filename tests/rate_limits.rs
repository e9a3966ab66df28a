//! Rate limits (docs/protocol.md, Rate limits) against a real Redis: the queue's limit
//! across a fleet of workers on the Redis clock, the wait a limited claim answers and how
//! few calls limited workers make, the per-key limit, a change and a removal, a Cluster.

mod support;

use std::time::Duration;

use jobqueue::queue::{NewJob, Queue, RateLimit};
use support::eventually::{Wait, eventually};
use support::rate_limits::{Claim, Fleet, command_calls};
use support::redis::{RedisCluster, RedisServer, redis_now_ms};

fn limit(text: &str) -> RateLimit {
    text.parse().unwrap()
}

async fn enqueue(queue: &Queue, n: usize, key: Option<&str>) {
    let jobs = (0..n)
        .map(|i| {
            let job = NewJob::new(format!("{} {i}", key.unwrap_or("none")));
            match key {
                Some(k) => job.rate_key(k),
                None => job,
            }
        })
        .collect();
    queue.enqueue_many(jobs).await.unwrap();
}

/// The most claims of `claims` in any window of `per` ms.
fn busiest_window(claims: &[&Claim], per: i64) -> usize {
    let mut at: Vec<i64> = claims.iter().map(|c| c.at_ms).collect();
    at.sort();
    (0..at.len())
        .map(|i| at[i..].iter().take_while(|t| **t < at[i] + per).count())
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_a_second_across_eight_workers_over_ten_seconds() {
    let server = RedisServer::start();
    let queue = server.queue("rl").await;
    enqueue(&queue, 400, None).await;
    queue
        .set_rate_limits(Some(Some(limit("10/1s"))), None)
        .await
        .unwrap();
    let mut conn = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let fleet = Fleet::start(&queue, 8, 2);
    let t0 = eventually("the first claim", async || {
        fleet.claims().iter().map(|c| c.at_ms).min()
    })
    .await;
    let end = t0 + 10_000;
    // 10 s of the Redis clock from the first claim, and the handlers of the claims made
    // by then have noted them (a claim is noted as its handler starts)
    Wait::for_("10 s of the Redis clock")
        .within(Duration::from_secs(40))
        .every(Duration::from_millis(50))
        .until_blocking(|| redis_now_ms(&mut conn) > end);
    let calls = command_calls(&mut conn, "evalsha");
    let settled = fleet.stats();
    eventually("the claims of the window noted", async || {
        let noted = fleet.claims().len() as u64;
        noted >= settled.claimed
    })
    .await;
    let claims = fleet.claims();
    let inside: Vec<&Claim> = claims.iter().filter(|c| c.at_ms < end).collect();
    fleet.stop().await;
    assert!(
        (90..=110).contains(&inside.len()),
        "10/1s over 10 s made {} claims",
        inside.len()
    );
    assert!(
        busiest_window(&inside, 1000) <= 10,
        "a window of 1 s held {} claims",
        busiest_window(&inside, 1000)
    );
    assert!(
        settled.rate_limited > 0,
        "limited workers were answered the wait: {settled:?}"
    );
    // every script call of the fleet (claims, settles, renewals) in those 10 s, per slot
    let per_slot = calls as f64 / inside.len() as f64;
    assert!(
        per_slot <= 3.0,
        "{calls} script calls for {} claims: {per_slot:.1} a slot",
        inside.len()
    );
    println!(
        "10/1s, 8 workers: {} claims in 10 s, {calls} script calls ({per_slot:.2} a slot), {} limited answers",
        inside.len(),
        settled.rate_limited
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_over_its_limit_waits_while_other_keys_flow() {
    let server = RedisServer::start();
    let queue = server.queue("rk").await;
    // the busy key's jobs come first: the others are behind them in pending
    enqueue(&queue, 15, Some("customer-42")).await;
    enqueue(&queue, 20, Some("customer-7")).await;
    enqueue(&queue, 20, None).await;
    queue
        .set_rate_limits(None, Some(Some(limit("5/1s"))))
        .await
        .unwrap();
    let fleet = Fleet::start(&queue, 3, 4);
    eventually("every job claimed", async || fleet.claims().len() == 55).await;
    let claims = fleet.claims();
    fleet.stop().await;
    let of = |key: &str| -> Vec<&Claim> {
        claims
            .iter()
            .filter(|c| c.payload.split(' ').next() == Some(key))
            .collect()
    };
    let hot = of("customer-42");
    let other = of("customer-7");
    assert_eq!(hot.len(), 15);
    assert!(
        busiest_window(&hot, 1000) <= 5,
        "customer-42 had {} claims in one second",
        busiest_window(&hot, 1000)
    );
    assert!(busiest_window(&other, 1000) <= 5);
    let first = claims.iter().map(|c| c.at_ms).min().unwrap();
    let last_hot = hot.iter().map(|c| c.at_ms).max().unwrap();
    assert!(
        last_hot - first >= 2000,
        "15 jobs at 5/1s take two windows more"
    );
    // the unkeyed jobs behind the busy key's were not held back by it
    let unkeyed = of("none");
    let last_unkeyed = unkeyed.iter().map(|c| c.at_ms).max().unwrap();
    assert!(
        last_unkeyed - first < 1000,
        "the unkeyed jobs flowed at once ({} ms after the first claim)",
        last_unkeyed - first
    );
    // a job set aside for its key is not charged an attempt
    assert!(
        claims.iter().all(|c| c.attempts == 1),
        "every job claimed on its first attempt"
    );
    let deferred: Option<u64> = redis::cmd("HGET")
        .arg(&queue.keys().stats)
        .arg("rate_deferred")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        deferred.is_some_and(|n| n > 0),
        "jobs were set aside for their key"
    );
}

#[tokio::test]
async fn a_batch_is_cut_to_the_slots_left_and_a_change_applies_at_once() {
    let server = RedisServer::start();
    let queue = server.queue("rc").await;
    enqueue(&queue, 50, None).await;
    queue
        .set_rate_limits(Some(Some(limit("2/1h"))), None)
        .await
        .unwrap();
    let first = queue.claim_batch(10, "w", None).await.unwrap();
    assert_eq!(first.leases.len(), 2, "cut to the 2 slots of the window");
    let wait = first.rate_wait.expect("no slot left: the wait is answered");
    assert!(
        wait > Duration::from_secs(3590) && wait <= Duration::from_secs(3600),
        "{wait:?}"
    );
    let limited = queue.claim_batch(10, "w", None).await.unwrap();
    assert!(limited.leases.is_empty());
    assert!(limited.rate_wait.is_some());
    assert!(!limited.more);
    // a larger limit: the 3 slots it adds are claimable now
    queue
        .set_rate_limits(Some(Some(limit("5/1h"))), None)
        .await
        .unwrap();
    let more = queue.claim_batch(10, "w", None).await.unwrap();
    assert_eq!(more.leases.len(), 3);
    assert!(more.rate_wait.is_some());
    // removed: claims are limited by nothing but n
    queue.set_rate_limits(Some(None), None).await.unwrap();
    assert_eq!(queue.rate_limits().await.unwrap().queue, None);
    let free = queue.claim_batch(10, "w", None).await.unwrap();
    assert_eq!(free.leases.len(), 10);
    assert_eq!(free.rate_wait, None);
}

#[tokio::test]
async fn without_a_limit_claim_and_ack_run_no_rate_command() {
    let server = RedisServer::start();
    let queue = server.queue("free").await;
    enqueue(&queue, 5, Some("customer-1")).await;
    let mut conn = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let claimed = queue.claim_batch(5, "w", None).await.unwrap();
    assert_eq!(claimed.leases.len(), 5);
    for lease in &claimed.leases {
        assert!(queue.ack(lease).await.unwrap());
    }
    // the limits are read with the pause flag, in the one HMGET of meta claim made before
    assert_eq!(command_calls(&mut conn, "zcount"), 0);
    assert_eq!(command_calls(&mut conn, "hexists"), 0);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*rate*").query(&mut conn).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test]
async fn limits_hold_on_a_cluster() {
    let cluster = RedisCluster::start();
    let queue = Queue::new(cluster.redis().await, "jq", "clustered").unwrap();
    enqueue(&queue, 4, Some("customer-1")).await;
    enqueue(&queue, 10, None).await;
    queue
        .set_rate_limits(Some(Some(limit("6/1h"))), Some(Some(limit("1/1h"))))
        .await
        .unwrap();
    let claimed = queue.claim_batch(10, "w", None).await.unwrap();
    assert_eq!(claimed.leases.len(), 6, "cut to the queue's 6 slots");
    assert!(claimed.rate_wait.is_some());
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        stats.delayed, 3,
        "customer-1's other jobs wait for its next slot"
    );
}

#[tokio::test]
async fn the_cli_sets_and_removes_the_limits() {
    let server = RedisServer::start();
    let queue = server.queue("cli").await;
    let jobqueue = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"))
            .args([
                "configure",
                "--redis",
                &server.url(),
                "--tag",
                "cli",
                "--create",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = jobqueue(&["--rate-limit", "3/1h", "--rate-limit-per-key", "5/1s"]);
    assert!(shown.contains("rate limit            3/1h"), "{shown}");
    assert!(shown.contains("rate limit per key    5/1s"), "{shown}");
    enqueue(&queue, 5, None).await;
    assert_eq!(
        queue.claim_batch(5, "w", None).await.unwrap().leases.len(),
        3
    );
    jobqueue(&["--rate-limit", "off"]);
    let limits = queue.rate_limits().await.unwrap();
    assert_eq!((limits.queue, limits.per_key), (None, Some(limit("5/1s"))));
    assert_eq!(
        queue.claim_batch(5, "w", None).await.unwrap().leases.len(),
        2
    );
}
