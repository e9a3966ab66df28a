//! An invalid spec never stops the reaper when it can go on: a bad `spec.workers` leaves
//! reaping and counting in force (scaling stops, a condition and a Warning say why), and
//! a spec invalid as a whole after a good one is reaped with the last good settings. The
//! reconciler against kube's mock API and a real redis-server.

mod support;

use std::time::Duration;

use jobqueue::crd::{JobQueue, JobQueueStatus, WorkersSpec};
use jobqueue::queue::{NewJob, PriorityMode, Queue};
use kube::runtime::controller::Action;
use serde_json::json;
use support::fixtures::{JobQueueExt, TestClock, queue};
use support::mock_api::{Expect, Scenario, test_context, test_context_at};
use support::redis::{RedisServer, wait_past};

fn condition<'a>(status: &'a JobQueueStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = status
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// Workers whose bounds are crossed (min above max): a spec the controller refuses.
fn crossed_workers() -> WorkersSpec {
    serde_json::from_value(json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"},
        "minReplicas": 5,
        "maxReplicas": 2,
    }))
    .unwrap()
}

/// `n` jobs enqueued and claimed by a worker that then died: their leases have expired.
async fn expired_leases(redis: &RedisServer, q: &Queue, n: usize) {
    for i in 0..n {
        q.enqueue(NewJob::new(format!("job {i}"))).await.unwrap();
    }
    let leases = q
        .claim(n, "crashed-worker", Some(Duration::from_millis(20)))
        .await
        .unwrap();
    assert_eq!(leases.len(), n);
    let until = leases.iter().map(|l| l.lease_until).max().unwrap();
    wait_past(&mut redis.conn(), until);
}

#[tokio::test]
async fn an_invalid_workers_part_still_reaps_and_counts() {
    let redis = RedisServer::start();
    let q = redis.queue("ws").await;
    expired_leases(&redis, &q, 2).await;

    let jq = queue("ws", &redis.url(), "ws").with_workers(crossed_workers());
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    // No read of the target: the operator does not scale on a workers part it refused.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidWorkers"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(Duration::from_secs(10)),
        "reaped again after reaper.interval"
    );
    let status = &seen.statuses[0];
    // The expired leases were requeued, and the counts published.
    assert_eq!(
        (status.pending, status.processing, status.reaped),
        (2, 0, 2)
    );
    assert!(status.last_reap_time.is_some());
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.processing), (2, 0));
    // Ready is about the queue: it is reaped and counted.
    assert_eq!(condition(status, "Ready").0, "True");
    let (s, reason, message) = condition(status, "SpecValid");
    assert_eq!((s, reason), ("False", "InvalidWorkers"));
    assert!(message.contains("spec.workers.minReplicas"), "{message}");
    assert!(message.contains("reaped and counted"), "{message}");
    let (s, reason, message) = condition(status, "Scaling");
    assert_eq!((s, reason), ("False", "InvalidWorkers"));
    assert!(message.contains("spec.workers.minReplicas"), "{message}");
    let note = seen.events[0]["note"].as_str().unwrap();
    assert!(note.contains("spec.workers.minReplicas"), "{note}");

    // The next reconcile, seconds later: nothing new, so no status write and no second
    // Warning (Scaling keeps its transition time).
    clock.advance(10);
    let jq = jq.with_status(status.clone());
    let (result, seen) = Scenario::new(&jq).run(&ctx, &mut api).await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    assert!(seen.statuses.is_empty() && seen.events.is_empty());
}

/// A good reconcile of `jq`: the status it wrote.
async fn good_reconcile(
    jq: &JobQueue,
    ctx: &std::sync::Arc<jobqueue::controller::Context>,
    api: &mut support::mock_api::ApiServerVerifier,
) -> JobQueueStatus {
    let (result, mut seen) = Scenario::new(jq)
        .expect(Expect::StatusPatch)
        .run(ctx, api)
        .await;
    result.unwrap();
    seen.statuses.remove(0)
}

#[tokio::test]
async fn a_spec_invalid_as_a_whole_is_reaped_with_the_last_good_settings() {
    let redis = RedisServer::start();
    let q = redis.queue("lg").await;
    let good = queue("lg", &redis.url(), "lg").edit(|s| {
        s.visibility_timeout = "45s".into();
        s.reaper.interval = "7s".into();
    });
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);
    let first = good_reconcile(&good, &ctx, &mut api).await;

    // A bad edit that slipped past the API server (a CRD without its CEL rules), while
    // a worker's leases run out.
    expired_leases(&redis, &q, 3).await;
    let bad = good
        .clone()
        .at_generation(2, "2")
        .edit(|s| s.visibility_timeout = "soon".into())
        .with_status(first);
    let (result, seen) = Scenario::new(&bad)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidSpec"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(Duration::from_secs(7)),
        "reaped again after the last good reaper.interval"
    );
    let status = &seen.statuses[0];
    assert_eq!(
        (status.pending, status.processing, status.reaped),
        (3, 0, 3)
    );
    assert_eq!(status.observed_generation, Some(2));
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.processing), (3, 0));
    // The queue keeps the last good settings.
    let settings = q.settings().await.unwrap();
    assert_eq!(settings.visibility_timeout, Duration::from_secs(45));
    // The status says the spec is not in force, and what is instead.
    let (s, reason, message) = condition(status, "Ready");
    assert_eq!((s, reason), ("False", "LastGoodSpec"));
    assert!(message.contains("spec.visibilityTimeout"), "{message}");
    assert!(message.contains("generation 1"), "{message}");
    let (s, reason, message) = condition(status, "SpecValid");
    assert_eq!((s, reason), ("False", "LastGoodSpec"));
    assert!(message.contains("\"soon\""), "{message}");
    assert!(message.contains("last valid settings"), "{message}");
    assert_eq!(condition(status, "RedisAvailable").0, "True");
    let note = seen.events[0]["note"].as_str().unwrap();
    assert!(note.contains("last valid settings"), "{note}");
    let text = jobqueue::controller::metrics::encode(&registry);
    assert!(text.contains(r#"error="invalid_spec"} 1"#), "{text}");

    // Unchanged, seconds later: no write, no second Warning (the conditions keep their
    // transition times).
    clock.advance(7);
    let again = bad.clone().with_status(status.clone());
    let (result, seen) = Scenario::new(&again).run(&ctx, &mut api).await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(7)));
    assert!(seen.statuses.is_empty() && seen.events.is_empty());

    // Fixed: the spec's own settings, and the conditions say so.
    let fixed = bad
        .clone()
        .at_generation(3, "3")
        .edit(|s| s.visibility_timeout = "2m".into())
        .with_status(status.clone());
    let (result, mut seen) = Scenario::new(&fixed)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "Recovered"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = seen.statuses.remove(0);
    assert_eq!(condition(&status, "Ready").0, "True");
    assert_eq!(condition(&status, "SpecValid").0, "True");
    let settings = q.settings().await.unwrap();
    assert_eq!(settings.visibility_timeout, Duration::from_secs(120));
}

#[tokio::test]
async fn without_a_last_good_spec_an_invalid_one_is_not_reaped() {
    // Right after the operator starts (or for a queue never valid): nothing to fall
    // back on. The spec is reported, and nothing happens until it changes.
    let redis = RedisServer::start();
    let q = redis.queue("nolg").await;
    expired_leases(&redis, &q, 1).await;
    let bad = queue("nolg", &redis.url(), "nolg").edit(|s| s.retry.max = "1ms".into());
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&bad)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidSpec"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    let status = &seen.statuses[0];
    assert_eq!(condition(status, "Ready").1, "InvalidSpec");
    let (s, reason, message) = condition(status, "SpecValid");
    assert_eq!((s, reason), ("False", "InvalidSpec"));
    assert!(message.contains("spec.retry.max"), "{message}");
    assert_eq!(q.stats().await.unwrap().processing, 1, "not reaped");
}

#[tokio::test]
async fn an_invalid_workers_part_is_reported_while_redis_is_down_too() {
    let jq = queue("down", "redis://127.0.0.1:1", "down").with_workers(crossed_workers());
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .expect(Expect::Event("Warning", "InvalidWorkers"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap_err().metric_label(), "redis_unreachable");
    let status = &seen.statuses[0];
    assert_eq!(condition(status, "Ready").1, "RedisUnreachable");
    let (s, reason, _) = condition(status, "SpecValid");
    assert_eq!((s, reason), ("False", "InvalidWorkers"));
    let (s, reason, _) = condition(status, "Scaling");
    assert_eq!((s, reason), ("Unknown", "RedisUnreachable"));
}

#[tokio::test]
async fn spec_priority_mode_is_the_queues_and_strict_when_absent() {
    let redis = RedisServer::start();
    let q = redis.queue("pm").await;
    let in_meta = async || q.meta_fields().await.unwrap().get("priority_mode").cloned();
    let weighted =
        queue("pm", &redis.url(), "pm").edit(|s| s.priority_mode = Some("weighted".into()));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let status = good_reconcile(&weighted, &ctx, &mut api).await;
    assert_eq!(q.priority_mode().await.unwrap(), PriorityMode::Weighted);
    assert_eq!(in_meta().await.as_deref(), Some("weighted"));

    // changed by hand (`jobqueue configure --priority-mode strict`): the spec owns the
    // queue's settings, so the next reconcile writes its mode back
    q.set_priority_mode(PriorityMode::Strict).await.unwrap();
    clock.advance(10);
    let again = weighted.clone().at_generation(2, "2").with_status(status);
    let status = good_reconcile(&again, &ctx, &mut api).await;
    assert_eq!(q.priority_mode().await.unwrap(), PriorityMode::Weighted);

    // removed from the spec: strict, the scripts' default (the field goes)
    clock.advance(10);
    let absent = again
        .at_generation(3, "3")
        .edit(|s| s.priority_mode = None)
        .with_status(status);
    let status = good_reconcile(&absent, &ctx, &mut api).await;
    assert_eq!(q.priority_mode().await.unwrap(), PriorityMode::Strict);
    assert_eq!(in_meta().await, None);

    // a mode CEL would refuse, past an API server without the rules: named, and the
    // queue keeps its last good settings
    clock.advance(10);
    let bad = absent
        .at_generation(4, "4")
        .edit(|s| s.priority_mode = Some("fair".into()))
        .with_status(status);
    let (result, seen) = Scenario::new(&bad)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidSpec"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let (s, reason, message) = condition(&seen.statuses[0], "SpecValid");
    assert_eq!((s, reason), ("False", "LastGoodSpec"));
    assert!(
        message.contains("spec.priorityMode")
            && message.contains("\"fair\" is not a priority mode"),
        "{message}"
    );
    assert_eq!(in_meta().await, None);
}
