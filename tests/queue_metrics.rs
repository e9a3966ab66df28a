//! The per-queue health series (`jobqueue_queue_ready`, `jobqueue_redis_up`,
//! `jobqueue_lease_too_short`, `jobqueue_last_observed_timestamp_seconds`) after each
//! kind of reconcile outcome, with kube's mock API server and a real Redis: what the
//! chart's alerts read.

mod support;

use std::time::Duration;

use jobqueue::queue::NewJob;
use prometheus_client::registry::Registry;
use support::fixtures::{JobQueueExt, TestClock, queue};
use support::mock_api::{Expect, Scenario, test_context_at};
use support::redis::{RedisServer, wait_past};

fn metrics_text(registry: &Registry) -> String {
    jobqueue::controller::metrics::encode(registry)
}

fn assert_series(text: &str, lines: &[String]) {
    for line in lines {
        assert!(text.contains(line.as_str()), "missing {line} in\n{text}");
    }
}

/// A good reconcile, then Redis gone: `ready` and `redis_up` fall to 0 at once, and the
/// counts keep the value they had, with the time they were read (their age is visible).
#[tokio::test]
async fn a_failed_reconcile_shows_redis_down_and_not_ready() {
    let redis = RedisServer::start();
    let q = redis.queue("health").await;
    q.enqueue(NewJob::new("a")).await.unwrap();
    let clock = TestClock::new();
    let read_at = clock.now().as_second();
    let jq = queue("health", &redis.url(), "health");
    let (ctx, mut api, registry) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let s = r#"{namespace="default",name="health"}"#;
    assert_series(
        &metrics_text(&registry),
        &[
            format!("jobqueue_queue_ready{s} 1"),
            format!("jobqueue_redis_up{s} 1"),
            format!("jobqueue_lease_too_short{s} 0"),
            format!("jobqueue_pending{s} 1"),
            format!("jobqueue_last_observed_timestamp_seconds{s} {read_at}"),
        ],
    );

    // The same queue, its Redis now unreachable, a minute later.
    clock.advance(60);
    let jq = queue("health", "redis://127.0.0.1:1", "health").with_status(seen.statuses[0].clone());
    let (result, _) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    result.expect_err("Redis is down");
    assert_series(
        &metrics_text(&registry),
        &[
            format!("jobqueue_queue_ready{s} 0"),
            format!("jobqueue_redis_up{s} 0"),
            format!("jobqueue_pending{s} 1"),
            format!("jobqueue_last_observed_timestamp_seconds{s} {read_at}"),
        ],
    );
}

/// An invalid spec reads no Redis: not ready, Redis not read.
#[tokio::test]
async fn an_invalid_spec_shows_not_ready() {
    let clock = TestClock::new();
    let jq = queue("broken", "redis://127.0.0.1:1", "b").edit(|s| s.reaper.interval = "0s".into());
    let (ctx, mut api, registry) = test_context_at(&clock);
    let (result, _) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidSpec"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let s = r#"{namespace="default",name="broken"}"#;
    let text = metrics_text(&registry);
    assert_series(
        &text,
        &[
            format!("jobqueue_queue_ready{s} 0"),
            format!("jobqueue_redis_up{s} 0"),
        ],
    );
    assert!(
        !text.contains(&format!("jobqueue_last_observed_timestamp_seconds{s}")),
        "a queue never read has no observation time:\n{text}"
    );
}

/// An ack after its lease was reaped: `jobqueue_stale_acks_total` counts it and
/// `jobqueue_lease_too_short` mirrors the `LeaseTooShort` condition.
#[tokio::test]
async fn stale_acks_are_a_counter_and_lease_too_short_a_gauge() {
    let redis = RedisServer::start();
    let q = redis.queue("slow").await;
    q.enqueue(NewJob::new("a")).await.unwrap();
    let lease = q
        .claim_one("w", Some(Duration::from_millis(20)))
        .await
        .unwrap()
        .expect("a job");
    wait_past(&mut redis.conn(), lease.lease_until);
    let clock = TestClock::new();
    let jq = queue("slow", &redis.url(), "slow");
    let (ctx, mut api, registry) = test_context_at(&clock);
    // First reconcile reaps the lease; the worker's ack then comes too late.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        !q.ack(&lease).await.unwrap(),
        "the ack of a reaped lease is refused"
    );
    clock.advance(10);
    let jq = jq.with_status(seen.statuses[0].clone());
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "StaleAcks"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let lease_cond = seen.statuses[0].condition("LeaseTooShort").unwrap();
    assert_eq!(lease_cond.status, "True");
    let s = r#"{namespace="default",name="slow"}"#;
    let text = metrics_text(&registry);
    assert_series(
        &text,
        &[
            format!("jobqueue_stale_acks_total{s} 1"),
            format!("jobqueue_lease_too_short{s} 1"),
            format!("jobqueue_queue_ready{s} 1"),
        ],
    );
    assert!(
        text.contains("# TYPE jobqueue_stale_acks counter"),
        "stale acks are a counter:\n{text}"
    );
}
