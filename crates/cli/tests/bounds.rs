//! Counts that cost memory for as long as they are registered are bounded
//! with a clear error: upstreams of one proxy, sources of one
//! `service-intentions` entry.

mod common;

use common::TestAgent;
use serde_json::json;

#[test]
fn a_proxy_may_have_at_most_ten_thousand_upstreams() {
    let agent = TestAgent::dev(&[]);
    let sidecar = |count: usize| {
        let upstreams: Vec<_> = (0..count)
            .map(|i| json!({"DestinationName": format!("db{i}"), "LocalBindPort": 10000 + i}))
            .collect();
        json!({"Name": "web", "Port": 8080,
               "Connect": {"SidecarService": {"Proxy": {"Upstreams": upstreams}}}})
    };
    let (status, body) = agent.put("/v1/agent/service/register", &sidecar(10_001).to_string());
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("10001 upstreams is more than the 10000 one proxy may have"),
        "{body}"
    );
    let proxy = json!({"Kind": "connect-proxy", "Name": "web-proxy", "Port": 21000,
                       "Proxy": {"DestinationServiceName": "web",
                                 "Upstreams": sidecar(10_001)["Connect"]["SidecarService"]["Proxy"]["Upstreams"]}});
    let (status, body) = agent.put("/v1/agent/service/register", &proxy.to_string());
    assert_eq!(status, 400, "{body}");
    let services = agent.get("/v1/agent/services").unwrap();
    assert_eq!(services, json!({}), "nothing was registered");
    let (status, body) = agent.put("/v1/agent/service/register", &sidecar(3).to_string());
    assert_eq!(status, 200, "{body}");
}

#[test]
fn an_intentions_entry_may_have_at_most_ten_thousand_sources() {
    let agent = TestAgent::dev(&[]);
    let entry = |count: usize| {
        let sources: Vec<_> = (0..count)
            .map(|i| json!({"Name": format!("client{i}"), "Action": "allow"}))
            .collect();
        json!({"Kind": "service-intentions", "Name": "db", "Sources": sources})
    };
    let (status, body) = agent.put("/v1/config", &entry(10_001).to_string());
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("10001 sources is more than the 10000 one entry may have"),
        "{body}"
    );
    let (status, body) = agent.put("/v1/config", &entry(2).to_string());
    assert_eq!(status, 200, "{body}");
}
