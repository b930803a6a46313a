//! WAN gossip datagrams that travel through mesh gateways instead of UDP
//! (WAN federation via mesh gateways): the value the gossip loop and the
//! server port's tunnel hand each other over channels.
//!
//! A member stays identified by its advertised gossip address (foca's
//! key, unique per member) wherever it is; whether a datagram for it goes
//! out on UDP or through a gateway is decided by its name, `<node>.<dc>`:
//! a member of another datacenter is reached through the gateways, with
//! the TLS server name `<node>.server.<dc>.<domain>`.

use std::net::SocketAddr;

/// One gossip datagram (sealed, as it would go on UDP) on its way through
/// the gateways, or arrived through them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedDatagram {
    /// Outbound: the member it goes to. Inbound: the sender (as the
    /// tunnel's hello named it, checked against its certificate).
    pub peer: SocketAddr,
    /// That member's WAN name (`<node>.<dc>`), when known.
    pub name: Option<String>,
    /// The datagram.
    pub datagram: Vec<u8>,
}
