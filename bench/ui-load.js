// The web UI's first load, read through the DevTools protocol in headless
// Chromium: bytes transferred (every response's encoded length, headers
// included) and the time from navigation start until the services rows
// are in the DOM. Usage: node bench/ui-load.js <http port> [runs]
"use strict";

const path = require("node:path");
const { chromium } = require(path.join(__dirname, "..", "tests", "node", "node_modules", "playwright-core"));

async function main() {
  const port = process.argv[2];
  const runs = Number(process.argv[3] || 5);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const results = [];
  for (let run = 0; run < runs; run++) {
    // A new context each run: an empty cache, as a first visit.
    const context = await browser.newContext();
    const page = await context.newPage();
    const cdp = await context.newCDPSession(page);
    await cdp.send("Network.enable");
    await cdp.send("Network.setCacheDisabled", { cacheDisabled: true });
    let bytes = 0;
    cdp.on("Network.loadingFinished", (e) => { bytes += e.encodedDataLength; });
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/services`, { waitUntil: "commit" });
    await page.waitForSelector("#services tbody tr[data-service]");
    const rowsAt = await page.evaluate(() => performance.now());
    // Let the first blocking query's request finish counting (it stays open).
    await page.waitForTimeout(200);
    results.push({ bytes, rowsAt });
    await context.close();
  }
  await browser.close();
  const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const kb = results.map((r) => r.bytes / 1024);
  const ms = results.map((r) => r.rowsAt);
  console.log(`runs=${runs} transferred_kb_median=${median(kb).toFixed(1)} ` +
    `rows_in_dom_ms_median=${median(ms).toFixed(0)} rows_in_dom_ms_max=${Math.max(...ms).toFixed(0)}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
