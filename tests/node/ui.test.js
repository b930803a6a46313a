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

// Fills the intentions page's form with a web -> db deny; its row once listed.
async function denyInUi(page, description) {
  await page.fill('#intention-create input[name="source"]', "web");
  await page.fill('#intention-create input[name="destination"]', "db");
  await page.selectOption('#intention-create select[name="action"]', "deny");
  await page.fill('#intention-create input[name="description"]', description);
  await page.click('#intention-create button[type="submit"]');
  const row = page.locator('#intentions tr[data-intention="web>db"]');
  await row.waitFor();
  return row;
}

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
    const row = await denyInUi(page, "<i>no</i> web to db");
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

// Calls the agent's API with `token`; the decoded answer, failing the test
// on an error status.
function apiAs(port, token) {
  return async (method, p, body) => {
    const res = await fetch(`http://127.0.0.1:${port}${p}`, {
      method, headers: { "X-Consul-Token": token }, body: body && JSON.stringify(body),
    });
    const text = await res.text();
    assert.ok(res.ok, `${method} ${p}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
}

test("with ACLs on, the UI asks for a token and shows only what it may read", async () => {
  const root = "8c6f2d9e-3a51-4b7c-9d0e-1f2a3b4c5d6e";
  const { child, port } = await startAgent([
    `-hcl=acl { enabled = true default_policy = "deny" tokens { initial_management = "${root}" } }`,
  ]);
  const chrome = await browser();
  const api = apiAs(port, root);
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

// The seed demo's two built-in sidecars (web -> db), an echo server as db,
// and a client through web's upstream listener.
async function seedDemo() {
  const os = require("node:os");
  const net = require("node:net");
  const { spawn } = require("node:child_process");
  const { freePort, legate } = require("./agent");
  const [grpc, webSidecar, dbSidecar, upstream] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const echoServer = net.createServer((conn) => conn.pipe(conn));
  await new Promise((r) => echoServer.listen(0, "127.0.0.1", r));
  const echoPort = echoServer.address().port;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "legate-ui-demo-"));
  const config = path.join(dir, "demo.hcl");
  fs.writeFileSync(config, `
services {
  name = "web"
  port = 8080
  connect { sidecar_service {
    port = ${webSidecar}
    proxy { upstreams { destination_name = "db" local_bind_port = ${upstream} } }
  } }
}
services {
  name = "db"
  port = ${echoPort}
  connect { sidecar_service { port = ${dbSidecar} } }
}
`);
  const agent = await startAgent([`-grpc-port=${grpc}`, "-config-file", config]);
  // Each proxy's output goes to a file, printed when the test fails.
  const logFiles = ["web", "db"].map((service) => path.join(dir, `${service}-sidecar.log`));
  const proxies = ["web", "db"].map((service, i) => {
    const out = fs.openSync(logFiles[i], "w");
    const child = spawn(
      legate, ["connect", "proxy", "-sidecar-for", service],
      { stdio: ["ignore", out, out], env: { ...process.env, CONSUL_HTTP_ADDR: `127.0.0.1:${agent.port}` } },
    );
    fs.closeSync(out);
    return child;
  });
  const logs = () => logFiles.map((f) => `--- ${path.basename(f)}\n${fs.readFileSync(f, "utf8")}`).join("\n");
  // One connection through web's upstream: the echoed line, or null.
  const echo = (line) => new Promise((resolve) => {
    const socket = net.connect(upstream, "127.0.0.1");
    let got = "";
    const done = (value) => { socket.destroy(); clearTimeout(timer); resolve(value); };
    const timer = setTimeout(() => done(null), 1000);
    socket.on("connect", () => socket.write(line));
    socket.on("data", (d) => {
      got += d.toString();
      if (got.length >= line.length) done(got);
    });
    socket.on("error", () => done(null));
    socket.on("close", () => done(got.length >= line.length ? got : null));
  });
  const stop = () => {
    for (const p of proxies) p.kill();
    agent.child.kill();
    echoServer.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  return { ...agent, echo, logs, stop };
}

async function until(what, timeoutMs, probe) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test("the topology shows the seed demo's traffic, and an intention made in the UI denies it", async () => {
  const demo = await seedDemo();
  const chrome = await browser();
  const line = "0123456789abcdef\n";
  // The web -> db edge as the agent serves it, once two reads 2.5 s apart
  // (more than the proxies' 2 s report interval) agree.
  const edgeNow = async () => {
    const res = await fetch(`http://127.0.0.1:${demo.port}/v1/internal/ui/traffic/db`);
    return ((await res.json()).Downstreams || []).find((e) => e.Source === "web");
  };
  const settled = async () => {
    let last = null;
    for (let i = 0; i < 12; i++) {
      const now = await edgeNow();
      const key = (e) => e && [e.Connections, e.Denied, e.BytesToDestination, e.BytesToSource].join();
      if (last && now && key(last) === key(now)) return now;
      last = now;
      await new Promise((r) => setTimeout(r, 2500));
    }
    throw new Error(`the edge never settled: ${JSON.stringify(last)}`);
  };
  // The UI's table row of the edge, as numbers.
  const shown = async (page) => {
    const row = page.locator('#edges tr[data-edge="web->db"]');
    if ((await row.count()) === 0) return null;
    const cell = async (field) => Number(await row.locator(`td[data-field="${field}"]`).innerText());
    return {
      Connections: await cell("Connections"), Denied: await cell("Denied"),
      BytesToDestination: await cell("BytesToDestination"), BytesToSource: await cell("BytesToSource"),
    };
  };
  try {
    await until("echo through web -> db", 30000, async () => (await demo.echo("warm up\n")) === "warm up\n");
    const before = await settled();

    const page = await chrome.newPage({ viewport: { width: 1200, height: 700 } });
    const problems = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
    await page.goto(`http://127.0.0.1:${demo.port}/ui/dc1/services/db`);
    await page.click(".tabs >> text=Topology");
    await page.waitForURL(/\/services\/db\/topology$/);
    await page.waitForSelector('#edges tr[data-edge="web->db"]');

    // Three echoed connections of 17 bytes each way show on the edge.
    for (let i = 0; i < 3; i++) assert.equal(await demo.echo(line), line);
    await until("the three connections in the UI", 15000, async () => {
      const s = await shown(page);
      return s && s.Connections === before.Connections + 3
        && s.BytesToDestination === before.BytesToDestination + 51
        && s.BytesToSource === before.BytesToSource + 51;
    });
    await page.waitForSelector('#topology svg g[data-from="down:web"][data-to="service"] line', { state: "attached" });
    // The catalog's view of the edge (service-topology): how it is known, allowed.
    await page.waitForSelector('#topology [data-node="down:web"]:has-text("proxy-registration · allowed")');
    await page.screenshot({ path: path.join(SHOTS, "topology.png") });

    // db's sidecar page: its configuration and the pushes it acknowledged.
    await page.click('#reporting a:has-text("db-sidecar-proxy")');
    await page.waitForURL(/\/proxies\/db-sidecar-proxy$/);
    await page.waitForSelector("#proxy-resources tbody tr");
    await page.waitForSelector('#proxy-pushes tr[data-status="acked"]');
    await page.screenshot({ path: path.join(SHOTS, "proxy.png") });
    await page.goto(`http://127.0.0.1:${demo.port}/ui/dc1/services/db/topology`);

    // A deny intention created in the UI stops the demo's traffic.
    await page.click("nav >> text=Intentions");
    const row = await denyInUi(page, "");
    await until("the deny to reach db's sidecar", 15000, async () => (await demo.echo("probe\n")) === null);
    const denied = await settled();
    assert.equal(await demo.echo("secret\n"), null);

    // One more denied connection, and nothing more let through.
    await page.goto(`http://127.0.0.1:${demo.port}/ui/dc1/services/db/topology`);
    await until("the denial in the UI", 15000, async () => {
      const s = await shown(page);
      return s && s.Denied === denied.Denied + 1 && s.Connections === denied.Connections;
    });
    const label = await page.locator('#topology svg g[data-from="down:web"] text').textContent();
    assert.match(label, /denied/);
    await page.waitForSelector('#topology [data-node="down:web"]:has-text("denied by intentions")');
    await page.screenshot({ path: path.join(SHOTS, "topology-denied.png") });

    // Deleting the intention in the UI restores the traffic.
    await page.click("nav >> text=Intentions");
    await row.locator("button").click();
    await row.waitFor({ state: "detached" });
    await until("echo once the intention is gone", 15000, async () => (await demo.echo("back\n")) === "back\n");
    assert.deepEqual(problems, []);
  } catch (e) {
    console.error(demo.logs());
    throw e;
  } finally {
    await chrome.close();
    demo.stop();
  }
});

test("config entries, ACL pages, the datacenter switcher, a dashboard link, node round trips and an L7 intention on its service", async () => {
  const root = "5d0c8e4a-1b2f-4c3d-8e9f-0a1b2c3d4e5f";
  const { child, port } = await startAgent([
    `-hcl=acl { enabled = true default_policy = "deny" tokens { initial_management = "${root}" } }`,
    '-hcl=ui_config { dashboard_url_templates { service = "https://grafana.example/d/x?var-service={{Service.Name}}&dc={{ Datacenter }}" } }',
  ]);
  const chrome = await browser();
  const api = apiAs(port, root);
  try {
    await until("ACLs bootstrapped", 10000, async () =>
      (await fetch(`http://127.0.0.1:${port}/v1/acl/token/self`, { headers: { "X-Consul-Token": root } })).ok);
    await api("PUT", "/v1/agent/service/register", { Name: "web", Port: 80 });
    await api("PUT", "/v1/config", { Kind: "proxy-defaults", Name: "global", Config: { protocol: "http" } });
    const page = await chrome.newPage({ viewport: { width: 1100, height: 700 } });
    const problems = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/settings`);
    await page.fill('#login input[name="token"]', root);
    await page.click('#login button[type="submit"]');
    await page.waitForSelector('#login .status:has-text("Logged in")');

    // The datacenter switcher lists the servers' datacenters.
    await page.waitForSelector('#datacenter option[value="dc1"]', { state: "attached" });

    // A service's dashboard link, its placeholders filled and encoded.
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/services/web`);
    const dashboard = page.locator("#dashboard");
    await dashboard.waitFor();
    assert.equal(await dashboard.getAttribute("href"), "https://grafana.example/d/x?var-service=web&dc=dc1");

    // Nodes with the round trip from this agent's coordinate: origin to
    // 10 ms along one axis, plus both heights (10 µs each).
    const me = (await api("GET", "/v1/agent/self")).Config.NodeName;
    await api("PUT", "/v1/catalog/register", { Node: "ext", Address: "10.0.0.9" });
    const coord = (x) => ({ Vec: [x, 0, 0, 0, 0, 0, 0, 0], Error: 1.5, Adjustment: 0, Height: 1e-5 });
    await api("PUT", "/v1/coordinate/update", { Node: me, Coord: coord(0) });
    await api("PUT", "/v1/coordinate/update", { Node: "ext", Coord: coord(0.01) });
    await page.click("nav >> text=Nodes");
    const rtt = page.locator('#nodes tr[data-node="ext"] td[data-field="rtt"]');
    await until("the node's round trip", 20000, async () =>
      (await rtt.count()) > 0 && (await rtt.innerText()) === "10.02 ms");

    // Config entries, and one entry's raw JSON.
    await page.click("nav >> text=Config");
    await page.click('#config-entries tr[data-entry="proxy-defaults/global"] a');
    await page.waitForSelector("#config-json");
    assert.match(await page.locator("#config-json").innerText(), /"protocol": "http"/);
    await page.screenshot({ path: path.join(SHOTS, "config.png") });

    // ACL tokens (secrets hidden) and policies with their rules.
    await page.click("nav >> text=ACLs");
    // The management token's own page: its secret is the one to hide.
    const management = (await api("GET", "/v1/acl/token/self")).AccessorID;
    await page.click(`#acl-list tr[data-id="${management}"] a`);
    await page.waitForSelector("#acl-json");
    const tokenJson = await page.locator("#acl-json").innerText();
    assert.match(tokenJson, /"SecretID": "\(hidden\)"/);
    assert.ok(!tokenJson.includes(root), "a token's secret is never shown");
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/acls/policies`);
    await page.click('#acl-list tr >> text=global-management');
    await page.waitForSelector("#acl-rules");
    await page.screenshot({ path: path.join(SHOTS, "acl-policy.png") });

    // An L7 intention: bad JSON is refused in the page, good JSON lands in
    // db's service-intentions entry.
    await page.click("nav >> text=Intentions");
    await page.fill('#intention-create input[name="source"]', "web");
    await page.fill('#intention-create input[name="destination"]', "db");
    await page.selectOption('#intention-create select[name="action"]', "l7");
    await page.fill('#intention-create textarea[name="permissions"]', "[not json");
    await page.click('#intention-create button[type="submit"]');
    await page.waitForSelector('#intention-create .error:has-text("Permissions are not JSON")');
    await page.fill('#intention-create textarea[name="permissions"]', '[{"Action": "deny", "HTTP": {"PathPrefix": "/admin"}}]');
    await page.click('#intention-create button[type="submit"]');
    const row = page.locator('#intentions tr[data-intention="web>db"]');
    await row.waitFor();
    assert.match(await row.innerText(), /L7: 1 permission/);
    const entry = await api("GET", "/v1/config/service-intentions/db");
    assert.equal(entry.Sources[0].Permissions[0].HTTP.PathPrefix, "/admin");
    // The service's page lists the intentions that name it.
    await page.goto(`http://127.0.0.1:${port}/ui/dc1/services/web`);
    const named = page.locator('#service-intentions tr[data-intention="web>db"]');
    await named.waitFor();
    assert.match(await named.innerText(), /L7: 1 permission/);
    assert.deepEqual(problems, []);
  } finally {
    await chrome.close();
    child.kill();
  }
});
