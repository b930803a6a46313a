//! The leader's background work: reconciling the servers' own catalog
//! entries (node + `serfHealth`), and expiring TTL sessions.

use std::sync::Arc;
use std::time::Duration;

use legate_state::Command;
use legate_types::duration::parse_go_duration;
use legate_types::{HealthCheck, HealthStatus, NodeService, RegisterRequest};

use crate::Server;

/// The name and id of the membership health check every node carries.
pub const SERF_CHECK_ID: &str = "serfHealth";
const SERF_CHECK_NAME: &str = "Serf Health Status";
/// The system metadata key holding the cluster id.
pub const CLUSTER_ID_KEY: &str = "cluster-id";
/// The service every server registers for itself.
pub const CONSUL_SERVICE: &str = "consul";

pub(crate) fn spawn_leader_loop(server: Arc<Server>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut was_leader = false;
        let mut last_reap = tokio::time::Instant::now();
        let mut unknown_since: std::collections::HashMap<String, tokio::time::Instant> =
            Default::default();
        let mut tombstones = TombstoneGc::new(server.config.tombstone_ttl);
        let mut last_coordinates = tokio::time::Instant::now();
        let mut last_token_reap = tokio::time::Instant::now();
        let mut last_usage: Option<tokio::time::Instant> = None;
        let mut tasks = LeaderTasks::default();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = server.shutdown.wait() => {
                    tasks.stop();
                    return;
                }
            }
            let leader = server.raft.is_leader();
            let usage_due =
                last_usage.is_none_or(|at| at.elapsed() >= crate::usage_metrics::REPORT_EVERY);
            let sessions = usage_due.then(|| {
                last_usage = Some(tokio::time::Instant::now());
                crate::usage_metrics::report_inventory(&server)
            });
            if !leader {
                if was_leader {
                    crate::usage_metrics::report_not_leader();
                    tasks.stop();
                    crate::acl_replication::stopped(&server);
                    server.coordinate_updates.clear();
                    server.session_timers.clear_all();
                    server.autopilot.clear();
                    tombstones = TombstoneGc::new(server.config.tombstone_ttl);
                }
                was_leader = false;
                continue;
            }
            if !was_leader {
                unknown_since.clear();
                start_session_clocks(&server);
                ensure_cluster_id(&server).await;
                bootstrap_config_entries(&server).await;
                tasks.start(&server);
            }
            // Re-checked every tick: an upgraded server enables features.
            enable_features(&server, !was_leader).await;
            if let Err(e) = server.acl_initialize().await {
                tracing::error!(error = %e, "leader: initialising ACLs failed");
            }
            if let Err(e) = server.ca_initialize().await {
                tracing::error!(error = %e, "leader: initialising the connect CA failed");
            }
            if let Err(e) = server
                .ca_prune_roots(std::time::SystemTime::now(), false)
                .await
            {
                tracing::warn!(error = %e, "leader: pruning CA roots failed");
            }
            was_leader = true;
            let reconcile_started = std::time::Instant::now();
            if let Err(e) = reconcile_self(&server).await {
                tracing::warn!(error = %e, "leader: reconciling this server's catalog entry failed");
            }
            let members = server
                .members
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for member in members.iter().filter(|m| {
                m.name != server.config.node_name && m.datacenter == server.config.datacenter
            }) {
                if let Err(e) = reconcile_member(&server, member).await {
                    tracing::warn!(node = %member.name, error = %e, "leader: reconciling a member failed");
                }
            }
            metrics::histogram!("leader.reconcile")
                .record(legate_telemetry::millis_since(reconcile_started));
            server.autopilot_tick().await;
            if let Some(sessions) = sessions {
                crate::usage_metrics::report_leader(&server, sessions);
            }
            // Nodes the catalog keeps from an earlier membership (a full
            // restart) that gossip has not known for `reap_settle` are
            // removed (gossip has no full-state sync, so a server may take
            // minutes to hear of every member).
            if last_reap.elapsed() >= REAP_EVERY.min(server.config.reap_settle) {
                last_reap = tokio::time::Instant::now();
                reap_unknown_nodes(&server, &mut unknown_since).await;
            }
            let newest = server.store.read().max_tombstone_index();
            if let Some(upto) = tombstones.tick(newest) {
                if let Err(e) = server.write(Command::ReapTombstones(upto)).await {
                    tracing::warn!(error = %e, "leader: reaping KV tombstones failed");
                }
            }
            if last_coordinates.elapsed() >= crate::coordinates::UPDATE_PERIOD {
                last_coordinates = tokio::time::Instant::now();
                server.flush_coordinate_updates().await;
            }
            if last_token_reap.elapsed() >= TOKEN_REAP_EVERY {
                last_token_reap = tokio::time::Instant::now();
                server.reap_expired_tokens().await;
            }
            for id in server.session_timers.take_expired() {
                tracing::info!(session = %id, "leader: session TTL expired");
                if let Err(e) = server.write(Command::SessionDestroy(id)).await {
                    tracing::warn!(error = %e, "leader: destroying an expired session failed");
                }
            }
        }
    });
}

/// The leader's long-running work across datacenters, started when it
/// takes office and aborted when it loses it.
#[derive(Default)]
struct LeaderTasks(Vec<tokio::task::JoinHandle<()>>);

impl LeaderTasks {
    fn start(&mut self, server: &Arc<Server>) {
        use crate::{config_replication, federation_states, replication};
        self.stop();
        self.0.push(tokio::spawn(federation_states::anti_entropy(
            server.clone(),
        )));
        if server.is_secondary() {
            self.0
                .push(tokio::spawn(crate::ca_secondary::run(server.clone())));
            let kinds = config_replication::KindsOfLastRound::default();
            self.0.push(tokio::spawn(replication::run(
                server.clone(),
                "config-entries",
                move |server, index| config_replication::round(server, index, kinds.clone()),
                |_, _| {},
            )));
            self.0.push(tokio::spawn(replication::run(
                server.clone(),
                "federation-states",
                federation_states::replication_round,
                |_, _| {},
            )));
            crate::acl_replication::start(server, &mut self.0);
        } else {
            self.0
                .push(tokio::spawn(federation_states::prune(server.clone())));
        }
    }

    fn stop(&mut self) {
        for task in self.0.drain(..) {
            task.abort();
        }
    }
}

/// How often the leader reaps expired ACL tokens (Consul: one round a
/// second).
const TOKEN_REAP_EVERY: Duration = Duration::from_secs(1);

/// How often it looks for them afterwards.
const REAP_EVERY: Duration = Duration::from_secs(10);

/// Deregisters catalog nodes that carry a `serfHealth` check (so gossip
/// put them there) but that gossip has not known under any status for
/// `reap_settle`.
async fn reap_unknown_nodes(
    server: &Server,
    unknown_since: &mut std::collections::HashMap<String, tokio::time::Instant>,
) {
    let known: std::collections::HashSet<String> = {
        let members = server.members.lock().unwrap_or_else(|e| e.into_inner());
        if members.is_empty() {
            return; // Not clustered: nothing to compare with.
        }
        members.iter().map(|m| m.name.clone()).collect()
    };
    let unknown: Vec<String> = {
        let tables = server.store.read();
        let (_, checks) = tables.checks_in_state(None);
        let mut nodes: Vec<String> = checks
            .into_iter()
            .filter(|c| c.check_id == SERF_CHECK_ID)
            .map(|c| c.node)
            .filter(|n| *n != server.config.node_name && !known.contains(n))
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    };
    let now = tokio::time::Instant::now();
    unknown_since.retain(|node, _| unknown.contains(node));
    let unknown: Vec<String> = unknown
        .into_iter()
        .filter(|node| {
            now.duration_since(*unknown_since.entry(node.clone()).or_insert(now))
                >= server.config.reap_settle
        })
        .collect();
    for node in unknown {
        tracing::info!(%node, "leader: reaping a catalog node gossip does not know");
        let request = legate_types::DeregisterRequest {
            node,
            datacenter: server.config.datacenter.clone(),
            ..Default::default()
        };
        if let Err(e) = server.write(Command::Deregister(request)).await {
            tracing::warn!(error = %e, "leader: reaping a node failed");
        }
    }
}

/// Tombstone GC, as Consul's: tombstones are kept for the TTL so that
/// blocking queries on a prefix see deletions, then reaped through Raft.
/// Every `granularity` the newest tombstone index is noted; once a note is
/// older than the TTL, everything up to its index is reaped.
struct TombstoneGc {
    ttl: Duration,
    granularity: Duration,
    last_mark: Option<tokio::time::Instant>,
    marks: std::collections::VecDeque<(tokio::time::Instant, u64)>,
}

impl TombstoneGc {
    fn new(ttl: Duration) -> TombstoneGc {
        TombstoneGc {
            ttl,
            granularity: (ttl / 2).min(Duration::from_secs(30)),
            last_mark: None,
            marks: Default::default(),
        }
    }

    /// Returns the index to reap up to, when one is due.
    fn tick(&mut self, newest_tombstone: Option<u64>) -> Option<u64> {
        let now = tokio::time::Instant::now();
        if self
            .last_mark
            .is_none_or(|t| now.duration_since(t) >= self.granularity)
        {
            self.last_mark = Some(now);
            if let Some(index) = newest_tombstone {
                if self.marks.back().is_none_or(|(_, last)| *last < index) {
                    self.marks.push_back((now, index));
                }
            }
        }
        let mut reap = None;
        while let Some((at, index)) = self.marks.front().copied() {
            if now.duration_since(at) < self.ttl {
                break;
            }
            reap = Some(index);
            self.marks.pop_front();
        }
        reap
    }
}

/// Gives the cluster its id (the mesh trust domain is `<id>.consul`) the
/// first time a leader takes office; later leaders keep it.
async fn ensure_cluster_id(server: &Server) {
    if server
        .store
        .read()
        .system_metadata(CLUSTER_ID_KEY)
        .is_some()
    {
        return;
    }
    let command = Command::SystemMetadataInit {
        key: CLUSTER_ID_KEY.to_string(),
        value: uuid::Uuid::new_v4().to_string(),
    };
    if let Err(e) = server.write(command).await {
        tracing::error!(error = %e, "leader: recording the cluster id failed");
    }
}

/// Turns on the features every server supports (today: intentions as
/// config entries, recorded as system metadata `intention-format`).
pub(crate) async fn enable_features(server: &Server, first: bool) {
    use crate::features;
    use crate::intentions::{INTENTION_FORMAT_CONFIG_ENTRY, INTENTION_FORMAT_KEY};
    let done = server
        .store
        .read()
        .system_metadata(INTENTION_FORMAT_KEY)
        .is_some();
    if done {
        return;
    }
    let servers = server.server_features();
    if !features::cluster_supports(&servers, features::INTENTIONS_AS_CONFIG_ENTRIES) {
        if first {
            tracing::warn!(
                "not every server supports intentions as config entries yet; intentions stay read only"
            );
        }
        return;
    }
    // A secondary also waits for every server of the primary (as the WAN
    // pool shows them).
    if server.is_secondary() {
        let primary = server
            .config
            .wan
            .borrow()
            .features_of(server.primary_datacenter());
        if !features::cluster_supports(&primary, features::INTENTIONS_AS_CONFIG_ENTRIES) {
            if first {
                tracing::warn!(
                    primary = %server.primary_datacenter(),
                    "not every server of the primary datacenter supports intentions as config entries yet; intentions stay read only"
                );
            }
            return;
        }
    }
    let command = Command::SystemMetadataInit {
        key: INTENTION_FORMAT_KEY.to_string(),
        value: INTENTION_FORMAT_CONFIG_ENTRY.to_string(),
    };
    if let Err(e) = server.write(command).await {
        tracing::error!(error = %e, "leader: enabling intentions as config entries failed");
    }
}

/// Writes the bootstrap config entries that do not exist yet: a newer
/// entry written through the API is never overwritten by the config file.
async fn bootstrap_config_entries(server: &Server) {
    if server.is_secondary() && !server.config.config_entries_bootstrap.is_empty() {
        // Replication makes this datacenter's entries the primary's.
        tracing::warn!(
            primary = %server.primary_datacenter(),
            "config_entries.bootstrap is ignored in a secondary datacenter; write the entries in the primary"
        );
        return;
    }
    for entry in &server.config.config_entries_bootstrap {
        if entry.kind == crate::intentions::INTENTIONS_KIND && server.intentions_writable().is_err()
        {
            tracing::error!(entry = %entry.label(), "Refusing to apply configuration entry \"service-intentions\" because intentions are still being migrated to config entries");
            continue;
        }
        let command = Command::ConfigEntrySet {
            entry: Box::new(entry.clone()),
            cas: Some(0),
        };
        match server.write(command).await {
            Ok(_) => tracing::debug!(entry = %entry.label(), "bootstrap config entry considered"),
            Err(e) => {
                tracing::error!(entry = %entry.label(), error = %e, "writing a bootstrap config entry failed")
            }
        }
    }
}

pub(crate) fn start_session_clocks(server: &Server) {
    let (_, sessions) = server.store.read().sessions();
    for session in sessions {
        if let Ok(ttl) = parse_go_duration(&session.ttl) {
            if !ttl.is_zero() {
                server.session_timers.ensure(&session.id, ttl);
            }
        }
    }
}

/// How gossip sees a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Reachable.
    Alive,
    /// Not answering.
    Failed,
    /// Left (gracefully or forced).
    Left,
}

/// A gossip member, as the leader reconciles it into the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMember {
    /// Node name.
    pub name: String,
    /// Node id.
    pub node_id: String,
    /// Its address.
    pub address: String,
    /// Its datacenter.
    pub datacenter: String,
    /// Its server port, for servers (registers the `consul` service).
    pub server_port: Option<u16>,
    /// Its Raft id, for servers (autopilot adds and removes it).
    pub raft_id: Option<u64>,
    /// The features it advertises (servers; `ft_*` tags).
    pub features: std::collections::BTreeSet<String>,
    /// What gossip says.
    pub state: MemberState,
}

impl Server {
    /// Replaces the membership the leader reconciles into the catalog
    /// (called on every gossip change).
    pub fn update_members(&self, members: Vec<ClusterMember>) {
        *self.members.lock().unwrap_or_else(|e| e.into_inner()) = members;
    }
}

/// Brings one member's catalog entry in line with gossip: an alive member
/// has its node and a passing `serfHealth` (and servers the `consul`
/// service); a failed one a critical `serfHealth`; a member that left is
/// deregistered.
async fn reconcile_member(
    server: &Server,
    member: &ClusterMember,
) -> Result<(), legate_types::RpcError> {
    let (node_exists, serf_status, has_service) = {
        let tables = server.store.read();
        let node = tables.node(&member.name);
        let (_, checks) = tables.node_checks(&member.name);
        let serf = checks
            .iter()
            .find(|c| c.check_id == SERF_CHECK_ID)
            .map(|c| c.status);
        let service = tables.node_service(&member.name, CONSUL_SERVICE).is_some();
        (node.is_some(), serf, service)
    };
    match member.state {
        MemberState::Left => {
            if node_exists {
                tracing::info!(node = %member.name, "leader: member left; deregistering it");
                let request = legate_types::DeregisterRequest {
                    node: member.name.clone(),
                    datacenter: member.datacenter.clone(),
                    ..Default::default()
                };
                server.write(Command::Deregister(request)).await?;
            }
            Ok(())
        }
        MemberState::Failed | MemberState::Alive => {
            let (status, output) = if member.state == MemberState::Alive {
                (HealthStatus::Passing, "Agent alive and reachable")
            } else {
                (HealthStatus::Critical, "Agent not live or unreachable")
            };
            let service_needed = member.server_port.is_some() && !has_service;
            if node_exists && serf_status == Some(status) && !service_needed {
                return Ok(());
            }
            let request = RegisterRequest {
                id: member.node_id.clone(),
                node: member.name.clone(),
                address: member.address.clone(),
                datacenter: member.datacenter.clone(),
                skip_node_update: node_exists,
                check: Some(HealthCheck {
                    node: member.name.clone(),
                    check_id: SERF_CHECK_ID.to_string(),
                    name: SERF_CHECK_NAME.to_string(),
                    status,
                    output: output.to_string(),
                    ..Default::default()
                }),
                service: member
                    .server_port
                    .filter(|_| service_needed)
                    .map(|port| NodeService {
                        id: CONSUL_SERVICE.to_string(),
                        service: CONSUL_SERVICE.to_string(),
                        port,
                        ..Default::default()
                    }),
                ..Default::default()
            };
            server
                .write(Command::Register(Box::new(request)))
                .await
                .map(|_| ())
        }
    }
}

/// Registers this server's node and its passing `serfHealth` check when the
/// catalog lacks them (membership-driven reconciliation of every member comes
/// with gossip).
async fn reconcile_self(server: &Server) -> Result<(), legate_types::RpcError> {
    let config = &server.config;
    let needs_update = {
        let tables = server.store.read();
        let node_ok = tables
            .node(&config.node_name)
            .is_some_and(|n| n.address == config.advertise_address && n.id == config.node_id);
        let (_, checks) = tables.node_checks(&config.node_name);
        let check_ok = checks
            .iter()
            .any(|c| c.check_id == SERF_CHECK_ID && c.status == HealthStatus::Passing);
        let service_ok = tables
            .node_service(&config.node_name, CONSUL_SERVICE)
            .is_some_and(|s| s.port == config.server_port);
        !(node_ok && check_ok && service_ok)
    };
    if !needs_update {
        return Ok(());
    }
    let mut tagged = std::collections::BTreeMap::new();
    tagged.insert("lan".to_string(), config.advertise_address.clone());
    tagged.insert("lan_ipv4".to_string(), config.advertise_address.clone());
    let wan = config
        .advertise_address_wan
        .clone()
        .unwrap_or_else(|| config.advertise_address.clone());
    tagged.insert("wan".to_string(), wan.clone());
    tagged.insert("wan_ipv4".to_string(), wan);
    let mut meta = std::collections::BTreeMap::new();
    meta.insert("consul-network-segment".to_string(), String::new());
    meta.insert(
        "consul-version".to_string(),
        legate_types::CONSUL_API_VERSION.to_string(),
    );
    let existing_meta = server
        .store
        .read()
        .node(&config.node_name)
        .map(|n| n.meta.clone());
    let request = RegisterRequest {
        id: config.node_id.clone(),
        node: config.node_name.clone(),
        address: config.advertise_address.clone(),
        datacenter: config.datacenter.clone(),
        tagged_addresses: tagged,
        node_meta: existing_meta.unwrap_or_else(|| meta.into()),
        check: Some(HealthCheck {
            node: config.node_name.clone(),
            check_id: SERF_CHECK_ID.to_string(),
            name: SERF_CHECK_NAME.to_string(),
            status: HealthStatus::Passing,
            output: "Agent alive and reachable".to_string(),
            ..Default::default()
        }),
        ..Default::default()
    };
    server.write(Command::Register(Box::new(request))).await?;
    let service = RegisterRequest {
        node: config.node_name.clone(),
        address: config.advertise_address.clone(),
        skip_node_update: true,
        service: Some(NodeService {
            id: CONSUL_SERVICE.to_string(),
            service: CONSUL_SERVICE.to_string(),
            port: config.server_port,
            ..Default::default()
        }),
        ..Default::default()
    };
    server
        .write(Command::Register(Box::new(service)))
        .await
        .map(|_| ())
}
