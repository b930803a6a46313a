// A Legate `-dev` agent on a free port for the node-consul tests, with a
// node-consul client pointed at it.
"use strict";

const { spawn } = require("node:child_process");
const net = require("node:net");
const path = require("node:path");
const Consul = require("consul");

const legate =
  process.env.LEGATE_BIN ||
  path.join(__dirname, "..", "..", "target", "debug", "legate");

const fs = require("node:fs");
const os = require("node:os");

// The ports tests pick from: below Linux's ephemeral range (32768-60999),
// so no outgoing connection (a browser's, a proxy's, a blocking query's)
// can be holding one as its source port when an agent or a proxy comes to
// bind it; a kernel-chosen port could be.
const TEST_PORTS = { start: 10000, end: 32000 };
// Picks of this run, shared by the test files the runner starts side by
// side (they have the same parent): one file per port, created exclusively.
const RESERVED = path.join(os.tmpdir(), `legate-node-test-ports-${process.ppid}`);

function bindable(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "0.0.0.0", () => server.close(() => resolve(true)));
  });
}

/** A port nobody listens on and no other test of this run was given. */
async function freePort() {
  fs.mkdirSync(RESERVED, { recursive: true });
  for (let i = 0; i < 2000; i++) {
    const port = TEST_PORTS.start + Math.floor(Math.random() * (TEST_PORTS.end - TEST_PORTS.start));
    try {
      fs.closeSync(fs.openSync(path.join(RESERVED, String(port)), "wx"));
    } catch {
      continue;
    }
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port left in ${TEST_PORTS.start}-${TEST_PORTS.end}`);
}

/** Starts an agent with `extra` flags; resolves to `{ child, consul, port }`. */
async function startAgent(extra = []) {
  const port = await freePort();
  const child = spawn(
    legate,
    ["agent", "-dev", `-http-port=${port}`, "-dns-port=-1", "-grpc-port=-1", ...extra],
    { stdio: "ignore" },
  );
  let failed = null;
  child.on("error", (err) => {
    failed = err;
  });
  const consul = new Consul({ host: "127.0.0.1", port });
  for (let i = 0; i < 300 && failed === null; i++) {
    try {
      if ((await consul.status.leader()) !== "") {
        return { child, consul, port };
      }
    } catch (_) {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill();
  throw new Error(`legate agent did not start${failed ? `: ${failed.message}` : ""}`);
}

module.exports = { startAgent, freePort, legate };
