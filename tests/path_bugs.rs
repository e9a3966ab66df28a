//! Bugs found by using jobqueue without Kubernetes, as a new user would (issue 17): each
//! test failed before its fix.

mod support;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use jobqueue::queue::{NewJob, QueueSettings};
use support::eventually::{Wait, eventually};
use support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

fn jobqueue(server: &RedisServer, tag: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .args(["--redis", &server.url(), "--tag", tag])
        .stdin(Stdio::null());
    cmd
}

/// The exit status of `child`, waiting up to `within`.
async fn exited(child: &mut Child, within: Duration) -> ExitStatus {
    Wait::for_("the process to exit")
        .within(within)
        .until(async || child.try_wait().unwrap())
        .await
}

/// Kills the worker if a test fails before it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `jobqueue worker --exec PROGRAM` until it exits by itself (killed after 30 s): its exit
/// code and stderr.
async fn run_worker(
    server: &RedisServer,
    tag: &str,
    program: &str,
    dir: &std::path::Path,
) -> (Option<i32>, String) {
    let log = dir.join("worker.log");
    let child = jobqueue(server, tag, &["worker"])
        .args(["--exec", program])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut worker = Killed(child);
    let status = exited(&mut worker.0, Duration::from_secs(30)).await;
    (status.code(), std::fs::read_to_string(&log).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_stderr_is_closed_keeps_working_and_stops_on_sigterm() {
    let server = RedisServer::start();
    let queue = server.queue("logs").await;
    let mut child = jobqueue(&server, "logs", &["worker"])
        .args(["--exec", "sh", "-c", "echo boom >&2; exit 99"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `… 2>&1 | head -1` after head has exited: every log line meets a closed pipe.
    drop(child.stderr.take());
    let mut worker = Killed(child);
    for i in 0..3 {
        queue
            .enqueue(NewJob::new("p").id(format!("j{i}")))
            .await
            .unwrap();
    }
    eventually(
        "every job dead-lettered, none left in processing",
        async || {
            let s = queue.stats().await.unwrap();
            s.dead == 3 && s.processing == 0
        },
    )
    .await;
    // SAFETY: kill has no memory effects.
    assert_eq!(
        unsafe { libc::kill(worker.0.id() as i32, libc::SIGTERM) },
        0
    );
    let status = exited(&mut worker.0, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// Runs `args` with its stdout a pipe closed before anything is read.
async fn with_stdout_closed(server: &RedisServer, tag: &str, args: &[&str]) -> (i32, String) {
    let mut child = jobqueue(server, tag, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_peek_and_dead_ls_quietly() {
    let server = RedisServer::start();
    let queue = server.queue("pipe").await;
    let jobs = (0..200).map(|i| NewJob::new(vec![b'x'; 200]).id(format!("p{i}")));
    queue.enqueue_many(jobs.collect()).await.unwrap();
    for _ in 0..50 {
        let lease = queue.claim_one("w", None).await.unwrap().unwrap();
        queue
            .fail(
                &lease,
                "boom",
                jobqueue::queue::FailMode::Dead,
                Default::default(),
            )
            .await
            .unwrap();
    }
    for args in [
        &["peek", "--count", "150"][..],
        &["dead", "ls", "--json", "--limit", "50"][..],
    ] {
        let (code, stderr) = with_stdout_closed(&server, "pipe", args).await;
        assert_eq!((code, stderr.as_str()), (0, ""), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_and_extends_of_unknown_ids_are_not_counted_stale() {
    let server = RedisServer::start();
    let queue = server.queue("typo").await;
    queue.enqueue(NewJob::new("p").id("real")).await.unwrap();
    let lease = queue.claim_one("w", None).await.unwrap().unwrap();
    assert!(!queue.ack(("reel", lease.token.as_str())).await.unwrap());
    let refs = [("nope", "x").into()];
    assert_eq!(
        queue
            .extend_many(&refs, Some(Duration::from_secs(5)))
            .await
            .unwrap(),
        vec![None]
    );
    assert!(!queue.ack(("real", "wrong-token")).await.unwrap());
    let mut conn = server.conn();
    let counters: (Option<u64>, Option<u64>) = redis::cmd("HMGET")
        .arg(&queue.keys().stats)
        .arg("stale")
        .arg("unknown")
        .query(&mut conn)
        .unwrap();
    assert_eq!(counters, (Some(1), Some(2)), "stale, unknown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_start_stops_the_worker_and_charges_nothing() {
    let server = RedisServer::start();
    let queue = server.queue("nostart").await;
    queue
        .configure(&QueueSettings {
            max_attempts: 2,
            ..QueueSettings::default()
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.sh");
    let mut f = std::fs::File::create(&script).unwrap();
    writeln!(f, "#!/no/such/interpreter\necho hi").unwrap();
    drop(f);
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for i in 0..3 {
        queue
            .enqueue(NewJob::new("p").id(format!("j{i}")))
            .await
            .unwrap();
    }
    let (code, stderr) = run_worker(&server, "nostart", script.to_str().unwrap(), dir.path()).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot start") && stderr.contains("job.sh"),
        "{stderr}"
    );
    // The script is there: what is missing is its interpreter, and the message says so.
    assert!(
        stderr.contains("its #! interpreter /no/such/interpreter does not exist"),
        "{stderr}"
    );
    let s = queue.stats().await.unwrap();
    assert_eq!((s.pending, s.processing, s.dead), (3, 0, 0), "{s:?}");
    for i in 0..3 {
        let job = queue.job(format!("j{i}")).await.unwrap().unwrap();
        assert_eq!(job.attempts, 0, "j{i}: {job:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_a_wrong_typed_key_exits_5() {
    let server = RedisServer::start();
    let queue = server.queue("wt").await;
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg(&queue.keys().pending)
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = run_worker(&server, "wt", "true", dir.path()).await;
    assert_eq!(code, Some(5), "{stderr}");
    assert!(stderr.contains("wrong type"), "{stderr}");
}
