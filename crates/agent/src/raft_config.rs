//! `raft_snapshot_threshold`, `raft_snapshot_interval` and
//! `raft_trailing_logs`: when a server snapshots its state and how much
//! log it keeps behind a snapshot (so a follower slightly behind catches
//! up from the log, not from a whole snapshot). Unset keys keep Legate's
//! defaults (8,192 entries, a check every 5 s, 256 entries kept). And
//! `server_rejoin_age_max`: how long a server may have been down before
//! it refuses to start on its old state.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{get_int, get_str, ConfigError};

/// The server's snapshot settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RaftTuning {
    /// Entries since the last snapshot that make a new one due.
    pub snapshot_threshold: Option<u64>,
    /// How often the server checks whether a snapshot is due.
    pub snapshot_interval: Option<Duration>,
    /// Entries kept in the log behind a snapshot.
    pub trailing_logs: Option<u64>,
}

fn positive(map: &Map<String, Value>, key: &str) -> Result<Option<u64>, ConfigError> {
    match get_int(map, &[key])? {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n as u64)),
        Some(n) => Err(ConfigError(format!("{key}: {n} must be positive"))),
    }
}

/// Reads the three keys.
pub fn parse(map: &Map<String, Value>) -> Result<RaftTuning, ConfigError> {
    let snapshot_interval = match get_str(map, &["raft_snapshot_interval"])? {
        None => None,
        Some(text) => {
            let interval = legate_types::duration::parse_go_duration(&text)
                .map_err(|e| ConfigError(format!("raft_snapshot_interval: {e}")))?;
            if interval.is_zero() {
                return Err(ConfigError(
                    "raft_snapshot_interval: must be longer than 0s".into(),
                ));
            }
            Some(interval)
        }
    };
    Ok(RaftTuning {
        snapshot_threshold: positive(map, "raft_snapshot_threshold")?,
        snapshot_interval,
        trailing_logs: match get_int(map, &["raft_trailing_logs"])? {
            None => None,
            Some(n) if n >= 0 => Some(n as u64),
            Some(n) => {
                return Err(ConfigError(format!(
                    "raft_trailing_logs: {n} cannot be negative"
                )))
            }
        },
    })
}

/// Consul's default `server_rejoin_age_max` (a week).
pub const REJOIN_AGE_MAX_DEFAULT: Duration = Duration::from_secs(168 * 3600);
/// The least Consul takes (a smaller value is raised to it, with a
/// warning).
pub const REJOIN_AGE_MAX_FLOOR: Duration = Duration::from_secs(6 * 3600);

/// Reads `server_rejoin_age_max`.
pub fn rejoin_age_max(
    map: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<Duration, ConfigError> {
    let Some(text) = get_str(map, &["server_rejoin_age_max"])? else {
        return Ok(REJOIN_AGE_MAX_DEFAULT);
    };
    let age = legate_types::duration::parse_go_duration(&text)
        .map_err(|e| ConfigError(format!("server_rejoin_age_max: {e}")))?;
    if age < REJOIN_AGE_MAX_FLOOR {
        warnings.push(format!(
            "server_rejoin_age_max: duration '{text}' cannot be less than: 6h0m0s; using 6h0m0s"
        ));
        return Ok(REJOIN_AGE_MAX_FLOOR);
    }
    Ok(age)
}
