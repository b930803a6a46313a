//! The UI's internal endpoints in Consul's shapes: `/v1/internal/ui/services`
//! (rows with health counts, sidecars as rows of their own whose checks
//! count toward their service, gateway links), `/nodes`, `/node/:node`
//! (404 with an empty body for an unknown node, 400 without a name) and
//! `/catalog-overview` (`operator:read`, no index header).

mod common;

use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::{header, http_request_full, TestAgent};
use serde_json::{json, Value};

fn register(agent: &TestAgent) {
    let api = json!({
        "Name": "api", "Port": 8080, "Tags": ["v2", "v1", "v2"],
        "Meta": {"external-source": "kubernetes"},
        "Check": {"CheckID": "api-check", "TTL": "30s", "Status": "warning"},
        "Connect": {"SidecarService": {"Proxy": {"Mode": "transparent"}}}
    });
    let (status, body) = agent.put("/v1/agent/service/register", &api.to_string());
    assert_eq!(status, 200, "{body}");
    let gateway = json!({"Name": "term", "Kind": "terminating-gateway", "Port": 9000});
    let (status, body) = agent.put("/v1/agent/service/register", &gateway.to_string());
    assert_eq!(status, 200, "{body}");
    let entry =
        json!({"Kind": "terminating-gateway", "Name": "term", "Services": [{"Name": "api"}]});
    let (status, body) = agent.put("/v1/config", &entry.to_string());
    assert_eq!(status, 200, "{body}");
}

#[test]
fn services_rows_are_consuls_summaries() {
    let agent = TestAgent::dev(&[]);
    register(&agent);
    let rows = common::eventually(Duration::from_secs(10), || {
        let rows = agent.get("/v1/internal/ui/services").ok()?;
        (rows.as_array()?.len() == 4).then_some(rows)
    });
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["api", "api-sidecar-proxy", "consul", "term"]);
    let api = &rows[0];
    let keys: Vec<&String> = api.as_object().unwrap().keys().collect();
    let expected: Vec<&str> = common::SERVICE_SUMMARY_KEYS
        .into_iter()
        .chain(["ConnectedWithProxy", "ConnectedWithGateway"])
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(api["Datacenter"], "dc1");
    assert_eq!(api["Tags"], json!(["v1", "v2"]));
    assert_eq!(api["ExternalSources"], json!(["kubernetes"]));
    assert_eq!(api["InstanceCount"], 1);
    // serfHealth once, api's own check (warning) and the sidecar's two —
    // its alias of api (warning too) and its listener check: counted once
    // per node and check, the proxy's toward api.
    let total = api["ChecksPassing"].as_u64().unwrap()
        + api["ChecksWarning"].as_u64().unwrap()
        + api["ChecksCritical"].as_u64().unwrap();
    assert_eq!(total, 4, "{api}");
    assert_eq!(api["ChecksWarning"], 2, "{api}");
    assert_eq!(api["TransparentProxy"], true);
    assert_eq!(api["ConnectedWithProxy"], true);
    assert_eq!(api["ConnectedWithGateway"], true);
    assert_eq!(api["GatewayConfig"], json!({}));
    let proxy = &rows[1];
    assert_eq!(proxy["Kind"], "connect-proxy");
    // The sidecar inherits api's tags and meta, as Consul's do.
    assert_eq!(proxy["Tags"], json!(["v1", "v2"]));
    assert_eq!(proxy["ConnectedWithProxy"], false);
    let consul = &rows[2];
    assert_eq!(consul.get("Kind"), None, "typical rows have no Kind");
    assert_eq!(consul["Tags"], Value::Null);
    assert_eq!(consul["ExternalSources"], Value::Null);
    assert_eq!(rows[3]["Kind"], "terminating-gateway");
    assert_eq!(
        rows[3]["GatewayConfig"],
        json!({"AssociatedServiceCount": 1})
    );

    // A blocking query wakes on a new registration.
    let (_, headers, _) = http_request_full(
        agent.http_port,
        "GET",
        "/v1/internal/ui/services",
        &[],
        None,
    );
    let index = header(&headers, "x-consul-index").unwrap().to_string();
    let port = agent.http_port;
    let waiter = std::thread::spawn(move || {
        let path = format!("/v1/internal/ui/services?index={index}&wait=20s");
        let (_, _, body) = http_request_full(port, "GET", &path, &[], None);
        body
    });
    std::thread::sleep(Duration::from_millis(300));
    let (status, _) = agent.put(
        "/v1/agent/service/register",
        &json!({"Name": "db", "Port": 5432}).to_string(),
    );
    assert_eq!(status, 200);
    let body = waiter.join().unwrap();
    assert!(body.contains("\"Name\":\"db\""), "{body}");
}

#[test]
fn nodes_node_and_the_overview() {
    let agent = TestAgent::dev(&[]);
    register(&agent);
    // Agent registrations reach the catalog through anti-entropy, as in
    // Consul: wait until the three registered services and consul's own
    // are there.
    let nodes = common::eventually(Duration::from_secs(10), || {
        let nodes = agent.get("/v1/internal/ui/nodes").ok()?;
        (nodes[0]["Services"].as_array()?.len() == 4).then_some(nodes)
    });
    let node = &nodes[0];
    let keys: Vec<&String> = node.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "ID",
            "Node",
            "Address",
            "TaggedAddresses",
            "Meta",
            "Services",
            "Checks"
        ]
    );
    let name = node["Node"].as_str().unwrap().to_string();
    let services: Vec<&str> = node["Services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Service"].as_str().unwrap())
        .collect();
    assert!(services.contains(&"api") && services.contains(&"api-sidecar-proxy"));
    assert!(node["Checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["CheckID"] == "serfHealth"));

    // One node's row is its row in the list; a check that ran between the
    // two reads changes both, so read them again until they meet.
    let last = std::cell::RefCell::new(None);
    common::eventually_or(
        Duration::from_secs(10),
        || {
            let listed = agent.get("/v1/internal/ui/nodes").ok()?[0].clone();
            let one = agent.get(&format!("/v1/internal/ui/node/{name}")).ok()?;
            let same = one == listed;
            *last.borrow_mut() = Some((listed, one));
            same.then_some(())
        },
        || {
            format!(
                "the node's row never matched the list's: {:?}",
                last.borrow()
            )
        },
    );
    let (status, headers, body) = http_request_full(
        agent.http_port,
        "GET",
        "/v1/internal/ui/node/nope",
        &[],
        None,
    );
    assert_eq!((status, body.as_str()), (404, ""));
    assert!(header(&headers, "x-consul-index").is_some());
    let (status, _, body) =
        http_request_full(agent.http_port, "GET", "/v1/internal/ui/node/", &[], None);
    assert_eq!((status, body.as_str()), (400, "Missing node name"));

    let overview = agent.get("/v1/internal/ui/catalog-overview").unwrap();
    assert_eq!(
        overview["Nodes"],
        json!([{"Total": 1, "Passing": 1, "Warning": 0, "Critical": 0}])
    );
    let api = overview["Services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Name"] == "api")
        .unwrap();
    // Only api's own (warning) check decides it; the node's is not counted.
    assert_eq!(
        api,
        &json!({"Name": "api", "Total": 1, "Passing": 0, "Warning": 1, "Critical": 0})
    );
    assert!(overview["Checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["Name"] == "Serf Health Status" && c["Passing"] == 1));
    let (_, headers, _) = http_request_full(
        agent.http_port,
        "GET",
        "/v1/internal/ui/catalog-overview",
        &[],
        None,
    );
    assert!(header(&headers, "x-consul-index").is_none());
}

#[test]
fn with_acls_rows_are_filtered_and_the_overview_needs_operator_read() {
    let acl = Acl::start_with("", &[]);
    let reader = acl.token_with_rules("svc", "service_prefix \"\" { policy = \"read\" }");
    let (status, _, body) = acl.call(
        "GET",
        "/v1/internal/ui/catalog-overview",
        Some(&reader),
        None,
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("lacks permission 'operator:read'"), "{body}");
    let overview = acl.json("GET", "/v1/internal/ui/catalog-overview", ROOT, None);
    assert!(overview["Nodes"].is_array());
    // Without node:read, no instance is visible: the list is empty and says so.
    let (status, headers, body) = acl.call("GET", "/v1/internal/ui/services", Some(&reader), None);
    assert_eq!((status, body.as_str()), (200, "[]"));
    assert_eq!(
        header(&headers, "x-consul-results-filtered-by-acls"),
        Some("true")
    );
    let (status, _, body) = acl.call("GET", "/v1/internal/ui/nodes", Some(&reader), None);
    assert_eq!((status, body.as_str()), (200, "[]"));
}
