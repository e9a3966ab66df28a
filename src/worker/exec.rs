//! A handler that runs a command per job, so a worker can be written in any language.
//!
//! The child gets the payload on stdin and `JOBQUEUE_JOB_ID`, `JOBQUEUE_ATTEMPT`,
//! `JOBQUEUE_QUEUE` and `JOBQUEUE_WORKER_ID` in its environment; its stderr passes
//! through to the worker's, its stdout is the job's result (below). Its exit decides the
//! job:
//!
//! | child | job |
//! | --- | --- |
//! | exit 0 | acked |
//! | exit [`DEFAULT_DEAD_EXIT_CODE`] (or the configured code) | dead-lettered |
//! | any other exit, or killed by a signal | failed, retried per the queue's policy |
//!
//! The last [`DEFAULT_STDERR_TAIL`] bytes of its stderr become the job's `last_error`.
//!
//! Its stdout is the job's result: stored with the ack (field `result`, see
//! [`JobContext::set_result`]) when the command exits 0. A stdout longer than the result
//! limit ([`ExecHandler::result_limit`], by default [`crate::queue::MAX_RESULT`], 64 KiB)
//! fails the job with an error that says so, never a result cut short. A line of stdout
//! that begins with [`PROGRESS_PREFIX`] (`jobqueue:progress `), followed by a percent
//! 0..100, a space and a message, reports progress ([`JobContext::progress`]; the message
//! cut to 256 bytes) and is not part of the result; such a line with no valid percent is
//! ignored. With a result limit of 0 stdout passes through to the worker's stdout, as
//! before results existed, and no progress is read.
//! The worker's own credentials ([`CREDENTIAL_VARS`]) are removed from the child's
//! environment unless [`ExecHandler::keep_credentials`] says otherwise.
//!
//! A command that cannot be started for a reason of its job's own (its id too large for
//! the environment, a process or memory limit reached: see [`super::supervisor`]) fails
//! that job for a retry; one that cannot be started at all stops the worker (see
//! [`ExecHandler::stop_on_start_failure`]).
//!
//! The child runs in a process group of its own: when the worker shuts down the group
//! gets SIGTERM, and SIGKILL when the shutdown deadline passes; when the job's lease is
//! lost it gets SIGTERM, then SIGKILL after [`ExecHandler::kill_grace`]. A command that
//! stops after the shutdown's SIGTERM other than with exit 0 or the dead-letter code is
//! [`JobError::Interrupted`]: its job is released, the attempt not charged.
//!
//! With [`ExecHandler::supervisor`] (what `jobqueue worker --exec` uses) each command runs
//! under a per-job supervisor ([`super::supervisor`]) that SIGKILLs the command's whole
//! process group when the worker dies, even by SIGKILL, and when the command ends. Without
//! one, on Linux only the direct child is killed when the worker dies. [`reap_strays`]
//! reaps the zombies a worker running as PID 1 inherits.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{JobContext, JobError};
use crate::queue::{JobId, Lease};

/// The exit code that dead-letters a job instead of retrying it.
pub const DEFAULT_DEAD_EXIT_CODE: u8 = 99;

/// How many bytes at the end of the child's stderr are kept for `last_error`.
pub const DEFAULT_STDERR_TAIL: usize = 2048;

/// The variables of the worker's environment that carry its own credentials (the
/// Redis URL, which may hold a password, the passwords and the TLS client identity):
/// the command does not get them unless [`ExecHandler::keep_credentials`] is set.
pub const CREDENTIAL_VARS: &[&str] = &[
    "JOBQUEUE_REDIS_URL",
    "JOBQUEUE_REDIS_PASSWORD",
    "JOBQUEUE_SENTINEL_PASSWORD",
    "JOBQUEUE_USERNAME",
    "JOBQUEUE_TLS_CERT",
    "JOBQUEUE_TLS_KEY",
];

/// Runs one command per job.
#[derive(Debug, Clone)]
pub struct ExecHandler {
    program: PathBuf,
    args: Vec<OsString>,
    dead_exit_code: u8,
    stderr_tail: usize,
    kill_grace: Duration,
    forward_stderr: bool,
    supervisor: Option<PathBuf>,
    keep_credentials: bool,
    stop_on_start_failure: Option<CancellationToken>,
    start_failure: Arc<OnceLock<String>>,
    result_limit: usize,
}

/// A stdout line that begins with this reports the job's progress: `jobqueue:progress 40
/// copying files`.
pub const PROGRESS_PREFIX: &str = "jobqueue:progress ";

impl ExecHandler {
    pub fn new(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        ExecHandler {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            dead_exit_code: DEFAULT_DEAD_EXIT_CODE,
            stderr_tail: DEFAULT_STDERR_TAIL,
            kill_grace: Duration::from_secs(5),
            forward_stderr: true,
            supervisor: None,
            keep_credentials: false,
            stop_on_start_failure: None,
            start_failure: Arc::default(),
            result_limit: crate::queue::MAX_RESULT,
        }
    }

    /// The most bytes of stdout stored as the job's result (1 to
    /// [`crate::queue::MAX_RESULT`]; more fails the job); 0 stores none and passes stdout
    /// through to the worker's.
    pub fn result_limit(mut self, bytes: usize) -> Self {
        self.result_limit = bytes.min(crate::queue::MAX_RESULT);
        self
    }

    /// Run each command under `program __supervise` (the `jobqueue` binary: see
    /// [`super::supervisor`]), so that no process of the job survives the worker.
    pub fn supervisor(mut self, program: Option<PathBuf>) -> Self {
        self.supervisor = program;
        self
    }

    /// Pass the worker's credentials ([`CREDENTIAL_VARS`]) on to the command (default
    /// false: they are removed from its environment, so job code cannot reach Redis as
    /// the worker).
    pub fn keep_credentials(mut self, keep: bool) -> Self {
        self.keep_credentials = keep;
        self
    }

    /// When the command cannot be started (not found, not executable, a missing `#!`
    /// interpreter), cancel `shutdown` (the worker's shutdown token) and hand the job
    /// back uncharged, instead of failing every job until each is dead-lettered; the
    /// reason is then [`ExecHandler::start_failure`]. Without it such a job fails with
    /// [`JobError::Retry`].
    pub fn stop_on_start_failure(mut self, shutdown: CancellationToken) -> Self {
        self.stop_on_start_failure = Some(shutdown);
        self
    }

    /// Why the command could not be started, once that happened (see
    /// [`ExecHandler::stop_on_start_failure`]).
    pub fn start_failure(&self) -> Option<&str> {
        self.start_failure.get().map(String::as_str)
    }

    /// The command could not be started for this job alone (see
    /// [`super::supervisor`]): the job fails for a retry, the worker goes on.
    fn cannot_start_job(&self, lease: &Lease, reason: String) -> JobError {
        warn!(job = %lease.id, reason = %reason, "cannot start the command for this job");
        JobError::Retry(format!("cannot start this job's command: {reason}"))
    }

    /// The command could not be started: with [`ExecHandler::stop_on_start_failure`],
    /// stop the worker and release the job; otherwise fail it for a retry.
    fn cannot_start(&self, reason: String) -> JobError {
        match &self.stop_on_start_failure {
            Some(shutdown) => {
                let _ = self.start_failure.set(reason.clone());
                // Cancelled before the job's outcome reaches the runtime, which then
                // releases an interrupted job without charging the attempt.
                shutdown.cancel();
                JobError::Interrupted(reason)
            }
            None => JobError::Retry(reason),
        }
    }

    /// The exit code that dead-letters the job (not 0).
    pub fn dead_exit_code(mut self, code: u8) -> Self {
        self.dead_exit_code = code;
        self
    }

    /// How many bytes of the end of stderr go into `last_error`.
    pub fn stderr_tail(mut self, bytes: usize) -> Self {
        self.stderr_tail = bytes;
        self
    }

    /// After a lease is lost, how long the child has between SIGTERM and SIGKILL.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// Copy the child's stderr to the worker's (default true).
    pub fn forward_stderr(mut self, on: bool) -> Self {
        self.forward_stderr = on;
        self
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Check that the program can be run at all, so a typo fails at start-up instead of
    /// failing every job.
    pub fn check(&self) -> Result<PathBuf, String> {
        resolve_program(&self.program, std::env::var_os("PATH").as_deref())
    }

    /// Run the command for one job.
    pub async fn run(&self, lease: Lease, ctx: JobContext) -> Result<(), JobError> {
        let job_id = job_id_env(&lease.id)?;
        let mut cmd = match &self.supervisor {
            Some(supervisor) => {
                let mut cmd = Command::new(supervisor);
                cmd.arg(super::supervisor::SUBCOMMAND)
                    .arg(std::process::id().to_string())
                    .arg(&self.program);
                cmd
            }
            None => Command::new(&self.program),
        };
        cmd.args(&self.args)
            .env("JOBQUEUE_JOB_ID", job_id)
            .env("JOBQUEUE_ATTEMPT", lease.attempts.to_string())
            .env("JOBQUEUE_QUEUE", ctx.queue())
            .env("JOBQUEUE_WORKER_ID", ctx.worker_id())
            .stdin(Stdio::piped())
            .stdout(if self.result_limit > 0 {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .stderr(Stdio::piped());
        if !self.keep_credentials {
            for name in CREDENTIAL_VARS {
                cmd.env_remove(name);
            }
        }
        #[cfg(unix)]
        cmd.process_group(0);
        let supervised = self.supervisor.is_some();
        #[cfg(target_os = "linux")]
        if !supervised {
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    // Die with the worker: its lease would expire and the job run elsewhere.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = spawn_registered(&mut cmd).map_err(|e| {
            let program = match &self.supervisor {
                Some(supervisor) => supervisor,
                None => &self.program,
            };
            if super::supervisor::job_specific(&e) {
                let mut reason = format!("{}: {e}", self.program.display());
                let id_len = lease.id.as_bytes().len();
                if id_len > crate::queue::MAX_ID_LEN {
                    reason.push_str(&format!(
                        " (the job's id is {id_len} bytes, over the limit of {} that enqueue \
                         keeps to)",
                        crate::queue::MAX_ID_LEN
                    ));
                }
                return self.cannot_start_job(&lease, reason);
            }
            let reason = if self.supervisor.is_some() {
                e.to_string()
            } else {
                super::supervisor::describe_start_error(
                    &super::supervisor::resolved(&self.program),
                    &e,
                )
            };
            self.cannot_start(format!("cannot start {}: {reason}", program.display()))
        })?;
        let group = ProcessGroup {
            pid: child.get().id(),
            supervised,
        };

        let stdin = child.get().stdin.take();
        let payload = lease.payload.clone();
        let feeder = tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // A child that does not read its input closes the pipe early: not an error.
                let _ = stdin.write_all(&payload).await;
                let _ = stdin.shutdown().await;
            }
        });
        let tail = Arc::new(Mutex::new(Tail::new(self.stderr_tail)));
        let reader = child
            .get()
            .stderr
            .take()
            .map(|stderr| tokio::spawn(read_stderr(stderr, tail.clone(), self.forward_stderr)));
        let stdout = child
            .get()
            .stdout
            .take()
            .map(|stdout| tokio::spawn(read_stdout(stdout, ctx.clone(), self.result_limit)));

        let mut termed = false;
        let mut shutdown_termed = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let status = loop {
            let kill_timer = async {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                status = child.get().wait() => break status,
                _ = ctx.shutdown().cancelled(), if !termed => {
                    // The worker is shutting down: ask the child to finish; the runtime
                    // kills it at the deadline by dropping this future.
                    termed = true;
                    shutdown_termed = true;
                    group.signal(Signal::Term);
                }
                _ = ctx.cancelled(), if kill_at.is_none() => {
                    if !termed {
                        termed = true;
                        group.signal(Signal::Term);
                    }
                    kill_at = Some(tokio::time::Instant::now() + self.kill_grace);
                }
                _ = kill_timer => {
                    group.signal(Signal::Kill);
                    kill_at = Some(tokio::time::Instant::now() + Duration::from_secs(3600));
                }
            }
        };
        if let Some(pid) = group.pid {
            unregister(pid);
        }
        child.take();
        group.disarm();
        feeder.abort();
        if let Some(reader) = reader {
            // A grandchild may hold stderr open: don't wait for it for long.
            let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
        }
        let status =
            status.map_err(|e| JobError::Retry(format!("waiting for the command: {e}")))?;
        let stderr = {
            let tail = tail.lock().unwrap_or_else(|p| p.into_inner());
            if supervised && status.code() == Some(super::supervisor::CANNOT_START_EXIT) {
                if let Some(reason) = tail.whole_text_after(super::supervisor::CANNOT_START_JOB) {
                    return Err(self.cannot_start_job(&lease, reason));
                }
                if let Some(reason) = tail.whole_text_after(super::supervisor::CANNOT_START) {
                    return Err(self.cannot_start(format!("cannot start {reason}")));
                }
            }
            tail.text()
        };
        let result = match judge(status, self.dead_exit_code, &stderr) {
            // Stopped because the worker asked it to: hand the job back uncharged.
            Err(JobError::Retry(text)) if shutdown_termed => Err(JobError::Interrupted(format!(
                "interrupted by the worker's shutdown: {text}"
            ))),
            other => other,
        };
        // stdout is the result of a command that succeeded
        let result = match (result, stdout) {
            (Ok(()), Some(reader)) => {
                match tokio::time::timeout(Duration::from_millis(500), reader).await {
                    Ok(Ok((_, total))) if total > self.result_limit => {
                        Err(JobError::Retry(format!(
                            "the command's stdout is {total} bytes, more than the result limit of {} \
                             (--result-limit)",
                            self.result_limit
                        )))
                    }
                    Ok(Ok((out, _))) => ctx.set_result(out),
                    _ => Err(JobError::Retry(
                        "the command's stdout could not be read to its end".to_string(),
                    )),
                }
            }
            (other, reader) => {
                if let Some(reader) = reader {
                    reader.abort();
                }
                other
            }
        };
        if let Err(err) = &result
            && ctx.lease_lost()
        {
            warn!(job = %lease.id, error = %err, "command ended after its lease was lost");
        }
        result
    }
}

/// `JOBQUEUE_JOB_ID`: on unix the id's bytes as they are (ids written by other clients
/// need not be UTF-8). An id with a NUL byte cannot be an environment value, so no
/// command can ever run its job: it is dead-lettered, with the reason.
fn job_id_env(id: &JobId) -> Result<OsString, JobError> {
    if id.as_bytes().contains(&0) {
        return Err(JobError::Permanent(format!(
            "job id {id} holds a NUL byte, which JOBQUEUE_JOB_ID cannot carry"
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        Ok(OsString::from_vec(id.as_bytes().to_vec()))
    }
    #[cfg(not(unix))]
    Ok(OsString::from(
        String::from_utf8_lossy(id.as_bytes()).into_owned(),
    ))
}

/// What a child's exit means for its job.
fn judge(status: ExitStatus, dead_exit_code: u8, stderr: &str) -> Result<(), JobError> {
    let with_stderr = |head: String| {
        if stderr.is_empty() {
            head
        } else {
            format!("{head}; stderr: {stderr}")
        }
    };
    if status.success() {
        return Ok(());
    }
    if let Some(code) = status.code() {
        if code == i32::from(dead_exit_code) {
            return Err(JobError::Permanent(with_stderr(format!(
                "exit code {code} (dead-letter)"
            ))));
        }
        return Err(JobError::Retry(with_stderr(format!("exit code {code}"))));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return Err(JobError::Retry(with_stderr(format!(
                "killed by signal {sig} ({})",
                signal_name(sig)
            ))));
        }
    }
    Err(JobError::Retry(with_stderr(format!(
        "ended abnormally: {status}"
    ))))
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

async fn read_stderr(
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<Tail>>,
    forward: bool,
) {
    let mut buf = [0u8; 8192];
    let mut out = tokio::io::stderr();
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                tail.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(&buf[..n]);
                if forward {
                    let _ = out.write_all(&buf[..n]).await;
                }
            }
        }
    }
}

/// Read a command's stdout: progress lines go to the job's context, the rest is the
/// result, kept up to `limit` + 1 bytes. Returns the bytes kept and how many there were.
async fn read_stdout(
    stdout: tokio::process::ChildStdout,
    ctx: JobContext,
    limit: usize,
) -> (Vec<u8>, usize) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut out = Vec::new();
    let mut total = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        // A line is read whole only while it could be a progress line; a long one is
        // counted in pieces, so memory stays bounded by the limit.
        match (&mut reader).take(8192).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return (out, total),
            Ok(_) => {}
        }
        if let Some(rest) = line.strip_prefix(PROGRESS_PREFIX.as_bytes()) {
            if let Some((percent, message)) = parse_progress(rest) {
                let _ = ctx.progress(percent, message);
            }
            continue;
        }
        total += line.len();
        let room = (limit + 1).saturating_sub(out.len());
        out.extend_from_slice(&line[..line.len().min(room)]);
    }
}

/// `<percent> <message>` of a progress line (its newline dropped): percent 0..100, the
/// message cut to [`crate::queue::MAX_PROGRESS_TEXT`] bytes at a character boundary.
fn parse_progress(rest: &[u8]) -> Option<(u8, String)> {
    let text = String::from_utf8_lossy(rest);
    let text = text.trim_end_matches(['\n', '\r']);
    let (percent, message) = text.split_once(' ').unwrap_or((text, ""));
    let percent: u8 = percent.parse().ok().filter(|p| *p <= 100)?;
    let mut end = message.len().min(crate::queue::MAX_PROGRESS_TEXT);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Some((percent, message[..end].to_string()))
}

/// The last `max` bytes written to a stream.
#[derive(Debug)]
struct Tail {
    max: usize,
    bytes: VecDeque<u8>,
    dropped: bool,
}

impl Tail {
    fn new(max: usize) -> Tail {
        Tail {
            max,
            bytes: VecDeque::with_capacity(max.min(64 * 1024)),
            dropped: false,
        }
    }

    fn push(&mut self, data: &[u8]) {
        let data = if data.len() > self.max {
            self.dropped = true;
            &data[data.len() - self.max..]
        } else {
            data
        };
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.max);
        if overflow > 0 {
            self.dropped = true;
            self.bytes.drain(..overflow);
        }
        self.bytes.extend(data);
    }

    /// The whole stream as text after `prefix` when it starts with it (nothing dropped).
    fn whole_text_after(&self, prefix: &str) -> Option<String> {
        if self.dropped {
            return None;
        }
        let all: Vec<u8> = self.bytes.iter().copied().collect();
        let rest = all.strip_prefix(prefix.as_bytes())?;
        Some(String::from_utf8_lossy(rest).trim().to_string())
    }

    /// The tail as text: invalid UTF-8 (a character cut in two) replaced, trimmed, and
    /// marked with `…` when the start was dropped.
    fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        let text = String::from_utf8_lossy(&all);
        let text = text.trim();
        if self.dropped && !text.is_empty() {
            format!("…{text}")
        } else {
            text.to_string()
        }
    }
}

enum Signal {
    Term,
    Kill,
}

/// The child's process group. Signalled while the child is alive (not yet reaped, so the
/// group id cannot have been reused); SIGKILLed when dropped before the child ended.
/// A supervised child is alone in its group: it forwards SIGTERM to the command's group
/// and turns [`super::supervisor::KILL_REQUEST`] into SIGKILL for it.
struct ProcessGroup {
    pid: Option<u32>,
    supervised: bool,
}

impl ProcessGroup {
    fn signal(&self, signal: Signal) {
        #[cfg(unix)]
        if let Some(pid) = self.pid {
            let sig = match signal {
                Signal::Term => libc::SIGTERM,
                Signal::Kill if self.supervised => super::supervisor::KILL_REQUEST,
                Signal::Kill => libc::SIGKILL,
            };
            // SAFETY: kill has no memory effects; a negative pid names the group.
            unsafe {
                libc::kill(-(pid as libc::pid_t), sig);
            }
        }
        #[cfg(not(unix))]
        let _ = signal;
    }

    /// The child ended and was reaped: its group id may be reused, never signal it again.
    fn disarm(mut self) {
        self.pid = None;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // Dropped before the child ended: the job was abandoned (shutdown deadline).
        self.signal(Signal::Kill);
    }
}

/// The children this process spawned and waits for itself: [`reap_strays`] leaves them
/// alone. Locked across each spawn, so a child that ends at once is already listed.
static CHILDREN: Mutex<std::collections::BTreeSet<u32>> =
    Mutex::new(std::collections::BTreeSet::new());

fn children() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<u32>> {
    CHILDREN.lock().unwrap_or_else(|p| p.into_inner())
}

/// A spawned child, waited for in the background if the job's future is dropped first
/// (the shutdown deadline), so that it never becomes a zombie nor a stray.
struct Waited(Option<Child>);

impl Waited {
    fn get(&mut self) -> &mut Child {
        self.0.as_mut().expect("taken only after the wait")
    }

    fn take(&mut self) -> Option<Child> {
        self.0.take()
    }
}

impl Drop for Waited {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let pid = child.id();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = child.wait().await;
                    if let Some(pid) = pid {
                        unregister(pid);
                    }
                });
            }
        }
    }
}

fn spawn_registered(cmd: &mut Command) -> std::io::Result<Waited> {
    let mut listed = children();
    let child = cmd.spawn()?;
    if let Some(pid) = child.id() {
        listed.insert(pid);
    }
    Ok(Waited(Some(child)))
}

fn unregister(pid: u32) {
    children().remove(&pid);
}

/// Reap this process's ended children that it did not spawn: processes re-parented to
/// it because it is PID 1 (in a container) or a subreaper. Returns how many. Children
/// spawned by [`ExecHandler::run`] are left to their own wait.
pub fn reap_strays() -> usize {
    #[cfg(target_os = "linux")]
    {
        let me = std::process::id();
        let listed = children();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return 0;
        };
        let mut reaped = 0;
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if listed.contains(&pid) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: the comm may hold spaces and parentheses.
            let mut rest = stat
                .rsplit_once(')')
                .map(|(_, r)| r)
                .unwrap_or("")
                .split_whitespace();
            let (state, ppid) = (rest.next(), rest.next().and_then(|p| p.parse::<u32>().ok()));
            if state == Some("Z") && ppid == Some(me) {
                // SAFETY: waitpid on a zombie child of ours; the status is not needed.
                if unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) }
                    > 0
                {
                    reaped += 1;
                }
            }
        }
        if reaped > 0 {
            debug!(reaped, "reaped re-parented processes");
        }
        reaped
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// Find `program` as the OS would: a path with a `/` as given, otherwise on `PATH`.
fn resolve_program(program: &Path, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
    let shown = program.display();
    if program.as_os_str().is_empty() {
        return Err("the command is empty".into());
    }
    if program.components().count() > 1 || program.to_string_lossy().contains('/') {
        return if is_executable(program) {
            Ok(program.to_path_buf())
        } else if program.exists() {
            Err(format!("{shown} is not an executable file"))
        } else {
            Err(format!("{shown} does not exist"))
        };
    }
    for dir in std::env::split_paths(path.unwrap_or_default()) {
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(format!("{shown} was not found on PATH"))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_gives_a_percent_and_a_bounded_message() {
        assert_eq!(
            parse_progress(b"40 copying files\n"),
            Some((40, "copying files".to_string()))
        );
        assert_eq!(parse_progress(b"100\r\n"), Some((100, String::new())));
        assert_eq!(parse_progress(b"101 too far\n"), None);
        assert_eq!(parse_progress(b"-1 x\n"), None);
        assert_eq!(parse_progress(b"forty x\n"), None);
        // cut to 256 bytes, at a character boundary
        let long = format!("5 {}", "é".repeat(200));
        let (p, m) = parse_progress(long.as_bytes()).unwrap();
        assert_eq!(p, 5);
        assert_eq!(m.len(), 256);
        assert!(m.chars().all(|c| c == 'é'));
    }

    #[test]
    fn the_job_id_reaches_the_child_as_its_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let id = JobId::from(b"a\xff b".to_vec());
        assert_eq!(job_id_env(&id).unwrap().as_bytes(), b"a\xff b");
        let err = job_id_env(&JobId::from("a\0b")).unwrap_err();
        assert!(err.is_permanent(), "no retry can pass it");
        assert!(
            err.message().contains("job id hex:610062 holds a NUL byte"),
            "{err}"
        );
    }

    #[cfg(unix)]
    fn exited(code: i32) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus::from_raw(code << 8)
    }

    #[cfg(unix)]
    fn signalled(sig: i32) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus::from_raw(sig)
    }

    #[cfg(unix)]
    #[test]
    fn exits_map_to_ack_dead_and_retry() {
        assert_eq!(judge(exited(0), 99, "noise"), Ok(()));
        assert_eq!(
            judge(exited(99), 99, "bad payload"),
            Err(JobError::Permanent(
                "exit code 99 (dead-letter); stderr: bad payload".into()
            ))
        );
        assert_eq!(
            judge(exited(3), 99, ""),
            Err(JobError::Retry("exit code 3".into()))
        );
        assert_eq!(
            judge(exited(99), 42, ""),
            Err(JobError::Retry("exit code 99".into()))
        );
        assert_eq!(
            judge(signalled(libc::SIGKILL), 99, "half done"),
            Err(JobError::Retry(
                "killed by signal 9 (SIGKILL); stderr: half done".into()
            ))
        );
    }

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail::new(8);
        t.push(b"hello ");
        assert_eq!(t.text(), "hello");
        t.push(b"world");
        assert_eq!(t.text(), "…lo world");
        t.push(b"0123456789abcdef");
        assert_eq!(t.text(), "…89abcdef");
        let mut t = Tail::new(4);
        t.push("aé".as_bytes());
        t.push("éb".as_bytes());
        // A character cut at the start is replaced, not an error.
        assert!(t.text().ends_with("éb"), "{}", t.text());
    }

    #[cfg(unix)]
    #[test]
    fn programs_are_resolved_like_the_shell_does() {
        let path = std::ffi::OsString::from("/nonexistent:/bin:/usr/bin");
        assert!(resolve_program(Path::new("sh"), Some(&path)).is_ok());
        let err = resolve_program(Path::new("no-such-program-xyz"), Some(&path)).unwrap_err();
        assert!(err.contains("not found on PATH"), "{err}");
        let err = resolve_program(Path::new("./no/such/file"), Some(&path)).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.txt");
        std::fs::write(&file, "x").unwrap();
        let err = resolve_program(&file, Some(&path)).unwrap_err();
        assert!(err.contains("not an executable"), "{err}");
    }
}
