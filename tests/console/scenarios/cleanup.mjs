// Clean-up at scale on the dead-letter page: newest death first; a search, every match
// selected on the page and acted on as one set ("Redrive all matches", whose confirm
// counts exactly that set); a jump to a time (ctx.search, `YYYY-MM-DD HH:MM:SS`).
export async function run(page, ctx) {
  const { url, queue, seen, shots } = ctx;
  const q = encodeURIComponent(queue);
  const shown = () => page.$$eval("#dead tbody tr[data-job]", (rs) => rs.map((r) => r.dataset.job));
  await page.goto(`${url}/dead?q=${q}`);
  await page.waitForSelector("#dead tbody tr[data-job]");
  seen.first_rows = await shown();
  // Jump to a time: the jobs that died then or before.
  await page.fill("#dead-jump", ctx.search);
  await page.click("#dead-jump-go");
  await page.waitForFunction((n) => document.querySelectorAll("#dead tbody tr[data-job]").length < n,
    seen.first_rows.length);
  seen.jump_rows = await shown();
  await page.fill("#dead-jump", "");
  await page.click("#dead-jump-go");
  await page.waitForFunction((n) => document.querySelectorAll("#dead tbody tr[data-job]").length === n,
    seen.first_rows.length);
  // A search, and every row of its page selected at once.
  await page.fill("#dead-search", "declined");
  await page.click("#dead-search-go");
  await page.waitForFunction(() => /match/.test(document.querySelector("#dead-total")?.textContent || ""));
  seen.search_total = await page.textContent("#dead-total");
  seen.search_rows = await shown();
  await page.check("#select-page");
  seen.checked = await page.$$eval("#dead tbody input[type=checkbox]:checked", (b) => b.length);
  seen.match_controls = await page.$$eval("#redrive-matches, #purge-matches", (b) => b.length);
  if (shots) await page.screenshot({ path: `${shots}/console-dead-search.png`, fullPage: true });
  // Every match, as one counted set.
  await page.click("#redrive-matches");
  await page.waitForSelector("#notice");
  seen.matches_notice = await page.textContent("#notice");
}
