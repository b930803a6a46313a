//! ACLs through the binary: a dev agent with `default_policy = "deny"` and
//! an initial management token. Tokenless requests are refused with
//! Consul's anonymous-token text; policies, tokens and roles are made,
//! read and deleted over `/v1/acl/*` in Consul's shapes; a token's rules
//! decide (exact, prefix, deny); a deleted token is refused at once; bad
//! input gets Consul's errors; and an agent without ACLs answers 401.

mod common;

use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::{eventually, http_request_full, TestAgent};
use serde_json::Value;

#[test]
fn tokens_policies_and_roles_decide_every_request() {
    let acl = Acl::start();
    // Tokenless: the anonymous token, denied with Consul's text.
    let (status, headers, body) = acl.call("GET", "/v1/kv/app/config", None, None);
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body,
        "Permission denied: anonymous token lacks permission 'key:read' on \"app/config\". The anonymous token is used implicitly when a request does not specify a token."
    );
    assert!(headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("x-consul-default-acl-policy") && v == "deny"));
    // The management token may do anything.
    let (status, _, _) = acl.call("GET", "/v1/kv/app/config", Some(ROOT), None);
    assert_eq!(status, 404);

    // A policy, in HCL; a token linking it by name.
    let policy = acl.json(
        "PUT",
        "/v1/acl/policy",
        ROOT,
        Some(r#"{"Name":"app","Description":"app keys","Rules":"key_prefix \"app/\" { policy = \"write\" }\nkey \"app/locked\" { policy = \"read\" }"}"#),
    );
    let policy_id = policy["ID"].as_str().unwrap().to_string();
    assert_eq!(policy["Name"], "app");
    assert!(policy["Hash"].as_str().is_some_and(|h| !h.is_empty()));
    let token = acl.json(
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(r#"{"Description":"app token","Policies":[{"Name":"app"}]}"#),
    );
    let secret = token["SecretID"].as_str().unwrap().to_string();
    let accessor = token["AccessorID"].as_str().unwrap().to_string();
    assert_eq!(token["Policies"][0]["ID"], policy_id.as_str());
    assert_eq!(token["Policies"][0]["Name"], "app");
    assert_eq!(token["Local"], false);
    assert!(
        token.get("Roles").is_none(),
        "empty links are omitted: {token}"
    );

    // Its rules decide: prefix write, exact read, nothing elsewhere.
    let (status, _, _) = acl.call("PUT", "/v1/kv/app/x", Some(&secret), Some("v"));
    assert_eq!(status, 200);
    let (status, _, body) = acl.call("PUT", "/v1/kv/app/locked", Some(&secret), Some("v"));
    assert_eq!(status, 403);
    assert_eq!(
        body,
        format!("Permission denied: token with AccessorID '{accessor}' lacks permission 'key:write' on \"app/locked\"")
    );
    let (status, _, _) = acl.call("GET", "/v1/kv/other", Some(&secret), None);
    assert_eq!(status, 403);
    // Tokens from ?token= and Authorization: Bearer too.
    let (status, _, _) = acl.call("GET", &format!("/v1/kv/app/x?token={secret}"), None, None);
    assert_eq!(status, 200);
    let bearer = format!("Bearer {secret}");
    let (status, _, _) = http_request_full(
        acl.agent.http_port,
        "GET",
        "/v1/kv/app/x",
        &[("Authorization", bearer.as_str())],
        None,
    );
    assert_eq!(status, 200);

    // Lists are filtered to what the token may read, and say so.
    let (status, _, _) = acl.call("PUT", "/v1/kv/other/secret", Some(ROOT), Some("s"));
    assert_eq!(status, 200);
    let filtered = |headers: &[(String, String)]| {
        headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("x-consul-results-filtered-by-acls") && v == "true"
        })
    };
    let (status, headers, body) = acl.call("GET", "/v1/kv/?recurse", Some(&secret), None);
    assert_eq!(status, 200, "{body}");
    let keys: Vec<String> = serde_json::from_str::<Vec<Value>>(&body)
        .unwrap()
        .iter()
        .map(|e| e["Key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, ["app/x"]);
    assert!(filtered(&headers));
    let (status, _, _) = acl.call("GET", "/v1/kv/other/?recurse", Some(&secret), None);
    assert_eq!(status, 404, "everything filtered is not found");
    let (_, headers, body) = acl.call("GET", "/v1/kv/?keys", Some(&secret), None);
    assert_eq!(body, r#"["app/x"]"#);
    assert!(filtered(&headers));
    let (_, headers, body) = acl.call("GET", "/v1/catalog/nodes", Some(&secret), None);
    assert_eq!(body, "[]");
    assert!(filtered(&headers));
    let (_, headers, body) = acl.call("GET", "/v1/catalog/nodes", Some(ROOT), None);
    assert_eq!(serde_json::from_str::<Vec<Value>>(&body).unwrap().len(), 1);
    assert!(!filtered(&headers));
    let (_, _, body) = acl.call("GET", "/v1/health/service/consul", Some(&secret), None);
    assert_eq!(body, "[]");
    // Intentions and sessions too: readable by their rules only.
    let (status, _, body) = acl.call(
        "PUT",
        "/v1/connect/intentions/exact?source=web&destination=db",
        Some(ROOT),
        Some(r#"{"Action":"allow"}"#),
    );
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = acl.call("PUT", "/v1/session/create", Some(ROOT), Some("{}"));
    assert_eq!(status, 200, "{body}");
    let (_, _, body) = acl.call("GET", "/v1/connect/intentions", Some(ROOT), None);
    assert_eq!(serde_json::from_str::<Vec<Value>>(&body).unwrap().len(), 1);
    let (_, headers, body) = acl.call("GET", "/v1/connect/intentions", Some(&secret), None);
    assert_eq!(body, "[]");
    assert!(filtered(&headers));
    let (status, _, _) = acl.call(
        "GET",
        "/v1/connect/intentions/exact?source=web&destination=db",
        Some(&secret),
        None,
    );
    assert_eq!(status, 403);
    let (_, _, body) = acl.call("GET", "/v1/session/list", Some(ROOT), None);
    assert_eq!(serde_json::from_str::<Vec<Value>>(&body).unwrap().len(), 1);
    let (_, headers, body) = acl.call("GET", "/v1/session/list", Some(&secret), None);
    assert_eq!(body, "[]");
    assert!(filtered(&headers));
    // A recursive delete needs write on everything under the prefix.
    let (status, _, _) = acl.call("DELETE", "/v1/kv/app/?recurse", Some(&secret), None);
    assert_eq!(status, 403, "app/locked is read only");

    // The CLI sends the token from -token-file (which wins over -token),
    // and names a token file it cannot read.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.token");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let file_arg = file.display().to_string();
    let out = acl.agent.cli(&[
        "kv",
        "put",
        "-token-file",
        &file_arg,
        "-token",
        "wrong",
        "app/cli",
        "v",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = acl
        .agent
        .cli(&["kv", "put", "-token", &secret, "secret/cli", "v"]);
    assert!(!out.status.success());
    let out = acl
        .agent
        .cli(&["kv", "get", "-token-file", "/nonexistent/token", "app/cli"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Error loading token file /nonexistent/token"),
        "{stderr}"
    );

    // Reads: self, by accessor (secret hidden without acl:write), lists.
    let own = acl.json("GET", "/v1/acl/token/self", &secret, None);
    assert_eq!(own["AccessorID"], accessor.as_str());
    let read = acl.json("GET", &format!("/v1/acl/token/{accessor}"), ROOT, None);
    assert_eq!(read["SecretID"], secret.as_str());
    let (status, _, _) = acl.call(
        "GET",
        &format!("/v1/acl/token/{accessor}"),
        Some(&secret),
        None,
    );
    assert_eq!(status, 403, "reading tokens needs acl:read");
    let tokens = acl.json(
        "GET",
        &format!("/v1/acl/tokens?policy={policy_id}"),
        ROOT,
        None,
    );
    assert_eq!(tokens.as_array().unwrap().len(), 1);
    let all = acl.json("GET", "/v1/acl/tokens", ROOT, None);
    let descriptions: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["Description"].as_str())
        .collect();
    assert!(
        descriptions.contains(&"Anonymous Token"),
        "{descriptions:?}"
    );
    assert!(descriptions.contains(&"Initial Management Token"));
    let policies = acl.json("GET", "/v1/acl/policies", ROOT, None);
    assert!(policies
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p.get("Rules").is_none()));
    let by_name = acl.json("GET", "/v1/acl/policy/name/global-management", ROOT, None);
    assert_eq!(by_name["ID"], "00000000-0000-0000-0000-000000000001");

    // A role with a service identity; a token linking the role.
    let role = acl.json(
        "PUT",
        "/v1/acl/role",
        ROOT,
        Some(r#"{"Name":"web-role","Policies":[{"Name":"app"}],"ServiceIdentities":[{"ServiceName":"web"}]}"#),
    );
    let role_id = role["ID"].as_str().unwrap().to_string();
    let web = acl.json(
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(r#"{"Roles":[{"ID":"ROLE"}]}"#.replace("ROLE", &role_id).as_str()),
    );
    let web_secret = web["SecretID"].as_str().unwrap().to_string();
    assert_eq!(web["Roles"][0]["Name"], "web-role");
    // The role's policy and its identity count for the token: the
    // identity grants web (and its sidecar) and reads of every service.
    let (status, _, body) = acl.call("PUT", "/v1/kv/app/y", Some(&web_secret), Some("v"));
    assert_eq!(status, 200, "{body}");
    let answers = acl.json(
        "POST",
        "/v1/internal/acl/authorize",
        &web_secret,
        Some(
            r#"[{"Resource":"service","Segment":"web","Access":"write"},
                 {"Resource":"service","Segment":"web-sidecar-proxy","Access":"write"},
                 {"Resource":"service","Segment":"db","Access":"write"},
                 {"Resource":"service","Segment":"db","Access":"read"},
                 {"Resource":"key","Segment":"other","Access":"read"},
                 {"Resource":"operator","Access":"read"}]"#,
        ),
    );
    let allowed: Vec<bool> = answers
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["Allow"].as_bool().unwrap())
        .collect();
    assert_eq!(allowed, [true, true, false, true, false, false]);
    assert_eq!(answers[0]["Segment"], "web");
    // A clone has its own IDs and the same links.
    let clone = acl.json(
        "PUT",
        &format!("/v1/acl/token/{accessor}/clone"),
        ROOT,
        Some(r#"{"Description":"copy"}"#),
    );
    assert_ne!(clone["AccessorID"], accessor.as_str());
    assert_eq!(clone["Description"], "copy");
    assert_eq!(clone["Policies"][0]["Name"], "app");

    // Deleted: refused by the next request.
    let (status, _, body) = acl.call(
        "DELETE",
        &format!("/v1/acl/token/{accessor}"),
        Some(ROOT),
        None,
    );
    assert_eq!((status, body.as_str()), (200, "true"));
    let (status, _, body) = acl.call("GET", "/v1/kv/app/x", Some(&secret), None);
    assert_eq!((status, body.as_str()), (403, "ACL not found"));
    let (status, _, body) = acl.call(
        "DELETE",
        &format!("/v1/acl/token/{accessor}"),
        Some(ROOT),
        None,
    );
    assert_eq!(
        (status, body.as_str()),
        (404, "Cannot find token to delete")
    );
    let (status, _, body) = acl.call(
        "DELETE",
        "/v1/acl/role/00000000-1111-2222-3333-444444444444",
        Some(ROOT),
        None,
    );
    assert_eq!((status, body.as_str()), (404, "Cannot find role to delete"));
}

#[test]
fn bad_acl_input_gets_consuls_errors() {
    let acl = Acl::start();
    let call = |method: &str, path: &str, body: &str| {
        let (status, _, text) = acl.call(method, path, Some(ROOT), Some(body));
        (status, text)
    };
    let (status, text) = call(
        "PUT",
        "/v1/acl/policy",
        r#"{"Name":"bad","Rules":"key \"k\" { policy = \"sudo\" }"}"#,
    );
    assert_eq!(status, 500);
    assert!(text.starts_with("Invalid key policy: "), "{text}");
    let (status, text) = call(
        "PUT",
        "/v1/acl/policy",
        r#"{"Name":"bad","Rules":"key \"k\" {"}"#,
    );
    assert_eq!(status, 500);
    assert!(text.starts_with("Failed to parse ACL rules: "), "{text}");
    assert_eq!(
        call("PUT", "/v1/acl/policy", r#"{"Rules":""}"#),
        (500, "Invalid Policy: no Name is set".into())
    );
    assert_eq!(
        call("PUT", "/v1/acl/policy", r#"{"Name":"a b"}"#),
        (
            500,
            "Invalid Policy: invalid Name. Only alphanumeric characters, '-' and '_' are allowed"
                .into()
        )
    );
    assert_eq!(
        call("PUT", "/v1/acl/policy", r#"{"ID":"x","Name":"a"}"#),
        (
            400,
            "Cannot specify the ID when creating a new policy".into()
        )
    );
    let (status, _) = call("PUT", "/v1/acl/policy", r#"{"Name":"dup"}"#);
    assert_eq!(status, 200);
    assert_eq!(
        call("PUT", "/v1/acl/policy", r#"{"Name":"DUP"}"#),
        (
            500,
            "Invalid Policy: A Policy with Name \"DUP\" already exists".into()
        )
    );
    assert_eq!(
        call("PUT", "/v1/acl/token", r#"{"Policies":[{"Name":"nope"}]}"#),
        (500, "No such ACL policy with name \"nope\"".into())
    );
    assert_eq!(
        call("PUT", "/v1/acl/token", r#"{"Bogus":1}"#),
        (
            400,
            "Token decoding failed: json: unknown field \"Bogus\"".into()
        )
    );
    assert_eq!(
        call("PUT", "/v1/acl/token", r#"{"AccessorID":"not-a-uuid"}"#),
        (500, "Invalid Token: AccessorID - not a valid UUID".into())
    );
    assert_eq!(
        call("PUT", "/v1/acl/token", r#"{"ExpirationTTL":"48h"}"#).0,
        500
    );
    assert_eq!(
        call("PUT", "/v1/acl/token", r#"{"ServiceIdentities":[{"ServiceName":"Web"}]}"#),
        (500, "Service identity \"Web\" has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed".into())
    );
    assert_eq!(
        call(
            "PUT",
            "/v1/acl/token",
            r#"{"NodeIdentities":[{"NodeName":"n1"}]}"#
        ),
        (
            500,
            "Node identity is missing the datacenter field on this token".into()
        )
    );
    assert_eq!(
        call(
            "DELETE",
            "/v1/acl/token/00000000-0000-0000-0000-000000000002",
            ""
        ),
        (
            500,
            "Delete operation not permitted on the anonymous token".into()
        )
    );
    assert_eq!(
        call(
            "DELETE",
            "/v1/acl/policy/00000000-0000-0000-0000-000000000001",
            ""
        ),
        (
            500,
            "Delete operation not permitted on the builtin global-management policy".into()
        )
    );
    // Bootstrapped already (by the initial management token).
    let (status, text) = call("PUT", "/v1/acl/bootstrap", "");
    assert_eq!(status, 403);
    assert!(
        text.starts_with("Permission denied: ACL bootstrap no longer allowed (reset index: "),
        "{text}"
    );
    // An unknown secret; the legacy API.
    let (status, _, text) = acl.call(
        "GET",
        "/v1/kv/x",
        Some("11111111-2222-3333-4444-555555555555"),
        None,
    );
    assert_eq!((status, text.as_str()), (403, "ACL not found"));
    let (status, _, text) = acl.call("PUT", "/v1/acl/create", Some(ROOT), None);
    assert_eq!(status, 410);
    assert_eq!(
        text,
        "Endpoint /v1/acl/create for the legacy ACL system was removed in Consul 1.11."
    );
}

#[test]
fn without_acls_the_acl_api_answers_401() {
    let agent = TestAgent::dev(&[]);
    let (status, headers, body) = agent.request("GET", "/v1/acl/tokens", None);
    assert_eq!((status, body.as_str()), (401, "ACL support disabled"));
    assert!(headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("x-consul-default-acl-policy") && v == "allow"));
    let (status, _, _) = agent.request("PUT", "/v1/acl/bootstrap", None);
    assert_eq!(status, 401);
    // Everything else stays open.
    let (status, _) = agent.put("/v1/kv/open", "v");
    assert_eq!(status, 200);
}

#[test]
fn bootstrap_once_then_only_with_the_reset_index() {
    let dir = tempfile::tempdir().unwrap();
    let agent = TestAgent::spawn(
        &[
            "-server",
            "-bootstrap-expect=1",
            "-bind=127.0.0.1",
            &format!("-data-dir={}", dir.path().display()),
            "-hcl=acl { enabled = true default_policy = \"deny\" }",
        ],
        true,
    );
    let bootstrap = || agent.request("PUT", "/v1/acl/bootstrap", None);
    let token: Value = eventually(Duration::from_secs(30), || {
        let (status, _, body) =
            common::try_http_request(agent.http_port, "PUT", "/v1/acl/bootstrap", None)?;
        (status == 200).then(|| serde_json::from_str(&body).unwrap())
    });
    assert_eq!(token["Description"], "Bootstrap Token (Global Management)");
    assert_eq!(token["ID"], token["SecretID"]);
    assert_eq!(token["Policies"][0]["Name"], "global-management");
    let (status, _, body) = bootstrap();
    assert_eq!(status, 403);
    let reset: u64 = body
        .rsplit("reset index: ")
        .next()
        .and_then(|s| s.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("{body}"));
    // A wrong index is refused; the right one bootstraps again.
    std::fs::write(dir.path().join("acl-bootstrap-reset"), "1").unwrap();
    let (status, _, body) = bootstrap();
    assert_eq!(
        (status, body),
        (
            500,
            format!("Invalid bootstrap reset index (specified 1, reset index: {reset})")
        )
    );
    std::fs::write(dir.path().join("acl-bootstrap-reset"), reset.to_string()).unwrap();
    let (status, _, body) = bootstrap();
    assert_eq!(status, 200, "{body}");
    assert!(!dir.path().join("acl-bootstrap-reset").exists());
}

#[test]
fn the_agent_endpoints_check_the_request_token() {
    let acl = Acl::start();
    let web = acl.json(
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(r#"{"Description":"web","ServiceIdentities":[{"ServiceName":"web"}]}"#),
    );
    let web_secret = web["SecretID"].as_str().unwrap().to_string();
    let web_accessor = web["AccessorID"].as_str().unwrap().to_string();
    // The agent itself: anonymous may not read it.
    let (status, _, body) = acl.call("GET", "/v1/agent/self", None, None);
    assert_eq!(status, 403);
    assert!(
        body.starts_with("Permission denied: anonymous token lacks permission 'agent:read' on "),
        "{body}"
    );
    assert_eq!(acl.call("GET", "/v1/agent/self", Some(ROOT), None).0, 200);
    // Registrations need write on the service (and its sidecar).
    let (status, _, body) = acl.call(
        "PUT",
        "/v1/agent/service/register",
        Some(&web_secret),
        Some(r#"{"Name":"web","Port":8080,"Connect":{"SidecarService":{}}}"#),
    );
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = acl.call(
        "PUT",
        "/v1/agent/service/register",
        Some(&web_secret),
        Some(r#"{"Name":"db","Port":5432}"#),
    );
    assert_eq!(status, 403);
    assert_eq!(
        body,
        format!("Permission denied: token with AccessorID '{web_accessor}' lacks permission 'service:write' on \"db\"")
    );
    // Leaf certificates: only for the token's own service, signed with it.
    let (status, _, body) = acl.call(
        "GET",
        "/v1/agent/connect/ca/leaf/web",
        Some(&web_secret),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let leaf: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(leaf["Service"], "web");
    let (status, _, _) = acl.call(
        "GET",
        "/v1/agent/connect/ca/leaf/db",
        Some(&web_secret),
        None,
    );
    assert_eq!(status, 403);
    // Lists are filtered, and say so: a token without service rules sees
    // no services; web's identity reads them all.
    let keys_only = acl.json(
        "PUT",
        "/v1/acl/policy",
        ROOT,
        Some(r#"{"Name":"keys","Rules":"key_prefix \"\" { policy = \"read\" }"}"#),
    );
    let reader = acl.json(
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(&format!(
            r#"{{"Policies":[{{"ID":"{}"}}]}}"#,
            keys_only["ID"].as_str().unwrap()
        )),
    );
    let reader_secret = reader["SecretID"].as_str().unwrap().to_string();
    let (status, headers, body) = acl.call("GET", "/v1/agent/services", Some(&reader_secret), None);
    assert_eq!((status, body.as_str()), (200, "{}"));
    assert!(headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("x-consul-results-filtered-by-acls") && v == "true"));
    let services: Value = serde_json::from_str(
        &acl.call("GET", "/v1/agent/services", Some(&web_secret), None)
            .2,
    )
    .unwrap();
    assert!(
        services.get("web").is_some() && services.get("web-sidecar-proxy").is_some(),
        "{services}"
    );
    let (_, headers, body) = acl.call("GET", "/v1/agent/members", Some(&reader_secret), None);
    assert_eq!(body, "[]");
    assert!(headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("x-consul-results-filtered-by-acls")));
    // Deregistering needs write too; maintenance of the node needs node:write.
    let (status, _, _) = acl.call(
        "PUT",
        "/v1/agent/service/deregister/web",
        Some(&reader_secret),
        None,
    );
    assert_eq!(status, 403);
    let (status, _, _) = acl.call(
        "PUT",
        "/v1/agent/maintenance?enable=true",
        Some(&web_secret),
        None,
    );
    assert_eq!(status, 403);
    let (status, _, _) = acl.call(
        "PUT",
        "/v1/agent/service/deregister/web",
        Some(&web_secret),
        None,
    );
    assert_eq!(status, 200);
    // The agent's tokens: set at run time (agent:write), unknown kinds 404;
    // a default token serves tokenless requests.
    let (status, _, body) = acl.call(
        "PUT",
        "/v1/agent/token/nonsense",
        Some(ROOT),
        Some(r#"{"Token":"x"}"#),
    );
    assert_eq!(
        (status, body.as_str()),
        (404, "Token \"nonsense\" is unknown")
    );
    let (status, _, _) = acl.call(
        "PUT",
        "/v1/agent/token/default",
        Some(&web_secret),
        Some(r#"{"Token":"x"}"#),
    );
    assert_eq!(status, 403);
    assert_eq!(acl.call("GET", "/v1/kv/anything", None, None).0, 403);
    let body = format!(r#"{{"Token":"{reader_secret}"}}"#);
    let (status, _, _) = acl.call("PUT", "/v1/agent/token/default", Some(ROOT), Some(&body));
    assert_eq!(status, 200);
    assert_eq!(
        acl.call("GET", "/v1/kv/anything", None, None).0,
        404,
        "read with the default token"
    );
    let (status, _, _) = acl.call(
        "PUT",
        "/v1/agent/token/acl_token",
        Some(ROOT),
        Some(r#"{"Token":""}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(acl.call("GET", "/v1/kv/anything", None, None).0, 403);
    // force-leave needs operator:write.
    let (status, _, body) = acl.call(
        "PUT",
        "/v1/agent/force-leave/nobody",
        Some(&web_secret),
        None,
    );
    assert_eq!(status, 403);
    assert!(body.contains("lacks permission 'operator:write'"), "{body}");
}

#[test]
fn the_acl_cli_makes_reads_and_deletes_tokens_and_policies() {
    let acl = Acl::start();
    let cli = |args: &[&str]| acl.cli_as_root(args);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("web.hcl");
    std::fs::write(&rules, "service \"web\" { policy = \"write\" }\n").unwrap();
    let rules_arg = format!("@{}", rules.display());
    let (code, out, err) = cli(&[
        "acl", "policy", "create", "-name", "web", "-rules", &rules_arg,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Name:         web\n"), "{out}");
    assert!(
        out.contains("Rules:\nservice \"web\" { policy = \"write\" }"),
        "{out}"
    );
    let (code, out, err) = cli(&[
        "acl",
        "token",
        "create",
        "-description",
        "web",
        "-policy-name",
        "web",
        "-format",
        "json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let token: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(token["Policies"][0]["Name"], "web");
    let accessor = token["AccessorID"].as_str().unwrap().to_string();
    let (_, out, _) = cli(&["acl", "token", "read", "-id", &accessor]);
    assert!(
        out.starts_with(&format!("AccessorID:       {accessor}\n")),
        "{out}"
    );
    assert!(
        out.contains("Description:      web\nLocal:            false\n"),
        "{out}"
    );
    assert!(out.contains(&format!(
        "Policies:\n   {} - web\n",
        token["Policies"][0]["ID"].as_str().unwrap()
    )));
    let (_, out, _) = cli(&[
        "acl",
        "token",
        "create",
        "-service-identity",
        "db:dc1,dc2",
        "-node-identity",
        "n1:dc1",
    ]);
    assert!(
        out.contains("Service Identities:\n   db (Datacenters: dc1, dc2)\n"),
        "{out}"
    );
    assert!(
        out.contains("Node Identities:\n   n1 (Datacenter: dc1)\n"),
        "{out}"
    );
    let (code, _, err) = cli(&["acl", "token", "create", "-description", "nothing"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("Cannot create a token without specifying -policy-name"),
        "{err}"
    );
    let (_, out, _) = cli(&["acl", "token", "list"]);
    assert!(out.contains("Description:      Anonymous Token"), "{out}");
    let (code, out, _) = cli(&["acl", "token", "delete", "-id", &accessor]);
    assert_eq!(
        (code, out.trim()),
        (
            Some(0),
            format!("Token {accessor:?} deleted successfully").as_str()
        )
    );
    let (_, out, _) = cli(&["acl", "policy", "list"]);
    assert!(
        out.contains("global-management:\n   ID:           00000000-0000-0000-0000-000000000001\n"),
        "{out}"
    );
    let (code, out, _) = cli(&["acl", "policy", "delete", "-name", "web"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("deleted successfully"), "{out}");
    let (code, out, err) = cli(&["acl", "set-agent-token", "default", "anonymous"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "ACL token \"default\" set successfully");
    let (code, _, err) = cli(&["acl", "bootstrap"]);
    assert_eq!(code, Some(1));
    assert!(err.starts_with("Failed ACL bootstrapping: "), "{err}");
    assert!(err.contains("ACL bootstrap no longer allowed"), "{err}");
}
