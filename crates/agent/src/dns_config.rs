//! `dns_config`, `domain`, `alt_domain` and `recursors`: what the DNS
//! interface answers with, checked at load so a bad value stops the agent
//! with the key named.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::ConfigError;

/// The SOA record's timers (seconds), `dns_config.soa`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoaConfig {
    /// `refresh` (default 3600).
    pub refresh: u32,
    /// `retry` (default 600).
    pub retry: u32,
    /// `expire` (default 86400).
    pub expire: u32,
    /// `min_ttl`, the negative-caching TTL (default 0).
    pub min_ttl: u32,
}

/// How recursors are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecursorStrategy {
    /// In the configured order (default).
    Sequential,
    /// In a random order per query.
    Random,
}

/// The DNS interface's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsConfig {
    /// The domain answered (`domain`, default `consul`), lower case, no dots at the ends.
    pub domain: String,
    /// A second domain answered the same way (`alt_domain`).
    pub alt_domain: Option<String>,
    /// Answer from any server's data (default true).
    pub allow_stale: bool,
    /// How stale an answer may be before a consistent read is made (default 87600h).
    pub max_stale: Duration,
    /// TTL of node records (default 0).
    pub node_ttl: Duration,
    /// TTLs of service records: exact names, `prefix*` patterns and `*`.
    pub service_ttl: Vec<(String, Duration)>,
    /// Most answers in a UDP response (default 3).
    pub udp_answer_limit: usize,
    /// Most A/AAAA answers in any response (0: no limit).
    pub a_record_limit: usize,
    /// Only instances with every check passing (warning counts as failing).
    pub only_passing: bool,
    /// Set TC on UDP answers cut by `udp_answer_limit`, so clients retry over TCP.
    pub enable_truncate: bool,
    /// SOA timers.
    pub soa: SoaConfig,
    /// Upstream resolvers for names outside our domains.
    pub recursors: Vec<SocketAddr>,
    /// How long one recursor gets (default 2s).
    pub recursor_timeout: Duration,
    /// Order recursors are tried in.
    pub recursor_strategy: RecursorStrategy,
    /// Node metadata as TXT records in the additional section (default true).
    pub enable_additional_node_meta_txt: bool,
    /// Answer with WAN addresses for other datacenters (`translate_wan_addrs`).
    pub translate_wan_addrs: bool,
    /// Answer service lookups in the local datacenter from a cache kept
    /// current by blocking queries (default true; Consul's default is false).
    pub use_cache: bool,
    /// How old a cached prepared-query answer may grow before it is run
    /// again (`cache_max_age`; zero: Legate's 3 s).
    pub cache_max_age: Duration,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            domain: "consul".into(),
            alt_domain: None,
            allow_stale: true,
            max_stale: Duration::from_secs(87_600 * 3600),
            node_ttl: Duration::ZERO,
            service_ttl: Vec::new(),
            udp_answer_limit: 3,
            a_record_limit: 0,
            only_passing: false,
            enable_truncate: false,
            soa: SoaConfig {
                refresh: 3600,
                retry: 600,
                expire: 86400,
                min_ttl: 0,
            },
            recursors: Vec::new(),
            recursor_timeout: Duration::from_secs(2),
            recursor_strategy: RecursorStrategy::Sequential,
            enable_additional_node_meta_txt: true,
            translate_wan_addrs: false,
            use_cache: true,
            cache_max_age: Duration::ZERO,
        }
    }
}

impl DnsConfig {
    /// The TTL of `service`'s records: its own entry, else the longest
    /// matching `prefix*`, else `*`, else 0.
    pub fn service_ttl(&self, service: &str) -> Duration {
        let mut best: Option<(usize, Duration)> = None;
        for (pattern, ttl) in &self.service_ttl {
            if pattern == service {
                return *ttl;
            }
            if let Some(prefix) = pattern.strip_suffix('*') {
                if service.starts_with(prefix) && best.is_none_or(|(len, _)| prefix.len() >= len) {
                    best = Some((prefix.len(), *ttl));
                }
            }
        }
        best.map(|(_, ttl)| ttl).unwrap_or_default()
    }
}

fn err(key: &str, message: impl std::fmt::Display) -> ConfigError {
    ConfigError(format!("{key}: {message}"))
}

pub(crate) fn duration(key: &str, value: &Value) -> Result<Duration, ConfigError> {
    match value {
        Value::String(s) => legate_types::duration::parse_go_duration(s)
            .map_err(|e| err(key, format!("{e} (expected a duration such as \"10s\")"))),
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_secs)
            .ok_or_else(|| err(key, "expected a duration such as \"10s\"")),
        other => Err(err(key, format!("expected a duration, got {other}"))),
    }
}

fn domain(key: &str, value: &str) -> Result<String, ConfigError> {
    let d = value.trim_matches('.').to_ascii_lowercase();
    let valid = !d.is_empty()
        && d.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if !valid {
        return Err(err(key, format!("{value:?} is not a valid domain name")));
    }
    Ok(d)
}

/// A recursor address: `ip` (port 53) or `ip:port` (`[v6]:port`).
fn recursor(value: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(ip) = value.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    value.parse().map_err(|_| {
        err(
            "recursors",
            format!("{value:?} is not an IP address or ip:port"),
        )
    })
}

/// Reads the DNS settings from a merged agent configuration.
pub fn parse(root: &Map<String, Value>) -> Result<DnsConfig, ConfigError> {
    let mut c = DnsConfig::default();
    if let Some(v) = root.get("domain").and_then(Value::as_str) {
        c.domain = domain("domain", v)?;
    }
    if let Some(v) = root.get("alt_domain").and_then(Value::as_str) {
        if !v.is_empty() {
            c.alt_domain = Some(domain("alt_domain", v)?);
        }
    }
    match root.get("recursors") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => c.recursors.push(recursor(s)?),
        Some(Value::Array(items)) => {
            for item in items {
                let s = item
                    .as_str()
                    .ok_or_else(|| err("recursors", "expected a list of addresses"))?;
                c.recursors.push(recursor(s)?);
            }
        }
        Some(other) => return Err(err("recursors", format!("expected a list, got {other}"))),
    }
    if let Some(v) = root.get("translate_wan_addrs") {
        c.translate_wan_addrs = v
            .as_bool()
            .ok_or_else(|| err("translate_wan_addrs", "expected true or false"))?;
    }
    let Some(dns) = root.get("dns_config") else {
        return Ok(c);
    };
    let dns = dns
        .as_object()
        .ok_or_else(|| err("dns_config", "expected a block"))?;
    for (key, value) in dns {
        let name = format!("dns_config.{key}");
        let flag = || {
            value
                .as_bool()
                .ok_or_else(|| err(&name, "expected true or false"))
        };
        let count = || {
            value
                .as_u64()
                .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
                .map(|n| n as usize)
                .ok_or_else(|| err(&name, "expected a whole number"))
        };
        match key.as_str() {
            "allow_stale" => c.allow_stale = flag()?,
            "max_stale" => c.max_stale = duration(&name, value)?,
            "node_ttl" => c.node_ttl = duration(&name, value)?,
            "service_ttl" => {
                let map = value
                    .as_object()
                    .ok_or_else(|| err(&name, "expected a map of service name to duration"))?;
                for (service, ttl) in map {
                    let ttl = duration(&format!("{name}.{service}"), ttl)?;
                    c.service_ttl.push((service.clone(), ttl));
                }
            }
            "udp_answer_limit" => c.udp_answer_limit = count()?,
            "a_record_limit" => c.a_record_limit = count()?,
            "only_passing" => c.only_passing = flag()?,
            "enable_truncate" => c.enable_truncate = flag()?,
            "enable_additional_node_meta_txt" => c.enable_additional_node_meta_txt = flag()?,
            "use_cache" => c.use_cache = flag()?,
            "recursor_timeout" => c.recursor_timeout = duration(&name, value)?,
            "recursor_strategy" => {
                c.recursor_strategy = match value.as_str() {
                    Some("sequential") => RecursorStrategy::Sequential,
                    Some("random") => RecursorStrategy::Random,
                    _ => return Err(err(&name, "expected \"sequential\" or \"random\"")),
                }
            }
            "soa" => {
                let soa = value
                    .as_object()
                    .ok_or_else(|| err(&name, "expected a block"))?;
                for (field, v) in soa {
                    let n = v
                        .as_u64()
                        .filter(|n| *n <= u32::MAX as u64)
                        .ok_or_else(|| err(&format!("{name}.{field}"), "expected seconds"))?
                        as u32;
                    match field.as_str() {
                        "refresh" => c.soa.refresh = n,
                        "retry" => c.soa.retry = n,
                        "expire" => c.soa.expire = n,
                        "min_ttl" => c.soa.min_ttl = n,
                        _ => return Err(err(&format!("{name}.{field}"), "unknown SOA field")),
                    }
                }
            }
            // Accepted for compatibility; they change nothing here.
            "cache_max_age" => c.cache_max_age = duration(&name, value)?,
            "disable_compression" | "prefer_namespace" | "recursor_strategy_disabled" => {}
            _ => return Err(err(&name, "unknown key")),
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<DnsConfig, ConfigError> {
        parse(v.as_object().unwrap())
    }

    #[test]
    fn defaults_match_consul() {
        let c = parse_json(json!({})).unwrap();
        assert_eq!(c.domain, "consul");
        assert!(c.allow_stale);
        assert_eq!(c.udp_answer_limit, 3);
        assert_eq!(c.node_ttl, Duration::ZERO);
        assert_eq!(c.soa.refresh, 3600);
    }

    #[test]
    fn settings_are_read_and_bad_ones_named() {
        let c = parse_json(json!({
            "domain": "Mesh.Local.", "alt_domain": "alt", "recursors": ["127.0.0.1:5353", "10.0.0.1"],
            "dns_config": {"node_ttl": "10s", "service_ttl": {"*": "5s", "web*": "30s", "web-api": "1m"},
                           "udp_answer_limit": 5, "only_passing": true, "enable_truncate": true,
                           "soa": {"min_ttl": 60}, "recursor_timeout": "500ms"}
        }))
        .unwrap();
        assert_eq!(c.domain, "mesh.local");
        assert_eq!(c.alt_domain.as_deref(), Some("alt"));
        assert_eq!(c.recursors[1], "10.0.0.1:53".parse().unwrap());
        assert_eq!(c.node_ttl, Duration::from_secs(10));
        assert_eq!(c.service_ttl("db"), Duration::from_secs(5));
        assert_eq!(c.service_ttl("web"), Duration::from_secs(30));
        assert_eq!(c.service_ttl("web-api"), Duration::from_secs(60));
        assert_eq!(c.soa.min_ttl, 60);
        assert_eq!(c.recursor_timeout, Duration::from_millis(500));
        for (bad, key) in [
            (
                json!({"dns_config": {"node_ttl": "soon"}}),
                "dns_config.node_ttl",
            ),
            (
                json!({"dns_config": {"udp_answer_limit": "many"}}),
                "dns_config.udp_answer_limit",
            ),
            (json!({"dns_config": {"nope": 1}}), "dns_config.nope"),
            (json!({"recursors": ["not an address"]}), "recursors"),
            (json!({"domain": "bad domain"}), "domain"),
            (
                json!({"dns_config": {"soa": {"serial": 1}}}),
                "dns_config.soa.serial",
            ),
        ] {
            let e = parse_json(bad).unwrap_err().0;
            assert!(e.starts_with(key), "{e}");
        }
    }
}
