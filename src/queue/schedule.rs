//! Schedules: named rules on a queue that enqueue one job per tick (lua/schedule.lua,
//! docs/protocol.md, *Schedules*). `every` ticks are multiples of the interval since the
//! epoch; cron ticks are computed here, from the rule and the previous tick alone, so
//! every firer with the same rule passes the same times.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use super::error::{Error, Result};
use super::types::JobOptions;

/// The longest schedule name, in bytes.
pub const MAX_SCHEDULE_NAME: usize = 200;
/// The largest schedule payload, in bytes.
pub const MAX_SCHEDULE_PAYLOAD: usize = 1 << 20;
/// How many due schedules one fire call takes at most.
pub const FIRE_BATCH: usize = 100;

/// When a schedule ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Every interval, at multiples of it since the epoch.
    Every(Duration),
    /// A 5-field (minute) or 6-field (second first) cron expression in a time zone
    /// (IANA name, e.g. `Europe/Paris`; `UTC`).
    Cron { expr: String, tz: String },
}

/// What a tick fired late by its interval or more does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missed {
    /// No job for the missed ticks: the next tick is the first after now.
    #[default]
    Skip,
    /// One job for all the missed ticks, then the first tick after now.
    Once,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::Once => "once",
        }
    }

    pub fn parse(s: &str) -> Result<Missed> {
        match s {
            "skip" => Ok(Missed::Skip),
            "once" => Ok(Missed::Once),
            other => Err(Error::InvalidArgument {
                what: "missed-tick policy",
                reason: format!("{other:?}: expected skip or once"),
            }),
        }
    }
}

/// A schedule as it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub name: String,
    pub rule: Rule,
    pub payload: Vec<u8>,
    pub options: JobOptions,
    pub missed: Missed,
    pub paused: bool,
}

/// A schedule as it is stored, with its ticks (ms since the epoch, Redis clock).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleInfo {
    pub name: String,
    pub rule: Rule,
    pub payload: Vec<u8>,
    /// The per-job options' fields as stored (name, value).
    pub options: Vec<(String, String)>,
    pub missed: Missed,
    pub paused: bool,
    /// The next tick; none while paused.
    pub next_tick: Option<i64>,
    /// The last tick fired or skipped.
    pub last_tick: Option<i64>,
    /// The id of the last job fired.
    pub last_job: Option<String>,
}

/// A rule as lua/schedule.lua stores it (JSON).
#[derive(Debug, serde::Deserialize)]
pub(crate) struct StoredRule {
    pub kind: String,
    pub spec: String,
    #[serde(default)]
    pub tz: String,
    pub missed: String,
    pub paused: String,
    pub payload: String,
    #[serde(default)]
    pub options: Vec<String>,
    #[serde(default)]
    pub last_tick: Option<String>,
    #[serde(default)]
    pub last_job: Option<String>,
}

impl StoredRule {
    pub(crate) fn rule(&self) -> Result<Rule> {
        match self.kind.as_str() {
            "every" => self
                .spec
                .parse::<u64>()
                .map(|ms| Rule::Every(Duration::from_millis(ms)))
                .map_err(|_| bad("every", format!("stored interval {:?}", self.spec))),
            _ => Ok(Rule::Cron {
                expr: self.spec.clone(),
                tz: self.tz.clone(),
            }),
        }
    }

    pub(crate) fn info(self, name: String, next_tick: Option<i64>) -> Result<ScheduleInfo> {
        Ok(ScheduleInfo {
            rule: self.rule()?,
            payload: hex::decode(&self.payload)
                .map_err(|e| bad("payload", format!("stored payload is not hex: {e}")))?,
            options: self
                .options
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| (c[0].clone(), c[1].clone()))
                .collect(),
            missed: Missed::parse(&self.missed)?,
            paused: self.paused == "1",
            next_tick,
            last_tick: self.last_tick.as_deref().and_then(|t| t.parse().ok()),
            last_job: self.last_job,
            name,
        })
    }
}

fn bad(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

/// A schedule name is 1..200 bytes of `A-Z a-z 0-9 . _ -` (it is part of job ids).
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > MAX_SCHEDULE_NAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(bad(
            "schedule name",
            format!("{name:?}: expected 1..{MAX_SCHEDULE_NAME} characters of A-Z a-z 0-9 . _ -"),
        ));
    }
    Ok(())
}

/// A parsed cron rule: the expression and its time zone.
#[derive(Debug, Clone)]
pub struct CronRule {
    cron: Cron,
    tz: chrono_tz::Tz,
}

impl CronRule {
    /// Parse a 5- or 6-field expression (seconds first when 6) and an IANA time zone.
    pub fn parse(expr: &str, tz: &str) -> Result<CronRule> {
        let fields = expr.split_whitespace().count();
        if !(fields == 5 || fields == 6) {
            return Err(bad(
                "cron",
                format!(
                    "{expr:?} has {fields} fields: expected 5 (minute hour day month weekday) or 6 (second first)"
                ),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| bad("cron", format!("{expr:?}: {e}")))?;
        let tz: chrono_tz::Tz = tz.parse().map_err(|_| {
            bad(
                "time zone",
                format!("{tz:?} is not an IANA time zone (e.g. UTC, Europe/Paris)"),
            )
        })?;
        Ok(CronRule { cron, tz })
    }

    /// The first tick strictly after `ms` (ms since the epoch), in whole ms.
    pub fn after(&self, ms: i64) -> Result<i64> {
        let t: DateTime<Utc> = Utc
            .timestamp_millis_opt(ms)
            .single()
            .ok_or_else(|| bad("tick", format!("{ms} ms is out of range")))?;
        let local = t.with_timezone(&self.tz);
        let next = self
            .cron
            .find_next_occurrence(&local, false)
            .map_err(|e| bad("cron", format!("no tick after {ms} ms: {e}")))?;
        Ok(next.timestamp_millis())
    }
}

impl Rule {
    /// Check the rule as the script and [`CronRule`] would.
    pub fn validate(&self) -> Result<()> {
        match self {
            Rule::Every(d) => {
                if d.is_zero() || d.as_millis() > super::settings::MAX_MS {
                    return Err(bad(
                        "every",
                        "expected an interval of 1 ms to 10^15 ms".to_string(),
                    ));
                }
                Ok(())
            }
            Rule::Cron { expr, tz } => CronRule::parse(expr, tz).map(|_| ()),
        }
    }

    /// The first tick strictly after `ms`.
    pub fn after(&self, ms: i64) -> Result<i64> {
        match self {
            Rule::Every(d) => {
                let iv = d.as_millis().max(1) as i64;
                Ok((ms.div_euclid(iv) + 1) * iv)
            }
            Rule::Cron { expr, tz } => CronRule::parse(expr, tz)?.after(ms),
        }
    }

    /// The next `n` ticks after `ms`.
    pub fn upcoming(&self, ms: i64, n: usize) -> Result<Vec<i64>> {
        let mut out = Vec::with_capacity(n);
        let mut t = ms;
        for _ in 0..n {
            t = self.after(t)?;
            out.push(t);
        }
        Ok(out)
    }
}

/// The id of the job a schedule fires for `tick`.
pub fn tick_job_id(name: &str, tick: i64) -> String {
    format!("sched:{name}:{tick}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_ticks_in_a_time_zone() {
        let r = Rule::Cron {
            expr: "0 3 * * *".into(),
            tz: "Europe/Paris".into(),
        };
        // 2026-12-03T00:00:00Z; 03:00 in Paris (UTC+1) is 02:00Z
        let t = r.after(1_796_256_000_000).unwrap();
        assert_eq!(t, 1_796_256_000_000 + 2 * 3_600_000);
        assert_eq!(r.after(t).unwrap(), t + 86_400_000);
    }

    #[test]
    fn six_fields_take_seconds_and_bad_input_is_named() {
        let r = Rule::Cron {
            expr: "*/10 * * * * *".into(),
            tz: "UTC".into(),
        };
        assert_eq!(r.after(1_000).unwrap(), 10_000);
        let e = CronRule::parse("0 3 * *", "UTC").unwrap_err().to_string();
        assert!(e.contains("4 fields"), "{e}");
        let e = CronRule::parse("0 3 * * *", "Mars/Olympus")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Mars/Olympus"), "{e}");
        assert!(validate_name("a b").is_err());
    }

    #[test]
    fn every_ticks_are_aligned() {
        let r = Rule::Every(Duration::from_secs(30));
        assert_eq!(r.upcoming(61_000, 2).unwrap(), vec![90_000, 120_000]);
    }
}
