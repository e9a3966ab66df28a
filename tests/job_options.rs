//! Per-job options at enqueue: a job's own max attempts and backoff override its
//! queue's in every script that retries or dead-letters it (fail, settle_claim, reap),
//! and bad options are refused naming what is wrong, writing nothing.

mod support;

use std::time::Duration;

use jobqueue::queue::{
    Backoff, Error, FailMode, FailOutcome, JobOptions, NewJob, Queue, QueueSettings, Settle,
    Settled,
};
use redis::Commands;
use support::eventually::eventually;
use support::redis::RedisServer;

async fn queue_with(server: &RedisServer, tag: &str, max_attempts: u32) -> Queue {
    let queue = server.queue(tag).await;
    queue
        .configure(&QueueSettings {
            max_attempts,
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(1),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    queue
}

fn hget(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    server.conn().hget(key, field).unwrap()
}

#[tokio::test]
async fn a_jobs_max_attempts_overrides_the_queues_in_fail() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "fa", 5).await;
    queue
        .enqueue(NewJob::new("x").id("one").max_attempts(1))
        .await
        .unwrap();
    assert_eq!(
        hget(&server, "jq:{fa}:job:one", "max_attempts").as_deref(),
        Some("1"),
        "kept in the job's hash"
    );
    let lease = queue.claim(1, "w", None).await.unwrap().pop().unwrap();
    let outcome = queue
        .fail(&lease, "boom", FailMode::Retry, Backoff::Policy)
        .await
        .unwrap();
    assert_eq!(outcome, FailOutcome::Dead, "its one attempt was its last");

    // The other way round: more attempts than the queue's single one.
    let queue = queue_with(&server, "fb", 1).await;
    queue
        .enqueue(NewJob::new("x").id("three").max_attempts(3))
        .await
        .unwrap();
    queue.enqueue(NewJob::new("x").id("plain")).await.unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let leases = eventually("the job claimable", async || {
            let l = queue.claim(2, "w", None).await.unwrap();
            (!l.is_empty()).then_some(l)
        })
        .await;
        for lease in leases {
            let o = queue
                .fail(&lease, "boom", FailMode::Retry, Backoff::Policy)
                .await
                .unwrap();
            outcomes.push((lease.id.to_string(), lease.attempts, o));
        }
    }
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        outcomes,
        vec![
            ("plain".to_string(), 1, FailOutcome::Dead),
            ("three".to_string(), 1, FailOutcome::Delayed),
            ("three".to_string(), 2, FailOutcome::Delayed),
            ("three".to_string(), 3, FailOutcome::Dead),
        ]
    );
}

#[tokio::test]
async fn a_jobs_backoff_overrides_the_queues() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "bo", 5).await;
    let hour = Duration::from_secs(3600);
    queue
        .enqueue(
            NewJob::new("x")
                .id("slow")
                .backoff(Some(hour), Some(hour * 2), Some(1.5)),
        )
        .await
        .unwrap();
    let lease = queue.claim(1, "w", None).await.unwrap().pop().unwrap();
    let before = queue.now_ms().await.unwrap();
    let outcome = queue
        .fail(&lease, "boom", FailMode::Retry, Backoff::Policy)
        .await
        .unwrap();
    assert_eq!(outcome, FailOutcome::Delayed);
    let run_at: i64 = hget(&server, "jq:{bo}:job:slow", "run_at")
        .unwrap()
        .parse()
        .unwrap();
    // The queue's backoff is 1 ms; the job's own is an hour.
    assert!(
        run_at - before >= 3_600_000,
        "run_at {run_at}, before {before}"
    );
    assert!(
        run_at - before < 7_200_000,
        "run_at {run_at}, before {before}"
    );
}

#[tokio::test]
async fn settle_claim_and_reap_honour_a_jobs_max_attempts() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "sc", 5).await;
    queue
        .enqueue(NewJob::new("x").id("once").max_attempts(1))
        .await
        .unwrap();
    let lease = queue.claim(1, "w", None).await.unwrap().pop().unwrap();
    let settles = [Settle::Fail {
        lease: lease.lease_ref(),
        error: "boom",
        mode: FailMode::Retry,
        backoff: Backoff::Policy,
    }];
    let reply = queue
        .settle_claim("r1", &settles, 1, "w", None)
        .await
        .unwrap();
    assert_eq!(reply.settled, vec![Settled::Moved(FailOutcome::Dead)]);

    // reap: a lease that expires on its job's last attempt dead-letters it.
    queue
        .enqueue(NewJob::new("x").id("expiring").max_attempts(1))
        .await
        .unwrap();
    queue
        .enqueue(NewJob::new("x").id("expiring-plain"))
        .await
        .unwrap();
    let leases = queue
        .claim(2, "w", Some(Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(leases.len(), 2);
    let mut dead = 0;
    let mut requeued = 0;
    eventually("both expired leases reaped", async || {
        let o = queue.reap(100).await.unwrap();
        dead += o.dead_lettered;
        requeued += o.requeued;
        dead + requeued == 2
    })
    .await;
    assert_eq!((dead, requeued), (1, 1));
    let st = |id: &'static str| {
        let queue = &queue;
        async move { queue.job(id).await.unwrap().unwrap().status }
    };
    assert_eq!(st("expiring").await.as_deref(), Some("dead"));
    assert_eq!(st("expiring-plain").await.as_deref(), Some("pending"));
}

#[tokio::test]
async fn jobs_with_different_options_in_one_batch_each_keep_their_own() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "mx", 5).await;
    let jobs = vec![
        NewJob::new("a").id("a").max_attempts(2),
        NewJob::new("b").id("b").max_attempts(2),
        NewJob::new("c").id("c"),
        NewJob::new("d").id("d").max_attempts(9),
    ];
    let out = queue.enqueue_many(jobs).await.unwrap();
    assert!(out.iter().all(|e| e.created));
    let got: Vec<Option<String>> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| hget(&server, &format!("jq:{{mx}}:job:{id}"), "max_attempts"))
        .collect();
    assert_eq!(
        got,
        vec![Some("2".into()), Some("2".into()), None, Some("9".into())]
    );
}

#[tokio::test]
async fn bad_options_are_refused_naming_what_is_wrong_and_write_nothing() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "bad", 5).await;
    let refused = |options: JobOptions| {
        let queue = &queue;
        async move {
            match queue
                .enqueue(NewJob::new("x").id("j").options(options))
                .await
            {
                Err(Error::InvalidArgument { what, reason }) => format!("{what}: {reason}"),
                other => panic!("not refused: {other:?}"),
            }
        }
    };
    assert_eq!(
        refused(JobOptions {
            max_attempts: Some(0),
            ..Default::default()
        })
        .await,
        "max attempts: 0 is not between 1 and 1000000"
    );
    assert_eq!(
        refused(JobOptions {
            backoff_multiplier: Some(0.5),
            ..Default::default()
        })
        .await,
        "backoff multiplier: 0.5 is not a number from 1 to 1000"
    );
    assert_eq!(
        refused(JobOptions {
            backoff_initial: Some(Duration::from_secs(10)),
            backoff_max: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .await,
        "backoff max: 1s is below the initial backoff 10s"
    );
    assert!(queue.job("j").await.unwrap().is_none(), "nothing written");

    // The script refuses what another client might send.
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/enqueue.lua")).unwrap();
    let mut conn = server.conn();
    let keys = [
        "jq:{bad}:pending",
        "jq:{bad}:processing",
        "jq:{bad}:delayed",
        "jq:{bad}:dead",
        "jq:{bad}:meta",
        "jq:{bad}:stats",
        "jq:{bad}:wake",
        "jq:{bad}:job:j",
    ];
    let eval = |conn: &mut redis::Connection, extra: &[&str]| -> String {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(&script).arg(keys.len()).arg(&keys[..]);
        cmd.arg("jq:{bad}:job:").arg(1).arg("j").arg("x").arg(0);
        cmd.arg(extra);
        match cmd.query::<redis::Value>(conn) {
            Err(e) => e.to_string(),
            Ok(v) => panic!("taken: {v:?}"),
        }
    };
    let cases: [(&[&str], &str); 5] = [
        (&["options"], "invalid options: expected name, value pairs"),
        (
            &["options", "lifo", "1"],
            "invalid options: \"lifo\" is not an option",
        ),
        (
            &["options", "max_attempts", "1", "max_attempts", "2"],
            "invalid options: \"max_attempts\" is given twice",
        ),
        (
            &["options", "max_attempts", "0"],
            "invalid max_attempts: expected an integer 1..1000000, got \"0\"",
        ),
        (
            &["options", "backoff_multiplier", "1e3"],
            "invalid backoff_multiplier: expected a decimal number 1..1000, got \"1e3\"",
        ),
    ];
    for (extra, want) in cases {
        let got = eval(&mut conn, extra);
        assert!(got.contains(want), "{extra:?}: {got}");
    }
    let exists: bool = conn.exists("jq:{bad}:job:j").unwrap();
    assert!(!exists, "nothing written");
}

#[test]
fn the_cli_enqueues_with_a_jobs_own_policy() {
    let server = RedisServer::start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .args([
            "enqueue",
            "--redis",
            &server.url(),
            "--tag",
            "cli",
            "--id",
            "j",
        ])
        .args([
            "--max-attempts",
            "2",
            "--backoff-initial",
            "1h",
            "--backoff-max",
            "2h",
        ])
        .args(["--backoff-multiplier", "1.5", "x"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut fields: std::collections::BTreeMap<String, String> =
        server.conn().hgetall("jq:{cli}:job:j").unwrap();
    // A job enqueued ready also holds its enqueue time (Redis clock).
    let enqueued_at = fields.remove("enqueued_at").expect("enqueued_at");
    assert!(enqueued_at.parse::<u64>().is_ok(), "{enqueued_at}");
    let got: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("backoff_initial_ms", "3600000"),
            ("backoff_max_ms", "7200000"),
            ("backoff_multiplier", "1.5"),
            ("max_attempts", "2"),
            ("payload", "x"),
        ]
    );
}

#[tokio::test]
async fn a_job_enqueued_at_a_time_runs_then_by_the_redis_clock() {
    let server = RedisServer::start();
    let queue = queue_with(&server, "at", 5).await;
    let now = queue.now_ms().await.unwrap();
    let at = std::time::UNIX_EPOCH + Duration::from_millis(now as u64 + 3_600_000);
    queue
        .enqueue(NewJob::new("x").id("later").at(at))
        .await
        .unwrap();
    let past = std::time::UNIX_EPOCH + Duration::from_millis(now as u64 - 60_000);
    queue
        .enqueue(NewJob::new("x").id("past").at(past))
        .await
        .unwrap();
    let later = queue.job("later").await.unwrap().unwrap();
    assert_eq!(later.status.as_deref(), Some("delayed"));
    assert_eq!(
        hget(&server, "jq:{at}:job:later", "run_at"),
        Some((now + 3_600_000).to_string()),
        "run at exactly the time given"
    );
    let leases = queue.claim(2, "w", None).await.unwrap();
    let ids: Vec<String> = leases.iter().map(|l| l.id.to_string()).collect();
    assert_eq!(ids, vec!["past"], "a time in the past runs now");
}

#[test]
fn the_cli_enqueues_at_an_rfc3339_time() {
    let server = RedisServer::start();
    let enqueue = |id: &str, at: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"))
            .args([
                "enqueue",
                "--redis",
                &server.url(),
                "--tag",
                "cat",
                "--id",
                id,
            ])
            .args(["--at", at, "x"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    enqueue("future", "2999-01-01T01:00:00+01:00");
    enqueue("past", "2000-01-01T00:00:00Z");
    let mut conn = server.conn();
    let run_at: Option<String> = conn.hget("jq:{cat}:job:future", "run_at").unwrap();
    assert_eq!(run_at.as_deref(), Some("32472144000000"));
    let pending: Vec<String> = conn.lrange("jq:{cat}:pending", 0, -1).unwrap();
    assert_eq!(pending, vec!["past"]);
}

#[tokio::test]
async fn options_and_run_at_times_work_on_a_cluster() {
    let cluster = support::redis::RedisCluster::start();
    let tag = &cluster.tags_on_distinct_nodes(1)[0];
    let queue = Queue::new(cluster.redis().await, "jq", tag).unwrap();
    let now = queue.now_ms().await.unwrap();
    let soon = std::time::UNIX_EPOCH + Duration::from_millis(now as u64 + 3_600_000);
    queue
        .enqueue_many(vec![
            NewJob::new("x").id("once").max_attempts(1),
            NewJob::new("x").id("later").at(soon),
        ])
        .await
        .unwrap();
    let lease = queue.claim(1, "w", None).await.unwrap().pop().unwrap();
    assert_eq!(lease.id.as_str(), Some("once"));
    let outcome = queue
        .fail(&lease, "boom", FailMode::Retry, Backoff::Policy)
        .await
        .unwrap();
    assert_eq!(outcome, FailOutcome::Dead);
    let later = queue.job("later").await.unwrap().unwrap();
    assert_eq!(later.status.as_deref(), Some("delayed"));
}
