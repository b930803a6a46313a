//! The HTTP accept loop and connections: at most
//! `limits.http_max_conns_per_client` connections per client address (the
//! next one gets Consul's 429 and is closed), a request head must arrive
//! within `limits.http_handshake_timeout` of the connection or of the
//! first byte after the previous request (HTTP/1; an HTTP/2 connection's
//! control frames are not heads), and a keep-alive connection with no
//! request in flight is closed after `limits.http_idle_timeout`. Requests in flight
//! (blocking queries waiting up to ten minutes included) are never cut
//! by these deadlines, but a request whose client has gone (the socket
//! reads end-of-file) is dropped at once, as Go's server cancels it, so
//! abandoned long polls do not hold a descriptor until their wait ends:
//! the connection notices it itself (hyper reads a busy HTTP/1
//! connection for its end, h2 reads frames throughout), so nothing polls
//! the sockets of requests in flight.
//! One task per listener (`Sweep`) checks every connection's deadlines
//! each tick (a quarter of the head deadline, within 50 ms..1 s), rather
//! than a timer in each connection.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo};
use legate_agent::limits::Limits;
use legate_net::{Acceptor, Connections, Incoming, LimitedStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_rustls::TlsAcceptor;
use tower::Service;

/// Consul's answer to a client over its connection cap (go-connlimit).
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\nContent-Length: 81\r\nConnection: close\r\n\r\nYour IP is issuing too many concurrent connections, please rate limit your calls\n";

/// How long connections get to finish once the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Marks "no request head being read".
const NONE: u64 = u64::MAX;

/// What one connection is doing, shared by its socket and its service.
struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    /// When the bytes of a request head began arriving (ms since `epoch`).
    head_started: AtomicU64,
    /// Last byte read or written (ms since `epoch`).
    last: AtomicU64,
    /// The connection speaks HTTP/2 (it began with the preface): its
    /// control frames are not request heads, so only the idle timeout
    /// applies between requests.
    http2: std::sync::atomic::AtomicBool,
    /// The server is stopping: the connection finishes what is in
    /// flight and closes.
    stopping: std::sync::atomic::AtomicBool,
    /// Told when the sweep finds the connection due to close, and when
    /// the server stops.
    closing: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            closing: tokio::sync::Notify::new(),
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            // A new connection owes its first request head from now on.
            head_started: AtomicU64::new(0),
            last: AtomicU64::new(0),
            http2: std::sync::atomic::AtomicBool::new(false),
            stopping: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Tells the connection that the server is stopping.
    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.closing.notify_one();
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Why the connection should be closed now, if it should: never
    /// while a request is in flight (a client that left is noticed by
    /// the connection itself).
    fn expired(&self, limits: &Limits) -> Option<&'static str> {
        if self.in_flight.load(Ordering::Acquire) != 0 {
            return None;
        }
        let now = self.now();
        let head = self.head_started.load(Ordering::Acquire);
        if head != NONE && !self.http2.load(Ordering::Acquire) {
            let waited = Duration::from_millis(now.saturating_sub(head));
            return (waited > limits.http_handshake_timeout)
                .then_some("no complete request head in time");
        }
        let idle = Duration::from_millis(now.saturating_sub(self.last.load(Ordering::Acquire)));
        (!limits.http_idle_timeout.is_zero() && idle > limits.http_idle_timeout).then_some("idle")
    }
}

/// The connections of one listener, whose deadlines one task checks every
/// tick, rather than a timer in each connection: ten thousand long polls
/// would otherwise wake ten thousand tasks a second, each polling its
/// whole request on the way.
struct Sweep {
    connections: std::sync::Mutex<std::collections::HashMap<u64, Arc<Activity>>>,
    next: AtomicU64,
    limits: Limits,
    /// The server is stopping: connections to come are told at once.
    stopping: std::sync::atomic::AtomicBool,
}

/// A connection's place in the [`Sweep`], given up when dropped.
struct Swept {
    sweep: Arc<Sweep>,
    id: u64,
}

impl Drop for Swept {
    fn drop(&mut self) {
        self.sweep
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Stops the sweeping task when the listener's serving ends.
struct SweepTask(tokio::task::JoinHandle<()>);

impl Drop for SweepTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Sweep {
    /// A sweep of the connections to come, checked every tick until the
    /// returned task is dropped.
    fn start(limits: &Limits) -> (Arc<Sweep>, SweepTask) {
        let sweep = Arc::new(Sweep {
            connections: Default::default(),
            next: AtomicU64::new(0),
            limits: limits.clone(),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        let task = tokio::spawn(sweep.clone().run());
        (sweep, SweepTask(task))
    }

    fn enter(self: &Arc<Self>, activity: &Arc<Activity>) -> Swept {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, activity.clone());
        // Checked after the entry is in: a stop either finds the entry
        // or set this flag before this looked.
        if self.stopping.load(Ordering::SeqCst) {
            activity.stop();
        }
        Swept {
            sweep: self.clone(),
            id,
        }
    }

    /// Tells every connection, and each one to come, that the server is
    /// stopping: through each connection's own notify, so a connection
    /// waits on nothing shared with the others.
    fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for activity in self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            activity.stop();
        }
    }

    async fn run(self: Arc<Self>) {
        let tick = (self.limits.http_handshake_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            // Checked outside the lock, so accepting never waits on the checks.
            let connections: Vec<Arc<Activity>> = self
                .connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .cloned()
                .collect();
            for activity in connections {
                if activity.expired(&self.limits).is_some() {
                    activity.closing.notify_one();
                }
            }
        }
    }
}

/// The socket, noting activity.
struct Tracked<S> {
    stream: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            let a = &self.activity;
            if before == 0 && a.last.load(Ordering::Acquire) == 0 {
                let preface = b"PRI * HTTP/2.0";
                let got = buf.filled();
                if got.len() >= 3 && preface.starts_with(&got[..got.len().min(preface.len())]) {
                    a.http2.store(true, Ordering::Release);
                }
            }
            let now = a.now();
            a.last.store(now, Ordering::Release);
            if a.in_flight.load(Ordering::Acquire) == 0 {
                let _ =
                    a.head_started
                        .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Acquire);
            }
        }
        result
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            let now = self.activity.now();
            self.activity.last.store(now, Ordering::Release);
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Counts a request in flight until dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.head_started.store(NONE, Ordering::Release);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = self.0.now();
        self.0.last.store(now, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `router` on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: crate::ApiService,
    limits: &Limits,
    tls: Option<TlsAcceptor>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let acceptor = Acceptor::new(listener, limits.http_max_conns_per_client, "HTTP");
    let (sweep, _sweeping) = Sweep::start(limits);
    let mut connections = Connections::new();
    tokio::pin!(shutdown);
    loop {
        let incoming = tokio::select! {
            incoming = connections.accept(&acceptor) => incoming,
            _ = &mut shutdown => break,
        };
        match incoming {
            Incoming::OverLimit(stream, _) => connections.spawn(refuse(stream)),
            Incoming::Admitted(stream) => {
                let _ = stream.get_ref().set_nodelay(true);
                connections.spawn(connection(
                    stream,
                    router.clone(),
                    sweep.clone(),
                    tls.clone(),
                ));
            }
        }
    }
    sweep.stop();
    connections.drain(SHUTDOWN_GRACE).await;
    Ok(())
}

/// Serves the API on a unix socket (`addresses.http = "unix://..."`):
/// the same deadlines per connection, no per-client cap (a socket's
/// clients have no address) and no client address for the handlers.
pub(crate) async fn serve_unix(
    listener: tokio::net::UnixListener,
    router: crate::ApiService,
    limits: &Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let (sweep, _sweeping) = Sweep::start(limits);
    let mut connections = Connections::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, _)) => {
                let activity = Activity::new();
                let tracked = Tracked {
                    stream,
                    activity: activity.clone(),
                };
                connections.spawn(drive(
                    TokioIo::new(tracked),
                    router.clone(),
                    sweep.clone(),
                    None,
                    activity,
                ));
            }
            Err(e) => {
                tracing::debug!(error = %e, "accepting on the HTTP unix socket failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    sweep.stop();
    connections.drain(SHUTDOWN_GRACE).await;
    Ok(())
}

/// Answers a connection over its client's cap with Consul's 429 and
/// closes it; what the client sent meanwhile is read and dropped first
/// (for at most a second), so the close does not reset the connection
/// before the client has read the answer.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(TOO_MANY_CONNECTIONS).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, io::Error>(())
    })
    .await;
}

async fn connection(
    stream: LimitedStream,
    router: crate::ApiService,
    sweep: Arc<Sweep>,
    tls: Option<TlsAcceptor>,
) {
    let peer = stream.peer();
    let activity = Activity::new();
    let tracked = Tracked {
        stream,
        activity: activity.clone(),
    };
    let Some(tls) = tls else {
        return drive(TokioIo::new(tracked), router, sweep, Some(peer), activity).await;
    };
    // The handshake is the request head's first part: it gets the same deadline.
    let handshake = tokio::time::timeout(sweep.limits.http_handshake_timeout, tls.accept(tracked));
    let stream = match handshake.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "HTTPS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "HTTPS handshake timed out");
            return;
        }
    };
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        activity.http2.store(true, Ordering::Release);
    }
    drive(TokioIo::new(stream), router, sweep, Some(peer), activity).await
}

/// Serves the requests of one connection (plain or TLS) until it ends,
/// its sweep closes it, or the server stops.
async fn drive<I>(
    io: TokioIo<I>,
    router: crate::ApiService,
    sweep: Arc<Sweep>,
    peer: Option<std::net::SocketAddr>,
    activity: Arc<Activity>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let requests = activity.clone();
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let in_flight = InFlight::start(&requests);
            let mut router = router.clone();
            let mut request = request.map(axum::body::Body::new);
            if let Some(peer) = peer {
                request.extensions_mut().insert(crate::PeerAddr(peer));
            }
            async move {
                let response = router.call(request).await;
                drop(in_flight);
                response
            }
        });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let _swept = sweep.enter(&activity);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(?peer, error = %e, "HTTP connection ended");
                }
                return;
            }
            _ = activity.closing.notified() => {
                if !stopping && activity.stopping.load(Ordering::Acquire) {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                    continue;
                }
                // Checked again here: a request may have begun since the
                // sweep looked, and it is never cut.
                if let Some(why) = activity.expired(&sweep.limits) {
                    tracing::debug!(?peer, why, "closing an HTTP connection");
                    return;
                }
            }
        }
    }
}
