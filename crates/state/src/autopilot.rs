//! Autopilot's configuration as the operator set it
//! (`PUT /v1/operator/autopilot/configuration`), kept in the system
//! metadata table as JSON so snapshots need no new record.

use legate_types::rpc::AutopilotConfiguration;

use crate::Tables;

/// The system metadata key holding the configuration.
const KEY: &str = "autopilot-config";

impl Tables {
    /// The stored configuration, with its Raft indexes (`None`: never
    /// set, the agent configuration applies).
    pub fn autopilot_configuration(&self) -> Option<AutopilotConfiguration> {
        serde_json::from_str(self.system_metadata.get(KEY)?).ok()
    }

    /// Stores `config` at `index`; with `cas`, only if the stored one's
    /// modify index is `cas` (0: none stored yet).
    pub(crate) fn autopilot_config_set(
        &mut self,
        index: u64,
        config: &AutopilotConfiguration,
        cas: Option<u64>,
    ) -> bool {
        let existing = self.autopilot_configuration();
        let current = existing.as_ref().map_or(0, |c| c.modify_index);
        if cas.is_some_and(|cas| cas != current) {
            return false;
        }
        let mut stored = config.clone();
        stored.create_index = existing.map_or(index, |c| c.create_index);
        stored.modify_index = index;
        match serde_json::to_string(&stored) {
            Ok(text) => {
                self.system_metadata.insert(KEY.to_string(), text);
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_follows_the_stored_modify_index() {
        let mut tables = Tables::default();
        assert!(tables.autopilot_configuration().is_none());
        let config = AutopilotConfiguration {
            max_trailing_logs: 10,
            ..Default::default()
        };
        assert!(!tables.autopilot_config_set(5, &config, Some(3)));
        assert!(tables.autopilot_config_set(5, &config, Some(0)));
        let stored = tables.autopilot_configuration().unwrap();
        assert_eq!((stored.create_index, stored.modify_index), (5, 5));
        assert!(!tables.autopilot_config_set(7, &config, Some(0)));
        assert!(tables.autopilot_config_set(7, &config, None));
        let stored = tables.autopilot_configuration().unwrap();
        assert_eq!((stored.create_index, stored.modify_index), (5, 7));
        assert_eq!(stored.max_trailing_logs, 10);
    }
}
