//! What went wrong, in words for the status: a queue client error becomes a condition
//! reason and a message ([`classify`]), a Kubernetes API error the API server's own
//! message ([`kube_reason`]). Pure; no message ever holds a secret.

use super::status::{Failure, reasons};
use crate::queue::Error as QueueError;

/// A queue client error as a condition reason and message. The client's messages hold
/// only redacted URLs.
pub fn classify(e: &QueueError) -> Failure {
    let (reason, redis_reached) = match e {
        QueueError::Connect { .. } | QueueError::Unavailable(_) => {
            (reasons::REDIS_UNREACHABLE, false)
        }
        QueueError::Redis { .. } if e.is_transient() => (reasons::REDIS_UNREACHABLE, false),
        QueueError::Auth { .. } => (reasons::AUTH_FAILED, false),
        // Redis answered, and said no: the user's ACL must change.
        QueueError::Denied { .. } => (reasons::ACL_DENIED, true),
        QueueError::Tls { .. } => (reasons::TLS_REJECTED, false),
        QueueError::InvalidUrl { .. } => (reasons::INVALID_URL, false),
        QueueError::WrongType { .. } => (reasons::WRONG_TYPE, true),
        QueueError::InvalidArgument { .. } => (reasons::INVALID_SPEC, false),
        QueueError::Redis { .. } | QueueError::Rejected { .. } | QueueError::Protocol { .. } => {
            (reasons::REDIS_ERROR, true)
        }
        QueueError::NoSentinel { .. } => (reasons::SENTINEL_UNREACHABLE, false),
        QueueError::UnknownMaster { .. } => (reasons::UNKNOWN_MASTER, false),
        QueueError::ReadOnly { .. } => (reasons::READ_ONLY, true),
        QueueError::NotReplicated { .. } => (reasons::NOT_REPLICATED, true),
    };
    Failure {
        reason,
        message: in_spec_words(e),
        redis_reached,
    }
}

/// The client's message, with the fixes it suggests in the CLI's words (`--master-name`)
/// said in the spec's (`spec.redis.sentinel.masterName`).
fn in_spec_words(e: &QueueError) -> String {
    match e {
        QueueError::UnknownMaster {
            sentinels,
            master,
            known,
        } => format!(
            "the Sentinels at {sentinels} monitor no master named {master:?} (they monitor: \
             {known}); check spec.redis.sentinel.masterName"
        ),
        QueueError::NoSentinel { sentinels, detail } => {
            format!("no Sentinel of spec.redis.sentinel.addresses answered ({sentinels}): {detail}")
        }
        QueueError::ReadOnly { queue, op } => format!(
            "queue {queue}: {op} refused: the Redis server is a read-only replica, not the \
             primary (READONLY); point spec.redis.url at the primary, or use \
             spec.redis.sentinel to follow failovers"
        ),
        QueueError::NotReplicated {
            queue,
            op,
            acked,
            wanted,
            timeout_ms,
        } => format!(
            "queue {queue}: {op} ran on the primary but only {acked} of {wanted} replica(s) \
             confirmed it within {timeout_ms}ms (spec.durability): check that the replicas \
             are up and linked to the primary, or lower spec.durability.replicas"
        ),
        // A Sentinel refused its password: the spec's field, not the CLI's variable.
        QueueError::Auth { .. } => e.to_string().replace(
            "JOBQUEUE_SENTINEL_PASSWORD",
            "spec.redis.sentinel.passwordSecretRef",
        ),
        other => other.to_string(),
    }
}

/// The API server's own words for a failed call (its Status message), or the error.
pub fn kube_reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_errors_become_reasons() {
        let wrong = QueueError::WrongType {
            queue: "jq:{a}".into(),
            key: "jq:{a}:pending".into(),
            detail: "key jq:{a}:pending holds a hash, expected a list".into(),
        };
        let f = classify(&wrong);
        assert_eq!((f.reason, f.redis_reached), ("WrongType", true));
        let auth = QueueError::Auth {
            endpoint: "redis://u:***@h:1".into(),
            detail: "invalid username-password pair".into(),
        };
        let f = classify(&auth);
        assert_eq!(f.reason, "AuthFailed");
        assert!(f.message.contains("redis://u:***@h:1"), "{}", f.message);
        let gone = QueueError::Unavailable("redis://h:1: timed out connecting".into());
        assert_eq!(classify(&gone).reason, "RedisUnreachable");
        let denied = QueueError::Denied {
            on: "jq:{a}".into(),
            op: "claim",
            user: "worker".into(),
            detail: "this user has no permissions to run the 'evalsha' command".into(),
        };
        let f = classify(&denied);
        assert_eq!((f.reason, f.redis_reached), ("AclDenied", true));
        assert!(f.message.contains("\"worker\""), "{}", f.message);
        let tls = QueueError::Tls {
            endpoint: "rediss://h:1".into(),
            problem: crate::queue::TlsProblem::ClientCertRequired,
            source: redis::RedisError::from((redis::ErrorKind::Io, "alert")),
        };
        let f = classify(&tls);
        assert_eq!((f.reason, f.redis_reached), ("TlsRejected", false));
        assert!(
            f.message.contains("requires a client certificate"),
            "{}",
            f.message
        );
    }

    #[test]
    fn sentinel_and_replication_errors_have_reasons_of_their_own() {
        let none = QueueError::NoSentinel {
            sentinels: "s-0:26379,s-1:26379".into(),
            detail: "s-1:26379: Connection refused".into(),
        };
        let f = classify(&none);
        assert_eq!((f.reason, f.redis_reached), ("SentinelUnreachable", false));
        assert!(f.message.contains("s-0:26379,s-1:26379"), "{}", f.message);
        assert!(
            f.message.contains("spec.redis.sentinel.addresses"),
            "{}",
            f.message
        );

        let unknown = QueueError::UnknownMaster {
            sentinels: "s-0:26379".into(),
            master: "mymastr".into(),
            known: "mymaster".into(),
        };
        let f = classify(&unknown);
        assert_eq!((f.reason, f.redis_reached), ("UnknownMaster", false));
        assert!(
            f.message.contains("\"mymastr\"")
                && f.message.contains("they monitor: mymaster")
                && f.message.contains("spec.redis.sentinel.masterName")
                && !f.message.contains("--master-name"),
            "{}",
            f.message
        );

        let readonly = QueueError::ReadOnly {
            queue: "jq:{a}".into(),
            op: "reap",
        };
        let f = classify(&readonly);
        assert_eq!((f.reason, f.redis_reached), ("ReadOnly", true));
        assert!(
            f.message.contains("spec.redis.sentinel") && !f.message.contains("--redis"),
            "{}",
            f.message
        );

        let lagging = QueueError::NotReplicated {
            queue: "jq:{a}".into(),
            op: "reap",
            acked: 0,
            wanted: 2,
            timeout_ms: 1000,
        };
        let f = classify(&lagging);
        assert_eq!((f.reason, f.redis_reached), ("NotReplicated", true));
        assert!(
            f.message.contains("only 0 of 2") && f.message.contains("spec.durability"),
            "{}",
            f.message
        );

        let sentinel_auth = QueueError::Auth {
            endpoint: "the Sentinel at s-0:26379".into(),
            detail: "s-0:26379: WRONGPASS (check JOBQUEUE_SENTINEL_PASSWORD)".into(),
        };
        let f = classify(&sentinel_auth);
        assert_eq!(f.reason, "AuthFailed");
        assert!(
            f.message
                .contains("check spec.redis.sentinel.passwordSecretRef"),
            "{}",
            f.message
        );

        // The user is named, the password never.
        let auth = QueueError::Auth {
            endpoint: "the primary of mymaster (sentinel://s-0:26379/mymaster)".into(),
            detail: "user \"jq-operator\": invalid username-password pair".into(),
        };
        let f = classify(&auth);
        assert_eq!(f.reason, "AuthFailed");
        assert!(f.message.contains("\"jq-operator\""), "{}", f.message);
    }
}
