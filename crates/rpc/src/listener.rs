//! The multiplexed listener: reads each connection's first byte and hands
//! its frames to the handler of that kind, answering each with one frame.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::frame::{read_frame, write_frame};
use crate::tls::{kind_of_alpn, ServerTls};
use crate::Kind;

/// Most connections served at once; more are closed on arrival. Generous:
/// every blocking query forwarded by a client agent holds a connection,
/// and Raft between servers must not be starved.
pub const MAX_CONNECTIONS: usize = 65536;

/// How long a new connection may take to say what it is (its first byte,
/// or its TLS handshake); silent connections are closed.
const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Answers the frames of one connection kind.
#[async_trait]
pub trait FrameHandler: Send + Sync + 'static {
    /// The answer to one request frame.
    async fn handle(&self, peer: SocketAddr, request: Vec<u8>) -> Vec<u8>;
}

/// The server port.
pub struct Listener {
    listener: TcpListener,
    handlers: HashMap<Kind, Arc<dyn FrameHandler>>,
    tls: Option<Arc<ServerTls>>,
    max_connections: usize,
}

impl Listener {
    /// Binds `address` (port 0 picks one).
    pub async fn bind(address: SocketAddr) -> std::io::Result<Listener> {
        Ok(Listener {
            listener: TcpListener::bind(address).await?,
            handlers: HashMap::new(),
            tls: None,
            max_connections: MAX_CONNECTIONS,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Routes connections of `kind` to `handler`.
    pub fn route(&mut self, kind: Kind, handler: Arc<dyn FrameHandler>) {
        self.handlers.insert(kind, handler);
    }

    /// Serves at most `limit` connections at once (default
    /// [`MAX_CONNECTIONS`]).
    pub fn set_max_connections(&mut self, limit: usize) {
        self.max_connections = limit;
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
        let mut connections = tokio::task::JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            let (stream, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "server port accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            while connections.try_join_next().is_some() {}
            if connections.len() >= limit {
                tracing::warn!(%peer, limit, "server port: too many connections; closing a new one");
                drop(stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
            let handlers = handlers.clone();
            let tls = tls.clone();
            connections.spawn(async move {
                if let Err(e) = connection(stream, peer, &handlers, tls.as_deref()).await {
                    tracing::debug!(%peer, error = %e, "server port connection ended");
                }
            });
        }
    }
}

fn refused(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    handlers: &HashMap<Kind, Arc<dyn FrameHandler>>,
    tls: Option<&ServerTls>,
) -> std::io::Result<()> {
    let silent = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the connection said nothing in time",
        )
    };
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(HELLO_TIMEOUT, stream.peek(&mut first))
        .await
        .map_err(|_| silent())??;
    if peeked == 0 {
        return Ok(());
    }
    if first[0] == TLS_HANDSHAKE {
        let tls =
            tls.ok_or_else(|| refused("a TLS connection, but TLS is not configured".into()))?;
        let stream = tokio::time::timeout(HELLO_TIMEOUT, tls.acceptor.accept(stream))
            .await
            .map_err(|_| silent())??;
        let kind = stream
            .get_ref()
            .1
            .alpn_protocol()
            .and_then(kind_of_alpn)
            .ok_or_else(|| refused("a TLS connection without a known ALPN protocol".into()))?;
        tls.admits(kind, stream.get_ref().1.peer_certificates())
            .map_err(refused)?;
        let handler = handlers
            .get(&kind)
            .ok_or_else(|| refused(format!("no handler for {kind:?}")))?;
        return serve_frames(stream, peer, handler.as_ref()).await;
    }
    if tls.is_some_and(|t| t.required) {
        return Err(refused(
            "a plain connection, but verify_incoming requires TLS".into(),
        ));
    }
    let first = stream.read_u8().await?;
    let handler = Kind::from_byte(first)
        .and_then(|kind| handlers.get(&kind))
        .ok_or_else(|| refused(format!("unknown connection type {first}")))?;
    serve_frames(stream, peer, handler.as_ref()).await
}

/// Answers each request frame with one frame until the peer closes.
async fn serve_frames<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: SocketAddr,
    handler: &dyn FrameHandler,
) -> std::io::Result<()> {
    while let Some(request) = read_frame(&mut stream).await? {
        let answer = handler.handle(peer, request).await;
        write_frame(&mut stream, &answer).await?;
    }
    Ok(())
}
