//! The `cache { ... }` block: the bounds of every agent cache (the shared
//! watches behind proxycfg and DNS, intentions, prepared-query upstreams
//! and `?cached` results). Consul's block has only `entry_fetch_rate` and
//! `entry_fetch_max_burst`; Legate adds `max_entries`, `max_bytes` and
//! `idle_timeout`, each applying to every cache on its own.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::ConfigError;
use crate::shared_watch::CacheLimits;

/// The most keys one cache holds by default: a node with hundreds of
/// proxies, each with tens of upstreams.
pub const DEFAULT_MAX_ENTRIES: usize = 10_000;
/// The most bytes one cache's values take by default.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;
/// How long a `?cached` result nobody asks for stays (Consul's 3 days, so
/// a client keeps its answers through a long outage of the servers).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3 * 24 * 3600);

/// The `cache` block.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// The most keys each cache holds.
    pub max_entries: usize,
    /// The most bytes each cache's values take.
    pub max_bytes: usize,
    /// How long a `?cached` result nobody asks for stays.
    pub idle_timeout: Duration,
    /// Consul's `entry_fetch_rate`: refreshes per second of one entry.
    pub entry_fetch_rate: f64,
    /// Consul's `entry_fetch_max_burst`.
    pub entry_fetch_max_burst: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: DEFAULT_MAX_ENTRIES,
            max_bytes: DEFAULT_MAX_BYTES,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            entry_fetch_rate: f64::INFINITY,
            entry_fetch_max_burst: 2,
        }
    }
}

impl CacheConfig {
    /// The limits of the cache `name` whose keys idle out after `idle_ttl`.
    pub fn limits(&self, name: &'static str, idle_ttl: Duration) -> CacheLimits {
        CacheLimits {
            name,
            max_entries: self.max_entries,
            max_bytes: self.max_bytes,
            idle_ttl,
        }
    }
}

fn err(key: &str, message: impl std::fmt::Display) -> ConfigError {
    ConfigError(format!("cache.{key}: {message}"))
}

/// A size: a whole number of bytes, or a number with `KB`, `MB`, `GB`
/// (powers of 1000) or `KiB`, `MiB`, `GiB` (powers of 1024).
fn bytes(key: &str, value: &Value) -> Result<usize, ConfigError> {
    let bad = || {
        err(
            key,
            "expected a size such as 67108864, \"64MiB\" or \"64MB\"",
        )
    };
    match value {
        Value::Number(n) => n.as_u64().map(|n| n as usize).ok_or_else(bad),
        Value::String(s) => {
            let s = s.trim();
            let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (number, unit) = s.split_at(split);
            let number: u64 = number.parse().map_err(|_| bad())?;
            let scale: u64 = match unit.trim() {
                "" | "B" => 1,
                "KB" => 1000,
                "MB" => 1000 * 1000,
                "GB" => 1000 * 1000 * 1000,
                "KiB" => 1 << 10,
                "MiB" => 1 << 20,
                "GiB" => 1 << 30,
                _ => return Err(bad()),
            };
            number
                .checked_mul(scale)
                .map(|n| n as usize)
                .ok_or_else(bad)
        }
        _ => Err(bad()),
    }
}

/// Reads the `cache` block of a merged agent configuration.
pub fn parse(root: &Map<String, Value>) -> Result<CacheConfig, ConfigError> {
    let mut c = CacheConfig::default();
    let Some(block) = root.get("cache") else {
        return Ok(c);
    };
    let block = block
        .as_object()
        .ok_or_else(|| ConfigError("cache: expected a block".into()))?;
    for (key, value) in block {
        match key.as_str() {
            "max_entries" => {
                c.max_entries = value
                    .as_u64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| err(key, "expected a whole number above zero"))?
                    as usize
            }
            "max_bytes" => c.max_bytes = bytes(key, value)?,
            "idle_timeout" => {
                c.idle_timeout = crate::dns_config::duration(&format!("cache.{key}"), value)?
            }
            "entry_fetch_rate" => {
                c.entry_fetch_rate = value
                    .as_f64()
                    .filter(|r| *r > 0.0)
                    .ok_or_else(|| err(key, "must be strictly positive"))?
            }
            "entry_fetch_max_burst" => {
                c.entry_fetch_max_burst = value
                    .as_u64()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| err(key, "must be strictly positive"))?
            }
            other => return Err(ConfigError(format!("invalid config key cache.{other}"))),
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(block: Value) -> Result<CacheConfig, ConfigError> {
        let root = json!({ "cache": block });
        parse(root.as_object().unwrap())
    }

    #[test]
    fn sizes_durations_and_bad_values() {
        let c = parsed(json!({"max_entries": 50, "max_bytes": "64MiB", "idle_timeout": "10m"}))
            .unwrap();
        assert_eq!(
            (c.max_entries, c.max_bytes, c.idle_timeout),
            (50, 64 << 20, Duration::from_secs(600))
        );
        assert_eq!(
            parsed(json!({"max_bytes": "2MB"})).unwrap().max_bytes,
            2_000_000
        );
        assert_eq!(parsed(json!({"max_bytes": 4096})).unwrap().max_bytes, 4096);
        assert_eq!(parse(&Map::new()).unwrap(), CacheConfig::default());
        for (bad, text) in [
            (
                json!({"max_entries": 0}),
                "cache.max_entries: expected a whole number",
            ),
            (
                json!({"max_bytes": "64 parsecs"}),
                "cache.max_bytes: expected a size",
            ),
            (
                json!({"max_bytes": "99999999999999999999GB"}),
                "cache.max_bytes",
            ),
            (json!({"idle_timeout": "soon"}), "cache.idle_timeout"),
            (json!({"entry_fetch_rate": -1}), "must be strictly positive"),
            (
                json!({"entry_fetch_max_burst": 0}),
                "must be strictly positive",
            ),
            (
                json!({"max_items": 1}),
                "invalid config key cache.max_items",
            ),
            (json!("big"), "cache: expected a block"),
        ] {
            let e = parsed(bad.clone()).unwrap_err().0;
            assert!(e.contains(text), "{bad}: {e}");
        }
    }
}
