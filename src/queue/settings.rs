//! A queue's settings, kept in its `meta` hash and read by the scripts.

use std::collections::HashMap;
use std::time::Duration;

use super::error::{Error, Result};

/// The settings of `meta`. `Default` gives what the scripts assume for absent fields.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueSettings {
    pub visibility_timeout: Duration,
    pub max_attempts: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub backoff_multiplier: f64,
    /// How long an acked job's hash is kept (a dedup window); zero deletes it on ack.
    pub completed_retention: Duration,
    /// Dead jobs older than this are trimmed by the reaper; zero: no age limit.
    pub dead_retention: Duration,
    /// At most this many dead jobs are kept; zero: no length limit.
    pub dead_max_len: u64,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            visibility_timeout: Duration::from_millis(30_000),
            max_attempts: 5,
            backoff_initial: Duration::from_millis(1_000),
            backoff_max: Duration::from_millis(300_000),
            backoff_multiplier: 2.0,
            completed_retention: Duration::ZERO,
            dead_retention: Duration::from_millis(604_800_000),
            dead_max_len: 10_000,
        }
    }
}

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

impl QueueSettings {
    /// Refuse settings the scripts could not use.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &'static str, reason: &str| {
            Err(Error::InvalidArgument {
                what,
                reason: reason.to_string(),
            })
        };
        if self.visibility_timeout.as_millis() < 1 {
            return bad("visibility timeout", "must be at least 1ms");
        }
        if self.max_attempts < 1 {
            return bad("max attempts", "must be at least 1");
        }
        if !self.backoff_multiplier.is_finite() || self.backoff_multiplier < 1.0 {
            return bad("backoff multiplier", "must be a number ≥ 1");
        }
        if self.backoff_max < self.backoff_initial {
            return bad("backoff max", "must not be below the initial backoff");
        }
        Ok(())
    }

    /// The `meta` hash fields, as the scripts read them.
    pub fn to_fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("visibility_timeout_ms", ms(self.visibility_timeout)),
            ("max_attempts", self.max_attempts.to_string()),
            ("backoff_initial_ms", ms(self.backoff_initial)),
            ("backoff_max_ms", ms(self.backoff_max)),
            (
                "backoff_multiplier",
                format_multiplier(self.backoff_multiplier),
            ),
            ("completed_retention_ms", ms(self.completed_retention)),
            ("dead_retention_ms", ms(self.dead_retention)),
            ("dead_max_len", self.dead_max_len.to_string()),
        ]
    }

    /// Settings from a `meta` hash; absent or unreadable fields take their defaults.
    pub fn from_fields(fields: &HashMap<String, String>) -> QueueSettings {
        let d = QueueSettings::default();
        let int = |name: &str| fields.get(name).and_then(|v| v.trim().parse::<u64>().ok());
        let dur = |name: &str, default: Duration| int(name).map_or(default, Duration::from_millis);
        QueueSettings {
            visibility_timeout: dur("visibility_timeout_ms", d.visibility_timeout),
            max_attempts: int("max_attempts")
                .map_or(d.max_attempts, |v| v.min(u32::MAX as u64) as u32),
            backoff_initial: dur("backoff_initial_ms", d.backoff_initial),
            backoff_max: dur("backoff_max_ms", d.backoff_max),
            backoff_multiplier: fields
                .get("backoff_multiplier")
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(d.backoff_multiplier),
            completed_retention: dur("completed_retention_ms", d.completed_retention),
            dead_retention: dur("dead_retention_ms", d.dead_retention),
            dead_max_len: int("dead_max_len").unwrap_or(d.dead_max_len),
        }
    }
}

/// Lua reads the multiplier with `tonumber`: plain decimal, never an exponent.
fn format_multiplier(m: f64) -> String {
    let s = format!("{m:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let settings = QueueSettings {
            visibility_timeout: Duration::from_secs(60),
            max_attempts: 3,
            backoff_multiplier: 1.5,
            dead_max_len: 7,
            ..QueueSettings::default()
        };
        let fields: HashMap<String, String> = settings
            .to_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(fields["visibility_timeout_ms"], "60000");
        assert_eq!(fields["backoff_multiplier"], "1.5");
        assert_eq!(QueueSettings::from_fields(&fields), settings);
    }

    #[test]
    fn absent_fields_take_the_script_defaults() {
        assert_eq!(
            QueueSettings::from_fields(&HashMap::new()),
            QueueSettings::default()
        );
        assert_eq!(format_multiplier(2.0), "2");
    }

    #[test]
    fn invalid_settings_are_named() {
        let err = QueueSettings {
            max_attempts: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("max attempts"), "{err}");
        assert!(QueueSettings::default().validate().is_ok());
    }
}
