//! `visibility_timeout: auto` against a real Redis: a tuning run's windows, its one writer
//! at a time, its records in `meta`, and a worker's reaper tuning the queue while the
//! worker's renewals take the new value.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use jobqueue::queue::auto_visibility::{
    self, AutoBounds, Reason, Timing, VisibilityRecord, fields,
};
use jobqueue::queue::tuning::tune;
use jobqueue::queue::{NewJob, Queue, QueueSettings};
use jobqueue::worker::Worker;
use redis::Commands;
use support::eventually::eventually;
use support::redis::RedisServer;
use tokio::sync::oneshot;

const S: fn(u64) -> Duration = Duration::from_secs;

/// A queue whose visibility timeout is `auto` within [1s, 60s], margin 2, now at `now`.
async fn auto_queue(server: &RedisServer, tag: &str, now: Duration) -> Queue {
    let queue = server.queue(tag).await;
    queue
        .configure(&QueueSettings {
            visibility_timeout: now,
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    let bounds = AutoBounds {
        min: S(1),
        max: S(60),
        margin: 2.0,
    };
    let mut write = auto_visibility::auto_fields(&bounds);
    write.extend(auto_visibility::set_fields("cli", 0, "auto turned on"));
    queue.write_meta(&write).await.unwrap();
    queue
}

/// `n` acks' worth of processing times in histogram bucket `bucket` ([2^b, 2^(b+1)) ms),
/// and `stale` stale acks, as the scripts count them.
fn observe(server: &RedisServer, queue: &Queue, bucket: u32, n: u64, stale: u64) {
    let mut conn = server.conn();
    let stats = &queue.keys().stats;
    let _: i64 = conn.hincr(stats, format!("h:{bucket}"), n).unwrap();
    let _: i64 = conn.hincr(stats, "stale", stale).unwrap();
}

fn meta(server: &RedisServer, queue: &Queue) -> HashMap<String, String> {
    server.conn().hgetall(&queue.keys().meta).unwrap()
}

fn vis_ms(server: &RedisServer, queue: &Queue) -> u64 {
    meta(server, queue)["visibility_timeout_ms"]
        .parse()
        .unwrap()
}

/// End the current tuning turn (as its expiry would).
fn end_turn(server: &RedisServer, queue: &Queue) {
    let _: i64 = server
        .conn()
        .del(format!("{}:tuning", queue.keys().name))
        .unwrap();
}

#[tokio::test]
async fn tuning_runs_follow_the_windows_one_writer_at_a_time() {
    let server = RedisServer::start();
    let queue = auto_queue(&server, "tu", S(5)).await;
    let timing = Timing {
        interval: S(600),
        stabilization: Duration::ZERO,
        renewal_floor: S(1),
    };

    // The first run has no window yet: the value holds, a snapshot is kept.
    let first = tune(&queue, "reaper:a", &timing).await.unwrap().unwrap();
    assert_eq!(
        (first.decision.value, first.decision.reason),
        (S(5), Reason::NoAcks)
    );
    assert!(meta(&server, &queue).contains_key(fields::STATE));
    // Another writer does nothing while the turn is taken.
    assert_eq!(tune(&queue, "reaper:b", &timing).await.unwrap(), None);

    // 100 acks of 8-16 s: p99 ≈ 16.3 s, × 2.
    observe(&server, &queue, 13, 100, 0);
    end_turn(&server, &queue);
    let up = tune(&queue, "reaper:b", &timing).await.unwrap().unwrap();
    assert!(up.changed());
    assert!(
        matches!(up.decision.reason, Reason::Followed { .. }),
        "{up:?}"
    );
    let raised = vis_ms(&server, &queue);
    assert!((32_600..=32_610).contains(&raised), "{raised}");
    let record = VisibilityRecord::from_fields(&meta(&server, &queue));
    assert_eq!(record.set_by.as_deref(), Some("reaper:b"));
    assert_eq!(record.set_at_ms, Some(up.at_ms));
    assert!(
        record
            .reason
            .as_deref()
            .unwrap()
            .starts_with("raised to p99 16."),
        "{record:?}"
    );
    assert_eq!(
        queue
            .settings()
            .await
            .unwrap()
            .visibility_timeout
            .as_millis() as u64,
        raised
    );

    // A stale ack raises at once, even with short jobs: to the max here.
    observe(&server, &queue, 5, 100, 1);
    end_turn(&server, &queue);
    let stale = tune(&queue, "reaper:a", &timing).await.unwrap().unwrap();
    assert_eq!(stale.decision.reason, Reason::Stale { stale: 1 });
    assert_eq!(vis_ms(&server, &queue), 60_000);

    // Short jobs since: lowered by half at most per run (no stabilization here).
    observe(&server, &queue, 5, 100, 0);
    end_turn(&server, &queue);
    let down = tune(&queue, "reaper:a", &timing).await.unwrap().unwrap();
    assert!(
        matches!(down.decision.reason, Reason::Lowered { .. }),
        "{down:?}"
    );
    assert_eq!(vis_ms(&server, &queue), 30_000);

    // The operator owns it: the reapers leave it alone.
    queue
        .write_meta(&[(fields::OWNER, "operator".into())])
        .await
        .unwrap();
    end_turn(&server, &queue);
    assert_eq!(tune(&queue, "reaper:a", &timing).await.unwrap(), None);
    assert!(tune(&queue, "operator", &timing).await.unwrap().is_some());

    // A fixed value is nobody's to tune.
    queue
        .write_meta(&[(fields::MODE, "fixed".into())])
        .await
        .unwrap();
    end_turn(&server, &queue);
    assert_eq!(tune(&queue, "operator", &timing).await.unwrap(), None);
    assert_eq!(vis_ms(&server, &queue), 30_000);
}

#[tokio::test]
async fn a_workers_reaper_tunes_an_auto_queue_and_its_renewals_take_the_new_value() {
    let server = RedisServer::start();
    let queue = auto_queue(&server, "wr", S(2)).await;
    queue.enqueue(NewJob::new(&b"long"[..])).await.unwrap();
    let worker = Worker::builder(queue.clone())
        .handle_signals(false)
        .worker_id("w1")
        .auto_visibility_timing(Timing {
            interval: Duration::from_millis(50),
            stabilization: S(600),
            renewal_floor: S(1),
        })
        .build()
        .unwrap();
    let shutdown = worker.shutdown_token();
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let started = std::sync::Mutex::new(Some(started_tx));
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(worker.run(move |_lease, _ctx| {
        if let Some(tx) = started.lock().unwrap().take() {
            let _ = tx.send(());
        }
        let mut release = release_rx.clone();
        async move {
            let _ = release.wait_for(|r| *r).await;
            Ok(())
        }
    }));
    started_rx.await.unwrap();

    // The reaper's first run keeps a snapshot; then the queue sees long jobs.
    eventually("the reaper's first tuning run", async || {
        meta(&server, &queue).contains_key(fields::STATE)
    })
    .await;
    observe(&server, &queue, 13, 100, 0);
    let value = eventually("the reaper raises the value", async || {
        let v = vis_ms(&server, &queue);
        (v > 2_000).then_some(v)
    })
    .await;
    assert!((32_600..=32_610).contains(&value), "{value}");
    let record = VisibilityRecord::from_fields(&meta(&server, &queue));
    assert_eq!(record.set_by.as_deref(), Some("reaper:w1"));

    // The job in flight is renewed with the new value: its lease ends well past 2 s on.
    let mut conn = server.conn();
    eventually("a renewal with the new lease length", async || {
        let now = support::redis::redis_now_ms(&mut conn);
        let until: Vec<(String, f64)> = conn
            .zrange_withscores(&queue.keys().processing, 0, -1)
            .unwrap();
        until
            .first()
            .is_some_and(|(_, at)| *at as i64 - now > 20_000)
    })
    .await;

    release_tx.send(true).unwrap();
    eventually("the job is acked", async || {
        queue.stats().await.unwrap().acked == 1
    })
    .await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
}
