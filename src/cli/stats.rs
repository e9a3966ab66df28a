//! `jobqueue stats`: counts, counters and processing times, once or refreshed.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::Args;

use super::ConnectArgs;
use super::common::{Target, UsageError, note_if_target_absent, open_target, stop_signal};
use super::format::{count, format_latency};
use crate::queue::auto_visibility::VisibilityRecord;
use crate::queue::{PartitionedStats, Queue, QueueSettings, QueueStats};
use std::collections::HashMap;

pub const EXAMPLES: &str = "\
Examples:
  jobqueue stats --redis redis://127.0.0.1:6379 --tag emails
  jobqueue stats --tag emails --watch          # refresh every 2s until Ctrl-C
  jobqueue stats --tag emails --watch 500ms
  jobqueue stats --tag emails --all            # every counter, not only the main ones
  jobqueue stats --tag emails --json | jq .pending
  jobqueue stats --tag emails --partitions 6   # the totals, then one line per partition
  jobqueue stats --tag emails --partitions 6 --partition 2";

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Refresh in place every interval (default 2s) until Ctrl-C.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2s",
          value_parser = super::argv::watch_interval)]
    pub watch: Option<Duration>,
    /// Print JSON (with --watch: one object per line); every counter.
    #[arg(long)]
    pub json: bool,
    /// Show every counter (the reaper's, redrives, purges, orphans, ...), not only the
    /// main ones.
    #[arg(long)]
    pub all: bool,
}

pub async fn run(args: StatsArgs) -> anyhow::Result<()> {
    if args.watch.is_some_and(|every| every.is_zero()) {
        return Err(UsageError("--watch must be above 0 (e.g. --watch 2s)".into()).into());
    }
    let queue = open_target(&args.connect).await?;
    note_if_target_absent(&queue).await?;
    super::common::note_if_partitions_unrecorded(&args.connect, &queue).await;
    let Some(every) = args.watch else {
        print!("{}", read_and_render(&queue, args.json, args.all).await?);
        return Ok(());
    };
    let every = every.max(Duration::from_millis(100));
    let in_place = std::io::stdout().is_terminal() && !args.json;
    let stop = stop_signal();
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tick.tick() => {}
        }
        let text = match read_and_render(&queue, args.json, args.all).await {
            Ok(text) => text,
            // A blip while watching is shown and retried, not fatal.
            Err(err) if err.is_transient() => format!("error: {err} (retrying)\n"),
            Err(err) => return Err(err.into()),
        };
        let mut out = std::io::stdout().lock();
        if in_place {
            // Home, clear the screen, then the table.
            write!(out, "\x1b[H\x1b[2J")?;
            writeln!(
                out,
                "every {}  (Ctrl-C to stop)",
                crate::duration::format(every)
            )?;
        }
        write!(out, "{text}")?;
        if !in_place && !args.json {
            writeln!(out)?;
        }
        out.flush()?;
    }
}

/// One reading: the queue's stats, or the partitions' totals and each partition's.
async fn read_and_render(target: &Target, json: bool, all: bool) -> crate::queue::Result<String> {
    match target {
        Target::One(queue) => {
            let stats = queue.stats().await?;
            let meta = queue.meta_fields().await?;
            Ok(with_visibility(
                render(queue, &stats, json, all),
                &meta,
                json,
            ))
        }
        Target::All(queue) => {
            let stats = queue.stats().await?;
            // every partition is configured alike: the first one's
            let meta = queue.partitions()[0].meta_fields().await?;
            Ok(with_visibility(
                render_partitioned(queue, &stats, json, all),
                &meta,
                json,
            ))
        }
    }
}

/// The totals (as for one queue, named `prefix:{tag} (N partitions)`), then one line per
/// partition: its tag and live counts. JSON: the totals' object with a `partitions`
/// array of each partition's object.
fn render_partitioned(
    queue: &crate::queue::PartitionedQueue,
    stats: &PartitionedStats,
    json: bool,
    all: bool,
) -> String {
    let parts = queue.partitions();
    let endpoint = parts[0].redis().endpoint();
    if json {
        let mut value = to_json_named(queue.name(), &stats.total);
        if let Some(obj) = value.as_object_mut() {
            obj.insert("endpoint".into(), endpoint.into());
            obj.insert("routed".into(), queue.layout().route.clone().into());
            let each: Vec<serde_json::Value> = parts
                .iter()
                .zip(&stats.partitions)
                .enumerate()
                .map(|(i, (q, s))| {
                    let mut v = to_json(q, s);
                    if let Some(o) = v.as_object_mut() {
                        o.insert("partition".into(), i.into());
                    }
                    v
                })
                .collect();
            obj.insert("partitions".into(), each.into());
        }
        return format!("{value}\n");
    }
    let mut out = table(queue.name(), endpoint, &stats.total, all);
    out.push_str("partitions\n");
    out.push_str(&format!(
        "  {:>3}  {:<28}{:>10}{:>11}{:>9}{:>9}{:>10}\n",
        "#", "QUEUE", "PENDING", "PROCESSING", "DELAYED", "DEAD", "ACKED"
    ));
    let routed = &queue.layout().route;
    for (i, (q, s)) in parts.iter().zip(&stats.partitions).enumerate() {
        // A queue of the layout being drained, that new jobs no longer go to.
        let mark = if routed.contains(&i) {
            ""
        } else {
            "  (draining)"
        };
        out.push_str(&format!(
            "  {i:>3}  {:<28}{:>10}{:>11}{:>9}{:>9}{:>10}{mark}\n",
            q.name(),
            s.pending,
            s.processing,
            s.delayed,
            s.dead,
            s.acked
        ));
    }
    out
}

/// The visibility timeout in force and why: a `visibility` section of the table, or a
/// `visibility` object in the JSON (`current_ms`, `mode`, `reason`, `set_by`, ...).
fn with_visibility(rendered: String, meta: &HashMap<String, String>, json: bool) -> String {
    let current = QueueSettings::from_fields(meta).visibility_timeout;
    let record = VisibilityRecord::from_fields(meta);
    if json {
        let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&rendered) else {
            return rendered;
        };
        let mut vis = super::configure::visibility_json(&record);
        vis["current_ms"] = (current.as_millis() as u64).into();
        value["visibility"] = vis;
        return format!("{value}\n");
    }
    let mut out = rendered;
    out.push_str("visibility\n");
    out.push_str(&format!(
        "  {:<22}{}\n",
        "current",
        crate::duration::format(current)
    ));
    out.push_str(&super::configure::visibility_lines(&record));
    out
}

fn render(queue: &Queue, stats: &QueueStats, json: bool, all: bool) -> String {
    if json {
        let mut value = to_json(queue, stats);
        if let Some(obj) = value.as_object_mut() {
            obj.insert("endpoint".into(), queue.redis().endpoint().into());
        }
        format!("{value}\n")
    } else {
        table(queue.name(), queue.redis().endpoint(), stats, all)
    }
}

/// The stats as JSON: every count and counter, the histogram, and p50/p99 in ms.
pub fn to_json(queue: &Queue, stats: &QueueStats) -> serde_json::Value {
    to_json_named(queue.name(), stats)
}

fn to_json_named(name: &str, stats: &QueueStats) -> serde_json::Value {
    let mut value = serde_json::to_value(stats).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("queue".into(), name.into());
        for (name, q) in [("p50_ms", 0.5), ("p99_ms", 0.99)] {
            let ms = stats
                .histogram
                .quantile(q)
                .map(|d| (d.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0);
            obj.insert(name.into(), ms.into());
        }
    }
    value
}

/// The queue's latency, under the counts: how long the next job has waited to be
/// claimed (shown while a job waits).
/// The pending jobs of each priority, highest first, when any is above 0; else nothing.
fn priorities_line(s: &QueueStats) -> String {
    if s.pending_by_priority[1..].iter().all(|&n| n == 0) {
        return String::new();
    }
    let counts: Vec<String> = (0..s.pending_by_priority.len())
        .rev()
        .filter(|&p| s.pending_by_priority[p] > 0)
        .map(|p| format!("p{p} {}", s.pending_by_priority[p]))
        .collect();
    format!("  {:<16}{}\n", "by priority", counts.join(", "))
}

fn oldest_pending_line(s: &QueueStats) -> String {
    if s.pending + s.due == 0 && s.oldest_pending_ms.unwrap_or(0) == 0 {
        return String::new();
    }
    let age = match s.oldest_pending_ms {
        Some(ms) => crate::duration::format(Duration::from_millis(ms)),
        None => "unknown".to_string(),
    };
    format!("  {:<16}{age:>10}\n", "oldest_pending")
}

/// The human table. One `name value` pair per line, so it also greps well. Without
/// `all`, the counts a newcomer reads (and expired, due and orphaned when not 0) and the
/// main counters; `all` (and JSON) has every one.
pub fn table(name: &str, endpoint: &str, s: &QueueStats, all: bool) -> String {
    let mut out = format!("queue {name} on {endpoint}\n");
    if s.paused {
        out.push_str("paused: workers claim nothing until `jobqueue resume` (enqueues go on)\n");
    }
    let mut hidden = 0;
    let mut section = |out: &mut String, title: &str, rows: &[(&str, u64, bool)]| {
        out.push_str(title);
        out.push('\n');
        for (label, value, main) in rows {
            if !all && !main {
                hidden += 1;
                continue;
            }
            out.push_str(&format!("  {label:<16}{value:>10}\n"));
        }
    };
    section(
        &mut out,
        "now",
        &[
            ("pending", s.pending, true),
            ("processing", s.processing, true),
            ("expired", s.expired, s.expired > 0),
            ("delayed", s.delayed, true),
            ("due", s.due, s.due > 0),
            ("dead", s.dead, true),
            ("orphaned", s.orphaned, s.orphaned > 0),
        ],
    );
    out.push_str(&oldest_pending_line(s));
    out.push_str(&priorities_line(s));
    section(
        &mut out,
        "since the queue began",
        &[
            ("enqueued", s.enqueued, true),
            ("claimed", s.claimed, true),
            ("acked", s.acked, true),
            ("failed", s.failed, true),
            ("retried", s.retried, true),
            ("reaped", s.reaped, false),
            ("dead_lettered", s.dead_lettered, true),
            ("dead_trimmed", s.dead_trimmed, false),
            ("stale", s.stale, false),
            ("unknown", s.unknown, false),
            ("redriven", s.redriven, false),
            ("purged", s.purged, false),
            ("orphans", s.orphans, false),
            ("set_aside", s.set_aside, false),
            ("restored", s.restored, false),
            ("restored_purged", s.restored_purged, false),
            ("wrong_type", s.wrong_type, false),
            ("orphans_purged", s.orphans_purged, false),
            ("promoted", s.promoted, false),
            ("rate_limited", s.rate_limited, false),
            ("rate_deferred", s.rate_deferred, false),
            ("run_now", s.run_now, false),
            ("deleted", s.deleted, false),
            ("cancelled", s.cancelled, s.cancelled > 0),
        ],
    );
    out.push_str("processing time of acked jobs\n");
    match (s.histogram.quantile(0.5), s.histogram.quantile(0.99)) {
        (Some(p50), Some(p99)) => {
            out.push_str(&format!("  {:<16}{:>10}\n", "p50", format_latency(p50)));
            out.push_str(&format!("  {:<16}{:>10}\n", "p99", format_latency(p99)));
        }
        _ => out.push_str("  (no acks yet)\n"),
    }
    if hidden > 0 {
        out.push_str(&format!("({hidden} more counters: --all, or --json)\n"));
    }
    // "1 lease has expired and waits", "2 leases have expired and wait".
    let one = |n: u64, one: &'static str, many: &'static str| if n == 1 { one } else { many };
    if s.expired > 0 {
        out.push_str(&format!(
            "note: {} {} expired and {} for a reaper (a worker's, the operator's, or \
             `jobqueue reap`)\n",
            count(s.expired, "lease"),
            one(s.expired, "has", "have"),
            one(s.expired, "waits", "wait"),
        ));
    }
    if s.due > 0 {
        out.push_str(&format!(
            "note: {} {} due and {} to be moved to pending (by a claim or a reaper: a \
             worker's, the operator's, or `jobqueue reap`)\n",
            count(s.due, "delayed job"),
            one(s.due, "is", "are"),
            one(s.due, "waits", "wait"),
        ));
    }
    if s.orphaned > 0 {
        out.push_str(&format!(
            "note: {} {} set aside because {} job hash was absent (a Cluster slot \
             migration, or hashes deleted by hand); a reaper puts each back once its hash is \
             there again. If they stay after any migration has ended, remove them with \
             `jobqueue dead purge --orphans --yes`\n",
            count(s.orphaned, "job id"),
            one(s.orphaned, "is", "are"),
            one(s.orphaned, "its", "their"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Histogram;

    #[test]
    fn the_default_table_is_short_and_says_how_to_see_the_rest() {
        let stats = QueueStats {
            pending: 2,
            reaped: 4,
            ..QueueStats::default()
        };
        let short = table("jq:{emails}", "redis://h:1", &stats, false);
        let rows = short.lines().filter(|l| l.starts_with("  ")).count();
        assert!(rows <= 12, "{rows} rows:\n{short}");
        for hidden in [
            "reaped",
            "stale",
            "wrong_type",
            "restored_purged",
            "expired",
        ] {
            assert!(
                !short.lines().any(|l| l.trim_start().starts_with(hidden)),
                "{hidden} in\n{short}"
            );
        }
        assert!(short.contains("more counters: --all, or --json"), "{short}");
        let full = table("jq:{emails}", "redis://h:1", &stats, true);
        assert!(full.contains("  reaped                   4"), "{full}");
        assert!(!full.contains("more counters"), "{full}");
        // Expired leases are shown when there are some.
        let expired = QueueStats {
            expired: 1,
            ..QueueStats::default()
        };
        let short = table("jq:{emails}", "redis://h:1", &expired, false);
        assert!(short.contains("  expired                  1"), "{short}");
    }

    #[test]
    fn the_table_has_one_pair_per_line() {
        let stats = QueueStats {
            pending: 12,
            processing: 3,
            acked: 40,
            histogram: Histogram {
                buckets: [(3, 40)].into_iter().collect(),
            },
            ..QueueStats::default()
        };
        let text = table("jq:{emails}", "redis://h:1", &stats, true);
        let value = |label: &str| {
            text.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|w| w.first() == Some(&label))
                .map(|w| w[1].to_string())
        };
        assert_eq!(value("pending").as_deref(), Some("12"));
        assert_eq!(value("processing").as_deref(), Some("3"));
        assert_eq!(value("acked").as_deref(), Some("40"));
        assert!(value("p50").unwrap().ends_with("ms"), "{text}");
        assert!(!text.contains("note:"), "{text}");
        let expired = QueueStats {
            expired: 2,
            ..QueueStats::default()
        };
        let text = table("jq:{emails}", "redis://h:1", &expired, true);
        assert!(
            text.contains("no acks yet") && text.contains("2 leases"),
            "{text}"
        );
    }

    #[test]
    fn due_and_orphaned_jobs_are_shown_with_what_to_do() {
        let stats = QueueStats {
            delayed: 5,
            due: 2,
            orphaned: 3,
            set_aside: 4,
            restored: 1,
            promoted: 7,
            ..QueueStats::default()
        };
        let text = table("jq:{emails}", "redis://h:1", &stats, true);
        for (label, value) in [
            ("delayed", "5"),
            ("due", "2"),
            ("orphaned", "3"),
            ("set_aside", "4"),
            ("restored", "1"),
            ("promoted", "7"),
        ] {
            let line = format!("  {label:<16}{value:>10}");
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(text.contains("note: 2 delayed jobs are due"), "{text}");
        let one = QueueStats {
            expired: 1,
            due: 1,
            orphaned: 1,
            ..QueueStats::default()
        };
        let singular = table("jq:{emails}", "redis://h:1", &one, true);
        for note in [
            "note: 1 lease has expired and waits for a reaper",
            "note: 1 delayed job is due and waits",
            "note: 1 job id is set aside because its job hash",
        ] {
            assert!(singular.contains(note), "no {note:?} in\n{singular}");
        }
        assert!(
            text.contains("note: 3 job ids are set aside")
                && text.contains("`jobqueue dead purge --orphans --yes`"),
            "{text}"
        );
    }
}
