//! `jobqueue pause` and `jobqueue resume`: stop a queue's claims and start them again
//! (producers, acks, fails and the reaper go on while it is paused).

use std::io::Write;

use clap::Args;

use super::ConnectArgs;
use super::common::{Target, open_target};

pub const PAUSE_EXAMPLES: &str = "\
Examples:
  jobqueue pause --tag emails       workers claim nothing; enqueues go on
  jobqueue stats --tag emails       says `paused` while it is
  jobqueue resume --tag emails      workers claim again

While a queue is paused, claims lease nothing and due delayed jobs are not promoted by
claims (the reaper still promotes them to pending); acks, fails and lease extensions of
jobs already claimed are accepted. With --partitions, every partition is paused.
A JobQueue whose spec.paused is set is paused or resumed by the operator to match.";

pub const RESUME_EXAMPLES: &str = "\
Examples:
  jobqueue resume --tag emails      workers claim again (sleeping ones are woken)";

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Pause (`pause` true) or resume the target: every partition of a partitioned queue.
pub async fn run(args: PauseArgs, pause: bool) -> anyhow::Result<()> {
    let target = open_target(&args.connect).await?;
    super::common::note_if_target_absent(&target).await?;
    let mut changed = 0;
    let queues = target.queues();
    for queue in &queues {
        let did = if pause {
            queue.pause().await?
        } else {
            queue.resume().await?
        };
        changed += usize::from(did);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", describe(&target, pause, changed, queues.len()))?;
    Ok(())
}

fn describe(target: &Target, pause: bool, changed: usize, of: usize) -> String {
    let name = target.name();
    let (done, state) = if pause {
        ("paused", "paused")
    } else {
        ("resumed", "not paused")
    };
    match (changed, of) {
        (0, 1) => format!("queue {name} was {state} already: nothing changed"),
        (1, 1) => {
            if pause {
                format!("paused {name}: workers claim nothing until `jobqueue resume`")
            } else {
                format!("resumed {name}: workers claim again")
            }
        }
        (n, of) => {
            format!("{done} {n} of the {of} partitions of {name} (the others were {state} already)")
        }
    }
}
