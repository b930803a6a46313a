//! What the store holds, counted for Consul's usage gauges (`state.nodes`,
//! `state.services`, `state.service_instances`, `state.kv_entries`,
//! `state.config_entries` by kind, `state.connect_instances` by kind,
//! `session_ttl.active`).

use std::collections::BTreeMap;

use crate::Tables;

/// The counts one report publishes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Catalog nodes.
    pub nodes: u64,
    /// Distinct service names.
    pub services: u64,
    /// Service instances of every kind.
    pub service_instances: u64,
    /// Mesh instances by kind (`connect-proxy`, `connect-native`, gateways).
    pub connect_instances: BTreeMap<String, u64>,
    /// Live KV entries (tombstones not counted).
    pub kv_entries: u64,
    /// Config entries by kind.
    pub config_entries: BTreeMap<String, u64>,
    /// Sessions.
    pub sessions: u64,
}

impl Tables {
    /// Counts what the store holds.
    pub fn inventory(&self) -> Inventory {
        let (_, usage) = self.usage();
        let mut config_entries: BTreeMap<String, u64> = BTreeMap::new();
        for (kind, _) in self.config_entries.keys() {
            *config_entries.entry(kind.clone()).or_default() += 1;
        }
        Inventory {
            nodes: self.nodes.len() as u64,
            services: usage.services,
            service_instances: usage.service_instances,
            connect_instances: usage.connect_service_instances,
            kv_entries: self.kv.len() as u64,
            config_entries,
            sessions: self.sessions.len() as u64,
        }
    }
}
