//! The server port (8300): one TCP listener multiplexed by the first byte
//! of each connection, as Consul's is — RPC calls, Raft messages, and TLS
//! (whose ALPN protocol names the kind; see [`tls`]) — with length-prefixed frames, a pooled dialer, and the `ServerRpc`
//! trait carried over it (`RemoteRpc` on the calling side, [`serve_rpc`]
//! on the answering side) so followers and client agents can forward.
//!
//! Frames are a 4-byte big-endian length and a JSON body (the types use
//! serde features that only self-describing formats decode). One request
//! is outstanding per connection; the pool opens more connections for
//! concurrent calls (blocking queries hold theirs for minutes), except
//! through mesh gateways, where a few multiplexed connections carry every
//! call (see `mux`).

mod frame;
mod listener;
mod mux;
mod pool;
pub mod router;
mod server_rpc;
pub mod tls;
pub mod tunnel;

pub use frame::{read_frame, write_frame, MAX_FRAME};
pub use listener::{Connection, FrameHandler, Listener, StreamHandler};
pub use pool::{CallError, Dial, Pool, MAX_MUX_CONNS};
pub use router::{Route, Router};
pub use server_rpc::{
    serve_rpc, CrossDatacenter, Forwarding, Leadership, Prepared, RemoteRpc, RpcHandler,
    ServerPool, TokenHook, CALLS,
};
pub use tls::TlsSettings;

/// What a connection carries, named by its first byte (Consul's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Server RPC calls (`ServerRpc`).
    Rpc = 0,
    /// Raft messages between servers.
    Raft = 1,
    /// Server RPC calls, many in flight on one connection (Consul's
    /// `RPCMultiplexV2` byte); answered by the [`Kind::Rpc`] handler.
    RpcMux = 4,
    /// WAN gossip datagrams through mesh gateways (TLS only: its ALPN
    /// protocol names it; no first byte does). Consul numbers gossip 6.
    WanGossip = 6,
}

impl Kind {
    /// The kind a first byte names.
    pub fn from_byte(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Rpc),
            1 => Some(Kind::Raft),
            4 => Some(Kind::RpcMux),
            _ => None,
        }
    }
}
