//! `Queue::maintain`, the operator's pass over one queue: one round trip when there is
//! nothing to write, and the same end state as configure + reap + stats otherwise.

mod support;

use std::time::Duration;

use jobqueue::queue::{Backoff, Error, FailMode, JobId, NewJob, Queue, QueueSettings, QueueStats};
use redis::Commands;
use support::redis::{RedisServer, wait_past};

/// Read events the server has processed: one per round trip of a client.
fn reads(conn: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .expect("INFO stats has total_reads_processed")
        .trim()
        .parse()
        .unwrap()
}

/// Round trips `f` makes, as the server counts them (INFO's own read subtracted).
async fn server_round_trips<T>(
    conn: &mut redis::Connection,
    f: impl std::future::Future<Output = T>,
) -> (T, i64) {
    let before = reads(conn);
    let out = f.await;
    let after = reads(conn);
    (out, after - before - 1)
}

async fn setup(tag: &str) -> (RedisServer, Queue, redis::Connection) {
    let server = RedisServer::start();
    let queue = server.queue(tag).await;
    queue.load_scripts().await.unwrap();
    let conn = server.conn();
    (server, queue, conn)
}

#[tokio::test]
async fn an_idle_queue_costs_one_round_trip_and_writes_nothing() {
    let (_s, q, mut c) = setup("idle").await;
    q.enqueue(NewJob::new("a")).await.unwrap();
    q.enqueue(NewJob::new("b")).await.unwrap();
    let busy = q.claim_one("w", None).await.unwrap().unwrap();
    let settings = QueueSettings {
        max_attempts: 3,
        ..QueueSettings::default()
    };

    // First pass: meta is empty, so it is written, then reap and stats run.
    let (first, rts) = server_round_trips(&mut c, q.maintain(&settings, 100, 10)).await;
    let first = first.unwrap();
    assert!(first.configured);
    assert_eq!(rts, first.round_trips as i64);
    assert!(first.round_trips > 1);
    assert_eq!(q.settings().await.unwrap(), settings);
    assert_eq!((first.stats.pending, first.stats.processing), (1, 1));

    // Then: one round trip, and not one write (the server's dirty counter stays).
    let dirty = |c: &mut redis::Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = dirty(&mut c);
    for _ in 0..3 {
        let (pass, rts) = server_round_trips(&mut c, q.maintain(&settings, 100, 10)).await;
        let pass = pass.unwrap();
        assert_eq!((rts, pass.round_trips), (1, 1));
        assert!(!pass.configured);
        assert_eq!(pass.reaped, Default::default());
        // The same counts; the clock and the wait of the next job move on between reads.
        let again = q.stats().await.unwrap();
        assert!(again.time_ms >= pass.stats.time_ms && pass.stats.time_ms > 0);
        assert!(again.oldest_pending_ms >= pass.stats.oldest_pending_ms);
        assert_eq!(
            pass.stats,
            jobqueue::queue::QueueStats {
                time_ms: pass.stats.time_ms,
                oldest_pending_ms: pass.stats.oldest_pending_ms,
                ..again
            }
        );
    }
    assert_eq!(dirty(&mut c), before, "an idle pass writes nothing");
    assert!(q.ack(&busy).await.unwrap());
}

#[tokio::test]
async fn expired_leases_are_reaped_in_the_same_pass() {
    let (_s, q, mut c) = setup("expired").await;
    let settings = QueueSettings::default();
    q.maintain(&settings, 100, 10).await.unwrap();
    for i in 0..5 {
        q.enqueue(NewJob::new(format!("{i}"))).await.unwrap();
    }
    let leases = q
        .claim(5, "dies", Some(Duration::from_millis(1)))
        .await
        .unwrap();
    wait_past(&mut c, leases.iter().map(|l| l.lease_until).max().unwrap());
    // Batches of 2 within a budget of 2 calls: 4 reaped, one left for the next pass.
    let pass = q.maintain(&settings, 2, 2).await.unwrap();
    assert_eq!((pass.reaped.requeued, pass.reaped.more), (4, true));
    assert_eq!((pass.stats.pending, pass.stats.expired), (4, 1));
    assert_eq!(pass.round_trips, 1 + 2 + 1);
    let pass = q.maintain(&settings, 2, 2).await.unwrap();
    assert_eq!((pass.reaped.requeued, pass.reaped.more), (1, false));
    assert_eq!(
        (pass.stats.pending, pass.stats.expired, pass.stats.reaped),
        (5, 0, 5)
    );
    assert_eq!(q.maintain(&settings, 2, 2).await.unwrap().round_trips, 1);
}

async fn kill(q: &Queue, n: usize, c: &mut redis::Connection) {
    for i in 0..n {
        q.enqueue(NewJob::new(format!("d{i}"))).await.unwrap();
        let lease = q.claim_one("w", None).await.unwrap().unwrap();
        q.fail(&lease, "boom", FailMode::Dead, Backoff::Policy)
            .await
            .unwrap();
        support::redis::next_ms(c);
    }
}

#[tokio::test]
async fn a_dead_set_over_its_length_is_trimmed() {
    let (_s, q, mut c) = setup("long").await;
    let roomy = QueueSettings::default();
    q.maintain(&roomy, 100, 10).await.unwrap();
    kill(&q, 4, &mut c).await;
    assert_eq!(q.maintain(&roomy, 100, 10).await.unwrap().round_trips, 1);
    // Three allowed: the new limit is written and the oldest dead job trimmed.
    let tight = QueueSettings {
        dead_max_len: 3,
        ..roomy.clone()
    };
    let pass = q.maintain(&tight, 100, 10).await.unwrap();
    assert!(pass.configured);
    assert_eq!((pass.stats.dead, pass.stats.dead_trimmed), (3, 1));
    assert_eq!(q.maintain(&tight, 100, 10).await.unwrap().round_trips, 1);
    // One more death goes over the limit again: seen and trimmed without a spec change.
    kill(&q, 1, &mut c).await;
    let pass = q.maintain(&tight, 100, 10).await.unwrap();
    assert!(!pass.configured);
    assert_eq!((pass.stats.dead, pass.stats.dead_trimmed), (3, 2));
    assert!(pass.round_trips > 1);
}

#[tokio::test]
async fn dead_jobs_past_retention_are_trimmed() {
    let (_s, q, mut c) = setup("old").await;
    let settings = QueueSettings {
        dead_retention: Duration::from_millis(50),
        ..QueueSettings::default()
    };
    q.maintain(&settings, 100, 10).await.unwrap();
    kill(&q, 2, &mut c).await;
    let died: Vec<(JobId, i64)> = q.dead_ids(0, 10).await.unwrap();
    let newest = died.iter().map(|d| d.1).max().unwrap();
    wait_past(&mut c, newest + 50);
    let pass = q.maintain(&settings, 100, 10).await.unwrap();
    assert!(!pass.configured);
    assert_eq!((pass.stats.dead, pass.stats.dead_trimmed), (0, 2));
    assert_eq!(q.maintain(&settings, 100, 10).await.unwrap().round_trips, 1);
}

#[tokio::test]
async fn meta_changed_by_someone_else_is_written_back() {
    let (_s, q, _c) = setup("drift").await;
    let settings = QueueSettings::default();
    q.maintain(&settings, 100, 10).await.unwrap();
    q.configure(&QueueSettings {
        max_attempts: 9,
        ..settings.clone()
    })
    .await
    .unwrap();
    let pass = q.maintain(&settings, 100, 10).await.unwrap();
    assert!(pass.configured);
    assert_eq!(q.settings().await.unwrap(), settings);
}

#[tokio::test]
async fn a_wrong_typed_key_fails_the_pass_before_any_write() {
    let (_s, q, mut c) = setup("typed").await;
    let _: () = c.set(&q.keys().delayed, "not a zset").unwrap();
    let err = q
        .maintain(&QueueSettings::default(), 100, 10)
        .await
        .unwrap_err();
    match &err {
        Error::WrongType { key, detail, .. } => {
            assert_eq!(key, &q.keys().delayed);
            assert!(
                detail.contains("string") && detail.contains("zset"),
                "{detail}"
            );
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    let meta: bool = c.exists(&q.keys().meta).unwrap();
    assert!(!meta, "meta was not written");
}

#[tokio::test]
async fn a_server_that_forgot_the_scripts_still_answers() {
    let (_s, q, mut c) = setup("flushed").await;
    let settings = QueueSettings::default();
    q.maintain(&settings, 100, 10).await.unwrap();
    q.enqueue(NewJob::new("x")).await.unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    let pass = q.maintain(&settings, 100, 10).await.unwrap();
    assert_eq!(pass.stats.pending, 1);
    assert_eq!(q.maintain(&settings, 100, 10).await.unwrap().round_trips, 1);
}

#[test]
fn reap_is_due_when_reap_would_change_something() {
    use jobqueue::queue::reap_due;
    let s = QueueSettings {
        dead_max_len: 10,
        dead_retention: Duration::from_millis(1000),
        ..QueueSettings::default()
    };
    let stats = |expired, dead| QueueStats {
        expired,
        dead,
        ..QueueStats::default()
    };
    let now = 1_000_000;
    // (expired, dead, oldest death, due?)
    let cases = [
        (0, 0, None, false),
        (1, 0, None, true),
        (0, 10, Some(now), false),
        (0, 11, Some(now), true),
        (0, 1, Some(now - 1000), false), // exactly at the limit: reap keeps it too
        (0, 1, Some(now - 1001), true),
    ];
    for (expired, dead, oldest, due) in cases {
        assert_eq!(
            reap_due(&stats(expired, dead), &s, oldest, now),
            due,
            "expired {expired}, dead {dead}, oldest {oldest:?}"
        );
    }
    // Zero means no limit of that kind.
    let unlimited = QueueSettings {
        dead_max_len: 0,
        dead_retention: Duration::ZERO,
        ..s
    };
    assert!(!reap_due(&stats(0, 1_000_000), &unlimited, Some(0), now));
}

#[tokio::test]
async fn one_round_trip_on_a_cluster_too() {
    let cluster = support::redis::RedisCluster::start();
    let q = Queue::new(cluster.redis().await, "jq", "clustered").unwrap();
    q.load_scripts().await.unwrap();
    let settings = QueueSettings::default();
    assert!(q.maintain(&settings, 100, 10).await.unwrap().configured);
    q.enqueue(NewJob::new("x")).await.unwrap();
    let pass = q.maintain(&settings, 100, 10).await.unwrap();
    assert_eq!((pass.round_trips, pass.stats.pending), (1, 1));
    assert!(!pass.configured);
}
