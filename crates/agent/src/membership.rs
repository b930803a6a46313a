//! The agent's view of cluster membership (LAN gossip), behind a trait so
//! the agent does not depend on how gossip is done; the binary plugs the
//! gossip member in. Without one (`-dev`), the agent is its only member.

use std::collections::BTreeMap;

use async_trait::async_trait;

/// Consul's member status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberStatus {
    /// Reachable (1).
    Alive = 1,
    /// Left gracefully (3).
    Left = 3,
    /// Stopped answering (4).
    Failed = 4,
}

/// One member as `/v1/agent/members` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// Node name.
    pub name: String,
    /// Gossip address.
    pub addr: String,
    /// Gossip port.
    pub port: u16,
    /// Serf-style tags (`role`, `dc`, `id`, `port`, `build`, `ft_*`, ...).
    pub tags: BTreeMap<String, String>,
    /// Status.
    pub status: MemberStatus,
}

/// The gossip keyring as `keyring -list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyringStatus {
    /// Each installed key (primary first) and how many alive members hold it.
    pub keys: Vec<(String, usize)>,
    /// How many members are alive.
    pub num_nodes: usize,
}

/// A keyring change (`keyring -install|-use|-remove`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyringOp {
    /// Install a key on every member.
    Install,
    /// Make a key primary on every member.
    Use,
    /// Remove a key from every member.
    Remove,
}

/// Membership operations.
#[async_trait]
pub trait Membership: Send + Sync + 'static {
    /// Every member known, this agent included.
    fn members(&self) -> Vec<MemberInfo>;
    /// Contacts `addresses` (`host[:port]`); how many answered.
    async fn join(&self, addresses: Vec<String>) -> Result<usize, String>;
    /// Marks a failed member as left on every member (and with `prune`,
    /// forgets it altogether); `false` when no member has that name.
    async fn force_leave(&self, node: &str, prune: bool) -> bool;
    /// Leaves gracefully.
    async fn leave(&self);
    /// The keyring; `None` when gossip is not encrypted.
    fn keyring(&self) -> Option<KeyringStatus>;
    /// Changes the keyring of every member (spread by gossip).
    async fn change_keyring(&self, op: KeyringOp, key: &str) -> Result<(), String>;
    /// This agent's network coordinate in this pool, once measured.
    fn coordinate(&self) -> Option<legate_types::coordinate::Coordinate> {
        None
    }
}
