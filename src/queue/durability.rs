//! How sure a write must be before `enqueue`, `ack`, `fail`, `reap` and the claims
//! report success.

use std::time::Duration;

use super::error::{Error, Result};

/// The durability of a queue's writes, set on each [`super::Queue`] handle that writes
/// (producers and workers of the queue should use the same one).
///
/// - `Primary` (the default): a write succeeds once the primary ran it. Redis replicates
///   asynchronously, so a failover right after it can lose it (an enqueued job, an ack:
///   the job then runs again).
/// - `Replicated { replicas, timeout }`: after the script, on the same connection and in
///   the same round trip, `WAIT replicas timeout`; the write succeeds only when at least
///   `replicas` replicas confirmed it, otherwise it fails with
///   [`Error::NotReplicated`] (it ran on the primary, not confirmed replicated).
///   Sentinel promotes the most up-to-date replica, so with `replicas` at least 1 a
///   confirmed write survives the failover of the primary. Costs one replication round
///   trip per call (not per job: a batch of jobs waits once).
///
///   Claims (`claim`, `settle_claim`) wait too, so that a lease confirmed by the replicas
///   survives a failover and no second worker can claim the job while the first runs it.
///   A claim is never turned into an error by the wait: the leases it took are held on
///   the primary and must be run, so its answer carries them with [`Unconfirmed`]
///   ([`super::Claimed::unconfirmed`]); the acks and fails of a `settle_claim` are
///   reported the same way, as applied on the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    #[default]
    Primary,
    Replicated {
        replicas: u32,
        timeout: Duration,
    },
}

/// A call that ran on the primary but that fewer replicas than the durability asks for
/// confirmed within its timeout: what `WAIT` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unconfirmed {
    /// The replicas that confirmed the call in time.
    pub acked: i64,
    /// The replicas the durability asks for.
    pub wanted: u32,
    /// How long `WAIT` waited, in milliseconds.
    pub timeout_ms: u64,
}

impl Unconfirmed {
    /// The error a call that must be confirmed reports ([`Error::NotReplicated`]).
    pub fn into_error(self, queue: &str, op: &'static str) -> Error {
        Error::NotReplicated {
            queue: queue.to_string(),
            op,
            acked: self.acked,
            wanted: self.wanted,
            timeout_ms: self.timeout_ms,
        }
    }

    /// The worse of two shortfalls (fewer replicas confirmed), for a call made of several.
    pub fn worst(a: Option<Unconfirmed>, b: Option<Unconfirmed>) -> Option<Unconfirmed> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.acked < a.acked { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

impl std::fmt::Display for Unconfirmed {
    /// `only 0 of 1 replica(s) confirmed it within 50ms`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "only {} of {} replica(s) confirmed it within {}ms",
            self.acked, self.wanted, self.timeout_ms
        )
    }
}

/// The timeout of `replicated` when none is given.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(1);

impl std::str::FromStr for Durability {
    type Err = Error;

    /// `primary`, `replicated` (1 replica, 1s), `replicated:N` or `replicated:N:TIMEOUT`
    /// (e.g. `replicated:1:500ms`).
    fn from_str(text: &str) -> Result<Durability> {
        let bad = |reason: String| Error::InvalidArgument {
            what: "durability",
            reason,
        };
        let mut parts = text.trim().split(':');
        match parts.next().unwrap_or_default() {
            "primary" if parts.clone().next().is_none() => Ok(Durability::Primary),
            "replicated" => {
                let replicas = match parts.next() {
                    None => 1,
                    Some(n) => n.parse::<u32>().map_err(|_| {
                        bad(format!(
                            "{n:?} is not a replica count (write e.g. replicated:1:500ms)"
                        ))
                    })?,
                };
                if replicas == 0 {
                    return Err(bad(
                        "the replica count must be at least 1 (or use primary)".into()
                    ));
                }
                let timeout = match parts.next() {
                    None => DEFAULT_WAIT_TIMEOUT,
                    Some(t) => {
                        crate::duration::parse(t).map_err(|e| bad(format!("timeout {t:?}: {e}")))?
                    }
                };
                if timeout.as_millis() < 1 {
                    return Err(bad(
                        "the timeout must be at least 1ms (WAIT 0 would wait forever)".into(),
                    ));
                }
                if parts.next().is_some() {
                    return Err(bad(format!(
                        "{text:?}: write primary, replicated, replicated:N or replicated:N:TIMEOUT"
                    )));
                }
                Ok(Durability::Replicated { replicas, timeout })
            }
            _ => Err(bad(format!(
                "{text:?}: write primary, replicated, replicated:N or replicated:N:TIMEOUT \
                 (e.g. replicated:1:500ms)"
            ))),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Durability::Primary => f.write_str("primary"),
            Durability::Replicated { replicas, timeout } => {
                write!(f, "replicated:{replicas}:{}ms", timeout.as_millis())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_settings_read_and_print() {
        let parse = |t: &str| t.parse::<Durability>();
        assert_eq!(parse("primary").unwrap(), Durability::Primary);
        let one = Durability::Replicated {
            replicas: 1,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(parse("replicated").unwrap(), one);
        assert_eq!(parse("replicated:1").unwrap(), one);
        let two = parse("replicated:2:500ms").unwrap();
        assert_eq!(
            two,
            Durability::Replicated {
                replicas: 2,
                timeout: Duration::from_millis(500)
            }
        );
        assert_eq!(two.to_string(), "replicated:2:500ms");
        assert_eq!(parse(&two.to_string()).unwrap(), two);
        for bad in [
            "",
            "sync",
            "replicated:0",
            "replicated:x",
            "replicated:1:0ms",
            "replicated:1:5",
            "replicated:1:1s:2",
            "primary:1",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid durability"), "{bad}: {err}");
        }
    }
}
