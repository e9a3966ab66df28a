//! The routes: the pages (one HTML shell), the embedded assets, the JSON API under
//! `/api/` that the pages use and scripts can call (see docs/console.md), the payload
//! download, and the two writes (redrive, purge) through the protocol's scripts.
//!
//! Counts come from the refresher's snapshot, never from a `stats` call of a request;
//! lists (jobs next in line, leases, delayed and dead jobs, one job) are read per
//! request with plain reads, bounded by the page size.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Console;
use super::dead::{self, Position};
use super::guard::{self, error};
use super::live;
use super::refresher::{Entry, rates};
use crate::queue::view::{JobView, Payload, find};
use crate::queue::{JobStatus, MAX_BATCH, Queue, Selection};

const SHELL: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The most jobs one page of a list holds.
const MAX_PAGE: usize = 200;
/// The largest offset a page takes (past it every list is empty anyway).
const MAX_OFFSET: usize = 1 << 40;

pub fn router(console: Arc<Console>, more: Router<Arc<Console>>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/queue", get(page))
        .route("/dead", get(page))
        .route("/job", get(page))
        .route(
            "/login",
            get(super::auth::login_page).post(super::auth::login),
        )
        .route("/logout", axum::routing::post(super::auth::logout))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/api/overview", get(overview))
        .route("/api/health", get(health_api))
        .route("/api/queue", get(queue_page))
        .route("/api/dead", get(dead_page))
        .route("/api/job", get(job))
        .route("/api/payload", get(payload))
        .route("/api/dead/redrive", axum::routing::post(redrive))
        .route("/api/dead/purge", axum::routing::post(purge))
        .merge(more)
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            guard::guard,
        ))
        .with_state(console)
}

/// Text made safe to place in HTML (element content or a quoted attribute).
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(super) async fn page(State(console): State<Arc<Console>>) -> Html<String> {
    Html(
        SHELL
            .replace("{{csrf}}", &html_escape(&console.csrf))
            .replace(
                "{{writes}}",
                if console.config.allow_writes {
                    "true"
                } else {
                    "false"
                },
            )
            .replace(
                "{{refresh_ms}}",
                &console.config.refresh.as_millis().to_string(),
            )
            .replace("{{source}}", &html_escape(&console.source.describe()))
            .replace(
                "{{auth}}",
                if console.config.token.is_some() {
                    "true"
                } else {
                    "false"
                },
            ),
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// One queue as the overview and the queue page show it.
fn entry_json(console: &Console, e: &Entry) -> Value {
    let rules = live::Rules::new(console.config.refresh, console.config.history);
    let now = std::time::Instant::now();
    let s = e.stats.as_ref();
    let counts = s.map(|s| {
        json!({
            "pending": s.pending, "due": s.due, "processing": s.processing,
            "expired": s.expired, "delayed": s.delayed, "dead": s.dead,
            "orphaned": s.orphaned, "pending_by_priority": s.pending_by_priority,
        })
    });
    let paused = s.map(|s| json!({"paused": s.paused, "paused_at": s.paused_at}));
    let totals = s.map(|s| {
        json!({
            "enqueued": s.enqueued, "claimed": s.claimed, "acked": s.acked,
            "failed": s.failed, "retried": s.retried, "reaped": s.reaped,
            "dead_lettered": s.dead_lettered, "stale": s.stale, "redriven": s.redriven,
            "purged": s.purged,
        })
    });
    let ms = |q: f64| {
        s.and_then(|s| s.histogram.quantile(q))
            .map(|d| (d.as_secs_f64() * 1_000_000.0).round() / 1000.0)
    };
    let latency_note = match s {
        None => Some("not read yet"),
        Some(s) if s.histogram.total() == 0 => Some("no acks yet: no processing times"),
        Some(_) => None,
    };
    let series = rates(&e.history);
    let col = |i: usize| -> Vec<f64> {
        series
            .iter()
            .map(|r| match i {
                0 => r.1,
                1 => r.2,
                _ => r.3,
            })
            .collect()
    };
    json!({
        "id": e.id,
        "name": e.queue.as_ref().map(|q| q.name().to_string()),
        "endpoint": e.queue.as_ref().map(|q| q.redis().endpoint().to_string()),
        "counts": counts,
        "pause": paused,
        "totals": totals,
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "latency_note": latency_note,
        "rates": {
            "at_ms": series.iter().map(|r| r.0).collect::<Vec<_>>(),
            "enqueued": col(0),
            "acked": col(1),
            "failed": col(2),
        },
        "health": live::health_of(&live::Reading::of(e, now), &rules),
        "error": e.error,
        "freshness": freshness(console, e, now),
        "kube": e.kube,
    })
}

/// How old a queue's counts are: `age_ms` (this host's monotonic clock since the reply
/// came), `read_at_ms` (the Redis clock the reply carried), `stale` past the rule's
/// limit, and the oldest pending job's age (the queue's latency).
fn freshness(console: &Console, e: &Entry, now: std::time::Instant) -> Value {
    let rules = live::Rules::new(console.config.refresh, console.config.history);
    let age = e.read_at.map(|at| now.saturating_duration_since(at));
    json!({
        "age_ms": age.map(|a| a.as_millis() as u64),
        "read_at_ms": e.stats.as_ref().map(|s| s.time_ms).filter(|t| *t > 0),
        "stale": age.is_none_or(|a| a > rules.stale_after) || e.error.is_some(),
        "stale_after_ms": rules.stale_after.as_millis() as u64,
        "oldest_pending_ms": e.stats.as_ref().and_then(|s| s.oldest_pending_ms),
    })
}

/// `GET /api/health`: what every page shows at its top, from the snapshot (no Redis
/// call, so it answers while Redis does not): the outage, if any, and each Redis
/// server's health (memory, eviction policy, persistence, clients).
async fn health_api(State(console): State<Arc<Console>>) -> Response {
    let snap = console.snapshot.get();
    let rules = live::Rules::new(console.config.refresh, console.config.history);
    let now = std::time::Instant::now();
    let started = snap.started.unwrap_or(now);
    let redis: Vec<Value> = snap
        .redis
        .values()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            if let Some(obj) = v.as_object_mut() {
                obj.insert(
                    "age_ms".into(),
                    r.probed_at
                        .map(|at| now.saturating_duration_since(at).as_millis() as u64)
                        .into(),
                );
            }
            v
        })
        .collect();
    axum::Json(json!({
        "outage": live::outage(&snap, now, started, &rules),
        "redis": redis,
        "refreshes": snap.seq,
        "refresh_ms": console.config.refresh.as_millis() as u64,
        "stale_after_ms": rules.stale_after.as_millis() as u64,
    }))
    .into_response()
}

/// `GET /api/overview`: every queue from the snapshot (no Redis call).
async fn overview(State(console): State<Arc<Console>>) -> Response {
    let snap = console.snapshot.get();
    let queues: Vec<Value> = snap
        .entries
        .values()
        .map(|e| entry_json(&console, e))
        .collect();
    axum::Json(json!({
        "refreshed_at_ms": snap.at_ms,
        "refreshes": snap.seq,
        "stats_calls": snap.stats_calls,
        "refresh_ms": console.config.refresh.as_millis() as u64,
        "history_ms": console.config.history.as_millis() as u64,
        "writes": console.config.allow_writes,
        "source": console.source.describe(),
        "error": snap.error,
        "queues": queues,
    }))
    .into_response()
}

#[derive(Deserialize)]
struct QueueQuery {
    q: String,
    #[serde(default)]
    offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    20
}

pub(super) type ApiResult = Result<Response, ApiError>;

/// A failed API call: its status and what went wrong, sent as `{"error": "..."}`.
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// A word for scripts and the pages (`"no_such_queue"`), beside the message.
    code: Option<&'static str>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            code: None,
        }
    }

    fn code(self, code: &'static str) -> ApiError {
        ApiError {
            code: Some(code),
            ..self
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self.code {
            Some(code) => (
                self.status,
                axum::Json(json!({ "error": self.message, "code": code })),
            )
                .into_response(),
            None => error(self.status, self.message),
        }
    }
}

pub(super) fn entry(console: &Console, id: &str) -> Result<(Entry, Queue), ApiError> {
    let snap = console.snapshot.get();
    let Some(e) = snap.entries.get(id) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no queue {id:?} in this console"),
        )
        .code("no_such_queue"));
    };
    match &e.queue {
        Some(q) => Ok((e.clone(), q.clone())),
        None => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "queue {id:?} cannot be read: {}",
                e.error.as_deref().unwrap_or("not reached")
            ),
        )),
    }
}

/// The queues a console queue's lists and actions cover, each with its partition's
/// index (`None` for a queue of one partition): every partition of a partitioned queue
/// (in the order `jobqueue stats` lists them), or only `part` when it is given.
pub(super) fn members(
    e: &Entry,
    queue: &Queue,
    part: Option<usize>,
) -> Result<Vec<(Option<usize>, Queue)>, ApiError> {
    if e.parts.is_empty() {
        return match part {
            None | Some(0) => Ok(vec![(None, queue.clone())]),
            Some(p) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("part {p}: queue {:?} has one partition (part 0)", e.id),
            )),
        };
    }
    match part {
        None => Ok(e
            .parts
            .iter()
            .enumerate()
            .map(|(i, q)| (Some(i), q.clone()))
            .collect()),
        Some(p) => match e.parts.get(p) {
            Some(q) => Ok(vec![(Some(p), q.clone())]),
            None => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "part {p}: queue {:?} has {} partitions (part 0 to {})",
                    e.id,
                    e.parts.len(),
                    e.parts.len() - 1
                ),
            )),
        },
    }
}

/// The job `id` of a console queue: in partition `part`, or in the first partition
/// that holds it; with that partition's index and queue.
pub(super) async fn find_job(
    e: &Entry,
    queue: &Queue,
    part: Option<usize>,
    id: &[u8],
) -> Result<Option<(Option<usize>, Queue, JobView)>, ApiError> {
    for (p, q) in members(e, queue, part)? {
        if let Some(view) = find(&q, id).await.map_err(failed)? {
            return Ok(Some((p, q, view)));
        }
    }
    Ok(None)
}

pub(super) fn failed(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, e.to_string())
}

/// A job for a list: id, status, attempts, times, worker, last error, a payload preview.
/// `part`: the partition that holds it (`None` for a queue of one partition).
fn job_row(view: &JobView, part: Option<usize>) -> Result<Value, ApiError> {
    let mut v = view.json(Payload::Preview).map_err(failed)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("part".into(), part.into());
        obj.insert("now_ms".into(), view.now.into());
        obj.insert("filed_at".into(), view.filed_at.into());
        add_id_fields(obj, view.info.id.as_bytes());
    }
    Ok(v)
}

/// Every id travels as its bytes in hex (`id_hex`: links, selections, writes) and is
/// shown as `id_shown`: its text, or `hex:…` when the text would be ambiguous
/// (`id_plain` false).
fn add_id_fields(obj: &mut serde_json::Map<String, Value>, id: &[u8]) {
    let (shown, plain) = dead::shown(id);
    obj.insert("id_hex".into(), hex::encode(id).into());
    obj.insert("id_shown".into(), shown.into());
    obj.insert("id_plain".into(), plain.into());
}

/// Each id's job, as filed with `wanted` (a job that moved meanwhile is left out), with
/// the score it was listed with (run-at, lease end, time of death; none for pending):
/// one call of the preview script per list (each payload read as its first bytes only)
/// and one read of Redis's clock.
async fn rows(
    queue: &Queue,
    part: Option<usize>,
    ids: Vec<(Vec<u8>, Option<i64>)>,
    wanted: JobStatus,
) -> Result<Vec<Value>, ApiError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let now = queue.now_ms().await.map_err(failed)?;
    let refs: Vec<&[u8]> = ids.iter().map(|(id, _)| id.as_slice()).collect();
    let read = queue
        .previews(&refs, dead::PREVIEW_READ)
        .await
        .map_err(failed)?;
    let mut out = Vec::new();
    for ((_, filed_at), read) in ids.iter().zip(read) {
        let Some((info, len)) = read else {
            continue;
        };
        let view = JobView {
            info,
            filed_at: *filed_at,
            now,
            aside: None,
            payload_len: Some(len),
        };
        if view.status() != Some(wanted) {
            continue;
        }
        out.push(job_row(&view, part)?);
    }
    Ok(out)
}

/// Ids with their scores, as `rows` takes them.
fn scored(ids: Vec<(crate::queue::JobId, i64)>) -> Vec<(Vec<u8>, Option<i64>)> {
    ids.into_iter()
        .map(|(id, at)| (id.as_bytes().to_vec(), Some(at)))
        .collect()
}

/// `GET /api/queue?q=TAG&offset=&limit=`: the queue's counts and rates (snapshot), its
/// settings (`meta`), a page of the jobs next in line, the leases ending first and the
/// delayed jobs due first.
async fn queue_page(
    State(console): State<Arc<Console>>,
    Query(query): Query<QueueQuery>,
) -> ApiResult {
    let (e, queue) = entry(&console, &query.q)?;
    let limit = query.limit.clamp(1, MAX_PAGE);
    let offset = query.offset.min(MAX_OFFSET);
    let settings = queue.settings().await.map_err(failed)?;
    // A partitioned queue's pending jobs page as one list, partition after partition
    // (each next in line first); its leases and delayed jobs are those ending or due
    // first over all partitions.
    let mut pending = Vec::new();
    let mut leases = Vec::new();
    let mut delayed = Vec::new();
    let mut skip = offset;
    let members = members(&e, &queue, None)?;
    for (part, q) in members {
        if pending.len() < limit {
            // Where a page starts across partitions needs each one's length: the page
            // read answers it, over every priority's list (highest priority first).
            let (ids, len) = q
                .pending_page(skip, limit - pending.len())
                .await
                .map_err(failed)?;
            skip = skip.saturating_sub(len);
            let ids = ids
                .into_iter()
                .map(|id| (id.into_bytes().to_vec(), None))
                .collect();
            pending.extend(rows(&q, part, ids, JobStatus::Pending).await?);
        }
        let held = q.processing_ids(limit).await.map_err(failed)?;
        leases.extend(rows(&q, part, scored(held), JobStatus::Processing).await?);
        let due = q.delayed_ids(limit).await.map_err(failed)?;
        delayed.extend(rows(&q, part, scored(due), JobStatus::Delayed).await?);
    }
    for list in [&mut leases, &mut delayed] {
        list.sort_by_key(|row| row["filed_at"].as_i64());
        list.truncate(limit);
    }
    let (schedules, schedules_error) = match queue.schedules().await {
        Ok(all) => (all.iter().map(schedule_json).collect::<Vec<_>>(), None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let settings: Vec<Value> = settings
        .to_fields()
        .into_iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    Ok(axum::Json(json!({
        "queue": entry_json(&console, &e),
        "writes": console.config.allow_writes,
        "settings": settings,
        "offset": offset,
        "limit": limit,
        "pending": pending,
        "leases": leases,
        "delayed": delayed,
        "schedules": schedules,
        "schedules_error": schedules_error,
    }))
    .into_response())
}

/// A schedule as the queue page lists it: its rule in words and its last and next tick.
fn schedule_json(s: &crate::queue::schedule::ScheduleInfo) -> Value {
    use crate::queue::schedule::Rule;
    let rule = match &s.rule {
        Rule::Every(d) => format!("every {}", crate::duration::format(*d)),
        Rule::Cron { expr, tz } => format!("cron {expr} ({tz})"),
    };
    json!({
        "name": s.name,
        "rule": rule,
        "missed": s.missed.as_str(),
        "paused": s.paused,
        "last_tick": s.last_tick,
        "next_tick": s.next_tick,
        "last_job": s.last_job,
    })
}

#[derive(Deserialize)]
struct DeadQuery {
    q: String,
    #[serde(default)]
    offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
    #[serde(default)]
    search: Option<String>,
    /// Where to go on from: the `next_cursor` of the page before.
    #[serde(default)]
    cursor: Option<String>,
    /// Jump to a time: the jobs that died at this time (ms) or before.
    #[serde(default)]
    before_ms: Option<i64>,
}

/// The search of a request: trimmed, lowercase, `None` when empty.
fn needle(search: Option<&str>) -> Option<String> {
    search
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase)
}

/// `GET /api/dead?q=TAG&limit=&search=&cursor=&before_ms=`: a page of dead jobs, newest
/// death first, from `cursor` (the `next_cursor` of the page before), else from
/// `before_ms`, else from the newest (`offset` passes that many first); with `search`,
/// only those whose id, last error or payload's first 4 KiB contain it (any case),
/// looking at 5,000 dead jobs at most per request: `next_cursor` goes on from there.
async fn dead_page(
    State(console): State<Arc<Console>>,
    Query(query): Query<DeadQuery>,
) -> ApiResult {
    let (e, queue) = entry(&console, &query.q)?;
    let limit = query.limit.clamp(1, MAX_PAGE);
    let search = needle(query.search.as_deref());
    if !e.parts.is_empty() {
        return dead_page_of_parts(&console, &e, &queue, &query, limit, search).await;
    }
    let from = match (&query.cursor, query.before_ms) {
        (Some(c), _) if !c.is_empty() => {
            Position::parse(c).map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, m))?
        }
        (_, Some(ms)) => Position {
            score: Some(ms),
            skip: query.offset.min(MAX_OFFSET),
        },
        _ => Position {
            score: None,
            skip: query.offset.min(MAX_OFFSET),
        },
    };
    let page = dead::page(&queue, from, limit, search.as_deref(), dead::BUDGET)
        .await
        .map_err(failed)?;
    let jobs = page
        .jobs
        .iter()
        .map(|j| job_row(j, None))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(axum::Json(json!({
        "queue": entry_json(&console, &e),
        "writes": console.config.allow_writes,
        "limit": limit,
        "search": search,
        "cursor": from.encode(),
        "next_cursor": page.next.map(|p| p.encode()),
        "looked_at": page.looked_at,
        "jobs": jobs,
    }))
    .into_response())
}

/// `GET /api/dead` of a partitioned queue: each partition's page from its position in
/// the cursor (one per partition, see `dead::encode_all`), merged newest death first;
/// each partition goes on after the last of its jobs the page took. A search looks at
/// `dead::BUDGET` dead jobs over all partitions at most.
async fn dead_page_of_parts(
    console: &Console,
    e: &Entry,
    queue: &Queue,
    query: &DeadQuery,
    limit: usize,
    search: Option<String>,
) -> ApiResult {
    let parts = members(e, queue, None)?;
    let from: Vec<Option<Position>> = match (&query.cursor, query.before_ms) {
        (Some(c), _) if !c.is_empty() => dead::parse_all(c, parts.len())
            .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, m))?,
        (_, ms) => vec![Some(Position { score: ms, skip: 0 }); parts.len()],
    };
    let budget = (dead::BUDGET / parts.len()).max(limit);
    let mut next = from.clone();
    let mut looked_at = 0;
    // (time of death, partition, index in that partition's page, row)
    let mut found: Vec<(i64, usize, usize, Value)> = Vec::new();
    let mut pages = Vec::new();
    for (i, ((part, q), at)) in parts.iter().zip(&from).enumerate() {
        let Some(at) = at else {
            pages.push(None);
            continue;
        };
        let page = dead::page(q, *at, limit, search.as_deref(), budget)
            .await
            .map_err(failed)?;
        looked_at += page.looked_at;
        for (k, j) in page.jobs.iter().enumerate() {
            found.push((j.filed_at.unwrap_or(0), i, k, job_row(j, *part)?));
        }
        pages.push(Some(page));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    found.truncate(limit);
    for (i, page) in pages.iter().enumerate() {
        let Some(page) = page else { continue };
        let taken = found.iter().filter(|f| f.1 == i).count();
        next[i] = if taken == page.jobs.len() {
            // All its jobs shown: on from where its page stopped.
            page.next
        } else if taken > 0 {
            Some(page.after[taken - 1])
        } else {
            from[i]
        };
    }
    let more = next.iter().any(Option::is_some);
    let jobs: Vec<Value> = found.into_iter().map(|f| f.3).collect();
    Ok(axum::Json(json!({
        "queue": entry_json(console, e),
        "writes": console.config.allow_writes,
        "limit": limit,
        "search": search,
        "cursor": dead::encode_all(&from),
        "next_cursor": more.then(|| dead::encode_all(&next)),
        "looked_at": looked_at,
        "parts": parts.len(),
        "jobs": jobs,
    }))
    .into_response())
}

#[derive(Deserialize)]
struct JobQuery {
    q: String,
    /// The id as text (what the lookup form takes).
    #[serde(default)]
    id: Option<String>,
    /// The id's bytes in hex (what the pages' links carry): any id, exactly.
    #[serde(default)]
    id_hex: Option<String>,
    /// The partition that holds it (as the lists give it); without it, the first
    /// partition that holds the id.
    #[serde(default)]
    part: Option<usize>,
}

impl JobQuery {
    fn id(&self) -> Result<Vec<u8>, ApiError> {
        dead::id_of(self.id.as_deref(), self.id_hex.as_deref())
            .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, m))
    }
}

/// `GET /api/job?q=TAG&id=ID`: one job in any status: where it is, its whole hash (the
/// payload cut to a preview), and what can be done to it.
async fn job(State(console): State<Arc<Console>>, Query(query): Query<JobQuery>) -> ApiResult {
    let (e, queue) = entry(&console, &query.q)?;
    let id = query.id()?;
    let Some((part, _, view)) = find_job(&e, &queue, query.part, &id).await? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no job {} in {}: never enqueued there, or gone (a done job is kept only \
                 with completed retention; a dead one until dead retention)",
                dead::shown(&id).0,
                queue.name()
            ),
        ));
    };
    let mut row = job_row(&view, part)?;
    let dead = view.status() == Some(JobStatus::Dead);
    let actions: Vec<&str> = if dead && console.config.allow_writes {
        vec!["redrive", "purge"]
    } else {
        Vec::new()
    };
    let note = match view.status() {
        Some(JobStatus::Dead) if !console.config.allow_writes => {
            "dead: the console is read-only (start it with --allow-writes to redrive or purge)"
        }
        Some(JobStatus::Dead) => "dead: it can be redriven (back to pending) or purged",
        Some(JobStatus::Pending) => "pending: the next claim of a worker may take it",
        Some(JobStatus::Processing) => "processing: a worker holds its lease",
        Some(JobStatus::Delayed) => "delayed: it moves to pending when due",
        Some(JobStatus::Done) => "done: kept by completed retention",
        None if view.info.status.as_deref() == Some("cancelled") => {
            "cancelled: kept by completed retention"
        }
        None => "in no status the protocol knows",
    };
    if let Some(obj) = row.as_object_mut() {
        obj.insert("actions".into(), json!(actions));
        obj.insert("note".into(), note.into());
        obj.insert("queue".into(), query.q.clone().into());
    }
    Ok(axum::Json(row).into_response())
}

/// `GET /api/payload?q=TAG&id=ID`: the whole payload, byte for byte, as a download.
async fn payload(State(console): State<Arc<Console>>, Query(query): Query<JobQuery>) -> ApiResult {
    let (e, queue) = entry(&console, &query.q)?;
    let id = query.id()?;
    let mut info = None;
    for (_, q) in members(&e, &queue, query.part)? {
        info = q.job(&id).await.map_err(failed)?;
        if info.is_some() {
            break;
        }
    }
    let Some(info) = info else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no job {}", dead::shown(&id).0),
        ));
    };
    let safe: String = dead::shown(&id)
        .0
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"job-{safe}.bin\""),
            ),
        ],
        info.payload,
    )
        .into_response())
}

/// The body of a write: some dead jobs by id (`ids_hex`: their bytes in hex, as the
/// pages send them, each in the partition `parts` gives at the same place; or `ids` as
/// text), every one, or (dry run only) those a search matches; `dry_run` only counts,
/// and names the exact set a write should then send.
#[derive(Deserialize)]
struct DeadAction {
    q: String,
    #[serde(default)]
    ids: Vec<String>,
    #[serde(default)]
    ids_hex: Vec<String>,
    /// The partition of each id of `ids_hex` (as the lists and the dry run give it);
    /// without it an id is looked for in every partition.
    #[serde(default)]
    parts: Vec<usize>,
    #[serde(default)]
    all: bool,
    /// With `all`: only the jobs that died at this time (ms) or before, as the dry run
    /// gave it: a job dying after the count is not moved.
    #[serde(default)]
    until_ms: Option<i64>,
    /// With `all`: at most this many (the dry run's count).
    #[serde(default)]
    count: Option<u64>,
    /// Dry run only: the dead jobs this search matches (as `GET /api/dead` searches).
    #[serde(default)]
    search: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// An id's bytes, with the partition that holds it when one is named.
type NamedId = (Vec<u8>, Option<usize>);

impl DeadAction {
    /// The ids named, as bytes, each with its partition when one is given.
    fn id_bytes(&self) -> Result<Vec<NamedId>, ApiError> {
        if !self.parts.is_empty() && self.parts.len() != self.ids_hex.len() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "\"parts\" names {} partitions for {} ids in \"ids_hex\": give one per id, \
                     or none",
                    self.parts.len(),
                    self.ids_hex.len()
                ),
            ));
        }
        let mut out: Vec<NamedId> = self
            .ids
            .iter()
            .map(|i| (i.as_bytes().to_vec(), None))
            .collect();
        for (k, h) in self.ids_hex.iter().enumerate() {
            out.push((
                dead::id_of(None, Some(h))
                    .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, m))?,
                self.parts.get(k).copied(),
            ));
        }
        Ok(out)
    }
}

#[derive(Clone, Copy)]
enum Action {
    Redrive,
    Purge,
}

async fn redrive(
    State(console): State<Arc<Console>>,
    axum::Json(body): axum::Json<DeadAction>,
) -> ApiResult {
    act(&console, body, Action::Redrive).await
}

async fn purge(
    State(console): State<Arc<Console>>,
    axum::Json(body): axum::Json<DeadAction>,
) -> ApiResult {
    act(&console, body, Action::Purge).await
}

async fn apply(queue: &Queue, selection: Selection, action: Action) -> Result<u64, ApiError> {
    match action {
        Action::Redrive => queue.redrive(&selection).await,
        Action::Purge => queue.purge(&selection).await,
    }
    .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))
}

/// Redrive or purge through the protocol's scripts, in every partition of a
/// partitioned queue; a dry run says how many would be, and which: the ids (`ids_hex`,
/// with their partitions in `parts`) of a search's matches, the time bound
/// (`until_ms`) of all.
async fn act(console: &Console, body: DeadAction, action: Action) -> ApiResult {
    let (e, queue) = entry(console, &body.q)?;
    let ids = body.id_bytes()?;
    let search = needle(body.search.as_deref());
    let forms = [!ids.is_empty(), body.all, search.is_some()];
    if forms.iter().filter(|f| **f).count() != 1 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give either \"ids_hex\" or \"ids\" (a non-empty list), or \"all\": true, or \
             (dry run) a \"search\"",
        ));
    }
    if search.is_some() && !body.dry_run {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "\"search\" is for a dry run: send the \"ids_hex\" it gives, so what moves is \
             exactly what was counted",
        ));
    }
    if ids.len() > dead::MAX_SELECTED {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("at most {} ids at once", dead::MAX_SELECTED),
        ));
    }
    let members = members(&e, &queue, None)?;
    // Each id's partitions: the one named, or every one.
    let mut per_part: Vec<Vec<Vec<u8>>> = vec![Vec::new(); members.len()];
    for (id, part) in &ids {
        match part {
            Some(p) => {
                let k = members
                    .iter()
                    .position(|(m, _)| m.unwrap_or(0) == *p)
                    .ok_or_else(|| {
                        ApiError::new(
                            StatusCode::BAD_REQUEST,
                            format!(
                                "part {p}: queue {:?} has {} partitions",
                                e.id,
                                members.len()
                            ),
                        )
                    })?;
                per_part[k].push(id.clone());
            }
            None => per_part.iter_mut().for_each(|list| list.push(id.clone())),
        }
    }
    let mut dead_each = Vec::new();
    for (_, q) in &members {
        let mut conn = q.redis().clone();
        let n: u64 = redis::cmd("ZCARD")
            .arg(&q.keys().dead)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        dead_each.push(n);
    }
    let dead_now: u64 = dead_each.iter().sum();
    if body.dry_run {
        if let Some(needle) = &search {
            let mut hexes: Vec<String> = Vec::new();
            let mut parts: Vec<usize> = Vec::new();
            for (part, q) in &members {
                let matched = dead::all_matches(q, needle)
                    .await
                    .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, m))?;
                parts.extend(std::iter::repeat_n(part.unwrap_or(0), matched.len()));
                hexes.extend(matched.iter().map(hex::encode));
                if hexes.len() > dead::MAX_SELECTED {
                    return Err(ApiError::new(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "more than {} dead jobs match: narrow the search",
                            dead::MAX_SELECTED
                        ),
                    ));
                }
            }
            return Ok(axum::Json(json!({
                "would": hexes.len(), "dead": dead_now, "ids_hex": hexes, "parts": parts,
            }))
            .into_response());
        }
        if body.all {
            // The newest death now: a write bound by it moves none that die later.
            let mut until: Option<i64> = None;
            for (_, q) in &members {
                let mut conn = q.redis().clone();
                let newest: Vec<(Vec<u8>, f64)> = redis::cmd("ZREVRANGE")
                    .arg(&q.keys().dead)
                    .arg(0)
                    .arg(0)
                    .arg("WITHSCORES")
                    .query_async(&mut conn)
                    .await
                    .map_err(failed)?;
                if let Some((_, s)) = newest.first() {
                    until = until.max(Some(*s as i64));
                }
            }
            return Ok(
                axum::Json(json!({"would": dead_now, "dead": dead_now, "until_ms": until}))
                    .into_response(),
            );
        }
        let mut would = 0;
        for ((_, q), ids) in members.iter().zip(&per_part) {
            let mut conn = q.redis().clone();
            for chunk in ids.chunks(MAX_BATCH) {
                let mut pipe = redis::pipe();
                for id in chunk {
                    pipe.cmd("ZSCORE").arg(&q.keys().dead).arg(id);
                }
                let scores: Vec<Option<f64>> = pipe.query_async(&mut conn).await.map_err(failed)?;
                would += scores.iter().filter(|s| s.is_some()).count() as u64;
            }
        }
        return Ok(axum::Json(json!({"would": would, "dead": dead_now})).into_response());
    }
    let mut done = 0;
    let mut budget = body.count.unwrap_or(dead_now);
    for (((_, q), ids), dead_here) in members.iter().zip(&per_part).zip(&dead_each) {
        if body.all {
            match body.until_ms {
                Some(until) => {
                    let moved = bounded_all(q, until, budget, action).await?;
                    budget = budget.saturating_sub(moved);
                    done += moved;
                }
                None => {
                    // As many as are dead now (jobs that die meanwhile wait for the next
                    // time).
                    let mut left = *dead_here;
                    while left > 0 {
                        let n = left.min(MAX_BATCH as u64);
                        let moved = apply(q, Selection::Oldest(n as usize), action).await?;
                        done += moved;
                        left -= n;
                        if moved == 0 {
                            break;
                        }
                    }
                }
            }
        } else {
            for chunk in ids.chunks(MAX_BATCH) {
                done += apply(q, Selection::IdBytes(chunk.to_vec()), action).await?;
            }
        }
    }
    let verb = match action {
        Action::Redrive => "redrove",
        Action::Purge => "purged",
    };
    tracing::info!(queue = %queue.name(), done, "console {verb} dead jobs");
    super::audit::write_done(queue.name(), verb, done);
    Ok(axum::Json(json!({"done": done, "verb": verb})).into_response())
}

/// Every job that died at `until` ms or before, oldest first, `count` at most, by id
/// (the protocol's `ids` form: one that is no longer dead is not moved).
async fn bounded_all(
    queue: &Queue,
    until: i64,
    count: u64,
    action: Action,
) -> Result<u64, ApiError> {
    let mut conn = queue.redis().clone();
    let mut done = 0;
    let mut left = count;
    while left > 0 {
        let ids: Vec<Vec<u8>> = redis::cmd("ZRANGEBYSCORE")
            .arg(&queue.keys().dead)
            .arg("-inf")
            .arg(until)
            .arg("LIMIT")
            .arg(0)
            .arg(left.min(MAX_BATCH as u64))
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        if ids.is_empty() {
            break;
        }
        let n = ids.len() as u64;
        let selection = Selection::IdBytes(ids);
        let moved = match action {
            Action::Redrive => queue.redrive(&selection).await,
            Action::Purge => queue.purge(&selection).await,
        }
        .map_err(failed)?;
        done += moved;
        left -= n;
        if moved == 0 {
            break;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            html_escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
    }
}
