// A Redis that stopped answering (SIGSTOPped by the test before this starts): every page
// shows the outage banner within a bounded wait, no queue is called healthy, the counts
// say how old they are. Then this writes the file MARKER, the test resumes Redis, and the
// pages recover by themselves: the dead-letter page opened during the outage shows its
// jobs, the banner goes, the overview's badges come back. Waits are bounds, not timings.
import { writeFileSync } from "node:fs";

const WAIT = { timeout: 45000 };
// The bound of what must show during the outage; a wait that runs out is recorded (the
// test fails on it) and the scenario goes on, so that the recovery is checked too.
const SHOWN = { timeout: 20000 };
const soft = (p) => p.then(() => true, (err) => String(err.message || err).split("\n")[0]);

const banner = async (page) => {
  const shown = await soft(page.waitForSelector("#outage:not([hidden]) li", SHOWN));
  if (shown !== true) return { not_shown: shown };
  return page.$$eval("#outage li", (l) => l.map((x) => x.textContent));
};

export async function run(page, ctx) {
  const { url, queue, seen, shots } = ctx;
  const q = encodeURIComponent(queue);
  ctx.expectRefusals(); // the API answers 502 while Redis does not: failed loads, expected

  // The overview: the banner, no "healthy" badge, every row's counts marked old.
  await page.goto(`${url}/`);
  seen.overview_banner = await banner(page);
  seen.overview_marked = await soft(page.waitForFunction(() => {
    const rows = document.querySelectorAll("#overview tbody tr");
    const healthy = [...document.querySelectorAll("#overview .badge")].filter((b) => b.textContent === "healthy");
    const stale = document.querySelectorAll("#overview [data-fresh=no]");
    return rows.length > 0 && healthy.length === 0 && stale.length === rows.length;
  }, null, SHOWN));
  // Read again once every row is marked and the banner has its queues' line (it comes
  // with the next refresh after the rows' own marks): the Redis line first, the queues' after.
  await soft(page.waitForFunction(
    () => [...document.querySelectorAll("#outage li")].some((l) => l.textContent.includes("queues")),
    null, SHOWN));
  seen.overview_banner = await banner(page);
  seen.overview_rows = await page.$$eval("#overview tbody tr", (r) => r.length);
  seen.overview_healthy = await page.$$eval("#overview .badge", (b) => b.filter((x) => x.textContent === "healthy").length);
  seen.overview_stale_notes = await page.$$eval("#overview [data-fresh=no]", (n) => n.length);
  seen.overview_badges = await page.$$eval(`#overview tr[data-queue="${queue}"] .badge`, (b) => b.map((x) => x.textContent));
  if (shots) await page.screenshot({ path: `${shots}/console-outage.png` });

  // The queue page: the banner at its top, its counts not called healthy.
  await page.goto(`${url}/queue?q=${q}`);
  seen.queue_banner = await banner(page);

  // The dead-letter page, opened during the outage: the banner, and no data yet.
  await page.goto(`${url}/dead?q=${q}`);
  seen.dead_banner = await banner(page);
  seen.dead_rows_during = await page.$$eval("#dead tbody tr", (r) => r.length);

  // Redis goes on; the same page shows its jobs and the banner goes, with no reload.
  writeFileSync(process.env.MARKER, "seen");
  await page.waitForSelector("#dead tbody tr", WAIT);
  await page.waitForSelector("#outage[hidden]", { ...WAIT, state: "attached" });
  seen.dead_rows_after = await page.$$eval("#dead tbody tr", (r) => r.map((x) => x.dataset.job));
  seen.dead_age = await page.textContent("#data-age");

  // The overview again: healthy badges back, no row marked old, the Redis panel.
  await page.goto(`${url}/`);
  await page.waitForFunction(() => {
    const rows = document.querySelectorAll("#overview tbody tr");
    const healthy = [...document.querySelectorAll("#overview .badge")].filter((b) => b.textContent === "healthy");
    return rows.length > 0 && healthy.length > 0 && document.querySelectorAll("#overview [data-fresh=no]").length === 0;
  }, null, WAIT);
  seen.healthy_after = await page.$$eval("#overview .badge", (b) => b.filter((x) => x.textContent === "healthy").length);
  await page.waitForSelector("#redis td[data-field=policy]", WAIT);
  seen.redis_policy = await page.textContent("#redis td[data-field=policy]");
  seen.banner_after = await page.$eval("#outage", (e) => e.hidden);
}
