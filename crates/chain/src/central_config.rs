//! Central service configuration merged into a proxy's or a gateway's
//! registration, as Consul's `?merge-central-config` and its agents'
//! service manager do (`configentry.ComputeResolvedServiceConfig`, then
//! `MergeServiceConfig`): `proxy-defaults` and the service's own
//! `service-defaults` resolve into one set of defaults, which fills what
//! the instance left unset — the instance's own values always win — and
//! each upstream gets its destination's protocol and the `UpstreamConfig`
//! defaults and overrides.

use serde_json::{Map, Value};

use legate_types::catalog::{ConnectProxyConfig, ExposeConfig, ExposePath, Upstream};

use crate::entries::RoutingEntries;

/// Kinds whose registrations are merged (every other service is left as
/// it is, as Consul leaves it).
const GATEWAY_KINDS: &[&str] = &[
    "mesh-gateway",
    "terminating-gateway",
    "ingress-gateway",
    "api-gateway",
];

/// Whether registrations of `kind` take central config: sidecar proxies
/// and gateways.
pub fn applies_to(kind: &str) -> bool {
    kind == "connect-proxy" || GATEWAY_KINDS.contains(&kind)
}

/// The service-defaults fields copied into a proxy's `Config`, with the
/// key each becomes.
const INBOUND_KEYS: &[(&str, &str)] = &[
    ("BalanceInboundConnections", "balance_inbound_connections"),
    ("MaxInboundConnections", "max_inbound_connections"),
    ("LocalConnectTimeoutMs", "local_connect_timeout_ms"),
    ("LocalRequestTimeoutMs", "local_request_timeout_ms"),
];

/// `UpstreamConfig` fields and the upstream `Config` key each becomes
/// (Consul's `UpstreamConfig.MergeInto`).
const UPSTREAM_KEYS: &[(&str, &str)] = &[
    ("Protocol", "protocol"),
    ("ConnectTimeoutMs", "connect_timeout_ms"),
    ("Limits", "limits"),
    ("PassiveHealthCheck", "passive_health_check"),
    ("EnvoyListenerJSON", "envoy_listener_json"),
    ("EnvoyClusterJSON", "envoy_cluster_json"),
    ("BalanceOutboundConnections", "balance_outbound_connections"),
];

/// The defaults `proxy-defaults` and a service's `service-defaults`
/// resolve to.
#[derive(Debug, Default, Clone, PartialEq)]
struct Resolved {
    config: Map<String, Value>,
    mode: String,
    outbound_listener_port: u16,
    dialed_directly: bool,
    mesh_gateway_mode: String,
    expose: ExposeConfig,
}

/// Whether a value is Go's zero for its JSON type (mergo's "empty").
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn text(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn transparent_proxy(value: Option<&Value>) -> (u16, bool) {
    let port = value
        .and_then(|t| t.get("OutboundListenerPort"))
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0);
    let direct = value
        .and_then(|t| t.get("DialedDirectly"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    (port, direct)
}

fn expose(value: Option<&Value>) -> ExposeConfig {
    let Some(value) = value else {
        return ExposeConfig::default();
    };
    let paths = value
        .get("Paths")
        .and_then(Value::as_array)
        .map(|paths| {
            paths
                .iter()
                .filter_map(|p| serde_json::from_value::<ExposePath>(p.clone()).ok())
                .collect()
        })
        .unwrap_or_default();
    ExposeConfig {
        checks: value
            .get("Checks")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        paths,
    }
}

/// Consul's `ComputeResolvedServiceConfig` for the service `name`:
/// proxy-defaults first, the service's own service-defaults over it.
fn resolve(entries: &RoutingEntries, name: &str) -> Resolved {
    let mut resolved = Resolved::default();
    if let Some(pd) = &entries.proxy_defaults {
        resolved.config = pd.config.clone();
        resolved.mode = pd.mode.clone();
        (resolved.outbound_listener_port, resolved.dialed_directly) =
            transparent_proxy(pd.transparent_proxy.as_ref());
        resolved.mesh_gateway_mode = pd.mesh_gateway.mode.clone();
        resolved.expose = expose(pd.expose.as_ref());
    }
    let Some(sd) = entries.defaults.get(name) else {
        return resolved;
    };
    if !sd.protocol.is_empty() {
        resolved
            .config
            .insert("protocol".into(), Value::String(sd.protocol.clone()));
    }
    let inbound = [
        Value::String(sd.balance_inbound_connections.clone()),
        Value::from(sd.max_inbound_connections),
        Value::from(sd.local_connect_timeout_ms),
        Value::from(sd.local_request_timeout_ms),
    ];
    for ((_, key), value) in INBOUND_KEYS.iter().zip(inbound) {
        if !is_empty(&value) {
            resolved.config.insert((*key).into(), value);
        }
    }
    if !sd.mesh_gateway.mode.is_empty() {
        resolved.mesh_gateway_mode = sd.mesh_gateway.mode.clone();
    }
    if !sd.mode.is_empty() {
        resolved.mode = sd.mode.clone();
    }
    let (port, direct) = transparent_proxy(sd.transparent_proxy.as_ref());
    if port != 0 {
        resolved.outbound_listener_port = port;
    }
    resolved.dialed_directly |= direct;
    let own = expose(sd.expose.as_ref());
    resolved.expose.checks |= own.checks;
    if !own.paths.is_empty() {
        resolved.expose.paths = own.paths;
    }
    resolved
}

/// Fills `config`'s missing (or zero) keys from `defaults`.
fn fill(config: &mut Map<String, Value>, defaults: &Map<String, Value>) {
    for (key, value) in defaults {
        match config.get(key) {
            Some(existing) if !is_empty(existing) => {}
            _ => {
                config.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Applies one `UpstreamConfig` block (`Defaults` or an override) to an
/// upstream's resolved config and mesh gateway mode.
fn apply_upstream_block(block: &Value, config: &mut Map<String, Value>, mesh_gateway: &mut String) {
    for (field, key) in UPSTREAM_KEYS {
        if let Some(value) = block.get(*field).filter(|v| !is_empty(v)) {
            config.insert((*key).into(), value.clone());
        }
    }
    let mode = text(block.get("MeshGateway").and_then(|m| m.get("Mode")));
    if !mode.is_empty() {
        *mesh_gateway = mode;
    }
}

/// The config and mesh gateway mode central config gives the upstream
/// `destination` of the service `name` (Consul's order: proxy-defaults'
/// protocol, the destination's own protocol, the resolved mesh gateway,
/// `UpstreamConfig.Defaults`, the instance's mesh gateway, then the
/// override naming the destination).
fn upstream_defaults(
    entries: &RoutingEntries,
    name: &str,
    destination: &str,
    resolved: &Resolved,
    instance_mesh_gateway: &str,
) -> (Map<String, Value>, String) {
    let mut config = Map::new();
    if let Some(protocol) = entries
        .proxy_defaults
        .as_ref()
        .and_then(|pd| pd.config.get("protocol"))
        .filter(|p| !is_empty(p))
    {
        config.insert("protocol".into(), protocol.clone());
    }
    if let Some(sd) = entries
        .defaults
        .get(destination)
        .filter(|sd| !sd.protocol.is_empty())
    {
        config.insert("protocol".into(), Value::String(sd.protocol.clone()));
    }
    let mut mesh_gateway = resolved.mesh_gateway_mode.clone();
    let upstream_config = entries
        .defaults
        .get(name)
        .and_then(|sd| sd.upstream_config.as_ref());
    if let Some(defaults) = upstream_config.and_then(|u| u.get("Defaults")) {
        apply_upstream_block(defaults, &mut config, &mut mesh_gateway);
    }
    if !instance_mesh_gateway.is_empty() {
        mesh_gateway = instance_mesh_gateway.to_string();
    }
    let overrides = upstream_config
        .and_then(|u| u.get("Overrides"))
        .and_then(Value::as_array);
    for block in overrides.into_iter().flatten() {
        if text(block.get("Name")) == destination {
            apply_upstream_block(block, &mut config, &mut mesh_gateway);
        }
    }
    (config, mesh_gateway)
}

/// Whether the service `name`'s service-defaults has an
/// `UpstreamConfig.Defaults` block.
fn has_upstream_defaults(entries: &RoutingEntries, name: &str) -> bool {
    entries
        .defaults
        .get(name)
        .and_then(|sd| sd.upstream_config.as_ref())
        .and_then(|u| u.get("Defaults"))
        .is_some_and(|d| !d.is_null())
}

/// The names `UpstreamConfig.Overrides` of the service `name` configure.
fn override_names(entries: &RoutingEntries, name: &str) -> Vec<String> {
    entries
        .defaults
        .get(name)
        .and_then(|sd| sd.upstream_config.as_ref())
        .and_then(|u| u.get("Overrides"))
        .and_then(Value::as_array)
        .map(|overrides| {
            overrides
                .iter()
                .map(|o| text(o.get("Name")))
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Merges central config into the registration of a service of `kind`
/// named `service` whose proxy settings are `proxy`. Sidecar proxies are
/// configured under their destination's name, gateways under their own;
/// other kinds are left alone. Returns whether anything could apply.
pub fn merge(
    kind: &str,
    service: &str,
    proxy: &mut ConnectProxyConfig,
    entries: &RoutingEntries,
) -> bool {
    if !applies_to(kind) {
        return false;
    }
    let sidecar = kind == "connect-proxy";
    let name = if sidecar {
        proxy.destination_service_name.clone()
    } else {
        service.to_string()
    };
    let resolved = resolve(entries, &name);
    // The instance's own mode, before central config fills it: only a
    // mode the registration set outranks `UpstreamConfig.Defaults`.
    let instance_mesh_gateway = proxy.mesh_gateway.mode.clone();
    fill(&mut proxy.config, &resolved.config);
    if proxy.mesh_gateway.mode.is_empty() {
        proxy.mesh_gateway.mode = resolved.mesh_gateway_mode.clone();
    }
    if proxy.mode.is_empty() {
        proxy.mode = resolved.mode.clone();
    }
    if proxy.transparent_proxy.outbound_listener_port == 0 {
        proxy.transparent_proxy.outbound_listener_port = resolved.outbound_listener_port;
    }
    proxy.transparent_proxy.dialed_directly |= resolved.dialed_directly;
    if !proxy.expose.checks {
        proxy.expose.checks = resolved.expose.checks;
    }
    if proxy.expose.paths.is_empty() {
        proxy.expose.paths = resolved.expose.paths.clone();
    }
    let transparent = proxy.mode == "transparent";
    if !sidecar || (proxy.upstreams.is_empty() && !transparent) {
        return true;
    }
    let mut upstreams: Vec<Upstream> = proxy.upstreams.as_ref().clone();
    for upstream in upstreams.iter_mut() {
        if !matches!(upstream.destination_type.as_str(), "" | "service") {
            continue;
        }
        let (config, mesh_gateway) = upstream_defaults(
            entries,
            &name,
            &upstream.destination_name,
            &resolved,
            &instance_mesh_gateway,
        );
        if upstream.mesh_gateway.mode.is_empty() {
            upstream.mesh_gateway.mode = mesh_gateway;
        }
        fill(&mut upstream.config, &config);
    }
    if transparent {
        let mut central = override_names(entries, &name);
        central.push("*".into());
        for destination in central {
            if upstreams.iter().any(|u| u.destination_name == destination) {
                continue;
            }
            let (config, mesh_gateway) = upstream_defaults(
                entries,
                &name,
                &destination,
                &resolved,
                &instance_mesh_gateway,
            );
            // Consul adds the wildcard upstream only when something
            // configures it: `UpstreamConfig.Defaults`, or a protocol or
            // mesh gateway mode every upstream inherits.
            if destination == "*"
                && config.is_empty()
                && mesh_gateway.is_empty()
                && !has_upstream_defaults(entries, &name)
            {
                continue;
            }
            let mut upstream = Upstream {
                destination_name: destination,
                config,
                centrally_configured: true,
                ..Default::default()
            };
            upstream.mesh_gateway.mode = mesh_gateway;
            upstreams.push(upstream);
        }
    }
    proxy.upstreams = std::sync::Arc::new(upstreams);
    true
}

#[cfg(test)]
#[path = "central_config_tests.rs"]
mod tests;
