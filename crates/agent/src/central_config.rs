//! The central service configuration (`proxy-defaults` and every
//! `service-defaults`) a `?merge-central-config` read and the agent's own
//! service views merge into proxy and gateway registrations
//! (`legate_chain::central_config::merge`).

pub use legate_chain::central_config::{applies_to, merge};
pub use legate_chain::entries::RoutingEntries;
use legate_types::{NodeService, QueryOptions};

use crate::Agent;

/// The config entry kinds central config is made of.
const KINDS: [&str; 2] = ["proxy-defaults", "service-defaults"];

impl Agent {
    /// Reads the central config of the datacenter `opts` names with its
    /// token and consistency, never blocking (a merge follows the read it
    /// belongs to). Errors carry Consul's texts.
    pub async fn central_config(&self, opts: &QueryOptions) -> Result<RoutingEntries, String> {
        let read = QueryOptions {
            datacenter: opts.datacenter.clone(),
            consistency: opts.consistency,
            token: opts.token.clone(),
            ..Default::default()
        };
        let entries = self
            .rpc()
            .config_list_all(&read, KINDS.iter().map(|k| k.to_string()).collect())
            .await
            .map_err(|e| format!("Failure looking up service config entries: {e}"))?;
        RoutingEntries::new(&entries.value)
            .map_err(|e| format!("Failure computing service defaults: {e}"))
    }
}

impl Agent {
    /// Local service instances as the agent shows them: with
    /// `enable_central_service_config` (Consul's default, on), proxies and
    /// gateways carry central config merged in, as Consul's service
    /// manager registers them. The entries are read with the agent's own
    /// token; when they cannot be read the instances are shown as
    /// registered.
    pub async fn with_central_config<'a>(
        &self,
        services: impl IntoIterator<Item = &'a mut NodeService>,
    ) {
        if !self.config().enable_central_service_config {
            return;
        }
        let services: Vec<&mut NodeService> = services
            .into_iter()
            .filter(|s| applies_to(&s.kind))
            .collect();
        if services.is_empty() {
            return;
        }
        let opts = QueryOptions {
            token: self.tokens().agent_token(),
            consistency: legate_types::Consistency::Stale,
            ..Default::default()
        };
        let entries = match self.central_config(&opts).await {
            Ok(entries) => entries,
            Err(error) => {
                tracing::debug!(%error, "central config not merged into local services");
                return;
            }
        };
        for service in services {
            let proxy = service.proxy.get_or_insert_with(Default::default);
            merge(&service.kind, &service.service, proxy, &entries);
        }
    }
}
