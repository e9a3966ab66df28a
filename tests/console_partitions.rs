//! A partitioned queue (its partition count recorded in its `meta`, docs/partitions.md)
//! is one row of the console, and its pages and actions cover every partition: the
//! queue page's lists, the dead-letter page (newest death first over all partitions,
//! paged with one cursor), a job's page, redrive and purge, pause and resume. Each job
//! row names the partition that holds it (`part`), and the links and writes carry it.
//! A real redis-server.

mod support;

use std::collections::BTreeSet;

use jobqueue::queue::{Backoff, FailMode, NewJob, PartitionRecord, PartitionedQueue, Queue};
use serde_json::{Value, json};
use support::console::{Ui, drive_with, ensure_browser, now_ms};
use support::redis::RedisServer;

/// A queue of 3 partitions, its count recorded, with 30 jobs: in each partition two
/// are claimed and failed to dead (error `boom <i>`), the rest (24) stay pending.
async fn three_partitions(server: &RedisServer) -> PartitionedQueue {
    let queue = PartitionedQueue::new(server.redis().await, "jq", "parts", 3).unwrap();
    let jobs = (0..30)
        .map(|i| NewJob::new(format!("job {i}")).id(format!("parts-{i}")))
        .collect();
    queue.enqueue_many(jobs).await.unwrap();
    let mut deaths = 0;
    for part in queue.partitions() {
        for _ in 0..2 {
            let lease = part.claim_one("w", None).await.unwrap().unwrap();
            part.fail(
                &lease,
                &format!("boom {deaths}"),
                FailMode::Dead,
                Backoff::Policy,
            )
            .await
            .unwrap();
            deaths += 1;
        }
    }
    queue.partitions()[0]
        .record_partitions(&PartitionRecord::new(3))
        .await
        .unwrap();
    let stats = queue.stats().await.unwrap();
    assert!(
        stats
            .partitions
            .iter()
            .all(|s| s.dead == 2 && s.pending > 0),
        "{stats:?}"
    );
    queue
}

/// The partition that holds job `id`, and its status there.
async fn where_is(queue: &PartitionedQueue, id: &[u8]) -> Option<(String, Option<String>)> {
    for part in queue.partitions() {
        if let Some(job) = part.job(id).await.unwrap() {
            return Some((part.name().to_string(), job.status));
        }
    }
    None
}

fn ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap_or_else(|| panic!("not a list: {rows}"))
        .iter()
        .map(|j| j["id_shown"].as_str().unwrap().to_string())
        .collect()
}

async fn dead_total(queue: &PartitionedQueue) -> u64 {
    queue
        .stats()
        .await
        .unwrap()
        .partitions
        .iter()
        .map(|s| s.dead)
        .sum()
}

async fn paused(parts: &[Queue]) -> Vec<bool> {
    let mut out = Vec::new();
    for q in parts {
        out.push(q.stats().await.unwrap().paused);
    }
    out
}

#[tokio::test]
async fn a_partitioned_queues_pages_and_actions_cover_every_partition() {
    let server = RedisServer::start();
    let queue = three_partitions(&server).await;
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    let overview = ui.overview_after(now_ms());
    assert_eq!(
        overview["queues"].as_array().unwrap().len(),
        1,
        "{overview}"
    );

    // The queue page: the pending jobs of every partition, paged as one list, each
    // row naming its partition.
    let page = ui.get_json("/api/queue?q=parts&limit=200");
    let pending = ids(&page["pending"]);
    assert_eq!(pending.len(), 24, "{page}");
    let parts: BTreeSet<u64> = page["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["part"].as_u64().unwrap())
        .collect();
    assert_eq!(parts, BTreeSet::from([0, 1, 2]), "{page}");
    let mut paged = Vec::new();
    for offset in [0, 10, 20] {
        let page = ui.get_json(&format!("/api/queue?q=parts&limit=10&offset={offset}"));
        paged.extend(ids(&page["pending"]));
    }
    assert_eq!(paged, pending, "pages of 10 cover the same list");

    // The dead-letter page: all six, newest death first, over two pages.
    let first = ui.get_json("/api/dead?q=parts&limit=4");
    let cursor = first["next_cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no next page: {first}"));
    let second = ui.get_json(&format!(
        "/api/dead?q=parts&limit=4&cursor={}",
        urlencoding(cursor)
    ));
    assert!(second["next_cursor"].is_null(), "{second}");
    let rows: Vec<Value> = first["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["jobs"].as_array().unwrap())
        .cloned()
        .collect();
    let died: Vec<i64> = rows
        .iter()
        .map(|j| j["died_at"].as_i64().unwrap())
        .collect();
    assert!(died.windows(2).all(|w| w[0] >= w[1]), "{died:?}");
    let errors: BTreeSet<String> = rows
        .iter()
        .map(|j| j["last_error"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        errors,
        (0..6).map(|i| format!("boom {i}")).collect(),
        "every partition's dead jobs, each once"
    );

    // A job of the last partition: its page, by the partition its row names.
    let last = rows
        .iter()
        .find(|j| j["part"] == 2)
        .unwrap_or_else(|| panic!("no dead job of part 2: {rows:?}"));
    let id_hex = last["id_hex"].as_str().unwrap();
    let id = hex::decode(id_hex).unwrap();
    let job = ui.get_json(&format!("/api/job?q=parts&id_hex={id_hex}&part=2"));
    assert_eq!(job["status"], "dead", "{job}");
    assert_eq!(job["actions"], json!(["redrive", "purge"]), "{job}");
    // Without the partition, the one that holds it.
    let job = ui.get_json(&format!("/api/job?q=parts&id_hex={id_hex}"));
    assert_eq!(job["part"], 2, "{job}");
    let (code, _) = ui.get(&format!("/api/payload?q=parts&id_hex={id_hex}&part=2"));
    assert_eq!(code, 200);
    // A partition the queue does not have is named in the error.
    let (code, reply) = ui.get(&format!("/api/job?q=parts&id_hex={id_hex}&part=3"));
    assert_eq!(code, 400, "{reply}");
    assert!(reply.contains("3 partitions"), "{reply}");

    // Redrive that one job, in its partition.
    let (code, dry) = ui.post_json(
        "/api/dead/redrive",
        &json!({"q": "parts", "ids_hex": [id_hex], "parts": [2], "dry_run": true}),
    );
    assert_eq!((code, dry["would"].clone()), (200, json!(1)), "{dry}");
    let (code, done) = ui.post_json(
        "/api/dead/redrive",
        &json!({"q": "parts", "ids_hex": [id_hex], "parts": [2]}),
    );
    assert_eq!((code, done["done"].clone()), (200, json!(1)), "{done}");
    let (_, status) = where_is(&queue, &id).await.unwrap();
    assert_eq!(status.as_deref(), Some("pending"));
    assert_eq!(dead_total(&queue).await, 5);

    // A search's matches over every partition: counted, named with their partitions,
    // moved.
    let (code, dry) = ui.post_json(
        "/api/dead/purge",
        &json!({"q": "parts", "search": "BOOM", "dry_run": true}),
    );
    assert_eq!((code, dry["would"].clone()), (200, json!(5)), "{dry}");
    assert_eq!(dry["parts"].as_array().unwrap().len(), 5, "{dry}");
    let (code, done) = ui.post_json(
        "/api/dead/purge",
        &json!({"q": "parts", "ids_hex": dry["ids_hex"], "parts": dry["parts"]}),
    );
    assert_eq!((code, done["done"].clone()), (200, json!(5)), "{done}");
    assert_eq!(dead_total(&queue).await, 0);

    // Pause and resume reach every partition: workers claim from each.
    let (code, reply) = ui.post_json("/api/queue/pause", &json!({"q": "parts"}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(paused(queue.partitions()).await, [true, true, true]);
    let (code, reply) = ui.post_json("/api/queue/resume", &json!({"q": "parts"}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(paused(queue.partitions()).await, [false, false, false]);
}

#[tokio::test]
async fn redrive_all_covers_every_partition_up_to_the_counted_death() {
    let server = RedisServer::start();
    let queue = three_partitions(&server).await;
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    let _ = ui.overview_after(now_ms());
    let (code, dry) = ui.post_json(
        "/api/dead/redrive",
        &json!({"q": "parts", "all": true, "dry_run": true}),
    );
    assert_eq!((code, dry["would"].clone()), (200, json!(6)), "{dry}");
    let (code, done) = ui.post_json(
        "/api/dead/redrive",
        &json!({"q": "parts", "all": true, "until_ms": dry["until_ms"], "count": 6}),
    );
    assert_eq!((code, done["done"].clone()), (200, json!(6)), "{done}");
    assert_eq!(dead_total(&queue).await, 0);
    for i in 0..30 {
        let id = format!("parts-{i}");
        let (_, status) = where_is(&queue, id.as_bytes()).await.unwrap();
        assert_eq!(status.as_deref(), Some("pending"), "{id}");
    }
}

#[tokio::test]
async fn in_a_browser_the_dead_letter_page_of_a_partitioned_queue_acts_on_each_partition() {
    ensure_browser();
    let server = RedisServer::start();
    let queue = three_partitions(&server).await;
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    let _ = ui.overview_after(now_ms());
    let seen = drive_with(&ui, "partitions", "parts", "", None);
    let rows = seen["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{seen}");
    let parts: BTreeSet<&str> = rows.iter().map(|r| r["part"].as_str().unwrap()).collect();
    assert_eq!(parts, BTreeSet::from(["0", "1", "2"]), "{seen}");
    for r in rows {
        let href = r["href"].as_str().unwrap();
        assert!(
            href.ends_with(&format!("&part={}", r["part"].as_str().unwrap())),
            "{href}"
        );
    }
    // The two of partition 2 redriven, and only those.
    assert_eq!(seen["part2_selected"], 2, "{seen}");
    assert_eq!(seen["selected_notice"], "redrove 2 dead jobs", "{seen}");
    let after = seen["rows_after"].as_array().unwrap();
    assert!(after.iter().all(|r| r["part"] != "2"), "{seen}");
    for r in rows.iter().filter(|r| r["part"] == "2") {
        let id = r["job"].as_str().unwrap();
        let (_, status) = where_is(&queue, id.as_bytes()).await.unwrap();
        assert_eq!(status.as_deref(), Some("pending"), "{id}");
    }
    assert_eq!(seen["job_status"], "dead", "{seen}");
    assert_eq!(
        seen["dialogs"],
        json!([
            "Redrive 2 dead jobs (selected) back to pending?",
            "Redrive 4 dead jobs (every match of \"boom\") back to pending?"
        ]),
        "{seen}"
    );
    assert_eq!(seen["matches_notice"], "redrove 4 dead jobs", "{seen}");
    assert_eq!(dead_total(&queue).await, 0);
}

/// A cursor as a query value (`+inf:0,…` holds `+` and `,`).
fn urlencoding(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'-' | b'_' | b'.' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}
