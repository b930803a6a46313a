//! The multiplexed listener: reads each connection's first byte and hands
//! its frames to the handler of that kind, answering each with one frame.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use legate_net::{Acceptor, Connections, Incoming, LimitedStream};
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpListener;

use crate::frame::{read_frame, write_frame};
use crate::tls::{alpn, kind_of_alpn, ServerTls};
use crate::Kind;

/// Most connections served at once; more are closed on arrival. Generous:
/// every blocking query forwarded by a client agent holds a connection,
/// and Raft between servers must not be starved.
pub const MAX_CONNECTIONS: usize = 65536;

/// How long a new connection may take to say what it is (its first byte,
/// or its TLS handshake) unless set otherwise (`rpc_handshake_timeout`);
/// silent connections are closed.
pub const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Answers the frames of one connection kind.
#[async_trait]
pub trait FrameHandler: Send + Sync + 'static {
    /// The answer to one request frame.
    async fn handle(&self, peer: SocketAddr, request: Vec<u8>) -> Vec<u8>;
}

/// A TLS connection as a stream handler gets it.
pub trait Connection: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Connection for T {}

/// Serves whole connections of one kind (both sides may send at any
/// time), such as WAN gossip through gateways.
#[async_trait]
pub trait StreamHandler: Send + Sync + 'static {
    /// Serves one accepted connection, whose client presented `peer_chain`.
    async fn serve(
        &self,
        peer: SocketAddr,
        peer_chain: Vec<CertificateDer<'static>>,
        connection: Box<dyn Connection>,
    );
}

/// What answers a kind of connection.
#[derive(Clone)]
enum Handler {
    Frames(Arc<dyn FrameHandler>),
    Stream(Arc<dyn StreamHandler>),
}

/// The server port.
pub struct Listener {
    listener: TcpListener,
    handlers: HashMap<Kind, Handler>,
    tls: Option<Arc<ServerTls>>,
    max_connections: usize,
    max_per_client: usize,
    hello_timeout: std::time::Duration,
}

impl Listener {
    /// Binds `address` (port 0 picks one).
    pub async fn bind(address: SocketAddr) -> std::io::Result<Listener> {
        Ok(Listener {
            listener: legate_net::bind_tcp(address)?,
            handlers: HashMap::new(),
            tls: None,
            max_connections: MAX_CONNECTIONS,
            max_per_client: 0,
            hello_timeout: HELLO_TIMEOUT,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Routes connections of `kind` to `handler`.
    pub fn route(&mut self, kind: Kind, handler: Arc<dyn FrameHandler>) {
        self.handlers.insert(kind, Handler::Frames(handler));
    }

    /// Routes TLS connections of `kind` to `handler`, whole.
    pub fn route_stream(&mut self, kind: Kind, handler: Arc<dyn StreamHandler>) {
        self.handlers.insert(kind, Handler::Stream(handler));
    }

    /// Serves at most `limit` connections at once (default
    /// [`MAX_CONNECTIONS`]).
    pub fn set_max_connections(&mut self, limit: usize) {
        self.max_connections = limit;
    }

    /// Per client address, at most `max_per_client` connections that are
    /// not carrying a call (saying what they are, or idle between calls;
    /// 0: no cap), and `hello_timeout` for a new one to say what it is
    /// (`rpc_max_conns_per_client`, `rpc_handshake_timeout`). Calls in
    /// flight are not counted: Legate opens a connection per concurrent
    /// call where Consul multiplexes one, and a busy client agent must not
    /// be refused.
    pub fn set_client_limits(&mut self, max_per_client: usize, hello_timeout: std::time::Duration) {
        self.max_per_client = max_per_client;
        self.hello_timeout = hello_timeout;
    }

    /// Accepts TLS connections (and, when `tls` requires it, only those).
    pub fn set_tls(&mut self, tls: Option<Arc<ServerTls>>) {
        self.tls = tls;
    }

    /// Serves until the task is dropped or aborted, which also closes every
    /// connection it accepted.
    pub async fn serve(self) {
        let handlers = Arc::new(self.handlers);
        let tls = self.tls;
        let limit = self.max_connections;
        let hello_timeout = self.hello_timeout;
        let acceptor = Acceptor::new(self.listener, self.max_per_client, "server port");
        let mut connections = Connections::new();
        let full = legate_net::Throttle::new(std::time::Duration::from_secs(10));
        let refusals = Arc::new(legate_net::Throttle::new(std::time::Duration::from_secs(
            10,
        )));
        loop {
            // Over its client's cap: closed unanswered, as Consul does.
            let Incoming::Admitted(stream) = connections.accept(&acceptor).await else {
                continue;
            };
            let peer = stream.peer();
            if connections.len() >= limit {
                if let Some(count) = full.hit() {
                    tracing::warn!(%peer, limit, refused = count, "server port: too many connections; closing new ones");
                }
                continue;
            }
            let _ = stream.get_ref().set_nodelay(true);
            let handlers = handlers.clone();
            let tls = tls.clone();
            let refusals = refusals.clone();
            connections.spawn(async move {
                match connection(stream, &handlers, tls.as_deref(), hello_timeout).await {
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        // A peer refused for what it presented: said once
                        // per 10 s however many there are.
                        if let Some(count) = refusals.hit() {
                            tracing::warn!(%peer, error = %e, refused = count, "server port: TLS refused");
                        }
                    }
                    Err(e) => tracing::debug!(%peer, error = %e, "server port connection ended"),
                    Ok(()) => {}
                }
            });
        }
    }
}

fn refused(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

async fn connection(
    mut stream: LimitedStream,
    handlers: &HashMap<Kind, Handler>,
    tls: Option<&ServerTls>,
    hello_timeout: std::time::Duration,
) -> std::io::Result<()> {
    let peer = stream.peer();
    let silent = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the connection said nothing in time",
        )
    };
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(hello_timeout, stream.get_ref().peek(&mut first))
        .await
        .map_err(|_| silent())??;
    if peeked == 0 {
        return Ok(());
    }
    if first[0] == TLS_HANDSHAKE {
        let tls =
            tls.ok_or_else(|| refused("a TLS connection, but TLS is not configured".into()))?;
        let stream = tokio::time::timeout(hello_timeout, tls.acceptor.accept(stream))
            .await
            .map_err(|_| silent())?
            .map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("TLS handshake failed: {e}"),
                )
            })?;
        let kind = stream
            .get_ref()
            .1
            .alpn_protocol()
            .and_then(kind_of_alpn)
            .ok_or_else(|| refused("a TLS connection without a known ALPN protocol".into()))?;
        tls.admits(kind, stream.get_ref().1.peer_certificates())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
        let handler = handler_of(handlers, kind)?;
        count_accepted(&String::from_utf8_lossy(alpn(kind)));
        if kind == Kind::RpcMux {
            return serve_mux_with(stream, peer, handler).await;
        }
        return match handler {
            Handler::Frames(handler) => serve_frames(stream, peer, handler.as_ref()).await,
            Handler::Stream(handler) => {
                let chain: Vec<CertificateDer<'static>> = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .unwrap_or_default()
                    .iter()
                    .map(|c| c.clone().into_owned())
                    .collect();
                let mut stream = stream;
                // A long-lived connection that carries traffic: not idle.
                stream.connection().uncount();
                handler.serve(peer, chain, Box::new(stream)).await;
                Ok(())
            }
        };
    }
    if tls.is_some_and(|t| t.required) {
        return Err(refused(
            "a plain connection, but verify_incoming requires TLS".into(),
        ));
    }
    let first = stream.read_u8().await?;
    let kind = Kind::from_byte(first)
        .ok_or_else(|| refused(format!("unknown connection type {first}")))?;
    let handler = handler_of(handlers, kind)?;
    count_accepted(&format!("plain/{first}"));
    if kind == Kind::RpcMux {
        return serve_mux_with(stream, peer, handler).await;
    }
    match handler {
        Handler::Frames(handler) => serve_frames(stream, peer, handler.as_ref()).await,
        Handler::Stream(_) => Err(refused(format!("unknown connection type {first}"))),
    }
}

/// The handler of `kind`: multiplexed RPC is answered by the RPC handler.
fn handler_of(handlers: &HashMap<Kind, Handler>, kind: Kind) -> std::io::Result<&Handler> {
    let routed = if kind == Kind::RpcMux {
        Kind::Rpc
    } else {
        kind
    };
    handlers
        .get(&routed)
        .ok_or_else(|| refused(format!("no handler for {kind:?}")))
}

/// Serves a multiplexed RPC connection, counted against its client's cap
/// while it carries no call (as a single-call connection is).
async fn serve_mux_with<S>(
    mut stream: S,
    peer: SocketAddr,
    handler: &Handler,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + Counted + 'static,
{
    let count = stream.connection().detach_count();
    match handler {
        Handler::Frames(handler) => {
            crate::mux::serve_mux(stream, peer, handler.clone(), Some(count)).await
        }
        Handler::Stream(_) => Err(refused("multiplexed RPC without an RPC handler".into())),
    }
}

/// Counts an accepted connection by what it carries: its negotiated ALPN
/// protocol, or `plain/<first byte>` (Consul's `rpc.accept_conn`, with
/// the protocol as a label).
fn count_accepted(protocol: &str) {
    metrics::counter!("rpc.accept_conn", "protocol" => protocol.to_string()).increment(1);
}

/// A connection counted against its client's cap while it carries no call.
trait Counted {
    fn connection(&mut self) -> &mut LimitedStream;
}

impl Counted for LimitedStream {
    fn connection(&mut self) -> &mut LimitedStream {
        self
    }
}

impl Counted for tokio_rustls::server::TlsStream<LimitedStream> {
    fn connection(&mut self) -> &mut LimitedStream {
        self.get_mut().0
    }
}

/// Answers each request frame with one frame until the peer closes. While
/// a call is answered the connection does not count against its client's
/// cap; afterwards it counts again, or is closed when the client reached
/// its cap meanwhile.
async fn serve_frames<S: AsyncRead + AsyncWrite + Unpin + Counted>(
    mut stream: S,
    peer: SocketAddr,
    handler: &dyn FrameHandler,
) -> std::io::Result<()> {
    while let Some(request) = read_frame(&mut stream).await? {
        stream.connection().uncount();
        // A client sends nothing more until it has its answer, so bytes or
        // an end of stream meanwhile mean it gave up (a blocking call it
        // no longer wants, a caller that went away): the call is dropped
        // rather than kept waiting for minutes.
        let mut probe = [0u8; 1];
        let answer = tokio::select! {
            answer = handler.handle(peer, request) => answer,
            read = stream.read(&mut probe) => {
                return match read {
                    Ok(0) | Err(_) => Ok(()),
                    Ok(_) => Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a request arrived before the answer to the previous one",
                    )),
                };
            }
        };
        write_frame(&mut stream, &answer).await?;
        if !stream.connection().recount() {
            return Ok(());
        }
    }
    Ok(())
}
