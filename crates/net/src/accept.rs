//! Accepting TCP connections with a cap per client address and a back-off
//! on accept errors.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::Throttle;

/// The first wait after a failed accept; it doubles up to [`MAX_BACKOFF`]
/// (the rule Go's HTTP server follows).
const MIN_BACKOFF: Duration = Duration::from_millis(5);
/// The longest wait between accepts that keep failing.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Open connections per client address, with a cap.
pub struct ClientLimit {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One counted connection; the count drops when this is dropped.
pub struct ClientSlot {
    limit: Arc<ClientLimit>,
    ip: IpAddr,
}

impl ClientLimit {
    /// At most `max` open connections per address (0: no cap).
    pub fn new(max: usize) -> Arc<ClientLimit> {
        Arc::new(ClientLimit {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Counts a connection from `ip`, or `None` when it is at its cap.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_insert(0);
        if self.max != 0 && *count >= self.max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            limit: self.clone(),
            ip,
        })
    }

    /// Connections `ip` holds now.
    pub fn open(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.limit.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// What [`Acceptor::next`] hands out.
pub enum Incoming {
    /// A connection within its client's cap.
    Admitted(LimitedStream),
    /// A connection over its client's cap: answer it (or not) and drop it.
    OverLimit(TcpStream, SocketAddr),
}

/// A listener's accept loop.
pub struct Acceptor {
    listener: TcpListener,
    limit: Arc<ClientLimit>,
    name: &'static str,
    errors: Throttle,
    refusals: Throttle,
}

impl Acceptor {
    /// Accepts from `listener`, at most `max_per_client` open connections
    /// per client address (0: no cap); `name` is the listener in logs.
    pub fn new(listener: TcpListener, max_per_client: usize, name: &'static str) -> Acceptor {
        Acceptor {
            listener,
            limit: ClientLimit::new(max_per_client),
            name,
            errors: Throttle::new(Duration::from_secs(10)),
            refusals: Throttle::new(Duration::from_secs(10)),
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection. Accept errors (no file descriptors left, most
    /// often) are waited out with a back-off from 5 ms to 1 s, so a full
    /// file table never spins a thread; they are logged at most once per
    /// 10 s.
    pub async fn next(&self) -> Incoming {
        let mut backoff = MIN_BACKOFF;
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    return match self.limit.try_acquire(peer.ip()) {
                        Some(slot) => Incoming::Admitted(LimitedStream {
                            stream,
                            count: ClientCount {
                                peer,
                                limit: self.limit.clone(),
                                slot: Some(slot),
                            },
                        }),
                        None => {
                            if let Some(count) = self.refusals.hit() {
                                tracing::warn!(
                                    listener = self.name,
                                    client = %peer.ip(),
                                    refused = count,
                                    "a client is over its connection limit; refusing new connections from it"
                                );
                            }
                            Incoming::OverLimit(stream, peer)
                        }
                    };
                }
                Err(e) => {
                    if let Some(count) = self.errors.hit() {
                        tracing::error!(
                            listener = self.name,
                            error = %e,
                            failures = count,
                            retry_in = ?backoff,
                            "accepting a connection failed"
                        );
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

/// An accepted connection, counted against its client until dropped (or
/// while it is not [`LimitedStream::uncount`]ed).
pub struct LimitedStream {
    stream: TcpStream,
    count: ClientCount,
}

impl LimitedStream {
    /// Stops counting this connection against its client (while it does
    /// work that is bounded elsewhere, such as a call in flight).
    pub fn uncount(&mut self) {
        self.count.uncount();
    }

    /// Counts it again; `false` when its client is at its cap meanwhile
    /// (the caller then closes it).
    pub fn recount(&mut self) -> bool {
        self.count.recount()
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.count.peer
    }

    /// Hands this connection's count to a [`ClientCount`] that can be
    /// kept apart from the stream (a connection split into halves).
    pub fn detach_count(&mut self) -> ClientCount {
        ClientCount {
            peer: self.count.peer,
            limit: self.count.limit.clone(),
            slot: self.count.slot.take(),
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }
}

/// A connection's count against its client, apart from the stream; it
/// is released when dropped.
pub struct ClientCount {
    peer: SocketAddr,
    limit: Arc<ClientLimit>,
    slot: Option<ClientSlot>,
}

impl ClientCount {
    /// As [`LimitedStream::uncount`].
    pub fn uncount(&mut self) {
        self.slot = None;
    }

    /// As [`LimitedStream::recount`].
    pub fn recount(&mut self) -> bool {
        if self.slot.is_none() {
            self.slot = self.limit.try_acquire(self.peer.ip());
        }
        self.slot.is_some()
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_over_a_clients_cap_are_handed_back_and_slots_free_on_drop() {
        let acceptor = Acceptor::new(TcpListener::bind("127.0.0.1:0").await.unwrap(), 2, "test");
        let address = acceptor.local_addr().unwrap();
        let mut clients = Vec::new();
        let mut admitted = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(address).await.unwrap());
            match acceptor.next().await {
                Incoming::Admitted(s) => admitted.push(s),
                Incoming::OverLimit(_, peer) => assert_eq!(admitted.len(), 2, "{peer}"),
            }
        }
        assert_eq!(admitted.len(), 2);
        assert_eq!(acceptor.limit.open(address.ip()), 2);
        admitted.pop();
        assert_eq!(acceptor.limit.open(address.ip()), 1);
        // A connection that is not counted leaves room; counting it again
        // fails while that room is taken.
        admitted[0].uncount();
        assert_eq!(acceptor.limit.open(address.ip()), 0);
        let _a = acceptor.limit.try_acquire(address.ip()).unwrap();
        let _b = acceptor.limit.try_acquire(address.ip()).unwrap();
        assert!(!admitted[0].recount());
        drop(_b);
        assert!(admitted[0].recount());
        assert!(admitted[0].recount(), "counting twice is one count");
        assert_eq!(acceptor.limit.open(address.ip()), 2);
        drop(_a);
        clients.push(TcpStream::connect(address).await.unwrap());
        assert!(matches!(acceptor.next().await, Incoming::Admitted(_)));
    }

    #[tokio::test]
    async fn finished_connections_are_freed_while_waiting_for_the_next() {
        let acceptor = Acceptor::new(TcpListener::bind("127.0.0.1:0").await.unwrap(), 0, "test");
        let mut connections = Connections::new();
        for _ in 0..100 {
            connections.spawn(async {});
        }
        assert_eq!(connections.len(), 100);
        // No connection arrives; the finished tasks are joined meanwhile.
        let waited =
            tokio::time::timeout(Duration::from_millis(200), connections.accept(&acceptor)).await;
        assert!(waited.is_err());
        assert!(connections.is_empty(), "{} left", connections.len());
    }

    #[test]
    fn no_cap_when_zero() {
        let limit = ClientLimit::new(0);
        let ip = IpAddr::from([127, 0, 0, 1]);
        let slots: Vec<_> = (0..1000).map(|_| limit.try_acquire(ip).unwrap()).collect();
        assert_eq!(limit.open(ip), 1000);
        drop(slots);
        assert_eq!(limit.open(ip), 0);
    }
}

/// The tasks serving a listener's connections. A finished task is freed
/// as soon as it ends (a `JoinSet` keeps each task's memory, the whole
/// connection future included, until it is joined), so a burst of
/// connections leaves nothing behind.
#[derive(Default)]
pub struct Connections {
    tasks: tokio::task::JoinSet<()>,
}

impl Connections {
    /// No connections yet.
    pub fn new() -> Connections {
        Connections::default()
    }

    /// Serves one connection.
    pub fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    /// Connections being served.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when none is being served.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The next connection from `acceptor`, freeing finished tasks while
    /// waiting for it.
    pub async fn accept(&mut self, acceptor: &Acceptor) -> Incoming {
        loop {
            tokio::select! {
                incoming = acceptor.next() => return incoming,
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
            }
        }
    }

    /// Waits up to `grace` for every connection to end, then ends the rest.
    pub async fn drain(&mut self, grace: Duration) {
        let _ = tokio::time::timeout(grace, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        self.tasks.abort_all();
    }
}
