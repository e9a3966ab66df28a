//! `jobqueue show` and `peek --delayed` / `--processing`, run as a user runs them (the
//! built binary) against a private redis-server: one job in each status, the payload
//! preview and its `--full` / `--out` / `--json` forms, ids that are not UTF-8, and that
//! reading never writes to Redis.

mod support;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, JobOptions, NewJob, Queue, QueueSettings};
use serde_json::json;
use support::redis::{RedisServer, enqueue_raw};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// The CLI on `tag`, with no settings inherited from the environment.
fn cli(server: &RedisServer, tag: &str, args: &[&OsStr]) -> Output {
    let mut cmd = Command::new(BIN);
    for var in ["JOBQUEUE_REDIS_URL", "JOBQUEUE_CLUSTER", "JOBQUEUE_TAG"] {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .args(["--redis", &server.url(), "--tag", tag])
        .stdin(Stdio::null())
        .output()
        .expect("run jobqueue")
}

/// `cli` with text arguments, which must succeed; its stdout.
fn ok(server: &RedisServer, tag: &str, args: &[&str]) -> String {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let out = cli(server, tag, &args);
    assert!(
        out.status.success(),
        "jobqueue {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// The value of the `label  value` row of `show`'s output.
fn row<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find(|l| l.len() > 14 && l[..14].trim_end() == label)
        .map(|l| l[14..].trim())
        .unwrap_or_else(|| panic!("no row {label:?} in:\n{text}"))
}

/// Every key of the test's Redis with its DUMP: equal before and after means nothing
/// was written (scores, fields and list order included).
fn snapshot(server: &RedisServer) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut conn = server.conn();
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut conn).unwrap();
            (k, dump)
        })
        .collect()
}

/// One job in each status on `tag`: c1 processing (worker w-7), x1 dead, ok1 done (kept
/// by completed retention), p1 pending, d1 delayed by 10 minutes.
async fn every_status(queue: &Queue) {
    queue
        .configure(&QueueSettings {
            completed_retention: Duration::from_secs(3600),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    let one = async |id: &str, payload: &str| {
        queue
            .enqueue(NewJob::new(payload.to_string()).id(id))
            .await
            .unwrap();
        queue
            .claim(1, "w-7", Some(Duration::from_secs(60)))
            .await
            .unwrap()
            .remove(0)
    };
    let c1 = one("c1", "claimed").await;
    assert_eq!(c1.id, "c1");
    let x1 = one("x1", "doomed").await;
    queue
        .fail(&x1, "boom: disk full", FailMode::Dead, Backoff::Policy)
        .await
        .unwrap();
    let ok1 = one("ok1", "fine").await;
    assert!(queue.ack(&ok1).await.unwrap());
    queue
        .enqueue(NewJob::new("waiting").id("p1"))
        .await
        .unwrap();
    queue
        .enqueue(
            NewJob::new("later")
                .id("d1")
                .delay(Duration::from_secs(600)),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn show_finds_a_job_in_each_status_without_writing() {
    let server = RedisServer::start();
    let queue = server.queue("st").await;
    every_status(&queue).await;
    let before = snapshot(&server);

    let text = ok(&server, "st", &["show", "p1"]);
    assert_eq!(row(&text, "status"), "pending");
    assert_eq!(row(&text, "attempts"), "0");
    assert!(text.ends_with("payload (7 bytes):\nwaiting\n"), "{text}");

    let text = ok(&server, "st", &["show", "d1"]);
    assert_eq!(row(&text, "status"), "delayed");
    let run_at = row(&text, "run at");
    assert!(
        run_at.contains("UTC (in 9m") || run_at.contains("UTC (in 10m"),
        "{run_at}"
    );

    let text = ok(&server, "st", &["show", "c1"]);
    assert_eq!(row(&text, "status"), "processing");
    assert_eq!(row(&text, "worker"), "w-7");
    assert_eq!(row(&text, "attempts"), "1");
    let lease = row(&text, "lease until");
    assert!(lease.ends_with("s left)"), "{lease}");

    let text = ok(&server, "st", &["show", "x1"]);
    assert_eq!(row(&text, "status"), "dead");
    assert_eq!(row(&text, "last error"), "boom: disk full");
    assert!(row(&text, "died").starts_with("20"), "{text}");

    let text = ok(&server, "st", &["show", "ok1"]);
    assert_eq!(row(&text, "status"), "done (kept by completed retention)");

    let out = cli(&server, "st", &[OsStr::new("show"), OsStr::new("nope")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no job \"nope\" in queue jq:{st}"), "{err}");
    assert!(out.stdout.is_empty());

    // Processing and delayed as JSON: the lease and the delay in ms.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "st", &["show", "c1", "--json"])).unwrap();
    assert_eq!(json["status"], "processing");
    assert_eq!(json["worker"], "w-7");
    let left = json["lease_left_ms"].as_i64().unwrap();
    assert!(left > 0 && left <= 60_000, "{json}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "st", &["show", "d1", "--json"])).unwrap();
    let due = json["due_in_ms"].as_i64().unwrap();
    assert!(due > 500_000 && due <= 600_000, "{json}");
    assert!(json["run_at"].as_i64().unwrap() > due, "{json}");

    assert!(snapshot(&server) == before, "show wrote to Redis");
}

#[tokio::test]
async fn payloads_are_previewed_and_given_whole_on_request() {
    let server = RedisServer::start();
    let queue = server.queue("pl").await;
    let mut payload = "é".repeat(150).into_bytes(); // 300 bytes of two-byte characters
    payload.extend_from_slice(b"\xff\x00tail");
    queue
        .enqueue(NewJob::new(payload.clone()).id("big"))
        .await
        .unwrap();

    let text = ok(&server, "pl", &["show", "big"]);
    assert!(text.contains("payload (306 bytes):\n"), "{text}");
    let preview = text
        .lines()
        .skip_while(|l| !l.starts_with("payload ("))
        .nth(1)
        .unwrap();
    assert_eq!(preview, "é".repeat(100));
    assert!(text.contains("… 106 more bytes: --full"), "{text}");

    let text = ok(&server, "pl", &["show", "big", "--full"]);
    assert!(
        text.ends_with(&format!("{}\\xff\\u{{0}}tail\n", "é".repeat(150))),
        "{text}"
    );
    assert!(!text.contains("more bytes"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload.bin");
    let text = ok(
        &server,
        "pl",
        &["show", "big", "--out", file.to_str().unwrap()],
    );
    assert_eq!(std::fs::read(&file).unwrap(), payload);
    assert!(text.contains("payload written to"), "{text}");
    assert!(text.contains("… 106 more bytes"), "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "pl", &["show", "big", "--json"])).unwrap();
    assert_eq!(json["payload"], "é".repeat(100));
    assert_eq!(json["payload_bytes"], 306);
    assert_eq!(json["payload_truncated"], true);
    assert_eq!(json["status"], "pending");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "pl", &["show", "big", "--json", "--full"])).unwrap();
    assert_eq!(json["payload_truncated"], false);
    assert_eq!(json["payload_hex"], hex::encode(&payload));
}

#[tokio::test]
async fn a_jobs_own_options_are_shown_as_its_hash_holds_them() {
    let server = RedisServer::start();
    let queue = server.queue("opt").await;
    // every option enqueue's flags set, through the CLI
    ok(
        &server,
        "opt",
        &[
            "enqueue",
            "--id",
            "own",
            "--priority",
            "7",
            "--max-attempts",
            "3",
            "--backoff-initial",
            "250ms",
            "--backoff-max",
            "1m",
            "--backoff-multiplier",
            "1.5",
            "--timeout",
            "2m",
            "--visibility",
            "30s",
            "--rate-key",
            "customer-42",
            "x",
        ],
    );
    // notify, which `enqueue --wait` sets, through the library
    queue
        .enqueue(NewJob::new("y").id("waited").options(JobOptions {
            notify: Some(Duration::from_secs(600)),
            ..JobOptions::default()
        }))
        .await
        .unwrap();
    queue.enqueue(NewJob::new("z").id("plain")).await.unwrap();
    let before = snapshot(&server);

    let text = ok(&server, "opt", &["show", "own"]);
    assert_eq!(row(&text, "priority"), "7");
    assert_eq!(row(&text, "max attempts"), "3");
    assert_eq!(
        row(&text, "backoff"),
        "initial 250ms, max 1m, multiplier 1.5"
    );
    assert_eq!(row(&text, "timeout"), "2m (one run at most)");
    assert_eq!(row(&text, "visibility"), "30s (each lease)");
    assert_eq!(row(&text, "rate key"), "customer-42");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "opt", &["show", "own", "--json"])).unwrap();
    let fields = [
        "priority",
        "max_attempts",
        "backoff_initial_ms",
        "backoff_max_ms",
        "backoff_multiplier",
        "timeout_ms",
        "visibility_timeout_ms",
        "rate_key",
        "notify",
    ];
    let values = |json: &serde_json::Value| -> Vec<serde_json::Value> {
        fields.iter().map(|f| json[*f].clone()).collect()
    };
    assert_eq!(
        values(&json),
        [
            json!(7),
            json!(3),
            json!(250),
            json!(60_000),
            json!(1.5),
            json!(120_000),
            json!(30_000),
            json!("customer-42"),
            json!(null)
        ],
        "{json}"
    );

    let text = ok(&server, "opt", &["show", "waited"]);
    assert_eq!(
        row(&text, "notify"),
        "10m (its end is announced on the done stream; its hash is kept this long after)"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "opt", &["show", "waited", "--json"])).unwrap();
    assert_eq!(json["notify"], 600_000, "{json}");

    // a job of none: the queue's settings apply, no row says otherwise
    let text = ok(&server, "opt", &["show", "plain"]);
    assert_eq!(row(&text, "priority"), "0");
    for label in [
        "max attempts",
        "backoff",
        "timeout",
        "visibility",
        "rate key",
        "notify",
    ] {
        assert!(
            !text.lines().any(|l| l.starts_with(&format!("{label:<14}"))),
            "{label} shown for a job without it:\n{text}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "opt", &["show", "plain", "--json"])).unwrap();
    assert_eq!(values(&json)[0], json!(0));
    assert!(values(&json)[1..].iter().all(|v| v.is_null()), "{json}");

    assert!(snapshot(&server) == before, "show wrote to Redis");
}

#[tokio::test]
async fn peek_lists_delayed_and_processing_jobs_with_their_time_left() {
    let server = RedisServer::start();
    let queue = server.queue("pk").await;
    every_status(&queue).await;
    queue
        .enqueue(
            NewJob::new("sooner")
                .id("d0")
                .delay(Duration::from_secs(120)),
        )
        .await
        .unwrap();
    let before = snapshot(&server);

    let text = ok(&server, "pk", &["peek", "--delayed"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "2 delayed in jq:{pk}; the 2 next due:", "{text}");
    assert!(lines[1].contains("DUE IN"), "{text}");
    let cols = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(cols(lines[2])[1], "d0");
    let due = &cols(lines[2])[3];
    assert!(due.starts_with("1m5") || due == "2m", "{text}");
    assert_eq!(cols(lines[3])[1], "d1");
    assert_eq!(cols(lines[3])[4], "later");

    let text = ok(&server, "pk", &["peek", "--processing"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0], "1 processing in jq:{pk}; the 1 leases ending first:",
        "{text}"
    );
    assert!(
        lines[1].contains("LEASE LEFT") && lines[1].contains("WORKER"),
        "{text}"
    );
    let c = cols(lines[2]);
    assert_eq!(
        (c[1].as_str(), c[2].as_str(), c[4].as_str(), c[5].as_str()),
        ("c1", "1", "w-7", "claimed")
    );
    assert!(c[3].ends_with('s'), "{text}");

    let json: serde_json::Value =
        serde_json::from_str(ok(&server, "pk", &["peek", "--processing", "--json"]).trim())
            .unwrap();
    assert_eq!(json["id"], "c1");
    assert!(json["lease_left_ms"].as_i64().unwrap() > 0);

    let out = cli(
        &server,
        "pk",
        &[
            OsStr::new("peek"),
            OsStr::new("--delayed"),
            OsStr::new("--processing"),
        ],
    );
    assert_eq!(out.status.code(), Some(2));

    let empty = ok(&server, "none", &["peek", "--delayed"]);
    assert!(empty.starts_with("no delayed jobs in jq:{none}"), "{empty}");

    assert!(snapshot(&server) == before, "peek wrote to Redis");
}

#[tokio::test]
async fn an_id_that_is_not_utf8_is_shown_by_its_bytes_or_its_hex() {
    let server = RedisServer::start();
    let queue = server.queue("nb").await;
    enqueue_raw(&queue, b"bad\xff", b"odd one").await;

    let out = cli(
        &server,
        "nb",
        &[OsStr::new("show"), OsStr::from_bytes(b"bad\xff")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(row(&text, "id"), "hex:626164ff");
    assert!(text.ends_with("odd one\n"), "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "nb", &["show", "--hex", "626164ff", "--json"])).unwrap();
    assert_eq!(json["id"], "hex:626164ff");
    assert_eq!(json["id_hex"], "626164ff");

    let out = cli(
        &server,
        "nb",
        &[OsStr::new("show"), OsStr::new("--hex"), OsStr::new("zz")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not hex"));
}

#[tokio::test]
async fn a_set_aside_id_is_shown_with_its_reason() {
    let server = RedisServer::start();
    let queue = server.queue("aside").await;
    for id in ["bad", "gone", "fine"] {
        queue.enqueue(NewJob::new("p").id(id)).await.unwrap();
    }
    let mut conn = server.conn();
    let bad = queue.keys().job("bad");
    let _: () = redis::cmd("DEL").arg(&bad).query(&mut conn).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&bad)
        .arg("not a job")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(queue.keys().job("gone"))
        .query(&mut conn)
        .unwrap();
    let leases = queue.claim(3, "w", None).await.unwrap();
    assert_eq!(leases.len(), 1, "only fine is claimed");
    let before = snapshot(&server);

    let text = ok(&server, "aside", &["show", "bad"]);
    assert_eq!(row(&text, "status"), "set aside");
    let why = row(&text, "set aside");
    assert!(
        why.contains("UTC: its job key holds the wrong type (string), not a hash"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&server, "aside", &["show", "bad", "--json"])).unwrap();
    assert_eq!(json["set_aside"]["key_type"], "string", "{json}");
    assert_eq!(json["set_aside"]["purged"], false, "{json}");

    let text = ok(&server, "aside", &["show", "gone"]);
    assert_eq!(row(&text, "status"), "set aside");
    assert!(
        row(&text, "set aside").contains("its job hash is absent"),
        "{text}"
    );
    assert!(snapshot(&server) == before, "show wrote to Redis");

    // forgotten by purge: shown as such while it is remembered
    assert_eq!(queue.purge_orphans(10).await.unwrap(), 2);
    let text = ok(&server, "aside", &["show", "gone"]);
    assert_eq!(row(&text, "status"), "forgotten (purged orphan)");
    assert!(
        row(&text, "forgotten").contains("remembered until"),
        "{text}"
    );
}
