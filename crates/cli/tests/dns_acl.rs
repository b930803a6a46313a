//! DNS with ACLs, through `dig` against a dev agent denying by default:
//! lookups read with `acl.tokens.dns`, else `default`, else the anonymous
//! token, and the servers answer only what that token may read (a service
//! or node it may not read has no records).

mod common;

use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::dig::dig;
use common::{eventually, free_port};
use serde_json::Value;

#[test]
fn lookups_use_the_dns_token_then_the_default_token_and_see_what_it_may_read() {
    let dns = free_port();
    let acl = Acl::start_full(
        "",
        &format!("agent = \"{ROOT}\""),
        &["-node=node1", "-grpc-port=-1", &format!("-dns-port={dns}")],
    );
    let call = |method: &str, path: &str, body: Option<&str>| {
        let (status, _, text) = acl.call(method, path, Some(ROOT), body);
        (status, text)
    };
    for body in [
        r#"{"Name":"web","Port":8080}"#,
        r#"{"Name":"db","Port":9090}"#,
    ] {
        let (status, text) = call("PUT", "/v1/agent/service/register", Some(body));
        assert_eq!(status, 200, "{text}");
    }
    eventually(Duration::from_secs(30), || {
        let (status, text) = call("GET", "/v1/catalog/services", None);
        let services: Value = serde_json::from_str(&text).ok()?;
        (status == 200 && services.get("web").is_some() && services.get("db").is_some())
            .then_some(())
    });

    // The anonymous token reads nothing: no service, no node.
    assert_eq!(dig(dns, &["web.service.consul", "A"]).status, "NXDOMAIN");
    assert_eq!(dig(dns, &["node1.node.consul", "A"]).status, "NXDOMAIN");

    // A dns token that reads web and the nodes, not db.
    let secret = acl.token_with_rules(
        "dns-web",
        "service \"web\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }",
    );
    let secret = secret.as_str();
    let set = |kind: &str, value: &str| {
        let body = format!(r#"{{"Token":"{value}"}}"#);
        let (status, text) = call("PUT", &format!("/v1/agent/token/{kind}"), Some(&body));
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
