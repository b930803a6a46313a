//! WAN federation through mesh gateways, laid out as the networks that
//! need it are: each datacenter's three servers in its own network
//! namespace, the router between them refusing every address of the
//! other datacenter but its gateway's WAN address. The servers never
//! reach each other; their WAN gossip and RPC go through the built-in
//! gateways (`-expose-servers`), over TLS with `-node` certificates.
//!
//! Needs root (network namespaces), as the CI machine runs tests.

mod common;

use std::path::Path;
use std::time::Duration;

use common::datacenters::{in_ns, Networks, Server, ServerSpec};
use common::mesh::{echo_server_at, echo_within, Proxy};
use common::wanfed::{certificates, json_of, server_certificate, wan_members};
use common::{eventually, eventually_or};
use serde_json::{json, Value};

/// Addresses in a datacenter's subnet, by their place after the servers.
const GATEWAY_LAN: usize = 9; // .20
const GATEWAY_WAN: usize = 10; // .21
/// The addresses of each datacenter's replacement gateway.
const NEW_GATEWAY_LAN: usize = 11; // .22
const NEW_GATEWAY_WAN: usize = 12; // .23
/// The addresses of the primary's third gateway (Consul #7339's step).
const THIRD_GATEWAY_LAN: usize = 13; // .24
const THIRD_GATEWAY_WAN: usize = 14; // .25
/// The host name the secondary's servers are given for the primary's
/// gateways (`primary_gateways`), looked up again every 2 s.
const PRIMARY_GATEWAYS_NAME: &str = "primary-gateways.test";
/// web's sidecar in dc1, db's in dc2.
const SIDECAR: usize = 19; // .30
const SERVERS: usize = 3;

/// A counter of `/v1/agent/metrics` (its cumulative Prometheus form) with
/// `label` = `value` (0 when absent).
fn counter(server: &Server, name: &str, label: (&str, &str)) -> u64 {
    match server.request("GET", "/v1/agent/metrics?format=prometheus", "") {
        Some((200, text)) => common::prometheus::sum(&text, name, &[label]) as u64,
        _ => 0,
    }
}

#[test]
fn servers_that_cannot_reach_each_other_federate_through_the_gateways() {
    let networks = Networks::new(SERVERS);
    let router = networks.namespaces[0].clone();
    for dc in 0..2 {
        let ns = networks.namespace(dc).to_string();
        let places = [GATEWAY_LAN, GATEWAY_WAN, NEW_GATEWAY_LAN, NEW_GATEWAY_WAN];
        let places = places
            .into_iter()
            .chain([THIRD_GATEWAY_LAN, THIRD_GATEWAY_WAN, SIDECAR]);
        for place in places {
            let address = format!("{}/24", networks.address(dc, place));
            in_ns(&ns, &["addr", "add", &address, "dev", "eth0"]);
        }
        // Across, no gateway's LAN address routes, nor any sidecar's.
        for place in [GATEWAY_LAN, NEW_GATEWAY_LAN, THIRD_GATEWAY_LAN, SIDECAR] {
            let lan = format!("{}/32", networks.address(dc, place));
            in_ns(&router, &["route", "add", "prohibit", &lan]);
        }
    }
    // And no server reaches another datacenter's servers (.11-.13, in
    // .8/29): only the gateways' WAN addresses bridge them.
    let servers_of = |dc: usize| {
        let first = networks.address(dc, 0);
        format!("{}.8/29", first.rsplit_once('.').unwrap().0)
    };
    for (from, to) in [(0, 1), (1, 0)] {
        in_ns(
            &router,
            &[
                "rule",
                "add",
                "from",
                &servers_of(from),
                "to",
                &servers_of(to),
                "prohibit",
            ],
        );
    }
    let certs_dir = tempfile::tempdir().unwrap();
    let tls = certificates(certs_dir.path(), SERVERS);
    let wan_of = |dc: usize, place: usize| format!("{}:8443", networks.address(dc, place));
    let gateway_wan = |dc: usize| wan_of(dc, GATEWAY_WAN);
    let primary_gateways_are = |place: usize| {
        let address = networks.address(0, place);
        networks.set_hosts(1, &[(address.as_str(), PRIMARY_GATEWAYS_NAME)]);
    };
    primary_gateways_are(GATEWAY_WAN);
    let dirs: Vec<Vec<tempfile::TempDir>> = (0..2)
        .map(|_| (0..SERVERS).map(|_| tempfile::tempdir().unwrap()).collect())
        .collect();
    let start_server = |dc: usize, server: usize| {
        let mut extra = vec![
            "-hcl=connect { enabled = true enable_mesh_gateway_wan_federation = true }".to_string(),
            format!("-hcl={}", tls[dc][server]),
            "-hcl=gossip_wan { probe_timeout = \"500ms\" }".into(),
        ];
        if dc == 1 {
            extra.push(format!("-primary-gateway={PRIMARY_GATEWAYS_NAME}:8443"));
            extra.push("-hcl=primary_gateways_interval = \"2s\"".into());
        }
        Server::spawn_with(
            &networks,
            ServerSpec {
                dc,
                server,
                expect: SERVERS,
                wan_join: None,
                dir: dirs[dc][server].path(),
            },
            &extra,
        )
    };
    let logs = tempfile::tempdir().unwrap();
    // A gateway of datacenter `dc` at its (LAN, WAN) places, registered
    // through `server` as `id`.
    let gateway_at = |dc: usize, server: &Server, (lan, wan): (usize, usize), id: &str| {
        let lan = networks.address(dc, lan);
        Proxy(networks.spawn(
            dc,
            &[
                "connect".into(),
                "proxy".into(),
                "-gateway=mesh".into(),
                "-register".into(),
                "-expose-servers".into(),
                format!("-proxy-id={id}"),
                format!("-address={lan}:8443"),
                format!("-wan-address={}", wan_of(dc, wan)),
                format!("-admin-bind={lan}:19000"),
                format!("-http-addr={}:8500", server.address),
                format!("-grpc-addr={}:8502", server.address),
            ],
            &logs.path().join(format!("{id}-dc{}.log", dc + 1)),
        ))
    };
    let gateway = |dc: usize, server: &Server| {
        gateway_at(dc, server, (GATEWAY_LAN, GATEWAY_WAN), "mesh-gateway")
    };

    let logs_of = |servers: &[Server]| -> String {
        servers
            .iter()
            .map(|s| format!("{}:\n{}\n", s.address, s.log_tail()))
            .collect()
    };
    // The primary, then the secondary before any primary gateway exists:
    // it keeps trying and says what it waits for.
    let mut dc1: Vec<Server> = (0..SERVERS).map(|s| start_server(0, s)).collect();
    dc1[0].wait_for_leader();
    let mut dc2: Vec<Server> = (0..SERVERS).map(|s| start_server(1, s)).collect();
    dc2[0].wait_for_leader();
    eventually_or(
        Duration::from_secs(30),
        || {
            dc2.iter()
                .all(|s| {
                    s.log_tail()
                        .contains("cannot reach a server of dc1 through its gateways yet")
                })
                .then_some(())
        },
        || logs_of(&dc2),
    );
    // Then the gateways; the secondary joins through the primary's, with
    // no WAN join of its own.
    let gateway1 = gateway(0, &dc1[0]);
    let gateway2 = gateway(1, &dc2[0]);

    // Every server of both datacenters alive in every server's WAN pool.
    let mut everyone: Vec<(String, String)> = (1..=2)
        .flat_map(|dc| (1..=SERVERS).map(move |s| (format!("s{s}.dc{dc}"), "alive".to_string())))
        .collect();
    everyone.sort();
    let gateway_logs = || -> String {
        (1..=2)
            .map(|dc| {
                let text =
                    std::fs::read_to_string(logs.path().join(format!("mesh-gateway-dc{dc}.log")))
                        .unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!(
                    "gateway{dc}:\n{}\n",
                    lines[lines.len().saturating_sub(20)..].join("\n")
                )
            })
            .collect()
    };
    for server in dc1.iter().chain(&dc2) {
        let seen = eventually_or(
            Duration::from_secs(120),
            || {
                let members = wan_members(server);
                (members == everyone).then_some(members)
            },
            || {
                format!(
                    "{} sees {:?}\nlocator {:?}\n{}{}{}",
                    server.address,
                    wan_members(server),
                    json_of(server, "/v1/internal/gateway-locator"),
                    logs_of(&dc1),
                    logs_of(&dc2),
                    gateway_logs()
                )
            },
        );
        assert_eq!(seen.len(), 6);
    }
    // Their gossip went through the gateways: each server dialled or
    // accepted WAN gossip connections (by their negotiated ALPN protocol;
    // a connection carries datagrams both ways, so the secondary's dials
    // may be all there is), and the primary's server ports accepted some.
    let gossip = ("protocol", "legate/wan-gossip/packet");
    for (dc, servers) in [&dc1, &dc2].into_iter().enumerate() {
        let accepted: Vec<u64> = servers
            .iter()
            .map(|s| counter(s, "consul_rpc_accept_conn", gossip))
            .collect();
        if dc == 0 {
            assert!(accepted.iter().sum::<u64>() > 0, "{accepted:?}");
        }
        for (server, accepted) in servers.iter().zip(accepted) {
            let dialed = counter(server, "consul_rpc_dialed_conns", gossip);
            assert!(accepted + dialed > 0, "{}", server.address);
        }
    }

    // ?dc= both ways, writes and reads, from every server.
    for (i, (from, to)) in [(&dc1, "dc2"), (&dc2, "dc1")].into_iter().enumerate() {
        for server in from.iter() {
            let key = format!("/v1/kv/across/{i}/{}?dc={to}", server.address);
            let last = std::cell::RefCell::new(None);
            let written = eventually_or(
                Duration::from_secs(60),
                || {
                    let answer = server.request("PUT", &key, "through the gateways");
                    *last.borrow_mut() = answer.clone();
                    let (status, body) = answer?;
                    (status == 200).then_some(body)
                },
                || {
                    format!(
                        "{key}: {:?}\n{}{}",
                        last.borrow(),
                        logs_of(&dc1),
                        gateway_logs()
                    )
                },
            );
            assert_eq!(written, "true", "{}", logs_of(from));
            let (status, body) = server.request("GET", &format!("{key}&raw"), "").unwrap();
            assert_eq!((status, body.as_str()), (200, "through the gateways"));
        }
    }
    // The RPC went through gateways too, multiplexed: dialled with its own
    // ALPN, on a bounded number of connections (at most 4 per gateway and
    // server name: 2 gateways, 3 servers and "any server").
    for server in dc1.iter().chain(&dc2) {
        let rpc = ("protocol", "legate/rpc-multiplex");
        let dialed = counter(server, "consul_rpc_dialed_conns", rpc);
        assert!((1..=32).contains(&dialed), "{}: {dialed}", server.address);
    }

    // Global state: a config entry written through dc2 is stored in the
    // primary and replicated back into every dc2 server.
    let entry = r#"{"Kind":"service-defaults","Name":"db","Protocol":"tcp"}"#;
    let (status, body) = dc2[1].request("PUT", "/v1/config", entry).unwrap();
    assert_eq!((status, body.as_str()), (200, "true"), "{}", logs_of(&dc2));
    for server in &dc2 {
        eventually(Duration::from_secs(30), || {
            let stored = json_of(server, "/v1/config/service-defaults/db?stale")?;
            (stored["Protocol"] == "tcp").then_some(())
        });
    }
    // Federation states of both datacenters, each with its gateway.
    for server in dc1.iter().chain(&dc2) {
        eventually(Duration::from_secs(60), || {
            let gateways = json_of(server, "/v1/internal/federation-states/mesh-gateways?stale")?;
            let both = ["dc1", "dc2"]
                .iter()
                .all(|dc| gateways[dc].as_array().is_some_and(|g| !g.is_empty()));
            both.then_some(())
        });
    }

    // The mesh across: web in dc1 reaches db in dc2 through both gateways,
    // as the replicated intention allows and then no longer does.
    web_reaches_db_only_as_the_replicated_intention_says(&networks, &dc1[0], &dc2, logs.path());

    // The locator, as each server shows it. The secondary's followers go
    // through their own gateways (#9341), and the configured primary
    // gateway stays beside the replicated one (#7339).
    for server in &dc2 {
        let locator = eventually(Duration::from_secs(60), || {
            let l = json_of(server, "/v1/internal/gateway-locator")?;
            (l["LocalGateways"].as_array()?.len() == 1).then_some(l)
        });
        assert_eq!(
            locator["ConfiguredPrimaryGateways"],
            serde_json::json!([gateway_wan(0)])
        );
        assert!(locator["PrimaryGateways"]
            .as_array()
            .unwrap()
            .contains(&Value::String(gateway_wan(0))));
        if locator["Leader"] == false {
            assert_eq!(locator["PrimaryThroughLocal"], true, "{locator}");
        }
    }
    let (status, body) = dc1[0]
        .request("GET", "/v1/internal/gateway-locator", "")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let primary: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(primary["Reason"], "this is the primary datacenter");

    // A secondary's follower restarted over its data uses the stored
    // federation states at once: through its own gateways (#9342), and
    // back in the WAN pool of both datacenters.
    let follower = (0..SERVERS)
        .find(|&i| {
            json_of(&dc2[i], "/v1/internal/gateway-locator").is_some_and(|l| l["Leader"] == false)
        })
        .unwrap();
    drop(dc2.remove(follower));
    dc2.insert(follower, start_server(1, follower));
    let restarted = &dc2[follower];
    eventually(Duration::from_secs(30), || {
        json_of(restarted, "/v1/internal/gateway-locator")
    });
    let locator = eventually(Duration::from_secs(3), || {
        let l = json_of(restarted, "/v1/internal/gateway-locator")?;
        (l["LocalGateways"].as_array()?.len() == 1).then_some(l)
    });
    assert_eq!(locator["PrimaryThroughLocal"], true, "{locator}");
    for server in dc1.iter().chain(&dc2) {
        eventually(Duration::from_secs(60), || {
            (wan_members(server) == everyone).then_some(())
        });
    }

    // The primary's gateway replaced by one at a new address: once the
    // new one reached the secondary in the federation states, the old one
    // goes, and the secondary carries on through the new one.
    let new_gateway1 = gateway_at(
        0,
        &dc1[1],
        (NEW_GATEWAY_LAN, NEW_GATEWAY_WAN),
        "mesh-gateway-new",
    );
    for server in &dc2 {
        eventually(Duration::from_secs(60), || {
            let l = json_of(server, "/v1/internal/gateway-locator")?;
            l["PrimaryGateways"]
                .as_array()?
                .contains(&Value::String(wan_of(0, NEW_GATEWAY_WAN)))
                .then_some(())
        });
    }
    drop(gateway1);
    let across = |from: &[Server], to: &str, key: &str| {
        for server in from {
            let path = format!("/v1/kv/rotated/{key}/{}?dc={to}", server.address);
            eventually_or(
                Duration::from_secs(90),
                || {
                    let (status, _) = server.request("PUT", &path, "after")?;
                    (status == 200).then_some(())
                },
                || format!("{path}\n{}{}", logs_of(from), gateway_logs()),
            );
        }
    };
    across(&dc2, "dc1", "primary-gateway");
    across(&dc1, "dc2", "primary-gateway");

    // Consul #7339: the primary's gateway replaced at once by one at an
    // address no federation state in dc2 can learn (its only ways to the
    // primary went with the old gateway). dc2 stays cut off while its
    // configured name still leads to the old address; once the name is
    // looked up again to the new one, dc2 carries on: the configured
    // gateways stay beside the replicated ones, never replaced by them.
    drop(new_gateway1);
    let _third_gateway1 = gateway_at(
        0,
        &dc1[2],
        (THIRD_GATEWAY_LAN, THIRD_GATEWAY_WAN),
        "mesh-gateway-third",
    );
    let third = Value::String(wan_of(0, THIRD_GATEWAY_WAN));
    std::thread::sleep(Duration::from_secs(5));
    for server in &dc2 {
        let locator = json_of(server, "/v1/internal/gateway-locator").unwrap();
        assert!(
            !locator["PrimaryGateways"]
                .as_array()
                .unwrap()
                .contains(&third),
            "{locator}"
        );
    }
    let (status, body) = dc2[0]
        .request("PUT", "/v1/kv/cut-off?dc=dc1", "no way")
        .unwrap();
    assert!(status >= 500, "{status} {body}");
    primary_gateways_are(THIRD_GATEWAY_WAN);
    for server in &dc2 {
        eventually(Duration::from_secs(30), || {
            let l = json_of(server, "/v1/internal/gateway-locator")?;
            (l["ConfiguredPrimaryGateways"] == json!([third])).then_some(())
        });
    }
    across(&dc2, "dc1", "stale-federation-states");
    across(&dc1, "dc2", "stale-federation-states");
    // A secondary's gateway restarted at a new address, the old one gone
    // first: the primary follows (the secondary's federation state, sent
    // through the primary's gateways once its own path fails, is fresher).
    drop(gateway2);
    let _new_gateway2 = gateway_at(
        1,
        &dc2[1],
        (NEW_GATEWAY_LAN, NEW_GATEWAY_WAN),
        "mesh-gateway-new",
    );
    across(&dc1, "dc2", "secondary-gateway");
    across(&dc2, "dc1", "secondary-gateway");

    // A server whose certificate is for another datacenter than the one
    // it claims is refused, and both sides say why.
    let rogue_dir = tempfile::tempdir().unwrap();
    let rogue_cert = server_certificate(certs_dir.path(), "dc3", "s4", 0);
    let rogue_address = format!("{}/24", networks.address(1, 3));
    in_ns(
        networks.namespace(1),
        &["addr", "add", &rogue_address, "dev", "eth0"],
    );
    let rogue = Server::spawn_with(
        &networks,
        ServerSpec {
            dc: 1,
            server: 3,
            expect: 1,
            wan_join: None,
            dir: rogue_dir.path(),
        },
        &[
            "-hcl=connect { enabled = true enable_mesh_gateway_wan_federation = true }".to_string(),
            format!("-hcl={rogue_cert}"),
            format!("-primary-gateway={}", wan_of(0, THIRD_GATEWAY_WAN)),
        ],
    );
    eventually_or(
        Duration::from_secs(30),
        || {
            let said = rogue
                .log_tail()
                .contains("its certificate is not valid for s4.server.dc2.consul");
            let heard = dc1.iter().any(|s| {
                s.log_tail()
                    .contains("refused a tunnel connection whose certificate is not for a server of the datacenter it claims")
            });
            (said && heard).then_some(())
        },
        || format!("{}\n{}", rogue.log_tail(), logs_of(&dc1)),
    );
    assert!(wan_members(&dc1[0]).iter().all(|(n, _)| n != "s4.dc2"));
    drop(rogue);

    // A dc2 server killed shows failed in dc1: membership is gossip's,
    // through the gateways, not inferred from RPC.
    let killed = dc2.pop().unwrap();
    drop(killed);
    for server in &dc1 {
        eventually(Duration::from_secs(60), || {
            wan_members(server)
                .iter()
                .any(|(n, s)| n == "s3.dc2" && s == "failed")
                .then_some(())
        });
    }
    // Both datacenters still answer each other and themselves.
    let (status, body) = dc1[2]
        .request("GET", "/v1/kv/across/1/missing?dc=dc2", "")
        .unwrap();
    assert_eq!(status, 404, "{body}");
    let (status, _) = dc2[0].request("PUT", "/v1/kv/local", "still").unwrap();
    assert_eq!(status, 200);
    dc1.clear();
}

/// Registers db in dc2 and web in dc1 (upstream db in dc2, mesh gateway
/// mode `local`) with built-in sidecars, and checks, with dc2's CA signed
/// by the primary and a `service-intentions` entry written in dc1 and
/// replicated into every dc2 server: allowed, bytes go web -> dc1's
/// gateway -> dc2's gateway -> db; denied, they no longer do.
fn web_reaches_db_only_as_the_replicated_intention_says(
    networks: &Networks,
    primary: &Server,
    dc2: &[Server],
    logs: &Path,
) {
    for server in dc2 {
        eventually(Duration::from_secs(60), || {
            let roots = json_of(server, "/v1/connect/ca/roots?stale")?;
            roots["Roots"][0]["IntermediateCerts"][0]
                .as_str()
                .map(|_| ())
        });
    }
    let host = networks.host(1);
    let (db_received, db_port) = echo_server_at(&host);
    let register = |server: &Server, body: Value| {
        let (status, text) = server
            .request("PUT", "/v1/agent/service/register", &body.to_string())
            .unwrap();
        assert_eq!(status, 200, "{text}");
    };
    register(
        &dc2[0],
        json!({"Name": "db", "Port": db_port, "Connect": {"SidecarService": {
            "Address": networks.address(1, SIDECAR), "Port": 21000,
            "Proxy": {"LocalServiceAddress": host, "LocalServicePort": db_port}}}}),
    );
    register(
        primary,
        json!({"Name": "web", "Port": 8080, "Connect": {"SidecarService": {
            "Address": networks.address(0, SIDECAR), "Port": 21000,
            "Proxy": {"MeshGateway": {"Mode": "local"}, "Upstreams": [{
                "DestinationName": "db", "Datacenter": "dc2",
                "LocalBindAddress": primary.address, "LocalBindPort": 19191}]}}}}),
    );
    let sidecar = |dc: usize, server: &Server, service: &str| {
        let args = [
            "connect".to_string(),
            "proxy".into(),
            format!("-sidecar-for={service}"),
            format!("-admin-bind={}:19001", networks.address(dc, SIDECAR)),
            format!("-http-addr={}:8500", server.address),
            format!("-grpc-addr={}:8502", server.address),
        ];
        Proxy(networks.spawn(dc, &args, &logs.join(format!("{service}-sidecar.log"))))
    };
    let _db = sidecar(1, &dc2[0], "db");
    let _web = sidecar(0, primary, "web");
    let intention = |action: &str| {
        let entry = json!({"Kind": "service-intentions", "Name": "db",
            "Sources": [{"Name": "web", "Action": action}]});
        let (status, body) = primary
            .request("PUT", "/v1/config", &entry.to_string())
            .unwrap();
        assert_eq!((status, body.as_str()), (200, "true"));
        for server in dc2 {
            eventually(Duration::from_secs(30), || {
                let stored = json_of(server, "/v1/config/service-intentions/db?stale")?;
                (stored["Sources"][0]["Action"] == action).then_some(())
            });
        }
    };
    let sidecar_logs = || -> String {
        ["web", "db"]
            .iter()
            .map(|s| {
                let text = std::fs::read_to_string(logs.join(format!("{s}-sidecar.log")));
                format!("{s}:\n{}\n", text.unwrap_or_default())
            })
            .collect()
    };
    let through = |line: &str| echo_within(&primary.address, 19191, line, Duration::from_secs(5));
    intention("allow");
    let answer = eventually_or(
        Duration::from_secs(60),
        || through("web to db across\n"),
        sidecar_logs,
    );
    assert_eq!(answer, "web to db across\n");
    assert!(db_received.load(std::sync::atomic::Ordering::SeqCst) > 0);
    intention("deny");
    eventually_or(
        Duration::from_secs(30),
        || through("denied\n").is_none().then_some(()),
        sidecar_logs,
    );
    let received = db_received.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(through("still denied\n"), None);
    assert_eq!(
        db_received.load(std::sync::atomic::Ordering::SeqCst),
        received,
        "nothing reached db once denied"
    );
}
