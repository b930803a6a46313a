//! Network coordinates from gossip round trips (Serf's ping delegate): every
//! probe period a member pings a random live member with a small datagram
//! of its own, the answer carries the other's coordinate, and the measured
//! round trip moves this member's Vivaldi estimate. The answers also fill a
//! cache of the others' coordinates. Members of older versions drop these
//! datagrams (they decode as neither foca's messages nor a state), so they
//! only go without coordinates.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use legate_types::coordinate::{Coordinate, CoordinateConfig, VivaldiClient};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// A ping datagram's kind byte.
pub(crate) const PING: u8 = 2;
/// A ping answer's kind byte.
pub(crate) const ACK: u8 = 3;

/// Pings unanswered after this long are forgotten.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many pings wait for an answer.
const MAX_PENDING: usize = 64;

/// This member's coordinate and the last one seen of every other member.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CoordinateView {
    /// This member's estimate (`None` until gossip started).
    pub own: Option<Coordinate>,
    /// Other members' coordinates, by member name, as their last answers
    /// carried them.
    pub others: BTreeMap<String, Coordinate>,
}

#[derive(Serialize, Deserialize)]
struct Ping {
    seq: u64,
}

#[derive(Serialize, Deserialize)]
struct Ack {
    seq: u64,
    name: String,
    coord: Coordinate,
}

/// The coordinate side of one gossip member.
pub(crate) struct Coordinates {
    client: VivaldiClient,
    name: String,
    next_seq: u64,
    pending: HashMap<u64, (Instant, SocketAddr)>,
    others: BTreeMap<String, Coordinate>,
}

impl Coordinates {
    pub(crate) fn new(name: String) -> Coordinates {
        Coordinates {
            client: VivaldiClient::new(CoordinateConfig::default()),
            name,
            next_seq: rand::random(),
            pending: HashMap::new(),
            others: BTreeMap::new(),
        }
    }

    /// The view to publish.
    pub(crate) fn view(&self) -> CoordinateView {
        CoordinateView {
            own: Some(self.client.coordinate().clone()),
            others: self.others.clone(),
        }
    }

    /// A ping datagram (plaintext, kind first) for `to`.
    pub(crate) fn ping(&mut self, to: SocketAddr) -> Vec<u8> {
        let now = Instant::now();
        self.pending
            .retain(|_, (sent, _)| now.duration_since(*sent) < PING_TIMEOUT);
        if self.pending.len() >= MAX_PENDING {
            self.pending.clear();
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.pending.insert(seq, (now, to));
        datagram(PING, &Ping { seq })
    }

    /// Handles a datagram of kind PING or ACK from `from`, the member
    /// `member` (`None`: not a member, which is never answered nor learned
    /// from): the answer to send back for a ping; `true` in the second
    /// place when an answer changed the coordinates.
    pub(crate) fn receive(
        &mut self,
        data: &[u8],
        from: SocketAddr,
        member: Option<&str>,
    ) -> (Option<Vec<u8>>, bool) {
        let Some(member) = member else {
            return (None, false);
        };
        match data.first() {
            Some(&PING) => match serde_json::from_slice::<Ping>(&data[1..]) {
                Ok(ping) => {
                    let ack = Ack {
                        seq: ping.seq,
                        name: self.name.clone(),
                        coord: self.client.coordinate().clone(),
                    };
                    (Some(datagram(ACK, &ack)), false)
                }
                Err(_) => (None, false),
            },
            Some(&ACK) => {
                let Ok(ack) = serde_json::from_slice::<Ack>(&data[1..]) else {
                    return (None, false);
                };
                // Only answers to our own pings, from where we sent them.
                let Some((sent, to)) = self.pending.remove(&ack.seq) else {
                    return (None, false);
                };
                if to != from || ack.name == self.name || ack.name != member {
                    return (None, false);
                }
                let rtt = Instant::now().duration_since(sent);
                match self.client.update(&ack.name, &ack.coord, rtt) {
                    Ok(_) => {
                        self.others.insert(ack.name, ack.coord);
                        (None, true)
                    }
                    Err(e) => {
                        tracing::debug!(member = %ack.name, error = %e, "gossip: a coordinate was refused");
                        (None, false)
                    }
                }
            }
            _ => (None, false),
        }
    }

    /// Forgets a member that left.
    pub(crate) fn forget(&mut self, name: &str) {
        self.client.forget(name);
        self.others.remove(name);
    }
}

fn datagram<T: Serialize>(kind: u8, body: &T) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend(serde_json::to_vec(body).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ping_and_its_answer_move_the_coordinate_and_fill_the_cache() {
        let a_addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b_addr: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut a = Coordinates::new("a".into());
        let mut b = Coordinates::new("b".into());
        let before = a.view().own.unwrap();
        let ping = a.ping(b_addr);
        let (ack, changed) = b.receive(&ping, a_addr, Some("a"));
        assert!(!changed);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (none, changed) = a.receive(&ack.clone().unwrap(), b_addr, Some("b"));
        assert!(none.is_none() && changed);
        let view = a.view();
        assert!(view.others.contains_key("b"));
        assert_ne!(view.own.unwrap(), before, "the estimate moved");
        // An answer is used once, and only from where the ping went.
        assert!(!a.receive(&ack.unwrap(), b_addr, Some("b")).1);
        let ping = a.ping(b_addr);
        let (ack, _) = b.receive(&ping, a_addr, Some("a"));
        assert!(
            !a.receive(
                &ack.clone().unwrap(),
                "127.0.0.1:3".parse().unwrap(),
                Some("b")
            )
            .1
        );
        // Nor under another member's name, nor from a stranger.
        assert!(!a.receive(&ack.clone().unwrap(), b_addr, Some("c")).1);
        assert_eq!(b.receive(&a.ping(b_addr), a_addr, None), (None, false));
        // Garbage is ignored.
        assert_eq!(a.receive(&[ACK, b'{'], b_addr, Some("b")), (None, false));
        assert_eq!(a.receive(&[PING], b_addr, Some("b")), (None, false));
        a.forget("b");
        assert!(a.view().others.is_empty());
    }
}
