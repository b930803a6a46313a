//! User events (`/v1/event/*`): the wire shape, the size limit, and the
//! index Consul derives from an event id for blocking lists.

use serde::{Deserialize, Serialize};

/// Serf's `UserEventSizeLimit` (name and payload), which Consul keeps.
pub const USER_EVENT_SIZE_LIMIT: usize = 512;

/// A user event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct UserEvent {
    /// Event UUID.
    #[serde(rename = "ID")]
    pub id: String,
    /// Event name.
    pub name: String,
    /// Base64 payload (null when empty).
    pub payload: Option<String>,
    /// Node name filter (regex).
    pub node_filter: String,
    /// Service name filter (regex).
    pub service_filter: String,
    /// Tag filter (regex).
    pub tag_filter: String,
    /// Protocol version.
    pub version: u32,
    /// Lamport time.
    #[serde(rename = "LTime")]
    pub ltime: u64,
}

/// The blocking index of an event list ending in the event `id`: the XOR
/// of the UUID's two 64-bit halves (Consul's `uuidToUint64`); 0 for an id
/// that is not a UUID.
pub fn index_of(id: &str) -> u64 {
    match uuid::Uuid::parse_str(id) {
        Ok(id) => {
            let (high, low) = id.as_u64_pair();
            high ^ low
        }
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_the_xor_of_the_id_halves() {
        let id = "00000000-0000-0001-0000-000000000003";
        assert_eq!(index_of(id), 1 ^ 3);
        assert_eq!(index_of("ffffffff-ffff-ffff-0000-000000000000"), u64::MAX);
        assert_eq!(index_of("not-a-uuid"), 0);
        // Not ASCII, but of a UUID's length in bytes: no panic.
        assert_eq!(index_of(&format!("a{}a", "é".repeat(15))), 0);
    }
}
