//! The console's operator pages and actions beside the dead letters: the workers page
//! (who holds which lease now, for how long, and the workers seen recently), pausing and
//! resuming a queue, running a delayed job now and deleting one job. The writes go
//! through the protocol's `manage` script; the guard makes them writes-mode only and
//! CSRF-checked like every other POST.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Console;
use super::api::{ApiError, ApiResult, entry, failed, page};
use crate::queue::history::read_history;
use crate::queue::{Deletion, Queue, parse_claim_token};

/// The most leases the workers page reads (the first to end first).
pub const MAX_LEASES: usize = 1000;
/// The most workers the workers page lists as seen (the last seen first).
pub const MAX_SEEN: usize = 500;
/// The most jobs listed under one worker.
const JOBS_PER_WORKER: usize = 20;

pub fn routes() -> Router<Arc<Console>> {
    Router::new()
        .route("/workers", get(page))
        .route("/api/workers", get(workers))
        .route("/api/history", get(history))
        .route("/api/queue/pause", post(pause))
        .route("/api/queue/resume", post(resume))
        .route("/api/job/run", post(run_now))
        .route("/api/job/delete", post(delete))
}

#[derive(Deserialize)]
struct QueueOnly {
    q: String,
}

/// `P:{T}:workers`: the workers each claim scores with its time (docs/protocol.md).
pub fn workers_key(queue: &Queue) -> String {
    format!("{}:workers", queue.keys().name)
}

/// Members of a sorted set with their scores.
type Scored = Vec<(Vec<u8>, f64)>;

/// One lease as the workers page shows it.
struct Held {
    id: String,
    claimed_at: Option<i64>,
    lease_until: i64,
    attempts: i64,
}

/// `GET /api/workers?q=TAG`: the leases held now grouped by the worker that holds them
/// (from each lease's claim_token), with how long each has held its oldest, and the
/// workers seen by a claim in the last hour (`P:{T}:workers`), the last seen first.
async fn workers(State(console): State<Arc<Console>>, Query(query): Query<QueueOnly>) -> ApiResult {
    let (_, queue) = entry(&console, &query.q)?;
    let keys = queue.keys();
    let mut conn = queue.redis().clone();
    let (leases, total, seen, time): (Scored, u64, Scored, Vec<i64>) = redis::pipe()
        .cmd("ZRANGE")
        .arg(&keys.processing)
        .arg(0)
        .arg(MAX_LEASES - 1)
        .arg("WITHSCORES")
        .cmd("ZCARD")
        .arg(&keys.processing)
        .cmd("ZRANGE")
        .arg(workers_key(&queue))
        .arg(0)
        .arg(MAX_SEEN - 1)
        .arg("REV")
        .arg("WITHSCORES")
        .cmd("TIME")
        .query_async(&mut conn)
        .await
        .map_err(failed)?;
    let now = match time.as_slice() {
        [s, us] => s * 1000 + us / 1000,
        _ => return Err(failed("TIME gave no time")),
    };
    // one HMGET per lease, pipelined: the lease's token (worker and claimed_at in it), the
    // older layout's fields, and the attempt
    let mut pipe = redis::pipe();
    for (id, _) in &leases {
        pipe.cmd("HMGET")
            .arg(keys.job_key(id))
            .arg("claim_token")
            .arg("worker")
            .arg("claimed_at")
            .arg("attempts");
    }
    let fields: Vec<Vec<Option<Vec<u8>>>> = if leases.is_empty() {
        Vec::new()
    } else {
        pipe.query_async(&mut conn).await.map_err(failed)?
    };
    let mut by_worker: BTreeMap<String, Vec<Held>> = BTreeMap::new();
    for ((id, until), f) in leases.iter().zip(fields) {
        let text = |i: usize| {
            f.get(i)
                .cloned()
                .flatten()
                .map(|v| String::from_utf8_lossy(&v).into_owned())
        };
        let token = f.first().cloned().flatten();
        let parsed = token.as_deref().and_then(parse_claim_token);
        let worker = parsed
            .as_ref()
            .map(|p| p.1.clone())
            .or_else(|| text(1))
            .unwrap_or_else(|| "(unknown)".into());
        let claimed_at = parsed
            .map(|p| p.0)
            .or_else(|| text(2).and_then(|v| v.parse().ok()));
        by_worker.entry(worker).or_default().push(Held {
            id: String::from_utf8_lossy(id).into_owned(),
            claimed_at,
            lease_until: *until as i64,
            attempts: text(3).and_then(|v| v.parse().ok()).unwrap_or(0),
        });
    }
    let mut holders: Vec<Value> = by_worker
        .iter()
        .map(|(worker, held)| {
            let since = held.iter().filter_map(|h| h.claimed_at).min();
            let expired = held.iter().filter(|h| h.lease_until <= now).count();
            let jobs: Vec<Value> = held
                .iter()
                .take(JOBS_PER_WORKER)
                .map(|h| {
                    json!({
                        "id": h.id,
                        "claimed_at": h.claimed_at,
                        "held_ms": h.claimed_at.map(|c| (now - c).max(0)),
                        "lease_until": h.lease_until,
                        "lease_left_ms": h.lease_until - now,
                        "attempts": h.attempts,
                    })
                })
                .collect();
            json!({
                "worker": worker,
                "leases": held.len(),
                "expired": expired,
                "held_since": since,
                "longest_ms": since.map(|s| (now - s).max(0)),
                "jobs": jobs,
            })
        })
        .collect();
    // the busiest first, then the one holding a lease longest
    holders.sort_by_key(|h| {
        (
            std::cmp::Reverse(h["leases"].as_u64().unwrap_or(0)),
            std::cmp::Reverse(h["longest_ms"].as_i64().unwrap_or(0)),
        )
    });
    let seen: Vec<Value> = seen
        .iter()
        .map(|(w, at)| {
            let w = String::from_utf8_lossy(w).into_owned();
            let holding = by_worker.get(&w).map_or(0, Vec::len);
            json!({
                "worker": w,
                "last_seen": *at as i64,
                "ago_ms": (now - *at as i64).max(0),
                "leases": holding,
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "queue": query.q,
        "now_ms": now,
        "leases_total": total,
        "leases_read": leases.len(),
        "holders": holders,
        "seen": seen,
        "writes": console.config.allow_writes,
    }))
    .into_response())
}

#[derive(Deserialize)]
struct HistoryQuery {
    q: String,
    /// How many minutes, the current one last: 1 to 1440 (24 hours); 60 by default.
    #[serde(default = "default_minutes")]
    minutes: usize,
}

fn default_minutes() -> usize {
    60
}

/// `GET /api/history?q=TAG&minutes=N`: the per-minute counts of the last N minutes and
/// the processing times of recent windows, as the scripts keep them in Redis.
async fn history(
    State(console): State<Arc<Console>>,
    Query(query): Query<HistoryQuery>,
) -> ApiResult {
    let (_, queue) = entry(&console, &query.q)?;
    if !(1..=1440).contains(&query.minutes) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "minutes must be 1 to 1440 (24 hours, what Redis keeps), got {}",
                query.minutes
            ),
        ));
    }
    let now = queue.now_ms().await.map_err(failed)?;
    let h = read_history(&queue, now, query.minutes)
        .await
        .map_err(failed)?;
    let mut v = serde_json::to_value(&h).map_err(failed)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("queue".into(), query.q.into());
        obj.insert("now_ms".into(), now.into());
    }
    Ok(axum::Json(v).into_response())
}

#[derive(Deserialize)]
struct OneJob {
    q: String,
    /// The id's bytes in hex (what the pages send): any id, exactly.
    #[serde(default)]
    id_hex: Option<String>,
    /// The id as text.
    #[serde(default)]
    id: Option<String>,
    /// The partition that holds it (as the lists give it); without it, the first
    /// partition that holds the id.
    #[serde(default)]
    part: Option<usize>,
}

impl OneJob {
    /// The id's bytes, and how messages show it (`hex:…` unless it is plain text).
    fn id(&self) -> Result<(Vec<u8>, String), ApiError> {
        let bytes = super::dead::id_of(self.id.as_deref(), self.id_hex.as_deref())
            .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, m))?;
        let shown = crate::queue::JobId::from(bytes.clone()).to_string();
        Ok((bytes, shown))
    }
}

async fn pause(
    State(console): State<Arc<Console>>,
    axum::Json(body): axum::Json<QueueOnly>,
) -> ApiResult {
    set_paused(&console, &body.q, true).await
}

async fn resume(
    State(console): State<Arc<Console>>,
    axum::Json(body): axum::Json<QueueOnly>,
) -> ApiResult {
    set_paused(&console, &body.q, false).await
}

async fn set_paused(console: &Console, q: &str, pause: bool) -> ApiResult {
    let (e, queue) = entry(console, q)?;
    // Every partition of a partitioned queue: workers claim from each.
    let mut changed = false;
    for (_, q) in super::api::members(&e, &queue, None)? {
        changed |= if pause {
            q.pause().await
        } else {
            q.resume().await
        }
        .map_err(failed)?;
    }
    let verb = if pause { "paused" } else { "resumed" };
    tracing::info!(queue = %queue.name(), changed, "console {verb} the queue");
    let message = match (pause, changed) {
        (true, true) => format!("paused {q}: workers claim nothing until it is resumed"),
        (true, false) => format!("{q} was paused already"),
        (false, true) => format!("resumed {q}: workers claim again"),
        (false, false) => format!("{q} was not paused"),
    };
    Ok(
        axum::Json(json!({"paused": pause, "changed": changed, "message": message}))
            .into_response(),
    )
}

/// `POST /api/job/run {q, id}`: a delayed job goes to the front of pending.
async fn run_now(
    State(console): State<Arc<Console>>,
    axum::Json(body): axum::Json<OneJob>,
) -> ApiResult {
    let (e, queue) = entry(&console, &body.q)?;
    let (id, shown) = body.id()?;
    let queue = holder(&e, &queue, body.part, &id).await?;
    let done = queue
        .run_now(&id)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    if !done {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("job {:?} is not delayed: nothing to run now", shown),
        ));
    }
    tracing::info!(queue = %queue.name(), id = %shown, "console ran a delayed job now");
    Ok(axum::Json(json!({
        "done": true,
        "message": format!("job {:?} is first in line now", shown),
    }))
    .into_response())
}

/// `POST /api/job/delete {q, id}`: one pending, delayed or dead job deleted; a leased
/// one is refused (its worker holds it).
async fn delete(
    State(console): State<Arc<Console>>,
    axum::Json(body): axum::Json<OneJob>,
) -> ApiResult {
    let (e, queue) = entry(&console, &body.q)?;
    let (id, shown) = body.id()?;
    let queue = holder(&e, &queue, body.part, &id).await?;
    let outcome = queue
        .delete_job(&id)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    match outcome {
        Deletion::Deleted(status) => {
            tracing::info!(queue = %queue.name(), id = %shown, %status, "console deleted a job");
            Ok(axum::Json(json!({
                "deleted": true,
                "status": status.as_str(),
                "message": format!("deleted {status} job {:?}", shown),
            }))
            .into_response())
        }
        Deletion::Kept(status) => Err(ApiError::new(
            StatusCode::CONFLICT,
            if status == "processing" {
                format!(
                    "job {:?} is leased (processing): a worker holds it, so it is not deleted",
                    shown
                )
            } else {
                format!(
                    "job {:?} is {status}: only pending, delayed and dead jobs are deleted",
                    shown
                )
            },
        )),
        Deletion::Absent => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no job {:?} in {}", body.id, queue.name()),
        )),
    }
}

/// The partition of a console queue that holds job `id` (`part` when given; the queue
/// itself when no partition holds it, so the write reports it absent).
async fn holder(
    e: &super::refresher::Entry,
    queue: &Queue,
    part: Option<usize>,
    id: &[u8],
) -> Result<Queue, ApiError> {
    Ok(match super::api::find_job(e, queue, part, id).await? {
        Some((_, q, _)) => q,
        None => match super::api::members(e, queue, part)?.into_iter().next() {
            Some((_, q)) => q,
            None => queue.clone(),
        },
    })
}
