//! The discovery-chain compiler: a pure function from config entries and a
//! request to the compiled chain Consul returns at `/v1/discovery-chain`.
//!
//! Shapes follow current Consul: node and target ids include the partition
//! (`resolver:v1.web.default.default.dc1`, target `v1.web.default.default.dc1`),
//! SNI leaves the default partition out (`v1.web.default.dc1.internal.<td>`).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use legate_types::config_entry::ConfigEntry;
use legate_types::duration::format_go_duration;
use legate_types::sorted_map::SortedMap;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::entries::{MeshGateway, Route, RoutingEntries, ServiceResolver, ServiceRouter};

const DEFAULT_NAMESPACE: &str = "default";
const DEFAULT_PARTITION: &str = "default";
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What to compile.
#[derive(Debug, Clone, Default)]
pub struct CompileRequest {
    /// The service whose chain this is.
    pub service: String,
    /// The datacenter the chain is evaluated in.
    pub datacenter: String,
    /// The mesh trust domain (`<cluster-id>.consul`).
    pub trust_domain: String,
    /// `OverrideProtocol`.
    pub override_protocol: String,
    /// `OverrideConnectTimeout`.
    pub override_connect_timeout: Option<Duration>,
    /// `OverrideMeshGateway.Mode`.
    pub override_mesh_gateway: String,
}

impl CompileRequest {
    fn customization_hash(&self) -> String {
        if self.override_protocol.is_empty()
            && self.override_connect_timeout.is_none()
            && self.override_mesh_gateway.is_empty()
        {
            return String::new();
        }
        let mut hasher = Fnv64::default();
        self.override_protocol.hash(&mut hasher);
        self.override_connect_timeout
            .map(|d| d.as_nanos())
            .hash(&mut hasher);
        self.override_mesh_gateway.hash(&mut hasher);
        // Eight hex digits, as Consul's (`dd412229~s2.default...`).
        format!("{:016x}", hasher.finish())[..8].to_string()
    }
}

/// FNV-1a, for a hash that is stable across builds and platforms.
struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf29ce484222325)
    }
}

impl Hasher for Fnv64 {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x100000001b3);
        }
    }
}

/// One upstream target: a service (subset) in a datacenter.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Target {
    /// `[subset.]service.namespace.partition.datacenter`.
    #[serde(rename = "ID")]
    pub id: String,
    /// Service.
    pub service: String,
    /// Subset (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_subset: String,
    /// Namespace.
    pub namespace: String,
    /// Partition.
    pub partition: String,
    /// Datacenter.
    pub datacenter: String,
    /// Mesh gateway mode for reaching it.
    pub mesh_gateway: MeshGateway,
    /// The subset's filter and passing-only flag.
    pub subset: Value,
    /// Connect timeout.
    pub connect_timeout: String,
    /// The SNI its proxies present.
    #[serde(rename = "SNI")]
    pub sni: String,
    /// The Envoy cluster name (the SNI).
    pub name: String,
}

/// A compiled chain, in Consul's JSON shape.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CompiledChain {
    /// The service.
    pub service_name: String,
    /// Namespace.
    pub namespace: String,
    /// Partition.
    pub partition: String,
    /// Datacenter.
    pub datacenter: String,
    /// Hash of the overrides (empty without overrides).
    pub customization_hash: String,
    /// True when no config entry shaped the chain.
    pub default: bool,
    /// The chain's protocol.
    pub protocol: String,
    /// Id of the first node.
    pub start_node: String,
    /// Nodes by id.
    pub nodes: SortedMap<Box<Value>>,
    /// Targets by id.
    pub targets: SortedMap<Box<Target>>,
}

struct Compiler<'a> {
    request: &'a CompileRequest,
    entries: RoutingEntries,
    protocol: String,
    http: bool,
    nodes: BTreeMap<String, Value>,
    targets: BTreeMap<String, Box<Target>>,
    /// Whether any entry (or override) shaped the chain.
    customized: bool,
}

/// `[subset.]service.namespace.partition.datacenter`.
pub fn target_id(service: &str, subset: &str, datacenter: &str) -> String {
    let base = format!("{service}.{DEFAULT_NAMESPACE}.{DEFAULT_PARTITION}.{datacenter}");
    if subset.is_empty() {
        base
    } else {
        format!("{subset}.{base}")
    }
}

/// The SNI of a target; the default partition is left out.
pub fn target_sni(service: &str, subset: &str, datacenter: &str, trust_domain: &str) -> String {
    let base = format!("{service}.{DEFAULT_NAMESPACE}.{datacenter}.internal.{trust_domain}");
    if subset.is_empty() {
        base
    } else {
        format!("{subset}.{base}")
    }
}

fn duration_text(d: Duration) -> String {
    format_go_duration(d)
}

impl Compiler<'_> {
    fn chain_name(service: &str) -> String {
        format!("{service}.{DEFAULT_NAMESPACE}.{DEFAULT_PARTITION}")
    }

    fn connect_timeout(&self, resolver: Option<&ServiceResolver>) -> Duration {
        if let Some(d) = self.request.override_connect_timeout {
            return d;
        }
        match resolver.map(|r| r.connect_timeout.0) {
            Some(d) if !d.is_zero() => d,
            _ => DEFAULT_CONNECT_TIMEOUT,
        }
    }

    fn make_target(&mut self, service: &str, subset: &str, datacenter: &str) -> String {
        let id = target_id(service, subset, datacenter);
        if self.targets.contains_key(&id) {
            return id;
        }
        let resolver = self.entries.resolvers.get(service);
        let subset_value = resolver
            .and_then(|r| r.subsets.get(subset))
            .map(|s| {
                let mut m = Map::new();
                if !s.filter.is_empty() {
                    m.insert("Filter".into(), json!(s.filter));
                }
                if s.only_passing {
                    m.insert("OnlyPassing".into(), json!(true));
                }
                Value::Object(m)
            })
            .unwrap_or_else(|| json!({}));
        let mode = if !self.request.override_mesh_gateway.is_empty() {
            self.request.override_mesh_gateway.clone()
        } else {
            self.entries.mesh_gateway_mode(service)
        };
        let sni = target_sni(service, subset, datacenter, &self.request.trust_domain);
        let target = Target {
            id: id.clone(),
            service: service.to_string(),
            service_subset: subset.to_string(),
            namespace: DEFAULT_NAMESPACE.into(),
            partition: DEFAULT_PARTITION.into(),
            datacenter: datacenter.to_string(),
            mesh_gateway: MeshGateway { mode },
            subset: subset_value,
            connect_timeout: duration_text(self.connect_timeout(resolver)),
            sni: sni.clone(),
            name: sni,
        };
        self.targets.insert(id.clone(), Box::new(target));
        id
    }

    /// Follows resolver redirects to the (service, subset, datacenter) that
    /// really serves a request.
    fn redirect(
        &self,
        service: &str,
        subset: &str,
        datacenter: &str,
    ) -> Result<(String, String, String), String> {
        let mut current = (
            service.to_string(),
            subset.to_string(),
            datacenter.to_string(),
        );
        let mut seen = BTreeSet::new();
        loop {
            if !seen.insert(current.clone()) {
                return Err(format!(
                    "discovery chain {:?}: detected circular resolver redirect at {:?}",
                    self.request.service, current.0
                ));
            }
            let Some(redirect) = self
                .entries
                .resolvers
                .get(&current.0)
                .and_then(|r| r.redirect.as_ref())
            else {
                return Ok(current);
            };
            let next_service = if redirect.service.is_empty() {
                current.0.clone()
            } else {
                redirect.service.clone()
            };
            let next_subset = if !redirect.service_subset.is_empty() {
                redirect.service_subset.clone()
            } else if next_service == current.0 {
                current.1.clone()
            } else {
                String::new()
            };
            let next_dc = if redirect.datacenter.is_empty() {
                current.2.clone()
            } else {
                redirect.datacenter.clone()
            };
            let next = (next_service, next_subset, next_dc);
            // A redirect that names where it already is (a resolver sending
            // its own service to another datacenter, seen from there) ends.
            if next == current {
                return Ok(current);
            }
            current = next;
        }
    }

    fn resolver_node(&mut self, service: &str, subset: &str) -> Result<String, String> {
        let (service, mut subset, datacenter) =
            self.redirect(service, subset, &self.request.datacenter.clone())?;
        let resolver = self.entries.resolvers.get(&service).cloned();
        if resolver.is_some() {
            self.customized = true;
        }
        if subset.is_empty() {
            subset = resolver
                .as_ref()
                .map(|r| r.default_subset.clone())
                .unwrap_or_default();
        }
        if !subset.is_empty()
            && !resolver
                .as_ref()
                .is_some_and(|r| r.subsets.contains_key(&subset))
        {
            return Err(format!(
                "discovery chain {:?}: service {service:?} does not have a subset named {subset:?}",
                self.request.service
            ));
        }
        let target = self.make_target(&service, &subset, &datacenter);
        let node_id = format!("resolver:{target}");
        if self.nodes.contains_key(&node_id) {
            return Ok(node_id);
        }
        let mut inner = Map::new();
        inner.insert(
            "ConnectTimeout".into(),
            json!(duration_text(self.connect_timeout(resolver.as_ref()))),
        );
        if let Some(r) = resolver.as_ref().filter(|r| !r.request_timeout.0.is_zero()) {
            inner.insert(
                "RequestTimeout".into(),
                json!(duration_text(r.request_timeout.0)),
            );
        }
        if resolver.is_none() {
            inner.insert("Default".into(), json!(true));
        }
        inner.insert("Target".into(), json!(target));
        if let Some(r) = resolver.as_ref() {
            let failover = r.failover.get(&subset).or_else(|| r.failover.get("*"));
            if let Some(f) = failover {
                let mut ids = Vec::new();
                if f.targets.is_empty() {
                    let fo_service = if f.service.is_empty() {
                        service.clone()
                    } else {
                        f.service.clone()
                    };
                    let fo_subset = if !f.service_subset.is_empty() {
                        f.service_subset.clone()
                    } else if fo_service == service {
                        subset.clone()
                    } else {
                        String::new()
                    };
                    let dcs = if f.datacenters.is_empty() {
                        vec![datacenter.clone()]
                    } else {
                        f.datacenters.clone()
                    };
                    for dc in dcs {
                        ids.push(self.make_target(&fo_service, &fo_subset, &dc));
                    }
                } else {
                    for t in &f.targets {
                        let fo_service = if t.service.is_empty() {
                            service.clone()
                        } else {
                            t.service.clone()
                        };
                        let fo_subset = if !t.service_subset.is_empty() {
                            t.service_subset.clone()
                        } else if fo_service == service {
                            subset.clone()
                        } else {
                            String::new()
                        };
                        let dc = if t.datacenter.is_empty() {
                            datacenter.clone()
                        } else {
                            t.datacenter.clone()
                        };
                        ids.push(self.make_target(&fo_service, &fo_subset, &dc));
                    }
                }
                ids.retain(|id| *id != target);
                if !ids.is_empty() {
                    inner.insert("Failover".into(), json!({ "Targets": ids }));
                }
            }
        }
        let mut node = Map::new();
        node.insert("Type".into(), json!("resolver"));
        node.insert("Name".into(), json!(target));
        node.insert("Resolver".into(), Value::Object(inner));
        if let Some(lb) = resolver.as_ref().and_then(|r| r.load_balancer.as_ref()) {
            let mut m = Map::new();
            if !lb.policy.is_empty() {
                m.insert("Policy".into(), json!(lb.policy));
            }
            if let Some(v) = &lb.ring_hash_config {
                m.insert("RingHashConfig".into(), v.clone());
            }
            if let Some(v) = &lb.least_request_config {
                m.insert("LeastRequestConfig".into(), v.clone());
            }
            if !lb.hash_policies.is_empty() {
                m.insert("HashPolicies".into(), json!(lb.hash_policies));
            }
            node.insert("LoadBalancer".into(), Value::Object(m));
        }
        self.nodes.insert(node_id.clone(), Value::Object(node));
        Ok(node_id)
    }

    /// Flattens a splitter (and splitters it points at) into weighted legs.
    fn flatten_splits(
        &mut self,
        service: &str,
        scale: f64,
        seen: &mut BTreeSet<String>,
        out: &mut Vec<(f64, String, Value)>,
    ) -> Result<(), String> {
        if seen.len() >= crate::graph::MAX_CHAIN_DEPTH {
            return Err(format!(
                "discovery chain {:?}: more than {} splitters or resolver redirects in a row",
                self.request.service,
                crate::graph::MAX_CHAIN_DEPTH
            ));
        }
        if !seen.insert(service.to_string()) {
            return Err(format!(
                "discovery chain {:?}: detected circular reference between splitters of {service:?}",
                self.request.service
            ));
        }
        let splitter = self
            .entries
            .splitters
            .get(service)
            .cloned()
            .unwrap_or_default();
        for split in &splitter.splits {
            let target_service = if split.service.is_empty() {
                service.to_string()
            } else {
                split.service.clone()
            };
            let weight = split.weight * scale / 100.0;
            let nested = split.service_subset.is_empty()
                && target_service != service
                && self.entries.splitters.contains_key(&target_service);
            if nested {
                self.flatten_splits(&target_service, weight, seen, out)?;
                continue;
            }
            let next = self.resolver_node(&target_service, &split.service_subset)?;
            let mut extra = Map::new();
            if let Some(h) = &split.request_headers {
                extra.insert("RequestHeaders".into(), header_json(h));
            }
            if let Some(h) = &split.response_headers {
                extra.insert("ResponseHeaders".into(), header_json(h));
            }
            out.push((weight, next, Value::Object(extra)));
        }
        seen.remove(service);
        Ok(())
    }

    fn splitter_or_resolver(&mut self, service: &str, subset: &str) -> Result<String, String> {
        if subset.is_empty() && self.http && self.entries.splitters.contains_key(service) {
            self.customized = true;
            let node_id = format!("splitter:{}", Self::chain_name(service));
            if self.nodes.contains_key(&node_id) {
                return Ok(node_id);
            }
            let mut legs = Vec::new();
            self.flatten_splits(service, 100.0, &mut BTreeSet::new(), &mut legs)?;
            let splits: Vec<Value> = legs
                .into_iter()
                .map(|(weight, next, extra)| {
                    let mut m = Map::new();
                    m.insert("Weight".into(), json!((weight * 100.0).round() / 100.0));
                    m.insert("NextNode".into(), json!(next));
                    if let Value::Object(extra) = extra {
                        m.extend(extra);
                    }
                    Value::Object(m)
                })
                .collect();
            self.nodes.insert(
                node_id.clone(),
                json!({"Type": "splitter", "Name": Self::chain_name(service), "Splits": splits}),
            );
            return Ok(node_id);
        }
        self.resolver_node(service, subset)
    }

    fn router_node(&mut self, service: &str, router: &ServiceRouter) -> Result<String, String> {
        self.customized = true;
        let mut routes = Vec::new();
        let catch_all: Route = serde_json::from_value(json!({
            "Match": {"HTTP": {"PathPrefix": "/"}},
            "Destination": {"Service": service}
        }))
        .map_err(|e| e.to_string())?;
        for route in router.routes.iter().chain(std::iter::once(&catch_all)) {
            let destination = route.destination.clone().unwrap_or_default();
            let dest_service = if destination.service.is_empty() {
                service.to_string()
            } else {
                destination.service.clone()
            };
            let next = self.splitter_or_resolver(&dest_service, &destination.service_subset)?;
            routes.push(json!({"Definition": route_json(route, &dest_service), "NextNode": next}));
        }
        let node_id = format!("router:{}", Self::chain_name(service));
        self.nodes.insert(
            node_id.clone(),
            json!({"Type": "router", "Name": Self::chain_name(service), "Routes": routes}),
        );
        Ok(node_id)
    }
}

fn header_json(h: &crate::entries::HeaderModifiers) -> Value {
    let mut m = Map::new();
    if !h.add.is_empty() {
        m.insert("Add".into(), json!(h.add));
    }
    if !h.set.is_empty() {
        m.insert("Set".into(), json!(h.set));
    }
    if !h.remove.is_empty() {
        m.insert("Remove".into(), json!(h.remove));
    }
    Value::Object(m)
}

/// A route as the chain shows it: its match and its destination with the
/// service, namespace and partition filled in.
fn route_json(route: &Route, dest_service: &str) -> Value {
    let mut m = Map::new();
    if let Some(http) = route.route_match.as_ref().and_then(|rm| rm.http.as_ref()) {
        let mut h = Map::new();
        for (k, v) in [
            ("PathExact", &http.path_exact),
            ("PathPrefix", &http.path_prefix),
            ("PathRegex", &http.path_regex),
        ] {
            if !v.is_empty() {
                h.insert(k.into(), json!(v));
            }
        }
        if http.case_insensitive {
            h.insert("CaseInsensitive".into(), json!(true));
        }
        if !http.header.is_empty() {
            h.insert(
                "Header".into(),
                Value::Array(
                    http.header
                        .iter()
                        .map(|hm| {
                            let mut o = Map::new();
                            o.insert("Name".into(), json!(hm.name));
                            if hm.present {
                                o.insert("Present".into(), json!(true));
                            }
                            for (k, v) in [
                                ("Exact", &hm.exact),
                                ("Prefix", &hm.prefix),
                                ("Suffix", &hm.suffix),
                                ("Contains", &hm.contains),
                                ("Regex", &hm.regex),
                            ] {
                                if !v.is_empty() {
                                    o.insert(k.into(), json!(v));
                                }
                            }
                            if hm.ignore_case {
                                o.insert("IgnoreCase".into(), json!(true));
                            }
                            if hm.invert {
                                o.insert("Invert".into(), json!(true));
                            }
                            Value::Object(o)
                        })
                        .collect(),
                ),
            );
        }
        if !http.query_param.is_empty() {
            h.insert(
                "QueryParam".into(),
                Value::Array(
                    http.query_param
                        .iter()
                        .map(|q| {
                            let mut o = Map::new();
                            o.insert("Name".into(), json!(q.name));
                            if q.present {
                                o.insert("Present".into(), json!(true));
                            }
                            if !q.exact.is_empty() {
                                o.insert("Exact".into(), json!(q.exact));
                            }
                            if !q.regex.is_empty() {
                                o.insert("Regex".into(), json!(q.regex));
                            }
                            Value::Object(o)
                        })
                        .collect(),
                ),
            );
        }
        if !http.methods.is_empty() {
            h.insert(
                "Methods".into(),
                json!(http
                    .methods
                    .iter()
                    .map(|m| m.to_ascii_uppercase())
                    .collect::<Vec<_>>()),
            );
        }
        m.insert("Match".into(), json!({ "HTTP": h }));
    }
    let d = route.destination.clone().unwrap_or_default();
    let mut dest = Map::new();
    dest.insert("Service".into(), json!(dest_service));
    if !d.service_subset.is_empty() {
        dest.insert("ServiceSubset".into(), json!(d.service_subset));
    }
    dest.insert("Namespace".into(), json!(DEFAULT_NAMESPACE));
    dest.insert("Partition".into(), json!(DEFAULT_PARTITION));
    if !d.prefix_rewrite.is_empty() {
        dest.insert("PrefixRewrite".into(), json!(d.prefix_rewrite));
    }
    if !d.request_timeout.0.is_zero() {
        dest.insert(
            "RequestTimeout".into(),
            json!(duration_text(d.request_timeout.0)),
        );
    }
    if !d.idle_timeout.0.is_zero() {
        dest.insert("IdleTimeout".into(), json!(duration_text(d.idle_timeout.0)));
    }
    if d.num_retries > 0 {
        dest.insert("NumRetries".into(), json!(d.num_retries));
    }
    if d.retry_on_connect_failure {
        dest.insert("RetryOnConnectFailure".into(), json!(true));
    }
    if !d.retry_on.is_empty() {
        dest.insert("RetryOn".into(), json!(d.retry_on));
    }
    if !d.retry_on_status_codes.is_empty() {
        dest.insert("RetryOnStatusCodes".into(), json!(d.retry_on_status_codes));
    }
    if let Some(h) = &d.request_headers {
        dest.insert("RequestHeaders".into(), header_json(h));
    }
    if let Some(h) = &d.response_headers {
        dest.insert("ResponseHeaders".into(), header_json(h));
    }
    m.insert("Destination".into(), Value::Object(dest));
    Value::Object(m)
}

/// Compiles the discovery chain of `request.service` from `entries`.
pub fn compile(entries: &[ConfigEntry], request: &CompileRequest) -> Result<CompiledChain, String> {
    if request.service.is_empty() {
        return Err("service name is required".into());
    }
    let entries = RoutingEntries::new(entries)?;
    let protocol = if request.override_protocol.is_empty() {
        entries.protocol(&request.service)
    } else {
        request.override_protocol.to_ascii_lowercase()
    };
    let http = matches!(protocol.as_str(), "http" | "http2" | "grpc");
    let mut compiler = Compiler {
        request,
        entries,
        protocol: protocol.clone(),
        http,
        nodes: BTreeMap::new(),
        targets: BTreeMap::new(),
        customized: !request.customization_hash().is_empty(),
    };
    let service = request.service.clone();
    let start = match compiler
        .entries
        .routers
        .get(&service)
        .cloned()
        .filter(|_| http)
    {
        Some(router) => compiler.router_node(&service, &router)?,
        None => compiler.splitter_or_resolver(&service, "")?,
    };
    Ok(CompiledChain {
        service_name: service,
        namespace: DEFAULT_NAMESPACE.into(),
        partition: DEFAULT_PARTITION.into(),
        datacenter: request.datacenter.clone(),
        customization_hash: request.customization_hash(),
        default: !compiler.customized,
        protocol: compiler.protocol,
        start_node: start,
        nodes: compiler
            .nodes
            .into_iter()
            .map(|(id, node)| (id, Box::new(node)))
            .collect(),
        targets: compiler.targets.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests;
