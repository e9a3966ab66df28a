// The operator's hand (tests/console_ops.rs): pause and resume a queue from its page, its
// history chart, the workers page, a job's attempt errors, run now and delete one job.
// Takes console-history.png and console-workers.png when ctx.shots is set.
export async function run(page, ctx) {
  const { url, queue, shots, seen } = ctx;
  const q = encodeURIComponent(queue);
  const text = async (sel) => (await page.textContent(sel)).trim();

  // The queue page: Pause, then Resume.
  await page.goto(`${url}/queue?q=${q}`);
  await page.waitForSelector("#paused-banner");
  seen.banner_before = await text("#paused-banner");
  seen.schedules = await page.$$eval("#schedules tbody tr", (rs) =>
    rs.map((r) => [...r.querySelectorAll("td")].map((td) => td.textContent.trim())));
  await page.click("#queue-pause");
  await page.waitForFunction(() => /^paused/.test(document.querySelector("#paused-banner")?.textContent || ""));
  seen.banner_paused = await text("#paused-banner");
  await page.click("#queue-resume");
  await page.waitForFunction(() => document.querySelector("#paused-banner")?.textContent === "claiming");
  seen.banner_resumed = await text("#paused-banner");

  // Its history, from Redis.
  await page.waitForSelector('#history-chart polyline[data-series="enqueued"]');
  seen.history_points = await page.$eval('#history-chart polyline[data-series="enqueued"]',
    (l) => l.getAttribute("points").trim().split(/\s+/).length);
  seen.history_totals = await page.$$eval("#history-chart polyline[data-series]", (ls) =>
    Object.fromEntries(ls.map((l) => [l.dataset.series, l.dataset.total])));
  seen.latency_windows = await page.$$eval("#latency-windows tr[data-window]", (rs) => rs.map((r) => r.dataset.window));
  if (shots) {
    await page.locator("#history").scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${shots}/console-history.png` });
  }

  // The workers page.
  await page.click("#workers-link");
  await page.waitForSelector("#holders tbody tr");
  await page.waitForSelector("#seen tbody tr");
  seen.holders = await page.$$eval("#holders tbody tr", (rs) =>
    Object.fromEntries(rs.map((r) => [r.dataset.worker, r.querySelectorAll("td")[1].textContent.trim()])));
  seen.seen_workers = await page.$$eval("#seen tbody tr", (rs) => rs.map((r) => r.dataset.worker));
  if (shots) await page.screenshot({ path: `${shots}/console-workers.png`, fullPage: true });

  // A job's attempt errors.
  await page.goto(`${url}/job?q=${q}&id=flaky`);
  await page.waitForSelector("#job-errors tbody tr");
  seen.job_errors = await page.$$eval("#job-errors tbody tr", (rs) =>
    rs.map((r) => [...r.querySelectorAll("td")].filter((_, i) => i !== 1).map((td) => td.textContent.trim())));

  // Run a delayed job now.
  await page.goto(`${url}/job?q=${q}&id=scheduled-1`);
  await page.waitForSelector("#job-run-now");
  await page.click("#job-run-now");
  await page.waitForFunction(() => document.querySelector("#job-status")?.textContent === "pending");
  seen.run_now_status = await text("#job-status");

  // Delete a pending job (the page's reload then finds no job: a 404 the browser logs).
  await page.goto(`${url}/job?q=${q}&id=order-11`);
  await page.waitForSelector("#job-delete");
  ctx.expectRefusals();
  await page.click("#job-delete");
  await page.waitForSelector("#notice");
  seen.delete_notice = await text("#notice");
}
