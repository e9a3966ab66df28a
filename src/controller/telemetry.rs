//! Logs: tracing to stderr, as text for people or JSON for log pipelines.

use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Install the global subscriber. `filter` is an `EnvFilter` directive such as `info` or
/// `jobqueue=debug,kube=info`; `RUST_LOG` wins when set.
pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => EnvFilter::try_new(env)?,
        _ => EnvFilter::try_new(filter)?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}
