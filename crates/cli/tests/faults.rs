//! Faults under load: three servers, each in its own network namespace on
//! one bridge (so each has its own address and Consul's default ports, and
//! a partition is a cable pulled out: `ip link set <veth> down`). Several
//! clients write and read KV keys through every server while the leader is
//! `kill -9`ed and restarted, then partitioned away, then a follower is.
//! Every operation is recorded with its outcome and the whole history must
//! be linearizable (see `faults/checker.rs`): no acknowledged write is
//! lost, no read sees the past.
//!
//! Needs root (network namespaces), as the CI machine runs tests.

#[path = "faults/checker.rs"]
mod checker;
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checker::{Kind, Op};
use common::{binary, eventually, ip};

/// A bridge with one namespace per server, removed when dropped.
struct Network {
    bridge: String,
    namespaces: Vec<String>,
    links: Vec<String>,
    subnet: String,
}

impl Network {
    fn new(servers: usize) -> Network {
        let tag = std::process::id() % 100_000;
        let subnet = format!("10.{}.{}", 200 + tag % 50, tag % 250);
        let bridge = format!("lgb{tag}");
        ip(&["link", "add", &bridge, "type", "bridge"]);
        let mut network = Network {
            bridge: bridge.clone(),
            namespaces: Vec::new(),
            links: Vec::new(),
            subnet,
        };
        ip(&["link", "set", &bridge, "up"]);
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", network.subnet),
            "dev",
            &bridge,
        ]);
        for i in 0..servers {
            let namespace = format!("lgn{tag}s{i}");
            let link = format!("lgv{tag}s{i}");
            ip(&["netns", "add", &namespace]);
            network.namespaces.push(namespace.clone());
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ]);
            network.links.push(link.clone());
            ip(&["link", "set", &link, "master", &bridge, "up"]);
            let address = format!("{}/24", network.address(i));
            for args in [
                vec!["addr", "add", address.as_str(), "dev", "eth0"],
                vec!["link", "set", "eth0", "up"],
                vec!["link", "set", "lo", "up"],
            ] {
                let mut full = vec!["netns", "exec", namespace.as_str(), "ip"];
                full.extend(args);
                ip(&full);
            }
        }
        network
    }

    fn address(&self, server: usize) -> String {
        format!("{}.{}", self.subnet, 11 + server)
    }

    /// Pulls the server's cable out (or puts it back).
    fn set_connected(&self, server: usize, connected: bool) {
        let state = if connected { "up" } else { "down" };
        ip(&["link", "set", &self.links[server], state]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for namespace in &self.namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", namespace])
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}

/// A server running inside its namespace with Consul's default ports.
struct Server {
    child: Option<Child>,
    args: Vec<String>,
    namespace: String,
    address: String,
    log: std::path::PathBuf,
}

impl Server {
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.namespace])
            .arg(binary())
            .arg("agent")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a server in its namespace");
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn http(&self) -> SocketAddr {
        format!("{}:8500", self.address).parse().unwrap()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// How an HTTP exchange ended.
enum Outcome {
    /// The server answered.
    Answered(u16, String),
    /// The request never left (no connection): it cannot have had effect.
    NotSent,
    /// Sent, but no answer: it may or may not have had effect.
    Unknown,
}

fn exchange(address: SocketAddr, method: &str, path: &str, body: &str) -> Outcome {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(500)) else {
        return Outcome::NotSent;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(15)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return Outcome::Unknown;
    }
    let mut raw = Vec::new();
    if stream.read_to_end(&mut raw).is_err() || raw.is_empty() {
        return Outcome::Unknown;
    }
    let text = String::from_utf8_lossy(&raw).to_string();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Outcome::Unknown;
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Outcome::Answered(status, body.to_string())
}

const KEYS: usize = 4;

/// One client: random reads and writes of random keys through random
/// servers until `stop`.
fn client_loop(
    client: usize,
    servers: Vec<SocketAddr>,
    started: Instant,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Op>>>,
) {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (client as u64 + 1);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut written = 0u64;
    // A server that could not be reached is left alone for a second, as a
    // client library's health-aware pool would.
    let mut down_until = vec![started; servers.len()];
    while !stop.load(Ordering::Relaxed) {
        let key = format!("fault/k{}", next() % KEYS as u64);
        let pick = (next() % servers.len() as u64) as usize;
        let Some(target) = (0..servers.len())
            .map(|i| (pick + i) % servers.len())
            .find(|i| down_until[*i] <= Instant::now())
        else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let server = servers[target];
        let mut unreachable = || down_until[target] = Instant::now() + Duration::from_secs(1);
        let now = || started.elapsed().as_nanos() as u64;
        let invoked = now();
        let op = if next() % 2 == 0 {
            written += 1;
            let value = client as u64 * 1_000_000_000 + written;
            let outcome = exchange(server, "PUT", &format!("/v1/kv/{key}"), &value.to_string());
            let completed = match outcome {
                Outcome::NotSent => {
                    unreachable();
                    continue;
                }
                Outcome::Answered(200, body) if body.trim() == "true" => Some(now()),
                // A 5xx, a refusal after forwarding, a broken connection:
                // it may still be committed.
                _ => None,
            };
            Op {
                key,
                kind: Kind::Write(value),
                invoked,
                completed,
                client,
            }
        } else {
            let outcome = exchange(server, "GET", &format!("/v1/kv/{key}?consistent&raw"), "");
            let value = match outcome {
                Outcome::Answered(200, body) => Some(body.trim().parse::<u64>().expect("a value")),
                Outcome::Answered(404, _) => None,
                Outcome::NotSent => {
                    unreachable();
                    continue;
                }
                // A read without an answer constrains nothing.
                _ => continue,
            };
            Op {
                key,
                kind: Kind::Read(value),
                invoked,
                completed: Some(now()),
                client,
            }
        };
        history.lock().unwrap().push(op);
    }
}

/// Polls `f` until it returns `Some`; panics with `context()` (the
/// servers' logs) after `timeout`.
fn within<T>(
    timeout: Duration,
    context: &dyn Fn() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "no answer within {timeout:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn leader_index(servers: &[Server], network: &Network) -> Option<usize> {
    for server in servers.iter().filter(|s| s.child.is_some()) {
        if let Outcome::Answered(200, body) =
            exchange(server.http(), "GET", "/v1/status/leader", "")
        {
            let leader = body.trim().trim_matches('"').to_string();
            if let Some((host, _)) = leader.split_once(':') {
                return (0..servers.len()).find(|i| network.address(*i) == host);
            }
        }
    }
    None
}

fn acknowledged_writes(history: &Mutex<Vec<Op>>) -> usize {
    history
        .lock()
        .unwrap()
        .iter()
        .filter(|op| matches!(op.kind, Kind::Write(_)) && op.completed.is_some())
        .count()
}

#[test]
fn history_under_kill_9_and_partitions_is_linearizable() {
    let network = Network::new(3);
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut servers: Vec<Server> = (0..3)
        .map(|i| {
            let address = network.address(i);
            let mut args = vec![
                "-server".to_string(),
                "-bootstrap-expect=3".into(),
                format!("-node=s{}", i + 1),
                format!("-bind={address}"),
                format!("-client={address}"),
                format!("-data-dir={}", dirs[i].path().join("data").display()),
                "-retry-interval=1s".into(),
                "-dns-port=-1".into(),
            ];
            for j in (0..3).filter(|j| *j != i) {
                args.push(format!("-retry-join={}", network.address(j)));
            }
            Server {
                child: None,
                args,
                namespace: network.namespaces[i].clone(),
                address,
                log: dirs[i].path().join("agent.log"),
            }
        })
        .collect();
    for server in &mut servers {
        server.start();
    }
    // On failure the full logs are kept in the target directory.
    let describe = |servers: &[Server]| {
        let kept = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults-logs");
        let _ = std::fs::create_dir_all(&kept);
        servers
            .iter()
            .map(|s| {
                let _ = std::fs::copy(&s.log, kept.join(format!("{}.log", s.address)));
                format!("--- {}:\n{}", s.address, s.log_tail())
            })
            .collect::<Vec<_>>()
            .join("\n")
            + &format!("\n(full logs in {})", kept.display())
    };
    let first_leader = eventually(Duration::from_secs(40), || leader_index(&servers, &network));

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let addresses: Vec<SocketAddr> = servers.iter().map(Server::http).collect();
    let clients: Vec<_> = (0..5)
        .map(|client| {
            let (addresses, stop, history) = (addresses.clone(), stop.clone(), history.clone());
            std::thread::spawn(move || client_loop(client, addresses, started, stop, history))
        })
        .collect();
    let phase = |name: &str, seconds: u64, history: &Mutex<Vec<Op>>| {
        let before = acknowledged_writes(history);
        std::thread::sleep(Duration::from_secs(seconds));
        eprintln!(
            "{name}: {} acknowledged writes",
            acknowledged_writes(history) - before
        );
    };

    phase("steady", 3, &history);
    // kill -9 the leader under load, then bring it back from its data dir.
    servers[first_leader].kill9();
    phase("leader killed", 5, &history);
    servers[first_leader].start();
    phase("restarted", 6, &history);
    // Partition whoever leads now away from everyone (clients included).
    let partitioned = eventually(Duration::from_secs(20), || leader_index(&servers, &network));
    network.set_connected(partitioned, false);
    let during_partition = acknowledged_writes(&history);
    phase("leader partitioned", 8, &history);
    let majority_progressed = acknowledged_writes(&history) > during_partition;
    network.set_connected(partitioned, true);
    phase("healed", 5, &history);
    // Then a follower.
    let leader = eventually(Duration::from_secs(20), || leader_index(&servers, &network));
    let follower = (leader + 1) % 3;
    network.set_connected(follower, false);
    phase("follower partitioned", 5, &history);
    network.set_connected(follower, true);
    phase("healed again", 4, &history);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }

    // Final reads of every key through every server, once all have caught up.
    let mut history = Arc::try_unwrap(history).unwrap().into_inner().unwrap();
    for key in 0..KEYS {
        for server in &servers {
            let invoked = started.elapsed().as_nanos() as u64;
            let value = within(
                Duration::from_secs(30),
                &|| describe(&servers),
                || match exchange(
                    server.http(),
                    "GET",
                    &format!("/v1/kv/fault/k{key}?consistent&raw"),
                    "",
                ) {
                    Outcome::Answered(200, body) => Some(body.trim().parse::<u64>().ok()),
                    Outcome::Answered(404, _) => Some(None),
                    _ => None,
                },
            );
            history.push(Op {
                key: format!("fault/k{key}"),
                kind: Kind::Read(value),
                invoked,
                completed: Some(started.elapsed().as_nanos() as u64),
                client: 99,
            });
        }
    }

    let acknowledged = history
        .iter()
        .filter(|op| matches!(op.kind, Kind::Write(_)) && op.completed.is_some())
        .count();
    let unknown = history.iter().filter(|op| op.completed.is_none()).count();
    let reads = history
        .iter()
        .filter(|op| matches!(op.kind, Kind::Read(_)))
        .count();
    eprintln!(
        "history: {} operations, {acknowledged} acknowledged writes, {unknown} unknown, {reads} reads",
        history.len()
    );
    assert!(
        majority_progressed,
        "the majority side took no writes while the old leader was cut off\n{}",
        describe(&servers)
    );
    assert!(acknowledged >= 100, "too little load to mean anything");
    // Kept for reading even when the test passes.
    let _ = describe(&servers);
    let checked = Instant::now();
    if let Err(why) = checker::check(&history) {
        panic!("{why}\n{}", describe(&servers));
    }
    eprintln!("linearizable (checked in {:?})", checked.elapsed());
}
