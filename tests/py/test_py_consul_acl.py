"""py-consul (an ACL client we did not write) against Legate's ACL API:
tokens, policies and roles made, read, cloned and deleted, bootstrap
refused once done, permission and not-found answers mapped to py-consul's
exceptions, and rules that decide KV access."""

import time

import consul
import pytest

from conftest import Agent

ROOT = "6d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.fixture
def acl_agent():
    a = Agent(
        extra_args=[
            "-hcl",
            'acl { enabled = true default_policy = "allow" tokens { initial_management = "%s" } }' % ROOT,
        ]
    )
    yield a
    a.stop()


def wait_for_acls(c):
    deadline = time.time() + 30
    while True:
        try:
            return c.acl.token.read_self()
        except consul.ConsulException:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def test_py_consul_drives_tokens_policies_and_roles(acl_agent):
    root = consul.Consul(host="127.0.0.1", port=acl_agent.port, token=ROOT)
    me = wait_for_acls(root)
    assert me["Description"] == "Initial Management Token"
    assert me["Policies"][0]["Name"] == "global-management"

    # The anonymous token may not touch the ACL system, even with an allow default.
    anonymous = consul.Consul(host="127.0.0.1", port=acl_agent.port)
    with pytest.raises(consul.ACLPermissionDenied):
        anonymous.acl.token.list()
    with pytest.raises(consul.ACLPermissionDenied):
        anonymous.acl.bootstrap()

    # A policy in the JSON rules form py-consul sends, a token linking it.
    policy = root.acl.policy.create(
        name="app",
        description="app keys",
        rules={"key_prefix": {"app/": {"policy": "write"}, "secret/": {"policy": "deny"}}},
    )
    assert policy["Name"] == "app"
    assert root.acl.policy.read(policy["ID"])["Description"] == "app keys"
    assert "app" in [p["Name"] for p in root.acl.policy.list()]
    token = root.acl.token.create(description="app token", policies_name=["app"])
    assert token["Policies"] == [{"ID": policy["ID"], "Name": "app"}]
    secret = token["SecretID"]
    app = consul.Consul(host="127.0.0.1", port=acl_agent.port, token=secret)
    assert app.acl.token.read_self()["AccessorID"] == token["AccessorID"]

    # Its rules decide: write under app/, nothing under secret/, the
    # allow default elsewhere.
    assert app.kv.put("app/config", "v")
    assert app.kv.put("elsewhere", "v")
    with pytest.raises(consul.ACLPermissionDenied):
        app.kv.put("secret/password", "hunter2")
    with pytest.raises(consul.ACLPermissionDenied):
        app.kv.get("secret/password")

    # Listing and filters; the secret is hidden from readers without acl:write.
    listed = root.acl.token.list(policy=policy["ID"])
    assert [t["AccessorID"] for t in listed] == [token["AccessorID"]]
    assert root.acl.token.read(token["AccessorID"])["SecretID"] == secret

    # A role with a service identity; a token linking the role by name.
    role = root.acl.role.create(name="web-role", service_identities=[{"ServiceName": "web"}])
    assert role["ServiceIdentities"] == [{"ServiceName": "web"}]
    web = root.acl.token.create(roles_name=["web-role"], node_identities=["n1:dc1"])
    assert web["Roles"][0]["Name"] == "web-role"
    assert web["NodeIdentities"] == [{"NodeName": "n1", "Datacenter": "dc1"}]

    # Clone, update, delete.
    clone = root.acl.token.clone(token["AccessorID"], description="copy")
    assert clone["AccessorID"] != token["AccessorID"]
    assert clone["Description"] == "copy"
    updated = root.acl.token.update(token["AccessorID"], description="renamed", policies_name=["app"])
    assert updated["Description"] == "renamed"
    assert root.acl.token.delete(clone["AccessorID"])
    with pytest.raises(consul.ACLPermissionDenied):
        root.acl.token.read(clone["AccessorID"])
    assert root.acl.token.delete(token["AccessorID"])
    with pytest.raises(consul.ACLPermissionDenied):
        app.kv.put("app/config", "again")

    # Bootstrap is refused once done (the initial management token did it).
    with pytest.raises(consul.ACLPermissionDenied):
        root.acl.bootstrap()

    # Bad rules are the server's error.
    with pytest.raises(consul.ConsulException):
        root.acl.policy.create(name="bad", rules={"key": {"k": {"policy": "sudo"}}})


def test_without_acls_py_consul_gets_acl_disabled(agent):
    c = consul.Consul(host="127.0.0.1", port=agent.port)
    with pytest.raises(consul.ACLDisabled):
        c.acl.token.list()
