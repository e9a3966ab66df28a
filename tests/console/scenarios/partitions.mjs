// A partitioned queue's dead-letter page: the dead jobs of every partition, each row
// naming its partition (data-part) and its link carrying it; the rows of one partition
// selected and redriven; a job of another partition opened by its link; then a search's
// matches over every partition redriven as one counted set.
export async function run(page, ctx) {
  const { url, queue, seen } = ctx;
  const q = encodeURIComponent(queue);
  const rows = () => page.$$eval("#dead tbody tr[data-job]", (rs) => rs.map((r) => ({
    job: r.dataset.job,
    part: r.dataset.part ?? null,
    href: r.querySelector("a").getAttribute("href"),
  })));
  await page.goto(`${url}/dead?q=${q}`);
  await page.waitForSelector("#dead tbody tr[data-job]");
  seen.rows = await rows();
  // The rows of partition 2, selected and redriven.
  const boxes = await page.$$('#dead tbody tr[data-part="2"] input[type=checkbox]');
  seen.part2_selected = boxes.length;
  for (const box of boxes) await box.check();
  await page.click("#redrive-selected");
  await page.waitForSelector("#notice");
  seen.selected_notice = await page.textContent("#notice");
  await page.waitForFunction((n) => document.querySelectorAll("#dead tbody tr[data-job]").length === n,
    seen.rows.length - boxes.length);
  seen.rows_after = await rows();
  // A job of partition 1, opened by its link.
  const one = seen.rows_after.find((r) => r.part === "1");
  if (!one) return;
  await page.goto(`${url}${one.href}`);
  await page.waitForSelector("#job-status");
  seen.job = one.job;
  seen.job_status = await page.textContent("#job-status");
  // Every match of a search, over all partitions, as one counted set.
  await page.goto(`${url}/dead?q=${q}`);
  await page.waitForSelector("#dead tbody tr[data-job]");
  await page.fill("#dead-search", "boom");
  await page.click("#dead-search-go");
  await page.waitForSelector("#redrive-matches");
  await page.click("#redrive-matches");
  await page.waitForSelector("#notice");
  seen.matches_notice = await page.textContent("#notice");
}
