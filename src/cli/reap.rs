//! `jobqueue reap`: expired leases back to pending (or to dead), once or on a timer.
//!
//! Under Kubernetes the operator reaps; a queue run without it needs `reap --every`
//! somewhere (the reaper is also what trims the dead-letter set).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use super::ConnectArgs;
use super::common::{Target, open_target, stop_signal};
use super::format::{count, format_epoch_ms};
use crate::duration;
use crate::queue::ReapOutcome;

pub const EXAMPLES: &str = "\
Examples:
  jobqueue reap --tag emails                 # once: everything expired now
  jobqueue reap --tag emails --every 5s      # a standalone reaper, until Ctrl-C/SIGTERM
  jobqueue reap --tag emails --partitions 6  # every partition (or --partition 2: one)
  jobqueue reap --tag emails --json          # {\"queue\":…,\"requeued\":0,…}

Says what it did: expired leases requeued or dead-lettered, due delayed jobs promoted to
pending, set-aside ids restored (their job hash back, purged ones included).";

/// Script calls per pass: a pass stops there even if expired leases remain (the next
/// pass goes on), so one pass never holds Redis for long.
const MAX_CALLS_PER_PASS: usize = 100;

#[derive(Debug, Args)]
pub struct ReapArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Keep reaping at this interval until Ctrl-C or SIGTERM.
    #[arg(long, allow_hyphen_values = true, value_parser = duration::parse)]
    pub every: Option<Duration>,
    /// Expired leases handled per script call (1 to 1000).
    #[arg(long, default_value_t = 250,
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub batch: u16,
    /// Print JSON: one object per pass (with --every, per pass that did something, and
    /// the totals when stopped).
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: ReapArgs) -> anyhow::Result<()> {
    if args.every.is_some_and(|every| every.is_zero()) {
        return Err(super::common::UsageError("--every must be above 0".into()).into());
    }
    let queue = open_target(&args.connect).await?;
    super::common::note_if_target_absent(&queue).await?;
    let batch = args.batch as usize;
    // Written through one lock, errors returned: a closed stdout ends the command quietly.
    let mut out = std::io::stdout().lock();
    let Some(every) = args.every else {
        let outcome = pass(&queue, batch).await?;
        writeln!(out, "{}", render(&queue, outcome, args.json, None))?;
        return Ok(());
    };
    // Listening before the line that says how to stop it.
    let stop = stop_signal();
    let start = format!(
        "reaping {} every {} (Ctrl-C or SIGTERM to stop)",
        queue.name(),
        duration::format(every)
    );
    if args.json {
        eprintln!("{start}");
    } else {
        writeln!(out, "{start}")?;
    }
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut total = ReapOutcome::default();
    let signal = loop {
        tokio::select! {
            signal = &mut stop => break signal,
            _ = tick.tick() => {}
        }
        match pass(&queue, batch).await {
            Ok(outcome) => {
                total += outcome;
                if did_something(&outcome) {
                    if args.json {
                        writeln!(out, "{}", render(&queue, outcome, true, None))?;
                    } else {
                        writeln!(out, "{}  {}", clock(), describe(&queue, outcome))?;
                    }
                }
            }
            // Redis away for a moment: say so, try again next tick.
            Err(err) if err.is_transient() => {
                eprintln!("{}  warning: {err} (retrying)", clock())
            }
            Err(err) => return Err(err.into()),
        }
    };
    total.more = false;
    if args.json {
        writeln!(out, "{}", render(&queue, total, true, Some(signal)))?;
    } else {
        writeln!(out, "stopped by {signal}: in total {}", summary(total))?;
    }
    Ok(())
}

fn did_something(o: &ReapOutcome) -> bool {
    o.requeued + o.dead_lettered + o.promoted + o.restored > 0
}

/// One pass, on a primary: a replica refuses every write, and a reap with nothing to
/// write would pass there unnoticed (checked each pass: a primary can be demoted).
async fn pass(queue: &Target, batch: usize) -> crate::queue::Result<ReapOutcome> {
    for q in queue.queues() {
        q.check_primary().await?;
    }
    queue.reap_expired(batch, MAX_CALLS_PER_PASS).await
}

/// What a reap did, in words: `1 expired lease requeued, 0 dead-lettered; 2 due delayed
/// jobs promoted; 0 set-aside ids restored`.
fn summary(o: ReapOutcome) -> String {
    let restored = match o.restored {
        0 => String::new(),
        1 => " (its job hash is back)".into(),
        _ => " (their job hash is back)".into(),
    };
    format!(
        "{} requeued, {} dead-lettered; {} promoted; {} restored{restored}",
        count(o.requeued, "expired lease"),
        o.dead_lettered,
        count(o.promoted, "due delayed job"),
        count(o.restored, "set-aside id"),
    )
}

fn describe(queue: &Target, o: ReapOutcome) -> String {
    let mut line = format!("reaped {}: {}", queue.name(), summary(o));
    if o.more {
        line.push_str(" (more expired leases or due delayed jobs remain: run again)");
    }
    line
}

/// One pass (or, with the signal that stopped `--every`, the totals) as text or JSON.
fn render(queue: &Target, o: ReapOutcome, json: bool, stopped_by: Option<&str>) -> String {
    if !json {
        return describe(queue, o);
    }
    let mut value = serde_json::json!({
        "queue": queue.name(),
        "requeued": o.requeued,
        "dead_lettered": o.dead_lettered,
        "promoted": o.promoted,
        "restored": o.restored,
        "more": o.more,
    });
    if let (Some(signal), Some(obj)) = (stopped_by, value.as_object_mut()) {
        obj.remove("more");
        obj.insert("stopped_by".into(), signal.into());
    }
    value.to_string()
}

fn clock() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    format_epoch_ms(ms)
}
