//! Canonical proto3 JSON for Envoy messages, through the descriptor set
//! `envoy-types` is generated from (vendored beside this crate): used for
//! golden files, for the escape hatches (`envoy_*_json`), and for
//! debugging. Nested `Any`s expand to `{"@type": ..., ...}` as Envoy's own
//! JSON does.

use std::sync::OnceLock;

use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde_json::Value;

static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();

/// The Envoy descriptor pool.
pub fn pool() -> Result<&'static DescriptorPool, String> {
    POOL.get_or_init(|| {
        DescriptorPool::decode(&include_bytes!("../descriptors/envoy-types-0.7.7.bin")[..])
            .map_err(|e| format!("loading the Envoy descriptors: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn type_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

/// An `Any` as proto3 JSON with its `@type`, default fields left out.
pub fn any_to_json(any: &Any) -> Result<Value, String> {
    let pool = pool()?;
    let name = type_name(&any.type_url);
    let descriptor = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("unknown Envoy type {name}"))?;
    let message = DynamicMessage::decode(descriptor, any.value.as_slice())
        .map_err(|e| format!("decoding {name}: {e}"))?;
    let options = SerializeOptions::new()
        .skip_default_fields(true)
        .use_proto_field_name(true);
    let mut out = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| format!("encoding {name} as JSON: {e}"))?;
    if let Value::Object(m) = &mut out {
        let mut with_type = serde_json::Map::new();
        with_type.insert("@type".into(), Value::String(any.type_url.clone()));
        with_type.extend(std::mem::take(m));
        *m = with_type;
    }
    Ok(out)
}

/// Parses proto3 JSON of an Envoy message (an `@type` field, or `type_url`
/// when absent) strictly: unknown fields are errors.
pub fn json_to_any(type_url: &str, json: &Value) -> Result<Any, String> {
    let pool = pool()?;
    let mut json = json.clone();
    let type_url = match json.as_object_mut().and_then(|m| m.remove("@type")) {
        Some(Value::String(t)) => t,
        _ => type_url.to_string(),
    };
    let name = type_name(&type_url);
    let descriptor = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("unknown Envoy type {name}"))?;
    let message = DynamicMessage::deserialize(descriptor, json)
        .map_err(|e| format!("invalid {name}: {e}"))?;
    Ok(Any {
        type_url: format!("type.googleapis.com/{name}"),
        value: message.encode_to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_parse_and_round_trip() {
        let cluster = serde_json::json!({"name": "x", "type": "EDS", "connect_timeout": "9s",
            "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}}});
        let any = json_to_any(
            "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            &cluster,
        )
        .unwrap();
        let back = any_to_json(&any).unwrap();
        assert_eq!(back["connect_timeout"], "9s");
        assert_eq!(
            back["@type"],
            "type.googleapis.com/envoy.config.cluster.v3.Cluster"
        );
        let err = json_to_any(
            "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            &serde_json::json!({"name": "x", "no_such_field": 1}),
        )
        .unwrap_err();
        assert!(err.contains("no_such_field"), "{err}");
        assert!(json_to_any("type.googleapis.com/nope.Nope", &serde_json::json!({})).is_err());
    }
}
