//! Following a primary through Sentinel failovers.
//!
//! The Sentinels are asked (redis-rs's `SentinelClient`, which also checks that the node
//! it names answers `ROLE` as a master) for the primary of one master name; commands go
//! over one multiplexed connection to it. When that connection breaks, or the node
//! answers `READONLY` (it was demoted to a replica), the connection is dropped and the
//! next command asks the Sentinels again, waiting up to the failover wait for a primary.
//!
//! Each handle also listens to every Sentinel's announcements: when the leader of a
//! failover tells a replica to become the primary (`+failover-state-wait-promotion`),
//! nothing more is sent to the old primary (whose writes from then on are dropped when
//! it is demoted) and commands wait for the replica to answer `ROLE` as the primary;
//! `+switch-master` replaces an idle connection to the old primary (which the Sentinels
//! disconnect when they demote it) before the next command is sent on it.
//!
//! The module rule of `connection.rs` holds: nothing is sent twice behind the caller's
//! back. A `READONLY` reply says the command did not run, so it is sent again to the new
//! primary; a pipeline only when none of its writes got a reply other than an error. A
//! broken connection or a timeout may have lost the reply of a command that ran: the
//! error goes back to the caller (and the next command goes to the new primary).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo, Pipeline,
    RedisError, RedisResult, Value,
};
use tokio::time::Instant;

use super::error::{Error, Result, acl_denial, is_readonly, tls_problem};

/// Where the Sentinels are and which master to follow.
#[derive(Clone)]
pub struct SentinelOptions {
    /// `host:port` of each Sentinel (port 26379 when left out).
    pub addrs: Vec<String>,
    /// The master name the Sentinels monitor (`sentinel monitor NAME …`).
    pub master_name: String,
    /// The Sentinels' own password (`requirepass` of the Sentinels), if they have one.
    pub password: Option<String>,
    /// How long one command waits for a primary after it lost the old one (a failover
    /// takes `down-after-milliseconds` plus the election, seconds).
    pub failover_wait: Duration,
    /// Speak TLS to the data nodes (the Sentinels themselves are asked in plain TCP).
    /// Implied by a CA or a client certificate in the connection options; set it alone
    /// for nodes whose certificates the system trust store knows.
    pub tls: bool,
}

impl SentinelOptions {
    pub fn new(
        addrs: impl IntoIterator<Item = impl Into<String>>,
        master_name: impl Into<String>,
    ) -> SentinelOptions {
        SentinelOptions {
            addrs: addrs.into_iter().map(Into::into).collect(),
            master_name: master_name.into(),
            password: None,
            failover_wait: Duration::from_secs(30),
            tls: false,
        }
    }

    /// `sentinel://host:port,host:port/master`: no password in it.
    pub fn endpoint(&self) -> String {
        format!("sentinel://{}/{}", self.addrs.join(","), self.master_name)
    }
}

/// Never prints the password.
impl std::fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelOptions")
            .field("addrs", &self.addrs)
            .field("master_name", &self.master_name)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("failover_wait", &self.failover_wait)
            .field("tls", &self.tls)
            .finish()
    }
}

/// `host:port` (or `host`) as a Sentinel address.
fn parse_addr(addr: &str) -> std::result::Result<(String, u16), String> {
    let addr = addr.trim();
    if addr.contains("://") {
        return Err(format!(
            "{addr:?}: give host:port, not a URL (the password comes from JOBQUEUE_SENTINEL_PASSWORD)"
        ));
    }
    let (host, port) = match addr.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') => (host, port),
        _ => (addr, "26379"),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{addr:?}: no host given"));
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("{addr:?}: port {port:?} is not a number from 0 to 65535"))?;
    Ok((host.to_string(), port))
}

/// How this client signs in to the data nodes the Sentinels name (the Sentinels' own
/// password is [`SentinelOptions::password`]): the same user, password and TLS material
/// as a direct connection, applied to whichever node is the primary now.
#[derive(Clone, Default)]
pub(crate) struct NodeAuth {
    pub username: Option<String>,
    pub password: Option<String>,
    /// TLS to the data nodes.
    pub tls: bool,
    /// The CA bundle and the client certificate for that TLS, when given.
    pub certs: Option<redis::TlsCertificates>,
}

impl NodeAuth {
    /// A client for the data node at `ip:port`, signed in as the options say.
    fn client(&self, ip: &str, port: u16) -> RedisResult<Client> {
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host: ip.to_string(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(ip.to_string(), port)
        };
        let mut info = addr.into_connection_info()?;
        let mut settings = info.redis_settings().clone();
        if let Some(password) = &self.password {
            settings = settings.set_password(password.clone());
        }
        if let Some(username) = &self.username {
            settings = settings.set_username(username.clone());
        }
        info = info.set_redis_settings(settings);
        match (&self.certs, self.tls) {
            (Some(certs), true) => Client::build_with_tls(info, certs.clone()),
            _ => Client::open(info),
        }
    }
}

/// How long commands wait for a replica being promoted to say it is the primary before
/// asking the Sentinels instead (a failover aborted, or the replica is out of reach).
const PROMOTION_WAIT: Duration = Duration::from_secs(5);

/// The primary in use, and a count that changes with each new connection to it.
struct Current {
    generation: u64,
    /// A replica the Sentinels are promoting: commands wait for it to be the primary.
    promoting: Option<(String, u16)>,
    addr: String,
    client: Option<Client>,
    conn: Option<MultiplexedConnection>,
}

pub(crate) struct SentinelTarget {
    lookup: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Current>,
    sentinels: Vec<(String, u16)>,
    endpoint: String,
    master: String,
    password: Option<String>,
    node: NodeAuth,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    failover_wait: Duration,
}

impl SentinelTarget {
    /// Ask the Sentinels for the primary and connect to it; a clear error when no
    /// Sentinel answers, none knows the master name, or no primary can be reached.
    pub(crate) async fn connect(
        options: &SentinelOptions,
        node: NodeAuth,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<SentinelTarget> {
        let endpoint = options.endpoint();
        let invalid = |reason: String| Error::InvalidUrl {
            url: endpoint.clone(),
            reason,
        };
        if options.master_name.trim().is_empty() {
            return Err(invalid("no master name given".into()));
        }
        let addrs: Vec<&str> = options
            .addrs
            .iter()
            .flat_map(|a| a.split(','))
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        if addrs.is_empty() {
            return Err(invalid("no Sentinel address given".into()));
        }
        let sentinels = addrs
            .iter()
            .map(|a| parse_addr(a))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let mut builder = SentinelClientBuilder::new(
            sentinels
                .iter()
                .map(|(h, p)| ConnectionAddr::Tcp(h.clone(), *p)),
            &options.master_name,
            SentinelServerType::Master,
        )
        .map_err(|e| invalid(e.to_string()))?;
        if let Some(password) = &node.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(username) = &node.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if node.tls {
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(certs) = &node.certs {
                builder = builder.set_client_to_redis_certificates(certs.clone());
            }
        }
        if let Some(password) = &options.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        let lookup = builder.build().map_err(|e| invalid(e.to_string()))?;
        let target = SentinelTarget {
            lookup: tokio::sync::Mutex::new(lookup),
            current: Mutex::new(Current {
                generation: 0,
                promoting: None,
                addr: String::new(),
                client: None,
                conn: None,
            }),
            sentinels,
            endpoint: endpoint.clone(),
            master: options.master_name.clone(),
            password: options.password.clone(),
            node,
            config: AsyncConnectionConfig::new()
                .set_response_timeout(Some(response_timeout))
                .set_connection_timeout(Some(connect_timeout)),
            connect_timeout,
            failover_wait: options.failover_wait,
        };
        let first = {
            let mut lookup = target.lookup.lock().await;
            tokio::time::timeout(connect_timeout * 2, target.discover(&mut lookup)).await
        };
        match first {
            Ok(Ok(found)) => {
                target.install(found);
                Ok(target)
            }
            Ok(Err(err)) => Err(target.diagnose(Some(err)).await),
            Err(_) => Err(target.diagnose(None).await),
        }
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The ACL user of the data nodes (`default` without one).
    fn user(&self) -> &str {
        self.node.username.as_deref().unwrap_or("default")
    }

    /// The primary the Sentinels name now, and a connection to it.
    async fn discover(
        &self,
        lookup: &mut SentinelClient,
    ) -> RedisResult<(Client, MultiplexedConnection)> {
        let client = lookup.async_get_client().await?;
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        Ok((client, conn))
    }

    fn install(&self, (client, conn): (Client, MultiplexedConnection)) -> u64 {
        let addr = client.get_connection_info().addr().to_string();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.addr.is_empty() {
            tracing::info!(master = %self.master, primary = %addr, "connected to the primary named by the Sentinels");
        } else if current.addr != addr {
            tracing::warn!(master = %self.master, primary = %addr, was = %current.addr,
                "failover: going on with the new primary");
        } else {
            tracing::info!(master = %self.master, primary = %addr, "reconnected to the primary");
        }
        current.generation += 1;
        current.promoting = None;
        current.addr = addr;
        current.client = Some(client);
        current.conn = Some(conn);
        current.generation
    }

    /// Listen to the Sentinels' `+switch-master` announcements for as long as `this`
    /// lives: a new primary for our master drops the connection to the old one, so
    /// the next command asks the Sentinels instead of failing on a killed connection.
    pub(crate) fn watch(this: &Arc<SentinelTarget>) {
        // One listener per Sentinel: a failover's steps are announced by its leader only.
        for i in 0..this.sentinels.len() {
            let weak: Weak<SentinelTarget> = Arc::downgrade(this);
            tokio::spawn(async move {
                loop {
                    let Some(target) = weak.upgrade() else { return };
                    let (host, port) = target.sentinels[i].clone();
                    let subscribed = target.subscribe(&host, port).await;
                    drop(target);
                    if let Ok(mut pubsub) = subscribed {
                        let mut messages = pubsub.on_message();
                        loop {
                            let message = tokio::select! {
                                m = futures::StreamExt::next(&mut messages) => m,
                                _ = tokio::time::sleep(Duration::from_secs(2)) => {
                                    if weak.strong_count() == 0 { return }
                                    continue;
                                }
                            };
                            let Some(message) = message else { break };
                            let Some(target) = weak.upgrade() else { return };
                            let payload: String = message.get_payload().unwrap_or_default();
                            target.announced(message.get_channel_name(), &payload);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            });
        }
    }

    /// One announcement of a Sentinel, for our master or another.
    fn announced(&self, channel: &str, payload: &str) {
        let words: Vec<&str> = payload.split_whitespace().collect();
        match (channel, &words[..]) {
            // `<master> <old ip> <old port> <new ip> <new port>`
            ("+switch-master", [name, _, _, ip, port]) if *name == self.master => {
                self.switched(&format!("{ip}:{port}"));
            }
            // `slave <name> <ip> <port> @ <master> <master ip> <master port>`: the leader
            // has just told this replica to become the primary. From now on the old
            // primary's writes are dropped when it is demoted: stop sending there.
            ("+failover-state-wait-promotion", ["slave", _, ip, port, "@", name, ..])
                if *name == self.master =>
            {
                if let Ok(port) = port.parse::<u16>() {
                    self.promoting(ip, port);
                }
            }
            _ => {}
        }
    }

    async fn subscribe(&self, host: &str, port: u16) -> RedisResult<redis::aio::PubSub> {
        let mut info = ConnectionAddr::Tcp(host.to_string(), port).into_connection_info()?;
        if let Some(password) = &self.password {
            let settings = info.redis_settings().clone().set_password(password.clone());
            info = info.set_redis_settings(settings);
        }
        let client = Client::open(info)?;
        let mut pubsub = tokio::time::timeout(self.connect_timeout, client.get_async_pubsub())
            .await
            .map_err(|_| RedisError::from((ErrorKind::Io, "timed out")))??;
        pubsub.subscribe("+switch-master").await?;
        pubsub.subscribe("+failover-state-wait-promotion").await?;
        Ok(pubsub)
    }

    /// The Sentinels are promoting the replica at `ip:port`: drop the connection to the
    /// old primary; the next command waits for the replica to say it is the primary.
    fn promoting(&self, ip: &str, port: u16) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.addr == format!("{ip}:{port}") {
            return;
        }
        tracing::info!(master = %self.master, promoting = %format!("{ip}:{port}"), was = %current.addr,
            "failover under way: the Sentinels are promoting a replica; waiting for it");
        current.promoting = Some((ip.to_string(), port));
        current.conn = None;
        current.client = None;
    }

    /// Connect to the replica being promoted once it answers ROLE as the primary,
    /// within `until`; `None` when it did not (the Sentinels are asked instead).
    async fn await_promotion(
        &self,
        ip: &str,
        port: u16,
        until: Instant,
    ) -> Option<(Client, MultiplexedConnection)> {
        let client = self.node.client(ip, port).ok()?;
        while Instant::now() < until {
            if let Ok(Ok(mut conn)) = tokio::time::timeout(
                self.connect_timeout,
                client.get_multiplexed_async_connection_with_config(&self.config),
            )
            .await
            {
                let role: RedisResult<Vec<Value>> = redis::cmd("ROLE").query_async(&mut conn).await;
                if matches!(role.as_deref(), Ok([Value::BulkString(r), ..]) if r == b"master") {
                    return Some((client, conn));
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// The Sentinels announced `addr` as the primary: drop a connection elsewhere.
    fn switched(&self, addr: &str) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.promoting = None;
        if current.conn.is_some() && current.addr != addr {
            tracing::warn!(master = %self.master, primary = %addr, was = %current.addr,
                "failover announced by the Sentinels; switching to the new primary");
            current.conn = None;
            current.client = None;
        }
    }

    /// Forget the connection of `generation` (it broke, or its node is a replica now):
    /// the next command asks the Sentinels again.
    fn lost(&self, generation: u64, why: &str) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.generation == generation && current.conn.is_some() {
            tracing::warn!(master = %self.master, primary = %current.addr, reason = why,
                "lost the primary; asking the Sentinels again");
            current.conn = None;
            current.client = None;
        }
    }

    /// The connection to the primary, asking the Sentinels when there is none, until
    /// `deadline`.
    async fn primary(&self, deadline: Instant) -> RedisResult<(u64, MultiplexedConnection)> {
        let ready = |this: &Self| {
            let current = this.current.lock().unwrap_or_else(|e| e.into_inner());
            current.conn.clone().map(|conn| (current.generation, conn))
        };
        if let Some(found) = ready(self) {
            return Ok(found);
        }
        let mut lookup = self.lookup.lock().await;
        // Another command may have found it meanwhile.
        if let Some(found) = ready(self) {
            return Ok(found);
        }
        let mut wait = Duration::from_millis(50);
        loop {
            // A promotion announced (before or while the Sentinels are asked): wait for
            // that replica instead, the Sentinels name it only at the end of the failover.
            let promoting = {
                let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
                current.promoting.clone()
            };
            if let Some((ip, port)) = promoting {
                let until = deadline.min(Instant::now() + PROMOTION_WAIT);
                if let Some(found) = self.await_promotion(&ip, port, until).await {
                    let conn = found.1.clone();
                    return Ok((self.install(found), conn));
                }
                let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
                current.promoting = None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let err = match tokio::time::timeout(
                left.min(self.connect_timeout * 2)
                    .max(Duration::from_millis(1)),
                self.discover(&mut lookup),
            )
            .await
            {
                Ok(Ok(found)) => {
                    let conn = found.1.clone();
                    return Ok((self.install(found), conn));
                }
                Ok(Err(err)) => err,
                Err(_) => RedisError::from((
                    ErrorKind::Io,
                    "timed out asking the Sentinels for the primary",
                )),
            };
            if Instant::now() + wait >= deadline {
                return Err(err);
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(500));
        }
    }

    /// A connection of its own to the current primary (blocking commands).
    pub(crate) async fn dedicated(
        &self,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<MultiplexedConnection> {
        let deadline = Instant::now() + self.failover_wait;
        let (generation, _) = self.primary(deadline).await?;
        let client = {
            let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            current.client.clone()
        };
        let client = client.ok_or_else(|| {
            RedisError::from((ErrorKind::Io, "the primary was lost while connecting"))
        })?;
        let conn = client
            .get_multiplexed_async_connection_with_config(config)
            .await;
        if let Err(err) = &conn
            && connection_lost(err)
        {
            self.lost(generation, "a new connection failed");
        }
        conn
    }

    /// One command to the primary (see the module comment for what is sent again).
    pub(crate) async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let deadline = Instant::now() + self.failover_wait;
        loop {
            let (generation, mut conn) = self.primary(deadline).await?;
            let result = conn.req_packed_command(cmd).await;
            let readonly = match &result {
                Ok(v) => value_readonly(v),
                Err(e) => is_readonly(e),
            };
            if readonly {
                self.lost(generation, "READONLY: the node is a replica now");
                if Instant::now() < deadline {
                    continue;
                }
            } else if let Err(err) = &result
                && connection_lost(err)
            {
                self.lost(generation, &err.to_string());
            }
            return result;
        }
    }

    /// A pipeline to the primary: sent again after `READONLY` only when none of its
    /// writes got a reply other than an error (so none ran).
    pub(crate) async fn pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let deadline = Instant::now() + self.failover_wait;
        loop {
            let (generation, mut conn) = self.primary(deadline).await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            match &result {
                Ok(replies) if replies.iter().any(value_readonly) => {
                    self.lost(generation, "READONLY: the node is a replica now");
                    if offset == 0
                        && nothing_written(pipeline, replies)
                        && Instant::now() < deadline
                    {
                        continue;
                    }
                }
                Err(err) if is_readonly(err) => {
                    self.lost(generation, "READONLY: the node is a replica now");
                }
                Err(err) if connection_lost(err) => self.lost(generation, &err.to_string()),
                _ => {}
            }
            return result;
        }
    }

    /// Why the first discovery failed, named: no Sentinel answers, none monitors the
    /// master name, or the primary they name cannot be reached. Never shows a password.
    async fn diagnose(&self, err: Option<RedisError>) -> Error {
        let sentinels = self
            .sentinels
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut known: Option<Vec<String>> = None;
        let mut last = None;
        let mut auth = None;
        for (host, port) in &self.sentinels {
            match self.masters_of(host, *port).await {
                Ok(names) => {
                    known.get_or_insert_with(Vec::new).extend(names);
                }
                Err(e) => {
                    if e.kind() == ErrorKind::AuthenticationFailed
                        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
                    {
                        auth = Some(format!(
                            "{host}:{port}: {}",
                            e.detail().unwrap_or("authentication failed")
                        ));
                    }
                    last = Some(format!("{host}:{port}: {e}"));
                }
            }
        }
        let Some(mut known) = known else {
            if let Some(detail) = auth {
                return Error::Auth {
                    endpoint: format!("the Sentinel at {sentinels}"),
                    detail: format!("{detail} (check JOBQUEUE_SENTINEL_PASSWORD)"),
                };
            }
            return Error::NoSentinel {
                sentinels,
                detail: last.unwrap_or_else(|| "no answer".into()),
            };
        };
        known.sort();
        known.dedup();
        if !known.contains(&self.master) {
            return Error::UnknownMaster {
                sentinels,
                master: self.master.clone(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                },
            };
        }
        match err {
            Some(err)
                if err.kind() == ErrorKind::AuthenticationFailed
                    || matches!(err.code(), Some("NOAUTH" | "WRONGPASS")) =>
            {
                Error::Auth {
                    endpoint: format!("the primary of {} ({})", self.master, self.endpoint),
                    detail: format!(
                        "user {:?}: {}",
                        self.user(),
                        err.detail().unwrap_or("invalid username-password pair")
                    ),
                }
            }
            Some(err) if acl_denial(&err).is_some() => Error::Denied {
                on: format!("the primary of {} ({})", self.master, self.endpoint),
                op: "connect",
                user: self.user().to_string(),
                detail: acl_denial(&err).unwrap_or_default(),
            },
            Some(err) if tls_problem(&err).is_some() => Error::Tls {
                endpoint: format!("the primary of {} ({})", self.master, self.endpoint),
                problem: tls_problem(&err).expect("checked above"),
                source: err,
            },
            Some(err) => Error::Unavailable(format!(
                "{}: the Sentinels know {:?} but name no primary that answers ({err}); a \
                 failover may be under way",
                self.endpoint, self.master
            )),
            None => Error::Unavailable(format!(
                "{}: timed out asking the Sentinels for the primary of {:?}",
                self.endpoint, self.master
            )),
        }
    }

    /// The master names one Sentinel monitors.
    async fn masters_of(&self, host: &str, port: u16) -> RedisResult<Vec<String>> {
        let mut info = ConnectionAddr::Tcp(host.to_string(), port).into_connection_info()?;
        if let Some(password) = &self.password {
            let settings = info.redis_settings().clone().set_password(password.clone());
            info = info.set_redis_settings(settings);
        }
        let client = Client::open(info)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let masters: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("MASTERS")
            .query_async(&mut conn)
            .await?;
        Ok(masters
            .into_iter()
            .filter_map(|mut m| m.remove("name"))
            .collect())
    }
}

fn value_readonly(v: &Value) -> bool {
    match v {
        Value::ServerError(e) => is_readonly(&RedisError::from(e.clone())),
        _ => false,
    }
}

/// The connection is gone or hangs: the node may be down.
pub(crate) fn connection_lost(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
}

/// Commands that change nothing, so running them twice is harmless.
const READS: &[&str] = &[
    "PING", "TYPE", "HGETALL", "HGET", "ZRANGE", "ZSCORE", "ZCARD", "LRANGE", "LLEN", "EXISTS",
    "TIME", "WAIT", "ROLE", "INFO", "SCRIPT",
];

/// No write of `pipeline` got a reply other than an error: none of them ran.
fn nothing_written(pipeline: &Pipeline, replies: &[Value]) -> bool {
    pipeline.cmd_iter().zip(replies).all(|(cmd, reply)| {
        let name = match cmd.args_iter().next() {
            Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_ascii_uppercase(),
            _ => String::new(),
        };
        READS.contains(&name.as_str()) || matches!(reply, Value::ServerError(_))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_addresses_are_host_and_port() {
        assert_eq!(parse_addr("10.0.0.1:26380"), Ok(("10.0.0.1".into(), 26380)));
        assert_eq!(parse_addr(" sentinel-0 "), Ok(("sentinel-0".into(), 26379)));
        assert_eq!(parse_addr("[::1]:5000"), Ok(("::1".into(), 5000)));
        assert!(
            parse_addr("h:99999")
                .unwrap_err()
                .contains("port \"99999\"")
        );
        assert!(parse_addr("redis://h:1").unwrap_err().contains("not a URL"));
        assert!(parse_addr(":1").unwrap_err().contains("no host"));
    }

    #[test]
    fn a_pipeline_is_resent_only_when_no_write_ran() {
        let readonly = || {
            redis::parse_redis_value(b"-READONLY You can't write against a read only replica.\r\n")
                .unwrap()
        };
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA").arg("abc").arg(0);
        pipe.cmd("WAIT").arg(1).arg(100);
        assert!(nothing_written(&pipe, &[readonly(), readonly()]));
        assert!(!nothing_written(&pipe, &[Value::Int(1), readonly()]));
        let mut reads = redis::pipe();
        reads.cmd("TYPE").arg("k");
        reads.cmd("EVALSHA").arg("abc").arg(0);
        assert!(nothing_written(&reads, &[Value::Okay, readonly()]));
        assert!(value_readonly(&readonly()));
    }
}
