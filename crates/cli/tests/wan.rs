//! Two datacenters of three servers and a client agent each, on their own
//! loopback addresses, federated over the WAN pool as users start them:
//! one WAN join from one dc2 server, the flood join brings in every other
//! server, and requests cross in both directions through client agents
//! (HTTP `?dc=`, CLI `-datacenter`, DNS, blocking queries), with Consul's
//! errors for an unknown datacenter and one with no server left.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{eventually, eventually_or, free_port, TestAgent};
use serde_json::Value;

/// Fast WAN failure detection for loopback (Consul's `gossip_wan` keys).
const FAST_WAN: &str =
    "-hcl=gossip_wan { probe_interval = \"200ms\" probe_timeout = \"100ms\" suspicion_mult = 4 }";

struct Agent {
    agent: TestAgent,
    ip: String,
    wan_port: u16,
    dns_port: u16,
    _data: tempfile::TempDir,
}

struct Datacenter {
    servers: Vec<Agent>,
    client: Agent,
}

/// An agent; a server when `server` gives its `-bootstrap-expect` and
/// the addresses it WAN-joins.
fn spawn(
    name: &str,
    ip: &str,
    dc: &str,
    server: Option<(u32, &[String])>,
    lan_join: &[String],
) -> Agent {
    let data = tempfile::tempdir().unwrap();
    let wan_port = free_port();
    let dns_port = free_port();
    let mut flags = vec![
        format!("-node={name}"),
        format!("-datacenter={dc}"),
        format!("-bind={ip}"),
        "-client=127.0.0.1".into(),
        format!("-data-dir={}", data.path().display()),
        format!("-server-port={}", free_port()),
        format!("-serf-lan-port={}", lan_port(ip)),
        format!("-serf-wan-port={wan_port}"),
        format!("-dns-port={dns_port}"),
        "-grpc-port=-1".into(),
        "-retry-interval=1s".into(),
        "-retry-interval-wan=1s".into(),
        "-hcl=primary_datacenter = \"dc1\"".into(),
        FAST_WAN.into(),
        "-hcl=sync_coordinate_interval_min = \"1s\"".into(),
    ];
    if let Some((expect, wan_join)) = server {
        flags.push("-server".into());
        flags.push(format!("-bootstrap-expect={expect}"));
        flags.extend(wan_join.iter().map(|a| format!("-retry-join-wan={a}")));
    }
    flags.extend(lan_join.iter().map(|a| format!("-retry-join={a}")));
    flags.extend(extra_flags(name));
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    Agent {
        agent: TestAgent::spawn(&refs, false),
        ip: ip.to_string(),
        wan_port,
        dns_port,
        _data: data,
    }
}

/// Flags particular agents of the two-datacenter test get: a1 answers
/// with other datacenters' WAN addresses; d1 advertises one of its own.
fn extra_flags(name: &str) -> Vec<String> {
    match name {
        "a1" => vec!["-hcl=translate_wan_addrs = true".into()],
        "d1" => vec![format!("-advertise-wan={D1_WAN}")],
        _ => Vec::new(),
    }
}

/// d1's WAN address (TEST-NET-2: never reached, only reported).
const D1_WAN: &str = "198.51.100.24";

/// Each address gets its own LAN port, fixed for the test's run so the
/// other agents can be told where to join.
fn lan_port(ip: &str) -> u16 {
    use std::sync::{Mutex, OnceLock};
    static PORTS: OnceLock<Mutex<std::collections::HashMap<String, u16>>> = OnceLock::new();
    *PORTS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(ip.to_string())
        .or_insert_with(free_port)
}

fn lan_address(ip: &str) -> String {
    format!("{ip}:{}", lan_port(ip))
}

/// Three servers at `<prefix>1..3` and a client at `<prefix>4`; the
/// first server WAN-joins `wan_join` (none for the primary).
fn datacenter(dc: &str, prefix: &str, names: [&str; 4], wan_join: &[String]) -> Datacenter {
    let ips: Vec<String> = (1..=4).map(|i| format!("{prefix}{i}")).collect();
    let servers: Vec<Agent> = (0..3)
        .map(|i| {
            let lan_join: Vec<String> = (0..3)
                .filter(|j| *j != i)
                .map(|j| lan_address(&ips[j]))
                .collect();
            let wan: &[String] = if i == 0 { wan_join } else { &[] };
            spawn(names[i], &ips[i], dc, Some((3, wan)), &lan_join)
        })
        .collect();
    for s in &servers {
        s.agent.wait_ready();
    }
    let client = spawn(names[3], &ips[3], dc, None, &[lan_address(&ips[0])]);
    client.agent.wait_ready();
    Datacenter { servers, client }
}

fn wan_members(agent: &TestAgent) -> Vec<(String, String)> {
    let out = agent.cli(&["members", "-wan"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            Some((cols.first()?.to_string(), cols.get(2)?.to_string()))
        })
        .collect()
}

fn dig(agent: &Agent, name: &str) -> (String, Vec<String>) {
    dig_type(agent, name, "A")
}

/// `dig <name> <kind>`: the status and each answer's last field.
fn dig_type(agent: &Agent, name: &str, kind: &str) -> (String, Vec<String>) {
    let out = Command::new("dig")
        .arg("@127.0.0.1")
        .args([
            "-p",
            &agent.dns_port.to_string(),
            "+tries=1",
            "+time=5",
            name,
            kind,
        ])
        .output()
        .expect("dig (dnsutils) is installed by .ci/run");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let status = text
        .lines()
        .find_map(|l| l.split("status: ").nth(1))
        .map(|s| s.split(',').next().unwrap_or("").to_string())
        .unwrap_or_default();
    let answers = text
        .lines()
        .skip_while(|l| !l.starts_with(";; ANSWER SECTION"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().last().map(String::from))
        .collect();
    (status, answers)
}

#[test]
fn two_datacenters_federate_route_both_ways_and_report_lost_servers() {
    let dc1 = datacenter("dc1", "127.0.0.11", ["a1", "a2", "a3", "c1"], &[]);
    // One WAN join, from one dc2 server to one dc1 server.
    let seed = format!("{}:{}", dc1.servers[0].ip, dc1.servers[0].wan_port);
    let mut dc2 = datacenter(
        "dc2",
        "127.0.0.12",
        ["b1", "b2", "b3", "d1"],
        std::slice::from_ref(&seed),
    );

    // Flood join: every server of both DCs is alive in every server's WAN pool.
    let all = ["a1.dc1", "a2.dc1", "a3.dc1", "b1.dc2", "b2.dc2", "b3.dc2"];
    for server in dc1.servers.iter().chain(&dc2.servers) {
        eventually_or(
            Duration::from_secs(60),
            || {
                let members = wan_members(&server.agent);
                let alive: Vec<&str> = members
                    .iter()
                    .filter(|(_, s)| s == "alive")
                    .map(|(n, _)| n.as_str())
                    .collect();
                (alive == all).then_some(())
            },
            || {
                format!(
                    "WAN members seen by {}: {:?}",
                    server.ip,
                    wan_members(&server.agent)
                )
            },
        );
    }
    // Consul's columns, and the WAN port in the address.
    let out = dc1.servers[1].agent.cli(&["members", "-wan"]);
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "Node",
            "Address",
            "Status",
            "Type",
            "Build",
            "Protocol",
            "DC",
            "Partition",
            "Segment"
        ]
    );
    let b2 = table.lines().find(|l| l.starts_with("b2.dc2")).unwrap();
    assert!(
        b2.contains(&format!(
            "{}:{}",
            dc2.servers[1].ip, dc2.servers[1].wan_port
        )),
        "{b2}"
    );
    assert!(b2.contains(" server ") && b2.contains(" dc2 "), "{b2}");
    let api: Value = dc1.servers[0].agent.get("/v1/agent/members?wan=1").unwrap();
    let b1 = api
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Name"] == "b1.dc2")
        .unwrap();
    assert_eq!(b1["Status"], 1);
    assert_eq!(b1["Tags"]["dc"], "dc2");
    assert_eq!(b1["Tags"]["role"], "consul");
    // A LAN member of a server advertises its WAN port, as Consul's does.
    let lan: Value = dc1.servers[0].agent.get("/v1/agent/members").unwrap();
    let a2 = lan
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Name"] == "a2")
        .unwrap();
    assert_eq!(
        a2["Tags"]["wan_join_port"],
        dc1.servers[1].wan_port.to_string()
    );

    // A client agent is in no WAN pool and cannot join one.
    assert_eq!(
        dc1.client.agent.get("/v1/agent/members?wan=1").unwrap(),
        serde_json::json!([])
    );
    let (status, body) = dc1
        .client
        .agent
        .put(&format!("/v1/agent/join/{seed}?wan=1"), "");
    assert_eq!(
        (status, body.as_str()),
        (500, "Must be a server to join WAN cluster")
    );
    let (status, _, body) =
        dc1.servers[0]
            .agent
            .request("GET", "/v1/agent/members?wan=1&segment=alpha", None);
    assert_eq!(
        (status, body.as_str()),
        (400, "Cannot provide a segment with wan=true")
    );

    // Every server names the same primary: nothing to warn about.
    let own = dc2.servers[0].agent.get("/v1/agent/self").unwrap();
    assert_eq!(
        own["DebugConfig"]["Legate"]["FederationWarnings"],
        serde_json::json!([])
    );
    assert_eq!(own["Config"]["PrimaryDatacenter"], "dc1");

    // Both DCs, local first, through either DC's client.
    assert_eq!(
        dc1.client.agent.get("/v1/catalog/datacenters").unwrap(),
        serde_json::json!(["dc1", "dc2"])
    );
    assert_eq!(
        dc2.client.agent.get("/v1/catalog/datacenters").unwrap(),
        serde_json::json!(["dc2", "dc1"])
    );

    // WAN coordinates from gossip round trips: every server of both DCs,
    // and `rtt -wan` between them.
    let coords = eventually(Duration::from_secs(30), || {
        let all = dc1.servers[0]
            .agent
            .get("/v1/coordinate/datacenters")
            .ok()?;
        let counts: Vec<usize> = all
            .as_array()?
            .iter()
            .map(|d| d["Coordinates"].as_array().map_or(0, |c| c.len()))
            .collect();
        (counts == [3, 3]).then_some(all)
    });
    assert_eq!(coords[0]["Datacenter"], "dc1");
    assert_eq!(coords[1]["AreaID"], "wan");
    let out = dc1.servers[0]
        .agent
        .cli(&["rtt", "-wan", "a1.dc1", "b2.dc2"]);
    let line = common::expect_success(&out);
    assert!(
        line.starts_with("Estimated a1.dc1 <-> b2.dc2 rtt: ")
            && line.ends_with(" ms (using WAN coordinates)"),
        "{line}"
    );
    let out = dc1.servers[0].agent.cli(&["rtt", "-wan", "a1", "b2.dc2"]);
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("Node names must be specified as <node name>.<datacenter> with -wan"));

    // Global state: a config entry written through dc2's client is stored
    // in the primary and replicated into every dc2 server.
    let (status, body) = dc2.client.agent.put(
        "/v1/config",
        r#"{"Kind":"service-resolver","Name":"db","Failover":{"*":{"Datacenters":["dc2"]}}}"#,
    );
    assert_eq!((status, body.as_str()), (200, "true"));
    let stored = dc1.servers[1]
        .agent
        .get("/v1/config/service-resolver/db?consistent")
        .unwrap();
    assert_eq!(stored["Failover"]["*"]["Datacenters"][0], "dc2");
    for server in &dc2.servers {
        let copy = eventually(Duration::from_secs(10), || {
            server
                .agent
                .get("/v1/config/service-resolver/db?stale")
                .ok()
        });
        assert_eq!(copy["Failover"], stored["Failover"]);
    }
    // Federation states of both DCs, at every server of both (within
    // anti-entropy's 30 s resend of an upsert that did not come back, as
    // when the secondary's first push raced the WAN join on a loaded CI).
    for server in dc1.servers.iter().chain(&dc2.servers) {
        eventually(Duration::from_secs(40), || {
            let states = server
                .agent
                .get("/v1/internal/federation-states?stale")
                .ok()?;
            let names: Vec<&str> = states
                .as_array()?
                .iter()
                .filter_map(|s| s["Datacenter"].as_str())
                .collect();
            (names == ["dc1", "dc2"]).then_some(())
        });
    }

    // Writes and reads both ways: HTTP ?dc= and the CLI's -datacenter.
    let (status, body) = dc1.client.agent.put("/v1/kv/app/x?dc=dc2", "from-dc1");
    assert_eq!((status, body.trim()), (200, "true"));
    assert_eq!(
        dc2.client.agent.get_text("/v1/kv/app/x?raw").unwrap(),
        "from-dc1"
    );
    assert!(
        dc1.client.agent.get_text("/v1/kv/app/x?raw").is_err(),
        "written in dc2 only"
    );
    common::expect_success(&dc2.client.agent.cli(&[
        "kv",
        "put",
        "-datacenter",
        "dc1",
        "app/y",
        "from-dc2",
    ]));
    assert_eq!(
        dc1.servers[2].agent.get_text("/v1/kv/app/y?raw").unwrap(),
        "from-dc2"
    );
    let read = dc1
        .client
        .agent
        .cli(&["kv", "get", "-datacenter", "dc2", "app/x"]);
    assert_eq!(common::expect_success(&read), "from-dc1");

    // A service in dc2, found from dc1 over HTTP and DNS.
    let (status, body) = dc2.client.agent.put(
        "/v1/agent/service/register",
        r#"{"Name": "db", "Port": 5432, "Tags": ["primary"]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let found = eventually(Duration::from_secs(20), || {
        let rows = dc1
            .client
            .agent
            .get("/v1/health/service/db?dc=dc2&passing")
            .ok()?;
        (rows.as_array()?.len() == 1).then_some(rows)
    });
    assert_eq!(found[0]["Node"]["Node"], "d1");
    assert_eq!(found[0]["Node"]["Datacenter"], "dc2");
    assert!(dc1
        .client
        .agent
        .get("/v1/health/service/db?passing")
        .unwrap()
        .as_array()
        .unwrap()
        .is_empty());
    let (status, answers) = dig(&dc1.client, "db.service.dc2.consul");
    assert_eq!(status, "NOERROR");
    assert_eq!(answers, vec![dc2.client.ip.clone()]);
    let (_, answers) = dig(&dc1.client, "d1.node.dc2.consul");
    assert_eq!(answers, vec![dc2.client.ip.clone()]);
    let (_, answers) = dig(&dc2.servers[0], "primary.db.service.dc2.consul");
    assert_eq!(answers, vec![dc2.client.ip.clone()]);
    let (status, _) = dig(&dc1.client, "db.service.dc9.consul");
    assert_eq!(status, "NXDOMAIN");

    // translate_wan_addrs (on a1 only): other DCs' rows and DNS answers
    // carry their WAN addresses, and a1 says it translates.
    let (_, headers, body) =
        dc1.servers[0]
            .agent
            .request("GET", "/v1/health/service/db?dc=dc2", None);
    let rows: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(rows[0]["Node"]["Address"], D1_WAN);
    assert_eq!(rows[0]["Node"]["TaggedAddresses"]["wan"], D1_WAN);
    assert_eq!(
        common::header(&headers, "x-consul-translate-addresses"),
        Some("true")
    );
    let rows = dc1.servers[0]
        .agent
        .get("/v1/catalog/service/db?dc=dc2")
        .unwrap();
    assert_eq!(rows[0]["Address"], D1_WAN);
    let (_, answers) = dig(&dc1.servers[0], "db.service.dc2.consul");
    assert_eq!(answers, vec![D1_WAN.to_string()]);
    // The local DC and agents without the setting keep LAN addresses.
    let (_, headers, body) = dc1
        .client
        .agent
        .request("GET", "/v1/health/service/db?dc=dc2", None);
    let rows: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(rows[0]["Node"]["Address"], dc2.client.ip);
    assert_eq!(
        common::header(&headers, "x-consul-translate-addresses"),
        None
    );
    let own = dc1.servers[0].agent.get("/v1/catalog/nodes").unwrap();
    assert!(own
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["Address"].as_str().unwrap().starts_with("127.")));

    // User events through gossip: to every agent of the DC they were
    // fired in (and only there), kept where their filters match.
    let events_on = |agent: &Agent, name: &str| -> usize {
        agent
            .agent
            .get(&format!("/v1/event/list?name={name}"))
            .map(|v| v.as_array().map_or(0, |a| a.len()))
            .unwrap_or(0)
    };
    let out = dc1
        .client
        .agent
        .cli(&["event", "-datacenter", "dc2", "-name", "everyone", "hello"]);
    assert!(common::expect_success(&out).starts_with("Event ID: "));
    for agent in dc2.servers.iter().chain(std::iter::once(&dc2.client)) {
        eventually(Duration::from_secs(15), || {
            (events_on(agent, "everyone") == 1).then_some(())
        });
    }
    let listed = dc2.servers[1]
        .agent
        .get("/v1/event/list?name=everyone")
        .unwrap();
    assert_eq!(listed[0]["Payload"], "aGVsbG8=");
    for agent in dc1.servers.iter().chain(std::iter::once(&dc1.client)) {
        assert_eq!(events_on(agent, "everyone"), 0, "fired in dc2 only");
    }
    // Filtered by service and tag: only d1 runs db (tagged primary).
    let (status, _) = dc2.servers[0]
        .agent
        .put("/v1/event/fire/for-db?service=db&tag=prim.*", "");
    assert_eq!(status, 200);
    let (status, _) = dc2.servers[0]
        .agent
        .put("/v1/event/fire/nobody?service=db&tag=replica", "");
    assert_eq!(status, 200);
    eventually(Duration::from_secs(15), || {
        (events_on(&dc2.client, "for-db") == 1).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(events_on(&dc2.servers[1], "for-db"), 0);
    assert_eq!(events_on(&dc2.client, "nobody"), 0);
    // Bad input: Consul's texts.
    let (status, body) = dc2.client.agent.put("/v1/event/fire/x?tag=a", "");
    assert_eq!(
        (status, body.as_str()),
        (400, "Cannot provide tag filter without service filter.")
    );
    let big = "a".repeat(600);
    let (status, body) = dc2.client.agent.put("/v1/event/fire/big", &big);
    assert_eq!(
        (status, body.as_str()),
        (
            500,
            "user event exceeds configured limit of 512 bytes before encoding"
        )
    );
    // A blocking list returns on the next event, with Consul's index.
    let (_, headers, _) = dc2.servers[2].agent.request("GET", "/v1/event/list", None);
    let index: u64 = common::header(&headers, "x-consul-index")
        .unwrap()
        .parse()
        .unwrap();
    let port = dc2.servers[2].agent.http_port;
    let waiter = std::thread::spawn(move || {
        common::http_request(
            port,
            "GET",
            &format!("/v1/event/list?index={index}&wait=20s"),
            None,
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    // A watch on d1 runs its handler for each event named deploy.
    let marks = tempfile::tempdir().unwrap();
    let out_file = marks.path().join("deploys");
    let mut watch = Command::new(common::binary())
        .args(["watch", "-type=event", "-name=deploy"])
        .arg(format!("cat >> {}", out_file.display()))
        .env("CONSUL_HTTP_ADDR", dc2.client.agent.addr())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = dc2.servers[0]
        .agent
        .cli(&["event", "-name", "deploy", "v2"]);
    let id = common::expect_success(&out)
        .trim_start_matches("Event ID: ")
        .to_string();
    let (status, headers, body) = waiter.join().unwrap();
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    let last = list.as_array().unwrap().last().unwrap();
    assert_eq!(last["ID"], id.as_str());
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    let expected =
        u64::from_str_radix(&hex[..16], 16).unwrap() ^ u64::from_str_radix(&hex[16..], 16).unwrap();
    assert_eq!(
        common::header(&headers, "x-consul-index"),
        Some(expected.to_string().as_str())
    );
    let handled = eventually(Duration::from_secs(15), || {
        let text = std::fs::read_to_string(&out_file).ok()?;
        text.contains(&id).then_some(text)
    });
    assert!(handled.contains("\"Name\":\"deploy\""), "{handled}");
    let _ = watch.kill();
    let _ = watch.wait();

    // ?dc= on the rest of the API: each write lands in dc2 only, each
    // read answers dc2's state; but a config entry is global, so dc2's
    // server hands it to the primary (as Consul's does) and it comes back.
    let c1 = &dc1.client.agent;
    let (status, body) = c1.put(
        "/v1/config?dc=dc2",
        r#"{"Kind": "service-defaults", "Name": "web", "Protocol": "http"}"#,
    );
    assert_eq!((status, body.trim()), (200, "true"));
    assert_eq!(
        dc1.servers[1]
            .agent
            .get("/v1/config/service-defaults/web")
            .unwrap()["Protocol"],
        "http"
    );
    eventually(Duration::from_secs(10), || {
        let entry = dc2.servers[1]
            .agent
            .get("/v1/config/service-defaults/web?stale")
            .ok()?;
        (entry["Protocol"] == "http").then_some(())
    });
    let chain = c1.get("/v1/discovery-chain/web?dc=dc2").unwrap();
    assert_eq!(chain["Chain"]["Datacenter"], "dc2");
    assert_eq!(chain["Chain"]["Protocol"], "http");
    let (status, body) = c1.put(
        "/v1/session/create?dc=dc2",
        r#"{"Name": "cross", "Node": "d1"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let session: Value = serde_json::from_str(&body).unwrap();
    let id = session["ID"].as_str().unwrap();
    let info = c1.get(&format!("/v1/session/info/{id}?dc=dc2")).unwrap();
    assert_eq!(info[0]["Name"], "cross");
    assert_eq!(
        c1.get(&format!("/v1/session/info/{id}")).unwrap(),
        serde_json::json!([])
    );
    let (status, body) = c1.put(
        "/v1/txn?dc=dc2",
        r#"[{"KV": {"Verb": "set", "Key": "app/txn", "Value": "dHhu"}}]"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        dc2.client.agent.get_text("/v1/kv/app/txn?raw").unwrap(),
        "txn"
    );
    let roots_dc1 = c1.get("/v1/connect/ca/roots").unwrap();
    let roots_dc2 = eventually(Duration::from_secs(10), || {
        let roots = c1.get("/v1/connect/ca/roots?dc=dc2").ok()?;
        (roots["TrustDomain"] == roots_dc1["TrustDomain"]).then_some(roots)
    });
    assert_eq!(
        roots_dc2["TrustDomain"],
        dc2.client.agent.get("/v1/connect/ca/roots").unwrap()["TrustDomain"]
    );
    assert_eq!(
        roots_dc1["TrustDomain"], roots_dc2["TrustDomain"],
        "dc2 adopts the primary's trust domain"
    );
    let raft = c1.get("/v1/operator/raft/configuration?dc=dc2").unwrap();
    let mut raft_nodes: Vec<String> = raft["Servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Node"].as_str().unwrap().to_string())
        .collect();
    raft_nodes.sort();
    assert_eq!(raft_nodes, ["b1", "b2", "b3"]);
    assert_eq!(
        c1.get("/v1/connect/intentions?dc=dc2").unwrap(),
        serde_json::json!([])
    );
    let (status, _, body) = c1.request("GET", "/v1/config/service-defaults/web?dc=dc9", None);
    assert_eq!((status, body.as_str()), (500, "No path to datacenter"));

    // A blocking query across DCs returns on the change.
    let (_, headers, _) = dc1.client.agent.request("GET", "/v1/kv/app/x?dc=dc2", None);
    let index: u64 = common::header(&headers, "x-consul-index")
        .unwrap()
        .parse()
        .unwrap();
    let port = dc1.client.agent.http_port;
    let waiter = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let path = format!("/v1/kv/app/x?dc=dc2&raw&index={index}&wait=30s");
        let (status, _, body) = common::http_request(port, "GET", &path, None);
        (status, body, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let (status, _) = dc2.servers[1].agent.put("/v1/kv/app/x", "changed");
    assert_eq!(status, 200);
    let (status, body, waited) = waiter.join().unwrap();
    assert_eq!((status, body.as_str()), (200, "changed"));
    assert!(waited < Duration::from_secs(20), "{waited:?}");

    // An unknown datacenter: Consul's error and status.
    let (status, _, body) = dc1.client.agent.request("GET", "/v1/kv/app/x?dc=dc9", None);
    assert_eq!((status, body.as_str()), (500, "No path to datacenter"));
    let (status, _, body) = dc1.servers[0]
        .agent
        .request("PUT", "/v1/kv/app/z?dc=dc9", Some("1"));
    assert_eq!((status, body.as_str()), (500, "No path to datacenter"));

    // RFC 2782 names for another DC: the SRV target is d1 in dc2.
    let (status, answers) = dig_type(&dc1.client, "_db._tcp.service.dc2.consul", "SRV");
    assert_eq!(status, "NOERROR");
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(answers[0].contains(".node.dc2.consul"), "{answers:?}");
    // LAN coordinates reach the catalog: every agent sends its own, the
    // leader writes them once every Raft voter stores them (ft_co).
    let rows = eventually(Duration::from_secs(30), || {
        let rows = dc1.client.agent.get("/v1/coordinate/nodes").ok()?;
        (rows.as_array()?.len() == 4).then_some(rows)
    });
    let mut nodes: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Node"].as_str().unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["a1", "a2", "a3", "c1"]);
    let out = dc1.client.agent.cli(&["rtt", "a1", "c1"]);
    assert!(common::expect_success(&out).ends_with("(using LAN coordinates)"));
    // A server's agent self carries its LAN coordinate once gossip measured one.
    let coord = eventually(Duration::from_secs(20), || {
        let own = dc1.servers[1].agent.get("/v1/agent/self").ok()?;
        own["Coord"].is_object().then(|| own["Coord"].clone())
    });
    assert_eq!(coord["Vec"].as_array().unwrap().len(), 8);
    // A WAN join to an address that is not a Legate server's WAN port.
    let (status, body) = dc1.servers[0].agent.put(
        &format!(
            "/v1/agent/join/127.0.0.1:{}?wan=1",
            dc1.client.agent.http_port
        ),
        "",
    );
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Failed to join"), "{body}");

    // A killed dc2 server shows failed in dc1; the others still answer.
    dc2.servers[2].agent.kill9();
    eventually(Duration::from_secs(20), || {
        let members = wan_members(&dc1.servers[0].agent);
        members
            .iter()
            .any(|(n, s)| n == "b3.dc2" && s == "failed")
            .then_some(())
    });
    // force-leave -wan -prune forgets it in every dc1 server's WAN pool.
    common::expect_success(
        &dc1.servers[0]
            .agent
            .cli(&["force-leave", "-wan", "-prune", "b3.dc2"]),
    );
    for server in &dc1.servers {
        eventually(Duration::from_secs(20), || {
            wan_members(&server.agent)
                .iter()
                .all(|(n, _)| n != "b3.dc2")
                .then_some(())
        });
    }
    let out = dc1.servers[0]
        .agent
        .cli(&["force-leave", "-wan", "nobody.dc9"]);
    assert!(!out.status.success());
    for _ in 0..5 {
        assert_eq!(
            dc1.client
                .agent
                .get_text("/v1/kv/app/x?dc=dc2&raw&stale")
                .unwrap(),
            "changed"
        );
    }
    // With every dc2 server gone, dc2 is known but unreachable; dc1 serves on.
    dc2.servers[0].agent.kill9();
    dc2.servers[1].agent.kill9();
    eventually(Duration::from_secs(20), || {
        let (status, _, body) = dc1.client.agent.request("GET", "/v1/kv/app/x?dc=dc2", None);
        (status == 500 && body == "Remote DC has no server currently reachable").then_some(())
    });
    let (status, _) = dc1.client.agent.put("/v1/kv/app/still", "served");
    assert_eq!(status, 200);
    assert_eq!(
        dc1.servers[1]
            .agent
            .get_text("/v1/kv/app/still?raw")
            .unwrap(),
        "served"
    );
    let (status, _) = dig(&dc1.client, "db.service.dc2.consul");
    assert_eq!(status, "NXDOMAIN");
}

#[test]
fn a_node_name_with_a_dot_cannot_join_the_wan_pool() {
    let a = spawn("x.y", "127.0.0.131", "dc3", Some((1, &[])), &[]);
    a.agent.wait_ready();
    let (status, body) = a.agent.put("/v1/agent/join/127.0.0.132?wan=1", "");
    assert_eq!(status, 500);
    assert!(
        body.contains("node name does not encode a datacenter: x.y.dc3"),
        "{body}"
    );
    assert_eq!(
        a.agent.get("/v1/agent/members?wan=1").unwrap(),
        serde_json::json!([])
    );
    assert!(a
        .agent
        .log_text()
        .contains("node name does not encode a datacenter: x.y.dc3"));
    let own = a.agent.get("/v1/agent/self").unwrap();
    assert_eq!(
        own["DebugConfig"]["Legate"]["FederationWarnings"],
        serde_json::json!(["node name does not encode a datacenter: x.y.dc3"])
    );
}

#[test]
fn a_secondary_that_cannot_reach_its_primary_says_so() {
    // dc4 names dc1 as its primary, but no WAN join brings dc1 in.
    let a = spawn("e1", "127.0.0.141", "dc4", Some((1, &[])), &[]);
    a.agent.wait_ready();
    let expected = "primary_datacenter is dc1, but the WAN pool holds no server of dc1";
    let warnings = eventually(Duration::from_secs(30), || {
        let own = a.agent.get("/v1/agent/self").ok()?;
        let warnings = own["DebugConfig"]["Legate"]["FederationWarnings"]
            .as_array()?
            .clone();
        (!warnings.is_empty()).then_some(warnings)
    });
    assert!(
        warnings[0].as_str().unwrap().starts_with(expected),
        "{warnings:?}"
    );
    assert!(a.agent.log_text().contains(expected));
}
