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

/// CPU time a process has used (user + system), from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("unreadable /proc stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_millis(ticks * 1000 / per_second))
}

/// While the watchers wait: settles for a second, then returns the share
/// of one core `pid` used over the next two (`None` without a pid).
async fn idle_share(pid: Option<u32>) -> Result<Option<f64>> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let Some(pid) = pid else {
        tokio::time::sleep(Duration::from_secs(2)).await;
        return Ok(None);
    };
    let before = cpu_time(pid)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(Some((cpu_time(pid)? - before).as_secs_f64() / 2.0))
}

/// One round's wake latencies, and the share of a core the server used
/// while the watchers waited.
pub struct Round {
    pub latencies: Vec<Duration>,
    pub idle_share: Option<f64>,
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
    pid: Option<u32>,
) -> Result<Round> {
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
    let idle_share = idle_share(pid).await?;
    let written = Instant::now();
    client
        .post(format!("{url}/v3/kv/put"))
        .json(&serde_json::json!({"key": key, "value": crate::b64(&format!("{round}"))}))
        .send()
        .await?;
    Ok(Round {
        latencies: collect(tasks, written).await?,
        idle_share,
    })
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
    pid: Option<u32>,
) -> Result<Round> {
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
    let idle_share = idle_share(pid).await?;
    let written = Instant::now();
    client
        .put(format!("{url}/v1/kv/watched"))
        .body("1")
        .send()
        .await?;
    Ok(Round {
        latencies: collect(tasks, written).await?,
        idle_share,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's CPU time as getrusage(2) reports it.
    fn rusage() -> Duration {
        // SAFETY: getrusage fills the struct it is given.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
    }

    #[test]
    fn a_process_cpu_time_agrees_with_getrusage() {
        let before = cpu_time(std::process::id()).unwrap();
        let start = rusage();
        let mut spin = 0u64;
        while rusage() < start + Duration::from_millis(300) {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let after = cpu_time(std::process::id()).unwrap();
        // /proc counts in clock ticks (10 ms here): well within 100 ms.
        let grew = after.saturating_sub(before);
        assert!(
            grew >= Duration::from_millis(200) && grew <= Duration::from_millis(2000),
            "{before:?} -> {after:?}"
        );
        assert!(cpu_time(u32::MAX).is_err());
    }

    #[test]
    fn a_response_is_complete_with_its_body() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nX-Consul-Index: 7\r\n\r\n";
        assert_eq!(complete_length(&head[..20]).unwrap(), None);
        assert_eq!(complete_length(head).unwrap(), Some(head.len() + 5));
        assert!(complete_length(b"HTTP/1.1 500 Internal\r\n\r\n").is_err());
        assert!(complete_length(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
    }
}
