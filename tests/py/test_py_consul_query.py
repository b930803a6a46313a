"""Prepared queries driven by py-consul (`consul.api.query`), an
independent client: every query it makes is a `name_prefix_match`
template sent with lower-case keys."""

import time

import consul
import pytest


def register(client):
    client.agent.service.register("db", service_id="db1", port=5432, tags=["primary"])
    client.agent.service.register("db", service_id="db2", port=5433, tags=["replica"])
    client.agent.service.register(
        "db", service_id="db3", port=5434, tags=["primary"], check=consul.Check.ttl("30s")
    )
    client.agent.service.register("cache", service_id="cache1", port=6379)


def test_create_list_get_update_explain_execute_delete(client):
    register(client)
    created = client.query.create("db", name="db-primary", tags=["primary"], ttl="10s")
    query_id = created["ID"]
    assert len(query_id) == 36

    listed = client.query.list()
    assert [q["ID"] for q in listed] == [query_id]
    (got,) = client.query.get(query_id)
    assert got["Name"] == "db-primary"
    assert got["Template"]["Type"] == "name_prefix_match"
    assert got["Service"]["Tags"] == ["primary"]
    assert got["DNS"]["TTL"] == "10s"
    assert got["CreateIndex"] == got["ModifyIndex"] > 0

    # db3's TTL check is critical until it passes: only db1 is healthy.
    answer = client.query.execute("db-primary")
    assert answer["Service"] == "db"
    assert answer["Datacenter"] == "dc1"
    assert answer["Failovers"] == 0
    assert answer["DNS"] == {"TTL": "10s"}
    assert [n["Service"]["ID"] for n in answer["Nodes"]] == ["db1"]
    client.agent.check.ttl_pass("service:db3")
    # The pass reaches the catalog through anti-entropy, as in Consul.
    deadline = time.time() + 10
    while True:
        answer = client.query.execute("db-primary")
        ids = sorted(n["Service"]["ID"] for n in answer["Nodes"])
        if ids == ["db1", "db3"] or time.time() > deadline:
            break
        time.sleep(0.05)
    assert ids == ["db1", "db3"]
    assert len(client.query.execute("db-primary", limit=1)["Nodes"]) == 1

    # A full replacement: the tags go, so every db instance answers.
    assert client.query.update(query_id, "db", name="db-primary") is True
    (got,) = client.query.get(query_id)
    assert got["Service"]["Tags"] is None
    assert got["ModifyIndex"] > got["CreateIndex"]
    assert len(client.query.execute("db-primary")["Nodes"]) == 3

    # A template resolves any name it prefixes; the rendering shows in explain.
    client.query.create("${match(1)}", name="svc-", regexp="^svc-(.+)$")
    explained = client.query.explain("svc-cache")
    assert explained["Query"]["Service"]["Service"] == "cache"
    assert [n["Service"]["ID"] for n in client.query.execute("svc-cache")["Nodes"]] == ["cache1"]

    # Gone: a 404 (`Query not found`), which py-consul reads as None.
    assert client.query.delete(query_id) is True
    assert client.query.get(query_id) is None
    assert client.query.execute("db-primary") is None


def test_failover_settings_sent_in_lower_case_are_kept(client):
    # py-consul sends `failover: {nearestn, datacenters}` in lower case.
    created = client.query.create("db", name="db-failover", nearestn=2, datacenters=["dc2", "dc3"])
    (got,) = client.query.get(created["ID"])
    assert got["Service"]["Failover"]["NearestN"] == 2
    assert got["Service"]["Failover"]["Datacenters"] == ["dc2", "dc3"]
    assert got["Service"]["Failover"]["Targets"] is None


def test_a_query_bound_to_a_session_goes_with_it(client):
    register(client)
    session = client.session.create(name="owner")
    client.query.create("db", name="owned", session=session)
    assert [q["Name"] for q in client.query.list()] == ["owned"]
    assert client.session.destroy(session)
    assert client.query.list() == []


def test_bad_queries_are_refused_as_consul_refuses_them(client):
    register(client)
    # A missing service, a name taken (any case), a bad regexp, an unknown
    # session: Consul's texts, through its generic RPC error path (500).
    with pytest.raises(consul.ConsulException, match="Must provide a Service name to query"):
        client.query.create("", name="empty")
    client.query.create("db", name="taken")
    with pytest.raises(consul.ConsulException, match="aliases an existing query name"):
        client.query.create("db", name="TAKEN")
    with pytest.raises(consul.ConsulException, match="Bad Regexp"):
        client.query.create("db", name="re-", regexp="(")
    with pytest.raises(consul.ConsulException, match="invalid session"):
        client.query.create("db", name="s", session="7a1e9a3c-0000-4000-8000-000000000000")
    with pytest.raises(consul.ConsulException, match="Cannot modify non-existent prepared query"):
        client.query.update("7a1e9a3c-0000-4000-8000-000000000000", "db", name="n")
    # py-consul makes templates: run by ID, a template is refused.
    (taken,) = [q for q in client.query.list() if q["Name"] == "taken"]
    with pytest.raises(consul.ConsulException, match="can only be resolved up by name"):
        client.query.execute(taken["ID"])
    assert [q["Name"] for q in client.query.list()] == ["taken"]
