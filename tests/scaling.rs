//! Scaling the workers on backlog, against kube's mock API server (tower-test) and a
//! real Redis the test starts. Each scenario lists the exact requests a reconcile must
//! make, in order; time is the test's clock, moved by hand, so no test waits through a
//! stabilization window. The last one runs the operator binary against the stand-in
//! API server over HTTP.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use jobqueue::crd::{JobQueue, JobQueueStatus, RateLimitSpec, ScaleTargetRef, WorkersSpec};
use jobqueue::queue::{LeaseRef, NewJob, Queue};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use support::fixtures::{JobQueueExt, NS, ScaleTarget, TestClock, deployment, hpa, queue, workers};
use support::mock_api::{Expect, Handle, Scenario, body_text, json_response, test_context_at};
use support::redis::RedisServer;
use support::standin::{OperatorProcess, StandIn, http_get};

const WORKER: ScaleTarget = deployment("worker");

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

/// Claim and ack up to `n` jobs, as busy workers would.
async fn work_off(q: &Queue, n: usize) {
    let leases = q.claim(n, "worker-0", None).await.unwrap();
    assert_eq!(leases.len(), n, "{n} jobs were pending");
    let refs: Vec<LeaseRef<'_>> = leases.iter().map(LeaseRef::from).collect();
    let acked = q.ack_many(&refs).await.unwrap();
    assert!(acked.iter().all(|&a| a));
}

fn metrics_text(registry: &prometheus_client::registry::Registry) -> String {
    jobqueue::controller::metrics::encode(registry)
}

#[tokio::test]
async fn a_backlog_scales_up_from_zero() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("emails").await, 25).await;
    let jq = queue("emails", &redis.url(), "emails").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 3))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    assert_eq!(seen.scales, vec![3]);
    let status = &seen.statuses[0];
    assert_eq!(status.pending, 25);
    assert_eq!(
        (status.desired_replicas, status.current_replicas),
        (Some(3), Some(3))
    );
    assert_eq!(status.last_scale_time, Some(Time(clock.now())));
    let message = "scaled Deployment/worker from 0 to 3 replicas: backlog 25 (25 pending, 0 \
                   processing) needs 3 replicas at 10 per replica";
    assert_eq!(scaling(status), ("True", "ScaledUp", message));
    assert_eq!(seen.events[0]["note"], message);
    assert_eq!(seen.events[0]["regarding"]["name"], "emails");
    let text = metrics_text(&registry);
    for line in [
        r#"jobqueue_desired_replicas{namespace="default",name="emails"} 3"#,
        r#"jobqueue_current_replicas{namespace="default",name="emails"} 3"#,
        r#"jobqueue_scale_operations_total{namespace="default",name="emails",direction="up"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}

#[tokio::test]
async fn a_rate_limit_caps_the_replicas_at_what_it_keeps_busy() {
    let redis = RedisServer::start();
    let q = redis.queue("limited").await;
    enqueue(&q, 200).await;
    // 10 acks of 1024 to 2047 ms: p90 1.9456 s
    let _: () = redis::cmd("HSET")
        .arg(&q.keys().stats)
        .arg("h:10")
        .arg(10)
        .query(&mut redis.conn())
        .unwrap();
    let mut jq = queue("limited", &redis.url(), "limited").with_workers(WorkersSpec {
        concurrency: 2,
        ..workers(1, 50)
    });
    jq.spec.rate_limit = Some(RateLimitSpec {
        max: 5,
        per: "1s".into(),
    });
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    // 5 claims/s × 1.9456 s ÷ 2 per replica = 4.9: 5 replicas, not the backlog's 20
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::RecordOriginal("Deployment/worker", 2))
        .expect(Expect::ScalePatch(WORKER, 5))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![5]);
    let status = &seen.statuses[0];
    assert_eq!(status.desired_replicas, Some(5));
    let c = status
        .condition("RateLimited")
        .expect("a RateLimited condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        (
            "True",
            "RateLimitCapsReplicas",
            "rate limit 5/1s (5 claims/s) × processing time 1.94s (p90) ÷ concurrency 2 \
             keeps 5 replicas busy; the backlog asks for 20: capped at 5"
        )
    );
    // the limit written into the queue's meta, as the scripts read it
    assert_eq!(
        q.rate_limits().await.unwrap().queue,
        Some("5/1s".parse().unwrap())
    );

    // the limit removed: the backlog alone decides again, and the condition goes
    let mut jq = jq.with_status(status.clone());
    jq.spec.rate_limit = None;
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 5))
        .expect(Expect::ScalePatch(WORKER, 9))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.statuses[0].condition("RateLimited").is_none());
    assert_eq!(q.rate_limits().await.unwrap().queue, None);
}

#[tokio::test]
async fn running_jobs_count_and_the_step_bounds_a_scale_up() {
    let redis = RedisServer::start();
    let q = redis.queue("bulk").await;
    enqueue(&q, 200).await;
    // 30 are being worked on: they count too.
    assert_eq!(q.claim(30, "w", None).await.unwrap().len(), 30);
    let jq = queue("bulk", &redis.url(), "bulk").with_workers(workers(1, 50));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 2))
        .expect(Expect::RecordOriginal("Deployment/worker", 2))
        .expect(Expect::ScalePatch(WORKER, 6))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert_eq!((status.pending, status.processing), (170, 30));
    assert_eq!(
        scaling(status).2,
        "scaled Deployment/worker from 2 to 6 replicas: backlog 200 (170 pending, 30 \
         processing) needs 20 replicas at 10 per replica; at most +4 per reconcile \
         (maxScaleUpStep)"
    );
}

#[tokio::test]
async fn scale_down_waits_for_the_stabilization_window() {
    let redis = RedisServer::start();
    let q = redis.queue("drain").await;
    enqueue(&q, 40).await;
    let jq = queue("drain", &redis.url(), "drain").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);

    // 40 jobs, 4 replicas: as it should be.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 4))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(scaling(&seen.statuses[0]).1, "Steady");
    let jq = jq.with_status(seen.statuses[0].clone());

    // The workers finish everything: the backlog asks for zero, the window holds 4.
    work_off(&q, 40).await;
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 4))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = seen.statuses[0].clone();
    assert_eq!(
        scaling(&status),
        (
            "True",
            "Stabilizing",
            "keeping 4 replicas of Deployment/worker: backlog 0 (0 pending, 0 processing) \
             needs no replica, but 4 were recommended within scaleDownStabilization (5m)"
        )
    );
    assert_eq!(
        (status.desired_replicas, status.current_replicas),
        (Some(4), Some(4))
    );
    let jq = jq.with_status(status);

    // One second before the window ends: still held, and nothing to write.
    clock.advance(289);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 4))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.scales.is_empty() && seen.statuses.is_empty());

    // Five minutes after 4 was last recommended: down to zero.
    clock.advance(1);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 4))
        .expect(Expect::ScalePatch(WORKER, 0))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledDown"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![0]);
    let status = &seen.statuses[0];
    assert_eq!(scaling(status).1, "ScaledDown");
    assert_eq!(
        (status.desired_replicas, status.current_replicas),
        (Some(0), Some(0))
    );
    assert_eq!(status.last_scale_time, Some(Time(clock.now())));
    let line =
        r#"jobqueue_scale_operations_total{namespace="default",name="drain",direction="down"} 1"#;
    let text = metrics_text(&registry);
    assert!(text.contains(line), "missing {line} in\n{text}");
}

#[tokio::test]
async fn nothing_changes_so_nothing_is_patched() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("calm").await, 25).await;
    let jq = queue("calm", &redis.url(), "calm").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 3))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert_eq!(
        scaling(status),
        (
            "True",
            "Steady",
            "3 replicas of Deployment/worker: backlog 25 (25 pending, 0 processing) needs 3 \
             replicas at 10 per replica"
        )
    );
    assert_eq!(status.last_scale_time, None, "the operator has not scaled");
    let jq = jq.with_status(status.clone());
    for _ in 0..3 {
        clock.advance(10);
        let (result, seen) = Scenario::new(&jq)
            .expect(Expect::TargetRead(WORKER, 3))
            .run(&ctx, &mut api)
            .await;
        result.unwrap();
        assert!(seen.scales.is_empty(), "no scale patch");
        assert!(seen.statuses.is_empty(), "no status patch");
        assert!(seen.events.is_empty(), "no event");
    }
}

#[tokio::test]
async fn a_missing_target_is_a_condition_not_a_failure() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("orphan").await, 5).await;
    let jq = queue("orphan", &redis.url(), "orphan").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::ScaleNotFound(WORKER))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "TargetNotFound"))
        .run(&ctx, &mut api)
        .await;
    // The rest of the reconcile went on: counted, healthy, requeued as usual.
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    let status = &seen.statuses[0];
    assert_eq!(status.pending, 5);
    assert_eq!(status.condition("Ready").unwrap().status, "True");
    let message = "Deployment/worker (apps/v1) not found in namespace default: \
                   deployments.apps \"worker\" not found";
    assert_eq!(scaling(status), ("False", "TargetNotFound", message));
    assert_eq!(seen.events[0]["note"], message);
    assert_eq!(
        (status.desired_replicas, status.current_replicas),
        (None, None)
    );

    // Still missing: no new Event, nothing to write.
    let jq = jq.with_status(status.clone());
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::ScaleNotFound(WORKER))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(seen.statuses.is_empty() && seen.events.is_empty());

    // The Deployment appears (with no replicas): it is scaled up at once.
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 1))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(scaling(&seen.statuses[0]).1, "ScaledUp");
}

#[tokio::test]
async fn an_hpa_on_the_same_target_is_not_fought() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("contested").await, 100).await;
    let jq = queue("contested", &redis.url(), "contested").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);
    let bystanders = vec![
        hpa("api", "apps/v1", "Deployment", "api"),
        hpa("sts", "apps/v1", "StatefulSet", "worker"),
        hpa("foreign", "example.com/v1", "Deployment", "worker"),
    ];
    let mut hpas = bystanders.clone();
    hpas.push(hpa("worker-cpu", "apps/v1", "Deployment", "worker"));
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 2))
        .expect(Expect::ListHpas(hpas))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "HPAConflict"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        seen.scales.is_empty(),
        "the operator does not fight the HPA"
    );
    let status = &seen.statuses[0];
    let message = "HorizontalPodAutoscaler default/worker-cpu scales Deployment/worker: the \
                   operator leaves it alone (delete the HPA, or spec.workers)";
    assert_eq!(scaling(status), ("False", "HPAConflict", message));
    assert_eq!(
        (status.desired_replicas, status.current_replicas),
        (None, Some(2))
    );
    let text = metrics_text(&registry);
    assert!(!text.contains("jobqueue_desired_replicas{"), "{text}");
    assert!(
        text.contains(r#"jobqueue_current_replicas{namespace="default",name="contested"} 2"#),
        "{text}"
    );

    // The HPA is deleted: the operator takes over, stepping up from the current 2.
    let jq = jq.with_status(status.clone());
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 2))
        .expect(Expect::ListHpas(bystanders))
        .expect(Expect::ListScaledObjects(vec![]))
        .expect(Expect::RecordOriginal("Deployment/worker", 2))
        .expect(Expect::ScalePatch(WORKER, 6))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![6]);
    assert_eq!(scaling(&seen.statuses[0]).0, "True");
}

#[tokio::test]
async fn any_kind_with_a_scale_subresource() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("pool").await, 7).await;
    let pool = ScaleTarget {
        api_version: "example.com/v1",
        plural: "workerpools",
        name: "pool",
    };
    let jq = queue("pool", &redis.url(), "pool").with_workers(WorkersSpec {
        scale_target_ref: ScaleTargetRef {
            api_version: "example.com/v1".into(),
            kind: "WorkerPool".into(),
            name: "pool".into(),
        },
        ..workers(0, 3)
    });
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(pool, 0))
        .expect(Expect::RecordOriginal("WorkerPool/pool", 0))
        .expect(Expect::ScalePatch(pool, 1))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        scaling(&seen.statuses[0])
            .2
            .starts_with("scaled WorkerPool/pool from 0 to 1")
    );
}

#[tokio::test]
async fn an_unreachable_queue_leaves_the_replicas_alone() {
    // Port 1: nothing listens there, and no test server can take it (the harness's
    // servers get ports from the ephemeral range).
    let jq = queue("dark", "redis://127.0.0.1:1", "dark").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    // No scale request at all: without the backlog there is nothing to decide.
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap_err();
    let (s, reason, message) = scaling(&seen.statuses[0]);
    assert_eq!((s, reason), ("Unknown", "RedisUnreachable"));
    assert!(
        message.contains("replicas are left as they are"),
        "{message}"
    );
}

#[tokio::test]
async fn removing_the_workers_removes_the_scaling_status() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("retire").await, 10).await;
    let jq = queue("retire", &redis.url(), "retire").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, registry) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 1))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let mut jq = jq.with_status(seen.statuses[0].clone());
    jq.spec.workers = None;
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert!(status.condition("Scaling").is_none(), "{status:?}");
    assert_eq!(
        (status.desired_replicas, status.current_replicas),
        (None, None)
    );
    let text = metrics_text(&registry);
    assert!(!text.contains("jobqueue_current_replicas{"), "{text}");
}

/// A stateful stand-in for the API server: one Deployment whose replicas follow the
/// scale patches, the JobQueue whose status follows the status patches, no HPA. It
/// logs every request, so the test can check each reconcile's calls.
#[derive(Default)]
struct Cluster {
    replicas: i32,
    status: Option<JobQueueStatus>,
    log: Vec<String>,
}

fn serve(mut handle: Handle, cluster: Arc<Mutex<Cluster>>, jq: JobQueue) {
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let uri = request.uri().to_string();
            let body = body_text(request.into_body()).await;
            let mut c = cluster.lock().unwrap();
            let status_uri = format!(
                "/apis/jobqueue.dev/v1alpha1/namespaces/{NS}/jobqueues/{}/status?&force=true&fieldManager=jobqueue-operator",
                jq.metadata.name.as_deref().unwrap()
            );
            let response = if method == Method::GET && uri == WORKER.path() {
                c.log.push("GET scale".into());
                json_response(StatusCode::OK, &WORKER.scale(c.replicas))
            } else if method == Method::GET
                && uri == format!("/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers?")
            {
                c.log.push("LIST hpas".into());
                let list = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList", "metadata": {}, "items": []});
                json_response(StatusCode::OK, &list)
            } else if method == Method::GET
                && uri == format!("/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects?")
            {
                // No KEDA in this cluster.
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound", "code": 404});
                json_response(StatusCode::NOT_FOUND, &status)
            } else if method == Method::PATCH
                && uri == format!("{}?&fieldManager=jobqueue-operator", WORKER.path())
            {
                let patch: Value = serde_json::from_str(&body).unwrap();
                let to = patch["spec"]["replicas"].as_i64().expect("replicas") as i32;
                c.replicas = to;
                c.log.push(format!("PATCH scale {to}"));
                json_response(StatusCode::OK, &WORKER.scale(to))
            } else if method == Method::PATCH && uri == status_uri.replace("&force=true", "") {
                // The original count, recorded before the first scale.
                let patch: Value = serde_json::from_str(&body).unwrap();
                let record = patch["status"]["originalReplicas"].clone();
                c.log.push(format!("PATCH original {}", record["replicas"]));
                let mut status = c.status.clone().unwrap_or_default();
                status.original_replicas = Some(serde_json::from_value(record).unwrap());
                c.status = Some(status.clone());
                let mut applied = jq.clone();
                applied.status = Some(status);
                json_response(StatusCode::OK, &applied)
            } else if method == Method::PATCH && uri == status_uri {
                let patch: Value = serde_json::from_str(&body).unwrap();
                let status: JobQueueStatus =
                    serde_json::from_value(patch["status"].clone()).unwrap();
                c.status = Some(status.clone());
                c.log.push("PATCH status".into());
                let mut applied = jq.clone();
                applied.status = Some(status);
                json_response(StatusCode::OK, &applied)
            } else if method == Method::POST && uri.starts_with("/apis/events.k8s.io/v1/") {
                let event: Value = serde_json::from_str(&body).unwrap();
                c.log.push(format!(
                    "POST event {}",
                    event["reason"].as_str().unwrap_or_default()
                ));
                json_response(StatusCode::OK, &event)
            } else {
                panic!("unexpected request: {method} {uri}");
            };
            drop(c);
            send.send_response(response);
        }
    });
}

/// The backlog goes up, down, up, flickers and drains, one reconcile every 10 s: the
/// scale patches follow, in steps up and only after the window down.
#[tokio::test]
async fn the_replicas_follow_the_backlog_through_real_redis() {
    let redis = RedisServer::start();
    let q = redis.queue("waves").await;
    let jq = queue("waves", &redis.url(), "waves").with_workers(WorkersSpec {
        scale_down_stabilization: "60s".into(),
        ..workers(0, 10)
    });
    let clock = TestClock::new();
    let (ctx, api, registry) = test_context_at(&clock);
    let cluster = Arc::new(Mutex::new(Cluster::default()));
    serve(api.into_handle(), cluster.clone(), jq.clone());

    // (seconds since the start, what happens in Redis just before that reconcile)
    enum Act {
        Enqueue(usize),
        /// Claim this many and leave them processing.
        Claim(usize),
        /// Claim and ack this many (plus ack whatever was left processing).
        WorkOff(usize),
        Nothing,
    }
    let plan: Vec<(i64, Act, Option<i32>)> = vec![
        (0, Act::Enqueue(100), Some(4)), // up from zero, +4 at most
        (10, Act::Nothing, Some(8)),
        (20, Act::Nothing, Some(10)), // the maximum
        (30, Act::Claim(10), None),   // 90 pending + 10 processing: still 10
        (40, Act::WorkOff(60), None), // 30 left: 3 wanted, 10 held by the window
        (50, Act::Nothing, None),
        (60, Act::Nothing, None),
        (70, Act::Nothing, None),
        (80, Act::Nothing, None),
        (90, Act::Nothing, Some(3)), // 10 (at 30 s) left the 60 s window
        (100, Act::Enqueue(70), Some(7)),
        (110, Act::Nothing, Some(10)),
        (120, Act::WorkOff(100), None), // drained: 0 wanted, 10 held
        (130, Act::Nothing, None),
        (140, Act::Enqueue(50), None), // a flicker: 5 wanted, below the 10 held
        (150, Act::WorkOff(50), None), // and gone again
        (160, Act::Nothing, None),
        (170, Act::Nothing, Some(5)), // 10 (at 110 s) left; 5 (at 140 s) holds
        (180, Act::Nothing, None),
        (190, Act::Nothing, None),
        (200, Act::Nothing, Some(0)), // 5 (at 140 s) left: nothing to do
        (210, Act::Nothing, None),
    ];

    let mut jq = jq;
    let mut processing = Vec::new();
    let mut patched: Vec<Option<i32>> = Vec::new();
    let start = clock.now();
    for (at, act, _) in &plan {
        match act {
            Act::Enqueue(n) => enqueue(&q, *n).await,
            Act::Claim(n) => processing = q.claim(*n, "slow", None).await.unwrap(),
            Act::WorkOff(n) => {
                let refs: Vec<LeaseRef<'_>> = processing.iter().map(LeaseRef::from).collect();
                q.ack_many(&refs).await.unwrap();
                processing.clear();
                work_off(&q, *n).await;
            }
            Act::Nothing => {}
        }
        let elapsed = clock.now().duration_since(start).as_secs();
        clock.advance(at - elapsed);
        jq.status = cluster.lock().unwrap().status.clone();
        let result = jobqueue::controller::reconcile(Arc::new(jq.clone()), ctx.clone()).await;
        assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));

        let mut log = std::mem::take(&mut cluster.lock().unwrap().log);
        assert_eq!(log[..2], ["GET scale", "LIST hpas"], "at {at}s: {log:?}");
        if *at == 0 {
            // Taken at 0: recorded before the first scale, once.
            assert_eq!(log[2], "PATCH original 0", "at {at}s: {log:?}");
            log.remove(2);
        }
        let patch = log
            .iter()
            .find_map(|l| l.strip_prefix("PATCH scale ").map(|n| n.parse().unwrap()));
        if let Some(to) = patch {
            // Scale, write the status, tell people: in that order, once.
            assert_eq!(log[2], format!("PATCH scale {to}"), "at {at}s: {log:?}");
            assert_eq!(log[3], "PATCH status", "at {at}s: {log:?}");
            assert!(log[4].starts_with("POST event Scaled"), "at {at}s: {log:?}");
            assert_eq!(log.len(), 5, "at {at}s: {log:?}");
        } else {
            assert!(
                log[2..].iter().all(|l| l == "PATCH status"),
                "at {at}s: {log:?}"
            );
        }
        patched.push(patch);
    }

    let expected: Vec<Option<i32>> = plan.iter().map(|(_, _, p)| *p).collect();
    assert_eq!(patched, expected, "scale patches per reconcile");
    let sequence: Vec<i32> = patched.into_iter().flatten().collect();
    assert_eq!(sequence, vec![4, 8, 10, 3, 7, 10, 5, 0]);

    let c = cluster.lock().unwrap();
    assert_eq!(c.replicas, 0);
    let status = c.status.as_ref().unwrap();
    assert_eq!((status.pending, status.processing), (0, 0));
    assert_eq!(scaling(status).1, "AtMinReplicas");
    assert_eq!(
        status.last_scale_time,
        Some(Time(
            start + k8s_openapi::jiff::SignedDuration::from_secs(200)
        ))
    );
    let text = metrics_text(&registry);
    for line in [
        r#"jobqueue_scale_operations_total{namespace="default",name="waves",direction="up"} 5"#,
        r#"jobqueue_scale_operations_total{namespace="default",name="waves",direction="down"} 3"#,
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}

/// The operator binary, its HTTP API calls real: a Deployment follows a backlog in a real
/// Redis up in steps, back to zero once drained, and is left alone once an HPA claims it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binary_scales_a_deployment_over_http() {
    const APPS: &str = "/apis/apps/v1";
    const CRD: &str = "/apis/jobqueue.dev/v1alpha1";
    let redis = RedisServer::start();
    let q = redis.queue("e2e").await;
    enqueue(&q, 100).await;

    let api = StandIn::start().await;
    api.put(
        APPS,
        "deployments",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "worker", "namespace": "jobs"},
            "spec": {"replicas": 0}
        }),
    );
    api.put(
        CRD,
        "jobqueues",
        json!({
            "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
            "metadata": {"name": "e2e", "namespace": "jobs"},
            "spec": {
                "redis": {"url": redis.url()},
                "hashTag": "e2e",
                "reaper": {"interval": "1s"},
                "workers": {
                    "scaleTargetRef": {"name": "worker"},
                    "maxReplicas": 10,
                    "targetBacklogPerReplica": 10,
                    "scaleDownStabilization": "2s",
                    "maxScaleUpStep": 4
                }
            }
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let op = OperatorProcess::start(&api, "jobs", dir.path(), &["--no-leader-election"], &[]);

    let replicas = || {
        api.get(APPS, "deployments", "jobs", "worker").unwrap()["spec"]["replicas"]
            .as_i64()
            .unwrap()
    };
    let scale_patches = || -> Vec<i64> {
        api.log()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/deployments/worker/scale"))
            .map(|r| {
                assert_eq!(r.content_type, "application/merge-patch+json", "{r:?}");
                assert_eq!(r.query, "&fieldManager=jobqueue-operator", "{r:?}");
                let patch: Value = serde_json::from_str(&r.body).unwrap();
                patch["spec"]["replicas"].as_i64().unwrap()
            })
            .collect()
    };
    let scaling_reason = || -> Option<String> {
        let jq = api.get(CRD, "jobqueues", "jobs", "e2e")?;
        let conditions = jq["status"]["conditions"].as_array()?.clone();
        let c = conditions.into_iter().find(|c| c["type"] == "Scaling")?;
        c["reason"].as_str().map(String::from)
    };
    // Up in steps of 4 to the maximum, one reconcile each.
    op.wait_for("10 replicas")
        .until(async || replicas() == 10)
        .await;
    assert_eq!(scale_patches(), vec![4, 8, 10]);
    op.wait_for("the status at the maximum")
        .until(async || scaling_reason().as_deref() == Some("AtMaxReplicas"))
        .await;
    let jq = api.get(CRD, "jobqueues", "jobs", "e2e").unwrap();
    let st = &jq["status"];
    assert_eq!(
        (&st["desiredReplicas"], &st["currentReplicas"]),
        (&json!(10), &json!(10)),
        "{st}"
    );
    let scaled_up = || {
        api.all("events")
            .into_iter()
            .filter(|e| e["reason"] == "ScaledUp")
            .count()
    };
    op.wait_for("three ScaledUp Events")
        .until(async || scaled_up() == 3)
        .await;

    // Drained: down to zero, in one patch, once the window has passed.
    let leases = q.claim(100, "w", None).await.unwrap();
    let refs: Vec<LeaseRef<'_>> = leases.iter().map(LeaseRef::from).collect();
    q.ack_many(&refs).await.unwrap();
    op.wait_for("0 replicas")
        .until(async || replicas() == 0)
        .await;
    assert_eq!(scale_patches(), vec![4, 8, 10, 0]);
    op.wait_for("the status at the minimum")
        .until(async || scaling_reason().as_deref() == Some("AtMinReplicas"))
        .await;

    // An HPA claims the Deployment: new backlog, but the operator keeps out.
    api.put(
        "/apis/autoscaling/v2",
        "horizontalpodautoscalers",
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "worker-cpu", "namespace": "jobs"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "worker"},
                "minReplicas": 1, "maxReplicas": 3
            }
        }),
    );
    enqueue(&q, 50).await;
    op.wait_for("HPAConflict with the new backlog counted")
        .until(async || {
            let pending =
                api.get(CRD, "jobqueues", "jobs", "e2e").unwrap()["status"]["pending"] == 50;
            pending && scaling_reason().as_deref() == Some("HPAConflict")
        })
        .await;
    assert_eq!(
        scale_patches(),
        vec![4, 8, 10, 0],
        "no patch against the HPA"
    );
    assert_eq!(replicas(), 0);

    let (code, metrics) = http_get(&op.metrics, "/metrics").await.expect("/metrics");
    assert_eq!(code, 200);
    for line in [
        r#"jobqueue_scale_operations_total{namespace="jobs",name="e2e",direction="up"} 3"#,
        r#"jobqueue_scale_operations_total{namespace="jobs",name="e2e",direction="down"} 1"#,
        r#"jobqueue_current_replicas{namespace="jobs",name="e2e"} 0"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
}

/// Enqueue `n` jobs delayed by `delay`, and wait (on Redis's clock) until they are due.
async fn enqueue_due(q: &Queue, n: usize, delay: Duration) {
    let jobs = (0..n)
        .map(|i| NewJob::new(format!("later {i}")).delay(delay))
        .collect();
    q.enqueue_many(jobs).await.unwrap();
    let n = n as u64;
    support::eventually::eventually("the delayed jobs to fall due", async || {
        q.stats().await.unwrap().due == n
    })
    .await;
}

/// Workers at zero, delayed jobs fall due: nothing claims, so nothing else promotes
/// them. A reconcile promotes what its reaper budget allows (10 calls of batchSize 1)
/// and the backlog counts the rest as due: up from zero for all 25 at once.
#[tokio::test]
async fn due_delayed_jobs_scale_up_from_zero() {
    let redis = RedisServer::start();
    let q = redis.queue("later").await;
    enqueue_due(&q, 25, Duration::from_millis(50)).await;
    let mut jq = queue("later", &redis.url(), "later").with_workers(workers(0, 10));
    jq.spec.reaper.batch_size = 1;
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 3))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![3]);
    let status = &seen.statuses[0];
    assert_eq!((status.pending, status.due, status.delayed), (10, 15, 15));
    assert_eq!(
        scaling(status).2,
        "scaled Deployment/worker from 0 to 3 replicas: backlog 25 (10 pending, 15 due, 0 \
         processing) needs 3 replicas at 10 per replica"
    );
}

/// A job scheduled an hour ahead is no work yet: at `minReplicas: 0` the workers stay
/// at zero until it falls due.
#[tokio::test]
async fn a_job_scheduled_far_ahead_leaves_zero_alone() {
    let redis = RedisServer::start();
    let q = redis.queue("someday").await;
    q.enqueue(NewJob::new("next hour").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let jq = queue("someday", &redis.url(), "someday").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::TargetRead(WORKER, 0))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert!(
        seen.scales.is_empty(),
        "no scale patch for a job not yet due"
    );
    let status = &seen.statuses[0];
    assert_eq!((status.delayed, status.due, status.pending), (1, 0, 0));
    assert_eq!(scaling(status).1, "AtMinReplicas");
}
