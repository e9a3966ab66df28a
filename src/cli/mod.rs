//! The `jobqueue` command line: one binary, one subcommand per job.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::queue::{ConnectOptions, DEFAULT_PREFIX, Queue, Redis};

mod argv;
mod common;
mod configure;
mod control;
mod dead;
mod demo;
mod enqueue;
pub mod format;
mod pause;
mod peek;
mod progress;
mod reap;
mod schedule;
pub(crate) mod show;
mod stats;
pub mod ui;
pub mod worker;

pub use argv::{parse, try_parse_from};
pub use common::Interrupted;

pub mod crd;
pub mod operator;

/// Exit codes shared by every subcommand (documented in the README).
pub mod exit {
    pub const OK: i32 = 0;
    /// Any failure not listed below.
    pub const FAILURE: i32 = 1;
    /// Bad flags or arguments (clap's own code).
    pub const USAGE: i32 = 2;
    /// Redis could not be reached (or its TLS certificate is not trusted).
    pub const UNREACHABLE: i32 = 3;
    /// Redis refused the credentials (password, user, client certificate) or its ACL
    /// denied the user a command or a key.
    pub const AUTH: i32 = 4;
    /// A key of the queue holds the wrong type.
    pub const WRONG_TYPE: i32 = 5;
    /// The Redis URL is malformed, or the Sentinels know no master of that name.
    pub const BAD_URL: i32 = 6;
    /// `enqueue --unique-key`: another job holds the key; nothing was enqueued (the
    /// holder's id is printed).
    pub const UNIQUE_HELD: i32 = 7;
    /// Stopped by Ctrl-C or SIGTERM before finishing (128 + SIGINT).
    pub const INTERRUPTED: i32 = 130;
}

#[derive(Debug, Parser)]
#[command(
    name = "jobqueue",
    version,
    about = "Redis reliable job queues with visibility timeouts, and their Kubernetes operator",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the JobQueue CustomResourceDefinition (YAML).
    #[command(after_help = crd::EXAMPLES)]
    Crd,
    /// Run a command for each job: payload on stdin, exit 0 acks (see --help).
    Worker(worker::WorkerArgs),
    /// Run the Kubernetes operator: reap every JobQueue and publish its status.
    #[command(after_help = operator::EXAMPLES)]
    Operator(operator::OperatorArgs),
    /// Add jobs to a queue: one payload, a file, or one payload per line of stdin.
    #[command(after_help = enqueue::EXAMPLES)]
    Enqueue(enqueue::EnqueueArgs),
    /// Show a queue's counts, counters and processing times.
    #[command(after_help = stats::EXAMPLES, mut_arg("durability", read_only))]
    Stats(stats::StatsArgs),
    /// Inspect, redrive or purge the dead-letter set.
    #[command(after_help = dead::EXAMPLES)]
    Dead(dead::DeadArgs),
    /// Show the jobs next in line (or delayed, or claimed), with a preview of their payloads.
    #[command(after_help = peek::EXAMPLES, mut_arg("durability", read_only))]
    Peek(peek::PeekArgs),
    /// Show one job in any status: where it is, attempts, timing, last error, payload.
    #[command(after_help = show::EXAMPLES, mut_arg("durability", read_only))]
    Show(show::ShowArgs),
    /// Show or change a queue's settings (visibility timeout, retries, retention).
    #[command(after_help = configure::EXAMPLES)]
    Configure(configure::ConfigureArgs),
    /// Pause a queue: workers claim nothing until `resume` (producers go on).
    #[command(after_help = pause::PAUSE_EXAMPLES)]
    Pause(pause::PauseArgs),
    /// Resume a paused queue: workers claim again.
    #[command(after_help = pause::RESUME_EXAMPLES)]
    Resume(pause::PauseArgs),
    /// Run delayed jobs now, by id: each goes to the front of pending.
    #[command(after_help = control::PROMOTE_EXAMPLES)]
    Promote(control::JobsArgs),
    /// Cancel jobs by id: pending or delayed ones at once, leased ones stopped by their worker.
    #[command(after_help = control::CANCEL_EXAMPLES)]
    Cancel(control::JobsArgs),
    /// Recurring jobs: add, ls, show, rm, pause, resume a queue's schedules.
    #[command(after_help = schedule::EXAMPLES)]
    Schedule(schedule::ScheduleArgs),
    /// Put expired leases back to pending (or dead): once, or every interval.
    #[command(after_help = reap::EXAMPLES)]
    Reap(reap::ReapArgs),
    /// A local queue with crashing workers recovered by the reaper (needs redis-server).
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::DemoArgs),
    /// Serve the web console of the queues of one Redis (or of the cluster's JobQueues).
    #[command(after_help = ui::EXAMPLES)]
    Ui(ui::UiArgs),
    /// One worker process of the demo (started by `jobqueue demo`).
    #[command(hide = true)]
    DemoWorker(demo::worker::DemoWorkerArgs),
}

/// `--durability` on a command that writes nothing (`stats`, `peek`, `show`, `dead ls`,
/// `dead show`): still accepted (JOBQUEUE_DURABILITY may be set for every command), not
/// offered in the help.
pub(crate) fn read_only(arg: clap::Arg) -> clap::Arg {
    arg.hide(true)
}

/// `JOBQUEUE_*` variables that stand for a required flag: when one is set, the flag is
/// not required, and the usage lines must not say it is.
const REQUIRED_FROM_ENV: &[(&str, &str)] = &[("tag", "JOBQUEUE_TAG")];

/// The command line's definition, with the flags whose variable is set no longer marked
/// required in the usage lines (clap marks them whatever the environment holds).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let set: Vec<&str> = REQUIRED_FROM_ENV
        .iter()
        .filter(|(_, var)| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
        .map(|(id, _)| *id)
        .collect();
    let mut cmd = Cli::command();
    if !set.is_empty() {
        cmd = not_required(cmd, &set);
    }
    cmd
}

fn not_required(mut cmd: clap::Command, ids: &[&str]) -> clap::Command {
    for id in ids {
        if cmd
            .get_arguments()
            .any(|a| a.get_id() == id && a.is_required_set())
        {
            cmd = cmd.mut_arg(*id, |a| a.required(false));
        }
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |sub| not_required(sub, ids));
    }
    cmd
}

/// Exit with clap's message, its usage line without the flags set only by their
/// variable: clap lists those as if given (`Usage: jobqueue stats --tag <TAG> --redis
/// <REDIS>` with JOBQUEUE_REDIS_URL set reads as if --redis were required).
pub(crate) fn usage_exit(err: clap::Error, cmd: &clap::Command, argv: &[std::ffi::OsString]) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) || !err.use_stderr()
    {
        err.exit();
    }
    let given: Vec<String> = argv
        .iter()
        .filter_map(|a| a.to_str())
        .map(|a| a.split('=').next().unwrap_or(a).to_string())
        .collect();
    let mut from_env = Vec::new();
    env_only_flags(cmd, &given, &mut from_env);
    let text = err.render().to_string();
    let text: Vec<String> = text
        .lines()
        .map(|line| {
            if !line.starts_with("Usage: ") {
                return line.to_string();
            }
            from_env.iter().fold(line.to_string(), |line, token| {
                let end = format!("{token} ");
                if line.ends_with(token.as_str()) {
                    line[..line.len() - token.len()].to_string()
                } else {
                    line.replacen(&end, " ", 1)
                }
            })
        })
        .collect();
    eprintln!("{}", text.join("\n"));
    std::process::exit(err.exit_code());
}

/// ` --long <VALUE>` (or ` --long`) of every flag, in `cmd` and its subcommands, whose
/// variable is set and that the command line does not give.
fn env_only_flags(cmd: &clap::Command, given: &[String], out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        let (Some(long), Some(var)) = (arg.get_long(), arg.get_env()) else {
            continue;
        };
        let set = std::env::var_os(var).is_some_and(|v| !v.is_empty());
        if !set || given.iter().any(|g| g == &format!("--{long}")) {
            continue;
        }
        let token = match arg.get_value_names().and_then(|n| n.first()) {
            Some(name) => format!(" --{long} <{name}>"),
            None if arg.get_action().takes_values() => {
                format!(" --{long} <{}>", arg.get_id().as_str().to_uppercase())
            }
            None => format!(" --{long}"),
        };
        if !out.contains(&token) {
            out.push(token);
        }
    }
    for sub in cmd.get_subcommands() {
        env_only_flags(sub, given, out);
    }
}

/// How to reach a queue: shared by every operations subcommand.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub endpoint: RedisArgs,
    /// The queue's hash tag, e.g. `emails` (keys become `jq:{emails}:…`).
    #[arg(long, env = "JOBQUEUE_TAG")]
    pub tag: String,
    /// Key prefix.
    #[arg(long, env = "JOBQUEUE_PREFIX", default_value = DEFAULT_PREFIX)]
    pub prefix: String,
    /// The queue's partition count [default: the count the queue records, else 1]
    ///
    /// Its jobs are spread over N queues whose tags derive from --tag (see
    /// docs/partitions.md). Without it, the count the queue records (written by the
    /// operator or `configure --partitions`), else 1 (unpartitioned); a count that
    /// disagrees with the record is refused (`configure` changes it).
    #[arg(long, env = "JOBQUEUE_PARTITIONS", value_name = "N")]
    pub partitions: Option<usize>,
    /// While the queue is resized from (or to) M partitions: also claim from, count, reap,
    /// redrive and purge the queues of the M-partition layout; new jobs still go to the
    /// --partitions layout.
    ///
    /// Without it, the drain the queue records while resizing; one that disagrees with
    /// the record is refused.
    #[arg(long, env = "JOBQUEUE_DRAIN_PARTITIONS", value_name = "M")]
    pub drain_partitions: Option<usize>,
    /// Act on this one partition only (0-based, in the order `jobqueue stats` lists
    /// them) instead of all of them.
    #[arg(long, env = "JOBQUEUE_PARTITION", value_name = "I")]
    pub partition: Option<usize>,
}

/// The help heading of the flags of [`RedisArgs`].
const CONNECTION: &str = "Connection";

/// How to reach a Redis (standalone, Cluster or behind Sentinel): the part of
/// [`ConnectArgs`] that names no queue, shared with `jobqueue ui`. Listed under their own
/// heading; `-h` shows --redis and --durability only, `--help` all of them.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Redis URL (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS; for a
    /// Cluster, seed nodes separated by commas). The password may come from
    /// JOBQUEUE_REDIS_PASSWORD or --redis-password-file instead (one of them), which
    /// keeps it out of `ps` and needs no URL escaping.
    #[arg(
        long = "redis",
        help_heading = CONNECTION,
        env = "JOBQUEUE_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis: String,
    /// Talk to a Redis Cluster.
    #[arg(long, help_heading = CONNECTION, env = "JOBQUEUE_CLUSTER", hide_short_help = true, value_parser = argv::parse_bool)]
    pub cluster: bool,
    /// PEM file of the CA that signs the server's certificate (with `rediss://`), for a
    /// Redis whose certificate the system trust store does not know.
    #[arg(long, help_heading = CONNECTION, env = "JOBQUEUE_TLS_CA", value_name = "FILE", hide_short_help = true)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// ACL user (Redis 6+) to authenticate as; its password is the URL's
    /// (`redis://:PASSWORD@host`) or JOBQUEUE_REDIS_PASSWORD. Same as
    /// `redis://USER:PASSWORD@host`.
    #[arg(long, help_heading = CONNECTION, env = "JOBQUEUE_USERNAME", value_name = "USER", hide_short_help = true)]
    pub username: Option<String>,
    /// PEM file of the client certificate for mutual TLS (with `rediss://`, for a Redis
    /// started with `tls-auth-clients yes`); needs --tls-key. With --sentinel, this or
    /// --tls-ca turns on TLS to the data nodes the Sentinels name.
    #[arg(
        long,
        help_heading = CONNECTION,
        env = "JOBQUEUE_TLS_CERT",
        hide_short_help = true,
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM file of the client certificate's private key; needs --tls-cert.
    #[arg(
        long,
        help_heading = CONNECTION,
        env = "JOBQUEUE_TLS_KEY",
        hide_short_help = true,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,
    /// Check the server's certificate for this name (and send it as SNI) instead of the
    /// host of --redis, which is still where to connect: for a Redis reached by an address
    /// its certificate does not list (an IP address, a port-forward, a Service alias).
    /// `rediss://` to one server; not with --cluster or --sentinel.
    #[arg(long, help_heading = CONNECTION, env = "JOBQUEUE_TLS_SERVER_NAME", value_name = "NAME", hide_short_help = true, value_parser = argv::non_empty)]
    pub tls_server_name: Option<String>,
    /// Sentinels to ask for the primary, `host:port` separated by commas (instead of
    /// --redis); the client follows failovers. The Sentinels' password comes from
    /// JOBQUEUE_SENTINEL_PASSWORD, the Redis nodes' from JOBQUEUE_REDIS_PASSWORD.
    #[arg(
        long,
        help_heading = CONNECTION,
        env = "JOBQUEUE_SENTINEL",
        hide_short_help = true,
        value_name = "HOST:PORT,...",
        requires = "master_name",
        conflicts_with_all = ["cluster", "redis"]
    )]
    pub sentinel: Option<String>,
    /// The master name the Sentinels monitor (with --sentinel).
    #[arg(
        long,
        help_heading = CONNECTION,
        env = "JOBQUEUE_MASTER_NAME",
        hide_short_help = true,
        value_name = "NAME",
        requires = "sentinel"
    )]
    pub master_name: Option<String>,
    /// What enqueue, claim, ack, fail and reap wait for: `primary` (default: the primary
    /// ran it) or `replicated[:REPLICAS[:TIMEOUT]]` (also confirmed by that many replicas,
    /// default 1 within 1s, e.g. `replicated:1:500ms`). Without it, `primary`; a worker takes
    /// the queue's own setting (`spec.durability`, published by the operator) instead.
    /// See docs/operations.md, Durability.
    #[arg(long, help_heading = CONNECTION, env = "JOBQUEUE_DURABILITY", value_name = "SETTING")]
    pub durability: Option<String>,
    /// A file holding the Redis nodes' password (one line; a final newline is not part
    /// of it), instead of the URL's or JOBQUEUE_REDIS_PASSWORD: unlike a URL's, it is
    /// not seen in `ps`, and needs no escaping of `/`, `?`, `#` or `@`.
    #[arg(long, help_heading = CONNECTION, env = "JOBQUEUE_REDIS_PASSWORD_FILE", value_name = "FILE", hide_short_help = true)]
    pub redis_password_file: Option<std::path::PathBuf>,
}

impl ConnectArgs {
    pub fn options(&self) -> crate::queue::Result<ConnectOptions> {
        self.endpoint.options()
    }

    /// The `--durability` setting.
    pub fn durability(&self) -> crate::queue::Result<crate::queue::Durability> {
        self.endpoint.durability()
    }

    /// Every partition of the queue (with one partition, the queue itself): the layout of
    /// the count the queue records in its `meta` (and the drain while it is resized), or
    /// of `--partitions` (`--drain-partitions`) when it records none. A flag that
    /// disagrees with the record is refused, naming both (see [`resolve_partitions`]).
    pub async fn partitioned(&self) -> crate::queue::Result<crate::queue::PartitionedQueue> {
        // Check the tag before connecting: a bad tag is a usage error, not a Redis one.
        crate::queue::validate_tag(&self.tag)?;
        let durability = self.durability()?;
        let redis = self.connect().await?;
        let head = Queue::new(redis.clone(), &self.prefix, &self.tag)?;
        let record = head.partition_record().await?;
        let resolved = resolve_partitions(
            self.partitions,
            self.drain_partitions,
            record,
            head.name(),
            &self.tag,
        )?;
        if let Some(note) = &resolved.note {
            eprintln!("note: {note}");
        }
        let queue = crate::queue::PartitionedQueue::resizing(
            redis,
            &self.prefix,
            &self.tag,
            resolved.route,
            resolved.drain.unwrap_or(resolved.route),
        )?;
        Ok(queue.map_partitions(|q| q.durability(durability)))
    }

    /// The queue of the tag itself (`T`, a partition of every layout), whose `meta`
    /// records the partition count.
    pub(crate) async fn head(&self) -> crate::queue::Result<Queue> {
        crate::queue::validate_tag(&self.tag)?;
        let durability = self.durability()?;
        Ok(Queue::new(self.connect().await?, &self.prefix, &self.tag)?.durability(durability))
    }

    async fn connect(&self) -> crate::queue::Result<Redis> {
        Redis::connect(&self.options()?).await
    }
}

/// The layout a command works with, from the flags and the queue's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPartitions {
    /// The count new jobs are routed over.
    pub route: usize,
    /// The count of a layout drained too (a resize under way).
    pub drain: Option<usize>,
    /// Said on stderr: a count given for a queue that records none.
    pub note: Option<String>,
}

/// `--partitions` / `--drain-partitions` (`given`, `drain`) against what queue `name`
/// records (`record`): the record when no flag is given; a flag that agrees with it; a
/// flag that disagrees is an error naming both numbers. A queue that records nothing
/// (made before the record, or never partitioned) takes the flags, 1 partition without.
pub fn resolve_partitions(
    given: Option<usize>,
    drain: Option<usize>,
    record: Option<crate::queue::PartitionRecord>,
    name: &str,
    tag: &str,
) -> crate::queue::Result<ResolvedPartitions> {
    let Some(record) = record else {
        let route = given.unwrap_or(1);
        let partitioned = route != 1 || drain.is_some_and(|d| d != 1);
        return Ok(ResolvedPartitions {
            route,
            drain,
            note: partitioned.then(|| {
                format!(
                    "{name} records no partition count, so a command without --partitions \
                     sees the queue {tag} alone: `jobqueue configure --tag {tag} \
                     --partitions {route}` records it for every command and the console"
                )
            }),
        });
    };
    if let Some(n) = given
        && n != record.partitions
        && record.drain == Some(n)
        && drain.is_none_or(|m| m == record.partitions)
    {
        // The layout being drained, as clients started before the resize were told: its
        // queues and the new layout's together, as the record's own reading gives.
        return Ok(ResolvedPartitions {
            route: n,
            drain: Some(record.partitions),
            note: None,
        });
    }
    if let Some(n) = given
        && n != record.partitions
    {
        return Err(crate::queue::Error::InvalidArgument {
            what: "--partitions",
            reason: format!(
                "{n} disagrees with the partition count {name} records: {} (meta field \
                 partitions); leave --partitions out to use the queue's, or change the count \
                 with `jobqueue configure --tag {tag} --partitions {n}` (under the operator: \
                 spec.partitions)",
                record.partitions
            ),
        });
    }
    if let (Some(m), Some(d)) = (drain, record.drain)
        && m != d
    {
        return Err(crate::queue::Error::InvalidArgument {
            what: "--drain-partitions",
            reason: format!(
                "{m} disagrees with the resize {name} records: from {d} to {} partitions \
                 (meta field drain_partitions); leave --drain-partitions out to drain the \
                 queue's",
                record.partitions
            ),
        });
    }
    Ok(ResolvedPartitions {
        route: record.partitions,
        // A drain given for a queue that records none: the partitions of a layout the
        // record does not know of (an earlier resize), claimed and counted too.
        drain: record.drain.or(drain),
        note: None,
    })
}

impl RedisArgs {
    pub fn options(&self) -> crate::queue::Result<ConnectOptions> {
        let ca = match &self.tls_ca {
            Some(path) => Some(read_pem(path)?),
            None => None,
        };
        let cert = match &self.tls_cert {
            Some(path) => Some(read_pem_file(path, "--tls-cert", "CERTIFICATE")?),
            None => None,
        };
        let key = match &self.tls_key {
            Some(path) => Some(read_pem_file(path, "--tls-key", "PRIVATE KEY")?),
            None => None,
        };
        if let (Some(cert), Some(key), Some(cert_path), Some(key_path)) =
            (&cert, &key, &self.tls_cert, &self.tls_key)
        {
            // The pair is this client's own files: a v1 certificate or a key of another
            // certificate is named here (exit 2), not blamed on the server or the network.
            match crate::queue::check_client_pair(cert, key) {
                Ok(()) => {}
                Err(crate::queue::ClientPairProblem::Cert(reason)) => {
                    return Err(crate::queue::Error::InvalidArgument {
                        what: "--tls-cert",
                        reason: format!("{}: {reason}", cert_path.display()),
                    });
                }
                Err(crate::queue::ClientPairProblem::Key(reason)) => {
                    return Err(crate::queue::Error::InvalidArgument {
                        what: "--tls-key",
                        reason: format!(
                            "{}: {}",
                            key_path.display(),
                            reason.replace(
                                "(--tls-cert)",
                                &format!("(--tls-cert {})", cert_path.display())
                            )
                        ),
                    });
                }
            }
        }
        let password = self.redis_password()?;
        if let Some(sentinels) = &self.sentinel {
            let master = self.master_name.clone().unwrap_or_default();
            let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
            // --tls-ca or --tls-cert: TLS to the data nodes the Sentinels name.
            return Ok(
                ConnectOptions::sentinel(sentinels.split(',').map(str::to_string), master)
                    .sentinel_password(env("JOBQUEUE_SENTINEL_PASSWORD"))
                    .password(password)
                    .connect_timeout(Duration::from_secs(3))
                    .ca_cert(ca)
                    .username(self.username.clone())
                    .client_cert(cert, key)
                    .tls_server_name(self.tls_server_name.clone()),
            );
        }
        // The Redis nodes' password from the environment or a file, as with --sentinel;
        // one given in the URL too is refused rather than one of them silently ignored.
        if password.is_some() && crate::queue::url_has_password(&self.redis) {
            let what = if self.redis_password_file.is_some() {
                "--redis-password-file"
            } else {
                "JOBQUEUE_REDIS_PASSWORD"
            };
            return Err(crate::queue::Error::InvalidArgument {
                what,
                reason: format!(
                    "it is {} and the Redis URL carries a password too: give the \
                     password once, in the URL or in {what}",
                    if self.redis_password_file.is_some() {
                        "given"
                    } else {
                        "set"
                    }
                ),
            });
        }
        Ok(ConnectOptions::new(self.redis.clone())
            .password(password)
            .cluster(self.cluster)
            .connect_timeout(Duration::from_secs(3))
            .ca_cert(ca)
            .username(self.username.clone())
            .client_cert(cert, key)
            .tls_server_name(self.tls_server_name.clone()))
    }

    /// The Redis nodes' password from --redis-password-file or JOBQUEUE_REDIS_PASSWORD
    /// (not both), if either gives one.
    fn redis_password(&self) -> crate::queue::Result<Option<String>> {
        let env = std::env::var("JOBQUEUE_REDIS_PASSWORD")
            .ok()
            .filter(|v| !v.is_empty());
        let Some(path) = &self.redis_password_file else {
            return Ok(env);
        };
        let invalid = |reason: String| crate::queue::Error::InvalidArgument {
            what: "--redis-password-file",
            reason,
        };
        if env.is_some() {
            return Err(invalid(
                "JOBQUEUE_REDIS_PASSWORD is set too: give the password once".into(),
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        let line = text.strip_suffix('\n').unwrap_or(&text);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.contains('\n') {
            return Err(invalid(format!(
                "{} must hold the password on one line (it is {})",
                path.display(),
                if line.is_empty() {
                    "empty"
                } else {
                    "several lines"
                }
            )));
        }
        Ok(Some(line.to_string()))
    }

    /// The `--durability` setting (`primary` without one).
    pub fn durability(&self) -> crate::queue::Result<crate::queue::Durability> {
        match &self.durability {
            Some(setting) => setting.parse(),
            None => Ok(crate::queue::Durability::Primary),
        }
    }
}

/// Read a `--tls-ca` file and check that it holds a PEM certificate, so a wrong file is
/// named at start instead of failing the TLS handshake later.
fn read_pem(path: &std::path::Path) -> crate::queue::Result<Vec<u8>> {
    let invalid = |reason: String| crate::queue::Error::InvalidArgument {
        what: "--tls-ca",
        reason,
    };
    let pem =
        std::fs::read(path).map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
    let marker = b"-----BEGIN CERTIFICATE-----";
    if !pem.windows(marker.len()).any(|w| w == marker) {
        return Err(invalid(format!(
            "{} is not a PEM certificate (no -----BEGIN CERTIFICATE----- line)",
            path.display()
        )));
    }
    Ok(pem)
}

/// Read a `--tls-cert` or `--tls-key` file and check that it holds a PEM block of `label`.
fn read_pem_file(
    path: &std::path::Path,
    what: &'static str,
    label: &str,
) -> crate::queue::Result<Vec<u8>> {
    let invalid = |reason: String| crate::queue::Error::InvalidArgument { what, reason };
    let pem =
        std::fs::read(path).map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
    if crate::queue::pem_blocks(&pem, label) == 0 {
        return Err(invalid(format!(
            "{} is not a PEM {} (no -----BEGIN ...{label}----- line)",
            path.display(),
            label.to_lowercase()
        )));
    }
    Ok(pem)
}

/// The exit code for a failure, by what failed.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    use crate::queue::Error;
    if err.downcast_ref::<Interrupted>().is_some() {
        return exit::INTERRUPTED;
    }
    if err.downcast_ref::<common::UsageError>().is_some() {
        return exit::USAGE;
    }
    if err.downcast_ref::<common::UniqueHeld>().is_some() {
        return exit::UNIQUE_HELD;
    }
    match err.downcast_ref::<Error>() {
        Some(Error::Connect { .. } | Error::Unavailable(_) | Error::NoSentinel { .. }) => {
            exit::UNREACHABLE
        }
        Some(Error::UnknownMaster { .. }) => exit::BAD_URL,
        Some(Error::Redis { source, .. })
            if source.is_io_error() || source.is_connection_refusal() =>
        {
            exit::UNREACHABLE
        }
        Some(Error::Auth { .. } | Error::Denied { .. }) => exit::AUTH,
        // The server refused this client's certificate: a credential refused. This
        // client refusing the server's certificate is a Redis it cannot trust to reach.
        Some(Error::Tls { problem, .. }) if problem.is_client_side() => exit::AUTH,
        Some(Error::Tls { .. }) => exit::UNREACHABLE,
        Some(Error::WrongType { .. }) => exit::WRONG_TYPE,
        Some(Error::InvalidUrl { .. }) => exit::BAD_URL,
        Some(Error::InvalidArgument { .. }) => exit::USAGE,
        _ => exit::FAILURE,
    }
}

/// True when the command failed only because its stdout was closed (`jobqueue peek | head
/// -1`): the reader has what it wanted, so the command ends quietly with success, as
/// `cat` and `ls` do. A broken pipe to Redis is a queue error and does not count.
pub fn stdout_closed(err: &anyhow::Error) -> bool {
    let mut broken = false;
    for cause in err.chain() {
        if cause.downcast_ref::<crate::queue::Error>().is_some() {
            return false;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            broken |= io.kind() == std::io::ErrorKind::BrokenPipe;
        }
    }
    broken
}

/// A failure as one line: each cause appended once (a cause whose text the message
/// already contains is not repeated).
pub fn error_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line.replace('\n', " ")
}

/// Run the command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crd => crd::run(),
        Command::Operator(args) => operator::run(args).await,
        // Boxed: the worker's future is deep enough to overflow the layout query depth.
        Command::Worker(args) => Box::pin(worker::run(args)).await,
        Command::Enqueue(args) => enqueue::run(args).await,
        Command::Stats(args) => stats::run(args).await,
        Command::Dead(args) => dead::run(args).await,
        Command::Peek(args) => peek::run(args).await,
        Command::Show(args) => show::run(args).await,
        Command::Configure(args) => configure::run(args).await,
        Command::Reap(args) => reap::run(args).await,
        Command::Schedule(args) => schedule::run(args).await,
        Command::Pause(args) => pause::run(args, true).await,
        Command::Resume(args) => pause::run(args, false).await,
        Command::Promote(args) => control::promote(args).await,
        Command::Cancel(args) => control::cancel(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Ui(args) => ui::run(args).await,
        Command::DemoWorker(args) => demo::worker::run(args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect to Redis at redis://h:1: {source}")]
    struct Connect {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn partition_flags_are_checked_against_the_record() {
        use crate::queue::PartitionRecord;
        let name = "jq:{e}";
        let resolve = |given, drain, record| resolve_partitions(given, drain, record, name, "e");
        let three = Some(PartitionRecord::new(3));
        let shrinking = Some(PartitionRecord {
            partitions: 2,
            drain: Some(3),
        });
        // The record alone, or a flag that agrees with it.
        for given in [None, Some(3)] {
            let r = resolve(given, None, three).unwrap();
            assert_eq!((r.route, r.drain, r.note), (3, None, None));
        }
        let r = resolve(None, None, shrinking).unwrap();
        assert_eq!((r.route, r.drain), (2, Some(3)));
        // The layout being drained, as a client of the old count says it: both layouts.
        let r = resolve(Some(3), None, shrinking).unwrap();
        assert_eq!((r.route, r.drain), (3, Some(2)));
        // A count of neither, or another drain: refused, naming both numbers.
        let err = resolve(Some(4), None, three).unwrap_err().to_string();
        assert!(
            err.contains("--partitions: 4 disagrees with the partition count jq:{e} records: 3"),
            "{err}"
        );
        assert!(resolve(Some(4), None, shrinking).is_err());
        let err = resolve(None, Some(4), shrinking).unwrap_err().to_string();
        assert!(
            err.contains("4 disagrees with the resize jq:{e} records: from 3 to 2"),
            "{err}"
        );
        // A drain for a queue that records none: added. No record: the flags, noted.
        let r = resolve(None, Some(6), three).unwrap();
        assert_eq!((r.route, r.drain), (3, Some(6)));
        let r = resolve(Some(6), None, None).unwrap();
        assert_eq!((r.route, r.drain), (6, None));
        assert!(r.note.unwrap().contains("records no partition count"));
        let r = resolve(None, None, None).unwrap();
        assert_eq!((r.route, r.drain, r.note), (1, None, None));
    }

    #[test]
    fn error_lines_name_each_cause_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = anyhow::Error::from(io()).context("cannot read job.json");
        assert_eq!(error_line(&err), "cannot read job.json: no such file");
        // A message that already quotes its source does not repeat it.
        let err = anyhow::Error::from(Connect { source: io() });
        assert_eq!(
            error_line(&err),
            "cannot connect to Redis at redis://h:1: no such file"
        );
        let err = anyhow::anyhow!("two\nlines");
        assert_eq!(error_line(&err), "two lines");
    }

    #[test]
    fn only_a_closed_stdout_ends_quietly() {
        let pipe = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(stdout_closed(&pipe().into()));
        assert!(stdout_closed(
            &anyhow::Error::from(pipe()).context("printing")
        ));
        assert!(!stdout_closed(&anyhow::anyhow!("other")));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!stdout_closed(&reset.into()));
        let redis = crate::queue::Error::Unavailable("broken pipe".into());
        assert!(!stdout_closed(&redis.into()));
    }

    #[test]
    fn exit_codes_follow_what_failed() {
        use crate::queue::Error;
        let code = |e: Error| exit_code(&e.into());
        assert_eq!(
            code(Error::InvalidUrl {
                url: "x".into(),
                reason: "y".into()
            }),
            exit::BAD_URL
        );
        assert_eq!(
            code(Error::Auth {
                endpoint: "x".into(),
                detail: "y".into()
            }),
            exit::AUTH
        );
        assert_eq!(
            code(Error::InvalidArgument {
                what: "hash tag",
                reason: "y".into()
            }),
            exit::USAGE
        );
        assert_eq!(
            code(Error::Denied {
                on: "jq:{a}".into(),
                op: "claim",
                user: "w".into(),
                detail: "y".into()
            }),
            exit::AUTH
        );
        let tls = |problem| Error::Tls {
            endpoint: "rediss://h:1".into(),
            problem,
            source: redis::RedisError::from((redis::ErrorKind::Io, "tls")),
        };
        use crate::queue::TlsProblem;
        assert_eq!(code(tls(TlsProblem::ClientCertRejected)), exit::AUTH);
        assert_eq!(code(tls(TlsProblem::UnknownServerCa)), exit::UNREACHABLE);
        assert_eq!(exit_code(&Interrupted("SIGTERM").into()), exit::INTERRUPTED);
        assert_eq!(
            exit_code(&common::UsageError("add --yes".into()).into()),
            exit::USAGE
        );
        assert_eq!(exit_code(&anyhow::anyhow!("other")), exit::FAILURE);
    }
}
