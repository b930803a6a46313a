"""The gRPC TLS port (`ports.grpc_tls` with `tls.grpc`) checked by
independent implementations: grpcio's own TLS channel and ADS stubs
(every resource decoded strictly with `xds-protos`), and the Envoy
bootstrap of `connect envoy -grpc-ca-file`, whose TLS ADS cluster must
parse strictly as an Envoy v3 Bootstrap."""

import subprocess
import threading

import grpc
import pytest
from conftest import Agent, free_port, legate_binary
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.access_loggers.file.v3 import file_pb2  # noqa: F401
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from envoy.config.core.v3 import base_pb2
from google.protobuf import json_format
from test_xds import CDS, DEMO, strictly


def make_certs(directory):
    for args in (["tls", "ca", "create"],
                 ["tls", "cert", "create", "-server", "-dc", "dc1"]):
        subprocess.run([legate_binary(), *args], cwd=directory, check=True, capture_output=True)
    return (directory / "consul-agent-ca.pem",
            directory / "dc1-server-consul-0.pem",
            directory / "dc1-server-consul-0-key.pem")


@pytest.fixture
def tls_agent(tmp_path):
    ca, cert, key = make_certs(tmp_path)
    port = free_port()
    config = tmp_path / "agent.hcl"
    config.write_text(DEMO + f"""
ports {{ grpc_tls = {port} }}
tls {{
  grpc {{
    ca_file = "{ca}"
    cert_file = "{cert}"
    key_file = "{key}"
  }}
}}
""")
    agent = Agent(["-config-file", str(config)], grpc_port=-1)
    yield agent, port, ca
    agent.stop()


def clusters_over(channel):
    """The first CDS answer of a SotW stream (kept open, as Envoy keeps it)."""
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    request = discovery_pb2.DiscoveryRequest(
        node=base_pb2.Node(id="web-sidecar-proxy", cluster="test"), type_url=CDS)
    done = threading.Event()

    def requests():
        yield request
        done.wait(30)

    try:
        return next(stub.StreamAggregatedResources(requests(), timeout=20))
    finally:
        done.set()


def test_grpcio_streams_xds_over_the_tls_port(tls_agent):
    agent, port, ca = tls_agent
    credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        answer = clusters_over(channel)
    assert answer.type_url == CDS
    names = sorted(strictly(r)[0].name for r in answer.resources)
    assert "local_app" in names and any(n.startswith("db.default.dc1.internal.") for n in names)
    # Plain text on the TLS port gets nothing.
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        with pytest.raises(grpc.RpcError):
            clusters_over(channel)
    # A CA that did not sign the agent's certificate is refused.
    (ca.parent / "other").mkdir()
    other_ca, _, _ = make_certs(ca.parent / "other")
    credentials = grpc.ssl_channel_credentials(root_certificates=other_ca.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        with pytest.raises(grpc.RpcError):
            clusters_over(channel)


def test_connect_envoy_tls_bootstrap_parses_strictly(tls_agent):
    agent, port, ca = tls_agent
    out = subprocess.run(
        [legate_binary(), "connect", "envoy", "-sidecar-for", "web", "-bootstrap",
         "-http-addr", f"127.0.0.1:{agent.port}", "-grpc-ca-file", str(ca)],
        capture_output=True, text=True, check=True,
    )
    bootstrap = json_format.Parse(out.stdout, bootstrap_pb2.Bootstrap())
    cluster = bootstrap.static_resources.clusters[0]
    ep = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (ep.address, ep.port_value) == ("127.0.0.1", port)
    assert cluster.transport_socket.name == "tls"
    context = tls_pb2.UpstreamTlsContext()
    assert cluster.transport_socket.typed_config.Unpack(context)
    assert context.common_tls_context.validation_context.trusted_ca.inline_string == ca.read_text()
