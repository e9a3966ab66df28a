//! Worker processes (`jobqueue worker --exec`, the handler of [`runs::command`]) on one
//! queue, SIGKILLed, stopped and restarted at will, each with its own log file: the
//! chaos scenarios' workers and the schedule tests' firers.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rand::Rng;

use super::runs::{self, Work};

const BIN: &str = env!("CARGO_BIN_EXE_jobqueue");
/// The queue's hash tag unless [`Fleet::tag`] names another.
pub const TAG: &str = "chaos";
/// The workers' leases unless `extra` holds `--visibility`.
pub const VISIBILITY: &str = "1s";

/// Worker processes, killed and restarted at will.
pub struct Fleet {
    url: String,
    cluster: bool,
    dir: PathBuf,
    /// The queue's hash tag (`--tag`; prefix `jq`).
    pub tag: String,
    /// The workers' `RUST_LOG`.
    log_level: String,
    pub procs: Vec<Option<Child>>,
    /// The worker id of each slot's current process.
    pub ids: Vec<String>,
    generation: usize,
    /// Names the log files (`NAME-i.log`) and the worker ids (`NAMEi-gN`): unique per
    /// scenario, since scenarios run at once and processes are found by worker id.
    name: &'static str,
    /// The handler's command (tests/support/runs.rs).
    command: Vec<String>,
    extra: Vec<String>,
}

impl Fleet {
    pub fn start(url: &str, cluster: bool, dir: &Path, count: usize) -> Fleet {
        Fleet::start_with(url, cluster, dir, count, "w", Work::Sleep, &[])
    }

    pub fn start_with(
        url: &str,
        cluster: bool,
        dir: &Path,
        count: usize,
        name: &'static str,
        work: Work,
        extra: &[&str],
    ) -> Fleet {
        Fleet::configured(url, cluster, dir, name, work, extra).started(count)
    }

    /// A fleet of no process yet, on the queue [`TAG`] with `RUST_LOG=warn`: change
    /// either with [`Fleet::tag`] and [`Fleet::log_level`], then start it with
    /// [`Fleet::started`].
    pub fn configured(
        url: &str,
        cluster: bool,
        dir: &Path,
        name: &'static str,
        work: Work,
        extra: &[&str],
    ) -> Fleet {
        Fleet {
            url: url.to_string(),
            cluster,
            dir: dir.to_path_buf(),
            tag: TAG.to_string(),
            log_level: "warn".to_string(),
            procs: Vec::new(),
            ids: Vec::new(),
            generation: 0,
            name,
            command: runs::command(work),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The queue of hash tag `tag` instead.
    pub fn tag(mut self, tag: &str) -> Fleet {
        self.tag = tag.to_string();
        self
    }

    /// The workers' `RUST_LOG` (their log goes to `NAME-i.log`).
    pub fn log_level(mut self, filter: &str) -> Fleet {
        self.log_level = filter.to_string();
        self
    }

    /// `count` worker processes started.
    pub fn started(mut self, count: usize) -> Fleet {
        for _ in 0..count {
            self.grow();
        }
        self
    }

    /// Start every slot with no running process again (after [`Fleet::kill_all`]).
    pub fn restart_stopped(&mut self) {
        for i in 0..self.procs.len() {
            if self.procs[i].is_none() {
                self.spawn(i);
            }
        }
    }

    /// SIGKILL every running worker.
    pub fn kill_all(&mut self) {
        for i in 0..self.procs.len() {
            if let Some(mut child) = self.procs[i].take() {
                runs::note_kill(&self.dir, &self.ids[i]);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    pub fn spawn(&mut self, i: usize) {
        self.generation += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(self.log_name(i)))
            .unwrap();
        // The test process's pid keeps the ids (and the processes found by them) apart
        // from those of another run of the same scenario on the machine.
        self.ids[i] = format!(
            "{}{i}-g{}-p{}",
            self.name,
            self.generation,
            std::process::id()
        );
        let mut cmd = Command::new(BIN);
        cmd.arg("worker");
        // A scenario behind Sentinel names the Sentinels instead (both are refused).
        if !self.extra.iter().any(|a| a == "--sentinel") {
            cmd.args(["--redis", &self.url]);
        }
        cmd.args(["--tag", &self.tag])
            .args(["--concurrency", "4", "--shutdown-timeout", "3s"])
            .args(["--worker-id", &self.ids[i]])
            .args(&self.extra);
        // Leases of VISIBILITY unless the scenario asks for its own.
        if !self.extra.iter().any(|a| a == "--visibility") {
            cmd.args(["--visibility", VISIBILITY]);
        }
        // A lost lease's command gets SIGTERM, then SIGKILL a grace later: GRACE unless
        // the scenario asks for less.
        if !self.extra.iter().any(|a| a == "--kill-grace") {
            cmd.args(["--kill-grace", "1s"]);
        }
        if self.cluster {
            cmd.arg("--cluster");
        }
        let child = cmd
            .arg("--exec")
            .args(&self.command)
            .env(runs::RUNS_ENV, &self.dir)
            .env("RUST_LOG", &self.log_level)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run jobqueue worker");
        self.procs[i] = Some(child);
    }

    pub fn log_name(&self, i: usize) -> String {
        if self.name == "w" {
            format!("worker-{i}.log")
        } else {
            format!("{}-{i}.log", self.name)
        }
    }

    /// SIGKILL one running worker; returns its slot.
    pub fn kill_random(&mut self) -> Option<usize> {
        let running: Vec<usize> = (0..self.procs.len())
            .filter(|&i| self.procs[i].is_some())
            .collect();
        if running.is_empty() {
            return None;
        }
        let i = running[rand::rng().random_range(0..running.len())];
        let mut child = self.procs[i].take().unwrap();
        runs::note_kill(&self.dir, &self.ids[i]);
        let _ = child.kill();
        let _ = child.wait();
        Some(i)
    }

    /// Workers that exited without being killed by the test.
    pub fn crashed(&mut self) -> Vec<String> {
        self.procs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, p)| {
                let status = p.as_mut()?.try_wait().ok()??;
                Some(format!("worker {i} exited: {status}"))
            })
            .collect()
    }

    /// SIGTERM everyone and wait; returns how many exited cleanly.
    pub fn stop(&mut self) -> usize {
        let mut clean = 0;
        for child in self.procs.iter_mut().flatten() {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        for mut child in self.procs.iter_mut().filter_map(Option::take) {
            if child.wait().map(|s| s.success()).unwrap_or(false) {
                clean += 1;
            }
        }
        clean
    }

    /// Worker processes alive (as far as the test knows).
    pub fn running(&self) -> usize {
        self.procs.iter().filter(|p| p.is_some()).count()
    }

    /// One more worker process, as a new pod would be.
    pub fn grow(&mut self) {
        self.procs.push(None);
        self.ids.push(String::new());
        self.spawn(self.procs.len() - 1);
    }

    /// SIGTERM the newest running worker and wait for it, as a scale-down would.
    pub fn shrink(&mut self) {
        if let Some(slot) = self.procs.iter_mut().rev().find(|p| p.is_some()) {
            let mut child = slot.take().unwrap();
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    pub fn logs(&self) -> String {
        (0..self.procs.len())
            .map(|i| std::fs::read_to_string(self.dir.join(self.log_name(i))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for mut child in self.procs.iter_mut().filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
