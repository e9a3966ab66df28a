//! A queue's history as the scripts keep it (docs/protocol.md, History): per-minute
//! counts of the jobs enqueued, acked, failed and dead-lettered, and the acks'
//! processing-time buckets per 10 minutes, in hourly hashes that live 25 hours.

use std::collections::HashMap;

use super::client::Queue;
use super::error::{Error, Result};
use super::stats::Histogram;

/// How long the scripts keep the history: each hourly hash expires 25 hours after its
/// hour began, so the last 24 hours are always there.
pub const HISTORY_HOURS: i64 = 24;
const MINUTE_MS: i64 = 60_000;
const SLOT_MS: i64 = 600_000;
const HOUR_MS: i64 = 3_600_000;

/// The windows the processing times are given for: whole 10-minute slots ending with the
/// current one (so "10m" is the current slot and the one before it: 10 to 20 minutes).
pub const WINDOWS: [(&str, i64); 3] = [("10m", 2), ("1h", 6), ("24h", 144)];

/// The per-minute counts of the last `minutes` minutes (the current one last) and the
/// processing times of the acks in recent windows.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct History {
    /// The first minute's start (ms since the epoch, the Redis clock).
    pub start_ms: i64,
    pub enqueued: Vec<u64>,
    pub acked: Vec<u64>,
    pub failed: Vec<u64>,
    pub dead: Vec<u64>,
    pub windows: Vec<Window>,
}

/// The processing times of the acks of one recent window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Window {
    pub name: &'static str,
    /// The window's start (ms): the first 10-minute slot's.
    pub since_ms: i64,
    pub acks: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// The key of `kind`'s hash for `hour` (hours since the epoch).
pub fn history_key(queue: &Queue, kind: &str, hour: i64) -> String {
    format!("{}:hist:{kind}:{hour}", queue.keys().name)
}

/// Read the last `minutes` minutes (1 to 24 hours' worth) of `queue`'s history, as of
/// `now_ms` (the Redis clock): one pipelined round trip of at most 5 × 25 HGETALLs.
pub async fn read_history(queue: &Queue, now_ms: i64, minutes: usize) -> Result<History> {
    let minutes = minutes.clamp(1, (HISTORY_HOURS * 60) as usize) as i64;
    let now_minute = now_ms.div_euclid(MINUTE_MS);
    let first_minute = now_minute - minutes + 1;
    let oldest_slot = now_ms.div_euclid(SLOT_MS) - WINDOWS[2].1 + 1;
    let first_hour = (first_minute * MINUTE_MS)
        .min(oldest_slot * SLOT_MS)
        .div_euclid(HOUR_MS);
    let last_hour = now_ms.div_euclid(HOUR_MS);
    let kinds = ["e", "a", "f", "d", "h"];
    let mut pipe = redis::pipe();
    for hour in first_hour..=last_hour {
        for kind in kinds {
            pipe.cmd("HGETALL").arg(history_key(queue, kind, hour));
        }
    }
    let mut conn = queue.redis().clone();
    let replies: Vec<HashMap<String, i64>> =
        pipe.query_async(&mut conn)
            .await
            .map_err(|e| Error::Redis {
                queue: queue.name().to_string(),
                op: "HGETALL history",
                source: e,
            })?;
    let len = minutes as usize;
    let mut out = History {
        start_ms: first_minute * MINUTE_MS,
        enqueued: vec![0; len],
        acked: vec![0; len],
        failed: vec![0; len],
        dead: vec![0; len],
        windows: Vec::new(),
    };
    // per 10-minute slot (since the epoch): the histogram of its acks
    let mut slots: HashMap<i64, Histogram> = HashMap::new();
    let mut replies = replies.into_iter();
    for hour in first_hour..=last_hour {
        for kind in kinds {
            let fields = replies.next().unwrap_or_default();
            for (field, value) in fields {
                let value = value.max(0) as u64;
                if kind == "h" {
                    let Some((slot, bucket)) = field.split_once(':') else {
                        continue;
                    };
                    let (Ok(slot), Ok(bucket)) = (slot.parse::<i64>(), bucket.parse::<u32>())
                    else {
                        continue;
                    };
                    if !(0..6).contains(&slot) || bucket > 64 {
                        continue;
                    }
                    let at = hour * 6 + slot;
                    *slots
                        .entry(at)
                        .or_default()
                        .buckets
                        .entry(bucket)
                        .or_default() += value;
                    continue;
                }
                let Ok(m) = field.parse::<i64>() else {
                    continue;
                };
                if !(0..60).contains(&m) {
                    continue;
                }
                let i = hour * 60 + m - first_minute;
                if i < 0 || i >= minutes {
                    continue;
                }
                let series = match kind {
                    "e" => &mut out.enqueued,
                    "a" => &mut out.acked,
                    "f" => &mut out.failed,
                    _ => &mut out.dead,
                };
                series[i as usize] += value;
            }
        }
    }
    let now_slot = now_ms.div_euclid(SLOT_MS);
    for (name, n) in WINDOWS {
        let mut h = Histogram::default();
        for slot in now_slot - n + 1..=now_slot {
            if let Some(s) = slots.get(&slot) {
                for (b, c) in &s.buckets {
                    *h.buckets.entry(*b).or_default() += c;
                }
            }
        }
        let ms = |q: f64| {
            h.quantile(q)
                .map(|d| (d.as_secs_f64() * 1_000_000.0).round() / 1000.0)
        };
        out.windows.push(Window {
            name,
            since_ms: (now_slot - n + 1) * SLOT_MS,
            acks: h.total(),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
        });
    }
    Ok(out)
}
