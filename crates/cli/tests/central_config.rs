//! Central service configuration merged into proxy registrations, through
//! the binary: `?merge-central-config` on the catalog and health reads
//! that take it (Consul's `catalogServiceNodes`, `CatalogNodeServiceList`,
//! `healthServiceNodes`), and the agent's own views of its proxies with
//! `enable_central_service_config` on (Consul's default) and off.

mod common;

use serde_json::Value;

use common::TestAgent;

fn put_entry(agent: &TestAgent, body: &str) {
    let (status, text) = agent.put("/v1/config", body);
    assert_eq!(status, 200, "{text}");
}

/// An agent with proxy-defaults and two service-defaults written, `web`
/// registered with a sidecar whose upstream is `db`, and a plain service.
fn agent_with_central_config(extra: &[&str]) -> TestAgent {
    let agent = TestAgent::dev(extra);
    put_entry(
        &agent,
        r#"{"Kind":"proxy-defaults","Name":"global","Config":{"protocol":"http","local_connect_timeout_ms":500},"MeshGateway":{"Mode":"local"}}"#,
    );
    put_entry(
        &agent,
        r#"{"Kind":"service-defaults","Name":"web","Protocol":"grpc","UpstreamConfig":{"Overrides":[{"Name":"db","ConnectTimeoutMs":1234}]}}"#,
    );
    put_entry(
        &agent,
        r#"{"Kind":"service-defaults","Name":"db","Protocol":"http2"}"#,
    );
    let (status, text) = agent.put(
        "/v1/agent/service/register",
        r#"{"Name":"web","Port":8080,"Connect":{"SidecarService":{"Proxy":{"Config":{"local_connect_timeout_ms":250},"Upstreams":[{"DestinationName":"db","LocalBindPort":9191}]}}}}"#,
    );
    assert_eq!(status, 200, "{text}");
    let (status, text) = agent.put("/v1/agent/service/register", r#"{"Name":"plain","Port":1}"#);
    assert_eq!(status, 200, "{text}");
    common::eventually(std::time::Duration::from_secs(10), || {
        let rows = agent.get("/v1/catalog/service/web-sidecar-proxy").ok()?;
        rows.as_array().filter(|r| !r.is_empty()).map(|_| ())
    });
    agent
}

/// Asserts the proxy settings carry what central config gives them.
fn assert_merged(proxy: &Value) {
    assert_eq!(proxy["Config"]["protocol"], "grpc", "{proxy}");
    assert_eq!(
        proxy["Config"]["local_connect_timeout_ms"], 250,
        "the instance's own value wins: {proxy}"
    );
    assert_eq!(proxy["MeshGateway"]["Mode"], "local", "{proxy}");
    let upstream = &proxy["Upstreams"][0];
    assert_eq!(upstream["Config"]["protocol"], "http2", "{proxy}");
    assert_eq!(upstream["Config"]["connect_timeout_ms"], 1234, "{proxy}");
    assert_eq!(upstream["MeshGateway"]["Mode"], "local", "{proxy}");
}

fn assert_as_registered(proxy: &Value) {
    assert!(proxy["Config"].get("protocol").is_none(), "{proxy}");
    assert_eq!(proxy["MeshGateway"], serde_json::json!({}), "{proxy}");
}

#[test]
fn catalog_and_health_reads_merge_central_config_when_asked() {
    let agent = agent_with_central_config(&[]);
    let raw = agent.get("/v1/catalog/service/web-sidecar-proxy").unwrap();
    assert_as_registered(&raw[0]["ServiceProxy"]);
    let merged = agent
        .get("/v1/catalog/service/web-sidecar-proxy?merge-central-config")
        .unwrap();
    assert_merged(&merged[0]["ServiceProxy"]);
    // Consul reads the parameter by its presence: `=false` merges too.
    let merged = agent
        .get("/v1/catalog/connect/web?merge-central-config=false")
        .unwrap();
    assert_merged(&merged[0]["ServiceProxy"]);
    let health = agent
        .get("/v1/health/service/web-sidecar-proxy?merge-central-config")
        .unwrap();
    assert_merged(&health[0]["Service"]["Proxy"]);
    let health = agent
        .get("/v1/health/connect/web?merge-central-config")
        .unwrap();
    assert_merged(&health[0]["Service"]["Proxy"]);
    let raw_health = agent.get("/v1/health/connect/web").unwrap();
    assert_as_registered(&raw_health[0]["Service"]["Proxy"]);

    let node = agent.get("/v1/agent/self").unwrap()["Config"]["NodeName"]
        .as_str()
        .unwrap()
        .to_string();
    let list = agent
        .get(&format!(
            "/v1/catalog/node-services/{node}?merge-central-config"
        ))
        .unwrap();
    let services = list["Services"].as_array().unwrap();
    let sidecar = services
        .iter()
        .find(|s| s["Service"] == "web-sidecar-proxy")
        .unwrap();
    assert_merged(&sidecar["Proxy"]);
    // Services that are neither proxies nor gateways are left as they are.
    let plain = services.iter().find(|s| s["Service"] == "plain").unwrap();
    let raw_list = agent
        .get(&format!("/v1/catalog/node-services/{node}"))
        .unwrap();
    let raw_plain = raw_list["Services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Service"] == "plain")
        .unwrap();
    let without_indexes = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("ModifyIndex");
        v
    };
    assert_eq!(without_indexes(plain), without_indexes(raw_plain));
    // The catalog itself still holds the registration as made.
    let raw = agent.get("/v1/catalog/service/web-sidecar-proxy").unwrap();
    assert_as_registered(&raw[0]["ServiceProxy"]);
}

#[test]
fn the_agent_shows_its_proxies_merged_unless_central_config_is_off() {
    let agent = agent_with_central_config(&[]);
    let service = agent.get("/v1/agent/service/web-sidecar-proxy").unwrap();
    assert_merged(&service["Proxy"]);
    let services = agent.get("/v1/agent/services").unwrap();
    assert_merged(&services["web-sidecar-proxy"]["Proxy"]);
    assert!(services["web"].get("Proxy").is_none() || services["web"]["Proxy"].is_null());

    let off = agent_with_central_config(&["-hcl=enable_central_service_config = false"]);
    let service = off.get("/v1/agent/service/web-sidecar-proxy").unwrap();
    assert_as_registered(&service["Proxy"]);
    let services = off.get("/v1/agent/services").unwrap();
    assert_as_registered(&services["web-sidecar-proxy"]["Proxy"]);
}
