//! The snapshot: everything needed to configure one connect proxy, as
//! plain data (serializable, so tests keep fixtures as JSON files).

use std::collections::BTreeMap;

use legate_chain::CompiledChain;
use legate_types::intention::Intention;
use legate_types::Upstream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Health of one endpoint as xDS reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndpointHealth {
    /// Every check passing.
    Passing,
    /// Some check warning (still healthy).
    Warning,
    /// Some check critical (sent as UNHEALTHY).
    Critical,
}

/// One instance of a target: the address Envoy connects to (its sidecar).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Node name.
    pub node: String,
    /// The proxy's service id.
    pub service_id: String,
    /// Address to dial.
    pub address: String,
    /// Port to dial.
    pub port: u16,
    /// Aggregate health of the instance and its node.
    pub health: EndpointHealth,
    /// Load-balancing weight (Weights.Passing / Warning, capped at 128).
    pub weight: u32,
}

/// One upstream with its compiled chain and endpoints per target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSnapshot {
    /// The upstream as registered.
    pub upstream: Upstream,
    /// Its compiled discovery chain.
    pub chain: std::sync::Arc<CompiledChain>,
    /// Endpoints by chain target id.
    pub endpoints: BTreeMap<String, Vec<Endpoint>>,
}

impl UpstreamSnapshot {
    /// The listener/upstream id: the destination name (Consul's `Identifier`).
    pub fn id(&self) -> String {
        self.upstream.destination_name.clone()
    }
}

/// Everything one `connect-proxy` needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectProxySnapshot {
    /// The proxy's service id (the xDS node id).
    pub proxy_id: String,
    /// The proxy's service name.
    pub proxy_service: String,
    /// The service the proxy fronts.
    pub destination_service: String,
    /// A Connect-native service served proxyless (gRPC's xDS client): its
    /// resources take the shapes gRPC accepts, and it has no public
    /// listener, local app, leaf or intentions here.
    #[serde(default)]
    pub native: bool,
    /// Address the public listener binds (proxy address, or `bind_address`).
    pub address: String,
    /// The public listener's port.
    pub port: u16,
    /// The local application's address.
    pub local_service_address: String,
    /// The local application's port.
    pub local_service_port: u16,
    /// `proxy.config` (protocol, timeouts, escape hatches).
    pub config: Map<String, Value>,
    /// Datacenter.
    pub datacenter: String,
    /// `<cluster-id>.consul`.
    pub trust_domain: String,
    /// PEM roots (active first).
    pub roots: Vec<String>,
    /// The proxy's leaf certificate chain (PEM).
    pub leaf_cert: String,
    /// Its private key (PEM).
    pub leaf_key: String,
    /// Intentions whose destination covers this service, in evaluation order.
    pub intentions: Vec<Intention>,
    /// What intentions decide when none matches.
    pub default_allow: bool,
    /// The destination service's protocol (for the public listener).
    pub protocol: String,
    /// Upstreams.
    pub upstreams: Vec<UpstreamSnapshot>,
    /// Upstreams a native service's clients asked for whose chain or
    /// endpoints are not known yet (always empty for sidecars).
    #[serde(default)]
    pub pending_upstreams: Vec<String>,
    /// When the change that produced this snapshot reached proxycfg (for
    /// push-latency metrics; not part of the configuration).
    #[serde(skip)]
    pub changed_at: Option<std::time::Instant>,
}

impl ConnectProxySnapshot {
    /// A config value as a string.
    pub fn config_str(&self, key: &str) -> Option<&str> {
        self.config.get(key).and_then(Value::as_str)
    }

    /// A config value as a number (numbers or numeric strings, as Consul accepts).
    pub fn config_u64(&self, key: &str) -> Option<u64> {
        match self.config.get(key)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }
}
