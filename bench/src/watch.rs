//! Watchers on one key, each on a connection of its own that it keeps:
//! Legate's blocking queries (as a Consul watch holds its connection
//! between queries) and etcd's v3 watch streams (its JSON gateway).
//!
//! Both kinds speak plain HTTP/1.1 over their sockets, the same lean
//! client for both peers: a general client (reqwest) spent as much CPU per
//! woken watcher as the agent did, and with its idle pool capped it closed
//! most connections as the answers came, so both sides paid for TCP
//! teardown inside the measured wake. One thread reads every watcher's
//! socket through one epoll set (see [`Watchers`]): the load generator
//! shares this machine's two cores with the server it measures, so the
//! less CPU it spends per answer, the less it weighs on the server's
//! figures — for every peer alike.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};

/// What a watcher asks its peer for, and how it reads the answer.
#[derive(Clone)]
enum Watch {
    /// A blocking read of `/v1/kv/watched` past `index`.
    Legate { index: u64 },
    /// An etcd v3 watch stream on `key` (base64).
    Etcd { key: String },
}

/// How far one watcher's answer has come.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Progress {
    /// Nothing yet that counts.
    Waiting,
    /// The peer confirmed the watch (etcd's `"created":true`).
    Ready,
    /// The change arrived.
    Done,
}

impl Watch {
    fn request(&self, host: &str) -> String {
        match self {
            Watch::Legate { index } => format!(
                "GET /v1/kv/watched?index={index}&wait=60s HTTP/1.1\r\nHost: {host}\r\nUser-Agent: legate-bench\r\n\r\n"
            ),
            Watch::Etcd { key } => {
                let body = format!(r#"{{"create_request":{{"key":"{key}"}}}}"#);
                format!(
                    "POST /v3/watch HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
        }
    }

    /// Reads what has arrived so far on one watcher's connection.
    fn progress(&self, seen: &[u8]) -> Result<Progress> {
        match self {
            Watch::Legate { .. } => Ok(match complete_length(seen)? {
                Some(total) if seen.len() >= total => Progress::Done,
                _ => Progress::Waiting,
            }),
            Watch::Etcd { .. } => {
                let Some(created) = find(seen, br#""created":true"#) else {
                    return Ok(Progress::Waiting);
                };
                Ok(if find(&seen[created..], br#""events""#).is_some() {
                    Progress::Done
                } else {
                    Progress::Ready
                })
            }
        }
    }

    /// A blocking read is in place as soon as it is sent; an etcd watch
    /// once etcd confirms it.
    fn ready_when_sent(&self) -> bool {
        matches!(self, Watch::Legate { .. })
    }
}

/// The length of the whole response once its head is in `buf`.
fn complete_length(buf: &[u8]) -> Result<Option<usize>> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
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

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Every watcher of a round, each on a connection of its own, read by one
/// thread through one epoll set: a task per watcher on a multi-threaded
/// runtime cost more CPU per wake than the reads themselves (the reactor
/// hands each ready socket to a task, often on the other thread), CPU the
/// servers under test share on this machine.
struct Watchers {
    watch: Watch,
    epoll: OwnedFd,
    streams: Vec<TcpStream>,
    seen: Vec<Vec<u8>>,
    progress: Vec<Progress>,
    done_at: Vec<Option<Instant>>,
    /// When each change reached its socket: the kernel's receive time of
    /// the bytes that completed it (`SO_TIMESTAMPNS`), free of how late
    /// this thread, sharing the cores with the server, got to read them.
    arrived_at: Vec<Option<SystemTime>>,
}

/// Each watcher's change: when this thread read it, and when it reached
/// the watcher's socket.
struct Changes {
    read_at: Vec<Instant>,
    arrived_at: Vec<SystemTime>,
}

impl Watchers {
    /// Opens `count` connections to `host` and sends each its watch.
    fn open(host: &str, count: usize, watch: Watch) -> Result<Watchers> {
        // SAFETY: epoll_create1 has no preconditions; the result is checked.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error()).context("epoll_create1");
        }
        // SAFETY: `raw` is a fresh descriptor this struct now owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
        let request = watch.request(host);
        let mut streams = Vec::with_capacity(count);
        for slot in 0..count {
            let mut stream = TcpStream::connect(host).with_context(|| format!("connect {host}"))?;
            stream.set_nodelay(true)?;
            stream.write_all(request.as_bytes())?;
            stream.set_nonblocking(true)?;
            stamp_arrivals(&stream)?;
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: slot as u64,
            };
            epoll_ctl(&epoll, libc::EPOLL_CTL_ADD, &stream, &mut event)?;
            streams.push(stream);
        }
        let initial = if watch.ready_when_sent() {
            Progress::Ready
        } else {
            Progress::Waiting
        };
        Ok(Watchers {
            watch,
            epoll,
            seen: vec![Vec::new(); count],
            progress: vec![initial; count],
            done_at: vec![None; count],
            arrived_at: vec![None; count],
            streams,
        })
    }

    /// Reads until every watcher has its change (or `deadline` passes),
    /// counting confirmed watches in `ready`; returns when each change
    /// was read and when it arrived, with the connections still open.
    fn run(
        mut self,
        ready: Arc<AtomicUsize>,
        deadline: Instant,
    ) -> Result<(Changes, Vec<TcpStream>)> {
        ready.store(
            self.progress
                .iter()
                .filter(|p| **p != Progress::Waiting)
                .count(),
            Ordering::SeqCst,
        );
        let mut remaining = self.streams.len();
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
        let mut chunk = [0u8; 4096];
        while remaining > 0 {
            if Instant::now() > deadline {
                bail!("{remaining} watchers saw no change in time");
            }
            // SAFETY: `events` has room for the count passed.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    100,
                )
            };
            if n < 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error).context("epoll_wait");
            }
            for event in &events[..n as usize] {
                let slot = event.u64 as usize;
                let read = match read_stamped(&self.streams[slot], &mut chunk) {
                    Ok((0, _)) if self.progress[slot] == Progress::Done => {
                        self.forget(slot)?;
                        continue;
                    }
                    Ok((0, _)) => bail!("the peer closed a watcher's connection before answering"),
                    Ok(read) => read,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e).context("read"),
                };
                if self.progress[slot] == Progress::Done {
                    continue;
                }
                let (read, arrived) = read;
                let seen = &mut self.seen[slot];
                // An answer in one read is judged where it lies; only a
                // part is kept for the next read to complete.
                let now = if seen.is_empty() {
                    let now = self.watch.progress(&chunk[..read])?;
                    if now != Progress::Done {
                        seen.extend_from_slice(&chunk[..read]);
                    }
                    now
                } else {
                    seen.extend_from_slice(&chunk[..read]);
                    self.watch.progress(seen)?
                };
                if now == Progress::Done {
                    self.done_at[slot] = Some(Instant::now());
                    self.arrived_at[slot] =
                        Some(arrived.context("the kernel gave no receive time for an answer")?);
                    remaining -= 1;
                }
                if self.progress[slot] == Progress::Waiting && now != Progress::Waiting {
                    ready.fetch_add(1, Ordering::SeqCst);
                }
                self.progress[slot] = now;
            }
        }
        let changes = Changes {
            read_at: self.done_at.into_iter().flatten().collect(),
            arrived_at: self.arrived_at.into_iter().flatten().collect(),
        };
        Ok((changes, self.streams))
    }

    /// Stops watching a connection the peer closed after its answer.
    fn forget(&self, slot: usize) -> Result<()> {
        // DEL ignores the event.
        let mut unused = libc::epoll_event { events: 0, u64: 0 };
        epoll_ctl(
            &self.epoll,
            libc::EPOLL_CTL_DEL,
            &self.streams[slot],
            &mut unused,
        )
    }
}

/// Has the kernel stamp each read of `stream` with the time its bytes
/// arrived (`SO_TIMESTAMPNS`, the wall clock).
fn stamp_arrivals(stream: &TcpStream) -> Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is open and `on` outlives the call, with its
    // size passed.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context("setsockopt(SO_TIMESTAMPNS)");
    }
    Ok(())
}

/// One `recvmsg(2)` into `buf`: the bytes read and, when the kernel gave
/// one, the arrival time of the last of them.
fn read_stamped(
    stream: &TcpStream,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<SystemTime>)> {
    // Room for one `SCM_TIMESTAMPNS` message, aligned for `cmsghdr`.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid (no name, no buffers).
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `message` points at `iov` (over `buf`) and `control`, all
    // of which outlive the call, with their sizes.
    let read = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut message, 0) };
    if read < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut arrived = None;
    // SAFETY: the CMSG_* walk stays within `message.msg_controllen`
    // bytes of `control`, as the kernel filled it.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET
                && (*header).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let at: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast());
                arrived = Some(
                    SystemTime::UNIX_EPOCH + Duration::new(at.tv_sec as u64, at.tv_nsec as u32),
                );
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    Ok((read as usize, arrived))
}

/// `epoll_ctl(2)` of `op` on `stream` in `epoll`.
fn epoll_ctl(
    epoll: &OwnedFd,
    op: libc::c_int,
    stream: &TcpStream,
    event: &mut libc::epoll_event,
) -> Result<()> {
    // SAFETY: both descriptors are open (borrowed for the call) and
    // `event` outlives it.
    let rc = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, stream.as_raw_fd(), event) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context("epoll_ctl");
    }
    Ok(())
}

/// Each live thread's on-CPU time, to the nanosecond, by thread id:
/// `/proc/<pid>/task/*/schedstat` (`/proc/<pid>/stat` counts in 10 ms
/// ticks, too coarse for one wake).
struct CpuTimes(std::collections::HashMap<u32, u64>);

impl CpuTimes {
    fn of(pid: u32) -> Result<CpuTimes> {
        let mut threads = std::collections::HashMap::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let task = task?;
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            // A thread that ended since the listing is skipped.
            let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let on_cpu: u64 = stat
                .split_whitespace()
                .next()
                .context("empty schedstat")?
                .parse()?;
            threads.insert(tid, on_cpu);
        }
        Ok(CpuTimes(threads))
    }

    /// The CPU `pid`'s threads used since these times: each thread's own
    /// growth, a thread born since counted whole. A thread that ended in
    /// between takes its time since with it (an undercount; the servers'
    /// workers are long-lived), where a plain sum of the live threads
    /// would go back.
    fn since(&self, pid: u32) -> Result<Duration> {
        let now = CpuTimes::of(pid)?;
        let grown = now
            .0
            .iter()
            .map(|(tid, after)| after.saturating_sub(self.0.get(tid).copied().unwrap_or(0)))
            .sum();
        Ok(Duration::from_nanos(grown))
    }
}

/// While the watchers wait: settles for a second, then returns the share
/// of one core `pid` used over the next two (`None` without a pid).
async fn idle_share(pid: Option<u32>) -> Result<Option<f64>> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let Some(pid) = pid else {
        tokio::time::sleep(Duration::from_secs(2)).await;
        return Ok(None);
    };
    let before = CpuTimes::of(pid)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(Some(before.since(pid)?.as_secs_f64() / 2.0))
}

/// One round's wake latencies, the share of a core the server used while
/// the watchers waited, and the CPU it spent from the write until the
/// last watcher had its answer.
pub struct Round {
    /// From the write until each watcher read its change.
    pub latencies: Vec<Duration>,
    /// From the write until each change reached its watcher's socket.
    pub arrivals: Vec<Duration>,
    pub idle_share: Option<f64>,
    pub wake_cpu: Option<Duration>,
}

/// One round against either peer: opens `watchers` watches, waits until
/// each is in place and the server has settled, writes the key once
/// (`write`) and returns each watcher's wake latency.
async fn round<W>(
    url: &str,
    watchers: usize,
    watch: Watch,
    pid: Option<u32>,
    write: W,
) -> Result<Round>
where
    W: std::future::Future<Output = Result<()>>,
{
    let host = host_of(url);
    let opened =
        tokio::task::spawn_blocking(move || Watchers::open(&host, watchers, watch)).await??;
    let ready = Arc::new(AtomicUsize::new(0));
    let reader = {
        let ready = ready.clone();
        let deadline = Instant::now() + Duration::from_secs(90);
        std::thread::spawn(move || opened.run(ready, deadline))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready.load(Ordering::SeqCst) < watchers
        && Instant::now() < deadline
        && !reader.is_finished()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let every watcher reach the server and block.
    let idle_share = idle_share(pid).await?;
    let cpu_before = pid.map(CpuTimes::of).transpose()?;
    let written = Instant::now();
    let written_wall = SystemTime::now();
    write.await?;
    let (changes, open) = tokio::task::spawn_blocking(move || reader.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the watch reader panicked"))??;
    let wake_cpu = match (pid, cpu_before) {
        (Some(pid), Some(before)) => Some(before.since(pid)?),
        _ => None,
    };
    let latencies = changes
        .read_at
        .iter()
        .map(|at| at.saturating_duration_since(written))
        .collect();
    let arrivals = changes
        .arrived_at
        .iter()
        .map(|at| at.duration_since(written_wall).unwrap_or_default())
        .collect();
    // The connections close only after a pause, so their teardown stays
    // out of any profile of the wake.
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(open);
    Ok(Round {
        latencies,
        arrivals,
        idle_share,
        wake_cpu,
    })
}

/// One etcd round: `watchers` watch streams on the key, written once.
pub async fn etcd_round(
    client: &reqwest::Client,
    url: &str,
    watchers: usize,
    round_number: usize,
    pid: Option<u32>,
) -> Result<Round> {
    let key = crate::b64("watched");
    let write = async {
        client
            .post(format!("{url}/v3/kv/put"))
            .json(&serde_json::json!({"key": key, "value": crate::b64(&format!("{round_number}"))}))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    };
    round(url, watchers, Watch::Etcd { key: key.clone() }, pid, write).await
}

fn host_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// One Legate round: seeds the key, opens `watchers` blocking reads on
/// it, writes it once.
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
    let write = async {
        client
            .put(format!("{url}/v1/kv/watched"))
            .body("1")
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    };
    round(url, watchers, Watch::Legate { index }, pid, write).await
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
        let pid = std::process::id();
        let before = CpuTimes::of(pid).unwrap();
        let start = rusage();
        let mut spin = 0u64;
        while rusage() < start + Duration::from_millis(300) {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        // Both count this test's threads; the spin alone is 300 ms.
        let grew = before.since(pid).unwrap();
        assert!(
            grew >= Duration::from_millis(280) && grew <= Duration::from_millis(2000),
            "{grew:?}"
        );
        assert!(CpuTimes::of(u32::MAX).is_err());
    }

    #[test]
    fn a_thread_that_ends_inside_the_window_takes_no_time_back_from_the_others() {
        let pid = std::process::id();
        let spin = |millis| {
            let start = rusage();
            while rusage() < start + Duration::from_millis(millis) {
                std::hint::black_box(0u64);
            }
        };
        // A thread with 200 ms of its own, alive when the window opens.
        let (started, go) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        let before = std::thread::scope(|scope| {
            scope.spawn(|| {
                spin(200);
                started.wait();
                go.wait();
            });
            started.wait();
            let before = CpuTimes::of(pid).unwrap();
            go.wait();
            before
        });
        // It has ended now; 100 ms of this thread's own work inside the
        // window still count in full (a plain sum would have dropped by
        // the ended thread's 200 ms).
        spin(100);
        let grew = before.since(pid).unwrap();
        assert!(
            grew >= Duration::from_millis(90) && grew < Duration::from_millis(1000),
            "{grew:?}"
        );
    }

    #[tokio::test]
    async fn a_round_against_the_floor_server_times_every_watcher() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        tokio::spawn(crate::watch_floor::serve(port));
        let url = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        for _ in 0..100 {
            if client
                .get(format!("{url}/v1/kv/watched"))
                .send()
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let round = legate_round(&client, &url, 5, None).await.unwrap();
        assert_eq!(round.latencies.len(), 5);
        assert_eq!(round.arrivals.len(), 5);
        // Each watcher was answered by the write, not by its 60 s wait.
        assert!(round.latencies.iter().all(|l| *l < Duration::from_secs(30)));
        // An answer reaches its socket before it is read (the two clocks
        // are read a few microseconds apart at the write).
        for (arrived, read) in round.arrivals.iter().zip(&round.latencies) {
            assert!(*arrived > Duration::ZERO);
            assert!(
                *arrived <= *read + Duration::from_millis(1),
                "{arrived:?} > {read:?}"
            );
        }
        assert_eq!(round.idle_share, None);
        assert_eq!(round.wake_cpu, None);
    }

    #[test]
    fn an_etcd_watch_is_ready_when_created_and_done_with_its_events() {
        let watch = Watch::Etcd {
            key: "d2F0Y2hlZA==".into(),
        };
        assert!(!watch.ready_when_sent());
        let created = br#"{"result":{"header":{},"created":true}}"#.to_vec();
        assert_eq!(
            watch.progress(b"HTTP/1.1 200 OK\r\n").unwrap(),
            Progress::Waiting
        );
        assert_eq!(watch.progress(&created).unwrap(), Progress::Ready);
        let mut both = created.clone();
        both.extend_from_slice(br#"{"result":{"events":[{"kv":{}}]}}"#);
        assert_eq!(watch.progress(&both).unwrap(), Progress::Done);
        let legate = Watch::Legate { index: 3 };
        assert!(legate.ready_when_sent());
        assert!(legate
            .request("h:1")
            .starts_with("GET /v1/kv/watched?index=3&wait=60s "));
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
