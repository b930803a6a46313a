//! Three servers as users start them, on their own loopback addresses:
//! gossip joins, `-bootstrap-expect=3` elects one leader, writes through
//! any server are read everywhere, a `kill -9`ed leader is replaced and
//! restarts from its data dir, and a graceful leave shows as left.

mod common;

use std::time::Duration;

use common::{eventually, free_port, TestAgent};

struct Node {
    agent: TestAgent,
    name: String,
    flags: Vec<String>,
    _data: tempfile::TempDir,
}

fn start(flags: &[String]) -> TestAgent {
    start_with_env(flags, &[])
}

fn start_with_env(flags: &[String], env: &[(&str, &str)]) -> TestAgent {
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    TestAgent::spawn_with_env(&refs, true, env)
}

fn cluster() -> Vec<Node> {
    cluster_of(["127.0.0.21", "127.0.0.22", "127.0.0.23"], None, &[])
}

/// Three servers on `ips`; the one at `masked` (if any) advertises no
/// `si` feature, as a server of an older version would; `extra` flags go
/// to every server.
fn cluster_of(ips: [&str; 3], masked: Option<usize>, extra: &[&str]) -> Vec<Node> {
    let serf: Vec<u16> = ips.iter().map(|_| free_port()).collect();
    let mut nodes = Vec::new();
    for i in 0..ips.len() {
        let data = tempfile::tempdir().unwrap();
        let mut flags = common::loopback_server_flags(i, &ips, &serf, data.path());
        flags.extend(extra.iter().map(|f| f.to_string()));
        let env: &[(&str, &str)] = if masked == Some(i) {
            &[("LEGATE_MASKED_FEATURES", "si")]
        } else {
            &[]
        };
        nodes.push(Node {
            agent: start_with_env(&flags, env),
            name: format!("s{}", i + 1),
            flags,
            _data: data,
        });
    }
    for n in &nodes {
        n.agent.wait_ready();
    }
    nodes
}

/// A client agent at `ip` that retry-joins through `via`'s gossip port.
fn join_client(name: &str, ip: &str, via: &Node) -> (TestAgent, tempfile::TempDir) {
    join_client_with(name, ip, via, &[])
}

/// [`join_client`] with `extra` flags.
fn join_client_with(
    name: &str,
    ip: &str,
    via: &Node,
    extra: &[String],
) -> (TestAgent, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let flag = |prefix: &str| {
        via.flags
            .iter()
            .find_map(|f| f.strip_prefix(prefix).map(String::from))
            .unwrap()
    };
    let flags = vec![
        format!("-node={name}"),
        format!("-bind={ip}"),
        "-client=127.0.0.1".into(),
        format!("-data-dir={}", data.path().display()),
        format!("-serf-lan-port={}", free_port()),
        "-retry-interval=1s".into(),
        format!("-retry-join={}:{}", flag("-bind="), flag("-serf-lan-port=")),
    ];
    let mut flags = flags;
    flags.extend(extra.iter().cloned());
    let agent = start(&flags);
    agent.wait_ready();
    (agent, data)
}

fn leader_of(node: &Node) -> String {
    node.agent.get_text("/v1/status/leader").unwrap_or_default()
}

fn members(agent: &TestAgent) -> String {
    String::from_utf8_lossy(&agent.cli(&["members"]).stdout).to_string()
}

fn status_in(table: &str, name: &str) -> Option<String> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(2))
        .map(String::from)
}

#[test]
fn three_servers_elect_replicate_survive_kill_9_and_leave() {
    let mut nodes = cluster();
    // One leader, the same for everyone; three peers; three alive members.
    let leader = eventually(Duration::from_secs(20), || {
        let leaders: Vec<String> = nodes.iter().map(leader_of).collect();
        (leaders[0].len() > 2 && leaders.iter().all(|l| *l == leaders[0]))
            .then(|| leaders[0].clone())
    });
    let peers = nodes[0].agent.get("/v1/status/peers").unwrap();
    assert_eq!(peers.as_array().unwrap().len(), 3, "{peers}");
    // operator raft list-peers: every server by name, one leader, all voters.
    let table = eventually(Duration::from_secs(20), || {
        let out = nodes[1].agent.cli(&["operator", "raft", "list-peers"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (["s1", "s2", "s3"]
            .iter()
            .all(|n| text.lines().any(|l| l.starts_with(&format!("{n} "))))
            && text.matches(" leader ").count() == 1)
            .then_some(text)
    });
    assert_eq!(table.matches(" true ").count(), 3, "{table}");
    assert!(table.starts_with("Node"), "{table}");
    eventually(Duration::from_secs(20), || {
        let table = members(&nodes[0].agent);
        nodes
            .iter()
            .all(|n| status_in(&table, &n.name).as_deref() == Some("alive"))
            .then_some(())
    });

    // Two client agents join through different servers and work through
    // the servers.
    let (client, _client_data) = join_client("c1", "127.0.0.24", &nodes[0]);
    let (mut second_client, _second_data) = join_client("c2", "127.0.0.25", &nodes[1]);
    let (status, body) = second_client.put("/v1/kv/from-c2", "c2");
    assert_eq!((status, body.as_str()), (200, "true"));
    let (status, body) = client.put("/v1/kv/from-client", "c");
    assert_eq!((status, body.as_str()), (200, "true"));
    let (status, _) = client.put(
        "/v1/agent/service/register",
        r#"{"Name": "web", "Port": 80}"#,
    );
    assert_eq!(status, 200);
    eventually(Duration::from_secs(10), || {
        let instances = nodes[1].agent.get("/v1/catalog/service/web").ok()?;
        (instances.as_array()?.first()?["Node"] == "c1").then_some(())
    });
    eventually(Duration::from_secs(20), || {
        (status_in(&members(&client), "s1").as_deref() == Some("alive")).then_some(())
    });
    let detailed = common::expect_success(&nodes[0].agent.cli(&["members", "-detailed"]));
    assert!(detailed.starts_with("Node"), "{detailed}");
    assert!(
        detailed.lines().next().unwrap().contains("Tags"),
        "{detailed}"
    );
    let s1 = detailed
        .lines()
        .find(|l| l.starts_with("s1 "))
        .unwrap_or_else(|| panic!("{detailed}"));
    assert!(s1.contains("127.0.0.21:") && s1.contains(" alive "), "{s1}");
    assert!(s1.contains("role=consul") && s1.contains("dc=dc1"), "{s1}");
    let table = String::from_utf8_lossy(&client.cli(&["members"]).stdout).to_string();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("c1 ") && l.contains(" client ")),
        "{table}"
    );

    // Writes through every server, read from every server.
    for (i, n) in nodes.iter().enumerate() {
        let (status, body) = n.agent.put(&format!("/v1/kv/k{i}"), &format!("v{i}"));
        assert_eq!((status, body.as_str()), (200, "true"));
    }
    for n in &nodes {
        for i in 0..3 {
            let value = eventually(Duration::from_secs(5), || {
                n.agent.get_text(&format!("/v1/kv/k{i}?raw&stale")).ok()
            });
            assert_eq!(value, format!("v{i}"));
        }
    }

    snapshot_round_trip(&nodes, &client);

    // kill -9 the leader: the others elect a new one and keep writing.
    let leader_ip = leader
        .trim_matches('"')
        .split(':')
        .next()
        .unwrap()
        .to_string();
    let dead = nodes
        .iter()
        .position(|n| n.flags.iter().any(|f| *f == format!("-bind={leader_ip}")))
        .expect("the leader is one of ours");
    nodes[dead].agent.kill9();
    let survivors: Vec<usize> = (0..3).filter(|i| *i != dead).collect();
    let new_leader = eventually(Duration::from_secs(20), || {
        let l = leader_of(&nodes[survivors[0]]);
        (l.len() > 2 && l != leader && l == leader_of(&nodes[survivors[1]])).then_some(l)
    });
    assert_ne!(new_leader, leader);
    let (status, _) = nodes[survivors[0]].agent.put("/v1/kv/after", "kill");
    assert_eq!(status, 200);
    eventually(Duration::from_secs(20), || {
        (status_in(&members(&nodes[survivors[0]].agent), &nodes[dead].name).as_deref()
            == Some("failed"))
        .then_some(())
    });

    // The leader marks it critical in the catalog (serfHealth).
    let dead_name = nodes[dead].name.clone();
    eventually(Duration::from_secs(20), || {
        let checks = nodes[survivors[0]]
            .agent
            .get(&format!("/v1/health/node/{dead_name}"))
            .ok()?;
        checks
            .as_array()?
            .iter()
            .any(|c| c["CheckID"] == "serfHealth" && c["Status"] == "critical")
            .then_some(())
    });

    // Dead-server cleanup: autopilot takes the failed server out of Raft
    // (one of three failed leaves a safe majority).
    eventually(Duration::from_secs(20), || {
        let peers = nodes[survivors[0]].agent.get("/v1/status/peers").ok()?;
        (peers.as_array()?.len() == 2).then_some(())
    });

    // It restarts from its data dir, rejoins and catches up.
    nodes[dead].agent = start(&nodes[dead].flags);
    nodes[dead].agent.wait_ready();
    let value = eventually(Duration::from_secs(20), || {
        nodes[dead].agent.get_text("/v1/kv/after?raw&stale").ok()
    });
    assert_eq!(value, "kill");
    eventually(Duration::from_secs(20), || {
        (status_in(&members(&nodes[survivors[0]].agent), &nodes[dead].name).as_deref()
            == Some("alive"))
        .then_some(())
    });

    // Every member has a passing serfHealth, the servers the consul service.
    eventually(Duration::from_secs(20), || {
        let checks = nodes[dead].agent.get("/v1/health/state/passing").ok()?;
        let passing: Vec<String> = checks
            .as_array()?
            .iter()
            .filter(|c| c["CheckID"] == "serfHealth")
            .filter_map(|c| c["Node"].as_str().map(String::from))
            .collect();
        ["s1", "s2", "s3", "c1", "c2"]
            .iter()
            .all(|n| passing.iter().any(|p| p == n))
            .then_some(())
    });
    let consul = nodes[0].agent.get("/v1/catalog/service/consul").unwrap();
    assert_eq!(consul.as_array().unwrap().len(), 3, "{consul}");
    // Autopilot added it back as a learner and promoted it once stable.
    wait_healthy_voters(&nodes[survivors[0]], 3);

    // A graceful leave shows as left and removes the node from the catalog.
    let leaver = survivors[1];
    let leaver_name = nodes[leaver].name.clone();
    assert!(nodes[leaver].agent.cli(&["leave"]).status.success());
    eventually(Duration::from_secs(20), || {
        (status_in(&members(&nodes[dead].agent), &leaver_name).as_deref() == Some("left"))
            .then_some(())
    });
    eventually(Duration::from_secs(20), || {
        let nodes_now = nodes[dead].agent.get("/v1/catalog/nodes").ok()?;
        (!nodes_now
            .as_array()?
            .iter()
            .any(|n| n["Node"] == leaver_name.as_str()))
        .then_some(())
    });
    // Autopilot removes a server that left from Raft.
    let peers = eventually(Duration::from_secs(20), || {
        let peers = nodes[dead].agent.get("/v1/status/peers").ok()?;
        (peers.as_array()?.len() == 2).then_some(peers)
    });
    let leaver_bind = nodes[leaver]
        .flags
        .iter()
        .find_map(|f| f.strip_prefix("-bind=").map(String::from))
        .unwrap();
    assert!(!peers.to_string().contains(&leaver_bind), "{peers}");
    let out = nodes[dead].agent.cli(&[
        "operator",
        "raft",
        "remove-peer",
        "-address",
        "10.9.9.9:8300",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was not found in the Raft configuration")
    );
    // The two left still take writes.
    let (status, _) = nodes[dead].agent.put("/v1/kv/two", "left");
    assert_eq!(status, 200);

    // A fourth server joins after the first three: a learner first, a
    // voter once stable, and it serves what was written before it came.
    let serf_of = |n: &Node| {
        let flag = |prefix: &str| {
            n.flags
                .iter()
                .find_map(|f| f.strip_prefix(prefix).map(String::from))
                .unwrap()
        };
        format!("{}:{}", flag("-bind="), flag("-serf-lan-port="))
    };
    let data = tempfile::tempdir().unwrap();
    let flags = vec![
        "-server".to_string(),
        "-bootstrap-expect=3".into(),
        "-node=s4".into(),
        "-bind=127.0.0.26".into(),
        "-client=127.0.0.1".into(),
        format!("-data-dir={}", data.path().display()),
        format!("-server-port={}", free_port()),
        format!("-serf-lan-port={}", free_port()),
        "-retry-interval=1s".into(),
        format!("-retry-join={}", serf_of(&nodes[dead])),
    ];
    let fourth = Node {
        agent: start(&flags),
        name: "s4".into(),
        flags,
        _data: data,
    };
    fourth.agent.wait_ready();
    wait_healthy_voters(&nodes[dead], 3);
    assert_eq!(
        fourth.agent.get_text("/v1/kv/two?raw&stale").unwrap(),
        "left"
    );
    let table = common::expect_success(&fourth.agent.cli(&["operator", "raft", "list-peers"]));
    assert!(table.lines().any(|l| l.starts_with("s4 ")), "{table}");

    // force-leave: a crashed client agent is failed; force-leave on one
    // server shows it as left on the others and takes it out of the catalog.
    second_client.kill9();
    eventually(Duration::from_secs(20), || {
        (status_in(&members(&nodes[dead].agent), "c2").as_deref() == Some("failed")).then_some(())
    });
    let out = fourth.agent.cli(&["force-leave", "c2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(Duration::from_secs(20), || {
        (status_in(&members(&nodes[dead].agent), "c2").as_deref() == Some("left")).then_some(())
    });
    eventually(Duration::from_secs(20), || {
        let catalog = nodes[dead].agent.get("/v1/catalog/nodes").ok()?;
        (!catalog.as_array()?.iter().any(|n| n["Node"] == "c2")).then_some(())
    });
    let out = fourth.agent.cli(&["force-leave", "nobody"]);
    assert!(!out.status.success());
}

/// Waits until autopilot reports `voters` healthy voting servers and
/// `Healthy: true` (HTTP 200; 429 while not).
fn wait_healthy_voters(node: &Node, voters: usize) {
    let health = eventually(Duration::from_secs(60), || {
        let (status, _, body) = node
            .agent
            .request("GET", "/v1/operator/autopilot/health", None);
        let health: serde_json::Value = serde_json::from_str(&body).ok()?;
        let voting = health["Servers"]
            .as_array()?
            .iter()
            .filter(|s| s["Voter"] == true && s["Healthy"] == true)
            .count();
        (status == 200 && health["Healthy"] == true && voting == voters).then_some(health)
    });
    assert_eq!(
        health["FailureTolerance"].as_u64(),
        Some((voters - (voters / 2 + 1)) as u64),
        "{health}"
    );
    let leaders = health["Servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["Leader"] == true)
        .count();
    assert_eq!(leaders, 1, "{health}");
    for server in health["Servers"].as_array().unwrap() {
        let since = server["StableSince"].as_str().unwrap_or("");
        assert!(since.len() > 18 && since.ends_with('Z'), "{health}");
    }
}

/// `snapshot save` through a client agent, writes after it, `snapshot
/// restore` through a follower: every server holds the saved state again,
/// a blocking query waiting on a key the restore did not change returns,
/// indexes move forward, and bad files are refused with the reason.
fn snapshot_round_trip(nodes: &[Node], client: &TestAgent) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backup.snap");
    let file_arg = file.to_str().unwrap();
    let out = client.cli(&["snapshot", "save", file_arg]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("Saved and verified snapshot to index "),
        "{stdout}"
    );
    let out = client.cli(&["snapshot", "inspect", file_arg]);
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success());
    let kv_count = table
        .lines()
        .find(|l| l.trim_start().starts_with("KVS "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse::<usize>().ok());
    assert_eq!(kv_count, Some(5), "from-client, from-c2, k0..k2:\n{table}");

    let (status, _) = nodes[0].agent.put("/v1/kv/after-save", "x");
    assert_eq!(status, 200);
    let (status, _, _) = nodes[0].agent.request("DELETE", "/v1/kv/k0", None);
    assert_eq!(status, 200);
    let (_, headers, _) = nodes[2].agent.request("GET", "/v1/kv/?recurse&stale", None);
    let before: u64 = common::header(&headers, "x-consul-index")
        .unwrap()
        .parse()
        .unwrap();
    // A blocking read of a key the restore leaves alone.
    let (_, headers, _) = nodes[2].agent.request("GET", "/v1/kv/k1?stale", None);
    let k1_index = common::header(&headers, "x-consul-index")
        .unwrap()
        .to_string();
    let port = nodes[2]
        .agent
        .addr()
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u16>()
        .unwrap();
    let blocked = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let path = format!("/v1/kv/k1?stale&index={k1_index}&wait=60s");
        let (status, _, _) = common::http_request(port, "GET", &path, None);
        (status, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));

    let out = nodes[1].agent.cli(&["snapshot", "restore", file_arg]);
    assert_eq!(common::expect_success(&out), "Restored snapshot");
    let (status, waited) = blocked.join().unwrap();
    assert_eq!(status, 200);
    assert!(
        waited < Duration::from_secs(30),
        "the restore ended the wait ({waited:?})"
    );
    for n in nodes {
        eventually(Duration::from_secs(10), || {
            let (status, _, _) = n.agent.request("GET", "/v1/kv/after-save?stale", None);
            (status == 404).then_some(())
        });
        assert_eq!(n.agent.get_text("/v1/kv/k0?raw&stale").unwrap(), "v0");
        let (_, headers, _) = n.agent.request("GET", "/v1/kv/?recurse&stale", None);
        let after: u64 = common::header(&headers, "x-consul-index")
            .unwrap()
            .parse()
            .unwrap();
        assert!(after > before, "indexes move forward: {after} > {before}");
    }

    // Bad input: a damaged file, a missing one, no argument.
    let damaged = dir.path().join("damaged.snap");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&damaged, &bytes).unwrap();
    let out = nodes[0]
        .agent
        .cli(&["snapshot", "restore", damaged.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success());
    assert!(err.contains("400") && err.contains("snapshot"), "{err}");
    assert_eq!(
        nodes[0].agent.get_text("/v1/kv/k0?raw").unwrap(),
        "v0",
        "nothing changed"
    );
    let out = nodes[0]
        .agent
        .cli(&["snapshot", "restore", "/nonexistent.snap"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.snap"));
    let out = nodes[0].agent.cli(&["snapshot", "save"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Missing FILE argument"));
}

#[test]
fn intentions_stay_read_only_until_every_server_supports_them() {
    // Dead-server cleanup off: a failed server stays a voter until an
    // operator removes it (below).
    let mut nodes = cluster_of(["127.0.0.31", "127.0.0.32", "127.0.0.33"], Some(2), &[]);
    let create = |n: &Node| n.agent.cli(&["intention", "create", "-deny", "web", "db"]);
    // The masked server's tags say it lacks `si`: writes are refused.
    eventually(Duration::from_secs(20), || {
        (nodes.iter().all(|n| leader_of(n).len() > 2)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let out = create(&nodes[0]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("read only while being upgraded"), "{err}");
    // The old server is upgraded (restarted without the mask): writes work.
    nodes[2].agent.kill9();
    nodes[2].agent = start(&nodes[2].flags);
    nodes[2].agent.wait_ready();
    let out = eventually(Duration::from_secs(30), || {
        let out = create(&nodes[1]);
        out.status.success().then_some(out)
    });
    assert!(String::from_utf8_lossy(&out.stdout).contains("Created: web => db (deny)"));

    // The operator turns dead-server cleanup off (Consul's default, and
    // the agent config's, is on): the leader's autopilot follows.
    let out = nodes[0].agent.cli(&[
        "operator",
        "autopilot",
        "set-config",
        "-cleanup-dead-servers=false",
    ]);
    assert_eq!(common::expect_success(&out), "Configuration updated!");
    let settings =
        common::expect_success(&nodes[1].agent.cli(&["operator", "autopilot", "get-config"]));
    assert!(
        settings.starts_with("CleanupDeadServers = false\n"),
        "{settings}"
    );
    for line in [
        "LastContactThreshold = 200ms",
        "MaxTrailingLogs = 250",
        "MinQuorum = 0",
        "ServerStabilizationTime = 10s",
        "RedundancyZoneTag = \"\"",
    ] {
        assert!(settings.lines().any(|l| l == line), "{line} in {settings}");
    }

    // A dead server stays in Raft (cleanup is off) until remove-peer.
    nodes[2].agent.kill9();
    let address = format!(
        "127.0.0.33:{}",
        nodes[2]
            .flags
            .iter()
            .find_map(|f| f.strip_prefix("-server-port="))
            .unwrap()
    );
    // Unhealthy (429), and failed once gossip notices; still a voter.
    let health = eventually(Duration::from_secs(30), || {
        let (status, _, body) =
            nodes[0]
                .agent
                .request("GET", "/v1/operator/autopilot/health", None);
        (status == 429 && body.contains(r#""SerfStatus":"failed""#)).then_some(body)
    });
    assert!(health.contains(r#""Healthy":false"#), "{health}");
    let peers = nodes[0].agent.get("/v1/status/peers").unwrap();
    assert_eq!(peers.as_array().unwrap().len(), 3, "{peers}");
    let out = nodes[0]
        .agent
        .cli(&["operator", "raft", "remove-peer", "-address", &address]);
    assert_eq!(
        common::expect_success(&out),
        format!("Removed peer with address \"{address}\"")
    );
    let peers = eventually(Duration::from_secs(10), || {
        let peers = nodes[0].agent.get("/v1/status/peers").ok()?;
        (peers.as_array()?.len() == 2).then_some(peers)
    });
    assert!(!peers.to_string().contains(&address), "{peers}");
}

/// The server port with `verify_incoming` and `verify_outgoing`, using
/// certificates from `legate tls ca create` / `tls cert create`: Raft and
/// RPC between servers and from a client agent run over TLS, and a plain
/// connection to the server port is refused.
#[test]
fn a_cluster_speaks_tls_on_the_server_port() {
    let certs = tempfile::tempdir().unwrap();
    let tls = |args: &[&str]| {
        let out = std::process::Command::new(common::binary())
            .args(args)
            .current_dir(certs.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    tls(&["tls", "ca", "create"]);
    tls(&["tls", "cert", "create", "-server"]);
    tls(&["tls", "cert", "create", "-client"]);
    let path = |name: &str| certs.path().join(name).display().to_string();
    let block = |cert: &str, key: &str| {
        format!(
            "-hcl=tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" verify_incoming = true verify_outgoing = true }} }}",
            path("consul-agent-ca.pem"),
            path(cert),
            path(key)
        )
    };
    let server_tls = block("dc1-server-consul-0.pem", "dc1-server-consul-0-key.pem");
    let keygen = |_: ()| {
        let out = std::process::Command::new(common::binary())
            .arg("keygen")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let first_key = keygen(());
    let encrypt = format!("-encrypt={first_key}");
    let mut nodes = cluster_of(
        ["127.0.0.41", "127.0.0.42", "127.0.0.43"],
        None,
        &[server_tls.as_str(), encrypt.as_str()],
    );
    eventually(Duration::from_secs(30), || {
        let leaders: Vec<String> = nodes.iter().map(leader_of).collect();
        (leaders[0].len() > 2 && leaders.iter().all(|l| *l == leaders[0])).then_some(())
    });
    let client_tls = block("dc1-client-consul-0.pem", "dc1-client-consul-0-key.pem");
    let (client, _data) = join_client_with(
        "tls-client",
        "127.0.0.44",
        &nodes[1],
        &[client_tls, encrypt.clone()],
    );
    let (status, body) = client.put("/v1/kv/over-tls", "yes");
    assert_eq!((status, body.as_str()), (200, "true"));
    for n in &nodes {
        let value = eventually(Duration::from_secs(10), || {
            n.agent.get_text("/v1/kv/over-tls?raw&stale").ok()
        });
        assert_eq!(value, "yes");
    }

    // Gossip key rotation with `keyring`, through any agent, reaches all
    // four members.
    let keyring = |agent: &TestAgent, args: &[&str]| {
        let mut all = vec!["keyring"];
        all.extend_from_slice(args);
        common::expect_success(&agent.cli(&all))
    };
    let listed_with = |agent: &TestAgent, key: &str, count: &str| {
        let key = key.to_string();
        let count = count.to_string();
        let mut last = String::new();
        // Up to 30 s for members' tags to carry new key fingerprints.
        let deadline = std::time::Instant::now() + Duration::from_secs(45);
        loop {
            let out = keyring(agent, &["-list"]);
            if out.lines().any(|l| l.trim() == format!("{key} {count}")) {
                return out;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{key} never listed {count}: {last}"
            );
            last = out;
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let listed = listed_with(&nodes[2].agent, &first_key, "[4/4]");
    assert!(
        listed.starts_with("==> Gathering installed encryption keys..."),
        "{listed}"
    );
    assert!(listed.contains("dc1 (LAN):"), "{listed}");
    let second_key = keygen(());
    keyring(&client, &["-install", &second_key]);
    listed_with(&nodes[2].agent, &second_key, "[4/4]");
    keyring(&nodes[0].agent, &["-use", &second_key]);
    keyring(&nodes[0].agent, &["-remove", &first_key]);
    let after = eventually(Duration::from_secs(20), || {
        let out = keyring(&nodes[1].agent, &["-list"]);
        (!out.contains(&first_key)).then_some(out)
    });
    assert!(after.contains(&format!("{second_key} [4/4]")), "{after}");
    // The servers' WAN pool follows the LAN's keyring: listed first, with
    // the three servers holding the new key only.
    let wan = listed_with(&nodes[1].agent, &second_key, "[3/3]");
    let wan_at = wan.find("WAN:").expect("the WAN pool is listed");
    assert!(wan_at < wan.find("dc1 (LAN):").unwrap(), "{wan}");
    assert!(!wan.contains(&first_key), "{wan}");
    let out = nodes[0].agent.cli(&["keyring", "-remove", &second_key]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("primary"));
    let out = nodes[0]
        .agent
        .cli(&["keyring", "-list", "-install", &first_key]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Exactly one"));
    // Gossip still works after the rotation: a write through the client.
    let (status, _) = client.put("/v1/kv/after-rotation", "yes");
    assert_eq!(status, 200);
    // A server restarted with its old `-encrypt` flag uses the keyring kept
    // in its data dir and rejoins.
    nodes[2].agent.kill9();
    nodes[2].agent = start(&nodes[2].flags);
    nodes[2].agent.wait_ready();
    eventually(Duration::from_secs(30), || {
        let table = members(&nodes[0].agent);
        (status_in(&table, "s3").as_deref() == Some("alive")).then_some(())
    });
    listed_with(&nodes[2].agent, &second_key, "[4/4]");

    // A plain RPC connection (first byte 0, one frame) is closed unanswered.
    use std::io::{Read, Write};
    let port = nodes[0]
        .flags
        .iter()
        .find_map(|f| f.strip_prefix("-server-port="))
        .unwrap();
    let mut plain = std::net::TcpStream::connect(format!("127.0.0.41:{port}")).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let call = br#"{"status_leader":{}}"#;
    let mut frame = vec![0u8];
    frame.extend((call.len() as u32).to_be_bytes());
    frame.extend(call);
    let _ = plain.write_all(&frame);
    let mut answer = Vec::new();
    let read = plain.read_to_end(&mut answer);
    assert!(
        answer.is_empty(),
        "the server answered a plain connection: {read:?} {answer:?}"
    );
}

/// The address a server binds.
fn bind_ip(node: &Node) -> String {
    node.flags
        .iter()
        .find_map(|f| f.strip_prefix("-bind="))
        .unwrap()
        .to_string()
}

/// The ID `operator raft list-peers` shows for the server at `ip`, as
/// `asked` reports the Raft configuration.
fn raft_id(asked: &Node, ip: &str) -> String {
    let configuration = asked.agent.get("/v1/operator/raft/configuration").unwrap();
    configuration["Servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["Address"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{ip}:"))
        })
        .map(|s| s["ID"].as_str().unwrap().to_string())
        .unwrap()
}

/// `operator raft transfer-leader -id` and the HTTP call without an id:
/// leadership moves to the chosen voter (then to another), every server
/// agrees, and writes sent through a follower meanwhile carry on.
#[test]
fn transfer_leader_hands_leadership_to_the_chosen_server() {
    let nodes = cluster_of(["127.0.0.51", "127.0.0.52", "127.0.0.53"], None, &[]);
    let agreed = || {
        eventually(Duration::from_secs(30), || {
            let leaders: Vec<String> = nodes.iter().map(leader_of).collect();
            (leaders[0].len() > 2 && leaders.iter().all(|l| *l == leaders[0]))
                .then(|| leaders[0].clone())
        })
    };
    let ip_of = |leader: &str| {
        leader
            .trim_matches('"')
            .split(':')
            .next()
            .unwrap()
            .to_string()
    };
    let index_of = |ip: &str| nodes.iter().position(|n| bind_ip(n) == ip).unwrap();
    let before = agreed();
    let old = index_of(&ip_of(&before));
    let (target, bystander) = match old {
        0 => (1, 2),
        1 => (2, 0),
        _ => (0, 1),
    };
    let target_ip = bind_ip(&nodes[target]);
    let target_id = raft_id(&nodes[bystander], &target_ip);

    // Writes through the bystander while leadership moves.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = nodes[bystander].agent.base();
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (status, _, body) = common::http_request(
                    port.rsplit(':').next().unwrap().parse().unwrap(),
                    "PUT",
                    "/v1/kv/transfer/counter",
                    Some(i.to_string().into_bytes()),
                );
                answers.push((i, status, body));
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            answers
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let out =
        nodes[bystander]
            .agent
            .cli(&["operator", "raft", "transfer-leader", "-id", &target_id]);
    assert_eq!(common::expect_success(&out), "Success");
    let after = agreed();
    assert_eq!(
        ip_of(&after),
        target_ip,
        "leadership went to the chosen server"
    );
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = writer.join().unwrap();
    let last_ok = answers
        .iter()
        .rev()
        .find(|(_, status, _)| *status == 200)
        .map(|(i, ..)| *i)
        .expect("writes succeeded");
    assert!(
        last_ok + 5 >= answers.len(),
        "writes carry on after the transfer: {:?}",
        &answers[answers.len().saturating_sub(10)..]
    );
    for (_, status, body) in &answers {
        assert!(
            *status == 200 || body.contains("leader"),
            "a write failed for another reason: {status} {body}"
        );
    }
    let value = nodes[target].agent.get("/v1/kv/transfer/counter").unwrap()[0]["Value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!value.is_empty());

    // Twice more, each to a chosen server: it is the one that leads
    // (another one winning an election of its own would be refused).
    for next in [bystander, old] {
        let ip = bind_ip(&nodes[next]);
        let id = raft_id(&nodes[next], &ip);
        let out = nodes[next]
            .agent
            .cli(&["operator", "raft", "transfer-leader", "-id", &id]);
        assert_eq!(common::expect_success(&out), "Success");
        assert_eq!(ip_of(&agreed()), ip);
    }

    // Without an id: the most caught-up other voter.
    let (status, _, body) =
        nodes[old]
            .agent
            .request("POST", "/v1/operator/raft/transfer-leader", None);
    assert_eq!((status, body.trim()), (200, r#"{"Success":true}"#));
    let again = agreed();
    assert_ne!(index_of(&ip_of(&again)), old);
    // An unknown id: Consul's 500, leadership stays.
    let (status, _, body) = nodes[0].agent.request(
        "POST",
        "/v1/operator/raft/transfer-leader?id=no-such-server",
        None,
    );
    assert_eq!(status, 500, "{body}");
    assert_eq!(body, "Could not find address for server id no-such-server");
    assert_eq!(agreed(), again);
}
