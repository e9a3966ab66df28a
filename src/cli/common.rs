//! What the operations subcommands share: opening a queue, signals, usage errors.

use super::ConnectArgs;
use crate::queue::{Error, Queue};

/// Stopped by Ctrl-C or SIGTERM before the work was finished.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {0}")]
pub struct Interrupted(pub &'static str);

/// Flags that make sense one by one but not together (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Connect and check that each of the queue's keys is absent or of its protocol type, so
/// that a key written by something else is reported by name before anything is done.
pub async fn open(connect: &ConnectArgs) -> anyhow::Result<Queue> {
    let queue = connect.queue().await?;
    queue.check_key_types().await?;
    Ok(queue)
}

/// Resolves on Ctrl-C or SIGTERM, naming which.
pub async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => "Ctrl-C",
            _ = term.recv() => "SIGTERM",
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// Redis's clock in milliseconds (the clock every lease and time of the queue uses).
pub async fn redis_now_ms(queue: &Queue) -> anyhow::Result<i64> {
    let mut conn = queue.redis().clone();
    let (secs, micros): (i64, i64) =
        redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::Redis {
                queue: queue.name().to_string(),
                op: "TIME",
                source: e,
            })?;
    Ok(secs * 1000 + micros / 1000)
}
