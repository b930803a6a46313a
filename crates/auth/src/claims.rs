//! A verified token's claims mapped as Consul maps them: `ClaimMappings`
//! give the string values binding rules select as `value.<name>` (and
//! bind names interpolate as `${value.<name>}`), `ListClaimMappings` the
//! lists selected as `list.<name>`. A claim is named by its top-level
//! key, or by a JSON pointer when it starts with `/`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::config::JwtConfig;

/// What binding rules see of a login.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `value.<name>`: the mapped claims present in the token.
    pub values: BTreeMap<String, String>,
    /// `list.<name>`: the mapped list claims present.
    pub lists: BTreeMap<String, Vec<String>>,
    /// What bind names may interpolate (`value.<name>`, empty when the
    /// claim is missing).
    pub projected: BTreeMap<String, String>,
}

fn claim<'a>(claims: &'a Value, name: &str) -> Option<&'a Value> {
    if name.starts_with('/') {
        claims.pointer(name)
    } else {
        claims.get(name)
    }
}

/// A scalar claim as Consul stringifies it (numbers truncated to
/// integers).
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => i.to_string(),
            None => (n.as_f64().unwrap_or_default() as i64).to_string(),
        }),
        _ => None,
    }
}

/// Go's `%T` of a claim Consul cannot stringify.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        _ => "<nil>",
    }
}

impl Identity {
    /// The identity a token's claims give under `config`'s mappings.
    pub fn from_claims(
        claims: &Map<String, Value>,
        config: &JwtConfig,
    ) -> Result<Identity, String> {
        let claims = Value::Object(claims.clone());
        let mut identity = Identity::default();
        for (source, target) in &config.claim_mappings {
            identity
                .projected
                .insert(format!("value.{target}"), String::new());
            let Some(value) = claim(&claims, source) else {
                continue;
            };
            let text = scalar(value).ok_or_else(|| {
                format!(
                    "error converting claim '{source}' to string from unknown type {}",
                    go_type(value)
                )
            })?;
            identity
                .projected
                .insert(format!("value.{target}"), text.clone());
            identity.values.insert(target.clone(), text);
        }
        for (source, target) in &config.list_claim_mappings {
            let Some(value) = claim(&claims, source) else {
                continue;
            };
            let items: Vec<&Value> = match value {
                Value::Array(items) => items.iter().collect(),
                Value::Object(_) => {
                    return Err(format!(
                        "{source:?} list claim could not be converted to string list"
                    ))
                }
                other => vec![other],
            };
            let mut list = Vec::new();
            for item in items {
                let text = scalar(item).ok_or_else(|| {
                    format!("value {item} in {source:?} list claim could not be parsed as string")
                })?;
                if !text.is_empty() {
                    list.push(text);
                }
            }
            identity.lists.insert(target.clone(), list);
        }
        Ok(identity)
    }

    /// The selector view: `{"value": {...}, "list": {...}}`.
    pub fn selectable(&self) -> Value {
        serde_json::json!({ "value": self.values, "list": self.lists })
    }

    /// A bind name with its `${value.<name>}` references filled in (values
    /// lower-cased, as Consul's HIL call asks); an unknown reference or an
    /// unclosed one is an error.
    pub fn interpolate(&self, template: &str) -> Result<String, String> {
        interpolate(template, &self.projected)
    }
}

/// `${name}` references in `template` replaced by `vars` (lower-cased).
pub fn interpolate(template: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| {
            format!("error interpreting template: unclosed reference in {template:?}")
        })?;
        let name = after[..end].trim();
        let value = vars.get(name).ok_or_else(|| {
            format!("error interpreting template: unknown variable accessed: {name}")
        })?;
        out.push_str(&value.to_lowercase());
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
