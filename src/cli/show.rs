//! `jobqueue show`: one job in any status (pending, delayed, processing, dead, or done
//! when completed retention keeps it), read-only; and the job view `dead show` and `peek`
//! share: where the job is filed, its timing, its text and JSON renderings.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;

use super::ConnectArgs;
use super::common::UsageError;
use super::format::{add_id_hex, escape, format_epoch_ms};
use crate::queue::{Error, JobId, JobInfo, JobStatus, PURGED_REMEMBERED_MS, Queue, SetAside};

pub const EXAMPLES: &str = "\
Examples:
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d --full
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d --out payload.bin
  jobqueue show --tag emails 8fK2pQ0aZr1xYc3d --json
  jobqueue show --tag emails --hex 626164ff        # an id that is not UTF-8";

/// How much of a payload `show` prints unless asked for all of it.
pub const PREVIEW_BYTES: usize = 200;

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job's id (any bytes the shell passes; see --hex).
    pub id: OsString,
    /// The id is given as hex (the `id_hex` of `--json` output), for ids that are not UTF-8.
    #[arg(long, visible_alias = "id-hex")]
    pub hex: bool,
    /// Print the whole payload (escaped where it is not UTF-8 text), not the first
    /// 200 bytes.
    #[arg(long)]
    pub full: bool,
    /// Write the whole payload, byte for byte, to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

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
}

impl JobView {
    pub fn status(&self) -> Option<JobStatus> {
        self.info.status.as_deref().and_then(JobStatus::parse)
    }

    /// What its status reads as; a done job is there only because retention keeps it.
    fn status_text(&self) -> String {
        match (self.status(), self.info.status.as_deref(), &self.aside) {
            (Some(JobStatus::Done), _, _) => "done (kept by completed retention)".into(),
            (_, Some(s), _) => s.to_string(),
            (_, None, Some(a)) if a.purged => "forgotten (purged orphan)".into(),
            (_, None, Some(_)) => "set aside".into(),
            (_, None, None) => "-".into(),
        }
    }

    /// When a lease ends: the processing set's score, else the hash's `lease_until`.
    fn lease_until(&self) -> Option<i64> {
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

    /// The row that says when its status changes next (or changed last, for the dead).
    fn timing_row(&self) -> Option<(&'static str, String)> {
        let at = |t: i64, note: String| format!("{} UTC ({note})", format_epoch_ms(t));
        match self.status()? {
            JobStatus::Delayed => Some((
                "run at",
                self.filed_at.map_or_else(
                    || "-".into(),
                    |t| match t - self.now {
                        ms if ms >= 0 => at(t, format!("in {}", millis(ms))),
                        ms => at(
                            t,
                            format!("due {} ago: the next claim takes it", millis(-ms)),
                        ),
                    },
                ),
            )),
            JobStatus::Processing => Some((
                "lease until",
                self.lease_until().map_or_else(
                    || "-".into(),
                    |t| match t - self.now {
                        ms if ms >= 0 => at(t, format!("{} left", millis(ms))),
                        ms => at(
                            t,
                            format!("expired {} ago: a reaper puts it back", millis(-ms)),
                        ),
                    },
                ),
            )),
            _ => None,
        }
    }

    /// The job as text, one `label value` row per line, then its payload.
    pub fn write_text(&self, out: &mut impl Write, payload: Payload) -> std::io::Result<()> {
        let info = &self.info;
        let time = |t: Option<i64>| t.map_or_else(|| "-".to_string(), format_epoch_ms);
        let mut rows = vec![
            ("id", info.id.to_string()),
            ("status", self.status_text()),
            ("attempts", info.attempts.to_string()),
            ("enqueued", time(info.enqueued_at)),
            ("last claimed", time(info.claimed_at)),
        ];
        rows.extend(self.timing_row());
        if self.status() == Some(JobStatus::Dead) {
            rows.push(("died", time(self.filed_at)));
        }
        rows.push(("worker", info.worker.clone().unwrap_or_else(|| "-".into())));
        if let Some(a) = &self.aside {
            let (label, until) = if a.purged {
                (
                    "forgotten",
                    format!(
                        ", remembered until {} UTC",
                        format_epoch_ms(a.at + PURGED_REMEMBERED_MS)
                    ),
                )
            } else {
                ("set aside", String::new())
            };
            rows.push((
                label,
                format!("{} UTC{until}: {}", format_epoch_ms(a.at), a.reason()),
            ));
        }
        rows.push((
            "last error",
            info.last_error
                .as_deref()
                .map_or_else(|| "-".into(), |e| escape(e.as_bytes(), false)),
        ));
        for (label, value) in rows {
            writeln!(out, "{label:<14}{value}")?;
        }
        if !info.errors.is_empty() {
            writeln!(
                out,
                "errors of the last {} failed attempts, oldest first:",
                info.errors.len()
            )?;
            for e in &info.errors {
                writeln!(
                    out,
                    "  attempt {:<4} {} UTC  {}",
                    e.attempt,
                    format_epoch_ms(e.at),
                    escape(e.error.as_bytes(), false)
                )?;
            }
        }
        let (shown, rest) = cut(&info.payload, payload);
        writeln!(out, "payload ({} bytes):", info.payload.len())?;
        writeln!(out, "{}", escape(shown, true))?;
        if rest > 0 {
            writeln!(
                out,
                "… {rest} more bytes: --full prints them all, --out FILE writes the payload to FILE"
            )?;
        }
        Ok(())
    }

    /// The job as one JSON object: the hash's fields (`payload` cut as asked, with
    /// `payload_bytes` and `payload_truncated`; `payload_hex` when not UTF-8), `died_at`,
    /// and `run_at` / `due_in_ms` or `lease_left_ms` by status.
    pub fn json(&self, payload: Payload) -> anyhow::Result<serde_json::Value> {
        let mut value = serde_json::to_value(&self.info)?;
        add_id_hex(&mut value, &self.info.id);
        let (shown, rest) = cut(&self.info.payload, payload);
        let obj = value
            .as_object_mut()
            .ok_or_else(|| anyhow!("a job serialises as an object"))?;
        obj.insert(
            "payload".into(),
            String::from_utf8_lossy(shown).into_owned().into(),
        );
        if std::str::from_utf8(shown).is_err() {
            obj.insert("payload_hex".into(), hex::encode(shown).into());
        }
        obj.insert("payload_bytes".into(), self.info.payload.len().into());
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

/// A duration in ms for people (`4.5s`, `1m30s`).
fn millis(ms: i64) -> String {
    crate::duration::format(Duration::from_millis(ms.max(0) as u64))
}

/// The part of `payload` to show and how many bytes are left out. A preview ends on a
/// character boundary, so a cut never shows half a character as `\xNN`.
fn cut(payload: &[u8], how: Payload) -> (&[u8], usize) {
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

/// Read job `id` and where it is filed, or fail (exit 1) naming it when there is none.
pub async fn load(queue: &Queue, id: &[u8]) -> anyhow::Result<JobView> {
    find(queue, id).await?.ok_or_else(|| {
        anyhow!(
            "no job \"{}\" in queue {}: never enqueued there, or gone (a done job is kept \
             only with completed retention; a dead one until dead retention)",
            JobId::from(id),
            queue.name()
        )
    })
}

/// Read job `id` and where it is filed; `None` when it has no hash and is not set aside.
/// A set-aside id is shown with its entry (and no hash, when it has none: its job key is
/// absent or of another type).
pub async fn find(queue: &Queue, id: &[u8]) -> anyhow::Result<Option<JobView>> {
    let aside = queue.set_aside(id).await?;
    let info = match (queue.job(id).await, &aside) {
        (Ok(Some(info)), _) => info,
        (Ok(None) | Err(Error::WrongType { .. }), Some(_)) => JobInfo {
            id: id.into(),
            payload: Default::default(),
            status: None,
            attempts: 0,
            enqueued_at: None,
            claimed_at: None,
            lease_until: None,
            last_error: None,
            worker: None,
            errors: Vec::new(),
        },
        (Ok(None), None) => return Ok(None),
        (Err(e), _) => return Err(e.into()),
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
    }))
}

/// The id's bytes as given: the argument's own bytes, or decoded from hex.
fn id_bytes(args: &ShowArgs) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let given = args.id.as_bytes();
    let id = if args.hex {
        hex::decode(given).map_err(|e| {
            UsageError(format!(
                "--hex: {:?} is not hex ({e})",
                args.id.to_string_lossy()
            ))
        })?
    } else {
        given.to_vec()
    };
    if id.is_empty() {
        return Err(UsageError("the job id must not be empty".into()).into());
    }
    Ok(id)
}

pub async fn run(args: ShowArgs) -> anyhow::Result<()> {
    let id = id_bytes(&args)?;
    let target = super::common::open_target(&args.connect).await?;
    super::common::note_if_target_absent(&target).await?;
    let queues = target.queues();
    // Partitioned: the partition that holds the job (the first, when none does).
    let mut queue = queues[0].clone();
    for q in &queues {
        if find(q, &id).await?.is_some() {
            queue = q.clone();
            break;
        }
    }
    let view = load(&queue, &id).await?;
    if let Some(path) = &args.out {
        std::fs::write(path, &view.info.payload)
            .with_context(|| format!("cannot write the payload to {}", path.display()))?;
    }
    let payload = if args.full {
        Payload::Whole
    } else {
        Payload::Preview
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", view.json(payload)?)?;
    } else {
        view.write_text(&mut out, payload)?;
        if let Some(path) = &args.out {
            writeln!(
                out,
                "payload written to {} ({} bytes)",
                path.display(),
                view.info.payload.len()
            )?;
        }
    }
    Ok(())
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
