//! `jobqueue promote` and `jobqueue cancel`: control of single jobs by id.

use std::io::Write;

use clap::{ArgGroup, Args};

use super::ConnectArgs;
use super::common::{given_id, note_if_target_absent, open_target};
use super::format::count;
use crate::queue::{Cancellation, JobId, Queue};

pub const PROMOTE_EXAMPLES: &str = "\
Examples:
  jobqueue promote --tag emails 8fK2pQ0aZr1xYc3d          run a delayed job now
  jobqueue promote --tag emails ID1 ID2 --id-hex hex:626164ff

A promoted job goes to the front of pending (counted in `run_now`). An id that is not
delayed (pending, leased, done, dead) or names no job is skipped and said so on stderr;
the exit code is 0 when every call was made, whatever each id's outcome.";

pub const CANCEL_EXAMPLES: &str = "\
Examples:
  jobqueue cancel --tag emails 8fK2pQ0aZr1xYc3d           a pending, delayed or leased job
  jobqueue cancel --tag emails --id-hex hex:626164ff

A pending or delayed job is cancelled at once. A leased job is marked: its worker learns
it at its next lease renewal (within a third of the visibility timeout), stops the job
(an exec command's process group gets SIGTERM, then SIGKILL after the kill grace) and
ends it as cancelled; if the worker is gone, the reaper ends it so once its lease
expires. A cancelled job is neither retried nor dead-lettered: counted in `cancelled`,
its hash kept with status `cancelled` for the completed retention (`configure
--completed-retention`). A dead, finished or unknown job is skipped, said so on stderr;
the exit code is 0 when every call was made.";

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).multiple(true).args(["ids", "id_hex"])))]
pub struct JobsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Jobs by id (any bytes the shell passes: an id with a space, quoted).
    pub ids: Vec<std::ffi::OsString>,
    /// A job by its id in hex (the `id_hex` of --json output, or the `hex:…` form text
    /// output shows), for an id that is not text; may be repeated.
    #[arg(long, value_name = "HEX")]
    pub id_hex: Vec<String>,
}

impl JobsArgs {
    /// The ids given, as bytes: each argument's own, then each `--id-hex` decoded.
    fn ids(&self) -> anyhow::Result<Vec<Vec<u8>>> {
        let mut ids = Vec::new();
        for id in &self.ids {
            ids.extend(given_id(Some(id), None)?);
        }
        for given in &self.id_hex {
            ids.extend(given_id(None, Some(given))?);
        }
        Ok(ids)
    }
}

/// The queue (partition) that holds the job: the first whose hash of the id exists, else
/// the first.
async fn holder<'a>(queues: &'a [Queue], id: &[u8]) -> anyhow::Result<&'a Queue> {
    if queues.len() > 1 {
        for q in queues {
            if q.job(id).await?.is_some() {
                return Ok(q);
            }
        }
    }
    Ok(&queues[0])
}

/// Why a job was not what the command acts on: no such job, or its status.
async fn status_of(queue: &Queue, id: &[u8]) -> anyhow::Result<Option<String>> {
    Ok(queue
        .job(id)
        .await?
        .map(|info| info.status.unwrap_or_else(|| "pending".to_string())))
}

pub async fn promote(args: JobsArgs) -> anyhow::Result<()> {
    let ids = args.ids()?;
    let target = open_target(&args.connect).await?;
    note_if_target_absent(&target).await?;
    let queues = target.queues();
    let mut done = 0u64;
    let mut out = Vec::new();
    for id in &ids {
        let queue = holder(&queues, id).await?;
        let shown = JobId::from(id.as_slice());
        if queue.run_now(id).await? {
            done += 1;
            out.push(format!("promoted {shown}: first in pending"));
            continue;
        }
        match status_of(queue, id).await? {
            None => eprintln!("skipped {shown}: no such job"),
            Some(st) if st == "delayed" => eprintln!(
                "skipped {shown}: delayed but not filed in the delayed set (set aside; the \
                 reaper puts it back)"
            ),
            Some(st) => eprintln!("skipped {shown}: not delayed (status {st})"),
        }
    }
    let mut stdout = std::io::stdout().lock();
    for line in out {
        writeln!(stdout, "{line}")?;
    }
    writeln!(
        stdout,
        "promoted {} of {} in {}",
        count(done, "delayed job"),
        count(ids.len() as u64, "id"),
        target.name()
    )?;
    Ok(())
}

pub async fn cancel(args: JobsArgs) -> anyhow::Result<()> {
    let ids = args.ids()?;
    let target = open_target(&args.connect).await?;
    note_if_target_absent(&target).await?;
    let queues = target.queues();
    let (mut cancelled, mut requested) = (0u64, 0u64);
    let mut out = Vec::new();
    for id in &ids {
        let queue = holder(&queues, id).await?;
        let shown = JobId::from(id.as_slice());
        match queue.cancel(id).await? {
            Cancellation::Cancelled(was) => {
                cancelled += 1;
                out.push(format!("cancelled {shown} (it was {was})"));
            }
            Cancellation::Requested => {
                requested += 1;
                out.push(format!(
                    "cancelling {shown}: it is leased; its worker stops it at its next lease \
                     renewal"
                ));
            }
            Cancellation::Kept(st) => eprintln!("skipped {shown}: status {st}, not cancelled"),
            Cancellation::Absent => eprintln!("skipped {shown}: no such job"),
        }
    }
    let mut stdout = std::io::stdout().lock();
    for line in out {
        writeln!(stdout, "{line}")?;
    }
    writeln!(
        stdout,
        "cancelled {}, asked {} to stop, of {} in {}",
        count(cancelled, "job"),
        count(requested, "leased job"),
        count(ids.len() as u64, "id"),
        target.name()
    )?;
    Ok(())
}
