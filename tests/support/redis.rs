//! Test harness: private redis-servers (standalone and a 3-master Cluster) on free
//! loopback ports, started by the test and killed when the handle drops.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jobqueue::queue::{ConnectOptions, Queue, Redis, SCRIPTS};

/// A port nobody listens on right now. The server may still lose a race for it; the
/// start-up below then tries another.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

fn redis_server_binary() -> PathBuf {
    if let Ok(bin) = std::env::var("REDIS_SERVER") {
        return bin.into();
    }
    "redis-server".into()
}

/// One redis-server process.
pub struct RedisServer {
    pub port: u16,
    child: Child,
    pub dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// A standalone server that keeps nothing on disk.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// A server with extra configuration, e.g. `["--appendonly", "yes"]`.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Self::start_with_ports(0, |_| extra.clone()).0
    }

    /// A server that listens on `ports` more ports besides its own (a TLS port, a
    /// Cluster bus): `args` makes its configuration from those ports. Every attempt
    /// takes fresh ports, so a port another process took between the pick and the bind
    /// costs one more attempt, not the start. Returns the server and its extra ports.
    pub fn start_with_ports(
        ports: usize,
        args: impl Fn(&[u16]) -> Vec<String>,
    ) -> (RedisServer, Vec<u16>) {
        let dir = tempfile::tempdir().expect("tempdir");
        for _ in 0..20 {
            let port = free_port();
            let others: Vec<u16> = (0..ports).map(|_| free_port()).collect();
            let extra = args(&others);
            let mut child = spawn_redis(dir.path(), port, &extra);
            match wait_until_up(port, &mut child, dir.path()) {
                Ok(()) => {
                    let server = RedisServer {
                        port,
                        child,
                        dir,
                        extra,
                    };
                    return (server, others);
                }
                Err(log) if log.contains("Address already in use") => {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Err(log) => {
                    let _ = child.kill();
                    panic!("redis-server did not start on port {port}: {log}");
                }
            }
        }
        panic!("redis-server could not find free ports");
    }

    /// Freeze the server (SIGSTOP) or let it go on (SIGCONT): a stall of the process, its
    /// connections left open.
    pub fn pause(&self, stalled: bool) {
        let sig = if stalled {
            libc::SIGSTOP
        } else {
            libc::SIGCONT
        };
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A replica of `primary` (`--replicaof`), returned once its link to the primary is
    /// up and the first sync is done: it then refuses writes with `READONLY`.
    pub fn start_replica_of(primary: &RedisServer) -> RedisServer {
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
        let mut conn = replica.conn();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut conn)
                .unwrap_or_default();
            if info.contains("master_link_status:up") && !info.contains("master_sync_in_progress:1")
            {
                return replica;
            }
            assert!(
                Instant::now() < deadline,
                "the replica's link to the primary is not up after 30s: {info}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A plain synchronous connection for test set-up and inspection.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .expect("connect to test redis")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The request records (`claimreq:*` keys) of the queue `tag` of prefix `jq`.
    pub fn request_records(&self, tag: &str) -> Vec<String> {
        let pattern = format!("jq:\\{{{tag}\\}}:claimreq:*");
        let mut conn = self.conn();
        let mut keys: Vec<String> = redis::Commands::scan_match(&mut conn, pattern)
            .unwrap()
            .map(|k| k.unwrap())
            .collect();
        keys.sort();
        keys
    }

    /// SIGKILL the server (no shutdown, no save).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start the server again on the same port and directory (AOF files survive).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut child = spawn_redis(self.dir.path(), self.port, &self.extra);
            match wait_until_up(self.port, &mut child, self.dir.path()) {
                Ok(()) => {
                    self.child = child;
                    return;
                }
                Err(log) if Instant::now() < deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = log;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(log) => panic!("redis-server did not restart: {log}"),
            }
        }
    }

    pub async fn redis(&self) -> Redis {
        Redis::connect(&ConnectOptions::new(self.url()))
            .await
            .expect("connect")
    }

    pub async fn queue(&self, tag: &str) -> Queue {
        Queue::new(self.redis().await, "jq", tag).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_redis(dir: &Path, port: u16, extra: &[String]) -> Child {
    let log = dir.join(format!("redis-{port}.log"));
    let _ = std::fs::remove_file(&log);
    Command::new(redis_server_binary())
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--protected-mode", "no"])
        .args(["--dir", dir.to_str().unwrap()])
        .args(["--logfile", log.to_str().unwrap()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run redis-server ({e}); install it (apt-get install redis-server) or run `make test`")
        })
}

/// Wait until the server answers PING; on failure return its log.
pub fn wait_until_up(port: u16, child: &mut Child, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let log = || std::fs::read_to_string(dir.join(format!("redis-{port}.log"))).unwrap_or_default();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return Err(log());
        }
        if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) {
            // Any answer counts, NOAUTH included: the server is up.
            match redis::cmd("PING").query::<redis::Value>(&mut conn) {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == Some("NOAUTH") => return Ok(()),
                Err(_) => {}
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no answer within 10s; log: {}", log()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A real 3-master Redis Cluster on loopback (with one replica per master when started
/// by [`RedisCluster::start_with_replicas`]).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// `replicas[i]` replicates `nodes[i]`.
    pub replicas: Vec<RedisServer>,
}

/// A node of a Cluster: its own bus port, a short node timeout.
fn cluster_node() -> RedisServer {
    cluster_node_with_bus().0
}

/// A Cluster node and its bus port.
fn cluster_node_with_bus() -> (RedisServer, u16) {
    let (server, ports) = RedisServer::start_with_ports(1, |ports| {
        [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &ports[0].to_string(),
            "--cluster-node-timeout",
            "5000",
        ]
        .map(String::from)
        .to_vec()
    });
    (server, ports[0])
}

impl RedisCluster {
    /// The 3 masters, and one replica for each, in sync.
    pub fn start_with_replicas() -> RedisCluster {
        let mut cluster = Self::start();
        let mut first = cluster.nodes[0].conn();
        for master in &cluster.nodes {
            let replica = cluster_node();
            let bus: u16 = redis::cmd("CONFIG")
                .arg("GET")
                .arg("cluster-port")
                .query::<Vec<String>>(&mut replica.conn())
                .unwrap()[1]
                .parse()
                .unwrap();
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(replica.port)
                .arg(bus)
                .query(&mut first)
                .expect("CLUSTER MEET");
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut master.conn())
                .unwrap();
            // REPLICATE needs the replica to know the master: wait for the handshake.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let done: redis::RedisResult<()> = redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&id)
                    .query(&mut replica.conn());
                match done {
                    Ok(()) => break,
                    Err(e) => assert!(Instant::now() < deadline, "CLUSTER REPLICATE: {e}"),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            cluster.replicas.push(replica);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for replica in &cluster.replicas {
            let mut conn = replica.conn();
            loop {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut conn)
                    .unwrap();
                if info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "replica not in sync: {info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for master in &cluster.nodes {
            let mut conn = master.conn();
            loop {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut conn)
                    .unwrap();
                let cluster_info: String =
                    redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
                // `online`: past the full sync, so the replica acknowledges (WAIT).
                if info.contains("connected_slaves:1")
                    && info.contains(",state=online,")
                    && cluster_info.contains("cluster_known_nodes:6")
                    && cluster_info.contains("cluster_state:ok")
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "master without its replica: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    pub fn start() -> RedisCluster {
        let (nodes, bus_ports): (Vec<RedisServer>, Vec<u16>) =
            (0..3).map(|_| cluster_node_with_bus()).unzip();
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (epoch, (node, (lo, hi))) in nodes.iter().zip(ranges).enumerate() {
            // A distinct config epoch per master, as `redis-cli --cluster create` gives:
            // left at 0 for all, the nodes resolve the collision by bumping epochs while
            // the tests run, and a bump that lands between the two `SETSLOT … NODE` of a
            // slot migration gives the slot back to the source (each node then names the
            // other as the owner, and every command on the slot is answered MOVED).
            let _: () = redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(epoch + 1)
                .query(&mut node.conn())
                .expect("CLUSTER SET-CONFIG-EPOCH");
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(lo)
                .arg(hi)
                .query(&mut node.conn())
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        let mut first = nodes[0].conn();
        for (node, bus) in nodes[1..].iter().zip(&bus_ports[1..]) {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port)
                .arg(*bus)
                .query(&mut first)
                .expect("CLUSTER MEET");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            let mut conn = node.conn();
            loop {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
                if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster did not form: {info}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        RedisCluster {
            nodes,
            replicas: Vec::new(),
        }
    }

    /// Seed URLs of all nodes, comma-separated.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub async fn redis(&self) -> Redis {
        Redis::connect(&ConnectOptions::new(self.url()).cluster(true))
            .await
            .expect("connect to cluster")
    }

    /// Which node (index) serves `key`'s slot.
    pub fn node_of(&self, key: &str) -> usize {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn())
            .unwrap();
        match slot {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        }
    }

    /// `count` hash tags whose slots are served by different nodes.
    pub fn tags_on_distinct_nodes(&self, count: usize) -> Vec<String> {
        let mut found: Vec<Option<String>> = vec![None; 3];
        for i in 0.. {
            let tag = format!("q{i}");
            let node = self.node_of(&format!("{{{tag}}}"));
            if found[node].is_none() {
                found[node] = Some(tag);
            }
            if found.iter().filter(|f| f.is_some()).count() >= count {
                break;
            }
        }
        found.into_iter().flatten().take(count).collect()
    }
}

/// Redis's clock in ms, as the scripts read it.
pub fn redis_now_ms(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).unwrap();
    secs * 1000 + micros / 1000
}

/// Wait until Redis's clock has passed `ms` (a lease or a backoff has run out).
pub fn wait_past(conn: &mut redis::Connection, ms: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis_now_ms(conn) <= ms {
        assert!(Instant::now() < deadline, "Redis clock never passed {ms}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wait until Redis's clock moves to the next millisecond.
pub fn next_ms(conn: &mut redis::Connection) {
    let now = redis_now_ms(conn);
    wait_past(conn, now);
}

/// Enqueue one job with any id bytes (not UTF-8, a space, a length this client would
/// not make) through the protocol's own enqueue script, as a client in another language
/// would.
pub async fn enqueue_raw(queue: &Queue, id: &[u8], payload: &[u8]) {
    let keys = queue.keys();
    let mut job_key = keys.job_prefix.as_bytes().to_vec();
    job_key.extend_from_slice(id);
    let mut cmd = SCRIPTS.enqueue.cmd(8);
    for key in keys.queue_keys() {
        cmd.arg(key);
    }
    cmd.arg(job_key)
        .arg(&keys.job_prefix)
        .arg(1)
        .arg(id)
        .arg(payload)
        .arg(0);
    let mut conn = queue.redis().clone();
    let reply = SCRIPTS.enqueue.run(&mut conn, &cmd).await.unwrap();
    assert_eq!(
        reply,
        redis::Value::Array(vec![redis::Value::Int(1)]),
        "enqueued"
    );
}
