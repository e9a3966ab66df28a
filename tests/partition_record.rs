//! The partition count a queue records in its own `meta` (docs/partitions.md, "The
//! recorded count"): every command finds it without --partitions and works on every
//! partition, a count given that disagrees with it is refused naming both numbers,
//! `configure --partitions` records it (and a resize: the layout to drain), `enqueue
//! --partition-key` on a queue of one partition is refused, and the console lists a
//! partitioned queue as one row with its partitions' counts summed. A real redis-server
//! and the `jobqueue` binary; the record is written here with a plain `HSET`, as any
//! client of the protocol may.

mod support;

use std::process::{Command, Stdio};

use jobqueue::queue::{NewJob, PartitionedQueue, partition_tags};
use support::console::{Ui, now_ms};
use support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `jobqueue ARGS --redis URL` with `input` on stdin, without the caller's JOBQUEUE_*.
fn jq(url: &str, args: &[&str], input: &str) -> Out {
    let mut cmd = Command::new(BIN);
    for (name, _) in std::env::vars() {
        if name.starts_with("JOBQUEUE_") {
            cmd.env_remove(name);
        }
    }
    let out =
        support::procs::output_with_stdin(cmd.args(args).args(["--redis", url]), input.as_bytes());
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `jq` that must succeed; its stdout.
fn ok(url: &str, args: &[&str], input: &str) -> String {
    let out = jq(url, args, input);
    assert_eq!(out.code, 0, "jobqueue {args:?}: {}", out.stderr);
    out.stdout
}

/// What `meta` of the queue's own tag records: `partitions`, `drain_partitions`.
fn recorded(server: &RedisServer, tag: &str) -> (Option<String>, Option<String>) {
    redis::cmd("HMGET")
        .arg(format!("jq:{{{tag}}}:meta"))
        .arg("partitions")
        .arg("drain_partitions")
        .query(&mut server.conn())
        .unwrap()
}

/// The record as another client of the protocol writes it.
fn record(server: &RedisServer, tag: &str, n: usize) {
    let _: () = redis::cmd("HSET")
        .arg(format!("jq:{{{tag}}}:meta"))
        .arg("partitions")
        .arg(n)
        .query(&mut server.conn())
        .unwrap();
}

/// A queue of `n` partitions holding `jobs` jobs, some in every partition.
async fn filled(server: &RedisServer, tag: &str, n: usize, jobs: usize) -> PartitionedQueue {
    let queue = PartitionedQueue::new(server.redis().await, "jq", tag, n).unwrap();
    let batch = (0..jobs)
        .map(|i| NewJob::new(format!("job {i}")).id(format!("{tag}-{i}")))
        .collect();
    queue.enqueue_many(batch).await.unwrap();
    let stats = queue.stats().await.unwrap();
    assert!(stats.partitions.iter().all(|s| s.pending > 0), "{stats:?}");
    queue
}

fn pending_each(stats: &serde_json::Value) -> Vec<u64> {
    stats["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no partitions in {stats}"))
        .iter()
        .map(|p| p["pending"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn every_command_finds_the_recorded_count_without_partitions() {
    let server = RedisServer::start();
    let url = server.url();
    let queue = filled(&server, "parts", 3, 30).await;
    record(&server, "parts", 3);

    let stats: serde_json::Value =
        serde_json::from_str(&ok(&url, &["stats", "--tag", "parts", "--json"], "")).unwrap();
    assert_eq!(stats["pending"], 30, "every partition counted: {stats}");
    let before = pending_each(&stats);
    assert_eq!(before.len(), 3);

    let peek = ok(&url, &["peek", "--tag", "parts"], "");
    for i in 0..3 {
        assert!(peek.contains(&format!("partition {i} of 3:")), "{peek}");
    }
    // A job of a partition other than the tag's own is found by id.
    let far = (0..30)
        .map(|i| format!("parts-{i}"))
        .find(|id| queue.partitions()[queue.partition_for(id.as_bytes())].name() != "jq:{parts}")
        .unwrap();
    let show = ok(&url, &["show", "--tag", "parts", &far], "");
    assert!(show.contains("pending"), "{show}");
    let reap = ok(&url, &["reap", "--tag", "parts"], "");
    assert!(reap.contains("(3 partitions)"), "{reap}");

    // New jobs are spread over the partitions the record names.
    let lines: String = (0..60).map(|i| format!("more {i}\n")).collect();
    ok(&url, &["enqueue", "--tag", "parts", "--stdin"], &lines);
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&url, &["stats", "--tag", "parts", "--json"], "")).unwrap();
    let after = pending_each(&stats);
    assert_eq!(stats["pending"], 90, "{stats}");
    for (b, a) in before.iter().zip(&after) {
        assert!(
            a > b,
            "every partition got new jobs: {before:?} -> {after:?}"
        );
    }
    // And with a partition key: the one partition of that key.
    ok(
        &url,
        &[
            "enqueue",
            "--tag",
            "parts",
            "--partition-key",
            "k",
            "--id",
            "keyed",
            "x",
        ],
        "",
    );
    let p = queue.partition_for(b"k");
    assert!(queue.partitions()[p].job("keyed").await.unwrap().is_some());
}

#[tokio::test]
async fn a_count_that_disagrees_with_the_record_is_refused_naming_both() {
    let server = RedisServer::start();
    let url = server.url();
    let queue = filled(&server, "parts", 3, 9).await;
    record(&server, "parts", 3);

    for args in [
        &["stats", "--tag", "parts", "--partitions", "2"][..],
        &["enqueue", "--tag", "parts", "--partitions", "2", "lost?"][..],
        &["dead", "ls", "--tag", "parts", "--partitions", "2"][..],
    ] {
        let out = jq(&url, args, "");
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("--partitions")
                && out
                    .stderr
                    .contains("2 disagrees with the partition count jq:{parts} records: 3"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert_eq!(
        queue.stats().await.unwrap().total.pending,
        9,
        "nothing enqueued"
    );
    // The same count is fine.
    ok(&url, &["stats", "--tag", "parts", "--partitions", "3"], "");

    // While resizing, a drain other than the recorded one is refused too.
    let _: () = redis::cmd("HSET")
        .arg("jq:{parts}:meta")
        .arg("partitions")
        .arg(2)
        .arg("drain_partitions")
        .arg(3)
        .query(&mut server.conn())
        .unwrap();
    let out = jq(
        &url,
        &["stats", "--tag", "parts", "--drain-partitions", "4"],
        "",
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("4 disagrees with the resize jq:{parts} records: from 3 to 2 partitions"),
        "{}",
        out.stderr
    );
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&url, &["stats", "--tag", "parts", "--json"], "")).unwrap();
    assert_eq!(
        stats["pending"], 9,
        "both layouts counted while resizing: {stats}"
    );
}

#[tokio::test]
async fn enqueue_with_a_partition_key_on_a_queue_of_one_partition_is_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let out = jq(
        &url,
        &["enqueue", "--tag", "plain", "--partition-key", "k", "x"],
        "",
    );
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("--partition-key needs a partitioned queue: jq:{plain} has 1 partition"),
        "{}",
        out.stderr
    );
    let queue = server.queue("plain").await;
    assert_eq!(queue.stats().await.unwrap().pending, 0, "nothing enqueued");
}

#[tokio::test]
async fn configure_records_the_count_and_a_resize() {
    let server = RedisServer::start();
    let url = server.url();
    filled(&server, "parts", 3, 30).await;

    // No record: the flag is taken as before, with a note on how to record it.
    let out = jq(&url, &["stats", "--tag", "parts", "--partitions", "3"], "");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("jq:{parts} records no partition count")
            && out
                .stderr
                .contains("jobqueue configure --tag parts --partitions 3"),
        "{}",
        out.stderr
    );

    let text = ok(
        &url,
        &["configure", "--tag", "parts", "--partitions", "3"],
        "",
    );
    assert!(
        text.contains("partitions") && text.contains("3 (recorded now)"),
        "{text}"
    );
    assert_eq!(recorded(&server, "parts"), (Some("3".into()), None));
    let out = jq(&url, &["stats", "--tag", "parts"], "");
    assert!(!out.stderr.contains("note:"), "{}", out.stderr);

    // Shrunk to 2: the 3-partition layout drains; stats counts both, nothing lost.
    ok(
        &url,
        &["configure", "--tag", "parts", "--partitions", "2"],
        "",
    );
    assert_eq!(
        recorded(&server, "parts"),
        (Some("2".into()), Some("3".into()))
    );
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&url, &["stats", "--tag", "parts", "--json"], "")).unwrap();
    assert_eq!(stats["pending"], 30, "{stats}");
    let mut union = partition_tags("parts", 3).unwrap();
    for t in partition_tags("parts", 2).unwrap() {
        if !union.contains(&t) {
            union.push(t);
        }
    }
    assert_eq!(pending_each(&stats).len(), union.len(), "{stats}");
    // Another count while the drain is under way is refused; ending it is explicit.
    let out = jq(
        &url,
        &["configure", "--tag", "parts", "--partitions", "4"],
        "",
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("is being resized from 3 to 2 partitions"),
        "{}",
        out.stderr
    );
    ok(
        &url,
        &[
            "configure",
            "--tag",
            "parts",
            "--partitions",
            "2",
            "--drain-partitions",
            "2",
        ],
        "",
    );
    assert_eq!(recorded(&server, "parts"), (Some("2".into()), None));

    // A queue with no keys: recording its count needs --create, as its settings do.
    let out = jq(
        &url,
        &["configure", "--tag", "fresh", "--partitions", "3"],
        "",
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("add --create"), "{}", out.stderr);
    assert_eq!(recorded(&server, "fresh"), (None, None));
    ok(
        &url,
        &[
            "configure",
            "--tag",
            "fresh",
            "--partitions",
            "3",
            "--create",
        ],
        "",
    );
    assert_eq!(recorded(&server, "fresh"), (Some("3".into()), None));
}

#[tokio::test]
async fn the_console_lists_a_partitioned_queue_as_one_row() {
    let server = RedisServer::start();
    filled(&server, "parts", 3, 30).await;
    record(&server, "parts", 3);
    let plain = server.queue("plain").await;
    plain.enqueue(NewJob::new(&b"x"[..])).await.unwrap();

    let ui = Ui::start(&server.url(), &[]);
    let overview = ui.overview_after(now_ms());
    let rows = overview["queues"].as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|q| q["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["parts", "plain"], "{overview}");
    assert_eq!(
        rows[0]["counts"]["pending"], 30,
        "the partitions summed: {}",
        rows[0]
    );
    assert_eq!(rows[1]["counts"]["pending"], 1);
}

#[tokio::test]
async fn a_partitioned_queue_that_records_no_count_is_noted_where_half_seen() {
    let server = RedisServer::start();
    let url = server.url();
    filled(&server, "old", 3, 9).await;
    for cmd in [&["stats"][..], &["peek"][..], &["dead", "ls"][..]] {
        let args: Vec<&str> = cmd.iter().copied().chain(["--tag", "old"]).collect();
        let out = jq(&url, &args, "");
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(
                "note: jq:{old} records no partition count, so this shows that queue alone"
            ) && out
                .stderr
                .contains("`jobqueue configure --tag old --partitions N`"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // An unpartitioned queue gets no such note.
    let plain = server.queue("plain").await;
    plain.enqueue(NewJob::new(&b"x"[..])).await.unwrap();
    let out = jq(&url, &["stats", "--tag", "plain"], "");
    assert!(!out.stderr.contains("note:"), "{}", out.stderr);
}

#[tokio::test]
async fn a_worker_without_partitions_claims_from_every_recorded_partition() {
    let server = RedisServer::start();
    let queue = filled(&server, "parts", 3, 12).await;
    record(&server, "parts", 3);
    let mut worker = Command::new(BIN)
        .args(["worker", "--redis", &server.url(), "--tag", "parts"])
        .args(["--concurrency", "4", "--exec", "true"])
        .env_remove("JOBQUEUE_PARTITIONS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let done = support::eventually::Wait::for_("the worker to ack every partition's jobs")
        .until(async || {
            let stats = queue.stats().await.unwrap();
            (stats.total.acked == 12).then_some(stats)
        })
        .await;
    let _ = worker.kill();
    let _ = worker.wait();
    assert!(
        done.partitions
            .iter()
            .all(|s| s.acked > 0 && s.pending == 0),
        "{done:?}"
    );
}
