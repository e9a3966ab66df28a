//! Outcomes (docs/protocol.md, Outcomes): waiting for a job's end through the queue's
//! `done` stream, and reading the queue's `events` stream.

use std::time::Duration;

use bytes::Bytes;
use redis::Value;
use tokio::time::Instant;

use super::super::connection::Dedicated;
use super::super::error::{Error, Result};
use super::super::types::{Enqueued, JobEnd, JobEvent, NewJob};
use super::Queue;

/// How long a waiter blocks on the `done` stream before it reads the job's hash again
/// anyway: an end whose entry it missed (the stream trimmed, a connection lost) is found
/// within this long, never a hang.
pub const WAIT_RECHECK: Duration = Duration::from_secs(2);

/// How much longer than the wait a job enqueued to be waited for keeps its hash after it
/// ends (its `notify` option), so a waiter reads its result even when the queue keeps no
/// completed jobs.
pub const NOTIFY_MARGIN: Duration = Duration::from_secs(60);

/// The meta field that turns the events stream on: its cap, about how many entries it
/// keeps (XADD MAXLEN ~); absent or 0: off.
pub const EVENTS_FIELD: &str = "events_max_len";

/// The largest events cap (the scripts read a larger one as this).
pub const MAX_EVENTS_LEN: u64 = 1_000_000_000;

/// Entries of the `done` stream read per XREAD.
const DONE_READ: usize = 100;

impl Queue {
    /// Keep about `n` completion events in the queue's events stream (`events_max_len` in
    /// meta); 0 turns events off.
    pub async fn set_events(&self, n: u64) -> Result<()> {
        if n > MAX_EVENTS_LEN {
            return Err(Error::InvalidArgument {
                what: "events",
                reason: format!("{n} is more than {MAX_EVENTS_LEN}"),
            });
        }
        self.write_meta(&[(EVENTS_FIELD, n.to_string())]).await
    }

    /// `P:{T}:done`: the capped stream of the final ends of jobs enqueued with `notify`.
    pub fn done_key(&self) -> String {
        self.keys.done.clone()
    }

    /// `P:{T}:events`: the capped stream of every end, while meta's `events_max_len` is set.
    pub fn events_key(&self) -> String {
        self.keys.events.clone()
    }

    /// Enqueue `job` and wait up to `timeout` for its end: `Ok((enqueued, None))` when it
    /// had not ended by then. The job carries `notify` (the timeout plus
    /// [`NOTIFY_MARGIN`], unless its options give one), so its end is announced on the
    /// queue's `done` stream and its hash (with its result) outlives the wait. A job that
    /// was not made because another job holds its unique key ([`Enqueued::unique`]: the
    /// key refused it, or a waiting holder took its payload) is not waited for: the
    /// answer is `Ok((enqueued, None))` at once, and `enqueued.unique` says which job
    /// holds the key (whose end may never be announced: it need not carry `notify`).
    pub async fn enqueue_and_wait(
        &self,
        mut job: NewJob,
        timeout: Duration,
    ) -> Result<(Enqueued, Option<JobEnd>)> {
        if job.options.notify.is_none() {
            job.options.notify = Some(timeout + NOTIFY_MARGIN);
        }
        let from = self.stream_tail(&self.done_key()).await?;
        let enqueued = self.enqueue(job).await?;
        if enqueued.unique.is_some() {
            return Ok((enqueued, None));
        }
        let end = self
            .wait_since(enqueued.id.as_bytes(), timeout, from)
            .await?;
        Ok((enqueued, end))
    }

    /// Wait up to `timeout` for the end of job `id` (acked, dead-lettered, cancelled, or
    /// its hash gone); `None` when it has not ended by then. One blocking read of the
    /// queue's `done` stream at a time, and the job's hash read at the start, at each entry
    /// naming the job and at least every [`WAIT_RECHECK`]: an end announced before the
    /// wait began, or never (a job enqueued without `notify`), is found all the same.
    pub async fn wait_for(
        &self,
        id: impl AsRef<[u8]>,
        timeout: Duration,
    ) -> Result<Option<JobEnd>> {
        let from = self.stream_tail(&self.done_key()).await?;
        self.wait_since(id.as_ref(), timeout, from).await
    }

    async fn wait_since(
        &self,
        id: &[u8],
        timeout: Duration,
        mut from: String,
    ) -> Result<Option<JobEnd>> {
        let deadline = Instant::now() + timeout;
        let key = self.done_key();
        let mut conn: Option<Dedicated> = None;
        loop {
            if let Some(end) = self.job_end(id).await? {
                return Ok(Some(end));
            }
            // Block until an entry names the job, or the recheck timer or the deadline.
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(None);
                }
                let block = (deadline - now).min(WAIT_RECHECK);
                if conn.is_none() {
                    conn = Some(self.redis.dedicated(WAIT_RECHECK).await?);
                }
                let c = conn.as_mut().expect("set above");
                let entries = match read_stream(c, &key, &from, DONE_READ, Some(block)).await {
                    Ok(entries) => entries,
                    Err(e) => {
                        return Err(self.err("XREAD done", e));
                    }
                };
                if entries.is_empty() {
                    break; // the timer: read the hash again
                }
                let mut named = false;
                for (entry_id, fields) in entries {
                    from = entry_id;
                    named |= field(&fields, "id").is_some_and(|v| v.as_slice() == id);
                }
                if named {
                    break;
                }
            }
        }
    }

    /// How job `id` ended, from its hash; `None` while it has not.
    pub async fn job_end(&self, id: &[u8]) -> Result<Option<JobEnd>> {
        let mut conn = self.redis.clone();
        let v: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(self.keys.job_key(id))
            .arg("status")
            .arg("result")
            .arg("last_error")
            .arg("payload")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("HMGET job", e))?;
        let text = |v: &Option<Vec<u8>>| {
            v.as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        Ok(match v.first().and_then(|s| s.as_deref()) {
            Some(b"done") => Some(JobEnd::Done(Bytes::from(
                v.get(1).cloned().flatten().unwrap_or_default(),
            ))),
            Some(b"dead") => Some(JobEnd::Dead(text(&v[2]))),
            Some(b"cancelled") => Some(JobEnd::Cancelled),
            Some(_) => None,
            None if v.iter().all(Option::is_none) => Some(JobEnd::Gone),
            None => None,
        })
    }

    /// The id of the last entry of stream `key`, `0-0` when it is empty or absent: where a
    /// reader that wants only what comes next starts.
    pub async fn stream_tail(&self, key: &str) -> Result<String> {
        let mut conn = self.redis.clone();
        let v: Value = redis::cmd("XREVRANGE")
            .arg(key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("XREVRANGE", e))?;
        Ok(entries_of(&v)
            .into_iter()
            .next()
            .map_or_else(|| "0-0".to_string(), |(id, _)| id))
    }

    /// Up to `count` events after stream id `after` (`0-0`: from the oldest kept), waiting
    /// up to `block` for one on `conn` (a [`crate::queue::Redis::dedicated`] connection)
    /// when none is there yet.
    pub async fn read_events(
        &self,
        conn: &mut Dedicated,
        after: &str,
        count: usize,
        block: Option<Duration>,
    ) -> Result<Vec<JobEvent>> {
        let entries = read_stream(conn, &self.events_key(), after, count, block)
            .await
            .map_err(|e| self.err("XREAD events", e))?;
        Ok(entries
            .into_iter()
            .map(|(stream_id, fields)| JobEvent {
                stream_id,
                event: field(&fields, "event")
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default(),
                id: field(&fields, "id")
                    .map(|v| v.as_slice().into())
                    .unwrap_or_default(),
                error: field(&fields, "error").map(|v| String::from_utf8_lossy(v).into_owned()),
            })
            .collect())
    }
}

/// Check a stream id as `--from` takes it: `<ms>-<seq>` or `<ms>`.
pub fn parse_stream_id(s: &str) -> Result<String> {
    let ok = |p: &str| !p.is_empty() && p.len() <= 20 && p.bytes().all(|b| b.is_ascii_digit());
    match s.split_once('-') {
        Some((ms, seq)) if ok(ms) && ok(seq) => Ok(s.to_string()),
        None if ok(s) => Ok(format!("{s}-0")),
        _ => Err(Error::InvalidArgument {
            what: "from",
            reason: format!("expected a stream id <ms>-<seq>, <ms>, or now, got {s:?}"),
        }),
    }
}

type Entry = (String, Vec<(Vec<u8>, Vec<u8>)>);

fn field<'a>(fields: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Option<&'a Vec<u8>> {
    fields
        .iter()
        .find(|(k, _)| k.as_slice() == name.as_bytes())
        .map(|(_, v)| v)
}

async fn read_stream(
    conn: &mut Dedicated,
    key: &str,
    after: &str,
    count: usize,
    block: Option<Duration>,
) -> redis::RedisResult<Vec<Entry>> {
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT").arg(count.max(1));
    if let Some(b) = block {
        cmd.arg("BLOCK").arg(b.as_millis().max(1) as u64);
    }
    cmd.arg("STREAMS").arg(key).arg(after);
    let v: Value = cmd.query_async(conn).await?;
    // [[key, entries]] (RESP2) or {key: entries} (RESP3); nil when the block timed out
    let entries = match &v {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|s| match s {
                Value::Array(pair) if pair.len() == 2 => Some(entries_of(&pair[1])),
                _ => None,
            })
            .flatten()
            .collect(),
        Value::Map(streams) => streams.iter().flat_map(|(_, e)| entries_of(e)).collect(),
        _ => Vec::new(),
    };
    Ok(entries)
}

/// The entries of an XRANGE-shaped reply: `[[id, [field, value, …]], …]`.
fn entries_of(v: &Value) -> Vec<Entry> {
    let bytes = |v: &Value| match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    };
    let Value::Array(items) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|e| {
            let Value::Array(e) = e else { return None };
            let id = String::from_utf8(bytes(e.first()?)?).ok()?;
            let fields = match e.get(1)? {
                Value::Array(f) => f
                    .chunks(2)
                    .filter_map(|c| Some((bytes(c.first()?)?, bytes(c.get(1)?)?)))
                    .collect(),
                Value::Map(m) => m
                    .iter()
                    .filter_map(|(k, v)| Some((bytes(k)?, bytes(v)?)))
                    .collect(),
                _ => Vec::new(),
            };
            Some((id, fields))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_id_is_ms_and_seq_or_ms() {
        assert_eq!(
            parse_stream_id("1764641234567-3").unwrap(),
            "1764641234567-3"
        );
        assert_eq!(parse_stream_id("0").unwrap(), "0-0");
        for bad in ["", "-", "now-1", "1-", "-1", "1-2-3", "yesterday", "1.5"] {
            assert!(parse_stream_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stream_entries_are_read_from_either_protocol() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = Value::Array(vec![
            bulk("5-0"),
            Value::Array(vec![bulk("id"), bulk("j1"), bulk("event"), bulk("acked")]),
        ]);
        let got = entries_of(&Value::Array(vec![entry]));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "5-0");
        assert_eq!(
            field(&got[0].1, "event").map(Vec::as_slice),
            Some(&b"acked"[..])
        );
        assert!(entries_of(&Value::Nil).is_empty());
    }
}
