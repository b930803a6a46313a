//! Configuration entries (`/v1/config`): the envelope every kind shares,
//! and the kinds Legate knows. The body of an entry is kept as canonical
//! (PascalCase) JSON. [`validate`] checks what every kind shares; the typed
//! per-kind rules live in `legate-chain`, beside the compiler that reads
//! them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::RaftIndex;

/// Every kind, in the order `consul config list` documents them.
pub const KINDS: &[&str] = &[
    "proxy-defaults",
    "service-defaults",
    "service-router",
    "service-splitter",
    "service-resolver",
    "service-intentions",
    "ingress-gateway",
    "terminating-gateway",
    "mesh",
    "exported-services",
];

/// One config entry: kind, name, the kind's fields, and Raft bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigEntry {
    /// The kind (`service-defaults`, ...).
    #[serde(rename = "Kind")]
    pub kind: String,
    /// The name (a service, `global`, `mesh`, or a partition).
    #[serde(rename = "Name")]
    pub name: String,
    /// Every other field, canonical PascalCase.
    #[serde(flatten)]
    pub body: Map<String, Value>,
    /// Raft bookkeeping.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

impl<'de> Deserialize<'de> for ConfigEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ConfigEntry, D::Error> {
        let mut body = Map::<String, Value>::deserialize(d)?;
        let text = |v: Option<Value>| match v {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let number = |v: Option<Value>| v.and_then(|v| v.as_u64()).unwrap_or(0);
        Ok(ConfigEntry {
            kind: text(body.remove("Kind")),
            name: text(body.remove("Name")),
            raft: RaftIndex {
                create_index: number(body.remove("CreateIndex")),
                modify_index: number(body.remove("ModifyIndex")),
            },
            body,
        })
    }
}

impl ConfigEntry {
    /// `kind/name`, as the CLI prints it.
    pub fn label(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }

    /// The entry with Raft bookkeeping cleared, for comparisons.
    pub fn without_index(&self) -> ConfigEntry {
        let mut copy = self.clone();
        copy.raft = RaftIndex::default();
        copy
    }
}

/// Normalizes a kind as Consul does (case-insensitive).
pub fn normalize_kind(kind: &str) -> Result<String, String> {
    let lower = kind.trim().to_ascii_lowercase();
    if KINDS.contains(&lower.as_str()) {
        Ok(lower)
    } else {
        Err(format!("invalid config entry kind: {kind}"))
    }
}

/// Fields that are lists of objects: an HCL file with a single block where
/// a list is meant (`Routes { ... }`) gives an object, wrapped here.
const LIST_FIELDS: &[&str] = &[
    "Routes",
    "Splits",
    "Sources",
    "Permissions",
    "Listeners",
    "Services",
    "Consumers",
    "Header",
    "QueryParam",
    "Targets",
    "Overrides",
    "HashPolicies",
    "EnvoyExtensions",
];

fn wrap_lists(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::Object(_) if LIST_FIELDS.contains(&k.as_str()) => {
                            Value::Array(vec![v])
                        }
                        other => other,
                    };
                    if matches!(k.as_str(), "Meta" | "Config") {
                        (k, v)
                    } else {
                        (k, wrap_lists(v))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(wrap_lists).collect()),
        other => other,
    }
}

/// Builds an entry from a decoded (canonicalized) JSON body and checks the
/// rules every kind shares; per-kind rules come from [`validate`].
pub fn from_json(value: Value) -> Result<ConfigEntry, String> {
    let Value::Object(mut map) = wrap_lists(value) else {
        return Err("config entry must be a JSON object".into());
    };
    let kind = match map.remove("Kind") {
        Some(Value::String(k)) => normalize_kind(&k)?,
        Some(other) => return Err(format!("Kind must be a string, got {other}")),
        None => return Err("Kind is required".into()),
    };
    let name = match map.remove("Name") {
        Some(Value::String(n)) => n,
        Some(other) => return Err(format!("Name must be a string, got {other}")),
        None => String::new(),
    };
    map.remove("CreateIndex");
    map.remove("ModifyIndex");
    map.remove("Hash");
    let entry = ConfigEntry {
        kind,
        name,
        body: map,
        raft: RaftIndex::default(),
    };
    validate(&entry)?;
    Ok(entry)
}

fn meta_rules(body: &Map<String, Value>) -> Result<(), String> {
    match body.get("Meta") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(meta)) => {
            if meta.len() > 64 {
                return Err("Meta: at most 64 key/value pairs are allowed".into());
            }
            for (k, v) in meta {
                if !v.is_string() {
                    return Err(format!("Meta[{k:?}]: values must be strings"));
                }
            }
            Ok(())
        }
        Some(other) => Err(format!("Meta must be a map of strings, got {other}")),
    }
}

/// Checks an entry's own rules (not those that span entries).
pub fn validate(entry: &ConfigEntry) -> Result<(), String> {
    meta_rules(&entry.body)?;
    match entry.kind.as_str() {
        "proxy-defaults" if entry.name != "global" => Err(format!(
            "invalid name ({:?}), only \"global\" is supported",
            entry.name
        )),
        "mesh" if entry.name != "mesh" && !entry.name.is_empty() => Err(format!(
            "invalid name ({:?}), only \"mesh\" is supported",
            entry.name
        )),
        "exported-services" if entry.name != "default" => Err(format!(
            "exported-services Name must be the partition name \"default\", got {:?}",
            entry.name
        )),
        _ if entry.name.is_empty() => Err("Name is required".into()),
        _ => Ok(()),
    }
}
