//! The gRPC (xDS) port's connections, accepted through Legate's acceptor:
//! at most `limits.http_max_conns_per_client` per client address (the rest
//! are closed), and a back-off rather than a busy loop on accept errors.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use legate_net::{Acceptor, Incoming, LimitedStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// One admitted gRPC connection: a plain socket ([`GrpcConn`]) or that
/// socket after its TLS handshake ([`GrpcTlsConn`]).
pub struct Admitted<S>(S);

/// A plain admitted connection.
pub type GrpcConn = Admitted<LimitedStream>;
/// An admitted connection over TLS.
pub type GrpcTlsConn = Admitted<tokio_rustls::server::TlsStream<GrpcConn>>;

impl Connected for GrpcConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.0.get_ref().local_addr().ok(),
            remote_addr: Some(self.0.peer()),
        }
    }
}

impl Connected for GrpcTlsConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Admitted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Admitted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The admitted connections of `acceptor`, for tonic's `serve_with_incoming`.
pub fn incoming(acceptor: Acceptor) -> impl Stream<Item = io::Result<GrpcConn>> {
    futures::stream::unfold(acceptor, |acceptor| async move {
        loop {
            if let Incoming::Admitted(stream) = acceptor.next().await {
                let _ = stream.get_ref().set_nodelay(true);
                return Some((Ok(Admitted(stream)), acceptor));
            }
        }
    })
}

/// The admitted connections of `acceptor` once their TLS handshake is
/// done (each within `deadline`, side by side, so a slow client holds up
/// nobody); failed handshakes are logged and dropped.
pub fn incoming_tls(
    acceptor: Acceptor,
    tls: tokio_rustls::TlsAcceptor,
    deadline: std::time::Duration,
) -> impl Stream<Item = io::Result<GrpcTlsConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut incoming = std::pin::pin!(incoming(acceptor));
        while let Some(Ok(conn)) = futures::StreamExt::next(&mut incoming).await {
            let (tls, tx) = (tls.clone(), tx.clone());
            if tx.is_closed() {
                return;
            }
            tokio::spawn(async move {
                let peer = conn.0.peer();
                match tokio::time::timeout(deadline, tls.accept(conn)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(Admitted(stream))).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "gRPC TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "gRPC TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
