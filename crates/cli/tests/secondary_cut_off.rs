//! A secondary datacenter cut off from its primary keeps its mesh going,
//! with three servers in each datacenter, each datacenter in its own
//! network namespace: a resolver written in dc1 is read from every dc2
//! server with `?stale` while dc1 is unreachable, dc2 keeps issuing leaves
//! under its own intermediate, and sidecars started in dc2 only after the
//! cut get their chain from the replicated resolver (traffic reaches only
//! the subset it names).
//!
//! Needs root (network namespaces), as the CI machine runs tests.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::certs::{certs, openssl_verify, openssl_x509};
use common::datacenters::{Networks, Server, ServerSpec};
use common::eventually;
use common::mesh::{echo_at, echo_server_at, Proxy};
use serde_json::Value;

const SERVERS: usize = 3;

/// Every server of both datacenters, each datacenter's leader elected.
fn start_datacenters(networks: &Networks, dirs: &[tempfile::TempDir]) -> [Vec<Server>; 2] {
    let primary_seed = networks.address(0, 0);
    let mut started: [Vec<Server>; 2] = [Vec::new(), Vec::new()];
    for (dc, servers) in started.iter_mut().enumerate() {
        for server in 0..SERVERS {
            let spec = ServerSpec {
                dc,
                server,
                expect: SERVERS,
                wan_join: (dc == 1).then_some(primary_seed.as_str()),
                dir: dirs[dc * SERVERS + server].path(),
            };
            servers.push(Server::spawn(networks, spec));
        }
    }
    for server in started.iter().flatten() {
        server.wait_for_leader();
    }
    started
}

fn json(server: &Server, path: &str) -> Option<Value> {
    let (status, body) = server.request("GET", path, "")?;
    if status != 200 {
        return None;
    }
    serde_json::from_str(&body).ok()
}

fn register(server: &Server, body: Value) {
    let (status, text) = server
        .request("PUT", "/v1/agent/service/register", &body.to_string())
        .unwrap();
    assert_eq!(status, 200, "{text}");
}

#[test]
fn a_cut_off_secondary_serves_replicated_chains_and_issues_leaves() {
    let networks = Networks::new(SERVERS);
    let dirs: Vec<tempfile::TempDir> = (0..2 * SERVERS)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let [dc1, dc2] = start_datacenters(&networks, &dirs);
    let tails = || {
        dc1.iter()
            .chain(&dc2)
            .map(|s| format!("{}:\n{}\n", s.address, s.log_tail()))
            .collect::<String>()
    };
    // Federated, and dc2 signing with its own intermediate.
    for server in &dc2 {
        eventually(Duration::from_secs(30), || {
            let dcs = json(server, "/v1/catalog/datacenters")?;
            (dcs.as_array()?.len() == 2).then_some(())
        });
    }
    let primary_roots = eventually(Duration::from_secs(10), || {
        json(&dc1[0], "/v1/connect/ca/roots").filter(|r| r["Roots"][0].is_object())
    });
    let root_pem = primary_roots["Roots"][0]["RootCert"]
        .as_str()
        .unwrap()
        .to_string();
    let trust_domain = primary_roots["TrustDomain"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(30), || {
        let roots = json(&dc2[1], "/v1/connect/ca/roots?stale")?;
        (roots["TrustDomain"] == trust_domain.as_str()
            && roots["Roots"][0]["IntermediateCerts"][0].is_string())
        .then_some(())
    });

    // A resolver written in the primary: db is its v2 subset.
    let resolver = r#"{"Kind":"service-resolver","Name":"db","DefaultSubset":"v2","Subsets":{"v1":{"Filter":"Service.Meta.version == v1"},"v2":{"Filter":"Service.Meta.version == v2"}}}"#;
    assert_eq!(
        dc1[0].request("PUT", "/v1/config", resolver),
        Some((200, "true".into()))
    );
    for server in &dc2 {
        eventually(Duration::from_secs(10), || {
            json(server, "/v1/config/service-resolver/db?stale").map(|_| ())
        });
    }

    // Cut: dc2 can no longer reach dc1.
    networks.set_linked(false);
    eventually(Duration::from_secs(20), || {
        let (status, body) = dc2[0].request("GET", "/v1/kv/x?dc=dc1", "")?;
        (status == 500 && body == "Remote DC has no server currently reachable").then_some(())
    });
    // Every dc2 server still serves the replicated copy.
    for server in &dc2 {
        let entry = json(server, "/v1/config/service-resolver/db?stale")
            .unwrap_or_else(|| panic!("{}", tails()));
        assert_eq!(entry["DefaultSubset"], "v2");
    }
    // dc2 issues a leaf for a service it never saw: dc2's SPIFFE id, under
    // dc2's intermediate, verified against dc1's root.
    let leaf =
        json(&dc2[2], "/v1/agent/connect/ca/leaf/fresh").unwrap_or_else(|| panic!("{}", tails()));
    let chain = certs(leaf["CertPEM"].as_str().unwrap());
    let sans = openssl_x509(&chain[0], &["-ext", "subjectAltName"]);
    assert!(
        sans.contains(&format!(
            "spiffe://{trust_domain}/ns/default/dc/dc2/svc/fresh"
        )),
        "{sans}"
    );
    let verified = openssl_verify(&root_pem, &chain[1..], &chain[0]);
    assert!(verified.contains(": OK"), "{verified}");

    // Sidecars registered and started in dc2 only now: web2 -> db, with
    // a v1 and a v2 instance whose applications run on the host.
    let host = networks.host(1);
    // On the host's address on dc2's bridge: ports the system picks there.
    let (v1, v1_port) = echo_server_at(&host);
    let (v2, v2_port) = echo_server_at(&host);
    let agent = &dc2[0];
    let upstream = 19191;
    register(
        agent,
        serde_json::json!({
            "Name": "web2", "Port": 8080,
            "Connect": {"SidecarService": {"Port": 21000, "Proxy": {"Upstreams": [
                {"DestinationName": "db", "LocalBindAddress": agent.address, "LocalBindPort": upstream}]}}}
        }),
    );
    for (version, port, sidecar) in [("v1", v1_port, 21001), ("v2", v2_port, 21002)] {
        register(
            agent,
            serde_json::json!({
                "ID": format!("db-{version}"), "Name": "db", "Port": port,
                "Meta": {"version": version},
                "Connect": {"SidecarService": {"Port": sidecar, "Proxy": {
                    "LocalServiceAddress": host, "LocalServicePort": port}}}
            }),
        );
    }
    let logs = tempfile::tempdir().unwrap();
    let _proxies: Vec<Proxy> = ["web2", "db-v1", "db-v2"]
        .iter()
        .map(|service| {
            let args: Vec<String> = vec![
                "connect".into(),
                "proxy".into(),
                "-sidecar-for".into(),
                service.to_string(),
                format!("-http-addr={}:8500", agent.address),
                format!("-grpc-addr={}:8502", agent.address),
            ];
            Proxy(networks.spawn(1, &args, &logs.path().join(format!("{service}.log"))))
        })
        .collect();
    let proxy_logs = || {
        ["web2", "db-v1", "db-v2"]
            .iter()
            .map(|s| {
                let text = std::fs::read_to_string(logs.path().join(format!("{s}.log")));
                format!("{s}:\n{}\n", text.unwrap_or_default())
            })
            .collect::<String>()
    };
    let echoed = eventually(Duration::from_secs(30), || {
        echo_at(&agent.address, upstream, "through dc2\n")
    });
    assert_eq!(echoed, "through dc2\n", "{}", proxy_logs());
    for _ in 0..10 {
        assert_eq!(
            echo_at(&agent.address, upstream, "again\n").as_deref(),
            Some("again\n"),
            "{}",
            proxy_logs()
        );
    }
    assert!(v2.load(Ordering::SeqCst) > 0);
    assert_eq!(
        v1.load(Ordering::SeqCst),
        0,
        "the replicated resolver sends db to v2 only"
    );
    // Still cut off all along.
    let (status, _) = dc2[1].request("GET", "/v1/kv/x?dc=dc1", "").unwrap();
    assert_eq!(status, 500, "{}", tails());
}
