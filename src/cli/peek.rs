//! `jobqueue peek`: the jobs next in line (every priority's, the highest first, as a
//! strict claim takes them), without claiming them; or the delayed jobs
//! next due, or the claimed jobs whose leases end first. Read-only. The AGE of a job is
//! since its `enqueued_at` (or its redrive); `-` for a job enqueued ready by a release
//! that wrote no `enqueued_at` (docs/protocol.md, job hash).

use std::io::Write;

use clap::Args;

use super::ConnectArgs;
use super::common::{note_if_target_absent, open_target};
use super::format::{add_id_hex, format_age, preview};
use super::show::{self, Payload};
use crate::queue::{JobStatus, Queue};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue peek --tag emails              # the next 10 jobs
  jobqueue peek --tag emails -n 50 --width 120
  jobqueue peek --tag emails --json
  jobqueue peek --tag emails --delayed       # next due first, with the time to due
  jobqueue peek --tag emails --processing    # claimed: lease time left and worker
  jobqueue peek --tag emails --partitions 6  # each partition in turn (--partition 2: one)";

#[derive(Debug, Args)]
pub struct PeekArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// How many jobs to show (at most 1000).
    #[arg(short = 'n', long, default_value_t = 10,
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub count: u16,
    /// Cut payload previews to this many characters.
    #[arg(long, default_value_t = 60)]
    pub width: usize,
    /// Print JSON, one object per job (whole payloads).
    #[arg(long)]
    pub json: bool,
    /// Show delayed jobs instead, the next due first, with the time to due.
    #[arg(long, conflicts_with = "processing")]
    pub delayed: bool,
    /// Show claimed jobs instead, the first lease to end first, with the time left on
    /// the lease and the worker.
    #[arg(long)]
    pub processing: bool,
}

pub async fn run(args: PeekArgs) -> anyhow::Result<()> {
    let target = open_target(&args.connect).await?;
    note_if_target_absent(&target).await?;
    super::common::note_if_partitions_unrecorded(&args.connect, &target).await;
    let queues = target.queues();
    for (i, queue) in queues.iter().enumerate() {
        if queues.len() > 1 && !args.json {
            let mut out = std::io::stdout().lock();
            if i > 0 {
                writeln!(out)?;
            }
            writeln!(out, "partition {i} of {}:", queues.len())?;
        }
        peek(queue, &args).await?;
    }
    Ok(())
}

/// One queue (or partition).
async fn peek(queue: &Queue, args: &PeekArgs) -> anyhow::Result<()> {
    let queue = queue.clone();
    if args.delayed || args.processing {
        return filed(&queue, args).await;
    }
    let stats = queue.stats().await?;
    let ids = queue.pending_ids(args.count as usize).await?;
    let now = queue.now_ms().await?;
    // a PRIORITY column while jobs of a priority above 0 wait
    let prioritized = stats.pending_by_priority[1..].iter().any(|&n| n > 0);
    let priority = |p: String| {
        if prioritized {
            format!("  {p:>8}")
        } else {
            String::new()
        }
    };
    let mut out = std::io::stdout().lock();
    if !args.json {
        if stats.pending == 0 {
            writeln!(out, "no pending jobs in {}", queue.name())?;
        } else {
            writeln!(
                out,
                "{} pending in {}; the next {}:",
                stats.pending,
                queue.name(),
                ids.len()
            )?;
            writeln!(
                out,
                "{:>4}  {:<24}{}  {:>8}  {:>5}  PAYLOAD",
                "#",
                "ID",
                priority("PRIORITY".into()),
                "ATTEMPTS",
                "AGE"
            )?;
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let info = queue.job(id).await?;
        // Claimed or deleted between the two reads: no longer next in line.
        let Some(info) = info else { continue };
        if args.json {
            let mut value = serde_json::to_value(&info)?;
            add_id_hex(&mut value, id);
            writeln!(out, "{value}")?;
            continue;
        }
        let age = info
            .enqueued_at
            .map_or_else(|| "-".into(), |t| format_age(now, t));
        writeln!(
            out,
            "{:>4}  {:<24}{}  {:>8}  {:>5}  {}",
            i + 1,
            id,
            priority(info.priority.to_string()),
            info.attempts,
            age,
            preview(&info.payload, args.width)
        )?;
    }
    if !args.json && stats.delayed > 0 {
        writeln!(out, "(and {} delayed)", stats.delayed)?;
    }
    Ok(())
}

/// `--delayed` / `--processing`: a sorted set's first entries, each with its time left.
async fn filed(queue: &Queue, args: &PeekArgs) -> anyhow::Result<()> {
    let count = args.count as usize;
    let stats = queue.stats().await?;
    let (wanted, total, entries) = if args.delayed {
        let entries = queue.delayed_ids(count).await?;
        (JobStatus::Delayed, stats.delayed, entries)
    } else {
        let entries = queue.processing_ids(count).await?;
        (JobStatus::Processing, stats.processing, entries)
    };
    let what = wanted.as_str();
    let mut out = std::io::stdout().lock();
    if !args.json {
        if total == 0 {
            writeln!(out, "no {what} jobs in {}", queue.name())?;
            return Ok(());
        }
        let order = if args.delayed {
            "next due"
        } else {
            "leases ending first"
        };
        writeln!(
            out,
            "{total} {what} in {}; the {} {order}:",
            queue.name(),
            entries.len()
        )?;
        if args.delayed {
            writeln!(
                out,
                "{:>4}  {:<24}  {:>8}  {:>10}  PAYLOAD",
                "#", "ID", "ATTEMPTS", "DUE IN"
            )?;
        } else {
            writeln!(
                out,
                "{:>4}  {:<24}  {:>8}  {:>10}  {:<20}  PAYLOAD",
                "#", "ID", "ATTEMPTS", "LEASE LEFT", "WORKER"
            )?;
        }
    }
    for (i, (id, _)) in entries.iter().enumerate() {
        // Claimed, acked or deleted between the reads: no longer filed there.
        let Some(view) = show::find(queue, id.as_bytes()).await? else {
            continue;
        };
        if view.status() != Some(wanted) {
            continue;
        }
        if args.json {
            writeln!(out, "{}", view.json(Payload::Whole)?)?;
            continue;
        }
        let payload = preview(&view.info.payload, args.width);
        if args.delayed {
            writeln!(
                out,
                "{:>4}  {:<24}  {:>8}  {:>10}  {payload}",
                i + 1,
                id,
                view.info.attempts,
                view.time_left()
            )?;
        } else {
            let worker = view.info.worker.as_deref().unwrap_or("-");
            writeln!(
                out,
                "{:>4}  {:<24}  {:>8}  {:>10}  {worker:<20}  {payload}",
                i + 1,
                id,
                view.info.attempts,
                view.time_left()
            )?;
        }
    }
    Ok(())
}
