//! `PUT /v1/operator/autopilot/configuration` (`?cas=`) and `legate
//! operator autopilot set-config`, as Consul's handler and command answer
//! (`agent/operator_endpoint.go`, `command/operator/autopilot/set`): the
//! body replaces the whole configuration, `?cas` answers whether it was
//! written, bad input is a 400 with Consul's texts and changes nothing.
//! That the leader's autopilot runs with it is shown in `cluster.rs`
//! (dead-server cleanup turned off through `set-config`). Also the
//! answers of `operator raft transfer-leader` on a server with no other
//! voter (the transfer itself is tested in `cluster.rs`).

mod common;

use common::TestAgent;
use serde_json::{json, Value};

fn config(agent: &TestAgent) -> Value {
    agent.get("/v1/operator/autopilot/configuration").unwrap()
}

#[test]
fn the_configuration_is_replaced_checked_and_set_and_refused_when_bad() {
    let agent = TestAgent::dev(&[]);
    let before = config(&agent);
    assert_eq!(before["CleanupDeadServers"], true);
    assert_eq!(before["LastContactThreshold"], "200ms");
    assert_eq!(before["ModifyIndex"], 0, "from the agent config");

    // The CLI: flags given change, the rest stay.
    let out = agent.cli(&[
        "operator",
        "autopilot",
        "set-config",
        "-cleanup-dead-servers=false",
        "-max-trailing-logs=100",
        "-last-contact-threshold=1s",
    ]);
    assert_eq!(common::expect_success(&out), "Configuration updated!");
    let after = config(&agent);
    assert_eq!(after["CleanupDeadServers"], false);
    assert_eq!(after["MaxTrailingLogs"], 100);
    assert_eq!(after["LastContactThreshold"], "1s");
    assert_eq!(after["ServerStabilizationTime"], "10s");
    let index = after["ModifyIndex"].as_u64().unwrap();
    assert!(index > 0);
    assert_eq!(after["CreateIndex"].as_u64(), Some(index));
    let shown = common::expect_success(&agent.cli(&["operator", "autopilot", "get-config"]));
    assert!(
        shown.lines().any(|l| l == "MaxTrailingLogs = 100"),
        "{shown}"
    );

    // PUT replaces everything: fields left out are zero; durations may be
    // nanoseconds. Without ?cas the answer is true.
    let (status, body) = agent.put(
        "/v1/operator/autopilot/configuration",
        r#"{"cleanupdeadservers": true, "ServerStabilizationTime": 5000000000}"#,
    );
    assert_eq!((status, body.trim()), (200, "true"));
    let replaced = config(&agent);
    assert_eq!(replaced["CleanupDeadServers"], true);
    assert_eq!(replaced["MaxTrailingLogs"], 0);
    assert_eq!(replaced["LastContactThreshold"], "0s");
    assert_eq!(replaced["ServerStabilizationTime"], "5s");
    assert_eq!(replaced["CreateIndex"].as_u64(), Some(index));
    let current = replaced["ModifyIndex"].as_u64().unwrap();

    // ?cas: a stale index writes nothing and answers false.
    let put = |query: &str, body: &str| {
        agent.put(
            &format!("/v1/operator/autopilot/configuration{query}"),
            body,
        )
    };
    let (status, body) = put(&format!("?cas={index}"), r#"{"MaxTrailingLogs": 7}"#);
    assert_eq!((status, body.trim()), (200, "false"));
    assert_eq!(config(&agent)["MaxTrailingLogs"], 0);
    let (status, body) = put(&format!("?cas={current}"), r#"{"MaxTrailingLogs": 7}"#);
    assert_eq!((status, body.trim()), (200, "true"));
    assert_eq!(config(&agent)["MaxTrailingLogs"], 7);

    // Bad input: Consul's 400s, nothing written.
    let seen = config(&agent);
    for (query, body, text) in [
        (
            "?cas=x",
            "{}",
            "Error parsing cas value: invalid digit found in string",
        ),
        ("", "", "Error parsing autopilot config: EOF"),
        ("", "{not json", "Error parsing autopilot config: "),
        (
            "",
            r#"{"MaxTrailingLogs": "many"}"#,
            "Error parsing autopilot config: ",
        ),
        (
            "",
            r#"{"LastContactThreshold": "soon"}"#,
            "Error parsing autopilot config: LastContactThreshold: ",
        ),
    ] {
        let (status, answer) = put(query, body);
        assert_eq!(status, 400, "{query} {body}: {answer}");
        assert!(answer.starts_with(text), "{query} {body}: {answer}");
    }
    assert_eq!(config(&agent), seen);
    let out = agent.cli(&[
        "operator",
        "autopilot",
        "set-config",
        "-last-contact-threshold=soon",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(config(&agent), seen);
    assert_eq!(json!(seen["MaxTrailingLogs"]), json!(7));
}

#[test]
fn transfer_leader_without_another_voter_is_consuls_error() {
    let agent = TestAgent::dev(&[]);
    let (status, _, body) = agent.request("POST", "/v1/operator/raft/transfer-leader", None);
    assert_eq!((status, body.as_str()), (500, "cannot find peer"));
    let out = agent.cli(&["operator", "raft", "transfer-leader"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Error transfering leadership: Failed to transfer leadership")
            && err.contains("cannot find peer"),
        "{err}"
    );
    // Still the leader, still writable.
    assert_eq!(agent.put("/v1/kv/x", "1").0, 200);
}
