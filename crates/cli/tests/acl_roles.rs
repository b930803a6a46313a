//! The ACL CLI's roles and token changes through the binary, in Consul's
//! formats: `acl role create|read|update|list|delete` (by ID and by name),
//! `acl token clone` and `acl token update`, and their errors.

mod common;

use common::acl::Acl;
use serde_json::Value;

#[test]
fn roles_and_token_clone_and_update_through_the_cli() {
    let acl = Acl::start();
    let cli = |args: &[&str]| acl.cli_as_root(args);
    let (code, _, err) = cli(&[
        "acl",
        "policy",
        "create",
        "-name",
        "kv-read",
        "-rules",
        "key_prefix \"\" { policy = \"read\" }",
    ]);
    assert_eq!(code, Some(0), "{err}");

    // A role needs a name and something to grant.
    let (code, _, err) = cli(&["acl", "role", "create", "-policy-name", "kv-read"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Missing required '-name' flag"), "{err}");
    let (code, _, err) = cli(&["acl", "role", "create", "-name", "empty"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Cannot create a role without specifying -policy-name, -policy-id, -service-identity, -node-identity, -templated-policy-file or -templated-policy at least once"), "{err}");
    let (code, _, err) = cli(&[
        "acl",
        "role",
        "create",
        "-name",
        "x",
        "-policy-name",
        "nope",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Failed to create new role"), "{err}");

    let (code, out, err) = cli(&[
        "acl",
        "role",
        "create",
        "-name",
        "reader",
        "-description",
        "reads kv",
        "-policy-name",
        "kv-read",
        "-service-identity",
        "web:dc1",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("Name:         reader\nDescription:  reads kv\n"),
        "{out}"
    );
    assert!(
        out.contains("Policies:\n   ") && out.contains(" - kv-read\n"),
        "{out}"
    );
    assert!(
        out.contains("Service Identities:\n   web (Datacenters: dc1)\n"),
        "{out}"
    );
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("ID:           "))
        .unwrap()
        .to_string();

    // Read by ID and by name, in both formats.
    let (_, by_id, _) = cli(&["acl", "role", "read", "-id", &id]);
    let (_, by_name, _) = cli(&["acl", "role", "read", "-name", "reader"]);
    assert_eq!(by_id, by_name);
    let (_, json, _) = cli(&["acl", "role", "read", "-name", "reader", "-format", "json"]);
    let role: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(role["ID"], id.as_str());
    let (code, _, err) = cli(&["acl", "role", "read"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("Must specify either the -id or -name parameters"),
        "{err}"
    );

    // Update adds a node identity and keeps the rest.
    let (code, out, err) = cli(&[
        "acl",
        "role",
        "update",
        "-id",
        &id,
        "-node-identity",
        "n1:dc1",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("Node Identities:\n   n1 (Datacenter: dc1)\n"),
        "{out}"
    );
    assert!(
        out.contains(" - kv-read\n") && out.contains("web (Datacenters: dc1)"),
        "{out}"
    );

    // A token through the role, cloned, then updated.
    let (code, out, err) = cli(&[
        "acl",
        "token",
        "create",
        "-role-name",
        "reader",
        "-format",
        "json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let token: Value = serde_json::from_str(&out).unwrap();
    let accessor = token["AccessorID"].as_str().unwrap();
    let (code, out, err) = cli(&[
        "acl",
        "token",
        "clone",
        "-id",
        accessor,
        "-description",
        "copy",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("Token cloned successfully.\n"), "{out}");
    assert!(
        out.contains("Description:      copy\n") && out.contains(" - reader\n"),
        "{out}"
    );
    assert!(
        !out.contains(accessor),
        "a clone has its own AccessorID: {out}"
    );
    let (code, out, err) = cli(&[
        "acl",
        "token",
        "update",
        "-id",
        accessor,
        "-description",
        "now kv only",
        "-policy-name",
        "kv-read",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("Token updated successfully.\n"), "{out}");
    assert!(
        out.contains("Description:      now kv only\n") && out.contains(" - kv-read\n"),
        "{out}"
    );
    assert!(out.contains("Roles:\n"), "roles not named stay: {out}");
    let (code, _, err) = cli(&["acl", "token", "update", "-description", "x"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("Cannot update a token without specifying the -id parameter"),
        "{err}"
    );

    // List, then delete by name.
    let (_, out, _) = cli(&["acl", "role", "list"]);
    assert!(out.starts_with("reader:\n   ID:           "), "{out}");
    let (code, out, err) = cli(&["acl", "role", "delete", "-name", "reader"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("Role {id:?} deleted successfully"));
    let (code, _, err) = cli(&["acl", "role", "read", "-id", &id]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Error reading role"), "{err}");
}
