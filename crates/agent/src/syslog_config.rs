//! `enable_syslog` and `syslog_facility` (Consul's `LOCAL0` by default):
//! the agent's log lines also go to the local syslog daemon, under the
//! tag `consul`, at the priorities Consul gives its levels.

use serde_json::{Map, Value};

use crate::config::{get_bool, get_str, ConfigError};

/// The facilities Consul's syslog library knows, with their numbers.
const FACILITIES: &[(&str, u8)] = &[
    ("KERN", 0),
    ("USER", 1),
    ("MAIL", 2),
    ("DAEMON", 3),
    ("AUTH", 4),
    ("SYSLOG", 5),
    ("LPR", 6),
    ("NEWS", 7),
    ("UUCP", 8),
    ("CRON", 9),
    ("AUTHPRIV", 10),
    ("FTP", 11),
    ("LOCAL0", 16),
    ("LOCAL1", 17),
    ("LOCAL2", 18),
    ("LOCAL3", 19),
    ("LOCAL4", 20),
    ("LOCAL5", 21),
    ("LOCAL6", 22),
    ("LOCAL7", 23),
];

/// Where syslog lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyslogConfig {
    /// The facility's number.
    pub facility: u8,
}

/// Reads the two keys: `None` unless `enable_syslog`; an unknown facility
/// stops the agent with Consul's words.
pub fn parse(map: &Map<String, Value>) -> Result<Option<SyslogConfig>, ConfigError> {
    let name = get_str(map, &["syslog_facility"])?.unwrap_or_else(|| "LOCAL0".into());
    let facility = FACILITIES
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(&name))
        .map(|(_, number)| *number)
        .ok_or_else(|| {
            ConfigError(format!(
                "Syslog setup failed: invalid syslog facility {name:?}"
            ))
        })?;
    Ok(get_bool(map, &["enable_syslog"])?
        .unwrap_or(false)
        .then_some(SyslogConfig { facility }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facilities_are_named_as_consul_names_them() {
        let parse_json = |v: serde_json::Value| parse(v.as_object().unwrap());
        assert_eq!(parse_json(serde_json::json!({})).unwrap(), None);
        assert_eq!(
            parse_json(serde_json::json!({"enable_syslog": true})).unwrap(),
            Some(SyslogConfig { facility: 16 })
        );
        assert_eq!(
            parse_json(serde_json::json!({"enable_syslog": true, "syslog_facility": "daemon"}))
                .unwrap(),
            Some(SyslogConfig { facility: 3 })
        );
        let err = parse_json(serde_json::json!({"syslog_facility": "LOCAL9"})).unwrap_err();
        assert!(err.0.contains("invalid syslog facility"), "{}", err.0);
    }
}
