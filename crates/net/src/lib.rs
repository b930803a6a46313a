//! Listening sockets that one client cannot exhaust: connections counted
//! per client address with a cap ([`ClientLimit`]), accept errors (a full
//! file table above all) answered with a growing back-off instead of a
//! busy loop ([`Acceptor`]), and log lines about them throttled
//! ([`Throttle`]). Every TCP listener of the agent (HTTP, gRPC, DNS over
//! TCP, the server port) accepts through it. [`tls`] builds the rustls
//! configurations of every TLS listener and dialer; [`datagrams`] reads
//! and sends UDP datagrams in batches (the DNS server's sockets);
//! [`bind_tcp`] binds those TCP listeners with an accept queue as long as
//! the kernel allows, as Go's (and so Consul's) listeners have it.
//!
//! Depends on nothing of Legate's.

mod accept;
pub mod check_tls;
pub mod datagrams;
mod listen;
mod throttle;
pub mod tls;

pub use accept::{
    Acceptor, ClientCount, ClientLimit, ClientSlot, Connections, Incoming, LimitedStream,
};
pub use listen::bind_tcp;
pub use throttle::Throttle;
