//! `jobqueue worker --exec CMD [ARGS…]`: a reliable worker for a command in any language.

use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::ConnectArgs;
use crate::queue::Error;
use crate::telemetry::{self, LogFormat};
use crate::worker::Worker;
use crate::worker::exec::{DEFAULT_DEAD_EXIT_CODE, DEFAULT_STDERR_TAIL, ExecHandler};

const EXAMPLES: &str = "\
Examples:
  # Run ./send-email.py for each job of the `emails` queue, four at a time:
  jobqueue worker --redis redis://127.0.0.1:6379 --tag emails --concurrency 4 --exec ./send-email.py

  # A shell one-liner; everything after --exec is the command and its arguments:
  jobqueue worker --tag thumbs --exec sh -c 'convert - -resize 64x64 \"/out/$JOBQUEUE_JOB_ID.png\"'

  # A queue of 6 partitions (docs/partitions.md): claim from all of them in rotation:
  jobqueue worker --tag emails --partitions 6 --concurrency 8 --exec ./send-email.py

What the command gets and how its exit is read:
  stdin                 the job's payload (exact bytes)
  JOBQUEUE_JOB_ID       the job's id
  JOBQUEUE_ATTEMPT      1 on the first run, 2 on the first retry, ...
  JOBQUEUE_QUEUE        the queue, e.g. jq:{emails}
  JOBQUEUE_WORKER_ID    this worker's id
  environment           the worker's, less its credentials (JOBQUEUE_REDIS_URL, the
                        passwords, the TLS client key; --exec-keep-credentials keeps them)
  exit 0                the job is done (acked)
  exit 99               the job is dead-lettered at once (--dead-exit-code changes 99)
  other exit, signal    the job is retried per the queue's backoff, until max attempts
  cannot start          for this job only (its id or environment too large, a process or
                        memory limit): retried as a failure; for every job (not found,
                        not executable): the worker stops and the job runs again
  stderr                passed through; its last 2 KiB become the job's last_error
  stdout                the job's result, stored with the ack (at most --result-limit,
                        64 KiB: a longer one fails the job; --result-limit 0 stores none
                        and passes stdout through)
  jobqueue:progress P M a stdout line reporting progress: P percent (0-100), message M
                        (jobqueue show prints it); not part of the result

The lease is renewed while the command runs; if it cannot be renewed in time (Redis
unreachable), the command gets SIGTERM when the lease may have ended and SIGKILL
--kill-grace later, so it never runs on beside the job's next run for longer. With
--timeout, a command still running after that long gets SIGTERM, then SIGKILL
--kill-grace later, and its job fails with `timed out after <timeout>` (retried or
dead-lettered as any failure); a job enqueued with its own --timeout has that limit
instead, and one enqueued with its own --visibility is leased and renewed for that long
instead of the queue's visibility timeout (or --visibility). A job cancelled with `jobqueue cancel` while it runs is
stopped the same way at the next lease renewal and ends as cancelled (not retried, not
dead), whatever the command's exit. On SIGTERM
or Ctrl-C the worker stops claiming, sends SIGTERM to running commands and waits up to
--shutdown-timeout: a command that exits 0 in time is acked; one that stops otherwise, or
is still running at the deadline (then killed with SIGKILL), has its job released to run
again without counting the attempt. A second SIGTERM or Ctrl-C skips the wait.

The worker also reaps the queue about every half lease: a job whose worker was killed
goes back in line once its lease ends, with no `jobqueue reap` running. --no-reaper
turns that off when something else reaps (on Kubernetes the operator does; leaving the
workers' reapers on there too is safe and keeps the queue healing if the operator is down).";

/// Run a command for each job of a queue.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    /// Jobs run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub concurrency: u16,

    /// Lease length (e.g. `30s`, `500ms`, `2m`) instead of the queue's visibility timeout.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse)]
    pub visibility: Option<Duration>,

    /// The longest a command runs (e.g. `10m`): past it, it gets SIGTERM, then SIGKILL
    /// after --kill-grace, and its job fails with `timed out after <DURATION>`, retried
    /// or dead-lettered by the queue's rules [default: no limit]. A job enqueued with its
    /// own --timeout has that limit instead.
    #[arg(long, value_name = "DURATION", value_parser = super::argv::positive_duration)]
    pub timeout: Option<Duration>,

    /// How long shutdown waits for running commands before killing them.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::duration::parse)]
    pub shutdown_timeout: Duration,

    /// After a lease is lost (or may be: Redis unreachable until the lease's local
    /// deadline), how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::argv::kill_grace)]
    pub kill_grace: Duration,

    /// The name recorded in each job's `worker` field [default: hostname-pid].
    #[arg(long, env = "JOBQUEUE_WORKER_ID")]
    pub worker_id: Option<String>,

    /// The exit code that dead-letters a job instead of retrying it (1-255).
    #[arg(long, default_value_t = DEFAULT_DEAD_EXIT_CODE, value_parser = clap::value_parser!(u8).range(1..))]
    pub dead_exit_code: u8,

    /// Bytes of the end of the command's stderr kept as the job's last_error.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_STDERR_TAIL, value_parser = super::argv::stderr_tail)]
    pub stderr_tail: usize,

    /// Bytes of the command's stdout stored as the job's result (at most 65536); a longer
    /// stdout fails the job. 0 stores none (stdout goes to the worker's stdout).
    #[arg(long, value_name = "BYTES", default_value_t = crate::queue::MAX_RESULT, value_parser = result_limit)]
    pub result_limit: usize,

    /// Do not reap the queue from this worker. By default every worker reaps now and
    /// then (expired leases of crashed workers back in line, due delayed jobs promoted,
    /// the dead set trimmed), so a queue heals without the operator or `jobqueue reap`.
    #[arg(long, env = "JOBQUEUE_NO_REAPER", value_parser = super::argv::parse_bool)]
    pub no_reaper: bool,

    /// Pass the worker's own credentials on to the command: JOBQUEUE_REDIS_URL,
    /// JOBQUEUE_REDIS_PASSWORD, JOBQUEUE_SENTINEL_PASSWORD, JOBQUEUE_USERNAME,
    /// JOBQUEUE_TLS_CERT and JOBQUEUE_TLS_KEY. By default they are removed from its
    /// environment, so job code cannot reach Redis as the worker.
    #[arg(long, env = "JOBQUEUE_EXEC_KEEP_CREDENTIALS", value_parser = super::argv::parse_bool)]
    pub exec_keep_credentials: bool,

    /// Log format: `text` for people, `json` for log pipelines (one object per line).
    #[arg(long, env = "JOBQUEUE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Log level (`error`, `warn`, `info`, `debug`, `trace`) or a filter such as
    /// `jobqueue=debug,kube=info`; RUST_LOG wins when set.
    #[arg(long, env = "JOBQUEUE_LOG_LEVEL", value_name = "LEVEL", default_value = "info",
          value_parser = telemetry::parse_filter)]
    pub log_level: String,

    /// The command and its arguments: everything after --exec (so put other flags first).
    #[arg(
        long = "exec",
        value_name = "CMD",
        required = true,
        num_args = 1..,
        allow_hyphen_values = true
    )]
    pub exec: Vec<String>,
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let (program, rest) = args
        .exec
        .split_first()
        .ok_or_else(|| Error::InvalidArgument {
            what: "--exec",
            reason: "a command is needed".into(),
        })?;
    // Each command runs under this binary as its supervisor, so that no process of a job
    // survives the worker (see worker::supervisor).
    let supervisor = std::env::current_exe().ok();
    let handler = ExecHandler::new(program, rest)
        .dead_exit_code(args.dead_exit_code)
        .stderr_tail(args.stderr_tail)
        .result_limit(args.result_limit)
        .kill_grace(args.kill_grace)
        .keep_credentials(args.exec_keep_credentials)
        .supervisor(supervisor);
    let shutdown = CancellationToken::new();
    let handler = handler.stop_on_start_failure(shutdown.clone());
    handler.check().map_err(|reason| Error::InvalidArgument {
        what: "--exec command",
        reason,
    })?;
    telemetry::init(args.log_format, &args.log_level)?;
    let source = start_up(&args).await?;
    let mut builder = Worker::builder(source)
        .concurrency(usize::from(args.concurrency))
        .visibility(args.visibility)
        .timeout(args.timeout)
        .shutdown_deadline(args.shutdown_timeout)
        .lease_grace(args.kill_grace)
        .handle_signals(true)
        .reaper(!args.no_reaper)
        .shutdown_token(shutdown);
    if let Some(id) = args.worker_id {
        builder = builder.worker_id(id);
    }
    let worker = builder.build()?;
    if std::process::id() == 1 {
        // PID 1 in a container inherits every orphan: reap them, or they stay zombies.
        tokio::spawn(reap_strays_on_sigchld());
    }
    let handler = std::sync::Arc::new(handler);
    let ran = handler.clone();
    worker
        .try_run(move |lease, ctx| {
            let handler = handler.clone();
            async move { handler.run(lease, ctx).await }
        })
        .await?;
    if let Some(reason) = ran.start_failure() {
        // No job was charged: each was handed back as it failed to start.
        return Err(Error::InvalidArgument {
            what: "--exec command",
            reason: reason.to_string(),
        }
        .into());
    }
    Ok(())
}

/// How long a worker behind Sentinel keeps trying to start while a failover is under
/// way: more than Sentinel's default `down-after-milliseconds` (30 s) plus an election.
const START_DURING_FAILOVER: Duration = Duration::from_secs(90);

/// Open the queue (its key types checked), note an absent queue, and settle the
/// durability. A start that reached Redis and then lost it (a command broken mid-way),
/// or, behind Sentinel, found the Sentinels naming a primary that does not answer (a
/// failover under way), is tried again with a warning until the failover is over; an
/// endpoint that cannot be reached at all, a wrong master name, a bad credential, a
/// wrong-typed key or a replica given as the primary still ends the worker at once with
/// its error.
async fn start_up(args: &WorkerArgs) -> anyhow::Result<crate::worker::JobSource> {
    let deadline = tokio::time::Instant::now() + START_DURING_FAILOVER;
    let mut pause = Duration::from_millis(100);
    loop {
        match try_start_up(args).await {
            Ok(source) => return Ok(source),
            Err(err)
                if tokio::time::Instant::now() + pause < deadline
                    && retried_at_start(&err, args.connect.endpoint.sentinel.is_some()) =>
            {
                tracing::warn!(error = %err, retry_in = ?pause,
                    "Redis lost while starting (a failover?); trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(err) => return Err(err),
        }
    }
}

/// Whether a failed start is tried again (see [`start_up`]).
fn retried_at_start(err: &anyhow::Error, sentinel: bool) -> bool {
    match err.downcast_ref::<Error>() {
        Some(e @ Error::Redis { .. }) => e.is_transient(),
        Some(Error::Unavailable(_)) => sentinel,
        _ => false,
    }
}

async fn try_start_up(args: &WorkerArgs) -> anyhow::Result<crate::worker::JobSource> {
    // A wrong-typed key is named at start (exit 5), not retried by every claim.
    // A partitioned queue: claim from every partition (and those of --drain-partitions).
    let target = super::common::open_target(&args.connect).await?;
    // A replica takes no write: refused now rather than by every claim.
    for queue in target.queues() {
        queue.check_primary().await?;
    }
    super::common::note_if_target_absent(&target).await?;
    let source: crate::worker::JobSource = match target {
        super::common::Target::One(queue) => queue.into(),
        super::common::Target::All(queue) => queue.into(),
    };
    // Without --durability, the queue's own (spec.durability, which the operator
    // publishes in meta); an explicit flag wins.
    let source = match &args.connect.endpoint.durability {
        Some(_) => source,
        None => match source.published_durability().await? {
            Some(published) => {
                tracing::info!(queue = %source.name(), durability = %published,
                    "using the queue's durability setting");
                source.with_durability(published)
            }
            None => source,
        },
    };
    Ok(source)
}

/// Reap re-parented processes each time a child ends (see [`crate::worker::exec::reap_strays`]).
async fn reap_strays_on_sigchld() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut sigchld) = signal(SignalKind::child()) else {
            return;
        };
        while sigchld.recv().await.is_some() {
            crate::worker::exec::reap_strays();
        }
    }
}

/// `--result-limit`: 0 to 65536 bytes.
fn result_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n <= crate::queue::MAX_RESULT => Ok(n),
        _ => Err(format!(
            "{text:?} is not a number of bytes from 0 to {}",
            crate::queue::MAX_RESULT
        )),
    }
}
