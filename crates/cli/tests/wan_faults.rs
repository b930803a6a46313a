//! Two datacenters that cannot reach each other: each datacenter's server
//! in its own network namespace on its datacenter's bridge, the two
//! bridges joined only through a router namespace. Pulling the router's
//! leg into dc2 cuts every path between the datacenters while each keeps
//! its own network: `?dc=dc2` from dc1 answers Consul's "Remote DC has no
//! server currently reachable", both datacenters keep taking writes, and
//! once the leg is back cross-datacenter calls work again with nothing of
//! either side lost.
//!
//! Needs root (network namespaces), as the CI machine runs tests.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{binary, eventually, ip};

fn in_ns(namespace: &str, args: &[&str]) {
    let mut full = vec!["netns", "exec", namespace];
    full.extend_from_slice(args);
    if args.first() == Some(&"sysctl") {
        let out = Command::new("ip").args(&full).output().expect("run sysctl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let mut with_ip = vec!["netns", "exec", namespace, "ip"];
    with_ip.extend_from_slice(args);
    ip(&with_ip);
}

/// Two bridges (one per datacenter, the host on each at .254), a router
/// namespace between them, and one namespace per server.
struct Networks {
    tag: u32,
    bridges: Vec<String>,
    namespaces: Vec<String>,
}

impl Networks {
    fn new() -> Networks {
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
            let bridge = format!("lgw{tag}d{dc}");
            ip(&["link", "add", &bridge, "type", "bridge"]);
            networks.bridges.push(bridge.clone());
            ip(&["link", "set", &bridge, "up"]);
            ip(&[
                "addr",
                "add",
                &format!("{}.254/24", networks.subnet(dc)),
                "dev",
                &bridge,
            ]);
            // The router's leg on this bridge, at .1.
            let leg = format!("lgw{tag}r{dc}");
            let inside = format!("leg{dc}");
            ip(&[
                "link", "add", &leg, "type", "veth", "peer", "name", &inside, "netns", &router,
            ]);
            ip(&["link", "set", &leg, "master", &bridge, "up"]);
            in_ns(
                &router,
                &[
                    "addr",
                    "add",
                    &format!("{}.1/24", networks.subnet(dc)),
                    "dev",
                    &inside,
                ],
            );
            in_ns(&router, &["link", "set", &inside, "up"]);
            // The datacenter's server, at .11, routed through the router.
            let namespace = format!("lgw{tag}s{dc}");
            ip(&["netns", "add", &namespace]);
            networks.namespaces.push(namespace.clone());
            let link = format!("lgw{tag}v{dc}");
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ]);
            ip(&["link", "set", &link, "master", &bridge, "up"]);
            in_ns(
                &namespace,
                &[
                    "addr",
                    "add",
                    &format!("{}/24", networks.server(dc)),
                    "dev",
                    "eth0",
                ],
            );
            in_ns(&namespace, &["link", "set", "eth0", "up"]);
            in_ns(&namespace, &["link", "set", "lo", "up"]);
            in_ns(
                &namespace,
                &[
                    "route",
                    "add",
                    "default",
                    "via",
                    &format!("{}.1", networks.subnet(dc)),
                ],
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

    fn server(&self, dc: usize) -> String {
        format!("{}.11", self.subnet(dc))
    }

    /// Cuts (or restores) every path between the datacenters: the router's
    /// leg into dc2 goes down.
    fn set_linked(&self, linked: bool) {
        let state = if linked { "up" } else { "down" };
        in_ns(&self.namespaces[0], &["link", "set", "leg1", state]);
    }
}

impl Drop for Networks {
    fn drop(&mut self) {
        for namespace in &self.namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", namespace])
                .status();
        }
        for bridge in &self.bridges {
            let _ = Command::new("ip").args(["link", "del", bridge]).status();
        }
    }
}

struct Server {
    child: Child,
    address: String,
    log: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn request(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        let address: SocketAddr = format!("{}:8500", self.address).parse().unwrap();
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(500)).ok()?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
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

    fn wan_status(&self, member: &str) -> Option<String> {
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

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

fn start(networks: &Networks, dc: usize, data: &std::path::Path, wan_join: Option<&str>) -> Server {
    let address = networks.server(dc);
    let log = data.join("agent.log");
    let mut args = vec![
        "agent".to_string(),
        "-server".into(),
        "-bootstrap-expect=1".into(),
        format!("-datacenter=dc{}", dc + 1),
        format!("-node=s{}", dc + 1),
        format!("-bind={address}"),
        format!("-client={address}"),
        format!("-data-dir={}", data.join("data").display()),
        "-dns-port=-1".into(),
        "-grpc-port=-1".into(),
        "-retry-interval-wan=1s".into(),
        "-hcl=primary_datacenter = \"dc1\"".into(),
        "-hcl=gossip_wan { probe_interval = \"200ms\" probe_timeout = \"100ms\" suspicion_mult = 4 }".into(),
    ];
    if let Some(seed) = wan_join {
        args.push(format!("-retry-join-wan={seed}"));
    }
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &networks.namespaces[1 + dc]])
        .arg(binary())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("start a server in its namespace");
    let server = Server {
        child,
        address,
        log,
    };
    eventually(Duration::from_secs(30), || {
        let (status, body) = server.request("GET", "/v1/status/leader", "")?;
        (status == 200 && body.len() > 2).then_some(())
    });
    server
}

#[test]
fn a_partition_between_datacenters_fails_cross_dc_calls_and_heals() {
    let networks = Networks::new();
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let dc1 = start(&networks, 0, dirs[0].path(), None);
    let dc2 = start(&networks, 1, dirs[1].path(), Some(&networks.server(0)));
    eventually(Duration::from_secs(30), || {
        (dc1.wan_status("s2.dc2").as_deref() == Some("alive")).then_some(())
    });
    let (status, _) = dc1.request("PUT", "/v1/kv/cross?dc=dc2", "before").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        dc2.request("GET", "/v1/kv/cross?raw", "").unwrap(),
        (200, "before".into())
    );

    // A config entry written in the primary is replicated into dc2.
    let resolver = r#"{"Kind":"service-resolver","Name":"db","ConnectTimeout":"4s"}"#;
    assert_eq!(
        dc1.request("PUT", "/v1/config", resolver).unwrap(),
        (200, "true".into())
    );
    eventually(Duration::from_secs(10), || {
        let (status, _) = dc2.request("GET", "/v1/config/service-resolver/db?stale", "")?;
        (status == 200).then_some(())
    });

    // Cut: dc1 sees dc2's server fail and says so on every cross-DC call.
    networks.set_linked(false);
    eventually(Duration::from_secs(20), || {
        (dc1.wan_status("s2.dc2").as_deref() == Some("failed")).then_some(())
    });
    let answer = dc1.request("GET", "/v1/kv/cross?dc=dc2", "").unwrap();
    assert_eq!(
        answer,
        (
            500,
            "Remote DC has no server currently reachable".to_string()
        ),
        "{}",
        dc1.log_tail()
    );
    // Each DC keeps serving its own writes and reads.
    for i in 0..20 {
        let (status, _) = dc1.request("PUT", &format!("/v1/kv/dc1/{i}"), "x").unwrap();
        assert_eq!(status, 200);
        let (status, _) = dc2.request("PUT", &format!("/v1/kv/dc2/{i}"), "y").unwrap();
        assert_eq!(status, 200);
    }
    assert_eq!(
        dc1.request("GET", "/v1/kv/dc1/19?raw", "").unwrap(),
        (200, "x".into())
    );
    // A global write through dc2 cannot reach the primary and says so.
    let cut_write = r#"{"Kind":"service-defaults","Name":"cut","Protocol":"http"}"#;
    assert_eq!(
        dc2.request("PUT", "/v1/config", cut_write).unwrap(),
        (500, "Remote DC has no server currently reachable".into()),
        "{}",
        dc2.log_tail()
    );
    // dc2 keeps serving its replicated copy, even restarted while cut off
    // (it then has not met dc1 at all: Legate keeps no gossip snapshot).
    drop(dc2);
    let dc2 = start(&networks, 1, dirs[1].path(), Some(&networks.server(0)));
    let (status, body) = dc2
        .request("GET", "/v1/config/service-resolver/db?stale", "")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"ConnectTimeout\":\"4s\""), "{body}");
    assert_eq!(
        dc2.request("PUT", "/v1/config", cut_write).unwrap(),
        (500, "No path to datacenter".into())
    );
    // Meanwhile the primary takes config entries dc2 has not seen.
    for i in 0..30 {
        let body = format!(r#"{{"Kind":"service-defaults","Name":"p{i}","Protocol":"grpc"}}"#);
        assert_eq!(dc1.request("PUT", "/v1/config", &body).unwrap().0, 200);
    }
    // An unknown DC is still told apart from an unreachable one.
    assert_eq!(
        dc1.request("GET", "/v1/kv/cross?dc=dc9", "").unwrap(),
        (500, "No path to datacenter".into())
    );

    // Heal: the servers find each other again and cross-DC calls work,
    // with both sides' partition-time writes intact.
    networks.set_linked(true);
    eventually(Duration::from_secs(30), || {
        (dc1.wan_status("s2.dc2").as_deref() == Some("alive")).then_some(())
    });
    let keys = eventually(Duration::from_secs(20), || {
        let (status, body) = dc1.request("GET", "/v1/kv/dc2/?keys&dc=dc2", "")?;
        (status == 200).then_some(body)
    });
    let keys: Vec<String> = serde_json::from_str(&keys).unwrap();
    assert_eq!(keys.len(), 20, "{keys:?}");
    let (status, body) = dc2.request("GET", "/v1/kv/dc1/?keys&dc=dc1", "").unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&body).unwrap().len(),
        20
    );
    assert_eq!(
        dc1.request("GET", "/v1/kv/cross?dc=dc2&raw", "").unwrap(),
        (200, "before".into())
    );
    // Replication catches up: every entry of the partition, once each.
    let defaults = eventually(Duration::from_secs(30), || {
        let (status, body) = dc2.request("GET", "/v1/config/service-defaults?stale", "")?;
        let list: Vec<serde_json::Value> = serde_json::from_str(&body).ok()?;
        (status == 200 && list.len() == 30).then_some(list)
    });
    let mut names: Vec<&str> = defaults.iter().filter_map(|e| e["Name"].as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 30);
    assert!(defaults.iter().all(|e| e["Protocol"] == "grpc"));
    assert_eq!(
        dc2.request("GET", "/v1/config/service-resolver/db?stale", "")
            .unwrap()
            .0,
        200
    );
    // And writes through dc2 reach the primary again.
    let written = dc2
        .request(
            "PUT",
            "/v1/config",
            r#"{"Kind":"service-defaults","Name":"healed","Protocol":"http"}"#,
        )
        .unwrap();
    assert_eq!(written, (200, "true".into()), "{}", dc2.log_tail());
    assert_eq!(
        dc1.request("GET", "/v1/config/service-defaults/healed", "")
            .unwrap()
            .0,
        200
    );
}
