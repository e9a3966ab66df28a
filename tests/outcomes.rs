//! Outcomes: progress reported through lease renewals, results stored with acks, waiting
//! for a job's end (`enqueue --wait`, `Queue::enqueue_and_wait`) and the completion events
//! stream (`jobqueue events`), against a real Redis (and once a Redis Cluster).

mod support;

use std::collections::HashMap;
use std::time::Duration;

use jobqueue::queue::{
    Backoff, FailMode, JobEnd, JobOptions, LeaseRef, MAX_RESULT, NewJob, Progress, Queue,
};
use support::eventually::Wait;
use support::outcomes::{ExecProcess, LibraryWorker, cli, cli_spawn};
use support::redis::{RedisCluster, RedisServer};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn notify(job: NewJob) -> NewJob {
    let mut job = job;
    job.options = JobOptions {
        notify: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    job
}

#[tokio::test]
async fn enqueue_wait_prints_the_exec_commands_stdout() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url();
    let _worker = ExecProcess::start(&url, "w1", dir.path(), &[], "printf 'got:'; cat");
    let out = tokio::task::spawn_blocking(move || {
        cli(&[
            "enqueue",
            "--redis",
            &url,
            "--tag",
            "w1",
            "--id",
            "j1",
            "--wait",
            "--wait-timeout",
            "30s",
            "hello",
        ])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "got:hello");
    // The result stays in the job's hash (its notify keeps it) and `show` prints it.
    let show = cli(&["show", "--redis", &server.url(), "--tag", "w1", "j1"]);
    let shown = text(&show.stdout);
    assert!(shown.contains("result (9 bytes):\ngot:hello"), "{shown}");
}

#[tokio::test]
async fn a_dying_jobs_wait_prints_its_last_error_and_fails() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url();
    let _worker = ExecProcess::start(
        &url,
        "w2",
        dir.path(),
        &["--dead-exit-code", "3"],
        "echo 'disk on fire' >&2; exit 3",
    );
    let out = tokio::task::spawn_blocking(move || {
        cli(&[
            "enqueue",
            "--redis",
            &url,
            "--tag",
            "w2",
            "--wait",
            "--wait-timeout",
            "30s",
            "x",
        ])
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("died") && err.contains("disk on fire"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn a_wait_that_times_out_says_so_and_fails() {
    let server = RedisServer::start();
    let out = cli(&[
        "enqueue",
        "--redis",
        &server.url(),
        "--tag",
        "w3",
        "--wait",
        "--wait-timeout",
        "300ms",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("did not end within 300ms"),
        "{}",
        text(&out.stderr)
    );
}

/// The end of a job whose `done` entry the waiter never sees: announced before the wait
/// began (its entry trimmed away), and ended while it waits with no entry at all.
#[tokio::test]
async fn a_missed_notification_still_ends_the_wait() {
    let server = RedisServer::start();
    let queue = server.queue("m1").await;
    queue
        .enqueue(notify(NewJob::new("a").id("a")))
        .await
        .unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    let ok = queue
        .ack_many(&[lease.lease_ref().with_result(b"result of a")])
        .await
        .unwrap();
    assert_eq!(ok, vec![true]);
    // The notification is lost: the stream is gone before anyone waits.
    let mut conn = server.conn();
    let _: () = redis::cmd("DEL")
        .arg(queue.done_key())
        .query(&mut conn)
        .unwrap();
    let end = queue.wait_for("a", Duration::from_secs(10)).await.unwrap();
    assert_eq!(end, Some(JobEnd::Done("result of a".into())));

    // Ended while the waiter blocks, with no entry: its timer reads the hash again.
    queue
        .enqueue(notify(NewJob::new("b").id("b")))
        .await
        .unwrap();
    let waiter = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.wait_for("b", Duration::from_secs(20)).await })
    };
    let key = format!("{}:job:b", queue.name());
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("status")
        .arg("dead")
        .arg("last_error")
        .arg("written by hand")
        .query(&mut conn)
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the wait ends by its recheck")
        .unwrap()
        .unwrap();
    assert_eq!(end, Some(JobEnd::Dead("written by hand".into())));
}

#[tokio::test]
async fn progress_from_exec_stdout_shows_while_the_job_runs_and_stays_out_of_the_result() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let script = "echo 'jobqueue:progress 40 copying files'; echo first; \
                  while [ ! -f \"$OUT/go\" ]; do sleep 0.05; done; \
                  echo 'jobqueue:progress 100 done'; echo second";
    let _worker = ExecProcess::start(
        &server.url(),
        "p1",
        dir.path(),
        &["--visibility", "30s"],
        script,
    );
    let queue = server.queue("p1").await;
    queue
        .enqueue(notify(NewJob::new("x").id("p")))
        .await
        .unwrap();
    let url = server.url();
    let shown = Wait::for_("the progress in jobqueue show")
        .within(Duration::from_secs(20))
        .until(async || {
            let out = cli(&["show", "--redis", &url, "--tag", "p1", "p"]);
            let shown = text(&out.stdout);
            shown
                .contains("progress      40% copying files")
                .then_some(shown)
        })
        .await;
    assert!(shown.contains("processing"), "{shown}");
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let end = queue.wait_for("p", Duration::from_secs(20)).await.unwrap();
    assert_eq!(end, Some(JobEnd::Done("first\nsecond\n".into())));
}

#[tokio::test]
async fn a_result_over_the_bound_fails_the_job_clearly() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = server.queue("r1").await;
    queue
        .configure(&jobqueue::queue::QueueSettings {
            max_attempts: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let _worker = ExecProcess::start(
        &server.url(),
        "r1",
        dir.path(),
        &["--result-limit", "10"],
        "echo 0123456789abcdef",
    );
    queue
        .enqueue(notify(NewJob::new("x").id("big")))
        .await
        .unwrap();
    let end = queue
        .wait_for("big", Duration::from_secs(20))
        .await
        .unwrap();
    let Some(JobEnd::Dead(error)) = end else {
        panic!("expected the job dead, got {end:?}");
    };
    assert!(
        error.contains("stdout is 17 bytes, more than the result limit of 10"),
        "{error}"
    );

    // The library refuses a result over the protocol's bound before sending it (a queue
    // with no worker)...
    let queue = server.queue("r2").await;
    queue.enqueue(NewJob::new("y").id("lib")).await.unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    let big = vec![b'x'; MAX_RESULT + 1];
    let err = queue
        .ack_many(&[lease.lease_ref().with_result(&big)])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("65537 bytes is more than the 65536"),
        "{err}"
    );
    // ...and so does the script, changing nothing.
    let mut conn = server.conn();
    let keys = queue.keys();
    let reply: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg(jobqueue::queue::SCRIPTS.ack.source)
        .arg(8)
        .arg(keys.queue_keys().as_slice())
        .arg(keys.job("lib"))
        .arg(&keys.job_prefix)
        .arg(1)
        .arg("lib")
        .arg(&lease.token)
        .arg("results")
        .arg(1)
        .arg(&big)
        .query(&mut conn);
    let err = reply.unwrap_err().to_string();
    assert!(
        err.contains("invalid result: expected at most 65536 bytes for pair 1, got 65537 bytes"),
        "{err}"
    );
    let status: Option<String> = redis::cmd("HGET")
        .arg(keys.job("lib"))
        .arg("status")
        .query(&mut conn)
        .unwrap();
    assert_eq!(status.as_deref(), Some("processing"));
    // A worker's handler: set_result refuses it, and the job fails with that error.
    let ctx_err = Progress::new(101, "x").unwrap_err();
    assert!(
        ctx_err.to_string().contains("101 is not a percent"),
        "{ctx_err}"
    );
}

#[tokio::test]
async fn a_handlers_result_over_the_bound_fails_its_job_though_the_handler_succeeds() {
    let server = RedisServer::start();
    let queue = server.queue("r3").await;
    queue
        .configure(&jobqueue::queue::QueueSettings {
            max_attempts: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let worker = LibraryWorker::start(&queue);
    let (_, end) = queue
        .enqueue_and_wait(NewJob::new("big"), Duration::from_secs(30))
        .await
        .unwrap();
    worker.stop().await;
    assert_eq!(
        end,
        Some(JobEnd::Dead(
            "the job's result is 65537 bytes, more than the 65536 a result may hold".into()
        ))
    );
}

#[tokio::test]
async fn events_follow_acked_failed_dead_and_cancelled_in_order() {
    let server = RedisServer::start();
    let queue = server.queue("e1").await;
    queue.set_events(100).await.unwrap();
    queue
        .enqueue_many(vec![NewJob::new("1").id("a"), NewJob::new("2").id("b")])
        .await
        .unwrap();
    let a = queue.claim_one("w", None).await.unwrap().unwrap();
    assert!(queue.ack(&a).await.unwrap());
    let b = queue.claim_one("w", None).await.unwrap().unwrap();
    queue
        .fail(&b, "flaky", FailMode::Retry, Backoff::Immediate)
        .await
        .unwrap();
    let b = queue.claim_one("w", None).await.unwrap().unwrap();
    queue
        .fail(&b, "broken", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    queue.enqueue(NewJob::new("3").id("c")).await.unwrap();
    queue.cancel("c").await.unwrap();
    let out = cli(&[
        "events",
        "--redis",
        &server.url(),
        "--tag",
        "e1",
        "--from",
        "0",
        "--count",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<Vec<String>> = text(&out.stdout)
        .lines()
        .map(|l| l.splitn(4, ' ').skip(1).map(str::to_string).collect())
        .collect();
    let want: Vec<Vec<String>> = [
        vec!["acked", "a"],
        vec!["failed", "b", "flaky"],
        vec!["dead", "b", "broken"],
        vec!["cancelled", "c"],
    ]
    .iter()
    .map(|v| v.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(lines, want);

    // --from now: only what comes next.
    let follower = cli_spawn(&[
        "events",
        "--redis",
        &server.url(),
        "--tag",
        "e1",
        "--count",
        "1",
    ]);
    // The follower starts at the stream's end; a job acked after it started is its line.
    let mut conn = server.conn();
    Wait::for_("the follower's blocking read")
        .within(Duration::from_secs(10))
        .until_blocking(|| {
            let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
            clients.contains("cmd=xread")
        });
    queue.enqueue(NewJob::new("4").id("d")).await.unwrap();
    let d = queue.claim_one("w", None).await.unwrap().unwrap();
    assert!(queue.ack(&d).await.unwrap());
    let out = tokio::task::spawn_blocking(move || follower.wait_with_output().unwrap())
        .await
        .unwrap();
    let line = text(&out.stdout);
    assert!(
        line.ends_with(" acked d\n") && line.lines().count() == 1,
        "{line}"
    );
}

#[tokio::test]
async fn the_events_stream_is_capped() {
    let server = RedisServer::start();
    let queue = server.queue("e2").await;
    queue.set_events(10).await.unwrap();
    for round in 0..5 {
        let jobs = (0..100)
            .map(|i| NewJob::new("x").id(format!("{round}-{i}")))
            .collect();
        queue.enqueue_many(jobs).await.unwrap();
        let leases = queue.claim(100, "w", None).await.unwrap();
        let refs: Vec<LeaseRef<'_>> = leases.iter().map(|l| l.lease_ref()).collect();
        queue.ack_many(&refs).await.unwrap();
    }
    let mut conn = server.conn();
    let len: u64 = redis::cmd("XLEN")
        .arg(queue.events_key())
        .query(&mut conn)
        .unwrap();
    // MAXLEN ~ trims whole stream nodes (100 entries by default): about 10 are kept.
    assert!((10..=110).contains(&len), "{len} events kept of 500");
}

/// INFO commandstats around one claim and one ack: the same commands whether or not
/// the queue and the job use outcomes, except the ones an outcome asks for.
#[tokio::test]
async fn claim_and_ack_cost_no_extra_commands_when_outcomes_are_unused() {
    let server = RedisServer::start();
    let queue = server.queue("c1").await;
    let mut conn = server.conn();
    // Warm: scripts loaded, connections made.
    queue.enqueue(NewJob::new("warm").id("warm")).await.unwrap();
    let l = queue.claim_one("w", None).await.unwrap().unwrap();
    queue.ack(&l).await.unwrap();

    async fn measure(
        queue: &Queue,
        conn: &mut redis::Connection,
        job: NewJob,
        result: Option<&[u8]>,
    ) -> HashMap<String, u64> {
        queue.enqueue(job).await.unwrap();
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(conn).unwrap();
        let lease = queue.claim_one("w", None).await.unwrap().unwrap();
        let r = lease.lease_ref();
        let r = match result {
            Some(b) => r.with_result(b),
            None => r,
        };
        assert_eq!(queue.ack_many(&[r]).await.unwrap(), vec![true]);
        let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
        info.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest
                    .strip_prefix("calls=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                // pexpireat: a history hash's first field of the minute, not every call
                let counted = !matches!(name, "evalsha" | "eval" | "info" | "pexpireat")
                    && !name.starts_with("config");
                counted.then(|| (name.to_string(), calls))
            })
            .collect()
    }
    let plain = measure(&queue, &mut conn, NewJob::new("p").id("plain"), None).await;
    let total: u64 = plain.values().sum();
    // claim and ack as before outcomes, less two: 21 commands (the scripts of the release
    // before them, measured the same way, ran 23: claim now reads meta's visibility in
    // its one HMGET of meta, and ack sends no DEL for a claim lease's token)
    assert_eq!(total, 21, "{plain:?}");
    assert!(!plain.contains_key("xadd"), "{plain:?}");

    // Used: a result rides on ack's HSET; notify adds one XADD (done), events one more.
    queue.set_events(100).await.unwrap();
    let used = measure(
        &queue,
        &mut conn,
        notify(NewJob::new("u").id("used")),
        Some(b"r"),
    )
    .await;
    assert_eq!(used.get("xadd"), Some(&2), "{used:?}");
    let total_used: u64 = used.values().sum();
    // the kept hash: HSET, HDEL lease_until and PEXPIRE in place of one DEL; and ack's
    // read of the fields of a job with end_opts (its notify), one HMGET
    assert_eq!(total_used, total + 5, "{used:?} against {plain:?}");
    assert_eq!(
        used.get("hmget"),
        plain.get("hmget").map(|n| *n + 1).as_ref(),
        "{used:?}"
    );
}

#[tokio::test]
async fn a_library_worker_reports_progress_and_a_result_waited_for_on_a_cluster() {
    let cluster = RedisCluster::start();
    let queue = Queue::new(cluster.redis().await, "jq", "cl").unwrap();
    queue.set_events(100).await.unwrap();
    let worker = LibraryWorker::start(&queue);
    let (enqueued, end) = queue
        .enqueue_and_wait(NewJob::new("payload"), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(end, Some(JobEnd::Done("done:payload".into())));
    let info = queue.job(enqueued.id.as_bytes()).await.unwrap().unwrap();
    assert_eq!(info.result.as_deref(), Some(&b"done:payload"[..]));
    worker.stop().await;
    let mut conn = queue
        .redis()
        .dedicated(Duration::from_secs(1))
        .await
        .unwrap();
    let events = queue.read_events(&mut conn, "0-0", 10, None).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event, "acked");
    assert_eq!(events[0].id, enqueued.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_job_page_reads_progress_and_the_result() {
    let server = RedisServer::start();
    let queue = server.queue("ui").await;
    queue
        .enqueue(notify(NewJob::new("x").id("j")))
        .await
        .unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    let progress = Progress::new(70, "resizing").unwrap();
    let renewed = queue
        .renew_many(&[lease.lease_ref().with_progress(&progress)], None)
        .await
        .unwrap();
    assert!(matches!(renewed[0], jobqueue::queue::Renewal::Extended(_)));
    let ui = support::console::Ui::start(&server.url(), &[]);
    // The console finds the queue at its first scan.
    Wait::for_("the console to know the queue")
        .within(Duration::from_secs(10))
        .until_blocking(|| ui.get("/api/job?q=ui&id=j").0 == 200);
    let shown = ui.get_json("/api/job?q=ui&id=j");
    assert_eq!(shown["progress"]["percent"], 70, "{shown}");
    assert_eq!(shown["progress"]["message"], "resizing", "{shown}");
    assert_eq!(shown["result"], serde_json::Value::Null, "{shown}");
    let ok = queue
        .ack_many(&[lease.lease_ref().with_result(b"800x600")])
        .await
        .unwrap();
    assert_eq!(ok, vec![true]);
    let shown = ui.get_json("/api/job?q=ui&id=j");
    assert_eq!(shown["result"], "800x600", "{shown}");
    assert_eq!(shown["status"], "done", "{shown}");
    ui.stop();
}
