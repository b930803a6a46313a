//! Catalog shapes: nodes, services, health checks, and the rows the catalog
//! and health endpoints return, in Consul's JSON spelling.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::locality::Locality;
use crate::RaftIndex;

/// Free-form string metadata (`Meta`, `NodeMeta`): keys are user data.
pub use crate::meta_map::Meta;

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero_u16(value: &u16) -> bool {
    *value == 0
}

/// Health of one check, and of aggregates of checks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// The check passes.
    Passing,
    /// The check warns.
    Warning,
    /// The check fails.
    #[default]
    Critical,
    /// The service or node is in maintenance mode.
    Maintenance,
}

impl HealthStatus {
    /// The lowercase name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Passing => "passing",
            HealthStatus::Warning => "warning",
            HealthStatus::Critical => "critical",
            HealthStatus::Maintenance => "maintenance",
        }
    }

    /// Parses a wire name; `any` is not a status and yields `None`.
    pub fn parse(text: &str) -> Option<HealthStatus> {
        match text {
            "passing" => Some(HealthStatus::Passing),
            "warning" => Some(HealthStatus::Warning),
            "critical" => Some(HealthStatus::Critical),
            "maintenance" => Some(HealthStatus::Maintenance),
            _ => None,
        }
    }

    /// Severity order used to aggregate checks: the worst status wins.
    pub fn severity(self) -> u8 {
        match self {
            HealthStatus::Passing => 0,
            HealthStatus::Warning => 1,
            HealthStatus::Critical => 2,
            HealthStatus::Maintenance => 3,
        }
    }
}

/// A catalog node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Node {
    /// The node's UUID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// The node's name.
    #[serde(rename = "Node", default)]
    pub node: String,
    /// The node's address.
    #[serde(default)]
    pub address: String,
    /// The node's datacenter.
    #[serde(default)]
    pub datacenter: String,
    /// Named alternative addresses (`lan`, `wan`, ...).
    #[serde(default)]
    pub tagged_addresses: BTreeMap<String, String>,
    /// Node metadata.
    #[serde(default)]
    pub meta: Meta,
    /// Where the node runs (left out when unset, as Consul does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<Locality>,
    /// Raft bookkeeping.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

/// Weights a DNS SRV answer gives to instances by health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Weights {
    /// Weight of a passing instance.
    pub passing: i64,
    /// Weight of a warning instance.
    pub warning: i64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            passing: 1,
            warning: 1,
        }
    }
}

/// An address and port (service tagged addresses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceAddress {
    /// The address.
    #[serde(default)]
    pub address: String,
    /// The port.
    #[serde(default)]
    pub port: u16,
}

/// Mesh gateway mode settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct MeshGatewayConfig {
    /// `""`, `none`, `local` or `remote`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

/// One path exposed through the proxy without mTLS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ExposePath {
    /// Port the proxy listens on.
    #[serde(default)]
    pub listener_port: u16,
    /// The HTTP path.
    #[serde(default)]
    pub path: String,
    /// The local service port to forward to.
    #[serde(default)]
    pub local_path_port: u16,
    /// `http` or `http2`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// Set for paths generated from checks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub parsed_from_check: bool,
}

/// Expose settings of a proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ExposeConfig {
    /// Expose every HTTP and gRPC check.
    #[serde(default, skip_serializing_if = "is_false")]
    pub checks: bool,
    /// Explicit paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<ExposePath>,
}

/// Transparent proxy settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct TransparentProxyConfig {
    /// Port of the outbound listener (15001 by default when in transparent mode).
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub outbound_listener_port: u16,
    /// Whether instances may be dialed directly.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dialed_directly: bool,
}

/// One upstream of a proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Upstream {
    /// `service` (default) or `prepared_query`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination_type: String,
    /// Namespace of the destination.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination_namespace: String,
    /// Partition of the destination.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination_partition: String,
    /// Peer of the destination.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination_peer: String,
    /// Name of the destination service or query.
    #[serde(default)]
    pub destination_name: String,
    /// Datacenter of the destination.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub datacenter: String,
    /// Local address to bind (default 127.0.0.1).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub local_bind_address: String,
    /// Local port to bind.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub local_bind_port: u16,
    /// Unix socket to bind instead of a port.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub local_bind_socket_path: String,
    /// Mode of that socket.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub local_bind_socket_mode: String,
    /// Opaque proxy configuration for this upstream.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub config: Map<String, Value>,
    /// Mesh gateway mode for this upstream.
    #[serde(default)]
    pub mesh_gateway: MeshGatewayConfig,
    /// Set for upstreams that come from central config.
    #[serde(default, skip_serializing_if = "is_false")]
    pub centrally_configured: bool,
}

/// Whether a proxy has no upstreams (then the field is left out, as Consul
/// leaves it out).
fn no_upstreams(upstreams: &Arc<Vec<Upstream>>) -> bool {
    upstreams.is_empty()
}

/// Proxy settings of a `connect-proxy` service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ConnectProxyConfig {
    /// The service this proxy represents.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination_service_name: String,
    /// The instance this proxy represents.
    #[serde(
        rename = "DestinationServiceID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub destination_service_id: String,
    /// Address of the local application.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub local_service_address: String,
    /// Port of the local application.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub local_service_port: u16,
    /// Unix socket of the local application.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub local_service_socket_path: String,
    /// `""`, `direct` or `transparent`.
    #[serde(default)]
    pub mode: String,
    /// Transparent proxy settings.
    #[serde(default)]
    pub transparent_proxy: TransparentProxyConfig,
    /// Opaque proxy configuration.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub config: Map<String, Value>,
    /// Upstreams, shared by every copy of the registration the agent
    /// keeps (its own, the catalog sync's, the proxy manager's): a sidecar
    /// may have thousands.
    #[serde(default, skip_serializing_if = "no_upstreams")]
    pub upstreams: Arc<Vec<Upstream>>,
    /// Mesh gateway mode.
    #[serde(default)]
    pub mesh_gateway: MeshGatewayConfig,
    /// Expose settings.
    #[serde(default)]
    pub expose: ExposeConfig,
}

/// The `Connect` block of a service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceConnect {
    /// The service speaks Connect natively.
    #[serde(default, skip_serializing_if = "is_false")]
    pub native: bool,
    /// A sidecar to register beside the service (agent registration only;
    /// never stored in the catalog).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_service: Option<Box<ServiceDefinition>>,
}

impl ServiceConnect {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        !self.native && self.sidecar_service.is_none()
    }
}

/// A service instance as stored in the catalog on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct NodeService {
    /// `""` for typical services, else `connect-proxy`, `mesh-gateway`, ...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Instance id, unique on the node.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Service name.
    #[serde(default)]
    pub service: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Address (empty: the node's).
    #[serde(default)]
    pub address: String,
    /// Named alternative addresses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tagged_addresses: BTreeMap<String, ServiceAddress>,
    /// Service metadata.
    #[serde(default)]
    pub meta: Meta,
    /// Port.
    #[serde(default)]
    pub port: u16,
    /// Unix socket path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub socket_path: String,
    /// DNS weights.
    #[serde(default)]
    pub weights: Weights,
    /// Let the catalog's tags win over the agent's in anti-entropy.
    #[serde(default)]
    pub enable_tag_override: bool,
    /// Where the instance runs (left out when unset, as Consul does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<Locality>,
    /// Proxy settings (proxies only; boxed because most services have none
    /// and the struct is large).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Box<ConnectProxyConfig>>,
    /// Connect settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<ServiceConnect>,
    /// Raft bookkeeping.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

impl NodeService {
    /// True for `connect-proxy` services.
    pub fn is_sidecar_proxy(&self) -> bool {
        self.kind == "connect-proxy"
    }

    /// True when the instance can be reached through the mesh: a proxy for
    /// a service, or a Connect-native service.
    pub fn connect_target(&self) -> Option<&str> {
        if self.is_sidecar_proxy() {
            return self
                .proxy
                .as_ref()
                .map(|p| p.destination_service_name.as_str());
        }
        if self.connect.as_ref().map(|c| c.native).unwrap_or(false) {
            return Some(self.service.as_str());
        }
        None
    }

    /// The same instance with Raft bookkeeping cleared, for comparisons.
    pub fn without_index(&self) -> NodeService {
        let mut copy = self.clone();
        copy.raft = RaftIndex::default();
        copy
    }
}

/// Type-specific settings of a check, echoed by reads as `Definition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct HealthCheckDefinition {
    /// HTTP URL.
    #[serde(rename = "HTTP", default, skip_serializing_if = "String::is_empty")]
    pub http: String,
    /// TLS server name for HTTP/gRPC checks.
    #[serde(
        rename = "TLSServerName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub tls_server_name: String,
    /// Skip TLS verification.
    #[serde(rename = "TLSSkipVerify", default, skip_serializing_if = "is_false")]
    pub tls_skip_verify: bool,
    /// HTTP headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header: BTreeMap<String, Vec<String>>,
    /// HTTP method.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub method: String,
    /// HTTP body.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
    /// TCP address.
    #[serde(rename = "TCP", default, skip_serializing_if = "String::is_empty")]
    pub tcp: String,
    /// gRPC target.
    #[serde(rename = "GRPC", default, skip_serializing_if = "String::is_empty")]
    pub grpc: String,
    /// Use TLS for gRPC.
    #[serde(rename = "GRPCUseTLS", default, skip_serializing_if = "is_false")]
    pub grpc_use_tls: bool,
    /// Interval.
    #[serde(
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub interval: Option<Duration>,
    /// Timeout.
    #[serde(
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// Remove the service after this long critical.
    #[serde(
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub deregister_critical_service_after: Option<Duration>,
    /// Script arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub script_args: Vec<String>,
}

/// A health check row in the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct HealthCheck {
    /// Node the check belongs to.
    #[serde(default)]
    pub node: String,
    /// Check id, unique on the node.
    #[serde(rename = "CheckID", default)]
    pub check_id: String,
    /// Display name.
    #[serde(default)]
    pub name: String,
    /// Current status (an empty string reads as critical, as in Consul).
    #[serde(default, deserialize_with = "status_or_critical")]
    pub status: HealthStatus,
    /// Human notes.
    #[serde(default)]
    pub notes: String,
    /// Output of the last run.
    #[serde(default)]
    pub output: String,
    /// Service instance the check belongs to (empty: node check).
    #[serde(rename = "ServiceID", default)]
    pub service_id: String,
    /// Service name, filled by the catalog.
    #[serde(default)]
    pub service_name: String,
    /// Service tags, filled by the catalog.
    #[serde(default)]
    pub service_tags: Vec<String>,
    /// Check type (`ttl`, `http`, `tcp`, `grpc`, `alias`, `script`, ...).
    #[serde(default, rename = "Type")]
    pub check_type: String,
    /// Interval, as a Go duration string.
    #[serde(default)]
    pub interval: String,
    /// Timeout, as a Go duration string.
    #[serde(default)]
    pub timeout: String,
    /// Port exposed for this check through a proxy.
    #[serde(default)]
    pub exposed_port: u16,
    /// Type-specific settings.
    #[serde(default)]
    pub definition: HealthCheckDefinition,
    /// Raft bookkeeping.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

impl HealthCheck {
    /// The same check with Raft bookkeeping cleared, for comparisons.
    pub fn without_index(&self) -> HealthCheck {
        let mut copy = self.clone();
        copy.raft = RaftIndex::default();
        copy
    }
}

/// A check as a user defines it (agent registration and config files).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct CheckDefinition {
    /// Check id (defaults to the name, or `service:<id>` for service checks).
    #[serde(
        rename = "CheckID",
        alias = "ID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub check_id: String,
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Notes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Service instance this check belongs to.
    #[serde(
        rename = "ServiceID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub service_id: String,
    /// Initial status.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Script arguments.
    #[serde(default, alias = "Args", skip_serializing_if = "Vec::is_empty")]
    pub script_args: Vec<String>,
    /// HTTP URL.
    #[serde(rename = "HTTP", default, skip_serializing_if = "String::is_empty")]
    pub http: String,
    /// HTTP headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header: BTreeMap<String, Vec<String>>,
    /// HTTP method.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub method: String,
    /// HTTP body.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
    /// Skip TLS verification.
    #[serde(rename = "TLSSkipVerify", default, skip_serializing_if = "is_false")]
    pub tls_skip_verify: bool,
    /// TLS server name.
    #[serde(
        rename = "TLSServerName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub tls_server_name: String,
    /// TCP address.
    #[serde(rename = "TCP", default, skip_serializing_if = "String::is_empty")]
    pub tcp: String,
    /// UDP address.
    #[serde(rename = "UDP", default, skip_serializing_if = "String::is_empty")]
    pub udp: String,
    /// gRPC target.
    #[serde(rename = "GRPC", default, skip_serializing_if = "String::is_empty")]
    pub grpc: String,
    /// Use TLS for gRPC.
    #[serde(rename = "GRPCUseTLS", default, skip_serializing_if = "is_false")]
    pub grpc_use_tls: bool,
    /// H2 ping address.
    #[serde(rename = "H2PING", default, skip_serializing_if = "String::is_empty")]
    pub h2ping: String,
    /// Docker container (docker checks).
    #[serde(
        rename = "DockerContainerID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub docker_container_id: String,
    /// OS service (os_service checks).
    #[serde(
        rename = "OSService",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub os_service: String,
    /// Alias of a node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub alias_node: String,
    /// Alias of a service.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub alias_service: String,
    /// Interval.
    #[serde(
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub interval: Option<Duration>,
    /// Timeout.
    #[serde(
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// TTL.
    #[serde(
        rename = "TTL",
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub ttl: Option<Duration>,
    /// Remove the service after this long critical.
    #[serde(
        default,
        with = "crate::duration::opt_go",
        skip_serializing_if = "Option::is_none"
    )]
    pub deregister_critical_service_after: Option<Duration>,
    /// Consecutive successes needed to pass.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub success_before_passing: u32,
    /// Consecutive failures needed to warn.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub failures_before_warning: u32,
    /// Consecutive failures needed to turn critical.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub failures_before_critical: u32,
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

impl CheckDefinition {
    /// The check's type name as Consul reports it, or an error naming what
    /// is missing or contradictory.
    pub fn check_type(&self) -> Result<&'static str, String> {
        let mut kinds = Vec::new();
        if !self.script_args.is_empty() {
            kinds.push("script");
        }
        if !self.http.is_empty() {
            kinds.push("http");
        }
        if !self.tcp.is_empty() {
            kinds.push("tcp");
        }
        if !self.udp.is_empty() {
            kinds.push("udp");
        }
        if !self.grpc.is_empty() {
            kinds.push("grpc");
        }
        if !self.h2ping.is_empty() {
            kinds.push("h2ping");
        }
        if !self.docker_container_id.is_empty() {
            kinds.push("docker");
        }
        if !self.os_service.is_empty() {
            kinds.push("os_service");
        }
        if !self.alias_node.is_empty() || !self.alias_service.is_empty() {
            kinds.push("alias");
        }
        if self.ttl.is_some() {
            kinds.push("ttl");
        }
        match kinds.as_slice() {
            [] => Err("Invalid check: must define one of TTL, HTTP, TCP, UDP, GRPC, H2PING, Args (script), AliasService or AliasNode".to_string()),
            [one] => {
                let needs_interval = !matches!(*one, "ttl" | "alias");
                if needs_interval && self.interval.unwrap_or_default().is_zero() {
                    return Err(format!("Invalid check: {one} checks need an Interval"));
                }
                Ok(one)
            }
            many => Err(format!("Invalid check: only one check type may be set, got {}", many.join(", "))),
        }
    }
}

/// A service as a user defines it for the local agent (API or config file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceDefinition {
    /// Kind (`connect-proxy`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Instance id (defaults to the name).
    #[serde(rename = "ID", default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Service name.
    #[serde(default)]
    pub name: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// Tagged addresses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tagged_addresses: BTreeMap<String, ServiceAddress>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Meta::is_empty")]
    pub meta: Meta,
    /// Port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Unix socket path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub socket_path: String,
    /// Weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// Enable tag override.
    #[serde(default, skip_serializing_if = "is_false")]
    pub enable_tag_override: bool,
    /// One check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckDefinition>,
    /// Several checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckDefinition>,
    /// Proxy settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ConnectProxyConfig>,
    /// Connect settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<ServiceConnect>,
    /// Where the instance runs (unset: the agent's `locality`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<Locality>,
}

/// `PUT /v1/catalog/register`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct RegisterRequest {
    /// Node UUID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Node name.
    #[serde(default)]
    pub node: String,
    /// Node address.
    #[serde(default)]
    pub address: String,
    /// Datacenter.
    #[serde(default)]
    pub datacenter: String,
    /// Node tagged addresses.
    #[serde(default)]
    pub tagged_addresses: BTreeMap<String, String>,
    /// Node metadata.
    #[serde(default)]
    pub node_meta: Meta,
    /// Service to register on the node.
    #[serde(default)]
    pub service: Option<NodeService>,
    /// One check.
    #[serde(default)]
    pub check: Option<HealthCheck>,
    /// Several checks.
    #[serde(default)]
    pub checks: Vec<HealthCheck>,
    /// Leave the node row as it is.
    #[serde(default)]
    pub skip_node_update: bool,
    /// Where the node runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<Locality>,
}

impl RegisterRequest {
    /// A registration of `node`'s own row alone (no service or check).
    pub fn for_node(node: &Node) -> RegisterRequest {
        RegisterRequest {
            id: node.id.clone(),
            node: node.node.clone(),
            address: node.address.clone(),
            datacenter: node.datacenter.clone(),
            tagged_addresses: node.tagged_addresses.clone(),
            node_meta: node.meta.clone(),
            locality: node.locality.clone(),
            ..RegisterRequest::default()
        }
    }
}

/// `PUT /v1/catalog/deregister`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct DeregisterRequest {
    /// Node name.
    #[serde(default)]
    pub node: String,
    /// Service instance to remove (with its checks).
    #[serde(rename = "ServiceID", default)]
    pub service_id: String,
    /// Check to remove.
    #[serde(rename = "CheckID", default)]
    pub check_id: String,
    /// Datacenter.
    #[serde(default)]
    pub datacenter: String,
}

/// A row of `/v1/catalog/service/:service`: node fields flattened beside
/// `Service*` fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceNode {
    /// Node UUID.
    #[serde(rename = "ID")]
    pub id: String,
    /// Node name.
    pub node: String,
    /// Node address.
    pub address: String,
    /// Datacenter.
    pub datacenter: String,
    /// Node tagged addresses.
    pub tagged_addresses: BTreeMap<String, String>,
    /// Node metadata.
    pub node_meta: Meta,
    /// Service kind.
    pub service_kind: String,
    /// Service instance id.
    #[serde(rename = "ServiceID")]
    pub service_id: String,
    /// Service name.
    pub service_name: String,
    /// Tags.
    pub service_tags: Vec<String>,
    /// Address.
    pub service_address: String,
    /// Tagged addresses.
    pub service_tagged_addresses: BTreeMap<String, ServiceAddress>,
    /// Weights.
    pub service_weights: Weights,
    /// Metadata.
    pub service_meta: Meta,
    /// Port.
    pub service_port: u16,
    /// Socket path.
    pub service_socket_path: String,
    /// Tag override.
    pub service_enable_tag_override: bool,
    /// Proxy settings.
    pub service_proxy: ConnectProxyConfig,
    /// Connect settings.
    pub service_connect: ServiceConnect,
    /// Where the instance runs (`null` when unset: Consul always sends
    /// this field).
    pub service_locality: Option<Locality>,
    /// Raft bookkeeping of the service row.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

impl ServiceNode {
    /// Flattens a node and one of its services into a catalog row.
    pub fn from_parts(node: &Node, service: &NodeService) -> ServiceNode {
        ServiceNode::from_node_and(node, service.clone())
    }

    /// [`ServiceNode::from_parts`] taking the instance by value.
    pub fn from_node_and(node: &Node, service: NodeService) -> ServiceNode {
        ServiceNode {
            id: node.id.clone(),
            node: node.node.clone(),
            address: node.address.clone(),
            datacenter: node.datacenter.clone(),
            tagged_addresses: node.tagged_addresses.clone(),
            node_meta: node.meta.clone(),
            service_kind: service.kind,
            service_id: service.id,
            service_name: service.service,
            service_tags: service.tags,
            service_address: service.address,
            service_tagged_addresses: service.tagged_addresses,
            service_weights: service.weights,
            service_meta: service.meta,
            service_port: service.port,
            service_socket_path: service.socket_path,
            service_enable_tag_override: service.enable_tag_override,
            service_proxy: service.proxy.map(|p| *p).unwrap_or_default(),
            service_connect: service.connect.unwrap_or_default(),
            service_locality: service.locality,
            raft: service.raft,
        }
    }
}

fn status_or_critical<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HealthStatus, D::Error> {
    let text = Option::<String>::deserialize(d)?.unwrap_or_default();
    if text.is_empty() {
        return Ok(HealthStatus::Critical);
    }
    HealthStatus::parse(&text).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "invalid check status {text:?}: must be one of passing, warning, critical"
        ))
    })
}

/// A row of `/v1/health/service/:service`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct CheckServiceNode {
    /// The node.
    pub node: Node,
    /// The service instance.
    pub service: NodeService,
    /// Node checks and the instance's checks.
    pub checks: Vec<HealthCheck>,
}

impl CheckServiceNode {
    /// The aggregate status: the worst of all checks (passing with none).
    pub fn aggregate_status(&self) -> HealthStatus {
        aggregate_status(self.checks.iter())
    }

    /// The address and port to dial this instance at, as Consul's
    /// `BestAddress`: from another datacenter (`wan`), the service's `wan`
    /// tagged address, else its address, else the node's `wan` tagged
    /// address, else the node's address; from the same datacenter, the
    /// service's address, else the node's.
    pub fn best_address(&self, wan: bool) -> (String, u16) {
        let service = &self.service;
        if wan {
            if let Some(tagged) = service
                .tagged_addresses
                .get("wan")
                .filter(|t| !t.address.is_empty())
            {
                let port = if tagged.port == 0 {
                    service.port
                } else {
                    tagged.port
                };
                return (tagged.address.clone(), port);
            }
        }
        if !service.address.is_empty() {
            return (service.address.clone(), service.port);
        }
        let node = wan
            .then(|| self.node.tagged_addresses.get("wan"))
            .flatten()
            .filter(|a| !a.is_empty())
            .unwrap_or(&self.node.address);
        (node.clone(), service.port)
    }
}

/// The worst status of the given checks; passing when there are none.
pub fn aggregate_status<'a>(checks: impl Iterator<Item = &'a HealthCheck>) -> HealthStatus {
    worst_status(checks.map(|check| check.status))
}

/// The worst of the given check statuses (maintenance counts as critical);
/// passing when there are none.
pub fn worst_status(statuses: impl Iterator<Item = HealthStatus>) -> HealthStatus {
    let mut worst = HealthStatus::Passing;
    for status in statuses {
        let status = match status {
            HealthStatus::Maintenance => HealthStatus::Critical,
            other => other,
        };
        if status.severity() > worst.severity() {
            worst = status;
        }
    }
    worst
}

/// `/v1/catalog/node/:node`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct NodeServices {
    /// The node.
    pub node: Node,
    /// Its services by id.
    pub services: BTreeMap<String, NodeService>,
}

/// `/v1/catalog/node-services/:node`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct NodeServiceList {
    /// The node.
    pub node: Node,
    /// Its services.
    pub services: Vec<NodeService>,
}
