//! `visibility_timeout: auto`: the rule that sets a queue's lease from what it observes.
//!
//! [`decide`] is pure: the current value, the bounds, what renewals need and a few recent
//! windows of observations in; the new value and the reason out. The windows come from
//! differences of the queue's cumulative counters and processing-time histogram between
//! snapshots ([`Snapshot`], [`windows`]), so the rule sees recent processing times, not
//! the queue's whole life.
//!
//! The rule:
//! - a value outside the bounds (`[max(min, renewal floor), max]`) is brought inside at once;
//! - stale acks or renewals in the newest window (a lease taken away from a worker that
//!   was still running its job) raise the value at once: to twice the current value, at
//!   least p99 × margin;
//! - p99 × margin of the newest window above the value (by more than a tenth) raises it at
//!   once to that;
//! - lowering waits until the value has stood for the stabilization period, follows the
//!   highest p99 of every window in that period (like a scale-down's stabilization), and
//!   at most halves the value per step; a window in which leases expired does not lower
//!   (a lease that expires may be a worker that died, or renewals that failed);
//! - otherwise the value holds.
//!
//! Leases claimed with a worker's own visibility are not set by this rule (the worker's
//! value wins); their processing times do count in the histogram the rule reads.
//! Jobs enqueued with their own timeout or visibility (docs/protocol.md, Per-job
//! options) are left out: their leases are their own length, or their runs bounded by
//! their producer, so their processing times, expired leases and stale calls say nothing
//! about the queue's value. The scripts count them apart too ([`super::stats::OwnRuns`])
//! and [`Snapshot::of`] takes them out.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use std::collections::HashMap;

use super::error::{Error, Result};
use super::settings::lua_number;
use super::stats::{Histogram, QueueStats};

/// Defaults of `auto`: the bounds and the margin over p99.
pub const DEFAULT_MIN: Duration = Duration::from_secs(5);
pub const DEFAULT_MAX: Duration = Duration::from_secs(15 * 60);
pub const DEFAULT_MARGIN: f64 = 2.0;
/// The least lease renewals work with: a worker renews every third of its lease, and a
/// renewal needs a round trip (and a retry) well inside that third.
pub const RENEWAL_FLOOR: Duration = Duration::from_secs(1);
/// How often the queue's value is reconsidered, and how long a value stands before it
/// may be lowered.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
pub const DEFAULT_STABILIZATION: Duration = Duration::from_secs(5 * 60);
/// A change smaller than this share of the current value is not made (no flapping).
const HYSTERESIS: f64 = 0.1;
/// The largest margin taken.
pub const MAX_MARGIN: f64 = 100.0;

/// The bounds and margin of `auto`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AutoBounds {
    pub min: Duration,
    pub max: Duration,
    /// The value aimed at is p99 × margin.
    pub margin: f64,
}

impl Default for AutoBounds {
    fn default() -> Self {
        AutoBounds {
            min: DEFAULT_MIN,
            max: DEFAULT_MAX,
            margin: DEFAULT_MARGIN,
        }
    }
}

impl AutoBounds {
    /// Refuse bounds the rule could not keep.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &'static str, reason: String| Err(Error::InvalidArgument { what, reason });
        if !(1.0..=MAX_MARGIN).contains(&self.margin) {
            return bad(
                "auto margin",
                format!(
                    "must be a number from 1 to {MAX_MARGIN}, not {}",
                    self.margin
                ),
            );
        }
        if self.min.is_zero() {
            return bad("auto min", "must be at least 1ms".into());
        }
        if self.max < RENEWAL_FLOOR {
            return bad(
                "auto max",
                format!(
                    "must be at least {}ms: renewals need a lease that long",
                    RENEWAL_FLOOR.as_millis()
                ),
            );
        }
        if self.max < self.min {
            return bad("auto max", "must not be below auto min".into());
        }
        if self.max.as_millis() > 1_000_000_000_000_000 {
            return bad("auto max", "must be at most 10^15 ms".into());
        }
        Ok(())
    }

    /// The least value the rule sets: `min`, or what renewals need when more (never
    /// above `max`).
    pub fn floor(&self, renewal_floor: Duration) -> Duration {
        self.min.max(renewal_floor).min(self.max)
    }

    fn clamp(&self, d: Duration, renewal_floor: Duration) -> Duration {
        d.clamp(self.floor(renewal_floor), self.max)
    }
}

/// What one window (between two snapshots) showed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// The 99th percentile of the processing time of the window's acks.
    pub p99: Option<Duration>,
    pub acks: u64,
    /// Leases that expired and were reaped in the window.
    pub expired: u64,
    /// Acks and renewals refused as stale: leases taken away from a running job.
    pub stale: u64,
}

/// What the rule is given.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub current: Duration,
    pub bounds: AutoBounds,
    pub renewal_floor: Duration,
    /// The windows of the stabilization period, oldest first; the last is the newest.
    pub recent: &'a [Window],
    /// How long the current value has stood.
    pub since_change: Duration,
    pub stabilization: Duration,
}

/// Why the value is what it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The value was outside `[floor, max]`.
    Bounds { floor: Duration, max: Duration },
    /// Stale acks or renewals: leases were taken away from running jobs.
    Stale { stale: u64 },
    /// p99 × margin of the newest window is above the value.
    Followed { p99: Duration, margin: f64 },
    /// The highest p99 of the stabilization period, × margin, is below the value.
    Lowered {
        p99: Duration,
        margin: f64,
        over: Duration,
    },
    /// No acks observed: nothing to go by.
    NoAcks,
    /// Leases expired in the newest window: not lowered.
    Expired { expired: u64 },
    /// A lower value waits for the stabilization period.
    Stabilizing { left: Duration },
    /// Within a tenth of p99 × margin, or at a bound.
    Steady,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = crate::duration::format;
        match self {
            Reason::Bounds { floor, max } => {
                write!(f, "brought inside the bounds [{}, {}]", d(*floor), d(*max))
            }
            Reason::Stale { stale } => write!(
                f,
                "raised at once: {stale} acks or renewals came back stale (leases taken away from running jobs)"
            ),
            Reason::Followed { p99, margin } => {
                write!(f, "raised to p99 {} × margin {margin}", d(*p99))
            }
            Reason::Lowered { p99, margin, over } => write!(
                f,
                "lowered toward p99 {} × margin {margin} (the highest p99 of the last {})",
                d(*p99),
                d(*over)
            ),
            Reason::NoAcks => write!(f, "held: no acks in the window"),
            Reason::Expired { expired } => write!(
                f,
                "held: {expired} leases expired in the window (workers gone or renewals failing)"
            ),
            Reason::Stabilizing { left } => {
                write!(f, "held: a lower value waits {} more", d(*left))
            }
            Reason::Steady => write!(f, "held: near p99 × margin"),
        }
    }
}

/// The rule's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub value: Duration,
    pub reason: Reason,
}

impl Decision {
    pub fn changes(&self, current: Duration) -> bool {
        self.value != current
    }
}

fn times(d: Duration, k: f64) -> Duration {
    // the largest time the protocol takes is 10^15 ms; keep far from overflow
    Duration::from_secs_f64((d.as_secs_f64() * k).min(1e12))
}

/// The rule (see the module's documentation).
pub fn decide(inp: &Inputs<'_>) -> Decision {
    let b = &inp.bounds;
    let floor = b.floor(inp.renewal_floor);
    let clamp = |d: Duration| b.clamp(d, inp.renewal_floor);
    let current = inp.current;
    let hold = |reason| Decision {
        value: current,
        reason,
    };
    if current < floor || current > b.max {
        return Decision {
            value: clamp(current),
            reason: Reason::Bounds { floor, max: b.max },
        };
    }
    let Some(newest) = inp.recent.last() else {
        return hold(Reason::NoAcks);
    };
    let target = |p99: Duration| clamp(times(p99, b.margin));
    if newest.stale > 0 {
        let aim = times(current, 2.0).max(newest.p99.map_or(Duration::ZERO, target));
        let value = clamp(aim);
        if value > current {
            return Decision {
                value,
                reason: Reason::Stale {
                    stale: newest.stale,
                },
            };
        }
        return hold(Reason::Steady);
    }
    if let Some(p99) = newest.p99 {
        let t = target(p99);
        if t > times(current, 1.0 + HYSTERESIS) {
            return Decision {
                value: t,
                reason: Reason::Followed {
                    p99,
                    margin: b.margin,
                },
            };
        }
    }
    if newest.expired > 0 {
        return hold(Reason::Expired {
            expired: newest.expired,
        });
    }
    let Some(peak) = inp.recent.iter().filter_map(|w| w.p99).max() else {
        return hold(Reason::NoAcks);
    };
    let t = target(peak);
    if t >= times(current, 1.0 - HYSTERESIS) {
        return hold(Reason::Steady);
    }
    if inp.since_change < inp.stabilization {
        return hold(Reason::Stabilizing {
            left: inp.stabilization - inp.since_change,
        });
    }
    Decision {
        value: clamp(t.max(current / 2)),
        reason: Reason::Lowered {
            p99: peak,
            margin: b.margin,
            over: inp.stabilization,
        },
    }
}

/// The queue's cumulative counters at one moment (Redis time, ms).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub at_ms: i64,
    /// Bucket → acks (see [`Histogram`]).
    pub buckets: BTreeMap<u32, u64>,
    pub reaped: u64,
    pub stale: u64,
}

impl Snapshot {
    /// The queue's counters less those of jobs with their own timeout or visibility.
    pub fn of(stats: &QueueStats, at_ms: i64) -> Snapshot {
        let own = &stats.own;
        Snapshot {
            at_ms,
            buckets: stats
                .histogram
                .buckets
                .iter()
                .map(|(b, n)| {
                    let mine = own.histogram.buckets.get(b).copied().unwrap_or(0);
                    (*b, n.saturating_sub(mine))
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            reaped: stats.reaped.saturating_sub(own.reaped),
            stale: stats.stale.saturating_sub(own.stale),
        }
    }
}

/// What happened between two snapshots. Counters that went down (a queue purged and
/// made again) count as nothing.
pub fn window(older: &Snapshot, newer: &Snapshot) -> Window {
    let buckets: BTreeMap<u32, u64> = newer
        .buckets
        .iter()
        .map(|(b, n)| (*b, n.saturating_sub(*older.buckets.get(b).unwrap_or(&0))))
        .filter(|(_, n)| *n > 0)
        .collect();
    let h = Histogram { buckets };
    Window {
        p99: h.quantile(0.99),
        acks: h.total(),
        expired: newer.reaped.saturating_sub(older.reaped),
        stale: newer.stale.saturating_sub(older.stale),
    }
}

/// The windows between consecutive snapshots, oldest first.
pub fn windows(snapshots: &[Snapshot]) -> Vec<Window> {
    snapshots.windows(2).map(|w| window(&w[0], &w[1])).collect()
}

/// The snapshots worth keeping at `now_ms`: those of the stabilization period, and the
/// one just before it (the start of its first window).
pub fn keep_recent(snapshots: &mut Vec<Snapshot>, now_ms: i64, stabilization: Duration) {
    let since = now_ms - stabilization.as_millis() as i64;
    let first_inside = snapshots
        .iter()
        .position(|s| s.at_ms >= since)
        .unwrap_or(snapshots.len());
    let drop = first_inside
        .saturating_sub(1)
        .max(snapshots.len().saturating_sub(MAX_SNAPSHOTS));
    snapshots.drain(..drop);
}

/// The most snapshots kept (runs closer together than the interval, with a short
/// interval and a long stabilization period, would otherwise pile up in `meta`).
pub const MAX_SNAPSHOTS: usize = 64;

/// The `meta` fields of `auto` (clients' records: the scripts read none of them; they
/// read `visibility_timeout_ms`, which the writer of the moment sets).
pub mod fields {
    /// `auto`, or `fixed` (absent: fixed).
    pub const MODE: &str = "visibility_mode";
    pub const MIN: &str = "visibility_auto_min_ms";
    pub const MAX: &str = "visibility_auto_max_ms";
    pub const MARGIN: &str = "visibility_auto_margin";
    /// `operator` while the operator tunes the queue; absent: the workers' reapers do.
    pub const OWNER: &str = "visibility_owner";
    /// Who set `visibility_timeout_ms` last (`cli`, `operator`, `reaper:<worker>`), when
    /// (ms since the epoch, Redis time) and why.
    pub const SET_BY: &str = "visibility_set_by";
    pub const SET_AT: &str = "visibility_set_at";
    pub const REASON: &str = "visibility_reason";
    /// The snapshots of the windows (JSON, see [`super::TuningState`]).
    pub const STATE: &str = "visibility_auto_state";
}

/// Who tunes an `auto` queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Owner {
    Workers,
    Operator,
}

/// What `meta` records of the visibility timeout beyond its value.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VisibilityRecord {
    /// The bounds when the mode is `auto`; `None`: a fixed value.
    pub auto: Option<AutoBounds>,
    pub owner: Owner,
    pub set_by: Option<String>,
    pub set_at_ms: Option<i64>,
    pub reason: Option<String>,
}

impl VisibilityRecord {
    /// Read from `meta`; a bound that is not a number takes its default.
    pub fn from_fields(f: &HashMap<String, String>) -> VisibilityRecord {
        let num = |name: &str| f.get(name).and_then(|v| lua_number(v));
        let ms = |name: &str, d: Duration| {
            num(name)
                .filter(|v| *v >= 1.0 && *v <= 1e15)
                .map_or(d, |v| Duration::from_millis(v as u64))
        };
        let auto = (f.get(fields::MODE).map(String::as_str) == Some("auto")).then(|| {
            let d = AutoBounds::default();
            let b = AutoBounds {
                min: ms(fields::MIN, d.min),
                max: ms(fields::MAX, d.max),
                margin: num(fields::MARGIN).unwrap_or(d.margin),
            };
            if b.validate().is_ok() { b } else { d }
        });
        VisibilityRecord {
            auto,
            owner: if f.get(fields::OWNER).map(String::as_str) == Some("operator") {
                Owner::Operator
            } else {
                Owner::Workers
            },
            set_by: f.get(fields::SET_BY).cloned(),
            set_at_ms: f.get(fields::SET_AT).and_then(|v| v.parse().ok()),
            reason: f.get(fields::REASON).cloned(),
        }
    }
}

/// The fields that turn `auto` on with `bounds` (the value itself is written apart).
pub fn auto_fields(bounds: &AutoBounds) -> Vec<(&'static str, String)> {
    vec![
        (fields::MODE, "auto".into()),
        (fields::MIN, bounds.min.as_millis().to_string()),
        (fields::MAX, bounds.max.as_millis().to_string()),
        (fields::MARGIN, format!("{}", bounds.margin)),
    ]
}

/// The fields recording who set the value, when and why.
pub fn set_fields(by: &str, at_ms: i64, reason: &str) -> Vec<(&'static str, String)> {
    vec![
        (fields::SET_BY, by.to_string()),
        (fields::SET_AT, at_ms.to_string()),
        (fields::REASON, reason.to_string()),
    ]
}

/// The snapshots kept in `meta` between tuning runs.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TuningState {
    pub snapshots: Vec<Snapshot>,
}

/// How often tuning runs and how long a value stands before it is lowered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub interval: Duration,
    pub stabilization: Duration,
    pub renewal_floor: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            interval: DEFAULT_INTERVAL,
            stabilization: DEFAULT_STABILIZATION,
            renewal_floor: RENEWAL_FLOOR,
        }
    }
}

/// One tuning run that took place.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuned {
    pub from: Duration,
    pub decision: Decision,
    pub at_ms: i64,
}

impl Tuned {
    pub fn changed(&self) -> bool {
        self.decision.changes(self.from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn w(p99_s: Option<u64>, expired: u64, stale: u64) -> Window {
        Window {
            p99: p99_s.map(S),
            acks: p99_s.map_or(0, |_| 100),
            expired,
            stale,
        }
    }

    fn inputs(current: Duration, recent: &[Window], since_change: Duration) -> Inputs<'_> {
        Inputs {
            current,
            bounds: AutoBounds::default(),
            renewal_floor: RENEWAL_FLOOR,
            recent,
            since_change,
            stabilization: DEFAULT_STABILIZATION,
        }
    }

    #[test]
    fn nothing_observed_holds_the_value() {
        let d = decide(&inputs(S(30), &[], S(0)));
        assert_eq!((d.value, d.reason), (S(30), Reason::NoAcks));
        let d = decide(&inputs(S(30), &[w(None, 0, 0)], S(999)));
        assert_eq!(d.value, S(30));
    }

    #[test]
    fn longer_jobs_raise_at_once_toward_p99_times_margin() {
        let d = decide(&inputs(S(10), &[w(Some(20), 0, 0)], S(0)));
        assert_eq!(d.value, S(40));
        assert!(
            matches!(d.reason, Reason::Followed { .. }),
            "{:?}",
            d.reason
        );
        assert_eq!(d.reason.to_string(), "raised to p99 20s × margin 2");
    }

    #[test]
    fn stale_acks_raise_at_once_even_with_short_jobs() {
        let d = decide(&inputs(S(10), &[w(Some(1), 0, 3)], S(0)));
        assert_eq!(d.value, S(20), "twice the value at least");
        assert_eq!(d.reason, Reason::Stale { stale: 3 });
        let d = decide(&inputs(S(10), &[w(Some(30), 0, 1)], S(0)));
        assert_eq!(d.value, S(60), "p99 × margin when that is more");
    }

    #[test]
    fn shorter_jobs_lower_only_after_the_stabilization_period_and_by_half_at_most() {
        let recent = [w(Some(2), 0, 0); 3];
        let d = decide(&inputs(S(60), &recent, S(60)));
        assert_eq!(d.value, S(60));
        assert_eq!(
            d.reason,
            Reason::Stabilizing {
                left: DEFAULT_STABILIZATION - S(60)
            }
        );
        let d = decide(&inputs(S(60), &recent, DEFAULT_STABILIZATION));
        assert_eq!(d.value, S(30), "halved, not down to 4s at once");
        let d = decide(&inputs(S(6), &recent, DEFAULT_STABILIZATION));
        assert_eq!(d.value, S(5), "p99 × margin is 4s, min is 5s");
    }

    #[test]
    fn lowering_follows_the_highest_p99_of_the_period() {
        let recent = [w(Some(20), 0, 0), w(Some(2), 0, 0)];
        let d = decide(&inputs(S(60), &recent, DEFAULT_STABILIZATION));
        assert_eq!(d.value, S(40), "the 20s of the period, not the newest 2s");
        let recent = [w(Some(10), 0, 0), w(Some(2), 0, 0)];
        let d = decide(&inputs(S(60), &recent, DEFAULT_STABILIZATION));
        assert_eq!(d.value, S(30), "halved toward 20s");
        let d = decide(&inputs(S(30), &recent, DEFAULT_STABILIZATION));
        assert_eq!(d.value, S(20));
    }

    #[test]
    fn expired_leases_hold_a_lower_value_back() {
        let d = decide(&inputs(S(60), &[w(Some(2), 1, 0)], DEFAULT_STABILIZATION));
        assert_eq!((d.value, d.reason), (S(60), Reason::Expired { expired: 1 }));
    }

    #[test]
    fn values_outside_the_bounds_come_inside() {
        let d = decide(&inputs(S(1), &[], S(0)));
        assert_eq!(d.value, DEFAULT_MIN);
        let d = decide(&inputs(S(3600), &[w(Some(1000), 0, 9)], S(0)));
        assert_eq!(d.value, DEFAULT_MAX);
        let d = decide(&inputs(DEFAULT_MAX, &[w(Some(1000), 0, 9)], S(0)));
        assert_eq!(d.value, DEFAULT_MAX, "at max: stays");
        let mut i = inputs(S(1), &[], S(0));
        i.bounds.min = Duration::from_millis(100);
        assert_eq!(
            decide(&i).value,
            RENEWAL_FLOOR,
            "never below renewals' need"
        );
    }

    #[test]
    fn bad_bounds_are_named() {
        let err = |b: AutoBounds| b.validate().unwrap_err().to_string();
        let d = AutoBounds::default;
        assert!(err(AutoBounds { margin: 0.5, ..d() }).contains("auto margin"));
        assert!(
            err(AutoBounds {
                margin: f64::NAN,
                ..d()
            })
            .contains("auto margin")
        );
        assert!(
            err(AutoBounds {
                min: S(60),
                max: S(30),
                ..d()
            })
            .contains("below auto min")
        );
        assert!(
            err(AutoBounds {
                min: Duration::from_millis(10),
                max: Duration::from_millis(500),
                ..d()
            })
            .contains("renewals")
        );
        assert!(d().validate().is_ok());
    }

    #[test]
    fn jobs_with_their_own_timeout_or_visibility_are_left_out() {
        // The queue's counters count every job; those of jobs with their own options
        // are counted apart too, and a snapshot holds the rest.
        let stats = QueueStats::from_pairs([
            ("h:10", 50),
            ("h:20", 3),
            ("reaped", 4),
            ("stale", 2),
            ("own_h:20", 3),
            ("own_h:10", 5),
            ("own_reaped", 4),
            ("own_stale", 1),
        ]);
        assert_eq!(
            stats.histogram.buckets.get(&20),
            Some(&3),
            "stats unchanged"
        );
        let snap = Snapshot::of(&stats, 7);
        assert_eq!(
            snap,
            Snapshot {
                at_ms: 7,
                buckets: [(10, 45)].into(),
                reaped: 0,
                stale: 1,
            }
        );
        // so long jobs of their own raise nothing: p99 from the others alone
        let w = window(&Snapshot::default(), &snap);
        assert!(w.p99.unwrap() < Duration::from_secs(3), "{w:?}");
        assert_eq!((w.acks, w.expired, w.stale), (45, 0, 1));
    }

    #[test]
    fn windows_are_differences_of_snapshots() {
        let a = Snapshot {
            at_ms: 0,
            buckets: [(10, 50)].into(),
            reaped: 1,
            stale: 0,
        };
        let b = Snapshot {
            at_ms: 30_000,
            buckets: [(10, 50), (14, 20)].into(),
            reaped: 3,
            stale: 1,
        };
        let win = window(&a, &b);
        assert_eq!((win.acks, win.expired, win.stale), (20, 2, 1));
        let p99 = win.p99.unwrap().as_millis();
        assert!((16_384..=32_768).contains(&p99), "only the new acks: {p99}");
        // counters that went down (the queue made again) count as nothing
        assert_eq!(window(&b, &a), Window::default());
        let mut kept = vec![
            a.clone(),
            b.clone(),
            Snapshot {
                at_ms: 60_000,
                ..b.clone()
            },
        ];
        keep_recent(&mut kept, 100_000, S(50));
        assert_eq!(
            kept.iter().map(|s| s.at_ms).collect::<Vec<_>>(),
            [30_000, 60_000]
        );
        assert_eq!(windows(&kept).len(), 1);
        let mut many: Vec<Snapshot> = (0..100)
            .map(|at_ms| Snapshot { at_ms, ..a.clone() })
            .collect();
        keep_recent(&mut many, 100, S(3600));
        assert_eq!(many.len(), MAX_SNAPSHOTS);
        assert_eq!(many[0].at_ms, 100 - MAX_SNAPSHOTS as i64);
    }

    /// The benchmark's workload, time as the rule sees it (one window per 30 s run): 2 s
    /// jobs for 5 min, 20 s jobs for 5 min, 2 s jobs for 20.5 min, a worker killed in each
    /// phase (one expired lease). The decisions, run by run, through real histograms.
    #[test]
    fn a_shifting_workload_is_followed_phase_by_phase() {
        let phases: [(u64, usize); 3] = [(2_000, 10), (20_000, 10), (2_000, 41)];
        let mut snapshots = vec![Snapshot::default()];
        let mut current = Duration::from_secs(30);
        let mut changed_at = 0u64;
        let mut log: Vec<(usize, Duration, Reason)> = Vec::new();
        let mut run = 0;
        for (ms, runs) in phases {
            for i in 0..runs {
                run += 1;
                let now = run as u64 * 30_000;
                let mut next = snapshots.last().unwrap().clone();
                next.at_ms = now as i64;
                let bucket = 63 - ms.leading_zeros();
                *next.buckets.entry(bucket).or_default() += 100;
                next.reaped += u64::from(i == 2);
                snapshots.push(next);
                keep_recent(&mut snapshots, now as i64, DEFAULT_STABILIZATION);
                let recent = windows(&snapshots);
                let d = decide(&Inputs {
                    current,
                    bounds: AutoBounds::default(),
                    renewal_floor: RENEWAL_FLOOR,
                    recent: &recent,
                    since_change: Duration::from_millis(now - changed_at),
                    stabilization: DEFAULT_STABILIZATION,
                });
                if d.changes(current) {
                    log.push((run, d.value, d.reason.clone()));
                    current = d.value;
                    changed_at = now;
                }
            }
        }
        let secs = |d: Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
        let steps: Vec<(usize, f64)> = log.iter().map(|(r, v, _)| (*r, secs(*v))).collect();
        // phase 1: the 30 s start is lowered once its 5 min have passed (2 s × 2 is
        // below the 5 s min: halved to 15 s); phase 2: raised at once on its first run to
        // p99 (32.6 s, the top of the 16-32 s bucket) × 2; phase 3: lowered by half every
        // 5 min once the last window of 20 s jobs has left the period, down to the 5 s
        // min; the killed workers' expired leases change nothing.
        assert_eq!(
            steps,
            [
                (10, 15.0),
                (11, 65.2),
                (31, 32.6),
                (41, 16.3),
                (51, 8.2),
                (61, 5.0)
            ],
            "{log:?}"
        );
        assert!(matches!(log[1].2, Reason::Followed { .. }), "{log:?}");
        assert!(
            log[2..]
                .iter()
                .all(|(_, _, r)| matches!(r, Reason::Lowered { .. }))
        );
    }

    fn arb_window() -> impl Strategy<Value = Window> {
        (proptest::option::of(1u64..2_000_000), 0u64..3, 0u64..3).prop_map(
            |(p99, expired, stale)| Window {
                p99: p99.map(Duration::from_millis),
                acks: p99.map_or(0, |_| 10),
                expired,
                stale,
            },
        )
    }

    prop_compose! {
        fn arb_bounds()(min in 1u64..120_000, span in 0u64..2_000_000, margin in 1.0f64..10.0) -> AutoBounds {
            AutoBounds {
                min: Duration::from_millis(min),
                max: Duration::from_millis((min + span).max(RENEWAL_FLOOR.as_millis() as u64)),
                margin,
            }
        }
    }

    proptest! {
        #[test]
        fn the_rule_keeps_its_promises(
            bounds in arb_bounds(),
            current in 1u64..3_000_000,
            recent in proptest::collection::vec(arb_window(), 0..6),
            since in 0u64..1_000_000,
            stab in 0u64..1_000_000,
        ) {
            let current = Duration::from_millis(current);
            let inp = Inputs {
                current,
                bounds,
                renewal_floor: RENEWAL_FLOOR,
                recent: &recent,
                since_change: Duration::from_millis(since),
                stabilization: Duration::from_millis(stab),
            };
            let d = decide(&inp);
            let floor = bounds.floor(RENEWAL_FLOOR);
            // never outside [min, max], never below what renewals need
            prop_assert!(d.value >= bounds.min && d.value <= bounds.max, "{d:?}");
            prop_assert!(d.value >= RENEWAL_FLOOR.min(bounds.max), "{d:?}");
            let inside = current >= floor && current <= bounds.max;
            if inside {
                // stale acks or renewals never lower it
                if recent.last().is_some_and(|w| w.stale > 0) {
                    prop_assert!(d.value >= current, "{d:?}");
                }
                // lowering waits for the stabilization period and at most halves
                if d.value < current {
                    prop_assert!(inp.since_change >= inp.stabilization, "{d:?}");
                    prop_assert!(d.value >= current / 2, "{d:?}");
                    prop_assert!(recent.last().is_some_and(|w| w.expired == 0), "{d:?}");
                }
                // no observations: no change
                if recent.iter().all(|w| w.p99.is_none() && w.stale == 0) {
                    prop_assert_eq!(d.value, current);
                }
            }
            // the decision taken again at once changes nothing unless leases went stale
            let again = Inputs { current: d.value, since_change: Duration::ZERO, ..inp };
            let d2 = decide(&again);
            if stab > 0 && recent.last().is_none_or(|w| w.stale == 0) {
                prop_assert!(d2.value >= d.value, "{d:?} then {d2:?}");
            }
        }
    }
}
