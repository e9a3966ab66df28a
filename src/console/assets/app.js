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
  if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
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
  if (!res.ok) throw new Error(reply.error || `HTTP ${res.status}`);
  return reply;
}

const qs = (o) => new URLSearchParams(o).toString();
const queueLink = (id) => `/queue?${qs({ q: id })}`;
const deadLink = (id) => `/dead?${qs({ q: id })}`;
const jobLink = (q, id) => `/job?${qs({ q, id })}`;

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
}

function poll(load) {
  let timer = null;
  const run = async () => {
    try {
      await load();
      setStatus(`updated ${new Date().toLocaleTimeString()}, every ${fmtDur(REFRESH_MS)}`);
    } catch (err) {
      fail(err);
    }
    timer = setTimeout(run, REFRESH_MS);
  };
  run();
  return () => clearTimeout(timer);
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
      h("th", {}, "Health"),
      kube ? h("th", {}, "JobQueue") : null);
    const rows = o.queues.map((q) => h("tr", { "data-queue": q.id },
      h("td", {}, h("a", { href: queueLink(q.id) }, q.id),
        q.name && q.name !== q.id ? h("div", { class: "muted" }, q.name) : null,
        q.error ? h("div", { class: "error" }, q.error) : null),
      COUNTS.map((c) => h("td", { class: "num", "data-count": c },
        c === "dead" && q.counts
          ? h("a", { href: deadLink(q.id) }, String(q.counts[c]))
          : (q.counts ? String(q.counts[c]) : "-"))),
      h("td", {}, rateCell(q.rates, 160, 28)),
      h("td", { class: "num", "data-latency": "p50", title: q.latency_note || "" }, q.p50_ms === null ? "n/a" : fmtMs(q.p50_ms)),
      h("td", { class: "num", "data-latency": "p99", title: q.latency_note || "" }, q.p99_ms === null ? "n/a" : fmtMs(q.p99_ms)),
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
      ? h("a", { href: `/api/payload?${qs({ q: job.queue_id, id: job.id })}` }, `download all ${job.payload_bytes} bytes`)
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
      queueOps(id, q, d.writes, load),
      cards(q.counts),
      charts,
      historyPanel(id),
      h("p", { class: "muted" },
        q.latency_note ? `processing time: ${q.latency_note}` : `processing time p50 ${fmtMs(q.p50_ms)}, p99 ${fmtMs(q.p99_ms)}`),
      q.kube ? [h("h2", {}, "JobQueue"), kubeCell(q.kube)] : null,
      h("h2", {}, "Next in line"),
      pager(offset, d.limit, d.pending.length, (o) => { offset = o; load().catch(fail); }),
      h("table", { id: "pending" },
        h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "id"), h("th", { class: "num" }, "attempts"), h("th", {}, "enqueued"), h("th", {}, "payload"))),
        h("tbody", {}, d.pending.map((j, i) => h("tr", {},
          h("td", {}, String(offset + i + 1)),
          h("td", {}, h("a", { href: jobLink(id, j.id) }, j.id)),
          h("td", { class: "num" }, String(j.attempts)),
          h("td", {}, fmtTime(j.enqueued_at)),
          payloadCell(j))))),
      h("h2", {}, "Leases in flight"),
      h("table", { id: "leases" },
        h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "worker"), h("th", { class: "num" }, "attempt"), h("th", {}, "time left"), h("th", {}, "payload"))),
        h("tbody", {}, d.leases.map((j) => h("tr", {},
          h("td", {}, h("a", { href: jobLink(id, j.id) }, j.id)),
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
          h("td", {}, h("a", { href: jobLink(id, j.id) }, j.id)),
          h("td", {}, `${fmtTime(j.run_at)} (${j.due_in_ms >= 0 ? "in " + fmtDur(j.due_in_ms) : "due"})`),
          h("td", { class: "num" }, String(j.attempts)),
          payloadCell(j))))),
      h("h2", {}, "Settings (meta)"),
      h("dl", { class: "kv", id: "settings" }, d.settings.map((s) => [h("dt", {}, s.name), h("dd", {}, s.value)])));
  };
  poll(load);
}

// --- Dead letters -----------------------------------------------------------------

async function deadPage() {
  const id = params.get("q");
  document.title = `jobqueue: dead letters of ${id}`;
  let offset = 0;
  let search = params.get("search") || "";
  let notice = null;
  const selected = new Set();

  const act = async (verb, body, what) => {
    const path = `/api/dead/${verb}`;
    try {
      const dry = await post(path, { q: id, ...body, dry_run: true });
      const doing = verb === "redrive" ? "Redrive" : "Purge for good";
      const whither = verb === "redrive" ? " back to pending" : "";
      if (!confirm(`${doing} ${dry.would} dead job${dry.would === 1 ? "" : "s"} (${what})${whither}?`)) return;
      const done = await post(path, { q: id, ...body });
      notice = `${done.verb} ${done.done} dead job${done.done === 1 ? "" : "s"}`;
      selected.clear();
      await load();
    } catch (err) {
      fail(err);
    }
  };

  const load = async () => {
    const d = await api(`/api/dead?${qs({ q: id, offset, limit: 20, search })}`);
    const q = d.queue;
    const input = h("input", { type: "search", id: "dead-search", value: search, placeholder: "id or error text" });
    const form = h("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); search = input.value; offset = 0; load().catch(fail); } },
      input, h("button", { type: "submit", id: "dead-search-go" }, "Search"),
      search ? h("button", { type: "button", onclick: () => { search = ""; offset = 0; load().catch(fail); } }, "clear") : null);
    const tools = WRITES && d.writes ? h("div", { class: "toolbar" },
      h("button", { class: "primary", id: "redrive-selected", onclick: () => selected.size && act("redrive", { ids: [...selected] }, "selected") }, "Redrive selected"),
      h("button", { class: "danger", id: "purge-selected", onclick: () => selected.size && act("purge", { ids: [...selected] }, "selected") }, "Purge selected"),
      h("button", { class: "primary", id: "redrive-all", onclick: () => act("redrive", { all: true }, "all") }, "Redrive all"),
      h("button", { class: "danger", id: "purge-all", onclick: () => act("purge", { all: true }, "all") }, "Purge all"))
      : h("p", { class: "muted" }, "Read-only: start the console with --allow-writes to redrive or purge.");
    const rows = d.jobs.map((j) => {
      j.queue_id = id;
      return h("tr", { "data-job": j.id },
        WRITES && d.writes ? h("td", {}, h("input", {
          type: "checkbox", "aria-label": `select ${j.id}`, checked: selected.has(j.id),
          onchange: (e) => (e.target.checked ? selected.add(j.id) : selected.delete(j.id)),
        })) : null,
        h("td", {}, h("a", { href: jobLink(id, j.id) }, j.id)),
        h("td", {}, fmtTime(j.died_at)),
        h("td", { class: "num" }, String(j.attempts)),
        h("td", {}, h("pre", { class: "payload" }, j.last_error || "-")),
        payloadCell(j));
    });
    const total = q.counts ? q.counts.dead : 0;
    main(
      h("h1", {}, `Dead letters of ${id}`, " ", h("a", { href: queueLink(id), class: "muted" }, "← queue")),
      h("p", { id: "dead-total" }, d.search
        ? `${d.matched} of the ${d.scanned} dead jobs looked at match "${d.search}"${d.search_truncated ? " (search stopped at the cap)" : ""}`
        : `${total} dead jobs`),
      notice ? h("p", { class: "notice", id: "notice" }, notice) : null,
      form, tools,
      pager(offset, d.limit, d.jobs.length, (o) => { offset = o; load().catch(fail); }),
      h("table", { id: "dead" },
        h("thead", {}, h("tr", {}, WRITES && d.writes ? h("th", {}, "") : null, h("th", {}, "id"), h("th", {}, "died"), h("th", { class: "num" }, "attempts"), h("th", {}, "last error"), h("th", {}, "payload"))),
        h("tbody", {}, rows)));
  };
  try {
    await load();
    setStatus("loaded");
  } catch (err) {
    fail(err);
  }
}

// --- Job --------------------------------------------------------------------------

async function jobPage() {
  const q = params.get("q");
  const id = params.get("id");
  document.title = `jobqueue: job ${id}`;
  let notice = null;
  const load = async () => {
    let j;
    try {
      j = await api(`/api/job?${qs({ q, id })}`);
    } catch (err) {
      main(h("h1", {}, `Job ${id}`), notice ? h("p", { class: "notice", id: "notice" }, notice) : null,
        h("p", { class: "error", id: "job-error" }, err.message));
      return;
    }
    const act = async (verb) => {
      const what = verb === "redrive" ? "Redrive this job back to pending?" : "Purge this job and its payload for good?";
      if (!confirm(what)) return;
      try {
        const done = await post(`/api/dead/${verb}`, { q, ids: [id] });
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
      ["payload", h("div", {},
        h("pre", { class: "payload", id: "job-payload" }, j.payload),
        h("a", { href: `/api/payload?${qs({ q, id })}`, id: "job-download" },
          j.payload_truncated ? `download all ${j.payload_bytes} bytes (preview above)` : `download (${j.payload_bytes} bytes)`))],
    ].filter(Boolean);
    main(
      h("h1", {}, `Job ${id}`),
      notice ? h("p", { class: "notice", id: "notice" }, notice) : null,
      h("dl", { class: "kv", id: "job" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      jobExtras(q, id, j, async (msg) => { notice = msg; await load(); }),
      j.actions.length ? h("div", { class: "toolbar" },
        j.actions.includes("redrive") ? h("button", { class: "primary", id: "job-redrive", onclick: () => act("redrive") }, "Redrive") : null,
        j.actions.includes("purge") ? h("button", { class: "danger", id: "job-purge", onclick: () => act("purge") }, "Purge") : null) : null);
  };
  try {
    await load();
    setStatus("loaded");
  } catch (err) {
    fail(err);
  }
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
      const r = await post(`/api/job/${verb}`, { q, id });
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
    if (id) location.href = jobLink(select.value, id);
  });
  try {
    const o = await api("/api/overview");
    const current = params.get("q");
    select.replaceChildren(...o.queues.map((q) => h("option", { value: q.id, selected: q.id === current }, q.id)));
  } catch (err) {
    fail(err);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  header();
  const pages = { "/": overviewPage, "/queue": queuePage, "/dead": deadPage, "/job": jobPage, "/workers": workersPage };
  (pages[location.pathname] || overviewPage)();
});
