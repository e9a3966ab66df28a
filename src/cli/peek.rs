//! `jobqueue peek`: the jobs next in line, without claiming them.

use std::io::Write;

use clap::Args;

use super::ConnectArgs;
use super::common::{note_if_absent, open};
use super::format::{add_id_hex, format_age, preview};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue peek --tag emails              # the next 10 jobs
  jobqueue peek --tag emails -n 50 --width 120
  jobqueue peek --tag emails --json";

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
}

pub async fn run(args: PeekArgs) -> anyhow::Result<()> {
    let queue = open(&args.connect).await?;
    note_if_absent(&queue).await?;
    let stats = queue.stats().await?;
    let ids = queue.pending_ids(args.count as usize).await?;
    let now = queue.now_ms().await?;
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
                "{:>4}  {:<24}  {:>8}  {:>5}  PAYLOAD",
                "#", "ID", "ATTEMPTS", "AGE"
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
            "{:>4}  {:<24}  {:>8}  {:>5}  {}",
            i + 1,
            id,
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
