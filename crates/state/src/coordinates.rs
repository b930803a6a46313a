//! The coordinate table: one network coordinate per catalog node (Consul
//! keeps one per node and segment; Legate has no segments).

use legate_types::coordinate::{Coordinate, CoordinateEntry};

use crate::{Changes, Table, Tables};

impl Tables {
    /// Stores `updates`, dropping those of nodes the catalog does not
    /// hold and invalid ones (a batch from an agent of another version).
    pub(crate) fn coordinates_update(
        &mut self,
        index: u64,
        updates: &[CoordinateEntry],
        changes: &mut Changes,
    ) {
        let mut changed = false;
        for update in updates {
            if !self.nodes.contains_key(&update.node) || !update.coord.is_valid() {
                continue;
            }
            self.coordinates
                .insert(update.node.clone(), update.coord.clone());
            changed = true;
        }
        if changed {
            self.bump(Table::Coordinates, index, changes);
        }
    }

    /// Every node's coordinate, by node name.
    pub fn coordinates(&self) -> impl Iterator<Item = (&String, &Coordinate)> {
        self.coordinates.iter()
    }

    /// One node's coordinate.
    pub fn coordinate(&self, node: &str) -> Option<&Coordinate> {
        self.coordinates.get(node)
    }
}
