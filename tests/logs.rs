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
        let log = server.dir.path().join(format!("worker-{tag}.log"));
        let child = Command::new(BIN)
            .args(["worker", "--redis", &server.url(), "--tag", tag])
            .args(flags)
            .args(["--exec", "true"])
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
