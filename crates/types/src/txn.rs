//! `/v1/txn`: the operations of one atomic transaction (KV, node, service,
//! check and session operations, as Consul's `api.TxnOp`), and its
//! results and errors.
//!
//! Catalog verbs stay strings, as Consul keeps them: an unknown verb is an
//! error of that operation (409 with the others rolled back), not a body
//! that fails to parse.

use serde::{Deserialize, Serialize};

use crate::{HealthCheck, KvEntry, KvOp, Node, NodeService, Session};

/// `set`: create or replace.
pub const VERB_SET: &str = "set";
/// `cas`: create or replace if the modify index matches (0: if absent).
pub const VERB_CAS: &str = "cas";
/// `get`: read; fails if absent.
pub const VERB_GET: &str = "get";
/// `delete`: remove (absent is fine).
pub const VERB_DELETE: &str = "delete";
/// `delete-cas`: remove if the modify index matches.
pub const VERB_DELETE_CAS: &str = "delete-cas";

/// One element of `/v1/txn`: exactly one of its fields is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TxnOp {
    /// A KV operation.
    #[serde(rename = "KV", default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvOp>,
    /// A node operation.
    #[serde(rename = "Node", default, skip_serializing_if = "Option::is_none")]
    pub node: Option<TxnNodeOp>,
    /// A service-instance operation.
    #[serde(rename = "Service", default, skip_serializing_if = "Option::is_none")]
    pub service: Option<TxnServiceOp>,
    /// A health-check operation.
    #[serde(rename = "Check", default, skip_serializing_if = "Option::is_none")]
    pub check: Option<TxnCheckOp>,
    /// A session operation (`delete` only).
    #[serde(rename = "Session", default, skip_serializing_if = "Option::is_none")]
    pub session: Option<TxnSessionOp>,
}

impl TxnOp {
    /// A KV operation.
    pub fn kv(op: KvOp) -> TxnOp {
        TxnOp {
            kv: Some(op),
            ..TxnOp::default()
        }
    }

    /// Whether the operation only reads (a read-only transaction needs no
    /// Raft round trip).
    pub fn is_read(&self) -> bool {
        match self {
            TxnOp { kv: Some(kv), .. } => kv.verb.is_read(),
            TxnOp { node: Some(op), .. } => op.verb == VERB_GET,
            TxnOp {
                service: Some(op), ..
            } => op.verb == VERB_GET,
            TxnOp {
                check: Some(op), ..
            } => op.verb == VERB_GET,
            TxnOp {
                session: Some(_), ..
            } => false,
            _ => true,
        }
    }

    /// Whether the operation is anything but KV (such transactions are
    /// logged as a newer command that older servers cannot apply).
    pub fn is_catalog(&self) -> bool {
        self.kv.is_none()
    }
}

/// A node operation (`{"Verb": "set", "Node": {...}}`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TxnNodeOp {
    /// `set`, `cas`, `get`, `delete` or `delete-cas`.
    #[serde(default)]
    pub verb: String,
    /// The node (ID, Node, Address, Datacenter, TaggedAddresses, Meta,
    /// ModifyIndex for the CAS verbs).
    #[serde(default)]
    pub node: Node,
}

/// A service-instance operation on a node.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TxnServiceOp {
    /// `set`, `cas`, `get`, `delete` or `delete-cas`.
    #[serde(default)]
    pub verb: String,
    /// The node's name.
    #[serde(default)]
    pub node: String,
    /// The instance (ID, Service, Tags, Address, Meta, Port, Weights,
    /// EnableTagOverride, ModifyIndex for the CAS verbs).
    #[serde(default)]
    pub service: NodeService,
}

/// A health-check operation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TxnCheckOp {
    /// `set`, `cas`, `get`, `delete` or `delete-cas`.
    #[serde(default)]
    pub verb: String,
    /// The check (its Node and CheckID name it).
    #[serde(default)]
    pub check: HealthCheck,
}

/// A session operation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TxnSessionOp {
    /// `delete`.
    #[serde(default)]
    pub verb: String,
    /// The session (its ID names it).
    #[serde(default)]
    pub session: Session,
}

/// One result of a successful `/v1/txn`: exactly one field is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TxnResult {
    /// The entry a KV operation read or wrote (without its value for
    /// writes).
    #[serde(rename = "KV", default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvEntry>,
    /// The node a node operation read or wrote.
    #[serde(rename = "Node", default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Node>,
    /// The instance a service operation read or wrote.
    #[serde(rename = "Service", default, skip_serializing_if = "Option::is_none")]
    pub service: Option<NodeService>,
    /// The check a check operation read or wrote.
    #[serde(rename = "Check", default, skip_serializing_if = "Option::is_none")]
    pub check: Option<HealthCheck>,
}

impl TxnResult {
    /// A KV result.
    pub fn kv(entry: KvEntry) -> TxnResult {
        TxnResult {
            kv: Some(entry),
            ..TxnResult::default()
        }
    }
}

/// One error of a failed `/v1/txn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TxnError {
    /// Position of the failing operation.
    pub op_index: usize,
    /// What went wrong.
    pub what: String,
}

/// The outcome of a transaction: results when it committed, errors when not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct TxnResponse {
    /// Results, in operation order.
    pub results: Option<Vec<TxnResult>>,
    /// Errors; the transaction was rolled back when any.
    pub errors: Option<Vec<TxnError>>,
    /// Index of the write, when it committed one.
    #[serde(skip)]
    pub index: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kv_only_op_encodes_as_before() {
        // Older servers decode `{"KV": {...}}` only: the other fields
        // must not appear when unset.
        let op = TxnOp::kv(KvOp::set("a", "b"));
        let json = serde_json::to_value(&op).unwrap();
        assert_eq!(json.as_object().unwrap().len(), 1, "{json}");
        assert!(json.get("KV").is_some());
    }

    #[test]
    fn catalog_ops_read_as_consul_writes_them() {
        let ops: Vec<TxnOp> = serde_json::from_str(
            r#"[{"Node": {"Verb": "set", "Node": {"Node": "n1", "Address": "10.0.0.1"}}},
                {"Service": {"Verb": "get", "Node": "n1", "Service": {"ID": "web1"}}},
                {"Check": {"Verb": "delete", "Check": {"Node": "n1", "CheckID": "c"}}},
                {"Session": {"Verb": "delete", "Session": {"ID": "s"}}}]"#,
        )
        .unwrap();
        assert_eq!(ops[0].node.as_ref().unwrap().node.address, "10.0.0.1");
        assert!(!ops[0].is_read() && ops[1].is_read() && !ops[2].is_read());
        assert!(ops.iter().all(TxnOp::is_catalog));
        assert_eq!(ops[3].session.as_ref().unwrap().session.id, "s");
    }
}
