//! The job view the CLI (`show`, `dead show`, `peek`) and the console share: a job's
//! hash as read at one moment, where it is filed, Redis's clock, and its JSON rendering
//! (the CLI's text rendering is its own, in `cli::show`).

use std::time::Duration;

use super::{Error, JobInfo, JobStatus, Queue, Result, SetAside};

/// How much of a payload a preview carries.
pub const PREVIEW_BYTES: usize = 200;

/// How much of the payload a rendering carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The first [`PREVIEW_BYTES`].
    Preview,
    Whole,
}

/// A job as read at one moment: its hash, where it is filed, and Redis's clock.
pub struct JobView {
    pub info: JobInfo,
    /// Its score in the set its status names: run-at (delayed), lease end (processing),
    /// time of death (dead), in ms.
    pub filed_at: Option<i64>,
    /// Redis's clock when it was read (ms).
    pub now: i64,
    /// Its entry in the orphans set, when it has one: set aside (no job hash, or a job
    /// key of another type), or forgotten by purge and remembered.
    pub aside: Option<SetAside>,
    /// The whole payload's length when `info.payload` holds only its first bytes (read
    /// by [`Queue::previews`]); `None` when `info.payload` is the whole payload.
    pub payload_len: Option<usize>,
}

impl JobView {
    pub fn status(&self) -> Option<JobStatus> {
        self.info.status.as_deref().and_then(JobStatus::parse)
    }

    /// What its status reads as; a done job is there only because retention keeps it.
    pub fn status_text(&self) -> String {
        match (self.status(), self.info.status.as_deref(), &self.aside) {
            (Some(JobStatus::Done), _, _) => "done (kept by completed retention)".into(),
            (_, Some("cancelled"), _) => "cancelled (kept by completed retention)".into(),
            (_, Some(s), _) => s.to_string(),
            (_, None, Some(a)) if a.purged => "forgotten (purged orphan)".into(),
            (_, None, Some(_)) => "set aside".into(),
            (_, None, None) => "-".into(),
        }
    }

    /// When a lease ends: the processing set's score, else the hash's `lease_until`.
    pub fn lease_until(&self) -> Option<i64> {
        self.filed_at.or(self.info.lease_until)
    }

    /// Time to due (delayed) or lease left (processing), negative when past.
    pub fn time_left_ms(&self) -> Option<i64> {
        match self.status()? {
            JobStatus::Delayed => self.filed_at.map(|t| t - self.now),
            JobStatus::Processing => self.lease_until().map(|t| t - self.now),
            _ => None,
        }
    }

    /// `4.5s` while there is time left, `overdue 2s` after.
    pub fn time_left(&self) -> String {
        match self.time_left_ms() {
            None => "-".into(),
            Some(ms) if ms >= 0 => millis(ms),
            Some(ms) => format!("overdue {}", millis(-ms)),
        }
    }

    /// The whole payload's length in bytes.
    pub fn payload_len(&self) -> usize {
        self.payload_len.unwrap_or(self.info.payload.len())
    }

    /// The part of the payload to show and how many bytes are left out.
    pub fn payload_cut(&self, how: Payload) -> (&[u8], usize) {
        let (shown, _) = cut(&self.info.payload, how);
        (shown, self.payload_len().saturating_sub(shown.len()))
    }

    /// The job as one JSON object: the hash's fields (`payload` cut as asked, with
    /// `payload_bytes` and `payload_truncated`; its own options, null when it has none; `payload_hex` when not UTF-8; `id_hex`
    /// when text output shows the id as `hex:…`: not UTF-8, a control character, or text
    /// beginning with `hex:`), `died_at`, and `run_at` / `due_in_ms` or
    /// `lease_left_ms` by status.
    pub fn json(&self, payload: Payload) -> serde_json::Result<serde_json::Value> {
        let mut value = serde_json::to_value(&self.info)?;
        let (shown, rest) = self.payload_cut(payload);
        let Some(obj) = value.as_object_mut() else {
            return Ok(value);
        };
        if !self.info.id.is_plain() {
            obj.insert("id_hex".into(), hex::encode(self.info.id.as_bytes()).into());
        }
        obj.insert(
            "payload".into(),
            String::from_utf8_lossy(shown).into_owned().into(),
        );
        if std::str::from_utf8(shown).is_err() {
            obj.insert("payload_hex".into(), hex::encode(shown).into());
        }
        insert_options(obj, &self.info.options);
        obj.insert("payload_bytes".into(), self.payload_len().into());
        obj.insert("payload_truncated".into(), (rest > 0).into());
        if let Some(a) = &self.aside {
            let mut aside = serde_json::to_value(a)?;
            if let Some(o) = aside.as_object_mut() {
                o.insert("reason".into(), a.reason().into());
            }
            obj.insert("set_aside".into(), aside);
        }
        let dead = self.status() == Some(JobStatus::Dead);
        obj.insert("died_at".into(), self.filed_at.filter(|_| dead).into());
        match self.status() {
            Some(JobStatus::Delayed) => {
                obj.insert("run_at".into(), self.filed_at.into());
                obj.insert("due_in_ms".into(), self.time_left_ms().into());
            }
            Some(JobStatus::Processing) => {
                obj.insert("lease_until".into(), self.lease_until().into());
                obj.insert("lease_left_ms".into(), self.time_left_ms().into());
            }
            _ => {}
        }
        Ok(value)
    }
}

/// The job's own options under its hash's field names (docs/protocol.md, *Per-job
/// options*), times in ms, each null when the job has none (the queue's or the worker's
/// setting applies); `priority` is the job's own field already.
fn insert_options(obj: &mut serde_json::Map<String, serde_json::Value>, o: &super::JobOptions) {
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
    let fields: [(&str, serde_json::Value); 8] = [
        ("max_attempts", o.max_attempts.into()),
        ("backoff_initial_ms", ms(o.backoff_initial).into()),
        ("backoff_max_ms", ms(o.backoff_max).into()),
        ("backoff_multiplier", o.backoff_multiplier.into()),
        ("visibility_timeout_ms", ms(o.visibility).into()),
        ("timeout_ms", ms(o.timeout).into()),
        ("rate_key", o.rate_key.clone().into()),
        ("notify", ms(o.notify).into()),
    ];
    for (name, value) in fields {
        obj.insert(name.into(), value);
    }
}

/// A duration in ms for people (`4.5s`, `1m30s`).
pub fn millis(ms: i64) -> String {
    crate::duration::format(Duration::from_millis(ms.max(0) as u64))
}

/// The part of `payload` to show and how many bytes are left out. A preview ends on a
/// character boundary, so a cut never shows half a character as `\xNN`.
pub fn cut(payload: &[u8], how: Payload) -> (&[u8], usize) {
    if how == Payload::Whole || payload.len() <= PREVIEW_BYTES {
        return (payload, 0);
    }
    let mut end = PREVIEW_BYTES;
    // Back off at most 3 continuation bytes (0b10xx_xxxx) of a UTF-8 character.
    while end > PREVIEW_BYTES - 3 && payload[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    if payload[end] & 0xC0 == 0x80 {
        end = PREVIEW_BYTES;
    }
    (&payload[..end], payload.len() - end)
}

/// Read job `id` and where it is filed; `None` when it has no hash and is not set aside.
/// A set-aside id is shown with its entry (and no hash, when it has none: its job key is
/// absent or of another type).
pub async fn find(queue: &Queue, id: &[u8]) -> Result<Option<JobView>> {
    let aside = queue.set_aside(id).await?;
    let info = match (queue.job(id).await, &aside) {
        (Ok(Some(info)), _) => info,
        (Ok(None) | Err(Error::WrongType { .. }), Some(_)) => JobInfo {
            id: id.into(),
            payload: Default::default(),
            status: None,
            attempts: 0,
            priority: 0,
            enqueued_at: None,
            claimed_at: None,
            lease_until: None,
            last_error: None,
            worker: None,
            errors: Vec::new(),
            unique_key: None,
            unique_mode: None,
            progress: None,
            result: None,
            options: Default::default(),
        },
        (Ok(None), None) => return Ok(None),
        (Err(e), _) => return Err(e),
    };
    let keys = queue.keys();
    let filed_at = match info.status.as_deref().and_then(JobStatus::parse) {
        Some(JobStatus::Delayed) => queue.score_of(&keys.delayed, "ZSCORE delayed", id).await?,
        Some(JobStatus::Processing) => {
            queue
                .score_of(&keys.processing, "ZSCORE processing", id)
                .await?
        }
        Some(JobStatus::Dead) => queue.score_of(&keys.dead, "ZSCORE dead", id).await?,
        _ => None,
    };
    let now = queue.now_ms().await?;
    Ok(Some(JobView {
        info,
        filed_at,
        now,
        aside,
        payload_len: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_cut_on_character_boundaries() {
        let ascii = vec![b'a'; 300];
        assert_eq!(cut(&ascii, Payload::Preview), (&ascii[..200], 100));
        assert_eq!(cut(&ascii, Payload::Whole), (&ascii[..], 0));
        // 'é' is two bytes: one starting at byte 199 is left out whole.
        let mut text = vec![b'a'; 199];
        text.extend("éé".as_bytes());
        assert_eq!(cut(&text, Payload::Preview), (&text[..199], 4));
        // Bytes that are not UTF-8 are cut where the cap is.
        let binary = vec![0x80u8; 300];
        assert_eq!(cut(&binary, Payload::Preview).1, 100);
    }
}
