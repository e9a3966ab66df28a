//! Every script and every rule of the protocol, against a real redis-server.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use jobqueue::queue::{
    Backoff, ConnectOptions, Error, FailMode, FailOutcome, JobId, LeaseRef, NewJob, Queue,
    QueueSettings, Redis, SCRIPTS, Selection, Settle, Settled, new_token,
};
use redis::Commands;
use support::redis::{RedisServer, redis_now_ms, wait_past};

const MS: Duration = Duration::from_millis(1);

fn job(payload: &str) -> NewJob {
    NewJob::new(payload.as_bytes().to_vec())
}

async fn setup(tag: &str) -> (RedisServer, Queue, redis::Connection) {
    let server = RedisServer::start();
    let queue = server.queue(tag).await;
    let conn = server.conn();
    (server, queue, conn)
}

fn hget(conn: &mut redis::Connection, key: &str, field: &str) -> Option<String> {
    conn.hget(key, field).unwrap()
}

#[tokio::test]
async fn jobs_are_claimed_in_fifo_order() {
    let (_s, q, _c) = setup("fifo").await;
    for p in ["a", "b", "c"] {
        q.enqueue(job(p)).await.unwrap();
    }
    let mut got = vec![];
    for _ in 0..3 {
        let lease = q.claim_one("w", None).await.unwrap().unwrap();
        assert_eq!(lease.attempts, 1);
        got.push(String::from_utf8(lease.payload.to_vec()).unwrap());
    }
    assert_eq!(got, ["a", "b", "c"]);
    assert!(q.claim_one("w", None).await.unwrap().is_none());
}

#[tokio::test]
async fn batch_claim_takes_up_to_n_in_order() {
    let (_s, q, mut c) = setup("batch").await;
    let jobs = (0..5).map(|i| job(&i.to_string())).collect();
    let ids: Vec<JobId> = q
        .enqueue_many(jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    let first = q.claim(3, "w", None).await.unwrap();
    assert_eq!(
        first.iter().map(|l| l.id.clone()).collect::<Vec<_>>(),
        ids[..3]
    );
    let tokens: HashSet<&str> = first.iter().map(|l| l.token.as_str()).collect();
    assert_eq!(tokens.len(), 3, "every lease has its own token");
    let rest = q.claim(10, "w", None).await.unwrap();
    assert_eq!(rest.len(), 2);
    assert!(q.claim(10, "w", None).await.unwrap().is_empty());
    let processing: usize = c.zcard(&q.keys().processing).unwrap();
    assert_eq!(processing, 5);
    // Each lease is recorded in its hash and in the processing set.
    for lease in first.iter().chain(&rest) {
        let key = q.keys().job(lease.id.as_str().unwrap());
        assert_eq!(hget(&mut c, &key, "status").as_deref(), Some("processing"));
        assert_eq!(
            hget(&mut c, &key, "claim_token").as_deref(),
            Some(lease.token.as_str())
        );
        // claim_token carries claimed_at and the worker: <claimed_at>:<#worker>:<worker>:<token>
        let (claimed_at, worker) = jobqueue::queue::parse_claim_token(lease.token.as_bytes())
            .expect("a claim_token of the current layout");
        assert_eq!(worker, "w");
        assert!(claimed_at > 0 && claimed_at <= lease.lease_until);
        assert_eq!(
            hget(&mut c, &key, "worker"),
            None,
            "the worker is in the token"
        );
        assert_eq!(
            hget(&mut c, &key, "claimed_at"),
            None,
            "claimed_at is in the token"
        );
        let score: i64 = c.zscore(&q.keys().processing, &lease.id).unwrap();
        assert_eq!(score, lease.lease_until);
    }
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.enqueued, stats.claimed, stats.processing), (5, 5, 5));
}

#[tokio::test]
async fn default_visibility_comes_from_meta_and_can_be_overridden() {
    let (_s, q, mut c) = setup("vis").await;
    q.configure(&QueueSettings {
        visibility_timeout: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .unwrap();
    q.enqueue_many(vec![job("a"), job("b")]).await.unwrap();
    // Each claim reads Redis's clock between the readings around it.
    let before = redis_now_ms(&mut c);
    let a = q.claim_one("w", None).await.unwrap().unwrap();
    let after = redis_now_ms(&mut c);
    assert!(
        (before + 120_000..=after + 120_000).contains(&a.lease_until),
        "{}",
        a.lease_until
    );
    let before = redis_now_ms(&mut c);
    let b = q
        .claim_one("w", Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    let after = redis_now_ms(&mut c);
    assert!(
        (before + 5_000..=after + 5_000).contains(&b.lease_until),
        "{}",
        b.lease_until
    );
}

#[tokio::test]
async fn duplicate_enqueue_id_changes_nothing() {
    let (_s, q, mut c) = setup("dup").await;
    let first = q.enqueue(job("one").id("order-7")).await.unwrap();
    assert!(first.created);
    let again = q.enqueue(job("two").id("order-7")).await.unwrap();
    assert!(!again.created);
    let pending: Vec<String> = c.lrange(&q.keys().pending, 0, -1).unwrap();
    assert_eq!(pending, ["order-7"]);
    assert_eq!(
        hget(&mut c, &q.keys().job("order-7"), "payload").as_deref(),
        Some("one")
    );
    // Also while it is processing, and within one batch.
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    let batch = q
        .enqueue_many(vec![
            job("x").id("order-7"),
            job("y").id("n1"),
            job("z").id("n1"),
        ])
        .await
        .unwrap();
    assert_eq!(
        batch.iter().map(|e| e.created).collect::<Vec<_>>(),
        [false, true, false]
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("n1"), "payload").as_deref(),
        Some("y")
    );
    assert!(q.ack(&lease).await.unwrap());
    assert_eq!(q.stats().await.unwrap().enqueued, 2);
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(
        wake, 2,
        "one wake marker per job made ready; a claim that leaves pending not empty keeps them"
    );
}

#[tokio::test]
async fn payloads_round_trip_byte_exact() {
    let (_s, q, _c) = setup("bytes").await;
    let binary: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let big: Vec<u8> = (0..1024 * 1024)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let payloads = [binary, vec![], big, b"\0\r\n\xff{}".to_vec()];
    for p in &payloads {
        q.enqueue(NewJob::new(p.clone())).await.unwrap();
    }
    for p in &payloads {
        let lease = q.claim_one("w", None).await.unwrap().unwrap();
        assert_eq!(lease.payload.len(), p.len());
        assert!(lease.payload.as_ref() == p.as_slice(), "payload differs");
        assert!(q.ack(&lease).await.unwrap());
    }
}

#[tokio::test]
async fn stale_ack_extend_and_fail_are_rejected_and_counted() {
    let (_s, q, mut c) = setup("stale").await;
    q.enqueue(job("a").id("a")).await.unwrap();
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    let wrong = ("a", "00000000000000000000000000000000");
    assert!(!q.ack(wrong).await.unwrap());
    assert_eq!(q.extend(wrong, None).await.unwrap(), None);
    assert_eq!(
        q.fail(wrong, "boom", FailMode::Retry, Backoff::Policy)
            .await
            .unwrap(),
        FailOutcome::Stale
    );
    // An id with no job hash is refused too, but counted apart: a typo is not a lease
    // taken away.
    assert!(!q.ack(("nope", lease.token.as_str())).await.unwrap());
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.stale, stats.unknown), (3, 1));
    assert_eq!((stats.acked, stats.failed), (0, 0));
    let key = q.keys().job("a");
    assert_eq!(hget(&mut c, &key, "status").as_deref(), Some("processing"));
    assert_eq!(
        hget(&mut c, &key, "claim_token").as_deref(),
        Some(lease.token.as_str())
    );
    let score: i64 = c.zscore(&q.keys().processing, "a").unwrap();
    assert_eq!(score, lease.lease_until);
    assert!(q.ack(&lease).await.unwrap());
    // After the ack the token is spent: acking twice is refused. The job hash is gone
    // (no completed_retention_ms), so it counts `unknown`.
    assert!(!q.ack(&lease).await.unwrap());
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.stale, stats.unknown), (3, 2));
}

/// The race the protocol exists for: a late ack from a worker whose lease was reclaimed.
#[tokio::test]
async fn late_ack_after_reclaim_is_rejected_and_the_job_is_done_once() {
    let (_s, q, mut c) = setup("race").await;
    q.enqueue(job("work").id("j1")).await.unwrap();
    let a = q.claim_one("worker-a", Some(MS)).await.unwrap().unwrap();
    wait_past(&mut c, a.lease_until);
    let reaped = q.reap(100).await.unwrap();
    assert_eq!(
        (reaped.requeued, reaped.dead_lettered, reaped.more),
        (1, 0, false)
    );
    let b = q.claim_one("worker-b", None).await.unwrap().unwrap();
    assert_eq!(b.id, "j1");
    assert_eq!(b.attempts, 2);
    assert_ne!(a.token, b.token);
    assert!(!q.ack(&a).await.unwrap(), "A's late ack must be rejected");
    assert_eq!(q.extend(&a, None).await.unwrap(), None);
    assert_eq!(
        hget(&mut c, &q.keys().job("j1"), "status").as_deref(),
        Some("processing"),
        "A's late ack must not change B's lease"
    );
    assert!(q.ack(&b).await.unwrap(), "B's ack must be accepted");
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.acked, stats.stale, stats.reaped, stats.claimed),
        (1, 2, 1, 2)
    );
    assert_eq!((stats.pending, stats.processing), (0, 0));
    let exists: bool = c.exists(q.keys().job("j1")).unwrap();
    assert!(!exists, "done job deleted (no completed retention)");
}

#[tokio::test]
async fn an_expired_but_unreaped_lease_can_still_be_acked() {
    let (_s, q, mut c) = setup("late").await;
    q.enqueue(job("a").id("a")).await.unwrap();
    let lease = q.claim_one("w", Some(MS)).await.unwrap().unwrap();
    wait_past(&mut c, lease.lease_until);
    assert_eq!(q.stats().await.unwrap().expired, 1);
    assert!(q.ack(&lease).await.unwrap());
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.acked, stats.stale, stats.processing, stats.expired),
        (1, 0, 0, 0)
    );
    assert_eq!(q.reap(10).await.unwrap().requeued, 0);
}

#[tokio::test]
async fn extend_moves_both_the_score_and_the_hash() {
    let (_s, q, mut c) = setup("extend").await;
    q.enqueue_many(vec![job("a").id("a"), job("b").id("b")])
        .await
        .unwrap();
    let leases = q.claim(2, "w", Some(Duration::from_secs(1))).await.unwrap();
    let before = redis_now_ms(&mut c);
    let refs: Vec<_> = leases.iter().map(|l| l.lease_ref()).collect();
    let until = q
        .extend_many(&refs, Some(Duration::from_secs(600)))
        .await
        .unwrap();
    let after = redis_now_ms(&mut c);
    for (lease, until) in leases.iter().zip(&until) {
        let until = until.expect("extended");
        assert!(
            (before + 600_000..=after + 600_000).contains(&until),
            "{until} not 600 s after {before}..={after}"
        );
        let score: i64 = c.zscore(&q.keys().processing, &lease.id).unwrap();
        assert_eq!(score, until);
        let field = hget(
            &mut c,
            &q.keys().job(lease.id.as_str().unwrap()),
            "lease_until",
        )
        .unwrap();
        assert_eq!(field.parse::<i64>().unwrap(), until);
    }
    // Mixed batch: one good, one stale.
    let mixed = q
        .extend_many(&[leases[0].lease_ref(), ("b", "bad").into()], None)
        .await
        .unwrap();
    assert!(mixed[0].is_some() && mixed[1].is_none());
}

#[tokio::test]
async fn fail_with_backoff_delays_and_a_later_claim_promotes() {
    let (_s, q, mut c) = setup("backoff").await;
    q.enqueue(job("a").id("a")).await.unwrap();
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    let before = redis_now_ms(&mut c);
    let outcome = q
        .fail(
            &lease,
            "smtp 451",
            FailMode::Retry,
            Backoff::After(Duration::from_millis(30)),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailOutcome::Delayed);
    let key = q.keys().job("a");
    assert_eq!(hget(&mut c, &key, "status").as_deref(), Some("delayed"));
    assert_eq!(
        hget(&mut c, &key, "last_error").as_deref(),
        Some("smtp 451")
    );
    assert_eq!(hget(&mut c, &key, "lease_until"), None, "the lease ended");
    assert_eq!(
        hget(&mut c, &key, "claim_token").as_deref(),
        Some(lease.token.as_str()),
        "the last lease's token stays"
    );
    let run_at: i64 = c.zscore(&q.keys().delayed, "a").unwrap();
    assert!(
        run_at >= before + 30 && run_at <= before + 1000,
        "{run_at} vs {before}"
    );
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.delayed, stats.failed, stats.retried, stats.processing),
        (1, 1, 1, 0)
    );
    // Not due yet: nothing to claim.
    if redis_now_ms(&mut c) < run_at {
        assert!(q.claim_one("w", None).await.unwrap().is_none());
    }
    wait_past(&mut c, run_at);
    let again = q
        .claim_one("w", None)
        .await
        .unwrap()
        .expect("promoted by claim");
    assert_eq!((again.id.as_str(), again.attempts), (Some("a"), 2));
    let delayed: usize = c.zcard(&q.keys().delayed).unwrap();
    assert_eq!(delayed, 0);
}

#[tokio::test]
async fn fail_with_the_meta_policy_uses_initial_times_multiplier() {
    let (_s, q, mut c) = setup("policy").await;
    q.configure(&QueueSettings {
        backoff_initial: Duration::from_secs(10),
        backoff_multiplier: 3.0,
        backoff_max: Duration::from_secs(25),
        max_attempts: 10,
        ..Default::default()
    })
    .await
    .unwrap();
    q.enqueue(job("a").id("a")).await.unwrap();
    let expected = [10_000, 25_000]; // 10s, then 30s capped at 25s
    for want in expected {
        // Make it claimable again regardless of the delay.
        let _: () = redis::cmd("ZADD")
            .arg(&q.keys().delayed)
            .arg(0)
            .arg("a")
            .query(&mut c)
            .unwrap();
        let lease = q.claim_one("w", None).await.unwrap().unwrap();
        // The script reads Redis's clock between these two readings.
        let before = redis_now_ms(&mut c);
        assert_eq!(
            q.fail(&lease, "e", FailMode::Retry, Backoff::Policy)
                .await
                .unwrap(),
            FailOutcome::Delayed
        );
        let after = redis_now_ms(&mut c);
        let run_at: i64 = c.zscore(&q.keys().delayed, "a").unwrap();
        assert!(
            (before + want..=after + want).contains(&run_at),
            "want {want} ms after the fail ({before}..={after}), got {run_at}"
        );
    }
}

#[tokio::test]
async fn immediate_retry_goes_to_the_back_of_the_line() {
    let (_s, q, mut c) = setup("retry0").await;
    q.enqueue_many(vec![job("a").id("a"), job("b").id("b")])
        .await
        .unwrap();
    let a = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(
        q.fail(&a, "e", FailMode::Retry, Backoff::Immediate)
            .await
            .unwrap(),
        FailOutcome::Pending
    );
    let mut order = vec![];
    for _ in 0..2 {
        order.push(q.claim_one("w", None).await.unwrap().unwrap().id);
    }
    assert_eq!(order, ["b", "a"]);
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(
        wake, 3,
        "no claim found pending short yet: the markers stay"
    );
    assert!(q.claim_one("w", None).await.unwrap().is_none());
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(wake, 0, "the claim that found pending empty emptied wake");
}

#[tokio::test]
async fn max_attempts_sends_failures_and_expiries_to_dead() {
    let (_s, q, mut c) = setup("maxatt").await;
    q.configure(&QueueSettings {
        max_attempts: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    q.enqueue_many(vec![job("a").id("a"), job("b").id("b")])
        .await
        .unwrap();
    // a: fails twice.
    let a1 = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(
        q.fail(&a1, "first", FailMode::Retry, Backoff::Immediate)
            .await
            .unwrap(),
        FailOutcome::Pending
    );
    // b is next, a behind it.
    let b1 = q.claim_one("w", Some(MS)).await.unwrap().unwrap();
    assert_eq!(b1.id, "b");
    let a2 = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!((a2.id.as_str(), a2.attempts), (Some("a"), 2));
    assert_eq!(
        q.fail(&a2, "second", FailMode::Retry, Backoff::Immediate)
            .await
            .unwrap(),
        FailOutcome::Dead
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("a"), "last_error").as_deref(),
        Some("second")
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("a"), "status").as_deref(),
        Some("dead")
    );
    // b: its lease expires twice.
    wait_past(&mut c, b1.lease_until);
    assert_eq!(q.reap(10).await.unwrap().requeued, 1);
    let b2 = q.claim_one("w", Some(MS)).await.unwrap().unwrap();
    wait_past(&mut c, b2.lease_until);
    let r = q.reap(10).await.unwrap();
    assert_eq!((r.requeued, r.dead_lettered), (0, 1));
    assert_eq!(
        hget(&mut c, &q.keys().job("b"), "last_error").as_deref(),
        Some("lease expired")
    );
    let dead: Vec<String> = c.zrange(&q.keys().dead, 0, -1).unwrap();
    assert_eq!(dead, ["a", "b"]);
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.dead, s.dead_lettered, s.failed, s.retried, s.reaped),
        (2, 2, 2, 1, 1)
    );
    // mode dead skips the remaining attempts.
    q.enqueue(job("c").id("c")).await.unwrap();
    let c1 = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(
        q.fail(&c1, "bad input", FailMode::Dead, Backoff::Policy)
            .await
            .unwrap(),
        FailOutcome::Dead
    );
    assert_eq!(q.stats().await.unwrap().dead, 3);
}

#[tokio::test]
async fn reaped_jobs_are_served_before_older_pending_ones() {
    let (_s, q, mut c) = setup("reapfirst").await;
    q.enqueue(job("x").id("old")).await.unwrap();
    let lease = q.claim_one("w", Some(MS)).await.unwrap().unwrap();
    q.enqueue_many(vec![job("y").id("p1"), job("z").id("p2")])
        .await
        .unwrap();
    wait_past(&mut c, lease.lease_until);
    assert_eq!(q.reap(10).await.unwrap().requeued, 1);
    let next = q.claim(3, "w", None).await.unwrap();
    assert_eq!(
        next.iter().map(|l| l.id.clone()).collect::<Vec<_>>(),
        ["old", "p1", "p2"]
    );
}

#[tokio::test]
async fn reap_respects_its_batch_and_reports_more() {
    let (_s, q, mut c) = setup("reapbatch").await;
    let jobs = (0..5).map(|i| job("p").id(format!("j{i}"))).collect();
    q.enqueue_many(jobs).await.unwrap();
    let leases = q.claim(5, "w", Some(MS)).await.unwrap();
    wait_past(&mut c, leases.iter().map(|l| l.lease_until).max().unwrap());
    let mut seen = vec![];
    for (want, more) in [(2, true), (2, true), (1, false)] {
        let r = q.reap(2).await.unwrap();
        assert_eq!((r.requeued, r.more), (want, more));
        seen.push(r.requeued);
    }
    assert_eq!(q.reap(2).await.unwrap(), Default::default());
    let s = q.stats().await.unwrap();
    assert_eq!((s.pending, s.processing, s.reaped), (5, 0, 5));
    // Reaped leases lost their tokens: the old holders are stale.
    assert!(!q.ack(&leases[0]).await.unwrap());
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(
        wake, 10,
        "5 requeued, and the 5 enqueue markers (the claim took exactly what pending held)"
    );
}

#[tokio::test]
async fn a_lease_extended_after_expiry_is_not_reaped() {
    let (_s, q, mut c) = setup("rescore").await;
    q.enqueue(job("a").id("a")).await.unwrap();
    let lease = q.claim_one("w", Some(MS)).await.unwrap().unwrap();
    wait_past(&mut c, lease.lease_until);
    // The hash says the lease runs on, the score says expired: the hash wins.
    let until = redis_now_ms(&mut c) + 60_000;
    let _: () = c.hset(q.keys().job("a"), "lease_until", until).unwrap();
    let r = q.reap(10).await.unwrap();
    assert_eq!((r.requeued, r.more), (0, false));
    let score: i64 = c.zscore(&q.keys().processing, "a").unwrap();
    assert_eq!(score, until, "re-scored from the hash");
    assert!(q.ack(&lease).await.unwrap());
}

#[tokio::test]
async fn two_reapers_at_once_never_requeue_a_job_twice() {
    let (server, q, mut c) = setup("tworeapers").await;
    let n = 600;
    let jobs = (0..n).map(|i| job("p").id(format!("j{i}"))).collect();
    q.enqueue_many(jobs).await.unwrap();
    let mut last = 0;
    for _ in 0..(n / 100) {
        let leases = q.claim(100, "w", Some(MS)).await.unwrap();
        last = last.max(leases.iter().map(|l| l.lease_until).max().unwrap());
    }
    wait_past(&mut c, last);
    // Two reapers, each on its own connection.
    let q2 = Queue::new(server.redis().await, "jq", "tworeapers").unwrap();
    let reaper = |q: Queue| {
        tokio::spawn(async move {
            let mut total = 0;
            loop {
                let r = q.reap(7).await.unwrap();
                total += r.requeued;
                if !r.more {
                    break total;
                }
            }
        })
    };
    let (a, b) = (reaper(q.clone()), reaper(q2));
    let total = a.await.unwrap() + b.await.unwrap();
    assert_eq!(total, n);
    let pending: Vec<String> = c.lrange(&q.keys().pending, 0, -1).unwrap();
    let distinct: HashSet<&String> = pending.iter().collect();
    assert_eq!((pending.len(), distinct.len()), (n as usize, n as usize));
    assert_eq!(q.stats().await.unwrap().reaped, n);
}

#[tokio::test]
async fn dead_letters_are_trimmed_by_length_then_by_age() {
    let (_s, q, mut c) = setup("trim").await;
    q.configure(&QueueSettings {
        dead_max_len: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    let ids: Vec<String> = (0..5).map(|i| format!("d{i}")).collect();
    for id in &ids {
        q.enqueue(job("p").id(id.clone())).await.unwrap();
        let lease = q.claim_one("w", None).await.unwrap().unwrap();
        assert_eq!(
            q.fail(&lease, "x", FailMode::Dead, Backoff::Policy)
                .await
                .unwrap(),
            FailOutcome::Dead
        );
        // Distinct died_at for a well-defined "oldest".
        support::redis::next_ms(&mut c);
    }
    assert_eq!(q.stats().await.unwrap().dead, 5, "only reap trims");
    q.reap(10).await.unwrap();
    let dead: Vec<String> = c.zrange(&q.keys().dead, 0, -1).unwrap();
    assert_eq!(dead, ["d2", "d3", "d4"], "the oldest went first");
    for gone in ["d0", "d1"] {
        let exists: bool = c.exists(q.keys().job(gone)).unwrap();
        assert!(!exists, "trimmed job's hash is deleted");
    }
    assert_eq!(q.stats().await.unwrap().dead_trimmed, 2);
    // Now by age: 1 ms retention, no length limit.
    q.configure(&QueueSettings {
        dead_max_len: 0,
        dead_retention: MS,
        ..Default::default()
    })
    .await
    .unwrap();
    let newest: i64 = c.zscore(&q.keys().dead, "d4").unwrap();
    wait_past(&mut c, newest + 1);
    q.reap(10).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.dead, s.dead_trimmed), (0, 5));
}

#[tokio::test]
async fn redrive_and_purge_act_on_dead_jobs_only() {
    let (_s, q, mut c) = setup("redrive").await;
    for i in 0..4 {
        q.enqueue(job("p").id(format!("d{i}"))).await.unwrap();
        let lease = q.claim_one("w", None).await.unwrap().unwrap();
        q.fail(&lease, &format!("err {i}"), FailMode::Dead, Backoff::Policy)
            .await
            .unwrap();
        support::redis::next_ms(&mut c);
    }
    q.enqueue(job("p").id("alive")).await.unwrap();
    let _: () = c.del(&q.keys().wake).unwrap();
    // By id: one dead, one alive (ignored), one unknown (ignored).
    let moved = q
        .redrive(&Selection::Ids(vec![
            "d1".into(),
            "alive".into(),
            "ghost".into(),
        ]))
        .await
        .unwrap();
    assert_eq!(moved, 1);
    let key = q.keys().job("d1");
    assert_eq!(hget(&mut c, &key, "status").as_deref(), Some("pending"));
    assert_eq!(hget(&mut c, &key, "attempts").as_deref(), Some("0"));
    assert_eq!(hget(&mut c, &key, "last_error").as_deref(), Some("err 1"));
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(wake, 1);
    // Oldest: d0 then d2.
    assert_eq!(q.redrive(&Selection::Oldest(1)).await.unwrap(), 1);
    let pending: Vec<String> = c.lrange(&q.keys().pending, 0, -1).unwrap();
    assert_eq!(pending, ["d0", "d1", "alive"]);
    let again = q.claim(3, "w", None).await.unwrap();
    assert_eq!(again[1].attempts, 1, "attempts restart after a redrive");
    // Purge by id and oldest.
    assert_eq!(
        q.purge(&Selection::Ids(vec!["d3".into(), "alive".into()]))
            .await
            .unwrap(),
        1
    );
    let exists: bool = c.exists(q.keys().job("d3")).unwrap();
    assert!(!exists);
    assert!(
        c.exists::<_, bool>(q.keys().job("alive")).unwrap(),
        "a live job is never purged"
    );
    assert_eq!(q.purge(&Selection::Oldest(10)).await.unwrap(), 1);
    let s = q.stats().await.unwrap();
    assert_eq!((s.dead, s.redriven, s.purged), (0, 2, 2));
}

#[tokio::test]
async fn dead_entries_whose_hash_is_gone_are_orphans() {
    let (_s, q, mut c) = setup("deadorphan").await;
    q.enqueue(job("p").id("d")).await.unwrap();
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    q.fail(&lease, "x", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    let _: () = c.del(q.keys().job("d")).unwrap();
    assert_eq!(q.redrive(&Selection::Oldest(5)).await.unwrap(), 0);
    let s = q.stats().await.unwrap();
    assert_eq!((s.dead, s.orphans, s.redriven), (0, 1, 0));
}

#[tokio::test]
async fn an_id_whose_hash_is_gone_is_skipped() {
    let (_s, q, mut c) = setup("orphan").await;
    q.enqueue_many(vec![job("a").id("a"), job("b").id("b"), job("c").id("c")])
        .await
        .unwrap();
    let _: () = c.del(q.keys().job("a")).unwrap();
    let _: () = c.hset(q.keys().job("b"), "status", "done").unwrap();
    let leases = q.claim(1, "w", None).await.unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].id, "c", "orphans do not use a slot");
    assert_eq!(q.stats().await.unwrap().orphans, 2);
    // A processing entry whose hash is gone is removed by reap.
    let _: () = c.del(q.keys().job("c")).unwrap();
    let _: () = c.zadd(&q.keys().processing, "c", 0).unwrap();
    let r = q.reap(10).await.unwrap();
    assert_eq!((r.requeued, r.more), (0, false));
    let s = q.stats().await.unwrap();
    assert_eq!((s.processing, s.orphans), (0, 3));
}

#[tokio::test]
async fn a_wrong_typed_key_fails_naming_the_key_and_changes_nothing() {
    let (_s, q, mut c) = setup("types").await;
    q.enqueue(job("a").id("a")).await.unwrap();
    let _: () = c.del(&q.keys().pending).unwrap();
    let _: () = c.set(&q.keys().pending, "oops").unwrap();
    let before: Vec<String> = c.keys("jq:*").unwrap();
    let err = q.enqueue(job("b").id("b")).await.unwrap_err();
    match &err {
        Error::WrongType { key, .. } => assert_eq!(key, &q.keys().pending),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(err.to_string().contains("jq:{types}:pending"), "{err}");
    let after: Vec<String> = c.keys("jq:*").unwrap();
    assert_eq!(before.len(), after.len(), "nothing written");
    assert!(!c.exists::<_, bool>(q.keys().job("b")).unwrap());
    let err = q.claim(1, "w", None).await.unwrap_err();
    assert!(err.to_string().contains("jq:{types}:pending"), "{err}");
    let err = q.check_key_types().await.unwrap_err();
    assert!(err.to_string().contains("jq:{types}:pending"), "{err}");
    // A job key of the wrong type.
    let _: () = c.del(&q.keys().pending).unwrap();
    let _: () = c.set(q.keys().job("x"), "not a hash").unwrap();
    let err = q.ack(("x", "t")).await.unwrap_err();
    assert!(err.to_string().contains("jq:{types}:job:x"), "{err}");
    // The stats hash of the wrong type.
    let _: () = c.del(&q.keys().stats).unwrap();
    let _: () = c.rpush(&q.keys().stats, "x").unwrap();
    let err = q.stats().await.unwrap_err();
    assert!(err.to_string().contains("jq:{types}:stats"), "{err}");
}

#[tokio::test]
async fn malformed_arguments_are_named_and_change_nothing() {
    let (_s, q, mut c) = setup("args").await;
    q.load_scripts().await.unwrap();
    let k = q.keys();
    let keys7 = k.queue_keys();
    let eval =
        |c: &mut redis::Connection, sha: &str, extra_keys: &[&str], args: &[&str]| -> String {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha)
                .arg(7 + extra_keys.len())
                .arg(&keys7[..])
                .arg(extra_keys)
                .arg(&k.job_prefix)
                .arg(args);
            match cmd.query::<redis::Value>(c) {
                Ok(v) => panic!("accepted {args:?}: {v:?}"),
                Err(e) => e.to_string(),
            }
        };
    const CLAIM_KEYS: &[&str] = &["jq:{args}:orphans", "jq:{args}:claimreq:r"];
    let cases: &[(&str, &[&str], &[&str], &str)] = &[
        (&SCRIPTS.claim.sha, CLAIM_KEYS, &["0", "w", "0", "r"], "n"),
        (
            &SCRIPTS.claim.sha,
            CLAIM_KEYS,
            &["1001", "w", "0", "r"],
            "n",
        ),
        (
            &SCRIPTS.claim.sha,
            CLAIM_KEYS,
            &["1.5", "w", "0", "r", "t"],
            "n",
        ),
        (
            &SCRIPTS.claim.sha,
            CLAIM_KEYS,
            &["2", "w", "0", "r", "t"],
            "token",
        ),
        // the request id before the tokens is not optional
        (
            &SCRIPTS.claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "t"],
            "request id",
        ),
        (
            &SCRIPTS.claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "", "t"],
            "request",
        ),
        (
            &SCRIPTS.claim.sha,
            &["jq:{args}:orphans"],
            &["1", "w", "0", "r", "t"],
            "keys",
        ),
        (
            &SCRIPTS.claim.sha,
            CLAIM_KEYS,
            &["1", "w", "-1", "r", "t"],
            "visibility",
        ),
        (
            &SCRIPTS.enqueue.sha,
            &["jq:{args}:job:a"],
            &["1", "a", "p", "1e3"],
            "delay_ms",
        ),
        (
            &SCRIPTS.enqueue.sha,
            &["jq:{args}:job:a"],
            &["1", "a", "p"],
            "n",
        ),
        (
            &SCRIPTS.ack.sha,
            &["jq:{args}:job:a"],
            &["x", "a", "t"],
            "n",
        ),
        (
            &SCRIPTS.extend.sha,
            &["jq:{args}:job:a"],
            &["-5", "1", "a", "t"],
            "ms",
        ),
        (
            &SCRIPTS.fail.sha,
            &["jq:{args}:job:a"],
            &["a", "t", "e", "maybe", "-1"],
            "mode",
        ),
        (
            &SCRIPTS.fail.sha,
            &["jq:{args}:job:a"],
            &["a", "t", "e", "retry", "-2"],
            "backoff",
        ),
        (&SCRIPTS.reap.sha, &[], &["0"], "batch"),
        // settle_claim: n, worker, visibility, request, acks, fails, then acks, fails
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["0", "w", "0", "r", "0", "0"],
            "n",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "x", "r", "0", "0"],
            "visibility",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "", "0", "0"],
            "request",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "r", "one", "0"],
            "acks",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "r", "0", "-1"],
            "fails",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "r", "600", "401"],
            "fails",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "r", "1", "0", "a"],
            "arguments",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "r", "0", "1", "a", "tok", "e", "maybe", "-1"],
            "mode",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            CLAIM_KEYS,
            &["1", "w", "0", "r", "0", "1", "a", "tok", "e", "dead", "1.5"],
            "backoff",
        ),
        (
            &SCRIPTS.settle_claim.sha,
            &["jq:{args}:orphans"],
            &["1", "w", "0", "r", "0", "0"],
            "keys",
        ),
        (&SCRIPTS.redrive.sha, &[], &["sideways", "1"], "mode"),
        (&SCRIPTS.purge.sha, &[], &["oldest", "abc"], "n"),
    ];
    for (sha, extra, args, name) in cases {
        let msg = eval(&mut c, sha, extra, args);
        assert!(msg.contains(name), "{args:?}: {msg:?} should name {name}");
    }
    let keys: Vec<String> = c.keys("jq:*").unwrap();
    assert!(keys.is_empty(), "no key written: {keys:?}");
}

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let (_s, q, mut c) = setup("noscript").await;
    q.enqueue(job("a")).await.unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    q.enqueue(job("b")).await.unwrap();
    let leases = q.claim(2, "w", None).await.unwrap();
    assert_eq!(leases.len(), 2);
}

#[tokio::test]
async fn acks_fill_the_histogram_and_retention_keeps_a_dedup_window() {
    let (_s, q, mut c) = setup("hist").await;
    q.configure(&QueueSettings {
        completed_retention: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    q.enqueue(job("a").id("a")).await.unwrap();
    let mut lease = q.claim_one("w", None).await.unwrap().unwrap();
    // Make the processing time 100 ms on the Redis clock: bucket floor(log2(100)) = 6.
    // claimed_at is the number claim_token begins with.
    let claimed_at = redis_now_ms(&mut c) - 100;
    let (_, rest) = lease.token.split_once(':').unwrap();
    lease.token = format!("{claimed_at}:{rest}");
    let _: () = c
        .hset(q.keys().job("a"), "claim_token", &lease.token)
        .unwrap();
    assert!(q.ack(&lease).await.unwrap());
    let key = q.keys().job("a");
    assert_eq!(hget(&mut c, &key, "status").as_deref(), Some("done"));
    let ttl: i64 = c.pttl(&key).unwrap();
    assert!(ttl > 3_500_000 && ttl <= 3_600_000, "{ttl}");
    assert_eq!(hget(&mut c, &key, "lease_until"), None);
    assert_eq!(
        hget(&mut c, &key, "claim_token").as_deref(),
        Some(lease.token.as_str())
    );
    let info = q.job("a").await.unwrap().unwrap();
    assert_eq!(
        (info.worker.as_deref(), info.claimed_at),
        (Some("w"), Some(claimed_at))
    );
    let s = q.stats().await.unwrap();
    assert!(
        s.histogram.buckets.get(&6).copied() == Some(1)
            || s.histogram.buckets.get(&7).copied() == Some(1),
        "{:?}",
        s.histogram
    );
    assert!(
        !q.enqueue(job("again").id("a")).await.unwrap().created,
        "done job still dedups"
    );
}

/// A delayed job waits; it pushes one wake marker when it becomes the earliest delayed
/// job (a waiting worker re-reads the due time), none when one already runs before it.
#[tokio::test]
async fn delayed_enqueue_waits_and_wakes_only_when_it_runs_first() {
    let (_s, q, mut c) = setup("delay").await;
    let now = redis_now_ms(&mut c);
    q.enqueue(job("a").id("a").delay(Duration::from_millis(50)))
        .await
        .unwrap();
    assert_eq!(
        hget(&mut c, &q.keys().job("a"), "status").as_deref(),
        Some("delayed")
    );
    let run_at: i64 = c.zscore(&q.keys().delayed, "a").unwrap();
    assert!(run_at >= now + 50);
    assert_eq!(c.llen::<_, usize>(&q.keys().wake).unwrap(), 1);
    q.enqueue(job("b").id("b").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        c.llen::<_, usize>(&q.keys().wake).unwrap(),
        1,
        "b runs after a"
    );
    wait_past(&mut c, run_at);
    assert_eq!(q.claim_one("w", None).await.unwrap().unwrap().id, "a");
}

#[tokio::test]
async fn next_job_waits_for_a_job_and_gives_up_at_its_timeout() {
    let (_s, q, _c) = setup("next").await;
    let mut consumer = q.consumer("w1");
    assert!(
        consumer
            .next_job(Duration::from_millis(100))
            .await
            .unwrap()
            .is_none()
    );
    let waiter = tokio::spawn(async move { consumer.next_job(Duration::from_secs(20)).await });
    // The shared connection stays usable while the consumer blocks on its own.
    let s = q.stats().await.unwrap();
    assert_eq!(s.pending, 0);
    q.enqueue(job("hello").id("h")).await.unwrap();
    let lease = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("woken by the enqueue");
    assert_eq!(lease.id, "h");
}

#[tokio::test]
async fn connection_failures_are_clear_and_hide_passwords() {
    let port = 1; // nothing listens there, and no test server can take it
    let err = Redis::connect(&ConnectOptions::new(format!(
        "redis://:hunter2@127.0.0.1:{port}"
    )))
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(
        msg.contains(&format!("127.0.0.1:{port}")) && !msg.contains("hunter2"),
        "{msg}"
    );
    assert!(err.is_transient());

    let err = Redis::connect(&ConnectOptions::new("http://127.0.0.1:1"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidUrl { .. }), "{err:?}");

    let server = RedisServer::start_with(&["--requirepass", "right-one"]);
    let url = format!("redis://:wrong-one@127.0.0.1:{}", server.port);
    let err = Redis::connect(&ConnectOptions::new(url)).await.unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(!err.to_string().contains("wrong-one"), "{err}");
    let ok =
        Redis::connect(&ConnectOptions::new(server.url()).password(Some("right-one".into()))).await;
    assert!(ok.is_ok());
}

// settle_claim: the leases a worker finished and its next claim in one call ----------

fn acked(lease: &jobqueue::queue::Lease) -> Settle<'_> {
    Settle::Ack(lease.lease_ref())
}

#[tokio::test]
async fn settle_claim_acks_and_claims_in_one_call() {
    let (_s, q, mut c) = setup("sc").await;
    for id in ["a", "b", "c"] {
        q.enqueue(job(id).id(id)).await.unwrap();
    }
    let a = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(a.id, "a");
    let r = q
        .settle_claim(&new_token(), &[acked(&a)], 2, "w", None)
        .await
        .unwrap();
    assert_eq!(r.settled, [Settled::Acked]);
    let ids: Vec<_> = r.claimed.leases.iter().map(|l| l.id.clone()).collect();
    assert_eq!(ids, ["b", "c"]);
    assert!(!r.claimed.more);
    assert!(
        !c.exists::<_, bool>(q.keys().job("a")).unwrap(),
        "acked: deleted"
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("b"), "status").as_deref(),
        Some("processing")
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.acked, s.claimed, s.processing, s.pending), (1, 3, 2, 0));
    assert_eq!(
        s.histogram.total(),
        1,
        "the ack's processing time is counted"
    );
}

#[tokio::test]
async fn settle_claim_counts_a_stale_ack_and_still_claims() {
    let (_s, q, _c) = setup("scstale").await;
    for id in ["a", "b"] {
        q.enqueue(job(id).id(id)).await.unwrap();
    }
    let a = q.claim_one("w", None).await.unwrap().unwrap();
    let stale = [
        Settle::Ack(LeaseRef {
            id: b"a",
            token: "not-the-token",
            ..Default::default()
        }),
        Settle::Ack(LeaseRef {
            id: b"nobody",
            token: "t",
            ..Default::default()
        }),
    ];
    let r = q
        .settle_claim(&new_token(), &stale, 1, "w", None)
        .await
        .unwrap();
    assert_eq!(r.settled, [Settled::Stale, Settled::Stale]);
    assert_eq!(
        r.claimed.leases.len(),
        1,
        "a stale ack never blocks the claim"
    );
    assert_eq!(r.claimed.leases[0].id, "b");
    let s = q.stats().await.unwrap();
    assert_eq!((s.stale, s.unknown, s.acked, s.claimed), (1, 1, 0, 2));
    // The real holder still holds a.
    assert!(q.ack(&a).await.unwrap());
}

#[tokio::test]
async fn settle_claim_fails_in_every_mode() {
    let (_s, q, mut c) = setup("scfail").await;
    q.configure(&QueueSettings {
        max_attempts: 5,
        ..QueueSettings::default()
    })
    .await
    .unwrap();
    for id in ["a", "b", "c", "d", "e"] {
        q.enqueue(job(id).id(id)).await.unwrap();
    }
    let held = q.claim(4, "w", None).await.unwrap();
    let ids: Vec<_> = held.iter().map(|l| l.id.clone()).collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    let settles = [
        Settle::Fail {
            lease: held[0].lease_ref(),
            error: "again",
            mode: FailMode::Retry,
            backoff: Backoff::Immediate,
        },
        Settle::Fail {
            lease: held[1].lease_ref(),
            error: "later",
            mode: FailMode::Retry,
            backoff: Backoff::After(Duration::from_secs(60)),
        },
        Settle::Fail {
            lease: held[2].lease_ref(),
            error: "never",
            mode: FailMode::Dead,
            backoff: Backoff::Policy,
        },
        Settle::Release(held[3].lease_ref()),
    ];
    let _: () = c.del(&q.keys().wake).unwrap();
    let r = q
        .settle_claim(&new_token(), &settles, 1, "w", None)
        .await
        .unwrap();
    assert_eq!(
        r.settled,
        [
            Settled::Moved(FailOutcome::Pending),
            Settled::Moved(FailOutcome::Delayed),
            Settled::Moved(FailOutcome::Dead),
            Settled::Moved(FailOutcome::Pending),
        ]
    );
    // The claim ran before the failed jobs went back: it took e.
    assert_eq!(r.claimed.leases.len(), 1);
    assert_eq!(r.claimed.leases[0].id, "e");
    // Released d is at the front, retried a at the back.
    assert_eq!(q.pending_ids(10).await.unwrap(), ["d", "a"]);
    assert_eq!(
        hget(&mut c, &q.keys().job("d"), "attempts").as_deref(),
        Some("0")
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("a"), "last_error").as_deref(),
        Some("again")
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("b"), "status").as_deref(),
        Some("delayed")
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("c"), "status").as_deref(),
        Some("dead")
    );
    for id in ["a", "b", "c", "d"] {
        assert_eq!(hget(&mut c, &q.keys().job(id), "lease_until"), None);
    }
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.failed, s.retried, s.dead_lettered, s.released),
        (3, 2, 1, 1)
    );
    assert_eq!((s.processing, s.delayed, s.dead, s.pending), (1, 1, 1, 2));
    // a marker per job made ready (d, a) and one for the earliest delayed job (b)
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(wake, 3);
    // The same lease settled again is stale, for a fail as for an ack.
    let again = [settles[0]];
    let r = q
        .settle_claim(&new_token(), &again, 1, "w", None)
        .await
        .unwrap();
    assert_eq!(r.settled, [Settled::Stale]);
    assert_eq!(q.stats().await.unwrap().stale, 1);
}

#[tokio::test]
async fn settle_claim_with_nothing_to_settle_is_a_claim() {
    let (_s, q, mut c) = setup("scempty").await;
    for id in ["a", "b"] {
        q.enqueue(job(id).id(id)).await.unwrap();
    }
    let request = new_token();
    let r = q
        .settle_claim(&request, &[], 5, "w", Some(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(r.settled.is_empty());
    let ids: Vec<_> = r.claimed.leases.iter().map(|l| l.id.clone()).collect();
    assert_eq!(ids, ["a", "b"]);
    let s = q.stats().await.unwrap();
    assert_eq!((s.claimed, s.processing, s.acked, s.stale), (2, 2, 0, 0));
    let ttl: i64 = c.pttl(q.keys().claim_request(&request)).unwrap();
    assert!(
        ttl > 29_000 && ttl <= 30_000,
        "the record lasts the visibility: {ttl}"
    );
    // Nothing ready and nothing to settle: no record.
    let request = new_token();
    let r = q.settle_claim(&request, &[], 1, "w", None).await.unwrap();
    assert!(r.claimed.leases.is_empty() && !r.claimed.more);
    assert!(
        !c.exists::<_, bool>(q.keys().claim_request(&request))
            .unwrap()
    );
}

#[tokio::test]
async fn a_resent_settle_claim_settles_once_and_answers_the_same() {
    let (_s, q, _c) = setup("screplay").await;
    for id in ["a", "b", "c"] {
        q.enqueue(job(id).id(id)).await.unwrap();
    }
    let held = q.claim(2, "w", None).await.unwrap();
    let settles = [
        acked(&held[0]),
        Settle::Fail {
            lease: held[1].lease_ref(),
            error: "e",
            mode: FailMode::Retry,
            backoff: Backoff::Immediate,
        },
    ];
    let request = new_token();
    let first = q
        .settle_claim(&request, &settles, 1, "w", None)
        .await
        .unwrap();
    // The reply was lost: the caller sends the same call again.
    let again = q
        .settle_claim(&request, &settles, 1, "w", None)
        .await
        .unwrap();
    assert_eq!(
        first.settled,
        [Settled::Acked, Settled::Moved(FailOutcome::Pending)]
    );
    assert_eq!(
        again.settled, first.settled,
        "the recorded answers, not stale"
    );
    assert_eq!(again.claimed.leases, first.claimed.leases);
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.acked, s.failed, s.retried, s.claimed, s.replayed, s.stale),
        (1, 1, 1, 3, 1, 0),
        "applied once; the resend counted as replayed"
    );
    assert_eq!(q.pending_ids(10).await.unwrap(), ["b"], "b went back once");
}

#[tokio::test]
async fn settle_claim_refuses_wrong_typed_keys_and_changes_nothing() {
    let (_s, q, mut c) = setup("sctypes").await;
    for id in ["a", "b"] {
        q.enqueue(job(id).id(id)).await.unwrap();
    }
    let a = q.claim_one("w", None).await.unwrap().unwrap();
    let snapshot = |c: &mut redis::Connection| -> Vec<(String, Vec<u8>)> {
        let mut keys: Vec<String> = c.keys("jq:*").unwrap();
        keys.sort();
        keys.into_iter()
            .map(|k| {
                let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(c).unwrap();
                (k, dump)
            })
            .collect()
    };
    // stats, written by the ack and the claim
    let _: () = c.rename(&q.keys().stats, "saved").unwrap();
    let _: () = c.rpush(&q.keys().stats, "x").unwrap();
    let before = snapshot(&mut c);
    let err = q
        .settle_claim(&new_token(), &[acked(&a)], 1, "w", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("jq:{sctypes}:stats"), "{err}");
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    let _: () = c.del(&q.keys().stats).unwrap();
    let _: () = c.rename("saved", &q.keys().stats).unwrap();
    // dead, written only by a fail that dead-letters
    let _: () = c.set(&q.keys().dead, "x").unwrap();
    let before = snapshot(&mut c);
    let dead = Settle::Fail {
        lease: a.lease_ref(),
        error: "e",
        mode: FailMode::Dead,
        backoff: Backoff::Policy,
    };
    let err = q
        .settle_claim(&new_token(), &[dead], 1, "w", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("jq:{sctypes}:dead"), "{err}");
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    let _: () = c.del(&q.keys().dead).unwrap();
    // processing, when the claim leases nothing
    let b = q.claim_one("w", None).await.unwrap().unwrap();
    let _: () = c.rename(&q.keys().processing, "saved").unwrap();
    let _: () = c.set(&q.keys().processing, "x").unwrap();
    let before = snapshot(&mut c);
    let err = q
        .settle_claim(&new_token(), &[acked(&b)], 1, "w", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("jq:{sctypes}:processing"), "{err}");
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    let _: () = c.del(&q.keys().processing).unwrap();
    let _: () = c.rename("saved", &q.keys().processing).unwrap();
    // a job key
    let _: () = c.set(q.keys().job("x"), "not a hash").unwrap();
    let before = snapshot(&mut c);
    let err = q
        .settle_claim(
            &new_token(),
            &[Settle::Ack(("x", "t").into())],
            1,
            "w",
            None,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("jq:{sctypes}:job:x"), "{err}");
    assert_eq!(snapshot(&mut c), before, "nothing changed");
    // all well again: both leases end
    let r = q
        .settle_claim(&new_token(), &[acked(&a), acked(&b)], 1, "w", None)
        .await
        .unwrap();
    assert_eq!(r.settled, [Settled::Acked, Settled::Acked]);
}

static DRAWS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Ids that collide: "taken" twice, then "fresh<n>".
fn colliding_ids() -> String {
    match DRAWS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
        0 | 1 => "taken".into(),
        n => format!("fresh{n}"),
    }
}

#[tokio::test]
async fn a_generated_id_that_is_taken_is_drawn_again() {
    let (_s, q, mut c) = setup("collide").await;
    q.enqueue(job("first").id("taken")).await.unwrap();
    let q = q.id_source(colliding_ids);
    let got = q.enqueue(job("second")).await.unwrap();
    assert_eq!(got.id, "fresh2", "drawn again after two collisions");
    assert!(got.created, "a collision is no duplicate");
    assert_eq!(
        hget(&mut c, &q.keys().job("taken"), "payload").as_deref(),
        Some("first"),
        "the job that held the id is untouched"
    );
    assert_eq!(
        hget(&mut c, &q.keys().job("fresh2"), "payload").as_deref(),
        Some("second")
    );
    // An id the caller chose is never replaced: taken means a duplicate.
    let dup = q.enqueue(job("third").id("taken")).await.unwrap();
    assert_eq!((dup.id.to_string(), dup.created), ("taken".into(), false));
    let s = q.stats().await.unwrap();
    assert_eq!((s.enqueued, s.pending), (2, 2));
    assert_eq!(q.pending_ids(10).await.unwrap(), ["taken", "fresh2"]);
}

#[tokio::test]
async fn a_job_enqueued_ready_holds_its_payload_and_arrival() {
    let (_s, q, mut c) = setup("lean").await;
    let got = q.enqueue(job("p")).await.unwrap();
    assert_eq!(
        got.id.to_string().len(),
        12,
        "generated ids are 12 characters"
    );
    let fields: Vec<String> = c.hkeys(q.keys().job(&got.id.to_string())).unwrap();
    assert_eq!(fields, ["payload", "enqueued_at"]);
    // Readers see it as pending, since when it arrived; a claim takes it.
    let info = q.job(got.id.as_bytes()).await.unwrap().unwrap();
    assert_eq!(info.status.as_deref(), Some("pending"));
    assert!(info.enqueued_at.is_some());
    // An ack or fail for it is stale (the job exists), not unknown.
    assert!(!q.ack((&got.id, "t")).await.unwrap());
    assert_eq!(q.stats().await.unwrap().stale, 1);
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!((lease.id.clone(), lease.attempts), (got.id.clone(), 1));
    // A delayed job keeps its status and enqueued_at.
    let later = q
        .enqueue(job("later").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let info = q.job(later.id.as_bytes()).await.unwrap().unwrap();
    assert_eq!(info.status.as_deref(), Some("delayed"));
    assert!(info.enqueued_at.is_some());
}

/// Under `replicated`, settle_claim and claim wait for the replicas too; too few
/// confirmations are not an error: the call took effect on the primary, its leases are
/// held there and come back (to be run), flagged as unconfirmed.
#[tokio::test]
async fn replicated_durability_waits_for_settle_claim_and_returns_its_leases() {
    let (_s, q, _c) = setup("scdur").await;
    for id in ["a", "b", "c"] {
        q.enqueue(job(id).id(id)).await.unwrap();
    }
    let a = q.claim_one("w", None).await.unwrap().unwrap();
    // This server has no replica: any WAIT 1 comes back with 0.
    let q = q.durability(jobqueue::queue::Durability::Replicated {
        replicas: 1,
        timeout: Duration::from_millis(10),
    });
    let unconfirmed = Some(jobqueue::queue::Unconfirmed {
        acked: 0,
        wanted: 1,
        timeout_ms: 10,
    });
    // Nothing to settle: a claim, waited for all the same.
    let r = q
        .settle_claim(&new_token(), &[], 1, "w", None)
        .await
        .unwrap();
    assert_eq!(r.claimed.leases[0].id, "b");
    assert_eq!(r.claimed.unconfirmed, unconfirmed);
    // An ack and a claim: the ack applied on the primary, the new lease returned.
    let r = q
        .settle_claim(&new_token(), &[acked(&a)], 1, "w", None)
        .await
        .unwrap();
    assert_eq!(r.settled, vec![Settled::Acked]);
    assert_eq!(r.claimed.leases[0].id, "c");
    assert_eq!(r.claimed.unconfirmed, unconfirmed);
    assert_eq!(q.stats().await.unwrap().acked, 1);
    // The leases are held: their acks are accepted (and, alone, reported unconfirmed).
    let b = q.claim_batch(1, "w", None).await.unwrap();
    assert!(b.leases.is_empty(), "nothing left to claim");
    let err = q.ack(&r.claimed.leases[0]).await.unwrap_err();
    assert!(
        matches!(err, Error::NotReplicated { op: "ack", .. }),
        "{err:?}"
    );
    assert_eq!(q.stats().await.unwrap().acked, 2);
}
