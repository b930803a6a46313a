"""Proxyless gRPC: grpcio's own xDS client (C-core) gets discovery, traffic
splitting, health and failover straight from the agent's xDS server.

Backends are real gRPC servers (with the gRPC health service the agent
probes), registered as Connect-native subsets v1/v2 of `db`; the client is
a separate process (gRPC reads its xDS bootstrap once per process)
registered as the Connect-native service `web`."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from concurrent import futures

import grpc
from conftest import Agent, free_port
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))


class Backend:
    """A gRPC server answering `Who` with its version, plus gRPC health."""

    def __init__(self, version, credentials=None):
        self.version = version
        self.port = free_port()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "legate.test.Echo",
            {"Who": grpc.unary_unary_rpc_method_handler(lambda request, context: version.encode())},
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.set_serving(True)
        address = f"127.0.0.1:{self.port}"
        if credentials is None:
            self.server.add_insecure_port(address)
        else:
            self.server.add_secure_port(address, credentials)
        self.server.start()

    def set_serving(self, serving):
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set("", status)

    def stop(self):
        self.server.stop(0)


def http(agent, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{agent.port}{path}", data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


def register_backend(agent, backend, check=True):
    """Registers a backend as a Connect-native instance of db (with a gRPC
    health check the agent runs, unless `check` is false)."""
    registration = {
        "ID": f"db-{backend.version}",
        "Name": "db",
        "Address": "127.0.0.1",
        "Port": backend.port,
        "Meta": {"version": backend.version},
        "Connect": {"Native": True},
    }
    if check:
        registration["Check"] = {"Name": "grpc health", "GRPC": f"127.0.0.1:{backend.port}", "Interval": "1s"}
    http(agent, "PUT", "/v1/agent/service/register", registration)


def wait_passing(agent, service, count, timeout=30):
    """Waits until `count` instances of `service` pass their checks."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(json.loads(http(agent, "GET", f"/v1/health/service/{service}?passing=1"))) == count:
            return
        time.sleep(0.1)
    raise AssertionError(f"{service} never had {count} passing instances")


def write_config_entry(agent, entry):
    assert http(agent, "PUT", "/v1/config", entry) == b"true"


def delete_config_entry(agent, kind, name):
    http(agent, "DELETE", f"/v1/config/{kind}/{name}")


def bootstrap(grpc_port, node_id, extra=None):
    config = {
        "xds_servers": [{
            "server_uri": f"127.0.0.1:{grpc_port}",
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }],
        "node": {"id": node_id, "cluster": "web"},
    }
    config.update(extra or {})
    return config


class Client:
    """The gRPC client process, driven batch by batch."""

    def __init__(self, target, bootstrap_config, xds_creds=False):
        env = dict(os.environ, GRPC_XDS_BOOTSTRAP_CONFIG=json.dumps(bootstrap_config))
        args = [sys.executable, os.path.join(HERE, "grpc_xds_client.py"), target]
        if xds_creds:
            args.append("--xds-creds")
        self.proc = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def calls(self, n):
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the gRPC client exited"
        return json.loads(line)

    def wait_until(self, predicate, what, timeout=30):
        deadline = time.time() + timeout
        counts = None
        while time.time() < deadline:
            counts = self.calls(50)
            if predicate(counts):
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting until {what}; last batch: {counts}")

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def test_proxyless_grpc_splits_routes_around_unhealthy_and_fails_over():
    grpc_port = free_port()
    agent = Agent(grpc_port=grpc_port)
    v1, v2 = Backend("v1"), Backend("v2")
    client = None
    try:
        for backend in (v1, v2):
            register_backend(agent, backend)
        http(agent, "PUT", "/v1/agent/service/register", {
            "ID": "web-grpc", "Name": "web", "Port": 0, "Connect": {"Native": True},
        })
        write_config_entry(agent, {"Kind": "service-defaults", "Name": "db", "Protocol": "grpc"})
        write_config_entry(agent, {
            "Kind": "service-resolver", "Name": "db",
            "DefaultSubset": "v1",
            "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"},
                        "v2": {"Filter": "Service.Meta.version == v2"}},
            "Failover": {"v1": {"ServiceSubset": "v2"}, "v2": {"ServiceSubset": "v1"}},
        })
        write_config_entry(agent, {
            "Kind": "service-splitter", "Name": "db",
            "Splits": [{"Weight": 80, "ServiceSubset": "v1"}, {"Weight": 20, "ServiceSubset": "v2"}],
        })
        client = Client("db", bootstrap(grpc_port, "web-grpc"))
        # Both backends healthy (their gRPC checks pass): 80/20 over 1,000 calls.
        wait_passing(agent, "db", 2)
        client.wait_until(lambda c: c.get("v1", 0) + c.get("v2", 0) == 50 and c.get("v2", 0) > 0,
                          "both subsets answer")
        counts = client.calls(1000)
        assert counts.get("v1", 0) + counts.get("v2", 0) == 1000, counts
        share = counts.get("v1", 0) / 10
        assert 75 <= share <= 85, f"v1 got {share}% of calls, want 80±5: {counts}"

        # v2's health check fails: every call goes to v1 (v2 fails over to v1).
        v2.set_serving(False)
        client.wait_until(lambda c: c.get("v1", 0) == 50, "v2's share moves to v1")
        counts = client.calls(200)
        assert counts == {"v1": 200}, counts

        # Without the splitter the chain resolves to v1; v1 unhealthy and v2
        # healthy again: the resolver's failover sends everything to v2.
        delete_config_entry(agent, "service-splitter", "db")
        v2.set_serving(True)
        v1.set_serving(False)
        client.wait_until(lambda c: c.get("v2", 0) == 50, "v1 fails over to v2")
        counts = client.calls(200)
        assert counts == {"v2": 200}, counts
        v1.set_serving(True)
        client.wait_until(lambda c: c.get("v1", 0) == 50, "v1 is primary again")
    finally:
        if client:
            client.stop()
        v1.stop()
        v2.stop()
        agent.stop()


def test_a_proxyless_client_must_be_a_registered_native_service():
    grpc_port = free_port()
    agent = Agent(grpc_port=grpc_port)
    try:
        from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
        from envoy.config.core.v3 import base_pb2

        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        request = discovery_pb2.DiscoveryRequest(
            node=base_pb2.Node(id="nobody"),
            type_url="type.googleapis.com/envoy.config.listener.v3.Listener",
            resource_names=["db"],
        )
        try:
            next(stub.StreamAggregatedResources(iter([request])))
            raise AssertionError("an unknown node was served")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND
            assert "nobody" in e.details()
        channel.close()
    finally:
        agent.stop()


def legate(*args):
    from conftest import legate_binary

    return subprocess.run([legate_binary(), *args], capture_output=True, text=True, timeout=60)


def operator_root(tmp_path):
    """An EC P-256 root made by openssl, for a CA rotation."""
    key = tmp_path / "root-key.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)], check=True)
    cert = subprocess.run(
        ["openssl", "req", "-x509", "-new", "-days", "30", "-subj", "/CN=Operator Root",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         "-key", str(key)],
        check=True, capture_output=True, text=True,
    ).stdout
    return key.read_text(), cert


def spiffe_answer(version):
    """`Who` answering the version and the caller's SPIFFE id (from its certificate)."""

    def who(request, context):
        ids = [v.decode() for values in context.auth_context().values() for v in values
               if isinstance(v, bytes) and v.startswith(b"spiffe://")]
        return f"{version} {ids[0] if ids else 'anonymous'}".encode()

    return who


class TlsBackend(Backend):
    """A backend that requires a client certificate signed by the mesh CA."""

    def __init__(self, version, cert_dir):
        read = lambda name: (cert_dir / name).read_bytes()  # noqa: E731
        credentials = grpc.ssl_server_credentials(
            [(read("key.pem"), read("cert.pem"))], root_certificates=read("roots.pem"), require_client_auth=True,
        )
        self.version = version
        self.port = free_port()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "legate.test.Echo", {"Who": grpc.unary_unary_rpc_method_handler(spiffe_answer(version))},
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_secure_port(f"127.0.0.1:{self.port}", credentials)
        self.server.start()


def test_proxyless_grpc_mtls_with_mesh_identities_from_grpc_certs(tmp_path):
    grpc_port = free_port()
    agent = Agent(grpc_port=grpc_port)
    addr = ["-http-addr", f"127.0.0.1:{agent.port}"]
    watcher = client = None
    backends = []
    try:
        td = json.loads(http(agent, "GET", "/v1/connect/ca/roots"))["TrustDomain"]
        # db's identity (written once) and an impostor holding web's identity.
        out = legate("connect", "grpc-certs", *addr, "-service", "db", "-dir", str(tmp_path / "db"), "-once")
        assert out.returncode == 0, out.stderr
        assert "Wrote cert.pem, key.pem and roots.pem for db" in out.stdout
        http(agent, "PUT", "/v1/agent/service/register", {
            "ID": "web-grpc", "Name": "web", "Port": 0, "Connect": {"Native": True},
        })
        # The client's identity and bootstrap, kept current in the background.
        web_dir, boot = tmp_path / "web", tmp_path / "bootstrap.json"
        out = legate("connect", "grpc-certs", *addr, "-service", "web", "-dir", str(web_dir), "-once")
        assert out.returncode == 0, out.stderr
        watcher = subprocess.Popen(
            [*(__import__("conftest").legate_binary(),), "connect", "grpc-certs", *addr, "-service", "web",
             "-dir", str(web_dir), "-bootstrap", str(boot), "-refresh-interval", "1s"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        assert "Wrote the gRPC xDS bootstrap" in watcher.stdout.readline()
        config = json.loads(boot.read_text())
        assert config["node"] == {"id": "web-grpc", "cluster": "web",
                                  "metadata": {"legate.certificate_provider": "legate"}}
        assert config["xds_servers"][0]["server_uri"] == f"127.0.0.1:{grpc_port}"

        db = TlsBackend("v1", tmp_path / "db")
        impostor = TlsBackend("impostor", web_dir)
        backends += [db, impostor]
        # (No health checks: these backends accept mesh clients only.)
        register_backend(agent, db, check=False)
        client = Client("db", config, xds_creds=True)
        # mTLS both ways: db sees web's SPIFFE id; the client checked db's.
        web_id = f"spiffe://{td}/ns/default/dc/dc1/svc/web"
        client.wait_until(lambda c: c == {f"v1 {web_id}": 50}, "calls reach db over mTLS")

        # An instance of db presenting another service's certificate is refused.
        http(agent, "PUT", "/v1/agent/service/deregister/db-v1")
        register_backend(agent, impostor, check=False)
        wait_passing(agent, "db", 1)
        assert json.loads(http(agent, "GET", "/v1/health/service/db"))[0]["Service"]["ID"] == "db-impostor"
        deadline, refused = time.time() + 30, 0
        while refused < 2:  # two batches in a row where calls fail
            assert time.time() < deadline, "calls never moved off the deregistered instance"
            counts = client.calls(5)
            assert not any(k.startswith("impostor") for k in counts), f"the impostor was trusted: {counts}"
            refused = refused + 1 if all(k.startswith("error") for k in counts) else 0
        http(agent, "PUT", "/v1/agent/service/deregister/db-impostor")
        register_backend(agent, db, check=False)
        client.wait_until(lambda c: c == {f"v1 {web_id}": 50}, "db is back")

        # A CA rotation: the watcher rewrites the roots at once and web's
        # leaf within the agent's rotation window; calls keep working.
        old_cert = (web_dir / "cert.pem").read_text()
        key, cert = operator_root(tmp_path)
        body = {"Provider": "consul", "Config": {"PrivateKey": key, "RootCert": cert}}
        http(agent, "PUT", "/v1/connect/ca/configuration", body)
        deadline = time.time() + 60
        while time.time() < deadline and (web_dir / "cert.pem").read_text() == old_cert:
            time.sleep(0.5)
        assert (web_dir / "cert.pem").read_text() != old_cert, "the watcher never renewed web's leaf"
        assert (web_dir / "roots.pem").read_text().count("BEGIN CERTIFICATE") == 2
        time.sleep(2)  # gRPC re-reads the files every second
        assert client.calls(50) == {f"v1 {web_id}": 50}
    finally:
        if client:
            client.stop()
        if watcher:
            watcher.terminate()
            watcher.wait(timeout=10)
        for b in backends:
            b.stop()
        agent.stop()
