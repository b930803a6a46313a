//! `acl.down_policy` on client agents whose servers are gone: a token
//! resolved before keeps its answer past `token_ttl` with `extend-cache`,
//! and `deny` refuses it, `allow` lets even an unknown token through.

mod common;

use std::time::Duration;

use common::acl::try_call_with_token;
use common::{eventually, TestAgent};

const ROOT: &str = "3c0f9a52-6c51-4d3a-b0e2-7f1d2a9e4b11";

fn acl_hcl(down_policy: &str) -> String {
    format!(
        "-hcl=acl {{ enabled = true default_policy = \"deny\" down_policy = \"{down_policy}\" token_ttl = \"1s\" tokens {{ initial_management = \"{ROOT}\" }} }}"
    )
}

fn call(
    agent: &TestAgent,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> Option<(u16, String)> {
    try_call_with_token(agent.http_port, method, path, token, body)
}

fn client(ip: &str, dir: &tempfile::TempDir, down_policy: &str) -> TestAgent {
    TestAgent::spawn(
        &[
            "-node",
            &format!("client-{down_policy}"),
            &format!("-bind={ip}"),
            &format!("-data-dir={}", dir.path().display()),
            "-retry-join=127.0.0.201",
            "-retry-interval=1s",
            &acl_hcl(down_policy),
        ],
        true,
    )
}

#[test]
fn a_client_agent_without_servers_follows_its_down_policy() {
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut server = TestAgent::spawn(
        &[
            "-server",
            "-bootstrap-expect=1",
            "-node=acl-server",
            "-bind=127.0.0.201",
            &format!("-data-dir={}", dirs[0].path().display()),
            &acl_hcl("extend-cache"),
        ],
        true,
    );
    eventually(Duration::from_secs(30), || {
        let (status, _) = call(&server, "GET", "/v1/acl/token/self", ROOT, None)?;
        (status == 200).then_some(())
    });
    let policy = call(
        &server,
        "PUT",
        "/v1/acl/policy",
        ROOT,
        Some(r#"{"Name":"agents","Rules":"agent_prefix \"\" { policy = \"read\" }"}"#),
    )
    .unwrap();
    assert_eq!(policy.0, 200, "{}", policy.1);
    let token = call(
        &server,
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(r#"{"Policies":[{"Name":"agents"}]}"#),
    )
    .unwrap();
    let token: serde_json::Value = serde_json::from_str(&token.1).unwrap();
    let secret = token["SecretID"].as_str().unwrap().to_string();
    let extend = client("127.0.0.202", &dirs[1], "extend-cache");
    let deny = client("127.0.0.203", &dirs[2], "deny");
    let allow = client("127.0.0.204", &dirs[3], "allow");
    // With the servers up, the token is resolved (and cached) by each.
    for agent in [&extend, &deny, &allow] {
        eventually(Duration::from_secs(30), || {
            let (status, _) = call(agent, "GET", "/v1/agent/self", &secret, None)?;
            (status == 200).then_some(())
        });
        let (status, _) = call(agent, "GET", "/v1/agent/self", "", None).unwrap();
        assert_eq!(status, 403, "anonymous may not read the agent");
    }
    // The servers go; the cache entries outlive their 1 s TTL.
    server.kill9();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        call(&extend, "GET", "/v1/agent/self", &secret, None)
            .unwrap()
            .0,
        200,
        "extend-cache keeps the last answer: {}",
        extend.log_text()
    );
    assert_eq!(
        call(&deny, "GET", "/v1/agent/self", &secret, None)
            .unwrap()
            .0,
        403
    );
    assert_eq!(
        call(
            &allow,
            "GET",
            "/v1/agent/self",
            "11111111-2222-3333-4444-555555555555",
            None
        )
        .unwrap()
        .0,
        200
    );
    // extend-cache with nothing cached falls back to the default policy (deny).
    assert_eq!(
        call(
            &extend,
            "GET",
            "/v1/agent/self",
            "11111111-2222-3333-4444-555555555555",
            None
        )
        .unwrap()
        .0,
        403
    );
}

#[test]
fn a_deleted_token_is_refused_by_a_client_agent_long_before_its_ttl() {
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let long_ttl = format!(
        "-hcl=acl {{ enabled = true default_policy = \"deny\" token_ttl = \"10m\" tokens {{ initial_management = \"{ROOT}\" }} }}"
    );
    let server = TestAgent::spawn(
        &[
            "-server",
            "-bootstrap-expect=1",
            "-node=acl-server-2",
            "-bind=127.0.0.205",
            &format!("-data-dir={}", dirs[0].path().display()),
            &long_ttl,
        ],
        true,
    );
    eventually(Duration::from_secs(30), || {
        let (status, _) = call(&server, "GET", "/v1/acl/token/self", ROOT, None)?;
        (status == 200).then_some(())
    });
    let (status, body) = call(
        &server,
        "PUT",
        "/v1/acl/policy",
        ROOT,
        Some(r#"{"Name":"agents","Rules":"agent_prefix \"\" { policy = \"read\" }"}"#),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (_, body) = call(
        &server,
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(r#"{"Policies":[{"Name":"agents"}]}"#),
    )
    .unwrap();
    let token: serde_json::Value = serde_json::from_str(&body).unwrap();
    let (secret, accessor) = (
        token["SecretID"].as_str().unwrap().to_string(),
        token["AccessorID"].as_str().unwrap().to_string(),
    );
    let client = TestAgent::spawn(
        &[
            "-node=acl-client-2",
            "-bind=127.0.0.206",
            &format!("-data-dir={}", dirs[1].path().display()),
            "-retry-join=127.0.0.205",
            "-retry-interval=1s",
            &long_ttl,
        ],
        true,
    );
    eventually(Duration::from_secs(30), || {
        let (status, _) = call(&client, "GET", "/v1/agent/self", &secret, None)?;
        (status == 200).then_some(())
    });
    // Deleted at the server: the client agent, which cached the token for
    // ten minutes, refuses it within a few requests (the servers told it).
    let (status, _) = call(
        &server,
        "DELETE",
        &format!("/v1/acl/token/{accessor}"),
        ROOT,
        None,
    )
    .unwrap();
    assert_eq!(status, 200);
    eventually(Duration::from_secs(10), || {
        let (status, body) = call(&client, "GET", "/v1/agent/self", &secret, None)?;
        (status == 403 && body == "ACL not found").then_some(())
    });
}
