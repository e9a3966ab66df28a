//! The web console (`jobqueue ui`) against a private Redis: in a real headless Chromium
//! (Debian's, driven by playwright-core from tests/console/drive.mjs) and over plain
//! HTTP. The browser runs tests/console/drive.mjs, which prints what it saw; the
//! assertions are here. scripts/ensure-browser.sh installs Chromium and playwright-core
//! when they are missing.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use jobqueue::crd::{JobQueue, JobQueueSpec, JobQueueStatus};
use jobqueue::queue::{Backoff, FailMode, NewJob, Queue};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;
use support::console::{
    BIN, Ui, assert_png, drain_stderr, drive_with, ensure_browser, http, now_ms, shots_dir,
};
use support::eventually::Wait;
use support::redis::RedisServer;
use support::standin::StandIn;

const TAG: &str = "shop";
/// A payload holding markup: the pages must show it as text and run nothing.
const MARKUP: &str =
    r#"{"note":"<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">"}"#;

/// What the queue holds after the set-up: jobs acked, some failed to the dead-letter
/// set (two by one error, one by another), one lease in flight, one delayed job, the
/// markup payload and a large payload waiting.
struct Shop {
    dead_smtp: Vec<String>,
    dead_card: String,
}

async fn fill(queue: &Queue) -> Shop {
    support::console::one_attempt(queue).await;
    for i in 0..8 {
        queue
            .enqueue(NewJob::new(format!("{{\"order\":{i}}}")))
            .await
            .unwrap();
    }
    // The worker: ack three, fail three to the dead-letter set, keep one lease.
    let mut dead_smtp = Vec::new();
    let mut dead_card = String::new();
    for i in 0..7 {
        let lease = queue.claim_one("worker-1", None).await.unwrap().unwrap();
        match i {
            0..3 => assert!(queue.ack(&lease).await.unwrap()),
            3 | 4 => {
                queue
                    .fail(
                        &lease,
                        "smtp timeout after 30s",
                        FailMode::Dead,
                        Backoff::Policy,
                    )
                    .await
                    .unwrap();
                dead_smtp.push(lease.id.as_str().unwrap().to_string());
            }
            5 => {
                queue
                    .fail(
                        &lease,
                        "card declined: insufficient funds",
                        FailMode::Dead,
                        Backoff::Policy,
                    )
                    .await
                    .unwrap();
                dead_card = lease.id.as_str().unwrap().to_string();
            }
            _ => {} // in flight
        }
    }
    queue.enqueue(NewJob::new(MARKUP)).await.unwrap();
    queue.enqueue(NewJob::new("x".repeat(5000))).await.unwrap();
    queue
        .enqueue(NewJob::new("later").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    Shop {
        dead_smtp,
        dead_card,
    }
}

/// `jobqueue stats --json` as the CLI prints it.
fn cli_stats(redis: &str) -> Value {
    let out = Command::new(BIN)
        .args(["stats", "--redis", redis, "--tag", TAG, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Run the browser scenario on queue `TAG`; what it saw.
fn drive(ui: &Ui, scenario: &str, search: &str, shots: Option<&Path>) -> Value {
    drive_with(ui, scenario, TAG, search, shots)
}

/// Run the browser scenario on queue `queue`; what it saw.
fn drive_queue(ui: &Ui, scenario: &str, queue: &str, shots: Option<&Path>) -> Value {
    drive_with(ui, scenario, queue, "", shots)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_browser_shows_counts_finds_and_redrives_dead_jobs() {
    ensure_browser();
    let server = RedisServer::start();
    let queue = server.queue(TAG).await;
    // The console runs while the worker does: its charts show the rates.
    queue.enqueue(NewJob::new("first")).await.unwrap();
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    let _ = ui.overview_after(now_ms());
    let first = queue.claim_one("worker-1", None).await.unwrap().unwrap();
    assert!(queue.ack(&first).await.unwrap());
    // Two more queues at work over a few refreshes, for the overview's charts.
    let others = [server.queue("emails").await, server.queue("reports").await];
    for wave in 0..6u64 {
        for (n, q) in others.iter().enumerate() {
            for i in 0..(wave * (n as u64 + 1)) % 5 + 1 {
                q.enqueue(NewJob::new(format!("{{\"wave\":{wave},\"i\":{i}}}")))
                    .await
                    .unwrap();
            }
            let lease = q.claim_one("worker-2", None).await.unwrap().unwrap();
            if wave == 4 && n == 1 {
                q.fail(&lease, "template missing", FailMode::Dead, Backoff::Policy)
                    .await
                    .unwrap();
            } else {
                assert!(q.ack(&lease).await.unwrap());
            }
        }
        let _ = ui.overview_after(now_ms());
    }
    let shop = fill(&queue).await;
    let stats = cli_stats(&server.url());
    let set_up = now_ms();
    let _ = ui.overview_after(set_up);

    let shots = shots_dir();
    for name in [
        "console-overview.png",
        "console-queue.png",
        "console-dead.png",
    ] {
        let _ = std::fs::remove_file(shots.join(name));
    }
    let seen = drive(&ui, "writes", "card declined", Some(&shots));
    for name in [
        "console-overview.png",
        "console-queue.png",
        "console-dead.png",
    ] {
        assert_png(name);
    }

    // The overview shows the counts `jobqueue stats` prints.
    let row = &seen["overview"][TAG];
    for count in [
        "pending",
        "due",
        "processing",
        "delayed",
        "dead",
        "orphaned",
    ] {
        assert_eq!(
            row[count].as_str(),
            Some(stats[count].to_string().as_str()),
            "overview {count}: {row} vs stats {stats}"
        );
    }
    assert_eq!(row["dead"], "3");
    assert_eq!(row["pending"], "3");
    // The dead letters grew while the console watched: the badge says so.
    assert!(
        seen["overview_badges"][TAG]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b.as_str().unwrap().starts_with("dead letters growing: 3")),
        "{seen}"
    );
    // p50/p99 come from the acks' histogram (three acks here).
    assert!(
        seen["overview_latency"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l.as_str() != Some("n/a")),
        "{seen}"
    );
    assert!(seen["overview_sparklines"].as_u64().unwrap() >= 3, "{seen}");
    // The queue page: next in line, the lease in flight with its worker, the delayed
    // job, the settings; the markup payload shown as text, and nothing it holds ran.
    assert_eq!(seen["queue_pending_rows"], 3, "{seen}");
    let leases = seen["queue_leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{seen}");
    assert_eq!(leases[0][1], "worker-1");
    assert_eq!(seen["queue_delayed_rows"], 1);
    assert!(
        seen["queue_settings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "max_attempts"),
        "{seen}"
    );
    assert_eq!(seen["markup"]["text"], MARKUP, "{seen}");
    assert_eq!(seen["markup"]["child_elements"], 0);
    assert_eq!(seen["markup_ran"], false);
    assert_eq!(seen["injected_elements"], 0);
    // The dead letters: all three, the write controls offered; the search by error text
    // finds the one card decline.
    let mut dead: Vec<String> = serde_json::from_value(seen["dead_rows"].clone()).unwrap();
    dead.sort();
    let mut want = shop.dead_smtp.clone();
    want.push(shop.dead_card.clone());
    want.sort();
    assert_eq!(dead, want);
    assert!(seen["dead_controls"].as_u64().unwrap() >= 4, "{seen}");
    assert_eq!(seen["search_rows"], serde_json::json!([shop.dead_card]));
    assert!(
        seen["search_total"]
            .as_str()
            .unwrap()
            .starts_with("1 of the 3"),
        "{seen}"
    );
    // Opened and redriven: the job page says so and the counts moved.
    assert_eq!(seen["job_status_before"], "dead");
    assert_eq!(seen["job_error"], "card declined: insufficient funds");
    assert_eq!(seen["job_controls"], 2);
    assert_eq!(seen["job_notice"], "redrove 1 dead job");
    assert_eq!(seen["job_status_after"], "pending");
    assert_eq!(seen["dialogs"][0], "Redrive this job back to pending?");
    // A POST without the page's CSRF token is refused; with it, the dry run counts.
    assert_eq!(seen["post_without_csrf"]["status"], 403, "{seen}");
    assert!(
        seen["post_without_csrf"]["body"]["error"]
            .as_str()
            .unwrap()
            .contains("CSRF")
    );
    assert_eq!(seen["post_with_csrf"]["status"], 200, "{seen}");
    assert_eq!(seen["post_with_csrf"]["body"]["would"], 2, "{seen}");
    assert_eq!(seen["console_errors"], serde_json::json!([]), "{seen}");
    // Then the two left, selected on the dead-letter page: the confirmation counted them
    // (the dry run above changed nothing) before they were purged.
    assert_eq!(
        seen["dialogs"][1], "Purge for good 2 dead jobs (selected)?",
        "{seen}"
    );
    assert_eq!(seen["purge_notice"], "purged 2 dead jobs");
    assert_eq!(seen["dead_rows_after_purge"], 0);
    assert_eq!(
        seen["dead_empty_row"][0], "empty: no dead job here",
        "{seen}"
    );
    let after = queue.stats().await.unwrap();
    assert_eq!(
        (after.dead, after.pending, after.redriven, after.purged),
        (0, 4, 1, 2)
    );
    // The console's own counts follow: the refresher saw the redrive and the purge.
    let moved = now_ms();
    let o = ui.overview_after(moved);
    let q = o["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == TAG)
        .unwrap();
    assert_eq!(q["counts"]["dead"], 0);
    assert_eq!(q["counts"]["pending"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_console_offers_no_write_and_refuses_them() {
    ensure_browser();
    let server = RedisServer::start();
    let queue = server.queue(TAG).await;
    let shop = fill(&queue).await;
    let ui = Ui::start(&server.url(), &[]);
    let _ = ui.overview_after(now_ms());

    let seen = drive(&ui, "readonly", "smtp", None);
    assert_eq!(seen["dead_controls"], 0, "{seen}");
    assert_eq!(seen["job_controls"], 0, "{seen}");
    assert_eq!(seen["job_status_before"], "dead");
    let mut found: Vec<String> = serde_json::from_value(seen["search_rows"].clone()).unwrap();
    found.sort();
    let mut want = shop.dead_smtp.clone();
    want.sort();
    assert_eq!(found, want);
    for key in ["post_without_csrf", "post_with_csrf"] {
        assert_eq!(seen[key]["status"], 403, "{seen}");
        assert!(
            seen[key]["body"]["error"]
                .as_str()
                .unwrap()
                .contains("read-only"),
            "{seen}"
        );
    }
    // And over plain HTTP, with the page's token: refused, nothing moved.
    let (_, page) = ui.get("/");
    let token = page
        .split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    let body = format!("{{\"q\":\"{TAG}\",\"all\":true}}");
    let (code, reply) = http(
        &ui.addr,
        "POST",
        "/api/dead/purge",
        &[
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", &token),
        ],
        &body,
    );
    assert_eq!(code, 403, "{reply}");
    assert_eq!(queue.stats().await.unwrap().dead, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_guards_hosts_tokens_and_payloads() {
    const PASSWORD: &str = "pw-in-the-url-9Zk";
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port);
    let redis = jobqueue::queue::Redis::connect(&jobqueue::queue::ConnectOptions::new(&url))
        .await
        .unwrap();
    let queue = Queue::new(redis, "jq", TAG).unwrap();
    fill(&queue).await;
    let dir = tempfile::tempdir().unwrap();
    let token = "s3cret-token-0123456789";
    let token_file = support::console::token_file(dir.path(), token);
    let ui = Ui::start(
        &url,
        &[
            "--allow-writes",
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    // Without the token: the API refuses, a page sends to the login form.
    let (code, _) = ui.get("/api/overview");
    assert_eq!(code, 401);
    let (code, _) = ui.get("/");
    assert_eq!(code, 303);
    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    let (code, body) = http(&ui.addr, "GET", "/api/overview", &auth, "");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains(token));
    // The Redis password of the URL is in no reply: the endpoint is shown redacted.
    assert!(!body.contains(PASSWORD), "{body}");
    assert!(body.contains(":***@127.0.0.1"), "{body}");
    // The login form gives a cookie that is not the token.
    let form = format!("token={token}");
    let (code, _) = http(
        &ui.addr,
        "POST",
        "/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        &form,
    );
    assert_eq!(code, 303);
    // Another Host (a DNS-rebinding page) is refused even with the token.
    let mut s = std::net::TcpStream::connect(&ui.addr).unwrap();
    write!(
        s,
        "GET /api/overview HTTP/1.1\r\nHost: evil.example:80\r\nAuthorization: {bearer}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 421"), "{out}");
    // A large payload is previewed, and downloadable whole.
    let big = wait_for_job(&ui, &auth, 5000);
    assert_eq!(big["payload_truncated"], true);
    assert!(big["payload"].as_str().unwrap().len() <= 200);
    let id = big["id"].as_str().unwrap();
    let (code, body) = http(
        &ui.addr,
        "GET",
        &format!("/api/payload?q={TAG}&id={id}"),
        &auth,
        "",
    );
    assert_eq!(code, 200);
    assert_eq!(body, "x".repeat(5000));
    // Pages of the line: the next job first, then the one after, as the queue holds them.
    let next: Vec<String> = queue
        .pending_ids(2)
        .await
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    for (offset, want) in next.iter().enumerate() {
        let path = format!("/api/queue?q={TAG}&offset={offset}&limit=1");
        let (code, body) = http(&ui.addr, "GET", &path, &auth, "");
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["pending"][0]["id"],
            want.as_str(),
            "offset {offset}: {body}"
        );
        assert_eq!(v["pending"].as_array().unwrap().len(), 1);
    }
    // An offset past any list is an empty page, not a failure.
    let path = format!("/api/dead?q={TAG}&offset={}", usize::MAX);
    let (code, body) = http(&ui.addr, "GET", &path, &auth, "");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"jobs\":[]"), "{body}");
    // Every dead job at once, over the API as a script would: the page's CSRF token,
    // a dry run that counts, then the redrive.
    let (_, page) = http(&ui.addr, "GET", "/", &auth, "");
    let csrf = page
        .split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    let write = |body: &str| {
        http(
            &ui.addr,
            "POST",
            "/api/dead/redrive",
            &[
                ("Authorization", bearer.as_str()),
                ("Content-Type", "application/json"),
                ("X-CSRF-Token", csrf.as_str()),
            ],
            body,
        )
    };
    let (code, reply) = write(&format!(
        "{{\"q\":\"{TAG}\",\"all\":true,\"dry_run\":true}}"
    ));
    assert_eq!(code, 200, "{reply}");
    assert!(reply.contains("\"would\":3"), "{reply}");
    assert_eq!(queue.stats().await.unwrap().dead, 3);
    let (code, reply) = write(&format!("{{\"q\":\"{TAG}\",\"all\":true}}"));
    assert_eq!(code, 200, "{reply}");
    assert!(reply.contains("\"done\":3"), "{reply}");
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.dead, stats.redriven), (0, 3));
    // Neither ids nor all, or both: refused, naming what is expected.
    let (code, reply) = write(&format!("{{\"q\":\"{TAG}\"}}"));
    assert_eq!(code, 400, "{reply}");
    assert!(reply.contains("either"), "{reply}");
    // An id another client wrote with a space: the dry run counts it, and the redrive
    // moves it (both take any id the protocol takes).
    support::redis::enqueue_raw(&queue, b"a b", b"spaced").await;
    let mut conn = queue.redis().clone();
    let keys = queue.keys();
    let _: () = redis::pipe()
        .cmd("LREM")
        .arg(&keys.pending)
        .arg(0)
        .arg("a b")
        .cmd("HSET")
        .arg(keys.job("a b"))
        .arg("status")
        .arg("dead")
        .cmd("ZADD")
        .arg(&keys.dead)
        .arg(1)
        .arg("a b")
        .query_async(&mut conn)
        .await
        .unwrap();
    let (code, reply) = write(&format!(
        "{{\"q\":\"{TAG}\",\"ids\":[\"a b\"],\"dry_run\":true}}"
    ));
    assert_eq!(code, 200, "{reply}");
    assert!(reply.contains("\"would\":1"), "{reply}");
    let (code, reply) = write(&format!("{{\"q\":\"{TAG}\",\"ids\":[\"a b\"]}}"));
    assert_eq!(code, 200, "{reply}");
    assert!(reply.contains("\"done\":1"), "{reply}");
    assert_eq!(queue.stats().await.unwrap().dead, 0);
    // Pages carry the CSP that forbids inline scripts.
    let mut s = std::net::TcpStream::connect(&ui.addr).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: {}\r\nAuthorization: {bearer}\r\nConnection: close\r\n\r\n",
        ui.addr
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(
        out.to_lowercase()
            .contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{out}"
    );
}

/// The pending job whose payload is `bytes` long, from the queue page's API.
fn wait_for_job(ui: &Ui, auth: &[(&str, &str)], bytes: u64) -> Value {
    Wait::for_("the large job on the queue page").until_blocking(|| {
        let (code, body) = http(&ui.addr, "GET", &format!("/api/queue?q={TAG}"), auth, "");
        if code != 200 {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        v["pending"]
            .as_array()?
            .iter()
            .find(|j| j["payload_bytes"] == bytes)
            .cloned()
    })
}

/// Redis's count of `stats` script calls since the last CONFIG RESETSTAT: the calls of
/// ZCOUNT, which the stats script runs three times per call (expired, due, orphaned) and no
/// other read of the console runs (Redis counts the commands a script runs; the queue page's lists call a
/// script too, `preview`, so EVALSHA alone would count them with the refreshes).
fn script_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let calls: HashMap<&str, u64> = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name, calls.parse().ok()?))
        })
        .collect();
    calls.get("cmdstat_zcount").copied().unwrap_or(0) / ZCOUNT_PER_STATS
}

/// The ZCOUNTs of one `stats` call: expired leases, due delayed jobs, set-aside ids.
const ZCOUNT_PER_STATS: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_queues_and_ten_pollers_cost_one_stats_call_per_queue_per_refresh() {
    const QUEUES: usize = 200;
    const POLLERS: usize = 10;
    let server = RedisServer::start();
    let redis = server.redis().await;
    for i in 0..QUEUES {
        let q = Queue::new(redis.clone(), "jq", &format!("q{i:03}")).unwrap();
        q.enqueue(NewJob::new("x")).await.unwrap();
    }
    let ui = Ui::start(&server.url(), &[]);
    // Wait for a refresh that saw every queue.
    Wait::for_("a refresh of all 200 queues").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        o["queues"]
            .as_array()
            .is_some_and(|q| q.len() == QUEUES && q.iter().all(|q| q["counts"]["pending"] == 1))
    });
    let mut conn = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let before = ui.get_json("/api/overview")["refreshes"].as_u64().unwrap();
    // Ten pages polling the overview and a queue page as fast as they can, until the
    // refresher has done ten more rounds.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pollers: Vec<_> = (0..POLLERS)
        .map(|i| {
            let addr = ui.addr.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let path = if n.is_multiple_of(2) {
                        "/api/overview".to_string()
                    } else {
                        format!("/api/queue?q=q{:03}", i * 7)
                    };
                    let (code, _) = http(&addr, "GET", &path, &[], "");
                    assert_eq!(code, 200);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let after = Wait::for_("ten refreshes while the pages poll").until_blocking(|| {
        let r = ui.get_json("/api/overview")["refreshes"].as_u64().unwrap();
        (r >= before + 10).then_some(r)
    });
    let calls = script_calls(&mut conn);
    let final_refreshes = ui.get_json("/api/overview")["refreshes"].as_u64().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let requests: u64 = pollers.into_iter().map(|p| p.join().unwrap()).sum();
    // Every refresh between the two readings, plus those in flight at each end (the
    // one that may have ended between the reset and the first reading, and the one
    // running when the calls were read), costs one `stats` call per queue; nothing the
    // pollers asked for called `stats`. The refreshes after the first reading and
    // before `after` made all their calls after the reset.
    let rounds = final_refreshes - before + 2;
    println!(
        "{QUEUES} queues, {POLLERS} pollers: {requests} API requests, {} refreshes, {calls} script calls ({:.2} per queue per refresh)",
        after - before,
        calls as f64 / (QUEUES as f64 * (after - before) as f64)
    );
    assert!(
        calls <= rounds * QUEUES as u64,
        "{calls} script calls for {rounds} refreshes of {QUEUES} queues"
    );
    assert!(
        calls >= (after - before - 1) * QUEUES as u64 && calls > 0,
        "{calls} script calls: the refreshes did not call stats?"
    );
    assert!(
        requests > after - before,
        "the pollers made {requests} requests: more than the refreshes, or the bound says nothing"
    );
}

fn b64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let n = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn condition(type_: &str, status: &str, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: format!("{type_} is {status}"),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        observed_generation: Some(1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kubernetes_each_jobqueue_is_read_through_the_secrets_its_spec_names() {
    const PASSWORD: &str = "pw-console-7Qx2";
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port);
    let redis = jobqueue::queue::Redis::connect(&jobqueue::queue::ConnectOptions::new(&url))
        .await
        .unwrap();
    let queue = Queue::new(redis, "jq", "orders").unwrap();
    for i in 0..4 {
        queue.enqueue(NewJob::new(format!("{i}"))).await.unwrap();
    }

    let api = StandIn::start().await;
    api.put(
        "/api/v1",
        "secrets",
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "redis-orders", "namespace": "jobs"},
            "data": {
                "url": b64(&format!("redis://127.0.0.1:{}", server.port)),
                "password": b64(PASSWORD),
            }
        }),
    );
    let mut spec = JobQueueSpec::new("redis://unused:1", "orders");
    spec.redis.url = None;
    spec.redis.url_secret_ref = Some(jobqueue::crd::SecretKeySelector {
        name: "redis-orders".into(),
        key: "url".into(),
    });
    spec.redis.password_secret_ref = Some(jobqueue::crd::SecretKeySelector {
        name: "redis-orders".into(),
        key: "password".into(),
    });
    spec.workers = Some(support::fixtures::workers(1, 5));
    let mut jq = JobQueue::new("orders", spec.clone());
    jq.metadata.namespace = Some("jobs".into());
    jq.status = Some(JobQueueStatus {
        desired_replicas: Some(3),
        current_replicas: Some(2),
        conditions: vec![
            condition("Ready", "True", "Reconciled"),
            condition("LeaseTooShort", "False", "NoStaleAcks"),
        ],
        ..JobQueueStatus::default()
    });
    api.put(
        "/apis/jobqueue.dev/v1alpha1",
        "jobqueues",
        serde_json::to_value(&jq).unwrap(),
    );
    // A second queue whose Secret is missing: listed, with why it cannot be read.
    let mut broken = JobQueue::new("broken", {
        let mut s = spec.clone();
        s.hash_tag = "broken".into();
        s.redis.url_secret_ref.as_mut().unwrap().name = "no-such-secret".into();
        s.redis.password_secret_ref = None;
        s.workers = None;
        s
    });
    broken.metadata.namespace = Some("jobs".into());
    api.put(
        "/apis/jobqueue.dev/v1alpha1",
        "jobqueues",
        serde_json::to_value(&broken).unwrap(),
    );

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig("jobs")).unwrap();
    let mut child = Command::new(BIN)
        .args(["ui", "--kubernetes", "--port", "0", "--refresh", "200ms"])
        .env("KUBECONFIG", &kubeconfig)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let stderr = Some(drain_stderr(&mut child));
    let ui = Ui {
        child,
        addr,
        stderr,
        log: Default::default(),
    };
    let o = Wait::for_("both JobQueues read").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        let ok = o["queues"]
            .as_array()
            .is_some_and(|q| q.len() == 2 && q.iter().any(|q| q["counts"]["pending"] == 4));
        ok.then_some(o)
    });
    let queues = o["queues"].as_array().unwrap();
    let orders = queues.iter().find(|q| q["id"] == "jobs/orders").unwrap();
    assert_eq!(orders["name"], "jq:{orders}");
    assert_eq!(orders["kube"]["desired_replicas"], 3);
    assert_eq!(orders["kube"]["current_replicas"], 2);
    assert_eq!(orders["kube"]["workers"], "Deployment/worker");
    assert_eq!(orders["kube"]["conditions"][0]["type"], "Ready");
    assert_eq!(orders["kube"]["conditions"][0]["status"], "True");
    let broken = queues.iter().find(|q| q["id"] == "jobs/broken").unwrap();
    assert!(broken["counts"].is_null(), "{broken}");
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("Secret jobs/no-such-secret not found"),
        "{broken}"
    );
    // In the browser: the JobQueue's conditions and replicas beside the counts.
    ensure_browser();
    let _ = std::fs::remove_file(shots_dir().join("console-kubernetes.png"));
    let seen = drive_queue(&ui, "kubernetes", "jobs/orders", Some(&shots_dir()));
    assert_png("console-kubernetes.png");
    let row = &seen["kube"]["jobs/orders"];
    assert_eq!(row["pending"], "4", "{seen}");
    assert_eq!(
        row["badges"],
        serde_json::json!(["Ready=True", "LeaseTooShort=False"]),
        "{seen}"
    );
    assert!(
        row["text"]
            .as_str()
            .unwrap()
            .contains("Deployment/worker: 2 of 3 replicas"),
        "{seen}"
    );
    assert!(
        seen["kube"]["jobs/broken"]["error"]
            .as_str()
            .unwrap()
            .contains("not found"),
        "{seen}"
    );
    // The queue page reads through the same handle.
    let page = ui.get_json("/api/queue?q=jobs%2Forders");
    assert_eq!(page["pending"].as_array().unwrap().len(), 4);
    // The password is in no reply and no log line.
    let (_, html) = ui.get("/");
    let text = format!("{o}{page}{html}");
    assert!(!text.contains(PASSWORD), "the password leaked into a reply");
    let log = ui.stop();
    assert!(
        log.contains("DEBUG"),
        "the console's debug log was read: {log}"
    );
    assert!(!log.contains(PASSWORD), "the password leaked into the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_console_finds_the_queues_of_the_primary() {
    let setup = support::sentinel::SentinelSetup::start();
    let queue = setup.queue("behind").await;
    for i in 0..2 {
        queue.enqueue(NewJob::new(format!("{i}"))).await.unwrap();
    }
    let ui = Ui::start(
        "",
        &[
            "--sentinel",
            &setup.addr_list(),
            "--master-name",
            support::sentinel::MASTER,
        ],
    );
    let o = Wait::for_("the queue behind Sentinel").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        let found = o["queues"].as_array().is_some_and(|q| {
            q.iter()
                .any(|q| q["id"] == "behind" && q["counts"]["pending"] == 2)
        });
        found.then_some(o)
    });
    assert!(
        o["source"].as_str().unwrap().starts_with("sentinel://"),
        "{o}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_console_reads_the_tags_given_and_asks_for_them() {
    let cluster = support::redis::RedisCluster::start();
    let tags = cluster.tags_on_distinct_nodes(2);
    let redis = cluster.redis().await;
    for (n, tag) in tags.iter().enumerate() {
        let q = Queue::new(redis.clone(), "jq", tag).unwrap();
        for i in 0..=n {
            q.enqueue(NewJob::new(format!("{i}"))).await.unwrap();
        }
    }
    // Without --tag: a usage error that says what to do.
    let out = Command::new(BIN)
        .args(["ui", "--cluster", "--redis", &cluster.url(), "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("name them with --tag"), "{err}");

    let list = tags.join(",");
    let ui = Ui::start(&cluster.url(), &["--cluster", "--tag", &list]);
    Wait::for_("both queues of the Cluster").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        tags.iter().enumerate().all(|(n, tag)| {
            o["queues"].as_array().is_some_and(|q| {
                q.iter()
                    .any(|q| q["id"] == tag.as_str() && q["counts"]["pending"] == n as u64 + 1)
            })
        })
    });
    // A queue page reads its lists on the node that holds the queue.
    let page = ui.get_json(&format!("/api/queue?q={}", tags[1]));
    assert_eq!(page["pending"].as_array().unwrap().len(), 2);
}

#[test]
fn beyond_loopback_the_console_needs_a_token() {
    let out = Command::new(BIN)
        .args(["ui", "--bind", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("add --token-file"), "{err}");
    // A token too short to guard anything is refused too, without printing it.
    let dir = tempfile::tempdir().unwrap();
    let file = support::console::token_file(dir.path(), "short-tok");
    let out = Command::new(BIN)
        .args(["ui", "--bind", "0.0.0.0", "--port", "0", "--token-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("at least 16 characters") && !err.contains("short-tok"),
        "{err}"
    );
}
