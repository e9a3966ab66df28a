//! The `jobqueue` command line: one binary, one subcommand per job.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::queue::{ConnectOptions, DEFAULT_PREFIX, Queue, Redis};

pub mod worker;

/// Exit codes shared by every subcommand (documented in the README).
pub mod exit {
    pub const OK: i32 = 0;
    /// Any failure not listed below.
    pub const FAILURE: i32 = 1;
    /// Bad flags or arguments (clap's own code).
    pub const USAGE: i32 = 2;
    /// Redis could not be reached.
    pub const UNREACHABLE: i32 = 3;
    /// Redis refused the credentials.
    pub const AUTH: i32 = 4;
    /// A key of the queue holds the wrong type.
    pub const WRONG_TYPE: i32 = 5;
    /// The Redis URL is malformed.
    pub const BAD_URL: i32 = 6;
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
    Crd,
    /// Run a command for each job: payload on stdin, exit 0 acks (see --help).
    Worker(worker::WorkerArgs),
}

/// How to reach a queue: shared by every operations subcommand.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Redis URL (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS; for a
    /// Cluster, seed nodes separated by commas).
    #[arg(
        long = "redis",
        env = "JOBQUEUE_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis: String,
    /// Talk to a Redis Cluster.
    #[arg(long, env = "JOBQUEUE_CLUSTER")]
    pub cluster: bool,
    /// The queue's hash tag, e.g. `emails` (keys become `jq:{emails}:…`).
    #[arg(long, env = "JOBQUEUE_TAG")]
    pub tag: String,
    /// Key prefix.
    #[arg(long, env = "JOBQUEUE_PREFIX", default_value = DEFAULT_PREFIX)]
    pub prefix: String,
}

impl ConnectArgs {
    pub fn options(&self) -> ConnectOptions {
        ConnectOptions::new(self.redis.clone())
            .cluster(self.cluster)
            .connect_timeout(Duration::from_secs(3))
    }

    pub async fn queue(&self) -> crate::queue::Result<Queue> {
        // Check the tag before connecting: a bad tag is a usage error, not a Redis one.
        crate::queue::validate_tag(&self.tag)?;
        let redis = Redis::connect(&self.options()).await?;
        Queue::new(redis, &self.prefix, &self.tag)
    }
}

/// The exit code for a failure, by what failed.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    use crate::queue::Error;
    match err.downcast_ref::<Error>() {
        Some(Error::Connect { .. } | Error::Unavailable(_)) => exit::UNREACHABLE,
        Some(Error::Redis { source, .. })
            if source.is_io_error() || source.is_connection_refusal() =>
        {
            exit::UNREACHABLE
        }
        Some(Error::Auth { .. }) => exit::AUTH,
        Some(Error::WrongType { .. }) => exit::WRONG_TYPE,
        Some(Error::InvalidUrl { .. }) => exit::BAD_URL,
        Some(Error::InvalidArgument { .. }) => exit::USAGE,
        _ => exit::FAILURE,
    }
}

/// Run the command line; returns the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crd => anyhow::bail!("the crd subcommand is not available in this build"),
        Command::Worker(args) => worker::run(args).await,
    }
}
