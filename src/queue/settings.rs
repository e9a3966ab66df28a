//! A queue's settings, kept in its `meta` hash and read by the scripts.

use std::collections::HashMap;
use std::time::Duration;

use super::error::{Error, Result};
use super::rate_limit::{RATE_LIMIT_FIELD, RATE_LIMIT_PER_KEY_FIELD, RateLimit};

/// The field of `meta` that holds the queue's durability (`replicated:1:1000ms`), for
/// clients: the scripts do not read it. Absent means `primary`.
pub const DURABILITY_FIELD: &str = "durability";

/// The field of `meta` that holds the queue's priority mode, `strict` (or absent) or
/// `weighted`: how claim chooses among the ready lists of the priorities (docs/protocol.md,
/// *Priorities*). Written by `jobqueue configure --priority-mode` and, from
/// `spec.priorityMode`, by the operator (a [`QueueSettings`] field: strict removes it).
pub const PRIORITY_MODE_FIELD: &str = "priority_mode";

/// How claims choose among priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriorityMode {
    /// The highest priority with a ready job first, always: a steady flow of high
    /// priority jobs keeps lower ones waiting.
    #[default]
    Strict,
    /// A weighted round robin: priority p weighs 2^p, so each ready priority gets its
    /// share of the claims and none starves.
    Weighted,
}

impl PriorityMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PriorityMode::Strict => "strict",
            PriorityMode::Weighted => "weighted",
        }
    }

    /// A mode as a user writes it: `strict` or `weighted`.
    pub fn parse(text: &str) -> std::result::Result<PriorityMode, String> {
        match text {
            "strict" => Ok(PriorityMode::Strict),
            "weighted" => Ok(PriorityMode::Weighted),
            _ => Err(format!(
                "{text:?} is not a priority mode: strict or weighted"
            )),
        }
    }

    /// The mode a `meta` field value means to the scripts: `weighted`, or strict.
    pub fn from_field(v: Option<&str>) -> PriorityMode {
        match v {
            Some("weighted") => PriorityMode::Weighted,
            _ => PriorityMode::Strict,
        }
    }
}

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
    /// At most this many claims per window across every worker (`meta` `rate_limit`);
    /// `None`: no limit (the field is removed).
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// The same for the jobs of each rate key (`rate_limit_per_key`).
    #[serde(default)]
    pub rate_limit_per_key: Option<RateLimit>,
    /// How claims choose among the priorities (`priority_mode`): weighted is written,
    /// strict (the scripts' default) removes the field.
    #[serde(default)]
    pub priority_mode: PriorityMode,
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
            rate_limit: None,
            rate_limit_per_key: None,
            priority_mode: PriorityMode::Strict,
        }
    }
}

/// The largest time in ms any argument or setting of the protocol takes (10^15).
pub(crate) const MAX_MS: u128 = 1_000_000_000_000_000;
/// The largest integer a Lua number holds exactly (2^53).
const MAX_INTEGER: u64 = 1 << 53;
/// Beyond this a backoff reaches its cap on the second retry anyway.
pub(crate) const MAX_MULTIPLIER: f64 = 1000.0;

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
        if !(1.0..=MAX_MULTIPLIER).contains(&self.backoff_multiplier) {
            return bad("backoff multiplier", "must be a number from 1 to 1000");
        }
        // The scripts read every time in ms as a Lua number and cap it at 10^15.
        for (what, d) in [
            ("visibility timeout", self.visibility_timeout),
            ("backoff initial", self.backoff_initial),
            ("backoff max", self.backoff_max),
            ("completed retention", self.completed_retention),
            ("dead retention", self.dead_retention),
        ] {
            if d.as_millis() > MAX_MS {
                return bad(what, "must be at most 10^15 ms (about 31 700 years)");
            }
        }
        if self.dead_max_len > MAX_INTEGER {
            return bad("dead max len", "must be at most 2^53 (9007199254740992)");
        }
        if self.backoff_max < self.backoff_initial {
            return bad("backoff max", "must not be below the initial backoff");
        }
        for limit in [self.rate_limit, self.rate_limit_per_key]
            .into_iter()
            .flatten()
        {
            if let Err(reason) = RateLimit::new(limit.max, limit.per) {
                return Err(Error::InvalidArgument {
                    what: "rate limit",
                    reason,
                });
            }
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
        .into_iter()
        .chain(self.rate_limit.map(|l| (RATE_LIMIT_FIELD, l.to_field())))
        .chain(
            self.rate_limit_per_key
                .map(|l| (RATE_LIMIT_PER_KEY_FIELD, l.to_field())),
        )
        .chain(
            (self.priority_mode != PriorityMode::Strict)
                .then(|| (PRIORITY_MODE_FIELD, self.priority_mode.as_str().to_string())),
        )
        .collect()
    }

    /// The `meta` fields these settings have none of (a rate limit that is not set, the
    /// priority mode when strict):
    /// [`Queue::configure`](super::Queue::configure) removes them.
    pub fn absent_fields(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.rate_limit.is_none() {
            out.push(RATE_LIMIT_FIELD);
        }
        if self.rate_limit_per_key.is_none() {
            out.push(RATE_LIMIT_PER_KEY_FIELD);
        }
        if self.priority_mode == PriorityMode::Strict {
            out.push(PRIORITY_MODE_FIELD);
        }
        out
    }

    /// The setting fields of a `meta` hash that the scripts do not take as stored (not a
    /// finite number, or out of the range a script accepts), with their stored values:
    /// the queue runs with the default for each instead (see [`QueueSettings::from_fields`]),
    /// which a reader of the settings should be told.
    pub fn ignored_fields(fields: &HashMap<String, String>) -> Vec<(String, String)> {
        // the least value a script takes; `None`: any number (clamped, or 0 has a meaning)
        let floor = |name: &str| match name {
            "visibility_timeout_ms" => Some(1.0),
            "max_attempts" | "completed_retention_ms" => None,
            _ => Some(0.0),
        };
        QueueSettings::default()
            .to_fields()
            .into_iter()
            .filter_map(|(name, _)| {
                let value = fields.get(name)?;
                let taken = lua_number(value).is_some_and(|v| floor(name).is_none_or(|f| v >= f));
                (!taken).then(|| (name.to_string(), value.clone()))
            })
            .collect()
    }

    /// Settings from a `meta` hash, read by the scripts' rule: a field is a number as Lua's
    /// `tonumber` reads it ("1e3", " 15 ", "0x10", "2.5"), and a field that is absent, not
    /// a finite number, or out of the range a script accepts takes the script's default.
    pub fn from_fields(fields: &HashMap<String, String>) -> QueueSettings {
        let d = QueueSettings::default();
        let num = |name: &str| fields.get(name).and_then(|v| lua_number(v));
        // a setting in whole units: floor, capped at 10^15 (what the scripts take)
        let whole = |v: f64| v.floor().min(MAXMS) as u64;
        // `visibility_timeout_ms` below 1 means the default (claim and extend)
        let at_least_1 = |name: &str, default: Duration| {
            num(name)
                .filter(|v| *v >= 1.0)
                .map_or(default, |v| Duration::from_millis(whole(v)))
        };
        // the reaper's and backoff's settings: a negative value means the default
        let not_negative =
            |name: &str, default: u64| num(name).filter(|v| *v >= 0.0).map_or(default, whole);
        let ms = |name: &str, default: Duration| {
            Duration::from_millis(not_negative(name, default.as_millis() as u64))
        };
        QueueSettings {
            visibility_timeout: at_least_1("visibility_timeout_ms", d.visibility_timeout),
            // max_attempts below 1 counts as 1
            max_attempts: num("max_attempts").map_or(d.max_attempts, |v| {
                v.floor().clamp(1.0, u32::MAX as f64) as u32
            }),
            backoff_initial: ms("backoff_initial_ms", d.backoff_initial),
            backoff_max: ms("backoff_max_ms", d.backoff_max),
            backoff_multiplier: num("backoff_multiplier")
                .filter(|v| *v >= 0.0)
                .unwrap_or(d.backoff_multiplier),
            // below 1 keeps no hash (0), as ack reads it
            completed_retention: num("completed_retention_ms")
                .filter(|v| *v >= 1.0)
                .map_or(Duration::ZERO, |v| Duration::from_millis(whole(v))),
            dead_retention: ms("dead_retention_ms", d.dead_retention),
            dead_max_len: not_negative("dead_max_len", d.dead_max_len),
            rate_limit: fields
                .get(RATE_LIMIT_FIELD)
                .and_then(|v| RateLimit::from_field(v)),
            rate_limit_per_key: fields
                .get(RATE_LIMIT_PER_KEY_FIELD)
                .and_then(|v| RateLimit::from_field(v)),
            priority_mode: PriorityMode::from_field(
                fields.get(PRIORITY_MODE_FIELD).map(String::as_str),
            ),
        }
    }
}

/// The largest ms any script argument or setting takes (10^15).
const MAXMS: f64 = 1e15;

/// A `meta` field as the scripts' `num()` reads it: Lua 5.1's `tonumber` (C `strtod`,
/// so surrounding spaces, exponents and `0x` hex are accepted), `None` unless finite.
pub(crate) fn lua_number(text: &str) -> Option<f64> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()? as f64
    } else {
        // Rust also reads "inf" and "nan" as strtod does; both are refused below
        if body.starts_with(['+', '-']) {
            return None;
        }
        body.parse::<f64>().ok()?
    };
    let v = if neg { -v } else { v };
    v.is_finite().then_some(v)
}

/// Lua reads the multiplier with `tonumber`: plain decimal, never an exponent.
pub(crate) fn format_multiplier(m: f64) -> String {
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
            priority_mode: PriorityMode::Weighted,
            ..QueueSettings::default()
        };
        assert!(!settings.absent_fields().contains(&PRIORITY_MODE_FIELD));
        let fields: HashMap<String, String> = settings
            .to_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(fields["visibility_timeout_ms"], "60000");
        assert_eq!(fields["backoff_multiplier"], "1.5");
        assert_eq!(fields[PRIORITY_MODE_FIELD], "weighted");
        assert_eq!(QueueSettings::from_fields(&fields), settings);
        // strict is the scripts' default: the field is removed, not written
        let strict = QueueSettings::default();
        assert!(
            strict
                .to_fields()
                .iter()
                .all(|(k, _)| *k != PRIORITY_MODE_FIELD)
        );
        assert!(strict.absent_fields().contains(&PRIORITY_MODE_FIELD));
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
    fn meta_fields_are_read_by_the_scripts_rule() {
        let read = |name: &str, value: &str| {
            let fields = HashMap::from([(name.to_string(), value.to_string())]);
            QueueSettings::from_fields(&fields)
        };
        let vis = |v: &str| read("visibility_timeout_ms", v).visibility_timeout;
        assert_eq!(vis("1e3"), Duration::from_secs(1));
        assert_eq!(vis("0"), Duration::from_secs(30), "0 means the default");
        assert_eq!(
            vis("0.5"),
            Duration::from_secs(30),
            "below 1 means the default"
        );
        assert_eq!(vis(" 1500 "), Duration::from_millis(1500));
        assert_eq!(vis("2500.9"), Duration::from_millis(2500));
        assert_eq!(vis("0x10"), Duration::from_millis(16));
        assert_eq!(vis("nan"), Duration::from_secs(30));
        assert_eq!(vis("inf"), Duration::from_secs(30));
        assert_eq!(vis("1e20"), Duration::from_millis(1_000_000_000_000_000));
        assert_eq!(vis("ten"), Duration::from_secs(30));
        assert_eq!(read("max_attempts", "0").max_attempts, 1);
        assert_eq!(read("max_attempts", "2.7").max_attempts, 2);
        assert_eq!(read("dead_max_len", "-1").dead_max_len, 10_000);
        assert_eq!(read("dead_max_len", "0").dead_max_len, 0);
        assert_eq!(
            read("completed_retention_ms", "0.5").completed_retention,
            Duration::ZERO
        );
        assert_eq!(read("backoff_multiplier", "1e0").backoff_multiplier, 1.0);
        assert_eq!(read("backoff_multiplier", "-2").backoff_multiplier, 2.0);
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

    #[test]
    fn settings_above_the_protocol_limits_are_refused() {
        let refused = |s: QueueSettings| s.validate().unwrap_err().to_string();
        let base = QueueSettings::default;
        for m in [0.5, 1000.5, f64::NAN, f64::INFINITY] {
            let err = refused(QueueSettings {
                backoff_multiplier: m,
                ..base()
            });
            assert!(err.contains("from 1 to 1000"), "{m}: {err}");
        }
        let err = refused(QueueSettings {
            dead_retention: Duration::from_millis(MAX_MS as u64 + 1),
            ..base()
        });
        assert!(
            err.contains("dead retention: must be at most 10^15 ms"),
            "{err}"
        );
        let err = refused(QueueSettings {
            dead_max_len: MAX_INTEGER + 1,
            ..base()
        });
        assert!(err.contains("2^53"), "{err}");
        let edge = QueueSettings {
            backoff_multiplier: 1000.0,
            dead_max_len: MAX_INTEGER,
            dead_retention: Duration::from_millis(MAX_MS as u64),
            ..base()
        };
        assert!(edge.validate().is_ok());
    }

    #[test]
    fn fields_the_scripts_do_not_take_are_named_with_their_values() {
        let fields: HashMap<String, String> = [
            ("max_attempts", "banana"),
            ("visibility_timeout_ms", "0"),
            ("backoff_initial_ms", "-5"),
            ("backoff_max_ms", "60000"),
            ("completed_retention_ms", "0"),
            ("durability", "primary"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut ignored = QueueSettings::ignored_fields(&fields);
        ignored.sort();
        assert_eq!(
            ignored,
            [
                ("backoff_initial_ms".to_string(), "-5".to_string()),
                ("max_attempts".to_string(), "banana".to_string()),
                ("visibility_timeout_ms".to_string(), "0".to_string()),
            ]
        );
    }
}
