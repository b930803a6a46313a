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

/// One admitted gRPC connection.
pub struct GrpcConn(LimitedStream);

impl Connected for GrpcConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.0.get_ref().local_addr().ok(),
            remote_addr: Some(self.0.peer()),
        }
    }
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcConn {
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
                return Some((Ok(GrpcConn(stream)), acceptor));
            }
        }
    })
}
