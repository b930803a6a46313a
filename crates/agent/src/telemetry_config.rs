//! `telemetry { }`: the metric names' prefix, the host name in gauge names,
//! `prefix_filter`, the Prometheus retention time and the statsd and
//! DogStatsD addresses (`legate_telemetry::TelemetryConfig`). Keys for
//! sinks Legate does not have (statsite, Circonus) and host metrics are
//! warned about.

use serde_json::{Map, Value};

use crate::config::{get, get_bool, get_str, strings, ConfigError};
use legate_telemetry::TelemetryConfig;

/// `telemetry` keys Legate reads.
const READ: &[&str] = &[
    "disable_hostname",
    "dogstatsd_addr",
    "dogstatsd_tags",
    "filter_default",
    "metrics_prefix",
    "prefix_filter",
    "prometheus_retention_time",
    "statsd_address",
];

/// `telemetry` keys Consul knows that Legate has no sink or source for.
const NOT_BUILT: &[&str] = &[
    "allowed_prefixes",
    "blocked_prefixes",
    "circonus_api_app",
    "circonus_api_token",
    "circonus_api_url",
    "circonus_broker_id",
    "circonus_broker_select_tag",
    "circonus_check_display_name",
    "circonus_check_force_metric_activation",
    "circonus_check_id",
    "circonus_check_instance_id",
    "circonus_check_search_tag",
    "circonus_check_tags",
    "circonus_submission_interval",
    "circonus_submission_url",
    "disable_compat_1.9",
    "disable_per_tenancy_usage_metrics",
    "enable_host_metrics",
    "retry_failed_connection",
    "statsite_address",
];

fn address(map: &Map<String, Value>, key: &str) -> Result<Option<String>, ConfigError> {
    Ok(get_str(map, &["telemetry", key])?.filter(|a| !a.is_empty()))
}

/// Reads `telemetry { }`; `hostname` is spliced into gauge names unless
/// `disable_hostname`. Unknown and unbuilt keys become warnings.
pub fn parse(
    map: &Map<String, Value>,
    hostname: &str,
    warnings: &mut Vec<String>,
) -> Result<TelemetryConfig, ConfigError> {
    if let Some(Value::Object(block)) = get(map, &["telemetry"]) {
        for key in block.keys() {
            if NOT_BUILT.contains(&key.as_str()) {
                warnings.push(format!(
                    "telemetry.{key}: Legate does not have this sink or source; the key is ignored"
                ));
            } else if !READ.contains(&key.as_str()) {
                warnings.push(format!("telemetry.{key}: unknown key, ignored"));
            }
        }
    }
    let retention = match get_str(map, &["telemetry", "prometheus_retention_time"])? {
        None => None,
        Some(text) => Some(
            legate_types::duration::parse_go_duration(&text)
                .map_err(|e| ConfigError(format!("telemetry.prometheus_retention_time: {e}")))?,
        )
        .filter(|d| !d.is_zero()),
    };
    let prefix_filter = strings(
        get(map, &["telemetry", "prefix_filter"]),
        "telemetry.prefix_filter",
    )?;
    for entry in &prefix_filter {
        if !entry.is_empty() && !entry.starts_with('+') && !entry.starts_with('-') {
            warnings.push(format!(
                "Ignoring invalid prefix {entry:?}, needs to start with '+' or '-'"
            ));
        }
    }
    let defaults = TelemetryConfig::default();
    Ok(TelemetryConfig {
        metrics_prefix: get_str(map, &["telemetry", "metrics_prefix"])?
            .unwrap_or(defaults.metrics_prefix),
        hostname: hostname.to_string(),
        disable_hostname: get_bool(map, &["telemetry", "disable_hostname"])?.unwrap_or(false),
        prefix_filter,
        filter_default: get_bool(map, &["telemetry", "filter_default"])?.unwrap_or(true),
        prometheus_retention: retention,
        statsd_address: address(map, "statsd_address")?,
        dogstatsd_addr: address(map, "dogstatsd_addr")?,
        dogstatsd_tags: strings(
            get(map, &["telemetry", "dogstatsd_tags"]),
            "telemetry.dogstatsd_tags",
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(value: Value) -> (Result<TelemetryConfig, ConfigError>, Vec<String>) {
        let mut warnings = Vec::new();
        let map = value.as_object().unwrap().clone();
        (parse(&map, "host1", &mut warnings), warnings)
    }

    #[test]
    fn defaults_are_consuls() {
        let (config, warnings) = parse_json(json!({}));
        let config = config.unwrap();
        assert_eq!(config.metrics_prefix, "consul");
        assert_eq!(config.hostname, "host1");
        assert!(!config.disable_hostname);
        assert!(config.filter_default);
        assert_eq!(config.prometheus_retention, None);
        assert!(warnings.is_empty());
    }

    #[test]
    fn every_key_is_read() {
        let (config, warnings) = parse_json(json!({"telemetry": {
            "metrics_prefix": "legate", "disable_hostname": true,
            "prefix_filter": ["+consul.raft", "-consul.http", "oops"], "filter_default": false,
            "prometheus_retention_time": "60s", "statsd_address": "127.0.0.1:8125",
            "dogstatsd_addr": "127.0.0.1:8126", "dogstatsd_tags": ["env:ci"],
            "statsite_address": "x:1", "bogus": 1
        }}));
        let config = config.unwrap();
        assert_eq!(config.metrics_prefix, "legate");
        assert!(config.disable_hostname);
        assert_eq!(config.prefix_filter.len(), 3);
        assert!(!config.filter_default);
        assert_eq!(
            config.prometheus_retention,
            Some(std::time::Duration::from_secs(60))
        );
        assert_eq!(config.statsd_address.as_deref(), Some("127.0.0.1:8125"));
        assert_eq!(config.dogstatsd_addr.as_deref(), Some("127.0.0.1:8126"));
        assert_eq!(config.dogstatsd_tags, vec!["env:ci".to_string()]);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings
            .iter()
            .any(|w| w.contains("Ignoring invalid prefix \"oops\"")));
        assert!(warnings
            .iter()
            .any(|w| w.contains("telemetry.statsite_address")));
        assert!(warnings
            .iter()
            .any(|w| w.contains("telemetry.bogus: unknown key")));
    }

    #[test]
    fn bad_values_are_errors() {
        for bad in [
            json!({"telemetry": {"prometheus_retention_time": "soon"}}),
            json!({"telemetry": {"disable_hostname": "maybe"}}),
            json!({"telemetry": {"prefix_filter": [1]}}),
        ] {
            assert!(parse_json(bad.clone()).0.is_err(), "{bad}");
        }
        let (zero, _) = parse_json(json!({"telemetry": {"prometheus_retention_time": "0s"}}));
        assert_eq!(zero.unwrap().prometheus_retention, None);
    }
}
