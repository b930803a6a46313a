"""py-consul (a client we did not write) driving templated policies, JWT
auth methods, binding rules, login and logout against Legate. The JWTs
are RS256 tokens signed by `openssl` with a key it makes, so no part of
the signing is Legate's."""

import base64
import json
import subprocess
import time

import consul
import pytest
from consul.exceptions import BadRequest

from test_py_consul_acl import ROOT, acl_agent, wait_for_acls  # noqa: F401 (fixture)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture
def rsa_key(tmp_path):
    key = tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key)],
        check=True,
        capture_output=True,
    )
    public = subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-pubout"], check=True, capture_output=True, text=True
    ).stdout
    return key, public


def sign_rs256(key, claims: dict) -> str:
    header = b64url(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    payload = b64url(json.dumps(claims).encode())
    signed = f"{header}.{payload}"
    signature = subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", str(key)],
        input=signed.encode(),
        check=True,
        capture_output=True,
    ).stdout
    return f"{signed}.{b64url(signature)}"


def test_py_consul_drives_templated_policies(acl_agent):  # noqa: F811
    root = consul.Consul(host="127.0.0.1", port=acl_agent.port, token=ROOT)
    wait_for_acls(root)
    templates = root.acl.templated_policy.list()
    assert "builtin/service" in templates and "builtin/dns" in templates
    assert root.acl.templated_policy.read("builtin/dns")["Schema"] == ""
    preview = root.acl.templated_policy.preview("builtin/service", {"Name": "web"})
    assert preview["Name"] == "synthetic-policy-" + preview["ID"]
    assert 'service "web"' in preview["Rules"]
    with pytest.raises(BadRequest, match="Invalid templated policy Name: builtin/nope"):
        root.acl.templated_policy.read("builtin/nope")
    token = root.acl.token.create(templated_policies=[{"builtin/service": {"Name": "api"}}])
    assert token["TemplatedPolicies"][0]["TemplateName"] == "builtin/service"
    assert token["TemplatedPolicies"][0]["TemplateVariables"] == {"name": "api"}


def test_py_consul_drives_auth_methods_binding_rules_and_login(acl_agent, rsa_key):  # noqa: F811
    key, public = rsa_key
    root = consul.Consul(host="127.0.0.1", port=acl_agent.port, token=ROOT)
    wait_for_acls(root)
    method = root.acl.auth_method.create(
        name="py-jwt",
        method_type="jwt",
        description="from py-consul",
        max_token_ttl="10m",
        config={
            "JWTValidationPubKeys": [public],
            "BoundAudiences": ["consul"],
            "ClaimMappings": {"service": "svc"},
        },
    )
    assert method["MaxTokenTTL"] == "10m0s"
    assert [m["Name"] for m in root.acl.auth_method.list()] == ["py-jwt"]
    assert "Config" not in root.acl.auth_method.list()[0]
    rule = root.acl.binding_rule.create(
        auth_method="py-jwt", bind_type="service", bind_name="${value.svc}", selector='value.svc == "web"'
    )
    assert root.acl.binding_rule.read(rule["ID"])["Selector"] == 'value.svc == "web"'
    assert [r["ID"] for r in root.acl.binding_rule.list(auth_method="py-jwt")] == [rule["ID"]]

    now = int(time.time())
    claims = {"aud": "consul", "iat": now, "exp": now + 300, "service": "web"}
    anonymous = consul.Consul(host="127.0.0.1", port=acl_agent.port)
    login = anonymous.acl.login("py-jwt", sign_rs256(key, claims), meta={"host": "h1"})
    assert login["ServiceIdentities"] == [{"ServiceName": "web"}]
    assert login["AuthMethod"] == "py-jwt"
    assert login["Description"] == 'token created via login: {"host":"h1"}'
    assert anonymous.acl.logout(login["SecretID"]) is True
    # Claims no rule selects: py-consul's permission error.
    with pytest.raises(consul.ACLPermissionDenied):
        anonymous.acl.login("py-jwt", sign_rs256(key, dict(claims, service="db")))
    # A signature of another key: Consul's 500.
    with pytest.raises(consul.ConsulException):
        anonymous.acl.login("py-jwt", sign_rs256(key, claims)[:-8] + "AAAAAAAA")
    assert root.acl.binding_rule.delete(rule["ID"]) is True
    assert root.acl.auth_method.delete("py-jwt") is True
    assert root.acl.auth_method.list() == []
