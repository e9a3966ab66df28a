//! What the binaries write to stderr when it is a file, as under systemd, Kubernetes or
//! `2>log`: plain text without terminal colour codes, and settings shown as the values
//! in effect.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// A `jobqueue worker` whose stderr goes to a file; SIGKILLed if the test fails.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn start(server: &RedisServer, tag: &str, flags: &[&str]) -> Worker {
        Worker::start_exec(server, tag, flags, &["true"])
    }

    /// A worker running `exec` for each job.
    fn start_exec(server: &RedisServer, tag: &str, flags: &[&str], exec: &[&str]) -> Worker {
        let log = server.dir.path().join(format!("worker-{tag}.log"));
        let child = Command::new(BIN)
            .args(["worker", "--redis", &server.url(), "--tag", tag])
            .args(flags)
            .arg("--exec")
            .args(exec)
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run jobqueue worker");
        Worker { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once it holds `needle`; fails after 30 s.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(Instant::now() < deadline, "no {needle:?} in:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, wait for the exit, and return the whole log.
    fn stop(mut self) -> String {
        // SAFETY: kill has no memory effects.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) },
            0
        );
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}: {}", self.log());
        self.log()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn worker_logs_to_a_file_carry_no_colour_codes() {
    let server = RedisServer::start();
    let worker = Worker::start(&server, "plain", &[]);
    worker.wait_for("worker started");
    let log = worker.stop();
    assert!(log.contains("worker stopped"), "{log}");
    assert!(!log.contains("\x1b["), "escape codes in:\n{log:?}");
}

#[test]
fn the_start_line_shows_the_visibility_in_effect() {
    let server = RedisServer::start();
    let configured = Command::new(BIN)
        .args([
            "configure",
            "--redis",
            &server.url(),
            "--tag",
            "vis",
            "--create",
        ])
        .args(["--visibility-timeout", "45s"])
        .output()
        .unwrap();
    assert!(configured.status.success(), "{configured:?}");

    // Without --visibility: the queue's setting.
    let worker = Worker::start(&server, "vis", &[]);
    let log = worker.wait_for("worker started");
    let start = log.lines().find(|l| l.contains("worker started")).unwrap();
    assert!(start.contains(" visibility=45s"), "{start}");
    worker.stop();

    // With --visibility: the flag, formatted as it is written.
    let worker = Worker::start(&server, "vis", &["--visibility", "90s"]);
    let log = worker.wait_for("worker started");
    let start = log.lines().find(|l| l.contains("worker started")).unwrap();
    assert!(start.contains(" visibility=1m30s"), "{start}");
    let log = worker.stop();
    let stopping = log.lines().find(|l| l.contains("no more claims")).unwrap();
    assert!(stopping.contains(" deadline=30s"), "{stopping}");
}

/// Enqueue one job with the CLI.
fn enqueue(server: &RedisServer, tag: &str, payload: &str) {
    let out = Command::new(BIN)
        .args(["enqueue", "--redis", &server.url(), "--tag", tag, payload])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// A failed job's stderr tail (several lines) is one field of one log line, its line
/// breaks escaped.
#[test]
fn a_failed_jobs_stderr_is_logged_on_one_line() {
    let server = RedisServer::start();
    enqueue(&server, "ml", "x");
    let script = "printf 'first line\\nsecond line\\n' >&2; exit 1";
    let worker = Worker::start_exec(&server, "ml", &[], &["sh", "-c", script]);
    let log = worker.wait_for("job failed; will retry");
    let line = log
        .lines()
        .find(|l| l.contains("job failed; will retry"))
        .unwrap();
    assert!(
        line.contains("first line\\nsecond line"),
        "not one line: {line:?} in\n{log}"
    );
    // (The command's stderr itself is passed through as it was written.)
    worker.stop();
}

/// `--log-format json`: every line a JSON object.
#[test]
fn worker_log_format_json_writes_json_lines() {
    let server = RedisServer::start();
    let worker = Worker::start(&server, "js", &["--log-format", "json"]);
    worker.wait_for("worker started");
    let log = worker.stop();
    // (Notes printed before the logger starts, as by every command, are plain text.)
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.contains("worker st"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(events.len(), 2, "{log}");
    assert_eq!(events[0]["message"], "worker started", "{log}");
}

/// Unknown log formats and levels are refused at start (exit 2), naming the flag, from
/// the flag or from its variable.
#[test]
fn unknown_log_formats_and_levels_are_refused() {
    let closed = format!("redis://127.0.0.1:{}", support::redis::free_port());
    let run = |flags: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--redis", &closed, "--tag", "lg"])
            .args(flags)
            .args(["--exec", "true"])
            .env_remove("JOBQUEUE_LOG_FORMAT")
            .env_remove("JOBQUEUE_LOG_LEVEL")
            .env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[], &[("JOBQUEUE_LOG_FORMAT", "yaml")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("'yaml'") && err.contains("--log-format"),
        "{err}"
    );
    let (code, err) = run(&["--log-format", "yaml"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("possible values: text, json"), "{err}");
    let (code, err) = run(&[], &[("JOBQUEUE_LOG_LEVEL", "loud")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--log-level") && err.contains("\"loud\" is not a log level"),
        "{err}"
    );
}
