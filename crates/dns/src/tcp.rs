//! DNS over TCP (RFC 7766): two-byte length-prefixed messages on a
//! connection, answered in order. Served here rather than by hickory's
//! server so connections go through Legate's acceptor (a cap per client
//! address, a back-off instead of a busy loop when the file table is full)
//! and an idle connection is closed after [`TCP_IDLE`].

use std::sync::Arc;
use std::time::Duration;

use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler};
use legate_net::{Acceptor, Connections, Incoming, LimitedStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::wire::{format_error, Collect};
use crate::DnsHandler;

/// How long a TCP client may stay silent (between or within messages)
/// before its connection is closed.
pub(crate) const TCP_IDLE: Duration = Duration::from_secs(10);

/// The TCP side of the DNS server.
pub(crate) struct TcpServer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpServer {
    /// Serves `handler` on the connections `acceptor` admits.
    pub(crate) fn start(acceptor: Acceptor, handler: DnsHandler) -> TcpServer {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(acceptor, Arc::new(handler), stopped));
        TcpServer { stop, task }
    }

    /// Stops accepting and closes every connection.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn accept_loop(
    acceptor: Acceptor,
    handler: Arc<DnsHandler>,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = Connections::new();
    loop {
        let incoming = tokio::select! {
            incoming = connections.accept(&acceptor) => incoming,
            _ = stop.wait_for(|s| *s) => return,
        };
        match incoming {
            // Over its cap: closed unanswered, as Consul's DNS server would
            // not have accepted it.
            Incoming::OverLimit(..) => {}
            Incoming::Admitted(stream) => {
                connections.spawn(connection(stream, handler.clone()));
            }
        }
    }
}

async fn connection(mut stream: LimitedStream, handler: Arc<DnsHandler>) {
    let peer = stream.peer();
    loop {
        let mut length = [0u8; 2];
        if !matches!(
            tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut length)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let mut message = vec![0u8; u16::from_be_bytes(length) as usize];
        if !matches!(
            tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut message)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let answer = match Request::from_bytes(message.clone(), peer, Protocol::Tcp) {
            Ok(request) => {
                let responder = Collect::new(Protocol::Tcp);
                handler
                    .handle_request::<_, TokioTime>(&request, responder.clone())
                    .await;
                responder.take()
            }
            Err(_) => format_error(&message),
        };
        let Some(answer) = answer else { continue };
        let Ok(length) = u16::try_from(answer.len()) else {
            return;
        };
        let mut out = Vec::with_capacity(answer.len() + 2);
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&answer);
        if !matches!(
            tokio::time::timeout(TCP_IDLE, stream.write_all(&out)).await,
            Ok(Ok(()))
        ) {
            return;
        }
    }
}
