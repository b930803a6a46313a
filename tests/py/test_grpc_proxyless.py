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


def register_backend(agent, backend, tls=False):
    http(agent, "PUT", "/v1/agent/service/register", {
        "ID": f"db-{backend.version}",
        "Name": "db",
        "Address": "127.0.0.1",
        "Port": backend.port,
        "Meta": {"version": backend.version},
        "Connect": {"Native": True},
        "Check": {
            "Name": "grpc health",
            "GRPC": f"127.0.0.1:{backend.port}",
            "GRPCUseTLS": tls,
            "TLSSkipVerify": True,
            "Interval": "1s",
        },
    })


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
