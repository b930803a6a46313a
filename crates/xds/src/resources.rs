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
}

impl Resources {
    fn add<T: prost::Name + prost::Message>(
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

fn socket_address(address: &str, port: u16) -> core::Address {
    core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: address.to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(port as u32)),
            ..Default::default()
        })),
    }
}

fn millis(ms: u64) -> PbDuration {
    PbDuration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// Parses Consul's `"5s"`-style durations from a compiled chain.
fn go_duration_ms(text: &str) -> Option<u64> {
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

fn typed_filter<T: prost::Name + prost::Message>(name: &str, config: T) -> listener::Filter {
    listener::Filter {
        name: name.to_string(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(pack_any(config))),
    }
}

fn transport_socket<T: prost::Name + prost::Message>(config: T) -> core::TransportSocket {
    core::TransportSocket {
        name: "tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(pack_any(
            config,
        ))),
    }
}

fn common_tls(snapshot: &ConnectProxySnapshot, san: Option<String>) -> tls::CommonTlsContext {
    let roots: String = snapshot
        .roots
        .iter()
        .map(|r| format!("{}\n", r.trim_end()))
        .collect();
    let validation = tls::CertificateValidationContext {
        trusted_ca: inline(&roots),
        match_typed_subject_alt_names: san
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
fn principal_for(source: &str) -> rbac::Principal {
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
    let filters = vec![
        typed_filter(
            "envoy.filters.network.rbac",
            network_rbac(&rules, snapshot.default_allow),
        ),
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
    ];
    listener::Listener {
        name: format!("public_listener:{address}:{port}"),
        address: Some(socket_address(&address, port)),
        traffic_direction: core::TrafficDirection::Inbound as i32,
        filter_chains: vec![listener::FilterChain {
            filters,
            transport_socket: Some(transport_socket(tls::DownstreamTlsContext {
                common_tls_context: Some(common_tls(snapshot, None)),
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

/// The chain's primary target and its failover targets, in priority order.
fn chain_targets(upstream: &UpstreamSnapshot) -> Vec<&Target> {
    let chain = &upstream.chain;
    let node = chain.nodes.get(&chain.start_node);
    let resolver = node.and_then(|n| n.get("Resolver"));
    let primary = resolver
        .and_then(|r| r.get("Target"))
        .and_then(Value::as_str)
        .and_then(|id| chain.targets.get(id));
    let mut out: Vec<&Target> = primary.into_iter().collect();
    if let Some(Value::Array(ids)) = resolver.and_then(|r| r.pointer("/Failover/Targets")) {
        for id in ids.iter().filter_map(Value::as_str) {
            if let Some(t) = chain.targets.get(id) {
                out.push(t);
            }
        }
    }
    if out.is_empty() {
        out.extend(chain.targets.values());
    }
    out
}

fn upstream_listener(upstream: &UpstreamSnapshot, cluster_name: &str) -> listener::Listener {
    let u = &upstream.upstream;
    let address = if u.local_bind_address.is_empty() {
        "127.0.0.1"
    } else {
        &u.local_bind_address
    };
    let port = u.local_bind_port;
    let chain = &upstream.chain;
    listener::Listener {
        name: format!("{}:{address}:{port}", upstream.id()),
        address: Some(socket_address(address, port)),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        filter_chains: vec![listener::FilterChain {
            filters: vec![typed_filter(
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
            )],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn upstream_cluster(
    snapshot: &ConnectProxySnapshot,
    upstream: &UpstreamSnapshot,
    target: &Target,
) -> cluster::Cluster {
    let timeout_ms = upstream
        .upstream
        .config
        .get("connect_timeout_ms")
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .or_else(|| go_duration_ms(&target.connect_timeout))
        .unwrap_or(5000);
    let spiffe = format!(
        "spiffe://{}/ns/{}/dc/{}/svc/{}",
        snapshot.trust_domain, target.namespace, target.datacenter, target.service
    );
    cluster::Cluster {
        name: target.name.clone(),
        alt_stat_name: target.name.clone(),
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
        connect_timeout: Some(millis(timeout_ms)),
        outlier_detection: Some(cluster::OutlierDetection::default()),
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(envoy_types::pb::envoy::r#type::v3::Percent {
                value: 0.0,
            }),
            ..Default::default()
        }),
        transport_socket: Some(transport_socket(tls::UpstreamTlsContext {
            common_tls_context: Some(common_tls(snapshot, Some(spiffe))),
            sni: target.sni.clone(),
            ..Default::default()
        })),
        ..Default::default()
    }
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

fn lb_endpoint(
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

fn load_assignment(
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

/// Generates every resource of a connect-proxy snapshot.
pub fn generate(snapshot: &ConnectProxySnapshot) -> Resources {
    let mut out = Resources::default();
    let public = public_listener(snapshot);
    out.add(LISTENER_TYPE, public.name.clone(), public);
    out.add(CLUSTER_TYPE, LOCAL_APP.into(), local_app_cluster(snapshot));
    for upstream in &snapshot.upstreams {
        if upstream.upstream.local_bind_port == 0 {
            continue;
        }
        let targets = chain_targets(upstream);
        let Some(primary) = targets.first() else {
            continue;
        };
        let cluster_name = primary.name.clone();
        let listener = upstream_listener(upstream, &cluster_name);
        out.add(LISTENER_TYPE, listener.name.clone(), listener);
        out.add(
            CLUSTER_TYPE,
            cluster_name.clone(),
            upstream_cluster(snapshot, upstream, primary),
        );
        out.add(
            ENDPOINT_TYPE,
            cluster_name.clone(),
            load_assignment(&cluster_name, upstream, &targets),
        );
    }
    out
}
