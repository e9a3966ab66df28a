//! What keeps the console honest while Redis is in trouble: how old each queue's counts
//! are, the health rule of a queue (a pure function of its reading), the outage every
//! page shows at its top, and the health of the Redis servers themselves (memory and its
//! limit, the eviction policy, persistence, clients), read with `INFO` and `CONFIG GET`.
//!
//! The refresher keeps, per queue, when its last `stats` reply arrived and the Redis
//! clock it carried; requests compute ages from those at the time they are served, so a
//! hung Redis shows as counts growing old, not as the last counts still looking fresh.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::source::KubeInfo;
use crate::queue::{Queue, QueueStats};

/// A health note: `warn` or `bad`, and what it means.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    pub level: &'static str,
    pub text: String,
}

fn note(level: &'static str, text: String) -> Health {
    Health { level, text }
}

/// The limits of the health rule.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// How far back growth is measured (the history's length).
    pub window: Duration,
    /// Counts older than this are stale: Redis is slow or not answering.
    pub stale_after: Duration,
    /// Dead jobs from this many on are `bad` (from 1, `warn`).
    pub dead_bad: u64,
    /// The oldest pending job's age from which the queue is `warn`, and `bad`.
    pub oldest_warn: Duration,
    pub oldest_bad: Duration,
}

impl Rules {
    /// The rules of a console refreshing every `refresh`, its history `window` long.
    pub fn new(refresh: Duration, window: Duration) -> Rules {
        Rules {
            window,
            stale_after: stale_after(refresh),
            dead_bad: 1000,
            oldest_warn: Duration::from_secs(60),
            oldest_bad: Duration::from_secs(15 * 60),
        }
    }
}

/// How old counts may grow before they are stale: two refreshes and three seconds (a
/// refresh in flight takes a moment; a hung Redis shows within a few seconds).
pub fn stale_after(refresh: Duration) -> Duration {
    refresh * 2 + Duration::from_secs(3)
}

/// How long one `stats` call or one probe of a Redis may take before it counts as not
/// answered: twice the refresh, from 2 to 10 seconds.
pub fn call_timeout(refresh: Duration) -> Duration {
    (refresh * 2).clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// One queue's reading, as the health rule sees it.
pub struct Reading<'a> {
    pub stats: Option<&'a QueueStats>,
    /// Why the last read failed, when it did.
    pub error: Option<&'a str>,
    /// How old the counts are (`None`: never read).
    pub age: Option<Duration>,
    pub history: &'a std::collections::VecDeque<Sample>,
}

impl<'a> Reading<'a> {
    pub fn of(entry: &'a Entry, now: Instant) -> Reading<'a> {
        Reading {
            stats: entry.stats.as_ref(),
            error: entry.error.as_deref(),
            age: entry.read_at.map(|at| now.saturating_duration_since(at)),
            history: &entry.history,
        }
    }
}

/// The health rule: the notes of one queue, worst first; none means healthy.
///
/// `bad`: never read, the last read failed, the counts are stale, dead jobs from
/// `dead_bad` on, the oldest pending job older than `oldest_bad`. `warn`: dead jobs
/// (any), dead letters growing over the window, expired leases waiting for a reaper, the
/// oldest pending job older than `oldest_warn` (or of unknown age), acks after their
/// lease was taken away, orphaned ids.
pub fn health_of(r: &Reading, rules: &Rules) -> Vec<Health> {
    let mut out = Vec::new();
    if let Some(e) = r.error {
        out.push(note("bad", format!("last read failed: {e}")));
    }
    let Some(s) = r.stats else {
        out.push(note("bad", "not read".into()));
        return out;
    };
    if let Some(age) = r.age
        && age > rules.stale_after
    {
        out.push(note(
            "bad",
            format!(
                "stale: no reading for {} (Redis slow or not answering)",
                fmt(age)
            ),
        ));
    }
    let grew = |f: fn(&Sample) -> u64| -> u64 {
        match (r.history.front(), r.history.back()) {
            (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
            _ => 0,
        }
    };
    let over = fmt(rules.window);
    let mut warn = Vec::new();
    if s.dead >= rules.dead_bad {
        out.push(note(
            "bad",
            format!("{} dead jobs wait for a redrive or a purge", s.dead),
        ));
    } else if s.dead > 0 {
        warn.push(note(
            "warn",
            format!("{} dead jobs wait for a redrive or a purge", s.dead),
        ));
    }
    let dead = grew(|x| x.dead_lettered);
    if dead > 0 {
        warn.push(note(
            "warn",
            format!("dead letters growing: {dead} in the last {over}"),
        ));
    }
    if s.expired > 0 {
        warn.push(note(
            "warn",
            format!("{} expired leases wait for a reaper", s.expired),
        ));
    }
    match s.oldest_pending_ms.map(Duration::from_millis) {
        Some(age) if age >= rules.oldest_bad => out.push(note(
            "bad",
            format!("the oldest pending job has waited {}", fmt(age)),
        )),
        Some(age) if age >= rules.oldest_warn => warn.push(note(
            "warn",
            format!("the oldest pending job has waited {}", fmt(age)),
        )),
        None if s.pending > 0 => warn.push(note(
            "warn",
            "the oldest pending job's age is not known (enqueued by an earlier release)".into(),
        )),
        _ => {}
    }
    let stale = grew(|x| x.stale);
    if stale > 0 {
        warn.push(note(
            "warn",
            format!(
                "lease too short: {stale} acks arrived after their lease was taken away in the last {over}"
            ),
        ));
    }
    if s.orphaned > 0 {
        warn.push(note(
            "warn",
            format!("{} orphaned ids set aside", s.orphaned),
        ));
    }
    out.extend(warn);
    out
}

/// A duration as the pages show it.
pub fn fmt(d: Duration) -> String {
    crate::duration::format(Duration::from_millis(d.as_millis() as u64))
}

/// What is wrong right now, for the banner at the top of every page: `None` when
/// nothing is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outage {
    /// One line per problem, the worst first.
    pub problems: Vec<String>,
    /// Queues whose counts are stale, failed or never read, of `total`.
    pub affected: usize,
    pub total: usize,
}

/// The outage the snapshot shows at `now`: the queues could not be listed, a Redis
/// did not answer its probe, queues failed to be read or their counts are stale.
/// `started`: when the console started (a queue not read yet counts once the console
/// has run longer than `stale_after`).
pub fn outage(snap: &Snapshot, now: Instant, started: Instant, rules: &Rules) -> Option<Outage> {
    let mut problems = Vec::new();
    if let Some(e) = &snap.error {
        problems.push(format!("the queues cannot be listed: {e}"));
    }
    for r in snap.redis.values() {
        if let Some(e) = &r.error {
            problems.push(format!("Redis {}: {e}", r.endpoint));
        }
    }
    let warming = now.saturating_duration_since(started) <= rules.stale_after;
    let (mut failed, mut stale, mut unread) = (0, 0, 0);
    let mut first_error = None;
    let mut oldest = Duration::ZERO;
    for e in snap.entries.values() {
        let age = e.read_at.map(|at| now.saturating_duration_since(at));
        if let Some(err) = &e.error {
            failed += 1;
            first_error.get_or_insert_with(|| format!("{}: {err}", e.id));
        } else if let Some(age) = age {
            if age > rules.stale_after {
                stale += 1;
                oldest = oldest.max(age);
            }
        } else if !warming {
            unread += 1;
        }
    }
    let total = snap.entries.len();
    if failed > 0 {
        problems.push(format!(
            "{failed} of {total} queues could not be read (first: {})",
            first_error.unwrap_or_default()
        ));
    }
    if stale > 0 {
        problems.push(format!(
            "{stale} of {total} queues show counts older than {} (the oldest {} old): Redis is slow or not answering",
            fmt(rules.stale_after),
            fmt(oldest)
        ));
    }
    if unread > 0 {
        problems.push(format!("{unread} of {total} queues not read yet"));
    }
    (!problems.is_empty()).then_some(Outage {
        problems,
        affected: failed + stale + unread,
        total,
    })
}

/// One Redis server as its last probe saw it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RedisHealth {
    /// The redacted endpoint.
    pub endpoint: String,
    /// Why the probe got no answer (the outage banner says so).
    pub error: Option<String>,
    /// The Redis clock when probed (ms).
    pub time_ms: Option<i64>,
    #[serde(skip)]
    pub probed_at: Option<Instant>,
    pub version: Option<String>,
    pub used_memory: Option<u64>,
    /// `maxmemory`: 0 is no limit.
    pub maxmemory: Option<u64>,
    pub maxmemory_policy: Option<String>,
    pub connected_clients: Option<u64>,
    pub blocked_clients: Option<u64>,
    pub aof_enabled: Option<bool>,
    /// `CONFIG GET save`: the RDB snapshot schedule ("" is none).
    pub save: Option<String>,
    pub appendfsync: Option<String>,
    pub rdb_last_bgsave_status: Option<String>,
    pub aof_last_write_status: Option<String>,
    pub rdb_changes_since_last_save: Option<u64>,
    /// What could not be read, and why (`INFO` or `CONFIG GET` refused for this ACL
    /// user): said, not a failure.
    pub notes: Vec<String>,
    pub warnings: Vec<Health>,
}

/// `INFO`'s `field:value` lines.
pub fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

impl RedisHealth {
    /// Fill the facts `INFO` gives.
    pub fn with_info(mut self, info: &BTreeMap<String, String>) -> RedisHealth {
        let num = |k: &str| info.get(k).and_then(|v| v.parse::<u64>().ok());
        let text = |k: &str| info.get(k).cloned();
        self.version = text("valkey_version").or_else(|| text("redis_version"));
        self.used_memory = num("used_memory");
        self.maxmemory = num("maxmemory");
        self.maxmemory_policy = text("maxmemory_policy");
        self.connected_clients = num("connected_clients");
        self.blocked_clients = num("blocked_clients");
        self.aof_enabled = num("aof_enabled").map(|v| v == 1);
        self.rdb_last_bgsave_status = text("rdb_last_bgsave_status");
        self.aof_last_write_status = text("aof_last_write_status");
        self.rdb_changes_since_last_save = num("rdb_changes_since_last_save");
        self
    }
}

/// The warnings of one Redis: an eviction policy other than `noeviction` (Redis may
/// delete queue keys to make room: jobs lost), memory near its limit, no persistence at
/// all, a failed snapshot or AOF write.
pub fn redis_warnings(r: &RedisHealth) -> Vec<Health> {
    let mut out = Vec::new();
    if let Some(policy) = &r.maxmemory_policy
        && policy != "noeviction"
    {
        out.push(note(
            "bad",
            format!(
                "maxmemory-policy is {policy}: at its memory limit Redis evicts keys, jobs \
                 included (set noeviction: writes are then refused, nothing is lost)"
            ),
        ));
    }
    if let (Some(used), Some(max)) = (r.used_memory, r.maxmemory)
        && max > 0
    {
        let share = used as f64 / max as f64;
        if share >= 0.8 {
            out.push(note(
                if share >= 0.95 { "bad" } else { "warn" },
                format!(
                    "memory {:.0}% of maxmemory: enqueues fail (or keys are evicted) at the limit",
                    share * 100.0
                ),
            ));
        }
    }
    if r.aof_enabled == Some(false) && r.save.as_deref() == Some("") {
        out.push(note(
            "warn",
            "no persistence (no RDB snapshots, no AOF): a restart loses every job".into(),
        ));
    }
    if r.rdb_last_bgsave_status.as_deref() == Some("err") {
        out.push(note("bad", "the last RDB snapshot failed".into()));
    }
    if r.aof_last_write_status.as_deref() == Some("err") {
        out.push(note("bad", "the last AOF write failed".into()));
    }
    out
}

/// Probe the Redis of `queue` (on a Cluster, the node of its slot): `TIME` says it
/// answers (within `timeout`), `INFO` and `CONFIG GET` what it is like. A command the
/// ACL user may not run is noted, not a failure.
pub async fn probe(queue: &Queue, timeout: Duration) -> RedisHealth {
    let redis = queue.redis();
    let key = queue.keys().meta.clone();
    let mut out = RedisHealth {
        endpoint: redis.endpoint().to_string(),
        probed_at: Some(Instant::now()),
        ..RedisHealth::default()
    };
    let run = |cmd: redis::Cmd| {
        let key = key.clone();
        async move { tokio::time::timeout(timeout, redis.query_on_node_of(&key, cmd)).await }
    };
    match run(redis::cmd("TIME")).await {
        Err(_) => {
            out.error = Some(format!("no answer within {}", fmt(timeout)));
            return out;
        }
        Ok(Err(e)) if e.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => {
            out.error = Some(e.to_string());
            return out;
        }
        Ok(Err(_)) => out.notes.push("TIME: not allowed for this user".into()),
        Ok(Ok(v)) => {
            if let Ok((s, us)) = redis::from_redis_value::<(i64, i64)>(v) {
                out.time_ms = Some(s * 1000 + us / 1000);
            }
        }
    }
    let mut info = redis::cmd("INFO");
    info.arg("server")
        .arg("clients")
        .arg("memory")
        .arg("persistence");
    let mut reply = run(info).await;
    if matches!(&reply, Ok(Err(e)) if e.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm))
    {
        // Before Redis 7, INFO takes one section: ask for all of them.
        reply = run(redis::cmd("INFO")).await;
    }
    match reply {
        Ok(Ok(v)) => match redis::from_redis_value::<String>(v) {
            Ok(text) => out = out.with_info(&parse_info(&text)),
            Err(e) => out.notes.push(format!("INFO: reply not understood: {e}")),
        },
        Ok(Err(e)) => out.notes.push(format!("INFO: {e}")),
        Err(_) => out
            .notes
            .push(format!("INFO: no answer within {}", fmt(timeout))),
    }
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("save").arg("appendfsync");
    match run(config).await {
        Ok(Ok(v)) => match redis::from_redis_value::<BTreeMap<String, String>>(v) {
            Ok(map) => {
                out.save = map.get("save").cloned();
                out.appendfsync = map.get("appendfsync").cloned();
            }
            Err(e) => out
                .notes
                .push(format!("CONFIG GET: reply not understood: {e}")),
        },
        Ok(Err(e)) => out.notes.push(format!(
            "CONFIG GET not allowed for this user (the RDB schedule is not shown): {e}"
        )),
        Err(_) => out
            .notes
            .push(format!("CONFIG GET: no answer within {}", fmt(timeout))),
    }
    out.warnings = redis_warnings(&out);
    out
}

/// One reading of the counters that rates are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When it was read (ms since the epoch, this host's clock).
    pub at_ms: i64,
    pub enqueued: u64,
    pub acked: u64,
    pub failed: u64,
    pub dead_lettered: u64,
    pub stale: u64,
}

impl Sample {
    pub(super) fn of(at_ms: i64, s: &QueueStats) -> Sample {
        Sample {
            at_ms,
            enqueued: s.enqueued,
            acked: s.acked,
            failed: s.failed,
            dead_lettered: s.dead_lettered,
            stale: s.stale,
        }
    }
}

/// One queue as last read.
#[derive(Clone)]
pub struct Entry {
    pub id: String,
    pub queue: Option<Queue>,
    /// The last `stats` reply; kept through a failed refresh (then `error` says so).
    pub stats: Option<QueueStats>,
    pub error: Option<String>,
    pub kube: Option<KubeInfo>,
    pub history: VecDeque<Sample>,
    /// Every partition of a partitioned queue (see `Found::parts`).
    pub parts: Vec<Queue>,
    /// When the last `stats` reply arrived (this host's monotonic clock; the reply's
    /// Redis clock is `stats.time_ms`): the counts' age is measured from it.
    pub read_at: Option<Instant>,
}

/// What the refresher last saw.
#[derive(Clone, Default)]
pub struct Snapshot {
    /// How many refreshes have completed (0 before the first).
    pub seq: u64,
    /// When the last refresh ended (ms since the epoch).
    pub at_ms: i64,
    /// `stats` calls made since start, all queues together.
    pub stats_calls: u64,
    /// Why the last listing of queues failed, if it did (the previous list is kept).
    pub error: Option<String>,
    pub entries: BTreeMap<String, Entry>,
    /// The Redis servers as their last probe saw them, by endpoint.
    pub redis: BTreeMap<String, RedisHealth>,
    /// When the refresher started.
    pub started: Option<Instant>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn sample(at_ms: i64, dead_lettered: u64, stale: u64) -> Sample {
        Sample {
            at_ms,
            enqueued: 0,
            acked: 0,
            failed: 0,
            dead_lettered,
            stale,
        }
    }

    fn rules() -> Rules {
        Rules::new(Duration::from_secs(2), Duration::from_secs(300))
    }

    fn texts(r: &Reading) -> Vec<String> {
        health_of(r, &rules())
            .into_iter()
            .map(|h| format!("{}: {}", h.level, h.text))
            .collect()
    }

    fn reading<'a>(s: &'a QueueStats, h: &'a VecDeque<Sample>) -> Reading<'a> {
        Reading {
            stats: Some(s),
            error: None,
            age: Some(Duration::from_millis(100)),
            history: h,
        }
    }

    #[test]
    fn a_quiet_queue_is_healthy() {
        let h: VecDeque<Sample> = [sample(0, 1, 0), sample(1000, 1, 0)].into();
        let s = QueueStats {
            oldest_pending_ms: Some(0),
            ..QueueStats::default()
        };
        assert!(texts(&reading(&s, &h)).is_empty());
    }

    #[test]
    fn dead_jobs_count_by_their_number_not_only_their_growth() {
        let h: VecDeque<Sample> = [sample(0, 10_000, 0), sample(1000, 10_000, 0)].into();
        let mut s = QueueStats {
            dead: 10_000,
            oldest_pending_ms: Some(0),
            ..QueueStats::default()
        };
        assert_eq!(
            texts(&reading(&s, &h)),
            ["bad: 10000 dead jobs wait for a redrive or a purge"]
        );
        s.dead = 3;
        assert_eq!(
            texts(&reading(&s, &h)),
            ["warn: 3 dead jobs wait for a redrive or a purge"]
        );
        // Growing: said with how many over the window.
        let grew: VecDeque<Sample> = [sample(0, 1, 0), sample(1000, 3, 0)].into();
        assert_eq!(
            texts(&reading(&s, &grew))[1],
            "warn: dead letters growing: 2 in the last 5m"
        );
    }

    #[test]
    fn expired_leases_and_waiting_jobs_count() {
        let h = VecDeque::new();
        let mut s = QueueStats {
            expired: 2,
            pending: 5,
            oldest_pending_ms: Some(90_000),
            ..QueueStats::default()
        };
        assert_eq!(
            texts(&reading(&s, &h)),
            [
                "warn: 2 expired leases wait for a reaper",
                "warn: the oldest pending job has waited 1m30s"
            ]
        );
        s.expired = 0;
        s.oldest_pending_ms = Some(20 * 60_000);
        assert_eq!(
            texts(&reading(&s, &h)),
            ["bad: the oldest pending job has waited 20m"]
        );
        s.oldest_pending_ms = None;
        assert!(texts(&reading(&s, &h))[0].contains("not known"));
    }

    #[test]
    fn stale_failed_and_unread_counts_are_never_healthy() {
        let h = VecDeque::new();
        let s = QueueStats::default();
        let mut r = reading(&s, &h);
        r.age = Some(Duration::from_secs(8));
        assert_eq!(
            texts(&r),
            ["bad: stale: no reading for 8s (Redis slow or not answering)"]
        );
        r.age = Some(Duration::from_secs(1));
        r.error = Some("timed out");
        assert_eq!(texts(&r), ["bad: last read failed: timed out"]);
        let never = Reading {
            stats: None,
            error: None,
            age: None,
            history: &h,
        };
        assert_eq!(texts(&never), ["bad: not read"]);
    }

    #[test]
    fn redis_warnings_name_eviction_memory_and_persistence() {
        let info = parse_info(
            "# Memory\r\nused_memory:900\r\nmaxmemory:1000\r\nmaxmemory_policy:allkeys-lru\r\n\
             # Persistence\r\naof_enabled:0\r\nrdb_last_bgsave_status:ok\r\n",
        );
        let mut r = RedisHealth::default().with_info(&info);
        r.save = Some(String::new());
        let w: Vec<String> = redis_warnings(&r).into_iter().map(|h| h.text).collect();
        assert!(w[0].starts_with("maxmemory-policy is allkeys-lru"), "{w:?}");
        assert!(w[1].starts_with("memory 90% of maxmemory"), "{w:?}");
        assert!(w[2].starts_with("no persistence"), "{w:?}");
        let fine = RedisHealth {
            maxmemory_policy: Some("noeviction".into()),
            used_memory: Some(10),
            maxmemory: Some(0),
            aof_enabled: Some(true),
            ..RedisHealth::default()
        };
        assert!(redis_warnings(&fine).is_empty());
    }
}
