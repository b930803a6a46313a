//! Sessions: the basis of locks and leader election in the KV store.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::duration::parse_go_duration;
use crate::RaftIndex;

/// The default lock delay (15s).
pub const DEFAULT_LOCK_DELAY: Duration = Duration::from_secs(15);
/// The shortest session TTL unless `session_ttl_min` says otherwise.
pub const DEFAULT_SESSION_TTL_MIN: Duration = Duration::from_secs(10);
/// The longest lock delay honoured (Consul's `MaxLockDelay`): a session
/// asking for more is stored as asked, but its keys wait at most this long.
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);
/// The longest session TTL.
pub const SESSION_TTL_MAX: Duration = Duration::from_secs(24 * 3600);

/// A service check a session is tied to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceCheckRef {
    /// Check id.
    #[serde(rename = "ID")]
    pub id: String,
    /// Namespace (always `default` here).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// What happens to held locks when the session is invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SessionBehavior {
    /// Release the locks.
    #[default]
    Release,
    /// Delete the locked keys.
    Delete,
}

/// A session as stored and returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Session {
    /// Session UUID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Display name.
    #[serde(default)]
    pub name: String,
    /// Node the session lives on.
    #[serde(default)]
    pub node: String,
    /// Lock delay, in nanoseconds on the wire (as Consul returns it).
    #[serde(default)]
    pub lock_delay: u64,
    /// Release or delete.
    #[serde(default)]
    pub behavior: SessionBehavior,
    /// Time to live (empty: none).
    #[serde(rename = "TTL", default)]
    pub ttl: String,
    /// Node checks that invalidate the session.
    #[serde(default)]
    pub node_checks: Vec<String>,
    /// Service checks that invalidate the session.
    #[serde(default)]
    pub service_checks: Vec<ServiceCheckRef>,
    /// Raft bookkeeping.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

/// The body of `PUT /v1/session/create`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct SessionCreateRequest {
    /// Display name.
    #[serde(default)]
    pub name: String,
    /// Node (default: the agent's).
    #[serde(default)]
    pub node: String,
    /// Lock delay: a Go duration string or nanoseconds.
    #[serde(default, deserialize_with = "lock_delay")]
    pub lock_delay: Option<Duration>,
    /// Release or delete.
    #[serde(default)]
    pub behavior: Option<SessionBehavior>,
    /// TTL.
    #[serde(rename = "TTL", default)]
    pub ttl: String,
    /// Deprecated list of node checks.
    #[serde(default)]
    pub checks: Option<Vec<String>>,
    /// Node checks.
    #[serde(default)]
    pub node_checks: Option<Vec<String>>,
    /// Service checks.
    #[serde(default)]
    pub service_checks: Option<Vec<ServiceCheckRef>>,
}

fn lock_delay<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => parse_go_duration(&s)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(serde_json::Value::Number(n)) => {
            let raw = n
                .as_u64()
                .ok_or_else(|| serde::de::Error::custom("LockDelay must not be negative"))?;
            // Consul treats numbers below 1000 as seconds and the rest as
            // nanoseconds (`lockDelayMinThreshold`).
            if raw < 1000 {
                Ok(Some(Duration::from_secs(raw)))
            } else {
                Ok(Some(Duration::from_nanos(raw)))
            }
        }
        Some(other) => Err(serde::de::Error::custom(format!(
            "invalid LockDelay {other}"
        ))),
    }
}
