//! Deleting a JobQueue, against kube's mock API server: the finalizer the operator adds,
//! the worker target set as `spec.workers.onDelete` says (`restore`, `zero`, `keep`), the
//! Normal Event saying where the Redis keys were left, the finalizer removed; a target
//! already gone and a refused scale patch. Each test lists the exact requests.

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use jobqueue::crd::{JobQueue, JobQueueStatus, WorkersSpec};
use jobqueue::queue::NewJob;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use support::fixtures::{FINALIZER, JobQueueExt, ScaleTarget, TestClock, deployment, queue};
use support::mock_api::{Expect, Scenario, json_response, test_context, test_context_at};
use support::redis::RedisServer;
use support::standin::{OperatorProcess, StandIn};

const WORKER: ScaleTarget = deployment("worker");
/// A URL with credentials: none of it may reach an Event.
const URL: &str = "redis://app:s3cret-pw@redis.example:6379";

/// Workers of Deployment `worker` (1 to 10, 10 jobs per replica) with this `onDelete`,
/// written as a user writes them.
fn workers(on_delete: &str) -> WorkersSpec {
    serde_json::from_value(json!({
        "scaleTargetRef": {"name": "worker"},
        "minReplicas": 1,
        "maxReplicas": 10,
        "maxScaleUpStep": 4,
        "onDelete": on_delete,
    }))
    .unwrap()
}

/// The status of a queue whose target had `original` replicas when the operator took it.
fn status_with_original(target: &str, original: i32) -> JobQueueStatus {
    serde_json::from_value(json!({
        "currentReplicas": 5,
        "originalReplicas": {"target": target, "replicas": original},
    }))
    .unwrap()
}

/// A deleted queue `emails` (prefix `jq`, tag `emails`) with these workers and status.
fn deleted(on_delete: &str, status: Option<JobQueueStatus>) -> JobQueue {
    let jq = queue("emails", URL, "emails").with_workers(workers(on_delete));
    match status {
        Some(status) => jq.with_status(status),
        None => jq,
    }
    .deleted()
}

fn note(event: &Value) -> &str {
    event["note"].as_str().expect("a note")
}

/// The note says where the keys were left, and nothing of the endpoint.
fn assert_keys_left(note: &str) {
    assert!(
        note.contains("the Redis keys were left in place (jq:{emails}:*"),
        "{note}"
    );
    for leak in ["s3cret-pw", "app:", "redis.example", "redis://"] {
        assert!(!note.contains(leak), "{leak} in the note: {note}");
    }
}

#[tokio::test]
async fn a_queue_without_the_finalizer_gets_it_then_is_reconciled() {
    let redis = RedisServer::start();
    let jq = queue("emails", &redis.url(), "emails").without_finalizer();
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::AddFinalizer)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    assert_eq!(
        seen.bodies[0],
        format!(
            r#"[{{"op":"test","path":"/metadata/finalizers","value":null}},{{"op":"add","path":"/metadata/finalizers","value":["{FINALIZER}"]}}]"#
        )
    );
}

/// A reconcile brought by a related object (a Secret created) can run on a cached copy
/// read before the previous reconcile added the finalizer: the patch that adds it again is
/// refused (its test of `/metadata/finalizers` fails). That is no failure: the queue is
/// read again and reconciled at once, not after a failure's backoff.
#[tokio::test]
async fn a_stale_copy_without_the_finalizer_is_read_again_and_reconciled() {
    let redis = RedisServer::start();
    let jq = queue("emails", &redis.url(), "emails").without_finalizer();
    let (ctx, mut api, _) = test_context();
    let (result, _) = Scenario::new(&jq)
        .expect(Expect::AddFinalizerStale)
        .expect(Expect::GetQueueWithFinalizer)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
}

#[tokio::test]
async fn restore_scales_back_to_the_replicas_before_the_first_scale() {
    let redis = RedisServer::start();
    let q = redis.queue("emails").await;
    for i in 0..25 {
        q.enqueue(NewJob::new(format!("job {i}"))).await.unwrap();
    }
    let jq = queue("emails", &redis.url(), "emails").with_workers(workers("restore"));
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);

    // The operator takes the target at 1 replica, records it, and scales it to 3.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::RecordOriginal("Deployment/worker", 1))
        .expect(Expect::ScalePatch(WORKER, 3))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let patch: Value = serde_json::from_str(&seen.bodies[2]).unwrap();
    assert_eq!(
        patch["status"]["originalReplicas"],
        json!({"target": "Deployment/worker", "replicas": 1}),
        "the status records the replicas the target had before the operator scaled it"
    );

    // A later reconcile keeps it, whatever the target has now.
    let status = seen.statuses[0].clone();
    let jq = jq.with_status(status);
    clock.advance(10);
    enqueue_more(&q, 25).await;
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 3))
        .expect(Expect::ScalePatch(WORKER, 5))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let patch: Value = serde_json::from_str(&seen.bodies[1]).unwrap();
    assert_eq!(
        patch["status"]["originalReplicas"],
        json!({"target": "Deployment/worker", "replicas": 1})
    );
    let text = jobqueue::controller::metrics::encode(&registry);
    assert!(text.contains("name=\"emails\""), "{text}");

    // Deleted: back to 1, a Normal Event, the finalizer removed.
    let jq = jq.with_status(seen.statuses[0].clone()).deleted();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 5))
        .expect(Expect::ScalePatch(WORKER, 1))
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert_eq!(seen.scales, vec![1]);
    let note = note(&seen.events[0]);
    assert!(
        note.ends_with("Deployment/worker scaled from 5 to 1 replicas"),
        "{note}"
    );
    // The keys are still there, untouched.
    assert_eq!(q.stats().await.unwrap().pending, 50);
    // Its metric series went with it, at once.
    let text = jobqueue::controller::metrics::encode(&registry);
    assert!(!text.contains("name=\"emails\""), "{text}");
}

/// The race that lost the original count: the first reconcile scales the target 2 → 5 and
/// records 2; a second one, brought ~40 ms later by that scale, runs on the cached copy
/// read before the first one's writes, without `originalReplicas`. Its status write
/// recorded 5 over the 2 (the operator's own count), and the deleted queue left the
/// target at 5. It is conditional on the version it read: refused, it reads the queue
/// again and keeps the 2 recorded; deleted, the target goes back to 2.
#[tokio::test]
async fn a_reconcile_on_a_stale_copy_keeps_the_original_replicas_recorded() {
    let redis = RedisServer::start();
    let q = redis.queue("emails").await;
    enqueue_more(&q, 50).await;
    let jq = queue("emails", &redis.url(), "emails").with_workers(workers("restore"));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);

    // The first reconcile took the target at 2, recorded it, scaled it to 5: the queue
    // as the API server has it now, at a newer version than the copy `jq` the cache
    // still holds (version 1, no status).
    let recorded = json!({"target": "Deployment/worker", "replicas": 2});
    let mut fresh = jq
        .clone()
        .with_status(status_with_original("Deployment/worker", 2));
    fresh.metadata.resource_version = Some("3".into());

    // The second, on the stale copy (version 1, no status): its write is refused, the
    // queue read again, and the record it finds is the one written.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 5))
        .expect(Expect::StatusConflict)
        .expect(Expect::GetQueue(Box::new(fresh.clone())))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let written = serde_json::to_value(&seen.statuses[1]).unwrap();
    assert_eq!(
        written["originalReplicas"], recorded,
        "the record of the first reconcile is kept, not replaced by the operator's own count"
    );

    // Deleted: back to 2.
    let deleted = fresh.with_status(seen.statuses[1].clone()).deleted();
    let (result, seen) = Scenario::new(&deleted)
        .expect(Expect::GetScale(WORKER, 5))
        .expect(Expect::ScalePatch(WORKER, 2))
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert_eq!(seen.scales, vec![2]);
}

/// The same race when the second reconcile scales too (the backlog grew): the record it
/// writes before its scale is refused, the record found is kept, and the scale goes on.
#[tokio::test]
async fn a_reconcile_on_a_stale_copy_that_scales_keeps_the_original_replicas() {
    let redis = RedisServer::start();
    let q = redis.queue("emails").await;
    enqueue_more(&q, 80).await;
    let jq = queue("emails", &redis.url(), "emails").with_workers(workers("restore"));
    let (ctx, mut api, _) = test_context();
    // Recorded at 2 and scaled to 5 since the copy `jq` (version 1, no status).
    let mut fresh = jq
        .clone()
        .with_status(status_with_original("Deployment/worker", 2));
    fresh.metadata.resource_version = Some("3".into());

    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 5))
        .expect(Expect::RecordRefused(
            "Deployment/worker",
            5,
            StatusCode::CONFLICT,
        ))
        .expect(Expect::GetQueue(Box::new(fresh)))
        .expect(Expect::ScalePatch(WORKER, 8))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![8]);
    let written = serde_json::to_value(&seen.statuses[0]).unwrap();
    assert_eq!(
        written["originalReplicas"],
        json!({"target": "Deployment/worker", "replicas": 2})
    );
}

/// The original count goes to the API server before the first scale: when it cannot be
/// written there, the target is not scaled (a scale whose status write then failed would
/// leave the operator's own count to be taken as the original), and the Scaling
/// condition says why.
#[tokio::test]
async fn a_target_is_not_scaled_before_its_original_count_is_recorded() {
    let redis = RedisServer::start();
    let q = redis.queue("emails").await;
    enqueue_more(&q, 50).await;
    let jq = queue("emails", &redis.url(), "emails").with_workers(workers("restore"));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::RecordRefused(
            "Deployment/worker",
            2,
            StatusCode::FORBIDDEN,
        ))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "ScaleFailed"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.scales.is_empty(), "scaled: {:?}", seen.scales);
    let status = &seen.statuses[0];
    let scaling = status.condition("Scaling").unwrap();
    assert_eq!(
        (scaling.status.as_str(), scaling.reason.as_str()),
        ("False", "ScaleFailed")
    );
    assert!(
        scaling.message.starts_with(
            "cannot record the original replicas of Deployment/worker (2) before scaling it: "
        ),
        "{}",
        scaling.message
    );
    // Not scaled, the 2 read is still the original: the status write records it, on the
    // version read.
    let body: Value = serde_json::from_str(&seen.bodies[1]).unwrap();
    assert_eq!(
        (
            &body["status"]["originalReplicas"],
            &body["metadata"]["resourceVersion"]
        ),
        (
            &json!({"target": "Deployment/worker", "replicas": 2}),
            &json!("1")
        )
    );
}

async fn enqueue_more(q: &jobqueue::queue::Queue, n: usize) {
    for i in 0..n {
        q.enqueue(NewJob::new(format!("more {i}"))).await.unwrap();
    }
}

#[tokio::test]
async fn restore_publishes_where_the_keys_were_left() {
    let jq = deleted(
        "restore",
        Some(status_with_original("Deployment/worker", 2)),
    );
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 7))
        .expect(Expect::ScalePatch(WORKER, 2))
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    let note = note(&seen.events[0]);
    assert_keys_left(note);
    assert_eq!(
        note,
        "JobQueue deleted: the Redis keys were left in place (jq:{emails}:*, prefix \"jq\", \
         hash tag \"emails\"); `jobqueue` commands still reach them; Deployment/worker scaled \
         from 7 to 2 replicas"
    );
    seen.assert_not_sent("s3cret-pw");
}

#[tokio::test]
async fn restore_without_a_recorded_count_leaves_the_target() {
    // Recorded for another target: not this one's.
    let jq = deleted("restore", Some(status_with_original("Deployment/old", 2)));
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 6))
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.scales.is_empty());
    let note = note(&seen.events[0]);
    assert!(
        note.ends_with(
            "Deployment/worker left at 6 replicas: no original count was recorded to restore"
        ),
        "{note}"
    );
}

#[tokio::test]
async fn zero_scales_the_target_to_zero() {
    let jq = deleted("zero", Some(status_with_original("Deployment/worker", 2)));
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 4))
        .expect(Expect::ScalePatch(WORKER, 0))
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert_eq!(seen.scales, vec![0]);
    let note = note(&seen.events[0]);
    assert_keys_left(note);
    assert!(
        note.ends_with("Deployment/worker scaled from 4 to 0 replicas"),
        "{note}"
    );
}

#[tokio::test]
async fn keep_leaves_the_target_without_reading_it() {
    let jq = deleted("keep", Some(status_with_original("Deployment/worker", 2)));
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    let note = note(&seen.events[0]);
    assert_keys_left(note);
    assert!(
        note.ends_with("Deployment/worker left as it is (onDelete: keep)"),
        "{note}"
    );
}

#[tokio::test]
async fn keep_is_the_default() {
    let mut jq = deleted("keep", None);
    jq.spec.workers = Some(
        serde_json::from_value(json!({"scaleTargetRef": {"name": "worker"}, "maxReplicas": 3}))
            .unwrap(),
    );
    let (ctx, mut api, _) = test_context();
    let (result, _) = Scenario::new(&jq)
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
}

#[tokio::test]
async fn a_queue_without_workers_is_let_go_with_its_event() {
    let jq = queue("emails", URL, "emails").deleted();
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let note = note(&seen.events[0]);
    assert_keys_left(note);
    assert!(note.ends_with("; no workers to scale"), "{note}");
}

#[tokio::test]
async fn a_target_another_owner_scales_is_left_to_it() {
    // At its last reconcile the operator left the target to an HPA.
    let status: JobQueueStatus = serde_json::from_value(json!({
        "conditions": [{
            "type": "Scaling", "status": "False", "reason": "HPAConflict",
            "message": "HorizontalPodAutoscaler default/worker scales Deployment/worker",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
        }],
    }))
    .unwrap();
    let jq = deleted("zero", Some(status));
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    let note = note(&seen.events[0]);
    assert!(
        note.ends_with(
            "Deployment/worker left as it is: the operator was not scaling it (see the \
             Scaling condition)"
        ),
        "{note}"
    );
}

#[tokio::test]
async fn a_target_already_gone_does_not_block_the_deletion() {
    let jq = deleted(
        "restore",
        Some(status_with_original("Deployment/worker", 2)),
    );
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::ScaleNotFound(WORKER))
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    let note = note(&seen.events[0]);
    assert!(
        note.ends_with("Deployment/worker not found: nothing to scale"),
        "{note}"
    );
}

#[tokio::test]
async fn a_refused_scale_keeps_the_finalizer_and_the_retry_finishes_the_cleanup() {
    let jq = deleted(
        "restore",
        Some(status_with_original("Deployment/worker", 2)),
    );
    let (ctx, mut api, _) = test_context();

    // The scale patch is refused: an error, no Event, the finalizer stays.
    let reconcile = tokio::spawn(jobqueue::controller::reconcile(
        Arc::new(jq.clone()),
        ctx.clone(),
    ));
    let get = api.next("GET the scale").await;
    assert_eq!(
        (get.method.clone(), get.uri.clone()),
        (Method::GET, WORKER.path())
    );
    get.respond(json_response(StatusCode::OK, &WORKER.scale(7)));
    let patch = api.next("PATCH the scale").await;
    assert_eq!(patch.method, Method::PATCH, "{}", patch.uri);
    assert!(patch.uri.starts_with(&WORKER.path()), "{}", patch.uri);
    patch.respond(json_response(
        StatusCode::CONFLICT,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "reason": "Conflict", "code": 409, "message": "the object has been modified",
        }),
    ));
    let result = reconcile.await.unwrap();
    assert!(
        matches!(result, Err(jobqueue::controller::Error::Kube(_))),
        "{result:?}"
    );

    // The retry does the same cleanup from the target as it is, and lets the queue go.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 7))
        .expect(Expect::ScalePatch(WORKER, 2))
        .expect(Expect::Event("Normal", "QueueDeleted"))
        .expect(Expect::RemoveFinalizer)
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert_eq!(seen.scales, vec![2]);
}

/// The operator binary over real HTTP: a JobQueue with workers and `onDelete: restore`
/// scales its Deployment up from 1, and once deleted the Deployment is back at 1, a
/// `QueueDeleted` Event is published, the object is gone, the jobs stay.
///
/// The race that lost the original count is made certain: the stand-in holds the
/// JobQueue watch events back from the first status write on, so every reconcile after
/// the first runs on the copy listed at the start (the finalizer, no status), as one
/// brought by the scale did when the write's event came late. Each must keep the 1
/// recorded, not record the 3 the operator set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binary_restores_the_workers_of_a_deleted_queue() {
    const APPS: &str = "/apis/apps/v1";
    const CRD: &str = "/apis/jobqueue.dev/v1alpha1";
    let redis = RedisServer::start();
    let q = redis.queue("gone").await;
    enqueue_more(&q, 25).await;

    let api = StandIn::start().await;
    api.put(
        APPS,
        "deployments",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "worker", "namespace": "jobs"},
            "spec": {"replicas": 1}
        }),
    );
    api.put(
        CRD,
        "jobqueues",
        json!({
            "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
            "metadata": {"name": "gone", "namespace": "jobs", "finalizers": [FINALIZER]},
            "spec": {
                "redis": {"url": redis.url()},
                "hashTag": "gone",
                "reaper": {"interval": "1s"},
                "workers": {
                    "scaleTargetRef": {"name": "worker"},
                    "minReplicas": 1,
                    "maxReplicas": 10,
                    "onDelete": "restore"
                }
            }
        }),
    );
    api.hold_watch_from_status_write("jobqueues");
    let dir = tempfile::tempdir().unwrap();
    let op = OperatorProcess::start(&api, "jobs", dir.path(), &["--no-leader-election"], &[]);
    let replicas = || {
        api.get(APPS, "deployments", "jobs", "worker").unwrap()["spec"]["replicas"]
            .as_i64()
            .unwrap()
    };
    let original =
        || api.get(CRD, "jobqueues", "jobs", "gone").unwrap()["status"]["originalReplicas"].clone();

    // Taken: scaled up for 25 jobs, the original count in the status.
    op.wait_for("3 replicas")
        .until(async || replicas() == 3)
        .await;
    // A third reconcile has started (the period is 1 s), so the second is done: it ran
    // after the first one's writes, on the copy without them.
    let runs = r#"jobqueue_reconcile_runs_total{namespace="jobs",name="gone"}"#;
    op.wait_for("a reconcile on the stale copy done")
        .until(async || op.metric(runs).await.is_some_and(|n| n >= 3.0))
        .await;
    assert!(
        api.held_events() >= 1,
        "the first reconcile's writes were held back from the watch"
    );
    let recorded = json!({"target": "Deployment/worker", "replicas": 1});
    assert_eq!(
        original(),
        recorded,
        "a reconcile on a stale copy replaced the original count"
    );
    api.release_watch();

    // Deleted: marked, then cleaned up and gone.
    let marked = api.delete(CRD, "jobqueues", "jobs", "gone").unwrap();
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    op.wait_for("the JobQueue gone")
        .until(async || api.get(CRD, "jobqueues", "jobs", "gone").is_none())
        .await;
    assert_eq!(
        replicas(),
        1,
        "the Deployment is back at its original replicas"
    );
    let event = api
        .all("events")
        .into_iter()
        .find(|e| e["reason"] == "QueueDeleted")
        .expect("a QueueDeleted event");
    assert_eq!(event["type"], "Normal", "{event}");
    assert_eq!(event["regarding"]["name"], "gone", "{event}");
    let note = event["note"].as_str().unwrap();
    assert!(note.contains("jq:{gone}:*"), "{note}");
    assert!(!note.contains("redis://"), "{note}");
    // The finalizer went by a JSON patch checked against the object; the jobs are there.
    let removal = api
        .log()
        .into_iter()
        .rfind(|r| r.method == "PATCH" && r.path.ends_with("/jobqueues/gone"))
        .expect("the finalizer's removal");
    assert_eq!(removal.content_type, "application/json-patch+json");
    assert_eq!(
        serde_json::from_str::<Value>(&removal.body).unwrap(),
        json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ])
    );
    assert_eq!(q.stats().await.unwrap().pending, 25);
    // Without finalizers a DELETE removes at once.
    assert!(api.delete(APPS, "deployments", "jobs", "worker").is_some());
    assert!(api.get(APPS, "deployments", "jobs", "worker").is_none());
}
