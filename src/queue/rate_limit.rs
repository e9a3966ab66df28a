//! Rate limits (docs/protocol.md, *Rate limits*): at most `max` claims per window of
//! `per`, across every worker of a queue, kept by claim and settle_claim on the Redis
//! clock. A queue may have one for the whole queue (`meta` field `rate_limit`) and one per
//! job rate key (`rate_limit_per_key`, for jobs enqueued with a rate key), each stored as
//! `<max>/<ms>`.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The `meta` field of the queue's limit.
pub const RATE_LIMIT_FIELD: &str = "rate_limit";
/// The `meta` field of the limit per rate key.
pub const RATE_LIMIT_PER_KEY_FIELD: &str = "rate_limit_per_key";
/// The most claims a limit allows per window (the scripts ignore a larger stored one).
pub const MAX_RATE: u32 = 1_000_000;
/// The longest window, in ms: 10^15, the largest time the protocol takes.
const MAX_WINDOW_MS: u128 = 1_000_000_000_000_000;
/// The longest rate key, in bytes (a job option, as enqueue takes it).
pub const MAX_RATE_KEY: usize = 256;

/// At most `max` claims in any window of `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RateLimit {
    pub max: u32,
    pub per: Duration,
}

impl RateLimit {
    /// A limit the scripts take: `max` 1 to [`MAX_RATE`], `per` whole ms from 1 ms to
    /// 10^15 ms; the error names what is wrong.
    pub fn new(max: u32, per: Duration) -> Result<RateLimit, String> {
        if !(1..=MAX_RATE).contains(&max) {
            return Err(format!(
                "{max} claims per window: the most claims per window must be 1 to {MAX_RATE}"
            ));
        }
        if per < Duration::from_millis(1) {
            return Err(format!(
                "a window of {}: the window must be at least 1ms",
                crate::duration::format(per)
            ));
        }
        if per.as_millis() > MAX_WINDOW_MS {
            return Err("the window must be at most 10^15 ms".to_string());
        }
        if !per.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(format!(
                "a window of {}: the window is whole milliseconds",
                crate::duration::format(per)
            ));
        }
        Ok(RateLimit { max, per })
    }

    /// Claims per second the limit allows at most.
    pub fn per_second(&self) -> f64 {
        self.max as f64 / self.per.as_secs_f64()
    }

    /// As stored in `meta`: `<max>/<ms>`.
    pub fn to_field(&self) -> String {
        format!("{}/{}", self.max, self.per.as_millis())
    }

    /// A stored `<max>/<ms>` as the scripts read it: `None` when it is not one they take
    /// (then the queue runs without that limit).
    pub fn from_field(v: &str) -> Option<RateLimit> {
        let (max, per) = v.split_once('/')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(max) || !digits(per) {
            return None;
        }
        let max: u32 = max.parse().ok()?;
        let per: u64 = per.parse().ok()?;
        RateLimit::new(max, Duration::from_millis(per)).ok()
    }
}

/// `100/1s`: the count, a slash, the window as a duration.
impl FromStr for RateLimit {
    type Err = String;

    fn from_str(s: &str) -> Result<RateLimit, String> {
        let shape = || {
            format!("{s:?} is not a rate limit: write <claims>/<window>, e.g. 100/1s or 5/500ms")
        };
        let (max, per) = s.trim().split_once('/').ok_or_else(shape)?;
        let max: u32 = max.trim().parse().map_err(|_| shape())?;
        let per = crate::duration::parse(per).map_err(|e| format!("{s:?}: window {e}"))?;
        RateLimit::new(max, per).map_err(|e| format!("{s:?}: {e}"))
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.max, crate::duration::format(self.per))
    }
}

/// A queue's rate limits, as its `meta` holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimits {
    pub queue: Option<RateLimit>,
    pub per_key: Option<RateLimit>,
}

impl RateLimits {
    pub fn from_fields(fields: &HashMap<String, String>) -> RateLimits {
        let read = |name: &str| fields.get(name).and_then(|v| RateLimit::from_field(v));
        RateLimits {
            queue: read(RATE_LIMIT_FIELD),
            per_key: read(RATE_LIMIT_PER_KEY_FIELD),
        }
    }
}

/// A rate key as enqueue takes it: 1 to [`MAX_RATE_KEY`] bytes.
pub fn validate_rate_key(key: &str) -> super::Result<()> {
    if key.is_empty() || key.len() > MAX_RATE_KEY {
        return Err(super::Error::InvalidArgument {
            what: "rate key",
            reason: format!(
                "{} bytes: a rate key is 1 to {MAX_RATE_KEY} bytes",
                key.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_and_print() {
        let l: RateLimit = "100/1s".parse().unwrap();
        assert_eq!(l, RateLimit::new(100, Duration::from_secs(1)).unwrap());
        assert_eq!(l.to_field(), "100/1000");
        assert_eq!(l.to_string(), "100/1s");
        assert_eq!(RateLimit::from_field("100/1000"), Some(l));
        assert_eq!(l.per_second(), 100.0);
        let half: RateLimit = "5/500ms".parse().unwrap();
        assert_eq!(half.per_second(), 10.0);
    }

    #[test]
    fn bad_limits_are_named() {
        for (text, says) in [
            ("0/1s", "must be 1 to"),
            ("10/0s", "at least 1ms"),
            ("10/0", "at least 1ms"),
            ("abc", "not a rate limit"),
            ("10", "not a rate limit"),
            ("-1/1s", "not a rate limit"),
            ("10/1", "has no unit"),
            ("10/1.5ms", "whole milliseconds"),
            ("2000000/1s", "must be 1 to"),
        ] {
            let err = text.parse::<RateLimit>().unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn stored_values_the_scripts_ignore_read_as_none() {
        for v in [
            "",
            "abc",
            "0/1000",
            "10/0",
            "1e3/1000",
            " 5/1000",
            "5/-1",
            "2000000/1",
        ] {
            assert_eq!(RateLimit::from_field(v), None, "{v:?}");
        }
    }
}
