//! WAN gossip through mesh gateways: the server port's side of the
//! gossip relay. Datagrams for members of other datacenters travel over
//! TLS connections (ALPN `legate/wan-gossip/packet`) dialled through a
//! gateway the [`GatewayLocator`] names, with the server name
//! `<node>.server.<dc>.<domain>` the gateway routes on; one connection per
//! member, used by both sides, closed after two idle minutes.
//!
//! Each connection starts with both sides' hello (gossip address and WAN
//! name); the acceptor checks the dialler's certificate names a server of
//! the datacenter its hello claims, the dialler checked the acceptor's
//! name in the handshake. Then each frame (a 4-byte big-endian length, at
//! most 64 KiB) is one datagram. A secondary's first join
//! dials `server.<primary>.<domain>` — any server there — and learns who
//! answered from the hello, so no placeholder member is ever announced.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use legate_types::federation::split_wan_name;
use legate_types::gateway_locator::GatewayLocator;
use legate_types::wan_relay::RelayedDatagram;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::listener::{Connection, StreamHandler};
use crate::pool::connect_tls;
use crate::tls::{certificate_names, ClientTls};
use crate::Kind;

/// Largest frame. Consul caps its packets at 4 MiB; Legate's gossip
/// never sends a datagram over UDP's 64 KiB, so a frame is at most that
/// (an authenticated peer cannot make a server hold 4 MiB per queued
/// datagram).
pub const MAX_PACKET: usize = 64 << 10;

/// Largest hello (an address and a name).
const MAX_HELLO: usize = 1024;

/// A connection with no frame either way for this long is closed.
pub const IDLE: Duration = Duration::from_secs(120);

/// How long a gateway that could not be dialled goes to the back.
const GATEWAY_FAILED_FOR: Duration = Duration::from_secs(30);

/// How long a member whose dial failed is not dialled again.
const REDIAL_AFTER: Duration = Duration::from_secs(1);

/// Datagrams queued per connection before more are dropped.
const QUEUE: usize = 256;

const HELLO: u8 = 0;
const DATAGRAM: u8 = 1;
/// The acceptor's answer in place of its hello: why it refuses.
const REFUSED: u8 = 2;

/// Who is at one end of a tunnel connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its advertised WAN gossip address (its identity in gossip).
    pub addr: SocketAddr,
    /// Its WAN name, `<node>.<dc>`.
    pub name: String,
}

/// The relay between a server's WAN gossip and the gateways.
#[derive(Clone)]
pub struct GossipTunnel {
    inner: Arc<Inner>,
}

struct Inner {
    me: Peer,
    tls: Arc<ClientTls>,
    locator: watch::Receiver<GatewayLocator>,
    inbound: mpsc::Sender<RelayedDatagram>,
    links: Mutex<HashMap<SocketAddr, Link>>,
    /// Members whose last dial failed: their datagrams are dropped until
    /// then, rather than dialling again for each.
    unreachable: Mutex<HashMap<SocketAddr, Instant>>,
    failed_gateways: Mutex<HashMap<String, Instant>>,
    /// Refusals by the servers dialled, said once per 10 s.
    refusals: legate_net::Throttle,
    connect_timeout: Duration,
    next_id: std::sync::atomic::AtomicU64,
}

struct Link {
    id: u64,
    queue: mpsc::Sender<Vec<u8>>,
}

impl GossipTunnel {
    /// A tunnel for the member `me`, dialling with `tls` through the
    /// gateways `locator` names; datagrams that arrive are handed to
    /// gossip on the returned receiver.
    pub fn new(
        me: Peer,
        tls: Arc<ClientTls>,
        locator: watch::Receiver<GatewayLocator>,
        connect_timeout: Duration,
    ) -> (GossipTunnel, mpsc::Receiver<RelayedDatagram>) {
        let (inbound, received) = mpsc::channel(1024);
        let tunnel = GossipTunnel {
            inner: Arc::new(Inner {
                me,
                tls,
                locator,
                inbound,
                links: Mutex::new(HashMap::new()),
                unreachable: Mutex::new(HashMap::new()),
                failed_gateways: Mutex::new(HashMap::new()),
                refusals: legate_net::Throttle::new(Duration::from_secs(10)),
                connect_timeout,
                next_id: Default::default(),
            }),
        };
        (tunnel, received)
    }

    /// Sends gossip's outbound datagrams until the channel closes.
    pub async fn run(self, mut outbound: mpsc::Receiver<RelayedDatagram>) {
        while let Some(datagram) = outbound.recv().await {
            self.send(datagram);
        }
    }

    /// Queues one datagram on its member's connection, dialling one when
    /// there is none (the datagram waits for the dial).
    fn send(&self, relayed: RelayedDatagram) {
        let mut links = self.inner.links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = links.get(&relayed.peer) {
            if !link.queue.is_closed() {
                if link.queue.try_send(relayed.datagram).is_err() {
                    tracing::trace!(peer = %relayed.peer, "WAN gossip tunnel full; a datagram dropped");
                }
                return;
            }
        }
        if unexpired(&self.inner.unreachable).contains_key(&relayed.peer) {
            return;
        }
        let Some(name) = relayed.name else {
            tracing::debug!(peer = %relayed.peer, "WAN gossip: no connection to a member whose name is unknown");
            return;
        };
        let Ok((node, datacenter)) = split_wan_name(&name) else {
            tracing::debug!(%name, "WAN gossip: not a WAN member name");
            return;
        };
        let (node, datacenter) = (node.to_string(), datacenter.to_string());
        let (id, queue, queued) = self.new_link();
        let _ = queue.try_send(relayed.datagram);
        links.insert(relayed.peer, Link { id, queue });
        drop(links);
        let tunnel = self.clone();
        let peer = relayed.peer;
        tokio::spawn(async move {
            match tunnel.dial(Some(&node), &datacenter).await {
                Ok((peer_seen, stream)) if peer_seen.addr == peer => {
                    tunnel.run_link(peer_seen, id, stream, queued).await;
                }
                Ok((peer_seen, _)) => {
                    tracing::warn!(expected = %name, answered = %peer_seen.name, "WAN gossip: the gateway reached another server than the one asked for");
                    tunnel.unreachable(peer, id);
                }
                Err(e) => {
                    tracing::debug!(%name, error = %e, "WAN gossip: no way through the gateways");
                    tunnel.unreachable(peer, id);
                }
            }
        });
    }

    /// Reaches any server of `datacenter` through its gateways and keeps
    /// the connection for gossip: who answered (to join through).
    pub async fn discover(&self, datacenter: &str) -> Result<Peer, String> {
        let (peer, stream) = self.dial(None, datacenter).await?;
        let (id, queued) = self.link_to(peer.addr);
        let tunnel = self.clone();
        let answered = peer.clone();
        tokio::spawn(async move { tunnel.run_link(answered, id, stream, queued).await });
        Ok(peer)
    }

    /// A new connection's id and queue.
    fn new_link(&self) -> (u64, mpsc::Sender<Vec<u8>>, mpsc::Receiver<Vec<u8>>) {
        let (queue, queued) = mpsc::channel(QUEUE);
        let id = self
            .inner
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (id, queue, queued)
    }

    /// Makes a new connection the one datagrams for `peer` take.
    fn link_to(&self, peer: SocketAddr) -> (u64, mpsc::Receiver<Vec<u8>>) {
        let (id, queue, queued) = self.new_link();
        self.inner
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, Link { id, queue });
        (id, queued)
    }

    /// Forgets a failed dial's connection and holds further dials back.
    fn unreachable(&self, peer: SocketAddr, id: u64) {
        self.unlink(peer, id);
        self.inner
            .unreachable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, Instant::now() + REDIAL_AFTER);
    }

    fn unlink(&self, peer: SocketAddr, id: u64) {
        let mut links = self.inner.links.lock().unwrap_or_else(|e| e.into_inner());
        if links.get(&peer).is_some_and(|l| l.id == id) {
            links.remove(&peer);
        }
    }

    /// Gateways leading to `datacenter`, ones that just failed last.
    fn gateways(&self, datacenter: &str) -> Vec<String> {
        let mut gateways = self.inner.locator.borrow().candidates(datacenter).to_vec();
        let failed = unexpired(&self.inner.failed_gateways);
        let n = gateways.len().max(1);
        gateways.rotate_left(rand::random::<u64>() as usize % n);
        gateways.sort_by_key(|g| failed.contains_key(g));
        gateways
    }

    /// Dials a server of `datacenter` (`node`, or any) through each of
    /// its gateways in turn and exchanges hellos.
    async fn dial(
        &self,
        node: Option<&str>,
        datacenter: &str,
    ) -> Result<(Peer, Box<dyn Connection>), String> {
        let gateways = self.gateways(datacenter);
        if gateways.is_empty() {
            return Err(format!("no mesh gateway to {datacenter} is known yet"));
        }
        let name = self.inner.tls.name_through_gateway(node, datacenter)?;
        let mut errors = Vec::new();
        for gateway in gateways {
            let attempt = async {
                let mut stream = connect_tls(
                    &gateway,
                    name.clone(),
                    Kind::WanGossip,
                    &self.inner.tls,
                    self.inner.connect_timeout,
                )
                .await
                .map_err(|e| HelloError::from(e.to_string()))?;
                write_hello(&mut stream, &self.inner.me)
                    .await
                    .map_err(|e| HelloError::from(e.to_string()))?;
                let peer =
                    tokio::time::timeout(self.inner.connect_timeout, read_hello(&mut stream))
                        .await
                        .map_err(|_| HelloError::from("no hello in time"))??;
                Ok::<_, HelloError>((peer, stream))
            };
            match attempt.await {
                Ok((peer, stream)) => {
                    self.inner
                        .failed_gateways
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&gateway);
                    let in_place = split_wan_name(&peer.name)
                        .is_ok_and(|(n, dc)| dc == datacenter && node.is_none_or(|want| want == n));
                    if !in_place {
                        return Err(format!(
                            "{gateway} led to {}, not a server of {datacenter}",
                            peer.name
                        ));
                    }
                    return Ok((peer, Box::new(stream)));
                }
                Err(e) if e.refused => {
                    // The gateway led to the server, which refused this
                    // one: the gateway is fine, this server's identity
                    // is not.
                    if let Some(refused) = self.inner.refusals.hit() {
                        tracing::warn!(%gateway, server = ?name, error = %e, refused, "WAN gossip: the server refused this one");
                    }
                    errors.push(format!("{gateway}: {e}"));
                }
                Err(e) => {
                    let first = self
                        .inner
                        .failed_gateways
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(gateway.clone(), Instant::now() + GATEWAY_FAILED_FOR)
                        .is_none();
                    // Once per gateway while it stays failed.
                    if first {
                        tracing::warn!(%gateway, server = ?name, error = %e, "WAN gossip: dialling through a mesh gateway failed");
                    }
                    errors.push(format!("{gateway}: {e}"));
                }
            }
        }
        Err(errors.join("; "))
    }

    /// Carries datagrams both ways on one connection until it fails or
    /// idles.
    async fn run_link(
        &self,
        peer: Peer,
        id: u64,
        stream: Box<dyn Connection>,
        mut queued: mpsc::Receiver<Vec<u8>>,
    ) {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let inbound = self.inner.inbound.clone();
        let from = peer.clone();
        let reading = async move {
            loop {
                match tokio::time::timeout(IDLE, read_frame(&mut reader)).await {
                    Ok(Ok(Some((DATAGRAM, datagram)))) => {
                        let relayed = RelayedDatagram {
                            peer: from.addr,
                            name: Some(from.name.clone()),
                            datagram,
                        };
                        if inbound.send(relayed).await.is_err() {
                            return "gossip stopped".to_string();
                        }
                    }
                    Ok(Ok(Some((kind, _)))) => return format!("an unexpected frame {kind}"),
                    Ok(Ok(None)) => return "closed by the peer".to_string(),
                    Ok(Err(e)) => return e.to_string(),
                    Err(_) => return "idle".to_string(),
                }
            }
        };
        let writing = async move {
            loop {
                match tokio::time::timeout(IDLE, queued.recv()).await {
                    Ok(Some(datagram)) => {
                        if let Err(e) = write_frame(&mut writer, DATAGRAM, &datagram).await {
                            return e.to_string();
                        }
                    }
                    Ok(None) => return "replaced".to_string(),
                    Err(_) => return "idle".to_string(),
                }
            }
        };
        let ended = tokio::select! {
            why = reading => why,
            why = writing => why,
        };
        tracing::debug!(peer = %peer.name, why = %ended, "WAN gossip tunnel connection ended");
        self.unlink(peer.addr, id);
    }
}

#[async_trait]
impl StreamHandler for GossipTunnel {
    async fn serve(
        &self,
        from: SocketAddr,
        peer_chain: Vec<CertificateDer<'static>>,
        mut connection: Box<dyn Connection>,
    ) {
        let hello = match tokio::time::timeout(
            self.inner.connect_timeout,
            read_hello(&mut connection),
        )
        .await
        {
            Ok(Ok(hello)) => hello,
            Ok(Err(e)) => {
                tracing::warn!(%from, error = %e, "WAN gossip: a tunnel connection without a valid hello");
                return;
            }
            Err(_) => return,
        };
        // The certificate must name the very server the hello claims
        // (`tls cert create -server -node`), so no server can pass for
        // another.
        let expected = match split_wan_name(&hello.name)
            .and_then(|(node, dc)| self.inner.tls.node_name_in(node, dc))
        {
            Ok(expected) => expected,
            Err(e) => {
                tracing::warn!(%from, error = %e, "WAN gossip: refused a tunnel connection");
                return;
            }
        };
        if !certificate_names(&peer_chain, &expected) {
            tracing::warn!(%from, claimed = %hello.name, %expected, "WAN gossip: refused a tunnel connection whose certificate is not for a server of the datacenter it claims");
            let why = format!(
                "{} refused {}: its certificate is not valid for {expected}",
                self.inner.me.name, hello.name
            );
            let _ = write_frame(&mut connection, REFUSED, why.as_bytes()).await;
            return;
        }
        if let Err(e) = write_hello(&mut connection, &self.inner.me).await {
            tracing::debug!(%from, error = %e, "WAN gossip: the hello could not be sent");
            return;
        }
        // Both ends dialled each other at once: the connection the lower
        // address dialled wins on both sides.
        let mine_is_live = self
            .inner
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hello.addr)
            .is_some_and(|l| !l.queue.is_closed());
        if mine_is_live && self.inner.me.addr < hello.addr {
            return;
        }
        let (id, queued) = self.link_to(hello.addr);
        self.run_link(hello, id, connection, queued).await;
    }
}

/// The map with its expired entries dropped, locked.
fn unexpired<K>(
    map: &Mutex<HashMap<K, Instant>>,
) -> std::sync::MutexGuard<'_, HashMap<K, Instant>> {
    let now = Instant::now();
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    map.retain(|_, until| *until > now);
    map
}

async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    kind: u8,
    body: &[u8],
) -> std::io::Result<()> {
    if body.len() + 1 > MAX_PACKET {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a datagram over the tunnel's 64 KiB cap",
        ));
    }
    let mut frame = Vec::with_capacity(body.len() + 5);
    frame.extend_from_slice(&((body.len() + 1) as u32).to_be_bytes());
    frame.push(kind);
    frame.extend_from_slice(body);
    writer.write_all(&frame).await?;
    writer.flush().await
}

/// The next frame's kind and body; `None` at a clean end of stream.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    read_frame_within(reader, MAX_PACKET).await
}

/// [`read_frame`] refusing frames over `max` bytes before reading them.
async fn read_frame_within<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    let Some(mut body) = crate::frame::read_sized(reader, 1, max).await? else {
        return Ok(None);
    };
    let kind = body.remove(0);
    Ok(Some((kind, body)))
}

async fn write_hello<W: AsyncWrite + Unpin>(writer: &mut W, me: &Peer) -> std::io::Result<()> {
    let body = format!("{} {}", me.addr, me.name);
    write_frame(writer, HELLO, body.as_bytes()).await
}

/// Why no hello was read: the peer refused this side (its answer says
/// why), or what came was no valid hello.
#[derive(Debug)]
struct HelloError {
    refused: bool,
    reason: String,
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl From<String> for HelloError {
    fn from(reason: String) -> HelloError {
        HelloError {
            refused: false,
            reason,
        }
    }
}

impl From<&str> for HelloError {
    fn from(reason: &str) -> HelloError {
        HelloError::from(reason.to_string())
    }
}

async fn read_hello<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Peer, HelloError> {
    let (kind, body) = read_frame_within(reader, MAX_HELLO)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("closed before its hello")?;
    if kind == REFUSED {
        return Err(HelloError {
            refused: true,
            reason: String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned(),
        });
    }
    if kind != HELLO || body.len() > 1024 {
        return Err("the first frame is not a hello".into());
    }
    let text = String::from_utf8(body).map_err(|_| "a hello that is not text")?;
    let (addr, name) = text.split_once(' ').ok_or("a malformed hello")?;
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| format!("a hello with a bad address {addr:?}"))?;
    split_wan_name(name)?;
    Ok(Peer {
        addr,
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn frames_and_hellos_round_trip_and_bad_ones_are_refused() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let me = Peer {
            addr: "10.0.0.1:8302".parse().unwrap(),
            name: "b1.dc2".into(),
        };
        write_hello(&mut a, &me).await.unwrap();
        assert_eq!(read_hello(&mut b).await.unwrap(), me);
        write_frame(&mut a, DATAGRAM, b"ping").await.unwrap();
        assert_eq!(
            read_frame(&mut b).await.unwrap(),
            Some((DATAGRAM, b"ping".to_vec()))
        );
        // A hello over its 1 KiB is refused before it is read.
        write_frame(&mut a, HELLO, &[b'x'; 2000]).await.unwrap();
        assert!(read_hello(&mut b)
            .await
            .unwrap_err()
            .reason
            .contains("at most 1024"));
        let mut rest = vec![0u8; 2001];
        b.read_exact(&mut rest).await.unwrap();
        // A hello whose name encodes no datacenter.
        write_frame(&mut a, HELLO, b"10.0.0.1:8302 b1")
            .await
            .unwrap();
        assert!(read_hello(&mut b)
            .await
            .unwrap_err()
            .reason
            .contains("does not encode"));
        // A refusal in place of the hello says why.
        write_frame(
            &mut a,
            REFUSED,
            b"s1.dc1 refused b1.dc2: its certificate is not valid for server.dc2.consul",
        )
        .await
        .unwrap();
        let refusal = read_hello(&mut b).await.unwrap_err();
        assert!(refusal.refused);
        assert!(refusal.reason.contains("not valid for server.dc2.consul"));
        // A datagram where a hello belongs.
        write_frame(&mut a, DATAGRAM, b"x").await.unwrap();
        assert!(read_hello(&mut b).await.is_err());
        // A length over the cap is refused before anything is read.
        a.write_all(&((MAX_PACKET as u32) + 1).to_be_bytes())
            .await
            .unwrap();
        assert!(read_frame(&mut b).await.is_err());
        assert!(write_frame(&mut a, DATAGRAM, &vec![0; MAX_PACKET])
            .await
            .is_err());
        drop(a);
    }

    /// A CA and a leaf signed by it for `names`: (CA PEM, leaf PEM, key PEM).
    fn certificates(names: &[&str]) -> (String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (ca.pem(), leaf.pem(), key.serialize_pem())
    }

    /// A server of dc1 behind a "gateway" (its own address) that refuses
    /// every tunnel with a REFUSED frame, after the TLS handshake (as a
    /// server does whose check of the dialler's name fails).
    async fn refusing_server(cert: &str, key: &str) -> String {
        let config = legate_net::tls::server_config(
            &legate_net::tls::ServerPem {
                cert_pem: cert.into(),
                key_pem: key.into(),
                client_ca_pem: None,
            },
            &[crate::tls::alpn(Kind::WanGossip)],
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Ok(mut stream) = acceptor.accept(stream).await else {
                    continue;
                };
                let _ = read_hello(&mut stream).await;
                let why =
                    b"s1.dc1 refused b1.dc2: its certificate is not valid for b1.server.dc2.consul";
                let _ = write_frame(&mut stream, REFUSED, why).await;
            }
        });
        address
    }

    #[tokio::test]
    async fn a_refusal_by_the_server_leaves_its_gateway_usable_and_a_dead_gateway_does_not() {
        let (ca, server_cert, server_key) = certificates(&["server.dc1.consul"]);
        let refusing = refusing_server(&server_cert, &server_key).await;
        let dead = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().to_string()
        };
        let (_, client_cert, client_key) = certificates(&["b1.server.dc2.consul"]);
        // The client trusts the server's CA; the server refuses its name.
        let tls = crate::tls::TlsSettings {
            ca_pem: ca,
            cert_pem: client_cert,
            key_pem: client_key,
            verify_incoming: false,
            verify_outgoing: true,
            server_name: "server.dc2.consul".into(),
        }
        .client()
        .unwrap()
        .unwrap();
        let locator_of = |gateway: &str| {
            GatewayLocator::compute(&legate_types::gateway_locator::LocatorInputs {
                datacenter: "dc2".into(),
                primary_datacenter: "dc1".into(),
                configured_primary: vec![gateway.to_string()],
                ..Default::default()
            })
        };
        let me = Peer {
            addr: "10.0.0.2:8302".parse().unwrap(),
            name: "b1.dc2".into(),
        };
        let (_locator_tx, locator) = watch::channel(locator_of(&refusing));
        let (tunnel, _) =
            GossipTunnel::new(me.clone(), tls.clone(), locator, Duration::from_secs(2));
        let error = tunnel.discover("dc1").await.unwrap_err();
        assert!(
            error.contains("not valid for b1.server.dc2.consul"),
            "{error}"
        );
        assert!(
            unexpired(&tunnel.inner.failed_gateways).is_empty(),
            "a refusal is the server's answer: the gateway works"
        );

        let (_locator_tx, locator) = watch::channel(locator_of(&dead));
        let (tunnel, _) = GossipTunnel::new(me, tls, locator, Duration::from_secs(2));
        assert!(tunnel.discover("dc1").await.is_err());
        assert!(unexpired(&tunnel.inner.failed_gateways).contains_key(&dead));
    }
}
