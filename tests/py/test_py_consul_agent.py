"""Agent, status, operator and catalog answers as py-consul reads them:
`agent.self()` with exactly Consul's keys and Stats agreeing with
`status.leader()`/`status.peers()`, `operator.raft_config()` with its
`Index`, `catalog.services(filter_expr=...)` aggregating the tags of
matching instances only, and `agent.monitor` refusing an unknown level
with Consul's 400."""

import consul
import pytest


def test_agent_self_has_consuls_keys_and_agrees_with_status(client):
    me = client.agent.self()
    assert sorted(me) == ["Config", "Coord", "DebugConfig", "Member", "Meta", "Stats", "xDS"]
    stats = me["Stats"]
    assert stats["consul"]["server"] == "true"
    assert stats["consul"]["leader_addr"] == client.status.leader()
    peers = client.status.peers()
    assert stats["raft"]["num_peers"] == str(len(peers) - 1)
    assert stats["raft"]["state"] == "Leader"
    assert all(isinstance(v, str) for section in stats.values() for v in section.values())
    assert me["Meta"]["consul-network-segment"] == ""


def test_operator_raft_config_has_its_index_and_each_servers_last_index(client):
    raft = client.operator.raft_config()
    assert raft["Index"] > 0
    (server,) = raft["Servers"]
    assert server["Leader"] is True and server["Voter"] is True
    assert server["LastIndex"] >= 0
    assert server["Address"] == client.status.leader()


def test_catalog_services_filter_aggregates_matching_instances_tags(client):
    client.catalog.register("n1", "10.0.0.1", service={"Service": "web", "ID": "web1", "Tags": ["a", "x"], "Meta": {"v": "1"}})
    client.catalog.register("n2", "10.0.0.2", service={"Service": "web", "ID": "web2", "Tags": ["b", "x"], "Meta": {"v": "2"}})
    _, everything = client.catalog.services()
    assert sorted(everything["web"]) == ["a", "b", "x"]
    _, filtered = client.catalog.services(filter_expr='ServiceMeta.v == "1"')
    assert sorted(filtered["web"]) == ["a", "x"]
    _, none = client.catalog.services(filter_expr='ServiceName == "nope"')
    assert none == {}


def test_monitor_refuses_an_unknown_level_with_consuls_400(client):
    with pytest.raises(consul.ConsulException) as refused:
        client.agent.monitor(loglevel="verbose")
    assert "Unknown log level: verbose" in str(refused.value)


def test_operator_usage_as_py_consul_reads_it(client):
    client.agent.service.register("web", service_id="web1", port=80)
    client.agent.service.register("web", service_id="web2", port=81)
    # Agent registrations reach the catalog through anti-entropy.
    import time

    deadline = time.time() + 10
    while True:
        usage = client.operator.usage()
        dc1 = usage["Usage"]["dc1"]
        if dc1["ServiceInstances"] == 3 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert dc1["ServiceInstances"] == 3  # consul, web1, web2
    assert dc1["Services"] == 2
    assert dc1["BillableServiceInstances"] == 2
    assert set(dc1["ConnectServiceInstances"]) == {
        "connect-native", "connect-proxy", "ingress-gateway", "mesh-gateway", "terminating-gateway"
    }


def test_merge_central_config_as_py_consul_asks_for_it(client):
    assert client.config.set("service-defaults", "mcc-web", {"Protocol": "http"})
    assert client.config.set("service-defaults", "mcc-db", {"Protocol": "grpc"})
    client.agent.service.register(
        "mcc-web-proxy",
        port=21999,
        kind="connect-proxy",
        proxy={"DestinationServiceName": "mcc-web", "Upstreams": [{"DestinationName": "mcc-db", "LocalBindPort": 9292}]},
    )
    _, raw = client.catalog.service("mcc-web-proxy")
    assert "protocol" not in raw[0]["ServiceProxy"].get("Config", {})
    _, merged = client.catalog.service("mcc-web-proxy", merge_central_config=True)
    proxy = merged[0]["ServiceProxy"]
    assert proxy["Config"]["protocol"] == "http"
    assert proxy["Upstreams"][0]["Config"]["protocol"] == "grpc"
    _, healthy = client.health.service("mcc-web-proxy", merge_central_config=True)
    assert healthy[0]["Service"]["Proxy"]["Config"]["protocol"] == "http"
