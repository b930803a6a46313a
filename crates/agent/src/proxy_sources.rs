//! The agent's side of proxycfg: [`DataSources`] over the servers (blocking
//! reads) and the leaf manager, and a task that keeps the manager's set of
//! proxies equal to the local `connect-proxy` registrations.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_chain::compile::Target;
use legate_chain::CompiledChain;
use legate_proxycfg::gateway::{GatewayAddress, GatewayRegistration};
use legate_proxycfg::prepared_query::{in_stable_order, QUERY_REFRESH};
use legate_proxycfg::{
    DataSources, Endpoint, Fetched, Manager, ProxyRegistration, QueryEndpoint, Subscription,
};
use legate_types::connect::{IndexedCaRoots, IssuedCert};
use legate_types::intention::Intention;
use legate_types::prepared_query::{ExecuteRequest, ExecuteResponse};
use legate_types::rpc::{ChainOverrides, ServerRpc, ServiceQuery, Watched};
use legate_types::{CheckServiceNode, Consistency, QueryOptions};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::acl_tokens::TokenStore;
use crate::cache_config::CacheConfig;
use crate::changes_rpc::batched_changes;
use crate::leaf::LeafManager;
use crate::shared_watch::{json_weigher, polled, CacheLimits, SharedWatch};
use crate::Agent;

/// How long one blocking read of a data source may wait.
const WAIT: Duration = Duration::from_secs(300);

/// How long a key nobody asks for stays cached (a proxy that restarts
/// asks again within milliseconds; one that was deregistered frees its
/// keys within this and half of it again).
pub const CACHE_IDLE_TTL: Duration = Duration::from_secs(30);

/// The token that signs a service's leaf certificate for its proxies.
pub type LeafToken = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Data sources backed by the agent's RPC client and leaf manager. Chains,
/// endpoints, intentions and roots go through shared, bounded caches, so
/// proxies with the same upstream share one blocking query per key.
pub struct AgentSources {
    leaf_certs: Arc<LeafManager>,
    /// The token that signs a service's leaf for its local proxies.
    leaf_token: LeafToken,
    default_allow: bool,
    roots: Arc<SharedWatch<(), IndexedCaRoots>>,
    intentions: Arc<SharedWatch<String, Arc<Vec<Intention>>>>,
    /// Keyed by (service, datacenter compiled in, mesh gateway mode override).
    chains: Arc<SharedWatch<(String, String, String), Arc<CompiledChain>>>,
    /// Keyed by (service, datacenter, subset filter).
    endpoints: Arc<SharedWatch<(String, String, String), Vec<Endpoint>>>,
    /// Prepared-query upstreams' answers, keyed by (query, datacenter):
    /// each query polled once for every proxy that uses it.
    queries: Arc<SharedWatch<(String, String), Vec<QueryEndpoint>>>,
    /// Mesh gateways' own reads (one gateway per agent, as a rule: not
    /// shared).
    gateway_reads: GatewayReads,
}

/// A mesh gateway's reads of the catalog and the federation states,
/// with the agent's token.
struct GatewayReads {
    rpc: Arc<dyn ServerRpc>,
    tokens: Arc<TokenStore>,
    datacenter: String,
}

/// A blocking read of the shared caches, made with the agent's own token
/// (`acl.tokens.agent`, else `default`): the caches hold what the agent
/// may read, and each proxy sees only what its own token may read of it
/// ([`crate::proxy_acl::visible_snapshot`]).
fn opts(datacenter: &str, min_index: u64, token: String) -> QueryOptions {
    QueryOptions {
        datacenter: datacenter.to_string(),
        min_index,
        max_wait: Some(WAIT),
        consistency: Consistency::Stale,
        token,
        ..Default::default()
    }
}

impl AgentSources {
    /// Sources over `rpc` for the agent `node` in `datacenter`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rpc: Arc<dyn ServerRpc>,
        tokens: Arc<TokenStore>,
        leaf_certs: Arc<LeafManager>,
        leaf_token: LeafToken,
        intentions: Arc<SharedWatch<String, Arc<Vec<Intention>>>>,
        datacenter: String,
        node: String,
        default_allow: bool,
        cache: &CacheConfig,
    ) -> AgentSources {
        let (r, dc, t) = (rpc.clone(), datacenter.clone(), tokens.clone());
        let roots = SharedWatch::new(
            Arc::new(move |_: (), min| {
                let (r, dc, token) = (r.clone(), dc.clone(), t.agent_token());
                Box::pin(async move { fetch_roots(&*r, &dc, min, token).await })
            }),
            CacheLimits {
                max_entries: 1,
                ..cache.limits("roots", CACHE_IDLE_TTL)
            },
            json_weigher(),
        );
        let (r, dc, t) = (rpc.clone(), datacenter.clone(), tokens.clone());
        let chains = SharedWatch::batched(
            Arc::new(
                move |(service, compile_dc, mode): (String, String, String), min| {
                    let (r, dc, token) = (r.clone(), dc.clone(), t.agent_token());
                    let read = ChainRead {
                        service,
                        compile_datacenter: compile_dc,
                        mesh_gateway_mode: mode,
                    };
                    Box::pin(async move { fetch_chain(&*r, &dc, read, min, token).await })
                },
            ),
            // Every chain is compiled from the config entries.
            batched_changes(rpc.clone(), tokens.clone(), {
                let dc = datacenter.clone();
                move |_: &(String, String, String)| (dc.clone(), Watched::ConfigEntries)
            }),
            cache.limits("chains", CACHE_IDLE_TTL),
            json_weigher(),
        );
        let (r, local_dc, t) = (rpc.clone(), datacenter.clone(), tokens.clone());
        let queries = SharedWatch::new(
            polled(
                QUERY_REFRESH,
                move |(query, dc): (String, String), first| {
                    let read = QueryRead {
                        query,
                        datacenter: dc,
                        local_datacenter: local_dc.clone(),
                        node: node.clone(),
                    };
                    let (r, token) = (r.clone(), t.agent_token());
                    async move { run_query(&*r, read, first, token).await }
                },
            ),
            cache.limits("prepared_query_upstreams", CACHE_IDLE_TTL),
            json_weigher(),
        );
        let gateway_reads = GatewayReads {
            rpc: rpc.clone(),
            tokens: tokens.clone(),
            datacenter: datacenter.clone(),
        };
        let (r, local_dc, t) = (rpc.clone(), datacenter, tokens.clone());
        let endpoints = SharedWatch::batched(
            Arc::new(
                move |(service, dc, filter): (String, String, String), min| {
                    let (r, token) = (r.clone(), t.agent_token());
                    // Instances in another datacenter are dialled at their WAN addresses.
                    let wan = dc != local_dc;
                    let read = EndpointsRead {
                        service,
                        datacenter: dc,
                        filter,
                        wan,
                    };
                    Box::pin(async move { fetch_endpoints(&*r, read, min, token).await })
                },
            ),
            batched_changes(
                rpc.clone(),
                tokens,
                |(service, dc, _): &(String, String, String)| {
                    (dc.clone(), Watched::Service(service.clone()))
                },
            ),
            cache.limits("endpoints", CACHE_IDLE_TTL),
            json_weigher(),
        );
        AgentSources {
            leaf_certs,
            leaf_token,
            default_allow,
            roots,
            intentions,
            chains,
            endpoints,
            queries,
            gateway_reads,
        }
    }
}

/// One run of a prepared query for a proxy's upstream.
struct QueryRead {
    query: String,
    datacenter: String,
    local_datacenter: String,
    /// This agent's node (`Near: "_agent"`).
    node: String,
}

/// Runs a query for the queries cache (polled every [`QUERY_REFRESH`]).
/// A first run that fails answers empty, so the proxy's other upstreams
/// are not held up; a later failure is an error, and the cache keeps the
/// last answer (fail-static).
async fn run_query(
    rpc: &dyn ServerRpc,
    read: QueryRead,
    first: bool,
    token: String,
) -> Result<Vec<QueryEndpoint>, String> {
    let answer = rpc
        .prepared_query_execute(
            &opts(&read.datacenter, 0, token),
            ExecuteRequest {
                id_or_name: read.query.clone(),
                connect: true,
                agent_node: read.node.clone(),
                ..Default::default()
            },
        )
        .await;
    let mut endpoints = match answer {
        Ok(q) => query_endpoints(&q.value, &read.local_datacenter),
        Err(e) if !first => return Err(e.to_string()),
        Err(e) => {
            tracing::warn!(query = %read.query, error = %e, "prepared query upstream: no answer yet");
            Vec::new()
        }
    };
    in_stable_order(&mut endpoints);
    Ok(endpoints)
}

/// The mesh instances of a query's answer as a proxy dials them (WAN
/// addresses for another datacenter's), each with the service its
/// certificate names.
fn query_endpoints(answer: &ExecuteResponse, local_datacenter: &str) -> Vec<QueryEndpoint> {
    let wan = answer.datacenter != local_datacenter;
    answer
        .nodes
        .iter()
        .map(|instance| {
            let service = match instance.service.proxy.as_deref() {
                Some(proxy) if instance.service.kind == "connect-proxy" => {
                    proxy.destination_service_name.clone()
                }
                _ => instance.service.service.clone(),
            };
            QueryEndpoint {
                endpoint: Endpoint::of_instance(instance, wan),
                datacenter: answer.datacenter.clone(),
                service,
            }
        })
        .collect()
}

async fn fetch_roots(
    rpc: &dyn ServerRpc,
    datacenter: &str,
    min_index: u64,
    token: String,
) -> Result<Fetched<IndexedCaRoots>, String> {
    let q = rpc
        .ca_roots(&opts(datacenter, min_index, token))
        .await
        .map_err(|e| e.to_string())?;
    if q.value.roots.is_empty() {
        return Err("the CA is not initialised yet".into());
    }
    Ok(Fetched {
        index: q.meta.index,
        value: q.value,
    })
}

/// One read of a compiled chain.
struct ChainRead {
    service: String,
    compile_datacenter: String,
    /// `OverrideMeshGateway.Mode` (empty: none).
    mesh_gateway_mode: String,
}

async fn fetch_chain(
    rpc: &dyn ServerRpc,
    datacenter: &str,
    read: ChainRead,
    min_index: u64,
    token: String,
) -> Result<Fetched<Arc<CompiledChain>>, String> {
    let q = rpc
        .discovery_chain(
            &opts(datacenter, min_index, token),
            read.service,
            read.compile_datacenter,
            ChainOverrides {
                mesh_gateway_mode: read.mesh_gateway_mode,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    // The RPC answers the chain itself (HTTP wraps it in `Chain`).
    let chain = match q.value.get("Chain") {
        Some(inner) => inner.clone(),
        None => q.value,
    };
    let chain: CompiledChain = serde_json::from_value(chain).map_err(|e| e.to_string())?;
    Ok(Fetched {
        index: q.meta.index,
        value: Arc::new(chain),
    })
}

/// One read of a target's endpoints.
struct EndpointsRead {
    service: String,
    datacenter: String,
    /// The subset's filter.
    filter: String,
    /// Dial at WAN addresses (another datacenter).
    wan: bool,
}

async fn fetch_endpoints(
    rpc: &dyn ServerRpc,
    read: EndpointsRead,
    min_index: u64,
    token: String,
) -> Result<Fetched<Vec<Endpoint>>, String> {
    let wan = read.wan;
    let mut opts = opts(&read.datacenter, min_index, token);
    opts.filter = read.filter;
    let q = rpc
        .health_service_nodes(
            &opts,
            ServiceQuery {
                service: read.service,
                connect: true,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let endpoints = q
        .value
        .iter()
        .map(|csn| Endpoint::of_instance(csn, wan))
        .collect();
    Ok(Fetched {
        index: q.meta.index,
        value: endpoints,
    })
}

#[async_trait]
impl DataSources for AgentSources {
    async fn roots(&self, min_index: u64) -> Result<Fetched<IndexedCaRoots>, String> {
        self.roots.get((), min_index, WAIT).await
    }

    async fn leaf(&self, service: &str, min_index: u64) -> Result<Fetched<IssuedCert>, String> {
        let token = (self.leaf_token)(service);
        let cert = self
            .leaf_certs
            .get_with_token(service, &token, min_index, WAIT)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Fetched {
            index: cert.raft.modify_index,
            value: cert,
        })
    }

    async fn intentions(
        &self,
        destination: &str,
        min_index: u64,
    ) -> Result<Fetched<Arc<Vec<Intention>>>, String> {
        self.intentions
            .get(destination.to_string(), min_index, WAIT)
            .await
    }

    async fn chain(
        &self,
        service: &str,
        datacenter: &str,
        mesh_gateway_mode: &str,
        min_index: u64,
    ) -> Result<Fetched<Arc<CompiledChain>>, String> {
        let key = (
            service.to_string(),
            datacenter.to_string(),
            mesh_gateway_mode.to_string(),
        );
        self.chains.get(key, min_index, WAIT).await
    }

    async fn endpoints(
        &self,
        target: &Target,
        min_index: u64,
    ) -> Result<Fetched<Vec<Endpoint>>, String> {
        self.endpoints
            .get(endpoints_key(target), min_index, WAIT)
            .await
    }

    fn default_allow(&self) -> bool {
        self.default_allow
    }

    async fn services(
        &self,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<Vec<String>>, String> {
        let g = &self.gateway_reads;
        let q = g
            .rpc
            .catalog_services(&opts(datacenter, min_index, g.tokens.agent_token()))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Fetched {
            index: q.meta.index,
            value: q.value.into_keys().collect(),
        })
    }

    async fn mesh_gateways(
        &self,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<Vec<CheckServiceNode>>, String> {
        let g = &self.gateway_reads;
        g.rpc
            .catalog_service_dump(
                &opts(datacenter, min_index, g.tokens.agent_token()),
                MESH_GATEWAY_KIND.into(),
            )
            .await
            .map(Fetched::from)
            .map_err(|e| e.to_string())
    }

    async fn servers(
        &self,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<Vec<CheckServiceNode>>, String> {
        let g = &self.gateway_reads;
        g.rpc
            .health_service_nodes(
                &opts(datacenter, min_index, g.tokens.agent_token()),
                ServiceQuery {
                    service: CONSUL_SERVICE.into(),
                    ..Default::default()
                },
            )
            .await
            .map(Fetched::from)
            .map_err(|e| e.to_string())
    }

    async fn federation_gateways(
        &self,
        min_index: u64,
    ) -> Result<Fetched<BTreeMap<String, Vec<CheckServiceNode>>>, String> {
        let g = &self.gateway_reads;
        g.rpc
            .federation_state_mesh_gateways(&opts(&g.datacenter, min_index, g.tokens.agent_token()))
            .await
            .map(Fetched::from)
            .map_err(|e| e.to_string())
    }

    async fn resolvers(
        &self,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<Vec<legate_types::config_entry::ConfigEntry>>, String> {
        let g = &self.gateway_reads;
        g.rpc
            .config_list(
                &opts(datacenter, min_index, g.tokens.agent_token()),
                "service-resolver".into(),
            )
            .await
            .map(Fetched::from)
            .map_err(|e| e.to_string())
    }

    async fn datacenters(&self) -> Result<Vec<String>, String> {
        self.gateway_reads
            .rpc
            .catalog_datacenters()
            .await
            .map_err(|e| e.to_string())
    }

    fn follow_chain(
        self: Arc<Self>,
        service: String,
        datacenter: String,
        mesh_gateway_mode: String,
    ) -> Subscription<Arc<CompiledChain>> {
        Box::pin(
            self.chains
                .subscribe((service, datacenter, mesh_gateway_mode)),
        )
    }

    fn follow_endpoints(self: Arc<Self>, target: Target) -> Subscription<Vec<Endpoint>> {
        Box::pin(self.endpoints.subscribe(endpoints_key(&target)))
    }

    fn follow_prepared_query(
        self: Arc<Self>,
        query: String,
        datacenter: String,
    ) -> Subscription<Vec<QueryEndpoint>> {
        Box::pin(self.queries.subscribe((query, datacenter)))
    }
}

/// The endpoints cache's key of a target: (service, datacenter, subset
/// filter).
fn endpoints_key(target: &Target) -> (String, String, String) {
    let filter = target
        .subset
        .get("Filter")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    (target.service.clone(), target.datacenter.clone(), filter)
}

/// The service the servers register themselves as.
const CONSUL_SERVICE: &str = "consul";

/// The service kind of mesh gateways.
pub const MESH_GATEWAY_KIND: &str = "mesh-gateway";

/// The local registrations proxycfg serves: `connect-proxy` services
/// (sidecars), Connect-native services (proxyless gRPC clients, whose
/// upstreams follow what they ask for) and mesh gateways.
fn registrations(agent: &Agent) -> Vec<ProxyRegistration> {
    let datacenter = agent.config().datacenter.clone();
    let services: Vec<_> = {
        let local = agent.lock_local();
        (local.services.values())
            .filter(|s| crate::local::makes_a_proxy(&s.service))
            .map(|s| s.service.clone())
            .collect()
    };
    services
        .into_iter()
        .filter_map(|s| {
            let native = s.kind.is_empty() && s.connect.as_ref().is_some_and(|c| c.native);
            let mut gateway = None;
            let proxy = if native {
                legate_types::ConnectProxyConfig {
                    destination_service_name: s.service.clone(),
                    destination_service_id: s.id.clone(),
                    ..Default::default()
                }
            } else if s.kind == "connect-proxy" {
                s.proxy.as_deref()?.clone()
            } else if s.kind == MESH_GATEWAY_KIND {
                gateway = Some(GatewayRegistration {
                    tagged_addresses: s
                        .tagged_addresses
                        .iter()
                        .map(|(tag, a)| {
                            let address = GatewayAddress {
                                address: a.address.clone(),
                                port: a.port,
                            };
                            (tag.clone(), address)
                        })
                        .collect(),
                    meta: s.meta.clone(),
                    domain: agent.config().dns.domain.clone(),
                });
                s.proxy.as_deref().cloned().unwrap_or_default()
            } else {
                return None;
            };
            Some(ProxyRegistration {
                proxy_id: s.id.clone(),
                service: s.service.clone(),
                address: s.address.clone(),
                port: s.port,
                proxy,
                datacenter: datacenter.clone(),
                native,
                gateway,
            })
        })
        .collect()
}

impl Agent {
    /// Starts the proxy configuration manager, kept in step with local
    /// registrations.
    pub(crate) fn start_proxycfg(self: &Arc<Self>) -> Arc<Manager> {
        let weak = Arc::downgrade(self);
        let leaf_token: LeafToken = Arc::new(move |service: &str| {
            weak.upgrade()
                .map(|agent| agent.leaf_token_for(service))
                .unwrap_or_default()
        });
        let sources = Arc::new(AgentSources::new(
            self.rpc.clone(),
            self.tokens().clone(),
            self.leaf_certs().clone(),
            leaf_token,
            self.intentions().shared(),
            self.config().datacenter.clone(),
            self.config().node_name.clone(),
            self.default_intention_allow(),
            &self.config().cache,
        ));
        let manager = Manager::new(sources);
        let weak = Arc::downgrade(self);
        let mut changes = self.local_changes();
        let m = manager.clone();
        tokio::spawn(async move {
            // Only a change to a service that makes a proxy makes the
            // manager look again: registering the 60,001st plain service
            // costs it nothing.
            let mut seen = None;
            loop {
                let Some(agent) = weak.upgrade() else { return };
                let version = agent.lock_local().proxy_version;
                if seen != Some(version) {
                    seen = Some(version);
                    m.sync(registrations(&agent));
                }
                let mut shutdown = agent.shutdown.subscribe();
                drop(agent);
                tokio::select! {
                    r = changes.changed() => if r.is_err() { return },
                    _ = shutdown.wait_for(|s| *s) => { m.stop(); return }
                }
            }
        });
        manager
    }
}
