//! The reconciler against kube's mock API server (tower-test) and a real Redis the test
//! starts: each test lists the exact requests one reconcile must make, in order, and
//! fails on a missing or an extra one.

mod support;

use std::sync::Arc;
use std::time::Duration;

use jobqueue::controller::{Error, error_policy};
use jobqueue::crd::JobQueueStatus;
use jobqueue::queue::{ConnectOptions, NewJob, Queue, Redis};
use kube::runtime::controller::Action;
use support::fixtures::{JobQueueExt, NS, TestClock, queue};
use support::mock_api::{Expect, Scenario, test_context, test_context_at};
use support::redis::{RedisServer, wait_past};

fn condition<'a>(status: &'a JobQueueStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = status
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

/// A server that requires `password` (set once it is up, so the harness can see it start).
fn start_with_password(password: &str) -> RedisServer {
    let redis = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query(&mut redis.conn())
        .unwrap();
    redis
}

fn metrics_text(registry: &prometheus_client::registry::Registry) -> String {
    jobqueue::controller::metrics::encode(registry)
}

#[tokio::test]
async fn the_status_patch_carries_the_counts_of_redis() {
    let redis = RedisServer::start();
    let q = redis.queue("emails").await;
    for i in 0..3 {
        q.enqueue(NewJob::new(format!("job {i}"))).await.unwrap();
    }
    q.enqueue(NewJob::new("later").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let lease = q.claim_one("w1", None).await.unwrap().expect("a job");
    q.ack(&lease).await.unwrap();
    q.claim_one("w2", None).await.unwrap().expect("a job");

    let jq = queue("emails", &redis.url(), "emails").edit(|s| s.visibility_timeout = "45s".into());
    let (ctx, mut api, registry) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;

    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    let status = &seen.statuses[0];
    assert_eq!(
        (
            status.pending,
            status.processing,
            status.delayed,
            status.dead,
            status.expired
        ),
        (1, 1, 1, 0, 0)
    );
    assert_eq!(status.observed_generation, Some(1));
    assert!(
        status.p50.is_some() && status.p99.is_some(),
        "one ack: {status:?}"
    );
    let (s, reason, message) = condition(status, "Ready");
    assert_eq!((s, reason), ("True", "QueueHealthy"));
    assert!(message.contains("jq:{emails}"), "{message}");
    let (s, _, message) = condition(status, "RedisAvailable");
    assert_eq!(s, "True");
    assert_eq!(message, format!("connected to Redis at {}", redis.url()));
    assert_eq!(condition(status, "LeaseTooShort").0, "False");

    // The spec's settings went into the queue's meta hash.
    let settings = q.settings().await.unwrap();
    assert_eq!(settings.visibility_timeout, Duration::from_secs(45));

    let text = metrics_text(&registry);
    for line in [
        r#"jobqueue_pending{namespace="default",name="emails"} 1"#,
        r#"jobqueue_processing{namespace="default",name="emails"} 1"#,
        r#"jobqueue_delayed{namespace="default",name="emails"} 1"#,
        r#"jobqueue_reconcile_runs_total{namespace="default",name="emails"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}

#[tokio::test]
async fn an_unchanged_queue_writes_nothing() {
    let redis = RedisServer::start();
    redis
        .queue("idle")
        .await
        .enqueue(NewJob::new("x"))
        .await
        .unwrap();
    let jq = queue("idle", &redis.url(), "idle");
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    // The API server now holds that status; the next reconcile, seconds later, sees it.
    clock.advance(10);
    let jq = jq.with_status(seen.statuses[0].clone());
    let (result, seen) = Scenario::new(&jq).run(&ctx, &mut api).await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    assert!(seen.statuses.is_empty());

    // A change in Redis is written.
    redis
        .queue("idle")
        .await
        .enqueue(NewJob::new("y"))
        .await
        .unwrap();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.statuses[0].pending, 2);
}

#[tokio::test]
async fn secrets_are_read_once_and_never_written_out() {
    let redis = start_with_password("s3cret-pw");
    {
        let authed =
            Redis::connect(&ConnectOptions::new(redis.url()).password(Some("s3cret-pw".into())))
                .await
                .unwrap();
        let q = Queue::new(authed, "jq", "billing").unwrap();
        q.enqueue(NewJob::new("invoice")).await.unwrap();
    }
    let jq = queue("billing", "unused", "billing")
        .with_url_secret("redis", "url")
        .with_password_secret("redis", "password");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Secret(
            "redis",
            vec![("url", redis.url()), ("password", "s3cret-pw".to_string())],
        ))
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(seen.statuses[0].pending, 1);
    assert_eq!(condition(&seen.statuses[0], "Ready").0, "True");
    seen.assert_not_sent("s3cret-pw");
}

#[tokio::test]
async fn a_password_in_the_url_is_redacted_everywhere() {
    // Nobody listens: the failure message names the endpoint, without the password.
    let url = "redis://app:hunter22@127.0.0.1:1".to_string();
    let jq = queue("redacted", "unused", "r").with_url_secret("redis-url", "url");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Secret("redis-url", vec![("url", url)]))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    let err = result.unwrap_err().to_string();
    assert!(!err.contains("hunter22"), "{err}");
    assert!(err.contains("app:***@127.0.0.1"), "{err}");
    seen.assert_not_sent("hunter22");
}

#[tokio::test]
async fn redis_down_is_a_condition_a_warning_and_a_backoff() {
    let url = "redis://127.0.0.1:1".to_string();
    let jq = queue("down", &url, "down");
    let (ctx, mut api, registry) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    let err = result.expect_err("the reconcile fails");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let status = &seen.statuses[0];
    let (s, reason, message) = condition(status, "RedisAvailable");
    assert_eq!((s, reason), ("False", "RedisUnreachable"));
    assert!(message.contains(&url), "{message}");
    assert_eq!(condition(status, "Ready").1, "RedisUnreachable");
    assert!(
        seen.events[0]["note"]
            .as_str()
            .unwrap()
            .contains("cannot connect to Redis")
    );

    // The error policy backs off, doubling per failure, for this queue only.
    let jq = Arc::new(jq);
    assert_eq!(
        error_policy(jq.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(
        error_policy(jq.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(10))
    );
    let other = Arc::new(queue("other", &url, "other"));
    assert_eq!(
        error_policy(other, &err, ctx.clone()),
        Action::requeue(Duration::from_secs(5))
    );
    let text = metrics_text(&registry);
    let line = r#"jobqueue_reconcile_failures_total{namespace="default",name="down",error="redis_unreachable"} 2"#;
    assert!(text.contains(line), "missing {line} in\n{text}");
}

#[tokio::test]
async fn a_missing_secret_is_named() {
    let jq = queue("nosecret", "unused", "n").with_url_secret("redis-creds", "url");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::SecretMissing("redis-creds"))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "SecretNotFound"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap_err().metric_label(), "secret_not_found");
    let (s, reason, message) = condition(&seen.statuses[0], "Ready");
    assert_eq!((s, reason), ("False", "SecretNotFound"));
    assert_eq!(message, format!("Secret {NS}/redis-creds not found"));
}

#[tokio::test]
async fn a_missing_secret_key_is_named() {
    let jq = queue("nokey", "unused", "n").with_url_secret("redis", "url");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Secret("redis", vec![("host", "redis".into())]))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "SecretKeyMissing"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap_err();
    let (_, reason, message) = condition(&seen.statuses[0], "Ready");
    assert_eq!(reason, "SecretKeyMissing");
    assert!(
        message.contains("has no key \"url\"") && message.contains("spec.redis.urlSecretRef"),
        "{message}"
    );
}

#[tokio::test]
async fn a_refused_password_is_auth_failed() {
    let redis = start_with_password("right-pw");
    let jq = queue("auth", &redis.url(), "auth").with_password_secret("redis", "password");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::Secret(
            "redis",
            vec![("password", "wrong-pw".into())],
        ))
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "AuthFailed"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap_err().metric_label(), "auth_failed");
    let (s, reason, message) = condition(&seen.statuses[0], "RedisAvailable");
    assert_eq!((s, reason), ("False", "AuthFailed"));
    assert!(!message.contains("wrong-pw"), "{message}");
}

#[tokio::test]
async fn a_wrong_typed_key_is_reported_and_left_alone() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let _: () = redis::cmd("HSET")
        .arg("jq:{typed}:pending")
        .arg("not")
        .arg("a list")
        .query(&mut conn)
        .unwrap();
    let jq = queue("typed", &redis.url(), "typed");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "WrongType"))
        .run(&ctx, &mut api)
        .await;
    assert_eq!(result.unwrap_err().metric_label(), "wrong_type");
    let status = &seen.statuses[0];
    let (s, reason, message) = condition(status, "Ready");
    assert_eq!((s, reason), ("False", "WrongType"));
    assert!(message.contains("jq:{typed}:pending"), "{message}");
    assert_eq!(condition(status, "RedisAvailable").0, "True");
    // Nothing was written to the queue: meta was not configured.
    let exists: bool = redis::cmd("EXISTS")
        .arg("jq:{typed}:meta")
        .query(&mut conn)
        .unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn an_invalid_spec_waits_for_a_change() {
    let jq = queue("invalid", "redis://127.0.0.1:1", "i").edit(|s| s.reaper.interval = "0s".into());
    let (ctx, mut api, registry) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidSpec"))
        .run(&ctx, &mut api)
        .await;
    // No retry storm: nothing happens until the spec (its generation) changes.
    assert_eq!(result.unwrap(), Action::await_change());
    let status = &seen.statuses[0];
    let (s, reason, message) = condition(status, "Ready");
    assert_eq!((s, reason), ("False", "InvalidSpec"));
    assert!(message.contains("spec.reaper.interval"), "{message}");
    assert_eq!(condition(status, "RedisAvailable").0, "Unknown");
    let text = metrics_text(&registry);
    assert!(text.contains(r#"error="invalid_spec"} 1"#), "{text}");
}

#[tokio::test]
async fn one_queue_failing_leaves_the_others_alone() {
    let redis = RedisServer::start();
    let down = queue("broken", "redis://127.0.0.1:1", "b");
    let up = queue("fine", &redis.url(), "fine");
    let (ctx, mut api, _) = test_context();
    let (result, _) = Scenario::new(&down)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "RedisUnreachable"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap_err();
    let (result, seen) = Scenario::new(&up)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(condition(&seen.statuses[0], "Ready").0, "True");
}

#[tokio::test]
async fn queues_on_one_endpoint_share_a_client() {
    let redis = RedisServer::start();
    let a = queue("a", &redis.url(), "a");
    let b = queue("b", &redis.url(), "b");
    let (ctx, mut api, _) = test_context();
    let (r, _) = Scenario::new(&a)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    r.unwrap();
    let (r, _) = Scenario::new(&b)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    r.unwrap();
    assert_eq!(ctx.redis_pool.len(), 1);
}

#[tokio::test]
async fn expired_leases_are_requeued_in_one_reconcile_and_shown() {
    let redis = RedisServer::start();
    let q = redis.queue("reap").await;
    for i in 0..5 {
        q.enqueue(NewJob::new(format!("job {i}"))).await.unwrap();
    }
    let leases = q
        .claim(3, "crashed-worker", Some(Duration::from_millis(20)))
        .await
        .unwrap();
    assert_eq!(leases.len(), 3);
    let until = leases.iter().map(|l| l.lease_until).max().unwrap();
    wait_past(&mut redis.conn(), until);

    // A small batch and a budget that covers it: reaped in one reconcile.
    let jq = queue("reap", &redis.url(), "reap").edit(|s| s.reaper.batch_size = 2);
    let (ctx, mut api, registry) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert_eq!(
        (
            status.pending,
            status.processing,
            status.expired,
            status.reaped
        ),
        (5, 0, 0, 3)
    );
    assert!(status.last_reap_time.is_some());
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.processing), (5, 0));
    let text = metrics_text(&registry);
    let line = r#"jobqueue_reaped_total{namespace="default",name="reap"} 3"#;
    assert!(text.contains(line), "missing {line} in\n{text}");
}

#[tokio::test]
async fn a_dead_letter_burst_raises_a_warning() {
    let redis = RedisServer::start();
    let q = redis.queue("burst").await;
    q.enqueue(NewJob::new("a")).await.unwrap();
    q.enqueue(NewJob::new("b")).await.unwrap();
    let jq = queue("burst", &redis.url(), "burst").edit(|s| s.max_attempts = 1);
    let (ctx, mut api, registry) = test_context();
    // First reconcile: the queue as it is (meta gets maxAttempts 1).
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let jq = jq.with_status(seen.statuses[0].clone());

    // Both jobs are claimed by a worker that dies: out of attempts, they go dead.
    let leases = q
        .claim(2, "w", Some(Duration::from_millis(20)))
        .await
        .unwrap();
    let until = leases.iter().map(|l| l.lease_until).max().unwrap();
    wait_past(&mut redis.conn(), until);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "DeadLettered"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert_eq!(
        (status.dead, status.dead_lettered, status.pending),
        (2, 2, 0)
    );
    let note = seen.events[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with("2 jobs moved to the dead-letter set"),
        "{note}"
    );
    let text = metrics_text(&registry);
    let line = r#"jobqueue_dead_lettered_total{namespace="default",name="burst"} 2"#;
    assert!(text.contains(line), "missing {line} in\n{text}");
}

#[tokio::test]
async fn stale_acks_raise_the_lease_warning() {
    let redis = RedisServer::start();
    let q = redis.queue("slow").await;
    q.enqueue(NewJob::new("a")).await.unwrap();
    let jq = queue("slow", &redis.url(), "slow");
    let (ctx, mut api, _) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let jq = jq.with_status(seen.statuses[0].clone());

    // A slow worker: its lease expires, the job is reaped and claimed again, the slow
    // worker's late ack is stale.
    let slow = q
        .claim_one("slow", Some(Duration::from_millis(20)))
        .await
        .unwrap()
        .unwrap();
    wait_past(&mut redis.conn(), slow.lease_until);
    assert_eq!(q.reap(10).await.unwrap().requeued, 1);
    assert!(!q.ack(&slow).await.unwrap(), "the late ack is stale");

    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "StaleAcks"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert_eq!(status.stale_acks, 1);
    let (s, reason, message) = condition(status, "LeaseTooShort");
    assert_eq!((s, reason), ("True", "StaleAcks"));
    assert!(message.contains("visibilityTimeout (30s)"), "{message}");
}

/// An id whose job hash is absent is set aside: the status counts it, a condition and
/// one Warning say what to do, the gauge shows it; once the hash is back the reaper puts
/// the id back and the condition turns false.
#[tokio::test]
async fn orphaned_ids_reach_the_status_a_warning_and_the_metrics() {
    use redis::Commands;
    let redis = RedisServer::start();
    let q = redis.queue("mig").await;
    q.enqueue(NewJob::new("away").id("away")).await.unwrap();
    let mut conn = redis.conn();
    let _: () = conn.rename(q.keys().job("away"), "elsewhere").unwrap();
    assert!(q.claim(1, "w", None).await.unwrap().is_empty());
    assert_eq!(q.stats().await.unwrap().orphaned, 1);

    let jq = queue("mig", &redis.url(), "mig");
    let (ctx, mut api, registry) = test_context();
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "OrphanedJobs"))
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert_eq!((status.orphaned, status.pending), (1, 0));
    let (s, reason, message) = condition(status, "JobsOrphaned");
    assert_eq!((s, reason), ("True", "OrphanedJobs"));
    assert!(
        message.starts_with("1 job id is set aside")
            && message.contains("jobqueue dead purge --orphans --yes"),
        "{message}"
    );
    assert_eq!(seen.events[0]["note"], message);
    let line = r#"jobqueue_orphaned{namespace="default",name="mig"} 1"#;
    let text = metrics_text(&registry);
    assert!(text.contains(line), "missing {line} in\n{text}");

    // The hash arrives: the reaper puts the id back, no new Warning.
    let _: () = conn.rename("elsewhere", q.keys().job("away")).unwrap();
    let jq = jq.with_status(status.clone());
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = &seen.statuses[0];
    assert_eq!((status.orphaned, status.pending), (0, 1));
    let (s, reason, _) = condition(status, "JobsOrphaned");
    assert_eq!((s, reason), ("False", "NoOrphanedJobs"));
    let line = r#"jobqueue_orphaned{namespace="default",name="mig"} 0"#;
    let text = metrics_text(&registry);
    assert!(text.contains(line), "missing {line} in\n{text}");
}
