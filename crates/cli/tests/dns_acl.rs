//! DNS with ACLs, through `dig` against a dev agent denying by default:
//! lookups read with `acl.tokens.dns`, else `default`, else the anonymous
//! token, and the servers answer only what that token may read (a service
//! or node it may not read has no records).

mod common;

use std::time::Duration;

use common::dig::dig;
use common::{eventually, free_port, http_request_full, try_http_request_full, TestAgent};
use serde_json::Value;

const ROOT: &str = "3c9e1b7a-2f4d-4a8b-9e6c-5d7f8a9b0c1d";

fn call(agent: &TestAgent, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let (status, _, text) = http_request_full(
        agent.http_port,
        method,
        path,
        &[("X-Consul-Token", ROOT)],
        body,
    );
    (status, text)
}

#[test]
fn lookups_use_the_dns_token_then_the_default_token_and_see_what_it_may_read() {
    let dns = free_port();
    let hcl = format!(
        "acl {{ enabled = true default_policy = \"deny\" tokens {{ initial_management = \"{ROOT}\" agent = \"{ROOT}\" }} }}"
    );
    let agent = TestAgent::spawn(
        &[
            "-dev",
            "-node=node1",
            "-grpc-port=-1",
            &format!("-dns-port={dns}"),
            &format!("-hcl={hcl}"),
        ],
        false,
    );
    eventually(Duration::from_secs(30), || {
        let (status, _, _) = try_http_request_full(
            agent.http_port,
            "GET",
            "/v1/acl/token/self",
            &[("X-Consul-Token", ROOT)],
            None,
        )?;
        (status == 200).then_some(())
    });
    for body in [
        r#"{"Name":"web","Port":8080}"#,
        r#"{"Name":"db","Port":9090}"#,
    ] {
        let (status, text) = call(&agent, "PUT", "/v1/agent/service/register", Some(body));
        assert_eq!(status, 200, "{text}");
    }
    eventually(Duration::from_secs(30), || {
        let (status, text) = call(&agent, "GET", "/v1/catalog/services", None);
        let services: Value = serde_json::from_str(&text).ok()?;
        (status == 200 && services.get("web").is_some() && services.get("db").is_some())
            .then_some(())
    });

    // The anonymous token reads nothing: no service, no node.
    assert_eq!(dig(dns, &["web.service.consul", "A"]).status, "NXDOMAIN");
    assert_eq!(dig(dns, &["node1.node.consul", "A"]).status, "NXDOMAIN");

    // A dns token that reads web and the nodes, not db.
    let (status, policy) = call(
        &agent,
        "PUT",
        "/v1/acl/policy",
        Some(
            r#"{"Name":"dns-web","Rules":"service \"web\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }"}"#,
        ),
    );
    assert_eq!(status, 200, "{policy}");
    let (status, token) = call(
        &agent,
        "PUT",
        "/v1/acl/token",
        Some(r#"{"Policies":[{"Name":"dns-web"}]}"#),
    );
    assert_eq!(status, 200, "{token}");
    let token: Value = serde_json::from_str(&token).unwrap();
    let secret = token["SecretID"].as_str().unwrap();
    let set = |kind: &str, value: &str| {
        let body = format!(r#"{{"Token":"{value}"}}"#);
        let (status, text) = call(
            &agent,
            "PUT",
            &format!("/v1/agent/token/{kind}"),
            Some(&body),
        );
        assert_eq!(status, 200, "{text}");
    };
    set("dns", secret);
    let web = dig(dns, &["web.service.consul", "A"]);
    assert_eq!(web.status, "NOERROR");
    assert_eq!(web.answers_of("A"), vec!["127.0.0.1".to_string()]);
    assert_eq!(dig(dns, &["db.service.consul", "A"]).status, "NXDOMAIN");
    let node = dig(dns, &["node1.node.consul", "A"]);
    assert_eq!(node.answers_of("A"), vec!["127.0.0.1".to_string()]);

    // Without a dns token the default token is used.
    set("dns", "");
    assert_eq!(dig(dns, &["web.service.consul", "A"]).status, "NXDOMAIN");
    set("default", secret);
    assert_eq!(
        dig(dns, &["web.service.consul", "A"]).answers_of("A"),
        vec!["127.0.0.1".to_string()]
    );
    assert_eq!(dig(dns, &["db.service.consul", "A"]).status, "NXDOMAIN");
}
