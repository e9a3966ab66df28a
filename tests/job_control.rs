//! Control of single jobs: `jobqueue promote` runs delayed jobs now; `jobqueue cancel`
//! ends pending and delayed jobs at once, and has a leased job's worker stop it (an exec
//! command's process group SIGTERMed) and end it as cancelled.

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use jobqueue::queue::{Cancellation, NewJob, Queue, QueueSettings};
use jobqueue::worker::Worker;
use jobqueue::worker::exec::ExecHandler;
use support::eventually::Wait;
use support::procs::with_env;
use support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// `jobqueue ARGS --redis URL --tag TAG`, run to its end.
fn jobqueue(server: &RedisServer, tag: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--redis", &server.url(), "--tag", tag])
        .output()
        .expect("run jobqueue")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

async fn status(queue: &Queue, id: &str) -> Option<String> {
    queue.job(id).await.unwrap().and_then(|j| j.status)
}

async fn retaining(server: &RedisServer, tag: &str) -> Queue {
    let queue = server.queue(tag).await;
    queue
        .configure(&QueueSettings {
            completed_retention: Duration::from_secs(600),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    queue
}

#[tokio::test]
async fn promote_runs_delayed_jobs_now_and_says_why_it_skips_the_others() {
    let server = RedisServer::start();
    let queue = server.queue("pro").await;
    let day = Duration::from_secs(86400);
    queue
        .enqueue(NewJob::new("x").id("late").delay(day))
        .await
        .unwrap();
    queue
        .enqueue(NewJob::new("x").id(&b"bin\xff"[..]).delay(day))
        .await
        .unwrap();
    queue.enqueue(NewJob::new("x").id("ready")).await.unwrap();
    let out = jobqueue(
        &server,
        "pro",
        &[
            "promote",
            "late",
            "ready",
            "nope",
            "--id-hex",
            "hex:62696eff",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("promoted late"), "{stdout}");
    assert!(stdout.contains("promoted hex:62696eff"), "{stdout}");
    assert!(
        stdout.contains("promoted 2 delayed jobs of 4 ids in jq:{pro}"),
        "{stdout}"
    );
    assert!(
        stderr.contains("skipped ready: not delayed (status pending)"),
        "{stderr}"
    );
    assert!(stderr.contains("skipped nope: no such job"), "{stderr}");
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.delayed, stats.pending, stats.run_now), (0, 3, 2));
    // Promoted jobs run first, the last promoted at the very front.
    let first = queue.claim(1, "w", None).await.unwrap();
    assert_eq!(first[0].id.as_ref(), b"bin\xff");
}

#[tokio::test]
async fn cancel_ends_pending_and_delayed_jobs_keeping_their_hash() {
    let server = RedisServer::start();
    let queue = retaining(&server, "can").await;
    queue.enqueue(NewJob::new("x").id("p")).await.unwrap();
    queue
        .enqueue(NewJob::new("x").id("d").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    queue.enqueue(NewJob::new("x").id("other")).await.unwrap();
    let out = jobqueue(&server, "can", &["cancel", "p", "d", "nope"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("cancelled p (it was pending)"), "{stdout}");
    assert!(stdout.contains("cancelled d (it was delayed)"), "{stdout}");
    assert!(stderr.contains("skipped nope: no such job"), "{stderr}");
    assert_eq!(status(&queue, "p").await.as_deref(), Some("cancelled"));
    assert_eq!(status(&queue, "d").await.as_deref(), Some("cancelled"));
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.pending, stats.delayed, stats.cancelled),
        (1, 0, 2),
        "{stats:?}"
    );
    // Counted in stats, text and JSON.
    let out = jobqueue(&server, "can", &["stats", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["cancelled"], 2, "{json}");
    let out = jobqueue(&server, "can", &["stats"]);
    assert!(
        text(&out.stdout)
            .lines()
            .any(|l| l.trim_start().starts_with("cancelled") && l.trim_end().ends_with('2')),
        "{}",
        text(&out.stdout)
    );
    let out = jobqueue(&server, "can", &["show", "p"]);
    assert!(
        text(&out.stdout).contains("cancelled (kept by completed retention)"),
        "{}",
        text(&out.stdout)
    );
    // Cancelled already, or promoted: nothing changes.
    assert_eq!(
        queue.cancel("p").await.unwrap(),
        Cancellation::Kept("cancelled".into())
    );
    assert!(!queue.run_now("d").await.unwrap());
    let leased = queue.claim(5, "w", None).await.unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].id, "other");
    let out = jobqueue(&server, "can", &["cancel", "other"]);
    assert!(
        text(&out.stdout).contains("cancelling other: it is leased"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_leased_exec_job_has_its_process_group_stopped_and_ends_cancelled() {
    let server = RedisServer::start();
    let queue = retaining(&server, "lcan").await;
    let id = format!("sleeper-{}-{}", std::process::id(), rand::random::<u32>());
    // The command and its sleep (a second process of its group) run until stopped.
    let handler =
        ExecHandler::new("sh", ["-c", "sleep 3600 & wait"]).kill_grace(Duration::from_secs(5));
    let handler = std::sync::Arc::new(handler);
    let worker = Worker::builder(queue.clone())
        .handle_signals(false)
        .worker_id("cancel-test")
        .visibility(Some(Duration::from_millis(900)))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_token();
    let stats = worker.stats();
    let task = tokio::spawn(worker.run(move |lease, ctx| {
        let handler = handler.clone();
        async move { handler.run(lease, ctx).await }
    }));
    queue
        .enqueue(NewJob::new("").id(id.as_str()))
        .await
        .unwrap();
    Wait::for_("the job's command and its sleep to run")
        .within(Duration::from_secs(20))
        .until(async || with_env("JOBQUEUE_JOB_ID", &id).len() >= 2)
        .await;
    assert_eq!(status(&queue, &id).await.as_deref(), Some("processing"));
    assert_eq!(queue.cancel(&id).await.unwrap(), Cancellation::Requested);
    Wait::for_("the job to end cancelled")
        .within(Duration::from_secs(20))
        .explained_by(|| format!("{:?}", stats.get()))
        .until(async || status(&queue, &id).await.as_deref() == Some("cancelled"))
        .await;
    Wait::for_("every process of the job to be gone")
        .within(Duration::from_secs(10))
        .explained_by(|| format!("left: {:?}", with_env("JOBQUEUE_JOB_ID", &id)))
        .until(async || with_env("JOBQUEUE_JOB_ID", &id).is_empty())
        .await;
    let qs = queue.stats().await.unwrap();
    assert_eq!(
        (
            qs.cancelled,
            qs.processing,
            qs.pending,
            qs.dead,
            qs.acked,
            qs.failed
        ),
        (1, 0, 0, 0, 0, 0),
        "{qs:?}"
    );
    shutdown.cancel();
    let ws = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((ws.cancelled, ws.acked, ws.retried, ws.dead), (1, 0, 0, 0));
}
