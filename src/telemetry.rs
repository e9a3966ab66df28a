//! Logs of every long-running command (`jobqueue operator`, `jobqueue worker`): tracing to
//! stderr, as text for people or JSON for log pipelines, coloured only on a terminal.
//! A log line that cannot be written (stderr closed, a full pipe's reader gone) is
//! dropped: logging never stops work or shutdown.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Check a log filter (`info`, `jobqueue=debug,kube=info`) when the flag is parsed, so a
/// typo is refused with the flag's name instead of logging nothing or everything.
pub fn parse_filter(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("a log level is needed: error, warn, info, debug or trace \
                    (or a filter such as jobqueue=debug,kube=info)"
            .into());
    }
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    // A bare word would parse as a target name (everything under it, at every level):
    // alone, only a level is meant.
    if !text.contains(['=', ',']) && !LEVELS.contains(&text.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "{text:?} is not a log level: use error, warn, info, debug or trace, or a filter \
             such as jobqueue=debug,kube=info"
        ));
    }
    EnvFilter::builder()
        .with_regex(false)
        .parse(text)
        .map(|_| text.to_string())
        .map_err(|e| {
            format!(
                "{text:?} is not a log level or filter ({e}): use error, warn, info, debug or \
                 trace, or a filter such as jobqueue=debug,kube=info"
            )
        })
}

/// A text for one field of a log event on one line: line breaks (a command's stderr tail)
/// written as `\n` and `\r`, so that one event is one line in a text log too.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\n', '\r']) {
        return text.into();
    }
    text.replace('\r', "\\r").replace('\n', "\\n").into()
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
        .with_writer(|| LossyStderr)
        .log_internal_errors(false)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ));
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

/// Stderr that drops what it cannot write. tracing-subscriber reports a failed write with
/// `eprintln!`, which panics when stderr is a closed pipe: in whatever task was logging,
/// so a worker whose log reader went away (`… 2>&1 | head -1`) froze with jobs in flight
/// and ignored SIGTERM.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Whatever the error, the line is lost, and claiming it written is what keeps
        // the caller going.
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Colour codes only for a person at a terminal: a file, a pipe or a log collector gets
/// plain text, and so does anyone who sets `NO_COLOR` (<https://no-color.org>: any
/// non-empty value).
fn colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_escapes_line_breaks() {
        assert_eq!(one_line("plain"), "plain");
        assert_eq!(one_line("a\nb\r\n"), "a\\nb\\r\\n");
    }

    #[test]
    fn log_filters_are_checked() {
        assert_eq!(parse_filter("debug").as_deref(), Ok("debug"));
        assert!(parse_filter("jobqueue=debug,kube=info").is_ok());
        assert!(parse_filter("").is_err());
        let err = parse_filter("loud").unwrap_err();
        assert!(err.contains("\"loud\" is not a log level"), "{err}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let cases = [
            (true, None, true),
            (true, Some(""), true),
            (true, Some("1"), false),
            (false, None, false),
            (false, Some("1"), false),
        ];
        for (terminal, no_color, want) in cases {
            assert_eq!(
                colour(terminal, no_color.map(Into::into)),
                want,
                "{terminal} {no_color:?}"
            );
        }
    }
}
