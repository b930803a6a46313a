//! Prepared queries through the binary: DNS `.query` names answered with
//! `dig`, failover to another datacenter, and the `query` ACL rules with
//! tokens redacted — as Consul's `PreparedQuery` endpoint and DNS server
//! behave.

mod common;

use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::dig::dig;
use common::{eventually, free_port, TestAgent};
use serde_json::{json, Value};

fn create(agent: &TestAgent, body: Value) -> String {
    let (status, _, text) = agent.request("POST", "/v1/query", Some(&body.to_string()));
    assert_eq!(status, 200, "{text}");
    serde_json::from_str::<Value>(&text).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string()
}

fn register(agent: &TestAgent, node: &str, address: &str, service: &str, status: &str) {
    let body = json!({
        "Node": node, "Address": address,
        "Service": {"ID": format!("{service}-{node}"), "Service": service, "Port": 5432, "Tags": ["v1"]},
        "Check": {"CheckID": format!("{service}-{node}-check"), "Name": "c", "Status": status,
                  "ServiceID": format!("{service}-{node}")},
    });
    let (status, text) = agent.put("/v1/catalog/register", &body.to_string());
    assert_eq!(status, 200, "{text}");
}

#[test]
fn dns_query_names_answer_with_the_querys_results_and_ttl() {
    let dns_port = free_port();
    let dns = format!("-dns-port={dns_port}");
    let agent = TestAgent::start_with(&["-dev", "-grpc-port=-1", "-node=node1", &dns], false);
    register(&agent, "n1", "10.1.0.1", "db", "passing");
    register(&agent, "n2", "10.1.0.2", "db", "warning");
    register(&agent, "n3", "10.1.0.3", "db", "critical");
    create(
        &agent,
        json!({"Name": "db-live", "Service": {"Service": "db", "OnlyPassing": true}, "DNS": {"TTL": "42s"}}),
    );
    create(
        &agent,
        json!({"Name": "db-any", "Service": {"Service": "db"}}),
    );
    create(
        &agent,
        json!({"Name": "geo-", "Template": {"Type": "name_prefix_match", "Regexp": "^geo-(.*)$"},
               "Service": {"Service": "${match(1)}", "Tags": ["!v2"]}}),
    );

    // Only passing instances with OnlyPassing; the query's TTL.
    let live = dig(dns_port, &["db-live.query.consul"]);
    assert_eq!(live.status, "NOERROR");
    assert_eq!(live.answers_of("A"), vec!["10.1.0.1"]);
    assert!(live.answer.iter().all(|r| r.ttl == 42), "{:?}", live.answer);
    // Warning instances count by default; no query TTL: the service's (0).
    let any = dig(dns_port, &["db-any.query.consul"]);
    let mut addresses = any.answers_of("A");
    addresses.sort();
    assert_eq!(addresses, vec!["10.1.0.1", "10.1.0.2"]);
    assert!(any.answer.iter().all(|r| r.ttl == 0));
    // RFC 2782 SRV, a template rendered by name, with a datacenter label.
    let srv = dig(dns_port, &["_db-live._tcp.query.consul", "SRV"]);
    assert_eq!(srv.answers_of("SRV"), vec!["1 1 5432 n1.node.dc1.consul."]);
    // `!v2` keeps out the instance tagged v2 that db-any answers with.
    let v2 = json!({"Node": "n4", "Address": "10.1.0.4",
        "Service": {"ID": "db-n4", "Service": "db", "Port": 5432, "Tags": ["v2"]}});
    let (status, text) = agent.put("/v1/catalog/register", &v2.to_string());
    assert_eq!(status, 200, "{text}");
    // The agent answers a query from its cache and runs it again every
    // 3 s (dns_config.cache_max_age): the new instance shows within that.
    eventually(Duration::from_secs(10), || {
        (dig(dns_port, &["db-any.query.consul"])
            .answers_of("A")
            .len()
            == 3)
            .then_some(())
    });
    let mut geo = dig(dns_port, &["geo-db.query.dc1.consul"]).answers_of("A");
    geo.sort();
    assert_eq!(geo, vec!["10.1.0.1", "10.1.0.2"]);
    // An unknown query, and a query whose service has no healthy instance.
    assert_eq!(dig(dns_port, &["nope.query.consul"]).status, "NXDOMAIN");
    create(
        &agent,
        json!({"Name": "empty", "Service": {"Service": "cache"}}),
    );
    let empty = dig(dns_port, &["empty.query.consul"]);
    assert_eq!(empty.status, "NXDOMAIN");
}

#[test]
fn dns_queries_near_ip_start_from_the_node_at_the_clients_address() {
    let dns_port = free_port();
    let dns = format!("-dns-port={dns_port}");
    let agent = TestAgent::start_with(&["-dev", "-grpc-port=-1", "-node=node1", &dns], false);
    register(&agent, "ip-a", "127.0.0.2", "dbnear", "passing");
    register(&agent, "ip-b", "127.0.0.3", "dbnear", "passing");
    // Nine instances in all: Consul moves the source's instance first only
    // when it is among the first ten.
    for n in 0..7 {
        register(
            &agent,
            &format!("other-{n}"),
            &format!("10.2.0.{n}"),
            "dbnear",
            "passing",
        );
    }
    create(
        &agent,
        json!({"Name": "db-near", "Service": {"Service": "dbnear", "Near": "_ip"}}),
    );
    // `dig -b` asks from another loopback address: the instance on the
    // node registered there comes first (the rest shuffled).
    for (from, first) in [("127.0.0.2", "127.0.0.2"), ("127.0.0.3", "127.0.0.3")] {
        let answer = dig(dns_port, &["-b", from, "db-near.query.consul"]);
        assert_eq!(answer.status, "NOERROR");
        // In the order the agent answered (answers_of sorts).
        let addresses: Vec<&str> = answer
            .answer
            .iter()
            .filter(|r| r.kind == "A")
            .map(|r| r.data.as_str())
            .collect();
        assert_eq!(addresses.len(), 9);
        assert_eq!(addresses.first().copied(), Some(first), "{addresses:?}");
    }
}

#[test]
fn execute_answers_in_consuls_shape_with_its_errors() {
    let agent = TestAgent::dev(&["-node", "node1"]);
    register(&agent, "n1", "10.1.0.1", "db", "passing");
    let id = create(&agent, json!({"Name": "db", "Service": {"Service": "db"}}));
    let (status, headers, text) = agent.request("GET", "/v1/query/db/execute", None);
    assert_eq!(status, 200, "{text}");
    assert!(common::header(&headers, "x-consul-index").is_some());
    let answer: Value = serde_json::from_str(&text).unwrap();
    for key in [
        "Service",
        "Nodes",
        "DNS",
        "Datacenter",
        "Failovers",
        "Index",
        "KnownLeader",
    ] {
        assert!(answer.get(key).is_some(), "{key} missing: {answer}");
    }
    assert_eq!(answer["Nodes"][0]["Node"]["Node"], "n1");
    // A negative limit is no limit (Go's Atoi takes it).
    let all = agent.get("/v1/query/db/execute?limit=-1").unwrap();
    assert_eq!(all["Nodes"].as_array().unwrap().len(), 1);
    // `Near: "_agent"` with no coordinates: the agent's own instance still
    // comes first (Consul moves the source node to the front).
    let (status, text) = agent.put(
        "/v1/agent/service/register",
        r#"{"Name": "db", "Port": 5433}"#,
    );
    assert_eq!(status, 200, "{text}");
    register(&agent, "n2", "10.1.0.2", "db", "passing");
    let near_id = create(
        &agent,
        json!({"Name": "db-near", "Service": {"Service": "db", "Near": "_agent"}}),
    );
    for _ in 0..8 {
        let near = agent.get("/v1/query/db-near/execute").unwrap();
        assert_eq!(near["Nodes"].as_array().unwrap().len(), 3, "{near}");
        assert_eq!(near["Nodes"][0]["Node"]["Node"], "node1", "{near}");
    }
    // A name with slashes executes and explains by name: Consul's handler
    // takes everything before `/execute` as the ID or name.
    let slashed = create(
        &agent,
        json!({"Name": "team/db", "Service": {"Service": "db"}}),
    );
    let run = agent.get("/v1/query/team/db/execute").unwrap();
    assert_eq!(run["Service"], "db", "{run}");
    let explained = agent.get("/v1/query/team/db/explain").unwrap();
    assert_eq!(explained["Query"]["ID"], slashed.as_str(), "{explained}");
    let (status, _, _) = agent.request("DELETE", &format!("/v1/query/{slashed}"), None);
    assert_eq!(status, 200);
    // GET by ID is a list of one; an unknown ID is a 404 with Consul's text.
    let got = agent.get(&format!("/v1/query/{id}")).unwrap();
    assert_eq!(got.as_array().unwrap().len(), 1);
    for path in [
        "/v1/query/9c6c9a3d-0000-4000-8000-000000000000",
        "/v1/query/nope/execute",
        "/v1/query/nope/explain",
        "/v1/query/team/db/execute",
        "/v1/query/no/such/thing",
    ] {
        let (status, _, text) = agent.request("GET", path, None);
        assert_eq!((status, text.as_str()), (404, "Query not found"), "{path}");
    }
    // Refused writes change nothing: an ID on create, a bad TTL, a body
    // that is not JSON.
    let (status, _, text) = agent.request(
        "POST",
        "/v1/query",
        Some(r#"{"ID": "x", "Service": {"Service": "db"}}"#),
    );
    assert_eq!(
        (status, text.as_str()),
        (500, "ID must be empty when creating a new prepared query")
    );
    let (status, _, text) = agent.request(
        "POST",
        "/v1/query",
        Some(r#"{"Name": "t", "Service": {"Service": "db"}, "DNS": {"TTL": "soon"}}"#),
    );
    assert_eq!(status, 500);
    assert!(
        text.starts_with("Invalid prepared query: Bad DNS TTL 'soon'"),
        "{text}"
    );
    let (status, _, _) = agent.request("POST", "/v1/query", Some("{"));
    assert_eq!(status, 400);
    assert_eq!(agent.get("/v1/query").unwrap().as_array().unwrap().len(), 2);
    // Empty list form.
    for id in [id, near_id] {
        let (status, _, _) = agent.request("DELETE", &format!("/v1/query/{id}"), None);
        assert_eq!(status, 200);
    }
    assert_eq!(agent.get_text("/v1/query").unwrap(), "[]");
}

/// A single-server datacenter on `ip`, WAN-joining `join` when given:
/// the agent, its data dir, its WAN and DNS ports.
fn server(ip: &str, dc: &str, join: Option<&str>) -> (TestAgent, tempfile::TempDir, u16, u16) {
    let data = tempfile::tempdir().unwrap();
    let wan_port = free_port();
    let dns_port = free_port();
    let mut flags = vec![
        format!("-node=s-{dc}"),
        format!("-datacenter={dc}"),
        format!("-bind={ip}"),
        "-client=127.0.0.1".into(),
        format!("-data-dir={}", data.path().display()),
        format!("-server-port={}", free_port()),
        format!("-serf-lan-port={}", free_port()),
        format!("-serf-wan-port={wan_port}"),
        format!("-dns-port={dns_port}"),
        "-grpc-port=-1".into(),
        "-server".into(),
        "-bootstrap-expect=1".into(),
        "-retry-interval-wan=1s".into(),
        "-hcl=primary_datacenter = \"dc1\"".into(),
    ];
    if let Some(address) = join {
        flags.push(format!("-retry-join-wan={address}"));
    }
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let agent = TestAgent::spawn(&refs, false);
    agent.wait_ready();
    (agent, data, wan_port, dns_port)
}

#[test]
fn a_query_fails_over_to_the_next_datacenter_with_instances() {
    let (dc1, _d1, wan1, dns1) = server("127.0.0.81", "dc1", None);
    let (dc2, _d2, _, _) = server("127.0.0.82", "dc2", Some(&format!("127.0.0.81:{wan1}")));
    eventually(Duration::from_secs(30), || {
        let dcs = dc1.get("/v1/catalog/datacenters").ok()?;
        (dcs.as_array()?.len() == 2).then_some(())
    });
    // dc1's only db instance is critical; dc2 has a healthy one.
    register(&dc1, "a1", "10.1.0.1", "db", "critical");
    register(&dc2, "b1", "10.2.0.1", "db", "passing");
    create(
        &dc1,
        json!({"Name": "db-nearest", "Service": {"Service": "db", "Failover": {"NearestN": 1}}}),
    );
    create(
        &dc1,
        json!({"Name": "db-listed", "Service": {"Service": "db",
               "Failover": {"Datacenters": ["dc9", "dc1", "dc2"]}}}),
    );
    create(
        &dc1,
        json!({"Name": "db-local", "Service": {"Service": "db"}}),
    );
    for name in ["db-nearest", "db-listed"] {
        let answer = eventually(Duration::from_secs(20), || {
            let a = dc1.get(&format!("/v1/query/{name}/execute")).ok()?;
            (a["Nodes"].as_array()?.len() == 1).then_some(a)
        });
        assert_eq!(answer["Datacenter"], "dc2", "{name}: {answer}");
        // Unknown and local datacenters are skipped, not counted.
        assert_eq!(answer["Failovers"], 1, "{name}: {answer}");
        assert_eq!(answer["Nodes"][0]["Node"]["Node"], "b1");
    }
    // Over DNS too: dc1's agent answers with dc2's instance.
    let found = dig(dns1, &["db-nearest.query.consul"]);
    assert_eq!(found.answers_of("A"), vec!["10.2.0.1"]);
    let local = dc1.get("/v1/query/db-local/execute").unwrap();
    assert_eq!(
        (local["Datacenter"].as_str(), local["Failovers"].as_u64()),
        (Some("dc1"), Some(0))
    );
    assert_eq!(local["Nodes"], json!([]));
    // Every datacenter empty: the last one asked answers.
    create(
        &dc1,
        json!({"Name": "cache", "Service": {"Service": "cache", "Failover": {"Datacenters": ["dc2"]}}}),
    );
    let none = dc1.get("/v1/query/cache/execute").unwrap();
    assert_eq!(
        (none["Datacenter"].as_str(), none["Failovers"].as_u64()),
        (Some("dc2"), Some(1))
    );
    assert_eq!(none["Nodes"], json!([]));
    // `?dc=` runs the query stored in that datacenter: dc2 has none.
    let (status, _, _) = dc1.request("GET", "/v1/query/db-local/execute?dc=dc2", None);
    assert_eq!(status, 404);
}

#[test]
fn nearest_n_tries_that_many_datacenters_nearest_first() {
    // Three datacenters on one machine: round trips between them are all
    // loopback-short, so which of dc2 and dc3 is nearer is the WAN
    // coordinates' call (the ranking itself is unit-tested with fixed
    // coordinates in `WanView::by_distance`). What must hold whatever the
    // order: NearestN = N asks exactly N other datacenters, nearest first;
    // a datacenter listed too is asked once.
    let (dc1, _d1, wan1, _) = server("127.0.0.91", "dc1", None);
    let join = format!("127.0.0.91:{wan1}");
    let (dc2, _d2, _, _) = server("127.0.0.92", "dc2", Some(&join));
    let (dc3, _d3, _, _) = server("127.0.0.93", "dc3", Some(&join));
    eventually(Duration::from_secs(30), || {
        let dcs = dc1.get("/v1/catalog/datacenters").ok()?;
        (dcs.as_array()?.len() == 3).then_some(())
    });
    register(&dc1, "a1", "10.1.0.1", "db", "critical");
    register(&dc2, "b1", "10.2.0.1", "db", "critical");
    register(&dc3, "c1", "10.3.0.1", "db", "passing");
    create(
        &dc1,
        json!({"Name": "one", "Service": {"Service": "db", "Failover": {"NearestN": 1}}}),
    );
    create(
        &dc1,
        json!({"Name": "two", "Service": {"Service": "db", "Failover": {"NearestN": 2}}}),
    );
    create(
        &dc1,
        json!({"Name": "one-and-dc3", "Service": {"Service": "db",
               "Failover": {"NearestN": 1, "Datacenters": ["dc3", "dc3"]}}}),
    );
    // The remote datacenters answer once their servers are known.
    let two = eventually(Duration::from_secs(30), || {
        let answer = dc1.get("/v1/query/two/execute").ok()?;
        (answer["Nodes"].as_array()?.len() == 1).then_some(answer)
    });
    assert_eq!(two["Datacenter"], "dc3", "{two}");
    let asked_for_two = two["Failovers"].as_u64().unwrap();
    assert!((1..=2).contains(&asked_for_two), "{two}");
    // Only the nearest is asked: it answers with dc3's instance exactly
    // when dc3 is the nearer one.
    let one = dc1.get("/v1/query/one/execute").unwrap();
    assert_eq!(one["Failovers"], 1, "{one}");
    let found = !one["Nodes"].as_array().unwrap().is_empty();
    assert_eq!(found, one["Datacenter"] == "dc3", "{one}");
    if !found {
        assert_eq!(one["Datacenter"], "dc2", "{one}");
    }
    // dc3 listed after the nearest one: reached, and asked only once.
    let listed = dc1.get("/v1/query/one-and-dc3/execute").unwrap();
    assert_eq!(listed["Datacenter"], "dc3", "{listed}");
    assert!(listed["Failovers"].as_u64().unwrap() <= 2, "{listed}");
    assert_eq!(listed["Nodes"][0]["Node"]["Node"], "c1");
}

#[test]
fn query_rules_guard_writes_and_reads_and_tokens_are_redacted() {
    let acl = Acl::start();
    let writer = acl.token_with_rules(
        "q-writer",
        r#"query_prefix "app-" { policy = "write" } service_prefix "" { policy = "read" } node_prefix "" { policy = "read" }"#,
    );
    let reader = acl.token_with_rules("q-reader", r#"query "app-db" { policy = "read" }"#);
    let body =
        json!({"Name": "app-db", "Token": ROOT, "Service": {"Service": "consul"}}).to_string();
    // No rule for the name: 403, nothing written.
    let other = json!({"Name": "other", "Service": {"Service": "consul"}}).to_string();
    let (status, _, _) = acl.call("POST", "/v1/query", Some(&writer), Some(&other));
    assert_eq!(status, 403);
    let created = acl.json("POST", "/v1/query", &writer, Some(&body));
    let id = created["ID"].as_str().unwrap();
    // The writer may read it but not see its token; management sees it.
    let seen = acl.json("GET", &format!("/v1/query/{id}"), &writer, None);
    assert_eq!(seen[0]["Token"], "<hidden>");
    let seen = acl.json("GET", &format!("/v1/query/{id}"), ROOT, None);
    assert_eq!(seen[0]["Token"], ROOT);
    // Resubmitting a redacted definition is refused.
    let redacted = json!({"Name": "app-db", "Token": "<hidden>", "Service": {"Service": "consul"}});
    let (status, _, text) = acl.call(
        "PUT",
        &format!("/v1/query/{id}"),
        Some(&writer),
        Some(&redacted.to_string()),
    );
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("redacted token"), "{text}");
    // The reader lists and explains it; a token with no rule sees an empty
    // list and gets 403 on the query itself.
    let listed = acl.json("GET", "/v1/query", &reader, None);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    acl.json("GET", "/v1/query/app-db/explain", &reader, None);
    let nobody = acl.token_with_rules("nobody", r#"key "x" { policy = "read" }"#);
    let (status, headers, text) = acl.call("GET", "/v1/query", Some(&nobody), None);
    assert_eq!((status, text.as_str()), (200, "[]"));
    assert_eq!(
        common::header(&headers, "x-consul-results-filtered-by-acls"),
        Some("true")
    );
    let (status, _, _) = acl.call("GET", &format!("/v1/query/{id}"), Some(&nobody), None);
    assert_eq!(status, 403);
    // Execute runs with the query's own token: `nobody` cannot read the
    // consul service, but the query's management token can.
    let answer = acl.json("GET", "/v1/query/app-db/execute", &nobody, None);
    assert_eq!(answer["Nodes"].as_array().unwrap().len(), 1, "{answer}");
    // An unnamed query (bound to a session): anyone may read it by ID
    // (redacted), but lists and explain show it only to acl:write.
    let session = acl.json("PUT", "/v1/session/create", ROOT, Some("{}"));
    let unnamed =
        json!({"Session": session["ID"], "Token": ROOT, "Service": {"Service": "consul"}});
    let created = acl.json("POST", "/v1/query", ROOT, Some(&unnamed.to_string()));
    let unnamed_id = created["ID"].as_str().unwrap();
    let seen = acl.json("GET", &format!("/v1/query/{unnamed_id}"), &nobody, None);
    assert_eq!(seen[0]["Token"], "<hidden>");
    let acl_reader = acl.token_with_rules("acl-reader", r#"acl = "read""#);
    let listed = acl.json("GET", "/v1/query", &acl_reader, None);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["ID"] != unnamed_id),
        "{listed}"
    );
    let listed = acl.json("GET", "/v1/query", ROOT, None);
    assert_eq!(listed.as_array().unwrap().len(), 2);
    // Deleting needs write on the stored name.
    let (status, _, _) = acl.call("DELETE", &format!("/v1/query/{id}"), Some(&reader), None);
    assert_eq!(status, 403);
    let (status, _, _) = acl.call("DELETE", &format!("/v1/query/{id}"), Some(&writer), None);
    assert_eq!(status, 200);
}
