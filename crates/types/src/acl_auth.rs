//! Auth methods, binding rules and login, in Consul's wire shapes
//! (`/v1/acl/auth-method*`, `/v1/acl/binding-rule*`, `/v1/acl/login`).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::acl::TemplateVariables;

/// An auth method: how a credential a workload already has becomes a
/// token (`jwt` here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AclAuthMethod {
    /// The longest life of a token made by login (Consul's key order puts
    /// it first; left out when unset).
    #[serde(
        rename = "MaxTokenTTL",
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_token_ttl: Option<Duration>,
    /// Its unique name.
    #[serde(default)]
    pub name: String,
    /// Its type (`jwt`).
    #[serde(default)]
    pub r#type: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub display_name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `local` (the default) or `global`: where its tokens are valid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_locality: String,
    /// The type's settings (`null` when none, as Consul answers).
    #[serde(default)]
    pub config: Option<Map<String, Value>>,
    /// Raft index of creation.
    #[serde(default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(default)]
    pub modify_index: u64,
}

impl AclAuthMethod {
    /// The method as `GET /v1/acl/auth-methods` lists it: no `Config`.
    pub fn stub(&self) -> Value {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut value {
            map.remove("Config");
        }
        value
    }
}

/// A binding rule: which logins (by a selector over their claims) get
/// which identity, role, policy or templated policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AclBindingRule {
    /// Its ID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// The auth method it belongs to.
    #[serde(default)]
    pub auth_method: String,
    /// Which logins it applies to (the filter grammar; empty: every one).
    #[serde(default)]
    pub selector: String,
    /// `service`, `node`, `role`, `policy` or `templated-policy`.
    #[serde(default)]
    pub bind_type: String,
    /// The name bound, with `${value.<claim>}` references.
    #[serde(default)]
    pub bind_name: String,
    /// A templated policy's variables (`templated-policy` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_vars: Option<TemplateVariables>,
    /// Raft index of creation.
    #[serde(default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(default)]
    pub modify_index: u64,
}

/// `POST /v1/acl/login`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct LoginRequest {
    /// The auth method to log in with.
    #[serde(default)]
    pub auth_method: String,
    /// The credential (a JWT).
    #[serde(default)]
    pub bearer_token: String,
    /// Free-form metadata put in the token's description.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub meta: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for LoginRequest {
    /// The bearer token is a credential: never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginRequest")
            .field("auth_method", &self.auth_method)
            .field("bearer_token", &"<hidden>")
            .field("meta", &self.meta)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_answer_in_consuls_shape() {
        let method = AclAuthMethod {
            max_token_ttl: Some(Duration::from_secs(3600)),
            name: "jwt".into(),
            r#type: "jwt".into(),
            ..Default::default()
        };
        let value = serde_json::to_value(&method).unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "MaxTokenTTL",
                "Name",
                "Type",
                "Config",
                "CreateIndex",
                "ModifyIndex"
            ]
        );
        assert_eq!(value["MaxTokenTTL"], "1h0m0s");
        assert!(value["Config"].is_null());
        assert!(method.stub().get("Config").is_none());
        let read: AclAuthMethod =
            serde_json::from_str(r#"{"Name": "a", "MaxTokenTTL": 600000000000}"#).unwrap();
        assert_eq!(read.max_token_ttl, Some(Duration::from_secs(600)));
        let rule = AclBindingRule::default();
        let value = serde_json::to_value(&rule).unwrap();
        assert_eq!(value["Selector"], "");
        assert!(value.get("BindVars").is_none());
    }
}
