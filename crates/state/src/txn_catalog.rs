//! The catalog and session operations of a transaction, with Consul's
//! verbs and texts (`agent/consul/state/txn.go`): `set`, `cas`, `get`,
//! `delete` and `delete-cas` on nodes, service instances and checks, and
//! `delete` on sessions. Writes go through the same table mutations as
//! registrations, so session invalidation and index bookkeeping follow,
//! and the transaction's journal can undo them.

use legate_types::rpc::TxnResult;
use legate_types::txn::{
    TxnCheckOp, TxnNodeOp, TxnServiceOp, TxnSessionOp, VERB_CAS, VERB_DELETE, VERB_DELETE_CAS,
    VERB_SET,
};
use legate_types::{HealthCheck, Node, RegisterRequest};

use crate::{Changes, Tables};

/// Consul's CAS rule: index 0 means "only if absent"; any other index
/// must be the existing row's modify index.
fn cas_holds(wanted: u64, existing: Option<u64>) -> bool {
    match existing {
        None => wanted == 0,
        Some(current) => wanted != 0 && wanted == current,
    }
}

fn node_result(node: Node) -> TxnResult {
    TxnResult {
        node: Some(node),
        ..TxnResult::default()
    }
}

fn check_result(check: HealthCheck) -> TxnResult {
    TxnResult {
        check: Some(check),
        ..TxnResult::default()
    }
}

impl Tables {
    /// The node an operation names: by ID when it has one, else by name.
    fn txn_find_node(&self, node: &Node) -> Option<&Node> {
        if node.id.is_empty() {
            self.nodes.get(&node.node)
        } else {
            self.nodes.values().find(|n| n.id == node.id)
        }
    }

    pub(crate) fn txn_node_get(&self, node: &Node) -> Result<TxnResult, String> {
        self.txn_find_node(node)
            .cloned()
            .map(node_result)
            .ok_or_else(|| format!("node {:?} doesn't exist", node.node))
    }

    pub(crate) fn txn_service_get(&self, node: &str, id: &str) -> Result<TxnResult, String> {
        match self.node_service(node, id) {
            Some(service) => Ok(TxnResult {
                service: Some(service),
                ..TxnResult::default()
            }),
            None => Err(format!("service {id:?} on node {node:?} doesn't exist")),
        }
    }

    pub(crate) fn txn_check_get(&self, node: &str, id: &str) -> Result<TxnResult, String> {
        match self.checks.get(&(node.to_string(), id.to_string())) {
            Some(check) => Ok(check_result(check.to_check(node, id))),
            None => Err(format!("check {id:?} on node {node:?} doesn't exist")),
        }
    }

    pub(crate) fn txn_node(
        &mut self,
        index: u64,
        op: &TxnNodeOp,
        changes: &mut Changes,
    ) -> Result<Vec<TxnResult>, String> {
        let node = &op.node;
        let existing = self.txn_find_node(node).map(|n| n.raft.modify_index);
        match op.verb.as_str() {
            VERB_SET | VERB_CAS => {
                if op.verb == VERB_CAS && !cas_holds(node.raft.modify_index, existing) {
                    return Err(format!(
                        "failed to set node {:?}, index is stale",
                        node.node
                    ));
                }
                if node.node.is_empty() {
                    return Err("Must provide node".to_string());
                }
                self.node_id_free(&node.id, &node.node)?;
                let registration = RegisterRequest::for_node(node);
                self.ensure_node(index, &registration, changes);
                let written = Node {
                    id: String::new(),
                    ..node.clone()
                };
                Ok(vec![self.txn_node_get(&written)?])
            }
            VERB_DELETE => {
                self.delete_node(index, &node.node, changes);
                Ok(Vec::new())
            }
            VERB_DELETE_CAS => match existing {
                Some(current) if current == node.raft.modify_index => {
                    self.delete_node(index, &node.node, changes);
                    Ok(Vec::new())
                }
                _ => Err(format!(
                    "failed to delete node {:?}, index is stale",
                    node.node
                )),
            },
            verb => Err(format!("unknown Node verb {verb:?}")),
        }
    }

    pub(crate) fn txn_service(
        &mut self,
        index: u64,
        op: &TxnServiceOp,
        changes: &mut Changes,
    ) -> Result<Vec<TxnResult>, String> {
        let (node, service) = (&op.node, &op.service);
        let existing = self
            .node_service(node, &service.id)
            .map(|s| s.raft.modify_index);
        match op.verb.as_str() {
            VERB_SET | VERB_CAS => {
                if op.verb == VERB_CAS && !cas_holds(service.raft.modify_index, existing) {
                    return Err(format!(
                        "failed to set service {:?} on node {node:?}, index is stale",
                        service.id
                    ));
                }
                if !self.nodes.contains_key(node) {
                    return Err("Missing node registration".to_string());
                }
                self.ensure_service(index, node, service, changes);
                Ok(vec![self.txn_service_get(node, &service.id)?])
            }
            VERB_DELETE => {
                self.delete_service(index, node, &service.id, changes);
                Ok(Vec::new())
            }
            VERB_DELETE_CAS => match existing {
                Some(current) if current == service.raft.modify_index => {
                    self.delete_service(index, node, &service.id, changes);
                    Ok(Vec::new())
                }
                _ => Err(format!(
                    "failed to delete service {:?} on node {node:?}, index is stale",
                    service.id
                )),
            },
            verb => Err(format!("unknown Service verb {verb:?}")),
        }
    }

    pub(crate) fn txn_check(
        &mut self,
        index: u64,
        op: &TxnCheckOp,
        changes: &mut Changes,
    ) -> Result<Vec<TxnResult>, String> {
        let check = &op.check;
        let (node, id) = (&check.node, &check.check_id);
        let existing = self
            .checks
            .get(&(node.clone(), id.clone()))
            .map(|c| c.raft().modify_index);
        match op.verb.as_str() {
            VERB_SET | VERB_CAS => {
                if op.verb == VERB_CAS && !cas_holds(check.raft.modify_index, existing) {
                    return Err(format!(
                        "failed to set check {id:?} on node {node:?}, index is stale"
                    ));
                }
                if !self.nodes.contains_key(node) {
                    return Err("Missing node registration".to_string());
                }
                if !check.service_id.is_empty()
                    && self.node_service(node, &check.service_id).is_none()
                {
                    return Err("Missing service registration".to_string());
                }
                self.ensure_check(index, node, check, changes);
                Ok(vec![self.txn_check_get(node, id)?])
            }
            VERB_DELETE => {
                self.delete_check(index, node, id, changes);
                Ok(Vec::new())
            }
            VERB_DELETE_CAS => match existing {
                Some(current) if current == check.raft.modify_index => {
                    self.delete_check(index, node, id, changes);
                    Ok(Vec::new())
                }
                _ => Err(format!(
                    "failed to delete check {id:?} on node {node:?}, index is stale"
                )),
            },
            verb => Err(format!("unknown Check verb {verb:?}")),
        }
    }

    pub(crate) fn txn_session(
        &mut self,
        index: u64,
        op: &TxnSessionOp,
        changes: &mut Changes,
    ) -> Result<Vec<TxnResult>, String> {
        if op.verb != VERB_DELETE {
            return Err(format!(
                "failed to delete session: unknown Session verb {:?}",
                op.verb
            ));
        }
        self.session_destroy(index, &op.session.id, changes);
        Ok(Vec::new())
    }
}
