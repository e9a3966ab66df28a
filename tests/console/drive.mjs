// Drives a headless Chromium (Debian's, through playwright-core) through `jobqueue ui`
// for tests/console.rs, and prints what it saw as one JSON object on stdout; the Rust
// test asserts on it. Usage:
//   node drive.mjs writes|readonly|kubernetes|NAME   with CONSOLE_URL, QUEUE, SEARCH, SHOTS
// (optional); NAME runs scenarios/NAME.mjs.
import { existsSync } from "node:fs";
import { chromium } from "playwright-core";

const url = process.env.CONSOLE_URL;
const queue = process.env.QUEUE;
const scenario = process.argv[2];
const shots = process.env.SHOTS || "";
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const TIMEOUT = 20000;

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const seen = { scenario, console_errors: [], dialogs: [] };
// The refused POSTs below are logged by the browser as failed loads: expected there.
let refusalsExpected = false;
try {
  const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  page.on("console", (m) => {
    if (m.type() === "error" && !refusalsExpected) seen.console_errors.push(m.text());
  });
  page.on("dialog", async (d) => { seen.dialogs.push(d.message()); await d.accept(); });
  const q = encodeURIComponent(queue);

  // A scenario of its own file, scenarios/NAME.mjs: `export async function run(page, ctx)`
  // fills `seen` (ctx: url, queue, search, shots, seen, expectRefusals()).
  const own = new URL(`./scenarios/${scenario}.mjs`, import.meta.url);
  if (existsSync(own)) {
    const { run } = await import(own.href);
    await run(page, {
      url, queue, search: process.env.SEARCH || "", shots, seen, context, browser,
      expectRefusals: () => { refusalsExpected = true; },
    });
    process.stdout.write(JSON.stringify(seen) + "\n");
    process.exit(0);
  }

  // With --kubernetes: the JobQueue column beside the counts, and nothing else.
  if (scenario === "kubernetes") {
    await page.goto(`${url}/`);
    await page.waitForSelector(`#overview tr[data-queue="${queue}"] td[data-kube]`);
    seen.kube = await page.$$eval("#overview tbody tr", (rows) => Object.fromEntries(rows.map((r) =>
      [r.dataset.queue, {
        badges: [...r.querySelectorAll("td[data-kube] .badge")].map((b) => b.textContent.trim()),
        text: r.querySelector("td[data-kube]").textContent.trim(),
        pending: r.querySelector('td[data-count="pending"]').textContent.trim(),
        error: r.querySelector(".error")?.textContent.trim() ?? null,
      }])));
    if (shots) await page.screenshot({ path: `${shots}/console-kubernetes.png`, fullPage: true });
    process.stdout.write(JSON.stringify(seen) + "\n");
    process.exit(0);
  }

  // The overview: the counts of each queue as the table shows them.
  await page.goto(`${url}/`);
  await page.waitForSelector(`#overview tr[data-queue="${queue}"]`);
  seen.overview = await page.$$eval("#overview tbody tr", (rows) =>
    Object.fromEntries(rows.map((r) => [r.dataset.queue, Object.fromEntries(
      [...r.querySelectorAll("td[data-count]")].map((td) => [td.dataset.count, td.textContent.trim()]))])));
  seen.overview_latency = await page.$$eval(`#overview tr[data-queue="${queue}"] td[data-latency]`,
    (tds) => tds.map((td) => td.textContent.trim()));
  seen.overview_badges = await page.$$eval("#overview tbody tr", (rows) =>
    Object.fromEntries(rows.map((r) => [r.dataset.queue,
      [...r.querySelectorAll(".badge")].map((b) => b.textContent.trim())])));
  seen.overview_sparklines = await page.$$eval("#overview svg.spark polyline", (l) => l.length);
  if (shots) await page.screenshot({ path: `${shots}/console-overview.png`, fullPage: true });

  // The queue page: the payload holding markup is text in a <pre>, and ran nothing.
  await page.goto(`${url}/queue?q=${q}`);
  await page.waitForSelector("#pending tbody tr");
  seen.queue_pending_rows = await page.$$eval("#pending tbody tr", (r) => r.length);
  seen.queue_leases = await page.$$eval("#leases tbody tr", (rows) =>
    rows.map((r) => [...r.querySelectorAll("td")].map((td) => td.textContent.trim())));
  seen.queue_delayed_rows = await page.$$eval("#delayed tbody tr", (r) => r.length);
  seen.queue_settings = await page.$$eval("#settings dt", (d) => d.map((x) => x.textContent));
  seen.markup = await page.$$eval("pre.payload", (pres) => {
    const pre = pres.find((p) => p.textContent.includes("<script>"));
    return pre ? { text: pre.textContent, child_elements: pre.children.length } : null;
  });
  seen.markup_ran = await page.evaluate(() => window.__xss !== undefined);
  seen.injected_elements = await page.$$eval("main img, main script", (e) => e.length);
  if (shots) await page.screenshot({ path: `${shots}/console-queue.png`, fullPage: true });

  // The dead letters: every dead job, then a search by error text.
  await page.goto(`${url}/dead?q=${q}`);
  await page.waitForSelector("#dead tbody tr");
  seen.dead_rows = await page.$$eval("#dead tbody tr", (r) => r.map((x) => x.dataset.job));
  seen.dead_controls = await page.$$eval(
    "#redrive-all, #purge-all, #redrive-selected, #purge-selected, #dead input[type=checkbox]",
    (e) => e.length);
  if (shots) await page.screenshot({ path: `${shots}/console-dead.png`, fullPage: true });
  await page.fill("#dead-search", process.env.SEARCH);
  await page.click("#dead-search-go");
  await page.waitForFunction(() => /match/.test(document.querySelector("#dead-total")?.textContent || ""));
  seen.search_total = await page.textContent("#dead-total");
  seen.search_rows = await page.$$eval("#dead tbody tr", (r) => r.map((x) => x.dataset.job));

  // Open the first match: the job page, and (with writes) redrive it.
  const first = seen.search_rows[0];
  await page.click(`#dead tbody tr[data-job="${first}"] a`);
  await page.waitForSelector("#job-status");
  seen.job_status_before = await page.textContent("#job-status");
  seen.job_error = await page.textContent("#job-error-text");
  seen.job_controls = await page.$$eval("#job-redrive, #job-purge", (e) => e.length);
  if (scenario === "writes") {
    await page.click("#job-redrive");
    await page.waitForSelector("#notice");
    seen.job_notice = await page.textContent("#notice");
    seen.job_status_after = await page.textContent("#job-status");
  }

  // Writes without the page's CSRF token, and with it (a dry run, which changes nothing).
  refusalsExpected = true;
  seen.post_without_csrf = await page.evaluate(async (queue) => {
    const r = await fetch("/api/dead/redrive", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ q: queue, all: true }),
    });
    return { status: r.status, body: await r.json() };
  }, queue);
  seen.post_with_csrf = await page.evaluate(async (queue) => {
    const token = document.querySelector('meta[name="csrf-token"]').content;
    const r = await fetch("/api/dead/redrive", {
      method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": token },
      body: JSON.stringify({ q: queue, all: true, dry_run: true }),
    });
    return { status: r.status, body: await r.json() };
  }, queue);
  // A selection on the dead-letter page: every row checked, purged after the count.
  if (scenario === "writes") {
    await page.goto(`${url}/dead?q=${q}`);
    await page.waitForSelector("#dead tbody tr");
    for (const box of await page.$$("#dead tbody input[type=checkbox]")) await box.check();
    await page.click("#purge-selected");
    await page.waitForSelector("#notice");
    seen.purge_notice = await page.textContent("#notice");
    seen.dead_rows_after_purge = await page.$$eval("#dead tbody tr[data-job]", (r) => r.length);
    seen.dead_empty_row = await page.$$eval("#dead tbody tr.empty", (r) => r.map((x) => x.textContent.trim()));
    seen.dead_total_after_purge = await page.textContent("#dead-total");
  }
  process.stdout.write(JSON.stringify(seen) + "\n");
} catch (err) {
  seen.failure = String(err && err.stack || err);
  process.stdout.write(JSON.stringify(seen) + "\n");
  process.exitCode = 1;
} finally {
  await browser.close();
}
