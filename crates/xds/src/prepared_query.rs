//! Prepared-query upstreams in Consul's shapes: no discovery chain, one
//! TCP listener `prepared_query:<name>:<ip>:<port>` whose `tcp_proxy`
//! (stat prefix `upstream.prepared_query_<name>`) sends to one EDS cluster
//! named, and dialled with the SNI, `<name>.default.<dc>.query.<trust
//! domain>` (Consul's `QuerySNI`). The cluster accepts the SPIFFE id of
//! every distinct (datacenter, service) in the query's current answer, so
//! its certificate check follows the answer as failover moves it.

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp_proxy;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use envoy_types::pb::google::protobuf::UInt32Value;
use legate_proxycfg::{ConnectProxySnapshot, EndpointHealth, QueryUpstreamSnapshot};

use crate::resources::{
    common_tls, connect_timeout_ms, eds_over_ads, lb_endpoint, millis, transport_socket,
    typed_filter, upstream_cluster_override, upstream_listener, upstream_listener_override,
    Resources, CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, OVERPROVISIONING_FACTOR,
};

/// The cluster name and SNI of a query upstream (Consul's `QuerySNI`).
pub fn query_sni(query: &str, datacenter: &str, trust_domain: &str) -> String {
    format!("{query}.default.{datacenter}.query.{trust_domain}")
}

/// The SPIFFE ids a query upstream's cluster accepts: one per distinct
/// (datacenter, service) of the answer, in the answer's order.
fn sans(snapshot: &ConnectProxySnapshot, upstream: &QueryUpstreamSnapshot) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    upstream
        .endpoints
        .iter()
        .filter(|e| seen.insert((e.datacenter.as_str(), e.service.as_str())))
        .map(|e| {
            legate_types::connect::spiffe_service_uri(
                &snapshot.trust_domain,
                "default",
                &e.datacenter,
                &e.service,
            )
        })
        .collect()
}

fn query_cluster(
    snapshot: &ConnectProxySnapshot,
    upstream: &QueryUpstreamSnapshot,
    name: &str,
) -> cluster::Cluster {
    let timeout_ms = connect_timeout_ms(&upstream.upstream).unwrap_or(5000);
    cluster::Cluster {
        alt_stat_name: name.to_string(),
        connect_timeout: Some(millis(timeout_ms)),
        outlier_detection: Some(cluster::OutlierDetection::default()),
        transport_socket: Some(transport_socket(tls::UpstreamTlsContext {
            common_tls_context: Some(common_tls(snapshot, sans(snapshot, upstream))),
            sni: name.to_string(),
            ..Default::default()
        })),
        ..eds_over_ads(name)
    }
}

fn query_endpoints(
    upstream: &QueryUpstreamSnapshot,
    name: &str,
) -> endpoint::ClusterLoadAssignment {
    let lb_endpoints = upstream
        .endpoints
        .iter()
        .map(|e| {
            let e = &e.endpoint;
            let health = match e.health {
                EndpointHealth::Critical => core::HealthStatus::Unhealthy,
                _ => core::HealthStatus::Healthy,
            };
            lb_endpoint(&e.address, e.port, health, e.weight)
        })
        .collect();
    endpoint::ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints: vec![endpoint::LocalityLbEndpoints {
            lb_endpoints,
            ..Default::default()
        }],
        policy: Some(endpoint::cluster_load_assignment::Policy {
            overprovisioning_factor: Some(UInt32Value {
                value: OVERPROVISIONING_FACTOR,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Adds a query upstream's listener, cluster and load assignment (none
/// without a local bind port, as for service upstreams). The upstream's
/// `envoy_cluster_json` and `envoy_listener_json` replace what is
/// generated, keeping the names (and the cluster's mTLS when it has none).
pub(crate) fn add_upstream(
    out: &mut Resources,
    snapshot: &ConnectProxySnapshot,
    upstream: &QueryUpstreamSnapshot,
) {
    let u = &upstream.upstream;
    if u.local_bind_port == 0 {
        return;
    }
    let name = query_sni(
        &u.destination_name,
        &upstream.datacenter,
        &snapshot.trust_domain,
    );
    let cluster = upstream_cluster_override(u, snapshot, query_cluster(snapshot, upstream, &name));
    out.add(CLUSTER_TYPE, name.clone(), cluster);
    out.add(
        ENDPOINT_TYPE,
        name.clone(),
        query_endpoints(upstream, &name),
    );
    let filter = typed_filter(
        "envoy.filters.network.tcp_proxy",
        tcp_proxy::TcpProxy {
            stat_prefix: format!("upstream.prepared_query_{}", u.destination_name),
            cluster_specifier: Some(tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(
                name.clone(),
            )),
            ..Default::default()
        },
    );
    let listener =
        upstream_listener_override(u, snapshot, upstream_listener(u, &upstream.id(), filter));
    out.add(LISTENER_TYPE, listener.name.clone(), listener);
}
