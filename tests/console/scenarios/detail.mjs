// A queue page and a job page in trouble. The queue page names what is wrong in its
// badges (30 dead jobs waiting), never "healthy". The job page polls: once it shows the
// job this writes READY and the test stops Redis (SIGSTOP); the page then shows the
// outage banner at its top and keeps the job, marked as old; this writes MARKER, the
// test continues Redis, and the page recovers by itself. Waits are bounds, not timings.
import { writeFileSync } from "node:fs";

const WAIT = { timeout: 45000 };

export async function run(page, ctx) {
  const { url, queue, seen } = ctx;
  const q = encodeURIComponent(queue);
  await page.goto(`${url}/queue?q=${q}`);
  await page.waitForSelector("#main .badge");
  seen.queue_badges = await page.$$eval("#main h1 ~ div .badge", (b) => b.map((x) => x.textContent));
  await page.goto(`${url}/job?${new URLSearchParams({ q: queue, id: "big" })}`);
  await page.waitForSelector("#job-status");
  seen.job_status_before = await page.textContent("#job-status");
  seen.preview_chars = (await page.textContent("#job-payload")).length;

  ctx.expectRefusals(); // the job's API answers an error while Redis does not
  writeFileSync(process.env.READY, "shown");
  await page.waitForSelector("#outage:not([hidden]) li", WAIT);
  await page.waitForSelector("#main.stale", WAIT);
  seen.banner = await page.$$eval("#outage li", (l) => l.map((x) => x.textContent));
  seen.job_status_during = await page.textContent("#job-status");
  seen.age_during = await page.textContent("#data-age");

  writeFileSync(process.env.MARKER, "seen");
  await page.waitForSelector("#outage[hidden]", { ...WAIT, state: "attached" });
  await page.waitForFunction(() => /^page updated /.test(document.querySelector("#data-age")?.textContent || "")
    && !document.querySelector("#main").classList.contains("stale"), null, WAIT);
  seen.age_after = await page.textContent("#data-age");
  seen.job_status_after = await page.textContent("#job-status");
}
