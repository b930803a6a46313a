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

test("a key is created, edited and deleted in the UI", async () => {
  const { child, consul, port } = await startAgent();
  const chrome = await browser();
  try {
    const page = await chrome.newPage({ viewport: { width: 1100, height: 700 } });
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/kv/`);
    await page.fill('#kv-create input[name="key"]', "app/config");
    await page.fill('#kv-create textarea[name="value"]', "first <b>value</b>");
    await page.click('#kv-create button[type="submit"]');
    // The folder appears in the list (live), and the key holds the value.
    await page.waitForSelector('#kv tr[data-key="app/"]');
    assert.equal((await consul.kv.get("app/config")).Value, "first <b>value</b>");

    await page.click('#kv tr[data-key="app/"] a');
    await page.waitForSelector('#kv tr[data-key="app/config"]');
    await page.click('#kv tr[data-key="app/config"] a');
    await page.waitForURL(/\/kv\/app\/config\/edit$/);
    await page.waitForFunction(() => document.querySelector('#kv-edit textarea').value === "first <b>value</b>");
    await page.fill("#kv-edit textarea", "second");
    await page.fill('#kv-edit input[name="flags"]', "42");
    await page.click('#kv-edit button[type="submit"]');
    await page.waitForSelector("#kv-edit .saved");
    const edited = await consul.kv.get("app/config");
    assert.equal(edited.Value, "second");
    assert.equal(edited.Flags, 42);
    await page.screenshot({ path: path.join(SHOTS, "kv-edit.png") });

    await page.click("#kv-edit button.danger");
    await page.waitForURL(/\/kv\/app\/$/);
    assert.equal(await consul.kv.get("app/config"), undefined);
  } finally {
    await chrome.close();
    child.kill();
  }
});

test("an intention created in the UI denies and its deletion restores", async () => {
  const { child, port } = await startAgent();
  const chrome = await browser();
  const check = async () => {
    const res = await fetch(`http://127.0.0.1:${port}/v1/connect/intentions/check?source=web&destination=db`);
    return (await res.json()).Allowed;
  };
  try {
    assert.equal(await check(), true);
    const page = await chrome.newPage({ viewport: { width: 1100, height: 700 } });
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/intentions`);
    await page.fill('#intention-create input[name="source"]', "web");
    await page.fill('#intention-create input[name="destination"]', "db");
    await page.selectOption('#intention-create select[name="action"]', "deny");
    await page.fill('#intention-create input[name="description"]', "<i>no</i> web to db");
    await page.click('#intention-create button[type="submit"]');
    const row = page.locator('#intentions tr[data-intention="web>db"]');
    await row.waitFor();
    assert.match(await row.innerText(), /<i>no<\/i> web to db/);
    assert.equal(await check(), false);
    await page.screenshot({ path: path.join(SHOTS, "intentions.png") });

    await row.locator("button").click();
    await row.waitFor({ state: "detached" });
    assert.equal(await check(), true);
    const left = await (await fetch(`http://127.0.0.1:${port}/v1/connect/intentions`)).json();
    assert.deepEqual(left, []);
  } finally {
    await chrome.close();
    child.kill();
  }
});

test("with ACLs on, the UI asks for a token and shows only what it may read", async () => {
  const root = "8c6f2d9e-3a51-4b7c-9d0e-1f2a3b4c5d6e";
  const { child, port } = await startAgent([
    `-hcl=acl { enabled = true default_policy = "deny" tokens { initial_management = "${root}" } }`,
  ]);
  const chrome = await browser();
  const api = async (method, p, body) => {
    const res = await fetch(`http://127.0.0.1:${port}${p}`, {
      method, headers: { "X-Consul-Token": root }, body: body && JSON.stringify(body),
    });
    const text = await res.text();
    assert.ok(res.ok, `${method} ${p}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  try {
    // ACL bootstrapping takes a moment after the leader is known.
    for (let i = 0; i < 100; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/v1/acl/token/self`, { headers: { "X-Consul-Token": root } });
      if (res.ok) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await api("PUT", "/v1/agent/service/register", { Name: "web", Port: 80 });
    await api("PUT", "/v1/agent/service/register", { Name: "db", Port: 5432 });
    await api("PUT", "/v1/acl/policy", {
      Name: "web-reader",
      Rules: 'service "web" { policy = "read" } node_prefix "" { policy = "read" }',
    });
    const token = await api("PUT", "/v1/acl/token", { Description: "web reader", Policies: [{ Name: "web-reader" }] });

    const page = await chrome.newPage({ viewport: { width: 1100, height: 600 } });
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/services`);
    await page.waitForSelector(".banner");
    assert.match(await page.locator(".banner").innerText(), /log in with a token/);
    assert.equal(await page.locator("#services tbody tr").count(), 0);

    await page.click(".banner a");
    await page.fill('#login input[name="token"]', "not-a-real-token");
    await page.click('#login button[type="submit"]');
    await page.waitForSelector('#login .status:has-text("Not logged in")');
    await page.fill('#login input[name="token"]', token.SecretID);
    await page.click('#login button[type="submit"]');
    await page.waitForSelector('#login .status:has-text("Logged in: web reader")');

    await page.click("nav >> text=Services");
    await page.waitForSelector('#services tr[data-service="web"]');
    assert.equal(await page.locator('#services tr[data-service="db"]').count(), 0);
    await page.screenshot({ path: path.join(SHOTS, "services-with-token.png") });
  } finally {
    await chrome.close();
    child.kill();
  }
});

test("the discovery chain of a splitter over two subsets is drawn with both branches", async () => {
  const { child, port } = await startAgent();
  const chrome = await browser();
  const put = async (entry) => {
    const res = await fetch(`http://127.0.0.1:${port}/v1/config`, { method: "PUT", body: JSON.stringify(entry) });
    assert.equal(await res.text(), "true");
  };
  try {
    await put({ Kind: "service-defaults", Name: "web", Protocol: "http" });
    await put({
      Kind: "service-resolver", Name: "web",
      Subsets: { v1: { Filter: "Service.Meta.version == v1" }, v2: { Filter: "Service.Meta.version == v2" } },
    });
    await put({
      Kind: "service-splitter", Name: "web",
      Splits: [{ Weight: 90, ServiceSubset: "v1" }, { Weight: 10, ServiceSubset: "v2" }],
    });
    const page = await chrome.newPage({ viewport: { width: 1300, height: 500 } });
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/services/web/routing`);
    await page.waitForSelector('#chain [data-node="target:v2.web.default.default.dc1"]');
    const boxes = async (column) => page.locator(`#chain [data-column="${column}"] .box`).count();
    assert.equal(await boxes("splitter"), 1);
    assert.equal(await boxes("resolver"), 2);
    assert.equal(await boxes("target"), 2);
    // service → splitter, the two splits, each resolver to its target.
    await page.waitForFunction(() => document.querySelectorAll("#chain svg g").length === 5);
    const splits = await page.locator('#chain svg g[data-from="splitter:web.default.default"] text').allTextContents();
    assert.deepEqual(splits.sort(), ["10%", "90%"]);
    assert.equal(
      await page.locator('#chain svg g[data-from="resolver:v2.web.default.default.dc1"][data-to="target:v2.web.default.default.dc1"] line').count(),
      1
    );
    await page.screenshot({ path: path.join(SHOTS, "routing.png") });
  } finally {
    await chrome.close();
    child.kill();
  }
});
