//! Agent configuration: HCL (HCL1) and JSON files, merged in Consul's order
//! (dev defaults, then files in the order given with `-config-dir` files in
//! lexical order, then flags), into one [`AgentConfig`].
//!
//! Merge rules, as Consul's: objects merge key by key, lists append, other
//! values are replaced by later ones. `service`/`check` are folded into
//! `services`/`checks`. Unknown top-level keys are refused with the file and
//! key named; documented keys Legate does not implement yet are accepted
//! with one warning each.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use legate_types::keys::canonicalize_keys;
use legate_types::{CheckDefinition, ServiceDefinition};
use serde_json::{Map, Value};

use crate::config_keys::{IMPLEMENTED_KEYS, KNOWN_KEYS, KNOWN_PORTS, NO_MEANING_KEYS};
pub use crate::config_sources::{parse_file, ConfigFormat, ConfigSource};
use crate::tls_config::Listener;
pub use crate::tls_config::TlsFiles;

/// A configuration error naming where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Listening ports; `None` means disabled (`-1` in config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    /// HTTP API.
    pub http: Option<u16>,
    /// HTTPS API.
    pub https: Option<u16>,
    /// DNS.
    pub dns: Option<u16>,
    /// Plain gRPC (xDS).
    pub grpc: Option<u16>,
    /// gRPC over TLS.
    pub grpc_tls: Option<u16>,
    /// LAN gossip.
    pub serf_lan: Option<u16>,
    /// WAN gossip.
    pub serf_wan: Option<u16>,
    /// Server RPC.
    pub server: Option<u16>,
    /// First port for auto-assigned sidecars.
    pub sidecar_min_port: u16,
    /// Last port for auto-assigned sidecars.
    pub sidecar_max_port: u16,
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            http: Some(8500),
            https: None,
            dns: Some(8600),
            grpc: None,
            grpc_tls: Some(8503),
            serf_lan: Some(8301),
            serf_wan: Some(8302),
            server: Some(8300),
            sidecar_min_port: 21000,
            sidecar_max_port: 21255,
        }
    }
}

/// The agent's effective configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Dev mode: one in-memory server.
    pub dev: bool,
    /// Run a server in this agent.
    pub server: bool,
    /// Bootstrap a one-server cluster.
    pub bootstrap: bool,
    /// Servers to wait for before bootstrapping.
    pub bootstrap_expect: u32,
    /// Datacenter.
    pub datacenter: String,
    /// Primary datacenter.
    pub primary_datacenter: String,
    /// Node name.
    pub node_name: String,
    /// Node id (UUID); generated and persisted when not given.
    pub node_id: String,
    /// Node metadata.
    pub node_meta: legate_types::catalog::Meta,
    /// Where the node runs (`locality`); services inherit it.
    pub locality: Option<legate_types::Locality>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Address the HTTP/DNS/gRPC listeners bind.
    pub client_addr: IpAddr,
    /// Address the HTTP API binds (`addresses.http`), when it differs from
    /// `client_addr`.
    pub http_addr: Option<IpAddr>,
    /// The unix socket the HTTP API serves on instead of a TCP port
    /// (`addresses.http = "unix://<path>"`, `unix_sockets`).
    pub http_unix: Option<crate::unix_socket_config::UnixSocket>,
    /// Address the DNS server binds (`addresses.dns`), when it differs from
    /// `client_addr`.
    pub dns_addr: Option<IpAddr>,
    /// Address cluster traffic binds.
    pub bind_addr: IpAddr,
    /// Address advertised to others.
    pub advertise_addr: Option<IpAddr>,
    /// Ports.
    pub ports: Ports,
    /// Log level.
    pub log_level: String,
    /// Logs as JSON.
    pub log_json: bool,
    /// PID file.
    pub pid_file: Option<PathBuf>,
    /// DNS domain.
    pub domain: String,
    /// The DNS interface (`dns_config`, `domain`, `alt_domain`, `recursors`).
    pub dns: crate::dns_config::DnsConfig,
    /// The bounds of the agent's caches (`cache`).
    pub cache: crate::cache_config::CacheConfig,
    /// `check_output_max_size` and `discard_check_output`.
    pub check_output: crate::check_output::CheckOutputPolicy,
    /// `http_config`.
    pub http_config: crate::http_config::HttpConfig,
    /// `raft_snapshot_threshold`, `raft_snapshot_interval`,
    /// `raft_trailing_logs`.
    pub raft_tuning: crate::raft_config::RaftTuning,
    /// `disable_coordinates`: this agent neither sends nor serves network
    /// coordinates.
    pub disable_coordinates: bool,
    /// `advertise_addr_ipv4`/`_ipv6` and `advertise_addr_wan_ipv4`/`_ipv6`.
    pub family_addresses: crate::tagged_addresses::FamilyAddresses,
    /// `serf_lan_allowed_cidrs`, `serf_wan_allowed_cidrs`,
    /// `encrypt_verify_incoming`, `encrypt_verify_outgoing`.
    pub gossip_admission: crate::gossip_admission::GossipAdmission,
    /// `server_rejoin_age_max` (a week): a server down longer refuses to
    /// start on its old data.
    pub server_rejoin_age_max: std::time::Duration,
    /// `reconnect_timeout`, `reconnect_timeout_wan`,
    /// `advertise_reconnect_timeout`.
    pub reconnect: crate::reconnect_config::ReconnectTimeouts,
    /// `server_name`: the name this agent's certificate is checked
    /// against by its own checks (else the node name).
    pub server_name: Option<String>,
    /// `xds { update_max_per_second }` (250): new proxy configurations
    /// sent per second across all xDS streams.
    pub xds_update_max_per_second: f64,
    /// `enable_agent_tls_for_checks`: HTTP and gRPC checks use the
    /// agent's CA and certificate.
    pub enable_agent_tls_for_checks: bool,
    /// `disable_remote_exec` (default true): `_rexec` events are ignored.
    pub disable_remote_exec: bool,
    /// `enable_central_service_config` (default true): the agent's views of
    /// its proxies and gateways carry central config merged in.
    pub enable_central_service_config: bool,
    /// `disable_keyring_file`: gossip keys are never saved to (or read
    /// from) the data dir.
    pub disable_keyring_file: bool,
    /// `disable_host_node_id` (default true): a new node id is random,
    /// not derived from the host's.
    pub disable_host_node_id: bool,
    /// `serf_lan`: the address LAN gossip binds (else `bind_addr`).
    pub serf_lan_bind: Option<IpAddr>,
    /// `serf_wan`: the address WAN gossip binds (else `bind_addr`).
    pub serf_wan_bind: Option<IpAddr>,
    /// `auto_reload_config`: reload when a config or TLS file changes.
    pub auto_reload_config: bool,
    /// `enable_syslog` and `syslog_facility` (`None`: no syslog).
    pub syslog: Option<crate::syslog_config::SyslogConfig>,
    /// `log_file` and its rotation (`None`: the console only).
    pub log_file: Option<crate::log_file_config::LogFileConfig>,
    /// Allow script checks from the API.
    pub enable_script_checks: bool,
    /// Allow script checks from config files.
    pub enable_local_script_checks: bool,
    /// Raft timing multiplier.
    pub raft_multiplier: u64,
    /// Connection and session bounds (`limits {}`, `session_ttl_min`).
    pub limits: crate::limits::Limits,
    /// Autopilot (`autopilot {}`: dead-server cleanup, stabilization).
    pub autopilot: legate_types::rpc::AutopilotConfig,
    /// TLS for the server port (`tls { defaults {...} internal_rpc {...} }`
    /// or the older top-level keys).
    pub tls: TlsFiles,
    /// TLS for the HTTPS port (`tls.https`, `tls.defaults`, the older keys).
    pub https_tls: TlsFiles,
    /// TLS for the gRPC TLS port (`tls.grpc`, `tls.defaults`).
    pub grpc_tls: TlsFiles,
    /// The web UI (`ui_config { }`, `-ui`, `-ui-dir`, `-ui-content-path`).
    pub ui: crate::ui_config::UiConfig,
    /// `telemetry { }`: metric names, filters, Prometheus retention
    /// (`None`: `?format=prometheus` is refused with Consul's 415), statsd.
    pub telemetry: legate_telemetry::TelemetryConfig,
    /// ACLs (`acl {}` and the older top-level keys).
    pub acl: crate::acl_config::AclConfig,
    /// Connect enabled.
    pub connect_enabled: bool,
    /// The CA provider and its settings used when the CA is first set up
    /// (`connect { ca_provider = "consul", ca_config { ... } }`).
    pub connect_ca: legate_types::connect::CaConfiguration,
    /// Gossip addresses to join at start (`start_join`, `-join`).
    pub start_join: Vec<String>,
    /// Gossip addresses to join until one answers (`retry_join`, `-retry-join`).
    pub retry_join: Vec<String>,
    /// How long to wait between join attempts (`retry_interval`, default 30s).
    pub retry_interval: Duration,
    /// LAN join attempts before the agent gives up and exits (`retry_max`;
    /// 0: forever).
    pub retry_max: u32,
    /// The gossip encryption key (`encrypt`, base64 of 16 or 32 bytes).
    pub encrypt: Option<String>,
    /// The WAN pool (joins, advertised address) and both pools' timing.
    pub wan: crate::wan_config::WanConfig,
    /// WAN federation through mesh gateways (`connect {
    /// enable_mesh_gateway_wan_federation }`, `primary_gateways`).
    pub mesh_federation: crate::wanfed_config::MeshFederation,
    /// Watches the agent runs (`watches`: Consul's watch parameters,
    /// checked and run by the binary).
    pub watches: Vec<Value>,
    /// Config entries to bootstrap (applied by a later component).
    pub config_entries_bootstrap: Vec<Value>,
    /// Services from config files.
    pub services: Vec<ServiceDefinition>,
    /// Checks from config files.
    pub checks: Vec<CheckDefinition>,
    /// Warnings collected while loading (printed once at startup).
    pub warnings: Vec<String>,
}

impl AgentConfig {
    /// The address to advertise: the configured one, else the bind address,
    /// else loopback.
    pub fn advertise(&self) -> IpAddr {
        if let Some(a) = self.advertise_addr {
            return a;
        }
        if self.bind_addr.is_unspecified() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            self.bind_addr
        }
    }
}

/// Folds singular `service`/`check` into the plural lists and makes every
/// list-typed field a list.
fn normalize_fragment(name: &str, value: Value) -> Result<Map<String, Value>, ConfigError> {
    let Value::Object(map) = value else {
        return Err(ConfigError(format!(
            "Error parsing {name}: the top level must be an object"
        )));
    };
    let mut out = Map::new();
    for (key, value) in map {
        let (key, value) = match key.as_str() {
            "service" => ("services".to_string(), value),
            "check" => ("checks".to_string(), value),
            _ => (key, value),
        };
        let value = if matches!(
            key.as_str(),
            "services"
                | "checks"
                | "retry_join"
                | "retry_join_wan"
                | "start_join_wan"
                | "recursors"
        ) {
            as_list(value)
        } else {
            value
        };
        match out.get_mut(&key) {
            Some(existing) => merge(existing, value),
            None => {
                out.insert(key, value);
            }
        }
    }
    Ok(out)
}

fn as_list(value: Value) -> Value {
    match value {
        Value::Array(_) => value,
        other => Value::Array(vec![other]),
    }
}

/// Merges `later` into `base` (objects by key, lists appended, else replaced).
pub fn merge(base: &mut Value, later: Value) {
    match (base, later) {
        (Value::Object(base), Value::Object(later)) => {
            for (k, v) in later {
                match base.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        base.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(base), Value::Array(later)) => base.extend(later),
        (base, later) => *base = later,
    }
}

/// Loads and merges sources into a config.
pub fn load(sources: &[ConfigSource]) -> Result<AgentConfig, ConfigError> {
    load_as(sources, None)
}

/// [`load`], with every file read in `format` when one is given
/// (`-config-format`).
pub fn load_as(
    sources: &[ConfigSource],
    format: Option<ConfigFormat>,
) -> Result<AgentConfig, ConfigError> {
    let mut warnings = Vec::new();
    let fragments = crate::config_sources::expand_sources(sources, format, &mut warnings)?;
    let mut merged = Value::Object(Map::new());
    for (name, value) in fragments {
        let fragment = normalize_fragment(&name, value)?;
        for key in fragment.keys() {
            if !KNOWN_KEYS.contains(&key.as_str()) {
                return Err(ConfigError(format!(
                    "Error parsing {name}: invalid config key {key}"
                )));
            }
            if !IMPLEMENTED_KEYS.contains(&key.as_str()) {
                let warning = if NO_MEANING_KEYS.contains(&key.as_str()) {
                    format!("config key {key:?} ({name}) has no meaning in Legate and is ignored (see docs/compat.md)")
                } else {
                    format!(
                        "config key {key:?} ({name}) is accepted but not implemented by Legate yet"
                    )
                };
                if !warnings.contains(&warning) {
                    warnings.push(warning);
                }
            }
        }
        if let Some(Value::Object(cache)) = fragment.get("cache") {
            for key in ["entry_fetch_rate", "entry_fetch_max_burst"] {
                let warning = format!(
                    "config key \"cache.{key}\" ({name}) has no meaning in Legate and is ignored (see docs/compat.md)"
                );
                if cache.contains_key(key) && !warnings.contains(&warning) {
                    warnings.push(warning);
                }
            }
        }
        if let Some(Value::Object(ports)) = fragment.get("ports") {
            for key in ports.keys() {
                if !KNOWN_PORTS.contains(&key.as_str()) {
                    return Err(ConfigError(format!(
                        "Error parsing {name}: invalid config key ports.{key}"
                    )));
                }
            }
        }
        merge(&mut merged, Value::Object(fragment));
    }
    build(merged, warnings)
}

pub(crate) fn get<'a>(map: &'a Map<String, Value>, path: &[&str]) -> Option<&'a Value> {
    let mut current = map.get(path[0])?;
    for key in &path[1..] {
        current = current.as_object()?.get(*key)?;
    }
    Some(current)
}

/// `encrypt` must be base64 of 16 or 32 bytes (`legate keygen` makes one).
fn check_encrypt_key(key: String) -> Result<String, ConfigError> {
    use base64::Engine;
    match base64::engine::general_purpose::STANDARD.decode(key.trim()) {
        Ok(bytes) if bytes.len() == 16 || bytes.len() == 32 => Ok(key),
        Ok(bytes) => Err(ConfigError(format!(
            "encrypt: the key must be 16 or 32 bytes (AES-128 or AES-256), not {}",
            bytes.len()
        ))),
        Err(e) => Err(ConfigError(format!(
            "encrypt: the key is not valid base64: {e}"
        ))),
    }
}

/// A list of strings (a single string counts as a list of one).
pub(crate) fn string_list(map: &Map<String, Value>, key: &str) -> Result<Vec<String>, ConfigError> {
    strings(map.get(key), key)
}

/// `value` as a list of strings (absent: empty; a single string: a list
/// of one); `name` names it in errors.
pub(crate) fn strings(value: Option<&Value>, name: &str) -> Result<Vec<String>, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ConfigError(format!("{name}: expected a list of strings")))
            })
            .collect(),
        Some(other) => Err(ConfigError(format!("{name}: expected a list, got {other}"))),
    }
}

/// `value` as an object of strings (absent: empty); `name` names it in
/// errors.
pub(crate) fn string_map(
    value: Option<&Value>,
    name: &str,
) -> Result<std::collections::BTreeMap<String, String>, ConfigError> {
    match value {
        None => Ok(Default::default()),
        Some(Value::Object(entries)) => entries
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(ConfigError(format!(
                    "{name}.{k}: expected a string, got {other}"
                ))),
            })
            .collect(),
        Some(other) => Err(ConfigError(format!(
            "{name}: expected an object, got {other}"
        ))),
    }
}

pub(crate) fn get_str(
    map: &Map<String, Value>,
    path: &[&str],
) -> Result<Option<String>, ConfigError> {
    match get(map, path) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ConfigError(format!(
            "{}: expected a string, got {other}",
            path.join(".")
        ))),
    }
}

pub(crate) fn get_bool(
    map: &Map<String, Value>,
    path: &[&str],
) -> Result<Option<bool>, ConfigError> {
    match get(map, path) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
        Some(other) => Err(ConfigError(format!(
            "{}: expected true or false, got {other}",
            path.join(".")
        ))),
    }
}

pub(crate) fn get_int(map: &Map<String, Value>, path: &[&str]) -> Result<Option<i64>, ConfigError> {
    match get(map, path) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64()),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| {
            ConfigError(format!(
                "{}: expected a whole number, got {s:?}",
                path.join(".")
            ))
        }),
        Some(other) => Err(ConfigError(format!(
            "{}: expected a whole number, got {other}",
            path.join(".")
        ))),
    }
}

fn get_ip(map: &Map<String, Value>, path: &[&str]) -> Result<Option<IpAddr>, ConfigError> {
    match get_str(map, path)? {
        None => Ok(None),
        Some(s) => {
            // Consul allows several space-separated addresses; Legate binds the first.
            let first = s.split_whitespace().next().unwrap_or("");
            first
                .parse()
                .map(Some)
                .map_err(|_| ConfigError(format!("{}: {s:?} is not an IP address", path.join("."))))
        }
    }
}

fn port(
    map: &Map<String, Value>,
    name: &str,
    default: Option<u16>,
) -> Result<Option<u16>, ConfigError> {
    match get_int(map, &["ports", name])? {
        None => Ok(default),
        Some(n) if n < 0 => Ok(None),
        Some(0) if name == "grpc" || name == "https" => Ok(None),
        Some(n) if n <= 65535 => Ok(Some(n as u16)),
        Some(n) => Err(ConfigError(format!(
            "ports.{name}: {n} is not a valid port"
        ))),
    }
}

fn build(merged: Value, mut warnings: Vec<String>) -> Result<AgentConfig, ConfigError> {
    let map = match merged {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let defaults = Ports::default();
    let ports = Ports {
        http: port(&map, "http", defaults.http)?,
        https: port(&map, "https", defaults.https)?,
        dns: port(&map, "dns", defaults.dns)?,
        grpc: port(&map, "grpc", defaults.grpc)?,
        grpc_tls: port(&map, "grpc_tls", defaults.grpc_tls)?,
        serf_lan: port(&map, "serf_lan", defaults.serf_lan)?,
        serf_wan: port(&map, "serf_wan", defaults.serf_wan)?,
        server: port(&map, "server", defaults.server)?,
        sidecar_min_port: port(&map, "sidecar_min_port", Some(defaults.sidecar_min_port))?
            .unwrap_or(21000),
        sidecar_max_port: port(&map, "sidecar_max_port", Some(defaults.sidecar_max_port))?
            .unwrap_or(21255),
    };
    if ports.sidecar_min_port > ports.sidecar_max_port {
        return Err(ConfigError(
            "ports.sidecar_min_port must not exceed ports.sidecar_max_port".into(),
        ));
    }
    let services = match map.get("services") {
        None => Vec::new(),
        Some(value) => as_list(value.clone())
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, v)| decode_service(v).map_err(|e| ConfigError(format!("services[{i}]: {e}"))))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let checks = match map.get("checks") {
        None => Vec::new(),
        Some(value) => as_list(value.clone())
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, v)| decode_check(v).map_err(|e| ConfigError(format!("checks[{i}]: {e}"))))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let node_meta: legate_types::catalog::Meta =
        string_map(get(&map, &["node_meta"]), "node_meta")?.into();
    legate_types::meta::validate(&node_meta, false)
        .map_err(|e| ConfigError(format!("node_meta invalid: {e}")))?;
    let datacenter = get_str(&map, &["datacenter"])?.unwrap_or_else(|| "dc1".to_string());
    if datacenter.is_empty()
        || !datacenter
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ConfigError(format!(
            "datacenter {datacenter:?} may only contain letters, digits, '-' and '_'"
        )));
    }
    let node_name = match get_str(&map, &["node_name"])? {
        Some(n) if !n.is_empty() => n,
        _ => hostname(),
    };
    let raft_multiplier = get_int(&map, &["performance", "raft_multiplier"])?.unwrap_or(1);
    if !(1..=10).contains(&raft_multiplier) {
        return Err(ConfigError(format!(
            "performance.raft_multiplier cannot be {raft_multiplier}. Must be between 1 and 10"
        )));
    }
    let log_level = get_str(&map, &["log_level"])?.unwrap_or_else(|| "info".to_string());
    if !matches!(
        log_level.to_ascii_lowercase().as_str(),
        "trace" | "debug" | "info" | "warn" | "err" | "error"
    ) {
        return Err(ConfigError(format!(
            "log_level: invalid level {log_level:?}"
        )));
    }
    let config_entries_bootstrap = match get(&map, &["config_entries", "bootstrap"]) {
        None => Vec::new(),
        Some(v) => as_list(v.clone()).as_array().cloned().unwrap_or_default(),
    };
    let bootstrap_expect = get_int(&map, &["bootstrap_expect"])?.unwrap_or(0);
    if bootstrap_expect < 0 {
        return Err(ConfigError("bootstrap_expect cannot be negative".into()));
    }
    let config = AgentConfig {
        dev: get_bool(&map, &["dev"])?.unwrap_or(false),
        server: get_bool(&map, &["server"])?.unwrap_or(false),
        bootstrap: get_bool(&map, &["bootstrap"])?.unwrap_or(false),
        bootstrap_expect: bootstrap_expect as u32,
        primary_datacenter: get_str(&map, &["primary_datacenter"])?
            .or(crate::acl_config::primary_from_acl_datacenter(&map)?)
            .unwrap_or_else(|| datacenter.clone()),
        datacenter,
        node_name,
        node_id: get_str(&map, &["node_id"])?.unwrap_or_default(),
        node_meta,
        locality: crate::locality_config::parse(&map)?,
        data_dir: get_str(&map, &["data_dir"])?.map(PathBuf::from),
        client_addr: get_ip(&map, &["client_addr"])?.unwrap_or(IpAddr::from([127, 0, 0, 1])),
        http_addr: match get_str(&map, &["addresses", "http"])? {
            Some(a) if crate::unix_socket_config::is_unix(&a) => None,
            _ => get_ip(&map, &["addresses", "http"])?,
        },
        http_unix: crate::unix_socket_config::parse_http(&map)?,
        dns_addr: get_ip(&map, &["addresses", "dns"])?,
        bind_addr: get_ip(&map, &["bind_addr"])?.unwrap_or(IpAddr::from([0, 0, 0, 0])),
        advertise_addr: get_ip(&map, &["advertise_addr"])?,
        ports,
        log_level,
        log_json: get_bool(&map, &["log_json"])?.unwrap_or(false),
        pid_file: get_str(&map, &["pid_file"])?.map(PathBuf::from),
        domain: get_str(&map, &["domain"])?.unwrap_or_else(|| "consul".to_string()),
        dns: crate::dns_config::parse(&map)?,
        cache: crate::cache_config::parse(&map)?,
        check_output: crate::check_output::parse(&map)?,
        http_config: crate::http_config::parse(&map)?,
        raft_tuning: crate::raft_config::parse(&map)?,
        disable_coordinates: get_bool(&map, &["disable_coordinates"])?.unwrap_or(false),
        family_addresses: crate::tagged_addresses::parse(&map)?,
        gossip_admission: crate::gossip_admission::parse(&map)?,
        reconnect: crate::reconnect_config::parse(&map)?,
        server_rejoin_age_max: crate::raft_config::rejoin_age_max(&map, &mut warnings)?,
        xds_update_max_per_second: crate::xds_config::update_rate(&map)?,
        server_name: get_str(&map, &["server_name"])?.filter(|s| !s.is_empty()),
        enable_agent_tls_for_checks: get_bool(&map, &["enable_agent_tls_for_checks"])?
            .unwrap_or(false),
        disable_remote_exec: get_bool(&map, &["disable_remote_exec"])?.unwrap_or(true),
        enable_central_service_config: get_bool(&map, &["enable_central_service_config"])?
            .unwrap_or(true),
        disable_keyring_file: get_bool(&map, &["disable_keyring_file"])?.unwrap_or(false),
        log_file: crate::log_file_config::parse(&map)?,
        syslog: crate::syslog_config::parse(&map)?,
        auto_reload_config: get_bool(&map, &["auto_reload_config"])?.unwrap_or(false),
        disable_host_node_id: get_bool(&map, &["disable_host_node_id"])?.unwrap_or(true),
        serf_lan_bind: get_ip(&map, &["serf_lan"])?,
        serf_wan_bind: get_ip(&map, &["serf_wan"])?,
        enable_script_checks: get_bool(&map, &["enable_script_checks"])?.unwrap_or(false),
        enable_local_script_checks: get_bool(&map, &["enable_local_script_checks"])?
            .unwrap_or(false),
        raft_multiplier: raft_multiplier as u64,
        limits: crate::limits::parse(&map, &mut warnings)?,
        autopilot: autopilot(&map)?,
        tls: crate::tls_config::parse(&map, Listener::InternalRpc)?,
        https_tls: crate::tls_config::parse(&map, Listener::Https)?,
        grpc_tls: crate::tls_config::parse(&map, Listener::Grpc)?,
        ui: crate::ui_config::parse(&map)?,
        telemetry: crate::telemetry_config::parse(&map, &hostname(), &mut warnings)?,
        acl: crate::acl_config::parse(&map, &mut warnings)?,
        connect_enabled: get_bool(&map, &["connect", "enabled"])?.unwrap_or(true),
        connect_ca: connect_ca(&map)?,
        config_entries_bootstrap,
        start_join: string_list(&map, "start_join")?,
        retry_join: string_list(&map, "retry_join")?,
        retry_max: match get_int(&map, &["retry_max"])? {
            None => 0,
            Some(n) => u32::try_from(n)
                .map_err(|_| ConfigError(format!("retry_max: {n} is not a whole number ≥ 0")))?,
        },
        retry_interval: match get_str(&map, &["retry_interval"])? {
            None => Duration::from_secs(30),
            Some(text) => legate_types::duration::parse_go_duration(&text)
                .map_err(|e| ConfigError(format!("retry_interval: {e}")))?,
        },
        wan: crate::wan_config::parse(&map)?,
        mesh_federation: crate::wanfed_config::parse(&map, &mut warnings)?,
        watches: match map.get("watches") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(one @ Value::Object(_)) => vec![one.clone()],
            Some(other) => {
                return Err(ConfigError(format!(
                    "watches: expected a list of watches, got {other}"
                )))
            }
        },
        encrypt: match get_str(&map, &["encrypt"])? {
            Some(key) if !key.is_empty() => Some(check_encrypt_key(key)?),
            _ => None,
        },
        services,
        checks,
        warnings,
    };
    crate::wanfed_config::check(&config)?;
    Ok(config)
}

/// `autopilot {}`: Consul's keys and defaults; unknown keys are refused.
fn autopilot(map: &Map<String, Value>) -> Result<legate_types::rpc::AutopilotConfig, ConfigError> {
    let mut config = legate_types::rpc::AutopilotConfig::default();
    let Some(block) = map.get("autopilot") else {
        return Ok(config);
    };
    let Value::Object(block) = block else {
        return Err(ConfigError("autopilot must be a block".into()));
    };
    for key in block.keys() {
        if ![
            "cleanup_dead_servers",
            "last_contact_threshold",
            "max_trailing_logs",
            "min_quorum",
            "server_stabilization_time",
        ]
        .contains(&key.as_str())
        {
            return Err(ConfigError(format!("invalid config key autopilot.{key}")));
        }
    }
    let duration = |key: &str| -> Result<Option<Duration>, ConfigError> {
        get_str(map, &["autopilot", key])?
            .map(|text| {
                legate_types::duration::parse_go_duration(&text)
                    .map_err(|e| ConfigError(format!("autopilot.{key}: {e}")))
            })
            .transpose()
    };
    let count = |key: &str| -> Result<Option<u64>, ConfigError> {
        get_int(map, &["autopilot", key])?
            .map(|n| {
                u64::try_from(n)
                    .map_err(|_| ConfigError(format!("autopilot.{key} cannot be negative ({n})")))
            })
            .transpose()
    };
    if let Some(v) = get_bool(map, &["autopilot", "cleanup_dead_servers"])? {
        config.cleanup_dead_servers = v;
    }
    if let Some(v) = duration("last_contact_threshold")? {
        config.last_contact_threshold = v;
    }
    if let Some(v) = duration("server_stabilization_time")? {
        config.server_stabilization_time = v;
    }
    if let Some(v) = count("max_trailing_logs")? {
        config.max_trailing_logs = v;
    }
    if let Some(v) = count("min_quorum")? {
        config.min_quorum = v as usize;
    }
    Ok(config)
}

/// `connect.ca_provider` and `connect.ca_config`, checked with the CA's
/// own rules so a bad setting stops the agent at start with the key named.
fn connect_ca(
    map: &Map<String, Value>,
) -> Result<legate_types::connect::CaConfiguration, ConfigError> {
    let provider = get_str(map, &["connect", "ca_provider"])?.unwrap_or_else(|| "consul".into());
    let config = match get(map, &["connect", "ca_config"]) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        // An HCL block may arrive as a list of one object.
        Some(Value::Array(items)) => {
            let mut merged = Map::new();
            for item in items {
                let Value::Object(m) = item else {
                    return Err(ConfigError(format!(
                        "connect.ca_config: expected a block, got {item}"
                    )));
                };
                merged.extend(m.clone());
            }
            merged
        }
        Some(other) => {
            return Err(ConfigError(format!(
                "connect.ca_config: expected a block, got {other}"
            )))
        }
    };
    legate_ca::CaConfig::from_map(&provider, &config)
        .map_err(|e| ConfigError(format!("connect.ca_config: {e}")))?;
    Ok(legate_types::connect::CaConfiguration {
        provider,
        config,
        ..Default::default()
    })
}

/// Decodes a service definition from JSON or HCL-derived JSON (either case).
pub fn decode_service(value: Value) -> Result<ServiceDefinition, String> {
    let value = normalize_lists(canonicalize_keys(value));
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// Decodes a check definition from JSON or HCL-derived JSON (either case).
pub fn decode_check(value: Value) -> Result<CheckDefinition, String> {
    let value = normalize_lists(canonicalize_keys(value));
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// HCL gives a single block where a list is meant (`upstreams { ... }`):
/// wrap the fields that are lists of objects.
fn normalize_lists(value: Value) -> Value {
    const LIST_FIELDS: &[&str] = &["Checks", "Upstreams", "Paths", "ServiceChecks"];
    const OPAQUE: &[&str] = &["Meta", "Config", "Header", "NodeMeta"];
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    if OPAQUE.contains(&k.as_str()) {
                        return (k, v);
                    }
                    let v = if LIST_FIELDS.contains(&k.as_str()) {
                        as_list(v)
                    } else {
                        v
                    };
                    (k, normalize_lists(v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalize_lists).collect()),
        other => other,
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "legate".to_string())
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
