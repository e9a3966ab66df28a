//! `jobqueue reap`: expired leases back to pending (or to dead), once or on a timer.
//!
//! Under Kubernetes the operator reaps; a queue run without it needs `reap --every`
//! somewhere (the reaper is also what trims the dead-letter set).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use super::ConnectArgs;
use super::common::{Target, open_target, stop_signal};
use super::format::format_epoch_ms;
use crate::duration;
use crate::queue::ReapOutcome;

pub const EXAMPLES: &str = "\
Examples:
  jobqueue reap --tag emails                 # once: everything expired now
  jobqueue reap --tag emails --every 5s      # a standalone reaper, until Ctrl-C/SIGTERM
  jobqueue reap --tag emails --partitions 6  # every partition (or --partition 2: one)";

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
        writeln!(out, "{}", describe(&queue, outcome))?;
        return Ok(());
    };
    // Listening before the line that says how to stop it.
    let stop = stop_signal();
    writeln!(
        out,
        "reaping {} every {} (Ctrl-C or SIGTERM to stop)",
        queue.name(),
        duration::format(every)
    )?;
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
                if outcome.requeued + outcome.dead_lettered > 0 {
                    writeln!(out, "{}  {}", clock(), describe(&queue, outcome))?;
                }
            }
            // Redis away for a moment: say so, try again next tick.
            Err(err) if err.is_transient() => {
                eprintln!("{}  warning: {err} (retrying)", clock())
            }
            Err(err) => return Err(err.into()),
        }
    };
    writeln!(
        out,
        "stopped by {signal}: requeued {} and dead-lettered {} in total",
        total.requeued, total.dead_lettered
    )?;
    Ok(())
}

/// One pass, on a primary: a replica refuses every write, and a reap with nothing to
/// write would pass there unnoticed (checked each pass: a primary can be demoted).
async fn pass(queue: &Target, batch: usize) -> crate::queue::Result<ReapOutcome> {
    for q in queue.queues() {
        q.check_primary().await?;
    }
    queue.reap_expired(batch, MAX_CALLS_PER_PASS).await
}

fn describe(queue: &Target, o: ReapOutcome) -> String {
    let mut line = format!(
        "reaped {}: requeued {}, dead-lettered {}",
        queue.name(),
        o.requeued,
        o.dead_lettered
    );
    if o.more {
        line.push_str(" (more expired leases remain: run again)");
    }
    line
}

fn clock() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    format_epoch_ms(ms)
}
