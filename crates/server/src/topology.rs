//! A service's topology, as Consul's `Internal.ServiceTopology` computes
//! it (`state.ServiceTopology`): its upstreams (the explicit upstreams of
//! its proxies; with a transparent or Connect-native instance, also every
//! service intentions let it reach; an upstream with no instances but
//! routing config entries as `routing-config`), its downstreams (proxies
//! whose upstream is the service or routes to it through a discovery
//! chain; services intentions let in that run transparent or native), what
//! intentions decide for each edge, its protocol and whether its proxies
//! are all transparent. Legate reads the catalog instead of keeping
//! Consul's mesh-topology table.

use std::collections::{BTreeMap, BTreeSet};

use legate_acl::{Access, Resource};
use legate_chain::intentions::{decide, rule_of, Action, Rule};
use legate_state::{Table, Tables};
use legate_types::config_entry::ConfigEntry;
use legate_types::ui::{topology_source as source, IntentionDecisionSummary, ServiceTopology};
use legate_types::{CheckServiceNode, Queried, QueryOptions, RpcError};
use serde_json::Value;

use crate::Server;

/// The routing kinds that make an upstream without instances show up.
const ROUTING_GRAPH_KINDS: [&str; 3] = ["service-router", "service-splitter", "service-resolver"];

/// Whether `name` has a router, splitter or resolver entry.
fn has_routing_config(entries: &[ConfigEntry], name: &str) -> bool {
    entries
        .iter()
        .any(|e| e.name == name && ROUTING_GRAPH_KINDS.contains(&e.kind.as_str()))
}

/// Intentions' decision for `from` → `to` (`allow_permissions`: whether an
/// intention with L7 permissions counts as allowed).
fn decision(
    rules: &[Rule],
    from: &str,
    to: &str,
    default_allow: bool,
    allow_permissions: bool,
) -> IntentionDecisionSummary {
    let decided = decide(rules, from, to, default_allow);
    let Some(rule) = decided.matched else {
        return IntentionDecisionSummary {
            allowed: default_allow,
            default_allow,
            ..Default::default()
        };
    };
    let mut summary = IntentionDecisionSummary {
        allowed: rule.action == Some(Action::Allow),
        has_exact: rule.source != "*" && rule.destination != "*",
        default_allow,
        ..Default::default()
    };
    if rule.is_l7() {
        summary.allowed = allow_permissions;
        summary.has_permissions = true;
    }
    summary
}

/// How an edge intentions allow is labelled.
fn intention_source(d: &IntentionDecisionSummary) -> &'static str {
    if d.has_exact {
        source::SPECIFIC_INTENTION
    } else if d.default_allow {
        source::DEFAULT_ALLOW
    } else {
        source::WILDCARD_INTENTION
    }
}

/// The service an instance stands for: a sidecar's destination, else its own.
fn logical_name(csn: &CheckServiceNode) -> &str {
    match (&csn.service.kind[..], &csn.service.proxy) {
        ("connect-proxy", Some(proxy)) => &proxy.destination_service_name,
        _ => &csn.service.service,
    }
}

fn is_native(csn: &CheckServiceNode) -> bool {
    csn.service.connect.as_ref().is_some_and(|c| c.native)
}

fn is_transparent(csn: &CheckServiceNode) -> bool {
    csn.service
        .proxy
        .as_ref()
        .is_some_and(|p| p.mode == "transparent")
}

/// Instances of `names` and their connect endpoints (sidecars, natives).
fn instances_of(all: &[CheckServiceNode], names: &BTreeSet<String>) -> Vec<CheckServiceNode> {
    all.iter()
        .filter(|csn| names.contains(&csn.service.service) || names.contains(logical_name(csn)))
        .cloned()
        .collect()
}

/// (downstream, upstream) pairs the registrations name: proxies' explicit
/// upstreams (not prepared queries) and ingress gateways' services.
fn registered_edges(
    all: &[CheckServiceNode],
    entries: &[ConfigEntry],
) -> BTreeSet<(String, String)> {
    let mut edges = BTreeSet::new();
    for csn in all {
        if csn.service.kind != "connect-proxy" && !is_native(csn) {
            continue;
        }
        let Some(proxy) = &csn.service.proxy else {
            continue;
        };
        for upstream in proxy.upstreams.iter() {
            if upstream.destination_type != "prepared_query"
                && !upstream.destination_name.is_empty()
            {
                edges.insert((
                    logical_name(csn).to_string(),
                    upstream.destination_name.clone(),
                ));
            }
        }
    }
    for entry in entries.iter().filter(|e| e.kind == "ingress-gateway") {
        let listeners = entry.body.get("Listeners").and_then(Value::as_array);
        for service in listeners
            .into_iter()
            .flatten()
            .filter_map(|l| l.get("Services").and_then(Value::as_array))
            .flatten()
        {
            let name = service.get("Name").and_then(Value::as_str).unwrap_or("");
            if !name.is_empty() && name != "*" {
                edges.insert((entry.name.clone(), name.to_string()));
            }
        }
    }
    edges
}

/// The protocol Consul reports for the service's metrics.
fn metrics_protocol(entries: &[ConfigEntry], service: &str, kind: &str) -> String {
    if kind == "ingress-gateway" {
        let gateway = entries
            .iter()
            .find(|e| e.kind == "ingress-gateway" && e.name == service);
        let Some(gateway) = gateway else {
            return String::new();
        };
        let listeners: Vec<&Value> = gateway
            .body
            .get("Listeners")
            .and_then(Value::as_array)
            .map(|l| l.iter().collect())
            .unwrap_or_default();
        let http_like = |l: &&Value| {
            matches!(
                l.get("Protocol").and_then(Value::as_str),
                Some("http" | "http2" | "grpc")
            )
        };
        return if !listeners.is_empty() && listeners.iter().all(http_like) {
            "http".into()
        } else {
            "tcp".into()
        };
    }
    // The same reading as a discovery chain's: service-defaults, then
    // proxy-defaults' `protocol`, then tcp.
    legate_chain::entries::RoutingEntries::new(entries)
        .map(|routing| routing.protocol(service))
        .unwrap_or_else(|_| "tcp".into())
}

/// Upstream names whose discovery chain (in `datacenter`) reaches `service`.
fn routing_sources(
    entries: &[ConfigEntry],
    candidates: &BTreeSet<String>,
    service: &str,
    datacenter: &str,
    trust_domain: &str,
) -> BTreeSet<String> {
    let mut found = BTreeSet::from([service.to_string()]);
    for name in candidates {
        if name == service || !has_routing_config(entries, name) {
            continue;
        }
        let request = legate_chain::CompileRequest {
            service: name.clone(),
            datacenter: datacenter.to_string(),
            trust_domain: trust_domain.to_string(),
            override_protocol: String::new(),
            override_connect_timeout: None,
            override_mesh_gateway: String::new(),
        };
        if let Ok(chain) = legate_chain::compile(entries, &request) {
            if chain.targets.values().any(|t| t.service == service) {
                found.insert(name.clone());
            }
        }
    }
    found
}

/// Everything the topology of `service` reads, computed from one view.
struct Inputs<'a> {
    all: &'a [CheckServiceNode],
    entries: &'a [ConfigEntry],
    rules: &'a [Rule],
    default_allow: bool,
}

impl Inputs<'_> {
    /// Typical services (and, for downstreams, ingress gateways) other
    /// than `consul` and `service` that intentions let through.
    fn intention_neighbours(
        &self,
        service: &str,
        downstream: bool,
    ) -> BTreeMap<String, IntentionDecisionSummary> {
        let mut names = BTreeSet::new();
        for csn in self.all {
            let kind = csn.service.kind.as_str();
            if kind.is_empty() || (downstream && kind == "ingress-gateway") {
                names.insert(csn.service.service.clone());
            }
        }
        names.remove("consul");
        names.remove(service);
        names
            .into_iter()
            .filter_map(|name| {
                let (from, to) = if downstream {
                    (name.as_str(), service)
                } else {
                    (service, name.as_str())
                };
                let d = decision(self.rules, from, to, self.default_allow, true);
                d.allowed.then_some((name, d))
            })
            .collect()
    }
}

fn topology(
    inputs: &Inputs<'_>,
    service: &str,
    kind: &str,
    datacenter: &str,
    trust_domain: Option<&str>,
) -> ServiceTopology {
    let Inputs {
        all,
        entries,
        rules,
        default_allow,
    } = *inputs;
    let endpoints: Vec<&CheckServiceNode> = all
        .iter()
        .filter(|csn| {
            (csn.service.kind == "connect-proxy" && logical_name(csn) == service)
                || (csn.service.service == service && is_native(csn))
        })
        .collect();
    let plain = kind.is_empty();
    let has_transparent = plain && endpoints.iter().any(|c| is_transparent(c));
    let connect_native = plain && endpoints.iter().any(|c| is_native(c));
    let mut out = ServiceTopology {
        metrics_protocol: metrics_protocol(entries, service, kind),
        transparent_proxy: plain
            && !endpoints.is_empty()
            && endpoints.iter().all(|c| is_transparent(c)),
        ..Default::default()
    };
    let edges = registered_edges(all, entries);

    // Upstreams.
    for (_, upstream) in edges.iter().filter(|(down, _)| down == service) {
        out.upstream_sources
            .insert(upstream.clone(), source::REGISTRATION.into());
    }
    if has_transparent || connect_native {
        for (name, d) in inputs.intention_neighbours(service, false) {
            out.upstream_sources
                .entry(name)
                .or_insert_with(|| intention_source(&d).into());
        }
    }
    for name in out.upstream_sources.keys() {
        let d = decision(rules, service, name, default_allow, false);
        out.upstream_decisions.insert(name.clone(), d);
    }
    let names: BTreeSet<String> = out.upstream_sources.keys().cloned().collect();
    out.upstreams = instances_of(all, &names);
    if !has_transparent && !connect_native {
        let registered = |n: &str| {
            out.upstream_sources
                .get(n)
                .is_some_and(|s| s == source::REGISTRATION)
        };
        out.upstreams.retain(|csn| registered(logical_name(csn)));
    }
    for name in &names {
        let has_instance = out.upstreams.iter().any(|c| &c.service.service == name);
        if !has_instance && has_routing_config(entries, name) {
            out.upstream_sources
                .insert(name.clone(), source::ROUTING_CONFIG.into());
        }
    }

    // Downstreams.
    let reachable = match trust_domain {
        Some(td) => {
            let candidates = edges.iter().map(|(_, up)| up.clone()).collect();
            routing_sources(entries, &candidates, service, datacenter, td)
        }
        None => BTreeSet::from([service.to_string()]),
    };
    for (down, _) in edges.iter().filter(|(_, up)| reachable.contains(up)) {
        if down != service {
            out.downstream_sources
                .insert(down.clone(), source::REGISTRATION.into());
        }
    }
    for (name, d) in inputs.intention_neighbours(service, true) {
        out.downstream_sources
            .entry(name)
            .or_insert_with(|| intention_source(&d).into());
    }
    for name in out.downstream_sources.keys() {
        let d = decision(rules, name, service, default_allow, false);
        out.downstream_decisions.insert(name.clone(), d);
    }
    let names: BTreeSet<String> = out.downstream_sources.keys().cloned().collect();
    let candidates = instances_of(all, &names);
    let in_mesh: BTreeSet<&str> = candidates
        .iter()
        .filter(|c| is_transparent(c) || is_native(c))
        .map(logical_name)
        .collect();
    let mut kept = Vec::new();
    for csn in &candidates {
        let logical = logical_name(csn);
        let registered = out
            .downstream_sources
            .get(logical)
            .is_some_and(|s| s == source::REGISTRATION);
        if in_mesh.contains(logical) || registered {
            kept.push(csn.clone());
        } else {
            out.downstream_sources.remove(logical);
            out.downstream_decisions.remove(logical);
        }
    }
    out.downstreams = kept;
    out
}

impl Server {
    /// `Internal.ServiceTopology`: `service:read` on `service`, blocking,
    /// instances the token may not read (node or service) left out.
    pub(crate) async fn service_topology(
        &self,
        opts: &QueryOptions,
        service: String,
        kind: String,
    ) -> Result<Queried<ServiceTopology>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if service.is_empty() {
            return Err(RpcError::BadRequest("Must provide a service name".into()));
        }
        if !matches!(kind.as_str(), "" | "ingress-gateway") {
            return Err(RpcError::BadRequest(format!("unsupported kind {kind:?}")));
        }
        self.authorize(
            &opts.token,
            crate::Resource::Service(service.clone()),
            crate::Access::Read,
        )?;
        let default_allow = self.config.default_intention_allow;
        let datacenter = self.config.datacenter.clone();
        let mut answer = self
            .blocking_query(
                opts,
                |w| {
                    w.tables(&[
                        Table::Nodes,
                        Table::Services,
                        Table::Checks,
                        Table::ConfigEntries,
                    ])
                },
                |t: &Tables| {
                    let (catalog_index, all) = t.check_service_nodes_all();
                    let (entries_index, entries) = t.config_entries_of_kinds(
                        &legate_chain::ROUTING_KINDS
                            .iter()
                            .chain(["ingress-gateway"].iter())
                            .map(|k| k.to_string())
                            .collect::<Vec<_>>(),
                    );
                    let (intentions_index, intentions) = crate::intentions::all_intentions(t);
                    let rules: Vec<Rule> = intentions.iter().map(rule_of).collect();
                    let trust_domain = t
                        .system_metadata(crate::CLUSTER_ID_KEY)
                        .map(|id| format!("{id}.consul"));
                    let inputs = Inputs {
                        all: &all,
                        entries: &entries,
                        rules: &rules,
                        default_allow,
                    };
                    let index = catalog_index.max(entries_index).max(intentions_index);
                    let value = topology(
                        &inputs,
                        &service,
                        &kind,
                        &datacenter,
                        trust_domain.as_deref(),
                    );
                    Ok((index, value))
                },
            )
            .await?;
        let Some(resolved) = self.request_token(&opts.token)? else {
            return Ok(answer);
        };
        let may_read = |csn: &CheckServiceNode| {
            resolved
                .authorizer
                .allowed(Resource::Node, &csn.node.node, Access::Read)
                && resolved.authorizer.allowed(
                    Resource::Service,
                    &csn.service.service,
                    Access::Read,
                )
        };
        let before = answer.value.upstreams.len() + answer.value.downstreams.len();
        answer.value.upstreams.retain(|c| may_read(c));
        answer.value.downstreams.retain(|c| may_read(c));
        let after = answer.value.upstreams.len() + answer.value.downstreams.len();
        answer.meta.results_filtered_by_acls = after < before;
        Ok(answer)
    }
}
