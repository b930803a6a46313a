//! The `xds {}` block: `update_max_per_second`, the pace at which the
//! agent sends new proxy configurations across all its xDS streams
//! (`legate_xds::update_rate`).

use serde_json::{Map, Value};

use crate::config::{get, ConfigError};

/// `xds { update_max_per_second }`: a positive number (Consul's 250).
pub fn update_rate(map: &Map<String, Value>) -> Result<f64, ConfigError> {
    if let Some(Value::Object(block)) = map.get("xds") {
        if let Some(key) = block.keys().find(|k| k.as_str() != "update_max_per_second") {
            return Err(ConfigError(format!("invalid config key xds.{key}")));
        }
    }
    match get(map, &["xds", "update_max_per_second"]) {
        None | Some(Value::Null) => Ok(250.0),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
            _ => Err(ConfigError(format!(
                "xds.update_max_per_second: {n} must be a positive number"
            ))),
        },
        Some(other) => Err(ConfigError(format!(
            "xds.update_max_per_second: expected a number, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_a_positive_number_and_the_block_has_one_key() {
        let rate = |v: serde_json::Value| update_rate(v.as_object().unwrap());
        assert_eq!(rate(serde_json::json!({})).unwrap(), 250.0);
        assert_eq!(
            rate(serde_json::json!({"xds": {"update_max_per_second": 10}})).unwrap(),
            10.0
        );
        for bad in [
            serde_json::json!(0),
            serde_json::json!(-1),
            serde_json::json!("fast"),
        ] {
            let err = rate(serde_json::json!({"xds": {"update_max_per_second": bad}})).unwrap_err();
            assert!(err.0.contains("xds.update_max_per_second"), "{}", err.0);
        }
        let err = rate(serde_json::json!({"xds": {"other": 1}})).unwrap_err();
        assert_eq!(err.0, "invalid config key xds.other");
    }
}
