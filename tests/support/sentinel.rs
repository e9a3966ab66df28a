//! A Sentinel set-up on loopback: one primary, two replicas and three Sentinels
//! (`redis-server --sentinel` with a generated config, `down-after-milliseconds` 1000),
//! on free ports, started by the test and killed when the handle drops.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jobqueue::queue::{ConnectOptions, Queue, Redis};

use super::redis::{RedisServer, free_port, wait_until_up};

pub const MASTER: &str = "mymaster";

/// One Sentinel process.
pub struct SentinelProc {
    pub port: u16,
    child: Child,
}

impl Drop for SentinelProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three data nodes (the first starts as the primary) and three Sentinels.
pub struct SentinelSetup {
    pub servers: Vec<RedisServer>,
    pub sentinels: Vec<SentinelProc>,
    dir: tempfile::TempDir,
}

impl SentinelSetup {
    pub fn start() -> SentinelSetup {
        let primary = RedisServer::start_with(&["--repl-ping-replica-period", "1"]);
        let port = primary.port.to_string();
        let mut servers = vec![primary];
        for _ in 0..2 {
            servers.push(RedisServer::start_with(&[
                "--replicaof",
                "127.0.0.1",
                &port,
                "--repl-ping-replica-period",
                "1",
            ]));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let sentinels = (0..3)
            .map(|_| start_sentinel(dir.path(), servers[0].port))
            .collect();
        let setup = SentinelSetup {
            servers,
            sentinels,
            dir,
        };
        setup.wait_until_ready();
        setup
    }

    /// The set-up over TLS: every data node takes clients, replicas and Sentinels only on
    /// a TLS port that asks for a client certificate signed by `ca` (`tls-auth-clients
    /// yes`, `tls-replication yes`), with the certificate `node` (for 127.0.0.1, server
    /// and client use); the Sentinels monitor those ports. Returns the set-up and the
    /// TLS port of each data node (the plain ports stay for the harness's own checks).
    pub fn start_tls(certs: &super::certs::Certs) -> (SentinelSetup, Vec<u16>) {
        let tls = |port: u16| -> Vec<String> {
            let mut args = super::certs::tls_args(
                port,
                &certs.path("node.crt"),
                &certs.path("node.key"),
                &certs.path("ca.crt"),
                "yes",
            );
            args.extend(
                [
                    "--tls-replication",
                    "yes",
                    "--repl-ping-replica-period",
                    "1",
                ]
                .map(String::from),
            );
            args
        };
        let (primary, ports) = RedisServer::start_with_ports(1, |ports| tls(ports[0]));
        let mut tls_ports = vec![ports[0]];
        let mut servers = vec![primary];
        for _ in 1..3 {
            let (replica, ports) = RedisServer::start_with_ports(1, |ports| {
                let mut args = tls(ports[0]);
                args.extend([
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    tls_ports[0].to_string(),
                ]);
                args
            });
            tls_ports.push(ports[0]);
            servers.push(replica);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let extra = format!(
            "tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-replication yes\n",
            certs.path("node.crt"),
            certs.path("node.key"),
            certs.path("ca.crt"),
        );
        let sentinels = (0..3)
            .map(|_| start_sentinel_with(dir.path(), tls_ports[0], &extra))
            .collect();
        let setup = SentinelSetup {
            servers,
            sentinels,
            dir,
        };
        setup.wait_until_ready();
        (setup, tls_ports)
    }

    /// `127.0.0.1:PORT` of each Sentinel.
    pub fn addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// `--sentinel`'s value.
    pub fn addr_list(&self) -> String {
        self.addrs().join(",")
    }

    pub fn options(&self) -> ConnectOptions {
        ConnectOptions::sentinel(self.addrs(), MASTER)
            .response_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(2))
    }

    pub async fn redis(&self) -> Redis {
        Redis::connect(&self.options())
            .await
            .expect("connect via Sentinel")
    }

    pub async fn queue(&self, tag: &str) -> Queue {
        Queue::new(self.redis().await, "jq", tag).unwrap()
    }

    /// A plain connection to the first Sentinel.
    pub fn sentinel_conn(&self, i: usize) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.sentinels[i].port))
            .unwrap()
            .get_connection()
            .expect("connect to a Sentinel")
    }

    /// The primary's port as the Sentinel `i` names it.
    pub fn primary_port_by(&self, i: usize) -> Option<u16> {
        let addr: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER)
            .query(&mut self.sentinel_conn(i))
            .ok()?;
        addr.and_then(|(_, port)| port.parse().ok())
    }

    pub fn primary_port(&self) -> u16 {
        self.primary_port_by(0)
            .expect("the Sentinels name a primary")
    }

    /// The data node on `port`.
    pub fn server(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port == port)
            .expect("a data node on that port")
    }

    /// The node's own view of its role (`master` or `slave`).
    pub fn role_of(&self, port: u16) -> Option<String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_millis(300))
            .ok()?;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn).ok()?;
        match role.first() {
            Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// Every Sentinel sees the primary with two replicas and two other Sentinels, and
    /// the replicas are in sync: a failover can be asked for.
    pub fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut last = String::new();
        loop {
            let ready = (0..self.sentinels.len()).all(|i| {
                let info: redis::RedisResult<HashMap<String, String>> = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(MASTER)
                    .query(&mut self.sentinel_conn(i));
                match info {
                    Ok(info) => {
                        let ok = info.get("num-slaves").map(String::as_str) == Some("2")
                            && info.get("num-other-sentinels").map(String::as_str) == Some("2")
                            && info.get("flags").map(String::as_str) == Some("master");
                        last = format!("{info:?}");
                        ok && self.replicas_in_sync(i)
                    }
                    Err(e) => {
                        last = e.to_string();
                        false
                    }
                }
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinel set-up did not settle: {last}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn replicas_in_sync(&self, i: usize) -> bool {
        let replicas: redis::RedisResult<Vec<HashMap<String, String>>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query(&mut self.sentinel_conn(i));
        replicas.is_ok_and(|r| {
            r.len() == 2
                && r.iter().all(|r| {
                    r.get("flags").map(String::as_str) == Some("slave")
                        && r.get("master-link-status").map(String::as_str) == Some("ok")
                })
        })
    }

    /// `SENTINEL FAILOVER`, then wait until every Sentinel names a new primary that
    /// says it is one, and the old primary says it is a replica (until then it still
    /// takes writes, which the resync drops). Returns the new primary's port.
    pub fn failover(&self) -> u16 {
        let old = self.primary_port();
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER)
            .query(&mut self.sentinel_conn(0))
            .expect("SENTINEL FAILOVER");
        let new = self.wait_for_new_primary(old);
        self.wait_for_role(old, "slave");
        new
    }

    /// Switch the primary by hand, the way that keeps the old primary's clients
    /// connected: the Sentinels forget the master (so they do not undo the switch), a
    /// replica is promoted (`REPLICAOF NO ONE`), the old primary follows it, and the
    /// Sentinels monitor the new one. A client's next write on its old connection meets
    /// `READONLY`. Returns the old and the new primary's ports.
    pub fn switch_primary_by_hand(&self) -> (u16, u16) {
        let old = self.primary_port();
        let new = self
            .servers
            .iter()
            .map(|s| s.port)
            .find(|p| *p != old)
            .unwrap();
        for i in 0..self.sentinels.len() {
            let _: () = redis::cmd("SENTINEL")
                .arg("REMOVE")
                .arg(MASTER)
                .query(&mut self.sentinel_conn(i))
                .unwrap();
        }
        let node = |port: u16| {
            redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .unwrap()
                .get_connection()
                .unwrap()
        };
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut node(new))
            .unwrap();
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(new)
            .query(&mut node(old))
            .unwrap();
        for i in 0..self.sentinels.len() {
            let _: () = redis::cmd("SENTINEL")
                .arg("MONITOR")
                .arg(MASTER)
                .arg("127.0.0.1")
                .arg(new)
                .arg(2)
                .query(&mut self.sentinel_conn(i))
                .unwrap();
        }
        self.wait_for_role(old, "slave");
        (old, new)
    }

    /// Wait until the node on `port` says its role is `role`.
    pub fn wait_for_role(&self, port: u16, role: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = self.role_of(port);
            if now.as_deref() == Some(role) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the node on {port} is still {now:?}, not {role}, after 60s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until a majority of the Sentinels (the quorum that elects) name the same
    /// primary other than `old`, and it answers ROLE as a master. A Sentinel that lags
    /// catches up from the others' hello messages; clients skip a node that is down.
    pub fn wait_for_new_primary(&self, old: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let named: Vec<Option<u16>> = (0..self.sentinels.len())
                .map(|i| self.primary_port_by(i))
                .collect();
            let agreed = named.iter().flatten().find(|p| {
                **p != old && named.iter().filter(|q| **q == Some(**p)).count() * 2 > named.len()
            });
            if let Some(&new) = agreed
                && self.role_of(new).as_deref() == Some("master")
            {
                return new;
            }
            assert!(
                Instant::now() < deadline,
                "no new primary after 90s: the Sentinels name {named:?} (old {old})\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until every Sentinel names `port` as the primary.
    pub fn wait_until_all_name(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let named: Vec<Option<u16>> = (0..self.sentinels.len())
                .map(|i| self.primary_port_by(i))
                .collect();
            if named.iter().all(|p| *p == Some(port)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinels name {named:?}, not all {port}, after 90s\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of each Sentinel's log.
    pub fn logs(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| {
                let log =
                    std::fs::read_to_string(self.dir.path().join(format!("redis-{}.log", s.port)))
                        .unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                format!(
                    "--- Sentinel {}:\n{}",
                    s.port,
                    lines[lines.len().saturating_sub(25)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The primary a majority of the Sentinels name.
    pub fn primary_by_majority(&self) -> Option<u16> {
        let named: Vec<Option<u16>> = (0..self.sentinels.len())
            .map(|i| self.primary_port_by(i))
            .collect();
        named
            .iter()
            .flatten()
            .find(|p| named.iter().filter(|q| **q == Some(**p)).count() * 2 > named.len())
            .copied()
    }
}

/// One Sentinel that monitors the server on `primary` as [`MASTER`].
pub fn start_sentinel(dir: &Path, primary: u16) -> SentinelProc {
    start_sentinel_with(dir, primary, "")
}

/// [`start_sentinel`] with more configuration lines (`extra`, ending in a newline).
pub fn start_sentinel_with(dir: &Path, primary: u16, extra: &str) -> SentinelProc {
    for _ in 0..20 {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{port}.conf"));
        let log = dir.join(format!("redis-{port}.log"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                 dir {dir}\nlogfile {log}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 3000\n\
                 sentinel parallel-syncs {MASTER} 2\n{extra}",
                dir = dir.display(),
                log = log.display(),
            ),
        )
        .unwrap();
        let mut child =
            Command::new(std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()))
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("run redis-server --sentinel");
        match wait_until_up(port, &mut child, dir) {
            Ok(()) => return SentinelProc { port, child },
            Err(log) if log.contains("Address already in use") => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Err(log) => {
                let _ = child.kill();
                panic!("Sentinel did not start on port {port}: {log}");
            }
        }
    }
    panic!("Sentinel could not find a free port");
}
