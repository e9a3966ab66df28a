//! Pausing, the fallback and one owner per workload, against kube's mock API server and
//! a real Redis the test starts: the `jobqueue.dev/paused` and `paused-replicas`
//! annotations, `spec.workers.fallback` while Redis is down, a KEDA ScaledObject on the
//! target, and two JobQueues naming one target. Each scenario lists the exact requests
//! of a reconcile, in order; time is the test's clock.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Method, StatusCode};
use jobqueue::controller::Error;
use jobqueue::controller::operator::run_controller;
use jobqueue::crd::{JobQueue, JobQueueStatus, WorkersSpec};
use jobqueue::queue::{NewJob, Queue};
use kube::Resource;
use kube::api::Api;
use kube::runtime::{reflector, watcher};
use serde_json::json;
use support::eventually::Wait;
use support::fixtures::{JobQueueExt, NS, ScaleTarget, TestClock, deployment, queue};
use support::mock_api::{
    Expect, Scenario, json_response, scaled_object, test_context, test_context_at,
};
use support::redis::RedisServer;
use tokio_util::sync::CancellationToken;

const WORKER: ScaleTarget = deployment("worker");
const PAUSED: &str = "jobqueue.dev/paused";
const PAUSED_REPLICAS: &str = "jobqueue.dev/paused-replicas";

/// Workers of Deployment `worker`, 10 jobs per replica, the HPA's scale-up defaults,
/// a five-minute scale-down window; `fallback` as given.
fn workers(min: i32, max: i32, fallback: Option<(u32, i32)>) -> WorkersSpec {
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "worker"},
        "minReplicas": min,
        "maxReplicas": max,
        "targetBacklogPerReplica": 10,
        "scaleDownStabilization": "5m",
    });
    if let Some((failure_threshold, replicas)) = fallback {
        spec["fallback"] = json!({"failureThreshold": failure_threshold, "replicas": replicas});
    }
    serde_json::from_value(spec).expect("a workers spec")
}

fn scaling(status: &JobQueueStatus) -> (&str, &str, &str) {
    let c = status
        .condition("Scaling")
        .unwrap_or_else(|| panic!("no Scaling condition in {status:?}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

async fn enqueue(q: &Queue, n: usize) {
    let jobs = (0..n).map(|i| NewJob::new(format!("job {i}"))).collect();
    q.enqueue_many(jobs).await.unwrap();
}

#[tokio::test]
async fn paused_leaves_the_replicas_and_resuming_scales_again() {
    let redis = RedisServer::start();
    let q = redis.queue("paused").await;
    enqueue(&q, 50).await;
    let jq = queue("paused", &redis.url(), "paused")
        .with_workers(workers(0, 10, None))
        .with_annotation(PAUSED, "true");
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);

    // 50 jobs ask for 5 replicas; paused, the target stays at 1. Counts go on.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "Paused"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        seen.scales.is_empty(),
        "a paused queue scaled: {:?}",
        seen.scales
    );
    let status = seen.statuses[0].clone();
    assert_eq!(status.pending, 50, "counts go on while paused");
    let (s, reason, message) = scaling(&status);
    assert_eq!((s, reason), ("False", "Paused"), "{message}");
    assert!(message.contains("jobqueue.dev/paused"), "{message}");
    assert!(
        message.contains("1 replica of Deployment/worker"),
        "{message}"
    );
    assert_eq!(status.current_replicas, Some(1));
    assert_eq!(status.desired_replicas, None);

    // Still paused: nothing new, nothing written.
    let jq = jq.with_status(status.clone());
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.scales.is_empty() && seen.statuses.is_empty());

    // The annotation is set to "false": scaling resumes at once, and says so.
    let jq = jq.with_annotation(PAUSED, "false");
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::ScalePatch(WORKER, 5))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScalingResumed"))
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![5]);
    assert_eq!(scaling(&seen.statuses[0]).1, "ScaledUp");
}

#[tokio::test]
async fn a_pause_annotation_that_means_nothing_pauses_and_says_why() {
    let redis = RedisServer::start();
    let q = redis.queue("typo").await;
    enqueue(&q, 50).await;
    let jq = queue("typo", &redis.url(), "typo")
        .with_workers(workers(0, 10, None))
        .with_annotation(PAUSED_REPLICAS, "maybe");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidPauseAnnotation"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        seen.scales.is_empty(),
        "scaled on a bad annotation: {:?}",
        seen.scales
    );
    let (s, reason, message) = scaling(&seen.statuses[0]);
    assert_eq!((s, reason), ("False", "InvalidPauseAnnotation"));
    assert!(
        message.contains(r#"annotation jobqueue.dev/paused-replicas: "maybe" is not a number"#),
        "{message}"
    );
    assert!(seen.events[0]["note"].as_str().unwrap().contains("maybe"));
    assert_eq!(
        seen.statuses[0].condition("Ready").unwrap().status,
        "True",
        "a bad pause annotation is no reason to stop reaping"
    );
}

#[tokio::test]
async fn paused_replicas_scales_to_n_and_holds_it() {
    let redis = RedisServer::start();
    let _q = redis.queue("pinned").await;
    // No backlog at all: on the backlog the target would stay at 0.
    let jq = queue("pinned", &redis.url(), "pinned")
        .with_workers(workers(0, 10, None))
        .with_annotation(PAUSED_REPLICAS, "3");
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 3))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "PausedReplicas"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![3]);
    let status = seen.statuses[0].clone();
    let (s, reason, message) = scaling(&status);
    assert_eq!((s, reason), ("False", "PausedReplicas"), "{message}");
    assert!(message.contains("paused at 3 replicas"), "{message}");
    assert_eq!(
        (status.current_replicas, status.desired_replicas),
        (Some(3), Some(3))
    );
    assert!(status.last_scale_time.is_some());
    let text = jobqueue::controller::metrics::encode(&registry);
    assert!(
        text.contains(r#"jobqueue_desired_replicas{namespace="default",name="pinned"} 3"#),
        "{text}"
    );

    // At 3: held, no patch.
    let jq = jq.with_status(status);
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 3))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.scales.is_empty());
    let status = seen.statuses[0].clone();

    // Scaled by hand to 1: back to 3.
    let jq = jq.with_status(status);
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::ScalePatch(WORKER, 3))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "PausedReplicas"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![3]);
}

#[tokio::test]
async fn the_fallback_holds_the_workers_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let _q = redis.queue("fb").await;
    let jq = queue("fb", &redis.url(), "fb").with_workers(workers(0, 10, Some((2, 2))));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);

    // Redis up, no backlog: at zero.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let jq = jq.with_status(seen.statuses[0].clone());

    // Redis down: the first failed read leaves the replicas (threshold 2).
    redis.kill();
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
    assert!(seen.scales.is_empty());
    assert_eq!(scaling(&seen.statuses[0]).0, "Unknown");
    let jq = jq.with_status(seen.statuses[0].clone());

    // The second: the fallback, 2 replicas, with a Warning.
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::ScalePatch(WORKER, 2))
        .expect(Expect::StatusPatch)
        .expect(Expect::EventAgain("Warning", "RedisUnreachable"))
        .expect(Expect::Event("Warning", "Fallback"))
        .run(&ctx, &mut api)
        .await;
    assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
    assert_eq!(seen.scales, vec![2], "the fallback's replicas");
    let status = seen.statuses[0].clone();
    let (s, reason, message) = scaling(&status);
    assert_eq!((s, reason), ("False", "Fallback"), "{message}");
    assert!(message.contains("2 reconciles in a row"), "{message}");
    assert!(message.contains("fallback of 2 replicas"), "{message}");
    assert_eq!(
        status.condition("RedisAvailable").unwrap().reason,
        "RedisUnreachable"
    );
    assert_eq!(status.current_replicas, Some(2));

    // Still down: held at 2, nothing new to say.
    let jq = jq.with_status(status);
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::EventAgain("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    assert!(result.is_err());
    assert!(seen.scales.is_empty() && seen.statuses.is_empty());

    // Redis is back: scaling on the backlog resumes. No backlog, but the 2 replicas
    // count as a fresh recommendation: the scale-down waits its window.
    redis.restart();
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "Recovered"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = seen.statuses[0].clone();
    assert_eq!(scaling(&status).1, "Stabilizing");
    let jq = jq.with_status(status);
    clock.advance(301);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::ScalePatch(WORKER, 0))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledDown"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![0]);

    // Down again: the count starts over, one failure is not yet the fallback.
    redis.kill();
    let jq = jq.with_status(seen.statuses[0].clone());
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::EventAgain("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    assert!(result.is_err());
    assert!(seen.scales.is_empty());
}

#[tokio::test]
async fn a_scaled_object_on_the_target_is_refused_paused_or_not() {
    let redis = RedisServer::start();
    let q = redis.queue("keda").await;
    enqueue(&q, 50).await;
    let jq = queue("keda", &redis.url(), "keda").with_workers(workers(0, 10, None));
    for paused in [false, true] {
        let (ctx, mut api, _) = test_context();
        let so = scaled_object("worker-so", "Deployment", "worker", paused);
        let (result, seen) = Scenario::new(&jq)
            .expect(Expect::GetScale(WORKER, 2))
            .expect(Expect::ListHpas(vec![]))
            .expect(Expect::ListScaledObjects(vec![so]))
            .expect(Expect::StatusPatch)
            .expect(Expect::Event("Warning", "ScaledObjectConflict"))
            .run(&ctx, &mut api)
            .await;
        result.unwrap();
        assert!(
            seen.scales.is_empty(),
            "scaled a KEDA target: {:?}",
            seen.scales
        );
        let (s, reason, message) = scaling(&seen.statuses[0]);
        assert_eq!((s, reason), ("False", "ScaledObjectConflict"), "{message}");
        assert!(
            message.contains("KEDA ScaledObject default/worker-so scales Deployment/worker"),
            "{message}"
        );
        let note = seen.events[0]["note"].as_str().unwrap();
        assert!(note.contains("worker-so"), "{note}");
    }

    // One on another workload, or no KEDA at all (404): the operator scales.
    let (ctx, mut api, _) = test_context();
    let elsewhere = scaled_object("other-so", "Deployment", "other", false);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 2))
        .expect(Expect::ListHpas(vec![]))
        .expect(Expect::ListScaledObjects(vec![elsewhere]))
        .expect(Expect::RecordOriginal("Deployment/worker", 2))
        .expect(Expect::ScalePatch(WORKER, 5))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![5]);
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 2))
        .expect(Expect::ListHpas(vec![]))
        .expect(Expect::NoScaledObjects)
        .expect(Expect::RecordOriginal("Deployment/worker", 2))
        .expect(Expect::ScalePatch(WORKER, 5))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![5]);
}

#[tokio::test]
async fn of_two_queues_on_one_target_the_younger_refuses() {
    let redis = RedisServer::start();
    for tag in ["old", "new"] {
        enqueue(&redis.queue(tag).await, 50).await;
    }
    let old = queue("old", &redis.url(), "old")
        .with_workers(workers(0, 10, None))
        .created_at(-3600);
    let new = queue("new", &redis.url(), "new")
        .with_workers(workers(0, 10, None))
        .created_at(0);
    let (ctx, mut api, _) = test_context();
    let (reader, mut writer) = reflector::store::<JobQueue>();
    for jq in [&old, &new] {
        writer.apply_watcher_event(&watcher::Event::Apply(jq.clone()));
    }
    ctx.set_jobqueues(reader);

    let (result, seen) = Scenario::new(&new)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "TargetOwnedByAnother"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        seen.scales.is_empty(),
        "the younger queue scaled: {:?}",
        seen.scales
    );
    let (s, reason, message) = scaling(&seen.statuses[0]);
    assert_eq!((s, reason), ("False", "TargetOwnedByAnother"), "{message}");
    assert!(message.contains("JobQueue default/old"), "{message}");
    assert_eq!(seen.statuses[0].current_replicas, Some(2));

    // The older one scales it.
    let (result, seen) = Scenario::new(&old)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::RecordOriginal("Deployment/worker", 2))
        .expect(Expect::ScalePatch(WORKER, 5))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![5]);

    // The older one is deleted: the younger takes over.
    writer.apply_watcher_event(&watcher::Event::Delete(old.clone()));
    let new = new.with_status(JobQueueStatus::default());
    let (result, seen) = Scenario::new(&new)
        .expect(Expect::TargetRead(WORKER, 5))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(scaling(&seen.statuses[0]).1, "Steady");
}

/// The controller loop: a change of a `jobqueue.dev/` annotation (same generation) is
/// reconciled at once; another annotation, or a status write, is not.
#[tokio::test]
async fn the_loop_reconciles_a_change_of_the_pause_annotations() {
    let redis = RedisServer::start();
    let q = redis.queue("a").await;
    q.enqueue(NewJob::new("one")).await.unwrap();
    let (ctx, mut handle, registry) = test_context();
    let ready = Arc::new(AtomicBool::new(false));
    let stop = CancellationToken::new();
    let api: Api<JobQueue> = Api::namespaced(ctx.client.clone(), NS);
    let controller = tokio::spawn(run_controller(api, ctx, ready.clone(), stop.clone(), 0));

    let a1 = queue("a", &redis.url(), "a")
        .edit(|s| s.reaper.interval = "1h".into())
        .at_generation(1, "11");
    let list = handle.next("the list").await;
    assert!(!list.uri.contains("watch=true"), "{}", list.uri);
    list.respond(json_response(
        StatusCode::OK,
        &json!({
            "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueueList",
            "metadata": {"resourceVersion": "11"}, "items": [a1],
        }),
    ));
    let mut watch = None;
    let mut first = None;
    for _ in 0..2 {
        let request = handle.next("the watch or the status patch").await;
        if request.uri.contains("watch=true") {
            assert_eq!(request.method, Method::GET);
            watch = Some(request.respond_watch());
        } else {
            first = Some(request.status_patch(&a1));
        }
    }
    let watch = watch.expect("a watch");
    let first = first.expect("a status patch");
    Wait::for_("ready after the cache synced")
        .within(Duration::from_secs(10))
        .every(Duration::from_millis(5))
        .until(async || ready.load(Ordering::Acquire))
        .await;

    // Our status write and an unrelated annotation: filtered out.
    q.enqueue(NewJob::new("two")).await.unwrap();
    let mut written = a1.clone().with_status(first);
    written.meta_mut().resource_version = Some("12".into());
    watch.send("MODIFIED", &written);
    let other = written
        .clone()
        .with_annotation("example.com/owner", "mail-team")
        .at_generation(1, "13");
    watch.send("MODIFIED", &other);

    // The pause annotation, same generation: reconciled, and sees the second job.
    let paused = other
        .clone()
        .with_annotation(PAUSED, "true")
        .at_generation(1, "14");
    watch.send("MODIFIED", &paused);
    let second = handle.status_patch(&paused).await;
    assert_eq!(second.pending, 2, "the annotated queue was reconciled");

    let text = jobqueue::controller::metrics::encode(&registry);
    let line = r#"jobqueue_reconcile_runs_total{namespace="default",name="a"} 2"#;
    assert!(
        text.contains(line),
        "a status write or another annotation woke the controller:\n{text}"
    );

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), controller)
        .await
        .expect("the controller stops")
        .unwrap();
    drop(watch);
    handle.expect_released().await;
}

/// `spec.paused` holds the queue's own pause (its claims stop) as meta holds the
/// settings: the operator pauses the queue in Redis, reports `status.paused`, and leaves
/// the workers' replicas as they are (they would find nothing to claim); `false`
/// resumes it and scaling follows the backlog again.
#[tokio::test]
async fn spec_paused_pauses_the_queue_in_redis_and_holds_the_replicas() {
    let redis = RedisServer::start();
    let q = redis.queue("specpause").await;
    enqueue(&q, 50).await;
    let mut jq = queue("specpause", &redis.url(), "specpause").with_workers(workers(0, 10, None));
    jq.spec.paused = Some(true);
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);

    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "QueuePaused"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        seen.scales.is_empty(),
        "a paused queue scaled: {:?}",
        seen.scales
    );
    let status = seen.statuses[0].clone();
    assert!(status.paused, "status.paused: {status:?}");
    let (s, reason, message) = scaling(&status);
    assert_eq!((s, reason), ("False", "QueuePaused"), "{message}");
    assert!(message.contains("the queue is paused"), "{message}");
    // the queue itself is paused: a claim leases nothing, producers go on
    assert!(q.stats().await.unwrap().paused);
    assert!(q.claim(1, "w", None).await.unwrap().is_empty());
    enqueue(&q, 1).await;
    assert_eq!(q.stats().await.unwrap().pending, 51);

    // spec.paused: false resumes the queue and scaling follows the backlog again
    jq.spec.paused = Some(false);
    let jq = jq.with_status(status);
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::ScalePatch(WORKER, 5))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![5]);
    assert!(!seen.statuses[0].paused);
    assert!(!q.stats().await.unwrap().paused);
    assert_eq!(q.claim(1, "w", None).await.unwrap().len(), 1);
}

/// Without `spec.paused`, a pause made with `jobqueue pause` (or the console) is left
/// as it is, reported, and holds the replicas.
#[tokio::test]
async fn a_queue_paused_by_hand_is_reported_and_left_paused() {
    let redis = RedisServer::start();
    let q = redis.queue("handpause").await;
    enqueue(&q, 50).await;
    assert!(q.pause().await.unwrap());
    let jq = queue("handpause", &redis.url(), "handpause").with_workers(workers(0, 10, None));
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "QueuePaused"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.scales.is_empty());
    assert!(seen.statuses[0].paused);
    assert_eq!(scaling(&seen.statuses[0]).1, "QueuePaused");
    assert!(
        q.stats().await.unwrap().paused,
        "the operator resumed a queue paused by hand"
    );
}
