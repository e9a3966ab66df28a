//! The dead-letter set as the console pages and searches it: newest death first, from a
//! cursor (a time of death and how many jobs at exactly that time were already passed),
//! each request looking at a bounded number of dead jobs; a search matches the id, the
//! last error and the first [`SEARCH_PREFIX`] bytes of the payload. And the ids the
//! console shows and takes: exact bytes, as hex on the wire, shown unambiguously.

use crate::queue::view::{JobView, PREVIEW_BYTES};
use crate::queue::{JobStatus, Queue};

/// Dead jobs read per round trip.
pub const CHUNK: usize = 500;
/// How many dead jobs one search request looks at, at most, before it answers with a
/// cursor to go on from.
pub const BUDGET: usize = 5_000;
/// How much of each payload a search looks at.
pub const SEARCH_PREFIX: usize = 4096;
/// How much of each payload a list reads: the preview and a few bytes more, so the
/// preview can end on a character boundary.
pub const PREVIEW_READ: usize = PREVIEW_BYTES + 4;
/// The most jobs one write (or the match list of a dry run) names.
pub const MAX_SELECTED: usize = 100_000;

/// Where a page of the dead-letter set starts: at the jobs that died at `score` ms or
/// before (`None`: the newest), passing the first `skip` of those that died at exactly
/// `score`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub score: Option<i64>,
    pub skip: usize,
}

impl Position {
    pub const NEWEST: Position = Position {
        score: None,
        skip: 0,
    };

    /// `SCORE:SKIP` (`SCORE` is `+inf` for the newest).
    pub fn encode(&self) -> String {
        match self.score {
            None => format!("+inf:{}", self.skip),
            Some(s) => format!("{s}:{}", self.skip),
        }
    }

    pub fn parse(text: &str) -> Result<Position, String> {
        let bad = || format!("cursor {text:?} is not SCORE:SKIP (as next_cursor gives it)");
        let (score, skip) = text.split_once(':').ok_or_else(bad)?;
        let skip = skip.parse::<usize>().map_err(|_| bad())?;
        let score = match score {
            "+inf" => None,
            s => Some(s.parse::<i64>().map_err(|_| bad())?),
        };
        Ok(Position { score, skip })
    }

    /// The position after one more job, which died at `score`.
    fn after(self, score: i64) -> Position {
        if self.score == Some(score) {
            Position {
                score: Some(score),
                skip: self.skip + 1,
            }
        } else {
            Position {
                score: Some(score),
                skip: 1,
            }
        }
    }
}

/// Where a page of a partitioned queue's dead-letter set starts: one position per
/// partition (`None`: that partition is read to its end), written as the positions
/// joined by `,` (`end` for a partition read to its end).
pub fn encode_all(at: &[Option<Position>]) -> String {
    at.iter()
        .map(|p| p.map_or_else(|| "end".to_string(), |p| p.encode()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A cursor of `parts` partitions, as [`encode_all`] writes it.
pub fn parse_all(text: &str, parts: usize) -> Result<Vec<Option<Position>>, String> {
    let at: Vec<Option<Position>> = text
        .split(',')
        .map(|p| match p {
            "end" => Ok(None),
            p => Position::parse(p).map(Some),
        })
        .collect::<Result<_, _>>()?;
    if at.len() != parts {
        return Err(format!(
            "cursor {text:?} has {} positions, the queue {parts} partitions (use the \
             next_cursor a page gives)",
            at.len()
        ));
    }
    Ok(at)
}

/// One page: the jobs (with their time of death), where the next page starts (`None`
/// at the oldest), and how many dead jobs were looked at.
pub struct Page {
    pub jobs: Vec<JobView>,
    /// Where the set goes on after each job of `jobs` (a page of several partitions
    /// takes a prefix of each partition's page and goes on from its last job).
    pub after: Vec<Position>,
    pub next: Option<Position>,
    pub looked_at: usize,
}

/// Whether `view` matches `needle` (lowercase): its id, last error or payload prefix.
fn matches(view: &JobView, needle: &str) -> bool {
    let lower = |b: &[u8]| String::from_utf8_lossy(b).to_lowercase();
    lower(view.info.id.as_bytes()).contains(needle)
        || view
            .info
            .last_error
            .as_deref()
            .is_some_and(|e| e.to_lowercase().contains(needle))
        || lower(&view.info.payload).contains(needle)
}

/// Up to `limit` dead jobs from `from`, newest death first; with `needle` (lowercase)
/// only those matching it; looking at `budget` dead entries at most either way.
pub async fn page(
    queue: &Queue,
    from: Position,
    limit: usize,
    needle: Option<&str>,
    budget: usize,
) -> anyhow::Result<Page> {
    let mut conn = queue.redis().clone();
    let mut at = from;
    let mut jobs = Vec::new();
    let mut after = Vec::new();
    let mut looked_at = 0;
    let prefix = if needle.is_some() {
        SEARCH_PREFIX
    } else {
        PREVIEW_READ
    };
    loop {
        // Bounded either way: a page of dead entries whose hashes are gone (orphans)
        // costs no more than a search.
        let mut want = CHUNK.min(budget.saturating_sub(looked_at));
        if needle.is_none() {
            want = want.min(limit - jobs.len());
        }
        if want == 0 {
            // The budget is spent: the next request goes on from here.
            return Ok(Page {
                jobs,
                after,
                next: Some(at),
                looked_at,
            });
        }
        let max = at
            .score
            .map_or_else(|| "+inf".to_string(), |s| s.to_string());
        let ids: Vec<(Vec<u8>, f64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(&queue.keys().dead)
            .arg(max)
            .arg("-inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(at.skip)
            .arg(want)
            .query_async(&mut conn)
            .await
            .map_err(|e| anyhow::anyhow!("cannot read the dead jobs of {}: {e}", queue.name()))?;
        let n = ids.len();
        let refs: Vec<&[u8]> = ids.iter().map(|(id, _)| id.as_slice()).collect();
        let read = if refs.is_empty() {
            Vec::new()
        } else {
            queue.previews(&refs, prefix).await?
        };
        let now = if refs.is_empty() {
            0
        } else {
            queue.now_ms().await?
        };
        for ((_, score), read) in ids.iter().zip(read) {
            let score = *score as i64;
            at = at.after(score);
            looked_at += 1;
            let Some((info, len)) = read else { continue };
            let view = JobView {
                info,
                filed_at: Some(score),
                now,
                aside: None,
                payload_len: Some(len),
            };
            if view.status() != Some(JobStatus::Dead) {
                continue;
            }
            if needle.is_some_and(|needle| !matches(&view, needle)) {
                continue;
            }
            jobs.push(view);
            after.push(at);
            if jobs.len() == limit {
                return Ok(Page {
                    jobs,
                    after,
                    next: Some(at),
                    looked_at,
                });
            }
        }
        if n < want {
            return Ok(Page {
                jobs,
                after,
                next: None,
                looked_at,
            });
        }
    }
}

/// The ids of every dead job that matches `needle` (lowercase), newest first; an error
/// past [`MAX_SELECTED`].
pub async fn all_matches(queue: &Queue, needle: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut at = Position::NEWEST;
    loop {
        let page = page(
            queue,
            at,
            MAX_SELECTED + 1 - out.len(),
            Some(needle),
            BUDGET,
        )
        .await
        .map_err(|e| e.to_string())?;
        out.extend(page.jobs.into_iter().map(|v| v.info.id.as_bytes().to_vec()));
        if out.len() > MAX_SELECTED {
            return Err(format!(
                "more than {MAX_SELECTED} dead jobs match: narrow the search"
            ));
        }
        match page.next {
            Some(next) => at = next,
            None => return Ok(out),
        }
    }
}

/// An id as the console shows it: the text when it is UTF-8 with no control characters
/// and does not start with `hex:`, else `hex:` and its bytes in hex (so no two ids
/// look alike); and whether it is shown as text.
pub fn shown(id: &[u8]) -> (String, bool) {
    match std::str::from_utf8(id) {
        Ok(s) if !s.chars().any(char::is_control) && !s.starts_with("hex:") => {
            (s.to_string(), true)
        }
        _ => (format!("hex:{}", hex::encode(id)), false),
    }
}

/// The id a request names: `id_hex` (its bytes in hex), else `id` (its text).
pub fn id_of(id: Option<&str>, id_hex: Option<&str>) -> Result<Vec<u8>, String> {
    let id = match (id_hex, id) {
        (Some(h), _) => {
            hex::decode(h.trim()).map_err(|e| format!("id_hex {h:?} is not hex ({e})"))?
        }
        (None, Some(text)) => text.as_bytes().to_vec(),
        (None, None) => return Err("give the job id as id_hex (its bytes in hex) or id".into()),
    };
    if id.is_empty() {
        return Err("the job id is empty".into());
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_ids_show_apart() {
        for p in [
            Position::NEWEST,
            Position {
                score: Some(1_700_000_000_123),
                skip: 3,
            },
        ] {
            assert_eq!(Position::parse(&p.encode()), Ok(p));
        }
        assert!(Position::parse("x").is_err());
        assert_eq!(Position::NEWEST.after(5).after(5).skip, 2);
        assert_eq!(shown(b"bad\\xff"), ("bad\\xff".to_string(), true));
        assert_eq!(shown(b"bad\xff"), ("hex:626164ff".to_string(), false));
        assert_eq!(shown(b"a\nb"), ("hex:610a62".to_string(), false));
        assert_eq!(shown(b"hex:61"), ("hex:6865783a3631".to_string(), false));
        assert_eq!(id_of(None, Some("626164ff")), Ok(b"bad\xff".to_vec()));
        assert_eq!(id_of(Some("x"), None), Ok(b"x".to_vec()));
        assert!(id_of(None, Some("zz")).is_err());
    }
}
