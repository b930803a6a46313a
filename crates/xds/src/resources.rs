//! A pure function: snapshot → Envoy v3 resources, named and shaped as
//! Consul generates them (so dashboards and Envoy configs carry over).
//!
//! Covered today: the public listener (mTLS with client certificates
//! required, network RBAC from intentions, `tcp_proxy` to `local_app`),
//! one TCP listener per upstream, the `local_app` static cluster, one EDS
//! cluster per upstream chain (mTLS origination with SNI and a SAN match
//! on the target's SPIFFE id), and load assignments with failover targets
//! as lower priorities.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::config::rbac::v3 as rbac;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3 as net_rbac;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp_proxy;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use envoy_types::pb::envoy::r#type::matcher::v3 as matcher;
use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration, UInt32Value};
use envoy_types::util::pack_any;
use legate_chain::compile::Target;
use legate_chain::intentions::{Action, Rule};
use legate_proxycfg::{ConnectProxySnapshot, EndpointHealth, UpstreamSnapshot};
use serde_json::Value;

/// `type_url` of listeners.
pub const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// `type_url` of clusters.
pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// `type_url` of route configurations.
pub const ROUTE_TYPE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
/// `type_url` of load assignments.
pub const ENDPOINT_TYPE: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// The order resources are sent in over ADS (clusters before their
/// endpoints, listeners before their routes).
pub const TYPE_ORDER: [&str; 4] = [CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE];

/// The name of the local application's cluster.
pub const LOCAL_APP: &str = "local_app";

/// Consul's overprovisioning factor for failover priorities: traffic moves
/// to the next priority only when nothing healthy is left.
pub const OVERPROVISIONING_FACTOR: u32 = 100_000;

/// Every resource of a snapshot, by type and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    /// type_url -> name -> resource.
    pub by_type: BTreeMap<&'static str, BTreeMap<String, Any>>,
    /// Shaped for gRPC's own xDS client (a Connect-native service): a
    /// listener it asks for is only answered once it exists, since gRPC
    /// reads a listener missing from a response as deleted.
    pub proxyless: bool,
}

impl Resources {
    pub(crate) fn add<T: prost::Name + prost::Message>(
        &mut self,
        type_url: &'static str,
        name: String,
        value: T,
    ) {
        self.by_type
            .entry(type_url)
            .or_default()
            .insert(name, pack_any(value));
    }

    /// The resources of one type.
    pub fn of(&self, type_url: &str) -> Option<&BTreeMap<String, Any>> {
        self.by_type.get(type_url)
    }
}

pub(crate) fn socket_address(address: &str, port: u16) -> core::Address {
    core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: address.to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(port as u32)),
            ..Default::default()
        })),
    }
}

/// A protobuf duration of `ms` milliseconds.
pub(crate) fn millis(ms: u64) -> PbDuration {
    PbDuration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// Parses Consul's `"5s"`-style durations from a compiled chain.
pub(crate) fn go_duration_ms(text: &str) -> Option<u64> {
    legate_types::duration::parse_go_duration(text)
        .ok()
        .map(|d| d.as_millis() as u64)
}

fn inline(text: &str) -> Option<core::DataSource> {
    Some(core::DataSource {
        specifier: Some(core::data_source::Specifier::InlineString(text.to_string())),
        ..Default::default()
    })
}

pub(crate) fn typed_filter<T: prost::Name + prost::Message>(
    name: &str,
    config: T,
) -> listener::Filter {
    listener::Filter {
        name: name.to_string(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(pack_any(config))),
    }
}

pub(crate) fn transport_socket<T: prost::Name + prost::Message>(
    config: T,
) -> core::TransportSocket {
    core::TransportSocket {
        name: "tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(pack_any(
            config,
        ))),
    }
}

pub(crate) fn common_tls(
    snapshot: &ConnectProxySnapshot,
    sans: Vec<String>,
) -> tls::CommonTlsContext {
    let roots: String = snapshot
        .roots
        .iter()
        .map(|r| format!("{}\n", r.trim_end()))
        .collect();
    let validation = tls::CertificateValidationContext {
        trusted_ca: inline(&roots),
        match_typed_subject_alt_names: sans
            .into_iter()
            .map(|uri| tls::SubjectAltNameMatcher {
                san_type: tls::subject_alt_name_matcher::SanType::Uri as i32,
                matcher: Some(matcher::StringMatcher {
                    match_pattern: Some(matcher::string_matcher::MatchPattern::Exact(uri)),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    tls::CommonTlsContext {
        tls_params: Some(tls::TlsParameters::default()),
        tls_certificates: vec![tls::TlsCertificate {
            certificate_chain: inline(&snapshot.leaf_cert),
            private_key: inline(&snapshot.leaf_key),
            ..Default::default()
        }],
        validation_context_type: Some(
            tls::common_tls_context::ValidationContextType::ValidationContext(validation),
        ),
        ..Default::default()
    }
}

/// A principal matching the SPIFFE ids of `source` (`*`: any service).
pub(crate) fn principal_for(source: &str) -> rbac::Principal {
    let name = if source == "*" {
        "[^/]+".to_string()
    } else {
        regex_escape(source)
    };
    let pattern = format!("^spiffe://[^/]+/ns/default/dc/[^/]+/svc/{name}$");
    rbac::Principal {
        identifier: Some(rbac::principal::Identifier::Authenticated(
            rbac::principal::Authenticated {
                principal_name: Some(matcher::StringMatcher {
                    match_pattern: Some(matcher::string_matcher::MatchPattern::SafeRegex(
                        matcher::RegexMatcher {
                            regex: pattern,
                            ..Default::default()
                        },
                    )),
                    ..Default::default()
                }),
            },
        )),
    }
}

/// An exact string matcher.
pub(crate) fn string_exact(text: &str) -> matcher::StringMatcher {
    matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::Exact(text.into())),
        ..Default::default()
    }
}

/// A (RE2) regex string matcher.
pub(crate) fn string_regex(regex: &str) -> matcher::StringMatcher {
    matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::SafeRegex(
            matcher::RegexMatcher {
                regex: regex.into(),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Encodes RBAC rules with their policies in name order. prost encodes
/// map fields in hash order, which would change the bytes (and so the
/// resource version) of identical configs; `stat_prefix_tag` is the outer
/// message's stat prefix field (3 for the network filter), when set.
pub(crate) fn rbac_any(
    type_url: &str,
    rules: Option<rbac::Rbac>,
    stat_prefix: Option<(u32, &str)>,
) -> Any {
    use prost::encoding::{btree_map, encode_key, encode_varint, int32, message, string, WireType};
    let mut outer = Vec::new();
    if let Some(rules) = rules {
        let mut inner = Vec::new();
        if rules.action != 0 {
            int32::encode(1, &rules.action, &mut inner);
        }
        let sorted: std::collections::BTreeMap<String, rbac::Policy> =
            rules.policies.into_iter().collect();
        btree_map::encode(
            string::encode,
            string::encoded_len,
            message::encode,
            message::encoded_len,
            2,
            &sorted,
            &mut inner,
        );
        encode_key(1, WireType::LengthDelimited, &mut outer);
        encode_varint(inner.len() as u64, &mut outer);
        outer.extend(inner);
    }
    if let Some((tag, prefix)) = stat_prefix.filter(|(_, p)| !p.is_empty()) {
        string::encode(tag, &prefix.to_string(), &mut outer);
    }
    Any {
        type_url: type_url.into(),
        value: outer,
    }
}

/// A listener filter from an already packed config.
pub(crate) fn filter_any(name: &str, config: Any) -> listener::Filter {
    listener::Filter {
        name: name.to_string(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(config)),
    }
}

/// The network RBAC filter for L4 traffic, as Consul builds it: with a
/// default of allow, an action-DENY policy per deny intention (L7
/// intentions count as deny); with a default of deny, an action-ALLOW
/// policy per allow intention. A wildcard intention excludes the more
/// precise sources whose own intention decided the other way.
pub fn network_rbac(rules: &[Rule], default_allow: bool) -> net_rbac::Rbac {
    let mut sorted: Vec<Rule> = rules.to_vec();
    legate_chain::intentions::sort_rules(&mut sorted);
    // The first (most precise) intention per source decides for it.
    let mut seen = std::collections::BTreeSet::new();
    sorted.retain(|r| seen.insert(r.source.clone()));
    let allows = |r: &Rule| !r.is_l7() && r.action == Some(Action::Allow);
    let (policy_action, wanted_allow) = if default_allow {
        (rbac::rbac::Action::Deny, false)
    } else {
        (rbac::rbac::Action::Allow, true)
    };
    let mut policies = std::collections::HashMap::new();
    for (i, rule) in sorted.iter().enumerate() {
        if allows(rule) != wanted_allow {
            continue;
        }
        let mut principal = principal_for(&rule.source);
        if rule.source == "*" {
            let exceptions: Vec<rbac::Principal> = sorted[..i]
                .iter()
                .filter(|r| r.source != "*" && allows(r) != wanted_allow)
                .map(|r| principal_for(&r.source))
                .collect();
            if !exceptions.is_empty() {
                let mut ids = vec![principal];
                for e in exceptions {
                    ids.push(rbac::Principal {
                        identifier: Some(rbac::principal::Identifier::NotId(Box::new(e))),
                    });
                }
                principal = rbac::Principal {
                    identifier: Some(rbac::principal::Identifier::AndIds(rbac::principal::Set {
                        ids,
                    })),
                };
            }
        }
        policies.insert(
            format!("consul-intentions-layer4-{}", policies.len()),
            rbac::Policy {
                permissions: vec![rbac::Permission {
                    rule: Some(rbac::permission::Rule::Any(true)),
                }],
                principals: vec![principal],
                ..Default::default()
            },
        );
    }
    net_rbac::Rbac {
        stat_prefix: "connect_authz".into(),
        rules: Some(rbac::Rbac {
            action: policy_action as i32,
            policies,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn l4_public_filters(rules: &[Rule], default_allow: bool) -> Vec<listener::Filter> {
    vec![
        {
            let config = network_rbac(rules, default_allow);
            filter_any(
                "envoy.filters.network.rbac",
                rbac_any(
                    &<net_rbac::Rbac as prost::Name>::type_url(),
                    config.rules,
                    Some((3, &config.stat_prefix)),
                ),
            )
        },
        typed_filter(
            "envoy.filters.network.tcp_proxy",
            tcp_proxy::TcpProxy {
                stat_prefix: "public_listener".into(),
                cluster_specifier: Some(tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(
                    LOCAL_APP.into(),
                )),
                ..Default::default()
            },
        ),
    ]
}

fn public_listener(snapshot: &ConnectProxySnapshot) -> listener::Listener {
    let address = snapshot
        .config_str("bind_address")
        .map(String::from)
        .unwrap_or_else(|| {
            if snapshot.address.is_empty() {
                "0.0.0.0".into()
            } else {
                snapshot.address.clone()
            }
        });
    let port = snapshot
        .config_u64("bind_port")
        .map(|p| p as u16)
        .unwrap_or(snapshot.port);
    let rules: Vec<Rule> = snapshot
        .intentions
        .iter()
        .map(legate_chain::intentions::rule_of)
        .filter(|r| r.destination == "*" || r.destination == snapshot.destination_service)
        .collect();
    let filters = if crate::l7::is_http(&snapshot.protocol) {
        let manager = crate::l7::connection_manager(
            "public_listener",
            &snapshot.protocol,
            hcm::http_connection_manager::RouteSpecifier::RouteConfig(crate::l7::public_routes(
                snapshot.config_u64("local_request_timeout_ms"),
            )),
            vec![crate::l7::rbac_filter(&rules, snapshot.default_allow)],
            true,
        );
        vec![typed_filter(
            "envoy.filters.network.http_connection_manager",
            manager,
        )]
    } else {
        l4_public_filters(&rules, snapshot.default_allow)
    };
    listener::Listener {
        name: format!("public_listener:{address}:{port}"),

        address: Some(socket_address(&address, port)),
        traffic_direction: core::TrafficDirection::Inbound as i32,
        filter_chains: vec![listener::FilterChain {
            filters,
            transport_socket: Some(transport_socket(tls::DownstreamTlsContext {
                common_tls_context: Some(common_tls(snapshot, Vec::new())),
                require_client_certificate: Some(envoy_types::pb::google::protobuf::BoolValue {
                    value: true,
                }),
                ..Default::default()
            })),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn tcp_filter(chain: &legate_chain::CompiledChain, cluster_name: &str) -> listener::Filter {
    typed_filter(
        "envoy.filters.network.tcp_proxy",
        tcp_proxy::TcpProxy {
            stat_prefix: format!(
                "upstream.{}.{}.{}.{}",
                chain.service_name, chain.namespace, chain.partition, chain.datacenter
            ),
            cluster_specifier: Some(tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(
                cluster_name.to_string(),
            )),
            ..Default::default()
        },
    )
}

/// An outbound listener `<id>:<ip>:<port>` on an upstream's local bind
/// address, running `filter`.
pub(crate) fn upstream_listener(
    u: &legate_types::Upstream,
    id: &str,
    filter: listener::Filter,
) -> listener::Listener {
    let address = if u.local_bind_address.is_empty() {
        "127.0.0.1"
    } else {
        &u.local_bind_address
    };
    let port = u.local_bind_port;
    listener::Listener {
        name: format!("{id}:{address}:{port}"),
        address: Some(socket_address(address, port)),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        filter_chains: vec![listener::FilterChain {
            filters: vec![filter],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The Envoy cluster of a chain's target: its name, prefixed by the
/// chain's customization hash when overrides shaped the chain (Consul's
/// `CustomizeClusterName`: `<hash>~<name>`).
pub fn cluster_name(chain: &legate_chain::CompiledChain, target: &Target) -> String {
    if chain.customization_hash.is_empty() {
        target.name.clone()
    } else {
        format!("{}~{}", chain.customization_hash, target.name)
    }
}

pub(crate) fn spiffe_of(snapshot: &ConnectProxySnapshot, target: &Target) -> String {
    legate_types::connect::spiffe_service_uri(
        &snapshot.trust_domain,
        &target.namespace,
        &target.datacenter,
        &target.service,
    )
}

/// An upstream's `connect_timeout_ms` (a number or a numeric string).
pub(crate) fn connect_timeout_ms(upstream: &legate_types::Upstream) -> Option<u64> {
    let value = upstream.config.get("connect_timeout_ms")?;
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

/// A cluster named `name` whose endpoints come over ADS (EDS).
pub(crate) fn eds_over_ads(name: &str) -> cluster::Cluster {
    cluster::Cluster {
        name: name.to_string(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig {
            eds_config: Some(core::ConfigSource {
                resource_api_version: core::ApiVersion::V3 as i32,
                config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
                    core::AggregatedConfigSource {},
                )),
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        ..Default::default()
    }
}

/// An EDS cluster `name` for a resolver's targets (primary first); its
/// certificate check accepts the SPIFFE id of every target it may reach.
fn upstream_cluster(
    snapshot: &ConnectProxySnapshot,
    upstream: &UpstreamSnapshot,
    name: &str,
    targets: &[&Target],
) -> cluster::Cluster {
    let target = targets[0];
    let timeout_ms = connect_timeout_ms(&upstream.upstream)
        .or_else(|| go_duration_ms(&target.connect_timeout))
        .unwrap_or(5000);
    let mut sans: Vec<String> = targets.iter().map(|t| spiffe_of(snapshot, t)).collect();
    sans.dedup();
    cluster::Cluster {
        alt_stat_name: name.to_string(),
        connect_timeout: Some(millis(timeout_ms)),
        outlier_detection: Some(cluster::OutlierDetection::default()),
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(envoy_types::pb::envoy::r#type::v3::Percent {
                value: 0.0,
            }),
            ..Default::default()
        }),
        transport_socket: Some(transport_socket(tls::UpstreamTlsContext {
            common_tls_context: Some(common_tls(snapshot, sans)),
            sni: target.sni.clone(),
            ..Default::default()
        })),
        ..eds_over_ads(name)
    }
}

/// Failover that crosses datacenters through mesh gateways cannot use
/// priorities: gateways route by SNI, so each target must be dialled with
/// its own. The first target with a healthy endpoint stands alone under
/// the primary's cluster name, with its SNI and endpoints (Consul's swap,
/// #6161, #9811); with none healthy, the primary.
fn gateway_failover<'a>(
    snapshot: &ConnectProxySnapshot,
    upstream: &UpstreamSnapshot,
    targets: Vec<&'a Target>,
) -> Vec<&'a Target> {
    let crosses = targets
        .iter()
        .any(|t| legate_proxycfg::gateway::through_gateways(t, &snapshot.datacenter));
    if targets.len() < 2 || !crosses {
        return targets;
    }
    let healthy = |t: &Target| {
        upstream
            .endpoints
            .get(&t.id)
            .is_some_and(|list| list.iter().any(|e| e.health != EndpointHealth::Critical))
    };
    let chosen = targets
        .iter()
        .copied()
        .find(|t| healthy(t))
        .unwrap_or(targets[0]);
    vec![chosen]
}

fn local_app_cluster(snapshot: &ConnectProxySnapshot) -> cluster::Cluster {
    let timeout = snapshot
        .config_u64("local_connect_timeout_ms")
        .unwrap_or(5000);
    cluster::Cluster {
        name: LOCAL_APP.into(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Static as i32,
        )),
        connect_timeout: Some(millis(timeout)),
        load_assignment: Some(endpoint::ClusterLoadAssignment {
            cluster_name: LOCAL_APP.into(),
            endpoints: vec![endpoint::LocalityLbEndpoints {
                lb_endpoints: vec![lb_endpoint(
                    &snapshot.local_service_address,
                    snapshot.local_service_port,
                    core::HealthStatus::Unknown,
                    1,
                )],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn lb_endpoint(
    address: &str,
    port: u16,
    health: core::HealthStatus,
    weight: u32,
) -> endpoint::LbEndpoint {
    endpoint::LbEndpoint {
        host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
            endpoint::Endpoint {
                address: Some(socket_address(address, port)),
                ..Default::default()
            },
        )),
        health_status: health as i32,
        load_balancing_weight: Some(UInt32Value {
            value: weight.clamp(1, 128),
        }),
        ..Default::default()
    }
}

pub(crate) fn load_assignment(
    cluster_name: &str,
    upstream: &UpstreamSnapshot,
    targets: &[&Target],
) -> endpoint::ClusterLoadAssignment {
    let mut localities = Vec::new();
    for (priority, target) in targets.iter().enumerate() {
        let only_passing = target
            .subset
            .get("OnlyPassing")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let endpoints = upstream
            .endpoints
            .get(&target.id)
            .cloned()
            .unwrap_or_default();
        let lb_endpoints = endpoints
            .iter()
            .map(|e| {
                let healthy = match e.health {
                    EndpointHealth::Passing => true,
                    EndpointHealth::Warning => !only_passing,
                    EndpointHealth::Critical => false,
                };
                let health = if healthy {
                    core::HealthStatus::Healthy
                } else {
                    core::HealthStatus::Unhealthy
                };
                lb_endpoint(&e.address, e.port, health, e.weight)
            })
            .collect();
        localities.push(endpoint::LocalityLbEndpoints {
            lb_endpoints,
            priority: priority as u32,
            ..Default::default()
        });
    }
    endpoint::ClusterLoadAssignment {
        cluster_name: cluster_name.to_string(),
        endpoints: localities,
        policy: Some(endpoint::cluster_load_assignment::Policy {
            overprovisioning_factor: Some(UInt32Value {
                value: OVERPROVISIONING_FACTOR,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Resolver node ids of a chain, in node order.
pub(crate) fn resolver_nodes(chain: &legate_chain::CompiledChain) -> Vec<String> {
    chain
        .nodes
        .iter()
        .filter(|(_, n)| n.get("Type").and_then(Value::as_str) == Some("resolver"))
        .map(|(id, _)| id.clone())
        .collect()
}

/// A resolver node's target and failover targets, in priority order.
pub(crate) fn resolver_targets<'a>(
    upstream: &'a UpstreamSnapshot,
    node_id: &str,
) -> Vec<&'a Target> {
    let chain = &upstream.chain;
    let resolver = chain.nodes.get(node_id).and_then(|n| n.get("Resolver"));
    let mut out: Vec<&Target> = resolver
        .and_then(|r| r.get("Target"))
        .and_then(Value::as_str)
        .and_then(|id| chain.targets.get(id).map(|t| &**t))
        .into_iter()
        .collect();
    if let Some(Value::Array(ids)) = resolver.and_then(|r| r.pointer("/Failover/Targets")) {
        for id in ids.iter().filter_map(Value::as_str) {
            if let Some(t) = chain.targets.get(id) {
                out.push(t);
            }
        }
    }
    out
}

/// Sets HTTP/2 towards a cluster's endpoints (http2 and grpc).
fn with_http2(mut c: cluster::Cluster, protocol: &str) -> cluster::Cluster {
    if matches!(protocol, "http2" | "grpc") {
        use envoy_types::pb::envoy::extensions::upstreams::http::v3 as http_options;
        let options = http_options::HttpProtocolOptions {
            upstream_protocol_options: Some(
                http_options::http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
                    http_options::http_protocol_options::ExplicitHttpConfig {
                        protocol_config: Some(
                            http_options::http_protocol_options::explicit_http_config::ProtocolConfig::Http2ProtocolOptions(
                                core::Http2ProtocolOptions::default(),
                            ),
                        ),
                    },
                ),
            ),
            ..Default::default()
        };
        c.typed_extension_protocol_options.insert(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".into(),
            pack_any(options),
        );
    }
    c
}

/// An escape hatch (`envoy_*_json`): the operator's own resource, parsed
/// strictly as Envoy's type. A bad one is logged and the generated
/// resource is kept, as Consul does.
fn escape_hatch<T: prost::Message + prost::Name + Default>(
    config: &serde_json::Map<String, Value>,
    key: &str,
    proxy: &str,
) -> Option<T> {
    let text = config.get(key)?.as_str()?;
    let parsed = serde_json::from_str::<Value>(text)
        .map_err(|e| e.to_string())
        .and_then(|json| crate::json::json_to_any(&T::type_url(), &json))
        .and_then(|any| {
            if any.type_url != T::type_url() {
                return Err(format!(
                    "expected a {}, got {}",
                    T::full_name(),
                    any.type_url
                ));
            }
            T::decode(any.value.as_slice()).map_err(|e| e.to_string())
        });
    match parsed {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::warn!(proxy = %proxy, key = %key, error = %e, "ignoring an invalid escape hatch; using the generated resource");
            None
        }
    }
}

/// Overrides from `envoy_public_listener_json`: the operator's listener
/// under our name, with our TLS on every filter chain that has none.
fn public_listener_override(
    snapshot: &ConnectProxySnapshot,
    generated: &listener::Listener,
) -> Option<listener::Listener> {
    let mut custom: listener::Listener = escape_hatch(
        &snapshot.config,
        "envoy_public_listener_json",
        &snapshot.proxy_id,
    )?;
    custom.name = generated.name.clone();
    let tls = generated
        .filter_chains
        .first()
        .and_then(|c| c.transport_socket.clone());
    for chain in &mut custom.filter_chains {
        if chain.transport_socket.is_none() {
            chain.transport_socket = tls.clone();
        }
    }
    Some(custom)
}

/// An upstream's cluster: its `envoy_cluster_json` when set and valid
/// (keeping the generated name, and its mTLS when it has none), else
/// `generated`.
pub(crate) fn upstream_cluster_override(
    upstream: &legate_types::Upstream,
    snapshot: &ConnectProxySnapshot,
    generated: cluster::Cluster,
) -> cluster::Cluster {
    escape_hatch::<cluster::Cluster>(&upstream.config, "envoy_cluster_json", &snapshot.proxy_id)
        .map(|mut c| {
            c.name = generated.name.clone();
            if c.transport_socket.is_none() {
                c.transport_socket = generated.transport_socket.clone();
            }
            c
        })
        .unwrap_or(generated)
}

/// An upstream's listener: its `envoy_listener_json` when set and valid
/// (keeping the generated name), else `generated`.
pub(crate) fn upstream_listener_override(
    upstream: &legate_types::Upstream,
    snapshot: &ConnectProxySnapshot,
    generated: listener::Listener,
) -> listener::Listener {
    escape_hatch::<listener::Listener>(&upstream.config, "envoy_listener_json", &snapshot.proxy_id)
        .map(|mut l| {
            l.name = generated.name.clone();
            l
        })
        .unwrap_or(generated)
}

/// Generates every resource of a connect-proxy (or mesh gateway) snapshot.
pub fn generate(snapshot: &ConnectProxySnapshot) -> Resources {
    if let Some(gateway) = &snapshot.mesh_gateway {
        return crate::mesh_gateway::generate(snapshot, gateway);
    }
    let mut out = Resources::default();
    let mut public = public_listener(snapshot);
    if let Some(custom) = public_listener_override(snapshot, &public) {
        public = custom;
    }
    out.add(LISTENER_TYPE, public.name.clone(), public);
    let local_app = escape_hatch::<cluster::Cluster>(
        &snapshot.config,
        "envoy_local_cluster_json",
        &snapshot.proxy_id,
    )
    .map(|mut c| {
        c.name = LOCAL_APP.into();
        c
    })
    .unwrap_or_else(|| with_http2(local_app_cluster(snapshot), &snapshot.protocol));
    out.add(CLUSTER_TYPE, LOCAL_APP.into(), local_app);
    for upstream in &snapshot.upstreams {
        if upstream.upstream.local_bind_port == 0 {
            continue;
        }
        let chain = &upstream.chain;
        // One cluster (with failover priorities) per resolver the chain reaches.
        let mut primary_cluster = None;
        for node_id in resolver_nodes(chain) {
            let targets = resolver_targets(upstream, &node_id);
            let Some(primary) = targets.first() else {
                continue;
            };
            let name = cluster_name(chain, primary);
            if node_id == chain.start_node {
                primary_cluster = Some(name.clone());
            }
            if out.of(CLUSTER_TYPE).is_some_and(|c| c.contains_key(&name)) {
                continue;
            }
            let targets = gateway_failover(snapshot, upstream, targets);
            let generated = with_http2(
                upstream_cluster(snapshot, upstream, &name, &targets),
                &chain.protocol,
            );
            let cluster = upstream_cluster_override(&upstream.upstream, snapshot, generated);
            out.add(CLUSTER_TYPE, name.clone(), cluster);
            out.add(
                ENDPOINT_TYPE,
                name.clone(),
                load_assignment(&name, upstream, &targets),
            );
        }
        let listener = if crate::l7::is_http(&chain.protocol) {
            let id = upstream.id();
            out.add(ROUTE_TYPE, id.clone(), crate::l7::chain_routes(&id, chain));
            let manager = crate::l7::connection_manager(
                &format!(
                    "upstream.{}.{}.{}.{}",
                    chain.service_name, chain.namespace, chain.partition, chain.datacenter
                ),
                &chain.protocol,
                crate::l7::rds(&id),
                Vec::new(),
                false,
            );
            upstream_listener(
                &upstream.upstream,
                &id,
                typed_filter("envoy.filters.network.http_connection_manager", manager),
            )
        } else {
            let Some(cluster_name) = primary_cluster else {
                continue;
            };
            upstream_listener(
                &upstream.upstream,
                &upstream.id(),
                tcp_filter(chain, &cluster_name),
            )
        };
        let listener = upstream_listener_override(&upstream.upstream, snapshot, listener);
        out.add(LISTENER_TYPE, listener.name.clone(), listener);
    }
    for upstream in &snapshot.query_upstreams {
        crate::prepared_query::add_upstream(&mut out, snapshot, upstream);
    }
    out
}
