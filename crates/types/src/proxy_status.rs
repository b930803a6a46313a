//! What the agent's xDS server can tell about one local proxy: the
//! resources it last sent it (names and versions, never their content,
//! which holds private keys) and its recent pushes with what the proxy
//! answered (`GET /v1/internal/ui/proxy/:id`, the UI's per-proxy page).
//! The xDS server implements [`ProxyStatusSource`]; the binary hands it to
//! the agent.

use serde::{Deserialize, Serialize};

/// How many pushes are kept per proxy.
pub const PUSHES_KEPT: usize = 32;

/// One response sent to a proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct PushRecord {
    /// When it was sent (Unix milliseconds).
    pub sent_at_ms: u64,
    /// The xDS stream it went on (numbered by the agent).
    pub stream: u64,
    /// Its resource type (`type.googleapis.com/envoy.config.cluster.v3.Cluster`).
    pub type_url: String,
    /// Its nonce on the stream.
    pub nonce: String,
    /// Resources it carried.
    pub resources: usize,
    /// Resources it removed (delta streams).
    pub removed: usize,
    /// `sent`, then `acked` or `nacked` once the proxy answered, or
    /// `superseded` when a newer push of its type went out unanswered.
    pub status: String,
    /// The proxy's error for a NACK.
    pub error: String,
}

/// One resource a proxy was last sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ResourceRecord {
    /// Its type URL.
    pub type_url: String,
    /// Its name.
    pub name: String,
    /// Its version (a hash of its content).
    pub version: String,
    /// Its encoded size in bytes.
    pub bytes: usize,
}

/// A proxy's xDS status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ProxyXdsStatus {
    /// The proxy's service ID (its xDS node id).
    #[serde(rename = "ProxyID")]
    pub proxy_id: String,
    /// The resources of its last configuration, by type then name.
    pub resources: Vec<ResourceRecord>,
    /// Its last pushes, newest first (at most [`PUSHES_KEPT`]).
    pub pushes: Vec<PushRecord>,
}

/// Where the agent reads a proxy's xDS status.
pub trait ProxyStatusSource: Send + Sync {
    /// The status of `proxy_id`, `None` when no stream ever served it.
    fn status(&self, proxy_id: &str) -> Option<ProxyXdsStatus>;
}
