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

/// A note on stderr when none of the queue's keys exist (a mistyped tag or prefix reads
/// as an empty queue otherwise); not an error: a new queue is empty too.
pub async fn note_if_absent(queue: &Queue) -> anyhow::Result<()> {
    if !queue.exists().await? {
        eprintln!(
            "note: no queue exists at {} (none of its keys are in Redis): check --tag and --prefix",
            queue.name()
        );
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM, naming which as a person at the terminal says it.
pub async fn stop_signal() -> &'static str {
    match crate::shutdown::shutdown_signal().await {
        Signal::Interrupt => "Ctrl-C",
        Signal::Terminate => "SIGTERM",
    }
}
