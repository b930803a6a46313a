//! From xDS resources to what the data plane runs: listeners (inbound with
//! mTLS and RBAC, or outbound), clusters with their TLS origination and
//! healthy endpoints by priority.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::config::rbac::v3 as rbac;
use envoy_types::pb::envoy::config::route::v3 as route;
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3 as http_rbac;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3 as net_rbac;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp_proxy;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
use envoy_types::pb::envoy::r#type::matcher::v3 as matcher;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use regex::Regex;

/// The TLS material of one side of a connection.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsMaterial {
    /// PEM chain (leaf first).
    pub cert_chain: String,
    /// PEM private key.
    pub private_key: String,
    /// PEM roots to verify the peer against.
    pub roots: String,
    /// SPIFFE ids the peer must present (outbound only; empty: any of ours).
    pub expected_sans: Vec<String>,
    /// SNI to send (outbound).
    pub sni: String,
    /// The peer check uses a matcher this proxy cannot evaluate (fail closed).
    pub unsupported_san_matcher: bool,
}

/// One principal of an RBAC policy.
#[derive(Debug, Clone)]
pub enum Principal {
    /// Any peer.
    Any,
    /// A peer whose SPIFFE id matches.
    Regex(Regex),
    /// A peer whose SPIFFE id equals.
    Exact(String),
    /// All must match.
    And(Vec<Principal>),
    /// Any must match.
    Or(Vec<Principal>),
    /// Must not match.
    Not(Box<Principal>),
    /// Something this proxy cannot evaluate (resolved conservatively).
    Unknown,
}

impl Principal {
    /// Whether `uri` matches; `None` when it depends on something this
    /// proxy cannot evaluate.
    pub fn matches(&self, uri: &str) -> Option<bool> {
        match self {
            Principal::Any => Some(true),
            Principal::Regex(r) => Some(r.is_match(uri)),
            Principal::Exact(e) => Some(e == uri),
            Principal::And(all) => {
                let mut unknown = false;
                for p in all {
                    match p.matches(uri) {
                        Some(false) => return Some(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                if unknown {
                    None
                } else {
                    Some(true)
                }
            }
            Principal::Or(any) => {
                let mut unknown = false;
                for p in any {
                    match p.matches(uri) {
                        Some(true) => return Some(true),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                if unknown {
                    None
                } else {
                    Some(false)
                }
            }
            Principal::Not(p) => p.matches(uri).map(|m| !m),
            Principal::Unknown => None,
        }
    }
}

/// Connection-level authorization, from network RBAC (or from HTTP RBAC
/// where only L4 can be enforced: a source with L7 rules is denied).
#[derive(Debug, Clone)]
pub struct Authorization {
    /// `true`: ALLOW policies (deny unless one matches); `false`: DENY policies.
    pub allow_list: bool,
    /// Principals of the policies (each policy's principals OR-ed).
    pub principals: Vec<Principal>,
    /// Principals denied outright because their rules need L7 (ALLOW mode).
    pub l7_denied: Vec<Principal>,
}

impl Authorization {
    /// Whether a peer with SPIFFE id `uri` may connect.
    /// Unknowns resolve toward denial: an ALLOW policy that cannot be
    /// evaluated does not match, a DENY policy that cannot does.
    pub fn allows(&self, uri: &str) -> bool {
        if self.allow_list {
            let allowed = self.principals.iter().any(|p| p.matches(uri) == Some(true));
            let l7 = self.l7_denied.iter().any(|p| p.matches(uri) != Some(false));
            allowed && !l7
        } else {
            !self
                .principals
                .iter()
                .any(|p| p.matches(uri) != Some(false))
        }
    }
}

/// Where a listener sends connections.
#[derive(Debug, Clone, PartialEq)]
pub enum Destination {
    /// One cluster.
    Cluster(String),
    /// Weighted clusters.
    Weighted(Vec<(String, u32)>),
}

/// A listener as the data plane runs it.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// Resource name.
    pub name: String,
    /// Bind address.
    pub address: SocketAddr,
    /// Inbound mTLS (public listener).
    pub tls: Option<TlsMaterial>,
    /// Who may connect (inbound).
    pub authorization: Option<Authorization>,
    /// Where connections go.
    pub destination: Destination,
    /// The route configuration to take the destination from (HTTP upstreams).
    pub route_name: Option<String>,
    /// A mesh gateway's listener: connections routed by their SNI and
    /// passed through (empty for every other listener).
    pub sni_routes: Vec<crate::sni::SniRoute>,
}

/// A cluster as the data plane runs it.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Name.
    pub name: String,
    /// Connect timeout.
    pub connect_timeout: std::time::Duration,
    /// TLS origination.
    pub tls: Option<TlsMaterial>,
    /// Static endpoints (`local_app`, and a `LOGICAL_DNS` cluster's host
    /// name); EDS clusters take theirs from load assignments.
    pub static_endpoints: Vec<Vec<EndpointAddress>>,
    /// The service it leads to: the one its certificate must name (none
    /// for a plain cluster such as `local_app`). Traffic is counted per
    /// destination under this name.
    pub destination_service: Option<String>,
}

fn inline(source: &Option<core::DataSource>) -> String {
    match source.as_ref().and_then(|d| d.specifier.as_ref()) {
        Some(core::data_source::Specifier::InlineString(s)) => s.clone(),
        Some(core::data_source::Specifier::InlineBytes(b)) => {
            String::from_utf8_lossy(b).to_string()
        }
        _ => String::new(),
    }
}

fn material(common: &tls::CommonTlsContext, sni: &str) -> TlsMaterial {
    let (cert_chain, private_key) = common
        .tls_certificates
        .first()
        .map(|c| (inline(&c.certificate_chain), inline(&c.private_key)))
        .unwrap_or_default();
    let mut unsupported_san_matcher = false;
    let (roots, expected_sans) = match &common.validation_context_type {
        Some(tls::common_tls_context::ValidationContextType::ValidationContext(v)) => (
            inline(&v.trusted_ca),
            v.match_typed_subject_alt_names
                .iter()
                .filter_map(|m| {
                    let exact = match m.matcher.as_ref().and_then(|x| x.match_pattern.as_ref()) {
                        Some(matcher::string_matcher::MatchPattern::Exact(s))
                            if m.san_type == tls::subject_alt_name_matcher::SanType::Uri as i32 =>
                        {
                            Some(s.clone())
                        }
                        _ => None,
                    };
                    if exact.is_none() {
                        unsupported_san_matcher = true;
                    }
                    exact
                })
                .collect(),
        ),
        _ => (String::new(), Vec::new()),
    };
    TlsMaterial {
        cert_chain,
        private_key,
        roots,
        expected_sans,
        sni: sni.to_string(),
        unsupported_san_matcher,
    }
}

pub(crate) fn socket(address: &Option<core::Address>) -> Option<SocketAddr> {
    match address.as_ref()?.address.as_ref()? {
        core::address::Address::SocketAddress(sa) => {
            let port = match sa.port_specifier.as_ref()? {
                core::socket_address::PortSpecifier::PortValue(p) => u16::try_from(*p).ok()?,
                _ => return None,
            };
            let ip: std::net::IpAddr = sa.address.parse().ok()?;
            Some(SocketAddr::new(ip, port))
        }
        _ => None,
    }
}

pub(crate) fn decode<T: Message + Default>(any: &Any) -> Option<T> {
    T::decode(any.value.as_slice()).ok()
}

pub(crate) fn typed(filter: &listener::Filter) -> Option<&Any> {
    match filter.config_type.as_ref()? {
        listener::filter::ConfigType::TypedConfig(any) => Some(any),
        _ => None,
    }
}

fn principal_of(p: &rbac::Principal) -> Principal {
    use rbac::principal::Identifier;
    match &p.identifier {
        Some(Identifier::Any(true)) => Principal::Any,
        Some(Identifier::Authenticated(a)) => {
            match a
                .principal_name
                .as_ref()
                .and_then(|m| m.match_pattern.as_ref())
            {
                // Envoy's safe_regex matches the whole string.
                Some(matcher::string_matcher::MatchPattern::SafeRegex(r)) => {
                    Regex::new(&format!("^(?:{})$", r.regex))
                        .map(Principal::Regex)
                        .unwrap_or(Principal::Unknown)
                }
                Some(matcher::string_matcher::MatchPattern::Exact(e)) => {
                    Principal::Exact(e.clone())
                }
                None => Principal::Any,
                _ => Principal::Unknown,
            }
        }
        Some(Identifier::AndIds(set)) => Principal::And(set.ids.iter().map(principal_of).collect()),
        Some(Identifier::OrIds(set)) => Principal::Or(set.ids.iter().map(principal_of).collect()),
        Some(Identifier::NotId(inner)) => Principal::Not(Box::new(principal_of(inner))),
        // Anything we cannot evaluate is resolved conservatively.
        _ => Principal::Unknown,
    }
}

fn is_any_permission(p: &rbac::Permission) -> bool {
    matches!(p.rule, Some(rbac::permission::Rule::Any(true)))
}

/// L4 authorization from RBAC rules. `l4_only` is set for HTTP RBAC seen by
/// a TCP proxy: a policy whose permissions are not all "any" needs L7, so
/// in ALLOW mode its principals are denied, and in DENY mode they are
/// denied as well (never let an L7 rule go unenforced).
pub fn authorization(rules: &rbac::Rbac, l4_only: bool) -> Authorization {
    let allow_list = rules.action == rbac::rbac::Action::Allow as i32;
    let mut principals = Vec::new();
    let mut l7_denied = Vec::new();
    let mut names: Vec<&String> = rules.policies.keys().collect();
    names.sort();
    for name in names {
        let policy = &rules.policies[name];
        let whole = Principal::Or(policy.principals.iter().map(principal_of).collect());
        let needs_l7 = l4_only && !policy.permissions.iter().all(is_any_permission);
        match (allow_list, needs_l7) {
            (true, true) => l7_denied.push(whole),
            _ => principals.push(whole),
        }
    }
    Authorization {
        allow_list,
        principals,
        l7_denied,
    }
}

/// Translates one listener; `None` for shapes the built-in proxy does not serve.
pub fn listener_config(l: &listener::Listener) -> Option<ListenerConfig> {
    if l.listener_filters
        .iter()
        .any(|f| f.name == crate::sni::TLS_INSPECTOR)
    {
        return crate::sni::gateway_listener(l);
    }
    let address = socket(&l.address)?;
    // One filter chain only: more would need filter-chain matching.
    let [chain] = l.filter_chains.as_slice() else {
        return None;
    };
    // A transport socket we cannot use makes the listener unservable
    // (never plaintext in its place).
    let tls = match chain.transport_socket.as_ref() {
        None => None,
        Some(ts) => {
            let core::transport_socket::ConfigType::TypedConfig(any) = ts.config_type.as_ref()?;
            if !any
                .type_url
                .ends_with("envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext")
            {
                return None;
            }
            let ctx: tls::DownstreamTlsContext = decode(any)?;
            let m = material(ctx.common_tls_context.as_ref()?, "");
            if m.cert_chain.is_empty() || m.private_key.is_empty() || m.roots.is_empty() {
                return None;
            }
            Some(m)
        }
    };
    let mut authorization = None;
    let mut destination = None;
    let mut route_name = None;
    for filter in &chain.filters {
        let Some(any) = typed(filter) else { continue };
        match any.type_url.rsplit('/').next().unwrap_or("") {
            "envoy.extensions.filters.network.rbac.v3.RBAC" => {
                let r: net_rbac::Rbac = decode(any)?;
                if r.matcher.is_some() {
                    return None; // the matcher API is not evaluated here
                }
                authorization = r.rules.as_ref().map(|rules| authorization_of(rules, false));
            }
            "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy" => {
                let t: tcp_proxy::TcpProxy = decode(any)?;
                destination = match t.cluster_specifier? {
                    tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(c) => {
                        Some(Destination::Cluster(c))
                    }
                    tcp_proxy::tcp_proxy::ClusterSpecifier::WeightedClusters(w) => {
                        Some(Destination::Weighted(
                            w.clusters.into_iter().map(|c| (c.name, c.weight)).collect(),
                        ))
                    }
                };
            }
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" => {
                // HTTP is proxied as TCP: the destination comes from the
                // routes; L7 intentions are enforced by denying their sources.
                let m: hcm::HttpConnectionManager = decode(any)?;
                for f in &m.http_filters {
                    if let Some(hcm::http_filter::ConfigType::TypedConfig(a)) = &f.config_type {
                        if a.type_url
                            .ends_with("envoy.extensions.filters.http.rbac.v3.RBAC")
                        {
                            let r: http_rbac::Rbac = decode(a)?;
                            authorization =
                                r.rules.as_ref().map(|rules| authorization_of(rules, true));
                        }
                    }
                }
                match m.route_specifier? {
                    hcm::http_connection_manager::RouteSpecifier::Rds(rds) => {
                        route_name = Some(rds.route_config_name);
                        destination = Some(Destination::Cluster(String::new()));
                    }
                    hcm::http_connection_manager::RouteSpecifier::RouteConfig(rc) => {
                        destination = Some(route_destination(&rc)?);
                    }
                    _ => return None,
                }
            }
            // A filter we cannot apply (ext_authz, ...): refuse the listener.
            _ => return None,
        }
    }
    if authorization.is_some() && tls.is_none() {
        return None; // identities need mTLS
    }
    Some(ListenerConfig {
        name: l.name.clone(),
        address,
        tls,
        authorization,
        destination: destination?,
        route_name,
        sni_routes: Vec::new(),
    })
}

fn authorization_of(rules: &rbac::Rbac, l4_only: bool) -> Authorization {
    authorization(rules, l4_only)
}

/// The destination of a route configuration when proxied as TCP: the
/// catch-all route (the last one), as the chain's default.
pub fn route_destination(rc: &route::RouteConfiguration) -> Option<Destination> {
    let route = rc.virtual_hosts.first()?.routes.last()?;
    match route.action.as_ref()? {
        route::route::Action::Route(ra) => match ra.cluster_specifier.as_ref()? {
            route::route_action::ClusterSpecifier::Cluster(c) => {
                Some(Destination::Cluster(c.clone()))
            }
            route::route_action::ClusterSpecifier::WeightedClusters(w) => {
                Some(Destination::Weighted(
                    w.clusters
                        .iter()
                        .map(|c| {
                            (
                                c.name.clone(),
                                c.weight.as_ref().map(|v| v.value).unwrap_or(1),
                            )
                        })
                        .collect(),
                ))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Translates one cluster.
pub fn cluster_config(c: &cluster::Cluster) -> ClusterConfig {
    let tls = c
        .transport_socket
        .as_ref()
        .and_then(|ts| match ts.config_type.as_ref()? {
            core::transport_socket::ConfigType::TypedConfig(any) => {
                let ctx: tls::UpstreamTlsContext = decode(any)?;
                Some(material(ctx.common_tls_context.as_ref()?, &ctx.sni))
            }
        });
    let connect_timeout = c
        .connect_timeout
        .as_ref()
        .map(|d| std::time::Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
        .unwrap_or(std::time::Duration::from_secs(5));
    let static_endpoints = c
        .load_assignment
        .as_ref()
        .map(|cla| {
            endpoints_by_priority(cla)
                .into_iter()
                .map(|p| p.into_iter().map(|(a, _)| a).collect())
                .collect()
        })
        .unwrap_or_default();
    let destination_service = tls.as_ref().and_then(|t| {
        t.expected_sans
            .iter()
            .find_map(|uri| match legate_ca::SpiffeId::parse(uri) {
                Ok(legate_ca::SpiffeId::Service { service, .. }) => Some(service),
                _ => None,
            })
    });
    ClusterConfig {
        name: c.name.clone(),
        connect_timeout,
        tls,
        static_endpoints,
        destination_service,
    }
}

/// Where an endpoint is: an IP address, or a host name (a gateway
/// registered by name: a `LOGICAL_DNS` cluster) looked up each time a
/// connection is made, as Envoy re-resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointAddress {
    /// An IP address and port.
    Ip(SocketAddr),
    /// A host name and port.
    Host(String, u16),
}

impl std::fmt::Display for EndpointAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndpointAddress::Ip(a) => a.fmt(f),
            EndpointAddress::Host(h, p) => write!(f, "{h}:{p}"),
        }
    }
}

/// An endpoint's address: an IP, else a host name (never empty).
fn endpoint_address(address: &Option<core::Address>) -> Option<EndpointAddress> {
    if let Some(ip) = socket(address) {
        return Some(EndpointAddress::Ip(ip));
    }
    let core::address::Address::SocketAddress(sa) = address.as_ref()?.address.as_ref()? else {
        return None;
    };
    let Some(core::socket_address::PortSpecifier::PortValue(p)) = sa.port_specifier else {
        return None;
    };
    let port = u16::try_from(p).ok()?;
    (!sa.address.is_empty()).then(|| EndpointAddress::Host(sa.address.clone(), port))
}

/// Healthy endpoints of a load assignment grouped by priority (lowest
/// first), with their weights; UNHEALTHY ones are left out.
pub fn endpoints_by_priority(
    cla: &endpoint::ClusterLoadAssignment,
) -> Vec<Vec<(EndpointAddress, u32)>> {
    let mut by_priority: BTreeMap<u32, Vec<(EndpointAddress, u32)>> = BTreeMap::new();
    for locality in &cla.endpoints {
        for lb in &locality.lb_endpoints {
            let healthy = !matches!(
                core::HealthStatus::try_from(lb.health_status),
                Ok(core::HealthStatus::Unhealthy
                    | core::HealthStatus::Draining
                    | core::HealthStatus::Timeout)
            );
            if !healthy {
                continue;
            }
            let Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(ep)) = &lb.host_identifier
            else {
                continue;
            };
            if let Some(addr) = endpoint_address(&ep.address) {
                let weight = lb
                    .load_balancing_weight
                    .as_ref()
                    .map(|w| w.value)
                    .unwrap_or(1)
                    .max(1);
                by_priority
                    .entry(locality.priority)
                    .or_default()
                    .push((addr, weight));
            }
        }
    }
    by_priority.into_values().collect()
}

/// Everything the data plane runs, rebuilt on every xDS change.
#[derive(Debug, Clone, Default)]
pub struct Runtime {
    /// Listeners by name.
    pub listeners: BTreeMap<String, Arc<ListenerConfig>>,
    /// Clusters by name.
    pub clusters: BTreeMap<String, Arc<ClusterConfig>>,
    /// Healthy endpoints by cluster, by priority.
    pub endpoints: BTreeMap<String, Vec<Vec<(EndpointAddress, u32)>>>,
    /// Route configurations by name (HTTP upstreams proxied as TCP).
    pub routes: BTreeMap<String, Destination>,
}

impl Runtime {
    /// The endpoints of a cluster: EDS, else its static ones.
    pub fn endpoints_of(&self, cluster: &str) -> Vec<Vec<(EndpointAddress, u32)>> {
        if let Some(e) = self.endpoints.get(cluster) {
            return e.clone();
        }
        self.clusters
            .get(cluster)
            .map(|c| {
                c.static_endpoints
                    .iter()
                    .map(|p| p.iter().map(|a| (a.clone(), 1)).collect())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(principal: &str, l7: bool) -> rbac::Policy {
        rbac::Policy {
            permissions: vec![if l7 {
                rbac::Permission {
                    rule: Some(rbac::permission::Rule::UrlPath(
                        matcher::PathMatcher::default(),
                    )),
                }
            } else {
                rbac::Permission {
                    rule: Some(rbac::permission::Rule::Any(true)),
                }
            }],
            principals: vec![rbac::Principal {
                identifier: Some(rbac::principal::Identifier::Authenticated(
                    rbac::principal::Authenticated {
                        principal_name: Some(matcher::StringMatcher {
                            match_pattern: Some(matcher::string_matcher::MatchPattern::SafeRegex(
                                matcher::RegexMatcher {
                                    regex: format!(
                                        "^spiffe://[^/]+/ns/default/dc/[^/]+/svc/{principal}$"
                                    ),
                                    ..Default::default()
                                },
                            )),
                            ..Default::default()
                        }),
                    },
                )),
            }],
            ..Default::default()
        }
    }

    fn uri(service: &str) -> String {
        format!("spiffe://td.consul/ns/default/dc/dc1/svc/{service}")
    }

    #[test]
    fn l7_rules_deny_their_source_when_only_l4_is_enforced() {
        // Default deny: ALLOW policies; web's needs L7, api's is L4.
        let rules = rbac::Rbac {
            action: rbac::rbac::Action::Allow as i32,
            policies: [
                ("a".to_string(), policy("web", true)),
                ("b".to_string(), policy("api", false)),
            ]
            .into(),
            ..Default::default()
        };
        let auth = authorization(&rules, true);
        assert!(
            !auth.allows(&uri("web")),
            "an L7 allow cannot be enforced: deny"
        );
        assert!(auth.allows(&uri("api")));
        assert!(!auth.allows(&uri("other")));
        // Default allow: DENY policies; a partial (L7) deny denies the whole source.
        let rules = rbac::Rbac {
            action: rbac::rbac::Action::Deny as i32,
            policies: [("a".to_string(), policy("web", true))].into(),
            ..Default::default()
        };
        let auth = authorization(&rules, true);
        assert!(!auth.allows(&uri("web")));
        assert!(auth.allows(&uri("api")));
        // Network RBAC (L4 only by nature) keeps its meaning.
        let rules = rbac::Rbac {
            action: rbac::rbac::Action::Deny as i32,
            policies: [("a".to_string(), policy("web", false))].into(),
            ..Default::default()
        };
        assert!(!authorization(&rules, false).allows(&uri("web")));
        assert!(authorization(&rules, false).allows(&uri("api")));
    }

    #[test]
    fn unknown_principals_resolve_toward_denial_and_regexes_match_whole_ids() {
        let unknown = rbac::Principal {
            identifier: Some(rbac::principal::Identifier::Header(Default::default())),
        };
        let not_unknown = rbac::Principal {
            identifier: Some(rbac::principal::Identifier::NotId(Box::new(
                unknown.clone(),
            ))),
        };
        let mut p = policy("web", false);
        p.principals = vec![not_unknown];
        // ALLOW: a principal that cannot be evaluated allows nobody.
        let rules = rbac::Rbac {
            action: rbac::rbac::Action::Allow as i32,
            policies: [("a".to_string(), p.clone())].into(),
            ..Default::default()
        };
        assert!(!authorization(&rules, false).allows(&uri("web")));
        // DENY: it denies everybody.
        let rules = rbac::Rbac {
            action: rbac::rbac::Action::Deny as i32,
            policies: [("a".to_string(), p)].into(),
            ..Default::default()
        };
        assert!(!authorization(&rules, false).allows(&uri("api")));
        // A pattern matches the whole id, as Envoy's safe_regex does.
        let mut unanchored = policy("web", false);
        if let Some(rbac::principal::Identifier::Authenticated(a)) =
            &mut unanchored.principals[0].identifier
        {
            a.principal_name = Some(matcher::StringMatcher {
                match_pattern: Some(matcher::string_matcher::MatchPattern::SafeRegex(
                    matcher::RegexMatcher {
                        regex: "spiffe://[^/]+/ns/default/dc/[^/]+/svc/web".into(),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            });
        }
        let rules = rbac::Rbac {
            action: rbac::rbac::Action::Allow as i32,
            policies: [("a".to_string(), unanchored)].into(),
            ..Default::default()
        };
        let auth = authorization(&rules, false);
        assert!(auth.allows(&uri("web")));
        assert!(!auth.allows(&uri("web-admin")));
    }

    #[test]
    fn a_logical_dns_clusters_host_name_is_its_endpoint() {
        let at = |host: &str, port: u32| endpoint::LbEndpoint {
            host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(
                endpoint::Endpoint {
                    address: Some(core::Address {
                        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                            address: host.into(),
                            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(
                                port,
                            )),
                            ..Default::default()
                        })),
                    }),
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        let cluster = cluster::Cluster {
            name: "dc2.internal.example".into(),
            load_assignment: Some(endpoint::ClusterLoadAssignment {
                cluster_name: "dc2.internal.example".into(),
                endpoints: vec![endpoint::LocalityLbEndpoints {
                    lb_endpoints: vec![
                        at("gw.dc2.example", 8443),
                        at("", 1),
                        at("10.0.0.1", 70000),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let config = cluster_config(&cluster);
        // The empty name and the port out of range are dropped.
        assert_eq!(
            config.static_endpoints,
            vec![vec![EndpointAddress::Host("gw.dc2.example".into(), 8443)]]
        );
        let rt = Runtime {
            clusters: [(cluster.name.clone(), Arc::new(config))].into(),
            ..Default::default()
        };
        let found = rt.endpoints_of("dc2.internal.example");
        assert_eq!(found[0][0].0.to_string(), "gw.dc2.example:8443");
    }

    #[test]
    fn listeners_the_proxy_cannot_fully_apply_are_refused() {
        use envoy_types::util::pack_any;
        let address = Some(core::Address {
            address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                address: "127.0.0.1".into(),
                port_specifier: Some(core::socket_address::PortSpecifier::PortValue(9000)),
                ..Default::default()
            })),
        });
        let tcp = listener::Filter {
            name: "envoy.filters.network.tcp_proxy".into(),
            config_type: Some(listener::filter::ConfigType::TypedConfig(pack_any(
                tcp_proxy::TcpProxy {
                    stat_prefix: "x".into(),
                    cluster_specifier: Some(tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(
                        "c".into(),
                    )),
                    ..Default::default()
                },
            ))),
        };
        let ok = listener::Listener {
            name: "ok".into(),
            address: address.clone(),
            filter_chains: vec![listener::FilterChain {
                filters: vec![tcp.clone()],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(listener_config(&ok).is_some());
        // An unknown filter (it might have been an authorization filter).
        let mut unknown = ok.clone();
        unknown.filter_chains[0].filters.insert(
            0,
            listener::Filter {
                name: "envoy.filters.network.ext_authz".into(),
                config_type: Some(listener::filter::ConfigType::TypedConfig(Any {
                    type_url:
                        "type.googleapis.com/envoy.extensions.filters.network.ext_authz.v3.ExtAuthz"
                            .into(),
                    value: Vec::new(),
                })),
            },
        );
        assert!(listener_config(&unknown).is_none());
        // A transport socket we cannot use is never replaced by plaintext.
        let mut bad_tls = ok.clone();
        bad_tls.filter_chains[0].transport_socket = Some(core::TransportSocket {
            name: "tls".into(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(Any {
                type_url: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext".into(),
                value: vec![0xff, 0xff],
            })),
        });
        assert!(listener_config(&bad_tls).is_none());
        // Two filter chains would need chain matching.
        let mut two = ok.clone();
        two.filter_chains.push(two.filter_chains[0].clone());
        assert!(listener_config(&two).is_none());
    }
}
