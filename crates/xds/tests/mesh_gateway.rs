//! A mesh gateway's resources, field by field against what Consul sends
//! (its `mesh-gateway*` goldens): the listener's `tls_inspector`, one
//! chain per other datacenter in order, the catch-all `sni_cluster` chain
//! last with an empty cluster, Consul's stat prefixes, the clusters of
//! remote datacenters and local services, host-name gateways resolved by
//! Envoy, and the binds of tagged and custom addresses.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp_proxy;
use legate_proxycfg::gateway::MeshGatewayState;
use legate_xds::resources::{generate, CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE};
use prost::Message;
use serde_json::json;

#[path = "fixtures/gateway.rs"]
mod gateway_fixture;

use gateway_fixture::{gateway_snapshot, state, wan_federation_state, TD};

fn decoded<T: Message + Default>(
    resources: &legate_xds::resources::Resources,
    type_url: &str,
) -> BTreeMap<String, T> {
    resources
        .of(type_url)
        .map(|all| {
            all.iter()
                .map(|(name, any)| (name.clone(), T::decode(any.value.as_slice()).unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

fn tcp_proxy_of(filter: &listener::Filter) -> tcp_proxy::TcpProxy {
    assert_eq!(filter.name, "envoy.filters.network.tcp_proxy");
    let Some(listener::filter::ConfigType::TypedConfig(any)) = &filter.config_type else {
        panic!("a typed tcp_proxy");
    };
    assert_eq!(
        any.type_url,
        "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
    );
    tcp_proxy::TcpProxy::decode(any.value.as_slice()).unwrap()
}

fn cluster_of(proxy: &tcp_proxy::TcpProxy) -> &str {
    match proxy.cluster_specifier.as_ref() {
        Some(tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(c)) => c,
        other => panic!("a named cluster, not {other:?}"),
    }
}

#[test]
fn the_listener_routes_other_datacenters_by_sni_and_the_rest_by_its_own_sni() {
    let resources = generate(&gateway_snapshot(json!({}), state()));
    let listeners: BTreeMap<String, listener::Listener> = decoded(&resources, LISTENER_TYPE);
    assert_eq!(
        listeners.keys().collect::<Vec<_>>(),
        ["default:1.2.3.4:8443"]
    );
    let l = &listeners["default:1.2.3.4:8443"];
    let Some(core::address::Address::SocketAddress(at)) =
        l.address.as_ref().and_then(|a| a.address.as_ref())
    else {
        panic!("a socket address")
    };
    assert_eq!(
        (at.address.as_str(), at.port_specifier.clone()),
        (
            "1.2.3.4",
            Some(core::socket_address::PortSpecifier::PortValue(8443))
        )
    );
    assert_eq!(l.listener_filters.len(), 1);
    assert_eq!(
        l.listener_filters[0].name,
        "envoy.filters.listener.tls_inspector"
    );
    let Some(listener::listener_filter::ConfigType::TypedConfig(inspector)) =
        &l.listener_filters[0].config_type
    else {
        panic!("a typed tls_inspector")
    };
    assert_eq!(
        inspector.type_url,
        "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
    );
    // dc2, dc4 (sorted), then the catch-all.
    assert_eq!(l.filter_chains.len(), 3);
    for (chain, dc) in l.filter_chains.iter().zip(["dc2", "dc4"]) {
        let names = &chain.filter_chain_match.as_ref().unwrap().server_names;
        assert_eq!(names, &[format!("*.{dc}.internal.{TD}")]);
        assert!(chain.transport_socket.is_none(), "nothing is decrypted");
        assert_eq!(chain.filters.len(), 1);
        let proxy = tcp_proxy_of(&chain.filters[0]);
        assert_eq!(
            proxy.stat_prefix,
            format!("mesh_gateway_remote.default.{dc}")
        );
        assert_eq!(cluster_of(&proxy), format!("{dc}.internal.{TD}"));
    }
    let catch_all = &l.filter_chains[2];
    assert!(catch_all.filter_chain_match.is_none());
    assert_eq!(catch_all.filters.len(), 2);
    assert_eq!(
        catch_all.filters[0].name,
        "envoy.filters.network.sni_cluster"
    );
    let Some(listener::filter::ConfigType::TypedConfig(sni)) = &catch_all.filters[0].config_type
    else {
        panic!("a typed sni_cluster")
    };
    assert_eq!(
        sni.type_url,
        "type.googleapis.com/envoy.extensions.filters.network.sni_cluster.v3.SniCluster"
    );
    let proxy = tcp_proxy_of(&catch_all.filters[1]);
    assert_eq!(proxy.stat_prefix, "mesh_gateway_local.default");
    assert_eq!(cluster_of(&proxy), "", "the SNI names the cluster");
}

#[test]
fn clusters_and_endpoints_take_consuls_names_and_shapes() {
    let resources = generate(&gateway_snapshot(json!({}), state()));
    let clusters: BTreeMap<String, cluster::Cluster> = decoded(&resources, CLUSTER_TYPE);
    let names: Vec<String> = clusters.keys().cloned().collect();
    assert_eq!(
        names,
        [
            format!("bar.default.dc1.internal.{TD}"),
            format!("dc2.internal.{TD}"),
            format!("dc4.internal.{TD}"),
            format!("foo.default.dc1.internal.{TD}"),
            format!("v1.bar.default.dc1.internal.{TD}"),
            format!("v2.bar.default.dc1.internal.{TD}"),
        ]
    );
    // A resolver's ConnectTimeout is its service's and subsets' (Consul's
    // mesh-gateway-service-timeouts); the others keep 5 s.
    for (name, seconds) in [
        (format!("bar.default.dc1.internal.{TD}"), 10),
        (format!("v1.bar.default.dc1.internal.{TD}"), 10),
        (format!("v2.bar.default.dc1.internal.{TD}"), 10),
        (format!("foo.default.dc1.internal.{TD}"), 5),
    ] {
        assert_eq!(
            clusters[&name].connect_timeout.as_ref().map(|d| d.seconds),
            Some(seconds),
            "{name}"
        );
    }
    for name in [
        format!("dc2.internal.{TD}"),
        format!("foo.default.dc1.internal.{TD}"),
    ] {
        let c = &clusters[&name];
        assert_eq!(
            c.cluster_discovery_type,
            Some(cluster::cluster::ClusterDiscoveryType::Type(
                cluster::cluster::DiscoveryType::Eds as i32
            ))
        );
        let eds = c.eds_cluster_config.as_ref().unwrap();
        let source = eds.eds_config.as_ref().unwrap();
        assert_eq!(source.resource_api_version, core::ApiVersion::V3 as i32);
        assert!(matches!(
            source.config_source_specifier,
            Some(core::config_source::ConfigSourceSpecifier::Ads(_))
        ));
        assert_eq!(c.connect_timeout.as_ref().map(|d| d.seconds), Some(5));
        assert!(c.outlier_detection.is_some());
        assert!(c.transport_socket.is_none(), "gateways originate no TLS");
        assert!(c.common_lb_config.is_none());
    }
    // Host-name gateways: Envoy resolves the first healthy one itself.
    let dns = &clusters[&format!("dc4.internal.{TD}")];
    assert_eq!(
        dns.cluster_discovery_type,
        Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::LogicalDns as i32
        ))
    );
    assert_eq!(
        dns.dns_lookup_family,
        cluster::cluster::DnsLookupFamily::V4Only as i32
    );
    #[allow(deprecated)]
    let refresh = dns.dns_refresh_rate.as_ref().map(|d| d.seconds);
    assert_eq!(refresh, Some(10));
    let inline = dns.load_assignment.as_ref().unwrap();
    let only = &inline.endpoints[0].lb_endpoints;
    assert_eq!(only.len(), 1);
    assert_eq!(
        address_of(&only[0]),
        ("456.us-west-2.elb.notaws.com".into(), 443)
    );
    let assignments: BTreeMap<String, endpoint::ClusterLoadAssignment> =
        decoded(&resources, ENDPOINT_TYPE);
    assert!(
        !assignments.contains_key(&format!("dc4.internal.{TD}")),
        "no EDS for host names"
    );
    let dc2 = &assignments[&format!("dc2.internal.{TD}")].endpoints[0].lb_endpoints;
    assert_eq!(
        dc2.iter().map(address_of).collect::<Vec<_>>(),
        [
            ("198.18.1.1".to_string(), 443),
            ("198.18.1.2".to_string(), 443)
        ]
    );
    let foo = &assignments[&format!("foo.default.dc1.internal.{TD}")].endpoints[0].lb_endpoints;
    assert_eq!(
        foo.iter()
            .map(|e| (
                address_of(e),
                e.health_status,
                e.load_balancing_weight.map(|w| w.value)
            ))
            .collect::<Vec<_>>(),
        [
            (
                ("172.16.1.3".into(), 2222),
                core::HealthStatus::Healthy as i32,
                Some(1)
            ),
            (
                ("172.16.1.4".into(), 2222),
                core::HealthStatus::Unhealthy as i32,
                Some(1)
            ),
        ]
    );
    let bar = &assignments[&format!("bar.default.dc1.internal.{TD}")].endpoints[0].lb_endpoints;
    assert_eq!(
        bar[0].health_status,
        core::HealthStatus::Healthy as i32,
        "warning is healthy"
    );
}

fn address_of(e: &endpoint::LbEndpoint) -> (String, u16) {
    let Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(ep)) = &e.host_identifier else {
        panic!("an endpoint")
    };
    let Some(core::address::Address::SocketAddress(sa)) =
        ep.address.as_ref().and_then(|a| a.address.as_ref())
    else {
        panic!("a socket address")
    };
    let Some(core::socket_address::PortSpecifier::PortValue(port)) = sa.port_specifier else {
        panic!("a port")
    };
    (sa.address.clone(), port as u16)
}

#[test]
fn tagged_and_custom_binds_name_their_listeners_and_stat_prefixes() {
    let tagged = generate(&gateway_snapshot(
        json!({"envoy_mesh_gateway_no_default_bind": true, "envoy_gateway_bind_tagged_addresses": "true"}),
        state(),
    ));
    let listeners: BTreeMap<String, listener::Listener> = decoded(&tagged, LISTENER_TYPE);
    assert_eq!(
        listeners.keys().collect::<Vec<_>>(),
        ["lan:1.2.3.4:8443", "wan:198.18.0.1:443"]
    );
    let wan = &listeners["wan:198.18.0.1:443"];
    let first = tcp_proxy_of(&wan.filter_chains[0].filters[0]);
    assert_eq!(first.stat_prefix, "mesh_gateway_remote.wan.dc2");
    let last = tcp_proxy_of(&wan.filter_chains.last().unwrap().filters[1]);
    assert_eq!(last.stat_prefix, "mesh_gateway_local.wan");
    // Custom binds beside the default; one on the default's address is
    // dropped (the first name, sorted, keeps it).
    let custom = generate(&gateway_snapshot(
        json!({"envoy_gateway_bind_addresses": {
            "foo": {"Address": "198.17.2.3", "Port": 8080},
            "baz": {"Address": "127.0.0.1", "Port": 8765},
            "zzz": {"Address": "1.2.3.4", "Port": 8443}
        }}),
        state(),
    ));
    let listeners: BTreeMap<String, listener::Listener> = decoded(&custom, LISTENER_TYPE);
    assert_eq!(
        listeners.keys().collect::<Vec<_>>(),
        [
            "baz:127.0.0.1:8765",
            "default:1.2.3.4:8443",
            "foo:198.17.2.3:8080"
        ]
    );
}

#[test]
fn a_gateway_with_nothing_behind_it_still_listens() {
    let empty = MeshGatewayState::default();
    let resources = generate(&gateway_snapshot(json!({}), empty));
    assert!(resources.of(CLUSTER_TYPE).is_none_or(|c| c.is_empty()));
    let listeners: BTreeMap<String, listener::Listener> = decoded(&resources, LISTENER_TYPE);
    let l = &listeners["default:1.2.3.4:8443"];
    assert_eq!(l.filter_chains.len(), 1, "only the catch-all");
    // Connect timeouts follow connect_timeout_ms.
    let resources = generate(&gateway_snapshot(
        json!({"connect_timeout_ms": 2500}),
        state(),
    ));
    let clusters: BTreeMap<String, cluster::Cluster> = decoded(&resources, CLUSTER_TYPE);
    let timeout = clusters[&format!("dc2.internal.{TD}")]
        .connect_timeout
        .unwrap();
    assert_eq!((timeout.seconds, timeout.nanos), (2, 500_000_000));
}

#[test]
fn a_gateway_carrying_servers_routes_them_by_name_as_consuls_does() {
    let resources = generate(&gateway_snapshot(json!({}), wan_federation_state()));
    let listeners: BTreeMap<String, listener::Listener> = decoded(&resources, LISTENER_TYPE);
    let l = &listeners["default:1.2.3.4:8443"];
    // Per datacenter, then each other datacenter's servers, then each
    // local server by its exact name, then the catch-all.
    let routed: Vec<(Vec<String>, String, String)> = l
        .filter_chains
        .iter()
        .filter_map(|chain| {
            let names = chain.filter_chain_match.as_ref()?.server_names.clone();
            let proxy = tcp_proxy_of(&chain.filters[0]);
            Some((
                names,
                proxy.stat_prefix.clone(),
                cluster_of(&proxy).to_string(),
            ))
        })
        .collect();
    let expected = |names: &[&str], stat: &str, cluster: &str| {
        (
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            stat.to_string(),
            cluster.to_string(),
        )
    };
    assert_eq!(
        routed,
        vec![
            expected(
                &[&format!("*.dc2.internal.{TD}")],
                "mesh_gateway_remote.default.dc2",
                &format!("dc2.internal.{TD}")
            ),
            expected(
                &[&format!("*.dc4.internal.{TD}")],
                "mesh_gateway_remote.default.dc4",
                &format!("dc4.internal.{TD}")
            ),
            expected(
                &["*.server.dc2.consul"],
                "mesh_gateway_remote.default.dc2",
                "server.dc2.consul"
            ),
            expected(
                &["*.server.dc4.consul"],
                "mesh_gateway_remote.default.dc4",
                "server.dc4.consul"
            ),
            expected(
                &["s1.server.dc1.consul"],
                "mesh_gateway_local_server.default.dc1",
                "s1.server.dc1.consul"
            ),
            expected(
                &["s2.server.dc1.consul"],
                "mesh_gateway_local_server.default.dc1",
                "s2.server.dc1.consul"
            ),
        ]
    );
    assert!(l.filter_chains.last().unwrap().filter_chain_match.is_none());
    let clusters: BTreeMap<String, cluster::Cluster> = decoded(&resources, CLUSTER_TYPE);
    for name in [
        "server.dc1.consul",
        "s1.server.dc1.consul",
        "s2.server.dc1.consul",
        "server.dc2.consul",
        "server.dc4.consul",
    ] {
        assert!(
            clusters.contains_key(name),
            "{name} in {:?}",
            clusters.keys()
        );
    }
    // dc4's gateways are host names: its servers' cluster is resolved by
    // Envoy, as its services' is.
    assert_eq!(
        clusters["server.dc4.consul"].cluster_discovery_type,
        clusters[&format!("dc4.internal.{TD}")].cluster_discovery_type
    );
    let assignments: BTreeMap<String, endpoint::ClusterLoadAssignment> =
        decoded(&resources, ENDPOINT_TYPE);
    let all = &assignments["server.dc1.consul"].endpoints[0].lb_endpoints;
    let mut addresses: Vec<(String, u16)> = all.iter().map(address_of).collect();
    addresses.sort();
    assert_eq!(
        addresses,
        [
            ("10.0.0.11".to_string(), 8300),
            ("10.0.0.12".to_string(), 8300)
        ]
    );
    assert!(
        all.iter()
            .all(|e| e.health_status == core::HealthStatus::Unknown as i32),
        "a server's health is left to the connection"
    );
    let one = &assignments["s1.server.dc1.consul"].endpoints[0].lb_endpoints;
    assert_eq!(
        one.iter().map(address_of).collect::<Vec<_>>(),
        [("10.0.0.11".to_string(), 8300)]
    );
    let dc2 = &assignments["server.dc2.consul"].endpoints[0].lb_endpoints;
    assert_eq!(
        dc2.iter().map(address_of).collect::<Vec<_>>(),
        [
            ("198.18.1.1".to_string(), 443),
            ("198.18.1.2".to_string(), 443)
        ]
    );
}
