//! Config-entry semantics for the mesh: typed views of the routing kinds
//! (`service-defaults`, `proxy-defaults`, `service-router`,
//! `service-splitter`, `service-resolver`) and the per-entry validation
//! Consul applies at write time. The discovery-chain compiler will live
//! here too, as a pure function of entries.
//!
//! Pure: no IO. Depends on `legate-types` and `legate-filter` only.

pub mod entries;
pub mod graph;

pub use entries::validate_entry;
pub use graph::{validate_graph, with_change, ROUTING_KINDS};
