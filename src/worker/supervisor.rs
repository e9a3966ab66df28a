//! The per-job supervisor: `jobqueue __supervise PARENT PROGRAM [ARGS…]`, which the exec
//! worker starts for each job instead of the command itself, so that no process of the
//! job outlives the worker, even a SIGKILLed one.
//!
//! It runs the command in a process group of its own and:
//! - asks the kernel for a signal when its parent (the worker) dies
//!   (`PR_SET_PDEATHSIG`), and then SIGKILLs the command's whole group;
//! - forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to the group, and turns SIGUSR1 (the
//!   worker's "kill it now") into SIGKILL for the group;
//! - when the command ends, SIGKILLs what it left behind in its group (before reaping
//!   it, so the group id cannot be reused meanwhile), and exits as the command did
//!   (the same code, or the same signal), so the worker judges the job as before;
//! - is a child subreaper: descendants orphaned inside the job are re-parented to it and
//!   reaped, never left as zombies of the worker (which may be PID 1 in a container).
//!
//! Processes that leave the job's process group (`setsid`, `setpgid`) are not covered.
//! It runs before any async runtime starts (see `main.rs`): one thread, signals taken
//! synchronously with `sigwaitinfo`.

use std::ffi::OsString;
use std::path::PathBuf;

/// The hidden first argument that makes `jobqueue` a supervisor.
pub const SUBCOMMAND: &str = "__supervise";

/// The supervisor's exit code when the command could not be started (not found, not
/// executable, a missing `#!` interpreter); its stderr then starts with
/// [`CANNOT_START`]. Both together tell the worker the command never ran, which a
/// command's own exit 127 (`sh: foo: not found`) cannot imitate by accident.
pub(crate) const CANNOT_START_EXIT: i32 = 127;

/// The start of the supervisor's stderr when the command could not be started.
pub(crate) const CANNOT_START: &str = "jobqueue: cannot start ";

/// The start of the supervisor's stderr (with [`CANNOT_START_EXIT`]) when the command
/// could not be started for a reason of this job's own (see [`job_specific`]).
pub(crate) const CANNOT_START_JOB: &str = "jobqueue: cannot start this job's command: ";

/// Whether a failure to start the command belongs to the one job (its environment or
/// arguments too large, E2BIG; a process, memory or file limit reached for the moment,
/// EAGAIN, ENOMEM, EMFILE, ENFILE): that job fails and is retried, and the worker goes
/// on. Anything else (not found, not executable, a missing `#!` interpreter) would hit
/// every job alike, and stops the worker.
pub(crate) fn job_specific(err: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(
            err.raw_os_error(),
            Some(libc::E2BIG | libc::EAGAIN | libc::ENOMEM | libc::EMFILE | libc::ENFILE)
        )
    }
    #[cfg(not(unix))]
    {
        let _ = err;
        false
    }
}

/// Why `program` could not be started: the OS's reason, except that a script whose `#!`
/// interpreter is missing fails as ENOENT ("No such file or directory") like a missing
/// script, so that case names the interpreter instead.
pub(crate) fn describe_start_error(program: &std::path::Path, err: &std::io::Error) -> String {
    if err.kind() == std::io::ErrorKind::NotFound
        && let Some(interpreter) = missing_interpreter(program)
    {
        return format!(
            "its #! interpreter {interpreter} does not exist (the script itself is there)"
        );
    }
    err.to_string()
}

/// The interpreter a script's `#!` line names, when the script exists and that
/// interpreter does not.
fn missing_interpreter(program: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let mut file = std::fs::File::open(program).ok()?;
    let n = file.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let interpreter = line.split_whitespace().next()?;
    (!std::path::Path::new(interpreter).exists()).then(|| interpreter.to_string())
}

/// `program` as exec finds it: a name without `/` on PATH, otherwise as given.
pub(crate) fn resolved(program: &std::path::Path) -> PathBuf {
    if program.to_string_lossy().contains('/') {
        return program.to_path_buf();
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| program.to_path_buf())
}

/// The signal that asks the supervisor to SIGKILL the job's group.
#[cfg(unix)]
pub(crate) const KILL_REQUEST: i32 = libc::SIGUSR1;

/// When this process was started as a supervisor, supervise and return the exit code to
/// end with; `None` otherwise.
pub fn run_if_asked() -> Option<i32> {
    let mut args = std::env::args_os();
    args.next();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(SUBCOMMAND)) {
        return None;
    }
    Some(supervise(args.collect()))
}

#[cfg(not(unix))]
fn supervise(_args: Vec<OsString>) -> i32 {
    eprintln!("jobqueue: {SUBCOMMAND} needs a Unix system");
    127
}

#[cfg(unix)]
fn supervise(args: Vec<OsString>) -> i32 {
    use std::os::unix::process::CommandExt;

    let mut args = args.into_iter();
    let parent: Option<libc::pid_t> = args.next().and_then(|p| p.to_str()?.parse().ok());
    let (Some(parent), Some(program)) = (parent, args.next()) else {
        eprintln!("usage: jobqueue {SUBCOMMAND} PARENT-PID PROGRAM [ARGS...]");
        return 127;
    };
    let program = PathBuf::from(program);
    let signals = [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        KILL_REQUEST,
        libc::SIGCHLD,
    ];
    // SAFETY: plain libc calls on a local signal set; this process has one thread.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in signals {
            libc::sigaddset(&mut set, sig);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        #[cfg(target_os = "linux")]
        {
            libc::prctl(libc::PR_SET_PDEATHSIG, KILL_REQUEST);
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        }
        set
    };
    // SAFETY: getppid has no memory effects.
    if unsafe { libc::getppid() } != parent {
        // The worker died before the death signal was armed: run nothing.
        return 128 + libc::SIGKILL;
    }

    let mut cmd = std::process::Command::new(&program);
    cmd.args(args).process_group(0);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // Should the supervisor itself be SIGKILLed, the command goes with it.
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            use std::io::Write;
            // Written whole or not at all: the worker reads this line to tell a command
            // that never ran from one that failed, and this job's failure from everyone's.
            let _ = if job_specific(&e) {
                writeln!(
                    std::io::stderr(),
                    "{CANNOT_START_JOB}{}: {e}",
                    program.display()
                )
            } else {
                writeln!(
                    std::io::stderr(),
                    "{CANNOT_START}{}: {}",
                    program.display(),
                    describe_start_error(&resolved(&program), &e)
                )
            };
            return CANNOT_START_EXIT;
        }
    };
    let pid = child.id() as libc::pid_t;
    // Reaped below, by waitpid: the handle is not needed.
    drop(child);
    let kill_group = |sig: i32| {
        // SAFETY: kill has no memory effects; a negative pid names the group.
        unsafe { libc::kill(-pid, sig) };
    };

    let status = loop {
        if let Some(status) = ended(pid, &kill_group) {
            break status;
        }
        // SAFETY: the set is valid; a null info pointer is allowed.
        let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
        match sig {
            libc::SIGCHLD | -1 => {}
            s if s == KILL_REQUEST => kill_group(libc::SIGKILL),
            s => kill_group(s),
        }
    };
    // Whatever else was re-parented here and has ended.
    // SAFETY: waitpid with a null status pointer is allowed.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
    exit_like(status)
}

/// The command's wait status once it ended (its group killed first), reaping any other
/// ended children on the way; `None` while it runs.
#[cfg(unix)]
fn ended(pid: libc::pid_t, kill_group: &impl Fn(i32)) -> Option<i32> {
    // SAFETY: waitid and waitpid write only into the locals given.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let peek = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        if peek == 0 && info.si_pid() == pid {
            // Not reaped yet, so the group id is still the command's own.
            kill_group(libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            return Some(status);
        }
        loop {
            let mut status = 0;
            let other = libc::waitpid(-1, &mut status, libc::WNOHANG);
            if other <= 0 {
                return None;
            }
            if other == pid {
                // It ended between the two calls: its group may still hold members.
                kill_group(libc::SIGKILL);
                return Some(status);
            }
        }
    }
}

/// End this process the way the command ended.
#[cfg(unix)]
fn exit_like(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status);
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: plain libc calls; the default action ends this process.
        unsafe {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
        }
        return 128 + sig;
    }
    1
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn only_limits_of_one_job_are_its_own() {
        let os = std::io::Error::from_raw_os_error;
        for errno in [
            libc::E2BIG,
            libc::EAGAIN,
            libc::ENOMEM,
            libc::EMFILE,
            libc::ENFILE,
        ] {
            assert!(job_specific(&os(errno)), "{errno}");
        }
        for errno in [libc::ENOENT, libc::EACCES, libc::ENOEXEC, libc::ETXTBSY] {
            assert!(!job_specific(&os(errno)), "{errno}");
        }
        assert!(!job_specific(&std::io::Error::other("x")));
    }
}
