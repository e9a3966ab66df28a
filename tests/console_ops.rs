//! The operator's hand in the console and the CLI, against a private Redis: pausing and
//! resuming a queue, running a delayed job now, deleting one job, the workers page (who
//! holds which lease, seen recently), the history kept in Redis (per-minute counts,
//! processing times of recent windows) and the errors of a job's last attempts. Over
//! plain HTTP, through the CLI, and in headless Chromium (tests/console/scenarios/ops.mjs).

mod support;

use std::process::Command;
use std::time::Duration;

use jobqueue::queue::{Backoff, FailMode, NewJob, Queue, QueueSettings};
use serde_json::{Value, json};
use support::console::{BIN, Ui, assert_png, drive_with, ensure_browser, now_ms, shots_dir};
use support::eventually::Wait;
use support::redis::RedisServer;

/// The queue once the console's refresher has listed it.
fn listed(ui: &Ui, tag: &str) -> Value {
    Wait::for_("the console to list the queue").until_blocking(|| {
        let o = ui.get_json("/api/overview");
        o["queues"]
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["id"] == tag).cloned())
            .filter(|q| !q["counts"].is_null())
    })
}

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run jobqueue");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn pause_and_resume_stop_claims_not_producers_and_need_writes_and_csrf() {
    let server = RedisServer::start();
    let q = server.queue("pz").await;
    q.enqueue(NewJob::new("one")).await.unwrap();
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    listed(&ui, "pz");

    // without the page's CSRF token: refused, nothing paused
    let (code, _) = support::console::http(
        &ui.addr,
        "POST",
        "/api/queue/pause",
        &[("Content-Type", "application/json")],
        r#"{"q":"pz"}"#,
    );
    assert_eq!(code, 403);
    assert!(!q.stats().await.unwrap().paused);

    let (code, reply) = ui.post_json("/api/queue/pause", &json!({"q": "pz"}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["changed"], true, "{reply}");
    let stats = q.stats().await.unwrap();
    assert!(stats.paused && stats.paused_at.is_some(), "{stats:?}");
    // claims stop, producers go on
    assert!(q.claim(5, "w", None).await.unwrap().is_empty());
    q.enqueue(NewJob::new("two")).await.unwrap();
    assert_eq!(q.stats().await.unwrap().pending, 2);
    // the snapshot says so
    Wait::for_("the overview to show the pause")
        .until_blocking(|| (listed(&ui, "pz")["pause"]["paused"] == true).then_some(()));

    let (code, reply) = ui.post_json("/api/queue/resume", &json!({"q": "pz"}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(q.claim(5, "w", None).await.unwrap().len(), 2);

    // a read-only console refuses both
    let ro = Ui::start(&server.url(), &[]);
    listed(&ro, "pz");
    let (code, reply) = ro.post_json("/api/queue/pause", &json!({"q": "pz"}));
    assert_eq!(code, 403, "{reply}");
    assert!(!q.stats().await.unwrap().paused);
}

#[tokio::test]
async fn run_now_and_delete_act_on_one_job_and_never_delete_a_lease() {
    let server = RedisServer::start();
    let q = server.queue("one").await;
    q.enqueue(NewJob::new("first").id("first")).await.unwrap();
    q.enqueue(
        NewJob::new("later")
            .id("later")
            .delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    q.enqueue(NewJob::new("p").id("gone-pending"))
        .await
        .unwrap();
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    listed(&ui, "one");

    // run now: the delayed job is first in line
    let (code, reply) = ui.post_json("/api/job/run", &json!({"q": "one", "id": "later"}));
    assert_eq!(code, 200, "{reply}");
    let (code, reply) = ui.post_json("/api/job/run", &json!({"q": "one", "id": "first"}));
    assert_eq!(code, 409, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("not delayed"),
        "{reply}"
    );
    // delete a pending job: gone from its list and its hash
    let (code, reply) = ui.post_json(
        "/api/job/delete",
        &json!({"q": "one", "id": "gone-pending"}),
    );
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["status"], "pending");
    assert!(q.job("gone-pending").await.unwrap().is_none());
    assert_eq!(q.pending_ids(10).await.unwrap().len(), 2);

    let leases = q.claim(1, "w-1", None).await.unwrap();
    assert_eq!(leases[0].id.to_string(), "later", "run now put it first");
    // a leased job is not deleted
    let (code, reply) = ui.post_json("/api/job/delete", &json!({"q": "one", "id": "later"}));
    assert_eq!(code, 409, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("leased"),
        "{reply}"
    );
    assert!(q.ack(&leases[0]).await.unwrap(), "the lease still holds");
    // no job: 404
    let (code, reply) = ui.post_json("/api/job/delete", &json!({"q": "one", "id": "nope"}));
    assert_eq!(code, 404, "{reply}");
    assert_eq!(q.stats().await.unwrap().deleted, 1);
}

#[tokio::test]
async fn the_workers_api_groups_leases_by_worker_and_lists_workers_seen() {
    let server = RedisServer::start();
    let q = server.queue("wk").await;
    for i in 0..5 {
        q.enqueue(NewJob::new(format!("j{i}"))).await.unwrap();
    }
    let a = q.claim(3, "worker-a", None).await.unwrap();
    let b = q.claim(1, "worker-b", None).await.unwrap();
    q.ack(&b[0]).await.unwrap();
    // worker-c claims and finds nothing left but one job it acks at once
    let c = q.claim(1, "worker-c", None).await.unwrap();
    q.ack(&c[0]).await.unwrap();
    let _ = q.claim(1, "worker-c", None).await.unwrap();
    let ui = Ui::start(&server.url(), &[]);
    listed(&ui, "wk");
    let w = ui.get_json("/api/workers?q=wk");
    assert_eq!(w["leases_total"], 3, "{w}");
    let holders = w["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{w}");
    assert_eq!(holders[0]["worker"], "worker-a");
    assert_eq!(holders[0]["leases"], 3);
    let ids: Vec<String> = holders[0]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = a.iter().map(|l| l.id.to_string()).collect();
    want.sort();
    let mut got = ids.clone();
    got.sort();
    assert_eq!(got, want);
    assert!(holders[0]["longest_ms"].as_i64().unwrap() >= 0);
    let seen: Vec<&str> = w["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["worker"].as_str().unwrap())
        .collect();
    // the last seen first: worker-c claimed last
    assert_eq!(seen, ["worker-c", "worker-b", "worker-a"], "{w}");
}

#[tokio::test]
async fn the_history_api_gives_per_minute_counts_and_recent_processing_times() {
    let server = RedisServer::start();
    let q = server.queue("hs").await;
    q.configure(&QueueSettings {
        max_attempts: 1,
        ..QueueSettings::default()
    })
    .await
    .unwrap();
    for i in 0..4 {
        q.enqueue(NewJob::new(format!("j{i}"))).await.unwrap();
    }
    let leases = q.claim(4, "w", None).await.unwrap();
    q.ack(&leases[0]).await.unwrap();
    q.ack(&leases[1]).await.unwrap();
    q.fail(&leases[2], "boom", FailMode::Retry, Backoff::Policy)
        .await
        .unwrap();
    let ui = Ui::start(&server.url(), &[]);
    listed(&ui, "hs");
    let h = ui.get_json("/api/history?q=hs&minutes=60");
    let sum = |k: &str| -> u64 {
        h[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum()
    };
    assert_eq!(h["enqueued"].as_array().unwrap().len(), 60);
    assert_eq!(
        (sum("enqueued"), sum("acked"), sum("failed"), sum("dead")),
        (4, 2, 1, 1),
        "{h}"
    );
    let windows = h["windows"].as_array().unwrap();
    let names: Vec<&str> = windows
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["10m", "1h", "24h"]);
    for w in windows {
        assert_eq!(w["acks"], 2, "{w}");
        assert!(
            w["p50_ms"].as_f64().is_some() && w["p99_ms"].as_f64().is_some(),
            "{w}"
        );
    }
    let (code, body) = ui.get("/api/history?q=hs&minutes=5000");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("minutes must be 1 to 1440"), "{body}");
}

#[tokio::test]
async fn the_cli_pauses_resumes_and_shows_attempt_errors() {
    let server = RedisServer::start();
    let url = server.url();
    let q = server.queue("cl").await;
    q.enqueue(NewJob::new("x").id("job-1")).await.unwrap();
    let (ok, out, err) = cli(&["pause", "--redis", &url, "--tag", "cl"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("paused jq:{cl}: workers claim nothing"),
        "{out}"
    );
    let (_, out, _) = cli(&["pause", "--redis", &url, "--tag", "cl"]);
    assert!(out.contains("was paused already"), "{out}");
    let (ok, out, err) = cli(&["stats", "--redis", &url, "--tag", "cl"]);
    assert!(ok, "{err}");
    assert!(out.contains("paused: workers claim nothing"), "{out}");
    let (ok, out, _) = cli(&["stats", "--redis", &url, "--tag", "cl", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["paused"], true, "{v}");
    assert!(q.claim(1, "w", None).await.unwrap().is_empty());
    let (ok, out, err) = cli(&["resume", "--redis", &url, "--tag", "cl"]);
    assert!(ok, "{err}");
    assert!(out.contains("resumed jq:{cl}"), "{out}");
    let (_, out, _) = cli(&["stats", "--redis", &url, "--tag", "cl"]);
    assert!(!out.contains("paused"), "{out}");

    // three failed attempts, one error far over the kept length
    q.configure(&QueueSettings {
        max_attempts: 3,
        ..QueueSettings::default()
    })
    .await
    .unwrap();
    for i in 1..=3 {
        let lease = q.claim(1, "w", None).await.unwrap().remove(0);
        let text = if i == 2 {
            "y".repeat(3000)
        } else {
            format!("boom {i}")
        };
        q.fail(&lease, &text, FailMode::Retry, Backoff::Immediate)
            .await
            .unwrap();
    }
    let info = q.job("job-1").await.unwrap().unwrap();
    let errors: Vec<(u32, String)> = info
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.clone()))
        .collect();
    assert_eq!(
        errors,
        [
            (1, "boom 1".into()),
            (2, "y".repeat(1024)),
            (3, "boom 3".into())
        ]
    );
    let (ok, out, err) = cli(&["show", "--redis", &url, "--tag", "cl", "job-1"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("errors of the last 3 failed attempts, oldest first:"),
        "{out}"
    );
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("attempt "))
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].contains("boom 1") && lines[2].contains("boom 3"),
        "{out}"
    );
    let (ok, out, _) = cli(&["show", "--redis", &url, "--tag", "cl", "job-1", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["errors"][2]["error"], "boom 3", "{v}");
    assert_eq!(v["errors"][2]["attempt"], 3, "{v}");
}

/// Fill a queue for the browser: a job with two failed attempts, two workers holding
/// leases, a delayed job, pending jobs, and a few minutes of history.
async fn fill_for_browser(q: &Queue) {
    q.enqueue(NewJob::new("{\"to\":\"ada@example.com\"}").id("flaky"))
        .await
        .unwrap();
    for msg in ["smtp: connection refused", "smtp: 451 try again later"] {
        let l = q.claim(1, "pod-api-7f9c-1", None).await.unwrap().remove(0);
        q.fail(&l, msg, FailMode::Retry, Backoff::Immediate)
            .await
            .unwrap();
    }
    // its third attempt is running
    let l = q.claim(1, "pod-api-7f9c-1", None).await.unwrap().remove(0);
    assert_eq!(l.id.to_string(), "flaky");
    for i in 0..12 {
        q.enqueue(NewJob::new(format!("{{\"order\":{i}}}")).id(format!("order-{i}")))
            .await
            .unwrap();
    }
    q.enqueue(
        NewJob::new("later")
            .id("scheduled-1")
            .delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    for _ in 0..6 {
        let l = q.claim(1, "pod-api-7f9c-1", None).await.unwrap().remove(0);
        q.ack(&l).await.unwrap();
    }
    q.claim(1, "pod-api-7f9c-1", None).await.unwrap();
    q.claim(1, "pod-batch-2b1d-0", None).await.unwrap();
    // a paused schedule, listed on the queue page (paused: it fires nothing meanwhile)
    q.put_schedule(&jobqueue::queue::schedule::Schedule {
        name: "digest".into(),
        rule: jobqueue::queue::schedule::Rule::Every(Duration::from_secs(3600)),
        payload: b"{}".to_vec(),
        options: Default::default(),
        missed: jobqueue::queue::schedule::Missed::Once,
        paused: true,
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_console_in_a_browser_pauses_shows_workers_history_and_attempt_errors() {
    ensure_browser();
    let server = RedisServer::start();
    let q = server.queue("orders").await;
    fill_for_browser(&q).await;
    let ui = Ui::start(&server.url(), &["--allow-writes"]);
    listed(&ui, "orders");
    let shots = shots_dir();
    for name in ["console-workers.png", "console-history.png"] {
        let _ = std::fs::remove_file(shots.join(name));
    }
    let started = now_ms();
    let seen = drive_with(&ui, "ops", "orders", "", Some(&shots));
    assert!(now_ms() >= started);
    assert_eq!(seen["console_errors"], json!([]), "{seen}");
    // pause and resume from the queue page
    assert_eq!(seen["banner_before"], "claiming", "{seen}");
    assert!(
        seen["banner_paused"]
            .as_str()
            .unwrap()
            .starts_with("paused since"),
        "{seen}"
    );
    assert_eq!(seen["banner_resumed"], "claiming", "{seen}");
    // the schedules of the queue
    assert_eq!(
        seen["schedules"],
        json!([["digest", "every 1h", "once", "-", "paused"]]),
        "{seen}"
    );
    assert!(!q.stats().await.unwrap().paused);
    // the history chart: one point per minute of the hour, the counts of the set-up
    assert_eq!(seen["history_points"], 60, "{seen}");
    assert_eq!(seen["history_totals"]["enqueued"], "14", "{seen}");
    assert_eq!(seen["history_totals"]["acked"], "6", "{seen}");
    assert_eq!(seen["history_totals"]["failed"], "2", "{seen}");
    assert_eq!(
        seen["latency_windows"],
        json!(["10m", "1h", "24h"]),
        "{seen}"
    );
    // the workers page: who holds what
    let holders = &seen["holders"];
    assert_eq!(holders["pod-api-7f9c-1"], "2", "{seen}");
    assert_eq!(holders["pod-batch-2b1d-0"], "1", "{seen}");
    let seen_workers = seen["seen_workers"].as_array().unwrap();
    assert_eq!(seen_workers[0], "pod-batch-2b1d-0", "{seen}");
    assert_eq!(seen_workers.len(), 2, "{seen}");
    // the job page: the errors of its attempts, oldest first
    assert_eq!(
        seen["job_errors"],
        json!([
            ["1", "smtp: connection refused"],
            ["2", "smtp: 451 try again later"]
        ]),
        "{seen}"
    );
    // run the delayed job now, delete a pending one
    assert_eq!(seen["run_now_status"], "pending", "{seen}");
    assert!(
        seen["delete_notice"]
            .as_str()
            .unwrap()
            .contains("deleted pending job"),
        "{seen}"
    );
    assert!(q.job("order-11").await.unwrap().is_none());
    assert_eq!(
        q.pending_ids(1).await.unwrap()[0].to_string(),
        "scheduled-1"
    );
    assert_png("console-workers.png");
    assert_png("console-history.png");
}

#[tokio::test]
async fn the_queue_page_lists_the_schedules_with_last_and_next_tick() {
    use jobqueue::queue::JobOptions;
    use jobqueue::queue::schedule::{Missed, Rule, Schedule};
    let server = RedisServer::start();
    let q = server.queue("sch").await;
    q.enqueue(NewJob::new("one")).await.unwrap();
    let nightly = Schedule {
        name: "nightly".into(),
        rule: Rule::Cron {
            expr: "0 3 * * *".into(),
            tz: "Europe/Paris".into(),
        },
        payload: b"{}".to_vec(),
        options: JobOptions::default(),
        missed: Missed::Once,
        paused: false,
    };
    q.put_schedule(&nightly).await.unwrap();
    let paused = Schedule {
        name: "ping".into(),
        rule: Rule::Every(Duration::from_secs(30)),
        paused: true,
        missed: Missed::Skip,
        ..nightly.clone()
    };
    q.put_schedule(&paused).await.unwrap();
    let next = q
        .schedule("nightly")
        .await
        .unwrap()
        .unwrap()
        .next_tick
        .unwrap();
    let ui = Ui::start(&server.url(), &[]);
    listed(&ui, "sch");
    let page = ui.get_json("/api/queue?q=sch");
    assert_eq!(
        page["schedules"],
        json!([
            {"name": "nightly", "rule": "cron 0 3 * * * (Europe/Paris)", "missed": "once",
             "paused": false, "last_tick": null, "next_tick": next, "last_job": null},
            {"name": "ping", "rule": "every 30s", "missed": "skip", "paused": true,
             "last_tick": null, "next_tick": null, "last_job": null},
        ]),
        "{page}"
    );
    assert!(page["schedules_error"].is_null(), "{page}");
}
