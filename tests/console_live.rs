//! The console while Redis is in trouble, against a real private redis-server: a hung
//! Redis (SIGSTOP) shows as an outage on every page within a bounded wait and the pages
//! recover by themselves after SIGCONT; health counts the dead set's size, expired
//! leases and the oldest pending job; the queue's latency (the oldest pending job's age)
//! in `stats`, `peek` and the console; the Redis server's own health (memory, eviction
//! policy, persistence, clients), for an ACL user that may not run CONFIG too.

mod support;

use std::process::Command;
use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, NewJob, Queue};
use serde_json::Value;
use support::console::{BIN, Drive, Ui, assert_png, ensure_browser, now_ms, shots_dir};
use support::eventually::Wait;
use support::redis::{RedisServer, redis_now_ms};

/// Continue the server when a test fails while it is stopped (a stopped redis-server
/// would keep its port and its process until continued).
struct Resume<'a>(&'a RedisServer);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.pause(false);
    }
}

/// `queues` queues of one pending job each (`q000`, …) and, in the first, `dead` dead
/// jobs (`dead-0`, …).
async fn queues_with_one_job(server: &RedisServer, queues: usize, dead: usize) {
    let redis = server.redis().await;
    for i in 0..queues {
        let q = Queue::new(redis.clone(), "jq", &format!("q{i:03}")).unwrap();
        if i == 0 {
            kill_jobs(&q, dead).await;
        }
        q.enqueue(NewJob::new("x")).await.unwrap();
    }
}

/// Enqueue `n` jobs (`dead-0`, …) and fail each to the dead-letter set.
async fn kill_jobs(queue: &Queue, n: usize) {
    support::console::one_attempt(queue).await;
    for i in 0..n {
        queue
            .enqueue(NewJob::new(format!("doomed {i}")).id(format!("dead-{i}")))
            .await
            .unwrap();
        let lease = queue.claim_one("w", None).await.unwrap().unwrap();
        queue
            .fail(&lease, "card declined", FailMode::Dead, Backoff::Policy)
            .await
            .unwrap();
    }
}

fn queue_of<'a>(overview: &'a Value, id: &str) -> &'a Value {
    overview["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == id)
        .unwrap_or_else(|| panic!("no queue {id} in {overview}"))
}

fn health_texts(q: &Value) -> Vec<String> {
    q["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["text"].as_str().unwrap().to_string())
        .collect()
}

/// With 301 queues and redis-server stopped, every queue stops being shown healthy
/// within a bounded wait (its counts are stale), and /api/health reports the outage;
/// after SIGCONT the counts are fresh again and the outage is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_stops_every_queue_looking_healthy_and_then_recovers() {
    const QUEUES: usize = 301;
    let server = RedisServer::start();
    queues_with_one_job(&server, QUEUES, 0).await;
    let ui = Ui::start(&server.url(), &["--history", "5s"]);
    Wait::for_("a refresh of all 301 queues, each healthy").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        o["queues"].as_array().is_some_and(|q| {
            q.len() == QUEUES && q.iter().all(|q| q["health"].as_array().unwrap().is_empty())
        })
    });

    server.pause(true);
    let resume = Resume(&server);
    let healthy = |o: &Value| {
        o["queues"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["health"].as_array().unwrap().is_empty())
            .count()
    };
    // A bound, not a timing: the console's own limit for stale counts is a few seconds.
    let o = Wait::for_("no queue shown healthy while Redis is stopped")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(200))
        .explained_by(|| {
            let n = healthy(&ui.get_json("/api/overview"));
            format!("{n} of {QUEUES} queues still shown healthy")
        })
        .until_blocking(|| {
            let o = ui.get_json("/api/overview");
            (healthy(&o) == 0).then_some(o)
        });
    let row = queue_of(&o, "q150");
    assert_eq!(row["freshness"]["stale"], true, "{row}");
    assert!(
        health_texts(row)
            .iter()
            .any(|t| t.starts_with("stale: no reading for") || t.starts_with("last read failed")),
        "{row}"
    );
    let health = ui.get_json("/api/health");
    assert!(
        health["outage"]["problems"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "{health}"
    );

    drop(resume);
    Wait::for_("fresh counts of every queue and no outage after SIGCONT")
        .within(Duration::from_secs(90))
        .every(Duration::from_millis(200))
        .explained_by(|| ui.get_json("/api/health").to_string())
        .until_blocking(|| {
            let o = ui.get_json("/api/overview");
            let fresh = healthy(&o) == QUEUES
                && o["queues"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|q| q["freshness"]["stale"] == false);
            fresh && ui.get_json("/api/health")["outage"].is_null()
        });
}

/// Health counts the dead set by its size, not only its growth over the window: jobs
/// that died before the console started still make the queue unhealthy; so do a job
/// that has waited two minutes and an expired lease.
#[tokio::test]
async fn health_counts_the_dead_set_expired_leases_and_the_wait() {
    let server = RedisServer::start();
    let redis = server.redis().await;
    let shop = Queue::new(redis.clone(), "jq", "shop").unwrap();
    kill_jobs(&shop, 30).await;
    let waiting = shop.enqueue(NewJob::new("waits")).await.unwrap();
    let mut conn = server.conn();
    let now = redis_now_ms(&mut conn);
    let _: () = redis::cmd("HSET")
        .arg(shop.keys().job(&waiting.id.to_string()))
        .arg("enqueued_at")
        .arg(now - 125_000)
        .query(&mut conn)
        .unwrap();
    let leases = Queue::new(redis.clone(), "jq", "leases").unwrap();
    leases.enqueue(NewJob::new("slow")).await.unwrap();
    leases
        .claim_one("w", Some(Duration::from_millis(1)))
        .await
        .unwrap()
        .unwrap();
    support::redis::wait_past(&mut conn, now + 10);

    let ui = Ui::start(&server.url(), &["--history", "2s"]);
    let o = Wait::for_("a refresh that read both queues").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        (o["queues"].as_array().unwrap().len() == 2
            && o["queues"]
                .as_array()
                .unwrap()
                .iter()
                .all(|q| q["counts"].is_object()))
        .then_some(o)
    });
    let shop = health_texts(queue_of(&o, "shop"));
    assert!(
        shop.contains(&"30 dead jobs wait for a redrive or a purge".to_string()),
        "health of a queue holding 30 dead jobs: {shop:?}"
    );
    assert!(
        shop.iter()
            .any(|t| t.starts_with("the oldest pending job has waited 2m")),
        "{shop:?}"
    );
    let leases = health_texts(queue_of(&o, "leases"));
    assert_eq!(leases, ["1 expired leases wait for a reaper"], "{leases:?}");
}

/// `jobqueue ARGS… --redis URL --tag TAG`: stdout, checked to succeed.
fn cli(redis: &str, tag: &str, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .args(["--redis", redis, "--tag", tag])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "jobqueue {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The queue's latency: a job enqueued ready records when it arrived (peek shows its
/// age), and `stats` (text and JSON) and the console say how long the oldest has waited.
#[tokio::test]
async fn the_oldest_pending_jobs_age_is_in_stats_peek_and_the_console() {
    let server = RedisServer::start();
    let queue = server.queue("mail").await;
    let first = queue.enqueue(NewJob::new("a")).await.unwrap();
    queue.enqueue(NewJob::new("b")).await.unwrap();
    // peek: the age of a job enqueued ready is known (it was `-`).
    let peek = cli(&server.url(), "mail", &["peek", "-n", "2"]);
    // `#  ID  ATTEMPTS  AGE  PAYLOAD`, then one row per job.
    let ages: Vec<&str> = peek
        .lines()
        .skip_while(|l| !l.trim_start().starts_with('#'))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    assert!(
        ages.len() == 2 && ages.iter().all(|a| *a != "-"),
        "peek shows no age for jobs enqueued ready: {peek}"
    );

    // The first arrived 95 seconds ago.
    let mut conn = server.conn();
    let now = redis_now_ms(&mut conn);
    let _: () = redis::cmd("HSET")
        .arg(queue.keys().job(&first.id.to_string()))
        .arg("enqueued_at")
        .arg(now - 95_000)
        .query(&mut conn)
        .unwrap();
    let json: Value = serde_json::from_str(&cli(&server.url(), "mail", &["stats", "--json"]))
        .expect("stats --json");
    let age = json["oldest_pending_ms"]
        .as_u64()
        .expect("oldest_pending_ms");
    assert!((95_000..105_000).contains(&age), "{json}");
    assert!(json["time_ms"].as_i64().unwrap() >= now, "{json}");
    let text = cli(&server.url(), "mail", &["stats"]);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("oldest_pending"))
        .unwrap_or_else(|| panic!("no oldest_pending line: {text}"));
    assert!(
        line.trim_end().ends_with('s') && line.contains("1m3"),
        "{text}"
    );

    let ui = Ui::start(&server.url(), &[]);
    let o = Wait::for_("a refresh of the queue").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        o["queues"][0]["freshness"]["oldest_pending_ms"]
            .as_u64()
            .is_some_and(|ms| ms >= 95_000)
            .then_some(o)
    });
    let q = &o["queues"][0];
    assert!(
        q["freshness"]["read_at_ms"].as_i64().unwrap() >= now,
        "the Redis clock of the reading: {q}"
    );
    assert!(
        health_texts(q)
            .iter()
            .any(|t| t.starts_with("the oldest pending job has waited 1m3")),
        "{q}"
    );
}

/// The Redis server's health on the console: memory and its limit, an eviction policy
/// other than noeviction warned about, persistence, clients; an ACL user that may not run
/// CONFIG sees the rest, with a note, and no outage.
#[tokio::test]
async fn the_console_shows_the_health_of_redis_itself() {
    let server = RedisServer::start_with(&[
        "--maxmemory",
        "64mb",
        "--maxmemory-policy",
        "allkeys-lru",
        "--appendonly",
        "yes",
    ]);
    let queue = server.queue("mail").await;
    queue.enqueue(NewJob::new("a")).await.unwrap();
    let ui = Ui::start(&server.url(), &[]);
    let r = Wait::for_("a probe of Redis").until_blocking(|| {
        let h = ui.get_json("/api/health");
        let r = h["redis"][0].clone();
        r["appendfsync"].is_string().then_some(r)
    });
    assert_eq!(r["maxmemory"], 64 * 1024 * 1024, "{r}");
    assert!(r["used_memory"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["maxmemory_policy"], "allkeys-lru", "{r}");
    assert_eq!(r["aof_enabled"], true, "{r}");
    assert_eq!(r["appendfsync"], "everysec", "{r}");
    assert_eq!(r["save"], "", "{r}");
    assert!(r["connected_clients"].as_u64().unwrap() >= 1, "{r}");
    assert!(
        r["warnings"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("maxmemory-policy is allkeys-lru"),
        "{r}"
    );
    drop(ui);

    // An ACL user without CONFIG: the rest is read, CONFIG is noted, nothing is down.
    let mut conn = server.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("watcher")
        .arg("on")
        .arg(">watcher-secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-config")
        .query(&mut conn)
        .unwrap();
    let url = format!("redis://watcher:watcher-secret@127.0.0.1:{}", server.port);
    let ui = Ui::start(&url, &[]);
    let h = Wait::for_("a probe of Redis as the ACL user").until_blocking(|| {
        let h = ui.get_json("/api/health");
        h["redis"][0]["used_memory"].is_u64().then_some(h)
    });
    let r = &h["redis"][0];
    assert!(r["error"].is_null(), "{h}");
    assert!(r["save"].is_null(), "{h}");
    assert!(
        r["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("CONFIG GET not allowed for this user"),
        "{h}"
    );
    assert_eq!(r["maxmemory_policy"], "allkeys-lru", "{h}");
    assert!(h["outage"].is_null(), "{h}");
    assert!(!h.to_string().contains("watcher-secret"), "{h}");
}

/// In a browser, with 301 queues: with redis-server stopped, the overview, a queue page and a dead-letter
/// page show the outage banner within a bounded wait and no "healthy" badge; the
/// dead-letter page opened during the outage shows its jobs once Redis goes on, with no
/// reload. Takes docs/images/console-outage.png with JOBQUEUE_SCREENSHOTS=docs/images.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_every_page_shows_the_outage_and_recovers() {
    ensure_browser();
    let server = RedisServer::start();
    queues_with_one_job(&server, 301, 3).await;
    let ui = Ui::start(&server.url(), &["--history", "5s"]);
    Wait::for_("a refresh of the 301 queues").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        o["queues"]
            .as_array()
            .is_some_and(|q| q.len() == 301 && q.iter().all(|q| q["counts"]["pending"] == 1))
    });
    let shots = shots_dir();
    let _ = std::fs::remove_file(shots.join("console-outage.png"));
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("outage-seen");

    server.pause(true);
    let resume = Resume(&server);
    let mut drive = Drive::start(
        &ui,
        "outage",
        "q000",
        &[("MARKER", marker.to_str().unwrap())],
        Some(&shots),
    );
    // The scenario says when it has seen the outage on every page; then Redis goes on.
    Wait::for_("the browser to see the outage on every page")
        .within(Duration::from_secs(180))
        .every(Duration::from_millis(100))
        .until_blocking(|| marker.exists() || drive.exited());
    drop(resume);
    let seen = drive.finish();

    assert_eq!(seen["overview_marked"], true, "{seen}");
    assert_eq!(seen["overview_healthy"], 0, "{seen}");
    assert_eq!(
        seen["overview_rows"], seen["overview_stale_notes"],
        "{seen}"
    );
    assert!(
        seen["overview_banner"].to_string().contains("queues"),
        "{seen}"
    );
    assert!(
        seen["queue_banner"]
            .as_array()
            .is_some_and(|b| !b.is_empty()),
        "{seen}"
    );
    assert!(
        seen["dead_banner"]
            .as_array()
            .is_some_and(|b| !b.is_empty()),
        "{seen}"
    );
    assert_eq!(seen["dead_rows_during"], 0, "{seen}");
    assert_eq!(
        seen["dead_rows_after"],
        serde_json::json!(["dead-2", "dead-1", "dead-0"]), // newest first
        "{seen}"
    );
    assert!(
        seen["dead_age"]
            .as_str()
            .unwrap()
            .starts_with("page updated "),
        "{seen}"
    );
    assert!(seen["healthy_after"].as_u64().unwrap() >= 300, "{seen}");
    assert_eq!(seen["banner_after"], true, "{seen}");
    assert_eq!(seen["redis_policy"], "noeviction", "{seen}");
    assert_png("console-outage.png");
}

/// In the browser, a queue page's badges say what is wrong (30 dead jobs), never
/// "healthy"; a job page shown before Redis stops polls: it shows the outage at its top
/// and keeps the job marked as old within a bounded wait, then recovers by itself after
/// SIGCONT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_queue_page_shows_health_and_a_job_page_rides_out_an_outage() {
    ensure_browser();
    let server = RedisServer::start();
    let queue = server.queue("sick").await;
    kill_jobs(&queue, 30).await;
    queue
        .enqueue(NewJob::new(vec![b'x'; 1 << 20]).id("big"))
        .await
        .unwrap();
    let ui = Ui::start(&server.url(), &[]);
    let _ = ui.overview_after(now_ms());
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("job-shown");
    let marker = dir.path().join("outage-seen");
    let mut drive = Drive::start(
        &ui,
        "detail",
        "sick",
        &[
            ("READY", ready.to_str().unwrap()),
            ("MARKER", marker.to_str().unwrap()),
        ],
        None,
    );
    Wait::for_("the browser to show the job page")
        .within(Duration::from_secs(120))
        .every(Duration::from_millis(100))
        .until_blocking(|| ready.exists() || drive.exited());
    server.pause(true);
    let resume = Resume(&server);
    Wait::for_("the browser to see the outage on the job page")
        .within(Duration::from_secs(180))
        .every(Duration::from_millis(100))
        .until_blocking(|| marker.exists() || drive.exited());
    drop(resume);
    let seen = drive.finish();

    let badges: Vec<&str> = seen["queue_badges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    assert!(
        badges.contains(&"30 dead jobs wait for a redrive or a purge")
            && !badges.contains(&"healthy"),
        "{seen}"
    );
    assert_eq!(seen["job_status_before"], "pending", "{seen}");
    assert!(seen["preview_chars"].as_u64().unwrap() < 1024, "{seen}");
    assert!(
        seen["banner"].as_array().is_some_and(|b| !b.is_empty()),
        "{seen}"
    );
    assert_eq!(
        seen["job_status_during"], "pending",
        "kept while Redis is stopped: {seen}"
    );
    assert!(
        seen["age_during"]
            .as_str()
            .unwrap()
            .starts_with("Could not refresh: "),
        "{seen}"
    );
    assert!(
        seen["age_after"]
            .as_str()
            .unwrap()
            .starts_with("page updated "),
        "{seen}"
    );
    assert_eq!(seen["job_status_after"], "pending", "{seen}");
}
