//! Replication from the primary into a secondary, through the binary with
//! each server on its own loopback address: a kind the secondary claims
//! not to understand never reaches it while the rest does, and an entry
//! it cannot validate without that kind is skipped and logged; intentions stay
//! read only in a three-server secondary while one of its servers lacks
//! them as config entries, then replicate as soon as that server is
//! upgraded (the leader's blocked read starts over); and the federation
//! state of a datacenter that left the WAN pool is pruned.

mod common;

use std::time::Duration;

use common::eventually;
use serde_json::Value;

type Server = common::DatacenterServer;

fn server(name: &str, ip: &str, dc: &str, join: Option<&str>, env: &[(&str, &str)]) -> Server {
    Server::start(name, ip, dc, join, env)
}

fn federated(a: &Server, b: &Server) {
    for s in [a, b] {
        eventually(Duration::from_secs(30), || {
            let dcs = s.agent.get("/v1/catalog/datacenters").ok()?;
            (dcs.as_array()?.len() == 2).then_some(())
        });
    }
}

fn entry(s: &Server, kind: &str, name: &str) -> Option<Value> {
    s.agent.get(&format!("/v1/config/{kind}/{name}?stale")).ok()
}

#[test]
fn a_kind_the_secondary_does_not_understand_never_reaches_it() {
    let dc1 = server("r1", "127.0.0.151", "dc1", None, &[]);
    let dc2 = server(
        "r2",
        "127.0.0.152",
        "dc2",
        Some("127.0.0.151"),
        &[("LEGATE_MASKED_KINDS", "service-splitter,proxy-defaults")],
    );
    federated(&dc1, &dc2);
    for body in [
        r#"{"Kind":"service-defaults","Name":"web","Protocol":"http"}"#,
        r#"{"Kind":"service-splitter","Name":"web","Splits":[{"Weight":100}]}"#,
        r#"{"Kind":"service-resolver","Name":"web","ConnectTimeout":"7s"}"#,
        // api is HTTP only by proxy-defaults, which dc2 does not take: its
        // router fails dc2's validation.
        r#"{"Kind":"proxy-defaults","Name":"global","Config":{"protocol":"http"}}"#,
        r#"{"Kind":"service-router","Name":"api","Routes":[{"Match":{"HTTP":{"PathPrefix":"/v2"}},"Destination":{"Service":"api-v2"}}]}"#,
    ] {
        let (status, text) = dc1.agent.put("/v1/config", body);
        assert_eq!((status, text.as_str()), (200, "true"), "{body}");
    }
    let resolver = eventually(Duration::from_secs(10), || {
        entry(&dc2, "service-resolver", "web")
    });
    assert_eq!(resolver["ConnectTimeout"], "7s");
    assert_eq!(
        entry(&dc2, "service-defaults", "web").unwrap()["Protocol"],
        "http"
    );
    // The splitter was written in the same burst; it is not coming.
    std::thread::sleep(Duration::from_secs(2));
    let (status, _, _) = dc2
        .agent
        .request("GET", "/v1/config/service-splitter/web?stale", None);
    assert_eq!(status, 404, "{}", dc2.agent.log_text());
    // The entry dc2 cannot validate is skipped and said so; the rest applied.
    let (status, _, _) = dc2
        .agent
        .request("GET", "/v1/config/service-router/api?stale", None);
    assert_eq!(status, 404);
    let log = dc2.agent.log_text();
    assert!(
        log.contains("skipping a config entry this datacenter cannot validate")
            && log.contains("service-router/api"),
        "{log}"
    );
    // The primary still has it, and a later change of another kind still flows.
    assert!(entry(&dc1, "service-splitter", "web").is_some());
    let (status, _) = dc1.agent.put(
        "/v1/config",
        r#"{"Kind":"service-resolver","Name":"web","ConnectTimeout":"9s"}"#,
    );
    assert_eq!(status, 200);
    eventually(Duration::from_secs(10), || {
        (entry(&dc2, "service-resolver", "web")?["ConnectTimeout"] == "9s").then_some(())
    });
    // Deleting in the primary deletes in the secondary.
    let (status, _, _) = dc1
        .agent
        .request("DELETE", "/v1/config/service-resolver/web", None);
    assert_eq!(status, 200);
    eventually(Duration::from_secs(10), || {
        entry(&dc2, "service-resolver", "web")
            .is_none()
            .then_some(())
    });
}

#[test]
fn intentions_stay_read_only_in_a_secondary_until_both_datacenters_support_them() {
    let dc1 = server("i1", "127.0.0.161", "dc1", None, &[]);
    // dc2: three servers, one of them without intentions as config entries.
    let three = |name: &str, ip: &str, env: &[(&str, &str)]| {
        let mut extra = vec!["-bootstrap-expect=3".to_string()];
        if ip != "127.0.0.162" {
            extra.push("-retry-join=127.0.0.162".into());
        }
        Server::launch(name, ip, "dc2", Some("127.0.0.161"), env, &extra)
    };
    let dc2 = three("i2", "127.0.0.162", &[]);
    let _dc2b = three("i3", "127.0.0.163", &[]);
    let mut dc2c = three("i4", "127.0.0.164", &[("LEGATE_MASKED_FEATURES", "si")]);
    for s in [&dc2, &_dc2b, &dc2c] {
        s.agent.wait_ready();
    }
    federated(&dc1, &dc2);
    // The primary's own servers all support them: it takes intentions.
    let (status, body) = dc1.agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        r#"{"Action":"allow"}"#,
    );
    assert_eq!(status, 200, "{body}");
    // One secondary server lacks them: read only, with Consul's text,
    // and the intentions kind is not replicated to it.
    let (status, body) = dc2.agent.put(
        "/v1/connect/intentions/exact?source=api&destination=db",
        r#"{"Action":"deny"}"#,
    );
    assert_eq!(
        (status, body.as_str()),
        (
            500,
            "Intentions are read only while being upgraded to config entries"
        )
    );
    let (status, body) = dc2.agent.put(
        "/v1/config",
        r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"api","Action":"deny"}]}"#,
    );
    assert_eq!(status, 500, "{body}");
    std::thread::sleep(Duration::from_secs(2));
    let (status, _, _) = dc2
        .agent
        .request("GET", "/v1/config/service-intentions/db?stale", None);
    assert_eq!(status, 404);

    // Upgraded: the same server without the mask.
    dc2c.restart(&[]);
    let replicated = eventually(Duration::from_secs(30), || {
        entry(&dc2, "service-intentions", "db")
    });
    assert_eq!(replicated["Sources"][0]["Name"], "web");
    let (status, body) = eventually(Duration::from_secs(10), || {
        let (status, body) = dc2.agent.put(
            "/v1/connect/intentions/exact?source=api&destination=db",
            r#"{"Action":"deny"}"#,
        );
        (status == 200).then_some((status, body))
    });
    assert_eq!((status, body.as_str()), (200, "true"));
    // Written via dc2, stored in the primary, and back in dc2 by replication.
    let stored = dc1
        .agent
        .get("/v1/connect/intentions/exact?source=api&destination=db")
        .unwrap();
    assert_eq!(stored["Action"], "deny");
    eventually(Duration::from_secs(10), || {
        let sources = entry(&dc2, "service-intentions", "db")?["Sources"].clone();
        (sources.as_array()?.len() == 2).then_some(())
    });
    // dc2's sidecars decide by the replicated copy.
    let check = dc2
        .agent
        .get("/v1/connect/intentions/check?source=api&destination=db&stale")
        .unwrap();
    assert_eq!(check["Allowed"], false);
}

#[test]
fn federation_states_of_both_datacenters_are_everywhere_and_a_vanished_one_is_pruned() {
    let prune = [("LEGATE_TEST_FEDERATION_STATE_PRUNE", "2s")];
    let dc1 = server("f1", "127.0.0.171", "dc1", None, &prune);
    let mut dc2 = server("f2", "127.0.0.172", "dc2", Some("127.0.0.171"), &[]);
    federated(&dc1, &dc2);
    // A gateway in dc2 reaches dc2's state in the primary, and back.
    let (status, body) = dc2.agent.put(
        "/v1/agent/service/register",
        r#"{"Kind":"mesh-gateway","Name":"mesh-gateway","Port":4432,
            "TaggedAddresses":{"wan":{"Address":"198.51.100.7","Port":4432}}}"#,
    );
    assert_eq!(status, 200, "{body}");
    for s in [&dc1, &dc2] {
        let gateways = eventually(Duration::from_secs(15), || {
            let all = s
                .agent
                .get("/v1/internal/federation-states/mesh-gateways")
                .ok()?;
            all.get("dc2").cloned()
        });
        assert_eq!(gateways[0]["Service"]["Kind"], "mesh-gateway");
        assert_eq!(
            gateways[0]["Service"]["TaggedAddresses"]["wan"]["Address"],
            "198.51.100.7"
        );
        let states = s.agent.get("/v1/internal/federation-states").unwrap();
        let names: Vec<&str> = states
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["Datacenter"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dc1", "dc2"]);
    }
    let own = dc2.agent.get("/v1/internal/federation-state/dc2").unwrap();
    assert_eq!(own["State"]["Datacenter"], "dc2");
    assert!(own["State"]["PrimaryModifyIndex"].as_u64().unwrap() > 0);
    assert!(own["Index"].as_u64().unwrap() > 0);
    // Consul's empty forms.
    let (status, _, body) = dc2
        .agent
        .request("GET", "/v1/internal/federation-state/dc9", None);
    assert_eq!((status, body.as_str()), (404, ""));
    let (status, _, body) = dc2
        .agent
        .request("GET", "/v1/internal/federation-state/", None);
    assert_eq!((status, body.as_str()), (400, "Missing datacenter name"));
    assert_eq!(
        dc1.agent
            .get("/v1/internal/federation-states/mesh-gateways?dc=dc1")
            .unwrap()
            .as_object()
            .unwrap()
            .len(),
        1,
        "dc1 has no gateway"
    );

    // dc2 leaves the WAN pool for good: the primary prunes its state.
    let out = dc2.agent.cli(&["leave"]);
    assert!(out.status.success());
    let _ = dc2.agent.child.wait();
    eventually(Duration::from_secs(30), || {
        let states = dc1.agent.get("/v1/internal/federation-states").ok()?;
        (states.as_array()?.len() == 1).then_some(())
    });
    let (status, _, _) = dc1
        .agent
        .request("GET", "/v1/internal/federation-state/dc2", None);
    assert_eq!(status, 404);
}
