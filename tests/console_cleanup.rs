//! Cleaning up with the console acts on exactly what the operator chose: ids that look
//! alike stay apart (each travels as its bytes, in hex), the writes move the set the
//! confirm counted, the dead-letter set is paged newest first and searched whole in
//! bounded steps (payloads too, a jump to a time), list pages read only payload
//! previews, and the console reads jobs through the queue layer, not the CLI.

mod support;

use jobqueue::queue::{FailMode, NewJob, Queue};
use serde_json::json;
use support::console::{Ui, drive_with, ensure_browser, now_ms, root, shots_dir};
use support::redis::{RedisServer, redis_now_ms, wait_past};

/// One dead job as another client (or an old incident) left it.
struct Dead<'a> {
    id: &'a [u8],
    died_at: i64,
    error: &'a str,
    payload: &'a [u8],
}

/// File dead jobs directly: the job hash as `fail` leaves a dead job, and the entry in
/// `dead` at its time of death; one pipeline per 1,000.
async fn bury(queue: &Queue, jobs: &[Dead<'_>]) {
    let keys = queue.keys();
    let mut conn = queue.redis().clone();
    for chunk in jobs.chunks(1000) {
        let mut pipe = redis::pipe();
        for job in chunk {
            pipe.cmd("HSET")
                .arg(keys.job_key(job.id))
                .arg("payload")
                .arg(job.payload)
                .arg("status")
                .arg("dead")
                .arg("attempts")
                .arg(1)
                .arg("enqueued_at")
                .arg(job.died_at - 1000)
                .arg("last_error")
                .arg(job.error)
                .ignore();
            pipe.cmd("ZADD")
                .arg(&keys.dead)
                .arg(job.died_at)
                .arg(job.id)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await.unwrap();
    }
}

/// A job's status as its hash holds it.
async fn status(queue: &Queue, id: &[u8]) -> Option<String> {
    queue.job(id).await.unwrap().and_then(|j| j.status)
}

/// A queue `tag` with one setting written, so that a scan finds it before its first job.
async fn configured(server: &RedisServer, tag: &str) -> Queue {
    let queue = server.queue(tag).await;
    support::console::one_attempt(&queue).await;
    queue
}

/// Kill one job through the protocol (enqueue, claim, fail to dead) with `error`; its id.
async fn kill(queue: &Queue, payload: &str, error: &str) -> String {
    queue
        .enqueue(NewJob::new(payload.to_string()))
        .await
        .unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    queue
        .fail(
            &lease,
            error,
            FailMode::Dead,
            jobqueue::queue::Backoff::Policy,
        )
        .await
        .unwrap();
    lease.id.as_str().unwrap().to_string()
}

#[tokio::test]
async fn ids_that_look_alike_are_told_apart_and_the_one_chosen_is_redriven() {
    ensure_browser();
    let server = RedisServer::start();
    let queue = configured(&server, "bytes").await;
    let base = redis_now_ms(&mut server.conn()) - 60_000;
    // The text `bad\xff` (7 characters), the bytes 62 61 64 ff, and a control character.
    let text: &[u8] = b"bad\\xff";
    let raw: &[u8] = b"bad\xff";
    let ctl: &[u8] = b"line\x01feed";
    bury(
        &queue,
        &[
            Dead {
                id: text,
                died_at: base,
                error: "text id",
                payload: b"t",
            },
            Dead {
                id: raw,
                died_at: base + 1,
                error: "raw id",
                payload: b"r",
            },
            Dead {
                id: ctl,
                died_at: base + 2,
                error: "control id",
                payload: b"c",
            },
        ],
    )
    .await;
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    let _ = ui.overview_after(now_ms());

    let ctl_hex = hex::encode(ctl);
    let seen = drive_with(&ui, "byte_ids", "bytes", &ctl_hex, Some(&shots_dir()));
    let rows = seen["rows"].as_array().unwrap();
    let shown: Vec<&str> = rows.iter().map(|r| r["shown"].as_str().unwrap()).collect();
    assert_eq!(
        shown,
        ["hex:6c696e650166656564", "hex:626164ff", "bad\\xff"],
        "three ids, three renderings, newest death first: {seen}"
    );
    let styled: Vec<bool> = rows.iter().map(|r| r["styled_apart"] == true).collect();
    assert_eq!(styled, [true, true, false], "{seen}");
    assert_eq!(seen["notice"], "redrove 1 dead job", "{seen}");
    // The raw one moved; the text one (which looked the same before) stayed dead.
    assert_eq!(status(&queue, raw).await.as_deref(), Some("pending"));
    assert_eq!(status(&queue, text).await.as_deref(), Some("dead"));
    let after: Vec<&str> = seen["rows_after"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["shown"].as_str().unwrap())
        .collect();
    assert_eq!(after, ["hex:6c696e650166656564", "bad\\xff"], "{seen}");
    // The control-character id opens, shown by its bytes.
    assert_eq!(seen["ctl_status"], "dead", "{seen}");
    assert_eq!(seen["ctl_shown"], "hex:6c696e650166656564", "{seen}");

    // Over the API: each id by its bytes, the control-character one included.
    for (id, want) in [(text, "dead"), (raw, "pending"), (ctl, "dead")] {
        let job = ui.get_json(&format!("/api/job?q=bytes&id_hex={}", hex::encode(id)));
        assert_eq!(job["id_hex"], hex::encode(id), "{job}");
        assert_eq!(job["status"], want, "{job}");
    }
}

#[tokio::test]
async fn writes_move_the_set_the_dry_run_counted() {
    let server = RedisServer::start();
    let queue = configured(&server, "sets").await;
    let mut declined = Vec::new();
    for i in 0..3 {
        declined.push(kill(&queue, &format!("{{\"order\":{i}}}"), "card declined").await);
    }
    for i in 0..4 {
        kill(&queue, &format!("{{\"mail\":{i}}}"), "smtp timeout").await;
    }
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    let _ = ui.overview_after(now_ms());

    // A search's matches: counted and named by the dry run...
    let (code, dry) = ui.post_json(
        "/api/dead/redrive",
        &json!({"q": "sets", "search": "DECLINED", "dry_run": true}),
    );
    assert_eq!(code, 200, "{dry}");
    assert_eq!(dry["would"], 3, "{dry}");
    let mut named: Vec<String> = serde_json::from_value(dry["ids_hex"].clone()).unwrap();
    named.sort();
    let mut want: Vec<String> = declined.iter().map(hex::encode).collect();
    want.sort();
    assert_eq!(named, want);
    // ...a job that matches dies after the confirm...
    let late = kill(&queue, "late", "card declined again").await;
    // ...and the write moves the counted set, not the late one.
    let (code, done) = ui.post_json(
        "/api/dead/redrive",
        &json!({"q": "sets", "ids_hex": dry["ids_hex"]}),
    );
    assert_eq!(code, 200, "{done}");
    assert_eq!(done["done"], 3, "{done}");
    assert_eq!(
        status(&queue, late.as_bytes()).await.as_deref(),
        Some("dead")
    );
    for id in &declined {
        assert_eq!(
            status(&queue, id.as_bytes()).await.as_deref(),
            Some("pending")
        );
    }
    // A search is counted, never acted on as "whatever matches when the click lands".
    let (code, reply) = ui.post_json("/api/dead/purge", &json!({"q": "sets", "search": "smtp"}));
    assert_eq!(code, 400, "{reply}");

    // All: bound by the newest death the dry run saw.
    let (code, dry) = ui.post_json(
        "/api/dead/purge",
        &json!({"q": "sets", "all": true, "dry_run": true}),
    );
    assert_eq!(code, 200, "{dry}");
    assert_eq!(dry["would"], 5, "{dry}");
    let until = dry["until_ms"].as_i64().unwrap();
    let mut conn = server.conn();
    wait_past(&mut conn, until);
    let later = "later".to_string();
    let died_at = redis_now_ms(&mut conn);
    bury(
        &queue,
        &[Dead {
            id: later.as_bytes(),
            died_at,
            error: "died after the confirm",
            payload: b"l",
        }],
    )
    .await;
    let (code, done) = ui.post_json(
        "/api/dead/purge",
        &json!({"q": "sets", "all": true, "until_ms": until, "count": dry["would"]}),
    );
    assert_eq!(code, 200, "{done}");
    assert_eq!(done["done"], 5, "{done}");
    assert_eq!(
        status(&queue, later.as_bytes()).await.as_deref(),
        Some("dead")
    );
    assert_eq!(queue.stats().await.unwrap().dead, 1);
}

#[tokio::test]
async fn the_dead_letter_page_acts_on_the_matches_of_a_search_in_the_browser() {
    ensure_browser();
    let server = RedisServer::start();
    let queue = configured(&server, "clean").await;
    // Seven dead jobs a second apart: the declined ones are the 1st, 3rd and 6th oldest.
    let base = (redis_now_ms(&mut server.conn()) / 1000 - 100) * 1000;
    let ids: Vec<String> = (0..7).map(|i| format!("job-{i}")).collect();
    let jobs: Vec<Dead> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Dead {
            id: id.as_bytes(),
            died_at: base + i as i64 * 1000,
            error: if [0, 2, 5].contains(&i) {
                "card declined"
            } else {
                "smtp timeout"
            },
            payload: b"{}",
        })
        .collect();
    bury(&queue, &jobs).await;
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    let _ = ui.overview_after(now_ms());

    // Jump to the time job-3 died: job-3 and older.
    let at = chrono_free_utc(base + 3000);
    let seen = drive_with(&ui, "cleanup", "clean", &at, Some(&shots_dir()));
    assert_eq!(
        seen["first_rows"],
        json!([
            "job-6", "job-5", "job-4", "job-3", "job-2", "job-1", "job-0"
        ]),
        "newest death first: {seen}"
    );
    assert_eq!(
        seen["jump_rows"],
        json!(["job-3", "job-2", "job-1", "job-0"]),
        "{seen}"
    );
    assert_eq!(
        seen["search_rows"],
        json!(["job-5", "job-2", "job-0"]),
        "{seen}"
    );
    assert_eq!(seen["checked"], 3, "{seen}");
    assert_eq!(seen["match_controls"], 2, "{seen}");
    assert_eq!(
        seen["dialogs"],
        json!(["Redrive 3 dead jobs (every match of \"declined\") back to pending?"]),
        "{seen}"
    );
    assert_eq!(seen["matches_notice"], "redrove 3 dead jobs", "{seen}");
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.dead, stats.pending), (4, 3));
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of `ms`, as the page's jump field takes it.
fn chrono_free_utc(ms: i64) -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{}", ms / 1000), "+%Y-%m-%d %H:%M:%S"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn search_covers_the_whole_dead_set_newest_first_in_bounded_steps() {
    let server = RedisServer::start();
    let queue = configured(&server, "many").await;
    // 21,000 dead jobs: the oldest matches by its error, the newest only by its payload.
    let n = 21_000;
    let base = redis_now_ms(&mut server.conn()) - 10 * n as i64;
    let ids: Vec<String> = (0..n).map(|i| format!("j{i:05}")).collect();
    let jobs: Vec<Dead> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Dead {
            id: id.as_bytes(),
            died_at: base + i as i64 * 10,
            error: if i == 0 {
                "Needle in the error"
            } else {
                "timeout"
            },
            payload: if i == n - 1 {
                b"{\"ref\":\"needle-7\"}"
            } else {
                b"{}"
            },
        })
        .collect();
    bury(&queue, &jobs).await;
    let ui = Ui::start(&server.url(), &[]);
    let _ = ui.overview_after(now_ms());

    // Newest first, without a search.
    let page = ui.get_json("/api/dead?q=many&limit=2");
    assert_eq!(page["jobs"][0]["id"], ids[n - 1], "{}", page["jobs"]);
    assert_eq!(page["jobs"][1]["id"], ids[n - 2]);
    // A jump to a time: the jobs that died then or before.
    let page = ui.get_json(&format!(
        "/api/dead?q=many&limit=1&before_ms={}",
        base + 10 * 100
    ));
    assert_eq!(page["jobs"][0]["id"], ids[100]);

    // The search: the first request finds the payload match at once, then goes on with a
    // cursor, each request looking at a bounded number, to the oldest.
    let mut found = Vec::new();
    let mut cursor = String::new();
    let mut requests = 0;
    loop {
        let page = ui.get_json(&format!(
            "/api/dead?q=many&search=needle&limit=20&cursor={cursor}"
        ));
        requests += 1;
        let looked = page["looked_at"].as_u64().unwrap();
        assert!(looked <= 5_000, "one request looked at {looked}");
        for job in page["jobs"].as_array().unwrap() {
            found.push(job["id"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
        assert!(requests < 20, "the cursor does not advance: {page}");
    }
    assert_eq!(found, [ids[n - 1].clone(), ids[0].clone()]);
    assert!(requests >= 5, "{requests} requests for {n} dead jobs");
    // A cursor that is not one is refused, naming it.
    let (code, body) = ui.get("/api/dead?q=many&cursor=nonsense");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("nonsense"), "{body}");
}

/// Bytes Redis has sent to its clients so far.
fn net_output(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_queue_page_reads_payload_previews_not_whole_payloads() {
    let server = RedisServer::start();
    let queue = configured(&server, "big").await;
    for i in 0..10 {
        let mut payload = format!("{{\"n\":{i},\"blob\":\"").into_bytes();
        payload.resize(1 << 20, b'x');
        queue.enqueue(NewJob::new(payload)).await.unwrap();
    }
    let ui = Ui::start(&server.url(), &[]);
    let _ = ui.overview_after(now_ms());
    let mut conn = server.conn();
    let before = net_output(&mut conn);
    let page = ui.get_json("/api/queue?q=big");
    let after = net_output(&mut conn);
    let pending = page["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 10);
    assert_eq!(pending[0]["payload_bytes"], 1 << 20);
    assert_eq!(pending[0]["payload_truncated"], true);
    assert!(
        pending[0]["payload"]
            .as_str()
            .unwrap()
            .starts_with("{\"n\":0,")
    );
    // Ten previews of 204 bytes, the ids, settings and counts: far below one payload.
    let sent = after - before;
    assert!(
        sent < 64 * 1024,
        "Redis sent {sent} bytes for one queue page of 10 jobs of 1 MiB"
    );
}

#[test]
fn the_console_reads_jobs_through_the_queue_layer_not_the_cli() {
    for file in std::fs::read_dir(root().join("src/console")).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("crate::cli"),
            "{} imports from the CLI: the job view lives in the queue layer",
            path.display()
        );
    }
}
