// The jobqueue console's pages: plain script, no build step, nothing fetched from
// elsewhere. Every value from the API is put into the page as text (textContent), never
// as markup, so a payload or an error holding `<script>` is shown, not run.
"use strict";

const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
const CSRF = meta("csrf-token");
const WRITES = meta("writes") === "true";
const REFRESH_MS = Math.max(500, Number(meta("refresh-ms")) || 2000);
const params = new URLSearchParams(location.search);

// An element with attributes and children (strings become text nodes).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path) {
  const res = await fetch(path, { credentials: "same-origin" });
  const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw apiError(res, body);
  return body;
}

async function post(path, body) {
  const res = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF },
    body: JSON.stringify(body),
  });
  const reply = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw apiError(res, reply);
  return reply;
}

const qs = (o) => new URLSearchParams(o).toString();
const queueLink = (id) => `/queue?${qs({ q: id })}`;
const deadLink = (id) => `/dead?${qs({ q: id })}`;
// A job's link names its id by its bytes in hex, so two ids that look alike never share
// a page (and an id with control characters or bytes that are not UTF-8 has one).
// In a partitioned queue it names the partition that holds the job too (`part`).
const withPart = (o, part) => (part === null || part === undefined ? o : { ...o, part });
const jobLink = (q, idHex, part) => `/job?${qs(withPart({ q, id_hex: idHex }, part))}`;

// A job's id as shown: its text, or `hex:…` (styled apart) when the text would be
// ambiguous; the link carries the exact bytes.
function idLink(q, j) {
  return h("a", {
    href: jobLink(q, j.id_hex, j.part),
    class: j.id_plain ? null : "hexid",
    title: j.id_plain ? null : "this id is not plain text: shown as its bytes in hex",
  }, j.id_shown);
}

// The lookup form's text: `hex:…` names an id by its bytes, anything else is the id.
function lookupLink(q, text) {
  const m = /^hex:([0-9a-fA-F]+)$/.exec(text);
  if (m && m[1].length % 2 === 0) return jobLink(q, m[1].toLowerCase());
  return `/job?${qs({ q, id: text })}`;
}

function fmtTime(ms) {
  if (ms === null || ms === undefined) return "-";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function fmtDur(ms) {
  ms = Math.abs(ms);
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${Math.round(s % 60)}s`;
  return `${Math.floor(m / 60)}h${m % 60}m`;
}

const fmtRate = (r) => (r >= 10 ? r.toFixed(0) : r.toFixed(1));
const fmtMs = (ms) => (ms === null || ms === undefined ? "-" : fmtDur(ms));

function setStatus(text, isError) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = isError ? "error" : "muted";
}

function fail(err) {
  if (err.code === "no_such_queue") noSuchQueue(err);
  setStatus(`error: ${err.message}`, true);
}

// A sparkline of one or more series, hand-drawn as SVG polylines on a shared scale.
function spark(series, width, height) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const max = Math.max(1e-9, ...series.flatMap((s) => s.values));
  for (const s of series) {
    const n = s.values.length;
    if (n === 0) continue;
    const pts = s.values.map((v, i) => {
      const x = n === 1 ? width : (i / (n - 1)) * (width - 2) + 1;
      const y = height - 2 - (v / max) * (height - 4);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("class", `line ${s.cls}`);
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
  }
  return svg;
}

const last = (a) => (a.length ? a[a.length - 1] : 0);

function rateCell(rates, width, height) {
  return h("div", {},
    spark([
      { values: rates.enqueued, cls: "enq" },
      { values: rates.acked, cls: "ack" },
      { values: rates.failed, cls: "fail" },
    ], width, height),
    h("div", { class: "legend" },
      h("span", { class: "enq-t" }, `enq ${fmtRate(last(rates.enqueued))}/s`),
      h("span", { class: "ack-t" }, `ack ${fmtRate(last(rates.acked))}/s`),
      h("span", { class: "fail-t" }, `fail ${fmtRate(last(rates.failed))}/s`)));
}

function badges(q) {
  if (q.health.length === 0) return [h("span", { class: "badge" }, "healthy")];
  return q.health.map((b) => h("span", { class: `badge ${b.level}`, title: b.text }, b.text));
}

function kubeCell(k) {
  if (!k) return null;
  const conds = k.conditions.map((c) =>
    h("span", {
      class: `badge ${c.status === "True" ? (c.type === "Ready" || c.type === "RedisAvailable" ? "" : "warn") : (c.type === "Ready" || c.type === "RedisAvailable" ? "bad" : "")}`,
      title: `${c.reason}: ${c.message}`,
    }, `${c.type}=${c.status}`));
  const replicas = k.workers
    ? `${k.workers}: ${k.current_replicas ?? "-"} of ${k.desired_replicas ?? "-"} replicas`
    : "no workers scaled";
  return h("div", {}, conds, h("div", { class: "muted" }, replicas));
}

const COUNTS = ["pending", "due", "processing", "delayed", "dead", "orphaned"];

function main(...children) {
  const el = document.getElementById("main");
  el.replaceChildren(...children.flat(Infinity).filter(Boolean));
  markEmptyTables(el);
}

function poll(load) {
  livePoll(load);
}

// --- Overview ---------------------------------------------------------------------

async function overviewPage() {
  document.title = "jobqueue: overview";
  poll(async () => {
    const o = await api("/api/overview");
    const kube = o.queues.some((q) => q.kube);
    const head = h("tr", {},
      h("th", {}, "Queue"),
      COUNTS.map((c) => h("th", { class: "num" }, c)),
      h("th", {}, "Rates (last minutes)"),
      h("th", { class: "num" }, "p50"),
      h("th", { class: "num" }, "p99"),
      h("th", { class: "num", title: "how long the oldest job ready to run has waited" }, "oldest pending"),
      h("th", {}, "Health"),
      kube ? h("th", {}, "JobQueue") : null);
    const rows = o.queues.map((q) => h("tr", { "data-queue": q.id },
      h("td", {}, h("a", { href: queueLink(q.id) }, q.id),
        q.name && q.name !== q.id ? h("div", { class: "muted" }, q.name) : null,
        q.error ? h("div", { class: "error" }, q.error) : null,
        freshnessNote(q)),
      COUNTS.map((c) => h("td", { class: "num", "data-count": c },
        c === "dead" && q.counts
          ? h("a", { href: deadLink(q.id) }, String(q.counts[c]))
          : (q.counts ? String(q.counts[c]) : "-"))),
      h("td", {}, rateCell(q.rates, 160, 28)),
      h("td", { class: "num", "data-latency": "p50", title: q.latency_note || "" }, q.p50_ms === null ? "n/a" : fmtMs(q.p50_ms)),
      h("td", { class: "num", "data-latency": "p99", title: q.latency_note || "" }, q.p99_ms === null ? "n/a" : fmtMs(q.p99_ms)),
      h("td", { class: "num", "data-oldest": "" }, oldestText(q)),
      h("td", {}, badges(q)),
      kube ? h("td", { "data-kube": "" }, kubeCell(q.kube)) : null));
    main(
      h("h1", {}, "Queues"),
      o.error ? h("p", { class: "error" }, `listing the queues failed: ${o.error}`) : null,
      o.queues.length === 0
        ? h("p", { class: "muted" }, o.refreshes === 0 ? "Reading the queues…" : "No queues found.")
        : h("table", { id: "overview" }, h("thead", {}, head), h("tbody", {}, rows)),
      o.queues.some((q) => q.latency_note)
        ? h("p", { class: "muted" }, "p50/p99: n/a where a queue has no acked job yet (the processing times come from the acks' histogram).")
        : null);
  });
}

// --- Queue ------------------------------------------------------------------------

function cards(counts) {
  return h("div", { class: "cards" }, COUNTS.concat(["expired"]).map((c) =>
    h("div", { class: "card", "data-count": c },
      h("div", { class: "label" }, c),
      h("div", { class: "value" }, counts ? String(counts[c]) : "-"))));
}

function payloadCell(job) {
  return h("td", {},
    h("pre", { class: "payload" }, job.payload),
    job.payload_truncated
      ? h("a", { href: `/api/payload?${qs(withPart({ q: job.queue_id, id_hex: job.id_hex }, job.part))}` }, `download all ${job.payload_bytes} bytes`)
      : null);
}

function pager(offset, limit, count, go) {
  return h("div", { class: "pager" },
    h("button", { disabled: offset === 0, onclick: () => go(Math.max(0, offset - limit)) }, "‹ previous"),
    h("span", { class: "muted" }, count ? `${offset + 1}–${offset + count}` : "none"),
    h("button", { disabled: count < limit, onclick: () => go(offset + limit) }, "next ›"));
}

async function queuePage() {
  const id = params.get("q");
  document.title = `jobqueue: ${id}`;
  let offset = 0;
  const load = async () => {
    const d = await api(`/api/queue?${qs({ q: id, offset, limit: 20 })}`);
    const q = d.queue;
    for (const list of [d.pending, d.leases, d.delayed]) for (const j of list) j.queue_id = id;
    const charts = h("div", { class: "charts" },
      ["enqueued", "acked", "failed"].map((k) => h("div", { class: "card" },
        h("div", { class: "label" }, `${k} per second: ${fmtRate(last(q.rates[k]))}`),
        spark([{ values: q.rates[k], cls: { enqueued: "enq", acked: "ack", failed: "fail" }[k] }], 260, 50))));
    main(
      h("h1", {}, `Queue ${id}`, " ", h("a", { href: deadLink(id), class: "muted" }, "dead letters →")),
      q.name ? h("p", { class: "muted" }, `${q.name} on ${q.endpoint}`) : null,
      q.error ? h("p", { class: "error" }, q.error) : null,
      h("div", {}, badges(q)),
      freshnessNote(q, true),
      queueOps(id, q, d.writes, load),
      cards(q.counts),
      h("p", { id: "oldest-pending" }, `oldest pending job: ${oldestText(q)}`),
      charts,
      historyPanel(id),
      h("p", { class: "muted" },
        q.latency_note ? `processing time: ${q.latency_note}` : `processing time p50 ${fmtMs(q.p50_ms)}, p99 ${fmtMs(q.p99_ms)}`),
      q.kube ? [h("h2", {}, "JobQueue"), kubeCell(q.kube)] : null,
      h("h2", {}, "Next in line"),
      pager(offset, d.limit, d.pending.length, (o) => { offset = o; load().catch(fail); }),
      h("table", { id: "pending" },
        h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "id"), h("th", { class: "num" }, "priority"), h("th", { class: "num" }, "attempts"), h("th", {}, "enqueued"), h("th", {}, "payload"))),
        h("tbody", {}, d.pending.map((j, i) => h("tr", {},
          h("td", {}, String(offset + i + 1)),
          h("td", {}, idLink(id, j)),
          h("td", { class: "num" }, String(j.priority || 0)),
          h("td", { class: "num" }, String(j.attempts)),
          h("td", {}, fmtTime(j.enqueued_at)),
          payloadCell(j))))),
      h("h2", {}, "Leases in flight"),
      h("table", { id: "leases" },
        h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "worker"), h("th", { class: "num" }, "attempt"), h("th", {}, "time left"), h("th", {}, "payload"))),
        h("tbody", {}, d.leases.map((j) => h("tr", {},
          h("td", {}, idLink(id, j)),
          h("td", {}, j.worker || "-"),
          h("td", { class: "num" }, String(j.attempts)),
          j.lease_left_ms < 0
            ? h("td", { class: "expired" }, `expired ${fmtDur(j.lease_left_ms)} ago`)
            : h("td", {}, fmtDur(j.lease_left_ms)),
          payloadCell(j))))),
      h("h2", {}, "Delayed"),
      h("table", { id: "delayed" },
        h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "due"), h("th", { class: "num" }, "attempts"), h("th", {}, "payload"))),
        h("tbody", {}, d.delayed.map((j) => h("tr", {},
          h("td", {}, idLink(id, j)),
          h("td", {}, `${fmtTime(j.run_at)} (${j.due_in_ms >= 0 ? "in " + fmtDur(j.due_in_ms) : "due"})`),
          h("td", { class: "num" }, String(j.attempts)),
          payloadCell(j))))),
      h("h2", {}, "Schedules"),
      d.schedules_error ? h("p", { class: "error" }, d.schedules_error) : null,
      d.schedules.length === 0 ? h("p", { class: "muted" }, "none (jobqueue schedule add)") :
        h("table", { id: "schedules" },
          h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "rule"), h("th", {}, "missed"), h("th", {}, "last tick"), h("th", {}, "next tick"))),
          h("tbody", {}, d.schedules.map((s) => h("tr", {},
            h("td", {}, s.name),
            h("td", {}, s.rule),
            h("td", {}, s.missed),
            h("td", {}, s.last_tick == null ? "-" : fmtTime(s.last_tick)),
            h("td", {}, s.paused ? "paused" : fmtTime(s.next_tick)))))),
      h("h2", {}, "Settings (meta)"),
      h("dl", { class: "kv", id: "settings" }, d.settings.map((s) => [h("dt", {}, s.name), h("dd", {}, s.value)])));
  };
  poll(load);
}

// --- Dead letters -----------------------------------------------------------------

// A time typed as `YYYY-MM-DD HH:MM[:SS]` (UTC) or a datetime-local value, as ms; NaN
// when it is not one.
function parseUtc(text) {
  const t = text.trim().replace(" ", "T").replace(/\s*UTC$/i, "").replace(/Z$/, "");
  return /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?$/.test(t) ? Date.parse(`${t.length === 10 ? t + "T23:59:59.999" : t}Z`) : NaN;
}

async function deadPage() {
  const id = params.get("q");
  document.title = `jobqueue: dead letters of ${id}`;
  let search = params.get("search") || "";
  let before = null;          // jump to a time: ms, or null for the newest
  let cursor = "";            // where this page starts ("" = from `before`)
  const back = [];            // the cursors of the pages before, for "newer"
  let notice = null;
  // The chosen jobs: by their bytes in hex and, in a partitioned queue, the partition
  // that holds each.
  const selected = new Map();
  const key = (j) => (j.part === null || j.part === undefined ? j.id_hex : `${j.part}:${j.id_hex}`);
  const chosen = () => {
    const list = [...selected.values()];
    const body = { ids_hex: list.map((j) => j.id_hex) };
    if (list.some((j) => j.part !== null && j.part !== undefined)) body.parts = list.map((j) => j.part || 0);
    return body;
  };

  // A write: the dry run counts the exact set; the write sends that set (the matches'
  // ids, or all that died up to the dry run's newest death), never "whatever is dead".
  const act = async (verb, body, what) => {
    const path = `/api/dead/${verb}`;
    try {
      const dry = await post(path, { q: id, ...body, dry_run: true });
      const doing = verb === "redrive" ? "Redrive" : "Purge for good";
      const whither = verb === "redrive" ? " back to pending" : "";
      if (dry.would === 0) {
        notice = `no dead job to ${verb} (${what})`;
        await load();
        return;
      }
      if (!confirm(`${doing} ${dry.would} dead job${dry.would === 1 ? "" : "s"} (${what})${whither}?`)) return;
      let send = body;
      if (body.search !== undefined) send = dry.parts ? { ids_hex: dry.ids_hex, parts: dry.parts } : { ids_hex: dry.ids_hex };
      else if (body.all) send = { all: true, until_ms: dry.until_ms, count: dry.would };
      const done = await post(path, { q: id, ...send });
      notice = `${done.verb} ${done.done} dead job${done.done === 1 ? "" : "s"}`;
      selected.clear();
      await load();
    } catch (err) {
      fail(err);
    }
  };

  const go = (c) => { cursor = c; load().catch(fail); };
  const restart = () => { cursor = ""; back.length = 0; load().catch(fail); };

  const load = async () => {
    const query = { q: id, limit: 20, search };
    if (cursor) query.cursor = cursor;
    else if (before !== null) query.before_ms = before;
    const d = await api(`/api/dead?${qs(query)}`);
    const { queue: shownQueue, ...rest } = d;
    if (!liveChanged("dead", { rest, dead: shownQueue.counts && shownQueue.counts.dead, notice })) return;
    const q = d.queue;
    const writes = WRITES && d.writes;
    const input = h("input", { type: "search", id: "dead-search", value: search, placeholder: "id, error or payload text" });
    const form = h("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); search = input.value; restart(); } },
      input, h("button", { type: "submit", id: "dead-search-go" }, "Search"),
      search ? h("button", { type: "button", onclick: () => { search = ""; restart(); } }, "clear") : null);
    const jump = h("input", { id: "dead-jump", placeholder: "YYYY-MM-DD HH:MM:SS (UTC)", value: before === null ? "" : fmtTime(before).replace(" UTC", ""), "aria-label": "died at or before" });
    const jumpForm = h("form", { class: "toolbar", onsubmit: (e) => {
      e.preventDefault();
      const text = jump.value.trim();
      if (!text) { before = null; restart(); return; }
      const ms = parseUtc(text);
      if (Number.isNaN(ms)) { fail(new Error(`"${text}" is not a time: YYYY-MM-DD HH:MM:SS (UTC)`)); return; }
      before = ms;
      restart();
    } }, h("span", { class: "muted" }, "died at or before"), jump, h("button", { type: "submit", id: "dead-jump-go" }, "Go"),
      before !== null ? h("button", { type: "button", onclick: () => { before = null; restart(); } }, "newest") : null);
    const tools = writes ? h("div", { class: "toolbar" },
      h("button", { class: "primary", id: "redrive-selected", onclick: () => selected.size && act("redrive", chosen(), "selected") }, "Redrive selected"),
      h("button", { class: "danger", id: "purge-selected", onclick: () => selected.size && act("purge", chosen(), "selected") }, "Purge selected"),
      search
        ? [h("button", { class: "primary", id: "redrive-matches", onclick: () => act("redrive", { search }, `every match of "${search}"`) }, "Redrive all matches"),
          h("button", { class: "danger", id: "purge-matches", onclick: () => act("purge", { search }, `every match of "${search}"`) }, "Purge all matches")]
        : [h("button", { class: "primary", id: "redrive-all", onclick: () => act("redrive", { all: true }, "all") }, "Redrive all"),
          h("button", { class: "danger", id: "purge-all", onclick: () => act("purge", { all: true }, "all") }, "Purge all")])
      : h("p", { class: "muted" }, "Read-only: start the console with --allow-writes to redrive or purge.");
    const boxes = [];
    const rows = d.jobs.map((j) => {
      j.queue_id = id;
      const box = writes ? h("input", {
        type: "checkbox", "aria-label": `select ${j.id_shown}`, checked: selected.has(key(j)),
        "data-id-hex": j.id_hex,
        onchange: (e) => (e.target.checked ? selected.set(key(j), j) : selected.delete(key(j))),
      }) : null;
      if (box) boxes.push([box, j]);
      return h("tr", { "data-job": j.id_shown, "data-id-hex": j.id_hex, "data-part": j.part === null || j.part === undefined ? null : String(j.part) },
        writes ? h("td", {}, box) : null,
        h("td", {}, idLink(id, j)),
        h("td", {}, fmtTime(j.died_at)),
        h("td", { class: "num" }, String(j.attempts)),
        h("td", {}, h("pre", { class: "payload" }, j.last_error || "-")),
        payloadCell(j));
    });
    // Select every job of this page (the search's matches beyond it: "… all matches").
    const all = writes ? h("input", {
      type: "checkbox", id: "select-page", "aria-label": "select every job of this page",
      checked: boxes.length > 0 && boxes.every(([b]) => b.checked),
      onchange: (e) => {
        for (const [b, j] of boxes) {
          b.checked = e.target.checked;
          if (b.checked) selected.set(key(j), j); else selected.delete(key(j));
        }
      },
    }) : null;
    const total = q.counts ? q.counts.dead : 0;
    const pager = h("div", { class: "pager" },
      h("button", { id: "dead-newer", disabled: back.length === 0, onclick: () => go(back.pop()) }, "‹ newer"),
      h("span", { class: "muted" }, d.jobs.length ? `${d.jobs.length} shown, newest death first` : "none"),
      h("button", { id: "dead-older", disabled: !d.next_cursor, onclick: () => { back.push(cursor); go(d.next_cursor); } }, "older ›"));
    main(
      h("h1", {}, `Dead letters of ${id}`, " ", h("a", { href: queueLink(id), class: "muted" }, "← queue")),
      h("p", { id: "dead-total" }, d.search
        ? `${d.jobs.length} of the ${d.looked_at} dead jobs looked at match "${d.search}"${d.next_cursor ? " (older ones: older ›)" : ""}, of ${total} dead jobs`
        : `${total} dead jobs`),
      notice ? h("p", { class: "notice", id: "notice" }, notice) : null,
      form, jumpForm, tools,
      pager,
      h("table", { id: "dead" },
        h("thead", {}, h("tr", {}, writes ? h("th", {}, all) : null, h("th", {}, "id"), h("th", {}, "died"), h("th", { class: "num" }, "attempts"), h("th", {}, "last error"), h("th", {}, "payload"))),
        h("tbody", {}, rows)));
  };
  livePoll(load);
}

// --- Job --------------------------------------------------------------------------

async function jobPage() {
  const q = params.get("q");
  // The id by its bytes in hex (the pages' links), or as text (the lookup form).
  const named = withPart(params.has("id_hex") ? { id_hex: params.get("id_hex") } : { id: params.get("id") },
    params.has("part") ? params.get("part") : null);
  const asked = named.id_hex !== undefined ? `hex:${named.id_hex}` : named.id;
  document.title = `jobqueue: job ${asked}`;
  let notice = null;
  let shown = false;
  const load = async () => {
    let j;
    try {
      j = await api(`/api/job?${qs({ q, ...named })}`);
    } catch (err) {
      // What was shown stays (marked stale) while the queue cannot be read.
      if (shown && err.status !== 404) throw err;
      main(h("h1", {}, `Job ${asked}`), notice ? h("p", { class: "notice", id: "notice" }, notice) : null,
        h("p", { class: "error", id: "job-error" }, err.message));
      return;
    }
    const id = j.id_shown;
    const act = async (verb) => {
      const what = verb === "redrive" ? "Redrive this job back to pending?" : "Purge this job and its payload for good?";
      if (!confirm(what)) return;
      try {
        const done = await post(`/api/dead/${verb}`, j.part === null || j.part === undefined
          ? { q, ids_hex: [j.id_hex] } : { q, ids_hex: [j.id_hex], parts: [j.part] });
        notice = `${done.verb} ${done.done} dead job${done.done === 1 ? "" : "s"}`;
        await load();
      } catch (err) {
        fail(err);
      }
    };
    const rows = [
      ["queue", h("a", { href: queueLink(q) }, q)],
      ["status", h("span", { id: "job-status" }, j.status || "-")],
      ["where", j.note],
      ["attempts", String(j.attempts)],
      ["enqueued", fmtTime(j.enqueued_at)],
      ["last claimed", fmtTime(j.claimed_at)],
      j.lease_until ? ["lease until", `${fmtTime(j.lease_until)} (${j.lease_left_ms < 0 ? "expired " + fmtDur(j.lease_left_ms) + " ago" : fmtDur(j.lease_left_ms) + " left"})`] : null,
      j.run_at ? ["run at", fmtTime(j.run_at)] : null,
      j.died_at ? ["died", fmtTime(j.died_at)] : null,
      ["worker", j.worker || "-"],
      ["last error", h("pre", { class: "payload", id: "job-error-text" }, j.last_error || "-")],
      // outcomes: the progress its worker last reported, the result its ack stored
      j.progress ? ["progress", h("span", { id: "job-progress" },
        `${j.progress.percent}% ${j.progress.message}${j.progress.at ? " (at " + fmtTime(j.progress.at) + ")" : ""}`)] : null,
      j.result !== null && j.result !== undefined
        ? ["result", h("pre", { class: "payload", id: "job-result" }, j.result)] : null,
      ["payload", h("div", {},
        h("pre", { class: "payload", id: "job-payload" }, j.payload),
        h("a", { href: `/api/payload?${qs(withPart({ q, id_hex: j.id_hex }, j.part))}`, id: "job-download" },
          j.payload_truncated ? `download all ${j.payload_bytes} bytes (preview above)` : `download (${j.payload_bytes} bytes)`))],
    ].filter(Boolean);
    shown = true;
    if (!liveChanged("job", { j, notice })) return;
    main(
      h("h1", {}, "Job ", h("span", { id: "job-id", class: j.id_plain ? null : "hexid" }, id)),
      notice ? h("p", { class: "notice", id: "notice" }, notice) : null,
      h("dl", { class: "kv", id: "job" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      jobExtras(q, id, j, async (msg) => { notice = msg; await load(); }),
      j.actions.length ? h("div", { class: "toolbar" },
        j.actions.includes("redrive") ? h("button", { class: "primary", id: "job-redrive", onclick: () => act("redrive") }, "Redrive") : null,
        j.actions.includes("purge") ? h("button", { class: "danger", id: "job-purge", onclick: () => act("purge") }, "Purge") : null) : null);
  };
  livePoll(load);
}

// --- Operator's hand: pause and resume, workers, history, one job ----------------

const workersLink = (id) => `/workers?${qs({ q: id })}`;

// The queue page's pause state and its Pause / Resume button (writes mode only).
function queueOps(id, q, writes, reload) {
  const paused = q.pause && q.pause.paused;
  const act = async (verb) => {
    const ask = verb === "pause"
      ? `Pause ${id}? Workers claim nothing until it is resumed; producers go on.`
      : `Resume ${id}? Workers claim again.`;
    if (!confirm(ask)) return;
    try {
      const done = await post(`/api/queue/${verb}`, { q: id });
      setStatus(done.message);
      await reload();
    } catch (err) {
      fail(err);
    }
  };
  return h("div", { class: "toolbar", id: "queue-ops" },
    paused
      ? h("span", { class: "paused", id: "paused-banner" },
        `paused${q.pause.paused_at ? " since " + fmtTime(q.pause.paused_at) : ""}: workers claim nothing`)
      : h("span", { class: "muted", id: "paused-banner" }, "claiming"),
    WRITES && writes
      ? (paused
        ? h("button", { class: "primary", id: "queue-resume", onclick: () => act("resume") }, "Resume")
        : h("button", { class: "danger", id: "queue-pause", onclick: () => act("pause") }, "Pause"))
      : null,
    h("a", { href: workersLink(id), id: "workers-link" }, "workers →"));
}

// A chart of per-minute series on one scale, with its axis labels, drawn as SVG.
function historyChart(hist) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 720, H = 170, L = 40, B = 20;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "history");
  svg.setAttribute("id", "history-chart");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const series = [["enqueued", "enq"], ["acked", "ack"], ["failed", "fail"], ["dead", "dead"]];
  const max = Math.max(1, ...series.flatMap(([k]) => hist[k]));
  const n = hist.enqueued.length;
  const x = (i) => L + (n <= 1 ? 0 : (i / (n - 1)) * (W - L - 4));
  const y = (v) => H - B - (v / max) * (H - B - 8);
  const text = (tx, ty, s, anchor) => {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", tx); t.setAttribute("y", ty);
    t.setAttribute("class", "axis");
    if (anchor) t.setAttribute("text-anchor", anchor);
    t.textContent = s;
    svg.append(t);
  };
  const axis = document.createElementNS(NS, "polyline");
  axis.setAttribute("class", "axis-line");
  axis.setAttribute("points", `${L},8 ${L},${H - B} ${W - 4},${H - B}`);
  svg.append(axis);
  text(L - 4, 14, String(max), "end");
  text(L - 4, H - B, "0", "end");
  text(L, H - 4, fmtTime(hist.start_ms), "start");
  text(W - 4, H - 4, "now", "end");
  for (const [k, cls] of series) {
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("class", `line ${cls}`);
    line.setAttribute("data-series", k);
    line.setAttribute("data-total", hist[k].reduce((a, b) => a + b, 0));
    line.setAttribute("points", hist[k].map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
    svg.append(line);
  }
  return svg;
}

// The queue's history from Redis (per-minute counts kept 24 hours, processing times of
// recent windows): one element kept across the page's polls, refreshed by its own.
const historyPanels = new Map();
function historyPanel(id) {
  if (historyPanels.has(id)) return historyPanels.get(id);
  const el = h("section", { id: "history" }, h("h2", {}, "History"), h("p", { class: "muted" }, "Loading the history…"));
  historyPanels.set(id, el);
  let minutes = 60;
  const load = async () => {
    let d;
    try {
      d = await api(`/api/history?${qs({ q: id, minutes })}`);
    } catch (err) {
      el.replaceChildren(h("h2", {}, "History"), h("p", { class: "error" }, `history: ${err.message}`));
      return;
    }
    const sum = (k) => d[k].reduce((a, b) => a + b, 0);
    const range = h("span", { class: "toolbar" }, [[60, "1 hour"], [360, "6 hours"], [1440, "24 hours"]].map(([m, label]) =>
      h("button", { class: m === minutes ? "primary" : null, "data-minutes": m, onclick: () => { minutes = m; load(); } }, label)));
    el.replaceChildren(
      h("h2", {}, "History ", range),
      h("p", { class: "legend" }, "per minute: ",
        h("span", { class: "enq-t" }, `enqueued ${sum("enqueued")}`), " · ",
        h("span", { class: "ack-t" }, `acked ${sum("acked")}`), " · ",
        h("span", { class: "fail-t" }, `failed ${sum("failed")}`), " · ",
        h("span", { class: "dead-t" }, `dead ${sum("dead")}`)),
      historyChart(d),
      h("table", { id: "latency-windows" },
        h("thead", {}, h("tr", {}, h("th", {}, "processing time"), h("th", { class: "num" }, "acks"), h("th", { class: "num" }, "p50"), h("th", { class: "num" }, "p99"))),
        h("tbody", {}, d.windows.map((w) => h("tr", { "data-window": w.name },
          h("td", {}, `last ${w.name} (since ${fmtTime(w.since_ms)})`),
          h("td", { class: "num" }, String(w.acks)),
          h("td", { class: "num" }, fmtMs(w.p50_ms)),
          h("td", { class: "num" }, fmtMs(w.p99_ms)))))));
  };
  load();
  setInterval(load, Math.max(REFRESH_MS, 10000));
  return el;
}

// A job page's errors of its last attempts and its Run now / Delete buttons.
function jobExtras(q, id, j, done) {
  const errors = j.errors || [];
  const act = async (verb) => {
    const ask = verb === "run"
      ? "Run this delayed job now (first in line)?"
      : "Delete this job and its payload for good?";
    if (!confirm(ask)) return;
    try {
      const r = await post(`/api/job/${verb}`, withPart({ q, id_hex: j.id_hex }, j.part));
      await done(r.message);
    } catch (err) {
      fail(err);
    }
  };
  const st = j.status;
  const writes = WRITES;
  return h("div", {},
    h("h2", {}, "Errors of the last attempts"),
    errors.length
      ? h("table", { id: "job-errors" },
        h("thead", {}, h("tr", {}, h("th", { class: "num" }, "attempt"), h("th", {}, "failed at"), h("th", {}, "error"))),
        h("tbody", {}, errors.map((e) => h("tr", {},
          h("td", { class: "num" }, String(e.attempt)),
          h("td", {}, fmtTime(e.at)),
          h("td", {}, h("pre", { class: "payload" }, e.error))))))
      : h("p", { class: "muted", id: "job-errors" }, "No failed attempt recorded."),
    writes ? h("div", { class: "toolbar", id: "job-ops" },
      st === "delayed" ? h("button", { class: "primary", id: "job-run-now", onclick: () => act("run") }, "Run now") : null,
      st === "pending" || st === "delayed" || st === "dead"
        ? h("button", { class: "danger", id: "job-delete", onclick: () => act("delete") }, "Delete")
        : (st === "processing" ? h("span", { class: "muted" }, "leased: a worker holds it, it cannot be deleted") : null)) : null);
}

// The workers page: who holds which lease now, for how long, and who was seen recently.
async function workersPage() {
  const id = params.get("q");
  document.title = `jobqueue: workers of ${id}`;
  poll(async () => {
    const d = await api(`/api/workers?${qs({ q: id })}`);
    main(
      h("h1", {}, `Workers of ${id}`, " ", h("a", { href: queueLink(id), class: "muted" }, "← queue")),
      h("h2", {}, "Holding leases now"),
      h("p", { class: "muted" }, d.leases_total > d.leases_read
        ? `${d.leases_total} leases; the ${d.leases_read} ending first are shown`
        : `${d.leases_total} lease${d.leases_total === 1 ? "" : "s"}`),
      d.holders.length === 0
        ? h("p", { class: "muted", id: "no-holders" }, "No worker holds a lease.")
        : h("table", { id: "holders" },
          h("thead", {}, h("tr", {}, h("th", {}, "worker"), h("th", { class: "num" }, "leases"), h("th", {}, "holding the oldest for"), h("th", {}, "jobs (lease left)"))),
          h("tbody", {}, d.holders.map((w) => h("tr", { "data-worker": w.worker },
            h("td", {}, w.worker),
            h("td", { class: "num" }, String(w.leases)),
            h("td", {}, w.longest_ms === null ? "-" : fmtDur(w.longest_ms),
              w.expired ? h("span", { class: "expired" }, ` (${w.expired} expired)`) : null),
            h("td", {}, w.jobs.map((j, i) => [i ? ", " : "",
              h("a", { href: jobLink(id, j.id) }, j.id),
              h("span", { class: j.lease_left_ms < 0 ? "expired" : "muted" },
                ` (${j.lease_left_ms < 0 ? "expired" : fmtDur(j.lease_left_ms)})`)]),
              w.leases > w.jobs.length ? h("span", { class: "muted" }, ` and ${w.leases - w.jobs.length} more`) : null))))),
      h("h2", {}, "Seen recently"),
      h("p", { class: "muted" }, "Workers whose last claim was in the last hour, the last seen first (an idle worker claims at every poll)."),
      d.seen.length === 0
        ? h("p", { class: "muted", id: "no-seen" }, "No worker claimed in the last hour.")
        : h("table", { id: "seen" },
          h("thead", {}, h("tr", {}, h("th", {}, "worker"), h("th", {}, "last claim"), h("th", { class: "num" }, "leases now"))),
          h("tbody", {}, d.seen.map((w) => h("tr", { "data-worker": w.worker },
            h("td", {}, w.worker),
            h("td", {}, `${fmtDur(w.ago_ms)} ago`),
            h("td", { class: "num" }, String(w.leases)))))));
  });
}

// --- Header -----------------------------------------------------------------------

async function header() {
  const mode = document.getElementById("mode");
  mode.textContent = WRITES ? "writes allowed" : "read-only";
  mode.className = WRITES ? "mode writes" : "mode";
  const select = document.getElementById("lookup-queue");
  const form = document.getElementById("lookup");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const id = document.getElementById("lookup-id").value.trim();
    if (id) location.href = lookupLink(select.value, id);
  });
  try {
    const o = await api("/api/overview");
    const current = params.get("q");
    select.replaceChildren(...o.queues.map((q) => h("option", { value: q.id, selected: q.id === current }, q.id)));
  } catch (err) {
    fail(err);
  }
}

// --- Live: ages, polling, the outage banner, Redis health ---------------------------
// Every page polls; what it shows carries its age (measured on the server for counts,
// from the last successful load for lists), and a failed load keeps the page as it was,
// marked stale, with why at the top: nothing read during an outage looks live.

let liveLoadedAt = null; // performance.now() of the last successful load of this page
let liveError = null;

function liveLine() {
  const el = document.getElementById("data-age");
  if (!el) return;
  const age = liveLoadedAt === null ? null : performance.now() - liveLoadedAt;
  if (liveError) {
    el.className = "age error";
    el.textContent = age === null
      ? `Could not load: ${liveError}. Retrying every ${fmtDur(REFRESH_MS)}.`
      : `Could not refresh: ${liveError}. Showing what was read ${fmtDur(age)} ago; retrying every ${fmtDur(REFRESH_MS)}.`;
  } else {
    el.className = "age muted";
    el.textContent = age === null ? "" : `page updated ${fmtDur(age)} ago, again every ${fmtDur(REFRESH_MS)}`;
  }
  document.getElementById("main").classList.toggle("stale", !!liveError && age !== null);
}

// Load now and every REFRESH_MS. A load is put off while the operator types into a
// field of the page, so a poll never takes the text or the focus away.
function livePoll(load) {
  const busy = () => {
    const a = document.activeElement;
    return a && a.closest && a.closest("#main") && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName) && a.type !== "checkbox";
  };
  const run = async () => {
    if (busy()) {
      setTimeout(run, 500);
      return;
    }
    try {
      await load();
      liveLoadedAt = performance.now();
      liveError = null;
      setStatus("");
    } catch (err) {
      liveError = err.message;
      if (err.code === "no_such_queue") noSuchQueue(err);
    }
    liveLine();
    setTimeout(run, REFRESH_MS);
  };
  run();
  setInterval(liveLine, 1000);
}

// Whether what a poll read differs from what the page shows (ages and clocks left
// out): a page is drawn again only when it changed, so a poll never pulls a checkbox or
// a button from under the operator's pointer.
const liveShown = {};
function liveChanged(key, value) {
  const volatile = new Set(["freshness", "now_ms", "age_ms"]);
  const sig = JSON.stringify(value, (k, v) => (volatile.has(k) ? undefined : v));
  if (liveShown[key] === sig) return false;
  liveShown[key] = sig;
  return true;
}

// Under a queue's name: how old its counts are when they are stale (or always, `always`).
function freshnessNote(q, always) {
  const f = q.freshness;
  if (!f) return null;
  const clock = f.read_at_ms ? `read at ${fmtTime(f.read_at_ms)} by the Redis clock` : "";
  if (f.age_ms === null) return h("div", { class: "stale-note", "data-fresh": "no" }, "counts not read yet");
  if (f.stale) return h("div", { class: "stale-note", "data-fresh": "no", title: clock }, `counts ${fmtDur(f.age_ms)} old`);
  return always ? h("div", { class: "muted", "data-fresh": "yes", title: clock }, `counts read ${fmtDur(f.age_ms)} ago`) : null;
}

function oldestText(q) {
  const f = q.freshness;
  if (!f || !q.counts) return "-";
  if (f.oldest_pending_ms === null) return q.counts.pending > 0 ? "unknown" : "-";
  return f.oldest_pending_ms === 0 ? "none waiting" : fmtDur(f.oldest_pending_ms);
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

function redisPanel(list) {
  const el = document.getElementById("redis-health");
  if (!el) return;
  if (location.pathname !== "/" || list.length === 0) { el.hidden = true; return; }
  el.hidden = false;
  el.replaceChildren(
    h("h2", {}, "Redis"),
    h("table", { id: "redis" },
      h("thead", {}, h("tr", {}, ["server", "memory", "eviction policy", "persistence", "clients", "health"].map((t) => h("th", {}, t)))),
      h("tbody", {}, list.map((r) => h("tr", { "data-redis": r.endpoint },
        h("td", {}, r.endpoint, r.version ? h("div", { class: "muted" }, `version ${r.version}`) : null,
          h("div", { class: "muted" }, r.age_ms === null ? "" : `probed ${fmtDur(r.age_ms)} ago`)),
        h("td", { "data-field": "memory" }, r.used_memory === null ? "-" :
          (r.maxmemory ? `${fmtBytes(r.used_memory)} of ${fmtBytes(r.maxmemory)} (${Math.round(100 * r.used_memory / r.maxmemory)}%)` : `${fmtBytes(r.used_memory)}, no limit`)),
        h("td", { "data-field": "policy" }, r.maxmemory_policy === null ? "-" :
          h("span", { class: `badge ${r.maxmemory_policy === "noeviction" ? "" : "bad"}` }, r.maxmemory_policy)),
        h("td", { "data-field": "persistence" },
          r.aof_enabled === null ? "-" : `AOF ${r.aof_enabled ? `on (fsync ${r.appendfsync ?? "?"})` : "off"}`,
          h("div", {}, r.save === null ? "RDB schedule not readable" : (r.save === "" ? "no RDB snapshots" : `RDB save ${r.save}`)),
          r.rdb_last_bgsave_status ? h("div", { class: "muted" }, `last snapshot ${r.rdb_last_bgsave_status}`) : null),
        h("td", { "data-field": "clients" }, r.connected_clients === null ? "-" : `${r.connected_clients} connected, ${r.blocked_clients ?? 0} blocked`),
        h("td", { "data-field": "health" },
          r.error ? h("span", { class: "badge bad" }, r.error) : null,
          r.warnings.length === 0 && !r.error ? h("span", { class: "badge" }, "ok") : null,
          r.warnings.map((w) => h("span", { class: `badge ${w.level}`, title: w.text }, w.text)),
          r.notes.map((n) => h("div", { class: "muted" }, n))))))));
}

// The banner at the top of every page, from /api/health (the snapshot only: it answers
// while Redis does not).
function liveBanner() {
  const el = document.getElementById("outage");
  const show = (title, lines) => {
    el.hidden = false;
    el.replaceChildren(h("strong", {}, title), h("ul", {}, lines.map((l) => h("li", {}, l))));
  };
  const run = async () => {
    try {
      const s = await api("/api/health");
      if (s.outage) show("Outage: what this page shows may be old.", s.outage.problems);
      else { el.hidden = true; el.replaceChildren(); }
      redisPanel(s.redis);
    } catch (err) {
      show("The console does not answer.", [err.message]);
    }
    setTimeout(run, REFRESH_MS);
  };
  run();
}

document.addEventListener("DOMContentLoaded", () => {
  liveBanner();
  header();
  const pages = { "/": overviewPage, "/queue": queuePage, "/dead": deadPage, "/job": jobPage, "/workers": workersPage };
  (pages[location.pathname] || overviewPage)();
});

// --- Errors, empty tables, sign-out -------------------------------------------------

// An API error as an Error with the reply's status and code (`no_such_queue`, …).
function apiError(res, body) {
  const err = new Error(body.error || `HTTP ${res.status}`);
  err.status = res.status;
  err.code = body.code || null;
  return err;
}

// A page of a queue the console does not have says so, instead of "Loading…"; the page
// keeps polling, so a queue that appears later (a rescan) is shown then.
function noSuchQueue(err) {
  const q = params.get("q") || "";
  main(
    h("h1", {}, `Queue ${q}`),
    h("p", { class: "error", id: "no-such-queue" }, `No such queue: ${err.message}.`),
    h("p", {}, h("a", { href: "/" }, "← every queue")));
}

// What an empty table says, by its id; "empty" for any other.
const EMPTY = {
  pending: "empty: no job waiting",
  leases: "empty: no lease in flight",
  delayed: "empty: no delayed job",
  dead: "empty: no dead job here",
};

// A table without rows gets one saying it is empty, across all its columns.
function markEmptyTables(root) {
  for (const table of root.querySelectorAll("table")) {
    const body = table.tBodies[0];
    if (!body || body.rows.length > 0) continue;
    const head = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    const cols = head ? [...head.cells].reduce((n, c) => n + c.colSpan, 0) : 1;
    body.append(h("tr", { class: "empty" },
      h("td", { colspan: Math.max(1, cols), class: "muted" }, table.dataset.empty || EMPTY[table.id] || "empty")));
  }
}

// With a token, a "Sign out" button ends the session on the server.
document.addEventListener("DOMContentLoaded", () => {
  if (meta("auth") !== "true") return;
  const button = document.getElementById("logout");
  button.hidden = false;
  button.addEventListener("click", async () => {
    try {
      await post("/logout", {});
    } catch (err) {
      fail(err);
      return;
    }
    location.href = "/login";
  });
});
