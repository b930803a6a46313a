//! Key translation for request bodies and agent config: Consul accepts both
//! `PascalCase` (`DestinationServiceID`) and `snake_case`
//! (`destination_service_id`) field names. [`canonicalize_keys`] rewrites every
//! field name to its canonical PascalCase spelling *per field*: the keys of
//! free-form maps (`Meta`, `NodeMeta`, `Config`, `Header`, ...) are user data
//! and stay exactly as given.

use serde_json::{Map, Value};

/// Every field name of the wire types, in its canonical spelling. Keys are
/// matched against it case-insensitively and ignoring `_`, the way Go's JSON
/// decoder (case-insensitive) and Consul's snake_case translation combine,
/// so `lockdelay`, `lock_delay` and `LockDelay` all read as `LockDelay`. A
/// test checks that every field of this crate's types is listed.
pub const CANONICAL_NAMES: &[&str] = &[
    "Action",
    "Active",
    "ActiveRootID",
    "Address",
    "Agent",
    "AgentURI",
    "AliasNode",
    "AliasService",
    "Allowed",
    "Args",
    "AuthMethod",
    "Authorized",
    "BearerToken",
    "Behavior",
    "BillableServiceInstances",
    "BindName",
    "BindType",
    "BindVars",
    "Body",
    "CSR",
    "CentrallyConfigured",
    "CertFile",
    "CertPEM",
    "Check",
    "CheckID",
    "Checks",
    "CipherSuites",
    "CleanupDeadServers",
    "ClientCertSerial",
    "ClientCertURI",
    "ClusterID",
    "Config",
    "Connect",
    "ConnectServiceInstances",
    "ConnectTimeout",
    "Consumers",
    "CreateIndex",
    "CreatedAt",
    "DNS",
    "Datacenter",
    "Datacenters",
    "DefaultSubset",
    "Definition",
    "DeregisterCriticalServiceAfter",
    "Description",
    "DestinationNS",
    "DestinationName",
    "DestinationNamespace",
    "DestinationPartition",
    "DestinationPeer",
    "DestinationServiceID",
    "DestinationServiceName",
    "DestinationType",
    "DialedDirectly",
    "DisableUpgradeMigration",
    "DisplayName",
    "DockerContainerID",
    "EnableTagOverride",
    "Enabled",
    "Errors",
    "Expose",
    "ExposedPort",
    "ExternalSNI",
    "ExternalTrustDomain",
    "Failover",
    "FailureTolerance",
    "FailuresBeforeCritical",
    "FailuresBeforeWarning",
    "Flags",
    "ForceWithoutCrossSigning",
    "GRPC",
    "GRPCUseTLS",
    "H2PING",
    "H2PingUseTLS",
    "HTTP",
    "HTTP2",
    "Header",
    "Healthy",
    "ID",
    "IdleTimeout",
    "IgnoreCase",
    "IgnoreCheckIDs",
    "Index",
    "IntermediateCerts",
    "Interval",
    "JWT",
    "KV",
    "Key",
    "KeyFile",
    "Kind",
    "LastContact",
    "LastContactThreshold",
    "LastError",
    "LastErrorMessage",
    "LastIndex",
    "LastSuccess",
    "LastTerm",
    "Leader",
    "LegacyID",
    "ListenerPort",
    "Listeners",
    "LoadBalancer",
    "LocalBindAddress",
    "LocalBindPort",
    "LocalBindSocketMode",
    "LocalBindSocketPath",
    "LocalPathPort",
    "LocalServiceAddress",
    "LocalServicePort",
    "LocalServiceSocketPath",
    "Locality",
    "LockDelay",
    "LockIndex",
    "MaxTokenTTL",
    "MaxTrailingLogs",
    "MeshGateway",
    "MeshGatewayMode",
    "Meta",
    "Method",
    "MinQuorum",
    "Mode",
    "ModifyIndex",
    "MutualTLSMode",
    "Name",
    "Namespace",
    "Native",
    "Near",
    "NearestN",
    "Node",
    "NodeChecks",
    "NodeID",
    "NodeMeta",
    "NotAfter",
    "NotBefore",
    "Notes",
    "NumRetries",
    "OSService",
    "OnlyPassing",
    "OpIndex",
    "OutboundListenerPort",
    "Output",
    "ParsedFromCheck",
    "Partition",
    "Passing",
    "PassingOnly",
    "Path",
    "PathExact",
    "PathPrefix",
    "PathRegex",
    "Paths",
    "Peer",
    "Permissions",
    "Port",
    "Precedence",
    "PrefixRewrite",
    "PrivateKeyBits",
    "PrivateKeyPEM",
    "PrivateKeyType",
    "Protocol",
    "ProtocolVersion",
    "Provider",
    "Proxy",
    "Reason",
    "Redirect",
    "RedundancyZoneTag",
    "Regexp",
    "Region",
    "RemoveEmptyTags",
    "ReplicatedIndex",
    "ReplicatedRoleIndex",
    "ReplicatedTokenIndex",
    "ReplicationType",
    "RequestTimeout",
    "Results",
    "RetryOn",
    "RetryOnConnectFailure",
    "RetryOnStatusCodes",
    "RootCert",
    "Roots",
    "RotatedOutAt",
    "Routes",
    "Running",
    "SDS",
    "SNI",
    "SamenessGroup",
    "ScriptArgs",
    "Selector",
    "SerfStatus",
    "SerialNumber",
    "ServerStabilizationTime",
    "Servers",
    "Service",
    "ServiceAddress",
    "ServiceChecks",
    "ServiceConnect",
    "ServiceEnableTagOverride",
    "ServiceID",
    "ServiceInstances",
    "ServiceKind",
    "ServiceLocality",
    "ServiceMeta",
    "ServiceName",
    "ServicePort",
    "ServiceProxy",
    "ServiceSocketPath",
    "ServiceSubset",
    "ServiceTaggedAddresses",
    "ServiceTags",
    "ServiceURI",
    "ServiceWeights",
    "Services",
    "Session",
    "SessionID",
    "SidecarService",
    "SigningKeyID",
    "SkipNodeUpdate",
    "SocketPath",
    "SourceDatacenter",
    "SourceIP",
    "SourceNS",
    "SourceName",
    "SourcePartition",
    "SourcePeer",
    "SourceType",
    "Sources",
    "Splits",
    "StableSince",
    "Status",
    "Subsets",
    "SuccessBeforePassing",
    "TCP",
    "TLS",
    "TLSMaxVersion",
    "TLSMinVersion",
    "TLSServerName",
    "TLSSkipVerify",
    "TTL",
    "TaggedAddresses",
    "Tags",
    "Target",
    "Targets",
    "Template",
    "TemplateID",
    "TemplateName",
    "TemplateVariables",
    "TemplatedPolicies",
    "Timeout",
    "Token",
    "TokenLocality",
    "TransparentProxy",
    "TrustDomain",
    "Type",
    "UDP",
    "UpdatedAt",
    "UpgradeVersionTag",
    "Upstreams",
    "ValidAfter",
    "ValidBefore",
    "Value",
    "Verb",
    "Version",
    "Voter",
    "Warning",
    "Weight",
    "Weights",
    "What",
    "Zone",
];

/// Fields whose value, when it is an object, is a map of user data: its
/// keys and values are left untouched (`Header` is such a map in checks but
/// a list of matchers in routers; lists are canonicalized as usual).
const OPAQUE_MAPS: &[&str] = &[
    "Meta",
    "NodeMeta",
    "ServiceMeta",
    "Config",
    "Header",
    "Definition",
    "Add",
    "Set",
];

/// Maps whose own keys are user data but whose values are structured
/// objects (subset names, failover keys, tagged address names).
const KEYED_MAPS: &[&str] = &[
    "TaggedAddresses",
    "ServiceTaggedAddresses",
    "Subsets",
    "Failover",
];

/// Returns the canonical spelling of one field name.
pub fn canonical_key(key: &str) -> String {
    let folded: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .collect::<String>()
        .to_ascii_lowercase();
    if let Some(name) = CANONICAL_NAMES
        .iter()
        .find(|name| name.eq_ignore_ascii_case(&folded))
    {
        return (*name).to_string();
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
        // Go decodes `null` as the field's zero value: as if absent (Go
        // clients send `"Checks": null` and the like).
        if value.is_null() {
            continue;
        }
        let canonical = canonical_key(&key);
        let already_canonical = key == canonical;
        let value = if OPAQUE_MAPS.contains(&canonical.as_str()) && value.is_object() {
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
    fn null_fields_read_as_absent_as_go_decodes_them() {
        let given = json!({"Name": "gw", "Checks": null, "check": null, "Meta": {"a": null}});
        assert_eq!(
            canonicalize_keys(given),
            json!({"Name": "gw", "Meta": {"a": null}})
        );
    }

    /// Field names declared by this crate's wire types (`pub field:` lines,
    /// honouring `rename = "..."`), read from the sources themselves.
    fn declared_field_names() -> Vec<String> {
        let sources = [
            include_str!("catalog.rs"),
            include_str!("kv.rs"),
            include_str!("session.rs"),
            include_str!("rpc.rs"),
            include_str!("connect.rs"),
            include_str!("intention.rs"),
        ];
        let mut names = Vec::new();
        for source in sources {
            let mut rename: Option<String> = None;
            for line in source.lines() {
                let line = line.trim();
                // Attributes may span lines after formatting; a rename applies
                // to the next field.
                if let Some(start) = line.find("rename = \"") {
                    rename = line[start + 10..].split('"').next().map(String::from);
                }
                if let Some(rest) = line.strip_prefix("pub ") {
                    if let Some((field, _)) = rest.split_once(": ") {
                        if field.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                            && field != "raft"
                        {
                            let name = rename.take().unwrap_or_else(|| {
                                field
                                    .split('_')
                                    .map(|p| p[..1].to_uppercase() + &p[1..])
                                    .collect()
                            });
                            names.push(name);
                        }
                    }
                    rename = None;
                }
            }
        }
        names
    }

    #[test]
    fn every_wire_field_is_registered() {
        let names = declared_field_names();
        assert!(
            names.len() > 50,
            "the source scan found too little: {names:?}"
        );
        for name in names {
            assert!(
                CANONICAL_NAMES.contains(&name.as_str()),
                "{name} is missing from CANONICAL_NAMES"
            );
        }
    }

    #[test]
    fn config_entry_keys() {
        let input = json!({
            "kind": "service-router", "name": "web",
            "routes": [{"match": {"http": {"path_prefix": "/admin", "header": [{"name": "x-debug", "exact": "1"}]}},
                        "destination": {"service": "admin", "request_headers": {"add": {"x-from": "router"}}}}],
            "subsets": {"v1": {"filter": "Service.Meta.version == v1", "only_passing": true}},
            "failover": {"*": {"datacenters": ["dc2"]}},
            "load_balancer": {"hash_policies": [{"source_ip": true}]}
        });
        assert_eq!(
            canonicalize_keys(input),
            json!({
                "Kind": "service-router", "Name": "web",
                "Routes": [{"Match": {"HTTP": {"PathPrefix": "/admin", "Header": [{"Name": "x-debug", "Exact": "1"}]}},
                            "Destination": {"Service": "admin", "RequestHeaders": {"Add": {"x-from": "router"}}}}],
                "Subsets": {"v1": {"Filter": "Service.Meta.version == v1", "OnlyPassing": true}},
                "Failover": {"*": {"Datacenters": ["dc2"]}},
                "LoadBalancer": {"HashPolicies": [{"SourceIP": true}]}
            })
        );
    }

    #[test]
    fn keys_match_case_insensitively() {
        assert_eq!(canonical_key("lockdelay"), "LockDelay");
        assert_eq!(canonical_key("LOCKDELAY"), "LockDelay");
        assert_eq!(canonical_key("nodechecks"), "NodeChecks");
        assert_eq!(canonical_key("Unknown_thing"), "UnknownThing");
    }

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
