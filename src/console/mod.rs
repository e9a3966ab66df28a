//! The web console (`jobqueue ui`): the queues of one Redis, or of a cluster's JobQueues,
//! as pages and a small JSON API, served by the binary itself.
//!
//! - `source`: which queues there are (a scan for queue keys, the tags given, or the
//!   JobQueues of a Kubernetes cluster with the Secrets their specs name).
//! - `refresher`: the one task that calls `stats` once per queue per interval and keeps
//!   the snapshot every page and API call reads, so the Redis cost does not grow with the
//!   number of open tabs.
//! - `api`: the routes: pages, `/api/…` JSON, the payload download, the writes.
//! - `live`: how old each queue's counts are, the health rule, the outage banner, and
//!   the Redis servers' own health (memory, eviction policy, persistence, clients).
//! - `guard`: what keeps it safe: the Host check, the bearer token and its login cookie,
//!   the CSRF token of writes, the security headers.
//! - `server`: the HTTP server, with header and request timeouts and a cap on
//!   connections; `session`, `auth`: logins, sessions, logout; `errors`: every API error
//!   as JSON; `audit`: the audit log of writes, logins and outages.
//!
//! The pages are one static HTML shell, a stylesheet and a plain script under `assets/`,
//! embedded with `include_str!`: nothing is fetched from elsewhere, and every value is
//! put into the page as text (`textContent`), never as markup.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub mod api;
pub mod audit;
pub mod auth;
pub mod dead;
pub mod errors;
pub mod guard;
pub mod live;
pub mod ops;
pub mod refresher;
pub mod server;
pub mod session;
pub mod source;

pub use refresher::{Snapshot, spawn_refresher};
pub use source::Source;

/// How the console runs.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Offer and accept redrive and purge (POSTs with the CSRF token).
    pub allow_writes: bool,
    /// A bearer token every request must carry (or the login cookie it gives).
    pub token: Option<String>,
    /// How often the one refresher calls `stats` for each queue.
    pub refresh: Duration,
    /// How long the rates' history goes back.
    pub history: Duration,
    /// How long a client may take to send a request's headers, and how long an idle
    /// connection is kept (see `server`).
    pub client_timeout: Duration,
    /// The most connections at once (see `server::default_max_connections`).
    pub max_connections: usize,
}

/// What the handlers share.
pub struct Console {
    pub config: Config,
    pub source: Source,
    pub snapshot: refresher::Shared,
    /// The token every POST carries in `X-CSRF-Token`, new at each start.
    pub csrf: String,
    /// The sessions of logins (random ids, with expiry; never the token itself).
    pub sessions: session::Sessions,
    /// Failed logins, for their rate limit.
    pub logins: auth::Logins,
}

/// Bind `config.listen` now (a taken port fails at start), start the refresher, and serve
/// until `shutdown`. Returns the address bound (port 0 picks one) and the server task.
pub async fn serve(
    config: Config,
    source: Source,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr()?;
    let snapshot = refresher::Shared::default();
    let console = Arc::new(Console {
        config: Config {
            listen: addr,
            ..config
        },
        source,
        snapshot,
        csrf: crate::queue::new_token(),
        sessions: session::Sessions::default(),
        logins: auth::Logins::default(),
    });
    spawn_refresher(console.clone(), shutdown.clone());
    audit::spawn_outage_watch(console.clone(), shutdown.clone());
    let limits = server::Limits {
        client_timeout: console.config.client_timeout,
        max_connections: console.config.max_connections,
    };
    let app =
        api::router(console, ops::routes()).layer(axum::middleware::from_fn(errors::json_errors));
    let task = tokio::spawn(server::run(listener, app, limits, shutdown));
    Ok((addr, task))
}
