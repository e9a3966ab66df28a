// Long tags and ids on a 1280 px screen, an unknown queue, empty tables. ctx.queue holds
// a dead job with a 256-byte id; ctx.search is a 200-byte tag; the queue "idle" is empty.
export async function run(page, ctx) {
  const { url, queue, seen } = ctx;
  await page.setViewportSize({ width: 1280, height: 800 });
  const longTag = ctx.search;

  // The overview: the queue menu, and the right edge of the last count column.
  await page.goto(`${url}/`);
  await page.waitForSelector(`#overview tr[data-queue="${longTag}"]`);
  await page.waitForSelector(`#lookup-queue option[value="${longTag}"]`, { state: "attached" });
  seen.menu_width = await page.$eval("#lookup-queue", (el) => el.getBoundingClientRect().width);
  seen.overview_right = await page.$eval(`#overview tr[data-queue="${longTag}"] td[data-count="orphaned"]`,
    (el) => el.getBoundingClientRect().right);
  seen.page_width = await page.evaluate(() => document.documentElement.scrollWidth);

  // The dead page: the id column wraps the 256-byte id, the error column keeps room.
  await page.goto(`${url}/dead?q=${encodeURIComponent(queue)}`);
  await page.waitForSelector("#dead tbody tr[data-job]");
  const cells = await page.$$eval("#dead thead th", (ths) => ths.map((th) => th.textContent.trim()));
  const idCol = cells.indexOf("id");
  const errCol = cells.indexOf("last error");
  const widths = await page.$eval("#dead tbody tr[data-job]", (tr) =>
    [...tr.cells].map((td) => td.getBoundingClientRect().width));
  seen.id_width = widths[idCol];
  seen.error_width = widths[errCol];
  seen.dead_page_width = await page.evaluate(() => document.documentElement.scrollWidth);

  // An empty queue: each of its tables says it is empty.
  await page.goto(`${url}/queue?q=idle`);
  await page.waitForSelector("#pending tbody tr.empty");
  seen.empty_rows = await page.$$eval("#pending tr.empty td, #leases tr.empty td, #delayed tr.empty td",
    (tds) => tds.map((td) => td.textContent.trim()));

  // An unknown queue: said at once, not "Loading…" (the browser logs the API's 404).
  ctx.expectRefusals();
  await page.goto(`${url}/queue?q=nosuch`);
  await page.waitForSelector("#no-such-queue");
  seen.no_such_queue = await page.$eval("#no-such-queue", (el) => el.textContent.trim());

}
