//! What the operations subcommands share: opening a queue, signals, usage errors.

use super::ConnectArgs;
use crate::queue::Queue;
use crate::shutdown::Signal;

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

/// Resolves on Ctrl-C or SIGTERM, naming which as a person at the terminal says it.
pub async fn stop_signal() -> &'static str {
    match crate::shutdown::shutdown_signal().await {
        Signal::Interrupt => "Ctrl-C",
        Signal::Terminate => "SIGTERM",
    }
}
