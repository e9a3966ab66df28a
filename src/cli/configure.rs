//! `jobqueue configure`: show or change the settings in a queue's `meta` hash.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use super::ConnectArgs;
use super::common::{UsageError, absent_note, open_target};
use crate::duration;
use crate::queue::auto_visibility::{self, AutoBounds, VisibilityRecord};
use crate::queue::{
    PartitionRecord, PriorityMode, QueueSettings, RateLimit, RateLimits, partition_tags,
};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue configure --tag emails                       # show the settings
  jobqueue configure --tag emails --visibility-timeout 2m --max-attempts 10
  jobqueue configure --tag reports --create --max-attempts 3   # a queue not in Redis yet
  jobqueue configure --tag emails --backoff-initial 5s --backoff-max 1h --backoff-multiplier 3
  jobqueue configure --tag emails --completed-retention 1h   # keep done jobs (dedup window)
  jobqueue configure --tag emails --partitions 6   # record the count (docs/partitions.md)
  jobqueue configure --tag emails --rate-limit 100/1s   # at most 100 claims a second
  jobqueue configure --tag emails --rate-limit-per-key 5/1s   # per enqueue --rate-key
  jobqueue configure --tag emails --rate-limit off
  jobqueue configure --tag emails --visibility-timeout auto   # the workers' reapers tune it
  jobqueue configure --tag emails --priority-mode weighted   # low priorities get a share
  jobqueue configure --tag emails --visibility-timeout auto --auto-min 5s --auto-max 15m --auto-margin 2

Settings not given keep their current value. Under the operator, the JobQueue resource
owns these settings and rewrites them on every reconcile.";

#[derive(Debug, Args)]
pub struct ConfigureArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// How long a claimed job is leased before the reaper may take it back, or `auto`:
    /// set from the queue's recent processing times (p99 × margin within the auto
    /// bounds), raised at once when leases are taken from running jobs.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_visibility)]
    pub visibility_timeout: Option<Visibility>,
    /// With `--visibility-timeout auto`: the least value (default 5s).
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub auto_min: Option<Duration>,
    /// With `--visibility-timeout auto`: the largest value (default 15m).
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub auto_max: Option<Duration>,
    /// With `--visibility-timeout auto`: the value aimed at is p99 × this (default 2).
    #[arg(long, allow_hyphen_values = true)]
    pub auto_margin: Option<f64>,
    /// Claims before a failing (or abandoned) job goes to the dead-letter set.
    #[arg(long, allow_hyphen_values = true)]
    pub max_attempts: Option<u32>,
    /// Retry backoff after the first failure.
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub backoff_initial: Option<Duration>,
    /// The longest retry backoff.
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub backoff_max: Option<Duration>,
    /// Each retry waits this many times longer than the previous one (≥ 1).
    #[arg(long, allow_hyphen_values = true)]
    pub backoff_multiplier: Option<f64>,
    /// Keep acked jobs this long (ids stay taken: a dedup window); 0 deletes on ack.
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub completed_retention: Option<Duration>,
    /// The reaper trims dead jobs older than this; 0: no age limit.
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub dead_retention: Option<Duration>,
    /// The reaper keeps at most this many dead jobs; 0: no limit.
    #[arg(long, allow_hyphen_values = true)]
    pub dead_max_len: Option<u64>,
    /// How claims choose among priorities: `strict` (the highest priority with a ready
    /// job first, always) or `weighted` (priority p gets a share of the claims weighing
    /// 2^p, so low priorities never starve). Not written by the operator.
    #[arg(long, value_name = "MODE", value_parser = PriorityMode::parse)]
    pub priority_mode: Option<PriorityMode>,
    /// Keep the queue's completion events (acked, failed, dead, cancelled) in a stream of
    /// about this many entries, for `jobqueue events`; 0 turns them off (the default).
    #[arg(long, value_name = "N", value_parser = events_len)]
    pub events: Option<u64>,
    /// At most this many claims per window across every worker, e.g. `100/1s`, or `off`
    /// to remove the limit. A limited worker waits for the next slot.
    #[arg(long, value_name = "N/WINDOW", value_parser = parse_rate)]
    pub rate_limit: Option<RateSetting>,
    /// At most this many claims per window for the jobs of one rate key (`enqueue
    /// --rate-key`), e.g. `5/1s`, or `off`. A job over its key's limit waits in delayed
    /// for its key's next slot (not an attempt) while other keys' jobs are claimed.
    #[arg(long, value_name = "N/WINDOW", value_parser = parse_rate)]
    pub rate_limit_per_key: Option<RateSetting>,
    /// Write the settings of a queue none of whose keys are in Redis yet (without it, a
    /// mistyped --tag is refused instead of making a queue nobody uses).
    #[arg(long)]
    pub create: bool,
    /// Print JSON (the `meta` fields).
    #[arg(long)]
    pub json: bool,
}

/// `--events`: 0 (off) to [`crate::queue::MAX_EVENTS_LEN`].
fn events_len(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n <= crate::queue::MAX_EVENTS_LEN => Ok(n),
        _ => Err(format!(
            "{text:?} is not a number of events from 0 (off) to {}",
            crate::queue::MAX_EVENTS_LEN
        )),
    }
}

/// `--visibility-timeout`: a duration or `auto`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Visibility {
    Fixed(Duration),
    Auto,
}

/// `--rate-limit`, `--rate-limit-per-key`: a limit or `off`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateSetting {
    Off,
    Limit(RateLimit),
}

impl RateSetting {
    fn change(self) -> Option<RateLimit> {
        match self {
            RateSetting::Off => None,
            RateSetting::Limit(l) => Some(l),
        }
    }
}

fn parse_rate(text: &str) -> Result<RateSetting, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(RateSetting::Off);
    }
    text.parse()
        .map(RateSetting::Limit)
        .map_err(|e| format!("{e} (or off: no limit)"))
}

fn parse_visibility(text: &str) -> Result<Visibility, String> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Ok(Visibility::Auto);
    }
    duration::parse(text)
        .map(Visibility::Fixed)
        .map_err(|e| format!("{e} (or auto: set from the queue's processing times)"))
}

impl ConfigureArgs {
    /// The auto bounds to record: the queue's (or the defaults) with the given flags;
    /// `None` when the queue is not to be `auto`. A bound flag for a queue that stays
    /// fixed is refused.
    fn auto_bounds(&self, record: &VisibilityRecord) -> Result<Option<AutoBounds>, UsageError> {
        let flags =
            self.auto_min.is_some() || self.auto_max.is_some() || self.auto_margin.is_some();
        let auto = match self.visibility_timeout {
            Some(Visibility::Auto) => true,
            Some(Visibility::Fixed(_)) => false,
            None => record.auto.is_some(),
        };
        if !auto {
            if flags {
                let flag = if self.auto_min.is_some() {
                    "--auto-min"
                } else if self.auto_max.is_some() {
                    "--auto-max"
                } else {
                    "--auto-margin"
                };
                return Err(UsageError(format!(
                    "{flag} applies to --visibility-timeout auto, and the queue's visibility \
                     timeout is fixed: add --visibility-timeout auto"
                )));
            }
            return Ok(None);
        }
        let mut b = record.auto.unwrap_or_default();
        if let Some(v) = self.auto_min {
            b.min = v;
        }
        if let Some(v) = self.auto_max {
            b.max = v;
        }
        if let Some(v) = self.auto_margin {
            b.margin = v;
        }
        Ok(Some(b))
    }

    /// `settings` with every given flag applied; `None` when no flag was given.
    fn apply(&self, settings: &QueueSettings) -> Option<QueueSettings> {
        let mut s = settings.clone();
        let mut changed = false;
        let mut set = |given: bool| changed |= given;
        if let Some(Visibility::Fixed(v)) = self.visibility_timeout {
            s.visibility_timeout = v;
            set(true);
        }
        if let Some(v) = self.max_attempts {
            s.max_attempts = v;
            set(true);
        }
        if let Some(v) = self.backoff_initial {
            s.backoff_initial = v;
            set(true);
        }
        if let Some(v) = self.backoff_max {
            s.backoff_max = v;
            set(true);
        }
        if let Some(v) = self.backoff_multiplier {
            s.backoff_multiplier = v;
            set(true);
        }
        if let Some(v) = self.completed_retention {
            s.completed_retention = v;
            set(true);
        }
        if let Some(v) = self.dead_retention {
            s.dead_retention = v;
            set(true);
        }
        if let Some(v) = self.dead_max_len {
            s.dead_max_len = v;
            set(true);
        }
        changed.then_some(s)
    }
}

/// The partition record `configure --partitions N [--drain-partitions M]` writes over
/// `record` (what the queue records now): `--drain-partitions` as given (the count itself
/// ends a drain); otherwise a change of count drains the old layout's partitions that the
/// new one leaves out, and the same count keeps the drain under way. A new count while a
/// resize is under way is refused (its drain would be forgotten).
pub fn planned_record(
    tag: &str,
    n: usize,
    drain: Option<usize>,
    record: Option<PartitionRecord>,
    name: &str,
) -> anyhow::Result<PartitionRecord> {
    crate::queue::partitions::validate_partitions(n)?;
    if let Some(m) = drain {
        crate::queue::partitions::validate_partitions(m)?;
        return Ok(PartitionRecord {
            partitions: n,
            drain: (m != n).then_some(m),
        });
    }
    let Some(record) = record else {
        return Ok(PartitionRecord::new(n));
    };
    if record.partitions == n {
        return Ok(record);
    }
    if let Some(d) = record.drain {
        return Err(UsageError(format!(
            "{name} is being resized from {d} to {} partitions (meta field drain_partitions): \
             once `jobqueue stats --tag {tag}` shows the draining partitions empty, end it \
             with `jobqueue configure --tag {tag} --partitions {} --drain-partitions {}`, \
             then resize to {n}; or give --drain-partitions to say which layout to drain",
            record.partitions, record.partitions, record.partitions
        ))
        .into());
    }
    let new = partition_tags(tag, n)?;
    let kept = partition_tags(tag, record.partitions)?
        .iter()
        .all(|t| new.contains(t));
    Ok(PartitionRecord {
        partitions: n,
        drain: (!kept).then_some(record.partitions),
    })
}

/// `--partitions` given to `configure`: record it in the queue's own `meta` (it is the
/// command that sets the count, so a count that differs from the record is a resize, not
/// an error). Returns what the queue records now, and whether it was written.
async fn record_partitions(
    args: &ConfigureArgs,
    n: usize,
) -> anyhow::Result<(Option<PartitionRecord>, bool)> {
    let head = args.connect.head().await?;
    let record = head.partition_record().await?;
    let new = planned_record(
        &args.connect.tag,
        n,
        args.connect.drain_partitions,
        record,
        head.name(),
    )?;
    if record == Some(new) {
        return Ok((record, false));
    }
    let old = record.map_or(n, |r| r.drain.unwrap_or(r.partitions));
    let every = crate::queue::PartitionedQueue::resizing(
        head.redis().clone(),
        &args.connect.prefix,
        &args.connect.tag,
        n,
        old,
    )?;
    every.check_key_types().await?;
    if !every.exists().await? && !args.create {
        return Err(UsageError(format!(
            "no queue exists at {} (none of its keys are in Redis): check --tag and --prefix; \
             to record the partition count of a new queue, add --create",
            head.name()
        ))
        .into());
    }
    head.record_partitions(&new).await?;
    Ok((Some(new), true))
}

pub async fn run(args: ConfigureArgs) -> anyhow::Result<()> {
    let mut recorded = None;
    let mut connect = args.connect.clone();
    if let Some(n) = args.connect.partitions {
        let (record, written) = record_partitions(&args, n).await?;
        recorded = record.map(|r| (r, written));
        // The settings go to the partitions of the count now recorded.
        connect.partitions = None;
        connect.drain_partitions = None;
    }
    // Partitioned: read the first partition, write every one (all are configured alike).
    let target = open_target(&connect).await?;
    if recorded.is_none() {
        let head = crate::queue::Queue::new(
            target.queues()[0].redis().clone(),
            &connect.prefix,
            &connect.tag,
        )?;
        recorded = head.partition_record().await?.map(|r| (r, false));
    }
    let queues = target.queues();
    let fields = queues[0].meta_fields().await?;
    let current = QueueSettings::from_fields(&fields);
    let absent = absent_note(&target).await?;
    let defaults = QueueSettings::default().to_fields();
    for (field, value) in QueueSettings::ignored_fields(&fields) {
        // Another client wrote a value the scripts cannot use: they run with the default.
        let default = defaults
            .iter()
            .find(|(name, _)| *name == field)
            .map_or(String::new(), |(_, v)| v.clone());
        eprintln!(
            "note: the meta field {field} holds {value:?}, which the scripts do not take as \
             a setting: the queue runs with the default ({default})"
        );
    }
    let record = VisibilityRecord::from_fields(&fields);
    let bounds = args.auto_bounds(&record)?;
    if let Some(b) = &bounds {
        b.validate()?;
        if queues.len() > 1 && record.auto.is_none() {
            return Err(UsageError(
                "--visibility-timeout auto is for a queue of one partition: a partitioned \
                 queue takes a duration"
                    .into(),
            )
            .into());
        }
    }
    // `auto` turned on or its bounds changed: the value starts from the current one,
    // brought inside the bounds.
    let auto_change = bounds.filter(|b| record.auto != Some(*b));
    let mut apply = args.apply(&current);
    if let Some(b) = auto_change {
        let mut s = apply.clone().unwrap_or_else(|| current.clone());
        s.visibility_timeout = s
            .visibility_timeout
            .clamp(b.floor(auto_visibility::RENEWAL_FLOOR), b.max);
        apply = Some(s);
    }
    let (settings, written) = match apply {
        Some(new) => {
            // Only --backoff-initial given, above the queue's backoff max: the flag given
            // is what is wrong, not the backoff max the user did not name.
            if let Some(initial) = args.backoff_initial
                && args.backoff_max.is_none()
                && initial > new.backoff_max
            {
                return Err(UsageError(format!(
                    "--backoff-initial {} is above the queue's backoff max ({}): give \
                     --backoff-max too, at least as long",
                    duration::format(initial),
                    duration::format(new.backoff_max)
                ))
                .into());
            }
            new.validate()?;
            if let Some(note) = &absent
                && !args.create
            {
                return Err(UsageError(format!(
                    "{note}; to make a new queue with these settings, add --create"
                ))
                .into());
            }
            let now = queues[0].now_ms().await?;
            let mut extra = Vec::new();
            if let Some(b) = auto_change {
                extra.extend(auto_visibility::auto_fields(&b));
                let reason = format!(
                    "auto turned on by jobqueue configure: starts from {} (p99 × {} within [{}, {}] once acks are seen)",
                    duration::format(new.visibility_timeout),
                    b.margin,
                    duration::format(b.floor(auto_visibility::RENEWAL_FLOOR)),
                    duration::format(b.max)
                );
                extra.extend(auto_visibility::set_fields("cli", now, &reason));
                extra.push((auto_visibility::fields::STATE, "{}".to_string()));
            } else if let Some(Visibility::Fixed(_)) = args.visibility_timeout {
                extra.push((auto_visibility::fields::MODE, "fixed".to_string()));
                extra.extend(auto_visibility::set_fields(
                    "cli",
                    now,
                    "set by jobqueue configure",
                ));
            }
            for queue in &queues {
                queue.configure(&new).await?;
                queue.write_meta(&extra).await?;
            }
            (new, true)
        }
        None => {
            if let Some(note) = &absent {
                eprintln!("note: {note}");
            }
            (current, false)
        }
    };
    if let Some(mode) = args.priority_mode {
        if let Some(note) = &absent
            && !args.create
        {
            return Err(UsageError(format!(
                "{note}; to make a new queue with this priority mode, add --create"
            ))
            .into());
        }
        for queue in &queues {
            queue.set_priority_mode(mode).await?;
        }
    }
    // Outcomes: the events stream's cap, a meta field of its own (events_max_len)
    if let Some(n) = args.events {
        if let Some(note) = &absent
            && !args.create
        {
            return Err(UsageError(format!(
                "{note}; to make a new queue with these settings, add --create"
            ))
            .into());
        }
        for queue in &queues {
            queue.set_events(n).await?;
        }
    }
    let rate_given = args.rate_limit.is_some() || args.rate_limit_per_key.is_some();
    if rate_given {
        if let Some(note) = &absent
            && !args.create
            && !written
        {
            return Err(UsageError(format!(
                "{note}; to make a new queue with these settings, add --create"
            ))
            .into());
        }
        for queue in &queues {
            queue
                .set_rate_limits(
                    args.rate_limit.map(RateSetting::change),
                    args.rate_limit_per_key.map(RateSetting::change),
                )
                .await?;
        }
    }
    let written = written || rate_given;
    let fields = queues[0].meta_fields().await?;
    let events = fields
        .get(crate::queue::EVENTS_FIELD)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let record = VisibilityRecord::from_fields(&fields);
    let priority_mode = PriorityMode::from_field(
        fields
            .get(crate::queue::PRIORITY_MODE_FIELD)
            .map(String::as_str),
    );
    let rates = RateLimits::from_fields(&fields);
    let mut out = std::io::stdout().lock();
    if args.json {
        let fields: serde_json::Map<String, serde_json::Value> = settings
            .to_fields()
            .into_iter()
            .map(|(k, v)| {
                let value = v
                    .parse::<u64>()
                    .map(serde_json::Value::from)
                    .or_else(|_| v.parse::<f64>().map(serde_json::Value::from))
                    .unwrap_or(serde_json::Value::from(v));
                (k.to_string(), value)
            })
            .collect();
        let mut fields = fields;
        if let Some((record, _)) = recorded {
            fields.insert("partitions".into(), record.partitions.into());
            if let Some(d) = record.drain {
                fields.insert("drain_partitions".into(), d.into());
            }
        }
        fields.insert("visibility".into(), visibility_json(&record));
        fields.insert("priority_mode".into(), priority_mode.as_str().into());
        fields.insert(crate::queue::EVENTS_FIELD.into(), events.into());
        let rate = |l: Option<RateLimit>| {
            l.map_or(
                serde_json::Value::Null,
                |l| serde_json::json!({"max": l.max, "per_ms": l.per.as_millis() as u64}),
            )
        };
        fields.insert("rate_limit".into(), rate(rates.queue));
        fields.insert("rate_limit_per_key".into(), rate(rates.per_key));
        writeln!(out, "{}", serde_json::Value::Object(fields))?;
        return Ok(());
    }
    let state = if written { "written" } else { "unchanged" };
    writeln!(out, "settings of {} ({state})", target.name())?;
    write!(out, "{}", table(&settings))?;
    let events = match events {
        0 => "off".to_string(),
        n => format!("about {n} kept (jobqueue events)"),
    };
    writeln!(out, "  {:<22}{events}", "events")?;
    if let Some((record, written)) = recorded {
        let state = if written { "recorded now" } else { "recorded" };
        let count = match record.drain {
            Some(d) => format!(
                "{} (draining the {d}-partition layout until its partitions are empty; end \
                 with --partitions {} --drain-partitions {})",
                record.partitions, record.partitions, record.partitions
            ),
            None => record.partitions.to_string(),
        };
        writeln!(out, "  {:<22}{count} ({state})", "partitions")?;
    }
    write!(out, "{}", visibility_lines(&record))?;
    let weights = match priority_mode {
        PriorityMode::Strict => "the highest priority ready first",
        PriorityMode::Weighted => "priority p gets a share weighing 2^p",
    };
    writeln!(
        out,
        "  {:<22}{} ({weights})",
        "priority mode",
        priority_mode.as_str()
    )?;
    write!(out, "{}", rate_lines(&rates))?;
    Ok(())
}

/// Lines under the settings table: the rate limits, when set.
pub fn rate_lines(rates: &RateLimits) -> String {
    let mut out = String::new();
    for (name, limit) in [
        ("rate limit", rates.queue),
        ("rate limit per key", rates.per_key),
    ] {
        if let Some(l) = limit {
            out.push_str(&format!(
                "  {name:<22}{l} (at most {} claims per {})\n",
                l.max,
                duration::format(l.per)
            ));
        }
    }
    out
}

/// The visibility record as JSON: `mode`, the auto bounds, who set the value, when, why.
pub fn visibility_json(r: &VisibilityRecord) -> serde_json::Value {
    let mut v = serde_json::json!({
        "mode": if r.auto.is_some() { "auto" } else { "fixed" },
        "set_by": r.set_by,
        "set_at_ms": r.set_at_ms,
        "reason": r.reason,
    });
    if let Some(b) = r.auto {
        v["auto"] = serde_json::json!({
            "min_ms": b.min.as_millis() as u64,
            "max_ms": b.max.as_millis() as u64,
            "margin": b.margin,
            "tuned_by": r.owner,
        });
    }
    v
}

/// Lines under a settings or stats table: `auto` and its bounds, and why the value is
/// what it is.
pub fn visibility_lines(r: &VisibilityRecord) -> String {
    let mut out = String::new();
    if let Some(b) = r.auto {
        let by = match r.owner {
            auto_visibility::Owner::Operator => "the operator",
            auto_visibility::Owner::Workers => "the workers' reapers",
        };
        out.push_str(&format!(
            "  {:<22}auto: p99 × {} within [{}, {}], tuned by {by}\n",
            "visibility mode",
            b.margin,
            duration::format(b.min),
            duration::format(b.max)
        ));
    }
    if let Some(reason) = &r.reason {
        let by = r.set_by.as_deref().unwrap_or("?");
        out.push_str(&format!(
            "  {:<22}{reason} (set by {by})\n",
            "visibility reason"
        ));
    }
    out
}

/// The settings for reading, with what zero means where it means something.
pub fn table(s: &QueueSettings) -> String {
    let zero_means = |d: Duration, meaning: &str| {
        if d.is_zero() {
            format!("0 ({meaning})")
        } else {
            duration::format(d)
        }
    };
    let rows = [
        ("visibility timeout", duration::format(s.visibility_timeout)),
        ("max attempts", s.max_attempts.to_string()),
        ("backoff initial", duration::format(s.backoff_initial)),
        ("backoff max", duration::format(s.backoff_max)),
        ("backoff multiplier", s.backoff_multiplier.to_string()),
        (
            "completed retention",
            zero_means(s.completed_retention, "deleted on ack"),
        ),
        (
            "dead retention",
            zero_means(s.dead_retention, "no age limit"),
        ),
        (
            "dead max len",
            if s.dead_max_len == 0 {
                "0 (no limit)".into()
            } else {
                s.dead_max_len.to_string()
            },
        ),
    ];
    rows.iter()
        .map(|(label, value)| format!("  {label:<22}{value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: ConfigureArgs,
    }

    fn args(flags: &[&str]) -> ConfigureArgs {
        let mut argv = vec!["x", "--tag", "t"];
        argv.extend_from_slice(flags);
        Wrap::try_parse_from(argv).unwrap().args
    }

    #[test]
    fn only_given_flags_change() {
        let base = QueueSettings::default();
        assert_eq!(args(&[]).apply(&base), None);
        let new = args(&["--visibility-timeout", "2m", "--dead-max-len", "0"])
            .apply(&base)
            .unwrap();
        assert_eq!(new.visibility_timeout, Duration::from_secs(120));
        assert_eq!(new.dead_max_len, 0);
        assert_eq!(new.max_attempts, base.max_attempts);
        assert_eq!(new.backoff_initial, base.backoff_initial);
    }

    #[test]
    fn auto_and_its_bounds_are_read_from_the_flags() {
        let fixed = VisibilityRecord::from_fields(&Default::default());
        let a = args(&["--visibility-timeout", "auto", "--auto-max", "10m"]);
        assert_eq!(a.visibility_timeout, Some(Visibility::Auto));
        assert_eq!(
            a.apply(&QueueSettings::default()),
            None,
            "the value comes from the rule"
        );
        let b = a.auto_bounds(&fixed).unwrap().unwrap();
        assert_eq!(
            (b.min, b.max, b.margin),
            (Duration::from_secs(5), Duration::from_secs(600), 2.0)
        );
        let err = args(&["--auto-margin", "3"])
            .auto_bounds(&fixed)
            .unwrap_err();
        assert!(
            err.0
                .contains("--auto-margin applies to --visibility-timeout auto"),
            "{}",
            err.0
        );
        let auto = VisibilityRecord::from_fields(
            &auto_visibility::auto_fields(&b)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        let kept = args(&["--auto-margin", "3"])
            .auto_bounds(&auto)
            .unwrap()
            .unwrap();
        assert_eq!((kept.max, kept.margin), (Duration::from_secs(600), 3.0));
        assert_eq!(
            args(&["--visibility-timeout", "1m"])
                .auto_bounds(&auto)
                .unwrap(),
            None
        );
        let wrong = Wrap::try_parse_from(["x", "--tag", "t", "--visibility-timeout", "sometimes"]);
        assert!(
            wrong
                .err()
                .unwrap()
                .to_string()
                .contains("(or auto: set from")
        );
    }

    #[test]
    fn the_table_explains_zeros() {
        let text = table(&QueueSettings {
            completed_retention: Duration::ZERO,
            dead_max_len: 0,
            ..QueueSettings::default()
        });
        assert!(text.contains("visibility timeout    30s"), "{text}");
        assert!(text.contains("0 (deleted on ack)"), "{text}");
        assert!(text.contains("0 (no limit)"), "{text}");
        assert!(text.contains("dead retention        7d"), "{text}");
    }
}
