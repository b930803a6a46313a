//! Test harness: starts the real `legate` binary on free loopback ports
//! and talks to it over HTTP.

#![allow(dead_code)]

pub mod acl;
pub mod certs;
pub mod datacenters;
pub mod dig;
pub mod jwt;
pub mod mesh;
pub mod prometheus;
pub mod wanfed;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The ports tests pick from: below Linux's ephemeral range
/// (32768-60999), so no outgoing connection of another test — a blocking
/// query, a proxy's upstream — can be holding one as its source port when
/// an agent or proxy comes to bind it.
const TEST_PORTS: std::ops::Range<u32> = 10_000..32_000;

/// A port nobody listens on right now, and no other test of this run has
/// been given: each pick is reserved by creating a file named after it in
/// the target dir (`create_new`), so tests running side by side never get
/// the same port.
pub fn free_port() -> u16 {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let mut state = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
    for _ in 0..2_000 {
        // xorshift64: enough to spread picks over the range.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let port =
            (TEST_PORTS.start + (state % (TEST_PORTS.end - TEST_PORTS.start) as u64) as u32) as u16;
        let reserved = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(port.to_string()))
            .is_ok();
        if reserved
            && TcpListener::bind(("0.0.0.0", port)).is_ok()
            && std::net::UdpSocket::bind(("0.0.0.0", port)).is_ok()
        {
            return port;
        }
    }
    // The range is used up (a very long run): any port the kernel gives.
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Flags giving a server agent its own server and gossip ports (chosen
/// once: pass the same flags to a restarted agent), so server agents of
/// tests running side by side on 127.0.0.1 never meet on 8300-8302.
pub fn own_server_ports() -> Vec<String> {
    vec![
        format!("-server-port={}", free_port()),
        format!("-serf-lan-port={}", free_port()),
        format!("-serf-wan-port={}", free_port()),
    ]
}

/// The binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_legate"))
}

/// A running agent process; killed when dropped.
pub struct TestAgent {
    pub child: Child,
    pub http_port: u16,
    pub log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl TestAgent {
    /// `legate agent -dev` with extra flags.
    pub fn dev(extra: &[&str]) -> TestAgent {
        let mut args = vec!["-dev"];
        args.extend_from_slice(extra);
        TestAgent::start(&args)
    }

    /// `legate agent` with the given flags plus a free HTTP port; waits for
    /// a leader.
    pub fn start(flags: &[&str]) -> TestAgent {
        TestAgent::start_with(flags, true)
    }

    /// Like [`TestAgent::start`]; `disable_other_ports` turns off DNS and
    /// gRPC so parallel agents never collide on their default ports.
    pub fn start_with(flags: &[&str], disable_other_ports: bool) -> TestAgent {
        let agent = TestAgent::spawn(flags, disable_other_ports);
        agent.wait_ready();
        agent
    }

    /// Starts `legate agent` without waiting for a leader (cluster members
    /// that wait for each other).
    pub fn spawn(flags: &[&str], disable_other_ports: bool) -> TestAgent {
        TestAgent::spawn_with_env(flags, disable_other_ports, &[])
    }

    /// [`TestAgent::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        flags: &[&str],
        disable_other_ports: bool,
        env: &[(&str, &str)],
    ) -> TestAgent {
        let http_port = free_port();
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("agent.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(binary());
        command
            .arg("agent")
            .args(flags)
            .arg(format!("-http-port={http_port}"))
            .args(if disable_other_ports {
                vec!["-dns-port=-1", "-grpc-port=-1", "-grpc-tls-port=-1"]
            } else {
                vec![]
            })
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file);
        let child = command.spawn().expect("spawn legate");
        TestAgent {
            child,
            http_port,
            log,
            _log_dir: log_dir,
        }
    }

    /// Waits until a leader is known and this node is in the catalog.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some((200, _, out)) =
                try_http_request(self.http_port, "GET", "/v1/status/leader", None)
            {
                if out.trim().len() > 2 {
                    // The leader is known; wait for this node's own catalog entry too.
                    if let Ok(v) = self.get("/v1/catalog/nodes") {
                        if v.as_array().is_some_and(|a| !a.is_empty()) {
                            return;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("agent did not become ready; log:\n{}", self.log_text());
    }

    /// The agent's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// `127.0.0.1:<port>` for `-http-addr`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    /// GET and decode JSON; panics on non-2xx.
    pub fn get(&self, path: &str) -> Result<Value, String> {
        let (status, _, body) = self.request("GET", path, None);
        if !(200..300).contains(&status) {
            return Err(format!("GET {path}: {status} {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("GET {path}: {e}: {body}"))
    }

    /// GET the raw body.
    pub fn get_text(&self, path: &str) -> Result<String, String> {
        let (status, _, body) = self.request("GET", path, None);
        if !(200..300).contains(&status) {
            return Err(format!("GET {path}: {status} {body}"));
        }
        Ok(body)
    }

    /// Sends a request; returns status, headers and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, Vec<(String, String)>, String) {
        http_request(
            self.http_port,
            method,
            path,
            body.map(|b| b.as_bytes().to_vec()),
        )
    }

    /// PUT a JSON or raw body; returns status and body.
    pub fn put(&self, path: &str, body: &str) -> (u16, String) {
        let (status, _, body) = self.request("PUT", path, Some(body));
        (status, body)
    }

    /// Runs the CLI against this agent.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(binary())
            .args(args)
            .env("CONSUL_HTTP_ADDR", self.addr())
            .env_remove("LEGATE_HTTP_ADDR")
            .output()
            .unwrap()
    }

    /// Sends SIGKILL and waits.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts a CLI run succeeded (showing its stderr if not) and returns
/// its trimmed stdout.
pub fn expect_success(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Status, headers (lower-cased names) and body of a response.
pub type Response = (u16, Vec<(String, String)>, String);

/// A response whose body is kept as bytes.
pub type RawResponse = (u16, Vec<(String, String)>, Vec<u8>);

/// A minimal blocking HTTP/1.1 client (no client library in the way of
/// what the server really sends).
pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
) -> (u16, Vec<(String, String)>, String) {
    try_http_request(port, method, path, body).expect("connect to the agent")
}

/// Like [`http_request`], `None` when nothing listens.
pub fn try_http_request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
) -> Option<Response> {
    let (status, headers, body) = try_http_request_bytes(port, method, path, body)?;
    Some((status, headers, String::from_utf8_lossy(&body).to_string()))
}

/// Like [`http_request`], with the body as bytes both ways (snapshots).
pub fn http_request_bytes(
    port: u16,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
) -> RawResponse {
    try_http_request_bytes(port, method, path, body).expect("connect to the agent")
}

fn try_http_request_bytes(
    port: u16,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
) -> Option<RawResponse> {
    try_http_request_full(port, method, path, &[], body)
}

/// A request with extra headers; status, headers and body.
pub fn http_request_with_headers(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let (status, headers, body) =
        try_http_request_full(port, method, path, headers, None).expect("connect to the agent");
    (status, headers, String::from_utf8_lossy(&body).to_string())
}

/// A request with extra headers and a body; status, headers and body.
pub fn http_request_full(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    let (status, headers, body) = try_http_request_full(
        port,
        method,
        path,
        headers,
        body.map(|b| b.as_bytes().to_vec()),
    )
    .expect("connect to the agent");
    (status, headers, String::from_utf8_lossy(&body).to_string())
}

pub fn try_http_request_full(
    port: u16,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Option<RawResponse> {
    try_http_request_within(port, method, path, extra, body, Duration::from_secs(700))
}

/// [`try_http_request_full`] that stops reading after `patience` without
/// a byte: a stream that stays open (`/v1/agent/monitor`) answers with
/// its head and what it sent so far.
pub fn try_http_request_within(
    port: u16,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: Option<Vec<u8>>,
    patience: Duration,
) -> Option<RawResponse> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(patience)).unwrap();
    let body = body.unwrap_or_default();
    let extra: String = extra.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    );
    // A server may answer before it has read the whole body and close;
    // the answer is then still there to read, so a failed write is not
    // the end of the exchange.
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(&body));
    let mut raw = Vec::new();
    if stream.read_to_end(&mut raw).is_err() && raw.is_empty() {
        return None;
    }
    Some(parse_response(&raw))
}

fn parse_response(raw: &[u8]) -> RawResponse {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    (status, headers, body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 2 + size + 2..];
    }
    out
}

/// One header's value.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub fn eventually<T>(timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    eventually_or(timeout, f, String::new)
}

/// [`eventually`], with `context` in the panic message when it fails.
pub fn eventually_or<T>(
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
    context: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("condition not met within {timeout:?}\n{}", context());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `legate tls ca create` and `tls cert create -server -dc dc1 -node
/// <node>` in `dir`; a `tls { defaults {...} }` block naming the files,
/// with `extra` lines inside it.
pub fn server_tls_config(dir: &Path, node: &str, extra: &str) -> String {
    for args in [
        &["tls", "ca", "create"][..],
        &[
            "tls", "cert", "create", "-server", "-dc", "dc1", "-node", node,
        ],
    ] {
        let out = Command::new(binary())
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let d = dir.display();
    format!(
        "tls {{\n  defaults {{\n    ca_file = \"{d}/consul-agent-ca.pem\"\n    cert_file = \"{d}/dc1-server-consul-0.pem\"\n    key_file = \"{d}/dc1-server-consul-0-key.pem\"\n    {extra}\n  }}\n}}\n"
    )
}

/// `openssl s_server -quiet` on `port` with the certificate
/// [`server_tls_config`] wrote in `certs`, `args` added, run in `cwd`;
/// returns once the port accepts connections.
pub fn openssl_server(certs: &Path, port: u16, args: &[&str], cwd: &Path) -> std::process::Child {
    let d = certs.display();
    let child = Command::new("openssl")
        .args(["s_server", "-quiet"])
        .args(args)
        .arg("-accept")
        .arg(port.to_string())
        .arg("-cert")
        .arg(format!("{d}/dc1-server-consul-0.pem"))
        .arg("-key")
        .arg(format!("{d}/dc1-server-consul-0-key.pem"))
        .current_dir(cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .map(|_| ())
    });
    child
}

/// Writes a file under `dir`.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `ip` with `args` (network namespaces, veths, bridges); panics with
/// its stderr when it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server that is its datacenter's only one, with its flags (to start it
/// again over the same data).
pub struct DatacenterServer {
    pub agent: TestAgent,
    pub flags: Vec<String>,
    pub data: tempfile::TempDir,
}

impl DatacenterServer {
    /// A one-server datacenter `dc` at `ip` naming dc1 the primary; a
    /// secondary WAN-joins `join`. `env` as for [`TestAgent::spawn_with_env`].
    pub fn start(
        name: &str,
        ip: &str,
        dc: &str,
        join: Option<&str>,
        env: &[(&str, &str)],
    ) -> DatacenterServer {
        DatacenterServer::start_with(name, ip, dc, join, env, &[])
    }

    /// [`DatacenterServer::start`] with `extra` flags; a `-grpc-port=`
    /// among them keeps gRPC (xDS) on, DNS stays off.
    pub fn start_with(
        name: &str,
        ip: &str,
        dc: &str,
        join: Option<&str>,
        env: &[(&str, &str)],
        extra: &[String],
    ) -> DatacenterServer {
        let server = DatacenterServer::launch(name, ip, dc, join, env, extra);
        server.agent.wait_ready();
        server
    }

    /// [`DatacenterServer::start_with`] with xDS on (a free `-grpc-port`)
    /// and `extra` flags.
    pub fn with_xds(
        name: &str,
        ip: &str,
        dc: &str,
        join: Option<&str>,
        extra: &[String],
    ) -> DatacenterServer {
        let mut flags = vec![format!("-grpc-port={}", free_port())];
        flags.extend_from_slice(extra);
        DatacenterServer::start_with(name, ip, dc, join, &[], &flags)
    }

    /// [`DatacenterServer::start_with`] without waiting for a leader (one
    /// server of several: `extra` then names `-bootstrap-expect=` and
    /// `-retry-join=`).
    pub fn launch(
        name: &str,
        ip: &str,
        dc: &str,
        join: Option<&str>,
        env: &[(&str, &str)],
        extra: &[String],
    ) -> DatacenterServer {
        let data = tempfile::tempdir().unwrap();
        let mut flags = vec![
            format!("-node={name}"),
            format!("-datacenter={dc}"),
            format!("-bind={ip}"),
            "-client=127.0.0.1".into(),
            format!("-data-dir={}", data.path().display()),
            "-server".into(),
            "-retry-interval=1s".into(),
            "-retry-interval-wan=1s".into(),
            "-hcl=primary_datacenter = \"dc1\"".into(),
            "-hcl=gossip_wan { probe_interval = \"200ms\" probe_timeout = \"100ms\" suspicion_mult = 4 }"
                .into(),
        ];
        if let Some(join) = join {
            flags.push(format!("-retry-join-wan={join}"));
        }
        if !extra.iter().any(|f| f.starts_with("-bootstrap-expect=")) {
            flags.push("-bootstrap-expect=1".into());
        }
        flags.extend(extra.iter().cloned());
        let agent = DatacenterServer::spawn(&flags, env);
        DatacenterServer { agent, flags, data }
    }

    /// Stops the server (SIGKILL) and starts it again with `env`.
    pub fn restart(&mut self, env: &[(&str, &str)]) {
        self.agent.kill9();
        self.agent = DatacenterServer::spawn(&self.flags, env);
        self.agent.wait_ready();
    }

    fn spawn(flags: &[String], env: &[(&str, &str)]) -> TestAgent {
        let mut refs: Vec<&str> = flags.iter().map(String::as_str).collect();
        let grpc = flags.iter().any(|f| f.starts_with("-grpc-port="));
        if grpc {
            refs.push("-dns-port=-1");
        }
        TestAgent::spawn_with_env(&refs, !grpc, env)
    }
}

/// Runs the binary with `args`, which must exit within `patience` (it is
/// killed, and the test fails, if it does not); its output.
pub fn run_to_exit(args: &[String], patience: Duration) -> std::process::Output {
    let started = std::time::Instant::now();
    let mut child = Command::new(binary())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > patience {
            let _ = child.kill();
            panic!("{args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The flags of server `i` of a three-server (or larger) cluster on the
/// loopback addresses `ips`, their LAN gossip on the ports `serf`, data in
/// `data`: each retry-joins the others.
pub fn loopback_server_flags(i: usize, ips: &[&str], serf: &[u16], data: &Path) -> Vec<String> {
    let mut flags = vec![
        "-server".to_string(),
        format!("-bootstrap-expect={}", ips.len()),
        format!("-node=s{}", i + 1),
        format!("-bind={}", ips[i]),
        "-client=127.0.0.1".into(),
        format!("-data-dir={}", data.display()),
        format!("-server-port={}", free_port()),
        format!("-serf-lan-port={}", serf[i]),
        format!("-serf-wan-port={}", free_port()),
        "-retry-interval=1s".into(),
    ];
    for (j, other) in ips.iter().enumerate() {
        if j != i {
            flags.push(format!("-retry-join={other}:{}", serf[j]));
        }
    }
    flags
}

/// Percent-encodes a query value.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `legate agent <args>` on a free HTTP port, expecting it to refuse
/// to start (exit code 1; it is killed, and the test fails, if it still
/// runs after 10 seconds); answers what it wrote to stderr.
pub fn run_agent_expecting_failure(args: &[&str]) -> String {
    let mut full: Vec<String> = vec!["agent".into()];
    full.extend(args.iter().map(|a| a.to_string()));
    full.push(format!("-http-port={}", free_port()));
    let out = run_to_exit(&full, Duration::from_secs(10));
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The keys of Consul's `ServiceSummary` for a typical service, in order
/// (the UI endpoints' rows start with them).
pub const SERVICE_SUMMARY_KEYS: [&str; 12] = [
    "Name",
    "Datacenter",
    "Tags",
    "Nodes",
    "ExternalSources",
    "InstanceCount",
    "ChecksPassing",
    "ChecksWarning",
    "ChecksCritical",
    "GatewayConfig",
    "TransparentProxy",
    "ConnectNative",
];
