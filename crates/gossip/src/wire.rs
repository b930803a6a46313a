//! Where this member's datagrams go and come from: UDP, and with WAN
//! federation through mesh gateways a relay (two channels the binary
//! connects to the server port's tunnel). A datagram for a member of
//! another datacenter — told by its name, `<node>.<dc>` — goes to the
//! relay; every other one goes out on UDP. Members keep their advertised
//! gossip address as their identity either way.

use std::collections::HashMap;
use std::net::SocketAddr;

use legate_types::federation::split_wan_name;
use legate_types::wan_relay::RelayedDatagram;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::table::Table;

/// The channels of a relay: datagrams for other datacenters' members go
/// out on `outbound`; those that came through the gateways arrive on
/// `inbound`.
pub struct Relay {
    /// This member's datacenter: members of any other are relayed.
    pub datacenter: String,
    /// Datagrams to relay (dropped when the channel is full: gossip
    /// tolerates loss, and its loop never waits on a gateway).
    pub outbound: mpsc::Sender<RelayedDatagram>,
    /// Datagrams relayed to this member.
    pub inbound: mpsc::Receiver<RelayedDatagram>,
}

/// Most members remembered as heard through the relay before their
/// identity reached the member table.
const MAX_HEARD: usize = 4096;

/// This member's way to the others.
pub(crate) struct Wire {
    socket: UdpSocket,
    relay: Option<RelayWire>,
    /// The pool's `network` label of `memberlist.udp.sent`/`.received`.
    network: &'static str,
}

struct RelayWire {
    datacenter: String,
    outbound: mpsc::Sender<RelayedDatagram>,
    inbound: mpsc::Receiver<RelayedDatagram>,
    /// Members heard through the relay (or joined through it) by
    /// address, with their names: answers to them go back that way even
    /// before foca reported them up.
    heard: HashMap<SocketAddr, Option<String>>,
}

impl Wire {
    pub(crate) fn new(socket: UdpSocket, relay: Option<Relay>, network: &'static str) -> Wire {
        Wire {
            network,
            socket,
            relay: relay.map(|r| RelayWire {
                datacenter: r.datacenter,
                outbound: r.outbound,
                inbound: r.inbound,
                heard: HashMap::new(),
            }),
        }
    }

    /// Records a member reached through the relay (a join through a
    /// gateway): datagrams to `addr` are relayed from now on.
    pub(crate) fn heard_of(&mut self, addr: SocketAddr, name: Option<String>) {
        if let Some(relay) = &mut self.relay {
            if relay.heard.len() >= MAX_HEARD && !relay.heard.contains_key(&addr) {
                relay.heard.clear();
            }
            relay.heard.insert(addr, name);
        }
    }

    /// The next datagram, from UDP or the relay, with its sender.
    pub(crate) async fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<(Vec<u8>, SocketAddr)> {
        let network = self.network;
        let received = |len: usize| {
            metrics::counter!("memberlist.udp.received", "network" => network)
                .increment(len as u64);
        };
        let Some(relay) = &mut self.relay else {
            let (len, from) = self.socket.recv_from(buf).await?;
            received(len);
            return Ok((buf[..len].to_vec(), from));
        };
        let relayed = tokio::select! {
            got = self.socket.recv_from(buf) => {
                let (len, from) = got?;
                received(len);
                return Ok((buf[..len].to_vec(), from));
            }
            Some(relayed) = relay.inbound.recv() => relayed,
        };
        self.heard_of(relayed.peer, relayed.name);
        Ok((relayed.datagram, relayed.peer))
    }

    /// Sends a sealed datagram to the member at `to`.
    pub(crate) async fn send(&self, table: &Table, to: SocketAddr, sealed: Vec<u8>) {
        match self.relay_name(table, to) {
            Some((relay, name)) => {
                let relayed = RelayedDatagram {
                    peer: to,
                    name,
                    datagram: sealed,
                };
                if relay.outbound.try_send(relayed).is_err() {
                    tracing::trace!(%to, "gossip: the relay is full; a datagram dropped");
                }
            }
            None => {
                if self.socket.send_to(&sealed, to).await.is_ok() {
                    metrics::counter!("memberlist.udp.sent", "network" => self.network)
                        .increment(sealed.len() as u64);
                }
            }
        }
    }

    /// The relay and the member's name when `to` is reached through it: a
    /// member of another datacenter, or one heard only through it.
    fn relay_name(&self, table: &Table, to: SocketAddr) -> Option<(&RelayWire, Option<String>)> {
        let relay = self.relay.as_ref()?;
        let known = table.by_addr.get(&to).map(|m| m.name.clone());
        let heard = relay.heard.get(&to);
        match known.or_else(|| heard.cloned().flatten()) {
            Some(name) => {
                let (_, datacenter) = split_wan_name(&name).ok()?;
                (datacenter != relay.datacenter).then_some((relay, Some(name)))
            }
            None => heard.is_some().then_some((relay, None)),
        }
    }
}
