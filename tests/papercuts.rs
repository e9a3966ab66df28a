//! Small things the CLI's output gets right: counts in the right number, the end of an
//! error where it is, a duplicate id said plainly, no progress noise off a terminal, a
//! closed stdout ending a command quietly, and the worker's per-ack debug line.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use jobqueue::queue::{Backoff, FailMode, NewJob, Queue};
use support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// The binary pointed at `tag` on `server`, with no JOBQUEUE_* settings inherited.
fn jobqueue(server: &RedisServer, tag: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    for var in [
        "JOBQUEUE_REDIS_URL",
        "JOBQUEUE_CLUSTER",
        "JOBQUEUE_TAG",
        "JOBQUEUE_PREFIX",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .args(["--redis", &server.url(), "--tag", tag]);
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: Output) -> (String, String) {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    (stdout, stderr)
}

/// `n` payloads, one per line.
fn lines(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("{{\"n\":{i}}}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Run with `input` on stdin; stdout and stderr are pipes (not terminals).
fn run_with_stdin(mut cmd: Command, input: Vec<u8>) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    out
}

/// Dead jobs with these ids and last errors, dead in this order.
async fn dead_jobs(queue: &Queue, jobs: &[(String, String)]) {
    for (id, error) in jobs {
        queue
            .enqueue(NewJob::new("p").id(id.clone()))
            .await
            .unwrap();
        let lease = queue.claim_one("w1", None).await.unwrap().unwrap();
        assert_eq!(&lease.id, id.as_str());
        queue
            .fail(&lease, error, FailMode::Dead, Backoff::Policy)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn summaries_count_in_the_right_number() {
    let server = RedisServer::start();
    let queue = server.queue("pl").await;
    let jobs: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| (id.to_string(), "boom".to_string()))
        .collect();
    dead_jobs(&queue, &jobs).await;

    let (stdout, _) = ok(jobqueue(&server, "pl", &["dead", "redrive", "a"])
        .output()
        .unwrap());
    assert_eq!(
        stdout.trim(),
        "redrove 1 dead job back to pending in jq:{pl}"
    );
    let (stdout, _) = ok(jobqueue(&server, "pl", &["dead", "ls"]).output().unwrap());
    assert!(stdout.starts_with("2 dead jobs in jq:{pl}\n"), "{stdout}");
    let (stdout, _) = ok(
        jobqueue(&server, "pl", &["dead", "purge", "--all", "--yes"])
            .output()
            .unwrap(),
    );
    assert_eq!(stdout.trim(), "purged 2 dead jobs from jq:{pl}");

    let out = run_with_stdin(jobqueue(&server, "pl", &["enqueue", "--stdin"]), lines(1));
    let (stdout, _) = ok(out);
    assert_eq!(stdout.trim(), "enqueued 1 job to jq:{pl}");
}

#[tokio::test]
async fn dead_ls_previews_the_end_of_a_stderr_tail() {
    let server = RedisServer::start();
    let queue = server.queue("tail").await;
    let error = format!(
        "exit code 1; stderr: …{}\nValueError: order 17 has no customer",
        "  File \"worker.py\", line 3, in handle\n".repeat(20)
    );
    dead_jobs(&queue, &[("t1".into(), error)]).await;

    let (stdout, _) = ok(jobqueue(&server, "tail", &["dead", "ls"]).output().unwrap());
    let row = stdout.lines().nth(2).expect("a row under the header");
    assert!(row.starts_with("t1 "), "{stdout}");
    assert!(
        row.ends_with("ValueError: order 17 has no customer"),
        "the error at the end of the tail is shown: {row}"
    );
    assert!(row.contains("exit code 1; stderr: …"), "{row}");
}

#[test]
fn a_duplicate_id_says_it_already_existed_and_succeeds() {
    let server = RedisServer::start();
    let enqueue = || {
        jobqueue(&server, "dup", &["enqueue", "--id", "order-7", "{}"])
            .output()
            .unwrap()
    };
    let (_, stderr) = ok(enqueue());
    assert_eq!(stderr, "", "a new id is not reported");
    let (stdout, stderr) = ok(enqueue());
    assert_eq!(stdout.trim(), "order-7");
    assert!(stderr.contains("order-7 already exists"), "{stderr}");
}

/// Progress is for a person at a terminal: with stderr a pipe, a bulk enqueue and a
/// redrive of a large set write nothing there (and the work is done).
#[tokio::test]
async fn long_operations_are_quiet_off_a_terminal() {
    let server = RedisServer::start();
    let queue = server.queue("quiet").await;
    let out = run_with_stdin(
        jobqueue(&server, "quiet", &["enqueue", "--stdin"]),
        lines(2500),
    );
    let (stdout, stderr) = ok(out);
    assert_eq!(stdout.trim(), "enqueued 2500 jobs to jq:{quiet}");
    assert_eq!(stderr, "");

    let mut leases = queue.claim(1000, "w1", None).await.unwrap();
    leases.extend(queue.claim(200, "w1", None).await.unwrap());
    assert_eq!(leases.len(), 1200, "more than one batch");
    for lease in &leases {
        queue
            .fail(lease, "boom", FailMode::Dead, Backoff::Policy)
            .await
            .unwrap();
    }
    let (stdout, stderr) = ok(jobqueue(&server, "quiet", &["dead", "redrive", "--all"])
        .output()
        .unwrap());
    assert_eq!(
        stdout.trim(),
        "redrove 1200 dead jobs back to pending in jq:{quiet}"
    );
    assert_eq!(stderr, "");
    assert_eq!(queue.stats().await.unwrap().dead, 0);
}

/// `jobqueue enqueue --stdin --print-ids < big | head -1`: before, the second write to
/// the closed pipe panicked (exit 101, a panic message on stderr) and the lines after
/// the first batch were never enqueued.
#[tokio::test]
async fn enqueue_stdin_into_head_ends_quietly_and_enqueues_everything() {
    let server = RedisServer::start();
    let queue = server.queue("head").await;
    let mut child = jobqueue(&server, "head", &["enqueue", "--stdin", "--print-ids"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // 5000 ids are far more than a pipe buffers: the command is still writing when the
    // reader goes away.
    let writer = std::thread::spawn(move || stdin.write_all(&lines(5000)));
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The read end is dropped here, as `head -1` exits.
    assert!(!first.trim().is_empty());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(stderr, "");
    assert_eq!(queue.stats().await.unwrap().pending, 5000);
}

/// Redrive, purge and reap print a summary: with stdout already closed, the work is
/// done and the command ends quietly with success (it panicked with exit 101 before).
#[tokio::test]
async fn summaries_to_a_closed_stdout_end_quietly() {
    let server = RedisServer::start();
    let queue = server.queue("closed").await;
    let jobs: Vec<_> = ["a", "b"]
        .iter()
        .map(|id| (id.to_string(), "boom".to_string()))
        .collect();
    dead_jobs(&queue, &jobs).await;
    let closed = |args: &[&str]| {
        let mut child = jobqueue(&server, "closed", args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            (out.status.code(), text(&out.stderr)),
            (Some(0), String::new()),
            "{args:?}"
        );
    };
    closed(&["dead", "redrive", "a"]);
    closed(&["dead", "purge", "--all", "--yes"]);
    closed(&["reap"]);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.pending, stats.dead), (1, 0));
}

/// With `RUST_LOG=debug` the worker logs each acked job: id, attempt and time taken.
#[tokio::test]
async fn each_ack_is_logged_at_debug() {
    let server = RedisServer::start();
    let queue = server.queue("ack").await;
    queue.enqueue(NewJob::new("{}").id("job-1")).await.unwrap();
    let log = server.dir.path().join("worker.log");
    // --exec takes the rest of the line: the connection flags go first.
    let mut child = Command::new(BIN)
        .args([
            "worker",
            "--redis",
            &server.url(),
            "--tag",
            "ack",
            "--exec",
            "true",
        ])
        .env_remove("JOBQUEUE_REDIS_URL")
        .env("RUST_LOG", "jobqueue=debug")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .find(|l| l.contains("acked") && l.contains("job-1"))
        {
            break line.to_string();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("no ack line in:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("DEBUG"), "{line}");
    assert!(line.contains("attempt=1"), "{line}");
    assert!(line.contains("took="), "{line}");
}
