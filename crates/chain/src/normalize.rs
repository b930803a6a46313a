//! Write-time normalization, as Consul's `Normalize()`: values are put in
//! their canonical form before validation and storage, so reads return
//! what Consul would (`Protocol` lowercased, methods uppercased, intention
//! sources typed, ranked by precedence and ordered by it).

use legate_types::config_entry::ConfigEntry;
use serde_json::{json, Value};

fn lowercase_field(value: &mut Value, field: &str) {
    if let Some(Value::String(s)) = value.get_mut(field) {
        *s = s.to_ascii_lowercase();
    }
}

fn uppercase_methods(http: &mut Value) {
    if let Some(Value::Array(methods)) = http.get_mut("Methods") {
        for m in methods.iter_mut() {
            if let Value::String(s) = m {
                *s = s.to_ascii_uppercase();
            }
        }
    }
}

/// An intention's precedence in the default namespace: exact source and
/// destination 9, wildcard source 8, wildcard destination 6, both 5 (see
/// [`crate::intentions::precedence`] for all nine levels).
pub fn intention_precedence(source: &str, destination: &str) -> i64 {
    crate::intentions::precedence("default", source, "default", destination)
}

/// Normalizes a `service-intentions` entry: sources typed (`consul`),
/// ranked and ordered by precedence (stable), methods uppercased. A write
/// through `/v1/config` or the exact intentions API (`legacy_write` false)
/// clears the legacy ids and timestamps of every source, as Consul does; a
/// legacy write keeps them and gives each source a `LegacyMeta` map.
pub fn normalize_intentions(entry: &mut ConfigEntry, legacy_write: bool) {
    let destination = entry.name.clone();
    let Some(Value::Array(sources)) = entry.body.get_mut("Sources") else {
        return;
    };
    for source in sources.iter_mut() {
        let name = source
            .get("Name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Value::Object(m) = source else { continue };
        if legacy_write {
            if !m.get("LegacyMeta").is_some_and(Value::is_object) {
                m.insert("LegacyMeta".into(), json!({}));
            }
        } else {
            m.remove("LegacyID");
            m.remove("LegacyCreateTime");
            m.remove("LegacyUpdateTime");
        }
        m.insert(
            "Precedence".into(),
            json!(intention_precedence(&name, &destination)),
        );
        let typed = m
            .get("Type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty());
        if !typed {
            m.insert("Type".into(), json!("consul"));
        }
        if let Some(Value::Array(perms)) = m.get_mut("Permissions") {
            for p in perms.iter_mut() {
                if let Some(http) = p.get_mut("HTTP") {
                    uppercase_methods(http);
                }
            }
        }
    }
    // Highest precedence first; equal precedence keeps its order.
    sources.sort_by_key(|s| {
        std::cmp::Reverse(s.get("Precedence").and_then(Value::as_i64).unwrap_or(0))
    });
}

/// Normalizes an entry in place.
pub fn normalize_entry(entry: &mut ConfigEntry) {
    if entry.kind == "service-intentions" {
        return normalize_intentions(entry, false);
    }
    let body = &mut entry.body;
    match entry.kind.as_str() {
        "service-defaults" => {
            let mut v = Value::Object(std::mem::take(body));
            lowercase_field(&mut v, "Protocol");
            if let Value::Object(m) = v {
                *body = m;
            }
        }
        "service-router" => {
            if let Some(Value::Array(routes)) = body.get_mut("Routes") {
                for route in routes.iter_mut() {
                    if let Some(http) = route.pointer_mut("/Match/HTTP") {
                        uppercase_methods(http);
                    }
                }
            }
        }
        "ingress-gateway" => {
            if let Some(Value::Array(listeners)) = body.get_mut("Listeners") {
                for l in listeners.iter_mut() {
                    let protocol = l
                        .get("Protocol")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_ascii_lowercase();
                    if let Value::Object(m) = l {
                        m.insert(
                            "Protocol".into(),
                            json!(if protocol.is_empty() {
                                "tcp".to_string()
                            } else {
                                protocol
                            }),
                        );
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_types::config_entry::from_json;

    #[test]
    fn values_take_their_canonical_form() {
        let mut e =
            from_json(json!({"Kind": "service-defaults", "Name": "web", "Protocol": "HTTP"}))
                .unwrap();
        normalize_entry(&mut e);
        assert_eq!(e.body["Protocol"], "http");
        let mut e = from_json(json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"Methods": ["get"]}}}]})).unwrap();
        normalize_entry(&mut e);
        assert_eq!(
            e.body["Routes"][0]["Match"]["HTTP"]["Methods"],
            json!(["GET"])
        );
        let mut e = from_json(json!({"Kind": "ingress-gateway", "Name": "i", "Listeners": [{"Port": 1, "Services": [{"Name": "a"}]}]})).unwrap();
        normalize_entry(&mut e);
        assert_eq!(e.body["Listeners"][0]["Protocol"], "tcp");
    }

    #[test]
    fn intention_sources_are_ranked_and_sorted() {
        let mut e = from_json(json!({"Kind": "service-intentions", "Name": "api", "Sources": [
            {"Name": "*", "Action": "deny"},
            {"Name": "web", "Action": "allow", "LegacyID": "abc"},
            {"Name": "reporter", "Permissions": [{"Action": "allow", "HTTP": {"Methods": ["get"]}}]}
        ]}))
        .unwrap();
        normalize_entry(&mut e);
        let sources = e.body["Sources"].as_array().unwrap();
        let order: Vec<(&str, i64)> = sources
            .iter()
            .map(|s| {
                (
                    s["Name"].as_str().unwrap(),
                    s["Precedence"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(order, vec![("web", 9), ("reporter", 9), ("*", 8)]);
        assert!(sources.iter().all(|s| s["Type"] == "consul"));
        assert!(sources[0].get("LegacyID").is_none());
        assert_eq!(
            sources[1]["Permissions"][0]["HTTP"]["Methods"],
            json!(["GET"])
        );
        assert_eq!(intention_precedence("*", "*"), 5);
        assert_eq!(intention_precedence("web", "*"), 6);
    }
}
