//! `/v1/txn` with node, service, check and session operations beside KV,
//! through the binary: Consul's result shapes (`agent/consul/state/txn.go`),
//! its texts for stale CAS and unknown verbs, rollback of every operation
//! when one fails (catalog rows and the side effects of session
//! invalidation included), the read-only path, the 128-operation limit,
//! and the ACL checks of Consul's `preCheck` plus Legate's stricter one on
//! an instance's stored name.

mod common;

use common::acl::{Acl, ROOT};
use common::TestAgent;
use serde_json::{json, Value};

fn txn(agent: &TestAgent, body: Value) -> (u16, Value) {
    let (status, text) = agent.put("/v1/txn", &body.to_string());
    let parsed = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, parsed)
}

/// The `What` of every error, in order.
fn error_texts(body: &Value) -> Vec<&str> {
    body["Errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["What"].as_str().unwrap())
        .collect()
}

fn node_op(verb: &str, node: Value) -> Value {
    json!({"Node": {"Verb": verb, "Node": node}})
}

fn service_op(verb: &str, node: &str, service: Value) -> Value {
    json!({"Service": {"Verb": verb, "Node": node, "Service": service}})
}

fn check_op(verb: &str, check: Value) -> Value {
    json!({"Check": {"Verb": verb, "Check": check}})
}

#[test]
fn catalog_operations_commit_together_with_consuls_results() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = txn(
        &agent,
        json!([
            node_op("set", json!({"ID": "67539c9d-b948-ba67-edd4-d07a676d6673", "Node": "n1",
                "Address": "10.0.0.1", "Meta": {"rack": "r1"}})),
            service_op("set", "n1", json!({"ID": "web1", "Service": "web", "Port": 80,
                "Tags": ["v1"]})),
            check_op("set", json!({"Node": "n1", "CheckID": "web-alive", "Name": "alive",
                "Status": "passing", "ServiceID": "web1",
                "Definition": {"HTTP": "http://localhost:8080", "Interval": "10s"}})),
            {"KV": {"Verb": "set", "Key": "deploy/web", "Value": "djE="}},
        ]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Errors"], Value::Null);
    let results = body["Results"].as_array().unwrap();
    assert_eq!(results.len(), 4, "{body}");
    let node = &results[0]["Node"];
    assert_eq!(node["Node"], "n1");
    assert_eq!(node["Datacenter"], "dc1", "the agent's datacenter fills in");
    assert_eq!(node["Meta"]["rack"], "r1");
    let index = node["ModifyIndex"].as_u64().unwrap();
    assert!(index > 0);
    assert_eq!(results[1]["Service"]["ID"], "web1");
    assert_eq!(results[1]["Service"]["Port"], 80);
    let check = &results[2]["Check"];
    assert_eq!(check["ServiceName"], "web", "taken from the instance");
    assert_eq!(check["ServiceTags"], json!(["v1"]));
    assert_eq!(check["Definition"]["HTTP"], "http://localhost:8080");
    assert_eq!(
        results[3]["KV"]["Value"],
        Value::Null,
        "a write's value is left out"
    );
    for result in results {
        assert_eq!(result.as_object().unwrap().len(), 1, "one key per result");
    }
    // Everything landed at one index and reads back through the catalog.
    let health = agent.get("/v1/health/service/web").unwrap();
    assert_eq!(health[0]["Node"]["Address"], "10.0.0.1");
    assert_eq!(health[0]["Checks"][0]["CheckID"], "web-alive");
    assert_eq!(health[0]["Service"]["ModifyIndex"].as_u64(), Some(index));

    // A read-only transaction: gets, including a failing one (409).
    let (status, body) = txn(
        &agent,
        json!([
            node_op("get", json!({"Node": "n1"})),
            service_op("get", "n1", json!({"ID": "web1"})),
            check_op("get", json!({"Node": "n1", "CheckID": "web-alive"})),
        ]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["Node"]["Address"], "10.0.0.1");
    assert_eq!(body["Results"][1]["Service"]["Service"], "web");
    assert_eq!(body["Results"][2]["Check"]["Status"], "passing");
    let (status, body) = txn(
        &agent,
        json!([
            node_op("get", json!({"Node": "ghost"})),
            service_op("get", "n1", json!({"ID": "nope"})),
            check_op("get", json!({"Node": "n1", "CheckID": "nope"})),
        ]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["Errors"],
        json!([
            {"OpIndex": 0, "What": "node \"ghost\" doesn't exist"},
            {"OpIndex": 1, "What": "service \"nope\" on node \"n1\" doesn't exist"},
            {"OpIndex": 2, "What": "check \"nope\" on node \"n1\" doesn't exist"},
        ])
    );
    assert_eq!(body["Results"], Value::Null);

    // CAS with the current index applies; a stale one is refused with
    // Consul's text, and so are deletes with a stale index.
    let (status, body) = txn(
        &agent,
        json!([service_op(
            "cas",
            "n1",
            json!({"ID": "web1", "Service": "web", "Port": 81,
            "ModifyIndex": index})
        )]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["Service"]["Port"], 81);
    let (status, body) = txn(
        &agent,
        json!([
            service_op(
                "cas",
                "n1",
                json!({"ID": "web1", "Service": "web", "Port": 82,
                "ModifyIndex": index})
            ),
            node_op(
                "cas",
                json!({"Node": "n1", "Address": "10.9.9.9", "ModifyIndex": 1})
            ),
            node_op("delete-cas", json!({"Node": "n1", "ModifyIndex": 1})),
            check_op(
                "delete-cas",
                json!({"Node": "n1", "CheckID": "web-alive", "ModifyIndex": 1})
            ),
            node_op(
                "cas",
                json!({"Node": "n2", "Address": "10.0.0.2", "ModifyIndex": 0})
            ),
        ]),
    );
    assert_eq!(status, 409, "{body}");
    let texts = error_texts(&body);
    assert_eq!(
        texts,
        vec![
            "failed to set service \"web1\" on node \"n1\", index is stale",
            "failed to set node \"n1\", index is stale",
            "failed to delete node \"n1\", index is stale",
            "failed to delete check \"web-alive\" on node \"n1\", index is stale",
        ]
    );
    // The one CAS that held (n2, index 0: only if absent) was rolled back.
    assert_eq!(agent.request("GET", "/v1/catalog/node/n2", None).2, "null");
    assert_eq!(
        agent.get("/v1/catalog/service/web").unwrap()[0]["ServicePort"],
        81
    );
}

#[test]
fn one_failure_rolls_back_every_operation_and_its_side_effects() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = txn(
        &agent,
        json!([
            node_op("set", json!({"Node": "n1", "Address": "10.0.0.1"})),
            check_op(
                "set",
                json!({"Node": "n1", "CheckID": "alive", "Status": "passing"})
            ),
        ]),
    );
    assert_eq!(status, 200, "{body}");
    // A session on the node's check holds a lock.
    let (status, session) = agent.put(
        "/v1/session/create",
        r#"{"Node": "n1", "NodeChecks": ["alive"], "Behavior": "delete"}"#,
    );
    assert_eq!(status, 200, "{session}");
    let session: Value = serde_json::from_str(&session).unwrap();
    let session = session["ID"].as_str().unwrap().to_string();
    let (status, _) = agent.put(&format!("/v1/kv/leader?acquire={session}"), "me");
    assert_eq!(status, 200);
    let before_nodes = agent.get("/v1/catalog/nodes").unwrap();
    let catalog_index = || {
        let (_, headers, _) = agent.request("GET", "/v1/catalog/nodes", None);
        common::header(&headers, "x-consul-index")
            .unwrap()
            .to_string()
    };
    let before_index = catalog_index();

    // Turning the check critical destroys the session and deletes its
    // key; a new service appears; deleting the node takes its check and
    // the service — and then a failing read undoes all of it.
    let (status, body) = txn(
        &agent,
        json!([
            check_op("set", json!({"Node": "n1", "CheckID": "alive", "Status": "critical"})),
            service_op("set", "n1", json!({"Service": "db", "Port": 5432})),
            node_op("delete", json!({"Node": "n1"})),
            {"KV": {"Verb": "get", "Key": "never/there"}},
        ]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["Errors"],
        json!([{"OpIndex": 3, "What": "key \"never/there\" doesn't exist"}])
    );
    assert_eq!(agent.get("/v1/catalog/nodes").unwrap(), before_nodes);
    assert_eq!(catalog_index(), before_index, "no index moved");
    assert_eq!(
        agent.get("/v1/health/node/n1").unwrap()[0]["Status"],
        "passing"
    );
    assert_eq!(agent.get("/v1/catalog/service/db").unwrap(), json!([]));
    assert_eq!(
        agent.get(&format!("/v1/session/info/{session}")).unwrap()[0]["ID"],
        session.as_str()
    );
    assert_eq!(
        agent.get("/v1/kv/leader").unwrap()[0]["Session"],
        session.as_str()
    );

    // Without the failing check the same operations commit: the session
    // is gone and its key deleted (Behavior "delete").
    let (status, body) = txn(
        &agent,
        json!([
            check_op("set", json!({"Node": "n1", "CheckID": "alive", "Status": "critical"})),
            {"Session": {"Verb": "delete", "Session": {"ID": session}}},
        ]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(agent.request("GET", "/v1/kv/leader", None).0, 404);
    assert_eq!(
        agent.get(&format!("/v1/session/info/{session}")).unwrap(),
        json!([])
    );
}

#[test]
fn bad_transactions_get_consuls_answers() {
    let agent = TestAgent::dev(&[]);
    // Unknown verbs are errors of their operation (409), not of the body.
    let (status, body) = txn(
        &agent,
        json!([
            node_op("explode", json!({"Node": "n1"})),
            service_op("explode", "n1", json!({"Service": "web"})),
            check_op("explode", json!({"Node": "n1", "CheckID": "c"})),
            {"Session": {"Verb": "renew", "Session": {"ID": "x"}}},
        ]),
    );
    assert_eq!(status, 409, "{body}");
    let texts = error_texts(&body);
    assert_eq!(
        texts,
        vec![
            "unknown Node verb \"explode\"",
            "unknown Service verb \"explode\"",
            "unknown Check verb \"explode\"",
            "failed to delete session: unknown Session verb \"renew\"",
        ]
    );
    // So is a KV verb nobody knows, and nothing else runs.
    let (status, body) = txn(
        &agent,
        json!([
            {"KV": {"Verb": "set", "Key": "kept-out", "Value": "eA=="}},
            {"KV": {"Verb": "frobnicate", "Key": "k"}},
        ]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["Errors"][0]["OpIndex"], 1);
    assert_eq!(body["Errors"][0]["What"], "unknown KV verb \"frobnicate\"");
    assert_eq!(body["Results"], serde_json::Value::Null);
    assert_eq!(agent.request("GET", "/v1/kv/kept-out", None).0, 404);
    // Writes on what is not there: Consul's state-store texts.
    let (status, body) = txn(
        &agent,
        json!([
            service_op("set", "ghost", json!({"Service": "web"})),
            check_op("set", json!({"Node": "ghost", "CheckID": "c"})),
        ]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["Errors"][0]["What"], "Missing node registration");
    assert_eq!(body["Errors"][1]["What"], "Missing node registration");
    txn(
        &agent,
        json!([node_op("set", json!({"Node": "n1", "Address": "10.0.0.1"}))]),
    );
    let (status, body) = txn(
        &agent,
        json!([
            check_op("set", json!({"Node": "n1", "CheckID": "c", "ServiceID": "nope"})),
            service_op("set", "n1", json!({"ID": "web1"})),
            service_op("set", "n1", json!({"Service": "web", "Address": "0.0.0.0"})),
            {"KV": {"Verb": "set", "Key": ""}},
        ]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["Errors"],
        json!([
            {"OpIndex": 1, "What": "Must provide service name with ID"},
            {"OpIndex": 2, "What": "Invalid service address"},
            {"OpIndex": 3, "What": "Must provide key"},
        ]),
        "checked before anything runs, every failing operation reported"
    );
    let (status, body) = txn(
        &agent,
        json!([check_op(
            "set",
            json!({"Node": "n1", "CheckID": "c", "ServiceID": "nope"})
        )]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["Errors"][0]["What"], "Missing service registration");
    // A check named but without an ID takes its name as the ID (Consul's
    // checkPreApply).
    let (status, body) = txn(
        &agent,
        json!([check_op("set", json!({"Node": "n1", "Name": "disk"}))]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["Check"]["CheckID"], "disk");
    assert_eq!(body["Results"][0]["Check"]["Status"], "critical");

    // 129 operations: 413 with Consul's text, nothing applied.
    let many: Vec<Value> = (0..129)
        .map(|i| node_op("set", json!({"Node": format!("m{i}")})))
        .collect();
    let (status, body) = txn(&agent, Value::Array(many));
    assert_eq!(status, 413, "{body}");
    assert_eq!(
        body,
        Value::String("Transaction contains too many operations (129 > 128)".into())
    );
    assert_eq!(agent.request("GET", "/v1/catalog/node/m0", None).2, "null");
    // Lower-case keys, as some clients send them, read the same.
    let (status, body) = txn(
        &agent,
        json!([{"node": {"verb": "get", "node": {"node": "n1"}}}]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["Node"]["Node"], "n1");
}

#[test]
fn catalog_operations_need_consuls_rights_and_the_stored_names() {
    let acl = Acl::start();
    let root = |body: Value| {
        let (status, _, text) = acl.call("PUT", "/v1/txn", Some(ROOT), Some(&body.to_string()));
        assert_eq!(status, 200, "{text}");
    };
    root(json!([
        node_op("set", json!({"Node": "n1", "Address": "10.0.0.1"})),
        service_op(
            "set",
            "n1",
            json!({"ID": "db1", "Service": "db", "Port": 5432})
        ),
        check_op(
            "set",
            json!({"Node": "n1", "CheckID": "db-alive", "ServiceID": "db1",
            "Status": "passing"})
        ),
    ]));
    let web = acl.token_with_rules(
        "web",
        r#"service "web" { policy = "write" } node_prefix "" { policy = "read" }"#,
    );
    let call = |body: Value| {
        let (status, _, text) = acl.call("PUT", "/v1/txn", Some(&web), Some(&body.to_string()));
        (
            status,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
        )
    };
    // node:write is needed for a node; service:write for an instance.
    let (status, body) = call(json!([
        node_op("set", json!({"Node": "n1", "Address": "10.6.6.6"})),
        service_op(
            "set",
            "n1",
            json!({"ID": "web1", "Service": "web", "Port": 80})
        ),
    ]));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["Errors"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["Errors"][0]["OpIndex"], 0);
    assert!(
        body["Errors"][0]["What"]
            .as_str()
            .unwrap()
            .contains("lacks permission 'node:write' on \"n1\""),
        "{body}"
    );
    // Claiming the name "web" for db's instance or check is refused:
    // the stored name decides too.
    let (status, body) = call(json!([
        service_op(
            "set",
            "n1",
            json!({"ID": "db1", "Service": "web", "Port": 1})
        ),
        check_op(
            "set",
            json!({"Node": "n1", "CheckID": "db-alive", "ServiceID": "db1",
            "ServiceName": "web", "Status": "critical"})
        ),
        service_op("delete", "n1", json!({"ID": "db1", "Service": "web"})),
    ]));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["Errors"].as_array().unwrap().len(), 3, "{body}");
    for error in body["Errors"].as_array().unwrap() {
        assert!(
            error["What"]
                .as_str()
                .unwrap()
                .contains("lacks permission 'service:write' on \"db\""),
            "{body}"
        );
    }
    // Its own service it may write; reads come back filtered to what the
    // token may read (db's check and instance are not shown).
    let (status, body) = call(json!([service_op(
        "set",
        "n1",
        json!({"ID": "web1", "Service": "web", "Port": 80})
    ),]));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(json!([
        service_op("get", "n1", json!({"ID": "db1"})),
        check_op("get", json!({"Node": "n1", "CheckID": "db-alive"})),
        service_op("get", "n1", json!({"ID": "web1"})),
        node_op("get", json!({"Node": "n1"})),
    ]));
    assert_eq!(status, 200, "{body}");
    let results = body["Results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{body}");
    assert_eq!(results[0]["Service"]["ID"], "web1");
    assert_eq!(results[1]["Node"]["Node"], "n1");
}

#[test]
fn catalog_operations_wait_until_every_server_can_apply_them() {
    // A server posing as an older build (no `ft_txc`): the newer log
    // command is never written, KV-only transactions still are.
    let agent = TestAgent::spawn_with_env(&["-dev"], true, &[("LEGATE_MASKED_FEATURES", "txc")]);
    agent.wait_ready();
    let (status, body) = txn(
        &agent,
        json!([node_op("set", json!({"Node": "n1", "Address": "10.0.0.1"}))]),
    );
    assert_eq!(status, 500, "{body}");
    assert!(
        body.as_str()
            .unwrap()
            .contains("need every server to run this version"),
        "{body}"
    );
    assert_eq!(agent.request("GET", "/v1/catalog/node/n1", None).2, "null");
    let (status, body) = txn(
        &agent,
        json!([{"KV": {"Verb": "set", "Key": "k", "Value": "dg=="}}]),
    );
    assert_eq!(status, 200, "{body}");
    // Reads of the catalog need no new command.
    let (status, body) = txn(&agent, json!([node_op("get", json!({"Node": "ghost"}))]));
    assert_eq!(status, 409, "{body}");
}
