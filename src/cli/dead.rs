//! `jobqueue dead`: the dead-letter set: list, show, redrive, purge; and `purge
//! --orphans`, which forgets the ids set aside for a missing job hash.

use std::io::Write;

use clap::{ArgGroup, Args, Subcommand};

use super::ConnectArgs;
use super::common::{Target, UsageError, given_id, note_if_target_absent, open_target};
use super::format::{add_id_hex, count, format_epoch_ms, preview_end};
use super::progress::Progress;
use super::show::Payload;
use crate::queue::{Error, JobId, JobInfo, JobStatus, MAX_BATCH, Queue, Selection};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue dead ls --tag emails
  jobqueue dead show --tag emails 8fK2pQ0aZr1xYc3d
  jobqueue dead redrive --tag emails 8fK2pQ0aZr1xYc3d
  jobqueue dead redrive --tag emails --oldest 100
  jobqueue dead purge --tag emails --all --yes
  jobqueue dead purge --tag emails --orphans --yes
  jobqueue dead redrive --tag emails --partitions 6 --oldest 100   # oldest over all partitions
  jobqueue dead redrive --tag emails --id-hex hex:626164ff          # an id listed as hex:626164ff

Ids: dead ls shows an id as it is when it is UTF-8 text without control characters, else
as hex:<its bytes in hex> (also a text id that begins with hex:); --id-hex takes either
form. With --json, `id` is the id itself when it is UTF-8, and `id_hex` holds its exact
bytes whenever text output shows it as hex:.";

#[derive(Debug, Args)]
pub struct DeadArgs {
    #[command(subcommand)]
    pub command: DeadCommand,
}

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead jobs, oldest death first.
    #[command(
        after_help = "Example:\n  jobqueue dead ls --tag emails --limit 50",
        mut_arg("durability", super::read_only)
    )]
    Ls(LsArgs),
    /// Show one job in full: status, attempts, times, last error, payload.
    #[command(
        after_help = "Examples:\n  jobqueue dead show --tag emails 8fK2pQ0aZr1xYc3d\n  \
                            jobqueue dead show --tag emails 8fK2pQ0aZr1xYc3d --raw > payload.bin\n  \
                            jobqueue dead show --tag emails --id-hex hex:626164ff",
        mut_arg("durability", super::read_only)
    )]
    Show(ShowArgs),
    /// Move dead jobs back to pending, attempts reset to 0.
    #[command(
        after_help = "Examples:\n  jobqueue dead redrive --tag emails ID1 ID2\n  \
                            jobqueue dead redrive --tag emails --oldest 100\n  \
                            jobqueue dead redrive --tag emails --all"
    )]
    Redrive(SelectArgs),
    /// Delete dead jobs and their payloads for good; or, with --orphans, forget the ids
    /// set aside because their job hash was absent.
    #[command(after_help = "Examples:\n  jobqueue dead purge --tag emails ID1\n  \
                            jobqueue dead purge --tag emails --oldest 1000\n  \
                            jobqueue dead purge --tag emails --all --yes\n  \
                            jobqueue dead purge --tag emails --orphans --yes")]
    Purge(PurgeArgs),
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// How many to list.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Skip this many (oldest first).
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// Print JSON, one object per job.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which_id").required(true).args(["id", "id_hex"])))]
pub struct ShowArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job's id (any bytes the shell passes: an id with a space, quoted).
    pub id: Option<std::ffi::OsString>,
    /// The job's id as hex (the `id_hex` of `dead ls --json`, or the `hex:…` form text
    /// output shows), for an id that is not text.
    #[arg(long, value_name = "HEX", conflicts_with = "id")]
    pub id_hex: Option<String>,
    /// Print only the payload, byte for byte.
    #[arg(long, conflicts_with = "json")]
    pub raw: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["ids", "id_hex", "oldest", "all"])))]
pub struct SelectArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Dead jobs by id (any bytes the shell passes: an id with a space, quoted).
    pub ids: Vec<std::ffi::OsString>,
    /// A dead job by its id in hex (the `id_hex` of `dead ls --json`, or the `hex:…` form
    /// text output shows), for an id that is not text; may be repeated.
    #[arg(long, value_name = "HEX")]
    pub id_hex: Vec<String>,
    /// The N oldest dead jobs (by time of death).
    #[arg(long, value_name = "N")]
    pub oldest: Option<usize>,
    /// Every dead job.
    #[arg(long)]
    pub all: bool,
    /// Redrive asks no confirmation; accepted so that one command line serves both
    /// redrive and purge.
    #[arg(long, hide = true)]
    pub yes: bool,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("purge_which").required(true).args(["ids", "id_hex", "oldest", "all", "orphans"])))]
pub struct PurgeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Dead jobs by id (any bytes the shell passes: an id with a space, quoted).
    pub ids: Vec<std::ffi::OsString>,
    /// A dead job by its id in hex (the `id_hex` of `dead ls --json`, or the `hex:…` form
    /// text output shows), for an id that is not text; may be repeated.
    #[arg(long, value_name = "HEX")]
    pub id_hex: Vec<String>,
    /// The N oldest dead jobs (by time of death).
    #[arg(long, value_name = "N")]
    pub oldest: Option<usize>,
    /// Every dead job.
    #[arg(long)]
    pub all: bool,
    /// Forget every id set aside because its job hash was absent (`orphaned` in
    /// `jobqueue stats`) and whose hash is still absent (or whose job key is not a hash).
    /// Ids whose hash came back are left for the reaper to put back; a forgotten id is
    /// remembered for 7 days, so a hash that comes back meanwhile is still put back and
    /// runs. Needs --yes.
    #[arg(long, conflicts_with_all = ["ids", "id_hex", "oldest", "all"])]
    pub orphans: bool,
    /// Confirm `purge --all` and `purge --orphans`.
    #[arg(long)]
    pub yes: bool,
}

impl PurgeArgs {
    /// The dead jobs it selects (all but --orphans).
    fn selection(self) -> SelectArgs {
        SelectArgs {
            connect: self.connect,
            ids: self.ids,
            id_hex: self.id_hex,
            oldest: self.oldest,
            all: self.all,
            yes: self.yes,
        }
    }
}

pub async fn run(args: DeadArgs) -> anyhow::Result<()> {
    match args.command {
        DeadCommand::Ls(a) => ls(a).await,
        DeadCommand::Show(a) => show(a).await,
        DeadCommand::Redrive(a) => select(a, Action::Redrive).await,
        DeadCommand::Purge(a) if a.orphans => purge_orphans(&a.connect, a.yes).await,
        DeadCommand::Purge(a) => select(a.selection(), Action::Purge).await,
    }
}

async fn ls(args: LsArgs) -> anyhow::Result<()> {
    if args.limit == 0 {
        return Err(UsageError("--limit must be above 0 (e.g. --limit 20)".into()).into());
    }
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
        ls_one(queue, &args).await?;
    }
    Ok(())
}

/// The dead jobs of one queue (or partition).
async fn ls_one(queue: &Queue, args: &LsArgs) -> anyhow::Result<()> {
    let total = queue.stats().await?.dead;
    let entries = queue.dead_ids(args.offset, args.limit).await?;
    let queue = queue.clone();
    let mut out = std::io::stdout().lock();
    if !args.json {
        if total == 0 {
            writeln!(out, "no dead jobs in {}", queue.name())?;
            return Ok(());
        }
        writeln!(out, "{} in {}", count(total, "dead job"), queue.name())?;
        writeln!(
            out,
            "{:<24}  {:<19}  {:>8}  LAST ERROR",
            "ID", "DIED (UTC)", "ATTEMPTS"
        )?;
    }
    for (id, died_at) in &entries {
        let info = job(&queue, id).await?;
        if args.json {
            let mut value = serde_json::json!({
                "id": id,
                "died_at": died_at,
                "attempts": info.as_ref().map(|i| i.attempts),
                "last_error": info.as_ref().and_then(|i| i.last_error.clone()),
            });
            add_id_hex(&mut value, id);
            writeln!(out, "{value}")?;
        } else {
            let attempts = info.as_ref().map_or(0, |i| i.attempts);
            let error = info
                .as_ref()
                .and_then(|i| i.last_error.as_deref())
                // The end of a stderr tail is where the error is.
                .map_or_else(|| "-".to_string(), |e| preview_end(e, 60));
            writeln!(
                out,
                "{id:<24}  {:<19}  {attempts:>8}  {error}",
                format_epoch_ms(*died_at)
            )?;
        }
    }
    let shown_to = args.offset + entries.len();
    if !args.json && (shown_to as u64) < total {
        writeln!(
            out,
            "({} more: use --offset {shown_to})",
            total - shown_to as u64
        )?;
    }
    Ok(())
}

/// Ids are read as Redis holds them: one written by another client (with a space, or
/// not UTF-8) is listed (as `hex:…` when it is not plain text) instead of failing the
/// listing.
async fn job(queue: &Queue, id: impl AsRef<[u8]>) -> anyhow::Result<Option<JobInfo>> {
    Ok(queue.job(id).await?)
}

async fn show(args: ShowArgs) -> anyhow::Result<()> {
    let id = given_id(args.id.as_deref(), args.id_hex.as_deref())?
        .ok_or_else(|| UsageError("give the job's id, or --id-hex HEX".into()))?;
    let queues = open_target(&args.connect).await?.queues();
    // The partition that holds the job (the first, when none does: it says so).
    let mut queue = &queues[0];
    for q in &queues {
        if q.job(&id).await?.is_some() {
            queue = q;
            break;
        }
    }
    let view = super::show::load(queue, &id).await?;
    let mut out = std::io::stdout().lock();
    if args.raw {
        out.write_all(&view.info.payload)?;
        return Ok(());
    }
    if args.json {
        writeln!(out, "{}", view.json(Payload::Whole)?)?;
    } else {
        super::show::write_text(&view, &mut out, Payload::Whole)?;
    }
    if view.status() != Some(JobStatus::Dead) {
        eprintln!(
            "note: job {} is not dead (status {})",
            view.info.id,
            view.info.status.as_deref().unwrap_or("unknown")
        );
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Action {
    Redrive,
    Purge,
}

async fn select(args: SelectArgs, action: Action) -> anyhow::Result<()> {
    if matches!(action, Action::Purge) && args.all && !args.yes {
        return Err(UsageError(
            "purge --all deletes every dead job and its payload for good: add --yes".into(),
        )
        .into());
    }
    if args.oldest == Some(0) {
        return Err(UsageError("--oldest needs a number above 0".into()).into());
    }
    let ids = id_bytes(&args)?;
    let queue = open_target(&args.connect).await?;
    note_if_target_absent(&queue).await?;
    let apply = async |selection: Selection| -> anyhow::Result<u64> {
        Ok(match action {
            Action::Redrive => queue.redrive(&selection).await?,
            Action::Purge => queue.purge(&selection).await?,
        })
    };
    // Read before acting: once redriven or purged, a job no longer says why it was not.
    let skipped = match &queue {
        Target::One(q) => not_dead(q, &ids).await?,
        // Each id is looked for in every partition.
        Target::All(_) => Vec::new(),
    };
    let (done, asked) = if !ids.is_empty() {
        let asked = ids.len();
        (apply(Selection::IdBytes(ids)).await?, Some(asked))
    } else {
        // --all: as many as are dead now (jobs that die meanwhile wait for the next run).
        let mut left = match args.oldest {
            Some(n) => n as u64,
            None => queue.stats().await?.dead,
        };
        let doing = match action {
            Action::Redrive => "redriving",
            Action::Purge => "purging",
        };
        let mut progress = Progress::on_stderr(doing, "dead job", Some(left));
        let mut done = 0;
        while left > 0 {
            let n = left.min(MAX_BATCH as u64);
            done += apply(Selection::Oldest(n as usize)).await?;
            left -= n;
            progress.update(done);
        }
        progress.finish();
        (done, None)
    };
    let verb = match action {
        Action::Redrive => "redrove",
        Action::Purge => "purged",
    };
    let whither = match action {
        Action::Redrive => "back to pending in",
        Action::Purge => "from",
    };
    // Skips first: a closed stdout ends the command at the summary.
    for (id, why) in &skipped {
        eprintln!("skipped {id}: {why}");
    }
    if let Some(asked) = asked
        && (done as usize) < asked
    {
        let missed = asked - done as usize;
        let (was, job, it) = if missed == 1 {
            ("was", "a dead job", "it is")
        } else {
            ("were", "dead jobs", "they are")
        };
        eprintln!(
            "{missed} of the {} given {was} not {job}: left as {it}",
            count(asked as u64, "id")
        );
    }
    writeln!(
        std::io::stdout().lock(),
        "{verb} {} {whither} {}",
        count(done, "dead job"),
        queue.name()
    )?;
    Ok(())
}

/// The ids given, as bytes: each argument's own bytes, then each `--id-hex` decoded; each
/// 1 to 1024 bytes, as the protocol takes them.
fn id_bytes(args: &SelectArgs) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut ids = Vec::new();
    for id in &args.ids {
        ids.extend(given_id(Some(id), None)?);
    }
    for given in &args.id_hex {
        ids.extend(given_id(None, Some(given))?);
    }
    Ok(ids)
}

/// The ids among `ids` that are not in the dead set, each with why: no such job, or its
/// status.
async fn not_dead(queue: &Queue, ids: &[Vec<u8>]) -> anyhow::Result<Vec<(String, String)>> {
    let mut skipped = Vec::new();
    for id in ids {
        let mut conn = queue.redis().clone();
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(&queue.keys().dead)
            .arg(id)
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::Redis {
                queue: queue.name().to_string(),
                op: "ZSCORE dead",
                source: e,
            })?;
        if score.is_some() {
            continue;
        }
        let why = match job(queue, id).await? {
            None => "no such job".to_string(),
            Some(info) => format!(
                "not dead (status {})",
                info.status.as_deref().unwrap_or("unknown")
            ),
        };
        skipped.push((JobId::from(id.as_slice()).to_string(), why));
    }
    Ok(skipped)
}

/// `purge --orphans`: forget set-aside ids whose job hash is still absent, in batches,
/// as many as are set aside now.
async fn purge_orphans(connect: &ConnectArgs, yes: bool) -> anyhow::Result<()> {
    if !yes {
        return Err(UsageError(
            "purge --orphans forgets every set-aside id whose job hash is still absent, for \
             good: check `jobqueue stats` (a Cluster slot migration in progress sets ids aside \
             for a while), then add --yes"
                .into(),
        )
        .into());
    }
    for queue in open_target(connect).await?.queues() {
        purge_orphans_one(&queue).await?;
    }
    Ok(())
}

async fn purge_orphans_one(queue: &Queue) -> anyhow::Result<()> {
    let orphaned = queue.stats().await?.orphaned;
    let mut done = 0u64;
    while done < orphaned {
        let n = (orphaned - done).min(MAX_BATCH as u64) as usize;
        let forgotten = queue.purge_orphans(n).await?;
        done += forgotten;
        // The rest have their hash back: the reaper puts them back, not this.
        if forgotten == 0 {
            break;
        }
    }
    let left = queue.stats().await?.orphaned;
    if left == 1 {
        eprintln!(
            "1 set-aside id is left: its job hash is there again (the reaper puts it back), \
             or it was set aside meanwhile"
        );
    } else if left > 1 {
        eprintln!(
            "{left} set-aside ids are left: their job hash is there again (the reaper puts \
             them back), or they were set aside meanwhile"
        );
    }
    if done > 0 {
        eprintln!(
            "a forgotten id whose job hash comes back within 7 days is still put back by the \
             reaper (`jobqueue show <id>` tells)"
        );
    }
    writeln!(
        std::io::stdout().lock(),
        "forgot {} in {}",
        count(done, "orphaned job id"),
        queue.name()
    )?;
    Ok(())
}
