// Legate driven by the consul npm package (node-consul 2.0.1), an
// independent client: catalog registration and reads, and /v1/txn
// transactions (KV, and node/service/check operations), with their
// results and a rollback asserted.
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");

const { startAgent } = require("./agent");

test("catalog registrations are read back through node-consul", async () => {
  const { child, consul } = await startAgent();
  try {
    await consul.catalog.register({
      node: "n1",
      address: "10.0.0.1",
      service: { id: "web1", service: "web", tags: ["a"], port: 80 },
    });
    await consul.catalog.register({
      node: "n2",
      address: "10.0.0.2",
      service: { id: "web2", service: "web", tags: ["b"], port: 81 },
    });
    const services = await consul.catalog.service.list();
    assert.deepEqual([...services.web].sort(), ["a", "b"]);
    const nodes = await consul.catalog.service.nodes("web");
    assert.deepEqual(nodes.map((n) => n.Node).sort(), ["n1", "n2"]);
    const one = nodes.find((n) => n.Node === "n1");
    assert.equal(one.ServiceID, "web1");
    assert.equal(one.ServicePort, 80);
    assert.equal(one.Address, "10.0.0.1");
    const allNodes = await consul.catalog.node.list();
    assert.ok(allNodes.some((n) => n.Node === "n2"));
    const none = await consul.catalog.service.nodes("nope");
    assert.deepEqual(none, []);
  } finally {
    child.kill();
  }
});

test("transactions apply together, answer per operation and roll back", async () => {
  const { child, consul } = await startAgent();
  const b64 = (text) => Buffer.from(text).toString("base64");
  try {
    const done = await consul.transaction.create([
      { KV: { Verb: "set", Key: "app/a", Value: b64("1") } },
      { KV: { Verb: "set", Key: "app/b", Value: b64("2") } },
      { KV: { Verb: "get", Key: "app/a" } },
    ]);
    assert.equal(done.Errors, null);
    assert.equal(done.Results.length, 3);
    assert.equal(Buffer.from(done.Results[2].KV.Value, "base64").toString(), "1");
    assert.equal(done.Results[0].KV.Value, null);

    // A failed check rolls the whole transaction back: node-consul sees
    // Consul's 409 with the operation's index and text.
    await assert.rejects(
      consul.transaction.create([
        { KV: { Verb: "set", Key: "app/c", Value: b64("3") } },
        { KV: { Verb: "check-index", Key: "app/a", Index: 1 } },
      ]),
      (err) => {
        assert.equal(err.response.statusCode, 409);
        const errors = err.response.body.Errors;
        assert.equal(errors.length, 1);
        assert.equal(errors[0].OpIndex, 1);
        return true;
      },
    );
    assert.equal(await consul.kv.get("app/c"), undefined);
    const a = await consul.kv.get("app/a");
    assert.equal(a.Value, "1");
  } finally {
    child.kill();
  }
});

test("catalog operations in a transaction, through node-consul", async () => {
  const { child, consul } = await startAgent();
  try {
    const done = await consul.transaction.create([
      { Node: { Verb: "set", Node: { Node: "n7", Address: "10.7.0.1" } } },
      {
        Service: {
          Verb: "set",
          Node: "n7",
          Service: { ID: "cache1", Service: "cache", Port: 6379 },
        },
      },
      {
        Check: {
          Verb: "set",
          Check: { Node: "n7", CheckID: "cache-up", ServiceID: "cache1", Status: "passing" },
        },
      },
    ]);
    assert.equal(done.Errors, null);
    assert.equal(done.Results[0].Node.Node, "n7");
    assert.equal(done.Results[1].Service.Port, 6379);
    assert.equal(done.Results[2].Check.ServiceName, "cache");
    const nodes = await consul.catalog.service.nodes("cache");
    assert.deepEqual(nodes.map((n) => n.Node), ["n7"]);

    // A stale CAS fails the transaction with Consul's text; the delete
    // before it is rolled back.
    await assert.rejects(
      consul.transaction.create([
        { Service: { Verb: "delete", Node: "n7", Service: { ID: "cache1", Service: "cache" } } },
        { Node: { Verb: "cas", Node: { Node: "n7", Address: "10.7.0.9", ModifyIndex: 1 } } },
      ]),
      (err) => {
        assert.equal(err.response.statusCode, 409);
        assert.deepEqual(err.response.body.Errors, [
          { OpIndex: 1, What: 'failed to set node "n7", index is stale' },
        ]);
        return true;
      },
    );
    const still = await consul.catalog.service.nodes("cache");
    assert.equal(still.length, 1);
  } finally {
    child.kill();
  }
});
