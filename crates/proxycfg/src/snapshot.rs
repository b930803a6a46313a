//! The snapshot: everything needed to configure one connect proxy, as
//! plain data (serializable, so tests keep fixtures as JSON files).

use std::sync::Arc;

use legate_chain::CompiledChain;
use legate_types::intention::Intention;
use legate_types::Upstream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Health of one endpoint as xDS reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EndpointHealth {
    /// Every check passing.
    Passing,
    /// Some check warning (still healthy).
    Warning,
    /// Some check critical (sent as UNHEALTHY).
    Critical,
}

/// One instance of a target: the address Envoy connects to (its sidecar).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

impl Endpoint {
    /// An instance as a proxy dials it: its `best_address` (WAN ones from
    /// another datacenter), its checks' health and Consul's weight.
    pub fn of_instance(instance: &legate_types::CheckServiceNode, wan: bool) -> Endpoint {
        use legate_types::HealthStatus;
        let status = instance.aggregate_status();
        let (address, port) = instance.best_address(wan);
        let weights = &instance.service.weights;
        let weight = match status {
            HealthStatus::Warning => weights.warning,
            _ => weights.passing,
        };
        Endpoint {
            node: instance.node.node.clone(),
            service_id: instance.service.id.clone(),
            address,
            port,
            health: match status {
                HealthStatus::Passing => EndpointHealth::Passing,
                HealthStatus::Warning => EndpointHealth::Warning,
                _ => EndpointHealth::Critical,
            },
            weight: weight.clamp(1, 128) as u32,
        }
    }
}

/// One upstream with its compiled chain and endpoints per target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSnapshot {
    /// The upstream as registered (shared with the registration).
    pub upstream: SharedUpstream,
    /// Its compiled discovery chain.
    pub chain: Arc<CompiledChain>,
    /// Endpoints by chain target id.
    pub endpoints: TargetEndpoints,
}

/// One upstream of a registration's shared list: snapshots point into
/// the list the agent holds rather than copying each upstream.
#[derive(Clone)]
pub struct SharedUpstream {
    list: Arc<Vec<Upstream>>,
    at: usize,
}

impl SharedUpstream {
    /// Every upstream of `list`, in order.
    pub fn all_of(list: &Arc<Vec<Upstream>>) -> Vec<SharedUpstream> {
        (0..list.len())
            .map(|at| SharedUpstream {
                list: list.clone(),
                at,
            })
            .collect()
    }
}

impl From<Upstream> for SharedUpstream {
    fn from(upstream: Upstream) -> Self {
        SharedUpstream {
            list: Arc::new(vec![upstream]),
            at: 0,
        }
    }
}

impl std::ops::Deref for SharedUpstream {
    type Target = Upstream;

    fn deref(&self) -> &Upstream {
        &self.list[self.at]
    }
}

impl PartialEq for SharedUpstream {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for SharedUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for SharedUpstream {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedUpstream {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Upstream::deserialize(deserializer).map(SharedUpstream::from)
    }
}

/// Endpoints by chain target id (a sorted list: a chain has one target
/// or a few).
pub type TargetEndpoints = legate_types::sorted_map::SortedMap<Vec<Endpoint>>;

impl UpstreamSnapshot {
    /// The listener/upstream id: the destination name (Consul's `Identifier`).
    pub fn id(&self) -> String {
        self.upstream.destination_name.clone()
    }
}

/// One instance a prepared query answered, as a proxy dials it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueryEndpoint {
    /// Where to dial and how healthy it is.
    pub endpoint: Endpoint,
    /// The datacenter the instance is in.
    pub datacenter: String,
    /// The service its certificate names: a sidecar's destination, or a
    /// Connect-native instance's own name.
    pub service: String,
}

/// An upstream of `destination_type = "prepared_query"`: no discovery
/// chain, only the query's current answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryUpstreamSnapshot {
    /// The upstream as registered.
    pub upstream: SharedUpstream,
    /// The datacenter the cluster's name carries (the upstream's, else
    /// the proxy's).
    pub datacenter: String,
    /// The instances the query answered with (`Connect = true`).
    pub endpoints: Vec<QueryEndpoint>,
}

impl QueryUpstreamSnapshot {
    /// Consul's upstream id for a query: `prepared_query:<name>`.
    pub fn id(&self) -> String {
        format!("prepared_query:{}", self.upstream.destination_name)
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
    pub intentions: Arc<Vec<Intention>>,
    /// What intentions decide when none matches.
    pub default_allow: bool,
    /// The destination service's protocol (for the public listener).
    pub protocol: String,
    /// Upstreams.
    pub upstreams: Vec<UpstreamSnapshot>,
    /// Upstreams that are prepared queries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_upstreams: Vec<QueryUpstreamSnapshot>,
    /// Upstreams a native service's clients asked for whose chain or
    /// endpoints are not known yet (always empty for sidecars).
    #[serde(default)]
    pub pending_upstreams: Vec<String>,
    /// A mesh gateway's own configuration (`None` for sidecars and
    /// native services, whose fields above are theirs alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh_gateway: Option<Arc<crate::gateway::MeshGatewayState>>,
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
