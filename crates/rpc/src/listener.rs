//! The multiplexed listener: reads each connection's first byte and hands
//! its frames to the handler of that kind, answering each with one frame.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::frame::{read_frame, write_frame};
use crate::Kind;

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
}

impl Listener {
    /// Binds `address` (port 0 picks one).
    pub async fn bind(address: SocketAddr) -> std::io::Result<Listener> {
        Ok(Listener {
            listener: TcpListener::bind(address).await?,
            handlers: HashMap::new(),
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

    /// Serves until the task is dropped or aborted, which also closes every
    /// connection it accepted.
    pub async fn serve(self) {
        let handlers = Arc::new(self.handlers);
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
            let _ = stream.set_nodelay(true);
            let handlers = handlers.clone();
            connections.spawn(async move {
                if let Err(e) = connection(stream, peer, &handlers).await {
                    tracing::debug!(%peer, error = %e, "server port connection ended");
                }
            });
        }
    }
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    handlers: &HashMap<Kind, Arc<dyn FrameHandler>>,
) -> std::io::Result<()> {
    let first = stream.read_u8().await?;
    let handler = Kind::from_byte(first)
        .and_then(|kind| handlers.get(&kind))
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unknown connection type {first}"),
            )
        })?;
    while let Some(request) = read_frame(&mut stream).await? {
        let answer = handler.handle(peer, request).await;
        write_frame(&mut stream, &answer).await?;
    }
    Ok(())
}
