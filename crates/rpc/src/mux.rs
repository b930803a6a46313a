//! Multiplexed RPC: many calls in flight on one connection, as Consul's
//! `RPCMultiplexV2` (yamux) carries its cross-datacenter RPC. Used for
//! calls through mesh gateways, where a connection per in-flight call
//! (proxycfg's blocking watches of remote targets hold theirs for minutes)
//! would pile up on the gateway and on the far server.
//!
//! A frame is a 4-byte big-endian length of what follows, an 8-byte call
//! id, one operation byte and a body: a request, its answer, or a cancel
//! (the caller gave up: the server drops the call, as it does when a
//! single-call connection closes).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Semaphore};

use legate_net::ClientCount;

use crate::frame::{read_sized, MAX_FRAME};
use crate::listener::FrameHandler;

/// A request frame.
const REQUEST: u8 = 0;
/// The answer to a request.
const ANSWER: u8 = 1;
/// The caller no longer wants the answer.
const CANCEL: u8 = 2;

/// Calls one connection serves at once; more wait (the server stops
/// reading that connection until one finishes).
pub(crate) const MAX_CALLS_SERVED: usize = 1024;

/// A connection with no call in flight for this long is closed.
pub(crate) const IDLE: Duration = Duration::from_secs(120);

/// Frames queued for writing per connection before senders wait.
const QUEUE: usize = 1024;

/// Writes are coalesced up to this many bytes per system call.
const BATCH: usize = 256 << 10;

fn encode(id: u64, op: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(13 + body.len());
    frame.extend_from_slice(&((9 + body.len()) as u32).to_be_bytes());
    frame.extend_from_slice(&id.to_be_bytes());
    frame.push(op);
    frame.extend_from_slice(body);
    frame
}

/// Reads one frame: its call id, operation and body; `None` at a clean
/// end of stream.
async fn read_mux_frame<R: AsyncRead + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<(u64, u8, Vec<u8>)>> {
    let Some(mut body) = read_sized(r, 9, MAX_FRAME + 9).await? else {
        return Ok(None);
    };
    let rest = body.split_off(9);
    let id = u64::from_be_bytes(body[..8].try_into().unwrap_or_default());
    Ok(Some((id, body[8], rest)))
}

/// Writes queued frames, several per system call when they queue up.
async fn write_frames<W: AsyncWrite + Unpin>(mut w: W, mut frames: mpsc::Receiver<Vec<u8>>) {
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(frame) = frames.recv().await {
        batch.clear();
        batch.extend_from_slice(&frame);
        if frames.is_empty() {
            // Frames from tasks woken together (answers of calls that
            // finished at once) join this write: fewer, larger writes,
            // and fewer reads at every gateway on the way.
            tokio::task::yield_now().await;
        }
        while batch.len() < BATCH {
            match frames.try_recv() {
                Ok(frame) => batch.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        if w.write_all(&batch).await.is_err() || w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

/// Serves one multiplexed connection with `handler`, each call in its own
/// task, until the peer closes it; calls still running then are dropped.
/// `count` (the connection's count against its client's cap) is released
/// while calls are in flight and taken again when none is; when the
/// client reached its cap meanwhile, the connection is closed.
pub(crate) async fn serve_mux<S>(
    stream: S,
    peer: SocketAddr,
    handler: Arc<dyn FrameHandler>,
    count: Option<ClientCount>,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut reader, writer) = tokio::io::split(stream);
    let (answers, queue) = mpsc::channel(QUEUE);
    let mut writing = tokio::spawn(write_frames(writer, queue));
    let calls: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>> = Arc::default();
    // However this ends (the peer closes, or this task is dropped), the
    // calls still running and the writer go with it.
    let _running = Running {
        calls: calls.clone(),
        writing: writing.abort_handle(),
    };
    let slots = Arc::new(Semaphore::new(MAX_CALLS_SERVED));
    let idle = Arc::new(IdleCount {
        count: Mutex::new(count),
        over_cap: tokio::sync::Notify::new(),
    });
    loop {
        let frame = tokio::select! {
            frame = read_mux_frame(&mut reader) => frame,
            _ = &mut writing => break Ok(()),
            _ = idle.over_cap.notified() => break Ok(()),
        };
        let (id, op, body) = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        match op {
            REQUEST => {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    break Ok(());
                };
                let mut running = calls.lock().unwrap_or_else(|e| e.into_inner());
                if running.contains_key(&id) {
                    break Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("call {id} sent twice while in flight"),
                    ));
                }
                let (handler, answers, calls) = (handler.clone(), answers.clone(), calls.clone());
                let idle_count = idle.clone();
                let task = tokio::spawn(async move {
                    let answer = handler.handle(peer, body).await;
                    {
                        let mut running = calls.lock().unwrap_or_else(|e| e.into_inner());
                        running.remove(&id);
                        if running.is_empty() {
                            idle_count.now_idle();
                        }
                    }
                    let _ = answers.send(encode(id, ANSWER, &answer)).await;
                    drop(slot);
                });
                if running.is_empty() {
                    idle.now_busy();
                }
                running.insert(id, task.abort_handle());
            }
            CANCEL => {
                let mut running = calls.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(call) = running.remove(&id) {
                    call.abort();
                    if running.is_empty() {
                        idle.now_idle();
                    }
                }
            }
            other => {
                break Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unknown multiplexed operation {other}"),
                ))
            }
        }
    }
}

/// A served connection's count against its client's cap.
struct IdleCount {
    count: Mutex<Option<ClientCount>>,
    /// Signalled when the connection went idle with its client at its cap.
    over_cap: tokio::sync::Notify,
}

impl IdleCount {
    fn now_busy(&self) {
        if let Some(count) = self
            .count
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            count.uncount();
        }
    }

    fn now_idle(&self) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        if count.as_mut().is_some_and(|count| !count.recount()) {
            self.over_cap.notify_one();
        }
    }
}

/// What one served connection has running.
struct Running {
    calls: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>>,
    writing: tokio::task::AbortHandle,
}

impl Drop for Running {
    fn drop(&mut self) {
        for (_, call) in self.calls.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            call.abort();
        }
        self.writing.abort();
    }
}

/// The calling side of one multiplexed connection.
pub(crate) struct MuxConn {
    frames: mpsc::Sender<Vec<u8>>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>,
    next_id: AtomicU64,
    in_flight: AtomicUsize,
    closed: AtomicBool,
    /// Why it closed, when a read failed (a TLS alert: the server refused
    /// this side's certificate).
    closed_because: Mutex<Option<String>>,
    last_used: Mutex<Instant>,
    idle: Duration,
}

impl MuxConn {
    /// Starts the connection's reader and writer on `stream`.
    pub(crate) fn start<S>(stream: S) -> Arc<MuxConn>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        MuxConn::start_closing_after(stream, IDLE)
    }

    /// [`MuxConn::start`], closing after `idle` without calls.
    fn start_closing_after<S>(stream: S, idle: Duration) -> Arc<MuxConn>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (reader, writer) = tokio::io::split(stream);
        let (frames, queue) = mpsc::channel(QUEUE);
        let conn = Arc::new(MuxConn {
            frames,
            waiting: Mutex::default(),
            next_id: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            closed_because: Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
            idle,
        });
        let writing = tokio::spawn(write_frames(writer, queue));
        tokio::spawn(read_answers(reader, Arc::downgrade(&conn), writing));
        conn
    }

    /// Still usable for new calls.
    pub(crate) fn is_open(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && !self.frames.is_closed()
    }

    /// Calls in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Closes it because `reason` (a read error) when there is one.
    fn close_because(&self, reason: String) {
        *self
            .closed_because
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(reason);
        self.close();
    }

    /// The error a caller gets from a closed connection.
    fn closed(&self) -> std::io::Error {
        let because = self
            .closed_because
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let text = match because {
            Some(reason) => format!("the multiplexed connection closed: {reason}"),
            None => "the multiplexed connection closed".to_string(),
        };
        std::io::Error::new(std::io::ErrorKind::ConnectionAborted, text)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Dropping the senders wakes every waiting caller with an error.
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Sends `request` and waits for its answer. `Err(sent, error)`: the
    /// request may have reached the server when `sent`.
    pub(crate) async fn call(
        &self,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, (bool, std::io::Error)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer_tx, answer_rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, answer_tx);
        let mut guard = InFlight {
            conn: self,
            id,
            answered: false,
        };
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let frame = encode(id, REQUEST, request);
        match tokio::time::timeout(timeout, self.frames.send(frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err((false, self.closed())),
            Err(_) => return Err((false, timed_out(timeout))),
        }
        if self.closed.load(Ordering::Acquire) {
            return Err((true, self.closed()));
        }
        match tokio::time::timeout(timeout, answer_rx).await {
            Ok(Ok(answer)) => {
                guard.answered = true;
                Ok(answer)
            }
            Ok(Err(_)) => Err((true, self.closed())),
            Err(_) => Err((true, timed_out(timeout))),
        }
    }
}

/// A call in flight: when its caller stops waiting without an answer, the
/// server is told to drop it.
struct InFlight<'a> {
    conn: &'a MuxConn,
    id: u64,
    answered: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
        *self
            .conn
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if self.answered {
            return;
        }
        let waiting = self
            .conn
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        if waiting.is_some() {
            let _ = self.conn.frames.try_send(encode(self.id, CANCEL, &[]));
        }
    }
}

fn timed_out(timeout: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {timeout:?}"),
    )
}

/// Hands each answer to its caller until the connection ends, or has been
/// idle for its idle time (or its last handle is dropped).
async fn read_answers<R: AsyncRead + Unpin>(
    mut reader: R,
    conn: std::sync::Weak<MuxConn>,
    writing: tokio::task::JoinHandle<()>,
) {
    let idle = conn.upgrade().map_or(IDLE, |conn| conn.idle);
    let mut idle_check = tokio::time::interval(idle / 4);
    loop {
        let frame = tokio::select! {
            frame = read_mux_frame(&mut reader) => frame,
            _ = idle_check.tick() => {
                let Some(conn) = conn.upgrade() else { break };
                let since = conn.last_used.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
                if conn.in_flight() == 0 && since >= idle {
                    conn.close();
                    break;
                }
                continue;
            }
        };
        let Some(conn) = conn.upgrade() else { break };
        match frame {
            Ok(Some((id, ANSWER, body))) => {
                let waiter = conn
                    .waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(body);
                }
            }
            Ok(Some((_, op, _))) => {
                tracing::debug!(op, "multiplexed RPC: an unexpected frame; closing");
                conn.close();
                break;
            }
            Ok(None) => {
                conn.close();
                break;
            }
            Err(e) => {
                conn.close_because(e.to_string());
                break;
            }
        }
    }
    if let Some(conn) = conn.upgrade() {
        conn.close();
    }
    writing.abort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;

    /// Answers "slow" after a long wait, anything else at once, and counts
    /// calls that were dropped before they finished.
    struct Echo {
        dropped: Arc<AtomicUsize>,
    }

    struct CountDrop(Arc<AtomicUsize>, bool);

    impl Drop for CountDrop {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[async_trait]
    impl FrameHandler for Echo {
        async fn handle(&self, _peer: SocketAddr, request: Vec<u8>) -> Vec<u8> {
            let mut guard = CountDrop(self.dropped.clone(), false);
            if request == b"slow" {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            guard.1 = true;
            request.iter().rev().copied().collect()
        }
    }

    fn pair() -> (Arc<MuxConn>, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        pair_closing_after(IDLE)
    }

    fn pair_closing_after(
        idle: Duration,
    ) -> (Arc<MuxConn>, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let (client, server) = tokio::io::duplex(1 << 16);
        let dropped = Arc::new(AtomicUsize::new(0));
        let handler = Arc::new(Echo {
            dropped: dropped.clone(),
        });
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let serving = tokio::spawn(async move {
            let _ = serve_mux(server, peer, handler, None).await;
        });
        (MuxConn::start_closing_after(client, idle), dropped, serving)
    }

    type Outcome = Result<Vec<u8>, (bool, std::io::Error)>;

    /// A call the server holds for a minute, running in its own task.
    fn slow_call(conn: &Arc<MuxConn>) -> tokio::task::JoinHandle<Outcome> {
        let conn = conn.clone();
        tokio::spawn(async move { conn.call(b"slow", Duration::from_secs(30)).await })
    }

    #[tokio::test]
    async fn many_calls_share_one_connection_and_each_gets_its_own_answer() {
        let (conn, _, _) = pair();
        let mut calls = Vec::new();
        for i in 0..200u32 {
            let conn = conn.clone();
            calls.push(tokio::spawn(async move {
                let request = format!("call-{i}").into_bytes();
                let answer = conn.call(&request, Duration::from_secs(5)).await.unwrap();
                assert_eq!(answer, request.iter().rev().copied().collect::<Vec<_>>());
            }));
        }
        for call in calls {
            call.await.unwrap();
        }
        assert_eq!(conn.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_slow_call_does_not_hold_up_the_others() {
        let (conn, _, _) = pair();
        let slow = slow_call(&conn);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let answer = conn.call(b"ab", Duration::from_secs(2)).await.unwrap();
        assert_eq!(answer, b"ba");
        assert_eq!(conn.in_flight(), 1);
        slow.abort();
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_makes_the_server_drop_the_call() {
        let (conn, dropped, _) = pair();
        let error = conn
            .call(b"slow", Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(error.0, "the request was sent");
        assert_eq!(error.1.kind(), std::io::ErrorKind::TimedOut);
        for _ in 0..100 {
            if dropped.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "the server dropped it");
        assert!(conn.is_open(), "the connection stays usable");
        assert_eq!(
            conn.call(b"xy", Duration::from_secs(2)).await.unwrap(),
            b"yx"
        );
    }

    #[tokio::test]
    async fn callers_waiting_on_a_connection_that_closes_get_an_error() {
        let (conn, _, serving) = pair();
        let slow = slow_call(&conn);
        tokio::time::sleep(Duration::from_millis(50)).await;
        serving.abort();
        let error = tokio::time::timeout(Duration::from_secs(5), slow)
            .await
            .expect("woken")
            .unwrap()
            .unwrap_err();
        assert!(error.0);
        assert_eq!(error.1.kind(), std::io::ErrorKind::ConnectionAborted);
        assert!(!conn.is_open());
    }

    #[tokio::test]
    async fn malformed_frames_end_the_connection_without_a_panic() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let handler = Arc::new(Echo {
            dropped: Arc::default(),
        });
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let serving = tokio::spawn(serve_mux(server, peer, handler, None));
        // A length shorter than a frame's head.
        client.write_all(&3u32.to_be_bytes()).await.unwrap();
        let outcome = serving.await.unwrap();
        assert_eq!(outcome.unwrap_err().kind(), std::io::ErrorKind::InvalidData);

        for frame in [encode(1, 9, b""), {
            let mut twice = encode(1, REQUEST, b"slow");
            twice.extend(encode(1, REQUEST, b"slow"));
            twice
        }] {
            let (mut client, server) = tokio::io::duplex(1 << 16);
            let handler = Arc::new(Echo {
                dropped: Arc::default(),
            });
            let serving = tokio::spawn(serve_mux(server, peer, handler, None));
            client.write_all(&frame).await.unwrap();
            let outcome = tokio::time::timeout(Duration::from_secs(5), serving)
                .await
                .expect("ended")
                .unwrap();
            assert_eq!(outcome.unwrap_err().kind(), std::io::ErrorKind::InvalidData);
        }
    }

    #[tokio::test]
    async fn an_idle_connection_closes_but_a_busy_one_does_not() {
        let idle = Duration::from_millis(400);
        let (conn, _, _) = pair_closing_after(idle);
        let slow = slow_call(&conn);
        tokio::time::sleep(idle * 3).await;
        assert!(conn.is_open(), "a call in flight keeps it open");
        slow.abort();
        let _ = slow.await;
        assert_eq!(conn.in_flight(), 0);
        tokio::time::sleep(idle / 2).await;
        assert!(conn.is_open());
        tokio::time::sleep(idle * 2).await;
        assert!(!conn.is_open(), "closed after {idle:?} without calls");
    }
}
