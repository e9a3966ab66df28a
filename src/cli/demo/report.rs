//! What `jobqueue demo` shows: the live progress line while it runs, and at the end the
//! tally of where every job went and the check that none was lost or acked twice.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::MAX_ATTEMPTS;
use super::worker::DemoJob;
use crate::cli::format::format_latency;
use crate::queue::{Queue, QueueStats};

pub(super) fn progress(
    s: &QueueStats,
    total: u64,
    workers: usize,
    killed: u64,
    started: Instant,
) -> String {
    let finished = s.acked + s.dead;
    let width = 20usize;
    let filled = ((finished as f64 / total.max(1) as f64) * width as f64).round() as usize;
    let bar: String = "#".repeat(filled.min(width)) + &"-".repeat(width - filled.min(width));
    format!(
        "[{bar}] {:>5.1}s  pending {:>6}  processing {:>3}  done {:>6}  dead {:>3}  reaped {:>3}  workers {workers} (killed {killed})",
        started.elapsed().as_secs_f64(),
        s.pending + s.delayed,
        s.processing,
        s.acked,
        s.dead,
        s.reaped
    )
}

/// Tally where every job ended, print the summary, and fail when a job was lost or
/// acked twice.
pub(super) async fn check(
    queue: &Queue,
    jobs: &[DemoJob],
    ids: &[String],
    stats: &QueueStats,
    killed: u64,
    elapsed: Duration,
) -> anyhow::Result<()> {
    let tally = tally(queue, jobs, ids).await?;
    println!();
    print!("{}", summary(&tally, stats, killed, elapsed));
    if tally.lost() > 0 || tally.acked_twice(stats) > 0 {
        bail!(
            "{} jobs lost, {} acked twice: the queue broke its promise",
            tally.lost(),
            tally.acked_twice(stats)
        );
    }
    Ok(())
}

/// Where every enqueued job ended, read job by job (not from the counters).
#[derive(Debug, Default, PartialEq)]
struct Tally {
    enqueued: u64,
    done: u64,
    dead: u64,
    /// Dead although not one of the jobs that fail on purpose.
    dead_unplanned: u64,
    /// Jobs claimed more than once because a worker died holding them.
    reran: u64,
    missing: Vec<String>,
}

impl Tally {
    fn lost(&self) -> u64 {
        self.enqueued - self.done - self.dead
    }

    /// More successful acks than done jobs would mean a job was acked twice.
    fn acked_twice(&self, stats: &QueueStats) -> u64 {
        stats.acked.saturating_sub(self.done)
    }
}

async fn tally(queue: &Queue, jobs: &[DemoJob], ids: &[String]) -> anyhow::Result<Tally> {
    let mut tally = Tally {
        enqueued: ids.len() as u64,
        ..Tally::default()
    };
    let mut conn = queue.redis().clone();
    for (chunk_jobs, chunk_ids) in jobs.chunks(1000).zip(ids.chunks(1000)) {
        let mut pipe = redis::pipe();
        for id in chunk_ids {
            pipe.cmd("HMGET")
                .arg(queue.keys().job(id))
                .arg("status")
                .arg("attempts");
        }
        let rows: Vec<(Option<String>, Option<u32>)> = pipe
            .query_async(&mut conn)
            .await
            .context("reading the jobs back")?;
        for ((job, id), (status, attempts)) in chunk_jobs.iter().zip(chunk_ids).zip(rows) {
            let attempts = attempts.unwrap_or(0);
            match status.as_deref() {
                Some("done") => tally.done += 1,
                Some("dead") => {
                    tally.dead += 1;
                    if !job.fails {
                        tally.dead_unplanned += 1;
                    }
                }
                _ => {
                    tally.missing.push(id.clone());
                    continue;
                }
            }
            // A failing job is claimed MAX_ATTEMPTS times by design; more is a crash.
            let planned = if job.fails { MAX_ATTEMPTS } else { 1 };
            if attempts > planned {
                tally.reran += 1;
            }
        }
    }
    Ok(tally)
}

fn summary(t: &Tally, s: &QueueStats, killed: u64, elapsed: Duration) -> String {
    let mut out = format!("finished in {:.1}s\n", elapsed.as_secs_f64());
    let mut row = |label: &str, value: String, note: &str| {
        let line = format!("  {label:<20}{value:>10}  {note}");
        out.push_str(line.trim_end());
        out.push('\n');
    };
    row("enqueued", t.enqueued.to_string(), "");
    row("done", t.done.to_string(), "acked by a worker");
    let dead_note = if t.dead_unplanned > 0 {
        format!(
            "{} failing on purpose, {} crashed {MAX_ATTEMPTS} times",
            t.dead - t.dead_unplanned,
            t.dead_unplanned
        )
    } else {
        format!("failing on purpose: {MAX_ATTEMPTS} attempts, then the dead-letter set")
    };
    row("dead", t.dead.to_string(), &dead_note);
    let lost_note = if t.lost() == 0 {
        "enqueued = done + dead: every job accounted for".to_string()
    } else {
        format!("never finished: {}", t.missing.join(", "))
    };
    row("lost", t.lost().to_string(), &lost_note);
    row(
        "workers killed",
        killed.to_string(),
        "SIGKILL while holding a job",
    );
    row(
        "leases reaped",
        s.reaped.to_string(),
        "expired leases of dead workers, put back by the reaper",
    );
    row(
        "ran more than once",
        t.reran.to_string(),
        "at-least-once: their worker died before the ack",
    );
    row(
        "acked twice",
        t.acked_twice(s).to_string(),
        "a lease is fenced by its token",
    );
    if let (Some(p50), Some(p99)) = (s.histogram.quantile(0.5), s.histogram.quantile(0.99)) {
        row(
            "processing p50/p99",
            format!("{}/{}", format_latency(p50), format_latency(p99)),
            "",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_every_job() {
        let tally = Tally {
            enqueued: 10,
            done: 8,
            dead: 2,
            reran: 1,
            ..Tally::default()
        };
        let stats = QueueStats {
            acked: 8,
            reaped: 1,
            ..QueueStats::default()
        };
        let text = summary(&tally, &stats, 3, Duration::from_secs(2));
        let value = |label: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(label))
                .and_then(|l| l[label.len() + 2..].split_whitespace().next())
                .map(str::to_string)
        };
        assert_eq!(value("lost").as_deref(), Some("0"), "{text}");
        assert_eq!(value("workers killed").as_deref(), Some("3"), "{text}");
        assert_eq!(value("acked twice").as_deref(), Some("0"), "{text}");
        let lost = Tally {
            done: 7,
            missing: vec!["job-0000003".into()],
            ..tally
        };
        let text = summary(&lost, &stats, 3, Duration::from_secs(2));
        assert!(text.contains("never finished: job-0000003"), "{text}");
        assert_eq!(lost.acked_twice(&stats), 1);
    }
}
