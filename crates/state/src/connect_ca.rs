//! The Connect CA tables: the roots (with the private keys the built-in
//! provider signs with) and the CA configuration.

use legate_types::connect::{CaConfiguration, CaRoot};
use legate_types::RaftIndex;
use serde::{Deserialize, Serialize};

use crate::{Changes, Table, Tables};

/// A root as stored: the public shape plus the signing key, which never
/// leaves the servers.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCaRoot {
    /// What `/v1/connect/ca/roots` shows.
    pub root: CaRoot,
    /// PEM private key of the root (empty when the provider keeps it); in
    /// a secondary, the key of its own intermediate.
    pub private_key: String,
    /// In a secondary: the intermediate the primary signed for it, which
    /// signs this datacenter's leaves (`None` in the primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_cert: Option<String>,
}

impl std::fmt::Debug for StoredCaRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredCaRoot")
            .field("root", &self.root)
            .field("private_key", &"<redacted>")
            .finish()
    }
}

impl Tables {
    /// The CA roots (active first) with the roots table's index.
    pub fn ca_roots(&self) -> (u64, &[StoredCaRoot]) {
        (self.table_index(Table::CaRoots), &self.ca_roots)
    }

    /// The CA configuration with its table's index.
    pub fn ca_config(&self) -> (u64, Option<&CaConfiguration>) {
        (self.table_index(Table::CaConfig), self.ca_config.as_ref())
    }

    /// Replaces the roots and/or the configuration in one step. With `cas`,
    /// only when the roots table's index equals it (0: no roots yet), so two
    /// leaders racing to initialise or rotate cannot both win.
    pub(crate) fn ca_set(
        &mut self,
        index: u64,
        roots: Option<&[StoredCaRoot]>,
        config: Option<&CaConfiguration>,
        cas: Option<u64>,
        changes: &mut Changes,
    ) -> bool {
        if cas.is_some_and(|cas| cas != self.table_index(Table::CaRoots)) {
            return false;
        }
        if let Some(roots) = roots {
            let mut next: Vec<StoredCaRoot> = roots.to_vec();
            for stored in &mut next {
                let created = self
                    .ca_roots
                    .iter()
                    .find(|old| old.root.id == stored.root.id)
                    .map(|old| old.root.raft.create_index)
                    .unwrap_or(index);
                stored.root.raft = RaftIndex {
                    create_index: created,
                    modify_index: index,
                };
            }
            // Active first, then in the order given.
            next.sort_by_key(|r| !r.root.active);
            self.ca_roots = next;
            self.bump(Table::CaRoots, index, changes);
        }
        if let Some(config) = config {
            let mut config = config.clone();
            config.raft = RaftIndex {
                create_index: self
                    .ca_config
                    .as_ref()
                    .map(|c| c.raft.create_index)
                    .unwrap_or(index),
                modify_index: index,
            };
            self.ca_config = Some(config);
            self.bump(Table::CaConfig, index, changes);
        }
        true
    }
}
