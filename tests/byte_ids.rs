//! Job ids written by other clients, as Redis holds them: bytes that need not be UTF-8
//! and text this client would not make (a space). One such id must never cost the jobs
//! around it: a claim returns the whole batch, workers run them, and `peek` and `dead ls`
//! list every entry, the odd ids by their bytes (`hex:…`).

mod support;

use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::queue::{NewJob, Queue, QueueSettings};
use jobqueue::worker::Worker;
use support::eventually::{Wait, eventually};
use support::redis::{RedisServer, enqueue_raw};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// An id that is not UTF-8.
const NOT_UTF8: &[u8] = b"bad\xff";

/// Move a pending job to the dead-letter set as `fail` in mode `dead` leaves it.
fn bury(conn: &mut redis::Connection, queue: &Queue, id: &[u8], error: &str) {
    let keys = queue.keys();
    let mut job_key = keys.job_prefix.as_bytes().to_vec();
    job_key.extend_from_slice(id);
    let now = support::redis::redis_now_ms(conn);
    let removed: i64 = redis::cmd("LREM")
        .arg(&keys.pending)
        .arg(0)
        .arg(id)
        .query(conn)
        .unwrap();
    assert_eq!(removed, 1);
    let _: () = redis::cmd("HSET")
        .arg(&job_key)
        .arg("status")
        .arg("dead")
        .arg("attempts")
        .arg(1)
        .arg("last_error")
        .arg(error)
        .query(conn)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(&keys.dead)
        .arg(now)
        .arg(id)
        .query(conn)
        .unwrap();
}

/// The CLI on `tag`, with no settings inherited from the environment.
fn cli(server: &RedisServer, tag: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    for var in ["JOBQUEUE_REDIS_URL", "JOBQUEUE_CLUSTER", "JOBQUEUE_TAG"] {
        cmd.env_remove(var);
    }
    let out = cmd
        .args(args)
        .args(["--redis", &server.url(), "--tag", tag])
        .stdin(Stdio::null())
        .output()
        .expect("run jobqueue");
    assert!(
        out.status.success(),
        "jobqueue {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
async fn a_batch_with_a_non_utf8_id_is_claimed_whole_and_each_lease_acks() {
    let server = RedisServer::start();
    let queue = server.queue("claim").await;
    queue.enqueue(NewJob::new("first").id("a")).await.unwrap();
    enqueue_raw(&queue, NOT_UTF8, b"odd one").await;
    enqueue_raw(&queue, b"with space", b"spaced").await;
    queue.enqueue(NewJob::new("last").id("b")).await.unwrap();

    let leases = queue.claim(4, "w", None).await.unwrap();
    let ids: Vec<&[u8]> = leases.iter().map(|l| l.id.as_bytes()).collect();
    assert_eq!(ids, [&b"a"[..], NOT_UTF8, b"with space", b"b"]);
    assert_eq!(&leases[1].payload[..], b"odd one");
    assert_eq!(
        leases[1].id.to_string(),
        "hex:626164ff",
        "shown by its bytes"
    );

    for lease in &leases {
        assert!(queue.ack(lease).await.unwrap(), "{} acked", lease.id);
    }
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.processing, stats.acked),
        (0, 0, 4),
        "nothing left for the reaper"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_runtime_runs_every_job_whatever_its_id() {
    let server = RedisServer::start();
    let queue = server.queue("runtime").await;
    queue.enqueue(NewJob::new("1").id("good-1")).await.unwrap();
    enqueue_raw(&queue, NOT_UTF8, b"2").await;
    queue.enqueue(NewJob::new("3").id("good-2")).await.unwrap();
    let worker = Worker::builder(queue.clone())
        .handle_signals(false)
        .worker_id("bytes")
        .concurrency(4)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_token();
    let seen = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let record = seen.clone();
    let task = tokio::spawn(worker.run(move |lease, _ctx| {
        let record = record.clone();
        async move {
            record.lock().unwrap().push(lease.id.as_bytes().to_vec());
            Ok(())
        }
    }));
    Wait::for_("every job acked")
        .within(Duration::from_secs(10))
        .until(async || queue.stats().await.unwrap().acked == 3)
        .await;
    shutdown.cancel();
    let stats = task.await.unwrap();
    assert_eq!((stats.acked, stats.redis_errors), (3, 0));
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [NOT_UTF8.to_vec(), b"good-1".to_vec(), b"good-2".to_vec()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_children_get_the_id_bytes_and_an_id_no_child_can_get_dies_alone() {
    let server = RedisServer::start();
    let queue = server.queue("exec").await;
    queue
        .configure(&QueueSettings {
            max_attempts: 5,
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    enqueue_raw(&queue, NOT_UTF8, b"").await;
    // A NUL byte cannot travel in an environment variable.
    enqueue_raw(&queue, b"nul\x00id", b"").await;
    queue.enqueue(NewJob::new("").id("plain")).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["worker", "--redis", &server.url(), "--tag", "exec"])
        .args([
            "--exec",
            "sh",
            "-c",
            r#"printf '%s\n' "$JOBQUEUE_JOB_ID" >> "$OUT/ids""#,
        ])
        .env("OUT", out.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let settled = eventually("two jobs acked and one dead", || async {
        let stats = queue.stats().await.unwrap();
        (stats.acked == 2 && stats.dead == 1).then_some(stats)
    })
    .await;
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    assert_eq!(settled.pending + settled.processing + settled.delayed, 0);

    let mut ids: Vec<Vec<u8>> = std::fs::read(out.path().join("ids"))
        .unwrap()
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    ids.sort();
    assert_eq!(ids, [NOT_UTF8.to_vec(), b"plain".to_vec()]);
    let mut job_key = queue.keys().job_prefix.as_bytes().to_vec();
    job_key.extend_from_slice(b"nul\x00id");
    let (status, attempts, error): (String, u32, String) = redis::cmd("HMGET")
        .arg(job_key)
        .arg(&["status", "attempts", "last_error"][..])
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(status, "dead");
    assert_eq!(attempts, 1, "dead-lettered at once, not retried");
    assert!(
        error.contains("NUL") && error.contains("hex:6e756c006964"),
        "{error}"
    );
}

#[tokio::test]
async fn peek_lists_every_pending_id_odd_ones_in_hex() {
    let server = RedisServer::start();
    let queue = server.queue("peek").await;
    queue.enqueue(NewJob::new("one").id("plain")).await.unwrap();
    enqueue_raw(&queue, NOT_UTF8, b"two").await;
    enqueue_raw(&queue, b"with space", b"three").await;

    let out = cli(&server, "peek", &["peek"]);
    let text = String::from_utf8(out.stdout).expect("the listing is UTF-8");
    let rows: Vec<&str> = text.lines().skip(2).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[0].contains("plain") && rows[0].ends_with("one"),
        "{text}"
    );
    assert!(
        rows[1].contains(" hex:626164ff ") && rows[1].ends_with("two"),
        "{text}"
    );
    assert!(
        rows[2].contains(" with space ") && rows[2].ends_with("three"),
        "{text}"
    );

    let out = cli(&server, "peek", &["peek", "--json"]);
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["plain", "hex:626164ff", "with space"]);
    assert_eq!(rows[1]["id_hex"], "626164ff", "the exact bytes");
    assert!(rows[0].get("id_hex").is_none() && rows[2].get("id_hex").is_none());
    assert_eq!(rows[1]["payload"], "two");
}

#[tokio::test]
async fn dead_ls_lists_every_dead_id_odd_ones_in_hex() {
    let server = RedisServer::start();
    let queue = server.queue("dead").await;
    let mut conn = server.conn();
    queue.enqueue(NewJob::new("").id("plain")).await.unwrap();
    enqueue_raw(&queue, b"with space", b"").await;
    enqueue_raw(&queue, NOT_UTF8, b"").await;
    bury(&mut conn, &queue, b"plain", "first");
    support::redis::next_ms(&mut conn);
    bury(&mut conn, &queue, b"with space", "second");
    // An id with a space, which this client would refuse to make, is read back as it is.
    let out = cli(&server, "dead", &["dead", "ls"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().any(|l| l.starts_with("with space ")), "{text}");

    support::redis::next_ms(&mut conn);
    bury(&mut conn, &queue, NOT_UTF8, "third");
    let out = cli(&server, "dead", &["dead", "ls"]);
    let text = String::from_utf8(out.stdout).expect("the listing is UTF-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "3 dead jobs in jq:{dead}", "{text}");
    let rows = &lines[2..];
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[0].starts_with("plain ") && rows[0].ends_with("first"),
        "{text}"
    );
    assert!(
        rows[1].starts_with("with space ") && rows[1].ends_with("second"),
        "{text}"
    );
    assert!(
        rows[2].starts_with("hex:626164ff ") && rows[2].ends_with("third"),
        "{text}"
    );

    let out = cli(&server, "dead", &["dead", "ls", "--json"]);
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["plain", "with space", "hex:626164ff"]);
    assert_eq!(rows[2]["id_hex"], "626164ff");
    assert_eq!(rows[1]["last_error"], "second");

    // An id with a space is read back as it is, also one at a time.
    let out = cli(&server, "dead", &["dead", "show", "with space"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().any(|l| l == "id            with space"),
        "{text}"
    );
}

/// An id another client wrote with a space is named to `dead redrive` and `dead purge`
/// as `dead ls` lists it: the protocol takes any id of 1..1024 bytes.
#[tokio::test]
async fn dead_redrive_and_purge_take_an_id_with_a_space() {
    let server = RedisServer::start();
    let queue = server.queue("spaced").await;
    let mut conn = server.conn();
    enqueue_raw(&queue, b"a b", b"one").await;
    enqueue_raw(&queue, b"c d", b"two").await;
    bury(&mut conn, &queue, b"a b", "boom");
    bury(&mut conn, &queue, b"c d", "boom");

    let out = cli(&server, "spaced", &["dead", "redrive", "a b"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("redrove 1 dead job"), "{stdout}");
    let pending: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(&queue.keys().pending)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(pending, vec![b"a b".to_vec()]);

    let out = cli(&server, "spaced", &["dead", "purge", "c d"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("purged 1 dead job"), "{stdout}");
    assert_eq!(queue.stats().await.unwrap().dead, 0);
}

/// An id that is not UTF-8 is named in hex (`--id-hex`, the `id_hex` of `dead ls --json`)
/// to `dead redrive`, `dead purge` and `show`, over every partition too.
#[tokio::test]
async fn an_id_that_is_not_utf8_is_named_in_hex() {
    let server = RedisServer::start();
    let queue = server.queue("hexed").await;
    let mut conn = server.conn();
    enqueue_raw(&queue, NOT_UTF8, b"odd").await;
    enqueue_raw(&queue, b"bad\xfe", b"odder").await;
    bury(&mut conn, &queue, NOT_UTF8, "boom");
    bury(&mut conn, &queue, b"bad\xfe", "boom");
    let hex = |id: &[u8]| id.iter().map(|b| format!("{b:02x}")).collect::<String>();

    let out = cli(&server, "hexed", &["show", "--id-hex", &hex(NOT_UTF8)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("dead"), "{stdout}");

    let out = cli(
        &server,
        "hexed",
        &["dead", "redrive", "--id-hex", &hex(NOT_UTF8)],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("redrove 1 dead job"), "{stdout}");
    let pending: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(&queue.keys().pending)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(pending, vec![NOT_UTF8.to_vec()]);

    let out = cli(
        &server,
        "hexed",
        &["dead", "purge", "--id-hex", &hex(b"bad\xfe")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("purged 1 dead job"), "{stdout}");
    assert_eq!(queue.stats().await.unwrap().dead, 0);
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("the output is UTF-8")
}

/// `enqueue` takes every id the protocol takes (1 to 1024 bytes, any bytes): one with a
/// space or a control character by `--id`, any bytes by `--id-hex` (which also takes the
/// `hex:` form the CLI prints). The id printed back is the one text output shows.
#[tokio::test]
async fn enqueue_takes_every_id_the_protocol_takes() {
    let server = RedisServer::start();
    let queue = server.queue("ids").await;
    let out = cli(&server, "ids", &["enqueue", "--id", "a b", "spaced"]);
    assert_eq!(stdout_of(&out), "a b\n");
    let out = cli(&server, "ids", &["enqueue", "--id", "tab\there", "tabbed"]);
    assert_eq!(stdout_of(&out), "hex:7461620968657265\n");
    let out = cli(
        &server,
        "ids",
        &["enqueue", "--id-hex", "626164ff", "bytes"],
    );
    assert_eq!(stdout_of(&out), "hex:626164ff\n");
    // What was printed names the job again: nothing changes the second time.
    let out = cli(
        &server,
        "ids",
        &["enqueue", "--id-hex", "hex:626164ff", "again"],
    );
    assert_eq!(stdout_of(&out), "hex:626164ff\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("job hex:626164ff already exists"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (id, payload) in [
        (&b"a b"[..], "spaced"),
        (b"tab\there", "tabbed"),
        (NOT_UTF8, "bytes"),
    ] {
        let job = queue.job(id).await.unwrap().expect("enqueued");
        assert_eq!(&job.payload[..], payload.as_bytes());
    }

    // `show` and `dead show` name it by --id-hex too.
    let out = cli(&server, "ids", &["show", "--id-hex", "626164ff"]);
    let text = stdout_of(&out);
    assert!(
        text.lines().any(|l| l == "id            hex:626164ff") && text.contains("bytes"),
        "{text}"
    );
    let out = cli(
        &server,
        "ids",
        &["dead", "show", "--id-hex", "7461620968657265"],
    );
    let text = stdout_of(&out);
    assert!(
        text.lines()
            .any(|l| l == "id            hex:7461620968657265")
            && text.contains("tabbed"),
        "{text}"
    );
}

/// Text output shows an id as it is when it is UTF-8 text without control characters,
/// else as `hex:` and its bytes; a text id that itself begins with `hex:` is shown in hex
/// too, so no two ids look alike. JSON carries the exact bytes: `id` is the id itself when
/// it is UTF-8, and `id_hex` (the bytes in hex) is there whenever text shows `hex:`.
#[tokio::test]
async fn text_output_marks_byte_ids_in_hex_and_json_carries_their_bytes() {
    let server = RedisServer::start();
    let queue = server.queue("marks").await;
    let mut conn = server.conn();
    let ids: [&[u8]; 5] = [NOT_UTF8, b"tab\there", b"hex:41", b"bad\\xff", b"plain"];
    let shown = [
        "hex:626164ff",
        "hex:7461620968657265",
        "hex:6865783a3431",
        "bad\\xff",
        "plain",
    ];
    for (i, id) in ids.iter().enumerate() {
        enqueue_raw(&queue, id, format!("p{i}").as_bytes()).await;
    }

    let text = stdout_of(&cli(&server, "marks", &["peek"]));
    let rows: Vec<&str> = text.lines().skip(2).collect();
    assert_eq!(rows.len(), 5, "{text}");
    for (row, shown) in rows.iter().zip(shown) {
        assert!(row.contains(&format!(" {shown} ")), "{shown} in {text}");
    }

    let out = stdout_of(&cli(&server, "marks", &["peek", "--json"]));
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 5, "{out}");
    for (row, id) in rows.iter().zip(ids) {
        let bytes = match row.get("id_hex") {
            Some(h) => hex::decode(h.as_str().unwrap()).unwrap(),
            None => row["id"].as_str().unwrap().as_bytes().to_vec(),
        };
        assert_eq!(bytes, id, "{row}");
    }
    assert_eq!(rows[1]["id"], "tab\there", "a UTF-8 id is itself in JSON");
    assert!(
        rows[2].get("id_hex").is_some(),
        "hex:41 is marked: {}",
        rows[2]
    );
    assert!(rows[3].get("id_hex").is_none() && rows[4].get("id_hex").is_none());

    for id in ids {
        bury(&mut conn, &queue, id, "boom");
        support::redis::next_ms(&mut conn);
    }
    let text = stdout_of(&cli(&server, "marks", &["dead", "ls"]));
    let rows: Vec<&str> = text.lines().skip(2).collect();
    for (row, shown) in rows.iter().zip(shown) {
        assert!(row.starts_with(&format!("{shown} ")), "{shown} in {text}");
    }
    let text = stdout_of(&cli(
        &server,
        "marks",
        &["show", "--id-hex", "6865783a3431"],
    ));
    assert!(
        text.lines().any(|l| l == "id            hex:6865783a3431"),
        "{text}"
    );
}
