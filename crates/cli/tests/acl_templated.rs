//! Templated policies through the binary: Consul's built-in templates
//! listed, read and previewed over `/v1/acl/templated-*` in its shapes and
//! error texts, and tokens and roles linking them granting exactly what
//! the rendered rules say.

mod common;

use common::acl::{Acl, ROOT};
use common::TestAgent;
use serde_json::{json, Value};

#[test]
fn templates_are_listed_read_and_previewed_as_consul_answers() {
    let acl = Acl::start();
    let all = acl.json("GET", "/v1/acl/templated-policies", ROOT, None);
    let names: Vec<&String> = all.as_object().unwrap().keys().collect();
    assert_eq!(
        names,
        [
            "builtin/api-gateway",
            "builtin/dns",
            "builtin/node",
            "builtin/nomad-client",
            "builtin/nomad-server",
            "builtin/service"
        ]
    );
    let dns = &all["builtin/dns"];
    assert_eq!(dns["Schema"], "");
    assert_eq!(
        dns.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["TemplateName", "Schema", "Template", "Description"]
    );
    let service = acl.json(
        "GET",
        "/v1/acl/templated-policy/name/builtin/service",
        ROOT,
        None,
    );
    assert_eq!(service["TemplateName"], "builtin/service");
    assert!(service["Schema"]
        .as_str()
        .unwrap()
        .contains("\"required\": [\"name\"]"));
    let (status, _, body) = acl.call(
        "GET",
        "/v1/acl/templated-policy/name/builtin/nope",
        Some(ROOT),
        None,
    );
    assert_eq!(
        (status, body.as_str()),
        (400, "Invalid templated policy Name: builtin/nope")
    );

    let preview = acl.json(
        "POST",
        "/v1/acl/templated-policy/preview/builtin/service",
        ROOT,
        Some(r#"{"Name": "web"}"#),
    );
    let id = preview["ID"].as_str().unwrap();
    assert!(id.starts_with("0a73657276696365202277656222"), "{id}");
    assert_eq!(preview["Name"], format!("synthetic-policy-{id}"));
    assert_eq!(
        preview["Description"],
        "synthetic policy generated from templated policy: builtin/service"
    );
    assert!(preview["Rules"]
        .as_str()
        .unwrap()
        .contains("service \"web-sidecar-proxy\""));
    assert_eq!(
        (preview["CreateIndex"].as_u64(), preview.get("Datacenters")),
        (Some(0), None)
    );
    for (path, body, text) in [
        (
            "/v1/acl/templated-policy/preview/builtin/nope",
            "{}",
            "templated policy \"builtin/nope\" does not exist",
        ),
        (
            "/v1/acl/templated-policy/preview/builtin/service",
            "",
            "Failed to decode request body: EOF",
        ),
        (
            "/v1/acl/templated-policy/preview/builtin/service",
            r#"{"Service": "web"}"#,
            "Failed to decode request body: json: unknown field \"Service\"",
        ),
        (
            "/v1/acl/templated-policy/preview/builtin/service",
            "{}",
            "validation error for templated policy: \"builtin/service\": service identity \"\" has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
        ),
    ] {
        let (status, _, answer) = acl.call("POST", path, Some(ROOT), Some(body));
        assert_eq!((status, answer.as_str()), (400, text), "{path} {body}");
    }
    // The anonymous token may not read ACLs; an agent without ACLs says so.
    let (status, _, _) = acl.call("GET", "/v1/acl/templated-policies", None, None);
    assert_eq!(status, 403);
    let plain = TestAgent::dev(&[]);
    let (status, _, body) = common::http_request_full(
        plain.http_port,
        "GET",
        "/v1/acl/templated-policies",
        &[],
        None,
    );
    assert_eq!((status, body.as_str()), (401, "ACL support disabled"));
}

#[test]
fn tokens_and_roles_linking_templates_get_their_rules() {
    let acl = Acl::start();
    let token = acl.json(
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(
            r#"{"Description": "web", "TemplatedPolicies": [
                {"TemplateName": "builtin/service", "TemplateVariables": {"name": "web"}},
                {"TemplateName": "builtin/service", "TemplateVariables": {"Name": "web"}, "Datacenters": ["dc9"]}]}"#,
        ),
    );
    // Consul's answer: the template's ID, a lower-case `name`, duplicates gone.
    assert_eq!(
        token["TemplatedPolicies"],
        json!([{"TemplateID": "00000000-0000-0000-0000-000000000003",
                "TemplateName": "builtin/service", "TemplateVariables": {"name": "web"}}])
    );
    let secret = token["SecretID"].as_str().unwrap();
    let register = |name: &str| {
        let body = format!(r#"{{"Name": "{name}", "Port": 80}}"#);
        acl.call(
            "PUT",
            "/v1/agent/service/register",
            Some(secret),
            Some(&body),
        )
        .0
    };
    assert_eq!(register("web"), 200);
    assert_eq!(register("web-sidecar-proxy"), 200);
    assert_eq!(register("db"), 403);
    let listed = acl.json("GET", "/v1/acl/tokens?servicename=web", ROOT, None);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    // A role linking builtin/dns: its tokens read the catalog but write nothing.
    let role = acl.json(
        "PUT",
        "/v1/acl/role",
        ROOT,
        Some(r#"{"Name": "resolver", "TemplatedPolicies": [{"TemplateName": "builtin/dns"}]}"#),
    );
    assert_eq!(
        role["TemplatedPolicies"][0]["TemplateID"],
        "00000000-0000-0000-0000-000000000005"
    );
    assert!(role["TemplatedPolicies"][0]
        .get("TemplateVariables")
        .is_none());
    let reader = acl.json(
        "PUT",
        "/v1/acl/token",
        ROOT,
        Some(r#"{"Roles": [{"Name": "resolver"}]}"#),
    );
    let reader = reader["SecretID"].as_str().unwrap();
    let (status, _, _) = acl.call("GET", "/v1/catalog/service/web", Some(reader), None);
    assert_eq!(status, 200);
    let (status, _, _) = acl.call("PUT", "/v1/kv/x", Some(reader), Some("v"));
    assert_eq!(status, 403);

    // Refused writes, with Consul's texts, change nothing.
    let before = acl.json("GET", "/v1/acl/tokens", ROOT, None);
    for (path, body, text) in [
        (
            "/v1/acl/token",
            r#"{"TemplatedPolicies": [{"TemplateName": "builtin/service"}]}"#,
            "validation error for templated policy \"builtin/service\": 1 error occurred:\n\t* Invalid type. Expected: object, given: null\n\n",
        ),
        (
            "/v1/acl/token",
            r#"{"TemplatedPolicies": [{"TemplateName": "builtin/nope"}]}"#,
            "no such ACL templated policy with Name \"builtin/nope\"",
        ),
        (
            "/v1/acl/role",
            r#"{"Name": "bad", "TemplatedPolicies": [{"TemplateName": "builtin/node", "TemplateVariables": {"Name": "Bad Name"}}]}"#,
            "encountered role with invalid templated policy: node identity \"Bad Name\"  has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
        ),
    ] {
        let (status, _, answer) = acl.call("PUT", path, Some(ROOT), Some(body));
        assert_eq!((status, answer.as_str()), (500, text), "{body}");
    }
    let (status, _, answer) = acl.call(
        "PUT",
        "/v1/acl/token",
        Some(ROOT),
        Some(r#"{"TemplatedPolicies": [{"TemplateName": "builtin/dns", "Extra": 1}]}"#),
    );
    assert_eq!(
        (status, answer.as_str()),
        (400, "Token decoding failed: json: unknown field \"Extra\"")
    );
    let after: Value = acl.json("GET", "/v1/acl/tokens", ROOT, None);
    assert_eq!(before, after);
}

#[test]
fn the_cli_lists_reads_previews_and_links_templates() {
    let acl = Acl::start();
    let (code, out, err) = acl.cli_as_root(&["acl", "templated-policy", "list"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "builtin/api-gateway\nbuiltin/dns\nbuiltin/node\nbuiltin/nomad-client\nbuiltin/nomad-server\nbuiltin/service\n"
    );
    let (_, out, _) = acl.cli_as_root(&["acl", "templated-policy", "read", "-name", "builtin/dns"]);
    assert_eq!(
        out,
        "Name:            builtin/dns\nDescription:     Gives the token or role permissions for the Consul DNS to query services in the network.\nInput variables: None\nExample usage:\n\tlegate acl token create -templated-policy builtin/dns\n"
    );
    let (code, out, err) = acl.cli_as_root(&[
        "acl",
        "templated-policy",
        "preview",
        "-name",
        "builtin/node",
        "-var",
        "name:n1",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("ID:           0a6e6f6465"), "{out}");
    assert!(
        out.contains("Rules:\n\nnode \"n1\" {\n\tpolicy = \"write\"\n}"),
        "{out}"
    );

    // A token from the flags, shown with Consul's "Templated Policies:" lines.
    let (code, out, err) = acl.cli_as_root(&[
        "acl",
        "token",
        "create",
        "-templated-policy",
        "builtin/service",
        "-var",
        "name:web",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.ends_with(
            "Templated Policies:\n   builtin/service\n      Name: web\n      Datacenters: all\n"
        ),
        "{out}"
    );
    let accessor = out
        .lines()
        .find_map(|l| l.strip_prefix("AccessorID:"))
        .unwrap()
        .trim()
        .to_string();
    // Appending keeps what the token had; replacing does not.
    let (code, out, err) = acl.cli_as_root(&[
        "acl",
        "token",
        "update",
        "-id",
        &accessor,
        "-append-templated-policy",
        "builtin/dns",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("   builtin/service\n") && out.contains("   builtin/dns\n"),
        "{out}"
    );
    let (_, out, _) = acl.cli_as_root(&[
        "acl",
        "token",
        "update",
        "-id",
        &accessor,
        "-replace-templated-policy",
        "builtin/nomad-client",
    ]);
    assert!(
        out.contains("   builtin/nomad-client\n") && !out.contains("builtin/service"),
        "{out}"
    );

    // Bad flags: Consul's texts, nothing created.
    for (args, text) in [
        (
            vec!["acl", "token", "create", "-templated-policy", "builtin/service"],
            "validation error for templated policy \"builtin/service\"",
        ),
        (
            vec!["acl", "token", "create", "-templated-policy", "builtin/service", "-var", "name"],
            "malformed -var argument: \"name\", expecting VariableName:Value",
        ),
        (
            vec!["acl", "role", "create", "-name", "r"],
            "Cannot create a role without specifying -policy-name, -policy-id, -service-identity, -node-identity, -templated-policy-file or -templated-policy at least once",
        ),
        (
            vec!["acl", "templated-policy", "preview"],
            "Cannot preview a templated policy without specifying -name or -file",
        ),
    ] {
        let (code, _, err) = acl.cli_as_root(&args);
        assert_eq!(code, Some(1), "{args:?}");
        assert!(err.contains(text), "{args:?}: {err}");
    }
    let (code, out, err) = acl.cli_as_root(&[
        "acl",
        "role",
        "create",
        "-name",
        "gw",
        "-templated-policy",
        "builtin/api-gateway",
        "-var",
        "name:edge",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("Templated Policies:\n   builtin/api-gateway\n      Name: edge\n"),
        "{out}"
    );
}
