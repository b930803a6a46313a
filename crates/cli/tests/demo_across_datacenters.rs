//! The seed demo across two datacenters, through the binary: web in dc1
//! reaches db through `legate connect proxy` sidecars, with one db in
//! each datacenter. A resolver written in dc1 fails over to dc2 while
//! dc1's db is in maintenance and comes back; a redirect sends every
//! connection to dc2 (dialled at its sidecar's WAN address); an intention written
//! in dc1 is enforced by dc2's sidecar; and an open connection across the
//! datacenters survives a root rotation in dc1.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::mesh::{echo, echo_server, eventually, proxy_stat, start_proxy, Conn, Proxy};
use common::{free_port, DatacenterServer, TestAgent};
use serde_json::Value;

fn server(name: &str, ip: &str, dc: &str, join: Option<&str>) -> DatacenterServer {
    DatacenterServer::with_xds(name, ip, dc, join, &[])
}

fn register(agent: &TestAgent, body: Value) {
    let (status, text) = agent.put("/v1/agent/service/register", &body.to_string());
    assert_eq!(status, 200, "{text}");
}

/// Registers db with its sidecar on `agent`, echoing on a new port. With
/// `wan`, the sidecar listens there only and advertises it as its `wan`
/// tagged address, while its own address is one nobody listens on: only a
/// caller in another datacenter dialling WAN addresses reaches it.
fn register_db(agent: &TestAgent, wan: Option<&str>) -> Arc<AtomicU64> {
    let port = free_port();
    let received = echo_server(port);
    let sidecar_port = free_port();
    let sidecar = match wan {
        None => serde_json::json!({"Port": sidecar_port}),
        Some(wan) => serde_json::json!({
            "Port": sidecar_port,
            "Address": "127.0.0.199",
            "TaggedAddresses": {"wan": {"Address": wan, "Port": sidecar_port}},
            "Proxy": {"Config": {"bind_address": wan}},
            "Checks": [{"Name": "listening", "TCP": format!("{wan}:{sidecar_port}"), "Interval": "1s"}]
        }),
    };
    register(
        agent,
        serde_json::json!({"Name": "db", "Port": port, "Connect": {"SidecarService": sidecar}}),
    );
    received
}

fn put_config(agent: &TestAgent, body: &str) {
    let (status, text) = agent.put("/v1/config", body);
    assert_eq!((status, text.as_str()), (200, "true"), "{body}");
}

/// Echoes a line through the upstream and says which db answered.
fn answered_by(upstream: u16, dbs: [&AtomicU64; 2]) -> Option<usize> {
    let before = dbs.map(|d| d.load(Ordering::SeqCst));
    echo(upstream, "which db?\n")?;
    let after = dbs.map(|d| d.load(Ordering::SeqCst));
    (0..2).find(|&i| after[i] > before[i])
}

#[test]
fn web_in_dc1_reaches_db_in_dc2_by_failover_and_redirect_under_dc1_intentions() {
    let dc1 = server("m1", "127.0.0.191", "dc1", None);
    let dc2 = server("m2", "127.0.0.192", "dc2", Some("127.0.0.191"));
    for s in [&dc1, &dc2] {
        common::eventually(Duration::from_secs(30), || {
            let dcs = s.agent.get("/v1/catalog/datacenters").ok()?;
            (dcs.as_array()?.len() == 2).then_some(())
        });
    }
    let upstream = free_port();
    register(
        &dc1.agent,
        serde_json::json!({
            "Name": "web", "Port": 8080,
            "Connect": {"SidecarService": {"Port": free_port(), "Proxy": {
                "Upstreams": [{"DestinationName": "db", "LocalBindPort": upstream}]}}}
        }),
    );
    let db1 = register_db(&dc1.agent, None);
    let db2 = register_db(&dc2.agent, Some("127.0.0.192"));
    let dbs = [&*db1, &*db2];
    put_config(
        &dc1.agent,
        r#"{"Kind":"service-resolver","Name":"db","ConnectTimeout":"2s","Failover":{"*":{"Datacenters":["dc2"]}}}"#,
    );
    // The chain dc1 compiles reaches dc2's target by its SNI (the sidecar
    // checks dc2's SPIFFE id on the connections below).
    let trust_domain = dc1.agent.get("/v1/connect/ca/roots").unwrap()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    let chain = dc1.agent.get("/v1/discovery-chain/db").unwrap();
    let remote = &chain["Chain"]["Targets"]["db.default.default.dc2"];
    assert_eq!(
        remote["SNI"],
        format!("db.default.dc2.internal.{trust_domain}").as_str(),
        "{chain}"
    );
    assert_eq!(remote["Datacenter"], "dc2");

    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));
    let _web: Proxy = start_proxy(&dc1.agent, "web", &log("web"));
    let _db1: Proxy = start_proxy(&dc1.agent, "db", &log("db1"));
    let _db2: Proxy = start_proxy(&dc2.agent, "db", &log("db2"));
    let logs = || {
        ["web", "db1", "db2"]
            .iter()
            .map(|n| {
                format!(
                    "{n}:\n{}\n",
                    std::fs::read_to_string(log(n)).unwrap_or_default()
                )
            })
            .collect::<String>()
            + &format!(
                "dc1:\n{}\ndc2:\n{}",
                dc1.agent.log_text(),
                dc2.agent.log_text()
            )
    };
    let within = Duration::from_secs(30);

    // While dc1's db is healthy, dc1 answers.
    eventually("echo from dc1's db", within, &logs, || {
        answered_by(upstream, dbs) == Some(0)
    });
    // dc1's db in maintenance: traffic fails over to dc2; and back.
    let (status, _) = dc1.agent.put(
        "/v1/agent/service/maintenance/db?enable=true&reason=test",
        "",
    );
    assert_eq!(status, 200);
    eventually("failover to dc2's db", within, &logs, || {
        answered_by(upstream, dbs) == Some(1)
    });
    let (status, _) = dc1
        .agent
        .put("/v1/agent/service/maintenance/db?enable=false", "");
    assert_eq!(status, 200);
    eventually("back to dc1's db", within, &logs, || {
        answered_by(upstream, dbs) == Some(0)
    });

    // A redirect to dc2: every connection goes there though dc1's db is healthy.
    put_config(
        &dc1.agent,
        r#"{"Kind":"service-resolver","Name":"db","Redirect":{"Datacenter":"dc2"}}"#,
    );
    eventually("the redirect to dc2", within, &logs, || {
        answered_by(upstream, dbs) == Some(1)
    });
    for _ in 0..5 {
        assert_eq!(answered_by(upstream, dbs), Some(1), "{}", logs());
    }

    // An intention written in dc1 is enforced by dc2's sidecar.
    let mut open = Conn::open(upstream);
    assert!(open.echo("before the deny\n"));
    let out = dc1
        .agent
        .cli(&["intention", "create", "-deny", "web", "db"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("dc2 denies web", within, &logs, || {
        echo(upstream, "probe\n").is_none()
    });
    let before = db2.load(Ordering::SeqCst);
    assert!(echo(upstream, "denied\n").is_none());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        db2.load(Ordering::SeqCst),
        before,
        "nothing reaches dc2's db"
    );
    assert!(proxy_stat(&log("db2"), "legate_proxy_rbac_denials_total") >= 2);
    let out = dc1.agent.cli(&["intention", "delete", "web", "db"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("dc2 allows web again", within, &logs, || {
        answered_by(upstream, dbs) == Some(1)
    });

    // A root rotation in dc1: dc2's intermediate is re-signed by the new
    // root, the open connection across the datacenters keeps working, and
    // new ones are made with the new certificates.
    let mut open = Conn::open(upstream);
    assert!(open.echo("before the rotation\n"), "{}", logs());
    let old_root = dc1.agent.get("/v1/connect/ca/roots").unwrap()["ActiveRootID"].clone();
    let (status, text) = dc1.agent.put(
        "/v1/connect/ca/configuration",
        r#"{"Provider":"consul","Config":{"PrivateKeyType":"rsa"}}"#,
    );
    assert_eq!(status, 200, "{text}");
    let new_root = dc1.agent.get("/v1/connect/ca/roots").unwrap()["ActiveRootID"].clone();
    assert_ne!(old_root, new_root);
    common::eventually(within, || {
        let roots = dc2.agent.get("/v1/connect/ca/roots?stale").ok()?;
        (roots["ActiveRootID"] == new_root).then_some(())
    });
    assert!(open.echo("after the rotation\n"), "{}", logs());
    eventually("new connections after the rotation", within, &logs, || {
        answered_by(upstream, dbs) == Some(1)
    });
    // dc2's sidecar now presents a leaf under the new root's intermediate.
    eventually("dc2's leaf re-issued", within, &logs, || {
        let leaf = dc2.agent.get("/v1/agent/connect/ca/leaf/db").unwrap();
        let roots = dc2.agent.get("/v1/connect/ca/roots?stale").unwrap();
        let active = roots["Roots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["Active"] == true)
            .cloned()
            .unwrap();
        let intermediate = active["IntermediateCerts"][0].as_str().unwrap_or("");
        !intermediate.is_empty()
            && leaf["CertPEM"]
                .as_str()
                .is_some_and(|pem| pem.contains(intermediate.trim()))
    });
    assert!(open.echo("still open\n"), "{}", logs());
}
