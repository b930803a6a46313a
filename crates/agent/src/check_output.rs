//! What is kept of a check's output: at most `check_output_max_size`
//! bytes (Consul's 4096), or nothing with `discard_check_output` (fewer
//! Raft writes when outputs carry timestamps). Applied where every result
//! lands, so TTL updates, probes and alias checks follow the same rule.
//! And how soon an output change without a status change reaches the
//! catalog: `check_update_interval` (Consul's 5m; zero: at once).

use serde_json::{Map, Value};

use crate::config::{get_bool, get_int, get_str, ConfigError};

/// Consul's default `check_output_max_size`.
pub const DEFAULT_MAX_SIZE: usize = 4096;
/// Consul's default `check_update_interval`.
pub const DEFAULT_UPDATE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

/// The rule for check outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOutputPolicy {
    /// The most bytes kept.
    pub max_size: usize,
    /// Keep no output at all.
    pub discard: bool,
    /// How long an output change without a status change may wait
    /// before it is synced (`check_update_interval`).
    pub update_interval: std::time::Duration,
}

impl Default for CheckOutputPolicy {
    fn default() -> Self {
        CheckOutputPolicy {
            max_size: DEFAULT_MAX_SIZE,
            discard: false,
            update_interval: DEFAULT_UPDATE_INTERVAL,
        }
    }
}

impl CheckOutputPolicy {
    /// The output to store: empty when discarded, else cut at `max_size`
    /// bytes (on a character boundary) with Consul's note of how much was
    /// kept.
    pub fn apply(&self, output: &str) -> String {
        if self.discard {
            return String::new();
        }
        if output.len() <= self.max_size {
            return output.to_string();
        }
        let mut cut = self.max_size;
        while !output.is_char_boundary(cut) {
            cut -= 1;
        }
        format!(
            "{} ... (captured {} of {} bytes)",
            &output[..cut],
            cut,
            output.len()
        )
    }
}

/// Reads `check_output_max_size` (a positive number) and
/// `discard_check_output`.
pub fn parse(map: &Map<String, Value>) -> Result<CheckOutputPolicy, ConfigError> {
    let max_size = match get_int(map, &["check_output_max_size"])? {
        None => DEFAULT_MAX_SIZE,
        Some(n) if n >= 1 => n as usize,
        Some(_) => return Err(ConfigError("check_output_max_size must be positive".into())),
    };
    let update_interval = match get_str(map, &["check_update_interval"])? {
        None => DEFAULT_UPDATE_INTERVAL,
        Some(text) => legate_types::duration::parse_go_duration(&text).map_err(|e| {
            ConfigError(format!(
                "check_update_interval: invalid duration {text:?}: {e}"
            ))
        })?,
    };
    Ok(CheckOutputPolicy {
        max_size,
        discard: get_bool(map, &["discard_check_output"])?.unwrap_or(false),
        update_interval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_cut_or_dropped() {
        let policy = CheckOutputPolicy {
            max_size: 4,
            discard: false,
            ..Default::default()
        };
        assert_eq!(policy.apply("ok"), "ok");
        assert_eq!(policy.apply("abcdefgh"), "abcd ... (captured 4 of 8 bytes)");
        assert_eq!(policy.apply("ééé"), "éé ... (captured 4 of 6 bytes)");
        let discard = CheckOutputPolicy {
            discard: true,
            ..policy
        };
        assert_eq!(discard.apply("anything"), "");
    }
}
