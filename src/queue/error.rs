//! The one error type of the queue client.
//!
//! Every variant says what failed and where: which queue (`jq:{emails}`), which key, which
//! script. Connection URLs appear only in their redacted form (no password).

use redis::{ErrorKind, RedisError, ServerErrorKind};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Redis URL could not be parsed or names an unsupported scheme.
    #[error("invalid Redis URL {url}: {reason}")]
    InvalidUrl { url: String, reason: String },

    /// No connection could be made to the endpoint.
    #[error("cannot connect to Redis at {endpoint}: {source}{hint}")]
    Connect {
        endpoint: String,
        #[source]
        source: RedisError,
        /// The likely cause, when the failure suggests one (` (is the server using
        /// TLS? ...)`); empty otherwise.
        hint: String,
    },

    /// The server refused the credentials.
    #[error("Redis at {endpoint} refused authentication: {detail}")]
    Auth { endpoint: String, detail: String },

    /// A key of the queue holds a value of the wrong type; nothing was changed.
    #[error("queue {queue}: key {key} holds the wrong type: {detail}")]
    WrongType {
        queue: String,
        key: String,
        detail: String,
    },

    /// A script rejected its arguments; nothing was changed.
    #[error("queue {queue}: script {script} rejected the call: {detail}")]
    Rejected {
        queue: String,
        script: &'static str,
        detail: String,
    },

    /// An argument was refused before anything was sent to Redis.
    #[error("invalid {what}: {reason}")]
    InvalidArgument { what: &'static str, reason: String },

    /// Redis failed the command (connection lost, timeout, cluster error, ...).
    #[error("queue {queue}: {op} failed: {source}")]
    Redis {
        queue: String,
        op: &'static str,
        #[source]
        source: RedisError,
    },

    /// A reply did not have the shape the protocol promises.
    #[error("queue {queue}: unexpected reply from {op}: {detail}")]
    Protocol {
        queue: String,
        op: &'static str,
        detail: String,
    },

    /// Redis did not answer in time while connecting.
    #[error("cannot reach Redis at {0}")]
    Unavailable(String),

    /// None of the Sentinels given answered.
    #[error("no Sentinel reachable at {sentinels}: {detail}")]
    NoSentinel { sentinels: String, detail: String },

    /// The Sentinels answered, but none monitors a master of that name.
    #[error(
        "the Sentinels at {sentinels} monitor no master named {master:?} (they monitor: {known}); check --master-name"
    )]
    UnknownMaster {
        sentinels: String,
        master: String,
        known: String,
    },

    /// The server is a replica: it refused a write (`READONLY`); nothing was changed.
    #[error(
        "queue {queue}: {op} refused: the Redis server is a read-only replica, not the primary \
         (READONLY); point --redis at the primary, or use --sentinel to follow failovers"
    )]
    ReadOnly { queue: String, op: &'static str },

    /// Under `replicated` durability: the write ran on the primary, but fewer replicas
    /// than asked confirmed it in time.
    #[error(
        "queue {queue}: {op} ran on the primary but only {acked} of {wanted} replica(s) \
         confirmed it within {timeout_ms}ms: it may be lost if the primary fails now, and \
         sending it again may run it twice"
    )]
    NotReplicated {
        queue: String,
        op: &'static str,
        acked: i64,
        wanted: u32,
        timeout_ms: u64,
    },
}

impl Error {
    /// True when the failure is about reaching Redis (worth a reconnect and a retry),
    /// false when retrying the same call would fail the same way.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::Unavailable(_) | Error::NoSentinel { .. } => true,
            Error::Redis { source, .. } => is_transient_redis(source),
            _ => false,
        }
    }

    /// Classify a failure of a command sent for `queue`.
    pub(crate) fn from_redis(queue: &str, op: &'static str, err: RedisError) -> Error {
        if err.kind() == ErrorKind::AuthenticationFailed || err.code() == Some("NOAUTH") {
            return Error::Auth {
                endpoint: queue.to_string(),
                detail: err
                    .detail()
                    .unwrap_or("authentication required")
                    .to_string(),
            };
        }
        if super::sentinel::is_readonly(&err) {
            return Error::ReadOnly {
                queue: queue.to_string(),
                op,
            };
        }
        let detail = err.detail().unwrap_or_default().to_string();
        if err.code() == Some("WRONGTYPE") {
            return Error::WrongType {
                queue: queue.to_string(),
                key: String::from("(unknown)"),
                detail: format!("{op}: {detail}"),
            };
        }
        if err.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
            && let Some(rest) = find_jobqueue_message(&detail)
        {
            if let Some(key) = wrong_type_key(rest) {
                return Error::WrongType {
                    queue: queue.to_string(),
                    key,
                    detail: rest.to_string(),
                };
            }
            return Error::Rejected {
                queue: queue.to_string(),
                script: op,
                detail: rest.to_string(),
            };
        }
        Error::Redis {
            queue: queue.to_string(),
            op,
            source: err,
        }
    }
}

fn is_transient_redis(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_cluster_error()
        || matches!(
            err.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::MasterNameNotFoundBySentinel
                | ErrorKind::Server(ServerErrorKind::BusyLoading)
                | ErrorKind::Server(ServerErrorKind::TryAgain)
                | ErrorKind::Server(ServerErrorKind::MasterDown)
                | ErrorKind::Server(ServerErrorKind::ClusterDown)
        )
}

/// The scripts prefix their own errors with `jobqueue:`; Redis may wrap them in script
/// location text, so find the marker anywhere.
fn find_jobqueue_message(detail: &str) -> Option<&str> {
    let at = detail.find("jobqueue:")?;
    let rest = detail[at + "jobqueue:".len()..].trim();
    // Redis 7 may append " script: <sha>, on @user_script:..." to error replies.
    Some(match rest.find(" script: ") {
        Some(end) => rest[..end].trim_end_matches(['.', ',', ' ']),
        None => rest,
    })
}

/// `key <name> holds the wrong type ...` → `<name>`.
fn wrong_type_key(message: &str) -> Option<String> {
    if !message.contains("wrong type") {
        return None;
    }
    let after = message.split_once("key ")?.1;
    let key = after.split_whitespace().next()?;
    Some(key.trim_end_matches([',', ':']).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_messages_are_found_and_trimmed() {
        assert_eq!(
            find_jobqueue_message("jobqueue: invalid n: 0"),
            Some("invalid n: 0")
        );
        assert_eq!(
            find_jobqueue_message("jobqueue: invalid n: x script: abc, on @user_script:12."),
            Some("invalid n: x")
        );
        assert_eq!(find_jobqueue_message("something else"), None);
    }

    #[test]
    fn wrong_type_messages_name_the_key() {
        assert_eq!(
            wrong_type_key("key jq:{a}:pending holds the wrong type (hash), expected list"),
            Some("jq:{a}:pending".to_string())
        );
        assert_eq!(wrong_type_key("invalid n: 0"), None);
    }
}
