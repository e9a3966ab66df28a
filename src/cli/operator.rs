//! `jobqueue operator`: run the Kubernetes operator.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::controller::Settings;
use crate::controller::operator::{self, Config};
use crate::telemetry::{self, LogFormat};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue operator                                 # every namespace, with leader election
  jobqueue operator --namespace jobs,batch --log-format json
  jobqueue operator --no-leader-election --metrics-addr 127.0.0.1:8080   # one replica, local
Reads the cluster with the kubeconfig (in a pod: its service account); see docs/operator.md.";

/// Flags of `jobqueue operator`; each can also be set by its environment variable.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Watch JobQueues in these namespaces only: `a,b` or the flag repeated.
    #[arg(
        short,
        long,
        env = "JOBQUEUE_NAMESPACE",
        value_delimiter = ',',
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Vec<String>,

    /// Watch JobQueues in every namespace (the default without --namespace).
    #[arg(short = 'A', long, env = "JOBQUEUE_ALL_NAMESPACES", value_parser = super::argv::parse_bool)]
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
    #[arg(long, env = "JOBQUEUE_NO_LEADER_ELECTION", value_parser = super::argv::parse_bool)]
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

    /// How long the Lease holds without renewal (whole seconds, e.g. `15s`); a standby
    /// takes over after it.
    #[arg(long, env = "JOBQUEUE_LEASE_DURATION", value_name = "DURATION", default_value = "15s",
          value_parser = TimeFlag::whole_seconds(2))]
    pub lease_duration: Duration,

    /// How long before the Lease expires the leader renews it (whole seconds, e.g. `5s`).
    #[arg(long, env = "JOBQUEUE_LEASE_RENEW_BEFORE", value_name = "DURATION",
          default_value = "5s", value_parser = TimeFlag::whole_seconds(1))]
    pub lease_renew_before: Duration,

    /// Queues reconciled at once at most, per watched namespace (0: no limit).
    #[arg(long, env = "JOBQUEUE_CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,

    /// Reaper calls per reconcile at most; each handles up to reaper.batchSize leases.
    #[arg(long, env = "JOBQUEUE_REAP_BUDGET", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub reap_budget: u64,

    /// How long connecting to a Redis may take (e.g. `5s`, `500ms`).
    #[arg(long, env = "JOBQUEUE_REDIS_CONNECT_TIMEOUT", value_name = "DURATION",
          default_value = "5s", value_parser = TimeFlag::positive())]
    pub redis_connect_timeout: Duration,

    /// How long one Redis command may take (e.g. `10s`).
    #[arg(long, env = "JOBQUEUE_REDIS_RESPONSE_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = TimeFlag::positive())]
    pub redis_response_timeout: Duration,

    /// The first retry delay after a failed reconcile, doubled per failure (e.g. `1s`).
    #[arg(long, env = "JOBQUEUE_BACKOFF_INITIAL", value_name = "DURATION",
          default_value = "1s", value_parser = TimeFlag::positive())]
    pub backoff_initial: Duration,

    /// The longest retry delay after failed reconciles (e.g. `60s`). A queue is never
    /// retried later than one `reaper.interval` after a failure either.
    #[arg(long, env = "JOBQUEUE_BACKOFF_MAX", value_name = "DURATION",
          default_value = "60s", value_parser = TimeFlag::positive())]
    pub backoff_max: Duration,

    /// How often at most a queue's status is patched when only its counts changed
    /// (e.g. `30s`; `0s`: on every change). Conditions, replicas and the observed
    /// generation are written at once.
    #[arg(long, env = "JOBQUEUE_STATUS_INTERVAL", value_name = "DURATION",
          default_value = "30s", value_parser = crate::duration::parse)]
    pub status_interval: Duration,
}

impl OperatorArgs {
    // Settings added later keep their defaults.
    #[allow(clippy::needless_update)]
    pub fn config(&self) -> Config {
        Config {
            namespaces: if self.all_namespaces {
                Vec::new()
            } else {
                let mut namespaces: Vec<String> = Vec::new();
                for ns in self.namespace.iter().map(|ns| ns.trim()) {
                    if !ns.is_empty() && !namespaces.iter().any(|n| n == ns) {
                        namespaces.push(ns.to_string());
                    }
                }
                namespaces
            },
            http_addr: self.metrics_addr,
            leader_election: !self.no_leader_election,
            lease_name: self.lease_name.clone(),
            lease_namespace: self.lease_namespace.clone(),
            identity: self.identity.clone(),
            lease_duration: self.lease_duration,
            lease_renew_before: self.lease_renew_before,
            concurrency: self.concurrency,
            settings: Settings {
                reap_budget: self.reap_budget as usize,
                connect_timeout: self.redis_connect_timeout,
                response_timeout: self.redis_response_timeout,
                backoff_initial: self.backoff_initial,
                backoff_max: self.backoff_max.max(self.backoff_initial),
                status_interval: self.status_interval,
                watch_related: true,
                ..Settings::default()
            },
        }
    }
}

/// The value parser of the operator's time flags: a duration such as `15s`, or, as
/// before durations, bare seconds (`15`) with a deprecation warning on stderr.
#[derive(Debug, Clone, Copy)]
struct TimeFlag {
    min: Duration,
    /// The Lease counts whole seconds: `1500ms` would silently become `1s`.
    whole_seconds: bool,
}

impl TimeFlag {
    fn whole_seconds(min_secs: u64) -> Self {
        TimeFlag {
            min: Duration::from_secs(min_secs),
            whole_seconds: true,
        }
    }

    fn positive() -> Self {
        TimeFlag {
            min: Duration::from_nanos(1),
            whole_seconds: false,
        }
    }

    /// The duration, and a warning to print when `text` is bare seconds.
    fn parse(self, flag: &str, text: &str) -> Result<(Duration, Option<String>), String> {
        let bare = text.trim();
        let (d, warning) = if !bare.is_empty() && bare.bytes().all(|b| b.is_ascii_digit()) {
            let secs: u64 = bare.parse().map_err(|_| format!("{bare:?} is too long"))?;
            let warning =
                format!("warning: --{flag} {bare} (bare seconds) is deprecated; write {bare}s");
            (Duration::from_secs(secs), Some(warning))
        } else {
            (crate::duration::parse(text)?, None)
        };
        if d < self.min {
            return Err(if self.min == Duration::from_nanos(1) {
                format!("{text:?} must be above zero")
            } else {
                format!(
                    "{text:?} must be at least {}",
                    crate::duration::format(self.min)
                )
            });
        }
        if self.whole_seconds && d.subsec_nanos() != 0 {
            return Err(format!(
                "{text:?} must be whole seconds (the Lease counts seconds)"
            ));
        }
        Ok((d, warning))
    }
}

impl clap::builder::TypedValueParser for TimeFlag {
    type Value = Duration;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Duration, clap::Error> {
        let flag = arg
            .and_then(|a| a.get_long())
            .unwrap_or("duration")
            .to_string();
        let this = *self;
        // A closure is a value parser: clap words its errors like every other flag's.
        let parse = move |text: &str| this.parse(&flag, text);
        let (d, warning) = parse.parse_ref(cmd, arg, value)?;
        if let Some(warning) = warning {
            eprintln!("{warning}");
        }
        Ok(d)
    }
}

/// Run the operator until SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format, &args.log_level)?;
    operator::run(args.config()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_flags_take_durations() {
        let secs = Duration::from_secs;
        let cases = [
            (TimeFlag::whole_seconds(2), "15s", secs(15)),
            (TimeFlag::whole_seconds(2), "2m", secs(120)),
            (TimeFlag::whole_seconds(2), "2s", secs(2)),
            (TimeFlag::whole_seconds(1), "1s", secs(1)),
            (TimeFlag::positive(), "500ms", Duration::from_millis(500)),
            (TimeFlag::positive(), "1m30s", secs(90)),
        ];
        for (flag, text, want) in cases {
            assert_eq!(flag.parse("x", text), Ok((want, None)), "{text}");
        }
    }

    #[test]
    fn bare_seconds_still_work_with_a_warning() {
        let (d, warning) = TimeFlag::whole_seconds(2)
            .parse("lease-duration", "30")
            .unwrap();
        assert_eq!(d, Duration::from_secs(30));
        assert_eq!(
            warning.as_deref(),
            Some("warning: --lease-duration 30 (bare seconds) is deprecated; write 30s")
        );
        let (d, warning) = TimeFlag::positive().parse("t", " 5 ").unwrap();
        assert_eq!(d, Duration::from_secs(5));
        assert!(warning.is_some());
    }

    #[test]
    fn time_flags_refuse_what_cannot_be_used() {
        let cases = [
            (
                TimeFlag::whole_seconds(2),
                "1s",
                "\"1s\" must be at least 2s",
            ),
            (TimeFlag::whole_seconds(2), "1", "\"1\" must be at least 2s"),
            (
                TimeFlag::whole_seconds(1),
                "0s",
                "\"0s\" must be at least 1s",
            ),
            (
                TimeFlag::whole_seconds(2),
                "2500ms",
                "\"2500ms\" must be whole seconds (the Lease counts seconds)",
            ),
            (TimeFlag::positive(), "0", "\"0\" must be above zero"),
            (TimeFlag::positive(), "0ms", "\"0ms\" must be above zero"),
            (
                TimeFlag::positive(),
                "5x",
                "\"5x\": unknown unit \"x\" (use ms, s, m, h, d or µs)",
            ),
        ];
        for (flag, text, want) in cases {
            assert_eq!(flag.parse("x", text), Err(want.to_string()), "{text}");
        }
    }

    #[test]
    fn the_flags_reach_the_config() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "jobqueue",
            "operator",
            "--lease-duration",
            "20",
            "--lease-renew-before",
            "4s",
            "--redis-connect-timeout",
            "1500ms",
        ])
        .unwrap();
        let crate::cli::Command::Operator(args) = cli.command else {
            panic!("not the operator");
        };
        let config = args.config();
        assert_eq!(config.lease_duration, Duration::from_secs(20));
        assert_eq!(config.lease_renew_before, Duration::from_secs(4));
        assert_eq!(config.settings.connect_timeout, Duration::from_millis(1500));
        assert_eq!(config.settings.response_timeout, Duration::from_secs(10));
    }
}

#[cfg(test)]
mod backoff_and_status_flags {
    use clap::Parser;

    use super::*;

    fn config(args: &[&str]) -> Config {
        let cli =
            crate::cli::Cli::try_parse_from(["jobqueue", "operator"].iter().chain(args)).unwrap();
        let crate::cli::Command::Operator(args) = cli.command else {
            panic!("not the operator");
        };
        args.config()
    }

    #[test]
    fn several_namespaces_are_watched_from_a_list_or_repeated_flags() {
        let cases: &[(&[&str], &[&str])] = &[
            (&[], &[]),
            (&["--namespace", "a"], &["a"]),
            (&["--namespace", "a,b"], &["a", "b"]),
            (&["--namespace", "a", "--namespace", "b"], &["a", "b"]),
            (&["-n", "a,b", "-n", "c"], &["a", "b", "c"]),
            (&["--namespace", "a,,b,a"], &["a", "b"]),
            (&["--all-namespaces"], &[]),
        ];
        for (args, want) in cases {
            assert_eq!(config(args).namespaces, *want, "jobqueue operator {args:?}");
        }
    }

    #[test]
    fn the_backoff_and_status_flags_reach_the_settings() {
        let s = config(&[]).settings;
        assert_eq!(
            (s.backoff_initial, s.backoff_max, s.status_interval),
            (
                Duration::from_secs(1),
                Duration::from_secs(60),
                Duration::from_secs(30)
            ),
            "the defaults"
        );
        assert!(s.watch_related, "the operator watches Secrets and targets");
        let s = config(&[
            "--backoff-initial",
            "200ms",
            "--backoff-max",
            "5s",
            "--status-interval",
            "0s",
        ])
        .settings;
        assert_eq!(
            (s.backoff_initial, s.backoff_max, s.status_interval),
            (
                Duration::from_millis(200),
                Duration::from_secs(5),
                Duration::ZERO
            )
        );
    }
}
