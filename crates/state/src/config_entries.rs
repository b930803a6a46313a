//! The config-entry table: one row per (kind, name).

use legate_types::config_entry::ConfigEntry;
use legate_types::RaftIndex;

use crate::{Changes, Table, Tables};

impl Tables {
    /// Writes an entry; `false` when a CAS condition failed.
    pub(crate) fn config_entry_set(
        &mut self,
        index: u64,
        entry: &ConfigEntry,
        cas: Option<u64>,
        changes: &mut Changes,
    ) -> bool {
        let key = (entry.kind.clone(), entry.name.clone());
        let existing = self.config_entries.get(&key);
        match (cas, existing) {
            (Some(0), Some(_)) => return false,
            (Some(i), Some(e)) if i != 0 && e.raft.modify_index != i => return false,
            (Some(i), None) if i != 0 => return false,
            _ => {}
        }
        let mut entry = entry.clone();
        entry.raft = RaftIndex {
            create_index: existing.map(|e| e.raft.create_index).unwrap_or(index),
            modify_index: index,
        };
        if existing.is_some_and(|e| e.without_index() == entry.without_index()) {
            return true;
        }
        self.config_entries.insert(key, entry);
        self.bump(Table::ConfigEntries, index, changes);
        true
    }

    /// Deletes an entry; `false` when a CAS condition failed.
    pub(crate) fn config_entry_delete(
        &mut self,
        index: u64,
        kind: &str,
        name: &str,
        cas: Option<u64>,
        changes: &mut Changes,
    ) -> bool {
        let key = (kind.to_string(), name.to_string());
        match (cas, self.config_entries.get(&key)) {
            (Some(i), Some(e)) if e.raft.modify_index != i => return false,
            (Some(_), None) => return false,
            (_, None) => return true,
            _ => {}
        }
        self.config_entries.remove(&key);
        self.bump(Table::ConfigEntries, index, changes);
        true
    }

    // ----- reads -----

    /// One entry, with the table's index.
    pub fn config_entry(&self, kind: &str, name: &str) -> (u64, Option<ConfigEntry>) {
        (
            self.table_index(Table::ConfigEntries),
            self.config_entries
                .get(&(kind.to_string(), name.to_string()))
                .cloned(),
        )
    }

    /// Every entry of one kind.
    pub fn config_entries_of_kind(&self, kind: &str) -> (u64, Vec<ConfigEntry>) {
        let entries = self
            .config_entries
            .range((kind.to_string(), String::new())..)
            .take_while(|((k, _), _)| k == kind)
            .map(|(_, e)| e.clone())
            .collect();
        (self.table_index(Table::ConfigEntries), entries)
    }

    /// Every entry whose kind is in `kinds` (all kinds when empty): the
    /// kind-aware listing replication uses, so a reader never receives a kind
    /// it cannot decode.
    pub fn config_entries_of_kinds(&self, kinds: &[String]) -> (u64, Vec<ConfigEntry>) {
        let entries = self
            .config_entries
            .values()
            .filter(|e| kinds.is_empty() || kinds.contains(&e.kind))
            .cloned()
            .collect();
        (self.table_index(Table::ConfigEntries), entries)
    }
}
