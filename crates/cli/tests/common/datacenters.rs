//! Two datacenters that can be cut apart: each datacenter's servers in one
//! network namespace on its datacenter's bridge (the host on each bridge
//! at .254), the two bridges joined only through a router namespace.
//! Pulling the router's leg into dc2 cuts every path between the
//! datacenters while each keeps its own network. Needs root.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{binary, eventually, ip};

/// Fast WAN failure detection (Consul's `gossip_wan` keys).
const FAST_WAN: &str =
    "-hcl=gossip_wan { probe_interval = \"200ms\" probe_timeout = \"100ms\" suspicion_mult = 4 }";

/// Runs `ip <args>` (or `sysctl <args>`) inside `namespace`.
pub fn in_ns(namespace: &str, args: &[&str]) {
    let mut full = vec!["netns", "exec", namespace];
    if args.first() != Some(&"sysctl") {
        full.push("ip");
    }
    full.extend_from_slice(args);
    ip(&full);
}

/// The namespaces and bridges of two datacenters.
pub struct Networks {
    tag: u32,
    bridges: Vec<String>,
    /// The router's namespace, then one per datacenter.
    pub namespaces: Vec<String>,
}

impl Networks {
    /// Two datacenters of `servers` addresses each (.11 onwards).
    pub fn new(servers: usize) -> Networks {
        let tag = std::process::id() % 100_000;
        let mut networks = Networks {
            tag,
            bridges: Vec::new(),
            namespaces: Vec::new(),
        };
        let router = format!("lgr{tag}");
        ip(&["netns", "add", &router]);
        networks.namespaces.push(router.clone());
        in_ns(&router, &["link", "set", "lo", "up"]);
        in_ns(&router, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        for dc in 0..2 {
            let subnet = networks.subnet(dc);
            let bridge = format!("lgw{tag}d{dc}");
            ip(&["link", "add", &bridge, "type", "bridge"]);
            networks.bridges.push(bridge.clone());
            ip(&["link", "set", &bridge, "up"]);
            ip(&["addr", "add", &format!("{subnet}.254/24"), "dev", &bridge]);
            // The router's leg on this bridge, at .1.
            let leg = format!("lgw{tag}r{dc}");
            let inside = format!("leg{dc}");
            ip(&[
                "link", "add", &leg, "type", "veth", "peer", "name", &inside, "netns", &router,
            ]);
            ip(&["link", "set", &leg, "master", &bridge, "up"]);
            in_ns(
                &router,
                &["addr", "add", &format!("{subnet}.1/24"), "dev", &inside],
            );
            in_ns(&router, &["link", "set", &inside, "up"]);
            // The datacenter's namespace, its servers at .11 onwards, routed
            // through the router.
            let namespace = format!("lgw{tag}s{dc}");
            ip(&["netns", "add", &namespace]);
            networks.namespaces.push(namespace.clone());
            let link = format!("lgw{tag}v{dc}");
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ]);
            ip(&["link", "set", &link, "master", &bridge, "up"]);
            for server in 0..servers {
                let address = format!("{}/24", networks.address(dc, server));
                in_ns(&namespace, &["addr", "add", &address, "dev", "eth0"]);
            }
            in_ns(&namespace, &["link", "set", "eth0", "up"]);
            in_ns(&namespace, &["link", "set", "lo", "up"]);
            in_ns(
                &namespace,
                &["route", "add", "default", "via", &format!("{subnet}.1")],
            );
        }
        networks
    }

    fn subnet(&self, dc: usize) -> String {
        format!(
            "10.{}.{}",
            // 10.100-179: clear of the cluster fault test's 10.200-249.
            100 + self.tag % 40 + dc as u32 * 40,
            self.tag % 250
        )
    }

    /// The address of server `server` (from 0) of datacenter `dc` (from 0).
    pub fn address(&self, dc: usize, server: usize) -> String {
        format!("{}.{}", self.subnet(dc), 11 + server)
    }

    /// The host's own address on datacenter `dc`'s bridge.
    pub fn host(&self, dc: usize) -> String {
        format!("{}.254", self.subnet(dc))
    }

    /// Datacenter `dc`'s namespace.
    pub fn namespace(&self, dc: usize) -> &str {
        &self.namespaces[1 + dc]
    }

    /// Cuts (or restores) every path between the datacenters: the router's
    /// leg into dc2 goes down.
    pub fn set_linked(&self, linked: bool) {
        let state = if linked { "up" } else { "down" };
        in_ns(&self.namespaces[0], &["link", "set", "leg1", state]);
    }

    /// Sets the host names processes started in datacenter `dc`'s
    /// namespace see (`/etc/netns/<namespace>/hosts`, which `ip netns
    /// exec` mounts over `/etc/hosts`): `entries` are `(address, name)`.
    /// Written in place, so processes already running see the change.
    pub fn set_hosts(&self, dc: usize, entries: &[(&str, &str)]) {
        let dir = std::path::Path::new("/etc/netns").join(self.namespace(dc));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("127.0.0.1 localhost\n");
        for (address, name) in entries {
            text.push_str(&format!("{address} {name}\n"));
        }
        std::fs::write(dir.join("hosts"), text).unwrap();
    }

    /// Starts `legate <args>` inside datacenter `dc`'s namespace, logging to `log`.
    pub fn spawn(&self, dc: usize, args: &[String], log: &std::path::Path) -> Child {
        let file = std::fs::File::create(log).unwrap();
        Command::new("ip")
            .args(["netns", "exec", self.namespace(dc)])
            .arg(binary())
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start legate in a namespace")
    }
}

impl Drop for Networks {
    fn drop(&mut self) {
        for namespace in &self.namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", namespace])
                .status();
            let _ = std::fs::remove_dir_all(std::path::Path::new("/etc/netns").join(namespace));
        }
        for bridge in &self.bridges {
            let _ = Command::new("ip").args(["link", "del", bridge]).status();
        }
    }
}

/// A server agent in its datacenter's namespace, killed when dropped.
pub struct Server {
    child: Child,
    /// Its address (HTTP on port 8500, gRPC on 8502).
    pub address: String,
    log: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a server starts: its datacenter, its place in it, its peers.
pub struct ServerSpec<'a> {
    /// Datacenter, from 0 (dc1 is the primary).
    pub dc: usize,
    /// Server, from 0 (node `s<server+1>`).
    pub server: usize,
    /// Servers in the datacenter (`-bootstrap-expect`; the first is the LAN seed).
    pub expect: usize,
    /// The address to WAN-join.
    pub wan_join: Option<&'a str>,
    /// The data and log directory.
    pub dir: &'a std::path::Path,
}

impl Server {
    /// Starts a server (HTTP and gRPC on its own address) without waiting.
    pub fn spawn(networks: &Networks, spec: ServerSpec) -> Server {
        Server::spawn_with(networks, spec, &[])
    }

    /// [`Server::spawn`] with more flags after the usual ones (a
    /// `-datacenter=` among them replaces the spec's).
    pub fn spawn_with(networks: &Networks, spec: ServerSpec, extra: &[String]) -> Server {
        let address = networks.address(spec.dc, spec.server);
        let log = spec.dir.join("agent.log");
        let mut args = vec![
            "agent".to_string(),
            "-server".into(),
            format!("-bootstrap-expect={}", spec.expect),
            format!("-datacenter=dc{}", spec.dc + 1),
            format!("-node=s{}", spec.server + 1),
            format!("-bind={address}"),
            format!("-client={address}"),
            format!("-data-dir={}", spec.dir.join("data").display()),
            "-dns-port=-1".into(),
            "-grpc-port=8502".into(),
            "-retry-interval=1s".into(),
            "-retry-interval-wan=1s".into(),
            "-hcl=primary_datacenter = \"dc1\"".into(),
            FAST_WAN.into(),
            crate::common::prometheus::RETENTION.into(),
        ];
        // The first server is the LAN seed of a datacenter of several.
        if spec.server > 0 && spec.expect > 1 {
            args.push(format!("-retry-join={}", networks.address(spec.dc, 0)));
        }
        if let Some(seed) = spec.wan_join {
            args.push(format!("-retry-join-wan={seed}"));
        }
        if extra.iter().any(|a| a.starts_with("-datacenter=")) {
            args.retain(|a| !a.starts_with("-datacenter="));
        }
        args.extend_from_slice(extra);
        let child = networks.spawn(spec.dc, &args, &log);
        Server {
            child,
            address,
            log,
        }
    }

    /// Starts a server and waits until its datacenter has a leader.
    pub fn start(networks: &Networks, spec: ServerSpec) -> Server {
        let server = Server::spawn(networks, spec);
        server.wait_for_leader();
        server
    }

    /// Waits until this server knows a leader.
    pub fn wait_for_leader(&self) {
        eventually(Duration::from_secs(30), || {
            let (status, body) = self.request("GET", "/v1/status/leader", "")?;
            (status == 200 && body.len() > 2).then_some(())
        });
    }

    /// An HTTP request to the server; `None` when it cannot be reached.
    pub fn request(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        self.request_as("", method, path, body)
    }

    /// [`Server::request`] with `token` in `X-Consul-Token` (none when
    /// empty).
    pub fn request_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: &str,
    ) -> Option<(u16, String)> {
        let address: SocketAddr = format!("{}:8500", self.address).parse().unwrap();
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(500)).ok()?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let token = if token.is_empty() {
            String::new()
        } else {
            format!("X-Consul-Token: {token}\r\n")
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{token}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).ok()?;
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_string()))
    }

    /// `member`'s status in `legate members -wan`, as this server sees it.
    pub fn wan_status(&self, member: &str) -> Option<String> {
        let out = Command::new(binary())
            .args([
                "members",
                "-wan",
                &format!("-http-addr={}:8500", self.address),
            ])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.split_whitespace().next() == Some(member))
            .and_then(|l| l.split_whitespace().nth(2).map(String::from))
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}
