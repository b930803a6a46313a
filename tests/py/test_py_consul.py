"""Legate driven by py-consul, an independent Consul client library."""

import threading
import time
from concurrent import futures

import consul
import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


def wait_for(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_register_and_health(client):
    assert client.agent.service.register(
        "web", service_id="web-1", port=8080, tags=["v1"], meta={"team": "a"}, check=consul.Check.ttl("30s")
    )
    services = client.agent.services()
    assert services["web-1"]["Service"] == "web"
    assert services["web-1"]["Meta"] == {"team": "a"}

    _, nodes = wait_for(lambda: (lambda r: r if r[1] else None)(client.health.service("web")))
    assert nodes[0]["Service"]["ID"] == "web-1"
    _, passing = client.health.service("web", passing=True)
    assert passing == []

    client.agent.check.ttl_pass("service:web-1", "all good")
    _, passing = wait_for(lambda: (lambda r: r if r[1] else None)(client.health.service("web", passing=True)))
    assert passing[0]["Service"]["Port"] == 8080
    _, by_tag = client.catalog.service("web", tag="v1")
    assert [r["ServiceID"] for r in by_tag] == ["web-1"]
    _, catalog_services = client.catalog.services()
    assert "web" in catalog_services

    assert client.agent.service.deregister("web-1")
    wait_for(lambda: client.catalog.service("web")[1] == [])


def test_kv_cas_and_recurse(client):
    assert client.kv.put("app/config", "v1")
    index, entry = client.kv.get("app/config")
    assert entry["Value"] == b"v1"
    assert int(index) == entry["ModifyIndex"]
    assert client.kv.put("app/config", "stale", cas=entry["ModifyIndex"] - 1) is False
    assert client.kv.put("app/config", "v2", cas=entry["ModifyIndex"]) is True
    assert client.kv.put("app/other", "x", flags=5)
    _, entries = client.kv.get("app/", recurse=True)
    assert sorted(e["Key"] for e in entries) == ["app/config", "app/other"]
    assert [e["Flags"] for e in entries if e["Key"] == "app/other"] == [5]
    _, keys = client.kv.get("app/", keys=True)
    assert keys == ["app/config", "app/other"]
    assert client.kv.delete("app/", recurse=True)
    _, gone = client.kv.get("app/config")
    assert gone is None


def test_sessions_and_locks(client):
    first = client.session.create(name="first", ttl=20, lock_delay=0)
    second = client.session.create(name="second", lock_delay=0)
    assert client.kv.put("service/leader", "first", acquire=first) is True
    assert client.kv.put("service/leader", "second", acquire=second) is False
    _, entry = client.kv.get("service/leader")
    assert entry["Session"] == first
    _, info = client.session.info(first)
    assert info["Name"] == "first"
    assert info["TTL"] == "20s"
    renewed = client.session.renew(first)
    assert renewed["ID"] == first
    _, sessions = client.session.list()
    assert {s["ID"] for s in sessions} == {first, second}
    assert client.session.destroy(first)
    _, entry = client.kv.get("service/leader")
    assert "Session" not in entry or not entry["Session"]
    assert client.kv.put("service/leader", "second", acquire=second) is True


def test_blocking_watch_wakes_on_change(client):
    client.kv.put("watched", "a")
    index, _ = client.kv.get("watched")
    result = {}

    def watch():
        started = time.time()
        new_index, entry = client.kv.get("watched", index=index, wait="30s")
        result["elapsed"] = time.time() - started
        result["index"] = new_index
        result["value"] = entry["Value"]

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive(), "the watch returned before any change"
    client.kv.put("watched", "b")
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert result["value"] == b"b"
    assert int(result["index"]) > int(index)
    assert result["elapsed"] < 10


def test_txn(client):
    import base64

    ok = client.txn.put(
        [
            {"KV": {"Verb": "set", "Key": "t/a", "Value": base64.b64encode(b"1").decode()}},
            {"KV": {"Verb": "get", "Key": "t/a"}},
        ]
    )
    assert ok["Errors"] is None
    assert len(ok["Results"]) == 2
    with pytest.raises(consul.ConsulException):
        client.txn.put([{"KV": {"Verb": "check-index", "Key": "t/a", "Index": 999999}}])


def test_txn_catalog_operations(client):
    """Node, service and check operations in one transaction through
    py-consul: results in Consul's shapes, then a failing transaction
    that leaves nothing behind (py-consul raises on Consul's 409)."""
    ok = client.txn.put(
        [
            {"Node": {"Verb": "set", "Node": {"Node": "txn-n1", "Address": "10.1.0.1"}}},
            {"Service": {"Verb": "set", "Node": "txn-n1", "Service": {"ID": "api1", "Service": "api", "Port": 9000}}},
            {"Check": {"Verb": "set", "Check": {"Node": "txn-n1", "CheckID": "api-up", "ServiceID": "api1", "Status": "passing"}}},
        ]
    )
    assert ok["Errors"] is None
    assert ok["Results"][0]["Node"]["Address"] == "10.1.0.1"
    assert ok["Results"][1]["Service"]["Port"] == 9000
    assert ok["Results"][2]["Check"]["ServiceName"] == "api"
    _, passing = client.health.service("api", passing=True)
    assert [r["Node"]["Node"] for r in passing] == ["txn-n1"]

    with pytest.raises(consul.ConsulException):
        client.txn.put(
            [
                {"Node": {"Verb": "delete", "Node": {"Node": "txn-n1"}}},
                {"Node": {"Verb": "get", "Node": {"Node": "txn-ghost"}}},
            ]
        )
    _, node = client.catalog.node("txn-n1")
    assert node["Services"]["api1"]["Service"] == "api"


def test_grpc_health_check_against_a_grpcio_server(client):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        servicer.set("echo", health_pb2.HealthCheckResponse.SERVING)
        check = consul.Check.grpc(f"127.0.0.1:{port}/echo", "1s")
        assert client.agent.service.register("echo", port=port, check=check)
        wait_for(lambda: client.agent.checks()["service:echo"]["Status"] == "passing")
        servicer.set("echo", health_pb2.HealthCheckResponse.NOT_SERVING)
        wait_for(lambda: client.agent.checks()["service:echo"]["Status"] == "critical")
        servicer.set("echo", health_pb2.HealthCheckResponse.SERVING)
        wait_for(lambda: client.agent.checks()["service:echo"]["Status"] == "passing")
    finally:
        server.stop(0)


def test_status_and_agent_self(client):
    assert client.status.leader().endswith(":8300")
    me = client.agent.self()
    major, minor, patch = (int(p) for p in me["Config"]["Version"].split("."))
    assert (major, minor) >= (1, 20)
    assert client.agent.members()[0]["Status"] == 1


def test_https_check_honours_tls_skip_verify(client, tmp_path):
    import http.server
    import ssl
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"healthy")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{port}/health"
        assert client.agent.check.register("tls-skip", check={"HTTP": url, "Interval": "1s", "TLSSkipVerify": True})
        assert client.agent.check.register("tls-verify", check={"HTTP": url, "Interval": "1s"})
        wait_for(lambda: client.agent.checks()["tls-skip"]["Status"] == "passing")
        wait_for(lambda: client.agent.checks()["tls-verify"]["Status"] == "critical" and client.agent.checks()["tls-verify"]["Output"])
        assert "healthy" in client.agent.checks()["tls-skip"]["Output"]
    finally:
        server.shutdown()


def test_connect_ca_roots_leaf_and_configuration(client):
    roots = wait_for(lambda: (lambda r: r if r.get("Roots") else None)(client.agent.connect.ca.roots()))
    trust_domain = roots["TrustDomain"]
    assert trust_domain.endswith(".consul")
    assert roots["ActiveRootID"] == roots["Roots"][0]["ID"]
    assert client.connect.ca.roots()["ActiveRootID"] == roots["ActiveRootID"]

    leaf = client.agent.connect.ca.leaf("web")
    assert leaf["ServiceURI"] == f"spiffe://{trust_domain}/ns/default/dc/dc1/svc/web"
    assert "PRIVATE KEY" in leaf["PrivateKeyPEM"]
    assert leaf["CertPEM"].startswith("-----BEGIN CERTIFICATE-----")

    config = client.connect.ca.configuration()
    assert config["Provider"] == "consul"
    assert "PrivateKey" not in config["Config"]
    assert client.connect.ca.update_configuration("consul", {"LeafCertTTL": "48h"}) is True
    assert client.connect.ca.configuration()["Config"]["LeafCertTTL"] == "48h0m0s"
    with pytest.raises(consul.ConsulException):
        client.connect.ca.update_configuration("consul", {"LeafCertTTL": "1m"})


def test_intentions_exact_api_check_match_and_authorize(client):
    assert client.connect.intentions.upsert("web", "db", action="deny", description="no") is True
    assert client.connect.intentions.upsert("*", "db", action="allow") is True
    got = client.connect.intentions.read("web", "db")
    assert got["Action"] == "deny"
    assert got["Precedence"] == 9
    assert "ID" not in got  # written as a config entry: no legacy id

    listed = client.connect.intentions.list()
    assert [(i["SourceName"], i["Precedence"]) for i in listed] == [("web", 9), ("*", 8)]
    matched = client.connect.intentions.match("destination", "db")
    assert [i["SourceName"] for i in matched["db"]] == ["web", "*"]

    assert client.connect.intentions.check("web", "db") is False
    assert client.connect.intentions.check("api", "db") is True

    roots = wait_for(lambda: (lambda r: r if r.get("Roots") else None)(client.agent.connect.ca.roots()))
    uri = f"spiffe://{roots['TrustDomain']}/ns/default/dc/dc1/svc/web"
    answer = client.agent.connect.authorize("db", uri, "01")
    assert answer["Authorized"] is False
    assert answer["Reason"].startswith("Matched L4 intention: default/web => default/db")

    assert client.connect.intentions.delete("web", "db") is True
    assert wait_for(lambda: client.agent.connect.authorize("db", uri, "01")["Authorized"])
    entry = client.config.get("service-intentions", "db")
    assert [s["Name"] for s in entry["Sources"]] == ["*"]


def test_events_coordinates_and_datacenters(client, agent):
    # py-consul's event API: fire returns the event, list blocks on Consul's index.
    fired = client.event.fire("deploy", body="v2")
    assert fired["Name"] == "deploy" and len(fired["ID"]) == 36
    index, events = wait_for(lambda: (lambda r: r if r[1] else None)(client.event.list(name="deploy")))
    assert events[-1]["ID"] == fired["ID"]
    assert events[-1]["Payload"] == b"v2"
    found = []

    def blocked():
        found.append(client.event.list(name="deploy", index=index))

    waiter = threading.Thread(target=blocked)
    waiter.start()
    time.sleep(0.3)
    second = client.event.fire("deploy", body="v3")
    waiter.join(timeout=20)
    assert found and found[0][1][-1]["ID"] == second["ID"]
    assert found[0][0] != index
    # Coordinates: a known coordinate is stored by the leader's next batch.
    assert client.catalog.datacenters() == ["dc1"]
    dcs = client.coordinate.datacenters()
    assert dcs[0]["Datacenter"] == "dc1" and dcs[0]["AreaID"] == "wan"
    node = client.agent.self()["Config"]["NodeName"]
    import json
    import urllib.request

    coord = {"Vec": [0.001] + [0.0] * 7, "Error": 0.2, "Adjustment": 0.0, "Height": 0.00001}
    request = urllib.request.Request(
        f"http://127.0.0.1:{agent.port}/v1/coordinate/update",
        data=json.dumps({"Node": node, "Coord": coord}).encode(),
        method="PUT",
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200
    rows = wait_for(lambda: client.coordinate.nodes()[1] or None, timeout=15)
    assert rows[0]["Node"] == node and rows[0]["Coord"]["Vec"][0] == 0.001
