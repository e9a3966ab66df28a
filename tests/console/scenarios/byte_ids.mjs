// Ids that look alike: a text id `bad\xff` (7 characters), the raw bytes 62 61 64 ff, and
// an id with a control character (its hex in ctx.search). Each row shows its own rendering
// and carries its own bytes; the raw one is selected and redriven; the control-character
// one opens (not a 404).
export async function run(page, ctx) {
  const { url, queue, seen, shots } = ctx;
  const q = encodeURIComponent(queue);
  const rows = () => page.$$eval("#dead tbody tr[data-job]", (rs) => rs.map((r) => ({
    shown: r.dataset.job,
    hex: r.dataset.idHex || null,
    styled_apart: !!r.querySelector("a.hexid"),
    text: r.querySelector("a").textContent,
    href: r.querySelector("a").getAttribute("href"),
  })));
  await page.goto(`${url}/dead?q=${q}`);
  await page.waitForSelector("#dead tbody tr[data-job]");
  seen.rows = await rows();
  if (shots) await page.screenshot({ path: `${shots}/console-byte-ids.png`, fullPage: true });
  // The raw one, by its bytes (a page without them cannot tell the two apart: the test
  // then fails on seen.rows).
  const box = await page.$('#dead tbody input[data-id-hex="626164ff"]');
  if (!box) return;
  await box.check();
  await page.click("#redrive-selected");
  await page.waitForSelector("#notice");
  seen.notice = await page.textContent("#notice");
  seen.rows_after = await rows();
  // The control-character id: its link opens its page.
  const ctl = seen.rows.find((r) => r.hex === ctx.search);
  if (!ctl) return;
  await page.goto(`${url}${ctl.href}`);
  await page.waitForSelector("#job-status, #job-error");
  seen.ctl_status = await page.$eval("#job-status", (e) => e.textContent).catch(() => null);
  seen.ctl_error = await page.$eval("#job-error", (e) => e.textContent).catch(() => null);
  seen.ctl_shown = await page.$eval("#job-id", (e) => e.textContent).catch(() => null);
}
