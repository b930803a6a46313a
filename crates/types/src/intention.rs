//! Intention wire shapes: the legacy `/v1/connect/intentions` API and
//! `/v1/agent/connect/authorize`. Intentions are stored only as
//! `service-intentions` config entries; these are flattened views.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RaftIndex;

/// One intention, as Consul's legacy API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Intention {
    /// Legacy creation time (RFC 3339; only for intentions made through the legacy API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Legacy update time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// Legacy id (absent for intentions written as config entries).
    #[serde(rename = "ID", default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Source namespace (`default`).
    #[serde(rename = "SourceNS", default)]
    pub source_ns: String,
    /// Source service or `*`.
    #[serde(default)]
    pub source_name: String,
    /// Destination namespace (`default`).
    #[serde(rename = "DestinationNS", default)]
    pub destination_ns: String,
    /// Destination service or `*`.
    #[serde(default)]
    pub destination_name: String,
    /// Source partition (Enterprise; empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_partition: String,
    /// Destination partition (Enterprise; empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination_partition: String,
    /// Source peer (config entries only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_peer: String,
    /// `consul`.
    #[serde(default)]
    pub source_type: String,
    /// `allow` or `deny` (empty for L7 intentions).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// L7 permissions (config entries and the exact API only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<Value>,
    /// Metadata (legacy meta, or the config entry's meta).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
    /// Computed precedence (9 most exact).
    #[serde(default)]
    pub precedence: i64,
    /// Raft indexes (of the config entry holding the intention).
    #[serde(flatten)]
    pub raft: RaftIndex,
}

impl Intention {
    /// `web => db (allow)` as Consul's CLI prints intentions.
    pub fn summary(&self) -> String {
        let detail = if !self.permissions.is_empty() {
            match self.permissions.len() {
                1 => "1 permission".to_string(),
                n => format!("{n} permissions"),
            }
        } else {
            self.action.clone()
        };
        format!(
            "{} => {} ({detail})",
            self.source_name, self.destination_name
        )
    }

    /// `default/web => default/db (ID: x, Precedence: 9, Action: ALLOW)`,
    /// the form authorize reasons use.
    pub fn describe(&self) -> String {
        let id = if self.id.is_empty() {
            String::new()
        } else {
            format!("ID: {}, ", self.id)
        };
        let detail = if self.permissions.is_empty() {
            format!("Action: {}", self.action.to_ascii_uppercase())
        } else {
            format!("Permissions: {}", self.permissions.len())
        };
        format!(
            "{}/{} => {}/{} ({id}Precedence: {}, {detail})",
            self.source_ns,
            self.source_name,
            self.destination_ns,
            self.destination_name,
            self.precedence
        )
    }
}

/// A write through the intentions API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum IntentionOp {
    /// `POST /v1/connect/intentions`: a new legacy intention (id assigned).
    Create(Intention),
    /// `PUT /v1/connect/intentions/:id`.
    Update(Intention),
    /// `DELETE /v1/connect/intentions/:id`.
    Delete(String),
    /// `PUT /v1/connect/intentions/exact`: create or replace by name.
    Upsert(Intention),
    /// `DELETE /v1/connect/intentions/exact`.
    DeleteExact {
        /// Source service.
        source: String,
        /// Destination service.
        destination: String,
    },
}

/// How to find one intention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum IntentionLookup {
    /// By legacy id.
    Id(String),
    /// By source and destination names.
    Exact {
        /// Source service.
        source: String,
        /// Destination service.
        destination: String,
    },
}

/// Which side `/v1/connect/intentions/match` matches names on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MatchBy {
    /// Intentions whose source covers the name.
    Source,
    /// Intentions whose destination covers the name.
    Destination,
}

/// `GET /v1/connect/intentions/check` and the reason behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct IntentionCheck {
    /// Whether the connection is allowed.
    pub allowed: bool,
    /// Why (not serialized by `/check`, used by authorize).
    #[serde(skip)]
    pub reason: String,
}

/// `POST /v1/agent/connect/authorize` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AuthorizeRequest {
    /// The destination service.
    #[serde(default)]
    pub target: String,
    /// The client certificate's SPIFFE URI.
    #[serde(rename = "ClientCertURI", default)]
    pub client_cert_uri: String,
    /// The client certificate's serial.
    #[serde(default)]
    pub client_cert_serial: String,
}

/// `POST /v1/agent/connect/authorize` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AuthorizeResponse {
    /// Whether the connection is allowed.
    pub authorized: bool,
    /// Why.
    pub reason: String,
}
