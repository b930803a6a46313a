// The web UI in headless Chromium (Debian's, driven by playwright-core over
// the DevTools protocol): the services page shows a service registered
// after it loaded without a reload, a service named like a script shows as
// text and runs nothing, a service's page lists its instances, and the
// Content-Security-Policy is not violated. Screenshots of each page go to
// target/ui-screenshots/.
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { chromium } = require("playwright-core");
const { startAgent } = require("./agent");

const CHROMIUM = process.env.CHROMIUM_BIN || "/usr/bin/chromium";
const SHOTS = path.join(__dirname, "..", "..", "target", "ui-screenshots");

async function browser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
}

test("the services page follows the catalog live and renders names as text", async () => {
  const { child, consul, port } = await startAgent();
  const chrome = await browser();
  try {
    fs.mkdirSync(SHOTS, { recursive: true });
    const page = await chrome.newPage({ viewport: { width: 1100, height: 600 } });
    const problems = [];
    page.on("dialog", (d) => { problems.push(`dialog: ${d.message()}`); d.dismiss(); });
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(`console: ${m.text()}`);
    });
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("response", (r) => {
      if (r.status() >= 400) problems.push(`${r.status()}: ${r.url()}`);
    });

    await page.goto(`http://127.0.0.1:${port}/`);
    await page.waitForURL(`http://127.0.0.1:${port}/ui/dc1/services`);
    await page.waitForSelector('#services tr[data-service="consul"]');

    // Registered after the page loaded: it appears without a reload.
    const evil = "<script>alert(1)</script>";
    await consul.agent.service.register({ name: "web", port: 80, tags: ["v1"] });
    await consul.agent.service.register({ name: evil, port: 81, tags: ["<img src=x onerror=alert(2)>"] });
    await page.waitForSelector('#services tr[data-service="web"]', { timeout: 10000 });
    const row = page.locator("#services tr").filter({ hasText: evil });
    await row.waitFor({ timeout: 10000 });
    assert.equal(await page.locator("#services script").count(), 0);
    assert.equal(await page.locator("#services img").count(), 0);
    assert.match(await row.innerText(), /<img src=x onerror=alert\(2\)>/);
    await page.screenshot({ path: path.join(SHOTS, "services.png") });

    // Search narrows the list.
    await page.fill('input[type="search"]', "we");
    await page.waitForFunction(() => document.querySelectorAll("#services tbody tr").length === 1);
    await page.fill('input[type="search"]', "");

    // A service's page lists its instances.
    await page.click('#services tr[data-service="web"] a');
    await page.waitForURL(/\/ui\/dc1\/services\/web$/);
    await page.waitForSelector("#instances tbody tr");
    assert.match(await page.locator("#instances").innerText(), /127\.0\.0\.1:80/);
    await page.screenshot({ path: path.join(SHOTS, "service.png") });

    await page.click("nav >> text=Nodes");
    await page.waitForSelector("#nodes tbody tr");
    await page.screenshot({ path: path.join(SHOTS, "nodes.png") });

    // An unknown client route shows the app's own page.
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/nowhere`);
    await page.waitForSelector("text=Page not found");

    assert.deepEqual(problems, []);
  } finally {
    await chrome.close();
    child.kill();
  }
});
