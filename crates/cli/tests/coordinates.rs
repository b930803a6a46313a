//! Network coordinates through the binary, with known round trips (this
//! machine cannot shape loopback latency): nodes' coordinates are put with
//! `PUT /v1/coordinate/update`, written by the leader in its next batch,
//! read back (blocking, `X-Consul-Index`), and used by `legate rtt` and by
//! `?near=` sorting on catalog and health reads.

mod common;

use std::time::Duration;

use common::{eventually, TestAgent};
use serde_json::{json, Value};

/// A coordinate on the first axis at `x` seconds (heights at the minimum).
fn at(x: f64) -> Value {
    json!({"Vec": [x, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "Error": 0.2, "Adjustment": 0.0, "Height": 0.00001})
}

fn register(agent: &TestAgent, node: &str, address: &str) {
    let body = json!({
        "Node": node, "Address": address,
        "Service": {"Service": "db", "Port": 5432},
    });
    let (status, text) = agent.put("/v1/catalog/register", &body.to_string());
    assert_eq!(status, 200, "{text}");
}

fn names(rows: &Value, pick: impl Fn(&Value) -> &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| pick(r).as_str().unwrap().to_string())
        .collect()
}

#[test]
fn known_round_trips_give_rtt_and_near_orders() {
    let agent = TestAgent::dev(&["-node", "self-node"]);
    // Three nodes on a line: far (40 ms from here), mid (10 ms), near (2 ms).
    register(&agent, "far", "10.0.0.40");
    register(&agent, "mid", "10.0.0.10");
    register(&agent, "near", "127.0.0.1");
    let (_, headers, _) = agent.request("GET", "/v1/coordinate/nodes", None);
    let before: u64 = common::header(&headers, "x-consul-index")
        .unwrap()
        .parse()
        .unwrap();
    for (node, x) in [
        ("self-node", 0.0),
        ("far", 0.040),
        ("mid", 0.010),
        ("near", 0.002),
    ] {
        let body = json!({"Node": node, "Segment": "", "Coord": at(x)});
        let (status, text) = agent.put("/v1/coordinate/update", &body.to_string());
        assert_eq!(status, 200, "{text}");
    }
    // A blocking read returns once the leader wrote its batch.
    let (status, headers, body) = agent.request(
        "GET",
        &format!("/v1/coordinate/nodes?index={before}&wait=20s"),
        None,
    );
    assert_eq!(status, 200);
    let index: u64 = common::header(&headers, "x-consul-index")
        .unwrap()
        .parse()
        .unwrap();
    assert!(index > before, "{index} <= {before}");
    let rows: Value = serde_json::from_str(&body).unwrap();
    let rows = if rows.as_array().unwrap().len() == 4 {
        rows
    } else {
        eventually(Duration::from_secs(10), || {
            let rows = agent.get("/v1/coordinate/nodes").ok()?;
            (rows.as_array()?.len() == 4).then_some(rows)
        })
    };
    let far = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["Node"] == "far")
        .unwrap();
    assert_eq!(far["Segment"], "");
    assert_eq!(far["Coord"]["Vec"][0], 0.040);
    let one = agent.get("/v1/coordinate/node/mid").unwrap();
    assert_eq!(one[0]["Coord"]["Vec"][0], 0.010);

    // rtt: the distance plus both heights (10 µs each).
    let out = agent.cli(&["rtt", "far", "mid"]);
    assert_eq!(
        common::expect_success(&out),
        "Estimated far <-> mid rtt: 30.020 ms (using LAN coordinates)"
    );
    let out = agent.cli(&["rtt", "near"]);
    assert_eq!(
        common::expect_success(&out),
        "Estimated near <-> self-node rtt: 2.020 ms (using LAN coordinates)"
    );
    let out = agent.cli(&["rtt", "far", "ghost"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("Could not find a coordinate for node \"ghost\""));

    // ?near= orders catalog and health reads nearest first.
    let by_far = agent.get("/v1/catalog/service/db?near=far").unwrap();
    assert_eq!(names(&by_far, |r| &r["Node"]), ["far", "mid", "near"]);
    let by_agent = agent.get("/v1/health/service/db?near=_agent").unwrap();
    assert_eq!(
        names(&by_agent, |r| &r["Node"]["Node"]),
        ["near", "mid", "far"]
    );
    let nodes = agent.get("/v1/catalog/nodes?near=mid").unwrap();
    assert_eq!(
        names(&nodes, |r| &r["Node"]),
        ["mid", "near", "self-node", "far"]
    );
    // _ip: the node at the client's address (127.0.0.1 is `near`'s and
    // this agent's; the first registered there wins), or X-Forwarded-For.
    let (_, _, body) = common::http_request_with_headers(
        agent.http_port,
        "GET",
        "/v1/catalog/service/db?near=_ip",
        &[("X-Forwarded-For", "10.0.0.40")],
    );
    let by_ip: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(names(&by_ip, |r| &r["Node"]), ["far", "mid", "near"]);
    // A source without a coordinate leaves Consul's order alone.
    let unsorted = agent.get("/v1/catalog/service/db?near=ghost").unwrap();
    assert_eq!(names(&unsorted, |r| &r["Node"]), ["far", "mid", "near"]);
    let unsorted = agent.get("/v1/catalog/service/db?near=near").unwrap();
    assert_eq!(names(&unsorted, |r| &r["Node"]), ["near", "mid", "far"]);

    // Bad input: Consul's errors, nothing stored.
    for (body, expected) in [
        (
            json!({"Node": "far", "Coord": {"Vec": [1.0], "Error": 0.0, "Adjustment": 0.0, "Height": 0.0}}),
            "incompatible coordinate",
        ),
        (
            json!({"Node": "far", "Coord": {"Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "Error": 0.0, "Adjustment": 0.0, "Height": "NaN"}}),
            "Request decode failed",
        ),
    ] {
        let (status, text) = agent.put("/v1/coordinate/update", &body.to_string());
        assert!(status == 500 || status == 400, "{status} {text}");
        assert!(text.contains(expected), "{text}");
    }
    let (status, text) = agent.put("/v1/coordinate/update", "{not json");
    assert_eq!(status, 400, "{text}");
    let (status, _, body) = agent.request("GET", "/v1/coordinate/node/ghost", None);
    assert_eq!((status, body.as_str()), (404, ""));

    // Deregistering a node removes its coordinate.
    let (status, _) = agent.put("/v1/catalog/deregister", r#"{"Node": "mid"}"#);
    assert_eq!(status, 200);
    let (status, _, _) = agent.request("GET", "/v1/coordinate/node/mid", None);
    assert_eq!(status, 404);
}
