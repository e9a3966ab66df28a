//! `jobqueue configure`: show or change the settings in a queue's `meta` hash.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use super::ConnectArgs;
use super::common::{UsageError, absent_note, open_target};
use crate::duration;
use crate::queue::QueueSettings;

pub const EXAMPLES: &str = "\
Examples:
  jobqueue configure --tag emails                       # show the settings
  jobqueue configure --tag emails --visibility-timeout 2m --max-attempts 10
  jobqueue configure --tag reports --create --max-attempts 3   # a queue not in Redis yet
  jobqueue configure --tag emails --backoff-initial 5s --backoff-max 1h --backoff-multiplier 3
  jobqueue configure --tag emails --completed-retention 1h   # keep done jobs (dedup window)

Settings not given keep their current value. Under the operator, the JobQueue resource
owns these settings and rewrites them on every reconcile.";

#[derive(Debug, Args)]
pub struct ConfigureArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// How long a claimed job is leased before the reaper may take it back.
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub visibility_timeout: Option<Duration>,
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
    /// Write the settings of a queue none of whose keys are in Redis yet (without it, a
    /// mistyped --tag is refused instead of making a queue nobody uses).
    #[arg(long)]
    pub create: bool,
    /// Print JSON (the `meta` fields).
    #[arg(long)]
    pub json: bool,
}

impl ConfigureArgs {
    /// `settings` with every given flag applied; `None` when no flag was given.
    fn apply(&self, settings: &QueueSettings) -> Option<QueueSettings> {
        let mut s = settings.clone();
        let mut changed = false;
        let mut set = |given: bool| changed |= given;
        if let Some(v) = self.visibility_timeout {
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

pub async fn run(args: ConfigureArgs) -> anyhow::Result<()> {
    // Partitioned: read the first partition, write every one (all are configured alike).
    let target = open_target(&args.connect).await?;
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
    let (settings, written) = match args.apply(&current) {
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
            for queue in &queues {
                queue.configure(&new).await?;
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
        writeln!(out, "{}", serde_json::Value::Object(fields))?;
        return Ok(());
    }
    let state = if written { "written" } else { "unchanged" };
    writeln!(out, "settings of {} ({state})", target.name())?;
    write!(out, "{}", table(&settings))?;
    Ok(())
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
