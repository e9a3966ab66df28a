//! Nothing is lost at the edges of the protocol: job hashes that are absent for a while
//! (a Cluster slot migration), delayed jobs that fall due while no worker claims, wake
//! markers left behind by busy periods, runs of orphans in front of a real job, and
//! `meta` settings the scripts and the Rust client must read alike.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{NewJob, Queue, QueueSettings};
use redis::Commands;
use support::eventually::eventually;
use support::redis::{RedisServer, redis_now_ms, wait_past};

fn job(id: &str) -> NewJob {
    NewJob::new(format!("payload of {id}").into_bytes()).id(id)
}

/// What a slot migration looks like to a script: the job hash is on the other node for
/// a while (renamed away here), then arrives (renamed back).
fn hide(c: &mut redis::Connection, q: &Queue, id: &str) {
    let _: () = c
        .rename(q.keys().job(id), format!("elsewhere:{id}"))
        .unwrap();
}
fn unhide(c: &mut redis::Connection, q: &Queue, id: &str) {
    let _: () = c
        .rename(format!("elsewhere:{id}"), q.keys().job(id))
        .unwrap();
}

#[tokio::test]
async fn a_pending_job_whose_hash_was_away_is_claimed_and_acked_once_it_is_back() {
    let server = RedisServer::start();
    let q = server.queue("mig").await;
    let mut c = server.conn();
    q.enqueue_many(vec![job("a"), job("b")]).await.unwrap();
    hide(&mut c, &q, "a");
    let leases = q.claim(10, "w", None).await.unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.id.as_str().unwrap()).collect();
    assert_eq!(ids, ["b"], "a's hash is away: only b is claimed");
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.orphaned, stats.set_aside), (1, 1), "a is set aside");
    // still away: the reaper leaves it set aside
    assert_eq!(q.reap(100).await.unwrap().restored, 0);
    assert_eq!(q.stats().await.unwrap().orphaned, 1);
    unhide(&mut c, &q, "a");
    assert_eq!(q.reap(100).await.unwrap().restored, 1);
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.orphaned, stats.pending, stats.restored), (0, 1, 1));
    let lease = q.claim_one("w", None).await.unwrap();
    let lease = lease.expect("a is found again once its hash is back");
    assert_eq!(lease.id, "a");
    assert!(q.ack(&lease).await.unwrap());
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.processing),
        (0, 1),
        "only b is left, leased"
    );
}

#[tokio::test]
async fn a_leased_job_whose_hash_was_away_when_reaped_runs_again_once_it_is_back() {
    let server = RedisServer::start();
    let q = server.queue("migp").await;
    let mut c = server.conn();
    q.enqueue(job("a")).await.unwrap();
    let lease = q
        .claim_one("w", Some(Duration::from_millis(20)))
        .await
        .unwrap()
        .unwrap();
    hide(&mut c, &q, "a");
    wait_past(&mut c, lease.lease_until);
    q.reap(100).await.unwrap();
    unhide(&mut c, &q, "a");
    // The first reap after the hash is back puts a where its status says (processing,
    // lease expired); the lease then ends as any expired lease does.
    for _ in 0..2 {
        q.reap(100).await.unwrap();
    }
    let again = q.claim_one("w2", None).await.unwrap();
    let again = again.expect("a runs again once its hash is back");
    assert_eq!((again.id.as_str(), again.attempts), (Some("a"), 2));
    assert!(q.ack(&again).await.unwrap());
}

#[tokio::test]
async fn a_delayed_job_that_falls_due_is_promoted_by_reap_alone() {
    let server = RedisServer::start();
    let q = server.queue("due").await;
    let mut c = server.conn();
    q.enqueue(job("later").delay(Duration::from_millis(20)))
        .await
        .unwrap();
    let run_at: i64 = c.zscore(&q.keys().delayed, "later").unwrap();
    assert_eq!(q.stats().await.unwrap().due, 0, "not due yet");
    // The enqueue's marker (the earliest delayed job changed) is taken by a waiting worker.
    let woke: Option<(String, String)> = c.blpop(&q.keys().wake, 0.1).unwrap();
    assert!(
        woke.is_some(),
        "a delayed job that becomes the earliest pushes a marker"
    );
    wait_past(&mut c, run_at);
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.delayed, stats.due), (1, 1));
    assert_eq!(q.reap(100).await.unwrap().promoted, 1);
    let pending: Vec<String> = c.lrange(&q.keys().pending, 0, -1).unwrap();
    assert_eq!(pending, ["later"], "reap promotes a due delayed job");
    let delayed: usize = c.zcard(&q.keys().delayed).unwrap();
    assert_eq!(delayed, 0);
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(wake, 1, "one wake marker for the promoted job");
}

#[tokio::test]
async fn claims_consume_the_wake_markers_of_the_jobs_they_take() {
    let server = RedisServer::start();
    let q = server.queue("wake").await;
    let mut c = server.conn();
    let ids: Vec<String> = (0..5).map(|i| format!("j{i}")).collect();
    q.enqueue_many(ids.iter().map(|id| job(id)).collect())
        .await
        .unwrap();
    assert_eq!(c.llen::<_, usize>(&q.keys().wake).unwrap(), 5);
    assert_eq!(q.claim(3, "w", None).await.unwrap().len(), 3);
    let wake: usize = c.llen(&q.keys().wake).unwrap();
    assert_eq!(wake, 5, "pending still holds jobs: its markers stay");
    // A worker that was woken by a marker (BLPOP) and then claims one job leaves the
    // other markers for the next idle worker while jobs are pending.
    let _: Option<(String, String)> = c.blpop(&q.keys().wake, 0.1).unwrap();
    assert_eq!(q.claim(1, "w", None).await.unwrap().len(), 1);
    assert_eq!(c.llen::<_, usize>(&q.keys().wake).unwrap(), 4);
    // The claim that finds pending short empties wake: no idle worker wakes for nothing.
    assert_eq!(q.claim(5, "w", None).await.unwrap().len(), 1);
    assert_eq!(c.llen::<_, usize>(&q.keys().wake).unwrap(), 0);
}

#[tokio::test]
async fn a_run_of_orphans_in_front_of_a_job_does_not_make_claim_come_back_empty() {
    let server = RedisServer::start();
    let q = server.queue("run").await;
    let mut c = server.conn();
    let ids: Vec<String> = (0..250).map(|i| format!("o{i}")).collect();
    q.enqueue_many(ids.iter().map(|id| job(id)).collect())
        .await
        .unwrap();
    q.enqueue(job("real")).await.unwrap();
    for id in &ids {
        let _: () = c.hset(q.keys().job(id), "status", "done").unwrap();
    }
    let leases = q.claim(1, "w", None).await.unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.id.as_str().unwrap()).collect();
    assert_eq!(ids, ["real"], "claim looks past the orphans");
}

/// The settings the Rust client reads from `meta` are the ones the scripts use.
#[tokio::test]
async fn the_client_reads_meta_as_the_scripts_do() {
    let server = RedisServer::start();
    let q = server.queue("meta").await;
    let mut c = server.conn();
    for (text, lease_ms) in [
        ("1e3", 1000),
        ("0", 30000),
        ("2500.7", 2500),
        (" 1500 ", 1500),
    ] {
        let _: () = c
            .hset(&q.keys().meta, "visibility_timeout_ms", text)
            .unwrap();
        q.enqueue(job(text.trim())).await.unwrap();
        let before = redis_now_ms(&mut c);
        let lease = q.claim_one("w", None).await.unwrap().unwrap();
        let after = redis_now_ms(&mut c);
        assert!(
            lease.lease_until >= before + lease_ms && lease.lease_until <= after + lease_ms,
            "{text:?}: the script leases for {lease_ms} ms"
        );
        let settings = q.settings().await.unwrap();
        assert_eq!(
            settings.visibility_timeout,
            Duration::from_millis(lease_ms as u64),
            "{text:?}: the client reads what the script uses"
        );
    }
    let fields: HashMap<String, String> = [("max_attempts", "0"), ("dead_max_len", "-3")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let settings = QueueSettings::from_fields(&fields);
    assert_eq!(settings.max_attempts, 1, "max_attempts below 1 counts as 1");
    assert_eq!(
        settings.dead_max_len, 10_000,
        "a negative length takes the default"
    );
}

#[tokio::test]
async fn set_aside_ids_are_forgotten_only_on_purpose() {
    let server = RedisServer::start();
    let q = server.queue("forget").await;
    let mut c = server.conn();
    q.enqueue_many(vec![job("gone"), job("back")])
        .await
        .unwrap();
    let _: () = c.del(q.keys().job("gone")).unwrap();
    hide(&mut c, &q, "back");
    assert!(q.claim(2, "w", None).await.unwrap().is_empty());
    assert_eq!(q.stats().await.unwrap().orphaned, 2);
    unhide(&mut c, &q, "back");
    // purge forgets only ids whose hash is still absent; `back` is left for the reaper
    assert_eq!(q.purge_orphans(10).await.unwrap(), 1);
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.orphaned, stats.orphans_purged), (1, 1));
    let outcome = q
        .maintain(&QueueSettings::default(), 100, 10)
        .await
        .unwrap();
    assert_eq!(
        outcome.reaped.restored, 1,
        "maintain looks at set-aside ids"
    );
    assert_eq!(outcome.stats.orphaned, 0);
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    assert_eq!(lease.id, "back");
}

#[tokio::test]
async fn maintain_promotes_due_jobs_with_no_worker_running() {
    let server = RedisServer::start();
    let q = server.queue("zero").await;
    let mut c = server.conn();
    q.configure(&QueueSettings::default()).await.unwrap();
    q.enqueue(job("retry").delay(Duration::from_millis(10)))
        .await
        .unwrap();
    let run_at: i64 = c.zscore(&q.keys().delayed, "retry").unwrap();
    wait_past(&mut c, run_at);
    let outcome = q
        .maintain(&QueueSettings::default(), 100, 10)
        .await
        .unwrap();
    assert_eq!(outcome.reaped.promoted, 1);
    assert_eq!((outcome.stats.pending, outcome.stats.due), (1, 0));
}

/// A page far past the end of the dead-letter set (an offset from a URL or a flag) is an
/// empty page, not an overflow of the range's end nor a range Redis refuses.
#[tokio::test]
async fn a_dead_letter_page_past_the_end_is_empty_whatever_its_offset() {
    let server = RedisServer::start();
    let q = server.queue("far").await;
    q.enqueue(job("a")).await.unwrap();
    let lease = q.claim_one("w", None).await.unwrap().unwrap();
    q.fail(
        &lease,
        "boom",
        jobqueue::queue::FailMode::Dead,
        jobqueue::queue::Backoff::default(),
    )
    .await
    .unwrap();
    assert_eq!(q.dead_ids(0, 10).await.unwrap().len(), 1);
    for offset in [1, usize::MAX / 2, usize::MAX - 1, usize::MAX] {
        let page = q.dead_ids(offset, 10).await;
        assert!(
            matches!(&page, Ok(ids) if ids.is_empty()),
            "offset {offset}: {page:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_typed_job_key_is_set_aside_and_the_worker_runs_the_rest() {
    let server = RedisServer::start();
    let q = server.queue("wrongtype").await;
    let mut c = server.conn();
    q.enqueue_many(vec![job("bad"), job("b"), job("c")])
        .await
        .unwrap();
    // the job key of the job at the front of pending is not a hash
    let _: () = c.del(q.keys().job("bad")).unwrap();
    let _: () = c.set(q.keys().job("bad"), "not a job").unwrap();

    let worker = jobqueue::worker::Worker::builder(q.clone())
        .handle_signals(false)
        .worker_id("wt")
        .redis_retry(Duration::from_millis(20), Duration::from_millis(200))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_token();
    let counters = worker.stats();
    let ran = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = ran.clone();
    let task = tokio::spawn(worker.run(move |lease, _ctx| {
        let seen = seen.clone();
        async move {
            let id = lease.id.as_str().unwrap().to_string();
            seen.lock().unwrap().push(id);
            Ok(())
        }
    }));
    // whichever comes first: both jobs acked, or the worker's calls failing
    eventually("both jobs acked or three failed Redis calls", async || {
        let s = counters.get();
        s.acked >= 2 || s.redis_errors >= 3
    })
    .await;
    let s = counters.get();
    assert_eq!(
        s.redis_errors,
        0,
        "no call fails on the wrong-typed key (ran: {:?})",
        ran.lock().unwrap()
    );
    let mut ids = ran.lock().unwrap().clone();
    ids.sort();
    assert_eq!(ids, ["b", "c"]);
    shutdown.cancel();
    task.await.unwrap();

    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.orphaned, stats.set_aside, stats.wrong_type),
        (1, 1, 1),
        "the id is set aside, counted as a wrong-typed key"
    );
    // the key is left as it is, and reap keeps the id set aside without failing
    let kept: String = c.get(q.keys().job("bad")).unwrap();
    assert_eq!(kept, "not a job");
    assert_eq!(q.reap(100).await.unwrap().restored, 0);
    assert_eq!(q.stats().await.unwrap().orphaned, 1);
}
