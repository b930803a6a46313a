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

function freePort() {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
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
