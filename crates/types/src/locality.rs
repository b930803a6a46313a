//! Where a node or a service instance runs: a cloud region and zone
//! (Consul's `Locality`, set by the agent's `locality { region, zone }`
//! and by a service definition's `Locality`). Legate stores and answers
//! it as Consul does; it does not route by it (locality-aware routing is
//! an Enterprise feature in Consul).

use serde::{Deserialize, Serialize};

/// A region and zone, either of which may be empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Locality {
    /// The region (`us-east-1`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// The zone within the region (`us-east-1a`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub zone: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_fields_are_left_out_as_consul_leaves_them() {
        let both = Locality {
            region: "us-east-1".into(),
            zone: "us-east-1a".into(),
        };
        assert_eq!(
            serde_json::to_value(&both).unwrap(),
            serde_json::json!({"Region": "us-east-1", "Zone": "us-east-1a"})
        );
        let region = Locality {
            region: "eu".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&region).unwrap(),
            serde_json::json!({"Region": "eu"})
        );
        let decoded: Locality = serde_json::from_str(r#"{"Zone": "z"}"#).unwrap();
        assert_eq!((decoded.region.as_str(), decoded.zone.as_str()), ("", "z"));
    }
}
