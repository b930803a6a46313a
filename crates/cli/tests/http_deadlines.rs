//! The HTTP API's connection deadlines, kept by one sweep of the
//! listener's connections: a request head owed for longer than
//! `http_handshake_timeout` closes its connection, a keep-alive connection
//! idle past `http_idle_timeout` is closed, a blocking query is never cut
//! by either, and one whose client has gone is dropped without waiting
//! out its wait.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::TestAgent;

fn agent() -> TestAgent {
    TestAgent::dev(&[
        r#"-hcl=limits { http_handshake_timeout = "1s" http_idle_timeout = "2s" }"#,
        "-hcl=telemetry { prometheus_retention_time = \"1h\" disable_hostname = true }",
    ])
}

fn connect(agent: &TestAgent) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", agent.http_port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Reads until the agent closes the connection; what it sent, and when.
fn read_to_close(stream: &mut TcpStream) -> (String, Instant) {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (String::from_utf8_lossy(&seen).into_owned(), Instant::now()),
            Ok(n) => seen.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&seen).into_owned(), Instant::now())
            }
            Err(e) => panic!("the agent never closed the connection: {e}"),
        }
    }
}

#[test]
fn a_request_head_owed_too_long_closes_its_connection() {
    let agent = agent();
    let mut slow = connect(&agent);
    let started = Instant::now();
    slow.write_all(b"GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let (answer, closed) = read_to_close(&mut slow);
    assert_eq!(answer, "", "a half-sent head got an answer");
    // Closed by the 1 s deadline, not before it.
    assert!(closed - started >= Duration::from_secs(1));
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_its_answer() {
    let agent = agent();
    let mut client = connect(&agent);
    client
        .write_all(b"GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let asked = Instant::now();
    let (answer, closed) = read_to_close(&mut client);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    // Kept alive after its answer, then closed for idleness: not before
    // the 2 s idle timeout.
    assert!(
        !answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(closed - asked >= Duration::from_secs(2));
}

#[test]
fn a_blocking_query_outlives_both_deadlines() {
    let agent = agent();
    let mut client = connect(&agent);
    let started = Instant::now();
    client
        .write_all(b"GET /v1/kv/held?index=100000&wait=4s HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (answer, _) = read_to_close(&mut client);
    // Answered when its wait ran out (404: no such key), past the 1 s and
    // 2 s deadlines, and only then closed for idleness.
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(started.elapsed() >= Duration::from_secs(4));
}

/// (hyper itself reads the end of file of an HTTP/1 connection whose
/// request is in flight: the agent polls no socket for it. HTTPS and
/// HTTP/2 are checked in `client_tls.rs`.)
#[test]
fn a_blocking_query_whose_client_left_is_dropped_at_once() {
    // The default head deadline: the one-second deadline of `agent()`
    // could close a connection before a loaded machine let the agent read
    // its head, and the query would never be held.
    let agent = TestAgent::dev(&[
        "-hcl=telemetry { prometheus_retention_time = \"1h\" disable_hostname = true }",
    ]);
    let scrape = || {
        agent
            .get_text("/v1/agent/metrics?format=prometheus")
            .unwrap()
    };
    let blocking = || common::prometheus::sum(&scrape(), "consul_rpc_queries_blocking", &[]);
    // The agent's own watches hold blocking queries too: count from theirs,
    // once their number has held still for half a second (they start
    // with the agent).
    let mut before = blocking();
    let mut still_since = std::time::Instant::now();
    let settle_by = std::time::Instant::now() + Duration::from_secs(10);
    while still_since.elapsed() < Duration::from_millis(500)
        && std::time::Instant::now() < settle_by
    {
        std::thread::sleep(Duration::from_millis(50));
        let now = blocking();
        if now != before {
            before = now;
            still_since = std::time::Instant::now();
        }
    }
    let mut clients: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut client = connect(&agent);
            client
                .write_all(b"GET /v1/kv/held?index=100000&wait=10m HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            client
        })
        .collect();
    let during = common::eventually(Duration::from_secs(10), || {
        let now = blocking();
        (now >= before + 5.0).then_some(now)
    });
    clients.clear();
    // Their ten-minute waits end with the clients, not with the wait.
    common::eventually(Duration::from_secs(10), || {
        (blocking() <= during - 5.0).then_some(())
    });
}
