//! A queue without the operator or `jobqueue reap`: workers reap it themselves (a job of
//! a SIGKILLed worker gets done), and idle workers wake when a delay or a retry backoff
//! ends rather than at their poll interval.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jobqueue::queue::{Backoff, NewJob, Queue, QueueSettings};
use jobqueue::worker::{JobError, Worker};
use support::eventually::{Wait, eventually};
use support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// One `jobqueue worker --exec sh -c SCRIPT` process, with default flags (its reaper on).
struct ExecWorker {
    child: Child,
    log: PathBuf,
}

impl ExecWorker {
    fn start(server: &RedisServer, tag: &str, out: &Path, name: &str, script: &str) -> Self {
        let log = out.join(format!("{name}.log"));
        let child = Command::new(BIN)
            .args(["worker", "--redis", &server.url(), "--tag", tag])
            .args(["--worker-id", name, "--exec", "sh", "-c", script])
            .env("OUT", out)
            .env("RUST_LOG", "info")
            .env_remove("JOBQUEUE_NO_REAPER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run jobqueue worker");
        ExecWorker { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ExecWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn status(queue: &Queue, id: &str) -> Option<String> {
    queue.job(id).await.unwrap().and_then(|j| j.status)
}

/// The README's quick start gone wrong: the worker holding the job is SIGKILLed, another
/// worker runs, and nobody runs `jobqueue reap`. The second worker's reaper puts the job
/// back once the dead worker's lease ends, and the job gets done. (Before workers reaped,
/// the job stayed in `processing` for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_killed_worker_is_done_with_no_reaper_but_the_workers() {
    let server = RedisServer::start();
    let queue = server.queue("heal").await;
    queue
        .configure(&QueueSettings {
            visibility_timeout: Duration::from_secs(1),
            completed_retention: Duration::from_secs(3600),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    // The first run hangs (until its worker is killed); the next one finishes at once.
    let script = r#"echo "$JOBQUEUE_WORKER_ID" >> "$OUT/runs"
if [ "$JOBQUEUE_ATTEMPT" = 1 ]; then sleep 60; fi"#;
    queue
        .enqueue(NewJob::new("hello").id("job-1"))
        .await
        .unwrap();

    let first = ExecWorker::start(&server, "heal", out.path(), "first", script);
    let runs = out.path().join("runs");
    Wait::for_("the first worker runs the job")
        .explained_by(|| first.log())
        .until(async || std::fs::read_to_string(&runs).is_ok_and(|r| r == "first\n"))
        .await;
    drop(first); // SIGKILL, mid-job
    assert_eq!(status(&queue, "job-1").await.as_deref(), Some("processing"));

    let second = ExecWorker::start(&server, "heal", out.path(), "second", script);
    Wait::for_("the job to be done by the second worker, with nothing else reaping")
        .within(Duration::from_secs(20))
        .explained_by(|| second.log())
        .until(async || status(&queue, "job-1").await.as_deref() == Some("done"))
        .await;
    let job = queue.job("job-1").await.unwrap().unwrap();
    assert_eq!(job.attempts, 2);
    assert_eq!(job.worker.as_deref(), Some("second"));
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "first\nsecond\n");
    let stats = queue.stats().await.unwrap();
    assert!(stats.reaped >= 1, "{stats:?}");
}

/// With a poll interval far longer than the test may take, a job delayed 300 ms and a
/// job retried after a 100 ms backoff both run: the idle worker wakes when the earliest
/// delayed job is due (and when its own fail delays one), not at its next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_wake_when_a_delay_or_a_backoff_ends() {
    let server = RedisServer::start();
    let queue = server.queue("due").await;
    queue
        .configure(&QueueSettings {
            completed_retention: Duration::from_secs(3600),
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    queue
        .enqueue(
            NewJob::new("later")
                .id("later")
                .delay(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    queue
        .enqueue(NewJob::new("flaky").id("flaky"))
        .await
        .unwrap();
    let worker = Worker::builder(queue.clone())
        .handle_signals(false)
        .concurrency(2)
        .poll_interval(Duration::from_secs(30))
        .retry_backoff(Backoff::After(Duration::from_millis(100)))
        .reaper(false)
        .build()
        .unwrap();
    let stats = worker.stats();
    let shutdown = worker.shutdown_token();
    let task = tokio::spawn(worker.run(|lease, _ctx| async move {
        if lease.id.as_bytes().starts_with(b"flaky") && lease.attempts == 1 {
            return Err(JobError::retry("fails once"));
        }
        Ok(())
    }));
    // Far below the 30 s poll: without waking on the due time, this would time out.
    Wait::for_("both jobs acked")
        .within(Duration::from_secs(10))
        .until(async || stats.get().acked == 2)
        .await;
    assert_eq!(stats.get().retried, 1);
    assert_eq!(status(&queue, "later").await.as_deref(), Some("done"));
    let flaky = queue.job("flaky").await.unwrap().unwrap();
    assert_eq!((flaky.status.as_deref(), flaky.attempts), (Some("done"), 2));

    // And a job failed while the worker's other slot already waits idle with nothing
    // delayed: the fail itself wakes the wait.
    queue
        .enqueue(NewJob::new("flaky2").id("flaky2"))
        .await
        .unwrap();
    eventually("the third job acked", async || stats.get().acked == 3).await;
    assert_eq!(stats.get().retried, 2);
    shutdown.cancel();
    let end = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the worker stops")
        .unwrap();
    assert_eq!(end.reaped, 0, "the reaper was off");
}
