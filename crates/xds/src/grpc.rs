//! Resources for proxyless gRPC: a Connect-native service whose gRPC
//! library's own xDS client (grpc-go, grpc-java, C-core/Python, grpc-js)
//! talks to the agent directly. gRPC accepts narrower shapes than Envoy:
//!
//! - one listener per dialled target, named exactly as the target
//!   (`xds:///db` asks for `db`), holding an `api_listener` whose
//!   `HttpConnectionManager` carries the chain's routes inline and only the
//!   router filter;
//! - EDS clusters named by SNI as for Envoy, with no inline certificates:
//!   plain text, or (when the client's node metadata names a bootstrap
//!   certificate provider) an `UpstreamTlsContext` that points at that
//!   provider for its identity and roots and checks the target's SPIFFE id;
//! - load assignments whose every priority is a locality with a weight.

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::extensions::filters::http::router::v3 as router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use envoy_types::pb::envoy::r#type::matcher::v3 as matcher;
use envoy_types::pb::google::protobuf::UInt32Value;
use envoy_types::util::pack_any;
use legate_chain::compile::Target;
use legate_proxycfg::{ConnectProxySnapshot, UpstreamSnapshot};

use crate::resources::{
    eds_over_ads, load_assignment, resolver_nodes, resolver_targets, spiffe_of, transport_socket,
    Resources, CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE,
};

/// The node metadata key a proxyless client sets to the name of a
/// `certificate_providers` entry of its gRPC bootstrap: its clusters then
/// use mTLS with the certificates that provider reads.
pub const CERTIFICATE_PROVIDER_METADATA: &str = "legate.certificate_provider";

/// mTLS towards the targets through the client's certificate provider.
fn provider_tls(
    snapshot: &ConnectProxySnapshot,
    targets: &[&Target],
    provider: &str,
) -> tls::UpstreamTlsContext {
    let instance = |name: &str| tls::CertificateProviderPluginInstance {
        instance_name: provider.to_string(),
        certificate_name: name.to_string(),
    };
    let mut sans: Vec<String> = targets.iter().map(|t| spiffe_of(snapshot, t)).collect();
    sans.dedup();
    // gRPC checks SANs with the older `match_subject_alt_names` (URI SANs
    // included); it does not read the typed form Envoy uses.
    #[allow(deprecated)]
    let validation = tls::CertificateValidationContext {
        ca_certificate_provider_instance: Some(instance("ROOTCA")),
        match_subject_alt_names: sans
            .into_iter()
            .map(|uri| matcher::StringMatcher {
                match_pattern: Some(matcher::string_matcher::MatchPattern::Exact(uri)),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    tls::UpstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            tls_certificate_provider_instance: Some(instance("DEFAULT")),
            validation_context_type: Some(
                tls::common_tls_context::ValidationContextType::ValidationContext(validation),
            ),
            ..Default::default()
        }),
        sni: targets[0].sni.clone(),
        ..Default::default()
    }
}

/// An EDS cluster over ADS for a resolver's targets.
fn grpc_cluster(
    snapshot: &ConnectProxySnapshot,
    name: &str,
    targets: &[&Target],
    provider: Option<&str>,
) -> cluster::Cluster {
    cluster::Cluster {
        lb_policy: cluster::cluster::LbPolicy::RoundRobin as i32,
        transport_socket: provider.map(|p| transport_socket(provider_tls(snapshot, targets, p))),
        ..eds_over_ads(name)
    }
}

/// The API listener gRPC asks for when dialling `xds:///<upstream>`.
fn api_listener(upstream: &UpstreamSnapshot) -> listener::Listener {
    let name = upstream.id();
    let manager = hcm::HttpConnectionManager {
        stat_prefix: format!("upstream.{name}"),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(
            crate::l7::chain_routes(&name, &upstream.chain),
        )),
        // The router must be the last (here: only) filter.
        http_filters: vec![hcm::HttpFilter {
            name: "envoy.filters.http.router".into(),
            config_type: Some(hcm::http_filter::ConfigType::TypedConfig(pack_any(
                router::Router::default(),
            ))),
            ..Default::default()
        }],
        ..Default::default()
    };
    listener::Listener {
        name,
        api_listener: Some(listener::ApiListener {
            api_listener: Some(pack_any(manager)),
        }),
        ..Default::default()
    }
}

/// Every resource a proxyless gRPC client of `snapshot` may ask for.
/// `provider` names the client's certificate provider (mTLS), if any.
pub fn generate(snapshot: &ConnectProxySnapshot, provider: Option<&str>) -> Resources {
    let mut out = Resources {
        proxyless: true,
        ..Default::default()
    };
    for upstream in &snapshot.upstreams {
        for node_id in resolver_nodes(&upstream.chain) {
            let targets = resolver_targets(upstream, &node_id);
            let Some(primary) = targets.first() else {
                continue;
            };
            let name = crate::resources::cluster_name(&upstream.chain, primary);
            if out.of(CLUSTER_TYPE).is_some_and(|c| c.contains_key(&name)) {
                continue;
            }
            out.add(
                CLUSTER_TYPE,
                name.clone(),
                grpc_cluster(snapshot, &name, &targets, provider),
            );
            let mut assignment = load_assignment(&name, upstream, &targets);
            // gRPC drops a priority without a locality or a locality weight.
            for (priority, locality) in assignment.endpoints.iter_mut().enumerate() {
                locality.locality = Some(core::Locality {
                    region: snapshot.datacenter.clone(),
                    zone: format!("priority-{priority}"),
                    ..Default::default()
                });
                locality.load_balancing_weight = Some(UInt32Value { value: 1 });
            }
            out.add(ENDPOINT_TYPE, name, assignment);
        }
        let listener = api_listener(upstream);
        out.add(LISTENER_TYPE, listener.name.clone(), listener);
    }
    out
}
