//! `http_config { ... }`: what the HTTP API adds to every answer and whom
//! it refuses (Consul's `response_headers`, `block_endpoints`,
//! `allow_write_http_from`, `use_cache`), checked at load.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{get, get_bool, get_str, strings, ConfigError};

pub use legate_types::cidr::Cidr;

/// The `http_config` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// Headers added to every answer (a handler's own header wins, as in
    /// Consul, which sets these before the handler runs).
    pub response_headers: Vec<(String, String)>,
    /// Path prefixes answered 403 `Endpoint is blocked by agent
    /// configuration`.
    pub block_endpoints: Vec<String>,
    /// Ranges writes (any method but GET, HEAD and OPTIONS) may come
    /// from; empty: anywhere. Others get 403 `Access is restricted`.
    pub allow_write_http_from: Vec<Cidr>,
    /// Whether `?cached` is honoured (default true).
    pub use_cache: bool,
    /// A blocking query's wait when it names none (`default_query_time`,
    /// a top-level key; 5m).
    pub default_query_time: Duration,
    /// The longest wait a blocking query gets (`max_query_time`, a
    /// top-level key; 10m).
    pub max_query_time: Duration,
    /// `disable_http_unprintable_char_filter` (a top-level key): paths
    /// with unprintable characters are served (keys written that way by
    /// old clients stay reachable).
    pub allow_unprintable_paths: bool,
    /// `discovery_max_stale` (a top-level key; unset or zero: none): reads
    /// that name no consistency are stale reads any server answers while
    /// it lags the leader by at most this.
    pub discovery_max_stale: Option<Duration>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            response_headers: Vec::new(),
            block_endpoints: Vec::new(),
            allow_write_http_from: Vec::new(),
            use_cache: true,
            default_query_time: legate_types::DEFAULT_BLOCKING_WAIT,
            max_query_time: legate_types::MAX_BLOCKING_WAIT,
            allow_unprintable_paths: false,
            discovery_max_stale: None,
        }
    }
}

impl HttpConfig {
    /// Whether a request for `path` is blocked.
    pub fn blocks(&self, path: &str) -> bool {
        self.block_endpoints.iter().any(|p| path.starts_with(p))
    }

    /// Whether a write from `peer` is allowed.
    pub fn allows_write_from(&self, peer: Option<IpAddr>) -> bool {
        if self.allow_write_http_from.is_empty() {
            return true;
        }
        peer.is_some_and(|ip| self.allow_write_http_from.iter().any(|c| c.contains(ip)))
    }
}

fn query_time(
    map: &Map<String, Value>,
    key: &str,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match get_str(map, &[key])? {
        None => Ok(default),
        Some(text) => match legate_types::duration::parse_go_duration(&text) {
            Ok(d) if !d.is_zero() && d <= legate_types::WAIT_CEILING => Ok(d),
            Ok(_) => Err(ConfigError(format!(
                "{key}: must be longer than 0s and at most 24h"
            ))),
            Err(e) => Err(ConfigError(format!("{key}: {e}"))),
        },
    }
}

/// Reads `http_config`, `default_query_time`, `max_query_time` and
/// `discovery_max_stale`.
pub fn parse(map: &Map<String, Value>) -> Result<HttpConfig, ConfigError> {
    let mut config = HttpConfig {
        default_query_time: query_time(
            map,
            "default_query_time",
            legate_types::DEFAULT_BLOCKING_WAIT,
        )?,
        max_query_time: query_time(map, "max_query_time", legate_types::MAX_BLOCKING_WAIT)?,
        allow_unprintable_paths: get_bool(map, &["disable_http_unprintable_char_filter"])?
            .unwrap_or(false),
        discovery_max_stale: match get_str(map, &["discovery_max_stale"])? {
            None => None,
            Some(text) => Some(
                legate_types::duration::parse_go_duration(&text).map_err(|e| {
                    ConfigError(format!(
                        "discovery_max_stale: invalid duration {text:?}: {e}"
                    ))
                })?,
            )
            .filter(|d| !d.is_zero()),
        },
        ..HttpConfig::default()
    };
    let Some(block) = get(map, &["http_config"]) else {
        return Ok(config);
    };
    let Value::Object(block) = block else {
        return Err(ConfigError("http_config must be a block".into()));
    };
    if let Some(headers) = block.get("response_headers") {
        let Value::Object(headers) = headers else {
            return Err(ConfigError(
                "http_config.response_headers must be a map of header names to values".into(),
            ));
        };
        for (name, value) in headers {
            let Some(value) = value.as_str() else {
                return Err(ConfigError(format!(
                    "http_config.response_headers.{name}: expected a string"
                )));
            };
            let valid_name = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !valid_name || value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
                return Err(ConfigError(format!(
                    "http_config.response_headers: {name:?} cannot be sent as a header"
                )));
            }
            config
                .response_headers
                .push((name.to_ascii_lowercase(), value.to_string()));
        }
    }
    config.block_endpoints = strings(block.get("block_endpoints"), "block_endpoints")?;
    config.allow_write_http_from =
        strings(block.get("allow_write_http_from"), "allow_write_http_from")?
            .iter()
            .map(|c| {
                Cidr::parse(c)
                    .map_err(|e| ConfigError(format!("http_config.allow_write_http_from: {e}")))
            })
            .collect::<Result<_, _>>()?;
    config.use_cache = get_bool(map, &["http_config", "use_cache"])?.unwrap_or(true);
    Ok(config)
}
