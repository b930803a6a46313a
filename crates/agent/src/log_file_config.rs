//! `log_file` and its rotation keys (`log_rotate_bytes`,
//! `log_rotate_duration`, `log_rotate_max_files`), as Consul reads them:
//! a path whose last part is the file name (`consul.log` when the path
//! ends in `/`), rotated by size and age, keeping at most so many old
//! files (0: all; -1: none).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{get_int, get_str, ConfigError};

/// Consul's `log_rotate_duration` default.
pub const DEFAULT_ROTATE_DURATION: Duration = Duration::from_secs(24 * 3600);

/// Where the agent writes its log besides the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFileConfig {
    /// The folder.
    pub dir: PathBuf,
    /// The current file's name in it (`consul.log` by default).
    pub file_name: String,
    /// Rotate once the file holds this many bytes (0: never by size).
    pub rotate_bytes: u64,
    /// Rotate once the file is this old.
    pub rotate_duration: Duration,
    /// Old files kept (0: every one; -1: none).
    pub max_files: i64,
}

/// Reads the keys; `None` without `log_file`.
pub fn parse(map: &Map<String, Value>) -> Result<Option<LogFileConfig>, ConfigError> {
    let rotate_bytes = match get_int(map, &["log_rotate_bytes"])? {
        None => 0,
        Some(n) if n >= 0 => n as u64,
        Some(n) => {
            return Err(ConfigError(format!(
                "log_rotate_bytes: {n} cannot be negative"
            )))
        }
    };
    let rotate_duration = match get_str(map, &["log_rotate_duration"])? {
        None => DEFAULT_ROTATE_DURATION,
        Some(text) => match legate_types::duration::parse_go_duration(&text) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                return Err(ConfigError(
                    "log_rotate_duration: must be longer than 0s".into(),
                ))
            }
            Err(e) => return Err(ConfigError(format!("log_rotate_duration: {e}"))),
        },
    };
    let max_files = match get_int(map, &["log_rotate_max_files"])? {
        None => 0,
        Some(n) if n >= -1 => n,
        Some(n) => {
            return Err(ConfigError(format!(
                "log_rotate_max_files: {n} must be -1 or more"
            )))
        }
    };
    // The rotation keys are checked even without a file to rotate.
    let Some(path) = get_str(map, &["log_file"])?.filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let (dir, file_name) = match path.rsplit_once('/') {
        Some((dir, "")) => (dir.to_string(), "consul.log".to_string()),
        Some((dir, name)) => (dir.to_string(), name.to_string()),
        None => (".".to_string(), path.clone()),
    };
    let dir = if dir.is_empty() && path.starts_with('/') {
        "/".to_string()
    } else {
        dir
    };
    Ok(Some(LogFileConfig {
        dir: PathBuf::from(dir),
        file_name,
        rotate_bytes,
        rotate_duration,
        max_files,
    }))
}
