"""Legate's xDS server checked by an independent implementation: grpcio's
ADS stubs and the Envoy v3 message definitions from `xds-protos`. Every
resource of every response must decode into its Envoy type with no unknown
fields, and every nested Any must be an Envoy type the definitions know."""

import json
import queue
import time
import urllib.request

import grpc
from conftest import Agent, free_port
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.network.rbac.v3 import rbac_pb2  # noqa: F401 (registers the type)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2  # noqa: F401
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import json_format

DEMO = """
services {
  name = "web"
  port = 8080
  connect {
    sidecar_service {
      proxy {
        upstreams {
          destination_name = "db"
          local_bind_port = 9191
        }
      }
    }
  }
}
services {
  name = "db"
  port = 9090
  connect { sidecar_service {} }
}
"""

TYPES = {
    "type.googleapis.com/envoy.config.listener.v3.Listener": listener_pb2.Listener,
    "type.googleapis.com/envoy.config.cluster.v3.Cluster": cluster_pb2.Cluster,
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment": endpoint_pb2.ClusterLoadAssignment,
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration": route_pb2.RouteConfiguration,
}
CDS, EDS, LDS = (
    "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
    "type.googleapis.com/envoy.config.listener.v3.Listener",
)


def strictly(any_msg):
    """Decodes an Any into its Envoy type, refusing unknown fields and
    unknown nested Any types; returns the message and its JSON form."""
    cls = TYPES[any_msg.type_url]
    msg = cls()
    assert any_msg.Unpack(msg), any_msg.type_url
    wire = msg.SerializeToString(deterministic=True)
    copy = cls()
    copy.ParseFromString(wire)
    copy.DiscardUnknownFields()
    assert copy.SerializeToString(deterministic=True) == wire, "unknown fields in " + any_msg.type_url
    # JSON conversion expands every nested Any: it fails on a type the
    # Envoy definitions do not know.
    text = json_format.MessageToJson(msg)
    return msg, text


class Stream:
    def __init__(self, port, node_id, delta=False):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        self.requests = queue.Queue()
        self.node = base_pb2.Node(id=node_id, cluster="test")

        def gen():
            while True:
                item = self.requests.get()
                if item is None:
                    return
                yield item

        call = stub.DeltaAggregatedResources if delta else stub.StreamAggregatedResources
        self.responses = call(gen())

    def send(self, **fields):
        cls = discovery_pb2.DeltaDiscoveryRequest if "resource_names_subscribe" in fields or fields.pop("delta", False) else discovery_pb2.DiscoveryRequest
        self.requests.put(cls(node=self.node, **fields))

    def recv(self):
        return next(self.responses)

    def close(self):
        self.requests.put(None)
        self.channel.close()


def test_every_resource_parses_strictly_as_envoy_v3(tmp_path):
    demo = tmp_path / "demo.hcl"
    demo.write_text(DEMO)
    grpc_port = free_port()
    agent = Agent(["-config-file", str(demo)], grpc_port=grpc_port)
    try:
        # Give the public listeners RBAC policies: deny web -> db.
        req = urllib.request.Request(
            f"http://127.0.0.1:{agent.port}/v1/connect/intentions/exact?source=web&destination=db",
            data=b'{"Action": "deny"}',
            method="PUT",
        )
        assert urllib.request.urlopen(req).read() == b"true"
        seen_types = set()
        for node_id in ("web-sidecar-proxy", "db-sidecar-proxy"):
            stream = Stream(grpc_port, node_id)
            stream.send(type_url=CDS)
            clusters = stream.recv()
            assert clusters.type_url == CDS
            names = []
            for any_msg in clusters.resources:
                cluster, text = strictly(any_msg)
                names.append(cluster.name)
                seen_types.add(any_msg.type_url)
                if cluster.name != "local_app":
                    assert "UpstreamTlsContext" in text and "matchTypedSubjectAltNames" in text
            eds_names = [n for n in names if n != "local_app"]
            stream.send(type_url=CDS, version_info=clusters.version_info, response_nonce=clusters.nonce)
            if eds_names:
                stream.send(type_url=EDS, resource_names=eds_names)
                endpoints = stream.recv()
                assert endpoints.type_url == EDS
                assert len(endpoints.resources) == len(eds_names)
                for any_msg in endpoints.resources:
                    cla, _ = strictly(any_msg)
                    assert cla.policy.overprovisioning_factor.value == 100000
                    seen_types.add(any_msg.type_url)
            stream.send(type_url=LDS)
            listeners = stream.recv()
            assert listeners.type_url == LDS
            for any_msg in listeners.resources:
                listener, text = strictly(any_msg)
                seen_types.add(any_msg.type_url)
                if listener.name.startswith("public_listener:"):
                    assert "DownstreamTlsContext" in text and '"requireClientCertificate": true' in text
                    assert "envoy.filters.network.rbac" in text
            stream.close()
        assert seen_types == {CDS, EDS, LDS}

        # The delta protocol, through grpcio too.
        delta = Stream(grpc_port, "web-sidecar-proxy", delta=True)
        delta.send(type_url=LDS, resource_names_subscribe=[])
        answer = delta.recv()
        assert answer.type_url == LDS
        assert sorted(r.name for r in answer.resources) == ["db:127.0.0.1:9191", "public_listener:0.0.0.0:21000"]
        for r in answer.resources:
            strictly(r.resource)
        delta.close()
    finally:
        agent.stop()


def test_connect_envoy_bootstrap_parses_strictly_as_an_envoy_bootstrap(tmp_path):
    import json
    import subprocess

    from conftest import legate_binary
    from envoy.config.bootstrap.v3 import bootstrap_pb2
    from envoy.extensions.access_loggers.file.v3 import file_pb2  # noqa: F401
    from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
    from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2  # noqa: F401
    from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401

    demo = tmp_path / "demo.hcl"
    demo.write_text(DEMO.replace(
        "      proxy {\n",
        '      proxy {\n        config {\n          envoy_prometheus_bind_addr = "127.0.0.1:9102"\n        }\n',
        1,
    ))
    grpc_port = free_port()
    agent = Agent(["-config-file", str(demo)], grpc_port=grpc_port)
    try:
        out = subprocess.run(
            [legate_binary(), "connect", "envoy", "-sidecar-for", "web", "-bootstrap",
             "-http-addr", f"127.0.0.1:{agent.port}", "-admin-bind", "localhost:19005"],
            capture_output=True, text=True, check=True,
        )
        # Strict: unknown fields and unknown Any types are errors.
        bootstrap = json_format.Parse(out.stdout, bootstrap_pb2.Bootstrap())
        assert bootstrap.node.id == "web-sidecar-proxy"
        assert bootstrap.node.cluster == "web-sidecar-proxy"
        assert bootstrap.admin.address.socket_address.port_value == 19005
        assert bootstrap.admin.address.socket_address.address == "127.0.0.1"
        ads = bootstrap.dynamic_resources.ads_config
        assert ads.api_type == ads.DELTA_GRPC
        assert ads.grpc_services[0].initial_metadata[0].key == "x-consul-token"
        agent_cluster = bootstrap.static_resources.clusters[0]
        assert agent_cluster.name == "local_agent"
        ep = agent_cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
        assert (ep.address, ep.port_value) == ("127.0.0.1", grpc_port)
        names = [l.name for l in bootstrap.static_resources.listeners]
        assert names == ["envoy_prometheus_metrics_listener:127.0.0.1:9102"]
        json.loads(out.stdout)
    finally:
        agent.stop()


def test_golden_files_parse_strictly_as_envoy_v3():
    """Every resource of every golden file (the generator's reviewed
    output) parses with xds-protos, refusing unknown fields."""
    import glob
    import json
    import os

    from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as http_rbac_pb2  # noqa: F401
    from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
    from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2  # noqa: F401
    from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2  # noqa: F401
    from envoy.extensions.filters.network.sni_cluster.v3 import sni_cluster_pb2  # noqa: F401
    from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
    from conftest import ROOT

    from envoy.config.bootstrap.v3 import bootstrap_pb2
    from envoy.extensions.access_loggers.file.v3 import file_pb2  # noqa: F401

    files = sorted(glob.glob(os.path.join(ROOT, "crates", "xds", "tests", "golden", "*.json")))
    assert len(files) >= 5
    parsed = 0
    for path in files:
        if os.path.basename(path) == "bootstrap.json":
            with open(path) as f:
                json_format.Parse(f.read(), bootstrap_pb2.Bootstrap())
            continue
        with open(path) as f:
            groups = json.load(f)
        for resources in groups.values():
            for name, resource in resources.items():
                body = dict(resource)
                cls = TYPES[body.pop("@type")]
                json_format.Parse(json.dumps(body), cls())  # strict: unknown fields raise
                parsed += 1
    assert parsed >= 15


def test_a_mesh_gateways_resources_and_bootstrap_parse_strictly_as_envoy_v3(tmp_path):
    """A mesh gateway registered by `connect envoy -gateway=mesh -register`:
    its bootstrap and every resource of its ADS stream decode with
    xds-protos, and read as Consul's (tls_inspector, the sni_cluster
    catch-all with an empty cluster, clusters named by SNI)."""
    import subprocess

    from conftest import legate_binary
    from envoy.config.bootstrap.v3 import bootstrap_pb2
    from envoy.extensions.access_loggers.file.v3 import file_pb2  # noqa: F401
    from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2  # noqa: F401
    from envoy.extensions.filters.network.sni_cluster.v3 import sni_cluster_pb2  # noqa: F401
    from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401

    demo = tmp_path / "demo.hcl"
    demo.write_text(DEMO)
    grpc_port = free_port()
    lan = free_port()
    agent = Agent(["-config-file", str(demo)], grpc_port=grpc_port)
    try:
        out = subprocess.run(
            [legate_binary(), "connect", "envoy", "-gateway=mesh", "-register", "-expose-servers", "-bootstrap",
             "-address", f"127.0.0.1:{lan}", "-http-addr", f"127.0.0.1:{agent.port}"],
            capture_output=True, text=True, check=True,
        )
        bootstrap = json_format.Parse(out.stdout, bootstrap_pb2.Bootstrap())
        assert (bootstrap.node.id, bootstrap.node.cluster) == ("mesh-gateway", "mesh-gateway")
        roots = urllib.request.urlopen(f"http://127.0.0.1:{agent.port}/v1/connect/ca/roots").read()
        import json
        td = json.loads(roots)["TrustDomain"]
        stream = Stream(grpc_port, "mesh-gateway")
        # With -expose-servers the servers' clusters too (Consul's names).
        wanted = {f"web.default.dc1.internal.{td}", f"db.default.dc1.internal.{td}", "server.dc1.consul"}
        deadline = time.time() + 30
        stream.send(type_url=CDS)
        while True:
            clusters = stream.recv()
            assert clusters.type_url == CDS
            names = {strictly(a)[0].name for a in clusters.resources}
            stream.send(type_url=CDS, version_info=clusters.version_info, response_nonce=clusters.nonce)
            if wanted <= names or time.time() > deadline:
                break
        assert wanted <= names, names
        for any_msg in clusters.resources:
            cluster, text = strictly(any_msg)
            assert cluster.type == cluster_pb2.Cluster.EDS
            assert "transportSocket" not in text, "a gateway never terminates or originates TLS"
        stream.send(type_url=EDS, resource_names=sorted(names))
        endpoints = stream.recv()
        assert endpoints.type_url == EDS
        for any_msg in endpoints.resources:
            strictly(any_msg)
        stream.send(type_url=LDS)
        listeners = stream.recv()
        assert listeners.type_url == LDS
        (only,) = listeners.resources
        listener, text = strictly(only)
        assert listener.name == f"default:127.0.0.1:{lan}"
        assert [f.name for f in listener.listener_filters] == ["envoy.filters.listener.tls_inspector"]
        catch_all = listener.filter_chains[-1]
        assert [f.name for f in catch_all.filters] == ["envoy.filters.network.sni_cluster", "envoy.filters.network.tcp_proxy"]
        tcp = tcp_proxy_pb2.TcpProxy()
        assert catch_all.filters[1].typed_config.Unpack(tcp)
        assert tcp.stat_prefix == "mesh_gateway_local.default"
        assert tcp.WhichOneof("cluster_specifier") == "cluster" and tcp.cluster == ""
        stream.close()
    finally:
        agent.stop()


def test_a_prepared_query_upstream_takes_consuls_names_and_parses_strictly(tmp_path):
    """web's upstream is a prepared query: its listener, cluster (named and
    dialled with Consul's QuerySNI) and endpoints decode strictly, and the
    cluster accepts the SPIFFE id of the service the query answered."""
    demo = tmp_path / "demo.hcl"
    demo.write_text(
        DEMO.replace(
            'destination_name = "db"',
            'destination_type = "prepared_query"\n          destination_name = "nearest-db"',
        ).replace("9191", "9292")
    )
    grpc_port = free_port()
    agent = Agent(["-config-file", str(demo)], grpc_port=grpc_port)
    base = f"http://127.0.0.1:{agent.port}"
    try:
        # Nobody runs db's sidecar here, so its listening check fails: the
        # query ignores it (IgnoreCheckIDs), as an operator might.
        body = {
            "Name": "nearest-db",
            "Service": {"Service": "db", "IgnoreCheckIDs": ["service:db-sidecar-proxy:1"]},
        }
        req = urllib.request.Request(base + "/v1/query", data=json.dumps(body).encode(), method="POST")
        urllib.request.urlopen(req).read()
        roots = json.loads(urllib.request.urlopen(base + "/v1/connect/ca/roots").read())
        sni = f"nearest-db.default.dc1.query.{roots['TrustDomain']}"
        spiffe = f"spiffe://{roots['TrustDomain']}/ns/default/dc/dc1/svc/db"

        # The sidecar follows the query within its refresh (it may have run
        # before the query existed).
        deadline = time.time() + 20
        while True:
            stream = Stream(grpc_port, "web-sidecar-proxy")
            stream.send(type_url=CDS)
            clusters = {}
            for any_msg in stream.recv().resources:
                cluster, _ = strictly(any_msg)
                clusters[cluster.name] = cluster
            assert sni in clusters, sorted(clusters)
            tls_ctx = tls_pb2.UpstreamTlsContext()
            assert clusters[sni].transport_socket.typed_config.Unpack(tls_ctx)
            sans = [m.matcher.exact for m in tls_ctx.common_tls_context.validation_context.match_typed_subject_alt_names]
            if sans or time.time() > deadline:
                break
            stream.close()
            time.sleep(0.5)
        assert tls_ctx.sni == sni
        assert sans == [spiffe]

        stream.send(type_url=EDS, resource_names=[sni])
        endpoints = stream.recv()
        assert [strictly(r)[0].cluster_name for r in endpoints.resources] == [sni]
        cla, _ = strictly(endpoints.resources[0])
        dialled = [e.endpoint.address.socket_address.port_value for e in cla.endpoints[0].lb_endpoints]
        db_proxy = json.loads(urllib.request.urlopen(base + "/v1/agent/service/db-sidecar-proxy").read())
        assert dialled == [db_proxy["Port"]]

        stream.send(type_url=LDS)
        listeners = {}
        for any_msg in stream.recv().resources:
            listener, _ = strictly(any_msg)
            listeners[listener.name] = listener
        name = "prepared_query:nearest-db:127.0.0.1:9292"
        assert name in listeners, sorted(listeners)
        proxy = tcp_proxy_pb2.TcpProxy()
        assert listeners[name].filter_chains[0].filters[0].typed_config.Unpack(proxy)
        assert (proxy.stat_prefix, proxy.cluster) == ("upstream.prepared_query_nearest-db", sni)
        stream.close()
    finally:
        agent.stop()
