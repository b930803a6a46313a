//! The DNS load generator: `concurrency` queries kept in flight from one
//! UDP socket, every answer waiting read with one system call and
//! replaced by a new query at once, the new queries sent with one system
//! call. Cheaper per query than a task per client, so the server, not
//! the generator, is what is measured; the same generator asks every
//! server.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use legate_net::datagrams::{send_batch, RecvBatch};

/// How long a query may wait for its answer before it counts as an error
/// (and is replaced).
const TIMEOUT: Duration = Duration::from_secs(1);

/// A DNS query for the A records of `name` (RD set, no EDNS), ID 0.
pub fn query(name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&[0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// Runs the load for `seconds` and prints one line of results.
pub fn load(server: &str, name: &str, concurrency: usize, seconds: u64) -> Result<()> {
    let server: SocketAddr = server.parse().context("--server is ip:port")?;
    let socket = UdpSocket::bind(if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })?;
    socket.set_read_timeout(Some(Duration::from_millis(100)))?;
    let template = query(name);
    let concurrency = concurrency.clamp(1, 4096);
    // Per ID: when it was sent (None: not in flight).
    let mut sent: Vec<Option<Instant>> = vec![None; 65_536];
    let mut next_id: u16 = 0;
    // The next `count` queries, each with a fresh ID not in flight.
    let mut queries = |sent: &mut Vec<Option<Instant>>, count: usize| -> Vec<Vec<u8>> {
        (0..count)
            .map(|_| {
                while sent[next_id as usize].is_some() {
                    next_id = next_id.wrapping_add(1);
                }
                let mut q = template.clone();
                q[..2].copy_from_slice(&next_id.to_be_bytes());
                sent[next_id as usize] = Some(Instant::now());
                next_id = next_id.wrapping_add(1);
                q
            })
            .collect()
    };
    let send = |queries: Vec<Vec<u8>>| -> io::Result<()> {
        let batch: Vec<(&[u8], SocketAddr)> = queries.iter().map(|q| (&q[..], server)).collect();
        send_batch(&socket, &batch).map(|_| ())
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    send(queries(&mut sent, concurrency))?;
    let mut latencies: Vec<Duration> = Vec::with_capacity(1 << 20);
    let (mut errors, mut answers) = (0u64, 0u16);
    let mut batch = RecvBatch::new(concurrency.min(256), 4096);
    let mut last_sweep = Instant::now();
    while Instant::now() < deadline {
        let read = match batch.recv(&socket) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A timeout, or an ICMP error: the sweep replaces what is lost.
            Err(_) => 0,
        };
        let mut replies = 0;
        for i in 0..read {
            let Some((reply, from)) = batch.get(i) else {
                continue;
            };
            if from != server || reply.len() < 12 {
                continue;
            }
            let id = u16::from_be_bytes([reply[0], reply[1]]) as usize;
            let Some(at) = sent[id].take() else { continue };
            replies += 1;
            // Only answers count; an error code is an error.
            if reply[3] & 0x0f == 0 {
                latencies.push(at.elapsed());
                answers = u16::from_be_bytes([reply[6], reply[7]]);
            } else {
                errors += 1;
            }
        }
        if last_sweep.elapsed() > Duration::from_millis(100) {
            last_sweep = Instant::now();
            for slot in sent.iter_mut() {
                if slot.is_some_and(|at| at.elapsed() > TIMEOUT) {
                    *slot = None;
                    errors += 1;
                    replies += 1;
                }
            }
        }
        if replies > 0 {
            send(queries(&mut sent, replies))?;
        }
    }
    let elapsed = started.elapsed();
    latencies.sort();
    println!(
        "queries={} errors={errors} answers_per_response={answers} seconds={:.2} qps={:.0} p50_ms={:.3} p99_ms={:.3}",
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        crate::percentile(&latencies, 50.0).as_secs_f64() * 1e3,
        crate::percentile(&latencies, 99.0).as_secs_f64() * 1e3
    );
    Ok(())
}
