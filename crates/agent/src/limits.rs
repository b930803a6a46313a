//! `limits {}` and `session_ttl_min`: how much one client may take from
//! the agent (connections per client address, how long a connection may
//! take to say what it wants, how long it may sit idle) and the shortest
//! session TTL the servers accept. Checked at load, so a bad value stops
//! the agent with the key named.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::ConfigError;
use crate::dns_config::duration;

/// Consul's `limits` keys that are accepted with a warning.
const ACCEPTED: &[&str] = &[
    "rpc_rate",
    "rpc_max_burst",
    "rpc_client_timeout",
    "kv_max_value_size",
    "txn_max_req_len",
    "request_limits",
];

/// Connection and session bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections one client address may hold on the HTTP and gRPC
    /// ports and DNS over TCP (200; 0: no limit).
    pub http_max_conns_per_client: usize,
    /// Open connections one client address may hold on the server port
    /// (100; 0: no limit).
    pub rpc_max_conns_per_client: usize,
    /// Time a new server-port connection has to say what it is or finish
    /// its TLS handshake (5s).
    pub rpc_handshake_timeout: Duration,
    /// Time an HTTP connection has to send a complete request head,
    /// counted from the connection or the end of the previous response
    /// (`http_handshake_timeout`, or Consul's `https_handshake_timeout`; 5s).
    pub http_handshake_timeout: Duration,
    /// Time a keep-alive HTTP connection with no request in flight stays
    /// open (`http_idle_timeout`, a Legate key; 90s; 0: forever).
    pub http_idle_timeout: Duration,
    /// The shortest session TTL the servers accept (`session_ttl_min`, 10s).
    pub session_ttl_min: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            http_max_conns_per_client: 200,
            rpc_max_conns_per_client: 100,
            rpc_handshake_timeout: Duration::from_secs(5),
            http_handshake_timeout: Duration::from_secs(5),
            http_idle_timeout: Duration::from_secs(90),
            session_ttl_min: legate_types::DEFAULT_SESSION_TTL_MIN,
        }
    }
}

fn count(key: &str, value: &Value) -> Result<usize, ConfigError> {
    value
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| ConfigError(format!("{key}: expected a whole number, got {value}")))
}

fn positive_duration(key: &str, value: &Value) -> Result<Duration, ConfigError> {
    let d = duration(key, value)?;
    if d.is_zero() {
        return Err(ConfigError(format!("{key}: must be greater than 0")));
    }
    Ok(d)
}

/// Reads `limits {}` and `session_ttl_min` from the merged config; names
/// accepted-but-unused keys in `warnings`.
pub fn parse(map: &Map<String, Value>, warnings: &mut Vec<String>) -> Result<Limits, ConfigError> {
    let mut limits = Limits::default();
    if let Some(value) = map.get("session_ttl_min") {
        limits.session_ttl_min = positive_duration("session_ttl_min", value)?;
        if limits.session_ttl_min > legate_types::SESSION_TTL_MAX {
            return Err(ConfigError(
                "session_ttl_min: must not exceed the longest session TTL (24h)".into(),
            ));
        }
    }
    let Some(section) = map.get("limits") else {
        return Ok(limits);
    };
    let Value::Object(section) = section else {
        return Err(ConfigError(format!(
            "limits: expected a block, got {section}"
        )));
    };
    for (key, value) in section {
        let name = format!("limits.{key}");
        match key.as_str() {
            "http_max_conns_per_client" => limits.http_max_conns_per_client = count(&name, value)?,
            "rpc_max_conns_per_client" => limits.rpc_max_conns_per_client = count(&name, value)?,
            "rpc_handshake_timeout" => {
                limits.rpc_handshake_timeout = positive_duration(&name, value)?
            }
            "https_handshake_timeout" | "http_handshake_timeout" => {
                limits.http_handshake_timeout = positive_duration(&name, value)?
            }
            "http_idle_timeout" => limits.http_idle_timeout = duration(&name, value)?,
            other if ACCEPTED.contains(&other) => warnings.push(format!(
                "config key \"{name}\" is accepted but not implemented by Legate yet"
            )),
            _ => return Err(ConfigError(format!("invalid config key {name}"))),
        }
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<(Limits, Vec<String>), ConfigError> {
        let mut warnings = Vec::new();
        parse(v.as_object().unwrap(), &mut warnings).map(|l| (l, warnings))
    }

    #[test]
    fn defaults_are_consuls() {
        let (l, w) = parse_json(json!({})).unwrap();
        assert_eq!(l, Limits::default());
        assert_eq!(l.http_max_conns_per_client, 200);
        assert_eq!(l.rpc_max_conns_per_client, 100);
        assert_eq!(l.session_ttl_min, Duration::from_secs(10));
        assert!(w.is_empty());
    }

    #[test]
    fn keys_are_read_and_checked() {
        let (l, w) = parse_json(json!({
            "session_ttl_min": "5s",
            "limits": {"http_max_conns_per_client": 3, "rpc_max_conns_per_client": 0,
                       "rpc_handshake_timeout": "2s", "https_handshake_timeout": "1s",
                       "http_idle_timeout": "0s", "rpc_rate": 100}
        }))
        .unwrap();
        assert_eq!(l.session_ttl_min, Duration::from_secs(5));
        assert_eq!(l.http_max_conns_per_client, 3);
        assert_eq!(l.rpc_max_conns_per_client, 0);
        assert_eq!(l.rpc_handshake_timeout, Duration::from_secs(2));
        assert_eq!(l.http_handshake_timeout, Duration::from_secs(1));
        assert_eq!(l.http_idle_timeout, Duration::ZERO);
        assert_eq!(w.len(), 1, "{w:?}");
        for (bad, needle) in [
            (json!({"session_ttl_min": "0s"}), "session_ttl_min"),
            (json!({"session_ttl_min": "soon"}), "session_ttl_min"),
            (json!({"session_ttl_min": "25h"}), "24h"),
            (
                json!({"limits": {"http_max_conns_per_client": -1}}),
                "limits.http_max_conns_per_client",
            ),
            (
                json!({"limits": {"nope": 1}}),
                "invalid config key limits.nope",
            ),
            (
                json!({"limits": {"rpc_handshake_timeout": "0s"}}),
                "greater than 0",
            ),
            (json!({"limits": 5}), "expected a block"),
        ] {
            let err = parse_json(bad.clone()).unwrap_err();
            assert!(err.0.contains(needle), "{bad}: {err:?}");
        }
    }
}
