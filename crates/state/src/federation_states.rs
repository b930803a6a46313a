//! The federation-state table: one [`FederationState`] per datacenter.

use legate_types::federation_state::FederationState;
use legate_types::RaftIndex;

use crate::{Changes, Table, Tables};

impl Tables {
    /// Creates or replaces the state of its datacenter at `index`.
    pub(crate) fn federation_state_set(
        &mut self,
        index: u64,
        state: &FederationState,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if state.datacenter.is_empty() {
            return Err("Missing datacenter name".into());
        }
        let create_index = self
            .federation_states
            .get(&state.datacenter)
            .map(|s| s.raft.create_index)
            .unwrap_or(index);
        let mut stored = state.clone();
        stored.raft = RaftIndex {
            create_index,
            modify_index: index,
        };
        self.federation_states
            .insert(stored.datacenter.clone(), stored);
        self.bump(Table::FederationStates, index, changes);
        Ok(())
    }

    /// Removes the state of `datacenter` (nothing when it has none).
    pub(crate) fn federation_state_delete(
        &mut self,
        index: u64,
        datacenter: &str,
        changes: &mut Changes,
    ) {
        if self.federation_states.remove(datacenter).is_some() {
            self.bump(Table::FederationStates, index, changes);
        }
    }

    /// The state of one datacenter, with the table's index.
    pub fn federation_state(&self, datacenter: &str) -> (u64, Option<FederationState>) {
        (
            self.table_index(Table::FederationStates),
            self.federation_states.get(datacenter).cloned(),
        )
    }

    /// Every state, by datacenter name, with the table's index.
    pub fn federation_states(&self) -> (u64, Vec<FederationState>) {
        (
            self.table_index(Table::FederationStates),
            self.federation_states.values().cloned().collect(),
        )
    }

    /// Whether any federation state is stored (the feature then stays on).
    pub fn has_federation_states(&self) -> bool {
        !self.federation_states.is_empty()
    }
}
