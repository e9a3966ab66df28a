//! Unique jobs (docs/protocol.md, *Unique keys*): while a job holds its unique key,
//! another job enqueued with the key is refused with the holder's id, or in debounce mode
//! replaces the waiting holder's payload and delay; the key is released exactly when its
//! mode says (claim, or the job's end: ack, death, cancel, purge), or when its window runs
//! out.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use jobqueue::queue::{
    Backoff, Cancellation, Enqueued, FailMode, FailOutcome, JobId, NewJob, PartitionedQueue, Queue,
    QueueSettings, Selection, Settle, Settled, UniqueMode, UniqueOutcome,
};
use support::eventually::eventually;
use support::redis::{RedisCluster, RedisServer, redis_now_ms, wait_past};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// The job id the lock of `key` names, if any.
fn holder(server: &RedisServer, queue: &Queue, key: &str) -> Option<String> {
    let mut conn = server.conn();
    redis::cmd("GET")
        .arg(queue.keys().unique_lock(key.as_bytes()))
        .query(&mut conn)
        .unwrap()
}

fn keyed(payload: &str, key: &str) -> NewJob {
    NewJob::new(payload.to_string().into_bytes()).unique_key(key.to_string().into_bytes())
}

fn refused_by(out: &Enqueued) -> Option<&JobId> {
    match &out.unique {
        Some(UniqueOutcome::Refused { existing }) => Some(existing),
        _ => None,
    }
}

/// Every key of the server, with its value as DUMP gives it and whether it expires.
fn snapshot(server: &RedisServer) -> BTreeMap<Vec<u8>, (Vec<u8>, bool)> {
    let mut conn = server.conn();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .map(|k| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut conn).unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut conn).unwrap();
            (k, (dump, ttl > 0))
        })
        .collect()
}

#[tokio::test]
async fn until_done_is_released_by_ack() {
    let server = RedisServer::start();
    let queue = server.queue("ack").await;
    let first = queue.enqueue(keyed("one", "report:42")).await.unwrap();
    assert!(first.created && first.unique.is_none());
    assert_eq!(
        holder(&server, &queue, "report:42"),
        first.id.as_str().map(String::from)
    );

    let info = queue.job(first.id.as_bytes()).await.unwrap().unwrap();
    assert_eq!(info.unique_key, Some(JobId::from("report:42")));
    assert_eq!(info.unique_mode.as_deref(), Some("until-done"));

    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    // held while the job runs
    let second = queue.enqueue(keyed("two", "report:42")).await.unwrap();
    assert!(!second.created);
    assert_eq!(refused_by(&second), Some(&first.id));
    assert_eq!(second.existing(), Some(&first.id));

    assert!(queue.ack(&lease).await.unwrap());
    assert_eq!(holder(&server, &queue, "report:42"), None);
    let third = queue.enqueue(keyed("three", "report:42")).await.unwrap();
    assert!(third.created && third.unique.is_none());
}

#[tokio::test]
async fn until_done_is_released_by_death() {
    let server = RedisServer::start();
    let queue = server.queue("death").await;
    queue
        .configure(&QueueSettings {
            max_attempts: 1,
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    for key in ["by-fail", "by-settle", "by-reap"] {
        queue
            .enqueue(keyed("x", key).id(key.to_string()))
            .await
            .unwrap();
    }
    let leases = queue
        .claim(3, "w", Some(Duration::from_millis(1)))
        .await
        .unwrap();
    let lease = |id: &str| leases.iter().find(|l| l.id.as_str() == Some(id)).unwrap();

    // fail: retry past max attempts goes to dead
    let out = queue
        .fail(lease("by-fail"), "boom", FailMode::Retry, Backoff::Policy)
        .await
        .unwrap();
    assert_eq!(out, FailOutcome::Dead);
    assert_eq!(holder(&server, &queue, "by-fail"), None);
    assert_eq!(holder(&server, &queue, "by-reap"), Some("by-reap".into()));

    // settle_claim's fail
    let settled = queue
        .settle_claim(
            "req-1",
            &[Settle::Fail {
                lease: lease("by-settle").lease_ref(),
                error: "boom",
                mode: FailMode::Dead,
                backoff: Backoff::Immediate,
            }],
            1,
            "w",
            None,
        )
        .await
        .unwrap();
    assert_eq!(settled.settled, vec![Settled::Moved(FailOutcome::Dead)]);
    assert_eq!(holder(&server, &queue, "by-settle"), None);

    // reap: an expired lease past max attempts
    let mut conn = server.conn();
    wait_past(&mut conn, lease("by-reap").lease_until);
    let reaped = queue.reap(100).await.unwrap();
    assert_eq!(reaped.dead_lettered, 1);
    assert_eq!(holder(&server, &queue, "by-reap"), None);
    let again = queue.enqueue(keyed("x", "by-reap")).await.unwrap();
    assert!(again.created);
}

#[tokio::test]
async fn until_done_is_released_by_cancel() {
    let server = RedisServer::start();
    let queue = server.queue("cancel").await;
    let waiting = queue
        .enqueue(keyed("x", "waiting").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert!(matches!(
        queue.cancel(waiting.id.as_bytes()).await.unwrap(),
        Cancellation::Cancelled(_)
    ));
    assert_eq!(holder(&server, &queue, "waiting"), None);

    // a leased job: the key is held until its cancelled lease ends
    let leased = queue.enqueue(keyed("x", "leased")).await.unwrap();
    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    assert_eq!(
        queue.cancel(leased.id.as_bytes()).await.unwrap(),
        Cancellation::Requested
    );
    assert_eq!(
        holder(&server, &queue, "leased"),
        leased.id.as_str().map(String::from)
    );
    assert!(queue.end_cancelled(&lease).await.unwrap());
    assert_eq!(holder(&server, &queue, "leased"), None);
}

#[tokio::test]
async fn until_done_is_released_by_purge() {
    let server = RedisServer::start();
    let queue = server.queue("purge").await;
    let dead = queue.enqueue(keyed("x", "k").id("first")).await.unwrap();
    assert!(dead.created);
    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    queue
        .fail(&lease, "boom", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    // A lock that still names the dead job (as a client of an earlier release leaves
    // it: this one dead-letters without releasing) goes with the job's purge.
    let mut conn = server.conn();
    let lock = queue.keys().unique_lock(b"k");
    let _: () = redis::cmd("SET")
        .arg(&lock)
        .arg("first")
        .query(&mut conn)
        .unwrap();
    let purged = queue
        .purge(&Selection::Ids(vec!["first".into()]))
        .await
        .unwrap();
    assert_eq!(purged, 1);
    assert_eq!(holder(&server, &queue, "k"), None);

    // Purging a dead job leaves alone the lock its successor took since (compare and
    // delete): the successor still refuses duplicates.
    queue.enqueue(keyed("x", "k").id("second")).await.unwrap();
    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    queue
        .fail(&lease, "boom", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    assert_eq!(holder(&server, &queue, "k"), None);
    let third = queue.enqueue(keyed("x", "k").id("third")).await.unwrap();
    assert!(third.created);
    queue
        .purge(&Selection::Ids(vec!["second".into()]))
        .await
        .unwrap();
    assert_eq!(holder(&server, &queue, "k"), Some("third".into()));
    let dup = queue.enqueue(keyed("x", "k")).await.unwrap();
    assert_eq!(refused_by(&dup).and_then(JobId::as_str), Some("third"));
}

#[tokio::test]
async fn until_started_is_released_at_the_claim() {
    let server = RedisServer::start();
    let queue = server.queue("started").await;
    let job = |p: &str| keyed(p, "k").unique_mode(UniqueMode::UntilStarted);
    let first = queue.enqueue(job("one")).await.unwrap();
    let dup = queue.enqueue(job("two")).await.unwrap();
    assert_eq!(refused_by(&dup), Some(&first.id));

    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    assert_eq!(lease.id, first.id);
    assert_eq!(holder(&server, &queue, "k"), None);
    // while the first runs, a second is taken and holds the key
    let second = queue.enqueue(job("two")).await.unwrap();
    assert!(second.created);
    // the first one's end leaves the second's lock alone
    assert!(queue.ack(&lease).await.unwrap());
    assert_eq!(
        holder(&server, &queue, "k"),
        second.id.as_str().map(String::from)
    );
}

#[tokio::test]
async fn debounce_replaces_the_waiting_jobs_payload_and_delay() {
    let server = RedisServer::start();
    let queue = server.queue("debounce").await;
    let job = |p: &str| keyed(p, "reindex:ada").unique_mode(UniqueMode::Debounce);
    let first = queue
        .enqueue(job("v1").delay(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(first.created);

    let mut conn = server.conn();
    let before = redis_now_ms(&mut conn);
    let second = queue
        .enqueue(job("v2").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert!(!second.created);
    assert_eq!(
        second.unique,
        Some(UniqueOutcome::Replaced {
            existing: first.id.clone()
        })
    );
    assert!(queue.job(second.id.as_bytes()).await.unwrap().is_none());
    let info = queue.job(first.id.as_bytes()).await.unwrap().unwrap();
    assert_eq!(&info.payload[..], b"v2");
    let run_at = queue.delayed_ids(10).await.unwrap();
    assert_eq!(run_at.len(), 1);
    assert_eq!(run_at[0].0, first.id);
    assert!(run_at[0].1 >= before + 3_600_000, "{run_at:?}");

    // no delay: the waiting job is ready now, with the last payload
    let third = queue.enqueue(job("v3")).await.unwrap();
    assert_eq!(third.existing(), Some(&first.id));
    assert!(queue.delayed_ids(10).await.unwrap().is_empty());
    let lease = queue.claim(5, "w", None).await.unwrap();
    assert_eq!(lease.len(), 1);
    assert_eq!(
        (&lease[0].id, &lease[0].payload[..]),
        (&first.id, &b"v3"[..])
    );
    assert_eq!(queue.stats().await.unwrap().enqueued, 1);

    // claimed: the key is free, a new job is made
    let fourth = queue.enqueue(job("v4")).await.unwrap();
    assert!(fourth.created && fourth.unique.is_none());
}

#[tokio::test]
async fn the_window_frees_the_key_first_when_it_runs_out() {
    let server = RedisServer::start();
    let queue = server.queue("window").await;
    let job = |p: &str| keyed(p, "k").unique_for(Duration::from_millis(50));
    let first = queue.enqueue(job("one")).await.unwrap();
    let dup = queue.enqueue(job("two")).await.unwrap();
    assert_eq!(refused_by(&dup), Some(&first.id));
    eventually("the window to run out", async || {
        holder(&server, &queue, "k").is_none()
    })
    .await;
    // the first job still waits, and a second one is made beside it
    let second = queue.enqueue(job("two")).await.unwrap();
    assert!(second.created);
    assert_eq!(queue.stats().await.unwrap().pending, 2);
}

#[tokio::test]
async fn a_refused_duplicate_writes_nothing() {
    let server = RedisServer::start();
    let queue = server.queue("nowrite").await;
    let first = queue
        .enqueue(keyed("one", "k").unique_for(Duration::from_secs(600)))
        .await
        .unwrap();
    let before = snapshot(&server);
    let dups = queue
        .enqueue_many(vec![
            keyed("two", "k").id("b"),
            keyed("three", "k").unique_for(Duration::from_secs(600)),
        ])
        .await
        .unwrap();
    assert!(
        dups.iter().all(|d| refused_by(d) == Some(&first.id)),
        "{dups:?}"
    );
    assert_eq!(snapshot(&server), before);
}

#[tokio::test]
async fn a_batch_with_one_key_twice_makes_one_job() {
    let server = RedisServer::start();
    let queue = server.queue("batch").await;
    let out = queue
        .enqueue_many(vec![
            keyed("a", "k"),
            keyed("b", "other"),
            keyed("c", "k"),
            NewJob::new("no key"),
        ])
        .await
        .unwrap();
    assert!(out[0].created && out[1].created && out[3].created);
    assert!(!out[2].created);
    assert_eq!(refused_by(&out[2]), Some(&out[0].id));
    assert!(queue.job(out[2].id.as_bytes()).await.unwrap().is_none());
    assert_eq!(queue.stats().await.unwrap().pending, 3);
}

#[tokio::test]
async fn without_unique_keys_enqueue_claim_and_ack_cost_what_they_did() {
    let server = RedisServer::start();
    let queue = server.queue("cost").await;
    let mut conn = server.conn();
    let round = async || {
        queue.enqueue(NewJob::new("x")).await.unwrap();
        let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
        assert!(queue.ack(&lease).await.unwrap());
    };
    round().await; // scripts loaded, history hashes made
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    round().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    let calls: BTreeMap<&str, u64> = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name, n))
        })
        .collect();
    // the commands the scripts ran, less a history hash's first PEXPIREAT of a minute:
    // 31, the commands the scripts ran before unique keys (enqueue's two TYPE checks of
    // stats and wake included) but two: claim reads meta's visibility in its one HMGET of
    // meta, and ack sends no DEL for a claim lease's token (it names no request record)
    let inner: u64 = calls
        .iter()
        .filter(|(name, _)| !["evalsha", "config|resetstat", "info", "pexpireat"].contains(name))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(inner, 31, "{calls:?}");
    assert!(!calls.contains_key("get"), "{calls:?}");
}

#[tokio::test]
async fn a_partitioned_queue_holds_each_key_in_its_keys_partition() {
    let server = RedisServer::start();
    let queue = PartitionedQueue::new(server.redis().await, "jq", "parts", 6).unwrap();
    // ids of their own, which would route the jobs to different partitions
    let out = queue
        .enqueue_many(
            (0..6)
                .map(|i| keyed("x", "one-key").id(format!("job-{i}")))
                .collect(),
        )
        .await
        .unwrap();
    assert!(out[0].created, "{out:?}");
    for dup in &out[1..] {
        assert_eq!(refused_by(dup), Some(&out[0].id), "{out:?}");
    }
    let part = &queue.partitions()[queue.partition_for(b"one-key")];
    assert!(part.job(b"job-0").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_keys_work_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let queue = Queue::new(cluster.redis().await, "jq", "uc").unwrap();
    let first = queue.enqueue(keyed("one", "k")).await.unwrap();
    let dup = queue.enqueue(keyed("two", "k")).await.unwrap();
    assert_eq!(refused_by(&dup), Some(&first.id));
    let lease = queue.claim(1, "w", None).await.unwrap().remove(0);
    assert!(queue.ack(&lease).await.unwrap());
    let again = queue.enqueue(keyed("three", "k")).await.unwrap();
    assert!(again.created);
    let debounced = queue
        .enqueue(keyed("four", "k").unique_mode(UniqueMode::Debounce))
        .await
        .unwrap();
    assert_eq!(debounced.existing(), Some(&again.id));
}

#[tokio::test]
async fn the_cli_names_the_key_and_the_holder_and_exits_7() {
    let server = RedisServer::start();
    let run = |payload: &str, extra: &[&str]| {
        Command::new(BIN)
            .args(["enqueue", "--redis", &server.url(), "--tag", "cli"])
            .args(["--unique-key", "report:42", "--unique-for", "10m"])
            .args(extra)
            .arg(payload)
            .output()
            .unwrap()
    };
    let first = run("one", &[]);
    assert_eq!(first.status.code(), Some(0));
    let id = String::from_utf8(first.stdout).unwrap().trim().to_string();
    let dup = run("two", &[]);
    assert_eq!(dup.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&dup.stdout).trim(), id);
    let stderr = String::from_utf8_lossy(&dup.stderr);
    assert!(
        stderr.contains(&format!(
            "error: unique key \"report:42\" is held by job {id} in jq:{{cli}}: nothing enqueued"
        )),
        "{stderr}"
    );
    // --wait does not wait for a job that was not made: refused as without it, at once
    let waited = run("two", &["--wait", "--wait-timeout", "20s"]);
    assert_eq!(waited.status.code(), Some(7), "{waited:?}");
    assert_eq!(String::from_utf8_lossy(&waited.stdout).trim(), id);
    let stderr = String::from_utf8_lossy(&waited.stderr);
    assert!(
        stderr.contains(&format!("unique key \"report:42\" is held by job {id}")),
        "{stderr}"
    );
    let debounced = run("three", &["--unique-mode", "debounce"]);
    // the holder is until-done and waiting: debounce replaces its payload
    assert_eq!(debounced.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&debounced.stdout).trim(), id);
    let queue = server.queue("cli").await;
    let info = queue.job(id.as_bytes()).await.unwrap().unwrap();
    assert_eq!(&info.payload[..], b"three");
    let show = Command::new(BIN)
        .args(["show", "--redis", &server.url(), "--tag", "cli", &id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.contains("unique key    report:42 (until-done)"),
        "{text}"
    );
}
