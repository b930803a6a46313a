//! How long gossip keeps asking a failed member to come back before it
//! forgets it (and the leader deregisters the node): `reconnect_timeout`
//! (LAN) and `reconnect_timeout_wan`, Consul's 72h with its 8h floor, and
//! `advertise_reconnect_timeout`, a member's own value that every other
//! member uses for it (meant for short-lived client agents).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{get_str, ConfigError};

/// Consul's default for both pools.
pub const DEFAULT: Duration = Duration::from_secs(72 * 3600);
/// The shortest timeout Consul accepts for a pool.
pub const FLOOR: Duration = Duration::from_secs(8 * 3600);

/// The reconnect timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectTimeouts {
    /// LAN gossip's (`reconnect_timeout`).
    pub lan: Duration,
    /// WAN gossip's (`reconnect_timeout_wan`).
    pub wan: Duration,
    /// This member's own, advertised to the others
    /// (`advertise_reconnect_timeout`).
    pub advertised: Option<Duration>,
}

impl Default for ReconnectTimeouts {
    fn default() -> Self {
        ReconnectTimeouts {
            lan: DEFAULT,
            wan: DEFAULT,
            advertised: None,
        }
    }
}

fn duration(map: &Map<String, Value>, key: &str) -> Result<Option<Duration>, ConfigError> {
    get_str(map, &[key])?
        .map(|text| {
            legate_types::duration::parse_go_duration(&text)
                .map_err(|e| ConfigError(format!("{key}: invalid duration {text:?}: {e}")))
        })
        .transpose()
}

fn pool(map: &Map<String, Value>, key: &str, name: &str) -> Result<Duration, ConfigError> {
    match duration(map, key)? {
        None => Ok(DEFAULT),
        Some(d) if d >= FLOOR => Ok(d),
        Some(_) => Err(ConfigError(format!("{name} must be >= 8h0m0s"))),
    }
}

/// Reads the three keys; a pool's timeout under 8h stops the agent with
/// Consul's text.
pub fn parse(map: &Map<String, Value>) -> Result<ReconnectTimeouts, ConfigError> {
    Ok(ReconnectTimeouts {
        lan: pool(map, "reconnect_timeout", "ReconnectTimeoutLan")?,
        wan: pool(map, "reconnect_timeout_wan", "ReconnectTimeoutWan")?,
        advertised: duration(map, "advertise_reconnect_timeout")?.filter(|d| !d.is_zero()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_load_with_consuls_floor() {
        let map = serde_json::json!({
            "reconnect_timeout": "9h",
            "advertise_reconnect_timeout": "10m",
        });
        let parsed = parse(map.as_object().unwrap()).unwrap();
        assert_eq!(parsed.lan, Duration::from_secs(9 * 3600));
        assert_eq!(parsed.wan, DEFAULT);
        assert_eq!(parsed.advertised, Some(Duration::from_secs(600)));
        let short = serde_json::json!({"reconnect_timeout_wan": "4h"});
        assert_eq!(
            parse(short.as_object().unwrap()).unwrap_err().0,
            "ReconnectTimeoutWan must be >= 8h0m0s"
        );
        assert_eq!(parse(&Map::new()).unwrap(), ReconnectTimeouts::default());
    }
}
