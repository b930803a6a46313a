//! The `/v1` API driven over real HTTP against `legate agent -dev`.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, header, TestAgent};
use serde_json::{json, Value};

fn names(v: &Value, field: &str) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.pointer(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[test]
fn agent_self_reports_a_parseable_consul_version() {
    let agent = TestAgent::dev(&["-node", "self-test"]);
    let me = agent.get("/v1/agent/self").unwrap();
    let version = me["Config"]["Version"].as_str().unwrap();
    let parts: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    assert_eq!(parts.len(), 3, "{version}");
    assert!(parts[0] == 1 && parts[1] >= 20, "{version}");
    assert_eq!(me["Config"]["NodeName"], "self-test");
    assert!(me["DebugConfig"]["Legate"]["Version"].is_string());
    let members = agent.get("/v1/agent/members").unwrap();
    assert_eq!(members[0]["Name"], "self-test");
    assert_eq!(members[0]["Status"], 1);
    let leader: String =
        serde_json::from_str(&agent.get_text("/v1/status/leader").unwrap()).unwrap();
    assert!(leader.ends_with(":8300"), "{leader}");
    assert_eq!(agent.get("/v1/status/peers").unwrap(), json!([leader]));
    assert_eq!(
        agent.get("/v1/catalog/datacenters").unwrap(),
        json!(["dc1"])
    );
}

#[test]
fn register_health_and_ttl_checks() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = agent.put(
        "/v1/agent/service/register",
        r#"{"Name":"web","ID":"web-1","Port":8080,"Tags":["v1"],"Meta":{"team":"a"},
            "Check":{"TTL":"30s","Name":"web ttl"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    // Checks start critical, so ?passing hides the instance.
    let rows = eventually(Duration::from_secs(5), || {
        let rows = agent.get("/v1/health/service/web").ok()?;
        (rows.as_array()?.len() == 1).then_some(rows)
    });
    assert_eq!(rows[0]["Service"]["ID"], "web-1");
    assert_eq!(rows[0]["Service"]["Meta"]["team"], "a");
    let check_ids = names(&rows[0]["Checks"], "/CheckID");
    assert!(
        check_ids.contains(&"serfHealth".to_string())
            && check_ids.contains(&"service:web-1".to_string()),
        "{check_ids:?}"
    );
    assert_eq!(
        agent.get("/v1/health/service/web?passing").unwrap(),
        json!([])
    );
    let (status, _, text) =
        agent.request("GET", "/v1/agent/health/service/id/web-1?format=text", None);
    assert_eq!((status, text.as_str()), (503, "critical"));

    assert_eq!(
        agent
            .put("/v1/agent/check/pass/service:web-1?note=fine", "")
            .0,
        200
    );
    eventually(Duration::from_secs(5), || {
        let rows = agent.get("/v1/health/service/web?passing").ok()?;
        (rows.as_array()?.len() == 1).then_some(())
    });
    let (status, _, body) = agent.request("GET", "/v1/agent/health/service/name/web", None);
    assert_eq!(status, 200, "{body}");
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed[0]["AggregatedStatus"], "passing");
    let checks = agent.get("/v1/health/checks/web").unwrap();
    assert_eq!(checks[0]["Output"], "fine");
    assert_eq!(checks[0]["ServiceName"], "web");

    // warn and update, then a TTL that expires.
    assert_eq!(agent.put("/v1/agent/check/warn/service:web-1", "").0, 200);
    assert_eq!(
        agent
            .request("GET", "/v1/agent/health/service/id/web-1", None)
            .0,
        429
    );
    assert_eq!(
        agent
            .put(
                "/v1/agent/check/update/service:web-1",
                r#"{"Status":"passing","Output":"ok"}"#
            )
            .0,
        200
    );
    assert_eq!(
        agent
            .put(
                "/v1/agent/check/register",
                r#"{"Name":"short","TTL":"1s","Status":"passing"}"#
            )
            .0,
        200
    );
    assert_eq!(
        agent.get("/v1/agent/checks").unwrap()["short"]["Status"],
        "passing"
    );
    eventually(Duration::from_secs(6), || {
        let checks = agent.get("/v1/agent/checks").ok()?;
        (checks["short"]["Status"] == "critical" && checks["short"]["Output"] == "TTL expired")
            .then_some(())
    });
    // A pass/fail on a check that is not TTL is refused; unknown checks are 404.
    assert_eq!(agent.put("/v1/agent/check/pass/nope", "").0, 404);

    // Deregistering removes it from the catalog.
    assert_eq!(agent.put("/v1/agent/service/deregister/web-1", "").0, 200);
    eventually(Duration::from_secs(5), || {
        (agent.get("/v1/catalog/service/web").ok()? == json!([])).then_some(())
    });
    assert_eq!(agent.put("/v1/agent/service/deregister/web-1", "").0, 404);
}

#[test]
fn sidecar_service_expands_and_collapses() {
    let agent = TestAgent::dev(&[]);
    let body = r#"{"name":"web","port":8080,"tags":["a"],"meta":{"snake_key":"kept"},
        "connect":{"sidecar_service":{"proxy":{"upstreams":[{"destination_name":"db","local_bind_port":9191,
        "config":{"connect_timeout_ms":3000}}]}}}}"#;
    assert_eq!(agent.put("/v1/agent/service/register", body).0, 200);
    let services = agent.get("/v1/agent/services").unwrap();
    let sidecar = &services["web-sidecar-proxy"];
    assert_eq!(sidecar["Kind"], "connect-proxy");
    assert_eq!(sidecar["Service"], "web-sidecar-proxy");
    assert_eq!(sidecar["Port"], 21000);
    assert_eq!(sidecar["Tags"], json!(["a"]));
    assert_eq!(sidecar["Meta"]["snake_key"], "kept");
    assert_eq!(services["web"]["Meta"]["snake_key"], "kept");
    let proxy = &sidecar["Proxy"];
    assert_eq!(proxy["DestinationServiceName"], "web");
    assert_eq!(proxy["DestinationServiceID"], "web");
    assert_eq!(proxy["LocalServiceAddress"], "127.0.0.1");
    assert_eq!(proxy["LocalServicePort"], 8080);
    assert_eq!(proxy["Upstreams"][0]["DestinationName"], "db");
    assert_eq!(proxy["Upstreams"][0]["LocalBindPort"], 9191);
    assert_eq!(proxy["Upstreams"][0]["Config"]["connect_timeout_ms"], 3000);
    assert!(
        services["web"].get("Connect").is_none()
            || services["web"]["Connect"].get("SidecarService").is_none()
    );
    let checks = agent.get("/v1/agent/checks").unwrap();
    let tcp = &checks["service:web-sidecar-proxy:1"];
    assert_eq!(tcp["Type"], "tcp");
    assert_eq!(tcp["Definition"]["TCP"], "127.0.0.1:21000");
    let alias = &checks["service:web-sidecar-proxy:2"];
    assert_eq!(alias["Type"], "alias");
    assert_eq!(alias["Name"], "Connect Sidecar Aliasing web");

    // A second sidecar gets the next port; the catalog's connect view lists proxies.
    assert_eq!(
        agent
            .put(
                "/v1/agent/service/register",
                r#"{"Name":"db","Port":9090,"Connect":{"SidecarService":{}}}"#
            )
            .0,
        200
    );
    assert_eq!(
        agent.get("/v1/agent/services").unwrap()["db-sidecar-proxy"]["Port"],
        21001
    );
    let connect = eventually(Duration::from_secs(5), || {
        let rows = agent.get("/v1/catalog/connect/web").ok()?;
        (rows.as_array()?.len() == 1).then_some(rows)
    });
    assert_eq!(connect[0]["ServiceID"], "web-sidecar-proxy");
    assert_eq!(connect[0]["ServiceProxy"]["DestinationServiceName"], "web");
    let health_connect = agent.get("/v1/health/connect/web").unwrap();
    assert_eq!(health_connect[0]["Service"]["Kind"], "connect-proxy");

    // Re-registering without the block removes the sidecar.
    assert_eq!(
        agent
            .put(
                "/v1/agent/service/register",
                r#"{"Name":"web","Port":8080}"#
            )
            .0,
        200
    );
    let services = agent.get("/v1/agent/services").unwrap();
    assert!(services.get("web-sidecar-proxy").is_none(), "{services}");
    assert!(agent
        .get("/v1/agent/checks")
        .unwrap()
        .get("service:web-sidecar-proxy:1")
        .is_none());
    eventually(Duration::from_secs(5), || {
        (agent.get("/v1/catalog/connect/web").ok()? == json!([])).then_some(())
    });
}

#[test]
fn catalog_register_filters_and_node_meta() {
    let agent = TestAgent::dev(&[]);
    let register = r#"{"Node":"ext-1","Address":"10.1.2.3","NodeMeta":{"rack":"r1"},
        "Service":{"Service":"redis","ID":"redis-1","Port":6379,"Tags":["primary","v7"],"Meta":{"version":"7"}},
        "Checks":[{"CheckID":"redis-alive","Name":"alive","Status":"passing","ServiceID":"redis-1"}]}"#;
    let (status, body) = agent.put("/v1/catalog/register", register);
    assert_eq!((status, body.as_str()), (200, "true"));
    agent.put(
        "/v1/catalog/register",
        r#"{"Node":"ext-2","Address":"10.1.2.4","Service":{"Service":"redis","ID":"redis-2","Port":6379,"Tags":["replica"]}}"#,
    );
    let rows = agent.get("/v1/catalog/service/redis").unwrap();
    assert_eq!(names(&rows, "/ServiceID"), vec!["redis-1", "redis-2"]);
    assert_eq!(rows[0]["Address"], "10.1.2.3");
    assert_eq!(rows[0]["NodeMeta"]["rack"], "r1");
    assert_eq!(
        names(
            &agent.get("/v1/catalog/service/redis?tag=primary").unwrap(),
            "/ServiceID"
        ),
        vec!["redis-1"]
    );
    let filtered = agent
        .get("/v1/catalog/service/redis?filter=ServiceMeta.version%20%3D%3D%20%227%22")
        .unwrap();
    assert_eq!(names(&filtered, "/ServiceID"), vec!["redis-1"]);
    assert_eq!(
        names(
            &agent.get("/v1/catalog/nodes?node-meta=rack:r1").unwrap(),
            "/Node"
        ),
        vec!["ext-1"]
    );
    let services = agent.get("/v1/catalog/services").unwrap();
    assert_eq!(services["redis"], json!(["primary", "replica", "v7"]));
    assert_eq!(services["consul"], json!([]));
    let node = agent.get("/v1/catalog/node/ext-1").unwrap();
    assert_eq!(node["Services"]["redis-1"]["Port"], 6379);
    let list = agent.get("/v1/catalog/node-services/ext-1").unwrap();
    assert_eq!(list["Services"][0]["ID"], "redis-1");
    assert_eq!(
        agent
            .request("GET", "/v1/catalog/node-services/missing", None)
            .0,
        404
    );
    assert_eq!(agent.get("/v1/catalog/node/missing").unwrap(), Value::Null);
    let health = agent.get("/v1/health/node/ext-1").unwrap();
    assert_eq!(names(&health, "/CheckID"), vec!["redis-alive"]);
    assert_eq!(
        agent
            .get("/v1/health/state/passing?filter=Node%20%3D%3D%20ext-1")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let (status, _) = agent.put(
        "/v1/catalog/deregister",
        r#"{"Node":"ext-1","ServiceID":"redis-1"}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(
        names(
            &agent.get("/v1/catalog/service/redis").unwrap(),
            "/ServiceID"
        ),
        vec!["redis-2"]
    );
    agent.put("/v1/catalog/deregister", r#"{"Node":"ext-2"}"#);
    assert!(agent
        .get("/v1/catalog/nodes")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["Node"] != "ext-2"));
}

#[test]
fn kv_reads_writes_cas_and_limits() {
    let agent = TestAgent::dev(&[]);
    assert_eq!(
        agent.put("/v1/kv/app/config?flags=42", "v1"),
        (200, "true".to_string())
    );
    let (status, headers, body) = agent.request("GET", "/v1/kv/app/config", None);
    assert_eq!(status, 200);
    let entry: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(entry[0]["Value"], "djE=");
    assert_eq!(entry[0]["Flags"], 42);
    let index: u64 = header(&headers, "x-consul-index").unwrap().parse().unwrap();
    assert_eq!(entry[0]["ModifyIndex"], index);
    assert_eq!(header(&headers, "x-consul-knownleader"), Some("true"));
    assert_eq!(
        header(&headers, "x-consul-effective-consistency"),
        Some("leader")
    );
    assert_eq!(agent.get_text("/v1/kv/app/config?raw").unwrap(), "v1");

    // CAS: a stale index fails, the current one succeeds, 0 only creates.
    assert_eq!(
        agent
            .put(&format!("/v1/kv/app/config?cas={}", index - 1), "x")
            .1,
        "false"
    );
    assert_eq!(
        agent.put(&format!("/v1/kv/app/config?cas={index}"), "v2").1,
        "true"
    );
    assert_eq!(agent.put("/v1/kv/app/config?cas=0", "x").1, "false");
    assert_eq!(agent.put("/v1/kv/app/new?cas=0", "n").1, "true");

    agent.put("/v1/kv/app/db/host", "h");
    agent.put("/v1/kv/app/db/port", "p");
    assert_eq!(
        agent.get("/v1/kv/app/?keys&separator=/").unwrap(),
        json!(["app/config", "app/db/", "app/new"])
    );
    assert_eq!(
        agent
            .get("/v1/kv/app/db?recurse")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        agent
            .get("/v1/kv/?recurse")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        4
    );

    let (status, headers, _) = agent.request("GET", "/v1/kv/missing", None);
    assert_eq!(status, 404);
    assert!(
        header(&headers, "x-consul-index")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );

    let (status, _, body) = agent.request("DELETE", "/v1/kv/app/db?recurse", None);
    assert_eq!((status, body.as_str()), (200, "true"));
    assert_eq!(agent.request("GET", "/v1/kv/app/db/host", None).0, 404);
    let current = agent.get("/v1/kv/app/new").unwrap()[0]["ModifyIndex"]
        .as_u64()
        .unwrap();
    assert_eq!(
        agent
            .request(
                "DELETE",
                &format!("/v1/kv/app/new?cas={}", current + 100),
                None
            )
            .2,
        "false"
    );
    assert_eq!(
        agent
            .request("DELETE", &format!("/v1/kv/app/new?cas={current}"), None)
            .2,
        "true"
    );

    // 512 KiB is the limit.
    let big = "x".repeat(512 * 1024);
    assert_eq!(agent.put("/v1/kv/big", &big).0, 200);
    let (status, body) = agent.put("/v1/kv/big", &format!("{big}y"));
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("too large"), "{body}");
}

#[test]
fn blocking_queries_wake_on_change_and_time_out() {
    let agent = TestAgent::dev(&[]);
    agent.put("/v1/kv/watched", "a");
    let (_, headers, _) = agent.request("GET", "/v1/kv/watched", None);
    let index: u64 = header(&headers, "x-consul-index").unwrap().parse().unwrap();

    // Times out at wait with the same index.
    let started = Instant::now();
    let (status, headers, _) = agent.request(
        "GET",
        &format!("/v1/kv/watched?index={index}&wait=1s"),
        None,
    );
    let elapsed = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "x-consul-index").unwrap(),
        index.to_string()
    );
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(2500), "{elapsed:?}");

    // Returns on change, long before the wait.
    let port = agent.http_port;
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let result = common::http_request(
            port,
            "GET",
            &format!("/v1/kv/watched?index={index}&wait=30s"),
            None,
        );
        (started.elapsed(), result)
    });
    std::thread::sleep(Duration::from_millis(300));
    // A write to another key must not wake it.
    agent.put("/v1/kv/other", "z");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished());
    agent.put("/v1/kv/watched", "b");
    let (elapsed, (status, headers, body)) = waiter.join().unwrap();
    assert_eq!(status, 200);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert!(
        header(&headers, "x-consul-index")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > index
    );
    assert!(body.contains("Yg=="), "{body}");

    // Health watches wake on registration of that service only.
    let (_, headers, _) = agent.request("GET", "/v1/health/service/late", None);
    let index: u64 = header(&headers, "x-consul-index").unwrap().parse().unwrap();
    assert!(index > 0);
    let waiter = std::thread::spawn(move || {
        common::http_request(
            port,
            "GET",
            &format!("/v1/health/service/late?index={index}&wait=30s"),
            None,
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    agent.put("/v1/agent/service/register", r#"{"Name":"late","Port":1}"#);
    let (_, _, body) = waiter.join().unwrap();
    assert!(body.contains("\"late\""), "{body}");

    // A fresh index of 0 never comes back as 0, and ?stale is honoured.
    let (_, headers, _) = agent.request("GET", "/v1/catalog/nodes?index=0&stale", None);
    assert!(
        header(&headers, "x-consul-index")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert_eq!(
        header(&headers, "x-consul-effective-consistency"),
        Some("stale")
    );
    let (_, headers, _) = agent.request("GET", "/v1/catalog/nodes?consistent", None);
    assert_eq!(
        header(&headers, "x-consul-effective-consistency"),
        Some("consistent")
    );
}

#[test]
fn sessions_and_locks() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = agent.put(
        "/v1/session/create",
        r#"{"Name":"lock-a","TTL":"15s","LockDelay":"0s"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let a = serde_json::from_str::<Value>(&body).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let b = serde_json::from_str::<Value>(&agent.put("/v1/session/create", "").1).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        agent
            .put(&format!("/v1/kv/locks/leader?acquire={a}"), "a")
            .1,
        "true"
    );
    assert_eq!(
        agent
            .put(&format!("/v1/kv/locks/leader?acquire={b}"), "b")
            .1,
        "false"
    );
    let entry = agent.get("/v1/kv/locks/leader").unwrap();
    assert_eq!(entry[0]["Session"], a.as_str());
    assert_eq!(entry[0]["LockIndex"], 1);
    assert_eq!(
        agent.put(&format!("/v1/kv/locks/leader?release={b}"), "").1,
        "false"
    );
    assert_eq!(
        agent.put(&format!("/v1/kv/locks/leader?release={a}"), "").1,
        "true"
    );
    assert_eq!(
        agent
            .put(&format!("/v1/kv/locks/leader?acquire={b}"), "b")
            .1,
        "true"
    );

    let info = agent.get(&format!("/v1/session/info/{a}")).unwrap();
    assert_eq!(info[0]["Name"], "lock-a");
    assert_eq!(info[0]["TTL"], "15s");
    assert_eq!(info[0]["LockDelay"], 0);
    assert_eq!(info[0]["NodeChecks"], json!(["serfHealth"]));
    let info_b = agent.get(&format!("/v1/session/info/{b}")).unwrap();
    assert_eq!(info_b[0]["LockDelay"], 15_000_000_000u64);
    assert_eq!(info_b[0]["Behavior"], "release");
    assert_eq!(
        agent
            .get("/v1/session/list")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let node = agent.get("/v1/agent/self").unwrap()["Config"]["NodeName"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        agent
            .get(&format!("/v1/session/node/{node}"))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let (status, body) = agent.put(&format!("/v1/session/renew/{a}"), "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        agent
            .put("/v1/session/renew/00000000-0000-0000-0000-000000000000", "")
            .0,
        404
    );

    // Destroying the holder releases the lock.
    assert_eq!(agent.put(&format!("/v1/session/destroy/{b}"), "").1, "true");
    assert_eq!(
        agent.get("/v1/kv/locks/leader").unwrap()[0].get("Session"),
        None
    );
    assert_eq!(
        agent.get(&format!("/v1/session/info/{b}")).unwrap(),
        json!([])
    );

    // Bad TTLs and unknown sessions are refused; Consul's server answers
    // TTLs out of range or unparseable with 500.
    assert_eq!(agent.put("/v1/session/create", r#"{"TTL":"5s"}"#).0, 500);
    assert_eq!(agent.put("/v1/session/create", r#"{"TTL":"soon"}"#).0, 500);
    assert_eq!(agent.put("/v1/kv/x?acquire=not-a-session", "").0, 400);
}

#[test]
fn transactions_commit_or_roll_back() {
    let agent = TestAgent::dev(&[]);
    let ok = r#"[{"KV":{"Verb":"set","Key":"t/a","Value":"YQ=="}},{"KV":{"Verb":"set","Key":"t/b","Value":"Yg=="}},{"KV":{"Verb":"get","Key":"t/a"}}]"#;
    let (status, body) = agent.put("/v1/txn", ok);
    assert_eq!(status, 200, "{body}");
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["Errors"], Value::Null);
    assert_eq!(parsed["Results"].as_array().unwrap().len(), 3);
    assert_eq!(parsed["Results"][2]["KV"]["Value"], "YQ==");
    let fail = r#"[{"KV":{"Verb":"set","Key":"t/c","Value":"Yw=="}},{"KV":{"Verb":"check-index","Key":"t/a","Index":1}}]"#;
    let (status, body) = agent.put("/v1/txn", fail);
    assert_eq!(status, 409, "{body}");
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["Errors"][0]["OpIndex"], 1);
    assert_eq!(agent.request("GET", "/v1/kv/t/c", None).0, 404);
    // An unknown verb fails its operation (Consul's state store:
    // `unknown KV verb`), it is not a malformed body.
    assert_eq!(
        agent
            .put("/v1/txn", r#"[{"KV":{"Verb":"explode","Key":"x"}}]"#)
            .0,
        409
    );
}

#[test]
fn bad_input_gets_clear_errors() {
    let agent = TestAgent::dev(&[]);
    let cases: Vec<(&str, &str, &str, u16, &str)> = vec![
        (
            "PUT",
            "/v1/agent/service/register",
            "{not json",
            400,
            "Request decode failed",
        ),
        (
            "PUT",
            "/v1/agent/service/register",
            r#"{"Name":"x","Port":"eighty"}"#,
            400,
            "Request decode failed",
        ),
        (
            "PUT",
            "/v1/agent/service/register",
            r#"{"Port":80}"#,
            400,
            "Missing service name",
        ),
        (
            "PUT",
            "/v1/agent/service/register",
            r#"{"Name":"x","Check":{"HTTP":"http://x","Interval":"10 parsecs"}}"#,
            400,
            "invalid duration",
        ),
        (
            "PUT",
            "/v1/agent/service/register",
            r#"{"Name":"x","Check":{"Interval":"10s"}}"#,
            400,
            "must define one of",
        ),
        (
            "PUT",
            "/v1/agent/service/register",
            r#"{"Name":"x","Check":{"HTTP":"http://x"}}"#,
            400,
            "Interval",
        ),
        (
            "PUT",
            "/v1/agent/service/register",
            r#"{"Name":"x","Check":{"Args":["/bin/true"],"Interval":"10s"}}"#,
            400,
            "Scripts are disabled",
        ),
        (
            "PUT",
            "/v1/agent/service/register",
            r#"{"Name":"p","Kind":"connect-proxy","Port":1}"#,
            400,
            "DestinationServiceName",
        ),
        (
            "PUT",
            "/v1/agent/check/register",
            r#"{"Name":"c","TTL":"10s","ServiceID":"nope"}"#,
            // Consul's 404 (AgentRegisterCheck).
            404,
            "does not exist",
        ),
        (
            "PUT",
            "/v1/agent/check/update/x",
            r#"{"Status":"great"}"#,
            400,
            "Invalid check status",
        ),
        (
            "PUT",
            "/v1/catalog/register",
            r#"{"Address":"1.2.3.4"}"#,
            400,
            "Must provide node",
        ),
        (
            "PUT",
            "/v1/catalog/register",
            r#"{"Node":"n","Address":"1.2.3.4","Check":{"CheckID":"c","Status":"sideways"}}"#,
            400,
            "invalid check status",
        ),
        ("GET", "/v1/kv/x?index=abc", "", 400, "Invalid index"),
        (
            "GET",
            "/v1/kv/x?wait=forever&index=1",
            "",
            400,
            "Invalid wait",
        ),
        (
            "GET",
            "/v1/catalog/nodes?stale&consistent",
            "",
            400,
            "conflicting",
        ),
        (
            "GET",
            "/v1/catalog/nodes?filter=Node%20%3D%3D",
            "",
            400,
            "Failed to create boolean expression",
        ),
        (
            "GET",
            "/v1/health/state/bogus",
            "",
            400,
            "Invalid check state",
        ),
        (
            "GET",
            "/v1/catalog/nodes?dc=dc9",
            "",
            500,
            "No path to datacenter",
        ),
        ("PUT", "/v1/kv/x?flags=-1", "", 400, "flags"),
        (
            "PUT",
            "/v1/agent/maintenance?enable=maybe",
            "",
            400,
            "enable",
        ),
        ("GET", "/v1/no/such/endpoint", "", 404, "Invalid URL path"),
    ];
    for (method, path, body, want_status, want_text) in cases {
        let (status, _, text) = agent.request(
            method,
            path,
            if body.is_empty() { None } else { Some(body) },
        );
        assert_eq!(status, want_status, "{method} {path} {body} -> {text}");
        assert!(
            text.contains(want_text),
            "{method} {path}: {text:?} should mention {want_text:?}"
        );
    }
    // The agent survived all of that.
    assert!(agent.get("/v1/agent/self").is_ok());
}

#[test]
fn maintenance_and_events() {
    let agent = TestAgent::dev(&[]);
    agent.put(
        "/v1/agent/service/register",
        r#"{"Name":"api","Port":1,"Check":{"TTL":"60s","Status":"passing"}}"#,
    );
    assert_eq!(
        agent
            .put(
                "/v1/agent/service/maintenance/api?enable=true&reason=deploy",
                ""
            )
            .0,
        200
    );
    let checks = agent.get("/v1/agent/checks").unwrap();
    assert_eq!(checks["_service_maintenance:api"]["Status"], "critical");
    assert_eq!(checks["_service_maintenance:api"]["Notes"], "deploy");
    eventually(Duration::from_secs(5), || {
        (agent.get("/v1/health/service/api?passing").ok()? == json!([])).then_some(())
    });
    assert_eq!(
        agent
            .put("/v1/agent/service/maintenance/api?enable=false", "")
            .0,
        200
    );
    eventually(Duration::from_secs(5), || {
        (agent
            .get("/v1/health/service/api?passing")
            .ok()?
            .as_array()?
            .len()
            == 1)
            .then_some(())
    });
    assert_eq!(agent.put("/v1/agent/maintenance?enable=true", "").0, 200);
    eventually(Duration::from_secs(5), || {
        (agent.get("/v1/health/service/api?passing").ok()? == json!([])).then_some(())
    });
    assert_eq!(agent.put("/v1/agent/maintenance?enable=false", "").0, 200);
    assert_eq!(
        agent
            .put("/v1/agent/service/maintenance/ghost?enable=true", "")
            .0,
        404
    );

    let (status, body) = agent.put("/v1/event/fire/deploy?service=api", "payload");
    assert_eq!(status, 200, "{body}");
    let fired: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(fired["Name"], "deploy");
    assert_eq!(fired["Payload"], "cGF5bG9hZA==");
    // The event reaches this agent's list by gossip, a moment later.
    let list = eventually(Duration::from_secs(10), || {
        let list = agent.get("/v1/event/list?name=deploy").ok()?;
        (list[0]["ID"] == fired["ID"]).then_some(list)
    });
    assert_eq!(list[0]["Name"], "deploy");
    assert_eq!(agent.put("/v1/event/fire/x?tag=a", "").0, 400);
}

#[test]
fn agent_service_hash_blocking() {
    let agent = TestAgent::dev(&[]);
    agent.put("/v1/agent/service/register", r#"{"Name":"h","Port":1}"#);
    let (_, headers, body) = agent.request("GET", "/v1/agent/service/h", None);
    let hash = header(&headers, "x-consul-contenthash")
        .unwrap()
        .to_string();
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["ContentHash"], hash.as_str());
    let port = agent.http_port;
    let h = hash.clone();
    let waiter = std::thread::spawn(move || {
        common::http_request(
            port,
            "GET",
            &format!("/v1/agent/service/h?hash={h}&wait=20s"),
            None,
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished());
    agent.put("/v1/agent/service/register", r#"{"Name":"h","Port":2}"#);
    let (_, headers, body) = waiter.join().unwrap();
    assert_ne!(header(&headers, "x-consul-contenthash").unwrap(), hash);
    assert!(body.contains("\"Port\":2"), "{body}");
    assert_eq!(agent.request("GET", "/v1/agent/service/none", None).0, 404);
}

/// `/v1/catalog/services?filter=` filters instances and lists each
/// service with the tags of its matching instances only (Consul's
/// `servicesTagsByName`); no match is `{}`.
#[test]
fn catalog_services_filter_aggregates_the_tags_of_matching_instances() {
    let agent = TestAgent::dev(&[]);
    for (i, tags) in [(1, r#"["a","shared"]"#), (2, r#"["b","shared"]"#)] {
        let (status, body) = agent.put(
            "/v1/catalog/register",
            &format!(
                r#"{{"Node":"n{i}","Address":"10.0.0.{i}","Service":{{"ID":"web{i}","Service":"web","Tags":{tags},"Meta":{{"v":"{i}"}}}}}}"#
            ),
        );
        assert_eq!(status, 200, "{body}");
    }
    let all: Value = agent.get("/v1/catalog/services").unwrap();
    assert_eq!(all["web"], serde_json::json!(["a", "b", "shared"]));
    let one: Value = agent
        .get("/v1/catalog/services?filter=ServiceMeta.v%20%3D%3D%20%221%22")
        .unwrap();
    assert_eq!(one, serde_json::json!({"web": ["a", "shared"]}));
    let none = agent
        .get_text("/v1/catalog/services?filter=ServiceName%20%3D%3D%20nope")
        .unwrap();
    assert_eq!(none, "{}");
}

/// `/v1/catalog/gateway-services/:gw` from the gateways' config entries,
/// in Consul's row shape: ingress listeners (port, protocol, hosts) with
/// `*` standing for every service with a mesh instance of the listener's
/// protocol, terminating services with their TLS files; `[]` for a
/// gateway without an entry.
#[test]
fn gateway_services_come_from_the_gateway_config_entries() {
    let agent = TestAgent::dev(&[]);
    for body in [
        r#"{"Name":"api","Port":80,"Connect":{"SidecarService":{}}}"#,
        r#"{"Name":"web","Port":80,"Connect":{"SidecarService":{}}}"#,
        r#"{"Name":"legacy","Port":80}"#,
    ] {
        let (status, text) = agent.put("/v1/agent/service/register", body);
        assert_eq!(status, 200, "{text}");
    }
    for entry in [
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http"}),
        json!({"Kind": "service-defaults", "Name": "shop", "Protocol": "http"}),
        json!({"Kind": "ingress-gateway", "Name": "edge", "Listeners": [
            {"Port": 8080, "Protocol": "http", "Services": [{"Name": "*"}]},
            {"Port": 9090, "Protocol": "tcp", "Services": [{"Name": "api"}]},
            {"Port": 9191, "Protocol": "http", "Services": [{"Name": "shop", "Hosts": ["shop.example.com"]}]}
        ]}),
        json!({"Kind": "terminating-gateway", "Name": "egress", "Services": [
            {"Name": "legacy", "CAFile": "/etc/ca.pem", "SNI": "legacy.internal"}
        ]}),
    ] {
        let (status, text) = agent.put("/v1/config", &entry.to_string());
        assert_eq!(status, 200, "{text}");
    }
    let wait_synced = || {
        eventually(Duration::from_secs(10), || {
            let services: Value = agent.get("/v1/catalog/services").ok()?;
            services.get("legacy").map(|_| ())
        })
    };
    wait_synced();
    let edge: Value = agent.get("/v1/catalog/gateway-services/edge").unwrap();
    let rows = edge.as_array().unwrap();
    // The http listener's wildcard takes web (http, with a sidecar), not
    // api (tcp, and named outright) nor legacy (no mesh instance).
    let wildcard: Vec<&Value> = rows.iter().filter(|r| r["Port"] == 8080).collect();
    assert_eq!(wildcard.len(), 1, "{edge}");
    assert_eq!(wildcard[0]["Service"]["Name"], "web");
    assert_eq!(wildcard[0]["FromWildcard"], true);
    assert_eq!(wildcard[0]["Protocol"], "http");
    assert_eq!(wildcard[0]["GatewayKind"], "ingress-gateway");
    assert_eq!(wildcard[0]["Gateway"], json!({"Name": "edge"}));
    let api = rows.iter().find(|r| r["Port"] == 9090).unwrap();
    assert_eq!(api["Service"], json!({"Name": "api"}));
    assert_eq!(api["Protocol"], "tcp");
    assert!(api.get("FromWildcard").is_none() && api.get("Hosts").is_none());
    let shop = rows.iter().find(|r| r["Port"] == 9191).unwrap();
    assert_eq!(shop["Hosts"], json!(["shop.example.com"]));
    assert!(shop.get("CAFile").is_none());
    assert!(shop["CreateIndex"].as_u64().unwrap() > 0);
    assert_eq!(rows.len(), 3, "{edge}");

    let egress: Value = agent.get("/v1/catalog/gateway-services/egress").unwrap();
    assert_eq!(egress[0]["Service"]["Name"], "legacy", "{egress}");
    assert_eq!(egress[0]["GatewayKind"], "terminating-gateway");
    assert_eq!(egress[0]["CAFile"], "/etc/ca.pem");
    assert_eq!(egress[0]["SNI"], "legacy.internal");
    assert!(egress[0].get("CertFile").is_none() && egress[0].get("Port").is_none());
    assert_eq!(
        agent
            .get_text("/v1/catalog/gateway-services/nobody")
            .unwrap(),
        "[]"
    );

    // /v1/health/ingress/:service: the instances of the ingress gateways
    // that expose it.
    let (status, text) = agent.put(
        "/v1/agent/service/register",
        r#"{"Kind":"ingress-gateway","Name":"edge","Port":8443}"#,
    );
    assert_eq!(status, 200, "{text}");
    let ingress = eventually(Duration::from_secs(10), || {
        let found: Value = agent.get("/v1/health/ingress/web").ok()?;
        (found.as_array()?.len() == 1).then_some(found)
    });
    assert_eq!(ingress[0]["Service"]["Service"], "edge");
    assert_eq!(ingress[0]["Service"]["Kind"], "ingress-gateway");
    assert!(ingress[0]["Checks"].is_array());
    assert_eq!(agent.get_text("/v1/health/ingress/legacy").unwrap(), "[]");
}
