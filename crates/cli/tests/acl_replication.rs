//! ACL replication across datacenters, through the binary with each
//! datacenter's servers in network namespaces that can be cut apart: dc1
//! is the primary; dc2 replicates policies, roles and global tokens
//! (`acl.enable_token_replication`); dc3 (in dc2's namespace) replicates
//! policies and roles only and resolves tokens in the primary with
//! `down_policy = "deny"`.
//!
//! Shown: `/v1/acl/replication` in Consul's shape in each datacenter; a
//! replication token without `acl:write` replicates policies and roles
//! but fails token replication with Consul's text; a local token of a
//! secondary gets its rules from a policy written in the primary, and
//! loses them when the primary changes it; a token deleted in the primary
//! is refused in dc2 at once although its `token_ttl` is ten minutes
//! (pushed by the blocking replication, not waited out); and with the
//! secondaries cut off, dc2 keeps answering from its replicated tokens
//! while dc3's down policy refuses the tokens it cannot ask about, and
//! its local token still works from the replicated policy.
//!
//! Needs root (network namespaces), as the CI machine runs tests.

mod common;

use std::time::{Duration, SystemTime};

use common::datacenters::{Networks, Server, ServerSpec};
use common::eventually_or;
use serde_json::{json, Value};

const ROOT: &str = "6a1c1f0e-7d3b-4c55-9a8e-3f2b1c0d9e8a";
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

fn acl(extra: &str) -> String {
    format!("-hcl=acl {{ enabled = true default_policy = \"deny\" {extra} }}")
}

fn call(server: &Server, token: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    server
        .request_as(token, method, path, body)
        .unwrap_or((0, String::new()))
}

fn ok_json(server: &Server, token: &str, method: &str, path: &str, body: Value) -> Value {
    let (status, text) = call(server, token, method, path, &body.to_string());
    assert_eq!(status, 200, "{method} {path}: {text}");
    serde_json::from_str(&text).unwrap()
}

fn replication(server: &Server) -> Option<Value> {
    let (status, text) = call(server, "", "GET", "/v1/acl/replication", "");
    (status == 200).then(|| serde_json::from_str(&text).ok())?
}

/// Whether an RFC 3339 time is within the last minute.
fn recent(at: &Value) -> bool {
    at.as_str()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age < Duration::from_secs(60))
}

#[test]
fn policies_roles_and_global_tokens_replicate_and_revocation_is_pushed() {
    let networks = Networks::new(2);
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let primary_seed = networks.address(0, 0);
    let spec = |dc: usize, server: usize, dir: usize| ServerSpec {
        dc,
        server,
        expect: 1,
        wan_join: (dc == 1).then_some(primary_seed.as_str()),
        dir: dirs[dir].path(),
    };
    let dc1 = Server::spawn_with(
        &networks,
        spec(0, 0, 0),
        &[acl(&format!(
            "tokens {{ initial_management = \"{ROOT}\" }}"
        ))],
    );
    let dc2 = Server::spawn_with(
        &networks,
        spec(1, 0, 1),
        &[acl("enable_token_replication = true token_ttl = \"10m\"")],
    );
    let dc3 = Server::spawn_with(
        &networks,
        spec(1, 1, 2),
        &[
            "-datacenter=dc3".into(),
            acl("down_policy = \"deny\" token_ttl = \"1s\""),
        ],
    );
    let servers = [&dc1, &dc2, &dc3];
    let logs = || {
        servers
            .iter()
            .map(|s| format!("{}:\n{}\n", s.address, s.log_tail()))
            .collect::<String>()
    };
    let wait = |what: &str, f: &mut dyn FnMut() -> Option<()>| {
        eventually_or(Duration::from_secs(45), f, || format!("{what}\n{}", logs()))
    };
    for server in servers {
        server.wait_for_leader();
        wait("federated", &mut || {
            let (status, text) = call(server, ROOT, "GET", "/v1/catalog/datacenters", "");
            (status == 200 && text.matches("dc").count() == 3).then_some(())
        });
    }

    // Before a replication token: running, nothing replicated.
    let status = replication(&dc2).unwrap();
    assert_eq!(
        status,
        json!({"Enabled": true, "Running": true, "SourceDatacenter": "dc1",
            "ReplicationType": "tokens", "ReplicatedIndex": 0, "ReplicatedRoleIndex": 0,
            "ReplicatedTokenIndex": 0, "LastSuccess": ZERO_TIME, "LastError": ZERO_TIME,
            "LastErrorMessage": ""})
    );
    assert_eq!(replication(&dc3).unwrap()["ReplicationType"], "policies");
    assert_eq!(
        replication(&dc1).unwrap(),
        json!({"Enabled": false, "Running": false, "SourceDatacenter": "",
            "ReplicationType": "", "ReplicatedIndex": 0, "ReplicatedRoleIndex": 0,
            "ReplicatedTokenIndex": 0, "LastSuccess": ZERO_TIME, "LastError": ZERO_TIME,
            "LastErrorMessage": ""})
    );

    // Written in the primary.
    let policy = |name: &str, rules: &str| {
        ok_json(
            &dc1,
            ROOT,
            "PUT",
            "/v1/acl/policy",
            json!({"Name": name, "Rules": rules}),
        )
    };
    let kv = policy("kv", r#"key_prefix "" { policy = "write" }"#);
    let replicator = |acl: &str| {
        format!(
            "acl = \"{acl}\"\noperator = \"write\"\nservice_prefix \"\" {{ policy = \"read\" intentions = \"read\" }}"
        )
    };
    policy("replicate-read", &replicator("read"));
    policy("replicate-write", &replicator("write"));
    ok_json(
        &dc1,
        ROOT,
        "PUT",
        "/v1/acl/role",
        json!({"Name": "writers", "Policies": [{"Name": "kv"}]}),
    );
    let token = |body: Value| ok_json(&dc1, ROOT, "PUT", "/v1/acl/token", body);
    let weak = token(json!({"Policies": [{"Name": "replicate-read"}]}));
    let strong = token(json!({"Policies": [{"Name": "replicate-write"}]}));
    let by_role = token(json!({"Roles": [{"Name": "writers"}]}));
    let doomed = token(json!({"Policies": [{"Name": "kv"}]}));
    let secret = |t: &Value| t["SecretID"].as_str().unwrap().to_string();
    let set_replication_token = |server: &Server, t: &Value| {
        let body = json!({"Token": secret(t)}).to_string();
        let (status, text) = call(server, ROOT, "PUT", "/v1/agent/token/replication", &body);
        assert_eq!(status, 200, "{text}");
    };

    // A replication token with acl:read: policies and roles replicate,
    // tokens do not, with Consul's reason.
    set_replication_token(&dc2, &weak);
    set_replication_token(&dc3, &weak);
    wait("dc2 refuses to replicate redacted tokens", &mut || {
        let s = replication(&dc2)?;
        (s["LastErrorMessage"]
            == "failed to retrieve unredacted tokens - replication token in use does not grant acl:write"
            && s["ReplicatedIndex"].as_u64()? > 0
            && s["ReplicatedRoleIndex"].as_u64()? > 0
            && s["ReplicatedTokenIndex"] == 0
            && recent(&s["LastError"]))
        .then_some(())
    });
    wait("dc3 replicates policies and roles", &mut || {
        let s = replication(&dc3)?;
        (s["ReplicatedIndex"].as_u64()? > 0
            && s["ReplicatedRoleIndex"].as_u64()? > 0
            && recent(&s["LastSuccess"])
            && s["LastErrorMessage"] == "")
            .then_some(())
    });
    let (status, text) = call(&dc3, ROOT, "GET", "/v1/acl/policy/name/kv", "");
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["ID"],
        kv["ID"]
    );

    // With acl:write, global tokens replicate too.
    set_replication_token(&dc2, &strong);
    wait("dc2 replicates tokens", &mut || {
        let s = replication(&dc2)?;
        (s["ReplicatedTokenIndex"].as_u64()? > 0 && recent(&s["LastSuccess"])).then_some(())
    });
    let accessor = |t: &Value| t["AccessorID"].as_str().unwrap().to_string();
    let (status, text) = call(&dc2, ROOT, "GET", "/v1/acl/tokens", "");
    assert_eq!(status, 200, "{text}");
    for t in [&by_role, &doomed, &strong] {
        assert!(text.contains(&accessor(t)), "{text}");
    }
    for (server, t) in [(&dc2, &by_role), (&dc2, &doomed), (&dc3, &by_role)] {
        let (status, text) = call(server, &secret(t), "PUT", "/v1/kv/app", "v");
        assert_eq!((status, text.as_str()), (200, "true"));
    }

    // Local tokens of the secondaries, their rules from the replicated
    // policy; unknown to the primary.
    let local = |server: &Server| {
        ok_json(
            server,
            ROOT,
            "PUT",
            "/v1/acl/token",
            json!({"Local": true, "Policies": [{"Name": "kv"}]}),
        )
    };
    let dc2_local = secret(&local(&dc2));
    let dc3_local = secret(&local(&dc3));
    for (server, t) in [(&dc2, &dc2_local), (&dc3, &dc3_local)] {
        let (status, text) = call(server, t, "PUT", "/v1/kv/local", "v");
        assert_eq!((status, text.as_str()), (200, "true"));
    }
    let (status, text) = call(&dc1, &dc2_local, "GET", "/v1/acl/token/self", "");
    assert_eq!((status, text.as_str()), (403, "ACL not found"));

    // The primary changes the policy: the secondaries enforce the change.
    let (status, text) = call(
        &dc1,
        ROOT,
        "PUT",
        &format!("/v1/acl/policy/{}", kv["ID"].as_str().unwrap()),
        &json!({"Name": "kv", "Rules": r#"key_prefix "" { policy = "read" }"#}).to_string(),
    );
    assert_eq!(status, 200, "{text}");
    for (server, t) in [(&dc2, &dc2_local), (&dc3, &dc3_local)] {
        wait("the read-only policy reaches the secondary", &mut || {
            let (status, _) = call(server, t, "PUT", "/v1/kv/local", "w");
            (status == 403).then_some(())
        });
        let (status, _) = call(server, t, "GET", "/v1/kv/local", "");
        assert_eq!(status, 200);
    }

    // Deleted in the primary: refused in dc2 long before its ten-minute
    // token_ttl, because the deletion was replicated.
    let (status, _) = call(&dc2, &secret(&doomed), "GET", "/v1/kv/app", "");
    assert_eq!(status, 200);
    let (status, text) = call(
        &dc1,
        ROOT,
        "DELETE",
        &format!("/v1/acl/token/{}", accessor(&doomed)),
        "",
    );
    assert_eq!(status, 200, "{text}");
    let deleted_at = std::time::Instant::now();
    wait("the deletion reaches dc2", &mut || {
        let (status, text) = call(&dc2, &secret(&doomed), "GET", "/v1/kv/app", "");
        (status == 403 && text == "ACL not found").then_some(())
    });
    assert!(deleted_at.elapsed() < Duration::from_secs(30));

    // Login across datacenters: a global login token made in the primary
    // replicates into dc2, and logging out there deletes it in the primary
    // (Consul forwards it); a secondary makes local login tokens.
    let signer = common::jwt::Signer::generate();
    let method = |server: &Server, locality: &str| {
        ok_json(
            server,
            ROOT,
            "PUT",
            "/v1/acl/auth-method",
            json!({
            "Name": format!("jwt-{locality}"), "Type": "jwt", "TokenLocality": locality,
            "Config": {"JWTValidationPubKeys": [signer.public_pem()]}}),
        );
        ok_json(
            server,
            ROOT,
            "PUT",
            "/v1/acl/binding-rule",
            json!({
            "AuthMethod": format!("jwt-{locality}"), "BindType": "service", "BindName": "web"}),
        );
    };
    let jwt = || {
        let now = common::jwt::now();
        signer.sign(&json!({"sub": "web", "iat": now, "exp": now + 300}), None)
    };
    let login = |server: &Server, method: &str| {
        let body = json!({"AuthMethod": method, "BearerToken": jwt()}).to_string();
        call(server, "", "POST", "/v1/acl/login", &body)
    };
    method(&dc1, "global");
    let (status, text) = login(&dc1, "jwt-global");
    assert_eq!(status, 200, "{text}");
    let global_login: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(global_login["Local"], false);
    let global_secret = secret(&global_login);
    wait("the global login token reaches dc2", &mut || {
        let (status, _) = call(&dc2, &global_secret, "GET", "/v1/acl/token/self", "");
        (status == 200).then_some(())
    });
    let (status, text) = call(&dc2, &global_secret, "POST", "/v1/acl/logout", "");
    assert_eq!(status, 200, "{text}");
    let (status, text) = call(&dc1, &global_secret, "GET", "/v1/acl/token/self", "");
    assert_eq!((status, text.as_str()), (403, "ACL not found"));
    wait("the logout reaches dc2", &mut || {
        let (status, _) = call(&dc2, &global_secret, "GET", "/v1/acl/token/self", "");
        (status == 403).then_some(())
    });
    // A secondary's methods make local tokens only.
    let body = json!({"Name": "g", "Type": "jwt", "TokenLocality": "global",
        "Config": {"JWTValidationPubKeys": [signer.public_pem()]}});
    let (status, text) = call(&dc2, ROOT, "PUT", "/v1/acl/auth-method", &body.to_string());
    assert_eq!(
        (status, text.as_str()),
        (500, "Invalid Auth Method: TokenLocality 'global' can only be used in the primary datacenter")
    );
    method(&dc2, "local");
    let (status, text) = login(&dc2, "jwt-local");
    assert_eq!(status, 200, "{text}");
    let local_login: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(local_login["Local"], true);
    let (status, _) = call(&dc2, &secret(&local_login), "GET", "/v1/acl/token/self", "");
    assert_eq!(status, 200);

    // Cut off from the primary.
    networks.set_linked(false);
    wait("dc2 is cut off", &mut || {
        let (status, _) = call(&dc2, ROOT, "GET", "/v1/kv/app?dc=dc1", "");
        (status == 500).then_some(())
    });
    // dc2 answers from its replicated tokens and reports the failed rounds.
    let (status, _) = call(&dc2, &secret(&by_role), "GET", "/v1/kv/app", "");
    assert_eq!(status, 200);
    wait("dc2 reports the failure", &mut || {
        let s = replication(&dc2)?;
        (s["Running"] == true
            && recent(&s["LastError"])
            && s["LastErrorMessage"]
                .as_str()?
                .starts_with("failed to retrieve remote ACL"))
        .then_some(())
    });
    // dc3 cannot ask the primary: its down policy (deny) refuses global
    // tokens; its local token still reads through the replicated policy.
    wait("dc3 applies its down policy", &mut || {
        let (status, _) = call(&dc3, &secret(&by_role), "GET", "/v1/kv/app", "");
        (status == 403).then_some(())
    });
    let (status, _) = call(&dc3, &dc3_local, "GET", "/v1/kv/local", "");
    assert_eq!(status, 200);
}
