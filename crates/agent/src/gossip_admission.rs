//! Who gossip listens to: `serf_lan_allowed_cidrs` and
//! `serf_wan_allowed_cidrs` (datagrams from other sources are dropped
//! unread), and `encrypt_verify_incoming` / `encrypt_verify_outgoing`
//! (turned off while encryption is rolled out to a running cluster, so
//! sealed and plain-text members can still talk).

use serde_json::{Map, Value};

use legate_types::cidr::Cidr;

use crate::config::{get, get_bool, strings, ConfigError};

/// The gossip admission settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GossipAdmission {
    /// Sources LAN gossip accepts (empty: any).
    pub lan_allowed: Vec<Cidr>,
    /// Sources WAN gossip accepts (empty: any).
    pub wan_allowed: Vec<Cidr>,
    /// Refuse datagrams that are not sealed (default true).
    pub verify_incoming: bool,
    /// Seal every datagram sent (default true).
    pub verify_outgoing: bool,
}

impl Default for GossipAdmission {
    fn default() -> Self {
        GossipAdmission {
            lan_allowed: Vec::new(),
            wan_allowed: Vec::new(),
            verify_incoming: true,
            verify_outgoing: true,
        }
    }
}

fn ranges(map: &Map<String, Value>, key: &str) -> Result<Vec<Cidr>, ConfigError> {
    strings(get(map, &[key]), key)?
        .iter()
        .map(|text| Cidr::parse(text).map_err(|e| ConfigError(format!("{key}: {e}"))))
        .collect()
}

/// Reads the four keys; a range that does not parse stops the agent.
pub fn parse(map: &Map<String, Value>) -> Result<GossipAdmission, ConfigError> {
    Ok(GossipAdmission {
        lan_allowed: ranges(map, "serf_lan_allowed_cidrs")?,
        wan_allowed: ranges(map, "serf_wan_allowed_cidrs")?,
        verify_incoming: get_bool(map, &["encrypt_verify_incoming"])?.unwrap_or(true),
        verify_outgoing: get_bool(map, &["encrypt_verify_outgoing"])?.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_flags_load_and_bad_ranges_are_named() {
        let map = serde_json::json!({
            "serf_lan_allowed_cidrs": ["127.0.0.0/8", "10.0.0.1"],
            "serf_wan_allowed_cidrs": "192.168.0.0/16",
            "encrypt_verify_incoming": false,
        });
        let parsed = parse(map.as_object().unwrap()).unwrap();
        assert_eq!(parsed.lan_allowed.len(), 2);
        assert!(parsed.wan_allowed[0].contains("192.168.4.4".parse().unwrap()));
        assert!(!parsed.verify_incoming);
        assert!(parsed.verify_outgoing);
        let bad = serde_json::json!({"serf_lan_allowed_cidrs": ["10.0.0.0/40"]});
        let err = parse(bad.as_object().unwrap()).unwrap_err();
        assert!(err.0.contains("serf_lan_allowed_cidrs"), "{}", err.0);
        assert_eq!(parse(&Map::new()).unwrap(), GossipAdmission::default());
    }
}
