//! What the operations subcommands share: opening a queue, signals, usage errors.

use super::ConnectArgs;
use crate::queue::{PartitionedQueue, Queue, QueueStats, ReapOutcome, Selection};
use crate::shutdown::Signal;

/// Stopped by Ctrl-C or SIGTERM before the work was finished.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {0}")]
pub struct Interrupted(pub &'static str);

/// Flags that make sense one by one but not together (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A job refused because another job holds its unique key (exit code 7): the message
/// names the key and the holder's id.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UniqueHeld(pub String);

/// A job id named on the command line: an argument's own bytes (any the shell passes),
/// or `--id-hex HEX` decoded (`hex:` in front is taken, as text output prints byte ids).
/// Checked against the protocol's only limits, 1 to [`MAX_ID_LEN`](crate::queue::MAX_ID_LEN)
/// bytes; neither an error nor anything else echoes a long value whole.
pub fn given_id(
    id: Option<&std::ffi::OsStr>,
    id_hex: Option<&str>,
) -> Result<Option<Vec<u8>>, UsageError> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = match (id, id_hex) {
        (Some(id), _) => id.as_bytes().to_vec(),
        (None, Some(given)) => id_from_hex(given)?,
        (None, None) => return Ok(None),
    };
    crate::queue::validate_id(&bytes).map_err(|e| UsageError(e.to_string()))?;
    Ok(Some(bytes))
}

/// The bytes `--id-hex` names: hex digits, `hex:` in front optional.
pub fn id_from_hex(given: &str) -> Result<Vec<u8>, UsageError> {
    let digits = given.trim();
    let digits = digits
        .strip_prefix(crate::queue::HEX_PREFIX)
        .unwrap_or(digits);
    hex::decode(digits).map_err(|e| {
        let mut shown: String = given.chars().take(40).collect();
        if shown.len() < given.len() {
            shown.push('…');
        }
        UsageError(format!(
            "--id-hex: {shown:?} is not hex ({e}); give the id_hex of --json output, or the \
             hex:… form text output shows"
        ))
    })
}

/// Resolves on Ctrl-C or SIGTERM, naming which as a person at the terminal says it;
/// listening from the call on, as [`crate::shutdown::shutdown_signal`].
pub fn stop_signal() -> impl Future<Output = &'static str> + Send + 'static {
    let signal = crate::shutdown::shutdown_signal();
    async move {
        match signal.await {
            Signal::Interrupt => "Ctrl-C",
            Signal::Terminate => "SIGTERM",
        }
    }
}

/// What an operations command acts on: one queue (an unpartitioned queue, or the
/// partition `--partition` names), or every partition of a partitioned queue.
#[derive(Clone)]
pub enum Target {
    One(Queue),
    All(PartitionedQueue),
}

impl Target {
    pub fn name(&self) -> &str {
        match self {
            Target::One(q) => q.name(),
            Target::All(q) => q.name(),
        }
    }

    /// The one queue, or each partition: for commands that list per partition.
    pub fn queues(&self) -> Vec<Queue> {
        match self {
            Target::One(q) => vec![q.clone()],
            Target::All(q) => q.partitions().to_vec(),
        }
    }

    pub async fn reap_expired(
        &self,
        batch: usize,
        calls: usize,
    ) -> crate::queue::Result<ReapOutcome> {
        match self {
            Target::One(q) => q.reap_expired(batch, calls).await,
            Target::All(q) => q.reap_expired(batch, calls).await,
        }
    }

    pub async fn redrive(&self, selection: &Selection) -> crate::queue::Result<u64> {
        match self {
            Target::One(q) => q.redrive(selection).await,
            Target::All(q) => q.redrive(selection).await,
        }
    }

    pub async fn purge(&self, selection: &Selection) -> crate::queue::Result<u64> {
        match self {
            Target::One(q) => q.purge(selection).await,
            Target::All(q) => q.purge(selection).await,
        }
    }

    /// The counts and counters: the queue's, or the sum over the partitions.
    pub async fn stats(&self) -> crate::queue::Result<QueueStats> {
        match self {
            Target::One(q) => q.stats().await,
            Target::All(q) => Ok(q.stats().await?.total),
        }
    }
}

/// [`open`] for the commands that understand a partitioned queue: a partitioned queue
/// (the count it records, or `--partitions`; see [`ConnectArgs::partitioned`]) without
/// `--partition` is every partition, each checked.
pub async fn open_target(connect: &ConnectArgs) -> anyhow::Result<Target> {
    let queue = connect.partitioned().await?;
    if queue.partitions().len() == 1 || connect.partition.is_some() {
        let one = match connect.partition.filter(|p| *p != 0) {
            Some(p) if queue.partitions().len() == 1 => {
                return Err(crate::queue::Error::InvalidArgument {
                    what: "--partition",
                    reason: format!(
                        "{p} is not a partition of {}, a queue of 1 partition",
                        queue.name()
                    ),
                }
                .into());
            }
            p => queue.partition(p.unwrap_or_default())?.clone(),
        };
        one.check_key_types().await?;
        return Ok(Target::One(one));
    }
    queue.check_key_types().await?;
    Ok(Target::All(queue))
}

/// A note on stderr when none of the target's keys exist (a mistyped tag or prefix reads
/// as an empty queue otherwise), with the queue nearest to the tag given when one is near
/// (a typo): `did you mean --tag emails?`. Not an error: a new queue is empty too.
pub async fn note_if_target_absent(target: &Target) -> anyhow::Result<()> {
    if let Some(note) = absent_note(target).await? {
        eprintln!("note: {note}");
    }
    Ok(())
}

/// How many candidate tags after `T` itself ([`crate::queue::partitions::candidate_tag`])
/// the hint of [`note_if_partitions_unrecorded`] looks at: a layout of 2 or more
/// partitions almost always has one of them (that none of the first 8 lies outside
/// `T`'s half of the slot space happens once in 256 tags).
const UNRECORDED_PROBE: u64 = 8;

/// A note on stderr when a command without partition flags sees `T` alone while its tag
/// records no partition count and queues of partition tags of `T` (`T~1` … `T~8`) are
/// in Redis: a partitioned queue from before the record, half seen. Best effort (a probe
/// that fails, e.g. an ACL limited to `T`'s keys, says nothing); for the commands that
/// show a queue (`stats`, `peek`, `dead ls`), not for workers.
pub async fn note_if_partitions_unrecorded(connect: &ConnectArgs, target: &Target) {
    let Target::One(queue) = target else {
        return;
    };
    if connect.partitions.is_some()
        || connect.drain_partitions.is_some()
        || connect.partition.is_some()
        || !matches!(queue.partition_record().await, Ok(None))
    {
        return;
    }
    let probes = (1..=UNRECORDED_PROBE).filter_map(|k| {
        let tag = crate::queue::partitions::candidate_tag(&connect.tag, k);
        Queue::new(queue.redis().clone(), &connect.prefix, &tag).ok()
    });
    let found = futures::future::join_all(probes.map(|q| async move {
        matches!(q.exists().await, Ok(true)).then(|| q.name().to_string())
    }))
    .await;
    let found: Vec<String> = found.into_iter().flatten().collect();
    if let Some(first) = found.first() {
        eprintln!(
            "note: {} records no partition count, so this shows that queue alone, but {first}{} \
             of a partitioned {} exist: give --partitions N, or record the count once with \
             `jobqueue configure --tag {} --partitions N`",
            queue.name(),
            if found.len() > 1 {
                format!(" and {} more partitions", found.len() - 1)
            } else {
                String::new()
            },
            queue.name(),
            connect.tag
        );
    }
}

/// Why the target reads as empty when none of its keys exist: `no queue exists at
/// jq:{emials} (none of its keys are in Redis; did you mean --tag emails?): check --tag
/// and --prefix`. `None` when the queue exists.
pub async fn absent_note(target: &Target) -> anyhow::Result<Option<String>> {
    let exists = match target {
        Target::One(q) => q.exists().await?,
        Target::All(q) => q.exists().await?,
    };
    if exists {
        return Ok(None);
    }
    let hint = match nearest_queue(target).await {
        Some(tag) => format!("; did you mean --tag {tag}?"),
        None => String::new(),
    };
    Ok(Some(match target {
        Target::One(q) => format!(
            "no queue exists at {} (none of its keys are in Redis{hint}): check --tag and --prefix",
            q.name()
        ),
        Target::All(q) => format!(
            "no partition of {} exists (none of their keys are in Redis{hint}): check --tag, --prefix and --partitions",
            q.name()
        ),
    }))
}

/// The tag of an existing queue under the same prefix nearest to the target's tag (an edit
/// distance of at most a third of its length, at least 1), if any. Best effort: a scan
/// that fails gives no suggestion.
async fn nearest_queue(target: &Target) -> Option<String> {
    let (prefix, tag) = split_name(target.name())?;
    let queues = target.queues();
    let redis = queues.first()?.redis();
    let tags = crate::console::source::scan_tags(redis, prefix)
        .await
        .ok()?;
    let limit = (tag.chars().count() / 3).max(1);
    tags.into_iter()
        // A partition's own tag (`parts~2`) stands for its queue (`parts`).
        .map(|t| match t.rsplit_once('~') {
            Some((base, n)) if n.parse::<u32>().is_ok() => base.to_string(),
            _ => t,
        })
        .filter(|t| t != tag)
        .map(|t| (edit_distance(&t, tag), t))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, t)| t)
}

/// `prefix:{tag}` → (`prefix`, `tag`).
fn split_name(name: &str) -> Option<(&str, &str)> {
    let (prefix, rest) = name.rsplit_once(":{")?;
    Some((prefix, rest.strip_suffix('}')?))
}

/// Levenshtein distance, with a transposition counting as one edit (`emials` → `emails`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_is_near_its_queue() {
        assert_eq!(edit_distance("emials", "emails"), 1);
        assert_eq!(edit_distance("emails", "emails"), 0);
        assert_eq!(edit_distance("bj", "bi"), 1);
        assert_eq!(edit_distance("orders", "emails"), 5);
        assert_eq!(split_name("jq:{emails}"), Some(("jq", "emails")));
        assert_eq!(split_name("a:b:{t}"), Some(("a:b", "t")));
    }
}
