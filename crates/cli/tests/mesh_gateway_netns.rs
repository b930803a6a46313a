//! Mesh gateways laid out as real networks are: each datacenter in its own
//! network namespace, joined only through a router namespace that
//! refuses to route to any sidecar address or gateway LAN address of the
//! other datacenter. The servers federate over the WAN (classic), only
//! the gateways' WAN addresses are reachable across, so a sidecar in dc1
//! reaches db in dc2 through gateways (`local` and `remote` modes) and not
//! at all in mode `none`. Every process runs in its datacenter's
//! namespace.
//!
//! Needs root (network namespaces), as the CI machine runs tests.

mod common;

use std::time::Duration;

use common::datacenters::{in_ns, Networks, Server, ServerSpec};
use common::eventually;
use common::mesh::{echo_server_at, echo_within, Proxy};
use serde_json::{json, Value};

/// Addresses in a datacenter's subnet, by their place after the servers.
const GATEWAY_LAN: usize = 9; // .20
const GATEWAY_WAN: usize = 10; // .21
const SIDECARS: [usize; 3] = [19, 20, 21]; // .30, .31, .32

/// A line through an upstream listener at `address:port`, patiently.
fn echo_at(address: &str, port: u16, line: &str) -> Option<String> {
    echo_within(address, port, line, Duration::from_secs(5))
}

fn register(server: &Server, body: Value) {
    let (status, text) = server
        .request("PUT", "/v1/agent/service/register", &body.to_string())
        .unwrap();
    assert_eq!(status, 200, "{text}");
}

fn json_of(server: &Server, path: &str) -> Option<Value> {
    let (status, body) = server.request("GET", path, "")?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

/// A counter of a built-in proxy's admin port at `address:port` (0 when
/// absent or unreachable).
fn stat(address: &str, port: u16, name: &str) -> u64 {
    use std::io::{Read, Write};
    let fetch = || -> Option<String> {
        let target: std::net::SocketAddr = format!("{address}:{port}").parse().ok()?;
        let mut s = std::net::TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /stats HTTP/1.1\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        Some(text)
    };
    let text = fetch().unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn only_the_gateways_carry_the_mesh_between_datacenters() {
    let networks = Networks::new(1);
    let router = networks.namespaces[0].clone();
    for dc in 0..2 {
        let ns = networks.namespace(dc).to_string();
        for place in [GATEWAY_LAN, GATEWAY_WAN].into_iter().chain(SIDECARS) {
            let address = format!("{}/24", networks.address(dc, place));
            in_ns(&ns, &["addr", "add", &address, "dev", "eth0"]);
        }
        // Across, only the WAN addresses (servers' and gateways') route.
        for place in [GATEWAY_LAN].into_iter().chain(SIDECARS) {
            let address = format!("{}/32", networks.address(dc, place));
            in_ns(&router, &["route", "add", "prohibit", &address]);
        }
    }
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let primary = networks.address(0, 0);
    let servers: Vec<Server> = (0..2)
        .map(|dc| {
            Server::spawn(
                &networks,
                ServerSpec {
                    dc,
                    server: 0,
                    expect: 1,
                    wan_join: (dc == 1).then_some(primary.as_str()),
                    dir: dirs[dc].path(),
                },
            )
        })
        .collect();
    for s in &servers {
        s.wait_for_leader();
    }
    let (dc1, dc2) = (&servers[0], &servers[1]);
    eventually(Duration::from_secs(30), || {
        let dcs = json_of(dc2, "/v1/catalog/datacenters")?;
        (dcs.as_array()?.len() == 2).then_some(())
    });
    let td = eventually(Duration::from_secs(30), || {
        let roots = json_of(dc2, "/v1/connect/ca/roots?stale")?;
        roots["Roots"][0]["IntermediateCerts"][0].as_str()?;
        Some(roots["TrustDomain"].as_str()?.to_string())
    });
    // db in dc2, its application on the host's leg of dc2's bridge.
    let host = networks.host(1);
    let (db_received, db_port) = echo_server_at(&host);
    let sidecar = |dc: usize, i: usize| networks.address(dc, SIDECARS[i]);
    register(
        dc2,
        json!({"Name": "db", "Port": db_port, "Connect": {"SidecarService": {
            "Address": sidecar(1, 0), "Port": 21000,
            "Proxy": {"LocalServiceAddress": host, "LocalServicePort": db_port}}}}),
    );
    // web (local), api (remote) and ops (none) in dc1, each with an
    // upstream db in dc2 on dc1's server address.
    let modes = [
        ("web", "local", 19191),
        ("api", "remote", 19192),
        ("ops", "none", 19193),
    ];
    for (i, (service, mode, port)) in modes.iter().enumerate() {
        register(
            dc1,
            json!({"Name": service, "Port": 8080, "Connect": {"SidecarService": {
                "Address": sidecar(0, i), "Port": 21000,
                "Proxy": {"MeshGateway": {"Mode": mode}, "Upstreams": [{
                    "DestinationName": "db", "Datacenter": "dc2",
                    "LocalBindAddress": dc1.address, "LocalBindPort": port}]}}}}),
        );
    }
    let logs = tempfile::tempdir().unwrap();
    let spawn = |dc: usize, name: &str, args: Vec<String>| {
        let server = &servers[dc];
        let mut full: Vec<String> = vec!["connect".into(), "proxy".into()];
        full.extend(args);
        full.push(format!("-http-addr={}:8500", server.address));
        full.push(format!("-grpc-addr={}:8502", server.address));
        Proxy(networks.spawn(dc, &full, &logs.path().join(format!("{name}.log"))))
    };
    let admin = |dc: usize, place: usize| (networks.address(dc, place), 19000u16);
    let mut processes = Vec::new();
    for dc in 0..2 {
        let (address, port) = admin(dc, GATEWAY_LAN);
        processes.push(spawn(
            dc,
            &format!("gateway{}", dc + 1),
            vec![
                "-gateway=mesh".into(),
                "-register".into(),
                format!("-address={}:8443", networks.address(dc, GATEWAY_LAN)),
                format!("-wan-address={}:8443", networks.address(dc, GATEWAY_WAN)),
                format!("-admin-bind={address}:{port}"),
            ],
        ));
    }
    processes.push(spawn(
        1,
        "db",
        vec![
            "-sidecar-for=db".into(),
            format!("-admin-bind={}:19001", sidecar(1, 0)),
        ],
    ));
    for (i, (service, _, _)) in modes.iter().enumerate() {
        processes.push(spawn(
            0,
            service,
            vec![
                format!("-sidecar-for={service}"),
                format!("-admin-bind={}:19001", sidecar(0, i)),
            ],
        ));
    }
    let proxy_logs = || {
        std::fs::read_dir(logs.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                format!("{}:\n{text}\n", e.path().display())
            })
            .collect::<String>()
    };
    let dc2_cluster =
        format!("legate_proxy_cluster_connections_total{{cluster=\"dc2.internal.{td}\"}}");
    let db_cluster = format!(
        "legate_proxy_cluster_connections_total{{cluster=\"db.default.dc2.internal.{td}\"}}"
    );
    let (g1, g1_port) = admin(0, GATEWAY_LAN);
    let (g2, g2_port) = admin(1, GATEWAY_LAN);
    // local: web's sidecar -> dc1's gateway -> dc2's gateway -> db.
    let answer = eventually(Duration::from_secs(60), || {
        echo_at(&dc1.address, 19191, "local mode\n")
    });
    assert_eq!(answer, "local mode\n", "{}", proxy_logs());
    assert!(stat(&g1, g1_port, &dc2_cluster) >= 1, "{}", proxy_logs());
    let through_dc2 = stat(&g2, g2_port, &db_cluster);
    assert!(through_dc2 >= 1);
    // remote: api's sidecar -> dc2's gateway (WAN) -> db; dc1's unused.
    let via_dc1 = stat(&g1, g1_port, &dc2_cluster);
    let answer = eventually(Duration::from_secs(60), || {
        echo_at(&dc1.address, 19192, "remote mode\n")
    });
    assert_eq!(answer, "remote mode\n");
    assert_eq!(stat(&g1, g1_port, &dc2_cluster), via_dc1);
    assert!(stat(&g2, g2_port, &db_cluster) > through_dc2);
    // none: ops's sidecar dials db's sidecar directly, which no route
    // reaches from dc1.
    let received = db_received.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..3 {
        assert_eq!(echo_at(&dc1.address, 19193, "no route\n"), None);
    }
    assert_eq!(
        db_received.load(std::sync::atomic::Ordering::SeqCst),
        received,
        "nothing reached db without a gateway"
    );
    drop(processes);
}
