//! The WAN pool's settings (`start_join_wan`, `retry_join_wan`,
//! `retry_interval_wan`, `retry_max_wan`, `advertise_addr_wan`), both
//! pools' gossip timing (`gossip_lan {}`, `gossip_wan {}`) and how often
//! an agent sends its coordinate (`sync_coordinate_interval_min`,
//! `sync_coordinate_rate_target`), checked at load so a bad value stops
//! the agent with the key named.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::ConfigError;
use crate::dns_config::duration;

/// How fast one gossip pool notices failures (memberlist's knobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GossipTiming {
    /// Time between probes of a random member (`probe_interval`).
    pub probe_interval: Duration,
    /// Time a probe waits for its answer (`probe_timeout`).
    pub probe_timeout: Duration,
    /// A suspect is declared failed after this many probe intervals
    /// (`suspicion_mult`).
    pub suspicion_mult: u32,
}

impl GossipTiming {
    /// Consul's `gossip_lan` defaults.
    pub const LAN: GossipTiming = GossipTiming {
        probe_interval: Duration::from_secs(1),
        probe_timeout: Duration::from_millis(500),
        suspicion_mult: 4,
    };
    /// Consul's `gossip_wan` defaults.
    pub const WAN: GossipTiming = GossipTiming {
        probe_interval: Duration::from_secs(5),
        probe_timeout: Duration::from_secs(3),
        suspicion_mult: 6,
    };
}

/// The WAN pool's settings (servers only).
#[derive(Debug, Clone, PartialEq)]
pub struct WanConfig {
    /// WAN gossip addresses joined once at start (`start_join_wan`, `-join-wan`).
    pub start_join_wan: Vec<String>,
    /// WAN gossip addresses joined until one answers (`retry_join_wan`,
    /// `-retry-join-wan`).
    pub retry_join_wan: Vec<String>,
    /// Time between WAN join attempts (`retry_interval_wan`, 30s).
    pub retry_interval_wan: Duration,
    /// WAN join attempts before giving up (`retry_max_wan`; 0: forever).
    pub retry_max_wan: u32,
    /// The address advertised to the WAN pool and as the node's `wan`
    /// tagged address (`advertise_addr_wan`, `-advertise-wan`; default
    /// the LAN advertise address).
    pub advertise_addr_wan: Option<IpAddr>,
    /// Whether `primary_datacenter` was set (a secondary without it would
    /// silently act as another primary).
    pub primary_datacenter_set: bool,
    /// LAN gossip timing.
    pub gossip_lan: GossipTiming,
    /// WAN gossip timing.
    pub gossip_wan: GossipTiming,
    /// The shortest time between an agent's coordinate updates
    /// (`sync_coordinate_interval_min`, 15s).
    pub sync_coordinate_interval_min: Duration,
    /// Coordinate updates per second the whole datacenter aims at
    /// (`sync_coordinate_rate_target`, 64): larger datacenters send less
    /// often.
    pub sync_coordinate_rate_target: f64,
}

impl Default for WanConfig {
    fn default() -> WanConfig {
        WanConfig {
            start_join_wan: Vec::new(),
            retry_join_wan: Vec::new(),
            retry_interval_wan: Duration::from_secs(30),
            retry_max_wan: 0,
            advertise_addr_wan: None,
            primary_datacenter_set: false,
            gossip_lan: GossipTiming::LAN,
            gossip_wan: GossipTiming::WAN,
            sync_coordinate_interval_min: Duration::from_secs(15),
            sync_coordinate_rate_target: 64.0,
        }
    }
}

fn err(key: &str, message: impl std::fmt::Display) -> ConfigError {
    ConfigError(format!("{key}: {message}"))
}

fn timing(
    map: &Map<String, Value>,
    key: &str,
    defaults: GossipTiming,
) -> Result<GossipTiming, ConfigError> {
    let section = match map.get(key) {
        None | Some(Value::Null) => return Ok(defaults),
        Some(Value::Object(section)) => section,
        // HCL blocks may arrive as a list of one.
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_object() => {
            items[0].as_object().expect("checked")
        }
        Some(other) => return Err(err(key, format!("expected a block, got {other}"))),
    };
    let positive = |name: &str, default: Duration| -> Result<Duration, ConfigError> {
        match section.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(value) => {
                let d = duration(&format!("{key}.{name}"), value)?;
                if d.is_zero() {
                    Err(err(&format!("{key}.{name}"), "must be positive"))
                } else {
                    Ok(d)
                }
            }
        }
    };
    let probe_interval = positive("probe_interval", defaults.probe_interval)?;
    let probe_timeout = positive("probe_timeout", defaults.probe_timeout)?;
    let suspicion_mult = match section.get("suspicion_mult") {
        None | Some(Value::Null) => defaults.suspicion_mult,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(n @ 1..=100) => n as u32,
            _ => {
                return Err(err(
                    &format!("{key}.suspicion_mult"),
                    format!("{n} is not a whole number from 1 to 100"),
                ))
            }
        },
        Some(other) => {
            return Err(err(
                &format!("{key}.suspicion_mult"),
                format!("expected a whole number, got {other}"),
            ))
        }
    };
    Ok(GossipTiming {
        probe_interval,
        probe_timeout,
        suspicion_mult,
    })
}

/// Reads the WAN settings from the merged config.
pub(crate) fn parse(map: &Map<String, Value>) -> Result<WanConfig, ConfigError> {
    let defaults = WanConfig::default();
    let retry_interval_wan = match map.get("retry_interval_wan") {
        None | Some(Value::Null) => defaults.retry_interval_wan,
        Some(value) => duration("retry_interval_wan", value)?,
    };
    let retry_max_wan = match map.get("retry_max_wan") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| err("retry_max_wan", format!("{n} is not a whole number ≥ 0")))?,
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| err("retry_max_wan", format!("{s:?} is not a whole number ≥ 0")))?,
        Some(other) => {
            return Err(err(
                "retry_max_wan",
                format!("expected a number, got {other}"),
            ))
        }
    };
    let advertise_addr_wan = match map.get("advertise_addr_wan") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(
            s.parse()
                .map_err(|_| err("advertise_addr_wan", format!("{s:?} is not an IP address")))?,
        ),
        Some(other) => {
            return Err(err(
                "advertise_addr_wan",
                format!("expected an address, got {other}"),
            ))
        }
    };
    Ok(WanConfig {
        start_join_wan: crate::config::string_list(map, "start_join_wan")?,
        retry_join_wan: crate::config::string_list(map, "retry_join_wan")?,
        retry_interval_wan,
        retry_max_wan,
        advertise_addr_wan,
        primary_datacenter_set: map
            .get("primary_datacenter")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty()),
        gossip_lan: timing(map, "gossip_lan", GossipTiming::LAN)?,
        gossip_wan: timing(map, "gossip_wan", GossipTiming::WAN)?,
        sync_coordinate_interval_min: match map.get("sync_coordinate_interval_min") {
            None | Some(Value::Null) => defaults.sync_coordinate_interval_min,
            Some(value) => {
                let d = duration("sync_coordinate_interval_min", value)?;
                if d.is_zero() {
                    return Err(err("sync_coordinate_interval_min", "must be positive"));
                }
                d
            }
        },
        sync_coordinate_rate_target: match map.get("sync_coordinate_rate_target") {
            None | Some(Value::Null) => defaults.sync_coordinate_rate_target,
            Some(Value::Number(n)) if n.as_f64().is_some_and(|r| r > 0.0 && r.is_finite()) => {
                n.as_f64().expect("checked")
            }
            Some(other) => {
                return Err(err(
                    "sync_coordinate_rate_target",
                    format!("{other} is not a positive number"),
                ))
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(value: Value) -> Result<WanConfig, ConfigError> {
        parse(value.as_object().unwrap())
    }

    #[test]
    fn defaults_are_consuls() {
        let c = parse_json(json!({})).unwrap();
        assert_eq!(c, WanConfig::default());
        assert_eq!(c.retry_interval_wan, Duration::from_secs(30));
        assert_eq!(c.gossip_wan.probe_interval, Duration::from_secs(5));
        assert!(!c.primary_datacenter_set);
    }

    #[test]
    fn keys_are_read() {
        let c = parse_json(json!({
            "retry_join_wan": ["127.0.0.11", "127.0.0.12:8302"],
            "start_join_wan": "127.0.0.13",
            "retry_interval_wan": "2s",
            "retry_max_wan": 3,
            "advertise_addr_wan": "198.51.100.7",
            "primary_datacenter": "dc1",
            "gossip_wan": {"probe_interval": "200ms", "probe_timeout": "100ms", "suspicion_mult": 3},
        }))
        .unwrap();
        assert_eq!(c.retry_join_wan, vec!["127.0.0.11", "127.0.0.12:8302"]);
        assert_eq!(c.start_join_wan, vec!["127.0.0.13"]);
        assert_eq!(c.retry_interval_wan, Duration::from_secs(2));
        assert_eq!(c.retry_max_wan, 3);
        assert_eq!(c.advertise_addr_wan, Some("198.51.100.7".parse().unwrap()));
        assert!(c.primary_datacenter_set);
        assert_eq!(c.gossip_wan.probe_interval, Duration::from_millis(200));
        assert_eq!(c.gossip_wan.suspicion_mult, 3);
        assert_eq!(c.gossip_lan, GossipTiming::LAN);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (config, key) in [
            (json!({"retry_interval_wan": "soon"}), "retry_interval_wan"),
            (json!({"retry_max_wan": -1}), "retry_max_wan"),
            (
                json!({"advertise_addr_wan": "nowhere"}),
                "advertise_addr_wan",
            ),
            (json!({"retry_join_wan": [1]}), "retry_join_wan"),
            (
                json!({"gossip_wan": {"probe_interval": "0s"}}),
                "gossip_wan.probe_interval",
            ),
            (
                json!({"gossip_lan": {"suspicion_mult": 0}}),
                "gossip_lan.suspicion_mult",
            ),
        ] {
            let e = parse_json(config.clone()).unwrap_err().0;
            assert!(e.starts_with(key), "{config}: {e}");
        }
    }
}
