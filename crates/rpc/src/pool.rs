//! A dialer that keeps idle connections per (address, kind) and opens more
//! for concurrent calls; through a mesh gateway it keeps a few multiplexed
//! connections per route instead, each carrying many calls.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::frame::{read_frame, write_frame};
use crate::mux::MuxConn;
use crate::tls::ClientTls;
use crate::Kind;

/// A pooled connection: plain (after its kind byte) or TLS (kind by ALPN).
enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref().0,
        }
    }

    /// Still open: nothing to read, or bytes waiting (a TLS session
    /// ticket), but not end of stream. Peeks, so nothing is consumed.
    fn is_open(&self) -> bool {
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.tcp().poll_peek(&mut cx, &mut buf) {
            Poll::Pending => true,
            Poll::Ready(Ok(n)) => n > 0,
            Poll::Ready(Err(_)) => false,
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Idle connections kept per (address, kind).
const MAX_IDLE: usize = 32;

/// Multiplexed connections kept per route through a gateway (a bound:
/// calls beyond them share them).
pub const MAX_MUX_CONNS: usize = 4;

/// Calls in flight on every multiplexed connection of a route before
/// another one is opened.
const MUX_SPREAD_AT: usize = 64;

/// A route's multiplexed connections; its lock is held while one is
/// dialled, so a route never dials twice at once.
type MuxSlot = Arc<tokio::sync::Mutex<Vec<Arc<MuxConn>>>>;

/// The pooled dialer.
pub struct Pool {
    idle: Mutex<HashMap<(String, Kind), Vec<Conn>>>,
    mux: Mutex<HashMap<String, MuxSlot>>,
    /// Routes whose server does not speak multiplexed RPC (an older
    /// Legate): one connection per call, as before.
    single_only: Mutex<HashSet<String>>,
    connect_timeout: Duration,
    tls: Option<Arc<ClientTls>>,
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(Duration::from_secs(5))
    }
}

impl Pool {
    /// A pool whose connection attempts give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Pool {
        Pool {
            idle: Mutex::new(HashMap::new()),
            mux: Mutex::new(HashMap::new()),
            single_only: Mutex::new(HashSet::new()),
            connect_timeout,
            tls: None,
        }
    }

    /// A pool that dials over TLS (`verify_outgoing`).
    pub fn with_tls(connect_timeout: Duration, tls: Option<Arc<ClientTls>>) -> Pool {
        Pool {
            tls,
            ..Pool::new(connect_timeout)
        }
    }

    /// An idle connection that is still open (a closed one reads EOF at
    /// once; an open one has nothing to read).
    fn take(&self, address: &str, kind: Kind) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let key = (address.to_string(), kind);
        let list = idle.get_mut(&key)?;
        while let Some(stream) = list.pop() {
            if stream.is_open() {
                return Some(stream);
            }
        }
        idle.remove(&key);
        None
    }

    fn put(&self, address: &str, kind: Kind, stream: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry((address.to_string(), kind)).or_default();
        if list.len() < MAX_IDLE {
            list.push(stream);
        }
    }

    /// Dials `gateway` for the server `dial` names, speaking `kind`.
    async fn connect_through(
        &self,
        gateway: &str,
        dial: &Dial<'_>,
        kind: Kind,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tls = self.tls.as_ref().ok_or_else(|| {
            std::io::Error::other("cannot dial via a mesh gateway when outgoing TLS is disabled")
        })?;
        let name = tls
            .name_through_gateway(dial.node, dial.datacenter.unwrap_or_default())
            .map_err(std::io::Error::other)?;
        connect_tls(gateway, name, kind, tls, self.connect_timeout).await
    }

    async fn connect(&self, dial: &Dial<'_>, kind: Kind) -> std::io::Result<Conn> {
        if let Some(gateway) = dial.gateway {
            let stream = self.connect_through(gateway, dial, kind).await?;
            return Ok(Conn::Tls(Box::new(stream)));
        }
        let address = dial.address;
        let mut stream = connect_tcp(address, self.connect_timeout).await?;
        match &self.tls {
            None => {
                stream.write_all(&[kind as u8]).await?;
                Ok(Conn::Plain(stream))
            }
            Some(tls) => {
                // A server of another datacenter carries that one's name.
                let name = match dial.datacenter {
                    Some(dc) => tls.name_for(dc).map_err(std::io::Error::other)?,
                    None => tls.server_name.clone(),
                };
                let handshake = tls.connector(kind).connect(name, stream);
                let stream = tokio::time::timeout(self.connect_timeout, handshake)
                    .await
                    .map_err(|_| timed_out(address))??;
                Ok(Conn::Tls(Box::new(stream)))
            }
        }
    }

    /// Sends one request frame to `address` and waits up to `timeout` for
    /// its answer. A pooled connection that turns out closed before the
    /// request was written is replaced once. The error says whether the
    /// request may have reached the server ([`CallError::sent`]).
    pub async fn call(
        &self,
        address: &str,
        kind: Kind,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        self.call_in(None, address, kind, request, timeout).await
    }

    /// [`Pool::call`] to a server of `datacenter` (`None`: this one's),
    /// whose TLS certificate must name that datacenter.
    pub async fn call_in(
        &self,
        datacenter: Option<&str>,
        address: &str,
        kind: Kind,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let dial = Dial {
            address,
            datacenter,
            gateway: None,
            node: None,
        };
        self.call_dial(&dial, kind, request, timeout).await
    }

    /// [`Pool::call`] as `dial` says: to a server, or through a mesh
    /// gateway to a server of another datacenter.
    pub async fn call_dial(
        &self,
        dial: &Dial<'_>,
        kind: Kind,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let not_sent = |error| CallError { sent: false, error };
        let key = dial.pool_key();
        let address = key.as_str();
        if let (Some(gateway), Kind::Rpc) = (dial.gateway, kind) {
            if !self.is_single_only(address) {
                match self.call_mux(gateway, dial, request, timeout).await {
                    Err(e) if !e.sent && speaks_no_mux(&e.error) => {
                        tracing::info!(
                            route = address,
                            "the server does not speak multiplexed RPC; one connection per call"
                        );
                        self.single_only
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(key.clone());
                    }
                    outcome => return outcome,
                }
            }
        }
        let (mut stream, pooled) = match self.take(address, kind) {
            Some(s) => (s, true),
            None => (self.connect(dial, kind).await.map_err(not_sent)?, false),
        };
        // A failed (or timed out) write leaves at most a partial frame,
        // which the server never acts on.
        if let Err(e) = write_within(&mut stream, request, timeout, address).await {
            if !pooled {
                return Err(not_sent(e));
            }
            stream = self.connect(dial, kind).await.map_err(not_sent)?;
            write_within(&mut stream, request, timeout, address)
                .await
                .map_err(not_sent)?;
        }
        let sent = |error| CallError { sent: true, error };
        let answer = tokio::time::timeout(timeout, read_frame(&mut stream))
            .await
            .map_err(|_| {
                sent(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer from {address} within {timeout:?}"),
                ))
            })?
            .map_err(sent)?;
        match answer {
            Some(body) => {
                self.put(address, kind, stream);
                Ok(body)
            }
            None => Err(sent(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                format!("{address} closed the connection"),
            ))),
        }
    }
}

impl Pool {
    fn is_single_only(&self, route: &str) -> bool {
        self.single_only
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(route)
    }

    /// A call on one of the route's multiplexed connections; one that
    /// turns out closed before the request left is replaced once.
    async fn call_mux(
        &self,
        gateway: &str,
        dial: &Dial<'_>,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let route = dial.pool_key();
        let failed = |(sent, error): (bool, std::io::Error)| CallError {
            sent,
            error: std::io::Error::new(error.kind(), format!("{route}: {error}")),
        };
        for attempt in 0..2 {
            let conn = self
                .mux_conn(gateway, dial, &route)
                .await
                .map_err(|e| failed((false, e)))?;
            match conn.call(request, timeout).await {
                Err((false, _)) if attempt == 0 => continue,
                outcome => return outcome.map_err(failed),
            }
        }
        Err(failed((false, std::io::Error::other("no connection"))))
    }

    /// The least busy open connection of `route`, or a new one when every
    /// one has [`MUX_SPREAD_AT`] calls in flight and the route has fewer
    /// than [`MAX_MUX_CONNS`].
    async fn mux_conn(
        &self,
        gateway: &str,
        dial: &Dial<'_>,
        route: &str,
    ) -> std::io::Result<Arc<MuxConn>> {
        let slot = {
            let mut routes = self.mux.lock().unwrap_or_else(|e| e.into_inner());
            if routes.len() > 256 {
                // Routes to servers that are gone.
                routes.retain(|_, slot| slot.try_lock().map_or(true, |conns| !conns.is_empty()));
            }
            routes.entry(route.to_string()).or_default().clone()
        };
        let mut conns = slot.lock().await;
        conns.retain(|conn| conn.is_open());
        let least = conns.iter().min_by_key(|conn| conn.in_flight()).cloned();
        if let Some(conn) = &least {
            if conn.in_flight() < MUX_SPREAD_AT || conns.len() >= MAX_MUX_CONNS {
                return Ok(conn.clone());
            }
        }
        match self.connect_through(gateway, dial, Kind::RpcMux).await {
            Ok(stream) => {
                let conn = MuxConn::start(stream);
                conns.push(conn.clone());
                Ok(conn)
            }
            // A busy connection still serves.
            Err(e) => least.ok_or(e),
        }
    }

    /// Multiplexed connections open per route (for tests and metrics).
    pub fn mux_connections(&self) -> HashMap<String, usize> {
        let routes = self.mux.lock().unwrap_or_else(|e| e.into_inner());
        routes
            .iter()
            .map(|(route, slot)| {
                let open = slot
                    .try_lock()
                    .map_or(0, |conns| conns.iter().filter(|c| c.is_open()).count());
                (route.clone(), open)
            })
            .collect()
    }
}

/// The server refused the multiplexed protocol in its TLS handshake (it
/// offers no such ALPN protocol: an older Legate).
fn speaks_no_mux(error: &std::io::Error) -> bool {
    error.to_string().contains("NoApplicationProtocol")
}

/// Where a call goes: a server's address, or a gateway leading to one.
#[derive(Debug, Clone, Copy)]
pub struct Dial<'a> {
    /// The server's address (through a gateway: only a name for it).
    pub address: &'a str,
    /// Its datacenter, when not this one: its certificate names it.
    pub datacenter: Option<&'a str>,
    /// The mesh gateway to dial instead, when the server is reached
    /// through one (WAN federation through mesh gateways).
    pub gateway: Option<&'a str>,
    /// Through a gateway: the server's node name (`None`: any server).
    pub node: Option<&'a str>,
}

impl Dial<'_> {
    /// Connections are pooled per address, or per gateway and server.
    pub(crate) fn pool_key(&self) -> String {
        match self.gateway {
            None => self.address.to_string(),
            Some(gateway) => format!(
                "{gateway}/{}.server.{}",
                self.node.unwrap_or("*"),
                self.datacenter.unwrap_or_default()
            ),
        }
    }
}

fn timed_out(address: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("connecting to {address} timed out"),
    )
}

async fn connect_tcp(address: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(address))
        .await
        .map_err(|_| timed_out(address))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Dials `address` and speaks TLS to it as `name`, offering only `kind`'s
/// ALPN protocol (what a mesh gateway routes on).
pub(crate) async fn connect_tls(
    address: &str,
    name: ServerName<'static>,
    kind: Kind,
    tls: &ClientTls,
    timeout: Duration,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let stream = connect_tcp(address, timeout).await?;
    let stream = tokio::time::timeout(timeout, tls.connector(kind).connect(name, stream))
        .await
        .map_err(|_| timed_out(address))??;
    metrics::counter!(
        "rpc.dialed_conns",
        "protocol" => String::from_utf8_lossy(crate::tls::alpn(kind)).into_owned()
    )
    .increment(1);
    Ok(stream)
}

/// Writes a frame, giving up after `timeout`.
async fn write_within(
    stream: &mut Conn,
    request: &[u8],
    timeout: Duration,
    address: &str,
) -> std::io::Result<()> {
    tokio::time::timeout(timeout, write_frame(stream, request))
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("sending to {address} timed out"),
            ))
        })
}

/// A failed [`Pool::call`].
#[derive(Debug)]
pub struct CallError {
    /// The request was written: the server may have acted on it.
    pub sent: bool,
    /// What failed.
    pub error: std::io::Error,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for CallError {}

impl From<CallError> for std::io::Error {
    fn from(e: CallError) -> std::io::Error {
        e.error
    }
}
