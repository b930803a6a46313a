//! The `locality { region, zone }` block: where this agent runs. The node
//! is registered with it, and services registered on the agent without a
//! `Locality` of their own inherit it, as Consul's do.

use serde_json::{Map, Value};

use legate_types::Locality;

use crate::config::{get_str, ConfigError};

/// The agent's locality; `None` without the block (or with both fields
/// empty, which Consul treats as unset too).
pub fn parse(map: &Map<String, Value>) -> Result<Option<Locality>, ConfigError> {
    match map.get("locality") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(block)) => {
            if let Some(key) = block
                .keys()
                .find(|k| !matches!(k.as_str(), "region" | "zone"))
            {
                return Err(ConfigError(format!("invalid config key locality.{key}")));
            }
        }
        Some(other) => {
            return Err(ConfigError(format!(
                "locality: expected an object, got {other}"
            )))
        }
    }
    let locality = Locality {
        region: get_str(map, &["locality", "region"])?.unwrap_or_default(),
        zone: get_str(map, &["locality", "zone"])?.unwrap_or_default(),
    };
    Ok((locality != Locality::default()).then_some(locality))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_json(value: Value) -> Result<Option<Locality>, ConfigError> {
        parse(value.as_object().unwrap())
    }

    #[test]
    fn region_and_zone_are_read_and_anything_else_refused() {
        let both = parse_json(serde_json::json!({"locality": {"region": "r", "zone": "z"}}));
        assert_eq!(
            both.unwrap(),
            Some(Locality {
                region: "r".into(),
                zone: "z".into()
            })
        );
        assert_eq!(parse_json(serde_json::json!({})).unwrap(), None);
        assert_eq!(
            parse_json(serde_json::json!({"locality": {}})).unwrap(),
            None
        );
        let err = parse_json(serde_json::json!({"locality": {"rack": "7"}})).unwrap_err();
        assert_eq!(err.0, "invalid config key locality.rack");
        assert!(parse_json(serde_json::json!({"locality": "here"})).is_err());
        assert!(parse_json(serde_json::json!({"locality": {"zone": 3}})).is_err());
    }
}
