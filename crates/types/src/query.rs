//! The request envelope every server endpoint receives, and the metadata
//! every read returns (the `X-Consul-*` headers).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default wait of a blocking query (Consul's `default_query_time`).
pub const DEFAULT_BLOCKING_WAIT: Duration = Duration::from_secs(300);
/// Longest wait of a blocking query (Consul's `max_query_time`).
pub const MAX_BLOCKING_WAIT: Duration = Duration::from_secs(600);

/// The longest wait anything honours, whatever is configured (a day).
pub const WAIT_CEILING: Duration = Duration::from_secs(24 * 3600);

/// Read consistency mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Consistency {
    /// Read from the leader without a quorum check.
    #[default]
    Default,
    /// Read from any server.
    Stale,
    /// Read from the leader after confirming leadership.
    Consistent,
}

impl Consistency {
    /// The value of `X-Consul-Effective-Consistency`.
    pub fn header_value(self) -> &'static str {
        match self {
            Consistency::Default => "leader",
            Consistency::Stale => "stale",
            Consistency::Consistent => "consistent",
        }
    }
}

/// Options of a read: datacenter, consistency, blocking, token, filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct QueryOptions {
    /// Target datacenter (empty: the local one).
    pub datacenter: String,
    /// Consistency mode.
    pub consistency: Consistency,
    /// Block until the result's index exceeds this (0: do not block).
    pub min_index: u64,
    /// Longest time to block (agents clamp it to `max_query_time`).
    pub max_wait: Option<Duration>,
    /// The request's ACL token.
    pub token: String,
    /// A `?filter=` expression.
    pub filter: String,
    /// Sort rows by estimated round trip from this node (`?near=`; the
    /// agent resolves `_agent` to its own name; `_ip` names the node at
    /// [`QueryOptions::source_ip`]).
    #[serde(default)]
    pub near: String,
    /// The requester's address, for `?near=_ip`.
    #[serde(default)]
    pub source_ip: String,
    /// With a stale read: the most a server may lag behind the leader
    /// (by the time since it last heard from it) and still answer;
    /// beyond it the read goes to the leader (`discovery_max_stale`,
    /// DNS's `max_stale`).
    #[serde(default)]
    pub max_stale: Option<Duration>,
}

impl QueryOptions {
    /// The effective wait of a blocking query: the asked wait (default
    /// 5m). Agents resolve it against `default_query_time` and
    /// `max_query_time` before it is sent, and servers clamp it to their
    /// own `max_query_time`; [`WAIT_CEILING`] only keeps deadlines sane.
    pub fn effective_wait(&self) -> Duration {
        match self.max_wait {
            Some(w) if w.is_zero() => DEFAULT_BLOCKING_WAIT,
            Some(w) => w.min(WAIT_CEILING),
            None => DEFAULT_BLOCKING_WAIT,
        }
    }
}

/// Options of a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct WriteOptions {
    /// Target datacenter (empty: the local one).
    pub datacenter: String,
    /// The request's ACL token.
    pub token: String,
}

/// Metadata of a read, sent back as `X-Consul-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct QueryMeta {
    /// The result's index (never 0).
    pub index: u64,
    /// Whether a leader is known.
    pub known_leader: bool,
    /// Time since the serving server last heard from the leader.
    pub last_contact: Duration,
    /// The consistency the read was served with.
    pub consistency: Consistency,
    /// Some rows were left out because the token may not read them
    /// (`X-Consul-Results-Filtered-By-ACLs`).
    #[serde(default)]
    pub results_filtered_by_acls: bool,
}

/// A read result with its metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Queried<T> {
    /// Metadata.
    pub meta: QueryMeta,
    /// The value.
    pub value: T,
}
