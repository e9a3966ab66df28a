//! The routes: the pages (one HTML shell), the embedded assets, the JSON API under
//! `/api/` that the pages use and scripts can call (see docs/console.md), the payload
//! download, and the two writes (redrive, purge) through the protocol's scripts.
//!
//! Counts come from the refresher's snapshot, never from a `stats` call of a request;
//! lists (jobs next in line, leases, delayed and dead jobs, one job) are read per
//! request with plain reads, bounded by the page size.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Console;
use super::guard::{self, error};
use super::refresher::{Entry, health, rates};
use crate::cli::show::{JobView, Payload, find};
use crate::queue::{JobStatus, MAX_BATCH, Queue, Selection};

const SHELL: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The most jobs one page of a list holds.
const MAX_PAGE: usize = 200;
/// A search of the dead-letter set looks at this many dead jobs at most (oldest first).
const MAX_SEARCHED: usize = 20_000;
/// The largest offset a page takes (past it every list is empty anyway).
const MAX_OFFSET: usize = 1 << 40;
/// Dead jobs read per round trip while searching.
const SEARCH_CHUNK: usize = 500;

pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/queue", get(page))
        .route("/dead", get(page))
        .route("/job", get(page))
        .route("/login", get(login_page).post(login))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/api/overview", get(overview))
        .route("/api/queue", get(queue_page))
        .route("/api/dead", get(dead_page))
        .route("/api/job", get(job))
        .route("/api/payload", get(payload))
        .route("/api/dead/redrive", axum::routing::post(redrive))
        .route("/api/dead/purge", axum::routing::post(purge))
        .merge(super::ops::routes())
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
            .replace("{{source}}", &html_escape(&console.source.describe())),
    )
}

async fn login_page() -> Html<&'static str> {
    Html(LOGIN)
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// The login form: the token once, for a cookie holding the session value (HttpOnly,
/// SameSite=Strict); the token itself never goes into a cookie, a URL or a log.
async fn login(State(console): State<Arc<Console>>, Form(form): Form<LoginForm>) -> Response {
    let Some(token) = &console.config.token else {
        return Redirect::to("/").into_response();
    };
    if !guard::same(form.token.trim().as_bytes(), token.as_bytes()) {
        return (
            StatusCode::UNAUTHORIZED,
            Html(LOGIN.replace("<!--error-->", "<p class=\"bad\">Wrong token.</p>")),
        )
            .into_response();
    }
    let mut response = Redirect::to("/").into_response();
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/",
        guard::COOKIE,
        console.session
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
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
    let window = console.config.history;
    let s = e.stats.as_ref();
    let counts = s.map(|s| {
        json!({
            "pending": s.pending, "due": s.due, "processing": s.processing,
            "expired": s.expired, "delayed": s.delayed, "dead": s.dead,
            "orphaned": s.orphaned,
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
        "health": health(e, window),
        "error": e.error,
        "kube": e.kube,
    })
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
    #[serde(default)]
    search: Option<String>,
}

fn default_limit() -> usize {
    20
}

pub(super) type ApiResult = Result<Response, ApiError>;

/// A failed API call: its status and what went wrong, sent as `{"error": "..."}`.
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.status, self.message)
    }
}

pub(super) fn entry(console: &Console, id: &str) -> Result<(Entry, Queue), ApiError> {
    let snap = console.snapshot.get();
    let Some(e) = snap.entries.get(id) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no queue {id:?} in this console"),
        ));
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

pub(super) fn failed(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, e.to_string())
}

/// A job for a list: id, status, attempts, times, worker, last error, a payload preview.
fn job_row(view: &JobView) -> Result<Value, ApiError> {
    let mut v = view.json(Payload::Preview).map_err(failed)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("now_ms".into(), view.now.into());
        obj.insert("filed_at".into(), view.filed_at.into());
    }
    Ok(v)
}

/// Each id's job, as filed with `wanted` (a job that moved meanwhile is left out), with
/// the score it was listed with (run-at, lease end, time of death; none for pending):
/// one read of its hash per job and one of Redis's clock per list.
async fn rows(
    queue: &Queue,
    ids: Vec<(Vec<u8>, Option<i64>)>,
    wanted: JobStatus,
) -> Result<Vec<Value>, ApiError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let now = queue.now_ms().await.map_err(failed)?;
    let mut out = Vec::new();
    for (id, filed_at) in ids {
        let Some(info) = queue.job(&id).await.map_err(failed)? else {
            continue;
        };
        let view = JobView {
            info,
            filed_at,
            now,
            aside: None,
        };
        if view.status() != Some(wanted) {
            continue;
        }
        out.push(job_row(&view)?);
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
    let mut conn = queue.redis().clone();
    // Next in line is the list's tail: page `offset` counts from there.
    let start = -((offset + limit) as i64);
    let stop = -((offset + 1) as i64);
    let mut pending: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(&queue.keys().pending)
        .arg(start)
        .arg(stop)
        .query_async(&mut conn)
        .await
        .map_err(failed)?;
    pending.reverse();
    let pending = pending.into_iter().map(|id| (id, None)).collect();
    let pending = rows(&queue, pending, JobStatus::Pending).await?;
    let leases = queue.processing_ids(limit).await.map_err(failed)?;
    let leases = rows(&queue, scored(leases), JobStatus::Processing).await?;
    let delayed = queue.delayed_ids(limit).await.map_err(failed)?;
    let delayed = rows(&queue, scored(delayed), JobStatus::Delayed).await?;
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
    }))
    .into_response())
}

/// `GET /api/dead?q=TAG&offset=&limit=&search=`: a page of dead jobs, oldest death first;
/// with `search`, only those whose id or last error contains it (any case), looking at
/// the oldest `MAX_SEARCHED` dead jobs at most.
async fn dead_page(
    State(console): State<Arc<Console>>,
    Query(query): Query<QueueQuery>,
) -> ApiResult {
    let (e, queue) = entry(&console, &query.q)?;
    let limit = query.limit.clamp(1, MAX_PAGE);
    let offset = query.offset.min(MAX_OFFSET);
    let search = query
        .search
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase);
    let (ids, matched, scanned, truncated) = match &search {
        None => {
            let ids = queue.dead_ids(offset, limit).await.map_err(failed)?;
            (scored(ids), None, None, false)
        }
        Some(needle) => {
            let (matches, scanned, truncated) = search_dead(&queue, needle).await?;
            let total = matches.len();
            let ids = matches.into_iter().skip(offset).take(limit).collect();
            (ids, Some(total), Some(scanned), truncated)
        }
    };
    let jobs = rows(&queue, ids, JobStatus::Dead).await?;
    Ok(axum::Json(json!({
        "queue": entry_json(&console, &e),
        "writes": console.config.allow_writes,
        "offset": offset,
        "limit": limit,
        "search": search,
        "matched": matched,
        "scanned": scanned,
        "search_truncated": truncated,
        "jobs": jobs,
    }))
    .into_response())
}

/// The dead jobs whose id or last error contains `needle` (lowercase), oldest death
/// first; how many were looked at; whether the cap stopped the search.
async fn search_dead(
    queue: &Queue,
    needle: &str,
) -> Result<(Vec<(Vec<u8>, Option<i64>)>, usize, bool), ApiError> {
    let mut conn = queue.redis().clone();
    let mut matches = Vec::new();
    let mut scanned = 0;
    loop {
        let ids: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(&queue.keys().dead)
            .arg(scanned)
            .arg(scanned + SEARCH_CHUNK - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        if ids.is_empty() {
            return Ok((matches, scanned, false));
        }
        let mut pipe = redis::pipe();
        for (id, _) in &ids {
            pipe.cmd("HGET")
                .arg(queue.keys().job_key(id))
                .arg("last_error");
        }
        let errors: Vec<Option<Vec<u8>>> = pipe.query_async(&mut conn).await.map_err(failed)?;
        let n = ids.len();
        let lower = |b: &[u8]| String::from_utf8_lossy(b).to_lowercase();
        for ((id, died_at), err) in ids.into_iter().zip(errors) {
            if lower(&id).contains(needle) || err.is_some_and(|e| lower(&e).contains(needle)) {
                matches.push((id, Some(died_at as i64)));
            }
        }
        scanned += n;
        if n < SEARCH_CHUNK {
            return Ok((matches, scanned, false));
        }
        if scanned >= MAX_SEARCHED {
            return Ok((matches, scanned, true));
        }
    }
}

#[derive(Deserialize)]
struct JobQuery {
    q: String,
    id: String,
}

/// `GET /api/job?q=TAG&id=ID`: one job in any status: where it is, its whole hash (the
/// payload cut to a preview), and what can be done to it.
async fn job(State(console): State<Arc<Console>>, Query(query): Query<JobQuery>) -> ApiResult {
    let (_, queue) = entry(&console, &query.q)?;
    if query.id.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the job id is empty",
        ));
    }
    let Some(view) = find(&queue, query.id.as_bytes()).await.map_err(failed)? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no job {:?} in {}: never enqueued there, or gone (a done job is kept only \
                 with completed retention; a dead one until dead retention)",
                query.id,
                queue.name()
            ),
        ));
    };
    let mut row = job_row(&view)?;
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
    let (_, queue) = entry(&console, &query.q)?;
    let Some(info) = queue.job(query.id.as_bytes()).await.map_err(failed)? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no job {:?}", query.id),
        ));
    };
    let safe: String = query
        .id
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

/// The body of a write: some dead jobs by id, or all of them; `dry_run` only counts.
#[derive(Deserialize)]
struct DeadAction {
    q: String,
    #[serde(default)]
    ids: Vec<String>,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    dry_run: bool,
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

/// Redrive or purge through the protocol's scripts; a dry run says how many would be.
async fn act(console: &Console, body: DeadAction, action: Action) -> ApiResult {
    let (_, queue) = entry(console, &body.q)?;
    if body.all != body.ids.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give either \"ids\" (a non-empty list) or \"all\": true",
        ));
    }
    if body.ids.len() > MAX_BATCH {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("at most {MAX_BATCH} ids at once"),
        ));
    }
    let mut conn = queue.redis().clone();
    let dead_now: u64 = redis::cmd("ZCARD")
        .arg(&queue.keys().dead)
        .query_async(&mut conn)
        .await
        .map_err(failed)?;
    if body.dry_run {
        let would = if body.all {
            dead_now
        } else {
            let mut pipe = redis::pipe();
            for id in &body.ids {
                pipe.cmd("ZSCORE").arg(&queue.keys().dead).arg(id);
            }
            let scores: Vec<Option<f64>> = pipe.query_async(&mut conn).await.map_err(failed)?;
            scores.iter().filter(|s| s.is_some()).count() as u64
        };
        return Ok(axum::Json(json!({"would": would, "dead": dead_now})).into_response());
    }
    let apply = async |selection: Selection| match action {
        Action::Redrive => queue.redrive(&selection).await,
        Action::Purge => queue.purge(&selection).await,
    };
    let done = if body.all {
        // As many as are dead now (jobs that die meanwhile wait for the next time).
        let mut left = dead_now;
        let mut done = 0;
        while left > 0 {
            let n = left.min(MAX_BATCH as u64);
            let moved = apply(Selection::Oldest(n as usize)).await.map_err(failed)?;
            done += moved;
            left -= n;
            if moved == 0 {
                break;
            }
        }
        done
    } else {
        apply(Selection::Ids(body.ids.clone()))
            .await
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?
    };
    let verb = match action {
        Action::Redrive => "redrove",
        Action::Purge => "purged",
    };
    tracing::info!(queue = %queue.name(), done, "console {verb} dead jobs");
    Ok(axum::Json(json!({"done": done, "verb": verb})).into_response())
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
