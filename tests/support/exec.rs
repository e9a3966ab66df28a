//! `jobqueue worker --exec sh -c SCRIPT` as users run it: the real binary as a child
//! process with its log in a file, signalled like a pod's process, and the processes a
//! job's command started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use super::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");

/// One `jobqueue worker --exec sh -c SCRIPT` process; SIGKILLed if the test fails.
pub struct ExecWorker {
    child: Option<Child>,
    log: PathBuf,
}

impl ExecWorker {
    pub fn start(
        server: &RedisServer,
        tag: &str,
        out: &Path,
        flags: &[&str],
        script: &str,
    ) -> Self {
        Self::start_with_env(server, tag, out, flags, &[], script)
    }

    /// [`ExecWorker::start`] with more variables in the worker's environment.
    pub fn start_with_env(
        server: &RedisServer,
        tag: &str,
        out: &Path,
        flags: &[&str],
        env: &[(&str, &str)],
        script: &str,
    ) -> Self {
        let log = out.join(format!("worker-{tag}.log"));
        let child = Command::new(BIN)
            .args(["worker", "--redis", &server.url(), "--tag", tag])
            .args(flags)
            .args(["--exec", "sh", "-c", script])
            .env("OUT", out)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run jobqueue worker");
        ExecWorker {
            child: Some(child),
            log,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// The file its log goes to.
    pub fn log_path(&self) -> PathBuf {
        self.log.clone()
    }

    /// Its exit status, once it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().unwrap().try_wait().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panic with the worker's log if it has exited: for waits that a dead worker would
    /// otherwise only end by their deadline.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
            panic!("the worker exited ({status}):\n{}", self.log());
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory effects.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// SIGTERM, then wait for the process to exit.
    pub async fn terminate(mut self) -> (ExitStatus, String) {
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().unwrap();
        let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap();
        (status, self.log())
    }
}

impl Drop for ExecWorker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every process a job's command started, however deep (zombies count as ended).
pub fn processes_of_job(id: &str) -> Vec<i32> {
    super::procs::with_env("JOBQUEUE_JOB_ID", id)
}
