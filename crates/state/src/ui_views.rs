//! Whole-catalog views the UI's internal endpoints read: every instance
//! with its checks, every node with its services and checks (Consul's
//! `Internal.ServiceDump` and `Internal.NodeDump`), and the catalog's
//! health overview (`Internal.CatalogOverview`).

use std::collections::BTreeMap;

use legate_types::catalog::{worst_status, CheckServiceNode, HealthStatus};
use legate_types::ui::{CatalogSummary, HealthSummary, NodeInfo};

use crate::catalog::on_node;
use crate::{Table, Tables};

fn count(summary: &mut HealthSummary, status: HealthStatus) {
    summary.total += 1;
    match status {
        HealthStatus::Passing => summary.passing += 1,
        HealthStatus::Warning => summary.warning += 1,
        HealthStatus::Critical | HealthStatus::Maintenance => summary.critical += 1,
    }
}

impl Tables {
    /// Every service instance of every kind with its node and checks, by
    /// node and service ID, and the catalog's index.
    pub fn check_service_nodes_all(&self) -> (u64, Vec<CheckServiceNode>) {
        let rows = self
            .services
            .iter()
            .filter_map(|(key, service)| self.check_service_node(key, service))
            .collect();
        (
            self.max_index(&[Table::Nodes, Table::Services, Table::Checks]),
            rows,
        )
    }

    /// Every node (or the one named) with its services and checks, by name.
    pub fn node_dump(&self, only: Option<&str>) -> (u64, Vec<NodeInfo>) {
        let nodes: Box<dyn Iterator<Item = _>> = match only {
            Some(name) => Box::new(self.nodes.get_key_value(name).into_iter()),
            None => Box::new(self.nodes.iter()),
        };
        let dump = nodes
            .map(|(name, node)| NodeInfo {
                id: node.id.clone(),
                node: node.node.clone(),
                address: node.address.clone(),
                tagged_addresses: node.tagged_addresses.clone(),
                meta: node.meta.clone(),
                services: on_node(&self.services, name)
                    .map(|((_, id), s)| s.to_service(id))
                    .collect(),
                checks: on_node(&self.checks, name)
                    .map(|((node, id), c)| c.to_check(node, id))
                    .collect(),
            })
            .collect();
        (
            self.max_index(&[Table::Nodes, Table::Services, Table::Checks]),
            dump,
        )
    }

    /// The catalog's health at a glance: nodes by the worst of their node
    /// checks, service instances by the worst of their own checks, checks
    /// by name; a group with no members is `null`, as in Consul.
    pub fn catalog_overview(&self) -> CatalogSummary {
        let mut nodes = HealthSummary::default();
        let mut services: BTreeMap<&str, HealthSummary> = BTreeMap::new();
        let mut checks: BTreeMap<&str, HealthSummary> = BTreeMap::new();
        for name in self.nodes.keys() {
            let node_checks = on_node(&self.checks, name)
                .filter(|(_, c)| c.service_id().is_empty())
                .map(|(_, c)| c.status());
            count(&mut nodes, worst_status(node_checks));
        }
        for ((node, id), service) in &self.services {
            let own = on_node(&self.checks, node)
                .filter(|(_, c)| c.service_id() == id)
                .map(|(_, c)| c.status());
            count(
                services.entry(service.name()).or_default(),
                worst_status(own),
            );
        }
        for check in self.checks.values() {
            count(checks.entry(check.name()).or_default(), check.status());
        }
        let named = |groups: BTreeMap<&str, HealthSummary>| {
            let list: Vec<HealthSummary> = groups
                .into_iter()
                .map(|(name, summary)| HealthSummary {
                    name: name.to_string(),
                    ..summary
                })
                .collect();
            (!list.is_empty()).then_some(list)
        };
        CatalogSummary {
            nodes: (nodes.total > 0).then(|| vec![nodes]),
            services: named(services),
            checks: named(checks),
        }
    }
}
