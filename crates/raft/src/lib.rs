//! Raft for Legate's servers: openraft with a log kept in memory (`-dev`) or
//! on disk (redb), a state machine over the [`StateStore`], and snapshots.
//!
//! Depends on `legate-types` and `legate-state`; never on RPC or HTTP. The
//! network between servers runs over a [`RaftTransport`] the caller
//! supplies (the server port); a single server needs none.

// openraft's storage traits fix the error type (`StorageError`, ~224 bytes);
// our helpers return the same type rather than box and unbox it.
#![allow(clippy::result_large_err)]

mod log_store;
mod network;
mod state_machine;
mod telemetry;
mod transfer;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use legate_state::{Command, CommandResult, StateStore};
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};

pub use log_store::LogStore;
pub use network::{RaftAnswer, RaftMessage, RaftTransport};
pub use state_machine::StateMachine;

openraft::declare_raft_types!(
    /// Legate's Raft type configuration.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Log entries kept behind a snapshot unless configured.
pub const DEFAULT_TRAILING_LOGS: u64 = 256;
/// How often the snapshot policy looks at the store unless configured.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(5);

/// How to start a Raft node.
#[derive(Debug, Clone)]
pub struct RaftOptions {
    /// This server's Raft id.
    pub node_id: u64,
    /// This server's RPC address (reported by `/v1/status/leader`).
    pub address: String,
    /// Where the log and snapshots live; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// Initialize a one-server cluster when no state exists yet.
    pub bootstrap: bool,
    /// Scales election and heartbeat timing (Consul's `raft_multiplier`).
    pub raft_multiplier: u64,
    /// Take a snapshot after this many log entries.
    pub snapshot_threshold: u64,
    /// Log entries kept behind a snapshot (Consul's `raft_trailing_logs`).
    pub trailing_logs: u64,
    /// How often the snapshot policy looks at the store's size (Consul's
    /// `raft_snapshot_interval`).
    pub snapshot_interval: Duration,
    /// How messages reach other servers (`None`: a single server).
    pub transport: Transport,
}

/// The transport of [`RaftOptions`].
#[derive(Clone, Default)]
pub struct Transport(pub Option<Arc<dyn RaftTransport>>);

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Transport(network)"
        } else {
            "Transport(none)"
        })
    }
}

/// Errors of Raft operations.
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// Startup failed.
    #[error("raft startup failed: {0}")]
    Startup(String),
    /// This server is not the leader (or none is known).
    #[error("not the leader")]
    NotLeader {
        /// The leader's address, when known.
        leader: Option<String>,
    },
    /// Anything else.
    #[error("raft error: {0}")]
    Other(String),
}

/// A write waiting for the batcher.
type PendingWrite = (
    Command,
    tokio::sync::oneshot::Sender<Result<(u64, CommandResult), RaftError>>,
);

/// Most commands one log entry carries.
const MAX_BATCH: usize = 256;

/// Most value bytes one log entry carries (KV values up to 512 KiB each),
/// so an entry always fits a message between servers.
const MAX_BATCH_BYTES: usize = 4 << 20;

/// The value bytes a command adds to the log that a snapshot would
/// shorten: all of [`value_bytes`] but staged restore pieces, which are
/// live state until their commit (counted by the store's size).
pub(crate) fn log_budget_bytes(command: &Command) -> usize {
    match command {
        Command::RestorePiece { .. } => 0,
        Command::Batch(commands) => commands.iter().map(log_budget_bytes).sum(),
        other => value_bytes(other),
    }
}

/// The value bytes a command carries (what makes entries large).
pub(crate) fn value_bytes(command: &Command) -> usize {
    match command {
        Command::Kv(op) => op.value.len(),
        Command::Txn(ops) | Command::TxnWithCatalog(ops) => ops
            .iter()
            .filter_map(|op| op.kv.as_ref())
            .map(|kv| kv.value.len())
            .sum(),
        Command::Restore(archive) => archive.0.len(),
        Command::RestorePiece { data, .. } => data.0.len(),
        Command::Batch(commands) => commands.iter().map(value_bytes).sum(),
        _ => 0,
    }
}

pub(crate) use legate_types::memory::release_free_memory;

/// A running Raft node with its state store.
#[derive(Clone)]
pub struct RaftNode {
    raft: Raft<TypeConfig>,
    writes: tokio::sync::mpsc::Sender<PendingWrite>,
    log: LogStore,
    store: Arc<StateStore>,
    state_machine: StateMachine,
    options: RaftOptions,
    /// When this follower last heard from a leader (AppendEntries).
    last_heard: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// Writes and membership changes hold it shared; a leadership
    /// transfer holds it alone, so nothing is appended meanwhile.
    gate: Arc<tokio::sync::RwLock<()>>,
}

impl RaftNode {
    /// Starts a node over `store`, loading on-disk state when a data dir is
    /// given, and bootstraps a single-server cluster when asked to.
    pub async fn start(
        options: RaftOptions,
        store: Arc<StateStore>,
    ) -> Result<RaftNode, RaftError> {
        let multiplier = options.raft_multiplier.max(1);
        // A lone server elects itself at once; servers talking over a
        // network get Consul-like margins (an AppendEntries must complete,
        // follower fsync included, within one heartbeat interval).
        let (heartbeat, election) = if options.transport.0.is_some() {
            (150, 1000)
        } else {
            (50, 150)
        };
        let config = Config {
            cluster_name: "legate".to_string(),
            heartbeat_interval: heartbeat * multiplier,
            election_timeout_min: election * multiplier,
            election_timeout_max: 2 * election * multiplier,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(options.snapshot_threshold.max(16)),
            max_in_snapshot_log_to_keep: options.trailing_logs,
            // Snapshots travel in 512 KiB chunks with time to spare.
            install_snapshot_timeout: 10_000 * multiplier,
            snapshot_max_chunk_size: 512 * 1024,
            ..Default::default()
        }
        .validate()
        .map_err(|e| RaftError::Startup(e.to_string()))?;
        let raft_dir = options.data_dir.as_ref().map(|d| d.join("raft"));
        let log = match &raft_dir {
            Some(dir) => LogStore::open(dir).map_err(|e| RaftError::Startup(e.to_string()))?,
            None => LogStore::in_memory(),
        };
        let state_machine =
            StateMachine::new(store.clone(), raft_dir.clone()).map_err(RaftError::Startup)?;
        let raft = Raft::new(
            options.node_id,
            Arc::new(config),
            network::Network::new(options.transport.0.clone()),
            log.clone(),
            state_machine.clone(),
        )
        .await
        .map_err(|e| RaftError::Startup(e.to_string()))?;
        let (writes, pending) = tokio::sync::mpsc::channel(4096);
        let gate = Arc::new(tokio::sync::RwLock::new(()));
        tokio::spawn(run_batcher(raft.clone(), pending, gate.clone()));
        tokio::spawn(telemetry::run(raft.clone()));
        tokio::spawn(run_snapshot_policy(
            raft.clone(),
            state_machine.clone(),
            options.snapshot_interval,
        ));
        let node = RaftNode {
            raft,
            writes,
            log,
            store,
            state_machine,
            options,
            // Until a leader is heard, staleness counts from the start.
            last_heard: Arc::new(std::sync::Mutex::new(Some(std::time::Instant::now()))),
            gate,
        };
        if node.options.bootstrap
            && !node
                .raft
                .is_initialized()
                .await
                .map_err(|e| RaftError::Startup(e.to_string()))?
        {
            let mut members = BTreeMap::new();
            members.insert(
                node.options.node_id,
                BasicNode {
                    addr: node.options.address.clone(),
                },
            );
            node.raft
                .initialize(members)
                .await
                .map_err(|e| RaftError::Startup(e.to_string()))?;
        }
        Ok(node)
    }

    /// The state store this node applies to.
    pub fn store(&self) -> &Arc<StateStore> {
        &self.store
    }

    /// Replicates and applies a command; returns its log index and result.
    ///
    /// Writes go through a batcher: while one log entry is being made
    /// durable, the writes that arrive meanwhile are gathered into the next
    /// entry (`Command::Batch`), so concurrent writers share one fsync
    /// instead of queueing for one each. openraft 0.9 waits for each append
    /// to flush before the next, which makes this the place to batch.
    pub async fn apply(&self, command: Command) -> Result<(u64, CommandResult), RaftError> {
        let (reply, result) = tokio::sync::oneshot::channel();
        self.writes
            .send((command, reply))
            .await
            .map_err(|_| RaftError::Other("raft is shutting down".into()))?;
        result
            .await
            .map_err(|_| RaftError::Other("raft is shutting down".into()))?
    }

    /// A copy of every table with the log index and term it reflects (for
    /// `snapshot save`): no entry is applied between the copy and the log
    /// id read with it.
    pub fn state_copy(&self) -> (legate_state::SnapshotData, u64, u64) {
        self.state_machine.consistent_copy()
    }

    /// Confirms leadership with a quorum (for `?consistent` reads).
    pub async fn ensure_linearizable(&self) -> Result<(), RaftError> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(openraft::error::RaftError::APIError(
                openraft::error::CheckIsLeaderError::ForwardToLeader(f),
            )) => Err(RaftError::NotLeader {
                leader: f.leader_node.map(|n| n.addr),
            }),
            Err(e) => Err(RaftError::Other(e.to_string())),
        }
    }

    /// The current leader's address, if one is known (never once Raft
    /// has stopped on a fatal error).
    pub fn leader_address(&self) -> Option<String> {
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow();
        if metrics.running_state.is_err() {
            return None;
        }
        let leader = metrics.current_leader?;
        metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.addr.clone())
    }

    /// True when this node is the leader (never once Raft has stopped on
    /// a fatal error).
    pub fn is_leader(&self) -> bool {
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow();
        metrics.running_state.is_ok() && metrics.current_leader == Some(self.options.node_id)
    }

    /// Resolves when Raft stops on a fatal error (a log or state write
    /// that failed: a full or read-only disk), with its text. Raft cannot
    /// go on after one; a normal shutdown never resolves this.
    pub async fn wait_fatal(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(fatal) = &metrics.borrow_and_update().running_state {
                if !matches!(fatal, openraft::error::Fatal::Stopped) {
                    return fatal.to_string();
                }
            }
            if metrics.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Every server in the Raft configuration: id, address, whether it
    /// votes, and whether it leads; and the last log index this node has.
    pub fn configuration(&self) -> (Vec<(u64, String, bool, bool)>, u64) {
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        let servers = membership
            .nodes()
            .map(|(id, n)| {
                (
                    *id,
                    n.addr.clone(),
                    voters.contains(id),
                    metrics.current_leader == Some(*id),
                )
            })
            .collect();
        (servers, metrics.last_log_index.unwrap_or(0))
    }

    /// Removes a server from the Raft configuration (on the leader).
    pub async fn remove_server(&self, id: u64) -> Result<(), RaftError> {
        self.remove_servers([id].into()).await
    }

    /// The membership as the leader manages it: voters, learners (with
    /// addresses), this node's last log index, and on the leader how far
    /// each follower's log matches it.
    pub fn membership(&self) -> Membership {
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        let nodes = membership
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect();
        // Followers replication has never reached are left out.
        let matched = metrics
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .filter_map(|(id, log)| log.map(|l| (*id, l.index)))
                    .collect()
            })
            .unwrap_or_default();
        Membership {
            membership_index: metrics
                .membership_config
                .log_id()
                .map(|l| l.index)
                .unwrap_or(0),
            voters,
            nodes,
            last_log_index: metrics.last_log_index.unwrap_or(0),
            term: metrics.current_term,
            matched,
        }
    }

    /// Adds a server as a learner (it receives the log but does not vote);
    /// returns once the change is committed, not once it caught up.
    pub async fn add_learner(&self, id: u64, address: String) -> Result<(), RaftError> {
        let _open = self.gate.read().await;
        self.raft
            .add_learner(id, BasicNode { addr: address }, false)
            .await
            .map(|_| ())
            .map_err(membership_error)
    }

    /// Makes learners voters.
    pub async fn promote(&self, ids: std::collections::BTreeSet<u64>) -> Result<(), RaftError> {
        let _open = self.gate.read().await;
        self.raft
            .change_membership(openraft::ChangeMembers::AddVoterIds(ids), false)
            .await
            .map(|_| ())
            .map_err(membership_error)
    }

    /// Removes servers (voters or learners) from the configuration.
    pub async fn remove_servers(
        &self,
        ids: std::collections::BTreeSet<u64>,
    ) -> Result<(), RaftError> {
        let _open = self.gate.read().await;
        let membership = self.membership();
        let voters: std::collections::BTreeSet<u64> =
            membership.voters.intersection(&ids).copied().collect();
        if !voters.is_empty() {
            if voters.len() >= membership.voters.len() {
                return Err(RaftError::Other("cannot remove every voter".into()));
            }
            self.raft
                .change_membership(openraft::ChangeMembers::RemoveVoters(voters), false)
                .await
                .map_err(membership_error)?;
        }
        let learners: std::collections::BTreeSet<u64> = self
            .membership()
            .nodes
            .keys()
            .filter(|id| ids.contains(id))
            .copied()
            .collect();
        if !learners.is_empty() {
            self.raft
                .change_membership(openraft::ChangeMembers::RemoveNodes(learners), false)
                .await
                .map_err(membership_error)?;
        }
        Ok(())
    }

    /// Addresses of every voter.
    pub fn peer_addresses(&self) -> Vec<String> {
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow();
        metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(_, n)| n.addr.clone())
            .collect()
    }

    /// Time since the leader was last heard from (zero on the leader; on
    /// a follower that never heard one, the time since start is unknown
    /// and reported as zero).
    pub fn last_contact(&self) -> Duration {
        if self.is_leader() {
            return Duration::ZERO;
        }
        self.last_heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|at| at.elapsed())
            .unwrap_or_default()
    }

    /// Answers a Raft message from another server (the encoded
    /// [`RaftMessage`] in, the encoded [`RaftAnswer`] out).
    pub async fn handle_message(&self, message: &[u8]) -> Vec<u8> {
        let answer = match serde_json::from_slice::<RaftMessage>(message) {
            Ok(RaftMessage::AppendEntries(request)) => {
                let answer = self.raft.append_entries(request).await;
                if answer.is_ok() {
                    *self.last_heard.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(std::time::Instant::now());
                }
                RaftAnswer::AppendEntries(answer)
            }
            Ok(RaftMessage::Vote(request)) => RaftAnswer::Vote(self.raft.vote(request).await),
            Ok(RaftMessage::InstallSnapshot(request)) => {
                RaftAnswer::InstallSnapshot(self.raft.install_snapshot(request).await)
            }
            Ok(RaftMessage::TimeoutNow { term }) => {
                RaftAnswer::TimeoutNow(self.take_timeout_now(term).await)
            }
            Err(e) => RaftAnswer::Undecodable(e.to_string()),
        };
        serde_json::to_vec(&answer).unwrap_or_default()
    }

    /// Initialises a cluster of `voters` (Raft id → server address) when
    /// this node has no state yet. Every server of a new cluster must call
    /// it with the same voters; a node that already has state ignores it.
    pub async fn initialize_cluster(&self, voters: BTreeMap<u64, String>) -> Result<(), RaftError> {
        if self
            .raft
            .is_initialized()
            .await
            .map_err(|e| RaftError::Other(e.to_string()))?
        {
            return Ok(());
        }
        let members: BTreeMap<u64, BasicNode> = voters
            .into_iter()
            .map(|(id, addr)| (id, BasicNode { addr }))
            .collect();
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(openraft::error::RaftError::APIError(
                openraft::error::InitializeError::NotAllowed(_),
            )) => Ok(()),
            Err(e) => Err(RaftError::Other(e.to_string())),
        }
    }

    /// Waits until some leader is known, up to `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> bool {
        let mut metrics = self.raft.metrics();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if metrics.borrow().current_leader.is_some() {
                return true;
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => continue,
                _ => return false,
            }
        }
    }

    /// Takes a snapshot now.
    pub async fn snapshot(&self) -> Result<(), RaftError> {
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| RaftError::Other(e.to_string()))
    }

    /// Stops the node.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
        self.log.close().await;
    }
}

/// Takes a snapshot whenever the state machine says one is due (by size,
/// beside openraft's count of entries): woken by applies that pass the
/// log budget, and every `interval` to notice a store that shrank.
async fn run_snapshot_policy(
    raft: Raft<TypeConfig>,
    state_machine: StateMachine,
    interval: Duration,
) {
    loop {
        tokio::select! {
            _ = state_machine.wanted().notified() => {}
            _ = tokio::time::sleep(interval) => {}
        }
        if raft.metrics().borrow().running_state.is_err() {
            return;
        }
        if state_machine.snapshot_due() && raft.trigger().snapshot().await.is_err() {
            return;
        }
    }
}

fn membership_error(
    e: openraft::error::RaftError<u64, openraft::error::ClientWriteError<u64, BasicNode>>,
) -> RaftError {
    match e {
        openraft::error::RaftError::APIError(
            openraft::error::ClientWriteError::ForwardToLeader(f),
        ) => RaftError::NotLeader {
            leader: f.leader_node.map(|n| n.addr),
        },
        other => RaftError::Other(other.to_string()),
    }
}

/// The Raft configuration as [`RaftNode::membership`] reads it.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    /// Voting members.
    pub voters: std::collections::BTreeSet<u64>,
    /// Every member (voters and learners) with its address.
    pub nodes: BTreeMap<u64, String>,
    /// This node's last log index.
    pub last_log_index: u64,
    /// The current term.
    pub term: u64,
    /// On the leader: the last log index each follower is known to hold
    /// (absent for followers replication has not reached yet).
    pub matched: BTreeMap<u64, u64>,
    /// The log index of the membership in force (a server added by it
    /// has been reached once its matched index passes this).
    pub membership_index: u64,
}

async fn client_write(
    raft: &Raft<TypeConfig>,
    command: Command,
) -> Result<(u64, CommandResult), RaftError> {
    let writes = match &command {
        Command::Batch(commands) => commands.len(),
        _ => 1,
    };
    let started = std::time::Instant::now();
    match raft.client_write(command).await {
        Ok(response) => {
            // hashicorp/raft's names: each write applied, and the time from
            // dispatch to commit on the leader.
            metrics::counter!("raft.apply").increment(writes as u64);
            metrics::histogram!("raft.commitTime").record(legate_telemetry::millis_since(started));
            Ok((response.log_id.index, response.data))
        }
        Err(openraft::error::RaftError::APIError(
            openraft::error::ClientWriteError::ForwardToLeader(f),
        )) => Err(RaftError::NotLeader {
            leader: f.leader_node.map(|n| n.addr),
        }),
        Err(e) => Err(RaftError::Other(e.to_string())),
    }
}

/// Gathers queued writes into one log entry at a time.
async fn run_batcher(
    raft: Raft<TypeConfig>,
    mut pending: tokio::sync::mpsc::Receiver<PendingWrite>,
    gate: Arc<tokio::sync::RwLock<()>>,
) {
    // A large write (a snapshot restore) that arrived while a batch was
    // being gathered goes into the next entry, alone.
    let mut carried: Option<PendingWrite> = None;
    loop {
        let first = match carried.take() {
            Some(write) => write,
            None => match pending.recv().await {
                Some(write) => write,
                None => return,
            },
        };
        // Held while a leadership transfer runs (writes gathered meanwhile
        // then meet "not the leader" and are forwarded).
        let _open = gate.read().await;
        let mut bytes = value_bytes(&first.0);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match pending.try_recv() {
                Ok(next) if value_bytes(&next.0) > MAX_BATCH_BYTES => {
                    carried = Some(next);
                    break;
                }
                Ok(next) => {
                    bytes += value_bytes(&next.0);
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        if batch.len() == 1 {
            let (command, reply) = batch.pop().expect("one write");
            let _ = reply.send(client_write(&raft, command).await);
            continue;
        }
        let (commands, replies): (Vec<Command>, Vec<_>) = batch.into_iter().unzip();
        match client_write(&raft, Command::Batch(commands)).await {
            Ok((index, CommandResult::Batch(results))) if results.len() == replies.len() => {
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok((index, result)));
                }
            }
            Ok((_, other)) => {
                for reply in replies {
                    let _ = reply.send(Err(RaftError::Other(format!(
                        "unexpected batch result {other:?}"
                    ))));
                }
            }
            Err(e) => {
                let message = e.to_string();
                let leader = match &e {
                    RaftError::NotLeader { leader } => Some(leader.clone()),
                    _ => None,
                };
                for reply in replies {
                    let error = match &leader {
                        Some(leader) => RaftError::NotLeader {
                            leader: leader.clone(),
                        },
                        None => RaftError::Other(message.clone()),
                    };
                    let _ = reply.send(Err(error));
                }
            }
        }
    }
}

#[cfg(test)]
mod storage_tests;
#[cfg(test)]
mod tests;
