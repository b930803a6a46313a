//! Mesh gateways: what one needs beyond the CA roots — the local
//! services with their mesh instances (reached by SNI through the
//! gateway's catch-all chain), and each other datacenter's gateways, from
//! that datacenter's catalog and from the replicated federation states,
//! whichever is fresher (Consul #10132, #11522). A task per gateway
//! follows them and publishes a snapshot as the sidecars' task does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::StreamExt;
use legate_chain::compile::Target;
use legate_types::config_entry::ConfigEntry;
use legate_types::connect::IndexedCaRoots;
use legate_types::CheckServiceNode;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::manager::{follow_reads, DataSources, ProxyRegistration, Subscription, DEBOUNCE};
use crate::snapshot::{ConnectProxySnapshot, Endpoint};
use crate::subscriptions::Subscriptions;

/// How often a gateway asks again which datacenters exist (Consul's
/// cached `Catalog.ListDatacenters` lives 30 s).
const DATACENTERS_EVERY: Duration = Duration::from_secs(30);

/// The service meta that makes a gateway carry the servers' traffic.
pub const WAN_FEDERATION_META: &str = "consul-wan-federation";

/// An address and port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GatewayAddress {
    /// Address (an IP, or a host name).
    pub address: String,
    /// Port.
    pub port: u16,
}

/// What a gateway's registration says of it beyond any proxy's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GatewayRegistration {
    /// Its tagged addresses (`lan`, `wan`, ...).
    pub tagged_addresses: BTreeMap<String, GatewayAddress>,
    /// Its service meta.
    pub meta: legate_types::catalog::Meta,
    /// The agent's DNS domain (`consul`): servers' SNI names end in it.
    pub domain: String,
}

/// A mesh gateway's configuration beyond any proxy's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MeshGatewayState {
    /// The gateway's tagged addresses (for `envoy_gateway_bind_tagged_addresses`).
    pub tagged_addresses: BTreeMap<String, GatewayAddress>,
    /// Whether it carries the servers' traffic (`consul-wan-federation`).
    pub wan_federation: bool,
    /// The local services with at least one mesh instance (sidecar or
    /// Connect-native), each with them at their LAN addresses.
    pub services: BTreeMap<String, Vec<Endpoint>>,
    /// Each other datacenter with gateways, with them at their WAN
    /// addresses.
    pub remote_gateways: BTreeMap<String, Vec<Endpoint>>,
    /// The resolver subsets of local services with their instances
    /// (service → subset → instances; `OnlyPassing` subsets' warning
    /// instances count as unhealthy).
    #[serde(default)]
    pub subsets: BTreeMap<String, BTreeMap<String, Vec<Endpoint>>>,
    /// Local services' resolver `ConnectTimeout`s, in milliseconds.
    #[serde(default)]
    pub connect_timeouts_ms: BTreeMap<String, u64>,
    /// With `wan_federation`: this datacenter's servers (the `consul`
    /// service) at their LAN addresses and server ports.
    #[serde(default)]
    pub servers: Vec<Endpoint>,
    /// The agent's DNS domain, for the servers' SNI names.
    #[serde(default)]
    pub domain: String,
}

/// The SNI name a server is dialled by through gateways:
/// `<node>.server.<dc>.<domain>`, or `server.<dc>.<domain>` for any server
/// of the datacenter (Consul's `ServerSNI`).
pub fn server_sni(node: Option<&str>, datacenter: &str, domain: &str) -> String {
    match node {
        Some(node) => format!("{node}.server.{datacenter}.{domain}"),
        None => format!("server.{datacenter}.{domain}"),
    }
}

/// What a gateway takes from a service's resolver.
#[derive(Debug, Clone, PartialEq, Default)]
struct ResolverView {
    connect_timeout_ms: Option<u64>,
    default_subset: String,
    /// Subset name → its `{Filter, OnlyPassing}`.
    subsets: BTreeMap<String, serde_json::Value>,
}

impl ResolverView {
    fn of(entry: &ConfigEntry) -> ResolverView {
        let body = &entry.body;
        ResolverView {
            connect_timeout_ms: body
                .get("ConnectTimeout")
                .and_then(|v| v.as_str())
                .and_then(|t| legate_types::duration::parse_go_duration(t).ok())
                .map(|d| d.as_millis() as u64)
                .filter(|ms| *ms > 0),
            default_subset: body
                .get("DefaultSubset")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            subsets: body
                .get("Subsets")
                .and_then(|v| v.as_object())
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
        }
    }

    fn only_passing(&self, subset: &str) -> bool {
        self.subsets
            .get(subset)
            .and_then(|s| s.get("OnlyPassing"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    }
}

impl MeshGatewayState {
    /// The gateways of `datacenter` from whichever source is fresher: its
    /// catalog or the federation states (the highest service
    /// `ModifyIndex` wins; the catalog on a tie).
    pub fn fresher(
        catalog: Option<&Vec<CheckServiceNode>>,
        federation: Option<&Vec<CheckServiceNode>>,
    ) -> Vec<Endpoint> {
        let newest = |list: &Vec<CheckServiceNode>| {
            list.iter()
                .map(|g| g.service.raft.modify_index)
                .max()
                .unwrap_or(0)
        };
        let chosen = match (catalog, federation) {
            (Some(c), Some(f)) if newest(f) > newest(c) => f,
            (Some(c), _) if !c.is_empty() => c,
            (_, Some(f)) => f,
            (Some(c), None) => c,
            (None, None) => return Vec::new(),
        };
        chosen
            .iter()
            .map(|g| Endpoint::of_instance(g, true))
            .collect()
    }
}

/// The target whose endpoints are a local service's mesh instances.
fn local_service_target(service: &str, datacenter: &str) -> Target {
    Target {
        id: format!("{service}.default.default.{datacenter}"),
        service: service.to_string(),
        service_subset: String::new(),
        namespace: "default".into(),
        partition: "default".into(),
        datacenter: datacenter.to_string(),
        mesh_gateway: Default::default(),
        subset: serde_json::Value::Object(Default::default()),
        connect_timeout: String::new(),
        sni: String::new(),
        name: String::new(),
    }
}

/// Whether a sidecar reaches `target` through mesh gateways: a target in
/// another datacenter whose mode is `local` or `remote`.
pub fn through_gateways(target: &Target, local_datacenter: &str) -> bool {
    target.datacenter != local_datacenter
        && matches!(target.mesh_gateway.mode.as_str(), "local" | "remote")
}

enum Seen {
    Instances(Vec<Endpoint>),
    Gateways(Vec<CheckServiceNode>),
}

/// A remote target's endpoints as a sidecar dials it through gateways:
/// this datacenter's gateways at their LAN addresses (`local`), or the
/// target datacenter's at their WAN addresses (`remote`). SNI and
/// certificate checks stay the target's; only the endpoints change.
/// The gateways count as healthy while any instance of the target is.
pub(crate) fn via_gateways(
    sources: Arc<dyn DataSources>,
    target: Target,
    local_datacenter: &str,
) -> Subscription<Vec<Endpoint>> {
    let (gateway_dc, wan) = if target.mesh_gateway.mode == "local" {
        (local_datacenter.to_string(), false)
    } else {
        (target.datacenter.clone(), true)
    };
    let instances = sources
        .clone()
        .follow_endpoints(target)
        .map(Seen::Instances);
    let gateways = follow_reads(move |i| {
        let (s, dc) = (sources.clone(), gateway_dc.clone());
        async move { s.mesh_gateways(&dc, i).await }
    })
    .map(Seen::Gateways);
    let merged = futures::stream::select(instances, gateways);
    Box::pin(
        merged
            .scan((None, None), move |(instances, gateways), seen| {
                match seen {
                    Seen::Instances(list) => *instances = Some(list),
                    Seen::Gateways(list) => *gateways = Some(list),
                }
                let ready = match (instances.as_ref(), gateways.as_ref()) {
                    (Some(i), Some(g)) => Some(gateway_endpoints(i, g, wan)),
                    _ => None,
                };
                futures::future::ready(Some(ready))
            })
            .filter_map(futures::future::ready),
    )
}

/// The gateways as endpoints, unhealthy unless some instance behind them
/// is healthy.
fn gateway_endpoints(
    instances: &[Endpoint],
    gateways: &[CheckServiceNode],
    wan: bool,
) -> Vec<Endpoint> {
    let any_healthy = instances
        .iter()
        .any(|e| e.health != crate::snapshot::EndpointHealth::Critical);
    gateways
        .iter()
        .map(|g| {
            let mut e = Endpoint::of_instance(g, wan);
            if !any_healthy {
                e.health = crate::snapshot::EndpointHealth::Critical;
            }
            e
        })
        .collect()
}

enum Update {
    Roots(IndexedCaRoots),
    Services(Vec<String>),
    Datacenters(Vec<String>),
    Federation(BTreeMap<String, Vec<CheckServiceNode>>),
    Resolvers(Vec<ConfigEntry>),
    /// A subset's instances, by its follow key.
    SubsetEndpoints(String, Vec<Endpoint>),
    ServiceEndpoints(String, Vec<Endpoint>),
    CatalogGateways(String, Vec<CheckServiceNode>),
    /// The local servers (the `consul` service).
    Servers(Vec<CheckServiceNode>),
}

/// What a gateway has heard so far.
#[derive(Default)]
struct Heard {
    roots: Option<IndexedCaRoots>,
    services: Option<BTreeSet<String>>,
    endpoints: BTreeMap<String, Vec<Endpoint>>,
    catalog_gateways: BTreeMap<String, Vec<CheckServiceNode>>,
    federation: BTreeMap<String, Vec<CheckServiceNode>>,
    resolvers: BTreeMap<String, ResolverView>,
    /// Follow key (service, subset and definition) → instances.
    subset_endpoints: BTreeMap<String, Vec<Endpoint>>,
    servers: Vec<CheckServiceNode>,
}

/// What a gateway's task follows: its fixed sources, and one
/// subscription per local service, remote datacenter and resolver subset.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Follow {
    Roots,
    Services,
    Resolvers,
    Federation,
    Datacenters,
    /// This datacenter's servers (a gateway carrying their traffic).
    Servers,
    /// A local service's instances.
    Service(String),
    /// A remote datacenter's gateways in its catalog.
    Datacenter(String),
    /// A subset's instances, by [`subset_key`].
    Subset(String),
}

type Followed = Subscriptions<Follow, Update>;

/// Follows the instances of every subset of every local service's
/// resolver (and stops following those no longer defined).
fn follow_subsets(
    followed: &mut Followed,
    heard: &mut Heard,
    sources: &Arc<dyn DataSources>,
    local: &str,
) {
    let services = heard.services.clone().unwrap_or_default();
    let wanted: BTreeMap<String, (String, String, serde_json::Value)> = heard
        .resolvers
        .iter()
        .filter(|(service, _)| services.contains(*service))
        .flat_map(|(service, view)| {
            view.subsets.iter().map(move |(subset, definition)| {
                (
                    subset_key(service, subset, definition),
                    (service.clone(), subset.clone(), definition.clone()),
                )
            })
        })
        .collect();
    followed.retain(|f| !matches!(f, Follow::Subset(key) if !wanted.contains_key(key)));
    heard
        .subset_endpoints
        .retain(|key, _| wanted.contains_key(key));
    for (key, (service, subset, definition)) in wanted {
        if followed.contains(&Follow::Subset(key.clone())) {
            continue;
        }
        let mut target = local_service_target(&service, local);
        target.service_subset = subset;
        target.subset = definition;
        let tag = key.clone();
        followed.add(
            Follow::Subset(key),
            sources.clone().follow_endpoints(target),
            move |e| Update::SubsetEndpoints(tag.clone(), e),
        );
    }
}

/// The follow key of a subset: its service, name and definition (a
/// changed filter is a new subscription).
fn subset_key(service: &str, subset: &str, definition: &serde_json::Value) -> String {
    format!("{service}/{subset}/{definition}")
}

/// Runs one mesh gateway: follows its sources and publishes a snapshot
/// whenever they change (debounced), once the roots and the local
/// service list are known.
pub(crate) async fn run_gateway(
    sources: Arc<dyn DataSources>,
    registration: ProxyRegistration,
    out: watch::Sender<Option<Arc<ConnectProxySnapshot>>>,
) {
    let gateway = registration.gateway.clone().unwrap_or_default();
    let local = registration.datacenter.clone();
    let mut followed = Followed::new();
    let s = sources.clone();
    followed.add(
        Follow::Roots,
        follow_reads(move |i| {
            let s = s.clone();
            async move { s.roots(i).await }
        }),
        Update::Roots,
    );
    let (s, dc) = (sources.clone(), local.clone());
    followed.add(
        Follow::Services,
        follow_reads(move |i| {
            let (s, dc) = (s.clone(), dc.clone());
            async move { s.services(&dc, i).await }
        }),
        Update::Services,
    );
    let (s, dc) = (sources.clone(), local.clone());
    followed.add(
        Follow::Resolvers,
        follow_reads(move |i| {
            let (s, dc) = (s.clone(), dc.clone());
            async move { s.resolvers(&dc, i).await }
        }),
        Update::Resolvers,
    );
    let s = sources.clone();
    followed.add(
        Follow::Federation,
        follow_reads(move |i| {
            let s = s.clone();
            async move { s.federation_gateways(i).await }
        }),
        Update::Federation,
    );
    let s = sources.clone();
    followed.add(
        Follow::Datacenters,
        Box::pin(futures::stream::unfold(true, move |first| {
            let s = s.clone();
            async move {
                if !first {
                    tokio::time::sleep(DATACENTERS_EVERY).await;
                }
                loop {
                    match s.datacenters().await {
                        Ok(list) => return Some((list, false)),
                        Err(e) => {
                            tracing::debug!(error = %e, "mesh gateway: listing datacenters failed");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            }
        })),
        Update::Datacenters,
    );
    let mut heard = Heard::default();
    let wan_federation = gateway
        .meta
        .get(WAN_FEDERATION_META)
        .is_some_and(|v| v == "1");
    if wan_federation {
        let (s, dc) = (sources.clone(), local.clone());
        followed.add(
            Follow::Servers,
            follow_reads(move |i| {
                let (s, dc) = (s.clone(), dc.clone());
                async move { s.servers(&dc, i).await }
            }),
            Update::Servers,
        );
    }
    loop {
        let first = followed.next().await;
        let received = std::time::Instant::now();
        let mut pending = vec![first];
        let deadline = tokio::time::Instant::now() + DEBOUNCE;
        while let Ok(more) = tokio::time::timeout_at(deadline, followed.next()).await {
            pending.push(more);
        }
        for update in pending {
            match update {
                Update::Roots(roots) => heard.roots = Some(roots),
                Update::Services(names) => {
                    let names: BTreeSet<String> = names.into_iter().collect();
                    followed
                        .retain(|f| !matches!(f, Follow::Service(name) if !names.contains(name)));
                    heard.endpoints.retain(|name, _| names.contains(name));
                    for name in &names {
                        let key = Follow::Service(name.clone());
                        if followed.contains(&key) {
                            continue;
                        }
                        let target = local_service_target(name, &local);
                        let tag = name.clone();
                        followed.add(key, sources.clone().follow_endpoints(target), move |e| {
                            Update::ServiceEndpoints(tag.clone(), e)
                        });
                    }
                    heard.services = Some(names);
                }
                Update::ServiceEndpoints(name, list) => {
                    if heard.services.as_ref().is_some_and(|s| s.contains(&name)) {
                        heard.endpoints.insert(name, list);
                    }
                }
                Update::Datacenters(list) => {
                    let remote: BTreeSet<String> =
                        list.into_iter().filter(|dc| *dc != local).collect();
                    followed
                        .retain(|f| !matches!(f, Follow::Datacenter(dc) if !remote.contains(dc)));
                    heard.catalog_gateways.retain(|dc, _| remote.contains(dc));
                    for dc in remote {
                        let key = Follow::Datacenter(dc.clone());
                        if followed.contains(&key) {
                            continue;
                        }
                        let s = sources.clone();
                        let d = dc.clone();
                        let reads = follow_reads(move |i| {
                            let (s, d) = (s.clone(), d.clone());
                            async move { s.mesh_gateways(&d, i).await }
                        });
                        followed.add(key, reads, move |list| {
                            Update::CatalogGateways(dc.clone(), list)
                        });
                    }
                }
                Update::CatalogGateways(dc, list) => {
                    if followed.contains(&Follow::Datacenter(dc.clone())) {
                        heard.catalog_gateways.insert(dc, list);
                    }
                }
                Update::Federation(states) => heard.federation = states,
                Update::Servers(list) => heard.servers = list,
                Update::Resolvers(entries) => {
                    heard.resolvers = entries
                        .iter()
                        .map(|e| (e.name.clone(), ResolverView::of(e)))
                        .collect();
                }
                Update::SubsetEndpoints(key, list) => {
                    if followed.contains(&Follow::Subset(key.clone())) {
                        heard.subset_endpoints.insert(key, list);
                    }
                }
            }
        }
        follow_subsets(&mut followed, &mut heard, &sources, &local);
        let Some(mut snapshot) = heard.snapshot(&registration, &gateway, wan_federation) else {
            continue;
        };
        let changed = out.borrow().as_ref().is_none_or(|current| {
            snapshot.changed_at = current.changed_at;
            **current != snapshot
        });
        if changed {
            snapshot.changed_at = Some(received);
            out.send_replace(Some(Arc::new(snapshot)));
        }
    }
}

impl Heard {
    fn snapshot(
        &self,
        registration: &ProxyRegistration,
        gateway: &GatewayRegistration,
        wan_federation: bool,
    ) -> Option<ConnectProxySnapshot> {
        let roots = self.roots.as_ref()?;
        self.services.as_ref()?;
        let local = &registration.datacenter;
        let mut services: BTreeMap<String, Vec<Endpoint>> = self
            .endpoints
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(name, list)| (name.clone(), list.clone()))
            .collect();
        let mut subsets: BTreeMap<String, BTreeMap<String, Vec<Endpoint>>> = BTreeMap::new();
        let mut connect_timeouts_ms = BTreeMap::new();
        for (service, view) in &self.resolvers {
            if !services.contains_key(service) {
                continue;
            }
            if let Some(ms) = view.connect_timeout_ms {
                connect_timeouts_ms.insert(service.clone(), ms);
            }
            for (subset, definition) in &view.subsets {
                let key = subset_key(service, subset, definition);
                let Some(list) = self.subset_endpoints.get(&key) else {
                    continue;
                };
                let only_passing = view.only_passing(subset);
                let list = list
                    .iter()
                    .map(|e| {
                        let mut e = e.clone();
                        if only_passing && e.health == crate::snapshot::EndpointHealth::Warning {
                            e.health = crate::snapshot::EndpointHealth::Critical;
                        }
                        e
                    })
                    .collect();
                subsets
                    .entry(service.clone())
                    .or_default()
                    .insert(subset.clone(), list);
            }
            // The unnamed cluster serves the default subset's instances.
            if let Some(list) = subsets
                .get(service)
                .and_then(|s| s.get(&view.default_subset))
            {
                services.insert(service.clone(), list.clone());
            }
        }
        let datacenters: BTreeSet<&String> = self
            .catalog_gateways
            .keys()
            .chain(self.federation.keys())
            .filter(|dc| *dc != local)
            .collect();
        let remote_gateways = datacenters
            .into_iter()
            .map(|dc| {
                let list = MeshGatewayState::fresher(
                    self.catalog_gateways.get(dc),
                    self.federation.get(dc),
                );
                (dc.clone(), list)
            })
            .filter(|(_, list)| !list.is_empty())
            .collect();
        Some(ConnectProxySnapshot {
            proxy_id: registration.proxy_id.clone(),
            proxy_service: registration.service.clone(),
            destination_service: String::new(),
            native: false,
            address: registration.address.clone(),
            port: registration.port,
            local_service_address: String::new(),
            local_service_port: 0,
            config: registration.proxy.config.clone(),
            datacenter: local.clone(),
            trust_domain: roots.trust_domain.clone(),
            roots: roots.roots.iter().map(|r| r.root_cert.clone()).collect(),
            leaf_cert: String::new(),
            leaf_key: String::new(),
            intentions: Arc::new(Vec::new()),
            default_allow: false,
            protocol: "tcp".into(),
            upstreams: Vec::new(),
            query_upstreams: Vec::new(),
            pending_upstreams: Vec::new(),
            mesh_gateway: Some(Arc::new(MeshGatewayState {
                tagged_addresses: gateway.tagged_addresses.clone(),
                wan_federation,
                services,
                remote_gateways,
                subsets,
                connect_timeouts_ms,
                servers: self
                    .servers
                    .iter()
                    .map(|s| Endpoint::of_instance(s, false))
                    .collect(),
                domain: gateway.domain.clone(),
            })),
            changed_at: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(address: &str, wan: &str, modify_index: u64) -> CheckServiceNode {
        let mut g = CheckServiceNode::default();
        g.node.node = format!("n-{address}");
        g.node.address = address.into();
        g.service.kind = "mesh-gateway".into();
        g.service.address = address.into();
        g.service.port = 8443;
        g.service.tagged_addresses.insert(
            "wan".into(),
            legate_types::ServiceAddress {
                address: wan.into(),
                port: 443,
            },
        );
        g.service.raft.modify_index = modify_index;
        g
    }

    #[test]
    fn gateways_stand_in_for_a_target_healthy_only_while_an_instance_is() {
        let gateways = vec![gateway("10.0.1.1", "198.18.1.1", 3)];
        let instance = |health| Endpoint {
            node: "n".into(),
            service_id: "db".into(),
            address: "10.0.2.5".into(),
            port: 21000,
            health,
            weight: 1,
        };
        use crate::snapshot::EndpointHealth::*;
        let remote = gateway_endpoints(&[instance(Critical), instance(Warning)], &gateways, true);
        assert_eq!(
            (remote[0].address.as_str(), remote[0].port),
            ("198.18.1.1", 443)
        );
        assert_eq!(remote[0].health, Passing);
        let local = gateway_endpoints(&[instance(Critical)], &gateways, false);
        assert_eq!(
            (local[0].address.as_str(), local[0].port),
            ("10.0.1.1", 8443)
        );
        assert_eq!(local[0].health, Critical, "nothing healthy behind it");
        let mut target = local_service_target("db", "dc2");
        assert!(!through_gateways(&target, "dc1"), "mode none");
        target.mesh_gateway.mode = "local".into();
        assert!(through_gateways(&target, "dc1"));
        assert!(
            !through_gateways(&target, "dc2"),
            "never within a datacenter"
        );
    }

    #[test]
    fn the_fresher_source_of_a_datacenters_gateways_wins_at_their_wan_addresses() {
        let catalog = vec![gateway("10.0.2.1", "198.18.2.1", 7)];
        let federation = vec![gateway("10.0.2.9", "198.18.2.9", 9)];
        let chosen = MeshGatewayState::fresher(Some(&catalog), Some(&federation));
        assert_eq!(
            (chosen[0].address.as_str(), chosen[0].port),
            ("198.18.2.9", 443)
        );
        let chosen = MeshGatewayState::fresher(Some(&federation), Some(&catalog));
        assert_eq!(chosen[0].address, "198.18.2.9", "the catalog, fresher");
        let chosen = MeshGatewayState::fresher(None, Some(&catalog));
        assert_eq!(chosen[0].address, "198.18.2.1");
        assert!(MeshGatewayState::fresher(None, None).is_empty());
        // A catalog that lost its gateways defers to the federation state.
        let chosen = MeshGatewayState::fresher(Some(&Vec::new()), Some(&catalog));
        assert_eq!(chosen.len(), 1);
    }
}
