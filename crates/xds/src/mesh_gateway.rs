//! A mesh gateway's resources, shaped and named as Consul's: one listener
//! per bind address with `tls_inspector`, a filter chain per other
//! datacenter matching `*.<dc>.internal.<trust domain>` to that
//! datacenter's gateways, and a catch-all chain whose `sni_cluster` sends
//! each connection to the local cluster its SNI names; a gateway that
//! carries the servers' traffic (`consul-wan-federation`) also routes
//! `*.server.<dc>.<domain>` to other datacenters' gateways and each local
//! server by its name. Nothing is decrypted: the mesh's mTLS (and the
//! servers' TLS) runs end to end through the gateway.

use std::collections::BTreeMap;
use std::net::IpAddr;

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::sni_cluster::v3::SniCluster;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp_proxy;
use envoy_types::pb::google::protobuf::UInt32Value;
use envoy_types::util::pack_any;
use legate_proxycfg::gateway::{server_sni, GatewayAddress, MeshGatewayState};
use legate_proxycfg::{ConnectProxySnapshot, Endpoint, EndpointHealth};
use serde_json::Value;

use crate::resources::{
    eds_over_ads, millis, socket_address, typed_filter, Resources, CLUSTER_TYPE, ENDPOINT_TYPE,
    LISTENER_TYPE,
};

/// How often a gateway cluster of host names is resolved again.
const DNS_REFRESH_MS: u64 = 10_000;

/// `<dc>.internal.<trust domain>`: the SNI suffix (and cluster name) of
/// a datacenter's services, as gateways route them.
pub fn datacenter_sni(datacenter: &str, trust_domain: &str) -> String {
    format!("{datacenter}.internal.{trust_domain}")
}

/// A config flag under its name or Consul's older `envoy_mesh_gateway_*`
/// alias (booleans or their text).
fn flag(snapshot: &ConnectProxySnapshot, key: &str) -> bool {
    let alias = key.replacen("envoy_gateway_", "envoy_mesh_gateway_", 1);
    [key, alias.as_str()]
        .iter()
        .filter_map(|k| snapshot.config.get(*k))
        .any(|v| match v {
            Value::Bool(b) => *b,
            Value::String(s) => s.eq_ignore_ascii_case("true"),
            _ => false,
        })
}

/// `envoy_gateway_bind_addresses`: `{name: {Address, Port}}`.
fn bind_addresses(snapshot: &ConnectProxySnapshot) -> BTreeMap<String, GatewayAddress> {
    let value = snapshot
        .config
        .get("envoy_gateway_bind_addresses")
        .or_else(|| snapshot.config.get("envoy_mesh_gateway_bind_addresses"));
    let Some(Value::Object(map)) = value else {
        return BTreeMap::new();
    };
    map.iter()
        .filter_map(|(name, v)| {
            let field = |k: &str| v.get(k).or_else(|| v.get(k.to_ascii_lowercase()));
            let address = field("Address")?.as_str()?.to_string();
            let port = field("Port")?.as_u64().filter(|p| *p <= 65535)? as u16;
            Some((name.clone(), GatewayAddress { address, port }))
        })
        .collect()
}

/// The addresses the gateway listens on, by bind name, as Consul picks
/// them: `default` (the service address, else 0.0.0.0) unless
/// `envoy_gateway_no_default_bind`; each tagged address with
/// `envoy_gateway_bind_tagged_addresses`; each of
/// `envoy_gateway_bind_addresses`. Sorted by name; of two on the same
/// address and port, the first name keeps it.
pub fn binds(
    snapshot: &ConnectProxySnapshot,
    gateway: &MeshGatewayState,
) -> Vec<(String, GatewayAddress)> {
    let mut binds: Vec<(String, GatewayAddress)> = Vec::new();
    if !flag(snapshot, "envoy_gateway_no_default_bind") {
        let address = if snapshot.address.is_empty() {
            "0.0.0.0".to_string()
        } else {
            snapshot.address.clone()
        };
        binds.push((
            "default".into(),
            GatewayAddress {
                address,
                port: snapshot.port,
            },
        ));
    }
    if flag(snapshot, "envoy_gateway_bind_tagged_addresses") {
        binds.extend(
            gateway
                .tagged_addresses
                .iter()
                .map(|(tag, a)| (tag.clone(), a.clone())),
        );
    }
    binds.extend(bind_addresses(snapshot));
    binds.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen = std::collections::BTreeSet::new();
    binds.retain(|(_, a)| seen.insert((a.address.clone(), a.port)));
    binds
}

fn tcp_proxy_filter(stat_prefix: String, cluster: String) -> listener::Filter {
    typed_filter(
        "envoy.filters.network.tcp_proxy",
        tcp_proxy::TcpProxy {
            stat_prefix,
            // Set even when empty: the catch-all's cluster comes from the SNI.
            cluster_specifier: Some(tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        },
    )
}

fn gateway_listener(
    snapshot: &ConnectProxySnapshot,
    gateway: &MeshGatewayState,
    bind: &str,
    at: &GatewayAddress,
) -> listener::Listener {
    let stat_bind = bind.replace(':', "_");
    let mut chains: Vec<listener::FilterChain> = gateway
        .remote_gateways
        .keys()
        .map(|dc| {
            let sni = datacenter_sni(dc, &snapshot.trust_domain);
            listener::FilterChain {
                filter_chain_match: Some(listener::FilterChainMatch {
                    server_names: vec![format!("*.{sni}")],
                    ..Default::default()
                }),
                filters: vec![tcp_proxy_filter(
                    format!("mesh_gateway_remote.{stat_bind}.{dc}"),
                    sni,
                )],
                ..Default::default()
            }
        })
        .collect();
    if gateway.wan_federation {
        chains.extend(server_chains(snapshot, gateway, &stat_bind));
    }
    chains.push(listener::FilterChain {
        filters: vec![
            typed_filter("envoy.filters.network.sni_cluster", SniCluster {}),
            tcp_proxy_filter(format!("mesh_gateway_local.{stat_bind}"), String::new()),
        ],
        ..Default::default()
    });
    listener::Listener {
        name: format!("{bind}:{}:{}", at.address, at.port),
        address: Some(socket_address(&at.address, at.port)),
        filter_chains: chains,
        listener_filters: vec![listener::ListenerFilter {
            name: "envoy.filters.listener.tls_inspector".into(),
            config_type: Some(listener::listener_filter::ConfigType::TypedConfig(
                pack_any(TlsInspector::default()),
            )),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn gateway_cluster(name: &str, timeout_ms: u64) -> cluster::Cluster {
    cluster::Cluster {
        connect_timeout: Some(millis(timeout_ms)),
        outlier_detection: Some(cluster::OutlierDetection::default()),
        ..eds_over_ads(name)
    }
}

fn health_of(e: &Endpoint) -> core::HealthStatus {
    match e.health {
        EndpointHealth::Critical => core::HealthStatus::Unhealthy,
        EndpointHealth::Passing | EndpointHealth::Warning => core::HealthStatus::Healthy,
    }
}

fn lb_endpoints<'a>(list: impl Iterator<Item = &'a Endpoint>) -> Vec<endpoint::LbEndpoint> {
    list.map(|e| endpoint::LbEndpoint {
        host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
            endpoint::Endpoint {
                address: Some(socket_address(&e.address, e.port)),
                ..Default::default()
            },
        )),
        health_status: health_of(e) as i32,
        load_balancing_weight: Some(UInt32Value {
            value: e.weight.clamp(1, 128),
        }),
        ..Default::default()
    })
    .collect()
}

fn gateway_load_assignment<'a>(
    name: &str,
    list: impl Iterator<Item = &'a Endpoint>,
) -> endpoint::ClusterLoadAssignment {
    endpoint::ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints: vec![endpoint::LocalityLbEndpoints {
            lb_endpoints: lb_endpoints(list),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A datacenter whose gateways are host names: Envoy resolves one of them
/// (the first healthy, else the last) itself. `dns_refresh_rate` is
/// deprecated in Envoy but is what Consul sends (and Envoy still takes).
#[allow(deprecated)]
fn hostname_cluster(
    snapshot: &ConnectProxySnapshot,
    name: &str,
    gateways: &[Endpoint],
    timeout_ms: u64,
) -> cluster::Cluster {
    let chosen = gateways
        .iter()
        .find(|g| g.health != EndpointHealth::Critical)
        .or(gateways.last());
    let strict = snapshot
        .config_str("envoy_dns_discovery_type")
        .is_some_and(|t| t.eq_ignore_ascii_case("strict_dns"));
    let discovery = if strict {
        cluster::cluster::DiscoveryType::StrictDns
    } else {
        cluster::cluster::DiscoveryType::LogicalDns
    };
    cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            discovery as i32,
        )),
        connect_timeout: Some(millis(timeout_ms)),
        load_assignment: Some(gateway_load_assignment(name, chosen.into_iter())),
        dns_refresh_rate: Some(millis(DNS_REFRESH_MS)),
        dns_lookup_family: cluster::cluster::DnsLookupFamily::V4Only as i32,
        outlier_detection: Some(cluster::OutlierDetection::default()),
        ..Default::default()
    }
}

/// The cluster (and endpoints) `name` of another datacenter's gateways.
fn add_remote_cluster(
    out: &mut Resources,
    snapshot: &ConnectProxySnapshot,
    name: String,
    gateways: &[Endpoint],
    timeout_ms: u64,
) {
    // With any host name among them, only the host names count (Consul's).
    let hostnames: Vec<Endpoint> = gateways
        .iter()
        .filter(|g| g.address.parse::<IpAddr>().is_err())
        .cloned()
        .collect();
    if hostnames.is_empty() {
        out.add(
            CLUSTER_TYPE,
            name.clone(),
            gateway_cluster(&name, timeout_ms),
        );
        let assignment = gateway_load_assignment(&name, gateways.iter());
        out.add(ENDPOINT_TYPE, name, assignment);
    } else {
        let cluster = hostname_cluster(snapshot, &name, &hostnames, timeout_ms);
        out.add(CLUSTER_TYPE, name, cluster);
    }
}

/// This datacenter's servers, for a gateway carrying their traffic:
/// `server.<dc>.<domain>` (any of them) and `<node>.server.<dc>.<domain>`
/// (each), at their LAN addresses and server ports, health left to the
/// connection (Consul's UNKNOWN).
fn add_server_clusters(
    out: &mut Resources,
    snapshot: &ConnectProxySnapshot,
    gateway: &MeshGatewayState,
    timeout_ms: u64,
) {
    let local = &snapshot.datacenter;
    let unknown = |list: Vec<endpoint::LbEndpoint>| {
        list.into_iter()
            .map(|mut e| {
                e.health_status = core::HealthStatus::Unknown as i32;
                e
            })
            .collect::<Vec<_>>()
    };
    let mut clusters = vec![(
        server_sni(None, local, &gateway.domain),
        gateway.servers.clone(),
    )];
    for server in &gateway.servers {
        let name = server_sni(Some(&server.node), local, &gateway.domain);
        clusters.push((name, vec![server.clone()]));
    }
    for (name, servers) in clusters {
        out.add(
            CLUSTER_TYPE,
            name.clone(),
            gateway_cluster(&name, timeout_ms),
        );
        let assignment = endpoint::ClusterLoadAssignment {
            cluster_name: name.clone(),
            endpoints: vec![endpoint::LocalityLbEndpoints {
                lb_endpoints: unknown(lb_endpoints(servers.iter())),
                ..Default::default()
            }],
            ..Default::default()
        };
        out.add(ENDPOINT_TYPE, name, assignment);
    }
}

/// The chains of a gateway carrying servers' traffic, after the
/// per-datacenter ones: `*.server.<dc>.<domain>` to each other
/// datacenter's servers, and each local server by its exact name.
fn server_chains(
    snapshot: &ConnectProxySnapshot,
    gateway: &MeshGatewayState,
    stat_bind: &str,
) -> Vec<listener::FilterChain> {
    let chain = |names: Vec<String>, stat: String, cluster: String| listener::FilterChain {
        filter_chain_match: Some(listener::FilterChainMatch {
            server_names: names,
            ..Default::default()
        }),
        filters: vec![tcp_proxy_filter(stat, cluster)],
        ..Default::default()
    };
    let local = &snapshot.datacenter;
    let mut chains: Vec<listener::FilterChain> = gateway
        .remote_gateways
        .keys()
        .map(|dc| {
            let cluster = server_sni(None, dc, &gateway.domain);
            chain(
                vec![format!("*.{cluster}")],
                format!("mesh_gateway_remote.{stat_bind}.{dc}"),
                cluster,
            )
        })
        .collect();
    let nodes: std::collections::BTreeSet<&str> =
        gateway.servers.iter().map(|s| s.node.as_str()).collect();
    chains.extend(nodes.into_iter().map(|node| {
        let cluster = server_sni(Some(node), local, &gateway.domain);
        chain(
            vec![cluster.clone()],
            format!("mesh_gateway_local_server.{stat_bind}.{local}"),
            cluster,
        )
    }));
    chains
}

/// Generates every resource of a mesh gateway's snapshot.
pub fn generate(snapshot: &ConnectProxySnapshot, gateway: &MeshGatewayState) -> Resources {
    let mut out = Resources::default();
    let timeout_ms = snapshot
        .config_u64("connect_timeout_ms")
        .filter(|t| *t > 0)
        .unwrap_or(5000);
    for (dc, gateways) in &gateway.remote_gateways {
        let name = datacenter_sni(dc, &snapshot.trust_domain);
        add_remote_cluster(&mut out, snapshot, name, gateways, timeout_ms);
        if gateway.wan_federation {
            // Another datacenter's servers are behind its gateways too.
            let name = server_sni(None, dc, &gateway.domain);
            add_remote_cluster(&mut out, snapshot, name, gateways, timeout_ms);
        }
    }
    if gateway.wan_federation {
        add_server_clusters(&mut out, snapshot, gateway, timeout_ms);
    }
    let local_sni = datacenter_sni(&snapshot.datacenter, &snapshot.trust_domain);
    let no_subsets = BTreeMap::new();
    for (service, instances) in &gateway.services {
        // A service's clusters take its resolver's ConnectTimeout.
        let timeout_ms = gateway
            .connect_timeouts_ms
            .get(service)
            .copied()
            .unwrap_or(timeout_ms);
        let name = format!("{service}.default.{local_sni}");
        let subsets = gateway.subsets.get(service).unwrap_or(&no_subsets);
        let clusters = std::iter::once((name, instances)).chain(
            subsets
                .iter()
                .map(|(subset, list)| (format!("{subset}.{service}.default.{local_sni}"), list)),
        );
        for (name, list) in clusters {
            out.add(
                CLUSTER_TYPE,
                name.clone(),
                gateway_cluster(&name, timeout_ms),
            );
            let assignment = gateway_load_assignment(&name, list.iter());
            out.add(ENDPOINT_TYPE, name, assignment);
        }
    }
    for (bind, at) in binds(snapshot, gateway) {
        let l = gateway_listener(snapshot, gateway, &bind, &at);
        out.add(LISTENER_TYPE, l.name.clone(), l);
    }
    out
}
