//! WAN federation through mesh gateways with ACLs on (`default_policy =
//! "deny"`), in the order Consul documents for it: the primary and its
//! gateway first; then the secondary's servers, which reach the primary
//! through its gateways for the ACL data they do not hold (Legate's
//! secondaries resolve tokens in the primary; replicating them is a later
//! issue's); and only then the secondary's gateway, registered with a
//! token written in the primary. Each datacenter's server in its own
//! network namespace, the router refusing server-to-server traffic across:
//! only the gateways bridge them.
//!
//! Needs root (network namespaces), as the CI machine runs tests.

mod common;

use std::time::Duration;

use common::datacenters::{in_ns, Networks, Server, ServerSpec};
use common::mesh::Proxy;
use common::wanfed::{certificates, json_as, wan_members_as};
use common::{eventually, eventually_or};
use serde_json::Value;

const ROOT: &str = "3c0ffee5-7a1d-4e2b-9f3c-5d6e7f809a1b";
const GATEWAY_LAN: usize = 9; // .20
const GATEWAY_WAN: usize = 10; // .21
/// What a mesh gateway's token needs (Consul's advice): write on its own
/// name, read on every service and node.
const GATEWAY_RULES: &str = "service \"mesh-gateway\" { policy = \"write\" } service_prefix \"\" { policy = \"read\" } node_prefix \"\" { policy = \"read\" }";

/// What a secondary's replication token needs (Consul's advice).
const REPLICATION_RULES: &str = "acl = \"write\" operator = \"write\" service_prefix \"\" { policy = \"read\" intentions = \"read\" }";

/// A policy with `rules` and a token holding it, written through
/// `server` with the management token; the token's secret.
fn token_with(server: &Server, name: &str, rules: &str) -> String {
    let policy = serde_json::json!({"Name": name, "Rules": rules});
    let (status, body) = server
        .request_as(ROOT, "PUT", "/v1/acl/policy", &policy.to_string())
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let token = serde_json::json!({"Description": name, "Policies": [{"Name": name}]});
    let (status, body) = server
        .request_as(ROOT, "PUT", "/v1/acl/token", &token.to_string())
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let token: Value = serde_json::from_str(&body).unwrap();
    token["SecretID"].as_str().unwrap().to_string()
}

#[test]
fn with_acls_the_secondary_resolves_through_the_primarys_gateways_before_its_own_registers() {
    let networks = Networks::new(1);
    let router = networks.namespaces[0].clone();
    for dc in 0..2 {
        for place in [GATEWAY_LAN, GATEWAY_WAN] {
            let address = format!("{}/24", networks.address(dc, place));
            in_ns(
                networks.namespace(dc),
                &["addr", "add", &address, "dev", "eth0"],
            );
        }
        let lan = format!("{}/32", networks.address(dc, GATEWAY_LAN));
        in_ns(&router, &["route", "add", "prohibit", &lan]);
    }
    for (from, to) in [(0, 1), (1, 0)] {
        let (from, to) = (networks.address(from, 0), networks.address(to, 0));
        in_ns(
            &router,
            &["rule", "add", "from", &from, "to", &to, "prohibit"],
        );
    }
    let certs_dir = tempfile::tempdir().unwrap();
    let tls = certificates(certs_dir.path(), 1);
    let gateway_wan = |dc: usize| format!("{}:8443", networks.address(dc, GATEWAY_WAN));
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let start_server = |dc: usize, replication: &str| {
        // The primary bootstraps the ACL system; the secondary's own calls
        // to it carry a replication token written there first. Both use
        // the management token as their agent token.
        let bootstrap = if dc == 0 {
            format!("initial_management = \"{ROOT}\"")
        } else {
            format!("replication = \"{replication}\"")
        };
        let mut extra = vec![
            "-hcl=connect { enabled = true enable_mesh_gateway_wan_federation = true }".to_string(),
            format!("-hcl={}", tls[dc][0]),
            format!("-hcl=acl {{ enabled = true default_policy = \"deny\" tokens {{ {bootstrap} agent = \"{ROOT}\" }} }}"),
        ];
        if dc == 1 {
            extra.push(format!("-primary-gateway={}", gateway_wan(0)));
        }
        let spec = ServerSpec {
            dc,
            server: 0,
            expect: 1,
            wan_join: None,
            dir: dirs[dc].path(),
        };
        Server::spawn_with(&networks, spec, &extra)
    };
    let logs = tempfile::tempdir().unwrap();
    let gateway = |dc: usize, server: &Server, token: &str| {
        let lan = networks.address(dc, GATEWAY_LAN);
        let args = [
            "connect".to_string(),
            "proxy".into(),
            "-gateway=mesh".into(),
            "-register".into(),
            "-expose-servers".into(),
            format!("-address={lan}:8443"),
            format!("-wan-address={}", gateway_wan(dc)),
            format!("-admin-bind={lan}:19000"),
            format!("-http-addr={}:8500", server.address),
            format!("-grpc-addr={}:8502", server.address),
            format!("-token={token}"),
        ];
        let log = logs.path().join(format!("gateway-dc{}.log", dc + 1));
        Proxy(networks.spawn(dc, &args, &log))
    };
    let gateway_log = |dc: usize| {
        std::fs::read_to_string(logs.path().join(format!("gateway-dc{dc}.log"))).unwrap_or_default()
    };

    // The primary, and its gateway with a token of its own.
    let dc1 = start_server(0, "");
    dc1.wait_for_leader();
    eventually(Duration::from_secs(30), || {
        let (status, _) = dc1.request_as(ROOT, "GET", "/v1/acl/token/self", "")?;
        (status == 200).then_some(())
    });
    let _gateway1 = gateway(0, &dc1, &token_with(&dc1, "gateway-dc1", GATEWAY_RULES));

    // The secondary's servers, before any gateway of their own, with a
    // replication token written in the primary.
    let replication = token_with(&dc1, "replication", REPLICATION_RULES);
    let dc2 = start_server(1, &replication);
    dc2.wait_for_leader();
    // The secondary's gateway token is written in the primary, and the
    // secondary resolves it through the primary's gateway.
    let token2 = token_with(&dc1, "gateway-dc2", GATEWAY_RULES);
    let catalog = "/v1/catalog/services";
    eventually_or(
        Duration::from_secs(60),
        || json_as(&dc2, &token2, catalog),
        || {
            let answer = dc2.request_as(&token2, "GET", catalog, "");
            format!("{answer:?}\n{}\n{}", dc2.log_tail(), gateway_log(1))
        },
    );
    let unknown = "00000000-0000-4000-8000-000000000000";
    let (status, body) = dc2.request_as(unknown, "GET", catalog, "").unwrap();
    assert_eq!((status, body.as_str()), (403, "ACL not found"));
    // With the replication token, the secondary's intermediate CA is
    // signed by the primary and the primary's config entries replicate,
    // all through the primary's gateway.
    let entry = r#"{"Kind":"service-defaults","Name":"db","Protocol":"tcp"}"#;
    let (status, body) = dc1.request_as(ROOT, "PUT", "/v1/config", entry).unwrap();
    assert_eq!((status, body.as_str()), (200, "true"));
    eventually_or(
        Duration::from_secs(60),
        || {
            let roots = json_as(&dc2, ROOT, "/v1/connect/ca/roots?stale")?;
            roots["Roots"][0]["IntermediateCerts"][0].as_str()?;
            let db = json_as(&dc2, ROOT, "/v1/config/service-defaults/db?stale")?;
            (db["Protocol"] == "tcp").then_some(())
        },
        || dc2.log_tail(),
    );
    // Nothing of dc2's own is registered yet: no mesh gateway in dc2.
    let before = json_as(&dc2, ROOT, "/v1/catalog/service/mesh-gateway").unwrap();
    assert_eq!(before, Value::Array(Vec::new()));

    // Only now the secondary's gateway, registered with that token.
    let _gateway2 = gateway(1, &dc2, &token2);
    eventually_or(
        Duration::from_secs(30),
        || {
            let registered = json_as(&dc2, ROOT, "/v1/catalog/service/mesh-gateway")?;
            (registered.as_array()?.len() == 1).then_some(())
        },
        || format!("{}\n{}", dc2.log_tail(), gateway_log(2)),
    );
    // A token the primary never wrote registers nothing.
    let intruder = serde_json::json!({"Kind": "mesh-gateway", "Name": "mesh-gateway", "ID": "rogue", "Port": 9443});
    let (status, _) = dc2
        .request_as(
            "11111111-2222-4333-8444-555555555555",
            "PUT",
            "/v1/agent/service/register",
            &intruder.to_string(),
        )
        .unwrap();
    assert_eq!(status, 403);

    // Federated through the gateways, with ACLs enforced on both sides.
    let everyone = vec![
        ("s1.dc1".to_string(), "alive".to_string()),
        ("s1.dc2".to_string(), "alive".to_string()),
    ];
    for server in [&dc1, &dc2] {
        eventually_or(
            Duration::from_secs(60),
            || (wan_members_as(server, ROOT) == everyone).then_some(()),
            || server.log_tail(),
        );
    }
    for (from, to) in [(&dc1, "dc2"), (&dc2, "dc1")] {
        let path = format!("/v1/kv/with-acls?dc={to}");
        eventually_or(
            Duration::from_secs(60),
            || {
                let (status, _) = from.request_as(ROOT, "PUT", &path, "through the gateways")?;
                (status == 200).then_some(())
            },
            || {
                let answer = from.request_as(ROOT, "PUT", &path, "through the gateways");
                let fs = json_as(
                    &dc1,
                    ROOT,
                    "/v1/internal/federation-states/mesh-gateways?stale",
                )
                .and_then(|f| f.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()));
                let locator = json_as(&dc1, ROOT, "/v1/internal/gateway-locator");
                format!(
                    "{path}: {answer:?}\n{fs:?}\n{locator:?}\n{}\n{}\n{}",
                    dc1.log_tail(),
                    dc2.log_tail(),
                    gateway_log(1)
                )
            },
        );
        let (status, body) = from.request_as("", "GET", &path, "").unwrap();
        assert_eq!(status, 403, "{body}");
    }
    for server in [&dc1, &dc2] {
        eventually(Duration::from_secs(60), || {
            let gateways = json_as(
                server,
                ROOT,
                "/v1/internal/federation-states/mesh-gateways?stale",
            )?;
            ["dc1", "dc2"]
                .iter()
                .all(|dc| gateways[dc].as_array().is_some_and(|g| !g.is_empty()))
                .then_some(())
        });
    }
}
