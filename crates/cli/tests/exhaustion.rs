//! Connection exhaustion through the real binary: an agent limited to
//! 1,024 open files, 1,100 idle connections to each of its listeners (HTTP,
//! DNS over TCP, gRPC, the server port), then more connections than it has
//! files from many addresses. Other clients must still be answered and no
//! thread may spin.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::free_port;

/// The agent's CPU time so far (user + system), from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// CPU the agent used over `period`.
fn cpu_over(pid: u32, period: Duration) -> Duration {
    let before = cpu_time(pid);
    std::thread::sleep(period);
    cpu_time(pid) - before
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A connection from `source` (a loopback address) to `port`.
fn connect_from(source: Ipv4Addr, port: u16) -> Option<TcpStream> {
    let socket = connect_bound(source, port)?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    Some(socket)
}

/// `connect(2)` from a chosen source address (std cannot bind a client
/// socket), handed to std as a `TcpStream`.
fn connect_bound(source: Ipv4Addr, port: u16) -> Option<TcpStream> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let stream = TcpStream::from_raw_fd(fd);
        let addr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // A connect that waits on a full accept queue gives up after 2 s
        // (Linux takes the send timeout as the connect timeout).
        let timeout = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            &timeout as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        let local = addr(source, 0);
        if libc::bind(fd, &local as *const _ as *const libc::sockaddr, len) != 0 {
            return None;
        }
        let remote = addr(Ipv4Addr::LOCALHOST, port);
        if libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len) != 0 {
            return None;
        }
        Some(stream)
    }
}

fn http_get(source: Ipv4Addr, port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = connect_from(source, port)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, raw))
}

/// One DNS query over TCP from `source`; the answer's rcode.
fn dns_tcp(source: Ipv4Addr, port: u16) -> Option<u8> {
    let mut stream = connect_from(source, port)?;
    // id 7, RD, one question: consul.service.consul A IN.
    let mut q = vec![0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["consul", "service", "consul"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut out = (q.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&q);
    stream.write_all(&out).ok()?;
    let mut head = [0u8; 6];
    stream.read_exact(&mut head).ok()?;
    (head[2..4] == [0, 7]).then_some(head[5] & 0x0f)
}

/// Whether the gRPC port answers an HTTP/2 preface with a SETTINGS frame.
fn grpc_answers(source: Ipv4Addr, port: u16) -> bool {
    let Some(mut stream) = connect_from(source, port) else {
        return false;
    };
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    if stream.write_all(&hello).is_err() {
        return false;
    }
    let mut frame = [0u8; 9];
    stream.read_exact(&mut frame).is_ok() && frame[3] == 4
}

struct Agent {
    child: Child,
    http: u16,
    dns: u16,
    grpc: u16,
    server: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_limited_agent() -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let (http, dns, grpc, server) = (free_port(), free_port(), free_port(), free_port());
    let log = std::fs::File::create(dir.path().join("agent.log")).unwrap();
    let child = Command::new("bash")
        .arg("-c")
        .arg(r#"ulimit -n 1024 && exec "$0" "$@""#)
        .arg(common::binary())
        .args(["agent", "-server", "-bootstrap-expect=1", "-node=limited"])
        .args(["-hcl", r#"limits { http_handshake_timeout = "10s" }"#])
        .arg(format!("-data-dir={}", dir.path().join("data").display()))
        .args(["-bind=127.0.0.1", "-client=127.0.0.1"])
        .arg(format!("-http-port={http}"))
        .arg(format!("-dns-port={dns}"))
        .arg(format!("-grpc-port={grpc}"))
        .arg(format!("-server-port={server}"))
        .arg(format!("-serf-lan-port={}", free_port()))
        .arg(format!("-serf-wan-port={}", free_port()))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let agent = Agent {
        child,
        http,
        dns,
        grpc,
        server,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((200, body)) = http_get(Ipv4Addr::LOCALHOST, http, "/v1/status/leader") {
            if body.contains(":") && !body.ends_with("\"\"") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the agent did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    agent
}

fn raise_own_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and writes the struct given.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    assert!(limit.rlim_cur >= 6000, "the test needs 6000 open files");
}

#[test]
fn idle_connections_and_a_full_file_table_never_stop_or_spin_the_agent() {
    raise_own_file_limit();
    let agent = start_limited_agent();
    let pid = agent.child.id();
    let other = Ipv4Addr::new(127, 0, 0, 2);

    // 1,100 idle connections from one address to every listener.
    let mut idle = Vec::new();
    // HTTP last: its idle connections are closed 5 s after they open.
    for port in [agent.dns, agent.grpc, agent.server, agent.http] {
        for _ in 0..1100 {
            if let Some(s) = connect_from(Ipv4Addr::LOCALHOST, port) {
                idle.push(s);
            }
        }
    }
    assert!(idle.len() >= 4000, "{} connected", idle.len());
    // The capped client gets Consul's 429 over HTTP ...
    let (status, body) = http_get(Ipv4Addr::LOCALHOST, agent.http, "/v1/status/leader").unwrap();
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("Your IP is issuing too many concurrent connections"));
    // ... per-client caps hold the agent well below its file limit ...
    // (The caps close the excess as the agent accepts it: on a loaded
    // machine that may trail the last connect briefly, well inside the 5 s
    // after which HTTP's idle connections would close anyway.)
    let settled = Instant::now() + Duration::from_secs(2);
    let mut files = open_files(pid);
    while files >= 900 && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(100));
        files = open_files(pid);
    }
    assert!(files < 900, "the agent holds {files} files");
    // ... other clients are answered at once on every listener ...
    let (status, _) = http_get(other, agent.http, "/v1/status/leader").expect("HTTP answer");
    assert_eq!(status, 200);
    assert_eq!(dns_tcp(other, agent.dns), Some(0), "DNS over TCP");
    assert!(grpc_answers(other, agent.grpc), "gRPC");
    // ... and nothing spins.
    let cpu = cpu_over(pid, Duration::from_secs(5));
    assert!(
        cpu < Duration::from_millis(750),
        "the agent used {cpu:?} of CPU in 5 s"
    );
    // Silent connections are closed by the handshake deadlines (HTTP 10s
    // here, server port 5s), and the capped client is served again.
    let deadline = Instant::now() + Duration::from_secs(15);
    while http_get(Ipv4Addr::LOCALHOST, agent.http, "/v1/status/leader").map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the capped client was never served again"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(idle);
    std::thread::sleep(Duration::from_millis(500));

    // More connections than the agent has files, from 25 addresses (each
    // under its cap), each with a blocking query in flight (never cut):
    // accepting fails for lack of descriptors, and the accept loops back
    // off instead of spinning.
    // Enough to take every descriptor the agent has left, and 100 more
    // that wait in its accept queue.
    let wanted = 1024 - open_files(pid) + 100;
    let mut flood = Vec::new();
    for i in 0..wanted as u32 {
        let source = Ipv4Addr::new(127, 0, 1, (i % 25) as u8 + 1);
        if let Some(mut s) = connect_from(source, agent.http) {
            let _ = s.write_all(
                b"GET /v1/kv/flood?index=100000000&wait=60s HTTP/1.1\r\nHost: x\r\n\r\n",
            );
            flood.push(s);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let files = open_files(pid);
    assert!(files >= 1020, "the file table should be full: {files}");
    let cpu = cpu_over(pid, Duration::from_secs(5));
    assert!(
        cpu < Duration::from_millis(750),
        "the agent used {cpu:?} of CPU in 5 s with a full file table"
    );
    drop(flood);
    // Once the clients go, the agent answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some((200, _)) = http_get(other, agent.http, "/v1/status/leader") {
            break;
        }
        assert!(Instant::now() < deadline, "the agent did not recover");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(dns_tcp(other, agent.dns), Some(0));
    assert!(grpc_answers(other, agent.grpc));
}
