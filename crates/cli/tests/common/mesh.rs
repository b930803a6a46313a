//! Mesh helpers: `legate connect proxy` sidecars, echo servers and
//! clients through an upstream listener.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{binary, free_port, TestAgent};

/// The seed demo's services: web with a sidecar whose upstream is db on
/// 9191, and db with a sidecar.
pub const SEED_DEMO: &str = r#"services {
  name = "web"
  port = 8080
  connect {
    sidecar_service {
      proxy {
        upstreams {
          destination_name = "db"
          local_bind_port = 9191
        }
      }
    }
  }
}
services {
  name = "db"
  port = 9090
  connect { sidecar_service {} }
}
"#;

/// The seed demo on chosen ports: web's sidecar listens on `web_sidecar`
/// with db as its upstream on `upstream`; db (the application on
/// `echo_port`) has its sidecar on `db_sidecar`.
pub fn seed_demo_on(echo_port: u16, web_sidecar: u16, db_sidecar: u16, upstream: u16) -> String {
    format!(
        r#"
services {{
  name = "web"
  port = 8080
  connect {{
    sidecar_service {{
      port = {web_sidecar}
      proxy {{
        upstreams {{
          destination_name = "db"
          local_bind_port = {upstream}
        }}
      }}
    }}
  }}
}}
services {{
  name = "db"
  port = {echo_port}
  connect {{ sidecar_service {{ port = {db_sidecar} }} }}
}}
"#
    )
}

/// The seed demo on free ports, written to `demo.hcl` in a fresh
/// directory, with db's echo server already answering.
pub struct SeedDemo {
    /// The directory holding `demo.hcl` (and whatever a test adds).
    pub dir: tempfile::TempDir,
    /// `demo.hcl`.
    pub config: std::path::PathBuf,
    /// web's upstream listener for db.
    pub upstream: u16,
    /// A free port for the agent's gRPC (xDS).
    pub grpc: u16,
    /// Lines db's echo server has answered.
    pub received: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SeedDemo {
    /// Picks the ports, starts db's echo server and writes the file.
    pub fn new() -> SeedDemo {
        let (echo_port, web_sidecar, db_sidecar, upstream, grpc) = (
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        );
        let received = echo_server(echo_port);
        let dir = tempfile::tempdir().unwrap();
        let config = super::write(
            dir.path(),
            "demo.hcl",
            &seed_demo_on(echo_port, web_sidecar, db_sidecar, upstream),
        );
        SeedDemo {
            dir,
            config,
            upstream,
            grpc,
            received,
        }
    }
}

impl SeedDemo {
    /// A dev agent running the demo's file, with xDS on the demo's port.
    pub fn start_agent(&self) -> TestAgent {
        TestAgent::start_with(
            &[
                "-dev",
                "-dns-port=-1",
                &format!("-grpc-port={}", self.grpc),
                "-config-file",
                self.config.to_str().unwrap(),
            ],
            false,
        )
    }
}

/// The logs of the demo's sidecars (`web.log`, `db.log` in `dir`) and of
/// its agent, for a failure message.
pub fn demo_logs(dir: &std::path::Path, agent: &TestAgent) -> String {
    format!(
        "web:\n{}\ndb:\n{}\nagent:\n{}",
        std::fs::read_to_string(dir.join("web.log")).unwrap_or_default(),
        std::fs::read_to_string(dir.join("db.log")).unwrap_or_default(),
        agent.log_text()
    )
}

/// xDS type URLs.
pub const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// The cluster type URL.
pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// The endpoints type URL.
pub const ENDPOINT_TYPE: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// A running `legate connect proxy`, killed when dropped.
pub struct Proxy(pub Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `legate connect proxy -sidecar-for <service>` against `agent`, logging to `log`.
pub fn start_proxy(agent: &TestAgent, service: &str, log: &std::path::Path) -> Proxy {
    start_proxy_with(agent, service, log, &[])
}

/// [`start_proxy`] with more flags (`-token-file`, `-grpc-ca-file`, ...).
pub fn start_proxy_with(
    agent: &TestAgent,
    service: &str,
    log: &std::path::Path,
    extra: &[&str],
) -> Proxy {
    let file = std::fs::File::create(log).unwrap();
    Proxy(
        Command::new(binary())
            .args([
                "connect",
                "proxy",
                "-sidecar-for",
                service,
                "-admin-bind",
                "127.0.0.1:0",
            ])
            .args(extra)
            .env("CONSUL_HTTP_ADDR", agent.addr())
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap(),
    )
}

/// An echo server on 127.0.0.1 counting the bytes it ever received.
pub fn echo_server(port: u16) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    serve_echo(TcpListener::bind(("127.0.0.1", port)).unwrap())
}

/// An echo server on a port of `address` the system picks; its counter
/// and port.
pub fn echo_server_at(address: &str) -> (std::sync::Arc<std::sync::atomic::AtomicU64>, u16) {
    let listener = TcpListener::bind((address, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    (serve_echo(listener), port)
}

fn serve_echo(listener: TcpListener) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = received.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    counter.fetch_add(n as u64, std::sync::atomic::Ordering::SeqCst);
                    if conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    received
}

/// Sends a line through the upstream listener; the echoed reply, if any within 1 s.
pub fn echo(port: u16, line: &str) -> Option<String> {
    echo_at("127.0.0.1", port, line)
}

/// [`echo`] through an upstream listener on `address`.
pub fn echo_at(address: &str, port: u16, line: &str) -> Option<String> {
    echo_within(address, port, line, Duration::from_secs(1))
}

/// [`echo_at`] waiting up to `patience` to connect and for each read
/// (paths of several proxies on a loaded machine).
pub fn echo_within(address: &str, port: u16, line: &str, patience: Duration) -> Option<String> {
    let target: std::net::SocketAddr = format!("{address}:{port}").parse().ok()?;
    let mut s = TcpStream::connect_timeout(&target, patience).ok()?;
    s.set_read_timeout(Some(patience)).ok()?;
    s.write_all(line.as_bytes()).ok()?;
    let mut buf = vec![0u8; line.len()];
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got += n,
        }
    }
    Some(String::from_utf8_lossy(&buf).to_string())
}

/// Waits until `f` holds; on timeout panics with `what` and the logs.
pub fn eventually(
    what: &str,
    timeout: Duration,
    logs: &dyn Fn() -> String,
    mut f: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for: {what}\n{}", logs());
}

/// A long-lived connection through the upstream listener.
pub struct Conn(TcpStream);

impl Conn {
    /// Opens a connection to the upstream listener at `port`.
    pub fn open(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        Conn(s)
    }

    /// Sends `line` and reads it back.
    pub fn echo(&mut self, line: &str) -> bool {
        if self.0.write_all(line.as_bytes()).is_err() {
            return false;
        }
        let mut buf = vec![0u8; line.len()];
        self.0.read_exact(&mut buf).is_ok() && buf == line.as_bytes()
    }
}

/// The admin port a `legate connect proxy` printed to its log.
pub fn admin_port(log: &std::path::Path) -> u16 {
    let text = std::fs::read_to_string(log).unwrap();
    let admin = text
        .lines()
        .find_map(|l| l.split("Admin and metrics on http://").nth(1))
        .map(|rest| rest.trim_end_matches("/stats").to_string())
        .expect("the admin address is printed");
    admin.rsplit(':').next().unwrap().parse().unwrap()
}

/// A counter of a proxy's `/stats` (0 when absent).
pub fn proxy_stat(log: &std::path::Path, name: &str) -> u64 {
    let (status, _, stats) = super::http_request(admin_port(log), "GET", "/stats", None);
    assert_eq!(status, 200);
    stats
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
