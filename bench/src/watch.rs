//! Watchers on one key, each on a connection of its own that it keeps:
//! Legate's blocking queries (as a Consul watch holds its connection
//! between queries) and etcd's v3 watch streams (its JSON gateway).
//!
//! Both kinds speak plain HTTP/1.1 over their sockets, the same lean
//! client for both peers: a general client (reqwest) spent as much CPU per
//! woken watcher as the agent did, and with its idle pool capped it closed
//! most connections as the answers came, so both sides paid for TCP
//! teardown inside the measured wake.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One watcher's blocking read: the request sent, then the time its whole
/// answer arrived. The connection is handed back so it stays open until
/// every watcher has its answer.
async fn wait_for_change(
    mut stream: TcpStream,
    host: String,
    index: u64,
) -> Result<(Instant, TcpStream)> {
    let request = format!(
        "GET /v1/kv/watched?index={index}&wait=60s HTTP/1.1\r\nHost: {host}\r\nUser-Agent: legate-bench\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the agent closed the connection before answering");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(total) = complete_length(&buf)? {
            if buf.len() >= total {
                return Ok((Instant::now(), stream));
            }
        }
    }
}

/// The length of the whole response once its head is in `buf`.
fn complete_length(buf: &[u8]) -> Result<Option<usize>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).context("response head is not text")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("the watch failed: {}", head.lines().next().unwrap_or(""));
    }
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .context("no Content-Length")?
        .1
        .trim()
        .parse::<usize>()?;
    Ok(Some(end + 4 + length))
}

/// One etcd watch stream: the watch created (`ready` counts it), then the
/// time the event arrived. The stream is handed back open.
async fn etcd_stream(
    mut stream: TcpStream,
    host: String,
    key: String,
    ready: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Result<(Instant, TcpStream)> {
    let body = format!(r#"{{"create_request":{{"key":"{key}"}}}}"#);
    let request = format!(
        "POST /v3/watch HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut seen = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let mut created = false;
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("etcd closed the watch stream");
        }
        seen.extend_from_slice(&chunk[..n]);
        if !created && contains(&seen, br#""created":true"#) {
            created = true;
            ready.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        if created && contains(&seen, br#""events""#) {
            return Ok((Instant::now(), stream));
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// One etcd round: opens `watchers` watch streams on the key, writes it
/// once and returns each stream's wake latency.
pub async fn etcd_round(
    client: &reqwest::Client,
    url: &str,
    watchers: usize,
    round: usize,
) -> Result<Vec<Duration>> {
    let key = crate::b64("watched");
    let host = host_of(url);
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let stream = TcpStream::connect(&host).await?;
        stream.set_nodelay(true)?;
        tasks.push(tokio::spawn(etcd_stream(
            stream,
            host.clone(),
            key.clone(),
            ready.clone(),
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready.load(std::sync::atomic::Ordering::SeqCst) < watchers && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let written = Instant::now();
    client
        .post(format!("{url}/v3/kv/put"))
        .json(&serde_json::json!({"key": key, "value": crate::b64(&format!("{round}"))}))
        .send()
        .await?;
    collect(tasks, written).await
}

/// Each watcher's latency after `written`; the connections close only
/// after a pause, so their teardown stays out of any profile of the wake.
async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Result<(Instant, TcpStream)>>>,
    written: Instant,
) -> Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut open = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (at, stream) = task.await??;
        latencies.push(at.saturating_duration_since(written));
        open.push(stream);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(open);
    Ok(latencies)
}

fn host_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// One round: seeds the key, opens `watchers` blocking reads on it, writes
/// it once and returns each watcher's wake latency.
pub async fn legate_round(
    client: &reqwest::Client,
    url: &str,
    watchers: usize,
) -> Result<Vec<Duration>> {
    let response = client
        .put(format!("{url}/v1/kv/watched"))
        .body("0")
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("seed write failed");
    }
    let index: u64 = client
        .get(format!("{url}/v1/kv/watched"))
        .send()
        .await?
        .headers()
        .get("x-consul-index")
        .context("no X-Consul-Index")?
        .to_str()?
        .parse()?;
    let host = host_of(url);
    let mut tasks = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let stream = TcpStream::connect(&host).await?;
        stream.set_nodelay(true)?;
        tasks.push(tokio::spawn(wait_for_change(stream, host.clone(), index)));
    }
    // Let every watcher reach the server and block.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written = Instant::now();
    client
        .put(format!("{url}/v1/kv/watched"))
        .body("1")
        .send()
        .await?;
    collect(tasks, written).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_complete_with_its_body() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nX-Consul-Index: 7\r\n\r\n";
        assert_eq!(complete_length(&head[..20]).unwrap(), None);
        assert_eq!(complete_length(head).unwrap(), Some(head.len() + 5));
        assert!(complete_length(b"HTTP/1.1 500 Internal\r\n\r\n").is_err());
        assert!(complete_length(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
    }
}
