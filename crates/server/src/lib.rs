//! A Legate server: the typed endpoints behind [`ServerRpc`], blocking
//! queries over the state store, and the leader's loops (session TTLs,
//! member reconciliation).
//!
//! Depends on types, state, raft and filter; never on the agent or HTTP.
//! The binary wires an agent to a server.

mod acl;
mod acl_auth_methods;
mod acl_endpoints;
mod acl_login;
mod acl_remote;
mod acl_replication;
mod acl_templated;
mod authorizer;
pub mod autopilot;
mod blocking;
mod ca;
mod ca_secondary;
mod catalog_access;
mod catalog_endpoints;
pub mod cluster;
mod config_access;
mod config_endpoints;
mod config_replication;
pub mod coordinates;
mod endpoints;
pub mod features;
mod federation_states;
mod intentions;
mod leader;
mod leadership;
mod prepared_queries;
mod raft_endpoints;
mod replication;
mod session_endpoints;
mod sessions;
mod snapshot;
mod topology;
mod txn;
mod ui_endpoints;
mod usage_metrics;
mod wan;

use std::sync::Arc;
use std::time::Duration;

use legate_raft::{RaftError, RaftNode, RaftOptions};
use legate_state::{Command, CommandResult, StateStore};
use legate_types::RpcError;

pub use acl::{permission_denied, AclSettings, ResolvedToken};
pub use acl_login::{DEFAULT_LOGIN_TTL, LIVE_TOKENS_PER_IDENTITY};
pub use authorizer::{Access, Resource};
pub use ca::{prune_roots, CaSignCounts};
pub use intentions::{
    intentions_of, sort_intentions, INTENTIONS_READ_ONLY, INTENTION_FORMAT_CONFIG_ENTRY,
    INTENTION_FORMAT_KEY,
};
pub use leader::{ClusterMember, MemberState, CLUSTER_ID_KEY, CONSUL_SERVICE, SERF_CHECK_ID};
use sessions::SessionTimers;

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The datacenter this server belongs to.
    pub datacenter: String,
    /// This server's node name.
    pub node_name: String,
    /// This server's node id (UUID).
    pub node_id: String,
    /// The address other agents reach this node at.
    pub advertise_address: String,
    /// The address other datacenters reach this node at
    /// (`advertise_addr_wan`; `None`: the LAN one).
    pub advertise_address_wan: Option<String>,
    /// The server RPC port (reported as the leader address).
    pub server_port: u16,
    /// Raft storage and bootstrap settings.
    pub raft: RaftOptions,
    /// How long KV tombstones are kept before the leader reaps them
    /// (Consul's 15 minutes by default).
    pub tombstone_ttl: Duration,
    /// Config entries the leader writes when it takes office, unless an
    /// entry of that kind and name already exists (`config_entries.bootstrap`).
    pub config_entries_bootstrap: Vec<legate_types::config_entry::ConfigEntry>,
    /// The CA provider and settings used when the CA is first initialised
    /// (`connect { ca_provider, ca_config }`); later changes go through
    /// `/v1/connect/ca/configuration`.
    pub connect_ca: legate_types::connect::CaConfiguration,
    /// What intentions decide when none matches: allow unless ACLs are
    /// enabled with a `deny` default policy.
    pub default_intention_allow: bool,
    /// Features this server claims not to support (to rehearse a
    /// mixed-version cluster); empty in production.
    pub masked_features: Vec<String>,
    /// Autopilot's settings (`autopilot {}` in the agent config).
    pub autopilot: legate_types::rpc::AutopilotConfig,
    /// How long a catalog node gossip does not know is kept before the
    /// leader removes it (15 minutes).
    pub reap_settle: Duration,
    /// The shortest session TTL accepted (`session_ttl_min`, 10s).
    pub session_ttl_min: Duration,
    /// The longest a blocking query waits here (`max_query_time`, 10m).
    pub max_query_time: Duration,
    /// The WAN pool's view of every datacenter's servers (published by
    /// the binary from WAN gossip; never changes for a server without it).
    pub wan: tokio::sync::watch::Receiver<legate_types::federation::WanView>,
    /// Where user events go to be spread by LAN gossip (the binary
    /// forwards them; `None`: this server refuses them).
    pub events: Option<tokio::sync::mpsc::UnboundedSender<legate_types::event::UserEvent>>,
    /// The authoritative datacenter for config entries, intentions and the
    /// CA (`primary_datacenter`; empty: this one).
    pub primary_datacenter: String,
    /// Calls to other datacenters' servers (global writes forwarded to the
    /// primary, replication); `None` for a server without a WAN pool.
    pub remote: Option<OtherDatacenters>,
    /// Config entry kinds this server claims not to understand (to
    /// rehearse an older secondary); empty in production.
    pub masked_kinds: Vec<String>,
    /// How often the primary's leader removes the federation states of
    /// datacenters the WAN pool no longer knows (Consul's hour).
    pub federation_state_prune_interval: Duration,
    /// The lifetime of intermediates this primary signs for secondaries,
    /// when not the CA configuration's `IntermediateCertTTL` (tests
    /// shorten it below what the configuration may say).
    pub intermediate_cert_ttl: Option<Duration>,
    /// ACL enforcement (`acl {}`).
    pub acl: AclSettings,
}

impl ServerConfig {
    /// One bootstrapped server keeping its log and state in memory, as
    /// `-dev` runs it (Consul's default timings and CA settings).
    pub fn in_memory(datacenter: &str, node_name: &str) -> ServerConfig {
        ServerConfig {
            datacenter: datacenter.to_string(),
            node_name: node_name.to_string(),
            node_id: uuid::Uuid::new_v4().to_string(),
            advertise_address: "127.0.0.1".into(),
            advertise_address_wan: None,
            server_port: 8300,
            raft: RaftOptions {
                node_id: 1,
                address: "127.0.0.1:8300".into(),
                data_dir: None,
                bootstrap: true,
                raft_multiplier: 1,
                snapshot_threshold: 1024,
                trailing_logs: legate_raft::DEFAULT_TRAILING_LOGS,
                snapshot_interval: legate_raft::DEFAULT_SNAPSHOT_INTERVAL,
                transport: Default::default(),
            },
            tombstone_ttl: DEFAULT_TOMBSTONE_TTL,
            config_entries_bootstrap: Vec::new(),
            connect_ca: Default::default(),
            default_intention_allow: true,
            masked_features: Vec::new(),
            autopilot: Default::default(),
            reap_settle: Duration::from_secs(15 * 60),
            session_ttl_min: legate_types::DEFAULT_SESSION_TTL_MIN,
            max_query_time: legate_types::MAX_BLOCKING_WAIT,
            wan: tokio::sync::watch::channel(Default::default()).1,
            events: None,
            primary_datacenter: String::new(),
            remote: None,
            masked_kinds: Vec::new(),
            federation_state_prune_interval: FEDERATION_STATE_PRUNE_INTERVAL,
            intermediate_cert_ttl: None,
            acl: AclSettings::default(),
        }
    }
}

/// The way to other datacenters' servers: a `ServerRpc` whose every call
/// goes to the datacenter its options name.
#[derive(Clone)]
pub struct OtherDatacenters(pub Arc<dyn legate_types::rpc::ServerRpc>);

impl std::fmt::Debug for OtherDatacenters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OtherDatacenters")
    }
}

/// Consul's interval between prunings of vanished datacenters' states.
pub const FEDERATION_STATE_PRUNE_INTERVAL: Duration = Duration::from_secs(60 * 60);

/// Consul's tombstone TTL.
pub const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(15 * 60);

/// A running server.
pub struct Server {
    config: ServerConfig,
    raft: RaftNode,
    store: Arc<StateStore>,
    acl_cache: acl::AclCache,
    /// Tokens this secondary's server resolved in the primary.
    remote_tokens: acl_remote::RemoteTokens,
    /// What this leader's ACL replication is doing (a secondary's).
    acl_replication: acl_replication::ReplicationStatus,
    session_timers: SessionTimers,
    ca: ca::CaManager,
    /// Gossip membership the leader reconciles into the catalog.
    members: std::sync::Mutex<Vec<leader::ClusterMember>>,
    autopilot: autopilot::AutopilotState,
    shutdown: tokio_util_shutdown::Shutdown,
    /// LAN coordinates waiting for the leader's next batch.
    coordinate_updates: coordinates::PendingUpdates,
    /// Keys fetched for auth methods (JWKS, OIDC discovery).
    auth_keys: acl_login::KeyCache,
}

mod tokio_util_shutdown {
    use tokio::sync::watch;

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A flag background loops watch to know when to stop.
    #[derive(Clone)]
    pub struct Shutdown {
        tx: Arc<watch::Sender<bool>>,
        /// The same flag, read without the channel's lock.
        triggered: Arc<AtomicBool>,
    }

    impl Shutdown {
        pub fn new() -> Shutdown {
            Shutdown {
                tx: Arc::new(watch::channel(false).0),
                triggered: Arc::new(AtomicBool::new(false)),
            }
        }

        pub fn trigger(&self) {
            self.triggered.store(true, Ordering::SeqCst);
            self.tx.send_replace(true);
        }

        pub fn is_triggered(&self) -> bool {
            self.triggered.load(Ordering::SeqCst)
        }

        pub async fn wait(&self) {
            let mut rx = self.tx.subscribe();
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}

impl Server {
    /// Starts Raft over a fresh state store and the leader loops.
    pub async fn start(config: ServerConfig) -> Result<Arc<Server>, RaftError> {
        let store = Arc::new(StateStore::new());
        let raft = RaftNode::start(config.raft.clone(), store.clone()).await?;
        let server = Arc::new(Server {
            ca: ca::CaManager::new(config.connect_ca.clone()),
            config,
            raft,
            store,
            acl_cache: Default::default(),
            remote_tokens: Default::default(),
            acl_replication: Default::default(),
            session_timers: SessionTimers::default(),
            members: std::sync::Mutex::new(Vec::new()),
            autopilot: Default::default(),
            shutdown: tokio_util_shutdown::Shutdown::new(),
            coordinate_updates: Default::default(),
            auth_keys: Default::default(),
        });
        leader::spawn_leader_loop(server.clone());
        Ok(server)
    }

    /// The server's settings.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The state store (for in-process readers such as tests).
    pub fn store(&self) -> &Arc<StateStore> {
        &self.store
    }

    /// The features each known server advertises: this server's, and those
    /// of the other servers of its datacenter that have not left (from
    /// their gossip tags; a failed server counts, as in Consul).
    pub fn server_features(&self) -> Vec<std::collections::BTreeSet<String>> {
        let mut all = vec![features::advertised(&self.config.masked_features)];
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        all.extend(
            members
                .iter()
                .filter(|m| {
                    // A failed server still runs its version when it returns.
                    m.server_port.is_some()
                        && m.state != leader::MemberState::Left
                        && m.datacenter == self.config.datacenter
                        && m.name != self.config.node_name
                })
                .map(|m| m.features.clone()),
        );
        all
    }

    /// Waits until a leader is known.
    pub async fn wait_for_leader(&self, timeout: Duration) -> bool {
        self.raft.wait_for_leader(timeout).await
    }

    /// Waits until the leader has registered this server's node with its
    /// `serfHealth` check, so sessions (which default to that check) can be
    /// created as soon as the HTTP API answers.
    pub async fn wait_until_registered(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let watch = self.store.watches().tables(&[legate_state::Table::Checks]);
            let registered = self
                .store
                .read()
                .node_checks(&self.config.node_name)
                .1
                .iter()
                .any(|c| c.check_id == SERF_CHECK_ID);
            if registered {
                return true;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return false;
            }
            watch.wait(deadline - now).await;
        }
    }

    /// Waits until the leader has initialised the Connect CA (it does so
    /// right after taking office), so leaf requests can be served.
    pub async fn wait_for_ca(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let watch = self.store.watches().tables(&[legate_state::Table::CaRoots]);
            if !self.store.read().ca_roots().1.is_empty() {
                return true;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return false;
            }
            watch.wait(deadline - now).await;
        }
    }

    /// Resolves when this server's Raft stops on a storage error; the
    /// server cannot take part in the cluster any more (see
    /// [`RaftNode::wait_fatal`]).
    pub async fn wait_fatal(&self) -> String {
        self.raft.wait_fatal().await
    }

    /// Resolves once shutdown has begun.
    pub async fn wait_shutdown(&self) {
        self.shutdown.wait().await
    }

    /// Wakes blocking queries and stops the leader loops; Raft keeps running
    /// until [`Server::shutdown`].
    pub fn begin_shutdown(&self) {
        self.shutdown.trigger();
        // After the flag: a query subscribed before this wakes, and one
        // subscribing after it finds the flag set (see `blocking_read`).
        self.store.wake_all();
    }

    /// Stops the leader loops and Raft.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.raft.shutdown().await;
    }

    /// Writes a command through Raft, mapping failures to endpoint errors.
    pub(crate) async fn write(&self, command: Command) -> Result<(u64, CommandResult), RpcError> {
        write_through(&self.raft, command).await
    }
}

/// Applies `command` through `raft`, a refused command as a 400 and a
/// lost leadership as Consul's no-leader error.
pub(crate) async fn write_through(
    raft: &RaftNode,
    command: Command,
) -> Result<(u64, CommandResult), RpcError> {
    let timer = command.metric_name();
    let started = std::time::Instant::now();
    let applied = raft.apply(command).await;
    if let Some(name) = timer {
        metrics::histogram!(name).record(legate_telemetry::millis_since(started));
    }
    match applied {
        Ok((_, CommandResult::Failed(message))) => Err(RpcError::BadRequest(message)),
        Ok(ok) => Ok(ok),
        Err(RaftError::NotLeader { .. }) => Err(RpcError::NoLeader),
        Err(e) => Err(RpcError::Internal(e.to_string())),
    }
}
