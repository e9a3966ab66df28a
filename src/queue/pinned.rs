//! A standalone server reached at one address and verified under another name: TLS with
//! a server-name override (`--tls-server-name`, `spec.redis.tls.serverName`).
//!
//! redis-rs checks the server's certificate against (and sends as SNI) the host of the
//! connection address, and resolves that same host to connect. So the address given to
//! redis-rs names the server name, and a resolver of this module turns any name it is
//! asked for into the addresses of the URL's real host. `ConnectionManager` takes no
//! resolver, so this target keeps its own multiplexed connection: a command that finds
//! the connection broken (or timed out) drops it, and the next command connects again.
//! As everywhere in `connection.rs`, nothing is sent twice behind the caller's back.

use std::net::SocketAddr;
use std::sync::Mutex;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::io::AsyncDNSResolver;
use redis::{
    AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value,
};

use super::sentinel::connection_lost;

/// Resolves every name to the addresses of `host` (the URL's host).
#[derive(Clone, Debug)]
pub(crate) struct PinnedResolver {
    pub host: String,
}

impl AsyncDNSResolver for PinnedResolver {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        _name: &'b str,
        port: u16,
    ) -> RedisFuture<'a, Box<dyn Iterator<Item = SocketAddr> + Send + 'a>> {
        Box::pin(async move {
            let host = self.host.trim_start_matches('[').trim_end_matches(']');
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
                .await
                .map_err(RedisError::from)?
                .collect();
            Ok(Box::new(addrs.into_iter()) as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

/// The connection in use and a count that changes with each new one.
struct Current {
    generation: u64,
    conn: Option<MultiplexedConnection>,
}

pub(crate) struct PinnedTarget {
    client: Client,
    resolver: PinnedResolver,
    /// Carries the resolver.
    config: AsyncConnectionConfig,
    current: Mutex<Current>,
    /// One connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
}

impl PinnedTarget {
    /// `client` names the server name; `resolver` maps it to the URL's host; `config`
    /// sets the timeouts.
    pub(crate) fn new(
        client: Client,
        resolver: PinnedResolver,
        config: AsyncConnectionConfig,
    ) -> PinnedTarget {
        PinnedTarget {
            client,
            config: config.set_dns_resolver(resolver.clone()),
            resolver,
            current: Mutex::new(Current {
                generation: 0,
                conn: None,
            }),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection, made now when there is none.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        {
            let current = self.current();
            if let Some(conn) = &current.conn {
                return Ok((current.generation, conn.clone()));
            }
        }
        let _one = self.connecting.lock().await;
        {
            let current = self.current();
            if let Some(conn) = &current.conn {
                return Ok((current.generation, conn.clone()));
            }
        }
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let mut current = self.current();
        current.generation += 1;
        current.conn = Some(conn.clone());
        Ok((current.generation, conn))
    }

    /// Drop connection `generation` after `err`, when `err` says it is gone.
    fn after(&self, generation: u64, err: &RedisError) {
        if connection_lost(err) {
            let mut current = self.current();
            if current.generation == generation {
                current.conn = None;
                tracing::debug!(error = %err, "connection to Redis lost; the next command connects again");
            }
        }
    }

    pub(crate) async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (generation, mut conn) = self.connection().await?;
        let reply = conn.req_packed_command(cmd).await;
        if let Err(err) = &reply {
            self.after(generation, err);
        }
        reply
    }

    pub(crate) async fn pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (generation, mut conn) = self.connection().await?;
        let reply = conn.req_packed_commands(pipeline, offset, count).await;
        if let Err(err) = &reply {
            self.after(generation, err);
        }
        reply
    }

    /// A connection of its own (for blocking commands), with `config`'s timeouts.
    pub(crate) async fn dedicated(
        &self,
        config: AsyncConnectionConfig,
    ) -> RedisResult<MultiplexedConnection> {
        let config = config.set_dns_resolver(self.resolver.clone());
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }
}
