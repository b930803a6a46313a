//! WAN federation through mesh gateways: `connect {
//! enable_mesh_gateway_wan_federation }`, `primary_gateways` (and
//! `-primary-gateway`), `primary_gateways_interval`, checked at load with
//! Consul's texts so a configuration that cannot work stops the agent.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{AgentConfig, ConfigError};
use crate::dns_config::duration;

/// The shortest `primary_gateways_interval` (Consul's floor).
pub const MIN_PRIMARY_GATEWAYS_INTERVAL: Duration = Duration::from_secs(1);

/// How this server federates through mesh gateways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshFederation {
    /// `connect.enable_mesh_gateway_wan_federation`.
    pub enabled: bool,
    /// `primary_gateways`: the primary's gateways as `host:port` (addresses
    /// or host names, looked up again every interval).
    pub primary_gateways: Vec<String>,
    /// `primary_gateways_interval` (30s; at least 1s).
    pub primary_gateways_interval: Duration,
}

impl Default for MeshFederation {
    fn default() -> MeshFederation {
        MeshFederation {
            enabled: false,
            primary_gateways: Vec::new(),
            primary_gateways_interval: Duration::from_secs(30),
        }
    }
}

/// Reads the keys; `warnings` gets a line when the interval is raised to
/// its floor.
pub(crate) fn parse(
    map: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<MeshFederation, ConfigError> {
    let enabled = match map
        .get("connect")
        .and_then(single_block)
        .and_then(|c| c.get("enable_mesh_gateway_wan_federation"))
    {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s == "true" || s == "false" => s == "true",
        Some(other) => {
            return Err(ConfigError(format!(
                "connect.enable_mesh_gateway_wan_federation: expected true or false, got {other}"
            )))
        }
    };
    let primary_gateways = crate::config::string_list(map, "primary_gateways")?;
    for gateway in &primary_gateways {
        check_host_port(gateway)?;
    }
    let primary_gateways_interval = match map.get("primary_gateways_interval") {
        None | Some(Value::Null) => MeshFederation::default().primary_gateways_interval,
        Some(value) => {
            let d = duration("primary_gateways_interval", value)?;
            if d < MIN_PRIMARY_GATEWAYS_INTERVAL {
                warnings.push(format!(
                    "primary_gateways_interval {d:?} is below the minimum: using {MIN_PRIMARY_GATEWAYS_INTERVAL:?}"
                ));
                MIN_PRIMARY_GATEWAYS_INTERVAL
            } else {
                d
            }
        }
    };
    Ok(MeshFederation {
        enabled,
        primary_gateways,
        primary_gateways_interval,
    })
}

/// An HCL block arrives as an object or a list of one object.
fn single_block(value: &Value) -> Option<&Map<String, Value>> {
    match value {
        Value::Object(m) => Some(m),
        Value::Array(items) if items.len() == 1 => items[0].as_object(),
        _ => None,
    }
}

/// `host:port` with a port (a gateway has no default port to assume).
fn check_host_port(raw: &str) -> Result<(), ConfigError> {
    let bad = || {
        ConfigError(format!(
            "primary_gateways: {raw:?} is not host:port (an address or host name, and the gateway's WAN port)"
        ))
    };
    let (host, port) = raw.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    Ok(())
}

/// The checks that need the whole configuration, with Consul's texts.
pub(crate) fn check(config: &AgentConfig) -> Result<(), ConfigError> {
    let federation = &config.mesh_federation;
    if federation.enabled {
        if !config.server {
            return Err(ConfigError(
                "'connect.enable_mesh_gateway_wan_federation = true' requires 'server = true'"
                    .into(),
            ));
        }
        if config.node_name.contains('/') {
            return Err(ConfigError("'connect.enable_mesh_gateway_wan_federation = true' requires that 'node_name' not contain '/' characters".into()));
        }
        if !config.wan.retry_join_wan.is_empty() {
            return Err(ConfigError(
                "'retry_join_wan' is incompatible with 'connect.enable_mesh_gateway_wan_federation = true'"
                    .into(),
            ));
        }
        // Gateways route servers' traffic by SNI and ALPN: it must be TLS.
        let tls = &config.tls;
        // Both ways: a WAN gossip peer is known by its client certificate.
        if !tls.has_ca() || tls.cert_file.is_none() || !tls.verify_outgoing || !tls.verify_incoming
        {
            return Err(ConfigError("'connect.enable_mesh_gateway_wan_federation = true' requires TLS on the server port: 'tls.internal_rpc' (or 'tls.defaults') with 'ca_file', 'cert_file', 'key_file', 'verify_incoming = true' and 'verify_outgoing = true'".into()));
        }
    }
    if !federation.primary_gateways.is_empty() {
        if !config.server {
            return Err(ConfigError(
                "'primary_gateways' requires 'server = true'".into(),
            ));
        }
        if config.primary_datacenter == config.datacenter {
            return Err(ConfigError(
                "'primary_gateways' should only be configured in a secondary datacenter".into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(value: Value) -> Result<MeshFederation, ConfigError> {
        parse(value.as_object().unwrap(), &mut Vec::new())
    }

    #[test]
    fn keys_and_defaults() {
        assert_eq!(parse_json(json!({})).unwrap(), MeshFederation::default());
        let c = parse_json(json!({
            "connect": [{"enable_mesh_gateway_wan_federation": true}],
            "primary_gateways": ["127.0.0.16:4432", "gw.dc1.example:443", "[::1]:8443"],
            "primary_gateways_interval": "5s",
        }))
        .unwrap();
        assert!(c.enabled);
        assert_eq!(c.primary_gateways.len(), 3);
        assert_eq!(c.primary_gateways_interval, Duration::from_secs(5));
        let mut warnings = Vec::new();
        let c = parse(
            json!({"primary_gateways_interval": "10ms"})
                .as_object()
                .unwrap(),
            &mut warnings,
        )
        .unwrap();
        assert_eq!(c.primary_gateways_interval, MIN_PRIMARY_GATEWAYS_INTERVAL);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn bad_values_name_their_key() {
        for (config, key) in [
            (
                json!({"connect": {"enable_mesh_gateway_wan_federation": "yes"}}),
                "connect.enable_mesh_gateway_wan_federation",
            ),
            (
                json!({"primary_gateways": ["127.0.0.16"]}),
                "primary_gateways",
            ),
            (json!({"primary_gateways": [":443"]}), "primary_gateways"),
            (json!({"primary_gateways": ["gw:0"]}), "primary_gateways"),
            (json!({"primary_gateways": [7]}), "primary_gateways"),
            (
                json!({"primary_gateways_interval": "often"}),
                "primary_gateways_interval",
            ),
        ] {
            let e = parse_json(config.clone()).unwrap_err().0;
            assert!(e.starts_with(key), "{config}: {e}");
        }
    }
}
