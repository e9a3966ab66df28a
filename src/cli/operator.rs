//! `jobqueue operator`: run the Kubernetes operator.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::controller::Settings;
use crate::controller::operator::{self, Config};
use crate::controller::telemetry::{self, LogFormat};

/// Flags of `jobqueue operator`; each can also be set by its environment variable.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Watch JobQueues in this namespace only.
    #[arg(
        short,
        long,
        env = "JOBQUEUE_NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,

    /// Watch JobQueues in every namespace (the default without --namespace).
    #[arg(short = 'A', long, env = "JOBQUEUE_ALL_NAMESPACES")]
    pub all_namespaces: bool,

    /// Address of the HTTP endpoints /metrics, /healthz and /readyz.
    #[arg(long, env = "JOBQUEUE_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Log format: text for people, json for log pipelines.
    #[arg(long, env = "JOBQUEUE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Log filter, e.g. `info` or `jobqueue=debug,kube=info` (RUST_LOG wins when set).
    #[arg(long, env = "JOBQUEUE_LOG", default_value = "info")]
    pub log_level: String,

    /// Run without leader election (only safe with a single replica).
    #[arg(long, env = "JOBQUEUE_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,

    /// Name of the coordination Lease the replicas compete for.
    #[arg(long, env = "JOBQUEUE_LEASE_NAME", default_value = "jobqueue-operator")]
    pub lease_name: String,

    /// Namespace of the Lease (default: the pod's namespace, else the kubeconfig's).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// This replica's identity in the Lease and in Events (default: the pod or host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Seconds the Lease holds without renewal; a standby takes over after it.
    #[arg(long, env = "JOBQUEUE_LEASE_DURATION", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(2..))]
    pub lease_duration: u64,

    /// Seconds before the Lease expires that the leader renews it.
    #[arg(long, env = "JOBQUEUE_LEASE_RENEW_BEFORE", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_renew_before: u64,

    /// Queues reconciled at once at most (0: no limit).
    #[arg(long, env = "JOBQUEUE_CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,

    /// Reaper calls per reconcile at most; each handles up to reaper.batchSize leases.
    #[arg(long, env = "JOBQUEUE_REAP_BUDGET", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub reap_budget: u64,

    /// Seconds connecting to a Redis may take.
    #[arg(long, env = "JOBQUEUE_REDIS_CONNECT_TIMEOUT", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_connect_timeout: u64,

    /// Seconds one Redis command may take.
    #[arg(long, env = "JOBQUEUE_REDIS_RESPONSE_TIMEOUT", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_response_timeout: u64,
}

impl OperatorArgs {
    pub fn config(&self) -> Config {
        Config {
            namespace: if self.all_namespaces {
                None
            } else {
                self.namespace.clone()
            },
            http_addr: self.metrics_addr,
            leader_election: !self.no_leader_election,
            lease_name: self.lease_name.clone(),
            lease_namespace: self.lease_namespace.clone(),
            identity: self.identity.clone(),
            lease_duration: Duration::from_secs(self.lease_duration),
            lease_renew_before: Duration::from_secs(self.lease_renew_before),
            concurrency: self.concurrency,
            settings: Settings {
                reap_budget: self.reap_budget as usize,
                connect_timeout: Duration::from_secs(self.redis_connect_timeout),
                response_timeout: Duration::from_secs(self.redis_response_timeout),
                ..Settings::default()
            },
        }
    }
}

/// Run the operator until SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format, &args.log_level)?;
    operator::run(args.config()).await
}
