//! Reading the command line: clap, plus the answers clap alone gets wrong.
//!
//! - A negative number after a numeric or duration flag (`--concurrency -1`,
//!   `--visibility -1s`) is that flag's value, refused as "must not be negative" naming
//!   the flag, instead of clap's "unexpected argument '-1'" (with a tip to write `-- -1`,
//!   which would make it a payload).
//! - A value taken from an environment variable that is wrong names the variable.
//! - A non-UTF-8 argument is named, with the way to pass bytes (`--file`).

use std::any::TypeId;
use std::ffi::OsString;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command, FromArgMatches};

use super::Cli;

/// Parse the process's arguments, exiting with clap's usage code on a mistake (its usage
/// line without the flags set only by their variable: see [`super::usage_exit`]).
pub fn parse() -> Cli {
    let argv: Vec<OsString> = std::env::args_os().collect();
    match try_parse_from(argv.clone()) {
        Ok(cli) => cli,
        Err(err) => super::usage_exit(err, &super::command(), &argv),
    }
}

/// Parse `args` (the program name first) as [`parse`] does.
pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut cmd = super::command();
    cmd.build();
    let args = join_negative_values(&cmd, args.into_iter().map(Into::into).collect());
    let matches = match cmd.try_get_matches_from_mut(&args) {
        Ok(matches) => matches,
        Err(err) => return Err(explain(&mut cmd, &args, err)),
    };
    Cli::from_arg_matches(&matches).map_err(|err| err.format(&mut cmd))
}

/// `stats --watch`: an interval of at least 100 ms (the table is not redrawn faster, so a
/// shorter one would be taken silently as 100 ms).
pub fn watch_interval(text: &str) -> Result<Duration, String> {
    let d = crate::duration::parse(text)?;
    if d < Duration::from_millis(100) {
        return Err("must be at least 100ms (the table is not redrawn faster)".into());
    }
    Ok(d)
}

/// `ui --history`: how far back the charts look: at least 1 s.
pub fn history(text: &str) -> Result<Duration, String> {
    let d = crate::duration::parse(text)?;
    if d < Duration::from_secs(1) {
        return Err("must be at least 1s (the charts and health badges look back that far)".into());
    }
    Ok(d)
}

/// A duration that must be more than 0 (`worker --timeout`, `enqueue --timeout`).
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    let d = crate::duration::parse(text)?;
    if d.is_zero() {
        return Err("must be more than 0".into());
    }
    Ok(d)
}

/// `worker --kill-grace`: at most 1 h (the overlap of two runs of a job after a lost
/// lease is bounded by it: a longer grace is no bound).
pub fn kill_grace(text: &str) -> Result<Duration, String> {
    let d = crate::duration::parse(text)?;
    if d > Duration::from_secs(3600) {
        return Err(
            "must be at most 1h (it bounds how long a command may run past a lost lease)".into(),
        );
    }
    Ok(d)
}

/// `worker --stderr-tail`: bytes of stderr kept as `last_error`, at most 1 MiB (it is
/// stored in the job's hash).
pub fn stderr_tail(text: &str) -> Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|_| "must be a whole number of bytes".to_string())?;
    if n > 1 << 20 {
        return Err("must be at most 1048576 (1 MiB: it is stored in the job's hash)".into());
    }
    Ok(n)
}

/// A name that must not be empty (`--tls-server-name`, each `ui --tag`).
pub fn non_empty(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("must not be empty".into());
    }
    Ok(text.to_string())
}

/// A boolean flag's value from its environment variable (`JOBQUEUE_CLUSTER=1`): one
/// convention for every such variable, anything else refused.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err("expected true, false, 1, 0, yes or no".into()),
    }
}

/// Whether `arg` takes a whole number or a duration (the flags a negative value is a
/// mistake of, not another flag). `--backoff-multiplier` (a float) names its own range.
fn is_numeric(arg: &Arg) -> bool {
    let id = arg.get_value_parser().type_id();
    [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i64>(),
        TypeId::of::<Duration>(),
        TypeId::of::<super::configure::Visibility>(),
    ]
    .into_iter()
    .any(|t| id == t)
}

/// Whether `text` reads as a negative number or duration (`-1`, `-1.5`, `-5s`).
fn looks_negative(text: &str) -> bool {
    text.strip_prefix('-')
        .and_then(|rest| rest.chars().next())
        .is_some_and(|c| c.is_ascii_digit() || c == '.')
}

/// The numeric flag `token` names in `cmd` (`--name` or `-n`, with no `=value`).
fn numeric_flag<'a>(cmd: &'a Command, token: &str) -> Option<&'a Arg> {
    let arg = if let Some(long) = token.strip_prefix("--") {
        cmd.get_arguments().find(|a| {
            a.get_long() == Some(long)
                || a.get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&long))
        })
    } else {
        let mut chars = token.strip_prefix('-')?.chars();
        let short = chars.next()?;
        if chars.next().is_some() {
            return None;
        }
        cmd.get_arguments().find(|a| a.get_short() == Some(short))
    }?;
    (is_numeric(arg) && arg.get_action().takes_values()).then_some(arg)
}

/// `--flag -1` → `--flag=-1` for every numeric or duration flag, so the value reaches
/// the flag's parser (and its "must not be negative") instead of being read as a flag.
/// Stops at `--` and at a flag that takes the rest of the line (`--exec`).
fn join_negative_values(root: &Command, args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut cmd = root;
    let mut rest = args.into_iter();
    if let Some(program) = rest.next() {
        out.push(program);
    }
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str().map(str::to_owned) else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            out.push(arg);
            break;
        }
        if let Some(sub) = cmd.find_subcommand(&text) {
            cmd = sub;
            out.push(arg);
            continue;
        }
        let takes_rest = text.strip_prefix("--").is_some_and(|long| {
            cmd.get_arguments().any(|a| {
                a.get_long() == Some(long)
                    && a.get_num_args()
                        .is_some_and(|n| n.max_values() == usize::MAX)
            })
        });
        if takes_rest {
            out.push(arg);
            break;
        }
        if numeric_flag(cmd, &text).is_some() {
            let mut peek = rest.clone();
            if let Some(value) = peek
                .next()
                .filter(|v| v.to_str().is_some_and(looks_negative))
            {
                rest = peek;
                let mut joined = OsString::from(&text);
                joined.push("=");
                joined.push(value);
                out.push(joined);
                continue;
            }
        }
        out.push(arg);
    }
    out.extend(rest);
    out
}

/// The subcommand the arguments name (the deepest one found before `--`).
fn subcommand_of<'a>(root: &'a Command, args: &[OsString]) -> &'a Command {
    let mut cmd = root;
    for arg in args.iter().skip(1) {
        let Some(text) = arg.to_str() else { continue };
        if text == "--" {
            break;
        }
        if let Some(sub) = cmd.find_subcommand(text) {
            cmd = sub;
        }
    }
    cmd
}

fn context(err: &clap::Error, kind: ContextKind) -> Option<String> {
    match err.get(kind)? {
        ContextValue::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// The text of a clap error without its `error: ` and its closing hint.
fn reason_of(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let text = text
        .split("\n\nFor more information")
        .next()
        .unwrap_or(text);
    text.trim_end().to_string()
}

/// Rust's text for a number that is not one (`--partitions abc`), which names no rule.
const RUST_DIGIT_ERROR: &str = "invalid digit found in string";

/// `--name` of clap's rendering of a flag (`--name <VALUE>`), without the dashes.
fn long_of(flag: &str) -> String {
    flag.split_whitespace()
        .next()
        .and_then(|f| f.strip_prefix("--"))
        .unwrap_or_default()
        .to_string()
}

/// The environment variable a flag's value came from: the flag's variable when it is
/// set and the flag is not on the command line.
fn env_source(sub: &Command, args: &[OsString], flag: &str) -> Option<String> {
    let long = long_of(flag);
    let arg = sub.get_arguments().find(|a| a.get_long() == Some(&long))?;
    let given = args.iter().skip(1).any(|a| {
        a.to_str()
            .is_some_and(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")))
    });
    arg.get_env()
        .filter(|var| !given && std::env::var_os(var).is_some())
        .map(|var| var.to_string_lossy().into_owned())
}

/// Rewrite clap's error where it does not name what is wrong.
fn explain(cmd: &mut Command, args: &[OsString], err: clap::Error) -> clap::Error {
    if let Some((index, arg)) = args
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, a)| a.to_str().is_none())
        && matches!(
            err.kind(),
            ErrorKind::InvalidUtf8 | ErrorKind::UnknownArgument | ErrorKind::InvalidValue
        )
    {
        let after = match index {
            1 => String::new(),
            i => format!(" (after {:?})", args[i - 1].to_string_lossy()),
        };
        use std::os::unix::ffi::OsStrExt;
        let message = format!(
            "argument {index}{after} is not valid UTF-8: \"{}\"; arguments must be text \
             (pass a payload of any bytes with --file FILE or --stdin)",
            arg.as_bytes().escape_ascii()
        );
        return cmd.error(ErrorKind::InvalidUtf8, message);
    }
    if err.kind() == ErrorKind::ArgumentConflict {
        // `--sentinel` with JOBQUEUE_REDIS_URL set: say where the other side came from.
        let sub = subcommand_of(cmd, args);
        let mut message = reason_of(&err);
        let mut named = false;
        for kind in [ContextKind::InvalidArg, ContextKind::PriorArg] {
            let Some(flag) = context(&err, kind) else {
                continue;
            };
            if let Some(var) = env_source(sub, args, &flag) {
                message =
                    message.replacen(&format!("'{flag}'"), &format!("'{flag}' (set by {var})"), 1);
                named = true;
            }
        }
        if !named {
            return err;
        }
        return sub.clone().error(err.kind(), message);
    }
    if !matches!(
        err.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return err;
    }
    let (Some(flag), Some(value)) = (
        context(&err, ContextKind::InvalidArg),
        context(&err, ContextKind::InvalidValue),
    ) else {
        return err;
    };
    let sub = subcommand_of(cmd, args);
    let long = long_of(&flag);
    let arg = sub.get_arguments().find(|a| a.get_long() == Some(&long));
    let from_env = env_source(sub, args, &flag);
    let named = match &from_env {
        Some(var) => format!("{var} (the environment variable of --{long})"),
        None => format!("'{flag}'"),
    };
    let message = if arg.is_some_and(is_numeric) && looks_negative(&value) {
        format!("invalid value '{value}' for {named}: must not be negative")
    } else if from_env.is_some() || reason_of(&err).contains(RUST_DIGIT_ERROR) {
        reason_of(&err)
            .replacen(&format!("'{flag}'"), &named, 1)
            .replace(RUST_DIGIT_ERROR, "must be a whole number")
    } else {
        return err;
    };
    sub.clone().error(err.kind(), message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every numeric or duration flag of every subcommand, by its path.
    fn numeric_flags() -> Vec<(Vec<String>, String)> {
        fn walk(cmd: &Command, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
            for arg in cmd.get_arguments() {
                if let Some(long) = arg.get_long()
                    && is_numeric(arg)
                    && arg.get_action().takes_values()
                {
                    out.push((path.clone(), long.to_string()));
                }
            }
            for sub in cmd.get_subcommands() {
                path.push(sub.get_name().to_string());
                walk(sub, path, out);
                path.pop();
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let mut out = Vec::new();
        walk(&cmd, &mut Vec::new(), &mut out);
        out
    }

    fn error_of(args: &[&str]) -> String {
        match try_parse_from(args) {
            Ok(_) => format!("accepted {args:?}"),
            Err(err) => {
                assert_eq!(err.exit_code(), 2, "{args:?}");
                err.render().to_string()
            }
        }
    }

    #[test]
    fn every_numeric_flag_refuses_a_negative_value_naming_the_flag() {
        let flags = numeric_flags();
        // The flags of the issue at least: a walk that finds none would pass vacuously.
        for (path, long) in [
            ("worker", "concurrency"),
            ("worker", "visibility"),
            ("worker", "shutdown-timeout"),
            ("stats", "partitions"),
            ("dead ls", "offset"),
            ("ui", "rescan"),
            ("dead redrive", "oldest"),
            ("enqueue", "max-payload"),
            ("configure", "dead-max-len"),
        ] {
            assert!(
                flags.iter().any(|(p, l)| p.join(" ") == path && l == long),
                "{path} --{long} not found among {flags:?}"
            );
        }
        let mut wrong = Vec::new();
        for (path, long) in &flags {
            for value in ["-1", "-5s", "-0.5"] {
                let flag = format!("--{long}");
                let spaced: Vec<&str> = std::iter::once("jobqueue")
                    .chain(path.iter().map(String::as_str))
                    .chain([flag.as_str(), value])
                    .collect();
                let joined_flag = format!("--{long}={value}");
                let joined: Vec<&str> = std::iter::once("jobqueue")
                    .chain(path.iter().map(String::as_str))
                    .chain([joined_flag.as_str()])
                    .collect();
                for args in [spaced, joined] {
                    let text = error_of(&args);
                    let first = text.lines().next().unwrap_or_default();
                    if !(first.contains("must not be negative") && first.contains(&flag)) {
                        wrong.push(format!("{args:?}: {first}"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn a_negative_value_after_a_text_flag_or_after_exec_is_left_alone() {
        let args = |v: &[&str]| -> Vec<OsString> { v.iter().map(OsString::from).collect() };
        let mut cmd = Cli::command();
        cmd.build();
        let exec = args(&[
            "jobqueue",
            "worker",
            "--tag",
            "t",
            "--exec",
            "sort",
            "--concurrency",
            "-1",
        ]);
        assert_eq!(join_negative_values(&cmd, exec.clone()), exec);
        let payload = args(&["jobqueue", "enqueue", "--tag", "t", "--", "--delay", "-1"]);
        assert_eq!(join_negative_values(&cmd, payload.clone()), payload);
        let cli = try_parse_from(["jobqueue", "worker", "--tag", "t", "--exec", "sort", "-1"]);
        assert!(cli.is_ok(), "{:?}", cli.err());
    }

    #[test]
    fn boolean_variables_take_one_convention() {
        for (text, value) in [
            ("true", true),
            ("1", true),
            ("yes", true),
            ("YES", true),
            ("false", false),
            ("0", false),
            ("no", false),
        ] {
            assert_eq!(parse_bool(text), Ok(value), "{text}");
        }
        for text in ["banana", "on", "2", ""] {
            assert!(parse_bool(text).is_err(), "{text}");
        }
        // The flags still work without a value.
        let cli = try_parse_from(["jobqueue", "stats", "--tag", "t", "--cluster"]);
        assert!(cli.is_ok(), "{:?}", cli.err());
    }

    #[test]
    fn a_non_utf8_argument_is_named_with_the_way_to_pass_bytes() {
        use std::os::unix::ffi::OsStringExt;
        let args = [
            OsString::from("jobqueue"),
            OsString::from("enqueue"),
            OsString::from("--tag"),
            OsString::from("t"),
            OsString::from_vec(vec![0xff, b'x']),
        ];
        let text = try_parse_from(args).err().unwrap().render().to_string();
        assert!(
            text.contains("argument 4 (after \"t\") is not valid UTF-8"),
            "{text}"
        );
        assert!(text.contains("--file"), "{text}");
    }
}
