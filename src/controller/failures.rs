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
        QueueError::NoSentinel { .. } => (reasons::REDIS_UNREACHABLE, false),
        QueueError::UnknownMaster { .. } => (reasons::INVALID_URL, false),
        QueueError::ReadOnly { .. } | QueueError::NotReplicated { .. } => {
            (reasons::REDIS_ERROR, true)
        }
    };
    Failure {
        reason,
        message: e.to_string(),
        redis_reached,
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
}
