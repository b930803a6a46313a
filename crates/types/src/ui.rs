//! The shapes of the UI's internal endpoints (`/v1/internal/ui/*`, Consul's
//! `agent/ui_endpoint.go` and `structs.NodeInfo`, `structs.CatalogSummary`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::{HealthCheck, NodeService};

/// One node with its services and checks (`/v1/internal/ui/nodes`,
/// `/v1/internal/ui/node/:node`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct NodeInfo {
    /// The node's UUID.
    #[serde(rename = "ID")]
    pub id: String,
    /// The node's name.
    pub node: String,
    /// The node's address.
    pub address: String,
    /// Named alternative addresses.
    pub tagged_addresses: BTreeMap<String, String>,
    /// Node metadata.
    pub meta: BTreeMap<String, String>,
    /// Its service instances, by service ID.
    pub services: Vec<NodeService>,
    /// Its checks: node checks and service checks, by check ID.
    pub checks: Vec<HealthCheck>,
}

/// Counts of one group by health (`structs.HealthSummary`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct HealthSummary {
    /// The group's name (a service or check name; none for nodes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Members of the group.
    pub total: u64,
    /// Those passing.
    pub passing: u64,
    /// Those warning.
    pub warning: u64,
    /// Those critical.
    pub critical: u64,
}

/// `/v1/internal/ui/catalog-overview` (`structs.CatalogSummary`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct CatalogSummary {
    /// Nodes by the worst of their node checks (one unnamed group).
    pub nodes: Option<Vec<HealthSummary>>,
    /// Service instances by service name, by the worst of their checks.
    pub services: Option<Vec<HealthSummary>>,
    /// Checks by check name.
    pub checks: Option<Vec<HealthSummary>>,
}
