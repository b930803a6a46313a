//! The agent's side of proxycfg: [`DataSources`] over the servers (blocking
//! reads) and the leaf manager, and a task that keeps the manager's set of
//! proxies equal to the local `connect-proxy` registrations.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_chain::compile::Target;
use legate_chain::CompiledChain;
use legate_proxycfg::{DataSources, Endpoint, EndpointHealth, Fetched, Manager, ProxyRegistration};
use legate_types::connect::{IndexedCaRoots, IssuedCert};
use legate_types::intention::{Intention, MatchBy};
use legate_types::rpc::{ChainOverrides, ServerRpc, ServiceQuery};
use legate_types::{Consistency, HealthStatus, QueryOptions};
use serde_json::Value;

use crate::leaf::LeafManager;
use crate::Agent;

/// How long one blocking read of a data source may wait.
const WAIT: Duration = Duration::from_secs(300);

/// Data sources backed by the agent's RPC client and leaf manager.
pub struct AgentSources {
    rpc: Arc<dyn ServerRpc>,
    leaf_certs: Arc<LeafManager>,
    datacenter: String,
    default_allow: bool,
}

impl AgentSources {
    fn opts(&self, min_index: u64) -> QueryOptions {
        QueryOptions {
            datacenter: self.datacenter.clone(),
            min_index,
            max_wait: Some(WAIT),
            consistency: Consistency::Stale,
            ..Default::default()
        }
    }
}

/// Weight of an instance as Consul sends it (1..=128).
fn weight(status: HealthStatus, weights: &legate_types::Weights) -> u32 {
    let w = match status {
        HealthStatus::Warning => weights.warning,
        _ => weights.passing,
    };
    w.clamp(1, 128) as u32
}

#[async_trait]
impl DataSources for AgentSources {
    async fn roots(&self, min_index: u64) -> Result<Fetched<IndexedCaRoots>, String> {
        let q = self
            .rpc
            .ca_roots(&self.opts(min_index))
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

    async fn leaf(&self, service: &str, min_index: u64) -> Result<Fetched<IssuedCert>, String> {
        let cert = self
            .leaf_certs
            .get(service, min_index, WAIT)
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
    ) -> Result<Fetched<Vec<Intention>>, String> {
        let q = self
            .rpc
            .intention_match(
                &self.opts(min_index),
                MatchBy::Destination,
                vec![destination.to_string()],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(Fetched {
            index: q.meta.index,
            value: q
                .value
                .into_iter()
                .next()
                .map(|(_, l)| l)
                .unwrap_or_default(),
        })
    }

    async fn chain(
        &self,
        service: &str,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<CompiledChain>, String> {
        let q = self
            .rpc
            .discovery_chain(
                &self.opts(min_index),
                service.to_string(),
                datacenter.to_string(),
                ChainOverrides::default(),
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
            value: chain,
        })
    }

    async fn endpoints(
        &self,
        target: &Target,
        min_index: u64,
    ) -> Result<Fetched<Vec<Endpoint>>, String> {
        let mut opts = self.opts(min_index);
        opts.datacenter = target.datacenter.clone();
        if let Some(filter) = target.subset.get("Filter").and_then(Value::as_str) {
            opts.filter = filter.to_string();
        }
        let q = self
            .rpc
            .health_service_nodes(
                &opts,
                ServiceQuery {
                    service: target.service.clone(),
                    connect: true,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        let endpoints = q
            .value
            .iter()
            .map(|csn| {
                let status = csn.aggregate_status();
                Endpoint {
                    node: csn.node.node.clone(),
                    service_id: csn.service.id.clone(),
                    address: if csn.service.address.is_empty() {
                        csn.node.address.clone()
                    } else {
                        csn.service.address.clone()
                    },
                    port: csn.service.port,
                    health: match status {
                        HealthStatus::Passing => EndpointHealth::Passing,
                        HealthStatus::Warning => EndpointHealth::Warning,
                        _ => EndpointHealth::Critical,
                    },
                    weight: weight(status, &csn.service.weights),
                }
            })
            .collect();
        Ok(Fetched {
            index: q.meta.index,
            value: endpoints,
        })
    }

    fn default_allow(&self) -> bool {
        self.default_allow
    }
}

/// The local `connect-proxy` registrations as proxycfg sees them.
fn registrations(agent: &Agent) -> Vec<ProxyRegistration> {
    agent
        .services()
        .into_values()
        .filter(|s| s.kind == "connect-proxy")
        .filter_map(|s| {
            let proxy = s.proxy.as_deref()?.clone();
            Some(ProxyRegistration {
                proxy_id: s.id.clone(),
                service: s.service.clone(),
                address: s.address.clone(),
                port: s.port,
                proxy,
                datacenter: agent.config().datacenter.clone(),
            })
        })
        .collect()
}

impl Agent {
    /// Starts the proxy configuration manager, kept in step with local
    /// registrations.
    pub(crate) fn start_proxycfg(self: &Arc<Self>) -> Arc<Manager> {
        let sources = Arc::new(AgentSources {
            rpc: self.rpc.clone(),
            leaf_certs: self.leaf_certs().clone(),
            datacenter: self.config().datacenter.clone(),
            default_allow: self.default_intention_allow(),
        });
        let manager = Manager::new(sources);
        let weak = Arc::downgrade(self);
        let mut changes = self.local_changes();
        let m = manager.clone();
        tokio::spawn(async move {
            loop {
                let Some(agent) = weak.upgrade() else { return };
                m.sync(registrations(&agent));
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
