//! `jobqueue schedule`: the recurring jobs of a queue (docs/protocol.md, Schedules):
//! add, ls, show, rm, pause, resume. The workers' reapers and the operator fire them.

use std::io::Write;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};

use super::ConnectArgs;
use super::common::{Target, UsageError, open_target};
use super::enqueue::JobOptionArgs;
use super::format::format_epoch_ms;
use crate::queue::Queue;
use crate::queue::schedule::{Missed, Rule, Schedule, ScheduleInfo};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue schedule add --tag reports nightly --cron '0 3 * * *' --tz Europe/Paris '{\"kind\":\"nightly\"}'
  jobqueue schedule add --tag pings ping --every 30s --missed once ping
  jobqueue schedule add --tag reports hourly --every 1h --priority 7 --timeout 10m --visibility 1m '{}'
  jobqueue schedule ls --tag reports
  jobqueue schedule show --tag reports nightly      # the rule and its next 5 ticks
  jobqueue schedule pause --tag reports nightly
  jobqueue schedule resume --tag reports nightly
  jobqueue schedule rm --tag reports nightly

A schedule enqueues one job per tick, id sched:<name>:<tick ms>, whoever fires it: every
worker's reaper and the operator fire due schedules. A tick fired late by its interval or
more follows --missed: skip (no job; the next tick is the first after now) or once (one
job for the missed ticks). Cron takes 5 fields (minute hour day month weekday) or 6
(seconds first), in --tz (an IANA time zone; default UTC).

Every job a schedule fires carries the schedule's own job options, the flags of
`jobqueue enqueue` with the same names and checks: --max-attempts, --backoff-initial,
--backoff-max, --backoff-multiplier, --priority, --timeout, --visibility, --rate-key.";

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    pub command: ScheduleCommand,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Add a schedule, or replace the rule of the one of that name.
    Add(Box<AddArgs>),
    /// List the queue's schedules with their last and next tick.
    #[command(mut_arg("durability", super::read_only))]
    Ls(LsArgs),
    /// Show one schedule and its next ticks.
    #[command(mut_arg("durability", super::read_only))]
    Show(NameArgs),
    /// Remove a schedule (the jobs it fired stay).
    Rm(NameArgs),
    /// Pause a schedule: no ticks until resume.
    Pause(NameArgs),
    /// Resume a paused schedule from its next tick after now.
    Resume(NameArgs),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("rule").required(true).args(["every", "cron"])))]
pub struct AddArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The schedule's name: 1..200 characters of A-Z a-z 0-9 . _ -
    pub name: String,
    /// The payload of every job it enqueues.
    pub payload: String,
    /// Tick every interval (e.g. 30s, 5m, 1h), at multiples of it since the epoch.
    #[arg(long, value_parser = crate::duration::parse)]
    pub every: Option<Duration>,
    /// Tick at the times of this cron expression (5 fields, or 6 with seconds first).
    #[arg(long)]
    pub cron: Option<String>,
    /// The cron expression's time zone (IANA, e.g. Europe/Paris; default UTC).
    #[arg(long, requires = "cron")]
    pub tz: Option<String>,
    /// A tick late by its interval or more: skip it, or fire once for the missed ticks.
    #[arg(long, default_value = "skip", value_parser = ["skip", "once"])]
    pub missed: String,
    /// Add it paused.
    #[arg(long)]
    pub paused: bool,
    /// The options of every job it fires, as `jobqueue enqueue` takes them.
    #[command(flatten)]
    pub job: JobOptionArgs,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print JSON, one object per schedule.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The schedule's name.
    pub name: String,
    /// show: how many next ticks to list.
    #[arg(long, default_value_t = 5)]
    pub next: usize,
}

async fn one_queue(connect: &ConnectArgs) -> anyhow::Result<Queue> {
    match open_target(connect).await? {
        Target::One(q) => Ok(q),
        Target::All(q) => Err(UsageError(format!(
            "{} is partitioned: a schedule lives on one queue; name a partition with --partition",
            q.name()
        ))
        .into()),
    }
}

pub async fn run(args: ScheduleArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match args.command {
        ScheduleCommand::Add(a) => {
            let a = *a;
            let queue = one_queue(&a.connect).await?;
            if a.every.is_some() && a.tz.is_some() {
                return Err(UsageError(
                    "--tz applies to --cron: an --every schedule ticks at multiples of its interval since the epoch".into(),
                )
                .into());
            }
            let rule = match (a.every, a.cron) {
                (Some(d), None) => Rule::Every(d),
                (None, Some(expr)) => Rule::Cron {
                    expr,
                    tz: a.tz.unwrap_or_else(|| "UTC".into()),
                },
                _ => unreachable!("clap requires exactly one of --every, --cron"),
            };
            let s = Schedule {
                name: a.name.clone(),
                rule,
                payload: a.payload.into_bytes(),
                options: a.job.options(),
                missed: Missed::parse(&a.missed)?,
                paused: a.paused,
            };
            let did = queue.put_schedule(&s).await?;
            let info = queue.schedule(&a.name).await?;
            let next = info
                .and_then(|i| i.next_tick)
                .map(format_epoch_ms)
                .unwrap_or_else(|| "none (paused)".into());
            let what = match did {
                1 => "added",
                2 => "changed",
                _ => "unchanged",
            };
            writeln!(
                out,
                "schedule {} of {}: {what}; next tick {next}",
                a.name,
                queue.name()
            )?;
        }
        ScheduleCommand::Ls(a) => {
            let queue = one_queue(&a.connect).await?;
            let all = queue.schedules().await?;
            if a.json {
                for s in &all {
                    writeln!(out, "{}", json_of(s))?;
                }
            } else if all.is_empty() {
                writeln!(out, "no schedules on {}", queue.name())?;
            } else {
                writeln!(
                    out,
                    "{:<24} {:<28} {:<6} {:<24} {:<24}",
                    "NAME", "RULE", "MISSED", "LAST TICK", "NEXT TICK"
                )?;
                for s in &all {
                    writeln!(
                        out,
                        "{:<24} {:<28} {:<6} {:<24} {:<24}",
                        s.name,
                        rule_text(&s.rule),
                        s.missed.as_str(),
                        tick_text(s.last_tick, "-"),
                        tick_text(s.next_tick, "paused"),
                    )?;
                }
            }
        }
        ScheduleCommand::Show(a) => {
            let queue = one_queue(&a.connect).await?;
            let Some(s) = queue.schedule(&a.name).await? else {
                anyhow::bail!("no schedule {} on {}", a.name, queue.name());
            };
            writeln!(out, "schedule  {}", s.name)?;
            writeln!(out, "rule      {}", rule_text(&s.rule))?;
            writeln!(out, "missed    {}", s.missed.as_str())?;
            writeln!(out, "paused    {}", if s.paused { "yes" } else { "no" })?;
            writeln!(out, "payload   {}", String::from_utf8_lossy(&s.payload))?;
            for (k, v) in &s.options {
                writeln!(out, "option    {k} = {v}")?;
            }
            writeln!(out, "last tick {}", tick_text(s.last_tick, "none"))?;
            if let Some(job) = &s.last_job {
                writeln!(out, "last job  {job}")?;
            }
            match s.next_tick {
                Some(first) => {
                    writeln!(out, "next ticks")?;
                    let mut ticks = vec![first];
                    ticks.extend(s.rule.upcoming(first, a.next.saturating_sub(1))?);
                    for t in ticks.iter().take(a.next) {
                        writeln!(out, "  {}", format_epoch_ms(*t))?;
                    }
                }
                None => writeln!(out, "next ticks none (paused)")?,
            }
        }
        ScheduleCommand::Rm(a) => {
            let queue = one_queue(&a.connect).await?;
            if queue.remove_schedule(&a.name).await? {
                writeln!(out, "removed schedule {} of {}", a.name, queue.name())?;
            } else {
                anyhow::bail!("no schedule {} on {}", a.name, queue.name());
            }
        }
        ScheduleCommand::Pause(a) => pause(&mut out, a, true).await?,
        ScheduleCommand::Resume(a) => pause(&mut out, a, false).await?,
    }
    Ok(())
}

async fn pause(out: &mut impl Write, a: NameArgs, pause: bool) -> anyhow::Result<()> {
    let queue = one_queue(&a.connect).await?;
    let (done, state) = if pause {
        ("paused", "paused")
    } else {
        ("resumed", "running")
    };
    match queue.pause_schedule(&a.name, pause).await? {
        None => anyhow::bail!("no schedule {} on {}", a.name, queue.name()),
        Some(true) => writeln!(out, "{done} schedule {} of {}", a.name, queue.name())?,
        Some(false) => writeln!(
            out,
            "schedule {} of {} was {state} already: nothing changed",
            a.name,
            queue.name()
        )?,
    }
    Ok(())
}

fn rule_text(rule: &Rule) -> String {
    match rule {
        Rule::Every(d) => format!("every {}", crate::duration::format(*d)),
        Rule::Cron { expr, tz } => format!("cron {expr} ({tz})"),
    }
}

fn tick_text(t: Option<i64>, none: &str) -> String {
    t.map(format_epoch_ms).unwrap_or_else(|| none.to_string())
}

fn json_of(s: &ScheduleInfo) -> serde_json::Value {
    let (every_ms, cron, tz) = match &s.rule {
        Rule::Every(d) => (Some(d.as_millis() as u64), None, None),
        Rule::Cron { expr, tz } => (None, Some(expr.clone()), Some(tz.clone())),
    };
    serde_json::json!({
        "name": s.name,
        "every_ms": every_ms,
        "cron": cron,
        "tz": tz,
        "missed": s.missed.as_str(),
        "paused": s.paused,
        "payload": String::from_utf8_lossy(&s.payload),
        "last_tick": s.last_tick,
        "next_tick": s.next_tick,
        "last_job": s.last_job,
    })
}
