//! Key translation for request bodies and agent config: Consul accepts both
//! `PascalCase` (`DestinationServiceID`) and `snake_case`
//! (`destination_service_id`) field names. [`canonicalize_keys`] rewrites every
//! field name to its canonical PascalCase spelling *per field*: the keys of
//! free-form maps (`Meta`, `NodeMeta`, `Config`, `Header`, ...) are user data
//! and stay exactly as given.

use serde_json::{Map, Value};

/// Field names whose canonical spelling is not plain PascalCase of their
/// snake_case form (acronyms, mostly). Compared after removing `_` and
/// lower-casing.
const CANONICAL_NAMES: &[&str] = &[
    "ID",
    "TTL",
    "HTTP",
    "TCP",
    "UDP",
    "GRPC",
    "GRPCUseTLS",
    "H2PING",
    "H2PingUseTLS",
    "TLSSkipVerify",
    "TLSServerName",
    "CheckID",
    "ServiceID",
    "NodeID",
    "DestinationServiceID",
    "DockerContainerID",
    "OSService",
    "SNI",
    "TLS",
    "DNS",
    "ACL",
    "CAFile",
    "LegacyID",
    "ExposedPort",
    "SessionID",
];

/// Maps whose own keys are user data; their values are left untouched too.
const OPAQUE_MAPS: &[&str] = &[
    "Meta",
    "NodeMeta",
    "ServiceMeta",
    "Config",
    "Header",
    "Definition",
];

/// Maps whose own keys are user data but whose values are structured objects.
const KEYED_MAPS: &[&str] = &["TaggedAddresses", "ServiceTaggedAddresses"];

/// Returns the canonical spelling of one field name.
pub fn canonical_key(key: &str) -> String {
    let folded: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .collect::<String>()
        .to_ascii_lowercase();
    for name in CANONICAL_NAMES {
        if name.to_ascii_lowercase() == folded {
            return (*name).to_string();
        }
    }
    if !key.contains('_') && !key.contains('-') {
        let mut chars = key.chars();
        return match chars.next() {
            Some(first) => first.to_uppercase().collect::<String>() + chars.as_str(),
            None => String::new(),
        };
    }
    let mut out = String::with_capacity(key.len());
    for part in key.split(['_', '-']) {
        let lower = part.to_ascii_lowercase();
        let canonical_part = match lower.as_str() {
            "id" => "ID".to_string(),
            "ttl" => "TTL".to_string(),
            "http" => "HTTP".to_string(),
            "tcp" => "TCP".to_string(),
            "udp" => "UDP".to_string(),
            "grpc" => "GRPC".to_string(),
            "tls" => "TLS".to_string(),
            "sni" => "SNI".to_string(),
            _ => {
                let mut c = part.chars();
                match c.next() {
                    Some(first) => first.to_uppercase().collect::<String>() + c.as_str(),
                    None => String::new(),
                }
            }
        };
        out.push_str(&canonical_part);
    }
    out
}

/// Rewrites every field name in `value` to its canonical PascalCase spelling,
/// leaving the contents of free-form maps as given. When both spellings of a
/// field appear, the PascalCase one wins.
pub fn canonicalize_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(canonicalize_object(map)),
        Value::Array(items) => Value::Array(items.into_iter().map(canonicalize_keys).collect()),
        other => other,
    }
}

fn canonicalize_object(map: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        let canonical = canonical_key(&key);
        let already_canonical = key == canonical;
        let value = if OPAQUE_MAPS.contains(&canonical.as_str()) {
            value
        } else if KEYED_MAPS.contains(&canonical.as_str()) {
            match value {
                Value::Object(inner) => Value::Object(
                    inner
                        .into_iter()
                        .map(|(k, v)| (k, canonicalize_keys(v)))
                        .collect(),
                ),
                other => other,
            }
        } else {
            canonicalize_keys(value)
        };
        if out.contains_key(&canonical) && !already_canonical {
            continue;
        }
        out.insert(canonical, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn snake_and_pascal_both_canonical() {
        assert_eq!(
            canonical_key("destination_service_id"),
            "DestinationServiceID"
        );
        assert_eq!(
            canonical_key("DestinationServiceID"),
            "DestinationServiceID"
        );
        assert_eq!(canonical_key("local_bind_port"), "LocalBindPort");
        assert_eq!(canonical_key("tls_skip_verify"), "TLSSkipVerify");
        assert_eq!(canonical_key("grpc_use_tls"), "GRPCUseTLS");
        assert_eq!(canonical_key("ttl"), "TTL");
        assert_eq!(canonical_key("name"), "Name");
        assert_eq!(canonical_key("id"), "ID");
        assert_eq!(canonical_key("check_id"), "CheckID");
        assert_eq!(
            canonical_key("deregister_critical_service_after"),
            "DeregisterCriticalServiceAfter"
        );
        assert_eq!(canonical_key("sidecar_service"), "SidecarService");
    }

    #[test]
    fn free_form_maps_keep_their_keys() {
        let input = json!({
            "name": "web",
            "meta": {"snake_key": "v", "Pascal": "w"},
            "connect": {"sidecar_service": {"proxy": {
                "config": {"envoy_prometheus_bind_addr": "0.0.0.0:9102"},
                "upstreams": [{"destination_name": "db", "local_bind_port": 9191,
                               "config": {"connect_timeout_ms": 3000}}]
            }}},
            "tagged_addresses": {"lan_ipv4": {"address": "10.0.0.1", "port": 80}}
        });
        let out = canonicalize_keys(input);
        assert_eq!(
            out,
            json!({
                "Name": "web",
                "Meta": {"snake_key": "v", "Pascal": "w"},
                "Connect": {"SidecarService": {"Proxy": {
                    "Config": {"envoy_prometheus_bind_addr": "0.0.0.0:9102"},
                    "Upstreams": [{"DestinationName": "db", "LocalBindPort": 9191,
                                   "Config": {"connect_timeout_ms": 3000}}]
                }}},
                "TaggedAddresses": {"lan_ipv4": {"Address": "10.0.0.1", "Port": 80}}
            })
        );
    }
}
