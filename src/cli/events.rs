//! `jobqueue events`: follow a queue's completion events (acked, failed, dead, cancelled),
//! one line each, from the capped stream `P:{T}:events` (docs/protocol.md, Outcomes).

use std::io::Write;
use std::time::Duration;

use clap::Args;

use super::ConnectArgs;
use super::common::UsageError;
use crate::queue::{EVENTS_FIELD, JobEvent, parse_stream_id};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue configure --tag emails --events 10000   # keep about 10000 events
  jobqueue events --tag emails                     # follow from now on
  jobqueue events --tag emails --from 0            # from the oldest kept
  jobqueue events --tag emails --from 1764641234567-0 --count 10

Each line: the event's stream id, the event (acked, failed, dead, cancelled), the job id,
and for failed and dead the attempt's error. Events are kept only while the queue's
`events_max_len` is set (jobqueue configure --events N): about the last N.";

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Where to start: `now` (only what comes next), `0` (the oldest kept), or a stream id
    /// `<ms>-<seq>` (the events after it).
    #[arg(long, default_value = "now")]
    pub from: String,
    /// Stop after this many events (default: follow until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
}

/// How long one blocking read waits before it is sent again.
const BLOCK: Duration = Duration::from_secs(5);

pub async fn run(args: EventsArgs) -> anyhow::Result<()> {
    let from = match args.from.as_str() {
        "now" | "$" => None,
        other => Some(parse_stream_id(other).map_err(|e| UsageError(e.to_string()))?),
    };
    let queue = args.connect.partitioned().await?;
    let queue = match (args.connect.partition, queue.partitions().len()) {
        (Some(p), _) => queue.partition(p)?.clone(),
        (None, 1) => queue.partitions()[0].clone(),
        (None, n) => {
            return Err(UsageError(format!(
                "{} has {n} partitions, each with its own events: give --partition",
                queue.name()
            ))
            .into());
        }
    };
    let meta = queue.meta_fields().await?;
    if meta
        .get(EVENTS_FIELD)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        == 0
    {
        eprintln!(
            "note: {} keeps no events (events_max_len is not set): \
             `jobqueue configure --tag {} --events 10000` turns them on",
            queue.name(),
            args.connect.tag
        );
    }
    let mut after = match from {
        Some(id) => id,
        None => queue.stream_tail(&queue.events_key()).await?,
    };
    let mut conn = queue.redis().dedicated(BLOCK).await?;
    let mut left = args.count;
    let mut out = std::io::stdout().lock();
    while left != Some(0) {
        let want = left.map_or(100, |n| n.min(100)) as usize;
        let events = tokio::select! {
            events = queue.read_events(&mut conn, &after, want, Some(BLOCK)) => events?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        for e in events {
            after = e.stream_id.clone();
            writeln!(out, "{}", line(&e))?;
            if let Some(n) = left.as_mut() {
                *n -= 1;
            }
        }
        out.flush()?;
    }
    Ok(())
}

fn line(e: &JobEvent) -> String {
    let id = &e.id;
    match &e.error {
        Some(err) => format!(
            "{} {} {id} {}",
            e.stream_id,
            e.event,
            super::format::escape(err.as_bytes(), false)
        ),
        None => format!("{} {} {id}", e.stream_id, e.event),
    }
}
