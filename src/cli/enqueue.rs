//! `jobqueue enqueue`: one payload, a file, or one payload per line of stdin.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgGroup, Args};

use super::ConnectArgs;
use super::common::{UniqueHeld, UsageError};
use super::format::count;
use super::progress::Progress;
use crate::queue::{
    Enqueued, JobId, JobOptions, MAX_BATCH, NewJob, PartitionedQueue, Queue, Unique, UniqueMode,
    UniqueOutcome,
};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue enqueue --tag emails '{\"to\":\"ada@example.com\"}'
  jobqueue enqueue --tag emails --id welcome-42 --delay 10m '{\"to\":\"ada@example.com\"}'
  jobqueue enqueue --tag emails --at 2026-12-24T08:00:00Z '{\"to\":\"santa@example.com\"}'
  jobqueue enqueue --tag emails --file job.json
  jobqueue enqueue --tag emails --id-hex 626164ff --file job.json   # an id of any bytes
  jobqueue enqueue --tag emails --stdin < jobs.ndjson     # one payload per line
  jobqueue enqueue --tag emails --priority 9 '{\"to\":\"ceo@example.com\"}'   # claimed first
  jobqueue enqueue --tag emails --rate-key customer-42 '{...}'   # per-key rate limit
  jobqueue enqueue --tag emails --partitions 6 --partition-key ada@example.com '{...}'
  jobqueue enqueue --tag reports --unique-key report:42 --unique-for 10m '{\"id\":42}'
  jobqueue enqueue --tag search --unique-key reindex:ada --unique-mode debounce --delay 5s '{}'

Prints the job id (one per line with --stdin --print-ids, else a count). With --id, an
id that already exists is left unchanged and reported on stderr.

--unique-key KEY: at most one job with KEY at a time. While a job holds KEY (until a
worker claims it with --unique-mode until-started; until it is acked, dead, cancelled,
deleted or purged with until-done, the default; and at most --unique-for, whichever
ends first), another enqueue with KEY is refused: the holder's id is printed on stdout,
the reason on stderr, exit code 7. With --unique-mode debounce it instead replaces the
payload and the delay of the holder while it waits (pending or delayed) and prints the
holder's id (exit 0). Keys: any 1 to 1024 bytes.
--rate-key counts the job under a key for the queue's per-key rate limit (`jobqueue
configure --rate-limit-per-key 5/1s`): one key cannot use the whole queue.

--max-attempts and --backoff-* set this job's own retry policy, each instead of the
queue's setting (`jobqueue configure`) for this job alone; they are kept in its hash.
--timeout caps one run of this job (instead of the worker's --timeout), and --visibility
sets the length of its leases (instead of the queue's visibility timeout), e.g.
  jobqueue enqueue --tag reports --timeout 2m --visibility 30s '{\"report\":7}'

Ids: any 1 to 1024 bytes. Output shows an id as it is when it is UTF-8 text without
control characters, else as hex:<its bytes in hex> (also a text id that begins with hex:);
--id-hex takes that form back, e.g. --id-hex hex:626164ff. Lines of binary stdin (a NUL
byte, or not UTF-8) are still one job each, with a warning: send a file whole with --file.";

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["payload", "file", "stdin"])))]
pub struct EnqueueArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The payload (opaque to the queue; JSON by convention).
    pub payload: Option<String>,
    /// Read the payload from this file, byte for byte.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Read one payload per line from stdin (empty lines are skipped), sent 1000 per call.
    #[arg(long)]
    pub stdin: bool,
    /// The job's id, for deduplication (a random id otherwise): any 1 to 1024 bytes the
    /// shell passes, a space or a control character included. Not with --stdin.
    #[arg(long, conflicts_with = "stdin", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub id: Option<std::ffi::OsString>,
    /// The job's id as hex, for an id of any bytes (`hex:` in front is taken, as output
    /// shows such ids). Not with --id or --stdin.
    #[arg(long, value_name = "HEX", conflicts_with_all = ["stdin", "id"])]
    pub id_hex: Option<String>,
    /// Run no earlier than this from now, e.g. `30s`, `5m`.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration::parse, default_value = "0")]
    pub delay: Duration,
    /// Run at this time, not before: RFC 3339, e.g. `2026-12-24T08:00:00Z` or
    /// `2026-12-24T09:00:00+01:00`, on the Redis server's clock. A time in the past runs
    /// now. Not with --delay.
    #[arg(long, value_name = "TIME", conflicts_with = "delay", value_parser = run_at)]
    pub at: Option<std::time::SystemTime>,
    #[command(flatten)]
    pub job: JobOptionArgs,
    /// At most one job with this key at a time (any 1 to 1024 bytes): while a job holds
    /// it, this one is refused (exit 7, the holder's id printed).
    #[arg(long, value_name = "KEY", value_parser = clap::value_parser!(std::ffi::OsString), help_heading = "Unique jobs")]
    pub unique_key: Option<std::ffi::OsString>,
    /// Hold the key at most this long from the enqueue, e.g. `10m` (whichever of this
    /// and the mode ends first).
    #[arg(long, value_name = "DURATION", requires = "unique_key", value_parser = crate::duration::parse, help_heading = "Unique jobs")]
    pub unique_for: Option<Duration>,
    /// How long the key is held: until-started (until claimed), until-done (until
    /// acked, dead, cancelled, deleted or purged; the default) or debounce (until
    /// claimed; a later enqueue replaces the waiting job's payload and delay).
    #[arg(long, value_name = "MODE", requires = "unique_key", value_parser = unique_mode, help_heading = "Unique jobs")]
    pub unique_mode: Option<UniqueMode>,
    /// With --stdin: print each new job's id instead of a count.
    #[arg(long, requires = "stdin")]
    pub print_ids: bool,
    /// Refuse payloads larger than this, before sending: bytes, or with a KiB, MiB or
    /// GiB suffix. Redis itself takes up to 512 MiB (proto-max-bulk-len).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "64MiB")]
    pub max_payload: usize,
    /// On a partitioned queue: send every job of this call to the partition of this key
    /// instead of each to the partition of its id, so jobs of one key keep their order
    /// (refused on a queue of one partition).
    #[arg(long, value_name = "KEY", conflicts_with = "partition")]
    pub partition_key: Option<String>,

    /// Wait for the job's end and print its result (the exec command's stdout); a job that
    /// dies prints the error of its last attempt and exits 1 (docs/protocol.md, Outcomes).
    #[arg(long, conflicts_with = "stdin")]
    pub wait: bool,

    /// With --wait: how long to wait (exit 1 when the job has not ended by then; the job
    /// itself goes on). Not --timeout, which limits one run of the job.
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = crate::duration::parse, default_value = "30s")]
    pub wait_timeout: Duration,
}

/// The job's own options (docs/protocol.md, *Per-job options*), each instead of the
/// queue's setting (or the worker's) for that job alone: the flags of `enqueue` and of
/// `schedule add` (for every job the schedule fires), parsed and checked alike.
#[derive(Debug, Default, Args)]
pub struct JobOptionArgs {
    /// Claims before the job, failing, goes to the dead-letter set, instead of the
    /// queue's max attempts (1 to 1000000).
    #[arg(
        long,
        allow_hyphen_values = true,
        help_heading = "The job's own retry policy (instead of the queue's)"
    )]
    pub max_attempts: Option<u32>,
    /// The job's retry backoff after its first failure.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration::parse, help_heading = "The job's own retry policy (instead of the queue's)")]
    pub backoff_initial: Option<Duration>,
    /// The job's longest retry backoff.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::duration::parse, help_heading = "The job's own retry policy (instead of the queue's)")]
    pub backoff_max: Option<Duration>,
    /// Each of the job's retries waits this many times longer than the previous one
    /// (1 to 1000).
    #[arg(
        long,
        allow_hyphen_values = true,
        help_heading = "The job's own retry policy (instead of the queue's)"
    )]
    pub backoff_multiplier: Option<f64>,
    /// The job's priority, 0 (the default, lowest) to 9: a higher priority is claimed
    /// first, jobs of one priority in their order (`jobqueue configure --priority-mode`
    /// says how strictly).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_priority)]
    pub priority: Option<u8>,
    /// The longest one run of the job may take (e.g. `2m`): past it, its worker stops it
    /// (an exec command gets SIGTERM, then SIGKILL after the worker's --kill-grace) and
    /// fails it with `timed out after <DURATION>`, retried or dead-lettered as any
    /// failure. Instead of the worker's --timeout.
    #[arg(long, value_name = "DURATION", value_parser = super::argv::positive_duration, help_heading = "The job's own run limits (instead of the queue's and the worker's)")]
    pub timeout: Option<Duration>,
    /// The length of the job's leases (e.g. `30s`): each claim and renewal leases it for
    /// this long, so a crashed worker's run of it is taken back this soon. Instead of
    /// the queue's visibility timeout and a worker's --visibility.
    #[arg(long, value_name = "DURATION", value_parser = super::argv::positive_duration, help_heading = "The job's own run limits (instead of the queue's and the worker's)")]
    pub visibility: Option<Duration>,
    /// Count the job under this key for the queue's per-key rate limit (`jobqueue
    /// configure --rate-limit-per-key`), e.g. a customer id: 1 to 256 bytes.
    #[arg(long, value_name = "KEY")]
    pub rate_key: Option<String>,
}

impl JobOptionArgs {
    /// The options given, as the job stores them.
    pub fn options(&self) -> JobOptions {
        JobOptions {
            max_attempts: self.max_attempts,
            backoff_initial: self.backoff_initial,
            backoff_max: self.backoff_max,
            backoff_multiplier: self.backoff_multiplier,
            priority: self.priority,
            visibility: self.visibility,
            timeout: self.timeout,
            rate_key: self.rate_key.clone(),
            ..Default::default()
        }
    }
}

/// `--unique-mode`: one of the three words.
fn unique_mode(text: &str) -> Result<UniqueMode, String> {
    text.parse::<UniqueMode>()
        .map_err(|_| "[possible values: until-started, until-done, debounce]".to_string())
}

/// `--priority`: a whole number 0 to 9.
fn parse_priority(text: &str) -> Result<u8, String> {
    match text.parse::<u8>() {
        Ok(p) if p <= crate::queue::MAX_PRIORITY => Ok(p),
        _ => Err(format!(
            "{text:?} is not a priority: a whole number from 0 (the default, lowest) to {} (highest)",
            crate::queue::MAX_PRIORITY
        )),
    }
}

/// `--at`: an RFC 3339 time with its offset.
fn run_at(text: &str) -> Result<std::time::SystemTime, String> {
    let t: k8s_openapi::jiff::Timestamp = text.parse().map_err(|e| {
        format!("not an RFC 3339 time such as 2026-12-24T08:00:00Z (with Z or an offset): {e}")
    })?;
    let ms = t.as_millisecond();
    if ms < 0 {
        return Err("must not be before 1970-01-01T00:00:00Z".into());
    }
    Ok(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
}

impl EnqueueArgs {
    /// A job of this call: its payload, when it runs and its own options.
    fn job(&self, payload: impl Into<bytes::Bytes>) -> NewJob {
        let mut job = NewJob::new(payload)
            .delay(self.delay)
            .options(self.options());
        job.unique = self.unique();
        match self.at {
            Some(at) => job.at(at),
            None => job,
        }
    }

    /// The job's unique key, mode and window given on the command line.
    fn unique(&self) -> Unique {
        use std::os::unix::ffi::OsStrExt;
        Unique {
            key: self
                .unique_key
                .as_ref()
                .map(|k| bytes::Bytes::copy_from_slice(k.as_bytes())),
            mode: self.unique_mode,
            window: self.unique_for,
        }
    }

    /// The job's own options given on the command line.
    fn options(&self) -> JobOptions {
        self.job.options()
    }
}

/// Where the jobs go: the partition of each job's id, of `--partition-key`, or the one
/// `--partition` names (an unpartitioned queue is its own single partition).
struct Producer {
    queue: PartitionedQueue,
    only: Option<usize>,
    key: Option<Vec<u8>>,
}

impl Producer {
    async fn open(args: &EnqueueArgs) -> anyhow::Result<Producer> {
        let queue = args.connect.partitioned().await?;
        queue.check_key_types().await?;
        let max = args.max_payload;
        let queue = queue.map_partitions(|q| q.max_payload(max));
        if let Some(p) = args.connect.partition {
            queue.partition(p)?;
        }
        if args.partition_key.is_some() && queue.partitions().len() == 1 {
            // One queue: the key would decide nothing, and the caller expects it to.
            return Err(UsageError(format!(
                "--partition-key needs a partitioned queue: {} has 1 partition (a partitioned \
                 queue records its count: `jobqueue configure --tag {} --partitions N`, see \
                 docs/partitions.md)",
                queue.name(),
                args.connect.tag
            ))
            .into());
        }
        Ok(Producer {
            queue,
            only: args.connect.partition,
            key: args.partition_key.clone().map(String::into_bytes),
        })
    }

    async fn send(&self, jobs: Vec<NewJob>) -> crate::queue::Result<Vec<Enqueued>> {
        match (self.only, &self.key) {
            (Some(p), _) => self.queue.partitions()[p].enqueue_many(jobs).await,
            (None, Some(key)) => self.queue.enqueue_keyed(key, jobs).await,
            (None, None) => self.queue.enqueue_many(jobs).await,
        }
    }

    fn name(&self) -> &str {
        match self.only {
            Some(p) => self.queue.partitions()[p].name(),
            None => self.queue.name(),
        }
    }

    /// A partition's handle, for reading the server's limits.
    fn any(&self) -> &Queue {
        &self.queue.partitions()[self.only.unwrap_or_default()]
    }
}

/// `1048576`, `512KiB`, `64MiB`, `1.5MiB`, `1GiB`: a fraction is taken when it makes a
/// whole number of bytes.
fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let not_a_size = || format!("{text:?} is not a size such as 1048576, 512KiB or 64MiB");
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ if number.is_empty() => return Err(not_a_size()),
        other => return Err(format!("unknown size unit {other:?} (use KiB, MiB or GiB)")),
    };
    if number.contains('.') {
        let v: f64 = number.parse().map_err(|_| not_a_size())?;
        let bytes = v * scale as f64;
        if bytes.fract() != 0.0 {
            return Err(format!("{text:?} is not a whole number of bytes"));
        }
        if bytes > usize::MAX as f64 {
            return Err(format!("{text:?} is too large"));
        }
        return Ok(bytes as usize);
    }
    let n: usize = number.parse().map_err(|_| not_a_size())?;
    n.checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

pub async fn run(args: EnqueueArgs) -> anyhow::Result<()> {
    // clap's `requires` does not see a flag that is false by default: check here.
    if args.print_ids && !args.stdin {
        return Err(UsageError(
            "--print-ids needs --stdin (one payload prints its id anyway)".into(),
        )
        .into());
    }
    // Checked before connecting: a bad id needs no server to be refused.
    let given = super::common::given_id(args.id.as_deref(), args.id_hex.as_deref())?;
    args.options().validate()?;
    args.unique()
        .validate()
        .map_err(|e| UsageError(e.to_string()))?;
    let queue = Producer::open(&args).await?;
    if args.stdin {
        return enqueue_lines(&queue, std::io::stdin().lock(), &args).await;
    }
    let payload = match (&args.payload, &args.file) {
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(path)) => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
        }
        (None, None) => return Err(UsageError("give a payload, --file or --stdin".into()).into()),
    };
    // The id is chosen here, not by the queue, so that it can be printed whatever
    // happens after the job may have been written.
    let id: JobId = given.map_or_else(|| crate::queue::new_job_id().into(), JobId::from);
    let job = args.job(payload).id(id.clone());
    if args.wait {
        return wait_for_job(&queue, job, &args).await;
    }
    let size = job.payload.len();
    let out = match queue.send(vec![job]).await {
        Ok(mut out) => out.pop().context("an enqueue reply without its job")?,
        Err(err @ crate::queue::Error::NotReplicated { .. }) => {
            // The job is on the primary: print its id as on success, so that it can be
            // checked (`jobqueue show`) or sent again with --id, which does not
            // duplicate it.
            writeln!(std::io::stdout().lock(), "{id}")?;
            return Err(err.into());
        }
        Err(err) => return Err(explain_size(queue.any(), size, err).await),
    };
    if let Some(unique) = &out.unique {
        return held(&out, unique, &args, queue.name());
    }
    writeln!(std::io::stdout().lock(), "{}", out.id)?;
    if !out.created {
        eprintln!(
            "job {} already exists in {}: nothing changed",
            out.id,
            queue.name()
        );
    }
    Ok(())
}

/// A job whose unique key another job holds: the holder's id on stdout; refused, an
/// error naming the key and the holder (exit 7); debounced, a note on stderr.
fn held(
    out: &Enqueued,
    unique: &UniqueOutcome,
    args: &EnqueueArgs,
    queue: &str,
) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let key = JobId::from(
        args.unique_key
            .as_deref()
            .map(|k| k.as_bytes())
            .unwrap_or_default(),
    );
    match unique {
        UniqueOutcome::Refused { existing } => {
            writeln!(std::io::stdout().lock(), "{existing}")?;
            Err(UniqueHeld(format!(
                "unique key {:?} is held by job {existing} in {queue}: nothing enqueued",
                key.to_string()
            ))
            .into())
        }
        UniqueOutcome::Replaced { existing } => {
            writeln!(std::io::stdout().lock(), "{existing}")?;
            eprintln!(
                "unique key {:?}: job {existing} in {queue} is still waiting and took this \
                 payload and delay (debounce); job {} was not made",
                key.to_string(),
                out.id
            );
            Ok(())
        }
    }
}
/// `--wait`: enqueue with `notify` and wait for the job's end: its result on stdout and
/// exit 0 when acked; the error of its last attempt and exit 1 when it died (or was
/// cancelled, or is gone, or the wait timed out). A job another job's unique key kept
/// from being made is answered as without `--wait` (refused: exit 7), not waited for.
async fn wait_for_job(queue: &Producer, job: NewJob, args: &EnqueueArgs) -> anyhow::Result<()> {
    let timeout = args.wait_timeout;
    let target = match (queue.only, &queue.key) {
        (Some(p), _) => &queue.queue.partitions()[p],
        (None, Some(key)) => &queue.queue.partitions()[queue.queue.partition_for(key)],
        (None, None) => {
            let id = job.id.as_ref().map_or(&b""[..], |i| i.as_bytes());
            &queue.queue.partitions()[queue.queue.partition_for(id)]
        }
    };
    let (enqueued, end) = target.enqueue_and_wait(job, timeout).await?;
    if let Some(unique) = &enqueued.unique {
        return held(&enqueued, unique, args, target.name());
    }
    eprintln!("job {}", enqueued.id);
    match end {
        Some(crate::queue::JobEnd::Done(result)) => {
            let mut out = std::io::stdout().lock();
            out.write_all(&result)?;
            out.flush()?;
            Ok(())
        }
        Some(crate::queue::JobEnd::Dead(error)) => {
            anyhow::bail!("job {} died: {error}", enqueued.id)
        }
        Some(crate::queue::JobEnd::Cancelled) => anyhow::bail!("job {} was cancelled", enqueued.id),
        Some(crate::queue::JobEnd::Gone) => anyhow::bail!(
            "job {} is gone (deleted or purged) before its end could be read",
            enqueued.id
        ),
        None => anyhow::bail!(
            "job {} did not end within {} (it is still in the queue)",
            enqueued.id,
            crate::duration::format(timeout)
        ),
    }
}

/// The server's `proto-max-bulk-len` (Redis: 1 MiB to 512 MiB) is the likely cause when a
/// large payload failed: the server refuses it or drops the connection mid-send.
/// Say so when the server tells its limit and the payload is above it.
async fn explain_size(queue: &Queue, size: usize, err: crate::queue::Error) -> anyhow::Error {
    if size < 1 << 20 {
        return err.into();
    }
    let mut conn = queue.redis().clone();
    let mut limit = None;
    // The server closed the connection that sent the payload: the first tries may land
    // on it while it reconnects.
    for _ in 0..3 {
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("proto-max-bulk-len")
            .query_async(&mut conn)
            .await;
        if let Ok(reply) = reply {
            limit = reply.get(1).and_then(|v| v.parse::<usize>().ok());
            break;
        }
    }
    match limit {
        Some(limit) if size > limit => anyhow::anyhow!(
            "queue {}: the payload ({size} bytes) is above the server's proto-max-bulk-len \
             ({limit} bytes): raise it on the server, or send a reference to the data instead",
            queue.name()
        ),
        _ => err.into(),
    }
}

/// Bulk: read lines, send them 1000 per script call, so memory stays bounded.
///
/// A closed stdout (`--print-ids | head -1`) stops the printing, not the enqueueing:
/// every line is still sent, then the broken pipe ends the command quietly.
async fn enqueue_lines(
    queue: &Producer,
    mut input: impl BufRead,
    args: &EnqueueArgs,
) -> anyhow::Result<()> {
    let (mut created, mut existed) = (0u64, 0u64);
    let (mut refused, mut replaced) = (0u64, 0u64);
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut line = Vec::new();
    let mut out = std::io::stdout().lock();
    let mut closed: Option<std::io::Error> = None;
    let mut progress = Progress::on_stderr("enqueueing", "job", None);
    // Whether a line was binary (a NUL byte, or not UTF-8): said once, when first seen,
    // and again with the count at the end.
    let mut binary = false;
    let mut line_no = 0u64;
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .context("cannot read stdin")?;
        if n > 0 {
            line_no += 1;
            let payload = strip_line_end(&line);
            if !binary && let Some(what) = not_text(payload) {
                binary = true;
                progress.finish();
                eprintln!(
                    "warning: stdin is not text (line {line_no} {what}): each line of it \
                     becomes one job, its bytes as they are; to send a binary file as one \
                     job, use --file FILE"
                );
            }
            if !payload.is_empty() {
                batch.push(args.job(payload.to_vec()));
            }
        }
        if batch.len() == MAX_BATCH || (n == 0 && !batch.is_empty()) {
            for job in queue.send(std::mem::take(&mut batch)).await? {
                if let Some(unique) = &job.unique {
                    match unique {
                        UniqueOutcome::Refused { .. } => refused += 1,
                        UniqueOutcome::Replaced { .. } => replaced += 1,
                    }
                } else if job.created {
                    created += 1;
                    if args.print_ids && closed.is_none() {
                        match writeln!(out, "{}", job.id) {
                            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
                                closed = Some(err)
                            }
                            other => other?,
                        }
                    }
                } else {
                    existed += 1;
                }
            }
            progress.update(created + existed + refused + replaced);
        }
        if n == 0 {
            break;
        }
    }
    progress.finish();
    if binary {
        eprintln!(
            "warning: enqueued {} from lines of binary input (--file FILE sends a file as \
             one job)",
            count(created, "job")
        );
    }
    if existed > 0 {
        eprintln!(
            "{} already existed: nothing changed for {}",
            count(existed, "id"),
            if existed == 1 { "it" } else { "them" }
        );
    }
    if replaced > 0 {
        eprintln!(
            "{} replaced the payload and delay of the waiting job holding the unique key \
             (debounce)",
            count(replaced, "line")
        );
    }
    if let Some(err) = closed {
        return Err(err.into());
    }
    if !args.print_ids {
        writeln!(
            out,
            "enqueued {} to {}",
            count(created, "job"),
            queue.name()
        )?;
    }
    if refused > 0 {
        return Err(UniqueHeld(format!(
            "{} refused: another job holds the unique key",
            count(refused, "line")
        ))
        .into());
    }
    Ok(())
}

/// Why a line is not text, when it is not: a NUL byte, or bytes that are not UTF-8.
fn not_text(line: &[u8]) -> Option<&'static str> {
    if line.contains(&0) {
        Some("holds a NUL byte")
    } else if std::str::from_utf8(line).is_err() {
        Some("is not UTF-8")
    } else {
        None
    }
}

fn strip_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::DEFAULT_MAX_PAYLOAD;

    #[test]
    fn line_ends_are_stripped_once() {
        assert_eq!(strip_line_end(b"a\r\n"), b"a");
        assert_eq!(strip_line_end(b"a\n"), b"a");
        assert_eq!(strip_line_end(b"a"), b"a");
        assert_eq!(strip_line_end(b"a\n\n"), b"a\n");
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("64MiB"), Ok(DEFAULT_MAX_PAYLOAD));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("64MB").is_err());
        assert!(parse_size("MiB").is_err());
        assert_eq!(parse_size("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse_size("0.5KiB"), Ok(512));
        let err = parse_size("1.3KiB").unwrap_err();
        assert!(err.contains("is not a whole number of bytes"), "{err}");
        assert!(parse_size("1.2.3MiB").is_err());
        assert!(parse_size(".").is_err());
    }
}
