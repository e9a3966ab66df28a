//! Outcomes scenarios (progress, results, waiting, events): a `jobqueue worker --exec`
//! process killed with the test, the CLI run to its end, and a library worker whose
//! handler reports progress and a result.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use jobqueue::queue::Queue;
use jobqueue::worker::{JobContext, Worker};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// `jobqueue worker --exec sh -c SCRIPT` on queue `tag`; SIGKILLed when dropped.
pub struct ExecProcess {
    child: Child,
    log: std::path::PathBuf,
}

impl ExecProcess {
    pub fn start(url: &str, tag: &str, dir: &Path, flags: &[&str], script: &str) -> ExecProcess {
        let log = dir.join(format!("worker-{tag}.log"));
        let child = Command::new(BIN)
            .args(["worker", "--redis", url, "--tag", tag])
            .args(flags)
            .args(["--exec", "sh", "-c", script])
            .env("OUT", dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run jobqueue worker");
        ExecProcess { child, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ExecProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run the CLI to its end.
pub fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run jobqueue")
}

/// The CLI started, to be waited for later (`wait_with_output`).
pub fn cli_spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run jobqueue")
}

/// A library worker on `queue` whose handler reports progress 50 and stores the payload
/// with `done:` before it as the result (for the payload `big`, a result one byte over
/// the bound, whose refusal it ignores, succeeding); stopped when dropped.
pub struct LibraryWorker {
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl LibraryWorker {
    pub fn start(queue: &Queue) -> LibraryWorker {
        let shutdown = CancellationToken::new();
        let worker = Worker::builder(queue.clone())
            .handle_signals(false)
            .worker_id("outcomes-worker")
            .shutdown_token(shutdown.clone())
            .poll_interval(Duration::from_millis(100))
            .build()
            .unwrap();
        let task = tokio::spawn(async move {
            worker
                .run(|lease, ctx: JobContext| async move {
                    ctx.progress(50, "half way")?;
                    if &lease.payload[..] == b"big" {
                        let _ = ctx.set_result(vec![b'x'; jobqueue::queue::MAX_RESULT + 1]);
                        return Ok(());
                    }
                    let mut result = b"done:".to_vec();
                    result.extend_from_slice(&lease.payload);
                    ctx.set_result(result)?;
                    Ok(())
                })
                .await;
        });
        LibraryWorker {
            shutdown,
            task: Some(task),
        }
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LibraryWorker {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
