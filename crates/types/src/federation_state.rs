//! Federation states (Consul's `FederationState`): one object per
//! datacenter, kept canonically in the primary and replicated to every
//! secondary, listing that datacenter's mesh gateways.

use serde::{Deserialize, Serialize};

use crate::{CheckServiceNode, RaftIndex};

/// The time Go's zero `time.Time` marshals as.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// What one datacenter publishes to the others: its mesh gateways.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct FederationState {
    /// The datacenter this state describes.
    pub datacenter: String,
    /// Its `mesh-gateway` services with their checks, in catalog order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mesh_gateways: Vec<CheckServiceNode>,
    /// When the state was last written by its datacenter (RFC 3339).
    #[serde(default = "zero_time")]
    pub updated_at: String,
    /// In a secondary: the primary's modify index of the copy it holds.
    #[serde(default)]
    pub primary_modify_index: u64,
    /// Raft bookkeeping.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

fn zero_time() -> String {
    ZERO_TIME.to_string()
}

impl FederationState {
    /// Whether `other` says the same: the datacenter and, in order, each
    /// gateway's node, service and checks (not the times or indexes).
    pub fn same_content(&self, other: &FederationState) -> bool {
        fn strip(n: &CheckServiceNode) -> CheckServiceNode {
            let mut n = n.clone();
            n.node.raft = RaftIndex::default();
            n.service.raft = RaftIndex::default();
            for c in &mut n.checks {
                c.raft = RaftIndex::default();
            }
            n
        }
        self.datacenter == other.datacenter
            && self.mesh_gateways.len() == other.mesh_gateways.len()
            && self
                .mesh_gateways
                .iter()
                .zip(&other.mesh_gateways)
                .all(|(a, b)| strip(a) == strip(b))
    }
}

/// A write to the federation states (`FederationState.Apply`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FederationStateOp {
    /// Create or replace the state of its datacenter (`UpdatedAt` is set
    /// to now when empty or zero).
    Upsert(FederationState),
    /// Remove the state of a datacenter.
    Delete(String),
}

/// The current time as Go marshals a `time.Time` in UTC (RFC 3339 with
/// trailing zeros of the fraction trimmed).
pub fn now_rfc3339() -> String {
    let text = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
    match text.split_once('.') {
        Some((seconds, fraction)) => {
            let digits = fraction.trim_end_matches('Z').trim_end_matches('0');
            if digits.is_empty() {
                format!("{seconds}Z")
            } else {
                format!("{seconds}.{digits}Z")
            }
        }
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_gateways_are_left_out_and_zero_time_read() {
        let state = FederationState {
            datacenter: "dc2".into(),
            updated_at: ZERO_TIME.into(),
            ..Default::default()
        };
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"Datacenter": "dc2", "UpdatedAt": ZERO_TIME,
                "PrimaryModifyIndex": 0, "CreateIndex": 0, "ModifyIndex": 0})
        );
        let back: FederationState = serde_json::from_value(json).unwrap();
        assert_eq!(back, state);
        let minimal: FederationState =
            serde_json::from_value(serde_json::json!({"Datacenter": "dc3"})).unwrap();
        assert_eq!(minimal.updated_at, ZERO_TIME);
    }

    #[test]
    fn content_ignores_times_and_indexes() {
        let mut a = FederationState {
            datacenter: "dc1".into(),
            mesh_gateways: vec![CheckServiceNode::default()],
            ..Default::default()
        };
        let mut b = a.clone();
        b.updated_at = now_rfc3339();
        b.raft.modify_index = 9;
        b.mesh_gateways[0].service.raft.modify_index = 4;
        assert!(a.same_content(&b));
        a.mesh_gateways[0].service.service = "mesh-gateway".into();
        assert!(!a.same_content(&b));
        assert!(!now_rfc3339().contains(".000"));
        assert!(now_rfc3339().ends_with('Z'));
    }
}
