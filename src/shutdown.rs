//! Waiting for the signals that ask a long-running command to stop: SIGTERM (Kubernetes,
//! systemd, `kill`) and SIGINT (Ctrl-C). The worker runtime, the operator and the CLI's
//! watch loops all wait here; this module uses nothing else of the crate, so any of
//! them may import it.

use std::fmt;

use tracing::warn;

/// Which signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM.
    Terminate,
    /// SIGINT: Ctrl-C at a terminal.
    Interrupt,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
        })
    }
}

/// A listener for SIGTERM and SIGINT. It sees every signal from its creation on, so a
/// caller that waits for a second signal keeps one `Signals` rather than asking twice.
pub struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Listen from now on. A signal that cannot be listened for is logged and left to
    /// its default action (the process ends).
    pub fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(err) => {
                    warn!(error = %err, "cannot listen for {name}");
                    None
                }
            };
            Signals {
                term: listen(SignalKind::terminate(), "SIGTERM"),
                int: listen(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next signal.
    pub async fn recv(&mut self) -> Signal {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = next(&mut self.term) => Signal::Terminate,
                _ = next(&mut self.int) => Signal::Interrupt,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Interrupt
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Signals::new()
    }
}

/// Resolves on the next SIGTERM or SIGINT (Ctrl-C), naming which. It listens from the
/// call on, not from the first poll: a signal that arrives before the future is first
/// awaited (or before the task it was moved into runs) is seen, not left to its
/// default action. Call it within the Tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = Signal> + Send + 'static {
    let mut signals = Signals::new();
    async move { signals.recv().await }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// One test for every signal this process raises: two tests raising signals side
    /// by side would each see the other's.
    #[tokio::test]
    async fn each_signal_is_seen_and_named() {
        // Listening from the call, not from the first poll.
        let before_the_first_poll = shutdown_signal();
        // SAFETY: raise has no memory effects; the listener above handles the signal.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        let seen = tokio::time::timeout(std::time::Duration::from_secs(30), before_the_first_poll)
            .await
            .expect("a SIGTERM before the first poll is seen");
        assert_eq!(seen, Signal::Terminate);

        let mut signals = Signals::new();
        // SAFETY: raise has no memory effects; the listener above handles the signal.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        assert_eq!(signals.recv().await, Signal::Terminate);
        assert_eq!(unsafe { libc::raise(libc::SIGINT) }, 0);
        assert_eq!(signals.recv().await, Signal::Interrupt);
        assert_eq!(Signal::Terminate.to_string(), "SIGTERM");
        assert_eq!(Signal::Interrupt.to_string(), "SIGINT");
    }
}
