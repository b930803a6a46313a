use serde_json::json;

use legate_types::catalog::{ConnectProxyConfig, Upstream};
use legate_types::config_entry::from_json;

use super::*;

fn entries(list: &[Value]) -> RoutingEntries {
    let decoded: Vec<_> = list.iter().map(|e| from_json(e.clone()).unwrap()).collect();
    RoutingEntries::new(&decoded).unwrap()
}

fn sidecar_of(destination: &str, upstreams: &[&str]) -> ConnectProxyConfig {
    ConnectProxyConfig {
        destination_service_name: destination.into(),
        upstreams: std::sync::Arc::new(
            upstreams
                .iter()
                .map(|name| Upstream {
                    destination_name: (*name).into(),
                    local_bind_port: 9000,
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

fn central() -> RoutingEntries {
    entries(&[
        json!({"Kind": "proxy-defaults", "Name": "global",
               "Config": {"protocol": "http", "local_connect_timeout_ms": 1000},
               "MeshGateway": {"Mode": "local"},
               "Expose": {"Checks": true}}),
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "grpc",
               "MaxInboundConnections": 64,
               "UpstreamConfig": {
                   "Defaults": {"ConnectTimeoutMs": 5000},
                   "Overrides": [{"Name": "db", "Protocol": "tcp",
                                  "MeshGateway": {"Mode": "remote"}}]}}),
        json!({"Kind": "service-defaults", "Name": "cache", "Protocol": "http2"}),
    ])
}

#[test]
fn service_defaults_win_over_proxy_defaults_and_the_instance_over_both() {
    let mut proxy = sidecar_of("web", &[]);
    proxy
        .config
        .insert("local_connect_timeout_ms".into(), json!(250));
    assert!(merge(
        "connect-proxy",
        "web-sidecar-proxy",
        &mut proxy,
        &central()
    ));
    assert_eq!(proxy.config["protocol"], "grpc");
    assert_eq!(proxy.config["max_inbound_connections"], 64);
    assert_eq!(
        proxy.config["local_connect_timeout_ms"], 250,
        "the instance's own"
    );
    assert_eq!(proxy.mesh_gateway.mode, "local");
    assert!(proxy.expose.checks);
    assert!(proxy.upstreams.is_empty(), "no upstreams are made up");
}

#[test]
fn upstreams_get_their_destinations_protocol_defaults_and_overrides() {
    let mut proxy = sidecar_of("web", &["db", "cache", "other"]);
    merge("connect-proxy", "web-sidecar-proxy", &mut proxy, &central());
    let by_name = |name: &str| {
        proxy
            .upstreams
            .iter()
            .find(|u| u.destination_name == name)
            .unwrap()
            .clone()
    };
    let db = by_name("db");
    assert_eq!(db.config["protocol"], "tcp", "the override wins");
    assert_eq!(db.config["connect_timeout_ms"], 5000);
    assert_eq!(db.mesh_gateway.mode, "remote");
    let cache = by_name("cache");
    assert_eq!(
        cache.config["protocol"], "http2",
        "its own service-defaults"
    );
    assert_eq!(cache.mesh_gateway.mode, "local");
    let other = by_name("other");
    assert_eq!(other.config["protocol"], "http", "proxy-defaults' protocol");
    assert_eq!(proxy.upstreams.len(), 3);
}

#[test]
fn an_upstreams_own_config_and_mode_win() {
    let mut proxy = sidecar_of("web", &["db"]);
    let mut upstreams = proxy.upstreams.as_ref().clone();
    upstreams[0].config.insert("protocol".into(), json!("http"));
    upstreams[0].mesh_gateway.mode = "none".into();
    proxy.upstreams = std::sync::Arc::new(upstreams);
    merge("connect-proxy", "web-sidecar-proxy", &mut proxy, &central());
    assert_eq!(proxy.upstreams[0].config["protocol"], "http");
    assert_eq!(proxy.upstreams[0].mesh_gateway.mode, "none");
}

#[test]
fn transparent_proxies_gain_the_centrally_configured_upstreams() {
    let entries = entries(&[json!({"Kind": "service-defaults", "Name": "web",
        "Mode": "transparent",
        "TransparentProxy": {"OutboundListenerPort": 15001, "DialedDirectly": true},
        "UpstreamConfig": {"Overrides": [{"Name": "db", "ConnectTimeoutMs": 3}]}})]);
    let mut proxy = sidecar_of("web", &[]);
    merge("connect-proxy", "web-sidecar-proxy", &mut proxy, &entries);
    assert_eq!(proxy.mode, "transparent");
    assert_eq!(proxy.transparent_proxy.outbound_listener_port, 15001);
    assert!(proxy.transparent_proxy.dialed_directly);
    let names: Vec<&str> = proxy
        .upstreams
        .iter()
        .map(|u| u.destination_name.as_str())
        .collect();
    assert_eq!(names, ["db"], "nothing configures a wildcard upstream");
    assert!(proxy.upstreams.iter().all(|u| u.centrally_configured));
    assert_eq!(proxy.upstreams[0].config["connect_timeout_ms"], 3);
}

#[test]
fn upstream_defaults_add_the_wildcard_upstream_to_transparent_proxies() {
    let entries = entries(&[json!({"Kind": "service-defaults", "Name": "web",
        "Mode": "transparent",
        "UpstreamConfig": {"Defaults": {"ConnectTimeoutMs": 7}}})]);
    let mut proxy = sidecar_of("web", &[]);
    merge("connect-proxy", "web-sidecar-proxy", &mut proxy, &entries);
    assert_eq!(proxy.upstreams.len(), 1);
    assert_eq!(proxy.upstreams[0].destination_name, "*");
    assert_eq!(proxy.upstreams[0].config["connect_timeout_ms"], 7);
}

#[test]
fn upstream_defaults_mode_beats_the_central_mode_but_not_the_instances() {
    let entries = entries(&[
        json!({"Kind": "proxy-defaults", "Name": "global", "MeshGateway": {"Mode": "local"}}),
        json!({"Kind": "service-defaults", "Name": "web",
               "UpstreamConfig": {"Defaults": {"MeshGateway": {"Mode": "remote"}}}}),
    ]);
    let mut proxy = sidecar_of("web", &["db"]);
    merge("connect-proxy", "web-sidecar-proxy", &mut proxy, &entries);
    assert_eq!(proxy.mesh_gateway.mode, "local", "the proxy's own mode");
    assert_eq!(
        proxy.upstreams[0].mesh_gateway.mode, "remote",
        "UpstreamConfig.Defaults outranks proxy-defaults"
    );
    let mut proxy = sidecar_of("web", &["db"]);
    proxy.mesh_gateway.mode = "none".into();
    merge("connect-proxy", "web-sidecar-proxy", &mut proxy, &entries);
    assert_eq!(
        proxy.upstreams[0].mesh_gateway.mode, "none",
        "the registration's own mode outranks the defaults"
    );
}

#[test]
fn gateways_merge_under_their_own_name_and_plain_services_not_at_all() {
    let entries = entries(&[json!({"Kind": "service-defaults", "Name": "gw",
        "MeshGateway": {"Mode": "remote"}})]);
    let mut gateway = ConnectProxyConfig::default();
    assert!(merge("mesh-gateway", "gw", &mut gateway, &entries));
    assert_eq!(gateway.mesh_gateway.mode, "remote");
    let mut plain = ConnectProxyConfig::default();
    assert!(!merge("", "gw", &mut plain, &entries));
    assert_eq!(plain, ConnectProxyConfig::default());
}
