//! Shared domain types of Legate: the wire shapes of Consul's `/v1` API
//! (PascalCase JSON), typed identifiers, the request envelope carried across
//! the RPC boundary, and the [`rpc::ServerRpc`] trait that HTTP handlers reach
//! servers through.
//!
//! This crate is a leaf: it must never depend on another Legate crate.

pub mod acl;
pub mod acl_auth;
pub mod binary;
pub mod catalog;
pub mod cidr;
pub mod config_entry;
pub mod connect;
pub mod coordinate;
pub mod duration;
pub mod error;
pub mod event;
pub mod federation;
pub mod federation_state;
pub mod gateway_locator;
pub mod intention;
pub mod keys;
pub mod kv;
pub mod locality;
pub mod memory;
pub mod meta;
pub mod meta_map;
pub mod prepared_query;
pub mod proxy_status;
pub mod query;
pub mod rpc;
pub mod session;
pub mod sorted_map;
pub mod traffic;
pub mod txn;
pub mod ui;
pub mod wan_relay;

pub use catalog::*;
pub use error::RpcError;
pub use kv::*;
pub use query::*;
pub use session::*;

/// The Consul HTTP API level Legate implements; reported as `Config.Version`
/// by `/v1/agent/self` because client libraries branch on it.
pub const CONSUL_API_VERSION: &str = "1.22.0";

/// Legate's own version.
pub const LEGATE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Raft index bookkeeping carried by every stored row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RaftIndex {
    /// Index of the write that created the row.
    #[serde(rename = "CreateIndex", default)]
    pub create_index: u64,
    /// Index of the write that last modified the row.
    #[serde(rename = "ModifyIndex", default)]
    pub modify_index: u64,
}

impl RaftIndex {
    /// An index pair for a row created and modified at `index`.
    pub fn at(index: u64) -> Self {
        RaftIndex {
            create_index: index,
            modify_index: index,
        }
    }
}
