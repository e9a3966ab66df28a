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

    /// Redis's ACL refused a command or a key to the connection's user (`NOPERM`).
    /// Nothing is retried: the user's rules must change (see docs/operations.md).
    #[error(
        "{on}: {op} denied by the ACL of Redis user {user:?}: {detail} (the user lacks a \
         command or the key pattern of this queue; the server's ACL LOG names which)"
    )]
    Denied {
        /// The queue (`jq:{emails}`) or, while connecting, the redacted endpoint.
        on: String,
        /// The command or script refused (`claim`, `TYPE`, `BLPOP wake`, `connect`).
        op: &'static str,
        user: String,
        /// Redis's words, without the script location.
        detail: String,
    },

    /// The TLS handshake failed over a certificate, the server's or this client's.
    #[error("TLS with Redis at {endpoint} failed: {problem}")]
    Tls {
        endpoint: String,
        problem: TlsProblem,
        #[source]
        source: RedisError,
    },

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

/// What went wrong with the certificates of a TLS connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProblem {
    /// The server's certificate is not signed by a CA this client trusts.
    UnknownServerCa,
    /// The server's certificate does not name the host of the URL (or the TLS server
    /// name given in its place).
    ServerNameMismatch,
    /// The server's certificate is expired, not yet valid, or otherwise unusable.
    BadServerCert,
    /// The server requires a client certificate and none was given.
    ClientCertRequired,
    /// The server refused the client certificate (unknown CA, expired, wrong usage).
    ClientCertRejected,
}

impl TlsProblem {
    /// True when the server refused this client (its certificate is the credential);
    /// false when this client refused the server.
    pub fn is_client_side(self) -> bool {
        matches!(
            self,
            TlsProblem::ClientCertRequired | TlsProblem::ClientCertRejected
        )
    }
}

impl std::fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsProblem::UnknownServerCa => {
                "the server's certificate is not signed by a CA this client trusts (give the \
                 CA that signs it: --tls-ca, or the CA certificate of the JobQueue)"
            }
            TlsProblem::ServerNameMismatch => {
                "the server's certificate is not valid for the host of the URL, or for the TLS \
                 server name when one is given (connect by a name or IP address that its \
                 subjectAltName lists, or give such a name as the TLS server name: \
                 --tls-server-name, spec.redis.tls.serverName)"
            }
            TlsProblem::BadServerCert => {
                "the server's certificate is not valid (expired, not yet valid, or not meant \
                 for a server)"
            }
            TlsProblem::ClientCertRequired => {
                "the server requires a client certificate (tls-auth-clients): give one with \
                 --tls-cert and --tls-key"
            }
            TlsProblem::ClientCertRejected => {
                "the server rejected the client certificate (not signed by a CA the server \
                 trusts in tls-ca-cert-file, expired, or not meant for a client)"
            }
        })
    }
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
        if let Some(detail) = acl_denial(&err) {
            return Error::Denied {
                on: queue.to_string(),
                op,
                user: String::new(),
                detail,
            };
        }
        if is_readonly(&err) {
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

impl Error {
    /// Name the ACL user in a [`Error::Denied`] made where the user was not known.
    pub fn with_user(self, who: &str) -> Error {
        match self {
            Error::Denied {
                on,
                op,
                user,
                detail,
            } if user.is_empty() => Error::Denied {
                on,
                op,
                user: who.to_string(),
                detail,
            },
            other => other,
        }
    }
}

/// Redis's ACL refused the command: `NOPERM` for a command sent directly, an `ERR` with
/// "The user executing the script can't ..." for one a script calls. Redis's words,
/// without the script location that follows them.
pub(crate) fn acl_denial(err: &RedisError) -> Option<String> {
    // A pipeline's error keeps its words in the failed command's server error.
    let from_pipeline = match err.detail() {
        Some(_) => None,
        None => err
            .clone()
            .into_server_errors()
            .and_then(|errors| Some(errors.first()?.1.details()?.to_string())),
    };
    let detail = err
        .detail()
        .or(from_pipeline.as_deref())
        .unwrap_or_default();
    let denied = err.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || err.code() == Some("NOPERM")
        || detail.contains("The user executing the script can't");
    if !denied {
        return None;
    }
    let detail = match detail.find(" script: ") {
        Some(end) => &detail[..end],
        None => detail,
    };
    Some(detail.trim().to_string())
}

/// The certificate problem behind a failed TLS connection, if that is what failed: read
/// from the rustls error inside, or from its words when it comes wrapped.
pub(crate) fn tls_problem(err: &RedisError) -> Option<TlsProblem> {
    use std::error::Error as _;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = err.source();
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return tls_problem_of(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(tls) = inner.downcast_ref::<rustls::Error>()
        {
            return tls_problem_of(tls);
        }
        cause = e.source();
    }
    tls_problem_in_words(&err.to_string())
}

fn tls_problem_of(err: &rustls::Error) -> Option<TlsProblem> {
    use rustls::{AlertDescription as A, CertificateError as C};
    Some(match err {
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            TlsProblem::UnknownServerCa
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => TlsProblem::ServerNameMismatch,
        rustls::Error::InvalidCertificate(_) => TlsProblem::BadServerCert,
        rustls::Error::AlertReceived(A::CertificateRequired) => TlsProblem::ClientCertRequired,
        rustls::Error::AlertReceived(
            A::UnknownCA
            | A::BadCertificate
            | A::CertificateUnknown
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::UnsupportedCertificate
            | A::DecryptError
            | A::AccessDenied,
        ) => TlsProblem::ClientCertRejected,
        _ => return None,
    })
}

/// The same, from the words of rustls's messages (`invalid peer certificate:
/// UnknownIssuer`, `received fatal alert: CertificateRequired`).
fn tls_problem_in_words(text: &str) -> Option<TlsProblem> {
    if text.contains("invalid peer certificate") {
        return Some(
            if text.contains("UnknownIssuer") || text.contains("BadSignature") {
                TlsProblem::UnknownServerCa
            } else if text.contains("NotValidForName") || text.contains("not valid for name") {
                TlsProblem::ServerNameMismatch
            } else {
                TlsProblem::BadServerCert
            },
        );
    }
    let alert = text.split("received fatal alert: ").nth(1)?;
    if alert.starts_with("CertificateRequired") {
        return Some(TlsProblem::ClientCertRequired);
    }
    [
        "UnknownCA",
        "BadCertificate",
        "CertificateUnknown",
        "CertificateExpired",
        "CertificateRevoked",
        "UnsupportedCertificate",
        "DecryptError",
        "AccessDenied",
    ]
    .iter()
    .any(|a| alert.starts_with(a))
    .then_some(TlsProblem::ClientCertRejected)
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

/// The reply says the node is a replica (`READONLY`), also from inside a script.
pub(crate) fn is_readonly(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
        || err.code() == Some("READONLY")
        || err
            .detail()
            .is_some_and(|d| d.contains("READONLY You can't write against a read only replica"))
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
    fn acl_refusals_are_recognised_with_or_without_a_script() {
        let server = |code: &str, detail: &str| -> RedisError {
            let kind = match code {
                "NOPERM" => ServerErrorKind::NoPerm,
                _ => ServerErrorKind::ResponseError,
            };
            (ErrorKind::Server(kind), "server error", detail.to_string()).into()
        };
        let direct = server(
            "NOPERM",
            "this user has no permissions to run the 'evalsha' command",
        );
        assert_eq!(
            acl_denial(&direct).as_deref(),
            Some("this user has no permissions to run the 'evalsha' command")
        );
        let scripted = server(
            "ERR",
            "The user executing the script can't run this command or subcommand script: \
             55d4f4a5, on @user_script:1.",
        );
        assert_eq!(
            acl_denial(&scripted).as_deref(),
            Some("The user executing the script can't run this command or subcommand")
        );
        assert_eq!(acl_denial(&server("ERR", "jobqueue: invalid n: 0")), None);
        let err = Error::from_redis("jq:{a}", "claim", direct).with_user("w");
        assert!(
            matches!(&err, Error::Denied { user, op: "claim", .. } if user == "w"),
            "{err:?}"
        );
        assert!(!err.is_transient());
    }

    #[test]
    fn tls_failures_are_read_from_rustls_words() {
        let cases = [
            (
                "invalid peer certificate: UnknownIssuer",
                Some(TlsProblem::UnknownServerCa),
            ),
            (
                "invalid peer certificate: NotValidForNameContext { expected: .. }",
                Some(TlsProblem::ServerNameMismatch),
            ),
            (
                "invalid peer certificate: Expired",
                Some(TlsProblem::BadServerCert),
            ),
            (
                "received fatal alert: CertificateRequired",
                Some(TlsProblem::ClientCertRequired),
            ),
            (
                "received fatal alert: UnknownCA",
                Some(TlsProblem::ClientCertRejected),
            ),
            (
                "received fatal alert: BadCertificate",
                Some(TlsProblem::ClientCertRejected),
            ),
            ("received fatal alert: HandshakeFailure", None),
            ("Connection refused (os error 111)", None),
        ];
        for (text, want) in cases {
            assert_eq!(tls_problem_in_words(text), want, "{text}");
        }
        assert!(TlsProblem::ClientCertRejected.is_client_side());
        assert!(!TlsProblem::UnknownServerCa.is_client_side());
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
