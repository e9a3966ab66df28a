//! The operations CLI, run as a user runs it (the built binary), against a private
//! redis-server: what each command prints and writes, and every error path's message
//! and exit code.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use jobqueue::queue::{Backoff, FailMode, NewJob, Queue, SCRIPTS};
use redis::Commands;
use support::redis::{RedisServer, free_port, wait_past};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// The binary with no JOBQUEUE_* settings inherited from the environment.
fn jobqueue() -> Command {
    let mut cmd = Command::new(BIN);
    for var in [
        "JOBQUEUE_REDIS_URL",
        "JOBQUEUE_CLUSTER",
        "JOBQUEUE_TAG",
        "JOBQUEUE_PREFIX",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().expect("exited by a signal"),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    /// A failure reported as exactly one `error: ...` line, with this exit code.
    fn fails(self, code: i32, needles: &[&str]) -> Run {
        assert_eq!(
            self.code, code,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line expected: {}", self.stderr);
        assert!(lines[0].starts_with("error: "), "{}", self.stderr);
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "{needle:?} not in {}",
                self.stderr
            );
        }
        self
    }

    /// The value on the line whose first word(s) are `label` (tables print one
    /// `label value` pair per line).
    fn value(&self, label: &str) -> String {
        self.stdout
            .lines()
            .map(str::trim_start)
            .find_map(|l| {
                l.strip_prefix(label)
                    .filter(|rest| rest.starts_with(' '))
                    .map(|rest| rest.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no {label:?} line in:\n{}", self.stdout))
    }
}

fn run(server: &RedisServer, tag: &str, args: &[&str]) -> Run {
    run_with_stdin(server, tag, args, None)
}

fn run_with_stdin(server: &RedisServer, tag: &str, args: &[&str], input: Option<&[u8]>) -> Run {
    let mut cmd = jobqueue();
    cmd.args(args)
        .args(["--redis", &server.url(), "--tag", tag])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("run jobqueue");
    if let Some(input) = input {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).unwrap();
    }
    child.wait_with_output().unwrap().into()
}

/// Run with an arbitrary URL (the error paths).
fn run_url(url: &str, args: &[&str]) -> Run {
    jobqueue()
        .args(args)
        .args(["--redis", url, "--tag", "t"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .into()
}

fn payload_of(conn: &mut redis::Connection, queue: &Queue, id: &str) -> Option<Vec<u8>> {
    conn.hget(queue.keys().job(id), "payload").unwrap()
}

/// Jobs that died: enqueued with these ids, claimed, failed to the dead-letter set.
async fn dead_jobs(queue: &Queue, conn: &mut redis::Connection, ids: &[&str]) {
    for id in ids {
        queue
            .enqueue(NewJob::new(format!("payload-{id}")).id(*id))
            .await
            .unwrap();
        let lease = queue.claim_one("w1", None).await.unwrap().unwrap();
        assert_eq!(&lease.id, id);
        let out = queue
            .fail(
                &lease,
                &format!("boom-{id}"),
                FailMode::Dead,
                Backoff::Policy,
            )
            .await
            .unwrap();
        assert_eq!(out, jobqueue::queue::FailOutcome::Dead);
        // Distinct times of death, so "oldest" is well defined.
        support::redis::next_ms(conn);
    }
}

/// Send a signal to a child by pid.
fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Lines of a child's stdout, read on a thread so a test can wait with a deadline.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return line,
            Ok(_) => {}
            Err(e) => panic!("no line with {what}: {e}"),
        }
    }
}

// ---- enqueue ----

#[tokio::test]
async fn enqueue_takes_a_payload_argument_and_prints_the_id() {
    let server = RedisServer::start();
    let queue = server.queue("arg").await;
    let mut conn = server.conn();
    let out = run(&server, "arg", &["enqueue", r#"{"to":"ada"}"#]).ok();
    let id = out.stdout.trim();
    assert_eq!(id.len(), 12, "{}", out.stdout);
    assert_eq!(
        payload_of(&mut conn, &queue, id).as_deref(),
        Some(&br#"{"to":"ada"}"#[..])
    );
    assert_eq!(queue.pending_ids(10).await.unwrap(), [id]);
}

#[tokio::test]
async fn enqueue_reads_a_file_byte_for_byte() {
    let server = RedisServer::start();
    let queue = server.queue("file").await;
    let mut conn = server.conn();
    let bytes = b"\x00\xff binary\nline two\r\n\n".to_vec();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&bytes).unwrap();
    let path = file.path().to_str().unwrap();
    let out = run(&server, "file", &["enqueue", "--file", path, "--id", "f1"]).ok();
    assert_eq!(out.stdout.trim(), "f1");
    assert_eq!(payload_of(&mut conn, &queue, "f1"), Some(bytes));

    let missing = run(
        &server,
        "file",
        &["enqueue", "--file", "/nonexistent/job.json"],
    );
    missing.fails(1, &["cannot read /nonexistent/job.json"]);
}

#[tokio::test]
async fn enqueue_stdin_sends_one_job_per_line_1000_per_call() {
    let server = RedisServer::start();
    let queue = server.queue("bulk").await;
    let mut conn = server.conn();
    // Loaded beforehand, so every EVALSHA counted below is one enqueue call.
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SCRIPTS.enqueue.source)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let mut input = String::new();
    let mut expected = Vec::new();
    for i in 0..2500 {
        input.push_str(&format!("{{\"n\":{i}}}\n"));
        expected.push(format!("{{\"n\":{i}}}"));
    }
    input.push('\n'); // empty lines are skipped
    input.push_str("windows line\r\n");
    expected.push("windows line".into());
    input.push_str("last line without newline");
    expected.push("last line without newline".into());

    let out = run_with_stdin(
        &server,
        "bulk",
        &["enqueue", "--stdin"],
        Some(input.as_bytes()),
    )
    .ok();
    assert_eq!(out.stdout.trim(), "enqueued 2502 jobs to jq:{bulk}");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    let evalsha = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or_else(|| panic!("{info}"));
    assert!(
        evalsha.contains("calls=3,"),
        "3 calls for 2502 jobs: {evalsha}"
    );

    // FIFO: claimed in the order of the lines.
    let ids = queue.pending_ids(1000).await.unwrap();
    assert_eq!(queue.stats().await.unwrap().pending, 2502);
    for (id, want) in ids.iter().zip(&expected) {
        let got = payload_of(&mut conn, &queue, id.as_str().unwrap()).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), *want);
    }
    let mut all: Vec<String> = Vec::new();
    for lease in queue.claim(1000, "w", None).await.unwrap() {
        all.push(String::from_utf8(lease.payload.to_vec()).unwrap());
    }
    for lease in queue.claim(1000, "w", None).await.unwrap() {
        all.push(String::from_utf8(lease.payload.to_vec()).unwrap());
    }
    for lease in queue.claim(1000, "w", None).await.unwrap() {
        all.push(String::from_utf8(lease.payload.to_vec()).unwrap());
    }
    assert_eq!(all, expected);

    let out = run_with_stdin(
        &server,
        "bulk",
        &["enqueue", "--stdin", "--print-ids"],
        Some(b"a\nb\n"),
    )
    .ok();
    let ids: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(ids.len(), 2, "{}", out.stdout);
    assert_eq!(payload_of(&mut conn, &queue, ids[1]).unwrap(), b"b");
}

/// Lines of binary input (a NUL byte, bytes that are not UTF-8) are still one job each,
/// but not silently: a warning on stderr says what is being done and points to --file.
#[tokio::test]
async fn enqueue_stdin_of_binary_input_warns() {
    let server = RedisServer::start();
    let queue = server.queue("binl").await;
    let out = run_with_stdin(
        &server,
        "binl",
        &["enqueue", "--stdin"],
        Some(b"text first\nnul\x00byte\nnot\xffutf8\n"),
    )
    .ok();
    assert_eq!(out.stdout.trim(), "enqueued 3 jobs to jq:{binl}");
    assert!(
        out.stderr
            .contains("warning: stdin is not text (line 2 holds a NUL byte)")
            && out.stderr.contains("--file FILE"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("enqueued 3 jobs from lines of binary input"),
        "{}",
        out.stderr
    );
    assert_eq!(queue.stats().await.unwrap().pending, 3);

    // Text input says nothing of the kind.
    let out = run_with_stdin(
        &server,
        "binl",
        &["enqueue", "--stdin"],
        Some("é\n".as_bytes()),
    )
    .ok();
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
}

/// A 100 000-character id is refused without being echoed whole: its start and its
/// length, by --id as by --id-hex.
#[tokio::test]
async fn a_huge_id_is_not_echoed_whole() {
    let server = RedisServer::start();
    let long = "a".repeat(100_000);
    let out = run(&server, "huge", &["enqueue", "--id", &long, "x"])
        .fails(2, &["(100000 bytes)", "1 to 1024 bytes"]);
    assert!(
        out.stderr.len() < 400,
        "{} bytes: {}",
        out.stderr.len(),
        &out.stderr[..400]
    );
    let out = run(&server, "huge", &["enqueue", "--id-hex", &long, "x"])
        .fails(2, &["50000 bytes", "1 to 1024 bytes"]);
    assert!(out.stderr.len() < 400, "{} bytes", out.stderr.len());
    let out = run(&server, "huge", &["show", "--id-hex", &long]).fails(2, &["50000 bytes"]);
    assert!(out.stderr.len() < 400, "{} bytes", out.stderr.len());
}

#[tokio::test]
async fn enqueue_with_an_existing_id_changes_nothing() {
    let server = RedisServer::start();
    let queue = server.queue("dedup").await;
    let mut conn = server.conn();
    let first = run(&server, "dedup", &["enqueue", "--id", "order-7", "one"]).ok();
    assert_eq!(first.stdout.trim(), "order-7");
    assert!(first.stderr.is_empty(), "{}", first.stderr);
    let again = run(&server, "dedup", &["enqueue", "--id", "order-7", "two"]).ok();
    assert_eq!(again.stdout.trim(), "order-7");
    assert!(
        again.stderr.contains("order-7 already exists") && again.stderr.contains("nothing changed"),
        "{}",
        again.stderr
    );
    assert_eq!(payload_of(&mut conn, &queue, "order-7").unwrap(), b"one");
    assert_eq!(queue.stats().await.unwrap().pending, 1);
}

#[tokio::test]
async fn enqueue_with_a_delay_schedules_the_job() {
    let server = RedisServer::start();
    let queue = server.queue("later").await;
    let mut conn = server.conn();
    run(
        &server,
        "later",
        &["enqueue", "--id", "l1", "--delay", "5s", "x"],
    )
    .ok();
    let run_at: i64 = conn.zscore(&queue.keys().delayed, "l1").unwrap();
    let enqueued_at: i64 = conn.hget(queue.keys().job("l1"), "enqueued_at").unwrap();
    assert_eq!(run_at - enqueued_at, 5000);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.pending, stats.delayed), (0, 1));

    run(
        &server,
        "later",
        &["enqueue", "--id", "l2", "--delay", "1m30s", "x"],
    )
    .ok();
    let run_at: i64 = conn.zscore(&queue.keys().delayed, "l2").unwrap();
    let enqueued_at: i64 = conn.hget(queue.keys().job("l2"), "enqueued_at").unwrap();
    assert_eq!(run_at - enqueued_at, 90_000);

    let bad = run(&server, "later", &["enqueue", "--delay", "5", "x"]);
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr
            .starts_with("error: invalid value '5' for '--delay <DELAY>'")
            && bad.stderr.contains("no unit"),
        "{}",
        bad.stderr
    );
}

// ---- stats ----

#[tokio::test]
async fn stats_prints_the_counts_as_a_table_and_as_json() {
    let server = RedisServer::start();
    let queue = server.queue("st").await;
    for i in 0..4 {
        queue
            .enqueue(NewJob::new(format!("{i}")).id(format!("s{i}")))
            .await
            .unwrap();
    }
    let leases = queue.claim(2, "w", None).await.unwrap();
    assert!(queue.ack(&leases[0]).await.unwrap());

    let out = run(&server, "st", &["stats"]).ok();
    assert!(
        out.stdout
            .starts_with(&format!("queue jq:{{st}} on {}", server.url())),
        "{}",
        out.stdout
    );
    for (label, want) in [
        ("pending", "2"),
        ("processing", "1"),
        ("delayed", "0"),
        ("dead", "0"),
        ("enqueued", "4"),
        ("claimed", "2"),
        ("acked", "1"),
    ] {
        assert_eq!(out.value(label), want, "{label}");
    }
    assert!(out.value("p50").ends_with('s'), "{}", out.stdout);
    // The default is short: the internal counters only with --all.
    assert!(!out.stdout.contains("stale"), "{}", out.stdout);
    assert!(
        out.stdout.lines().count() <= 20,
        "{} lines:\n{}",
        out.stdout.lines().count(),
        out.stdout
    );
    let out = run(&server, "st", &["stats", "--all"]).ok();
    assert_eq!(out.value("stale"), "0");
    assert_eq!(out.value("claimed"), "2");

    let out = run(&server, "st", &["stats", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["queue"], "jq:{st}");
    assert_eq!(json["pending"], 2);
    assert_eq!(json["processing"], 1);
    assert_eq!(json["enqueued"], 4);
    assert_eq!(json["acked"], 1);
    assert!(json["p50_ms"].as_f64().unwrap() >= 0.0, "{json}");
    assert_eq!(
        json["histogram"]["buckets"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        1
    );
}

#[tokio::test]
async fn stats_watch_refreshes_until_sigterm() {
    let server = RedisServer::start();
    let queue = server.queue("watch").await;
    let mut child = jobqueue()
        .args(["stats", "--watch", "100ms", "--json"])
        .args(["--redis", &server.url(), "--tag", "watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    let pending = |line: &str| {
        serde_json::from_str::<serde_json::Value>(line).unwrap()["pending"]
            .as_u64()
            .unwrap()
    };
    wait_for_line(&lines, "pending 0", |l| pending(l) == 0);
    queue.enqueue(NewJob::new("x")).await.unwrap();
    wait_for_line(&lines, "pending 1", |l| pending(l) == 1);
    signal(&child, "-TERM");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

// ---- dead ----

#[tokio::test]
async fn dead_ls_and_show_describe_the_dead_jobs() {
    let server = RedisServer::start();
    let queue = server.queue("dl").await;
    let mut conn = server.conn();
    dead_jobs(&queue, &mut conn, &["d1", "d2", "d3"]).await;

    let out = run(&server, "dl", &["dead", "ls"]).ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "3 dead jobs in jq:{dl}");
    assert!(lines[1].starts_with("ID"), "{}", out.stdout);
    for (line, id) in lines[2..].iter().zip(["d1", "d2", "d3"]) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], id, "{line}");
        assert_eq!(words[3], "1", "attempts: {line}");
        assert_eq!(words[4], format!("boom-{id}"), "{line}");
    }
    assert_eq!(lines.len(), 5);

    let out = run(&server, "dl", &["dead", "ls", "--limit", "2"]).ok();
    assert!(
        out.stdout.contains("(1 more: use --offset 2)"),
        "{}",
        out.stdout
    );
    let out = run(&server, "dl", &["dead", "ls", "--json", "--offset", "1"]).ok();
    let rows: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], "d2");
    assert_eq!(rows[0]["last_error"], "boom-d2");
    assert!(rows[0]["died_at"].as_i64().unwrap() < rows[1]["died_at"].as_i64().unwrap());

    let out = run(&server, "dl", &["dead", "show", "d2"]).ok();
    assert_eq!(out.value("id"), "d2");
    assert_eq!(out.value("status"), "dead");
    assert_eq!(out.value("attempts"), "1");
    assert_eq!(out.value("worker"), "w1");
    assert_eq!(out.value("last error"), "boom-d2");
    assert!(
        out.stdout.ends_with("payload (10 bytes):\npayload-d2\n"),
        "{}",
        out.stdout
    );
    let raw = jobqueue()
        .args(["dead", "show", "d2", "--raw"])
        .args(["--redis", &server.url(), "--tag", "dl"])
        .output()
        .unwrap();
    assert_eq!(raw.stdout, b"payload-d2");
    let out = run(&server, "dl", &["dead", "show", "d3", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["payload"], "payload-d3");
    assert_eq!(json["status"], "dead");
    assert!(json["died_at"].as_i64().unwrap() > 0);

    run(&server, "dl", &["dead", "show", "nope"]).fails(1, &["no job \"nope\" in queue jq:{dl}"]);
}

#[tokio::test]
async fn dead_redrive_and_purge_by_id_oldest_and_all() {
    let server = RedisServer::start();
    let queue = server.queue("dr").await;
    let mut conn = server.conn();
    dead_jobs(&queue, &mut conn, &["a", "b", "c", "d", "e", "f"]).await;
    let status = |conn: &mut redis::Connection, id: &str| -> Option<String> {
        conn.hget(queue.keys().job(id), "status").unwrap()
    };

    let out = run(&server, "dr", &["dead", "redrive", "c"]).ok();
    assert_eq!(
        out.stdout.trim(),
        "redrove 1 dead job back to pending in jq:{dr}"
    );
    assert_eq!(status(&mut conn, "c").as_deref(), Some("pending"));
    let attempts: u32 = conn.hget(queue.keys().job("c"), "attempts").unwrap();
    assert_eq!(attempts, 0);

    // `c` is no longer dead: it is not counted, and the user is told.
    let out = run(&server, "dr", &["dead", "redrive", "c", "d"]).ok();
    assert!(out.stdout.starts_with("redrove 1 "), "{}", out.stdout);
    assert!(
        out.stderr
            .contains("1 of the 2 ids given was not a dead job"),
        "{}",
        out.stderr
    );

    let out = run(&server, "dr", &["dead", "redrive", "--oldest", "1"]).ok();
    assert!(out.stdout.starts_with("redrove 1 "), "{}", out.stdout);
    assert_eq!(
        status(&mut conn, "a").as_deref(),
        Some("pending"),
        "oldest first"
    );
    assert_eq!(status(&mut conn, "b").as_deref(), Some("dead"));

    let out = run(&server, "dr", &["dead", "purge", "b"]).ok();
    assert_eq!(out.stdout.trim(), "purged 1 dead job from jq:{dr}");
    assert_eq!(status(&mut conn, "b"), None, "the hash is gone");

    run(&server, "dr", &["dead", "purge", "--all"]).fails(2, &["--yes"]);
    assert_eq!(
        queue.stats().await.unwrap().dead,
        2,
        "nothing purged without --yes"
    );
    assert_eq!(
        run(&server, "dr", &["dead", "redrive"]).code,
        2,
        "a selection is required"
    );
    run(&server, "dr", &["dead", "redrive", "--oldest", "0"]).fails(2, &["--oldest"]);

    let out = run(&server, "dr", &["dead", "redrive", "--all"]).ok();
    assert!(out.stdout.starts_with("redrove 2 "), "{}", out.stdout);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.dead, stats.pending), (0, 5));

    // Back to dead, then purge them all.
    let leases = queue.claim(5, "w", None).await.unwrap();
    for lease in &leases {
        queue
            .fail(lease, "again", FailMode::Dead, Backoff::Policy)
            .await
            .unwrap();
    }
    let out = run(&server, "dr", &["dead", "purge", "--all", "--yes"]).ok();
    assert!(out.stdout.starts_with("purged 5 "), "{}", out.stdout);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.dead, stats.pending, stats.purged), (0, 0, 6));
    let out = run(&server, "dr", &["dead", "ls"]).ok();
    assert_eq!(out.stdout.trim(), "no dead jobs in jq:{dr}");
}

/// Ids whose job hash went missing: `stats` shows them with what to do, `dead purge
/// --orphans` forgets those whose hash is still absent (and only with --yes), and
/// leaves those whose hash came back to the reaper.
#[tokio::test]
async fn orphaned_ids_are_shown_and_purged_on_purpose() {
    let server = RedisServer::start();
    let queue = server.queue("orph").await;
    let mut conn = server.conn();
    for id in ["gone1", "gone2", "back", "real"] {
        queue.enqueue(NewJob::new(id).id(id)).await.unwrap();
    }
    for id in ["gone1", "gone2"] {
        let _: () = conn.del(queue.keys().job(id)).unwrap();
    }
    let _: () = conn
        .rename(queue.keys().job("back"), "elsewhere:back")
        .unwrap();
    // A claim finds the three hashes absent and sets their ids aside.
    let leases = queue.claim(4, "w", None).await.unwrap();
    assert_eq!(leases.len(), 1, "only `real` has its hash");

    let out = run(&server, "orph", &["stats", "--all"]).ok();
    assert_eq!(out.value("orphaned"), "3");
    assert_eq!(out.value("set_aside"), "3");
    assert!(
        out.stdout.contains("note: 3 job ids are set aside")
            && out.stdout.contains("`jobqueue dead purge --orphans --yes`"),
        "{}",
        out.stdout
    );
    let out = run(&server, "orph", &["stats", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (json["orphaned"].as_u64(), json["due"].as_u64()),
        (Some(3), Some(0))
    );

    run(&server, "orph", &["dead", "purge", "--orphans"]).fails(2, &["--yes", "jobqueue stats"]);
    let both = run(
        &server,
        "orph",
        &["dead", "purge", "--orphans", "--all", "--yes"],
    );
    assert_eq!(both.code, 2, "--orphans is a selection of its own");
    assert_eq!(
        queue.stats().await.unwrap().orphaned,
        3,
        "nothing forgotten"
    );

    let _: () = conn
        .rename("elsewhere:back", queue.keys().job("back"))
        .unwrap();
    let out = run(&server, "orph", &["dead", "purge", "--orphans", "--yes"]).ok();
    assert_eq!(out.stdout.trim(), "forgot 2 orphaned job ids in jq:{orph}");
    assert!(
        out.stderr.contains("1 set-aside id is left"),
        "{}",
        out.stderr
    );
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.orphaned, stats.orphans_purged), (1, 2));
    // `back` is the reaper's to put back, and then it is claimed like any job.
    assert_eq!(queue.reap(100).await.unwrap().restored, 1);
    let lease = queue.claim_one("w", None).await.unwrap().expect("back");
    assert_eq!(lease.id, "back");
}

/// Delayed jobs whose time has come: `due` beside `delayed`, in the table and the JSON.
#[tokio::test]
async fn stats_shows_due_delayed_jobs() {
    let server = RedisServer::start();
    let queue = server.queue("du").await;
    let mut conn = server.conn();
    queue
        .enqueue(NewJob::new("soon").delay(Duration::from_millis(20)))
        .await
        .unwrap();
    queue
        .enqueue(NewJob::new("later").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    // Redis's clock past the first job's time (its run_at is at most now + 20 ms).
    let now = support::redis::redis_now_ms(&mut conn);
    wait_past(&mut conn, now + 20);
    let out = run(&server, "du", &["stats"]).ok();
    assert_eq!(
        (out.value("delayed"), out.value("due")),
        ("2".into(), "1".into())
    );
    assert!(
        out.stdout.contains("note: 1 delayed job is due"),
        "{}",
        out.stdout
    );
    let out = run(&server, "du", &["stats", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (json["delayed"].as_u64(), json["due"].as_u64()),
        (Some(2), Some(1))
    );
}

// ---- peek ----

#[tokio::test]
async fn peek_shows_the_next_jobs_without_claiming_them() {
    let server = RedisServer::start();
    let queue = server.queue("pk").await;
    let long = "x".repeat(200);
    for (id, payload) in [("p1", "first"), ("p2", long.as_str()), ("p3", "third")] {
        queue
            .enqueue(NewJob::new(payload.to_string()).id(id))
            .await
            .unwrap();
    }
    queue
        .enqueue(NewJob::new("later").delay(Duration::from_secs(60)))
        .await
        .unwrap();

    let out = run(&server, "pk", &["peek", "-n", "2", "--width", "20"]).ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "3 pending in jq:{pk}; the next 2:");
    let row = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(row(lines[2])[..3], ["1", "p1", "0"]);
    assert_eq!(row(lines[2])[4], "first");
    assert_eq!(row(lines[3])[1], "p2");
    assert_eq!(row(lines[3])[4], format!("{}…", "x".repeat(19)));
    assert_eq!(lines[4], "(and 1 delayed)");
    assert!(!out.stdout.contains("p3"));

    let out = run(&server, "pk", &["peek", "--json"]).ok();
    let rows: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["p1", "p2", "p3"]);
    assert_eq!(rows[1]["payload"], long.as_str());
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.pending, stats.claimed), (3, 0), "nothing claimed");

    assert_eq!(
        run(&server, "pk", &["peek", "-n", "0"]).code,
        2,
        "-n 0 is refused"
    );
}

// ---- configure ----

#[tokio::test]
async fn configure_writes_meta_and_prints_the_settings() {
    let server = RedisServer::start();
    let queue = server.queue("cf").await;
    let mut conn = server.conn();
    let out = run(&server, "cf", &["configure"]).ok();
    assert_eq!(
        out.stdout.lines().next(),
        Some("settings of jq:{cf} (unchanged)")
    );
    assert_eq!(out.value("visibility timeout"), "30s");
    let meta: std::collections::HashMap<String, String> = conn.hgetall(&queue.keys().meta).unwrap();
    assert!(meta.is_empty(), "showing writes nothing: {meta:?}");

    // A queue none of whose keys exist is made only with --create: a typo'd tag would
    // otherwise leave a queue nobody uses.
    run(&server, "cf", &["configure", "--max-attempts", "9"])
        .fails(2, &["no queue exists at jq:{cf}", "add --create"]);
    let meta: std::collections::HashMap<String, String> = conn.hgetall(&queue.keys().meta).unwrap();
    assert!(meta.is_empty(), "refused, nothing written: {meta:?}");

    let out = run(
        &server,
        "cf",
        &[
            "configure",
            "--create",
            "--visibility-timeout",
            "2m",
            "--max-attempts",
            "9",
            "--backoff-initial",
            "500ms",
            "--backoff-max",
            "1h",
            "--backoff-multiplier",
            "1.5",
            "--completed-retention",
            "10m",
            "--dead-retention",
            "0",
            "--dead-max-len",
            "50",
        ],
    )
    .ok();
    assert_eq!(
        out.stdout.lines().next(),
        Some("settings of jq:{cf} (written)")
    );
    assert_eq!(out.value("visibility timeout"), "2m");
    assert_eq!(out.value("max attempts"), "9");
    assert_eq!(out.value("dead retention"), "0 (no age limit)");
    let meta: std::collections::HashMap<String, String> = conn.hgetall(&queue.keys().meta).unwrap();
    let want = [
        ("visibility_timeout_ms", "120000"),
        ("max_attempts", "9"),
        ("backoff_initial_ms", "500"),
        ("backoff_max_ms", "3600000"),
        ("backoff_multiplier", "1.5"),
        ("completed_retention_ms", "600000"),
        ("dead_retention_ms", "0"),
        ("dead_max_len", "50"),
    ];
    for (field, value) in want {
        assert_eq!(meta.get(field).map(String::as_str), Some(value), "{field}");
    }

    // One flag changes one setting; the others stay.
    run(&server, "cf", &["configure", "--max-attempts", "3"]).ok();
    let out = run(&server, "cf", &["configure", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["max_attempts"], 3);
    assert_eq!(json["visibility_timeout_ms"], 120000);
    assert_eq!(json["backoff_multiplier"], 1.5);
    assert_eq!(queue.settings().await.unwrap().max_attempts, 3);

    run(&server, "cf", &["configure", "--max-attempts", "0"]).fails(2, &["max attempts"]);
    run(&server, "cf", &["configure", "--backoff-max", "100ms"])
        .fails(2, &["backoff max", "initial"]);
    let bad = run(&server, "cf", &["configure", "--visibility-timeout", "5x"]);
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr.contains("--visibility-timeout") && bad.stderr.contains("unknown unit"),
        "{}",
        bad.stderr
    );
    assert_eq!(queue.settings().await.unwrap().max_attempts, 3, "unchanged");
}

// ---- reap ----

#[tokio::test]
async fn reap_once_requeues_expired_leases() {
    let server = RedisServer::start();
    let queue = server.queue("rp").await;
    let mut conn = server.conn();
    queue.enqueue(NewJob::new("x").id("r1")).await.unwrap();
    queue.enqueue(NewJob::new("y").id("r2")).await.unwrap();
    let short = queue
        .claim_one("w", Some(Duration::from_millis(1)))
        .await
        .unwrap()
        .unwrap();
    let long = queue
        .claim_one("w", Some(Duration::from_secs(600)))
        .await
        .unwrap()
        .unwrap();
    wait_past(&mut conn, short.lease_until);

    let out = run(&server, "rp", &["reap"]).ok();
    assert_eq!(
        out.stdout.trim(),
        "reaped jq:{rp}: 1 expired lease requeued, 0 dead-lettered; 0 due delayed jobs \
         promoted; 0 set-aside ids restored"
    );
    assert_eq!(queue.pending_ids(10).await.unwrap(), ["r1"]);
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.processing, stats.reaped), (1, 1));
    assert!(
        queue.ack(&long).await.unwrap(),
        "a live lease is left alone"
    );

    let out = run(&server, "rp", &["reap"]).ok();
    assert_eq!(
        out.stdout.trim(),
        "reaped jq:{rp}: 0 expired leases requeued, 0 dead-lettered; 0 due delayed jobs \
         promoted; 0 set-aside ids restored"
    );
}

/// `reap` says all it did: expired leases requeued or dead-lettered, due delayed jobs
/// promoted, set-aside ids restored (their job hash back), as text and as JSON.
#[tokio::test]
async fn reap_says_what_it_promoted_and_restored() {
    let server = RedisServer::start();
    let queue = server.queue("rpw").await;
    let mut conn = server.conn();
    queue.enqueue(NewJob::new("x").id("lease")).await.unwrap();
    let lease = queue
        .claim_one("w", Some(Duration::from_millis(1)))
        .await
        .unwrap()
        .unwrap();
    // An id set aside (its hash gone when a claim took it), whose hash is back.
    queue.enqueue(NewJob::new("b").id("back")).await.unwrap();
    let _: () = conn.rename(queue.keys().job("back"), "elsewhere").unwrap();
    assert!(queue.claim(1, "w", None).await.unwrap().is_empty());
    let _: () = conn.rename("elsewhere", queue.keys().job("back")).unwrap();
    // Enqueued after the last claim, so that only the reap can promote it.
    queue
        .enqueue(NewJob::new("d").id("due").delay(Duration::from_millis(1)))
        .await
        .unwrap();
    let now = support::redis::redis_now_ms(&mut conn);
    wait_past(&mut conn, lease.lease_until.max(now + 1));

    let out = run(&server, "rpw", &["reap"]).ok();
    assert_eq!(
        out.stdout.trim(),
        "reaped jq:{rpw}: 1 expired lease requeued, 0 dead-lettered; 1 due delayed job \
         promoted; 1 set-aside id restored (its job hash is back)"
    );
    let out = run(&server, "rpw", &["reap", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "queue": "jq:{rpw}",
            "requeued": 0,
            "dead_lettered": 0,
            "promoted": 0,
            "restored": 0,
            "more": false,
        })
    );
    let mut pending = queue.pending_ids(10).await.unwrap();
    pending.sort();
    assert_eq!(pending, ["back", "due", "lease"]);
}

#[tokio::test]
async fn reap_every_runs_until_sigterm() {
    let server = RedisServer::start();
    let queue = server.queue("rpe").await;
    let mut conn = server.conn();
    let mut child = jobqueue()
        .args(["reap", "--every", "100ms"])
        .args(["--redis", &server.url(), "--tag", "rpe"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    wait_for_line(&lines, "the start line", |l| {
        l.starts_with("reaping jq:{rpe} every 100ms")
    });

    queue.enqueue(NewJob::new("x").id("e1")).await.unwrap();
    let lease = queue
        .claim_one("w", Some(Duration::from_millis(1)))
        .await
        .unwrap()
        .unwrap();
    wait_past(&mut conn, lease.lease_until);
    let line = wait_for_line(&lines, "a reaped line", |l| {
        l.contains("1 expired lease requeued")
    });
    assert!(
        line.contains("reaped jq:{rpe}: 1 expired lease requeued, 0 dead-lettered;"),
        "{line}"
    );
    assert_eq!(queue.pending_ids(10).await.unwrap(), ["e1"]);

    signal(&child, "-TERM");
    let line = wait_for_line(&lines, "the stop line", |l| l.starts_with("stopped"));
    assert_eq!(
        line,
        "stopped by SIGTERM: in total 1 expired lease requeued, 0 dead-lettered; 0 due \
         delayed jobs promoted; 0 set-aside ids restored"
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// `reap --every --json`: stdout is JSON only (the start line goes to stderr), one object
/// per pass that did something, and the totals with the signal that stopped it.
#[tokio::test]
async fn reap_every_json_prints_one_object_per_pass_and_the_totals() {
    let server = RedisServer::start();
    let queue = server.queue("rpj").await;
    let mut conn = server.conn();
    let mut child = jobqueue()
        .args(["reap", "--every", "100ms", "--json"])
        .args(["--redis", &server.url(), "--tag", "rpj"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // After the note that no queue exists yet, the start line.
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let start = stderr
        .by_ref()
        .map_while(Result::ok)
        .find(|l| !l.starts_with("note: "))
        .expect("a start line");
    assert!(start.starts_with("reaping jq:{rpj} every 100ms"), "{start}");
    let lines = lines_of(&mut child);

    queue.enqueue(NewJob::new("x").id("j1")).await.unwrap();
    let lease = queue
        .claim_one("w", Some(Duration::from_millis(1)))
        .await
        .unwrap()
        .unwrap();
    wait_past(&mut conn, lease.lease_until);
    let line = wait_for_line(&lines, "a pass that requeued", |l| {
        l.contains("\"requeued\":1")
    });
    let pass: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (pass["queue"].as_str(), pass["dead_lettered"].as_u64()),
        (Some("jq:{rpj}"), Some(0)),
        "{line}"
    );

    signal(&child, "-TERM");
    let line = wait_for_line(&lines, "the totals", |l| l.contains("stopped_by"));
    let totals: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        totals,
        serde_json::json!({
            "queue": "jq:{rpj}",
            "requeued": 1,
            "dead_lettered": 0,
            "promoted": 0,
            "restored": 0,
            "stopped_by": "SIGTERM",
        })
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

// ---- Redis Cluster ----

#[test]
fn the_commands_work_on_a_cluster() {
    let cluster = support::redis::RedisCluster::start();
    let url = cluster.url();
    let jq = |args: &[&str], input: Option<&[u8]>| -> Run {
        let mut child = jobqueue()
            .args(args)
            .args(["--redis", &url, "--cluster", "--tag", "cl"])
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(input) = input {
            child.stdin.take().unwrap().write_all(input).unwrap();
        }
        Run::from(child.wait_with_output().unwrap()).ok()
    };
    let out = jq(&["enqueue", "--stdin"], Some(b"one\ntwo\nthree\n"));
    assert_eq!(out.stdout.trim(), "enqueued 3 jobs to jq:{cl}");
    jq(&["configure", "--max-attempts", "2"], None);
    let out = jq(&["stats", "--json"], None);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (json["pending"].as_u64(), json["enqueued"].as_u64()),
        (Some(3), Some(3))
    );
    let out = jq(&["peek", "--json"], None);
    let payloads: Vec<String> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["payload"].to_string())
        .collect();
    assert_eq!(payloads, [r#""one""#, r#""two""#, r#""three""#]);
    let out = jq(&["reap"], None);
    assert_eq!(
        out.stdout.trim(),
        "reaped jq:{cl}: 0 expired leases requeued, 0 dead-lettered; 0 due delayed jobs \
         promoted; 0 set-aside ids restored"
    );
    let out = jq(&["dead", "ls"], None);
    assert_eq!(out.stdout.trim(), "no dead jobs in jq:{cl}");
    // The settings landed on the node that serves the queue's slot.
    let node = cluster.node_of("{cl}");
    let max: String = cluster.nodes[node]
        .conn()
        .hget("jq:{cl}:meta", "max_attempts")
        .unwrap();
    assert_eq!(max, "2");
}

// ---- errors: one line, a documented exit code ----

#[test]
fn unreachable_redis_exits_3() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    for args in [
        &["stats"][..],
        &["enqueue", "x"],
        &["dead", "ls"],
        &["reap"],
    ] {
        run_url(&url, args).fails(3, &["cannot connect to Redis at", &url]);
    }
}

#[test]
fn a_malformed_url_exits_6() {
    run_url("http://127.0.0.1:6379", &["stats"]).fails(6, &["invalid Redis URL", "redis://"]);
    run_url("redis://127.0.0.1:notaport", &["peek"]).fails(6, &["invalid Redis URL"]);
    run_url("", &["stats"]).fails(6, &["invalid Redis URL"]);
}

#[test]
fn refused_auth_exits_4_and_never_prints_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "right-secret-1"]);
    let wrong = format!("redis://:wrong-secret-2@127.0.0.1:{}", server.port);
    let out = run_url(&wrong, &["stats"]).fails(4, &["refused authentication", "***"]);
    assert!(!out.stderr.contains("wrong-secret-2") && !out.stdout.contains("wrong-secret-2"));

    // From the environment, as recommended (not on the command line).
    let out: Run = jobqueue()
        .args(["dead", "ls", "--tag", "t"])
        .env("JOBQUEUE_REDIS_URL", &wrong)
        .output()
        .unwrap()
        .into();
    let out = out.fails(4, &["refused authentication"]);
    assert!(!out.stderr.contains("wrong-secret-2"));

    // No password at all.
    run_url(&server.url(), &["stats"]).fails(4, &["refused authentication"]);

    // The right one works, and is not shown either.
    let right = format!("redis://:right-secret-1@127.0.0.1:{}", server.port);
    let out: Run = jobqueue()
        .args(["stats", "--tag", "t", "--redis", &right])
        .output()
        .unwrap()
        .into();
    let out = out.ok();
    assert!(
        out.stdout.contains("redis://:***@127.0.0.1"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("right-secret-1"));
    let out: Run = jobqueue()
        .args(["stats", "--json", "--tag", "t", "--redis", &right])
        .output()
        .unwrap()
        .into();
    assert!(!out.ok().stdout.contains("right-secret-1"));

    // --help shows where the URL comes from, not its value.
    let help: Run = jobqueue()
        .args(["stats", "--help"])
        .env("JOBQUEUE_REDIS_URL", &right)
        .output()
        .unwrap()
        .into();
    let help = help.ok();
    assert!(help.stdout.contains("JOBQUEUE_REDIS_URL"));
    assert!(!help.stdout.contains("right-secret-1"));
}

#[test]
fn a_wrong_typed_key_exits_5_naming_the_key() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let _: () = conn.set("jq:{wt}:pending", "not a list").unwrap();
    let commands: &[&[&str]] = &[
        &["stats"],
        &["peek"],
        &["enqueue", "x"],
        &["dead", "ls"],
        &["dead", "redrive", "--all"],
        &["configure", "--max-attempts", "2"],
        &["reap"],
    ];
    for args in commands {
        run(&server, "wt", args).fails(5, &["key jq:{wt}:pending", "wrong type", "a string"]);
    }
    let _: () = conn.del("jq:{wt}:pending").unwrap();
    let _: () = conn.set("jq:{wt}:job:j1", "not a hash").unwrap();
    run(&server, "wt", &["dead", "show", "j1"]).fails(5, &["key jq:{wt}:job:j1"]);
    let _: () = conn.rpush("jq:{wt}:meta", "x").unwrap();
    run(&server, "wt", &["configure"]).fails(5, &["key jq:{wt}:meta"]);
    let meta: String = redis::cmd("TYPE")
        .arg("jq:{wt}:meta")
        .query(&mut conn)
        .unwrap();
    assert_eq!(meta, "list", "left as it was");
}

#[test]
fn bad_tags_and_flags_exit_2() {
    let server = RedisServer::start();
    run(&server, "{braces}", &["stats"]).fails(2, &["hash tag", "braces"]);
    run(&server, "", &["stats"]).fails(2, &["hash tag", "empty"]);
    let out: Run = jobqueue()
        .args(["stats", "--redis", &server.url()])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--tag"), "{}", out.stderr);
    let out = run(&server, "t", &["reap", "--every", "soon"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--every"), "{}", out.stderr);
    let out = run(&server, "t", &["enqueue"]);
    assert_eq!(out.code, 2, "a payload source is required");
    let out = run(&server, "t", &["enqueue", "--stdin", "--id", "x"]);
    assert_eq!(out.code, 2, "--id conflicts with --stdin");
    // Any 1 to 1024 bytes are an id (a space too, see tests/byte_ids.rs); none is not.
    run(&server, "t", &["enqueue", "--id", "", "x"])
        .fails(2, &["job id", "must be 1 to 1024 bytes"]);
}

#[test]
fn every_command_has_an_example_in_its_help() {
    let commands: &[&[&str]] = &[
        &["enqueue"],
        &["stats"],
        &["dead"],
        &["dead", "ls"],
        &["dead", "show"],
        &["dead", "redrive"],
        &["dead", "purge"],
        &["peek"],
        &["configure"],
        &["reap"],
        &["demo"],
    ];
    for args in commands {
        let out: Run = jobqueue()
            .args(*args)
            .arg("--help")
            .output()
            .unwrap()
            .into();
        let out = out.ok();
        let example = out
            .stdout
            .split_once("Example")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("{args:?}: no example in\n{}", out.stdout));
        assert!(
            example.contains(&format!("jobqueue {}", args[0])),
            "{args:?}: {}",
            out.stdout
        );
    }
    let top: Run = jobqueue().arg("--help").output().unwrap().into();
    assert!(
        !top.ok().stdout.contains("demo-worker"),
        "the demo's worker is hidden"
    );
}

/// Every subcommand's `--help` ends with examples, after its options.
#[test]
fn every_help_ends_with_examples() {
    let commands: &[&[&str]] = &[
        &["crd"],
        &["worker"],
        &["operator"],
        &["enqueue"],
        &["stats"],
        &["dead", "ls"],
        &["dead", "show"],
        &["dead", "redrive"],
        &["dead", "purge"],
        &["peek"],
        &["show"],
        &["configure"],
        &["reap"],
        &["demo"],
        &["ui"],
    ];
    for args in commands {
        let out: Run = jobqueue()
            .args(*args)
            .arg("--help")
            .output()
            .unwrap()
            .into();
        let out = out.ok();
        let options = out
            .stdout
            .rfind("--help")
            .unwrap_or_else(|| panic!("{args:?}: no --help in\n{}", out.stdout));
        let examples = out
            .stdout
            .rfind("Example")
            .unwrap_or_else(|| panic!("{args:?}: no example in\n{}", out.stdout));
        assert!(examples > options, "{args:?}: examples before the options");
        assert!(
            out.stdout[examples..].contains(&format!("jobqueue {}", args[0])),
            "{args:?}: {}",
            out.stdout
        );
    }
}

/// Commands that write nothing do not offer --durability (still accepted, as
/// JOBQUEUE_DURABILITY may be set for every command); the ones that write do.
#[test]
fn read_only_commands_do_not_offer_durability() {
    let help = |args: &[&str]| -> String {
        let out: Run = jobqueue().args(args).arg("--help").output().unwrap().into();
        out.ok().stdout
    };
    for args in [
        &["stats"][..],
        &["peek"],
        &["show"],
        &["dead", "ls"],
        &["dead", "show"],
    ] {
        assert!(!help(args).contains("--durability"), "{args:?}");
    }
    for args in [
        &["enqueue"][..],
        &["worker"],
        &["reap"],
        &["dead", "redrive"],
    ] {
        assert!(help(args).contains("--durability"), "{args:?}");
    }
    // Redrive asks no confirmation: no `--yes` described as purge's.
    let redrive = help(&["dead", "redrive"]);
    assert!(!redrive.contains("Confirm"), "{redrive}");
}

/// The connection flags are grouped under one heading, and `-h` keeps to the main ones.
#[test]
fn connection_flags_are_grouped_and_short_help_is_short() {
    let out: Run = jobqueue()
        .args(["stats", "--help"])
        .output()
        .unwrap()
        .into();
    let long = out.ok().stdout;
    let heading = long.find("\nConnection:\n").expect(&long);
    for flag in [
        "--redis <",
        "--tls-ca",
        "--sentinel",
        "--master-name",
        "--username",
    ] {
        let at = long
            .find(flag)
            .unwrap_or_else(|| panic!("{flag} in\n{long}"));
        assert!(at > heading, "{flag} is not under Connection:\n{long}");
    }
    let tag = long.find("--tag <TAG>").unwrap();
    assert!(tag < heading, "--tag is not a connection flag:\n{long}");
    let out: Run = jobqueue().args(["stats", "-h"]).output().unwrap().into();
    let short = out.ok().stdout;
    assert!(short.contains("--redis"), "{short}");
    assert!(!short.contains("--tls-server-name"), "{short}");
    assert!(
        short.lines().count() <= 40,
        "{} lines:\n{short}",
        short.lines().count()
    );
}

/// A flag whose variable is set is not shown as required in the usage line.
#[test]
fn usage_lines_do_not_require_a_flag_set_by_its_variable() {
    let usage = |tag: Option<&str>| -> String {
        let mut cmd = jobqueue();
        cmd.args(["stats", "--help"]);
        if let Some(tag) = tag {
            cmd.env("JOBQUEUE_TAG", tag);
        }
        let out: Run = cmd.output().unwrap().into();
        let out = out.ok();
        out.stdout
            .lines()
            .find(|l| l.starts_with("Usage:"))
            .unwrap()
            .to_string()
    };
    assert!(usage(None).contains("--tag <TAG>"), "{}", usage(None));
    let with_env = usage(Some("emails"));
    assert!(!with_env.contains("--tag"), "{with_env}");
}

/// A job written to the primary but not confirmed by replicas in time: the command
/// fails (exit 1) and still prints the id it gave the job, which is in the queue.
#[tokio::test]
async fn enqueue_not_replicated_prints_the_id() {
    let server = RedisServer::start();
    let out = run(
        &server,
        "nr",
        &["enqueue", "--durability", "replicated:1:100ms", "payload"],
    )
    .fails(1, &["ran on the primary but only 0 of 1"]);
    let id = out.stdout.trim();
    assert!(
        !id.is_empty() && !id.contains('\n'),
        "stdout: {:?}",
        out.stdout
    );
    let queue = server.queue("nr").await;
    let mut conn = server.conn();
    let exists: bool = conn.exists(queue.keys().job(id)).unwrap();
    assert!(exists, "job {id} is not in the queue");
    // With --id, the same id is printed.
    let out = run(
        &server,
        "nr",
        &[
            "enqueue",
            "--durability",
            "replicated:1:100ms",
            "--id",
            "mine",
            "p",
        ],
    )
    .fails(1, &["ran on the primary"]);
    assert_eq!(out.stdout, "mine\n");
}

/// A usage line in an error does not list a flag set only by its variable, as if it
/// were required.
#[test]
fn error_usage_lines_leave_out_flags_set_by_their_variable() {
    let out: Run = jobqueue()
        .arg("stats")
        .env("JOBQUEUE_REDIS_URL", "redis://127.0.0.1:1")
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--tag <TAG>"), "{}", out.stderr);
    let usage = out
        .stderr
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_else(|| panic!("no usage in {}", out.stderr));
    assert!(!usage.contains("--redis"), "{usage}");
    // Given on the command line, it is still shown.
    let out: Run = jobqueue()
        .args(["stats", "--redis", "redis://127.0.0.1:1"])
        .output()
        .unwrap()
        .into();
    assert!(out.stderr.contains("--redis <REDIS>"), "{}", out.stderr);
}

// ---- visibility timeout auto ----

#[tokio::test]
async fn configure_turns_auto_on_and_stats_shows_the_value_and_why() {
    let server = RedisServer::start();
    let queue = server.queue("av").await;
    let mut conn = server.conn();
    run(
        &server,
        "av",
        &["configure", "--create", "--visibility-timeout", "2s"],
    )
    .ok();

    // Bounds for a fixed value are refused by name, nothing written.
    run(&server, "av", &["configure", "--auto-max", "10m"])
        .fails(2, &["--auto-max applies to --visibility-timeout auto"]);
    run(
        &server,
        "av",
        &[
            "configure",
            "--visibility-timeout",
            "auto",
            "--auto-margin",
            "0.5",
        ],
    )
    .fails(2, &["auto margin", "from 1 to 100"]);
    run(
        &server,
        "av",
        &[
            "configure",
            "--visibility-timeout",
            "auto",
            "--auto-min",
            "2m",
            "--auto-max",
            "1m",
        ],
    )
    .fails(2, &["auto max", "below auto min"]);
    let meta: std::collections::HashMap<String, String> = conn.hgetall(&queue.keys().meta).unwrap();
    assert_eq!(
        meta.get("visibility_mode").map(String::as_str),
        Some("fixed"),
        "refused, nothing written: {meta:?}"
    );

    // auto: the value starts from the current one, brought inside the bounds.
    let out = run(
        &server,
        "av",
        &[
            "configure",
            "--visibility-timeout",
            "auto",
            "--auto-min",
            "5s",
            "--auto-max",
            "15m",
            "--auto-margin",
            "3",
        ],
    )
    .ok();
    assert_eq!(out.value("visibility timeout"), "5s");
    assert!(
        out.value("visibility mode")
            .starts_with("auto: p99 × 3 within [5s, 15m]"),
        "{}",
        out.stdout
    );
    let meta: std::collections::HashMap<String, String> = conn.hgetall(&queue.keys().meta).unwrap();
    for (field, value) in [
        ("visibility_mode", "auto"),
        ("visibility_auto_min_ms", "5000"),
        ("visibility_auto_max_ms", "900000"),
        ("visibility_auto_margin", "3"),
        ("visibility_timeout_ms", "5000"),
        ("visibility_set_by", "cli"),
    ] {
        assert_eq!(meta.get(field).map(String::as_str), Some(value), "{field}");
    }
    assert!(meta["visibility_set_at"].parse::<i64>().unwrap() > 0);

    let out = run(&server, "av", &["stats"]).ok();
    assert_eq!(out.value("current"), "5s");
    assert!(
        out.value("visibility reason")
            .starts_with("auto turned on by jobqueue configure: starts from 5s"),
        "{}",
        out.stdout
    );
    let out = run(&server, "av", &["stats", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["visibility"]["current_ms"], 5000);
    assert_eq!(json["visibility"]["mode"], "auto");
    assert_eq!(json["visibility"]["set_by"], "cli");
    assert_eq!(json["visibility"]["auto"]["margin"], 3.0);

    // A partitioned queue is not tuned: auto is refused by name.
    run(
        &server,
        "pv",
        &[
            "configure",
            "--create",
            "--partitions",
            "2",
            "--visibility-timeout",
            "auto",
        ],
    )
    .fails(
        2,
        &["--visibility-timeout auto is for a queue of one partition"],
    );

    // A fixed value again: the mode and the record say so.
    run(&server, "av", &["configure", "--visibility-timeout", "1m"]).ok();
    let out = run(&server, "av", &["stats", "--json"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["visibility"]["current_ms"], 60000);
    assert_eq!(json["visibility"]["mode"], "fixed");
    assert_eq!(json["visibility"]["reason"], "set by jobqueue configure");
}
