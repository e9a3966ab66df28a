//! The history of every write a redis-server made, read back from its append-only file:
//! an oracle for the chaos scenarios that is none of the queue's own records. Redis 7
//! logs each script's writes (its effects) as the commands it called, a script of more
//! than one write between `MULTI` and `EXEC`, in the order they were applied, and keeps
//! appending to the same file after a SIGKILL and a restart. So the history holds every
//! lease ever made (the `claim_token` a claim writes into its job's hash), every job made
//! and ended, every lock taken and released, each step in the order Redis applied it,
//! and can be replayed to check what held between two steps.
//!
//! The server must run with `--appendonly yes` and no automatic rewrite
//! ([`ARGS`]): a rewrite folds the history into a snapshot.

use std::path::Path;

/// The server's arguments that keep the whole history (the `appendfsync` policy is the
/// scenario's: `always` where Redis is SIGKILLed).
pub const ARGS: [&str; 4] = ["--appendonly", "yes", "--auto-aof-rewrite-percentage", "0"];

/// One command: its name (upper case) and its arguments.
pub type Command = Vec<Vec<u8>>;

/// The steps Redis applied, in order: each a script's writes (`MULTI` … `EXEC`, both
/// left out) or one command alone. A transaction cut short by a SIGKILL is left out (Redis
/// drops it at the restart, as it does with a command cut short).
pub fn steps(dir: &Path) -> Vec<Vec<Command>> {
    let mut steps = Vec::new();
    for file in incr_files(dir) {
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        // A transaction open at the end of a file was cut short: the restart dropped it.
        let mut open: Option<Vec<Command>> = None;
        for mut cmd in parse(&bytes) {
            cmd[0].make_ascii_uppercase();
            match cmd[0].as_slice() {
                b"MULTI" => open = Some(Vec::new()),
                b"EXEC" => steps.extend(open.take()),
                b"SELECT" => {}
                _ => match open.as_mut() {
                    Some(tx) => tx.push(cmd),
                    None => steps.push(vec![cmd]),
                },
            }
        }
    }
    steps
}

/// The incremental files of the AOF in `dir` (`appendonlydir`), in the manifest's order.
/// Panics when the history was rewritten (a base other than the first).
fn incr_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let aof = dir.join("appendonlydir");
    let manifest = std::fs::read_dir(&aof)
        .unwrap_or_else(|e| panic!("{aof:?}: {e} (is the server run with --appendonly yes?)"))
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".manifest"))
        .expect("an AOF manifest");
    let text = std::fs::read_to_string(manifest.path()).unwrap();
    let mut files = Vec::new();
    for line in text.lines() {
        // file <name> seq <n> type <b|h|i>
        let words: Vec<&str> = line.split_whitespace().collect();
        let field = |name: &str| {
            words
                .iter()
                .position(|w| *w == name)
                .and_then(|i| words.get(i + 1).copied())
        };
        match (field("file"), field("seq"), field("type")) {
            (Some(_), Some(seq), Some("b")) => assert_eq!(
                seq, "1",
                "the AOF was rewritten ({line}): the history is folded into a snapshot"
            ),
            (Some(name), Some(_), Some("i")) => files.push(aof.join(name)),
            _ => {}
        }
    }
    assert!(!files.is_empty(), "no incremental AOF file in {text}");
    files
}

/// The commands of RESP arrays of bulk strings; a command cut short at the end is left out.
fn parse(bytes: &[u8]) -> Vec<Command> {
    let mut out = Vec::new();
    let mut at = 0;
    'commands: while at < bytes.len() {
        let Some((n, next)) = header(bytes, at, b'*') else {
            break;
        };
        at = next;
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let Some((len, next)) = header(bytes, at, b'$') else {
                break 'commands;
            };
            if next + len + 2 > bytes.len() {
                break 'commands;
            }
            cmd.push(bytes[next..next + len].to_vec());
            at = next + len + 2;
        }
        if !cmd.is_empty() {
            out.push(cmd);
        }
    }
    out
}

/// `<kind><digits>\r\n` at `at`: the number and where the next item starts.
fn header(bytes: &[u8], at: usize, kind: u8) -> Option<(usize, usize)> {
    if bytes.get(at) != Some(&kind) {
        return None;
    }
    let end = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
    let n = std::str::from_utf8(&bytes[at + 1..end])
        .ok()?
        .parse()
        .ok()?;
    Some((n, end + 2))
}

/// The field-value pairs of a hash write (`HSET`/`HMSET key f v …`) to `key`.
pub fn hash_fields<'a>(cmd: &'a Command, key: &[u8]) -> Vec<(&'a [u8], &'a [u8])> {
    if !matches!(cmd[0].as_slice(), b"HSET" | b"HMSET")
        || cmd.get(1).map(Vec::as_slice) != Some(key)
    {
        return Vec::new();
    }
    cmd[2..]
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].as_slice(), c[1].as_slice()))
        .collect()
}

/// One lease a claim (or settle_claim's claim part) made: a `claim_token` written into
/// a job's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The job's id.
    pub id: Vec<u8>,
    /// The step of [`steps`] that made it.
    pub step: usize,
    /// When it was claimed (ms, the Redis clock), from the token.
    pub at_ms: i64,
    pub token: Vec<u8>,
}

/// Every lease in `steps` on jobs whose keys start with `job_prefix` (`P:{T}:job:`).
pub fn leases(steps: &[Vec<Command>], job_prefix: &[u8]) -> Vec<Lease> {
    let mut out = Vec::new();
    for (step, cmds) in steps.iter().enumerate() {
        for cmd in cmds {
            let Some(id) = cmd
                .get(1)
                .and_then(|k| k.strip_prefix(job_prefix))
                .filter(|_| matches!(cmd[0].as_slice(), b"HSET" | b"HMSET"))
            else {
                continue;
            };
            for (field, value) in hash_fields(cmd, &cmd[1]) {
                if field == b"claim_token" {
                    let at_ms = value
                        .split(|&b| b == b':')
                        .next()
                        .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
                        .unwrap_or_else(|| {
                            panic!("a claim_token without its claim time: {value:?}")
                        });
                    out.push(Lease {
                        id: id.to_vec(),
                        step,
                        at_ms,
                        token: value.to_vec(),
                    });
                }
            }
        }
    }
    out
}
