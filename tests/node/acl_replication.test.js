// The ACL replication status through node-consul's `acl.replication()`:
// a primary (here a `-dev` agent with ACLs on) answers Consul's shape
// with replication off and never-times, `?dc=` for a datacenter the
// agent does not know is Consul's 500, and with ACLs off Consul's 401.
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");

const { startAgent } = require("./agent");

const ZERO_TIME = "0001-01-01T00:00:00Z";

test("a primary reports ACL replication off in Consul's shape", async () => {
  const { child, consul } = await startAgent([
    "-hcl",
    'acl { enabled = true default_policy = "deny" }',
  ]);
  try {
    const status = await consul.acl.replication();
    assert.deepEqual(status, {
      Enabled: false,
      Running: false,
      SourceDatacenter: "",
      ReplicationType: "",
      ReplicatedIndex: 0,
      ReplicatedRoleIndex: 0,
      ReplicatedTokenIndex: 0,
      LastSuccess: ZERO_TIME,
      LastError: ZERO_TIME,
      LastErrorMessage: "",
    });
    await assert.rejects(consul.acl.replication({ dc: "nowhere" }), (err) => {
      assert.equal(err.statusCode, 500);
      assert.match(err.message, /No path to datacenter/);
      return true;
    });
  } finally {
    child.kill();
  }
});

test("with ACLs off the replication status is Consul's 401", async () => {
  const { child, consul } = await startAgent();
  try {
    await assert.rejects(consul.acl.replication(), (err) => {
      assert.equal(err.statusCode, 401);
      assert.equal(err.message, "ACL support disabled");
      return true;
    });
  } finally {
    child.kill();
  }
});
