//! The key layout of a queue, built in exactly one place.
//!
//! Every key of a queue starts with `PREFIX:{tag}:`, so all of them hash to one Redis
//! Cluster slot and every script is cluster-safe.

use super::error::{Error, Result};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "jq";

/// The highest job priority; 0, the default, is the lowest.
pub const MAX_PRIORITY: u8 = 9;

/// The names of one queue's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// `PREFIX:{tag}`: how the queue is named in messages.
    pub name: String,
    pub pending: String,
    pub processing: String,
    pub delayed: String,
    pub dead: String,
    pub meta: String,
    pub stats: String,
    pub wake: String,
    /// Ids set aside because their job hash was absent (a Cluster slot migration): KEYS[8]
    /// of claim, reap, stats and purge's `orphans` form.
    pub orphans: String,
    /// `PREFIX:{tag}:schedules` (name -> rule) and `PREFIX:{tag}:schedule_due` (name -> next
    /// tick): KEYS[8] and KEYS[9] of schedule.
    pub schedules: String,
    pub schedule_due: String,
    /// `PREFIX:{tag}:done` (the final ends of jobs enqueued with `notify`) and
    /// `PREFIX:{tag}:events` (every end, while meta's `events_max_len` is set): streams the
    /// scripts build from ARGV[1] (docs/protocol.md, Outcomes).
    pub done: String,
    pub events: String,
    /// `PREFIX:{tag}:job:`, ARGV[1] of every script.
    pub job_prefix: String,
}

impl QueueKeys {
    /// Keys for the queue `prefix` + `tag` (the tag's text, without braces).
    pub fn new(prefix: &str, tag: &str) -> Result<Self> {
        validate_tag(tag)?;
        validate_prefix(prefix)?;
        let name = format!("{prefix}:{{{tag}}}");
        let key = |suffix: &str| format!("{name}:{suffix}");
        Ok(QueueKeys {
            pending: key("pending"),
            processing: key("processing"),
            delayed: key("delayed"),
            dead: key("dead"),
            meta: key("meta"),
            stats: key("stats"),
            wake: key("wake"),
            orphans: key("orphans"),
            schedules: key("schedules"),
            schedule_due: key("schedule_due"),
            done: key("done"),
            events: key("events"),
            job_prefix: key("job:"),
            name,
        })
    }

    /// KEYS[1..7] of every script, in protocol order.
    pub fn queue_keys(&self) -> [&str; 7] {
        [
            &self.pending,
            &self.processing,
            &self.delayed,
            &self.dead,
            &self.meta,
            &self.stats,
            &self.wake,
        ]
    }

    /// The seven queue keys and `orphans`: every key of the queue but the job hashes.
    pub fn all_keys(&self) -> [&str; 8] {
        let [a, b, c, d, e, f, g] = self.queue_keys();
        [a, b, c, d, e, f, g, &self.orphans]
    }

    /// The ready list of priority `p` (0..=9): `pending` for 0, `pending:<p>` above
    /// (docs/protocol.md, Priorities).
    pub fn ready(&self, p: u8) -> String {
        if p == 0 {
            self.pending.clone()
        } else {
            format!("{}:{p}", self.pending)
        }
    }

    /// The ready lists of every priority, the one claimed first (9) first.
    pub fn ready_lists(&self) -> Vec<String> {
        (0..=MAX_PRIORITY).rev().map(|p| self.ready(p)).collect()
    }

    /// The record of claim request `request`: KEYS[9] of claim.
    pub fn claim_request(&self, request: &str) -> String {
        format!("{}:claimreq:{request}", self.name)
    }

    /// The hash of job `id`.
    pub fn job(&self, id: &str) -> String {
        let mut key = String::with_capacity(self.job_prefix.len() + id.len());
        key.push_str(&self.job_prefix);
        key.push_str(id);
        key
    }

    /// The hash of job `id` as bytes: ids written by other clients need not be UTF-8.
    pub fn job_key(&self, id: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.job_prefix.len() + id.len());
        key.extend_from_slice(self.job_prefix.as_bytes());
        key.extend_from_slice(id);
        key
    }

    /// `PREFIX:{tag}:unique:<key>`: the lock of a unique key, naming the job that holds
    /// it (docs/protocol.md, *Unique keys*). The scripts build it from the job prefix.
    pub fn unique_lock(&self, key: &[u8]) -> Vec<u8> {
        let base = format!("{}:unique:", self.name);
        let mut out = Vec::with_capacity(base.len() + key.len());
        out.extend_from_slice(base.as_bytes());
        out.extend_from_slice(key);
        out
    }
}

/// The longest hash tag, in bytes: it is part of every key name and log line.
const MAX_TAG_LEN: usize = 256;

/// A hash tag is non-empty text, at most [`MAX_TAG_LEN`] bytes, without braces (the braces are added by the key layout).
pub fn validate_tag(tag: &str) -> Result<()> {
    if tag.is_empty() {
        return Err(Error::InvalidArgument {
            what: "hash tag",
            reason: "must not be empty".into(),
        });
    }
    if tag.len() > MAX_TAG_LEN {
        return Err(Error::InvalidArgument {
            what: "hash tag",
            reason: format!("{} bytes: at most {MAX_TAG_LEN}", tag.len()),
        });
    }
    if tag.contains(['{', '}']) {
        return Err(Error::InvalidArgument {
            what: "hash tag",
            reason: format!("{tag:?} must not contain braces (write `emails`, not `{{emails}}`)"),
        });
    }
    Ok(())
}

fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.contains(['{', '}']) {
        return Err(Error::InvalidArgument {
            what: "key prefix",
            reason: format!("{prefix:?} must be non-empty and contain no braces"),
        });
    }
    Ok(())
}

/// The longest job id, in bytes: what every part can carry (a key name, a log line, an
/// exec worker's `JOBQUEUE_JOB_ID`). enqueue refuses a longer or empty one (`invalid id`).
pub const MAX_ID_LEN: usize = 1024;

/// The longest unique key, in bytes (enqueue refuses a longer or empty one:
/// `invalid unique_key`).
pub const MAX_UNIQUE_KEY_LEN: usize = 1024;

/// A job id this client makes or sends: 1 to [`MAX_ID_LEN`] bytes of any kind, the
/// protocol's only limits (a space, a control character or bytes that are not UTF-8 are
/// ids like any other; text output shows such ids as `hex:` and their bytes). A refused
/// id is shown by its first 40 characters and its length, never whole.
pub fn validate_id(id: impl AsRef<[u8]>) -> Result<()> {
    let id = id.as_ref();
    if id.is_empty() || id.len() > MAX_ID_LEN {
        let text = super::JobId::from(id).to_string();
        let shown = if text.chars().count() > 40 {
            let start: String = text.chars().take(40).collect();
            format!("{start:?}… ({} bytes)", id.len())
        } else {
            format!("{text:?}")
        };
        return Err(Error::InvalidArgument {
            what: "job id",
            reason: format!("{shown} must be 1 to {MAX_ID_LEN} bytes"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_bounded() {
        assert!(validate_tag(&"t".repeat(MAX_TAG_LEN)).is_ok());
        let err = validate_tag(&"t".repeat(MAX_TAG_LEN + 1)).unwrap_err();
        assert!(err.to_string().contains("257 bytes: at most 256"), "{err}");
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = QueueKeys::new("jq", "emails").unwrap();
        assert_eq!(keys.name, "jq:{emails}");
        assert_eq!(keys.pending, "jq:{emails}:pending");
        assert_eq!(keys.wake, "jq:{emails}:wake");
        assert_eq!(keys.orphans, "jq:{emails}:orphans");
        assert_eq!(keys.job("42"), "jq:{emails}:job:42");
        assert_eq!(keys.job_key(b"4\xff"), b"jq:{emails}:job:4\xff");
        assert_eq!(keys.job_prefix, "jq:{emails}:job:");
        assert_eq!(keys.claim_request("r1"), "jq:{emails}:claimreq:r1");
        for key in keys.all_keys() {
            assert!(key.starts_with("jq:{emails}:"), "{key}");
        }
    }

    #[test]
    fn bad_tags_and_prefixes_are_refused() {
        assert!(QueueKeys::new("jq", "").is_err());
        let err = QueueKeys::new("jq", "{emails}").unwrap_err().to_string();
        assert!(err.contains("hash tag") && err.contains("braces"), "{err}");
        assert!(QueueKeys::new("", "emails").is_err());
        assert!(QueueKeys::new("a{b", "emails").is_err());
    }

    #[test]
    fn ids_are_checked() {
        assert!(validate_id("abc-123_x:y").is_ok());
        assert!(validate_id("").is_err());
        // The protocol's limits only: any bytes are an id.
        assert!(validate_id("a b").is_ok());
        assert!(validate_id("tab\there").is_ok());
        assert!(validate_id(b"bad\xff\x00").is_ok());
        assert!(validate_id("x".repeat(MAX_ID_LEN)).is_ok());
        let err = validate_id("x".repeat(MAX_ID_LEN + 1)).unwrap_err();
        assert!(
            err.to_string()
                .contains("(1025 bytes) must be 1 to 1024 bytes"),
            "{err}"
        );
    }
}
