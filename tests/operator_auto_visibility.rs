//! `spec.visibilityTimeout: auto` under the operator, against kube's mock API server and a
//! real Redis the test starts: the operator takes the queue's tuning (the workers'
//! reapers then leave it alone), sets the value from the queue's processing times,
//! patches `status.visibility` and raises an Event for each change.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use jobqueue::queue::auto_visibility::{Timing, fields};
use jobqueue::queue::{NewJob, Queue};
use redis::Commands;
use support::fixtures::{JobQueueExt, TestClock, queue};
use support::mock_api::{Expect, Scenario, test_context_at};
use support::redis::RedisServer;

fn meta(server: &RedisServer, q: &Queue) -> HashMap<String, String> {
    server.conn().hgetall(&q.keys().meta).unwrap()
}

#[tokio::test]
async fn the_operator_tunes_an_auto_queue_and_says_so_in_status_and_events() {
    let redis = RedisServer::start();
    let q = redis.queue("av").await;
    q.enqueue(NewJob::new("x")).await.unwrap();
    let jq = queue("av", &redis.url(), "av").edit(|s| s.visibility_timeout = "auto".into());
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);

    // First reconcile: the operator takes the tuning; nothing observed yet, so the value
    // starts from what the queue had (the default 30s, inside [5s, 15m]).
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let v = seen.statuses[0]
        .visibility
        .clone()
        .expect("status.visibility");
    assert_eq!(v.current, "30s");
    assert_eq!(v.reason, "auto turned on by the operator: starts from 30s");
    assert_eq!(v.set_by.as_deref(), Some("operator"));
    assert!(v.since.is_some());
    let m = meta(&redis, &q);
    assert_eq!(m.get(fields::MODE).map(String::as_str), Some("auto"));
    assert_eq!(m.get(fields::OWNER).map(String::as_str), Some("operator"));
    assert!(m.contains_key(fields::STATE), "the first snapshot is kept");

    // A worker's reaper defers to the operator.
    let turn = format!("{}:tuning", q.keys().name);
    let _: i64 = redis.conn().del(&turn).unwrap();
    let timing = Timing::default();
    assert_eq!(
        jobqueue::queue::tuning::tune(&q, "reaper:w1", &timing)
            .await
            .unwrap(),
        None
    );

    // 100 acks of 16-32 s since: the next reconcile (its turn: the last one's has ended)
    // raises the value to p99 × 2, patches the status and raises an Event.
    let _: i64 = redis.conn().hincr(&q.keys().stats, "h:14", 100).unwrap();
    let _: i64 = redis.conn().del(&turn).unwrap();
    clock.advance(10);
    let jq = jq.with_status(seen.statuses[0].clone());
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "VisibilityTimeoutChanged"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let v = seen.statuses[0]
        .visibility
        .clone()
        .expect("status.visibility");
    assert!(v.current == "1m5s", "{v:?}");
    assert!(v.reason.starts_with("raised to p99 32.6"), "{v:?}");
    assert_eq!(v.set_by.as_deref(), Some("operator"));
    let note = seen.events[0]["note"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        note.starts_with("visibility timeout 30s -> 1m5s: raised to p99 32.6")
            && note.contains("raised to p99"),
        "{note}"
    );
    let ms: u64 = meta(&redis, &q)["visibility_timeout_ms"].parse().unwrap();
    assert!((65_200..=65_220).contains(&ms), "{ms}");
    assert_eq!(
        q.settings().await.unwrap().visibility_timeout,
        Duration::from_millis(ms),
        "the scripts read the value the operator set"
    );
    let text = jobqueue::controller::metrics::encode(&registry);
    assert!(
        text.lines().any(|l| l.starts_with(
            r#"jobqueue_visibility_timeout_seconds{namespace="default",name="av"} 65.2"#
        )),
        "{text}"
    );

    // The next reconcile within the turn keeps the value: the upkeep does not write the
    // spec's starting value over it, and nothing changes: no status write, no Event.
    clock.advance(10);
    let jq = jq.with_status(seen.statuses[0].clone());
    let (result, seen) = Scenario::new(&jq).run(&ctx, &mut api).await;
    result.unwrap();
    assert!(seen.events.is_empty() && seen.statuses.is_empty());
    let again: u64 = meta(&redis, &q)["visibility_timeout_ms"].parse().unwrap();
    assert_eq!(again, ms);

    // Back to a duration in the spec: the upkeep writes it, and meta says auto has ended.
    clock.advance(10);
    let jq = jq.edit(|s| s.visibility_timeout = "45s".into());
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.statuses[0].visibility, None);
    let m = meta(&redis, &q);
    assert_eq!(m["visibility_timeout_ms"], "45000");
    assert_eq!(m.get(fields::MODE).map(String::as_str), Some("fixed"));
    assert_eq!(
        m.get(fields::REASON).map(String::as_str),
        Some("spec.visibilityTimeout is a duration again")
    );
}
