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
    pub meta: crate::catalog::Meta,
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

/// What intentions decide for one topology edge
/// (`structs.IntentionDecisionSummary`, in its key order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct IntentionDecisionSummary {
    /// Whether the edge's connections are allowed (an intention with L7
    /// permissions counts as not allowed here).
    pub allowed: bool,
    /// Whether the deciding intention has L7 permissions.
    pub has_permissions: bool,
    /// The deciding intention's `external-source` meta.
    pub external_source: String,
    /// Whether the deciding intention names both services (no wildcard).
    pub has_exact: bool,
    /// What the default policy decides.
    pub default_allow: bool,
}

/// How a topology edge is known (Consul's `TopologySource*`).
pub mod topology_source {
    /// An upstream in a proxy's registration.
    pub const REGISTRATION: &str = "proxy-registration";
    /// An intention naming both services.
    pub const SPECIFIC_INTENTION: &str = "specific-intention";
    /// A wildcard intention.
    pub const WILDCARD_INTENTION: &str = "wildcard-intention";
    /// No intention: the default policy allows it.
    pub const DEFAULT_ALLOW: &str = "default-allow";
    /// A routing config entry of an upstream with no instances.
    pub const ROUTING_CONFIG: &str = "routing-config";
}

/// A service's neighbours as the servers find them (Consul's
/// `structs.ServiceTopology`): the instances of its upstreams and
/// downstreams (with their sidecars), how each edge is known and what
/// intentions decide for it, keyed by service name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceTopology {
    /// Instances of the upstreams and of their sidecars.
    pub upstreams: Vec<crate::catalog::CheckServiceNode>,
    /// Instances of the downstreams and of their sidecars.
    pub downstreams: Vec<crate::catalog::CheckServiceNode>,
    /// How each upstream is known.
    pub upstream_sources: BTreeMap<String, String>,
    /// How each downstream is known.
    pub downstream_sources: BTreeMap<String, String>,
    /// Intentions' decision for the service → each upstream.
    pub upstream_decisions: BTreeMap<String, IntentionDecisionSummary>,
    /// Intentions' decision for each downstream → the service.
    pub downstream_decisions: BTreeMap<String, IntentionDecisionSummary>,
    /// The service's protocol (`tcp` unless configured).
    pub metrics_protocol: String,
    /// Whether every proxy of the service runs in transparent mode.
    pub transparent_proxy: bool,
}
