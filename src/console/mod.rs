//! The web console (`jobqueue ui`): the queues of one Redis, or of a cluster's JobQueues,
//! as pages and a small JSON API, served by the binary itself.
//!
//! - `source`: which queues there are (a scan for queue keys, the tags given, or the
//!   JobQueues of a Kubernetes cluster with the Secrets their specs name).
//! - `refresher`: the one task that calls `stats` once per queue per interval and keeps
//!   the snapshot every page and API call reads, so the Redis cost does not grow with the
//!   number of open tabs.
//! - `api`: the routes: pages, `/api/…` JSON, the payload download, the writes.
//! - `guard`: what keeps it safe: the Host check, the bearer token and its login cookie,
//!   the CSRF token of writes, the security headers.
//!
//! The pages are one static HTML shell, a stylesheet and a plain script under `assets/`,
//! embedded with `include_str!`: nothing is fetched from elsewhere, and every value is
//! put into the page as text (`textContent`), never as markup.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub mod api;
pub mod guard;
pub mod ops;
pub mod refresher;
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
}

/// What the handlers share.
pub struct Console {
    pub config: Config,
    pub source: Source,
    pub snapshot: refresher::Shared,
    /// The token every POST carries in `X-CSRF-Token`, new at each start.
    pub csrf: String,
    /// The value of the login cookie, new at each start (not the token itself).
    pub session: String,
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
        session: crate::queue::new_token(),
    });
    spawn_refresher(console.clone(), shutdown.clone());
    let app = api::router(console);
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the console's HTTP server stopped");
        }
    });
    Ok((addr, task))
}
