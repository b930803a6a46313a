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

use std::time::Duration;

use common::datacenters::{Networks, Server, ServerSpec};
use common::eventually;

fn start(networks: &Networks, dc: usize, dir: &std::path::Path, wan_join: Option<&str>) -> Server {
    let spec = ServerSpec {
        dc,
        server: 0,
        expect: 1,
        wan_join,
        dir,
    };
    Server::start(networks, spec)
}

#[test]
fn a_partition_between_datacenters_fails_cross_dc_calls_and_heals() {
    let networks = Networks::new(1);
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let dc1 = start(&networks, 0, dirs[0].path(), None);
    let dc2 = start(&networks, 1, dirs[1].path(), Some(&networks.address(0, 0)));
    eventually(Duration::from_secs(30), || {
        (dc1.wan_status("s1.dc2").as_deref() == Some("alive")).then_some(())
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
        (dc1.wan_status("s1.dc2").as_deref() == Some("failed")).then_some(())
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
    let dc2 = start(&networks, 1, dirs[1].path(), Some(&networks.address(0, 0)));
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
        (dc1.wan_status("s1.dc2").as_deref() == Some("alive")).then_some(())
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
