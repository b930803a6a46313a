//! Config entries over HTTP and the CLI: write/read/list/delete, CAS,
//! blocking, bootstrap from the agent config, and refusals.

mod common;

use std::time::{Duration, Instant};

use common::{header, write, TestAgent};
use serde_json::{json, Value};

#[test]
fn http_crud_cas_and_blocking() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"kind":"service-defaults","name":"web","protocol":"http","meta":{"owner_team":"a"}}"#,
    );
    assert_eq!((status, body.as_str()), (200, "true"));
    let entry = agent.get("/v1/config/service-defaults/web").unwrap();
    assert_eq!(entry["Kind"], "service-defaults");
    assert_eq!(entry["Name"], "web");
    assert_eq!(entry["Protocol"], "http");
    assert_eq!(
        entry["Meta"],
        json!({"owner_team": "a"}),
        "Meta keys are user data"
    );
    let index = entry["ModifyIndex"].as_u64().unwrap();
    assert_eq!(entry["CreateIndex"], index);

    // CAS: 0 only creates; a stale index fails; the current one wins.
    assert_eq!(
        agent
            .put(
                "/v1/config?cas=0",
                r#"{"Kind":"service-defaults","Name":"web","Protocol":"grpc"}"#
            )
            .1,
        "false"
    );
    assert_eq!(
        agent
            .put(
                &format!("/v1/config?cas={}", index + 100),
                r#"{"Kind":"service-defaults","Name":"web","Protocol":"grpc"}"#
            )
            .1,
        "false"
    );
    assert_eq!(
        agent
            .put(
                &format!("/v1/config?cas={index}"),
                r#"{"Kind":"service-defaults","Name":"web","Protocol":"grpc"}"#
            )
            .1,
        "true"
    );
    let entry = agent.get("/v1/config/service-defaults/web").unwrap();
    assert_eq!(entry["Protocol"], "grpc");
    assert_eq!(entry["CreateIndex"], index);

    agent.put(
        "/v1/config",
        r#"{"Kind":"service-defaults","Name":"api","Protocol":"tcp"}"#,
    );
    agent.put(
        "/v1/config",
        r#"{"Kind":"proxy-defaults","Name":"global","Config":{"local_connect_timeout_ms":1000}}"#,
    );
    let list = agent.get("/v1/config/service-defaults").unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["api", "web"]);
    assert_eq!(
        agent.get("/v1/config/proxy-defaults/global").unwrap()["Config"]
            ["local_connect_timeout_ms"],
        1000
    );
    assert_eq!(agent.get("/v1/config/service-router").unwrap(), json!([]));

    // A blocking list wakes on a write.
    let (_, headers, _) = agent.request("GET", "/v1/config/service-defaults", None);
    let index: u64 = header(&headers, "x-consul-index").unwrap().parse().unwrap();
    let port = agent.http_port;
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let result = common::http_request(
            port,
            "GET",
            &format!("/v1/config/service-defaults?index={index}&wait=30s"),
            None,
        );
        (started.elapsed(), result)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished());
    agent.put(
        "/v1/config",
        r#"{"Kind":"service-defaults","Name":"late","Protocol":"http"}"#,
    );
    let (elapsed, (_, _, body)) = waiter.join().unwrap();
    assert!(elapsed < Duration::from_secs(10));
    assert!(body.contains("\"late\""), "{body}");

    // Delete with CAS, then plain.
    let current = agent.get("/v1/config/service-defaults/api").unwrap()["ModifyIndex"]
        .as_u64()
        .unwrap();
    assert_eq!(
        agent
            .request(
                "DELETE",
                &format!("/v1/config/service-defaults/api?cas={}", current + 1),
                None
            )
            .2,
        "false"
    );
    assert_eq!(
        agent
            .request(
                "DELETE",
                &format!("/v1/config/service-defaults/api?cas={current}"),
                None
            )
            .2,
        "true"
    );
    assert_eq!(
        agent
            .request("DELETE", "/v1/config/service-defaults/late", None)
            .2,
        "true"
    );
    let (status, _, body) = agent.request("GET", "/v1/config/service-defaults/api", None);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("Config entry not found"), "{body}");
}

#[test]
fn bad_entries_are_refused() {
    let agent = TestAgent::dev(&[]);
    for (body, needle) in [
        ("{not json", "Request decode failed"),
        (r#"{"Name":"web"}"#, "Kind is required"),
        (
            r#"{"Kind":"service-nonsense","Name":"web"}"#,
            "invalid config entry kind",
        ),
        (r#"{"Kind":"service-defaults"}"#, "Name is required"),
        (r#"{"Kind":"proxy-defaults","Name":"web"}"#, "global"),
        (r#"{"Kind":"mesh","Name":"other"}"#, "mesh"),
        (
            r#"{"Kind":"service-defaults","Name":"web","Meta":{"k":1}}"#,
            "Meta",
        ),
    ] {
        let (status, text) = agent.put("/v1/config", body);
        assert_eq!(status, 400, "{body} -> {text}");
        assert!(
            text.contains(needle),
            "{body}: {text:?} should mention {needle:?}"
        );
    }
    assert_eq!(agent.request("GET", "/v1/config/bogus-kind", None).0, 400);
    assert_eq!(
        agent
            .put("/v1/config?cas=abc", r#"{"Kind":"mesh","Name":"mesh"}"#)
            .0,
        400
    );
}

#[test]
fn writes_that_break_a_chain_are_refused() {
    let agent = TestAgent::dev(&[]);
    // A splitter on a tcp service is refused, naming the chain.
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-splitter","Name":"web","Splits":[{"Weight":100}]}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("discovery chain \"web\"")
            && body.contains("does not permit advanced routing"),
        "{body}"
    );
    assert_eq!(
        agent
            .put(
                "/v1/config",
                r#"{"Kind":"service-defaults","Name":"web","Protocol":"http"}"#
            )
            .1,
        "true"
    );
    assert_eq!(agent.put("/v1/config", r#"{"Kind":"service-resolver","Name":"web","Subsets":{"v1":{"Filter":"Service.Meta.v == 1"}}}"#).1, "true");
    assert_eq!(agent.put("/v1/config", r#"{"Kind":"service-splitter","Name":"web","Splits":[{"Weight":100,"ServiceSubset":"v1"}]}"#).1, "true");
    // Now the defaults cannot go back to tcp, nor can they be deleted, nor the subset removed.
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-defaults","Name":"web","Protocol":"tcp"}"#,
    );
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = agent.request("DELETE", "/v1/config/service-defaults/web", None);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("discovery chain \"web\""), "{body}");
    let (status, body) = agent.put("/v1/config", r#"{"Kind":"service-resolver","Name":"web"}"#);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("does not have a subset named \"v1\""),
        "{body}"
    );
    // Removing the splitter first makes both allowed.
    assert_eq!(
        agent
            .request("DELETE", "/v1/config/service-splitter/web", None)
            .2,
        "true"
    );
    assert_eq!(
        agent
            .request("DELETE", "/v1/config/service-defaults/web", None)
            .2,
        "true"
    );
}

#[test]
fn cli_write_read_list_delete() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let hcl = write(
        dir.path(),
        "web-defaults.hcl",
        "Kind = \"service-defaults\"\nName = \"web\"\nProtocol = \"http\"\n",
    );
    let out = agent.cli(&["config", "write", &hcl.display().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Config entry written: service-defaults/web"
    );
    // The router sends to "admin", which must speak the same protocol.
    let admin = write(
        dir.path(),
        "admin.hcl",
        "Kind = \"service-defaults\"\nName = \"admin\"\nProtocol = \"http\"\n",
    );
    assert!(agent
        .cli(&["config", "write", &admin.display().to_string()])
        .status
        .success());
    let router = write(
        dir.path(),
        "router.hcl",
        "kind = \"service-router\"\nname = \"web\"\nroutes {\n  match { http { path_prefix = \"/admin\" } }\n  destination { service = \"admin\" }\n}\n",
    );
    let out = agent.cli(&["config", "write", &router.display().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = agent.get("/v1/config/service-router/web").unwrap();
    assert_eq!(stored["Routes"][0]["Match"]["HTTP"]["PathPrefix"], "/admin");
    assert_eq!(stored["Routes"][0]["Destination"]["Service"], "admin");

    let out = agent.cli(&[
        "config",
        "read",
        "-kind",
        "service-defaults",
        "-name",
        "web",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed["Protocol"], "http");
    assert!(
        text.contains("\n    \"Kind\""),
        "four-space indent like Consul: {text}"
    );
    let out = agent.cli(&["config", "list", "-kind", "service-defaults"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "admin\nweb\n");

    // -cas with a stale index is refused with exit 1.
    let out = agent.cli(&[
        "config",
        "write",
        "-cas",
        "-modify-index=1",
        &hcl.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not updated"));

    // The router still needs web's http protocol: deleting the defaults first is refused.
    let out = agent.cli(&[
        "config",
        "delete",
        "-kind",
        "service-defaults",
        "-name",
        "web",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(stderr.contains("discovery chain"), "{stderr}");
    let out = agent.cli(&[
        "config",
        "delete",
        "-kind",
        "service-router",
        "-name",
        "web",
    ]);
    assert!(out.status.success());
    let out = agent.cli(&[
        "config",
        "delete",
        "-kind",
        "service-defaults",
        "-name",
        "web",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Config entry deleted: service-defaults/web"
    );
    let out = agent.cli(&[
        "config",
        "read",
        "-kind",
        "service-defaults",
        "-name",
        "web",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = agent.cli(&["config", "read", "-kind", "service-defaults"]);
    assert_eq!(out.status.code(), Some(1));
    let bad = write(
        dir.path(),
        "bad.hcl",
        "Kind = \"service-defaults\"\nName = \n",
    );
    let out = agent.cli(&["config", "write", &bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad.hcl"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bootstrap_entries_are_written_once_and_never_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "bootstrap.hcl",
        "config_entries {\n  bootstrap = [\n    { kind = \"proxy-defaults\", name = \"global\", config { protocol = \"http\" } },\n    { kind = \"service-defaults\", name = \"web\", protocol = \"http\" }\n  ]\n}\n",
    );
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().display().to_string();
    let ports = common::own_server_ports();
    let flags = [
        "-server",
        &ports[0],
        &ports[1],
        &ports[2],
        "-bootstrap-expect=1",
        "-bind=127.0.0.1",
        "-node=boot",
        "-data-dir",
        &data_dir,
        "-config-file",
        &config.display().to_string(),
    ];
    let mut agent = TestAgent::start(&flags);
    let entry = common::eventually(Duration::from_secs(5), || {
        agent.get("/v1/config/service-defaults/web").ok()
    });
    assert_eq!(entry["Protocol"], "http");
    assert_eq!(
        agent.get("/v1/config/proxy-defaults/global").unwrap()["Config"]["protocol"],
        "http"
    );
    // A change through the API survives a restart with the same bootstrap list.
    assert_eq!(
        agent
            .put(
                "/v1/config",
                r#"{"Kind":"service-defaults","Name":"web","Protocol":"grpc"}"#
            )
            .1,
        "true"
    );
    agent.kill9();
    let agent = TestAgent::start(&flags);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        agent.get("/v1/config/service-defaults/web").unwrap()["Protocol"],
        "grpc"
    );

    // An invalid bootstrap entry stops the agent at start, naming it.
    let bad = write(
        dir.path(),
        "bad.hcl",
        "config_entries {\n  bootstrap = [ { kind = \"proxy-defaults\", name = \"nope\" } ]\n}\n",
    );
    let out = std::process::Command::new(common::binary())
        .args([
            "agent",
            "-dev",
            "-http-port=-1",
            "-config-file",
            &bad.display().to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("config_entries.bootstrap[0]"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn discovery_chain_endpoint_follows_the_issue_walkthrough() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("service-defaults-web.hcl", "Kind = \"service-defaults\"\nName = \"web\"\nProtocol = \"http\"\n"),
        (
            "web-resolver.hcl",
            "Kind = \"service-resolver\"\nName = \"web\"\nSubsets = {\n  v1 = { Filter = \"Service.Meta.version == v1\" }\n  v2 = { Filter = \"Service.Meta.version == v2\" }\n}\n",
        ),
        (
            "web-splitter.hcl",
            "Kind = \"service-splitter\"\nName = \"web\"\nSplits = [\n  { Weight = 90, ServiceSubset = \"v1\" },\n  { Weight = 10, ServiceSubset = \"v2\" },\n]\n",
        ),
    ];
    for (name, text) in files {
        let path = write(dir.path(), name, text);
        let out = agent.cli(&["config", "write", &path.display().to_string()]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = agent.cli(&[
        "config",
        "read",
        "-kind",
        "service-splitter",
        "-name",
        "web",
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"ServiceSubset\": \"v1\""));

    let response = common::eventually(Duration::from_secs(5), || {
        let (status, _, body) = agent.request("GET", "/v1/discovery-chain/web", None);
        (status == 200).then(|| serde_json::from_str::<Value>(&body).unwrap())
    });
    let chain = &response["Chain"];
    assert_eq!(chain["ServiceName"], "web");
    assert_eq!(chain["Protocol"], "http");
    assert_eq!(chain["StartNode"], "splitter:web.default.default");
    assert_eq!(
        chain["Nodes"]["splitter:web.default.default"]["Splits"][0]["NextNode"],
        "resolver:v1.web.default.default.dc1"
    );
    let sni = chain["Targets"]["v1.web.default.default.dc1"]["SNI"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sni.starts_with("v1.web.default.dc1.internal.") && sni.ends_with(".consul"),
        "{sni}"
    );

    let (status, headers, body) = agent.request(
        "POST",
        "/v1/discovery-chain/web",
        Some(r#"{"OverrideProtocol":"tcp","OverrideConnectTimeout":"7s"}"#),
    );
    assert_eq!(status, 200, "{body}");
    let overridden: Value = serde_json::from_str(&body).unwrap();
    let chain = &overridden["Chain"];
    assert_eq!(chain["Protocol"], "tcp");
    assert_eq!(
        chain["StartNode"], "resolver:web.default.default.dc1",
        "tcp chains skip the splitter"
    );
    assert_ne!(chain["CustomizationHash"], "");
    assert_eq!(
        chain["Targets"]["web.default.default.dc1"]["ConnectTimeout"],
        "7s"
    );
    let index: u64 = header(&headers, "x-consul-index").unwrap().parse().unwrap();

    // Blocking on the chain wakes when an entry changes.
    let port = agent.http_port;
    let waiter = std::thread::spawn(move || {
        common::http_request(
            port,
            "GET",
            &format!("/v1/discovery-chain/web?index={index}&wait=30s"),
            None,
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished());
    assert_eq!(agent.put("/v1/config", r#"{"Kind":"service-resolver","Name":"web","ConnectTimeout":"3s","Subsets":{"v1":{"Filter":"Service.Meta.version == v1"},"v2":{"Filter":"Service.Meta.version == v2"}}}"#).1, "true");
    let (_, _, body) = waiter.join().unwrap();
    assert!(body.contains("\"ConnectTimeout\":\"3s\""), "{body}");

    // Compile for another datacenter, and refuse bad overrides.
    let other: Value = serde_json::from_str(
        &agent
            .get_text("/v1/discovery-chain/db?compile-dc=dc2")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        other["Chain"]["StartNode"],
        "resolver:db.default.default.dc2"
    );
    assert_eq!(other["Chain"]["Default"], true);
    let (status, _, body) = agent.request(
        "POST",
        "/v1/discovery-chain/web",
        Some(r#"{"OverrideProtocol":"smtp"}"#),
    );
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = agent.request(
        "POST",
        "/v1/discovery-chain/web",
        Some(r#"{"OverrideConnectTimeout":"soon"}"#),
    );
    assert_eq!(status, 400, "{body}");
    let (status, _, body) =
        agent.request("POST", "/v1/discovery-chain/web", Some(r#"{"Bogus":1}"#));
    assert_eq!(status, 400, "{body}");
}

#[test]
fn intentions_entries_are_normalized_on_write() {
    let agent = TestAgent::dev(&[]);
    // L7 permissions need an HTTP-family protocol at the destination.
    assert_eq!(
        agent.put(
            "/v1/config",
            r#"{"Kind":"service-defaults","Name":"api","Protocol":"http"}"#
        ),
        (200, "true".to_string())
    );
    let body = r#"{"Kind":"service-intentions","Name":"api","Sources":[
        {"Name":"*","Action":"deny"},
        {"Name":"web","Action":"allow"},
        {"Name":"reporter","Permissions":[{"Action":"allow","HTTP":{"PathPrefix":"/v2","Methods":["get"]}}]}]}"#;
    assert_eq!(agent.put("/v1/config", body), (200, "true".to_string()));
    let entry = agent.get("/v1/config/service-intentions/api").unwrap();
    let sources = entry["Sources"].as_array().unwrap();
    let order: Vec<(&str, i64)> = sources
        .iter()
        .map(|s| {
            (
                s["Name"].as_str().unwrap(),
                s["Precedence"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(order, vec![("web", 9), ("reporter", 9), ("*", 8)]);
    assert!(sources.iter().all(|s| s["Type"] == "consul"));
    assert_eq!(
        sources[1]["Permissions"][0]["HTTP"]["Methods"],
        json!(["GET"])
    );
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-intentions","Name":"api","Sources":[]}"#,
    );
    assert_eq!(status, 400);
    assert!(body.contains("At least one source is required"), "{body}");
}
