//! The processes of `jobqueue demo`: its private redis-server and the worker processes,
//! started, watched, SIGKILLed mid-job, and all stopped when the demo ends, however it
//! ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::seq::IndexedRandom;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

use super::{MAX_ATTEMPTS, TAG};
use crate::queue::Queue;

/// The processes the demo started; all of them go when the demo ends, however it ends.
pub(super) struct Fleet {
    pub(super) dir: PathBuf,
    redis: Option<(Child, u16)>,
    workers: Vec<Worker>,
    spawned: u64,
}

struct Worker {
    name: String,
    child: Child,
    /// Held open: a worker exits when its stdin closes (when the demo goes away).
    _stdin: Option<ChildStdin>,
}

impl Fleet {
    /// Nothing started yet; `dir` is the scratch directory, removed at the end.
    pub(super) fn new(dir: PathBuf) -> Fleet {
        Fleet {
            dir,
            redis: None,
            workers: Vec::new(),
            spawned: 0,
        }
    }

    /// Worker processes running now.
    pub(super) fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Start redis-server on a free loopback port; retries when another process takes
    /// the port first.
    pub(super) async fn start_redis(&mut self, server: &Path) -> anyhow::Result<u16> {
        let log = self.dir.join("redis.log");
        for _ in 0..10 {
            let port = free_port()?;
            let mut child = Command::new(server)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .arg("--dir")
                .arg(&self.dir)
                .arg("--logfile")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("cannot start {}", server.display()))?;
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(status) = child.try_wait()? {
                    let said = std::fs::read_to_string(&log).unwrap_or_default();
                    if said.contains("Address already in use") {
                        break;
                    }
                    bail!(
                        "redis-server exited at start ({status}): {}",
                        last_line_of(&log)
                    );
                }
                if ping(port).await {
                    self.redis = Some((child, port));
                    return Ok(port);
                }
                if Instant::now() > deadline {
                    bail!(
                        "redis-server did not answer within 10s: {}",
                        last_line_of(&log)
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        bail!("no free loopback port for redis-server")
    }

    pub(super) fn check_redis(&mut self) -> anyhow::Result<()> {
        if let Some((child, _)) = &mut self.redis
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "redis-server exited ({status}): {}",
                last_line_of(&self.dir.join("redis.log"))
            );
        }
        Ok(())
    }

    pub(super) async fn spawn_worker(
        &mut self,
        url: &str,
        visibility: Duration,
    ) -> anyhow::Result<()> {
        self.spawned += 1;
        let name = format!("worker-{}", self.spawned);
        let exe = std::env::current_exe().context("cannot find the jobqueue binary")?;
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let mut child = Command::new(exe)
            .args(["demo-worker", "--redis", url, "--tag", TAG, "--name", &name])
            .args(["--visibility", &format!("{}ms", visibility.as_millis())])
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a demo worker")?;
        let stdin = child.stdin.take();
        self.workers.push(Worker {
            name,
            child,
            _stdin: stdin,
        });
        Ok(())
    }

    /// Workers that exited without being killed: removed, their names returned.
    pub(super) fn reap_exited(&mut self) -> anyhow::Result<Vec<String>> {
        let mut gone = Vec::new();
        let mut i = 0;
        while i < self.workers.len() {
            if self.workers[i].child.try_wait()?.is_some() {
                gone.push(self.workers.swap_remove(i).name);
            } else {
                i += 1;
            }
        }
        Ok(gone)
    }

    /// SIGKILL a random worker that holds a lease right now; false when none does. Jobs
    /// on their last attempts are spared, so that crashes alone never dead-letter a job
    /// in the demo (they would after `MAX_ATTEMPTS` of them: poison-job protection).
    pub(super) async fn kill_busy_worker(&mut self, queue: &Queue) -> anyhow::Result<bool> {
        let holders = lease_holders(queue).await?;
        let busy: Vec<usize> = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                holders
                    .get(&w.name)
                    .is_some_and(|held| held.iter().all(|&a| a + 1 < MAX_ATTEMPTS))
            })
            .map(|(i, _)| i)
            .collect();
        let Some(&victim) = busy.choose(&mut rand::rng()) else {
            return Ok(false);
        };
        let mut worker = self.workers.swap_remove(victim);
        worker.child.start_kill()?;
        worker.child.wait().await?;
        Ok(true)
    }

    pub(super) async fn kill_workers(&mut self) {
        for mut worker in self.workers.drain(..) {
            let _ = worker.child.start_kill();
            let _ = worker.child.wait().await;
        }
    }

    /// Stop everything: workers first, then redis-server (SHUTDOWN NOSAVE, SIGKILL if it
    /// lingers), then the scratch directory.
    pub(super) async fn stop(&mut self) -> anyhow::Result<()> {
        self.kill_workers().await;
        if let Some((mut child, port)) = self.redis.take() {
            shutdown_redis(port).await;
            match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
            }
        }
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("cannot remove {}", self.dir.display()))?;
        Ok(())
    }
}

impl Drop for Fleet {
    /// A panic or an early return: kill what is left (kill_on_drop does the rest).
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.start_kill();
        }
        if let Some((child, _)) = &mut self.redis {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Worker name → the attempts of each job it holds a lease on.
async fn lease_holders(queue: &Queue) -> anyhow::Result<HashMap<String, Vec<u32>>> {
    let mut conn = queue.redis().clone();
    let ids: Vec<String> = redis::cmd("ZRANGE")
        .arg(&queue.keys().processing)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    let mut holders: HashMap<String, Vec<u32>> = HashMap::new();
    if ids.is_empty() {
        return Ok(holders);
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("HMGET")
            .arg(queue.keys().job(id))
            .arg("claim_token")
            .arg("attempts");
    }
    // The worker holding a lease is in its claim_token.
    let rows: Vec<(Option<Vec<u8>>, Option<u32>)> = pipe.query_async(&mut conn).await?;
    for (token, attempts) in rows {
        let worker = token.and_then(|t| crate::queue::parse_claim_token(&t).map(|l| l.1));
        if let Some(worker) = worker {
            holders
                .entry(worker)
                .or_default()
                .push(attempts.unwrap_or(0));
        }
    }
    Ok(holders)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// True when a Redis answers PING on the loopback port.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut buf = [0u8; 7];
        stream.read_exact(&mut buf).await?;
        Ok::<bool, std::io::Error>(&buf == b"+PONG\r\n")
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Ok(true))
    )
}

async fn shutdown_redis(port: u16) {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(b"SHUTDOWN NOSAVE\r\n").await?;
        // The server closes the connection as it goes.
        let mut buf = [0u8; 64];
        let _ = stream.read(&mut buf).await;
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), attempt).await;
}

pub(super) fn last_line_of(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "(no output)".into())
}
