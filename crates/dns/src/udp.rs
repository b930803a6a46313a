//! DNS over UDP: one socket per core on the same port (`SO_REUSEPORT`, so
//! the kernel spreads clients over them), each read by its own thread.
//! A thread reads every datagram waiting with one system call, answers
//! what the fast path ([`crate::fast`]) holds at once
//! and hands everything else to the reference path, hickory's parser and
//! the resolver, on the async runtime, which sends its answer and leaves
//! a template for the next time; the fast answers of one read go out
//! with one system call too.
//!
//! The reference path mirrors hickory's own UDP server: datagrams from
//! port 0, unspecified or broadcast addresses are dropped, as are
//! datagrams shorter than a header and responses; a query whose header
//! reads but not the rest gets FORMERR; answers fit the client's EDNS
//! buffer, else 512 bytes.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::MessageType;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::Request;
use tokio::sync::mpsc;

use legate_net::datagrams::{send_batch, RecvBatch};

use crate::fast::FastAnswers;
use crate::wire::{format_error, Collect};
use crate::DnsHandler;

/// The largest datagram read (what hickory's server reads).
const MAX_DATAGRAM: usize = 4096;
/// The most datagrams read (and answers sent) with one system call.
const BATCH: usize = 32;
/// How often a reading thread looks whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Queries waiting for the reference path; past this they are dropped,
/// as a full socket buffer would drop them.
const REFERENCE_QUEUE: usize = 4096;

/// Binds one UDP socket per core on `address` (the first decides the
/// port when `address` has none).
pub(crate) fn bind(address: SocketAddr) -> io::Result<Vec<UdpSocket>> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let mut sockets = Vec::with_capacity(cores);
    let mut address = address;
    for _ in 0..cores {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        socket.set_reuse_port(true)?;
        socket.bind(&address.into())?;
        socket.set_read_timeout(Some(STOP_POLL))?;
        let socket: UdpSocket = socket.into();
        address = socket.local_addr()?;
        sockets.push(socket);
    }
    Ok(sockets)
}

/// A query for the reference path.
struct Job {
    query: Vec<u8>,
    client: SocketAddr,
    socket: Arc<UdpSocket>,
}

/// The running UDP side.
pub(crate) struct UdpServer {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    reference: tokio::task::JoinHandle<()>,
}

impl UdpServer {
    /// Serves `sockets` (from [`bind`]) with `handler`, answering from
    /// `fast` when it can.
    pub(crate) fn start(
        sockets: Vec<UdpSocket>,
        handler: Arc<DnsHandler>,
        fast: Arc<FastAnswers>,
    ) -> io::Result<UdpServer> {
        let stop = Arc::new(AtomicBool::new(false));
        let (jobs, queue) = mpsc::channel(REFERENCE_QUEUE);
        let reference = tokio::spawn(reference_path(queue, handler, fast.clone()));
        let mut threads = Vec::new();
        for (i, socket) in sockets.into_iter().enumerate() {
            let (stop, fast, jobs) = (stop.clone(), fast.clone(), jobs.clone());
            let socket = Arc::new(socket);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("dns-udp-{i}"))
                    .spawn(move || read_loop(&socket, &fast, &jobs, &stop))?,
            );
        }
        Ok(UdpServer {
            stop,
            threads,
            reference,
        })
    }

    /// Stops reading and waits for the threads.
    pub(crate) async fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
        self.reference.abort();
    }
}

/// Whether hickory's server would answer a datagram from `client`.
fn answerable(client: SocketAddr) -> bool {
    client.port() != 0
        && match client.ip() {
            std::net::IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_broadcast(),
            std::net::IpAddr::V6(v6) => !v6.is_unspecified(),
        }
}

fn read_loop(
    socket: &Arc<UdpSocket>,
    fast: &FastAnswers,
    jobs: &mpsc::Sender<Job>,
    stop: &AtomicBool,
) {
    let mut batch = RecvBatch::new(BATCH, MAX_DATAGRAM);
    let mut answers: Vec<Vec<u8>> = (0..BATCH).map(|_| Vec::with_capacity(512)).collect();
    let mut clients = Vec::with_capacity(BATCH);
    let timer = metrics::histogram!("dns.domain_query");
    while !stop.load(Ordering::Acquire) {
        let read = match batch.recv(socket) {
            Ok(read) => read,
            Err(e) => {
                if !matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) {
                    tracing::debug!(error = %e, "reading DNS datagrams failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
        };
        clients.clear();
        for i in 0..read {
            let Some((query, client)) = batch.get(i) else {
                continue;
            };
            if !answerable(client) {
                continue;
            }
            let started = Instant::now();
            if fast.answer(query, &mut answers[clients.len()]) {
                clients.push(client);
                timer.record(legate_telemetry::millis_since(started));
                continue;
            }
            let job = Job {
                query: query.to_vec(),
                client,
                socket: socket.clone(),
            };
            if let Err(mpsc::error::TrySendError::Closed(_)) = jobs.try_send(job) {
                return;
            }
        }
        let outgoing: Vec<(&[u8], SocketAddr)> = answers
            .iter()
            .zip(&clients)
            .map(|(answer, client)| (&answer[..], *client))
            .collect();
        if let Err(e) = send_batch(socket, &outgoing) {
            tracing::debug!(error = %e, "failed to send DNS responses");
        }
    }
}

async fn reference_path(
    mut queue: mpsc::Receiver<Job>,
    handler: Arc<DnsHandler>,
    fast: Arc<FastAnswers>,
) {
    while let Some(job) = queue.recv().await {
        let (handler, fast) = (handler.clone(), fast.clone());
        tokio::spawn(async move {
            if let Some(answer) = reference_answer(&handler, &fast, &job.query, job.client).await {
                if let Err(e) = job.socket.send_to(&answer, job.client) {
                    tracing::debug!(error = %e, "failed to send a DNS response");
                }
            }
        });
    }
}

/// The reference path's answer to one datagram (and a template from it
/// when the resolver says it may be copied).
pub(crate) async fn reference_answer(
    handler: &DnsHandler,
    fast: &FastAnswers,
    query: &[u8],
    client: SocketAddr,
) -> Option<Vec<u8>> {
    let request = match Request::from_bytes(query.to_vec(), client, Protocol::Udp) {
        Ok(request) => request,
        Err(_) => return format_error(query),
    };
    if request.metadata.message_type == MessageType::Response {
        return None;
    }
    let responder = Collect::new(Protocol::Udp);
    let (_, pool) = handler.respond(&request, responder.clone()).await;
    let answer = responder.take()?;
    if let Some(pool) = pool {
        fast.learn(query, &answer, pool);
    }
    Some(answer)
}
