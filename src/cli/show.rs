//! `jobqueue show`: one job in any status (pending, delayed, processing, dead, or done
//! when completed retention keeps it), read-only; and the text rendering of the job view
//! (`queue::view`, which the console reads too) that `dead show` and `peek` share.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;

use super::ConnectArgs;
use super::common::UsageError;
use super::format::{escape, format_epoch_ms};
use crate::queue::view::millis;
pub use crate::queue::view::{JobView, Payload, find};
use crate::queue::{JobId, JobOptions, JobStatus, PURGED_REMEMBERED_MS, Queue};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d --full
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d --out payload.bin
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d --json
  jobqueue show --tag emails --id-hex 626164ff     # an id output shows as hex:626164ff

Ids: output shows an id as it is when it is UTF-8 text without control characters, else
as hex:<its bytes in hex> (also a text id that begins with hex:); --id-hex takes either
form (626164ff or hex:626164ff). With --json, `id` is the id itself when it is UTF-8, and
`id_hex` holds its exact bytes whenever text output shows it as hex:.";

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which_id").required(true).args(["id", "id_hex"])))]
pub struct ShowArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job's id (any bytes the shell passes; see --id-hex).
    pub id: Option<OsString>,
    /// The job's id as hex (the `id_hex` of `--json` output, or the `hex:…` form text
    /// output shows), for an id that is not text.
    #[arg(long, value_name = "HEX", conflicts_with = "id")]
    pub id_hex: Option<String>,
    /// The ID argument is hex (as --id-hex takes it).
    #[arg(long, requires = "id")]
    pub hex: bool,
    /// Print the whole payload (escaped where it is not UTF-8 text), not the first
    /// 200 bytes.
    #[arg(long)]
    pub full: bool,
    /// Write the whole payload, byte for byte, to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The row that says when its status changes next (or changed last, for the dead).
fn timing_row(view: &JobView) -> Option<(&'static str, String)> {
    let at = |t: i64, note: String| format!("{} UTC ({note})", format_epoch_ms(t));
    match view.status()? {
        JobStatus::Delayed => Some((
            "run at",
            view.filed_at.map_or_else(
                || "-".into(),
                |t| match t - view.now {
                    ms if ms >= 0 => at(t, format!("in {}", millis(ms))),
                    ms => at(
                        t,
                        format!("due {} ago: the next claim takes it", millis(-ms)),
                    ),
                },
            ),
        )),
        JobStatus::Processing => Some((
            "lease until",
            view.lease_until().map_or_else(
                || "-".into(),
                |t| match t - view.now {
                    ms if ms >= 0 => at(t, format!("{} left", millis(ms))),
                    ms => at(
                        t,
                        format!("expired {} ago: a reaper puts it back", millis(-ms)),
                    ),
                },
            ),
        )),
        _ => None,
    }
}

/// The rows of the job's own options (docs/protocol.md, *Per-job options*), each only
/// when the job has it: without, the queue's setting (or the worker's) applies.
fn option_rows(o: &JobOptions) -> Vec<(&'static str, String)> {
    let d = |d: Duration| crate::duration::format(d);
    let mut rows = Vec::new();
    if let Some(n) = o.max_attempts {
        rows.push(("max attempts", n.to_string()));
    }
    let backoff: Vec<String> = [
        o.backoff_initial.map(|v| format!("initial {}", d(v))),
        o.backoff_max.map(|v| format!("max {}", d(v))),
        o.backoff_multiplier.map(|m| format!("multiplier {m}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !backoff.is_empty() {
        rows.push(("backoff", backoff.join(", ")));
    }
    if let Some(t) = o.timeout {
        rows.push(("timeout", format!("{} (one run at most)", d(t))));
    }
    if let Some(v) = o.visibility {
        rows.push(("visibility", format!("{} (each lease)", d(v))));
    }
    if let Some(key) = &o.rate_key {
        rows.push(("rate key", escape(key.as_bytes(), false)));
    }
    if let Some(n) = o.notify {
        rows.push((
            "notify",
            format!(
                "{} (its end is announced on the done stream; its hash is kept this long after)",
                d(n)
            ),
        ));
    }
    rows
}

/// The job as text, one `label value` row per line, then its payload.
pub fn write_text(view: &JobView, out: &mut impl Write, payload: Payload) -> std::io::Result<()> {
    let info = &view.info;
    let time = |t: Option<i64>| t.map_or_else(|| "-".to_string(), format_epoch_ms);
    let mut rows = vec![
        ("id", info.id.to_string()),
        ("status", view.status_text()),
        ("attempts", info.attempts.to_string()),
        ("enqueued", time(info.enqueued_at)),
        ("last claimed", time(info.claimed_at)),
    ];
    rows.extend(timing_row(view));
    if view.status() == Some(JobStatus::Dead) {
        rows.push(("died", time(view.filed_at)));
    }
    rows.push(("worker", info.worker.clone().unwrap_or_else(|| "-".into())));
    if let Some(key) = &info.unique_key {
        let mode = info.unique_mode.as_deref().unwrap_or("until-done");
        rows.push(("unique key", format!("{key} ({mode})")));
    }
    rows.push(("priority", info.priority.to_string()));
    rows.extend(option_rows(&info.options));
    if let Some(a) = &view.aside {
        let (label, until) = if a.purged {
            (
                "forgotten",
                format!(
                    ", remembered until {} UTC",
                    format_epoch_ms(a.at + PURGED_REMEMBERED_MS)
                ),
            )
        } else {
            ("set aside", String::new())
        };
        rows.push((
            label,
            format!("{} UTC{until}: {}", format_epoch_ms(a.at), a.reason()),
        ));
    }
    rows.push((
        "last error",
        info.last_error
            .as_deref()
            .map_or_else(|| "-".into(), |e| escape(e.as_bytes(), false)),
    ));
    // Outcomes: the progress its worker last reported
    if let Some(p) = &info.progress {
        let at = p.at.map_or_else(String::new, |at| {
            format!(" (at {} UTC)", format_epoch_ms(at))
        });
        rows.push((
            "progress",
            format!("{}% {}{at}", p.percent, escape(p.message.as_bytes(), false)),
        ));
    }
    for (label, value) in rows {
        writeln!(out, "{label:<14}{value}")?;
    }
    let errors = &view.info.errors;
    if !errors.is_empty() {
        writeln!(
            out,
            "errors of the last {} failed attempts, oldest first:",
            errors.len()
        )?;
        for e in errors {
            writeln!(
                out,
                "  attempt {:<4} {} UTC  {}",
                e.attempt,
                format_epoch_ms(e.at),
                escape(e.error.as_bytes(), false)
            )?;
        }
    }
    // Outcomes: the result its ack stored
    if let Some(result) = &info.result {
        writeln!(out, "result ({} bytes):", result.len())?;
        writeln!(out, "{}", escape(result, true))?;
    }
    let (shown, rest) = view.payload_cut(payload);
    writeln!(out, "payload ({} bytes):", view.payload_len())?;
    writeln!(out, "{}", escape(shown, true))?;
    if rest > 0 {
        writeln!(
            out,
            "… {rest} more bytes: --full prints them all, --out FILE writes the payload to FILE"
        )?;
    }
    Ok(())
}

/// Read job `id` and where it is filed, or fail (exit 1) naming it when there is none.
pub async fn load(queue: &Queue, id: &[u8]) -> anyhow::Result<JobView> {
    find(queue, id).await?.ok_or_else(|| {
        anyhow!(
            "no job \"{}\" in queue {}: never enqueued there, or gone (a done job is kept \
             only with completed retention; a dead one until dead retention)",
            JobId::from(id),
            queue.name()
        )
    })
}

/// The id's bytes as given: the argument's own bytes, or decoded from hex.
fn id_bytes(args: &ShowArgs) -> anyhow::Result<Vec<u8>> {
    let hex = match (&args.id, args.hex) {
        (Some(id), true) => Some(id.to_string_lossy().into_owned()),
        _ => args.id_hex.clone(),
    };
    let id = args.id.as_deref().filter(|_| !args.hex);
    let id = super::common::given_id(id, hex.as_deref())?;
    Ok(id.ok_or_else(|| UsageError("give the job's id, or --id-hex HEX".into()))?)
}

pub async fn run(args: ShowArgs) -> anyhow::Result<()> {
    let id = id_bytes(&args)?;
    let target = super::common::open_target(&args.connect).await?;
    super::common::note_if_target_absent(&target).await?;
    let queues = target.queues();
    // Partitioned: the partition that holds the job (the first, when none does).
    let mut queue = queues[0].clone();
    for q in &queues {
        if find(q, &id).await?.is_some() {
            queue = q.clone();
            break;
        }
    }
    let view = load(&queue, &id).await?;
    if let Some(path) = &args.out {
        std::fs::write(path, &view.info.payload)
            .with_context(|| format!("cannot write the payload to {}", path.display()))?;
    }
    let payload = if args.full {
        Payload::Whole
    } else {
        Payload::Preview
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", view.json(payload)?)?;
    } else {
        write_text(&view, &mut out, payload)?;
        if let Some(path) = &args.out {
            writeln!(
                out,
                "payload written to {} ({} bytes)",
                path.display(),
                view.info.payload.len()
            )?;
        }
    }
    Ok(())
}
