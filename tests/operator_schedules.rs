//! `spec.schedules`, against kube's mock API server and a real Redis: the operator writes
//! them into Redis, changes and removes them with the spec, leaves schedules it did not
//! write alone, and shows each one's last and next tick in the status.

mod support;

use std::time::Duration;

use jobqueue::crd::{JobQueueStatus, ScheduleSpec};
use jobqueue::queue::JobOptions;
use jobqueue::queue::schedule::{Missed, Rule, Schedule};
use serde_json::json;
use support::fixtures::{JobQueueExt, TestClock, queue};
use support::mock_api::{Expect, Scenario, test_context_at};
use support::redis::{RedisServer, wait_past};

fn schedules(v: serde_json::Value) -> Vec<ScheduleSpec> {
    serde_json::from_value(v).expect("schedules")
}

fn ticks(status: &JobQueueStatus) -> Vec<(String, bool, bool)> {
    status
        .schedules
        .iter()
        .map(|s| (s.name.clone(), s.last_tick.is_some(), s.next_tick.is_some()))
        .collect()
}

#[tokio::test]
async fn spec_schedules_are_added_changed_and_removed_with_their_ticks_in_status() {
    let redis = RedisServer::start();
    let q = redis.queue("sc").await;
    // a schedule added by hand: not the operator's
    q.put_schedule(&Schedule {
        name: "by-hand".into(),
        rule: Rule::Every(Duration::from_secs(60)),
        payload: b"h".to_vec(),
        options: Default::default(),
        missed: Missed::Skip,
        paused: false,
    })
    .await
    .unwrap();
    let jq = queue("sc", &redis.url(), "sc").edit(|s| {
        s.schedules = schedules(json!([
            {"name": "nightly", "cron": "0 3 * * *", "timeZone": "Europe/Paris", "payload": "{}"},
            {"name": "ping", "every": "30s", "payload": "p", "missed": "once"},
        ]))
    });
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let status = seen.statuses[0].clone();
    assert_eq!(
        ticks(&status),
        vec![
            ("nightly".into(), false, true),
            ("ping".into(), false, true)
        ],
        "{status:?}"
    );
    let nightly = q.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(
        nightly.rule,
        Rule::Cron {
            expr: "0 3 * * *".into(),
            tz: "Europe/Paris".into()
        }
    );
    assert_eq!(
        status.schedules[0]
            .next_tick
            .as_ref()
            .unwrap()
            .0
            .as_millisecond(),
        nightly.next_tick.unwrap()
    );
    let ping = q.schedule("ping").await.unwrap().unwrap();
    assert_eq!(
        (ping.missed, ping.payload.as_slice()),
        (Missed::Once, &b"p"[..])
    );

    // ping changes, nightly goes: ping rewritten, nightly removed, by-hand left alone
    let jq = jq.with_status(status).at_generation(2, "2").edit(|s| {
        s.schedules = schedules(json!([{"name": "ping", "every": "1m", "payload": "p2"}]))
    });
    clock.advance(10);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    assert_eq!(ticks(&seen.statuses[0]), vec![("ping".into(), false, true)]);
    assert!(q.schedule("nightly").await.unwrap().is_none());
    let ping = q.schedule("ping").await.unwrap().unwrap();
    assert_eq!(
        (ping.rule, ping.payload),
        (Rule::Every(Duration::from_secs(60)), b"p2".to_vec())
    );
    assert!(q.schedule("by-hand").await.unwrap().is_some());
}

#[tokio::test]
async fn a_bad_cron_or_time_zone_is_an_invalid_spec_naming_the_schedule() {
    let redis = RedisServer::start();
    let jq = queue("bad", &redis.url(), "bad").edit(|s| {
        s.schedules = schedules(json!([
            {"name": "nightly", "cron": "0 3 * * *", "timeZone": "Mars/Olympus"},
        ]))
    });
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, seen) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .expect(Expect::Event("Warning", "InvalidSpec"))
        .run(&ctx, &mut api)
        .await;
    let _ = result;
    let ready = seen.statuses[0].condition("Ready").expect("Ready");
    assert!(
        ready.message.contains("spec.schedules")
            && ready.message.contains("nightly")
            && ready.message.contains("Mars/Olympus"),
        "{}",
        ready.message
    );
    let q = redis.queue("bad").await;
    assert!(q.schedules().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_spec_schedules_job_options_go_with_every_job_it_fires() {
    let redis = RedisServer::start();
    let q = redis.queue("so").await;
    let jq = queue("so", &redis.url(), "so").edit(|s| {
        s.schedules = schedules(json!([{
            "name": "own", "every": "1s", "payload": "p",
            "maxAttempts": 3, "backoffInitial": "250ms", "backoffMax": "1m",
            "backoffMultiplier": 1.5, "priority": 7, "timeout": "2m", "visibility": "30s",
            "rateKey": "customer-42"
        }]))
    });
    let clock = TestClock::new();
    let (ctx, mut api, _) = test_context_at(&clock);
    let (result, _) = Scenario::new(&jq)
        .expect(Expect::StatusPatch)
        .run(&ctx, &mut api)
        .await;
    result.unwrap();
    let own = JobOptions {
        max_attempts: Some(3),
        backoff_initial: Some(Duration::from_millis(250)),
        backoff_max: Some(Duration::from_secs(60)),
        backoff_multiplier: Some(1.5),
        priority: Some(7),
        timeout: Some(Duration::from_secs(120)),
        visibility: Some(Duration::from_secs(30)),
        rate_key: Some("customer-42".into()),
        notify: None,
    };
    let stored = q.schedule("own").await.unwrap().unwrap();
    let want: Vec<(String, String)> = own
        .to_fields()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut got = stored.options.clone();
    got.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(got, want_sorted);
    // fired (as any firer does), the job carries them
    let tick = stored.next_tick.unwrap();
    wait_past(&mut redis.conn(), tick);
    assert_eq!(q.fire_schedules(None).await.unwrap().fired, 1);
    let job = q
        .job(format!("sched:own:{tick}"))
        .await
        .unwrap()
        .expect("the fired job");
    assert_eq!((job.priority, job.options), (7, own));
}
