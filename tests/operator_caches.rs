//! The operator at scale and in recovery, against kube's mock API server and a real
//! Redis: reconciles that read the Secrets, the HPAs and the targets from the reflector
//! caches send no GET and no LIST; a status whose counts alone changed is written at
//! most once per `--status-interval`; a queue whose Redis is down is retried within one
//! `reaper.interval`, however many times it failed, and publishes its counts on the
//! first reconcile after Redis is back. The last test runs the operator binary against
//! the stand-in API server: a Secret created is acted on at once, not after a backoff.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jobqueue::controller::caches::Caches;
use jobqueue::controller::caches::scaled_object_resource;
use jobqueue::controller::error_policy;
use jobqueue::queue::{NewJob, Queue};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::json;
use support::fixtures::{JobQueueExt, NS, ScaleTarget, TestClock, deployment, hpa, queue, workers};
use support::mock_api::{Expect, Scenario, scaled_object, test_context_tuned};
use support::redis::RedisServer;
use support::standin::{OperatorProcess, StandIn};

const WORKER: ScaleTarget = deployment("worker");

async fn enqueue(q: &Queue, n: usize) {
    let jobs = (0..n).map(|i| NewJob::new(format!("job {i}"))).collect();
    q.enqueue_many(jobs).await.unwrap();
}

/// A synced store holding `objects`, as a reflector leaves it after its first list.
fn synced<K>(objects: Vec<K>) -> kube::runtime::reflector::Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut writer: Writer<K> = Writer::default();
    let store = writer.as_reader();
    writer.apply_watcher_event(&watcher::Event::Init);
    for obj in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(obj));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

fn worker_deployment(replicas: i32) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("worker".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            ..Default::default()
        }),
        status: None,
    }
}

fn caches(secrets: Vec<Secret>, hpas: Vec<HorizontalPodAutoscaler>, replicas: i32) -> Caches {
    Caches {
        secrets: Some(synced(secrets)),
        hpas: Some(synced(hpas)),
        deployments: Some(synced(vec![worker_deployment(replicas)])),
        stateful_sets: Some(synced(Vec::new())),
        scaled_objects: Some(synced_scaled_objects(Vec::new())),
        keda_installed: Some(true),
    }
}

/// A synced cache of KEDA ScaledObjects (a dynamic type) holding `objects`.
fn synced_scaled_objects(objects: Vec<serde_json::Value>) -> Store<DynamicObject> {
    let mut writer = Writer::<DynamicObject>::new(scaled_object_resource());
    let store = writer.as_reader();
    writer.apply_watcher_event(&watcher::Event::Init);
    for obj in objects {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        writer.apply_watcher_event(&watcher::Event::InitApply(obj));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

/// The Secret, the target's replicas and the HPAs come from the caches: the reconcile's
/// only requests are its writes (the scale, the status, the Event).
#[tokio::test]
async fn cached_reads_send_no_get_and_no_list() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("cached").await, 25).await;
    let jq = queue("cached", "unused", "cached")
        .with_url_secret("redis-creds", "url")
        .with_workers(workers(0, 10));
    let clock = TestClock::new();
    let cached = caches(
        vec![secret("redis-creds", &[("url", &redis.url())])],
        vec![hpa("api", "apps/v1", "Deployment", "api")],
        0,
    );
    let (ctx, mut api, _) = test_context_tuned(&clock, |_| {}, cached);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 3))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    assert_eq!(seen.statuses[0].pending, 25);
    assert_eq!(seen.scales, vec![3]);
}

/// Right after a scale, the Deployment cache may not have seen it yet: the next
/// reconcile reads the target from the API until the cache shows the replicas set, and
/// scales on from there (not from the stale count, to the same replicas again).
#[tokio::test]
async fn a_target_cache_behind_the_last_scale_is_not_trusted() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("lagging").await, 100).await;
    let jq = queue("lagging", &redis.url(), "lagging").with_workers(workers(0, 10));
    let clock = TestClock::new();
    // The cache says 0 throughout: it never sees the scale to 4.
    let (ctx, mut api, _) = test_context_tuned(&clock, |_| {}, caches(Vec::new(), Vec::new(), 0));
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 4))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.scales, vec![4]);
    let jq = jq.with_status(seen.statuses[0].clone());
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::GetScale(WORKER, 4))
        .expect(Expect::ScalePatch(WORKER, 8))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(
        seen.scales,
        vec![8],
        "scaled on from the replicas set, read from the API"
    );
}

/// An HPA in the cache claims the target as one listed would: no LIST, no GET.
#[tokio::test]
async fn a_cached_hpa_claims_the_target_without_a_list() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("contested").await, 100).await;
    let jq = queue("contested", &redis.url(), "contested").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let cached = caches(
        Vec::new(),
        vec![hpa("worker-cpu", "apps/v1", "Deployment", "worker")],
        2,
    );
    let (ctx, mut api, _) = test_context_tuned(&clock, |_| {}, cached);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "HPAConflict"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let c = seen.statuses[0].condition("Scaling").unwrap();
    assert_eq!(
        (c.reason.as_str(), seen.statuses[0].current_replicas),
        ("HPAConflict", Some(2))
    );
}

/// A ScaledObject on the target comes from the cache too: refused without a LIST.
#[tokio::test]
async fn a_cached_scaled_object_claims_the_target_without_a_list() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("keda").await, 100).await;
    let jq = queue("keda", &redis.url(), "keda").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let mut cached = caches(Vec::new(), Vec::new(), 2);
    cached.scaled_objects = Some(synced_scaled_objects(vec![scaled_object(
        "worker-so",
        "Deployment",
        "worker",
        true,
    )]));
    let (ctx, mut api, _) = test_context_tuned(&clock, |_| {}, cached);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "ScaledObjectConflict"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let c = seen.statuses[0].condition("Scaling").unwrap();
    assert_eq!(c.reason, "ScaledObjectConflict", "{}", c.message);
}

/// Without KEDA (its API unknown as the controller started) no ScaledObject is listed.
#[tokio::test]
async fn without_keda_no_scaled_object_is_listed() {
    let redis = RedisServer::start();
    enqueue(&redis.queue("nokeda").await, 25).await;
    let jq = queue("nokeda", &redis.url(), "nokeda").with_workers(workers(0, 10));
    let clock = TestClock::new();
    let mut cached = caches(Vec::new(), Vec::new(), 0);
    cached.scaled_objects = None;
    cached.keda_installed = Some(false);
    let (ctx, mut api, _) = test_context_tuned(&clock, |_| {}, cached);
    let (result, _) = Scenario::new(&jq)
        .expect(Expect::RecordOriginal("Deployment/worker", 0))
        .expect(Expect::ScalePatch(WORKER, 3))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "ScaledUp"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
}

/// What the caches do not hold is read from the API, as without caches: a Secret not
/// (yet) in the cache, a target of another kind.
#[tokio::test]
async fn a_cache_miss_reads_from_the_api() {
    let redis = RedisServer::start();
    let jq = queue("missed", "unused", "missed")
        .with_url_secret("redis-creds", "url")
        .with_workers(workers(0, 10));
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_tuned(&clock, |_| {}, caches(Vec::new(), Vec::new(), 0));
    // The Deployment is cached; an empty namespace of Secrets is not proof of absence.
    let (result, _) = Scenario::new(&jq)
        .expect(Expect::Secret("redis-creds", vec![("url", redis.url())]))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
}

/// Counts alone are written at most once per `--status-interval`; a condition that
/// changes is written at once.
#[tokio::test]
async fn counts_alone_are_written_at_most_once_per_status_interval() {
    let redis = RedisServer::start();
    let q = redis.queue("busy").await;
    enqueue(&q, 5).await;
    let jq = queue("busy", &redis.url(), "busy");
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_tuned(
        &clock,
        |s| s.status_interval = Duration::from_secs(30),
        Caches::default(),
    );
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let first = seen.statuses[0].clone();
    assert_eq!(first.pending, 5);

    // 10 s later, 3 more jobs: the counts changed, nothing else did. No write.
    enqueue(&q, 3).await;
    clock.advance(10);
    let jq = jq.with_status(first.clone());
    let (result, _) = Scenario::new(&jq).run(&ctx, &mut api).await;
    result.unwrap();

    // 30 s after the write: the counts are written.
    clock.advance(20);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.statuses[0].pending, 8);
    let written = seen.statuses[0].clone();

    // Redis goes away 1 s later: the conditions change, written at once.
    drop(redis);
    clock.advance(1);
    let jq = jq.with_status(written);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    assert!(result.is_err());
    let ready = seen.statuses[0].condition("Ready").unwrap();
    assert_eq!(ready.reason, "RedisUnreachable");
}

/// However often Redis could not be read, the next try is at most one reaper interval
/// away; the first reconcile after Redis is back publishes the counts.
#[tokio::test]
async fn redis_back_is_acted_on_within_one_reaper_interval() {
    let mut redis = RedisServer::start();
    let jq = queue("blip", &redis.url(), "blip");
    let interval = Duration::from_secs(10);
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_tuned(
        &clock,
        |s| {
            s.backoff_initial = Duration::from_secs(1);
            s.backoff_max = Duration::from_secs(300);
        },
        Caches::default(),
    );
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let mut jq = jq.with_status(seen.statuses[0].clone());

    redis.kill();
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    let err = result.expect_err("Redis is down");
    jq = jq.with_status(seen.statuses[0].clone());
    // The controller calls the error policy after each failed reconcile.
    let arc = Arc::new(jq.clone());
    let delays: Vec<Duration> = (0..12)
        .map(|_| match error_policy(arc.clone(), &err, ctx.clone()) {
            a if a == Action::requeue(Duration::ZERO) => Duration::ZERO,
            a => (1..=300)
                .map(Duration::from_secs)
                .find(|&d| a == Action::requeue(d))
                .unwrap_or_else(|| panic!("an unexpected action {a:?}")),
        })
        .collect();
    let secs: Vec<u64> = delays.iter().map(|d| d.as_secs()).collect();
    assert_eq!(
        secs,
        vec![1, 2, 4, 8, 10, 10, 10, 10, 10, 10, 10, 10],
        "the retry delays after 1..12 failures (reaper.interval 10s)"
    );
    assert!(delays.iter().all(|&d| d <= interval));

    redis.restart();
    enqueue(&redis.queue("blip").await, 7).await;
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Normal", "Recovered"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap(), Action::requeue(interval));
    assert_eq!(seen.statuses[0].pending, 7, "the counts are published");
    assert_eq!(seen.statuses[0].condition("Ready").unwrap().status, "True");
}

/// The operator binary against the stand-in: a queue whose Secret is missing fails;
/// creating the Secret makes it ready at once, though its backoff (and its reaper
/// interval) are an hour.
#[tokio::test]
async fn a_secret_created_is_acted_on_at_once() {
    let redis = RedisServer::start();
    let api = StandIn::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut jq = json!({
        "apiVersion": "jobqueue.dev/v1alpha1", "kind": "JobQueue",
        "metadata": {"name": "late", "namespace": NS},
        "spec": {
            "redis": {"urlSecretRef": {"name": "late-creds", "key": "url"}},
            "hashTag": "late",
            "reaper": {"interval": "1h"}
        }
    });
    jq["spec"]["redis"]["url"] = serde_json::Value::Null;
    api.put("/apis/jobqueue.dev/v1alpha1", "jobqueues", jq);
    let op = OperatorProcess::start(
        &api,
        NS,
        dir.path(),
        &[
            "--no-leader-election",
            "--namespace",
            NS,
            "--backoff-initial",
            "1h",
            "--backoff-max",
            "1h",
        ],
        &[],
    );
    let ready = |api: &StandIn| {
        api.get("/apis/jobqueue.dev/v1alpha1", "jobqueues", NS, "late")
            .and_then(|q| {
                q["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Ready")
                    .map(|c| {
                        let (status, reason) = (c["status"].as_str(), c["reason"].as_str());
                        format!(
                            "{}/{}",
                            status.unwrap_or_default(),
                            reason.unwrap_or_default()
                        )
                    })
            })
    };
    op.wait_for("the Secret reported missing")
        .until(async || (ready(&api).as_deref() == Some("False/SecretNotFound")).then_some(()))
        .await;
    api.put(
        "/api/v1",
        "secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "late-creds", "namespace": NS},
            "data": {"url": base64(&redis.url())}
        }),
    );
    op.wait_for("the queue ready once its Secret exists")
        .until(async || {
            ready(&api)
                .is_some_and(|r| r.starts_with("True/"))
                .then_some(())
        })
        .await;
}

fn base64(s: &str) -> String {
    serde_json::to_value(ByteString(s.as_bytes().to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}
