//! The snapshot: everything needed to configure one connect proxy, as
//! plain data (serializable, so tests keep fixtures as JSON files).

use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// The upstream as registered (shared by every snapshot of the proxy).
    pub upstream: Arc<Upstream>,
    /// Its compiled discovery chain.
    pub chain: Arc<CompiledChain>,
    /// Endpoints by chain target id.
    pub endpoints: TargetEndpoints,
}

/// Endpoints by chain target id, kept as a list sorted by id: a chain has
/// one target or a few, where the smallest node of a map has room for
/// eleven (half a kilobyte per upstream). Serialized as a map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetEndpoints(Vec<(String, Vec<Endpoint>)>);

impl TargetEndpoints {
    /// The endpoints of target `id`.
    pub fn get(&self, id: &str) -> Option<&Vec<Endpoint>> {
        self.0
            .binary_search_by(|(t, _)| t.as_str().cmp(id))
            .ok()
            .map(|at| &self.0[at].1)
    }

    /// Sets the endpoints of target `id`.
    pub fn insert(&mut self, id: String, endpoints: Vec<Endpoint>) {
        match self.0.binary_search_by(|(t, _)| t.cmp(&id)) {
            Ok(at) => self.0[at].1 = endpoints,
            Err(at) => self.0.insert(at, (id, endpoints)),
        }
    }

    /// Every target's endpoints, in target id order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Vec<Endpoint>)> {
        self.0.iter().map(|(t, e)| (t, e))
    }

    /// How many targets have endpoints here.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no target has endpoints here.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every target's endpoints, without the ids.
    pub fn values(&self) -> impl Iterator<Item = &Vec<Endpoint>> {
        self.0.iter().map(|(_, e)| e)
    }
}

impl FromIterator<(String, Vec<Endpoint>)> for TargetEndpoints {
    fn from_iter<I: IntoIterator<Item = (String, Vec<Endpoint>)>>(items: I) -> Self {
        let mut endpoints = TargetEndpoints::default();
        for (id, list) in items {
            endpoints.insert(id, list);
        }
        endpoints
    }
}

impl From<BTreeMap<String, Vec<Endpoint>>> for TargetEndpoints {
    fn from(map: BTreeMap<String, Vec<Endpoint>>) -> Self {
        TargetEndpoints(map.into_iter().collect())
    }
}

impl Serialize for TargetEndpoints {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for TargetEndpoints {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::<String, Vec<Endpoint>>::deserialize(deserializer).map(TargetEndpoints::from)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(id: &str) -> Endpoint {
        Endpoint {
            node: "n1".into(),
            service_id: id.into(),
            address: "10.0.0.1".into(),
            port: 8080,
            health: EndpointHealth::Passing,
            weight: 1,
        }
    }

    #[test]
    fn target_endpoints_keep_id_order_replace_and_serialize_as_a_map() {
        let mut by_target = TargetEndpoints::default();
        by_target.insert("b".into(), vec![endpoint("b1")]);
        by_target.insert("a".into(), vec![endpoint("a1")]);
        by_target.insert("b".into(), vec![endpoint("b2")]);
        assert_eq!(by_target.len(), 2);
        assert_eq!(by_target.get("b").unwrap()[0].service_id, "b2");
        assert!(by_target.get("c").is_none());
        let ids: Vec<&String> = by_target.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["a", "b"]);
        let json = serde_json::to_value(&by_target).unwrap();
        assert_eq!(json["b"][0]["service_id"], "b2");
        let back: TargetEndpoints = serde_json::from_value(json).unwrap();
        assert_eq!(back, by_target);
    }
}
