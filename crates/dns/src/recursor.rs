//! Forwarding names outside our domains to the configured recursors: each
//! gets `recursor_timeout`, in order (or a random order), the first
//! NOERROR or NXDOMAIN answer wins; a truncated UDP answer is asked again over TCP.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use legate_agent::dns_config::{DnsConfig, RecursorStrategy};
use rand::seq::SliceRandom;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

async fn over_udp(recursor: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if recursor.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let socket = UdpSocket::bind(bind).await?;
    socket.connect(recursor).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Only an answer to this query (same id) counts.
        if n >= 2 && buf[..2] == query[..2] {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn over_tcp(recursor: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(recursor).await?;
    let len = u16::try_from(query.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "query too long"))?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(query).await?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Asks one recursor; `tcp` when the client asked over TCP.
async fn ask(recursor: SocketAddr, query: &[u8], tcp: bool, timeout: Duration) -> Option<Message> {
    let attempt = async {
        let bytes = if tcp {
            over_tcp(recursor, query).await?
        } else {
            let bytes = over_udp(recursor, query).await?;
            match Message::from_vec(&bytes) {
                Ok(m) if m.metadata.truncation => over_tcp(recursor, query).await?,
                _ => bytes,
            }
        };
        Message::from_vec(&bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
    };
    match tokio::time::timeout(timeout, attempt).await {
        // Only a definite answer ends the search (or a truncated one, passed on).
        Ok(Ok(message))
            if message.metadata.truncation
                || matches!(
                    message.metadata.response_code,
                    ResponseCode::NoError | ResponseCode::NXDomain
                ) =>
        {
            Some(message)
        }
        Ok(Ok(message)) => {
            tracing::debug!(%recursor, code = %message.metadata.response_code, "recursor refused; trying the next");
            None
        }
        Ok(Err(e)) => {
            tracing::debug!(%recursor, error = %e, "recursor failed");
            None
        }
        Err(_) => {
            tracing::debug!(%recursor, "recursor timed out");
            None
        }
    }
}

/// The first recursor's answer to the raw `query`, or `None` when every one fails.
pub async fn forward(config: &DnsConfig, query: &[u8], tcp: bool) -> Option<Message> {
    let mut order = config.recursors.clone();
    if config.recursor_strategy == RecursorStrategy::Random {
        order.shuffle(&mut rand::rng());
    }
    for recursor in order {
        if let Some(answer) = ask(recursor, query, tcp, config.recursor_timeout).await {
            return Some(answer);
        }
    }
    None
}
