//! ACLs across two datacenters, through the binary with each server on its
//! own loopback address: a secondary that does not hold a token asks the
//! primary for it (Consul's remote resolution), so global tokens work in
//! both and through `?dc=`; a token local to dc1 is refused in dc2 with
//! Consul's `This is a local token in datacenter "dc1"`; a token local to
//! dc2 is unknown in dc1; a token deleted in the primary is refused in the
//! secondary once its `token_ttl` runs out; and with the primary gone the
//! secondary keeps its last answers (`extend-cache`).

mod common;

use std::time::Duration;

use common::acl::try_call_with_token;
use common::{eventually, DatacenterServer};
use serde_json::Value;

const ROOT: &str = "0b7c3f55-1d2e-4a6b-9c8d-2e4f6a8b0c1d";

fn acl_flag() -> String {
    format!(
        "-hcl=acl {{ enabled = true default_policy = \"deny\" token_ttl = \"2s\" tokens {{ initial_management = \"{ROOT}\" }} }}"
    )
}

fn try_call(
    server: &DatacenterServer,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> Option<(u16, String)> {
    try_call_with_token(server.agent.http_port, method, path, token, body)
}

fn call(
    server: &DatacenterServer,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> (u16, String) {
    try_call(server, method, path, token, body).expect("the agent answers")
}

fn create_token(server: &DatacenterServer, body: &str) -> String {
    let (status, text) = call(server, "PUT", "/v1/acl/token", ROOT, Some(body));
    assert_eq!(status, 200, "{text}");
    let token: Value = serde_json::from_str(&text).unwrap();
    token["SecretID"].as_str().unwrap().to_string()
}

#[test]
fn tokens_are_resolved_across_datacenters_as_consul_does() {
    let acl = acl_flag();
    let dc1 = DatacenterServer::launch(
        "a1",
        "127.0.0.161",
        "dc1",
        None,
        &[],
        std::slice::from_ref(&acl),
    );
    let dc2 = &DatacenterServer::launch(
        "a2",
        "127.0.0.162",
        "dc2",
        Some("127.0.0.161"),
        &[],
        std::slice::from_ref(&acl),
    );
    for s in [&dc1, dc2] {
        eventually(Duration::from_secs(30), || {
            let (status, text) = try_call(s, "GET", "/v1/catalog/nodes", ROOT, None)?;
            (status == 200 && text.len() > 2).then_some(())
        });
    }
    for s in [&dc1, dc2] {
        eventually(Duration::from_secs(30), || {
            let dcs = s.agent.get("/v1/catalog/datacenters").ok()?;
            (dcs.as_array()?.len() == 2).then_some(())
        });
    }
    let (status, text) = call(
        &dc1,
        "PUT",
        "/v1/acl/policy",
        ROOT,
        Some(r#"{"Name":"kv","Rules":"key_prefix \"\" { policy = \"write\" }"}"#),
    );
    assert_eq!(status, 200, "{text}");
    let global = create_token(&dc1, r#"{"Policies":[{"Name":"kv"}]}"#);
    let kept = create_token(&dc1, r#"{"Policies":[{"Name":"kv"}]}"#);
    let local = create_token(&dc1, r#"{"Policies":[{"Name":"kv"}],"Local":true}"#);

    // A global token works in the secondary, asked directly or via ?dc=.
    let (status, text) = call(dc2, "PUT", "/v1/kv/from-dc2", &global, Some("x"));
    assert_eq!((status, text.as_str()), (200, "true"));
    let (status, text) = call(&dc1, "PUT", "/v1/kv/via-dc1?dc=dc2", &global, Some("y"));
    assert_eq!((status, text.as_str()), (200, "true"));
    let (status, _) = call(dc2, "GET", "/v1/kv/via-dc1", &kept, None);
    assert_eq!(status, 200);
    // The management token too; the anonymous token is the primary's.
    let (status, _) = call(dc2, "GET", "/v1/kv/from-dc2", ROOT, None);
    assert_eq!(status, 200);
    let (status, text) = call(dc2, "GET", "/v1/kv/from-dc2", "", None);
    assert_eq!(status, 403);
    assert!(
        text.contains("anonymous token lacks permission 'key:read'"),
        "{text}"
    );
    let (status, text) = call(
        dc2,
        "GET",
        "/v1/kv/from-dc2",
        "5e2a4c6e-0000-4000-8000-000000000001",
        None,
    );
    assert_eq!((status, text.as_str()), (403, "ACL not found"));

    // dc1's local token works in dc1 and nowhere else.
    let (status, _) = call(&dc1, "PUT", "/v1/kv/local", &local, Some("z"));
    assert_eq!(status, 200);
    let refusal = "Permission denied: This is a local token in datacenter \"dc1\"";
    let (status, text) = call(dc2, "GET", "/v1/kv/from-dc2", &local, None);
    assert_eq!((status, text.as_str()), (403, refusal));
    let (status, text) = call(&dc1, "PUT", "/v1/kv/x?dc=dc2", &local, Some("z"));
    assert_eq!((status, text.as_str()), (403, refusal));
    let (status, _) = call(dc2, "GET", "/v1/kv/x", ROOT, None);
    assert_eq!(status, 404, "nothing was written with the refused token");

    // A token local to dc2 lives there and is unknown to the primary.
    let dc2_local = create_token(
        dc2,
        r#"{"Local":true,"ServiceIdentities":[{"ServiceName":"web"}]}"#,
    );
    let (status, text) = call(dc2, "GET", "/v1/acl/token/self", &dc2_local, None);
    assert_eq!(status, 200, "{text}");
    let (status, _) = call(dc2, "GET", "/v1/catalog/service/web", &dc2_local, None);
    assert_eq!(status, 200);
    let (status, text) = call(dc2, "GET", "/v1/catalog/services?dc=dc1", &dc2_local, None);
    assert_eq!((status, text.as_str()), (403, "ACL not found"));
    let (status, _) = call(&dc1, "GET", "/v1/acl/token/self", &dc2_local, None);
    assert_eq!(status, 403);

    // Deleted in the primary: refused in the secondary once its TTL ran out.
    let accessor: Value =
        serde_json::from_str(&call(&dc1, "GET", "/v1/acl/token/self", &global, None).1).unwrap();
    let accessor = accessor["AccessorID"].as_str().unwrap();
    let (status, _) = call(
        &dc1,
        "DELETE",
        &format!("/v1/acl/token/{accessor}"),
        ROOT,
        None,
    );
    assert_eq!(status, 200);
    eventually(Duration::from_secs(20), || {
        let (status, text) = call(dc2, "GET", "/v1/kv/from-dc2", &global, None);
        (status == 403 && text == "ACL not found").then_some(())
    });

    // The primary goes: the secondary keeps the answers it had
    // (extend-cache, the default) past their TTL; unknown tokens get the
    // default policy (deny).
    let (status, _) = call(dc2, "GET", "/v1/kv/from-dc2", &kept, None);
    assert_eq!(status, 200);
    drop(dc1);
    std::thread::sleep(Duration::from_secs(3));
    let (status, text) = call(dc2, "GET", "/v1/kv/from-dc2", &kept, None);
    assert_eq!(status, 200, "{text}");
    let log = dc2.agent.log_text();
    assert!(
        log.contains("the primary could not resolve a token; applying down_policy"),
        "{log}"
    );
    let (status, text) = call(
        dc2,
        "GET",
        "/v1/kv/from-dc2",
        "5e2a4c6e-0000-4000-8000-000000000002",
        None,
    );
    assert_eq!(status, 403, "{text}");
}
