//! Config-entry semantics for the mesh: typed views of the routing kinds
//! (`service-defaults`, `proxy-defaults`, `service-router`,
//! `service-splitter`, `service-resolver`), the per-entry and cross-entry
//! validation Consul applies at write time, and the discovery-chain
//! compiler — a pure function of entries and a request.
//!
//! Pure: no IO. Depends on `legate-types` and `legate-filter` only.

pub mod central_config;
pub mod compile;
pub mod entries;
pub mod entries_more;
pub mod graph;
pub mod intentions;
pub mod normalize;

pub use compile::{compile, CompileRequest, CompiledChain};
pub use entries::validate_entry;
pub use graph::{
    validate_graph, validate_l7_intentions, with_change, INTENTION_PROTOCOL_KINDS, ROUTING_KINDS,
};
pub use normalize::{normalize_entry, normalize_intentions};
