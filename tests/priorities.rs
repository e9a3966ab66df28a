//! Job priorities (docs/protocol.md, Priorities): a higher priority is claimed first,
//! FIFO within a priority, strict by default or by a weighted round robin; a claim costs
//! the same whatever the number of waiting jobs; every path that puts a job back in line
//! (retry, release, reap, delayed promotion, redrive) puts it back in its own priority;
//! stats, peek and the operator's backlog count every priority; on a Cluster too.

mod support;

use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, NewJob, PriorityMode, Queue, QueueSettings, Selection};
use redis::Commands;
use support::redis::{RedisCluster, RedisServer, wait_past};

/// `count` jobs of priority `p`, ids `<name>0`, `<name>1`, ..., in one call.
async fn enqueue(queue: &Queue, name: &str, p: u8, count: usize) {
    let jobs = (0..count)
        .map(|i| NewJob::new("x").id(format!("{name}{i}")).priority(p))
        .collect();
    let done = queue.enqueue_many(jobs).await.unwrap();
    assert!(done.iter().all(|e| e.created));
}

/// The ids of one claim of `n`, in the order claimed.
async fn claim(queue: &Queue, n: usize) -> Vec<String> {
    queue
        .claim(n, "w", None)
        .await
        .unwrap()
        .iter()
        .map(|l| l.id.as_str().unwrap().to_string())
        .collect()
}

fn named(name: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{name}{i}")).collect()
}

/// Commands redis-server ran (scripts' own included), since the last `CONFIG RESETSTAT`,
/// not counting the script calls and the stats commands themselves.
fn commands_run(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("evalsha") && !l.starts_with("config"))
        .filter_map(|l| {
            let calls = l.split("calls=").nth(1)?.split(',').next()?;
            calls.parse::<u64>().ok()
        })
        .sum()
}

#[tokio::test]
async fn ten_high_priority_jobs_pass_a_thousand_low_ones_at_the_cost_of_a_batch() {
    let server = RedisServer::start();
    let queue = server.queue("ten").await;
    enqueue(&queue, "low", 1, 1000).await;
    enqueue(&queue, "high", 9, 10).await;
    let mut conn = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    assert_eq!(claim(&queue, 10).await, named("high", 0..10));
    // one pop of the high list and one job read per job: nothing scales with the 1000
    let commands = commands_run(&mut conn);
    assert!(commands <= 40, "{commands} commands for a claim of 10");
    assert_eq!(claim(&queue, 3).await, named("low", 0..3));
}

#[tokio::test]
async fn jobs_of_one_priority_are_claimed_in_their_order() {
    let server = RedisServer::start();
    let queue = server.queue("fifo").await;
    enqueue(&queue, "a", 5, 6).await;
    enqueue(&queue, "b", 5, 6).await;
    let mut got = Vec::new();
    for _ in 0..12 {
        got.extend(claim(&queue, 1).await);
    }
    let mut want = named("a", 0..6);
    want.extend(named("b", 0..6));
    assert_eq!(got, want);
}

#[tokio::test]
async fn a_batch_across_three_priorities_keeps_their_order() {
    let server = RedisServer::start();
    let queue = server.queue("batch").await;
    enqueue(&queue, "zero", 0, 20).await;
    enqueue(&queue, "four", 4, 10).await;
    enqueue(&queue, "seven", 7, 10).await;
    let mut want = named("seven", 0..10);
    want.extend(named("four", 0..10));
    want.extend(named("zero", 0..12));
    assert_eq!(claim(&queue, 32).await, want);
    assert_eq!(claim(&queue, 32).await, named("zero", 12..20));
}

/// Under a steady flow of priority-3 jobs, claims of one job at a time: how many of the
/// first 90 took a priority-0 job.
async fn low_share(queue: &Queue) -> usize {
    enqueue(queue, "low", 0, 100).await;
    enqueue(queue, "high", 3, 20).await;
    let mut low = 0;
    for i in 0..90 {
        queue
            .enqueue(NewJob::new("x").id(format!("more{i}")).priority(3))
            .await
            .unwrap();
        let got = claim(queue, 1).await;
        assert_eq!(got.len(), 1);
        low += usize::from(got[0].starts_with("low"));
    }
    low
}

#[tokio::test]
async fn weighted_mode_gives_a_low_priority_its_share_under_a_steady_high_flow() {
    let server = RedisServer::start();
    let strict = server.queue("strict").await;
    assert_eq!(low_share(&strict).await, 0, "strict: the low jobs wait");

    let weighted = server.queue("weighted").await;
    weighted
        .set_priority_mode(PriorityMode::Weighted)
        .await
        .unwrap();
    assert_eq!(
        weighted.priority_mode().await.unwrap(),
        PriorityMode::Weighted
    );
    // weights 2^3 and 2^0: priority 0 gets 1 claim in 9
    assert_eq!(low_share(&weighted).await, 10);
}

#[tokio::test]
async fn every_path_back_in_line_returns_a_job_to_its_own_priority() {
    let server = RedisServer::start();
    let queue = server.queue("paths").await;
    queue
        .configure(&QueueSettings {
            max_attempts: 1,
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    let list = |p: u8| -> Vec<String> {
        let mut conn = server.conn();
        conn.lrange(queue.keys().ready(p), 0, -1).unwrap()
    };
    queue
        .enqueue_many(vec![
            NewJob::new("x").id("retry").priority(6).max_attempts(5),
            NewJob::new("x").id("release").priority(6),
            NewJob::new("x").id("reap").priority(6).max_attempts(5),
            NewJob::new("x").id("dead").priority(6),
        ])
        .await
        .unwrap();
    enqueue(&queue, "zero", 0, 2).await;
    let leases = queue
        .claim(4, "w", Some(Duration::from_millis(1)))
        .await
        .unwrap();
    let by = |id: &str| leases.iter().find(|l| l.id.as_str() == Some(id)).unwrap();

    // retry with a backoff: through delayed, promoted back to priority 6 by the reaper
    queue
        .fail(
            by("retry"),
            "boom",
            FailMode::Retry,
            Backoff::After(Duration::from_millis(1)),
        )
        .await
        .unwrap();
    assert!(queue.release(by("release")).await.unwrap());
    assert_eq!(list(6), ["release"], "released: the front of its own list");
    queue
        .fail(by("dead"), "boom", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    let mut conn = server.conn();
    let retry_at = queue.delayed_ids(1).await.unwrap()[0].1;
    wait_past(&mut conn, by("reap").lease_until.max(retry_at));
    let reaped = queue.reap(100).await.unwrap();
    assert_eq!((reaped.requeued, reaped.promoted), (1, 1));
    // reap: its expired lease at the front; the promoted retry at the back
    assert_eq!(list(6), ["retry", "release", "reap"]);
    assert_eq!(
        queue
            .redrive(&Selection::Ids(vec!["dead".into()]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(list(6), ["dead", "retry", "release", "reap"]);
    assert_eq!(list(0), ["zero1", "zero0"]);
    assert_eq!(
        claim(&queue, 6).await,
        ["reap", "release", "retry", "dead", "zero0", "zero1"]
    );

    // a job delayed at enqueue is promoted by a claim to its own priority, ahead of 0
    enqueue(&queue, "again", 0, 1).await;
    queue
        .enqueue(
            NewJob::new("x")
                .id("later")
                .priority(2)
                .delay(Duration::from_millis(1)),
        )
        .await
        .unwrap();
    let due = queue.delayed_ids(1).await.unwrap()[0].1;
    wait_past(&mut conn, due);
    assert_eq!(claim(&queue, 2).await, ["later", "again0"]);
}

#[tokio::test]
async fn stats_peek_and_the_operators_backlog_count_every_priority() {
    let server = RedisServer::start();
    let queue = server.queue("counts").await;
    enqueue(&queue, "zero", 0, 3).await;
    enqueue(&queue, "five", 5, 2).await;
    enqueue(&queue, "nine", 9, 1).await;
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.pending, 6);
    assert_eq!(stats.pending_by_priority, [3, 0, 0, 0, 0, 2, 0, 0, 0, 1]);
    let next: Vec<String> = queue
        .pending_ids(4)
        .await
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    assert_eq!(next, ["nine0", "five0", "five1", "zero0"]);
    let (page, total) = queue.pending_page(2, 3).await.unwrap();
    assert_eq!(total, 6);
    assert_eq!(
        page.iter()
            .map(|id| id.as_str().unwrap())
            .collect::<Vec<_>>(),
        ["five1", "zero0", "zero1"]
    );
    // the operator's upkeep pass: the backlog it scales on is these stats' pending
    let m = queue
        .maintain(&QueueSettings::default(), 100, 1)
        .await
        .unwrap();
    assert_eq!(m.stats.pending, 6);
    assert_eq!(queue.job("five0").await.unwrap().unwrap().priority, 5);
}

#[tokio::test]
async fn priorities_work_on_a_cluster() {
    let cluster = RedisCluster::start();
    let queue = Queue::new(cluster.redis().await, "jq", "prio").unwrap();
    enqueue(&queue, "low", 0, 5).await;
    enqueue(&queue, "high", 8, 3).await;
    queue
        .set_priority_mode(PriorityMode::Weighted)
        .await
        .unwrap();
    let mut want = named("high", 0..3);
    want.extend(named("low", 0..2));
    assert_eq!(claim(&queue, 5).await, want);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.pending, stats.pending_by_priority[8]), (3, 0));
}

#[tokio::test]
async fn a_priority_above_nine_is_refused_before_sending() {
    let server = RedisServer::start();
    let queue = server.queue("bad").await;
    let err = queue
        .enqueue(NewJob::new("x").id("j").priority(10))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
    assert!(queue.job("j").await.unwrap().is_none(), "nothing written");
}

/// `jobqueue ARGS --redis URL --tag TAG`: its stdout, after checking it exited 0.
fn cli(server: &RedisServer, tag: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .args(args)
        .args(["--redis", &server.url(), "--tag", tag])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run jobqueue");
    assert!(
        out.status.success(),
        "jobqueue {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_cli_enqueues_with_a_priority_and_shows_it() {
    let server = RedisServer::start();
    let queue = server.queue("cli").await;
    cli(&server, "cli", &["enqueue", "--id", "plain", "x"]);
    cli(
        &server,
        "cli",
        &["enqueue", "--id", "urgent", "--priority", "7", "x"],
    );
    assert_eq!(queue.job("urgent").await.unwrap().unwrap().priority, 7);
    let peek = cli(&server, "cli", &["peek"]);
    // `#  ID  PRIORITY  ATTEMPTS  AGE  PAYLOAD`, the priority 7 job first
    let rows: Vec<Vec<&str>> = peek
        .lines()
        .skip_while(|l| !l.trim_start().starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][2], "PRIORITY", "{peek}");
    assert_eq!((rows[1][1], rows[1][2]), ("urgent", "7"), "{peek}");
    assert_eq!((rows[2][1], rows[2][2]), ("plain", "0"), "{peek}");
    let stats = cli(&server, "cli", &["stats"]);
    assert!(stats.contains("by priority     p7 1, p0 1"), "{stats}");

    let shown = cli(
        &server,
        "cli",
        &["configure", "--priority-mode", "weighted"],
    );
    assert!(shown.contains("priority mode         weighted"), "{shown}");
    assert_eq!(queue.priority_mode().await.unwrap(), PriorityMode::Weighted);
}
