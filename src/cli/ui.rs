//! `jobqueue ui`: serve the web console (see docs/console.md) for the queues of one
//! Redis, found by a scan or given by tag, or for the JobQueues of a Kubernetes cluster.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::RedisArgs;
use super::common::{UsageError, stop_signal};
use crate::console::{self, Config, Source};
use crate::queue::{DEFAULT_PREFIX, Redis};
use crate::telemetry::{self, LogFormat};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue ui --redis redis://127.0.0.1:6379            # every queue found, read-only
  jobqueue ui --tag emails,reports --allow-writes       # these queues; redrive and purge
  jobqueue ui --kubernetes --namespace jobs             # the JobQueues of a namespace
  jobqueue ui --bind 0.0.0.0 --token-file /run/console-token
Then open http://127.0.0.1:8740/";

#[derive(Debug, Args)]
pub struct UiArgs {
    #[command(flatten)]
    pub endpoint: RedisArgs,
    /// The queues to show, by hash tag (repeat, or separate with commas); without, every
    /// queue of --prefix found by scanning the keys (a Cluster needs --tag).
    #[arg(long, env = "JOBQUEUE_TAG", value_delimiter = ',', value_parser = super::argv::non_empty)]
    pub tag: Vec<String>,
    /// Key prefix.
    #[arg(long, env = "JOBQUEUE_PREFIX", default_value = DEFAULT_PREFIX)]
    pub prefix: String,
    /// Show the cluster's JobQueues instead, each reached with the Secrets its spec names
    /// (read with your kubeconfig, as kubectl does).
    #[arg(long, conflicts_with_all = ["tag", "sentinel", "cluster"])]
    pub kubernetes: bool,
    /// With --kubernetes: only this namespace's JobQueues (default: every namespace).
    #[arg(long, requires = "kubernetes")]
    pub namespace: Option<String>,
    /// The address to listen on. Anything but loopback needs --token-file.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,
    /// The port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8740)]
    pub port: u16,
    /// Offer and accept redrive and purge of dead jobs (read-only without).
    #[arg(long)]
    pub allow_writes: bool,
    /// A file holding the token every request must carry (`Authorization: Bearer …`, or
    /// once on the login page for a session cookie). Readable by its owner only
    /// (`chmod 600`): a file group or others can read is refused.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// How long a client may take to send a request's headers, and how long an idle
    /// connection is kept open; then the console closes it.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse)]
    pub client_timeout: Duration,
    /// The most connections open at once (default: half of what the open-file limit
    /// leaves, between 16 and 4096). At the cap a new one closes the quietest idle one.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// How often the counts are read: one `stats` call per queue per interval, whatever
    /// the number of open pages.
    #[arg(long, default_value = "2s", value_parser = crate::duration::parse)]
    pub refresh: Duration,
    /// Without --tag: how often the keys are scanned again for new queues (a scan reads
    /// the whole keyspace).
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse)]
    pub rescan: Duration,
    /// How far back the rate charts and the health badges look.
    #[arg(long, default_value = "5m", value_parser = super::argv::history)]
    pub history: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter (`RUST_LOG` wins when set).
    #[arg(long, default_value = "info")]
    pub log_level: String,
}

/// The token from `--token-file`, checked: a file that cannot be read, is empty or is
/// readable by group or others is named (with its mode), its content never is.
fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| UsageError(format!("--token-file: cannot read {}: {e}", path.display())))?
        .permissions()
        .mode();
    if mode & 0o044 != 0 {
        return Err(UsageError(format!(
            "--token-file: {} is readable by {} (mode {:04o}): a token file must be readable \
             by its owner only (chmod 600 {})",
            path.display(),
            if mode & 0o004 != 0 {
                "everyone"
            } else {
                "its group"
            },
            mode & 0o7777,
            path.display()
        ))
        .into());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("--token-file: cannot read {}: {e}", path.display())))?;
    let token = text.trim().to_string();
    if token.len() < 16 {
        return Err(UsageError(format!(
            "--token-file: {} must hold a token of at least 16 characters",
            path.display()
        ))
        .into());
    }
    Ok(token)
}

pub async fn run(args: UiArgs) -> anyhow::Result<()> {
    if args.refresh < Duration::from_millis(100) {
        return Err(UsageError("--refresh must be at least 100ms".into()).into());
    }
    if args.client_timeout < Duration::from_millis(100)
        || args.client_timeout > Duration::from_secs(3600)
    {
        return Err(UsageError("--client-timeout must be from 100ms to 1h".into()).into());
    }
    if args.max_connections == Some(0) {
        return Err(UsageError("--max-connections must be at least 1".into()).into());
    }
    let token = args.token_file.as_deref().map(read_token).transpose()?;
    if !args.bind.is_loopback() && token.is_none() {
        return Err(UsageError(format!(
            "--bind {} is not a loopback address: add --token-file so that only holders of \
             the token can use the console",
            args.bind
        ))
        .into());
    }
    telemetry::init(args.log_format, &args.log_level)?;
    let source = if args.kubernetes {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the Kubernetes API: {e}"))?;
        Source::kubernetes(client, args.namespace.clone())
    } else {
        let tags: Vec<String> = args
            .tag
            .iter()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        for tag in &tags {
            crate::queue::validate_tag(tag)?;
        }
        if args.endpoint.cluster && tags.is_empty() {
            return Err(UsageError(
                "a Redis Cluster is not scanned for queues: name them with --tag".into(),
            )
            .into());
        }
        let durability = args.endpoint.durability()?;
        let redis = Redis::connect(&args.endpoint.options()?).await?;
        let tags = (!tags.is_empty()).then_some(tags);
        Source::redis(redis, &args.prefix, tags, durability, args.rescan)
    };
    let described = source.describe();
    let config = Config {
        listen: SocketAddr::new(args.bind, args.port),
        allow_writes: args.allow_writes,
        token,
        refresh: args.refresh,
        history: args.history.max(args.refresh * 2),
        client_timeout: args.client_timeout,
        max_connections: args
            .max_connections
            .unwrap_or_else(console::server::default_max_connections),
    };
    let shutdown = CancellationToken::new();
    // Listening before the address is out: a SIGTERM sent on seeing it stops the console.
    let stop = stop_signal();
    let (addr, server) = console::serve(config, source, shutdown.clone()).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "jobqueue console on http://{addr}/ for {described} ({})",
            if args.allow_writes {
                "redrive and purge allowed"
            } else {
                "read-only"
            }
        )?;
        out.flush()?;
    }
    let signal = stop.await;
    tracing::info!(signal, "stopping the console");
    shutdown.cancel();
    let _ = server.await;
    Ok(())
}
