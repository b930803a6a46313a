//! Catalog tables: nodes, services, checks, and their reads.

use std::collections::BTreeMap;

use legate_types::{
    CheckServiceNode, DeregisterRequest, HealthCheck, HealthStatus, Node, NodeService,
    NodeServices, RaftIndex, RegisterRequest, ServiceNode,
};

use crate::check_row::CheckRow;
use crate::service_row::ServiceRow;
use crate::{Changes, NodeKey, Table, Tables};

/// The rows of one node in a table keyed by (node, id).
pub(crate) fn on_node<'a, T>(
    table: &'a BTreeMap<NodeKey, Box<T>>,
    node: &'a str,
) -> impl Iterator<Item = (&'a NodeKey, &'a T)> + 'a {
    table
        .range((node.to_string(), String::new())..)
        .take_while(move |((n, _), _)| n == node)
        .map(|(key, row)| (key, &**row))
}

impl Tables {
    pub(crate) fn insert_service_row(&mut self, node: String, service: NodeService) {
        let key = (node, service.id.clone());
        let row = ServiceRow::new(service, &mut self.names);
        self.services_by_name
            .entry(row.name().to_string())
            .or_default()
            .insert(key.clone());
        if let Some(target) = row.connect_target() {
            self.connect_by_target
                .entry(target.to_string())
                .or_default()
                .insert(key.clone());
        }
        self.service_usage.add(&row);
        if let Some(replaced) = self.services.insert(key, Box::new(row)) {
            self.service_usage.subtract(&replaced);
            replaced.release(&mut self.names);
        }
    }

    /// Removes an instance; returns the service names whose reads it was
    /// part of (its own, and the one it serves through the mesh).
    pub(crate) fn remove_service_row(&mut self, key: &NodeKey) -> Option<Vec<String>> {
        let row = self.services.remove(key)?;
        self.service_usage.subtract(&row);
        if let Some(set) = self.services_by_name.get_mut(row.name()) {
            set.remove(key);
            if set.is_empty() {
                self.services_by_name.remove(row.name());
            }
        }
        if let Some(target) = row.connect_target() {
            if let Some(set) = self.connect_by_target.get_mut(target) {
                set.remove(key);
                if set.is_empty() {
                    self.connect_by_target.remove(target);
                }
            }
        }
        let names = row.read_by();
        row.release(&mut self.names);
        Some(names)
    }

    /// Stores `check` under its node and ID.
    pub(crate) fn insert_check_row(&mut self, check: HealthCheck) {
        let key = (check.node.clone(), check.check_id.clone());
        let row = CheckRow::new(check, &mut self.names);
        if let Some(replaced) = self.checks.insert(key, Box::new(row)) {
            replaced.release(&mut self.names);
        }
    }

    pub(crate) fn remove_check_row(&mut self, key: &NodeKey) {
        if let Some(row) = self.checks.remove(key) {
            row.release(&mut self.names);
        }
    }

    /// Service names affected by a change to anything on `node`.
    fn services_on_node(&self, node: &str) -> Vec<String> {
        on_node(&self.services, node)
            .flat_map(|(_, s)| s.read_by())
            .collect()
    }

    fn bump_services_on_node(&mut self, node: &str, index: u64, changes: &mut Changes) {
        for name in self.services_on_node(node) {
            self.bump_service(&name, index, changes);
        }
    }

    fn bump_services(&mut self, names: &[String], index: u64, changes: &mut Changes) {
        for name in names {
            self.bump_service(name, index, changes);
        }
    }

    pub(crate) fn ensure_registration(
        &mut self,
        index: u64,
        req: &RegisterRequest,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if req.node.is_empty() {
            return Err("Must provide node".to_string());
        }
        // Validate everything before touching anything: a failed command
        // must leave the tables unchanged.
        if let Some(service) = &req.service {
            if service.service.is_empty() {
                return Err("Must provide service name".to_string());
            }
        }
        let mut all_checks: Vec<&HealthCheck> = req.checks.iter().collect();
        if let Some(check) = &req.check {
            all_checks.push(check);
        }
        for check in &all_checks {
            if check.check_id.is_empty() {
                return Err("Must provide check ID".to_string());
            }
            if !check.service_id.is_empty() {
                let registered_here = req.service.as_ref().is_some_and(|s| {
                    let id = if s.id.is_empty() { &s.service } else { &s.id };
                    *id == check.service_id
                });
                if !registered_here
                    && !self
                        .services
                        .contains_key(&(req.node.clone(), check.service_id.clone()))
                {
                    return Err(format!(
                        "Unknown service ID {:?} for check ID {:?}",
                        check.service_id, check.check_id
                    ));
                }
            }
        }
        if !req.skip_node_update || !self.nodes.contains_key(&req.node) {
            self.node_id_free(&req.id, &req.node)?;
            self.ensure_node(index, req, changes);
        }
        if let Some(service) = &req.service {
            self.ensure_service(index, &req.node, service, changes);
        }
        for check in all_checks {
            self.ensure_check(index, &req.node, check, changes);
        }
        Ok(())
    }

    /// Refuses a node ID another node already has.
    pub(crate) fn node_id_free(&self, id: &str, node: &str) -> Result<(), String> {
        if id.is_empty() {
            return Ok(());
        }
        match self.nodes.values().find(|n| n.id == id && n.node != node) {
            Some(other) => Err(format!(
                "Node ID {id:?} is already registered to node {:?}",
                other.node
            )),
            None => Ok(()),
        }
    }

    pub(crate) fn ensure_node(&mut self, index: u64, req: &RegisterRequest, changes: &mut Changes) {
        self.journal_node(&req.node);
        let mut node = Node {
            id: req.id.clone(),
            node: req.node.clone(),
            address: req.address.clone(),
            datacenter: req.datacenter.clone(),
            tagged_addresses: req.tagged_addresses.clone(),
            meta: req.node_meta.clone(),
            locality: req.locality.clone(),
            raft: RaftIndex::at(index),
        };
        if let Some(existing) = self.nodes.get(&req.node) {
            let mut comparable = existing.clone();
            comparable.raft = node.raft;
            if node.id.is_empty() {
                node.id = existing.id.clone();
                comparable.id = existing.id.clone();
            }
            if comparable == node {
                return;
            }
            node.raft.create_index = existing.raft.create_index;
        }
        self.nodes.insert(req.node.clone(), node);
        self.bump(Table::Nodes, index, changes);
        self.bump_services_on_node(&req.node, index, changes);
    }

    pub(crate) fn ensure_service(
        &mut self,
        index: u64,
        node: &str,
        service: &NodeService,
        changes: &mut Changes,
    ) {
        self.journal_node(node);
        let mut service = service.clone();
        if service.id.is_empty() {
            service.id = service.service.clone();
        }
        // The sidecar definition is the agent's business, never the catalog's.
        if let Some(connect) = service.connect.as_mut() {
            connect.sidecar_service = None;
            if connect.is_empty() {
                service.connect = None;
            }
        }
        let key = (node.to_string(), service.id.clone());
        service.raft = RaftIndex::at(index);
        if let Some(existing) = self.services.get(&key) {
            let mut unchanged = existing.to_service(&key.1);
            unchanged.raft = service.raft;
            if unchanged == service {
                return;
            }
            service.raft.create_index = existing.raft().create_index;
            if let Some(old) = self.remove_service_row(&key) {
                self.bump_services(&old, index, changes);
            }
        }
        self.insert_service_row(node.to_string(), service);
        let Some(read_by) = self.services.get(&key).map(|row| row.read_by()) else {
            return;
        };
        self.bump_services(&read_by, index, changes);
        self.bump(Table::Services, index, changes);
        // Checks of the service carry its name and tags.
        let check_keys: Vec<NodeKey> = on_node(&self.checks, node)
            .filter(|(_, c)| c.service_id() == key.1)
            .map(|(k, _)| k.clone())
            .collect();
        let Some(row) = self.services.get(&key) else {
            return;
        };
        for check_key in check_keys {
            let Some(check) = self.checks.get_mut(&check_key) else {
                continue;
            };
            if check.describe_service(row.shared_name_and_tags(), &mut self.names) {
                check.modified_at(index);
                self.table_index
                    .insert(Table::Checks.name().to_string(), index);
                changes.tables.insert(Table::Checks);
            }
        }
    }

    pub(crate) fn ensure_check(
        &mut self,
        index: u64,
        node: &str,
        check: &HealthCheck,
        changes: &mut Changes,
    ) {
        self.journal_node(node);
        let mut check = check.clone();
        check.node = node.to_string();
        if !check.service_id.is_empty() {
            if let Some(service) = self
                .services
                .get(&(node.to_string(), check.service_id.clone()))
            {
                check.service_name = service.name().to_string();
                check.service_tags = service.tags().map(str::to_string).collect();
            }
        } else {
            check.service_name.clear();
            check.service_tags.clear();
        }
        let key = (node.to_string(), check.check_id.clone());
        check.raft = RaftIndex::at(index);
        if let Some(existing) = self.checks.get(&key) {
            let mut unchanged = existing.to_check(&key.0, &key.1);
            unchanged.raft = check.raft;
            if unchanged == check {
                return;
            }
            check.raft.create_index = existing.raft().create_index;
        }
        let critical = check.status == HealthStatus::Critical;
        let affected = self.check_affects(&check.node, &check.service_id);
        let check_id = check.check_id.clone();
        self.insert_check_row(check);
        self.bump(Table::Checks, index, changes);
        for name in affected {
            self.bump_service(&name, index, changes);
        }
        if critical {
            self.invalidate_sessions_for_check(index, node, &check_id, changes);
        }
    }

    /// Service names whose health results include a check of `node` for
    /// the instance `service_id` (empty: a node check).
    fn check_affects(&self, node: &str, service_id: &str) -> Vec<String> {
        if service_id.is_empty() {
            return self.services_on_node(node);
        }
        self.services
            .get(&(node.to_string(), service_id.to_string()))
            .map(|service| service.read_by())
            .unwrap_or_default()
    }

    pub(crate) fn deregister(
        &mut self,
        index: u64,
        req: &DeregisterRequest,
        changes: &mut Changes,
    ) {
        if !req.service_id.is_empty() {
            self.delete_service(index, &req.node, &req.service_id, changes);
        } else if !req.check_id.is_empty() {
            self.delete_check(index, &req.node, &req.check_id, changes);
        } else {
            self.delete_node(index, &req.node, changes);
        }
    }

    pub(crate) fn delete_check(
        &mut self,
        index: u64,
        node: &str,
        check_id: &str,
        changes: &mut Changes,
    ) {
        self.journal_node(node);
        let key = (node.to_string(), check_id.to_string());
        if let Some(check) = self.checks.get(&key) {
            let affected = self.check_affects(node, check.service_id());
            self.remove_check_row(&key);
            self.bump(Table::Checks, index, changes);
            for name in affected {
                self.bump_service(&name, index, changes);
            }
            self.invalidate_sessions_for_check(index, node, check_id, changes);
        }
    }

    pub(crate) fn delete_service(
        &mut self,
        index: u64,
        node: &str,
        service_id: &str,
        changes: &mut Changes,
    ) {
        self.journal_node(node);
        let key = (node.to_string(), service_id.to_string());
        let Some(read_by) = self.remove_service_row(&key) else {
            return;
        };
        self.bump(Table::Services, index, changes);
        self.bump_services(&read_by, index, changes);
        let check_ids: Vec<String> = on_node(&self.checks, node)
            .filter(|(_, c)| c.service_id() == service_id)
            .map(|((_, id), _)| id.clone())
            .collect();
        for id in check_ids {
            self.remove_check_row(&(node.to_string(), id.clone()));
            self.bump(Table::Checks, index, changes);
            self.invalidate_sessions_for_check(index, node, &id, changes);
        }
    }

    pub(crate) fn delete_node(&mut self, index: u64, node: &str, changes: &mut Changes) {
        self.journal_node(node);
        if self.nodes.remove(node).is_none() {
            return;
        }
        self.bump(Table::Nodes, index, changes);
        // A node's coordinate goes with it.
        if self.coordinates.remove(node).is_some() {
            self.bump(Table::Coordinates, index, changes);
        }
        let service_ids: Vec<String> = on_node(&self.services, node)
            .map(|((_, id), _)| id.clone())
            .collect();
        for id in service_ids {
            self.delete_service(index, node, &id, changes);
        }
        let check_ids: Vec<String> = on_node(&self.checks, node)
            .map(|((_, id), _)| id.clone())
            .collect();
        for id in check_ids {
            self.delete_check(index, node, &id, changes);
        }
        let sessions: Vec<String> = self
            .sessions
            .values()
            .filter(|s| s.node == node)
            .map(|s| s.id.clone())
            .collect();
        for id in sessions {
            self.session_destroy(index, &id, changes);
        }
    }

    // ----- reads -----

    /// All nodes, with the `nodes` table index.
    pub fn nodes(&self) -> (u64, Vec<Node>) {
        (
            self.table_index(Table::Nodes),
            self.nodes.values().cloned().collect(),
        )
    }

    /// One node.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    /// Service names and the union of their tags.
    pub fn services(&self) -> (u64, BTreeMap<String, Vec<String>>) {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, keys) in &self.services_by_name {
            let mut tags: Vec<String> = Vec::new();
            for key in keys {
                if let Some(service) = self.services.get(key) {
                    for tag in service.tags() {
                        if !tags.iter().any(|t| t == tag) {
                            tags.push(tag.to_string());
                        }
                    }
                }
            }
            tags.sort();
            out.insert(name.clone(), tags);
        }
        (self.table_index(Table::Services), out)
    }

    /// The catalog's usage as Consul CE counts it (`/v1/operator/usage`),
    /// from counts kept as rows change ([`crate::service_usage`]).
    pub fn usage(&self) -> (u64, legate_types::rpc::ServiceUsage) {
        let mut usage = legate_types::rpc::ServiceUsage {
            services: self.services_by_name.len() as u64,
            service_instances: self.services.len() as u64,
            ..Default::default()
        };
        self.service_usage.fill(&mut usage);
        (self.table_index(Table::Services), usage)
    }

    /// Whether a write after `index` touched the service `name` (a name no
    /// write has touched has not changed, whatever the catalog's index).
    pub fn service_changed_after(&self, name: &str, index: u64) -> bool {
        self.service_index.get(name).is_some_and(|i| *i > index)
    }

    /// The index that blocking reads of one service use: the last write that
    /// touched the service, or the catalog tables when it never existed.
    pub fn service_index(&self, name: &str) -> u64 {
        self.service_index
            .get(name)
            .copied()
            .unwrap_or_else(|| self.max_index(&[Table::Nodes, Table::Services]))
    }

    fn service_keys(&self, name: &str, connect: bool) -> Vec<NodeKey> {
        let index = if connect {
            &self.connect_by_target
        } else {
            &self.services_by_name
        };
        index
            .get(name)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Instances of a service as flattened catalog rows.
    pub fn service_nodes(&self, name: &str, connect: bool) -> (u64, Vec<ServiceNode>) {
        let rows = self
            .service_keys(name, connect)
            .iter()
            .filter_map(|key| {
                let service = self.services.get(key)?;
                let node = self.nodes.get(&key.0)?;
                Some(ServiceNode::from_node_and(node, service.to_service(&key.1)))
            })
            .collect();
        (self.service_index(name), rows)
    }

    /// One instance with its node and the checks that cover it.
    pub(crate) fn check_service_node(
        &self,
        key: &NodeKey,
        service: &ServiceRow,
    ) -> Option<CheckServiceNode> {
        let node = self.nodes.get(&key.0)?;
        let checks = on_node(&self.checks, &key.0)
            .filter(|(_, c)| c.service_id().is_empty() || c.service_id() == key.1)
            .map(|((node, id), c)| c.to_check(node, id))
            .collect();
        Some(CheckServiceNode {
            node: node.clone(),
            service: service.to_service(&key.1),
            checks,
        })
    }

    /// Instances of a service with their node and checks.
    pub fn check_service_nodes(&self, name: &str, connect: bool) -> (u64, Vec<CheckServiceNode>) {
        let rows = self
            .service_keys(name, connect)
            .iter()
            .filter_map(|key| self.check_service_node(key, self.services.get(key)?))
            .collect();
        (self.service_index(name), rows)
    }

    /// Every instance of services of `kind` (`mesh-gateway`, ...) with its
    /// node and checks, by node and service id, and the catalog's index.
    pub fn check_service_nodes_of_kind(&self, kind: &str) -> (u64, Vec<CheckServiceNode>) {
        let rows = self
            .services
            .iter()
            .filter(|(_, s)| s.kind() == kind)
            .filter_map(|(key, service)| self.check_service_node(key, service))
            .collect();
        (
            self.max_index(&[Table::Nodes, Table::Services, Table::Checks]),
            rows,
        )
    }

    /// One node with its services.
    pub fn node_services(&self, name: &str) -> (u64, Option<NodeServices>) {
        let index = self.max_index(&[Table::Nodes, Table::Services]);
        let Some(node) = self.nodes.get(name) else {
            return (index, None);
        };
        let services = on_node(&self.services, name)
            .map(|((_, id), s)| (id.clone(), s.to_service(id)))
            .collect();
        (
            index,
            Some(NodeServices {
                node: node.clone(),
                services,
            }),
        )
    }

    /// One service instance on one node.
    pub fn node_service(&self, node: &str, id: &str) -> Option<NodeService> {
        self.services
            .get(&(node.to_string(), id.to_string()))
            .map(|service| service.to_service(id))
    }

    /// Checks of one node.
    pub fn node_checks(&self, name: &str) -> (u64, Vec<HealthCheck>) {
        let checks = on_node(&self.checks, name)
            .map(|((node, id), c)| c.to_check(node, id))
            .collect();
        (self.table_index(Table::Checks), checks)
    }

    /// Checks of every instance of a service.
    pub fn service_checks(&self, name: &str) -> (u64, Vec<HealthCheck>) {
        let checks = self
            .checks
            .iter()
            .filter(|(_, c)| c.service_name() == name)
            .map(|((node, id), c)| c.to_check(node, id))
            .collect();
        (self.table_index(Table::Checks), checks)
    }

    /// Checks in a state (`None`: all).
    pub fn checks_in_state(&self, state: Option<HealthStatus>) -> (u64, Vec<HealthCheck>) {
        let checks = self
            .checks
            .iter()
            .filter(|(_, c)| state.is_none_or(|s| c.status() == s))
            .map(|((node, id), c)| c.to_check(node, id))
            .collect();
        (self.table_index(Table::Checks), checks)
    }
}
