//! The RPC boundary: HTTP handlers and the agent reach servers only through
//! [`ServerRpc`]. In `-dev` an in-process server implements it; a network
//! client (forwarding to the leader or another datacenter) implements the
//! same trait, so handlers never change.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::config_entry::ConfigEntry;
use crate::connect::{CaConfiguration, CaSignRequest, IndexedCaRoots, IssuedCert};
use crate::intention::{Intention, IntentionCheck, IntentionLookup, IntentionOp, MatchBy};
use crate::{
    CheckServiceNode, DeregisterRequest, HealthCheck, HealthStatus, KvEntry, KvOp, Node,
    NodeServices, Queried, QueryOptions, RegisterRequest, RpcError, ServiceNode, Session,
    WriteOptions,
};

/// What one entry of a batched watch ([`ServerRpc::changes_since`])
/// follows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Watched {
    /// One service's instances, checks and nodes (what a health read of
    /// the service depends on).
    Service(String),
    /// The config entries (what every compiled discovery chain depends on).
    ConfigEntries,
    /// The ACL tables (tokens, policies, roles): what an agent's resolved
    /// tokens depend on.
    Acl,
}

/// How a server's answer to a call it cannot decode begins (a 400): an
/// older server asked for a call it does not know answers this, so a
/// client can fall back to older calls.
pub const UNDECODABLE_CALL: &str = "undecodable RPC call";

/// How many entries one batched watch may follow.
pub const MAX_WATCHED: usize = 100_000;

/// Selects service instances for catalog and health reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct ServiceQuery {
    /// Service name.
    pub service: String,
    /// Every one of these tags must be present.
    pub tags: Vec<String>,
    /// Only instances whose checks all pass (health reads only).
    pub passing_only: bool,
    /// Select mesh-capable instances for the service (proxies and native).
    pub connect: bool,
}

/// Overrides of a discovery-chain compile (`POST /v1/discovery-chain/:s`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct ChainOverrides {
    /// `OverrideProtocol`.
    pub protocol: String,
    /// `OverrideConnectTimeout`.
    pub connect_timeout: Option<std::time::Duration>,
    /// `OverrideMeshGateway.Mode`.
    pub mesh_gateway_mode: String,
}

pub use crate::txn::{TxnError, TxnOp, TxnResponse, TxnResult};

/// One server of `/v1/operator/raft/configuration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RaftServer {
    /// Node id.
    #[serde(rename = "ID")]
    pub id: String,
    /// Node name.
    pub node: String,
    /// Server-port address.
    pub address: String,
    /// Whether it leads.
    pub leader: bool,
    /// Raft protocol version (`3`).
    pub protocol_version: String,
    /// Whether it votes.
    pub voter: bool,
    /// The last log index (as this server knows it).
    pub last_index: u64,
}

/// `/v1/operator/raft/configuration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct RaftConfiguration {
    /// The servers.
    pub servers: Vec<RaftServer>,
    /// The last log index.
    pub index: u64,
}

/// A snapshot archive as `GET /v1/snapshot` returns it (a gzipped tar of
/// `meta.json`, `state.bin` and `SHA256SUMS`); base64 in JSON, raw bytes
/// in the binary encoding.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SnapshotArchive(#[serde(with = "crate::binary::bytes_value")] pub Vec<u8>);

impl SnapshotArchive {
    /// The largest archive a restore takes (it is held in memory, on
    /// every server while it is staged).
    pub const MAX_RESTORE_BYTES: usize = 2 << 30;
    /// The largest piece of an archive one Raft entry carries; a larger
    /// archive is logged in pieces of this size.
    pub const PIECE_BYTES: usize = 4 << 20;
}

impl std::fmt::Debug for SnapshotArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SnapshotArchive({} bytes)", self.0.len())
    }
}

/// Autopilot's settings (Consul's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutopilotConfig {
    /// Remove failed servers from Raft.
    pub cleanup_dead_servers: bool,
    /// How long a follower may go without contact and still be healthy.
    pub last_contact_threshold: std::time::Duration,
    /// How many entries a follower may trail by and still be healthy.
    pub max_trailing_logs: u64,
    /// Never shrink the voters below this many through cleanup.
    pub min_quorum: usize,
    /// How long a new server must be healthy before it votes.
    pub server_stabilization_time: std::time::Duration,
}

impl Default for AutopilotConfig {
    fn default() -> AutopilotConfig {
        AutopilotConfig {
            cleanup_dead_servers: true,
            last_contact_threshold: std::time::Duration::from_millis(200),
            max_trailing_logs: 250,
            min_quorum: 0,
            server_stabilization_time: std::time::Duration::from_secs(10),
        }
    }
}

/// `/v1/operator/autopilot/configuration`, in Consul's shape (a field a
/// `PUT` leaves out is its zero value, as in Consul).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
pub struct AutopilotConfiguration {
    /// Remove failed servers.
    pub cleanup_dead_servers: bool,
    /// A Go duration (`200ms`).
    pub last_contact_threshold: String,
    /// Entries a server may trail by.
    pub max_trailing_logs: u64,
    /// Voters cleanup never goes below.
    pub min_quorum: usize,
    /// A Go duration (`10s`).
    pub server_stabilization_time: String,
    /// Enterprise; always empty.
    pub redundancy_zone_tag: String,
    /// Enterprise; always false.
    pub disable_upgrade_migration: bool,
    /// Enterprise; always empty.
    pub upgrade_version_tag: String,
    /// Raft index of the configuration (0: from the agent config).
    pub create_index: u64,
    /// Raft index of its last change (0: from the agent config).
    pub modify_index: u64,
}

impl AutopilotConfiguration {
    /// The settings autopilot runs with; an unparseable duration is an
    /// error naming its field.
    pub fn to_config(&self) -> Result<AutopilotConfig, String> {
        let duration = |field: &str, text: &str| {
            if text.is_empty() {
                return Ok(std::time::Duration::ZERO);
            }
            crate::duration::parse_go_duration(text).map_err(|e| format!("{field}: {e}"))
        };
        Ok(AutopilotConfig {
            cleanup_dead_servers: self.cleanup_dead_servers,
            last_contact_threshold: duration("LastContactThreshold", &self.last_contact_threshold)?,
            max_trailing_logs: self.max_trailing_logs,
            min_quorum: self.min_quorum,
            server_stabilization_time: duration(
                "ServerStabilizationTime",
                &self.server_stabilization_time,
            )?,
        })
    }
}

impl From<&AutopilotConfig> for AutopilotConfiguration {
    fn from(c: &AutopilotConfig) -> AutopilotConfiguration {
        AutopilotConfiguration {
            cleanup_dead_servers: c.cleanup_dead_servers,
            last_contact_threshold: crate::duration::format_go_duration(c.last_contact_threshold),
            max_trailing_logs: c.max_trailing_logs,
            min_quorum: c.min_quorum,
            server_stabilization_time: crate::duration::format_go_duration(
                c.server_stabilization_time,
            ),
            redundancy_zone_tag: String::new(),
            disable_upgrade_migration: false,
            upgrade_version_tag: String::new(),
            create_index: 0,
            modify_index: 0,
        }
    }
}

/// One server in `/v1/operator/autopilot/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AutopilotServerHealth {
    /// Node id.
    #[serde(rename = "ID")]
    pub id: String,
    /// Node name.
    pub name: String,
    /// Server-port address.
    pub address: String,
    /// `alive`, `failed`, `left` or `none` (unknown to gossip).
    pub serf_status: String,
    /// Build version.
    pub version: String,
    /// Whether it leads.
    pub leader: bool,
    /// Time since the leader last heard from it (`0s` for the leader,
    /// `-` when not measured).
    pub last_contact: String,
    /// The leader's current term.
    pub last_term: u64,
    /// The last log index it is known to hold.
    pub last_index: u64,
    /// Caught up (within `MaxTrailingLogs`) and alive in gossip.
    pub healthy: bool,
    /// Whether it votes.
    pub voter: bool,
    /// Since when it has been healthy (RFC 3339; empty when it is not).
    pub stable_since: String,
}

/// `/v1/operator/autopilot/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AutopilotHealth {
    /// Every server is healthy.
    pub healthy: bool,
    /// How many voters could fail without losing quorum.
    pub failure_tolerance: usize,
    /// Each server.
    pub servers: Vec<AutopilotServerHealth>,
}

/// One datacenter's catalog usage (`/v1/operator/usage`), as Consul CE
/// counts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceUsage {
    /// Distinct service names.
    pub services: u64,
    /// Service instances of every kind.
    pub service_instances: u64,
    /// Mesh instances by kind: `connect-native`, `connect-proxy`,
    /// `ingress-gateway`, `mesh-gateway`, `terminating-gateway`.
    pub connect_service_instances: std::collections::BTreeMap<String, u64>,
    /// Instances that are neither proxies nor gateways nor the servers'
    /// own `consul` service.
    pub billable_service_instances: u64,
}

/// Server endpoints. Every call carries the request's datacenter, token and
/// (for reads) consistency and blocking options.
#[async_trait]
pub trait ServerRpc: Send + Sync + 'static {
    /// The leader's RPC address (`""` when none is known).
    async fn status_leader(&self) -> Result<String, RpcError>;
    /// The Raft peers' RPC addresses.
    async fn status_peers(&self) -> Result<Vec<String>, RpcError>;
    /// The Raft configuration (`/v1/operator/raft/configuration`).
    async fn raft_configuration(&self, opts: &QueryOptions) -> Result<RaftConfiguration, RpcError>;
    /// Removes a server from Raft by its node id or server-port address
    /// (`operator raft remove-peer`).
    async fn raft_remove_peer(
        &self,
        opts: &WriteOptions,
        id_or_address: String,
    ) -> Result<(), RpcError>;

    /// Hands Raft leadership to the voter `id` names (its node ID or
    /// server-port address; empty: the most caught-up other voter), as
    /// `POST /v1/operator/raft/transfer-leader` (`operator:write`).
    /// Returns once another server leads.
    async fn raft_transfer_leader(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError>;
    /// `GET /v1/operator/autopilot/health`: the leader's view of every
    /// server.
    async fn autopilot_health(&self, opts: &QueryOptions) -> Result<AutopilotHealth, RpcError>;
    /// `GET /v1/operator/usage`: this datacenter's catalog usage
    /// (`operator:read`; blocking on the catalog).
    async fn operator_usage(&self, opts: &QueryOptions) -> Result<Queried<ServiceUsage>, RpcError>;
    /// `GET /v1/operator/autopilot/configuration`: the settings the
    /// leader runs autopilot with.
    async fn autopilot_config(
        &self,
        opts: &QueryOptions,
    ) -> Result<AutopilotConfiguration, RpcError>;
    /// `PUT /v1/operator/autopilot/configuration`: replaces the settings
    /// (`operator:write`); with `cas`, only if the stored configuration's
    /// modify index is `cas` (0: none stored yet). Whether it was written.
    async fn autopilot_set_config(
        &self,
        opts: &WriteOptions,
        config: AutopilotConfiguration,
        cas: Option<u64>,
    ) -> Result<bool, RpcError>;
    /// `GET /v1/snapshot`: the whole state as an archive, with the index
    /// it was taken at.
    async fn snapshot_save(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<SnapshotArchive>, RpcError>;
    /// `PUT /v1/snapshot`: replaces the whole state with an archive's.
    async fn snapshot_restore(
        &self,
        opts: &WriteOptions,
        archive: SnapshotArchive,
    ) -> Result<(), RpcError>;
    /// Registers a node, and optionally a service and checks on it.
    async fn catalog_register(
        &self,
        opts: &WriteOptions,
        req: RegisterRequest,
    ) -> Result<u64, RpcError>;
    /// Removes a node, a service or a check.
    async fn catalog_deregister(
        &self,
        opts: &WriteOptions,
        req: DeregisterRequest,
    ) -> Result<u64, RpcError>;
    /// Known datacenters, nearest first (by the median estimated round
    /// trip to their servers; by name where no coordinate is known).
    async fn catalog_datacenters(&self) -> Result<Vec<String>, RpcError>;
    /// Spreads a user event to every agent of the datacenter by gossip
    /// (`/v1/event/fire`; any server may, so reads' stale option applies).
    async fn event_fire(
        &self,
        opts: &QueryOptions,
        event: crate::event::UserEvent,
    ) -> Result<(), RpcError>;
    /// The WAN coordinates of every datacenter's servers
    /// (`/v1/coordinate/datacenters`).
    async fn coordinate_datacenters(
        &self,
    ) -> Result<Vec<crate::coordinate::DatacenterCoordinates>, RpcError>;
    /// Every node's LAN coordinate (`/v1/coordinate/nodes`).
    async fn coordinate_nodes(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<crate::coordinate::CoordinateEntry>>, RpcError>;
    /// One node's LAN coordinate (`/v1/coordinate/node/:node`; empty when
    /// it has none).
    async fn coordinate_node(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<crate::coordinate::CoordinateEntry>>, RpcError>;
    /// Queues a node's coordinate for the leader's next batch
    /// (`PUT /v1/coordinate/update`).
    async fn coordinate_update(
        &self,
        opts: &WriteOptions,
        entry: crate::coordinate::CoordinateEntry,
    ) -> Result<(), RpcError>;
    /// All nodes.
    async fn catalog_nodes(&self, opts: &QueryOptions) -> Result<Queried<Vec<Node>>, RpcError>;
    /// Service names with the union of their tags.
    async fn catalog_services(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<BTreeMap<String, Vec<String>>>, RpcError>;
    /// Instances of one service.
    async fn catalog_service_nodes(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<Queried<Vec<ServiceNode>>, RpcError>;
    /// One node with its services.
    async fn catalog_node_services(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Option<NodeServices>>, RpcError>;

    /// Checks of one node.
    async fn health_node_checks(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError>;
    /// Checks of one service.
    async fn health_service_checks(
        &self,
        opts: &QueryOptions,
        service: String,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError>;
    /// Checks in one state (`None`: any).
    async fn health_checks_in_state(
        &self,
        opts: &QueryOptions,
        state: Option<HealthStatus>,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError>;
    /// Instances of one service with their node and checks.
    async fn health_service_nodes(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError>;

    /// One key.
    async fn kv_get(
        &self,
        opts: &QueryOptions,
        key: String,
    ) -> Result<Queried<Option<KvEntry>>, RpcError>;
    /// Every key under a prefix.
    async fn kv_list(
        &self,
        opts: &QueryOptions,
        prefix: String,
    ) -> Result<Queried<Vec<KvEntry>>, RpcError>;
    /// Key names under a prefix, folded at `separator` when it is not empty.
    async fn kv_keys(
        &self,
        opts: &QueryOptions,
        prefix: String,
        separator: String,
    ) -> Result<Queried<Vec<String>>, RpcError>;
    /// Applies one KV write; `false` when a CAS or lock condition failed.
    async fn kv_apply(&self, opts: &WriteOptions, op: KvOp) -> Result<bool, RpcError>;
    /// Applies KV operations atomically.
    async fn txn(&self, opts: &WriteOptions, ops: Vec<TxnOp>) -> Result<TxnResponse, RpcError>;

    /// Creates a session and returns its id.
    async fn session_create(
        &self,
        opts: &WriteOptions,
        session: Session,
    ) -> Result<String, RpcError>;
    /// Destroys a session, releasing or deleting its locks.
    async fn session_destroy(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError>;
    /// Renews a session's TTL; `None` when it does not exist.
    async fn session_renew(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<Option<Session>, RpcError>;
    /// One session (an empty list when unknown, as Consul).
    async fn session_info(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Vec<Session>>, RpcError>;
    /// All sessions.
    async fn session_list(&self, opts: &QueryOptions) -> Result<Queried<Vec<Session>>, RpcError>;
    /// Sessions of one node.
    async fn session_node(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<Session>>, RpcError>;

    /// Validates and writes a config entry; `false` when `cas` did not match.
    async fn config_apply(
        &self,
        opts: &WriteOptions,
        entry: ConfigEntry,
        cas: Option<u64>,
    ) -> Result<bool, RpcError>;
    /// One config entry.
    async fn config_get(
        &self,
        opts: &QueryOptions,
        kind: String,
        name: String,
    ) -> Result<Queried<Option<ConfigEntry>>, RpcError>;
    /// Every config entry of one kind.
    async fn config_list(
        &self,
        opts: &QueryOptions,
        kind: String,
    ) -> Result<Queried<Vec<ConfigEntry>>, RpcError>;
    /// Every config entry of the kinds the caller understands (all when
    /// empty); replication asks with its own list, so an older server never
    /// receives a kind it cannot decode.
    async fn config_list_all(
        &self,
        opts: &QueryOptions,
        kinds: Vec<String>,
    ) -> Result<Queried<Vec<ConfigEntry>>, RpcError>;
    /// The compiled discovery chain of a service, as Consul's JSON, blocking
    /// on config entries.
    async fn discovery_chain(
        &self,
        opts: &QueryOptions,
        service: String,
        compile_datacenter: String,
        overrides: ChainOverrides,
    ) -> Result<Queried<serde_json::Value>, RpcError>;
    /// Which of `watched` changed after the index beside each: the
    /// positions of those that did, with the index the answer is current
    /// at (every change up to it is seen). With `min_index` > 0 it blocks
    /// until one changed or the wait ran out; one call follows as many
    /// services as a proxy's upstreams, where a blocking read per service
    /// would hold a request (and its server-side wait) each.
    async fn changes_since(
        &self,
        opts: &QueryOptions,
        watched: Vec<(Watched, u64)>,
    ) -> Result<Queried<Vec<u32>>, RpcError>;
    /// Deletes a config entry; `false` when `cas` did not match.
    async fn config_delete(
        &self,
        opts: &WriteOptions,
        kind: String,
        name: String,
        cas: Option<u64>,
    ) -> Result<bool, RpcError>;

    /// The Connect CA roots (blocking).
    async fn ca_roots(&self, opts: &QueryOptions) -> Result<Queried<IndexedCaRoots>, RpcError>;
    /// The CA configuration, without private keys (blocking).
    async fn ca_config_get(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<CaConfiguration>, RpcError>;
    /// Replaces the CA configuration, rotating the root when the key
    /// material changes.
    async fn ca_config_set(
        &self,
        opts: &WriteOptions,
        config: CaConfiguration,
    ) -> Result<(), RpcError>;
    /// Signs a CSR (`ConnectCA.Sign`); [`RpcError::RateLimited`] when over
    /// the CSR limits.
    async fn ca_sign(
        &self,
        opts: &WriteOptions,
        request: CaSignRequest,
    ) -> Result<IssuedCert, RpcError>;

    /// Signs a secondary datacenter's intermediate CA
    /// (`ConnectCA.SignIntermediate`; the primary's, operator write): a
    /// CSR in PEM, answered with the certificate in PEM.
    async fn ca_sign_intermediate(
        &self,
        opts: &WriteOptions,
        csr: String,
    ) -> Result<String, RpcError>;

    /// Writes a federation state (`FederationState.Apply`; the primary's).
    async fn federation_state_apply(
        &self,
        opts: &WriteOptions,
        op: crate::federation_state::FederationStateOp,
    ) -> Result<(), RpcError>;
    /// The federation state of one datacenter (blocking).
    async fn federation_state_get(
        &self,
        opts: &QueryOptions,
        datacenter: String,
    ) -> Result<Queried<Option<crate::federation_state::FederationState>>, RpcError>;
    /// Every federation state, by datacenter name (blocking).
    async fn federation_state_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<crate::federation_state::FederationState>>, RpcError>;
    /// The mesh gateways of every datacenter that has one (blocking).
    async fn federation_state_mesh_gateways(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<std::collections::BTreeMap<String, Vec<crate::CheckServiceNode>>>, RpcError>;

    /// Creates, replaces or deletes a prepared query
    /// (`PreparedQuery.Apply`): the query's ID.
    async fn prepared_query_apply(
        &self,
        opts: &WriteOptions,
        op: crate::prepared_query::PreparedQueryOp,
        query: crate::prepared_query::PreparedQuery,
    ) -> Result<String, RpcError>;
    /// One prepared query by ID, as a list of one (blocking).
    async fn prepared_query_get(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Vec<crate::prepared_query::PreparedQuery>>, RpcError>;
    /// Every prepared query the token may read (blocking).
    async fn prepared_query_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<crate::prepared_query::PreparedQuery>>, RpcError>;
    /// Runs a prepared query by ID or name, failing over to other
    /// datacenters (`PreparedQuery.Execute`).
    async fn prepared_query_execute(
        &self,
        opts: &QueryOptions,
        request: crate::prepared_query::ExecuteRequest,
    ) -> Result<Queried<crate::prepared_query::ExecuteResponse>, RpcError>;
    /// Runs another datacenter's query here, without failover
    /// (`PreparedQuery.ExecuteRemote`).
    async fn prepared_query_execute_remote(
        &self,
        opts: &QueryOptions,
        request: crate::prepared_query::ExecuteRemoteRequest,
    ) -> Result<Queried<crate::prepared_query::ExecuteResponse>, RpcError>;
    /// The rendered query a name or ID resolves to (`PreparedQuery.Explain`).
    async fn prepared_query_explain(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
    ) -> Result<Queried<crate::prepared_query::ExplainResponse>, RpcError>;

    /// Bootstraps the ACL system (`ACL.BootstrapTokens`; the primary's):
    /// the first management token.
    async fn acl_bootstrap(&self, opts: &WriteOptions) -> Result<crate::acl::AclToken, RpcError>;
    /// Creates (`create`) or updates a token (`ACL.TokenSet`).
    async fn acl_token_set(
        &self,
        opts: &WriteOptions,
        token: crate::acl::AclToken,
        create: bool,
    ) -> Result<crate::acl::AclToken, RpcError>;
    /// A token by AccessorID (blocking; the secret redacted without `acl:write`).
    async fn acl_token_get(
        &self,
        opts: &QueryOptions,
        accessor_id: String,
    ) -> Result<Queried<Option<crate::acl::AclToken>>, RpcError>;
    /// The token whose secret the request carries.
    async fn acl_token_self(&self, opts: &QueryOptions) -> Result<crate::acl::AclToken, RpcError>;
    /// Tokens, by AccessorID (blocking).
    async fn acl_token_list(
        &self,
        opts: &QueryOptions,
        filter: crate::acl::AclTokenFilter,
    ) -> Result<Queried<Vec<crate::acl::AclToken>>, RpcError>;
    /// Deletes a token.
    async fn acl_token_delete(
        &self,
        opts: &WriteOptions,
        accessor_id: String,
    ) -> Result<(), RpcError>;
    /// Copies a token under new IDs (`description` empty: the original's).
    async fn acl_token_clone(
        &self,
        opts: &WriteOptions,
        accessor_id: String,
        description: String,
    ) -> Result<crate::acl::AclToken, RpcError>;
    /// Creates (`create`) or updates a policy (`ACL.PolicySet`; the primary's).
    async fn acl_policy_set(
        &self,
        opts: &WriteOptions,
        policy: crate::acl::AclPolicy,
        create: bool,
    ) -> Result<crate::acl::AclPolicy, RpcError>;
    /// A policy by ID, or by name with `by_name` (blocking).
    async fn acl_policy_get(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
        by_name: bool,
    ) -> Result<Queried<Option<crate::acl::AclPolicy>>, RpcError>;
    /// Every policy (blocking).
    async fn acl_policy_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<crate::acl::AclPolicy>>, RpcError>;
    /// Deletes a policy.
    async fn acl_policy_delete(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError>;
    /// Creates (`create`) or updates a role (`ACL.RoleSet`; the primary's).
    async fn acl_role_set(
        &self,
        opts: &WriteOptions,
        role: crate::acl::AclRole,
        create: bool,
    ) -> Result<crate::acl::AclRole, RpcError>;
    /// A role by ID, or by name with `by_name` (blocking).
    async fn acl_role_get(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
        by_name: bool,
    ) -> Result<Queried<Option<crate::acl::AclRole>>, RpcError>;
    /// Roles, only those linking `policy` when it is set (blocking).
    async fn acl_role_list(
        &self,
        opts: &QueryOptions,
        policy: String,
    ) -> Result<Queried<Vec<crate::acl::AclRole>>, RpcError>;
    /// Deletes a role.
    async fn acl_role_delete(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError>;
    /// Creates or updates an auth method (`ACL.AuthMethodSet`).
    async fn acl_auth_method_set(
        &self,
        opts: &WriteOptions,
        method: crate::acl_auth::AclAuthMethod,
    ) -> Result<crate::acl_auth::AclAuthMethod, RpcError>;
    /// An auth method by name (blocking).
    async fn acl_auth_method_get(
        &self,
        opts: &QueryOptions,
        name: String,
    ) -> Result<Queried<Option<crate::acl_auth::AclAuthMethod>>, RpcError>;
    /// Every auth method (blocking).
    async fn acl_auth_method_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<crate::acl_auth::AclAuthMethod>>, RpcError>;
    /// Deletes an auth method with its binding rules and tokens.
    async fn acl_auth_method_delete(
        &self,
        opts: &WriteOptions,
        name: String,
    ) -> Result<(), RpcError>;
    /// Creates or updates a binding rule (`ACL.BindingRuleSet`).
    async fn acl_binding_rule_set(
        &self,
        opts: &WriteOptions,
        rule: crate::acl_auth::AclBindingRule,
    ) -> Result<crate::acl_auth::AclBindingRule, RpcError>;
    /// A binding rule by ID (blocking).
    async fn acl_binding_rule_get(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Option<crate::acl_auth::AclBindingRule>>, RpcError>;
    /// Every binding rule, or an auth method's (blocking).
    async fn acl_binding_rule_list(
        &self,
        opts: &QueryOptions,
        auth_method: String,
    ) -> Result<Queried<Vec<crate::acl_auth::AclBindingRule>>, RpcError>;
    /// Deletes a binding rule.
    async fn acl_binding_rule_delete(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<(), RpcError>;
    /// Exchanges a bearer token for an ACL token (`ACL.Login`).
    async fn acl_login(
        &self,
        opts: &WriteOptions,
        request: crate::acl_auth::LoginRequest,
    ) -> Result<crate::acl::AclToken, RpcError>;
    /// Deletes the request's token, which login made (`ACL.Logout`).
    async fn acl_logout(&self, opts: &WriteOptions) -> Result<(), RpcError>;
    /// The request's token resolved for an agent: its AccessorID and the
    /// rules of every policy it carries here (identities' included).
    async fn acl_resolve(&self, opts: &QueryOptions) -> Result<crate::acl::AclIdentity, RpcError>;
    /// The request's token resolved in the primary for a server of
    /// `datacenter` that does not hold it (Consul's remote token
    /// resolution): the rules that apply there, and whether it is local.
    async fn acl_resolve_for(
        &self,
        opts: &QueryOptions,
        datacenter: String,
    ) -> Result<crate::acl::AclIdentity, RpcError>;
    /// What the leader's ACL replication is doing (`ACL.ReplicationStatus`;
    /// no permission needed).
    async fn acl_replication_status(
        &self,
        opts: &QueryOptions,
    ) -> Result<crate::acl::AclReplicationStatus, RpcError>;
    /// Every instance of the services of `kind` (`mesh-gateway`, ...) with
    /// its node and checks (Consul's `Internal.ServiceDump` by kind;
    /// blocking), those the token may read (service and node).
    async fn catalog_service_dump(
        &self,
        opts: &QueryOptions,
        kind: String,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError>;
    /// Every instance of every kind with its node and checks (Consul's
    /// `Internal.ServiceDump`; blocking), those the token may read.
    async fn catalog_service_dump_all(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError>;
    /// Every node (or the one named) with its services and checks
    /// (Consul's `Internal.NodeDump`; blocking): nodes the token may read,
    /// with the services and service checks it may read.
    async fn catalog_node_dump(
        &self,
        opts: &QueryOptions,
        node: Option<String>,
    ) -> Result<Queried<Vec<crate::ui::NodeInfo>>, RpcError>;
    /// A service's upstreams and downstreams with what intentions decide
    /// for each edge (Consul's `Internal.ServiceTopology`; blocking):
    /// `service:read` on the service, instances filtered by the token.
    async fn catalog_service_topology(
        &self,
        opts: &QueryOptions,
        service: String,
        kind: String,
    ) -> Result<Queried<crate::ui::ServiceTopology>, RpcError>;
    /// The catalog's health overview (`operator:read`).
    async fn catalog_overview(
        &self,
        opts: &QueryOptions,
    ) -> Result<crate::ui::CatalogSummary, RpcError>;
    /// Answers what the request's token may do (`/v1/internal/acl/authorize`).
    async fn acl_authorize(
        &self,
        opts: &QueryOptions,
        checks: Vec<crate::acl::AclAuthorizationCheck>,
    ) -> Result<Vec<crate::acl::AclAuthorizationCheck>, RpcError>;

    /// Writes through the intentions API (legacy or by name); returns the
    /// legacy id for creates and updates.
    async fn intention_apply(
        &self,
        opts: &WriteOptions,
        op: IntentionOp,
    ) -> Result<String, RpcError>;
    /// Every intention, in Consul's order.
    async fn intention_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<Intention>>, RpcError>;
    /// One intention by legacy id or by names.
    async fn intention_get(
        &self,
        opts: &QueryOptions,
        lookup: IntentionLookup,
    ) -> Result<Queried<Option<Intention>>, RpcError>;
    /// For each name, the intentions covering it on one side, in evaluation order.
    async fn intention_match(
        &self,
        opts: &QueryOptions,
        by: MatchBy,
        names: Vec<String>,
    ) -> Result<Queried<Vec<(String, Vec<Intention>)>>, RpcError>;
    /// Whether `source` may connect to `destination` (L4).
    async fn intention_check(
        &self,
        opts: &QueryOptions,
        source: String,
        destination: String,
    ) -> Result<Queried<IntentionCheck>, RpcError>;
}
