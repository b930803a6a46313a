//! L7 (http, http2, grpc) pieces: the HTTP connection manager for public
//! and upstream listeners, routes from a compiled chain (router matches,
//! splitter weights, timeouts and retries), and HTTP RBAC from intentions
//! with L7 permissions (first matching permission terminal, unmatched
//! requests get the default, as Consul's intentions).

use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::rbac::v3 as rbac;
use envoy_types::pb::envoy::config::route::v3 as route;
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as http_rbac;
use envoy_types::pb::envoy::extensions::filters::http::router::v3 as router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use envoy_types::pb::envoy::r#type::matcher::v3 as matcher;
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use envoy_types::util::pack_any;
use legate_chain::entries::HeaderMatch;
use legate_chain::entries_more::Permission;
use legate_chain::intentions::{Action, Rule};
use legate_chain::CompiledChain;
use serde_json::Value;

use crate::resources::{millis, principal_for, string_exact, string_regex};

/// Whether a protocol is HTTP-family (gets L7 config).
pub fn is_http(protocol: &str) -> bool {
    matches!(protocol, "http" | "http2" | "grpc")
}

fn http_filter<T: prost::Name + prost::Message>(name: &str, config: T) -> hcm::HttpFilter {
    hcm::HttpFilter {
        name: name.into(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(pack_any(config))),
        ..Default::default()
    }
}

fn router_filter() -> hcm::HttpFilter {
    http_filter("envoy.filters.http.router", router::Router::default())
}

/// An HTTP connection manager with the given routes and filters.
pub fn connection_manager(
    stat_prefix: &str,
    protocol: &str,
    routes: hcm::http_connection_manager::RouteSpecifier,
    mut filters: Vec<hcm::HttpFilter>,
    public: bool,
) -> hcm::HttpConnectionManager {
    filters.push(router_filter());
    let mut manager = hcm::HttpConnectionManager {
        stat_prefix: stat_prefix.into(),
        codec_type: hcm::http_connection_manager::CodecType::Auto as i32,
        route_specifier: Some(routes),
        http_filters: filters,
        ..Default::default()
    };
    if matches!(protocol, "http2" | "grpc") {
        manager.http2_protocol_options = Some(core::Http2ProtocolOptions::default());
    }
    if public {
        manager.forward_client_cert_details =
            hcm::http_connection_manager::ForwardClientCertDetails::AppendForward as i32;
        manager.set_current_client_cert_details =
            Some(hcm::http_connection_manager::SetCurrentClientCertDetails {
                subject: Some(BoolValue { value: true }),
                cert: true,
                chain: true,
                dns: true,
                uri: true,
                ..Default::default()
            });
    }
    manager
}

/// The public listener's routes: everything to `local_app`.
pub fn public_routes(local_request_timeout_ms: Option<u64>) -> route::RouteConfiguration {
    route::RouteConfiguration {
        name: "public_listener".into(),
        virtual_hosts: vec![route::VirtualHost {
            name: "public_listener".into(),
            domains: vec!["*".into()],
            routes: vec![route::Route {
                r#match: Some(prefix_match("/")),
                action: Some(route::route::Action::Route(route::RouteAction {
                    cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(
                        crate::resources::LOCAL_APP.into(),
                    )),
                    timeout: local_request_timeout_ms.map(millis),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn prefix_match(prefix: &str) -> route::RouteMatch {
    route::RouteMatch {
        path_specifier: Some(route::route_match::PathSpecifier::Prefix(prefix.into())),
        ..Default::default()
    }
}

fn header_matcher(h: &HeaderMatch) -> route::HeaderMatcher {
    let string = |pattern| matcher::StringMatcher {
        match_pattern: Some(pattern),
        ignore_case: h.ignore_case,
    };
    use matcher::string_matcher::MatchPattern as P;
    let specifier = if h.present {
        route::header_matcher::HeaderMatchSpecifier::PresentMatch(true)
    } else if !h.exact.is_empty() {
        route::header_matcher::HeaderMatchSpecifier::StringMatch(string(P::Exact(h.exact.clone())))
    } else if !h.prefix.is_empty() {
        route::header_matcher::HeaderMatchSpecifier::StringMatch(string(P::Prefix(
            h.prefix.clone(),
        )))
    } else if !h.suffix.is_empty() {
        route::header_matcher::HeaderMatchSpecifier::StringMatch(string(P::Suffix(
            h.suffix.clone(),
        )))
    } else if !h.contains.is_empty() {
        route::header_matcher::HeaderMatchSpecifier::StringMatch(string(P::Contains(
            h.contains.clone(),
        )))
    } else {
        route::header_matcher::HeaderMatchSpecifier::StringMatch(string_regex(&h.regex))
    };
    route::HeaderMatcher {
        name: h.name.clone(),
        invert_match: h.invert,
        header_match_specifier: Some(specifier),
        ..Default::default()
    }
}

fn methods_matcher(methods: &[String]) -> Option<route::HeaderMatcher> {
    if methods.is_empty() {
        return None;
    }
    let regex = methods.join("|");
    Some(route::HeaderMatcher {
        name: ":method".into(),
        header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(
            string_regex(&regex),
        )),
        ..Default::default()
    })
}

/// The RBAC permission of one L7 permission's HTTP match.
fn permission_of(p: &Permission) -> rbac::Permission {
    let mut rules = Vec::new();
    if let Some(http) = &p.http {
        use matcher::string_matcher::MatchPattern as P;
        let path = if !http.path_exact.is_empty() {
            Some(P::Exact(http.path_exact.clone()))
        } else if !http.path_prefix.is_empty() {
            Some(P::Prefix(http.path_prefix.clone()))
        } else if !http.path_regex.is_empty() {
            string_regex(&http.path_regex).match_pattern
        } else {
            None
        };
        if let Some(pattern) = path {
            rules.push(rbac::Permission {
                rule: Some(rbac::permission::Rule::UrlPath(matcher::PathMatcher {
                    rule: Some(matcher::path_matcher::Rule::Path(matcher::StringMatcher {
                        match_pattern: Some(pattern),
                        ..Default::default()
                    })),
                })),
            });
        }
        for h in &http.header {
            rules.push(rbac::Permission {
                rule: Some(rbac::permission::Rule::Header(header_matcher(h))),
            });
        }
        if let Some(m) = methods_matcher(&http.methods) {
            rules.push(rbac::Permission {
                rule: Some(rbac::permission::Rule::Header(m)),
            });
        }
    }
    match rules.len() {
        0 => rbac::Permission {
            rule: Some(rbac::permission::Rule::Any(true)),
        },
        1 => rules.remove(0),
        _ => rbac::Permission {
            rule: Some(rbac::permission::Rule::AndRules(rbac::permission::Set {
                rules,
            })),
        },
    }
}

fn not(p: rbac::Permission) -> rbac::Permission {
    rbac::Permission {
        rule: Some(rbac::permission::Rule::NotRule(Box::new(p))),
    }
}

/// HTTP RBAC from intentions: with a default of allow, DENY policies; with
/// a default of deny, ALLOW policies. An L7 intention's i-th permission
/// applies only where no earlier one matched (first match is terminal).
pub fn http_rbac(rules: &[Rule], default_allow: bool) -> http_rbac::Rbac {
    let mut sorted: Vec<Rule> = rules.to_vec();
    legate_chain::intentions::sort_rules(&mut sorted);
    let mut seen = std::collections::BTreeSet::new();
    sorted.retain(|r| seen.insert(r.source.clone()));
    let (policy_action, wanted) = if default_allow {
        (rbac::rbac::Action::Deny, Action::Deny)
    } else {
        (rbac::rbac::Action::Allow, Action::Allow)
    };
    let mut policies = std::collections::HashMap::new();
    for (i, rule) in sorted.iter().enumerate() {
        let mut principal = principal_for(&rule.source);
        if rule.source == "*" {
            // More precise sources decided by their own intentions.
            let exceptions: Vec<rbac::Principal> = sorted[..i]
                .iter()
                .filter(|r| r.source != "*")
                .map(|r| principal_for(&r.source))
                .collect();
            if !exceptions.is_empty() {
                let mut ids = vec![principal];
                ids.extend(exceptions.into_iter().map(|e| rbac::Principal {
                    identifier: Some(rbac::principal::Identifier::NotId(Box::new(e))),
                }));
                principal = rbac::Principal {
                    identifier: Some(rbac::principal::Identifier::AndIds(rbac::principal::Set {
                        ids,
                    })),
                };
            }
        }
        let permissions: Vec<rbac::Permission> = if rule.is_l7() {
            let mut out = Vec::new();
            for (j, p) in rule.permissions.iter().enumerate() {
                if Action::parse(&p.action) != Some(wanted) {
                    continue;
                }
                let mut all = vec![permission_of(p)];
                all.extend(rule.permissions[..j].iter().map(|q| not(permission_of(q))));
                out.push(if all.len() == 1 {
                    all.remove(0)
                } else {
                    rbac::Permission {
                        rule: Some(rbac::permission::Rule::AndRules(rbac::permission::Set {
                            rules: all,
                        })),
                    }
                });
            }
            out
        } else if rule.action == Some(wanted) {
            vec![rbac::Permission {
                rule: Some(rbac::permission::Rule::Any(true)),
            }]
        } else {
            Vec::new()
        };
        if permissions.is_empty() {
            continue;
        }
        policies.insert(
            format!("consul-intentions-layer7-{}", policies.len()),
            rbac::Policy {
                permissions,
                principals: vec![principal],
                ..Default::default()
            },
        );
    }
    http_rbac::Rbac {
        rules: Some(rbac::Rbac {
            action: policy_action as i32,
            policies,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The HTTP RBAC filter for the public listener (policies encoded in name
/// order, so identical configs keep identical versions).
pub fn rbac_filter(rules: &[Rule], default_allow: bool) -> hcm::HttpFilter {
    let config = http_rbac(rules, default_allow);
    hcm::HttpFilter {
        name: "envoy.filters.http.rbac".into(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(
            crate::resources::rbac_any(
                &<http_rbac::Rbac as prost::Name>::type_url(),
                config.rules,
                None,
            ),
        )),
        ..Default::default()
    }
}

/// What a chain node routes to: one cluster, or weighted clusters.
fn action_for(
    chain: &CompiledChain,
    node_id: &str,
    timeout_ms: Option<u64>,
) -> route::route::Action {
    let node = chain.nodes.get(node_id);
    let specifier = match node.and_then(|n| n.get("Type")).and_then(Value::as_str) {
        Some("splitter") => {
            let splits = node
                .and_then(|n| n.get("Splits"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let clusters = splits
                .iter()
                .filter_map(|split| {
                    let next = split.get("NextNode")?.as_str()?;
                    let weight = split.get("Weight")?.as_f64()?;
                    Some(route::weighted_cluster::ClusterWeight {
                        name: resolver_cluster(chain, next)?,
                        weight: Some(UInt32Value {
                            value: (weight * 100.0).round() as u32,
                        }),
                        ..Default::default()
                    })
                })
                .filter(|c| c.weight.as_ref().is_some_and(|w| w.value > 0))
                .collect();
            route::route_action::ClusterSpecifier::WeightedClusters(route::WeightedCluster {
                clusters,
                ..Default::default()
            })
        }
        _ => route::route_action::ClusterSpecifier::Cluster(
            resolver_cluster(chain, node_id).unwrap_or_default(),
        ),
    };
    route::route::Action::Route(route::RouteAction {
        cluster_specifier: Some(specifier),
        timeout: timeout_ms.map(millis),
        ..Default::default()
    })
}

/// The cluster a resolver node sends to (its primary target's name).
pub fn resolver_cluster(chain: &CompiledChain, node_id: &str) -> Option<String> {
    let target = chain
        .nodes
        .get(node_id)?
        .pointer("/Resolver/Target")?
        .as_str()?;
    chain
        .targets
        .get(target)
        .map(|t| crate::resources::cluster_name(chain, t))
}

fn route_match(definition: &Value) -> route::RouteMatch {
    let http = definition.pointer("/Match/HTTP");
    let get = |k: &str| {
        http.and_then(|h| h.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let path_specifier = if !get("PathExact").is_empty() {
        route::route_match::PathSpecifier::Path(get("PathExact").into())
    } else if !get("PathRegex").is_empty() {
        route::route_match::PathSpecifier::SafeRegex(matcher::RegexMatcher {
            regex: get("PathRegex").into(),
            ..Default::default()
        })
    } else if !get("PathPrefix").is_empty() {
        route::route_match::PathSpecifier::Prefix(get("PathPrefix").into())
    } else {
        route::route_match::PathSpecifier::Prefix("/".into())
    };
    let mut headers: Vec<route::HeaderMatcher> = http
        .and_then(|h| h.get("Header"))
        .and_then(|h| serde_json::from_value::<Vec<HeaderMatch>>(h.clone()).ok())
        .unwrap_or_default()
        .iter()
        .map(header_matcher)
        .collect();
    let methods: Vec<String> = http
        .and_then(|h| h.get("Methods"))
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    headers.extend(methods_matcher(&methods));
    let query_parameters = http
        .and_then(|h| h.get("QueryParam"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|q| {
            let name = q
                .get("Name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let spec = if q.get("Present").and_then(Value::as_bool).unwrap_or(false) {
                route::query_parameter_matcher::QueryParameterMatchSpecifier::PresentMatch(true)
            } else if let Some(exact) = q.get("Exact").and_then(Value::as_str) {
                route::query_parameter_matcher::QueryParameterMatchSpecifier::StringMatch(
                    string_exact(exact),
                )
            } else {
                let regex = q.get("Regex").and_then(Value::as_str).unwrap_or(".*");
                route::query_parameter_matcher::QueryParameterMatchSpecifier::StringMatch(
                    string_regex(regex),
                )
            };
            route::QueryParameterMatcher {
                name,
                query_parameter_match_specifier: Some(spec),
            }
        })
        .collect();
    route::RouteMatch {
        path_specifier: Some(path_specifier),
        case_sensitive: http
            .and_then(|h| h.get("CaseInsensitive"))
            .and_then(Value::as_bool)
            .filter(|c| *c)
            .map(|_| BoolValue { value: false }),
        headers,
        query_parameters,
        ..Default::default()
    }
}

/// The routes of an upstream's chain, named after the upstream.
pub fn chain_routes(name: &str, chain: &CompiledChain) -> route::RouteConfiguration {
    let start = chain.nodes.get(&chain.start_node);
    let routes = match start.and_then(|n| n.get("Type")).and_then(Value::as_str) {
        Some("router") => start
            .and_then(|n| n.get("Routes"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let definition = r.get("Definition").cloned().unwrap_or(Value::Null);
                let next = r.get("NextNode").and_then(Value::as_str).unwrap_or("");
                let timeout = definition
                    .pointer("/Destination/RequestTimeout")
                    .and_then(Value::as_str)
                    .and_then(crate::resources::go_duration_ms)
                    .filter(|ms| *ms > 0);
                let mut action = action_for(chain, next, timeout);
                if let route::route::Action::Route(ra) = &mut action {
                    let retries = definition
                        .pointer("/Destination/NumRetries")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    let on_connect = definition
                        .pointer("/Destination/RetryOnConnectFailure")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    if retries > 0 || on_connect {
                        ra.retry_policy = Some(route::RetryPolicy {
                            retry_on: if on_connect { "connect-failure" } else { "5xx" }.into(),
                            num_retries: Some(UInt32Value {
                                value: retries.max(1) as u32,
                            }),
                            ..Default::default()
                        });
                    }
                }
                route::Route {
                    r#match: Some(route_match(&definition)),
                    action: Some(action),
                    ..Default::default()
                }
            })
            .collect(),
        _ => vec![route::Route {
            r#match: Some(prefix_match("/")),
            action: Some(action_for(chain, &chain.start_node, None)),
            ..Default::default()
        }],
    };
    route::RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![route::VirtualHost {
            name: name.into(),
            domains: vec!["*".into()],
            routes,
            ..Default::default()
        }],
        validate_clusters: Some(BoolValue { value: true }),
        ..Default::default()
    }
}

/// RDS for an upstream listener's connection manager.
pub fn rds(name: &str) -> hcm::http_connection_manager::RouteSpecifier {
    hcm::http_connection_manager::RouteSpecifier::Rds(hcm::Rds {
        config_source: Some(core::ConfigSource {
            resource_api_version: core::ApiVersion::V3 as i32,
            config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
                core::AggregatedConfigSource {},
            )),
            ..Default::default()
        }),
        route_config_name: name.into(),
    })
}
