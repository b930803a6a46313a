//! xDS: Envoy resources from proxycfg snapshots (a pure function) and the
//! gRPC Aggregated Discovery Service (state-of-the-world and delta) that
//! serves them to Envoy, to `legate connect proxy` and to proxyless gRPC
//! clients (Connect-native services using gRPC's own xDS client).
//!
//! Depends on types, chain and proxycfg; tonic and the Envoy protos stay here.

pub mod ads_service;
pub mod bootstrap;
pub mod grpc;
mod held;
pub mod history;
pub mod json;
pub mod l7;
pub mod mesh_gateway;
pub mod metrics_service;
pub mod prepared_query;
mod published;
pub mod resources;
pub mod server;
pub mod update_rate;

pub use server::{AdsServer, Metrics, SeeAll, SnapshotSource, SnapshotView, StreamAcl};

pub use envoy_types;
