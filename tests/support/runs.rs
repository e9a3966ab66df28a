//! The workers' own records of what they ran, and the figures the chaos tallies take
//! from them (never from the queue's counters, which live in Redis and lose increments
//! in a failover like any other write).
//!
//! The handler of [`command`] runs under `jobqueue worker --exec` and appends one line
//! per event of a run to a file of its worker's own, `$CHAOS_RUNS/<worker id>.runs`:
//!
//! ```text
//! S <unix time> <attempt> <seconds of work> <job id bytes…>   the run started
//! E <unix time> <attempt> <seconds of work> <job id bytes…>   the command reached its end
//! T <unix time> <attempt> <seconds of work> <job id bytes…>   it was sent SIGTERM (lease lost, shutdown)
//! ```
//!
//! The id is the rest of the line, its bytes as they are (ids need not be UTF-8; the
//! workloads use none with a newline). A run killed with SIGKILL (its worker SIGKILLed,
//! or the kill grace after a SIGTERM it ignored) writes no end: it ended by the time the
//! test recorded its worker's kill ([`note_kill`], in `kills.log` of the same directory),
//! and in any case no later than its start plus its seconds of work.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The environment variable that names the directory of the run records (the
/// handler's text spells it out).
pub const RUNS_ENV: &str = "CHAOS_RUNS";

/// What the handler does with a payload `<kind> <seconds>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// `sleep <seconds>` in the foreground.
    Sleep,
    /// `sleep <seconds> | cat &` and `wait`: the work runs in grandchildren of the
    /// worker, none of them its direct child.
    Grandchildren,
    /// As `Sleep`, then `done <job id>` on stdout: the job's result.
    Echo,
}

/// The handler's command: `bash -c` and [`handler`] (bash for `$EPOCHREALTIME`: the
/// time of a record is read without starting a process, which a signal to the job's
/// process group could kill half-way).
pub fn command(work: Work) -> Vec<String> {
    vec!["bash".into(), "-c".into(), handler(work)]
}

/// The handler's script: reads `<kind> <seconds>` from stdin and records the run;
/// `poison` exits with the dead-letter code (99), `flaky` fails its first attempt,
/// anything else works for `<seconds>` and succeeds.
pub fn handler(work: Work) -> String {
    let work = match work {
        Work::Sleep => "sleep \"$secs\"",
        Work::Grandchildren => "sleep \"$secs\" | cat &\nwait",
        Work::Echo => "sleep \"$secs\"\nprintf 'done %s' \"$JOBQUEUE_JOB_ID\"",
    };
    format!(
        r#"read kind secs
rec() {{ printf '%s %s %s %s %s\n' "$1" "$EPOCHREALTIME" "$JOBQUEUE_ATTEMPT" "$secs" "$JOBQUEUE_JOB_ID" >> "$CHAOS_RUNS/$JOBQUEUE_WORKER_ID.runs"; }}
rec S
trap 'rec T; exit 143' TERM
case "$kind" in
  poison) echo "poison payload" >&2; rec E; exit 99 ;;
  flaky) if [ "$JOBQUEUE_ATTEMPT" = 1 ]; then echo "flaky first attempt" >&2; rec E; exit 1; fi ;;
esac
{work}
rec E
"#
    )
}

/// Now, in seconds since the epoch (the clock of the handler's `$EPOCHREALTIME`).
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Note that the test SIGKILLed `worker` now: its runs without an end ended by then.
pub fn note_kill(dir: &Path, worker: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("kills.log"))
        .unwrap();
    writeln!(f, "{worker} {}", now()).unwrap();
}

/// Record a run made by the test itself (not through a worker), as one that started
/// and ended now.
pub fn note_own_run(dir: &Path, worker: &str, id: &[u8], attempt: u32) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{worker}.runs")))
        .unwrap();
    let t = now();
    for tag in [b'S', b'E'] {
        let mut line = format!("{} {t} {attempt} 0 ", tag as char).into_bytes();
        line.extend_from_slice(id);
        line.push(b'\n');
        f.write_all(&line).unwrap();
    }
}

/// How a run ended, as far as its records tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The command reached its end (success, failure or dead-letter exit).
    Finished,
    /// It was sent SIGTERM.
    Terminated,
    /// No record: SIGKILLed (with its worker, or after the kill grace).
    Killed,
}

/// One run of a job by one worker process.
#[derive(Clone, Debug)]
pub struct Run {
    pub worker: String,
    pub id: Vec<u8>,
    pub attempt: u32,
    pub start: f64,
    /// The recorded end, or the latest it can have been (the worker's kill, else the
    /// start plus the seconds of work).
    pub end: f64,
    pub how: End,
    /// The command read no payload from its stdin: its worker died before writing it
    /// (the command, started just before, is killed with the worker's jobs).
    pub no_payload: bool,
}

/// Every run recorded in `dir`, from the workers' files.
pub fn read(dir: &Path) -> Vec<Run> {
    let kills = kills(dir);
    let mut runs = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return runs;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(worker) = name.strip_suffix(".runs") else {
            continue;
        };
        let text = std::fs::read(entry.path()).unwrap_or_default();
        // This worker's runs in the order they started, each with whether it is still
        // open (no end recorded yet).
        let mut mine: Vec<(Run, bool)> = Vec::new();
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let mut parts = line.splitn(5, |&b| b == b' ');
            let (Some(tag), Some(t), Some(attempt), Some(secs), Some(id)) = (
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
            ) else {
                panic!(
                    "{name}: unreadable record {:?}",
                    String::from_utf8_lossy(line)
                );
            };
            let num = |b: &[u8]| -> f64 {
                std::str::from_utf8(b)
                    .ok()
                    .and_then(|t| t.replace(',', ".").parse().ok())
                    .unwrap_or_else(|| {
                        panic!(
                            "{name}: unreadable record {:?}",
                            String::from_utf8_lossy(line)
                        )
                    })
            };
            // A command that read no payload (its worker was killed before writing it)
            // records no seconds of work.
            let no_payload = secs.is_empty();
            let (t, attempt) = (num(t), num(attempt) as u32);
            let secs = if no_payload { 0.0 } else { num(secs) };
            match tag {
                b"S" => mine.push((
                    Run {
                        worker: worker.to_string(),
                        id: id.to_vec(),
                        attempt,
                        start: t,
                        end: t + secs,
                        how: End::Killed,
                        no_payload,
                    },
                    true,
                )),
                b"E" | b"T" => {
                    if let Some((run, open)) = mine
                        .iter_mut()
                        .find(|(r, open)| *open && r.id == id && r.attempt == attempt)
                    {
                        run.end = t;
                        run.how = if tag == b"E" {
                            End::Finished
                        } else {
                            End::Terminated
                        };
                        *open = false;
                    }
                }
                other => panic!(
                    "{name}: unknown record {:?}",
                    String::from_utf8_lossy(other)
                ),
            }
        }
        for (mut run, open) in mine {
            if open && let Some(&killed) = kills.get(worker) {
                run.end = run.end.min(killed.max(run.start));
            }
            runs.push(run);
        }
    }
    runs
}

/// The workers the test SIGKILLed ([`note_kill`]), each with when.
pub fn kills(dir: &Path) -> HashMap<String, f64> {
    let text = std::fs::read_to_string(dir.join("kills.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (w, t) = l.split_once(' ')?;
            Some((w.to_string(), t.parse().ok()?))
        })
        .collect()
}

/// The runs of each job.
pub fn by_job(runs: &[Run]) -> HashMap<Vec<u8>, Vec<&Run>> {
    let mut map: HashMap<Vec<u8>, Vec<&Run>> = HashMap::new();
    for run in runs {
        map.entry(run.id.clone()).or_default().push(run);
    }
    map
}

/// Pairs of runs of one job that overlapped for longer than `grace`: two workers (or
/// two leases of one worker) running the job at once past the documented bound. Returns
/// one line per pair, and the longest overlap seen between two runs of a job.
pub fn overlaps_beyond(runs: &[Run], grace: Duration) -> (Vec<String>, Duration) {
    let mut beyond = Vec::new();
    let mut longest = 0f64;
    for (id, runs) in by_job(runs) {
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let overlap = a.end.min(b.end) - a.start.max(b.start);
                longest = longest.max(overlap);
                if overlap > grace.as_secs_f64() {
                    beyond.push(format!(
                        "{}: attempt {} on {} ({:?}) and attempt {} on {} ({:?}) ran {:.3} s side by side (grace {grace:?})",
                        show(&id),
                        a.attempt,
                        a.worker,
                        a.how,
                        b.attempt,
                        b.worker,
                        b.how,
                        overlap
                    ));
                }
            }
        }
    }
    (beyond, Duration::from_secs_f64(longest.max(0.0)))
}

/// An id for a message: its text (escaped where it is not UTF-8), cut after 40 bytes.
pub fn show(id: &[u8]) -> String {
    let cut = &id[..id.len().min(40)];
    let text: String = cut.escape_ascii().to_string();
    if id.len() > 40 {
        format!("{text}… ({} bytes)", id.len())
    } else {
        text
    }
}
