//! Autopilot, as Consul's leader runs it: servers that gossip knows but
//! Raft does not join as learners and become voters once they have been
//! healthy (caught up, in contact) for the stabilization time; servers that
//! left are removed from Raft; failed servers are removed too (dead-server
//! cleanup) while that leaves a safe majority; and `/v1/operator/autopilot/
//! health` reports what the leader sees.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use legate_state::{Command, CommandResult};
use legate_types::rpc::{
    AutopilotConfig, AutopilotConfiguration, AutopilotHealth, AutopilotServerHealth,
};
use legate_types::{RpcError, WriteOptions};

use crate::authorizer::{Access, Resource};
use crate::leader::{ClusterMember, MemberState};
use crate::Server;

/// The leader's view of each server's health over time.
#[derive(Default)]
pub(crate) struct AutopilotState {
    /// Since when each server has been continuously healthy.
    healthy_since: Mutex<HashMap<u64, Instant>>,
}

impl AutopilotState {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Instant>> {
        self.healthy_since.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets everything (on losing leadership).
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}

/// A server of this datacenter that gossip knows, with its Raft identity.
fn raft_servers<'a>(
    server: &Server,
    members: &'a [ClusterMember],
) -> impl Iterator<Item = (&'a ClusterMember, u64, String)> + 'a {
    let datacenter = server.config.datacenter.clone();
    members.iter().filter_map(move |m| {
        let raft_id = m.raft_id?;
        let port = m.server_port?;
        let ip: std::net::IpAddr = m.address.parse().ok()?;
        (m.datacenter == datacenter)
            .then(|| (m, raft_id, std::net::SocketAddr::new(ip, port).to_string()))
    })
}

impl Server {
    /// The configuration `/v1/operator/autopilot/configuration` shows:
    /// the operator's, else the agent configuration's (indexes 0).
    pub(crate) fn autopilot_configuration(&self) -> AutopilotConfiguration {
        self.store
            .read()
            .autopilot_configuration()
            .unwrap_or_else(|| (&self.config.autopilot).into())
    }

    /// The settings autopilot runs with now.
    pub(crate) fn autopilot_settings(&self) -> AutopilotConfig {
        self.autopilot_configuration()
            .to_config()
            .unwrap_or_else(|_| self.config.autopilot.clone())
    }

    /// `PUT /v1/operator/autopilot/configuration`: validated, then logged
    /// once every server can apply it (`ft_apc`).
    pub(crate) async fn set_autopilot_configuration(
        &self,
        opts: &WriteOptions,
        config: AutopilotConfiguration,
        cas: Option<u64>,
    ) -> Result<bool, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, Resource::Operator, Access::Write)?;
        // Durations are stored in Go's form ("0s" for one left out).
        let settings = config.to_config().map_err(RpcError::BadRequest)?;
        let normalized = AutopilotConfiguration::from(&settings);
        let config = AutopilotConfiguration {
            last_contact_threshold: normalized.last_contact_threshold,
            server_stabilization_time: normalized.server_stabilization_time,
            ..config
        };
        if !crate::features::cluster_supports(
            &self.server_features(),
            crate::features::AUTOPILOT_CONFIG,
        ) {
            return Err(RpcError::Internal(
                "setting the autopilot configuration needs every server to run this \
                 version of Legate"
                    .into(),
            ));
        }
        let command = Command::AutopilotConfigSet {
            config: Box::new(config),
            cas,
        };
        match self.write(command).await? {
            (_, CommandResult::Applied(applied)) => Ok(applied),
            (_, other) => Err(RpcError::Internal(format!(
                "unexpected autopilot result {other:?}"
            ))),
        }
    }

    /// One autopilot pass on the leader (called every leader tick).
    pub(crate) async fn autopilot_tick(&self) {
        let members = self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if members.is_empty() {
            return; // Not clustered (or gossip not started yet).
        }
        let config = self.autopilot_settings();
        let own_id = self.config.raft.node_id;
        let membership = self.raft.membership();
        self.track_health(&membership, &config);

        // Servers that left: out of Raft at once (Consul's reconcile).
        let left: BTreeSet<u64> = raft_servers(self, &members)
            .filter(|(m, id, _)| {
                m.state == MemberState::Left && *id != own_id && membership.nodes.contains_key(id)
            })
            .map(|(_, id, _)| id)
            .collect();
        // Failed servers: out while a safe majority remains.
        let failed_voters: BTreeSet<u64> = raft_servers(self, &members)
            .filter(|(m, id, _)| {
                m.state == MemberState::Failed && *id != own_id && membership.voters.contains(id)
            })
            .map(|(_, id, _)| id)
            .collect();
        // Even servers that left are kept while removing them would go
        // below `min_quorum` (a force-left server may only have blipped).
        let mut remove = if membership.voters.len().saturating_sub(
            left.iter()
                .filter(|id| membership.voters.contains(id))
                .count(),
        ) < config.min_quorum.max(1)
        {
            tracing::debug!("autopilot: not removing servers that left below MinQuorum");
            BTreeSet::new()
        } else {
            left
        };
        if config.cleanup_dead_servers && !failed_voters.is_empty() {
            let voters = membership.voters.len();
            let remaining = voters - failed_voters.len();
            if failed_voters.len() * 2 >= voters {
                tracing::debug!(
                    failed = failed_voters.len(),
                    voters,
                    "autopilot: not removing failed servers: removing the majority of servers is not safe"
                );
            } else if remaining < config.min_quorum {
                tracing::debug!(
                    remaining,
                    min_quorum = config.min_quorum,
                    "autopilot: not removing failed servers below MinQuorum"
                );
            } else {
                remove.extend(failed_voters);
            }
        }
        if !remove.is_empty() {
            tracing::info!(servers = ?remove, "autopilot: removing servers that left or failed from Raft");
            if let Err(e) = self.raft.remove_servers(remove).await {
                tracing::warn!(error = %e, "autopilot: removing servers failed");
            }
            return;
        }

        // Alive servers Raft does not know: learners first.
        for (member, id, address) in raft_servers(self, &members) {
            if member.state == MemberState::Alive && !membership.nodes.contains_key(&id) {
                tracing::info!(node = %member.name, %address, "autopilot: adding a server as a learner");
                if let Err(e) = self.raft.add_learner(id, address).await {
                    tracing::warn!(node = %member.name, error = %e, "autopilot: adding a learner failed");
                }
                return;
            }
        }

        // Learners healthy for the stabilization time: voters.
        let now = Instant::now();
        let stable: BTreeSet<u64> = {
            let since = self.autopilot.lock();
            membership
                .nodes
                .keys()
                .filter(|id| !membership.voters.contains(id))
                .filter(|id| {
                    raft_servers(self, &members)
                        .any(|(m, mid, _)| mid == **id && m.state == MemberState::Alive)
                })
                .filter(|id| {
                    since
                        .get(id)
                        .is_some_and(|t| now.duration_since(*t) >= config.server_stabilization_time)
                })
                .copied()
                .collect()
        };
        if !stable.is_empty() {
            tracing::info!(servers = ?stable, "autopilot: promoting stable learners to voters");
            if let Err(e) = self.raft.promote(stable).await {
                tracing::warn!(error = %e, "autopilot: promoting learners failed");
            }
        }
    }

    /// Notes which servers are healthy now (caught up within
    /// `max_trailing_logs`); a server's clock restarts when it is not.
    fn track_health(&self, membership: &legate_raft::Membership, config: &AutopilotConfig) {
        let now = Instant::now();
        let mut since = self.autopilot.lock();
        since.retain(|id, _| membership.nodes.contains_key(id));
        for id in membership.nodes.keys() {
            if server_healthy(*id, self.config.raft.node_id, membership, config) {
                since.entry(*id).or_insert(now);
            } else {
                since.remove(id);
            }
        }
    }

    /// `/v1/operator/autopilot/health`, from the leader's view.
    pub(crate) fn autopilot_view(&self) -> AutopilotHealth {
        let membership = self.raft.membership();
        let config = &self.autopilot_settings();
        let members = self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let leader = self.raft.leader_address();
        let since = self.autopilot.lock().clone();
        let now = Instant::now();
        let servers: Vec<AutopilotServerHealth> = membership
            .nodes
            .iter()
            .map(|(id, address)| {
                let member = raft_servers(self, &members).find(|(_, mid, _)| mid == id);
                let healthy = server_healthy(*id, self.config.raft.node_id, &membership, config)
                    && member
                        .as_ref()
                        .is_none_or(|(m, _, _)| m.state == MemberState::Alive);
                let serf_status = match member.as_ref().map(|(m, _, _)| m.state) {
                    Some(MemberState::Alive) => "alive",
                    Some(MemberState::Failed) => "failed",
                    Some(MemberState::Left) => "left",
                    // A lone server without gossip is alive by definition.
                    None if *id == self.config.raft.node_id => "alive",
                    None => "none",
                };
                let stable_since = since
                    .get(id)
                    .map(|t| std::time::SystemTime::now() - now.duration_since(*t))
                    .and_then(|t| {
                        time::OffsetDateTime::from(t)
                            .format(&time::format_description::well_known::Rfc3339)
                            .ok()
                    })
                    .unwrap_or_default();
                let (node_id, name) = match &member {
                    Some((m, _, _)) => (m.node_id.clone(), m.name.clone()),
                    None if *id == self.config.raft.node_id => {
                        (self.config.node_id.clone(), self.config.node_name.clone())
                    }
                    None => (id.to_string(), String::new()),
                };
                AutopilotServerHealth {
                    id: node_id,
                    name,
                    address: address.clone(),
                    serf_status: serf_status.to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    leader: leader.as_deref() == Some(address.as_str()),
                    last_contact: if leader.as_deref() == Some(address.as_str()) {
                        "0s".into()
                    } else {
                        "-".into()
                    },
                    last_term: membership.term,
                    last_index: if *id == self.config.raft.node_id {
                        membership.last_log_index
                    } else {
                        membership.matched.get(id).copied().unwrap_or(0)
                    },
                    healthy,
                    voter: membership.voters.contains(id),
                    stable_since,
                }
            })
            .collect();
        let healthy_voters = servers.iter().filter(|s| s.voter && s.healthy).count();
        let quorum = membership.voters.len() / 2 + 1;
        AutopilotHealth {
            healthy: servers.iter().all(|s| s.healthy),
            failure_tolerance: healthy_voters.saturating_sub(quorum),
            servers,
        }
    }
}

/// Whether a server is healthy as far as the leader can tell (the leader
/// itself always is). `last_contact_threshold` is not applied: openraft 0.9
/// reports no per-follower contact time.
fn server_healthy(
    id: u64,
    own_id: u64,
    membership: &legate_raft::Membership,
    config: &AutopilotConfig,
) -> bool {
    if id == own_id {
        return true;
    }
    // Reached since the configuration in force was written (a new learner
    // replication never reached is not healthy, however short the log),
    // and no further behind than `max_trailing_logs`.
    membership.matched.get(&id).is_some_and(|m| {
        *m >= membership.membership_index
            && m + config.max_trailing_logs >= membership.last_log_index
    })
}
